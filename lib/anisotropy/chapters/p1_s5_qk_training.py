"""The queries-and-keys page (Paper 1, Section 5): measuring a run's checkpoints with the page's parameters, and its
heads, training records and per-run verdicts in words."""

from __future__ import annotations

from .. import data_images, learnt, qk_dynamics as qk, training


def statistics(stages, datasets: dict, layers, release: bool = True, **common):
    """Per-head statistics of every checkpoint of a run (``qk_dynamics.step_statistics``) on the page's data set for
    the run's modality (``datasets``); ``common``: the page's sample and execution parameters."""
    return qk.step_statistics(stages, dataset=datasets[qk.modality(stages[0])], layers=layers, release=release,
                              **common)


def vectors(stages, heads, datasets: dict, fraction: float, max_vectors: int, **common):
    """Sampled queries and keys of ``heads`` at every checkpoint of a run (``qk_dynamics.step_vectors``) on the page's
    data set for the run's modality."""
    return qk.step_vectors(stages, heads, dataset=datasets[qk.modality(stages[0])], fraction=fraction,
                           max_vectors=max_vectors, **common)


def label(head) -> str:
    """A (layer, head) pair, counted from 0, as the page names it: "layer 1, head 1"."""
    return f"layer {head[0] + 1}, head {head[1] + 1}"


def training_note(stages) -> str | None:
    """One line on how far a self-trained run learned (None for hub checkpoints, which keep no such record)."""
    if stages[0].revision is not None:
        return None
    state = training.training_state(stages[-1].source)
    first, last, base = state["validation"][0], state["validation"][-1], state["baselines"]
    text = (f"- **{stages[0].run}**: validation loss {last['loss']:.2f} nats at step {last['step']:,}, from "
            f"{first['loss']:.2f} at initialisation")
    if "unigram" in base:
        text += f"; a unigram model scores {base['unigram']:.2f}"
    else:
        text += f"; chance is {base['chance']:.2f}"
    if last.get("accuracy") is not None:
        text += f", accuracy {100 * last['accuracy']:.0f}% over {len(data_images.SHAPES)} classes"
    if not learnt.run_learnt(state):  # the book's one definition: LEARNT_NATS below that baseline
        text += (f" — less than {learnt.LEARNT_NATS} nats better than that baseline, so this run shows what early "
                 "optimisation does to attention, not what a model that has learned its task looks like")
    return text + "."


def verdict(r) -> str:
    """A run's three-part test in words: "holds" or "does not hold in full", then its three numbers. ``r`` is a row of
    ``rules_p1_s5.three_part_test`` (its ``holds`` is the per-run test the ledger's ``every_run_holds`` counts)."""
    parts = [f"the median |cos(Q̄, K̄)| goes from {r.median_abs_cos_first:.2f} to {r.median_abs_cos_last:.2f}",
             f"heads outside the isotropic band go from {100 * r.share_beyond_null_first:.0f}% to "
             f"{100 * r.share_beyond_null_last:.0f}%",
             f"the mean attention entropy changes by {100 * r.entropy_change:+.0f}%"]
    return ("holds" if r.holds else "does not hold in full") + ": " + "; ".join(parts)
