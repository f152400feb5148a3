"""The closing page: the gathered verdict rows of every chapter as its tables show them."""

from __future__ import annotations

import pandas as pd

from anisotropy.claims import ledger, stand_ins
from anisotropy.pages import report

#: The glue prefix of each question's tally on the page.
GLUE_PREFIX = {"papers": "q_papers", "real": "q_real", "self-trained": "q_self"}


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


def glue_questions(frame: pd.DataFrame) -> pd.DataFrame:
    """Glue ``q_<question>_holds`` and ``_fails`` for each question of ``stand_ins.QUESTIONS`` (the decided verdicts
    of the ledger rows ``frame`` that answer it) and return the table of ``ledger.by_question``."""
    counts = ledger.by_question(frame)
    for key, (label, _) in stand_ins.QUESTIONS.items():
        report.glue(f"{GLUE_PREFIX[key]}_holds", int(counts.loc[label, ledger.HOLDS]))
        report.glue(f"{GLUE_PREFIX[key]}_fails", int(counts.loc[label, ledger.FAILS]))
    return counts


def questions_figure(frame: pd.DataFrame):
    """Horizontal bars: for each question (and "not testable here"), how many claims hold and do not hold."""
    from anisotropy.pages import plots

    counts = ledger.by_question(frame)
    fig, axes = plots.figure(height=2.6)
    ax = axes[0, 0]
    colours = {ledger.HOLDS: "#1b7837", ledger.FAILS: "#b2182b", ledger.UNTESTABLE: "#999999"}
    rows = list(counts.index)[::-1]
    left = pd.Series(0, index=rows)
    for verdict, colour in colours.items():
        values = counts.loc[rows, verdict]
        ax.barh(rows, values, left=left, color=colour, label=verdict)
        for y, (x0, v) in enumerate(zip(left, values)):
            if v:
                ax.text(x0 + v / 2, y, str(int(v)), ha="center", va="center", color="white", fontsize=9)
        left = left + values
    ax.set_xlabel("claims of the two papers")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
    return fig
