"""Paper 2's batches: one layer's valid vectors, shuffled over the whole corpus and cut into batches of 4096
(``BatchedLayer``, an accumulator for ``measure.taps.extract``), and the statistics measured on each batch (``BATCH_METRICS``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from anisotropy.measure import statistics
from anisotropy.measure.rows import device_for, threads_each
from anisotropy.measure.statistics import drift_norm, mean_cosine, mean_norm
from anisotropy.measure.streaming import Accumulator
from anisotropy.measure.twonn import twonn_dimension

BATCH_SIZE = 4096  # the paper's batch of token vectors

# Rows wider than this (a CNN's stage map flattened per image: 10^5 to 10^6 coordinates) have their sigma_1 share
# from the n x n Gram matrix of the centred rows (``sigma1_share``): its non-zero eigenvalues are the d x d scatter's,
# which at such widths cannot be held (d^2 float64: 0.5 GiB at this width, 5 TB at ResNet-50's first stage). Narrower
# rows keep ``measure.statistics.sigma1_share``.
SCATTER_MAX_DIM = 8192
_GRAM_COLUMNS = 1 << 16  # columns per float64 chunk of the Gram product


def sigma1_share(rows: torch.Tensor) -> float:
    """``statistics.sigma1_share`` of a batch of valid rows (n, d): sigma_1^2 / sum_i sigma_i^2 of the centred rows;
    where d > ``SCATTER_MAX_DIM`` and n < d, the top eigenvalue of the n x n Gram matrix C C^T (float64, accumulated
    over column chunks) over its trace, the same quantity."""
    n, d = rows.shape
    if d <= SCATTER_MAX_DIM or n >= d:
        return statistics.sigma1_share(rows)
    rows = torch.as_tensor(rows)
    mean = rows.sum(dim=0, dtype=torch.float64) / n
    gram = torch.zeros(n, n, dtype=torch.float64, device=rows.device)
    for start in range(0, d, _GRAM_COLUMNS):
        c = rows[:, start:start + _GRAM_COLUMNS].double() - mean[start:start + _GRAM_COLUMNS]
        gram += c @ c.T
    gram = ((gram + gram.T) / 2).cpu()
    total = float(torch.trace(gram))
    if not total > 0:
        raise ValueError("sigma1_share is undefined: the rows have zero variance (all valid rows are identical)")
    return float(torch.linalg.eigvalsh(gram)[-1]) / total


#: Per-batch statistics: name -> function of an (n, d) array. Paper 2: sigma1_share, twonn_dimension; Paper 1:
#: mean_cosine, drift_norm; and the scale they are read against (mean_norm).
BATCH_METRICS: dict[str, Callable] = {
    "sigma1_share": sigma1_share,
    "twonn_dimension": twonn_dimension,
    "mean_cosine": mean_cosine,
    "drift_norm": drift_norm,
    "mean_norm": mean_norm,
}
DEFAULT_METRICS = ("sigma1_share", "mean_cosine", "drift_norm", "mean_norm")

#: Beside ``sigma1_share``, the same batch measured again without a handful of tokens that can carry it (the book's
#: own check, not Paper 2's): without each sequence's first position (an attention sink's massive activation) and
#: without the batch's largest 1% of norms; with the mean cosine for comparison, and the ratio of the first
#: positions' median norm to the others' (NaN where the batch holds no first position).
ROBUST_METRICS = ("sigma1_share_no_first", "mean_cosine_no_first", "sigma1_share_no_top_norms",
                  "mean_cosine_no_top_norms", "first_norm_ratio")
TOP_NORMS = 0.01  # the share of largest norms left out by the ``*_no_top_norms`` metrics


def robust_metrics(batch: torch.Tensor, first: torch.Tensor) -> dict[str, float]:
    """``ROBUST_METRICS`` of one batch ((n, d) rows; ``first``: (n,) bool, the rows at their sequence's first
    position)."""
    first = first.to(batch.device)
    norms = batch.double().norm(dim=1)
    rest = batch[~first]
    kept = batch[norms <= torch.quantile(norms, 1 - TOP_NORMS)]
    ratio = (float(norms[first].quantile(0.5) / norms[~first].quantile(0.5))
             if bool(first.any()) and bool((~first).any()) else float("nan"))

    def measured(fn, rows):
        return float(fn(rows)) if rows.shape[0] >= 2 else float("nan")
    return {"sigma1_share_no_first": measured(sigma1_share, rest),
            "mean_cosine_no_first": measured(mean_cosine, rest),
            "sigma1_share_no_top_norms": measured(sigma1_share, kept),
            "mean_cosine_no_top_norms": measured(mean_cosine, kept),
            "first_norm_ratio": ratio}


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


class BatchedLayer(Accumulator):
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
    batch plus one incoming chunk). After ``n_batches`` batches further rows are only counted (``n`` counts them).

    Valid rows: kept by ``mask`` (nonzero = keep), finite and not all zero (the rows ``measure.statistics`` would
    exclude, counted in ``n_excluded``), so a batch holds exactly ``batch_size`` vectors. Every metric in
    ``metric_names`` is computed on each batch, and with ``sigma1_share`` among them, ``ROBUST_METRICS`` too unless
    ``robust`` is False (``first``: which rows are their sequence's first position, as ``taps.extract`` passes it;
    the robust readings cost two more sigma_1 shares per batch, which a caller that does not read them need not pay).
    An ``measure.streaming.Accumulator``: ``taps.extract(..., stats_factory=lambda dim: BatchedLayer(dim, ...))``.
    """

    wants_first = True  # taps.extract passes which rows are at their sequence's first position

    def __init__(self, dim: int, batch_size: int = BATCH_SIZE, n_batches: int = 4,
                 metric_names: Sequence[str] = DEFAULT_METRICS, shuffle_seed: int | None = None,
                 robust: bool = True):
        unknown = [m for m in metric_names if m not in BATCH_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(BATCH_METRICS)}")
        if batch_size < 3 or n_batches < 1:
            raise ValueError(f"BatchedLayer needs batch_size >= 3 and n_batches >= 1, got {batch_size}, {n_batches}")
        self.dim, self.batch_size, self.n_batches = int(dim), int(batch_size), int(n_batches)
        self.metric_names = tuple(metric_names)
        self.shuffle_seed = shuffle_seed
        self.robust = robust and "sigma1_share" in self.metric_names
        self.values: dict[str, list[float]] = {m: [] for m in self.metric_names + (ROBUST_METRICS if self.robust else ())}
        self._buffer: list[torch.Tensor] = []
        self._first: list[torch.Tensor] = []  # per buffered row: at its sequence's first position
        self._buffered = 0
        self._n = 0
        self._n_excluded = 0
        self._pooled = False  # shuffled mode: the pool has been shuffled and measured
        # shuffled mode: the pool's keys (``shuffle_keys``, one per valid row in stream order) and their generator
        self._keys: list[np.ndarray] = []
        self._rng = np.random.default_rng(shuffle_seed) if shuffle_seed is not None else None
        # Where the rows came from when not the CPU (the model's GPU): the pool waits in host memory (every layer's
        # pool on the GPU would not fit beside the model), and each batch goes back there to be measured
        # (``measure.rows``' device path; one batch is 4096 d float32, a few ms over PCIe).
        self._device: torch.device | None = None

    def __repr__(self) -> str:
        done = len(self.values[self.metric_names[0]]) if self.metric_names else 0
        return (f"BatchedLayer(dim={self.dim}, n={self._n}, batches={done}/{self.n_batches} of {self.batch_size}"
                f"{', shuffled' if self.shuffle_seed is not None else ''})")

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

    def _measure(self, batch: torch.Tensor, first: torch.Tensor) -> None:
        if self._device is not None:
            batch = batch.to(self._device)
        for name in self.metric_names:
            self.values[name].append(float(BATCH_METRICS[name](batch)))
        if self.robust:
            for name, value in robust_metrics(batch, first).items():
                self.values[name].append(value)

    def _keep_smallest(self) -> None:
        """Keep the pool's rows of the ``pool_size`` smallest keys, in key order: the first rows of the shuffled
        stream so far."""
        pool = torch.cat(self._buffer) if self._buffer else torch.empty(0, self.dim)
        first = torch.cat(self._first) if self._first else torch.empty(0, dtype=torch.bool)
        keys = np.concatenate(self._keys) if self._keys else np.empty(0)
        order = np.argsort(keys, kind="stable")[: self.pool_size]
        picked = torch.from_numpy(order)
        self._buffer, self._first, self._keys = [pool[picked]], [first[picked]], [keys[order]]
        self._buffered = len(order)

    def _measure_pool(self) -> None:
        if self._pooled:
            return
        self._keep_smallest()
        pool, first = self._buffer[0], self._first[0]
        for k in range(pool.shape[0] // self.batch_size):
            cut = slice(k * self.batch_size, (k + 1) * self.batch_size)
            self._measure(pool[cut], first[cut])
        self._buffer, self._first, self._keys, self._buffered, self._pooled = [], [], [], 0, True

    def update(self, batch, mask=None, first=None) -> "BatchedLayer":
        """Add the rows of ``batch`` kept by ``mask``; ``first`` (one bool per row, or None: none is) marks the rows
        at their sequence's first position."""
        rows = torch.as_tensor(batch).detach()
        rows = rows.reshape(-1, rows.shape[-1])
        if rows.shape[1] != self.dim:
            raise ValueError(f"BatchedLayer(dim={self.dim}) got rows of dimension {rows.shape[1]}")
        if device_for(rows) is not None:
            self._device = rows.device
        flags = (torch.zeros(rows.shape[0], dtype=torch.bool) if first is None
                 else torch.as_tensor(first).reshape(-1).to(device="cpu", dtype=torch.bool))
        if mask is not None:
            keep = torch.as_tensor(mask).reshape(-1) != 0
            rows, flags = rows[keep.to(rows.device)], flags[keep.cpu()]
        rows = rows.to(device="cpu", dtype=torch.float32)
        # max |x| is NaN or inf for a row with a NaN or inf, and 0 for a zero row: one pass
        top = torch.linalg.vector_norm(rows, ord=float("inf"), dim=1)
        valid = torch.isfinite(top) & (top > 0)
        self._n_excluded += rows.shape[0] - int(valid.sum())
        rows, flags = rows[valid], flags[valid]  # a copy the pool owns, whatever the caller does with its tensor
        self._n += rows.shape[0]
        if self.full or not rows.shape[0]:
            return self
        self._buffer.append(rows)
        self._first.append(flags)
        self._buffered += rows.shape[0]
        if self.shuffle_seed is not None:
            self._keys.append(self._rng.random(rows.shape[0]))
            if self._buffered >= POOL_TRIM_AT * self.pool_size:  # memory: drop rows that can no longer be drawn
                self._keep_smallest()
            return self
        while self._buffered >= self.batch_size and not self.full:
            stacked, flags = torch.cat(self._buffer), torch.cat(self._first)
            batch, rest = stacked[: self.batch_size], stacked[self.batch_size:]
            self._measure(batch, flags[: self.batch_size])
            self._buffer, self._buffered = ([rest] if rest.shape[0] else []), rest.shape[0]
            self._first = [flags[self.batch_size:]] if rest.shape[0] else []
        if self.full:
            self._buffer, self._first, self._buffered = [], [], 0
        return self

    def rows(self) -> list[dict]:
        """One dict per completed batch: ``batch`` (0-based), ``n_vectors`` and every metric."""
        return [{"batch": i, "n_vectors": self.batch_size, **{m: values[i] for m, values in self.values.items()}}
                for i in range(self.batches_done)]


def measure_pools(layers: Iterable[BatchedLayer]) -> None:
    """Measure the shuffled pools of ``layers`` whose stream has ended (what asking ``batches_done`` of each would do,
    with the same numbers): on the CPU, layers at a time (``rows.threads_each``; memory: each layer being measured
    holds one more copy of its batch); on a GPU, one after another."""
    pending = [layer for layer in layers if layer.shuffle_seed is not None and not layer._pooled]
    threads_each(BatchedLayer._measure_pool, pending, parallel=all(layer._device is None for layer in pending))
