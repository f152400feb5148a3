"""The closing page: the tally of the papers' claims by the question their verdict answers (its four lines, its
figure), the book's own findings counted apart, and the gathered verdict rows as its tables show them."""

from __future__ import annotations

import pandas as pd

from anisotropy.claims import ledger, stand_ins
from anisotropy.pages import plots, report

#: The glue prefix of each question's line of the tally on the page.
GLUE_PREFIX = {"papers": "q_papers", "setup": "q_setup", "real": "q_real", "self-trained": "q_self"}


def papers_claims(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (gathered ledger rows) that are claims of the two papers."""
    return frame[frame["paper"].isin(["1", "2"])]


def books_findings(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` that are the book's own findings (``paper: book``): counted apart from the papers'."""
    return frame[frame["paper"] == "book"]


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


def tally(frame: pd.DataFrame) -> pd.DataFrame:
    """The tally of the ledger rows ``frame``: one line per question of ``stand_ins.QUESTIONS`` (the papers' models,
    the papers' setup, other real models, the book's training runs) with the decided verdicts that answer it
    (``ledger.by_question``)."""
    return ledger.by_question(frame)


def glue_tally(frame: pd.DataFrame) -> pd.DataFrame:
    """Glue ``q_<question>_holds``, ``_fails`` and ``_decided`` for each line of ``tally(frame)`` and return it."""
    counts = tally(frame)
    for key, (label, _) in stand_ins.QUESTIONS.items():
        for column, name in ((ledger.HOLDS, "holds"), (ledger.FAILS, "fails"), ("decided", "decided")):
            report.glue(f"{GLUE_PREFIX[key]}_{name}", int(counts.loc[label, column]))
    return counts


def tally_table(counts: pd.DataFrame, profile: str):
    """The four-line tally as the page shows it: the question in words beside its short label."""
    words = {label: question for label, question in stand_ins.QUESTIONS.values()}
    shown = counts.rename_axis("decided on").reset_index()
    shown.insert(1, "the question", shown["decided on"].map(words))
    return (shown.style.hide(axis="index")
            .set_caption(f"The decided claims of the two papers by the question their verdict answers, under the "
                         f"{profile} profile"))


def tally_figure(frame: pd.DataFrame):
    """The tally's figure (``pages.plots.verdicts_by_question``): one bar per question, split by verdict."""
    return plots.verdicts_by_question(tally(frame))
