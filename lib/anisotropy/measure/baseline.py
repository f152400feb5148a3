"""The isotropic null (Paper 1, Appendix B): the cosine similarity of two independent isotropic Gaussian vectors.

For u, v ~ N(0, I_d) independent, t = cos(u, v) has density
    f_d(t) = Γ(d/2) / (√π Γ((d-1)/2)) · (1 - t²)^((d-3)/2),   t ∈ [-1, 1],
i.e. (1 + t)/2 ~ Beta((d-1)/2, (d-1)/2). Its mean is 0 and its variance 1/d, so the 95th percentile shrinks like
1.645/√d: a mean cosine above it is not what random directions give.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special, stats


def _beta(d: int) -> stats.rv_continuous:
    if d < 2:
        raise ValueError(f"the cosine null needs dimension d >= 2, got d={d}")
    a = (d - 1) / 2
    return stats.beta(a, a, loc=-1.0, scale=2.0)


def isotropic_cosine_pdf(t: np.ndarray, d: int) -> np.ndarray:
    """Exact density f_d(t) of the cosine of two independent isotropic Gaussian vectors in dimension d."""
    t = np.asarray(t, dtype=np.float64)
    log_norm = special.gammaln(d / 2) - 0.5 * np.log(np.pi) - special.gammaln((d - 1) / 2)
    with np.errstate(divide="ignore"):
        log_f = log_norm + (d - 3) / 2 * np.log1p(-np.minimum(t**2, 1.0))
    return np.where(np.abs(t) < 1, np.exp(log_f), 0.0)


def isotropic_cosine_quantile(q: float | np.ndarray, d: int) -> float | np.ndarray:
    """Exact q-quantile of that cosine (e.g. q = 0.95 for the paper's reference line)."""
    return _beta(d).ppf(q)


def isotropic_abs_cosine_tail(t: float | np.ndarray, d: int) -> float | np.ndarray:
    """P(|cos| >= t) for two independent isotropic Gaussian vectors in dimension d (two-sided tail; 0.05 at
    t = the 0.975-quantile)."""
    return 2 * _beta(d).sf(np.abs(t))


def sample_isotropic_cosines(d: int, n_pairs: int, seed: int = 0, chunk_elements: int = 2**24) -> np.ndarray:
    """Monte Carlo: cosines of ``n_pairs`` independent pairs of N(0, I_d) vectors, drawn in memory-bounded chunks."""
    rng = np.random.default_rng(seed)
    out = np.empty(n_pairs)
    rows = max(1, chunk_elements // (2 * d))
    for start in range(0, n_pairs, rows):
        m = min(rows, n_pairs - start)
        u = rng.standard_normal((m, d), dtype=np.float32)
        v = rng.standard_normal((m, d), dtype=np.float32)
        dot = np.einsum("ij,ij->i", u, v, dtype=np.float64)
        out[start : start + m] = dot / np.sqrt(np.einsum("ij,ij->i", u, u, dtype=np.float64) * np.einsum("ij,ij->i", v, v, dtype=np.float64))
    return out


def simulated_cosines(dims, n_pairs: int, seed: int = 0) -> pd.DataFrame:
    """``sample_isotropic_cosines`` for every dimension of ``dims``: columns ``d`` and ``cosine`` (float32), ``n_pairs``
    rows per dimension, dimension d drawn with seed ``seed + d`` (Appendix B's Monte Carlo check of the density)."""
    parts = [pd.DataFrame({"d": d, "cosine": sample_isotropic_cosines(d, n_pairs, seed=seed + d).astype(np.float32)})
             for d in dims]
    return pd.concat(parts, ignore_index=True)


# ---- a reference that fits the support of a layer's activations ------------------------------------------------------

def support_null_cosine(sum_entries: float, sum_squares: float, n: int, d: int) -> float:
    """The mean cosine of two independent vectors whose d coordinates are i.i.d. draws from the layer's own pooled
    distribution of values (large-d limit): m1^2 / m2, with m1 = sum_entries / (n d) the mean and m2 = sum_squares /
    (n d) the mean square of all n x d entries. The isotropic reference of a layer whose outputs are non-negative
    (post-ReLU): it keeps their support and scale but has no preferred direction; for rectified standard Gaussian
    coordinates it is (1/2pi) / (1/2) = 1/pi, not the 0 of N(0, I_d). It pools the coordinates rather than keeping
    each one's distribution, because keeping each coordinate's mean would keep the common drift itself, which is the
    anisotropy the mean cosine measures."""
    if n < 1 or sum_squares <= 0:
        return float("nan")
    m1, m2 = sum_entries / (n * d), sum_squares / (n * d)
    return float(m1 * m1 / m2)
