"""The training-dynamics page (Paper 2, Figure 2): the phases of the intrinsic dimension along training."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy import profiles
from anisotropy.models import registry
from anisotropy.pages import report


def phases(part: pd.DataFrame) -> dict:
    """One run's layer-averaged TwoNN dimension (rows: label, layers, step, twonn_dimension) at its first step, at its
    largest and at its last step, and the step of the largest."""
    part = part.sort_values("step")
    values = part["twonn_dimension"].to_numpy()
    i = int(np.argmax(values))
    return {"run": part["label"].iloc[0], "layers": part["layers"].iloc[0], "at first step": values[0],
            "largest": values[i],
            "step of largest": int(part["step"].iloc[i]), "at last step": values[-1]}


def widths(d) -> str:
    """The distinct widths in ``d`` (a column of layer widths), in words ("64 and 96")."""
    return report.listing(sorted({int(v) for v in d}), empty="no width")


def paper_widths(chapter: str = "p2_training_dynamics") -> str:
    """The widths of the checkpoint series that the ``paper`` profile measures on ``chapter`` (from the registry)."""
    params = profiles.chapter_parameters("paper", chapter)
    names = [*params.get("pythia_models", []), *params.get("bloom_models", [])]
    return widths(registry.spec(n).config.get("hidden_size", 0) for n in names)
