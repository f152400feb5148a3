"""What every data source shares: the error of a source that cannot be read here, and the one deterministic draw.
"""

from __future__ import annotations

import numpy as np

from anisotropy import hub


class DataUnavailableError(hub.Unavailable):
    """A data source that cannot be read here for a reason of its own (a file missing or damaged); the Hub's reasons
    are ``hub.Unavailable``."""


def sample(pool_size: int, n: int, seed: int, what: str) -> np.ndarray:
    """``n`` indices into a pool of ``pool_size`` examples, drawn with ``numpy.random.default_rng(seed)`` (without
    replacement unless ``n`` exceeds the pool); ``what`` names the pool in errors."""
    if pool_size == 0:
        raise ValueError(f"{what} is empty: nothing to sample")
    if n <= 0:
        raise ValueError(f"{what}: n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    return rng.choice(pool_size, size=n, replace=n > pool_size)
