"""The largest eigenvalue of a symmetric positive semi-definite matrix (a centred scatter), where the matrix is and in
its dtype, with a certificate: ``top_eigenvalue(s)`` returns lambda_1 within ``TOP_EIGENVALUE_REL_TOL`` relative,
proven for the matrix it was given, or the largest eigenvalue of ``torch.linalg.eigvalsh`` where no proof is had.

Why: sigma_1's share (``measure.statistics``) needs lambda_1 and the trace only. A full eigendecomposition costs
~4/3 d^3 flops, at a GPU's float64 rate (1/32 of float32 on a T4), and on the CPU scipy's eigh of the top
eigenvalue alone took 17 ms at d = 576; Lanczos costs ~2 d^2 per step, a few dozen steps (2 ms there).
``torch.lobpcg`` is not used: it has open correctness issues (pytorch/pytorch#101075, #114081).

Method. Lanczos with full reorthogonalisation (classical Gram-Schmidt twice) from a fixed random start, checked every
``LANCZOS_CHECK`` steps on the host (one sync per check), up to ``LANCZOS_MAX_STEPS``. For the top Ritz vector v (unit
in exact arithmetic) its Rayleigh quotient rho = v'Sv / v'v and residual eps = ||Sv - rho v|| / ||v|| are measured
explicitly; delta = 4 gamma_{d+2} ||S||_F bounds their rounding (gamma_k = k u / (1 - k u), u the dtype's unit
roundoff). Then lambda_1 >= lo = rho - delta (a Rayleigh quotient never exceeds lambda_1), and an upper bound comes
from one of two certificates, in this order:

1. "gap": lambda_2^2 <= ||S||_F^2 - lambda_1^2 <= ||S||_F^2 - lo^2 =: mu_2^2. If lo > mu_2, lambda_1 is the only
   eigenvalue above mu_2 and Kato-Temple's inequality gives lambda_1 <= rho + delta + (eps + delta)^2 / (lo - mu_2):
   the error is quadratic in the residual. Costs nothing more; holds where one direction dominates the spectrum.
2. "inertia": sigma = lo (1 + rel_tol); a Cholesky factorisation of tau I - S, tau = sigma - c, that runs to
   completion in floating point proves sigma I - S positive definite, i.e. lambda_1 < sigma, when
   c > gamma_{d+1} / (1 - gamma_{d+1}) tr(tau I - S) + u (tau + max_i S_ii): the computed factor R satisfies
   R'R = tau I - S + E + F with |E| <= gamma_{d+1} |R'||R| (Higham 2002, Theorem 10.3, for any order of the inner
   products), so ||E||_2 <= gamma_{d+1} ||R||_F^2 <= gamma_{d+1} / (1 - gamma_{d+1}) tr(tau I - S), and F, the rounding
   of the diagonal tau - S_ii, is at most u (tau + max S_ii). ~d^3 / 3 flops, in the matrix's dtype; it holds for a
   near-degenerate top pair and a flat spectrum, where no gap can be certified. c ~ d^2 u sigma (7e-10 sigma at
   d = 2560 in float64): at rel_tol = 1e-8 the certificate serves up to d ~ 6,000.
3. Otherwise (the certificate failed, or Lanczos did not converge): ``torch.linalg.eigvalsh`` of the whole matrix.

Guarantee: ``|value - lambda_1| <= rel_tol * lambda_1`` for the matrix given (exact arithmetic on it), where the
certificate is "gap" or "inertia"; where it is "eigvalsh", eigvalsh's own backward error (~d u ||S||_2). Against
``eigvalsh`` of the same matrix the two therefore agree within rel_tol + O(d u) relative (tests/test_top_eigenvalue.py
on planted spectra: a dominant direction, a decaying and a bulk-edge spectrum, a near-degenerate top pair, rank one,
flat, d up to 2560).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch

# Relative accuracy certified on lambda_1 (hence on sigma_1's share, which divides it by the same trace): 1e-8, four
# orders below the 3-4 decimals a page shows, and below the device path's float32 products (``DEVICE_SIGMA1_SHARE_ABS``
# ~1e-4); the inertia certificate needs rel_tol above ~2 d^2 u (1.5e-9 at d = 2560 in float64).
TOP_EIGENVALUE_REL_TOL = 1e-8
LANCZOS_CHECK = 16  # Lanczos steps between two convergence checks (each one host sync)
LANCZOS_MAX_STEPS = 256  # then the certificate decides, or eigvalsh
START_SEED = 0  # the Lanczos start vector: standard normal from this seed (the same on every device)


@dataclass(frozen=True)
class TopEigenvalue:
    """lambda_1 of a symmetric PSD matrix: ``value``, with ``|value - lambda_1| <= bound`` (certified; NaN where
    ``certificate`` is "eigvalsh": its own error, ~d u ||S||_2, is not bounded here), how it was certified ("gap",
    "inertia" or "eigvalsh"), and the Lanczos steps run."""

    value: float
    bound: float
    certificate: str  # "gap", "inertia" or "eigvalsh"
    steps: int


def _gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


def start_vector(d: int, dtype: torch.dtype, device) -> torch.Tensor:
    """The Lanczos start vector: d standard normal numbers from ``START_SEED``, drawn on the CPU, unit length."""
    q = torch.randn(d, generator=torch.Generator().manual_seed(START_SEED), dtype=torch.float64)
    return (q / torch.linalg.vector_norm(q)).to(device=device, dtype=dtype)


def _lanczos(s: torch.Tensor, q0: torch.Tensor, rel_tol: float, max_steps: int, floor: float
             ) -> tuple[torch.Tensor, int]:
    """The top Ritz vector of Lanczos on ``s`` from ``q0`` and the steps it took; stops when the Ritz estimate of
    lambda_1's error, est^2 / max(theta_1 - theta_2, est) (est = |beta_m y_m|), is below rel_tol / 10 of theta_1, when
    the Krylov space is invariant (a beta at most ``floor``, the rounding level), or at ``max_steps``."""
    d = s.shape[0]
    steps = min(max_steps, d)
    q = torch.zeros(d, steps + 1, dtype=s.dtype, device=s.device)
    alpha = torch.zeros(steps, dtype=torch.float64, device=s.device)
    beta = torch.zeros(steps, dtype=torch.float64, device=s.device)
    q[:, 0] = q0
    done = 0
    while True:
        for j in range(done, min(done + LANCZOS_CHECK, steps)):
            w = s @ q[:, j]
            alpha[j] = q[:, j] @ w
            basis = q[:, : j + 1]
            for _ in range(2):  # twice is enough (Giraud, Langou & Rozloznik 2005)
                w = w - basis @ (basis.T @ w)
            beta[j] = torch.linalg.vector_norm(w)
            q[:, j + 1] = w / beta[j]
        done = min(done + LANCZOS_CHECK, steps)
        a, b = alpha[:done].cpu().numpy(), beta[:done].cpu().numpy()
        small = np.flatnonzero(b <= floor)
        m = int(small[0]) + 1 if small.size else done  # the first invariant subspace found ends the basis
        theta, y = (a[:1], np.ones((1, 1))) if m == 1 else scipy.linalg.eigh_tridiagonal(a[:m], b[: m - 1])
        est = abs(b[m - 1] * y[-1, -1]) if m == done else 0.0
        gap = theta[-1] - theta[-2] if m > 1 else math.inf
        if (est * est / max(gap, est, 1e-300) <= rel_tol / 10 * theta[-1]) or m < done or done == steps:
            top = torch.from_numpy(y[:, -1].copy()).to(device=s.device, dtype=s.dtype)
            return q[:, :m] @ top, done


def top_eigenvalue(s: torch.Tensor, rel_tol: float = TOP_EIGENVALUE_REL_TOL, start: torch.Tensor | None = None,
                   max_steps: int = LANCZOS_MAX_STEPS) -> TopEigenvalue:
    """lambda_1 of the symmetric positive semi-definite ``s`` (d x d, any float dtype, any device), certified within
    ``rel_tol`` relative (see the module docstring); ``start``: the Lanczos start vector (default ``start_vector``)."""
    d = s.shape[0]
    u = float(torch.finfo(s.dtype).eps) / 2
    if d <= 2:
        return TopEigenvalue(float(torch.linalg.eigvalsh(s)[-1]), math.nan, "eigvalsh", 0)
    fro2, trace, diag_max = torch.stack([(s * s).sum(), torch.trace(s), torch.diagonal(s).max()]).double().tolist()
    fro_hi = math.sqrt(fro2 * (1 + 2 * _gamma(d * d, u)))  # the float sum of d^2 squares, rounded up
    q0 = start_vector(d, s.dtype, s.device) if start is None else (start / torch.linalg.vector_norm(start)).to(s)
    v, steps = _lanczos(s, q0, rel_tol, max_steps, floor=16 * d * u * fro_hi)
    sv = s @ v
    nv2 = v @ v
    rho_t = (v @ sv) / nv2
    nv2, rho, eps = torch.stack([nv2, rho_t, torch.linalg.vector_norm(sv - rho_t * v)]).double().tolist()
    eps /= math.sqrt(nv2)
    delta = 4 * _gamma(d + 2, u) * fro_hi
    lo = rho - delta
    if lo > 0 and delta <= rel_tol / 10 * lo:
        mu2 = math.sqrt(max(fro_hi * fro_hi - lo * lo, 0.0)) * (1 + 4 * u)
        if lo > mu2:
            above = delta + (eps + delta) ** 2 / (lo - mu2)
            if above <= rel_tol * lo:
                return TopEigenvalue(rho, max(above, delta), "gap", steps)
        sigma = lo * (1 + rel_tol)
        g = _gamma(d + 1, u)
        c = 1.01 * (g / (1 - g) * (d * sigma - trace * (1 - _gamma(d, u))) + u * (sigma + diag_max))
        if c <= rel_tol / 2 * lo:
            tau = sigma - c
            shifted = torch.diag_embed(torch.full((d,), tau, dtype=s.dtype, device=s.device)) - s
            if int(torch.linalg.cholesky_ex(shifted).info) == 0:
                return TopEigenvalue(rho, rel_tol * lo, "inertia", steps)
    return TopEigenvalue(float(torch.linalg.eigvalsh(s)[-1]), math.nan, "eigvalsh", steps)


def top_eigenvalue_flops(d: int) -> float:
    """Flops of ``top_eigenvalue`` on a d x d matrix by its certified path, at most: k = ``LANCZOS_MAX_STEPS`` steps
    (a matrix-vector product, 2 d^2, and the reorthogonalisation against the j vectors so far, twice, 8 d j), the Ritz
    vector (2 d k) and its residual (2 d^2), and the inertia certificate's Cholesky, d^3 / 3 (the gap certificate
    needs none). The fallback, eigvalsh's ~4/3 d^3, is not counted: it runs where no certificate holds (a top
    eigenvector the start cannot reach)."""
    k = min(LANCZOS_MAX_STEPS, d)
    return 2.0 * (k + 1) * d * d + 4.0 * d * k * (k + 1) + 2.0 * d * k + d**3 / 3
