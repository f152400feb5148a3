"""The TwoNN intrinsic dimension of a set of row vectors (Facco et al. 2017), Paper 2's second measure.

Input as every statistic of ``measure`` (``measure.rows``: an (n, d) array or tensor, an optional mask; zero, NaN and
inf rows excluded and counted); duplicate rows are removed before and counted. Distances: a float32 Gram matrix of the
centred rows in blocks of bounded size, then the two nearest rows re-measured exactly in float64 and certified against
the float32 error bound. Device path (``measure.rows``): float32 Gram blocks, top-k, the float64 re-measure and the
certificate run where the rows are; only the n ratios go to the CPU for the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from anisotropy.measure.rows import device_for, too_few, valid_rows


# Gram blocks of TwoNN are at most this many float32 entries (128 MiB), whatever n is.
_GRAM_BLOCK_ENTRIES = 32 << 20
# TwoNN needs two neighbours per point and a few ratios to fit; below this many distinct rows it refuses.
TWONN_MIN_ROWS = 5
# Nearest-neighbour candidates per point taken from the float32 Gram matrix and re-measured exactly in float64 (one
# more is looked up to certify them).
_TWONN_CANDIDATES = 3


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
    rows, n_bad = valid_rows(x, mask)
    n_valid = rows.shape[0]
    on_device = device_for(rows) is not None
    first = _unique_rows_on_device(rows) if on_device else torch.from_numpy(_unique_rows(rows.numpy()))
    n_dup = n_valid - first.numel()
    if first.numel() < TWONN_MIN_ROWS:
        raise too_few("twonn_dimension", first.numel(), TWONN_MIN_ROWS, n_bad,
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
