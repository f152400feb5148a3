"""The rules of Paper 1's Appendix B (the isotropic null) and Section 3 (anisotropy in every modality; drift and
anisotropy). See ``rules`` for what a rule is.

Every rule that reads a layer's mean cosine reads it against that layer's isotropic reference (``reference``: 0 for a
layer with signed outputs, the null of its own support for a non-negative one, as after a ReLU), through ``excess``,
and against a threshold with its interval: a layer, model or group counts as above a threshold only when its whole
interval is. The rules that decide both ways from intervals (``models_above_null``, ``majority_isotropic``,
``falls_with_depth``, ``group_above``, ``only_exception``) count it as below only when its whole interval is, and
leave it undecided in between.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.curves import spearman_interval  # the one reading of a rank correlation's interval
from anisotropy.claims.rules.common import Outcome, per_model, spearman, too_few, rule


# Appendix B

@rule
def null_concentrates(quantiles: pd.DataFrame, tolerance: float = 0.02) -> Outcome:
    """The exact isotropic q95 decreases with d and sqrt(d) * q95 approaches the Gaussian limit at the largest d."""
    from scipy.stats import norm

    q = quantiles.sort_values("d")
    if len(q) < 2:
        return Outcome(None, "fewer than two dimensions")
    decreasing = bool((np.diff(q["exact_q95"].to_numpy()) < 0).all())
    d = float(q["d"].iloc[-1])
    scaled = float(np.sqrt(d) * q["exact_q95"].iloc[-1])
    limit = float(norm.ppf(0.95))
    close = abs(scaled / limit - 1) <= tolerance
    return Outcome(decreasing and close, f"√d·q95 = {scaled:.3f} at d = {d:,.0f} (limit {limit:.3f}); "
                                         f"{'decreasing' if decreasing else 'not decreasing'} in d")


@rule
def broad_at_small_d(quantiles: pd.DataFrame, d: int = 16, min_share: float = 0.25) -> Outcome:
    """Appendix B at d = ``d``: the central 90% of the isotropic cosine, [-q95, q95] (the exact law is symmetric),
    covers at least ``min_share`` of the possible spectrum [-1, 1], i.e. q95 >= ``min_share``."""
    row = quantiles[quantiles["d"] == d]
    if row.empty:
        return Outcome(None, f"no exact quantile at d = {d}")
    q95 = float(row["exact_q95"].iloc[0])
    return Outcome(q95 >= min_share, f"at d = {d} the central 90% of the isotropic cosine is [{-q95:.3f}, {q95:.3f}], "
                                     f"{q95:.0%} of [-1, 1] (at least {min_share:.0%} asked)")


@rule
def models_above_null(measured: pd.DataFrame) -> Outcome:
    """Every model's layer-averaged mean cosine above its layers' isotropic reference (``excess``; columns
    ``mean_cosine``, and where the summary has them ``mean_cosine_low`` / ``_high``, the average of its layers'
    interval ends, and ``reference``) exceeds the isotropic q95 of its dimension, its whole interval; does not hold
    when some model's whole interval is at or below it, undecided otherwise."""
    if measured.empty:
        return Outcome(None, "no model")
    low, high, point = (excess(measured, end) for end in ("low", "high", "point"))
    above, below = low > measured["null_q95"], high <= measured["null_q95"]
    ratio = point / measured["null_q95"]
    unclear = measured.loc[~above & ~below, "label"].tolist()
    words = (f"{int(above.sum())} of {len(measured)} models above (mean cosine / q95 from {ratio.min():.1f} to "
             f"{ratio.max():.1f})" + (f"; at or below: {', '.join(measured.loc[below, 'label'])}" if below.any()
                                     else "")
             + (f"; interval across the q95: {', '.join(unclear)}" if unclear else ""))
    return Outcome(True if above.all() else False if below.any() else None, words)


# Paper 1, Section 3: layer-wise mean cosines (columns label, layer, mean_cosine, null_q95, family; where the page
# computed them, the interval mean_cosine_low / _high from resampling examples, and nonnegative / null_support)


def lower(p: pd.DataFrame) -> pd.Series:
    """Each layer's mean cosine as read against a floor: its interval's lower end where there is one (a layer
    counts as above a threshold only when its whole interval is), else the point estimate."""
    low = p["mean_cosine_low"] if "mean_cosine_low" in p else pd.Series(np.nan, index=p.index)
    return low.where(low.notna(), p["mean_cosine"])


def upper(p: pd.DataFrame) -> pd.Series:
    """Each layer's mean cosine as read against a ceiling: its interval's upper end where there is one, else the
    point estimate."""
    high = p["mean_cosine_high"] if "mean_cosine_high" in p else pd.Series(np.nan, index=p.index)
    return high.where(high.notna(), p["mean_cosine"])


def reference(p: pd.DataFrame) -> pd.Series:
    """Each layer's isotropic mean cosine: 0 (isotropic Gaussian directions), or, for a layer whose outputs are all
    non-negative (post-ReLU), ``null_support``: the mean cosine of vectors with its own pooled distribution of
    values and no preferred direction (``measure.baseline.support_null_cosine``). A model summary (one row per model)
    carries the mean of its layers' references as ``reference``."""
    if "reference" in p and not {"nonnegative", "null_support"} <= set(p.columns):
        return p["reference"].astype(float).fillna(0.0)
    if "nonnegative" not in p or "null_support" not in p:
        return pd.Series(0.0, index=p.index)
    return p["null_support"].where(p["nonnegative"].astype(bool), 0.0).fillna(0.0)


def excess(p: pd.DataFrame, end: str = "point") -> pd.Series:
    """Each layer's mean cosine above its isotropic ``reference``: at its interval's lower end (``end="low"``, read
    against a floor), its upper end (``"high"``, against a ceiling) or the point estimate (``"point"``). A signed
    layer's excess is its mean cosine; a post-ReLU layer's is what remains once the cosine that non-negative
    coordinates give with no preferred direction is taken out."""
    value = {"low": lower, "high": upper, "point": lambda q: q["mean_cosine"]}[end](p)
    return value - reference(p)


def above_null(p: pd.DataFrame) -> pd.Series:
    """Whether each layer is anisotropic in Appendix B's sense: its ``excess`` over its reference, its whole interval,
    above the isotropic 95th percentile of its dimension. For a non-negative layer that percentile stands for the
    spread of its support null, which is no wider for rectified Gaussian coordinates (standard deviation about
    0.74/sqrt(d) against 1/sqrt(d))."""
    return excess(p, "low") > p["null_q95"]


@rule
def most_layers_above_null(layers: pd.DataFrame, share: float = 0.5) -> Outcome:
    """Every model has at least ``share`` of its layers ``above_null``."""
    parts = [(name, float(above_null(p).mean())) for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(s >= share for _, s in parts),
                   "share of layers (their whole interval, above their isotropic reference) above the isotropic q95: "
                   + ", ".join(f"{n} {s:.0%}" for n, s in parts))


@rule
def some_layer_above_null(layers: pd.DataFrame, at_least: int = 1) -> Outcome:
    """Every model has at least ``at_least`` layers ``above_null`` (Paper 1's "anisotropic in at least one of their
    layers")."""
    parts = [(name, int(above_null(p).sum()), len(p)) for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(k >= at_least for _, k, _ in parts),
                   "layers (their whole interval) above the isotropic q95: " + ", ".join(f"{n} {k} of {t}" for n, k, t in parts))


@rule
def every_layer_above(layers: pd.DataFrame, threshold: float = 0.2) -> Outcome:
    """Every layer of every model has a mean cosine above ``threshold`` over its isotropic reference (``excess``),
    its whole interval where it has one."""
    if layers.empty:
        return Outcome(None, "no model")
    floor = excess(layers, "low")
    at = floor.idxmin()
    low, ref = layers.loc[at], float(reference(layers).loc[at])
    return Outcome(bool(floor.min() > threshold),
                   f"lowest layer mean cosine {low['mean_cosine']:.3f} (interval from {lower(layers).loc[at]:.3f}"
                   + (f", above its isotropic reference {ref:.3f}: {floor.min():.3f}" if ref else "")
                   + f"; {low['label']}, layer {int(low['layer'])}), against {threshold:g}")


@rule
def close_to_isotropic(layers: pd.DataFrame, threshold: float = 0.1) -> Outcome:
    """Every layer of every model has |mean cosine - its isotropic reference| (``excess``) below ``threshold``, its
    whole interval where it has one."""
    parts = [(name, float(pd.concat([excess(p, "low").abs(), excess(p, "high").abs()], axis=1).max(axis=1).max()))
             for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(v < threshold for _, v in parts),
                   "largest |layer mean cosine - its isotropic reference| (interval ends): "
                   + ", ".join(f"{n} {v:.3f}" for n, v in parts) + f" (threshold {threshold:g})")


@rule
def majority_isotropic(layers: pd.DataFrame, threshold: float = 0.1, min_models: int = 2) -> Outcome:
    """More than half of the models are close to isotropic: the median over their layers of the ``excess`` over the
    isotropic reference (0, or the support-fitting null of a non-negative layer), read at each layer's interval
    upper end, below ``threshold``. Does not hold when at least half are not, their median read at the lower ends at
    or above it; undecided in between ("most": at least ``min_models`` models, since the majority of one model is
    that model)."""
    parts = []
    for name, p in per_model(layers):
        parts.append((name, float(excess(p, "high").median()), float(excess(p, "low").median()),
                      int(p["nonnegative"].astype(bool).sum()) if "nonnegative" in p else 0, len(p)))
    if len(parts) < min_models:
        return too_few("models", len(parts), min_models)
    isotropic = sum(high < threshold for _, high, _, _, _ in parts)
    not_isotropic = sum(low >= threshold for _, _, low, _, _ in parts)
    holds = True if isotropic > len(parts) / 2 else False if not_isotropic >= len(parts) / 2 else None
    return Outcome(holds, f"{isotropic} of {len(parts)} below {threshold:g}, {not_isotropic} at or above it (median "
                   "over layers of the mean cosine above its isotropic reference, interval ends: " + ", ".join(
                       f"{n} {lo:+.3f} to {hi:+.3f} ({k} of {t} layers non-negative)" for n, hi, lo, k, t in parts)
                   + ")")


@rule
def falls_with_depth(layers: pd.DataFrame, min_layers: int = 4, level: float = 0.95) -> Outcome:
    """Per model, the whole curve falls with depth: Spearman's rho of depth and the layers' ``excess`` over their
    isotropic reference has its ``level`` interval (``spearman_interval``) below 0, and the fall is kept at the end
    (the last layer's whole interval below the first's), on at least ``min_layers`` layers. Does not hold when a
    model's curve rises (its rho interval above 0, or its last layer's interval above its first's); undecided
    otherwise: a curve that falls and rises again ([0.50, 0.55, 0.60, 0.10, 0.49]) is no fall."""
    parts = []
    for name, p in per_model(layers):
        if len(p) < min_layers:
            return too_few(f"layers in {name}", len(p), min_layers)
        point, low, high = excess(p, "point"), excess(p, "low"), excess(p, "high")
        rho = spearman(p["layer"], point)
        rho_low, rho_high = spearman_interval(rho, len(p), level)
        kept, rose = bool(high.iloc[-1] < low.iloc[0]), bool(low.iloc[-1] > high.iloc[0])
        verdict = True if rho_high < 0 and kept else False if rho_low > 0 or rose else None
        parts.append((name, rho, rho_low, rho_high, float(point.iloc[0]), float(point.iloc[-1]), verdict))
    if not parts:
        return Outcome(None, "no model")
    verdicts = [p[-1] for p in parts]
    holds = True if all(v is True for v in verdicts) else False if any(v is False for v in verdicts) else None
    return Outcome(holds, "; ".join(
        f"{n}: Spearman ρ(depth, mean cosine above its isotropic reference) {rho:+.2f} ({level:.0%} interval "
        f"{lo:+.2f} to {hi:+.2f}), first {first:.3f}, last {last:.3f}" for n, rho, lo, hi, first, last, _ in parts))


def _group(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    keep = pd.Series(False, index=frame.index)
    if spec.get("models"):
        keep |= frame["model"].isin(spec["models"])
    if spec.get("families"):
        keep |= frame["family"].isin(spec["families"])
    return frame[keep]


@rule
def group_above(layers: pd.DataFrame, high: dict, low: dict, min_models: int = 2) -> Outcome:
    """The mean over the ``high`` group's models of their layer-averaged ``excess`` over the isotropic reference
    exceeds the ``low`` group's (groups by ``models`` or ``families``), each group holding at least ``min_models``
    models (one model against one compares two draws, not two kinds of model). Intervals: a group's mean read at its
    layers' interval ends (lower ends for the high group, upper ends for the low one) must be separated; does not
    hold when they are separated the other way, undecided when they overlap."""
    groups = []
    for spec in (high, low):
        part = _group(layers, spec)
        frame = pd.DataFrame({"label": part["label"], **{end: excess(part, end) for end in ("point", "low", "high")}})
        groups.append(frame.groupby("label", sort=False)[["point", "low", "high"]].mean())
    if groups[0].empty or groups[1].empty:
        return Outcome(None, "one of the two groups was not measured")
    if min(len(g) for g in groups) < min_models:
        return too_few("models in a group", min(len(g) for g in groups), min_models,
                        f"{len(groups[0])} against {len(groups[1])}")
    a, b = groups[0].mean(), groups[1].mean()
    holds = True if a["low"] > b["high"] else False if a["high"] < b["low"] else None
    words = lambda g: ", ".join(f"{n} {v:.3f}" for n, v in g["point"].items())  # noqa: E731
    return Outcome(holds, f"{a['point']:.3f} (interval {a['low']:.3f} to {a['high']:.3f}; {words(groups[0])}) against "
                   f"{b['point']:.3f} ({b['low']:.3f} to {b['high']:.3f}; {words(groups[1])}), mean cosines above "
                   "their layers' isotropic reference")


# Paper 1, Section 3.3: correlations (columns label, family, spearman, spearman_p, n_layers)

@rule
def drift_correlated(corr: pd.DataFrame, alpha: float = 0.05, share: float = 0.5, min_layers: int = 6,
                     min_models: int = 2) -> Outcome:
    """At least ``share`` of the Transformers have Spearman rho > 0 with p < ``alpha`` across their layers. A model
    with fewer than ``min_layers`` layers is left out (with five points, p < 0.05 needs a perfect ordering), and
    the verdict needs ``min_models`` Transformers left."""
    valid = corr.dropna(subset=["spearman_p"])
    valid = valid[valid["family"] != "cnn"]
    short = valid[valid["n_layers"] < min_layers]
    valid = valid[valid["n_layers"] >= min_layers]
    if len(valid) < min_models:
        return too_few(f"Transformers with {min_layers} layers or more", len(valid), min_models)
    sig = (valid["spearman_p"] < alpha) & (valid["spearman"] > 0)
    return Outcome(bool(sig.mean() >= share), f"{int(sig.sum())} of {len(valid)} Transformers significantly positive"
                   + (f" (not: {', '.join(valid.loc[~sig, 'label'])})" if (~sig).any() else "")
                   + (f"; left out, too few layers: {', '.join(short['label'])}" if len(short) else ""))


@rule
def drift_contrast(corr: pd.DataFrame, alpha: float = 0.05, max_rho: float = 0.5, level: float = 0.95,
                   min_models: int = 2, cnn_families=("cnn",), than_families=None) -> Outcome:
    """CNNs show no drift correlation where Transformers do. A test that is not significant is no evidence of no
    correlation: a CNN counts as *without* one only when the upper end of the ``level`` interval of its rho
    (``spearman_interval``) is below ``max_rho``, as *with* one when rho > 0 at p < ``alpha``, and as undecided
    otherwise (4-5 stage points give intervals wider than the whole range). Holds when at least ``min_models``
    CNNs are decided, most of them without, and a larger share of Transformers than of CNNs is significantly
    positive; does not hold when most decided CNNs have one, or the Transformers' share is not larger. The
    Transformers are those of ``than_families`` where it is given (the paper's "Transformers-based models in the same
    modality": the vision Transformers), every other model otherwise."""
    valid = corr.dropna(subset=["spearman_p"])
    is_cnn = valid["family"].isin(list(cnn_families))
    cnn = valid[is_cnn]
    transformers = valid[~is_cnn] if than_families is None else valid[valid["family"].isin(list(than_families))]
    if cnn.empty or transformers.empty:
        return Outcome(None, "needs both CNNs and Transformers" + (
            f" of the families {', '.join(than_families)}" if than_families is not None else ""))
    positive = lambda f: (f["spearman_p"] < alpha) & (f["spearman"] > 0)  # noqa: E731
    upper = np.array([spearman_interval(r, int(n), level)[1] for r, n in zip(cnn["spearman"], cnn["n_layers"])])
    without, with_ = upper < max_rho, positive(cnn).to_numpy()
    decided = without | with_
    words = ", ".join(f"{name}: ρ {r:+.2f} over {int(n)} layers, {level:.0%} interval up to {u:.2f}"
                      for name, r, n, u in zip(cnn["label"], cnn["spearman"], cnn["n_layers"], upper))
    if decided.sum() < min_models:
        return too_few("CNNs with enough layers to tell no correlation from too few points", int(decided.sum()),
                        min_models, words)
    cnn_share, tr_share = float(with_.mean()), float(positive(transformers).mean())
    return Outcome(bool(without.sum() > decided.sum() / 2 and cnn_share < tr_share),
                   f"{int(without.sum())} of {int(decided.sum())} decided CNNs without a drift correlation "
                   f"(ρ below {max_rho:g}); significantly positive: {cnn_share:.0%} of {len(cnn)} CNNs, "
                   f"{tr_share:.0%} of {len(transformers)} "
                   f"{'Transformers' if than_families is None else ' or '.join(than_families) + ' models'} ({words})")



@rule
def drift_correlated_pearson(corr: pd.DataFrame, **params) -> Outcome:
    """Paper 1, Appendix A (Figure 16): ``drift_correlated`` with Pearson's r and its p-value in place of
    Spearman's rho (columns pearson, pearson_p of ``experiments.layerwise.drift_correlations``)."""
    if not {"pearson", "pearson_p"} <= set(corr.columns):
        return Outcome(None, "no Pearson correlation in the frame")
    out = drift_correlated(corr.assign(spearman=corr["pearson"], spearman_p=corr["pearson_p"]), **params)
    return Outcome(out.holds, f"Pearson's r: {out.value}")


# Paper 1, Section 3 and Appendix A, re-read: the exceptions the text names

@rule
def part_above(layers: pd.DataFrame, part: str = "decoder", threshold: float = 0.5) -> Outcome:
    """Every model's ``part`` (the layers of its decoder, say) has a median mean cosine above ``threshold`` over its
    isotropic reference (``excess``), each layer read at its interval's lower end where it has one."""
    if "part" not in layers.columns:
        return Outcome(None, "the frame does not say which part of a model a layer is")
    rows = layers[layers["part"] == part]
    parts = [(name, float(excess(p, "low").median())) for name, p in per_model(rows)]
    if not parts:
        return Outcome(None, f"no {part} measured")
    return Outcome(all(v > threshold for _, v in parts), f"median {part} layer mean cosine: "
                   + ", ".join(f"{n} {v:.3f}" for n, v in parts) + f" (threshold {threshold:g})")


@rule
def only_exception(layers: pd.DataFrame, exception: str, threshold: float = 0.1) -> Outcome:
    """Among the models, ``exception`` (a registry name) alone is not close to isotropic: the median over its layers
    of the ``excess`` over the isotropic reference, read at the lower ends of the layers' intervals (its floor), is
    at least ``threshold``, and every other model's, read at the upper ends, below it (``majority_isotropic``'s
    reading). Does not hold when the exception's median at the upper ends is below ``threshold`` or another's at the
    lower ends reaches it; undecided otherwise."""
    parts = {str(p["model"].iloc[0]): (float(excess(p, "low").median()), float(excess(p, "high").median()))
             for _, p in per_model(layers)}
    if exception not in parts or len(parts) < 2:
        return Outcome(None, f"needs {exception} and at least one other model")
    others = {m: v for m, v in parts.items() if m != exception}
    low, high = parts[exception]
    if low >= threshold and all(hi < threshold for _, hi in others.values()):
        holds = True
    elif high < threshold or any(lo >= threshold for lo, _ in others.values()):
        holds = False
    else:
        holds = None
    return Outcome(holds, f"{exception} {low:+.3f} to {high:+.3f}; others " + ", ".join(
        f"{m} {lo:+.3f} to {hi:+.3f}" for m, (lo, hi) in others.items())
                   + f" (median over layers above the isotropic reference, interval ends; threshold {threshold:g})")


def _positive(corr: pd.DataFrame, alpha: float, method: str = "spearman") -> pd.Series:
    return (corr[f"{method}_p"] < alpha) & (corr[method] > 0)


@rule
def correlated_except(corr: pd.DataFrame, exceptions=(), alpha: float = 0.05, min_models: int = 2) -> Outcome:
    """Every model but ``exceptions`` (registry names) has a significant positive Spearman correlation of drift
    norm and mean cosine across its layers (p < ``alpha``), and none of the exceptions has; at least ``min_models``
    models measured besides the exceptions."""
    valid = corr.dropna(subset=["spearman_p"])
    is_exception = valid["model"].isin(list(exceptions))
    rest, named = valid[~is_exception], valid[is_exception]
    if len(rest) < min_models or named.empty:
        return too_few("models besides the exceptions", len(rest), min_models,
                        "" if len(named) else f"and none of {', '.join(exceptions)}")
    pos = _positive(valid, alpha)
    ok = bool(pos[~is_exception].all() and not pos[is_exception].any())
    words = lambda f: ", ".join(f"{r.label} ρ {r.spearman:+.2f} (p {r.spearman_p:.2g})" for r in f.itertuples())  # noqa: E731
    return Outcome(ok, f"others: {words(rest)}; exceptions: {words(named)}")


@rule
def not_correlated(corr: pd.DataFrame, alpha: float = 0.05) -> Outcome:
    """None of the models has a significant positive Spearman correlation of drift norm and mean cosine across its
    layers (p < ``alpha``)."""
    valid = corr.dropna(subset=["spearman_p"])
    if valid.empty:
        return Outcome(None, "no model")
    pos = _positive(valid, alpha)
    return Outcome(not bool(pos.any()), ", ".join(f"{r.label} ρ {r.spearman:+.2f} (p {r.spearman_p:.2g})"
                                                  for r in valid.itertuples()))


@rule
def tests_disagree(corr: pd.DataFrame, alpha: float = 0.05) -> Outcome:
    """Appendix A: for every model, Pearson's and Spearman's tests of the drift correlation fall on different
    sides of ``alpha`` (one significant, the other not)."""
    valid = corr.dropna(subset=["spearman_p", "pearson_p"])
    if valid.empty:
        return Outcome(None, "no model with both tests")
    differ = (valid["spearman_p"] < alpha) != (valid["pearson_p"] < alpha)
    return Outcome(bool(differ.all()), ", ".join(f"{r.label}: Spearman p {r.spearman_p:.2g}, Pearson p "
                                                 f"{r.pearson_p:.2g}" for r in valid.itertuples()))


@rule
def tests_mostly_agree(corr: pd.DataFrame, alpha: float = 0.05, share: float = 0.5, min_models: int = 2) -> Outcome:
    """Appendix A, the discrepancy "for some models": Pearson's and Spearman's tests of the drift correlation fall on
    the same side of ``alpha`` (both significant or neither) for at least ``share`` of the models, at least
    ``min_models`` with both tests."""
    valid = corr.dropna(subset=["spearman_p", "pearson_p"])
    if len(valid) < min_models:
        return too_few("models with both tests", len(valid), min_models)
    same = (valid["spearman_p"] < alpha) == (valid["pearson_p"] < alpha)
    return Outcome(bool(same.mean() >= share), f"the two tests agree for {int(same.sum())} of {len(valid)} models"
                   + (f"; disagree: {', '.join(valid.loc[~same, 'label'])}" if (~same).any() else ""))
