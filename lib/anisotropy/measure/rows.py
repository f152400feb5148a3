"""The rows a statistic of ``measure`` is measured on: how they are read, which count, in what pieces and precision,
and where (the device path). ``measure.statistics``, ``measure.twonn`` and ``measure.streaming`` read their input
through here.

Input: an (n, d) numpy array or torch tensor (any float dtype, bf16/fp16 included, any device; an (..., d) array is
read as rows) and an optional ``mask`` of rows to keep (bool, or integer with nonzero = keep, shaped like the rows, e.g.
an attention mask of shape (batch, seq)): ``as_rows``. Rows that are zero, NaN or inf are excluded and counted
(``scan``, ``valid_rows``); a statistic asked of too few rows raises ``too_few``'s ``ValueError`` saying what was given
and what is needed. Narrow floats are read in float32, which holds bf16/fp16 exactly; float64 stays float64.

Device path. Rows on a non-CPU device (a CUDA GPU, where the model is) are measured there with torch, never copied
to the CPU (``device_for``); ``with on_device(torch.device("cpu")):`` forces the device path, same ops and dtypes, on
any rows (the tests run it without a GPU). Devices without float64 (Apple MPS) take the CPU path. The CPU path is the
reference; the device path agrees with it within ``DEVICE_*`` below (derived from the precision of each step).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np
import torch

T = TypeVar("T")


# Rows per chunk are chosen so that one chunk is about this many bytes: small enough to stay in cache between the norm
# pass and the matrix-vector product, large enough to amortise the per-call overhead.
CHUNK_BYTES = 4 << 20
# Rows per chunk for second moments: the d x d product per chunk is then large enough to run near BLAS speed, and the
# float32 product's rounding (~sqrt(rows) 2^-24 relative) stays below 1e-5.
MOMENT_CHUNK_ROWS = 4096


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
# the share by twice it; 2 paths: 4 (lambda sqrt(b) + 2) u32 ~ 1.2e-4. The eigenvalue adds 1e-8 relative
# (``measure.eigen.top_eigenvalue``, on both paths; ~d u64 where eigvalsh runs instead), negligible.
DEVICE_SIGMA1_SHARE_ABS = 4 * (_LAMBDA * math.sqrt(MOMENT_CHUNK_ROWS) + 2) * _U32
# TwoNN (relative, per squared distance): both paths certify the same two nearest rows, then sum d exact float64
# squares of differences in different orders: gamma_(d+3) = (d + 3) u64 each (nonnegative terms; float64 rows add a
# rounded difference), 2 paths. The dimension follows by first-order propagation through the fit
# (tests/test_metrics_device.py evaluates that propagation on the data).
DEVICE_TWONN_SQ_REL = 2 * (_MAX_TERMS + 3) * _U64


# ---------------------------------------------------------------------------------------------------------------------
# Where the rows are measured
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


def forced_device() -> torch.device | None:
    """The device ``on_device`` forces in the current block, or None outside one."""
    return _FORCED_DEVICE.get()


# ---------------------------------------------------------------------------------------------------------------------
# Reading the rows
# ---------------------------------------------------------------------------------------------------------------------


def as_rows(x, mask=None) -> tuple[torch.Tensor, torch.Tensor | None]:
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
def one_thread():
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


def threads_each(fn: Callable[[T], None], items: Sequence[T], parallel: bool = True) -> None:
    """``fn(item)`` for every item (independent ones), each on one thread, as many at a time as torch has threads
    (one after another when ``parallel`` is False: work on a GPU, whose kernels do not run on our cores).

    For work much of which runs on one core however many torch has (top-k, float64 re-measures, small products): two
    at a time on one thread each take 0.8 of the time of one at a time on two threads (Paper 2's layers, measured).
    """
    workers = min(torch.get_num_threads(), len(items)) if parallel else 1
    if workers < 2:
        with one_thread():
            for item in items:
                fn(item)
        return

    # a new thread starts with every core (OpenMP's setting is per thread) and without the caller's autograd modes
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def one(item: T) -> None:
        with one_thread(), torch.inference_mode(inference), torch.set_grad_enabled(grad):
            fn(item)

    with one_thread(), ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, items))


def _work_dtype(t: torch.Tensor) -> torch.dtype:
    # float64 input stays float64; every narrower float is widened to float32, which holds bf16/fp16 exactly.
    if t.dtype == torch.float64 or not t.dtype.is_floating_point:
        return torch.float64
    return torch.float32


@dataclass
class Chunk:
    """One piece of the rows that ``scan`` walks: its valid rows, their norms and row numbers."""

    rows: torch.Tensor  # valid rows of the chunk, CPU (or the device path's device), float32 or float64
    norms: torch.Tensor  # their Euclidean norms, same dtype
    index: np.ndarray  # their row numbers in the flattened input
    n_excluded: int  # zero / NaN / inf rows dropped from this chunk (masked-out rows are not counted)


def scan(t: torch.Tensor, keep: torch.Tensor | None, dtype: torch.dtype | None = None,
         chunk_rows: int | None = None, device: torch.device | None = None) -> Iterator[Chunk]:
    """Walk the rows in chunks, keeping rows that are in the mask, finite and nonzero; chunks are on ``device``
    (the device path) or the CPU.

    On a GPU a chunk waits for the device once, to count its invalid rows (the valid rows' number decides the shapes
    of everything after it; zeroing the invalid rows instead would change the shapes of the float32 reductions,
    hence their rounding); the mask (a CPU array) selects rows by their index, without a wait."""
    dtype = dtype or _work_dtype(t)
    n, d = t.shape
    step = chunk_rows or max(256, CHUNK_BYTES // (4 * max(d, 1)))
    for start in range(0, n, step):
        c = t[start:start + step]
        idx = np.arange(start, start + c.shape[0])
        if keep is not None:
            k = keep[start:start + step].numpy()
            if not k.all():
                idx = idx[k]
                c = c.index_select(0, torch.from_numpy(idx - start).to(c.device))
        c = c.to(device=device or "cpu", dtype=dtype)
        norms = torch.linalg.vector_norm(c, dim=1)
        ok = torch.isfinite(norms) & (norms > 0)
        n_bad = int((~ok).sum())
        if n_bad:
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
        yield Chunk(c, norms, idx, n_bad)


def too_few(name: str, have: int, need: int, n_excluded: int, what: str = "valid rows") -> ValueError:
    """The error of a statistic ``name`` asked of ``have`` rows where it needs ``need``."""
    if need == 1 and what.endswith("rows"):
        what = what[:-1]
    return ValueError(
        f"{name} needs at least {need} {what}, got {have}"
        f" ({n_excluded} zero/NaN/inf rows excluded; masked-out rows are not counted)"
    )


def valid_rows(x, mask, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, int]:
    """All valid rows in one tensor (on the CPU, or the device path's device), and the number of excluded rows."""
    t, keep = as_rows(x, mask)
    dev = device_for(t)
    if keep is None and t.device == (dev or torch.device("cpu")) and t.dtype == (dtype or _work_dtype(t)):
        # Fast path, no copy: one norm pass over the whole matrix, used as is when every row is valid.
        with one_thread():
            norms = torch.linalg.vector_norm(t, dim=1)
        if bool((torch.isfinite(norms) & (norms > 0)).all()):
            return t, 0
    parts, n_bad = [], 0
    with one_thread():
        for ch in scan(t, keep, dtype, device=dev):
            parts.append(ch.rows)
            n_bad += ch.n_excluded
    rows = torch.cat(parts) if parts else torch.empty(0, t.shape[1], dtype=dtype or _work_dtype(t), device=dev)
    return rows, n_bad

