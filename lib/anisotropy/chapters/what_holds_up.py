"""The closing page: the gathered verdict rows of every chapter as its tables show them."""

from __future__ import annotations

import pandas as pd


def linked(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of the ledger rows ``frame`` with each claim's chapter as a link to its page."""
    out = frame.copy()
    out["chapter"] = [f'<a href="{c}.html">{c}</a>' for c in out["chapter"]]
    return out
