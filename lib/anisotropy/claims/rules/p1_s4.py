"""The rules of Paper 1, Section 4: a common drift of the inputs of an untrained block (the bias sweep). See ``rules``
for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.words import FAILS, HOLDS
from anisotropy.claims.rules.common import Outcome, rule, spearman, too_few


# Paper 1, Section 4: the block sweep (columns variant, seed, bias_norm and block.block_statistics)
# The rules decide in the regime the paper plots, around its fixed point N*: the grid's bias norms up to
# ``within`` times N*. Far beyond it the outcome is set by the setup, not by the block: the shared part of the scores
# grows like N^2 and their spread like N, and the post-LN output drift is bounded by sqrt(d), so at N = 590 N* a
# crossing and a sharpening are certain.

def _block_curve(block: pd.DataFrame, column: str, variant: str) -> pd.Series:
    part = block[block["variant"] == variant]
    return part.groupby("bias_norm")[column].mean().sort_index()


def crossings(block: pd.DataFrame, output: str, inputs: str, variant: str) -> pd.Series:
    """Per seed, the first N where ``output`` falls from above to below ``inputs`` (linear interpolation; NaN when
    the curves do not cross on the grid)."""
    found = {}
    for seed, g in block[block["variant"] == variant].groupby("seed"):
        g = g.sort_values("bias_norm")
        n, gap = g["bias_norm"].to_numpy(), (g[output] - g[inputs]).to_numpy()
        found[seed] = float("nan")
        for i in range(len(n) - 1):
            if gap[i] > 0 >= gap[i + 1]:
                found[seed] = float(n[i] + gap[i] * (n[i + 1] - n[i]) / (gap[i] - gap[i + 1]))
                break
    return pd.Series(found, dtype=float)


def fixed_point(block: pd.DataFrame, variant: str = "post_ln") -> float:
    """N* as the paper reads it: where the norm of the average output meets the norm of the average input (about N),
    mean over seeds; NaN when some seed's curves do not cross on the grid."""
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    return float(stars.mean()) if len(stars) and stars.notna().all() else float("nan")


def _regime(block: pd.DataFrame, variant: str, within: float) -> tuple[float, float] | Outcome:
    """(N*, within * N*): the paper's regime, or the undecided outcome when the grid does not place it."""
    n_star = fixed_point(block, variant)
    if not np.isfinite(n_star):
        return Outcome(None, "no fixed point N* on the grid, so the regime the paper plots cannot be placed")
    return n_star, within * n_star


def regime_top(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0) -> float:
    """The largest grid norm of the paper's regime, at most ``within`` N* (N* from ``fixed_point``): where a rule
    that reads "the largest N" reads it, and where a page that words the same reading reads it; NaN when N* is not
    on the grid."""
    n_star = fixed_point(block, variant)
    norms = block.loc[(block["variant"] == variant) & (block["bias_norm"] <= within * n_star), "bias_norm"]
    return float(norms.max()) if np.isfinite(n_star) and len(norms) else float("nan")


def _around(norms, n_star: float, within: float, min_side: int) -> Outcome | None:
    """None when the grid has ``min_side`` bias norms on each side of ``n_star`` within [N*/within, within N*]
    (the crossing is located by the grid near it, not by points far away); else the undecided outcome."""
    norms = np.asarray(sorted(set(float(n) for n in norms)))
    below = int(((norms >= n_star / within) & (norms < n_star)).sum())
    above = int(((norms > n_star) & (norms <= within * n_star)).sum())
    if min(below, above) < min_side:
        return too_few(f"bias norms on a side of N* = {n_star:.1f} within a factor {within:g}", min(below, above),
                        min_side, f"{below} below, {above} above")
    return None


@rule
def rises_with_bias(block: pd.DataFrame, columns=("output_drift_norm",), variant: str = "post_ln",
                    within: float = 4.0, min_points: int = 4, min_rho: float = 0.8) -> Outcome:
    """Each of ``columns`` (mean over seeds) rises with N over the paper's regime, N from 0 to ``within`` N*:
    Spearman rho(N, value) >= ``min_rho`` on at least ``min_points`` grid norms, and larger at the regime's largest
    N than at its smallest."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    words, flags = [], []
    for column in columns:
        curve = _block_curve(block, column, variant)
        curve = curve[curve.index <= n_max]
        if len(curve) < min_points:
            return too_few(f"bias norms up to {within:g} N* = {n_max:.0f}", len(curve), min_points)
        rho = spearman(curve.index, curve.to_numpy())
        flags.append(bool(rho >= min_rho and curve.iloc[-1] > curve.iloc[0]))
        words.append(f"{column.replace('_', ' ')} {curve.iloc[0]:.3g} at N = {curve.index[0]:g}, "
                     f"{curve.iloc[-1]:.3g} at N = {curve.index[-1]:g} (Spearman ρ with N {rho:+.2f})")
    return Outcome(all(flags), "; ".join(words) + f" [N up to {within:g} N*, N* = {n_star:.1f}]")


@rule
def average_fixed_point(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0,
                        min_side: int = 2) -> Outcome:
    """In every seed the norm of the average output crosses the norm of the average input (about N) once, from
    above, in the paper's regime: above it at every grid norm below N*, below it at every one up to ``within`` N*
    (an attracting fixed point, not a crossing somewhere on the grid), with ``min_side`` grid norms on each side of
    N* within a factor ``within`` of it."""
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    if stars.empty:
        return Outcome(None, "no seed")
    if not stars.notna().all():
        return Outcome(False, f"the curves cross in {int(stars.notna().sum())} of {len(stars)} seeds")
    n_star = float(stars.mean())
    part = block[block["variant"] == variant]
    if (coarse := _around(part["bias_norm"], n_star, within, min_side)) is not None:
        return coarse
    once = []
    for seed, g in part.groupby("seed"):
        g = g[g["bias_norm"] <= within * n_star]
        gap = (g["output_drift_norm"] - g["input_drift_norm"]).to_numpy()
        before = (g["bias_norm"] < stars[seed]).to_numpy()
        once.append(bool((gap[before] > 0).all() and (gap[~before] <= 0).all()))
    ok = all(once)
    return Outcome(ok, f"N* (norms of the averages) = {n_star:.2f} over {len(stars)} seeds; " +
                   ("the output drift is above the input's below N* and below it up to "
                    if ok else f"the curves cross more than once in {once.count(False)} seed(s) up to ")
                   + f"{within:g} N*")


@rule
def n_star_order(block: pd.DataFrame, reference: pd.DataFrame, low: float = 0.2, high: float = 5.0,
                 variant: str = "post_ln") -> Outcome:
    stars = crossings(block, "output_drift_norm", "input_drift_norm", variant)
    if stars.dropna().empty or reference.empty:
        return Outcome(None, "no fixed point or no reference model")
    scale = float(reference.groupby("layer")["mean_norm"].mean().median())
    ratio = float(stars.mean()) / scale
    return Outcome(low <= ratio <= high, f"N* = {stars.mean():.1f}, median hidden-state norm {scale:.1f} "
                                         f"({', '.join(reference['label'].unique())}): ratio {ratio:.2f}")


@rule
def scores_shift_and_spread(scores: pd.DataFrame, block: pd.DataFrame, share: float = 0.9, within: float = 4.0,
                            variant: str = "post_ln") -> Outcome:
    """At least ``share`` of the heads have a larger |mean score| and a larger score standard deviation at the
    largest histogram norm of the paper's regime (at least N*/``within``, at most ``within`` N*; N* from the sweep)
    than at the smallest."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    norms = sorted(scores["bias_norm"].unique())
    inside = [n for n in norms if n_star / within <= n <= n_max]
    if not inside or norms[0] >= inside[-1]:
        return Outcome(None, f"no score histogram between N*/{within:g} and {within:g} N* (N* = {n_star:.1f}; "
                             f"histograms at N = {', '.join(f'{n:g}' for n in norms)})")
    lo, hi = norms[0], inside[-1]
    stats = scores.groupby(["bias_norm", "head"])["score"].agg(["mean", "std"])
    first, last = stats.loc[lo], stats.loc[hi]
    ok = (last["mean"].abs() > first["mean"].abs()) & (last["std"] > first["std"])
    return Outcome(bool(ok.mean() >= share),
                   f"{int(ok.sum())} of {len(ok)} heads shift and spread from N = {lo:g} to N = {hi:g} = "
                   f"{hi / n_star:.1f} N* (score sd {first['std'].mean():.3g} → {last['std'].mean():.3g} on average)")


_SHARPENING = ("softmax_max", "softmax_min", "entropy_ratio")


def _sharpened_at(curves: dict[str, pd.Series], n: float, min_drop: float) -> tuple[bool, float]:
    """(whether the rows are sharper at N = ``n`` than at the smallest N: mean row maximum higher, minimum lower and
    entropy lower by at least ``min_drop`` of the uniform row's; the entropy drop), each curve interpolated at n."""
    at = {c: float(np.interp(n, v.index.to_numpy(float), v.to_numpy(float))) for c, v in curves.items()}
    drop = float(curves["entropy_ratio"].iloc[0]) - at["entropy_ratio"]
    return (bool(at["softmax_max"] > curves["softmax_max"].iloc[0] and at["softmax_min"] < curves["softmax_min"].iloc[0]
                 and drop >= min_drop), drop)


def sharpening_onset(block: pd.DataFrame, variant: str, min_drop: float) -> float:
    """The smallest N where the entropy drop (mean over seeds, of the uniform row's) reaches ``min_drop``, by linear
    interpolation between grid norms (NaN when it never does on the grid)."""
    curve = _block_curve(block, "entropy_ratio", variant)
    n, drops = curve.index.to_numpy(float), (curve.iloc[0] - curve).to_numpy(float)
    for i in range(1, len(n)):
        if drops[i] >= min_drop:
            return float(n[i - 1] + (min_drop - drops[i - 1]) * (n[i] - n[i - 1]) / (drops[i] - drops[i - 1]))
    return float("nan")


def sharpening_points(block: pd.DataFrame, variant: str, n_star: float, min_drop: float) -> str:
    """``rows_sharpen``'s test read at N* and at the first grid norm where the entropy drop has reached ``min_drop``
    (and that N by interpolation), in words: the verdict's range of N is the book's choice, these say where the
    effect is."""
    curves = {c: _block_curve(block, c, variant) for c in _SHARPENING}
    yes_no = {True: HOLDS, False: FAILS}
    sharp, drop = _sharpened_at(curves, n_star, min_drop)
    words = f"read at N* = {n_star:.1f}: {yes_no[sharp]} (entropy drop {drop:.1e})"
    onset = sharpening_onset(block, variant, min_drop)
    if not np.isfinite(onset):
        return words + f"; the drop never reaches {min_drop:g} on the grid (largest N {curves['entropy_ratio'].index[-1]:g})"
    grid = float(curves["entropy_ratio"].index[curves["entropy_ratio"].index >= onset][0])
    sharp, drop = _sharpened_at(curves, grid, min_drop)
    return (words + f"; the drop reaches {min_drop:g} at N = {onset:.4g} ({onset / n_star:.0f} N*, interpolated); read "
            f"at N = {grid:g} ({grid / n_star:.0f} N*, the first grid norm there): {yes_no[sharp]} (entropy drop "
            f"{drop:.1e})")


@rule
def rows_sharpen(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0, min_drop: float = 0.01) -> Outcome:
    """From the smallest N to the largest grid norm of the book's range (at most ``within`` N*, at least N*; the
    paper's text names no range): the mean row maximum rises, the mean row minimum falls and the attention entropy
    falls by at least ``min_drop`` of the uniform row's (a sharpening the softmax shows, not one in the sixth
    decimal). The value also reads the same test at N* and where the drop first reaches ``min_drop``."""
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    curves = {c: _block_curve(block, c, variant) for c in _SHARPENING}
    curves = {c: v[v.index <= n_max] for c, v in curves.items()}
    n = curves["softmax_max"].index
    if len(n) < 2 or n[-1] < n_star:
        return Outcome(None, f"the grid has no bias norm between N* = {n_star:.1f} and {within:g} N*")
    sharp, drop = _sharpened_at(curves, float(n[-1]), min_drop)
    return Outcome(sharp, f"on the book's range, from N = {n[0]:g} to N = {n[-1]:g} ({n[-1] / n_star:.1f} N*): row "
                   f"maximum {curves['softmax_max'].iloc[0]:.4f} → {curves['softmax_max'].iloc[-1]:.4f}, row minimum "
                   f"{curves['softmax_min'].iloc[0]:.2e} → {curves['softmax_min'].iloc[-1]:.2e}, entropy / uniform "
                   f"{curves['entropy_ratio'].iloc[0]:.4f} → {curves['entropy_ratio'].iloc[-1]:.4f} (a drop of "
                   f"{drop:.1e}; at least {min_drop:g} asked); the same test " +
                   sharpening_points(block, variant, n_star, min_drop))


@rule
def layernorm_fixed_point(block: pd.DataFrame, tolerance: float = 0.01, within: float = 4.0,
                          min_side: int = 1) -> Outcome:
    """The measured N* (mean norms) is within ``tolerance`` of the LayerNorm prediction in every seed, interpolated
    between grid norms within a factor ``within`` of it (at least ``min_side`` on each side)."""
    # cost: pulls torch (~2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.experiments.block import fixed_points

    fixed = fixed_points(block[block["variant"] == "post_ln"])
    if fixed.empty or fixed["n_star"].isna().any():
        return Outcome(None if fixed.empty else False, "no crossing of the mean norms in some seed")
    coarse = _around(block.loc[block["variant"] == "post_ln", "bias_norm"], float(fixed["n_star"].mean()), within,
                     min_side)
    if coarse is not None:
        return coarse
    error = float((fixed["n_star"] / fixed["predicted_n_star"] - 1).abs().max())
    return Outcome(error <= tolerance, f"N* = {fixed['n_star'].mean():.3f}, LayerNorm prediction "
                                       f"{fixed['predicted_n_star'].mean():.3f} (largest relative gap {error:.1e})")


@rule
def uniform_at_fixed_point(block: pd.DataFrame, level: float = 0.99, within: float = 4.0,
                           min_side: int = 1) -> Outcome:
    """The post-LN block's attention entropy at N* (mean norms, interpolated between grid norms within a factor
    ``within`` of it) is above ``level`` of the uniform row's."""
    # cost: pulls torch (~2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.experiments.block import fixed_points, interpolate

    post = block[block["variant"] == "post_ln"]
    fixed = fixed_points(post)
    if fixed.empty or fixed["n_star"].isna().all():
        return Outcome(None, "no fixed point")
    n_star = float(fixed["n_star"].mean())
    if (coarse := _around(post["bias_norm"], n_star, within, min_side)) is not None:
        return coarse
    ratio = float(interpolate(post, "entropy_ratio", n_star)["entropy_ratio"].mean())
    return Outcome(ratio > level, f"entropy / uniform = {ratio:.5f} at N* = {n_star:.2f}")


@rule
def small_at_low_bias(block: pd.DataFrame, variant: str = "post_ln", min_drop: float = 0.01) -> Outcome:
    """Section 4.4's "at low anisotropy levels ... the effect is not very important": at every grid norm up to N*
    the attention entropy lies within ``min_drop`` (of the uniform row's) of its value at the smallest N."""
    n_star = fixed_point(block, variant)
    if not np.isfinite(n_star):
        return Outcome(None, "no fixed point N* on the grid")
    curve = _block_curve(block, "entropy_ratio", variant)
    low = curve[curve.index <= n_star]
    if len(low) < 2:
        return too_few(f"bias norms up to N* = {n_star:.1f}", len(low), 2)
    drop = float((low.iloc[0] - low).max())
    return Outcome(drop < min_drop, f"largest entropy drop up to N* = {n_star:.1f}: {drop:.1e} of the uniform row's "
                                    f"({min_drop:g} would be a sharpening); the sharpening test of "
                                    "p1-s4-rows-sharpen " + sharpening_points(block, variant, n_star, min_drop))


def rounding_tolerance(n_vectors: int, dim: int) -> float:
    """How far float64 rounding can move the difference of two mean cosines, each of ``n_vectors`` vectors of ``dim``
    coordinates computed from the sum of their unit vectors (``measure.metrics.mean_cosine``): each is within about
    2 (n + d) eps of its exact value (n additions, d in each norm, squared), so their difference within 4 (n + d) eps.
    A gap smaller than this is not resolved by the computation."""
    return 4.0 * (n_vectors + dim) * float(np.finfo(np.float64).eps)


@rule
def output_cosine_above_input(block: pd.DataFrame, variant: str = "post_ln", max_gap: float = 0.1,
                              dim: int = 768) -> Outcome:
    """Section 4.2: at every grid norm the output's mean cosine is above the input's, by less than ``max_gap``
    ("slightly"), in every seed (each redraws the block and its inputs), each gap beyond the float64 rounding of the
    two cosines (``rounding_tolerance`` of the sweep's n_sequences x seq_len vectors of ``dim`` coordinates, 2 vectors
    where the frame does not say; at large N both are within 1e-6 of 1 and their gap is a few 1e-11). Does not hold when at some grid norm every seed's gap is
    within rounding of 0 or below it, or at least ``max_gap``; undecided when the seeds disagree."""
    part = block[block["variant"] == variant]
    if part.empty:
        return Outcome(None, f"no {variant} block")
    n = int((part["n_sequences"] * part["seq_len"]).min()) if {"n_sequences", "seq_len"} <= set(part) else 2
    tol = rounding_tolerance(n, dim)
    gaps = part.assign(gap=part["output_cosine"] - part["input_cosine"]).pivot_table(
        index="bias_norm", columns="seed", values="gap")
    low, high = gaps.min(axis=1), gaps.max(axis=1)
    above = (low > tol) & (high < max_gap)
    not_above = (high <= tol) | (low >= max_gap)
    holds = True if above.all() else False if not_above.any() else None
    return Outcome(holds, f"output minus input mean cosine from {gaps.min().min():+.2e} to {gaps.max().max():+.2e} "
                   f"over N = {gaps.index.min():g} to {gaps.index.max():g} and {gaps.shape[1]} seed(s); above the "
                   f"float64 rounding of the two cosines ({tol:.1e}) and below {max_gap:g} in every seed at "
                   f"{int(above.sum())} of {len(gaps)} grid norms" + (
                       f"; not above in any seed at N = {', '.join(f'{v:g}' for v in gaps.index[not_above])}"
                       if not_above.any() else ""))


@rule
def anisotropic_at_zero(zero: pd.DataFrame, inputs: str = "BERT's embedding layer", dim: int = 768) -> Outcome:
    """Section 4.3 at N = 0: the queries' and the keys' mean cosine (mean over seeds) of the block fed ``inputs``
    (a value of the frame's ``inputs`` column) are both above the isotropic 95th percentile of dimension ``dim``;
    the value gives every reading of the frame."""
    # cost: pulls scipy (~0.7 s) into the claims ledger, which reads stored numbers only
    from anisotropy.measure.baseline import isotropic_cosine_quantile

    if zero.empty or inputs not in set(zero["inputs"]):
        return Outcome(None, f"no block fed {inputs} at N = 0")
    q95 = float(isotropic_cosine_quantile(0.95, dim))
    means = zero.groupby("inputs", sort=False)[["query_cosine", "key_cosine"]].mean()
    row = means.loc[inputs]
    words = "; ".join(f"{name}: queries {r.query_cosine:.2g}, keys {r.key_cosine:.2g}" for name, r in means.iterrows())
    return Outcome(bool(row["query_cosine"] > q95 and row["key_cosine"] > q95),
                   f"mean cosine at N = 0 ({words}), isotropic 95th percentile {q95:.3f} (d = {dim})")


@rule
def shift_direction_is_a_draw(block: pd.DataFrame, variant: str = "post_ln", min_seeds: int = 6,
                              within: float = 4.0) -> Outcome:
    """Figure 7's caption, other draws of the layer and of b_u shift the scores the other way: among the seeds (each
    redraws the block and b_u), the block's mean pre-softmax score at the largest grid norm of the paper's regime
    (at most ``within`` N*) is above its value at the smallest N in some and below it in others. When every seed
    shifts the same way the rule decides only from ``min_seeds`` seeds on (were the direction a fair coin, all n
    agreeing has chance 2^(1-n): 3% at 6)."""
    part = block[block["variant"] == variant]
    if part.empty or "score_mean" not in part:
        return Outcome(None, f"no {variant} block with its mean score")
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime
    lo, hi = part["bias_norm"].min(), regime_top(block, variant, within)
    part = part[part["bias_norm"] <= hi]
    if hi <= lo:
        return Outcome(None, f"no grid norm above N = {lo:g} up to {within:g} N* = {n_max:.1f}")
    by_seed = part.pivot_table(index="seed", columns="bias_norm", values="score_mean")
    shift = by_seed[hi] - by_seed[lo]
    up, down = int((shift > 0).sum()), int((shift < 0).sum())
    words = (f"mean score from N = {lo:g} to N = {hi:g} ({hi / n_star:.1f} N*): up in {up}, down in {down} of "
             f"{len(shift)} seeds ({', '.join(f'{v:+.3g}' for v in shift)})")
    if up and down:
        return Outcome(True, words)
    if len(shift) < min_seeds:
        return too_few("seeds, all shifting the same way", len(shift), min_seeds, words)
    return Outcome(False, words)


@rule
def sequence_extremes_clearer(block: pd.DataFrame, variant: str = "post_ln", within: float = 4.0,
                              min_factor: float = 1.5) -> Outcome:
    """Section 4.4, the sharpening "even clearer" over whole sequences: from the smallest N to the largest grid norm
    of the book's range (at most ``within`` N*, as ``rows_sharpen``), the whole-sequence maximum rises by at least
    ``min_factor`` times the relative rise of the mean row maximum, and the whole-sequence minimum falls by at least
    ``min_factor`` times the relative fall of the mean row minimum (a factor near 1: the whole sequences show no more
    than the rows). The value gives both factors at the largest N too."""
    if missing := {"seq_max", "seq_min", "softmax_max", "softmax_min"} - set(block.columns):
        return Outcome(None, f"the sweep has no {', '.join(sorted(missing))}")
    regime = _regime(block, variant, within)
    if isinstance(regime, Outcome):
        return regime
    n_star, n_max = regime

    def factors(top: float) -> tuple[float, float]:
        c = {k: _block_curve(block, k, variant) for k in ("softmax_max", "seq_max", "softmax_min", "seq_min")}
        c = {k: v[v.index <= top] for k, v in c.items()}
        rel = {k: float(v.iloc[-1] / v.iloc[0] - 1) for k, v in c.items()}
        with np.errstate(divide="ignore", invalid="ignore"):  # rows that do not move: NaN, which never passes
            return (float(np.divide(rel["seq_max"], rel["softmax_max"])),
                    float(np.divide(rel["seq_min"], rel["softmax_min"])))

    curve = _block_curve(block, "seq_max", variant)
    inside = curve.index[curve.index <= n_max]
    if len(inside) < 2 or inside[-1] < n_star:
        return Outcome(None, f"the grid has no bias norm between N* = {n_star:.1f} and {within:g} N*")
    up, down = factors(n_max)
    far_up, far_down = factors(float(curve.index[-1]))
    return Outcome(bool(up >= min_factor and down >= min_factor),
                   f"from N = {inside[0]:g} to N = {inside[-1]:g} ({inside[-1] / n_star:.1f} N*), the whole "
                   f"sequences' maximum rises {up:.3f} times as much as the mean row maximum (relative to their values "
                   f"at N = {inside[0]:g}) and their minimum falls {down:.3f} times as much (at least {min_factor:g} "
                   f"asked); at the largest N, {curve.index[-1]:g}: {far_up:.3f} and {far_down:.3f} times")
