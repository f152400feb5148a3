"""The Pythia counterpoint page (Paper 2): counts of its per-model table in words."""

from __future__ import annotations

import pandas as pd


def counted(mask: pd.Series) -> str:
    """"<k> of <n>": how many of the models a boolean ``mask`` marks."""
    return f"{int(mask.sum())} of {len(mask)}"
