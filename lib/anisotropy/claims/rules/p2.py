"""The rules of Paper 2: layer profiles of anisotropy and intrinsic dimension, and their course along training. See
``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims import curves
from anisotropy.claims.curves import ENDS, MIDDLE  # noqa: F401 - the bell's regions, importable from here as before
from anisotropy.claims.rules.common import MIN_KEPT, Outcome, majority, over_runs, rule, too_few


# Paper 2: per-layer profiles (columns label, stack, layer, relative_depth, sigma1_share[, sigma1_share_no_first,
# first_position_measured][, step]). Every profile rule reads the bell measure of ``curves.bell``: the middle layers
# (relative depth within ``MIDDLE``) against the first and the last fifth of depth, never a single layer.

#: The reading of the sigma_1 share that the profile rules take: each sequence's first position left out, the usual
#: place of an attention sink. The protocol leaves special tokens out (``measure.taps``), so a tokenizer that opens
#: every text with one (Gemma's <bos>) already keeps that position out; for one that does not (SmolLM2, GPT-2) the
#: rules read ``sigma1_share_no_first``, so that every decoder is read the same way.
NO_FIRST = "sigma1_share_no_first"


def share_column(part: pd.DataFrame) -> str:
    """The column of the sigma_1 share a profile rule reads for one model's rows: ``NO_FIRST`` where the first
    position was measured (``first_position_measured``) and the frame has that reading, else ``sigma1_share``."""
    measured = "first_position_measured" in part and part["first_position_measured"].astype(bool).any()
    if measured and NO_FIRST in part and part[NO_FIRST].notna().all():
        return NO_FIRST
    return "sigma1_share"


def profile_curve(part: pd.DataFrame, column: str | None = None) -> curves.Curve:
    """One model's profile (rows: relative_depth and the share) as a curve over relative depth, of ``column``
    (default ``share_column``), with draws from its standard deviation over batches where the frame has it."""
    return curves.of_frame(part, column or share_column(part), x="relative_depth")


def profile_bell(part: pd.DataFrame, min_ratio: float = 1.5, band=MIDDLE,
                 column: str | None = None) -> tuple[bool | None, curves.Bell]:
    """One model's vote in ``bell_shaped`` (``curves.is_bell`` of its ``curves.bell``) and its bell measure."""
    b = curves.bell(profile_curve(part, column), band)
    return curves.is_bell(b, min_ratio), b


def _reading(part: pd.DataFrame) -> str:
    return ", first position out" if share_column(part) == NO_FIRST else ""


@rule
def bell_shaped(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                min_layers: int = 5, min_models: int = 2) -> Outcome:
    """Bell over depth (``curves.bell``): most models of ``stack`` have middle layers (relative depth within
    ``band``) whose mean is at least ``min_ratio`` times that of the higher end (the first and the last fifth of
    depth: a plateau reaching an end, or a single high layer, is no bell); a profile needs ``min_layers`` layers, a
    model whose ratio's interval straddles ``min_ratio`` is undecided, and the verdict needs ``min_models`` decided
    models. Each model is read with its first position left out (``share_column``)."""
    part = profiles[profiles["stack"] == stack]
    groups = [(name, p) for name, p in part.groupby("label", sort=False)]
    if not groups:
        return Outcome(None, f"no {stack}")
    groups = [(n, p) for n, p in groups if p["relative_depth"].nunique() >= min_layers]
    if len(groups) < min_models:
        return too_few(f"{stack}s with {min_layers} layers or more", len(groups), min_models)
    votes = [(name, *profile_bell(p, min_ratio, band), _reading(p)) for name, p in groups]
    flags = [v for _, v, _, _ in votes if v is not None]
    words = ", ".join(f"{n} {b.words()}{r}" + (" undecided" if v is None else "") for n, v, b, r in votes)
    if len(flags) < min_models:
        return Outcome(None, f"{len(flags)} of {len(votes)} {stack}s decided, at least {min_models} needed (a ratio "
                             f"whose interval straddles {min_ratio:g} is undecided): {words}")
    return Outcome(majority(flags), f"{sum(flags)} of {len(flags)} {stack}s bell-shaped (middle layers, relative "
                   f"depth {band[0]:g}-{band[1]:g}, over the higher end: {words})")


def _regions_of(profiles: pd.DataFrame, stack: str, min_layers: int = 1) -> list[tuple[str, curves.Bell]]:
    """(label, bell measure) of each model of ``stack`` with ``min_layers`` layers or more."""
    return [(str(name), curves.bell(profile_curve(p))) for name, p in
            profiles[profiles["stack"] == stack].groupby("label", sort=False)
            if p["relative_depth"].nunique() >= min_layers]


@rule
def more_uniform_than(profiles: pd.DataFrame, stack: str = "encoder", than: str = "decoder", min_layers: int = 3,
                      min_models: int = 2) -> Outcome:
    """Spread over depth (``curves.Bell.spread``): the models of ``stack`` spread their anisotropy more uniformly
    across depth than those of ``than``: the median over ``stack`` models of their highest region mean over their
    lowest (the first fifth of depth, the middle layers, the last fifth: no single layer decides it) is below the
    median over ``than`` models; a profile needs ``min_layers`` layers, each group ``min_models`` models."""
    def spreads(which):
        return [(name, b.spread) for name, b in _regions_of(profiles, which, min_layers)]

    mine, theirs = spreads(stack), spreads(than)
    if min(len(mine), len(theirs)) < min_models:
        return too_few(f"{stack}s and {than}s with {min_layers} layers or more",
                        min(len(mine), len(theirs)), min_models)
    a, b = float(np.median([r for _, r in mine])), float(np.median([r for _, r in theirs]))
    words = lambda group: ", ".join(f"{n} {r:.2f}" for n, r in group)  # noqa: E731
    return Outcome(a < b, f"highest / lowest region of depth, median over {stack}s {a:.2f} ({words(mine)}) against "
                          f"{than}s {b:.2f} ({words(theirs)})")


@rule
def decoders_above_encoders(profiles: pd.DataFrame, min_models: int = 2) -> Outcome:
    """Top over depth (``curves.Bell.top``): the median over decoders of their highest region mean (first fifth of
    depth, middle layers, last fifth: no single layer decides it) exceeds the median over encoders, with
    ``min_models`` of each."""
    tops = {stack: [b.top for _, b in _regions_of(profiles, stack)] for stack in ("decoder", "encoder")}
    if not tops["decoder"] or not tops["encoder"]:
        return Outcome(None, "needs both encoders and decoders")
    if min(len(v) for v in tops.values()) < min_models:
        return too_few("models of a stack", min(len(v) for v in tops.values()), min_models,
                        f"{len(tops['decoder'])} decoders, {len(tops['encoder'])} encoders")
    dec, enc = float(np.median(tops["decoder"])), float(np.median(tops["encoder"]))
    return Outcome(dec > enc, f"median of the highest region of depth: decoders {dec:.3f}, encoders {enc:.3f}")


def _decoder_runs(frame: pd.DataFrame, stack: str) -> pd.DataFrame | Outcome:
    if "stack" not in frame.columns:
        return Outcome(None, f"the frame does not say which runs are {stack}s")
    return frame[frame["stack"] == stack].rename(columns={"label": "run"})


def _placed(p: curves.Peak, by: float) -> bool | None:
    """The fitted peak lies no later than step ``by``: None where its bootstrap interval reaches past it."""
    if p.at > by:
        return False
    return None if p.high > by else True


@rule
def rise_then_fall(dimension: pd.DataFrame, min_change: float = 0.05, max_sse_ratio: float = 0.5,
                   peak_share: float = 0.5, stack: str = "decoder", min_runs: int = 2,
                   min_checkpoints: int = 4) -> Outcome:
    """Rise-then-fall (``curves.rises_then_falls``): per ``stack`` run, from the first checkpoint at or after its
    warm-up (``curves.growth_start``; after initialisation where the frame does not say the warm-up), the best
    up-then-down fit of the layer-averaged TwoNN dimension leaves at most ``max_sse_ratio`` of the best monotone fit's
    squared error, its peak is at least ``min_change`` (relative) above its first and its last value (also without
    any one checkpoint) and lies strictly inside (its bootstrap interval too), and the peak comes within the
    first ``peak_share`` of the run's steps (a rise in the initial stages, a decline as training progresses); on at
    least ``min_checkpoints`` checkpoints; holds in most of at least ``min_runs`` runs."""
    def test(part):
        c = curves.of_frame(part, "twonn_dimension")
        ok, p, why = curves.rises_then_falls(c, min_change, max_sse_ratio)
        words = f"{p.words()}, {p.at / c.x[-1]:.0%} of training" + (f" ({why})" if why else "")
        return (ok if ok is not True else _placed(p, peak_share * c.x[-1])), words

    runs = _decoder_runs(dimension, stack)
    return runs if isinstance(runs, Outcome) else over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def grows_then_stabilises(anisotropy: pd.DataFrame, min_growth: float = 1.2, max_late_change: float = 0.25,
                          stack: str = "decoder", min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Growth to a plateau (``curves.plateau``): per ``stack`` run, from the first checkpoint at or after its warm-up
    (``curves.growth_start``; the jump from random weights is no growth), every point of the last third of the
    checkpoints of the layer-averaged anisotropy is at least ``min_growth`` times its first value (a rise that falls
    back is no growth), and the last third moves by at most ``max_late_change`` of its level's rise above that first
    value; holds in most of at least ``min_runs`` runs."""
    def test(part):
        p = curves.plateau(curves.of_frame(part, "sigma1_share"))
        grows = p.lowest >= min_growth * p.start
        settles = p.rise > 0 and p.moves <= max_late_change * p.rise
        return bool(grows and settles), (f"{p.start:.3f} → last third from {p.lowest:.3f} to {p.highest:.3f} (level "
                                         f"{p.level:.3f}, rise {p.rise:.3f}, moves {p.moves:.3f})")

    runs = _decoder_runs(anisotropy, stack)
    return runs if isinstance(runs, Outcome) else over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def bell_builds_up(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                   min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2,
                   min_checkpoints: int = 3) -> Outcome:
    """The bell measure rises along training (``curves.bell`` at each checkpoint, read as ``curves.rises``): per
    ``stack`` run, from the first checkpoint at or after its warm-up (``curves.growth_start``), the ratio of the
    middle layers over the higher end rises along the whole series (Spearman's rho against the step at least
    ``min_rho``, at least ``min_kept`` of its gain kept at the end) and the last checkpoint's profile is a bell by
    ``bell_shaped``'s yardstick (``min_ratio``, ``band``); holds in most of at least ``min_runs`` runs with
    ``min_checkpoints`` checkpoints."""
    def test(part):
        by_step = [(step, curves.bell(profile_curve(p), band)) for step, p in part.groupby("step", sort=True)]
        ratios = curves.Curve(np.array([s for s, _ in by_step], float), np.array([b.ratio for _, b in by_step]))
        rising, t = curves.rises(ratios, min_rho, min_kept)
        last = curves.is_bell(by_step[-1][1], min_ratio)
        ok = False if False in (rising, last) else None if None in (rising, last) else True
        return ok, f"middle over the higher end {t.words()}; a bell at the end: {by_step[-1][1].words()}"

    runs = _decoder_runs(profiles, stack)
    if isinstance(runs, Outcome):
        return runs
    if runs.empty:
        return Outcome(None, f"no {stack} run")
    return over_runs(runs, test, min_runs, min_checkpoints=min_checkpoints, from_growth_start=True)


# Machina & Mercer: before / after the final norm (columns label, before, after)

@rule
def final_norm_lowers(final_norm: pd.DataFrame) -> Outcome:
    if final_norm.empty:
        return Outcome(None, "no model")
    lower = final_norm["after"] < final_norm["before"]
    return Outcome(bool(lower.all()), "; ".join(f"{r.label}: {r.before:.3f} → {r.after:.3f}"
                                                for r in final_norm.itertuples()))


# The book: the two measures on planted clouds (columns case, knob, mean_cosine, sigma1_share)

@rule
def drift_versus_spike(clouds: pd.DataFrame) -> Outcome:
    drift = clouds[clouds["case"] == "common drift"].sort_values("knob")
    spike = clouds[clouds["case"] == "one dominant direction"].sort_values("knob")
    if drift.empty or spike.empty:
        return Outcome(None, "a case is missing")
    a = drift["mean_cosine"].iloc[-1] > 0.5 and np.ptp(drift["sigma1_share"]) < 1e-3
    b = spike["sigma1_share"].iloc[-1] > 0.5 and spike["mean_cosine"].abs().max() < 0.05
    return Outcome(bool(a and b), f"drift: mean cosine up to {drift['mean_cosine'].iloc[-1]:.2f}, σ1 share range "
                                  f"{np.ptp(drift['sigma1_share']):.1e}; spike: σ1 share up to "
                                  f"{spike['sigma1_share'].iloc[-1]:.2f}, |mean cosine| at most "
                                  f"{spike['mean_cosine'].abs().max():.3f}")


@rule
def internal_layers_grow(profiles: pd.DataFrame, min_growth: float = 1.2, share: float = 1.0, stack: str = "decoder",
                         min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2,
                         min_checkpoints: int = 3) -> Outcome:
    """Paper 2, Section 4, a monotone rise per layer (``curves.rises``): per ``stack`` run, from the first checkpoint
    at or after its warm-up (``curves.growth_start``), the share of its internal layers (neither the first nor the
    last layer, nor the state after the final norm) whose sigma1 share rises along the whole series (Spearman's rho
    against the step at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the gain kept at the
    end) and ends at least ``min_growth`` times where it started; a run holds when that share is at least ``share``
    (undecided where the layers that cannot tell would decide it); holds in most of at least ``min_runs`` runs."""
    frame = profiles
    if "after_final_norm" in frame.columns:
        frame = frame[~frame["after_final_norm"].astype(bool)]
    runs = _decoder_runs(frame, stack)
    if isinstance(runs, Outcome):
        return runs

    def test(part):
        inner = part[(part["layer"] > part["layer"].min()) & (part["layer"] < part["layer"].max())]
        if inner.empty:
            return None, "no internal layer"
        flags, ratios = [], []
        for _, rows in inner.groupby("layer"):
            c = curves.of_frame(rows, "sigma1_share")
            rising, _ = curves.rises(c, min_rho, min_kept)
            ratios.append(c.y[-1] / c.y[0])
            flags.append(rising if rising is not True else bool(c.y[-1] >= min_growth * c.y[0]))
        grown, open_ = flags.count(True) / len(flags), flags.count(None) / len(flags)
        ok = True if grown >= share else None if grown + open_ >= share else False
        return ok, (f"{grown:.0%} of {len(flags)} internal layers rise along training and end ×{min_growth:g} or more"
                    + (f", {open_:.0%} cannot tell" if open_ else "") + f" (smallest end ratio ×{min(ratios):.2f})")

    return over_runs(runs, test, min_runs, min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def peaks_early(dimension: pd.DataFrame, share: float = 0.25, min_change: float = 0.05, stack: str = "decoder",
                min_runs: int = 2, min_checkpoints: int = 4) -> Outcome:
    """Paper 2, Section 4, the peak of a rise-then-fall placed in time (``curves.peak``): per ``stack`` run, from the
    first checkpoint at or after its warm-up (``curves.growth_start``), the best up-then-down fit of the
    layer-averaged TwoNN dimension rises by at least ``min_change`` (relative) from its first value to its peak, and
    the peak lies no later than ``share`` of the run's last step (undecided where its bootstrap interval straddles
    that step); both without any one checkpoint; holds in most of at least ``min_runs`` runs with
    ``min_checkpoints`` checkpoints."""
    runs = _decoder_runs(dimension, stack)
    if isinstance(runs, Outcome):
        return runs

    def test(part):
        c = curves.of_frame(part, "twonn_dimension")
        p, by = curves.peak(c), share * c.x[-1]
        words = f"{p.words()}; {p.at / c.x[-1]:.0%} of training"
        if p.rise < min_change or (placed := _placed(p, by)) is False:
            return False, words
        for i in range(c.n):
            q = curves.peak(c.without(i))
            if q.rise < min_change or q.at > by:
                return False, words + f" (not without step {int(c.x[i]):,})"
        return placed, words + ("" if placed else " (its interval reaches past the share)")

    return over_runs(runs, test, min_runs, min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def consistent_across_models(profiles: pd.DataFrame, stack: str = "encoder", max_ratio: float = 2.0,
                             min_models: int = 2) -> Outcome:
    """Paper 2, Section 4.1: the models of ``stack`` have layer-averaged sigma1 shares within a factor
    ``max_ratio`` of one another (largest over smallest), with at least ``min_models`` models."""
    part = profiles[profiles["stack"] == stack]
    if "after_final_norm" in part.columns:
        part = part[~part["after_final_norm"].astype(bool)]
    means = part.groupby("label", sort=False)["sigma1_share"].mean()
    if len(means) < min_models:
        return too_few(f"{stack}s", len(means), min_models)
    ratio = float(means.max() / means.min()) if means.min() > 0 else float("inf")
    return Outcome(ratio <= max_ratio, f"layer-averaged sigma1 share from {means.min():.3f} to {means.max():.3f} "
                   f"(×{ratio:.2f}; " + ", ".join(f"{n} {v:.3f}" for n, v in means.items()) + ")")
