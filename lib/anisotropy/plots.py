"""The book's one figure style, and one function per figure kind.

Functions take tidy pandas frames (one row per observation) and return a matplotlib ``Figure``; chapters glue the
figure with ``report.glue_figure`` and caption it with the paper figure it reproduces.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
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


# ---- Appendix B: the isotropic null -------------------------------------------------------------------------------

def cosine_null_densities(samples: pd.DataFrame, exact: pd.DataFrame):
    """Paper 1, Figure 17: Monte Carlo histograms of the cosine (columns ``d``, ``cosine``) with the exact densities
    (columns ``d``, ``t``, ``density``) overlaid, one colour per dimension."""
    fig, axes = figure(height=3.8)
    ax = axes[0, 0]
    dims = sorted(samples["d"].unique())
    colours = sns.color_palette("viridis", len(dims))
    for colour, d in zip(colours, dims):
        values = samples.loc[samples["d"] == d, "cosine"].to_numpy()
        ax.hist(values, bins=120, density=True, histtype="stepfilled", alpha=0.25, color=colour)
        curve = exact[exact["d"] == d]
        ax.plot(curve["t"], curve["density"], color=colour, lw=1.4, label=f"d = {d}")
    ax.set_xlabel("cosine similarity of two independent isotropic Gaussian vectors")
    ax.set_ylabel("density")
    ax.set_xlim(-0.6, 0.6)
    ax.legend(title="histogram: Monte Carlo\nline: exact density", ncols=2, fontsize="small")
    return fig


def cosine_null_quantiles(quantiles: pd.DataFrame, measured: pd.DataFrame | None = None):
    """Paper 1, Figure 18: the 95th percentile of the null against d on log axes, Monte Carlo points over the exact
    curve. ``measured`` (optional; columns ``d``, ``mean_cosine``, ``model``) adds models' layer-wise mean cosine."""
    fig, axes = figure(height=3.8)
    ax = axes[0, 0]
    exact = quantiles.sort_values("d")
    ax.plot(exact["d"], exact["exact_q95"], color="0.2", lw=1.5, label="exact 95th percentile")
    ax.scatter(exact["d"], exact["monte_carlo_q95"], color=sns.color_palette(PALETTE)[1], zorder=3, s=28,
               label="Monte Carlo 95th percentile")
    if measured is not None and len(measured):
        sns.stripplot(data=measured, x="d", y="mean_cosine", hue="model", ax=ax, native_scale=True, size=4,
                      jitter=0.05, alpha=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("dimension d")
    ax.set_ylabel("cosine similarity")
    ax.legend(fontsize="small")
    return fig
