"""The isotropic null of Appendix B against its closed form and against simulation."""

import numpy as np
import pytest
from scipy import integrate, special

from anisotropy.measure import baseline


@pytest.mark.parametrize("d", [16, 128, 768, 4096])
def test_density_integrates_to_one_and_has_variance_one_over_d(d):
    mass, _ = integrate.quad(baseline.isotropic_cosine_pdf, -1, 1, args=(d,), points=[0.0], limit=200)
    var, _ = integrate.quad(lambda t: t * t * baseline.isotropic_cosine_pdf(t, d), -1, 1, points=[0.0], limit=200)
    assert mass == pytest.approx(1.0, abs=1e-8)
    assert var == pytest.approx(1.0 / d, rel=1e-6)  # E[t^2] = 1/d exactly for isotropic directions


def test_density_matches_textbook_form_in_dimension_three():
    # In d = 3 the cosine of two uniform directions is uniform on [-1, 1] (Archimedes).
    t = np.linspace(-0.99, 0.99, 11)
    np.testing.assert_allclose(baseline.isotropic_cosine_pdf(t, 3), 0.5, rtol=1e-12)


@pytest.mark.parametrize("d", [16, 64, 768, 2048])
def test_monte_carlo_q95_matches_exact(d):
    n = 40_000
    samples = baseline.sample_isotropic_cosines(d, n, seed=d)
    exact = float(baseline.isotropic_cosine_quantile(0.95, d))
    # Standard error of an empirical q-quantile: sqrt(q(1-q)/n) / f(x_q). Allow 4 standard errors.
    se = np.sqrt(0.95 * 0.05 / n) / float(baseline.isotropic_cosine_pdf(exact, d))
    assert abs(np.quantile(samples, 0.95) - exact) < 4 * se, (np.quantile(samples, 0.95), exact, se)


def test_q95_tends_to_gaussian_limit():
    # For large d, sqrt(d) * t is asymptotically N(0, 1): sqrt(d) * q95 -> Phi^{-1}(0.95) = 1.6449.
    z95 = special.ndtri(0.95)
    assert np.sqrt(8192) * baseline.isotropic_cosine_quantile(0.95, 8192) == pytest.approx(z95, rel=2e-4)


def test_dimension_must_be_at_least_two():
    with pytest.raises(ValueError, match="d >= 2"):
        baseline.isotropic_cosine_quantile(0.95, 1)


def test_abs_cosine_tail_is_the_two_sided_law():
    """P(|cos| >= t): 1 at t = 0, 5% at the 0.975-quantile; at d = 3 the cosine is uniform on [-1, 1] (Archimedes),
    so the tail is 1 - t; against Monte Carlo at d = 64, where Paper 1 quotes its head dimension."""
    from anisotropy.measure.baseline import isotropic_abs_cosine_tail, isotropic_cosine_quantile, sample_isotropic_cosines

    assert isotropic_abs_cosine_tail(0.0, 64) == pytest.approx(1.0)
    assert isotropic_abs_cosine_tail(isotropic_cosine_quantile(0.975, 64), 64) == pytest.approx(0.05)
    for t in (0.1, 0.5, 0.9):
        assert isotropic_abs_cosine_tail(t, 3) == pytest.approx(1 - t)
    sample = sample_isotropic_cosines(64, 200_000, seed=3)
    assert float((np.abs(sample) >= 0.3).mean()) == pytest.approx(isotropic_abs_cosine_tail(0.3, 64), abs=0.003)
