"""Paper 2's batches: one layer's valid vectors, shuffled over the whole corpus and cut into batches of 4096
(``BatchedLayer``, an accumulator for ``measure.taps.extract``), and the statistics measured on each batch (``BATCH_METRICS``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from anisotropy.measure import metrics

BATCH_SIZE = 4096  # the paper's batch of token vectors

#: Per-batch statistics: name -> function of an (n, d) array. Paper 2: sigma1_share, twonn_dimension; Paper 1:
#: mean_cosine, drift_norm; and the scale they are read against (mean_norm).
BATCH_METRICS: dict[str, Callable] = {
    "sigma1_share": metrics.sigma1_share,
    "twonn_dimension": metrics.twonn_dimension,
    "mean_cosine": metrics.mean_cosine,
    "drift_norm": metrics.drift_norm,
    "mean_norm": metrics.mean_norm,
}
DEFAULT_METRICS = ("sigma1_share", "mean_cosine", "drift_norm", "mean_norm")


# ---------------------------------------------------------------------------------------------------------------------
# The accumulator
# ---------------------------------------------------------------------------------------------------------------------


def shuffle_keys(n: int, seed: int) -> np.ndarray:
    """The random keys of ``n`` vectors in stream order: sorting a stream by them shuffles it."""
    return np.random.default_rng(seed).random(n)


def shuffle_order(n: int, seed: int) -> np.ndarray:
    """The permutation of a stream of ``n`` vectors that ``BatchedLayer`` applies before cutting it into batches:
    the stream sorted by ``shuffle_keys`` (the batches are its first ``n_batches * batch_size`` entries)."""
    return np.argsort(shuffle_keys(n, seed), kind="stable")


# A shuffled pool is trimmed to its size whenever its buffer reaches this many times it. Keeping the smallest keys is
# the same whatever the trimming points, so the value changes memory and time only, never the numbers: 2 held every
# layer's pool twice over (11 GiB for Pythia-2.8B's 33 states under `paper`, near a free Colab's 12.7 GiB); at 1.25 a
# trim copies 1.25 pools (210 MB for one of those states), a few times more often.
POOL_TRIM_AT = 1.25


class BatchedLayer:
    """One layer's batches. Valid rows are buffered in stream order.

    With ``shuffle_seed`` (the second paper's protocol, its Section 2.2: vectors are shuffled before they are split
    into batches): the whole stream of valid rows is shuffled, ``shuffle_order(n, shuffle_seed)``, and its first
    ``n_batches * batch_size`` rows are cut into batches, so that a batch mixes tokens of every text instead of
    holding a few texts' consecutive tokens (near-duplicates for TwoNN) or only the first texts' tokens. Streaming,
    without holding the whole stream: each row gets its key (``shuffle_keys``, drawn in stream order) and the pool
    keeps the rows of the smallest keys seen so far, which at the end of the stream are the first rows of the
    shuffled order, in that order. The same seed gives the same keys in every layer, so batch k holds the same
    tokens in every layer. A stream shorter than the pool is shuffled whole and cut into as many full batches as it
    makes. The pool is measured once the stream ends (when the batches are asked for), so ``full`` stays False and
    every text is read. Memory: the pool is trimmed back to its ``n_batches * batch_size`` rows each time the buffer
    reaches ``POOL_TRIM_AT`` times that, so a layer holds at most that many float32 rows plus one incoming chunk.

    Without ``shuffle_seed``: each time ``batch_size`` rows are there, the batch is measured and dropped (memory: one
    batch plus one incoming chunk). After ``n_batches`` batches further rows are only counted.

    Valid rows: kept by ``mask`` (nonzero = keep), finite and not all zero (the rows ``measure.metrics`` would exclude), so a
    batch holds exactly ``batch_size`` vectors. Every metric in ``metric_names`` is computed on each batch.
    Usable as ``taps.extract(..., stats_factory=lambda dim: BatchedLayer(dim, ...))``.
    """

    def __init__(self, dim: int, batch_size: int = BATCH_SIZE, n_batches: int = 4,
                 metric_names: Sequence[str] = DEFAULT_METRICS, shuffle_seed: int | None = None):
        unknown = [m for m in metric_names if m not in BATCH_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(BATCH_METRICS)}")
        if batch_size < 3 or n_batches < 1:
            raise ValueError(f"BatchedLayer needs batch_size >= 3 and n_batches >= 1, got {batch_size}, {n_batches}")
        self.dim, self.batch_size, self.n_batches = int(dim), int(batch_size), int(n_batches)
        self.metric_names = tuple(metric_names)
        self.shuffle_seed = shuffle_seed
        self.values: dict[str, list[float]] = {m: [] for m in self.metric_names}
        self._buffer: list[torch.Tensor] = []
        self._buffered = 0
        self._n = 0
        self._pooled = False  # shuffled mode: the pool has been shuffled and measured
        # shuffled mode: the pool's keys (``shuffle_keys``, one per valid row in stream order) and their generator
        self._keys: list[np.ndarray] = []
        self._rng = np.random.default_rng(shuffle_seed) if shuffle_seed is not None else None

    def __repr__(self) -> str:
        done = len(self.values[self.metric_names[0]]) if self.metric_names else 0
        return (f"BatchedLayer(dim={self.dim}, n={self._n}, batches={done}/{self.n_batches} of {self.batch_size}"
                f"{', shuffled' if self.shuffle_seed is not None else ''})")

    @property
    def n(self) -> int:
        """Valid rows offered so far (including those beyond the last batch)."""
        return self._n

    @property
    def pool_size(self) -> int:
        return self.batch_size * self.n_batches

    @property
    def batches_done(self) -> int:
        """Batches measured; in shuffled mode, asking measures the pool (the stream is taken to have ended)."""
        if self.shuffle_seed is not None:
            self._measure_pool()
        return len(self.values[self.metric_names[0]]) if self.metric_names else 0

    @property
    def full(self) -> bool:
        if self.shuffle_seed is not None:  # any later row may belong to the first batches of the shuffled stream
            return self._pooled
        return self.batches_done >= self.n_batches

    def _measure(self, batch: torch.Tensor) -> None:
        for name in self.metric_names:
            self.values[name].append(float(BATCH_METRICS[name](batch)))

    def _keep_smallest(self) -> None:
        """Keep the pool's rows of the ``pool_size`` smallest keys, in key order: the first rows of the shuffled
        stream so far."""
        pool = torch.cat(self._buffer) if self._buffer else torch.empty(0, self.dim)
        keys = np.concatenate(self._keys) if self._keys else np.empty(0)
        order = np.argsort(keys, kind="stable")[: self.pool_size]
        self._buffer, self._keys = [pool[torch.from_numpy(order)]], [keys[order]]
        self._buffered = len(order)

    def _measure_pool(self) -> None:
        if self._pooled:
            return
        self._keep_smallest()
        pool = self._buffer[0]
        for k in range(pool.shape[0] // self.batch_size):
            self._measure(pool[k * self.batch_size: (k + 1) * self.batch_size])
        self._buffer, self._keys, self._buffered, self._pooled = [], [], 0, True

    def update(self, batch, mask=None) -> "BatchedLayer":
        rows = torch.as_tensor(batch).detach()
        rows = rows.reshape(-1, rows.shape[-1])
        if rows.shape[1] != self.dim:
            raise ValueError(f"BatchedLayer(dim={self.dim}) got rows of dimension {rows.shape[1]}")
        if mask is not None:
            rows = rows[torch.as_tensor(mask).reshape(-1).to(rows.device) != 0]
        rows = rows.to(device="cpu", dtype=torch.float32)
        rows = rows[torch.isfinite(rows).all(dim=1) & (rows != 0).any(dim=1)]
        self._n += rows.shape[0]
        if self.full or not rows.shape[0]:
            return self
        self._buffer.append(rows)
        self._buffered += rows.shape[0]
        if self.shuffle_seed is not None:
            self._keys.append(self._rng.random(rows.shape[0]))
            if self._buffered >= POOL_TRIM_AT * self.pool_size:  # memory: drop rows that can no longer be drawn
                self._keep_smallest()
            return self
        while self._buffered >= self.batch_size and not self.full:
            stacked = torch.cat(self._buffer)
            batch, rest = stacked[: self.batch_size], stacked[self.batch_size:]
            self._measure(batch)
            self._buffer, self._buffered = ([rest] if rest.shape[0] else []), rest.shape[0]
        if self.full:
            self._buffer, self._buffered = [], 0
        return self

    def rows(self) -> list[dict]:
        """One dict per completed batch: ``batch`` (0-based), ``n_vectors`` and every metric."""
        return [{"batch": i, "n_vectors": self.batch_size, **{m: self.values[m][i] for m in self.metric_names}}
                for i in range(self.batches_done)]
