"""The queries-and-keys page (Paper 1, Section 5): measuring a run's checkpoints with the page's parameters, its
heads, training records and per-run verdicts in words, and what it asks of a runtime."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from anisotropy import profiles
from anisotropy.data import images
from anisotropy.claims import learnt, words
from anisotropy.experiments import qk_dynamics as qk
from anisotropy.models import registry
from anisotropy.pages import budget
from anisotropy.training import trainer


def statistics(stages, datasets: dict, layers, release: bool = True, **common):
    """Per-head statistics of every checkpoint of a run (``experiments.qk_dynamics.step_statistics``) on the page's data set for
    the run's modality (``datasets``); ``common``: the page's sample and execution parameters."""
    return qk.step_statistics(stages, dataset=datasets[qk.modality(stages[0])], layers=layers, release=release,
                              **common)


def vectors(stages, heads, datasets: dict, fraction: float, max_vectors: int, **common):
    """Sampled queries and keys of ``heads`` at every checkpoint of a run (``experiments.qk_dynamics.step_vectors``) on the page's
    data set for the run's modality."""
    return qk.step_vectors(stages, heads, dataset=datasets[qk.modality(stages[0])], fraction=fraction,
                           max_vectors=max_vectors, **common)


def left_out_note(skipped) -> str:
    """The sentence that says which checkpoints could not be measured (``experiments.qk_dynamics.skipped``), or that
    every one was."""
    if not skipped:
        return "Every checkpoint of every run was measured."
    names = "; ".join(f"{s.ref.run} at step {s.ref.step:,}" for s in skipped)
    return (f"Left out, because they could not be had here: {names}. The claims about these runs are not decided "
            f"on what remains ({skipped[0].reason}).")


def label(head) -> str:
    """A (layer, head) pair, counted from 0, as the page names it: "layer 1, head 1"."""
    return f"layer {head[0] + 1}, head {head[1] + 1}"


def training_note(stages) -> str | None:
    """One line on how far a self-trained run learned (None for hub checkpoints, which keep no such record)."""
    if stages[0].revision is not None:
        return None
    state = trainer.training_state(stages[-1].source)
    first, last, base = state["validation"][0], state["validation"][-1], state["baselines"]
    text = (f"- **{stages[0].run}**: validation loss {last['loss']:.2f} nats at step {last['step']:,}, from "
            f"{first['loss']:.2f} at initialisation")
    if "unigram" in base:
        text += f"; a unigram model scores {base['unigram']:.2f}"
    else:
        text += f"; chance is {base['chance']:.2f}"
    if last.get("accuracy") is not None:
        text += f", accuracy {100 * last['accuracy']:.0f}% over {len(images.SHAPES)} classes"
    if not learnt.run_learnt(state):  # the book's one definition: LEARNT_NATS below that baseline
        text += (f" — less than {learnt.LEARNT_NATS} nats better than that baseline, so this run shows what early "
                 "optimisation does to attention, not what a model that has learned its task looks like")
    return text + "."


def common_last_words(row) -> str:
    """Among the heads outside the isotropic band at the end of a run (``row``: its ``alignment_summary`` row), the
    share aligned (cos > 0) rather than anti-aligned, in words."""
    if np.isnan(row["share_common_last"]):
        return "none lie outside it, so none are counted as aligned or anti-aligned"
    return f"{100 * row['share_common_last']:.0f}% are aligned (cos > 0) rather than anti-aligned"


def layer_ranges(last: pd.DataFrame) -> str:
    """The range of cos(Q̄, K̄) over each layer's heads (``last``: the rows of the last step, with ``layer`` and
    ``cos_qk``), layers counted from 1: "layer 1: -0.12 to +0.34; ..."."""
    per_layer = last.groupby("layer")["cos_qk"].agg(["min", "max"])
    return "; ".join(f"layer {layer + 1}: {r['min']:+.2f} to {r['max']:+.2f}" for layer, r in per_layer.iterrows())


def real_decoder_words(summary: pd.DataFrame | None) -> str:
    """One Markdown bullet per real decoder of ``summary`` (``alignment_summary`` of its untrained twin, step 0, and
    its released weights, step 1): the heads outside the isotropic band, the median |cos(Q̄, K̄)| and the mean
    attention entropy, untrained and pretrained."""
    if summary is None:
        return "No real decoder under this profile."
    return "\n".join(
        f"- **{r.run}**: outside the isotropic band {100 * r.share_beyond_null_first:.0f}% of heads untrained, "
        f"{100 * r.share_beyond_null_last:.0f}% pretrained, of which {100 * r.share_common_last:.0f}% with a positive "
        f"cosine (a common direction); median |cos(Q̄, K̄)| {r.median_abs_cos_first:.2f} untrained, "
        f"{r.median_abs_cos_last:.2f} pretrained; mean attention entropy {r.entropy_first:.2f} untrained, "
        f"{r.entropy_last:.2f} pretrained nats ({100 * r.entropy_change:+.0f}%)."
        for r in summary.itertuples())


def entropy_reading(test: pd.DataFrame) -> str:
    """How far the mean attention entropy falls at most over the runs of ``test`` (``three_part_test``'s rows), from
    the end of the warm-up, in words."""
    largest_drop = -100 * test["entropy_change"].min()
    return f"the mean attention entropy falls by up to {largest_drop:.0f}% of its value at the end of the warm-up"


def verdict_list(test: pd.DataFrame, what: dict) -> str:
    """One Markdown bullet per run of ``what`` (run -> what the run is on the page): its three-part test's verdict
    (``verdict`` of its row of ``test``)."""
    verdicts = {r.run: verdict(r) for r in test.itertuples()}
    return "\n".join(f"- **{run}** ({what[run]}): the finding {verdicts[run]}." for run in what)


def verdict_table(test: pd.DataFrame):
    """The three-part test of every run (``claims.rules.p1_s5.three_part_test``) as the page's table."""
    table = test.rename(columns={
        "run": "run", "first_step": "from step", "last_step": "last step", "median_abs_cos_first": "median |cos| first",
        "median_abs_cos_last": "median |cos| last", "share_beyond_null_first": "outside band first",
        "share_beyond_null_last": "outside band last", "share_common_last": "of which aligned",
        "entropy_first": "entropy first", "entropy_last": "entropy last", "holds": "finding holds"})
    table = table[["run", "from step", "last step", "median |cos| first", "median |cos| last", "outside band first",
                   "outside band last", "of which aligned", "entropy first", "entropy last", "finding holds"]]
    return table.style.format({
        "median |cos| first": "{:.2f}", "median |cos| last": "{:.2f}", "outside band first": "{:.0%}",
        "outside band last": "{:.0%}", "of which aligned": "{:.0%}", "entropy first": "{:.2f}",
        "entropy last": "{:.2f}", "from step": "{:,}", "last step": "{:,}"}).hide(axis="index")


def verdict(r) -> str:
    """A run's three-part test in words: "holds", "does not hold in full" or not testable (too few checkpoints), then
    its three numbers (first and last). ``r`` is a row of
    ``claims.rules.p1_s5.three_part_test`` (its ``holds`` is the per-run test the ledger's ``every_run_holds`` counts)."""
    parts = [f"the median |cos(Q̄, K̄)| goes from {r.median_abs_cos_first:.2f} to {r.median_abs_cos_last:.2f}",
             f"heads outside the isotropic band go from {100 * r.share_beyond_null_first:.0f}% to "
             f"{100 * r.share_beyond_null_last:.0f}%",
             f"the mean attention entropy changes by {100 * r.entropy_change:+.0f}%"]
    said = {True: words.HOLDS, False: f"{words.FAILS} in full"}.get(
        r.holds, f"is {words.UNTESTABLE} (too few checkpoints to read a trend)")
    return said + ": " + "; ".join(parts)


def shown_heads(picked: dict, figure_heads=()) -> list[tuple[str, tuple]]:
    """The heads of Figure 12 as (what the head is, (layer, head)), from ``experiments.qk_dynamics.pick_heads``: a head is called
    by its kind only when it qualifies as an example of it; a kind with no candidate at all gets no panel. Heads set
    by hand (``figure_heads``) keep the kind they were set for. Never empty: with no candidate of either kind, the head
    whose alignment grew most is shown, as an example of neither."""
    if figure_heads:
        return [(f"{name} direction", tuple(head)) for name, head in zip(("common", "opposite"), figure_heads)]
    shown = [(f"{name} direction" if picked["qualified"][name] else f"closest to {name} direction, not an example",
              picked[name]) for name in ("common", "opposite") if picked[name] is not None]
    if not shown:
        dyn = picked["dynamics"]
        best = dyn["gain"].idxmax()
        shown = [("an example of neither kind", (int(dyn.at[best, "layer"]), int(dyn.at[best, "head"])))]
    return shown


def example_head(shown) -> tuple[tuple, str]:
    """The head of Figure 11 and what it is: the first head of Figure 12 that is an example of its kind, else the first
    shown."""
    kind, head = next(((k, h) for k, h in shown if k.endswith("direction")), shown[0])
    return head, (f"the {kind.replace(' direction', '-direction')} head of Figure 12" if kind.endswith("direction")
                  else f"shown in Figure 12 as {kind}")


WAYS = {"common": "in a common direction", "opposite": "in opposite directions"}


def pick_note(picked: dict, band: float, min_displacement: float, by_hand: bool = False) -> str:
    """What the rule of ``experiments.qk_dynamics.pick_heads`` found in this run, in words, kind by kind; for a head shown though
    it does not qualify, which condition it misses."""
    if by_hand:
        return "In this profile the two heads are set by hand (the parameter figure_heads), not by the rule."
    dyn = picked["dynamics"].set_index(["layer", "head"])
    notes = []
    for name, sign in (("common", 1.0), ("opposite", -1.0)):
        if picked["qualified"][name]:
            continue
        if picked[name] is None:
            notes.append(f"No head whose alignment grew moved its two means {WAYS[name]} at all in this run, so no "
                         f"panel shows that kind.")
            continue
        row = dyn.loc[picked[name]]
        misses = []
        if sign * row["displacement_cos"] < min_displacement:
            misses.append(f"its displacement cosine is {row['displacement_cos']:+.4f}, short of "
                          f"{sign * min_displacement:+g}")
        if abs(row["cos_last"]) <= band:
            misses.append(f"it ends inside the isotropic band (|cos| {abs(row['cos_last']):.2f}, band "
                          f"{band:.2f})")
        notes.append(f"No head whose alignment grew moved its two means clearly {WAYS[name]} (a displacement cosine of "
                     f"at least {min_displacement:g} that way) and ended outside the isotropic band in this run. The "
                     f"panel marked \"closest to {name} direction\" shows the best-scoring head of that kind, "
                     f"{label(picked[name])}, which is not an example of it: {' and '.join(misses)}.")
    return " ".join(notes) or ("Both kinds of head exist in this run: each panel's head moved its two means clearly "
                               "that way and ended outside the isotropic band.")


def heads_text(shown, dynamics) -> str:
    """One sentence per head of Figure 12: its displacement cosine and final cos(Q̄, K̄). ``dynamics``:
    ``experiments.qk_dynamics.head_dynamics`` indexed by (layer, head)."""
    parts = []
    for kind, head in shown:
        what = (f"the {kind.replace(' direction', '-direction')} head ({label(head)})" if kind.endswith("direction")
                else f"{label(head)} ({kind})")
        parts.append(f"in {what} the displacements of the two means have cosine "
                     f"{dynamics.loc[head, 'displacement_cos']:+.2f} and the head ends at cos(Q̄, K̄) = "
                     f"{dynamics.loc[head, 'cos_last']:+.2f}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def heads_list(shown) -> str:
    """The heads of Figure 12 for a caption: "layer 1, head 2, opposite direction; ..."."""
    return "; ".join(f"{label(head)}, {kind}" for kind, head in shown)


def decoder_weights(name: str) -> str:
    """Where a real decoder's released weights come from, from its registry entry: the format it is converted from and,
    for a GGUF file, the quantisation its display name carries (GGUF's Q<bits>_... types), e.g. "SmolLM2-135M-Instruct:
    a GGUF file, 4-bit quantised (Q4_1), dequantised to float32"."""
    spec = registry.spec(name)
    quant = re.search(r"\((Q(\d+)[^)]*)\)", spec.display)
    base = spec.display[:quant.start()].strip() if quant else spec.display
    if not spec.converter:
        return f"{base}: the hub's weights"
    what = f"a {spec.converter.upper()} file"
    if quant:
        what += f", {quant.group(2)}-bit quantised ({quant.group(1)})"
    return f"{base}: {what}, dequantised to float32"


def paper_setup() -> dict:
    """The `paper` profile's encoder runs in words, from its block of ``profiles/paper.yml``: ``n_samples`` and
    ``seeds`` ("0-4", or a list when they are not consecutive)."""
    block = profiles.chapter_parameters("paper", "p1_s5_qk_training")
    seeds = sorted(block.get("seeds", []))
    consecutive = len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1))
    return {"n_samples": block.get("n_samples"),
            "seeds": f"{seeds[0]}-{seeds[-1]}" if consecutive else ", ".join(map(str, seeds))}


def span(values) -> str:
    """"0.12" for one value, "0.12 to 0.15" for several (smallest to largest), two decimals."""
    low, high = float(min(values)), float(max(values))
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f} to {high:.2f}"


def plan(p: dict, out: budget.Plan) -> None:
    """The page's encoder: every checkpoint of each MultiBERTs seed (released once measured; the first seed's are
    loaded again for the vector samples of the figures), or, when the encoder is a suite of the profile, its seeds
    trained (``qk_dynamics.runs``); each extension a suite of the profile trained with all its seeds
    (``qk_dynamics.runs(name, seeds=None)``); the text data set."""
    if p["encoder"] == "multiberts":
        for seed in p["seeds"]:
            revisions = p["revisions"] or registry.spec(f"multiberts-seed-{seed}").revisions
            out.checkpoints += [budget.Checkpoint(f"multiberts-seed-{seed}", r, p["n_samples"], p["max_length"],
                                                  batch=p["batch_size"], release=True,
                                                  passes=2 if seed == p["seeds"][0] else 1) for r in revisions]
    else:
        _train_suites(out, {p["encoder"]: p["seeds"]})
    _train_suites(out, {name: None for name in p.get("extensions") or []})
    out.data.append((p["datasets"]["text"], p["n_samples"]))


def _train_suites(out: budget.Plan, wanted: dict) -> None:
    """Add the training of the profile's suites ``{name: seeds or None (all)}`` to ``out`` (the suites of the
    profile's checkpoint_suites chapter, as ``training.recipes.suite_specs`` reads them)."""
    if not wanted:
        return
    specs = profiles.chapter_parameters(out.profile, "checkpoint_suites").get("suites", {})
    for name, seeds in wanted.items():
        if name in specs:
            spec = specs[name]
            out.train(spec, len([s for s in spec.get("seeds", [0]) if seeds is None or s in seeds]), suite=name)
