"""The rules of Paper 1, Section 5: queries and keys along training (per-head statistics of checkpoint series). See
``rules`` for what a rule is.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.rules.common import Outcome, after_warmup, each_run, over_runs, rule, run_ends, too_few


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


@rule
def alignment_grows(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, from the end of warm-up to the last checkpoint: the median |cos(Q̄, K̄)| over heads and the share of
    heads outside the isotropic 95% band both grow; holds in most runs."""
    from anisotropy.experiments.qk_dynamics import null_cosine_bound

    def test(part):
        first, last = run_ends(part)
        bound = null_cosine_bound(int(part["head_dim"].iloc[0]))
        m0, m1 = first["cos_qk"].abs().median(), last["cos_qk"].abs().median()
        s0, s1 = (first["cos_qk"].abs() > bound).mean(), (last["cos_qk"].abs() > bound).mean()
        return bool(m1 > m0 and s1 > s0), (f"median |cos| {m0:.2f} → {m1:.2f}, outside the band {s0:.0%} → "
                                           f"{s1:.0%} (step {int(first['step'].iloc[0]):,} → "
                                           f"{int(last['step'].iloc[0]):,})")

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def dot_grows(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the median |Q̄·K̄| over heads is larger at the last checkpoint than at the end of warm-up."""
    def test(part):
        first, last = run_ends(part)
        a, b = first["dot_qk"].abs().median(), last["dot_qk"].abs().median()
        return bool(b > a), (f"median |Q̄·K̄| {a:.3g} → {b:.3g} "
                             f"(step {int(first['step'].iloc[0]):,} → {int(last['step'].iloc[0]):,})")

    return over_runs(qk, test, min_runs, from_warmup=True)


@rule
def entropy_falls(qk: pd.DataFrame, min_runs: int = 2) -> Outcome:
    """Per run, the mean attention entropy over heads is lower at the last checkpoint than at the end of warm-up."""
    def test(part):
        first, last = run_ends(part)
        a, b = first["entropy"].mean(), last["entropy"].mean()
        return bool(b < a), (f"entropy {a:.3f} → {b:.3f} nats "
                             f"(step {int(first['step'].iloc[0]):,} → {int(last['step'].iloc[0]):,})")

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
    last_layer = part[part["layer"] == part["layer"].max()]
    curve = last_layer.groupby("step")["cos_qk"].mean().sort_index()
    negative = (curve < 0).to_numpy()
    if not negative[-1]:
        return float("nan")
    start = len(negative) - 1
    while start > 0 and negative[start - 1]:
        start -= 1
    return float(curve.index[start] / curve.index[-1])


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
    """``experiments.qk_dynamics.alignment_summary`` of ``runs_from_warmup``: one row per run, its ``holds`` the three-part test
    (median |cos| grows, more heads outside the band, entropy falls) that ``every_run_holds`` requires of every run."""
    from anisotropy.experiments.qk_dynamics import alignment_summary

    return alignment_summary(runs_from_warmup(qk, keep_short))


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
