"""Appendix B (the isotropic reference): what it asks of a runtime."""

from __future__ import annotations

import inspect

from anisotropy.measure import baseline
from anisotropy.pages import budget


def monte_carlo_bytes(dims, n_pairs: int) -> float:
    """Peak host bytes of ``measure.baseline.simulated_cosines(dims, n_pairs)``: every dimension's frame (an int64
    ``d`` and a float32 cosine a pair, 12 bytes) is held until they are concatenated into a second copy, 24 bytes a
    pair and dimension; beside them, one chunk of the draws (``sample_isotropic_cosines``): two float32 blocks of
    ``chunk_elements`` / 2 entries and the product of the two that its einsum forms, 3 x 4 x chunk / 2 bytes
    (tracemalloc: 97 MiB for a chunk of 2^24 entries). The page then writes the frame to the results store, a copy
    of the same size in place of the parts. Bytes."""
    chunk = inspect.signature(baseline.sample_isotropic_cosines).parameters["chunk_elements"].default
    return 24.0 * n_pairs * len(dims) + 6.0 * chunk


def plan(p: dict, out: budget.Plan) -> None:
    """Nothing downloaded: ``n_pairs`` pairs of Gaussian vectors per dimension of ``dims`` drawn on the CPU (two
    d-dimensional draws a pair, ``budget.NORMALS_PER_S``) and held as ``monte_carlo_bytes`` says."""
    dims, n = list(p["dims"]), p["n_pairs"]
    out.work.append(budget.Work("Monte Carlo cosines", host_bytes=monte_carlo_bytes(dims, n),
                                cpu_seconds=2.0 * n * sum(dims) / budget.NORMALS_PER_S, on_cpu=True,
                                sized_by=("n_pairs",)))
