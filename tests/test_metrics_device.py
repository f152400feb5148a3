"""The device path of anisotropy.measure.metrics against the CPU reference and against float64 brute force.

``metrics.on_device(torch.device("cpu"))`` runs the device code (torch only, the dtypes it uses on CUDA) without a
GPU; with CUDA present the same comparisons run on the GPU too. Every comparison uses a ``metrics.DEVICE_*`` bound,
derived in metrics.py from the precision of each step before any number was seen; a one-path bound (device path
against exact float64 arithmetic) is half of the two-path one. Sizes are small so the file runs in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from anisotropy.measure import metrics as M
from anisotropy.measure import statistics, streaming, twonn  # the owners of the steps patched and tested

CPU = torch.device("cpu")
DEVICES = [CPU] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def gaussian() -> np.ndarray:
    return rng(0).standard_normal((1500, 64)).astype(np.float32)


def offset_cloud() -> np.ndarray:
    """Hidden-state-like: a common offset of norm ~300 along one direction, unit-scale noise, norms in the hundreds."""
    g = rng(1)
    direction = g.standard_normal(192)
    direction *= 300 / np.linalg.norm(direction)
    return (g.standard_normal((1500, 192)) * np.linspace(0.2, 3.0, 192) + direction).astype(np.float32)


def planted_cube(dim: int = 4) -> np.ndarray:
    """Uniform points of a dim-cube embedded isometrically in R^128 with an offset: a planted TwoNN dimension."""
    g = rng(2)
    q, _ = np.linalg.qr(g.standard_normal((128, dim)))
    return (g.random((1500, dim)) @ q.T + 20.0).astype(np.float32)


INPUTS = {
    "gaussian": lambda: torch.from_numpy(gaussian()),
    "offset": lambda: torch.from_numpy(offset_cloud()),
    "planted": lambda: torch.from_numpy(planted_cube()),
    "offset_bf16": lambda: torch.from_numpy(offset_cloud()).to(torch.bfloat16),
    "offset_fp16": lambda: torch.from_numpy(offset_cloud()).to(torch.float16),
    "gaussian_fp64": lambda: torch.from_numpy(gaussian().astype(np.float64) * 3 + 1),
}


@pytest.fixture
def no_cpu_reference(monkeypatch):
    """Inside the device path the CPU reference's numpy/scipy steps must not run: make them fail if called."""
    def refuse(*args, **kwargs):
        raise AssertionError("the device path called a CPU-reference step")
    for module, name in ((statistics, "sigma1_share_from_scatter"), (streaming, "sigma1_share_from_scatter"),
                         (twonn, "_exact_sq"), (twonn, "_unique_rows")):
        monkeypatch.setattr(module, name, refuse)


# ---------------------------------------------------------------------------------------------------------------------
# Ground truth in float64 numpy, the definitions themselves
# ---------------------------------------------------------------------------------------------------------------------


def truth(x: torch.Tensor) -> dict:
    a = x.double().numpy()
    n = len(a)
    u = a / np.linalg.norm(a, axis=1, keepdims=True)
    c = u @ u.T
    s = np.linalg.svd(a - a.mean(axis=0), compute_uv=False)
    return {"mean_cosine": float((c.sum() - np.trace(c)) / (n * (n - 1))),
            "drift_norm": float(np.linalg.norm(a.mean(axis=0))),
            "mean_norm": float(np.linalg.norm(a, axis=1).mean()),
            "sigma1_share": float(s[0] ** 2 / np.sum(s**2))}


def brute_two_nearest_sq(x: torch.Tensor) -> np.ndarray:
    a = x.double().numpy()
    dist = cdist(a, a, "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    return np.sort(dist, axis=1)[:, :2]


def twonn_from_sq(r: np.ndarray, discard: float = 0.1) -> tuple[float, float]:
    """The TwoNN fit (slope through the origin of -log(1 - i/N) on sorted log mu) and its first-order sensitivity to
    a relative change of DEVICE_TWONN_SQ_REL in every squared distance: log mu = (log r2 - log r1) / 2 moves by at
    most that much (sorting is 1-Lipschitz in the max norm), and the slope b = lm.y / lm.lm by at most
    delta (sum|y| + 2 |b| sum|lm|) / lm.lm."""
    lm = np.sort(0.5 * np.log(r[:, 1] / r[:, 0]))
    n = lm.size
    n_fit = min(int(n * (1 - discard)), n - 1)
    lm = lm[:n_fit]
    y = -np.log1p(-np.arange(1, n_fit + 1) / n)
    slope = float(lm @ y / (lm @ lm))
    delta = M.DEVICE_TWONN_SQ_REL * 1.01  # 1.01: second-order terms, delta^2 ~ 1e-22
    return slope, delta * (np.abs(y).sum() + 2 * abs(slope) * np.abs(lm).sum()) / float(lm @ lm)


# ---------------------------------------------------------------------------------------------------------------------
# One-shot metrics
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("name", list(INPUTS))
def test_first_and_second_moments_match_the_reference_and_the_truth(name, device, no_cpu_reference):
    x = INPUTS[name]()
    exact = truth(x)
    with M.on_device(device):
        dev = {f: getattr(M, f)(x.to(device)) for f in ("mean_cosine", "drift_norm", "mean_norm", "sigma1_share")}
    # (sigma1_share's CPU reference is refused here by the fixture: it is compared in the next test)
    ref = {f: getattr(M, f)(x) for f in ("mean_cosine", "drift_norm", "mean_norm")}
    mean_norm = exact["mean_norm"]
    for want, half in ((ref, 1.0), (exact, 0.5)):
        assert abs(dev["mean_cosine"] - want["mean_cosine"]) <= half * M.DEVICE_MEAN_COSINE_ABS
        assert abs(dev["mean_norm"] - want["mean_norm"]) <= half * M.DEVICE_NORM_REL * mean_norm
        assert abs(dev["drift_norm"] - want["drift_norm"]) <= half * M.DEVICE_NORM_REL * mean_norm
    assert abs(dev["sigma1_share"] - exact["sigma1_share"]) <= 0.5 * M.DEVICE_SIGMA1_SHARE_ABS


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("name", list(INPUTS))
def test_sigma1_share_matches_the_cpu_reference(name, device):
    x = INPUTS[name]()
    with M.on_device(device):
        got = M.sigma1_share(x.to(device))
    assert abs(got - M.sigma1_share(x)) <= M.DEVICE_SIGMA1_SHARE_ABS


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("name", ["gaussian", "offset", "planted", "offset_bf16", "gaussian_fp64"])
def test_twonn_neighbours_and_dimension_match_the_reference_and_brute_force(name, device):
    x = INPUTS[name]()
    rows = x.float() if x.dtype != torch.float64 else x
    brute = brute_two_nearest_sq(rows)
    with M.on_device(device):
        r_dev = twonn._two_nearest_sq(rows.to(device)).cpu().numpy()
        est = M.twonn_estimate(x.to(device))
    r_cpu = twonn._two_nearest_sq(rows).numpy()
    # The same two nearest rows on both paths and in brute force: their squared distances agree to rounding.
    np.testing.assert_array_less(np.abs(r_dev - r_cpu), M.DEVICE_TWONN_SQ_REL * r_cpu)
    np.testing.assert_array_less(np.abs(r_dev - brute), M.DEVICE_TWONN_SQ_REL * brute)
    want, bound = twonn_from_sq(brute)
    assert abs(est.dimension - want) <= bound
    assert abs(est.dimension - M.twonn_dimension(x)) <= bound
    assert (est.n, est.n_duplicates, est.n_excluded) == (len(x), 0, 0)


def test_twonn_device_path_uses_no_cpu_reference_step(no_cpu_reference):
    x = torch.from_numpy(planted_cube())
    with M.on_device(CPU):
        got = M.twonn_dimension(x)
    assert 3.5 < got < 4.5  # the planted dimension 4 (1500 points: TwoNN's spread is ~0.1)


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_duplicates_masks_and_bad_rows_are_handled_alike(device):
    g = rng(5)
    x = g.standard_normal((600, 32)).astype(np.float32)
    x[100:140] = x[:40]  # 40 duplicates
    x[200] = 0.0
    x[201, 3] = np.nan
    mask = np.ones(600, dtype=bool)
    mask[300:350] = False
    t = torch.from_numpy(x)
    with M.on_device(device):
        dev = M.twonn_estimate(t.to(device), mask=mask)
        dev_cos = M.mean_cosine(t.to(device), mask=mask)
        dev_share = M.sigma1_share(t.to(device), mask=mask)
    ref = M.twonn_estimate(t, mask=mask)
    assert (dev.n, dev.n_duplicates, dev.n_excluded, dev.n_fit) == (ref.n, ref.n_duplicates, ref.n_excluded, ref.n_fit)
    assert (ref.n_duplicates, ref.n_excluded) == (40, 2)
    kept = np.isfinite(x).all(axis=1) & (np.abs(x).sum(axis=1) > 0) & mask
    exact = truth(torch.from_numpy(x[kept]))
    assert abs(dev_cos - exact["mean_cosine"]) <= 0.5 * M.DEVICE_MEAN_COSINE_ABS
    assert abs(dev_share - exact["sigma1_share"]) <= 0.5 * M.DEVICE_SIGMA1_SHARE_ABS
    distinct = np.unique(x[kept], axis=0)
    want, bound = twonn_from_sq(brute_two_nearest_sq(torch.from_numpy(distinct)))
    assert abs(dev.dimension - want) <= bound


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_bootstrap_and_batched_match_the_reference(device):
    x = torch.from_numpy(offset_cloud())
    with M.on_device(device):
        dev = M.bootstrap_mean_cosine(x.to(device), n_boot=200, seed=3)
        dev_batched = M.batched(M.sigma1_share, x.to(device), 500)
    ref = M.bootstrap_mean_cosine(x, n_boot=200, seed=3)
    # Each replicate is a mean cosine from float32 sums of unit vectors (counts are exact in float32), so it moves by
    # at most the mean cosine's bound, and so do the percentiles (1-Lipschitz in the max norm).
    for a, b in ((dev.estimate, ref.estimate), (dev.low, ref.low), (dev.high, ref.high)):
        assert abs(a - b) <= M.DEVICE_MEAN_COSINE_ABS
    ref_batched = M.batched(M.sigma1_share, x, 500)
    assert dev_batched.n_batches == ref_batched.n_batches == 3
    np.testing.assert_allclose(dev_batched.values, ref_batched.values, rtol=0, atol=M.DEVICE_SIGMA1_SHARE_ABS)


# ---------------------------------------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=str)
@pytest.mark.parametrize("name", ["offset", "offset_bf16", "planted"])
def test_layerstats_on_device_matches_the_reference(name, device):
    x = INPUTS[name]()
    d = x.shape[1]
    dev, ref = M.LayerStats(d, reservoir_size=700, seed=4), M.LayerStats(d, reservoir_size=700, seed=4)
    other_dev, other_ref = M.LayerStats(d, reservoir_size=700, seed=9), M.LayerStats(d, reservoir_size=700, seed=9)
    parts = torch.tensor_split(x, [400, 900, 1200])
    with M.on_device(device):
        for p in parts[:3]:
            dev.update(p.to(device))
        other_dev.update(parts[3].to(device))
        dev.merge(other_dev)
    for p in parts[:3]:
        ref.update(p)
    other_ref.update(parts[3])
    ref.merge(other_ref)
    assert (dev.n, dev.n_excluded) == (ref.n, ref.n_excluded) == (len(x), 0)
    # The reservoir's keys are seeded on the CPU whatever the device: the same rows are kept.
    np.testing.assert_array_equal(dev.sample, ref.sample)
    exact = truth(x)
    mean_norm = exact["mean_norm"]
    got = dev.as_dict()
    for want, half in ((ref.as_dict(), 1.0), (exact, 0.5)):
        assert abs(got["mean_cosine"] - want["mean_cosine"]) <= half * M.DEVICE_MEAN_COSINE_ABS
        assert abs(got["mean_norm"] - want["mean_norm"]) <= half * M.DEVICE_NORM_REL * mean_norm
        assert abs(got["drift_norm"] - want["drift_norm"]) <= half * M.DEVICE_NORM_REL * mean_norm
        assert abs(got["sigma1_share"] - want["sigma1_share"]) <= half * M.DEVICE_SIGMA1_SHARE_ABS
    sample = torch.from_numpy(ref.sample)
    want, bound = twonn_from_sq(brute_two_nearest_sq(sample))
    with M.on_device(device):
        got = dev.twonn_dimension()
    assert abs(got - want) <= bound
    assert abs(ref.twonn_dimension() - want) <= bound
    np.testing.assert_allclose(dev.covariance, np.cov(x.double().numpy(), rowvar=False),
                               rtol=0, atol=M.DEVICE_SIGMA1_SHARE_ABS * np.trace(ref.covariance))


@pytest.mark.parametrize("device", DEVICES, ids=str)
def test_batched_layer_measures_on_the_device_path(device):
    from anisotropy.measure import batches

    x = torch.from_numpy(offset_cloud())
    first = torch.zeros(len(x), dtype=torch.bool)
    first[::50] = True
    names = ("sigma1_share", "mean_cosine", "drift_norm", "mean_norm")
    dev = batches.BatchedLayer(x.shape[1], batch_size=500, n_batches=3, metric_names=names, shuffle_seed=1)
    ref = batches.BatchedLayer(x.shape[1], batch_size=500, n_batches=3, metric_names=names, shuffle_seed=1)
    with M.on_device(device):
        for part, flags in zip(torch.tensor_split(x, 4), torch.tensor_split(first, 4)):
            dev.update(part.to(device), first=flags)
        got = dev.rows()
    for part, flags in zip(torch.tensor_split(x, 4), torch.tensor_split(first, 4)):
        ref.update(part, first=flags)
    want = ref.rows()
    assert len(got) == len(want) == 3
    mean_norm = truth(x)["mean_norm"]
    share_keys = [k for k in want[0] if k.startswith("sigma1_share")]
    cosine_keys = [k for k in want[0] if k.startswith("mean_cosine")]
    assert share_keys and cosine_keys
    for g, w in zip(got, want):
        for k in share_keys:
            assert abs(g[k] - w[k]) <= M.DEVICE_SIGMA1_SHARE_ABS
        for k in cosine_keys:
            assert abs(g[k] - w[k]) <= M.DEVICE_MEAN_COSINE_ABS
        for k in ("drift_norm", "mean_norm"):
            assert abs(g[k] - w[k]) <= M.DEVICE_NORM_REL * mean_norm
