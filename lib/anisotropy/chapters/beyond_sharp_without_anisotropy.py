"""The ablation page (sharp attention without anisotropy): its per-variant numbers in words."""

from __future__ import annotations

import numpy as np
import pandas as pd


def spread(by_variant: pd.DataFrame, variant: str, column: str, n_seeds: int, fmt: str = "{:.3f}") -> str:
    """'mean (min-max over seeds)' of a final-checkpoint statistic of ``by_variant`` (columns ``(column, mean|min|max)``),
    the mean alone with one seed, "— (zero means)" when it is NaN."""
    m, lo, hi = (by_variant.loc[variant, (column, s)] for s in ("mean", "min", "max"))
    if np.isnan(m):
        return "— (zero means)"
    return fmt.format(m) if n_seeds == 1 else f"{fmt.format(m)} ({fmt.format(lo)}–{fmt.format(hi)})"
