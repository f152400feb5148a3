"""Statistics of a set of row vectors (hidden states of one layer): the measurements both papers rest on, each a pure
function of the rows.

Every function takes an (n, d) numpy array or torch tensor and an optional ``mask`` of rows to keep, read by
``measure.rows`` (which rows count, in what precision, where: the device path). Rows that are zero, NaN or inf are
excluded and counted; a statistic asked of too few rows raises ``ValueError`` saying what was given and what is
needed. Sums across chunks and batches are accumulated in float64; heavy products run in float32 chunks where that
loses nothing that matters (each function says what it does). ``measure.streaming`` computes the same quantities from
a stream of batches in memory that does not grow with the number of rows; ``measure.twonn`` is the TwoNN intrinsic
dimension.

Paper 1 (Godey et al. 2024) measures the mean cosine similarity between pairs of vectors and the drift ||mean||;
Paper 2 measures sigma_1^2 / sum_i sigma_i^2 of the centred matrix. Beside them: Paper 2's batches (``batched``), the
correlation of two per-layer series (``layer_correlation``) and the mean cosine's bootstrap intervals.

Device path (``measure.rows``): first moments (float32 products, float64 sums), the float64 scatter with Chan's update
and its top eigenvalue run where the rows are. The top eigenvalue, on every device, is
``measure.eigen.top_eigenvalue``'s (Lanczos in float64 with a certificate, within ``TOP_EIGENVALUE_REL_TOL`` = 1e-8
relative of lambda_1, else eigvalsh): a full float64 eigendecomposition, ~4/3 d^3 flops, ran at a T4's float64 rate
(1/32 of float32) three times per batch of Paper 2, and on the CPU took an eighth of ``python -m anisotropy
profile``'s per-batch statistics (scipy's eigh of the top eigenvalue, 17 ms at d = 576, against 2 ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from scipy import stats

from anisotropy.measure.eigen import top_eigenvalue
from anisotropy.measure.rows import (CHUNK_BYTES, MOMENT_CHUNK_ROWS, as_rows, device_for, one_thread, scan, too_few,
                                     valid_rows)


# ---------------------------------------------------------------------------------------------------------------------
# First moments: mean cosine, drift, norms
# ---------------------------------------------------------------------------------------------------------------------


def _first_moments(x, mask, unit=False, total=False) -> dict:
    """One pass: n, n_excluded and the float64 sums of norms, and of unit vectors and of vectors if asked."""
    t, keep = as_rows(x, mask)
    d = t.shape[1]
    dev = device_for(t)
    n, n_bad = 0, 0
    s_norm = torch.zeros((), dtype=torch.float64, device=dev)  # where the rows are: no wait for the device per chunk
    s_unit = torch.zeros(d, dtype=torch.float64, device=dev) if unit else None
    s_tot = torch.zeros(d, dtype=torch.float64, device=dev) if total else None
    with one_thread():
        for ch in scan(t, keep, device=dev):
            n += ch.rows.shape[0]
            n_bad += ch.n_excluded
            if not ch.rows.shape[0]:
                continue
            if unit:
                # sum_i x_i / ||x_i|| as one matrix-vector product in the chunk's precision, accumulated in float64.
                s_unit += (ch.norms.reciprocal() @ ch.rows).double()
            if total:
                s_tot += ch.rows.sum(dim=0).double()
            s_norm += ch.norms.double().sum()
    return {"n": n, "n_excluded": n_bad, "sum_unit": s_unit, "sum": s_tot, "sum_norm": float(s_norm)}


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
        raise too_few("mean_cosine", m["n"], 2, m["n_excluded"])
    return mean_cosine_from_sums(m["sum_unit"], m["n"])


def drift_norm(x, mask=None) -> float:
    """Norm of the mean vector, ||(1/n) sum_i x_i||_2 (Paper 1's drift), in the units of x. Needs 1 valid row."""
    m = _first_moments(x, mask, total=True)
    if m["n"] < 1:
        raise too_few("drift_norm", m["n"], 1, m["n_excluded"])
    return float(torch.linalg.vector_norm(m["sum"] / m["n"]))


def mean_norm(x, mask=None) -> float:
    """Mean of the row norms, (1/n) sum_i ||x_i||_2, in the units of x. Needs 1 valid row."""
    m = _first_moments(x, mask)
    if m["n"] < 1:
        raise too_few("mean_norm", m["n"], 1, m["n_excluded"])
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
    t, keep = as_rows(x, mask)
    index, norms, n_bad = [], [], 0
    with one_thread():
        for ch in scan(t, keep):
            index.append(ch.index)
            norms.append(ch.norms.double())
            n_bad += ch.n_excluded
    index = np.concatenate(index) if index else np.empty(0, dtype=np.int64)
    n = index.size
    if n < 2:
        raise too_few("sampled_pair_cosine", n, 2, n_bad)
    norms = torch.cat(norms).numpy()
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, size=n_pairs)
    j = rng.integers(0, n - 1, size=n_pairs)
    j += j >= i  # uniform over the n - 1 other rows
    cos = np.empty(n_pairs)
    step = max(256, CHUNK_BYTES // (8 * t.shape[1]))
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


def batch_moments(c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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


def chan_merge(n_a, mean_a, scat_a, n_b, mean_b, scat_b):
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


def sigma1_share_from_scatter(scatter: torch.Tensor | np.ndarray) -> float:
    """sigma_1^2 / sum_i sigma_i^2 from the centred d x d scatter matrix (float64), where it is: its top eigenvalue
    (``measure.eigen.top_eigenvalue``: Lanczos, ~2 d^2 flops a step, certified within ``TOP_EIGENVALUE_REL_TOL`` = 1e-8
    relative of lambda_1, or torch.linalg.eigvalsh where no certificate holds) over its trace. The share is then
    within 1e-8 relative of the exact share of this scatter, far inside ``measure.rows.DEVICE_SIGMA1_SHARE_ABS`` and
    four orders below the decimals a page shows."""
    s = torch.as_tensor(scatter, dtype=torch.float64)
    s = (s + s.T) / 2
    total = float(torch.trace(s))
    if not total > 0:
        raise ValueError("sigma1_share is undefined: the rows have zero variance (all valid rows are identical)")
    return top_eigenvalue(s).value / total


def sigma1_share(x, mask=None) -> float:
    """Paper 2's anisotropy: sigma_1^2 / sum_i sigma_i^2 of the centred matrix X - mean, i.e. the top eigenvalue's share
    of the covariance spectrum (dimensionless, in [1/d, 1]).

    The centred d x d scatter matrix of each chunk (a float32 product for narrow inputs, float64 for float64 ones) is
    accumulated in float64 with Chan's pairwise update, so a large mean costs no precision; only its top eigenvalue is
    computed. Needs at least 2 valid, not all identical, rows.
    """
    t, keep = as_rows(x, mask)
    d = t.shape[1]
    dev = device_for(t)
    n, n_bad = 0, 0
    mean, scat = torch.zeros(d, dtype=torch.float64, device=dev), torch.zeros(d, d, dtype=torch.float64, device=dev)
    for ch in scan(t, keep, chunk_rows=MOMENT_CHUNK_ROWS, device=dev):
        n_bad += ch.n_excluded
        if ch.rows.shape[0]:
            bm, bs = batch_moments(ch.rows)
            n, mean, scat = chan_merge(n, mean, scat, ch.rows.shape[0], bm, bs)
    if n < 2:
        raise too_few("sigma1_share", n, 2, n_bad)
    return sigma1_share_from_scatter(scat)


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
    rows, n_bad = valid_rows(x, mask)
    n = rows.shape[0]
    if n < batch_size:
        raise too_few(f"batched(batch_size={batch_size})", n, batch_size, n_bad)
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
    rows, n_bad = valid_rows(x, mask)
    n = rows.shape[0]
    if n < 2:
        raise too_few("bootstrap_mean_cosine", n, 2, n_bad)
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
