"""The closing page: the tally of the papers' claims by the question their verdict answers."""

from __future__ import annotations

import pandas as pd

from anisotropy.pages.plots.style import figure

#: The colours of the two decided verdicts, in the order of the tally's columns (holds, does not hold).
VERDICT_COLOURS = ("#1b7837", "#b2182b")


def verdicts_by_question(counts: pd.DataFrame):
    """Horizontal stacked bars, one per row of ``counts`` (the tally: one row per question, top to bottom; its first
    two columns the verdicts that hold and that do not hold), each segment labelled with its count."""
    fig, axes = figure(height=0.45 * len(counts) + 1.0)
    ax = axes[0, 0]
    rows = list(counts.index)[::-1]  # the first question on top
    left = pd.Series(0, index=rows)
    for verdict, colour in zip(counts.columns[:2], VERDICT_COLOURS):
        values = counts.loc[rows, verdict]
        ax.barh(rows, values, left=left, color=colour, label=verdict)
        for y, (x0, v) in enumerate(zip(left, values)):
            if v:
                ax.text(x0 + v / 2, y, str(int(v)), ha="center", va="center", color="white", fontsize=9)
        left = left + values
    ax.set_xlabel("decided claims of the two papers")
    ax.set_xlim(0, max(1, int(left.max())) * 1.05)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    return fig
