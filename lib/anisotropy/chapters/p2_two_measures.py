"""The two-measures page (Paper 2): what it asks of a runtime."""

from __future__ import annotations

from anisotropy.chapters import p2_layer_profiles
from anisotropy.pages import budget


def plan(p: dict, out: budget.Plan) -> None:
    """Paper 2's protocol (``p2_layer_profiles.plan``) with its default metrics."""
    p2_layer_profiles.plan(p, out)
