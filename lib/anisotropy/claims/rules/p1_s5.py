"""The rules of Paper 1, Section 5: queries and keys along training (per-head statistics of checkpoint series). See
``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.rules.common import (Outcome, after_warmup, each_run, majority, over_runs, rises, rule, run_ends,
                                            too_few, trend)


# Paper 1, Section 5: per-head statistics along training (columns run, layer, head, step, cos_qk, dot_qk, entropy,
# head_dim, q_mean, k_mean, warmup). The rules compare from the run's first checkpoint at or after the end of its
# learning-rate warm-up: at step 0 attention is uniform and the mean query and key are unrelated, so any training at
# all would make "the entropy falls" and "the scalar product grows" hold.
MULTIBERTS_WARMUP = 10_000  # MultiBERTs follow BERT's recipe: 10,000 warm-up steps (Sellam et al., 2022)


def warmup_steps(source: str, profile: str) -> int | None:
    """The learning-rate warm-up (steps) of the runs a Section 5 page follows: MultiBERTs' for ``"multiberts"``,
    the recipe's for a self-trained suite of ``profile``; None where unknown (a folder of checkpoints)."""
    if source == "multiberts":
        return MULTIBERTS_WARMUP
    from anisotropy.training import recipes

    try:
        return int(recipes.suite(source, profile)[0].warmup)
    except KeyError:
        return None


def _series(part: pd.DataFrame, column: str, how: str = "median", absolute: bool = False) -> pd.Series:
    """One run's per-checkpoint statistic over heads (``how`` of ``column``, of its absolute value with
    ``absolute``), in step order."""
    values = part[column].abs() if absolute else part[column]
    return values.groupby(part["step"]).agg(how).sort_index()


def _along(curve: pd.Series, fmt: str = ".2f") -> str:
    """"0.12 → 0.30 (rho +0.90, step 50 → 1,250)": a series' ends and its trend."""
    rho = trend(curve.index.to_numpy(float), curve.to_numpy(float))
    return (f"{curve.iloc[0]:{fmt}} → {curve.iloc[-1]:{fmt}} (rho {rho:+.2f}, step {int(curve.index[0]):,} → "
            f"{int(curve.index[-1]):,})")


@rule
def alignment_grows(qk: pd.DataFrame, min_rho: float = 0.5, min_runs: int = 2) -> Outcome:
    """Per run, from the end of warm-up on, the median |cos(Q̄, K̄)| over heads and the share of heads outside the
    isotropic 95% band both rise along the whole series (``rises``: Spearman's rho against the step at least
    ``min_rho`` and above where it started); holds in most runs."""
    from anisotropy.experiments.qk_dynamics import null_cosine_bound

    def test(part):
        bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
        median = _series(part, "cos_qk", absolute=True)
        outside = (part["cos_qk"].abs() > bound).groupby(part["step"]).mean().sort_index()
        steps = median.index.to_numpy(float)
        ok = rises(steps, median.to_numpy(float), min_rho) and rises(steps, outside.to_numpy(float), min_rho)
        return ok, f"median |cos| {_along(median)}, outside the band {_along(outside, '.0%')}"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def almost_all_heads_align(qk: pd.DataFrame, share: float = 0.9, min_runs: int = 2) -> Outcome:
    """Figure 13's caption, "almost all heads see Q̄_s and K̄_s align": per run, at its last checkpoint at least
    ``share`` of the heads have |cos(Q̄, K̄)| outside the isotropic two-sided 95% band of their dimension
    (``null_cosine_bound``), and more than at the first checkpoint after warm-up; holds in most runs."""
    from anisotropy.experiments.qk_dynamics import null_cosine_bound

    def test(part):
        first, last = run_ends(part)
        bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
        before, after = float((first["cos_qk"].abs() > bound).mean()), float((last["cos_qk"].abs() > bound).mean())
        return bool(after >= share and after > before), (
            f"heads outside the band |cos| > {bound:.3f}: {before:.0%} at step {int(first['step'].iloc[0]):,}, "
            f"{after:.0%} at step {int(last['step'].iloc[0]):,} (at least {share:.0%} asked)")

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def dot_grows(qk: pd.DataFrame, min_rho: float = 0.5, min_runs: int = 2) -> Outcome:
    """Per run, from the end of warm-up on, the median |Q̄·K̄| over heads rises along the whole series
    (``rises``); holds in most runs."""
    def test(part):
        curve = _series(part, "dot_qk", absolute=True)
        return rises(curve.index.to_numpy(float), curve.to_numpy(float), min_rho), f"median |Q̄·K̄| {_along(curve, '.3g')}"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def entropy_falls(qk: pd.DataFrame, min_rho: float = 0.5, min_runs: int = 2) -> Outcome:
    """Per run, from the end of warm-up on, the mean attention entropy over heads falls along the whole series (its
    negative ``rises``: Spearman's rho at most -``min_rho`` and below where it started); holds in most runs."""
    def test(part):
        curve = _series(part, "entropy", how="mean")
        falls = rises(curve.index.to_numpy(float), -curve.to_numpy(float), min_rho)
        return falls, f"entropy {_along(curve, '.3f')} nats"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def common_first_opposite_last(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the mean over heads of cos(Q̄, K̄) drifts towards +1 in the first layer and towards -1 in the last:
    at the last checkpoint positive in the first layer and negative in the last, each having moved that way since
    the end of warm-up."""
    def test(part):
        first, last = run_ends(part)
        start = first.groupby("layer")["cos_qk"].mean().sort_index()
        end = last.groupby("layer")["cos_qk"].mean().sort_index()
        if len(end) < 2:
            return None, "a single layer"
        a0, a, b0, b = start.iloc[0], end.iloc[0], start.iloc[-1], end.iloc[-1]
        return (bool(a > 0 > b and a > a0 and b < b0),
                f"first layer {a0:+.2f} → {a:+.2f}, last layer {b0:+.2f} → {b:+.2f}")

    return over_runs(qk, test, min_runs, from_warmup=True)


def opposite_onset_share(part: pd.DataFrame) -> float:
    """The first checkpoint after which the last layer's mean cos(Q̄, K̄) over heads stays negative, as a share of the
    run's last step (NaN when it does not end negative; 0 when it is negative from the first checkpoint)."""
    return onset_share(part, "last", -1)


@rule
def opposite_onset(qk: pd.DataFrame, share: float = 0.08, factor: float = 2.0, min_runs: int = 2) -> Outcome:
    """The onset of the last layer's opposite means (``opposite_onset_share``), median over the runs that end with
    them, lies within a ``factor`` of ``share`` of training, and most runs end with them. The onset is a time, read on
    every checkpoint; a run answers only if it has a checkpoint between share/factor and share*factor of its steps
    (else the grid cannot place an onset there), and the verdict needs ``min_runs`` such runs."""
    shares, coarse = {}, []
    for run, part in each_run(qk):
        steps = part["step"].unique() / part["step"].max()
        if not ((steps >= share / factor) & (steps <= share * factor)).any():
            coarse.append(run)
            continue
        shares[run] = opposite_onset_share(part)
    if len(shares) < min_runs:
        return too_few(f"runs with a checkpoint between {share / factor:.0%} and {share * factor:.0%} of training",
                        len(shares), min_runs, f"without: {', '.join(coarse)}" if coarse else "")
    found = [v for v in shares.values() if np.isfinite(v)]
    words = ", ".join(f"{run}: " + (f"{v:.0%}" if np.isfinite(v) else "never negative") for run, v in shares.items())
    if not found:
        return Outcome(False, f"the last layer does not end with opposite means ({words})")
    median = float(np.median(found))
    return Outcome(share / factor <= median <= share * factor and len(found) > len(shares) / 2,
                   f"{len(found)} of {len(shares)} runs end with opposite means in the last layer, from {median:.0%} "
                   f"of training on (median; {words}); the paper's onset is about {share:.0%}")


def runs_from_warmup(qk: pd.DataFrame, keep_short: bool = False) -> pd.DataFrame:
    """Each run's rows from its first checkpoint at or after its warm-up (``rules.after_warmup``); a run with under
    two such checkpoints is left out, or with ``keep_short`` kept whole (a page's row for every run)."""
    parts = []
    for _, part in each_run(qk):
        trimmed = after_warmup(part)
        if trimmed["step"].nunique() >= 2:
            parts.append(trimmed)
        elif keep_short:
            parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else qk.iloc[:0]


def three_part_test(qk: pd.DataFrame, keep_short: bool = False) -> pd.DataFrame:
    """``experiments.qk_dynamics.alignment_summary`` of ``runs_from_warmup``: one row per run, with ``holds``, the
    three-part test that ``every_run_holds`` requires of every run: from the run's first row to its last the median
    |cos| grows, more heads sit outside the isotropic band, and the mean attention entropy falls."""
    from anisotropy.experiments.qk_dynamics import alignment_summary  # imported here: the ledger loads no torch

    summary = alignment_summary(runs_from_warmup(qk, keep_short))
    if summary.empty:
        return summary.assign(holds=pd.Series(dtype=bool))
    return summary.assign(holds=(summary["median_abs_cos_last"] > summary["median_abs_cos_first"])
                          & (summary["share_beyond_null_last"] > summary["share_beyond_null_first"])
                          & (summary["entropy_last"] < summary["entropy_first"]))


@rule
def every_run_holds(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """The three-part test of ``three_part_test`` (median |cos| grows, more heads outside the band, entropy falls),
    from the end of warm-up to the last checkpoint, holds in every one of at least ``min_runs`` runs."""
    summary = three_part_test(qk)  # one row per run with two checkpoints after its warm-up
    if len(summary) < min_runs:
        return too_few("runs with two checkpoints after their warm-up", len(summary), min_runs)
    return Outcome(bool(summary["holds"].all()), f"the three-part test holds for {int(summary['holds'].sum())} of "
                                                 f"{len(summary)} seeds (from step "
                                                 f"{', '.join(f'{s:,}' for s in summary['first_step'].unique())})")


@rule
def qk_norms_grow(qk: pd.DataFrame, min_ratio: float = 1.1, min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Paper 1, Section 5: per run, from its first checkpoint after warm-up to its last, the median over heads of the
    norm of the mean query (``q_norm``) and of the mean key (``k_norm``) both grow by at least ``min_ratio``; holds
    in most of at least ``min_runs`` runs."""
    if not {"q_norm", "k_norm"} <= set(qk.columns):
        return Outcome(None, "no norms of the mean query and key in the frame")

    def test(part):
        first, last = run_ends(part)
        q0, q1 = float(first["q_norm"].median()), float(last["q_norm"].median())
        k0, k1 = float(first["k_norm"].median()), float(last["k_norm"].median())
        return bool(q1 >= min_ratio * q0 and k1 >= min_ratio * k0), (
            f"median |Q̄| {q0:.3g} → {q1:.3g}, |K̄| {k0:.3g} → {k1:.3g} from step {int(first['step'].iloc[0]):,} "
            f"to {int(last['step'].iloc[0]):,}")

    return over_runs(qk, test, min_runs, from_warmup=True, min_checkpoints=min_checkpoints)


def onset_share(part: pd.DataFrame, layer: str, sign: int) -> float:
    """The first checkpoint after which the ``layer`` ("first" or "last") layer's mean cos(Q̄, K̄) over heads keeps
    the sign ``sign`` (+1 common, -1 opposite direction) to the run's end, as a share of its last step; NaN when it
    does not end with that sign."""
    pick = part["layer"].min() if layer == "first" else part["layer"].max()
    curve = part[part["layer"] == pick].groupby("step")["cos_qk"].mean().sort_index()
    kept = (np.sign(curve) == sign).to_numpy()
    if not kept[-1]:
        return float("nan")
    start = len(kept) - 1
    while start > 0 and kept[start - 1]:
        start -= 1
    return float(curve.index[start] / curve.index[-1])


@rule
def common_before_opposite(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the first layer's mean cos(Q̄, K̄) turns positive for good (``onset_share``) before the last layer's
    turns negative for good, both read on every checkpoint from step 0 (the onsets are times, not growths); a run
    whose first layer does not end positive, or whose last does not end negative, does not show it."""
    def test(part):
        common, opposite = onset_share(part, "first", +1), onset_share(part, "last", -1)
        words = (f"common from {common:.0%}" if np.isfinite(common) else "first layer not common at the end") + ", " + (
            f"opposite from {opposite:.0%}" if np.isfinite(opposite) else "last layer not opposite at the end")
        if not (np.isfinite(common) and np.isfinite(opposite)):
            return False, words
        return bool(common < opposite), words + " of training"

    return over_runs(qk, test, min_runs, min_checkpoints=3)


@rule
def common_in_first_steps(qk: pd.DataFrame, share: float = 0.02, min_runs: int = 2) -> Outcome:
    """Figure 12a, "the common direction dynamics appear in the first few steps": per run, the first layer's mean
    cos(Q̄, K̄) is positive for good (``onset_share``, read on every checkpoint from step 0) from at most ``share`` of
    training on. A run answers only if it has a checkpoint after step 0 and within ``share`` of its steps (else its
    grid cannot place an onset there); holds in most of at least ``min_runs`` runs."""
    def test(part):
        steps = part["step"].unique() / part["step"].max()
        if not ((steps > 0) & (steps <= share)).any():
            return None, f"no checkpoint within the first {share:.0%} of training"
        onset = onset_share(part, "first", +1)
        if not np.isfinite(onset):
            return False, "first layer not common at the end"
        return bool(onset <= share), f"common from {onset:.1%} of training (at most {share:.0%} asked)"

    return over_runs(qk, test, min_runs, min_checkpoints=3)


@rule
def first_layers_sharper(qk: pd.DataFrame, share_of_layers: float = 1 / 3, min_runs: int = 2) -> Outcome:
    """Per run, at its last checkpoint, the mean attention entropy over the heads of the first ``share_of_layers``
    of the layers, as a share of the uniform row's (``entropy / entropy_uniform``), is below that of the last ones."""
    def test(part):
        _, last = run_ends(part)
        ratio = (last["entropy"] / last["entropy_uniform"]).groupby(last["layer"]).mean().sort_index()
        if len(ratio) < 2:
            return None, "a single layer"
        k = max(1, int(round(len(ratio) * share_of_layers)))
        first, final = float(ratio.iloc[:k].mean()), float(ratio.iloc[-k:].mean())
        return bool(first < final), (f"entropy / uniform {first:.3f} in the first {k} layer(s), {final:.3f} in the "
                                     f"last {k} (step {int(last['step'].iloc[0]):,})")

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def qk_anisotropy_emerges(qk: pd.DataFrame, min_rho: float = 0.5, min_runs: int = 2, min_checkpoints: int = 3
                          ) -> Outcome:
    """Per run, from its first checkpoint after warm-up on, the median over heads of the mean cosine of the queries
    (``q_cosine``) and of the keys (``k_cosine``) both rise along the whole series: Spearman's rho of each against
    the step is at least ``min_rho`` and the last checkpoint is above the first (a rise that falls back does not
    count); holds in most of at least ``min_runs`` runs."""
    if not {"q_cosine", "k_cosine"} <= set(qk.columns):
        return Outcome(None, "no mean cosine of the queries and keys in the frame")

    def test(part):
        words, ok = [], True
        for column, name in (("q_cosine", "queries"), ("k_cosine", "keys")):
            curve = _series(part, column)
            ok = ok and rises(curve.index.to_numpy(float), curve.to_numpy(float), min_rho)
            words.append(f"{name} {_along(curve)}")
        return ok, ", ".join(words)

    return over_runs(qk, test, min_runs, from_warmup=True, min_checkpoints=min_checkpoints)


@rule
def first_axis_is_drift(axes: pd.DataFrame, min_share: float = 0.5, min_heads: int = 1) -> Outcome:
    """Section 5, "the first dimension of the SVD seems to describe this common drift": per head shown, with the
    SVD of the union of its queries and keys of every step, at least ``min_share`` of the squared length of each
    mean's displacement from the first to the last step lies along the first singular axis (cos^2 >= min_share);
    holds for most of at least ``min_heads`` heads."""
    part = axes[axes["fit_on"] == "union"] if "fit_on" in axes.columns else axes.iloc[:0]
    if len(part) < min_heads:
        return too_few("heads with sampled queries and keys", len(part), min_heads)
    flags, words = [], []
    for _, r in part.iterrows():
        q2, k2 = r["q_axis_cos"] ** 2, r["k_axis_cos"] ** 2
        flags.append(bool(q2 >= min_share and k2 >= min_share))
        words.append(f"layer {int(r['layer']) + 1} head {int(r['head']) + 1}: cos² {q2:.2f} (Q̄), {k2:.2f} (K̄)")
    return Outcome(majority(flags), f"{sum(flags)} of {len(flags)} heads with both displacements at least "
                                    f"{min_share:.0%} along the first axis (" + "; ".join(words) + ")")


@rule
def other_drifts_opposite(axes: pd.DataFrame, min_heads: int = 1) -> Outcome:
    """Appendix C: with the SVD of one distribution only (keys, or queries), along its first axis the mean of that
    distribution moves away from the origin from the first to the last step (|projection| grows), and the mean of the
    other one moves away too, ending on the opposite side; per head shown and per basis, holds when most do (at
    least ``min_heads`` heads)."""
    part = axes[axes["fit_on"].isin(["keys", "queries"])] if "fit_on" in axes.columns else axes.iloc[:0]
    if part[["layer", "head"]].drop_duplicates().shape[0] < min_heads:
        return too_few("heads with sampled queries and keys", part[["layer", "head"]].drop_duplicates().shape[0],
                       min_heads)
    flags, words = [], []
    for _, r in part.iterrows():
        fit, other = ("k", "q") if r["fit_on"] == "keys" else ("q", "k")
        away = abs(r[f"{fit}_last"]) > abs(r[f"{fit}_first"])
        other_away = abs(r[f"{other}_last"]) > abs(r[f"{other}_first"])
        opposite = np.sign(r[f"{other}_last"]) == -np.sign(r[f"{fit}_last"]) != 0
        flags.append(bool(away and other_away and opposite))
        words.append(f"layer {int(r['layer']) + 1} head {int(r['head']) + 1}, SVD of the {r['fit_on']}: "
                     f"{r['fit_on']} {r[f'{fit}_first']:+.2f} → {r[f'{fit}_last']:+.2f}, the other "
                     f"{r[f'{other}_first']:+.2f} → {r[f'{other}_last']:+.2f}")
    return Outcome(majority(flags), f"{sum(flags)} of {len(flags)} bases: " + "; ".join(words))


@rule
def alignment_unlikely_at_random(qk: pd.DataFrame, alpha: float = 0.01, min_runs: int = 2,
                                 head_dim: int | None = None) -> Outcome:
    """Section 5, "such an alignment is very unlikely to happen randomly": per run, at its last checkpoint, the
    median over heads of |cos(Q̄, K̄)| has a two-sided probability below ``alpha`` under the exact cosine of two
    independent isotropic vectors of the head dimension (``baseline.isotropic_abs_cosine_tail``); holds in most of at
    least ``min_runs`` runs. With ``head_dim`` (the paper's d_h = 64), a run of another head dimension cannot answer:
    chance alignment is likelier in fewer dimensions, so a claim about d_h = 64 is not decided at d_h = 16."""
    from anisotropy.measure.baseline import isotropic_abs_cosine_tail

    def test(part):
        _, last = run_ends(part)
        d = int(part["head_dim"].iloc[0])
        if head_dim is not None and d != head_dim:
            return None, f"head dimension {d}, not the claim's d_h = {head_dim}"
        median = float(last["cos_qk"].abs().median())
        p = float(isotropic_abs_cosine_tail(median, d))
        return p < alpha, (f"median |cos| {median:.2f} at step {int(last['step'].iloc[0]):,}, P(|cos| >= it) = {p:.1e} "
                           f"at random in d_h = {d}")

    return over_runs(qk, test, min_runs)


@rule
def alignment_links_sharpness(qk: pd.DataFrame, min_rho: float = 0.3, min_runs: int = 2) -> Outcome:
    """Section 5's summary, "the drifts of queries and keys tend to align, thus increasing the magnitude of scalar
    products, and the general sharpness of self-attention", read across the heads of a run at its last checkpoint:
    Spearman's rho of |cos(Q̄, K̄)| with |Q̄·K̄| is at least ``min_rho``, and of |Q̄·K̄| with the attention entropy at
    most -``min_rho`` (better-aligned heads have larger products, larger products sharper rows); holds in most of at
    least ``min_runs`` runs."""
    from anisotropy.claims.rules.common import spearman

    def test(part):
        _, last = run_ends(part)
        if len(last) < 3:
            return None, "fewer than 3 heads"
        cos, dot = last["cos_qk"].abs().to_numpy(float), last["dot_qk"].abs().to_numpy(float)
        r1, r2 = spearman(cos, dot), spearman(dot, last["entropy"].to_numpy(float))
        ok = bool(np.isfinite(r1) and np.isfinite(r2) and r1 >= min_rho and r2 <= -min_rho)
        return ok, (f"across {len(last)} heads at step {int(last['step'].iloc[0]):,}: rho(|cos|, |Q̄·K̄|) {r1:+.2f}, "
                    f"rho(|Q̄·K̄|, entropy) {r2:+.2f}")

    return over_runs(qk, test, min_runs)
