"""The Pythia counterpoint page (Paper 2): counts of its per-model table in words, and what it asks of a runtime."""

from __future__ import annotations

import pandas as pd

from anisotropy.chapters import p2_layer_profiles
from anisotropy.pages import budget, report


def counted(mask: pd.Series) -> str:
    """"<k> of <n>": how many of the models a boolean ``mask`` marks."""
    return f"{int(mask.sum())} of {len(mask)}"


def band_words(summary: pd.DataFrame) -> str:
    """Which models of ``summary`` (one row per layer, with ``n_batches``) were measured on a single batch, so that
    their curves have no band, in a phrase."""
    single = [label for label, part in summary.groupby("label", sort=False) if part["n_batches"].max() < 2]
    if not single:
        return "every model measured on several batches"
    if len(single) == summary["label"].nunique():
        return "every model measured on a single batch here, so no curve has a band"
    return f"{report.listing(single)} measured on a single batch here, so their curves have no band"


def plan(p: dict, out: budget.Plan) -> None:
    """Paper 2's protocol (``p2_layer_profiles.plan``) with the final norm split (``split_final_norm``): the last
    block's output measured before and after the final norm, one hidden state more per model."""
    p2_layer_profiles.plan(p, out, extra_states=1)
