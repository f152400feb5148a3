"""Beyond the papers: can attention be sharp without anisotropy (the ablation chapter), and one per-layer measure of
any model (``python -m anisotropy profile`` and its chapter, ``notebooks/profile_a_model.md``)."""

from __future__ import annotations

import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.p2 import P2_METRIC_LABELS
from anisotropy.pages.plots.style import PALETTE, figure, line_with_band


# ---- can attention be sharp without anisotropy? (the ablation chapter) ----------------------------------------------

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


# ---- any model, layer by layer (python -m anisotropy profile, and the chapter that shows it) -----------------------

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
        line_with_band(ax, rows["relative_depth"], rows[column], std, colour, label)
    ax.set_xlabel("relative depth (0 = first layer shown, 1 = last)")
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylabel(ylabel or P2_METRIC_LABELS.get(column, column))
    ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.0, 1.0), ncols=1)
    return fig
