"""The closing page: the gathered verdict rows of every chapter as its tables show them."""

from __future__ import annotations

import pandas as pd

from anisotropy.pages import report


def linked(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of the ledger rows ``frame`` with each claim's chapter as a link to its page."""
    out = frame.copy()
    out["chapter"] = [f'<a href="{c}.html">{c}</a>' for c in out["chapter"]]
    return out


SCOPE_WORDS = {"pretrained": "about pretrained models", "training": "about training", "any": "of other kinds"}


def untestable_by_scope(frame: pd.DataFrame, untestable: str) -> str:
    """How many of the ledger rows ``frame`` of each scope have the verdict ``untestable``, in words ("8 of the 20
    claims about pretrained models, ...")."""
    parts = []
    for scope, words in SCOPE_WORDS.items():
        rows = frame[frame["scope"] == scope]
        if len(rows):
            parts.append(f"{int((rows['verdict'] == untestable).sum())} of the {len(rows)} claims {words}")
    return report.listing(parts, empty="no claim")
