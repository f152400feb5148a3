"""Streaming accumulators: one layer's statistics from a stream of batches of row vectors, in memory that does not grow
with the number of rows, behind one interface (``Accumulator``): fed with ``update``, read with ``rows()``.

- ``LayerStats``: every statistic of ``measure.statistics`` (mean cosine, drift, mean norm, sigma_1 share) and TwoNN
  (``measure.twonn``) on a uniform reservoir sample; O(d^2) memory.
- ``FirstMoments``: Paper 1's first moments (mean cosine, drift, mean norm) and the mean cosine's bootstrap interval
  over examples; O(d) memory plus one d-vector per example, for layers too wide for a d x d scatter.
- ``measure.batches.BatchedLayer``: Paper 2's batches of 4096 vectors, each measured whole.
- ``Tee``: several accumulators fed the same batches.

``measure.taps.extract`` makes one accumulator per layer and feeds it every batch of that layer's hidden states.
Rows fed on a GPU (or inside ``measure.rows.on_device``) are reduced there (the device path, ``measure.rows``).

Waiting for the device: the float64 sums stay where the rows are and come back only when read. What still waits, per
update, is what decides a shape or must be on the host: the number of valid rows (``measure.rows.scan``'s one count
per chunk for ``LayerStats``; ``FirstMoments``' selection of the valid rows), a ``FirstMoments`` update's per-example
sums (copied to host memory, where they wait for the bootstrap), and ``BatchedLayer``'s rows, whose pool lives in host
memory by design. Keeping invalid rows as zeros instead would change the shapes of the float32 reductions, hence
their rounding; ``LayerStats``' reservoir keys are drawn on the host so that every device keeps the same rows.
"""

from __future__ import annotations

import abc

import numpy as np
import torch

from anisotropy.measure.baseline import support_null_cosine
from anisotropy.measure.rows import MOMENT_CHUNK_ROWS, as_rows, device_for, scan, too_few
from anisotropy.measure.statistics import (BOOTSTRAP, batch_moments, chan_merge, grouped_bootstrap_mean_cosine,
                                           mean_cosine_from_sums, sigma1_share_from_scatter)
from anisotropy.measure.twonn import TwoNNEstimate, twonn_estimate


class Accumulator(abc.ABC):
    """One layer's statistics of a stream of row vectors: fed batches of rows with ``update``, read at any time.

    ``update(batch, mask=None)`` adds the rows of ``batch`` ((n, d), or (..., d) read as rows) that ``mask`` keeps
    (nonzero = keep, shaped like the rows; None: all) and returns the accumulator. Rows that are zero, NaN or inf are
    dropped and counted in ``n_excluded``; masked-out rows are neither kept nor counted; ``n`` counts the valid rows.
    Where an accumulator needs more than the rows, a flag says so and ``measure.taps.extract`` passes it:
    ``wants_groups``, ``groups=`` (the example each row comes from); ``wants_first``, ``first=`` (the rows at their
    sequence's first position). ``rows()`` reads the result as rows of a tidy frame (dicts).
    """

    dim: int  # the rows' dimension d
    wants_groups: bool = False
    wants_first: bool = False
    _n: int = 0  # the counts, which ``update`` keeps
    _n_excluded: int = 0

    @abc.abstractmethod
    def update(self, batch, mask=None) -> "Accumulator":
        """Add the rows of ``batch`` that ``mask`` keeps; returns self."""

    @property
    def n(self) -> int:
        """Valid rows seen."""
        return self._n

    @property
    def n_excluded(self) -> int:
        """Zero, NaN or inf rows dropped (masked-out rows are not counted)."""
        return self._n_excluded

    @abc.abstractmethod
    def rows(self) -> list[dict]:
        """The result as rows of a tidy frame: one per layer, or one per batch for an accumulator that measures
        batches."""


# ---------------------------------------------------------------------------------------------------------------------
# Every statistic: LayerStats
# ---------------------------------------------------------------------------------------------------------------------


class LayerStats(Accumulator):
    """Streaming statistics of one layer's vectors: feed batches with ``update``, read the metrics at any time.

    Holds n, the float64 sums of unit vectors and of norms, the running mean and the centred d x d scatter matrix
    (Chan's update; per-batch products in float32 for narrow inputs, float64 for float64 ones, as in sigma1_share),
    and a uniform sample without replacement of at most ``reservoir_size`` rows (bottom-k of seeded uniform keys,
    stored in float32) for TwoNN, pair sampling and projections. Memory: O(d^2 + reservoir_size * d),
    independent of n. ``merge`` combines two accumulators exactly (give each worker its own seed so that their
    reservoir keys are independent). Fed rows on a GPU (or inside ``on_device``), the accumulators and the reservoir
    move to that device and stay there (the device path: 8 d^2 + 4 reservoir_size d bytes of its memory per layer).
    """

    def __init__(self, dim: int, reservoir_size: int = 2048, seed: int = 0):
        if dim < 1 or reservoir_size < 0:
            raise ValueError(f"LayerStats needs dim >= 1 and reservoir_size >= 0, got {dim} and {reservoir_size}")
        self.dim = int(dim)
        self.reservoir_size = int(reservoir_size)
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._n = 0
        self._n_excluded = 0
        self._sum_unit = torch.zeros(dim, dtype=torch.float64)
        self._sum_norm = torch.zeros((), dtype=torch.float64)
        self._mean = torch.zeros(dim, dtype=torch.float64)
        self._scatter = torch.zeros(dim, dim, dtype=torch.float64)
        self._keys = np.empty(0)
        self._rows = torch.empty(0, dim, dtype=torch.float32)
        self._twonn: dict[float, TwoNNEstimate] = {}
        self._device: torch.device | None = None  # the device path's device, None on the CPU path

    def _place(self, device: torch.device | None) -> None:
        """Move the accumulators to ``device`` (None: the CPU) if they are not there."""
        if device == self._device:
            return
        where = device or torch.device("cpu")
        self._sum_unit, self._mean = self._sum_unit.to(where), self._mean.to(where)
        self._sum_norm = self._sum_norm.to(where)
        self._scatter, self._rows = self._scatter.to(where), self._rows.to(where)
        self._device = device

    def __repr__(self) -> str:
        return f"LayerStats(dim={self.dim}, n={self._n}, n_excluded={self._n_excluded}, sample={len(self._keys)})"

    def update(self, batch, mask=None) -> "LayerStats":
        """Add the valid rows of ``batch`` ((n, d) or (..., d); ``mask`` selects rows to keep). Returns self."""
        t, keep = as_rows(batch, mask)
        if t.shape[1] != self.dim:
            raise ValueError(f"LayerStats(dim={self.dim}) got rows of dimension {t.shape[1]}")
        dev = device_for(t)
        if dev is not None or self._n == 0:  # once on the device path, CPU batches join it there
            self._place(dev)
        for ch in scan(t, keep, chunk_rows=MOMENT_CHUNK_ROWS, device=self._device):
            self._n_excluded += ch.n_excluded
            c = ch.rows
            m = c.shape[0]
            if not m:
                continue
            self._sum_unit += (ch.norms.reciprocal() @ c).double()
            self._sum_norm += ch.norms.double().sum()  # a float64 addition where the rows are: no wait per chunk
            bm, bs = batch_moments(c)
            self._n, self._mean, self._scatter = chan_merge(self._n, self._mean, self._scatter, m, bm, bs)
            self._offer(self._rng.random(m), c)
        self._twonn.clear()
        return self

    def _offer(self, keys: np.ndarray, rows: torch.Tensor) -> None:
        """Keep the rows with the smallest keys: a uniform sample without replacement of everything offered."""
        if self.reservoir_size == 0:
            return
        if self._keys.size >= self.reservoir_size:
            # Once full, only rows with a key below the largest kept key can enter (about k b / n of a batch of b).
            enter = keys < self._keys.max()
            if not enter.any():
                return
            keys, rows = keys[enter], rows.index_select(0, torch.from_numpy(np.flatnonzero(enter)).to(rows.device))
        keys = np.concatenate([self._keys, keys])
        rows = torch.cat([self._rows, rows.to(device=self._rows.device, dtype=torch.float32)])
        if keys.size > self.reservoir_size:
            sel = np.argpartition(keys, self.reservoir_size - 1)[: self.reservoir_size]
            sel.sort()
            keys, rows = keys[sel], rows[torch.from_numpy(sel).to(rows.device)]
        self._keys, self._rows = keys, rows

    def merge(self, other: "LayerStats") -> "LayerStats":
        """Fold ``other`` into this accumulator (as if its batches had been fed here). Returns self."""
        if other.dim != self.dim:
            raise ValueError(f"cannot merge LayerStats of dimension {other.dim} into one of dimension {self.dim}")
        if other._device is not None and self._device is None:
            self._place(other._device)
        where = self._mean.device
        self._n, self._mean, self._scatter = chan_merge(
            self._n, self._mean, self._scatter, other._n, other._mean.to(where), other._scatter.to(where))
        self._n_excluded += other._n_excluded
        self._sum_unit += other._sum_unit.to(where)
        self._sum_norm += other._sum_norm.to(where)
        self._offer(other._keys.copy(), other._rows.clone())
        self._twonn.clear()
        return self

    @property
    def mean(self) -> np.ndarray:
        """Mean vector (float64)."""
        return self._mean.cpu().numpy().copy()

    @property
    def covariance(self) -> np.ndarray:
        """Sample covariance matrix, centred scatter / (n - 1) (float64, d x d)."""
        if self._n < 2:
            raise too_few("LayerStats.covariance", self._n, 2, self._n_excluded)
        return (self._scatter / (self._n - 1)).cpu().numpy().copy()

    @property
    def mean_cosine(self) -> float:
        """Exact mean cosine over ordered pairs i != j, (||sum u_i||^2 - n) / (n (n - 1)), from float64 sums."""
        if self._n < 2:
            raise too_few("mean_cosine", self._n, 2, self._n_excluded)
        return mean_cosine_from_sums(self._sum_unit.cpu().numpy(), self._n)

    @property
    def drift_norm(self) -> float:
        """||mean||_2."""
        if self._n < 1:
            raise too_few("drift_norm", self._n, 1, self._n_excluded)
        return float(torch.linalg.vector_norm(self._mean))

    @property
    def mean_norm(self) -> float:
        """Mean row norm."""
        if self._n < 1:
            raise too_few("mean_norm", self._n, 1, self._n_excluded)
        return float(self._sum_norm) / self._n

    @property
    def sigma1_share(self) -> float:
        """sigma_1^2 / sum sigma_i^2 of the centred rows, from the float64 scatter matrix."""
        if self._n < 2:
            raise too_few("sigma1_share", self._n, 2, self._n_excluded)
        return sigma1_share_from_scatter(self._scatter)

    @property
    def sample(self) -> np.ndarray:
        """The reservoir: a uniform sample without replacement of min(n, reservoir_size) rows, float32, (k, d)."""
        return self._rows.cpu().numpy().copy()

    def twonn_estimate(self, discard_fraction: float = 0.1) -> TwoNNEstimate:
        """TwoNN on the reservoir sample (cached until the next update)."""
        if discard_fraction not in self._twonn:
            self._twonn[discard_fraction] = twonn_estimate(self._rows, discard_fraction)
        return self._twonn[discard_fraction]

    def twonn_dimension(self, discard_fraction: float = 0.1) -> float:
        """TwoNN intrinsic dimension of the reservoir sample."""
        return self.twonn_estimate(discard_fraction).dimension

    def as_dict(self) -> dict:
        """A flat results row: counts and every metric (NaN where too few rows make it undefined)."""
        row: dict = {"n": self._n, "n_excluded": self._n_excluded, "n_sample": int(self._keys.size)}
        for name in ("mean_cosine", "drift_norm", "mean_norm", "sigma1_share"):
            try:
                row[name] = getattr(self, name)
            except ValueError:
                row[name] = float("nan")
        try:
            est = self.twonn_estimate()
            row["twonn_dimension"], row["twonn_n_duplicates"] = est.dimension, est.n_duplicates
        except ValueError:
            row["twonn_dimension"], row["twonn_n_duplicates"] = float("nan"), 0
        return row

    def rows(self) -> list[dict]:
        """``[as_dict()]``: the layer's one row."""
        return [self.as_dict()]


# ---------------------------------------------------------------------------------------------------------------------
# First moments only, O(d): FirstMoments
# ---------------------------------------------------------------------------------------------------------------------


class FirstMoments(Accumulator):
    """Streaming n, sum of unit vectors, sum of vectors and sum of norms, in float64: ``mean_cosine`` =
    (||sum_i u_i||^2 - n) / (n (n - 1)) over ordered pairs i != j, ``drift_norm`` = ||mean||, ``mean_norm``.

    Memory O(d), for layers such as CNN maps flattened to C*H*W where ``LayerStats``' d x d scatter cannot be held,
    plus one sum of unit vectors per example (text, clip, image) when ``update`` is told which example each row comes
    from (``groups``; ``measure.taps.extract`` does): those give the mean cosine's confidence interval by resampling
    examples (``measure.statistics.grouped_bootstrap_mean_cosine``; ``BOOTSTRAP``), columns ``mean_cosine_low`` /
    ``_high``. Zero, NaN and inf rows are excluded and counted, as in ``measure.statistics``. ``sigma1_share`` and TwoNN
    are not available. Beside them: ``nonnegative`` (every coordinate seen is >= 0, as after a ReLU) and
    ``null_support``, the mean cosine of vectors drawn with the layer's own pooled distribution of values
    (``measure.baseline.support_null_cosine``), the isotropic reference a non-negative layer is read against.
    """

    wants_groups = True  # taps.extract passes each row's example index

    def __init__(self, dim: int, seed: int = 0):
        self.dim = int(dim)
        self.seed = int(seed)
        self._n = 0
        self._n_excluded = 0
        # The float64 sums live where the rows come from (a GPU's stay there until read: no copy to the host per
        # batch); a float64 addition gives the same bits on any device.
        self._sum_unit = torch.zeros(self.dim, dtype=torch.float64)
        self._sum = torch.zeros(self.dim, dtype=torch.float64)
        self._sum_norm = torch.zeros((), dtype=torch.float64)
        self._sum_squares = torch.zeros((), dtype=torch.float64)  # sum of squared norms, for the support-fitting null
        # smallest coordinate seen: non-negative outputs (post-ReLU) need their own null
        self._min = torch.full((), float("inf"), dtype=torch.float64)
        # Per example, in host memory: the float32 sums of its unit vectors and its count, kept as each update gave
        # them (example ids, sums, counts) and merged when read (``_examples``).
        self._pieces: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._ungrouped = False

    def _place(self, device: torch.device) -> None:
        """Move the running sums to ``device`` if they are not there."""
        if self._sum.device != device:
            self._sum_unit, self._sum = self._sum_unit.to(device), self._sum.to(device)
            self._sum_norm, self._sum_squares = self._sum_norm.to(device), self._sum_squares.to(device)
            self._min = self._min.to(device)

    def update(self, batch, mask=None, groups=None) -> "FirstMoments":
        rows = torch.as_tensor(batch).detach().reshape(-1, self.dim)
        # On the device path (a GPU, or inside ``measure.rows.on_device``) the batch is reduced where it lies, in
        # float32 (a batch's sums lose nothing that matters), and the float64 sums across batches stay there; on the
        # CPU path everything is float64.
        dev = device_for(rows)
        rows = rows.to(device="cpu", dtype=torch.float64) if dev is None else rows.to(device=dev, dtype=torch.float32)
        if groups is not None:
            groups = torch.as_tensor(groups).reshape(-1).to(rows.device)
        else:
            self._ungrouped = True
        if mask is not None:
            keep = torch.as_tensor(mask).reshape(-1).to(device=rows.device).bool()
            rows = rows[keep]
            groups = groups[keep] if groups is not None else None
        self._place(rows.device)
        norms = torch.linalg.vector_norm(rows, dim=1)
        valid = torch.isfinite(norms) & (norms > 0)
        offered = rows.shape[0]
        # Keeping only the valid rows (as the kept ones above) needs their number on the host, a wait for the device,
        # as the per-example sums' copy below does; zeroing the invalid rows instead would change the shapes of the
        # float32 reductions, hence their rounding.
        rows, norms = rows[valid], norms[valid]
        self._n_excluded += offered - rows.shape[0]
        self._n += rows.shape[0]
        unit = rows / norms[:, None]
        self._sum_unit += unit.sum(dim=0).double()
        self._sum += rows.sum(dim=0).double()
        self._sum_norm += norms.double().sum()
        self._sum_squares += (norms.double() ** 2).sum()
        if rows.shape[0]:
            self._min = torch.minimum(self._min, rows.min().double())
        if groups is not None and rows.shape[0]:
            ids, where = torch.unique(groups[valid], return_inverse=True)
            sums = torch.zeros(len(ids), self.dim, dtype=unit.dtype, device=unit.device).index_add_(0, where, unit)
            sizes = torch.bincount(where, minlength=len(ids))
            ids_sizes = torch.stack([ids.long(), sizes]).cpu()
            self._pieces.append((ids_sizes[0], sums.to("cpu", torch.float32), ids_sizes[1]))
        return self

    def _examples(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(sums, counts): per example seen, in the order of the example ids, the float32 sum of its unit vectors
        (examples x d) and its number of valid rows."""
        if not self._pieces:
            return torch.empty(0, self.dim, dtype=torch.float32), torch.empty(0, dtype=torch.long)
        ids = torch.cat([p[0] for p in self._pieces])
        sums = torch.cat([p[1] for p in self._pieces])
        sizes = torch.cat([p[2] for p in self._pieces])
        if bool((ids[1:] <= ids[:-1]).any()):  # an example in several updates, or the examples out of order
            # in id order, each example's pieces added in the order they came (float32 on the CPU, one at a time)
            ids, where = torch.unique(ids, return_inverse=True)
            sums = torch.zeros(len(ids), self.dim, dtype=torch.float32).index_add_(0, where, sums)
            sizes = torch.zeros(len(ids), dtype=torch.long).index_add_(0, where, sizes)
        return sums, sizes

    def interval(self, examples: tuple[torch.Tensor, torch.Tensor] | None = None):
        """The mean cosine's ``measure.statistics.ConfidenceInterval`` from resampling examples, or None (rows fed
        without their examples, or fewer than 2 examples). ``examples``: ``_examples()`` if already at hand."""
        sums, sizes = examples if examples is not None else self._examples()
        if self._ungrouped or len(sizes) < 2 or self.n < 2:
            return None
        sums = sums.double()
        return grouped_bootstrap_mean_cosine((sums @ sums.T).numpy(), sizes.tolist(), seed=self.seed, **BOOTSTRAP)

    @property
    def mean_cosine(self) -> float:
        if self.n < 2:
            raise ValueError(f"mean_cosine needs at least 2 valid rows, got {self.n}")
        return mean_cosine_from_sums(self._sum_unit.cpu().numpy(), self.n)

    @property
    def drift_norm(self) -> float:
        if self.n < 1:
            raise ValueError("drift_norm needs at least 1 valid row")
        return float(torch.linalg.vector_norm(self._sum.cpu() / self.n))

    @property
    def mean_norm(self) -> float:
        if self.n < 1:
            raise ValueError("mean_norm needs at least 1 valid row")
        return float(self._sum_norm) / self.n

    def as_dict(self) -> dict:
        row: dict = {"n": self.n, "n_excluded": self.n_excluded, "n_sample": 0}
        for name in ("mean_cosine", "drift_norm", "mean_norm"):
            try:
                row[name] = getattr(self, name)
            except ValueError:
                row[name] = float("nan")
        row.update(sigma1_share=float("nan"), twonn_dimension=float("nan"), twonn_n_duplicates=0)
        examples = self._examples()
        ci = self.interval(examples)
        row.update(mean_cosine_low=ci.low if ci else float("nan"), mean_cosine_high=ci.high if ci else float("nan"),
                   n_examples=len(examples[1]), nonnegative=bool(self.n and float(self._min) >= 0),
                   null_support=support_null_cosine(float(self._sum.cpu().sum()), float(self._sum_squares), self.n,
                                                    self.dim))
        return row

    def rows(self) -> list[dict]:
        """``[as_dict()]``: the layer's one row."""
        return [self.as_dict()]


# ---------------------------------------------------------------------------------------------------------------------
# Several at once: Tee
# ---------------------------------------------------------------------------------------------------------------------


class Tee(Accumulator):
    """One layer's accumulator that feeds several
    (``measure.taps.extract(..., stats_factory=lambda dim: Tee(a(dim), b(dim)))``),
    so one forward pass serves measures that would otherwise each read the text again. Each member gets exactly the
    keywords it would get alone: ``groups`` only if it ``wants_groups``, ``first`` only if it ``wants_first``.
    ``n`` and ``n_excluded`` (which ``extract`` checks for empty layers) are the first member's."""

    def __init__(self, *members):
        if not members:
            raise ValueError("Tee needs at least one accumulator")
        self.members = tuple(members)
        self.dim = members[0].dim
        self.wants_groups = any(m.wants_groups for m in members)
        self.wants_first = any(m.wants_first for m in members)

    @property
    def n(self) -> int:
        return self.members[0].n

    @property
    def n_excluded(self) -> int:
        return self.members[0].n_excluded

    def update(self, batch, mask=None, groups=None, first=None) -> "Tee":
        for member in self.members:
            extra = {}
            if groups is not None and member.wants_groups:
                extra["groups"] = groups
            if first is not None and member.wants_first:
                extra["first"] = first
            if mask is None:  # as ``measure.taps`` calls an accumulator alone: no mask keyword where every row counts
                member.update(batch, **extra)
            else:
                member.update(batch, mask=mask, **extra)
        return self

    def rows(self) -> list[dict]:
        """Every member's rows, one member after the other (``members[i].rows()`` reads one)."""
        return [row for member in self.members for row in member.rows()]
