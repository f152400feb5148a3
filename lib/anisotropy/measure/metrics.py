"""Statistics of a set of row vectors (hidden states of one layer): the measurements both papers rest on.

Every function takes an (n, d) numpy array or torch tensor (any float dtype, bf16/fp16 included, any device; an
(..., d) array is read as rows) and an optional ``mask`` of rows to keep (bool, or integer with nonzero = keep, shaped
like the rows, e.g. an attention mask of shape (batch, seq)). Rows that are zero, NaN or inf are excluded and counted;
a metric asked of too few rows raises ``ValueError`` saying what was given and what is needed. Sums across chunks and
batches are accumulated in float64; heavy products run in float32 chunks where that loses nothing that matters
(each function says what it does). ``LayerStats`` computes the same quantities from a stream of batches in memory that
does not grow with the number of rows.

Paper 1 (Godey et al. 2024) measures the mean cosine similarity between pairs of vectors and the drift ||mean||;
Paper 2 measures sigma_1^2 / sum_i sigma_i^2 of the centred matrix and the TwoNN intrinsic dimension
(Facco et al. 2017).

Device path. Rows on a non-CPU device (a CUDA GPU, where the model is) are measured there with torch, never copied
to the CPU: first moments (float32 products, float64 sums), the float64 scatter with Chan's update and its top
eigenvalue (``torch.linalg.eigvalsh`` in float64: ~4/3 d^3 flops, CUDA runs float64 at a fraction of float32 speed
but the CPU would take hours on 2 vCPUs), TwoNN (float32 Gram blocks, top-k, float64 re-measure and certificate, all
torch; only the n ratios go to the CPU for the fit) and ``LayerStats`` (its accumulators and reservoir move to the
rows' device). ``with on_device(torch.device("cpu")):`` forces the device path, same ops and dtypes, on any rows (the
tests run it without a GPU). Devices without float64 (Apple MPS) take the CPU path. The CPU path is the reference;
the device path agrees with it within ``DEVICE_*`` below (derived from the precision of each step).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import scipy.linalg
import torch
from scipy import stats

__all__ = [
    "BatchedResult",
    "ConfidenceInterval",
    "Correlation",
    "LayerStats",
    "PairEstimate",
    "TwoNNEstimate",
    "batched",
    "device_for",
    "on_device",
    "bootstrap_mean_cosine",
    "grouped_bootstrap_mean_cosine",
    "drift_norm",
    "layer_correlation",
    "min_significant_layers",
    "mean_cosine",
    "mean_norm",
    "sampled_pair_cosine",
    "sigma1_share",
    "twonn_dimension",
    "twonn_estimate",
]

# Rows per chunk are chosen so that one chunk is about this many bytes: small enough to stay in cache between the norm
# pass and the matrix-vector product, large enough to amortise the per-call overhead.
_CHUNK_BYTES = 4 << 20
# Rows per chunk for second moments: the d x d product per chunk is then large enough to run near BLAS speed, and the
# float32 product's rounding (~sqrt(rows) 2^-24 relative) stays below 1e-5.
_MOMENT_CHUNK_ROWS = 4096
# Gram blocks of TwoNN are at most this many float32 entries (128 MiB), whatever n is.
_GRAM_BLOCK_ENTRIES = 32 << 20
# TwoNN needs two neighbours per point and a few ratios to fit; below this many distinct rows it refuses.
TWONN_MIN_ROWS = 5
# Nearest-neighbour candidates per point taken from the float32 Gram matrix and re-measured exactly in float64 (one
# more is looked up to certify them).
_TWONN_CANDIDATES = 3

# How far the device path may be from the CPU reference (tests/test_metrics_device.py holds it to these). Both paths
# round the same float32 reductions in different orders (CUDA kernels vs CPU BLAS); a reduction of m terms is within
# lambda sqrt(m) u32 of exact arithmetic relative to the sum of the terms' magnitudes (Higham & Mary 2019's
# probabilistic bound; lambda = 8 as in TwoNN's certificate), so the two paths are within twice that of each other.
# m <= 2^15 for every reduction here when 32 <= d <= 2^15 (rows per chunk <= max(256, 2^20 / d), a norm has d terms).
_U32 = float(torch.finfo(torch.float32).eps) / 2  # unit roundoff 2^-24
_U64 = float(torch.finfo(torch.float64).eps) / 2  # 2^-53
_LAMBDA = 8
_MAX_TERMS = 1 << 15
# mean cosine (absolute): d(||S||^2) / (n(n-1)) <= 2 ||S|| ||dS|| / (n(n-1)) with ||S|| <= n and ||dS|| <= n lambda
# sqrt(m) u32 from each of two sources (the norms, the chunk sums): 2 paths x 2 x 2 lambda sqrt(m) u32 x n/(n-1)
# (<= 1.01 for n > 100) ~ 7e-4.
DEVICE_MEAN_COSINE_ABS = 8 * _LAMBDA * math.sqrt(_MAX_TERMS) * _U32 * 1.01
# mean_norm (relative) and drift_norm (absolute, in units of the mean norm: the sum's error is relative to sum |x_i|,
# not to |sum x_i|): one float32 reduction per value, 2 paths.
DEVICE_NORM_REL = 2 * _LAMBDA * math.sqrt(_MAX_TERMS) * _U32
# sigma1 share (absolute): each chunk's scatter entry is within lambda sqrt(b) u32 sqrt(S_ii S_jj) (b <= 4096 rows),
# plus 2 u32 for the rounded centring, so ||dS||_2 <= (lambda sqrt(b) + 2) u32 trace (the entrywise bound is the
# nonnegative rank-one matrix sqrt(diag S) sqrt(diag S)^T, of norm trace S); Weyl moves sigma_1^2 and the trace by that,
# the share by twice it; 2 paths: 4 (lambda sqrt(b) + 2) u32 ~ 1.2e-4. float64 eigensolvers add ~d u64, negligible.
DEVICE_SIGMA1_SHARE_ABS = 4 * (_LAMBDA * math.sqrt(_MOMENT_CHUNK_ROWS) + 2) * _U32
# TwoNN (relative, per squared distance): both paths certify the same two nearest rows, then sum d exact float64
# squares of differences in different orders: gamma_(d+3) = (d + 3) u64 each (nonnegative terms; float64 rows add a
# rounded difference), 2 paths. The dimension follows by first-order propagation through the fit
# (tests/test_metrics_device.py evaluates that propagation on the data).
DEVICE_TWONN_SQ_REL = 2 * (_MAX_TERMS + 3) * _U64


# ---------------------------------------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------------------------------------

_FORCED_DEVICE: contextvars.ContextVar[torch.device | None] = contextvars.ContextVar("metrics_device", default=None)


@contextlib.contextmanager
def on_device(device):
    """Inside the block every metric takes the device path with torch on ``device``, wherever the rows are
    (``torch.device("cpu")``: the device code, same ops and dtypes as on CUDA, on a machine without a GPU)."""
    token = _FORCED_DEVICE.set(torch.device(device))
    try:
        yield
    finally:
        _FORCED_DEVICE.reset(token)


def device_for(t: torch.Tensor) -> torch.device | None:
    """The device the metrics of rows ``t`` run on (the device path), or None for the CPU reference path."""
    forced = _FORCED_DEVICE.get()
    if forced is not None:
        return forced
    # MPS has no float64, which the sums and the scatter need: such rows take the CPU path.
    return t.device if t.device.type not in ("cpu", "mps") else None



def _as_rows(x, mask=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(rows, keep): an (n, d) tensor view of ``x`` (no copy where possible) and a CPU bool mask or None."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        a = np.asarray(x)
        if a.dtype == object or np.iscomplexobj(a):
            raise ValueError(f"expected real-valued row vectors, got an array of dtype {a.dtype}")
        if a.dtype.kind not in "fiub":
            raise ValueError(f"expected a numeric array, got dtype {a.dtype}")
        if any(s < 0 for s in a.strides):
            a = np.ascontiguousarray(a)
        with warnings.catch_warnings():
            # Read-only arrays (e.g. memory maps) are fine: nothing here writes into the input.
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(a)
    if t.is_complex():
        raise ValueError(f"expected real-valued row vectors, got a tensor of dtype {t.dtype}")
    if t.ndim < 2:
        raise ValueError(f"expected an (n, d) array of row vectors, got shape {tuple(t.shape)}")
    lead = tuple(t.shape[:-1])
    t = t.reshape(-1, t.shape[-1])
    keep = None
    if mask is not None:
        m = mask.detach().cpu() if isinstance(mask, torch.Tensor) else torch.from_numpy(np.asarray(mask))
        if tuple(m.shape) not in (lead, (t.shape[0],)):
            raise ValueError(f"mask of shape {tuple(m.shape)} does not match the rows of x (shape {lead})")
        if m.dtype.is_floating_point or m.is_complex():
            raise ValueError(f"mask must be boolean or integer (nonzero = keep), got dtype {m.dtype}")
        keep = m.reshape(-1) != 0
    return t, keep


@contextlib.contextmanager
def _one_thread():
    """Run a memory-bound pass on one torch thread (and restore the setting after).

    Norms and matrix-vector products over chunks are limited by memory bandwidth, which one core nearly saturates;
    on a CPU shared with other jobs a second thread mostly waits at barriers (measured: 10x slower under load).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    # float64 input stays float64; every narrower float is widened to float32, which holds bf16/fp16 exactly.
    if t.dtype == torch.float64 or not t.dtype.is_floating_point:
        return torch.float64
    return torch.float32


@dataclass
class _Chunk:
    rows: torch.Tensor  # valid rows of the chunk, CPU (or the device path's device), float32 or float64
    norms: torch.Tensor  # their Euclidean norms, same dtype
    index: np.ndarray  # their row numbers in the flattened input
    n_excluded: int  # zero / NaN / inf rows dropped from this chunk (masked-out rows are not counted)


def _scan(t: torch.Tensor, keep: torch.Tensor | None, dtype: torch.dtype | None = None,
          chunk_rows: int | None = None, device: torch.device | None = None) -> Iterator[_Chunk]:
    """Walk the rows in chunks, keeping rows that are in the mask, finite and nonzero; chunks are on ``device``
    (the device path) or the CPU."""
    dtype = dtype or _work_dtype(t)
    n, d = t.shape
    step = chunk_rows or max(256, _CHUNK_BYTES // (4 * max(d, 1)))
    for start in range(0, n, step):
        c = t[start:start + step]
        idx = np.arange(start, start + c.shape[0])
        if keep is not None:
            k = keep[start:start + step]
            if not bool(k.all()):
                c = c[k.to(c.device)]
                idx = idx[k.numpy()]
        c = c.to(device=device or "cpu", dtype=dtype)
        norms = torch.linalg.vector_norm(c, dim=1)
        ok = torch.isfinite(norms) & (norms > 0)
        if not bool(ok.all()):
            # A finite row whose float32 squared norm overflows is still a valid vector: re-measure it in float64.
            redo = (~ok) & torch.isfinite(c).all(dim=1)
            if bool(redo.any()):
                big = torch.linalg.vector_norm(c[redo].double(), dim=1)
                norms = norms.clone()
                norms[redo] = big.to(dtype)
                ok = torch.isfinite(norms) & (norms > 0)
        n_bad = int((~ok).sum())
        if n_bad:
            c, norms, idx = c[ok], norms[ok], idx[ok.cpu().numpy()]
        yield _Chunk(c, norms, idx, n_bad)


def _too_few(name: str, have: int, need: int, n_excluded: int, what: str = "valid rows") -> ValueError:
    if need == 1 and what.endswith("rows"):
        what = what[:-1]
    return ValueError(
        f"{name} needs at least {need} {what}, got {have}"
        f" ({n_excluded} zero/NaN/inf rows excluded; masked-out rows are not counted)"
    )


def _valid_rows(x, mask, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, int]:
    """All valid rows in one tensor (on the CPU, or the device path's device), and the number of excluded rows."""
    t, keep = _as_rows(x, mask)
    dev = device_for(t)
    if keep is None and t.device == (dev or torch.device("cpu")) and t.dtype == (dtype or _work_dtype(t)):
        # Fast path, no copy: one norm pass over the whole matrix, used as is when every row is valid.
        with _one_thread():
            norms = torch.linalg.vector_norm(t, dim=1)
        if bool((torch.isfinite(norms) & (norms > 0)).all()):
            return t, 0
    parts, n_bad = [], 0
    with _one_thread():
        for ch in _scan(t, keep, dtype, device=dev):
            parts.append(ch.rows)
            n_bad += ch.n_excluded
    rows = torch.cat(parts) if parts else torch.empty(0, t.shape[1], dtype=dtype or _work_dtype(t), device=dev)
    return rows, n_bad


# ---------------------------------------------------------------------------------------------------------------------
# First moments: mean cosine, drift, norms
# ---------------------------------------------------------------------------------------------------------------------


def _first_moments(x, mask, unit=False, total=False) -> dict:
    """One pass: n, n_excluded and the float64 sums of norms, and of unit vectors and of vectors if asked."""
    t, keep = _as_rows(x, mask)
    d = t.shape[1]
    dev = device_for(t)
    n, n_bad, s_norm = 0, 0, 0.0
    s_unit = torch.zeros(d, dtype=torch.float64, device=dev) if unit else None
    s_tot = torch.zeros(d, dtype=torch.float64, device=dev) if total else None
    with _one_thread():
        for ch in _scan(t, keep, device=dev):
            n += ch.rows.shape[0]
            n_bad += ch.n_excluded
            if not ch.rows.shape[0]:
                continue
            if unit:
                # sum_i x_i / ||x_i|| as one matrix-vector product in the chunk's precision, accumulated in float64.
                s_unit += (ch.norms.reciprocal() @ ch.rows).double()
            if total:
                s_tot += ch.rows.sum(dim=0).double()
            s_norm += float(ch.norms.double().sum())
    return {"n": n, "n_excluded": n_bad, "sum_unit": s_unit, "sum": s_tot, "sum_norm": s_norm}


def mean_cosine_from_sums(sum_unit: torch.Tensor | np.ndarray, n: int) -> float:
    """Mean cosine over ordered pairs i != j from the sum of the n unit vectors: (||sum u_i||^2 - n) / (n (n - 1))."""
    s = np.asarray(sum_unit.cpu() if isinstance(sum_unit, torch.Tensor) else sum_unit, dtype=np.float64)
    return float((s @ s - n) / (n * (n - 1)))


def mean_cosine(x, mask=None) -> float:
    """Exact mean cosine similarity over all ordered pairs i != j: (||sum_i u_i||^2 - n) / (n (n-1)), u_i = x_i/||x_i||.

    O(n d): one float32 matrix-vector product per chunk (float64 for float64 input), summed across chunks in float64.
    This is the quantity Paper 1 estimates by sampling pairs uniformly. Needs at least 2 valid rows.
    """
    m = _first_moments(x, mask, unit=True)
    if m["n"] < 2:
        raise _too_few("mean_cosine", m["n"], 2, m["n_excluded"])
    return mean_cosine_from_sums(m["sum_unit"], m["n"])


def drift_norm(x, mask=None) -> float:
    """Norm of the mean vector, ||(1/n) sum_i x_i||_2 (Paper 1's drift), in the units of x. Needs 1 valid row."""
    m = _first_moments(x, mask, total=True)
    if m["n"] < 1:
        raise _too_few("drift_norm", m["n"], 1, m["n_excluded"])
    return float(torch.linalg.vector_norm(m["sum"] / m["n"]))


def mean_norm(x, mask=None) -> float:
    """Mean of the row norms, (1/n) sum_i ||x_i||_2, in the units of x. Needs 1 valid row."""
    m = _first_moments(x, mask)
    if m["n"] < 1:
        raise _too_few("mean_norm", m["n"], 1, m["n_excluded"])
    return m["sum_norm"] / m["n"]


class _Iter2:
    """Lets a small result dataclass unpack as its two headline numbers: ``mean, std = batched(...)``."""

    _pair: tuple[str, str]

    def __iter__(self):
        return iter(tuple(getattr(self, f) for f in self._pair))


@dataclass(frozen=True)
class PairEstimate(_Iter2):
    """Mean cosine estimated from ``n_pairs`` uniform pairs (i != j, drawn with replacement) and its standard error."""

    mean: float
    stderr: float
    n_pairs: int
    _pair = ("mean", "stderr")


def sampled_pair_cosine(x, n_pairs: int = 10_000, seed: int = 0, mask=None) -> PairEstimate:
    """Paper 1's estimator: the average cosine of ``n_pairs`` independent uniform pairs (i, j), i != j.

    stderr = sample standard deviation of the pair cosines / sqrt(n_pairs) (pairs are i.i.d., so this is its exact
    standard error). Cosines are computed in float64. Needs at least 2 valid rows and 2 pairs.
    """
    if n_pairs < 2:
        raise ValueError(f"sampled_pair_cosine needs n_pairs >= 2, got {n_pairs}")
    t, keep = _as_rows(x, mask)
    index, norms, n_bad = [], [], 0
    with _one_thread():
        for ch in _scan(t, keep):
            index.append(ch.index)
            norms.append(ch.norms.double())
            n_bad += ch.n_excluded
    index = np.concatenate(index) if index else np.empty(0, dtype=np.int64)
    n = index.size
    if n < 2:
        raise _too_few("sampled_pair_cosine", n, 2, n_bad)
    norms = torch.cat(norms).numpy()
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, size=n_pairs)
    j = rng.integers(0, n - 1, size=n_pairs)
    j += j >= i  # uniform over the n - 1 other rows
    cos = np.empty(n_pairs)
    step = max(256, _CHUNK_BYTES // (8 * t.shape[1]))
    plain = t.device.type == "cpu" and t.dtype in (torch.float16, torch.float32, torch.float64)

    def gather(rows: np.ndarray) -> np.ndarray:
        if plain:  # numpy's gather is much cheaper than torch's advanced indexing for a few thousand rows
            return np.take(t.numpy(), rows, axis=0).astype(np.float64)
        return t[torch.from_numpy(rows)].to(device="cpu", dtype=torch.float64).numpy()

    for s in range(0, n_pairs, step):
        a, b = i[s:s + step], j[s:s + step]
        cos[s:s + step] = np.einsum("ij,ij->i", gather(index[a]), gather(index[b])) / (norms[a] * norms[b])
    return PairEstimate(float(cos.mean()), float(cos.std(ddof=1) / math.sqrt(n_pairs)), int(n_pairs))


# ---------------------------------------------------------------------------------------------------------------------
# Second moments: sigma1 share
# ---------------------------------------------------------------------------------------------------------------------


def _batch_moments(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 mean and centred scatter sum_i (x_i - m)(x_i - m)^T of a batch; the product runs in the batch's dtype.

    float32 batches are centred on the float32-rounded mean a, and m (mean - a)(mean - a)^T is subtracted so that the
    scatter is about the exact mean; the product's relative error is then ~sqrt(b) 2^-24 for b rows (~4e-6 at 4096).
    """
    mean = c.sum(dim=0, dtype=torch.float64) / c.shape[0]
    a = mean.to(c.dtype)
    cc = c - a
    scatter = (cc.T @ cc).double()
    if c.dtype != torch.float64:
        delta = mean - a.double()
        scatter -= c.shape[0] * torch.outer(delta, delta)
    return mean, scatter


def _chan_merge(n_a, mean_a, scat_a, n_b, mean_b, scat_b):
    """Combine (n, mean, centred scatter) of two disjoint sets (Chan, Golub & LeVeque 1979); exact up to rounding."""
    n = n_a + n_b
    if n_a == 0:
        return n_b, mean_b.clone(), scat_b.clone()
    if n_b == 0:
        return n_a, mean_a, scat_a
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    scat = scat_a + scat_b + torch.outer(delta, delta) * (n_a * n_b / n)
    return n, mean, scat


def _sigma1_share_from_scatter(scatter: torch.Tensor | np.ndarray) -> float:
    s = np.asarray(scatter, dtype=np.float64)
    s = (s + s.T) / 2
    total = float(np.trace(s))
    if not total > 0:
        raise ValueError("sigma1_share is undefined: the rows have zero variance (all valid rows are identical)")
    d = s.shape[0]
    top = scipy.linalg.eigh(s, eigvals_only=True, subset_by_index=[d - 1, d - 1])[0]
    return float(top / total)


def _sigma1_share_on_device(scatter: torch.Tensor) -> float:
    """The device path's ``_sigma1_share_from_scatter``: torch.linalg.eigvalsh of the float64 scatter where it is
    (all d eigenvalues, ~4/3 d^3 flops; the top one is within ~d u64 of scipy's, see DEVICE_SIGMA1_SHARE_ABS)."""
    s = (scatter + scatter.T) / 2
    total = float(torch.trace(s))
    if not total > 0:
        raise ValueError("sigma1_share is undefined: the rows have zero variance (all valid rows are identical)")
    return float(torch.linalg.eigvalsh(s)[-1]) / total


def sigma1_share(x, mask=None) -> float:
    """Paper 2's anisotropy: sigma_1^2 / sum_i sigma_i^2 of the centred matrix X - mean, i.e. the top eigenvalue's share
    of the covariance spectrum (dimensionless, in [1/d, 1]).

    The centred d x d scatter matrix of each chunk (a float32 product for narrow inputs, float64 for float64 ones) is
    accumulated in float64 with Chan's pairwise update, so a large mean costs no precision; only its top eigenvalue is
    computed. Needs at least 2 valid, not all identical, rows.
    """
    t, keep = _as_rows(x, mask)
    d = t.shape[1]
    dev = device_for(t)
    n, n_bad = 0, 0
    mean, scat = torch.zeros(d, dtype=torch.float64, device=dev), torch.zeros(d, d, dtype=torch.float64, device=dev)
    for ch in _scan(t, keep, chunk_rows=_MOMENT_CHUNK_ROWS, device=dev):
        n_bad += ch.n_excluded
        if ch.rows.shape[0]:
            bm, bs = _batch_moments(ch.rows)
            n, mean, scat = _chan_merge(n, mean, scat, ch.rows.shape[0], bm, bs)
    if n < 2:
        raise _too_few("sigma1_share", n, 2, n_bad)
    return _sigma1_share_from_scatter(scat) if dev is None else _sigma1_share_on_device(scat)


# ---------------------------------------------------------------------------------------------------------------------
# TwoNN intrinsic dimension
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TwoNNEstimate:
    """TwoNN result: the dimension and how many rows went into it.

    ``n`` distinct valid rows were used; ``n_duplicates`` repeated rows (which would give r1 = 0) were removed first,
    ``n_excluded`` zero/NaN/inf rows before that; ``n_fit`` ratios entered the fit (the largest ``discard_fraction``
    of the mu = r2/r1 were dropped).
    """

    dimension: float
    n: int
    n_duplicates: int
    n_excluded: int
    n_fit: int
    discard_fraction: float

    def __float__(self) -> float:
        return float(self.dimension)


def _unique_rows(rows: np.ndarray) -> np.ndarray:
    """Indices (in original order) of the first occurrence of each distinct row (byte-wise equality)."""
    a = np.ascontiguousarray(rows)
    keys = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)


def _unique_rows_on_device(rows: torch.Tensor) -> torch.Tensor:
    """``_unique_rows`` with torch where the rows are: byte-wise equality through an integer view of the bits."""
    n = rows.shape[0]
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=rows.device)
    bits = rows.view(torch.int32 if rows.element_size() == 4 else torch.int64)
    _, inverse = torch.unique(bits, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), n, dtype=torch.long, device=rows.device)
    first.scatter_reduce_(0, inverse, torch.arange(n, device=rows.device), reduce="amin")
    return torch.sort(first).values


def _two_nearest_sq(rows: torch.Tensor) -> torch.Tensor:
    """Exact float64 squared distances (n, 2) from each row to its first and second nearest other row.

    Candidates come from a float32 Gram matrix of the centred rows, in row blocks of bounded size; the three best
    candidates' distances are then recomputed exactly in float64 from the rows themselves. Centring matters: with a
    large common offset (hidden states whose norms are in the hundreds) ||a||^2 + ||b||^2 - 2 a.b in float32 cancels
    away the small distances TwoNN depends on. A row whose result cannot be certified against the float32 error bound
    of each other row (near-ties with a row beyond the candidates) is redone with a float64 Gram matrix.
    """
    n, d = rows.shape
    # Rows off the CPU (the device path) stay where they are: every step below is torch on rows.device.
    dev = rows.device
    on_device = device_for(rows) is not None
    mean = rows.sum(dim=0, dtype=torch.float64) / n
    # Augmented rows [x - mean, 1] and [-2 (x - mean), ||x - mean||^2]: their product is ||b||^2 - 2 a.b directly.
    left = torch.empty(n, d + 1, dtype=torch.float32, device=dev)
    right = torch.empty(n, d + 1, dtype=torch.float32, device=dev)
    xc = left[:, :d]
    xc.copy_(rows).sub_(mean.to(torch.float32))
    left[:, d] = 1.0
    sq = torch.linalg.vector_norm(xc, dim=1).double() ** 2
    torch.mul(xc, -2.0, out=right[:, :d])
    right[:, d] = sq.to(torch.float32)
    k = min(_TWONN_CANDIDATES + 1, n - 1)
    m = min(_TWONN_CANDIDATES, k)
    # Error of a float32 dot product of length d, probabilistic bound ~ sqrt(d) u (Higham & Mary 2019), with a
    # safety factor of 8, relative to the size of its terms, sum_k |a_k b_k| + ||b||^2 <= ||a||^2 + 2 ||b||^2 (a = x_i
    # - mean, b = x_j - mean); 2 eps more for the float32 subtraction of each column's share of it below. Per column,
    # not with the largest ||b||^2: a few massive tokens would otherwise leave half the rows of a batch doubtful.
    eps32 = float(torch.finfo(torch.float32).eps)
    tol_scale = 8 * math.sqrt(d + 1) * eps32 + 2 * eps32
    column_tol = (2 * tol_scale * sq).to(torch.float32)
    out = torch.empty(n, 2, dtype=torch.float64, device=dev)
    block = max(1, min(n, _GRAM_BLOCK_ENTRIES // n))
    for s in range(0, n, block):
        e = min(n, s + block)
        g = left[s:e] @ right.T  # (b, n): ||x_j||^2 - 2 x_i.x_j
        diag = torch.arange(e - s, device=dev)
        g[diag, diag + s] = float("inf")
        _, cand = _smallest_k(g, k)
        if m < k:  # the lowest a row beyond the m candidates can be: min_j (g_ij - 2 tol ||b_j||^2), in place
            g.sub_(column_tol)
            g.scatter_(1, cand[:, :m], float("inf"))
            lowest = g.amin(dim=1)
        del g
        exact = (_exact_sq_on_device if on_device else _exact_sq)(rows, torch.arange(s, e, device=dev), cand[:, :m])
        out[s:e] = exact[:, :2]
        if m < k:
            # Every row j beyond the first m candidates is at a true squared distance of at least
            # ||a_i||^2 + g_ij - tol (||a_i||^2 + 2 ||b_j||^2) >= floor: the two nearest are certain when the exact
            # second one is not above it.
            floor = lowest.double() + sq[s:e] * (1 - tol_scale)
            # (Written as "not below" so that a NaN from float32 overflow also counts as doubtful.)
            doubtful = torch.nonzero(~(exact[:, 1] <= floor)).flatten() + s
            if doubtful.numel():
                # Rare: redo these rows with a float64 Gram matrix (rounding ~1e-9 of float32's), then re-measure
                # their best candidates exactly as above.
                centred = rows.double() - mean
                sq64 = (centred * centred).sum(dim=1)
                g64 = sq64[None, :] - 2 * centred[doubtful] @ centred.T
                g64[torch.arange(doubtful.numel(), device=dev), doubtful] = float("inf")
                cand64 = torch.topk(g64, k, dim=1, largest=False).indices
                out[doubtful] = (_exact_sq_on_device if on_device else _exact_sq)(rows, doubtful, cand64)[:, :2]
    return out


def _smallest_k(g: torch.Tensor, k: int, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted k smallest values per row of g and their columns; same result as torch.topk(largest=False).

    The k smallest of a row lie in the k column groups with the smallest group minima (each of them is at most the
    k-th smallest value, and at most k groups can hold a value that small), so one fast min-reduction pass plus a
    top-k over k * group columns replaces a top-k over the whole row (about 1.5x faster at 16384 columns).
    """
    b, n = g.shape
    n_groups = n // group
    if n_groups <= k:
        return torch.topk(g, k, dim=1, largest=False, sorted=True)
    g = g.contiguous()
    # A strided view, not a copy, even when a ragged tail follows the last full group.
    mins = g.as_strided((b, n_groups, group), (n, group, 1)).amin(dim=2)
    best = torch.topk(mins, k, dim=1, largest=False).indices
    cols = (best[:, :, None] * group + torch.arange(group, device=g.device)).reshape(b, k * group)
    if n_groups * group < n:  # the ragged tail is always a candidate
        cols = torch.cat([cols, torch.arange(n_groups * group, n, device=g.device).expand(b, -1)], dim=1)
    values, pos = torch.topk(torch.gather(g, 1, cols), k, dim=1, largest=False, sorted=True)
    return values, torch.gather(cols, 1, pos)


def _exact_sq(rows: torch.Tensor, who: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """Sorted exact squared distances from rows ``who`` (an index per row of ``cand``) to their candidate rows,
    float64.

    Differences of float32 (or float64) numbers are formed in float64, where float32 differences are exact; each
    distance is the same d-term sum whichever rows share its chunk, so one call for many rows equals one per row.
    """
    x = rows.numpy()
    who = who.numpy()
    cand = cand.numpy()
    out = np.empty(cand.shape)
    # Small chunks (4 MiB of differences) stay in cache; numpy's gather beats torch's advanced indexing here.
    step = max(1, (4 << 20) // (8 * cand.shape[1] * x.shape[1]))
    for s in range(0, cand.shape[0], step):
        c = cand[s:s + step]
        diff = np.take(x, c, axis=0).astype(np.float64, copy=False)
        diff -= np.take(x, who[s:s + step], axis=0)[:, None, :]
        out[s:s + c.shape[0]] = np.einsum("ijk,ijk->ij", diff, diff)
    out.sort(axis=1)
    return torch.from_numpy(out)


def _exact_sq_on_device(rows: torch.Tensor, who: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    """``_exact_sq`` with torch where the rows are: sorted float64 squared distances from rows ``who`` to their
    candidate rows (float32 differences are exact in float64)."""
    out = torch.empty(cand.shape, dtype=torch.float64, device=rows.device)
    # 4 MiB of float64 differences per step, as on the CPU, so that the budget's bound on the metrics' memory
    # (pages.budget.metric_bytes) holds on the GPU too; a few dozen steps per Gram block cost the GPU little.
    step = max(1, (4 << 20) // (8 * cand.shape[1] * rows.shape[1]))
    for s in range(0, cand.shape[0], step):
        diff = rows[cand[s:s + step]].double()
        diff -= rows[who[s:s + step], None, :]  # in place (float64 - float32 promotes): one copy held, as numpy's
        out[s:s + step] = diff.square_().sum(dim=2)
    return torch.sort(out, dim=1).values


def _twonn_fit(log_mu: np.ndarray, discard_fraction: float) -> tuple[float, int]:
    """Slope through the origin of -log(1 - F(mu)) on log(mu), F(mu_(i)) = i/N, the largest ratios dropped."""
    n = log_mu.size
    n_fit = min(int(n * (1 - discard_fraction)), n - 1)  # F = 1 at i = N would give an infinite ordinate
    if n_fit < 2:
        raise ValueError(
            f"twonn_dimension needs at least 2 ratios in the fit, got {n_fit} from {n} points "
            f"with discard_fraction={discard_fraction}"
        )
    lm = np.sort(log_mu)[:n_fit]
    y = -np.log1p(-np.arange(1, n_fit + 1) / n)
    denom = float(lm @ lm)
    if denom == 0:
        raise ValueError("twonn_dimension is undefined: every point's two nearest neighbours are equidistant (mu = 1)")
    return float(lm @ y / denom), n_fit


def twonn_estimate(x, discard_fraction: float = 0.1, mask=None) -> TwoNNEstimate:
    """TwoNN intrinsic dimension (Facco et al. 2017) with its bookkeeping; see ``twonn_dimension``."""
    if not 0 <= discard_fraction < 1:
        raise ValueError(f"discard_fraction must be in [0, 1), got {discard_fraction}")
    rows, n_bad = _valid_rows(x, mask)
    n_valid = rows.shape[0]
    on_device = device_for(rows) is not None
    first = _unique_rows_on_device(rows) if on_device else torch.from_numpy(_unique_rows(rows.numpy()))
    n_dup = n_valid - first.numel()
    if first.numel() < TWONN_MIN_ROWS:
        raise _too_few("twonn_dimension", first.numel(), TWONN_MIN_ROWS, n_bad,
                       what=f"distinct valid rows ({n_dup} duplicates removed)")
    r = _two_nearest_sq(rows[first] if n_dup else rows)
    # Only the n pairs of distances leave the device: the fit below is O(n log n) on scalars.
    r = r.cpu()
    # Distinct rows have r1 > 0 in exact arithmetic; a row equal to another only up to the sign of a zero is removed.
    zero = (r[:, 0] <= 0).numpy()
    r = r.numpy()[~zero]
    log_mu = 0.5 * (np.log(r[:, 1]) - np.log(r[:, 0]))
    dim, n_fit = _twonn_fit(log_mu, discard_fraction)
    return TwoNNEstimate(dim, int(log_mu.size), int(n_dup + zero.sum()), int(n_bad), n_fit, float(discard_fraction))


def twonn_dimension(x, discard_fraction: float = 0.1, mask=None) -> float:
    """TwoNN intrinsic dimension (Facco et al. 2017).

    mu_i = r2_i / r1_i (distances to the second and first nearest neighbours) follows a Pareto law
    F(mu) = 1 - mu^(-d); d is the least-squares slope through the origin of -log(1 - F_emp(mu)) on log(mu), with
    F_emp(mu_(i)) = i/N and the largest ``discard_fraction`` of the ratios dropped (the convention of scikit-dimension
    and DADApy). Duplicate rows are removed before (and counted, see ``twonn_estimate``). Distances: float32 Gram
    matrix of the centred rows in blocks, then the two nearest recomputed exactly in float64. Needs 5 distinct rows.
    """
    return twonn_estimate(x, discard_fraction, mask).dimension


# ---------------------------------------------------------------------------------------------------------------------
# Streaming accumulator
# ---------------------------------------------------------------------------------------------------------------------


class LayerStats:
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
        self._sum_norm = 0.0
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
        self._scatter, self._rows = self._scatter.to(where), self._rows.to(where)
        self._device = device

    def __repr__(self) -> str:
        return f"LayerStats(dim={self.dim}, n={self._n}, n_excluded={self._n_excluded}, sample={len(self._keys)})"

    def update(self, batch, mask=None) -> "LayerStats":
        """Add the valid rows of ``batch`` ((n, d) or (..., d); ``mask`` selects rows to keep). Returns self."""
        t, keep = _as_rows(batch, mask)
        if t.shape[1] != self.dim:
            raise ValueError(f"LayerStats(dim={self.dim}) got rows of dimension {t.shape[1]}")
        dev = device_for(t)
        if dev is not None or self._n == 0:  # once on the device path, CPU batches join it there
            self._place(dev)
        for ch in _scan(t, keep, chunk_rows=_MOMENT_CHUNK_ROWS, device=self._device):
            self._n_excluded += ch.n_excluded
            c = ch.rows
            m = c.shape[0]
            if not m:
                continue
            self._sum_unit += (ch.norms.reciprocal() @ c).double()
            self._sum_norm += float(ch.norms.double().sum())
            bm, bs = _batch_moments(c)
            self._n, self._mean, self._scatter = _chan_merge(self._n, self._mean, self._scatter, m, bm, bs)
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
            keys, rows = keys[enter], rows[torch.from_numpy(enter).to(rows.device)]
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
        self._n, self._mean, self._scatter = _chan_merge(
            self._n, self._mean, self._scatter, other._n, other._mean.to(where), other._scatter.to(where))
        self._n_excluded += other._n_excluded
        self._sum_unit += other._sum_unit.to(where)
        self._sum_norm += other._sum_norm
        self._offer(other._keys.copy(), other._rows.clone())
        self._twonn.clear()
        return self

    @property
    def n(self) -> int:
        """Number of valid rows seen."""
        return self._n

    @property
    def n_excluded(self) -> int:
        """Number of zero, NaN or inf rows dropped (masked-out rows are not counted)."""
        return self._n_excluded

    @property
    def mean(self) -> np.ndarray:
        """Mean vector (float64)."""
        return self._mean.cpu().numpy().copy()

    @property
    def covariance(self) -> np.ndarray:
        """Sample covariance matrix, centred scatter / (n - 1) (float64, d x d)."""
        if self._n < 2:
            raise _too_few("LayerStats.covariance", self._n, 2, self._n_excluded)
        return (self._scatter / (self._n - 1)).cpu().numpy().copy()

    @property
    def mean_cosine(self) -> float:
        """Exact mean cosine over ordered pairs i != j, (||sum u_i||^2 - n) / (n (n - 1)), from float64 sums."""
        if self._n < 2:
            raise _too_few("mean_cosine", self._n, 2, self._n_excluded)
        return mean_cosine_from_sums(self._sum_unit.cpu().numpy(), self._n)

    @property
    def drift_norm(self) -> float:
        """||mean||_2."""
        if self._n < 1:
            raise _too_few("drift_norm", self._n, 1, self._n_excluded)
        return float(torch.linalg.vector_norm(self._mean))

    @property
    def mean_norm(self) -> float:
        """Mean row norm."""
        if self._n < 1:
            raise _too_few("mean_norm", self._n, 1, self._n_excluded)
        return self._sum_norm / self._n

    @property
    def sigma1_share(self) -> float:
        """sigma_1^2 / sum sigma_i^2 of the centred rows, from the float64 scatter matrix."""
        if self._n < 2:
            raise _too_few("sigma1_share", self._n, 2, self._n_excluded)
        if self._device is not None or _FORCED_DEVICE.get() is not None:
            return _sigma1_share_on_device(self._scatter)
        return _sigma1_share_from_scatter(self._scatter.numpy())

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


# ---------------------------------------------------------------------------------------------------------------------
# Protocols: batches, correlations across layers, bootstrap
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchedResult(_Iter2):
    """Mean and standard deviation (ddof=0) of a metric over ``n_batches`` consecutive batches; ``values`` per batch."""

    mean: float
    std: float
    n_batches: int
    values: tuple[float, ...]
    _pair = ("mean", "std")


def batched(metric: Callable, x, batch_size: int = 4096, mask=None) -> BatchedResult:
    """Paper 2's protocol: ``metric`` on consecutive batches of at least ``batch_size`` valid rows, mean and std.

    The valid rows are cut into floor(n / batch_size) consecutive batches of near-equal size (the remainder is spread
    over them, so none is smaller than ``batch_size``). Needs at least ``batch_size`` valid rows.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rows, n_bad = _valid_rows(x, mask)
    n = rows.shape[0]
    if n < batch_size:
        raise _too_few(f"batched(batch_size={batch_size})", n, batch_size, n_bad)
    values = tuple(float(metric(part)) for part in torch.tensor_split(rows, n // batch_size))
    return BatchedResult(float(np.mean(values)), float(np.std(values)), len(values), values)


@dataclass(frozen=True)
class Correlation:
    """Spearman and Pearson correlation across layers, with two-sided p-values, over ``n`` finite pairs."""

    spearman: float
    spearman_p: float
    pearson: float
    pearson_p: float
    n: int


# Up to this many layers Spearman's p-value is exact: 9! = 362,880 orderings take well under a second to enumerate, and
# scipy.stats.spearmanr's t approximation, fair from about ten points, returns 0 for any perfect ordering below that.
EXACT_SPEARMAN_MAX_N = 9


def _exact_spearman_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of Spearman's rho over every one of the n! pairings of ``a`` with ``b``
    (scipy.stats.permutation_test, exhaustive): a perfect ordering of n untied layers has p = 2/n!."""
    ranks_a = stats.rankdata(a)
    ranks_a = (ranks_a - ranks_a.mean()) / np.linalg.norm(ranks_a - ranks_a.mean())

    def rho(y, axis=-1):
        r = stats.rankdata(y, axis=axis)
        r = r - r.mean(axis=axis, keepdims=True)
        return (r * ranks_a).sum(axis=axis) / np.linalg.norm(r, axis=axis)

    null = stats.permutation_test((b,), rho, permutation_type="pairings", vectorized=True,
                                  n_resamples=np.inf).null_distribution
    # the tolerance counts the orderings exactly as strong as the observed one despite rounding
    return float(np.mean(np.abs(null) >= abs(rho(b)) - 1e-12))


def layer_correlation(values_a, values_b) -> Correlation:
    """Correlation of two per-layer series (Paper 1, Figures 5 and 16): Spearman's rho and Pearson's r
    (scipy.stats.spearmanr and pearsonr) with two-sided p-values; Spearman's p is exact over at most
    ``EXACT_SPEARMAN_MAX_N`` pairs (all n! orderings), scipy's t approximation above.

    Pairs where either value is NaN or inf are dropped. Needs at least 3 finite pairs.
    """
    a = np.asarray(values_a, dtype=np.float64).ravel()
    b = np.asarray(values_b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"layer_correlation needs two series of equal length, got {a.size} and {b.size}")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 3:
        raise ValueError(f"layer_correlation needs at least 3 finite pairs, got {a.size}")
    sp = stats.spearmanr(a, b)
    pe = stats.pearsonr(a, b)
    sp_p = float(sp.pvalue)
    if a.size <= EXACT_SPEARMAN_MAX_N and np.isfinite(sp.statistic):  # constant series: no rank correlation, p NaN
        sp_p = _exact_spearman_p(a, b)
    return Correlation(float(sp.statistic), sp_p, float(pe.statistic), float(pe.pvalue), int(a.size))


def min_significant_layers(alpha: float = 0.05) -> int:
    """The fewest layers whose perfect ordering has Spearman p < ``alpha`` (``layer_correlation``): 5 at 0.05
    (2/5! = 0.017; 4 layers give 2/4! = 0.083)."""
    return next(n for n in range(3, 64) if layer_correlation(np.arange(n), np.arange(n)).spearman_p < alpha)


@dataclass(frozen=True)
class ConfidenceInterval(_Iter2):
    """Percentile bootstrap interval [low, high] at ``level`` around ``estimate``; unpacks as (low, high)."""

    estimate: float
    low: float
    high: float
    level: float
    n_boot: int
    _pair = ("low", "high")


def _resampled_mean_cosine(unit: torch.Tensor, counts: np.ndarray) -> np.ndarray:
    """Mean cosine over pairs of draws that are different rows, for each row of counts (resample multiplicities)."""
    # On the device path the product runs where the unit vectors are; only the n_boot squared norms come back.
    sums = (torch.from_numpy(counts.astype(np.float32)).to(unit.device) @ unit).double()
    c2 = (counts.astype(np.float64) ** 2).sum(axis=1)
    n = float(unit.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        # A replicate that drew a single row n times has no pair of different rows: it is left out (NaN).
        return ((sums * sums).sum(dim=1).cpu().numpy() - c2) / (n * n - c2)


def bootstrap_mean_cosine(x, n_boot: int = 1000, level: float = 0.95, seed: int = 0, mask=None,
                          ) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval for the mean cosine of the rows.

    Each replicate resamples the n rows with replacement (counts c_i) and takes the mean cosine over ordered pairs of
    draws that are different rows: (||sum_i c_i u_i||^2 - sum_i c_i^2) / (n^2 - sum_i c_i^2), so a row paired with its
    own copy (cosine 1) does not bias the replicate. All replicates cost one float32 (n_boot x n) @ (n x d) product.
    Needs at least 2 valid rows.
    """
    if n_boot < 2 or not 0 < level < 1:
        raise ValueError(f"bootstrap_mean_cosine needs n_boot >= 2 and 0 < level < 1, got {n_boot} and {level}")
    rows, n_bad = _valid_rows(x, mask)
    n = rows.shape[0]
    if n < 2:
        raise _too_few("bootstrap_mean_cosine", n, 2, n_bad)
    norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
    unit = (rows / norms).to(torch.float32)
    estimate = mean_cosine_from_sums(unit.sum(dim=0, dtype=torch.float64), n)
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    step = max(1, min(n_boot, (64 << 20) // (4 * n)))  # bound the counts block to 64 MiB
    p = np.full(n, 1.0 / n)
    for s in range(0, n_boot, step):
        counts = rng.multinomial(n, p, size=min(step, n_boot - s))
        reps[s:s + counts.shape[0]] = _resampled_mean_cosine(unit, counts)
    low, high = np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return ConfidenceInterval(estimate, float(low), float(high), float(level), int(n_boot))


# The bands of Figures 1-4 (``grouped_bootstrap_mean_cosine`` as Section 3 calls it): resampling the examples (texts,
# clips, images); the Colab budget counts the resamples' memory (``pages.budget``).
BOOTSTRAP = {"n_boot": 1000, "level": 0.95}


def grouped_bootstrap_mean_cosine(gram, sizes, n_boot: int = 1000, level: float = 0.95, seed: int = 0
                                  ) -> ConfidenceInterval:
    """Percentile bootstrap confidence interval for the mean cosine of vectors that come in groups (the tokens of a
    text, the frames of a clip, the patches of an image), resampling whole groups: the vectors of one text are not
    independent draws, the texts are.

    ``gram[e, f]`` = s_e . s_f for the sums s_e of the unit vectors of groups e and f; ``sizes[e]`` = the group's
    number of vectors. Each replicate draws the groups with replacement (counts c_e) and takes the mean cosine over
    ordered pairs of drawn vectors that are not one vector paired with its own copy:
    (c' G c - sum_e c_e^2 n_e) / (N^2 - sum_e c_e^2 n_e) with N = sum_e c_e n_e; with every c_e = 1 this is the
    exact mean cosine ``mean_cosine_from_sums``, the estimate returned. Needs 2 groups and 2 vectors."""
    if n_boot < 2 or not 0 < level < 1:
        raise ValueError(f"grouped_bootstrap_mean_cosine needs n_boot >= 2 and 0 < level < 1, got {n_boot} and {level}")
    g = np.asarray(gram, dtype=np.float64)
    n_e = np.asarray(sizes, dtype=np.float64)
    k, n = len(n_e), float(n_e.sum())
    if g.shape != (k, k) or k < 2 or n < 2:
        raise ValueError(f"grouped_bootstrap_mean_cosine needs a k x k Gram matrix of k >= 2 groups and >= 2 vectors, "
                         f"got shape {g.shape}, {k} groups, {n:.0f} vectors")
    estimate = float((g.sum() - n) / (n * (n - 1)))
    counts = np.random.default_rng(seed).multinomial(k, np.full(k, 1.0 / k), size=n_boot).astype(np.float64)
    quad = np.einsum("be,ef,bf->b", counts, g, counts)
    own = (counts**2) @ n_e
    total = counts @ n_e
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (quad - own) / (total**2 - own)
    low, high = np.nanquantile(reps, [(1 - level) / 2, (1 + level) / 2])
    return ConfidenceInterval(estimate, float(low), float(high), float(level), int(n_boot))
