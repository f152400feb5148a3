"""The TwoNN intrinsic dimension of a set of row vectors (Facco et al. 2017), Paper 2's second measure.

Input as every statistic of ``measure`` (``measure.rows``: an (n, d) array or tensor, an optional mask; zero, NaN and
inf rows excluded and counted); duplicate rows are removed before and counted. Distances: a float32 Gram matrix of the
centred rows (each pair once, in row strips of bounded size), then the two nearest rows re-measured exactly in float64
and certified against the float32 error bound. Device path (``measure.rows``): float32 Gram strips, top-k, the float64
re-measure and the certificate run where the rows are; only the n ratios go to the CPU for the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from anisotropy.measure.rows import device_for, too_few, valid_rows


# Gram strips of TwoNN are at most this many float32 entries (128 MiB), whatever n is.
_GRAM_BLOCK_ENTRIES = 32 << 20
# Rows per strip of the Gram matrix's upper triangle: at 4096 x 576 the fastest of 512, 1024 and 1850 on 2 cores
# (fewer rows, less of the triangle's diagonal computed twice; more, larger products).
_STRIP_ROWS = 512
# TwoNN needs two neighbours per point and a few ratios to fit; below this many distinct rows it refuses.
TWONN_MIN_ROWS = 5
# Nearest-neighbour candidates per point taken from the float32 Gram matrix and re-measured exactly in float64 (one
# more is looked up to certify them).
_TWONN_CANDIDATES = 3
# A row its first candidates do not certify (1-3% of a hidden-state batch) is re-measured against every row whose bound
# is within its second distance: a handful, or at most this many; beyond, the float64 Gram matrix finds its candidates.
_WIDE_CANDIDATES = 64


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
    """Indices (in original order) of the first occurrence of each distinct row (byte-wise equality).

    Equal rows have equal sums of their bit patterns (integers, exact in any order): a row whose sum no other row shares
    is distinct, and only rows that share a sum are compared byte by byte (a sort of 8-byte sums instead of one of
    whole rows, 5x faster at 4096 x 768)."""
    a = np.ascontiguousarray(rows)
    bits = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    sums = bits.sum(axis=1, dtype=np.uint64)
    _, inverse, counts = np.unique(sums, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts[inverse.ravel()] > 1)
    keep = np.ones(a.shape[0], dtype=bool)
    first: dict[bytes, int] = {}
    for i in shared:  # in order: the first of equal rows is kept
        if first.setdefault(a[i].tobytes(), i) != i:
            keep[i] = False
    return np.flatnonzero(keep)


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

    Candidates come from a float32 Gram matrix of the centred rows, computed once per pair: row strips of its upper
    triangle (half the products of the whole matrix), each strip read along its rows for the strip's own rows and
    along its columns for the rows below. Centring matters: with a large common offset (hidden states whose norms are
    in the hundreds) ||a||^2 + ||b||^2 - 2 a.b in float32 cancels away the small distances TwoNN depends on. From each
    entry a lower bound of the true squared distance is formed, L_ij = D_ij - tol (||a_i||^2 + ||a_j||^2) (the float32
    error bound, ``_tolerance``); each row keeps its ``_TWONN_CANDIDATES`` + 1 smallest, the first ones are
    re-measured exactly in float64 from the rows themselves, and they are the two nearest for certain when the exact
    second one is not above the next bound. A row that cannot be certified (near-ties with a row beyond the
    candidates) is re-measured against every row within its bound (``_widen``), or among many near-ties redone with a
    float64 Gram matrix.
    """
    n, d = rows.shape
    # Rows off the CPU (the device path) stay where they are: every step below is torch on rows.device.
    dev = rows.device
    exact_sq = _exact_sq_on_device if device_for(rows) is not None else _exact_sq
    mean = rows.sum(dim=0, dtype=torch.float64) / n
    xc = torch.empty(n, d, dtype=torch.float32, device=dev)
    xc.copy_(rows).sub_(mean.to(torch.float32))
    sq = torch.linalg.vector_norm(xc, dim=1).double() ** 2
    k = min(_TWONN_CANDIDATES + 1, n - 1)
    m = min(_TWONN_CANDIDATES, k)
    # The bounds L (``_bounds``) are symmetric in i, j. Every float32 value below is at most 4 max ||x||^2; beyond
    # float32's range (norms ~1e19) every row is redone.
    if not 4 * float(sq.max()) < float(torch.finfo(torch.float32).max):
        return _redo_in_float64(rows, mean, torch.arange(n, device=dev), torch.empty(n, 2, dtype=torch.float64,
                                                                                     device=dev), k, exact_sq)
    c = ((1 - _tolerance(d)) * sq).to(torch.float32)
    best = torch.full((n, k), float("inf"), dtype=torch.float32, device=dev)
    best_at = torch.zeros((n, k), dtype=torch.long, device=dev)
    for s, e in gram_strips(n):
        strip = _bounds(xc[s:e], c[s:e], xc[s:], c[s:])  # (b, n - s): columns s..n
        diag = torch.arange(e - s, device=dev)
        strip[diag, diag] = float("inf")
        values, at = _smallest_k(strip, min(k, n - s))
        best[s:e], best_at[s:e] = _merge_smallest(best[s:e], best_at[s:e], values, at + s, k)
        if e < n:  # the same entries seen from the rows below: the strip's columns e..n, as rows
            below = strip[:, e - s:].T.contiguous()
            values, at = torch.topk(below, min(k, e - s), dim=1, largest=False, sorted=True)
            best[e:], best_at[e:] = _merge_smallest(best[e:], best_at[e:], values, at + s, k)
        del strip
    exact = exact_sq(rows, torch.arange(n, device=dev), best_at[:, :m])
    out = exact[:, :2].clone()
    if m == k:  # every other row is a candidate
        return out
    # Every row beyond the m candidates has a bound L at least best[:, m], and its true squared distance is not below
    # its bound: the two nearest are certain when the exact second one is not above it.
    doubtful = torch.nonzero(~(exact[:, 1] <= best[:, m].double())).flatten()
    return _widen(rows, xc, c, mean, doubtful, exact[doubtful, 1], out, k, exact_sq) if doubtful.numel() else out


def _widen(rows: torch.Tensor, xc: torch.Tensor, c: torch.Tensor, mean: torch.Tensor, doubtful: torch.Tensor,
           limit: torch.Tensor, out: torch.Tensor, k: int, exact_sq) -> torch.Tensor:
    """``out`` with the rows ``doubtful`` redone from more candidates: every row j whose bound L_ij is not above
    ``limit`` (the row's exact second distance among its first candidates), re-measured exactly. The two nearest are
    among them, since each has a distance, hence a bound, at most ``limit``. A row with more than
    ``_WIDE_CANDIDATES`` of them (near-ties by the dozen) is redone with a float64 Gram matrix instead."""
    n = rows.shape[0]
    step = max(1, _GRAM_BLOCK_ENTRIES // n)
    crowded = []
    for s in range(0, doubtful.numel(), step):
        who = doubtful[s:s + step]
        bound = _bounds(xc[who], c[who], xc, c)
        bound[torch.arange(who.numel(), device=rows.device), who] = float("inf")
        # the limit rounded up to float32, so that no row within it is missed
        ceiling = torch.nextafter(limit[s:s + step].float(), torch.tensor(float("inf"), device=rows.device))
        within = (bound <= ceiling[:, None]).sum(dim=1)
        fits = within <= _WIDE_CANDIDATES
        if bool(fits.any()):
            cand = torch.topk(bound[fits], int(within[fits].max()), dim=1, largest=False).indices
            out[who[fits]] = exact_sq(rows, who[fits], cand)[:, :2]
        crowded.append(who[~fits])
    crowded = torch.cat(crowded)
    return _redo_in_float64(rows, mean, crowded, out, k, exact_sq) if crowded.numel() else out


def _redo_in_float64(rows: torch.Tensor, mean: torch.Tensor, doubtful: torch.Tensor, out: torch.Tensor, k: int,
                     exact_sq) -> torch.Tensor:
    """``out`` with the rows ``doubtful`` redone: their k best candidates from a float64 Gram matrix of the centred
    rows (rounding ~1e-9 of float32's), re-measured exactly; in row blocks of at most half ``_GRAM_BLOCK_ENTRIES``
    float64 entries. Rare: rows beyond float32's range, and near-ties by the dozen."""
    n = rows.shape[0]
    centred = rows.double() - mean
    sq64 = (centred * centred).sum(dim=1)
    step = max(1, _GRAM_BLOCK_ENTRIES // (2 * n))
    for s in range(0, doubtful.numel(), step):
        who = doubtful[s:s + step]
        g64 = sq64[None, :] - 2 * centred[who] @ centred.T
        g64[torch.arange(who.numel(), device=rows.device), who] = float("inf")
        cand = torch.topk(g64, k, dim=1, largest=False).indices
        out[who] = exact_sq(rows, who, cand)[:, :2]
    return out


def gram_strips(n: int) -> list[tuple[int, int]]:
    """The row strips (start, end) of the float32 Gram matrix's upper triangle that ``_two_nearest_sq`` computes for
    n rows: strip (s, e) is rows s..e-1 against columns s..n-1."""
    block = _strip_rows(n)
    return [(s, min(n, s + block)) for s in range(0, n, block)]


def gram_entries(n: int) -> int:
    """Entries of the float32 Gram matrix ``_two_nearest_sq`` computes for n rows: the row strips of its upper
    triangle (``gram_strips``), their diagonal blocks whole (about n^2 / 2 + n x ``_STRIP_ROWS`` / 2)."""
    return sum((e - s) * (n - s) for s, e in gram_strips(n))


def _strip_rows(n: int) -> int:
    """Rows per Gram strip of n rows: ``_STRIP_ROWS``, fewer where a strip would exceed ``_GRAM_BLOCK_ENTRIES``."""
    return max(1, min(_STRIP_ROWS, _GRAM_BLOCK_ENTRIES // max(n, 1)))


def _bounds(rows: torch.Tensor, c_rows: torch.Tensor, cols: torch.Tensor, c_cols: torch.Tensor) -> torch.Tensor:
    """L_ij = c_i + c_j - 2 x_i.x_j (float32) of centred ``rows`` against centred ``cols``, c = (1 - tol) ||x||^2:
    each pair's squared distance less its float32 error bound (``_tolerance``), a lower bound of the true one."""
    return torch.addmm(c_cols.expand(rows.shape[0], -1), rows, cols.T, alpha=-2.0).add_(c_rows[:, None])


def _tolerance(d: int) -> float:
    """The float32 error of a squared distance ||a||^2 + ||b||^2 - 2 a.b between centred rows of width d, relative to
    ||a||^2 + ||b||^2: a float32 sum of d + 1 terms (one norm and the products) errs by ~sqrt(d + 1) u times the sum
    of their sizes (Higham & Mary 2019's probabilistic bound), ||b||^2 + 2 sum_k |a_k b_k| <= 2 (||a||^2 + ||b||^2),
    with a safety factor of 8; 4 eps more for the centring and the last addition. Per pair, not with the largest
    norm: a few massive tokens would otherwise leave half the rows of a batch doubtful."""
    eps32 = float(torch.finfo(torch.float32).eps)  # eps = 2 u
    return 8 * math.sqrt(d + 1) * eps32 + 4 * eps32


def _merge_smallest(values: torch.Tensor, at: torch.Tensor, more: torch.Tensor, more_at: torch.Tensor, k: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The k smallest of two sorted (values, columns) lists per row, sorted."""
    merged, pos = torch.topk(torch.cat([values, more], dim=1), k, dim=1, largest=False, sorted=True)
    return merged, torch.gather(torch.cat([at, more_at], dim=1), 1, pos)


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
    matrix of the centred rows (each pair once), then the two nearest recomputed exactly in float64. Needs 5 distinct
    rows.
    """
    return twonn_estimate(x, discard_fraction, mask).dimension
