"""Paper 1, Section 4: an untrained block under a common drift (Figures 6-10), each head's pre-softmax scores, and
trained models' hidden-state norms beside the block's fixed point."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.style import PALETTE, figure


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
