"""Foundations: the self-trained checkpoint suites' loss and accuracy curves and the recipe sweep that chose their
recipes (``notebooks/checkpoint_suites.md``)."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.style import PALETTE, figure


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
