"""The book's one figure style, and one function per figure kind.

Functions take tidy pandas frames (one row per observation) and return a matplotlib ``Figure``; chapters glue the
figure with ``pages.report.glue_figure`` and caption it with the paper figure it reproduces.
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


def empty_figure(message: str):
    """A small figure that says why there is nothing to draw (a model list empty under this profile), so that a
    page's glued figure exists under every profile."""
    fig, axes = figure(height=1.2)
    ax = axes[0, 0]
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize="small", color="0.4", transform=ax.transAxes)
    return fig


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
    from anisotropy.measure import baseline

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


# ---- Paper 1, Section 4: an untrained block under a common drift (issue 6) ----------------------------------------

def _bias_axis(ax, frame: pd.DataFrame) -> None:
    """Bias norms span 0 to 10^4: linear below 1, logarithmic above."""
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.5)
    ax.set_xlim(0, frame["bias_norm"].max() * 1.05)
    ax.set_xlabel("bias norm N")


def _seed_lines(ax, frame: pd.DataFrame, columns: dict, styles: dict | None = None) -> None:
    """One line per column (mean over seeds) with a band spanning the seeds (min to max); ``columns`` maps a column
    to its legend label; ``styles`` adds matplotlib keywords per column."""
    colours = sns.color_palette(PALETTE, len(columns))
    for colour, (column, label) in zip(colours, columns.items()):
        grouped = frame.groupby("bias_norm")[column]
        mean, lo, hi = grouped.mean(), grouped.min(), grouped.max()
        style = {"color": colour, "lw": 1.6, **(styles or {}).get(column, {})}
        ax.plot(mean.index, mean.to_numpy(), label=label, **style)
        if frame["seed"].nunique() > 1:
            ax.fill_between(mean.index, lo.to_numpy(), hi.to_numpy(), color=style["color"], alpha=0.2, lw=0)


def block_input_output(frame: pd.DataFrame, fixed: pd.DataFrame | None = None, labels: dict | None = None,
                       average: bool = True, fixed_average: pd.DataFrame | None = None):
    """Paper 1, Figure 6: (a) mean cosine, (b) mean norm of the rows and, with ``average``, (c) the norm of the
    average (``input_drift_norm``, ``output_drift_norm``: the quantity the paper's text follows) of the block's
    inputs and outputs against the bias norm N, bands spanning the seeds. Several variants (column ``variant``,
    named by ``labels``) share their inputs, drawn once; their outputs get one line style each. ``fixed`` (columns
    ``variant``, ``n_star``) marks the fixed points of the mean norms in (b), ``fixed_average`` those of the norms of
    the averages in (c)."""
    whats = ("cosine", "norm", "drift_norm") if average else ("cosine", "norm")
    fig, axes = figure(ncols=len(whats), height=3.6)
    variants = list(dict.fromkeys(frame["variant"]))
    dashes = ["-", "--", ":", "-."]
    colours = sns.color_palette(PALETTE, 1 + len(variants))
    first = frame[frame["variant"] == variants[0]]
    for ax, what in zip(axes[0], whats):
        _seed_lines(ax, first, {f"input_{what}": "inputs"}, {f"input_{what}": {"color": colours[0]}})
        for i, variant in enumerate(variants):
            name = "outputs" + (f", {(labels or {}).get(variant, variant)}" if len(variants) > 1 else "")
            _seed_lines(ax, frame[frame["variant"] == variant], {f"output_{what}": name},
                        {f"output_{what}": {"color": colours[1 + i], "ls": dashes[i % 4]}})
    for column, marks in ((1, fixed), (2, fixed_average if average else None)):
        if marks is None:
            continue
        for i, variant in enumerate(variants):
            values = marks.loc[marks["variant"] == variant, "n_star"].dropna()
            if len(values):
                axes[0, column].axvline(values.mean(), color="0.3", ls=dashes[i % 4], lw=0.9)
                axes[0, column].annotate(f"N* = {values.mean():.1f}", (values.mean(), 0.98),
                                         xycoords=("data", "axes fraction"), ha="right", va="top",
                                         fontsize="small", rotation=90)
    # short titles: three panels share the page width, and longer ones run into each other
    axes[0, 0].set_title("(a) mean cosine")
    axes[0, 1].set_title("(b) mean row norm")
    if average:
        axes[0, 2].set_title("(c) norm of the average")
        axes[0, 2].set_ylabel("norm of the mean vector")
        axes[0, 2].set_yscale("symlog", linthresh=1.0)
        axes[0, 2].set_ylim(bottom=0)
        _bias_axis(axes[0, 2], frame)
    fig = _cosine_norm_axes(axes, frame)
    # 0 and every other decade from 10 on the bias axis (denser labels overlap at a third of the page width), and the
    # legend below the panels rather than over the curves of (a)
    top = frame["bias_norm"].max()
    for ax in axes[0]:
        ax.set_xticks([t for t in (0, 10, 1e3, 1e5) if t <= top])
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: "0" if x == 0 else f"$10^{{{np.log10(x):.0f}}}$"))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
    handles, names = axes[0, 0].get_legend_handles_labels()
    axes[0, 0].get_legend().remove()
    fig.legend(handles, names, loc="outside lower center", ncols=len(names), fontsize="small", frameon=False)
    return fig


def score_histograms(samples: pd.DataFrame, head: int | None = 0, max_panels: int = 6):
    """Paper 1, Figure 7: histograms of the pre-softmax scores q.k / sqrt(d_k) (column ``score``) of one attention
    head (column ``head``; all heads pooled if ``head`` is None), one panel per bias norm (column ``bias_norm``), each
    with its own axis because the scores' location and scale grow with N."""
    from matplotlib.ticker import MaxNLocator

    if head is not None:
        samples = samples[samples["head"] == head]
    norms = sorted(samples["bias_norm"].unique())[:max_panels]
    ncols = min(3, len(norms))
    nrows = int(np.ceil(len(norms) / ncols))
    fig, axes = figure(ncols=ncols, nrows=nrows, height=2.5)
    colours = sns.color_palette("viridis", len(norms))
    for ax, colour, n in zip(axes.flat, colours, norms):
        values = samples.loc[samples["bias_norm"] == n, "score"].to_numpy()
        ax.hist(values, bins=60, color=colour, alpha=0.85, histtype="stepfilled")
        if values.min() < 0 < values.max():
            ax.axvline(0, color="0.3", lw=0.8)
        ax.set_title(f"N = {n:g}\nmean {values.mean():.3g}, sd {values.std():.2g}", fontsize="small")
        ax.set_yticks([])
        ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3))
        ax.tick_params(axis="x", labelsize="small")
    for ax in list(axes.flat)[len(norms):]:
        ax.set_visible(False)
    who = f"head {head}" if head is not None else "all heads"
    fig.supxlabel(f"pre-softmax score  q·k / √d_k  ({who})", fontsize="medium")
    return fig


def score_histograms_all_heads(samples: pd.DataFrame, max_panels: int = 6, bins: int = 40):
    """Paper 1, Figure 7 for every head: one row per bias norm (column ``bias_norm``). Left: the histogram of each
    head's pre-softmax scores (column ``score``, one step line per ``head``, each on its own bins and scaled to the
    same peak height, so a narrow head is as visible as a wide one): where each head's scores sit. Right: the same
    scores minus each head's mean, on shared bins: how widely they spread. Each row has its own axes, because the
    scores' location grows like N^2 and their spread like N."""
    from matplotlib.ticker import MaxNLocator

    norms = sorted(samples["bias_norm"].unique())[:max_panels]
    heads = sorted(samples["head"].unique())
    fig, axes = figure(ncols=2, nrows=len(norms), height=1.5)
    colours = dict(zip(heads, sns.color_palette("husl", len(heads))))
    for row, n in zip(axes, norms):
        part = samples[samples["bias_norm"] == n]
        centred = part["score"] - part.groupby("head")["score"].transform("mean")
        shared = np.histogram_bin_edges(centred.to_numpy(), bins=bins)
        for head in heads:
            values = part.loc[part["head"] == head, "score"].to_numpy()
            counts, edges = np.histogram(values, bins=bins)
            row[0].stairs(counts / max(counts.max(), 1), edges, color=colours[head], lw=1.0,
                          label=f"head {int(head) + 1}")
            c_counts, _ = np.histogram(centred[part["head"] == head].to_numpy(), bins=shared)
            row[1].stairs(c_counts, shared, color=colours[head], lw=0.9, alpha=0.8)
        lo, hi = part["score"].min(), part["score"].max()
        if lo < 0 < hi:
            row[0].axvline(0, color="0.3", lw=0.8)
        row[0].set_ylabel(f"N = {n:g}", rotation=0, ha="right", va="center", fontsize="small")
        row[1].annotate(f"sd {centred.std():.2g}", (0.98, 0.9), xycoords="axes fraction", ha="right", va="top",
                        fontsize="x-small")
        for ax in row:
            ax.set_yticks([])
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
            ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 3))
            ax.tick_params(axis="x", labelsize="x-small")
    axes[0, 0].set_title("scores of each head (location)", fontsize="small")
    axes[0, 1].set_title("minus each head's mean (spread)", fontsize="small")
    axes[-1, 0].set_xlabel("pre-softmax score  q·k / √d_k", fontsize="small")
    axes[-1, 1].set_xlabel("score minus the head's mean", fontsize="small")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(6, len(heads)), fontsize="x-small")
    return fig


def head_score_shift(samples: pd.DataFrame):
    """Mean pre-softmax score of every head against N (columns ``bias_norm``, ``head``, ``score``): the common shift
    (W_Q b)·(W_K b) / sqrt(d_k) of each head, on a symmetric-log axis, coloured by the sign it ends with."""
    means = samples.groupby(["bias_norm", "head"])["score"].mean().reset_index()
    last = means[means["bias_norm"] == means["bias_norm"].max()].set_index("head")["score"]
    fig, axes = figure(height=3.2)
    ax = axes[0, 0]
    up, down = sns.color_palette(PALETTE, 2)
    for head, sub in means.groupby("head"):
        rising = last[head] >= 0
        ax.plot(sub["bias_norm"], sub["score"], color=up if rising else down, marker="o", ms=3, lw=1.0, alpha=0.8)
    ax.plot([], [], color=up, label=f"{int((last >= 0).sum())} heads shifting up")
    ax.plot([], [], color=down, label=f"{int((last < 0).sum())} heads shifting down")
    ax.set_yscale("symlog", linthresh=1e-3)
    top = int(np.ceil(np.log10(max(means["score"].abs().max(), 1e-3))))
    decades = [10.0**k for k in range(-3, top + 1, 3)]
    ax.set_yticks([-v for v in decades[::-1]] + [0.0] + decades)
    _bias_axis(ax, means)
    ax.set_ylabel("mean pre-softmax score")
    ax.legend(fontsize="small")
    return fig


def query_key_geometry(frame: pd.DataFrame):
    """Paper 1, Figure 8: mean cosine and mean norm of queries and keys against N, bands spanning the seeds."""
    fig, axes = figure(ncols=2, height=3.4)
    _seed_lines(axes[0, 0], frame, {"query_cosine": "queries", "key_cosine": "keys"}, {"key_cosine": {"ls": "--"}})
    _seed_lines(axes[0, 1], frame, {"query_norm": "queries", "key_norm": "keys"}, {"key_norm": {"ls": "--"}})
    return _cosine_norm_axes(axes, frame)


def _cosine_norm_axes(axes, frame: pd.DataFrame):
    """The shared frame of Figures 6 and 8: mean cosine left, mean norm (log) right, both against the bias norm."""
    axes[0, 0].set_ylabel("mean cosine similarity")
    axes[0, 1].set_ylabel("mean norm")
    axes[0, 1].set_yscale("log")
    for ax in axes[0]:
        _bias_axis(ax, frame)
    axes[0, 0].legend(fontsize="small")
    return axes[0, 0].figure


def softmax_rows(frame: pd.DataFrame, extremes: bool = False, labels: dict | None = None,
                 n_star: float | None = None):
    """Paper 1, Figure 9 (``extremes=False``): per softmax row, max, median and min over the keys, averaged over the
    batch, then over positions and heads (line) with the 10-90 % range over positions and heads (band) for seed 0.
    Figure 10 (``extremes=True``): max and min over whole sequences, averaged over the batch, band over heads.
    One panel per variant; the dotted line is the uniform value 1/seq_len (column ``seq_len``); ``n_star`` draws a
    vertical line at the post-LN fixed point."""
    variants = list(dict.fromkeys(frame["variant"]))
    fig, axes = figure(ncols=len(variants), height=3.4, sharey=True)
    stats = (("seq_max", "max"), ("seq_min", "min")) if extremes else (
        ("softmax_max", "max"), ("softmax_median", "median"), ("softmax_min", "min"))
    lo, hi = ("_lo", "_hi") if extremes else ("_q10", "_q90")
    colours = sns.color_palette(PALETTE, 3)
    seed = frame["seed"].min()
    for ax, variant in zip(axes[0], variants):
        sub = frame[(frame["variant"] == variant) & (frame["seed"] == seed)].sort_values("bias_norm")
        for colour, (column, label) in zip(colours, stats):
            ax.plot(sub["bias_norm"], sub[column], color=colour, lw=1.6, label=label)
            ax.fill_between(sub["bias_norm"], sub[column + lo], sub[column + hi], color=colour, alpha=0.2, lw=0)
        if "seq_len" in sub:
            ax.axhline(1.0 / sub["seq_len"].iloc[0], color="0.3", ls=":", lw=0.9)
        if n_star is not None:
            ax.axvline(n_star, color="0.3", ls="--", lw=0.9)
            ax.annotate("N*", (n_star, 0.02), xycoords=("data", "axes fraction"), ha="right", fontsize="small")
        ax.set_yscale("log")
        ax.set_title((labels or {}).get(variant, variant), fontsize="small")
        _bias_axis(ax, sub)
    axes[0, 0].set_ylabel("softmax value")
    axes[0, 0].legend(fontsize="small")
    return fig


def attention_entropy(frame: pd.DataFrame, column: str = "entropy_ratio", labels: dict | None = None,
                      n_star: float | None = None):
    """Attention entropy against N, one line per variant, band spanning the seeds: mean row entropy divided by
    log(#keys) (1 = uniform attention, 0 = one-hot)."""
    fig, axes = figure(height=3.2)
    ax = axes[0, 0]
    colours = sns.color_palette(PALETTE, frame["variant"].nunique())
    for colour, (variant, sub) in zip(colours, frame.groupby("variant", sort=False)):
        _seed_lines(ax, sub, {column: (labels or {}).get(variant, variant)}, {column: {"color": colour}})
    if n_star is not None:
        ax.axvline(n_star, color="0.3", ls="--", lw=0.9)
        ax.annotate("N*", (n_star, 0.02), xycoords=("data", "axes fraction"), ha="right", fontsize="small")
    _bias_axis(ax, frame)
    ax.set_ylabel("attention entropy / log(#keys)")
    ax.legend(fontsize="small")
    return fig


def drift_reference(reference: pd.DataFrame, n_star: float, width: int):
    """Trained models' hidden states per layer next to the untrained block's fixed point, all divided by sqrt(d):
    mean norm (``mean_norm``), drift norm ||mean|| (``drift_norm``, the trained analogue of the bias norm N) and the
    LayerNorm estimate sqrt(||gamma||^2 + ||beta||^2) (``layer_norm_norm``); dash-dotted: N* / sqrt(width)."""
    fig, axes = figure(height=4.2)
    ax = axes[0, 0]
    colours = sns.color_palette(PALETTE, reference["model"].nunique())
    for colour, (model, sub) in zip(colours, reference.groupby("model", sort=False)):
        root = np.sqrt(sub["hidden_size"].to_numpy())
        ax.plot(sub["layer"], sub["mean_norm"] / root, color=colour, marker="o", ms=4, label=f"{model}: mean norm")
        ax.plot(sub["layer"], sub["drift_norm"] / root, color=colour, marker="s", ms=4, ls="--",
                label=f"{model}: drift norm ||mean||")
        if "layer_norm_norm" in sub:
            ax.plot(sub["layer"], sub["layer_norm_norm"] / root, color=colour, ls=":", lw=1.2,
                    label=f"{model}: LayerNorm √(|γ|²+|β|²)")
    ax.axhline(n_star / np.sqrt(width), color="0.2", ls="-.", lw=1.2, label=f"untrained block: N* / √{width}")
    ax.set_ylim(0, None)
    ax.set_xlabel("layer (0 = embeddings)")
    ax.set_ylabel("norm / √d")
    ax.legend(fontsize="x-small", ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return fig


# ---- Paper 1, Section 3: layer-wise mean cosine across models (Figures 1-5, 16) -----------------------------------

_VARIANT_DASHES = {"pretrained": "-", "self-trained": "-.", "untrained": "--", "tiny": ":"}


def _null_band(ax, frame: pd.DataFrame, x: str, hue: str, colours: dict) -> None:
    """The isotropic 95th percentile (column ``null_q95``): one grey dotted line where every layer of the panel has
    the same dim, else one thin dotted line per model in its colour, following its layers' dims."""
    dims = sorted(frame["dim"].unique())
    if len(dims) == 1:
        ax.axhline(float(frame["null_q95"].iloc[0]), color="0.35", lw=1.1, ls=":", zorder=1,
                   label=f"isotropic 95th percentile (d = {dims[0]:,})")
        return
    for label, sub in frame.groupby(hue, sort=False):
        sub = sub.sort_values("layer")
        ax.plot(sub[x], sub["null_q95"], color=colours[label], lw=1.0, ls=":", alpha=0.9, zorder=1)
    ax.plot([], [], color="0.35", lw=1.0, ls=":",
            label=f"isotropic 95th percentile of each\nmodel's d (dotted, d = {dims[0]:,}…{dims[-1]:,})")


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def _layer_lines(ax, frame: pd.DataFrame, x: str, hue: str, colours: dict) -> None:
    # A marker per model as well as a colour: curves that coincide (e.g. two untrained copies of one architecture)
    # stay visible, and the figure reads in greyscale.
    markers = {label: _MARKERS[i % len(_MARKERS)] for i, label in enumerate(colours)}
    for label, sub in frame.groupby(hue, sort=False):
        sub = sub.sort_values("layer")
        colour = colours[label]
        dash = _VARIANT_DASHES.get(sub["variant"].iloc[0], "-")
        # An encoder-decoder's decoder starts again from embeddings: no line joins it to the encoder's last layer.
        pieces = [sub[sub["part"] == p] for p in dict.fromkeys(sub["part"])] if "part" in sub and set(
            sub["part"]) == {"encoder", "decoder"} else [sub]
        for k, piece in enumerate(pieces):
            ax.plot(piece[x], piece["mean_cosine"], color=colour, ls=dash, lw=1.5, marker=markers[label], ms=4.5,
                    markerfacecolor="none" if markers[label] in ("s", "D") else colour,
                    label=label if k == 0 else None, zorder=3)
            if {"mean_cosine_low", "mean_cosine_high"} <= set(piece) and piece["mean_cosine_low"].notna().any():
                # the confidence band of the layer's mean cosine (resampling the examples, layerwise.BOOTSTRAP)
                ax.fill_between(piece[x], piece["mean_cosine_low"], piece["mean_cosine_high"], color=colour,
                                alpha=0.16, lw=0, zorder=2)
        emb = sub[sub["is_embedding"].astype(bool)]
        if len(emb):  # the input of the first block (layer 0, and a decoder's embeddings): hollow and larger
            ax.scatter(emb[x], emb["mean_cosine"], s=46, facecolors="white", edgecolors=colour, linewidths=1.5,
                       zorder=4)


def layer_cosines(frame: pd.DataFrame, panel: str | None = None, titles: dict | None = None, hue: str = "label",
                  x: str = "relative_depth", ncols: int | None = None, height: float = 3.4):
    """Paper 1, Figures 1-4: mean cosine similarity against depth, one line per model (column ``hue``), dashes by
    ``variant`` (solid pretrained, dash-dot self-trained, dashed untrained, dotted tiny); hollow markers for the
    input of the first block (column ``is_embedding``); the isotropic 95th percentile of the layers' dims (column
    ``null_q95``) dotted: grey when the panel has one dim, else one thin line per model in its colour; a shaded band
    between ``mean_cosine_low`` and ``mean_cosine_high`` where the frame has them. ``panel`` splits the frame into panels titled by
    ``titles``. ``x`` is ``relative_depth`` (0 = first measured layer, 1 = last) or ``layer`` (absolute index)."""
    keys = list(dict.fromkeys(frame[panel])) if panel else [None]
    ncols = ncols or len(keys)
    nrows = int(np.ceil(len(keys) / ncols))
    fig, axes = figure(ncols=ncols, nrows=nrows, height=height)
    labels = list(dict.fromkeys(frame[hue]))
    palette = sns.color_palette(PALETTE if len(labels) <= 10 else "husl", len(labels))
    colours = dict(zip(labels, palette))
    for ax, key in zip(axes.flat, keys):
        sub = frame if key is None else frame[frame[panel] == key]
        _null_band(ax, sub, x, hue, colours)
        _layer_lines(ax, sub, x, hue, colours)
        ax.set_xlabel("relative depth (0 = first layer shown, 1 = last)" if x == "relative_depth"
                      else "layer (0 = embeddings)")
        ax.set_ylabel("mean cosine similarity")
        low = sub["mean_cosine_low"].min() if "mean_cosine_low" in sub else np.nan
        high = sub["mean_cosine_high"].max() if "mean_cosine_high" in sub else np.nan
        low = float(np.nanmin([sub["mean_cosine"].min(), low]))
        high = float(np.nanmax([sub["mean_cosine"].max(), high]))
        if "null_q95" in sub:  # the null stays in view (at d = 32 it is 0.29, above a flat profile's axis)
            high = max(high, float(sub["null_q95"].max()))
        ax.set_ylim(min(-0.02, low - 0.02), min(1.02, max(0.2, high + 0.05)))
        if key is not None:
            ax.set_title((titles or {}).get(key, str(key)))
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0) if ncols == 1 else None,
                  ncols=1)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    return fig


def drift_pvalues(corr: pd.DataFrame, method: str = "spearman", label: str = "label", group: str = "family",
                  group_names: dict | None = None, alpha: float = 0.05):
    """Paper 1, Figure 5 (``method="spearman"``) and Figure 16 (``"pearson"``): per model, the p-value of the
    correlation across layers between mean cosine and drift norm (columns ``<method>``, ``<method>_p``), on a log
    axis, models grouped by ``group`` (colour, and separators), with the ``alpha`` line. Triangles point up for a
    positive correlation and down for a negative one."""
    corr = corr.reset_index(drop=True)
    fig, axes = figure(height=3.9)
    ax = axes[0, 0]
    groups = list(dict.fromkeys(corr[group]))
    colours = dict(zip(groups, sns.color_palette(PALETTE, len(groups))))
    floor = 1e-12
    p = corr[f"{method}_p"].clip(lower=floor)
    stat = corr[method]
    for g in groups:
        idx = corr.index[corr[group] == g]
        for sign, marker in ((True, "^"), (False, "v")):
            sel = [i for i in idx if np.isfinite(stat[i]) and (stat[i] >= 0) == sign]
            ax.scatter(sel, p[sel], marker=marker, s=48, color=colours[g], zorder=3,
                       label=(group_names or {}).get(g, g) if sign and len(idx) else None)
    starts = [i for i in range(len(corr)) if i == 0 or corr[group][i] != corr[group][i - 1]]
    for k, start in enumerate(starts):  # alternate a light background per group
        end = starts[k + 1] if k + 1 < len(starts) else len(corr)
        if k % 2:
            ax.axvspan(start - 0.5, end - 0.5, color="0.93", lw=0, zorder=0)
    ax.axhline(alpha, color="0.2", ls="--", lw=1.1, label=f"p = {alpha}")
    ax.set_yscale("log")
    ax.set_ylim(min(float(p.min()) * 0.3, alpha * 0.3), 2.0)
    ax.set_xticks(range(len(corr)), corr[label], rotation=55, ha="right", fontsize="x-small")
    ax.set_xlim(-0.6, len(corr) - 0.4)
    name = {"spearman": "Spearman", "pearson": "Pearson"}.get(method, method)
    ax.set_ylabel(f"{name} p-value (log scale)")
    title = "▲ positive, ▼ negative\ncorrelation"
    if bool((corr[f"{method}_p"] < floor).any()):
        title += f"\n(p < {floor:.0e} drawn at {floor:.0e})"
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0), title=title,
              title_fontsize="x-small")
    return fig


# ---- Paper 1, Section 5: queries and keys along training (Figures 11-15, 19-23; issue 8) --------------------------

def _training_step_axis(ax, steps) -> None:
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


def _panel_grid(n: int, max_cols: int = 4, height: float = 2.6, **kwargs):
    ncols = min(n, max_cols)
    nrows = int(np.ceil(n / ncols))
    fig, axes = figure(ncols=ncols, nrows=nrows, height=height, **kwargs)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat[:n]


QK_COLOURS = {"query": sns.color_palette(PALETTE)[0], "key": sns.color_palette(PALETTE)[1]}


def qk_projection(proj: pd.DataFrame, title: str | None = None, basis_label: str = "SVD of queries and keys"):
    """Paper 1, Figures 11 and 19-22: one head's sampled queries and keys (columns step, kind, x, y) in a fixed SVD
    plane, one panel per training step; large markers are the means Q̄_s and K̄_s, the cross is the origin."""
    steps = sorted(proj["step"].unique())
    fig, axes = _panel_grid(len(steps), max_cols=4, height=2.5, sharex=True, sharey=True)
    for ax, step in zip(axes, steps):
        part = proj[proj["step"] == step]
        for kind in ("key", "query"):
            pts = part[part["kind"] == kind]
            ax.scatter(pts["x"], pts["y"], s=4, alpha=0.35, color=QK_COLOURS[kind], lw=0, rasterized=True)
        for kind in ("query", "key"):
            pts = part[part["kind"] == kind]
            ax.scatter(pts["x"].mean(), pts["y"].mean(), s=70, color=QK_COLOURS[kind], edgecolor="black", lw=1,
                       zorder=5, label=f"{kind} (mean: large marker)")
        ax.scatter(0, 0, marker="+", s=80, color="black", zorder=6)
        ax.set_title(f"step {step:,}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small", markerscale=0.7)
    for ax in axes:
        ax.set_xlabel("SVD axis 1", fontsize="small")
    axes[0].set_ylabel("SVD axis 2", fontsize="small")
    if title:
        fig.suptitle(f"{title} — {basis_label}", fontsize="medium")
    return fig


def qk_trajectories(trajectories: dict):
    """Paper 1, Figure 12: the trajectories of Q̄_s and K̄_s along training in the head's SVD plane, one panel per
    head (``{panel title: frame with step, kind, x, y}``); arrows run from each checkpoint to the next, the open
    circle is the first checkpoint."""
    fig, axes = _panel_grid(len(trajectories), max_cols=2, height=3.4)
    for ax, (title, traj) in zip(axes, trajectories.items()):
        for kind in ("query", "key"):
            part = traj[traj["kind"] == kind].sort_values("step")
            x, y = part["x"].to_numpy(), part["y"].to_numpy()
            colour = QK_COLOURS[kind]
            ax.plot(x, y, color=colour, lw=0.8, alpha=0.5)
            for i in range(len(x) - 1):
                ax.annotate("", xy=(x[i + 1], y[i + 1]), xytext=(x[i], y[i]),
                            arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.3, shrinkA=0, shrinkB=0))
            ax.scatter(x[:1], y[:1], s=50, facecolor="white", edgecolor=colour, lw=1.5, zorder=5)
            ax.scatter(x[-1:], y[-1:], s=50, color=colour, zorder=5, label=f"mean {kind}")
        ax.scatter(0, 0, marker="+", s=80, color="black", zorder=6)
        ax.set_title(title, fontsize="small")
        ax.set_xlabel("SVD axis 1")
        ax.set_ylabel("SVD axis 2")
        ax.set_aspect("equal", adjustable="datalim")
    axes[0].legend(fontsize="x-small")
    return fig


def _per_layer_lines(frame: pd.DataFrame, column: str, by: str, colours: dict, ylabel: str, band, max_cols: int,
                     lw: float):
    """One panel per layer of ``frame``, one line of ``column`` along training per value of ``by``, ±``band``
    shaded; returns (fig, axes)."""
    layers = sorted(frame["layer"].unique())
    fig, axes = _panel_grid(len(layers), max_cols=max_cols, height=2.3, sharey=True)
    for ax, layer in zip(axes, layers):
        part = frame[frame["layer"] == layer]
        if band is not None:
            ax.axhspan(-band, band, color="0.85", zorder=0, lw=0)
        ax.axhline(0, color="0.4", lw=0.6)
        for key, colour in colours.items():
            line = part[part[by] == key].sort_values("step")
            ax.plot(line["step"], line[column], color=colour, lw=lw, marker="o", ms=2, label=key)
        _training_step_axis(ax, part["step"])
        ax.set_title(f"layer {layer + 1}", fontsize="small")
        ax.set_xlabel("")
    for ax in axes[:: min(len(layers), max_cols)]:
        ax.set_ylabel(ylabel)
    fig.supxlabel("training step", fontsize="small")
    return fig, axes


def qk_head_statistic(stats: pd.DataFrame, column: str = "cos_qk", ylabel: str = "cos(Q̄, K̄)",
                      band: float | None = None, max_cols: int = 4):
    """Paper 1, Figures 13 and 14: a per-head statistic (``column``) along training, one panel per layer, one line
    per head. ``band`` shades ±band (the isotropic 95% band for a cosine)."""
    heads = sorted(stats["head"].unique())
    colours = dict(zip(heads, sns.color_palette("husl", len(heads))))
    fig, _ = _per_layer_lines(stats, column, "head", colours, ylabel, band, max_cols, lw=1.1)
    return fig


def qk_attention_entropy(stats: pd.DataFrame):
    """Paper 1, Figure 15: the mean entropy of the attention rows along training (nats, averaged over heads, rows
    and inputs), one line per layer; dashed: uniform attention over the same keys (the ceiling)."""
    fig, axes = figure(height=3.4)
    ax = axes[0, 0]
    per_layer = stats.groupby(["layer", "step"], as_index=False)[["entropy", "entropy_uniform"]].mean()
    layers = sorted(per_layer["layer"].unique())
    colours = dict(zip(layers, sns.color_palette("viridis", len(layers))))
    for layer in layers:
        line = per_layer[per_layer["layer"] == layer].sort_values("step")
        ax.plot(line["step"], line["entropy"], color=colours[layer], marker="o", ms=3, label=f"layer {layer + 1}")
    uniform = per_layer.groupby("step")["entropy_uniform"].mean()
    ax.plot(uniform.index, uniform.values, color="0.3", ls="--", lw=1, label="uniform attention")
    _training_step_axis(ax, per_layer["step"])
    ax.set_ylabel("mean attention entropy (nats)")
    ax.legend(fontsize="x-small", ncols=2 if len(layers) > 6 else 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _stage_axis(ax, steps, stage_names: dict | None) -> None:
    """The x axis of a run: training steps, or named stages (``{0: "untrained twin", 1: "pretrained"}``)."""
    if stage_names:
        ax.set_xticks(sorted(stage_names), [stage_names[k] for k in sorted(stage_names)])
        ax.set_xlabel("")
    else:
        _training_step_axis(ax, steps)


def qk_statistic_by_run(stats: pd.DataFrame, column: str = "cos_qk", ylabel: str = "cos(Q̄, K̄)",
                        band: float | dict | None = None, max_cols: int = 3, stage_names: dict | None = None):
    """Paper 1, Figure 23 (and its extension to other models): a per-head statistic along training, one panel per
    run, one line per head coloured by layer. ``band``: ±band shaded (a number, or one per run); ``stage_names``:
    names for the steps instead of a training-step axis."""
    import textwrap

    runs = list(dict.fromkeys(stats["run"]))
    fig, axes = _panel_grid(len(runs), max_cols=max_cols, height=2.8, sharey=True)
    deep = stats.groupby("run")["layer"].nunique().max() > MAX_LAYER_LEGEND
    for ax, run in zip(axes, runs):
        part = stats[stats["run"] == run]
        layers = sorted(part["layer"].unique())
        colours = dict(zip(layers, sns.color_palette("viridis", len(layers))))
        b = band.get(run) if isinstance(band, dict) else band
        if b is not None:
            ax.axhspan(-b, b, color="0.85", zorder=0, lw=0)
        ax.axhline(0, color="0.4", lw=0.6)
        for (layer, head), line in part.groupby(["layer", "head"]):
            line = line.sort_values("step")
            ax.plot(line["step"], line[column], color=colours[layer], lw=0.9, alpha=0.85,
                    label=f"layer {layer + 1}" if head == part["head"].min() and not deep else None)
        _stage_axis(ax, part["step"], stage_names)
        ax.set_title(textwrap.fill(run, 38), fontsize="small")
    axes[0].set_ylabel(ylabel)
    _layer_key(fig, axes, deep)
    return fig


MAX_LAYER_LEGEND = 8  # more layers than this: one colour bar of relative depth instead of a legend entry per layer


def _layer_key(fig, axes, deep: bool) -> None:
    """A legend of the layers' colours, or for deep models (many layers, several panels of different depths) one
    colour bar from the first layer (0) to the last (1)."""
    if not deep:
        axes[-1].legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        return
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    bar = fig.colorbar(ScalarMappable(Normalize(0, 1), "viridis"), ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label("layer (relative depth: first 0, last 1)", fontsize="x-small")


def qk_concatenated_by_seed(frame: pd.DataFrame, band: float | None = None, max_cols: int = 4):
    """Paper 1, Figure 23: cos(Q̄, K̄) with queries and keys concatenated across heads (``qk_dynamics.
    concatenated_alignment``) along training, one panel per layer, one line per run (seed), one colour per seed.
    ``band`` shades ±band (the isotropic 95% band for the concatenated dimension)."""
    runs = list(dict.fromkeys(frame.sort_values("seed")["run"]))
    colours = dict(zip(runs, sns.color_palette(PALETTE, len(runs))))
    fig, axes = _per_layer_lines(frame, "cos_qk", "run", colours, "cos(Q̄, K̄), all heads", band, max_cols, lw=1.2)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncols=min(5, len(runs)), fontsize="x-small")
    return fig


def qk_entropy_by_run(stats: pd.DataFrame, max_cols: int = 3, stage_names: dict | None = None):
    """Paper 1, Figure 15 for several runs: mean attention entropy per layer along training, one panel per run,
    as a fraction of the uniform-attention ceiling (so runs with different sequence lengths compare)."""
    import textwrap

    runs = list(dict.fromkeys(stats["run"]))
    fig, axes = _panel_grid(len(runs), max_cols=max_cols, height=2.8, sharey=True)
    deep = stats.groupby("run")["layer"].nunique().max() > MAX_LAYER_LEGEND
    for ax, run in zip(axes, runs):
        per_layer = stats[stats["run"] == run].groupby(["layer", "step"], as_index=False)[
            ["entropy", "entropy_uniform"]].mean()
        layers = sorted(per_layer["layer"].unique())
        colours = dict(zip(layers, sns.color_palette("viridis", len(layers))))
        for layer in layers:
            line = per_layer[per_layer["layer"] == layer].sort_values("step")
            ax.plot(line["step"], line["entropy"] / line["entropy_uniform"], color=colours[layer], marker="o", ms=2,
                    label=None if deep else f"layer {layer + 1}")
        _stage_axis(ax, per_layer["step"], stage_names)
        ax.set_title(textwrap.fill(run, 38), fontsize="small")
    axes[0].set_ylabel("attention entropy / uniform")
    _layer_key(fig, axes, deep)
    return fig


# ---- Our checkpoint suites: loss curves of the self-trained models (issue 7) ----------------------------------------

def _legend_entries(axes) -> tuple[list, list]:
    """The legend handles and labels of every panel, each label once (first panel that has it wins)."""
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def suite_loss_curves(curves: pd.DataFrame, baselines: pd.DataFrame, smooth: int = 25, max_cols: int = 3,
                      targets: dict | None = None):
    """Training (rolling mean over ``smooth`` updates, thin) and validation (markers) loss of each self-trained suite,
    one panel per suite, one colour per seed, with the context-free baselines as horizontal lines.

    ``curves``: columns suite, seed, step, split ("train" / "validation"), loss (nats), as ``training.loss_curves``.
    ``baselines``: one row per suite with columns suite, chance and (language models) unigram, in nats.
    ``targets``: {suite: validation loss to reach} drawn dash-dotted (green).
    """
    suites = list(dict.fromkeys(curves["suite"]))
    ncols = min(max_cols, len(suites))
    nrows = -(-len(suites) // ncols)
    fig, axes = figure(ncols=ncols, nrows=nrows, height=2.6, sharex=False)
    seeds = sorted(curves["seed"].unique())
    colours = dict(zip(seeds, sns.color_palette(PALETTE, len(seeds))))
    for ax, name in zip(axes.flat, suites):
        part = curves[curves["suite"] == name]
        for seed, run in part.groupby("seed"):
            train = run[run["split"] == "train"].sort_values("step")
            ax.plot(train["step"], train["loss"].rolling(smooth, min_periods=1).mean(), color=colours[seed],
                    lw=0.9, alpha=0.55)
            val = run[run["split"] == "validation"].sort_values("step")
            ax.plot(val["step"], val["loss"], color=colours[seed], lw=1.3, marker="o", ms=2.5,
                    label=f"seed {seed}")
        base = baselines[baselines["suite"] == name].iloc[0]
        ax.axhline(base["chance"], color="0.35", ls=":", lw=1.1, label="chance (uniform)")
        if "unigram" in base and pd.notna(base["unigram"]):
            ax.axhline(base["unigram"], color="0.2", ls="--", lw=1.1, label="unigram")
        if targets and name in targets:
            ax.axhline(targets[name], color="tab:green", ls="-.", lw=1.1, label="target")
        ax.set_title(name)
        ax.set_ylim(bottom=0)  # the top follows the curves: an early loss spike above chance stays in the panel
        ax.set_xlabel("training step")
        ax.set_ylabel("loss (nats)")
    for ax in list(axes.flat)[len(suites):]:
        ax.axis("off")
    handles, labels = _legend_entries(axes)
    spare = list(axes.flat)[len(suites):]
    if spare:
        spare[0].legend(handles, labels, loc="center", fontsize="small", title_fontsize="small",
                        title="thin: training loss\n(smoothed)\nmarkers: validation")
    else:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 5), fontsize="small")
    return fig


def recipe_sweep(frame: pd.DataFrame, targets: dict):
    """The recipe sweep of the self-trained suites: the final held-out score of each run against its training cost,
    one panel per suite kind (the subword encoder's twice as wide), one colour per variant, the target dash-dotted.

    ``frame``: columns kind, relative_cost (multiply-adds of all updates over the chosen recipe's), score (nats below
    the unigram baseline, or accuracy for images), variant (legend label). ``targets``: {kind: score to reach}.
    """
    kinds = [k for k in ("mlm", "clm", "vit") if k in set(frame["kind"])]
    fig, axes = figure(ncols=len(kinds), height=3.6,
                       gridspec_kw={"width_ratios": [2 if k == "mlm" else 1 for k in kinds]})
    titles = {"mlm": "subword encoder", "clm": "decoder", "vit": "vision transformer"}
    labels = {"mlm": "nats below unigram", "clm": "nats below unigram", "vit": "held-out accuracy"}
    variants = list(dict.fromkeys(frame["variant"]))
    colours = dict(zip(variants, sns.color_palette(PALETTE, len(variants))))
    for ax, kind in zip(axes.flat, kinds):
        part = frame[frame["kind"] == kind]
        for variant, runs in part.groupby("variant", sort=False):
            ax.scatter(runs["relative_cost"], runs["score"], s=20, color=colours[variant], label=variant, alpha=0.85,
                       edgecolor="white", linewidth=0.4)
        if kind in targets:
            ax.axhline(targets[kind], color="tab:green", ls="-.", lw=1.1, label="target")
        ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
        ax.set_title(titles[kind])
        ax.set_xlabel("cost / chosen recipe's")
        ax.set_ylabel(labels[kind])
    fig.legend(*_legend_entries(axes), loc="outside lower center", ncols=3, fontsize="small")
    return fig


def suite_accuracy(curves: pd.DataFrame, n_classes: int):
    """Validation accuracy of the vision suites along training (columns suite, seed, step, accuracy), with chance
    1 / ``n_classes``."""
    fig, axes = figure(height=2.8)
    ax = axes[0, 0]
    part = curves.dropna(subset=["accuracy"])
    sns.lineplot(data=part, x="step", y="accuracy", hue="suite", style="seed" if part["seed"].nunique() > 1 else None,
                 marker="o", markersize=4, ax=ax, errorbar=None)
    ax.axhline(1 / n_classes, color="0.35", ls=":", lw=1.1, label="chance")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy")
    ax.legend(fontsize="small")
    return fig


# ---- Paper 2: anisotropy profiles, training dynamics, the two measures, the final norm -----------------------------

P2_METRIC_LABELS = {
    "sigma1_share": r"anisotropy $\sigma_1^2 / \sum_i \sigma_i^2$",
    "twonn_dimension": "intrinsic dimension (TwoNN)",
    "mean_cosine": "mean cosine similarity",
}


def _band(ax, x, mean, std, colour, label=None, **line):
    """A line with markers and a shaded band of +- one standard deviation over batches."""
    ax.plot(x, mean, color=colour, marker=line.pop("marker", "o"), ms=line.pop("ms", 3.5), lw=line.pop("lw", 1.5),
            label=label, **line)
    if std is not None and np.any(np.asarray(std) > 0):
        ax.fill_between(x, np.asarray(mean) - std, np.asarray(mean) + std, color=colour, alpha=0.18, lw=0)


def paper2_layer_profiles(summary: pd.DataFrame, metric: str = "sigma1_share", by: str = "label"):
    """Paper 2, Figure 1: a metric against the relative depth (layer / last layer), encoders and decoders in two
    panels, one line per model (``by``) with a band of +- one standard deviation over batches. Columns: ``stack``,
    ``by``, ``relative_depth``, ``metric`` and ``<metric>_std``; rows with ``after_final_norm`` True and a duplicate
    depth are left out (the usual last hidden state is kept)."""
    stacks = [s for s in ("encoder", "decoder") if s in set(summary["stack"])]
    fig, axes = figure(ncols=len(stacks), height=5.0, sharey=True)
    for ax, stack in zip(axes[0], stacks):
        part = summary[summary["stack"] == stack]
        labels = list(dict.fromkeys(part[by]))
        colours = sns.color_palette(PALETTE, len(labels))
        for colour, label in zip(colours, labels):
            rows = part[part[by] == label].sort_values("relative_depth")
            rows = rows.drop_duplicates("relative_depth", keep="last")
            _band(ax, rows["relative_depth"], rows[metric], rows.get(f"{metric}_std"), colour, label)
        ax.set_title(f"{stack}s")
        ax.set_xlabel("relative depth (layer / last layer)")
        ax.set_xlim(-0.03, 1.03)
        # below the panel: a decoder's profile can fill every corner of it (SmolLM2 stays near 1 for half its depth)
        ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=1)
    axes[0, 0].set_ylabel(P2_METRIC_LABELS.get(metric, metric))
    return fig


LOG_SPREAD = 30  # models' largest values this many times apart: layer_measure draws a logarithmic axis


def layer_measure(frame: pd.DataFrame, column: str, ylabel: str | None = None, by: str = "label"):
    """One per-layer measure against relative depth (0 = first layer, 1 = last), one line per model (``by``), with
    a band of +- ``<column>_std`` where the frame has it (Paper 2's measures: one standard deviation over
    batches). The axis is logarithmic where the models' largest values differ more than ``LOG_SPREAD`` times and
    every value is positive (norms of models of different scales), so that each model's profile stays readable."""
    fig, axes = figure(height=3.6)
    ax = axes[0, 0]
    labels = list(dict.fromkeys(frame[by]))
    peaks = frame.groupby(by)[column].max()
    if (frame[column] > 0).all() and peaks.max() > LOG_SPREAD * peaks.min():
        ax.set_yscale("log")
    colours = sns.color_palette(PALETTE if len(labels) <= 10 else "husl", len(labels))
    for colour, label in zip(colours, labels):
        rows = frame[frame[by] == label].sort_values("relative_depth")
        std = rows[f"{column}_std"] if f"{column}_std" in rows else None
        _band(ax, rows["relative_depth"], rows[column], std, colour, label)
    ax.set_xlabel("relative depth (0 = first layer shown, 1 = last)")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylabel(ylabel or P2_METRIC_LABELS.get(column, column))
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0), ncols=1)
    return fig


def paper2_robust_profiles(summary: pd.DataFrame, by: str = "label", max_cols: int = 4):
    """The book's check of Paper 2's measure: per model (one panel), the sigma_1 share against relative depth as
    measured (Paper 2's protocol), without each sequence's first position and without the batch's largest 1% of
    norms, all on the same batches (columns ``relative_depth``, ``sigma1_share``, ``sigma1_share_no_first``,
    ``sigma1_share_no_top_norms``)."""
    import textwrap

    labels = list(dict.fromkeys(summary[by]))
    if not labels:
        return empty_figure("no model with the three shares under this profile")
    fig, axes = _panel_grid(len(labels), max_cols=max_cols, height=2.6, sharey=True)
    styles = {"sigma1_share": ("as measured (Paper 2)", "-"), "sigma1_share_no_first": ("without the first position", "--"),
              "sigma1_share_no_top_norms": ("without the largest 1% of norms", ":")}
    for ax, label in zip(axes, labels):
        rows = summary[summary[by] == label]
        if "after_final_norm" in rows.columns:  # the last block's output before the final norm, as the ledger reads it
            rows = rows[~rows["after_final_norm"].astype(bool)]
        rows = rows.sort_values("relative_depth")
        for column, (name, style) in styles.items():
            ax.plot(rows["relative_depth"], rows[column], style, lw=1.4, label=name)
        ax.set_title(textwrap.fill(label, 22), fontsize="x-small")
        ax.set_xlabel("relative depth")
    axes[0].set_ylabel(P2_METRIC_LABELS.get("sigma1_share", "sigma1_share"))
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize="x-small", loc="lower center", bbox_to_anchor=(0.5, -0.12), ncols=3,
               frameon=False)
    return fig


def paper2_profiles_over_training(summary: pd.DataFrame, metric: str = "sigma1_share", run: str = "label",
                                  ncols: int = 2):
    """Paper 2, Figures 3 and 4: a run's profile (metric against relative depth) at successive training steps, one
    panel per ``run``, colour = log step. A checkpoint whose weights are bit-identical to an earlier one
    (``same_weights_as`` not NaN) is drawn dashed and named in the legend."""
    from matplotlib.colors import LogNorm

    runs = list(dict.fromkeys(summary[run]))
    fig, axes = _panel_grid(len(runs), max_cols=ncols, height=3.1)
    steps = summary["step"].to_numpy()
    norm = LogNorm(vmin=max(1, steps[steps > 0].min() if (steps > 0).any() else 1), vmax=max(2, steps.max()))
    cmap = plt.get_cmap("viridis")
    for ax, name in zip(axes, runs):
        part = summary[summary[run] == name]
        for step, rows in part.groupby("step"):
            rows = rows.sort_values("relative_depth").drop_duplicates("relative_depth", keep="last")
            colour = "0.55" if step == 0 else cmap(norm(max(step, 1)))
            same = rows["same_weights_as"].iloc[0] if "same_weights_as" in rows else np.nan
            style = {"ls": "--", "marker": "x"} if pd.notna(same) else {}
            if step == 0:  # on top: the first updates' profiles lie close to it and hid it
                style["zorder"] = 3
            label = f"step {step}" + (f" = step {int(same)} (identical weights)" if pd.notna(same) else "")
            _band(ax, rows["relative_depth"], rows[metric], rows.get(f"{metric}_std"), colour, label, **style)
        ax.set_title(str(name), fontsize="small")
        ax.set_xlabel("relative depth")
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(P2_METRIC_LABELS.get(metric, metric))
        flagged = part["same_weights_as"].notna().any() if "same_weights_as" in part else False
        if flagged or part["step"].nunique() <= 6:
            ax.legend(fontsize="xx-small", loc="best")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=list(axes), label="training step (grey: step 0)", shrink=0.8)
    return fig


def paper2_dimension_over_training(average: pd.DataFrame, metric: str = "twonn_dimension", run: str = "label",
                                   style: str | None = None):
    """Paper 2, Figure 2: the layer-averaged metric against the training step (symmetric log axis, so step 0 shows),
    one colour per ``run`` with a band of +- one standard deviation over batches; with ``style`` (a column such as
    "which layers"), one line style per value. Checkpoints with weights identical to an earlier one are circled in
    red. With a ``loss`` column a second panel shows the validation loss."""
    with_loss = "loss" in average and average["loss"].notna().any()
    fig, axes = figure(ncols=2 if with_loss else 1, height=3.5)
    ax = axes[0, 0]
    runs = list(dict.fromkeys(average[run]))
    colours = sns.color_palette(PALETTE, len(runs))
    styles = list(dict.fromkeys(average[style])) if style else [None]
    dashes = dict(zip(styles, ["-", "--", ":", "-."]))
    for colour, name in zip(colours, runs):
        for which in styles:
            rows = average[(average[run] == name) & ((average[style] == which) if style else True)].sort_values("step")
            label = str(name) + (f", {which}" if style and len(styles) > 1 else "")
            _band(ax, rows["step"], rows[metric], rows.get(f"{metric}_std"), colour, label, ls=dashes[which])
            if "same_weights_as" in rows:
                same = rows[rows["same_weights_as"].notna()]
                ax.scatter(same["step"], same[metric], s=90, facecolors="none", edgecolors="red", lw=1.4, zorder=4,
                           label="identical weights to an earlier step" if name == runs[0] and len(same) else None)
        if with_loss:
            rows = average[average[run] == name].drop_duplicates("step").sort_values("step")
            axes[0, 1].plot(rows["step"], rows["loss"], color=colour, marker="o", ms=3, label=str(name))
    for a in axes[0]:
        _training_step_axis(a, average["step"].tolist())
    ax.set_ylabel(f"{P2_METRIC_LABELS.get(metric, metric)},\naveraged over layers")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="x-small")
    if with_loss:
        axes[0, 1].set_ylabel("validation loss (nats per token)")
        axes[0, 1].set_title("loss, for reference", fontsize="small")
    return fig


def paper2_two_measures(summary: pd.DataFrame, by: str = "label"):
    """Paper 1's mean cosine against Paper 2's sigma_1 share, one point per layer and model (left), and the mean
    cosine against the squared drift ratio (||mean|| / mean norm)^2 that a common offset alone would give (right)."""
    fig, axes = figure(ncols=2, height=3.6)
    labels = list(dict.fromkeys(summary[by]))
    colours = dict(zip(labels, sns.color_palette(PALETTE, len(labels))))
    markers = {"encoder": "o", "decoder": "s"}
    ratio = (summary["drift_norm"] / summary["mean_norm"]) ** 2
    for label in labels:
        rows = summary[summary[by] == label]
        marker = markers.get(rows["stack"].iloc[0], "^")
        axes[0, 0].scatter(rows["mean_cosine"], rows["sigma1_share"], color=colours[label], marker=marker, s=22,
                           label=label, alpha=0.85)
        axes[0, 1].scatter(ratio[rows.index], rows["mean_cosine"], color=colours[label], marker=marker, s=22,
                           alpha=0.85)
    axes[0, 0].set_xlabel("mean cosine similarity (Paper 1)")
    axes[0, 0].set_ylabel(P2_METRIC_LABELS["sigma1_share"] + "\n(Paper 2, centred)")
    # below the panel: inside it, the legend hid points in the upper corner
    axes[0, 0].legend(fontsize="xx-small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=2,
                      title="circles: encoders, squares: decoders", title_fontsize="xx-small")
    lim = [0, max(1e-3, float(np.nanmax(np.r_[ratio, summary["mean_cosine"]])) * 1.05)]
    axes[0, 1].plot(lim, lim, color="0.4", lw=1, ls=":", label="y = x")
    axes[0, 1].set_xlabel(r"drift ratio $(\|\bar x\| \,/\, \overline{\|x\|})^2$")
    axes[0, 1].set_ylabel("mean cosine similarity")
    axes[0, 1].legend(fontsize="x-small")
    return fig


def paper2_final_norm(summary: pd.DataFrame, metrics: tuple = ("sigma1_share", "mean_cosine"), by: str = "label"):
    """Before and after the final norm (Machina & Mercer 2024): each metric against relative depth, one line per
    model through the block outputs (the last one taken before the final norm), and a star for the last hidden
    state after the final norm, joined to it by a dotted segment."""
    fig, axes = figure(ncols=len(metrics), height=3.6)
    labels = list(dict.fromkeys(summary[by]))
    colours = sns.color_palette(PALETTE, len(labels))
    for ax, metric in zip(axes[0], metrics):
        for colour, label in zip(colours, labels):
            rows = summary[summary[by] == label].sort_values("relative_depth")
            blocks, after = rows[~rows["after_final_norm"]], rows[rows["after_final_norm"]]
            _band(ax, blocks["relative_depth"], blocks[metric], blocks.get(f"{metric}_std"), colour, label)
            if len(after) and len(blocks):
                last = blocks.iloc[-1]
                ax.plot([last["relative_depth"], after["relative_depth"].iloc[0]],
                        [last[metric], after[metric].iloc[0]], color=colour, ls=":", lw=1.2)
                ax.scatter(after["relative_depth"], after[metric], color=colour, marker="*", s=120, zorder=4,
                           edgecolors="black", linewidths=0.5)
        ax.set_xlabel("relative depth")
        ax.set_ylabel(P2_METRIC_LABELS.get(metric, metric))
    axes[0, 0].legend(fontsize="xx-small", loc="best", title="star: after the final norm", title_fontsize="xx-small")
    return fig


def paper2_planted_measures(clouds: pd.DataFrame):
    """Mean cosine and sigma_1 share of synthetic clouds (``measure.planted.planted_cloud``): columns ``case`` ("common
    drift" / "one dominant direction"), ``knob`` (relative drift norm / planted share), ``mean_cosine``,
    ``sigma1_share``. Left: growing drift, with the mean cosine r^2 / (1 + r^2) a drift alone gives; right: growing
    spike."""
    fig, axes = figure(ncols=2, height=3.3, sharey=True)
    colours = sns.color_palette(PALETTE, 2)
    xlabels = {"common drift": r"drift norm / noise norm  $r$",
               "one dominant direction": "variance share planted on one direction"}
    for ax, case in zip(axes[0], ("common drift", "one dominant direction")):
        rows = clouds[clouds["case"] == case].sort_values("knob")
        ax.plot(rows["knob"], rows["mean_cosine"], marker="o", ms=3.5, color=colours[0],
                label="mean cosine (Paper 1)")
        ax.plot(rows["knob"], rows["sigma1_share"], marker="s", ms=3.5, color=colours[1],
                label=r"$\sigma_1$ share of centred vectors (Paper 2)")
        if case == "common drift":
            r = np.linspace(rows["knob"].min(), rows["knob"].max(), 200)
            ax.plot(r, r**2 / (1 + r**2), color="0.4", ls=":", lw=1.2, label=r"$r^2/(1+r^2)$")
        ax.set_title(case)
        ax.set_xlabel(xlabels[case])
    axes[0, 0].set_ylabel("value of the measure")
    axes[0, 0].set_ylim(-0.05, 1.05)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[0, 1].legend(handles, labels, fontsize="x-small", loc="upper left")
    return fig


# ---- Beyond the papers: can attention be sharp without anisotropy? (ablation) ---------------------------------------

ABLATION_LABELS = {"standard": "standard", "qk_norm": "QK-norm", "centred": "centred Q, K",
                   "temperature": "learned temperature"}


ABLATION_MARKERS = {"standard": "o", "qk_norm": "s", "centred": "^", "temperature": "D"}


def _ablation_colours(variants) -> dict:
    """The same colour for a variant on every figure (the known variants first, in ``ABLATION_LABELS`` order)."""
    order = [*ABLATION_LABELS, *(v for v in variants if v not in ABLATION_LABELS)]
    return dict(zip(order, sns.color_palette(PALETTE, len(order))))


def _ablation_lines(ax, frame: pd.DataFrame, column: str, colours: dict) -> None:
    """One thin line per seed and a thick line for the seed mean, per variant (x = training step)."""
    for variant, rows in frame.groupby("variant", sort=False):
        for _, seed_rows in rows.groupby("seed"):
            seed_rows = seed_rows.sort_values("step")
            ax.plot(seed_rows["step"], seed_rows[column], color=colours[variant], lw=0.8, alpha=0.45)
        mean = rows.groupby("step")[column].mean()
        ax.plot(mean.index, mean.values, color=colours[variant], lw=2.0, marker=ABLATION_MARKERS.get(variant, "o"),
                ms=3.5, alpha=0.9,
                label=ABLATION_LABELS.get(variant, variant))
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("training step")


def ablation_loss_curves(loss: pd.DataFrame, baselines: dict | None = None):
    """Validation loss (nats per masked token) along training; columns variant, seed, step, split, loss."""
    fig, axes = figure(height=3.2)
    ax = axes[0, 0]
    val = loss[loss["split"] == "validation"]
    variants = list(dict.fromkeys(val["variant"]))
    _ablation_lines(ax, val, "loss", _ablation_colours(variants))
    for name, value in (baselines or {}).items():
        ax.axhline(value, color="0.4", ls=":", lw=1)
        ax.annotate(name, (ax.get_xlim()[0], value), xytext=(4, 3), textcoords="offset points", fontsize="x-small",
                    color="0.3")
    ax.set_ylabel("validation loss (nats)")
    ax.legend(fontsize="x-small")
    return fig


def ablation_over_training(heads: pd.DataFrame, hidden: pd.DataFrame):
    """Four panels along training, per variant (thin: seeds; thick: their mean): attention entropy relative to
    uniform attention (mean over layers and heads), mean |cos(Q̄, K̄)| over heads, and the hidden states' mean
    cosine and sigma_1 share averaged over the transformer layers (embeddings excluded)."""
    variants = list(dict.fromkeys(heads["variant"]))
    colours = _ablation_colours(variants)
    h = heads.assign(entropy_ratio=heads["entropy"] / heads["entropy_uniform"], abs_cos_qk=heads["cos_qk"].abs())
    h = h.groupby(["variant", "seed", "step"], sort=False)[["entropy_ratio", "abs_cos_qk"]].mean().reset_index()
    z = hidden[hidden["layer"] > 0].groupby(["variant", "seed", "step"], sort=False)[
        ["mean_cosine", "sigma1_share"]].mean().reset_index()
    fig, axes = figure(ncols=2, nrows=2, height=2.7)
    panels = [(h, "entropy_ratio", "attention entropy / uniform"), (h, "abs_cos_qk", "mean |cos(Q̄, K̄)| over heads"),
              (z, "mean_cosine", "hidden mean cosine (layers 1..L)"),
              (z, "sigma1_share", r"hidden $\sigma_1$ share (layers 1..L)")]
    for ax, (frame, column, label) in zip(axes.ravel(), panels):
        _ablation_lines(ax, frame, column, colours)
        ax.set_ylabel(label, fontsize="small")
    axes[0, 0].legend(fontsize="xx-small")
    return fig


def ablation_sharp_vs_isotropic(summary: pd.DataFrame, isotropy: str = "mean_cosine"):
    """Final checkpoints, one point per (variant, seed): hidden-state anisotropy (x) against attention entropy relative
    to uniform (y, lower = sharper). ``summary`` is ``experiments.ablation.final_summary``. Sharp and isotropic = lower left."""
    variants = list(dict.fromkeys(summary["variant"]))
    colours = _ablation_colours(variants)
    fig, axes = figure(ncols=2, height=3.2)
    for ax, x in zip(axes[0], (isotropy, "sigma1_share")):
        for variant in [v for v in colours if v in variants]:
            rows = summary[summary["variant"] == variant]
            ax.scatter(rows[x], rows["entropy"] / rows["entropy_uniform"], color=colours[variant], s=36, alpha=0.85,
                       marker=ABLATION_MARKERS.get(variant, "o"),
                       label=ABLATION_LABELS.get(variant, variant))
        ax.set_xlabel({"mean_cosine": "hidden mean cosine", "sigma1_share": r"hidden $\sigma_1$ share"}.get(x, x)
                      + " (layers 1..L)")
    axes[0, 0].set_ylabel("attention entropy / uniform")
    axes[0, 0].legend(fontsize="x-small")
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
