"""The rules of Paper 1, Section 5: queries and keys along training (per-head statistics of checkpoint series). See
``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims import curves
# the warm-ups of the checkpoint series live in ``claims.curves``; their names stay importable from here
from anisotropy.claims.curves import MULTIBERTS_WARMUP, after_warmup, warmup_steps  # noqa: F401
from anisotropy.claims.rules.common import MIN_KEPT, Outcome, each_run, majority, over_runs, rule, run_ends, too_few


# Paper 1, Section 5: per-head statistics along training (columns run, layer, head, step, cos_qk, dot_qk, entropy,
# head_dim, q_mean, k_mean, warmup). The rules compare from the run's first checkpoint at or after the end of its
# learning-rate warm-up: at step 0 attention is uniform and the mean query and key are unrelated, so any training at
# all would make "the entropy falls" and "the scalar product grows" hold.


def _series(part: pd.DataFrame, column: str, how: str = "median", absolute: bool = False) -> pd.Series:
    """One run's per-checkpoint statistic over heads (``how`` of ``column``, of its absolute value with
    ``absolute``), in step order."""
    values = part[column].abs() if absolute else part[column]
    return values.groupby(part["step"]).agg(how).sort_index()


def _rise(curve: pd.Series, min_rho: float, min_kept: float, sign: int = 1) -> tuple[bool | None, curves.Trend]:
    """``curves.rises`` of one run's per-checkpoint series (index: step)."""
    return curves.rises(curves.Curve(curve.index.to_numpy(float), curve.to_numpy(float)), min_rho, min_kept, sign)


def _alignment(part: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """One run's median |cos(Q̄, K̄)| over heads and share of heads outside the isotropic 95% band of their
    dimension, per checkpoint."""
    # cost: pulls torch (~2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.experiments.qk_dynamics import null_cosine_bound

    bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
    return (_series(part, "cos_qk", absolute=True),
            (part["cos_qk"].abs() > bound).groupby(part["step"]).mean().sort_index())


def _both(*verdicts: bool | None) -> bool | None:
    """All of ``verdicts`` hold (False if one does not; None if one cannot tell and none fails)."""
    return False if False in verdicts else None if None in verdicts else True


@rule
def alignment_grows(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2) -> Outcome:
    """Monotone rise (``curves.rises``): per run, from the end of warm-up on, the median |cos(Q̄, K̄)| over heads and
    the share of heads outside the isotropic 95% band both rise along the whole series (Spearman's rho against the
    step at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the gain kept at the end); holds
    in most runs."""
    def test(part):
        median, outside = _alignment(part)
        (a, ta), (b, tb) = _rise(median, min_rho, min_kept), _rise(outside, min_rho, min_kept)
        return _both(a, b), f"median |cos| {ta.words()}, outside the band {tb.words('.0%')}"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def almost_all_heads_align(qk: pd.DataFrame, share: float = 0.9, min_rho: float = 0.5, min_kept: float = MIN_KEPT,
                           min_runs: int = 2) -> Outcome:
    """Figure 13's caption, "almost all heads see Q̄_s and K̄_s align", a level reached by a monotone rise
    (``curves.rises``): per run, at its last checkpoint at least ``share`` of the heads have |cos(Q̄, K̄)| outside the
    isotropic two-sided 95% band of their dimension (``null_cosine_bound``), and that share rises along the series
    from the end of warm-up (rho at least ``min_rho`` with its interval clear of 0, ``min_kept`` of the gain kept);
    holds in most runs."""
    def test(part):
        _, outside = _alignment(part)
        rising, t = _rise(outside, min_rho, min_kept)
        ok = False if outside.iloc[-1] < share else rising
        return ok, f"heads outside the isotropic band {t.words('.0%')} (at least {share:.0%} asked at the end)"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def dot_grows(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2) -> Outcome:
    """Monotone rise (``curves.rises``): per run, from the end of warm-up on, the median |Q̄·K̄| over heads rises
    along the whole series (rho at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the gain
    kept); holds in most runs."""
    def test(part):
        ok, t = _rise(_series(part, "dot_qk", absolute=True), min_rho, min_kept)
        return ok, f"median |Q̄·K̄| {t.words('.3g')}"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def entropy_falls(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2) -> Outcome:
    """Monotone fall (``curves.rises`` with sign -1): per run, from the end of warm-up on, the mean attention entropy
    over heads falls along the whole series (rho at most -``min_rho`` with its interval clear of 0, at least
    ``min_kept`` of the drop kept at the end); holds in most runs."""
    def test(part):
        ok, t = _rise(_series(part, "entropy", how="mean"), min_rho, min_kept, sign=-1)
        return ok, f"entropy {t.words('.3f')} nats"

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def common_first_opposite_last(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT,
                               min_runs: int = 2) -> Outcome:
    """A monotone rise in the first layer and a monotone fall in the last (``curves.rises``): per run, from the end of
    warm-up, the mean over heads of cos(Q̄, K̄) of the first layer rises along the series and ends positive, that of
    the last layer falls and ends negative (rho at least ``min_rho`` in the direction read, its interval clear of 0,
    ``min_kept`` of the change kept); holds in most runs."""
    def test(part):
        by_layer = part.groupby(["layer", "step"])["cos_qk"].mean()
        layers = sorted(part["layer"].unique())
        if len(layers) < 2:
            return None, "a single layer"
        (up, tu), (down, td) = (_rise(by_layer.loc[layers[0]], min_rho, min_kept),
                                _rise(by_layer.loc[layers[-1]], min_rho, min_kept, sign=-1))
        ends = tu.last > 0 > td.last
        return (_both(up, down) if ends else False), f"first layer {tu.words('+.2f')}, last layer {td.words('+.2f')}"

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


def three_part_test(qk: pd.DataFrame, keep_short: bool = False, min_rho: float = 0.5,
                    min_kept: float = MIN_KEPT) -> pd.DataFrame:
    """``experiments.qk_dynamics.alignment_summary`` of ``runs_from_warmup``: one row per run, with ``holds``, the
    three-part test that ``every_run_holds`` requires of every run, three monotone trends (``curves.rises``) from the
    end of the warm-up: the median |cos| and the share of heads outside the isotropic band rise, and the mean
    attention entropy falls (rho at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the
    change kept). ``holds`` is None for a run whose trends cannot tell (too few checkpoints). With ``keep_short``
    (a page's row for every run), a run kept whole (no warm-up known, as the two stages of untrained and pretrained
    weights: no training series) compares its first and last stage: each of the three moves that way."""
    # cost: pulls torch (~2 s) into the claims ledger, which reads stored numbers only
    from anisotropy.experiments.qk_dynamics import alignment_summary

    summary = alignment_summary(runs_from_warmup(qk, keep_short))
    if summary.empty:
        return summary.assign(holds=pd.Series(dtype=object))
    verdicts = {}
    for run, part in each_run(qk):
        trimmed = after_warmup(part)
        series = trimmed if trimmed["step"].nunique() >= 2 else part
        (median, outside), entropy = _alignment(series), _series(series, "entropy", how="mean")
        if series is part:  # kept whole: two stages, not a series
            verdicts[run] = bool(median.iloc[-1] > median.iloc[0] and outside.iloc[-1] > outside.iloc[0]
                                 and entropy.iloc[-1] < entropy.iloc[0])
        else:
            verdicts[run] = _both(_rise(median, min_rho, min_kept)[0], _rise(outside, min_rho, min_kept)[0],
                                  _rise(entropy, min_rho, min_kept, sign=-1)[0])
    return summary.assign(holds=summary["run"].map(verdicts).astype(object))


@rule
def every_run_holds(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT,
                    min_runs: int = 2) -> Outcome:
    """Monotone trends in every run (``three_part_test``: the median |cos| and the heads outside the band rise, the
    entropy falls, each a ``curves.rises`` from the end of warm-up with ``min_rho`` and ``min_kept``) in every one of
    at least ``min_runs`` runs; undecided where a run cannot tell and none fails."""
    summary = three_part_test(qk, min_rho=min_rho, min_kept=min_kept)  # runs with two checkpoints after warm-up
    if len(summary) < min_runs:
        return too_few("runs with two checkpoints after their warm-up", len(summary), min_runs)
    flags = list(summary["holds"])
    words = (f"the three trends hold for {flags.count(True)} of {len(flags)} seeds"
             + (f", {flags.count(None)} cannot tell (too few checkpoints)" if None in flags else "")
             + f" (from step {', '.join(f'{s:,}' for s in summary['first_step'].unique())})")
    return Outcome(_both(*flags), words)


@rule
def qk_norms_grow(qk: pd.DataFrame, min_ratio: float = 1.1, min_rho: float = 0.5, min_kept: float = MIN_KEPT,
                  min_runs: int = 2, min_checkpoints: int = 3) -> Outcome:
    """Paper 1, Section 5, a monotone rise (``curves.rises``): per run, from its first checkpoint after warm-up on,
    the median over heads of the norm of the mean query (``q_norm``) and of the mean key (``k_norm``) both rise along
    the whole series (rho at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the gain kept
    at the end) and end at least ``min_ratio`` times where they started; holds in most of at least ``min_runs``
    runs."""
    if not {"q_norm", "k_norm"} <= set(qk.columns):
        return Outcome(None, "no norms of the mean query and key in the frame")

    def test(part):
        verdicts, words = [], []
        for column, name in (("q_norm", "|Q̄|"), ("k_norm", "|K̄|")):
            ok, t = _rise(_series(part, column), min_rho, min_kept)
            verdicts.append(ok if ok is not True else bool(t.last >= min_ratio * t.first))
            words.append(f"median {name} {t.words('.3g')}")
        return _both(*verdicts), ", ".join(words)

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
def qk_anisotropy_emerges(qk: pd.DataFrame, min_rho: float = 0.5, min_kept: float = MIN_KEPT, min_runs: int = 2,
                          min_checkpoints: int = 3) -> Outcome:
    """Monotone rise (``curves.rises``): per run, from its first checkpoint after warm-up on, the median over heads of
    the mean cosine of the queries (``q_cosine``) and of the keys (``k_cosine``) both rise along the whole series
    (rho at least ``min_rho`` with its interval clear of 0, at least ``min_kept`` of the gain kept at the end: a rise
    that falls back does not count); holds in most of at least ``min_runs`` runs."""
    if not {"q_cosine", "k_cosine"} <= set(qk.columns):
        return Outcome(None, "no mean cosine of the queries and keys in the frame")

    def test(part):
        found = [(name, *_rise(_series(part, column), min_rho, min_kept))
                 for column, name in (("q_cosine", "queries"), ("k_cosine", "keys"))]
        return _both(*(ok for _, ok, _ in found)), ", ".join(f"{name} {t.words()}" for name, _, t in found)

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
    # cost: pulls scipy (~0.7 s) into the claims ledger, which reads stored numbers only
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
    def test(part):
        _, last = run_ends(part)
        if len(last) < 3:
            return None, "fewer than 3 heads"
        cos, dot = last["cos_qk"].abs().to_numpy(float), last["dot_qk"].abs().to_numpy(float)
        r1, r2 = curves.spearman(cos, dot), curves.spearman(dot, last["entropy"].to_numpy(float))
        ok = bool(np.isfinite(r1) and np.isfinite(r2) and r1 >= min_rho and r2 <= -min_rho)
        return ok, (f"across {len(last)} heads at step {int(last['step'].iloc[0]):,}: rho(|cos|, |Q̄·K̄|) {r1:+.2f}, "
                    f"rho(|Q̄·K̄|, entropy) {r2:+.2f}")

    return over_runs(qk, test, min_runs)
