"""Paper 2: layer profiles of anisotropy and intrinsic dimension (Figures 1-4), and the book's comparisons of its
measure with Paper 1's (the two measures, the final norm, planted clouds, the robust shares)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.style import PALETTE, empty_figure, figure, line_with_band, panel_grid, training_step_axis


P2_METRIC_LABELS = {
    "sigma1_share": r"anisotropy $\sigma_1^2 / \sum_i \sigma_i^2$",
    "twonn_dimension": "intrinsic dimension (TwoNN)",
    "mean_cosine": "mean cosine similarity",
}


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
            line_with_band(ax, rows["relative_depth"], rows[metric], rows.get(f"{metric}_std"), colour, label)
        ax.set_title(f"{stack}s")
        ax.set_xlabel("relative depth (layer / last layer)")
        ax.set_xlim(-0.03, 1.03)
        # below the panel: a decoder's profile can fill every corner of it (SmolLM2 stays near 1 for half its depth)
        ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=1)
    axes[0, 0].set_ylabel(P2_METRIC_LABELS.get(metric, metric))
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
    fig, axes = panel_grid(len(labels), max_cols=max_cols, height=2.6, sharey=True)
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
    fig, axes = panel_grid(len(runs), max_cols=ncols, height=3.1)
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
            line_with_band(ax, rows["relative_depth"], rows[metric], rows.get(f"{metric}_std"), colour, label, **style)
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
            line_with_band(ax, rows["step"], rows[metric], rows.get(f"{metric}_std"), colour, label, ls=dashes[which])
            if "same_weights_as" in rows:
                same = rows[rows["same_weights_as"].notna()]
                ax.scatter(same["step"], same[metric], s=90, facecolors="none", edgecolors="red", lw=1.4, zorder=4,
                           label="identical weights to an earlier step" if name == runs[0] and len(same) else None)
        if with_loss:
            rows = average[average[run] == name].drop_duplicates("step").sort_values("step")
            axes[0, 1].plot(rows["step"], rows["loss"], color=colour, marker="o", ms=3, label=str(name))
    for a in axes[0]:
        training_step_axis(a, average["step"].tolist())
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
            line_with_band(ax, blocks["relative_depth"], blocks[metric], blocks.get(f"{metric}_std"), colour, label)
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
