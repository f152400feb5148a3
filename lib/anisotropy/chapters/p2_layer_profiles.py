"""The layer-profiles page (Paper 2, Figure 1): the shape of the profiles in words."""

from __future__ import annotations

import pandas as pd


def describe(rows: pd.DataFrame) -> str:
    """How bell-shaped the profiles of ``rows`` (one per model: interior_peak, peak_to_ends, peak_depth) are, in one
    phrase ("no model" when empty)."""
    if rows.empty:
        return "no model"
    return (f"{int(rows['interior_peak'].sum())} of {len(rows)} peak inside the stack, mean peak-to-ends ratio "
            f"{rows['peak_to_ends'].mean():.2f}, mean peak depth {rows['peak_depth'].mean():.2f}")
