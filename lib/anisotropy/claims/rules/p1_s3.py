"""The rules of Paper 1's Appendix B (the isotropic null) and Section 3 (anisotropy in every modality; drift and
anisotropy). See ``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.rules.common import Outcome, majority, per_model, spearman, too_few, rule


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
    """Every model's layer-averaged mean cosine exceeds the isotropic q95 of its dimension."""
    if measured.empty:
        return Outcome(None, "no model")
    above = measured["mean_cosine"] > measured["null_q95"]
    ratio = measured["mean_cosine"] / measured["null_q95"]
    below = measured.loc[~above, "label"].tolist()
    return Outcome(bool(above.all()), f"{int(above.sum())} of {len(measured)} models above (mean cosine / q95 from "
                                      f"{ratio.min():.1f} to {ratio.max():.1f})"
                   + (f"; below: {', '.join(below)}" if below else ""))


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
    values and no preferred direction (``measure.baseline.support_null_cosine``)."""
    if "nonnegative" not in p or "null_support" not in p:
        return pd.Series(0.0, index=p.index)
    return p["null_support"].where(p["nonnegative"].astype(bool), 0.0).fillna(0.0)

@rule
def most_layers_above_null(layers: pd.DataFrame, share: float = 0.5) -> Outcome:
    parts = [(name, float((lower(p) > p["null_q95"]).mean())) for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(s >= share for _, s in parts),
                   "share of layers (their whole interval) above the isotropic q95: " + ", ".join(f"{n} {s:.0%}" for n, s in parts))


@rule
def some_layer_above_null(layers: pd.DataFrame, at_least: int = 1) -> Outcome:
    """Every model has at least ``at_least`` layers whose mean cosine exceeds the isotropic q95 of their dimension
    (Paper 1's "anisotropic in at least one of their layers")."""
    parts = [(name, int((lower(p) > p["null_q95"]).sum()), len(p)) for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(k >= at_least for _, k, _ in parts),
                   "layers (their whole interval) above the isotropic q95: " + ", ".join(f"{n} {k} of {t}" for n, k, t in parts))


@rule
def every_layer_above(layers: pd.DataFrame, threshold: float = 0.2) -> Outcome:
    """Every layer of every model has a mean cosine above ``threshold``, its whole interval where it has one."""
    if layers.empty:
        return Outcome(None, "no model")
    floor = lower(layers)
    low = layers.loc[floor.idxmin()]
    return Outcome(bool(floor.min() > threshold),
                   f"lowest layer mean cosine {low['mean_cosine']:.3f} (interval from {floor.min():.3f}; "
                   f"{low['label']}, layer {int(low['layer'])}), against {threshold:g}")


@rule
def close_to_isotropic(layers: pd.DataFrame, threshold: float = 0.1) -> Outcome:
    """Every layer of every model has |mean cosine| below ``threshold``, its whole interval where it has one."""
    parts = [(name, float(pd.concat([lower(p).abs(), upper(p).abs()], axis=1).max(axis=1).max()))
             for name, p in per_model(layers)]
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(v < threshold for _, v in parts),
                   "largest |layer mean cosine| (interval ends): " + ", ".join(f"{n} {v:.3f}" for n, v in parts)
                   + f" (threshold {threshold:g})")


@rule
def majority_isotropic(layers: pd.DataFrame, threshold: float = 0.1, min_models: int = 2) -> Outcome:
    """More than half of the models have a median over layers of (mean cosine, its interval's upper end where it
    has one, minus the layer's isotropic ``reference``: 0, or the support-fitting null of a non-negative layer)
    below ``threshold`` ("most": at least ``min_models`` models, since the majority of one model is that model)."""
    parts = []
    for name, p in per_model(layers):
        excess = upper(p) - reference(p)
        parts.append((name, float(excess.median()), int(p["nonnegative"].astype(bool).sum()) if "nonnegative" in p
                      else 0, len(p)))
    if len(parts) < min_models:
        return too_few("models", len(parts), min_models)
    flags = [v < threshold for _, v, _, _ in parts]
    return Outcome(majority(flags), f"{sum(flags)} of {len(parts)} below {threshold:g} (median over layers of the mean "
                   "cosine above its isotropic reference: " + ", ".join(
                       f"{n} {v:+.3f} ({k} of {t} layers non-negative)" for n, v, k, t in parts) + ")")


@rule
def falls_with_depth(layers: pd.DataFrame, min_layers: int = 4) -> Outcome:
    """Per model: Spearman rho(depth, mean cosine) < 0 and the last layer below the first, on at least
    ``min_layers`` layers (a rank correlation of three points is one of six orderings)."""
    parts = []
    for name, p in per_model(layers):
        if len(p) < min_layers:
            return too_few(f"layers in {name}", len(p), min_layers)
        rho = spearman(p["layer"], p["mean_cosine"])
        first, last = float(p["mean_cosine"].iloc[0]), float(p["mean_cosine"].iloc[-1])
        parts.append((name, rho, first, last, bool(rho < 0 and last < first)))
    if not parts:
        return Outcome(None, "no model")
    return Outcome(all(p[-1] for p in parts), "; ".join(
        f"{n}: Spearman ρ(depth, mean cosine) {rho:+.2f}, first {first:.3f}, last {last:.3f}"
        for n, rho, first, last, _ in parts))


def _group(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    keep = pd.Series(False, index=frame.index)
    if spec.get("models"):
        keep |= frame["model"].isin(spec["models"])
    if spec.get("families"):
        keep |= frame["family"].isin(spec["families"])
    return frame[keep]


@rule
def group_above(layers: pd.DataFrame, high: dict, low: dict, min_models: int = 2) -> Outcome:
    """The mean over the ``high`` group's models of their layer-averaged mean cosine exceeds the ``low`` group's
    (groups by ``models`` or ``families``), each group holding at least ``min_models`` models: one model against
    one compares two draws, not two kinds of model."""
    means = []
    for spec in (high, low):
        part = _group(layers, spec)
        per_model = part.groupby("label", sort=False)["mean_cosine"].mean()
        means.append(per_model)
    if means[0].empty or means[1].empty:
        return Outcome(None, "one of the two groups was not measured")
    if min(len(m) for m in means) < min_models:
        return too_few("models in a group", min(len(m) for m in means), min_models,
                        f"{len(means[0])} against {len(means[1])}")
    a, b = float(means[0].mean()), float(means[1].mean())
    words = lambda s: ", ".join(f"{n} {v:.3f}" for n, v in s.items())  # noqa: E731
    return Outcome(a > b, f"{a:.3f} ({words(means[0])}) against {b:.3f} ({words(means[1])})")


# Paper 1, Section 3.3: correlations (columns label, family, spearman, spearman_p, n_layers)

def spearman_interval(rho: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Confidence interval of a Spearman correlation of ``n`` points: Fisher's z with the variance
    (1 + rho^2 / 2) / (n - 3) of Bonett and Wright (2000); (-1, 1) below four points."""
    from scipy.stats import norm

    if n < 4 or not np.isfinite(rho):
        return -1.0, 1.0
    z = np.arctanh(np.clip(rho, -0.999, 0.999))
    half = norm.ppf(0.5 + level / 2) * np.sqrt((1 + rho**2 / 2) / (n - 3))
    return float(np.tanh(z - half)), float(np.tanh(z + half))


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
                   min_models: int = 2, cnn_families=("cnn",)) -> Outcome:
    """CNNs show no drift correlation where Transformers do. A test that is not significant is no evidence of no
    correlation: a CNN counts as *without* one only when the upper end of the ``level`` interval of its rho
    (``spearman_interval``) is below ``max_rho``, as *with* one when rho > 0 at p < ``alpha``, and as undecided
    otherwise (4-5 stage points give intervals wider than the whole range). Holds when at least ``min_models``
    CNNs are decided, most of them without, and a larger share of Transformers than of CNNs is significantly
    positive; does not hold when most decided CNNs have one, or the Transformers' share is not larger."""
    valid = corr.dropna(subset=["spearman_p"])
    is_cnn = valid["family"].isin(list(cnn_families))
    cnn, transformers = valid[is_cnn], valid[~is_cnn]
    if cnn.empty or transformers.empty:
        return Outcome(None, "needs both CNNs and Transformers")
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
                   f"{tr_share:.0%} of {len(transformers)} Transformers ({words})")



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
    """Every model's ``part`` (the layers of its decoder, say) has a median mean cosine above ``threshold``, each
    layer read at its interval's lower end where it has one."""
    if "part" not in layers.columns:
        return Outcome(None, "the frame does not say which part of a model a layer is")
    rows = layers[layers["part"] == part]
    parts = [(name, float(lower(p).median())) for name, p in per_model(rows)]
    if not parts:
        return Outcome(None, f"no {part} measured")
    return Outcome(all(v > threshold for _, v in parts), f"median {part} layer mean cosine: "
                   + ", ".join(f"{n} {v:.3f}" for n, v in parts) + f" (threshold {threshold:g})")


@rule
def only_exception(layers: pd.DataFrame, exception: str, threshold: float = 0.1) -> Outcome:
    """Among the models, ``exception`` (a registry name) alone is not close to isotropic: its median over layers
    of the mean cosine above the layer's isotropic ``reference`` is at least ``threshold``, every other model's
    below it (``majority_isotropic``'s reading, interval upper ends)."""
    parts = {str(p["model"].iloc[0]): float((upper(p) - reference(p)).median()) for _, p in per_model(layers)}
    if exception not in parts or len(parts) < 2:
        return Outcome(None, f"needs {exception} and at least one other model")
    others = {m: v for m, v in parts.items() if m != exception}
    ok = parts[exception] >= threshold and all(v < threshold for v in others.values())
    return Outcome(ok, f"{exception} {parts[exception]:+.3f}; others " + ", ".join(f"{m} {v:+.3f}"
                                                                                   for m, v in others.items())
                   + f" (median over layers above the isotropic reference; threshold {threshold:g})")


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
