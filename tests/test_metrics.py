"""anisotropy.measure.metrics against ground truth: closed forms, brute force, a semi-analytic TwoNN law and peer libraries.

Every tolerance says where it comes from. Sizes are small (TwoNN on 2000-3000 points) so that the file runs in well
under a minute on two shared cores.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import special, stats
from scipy.spatial.distance import cdist

from anisotropy.measure import metrics as M
from anisotropy.measure import statistics, twonn  # the owners of the private helpers tested

D_MODEL = 768


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def sum_of_units_mean_cosine(x: np.ndarray) -> float:
    """(||sum u_i||^2 - n) / (n (n-1)) in plain float64 numpy (checked against the brute force above)."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = u.sum(axis=0)
    return float((s @ s - len(x)) / (len(x) * (len(x) - 1)))


def brute_mean_cosine(x: np.ndarray) -> float:
    """All ordered pairs i != j, float64, the definition itself."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = u @ u.T
    n = len(x)
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


def rotate_into(z: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """Embed the rows of z isometrically in R^dim by a random orthonormal frame."""
    q, _ = np.linalg.qr(rng(seed).standard_normal((dim, z.shape[1])))
    return z @ q.T


def uniform_sphere(n: int, d: int, seed: int) -> np.ndarray:
    """n points uniform on the unit sphere S^d (a d-dimensional manifold in R^(d+1))."""
    s = rng(seed).standard_normal((n, d + 1))
    return s / np.linalg.norm(s, axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------------------------------
# Mean cosine, drift, norms
# ---------------------------------------------------------------------------------------------------------------------


def test_mean_cosine_equals_brute_force_all_pairs():
    x = rng(0).standard_normal((400, 32)) + 0.7
    # float64 in, float64 products: only summation order differs from the brute force.
    assert M.mean_cosine(x) == pytest.approx(brute_mean_cosine(x), abs=1e-13)
    assert sum_of_units_mean_cosine(x) == pytest.approx(brute_mean_cosine(x), abs=1e-13)
    assert M.drift_norm(x) == pytest.approx(np.linalg.norm(x.mean(axis=0)), rel=1e-13)
    assert M.mean_norm(x) == pytest.approx(np.linalg.norm(x, axis=1).mean(), rel=1e-13)


def test_isotropic_gaussian_mean_cosine_is_zero_within_its_standard_error():
    n, d = 4000, 64
    x = rng(1).standard_normal((n, d)).astype(np.float32)
    exact = M.mean_cosine(x)
    # For isotropic rows, cos(u_i, u_j) has variance 1/d and distinct pairs are uncorrelated, so the mean over the
    # n(n-1)/2 unordered pairs has standard error sqrt(2 / (n (n-1) d)).
    se = math.sqrt(2 / (n * (n - 1) * d))
    assert abs(exact) < 4 * se
    est = M.sampled_pair_cosine(x, n_pairs=20_000, seed=3)
    assert est.n_pairs == 20_000
    assert est.stderr == pytest.approx(math.sqrt(1 / d / 20_000), rel=0.05)  # sd of one pair cosine is 1/sqrt(d)
    assert abs(est.mean - exact) < 4 * est.stderr
    mean, stderr = est  # unpacks as its two headline numbers
    assert (mean, stderr) == (est.mean, est.stderr)


def test_sampled_pairs_estimate_the_exact_value_with_drift():
    x = rng(2).standard_normal((3000, 48)) + 0.4
    exact = M.mean_cosine(x)
    est = M.sampled_pair_cosine(x, n_pairs=8000, seed=0)
    assert abs(est.mean - exact) < 4 * est.stderr
    assert M.sampled_pair_cosine(x, n_pairs=8000, seed=0) == est  # seeded: deterministic


def test_planted_drift_closed_forms():
    # x_i = a c + b w_i with c a unit vector and w_i unit vectors orthogonal to c in antipodal pairs (sum w_i = 0):
    # every ||x_i|| = sqrt(a^2 + b^2), the mean is a c, and sum_i u_i = n a c / sqrt(a^2 + b^2), so
    # mean cosine = (n a^2 / (a^2 + b^2) - 1) / (n - 1) and drift = a exactly.
    n_half, d, a, b = 500, 96, 3.0, 4.0
    g = rng(4)
    c = np.zeros(d)
    c[0] = 1.0
    w = g.standard_normal((n_half, d))
    w[:, 0] = 0.0
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    x = np.concatenate([a * c + b * w, a * c - b * w])
    x = rotate_into(x, 300, seed=5)
    n = len(x)
    expected = (n * a**2 / (a**2 + b**2) - 1) / (n - 1)
    assert M.mean_cosine(x) == pytest.approx(expected, abs=1e-13)
    assert M.drift_norm(x) == pytest.approx(a, rel=1e-13)
    assert M.mean_norm(x) == pytest.approx(math.hypot(a, b), rel=1e-13)


def test_float64_accumulation_precision_for_narrow_dtypes():
    # GPT-2-like states: one large common direction, mean cosine near 1, norms in the hundreds.
    g = rng(6)
    x = g.standard_normal((2000, D_MODEL)) + 8.0
    for narrow in (torch.bfloat16, torch.float16, torch.float32):
        t = torch.from_numpy(x).to(narrow)
        ref64 = t.double().numpy()  # the same rounded values, measured in float64
        # Narrow inputs are widened to float32 exactly; products are float32 over chunks of ~1400 rows whose sums go to
        # float64, so the error is a few float32 ulps of the result (2^-24 ~ 6e-8): we ask for 1e-6.
        assert M.mean_cosine(t) == pytest.approx(sum_of_units_mean_cosine(ref64), abs=1e-6)
        assert M.drift_norm(t) == pytest.approx(np.linalg.norm(ref64.mean(axis=0)), rel=1e-6)
        assert M.mean_norm(t) == pytest.approx(np.linalg.norm(ref64, axis=1).mean(), rel=1e-6)
    assert M.mean_cosine(x) > 0.98


# ---------------------------------------------------------------------------------------------------------------------
# sigma1 share
# ---------------------------------------------------------------------------------------------------------------------


def planted_spectrum(n: int, s: np.ndarray, offset: np.ndarray, seed: int) -> np.ndarray:
    """X = U diag(s) V^T + offset with U's columns orthonormal and of zero mean: the centred X has singular values s."""
    g = rng(seed)
    k, d = len(s), len(offset)
    z = g.standard_normal((n, k))
    u, _ = np.linalg.qr(z - z.mean(axis=0))  # columns stay in the span of centred vectors: zero column means
    v, _ = np.linalg.qr(g.standard_normal((d, k)))
    return (u * s) @ v.T + offset


def test_sigma1_share_analytic_spectrum():
    d = 128
    s = 1.0 / np.arange(1, 41)  # singular values 1, 1/2, ..., 1/40
    offset = np.full(d, 30.0)  # a large mean: centring must cost no precision
    x = planted_spectrum(3000, s, offset, seed=7)
    expected = s[0] ** 2 / np.sum(s**2)  # = 1 / sum_k k^-2 over k <= 40
    # Float64 throughout, with Chan's centred update: error ~1e-16 relative to the offset^2 / variance ratio (~1e6).
    assert M.sigma1_share(x) == pytest.approx(expected, rel=1e-9)
    assert M.drift_norm(x) == pytest.approx(30.0 * math.sqrt(d), rel=1e-12)
    # float32 input: products are float32 over chunks of 4096 centred rows (relative rounding ~sqrt(4096) 2^-24 = 4e-6),
    # accumulated in float64; against a float64 SVD of the same rounded values we ask for 1e-5.
    x32 = x.astype(np.float32)
    sv = np.linalg.svd(x32.astype(np.float64) - x32.astype(np.float64).mean(axis=0), compute_uv=False)
    assert M.sigma1_share(x32) == pytest.approx(sv[0] ** 2 / np.sum(sv**2), rel=1e-5)
    # ...and the rounding of the inputs themselves (~2e-6 absolute at 30, against singular values down to 1/40)
    # moves the share from the analytic value by less than 1e-3.
    assert M.sigma1_share(x32) == pytest.approx(expected, rel=1e-3)
    # bf16 in (8-bit mantissa: an offset of 30 would swamp this spectrum, so a scaled copy): same float32 path.
    xb = torch.from_numpy(planted_spectrum(3000, 100 * s, np.ones(d), seed=9)).to(torch.bfloat16)
    s = M.LayerStats(d).update(xb)
    bf = xb.double().numpy()
    sv = np.linalg.svd(bf - bf.mean(axis=0), compute_uv=False)
    assert s.sigma1_share == pytest.approx(sv[0] ** 2 / np.sum(sv**2), rel=1e-5)


def test_sigma1_share_of_gaussian_with_known_covariance():
    # Population: one direction with variance 25 among 63 of variance 1 -> share 25/88. The sample share's standard
    # error at n = 20000 is about sqrt(2/n) * share * (1 - share) ~ 2e-3; we allow 1e-2.
    d, n = 64, 20_000
    x = rng(8).standard_normal((n, d))
    x[:, 0] *= 5.0
    assert M.sigma1_share(x) == pytest.approx(25 / 88, abs=1e-2)


# ---------------------------------------------------------------------------------------------------------------------
# TwoNN
# ---------------------------------------------------------------------------------------------------------------------


def sphere_twonn_law(d: int, n: int, discard: float = 0.1, draws: int = 400_000, seed: int = 0):
    """Expected TwoNN estimate on n uniform points of S^d, and its i.i.d. standard deviation, from the exact law.

    A point's n - 1 neighbours have i.i.d. geodesic angles with CDF G(t) = cap fraction
    = 1/2 I_{sin^2 t}(d/2, 1/2) for t <= pi/2; the two nearest are the first two order statistics, so
    G(t1) ~ Beta(1, n-1) and G(t2) = G(t1) + (1 - G(t1)) Beta(1, n-2). Chords are 2 sin(t/2), mu = sin(t2/2)/sin(t1/2).
    The sphere's curvature biases TwoNN downwards at high d (about -15% at d = 20, n = 2000); this law includes it.
    """
    g = rng(seed)

    def angle(u):
        low = u <= 0.5
        t = np.arcsin(np.sqrt(special.betaincinv(d / 2, 0.5, 2 * np.where(low, u, 1 - u))))
        return np.where(low, t, np.pi - t)

    u1 = g.beta(1, n - 1, draws)
    u2 = u1 + (1 - u1) * g.beta(1, n - 2, draws)
    log_mu = np.log(np.sin(angle(u2) / 2) / np.sin(angle(u1) / 2))
    expected = twonn._twonn_fit(log_mu, discard)[0]
    spread = np.std([twonn._twonn_fit(log_mu[i:i + n], discard)[0] for i in range(0, draws - n + 1, n)])
    return expected, spread


@pytest.mark.parametrize("d", [2, 5, 10, 20])
def test_twonn_on_spheres_matches_the_exact_law(d):
    n = 2000
    x = rotate_into(uniform_sphere(n, d, seed=10 + d), D_MODEL, seed=20 + d).astype(np.float32)
    expected, spread = sphere_twonn_law(d, n)
    # Neighbouring ratios are weakly correlated (shared neighbours), which inflates the i.i.d. spread by ~1.35 in
    # simulations; 5 i.i.d. standard deviations is therefore about 3.7 real ones.
    assert M.twonn_dimension(x) == pytest.approx(expected, abs=5 * spread)
    if d <= 5:
        assert M.twonn_dimension(x) == pytest.approx(d, rel=0.1)  # little curvature bias at low d


def test_twonn_on_swiss_roll():
    g = rng(30)
    n = 3000
    t = 1.5 * np.pi * (1 + 2 * g.uniform(size=n))
    h = 21 * g.uniform(size=n)
    roll = np.stack([t * np.cos(t), h, t * np.sin(t)], axis=1)
    est = M.twonn_estimate(rotate_into(roll, D_MODEL, seed=31).astype(np.float32))
    # A 2-d manifold; at n = 3000 the statistical sd is ~0.04 and the roll's density varies with t: allow 0.15.
    assert est.dimension == pytest.approx(2.0, abs=0.15)
    assert (est.n, est.n_duplicates, est.n_fit) == (3000, 0, 2700)


def test_twonn_agrees_with_scikit_dimension_and_dadapy():
    skdim = pytest.importorskip("skdim")
    dadapy = pytest.importorskip("dadapy")
    x = rotate_into(rng(40).uniform(size=(2000, 8)), D_MODEL, seed=41)
    ours = M.twonn_dimension(x)
    # Same estimator and conventions (F = i/N, largest 10% of mu dropped, fit through the origin); only the rounding
    # of the distances differs (theirs: float64 Gram of uncentred rows).
    assert ours == pytest.approx(skdim.id.TwoNN().fit(x).dimension_, rel=1e-6)
    assert ours == pytest.approx(dadapy.Data(x, verbose=False).compute_id_2NN()[0], rel=1e-6)


def twonn_reference(x: np.ndarray, discard: float = 0.1) -> float:
    """TwoNN from exact float64 all-pairs distances of the given (already rounded) rows."""
    x64 = x.astype(np.float64)
    dist = cdist(x64, x64, "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    two = np.sort(dist, axis=1)[:, :2]
    return twonn._twonn_fit(0.5 * np.log(two[:, 1] / two[:, 0]), discard)[0]


def test_twonn_survives_large_drift():
    # Hidden states of GPT-2 have norms in the hundreds. Here: a 5-d sphere (nearest distances ~0.2) offset by a vector
    # of norm ~ 280, in float32.
    z = rotate_into(uniform_sphere(1500, 5, seed=50), D_MODEL, seed=51)
    x = (z + 10.0).astype(np.float32)
    reference = twonn_reference(x)
    # Candidates found in float32 after centring, distances re-measured exactly: the same mu as exact float64.
    assert M.twonn_dimension(x) == pytest.approx(reference, rel=1e-9)
    # The planted case is hard: an uncentred float32 Gram matrix loses the small distances to cancellation.
    sq = np.einsum("ij,ij->i", x, x)
    naive = sq[:, None] + sq[None, :] - 2 * (x @ x.T)
    np.fill_diagonal(naive, np.inf)
    two = np.sort(naive, axis=1)[:, :2]
    with np.errstate(invalid="ignore", divide="ignore"):
        log_mu = 0.5 * np.log(two[:, 1] / two[:, 0])
    broken = ~np.isfinite(log_mu)
    assert broken.any() or abs(twonn._twonn_fit(log_mu, 0.1)[0] - reference) > 0.2 * reference


def test_grouped_smallest_k_equals_topk():
    g = torch.from_numpy(rng(63).standard_normal((50, 1000)).astype(np.float32))
    g[3, 17] = float("inf")
    g[4, :300] = -5.0  # ties spanning several groups
    for cols in (1000, 1024, 130, 7):
        values, idx = twonn._smallest_k(g[:, :cols].contiguous(), 4)
        expected = torch.topk(g[:, :cols], 4, dim=1, largest=False, sorted=True).values
        assert torch.equal(values, expected)
        assert torch.equal(torch.gather(g[:, :cols], 1, idx), expected)


def test_two_nearest_distances_with_many_ties(monkeypatch):
    # A 4-d integer grid has 8 equidistant nearest neighbours per inner point, more than the 3 float32 candidates:
    # such rows cannot be certified by them, and are re-measured against every row whose bound is within their second
    # distance (not the float64 Gram matrix: a dozen ties fit). Offset to make float32 cancel too.
    monkeypatch.setattr(twonn, "_redo_in_float64", lambda *a, **k: pytest.fail("a dozen ties went to float64"))
    grid = np.stack(np.meshgrid(*[np.arange(5.0)] * 4, indexing="ij"), axis=-1).reshape(-1, 4)
    x64 = torch.from_numpy(rotate_into(grid, 64, seed=62) + 50.0)
    dist = cdist(x64.numpy(), x64.numpy(), "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    expected = np.sort(dist, axis=1)[:, :2]
    assert twonn._two_nearest_sq(x64).numpy() == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="equidistant"):
        M.twonn_dimension(grid)  # unrotated, every mu is exactly 1: the slope is undefined


@pytest.mark.parametrize("strip", [1, 7, 64, 1000])
def test_two_nearest_distances_in_strips_of_any_height(monkeypatch, strip):
    # Each pair's Gram entry is computed once, in row strips of the upper triangle read along rows and columns: with
    # strips of one row, of a height that leaves a ragged last strip, and of the whole matrix, every row's two nearest
    # are brute force's (a clustered, offset cloud, so that neighbours come from every strip).
    g = rng(66)
    x = (g.standard_normal((20, 48))[g.integers(0, 20, 300)] * 5 + g.standard_normal((300, 48)) + 30.0)
    x = x.astype(np.float32)
    dist = cdist(x.astype(np.float64), x.astype(np.float64), "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    monkeypatch.setattr(twonn, "_STRIP_ROWS", strip)
    assert twonn._two_nearest_sq(torch.from_numpy(x)).numpy() == pytest.approx(np.sort(dist, axis=1)[:, :2],
                                                                               rel=1e-12)


def test_two_nearest_distances_beyond_float32_range():
    # Rows of norm ~1e20: their float32 squared norms overflow, so every row is found with the float64 Gram matrix.
    g = rng(67)
    x = g.standard_normal((200, 16)) * 1e20
    dist = cdist(x, x, "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    assert twonn._two_nearest_sq(torch.from_numpy(x)).numpy() == pytest.approx(np.sort(dist, axis=1)[:, :2],
                                                                               rel=1e-12)


def test_two_nearest_distances_among_a_hundred_ties(monkeypatch):
    # The corners of a 100-simplex, offset: every row has 99 equidistant neighbours, more than _WIDE_CANDIDATES, so
    # every row's candidates come from the float64 Gram matrix; the distances are still exact.
    x = np.eye(100) * 3.0 + 20.0
    redone = []
    redo = twonn._redo_in_float64
    monkeypatch.setattr(twonn, "_redo_in_float64", lambda rows, mean, who, *a: redone.append(len(who))
                        or redo(rows, mean, who, *a))
    assert twonn._two_nearest_sq(torch.from_numpy(x)).numpy() == pytest.approx(np.full((100, 2), 18.0), rel=1e-12)
    assert redone == [100]


def test_unique_rows_compares_bytes_where_bit_sums_agree():
    # Rows that are permutations of one another share their bit sums but differ; -0.0 and 0.0 differ byte-wise; the
    # first of equal rows is kept: as numpy's unique over whole rows.
    g = rng(68)
    base = g.standard_normal((50, 12)).astype(np.float32)
    x = np.concatenate([base, base[:, ::-1], base[[3, 7, 3]], np.zeros((1, 12), np.float32)])
    x[-1, 0] = -0.0
    x = np.concatenate([x, np.zeros((1, 12), np.float32), x[[0]]])
    keys = np.ascontiguousarray(x).view(np.dtype((np.void, 4 * 12))).ravel()
    _, first = np.unique(keys, return_index=True)
    assert np.array_equal(twonn._unique_rows(x), np.sort(first))
    assert len(twonn._unique_rows(x)) == len(x) - 4


def test_two_nearest_distances_beside_a_few_massive_rows(monkeypatch):
    # Hidden states' massive tokens: 1% of the rows 100x longer than the rest, near one another (one sink direction
    # plus noise), all offset. Each row's certificate counts the float32 error of the rows it is compared with, so the
    # massive rows' own error does not make the ordinary rows doubtful (a bound with the largest norm redid 1100 of
    # these 1500 rows); the distances are brute force's either way.
    g = rng(64)
    x = g.standard_normal((1500, 64))
    sink = g.standard_normal(64)
    x[:15] = 100 * 8 * sink / np.linalg.norm(sink) + 5 * g.standard_normal((15, 64))
    x = (x + 40.0).astype(np.float32)
    dist = cdist(x.astype(np.float64), x.astype(np.float64), "sqeuclidean")
    np.fill_diagonal(dist, np.inf)
    expected = np.sort(dist, axis=1)[:, :2]
    remeasured = []
    exact_sq = twonn._exact_sq
    monkeypatch.setattr(twonn, "_exact_sq", lambda rows, who, cand: remeasured.append(len(who)) or exact_sq(rows, who, cand))
    assert twonn._two_nearest_sq(torch.from_numpy(x)).numpy() == pytest.approx(expected, rel=1e-12)
    assert remeasured[0] == len(x) and sum(remeasured[1:]) <= 15  # redone with a float64 Gram: at most the massive


def test_twonn_removes_and_counts_duplicates():
    z = rotate_into(uniform_sphere(1500, 4, seed=60), 64, seed=61)
    with_dups = np.concatenate([z, z[:100], z[:10]])  # 110 repeated rows
    est = M.twonn_estimate(with_dups)
    assert est.n_duplicates == 110 and est.n == 1500
    assert math.isfinite(est.dimension)
    assert est.dimension == pytest.approx(M.twonn_dimension(z), rel=1e-12)


def test_twonn_float64_input_matches_exact_reference():
    x = rotate_into(uniform_sphere(1200, 3, seed=70), 96, seed=71) * 1e-3 + 5.0
    assert M.twonn_dimension(x) == pytest.approx(twonn_reference(x), rel=1e-9)
    assert M.twonn_dimension(x, discard_fraction=0.0) == pytest.approx(twonn_reference(x, 0.0), rel=1e-9)


# ---------------------------------------------------------------------------------------------------------------------
# LayerStats
# ---------------------------------------------------------------------------------------------------------------------


def stream_data(seed: int = 80):
    g = rng(seed)
    x = g.standard_normal((3000, 40)) * np.linspace(0.5, 3, 40) + 2.0
    x[7] = 0.0
    x[100, 3] = np.nan
    x[2000, 0] = np.inf
    mask = g.uniform(size=3000) > 0.1
    return x, mask


def feed(stats_: M.LayerStats, x, mask, sizes):
    start = 0
    for size in sizes:
        stats_.update(x[start:start + size], mask=mask[start:start + size])
        start += size
    assert start == len(x)
    return stats_


def random_sizes(total: int, seed: int) -> list[int]:
    cuts = np.sort(rng(seed).integers(0, total, size=120))  # repeated cuts give empty batches
    return list(np.diff(np.concatenate([[0], cuts, [total]])))


def test_layerstats_streaming_equals_one_shot():
    x, mask = stream_data()
    s = feed(M.LayerStats(40, reservoir_size=500, seed=1), x, mask, random_sizes(len(x), 2))
    kept = x[mask]
    bad = ~np.isfinite(kept).all(axis=1) | (np.abs(kept).sum(axis=1) == 0)
    clean = kept[~bad]
    assert (s.n, s.n_excluded) == (len(clean), int(bad.sum()))
    # All float64: only summation order differs.
    assert s.mean_cosine == pytest.approx(brute_mean_cosine(clean), abs=1e-12)
    assert s.mean_cosine == pytest.approx(M.mean_cosine(x, mask=mask), abs=1e-12)
    assert s.drift_norm == pytest.approx(M.drift_norm(x, mask=mask), rel=1e-12)
    assert s.mean_norm == pytest.approx(M.mean_norm(x, mask=mask), rel=1e-12)
    assert s.sigma1_share == pytest.approx(M.sigma1_share(clean), rel=1e-10)
    assert s.covariance == pytest.approx(np.cov(clean.T), rel=1e-9, abs=1e-12)
    assert s.sample.shape == (500, 40) and s.sample.dtype == np.float32
    # The reservoir holds rows of the data: the sample is a subset of the clean rows.
    rows = {r.tobytes() for r in clean.astype(np.float32)}
    assert all(r.tobytes() in rows for r in s.sample)
    assert s.twonn_dimension() == pytest.approx(M.twonn_dimension(s.sample), rel=1e-12)
    row = s.as_dict()
    assert set(row) >= {"n", "n_excluded", "mean_cosine", "drift_norm", "mean_norm", "sigma1_share",
                        "twonn_dimension"}
    assert row["n_excluded"] == s.n_excluded == int(bad.sum()) and row["n"] == s.n
    assert all(isinstance(v, (int, float)) for v in row.values())


def test_layerstats_merge_is_exact():
    x, mask = stream_data(81)
    whole = feed(M.LayerStats(40, seed=0), x, mask, [3000])
    a = feed(M.LayerStats(40, seed=1), x[:1234], mask[:1234], [600, 634])
    b = feed(M.LayerStats(40, seed=2), x[1234:], mask[1234:], [1766])
    merged = a.merge(b)
    assert (merged.n, merged.n_excluded) == (whole.n, whole.n_excluded)
    for name in ("mean_cosine", "drift_norm", "mean_norm", "sigma1_share"):
        assert getattr(merged, name) == pytest.approx(getattr(whole, name), rel=1e-12, abs=1e-14), name
    assert merged.covariance == pytest.approx(whole.covariance, rel=1e-10, abs=1e-13)
    assert len(merged.sample) == min(2048, merged.n)
    empty = M.LayerStats(40).merge(whole)
    assert empty.mean_cosine == pytest.approx(whole.mean_cosine, abs=1e-15)


def test_reservoir_is_uniform_including_after_merge():
    # Inclusion probability of each of 60 rows in a reservoir of 12 must be 12/60 = 0.2. Over 400 seeds each row's
    # count is Binomial(400, 0.2) (sd 8): check the counts with a chi-square test at a permissive level.
    x = np.arange(1, 61, dtype=np.float64)[:, None] * np.ones((1, 3))
    counts_single = np.zeros(60)
    counts_merged = np.zeros(60)
    for seed in range(400):
        s = M.LayerStats(3, reservoir_size=12, seed=seed)
        for part in np.array_split(x, 7):
            s.update(part)
        counts_single[s.sample[:, 0].astype(int) - 1] += 1
        a = M.LayerStats(3, reservoir_size=12, seed=10_000 + seed).update(x[:25])
        b = M.LayerStats(3, reservoir_size=12, seed=20_000 + seed).update(x[25:])
        counts_merged[a.merge(b).sample[:, 0].astype(int) - 1] += 1
    for counts in (counts_single, counts_merged):
        assert counts.sum() == 400 * 12
        assert stats.chisquare(counts).pvalue > 1e-3


def test_layerstats_memory_does_not_grow_with_n():
    def state_bytes(s: M.LayerStats) -> int:
        return sum(v.nbytes for v in vars(s).values() if isinstance(v, np.ndarray)) + sum(
            v.numel() * v.element_size() for v in vars(s).values() if isinstance(v, torch.Tensor))

    g = rng(90)
    s = M.LayerStats(32, reservoir_size=256)
    s.update(g.standard_normal((1000, 32)))
    small = state_bytes(s)
    for _ in range(20):
        s.update(g.standard_normal((5000, 32)))
    assert s.n == 101_000 and state_bytes(s) == small


# ---------------------------------------------------------------------------------------------------------------------
# Masks, protocols, bad input
# ---------------------------------------------------------------------------------------------------------------------


def test_masks_on_batched_sequences():
    g = rng(100)
    states = torch.from_numpy(g.standard_normal((4, 30, 24)) + 0.3).to(torch.bfloat16)
    attention = torch.ones(4, 30, dtype=torch.long)
    attention[1, 20:] = 0
    attention[3, 5:] = 0
    kept = states.float().numpy()[attention.numpy() == 1]
    assert M.mean_cosine(states, mask=attention) == pytest.approx(brute_mean_cosine(kept.astype(np.float64)), abs=1e-6)
    assert M.drift_norm(states, mask=attention) == pytest.approx(M.drift_norm(kept), rel=1e-6)
    assert M.sigma1_share(states, mask=attention) == pytest.approx(M.sigma1_share(kept), rel=1e-9)
    assert M.twonn_dimension(states, mask=attention) == pytest.approx(M.twonn_dimension(kept), rel=1e-12)
    s = M.LayerStats(24).update(states, mask=attention)
    assert s.n == len(kept) == 4 * 30 - 10 - 25


def test_batched_protocol():
    x = rng(110).standard_normal((10_000, 16))
    res = M.batched(len, x, batch_size=4096)
    assert res.n_batches == 2 and res.values == (5000, 5000)  # the remainder is spread, no batch below 4096
    mean, std = res
    assert (mean, std) == (5000, 0.0)
    res = M.batched(M.drift_norm, x, batch_size=2500)
    parts = np.array_split(x, 4)
    values = [np.linalg.norm(p.mean(axis=0)) for p in parts]
    assert res.mean == pytest.approx(np.mean(values), rel=1e-12)
    assert res.std == pytest.approx(np.std(values), rel=1e-9)
    with pytest.raises(ValueError, match="4096"):
        M.batched(M.sigma1_share, x[:4000])


def test_layer_correlation_matches_scipy():
    a = np.array([0.1, 0.3, 0.2, 0.6, 0.9, 0.8, np.nan])
    b = np.exp(np.array([1.0, 2.0, 1.5, 3.0, 5.0, 4.0, 2.0]))
    r = M.layer_correlation(a, b)
    assert r.n == 6  # the NaN layer is dropped
    assert r.spearman == pytest.approx(1.0)  # same ranks, non-linear relation
    assert r.pearson < 0.99
    assert r.pearson_p == pytest.approx(stats.pearsonr(a[:6], b[:6]).pvalue, rel=1e-12)
    # six layers: exact, 2 of the 6! orderings are as strongly ordered (scipy's t approximation says 0)
    assert r.spearman_p == pytest.approx(2 / math.factorial(6), rel=1e-12)
    with pytest.raises(ValueError, match="equal length"):
        M.layer_correlation([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 3"):
        M.layer_correlation([1, 2], [3, 4])


def test_spearman_p_is_exact_over_few_layers_and_scipys_above():
    # a perfect ordering of n unrelated layers happens by chance in 2 of the n! orderings: 4 layers are never significant
    for n in range(3, M.EXACT_SPEARMAN_MAX_N + 1):
        assert M.layer_correlation(np.arange(n), -np.arange(n) ** 3).spearman_p == pytest.approx(2 / math.factorial(n))
    assert M.min_significant_layers(0.05) == 5 and M.min_significant_layers(0.01) == 6
    # rho = 0.9 over 5 layers: the perfect ordering and its 4 adjacent swaps, in either direction
    swapped = M.layer_correlation(np.arange(5), [0.0, 2.0, 1.0, 3.0, 4.0])
    assert swapped.spearman == pytest.approx(0.9) and swapped.spearman_p == pytest.approx(10 / 120)
    # ties: the share of all 7! pairings whose |rho| (scipy's, ties averaged) is at least the observed one
    x, y = np.array([0.0, 1, 1, 2, 3, 5, 8]), np.array([0.1, 0.5, 0.3, 0.9, 0.9, 1.4, 1.2])
    observed = abs(stats.spearmanr(x, y).statistic)
    brute = np.mean([abs(stats.spearmanr(x, list(v)).statistic) >= observed - 1e-12
                     for v in itertools.permutations(y)])
    assert M.layer_correlation(x, y).spearman_p == pytest.approx(brute, rel=1e-12)
    # above the exact range: scipy's value, and a long monotone series is significant
    x = np.arange(14.0)
    y = x + np.random.default_rng(0).normal(scale=4, size=x.size)
    assert M.layer_correlation(x, y).spearman_p == pytest.approx(stats.spearmanr(x, y).pvalue, rel=1e-12)
    assert M.layer_correlation(np.arange(30), np.arange(30)).spearman_p < 1e-6


def test_bootstrap_mean_cosine():
    x = rng(120).standard_normal((300, 20)) + 0.5
    ci = M.bootstrap_mean_cosine(x, n_boot=400, level=0.9, seed=5)
    assert ci.estimate == pytest.approx(brute_mean_cosine(x), abs=1e-6)
    assert ci.low < ci.estimate < ci.high
    # The width should match the U-statistic's standard error 2 sd(h1)/sqrt(n), h1_i = u_i . mean of the others.
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    ubar = (u.sum(axis=0) - u) / 299
    se = 2 * np.std(np.einsum("ij,ij->i", u, ubar)) / math.sqrt(300)
    assert (ci.high - ci.low) / (2 * 1.645 * se) == pytest.approx(1.0, abs=0.25)
    assert M.bootstrap_mean_cosine(x, n_boot=400, level=0.9, seed=5) == ci  # seeded: reproducible
    # Each replicate, by brute force: the mean cosine over pairs of draws that are different rows.
    counts = rng(6).multinomial(300, np.full(300, 1 / 300), size=3)
    fast = statistics._resampled_mean_cosine(torch.from_numpy(u.astype(np.float32)), counts)
    for k in range(3):
        idx = np.repeat(np.arange(300), counts[k])
        c = u[idx] @ u[idx].T
        assert fast[k] == pytest.approx(c[idx[:, None] != idx[None, :]].mean(), abs=1e-6)  # float32 product


def test_grouped_bootstrap_resamples_whole_groups():
    """Texts of tokens that share a text-specific direction: the interval from resampling texts is the honest one
    (it matches the spread of the mean cosine over fresh corpora), and with one vector per group it is the row
    bootstrap exactly."""
    def corpus(seed, k=200):
        g = rng(seed)
        groups = [g.standard_normal(16) * 1.5 + g.standard_normal((int(g.integers(5, 30)), 16)) + 0.3
                  for _ in range(k)]
        return groups

    def gram_and_sizes(groups):
        sums = np.stack([(x / np.linalg.norm(x, axis=1, keepdims=True)).sum(axis=0) for x in groups])
        return sums @ sums.T, [len(x) for x in groups]

    groups = corpus(0)
    ci = M.grouped_bootstrap_mean_cosine(*gram_and_sizes(groups), n_boot=2000, level=0.9, seed=1)
    assert ci.estimate == pytest.approx(brute_mean_cosine(np.concatenate(groups)), abs=1e-12)
    assert ci.low < ci.estimate < ci.high
    fresh = [brute_mean_cosine(np.concatenate(corpus(s))) for s in range(100, 200)]
    assert (ci.high - ci.low) / (2 * 1.645 * np.std(fresh)) == pytest.approx(1.0, abs=0.3)
    rows = M.bootstrap_mean_cosine(np.concatenate(groups), n_boot=2000, level=0.9, seed=1)
    assert rows.high - rows.low < 0.6 * (ci.high - ci.low)  # treating tokens as independent is overconfident
    # one vector per group: the same replicates as the row bootstrap (same seed, same multinomial draws)
    x = rng(3).standard_normal((40, 6)) + 0.4
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    single = M.grouped_bootstrap_mean_cosine(u @ u.T, np.ones(40), n_boot=300, seed=4)
    rows = M.bootstrap_mean_cosine(x, n_boot=300, seed=4)  # float32 products there
    assert (single.estimate, single.low, single.high) == pytest.approx((rows.estimate, rows.low, rows.high), abs=1e-6)
    with pytest.raises(ValueError, match="2 groups"):
        M.grouped_bootstrap_mean_cosine(np.ones((1, 1)), [3])


def test_bad_rows_are_excluded_and_counted():
    x = rng(130).standard_normal((50, 8)).astype(np.float32)
    x[3] = 0
    x[4, 2] = np.nan
    x[5, 0] = -np.inf
    x[6] = 1e30  # finite, but its float32 squared norm overflows: a valid row
    clean = np.delete(x, [3, 4, 5], axis=0)
    assert M.mean_cosine(x) == pytest.approx(brute_mean_cosine(clean.astype(np.float64)), abs=1e-6)
    s = M.LayerStats(8).update(x)
    assert (s.n, s.n_excluded) == (47, 3)
    assert s.as_dict()["n_excluded"] == 3
    assert M.twonn_estimate(x).n_excluded == 3


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: M.mean_cosine(np.ones((1, 4))), "at least 2 valid rows, got 1"),
        (lambda: M.mean_cosine(np.full((5, 4), np.nan)), "got 0 .*5 zero/NaN/inf"),
        (lambda: M.drift_norm(np.zeros((3, 4))), "at least 1 valid row, got 0"),
        (lambda: M.twonn_dimension(rng(1).standard_normal((3, 4))), "at least 5 distinct"),
        (lambda: M.twonn_dimension(np.ones((10, 4))), "distinct valid rows .*9 duplicates"),
        (lambda: M.sigma1_share(np.ones((10, 4))), "zero variance"),
        (lambda: M.sampled_pair_cosine(np.ones((1, 4)), 10), "at least 2"),
        (lambda: M.mean_cosine(np.ones(4)), "shape"),
        (lambda: M.mean_cosine(np.ones((4, 3)), mask=np.ones(5, bool)), "mask of shape"),
        (lambda: M.LayerStats(4).update(np.ones((2, 5))), "dimension 5"),
        (lambda: M.LayerStats(4).merge(M.LayerStats(5)), "dimension"),
        (lambda: M.LayerStats(4).mean_cosine, "got 0"),
    ],
)
def test_too_few_or_malformed_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_as_dict_of_a_tiny_layer_gives_nan_not_errors():
    row = M.LayerStats(4).update(np.array([[1.0, 0, 0, 0]])).as_dict()
    assert row["n"] == 1 and row["drift_norm"] == 1.0
    assert math.isnan(row["mean_cosine"]) and math.isnan(row["twonn_dimension"])
