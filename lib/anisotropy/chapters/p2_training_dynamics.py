"""The training-dynamics page (Paper 2, Figure 2): the phases of the intrinsic dimension along training, and what the
page asks of a runtime."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy import profiles
from anisotropy.chapters import p2_layer_profiles
from anisotropy.claims import curves
from anisotropy.experiments import spectral
from anisotropy.models import registry
from anisotropy.pages import budget, report

# What the page measures on each pooled batch: Paper 2's two measures, and the first moments beside them.
METRICS = ("sigma1_share", "twonn_dimension", "mean_cosine", "drift_norm", "mean_norm")


def phases(part: pd.DataFrame) -> dict:
    """One run's layer-averaged TwoNN dimension (rows: label, layers, step, twonn_dimension) at its first step, at its
    largest and at its last step, and the step of the largest."""
    part = part.sort_values("step")
    values = part["twonn_dimension"].to_numpy()
    i = int(np.argmax(values))
    return {"run": part["label"].iloc[0], "layers": part["layers"].iloc[0], "at first step": values[0],
            "largest": values[i],
            "step of largest": int(part["step"].iloc[i]), "at last step": values[-1]}


def with_warmup(entries: list[dict], profile: str) -> list[dict]:
    """The page's checkpoint entries, each with its run's learning-rate warm-up in steps (``warmup``, a constant
    column of the measured frame that the ledger's training rules start from: ``claims.curves.warmup_steps`` of its
    suite or registry model)."""
    return [{**e, "warmup": curves.warmup_steps(e.get("suite") or str(e["model"]), profile)} for e in entries]


def widths(d) -> str:
    """The distinct widths in ``d`` (a column of layer widths), in words ("64 and 96")."""
    return report.listing(sorted({int(v) for v in d}), empty="no width")


def paper_widths(chapter: str = "p2_training_dynamics") -> str:
    """The widths of the checkpoint series that the ``paper`` profile measures on ``chapter`` (from the registry)."""
    params = profiles.chapter_parameters("paper", chapter)
    names = [*params.get("pythia_models", []), *params.get("bloom_models", [])]
    return widths(registry.spec(n).config.get("hidden_size", 0) for n in names)


#: Paper 2's share as measured and the book's two robust readings of it (``measure.batches.ROBUST_METRICS``).
ROBUST_SHARES = {"sigma1_share": "as measured (Paper 2)", "sigma1_share_no_first": "without the first position",
                 "sigma1_share_no_top_norms": "without the largest 1% of norms"}


#: What the page says where its ``shares`` parameter left the robust readings out.
NOT_COMPUTED = ('not computed under this profile (shares = "paper"; shares = "robust" adds them, two more sigma_1 '
                'shares per batch)')


def robust_average(frame: pd.DataFrame, by) -> pd.DataFrame:
    """Per checkpoint (``by``), the layer-averaged sigma_1 share in each of ``ROBUST_SHARES``' readings, stacked: the
    share in column ``sigma1_share`` (and ``_std`` over batches), the reading in ``measure``."""
    parts = [spectral.layer_average(frame, column, by=by)
             .rename(columns={column: "sigma1_share", f"{column}_std": "sigma1_share_std"}).assign(measure=name)
             for column, name in ROBUST_SHARES.items() if column in frame.columns]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def robust_words(average: pd.DataFrame) -> str:
    """Per run, the three layer-averaged shares of ``robust_average`` at its last checkpoint, in words."""
    parts = []
    for run, rows in average.groupby("label", sort=False):
        last = rows[rows["step"] == rows["step"].max()].set_index("measure")["sigma1_share"]
        parts.append(f"{run} at step {int(rows['step'].max()):,}: " + ", ".join(
            f"{last[name]:.3f} {name}" for name in ROBUST_SHARES.values() if name in last.index))
    return "; ".join(parts)


def plan(p: dict, out: budget.Plan) -> None:
    """Paper 2's protocol (``p2_layer_profiles.plan``) on every checkpoint of the page's series, with its
    ``METRICS`` (TwoNN too) and the robust readings where ``shares`` asks for them."""
    p2_layer_profiles.plan(p, out, metrics=METRICS, robust=p.get("shares", "robust") == "robust")
