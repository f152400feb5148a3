"""The character-level page (Paper 1, Section 3): what it asks of a runtime."""

from __future__ import annotations

from anisotropy.chapters import p1_s3_token_level
from anisotropy.pages import budget


def plan(p: dict, out: budget.Plan) -> None:
    """The token-level page's protocol (``p1_s3_token_level.plan``) on the character-level models."""
    p1_s3_token_level.plan(p, out)
