"""Clouds of vectors with planted geometry, on which both papers' measures are known: Gaussian vectors with a common
drift (which raises the mean cosine only) or one dominant direction (which raises the sigma_1 share only), and the
sigma_1 share an isotropic batch shows by chance."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.measure import statistics
from anisotropy.measure.batches import BATCH_SIZE


def isotropic_sigma1_share(d, n: int = BATCH_SIZE):
    """The sigma_1 share that n isotropic Gaussian vectors in dimension d show by chance (Paper 2's anisotropy of a
    perfectly isotropic batch): the top eigenvalue of their sample covariance sits at the Marchenko-Pastur upper edge
    (1 + sqrt(d / n))^2 times the variance while the trace is d times it, so the share is about
    (1 + sqrt(d / n))^2 / d (large n and d; for d = 768, n = 4096 about 0.0027)."""
    d = np.asarray(d, dtype=float)
    return (1 + np.sqrt(d / n)) ** 2 / d


def planted_cloud(n: int, d: int, drift: float = 0.0, spike_share: float | None = None, seed: int = 0) -> np.ndarray:
    """n Gaussian vectors in R^d with unit variance per coordinate, shifted by a common mean of norm
    ``drift * sqrt(d)`` (so ``drift`` = 1 makes the mean as long as a typical centred vector), and, with
    ``spike_share``, one direction's variance raised so that it carries that share of the total variance
    (s^2 / (s^2 + d - 1) = spike_share). The two ways to make a cloud anisotropic that the two papers' measures
    tell apart: a drift raises the mean cosine only, a spike the sigma_1 share only."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    if spike_share is not None:
        if not 0 < spike_share < 1:
            raise ValueError(f"spike_share must be in (0, 1), got {spike_share}")
        x[:, 0] *= np.sqrt(spike_share * (d - 1) / (1 - spike_share))
    direction = rng.normal(size=d)
    x += drift * np.sqrt(d) * direction / np.linalg.norm(direction)
    return x.astype(np.float32)


def planted_measures(n: int, d: int, seed: int = 0, steps: int = 13) -> pd.DataFrame:
    """Both papers' measures on ``planted_cloud``s (Paper 2's two-measures page): ``steps`` drifts from 0 to 3 (case
    "common drift", ``knob`` = the drift in units of the noise's typical norm) and ``steps`` spike shares from 0.05
    to 0.95 (case "one dominant direction", ``knob`` = the share); columns ``mean_cosine`` and ``sigma1_share``
    (both dimensionless). Every cloud uses the same ``seed``, so the noise is the same along a case."""
    rows = []
    for case, option, knobs in (("common drift", "drift", np.linspace(0, 3, steps)),
                                ("one dominant direction", "spike_share", np.linspace(0.05, 0.95, steps))):
        for knob in knobs:
            x = planted_cloud(n, d, seed=seed, **{option: float(knob)})
            rows.append({"case": case, "knob": float(knob), "mean_cosine": statistics.mean_cosine(x),
                         "sigma1_share": statistics.sigma1_share(x)})
    return pd.DataFrame(rows)
