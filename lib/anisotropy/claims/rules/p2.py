"""The rules of Paper 2: layer profiles of anisotropy and intrinsic dimension, and their course along training. See
``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.rules.common import Outcome, majority, over_runs, rises, rule, run_ends, too_few


# Paper 2: per-layer profiles (columns label, stack, layer, relative_depth, sigma1_share[, step])
# "Middle layers" (Paper 2, Figure 1): the peak must sit in the interior band of relative depth, not merely off the
# two end layers (a peak in the second of 18 layers is not in the middle).
MIDDLE = (0.2, 0.8)


def _profile(part: pd.DataFrame, metric: str = "sigma1_share") -> pd.Series:
    return part.groupby("relative_depth")[metric].mean().sort_index()


#: The two ends of a profile a bell must stand above: the first and the last fifth of relative depth.
ENDS = 0.2


def _shape(profile: pd.Series, band=(0.0, 1.0)) -> tuple[float, bool, float]:
    """(peak / the higher of the means of the first and the last fifth of relative depth (``ENDS``; the end layer
    where a fifth holds no other), the peak lies strictly inside the stack and within ``band`` of relative depth,
    the relative depth of the peak). A plateau that reaches an end stands no higher than that end: no bell."""
    values = profile.to_numpy(float)
    depth_of = profile.index.to_numpy(float)
    i = int(np.nanargmax(values))
    depth = float(depth_of[i])
    inside = bool(0 < i < len(values) - 1 and band[0] <= depth <= band[1])
    head = values[depth_of <= depth_of[0] + ENDS * (depth_of[-1] - depth_of[0])]
    tail = values[depth_of >= depth_of[-1] - ENDS * (depth_of[-1] - depth_of[0])]
    return float(values[i] / max(head.mean(), tail.mean())), inside, depth


def bell(profile: pd.Series, min_ratio: float = 1.5, band=MIDDLE) -> tuple[bool, float, float]:
    """One profile's vote in ``bell_shaped``: (its peak lies inside the stack within ``band`` of relative depth and is
    at least ``min_ratio`` times each end's mean (first and last fifth of depth), that ratio, the relative depth of
    the peak)."""
    ratio, inside, depth = _shape(profile, band)
    return inside and ratio >= min_ratio, ratio, depth


def profile_bell(part: pd.DataFrame, min_ratio: float = 1.5, band=MIDDLE) -> tuple[bool, float, float]:
    """``bell`` of one model's rows (relative_depth, sigma1_share)."""
    return bell(_profile(part), min_ratio, band)


def _stack(frame: pd.DataFrame, stack: str) -> pd.DataFrame | None:
    """The rows of ``stack`` (encoder / decoder), or None when the frame does not say which stack a row is."""
    return frame[frame["stack"] == stack] if "stack" in frame.columns else None


@rule
def bell_shaped(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                min_layers: int = 5, min_models: int = 2) -> Outcome:
    """Most models of ``stack`` peak in the middle layers (relative depth within ``band``) with a peak at least
    ``min_ratio`` times the mean of each end (the first and the last fifth of depth: a plateau reaching an end is no
    bell); a profile needs ``min_layers`` layers (three of them inside the stack) and the verdict ``min_models``
    models."""
    part = profiles[profiles["stack"] == stack]
    curves = [(name, _profile(p)) for name, p in part.groupby("label", sort=False)]
    if not curves:
        return Outcome(None, f"no {stack}")
    curves = [(n, c) for n, c in curves if len(c) >= min_layers]
    if len(curves) < min_models:
        return too_few(f"{stack}s with {min_layers} layers or more", len(curves), min_models)
    votes = [(name, *bell(c, min_ratio, band)) for name, c in curves]
    flags = [v for _, v, _, _ in votes]
    return Outcome(majority(flags), f"{sum(flags)} of {len(flags)} {stack}s bell-shaped (peak over the higher end, depth of the "
                   f"peak; middle = {band[0]:g}-{band[1]:g}: "
                   + ", ".join(f"{n} {r:.2f} at {d:.2f}" for n, _, r, d in votes) + ")")


@rule
def more_uniform_than(profiles: pd.DataFrame, stack: str = "encoder", than: str = "decoder", min_layers: int = 3,
                      min_models: int = 2) -> Outcome:
    """The models of ``stack`` spread their anisotropy more uniformly across depth than those of ``than``: the median
    over ``stack`` models of (most anisotropic layer / least) is below the median over ``than`` models; a profile
    needs ``min_layers`` layers, each group ``min_models`` models."""
    def spreads(which):
        out = []
        for name, p in profiles[profiles["stack"] == which].groupby("label", sort=False):
            c = _profile(p)
            if len(c) >= min_layers:
                out.append((name, float(c.max() / c.min()) if c.min() > 0 else float("inf")))
        return out

    mine, theirs = spreads(stack), spreads(than)
    if min(len(mine), len(theirs)) < min_models:
        return too_few(f"{stack}s and {than}s with {min_layers} layers or more",
                        min(len(mine), len(theirs)), min_models)
    a, b = float(np.median([r for _, r in mine])), float(np.median([r for _, r in theirs]))
    words = lambda group: ", ".join(f"{n} {r:.2f}" for n, r in group)  # noqa: E731
    return Outcome(a < b, f"largest / smallest layer, median over {stack}s {a:.2f} ({words(mine)}) against "
                          f"{than}s {b:.2f} ({words(theirs)})")


@rule
def decoders_above_encoders(profiles: pd.DataFrame, min_models: int = 2) -> Outcome:
    """The median over decoders of their profile's peak exceeds the median over encoders, with ``min_models`` of
    each."""
    peaks = {stack: [float(_profile(p).max()) for _, p in profiles[profiles["stack"] == stack].groupby("label")]
             for stack in ("decoder", "encoder")}
    if not peaks["decoder"] or not peaks["encoder"]:
        return Outcome(None, "needs both encoders and decoders")
    if min(len(v) for v in peaks.values()) < min_models:
        return too_few("models of a stack", min(len(v) for v in peaks.values()), min_models,
                        f"{len(peaks['decoder'])} decoders, {len(peaks['encoder'])} encoders")
    dec, enc = float(np.median(peaks["decoder"])), float(np.median(peaks["encoder"]))
    return Outcome(dec > enc, f"median peak anisotropy: decoders {dec:.3f}, encoders {enc:.3f}")


def _decoder_runs(frame: pd.DataFrame, stack: str) -> pd.DataFrame | Outcome:
    part = _stack(frame, stack)
    if part is None:
        return Outcome(None, f"the frame does not say which runs are {stack}s")
    return part.rename(columns={"label": "run"})


@rule
def rise_then_fall(dimension: pd.DataFrame, min_change: float = 0.05, stack: str = "decoder", min_runs: int = 2,
                   min_checkpoints: int = 3) -> Outcome:
    """Per ``stack`` run, from where growth is measured (``growth_start``: the first checkpoint at or after the warm-up
    where the frame has a ``warmup`` column, else after initialisation): the peak lies strictly inside the series and
    is at least ``min_change`` (relative) above its first checkpoint and above its last; holds in most of at least
    ``min_runs`` runs."""
    def test(part):
        part = part.sort_values("step")
        v = part["twonn_dimension"].to_numpy(float)
        i = int(np.argmax(v))
        ok = bool(0 < i < len(v) - 1 and v[i] >= (1 + min_change) * v[0] and v[i] >= (1 + min_change) * v[-1])
        return ok, f"{v[0]:.1f} → {v[i]:.1f} (step {int(part['step'].iloc[i]):,}) → {v[-1]:.1f}"

    runs = _decoder_runs(dimension, stack)
    return runs if isinstance(runs, Outcome) else over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def grows_then_stabilises(anisotropy: pd.DataFrame, min_growth: float = 1.2, max_late_change: float = 0.25,
                          stack: str = "decoder", min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Per ``stack`` run, from where growth is measured (``growth_start``: the first checkpoint at or after the warm-up
    where the frame says it, else after initialisation; the jump from random weights is no growth): the
    layer-averaged anisotropy reaches ``min_growth`` times its first value and stays at least that high over the last
    third of the checkpoints (a rise that falls back to where it started is no growth), where it moves by at most
    ``max_late_change`` of that rise; holds in most of at least ``min_runs`` runs."""
    def test(part):
        part = part.sort_values("step")
        v = part["sigma1_share"].to_numpy(float)
        rise = v.max() - v[0]
        late = v[int(np.floor(2 * (len(v) - 1) / 3)):]
        grows = v.max() >= min_growth * v[0] and late.min() >= min_growth * v[0]
        settles = rise > 0 and (late.max() - late.min()) <= max_late_change * rise
        return bool(grows and settles), (f"{v[0]:.3f} → max {v.max():.3f}, last third from {late.min():.3f} to "
                                         f"{late.max():.3f} (within {late.max() - late.min():.3f}; rise {rise:.3f})")

    runs = _decoder_runs(anisotropy, stack)
    return runs if isinstance(runs, Outcome) else over_runs(runs, test, min_runs,
                                                             min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def bell_builds_up(profiles: pd.DataFrame, stack: str = "decoder", min_ratio: float = 1.5, band=MIDDLE,
                   min_runs: int = 2) -> Outcome:
    """Per ``stack`` run: the last checkpoint's profile is a bell by ``bell_shaped``'s yardstick (peak in ``band``,
    at least ``min_ratio`` times the ends) and its peak-to-ends ratio exceeds the first checkpoint's; holds in most
    of at least ``min_runs`` runs."""
    def test(part):
        first, last = run_ends(part)
        r0, _, _ = _shape(_profile(first), band)
        r1, inside, depth = _shape(_profile(last), band)
        return (bool(r1 > r0 and r1 >= min_ratio and inside),
                f"peak-to-ends {r0:.2f} → {r1:.2f}, last peak at depth {depth:.2f}")

    runs = _decoder_runs(profiles, stack)
    if isinstance(runs, Outcome):
        return runs
    if runs.empty:
        return Outcome(None, f"no {stack} run")
    return over_runs(runs, test, min_runs)


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
                         min_rho: float = 0.5, min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Paper 2, Section 4: per ``stack`` run, from where growth is measured (``growth_start``: after the warm-up where
    the frame says it, else after initialisation), the share of its internal layers (neither the first nor the last
    layer, nor the state after the final norm) whose sigma1 share rises along the whole series (Spearman's rho
    against the step at least ``min_rho``; a rise that falls back does not count) and ends at least ``min_growth``
    times where it started; a run holds when that share is at least ``share``; holds in most of at least ``min_runs``
    runs."""
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
        curves = inner.groupby(["layer", "step"])["sigma1_share"].mean().unstack("step").sort_index(axis=1)
        steps = curves.columns.to_numpy(float)
        ok = [rises(steps, row, min_rho) and row[-1] >= min_growth * row[0] for row in curves.to_numpy(float)]
        ratio = curves.iloc[:, -1] / curves.iloc[:, 0]
        grown = float(np.mean(ok))
        return grown >= share, (f"{grown:.0%} of {len(ok)} internal layers rise along training and end ×{min_growth:g} "
                                f"or more (smallest end ratio ×{float(ratio.min()):.2f})")

    return over_runs(runs, test, min_runs, min_checkpoints=min_checkpoints, from_growth_start=True)


@rule
def peaks_early(dimension: pd.DataFrame, share: float = 0.25, stack: str = "decoder", min_runs: int = 2,
                min_checkpoints: int = 3) -> Outcome:
    """Paper 2, Section 4: per ``stack`` run, from where growth is measured (``growth_start``: after the warm-up where
    the frame says it, else after initialisation), the layer-averaged TwoNN dimension is largest at a checkpoint after
    the first one and no later than ``share`` of the run's last step; holds in most of at least ``min_runs`` runs."""
    runs = _decoder_runs(dimension, stack)
    if isinstance(runs, Outcome):
        return runs

    def test(part):
        curve = part.groupby("step")["twonn_dimension"].mean().sort_index()
        peak = int(curve.idxmax())
        at = peak / curve.index[-1] if curve.index[-1] else float("nan")
        return bool(peak > curve.index[0] and at <= share), (f"largest {curve.max():.1f} at step {peak:,} "
                                                             f"({at:.0%} of training)")

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
