"""Hub stand-in (docstring written below)."""

from .build import ensure_built, paper_manifest, populate
from .run import StandIn, ensure_venv, serve

__all__ = ["StandIn", "ensure_built", "ensure_venv", "paper_manifest", "populate", "serve"]
