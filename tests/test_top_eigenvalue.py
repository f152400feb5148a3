"""measure.eigen.top_eigenvalue, the device path's lambda_1 of a scatter, against planted spectra and eigvalsh.

Planted: S = H D H' with D the spectrum and H a product of three Householder reflections (dense, orthogonal, built in
O(d^2)); lambda_1 = max(D) up to the rounding of building S, 6 products with d-term sums, at most 6 gamma_d ||D||
relative (1.9e-12 at d = 2560; ``BUILT`` allows 1e-11). Every planted case must be certified ("gap" or "inertia"),
not handed to eigvalsh, so the fast path is what is tested; a top eigenvector the start vector cannot reach must
not be certified wrongly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anisotropy.measure import eigen, statistics

U64 = float(torch.finfo(torch.float64).eps) / 2
BUILT = 1e-11  # relative rounding of building the planted S (module docstring)
TOL = eigen.TOP_EIGENVALUE_REL_TOL


def planted(spectrum: np.ndarray, seed: int = 0) -> torch.Tensor:
    d = len(spectrum)
    g = torch.Generator().manual_seed(seed)
    s = torch.diag(torch.tensor(spectrum, dtype=torch.float64))
    for _ in range(3):
        h = torch.randn(d, generator=g, dtype=torch.float64)
        h /= torch.linalg.vector_norm(h)
        s = s - 2 * torch.outer(h, h @ s)
        s = s - 2 * torch.outer(s @ h, h)
    return (s + s.T) / 2


def spectra(d: int) -> dict[str, tuple[np.ndarray, str]]:
    """name -> (spectrum, the certificate it must get)."""
    i = np.arange(d, dtype=np.float64)
    return {
        "one dominant direction": (np.r_[50.0, 0.5 + 0.4 * i[1:] / d], "gap"),
        "decaying 1/i": (1 / (1 + i), "gap"),
        "slowly decaying 1/sqrt(i)": (1 / np.sqrt(1 + i), "inertia"),
        # Marchenko-Pastur-like edge: gaps ~ d^(-2/3), as in the scatter of isotropic noise
        "bulk edge": (3.2 - 3.1 * (i / d) ** (2 / 3), "inertia"),
        "near-degenerate top pair": (np.r_[1.0, 1 - 1e-10, 0.5 / (1 + i[2:])], "inertia"),
        "rank one": (np.r_[7.0, np.zeros(d - 1)], "gap"),
        "flat": (np.full(d, 2.0), "inertia"),
    }


@pytest.mark.parametrize("name", list(spectra(8)))
def test_planted_spectra_at_the_widest_paper_width_are_certified_within_the_tolerance(name):
    spectrum, certificate = spectra(2560)[name]
    top = eigen.top_eigenvalue(planted(spectrum))
    want = spectrum.max()
    assert top.certificate == certificate
    assert top.bound <= TOL * want
    assert abs(top.value - want) <= top.bound + BUILT * want


@pytest.mark.parametrize("name", list(spectra(8)))
def test_planted_spectra_agree_with_eigvalsh_within_the_tolerance(name):
    # eigvalsh's own error is ~d u64 ||S||_2 (backward stable); 8 d u64 allows for it
    spectrum, _ = spectra(384)[name]
    s = planted(spectrum, seed=1)
    top = eigen.top_eigenvalue(s)
    full = float(torch.linalg.eigvalsh(s)[-1])
    assert top.certificate != "eigvalsh"
    assert abs(top.value - full) <= (TOL + 8 * 384 * U64) * full


@pytest.mark.parametrize("spectrum", [np.r_[10.0, 1 / np.arange(2, 513)], np.r_[1.0, 0.999, 1 / np.arange(3, 513)],
                                      np.r_[2.0, np.ones(511)]], ids=["dominant", "close pair", "one above flat"])
def test_a_top_eigenvector_the_start_cannot_reach_is_not_certified_wrongly(spectrum):
    # S diagonal and the start vector without a first component: every Krylov vector stays without one (exactly, in
    # floating point), so Lanczos sees the spectrum without lambda_1; neither certificate may pass on the second
    # eigenvalue, and eigvalsh gives lambda_1.
    s = torch.diag(torch.tensor(spectrum))
    start = torch.randn(len(spectrum), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    start[0] = 0
    top = eigen.top_eigenvalue(s, start=start)
    assert top.certificate == "eigvalsh"
    assert top.value == pytest.approx(spectrum.max(), rel=1e-12)


def test_the_share_is_the_certified_eigenvalue_over_the_trace(monkeypatch):
    # sigma1_share_from_scatter divides top_eigenvalue's value by the trace: the share of a planted scatter is within
    # the tolerance of max(D) / sum(D), and no full eigendecomposition runs.
    spectrum = np.r_[30.0, 1 / np.sqrt(np.arange(1, 768))]
    s = planted(spectrum)

    def refuse(*args, **kwargs):
        raise AssertionError("eigvalsh ran where a certificate holds")
    monkeypatch.setattr(torch.linalg, "eigvalsh", refuse)
    share = statistics.sigma1_share_from_scatter(s)
    want = spectrum.max() / spectrum.sum()
    assert abs(share - want) <= (TOL + BUILT + 768 * U64) * want
