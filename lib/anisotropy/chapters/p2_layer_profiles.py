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


def _test(claim_id: str) -> tuple[float, tuple[float, float]]:
    """(min_ratio, band) of the ledger's bell test, from the claim's params."""
    params = ledger.claim(claim_id).params
    return params["min_ratio"], tuple(params["band"])


def _verdict(flag: bool | None) -> str:
    return {True: "yes", False: "no", None: "undecided"}[flag]


def shapes(summary: pd.DataFrame, by=("label", "origin", "stack"), claim_id: str = "p2-f1-decoders-bell"
           ) -> pd.DataFrame:
    """One row per profile of ``summary``: the bell measure the ledger's claim ``claim_id`` reads
    (``rules.p2.profile_bell`` with its band and min_ratio, on the rule's reading of the share): the means of the
    first fifth of depth, of the middle layers and of the last fifth, the middle over the higher end with its
    interval over batches, and whether that is a bell by the ledger's test (yes, no, undecided). ``by``: the columns
    of ``summary`` that name a profile (those present)."""
    min_ratio, band = _test(claim_id)
    by = [c for c in by if c in summary.columns]
    rows = []
    for key, part in summary.groupby(by, sort=False):
        flag, b = p2.profile_bell(part, min_ratio, band)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))),
                     "n_layers": int(part["relative_depth"].nunique()),
                     "reading": "first position out" if p2.share_column(part) == p2.NO_FIRST else "as measured",
                     "first fifth": b.head, "middle": b.middle, "last fifth": b.tail, "middle over ends": b.ratio,
                     "interval": f"{b.low:.2f}-{b.high:.2f}" if b.low == b.low else "", "bell": _verdict(flag)})
    return pd.DataFrame(rows)


def describe(rows: pd.DataFrame) -> str:
    """How bell-shaped the profiles of ``rows`` (``shapes``, one per model) are, in one phrase ("no model" when
    empty)."""
    if rows.empty:
        return "no model"
    return (f"{int((rows['bell'] == 'yes').sum())} of {len(rows)} bell-shaped by the ledger's test, mean middle over "
            f"the higher end {rows['middle over ends'].mean():.2f}")


def profile_words(summary: pd.DataFrame, label: str, claim_id: str = "p2-f1-decoders-bell",
                  absent: str = "not measured under this profile") -> str:
    """One profile in words for a page: its values as measured from embeddings to last block, and the three region
    means the ledger's bell test reads (``shapes``)."""
    part = summary[summary["label"] == label]
    if part.empty:
        return absent
    _, band = _test(claim_id)
    _, b = p2.profile_bell(part, band=band)
    values = part.sort_values("relative_depth")["sigma1_share"]
    out = "first position left out, " if p2.share_column(part) == p2.NO_FIRST else ""
    return (f"{', '.join(f'{v:.3f}' for v in values)} from embeddings to last block; read by the ledger's test "
            f"({out}means over regions of depth): {b.head:.3f} in the first fifth, {b.middle:.3f} in the middle layers "
            f"(relative depth {band[0]:g}-{band[1]:g}), {b.tail:.3f} in the last fifth")


def bulge(summary: pd.DataFrame, label: str, claim_id: str = "p2-f1-decoders-bell") -> str:
    """Whether one model's profile (``summary`` rows of ``label``) is bell-shaped by the test the ledger's claim
    ``claim_id`` applies to each decoder (its own min_ratio and band, on the rule's reading of the share), with the
    number that decided it."""
    part = summary[summary["label"] == label]
    if part.empty:
        return "not measured under this profile"
    min_ratio, band = _test(claim_id)
    flag, b = p2.profile_bell(part, min_ratio, band)
    return (f"{_verdict(flag)}: its middle layers average {b.words()} times the higher of its two ends (the first "
            f"and last fifth of depth); the ledger's test of a bell asks for {min_ratio:g} times, with the middle "
            f"layers at relative depth {band[0]:g}-{band[1]:g}")


def bell_test(claim_id: str = "p2-f1-decoders-bell") -> str:
    """The test of a bell that the ledger's claim ``claim_id`` applies to each profile, in words, from its params."""
    min_ratio, (low, high) = _test(claim_id)
    return (f"its middle layers (relative depth {low:g} to {high:g}) average at least {min_ratio:g} times the higher "
            f"of its two ends (the mean of its first and of its last fifth of depth), so that neither a single high "
            f"layer nor a plateau reaching an end is a bell")


def sink_reading(summary: pd.DataFrame, robust: pd.DataFrame, label: str,
                 claim_id: str = "p2-f1-decoders-bell") -> str:
    """The other reading of one decoder's bell, shown beside the ledger's: with each sequence's first position
    kept (the usual place of an attention sink). Where the rule reads the share without the first position, the
    share as measured; where the protocol left a <bos> out, the same model measured with its special tokens kept
    (``with_first_position``'s rows in ``robust``); "" when there is no other reading."""
    part = summary[summary["label"] == label]
    if part.empty:
        return ""
    if p2.share_column(part) == p2.NO_FIRST:
        other = part
    else:
        other = robust[robust["label"] == f"{label}, special tokens kept"]
        if other.empty:
            return ""
    min_ratio, band = _test(claim_id)
    _, b = p2.profile_bell(other, min_ratio, band, column="sigma1_share")
    return f"with each sequence's first position kept (an attention sink's place), {b.words()} times"


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

def plan(p: dict, out: budget.Plan, metrics=batches.DEFAULT_METRICS, extra_states: int = 0,
         robust: bool = True) -> None:
    """What a Paper 2 page measures with its parameters ``p`` (this one, and the other Paper 2 pages through their own
    ``plan``): every model, and every checkpoint of a Pythia or Bloom series, reads ``n_texts`` texts (enwik8's
    windows are shorter than ``max_length``: ``budget.text_positions``), ``spectral.profile``'s ``extraction_batch``
    at a time; every hidden state (and ``extra_states`` more, e.g. a split final norm) pools ``batch_size`` x
    ``n_batches`` vectors (``spectral.measure``), measured ``batch_size`` at a time with ``metrics`` (and the robust
    readings of the sigma_1 share with ``robust``)."""
    texts_at_once = inspect.signature(spectral.profile).parameters["extraction_batch"].default
    dtype = p.get("dtype", "float32")
    names = list(p.get("pretrained", [])) + (list(p.get("models", []))
                                             if p.get("variant", "pretrained") == "pretrained" else [])
    host = dict(pool=p["batch_size"] * p["n_batches"], metric_batch=p["batch_size"], extra_states=extra_states,
                metrics=tuple(metrics), robust=robust)
    positions = budget.text_positions(p["source"], p["max_length"])
    out.checkpoints += [budget.Checkpoint(m, None, p["n_texts"], positions, dtype, texts_at_once, **host)
                        for m in names]
    for key in ("pythia", "bloom"):
        for name in p.get(f"{key}_models", []):
            revisions, _ = registry.checkpoint_revisions(name, p[f"{key}_revisions"])
            out.checkpoints += [budget.Checkpoint(name, r, p["n_texts"], positions, dtype, texts_at_once, True, **host)
                                for r in revisions]
    out.data.append((p["source"], p["n_texts"]))
