"""The device path of anisotropy.measure.metrics against the CPU reference and against float64 brute force.

``metrics.on_device(torch.device("cpu"))`` runs the device code (torch only, the dtypes it uses on CUDA) without a
GPU; with CUDA present the same comparisons run on the GPU too. The one-shot comparisons use a ``metrics.DEVICE_*``
bound, derived in measure/rows.py from the precision of each step before any number was seen; a one-path bound
(device path against exact float64 arithmetic) is half of the two-path one. Those bounds hold for any size up to
2^15 terms per reduction, so at these sizes they are far above the errors; the accumulators' section at the end
derives its bounds for its own sizes instead, against float64 truth written in this file, tight enough that a
float32 accumulation across updates fails them (shown there). Sizes are small so the file runs in seconds.
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
    for module, name in ((twonn, "_exact_sq"), (twonn, "_unique_rows")):
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


# ---------------------------------------------------------------------------------------------------------------------
# The accumulators' device path against float64 truth computed here, with bounds for this test's own sizes
# ---------------------------------------------------------------------------------------------------------------------
#
# The rows: n = K x B float32 vectors of width D (an offset of norm 10 plus unit-scale noise, mean cosine ~0.89), fed
# to each accumulator B rows per update inside on_device(cpu), as taps feeds a GPU's hidden states. The truth is NumPy
# in float64 on the same float32 values, written below from the definitions (nothing of measure/ is called for it).
#
# Bounds, under the rounding model measure.rows' own bounds rest on (Higham & Mary 2019): each float32 operation's
# relative error is an independent mean-zero variable of size at most u = 2^-24, so a computed quantity's first-order
# error sum_t delta_t a_t is within LAM u sqrt(sum_t a_t^2) with probability >= 1 - 2 exp(-LAM^2 / 2) (Hoeffding);
# LAM = 8: 2.5e-14 per bounded number, < 1e-11 for the ~150 numbers bounded here. Per quantity, the terms a_t are:
# - sum of unit vectors, coordinate j: each row's u_ij carries ~D + 3 roundings (its norm's D squares and sums, the
#   square root, the reciprocal or division, the product), and each update's float32 sum of B rows B - 1 partial
#   sums, each at most sum_{i in batch} |u_ij|: sum a_t^2 <= (D + 3) sum_i u_ij^2 + (B - 1) sum_batches (sum |u_ij|)^2;
#   the mean cosine (||S||^2 - n) / (n (n - 1)) then moves by at most (2 ||S|| ||dS|| + ||dS||^2) / (n (n - 1));
# - sum of norms: each norm D + 1 roundings of its size (the norms are summed in float64);
# - sum of vectors (FirstMoments' drift): B - 1 partial sums per update of sum_{i in batch} |x_ij| (LayerStats sums
#   each update in float64 and merges the means: the same bound holds for it, loosely);
# - scatter entry (j, k) (LayerStats): per row 3 roundings of |c_ij c_ik| (two centrings, the product; c = x - the
#   update's mean) and B - 1 partial sums per update of sum |c_ij c_ik|; sigma_1's share then moves by at most
#   (||E||_F + share |tr E|) / (tr S - |tr E|) (Weyl), plus the device's top eigenvalue, 1e-8 relative;
# - what is summed across updates in float64: K additions, at most K u64 of the sums of magnitudes (about 1e-12
#   relative here), bounded worst-case.
# At K = 5000, B = 4, D = 8 these bounds are 3.0e-8 on the mean cosine, 1.1e-7 on the mean norm, 1.2e-7 on the drift
# (the rows' units), 1.6e-8 on sigma_1's share and at most 5.5e-8 on a covariance entry; the float64 path's errors
# are 0.6% to 10% of them. Accumulated across the updates in float32 instead, the same sums are off by about
# sqrt(K) u of their size: 20 to 200 times these bounds (measured when this test was written: FirstMoments 37, 35
# and 30 times; LayerStats 37, 35, 110, 22 and 211 times). test_float32_accumulation_would_break_these_bounds patches
# the accumulators to float32 and asserts that every bound fails.

LAM, U32, U64 = 8.0, 2.0**-24, 2.0**-53
ACC_D, ACC_B, ACC_K = 8, 4, 5000


def accumulated_rows() -> np.ndarray:
    g = rng(7)
    direction = g.standard_normal(ACC_D)
    direction *= 10 / np.linalg.norm(direction)
    return (g.standard_normal((ACC_B * ACC_K, ACC_D)) * np.linspace(0.5, 2.0, ACC_D) + direction).astype(np.float32)


def float64_truth_and_bounds(x: np.ndarray) -> tuple[dict, dict]:
    """The accumulators' quantities in float64 NumPy, and the bounds of the comment above for these rows."""
    a = x.astype(np.float64)
    n, d = a.shape
    batches = a.reshape(ACC_K, ACC_B, d)
    norms = np.linalg.norm(a, axis=1)
    unit = a / norms[:, None]
    s = unit.sum(axis=0)
    gamma64 = ACC_K * U64 / (1 - ACC_K * U64)  # the float64 sums across updates, worst case
    # sum of unit vectors
    per_row = (d + 3) * (unit**2).sum(axis=0)
    per_update = (ACC_B - 1) * (np.abs(unit).reshape(ACC_K, ACC_B, d).sum(axis=1) ** 2).sum(axis=0)
    ds = np.linalg.norm(LAM * U32 * np.sqrt(per_row + per_update) + gamma64 * np.abs(unit).sum(axis=0))
    cosine = (s @ s - n) / (n * (n - 1))
    cosine_bound = (2 * np.linalg.norm(s) * ds + ds**2) / (n * (n - 1)) + 4 * d * U64
    # sum of norms
    norm_bound = (LAM * U32 * np.sqrt((d + 1) * (norms**2).sum()) + gamma64 * norms.sum()) / n
    # sum of vectors (FirstMoments' drift)
    total = np.linalg.norm(LAM * U32 * np.sqrt((ACC_B - 1) * (np.abs(batches).sum(axis=1) ** 2).sum(axis=0))
                           + gamma64 * np.abs(a).sum(axis=0))
    drift_bound = total / n + 4 * d * U64 * np.linalg.norm(a.mean(axis=0))
    # scatter (LayerStats): entries about each update's mean, then merged
    c = batches - batches.mean(axis=1, keepdims=True)
    c = np.abs(c) + U32 * np.abs(batches.mean(axis=1, keepdims=True))  # the float32 mean's rounding in the centring
    prod = c[..., :, None] * c[..., None, :]  # (K, B, d, d): |c_ij c_ik|
    entry = LAM * U32 * np.sqrt(3 * (prod**2).sum(axis=(0, 1)) + (ACC_B - 1) * (prod.sum(axis=1) ** 2).sum(axis=0))
    centred = a - a.mean(axis=0)
    scatter = centred.T @ centred
    diag = np.sqrt(np.diag(scatter))
    entry += 3 * gamma64 * 2 * np.outer(diag, diag)  # the float64 merges (|S_jk| <= sqrt(S_jj S_kk))
    eigenvalues = np.linalg.eigvalsh(scatter)
    share = eigenvalues[-1] / eigenvalues.sum()
    e_fro, e_trace = np.linalg.norm(entry), np.trace(entry)
    share_bound = ((e_fro + share * e_trace) / (np.trace(scatter) - e_trace) + 1e-8 * share + 8 * d * U64)
    truth = {"mean_cosine": cosine, "mean_norm": norms.mean(), "drift_norm": np.linalg.norm(a.mean(axis=0)),
             "sigma1_share": share, "covariance": scatter / (n - 1)}
    bounds = {"mean_cosine": cosine_bound, "mean_norm": norm_bound, "drift_norm": drift_bound,
              "sigma1_share": share_bound, "covariance": entry / (n - 1) + 2 * U64 * np.abs(scatter) / (n - 1)}
    return truth, bounds


def fed_on_device(accumulator, x: np.ndarray):
    with M.on_device(CPU):
        for part in np.split(x, ACC_K):
            accumulator.update(torch.from_numpy(part))
        return accumulator


ACCUMULATED = {"FirstMoments": ("mean_cosine", "mean_norm", "drift_norm"),
               "LayerStats": ("mean_cosine", "mean_norm", "drift_norm", "sigma1_share", "covariance")}


def made(name: str):
    return streaming.FirstMoments(ACC_D) if name == "FirstMoments" else streaming.LayerStats(ACC_D, reservoir_size=0)


@pytest.fixture(scope="module")
def truth_and_bounds():
    x = accumulated_rows()
    return x, *float64_truth_and_bounds(x)


def errors(accumulator, truth: dict, names) -> dict:
    """|device - truth| per quantity (the covariance: entrywise)."""
    return {q: np.abs(getattr(accumulator, q) - truth[q]) for q in names}


@pytest.mark.parametrize("name", list(ACCUMULATED))
def test_accumulators_on_the_device_path_are_within_bounds_of_their_float64_truth(name, truth_and_bounds):
    x, truth, bounds = truth_and_bounds
    acc = fed_on_device(made(name), x)
    assert (acc.n, acc.n_excluded) == (len(x), 0)
    for q, err in errors(acc, truth, ACCUMULATED[name]).items():
        assert np.all(err <= bounds[q]), (q, np.max(err), np.max(bounds[q]))


def test_accumulators_keep_their_sums_and_scatter_in_float64_on_the_device_path(truth_and_bounds):
    # What the bounds above need in float64: every sum across updates (and a chunk's scatter once it leaves the
    # float32 product).
    x = truth_and_bounds[0][: 3 * ACC_B]
    first, stats = made("FirstMoments"), made("LayerStats")
    with M.on_device(CPU):
        for acc in (first, stats):
            for part in np.split(x, 3):
                acc.update(torch.from_numpy(part))
        mean, scatter = statistics.batch_moments(torch.from_numpy(x))
    for tensor in (first._sum_unit, first._sum, first._sum_norm, first._sum_squares,
                   stats._sum_unit, stats._sum_norm, stats._mean, stats._scatter, mean, scatter):
        assert tensor.dtype == torch.float64


def as_float32(accumulator, monkeypatch):
    """The accumulator with every sum across updates kept in float32 (what the bounds must catch)."""
    for name in ("_sum_unit", "_sum", "_sum_norm", "_sum_squares", "_mean", "_scatter"):
        if hasattr(accumulator, name):
            setattr(accumulator, name, getattr(accumulator, name).float())
    moments = streaming.batch_moments
    monkeypatch.setattr(streaming, "batch_moments", lambda c: tuple(t.float() for t in moments(c)))
    return accumulator


@pytest.mark.parametrize("name", list(ACCUMULATED))
def test_float32_accumulation_would_break_these_bounds(name, truth_and_bounds, monkeypatch):
    x, truth, bounds = truth_and_bounds
    acc = fed_on_device(as_float32(made(name), monkeypatch), x)
    assert acc._sum_unit.dtype == torch.float32  # the patch held through every update
    broken = {q for q, err in errors(acc, truth, ACCUMULATED[name]).items() if np.any(err > bounds[q])}
    assert broken == set(ACCUMULATED[name])
