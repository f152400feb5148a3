"""The rule of the book's ablation of Paper 1's conclusion (are sharp attention patterns possible without
anisotropy?), and the comparison table it reads. See ``rules`` for what a rule is.
"""

from __future__ import annotations

import pandas as pd

from anisotropy.claims.learnt import LEARNT_NATS
from anisotropy.claims.rules.common import Outcome, rule


# Paper 1, conclusion: the ablation (columns variant, seed, val_loss, entropy_ratio, mean_cosine[, unigram])
# Runs answer the question only if they learnt (``claims.learnt``: LEARNT_NATS below the unigram baseline), and standard
# attention is sharp (mean row entropy at most SHARP_RATIO of the uniform row's). Otherwise the comparison is between
# models that barely use attention, and the claim stays undecided.
SHARP_RATIO = 0.9


def ablation_learnt(ablation: pd.DataFrame) -> tuple[float, float]:
    """What the two conditions read: the runs' mean final loss below the unigram baseline (nats; NaN without a
    ``unigram`` column) and the standard runs' mean entropy ratio (row entropy / uniform row's)."""
    gain = float((ablation["unigram"] - ablation["val_loss"]).mean()) if "unigram" in ablation else float("nan")
    return gain, float(ablation.loc[ablation["variant"] == "standard", "entropy_ratio"].mean())


def ablation_unanswerable(ablation: pd.DataFrame) -> str | None:
    """Why the ablation's runs cannot answer its question (they did not learn), or None when they can."""
    gain, ratio = ablation_learnt(ablation)
    if gain < LEARNT_NATS:
        return f"the runs did not learn: {gain:.2f} nats below the unigram baseline (at least {LEARNT_NATS} asked)"
    if ratio > SHARP_RATIO:
        return (f"standard attention is close to uniform ({ratio:.2f} of uniform entropy, at most {SHARP_RATIO} "
                f"asked): no answer at this size")
    return None


# Differences smaller than these count as none (entropy ratio, nats of loss, mean cosine): the precision the ablation
# page prints. With several seeds the standard's seed range is the yardstick; with one seed it is a point, and a
# difference in the third decimal would otherwise decide a verdict.
ABLATION_TOLERANCE = 0.01


def ablation_comparison(ablation: pd.DataFrame, tolerance: float = ABLATION_TOLERANCE) -> pd.DataFrame:
    """Each variant but standard against the standard runs, one row per variant (booleans): ``sharp`` (mean entropy
    ratio no higher than the standard's worst seed), ``good`` (mean loss no higher than the standard's worst seed),
    ``isotropic`` (every seed's hidden mean cosine below every standard seed's), each up to ``tolerance``,
    ``winner`` (all three), and ``sharper`` (mean entropy ratio below the standard's sharpest seed by more than
    ``tolerance``)."""
    std = ablation[ablation["variant"] == "standard"]
    rows = [{"variant": variant,
             "sharp": bool(part["entropy_ratio"].mean() <= std["entropy_ratio"].max() + tolerance),
             "good": bool(part["val_loss"].mean() <= std["val_loss"].max() + tolerance),
             "isotropic": bool(part["mean_cosine"].max() < std["mean_cosine"].min() - tolerance),
             "sharper": bool(part["entropy_ratio"].mean() < std["entropy_ratio"].min() - tolerance)}
            for variant, part in ablation.groupby("variant", sort=False) if variant != "standard"]
    table = pd.DataFrame(rows, columns=["variant", "sharp", "good", "isotropic", "sharper"])
    return table.assign(winner=table["sharp"] & table["good"] & table["isotropic"])


@rule
def sharp_without_anisotropy(ablation: pd.DataFrame) -> Outcome:
    if "standard" not in set(ablation["variant"]) or ablation["variant"].nunique() < 2:
        return Outcome(None, "needs the standard attention and at least one variant")
    if (why := ablation_unanswerable(ablation)) is not None:
        return Outcome(None, why)
    table = ablation_comparison(ablation)
    words = [f"{r.variant}: {'as sharp' if r.sharp else 'less sharp'}, {'as good' if r.good else 'worse loss'}, "
             f"{'more isotropic' if r.isotropic else 'not more isotropic'}" for r in table.itertuples()]
    return Outcome(bool(table["winner"].any()), "; ".join(words))
