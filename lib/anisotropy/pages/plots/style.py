"""The book's one figure style (``use_style``), its page-width figures (``figure``, ``panel_grid``,
``empty_figure``), and what figures of several parts of the book draw alike: a line with its band of one standard
deviation (``line_with_band``) and a training-step axis (``training_step_axis``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns


PAGE_WIDTH = 7.0  # inches: a figure this wide is read at page width without rescaling its text
PALETTE = "colorblind"


def use_style() -> None:
    """Apply the book's style: seaborn whitegrid, colour-blind palette, readable fonts at page width."""
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE, font_scale=0.95)
    plt.rcParams.update({
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "figure.figsize": (PAGE_WIDTH, 4.0),
        "axes.titlesize": "medium",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
    })


def figure(ncols: int = 1, nrows: int = 1, height: float = 3.6, **kwargs):
    """A page-width figure with ``nrows`` x ``ncols`` axes."""
    return plt.subplots(nrows, ncols, figsize=(PAGE_WIDTH, height * nrows), squeeze=False, constrained_layout=True,
                        **kwargs)


def empty_figure(message: str):
    """A small figure that says why there is nothing to draw (a model list empty under this profile), so that a
    page's glued figure exists under every profile."""
    fig, axes = figure(height=1.2)
    ax = axes[0, 0]
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize="small", color="0.4", transform=ax.transAxes)
    return fig


def panel_grid(n: int, max_cols: int = 4, height: float = 2.6, **kwargs):
    """A page-width grid of ``n`` panels, at most ``max_cols`` to a row (the spare ones hidden): the figure and the
    ``n`` axes, in reading order."""
    ncols = min(n, max_cols)
    nrows = int(np.ceil(n / ncols))
    fig, axes = figure(ncols=ncols, nrows=nrows, height=height, **kwargs)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat[:n]


def training_step_axis(ax, steps) -> None:
    """Training steps on a symmetric-log axis: linear up to the first checkpoint after 0, logarithmic beyond."""
    from matplotlib.ticker import FuncFormatter

    positive = sorted(s for s in set(steps) if s > 0)
    if positive and min(steps) == 0 and positive[-1] / positive[0] > 20:
        ax.set_xscale("symlog", linthresh=positive[0], linscale=0.5)
    elif positive and min(steps) > 0 and positive[-1] / positive[0] > 20:
        ax.set_xscale("log")

    def short(x, _pos):
        for unit, size in (("M", 1e6), ("k", 1e3)):
            if abs(x) >= size:
                return f"{x / size:g}{unit}"
        return f"{x:g}"

    ax.xaxis.set_major_formatter(FuncFormatter(short))
    ax.set_xlabel("training step")


def line_with_band(ax, x, mean, std, colour, label=None, **line):
    """A line with markers and a shaded band of +- one standard deviation over batches."""
    ax.plot(x, mean, color=colour, marker=line.pop("marker", "o"), ms=line.pop("ms", 3.5), lw=line.pop("lw", 1.5),
            label=label, **line)
    if std is not None and np.any(np.asarray(std) > 0):
        ax.fill_between(x, np.asarray(mean) - std, np.asarray(mean) + std, color=colour, alpha=0.18, lw=0)
