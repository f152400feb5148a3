"""Paper 1, Section 3: the layer-wise mean cosine across models (Figures 1-4), and the p-values of its correlation with
the drift norm (Figures 5 and 16)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns

from anisotropy.pages.plots.style import PALETTE, figure


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
