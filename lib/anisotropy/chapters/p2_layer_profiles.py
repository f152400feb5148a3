"""The layer-profiles page (Paper 2, Figure 1): the shape of the profiles in words."""

from __future__ import annotations

import pandas as pd

from .. import claims, rules_p2


def describe(rows: pd.DataFrame) -> str:
    """How bell-shaped the profiles of ``rows`` (one per model: interior_peak, peak_to_ends, peak_depth) are, in one
    phrase ("no model" when empty)."""
    if rows.empty:
        return "no model"
    return (f"{int(rows['interior_peak'].sum())} of {len(rows)} peak inside the stack, mean peak-to-ends ratio "
            f"{rows['peak_to_ends'].mean():.2f}, mean peak depth {rows['peak_depth'].mean():.2f}")


def bulge(summary: pd.DataFrame, label: str, claim_id: str = "p2-f1-decoders-bell") -> str:
    """Whether one model's profile (``summary`` rows of ``label``) is bell-shaped by the test the ledger's claim
    ``claim_id`` applies to each decoder (its own min_ratio and band), with the numbers that decided it."""
    part = summary[summary["label"] == label]
    if part.empty:
        return "not measured under this profile"
    params = claims.claim(claim_id).params
    min_ratio, band = params["min_ratio"], tuple(params["band"])
    bell, ratio, depth = rules_p2.profile_bell(part, min_ratio, band)
    test = (f"its largest value is {ratio:.2f} times the mean of its two ends, at relative depth {depth:.2f}; the "
            f"ledger's test of a bell asks for {min_ratio:g} times, within relative depth {band[0]:g}-{band[1]:g}")
    return f"{'yes' if bell else 'no'}: {test}"
