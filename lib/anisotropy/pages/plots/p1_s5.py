"""Paper 1, Section 5: queries and keys along training (Figures 11-15 and 19-23), for one run, several runs, and real
models' checkpoints."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.style import PALETTE, figure, panel_grid, training_step_axis


QK_COLOURS = {"query": sns.color_palette(PALETTE)[0], "key": sns.color_palette(PALETTE)[1]}


def qk_projection(proj: pd.DataFrame, title: str | None = None, basis_label: str = "SVD of queries and keys"):
    """Paper 1, Figures 11 and 19-22: one head's sampled queries and keys (columns step, kind, x, y) in a fixed SVD
    plane, one panel per training step; large markers are the means Q̄_s and K̄_s, the cross is the origin."""
    steps = sorted(proj["step"].unique())
    fig, axes = panel_grid(len(steps), max_cols=4, height=2.5, sharex=True, sharey=True)
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
    fig, axes = panel_grid(len(trajectories), max_cols=2, height=3.4)
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
    fig, axes = panel_grid(len(layers), max_cols=max_cols, height=2.3, sharey=True)
    for ax, layer in zip(axes, layers):
        part = frame[frame["layer"] == layer]
        if band is not None:
            ax.axhspan(-band, band, color="0.85", zorder=0, lw=0)
        ax.axhline(0, color="0.4", lw=0.6)
        for key, colour in colours.items():
            line = part[part[by] == key].sort_values("step")
            ax.plot(line["step"], line[column], color=colour, lw=lw, marker="o", ms=2, label=key)
        training_step_axis(ax, part["step"])
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
    training_step_axis(ax, per_layer["step"])
    ax.set_ylabel("mean attention entropy (nats)")
    ax.legend(fontsize="x-small", ncols=2 if len(layers) > 6 else 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _stage_axis(ax, steps, stage_names: dict | None) -> None:
    """The x axis of a run: training steps, or named stages (``{0: "untrained twin", 1: "pretrained"}``)."""
    if stage_names:
        ax.set_xticks(sorted(stage_names), [stage_names[k] for k in sorted(stage_names)])
        ax.set_xlabel("")
    else:
        training_step_axis(ax, steps)


def qk_statistic_by_run(stats: pd.DataFrame, column: str = "cos_qk", ylabel: str = "cos(Q̄, K̄)",
                        band: float | dict | None = None, max_cols: int = 3, stage_names: dict | None = None):
    """Paper 1, Figure 23 (and its extension to other models): a per-head statistic along training, one panel per
    run, one line per head coloured by layer. ``band``: ±band shaded (a number, or one per run); ``stage_names``:
    names for the steps instead of a training-step axis."""
    import textwrap

    runs = list(dict.fromkeys(stats["run"]))
    fig, axes = panel_grid(len(runs), max_cols=max_cols, height=2.8, sharey=True)
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
    fig, axes = panel_grid(len(runs), max_cols=max_cols, height=2.8, sharey=True)
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
