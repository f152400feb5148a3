"""The layer-profiles page (Paper 2, Figure 1): the shape of the profiles in words, and what Paper 2's protocol asks
of a runtime (``plan``, which the other Paper 2 pages call with their own metrics and states)."""

from __future__ import annotations

import inspect

import pandas as pd

from anisotropy.measure import batches
from anisotropy.claims import ledger
from anisotropy.experiments import spectral
from anisotropy.models import registry
from anisotropy.pages import budget, report
from anisotropy.claims.rules import p2


def describe(rows: pd.DataFrame) -> str:
    """How bell-shaped the profiles of ``rows`` (one per model: interior_peak, peak_to_ends, peak_depth) are, in one
    phrase ("no model" when empty)."""
    if rows.empty:
        return "no model"
    return (f"{int(rows['interior_peak'].sum())} of {len(rows)} peak inside the stack, mean peak-to-ends ratio "
            f"{rows['peak_to_ends'].mean():.2f}, mean peak depth {rows['peak_depth'].mean():.2f}")


def bulge(summary: pd.DataFrame, label: str, claim_id: str = "p2-f1-decoders-bell") -> str:
    """Whether one model's profile (``summary`` rows of ``label``) is bell-shaped by the test the ledger's claim
    ``claim_id`` applies to each decoder (its own min_ratio and band), with the numbers that decided it."""
    part = summary[summary["label"] == label]
    if part.empty:
        return "not measured under this profile"
    params = ledger.claim(claim_id).params
    min_ratio, band = params["min_ratio"], tuple(params["band"])
    bell, ratio, depth = p2.profile_bell(part, min_ratio, band)
    test = (f"its largest value is {ratio:.2f} times the higher of its two ends (the first and last fifth of depth), "
            f"at relative depth {depth:.2f}; the "
            f"ledger's test of a bell asks for {min_ratio:g} times, within relative depth {band[0]:g}-{band[1]:g}")
    return f"{'yes' if bell else 'no'}: {test}"


def bell_test(claim_id: str = "p2-f1-decoders-bell") -> str:
    """The test of a bell that the ledger's claim ``claim_id`` applies to each profile, in words, from its params."""
    params = ledger.claim(claim_id).params
    low, high = params["band"]
    return (f"its largest value lies inside the stack, between relative depths {low:g} and {high:g} (the middle "
            f"layers), and is at least {params['min_ratio']:g} times the mean of each end (its first and its last fifth "
            f"of depth, so that a plateau reaching an end is no bell)")


def speech_sample(frame: pd.DataFrame, n_clips: int, batch_size: int) -> str:
    """How many batches of how many vectors the speech models' layers (``frame`` rows labelled "(speech)") got, and
    how many frames and transcript tokens the ``n_clips`` clips gave each stack, in one phrase."""
    rows = frame[frame["label"].str.contains("(speech)", regex=False)]
    if rows.empty:
        return "no speech model is measured under this profile"
    counts = rows.groupby(["stack", "layer"])["batch"].nunique()
    seen = rows.groupby("stack")["n_seen"].min()
    got = (f"{int(counts.min())} batch{'es' if counts.min() != 1 else ''} of {batch_size:,} vectors per layer"
           + (f" (the paper's are {batches.BATCH_SIZE:,})" if batch_size != batches.BATCH_SIZE else ""))
    given = {"encoder": "audio frames", "decoder": "transcript tokens"}
    return got + f"; the {n_clips:,} clips give " + report.listing(
        f"{int(seen[stack]):,} {what}" for stack, what in given.items() if stack in seen)



def robust_words(frame: pd.DataFrame, band=(0.2, 0.8)) -> str:
    """Per model of ``frame`` (a layer summary with the robust shares), over its layers within ``band`` of relative
    depth, the medians of the three sigma_1 shares and of the first position's norm over the others', in words."""
    parts = []
    for label, rows in frame[frame["relative_depth"].between(*band)].groupby("label", sort=False):
        if "after_final_norm" in rows.columns:
            rows = rows[~rows["after_final_norm"].astype(bool)]
        if rows.empty or "sigma1_share_no_first" not in rows.columns:
            continue
        parts.append(f"{label} {rows['sigma1_share'].median():.3f} as measured, "
                     f"{rows['sigma1_share_no_first'].median():.3f} without the first position, "
                     f"{rows['sigma1_share_no_top_norms'].median():.3f} without the largest 1% of norms (the first "
                     f"position's norm {rows['first_norm_ratio'].median():.0f} times the others' median)")
    return "; ".join(parts)


def with_first_position(summary: pd.DataFrame, entries, models, by, **measure) -> pd.DataFrame:
    """The layer summary of ``models`` (registry names) for the first-position check: as measured, plus, for each
    decoder whose tokenizer opens every text with a special token that the protocol leaves out (<bos>: its
    ``first_position_measured`` is False), the same model measured again with its special tokens kept, labelled
    "..., special tokens kept" (``measure``: ``spectral.profiles``' keywords, as for the page's profiles)."""
    rows = summary[summary["model"].isin(models)]
    if "first_position_measured" not in rows.columns:
        return rows
    opened = rows[(rows["stack"] == "decoder") & ~rows["first_position_measured"].astype(bool)]["model"].unique()
    again = [{**e, "label": f"{e['label']}, special tokens kept"} for e in entries
             if e.get("model") in opened and e.get("variant", "pretrained") == "pretrained"]
    if not again:
        return rows
    frame, _ = spectral.profiles(again, keep_special=True, **measure)
    return pd.concat([rows, spectral.summary(frame, by=by)], ignore_index=True) if len(frame) else rows


# ---- what the page asks of a runtime (``chapters.plans``) -------------------------------------------------------------

def plan(p: dict, out: budget.Plan, metrics=batches.DEFAULT_METRICS, extra_states: int = 0) -> None:
    """What a Paper 2 page measures with its parameters ``p`` (this one, and the other Paper 2 pages through their own
    ``plan``): every model, and every checkpoint of a Pythia or Bloom series, reads ``n_texts`` texts (enwik8's
    windows are shorter than ``max_length``: ``budget.text_positions``), ``spectral.profile``'s ``extraction_batch``
    at a time; every hidden state (and ``extra_states`` more, e.g. a split final norm) pools ``batch_size`` x
    ``n_batches`` vectors (``spectral.measure``), measured ``batch_size`` at a time with ``metrics``. The models of
    ``untrained`` (and of ``models`` when ``variant`` is "untrained") are measured the same way with random weights
    at true size, nothing downloaded, pooling ``untrained_n_batches`` (``models_n_batches``) batches."""
    texts_at_once = inspect.signature(spectral.profile).parameters["extraction_batch"].default
    dtype = p.get("dtype", "float32")
    on_cpu = p.get("device") == "cpu"
    variant = p.get("variant", "pretrained")
    named = list(p.get("models", []))
    names = [(m, "pretrained", p["n_batches"], "n_batches") for m in p.get("pretrained", [])]
    names += [(m, "pretrained", p["n_batches"], "n_batches") for m in (named if variant == "pretrained" else [])]
    names += [(m, "untrained", p.get("untrained_n_batches", 1), "untrained_n_batches") for m in p.get("untrained", [])]
    names += [(m, "untrained", p.get("models_n_batches", 1), "models_n_batches")
              for m in (named if variant == "untrained" else [])]
    positions = budget.text_positions(p["source"], p["max_length"])

    def host(n_batches: int, knob: str) -> dict:
        return dict(pool=p["batch_size"] * n_batches, metric_batch=p["batch_size"], extra_states=extra_states,
                    metrics=tuple(metrics), on_cpu=on_cpu, sized_by=(knob, "batch_size", "n_texts", "max_length"))

    out.checkpoints += [budget.Checkpoint(m, None, p["n_texts"], positions, dtype, texts_at_once, variant=v,
                                          **host(n, knob)) for m, v, n, knob in names]
    for key in ("pythia", "bloom"):
        for name in p.get(f"{key}_models", []):
            revisions, _ = registry.checkpoint_revisions(name, p[f"{key}_revisions"])
            out.checkpoints += [budget.Checkpoint(name, r, p["n_texts"], positions, dtype, texts_at_once, True,
                                                  **host(p["n_batches"], "n_batches")) for r in revisions]
    out.data.append((p["source"], p["n_texts"]))
