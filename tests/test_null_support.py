"""The isotropic reference of a layer whose outputs are non-negative (post-ReLU): vectors drawn with the layer's own
pooled distribution of values (measure.baseline.support_null_cosine), on rectified Gaussian vectors where the answer
is known, and through the layer-wise accumulator that records it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from anisotropy.experiments.layerwise import FirstMoments
from anisotropy.measure import baseline, metrics


def null_of(x: np.ndarray) -> float:
    return baseline.support_null_cosine(float(x.sum()), float((x**2).sum()), x.shape[0], x.shape[1])


def test_rectified_gaussians_have_the_null_one_over_pi_and_their_mean_cosine_is_it():
    rng = np.random.default_rng(0)
    x = np.maximum(rng.standard_normal((400, 4096)), 0.0)
    # E[max(0, z)]^2 / E[max(0, z)^2] = (1 / 2pi) / (1 / 2) = 1 / pi
    assert null_of(x) == pytest.approx(1 / np.pi, rel=0.01)
    # two independent rectified Gaussian vectors: their mean cosine is the null, far above the Gaussian q95
    assert metrics.mean_cosine(x) == pytest.approx(1 / np.pi, rel=0.01)
    assert float(baseline.isotropic_cosine_quantile(0.95, 4096)) < 0.03


def test_plain_gaussians_have_a_null_near_zero():
    x = np.random.default_rng(1).standard_normal((400, 4096))
    assert abs(null_of(x)) < 1e-3


def test_a_planted_common_direction_stands_above_the_null():
    """Rectified vectors with a common direction added before the ReLU: the mean cosine rises above the null of
    their pooled values, which has no preferred direction."""
    rng = np.random.default_rng(2)
    d = 2048
    direction = rng.standard_normal(d)
    x = np.maximum(rng.standard_normal((300, d)) + 1.5 * direction, 0.0)
    assert metrics.mean_cosine(x) > null_of(x) + 0.2
    # the same values shuffled across coordinates within each vector: the direction is gone, the null is the same
    shuffled = np.array([rng.permutation(row) for row in x])
    assert null_of(shuffled) == pytest.approx(null_of(x))
    assert metrics.mean_cosine(shuffled) == pytest.approx(null_of(x), abs=0.02)


def test_the_layer_accumulator_records_the_support_and_its_null():
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((64, 1024)), 0.0).astype(np.float32)
    row = FirstMoments(1024).update(torch.from_numpy(x)).as_dict()
    assert row["nonnegative"] is True and row["null_support"] == pytest.approx(null_of(x.astype(np.float64)), rel=1e-9)
    signed = FirstMoments(1024).update(torch.from_numpy(x - 0.1)).as_dict()
    assert signed["nonnegative"] is False


def test_the_support_null_spreads_no_wider_than_the_isotropic_one_for_rectified_gaussians():
    """claims.rules.p1_s3.above_null reads a non-negative layer's excess over its support null against the isotropic
    q95 of its dimension: for rectified Gaussian coordinates the null's own spread is narrower (standard deviation
    about 0.74/sqrt(d), against 1/sqrt(d)), so a layer counted above it is above its own null's 95th percentile."""
    rng = np.random.default_rng(4)
    d, pairs = 512, 4000
    x, y = (np.maximum(rng.standard_normal((pairs, d)), 0.0) for _ in range(2))
    cos = (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    assert cos.mean() == pytest.approx(1 / np.pi, abs=0.005)
    assert cos.std() * np.sqrt(d) == pytest.approx(0.74, abs=0.04)
    assert np.quantile(cos, 0.95) - 1 / np.pi < 0.85 * float(baseline.isotropic_cosine_quantile(0.95, d))
