"""The appendices: the isotropic null of Appendix B (Paper 1, Figures 17 and 18, with the measured models beside it)
and the measured builds of the performance appendix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from anisotropy.measure import baseline
from anisotropy.pages.plots.style import PALETTE, figure


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


FAMILY_COLOURS = dict(zip(("token-level", "character-level", "speech", "vision-transformer", "cnn", "encoder",
                             "decoder"), sns.color_palette(PALETTE, 7)))
ORIGIN_MARKERS = {"pretrained": ("o", True), "untrained": ("o", False), "self-trained": ("s", True),
                  "tiny": ("X", True)}


def cosine_null_quantiles(quantiles: pd.DataFrame, measured: pd.DataFrame | None = None, family_names=None,
                          label_points: bool = False):
    """Paper 1, Figure 18: the 95th percentile of the null against d on log axes, Monte Carlo points over the exact
    curve, and the measured models as points: ``measured`` (``claims.measured_summary`` rows: label, origin, family,
    dim, mean_cosine, min_cosine, max_cosine) puts each model's layer-averaged mean cosine at its dimension, with a
    bar spanning its layers; colour: family, marker: origin (filled circle pretrained, hollow untrained, square
    self-trained, cross tiny); models of the same dimension are spread a little sideways so that they do not hide one
    another (``label_points`` writes their names beside them). The exact curve is extended to the largest measured
    dimension; the y axis is linear below 10^-3 so that models at or below zero still show."""
    fig, axes = figure(height=4.4 if measured is not None and len(measured) else 3.8)
    ax = axes[0, 0]
    exact = quantiles.sort_values("d")
    top = int(max(exact["d"].max(), measured["dim"].max() if measured is not None and len(measured) else 0))
    grid = np.unique(np.geomspace(max(2, exact["d"].min()), top, 200).round().astype(int))
    line = [float(baseline.isotropic_cosine_quantile(0.95, int(d))) for d in grid]
    ax.plot(grid, line, color="0.2", lw=1.5, label="isotropic 95th percentile (exact)")
    ax.scatter(exact["d"], exact["monte_carlo_q95"], color="0.55", zorder=3, s=22, marker="D",
               label="isotropic 95th percentile (Monte Carlo)")
    if measured is not None and len(measured):
        families = list(dict.fromkeys(measured["family"]))
        rank = measured.groupby("dim").cumcount().to_numpy()
        count = measured.groupby("dim")["dim"].transform("size").to_numpy()
        spread = 2.0 ** ((rank - (count - 1) / 2) * 0.035)  # a few percent sideways per model sharing a dimension
        for row, x in zip(measured.itertuples(), measured["dim"].to_numpy() * spread):
            colour = FAMILY_COLOURS.get(row.family, "0.4")
            marker, filled = ORIGIN_MARKERS.get(row.origin, ("o", True))
            ax.plot([x, x], [row.min_cosine, row.max_cosine], color=colour, lw=1.0, alpha=0.5, zorder=4)
            ax.scatter([x], [row.mean_cosine], s=34, marker=marker, zorder=5, linewidths=1.2,
                       facecolor=colour if filled else "white", edgecolor=colour)
            if label_points:
                ax.annotate(row.label, (x, row.mean_cosine), xytext=(4, 2), textcoords="offset points",
                            fontsize=5.5, color=colour, alpha=0.9)
        for family in families:
            ax.scatter([], [], color=FAMILY_COLOURS.get(family, "0.4"), s=30,
                       label=(family_names or {}).get(family, family))
        for origin in dict.fromkeys(measured["origin"]):
            marker, filled = ORIGIN_MARKERS.get(origin, ("o", True))
            ax.scatter([], [], marker=marker, facecolor="0.3" if filled else "white", edgecolor="0.3", s=30,
                       label=origin)
    ax.set_xscale("log", base=2)
    lowest = float(measured["min_cosine"].min()) if measured is not None and len(measured) else None
    if lowest is not None and lowest <= 0:  # a model at or below zero: linear around 0, logarithmic above 10^-3
        ax.set_yscale("symlog", linthresh=1e-3, linscale=0.3)
        ax.set_ylim(bottom=min(-1e-3, lowest * 1.2), top=1.2)
        ax.axhline(0, color="0.6", lw=0.6)
    else:
        ax.set_yscale("log")
        bottom = min(lowest, min(line)) if lowest is not None else min(line)
        ax.set_ylim(bottom=bottom / 2, top=1.2)
    ax.set_xlabel("dimension d")
    ax.set_ylabel("cosine similarity")
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def measured_builds(builds: pd.DataFrame, reference: dict):
    """The measured builds (``benchmarks/results/builds.csv``): left, each fresh ``make book`` and ``make test`` in
    minutes of wall time against the machine's calibration (one update of the subword encoder, ms: the build's
    slowest part), one marker per command, one colour per host; right, the CPU minutes of each chapter in the
    committed reference build (``build_reference.json``)."""
    fig, axes = figure(ncols=2, height=3.8)
    left, right = axes[0, 0], axes[0, 1]
    rows = builds[builds["command"].isin(["make book", "make test"]) & builds["mlm_update_ms"].notna()]
    hosts = list(dict.fromkeys(rows["host"]))
    colours = dict(zip(hosts, sns.color_palette(PALETTE, max(len(hosts), 1))))
    markers = {"make book": "o", "make test": "s"}
    for (host, command), part in rows.groupby(["host", "command"], sort=False):
        left.scatter(part["mlm_update_ms"], part["wall_s"] / 60, color=colours[host], marker=markers[command], s=36,
                     label=f"{command}, {host}", alpha=0.85)
    left.set_xlabel("calibration: one update of the subword encoder (ms)")
    left.set_ylabel("wall time (minutes), fresh clone")
    handles, labels = left.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="xx-small")  # inside, it hid points
    chapters = pd.Series(reference.get("chapters_cpu_seconds", {}), dtype=float).sort_values() / 60
    right.barh(chapters.index, chapters.to_numpy(), color=sns.color_palette(PALETTE, 1)[0])
    right.set_xlabel(f"CPU minutes in the reference build ({reference.get('commit', '?')})")
    right.tick_params(axis="y", labelsize="x-small")
    return fig
