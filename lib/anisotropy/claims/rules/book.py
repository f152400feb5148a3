"""Rules of the book's own findings about the papers' measures (claims with ``paper: book``) that belong to no
section's module: e.g. how much of Paper 2's sigma_1 share a handful of massive tokens carries."""

from __future__ import annotations

from anisotropy.claims.rules.common import Outcome, rule  # noqa: F401
