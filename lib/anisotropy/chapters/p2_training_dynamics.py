"""The training-dynamics page (Paper 2, Figure 2): the phases of the intrinsic dimension along training."""

from __future__ import annotations

import numpy as np
import pandas as pd


def phases(part: pd.DataFrame) -> dict:
    """One run's layer-averaged TwoNN dimension (rows: label, layers, step, twonn_dimension) at its first step, at its
    largest and at its last step, and the step of the largest."""
    part = part.sort_values("step")
    values = part["twonn_dimension"].to_numpy()
    i = int(np.argmax(values))
    return {"run": part["label"].iloc[0], "layers": part["layers"].iloc[0], "at first step": values[0],
            "largest": values[i],
            "step of largest": int(part["step"].iloc[i]), "at last step": values[-1]}
