"""Rules of the book's own findings about the papers' measures (claims with ``paper: book``) that belong to no
section's module: e.g. how much of Paper 2's sigma_1 share a handful of massive tokens carries."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims.rules.common import Outcome, majority, rule, too_few


@rule
def first_position_carries_share(profiles: pd.DataFrame, stack: str = "decoder", factor: float = 2.0,
                                 band=(0.2, 0.8), min_models: int = 1) -> Outcome:
    """Per model of ``stack``: the median over its layers within ``band`` of relative depth of sigma1_share over
    sigma1_share_no_first (the same batches without each sequence's first position) is at least ``factor``; holds
    when it is for most of at least ``min_models`` models. A measurement whose vectors leave the sequence's first
    position out (``first_position_measured`` False: a <bos> the protocol skips) cannot answer."""
    if "sigma1_share_no_first" not in profiles.columns:
        return Outcome(None, "the profiles carry no share without the first position")
    part = profiles[(profiles["stack"] == stack) & profiles["relative_depth"].between(*band)]
    if "after_final_norm" in part.columns:
        part = part[~part["after_final_norm"].astype(bool)]
    skipped = ""
    if "first_position_measured" in part.columns:
        without = part.loc[~part["first_position_measured"].astype(bool), "label"].unique()
        part = part[part["first_position_measured"].astype(bool)]
        if len(without):
            skipped = (f"; not read: {', '.join(without)} (its tokenizer opens every text with a special token that "
                       "the protocol leaves out, so the sequence's first position is not among its vectors)")
    ratios = {name: float((rows["sigma1_share"] / rows["sigma1_share_no_first"]).median())
              for name, rows in part.groupby("label", sort=False)}
    ratios = {name: r for name, r in ratios.items() if np.isfinite(r)}
    if len(ratios) < min_models:
        return too_few(f"{stack}s with both shares", len(ratios), min_models, skipped.lstrip("; "))
    flags = [r >= factor for r in ratios.values()]
    return Outcome(majority(flags), f"{sum(flags)} of {len(flags)} {stack}s: the middle layers' share over the share "
                   "without the first position, median " + ", ".join(f"{n} ×{r:.1f}" for n, r in ratios.items())
                   + skipped)
