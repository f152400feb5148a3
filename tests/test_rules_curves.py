"""One way to read a curve (``claims.curves``) and the rules that read a trend through it.

Every threshold a trend rule takes from claims.yml is tested on curves whose deciding statistic sits 1-5% either side
of it, computed here with plain numpy (ranks, block means, region means; never the rule's own helpers): the rule must
hold on one side and not on the other. The cases are built from the threshold claims.yml gives, so they follow an
edit of it; what pins the number itself is that it appears in the claim's quote or reading (tests/test_quotes.py).
Beside the thresholds, the artefacts no rule may read as a shape: a rise inside the warm-up, a single spike, a
plateau, a rise that falls back, a layer profile high at one layer or up to an end."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from anisotropy.claims import curves, ledger as claims
from anisotropy.claims.rules import p1_s5, p2

EITHER_SIDE = {True: 1.03, False: 0.97}  # a case 3% above its threshold must hold, 3% below must not


def params(claim_id: str) -> dict:
    return dict(claims.claim(claim_id).params)


# ---- plain-numpy statistics, the ground truth of the cases --------------------------------------------------------

def rank_rho(values) -> float:
    """Spearman's rho of ``values`` against their position: Pearson's r of the ranks (tied values share the mean of
    their ranks)."""
    v = np.asarray(values, float)
    ranks = np.array([np.mean(np.flatnonzero(np.sort(v) == x)) for x in v])
    return float(np.corrcoef(np.arange(len(v)), ranks)[0, 1])


def kept(values, sign: int = 1) -> float:
    v = sign * np.asarray(values, float)
    return float((v[-1] - v[0]) / (v.max() - v[0]))


def order_with_rho(n: int, rho: float) -> np.ndarray:
    """A permutation of ``range(n)`` that keeps 0 first and n - 1 last (so a series following it ends at its top)
    whose rank correlation with its position is near ``rho``: rho = 1 - 6 sum d^2 / (n (n^2 - 1)), and swapping the
    ranks at positions i and i + k adds 2 k^2 to sum d^2, so disjoint swaps of the interior, largest first, reach the
    sum d^2 that ``rho`` asks for."""
    left = int(round((1 - rho) * n * (n * n - 1) / 6 / 2))  # the sum of k^2 over the swaps
    order, free = np.arange(n), set(range(1, n - 1))
    while left > 0:
        k = min(int(np.sqrt(left)), n - 3)
        while not any(i in free and i + k in free for i in range(1, n - 1 - k)):
            k -= 1
        i = next(i for i in range(1, n - 1 - k) if i in free and i + k in free)
        order[[i, i + k]] = order[[i + k, i]]
        free -= {i, i + k}
        left -= k * k
    return order


def rho_cases(min_rho: float, n: int = 30) -> dict[bool, np.ndarray]:
    """Rank orders of ``n`` points (first at the bottom, last at the top) 1-5% above (True) and below (False)
    ``min_rho``, checked by ``rank_rho``."""
    out = {}
    for side, factor in EITHER_SIDE.items():
        order = order_with_rho(n, min_rho * factor)
        r = rank_rho(order)
        assert 1.01 <= r / min_rho <= 1.05 if side else 0.95 <= r / min_rho <= 0.99, (side, r)
        out[side] = order
    return out


def kept_cases(min_kept: float, n: int = 30) -> dict[bool, np.ndarray]:
    """Series rising 0, 1, ..., n - 2, then ending at ``min_kept`` (1 +- 3%) of that rise: a rise that falls back
    1-5% less, or more, than its threshold allows (their rank correlation stays high)."""
    out = {}
    for side, factor in EITHER_SIDE.items():
        v = np.append(np.arange(n - 1.0), (n - 2) * min_kept * factor)
        assert kept(v) == pytest.approx(min_kept * factor) and rank_rho(v) > 0.8
        out[side] = v
    return out


def block_fit_sse(y, allowed) -> float:
    """The least squared error of a fit of ``y`` that is constant on consecutive blocks at their means, over every
    split into blocks whose means are ``allowed`` (the least-squares monotone and unimodal fits are such block means):
    brute force over the 2^(n - 1) splits."""
    y = np.asarray(y, float)
    best = np.inf
    for cuts in itertools.product((False, True), repeat=len(y) - 1):
        edges = [0, *[i + 1 for i, c in enumerate(cuts) if c], len(y)]
        means = np.array([y[a:b].mean() for a, b in zip(edges, edges[1:])])
        if allowed(means):
            fit = np.repeat(means, np.diff(edges))
            best = min(best, float(((y - fit) ** 2).sum()))
    return best


def is_monotone(m) -> bool:
    return bool(np.all(np.diff(m) >= 0) or np.all(np.diff(m) <= 0))


def is_unimodal(m) -> bool:
    k = int(np.argmax(m))
    return bool(np.all(np.diff(m[:k + 1]) >= 0) and np.all(np.diff(m[k:]) <= 0))


def sse_ratio(y) -> float:
    return block_fit_sse(y, is_unimodal) / block_fit_sse(y, is_monotone)


def regions(values, band=(0.2, 0.8), ends: float = 0.2) -> tuple[float, float, float]:
    """(first fifth, middle band, last fifth) means of a profile of layers evenly spread over relative depth 0-1."""
    v = np.asarray(values, float)
    depth = np.arange(len(v)) / (len(v) - 1)
    eps = 1e-9
    return (float(v[depth <= ends + eps].mean()), float(v[(depth >= band[0] - eps) & (depth <= band[1] + eps)].mean()),
            float(v[depth >= 1 - ends - eps].mean()))


# ---- frames -------------------------------------------------------------------------------------------------------

def runs(values, column: str, steps, labels=("pythia", "bloom"), **extra) -> pd.DataFrame:
    """Layer averages of decoder runs along training: one row per (run, step)."""
    return pd.concat([pd.DataFrame({"label": label, "model": label, "variant": "pretrained", "stack": "decoder",
                                    "step": list(steps), column: list(values), **extra}) for label in labels],
                     ignore_index=True)


def profiles(values_at: dict[int, list[float]], labels=("pythia", "bloom")) -> pd.DataFrame:
    """Per-layer profiles of decoder runs at several steps: ``values_at[step]`` the layers' sigma1 shares."""
    rows = []
    for label in labels:
        for step, values in values_at.items():
            for layer, v in enumerate(values):
                rows.append({"label": label, "model": label, "variant": "pretrained", "stack": "decoder",
                             "layer": layer, "relative_depth": layer / (len(values) - 1), "sigma1_share": v,
                             "step": step})
    return pd.DataFrame(rows)


def profile(values, labels=("a", "b")) -> pd.DataFrame:
    return profiles({0: values}, labels).drop(columns="step")


def qk(values, column: str, runs=("mlm seed 0", "mlm seed 1"), warmup: int = 40, heads: int = 3,
       **fixed) -> pd.DataFrame:
    """Per-head statistics along training: step 0, then one checkpoint every 50 steps from step 50 (after the warm-up
    of 40 steps) with every head's ``column`` at ``values[i]`` (or, for a list of lists, ``values[i][head]``)."""
    steps = [0, *range(50, 50 * len(values) + 1, 50)]
    rows = []
    for run in runs:
        for step, value in zip(steps, [values[0], *values]):
            for head in range(2 * heads):
                v = value[head] if np.ndim(value) else value
                rows.append({"run": run, "seed": 0, "layer": head // heads, "head": head % heads, "step": step,
                             "head_dim": 32, "warmup": warmup, "entropy_uniform": 4.1, "cos_qk": 0.5, "dot_qk": 1.0,
                             "entropy": 3.0, **fixed, column: v})
    return pd.DataFrame(rows)


# ---- the curve: fits, draws, warm-up --------------------------------------------------------------------------------

def test_the_monotone_and_unimodal_fits_are_the_least_squares_ones():
    """Pool-adjacent-violators and the up-then-down fit against brute force over every split into blocks."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        y = rng.normal(size=int(rng.integers(2, 9)))
        up = curves.increasing_fit(y)
        assert np.all(np.diff(up) >= -1e-12)
        assert ((y - up) ** 2).sum() == pytest.approx(block_fit_sse(y, lambda m: np.all(np.diff(m) >= 0)), abs=1e-9)
        mono, uni = curves.monotone_fit(y), curves.unimodal_fit(y)
        assert ((y - mono) ** 2).sum() == pytest.approx(block_fit_sse(y, is_monotone), abs=1e-9)
        assert ((y - uni) ** 2).sum() == pytest.approx(block_fit_sse(y, is_unimodal), abs=1e-9)
        assert is_unimodal(uni)


def test_draws_redraw_a_point_from_its_batches():
    """Several rows at a point: resampled; one row with a standard deviation over n batches (ddof 0): its mean
    redrawn with standard error std / sqrt(n - 1); neither: no draws."""
    frame = pd.DataFrame({"step": [1, 2, 3], "v": [1.0, 2.0, 3.0], "v_std": [0.3, 0.3, 0.3], "n_batches": 4})
    c = curves.of_frame(frame, "v")
    assert c.draws.shape == (curves.DRAWS, 3)
    assert c.draws.std(axis=0) == pytest.approx(0.3 / np.sqrt(3), rel=0.15)
    assert c.draws.mean(axis=0) == pytest.approx([1, 2, 3], abs=0.05)
    assert curves.of_frame(frame.drop(columns="v_std"), "v").draws is None
    per_batch = pd.DataFrame({"step": [1, 1, 2, 2], "v": [1.0, 3.0, 5.0, 5.0]})
    c = curves.of_frame(per_batch, "v")
    assert list(c.y) == [2.0, 5.0] and set(np.unique(c.draws[:, 0])) <= {1.0, 2.0, 3.0} and (c.draws[:, 1] == 5).all()


def test_the_warmup_of_each_series_the_book_follows():
    from anisotropy.training import recipes

    assert curves.warmup_steps("multiberts-seed-3") == 10_000
    assert curves.warmup_steps("pythia-2.8b") == round(0.01 * 143_000)  # the configs' "warmup": 0.01 of train-iters
    assert curves.warmup_steps("bloom-3b") < 1000  # before the first intermediate checkpoint, global_step1000
    assert curves.warmup_steps("clm", "local") == recipes.suite("clm", "local")[0].warmup
    assert curves.warmup_steps("/some/folder") is None
    part = pd.DataFrame({"step": [0, 10, 50, 100], "warmup": 40, "v": [0, 1, 2, 3]})
    assert curves.growth_start(part)["step"].tolist() == [50, 100]
    assert curves.growth_start(part.assign(warmup=np.nan))["step"].tolist() == [10, 50, 100]
    assert curves.growth_start(part.drop(columns="warmup"))["step"].tolist() == [10, 50, 100]


def test_the_training_page_gives_every_run_its_warmup():
    from anisotropy.chapters import p2_training_dynamics as page

    entries = page.with_warmup([{"model": "/x/clm/seed-0/step-40", "suite": "clm"}, {"model": "pythia-2.8b"}], "local")
    assert [e["warmup"] for e in entries] == [curves.warmup_steps("clm", "local"), 1430]


# ---- monotone rise or fall ------------------------------------------------------------------------------------------

def test_a_rise_reads_the_whole_curve():
    """The issue's curve, 0.10 .. 0.80 .. 0.30: rho 0.58, but it keeps 29% of its gain; two points are too few; a
    perfect rise of three points cannot be told from chance (its interval includes 0)."""
    up_down = [.10, .20, .30, .80, .70, .35, .30]
    ok, t = curves.rises(curves.Curve(np.arange(7.0), np.array(up_down)), 0.5, 0.5)
    assert ok is False and t.rho == pytest.approx(rank_rho(up_down)) and t.kept == pytest.approx(kept(up_down))
    assert curves.rises(curves.Curve(np.arange(2.0), np.array([1.0, 2.0])), 0.5, 0.5)[0] is None
    assert curves.rises(curves.Curve(np.arange(3.0), np.array([1.0, 2.0, 3.0])), 0.5, 0.5)[0] is None
    assert curves.rises(curves.Curve(np.arange(6.0), np.arange(6.0)), 0.5, 0.5)[0] is True
    assert curves.rises(curves.Curve(np.arange(6.0), -np.arange(6.0)), 0.5, 0.5, sign=-1)[0] is True


SECTION_5_RISES = [("p1-s5-dot-grows", p1_s5.dot_grows, "dot_qk", 1),
                   ("p1-s5-entropy-falls", p1_s5.entropy_falls, "entropy", -1),
                   ("p1-s5-qk-drift-anisotropy", p1_s5.qk_anisotropy_emerges, "q_cosine", 1),
                   ("p1-s5-qk-norms-grow", p1_s5.qk_norms_grow, "q_norm", 1)]


def _section_5_frame(column, sign, values):
    """Every head's ``column`` after warm-up following ``values`` (mirrored for a fall), the other column of a pair
    (k_cosine, k_norm) the same."""
    v = 3.0 + sign * 0.05 * np.asarray(values, float)
    frame = qk([float(x) for x in v], column)
    partner = {"q_cosine": "k_cosine", "q_norm": "k_norm"}.get(column)
    return frame.assign(**{partner: frame[column]}) if partner else frame


@pytest.mark.parametrize("claim_id, rule, column, sign", SECTION_5_RISES)
def test_section_5_rises_at_min_rho_and_min_kept(claim_id, rule, column, sign):
    p = params(claim_id)
    for holds, order in rho_cases(p["min_rho"]).items():
        assert rule(_section_5_frame(column, sign, order), **p).holds is holds, (claim_id, "min_rho", holds)
    for holds, values in kept_cases(p["min_kept"]).items():
        assert rule(_section_5_frame(column, sign, values), **p).holds is holds, (claim_id, "min_kept", holds)


@pytest.mark.parametrize("claim_id, rule, column, sign", SECTION_5_RISES)
def test_section_5_rises_are_not_read_from_the_warmup_or_a_rise_that_falls_back(claim_id, rule, column, sign):
    p = params(claim_id)
    steady = np.arange(8.0)
    assert rule(_section_5_frame(column, sign, steady), **p).holds
    # everything between step 0 and the end of warm-up: the frame's step 0 sits far below, flat after
    jump = _section_5_frame(column, sign, [7.0] * 8)
    jump.loc[jump["step"] == 0, column] = 3.0 - sign * 2.0
    assert rule(jump, **p).holds is False
    assert rule(_section_5_frame(column, sign, [0, 2, 4, 6, 7, 5, 3, 1]), **p).holds is False


def aligned_heads(k: int) -> list[float]:
    """Thirty heads' cos(Q̄, K̄) at rank k: heads 0..k outside the isotropic band of d_h = 32, the others inside."""
    return [0.5 + 0.01 * k] * (k + 1) + [0.01 * k] * (29 - k)


def test_alignment_grows_at_min_rho_and_min_kept():
    """Thirty heads; at rank k, heads 0..k lie outside the isotropic band (|cos| 0.5 + 0.01 k > 0.344 at d_h = 32)
    and the others inside (0.01 k): the share outside, (k + 1) / 30, and the median |cos| both follow the rank."""
    p = params("p1-s5-alignment-grows")
    heads = aligned_heads
    for holds, order in rho_cases(p["min_rho"]).items():
        frame = qk([heads(int(k)) for k in order], "cos_qk", heads=15)
        assert p1_s5.alignment_grows(frame, **p).holds is holds, ("min_rho", holds)
    # a rise to k = 29, ending back at k': the share outside keeps k' / 29 of its gain, next to min_kept
    for holds in (True, False):
        last = int(np.ceil(p["min_kept"] * 29)) - (0 if holds else 1)
        share = [(k + 1) / 30 for k in [*range(30), last]]
        assert (kept(share) > p["min_kept"]) is holds and abs(kept(share) / p["min_kept"] - 1) <= 0.05
        frame = qk([heads(k) for k in [*range(30), last]], "cos_qk", heads=15)
        assert p1_s5.alignment_grows(frame, **p).holds is holds, ("min_kept", holds)


def test_almost_all_heads_align_reads_a_rising_share_at_min_rho_and_min_kept():
    """400 heads, of which a count lies outside the isotropic band (|cos| 0.5 against 0.01, the band at d_h = 32 is
    0.344): from 328 (82%) to all 400, the count following the cases; the claim's share at the end always met."""
    p = params("p1-s5-almost-all-heads-align")

    def frame(counts):
        return qk([[0.5] * int(c) + [0.01] * (400 - int(c)) for c in counts], "cos_qk", heads=200)

    for holds, order in rho_cases(p["min_rho"]).items():
        counts = 328 + np.round(np.asarray(order) * 72 / 29)
        assert counts[-1] / 400 >= p["share"]
        assert p1_s5.almost_all_heads_align(frame(counts), **p).holds is holds, ("min_rho", holds)
    for holds, factor in EITHER_SIDE.items():
        counts = [*np.round(np.linspace(328, 400, 29)), round(328 + 72 * p["min_kept"] * factor)]
        assert abs(kept(counts) / p["min_kept"] - factor) < 0.01 and counts[-1] / 400 >= p["share"]
        assert p1_s5.almost_all_heads_align(frame(counts), **p).holds is holds, ("min_kept", holds)


def test_common_first_opposite_last_reads_two_trends_at_min_rho_and_min_kept():
    """The first layer's heads at +v, the last layer's at -v, v = 0.1 + 0.01 x the cases: a rise ending positive in
    the first layer and a fall ending negative in the last."""
    p = params("p1-s5-common-first-opposite-last")

    def frame(series):
        return qk([[v] * 3 + [-v] * 3 for v in 0.1 + 0.01 * np.asarray(series)], "cos_qk")

    for holds, order in rho_cases(p["min_rho"]).items():
        assert p1_s5.common_first_opposite_last(frame(order), **p).holds is holds, ("min_rho", holds)
    for holds, series in kept_cases(p["min_kept"]).items():
        assert p1_s5.common_first_opposite_last(frame(series), **p).holds is holds, ("min_kept", holds)
    flipped = qk([[-v] * 3 + [v] * 3 for v in 0.1 + 0.01 * np.arange(30)], "cos_qk")
    assert p1_s5.common_first_opposite_last(flipped, **p).holds is False


def test_every_run_holds_reads_three_trends_at_min_rho_and_min_kept():
    """The seeds agree when, in every run, the median |cos| and the heads outside the band rise and the entropy falls
    (here all three follow the rank k); a run of two stages with no warm-up (the page's untrained-then-pretrained
    twins) is compared stage to stage, not read as a trend."""
    p = params("p1-s5-seeds-agree")

    def frame(ks):
        f = qk([aligned_heads(int(k)) for k in ks], "cos_qk", heads=15)
        k_at = dict(zip([0, *range(50, 50 * len(ks) + 1, 50)], [ks[0], *ks]))
        means = [np.array([1.0, 0.0])] * len(f)  # the page's summary reads them; the test does not
        return f.assign(entropy=3.0 - 0.01 * f["step"].map(k_at), q_mean=means, k_mean=means)

    for holds, order in rho_cases(p["min_rho"]).items():
        assert p1_s5.every_run_holds(frame(order), **p).holds is holds, ("min_rho", holds)
    for holds in (True, False):
        last = int(np.ceil(p["min_kept"] * 29)) - (0 if holds else 1)
        assert p1_s5.every_run_holds(frame([*range(30), last]), **p).holds is holds, ("min_kept", holds)
    assert p1_s5.every_run_holds(frame([0, 29]), **p).holds is None  # two checkpoints after warm-up
    twins = frame([0, 29]).assign(warmup=np.nan, step=lambda f: f["step"].map({0: 0, 50: 0, 100: 1}))
    twins = twins.drop_duplicates(subset=["run", "step", "layer", "head"], keep="last")
    assert p1_s5.three_part_test(twins, keep_short=True)["holds"].tolist() == [True, True]


def test_qk_norms_grow_at_min_ratio():
    p = params("p1-s5-qk-norms-grow")
    for holds, factor in EITHER_SIDE.items():
        end = p["min_ratio"] * factor
        frame = qk(list(np.linspace(1.0, end, 8)), "q_norm").assign(k_norm=lambda f: 2 * f["q_norm"])
        assert p1_s5.qk_norms_grow(frame, **p).holds is holds, holds
    # the norm 1 -> 3 -> 1.15: 1.15 times its start, but 7.5% of its gain kept
    back = qk([1.0, 2.0, 3.0, 2.5, 2.0, 1.5, 1.15], "q_norm").assign(k_norm=lambda f: f["q_norm"])
    assert p1_s5.qk_norms_grow(back, **p).holds is False


def test_internal_layers_grow_at_its_thresholds():
    p = params("p2-s4-internal-layers-grow")
    steps = [0, *range(10, 310, 10)]

    def frame(series_of_layer, n_layers=5):
        return profiles({s: [0.01, *[series_of_layer(i)[j] for i in range(1, n_layers - 1)], 0.01]
                         for j, s in enumerate(steps)})

    for holds, order in rho_cases(p["min_rho"]).items():
        values = [0.001, *(0.1 + 0.01 * np.asarray(order))]
        assert p2.internal_layers_grow(frame(lambda i: values), **p).holds is holds, ("min_rho", holds)
    for holds, series in kept_cases(p["min_kept"]).items():
        values = [0.001, *(0.1 + 0.01 * series)]
        assert p2.internal_layers_grow(frame(lambda i: values), **p).holds is holds, ("min_kept", holds)
    for holds, factor in EITHER_SIDE.items():
        values = [0.001, *np.linspace(0.1, 0.1 * p["min_growth"] * factor, 30)]
        assert p2.internal_layers_grow(frame(lambda i: values), **p).holds is holds, ("min_growth", holds)
    # share: of 9 internal layers, just enough grow, then one fewer (the others flat)
    n_inner = 9
    needed = int(np.ceil(p["share"] * n_inner - 1e-9))
    for holds, grown in ((True, needed), (False, needed - 1)):
        values = lambda i: [0.001, *(np.linspace(0.1, 0.3, 30) if i <= grown else [0.1] * 30)]  # noqa: E731
        assert p2.internal_layers_grow(frame(values, n_inner + 2), **p).holds is holds, ("share", holds)


def test_bell_builds_up_at_its_thresholds():
    """A five-layer profile [1, h, h, h, 1] has a bell measure of exactly h: the runs' h along training follows the
    cases."""
    p = params("p2-f34-bell-builds-up")
    steps = [0, *range(10, 310, 10)]

    def frame(h):
        return profiles({s: [1.0, v, v, v, 1.0] for s, v in zip(steps, [1.0, *h])})

    for holds, order in rho_cases(p["min_rho"]).items():
        assert p2.bell_builds_up(frame(p["min_ratio"] + 0.1 + 0.01 * order), **p).holds is holds, ("min_rho", holds)
    for holds, series in kept_cases(p["min_kept"]).items():
        assert p2.bell_builds_up(frame(p["min_ratio"] + 0.1 + 0.01 * series), **p).holds is holds, ("min_kept", holds)
    for holds, factor in EITHER_SIDE.items():
        h = np.linspace(1.0, p["min_ratio"] * factor, 30)
        assert p2.bell_builds_up(frame(h), **p).holds is holds, ("min_ratio", holds)


# ---- rise then fall -------------------------------------------------------------------------------------------------

DIM_STEPS = [0, 10, 20, 40, 80, 160, 320, 640, 1000]  # step 0 is initialisation, read from step 10


def test_rise_then_fall_at_min_change():
    """A bump two checkpoints wide at 10 (1 + c), from 10 and back to 10: c 3% above and below min_change. The same
    heights at a single checkpoint (a spike) hold on neither side."""
    p = params("p2-f2-dimension-rises-then-falls")
    for holds, factor in EITHER_SIDE.items():
        top = 10 * (1 + p["min_change"] * factor)
        bump = [12.0, 10, 10, top, top, 10, 10, 10, 10]
        assert p2.rise_then_fall(runs(bump, "twonn_dimension", DIM_STEPS), **p).holds is holds, holds
        spike = [12.0, 10, 10, 10, top, 10, 10, 10, 10]
        assert p2.rise_then_fall(runs(spike, "twonn_dimension", DIM_STEPS), **p).holds is False, holds


def test_rise_then_fall_at_max_sse_ratio():
    """Between a tent (a clean rise and fall, SSE ratio 0) and a zigzag of four equal peaks (the unimodal fit barely
    better than the monotone one): the mix whose ratio, by brute force over block fits, sits 3% either side of
    max_sse_ratio."""
    p = params("p2-f2-dimension-rises-then-falls")
    tent, zigzag = np.array([0, 1, 2, 3, 4, 3, 2, 1, 0.]), np.array([0, 4, 0, 4, 0, 4, 0, 4, 0.])

    def curve(t):
        return 10 + 3 * ((1 - t) * tent + t * zigzag)

    steps = [0, 10, 20, 30, 40, 50, 100, 200, 400, 800]  # peaks within the first half of training
    for holds, factor in EITHER_SIDE.items():
        target, (lo, hi) = p["max_sse_ratio"] * factor, (0.3, 1.0)
        for _ in range(40):  # the ratio grows with t over [0.3, 1]
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sse_ratio(curve(mid)) < target else (lo, mid)
        y = curve((lo + hi) / 2)
        assert sse_ratio(y) / p["max_sse_ratio"] == pytest.approx(factor, abs=0.01)
        frame = runs([30.0, *y], "twonn_dimension", steps)
        assert p2.rise_then_fall(frame, **p).holds is (not holds), holds  # at most max_sse_ratio holds


def test_rise_then_fall_at_its_peak_share_and_through_the_warmup():
    p = params("p2-f2-dimension-rises-then-falls")
    bump = [30.0, 10, 11, 12, 13, 11, 10, 10]  # the peak at the fifth step
    for holds, factor in EITHER_SIDE.items():
        at = 1000 * p["peak_share"] * (2 - factor)  # the peak's step, as a share of the last (1,000): 3% below holds
        steps = [0, 1, 2, at / 2, at, at + 1, at + 2, 1000]
        assert p2.rise_then_fall(runs(bump, "twonn_dimension", steps), **p).holds is holds, holds
    # the self-trained decoder's TwoNN: 9.0 -> 12.2 inside its 60-step warm-up, then a steady fall
    steps, values = [0, 1, 20, 40, 101, 200, 400, 800, 1600], [9.0, 9.04, 11.0, 12.22, 7.81, 6.76, 5.89, 5.5, 5.15]
    assert p2.rise_then_fall(runs(values, "twonn_dimension", steps), **p).holds  # read from step 1: it holds
    assert p2.rise_then_fall(runs(values, "twonn_dimension", steps, warmup=60), **p).holds is False
    assert p2.peaks_early(runs(values, "twonn_dimension", steps), **params("p2-s4-dimension-peaks-early")).holds
    assert p2.peaks_early(runs(values, "twonn_dimension", steps, warmup=60),
                          **params("p2-s4-dimension-peaks-early")).holds is False


def test_rise_then_fall_reads_the_peaks_interval_from_the_batches():
    """A bump whose batches' spread puts the fitted peak at the first checkpoint in some redraws: undecided."""
    p = params("p2-f2-dimension-rises-then-falls")
    clear = runs([30.0, 10, 12, 14, 14, 12, 10, 10, 10], "twonn_dimension", DIM_STEPS, twonn_dimension_std=0.01,
                 n_batches=4)
    assert p2.rise_then_fall(clear, **p).holds
    noisy = runs([30.0, 12.0, 12.4, 13.5, 13.5, 12, 10, 10, 10], "twonn_dimension", DIM_STEPS,
                 twonn_dimension_std=3.0, n_batches=4)
    assert p2.rise_then_fall(noisy, **p).holds is None


def test_peaks_early_at_share_and_min_change():
    p = params("p2-s4-dimension-peaks-early")
    for holds, factor in EITHER_SIDE.items():
        at = 1000 * p["share"] * (2 - factor)
        steps = [0, 1, 2, at / 2, at, at + 1, at + 2, 1000]
        bump = [30.0, 10, 11, 12, 13, 11, 10, 10]
        assert p2.peaks_early(runs(bump, "twonn_dimension", steps), **p).holds is holds, ("share", holds)
    for holds, factor in EITHER_SIDE.items():
        top = 10 * (1 + p["min_change"] * factor)
        bump = [30.0, 10, 10, top, top, 10, 10, 10, 10]
        assert p2.peaks_early(runs(bump, "twonn_dimension", DIM_STEPS), **p).holds is holds, ("min_change", holds)
        spike = [30.0, 10, 10, 10, 2 * top, 10, 10, 10, 10]
        assert p2.peaks_early(runs(spike, "twonn_dimension", DIM_STEPS), **p).holds is False, holds


# ---- plateau --------------------------------------------------------------------------------------------------------

def test_grows_then_stabilises_at_its_thresholds():
    """From 0.1 at the first checkpoint after initialisation to a plateau: its lowest point (min_growth) and how far
    it moves against its level's rise (max_late_change), each 3% either side; and the rise that falls back."""
    p = params("p2-f34-anisotropy-grows-then-stabilises")
    steps = [0, 10, 20, 40, 80, 160, 320]  # read from step 10: the last third is steps 80-320

    for holds, factor in EITHER_SIDE.items():
        low = 0.1 * p["min_growth"] * factor
        values = [0.01, 0.1, 0.12, 0.13, low, low, low]
        assert p2.grows_then_stabilises(runs(values, "sigma1_share", steps), **p).holds is holds, ("growth", holds)
    for holds, factor in EITHER_SIDE.items():
        # the last third 0.3, 0.3 + w, 0.3: it moves by w, its level's rise is 0.2 + w / 3
        want = p["max_late_change"] * (2 - factor)
        w = 0.2 * want / (1 - want / 3)
        late = np.array([0.3, 0.3 + w, 0.3])
        assert (late.max() - late.min()) / (late.mean() - 0.1) == pytest.approx(want)
        values = [0.01, 0.1, 0.2, 0.25, *late]
        assert p2.grows_then_stabilises(runs(values, "sigma1_share", steps), **p).holds is holds, ("late", holds)
    back = [0.01, 0.1, 0.5, 0.1, 0.1, 0.1, 0.1]  # up and back to where it started: still, but nothing grew
    assert p2.grows_then_stabilises(runs(back, "sigma1_share", steps), **p).holds is False
    jump = [0.01, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]  # a jump from random initialisation, flat after
    assert p2.grows_then_stabilises(runs(jump, "sigma1_share", steps), **p).holds is False
    assert p2.grows_then_stabilises(runs([0.01, 0.1, 0.3, 0.5, 0.6, 0.6, 0.6], "sigma1_share", steps),
                                    **p).holds  # read from step 10
    assert p2.grows_then_stabilises(runs([0.01, 0.1, 0.3, 0.5, 0.6, 0.6, 0.6], "sigma1_share", steps,
                                         warmup=50), **p).holds is False  # the growth lies inside a 50-step warm-up


# ---- bell over depth ------------------------------------------------------------------------------------------------

def test_bell_at_min_ratio_and_its_band():
    """Eleven layers at 1.0 but the interior of the middle band (strictly between its edges), raised to h so that
    the middle layers' mean over the higher end sits 3% either side of min_ratio (region means by plain numpy)."""
    p = params("p2-f1-decoders-bell")
    band = tuple(p["band"])
    depth = np.arange(11) / 10
    interior = (depth > band[0] + 1e-9) & (depth < band[1] - 1e-9)
    edges = ((depth >= band[0] - 1e-9) & (depth <= band[1] + 1e-9)).sum() - interior.sum()
    for holds, factor in EITHER_SIDE.items():
        target = p["min_ratio"] * factor
        values = np.where(interior, (target * (edges + interior.sum()) - edges) / interior.sum(), 1.0)
        head, middle, tail = regions(values, band)
        assert middle / max(head, tail) == pytest.approx(target)
        assert p2.bell_shaped(profile(list(values)), **p).holds is holds, holds
    # a single high layer is no bell (the issue's: the middle layers average 1.12 times the ends); nor a plateau that
    # reaches an end
    spike = [0.1] * 4 + [0.16] + [0.1] * 4
    assert regions(spike)[1] / 0.1 < p["min_ratio"] and p2.bell_shaped(profile(spike), **p).holds is False
    plateau = [0.1, 0.1, 0.1, 0.2, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1]
    assert p2.bell_shaped(profile(plateau), **p).holds is False
    assert plateau[5] / ((plateau[0] + plateau[-1]) / 2) == pytest.approx(10.0)  # what the end layers alone give


def test_bell_middle_region_is_the_claims_band():
    """A profile high only just outside the band (depths 0.1 and 0.9 of 11 layers) and low inside is no bell; high
    only just inside it is."""
    p = params("p2-f1-decoders-bell")
    low, high = p["band"]
    depth = np.arange(11) / 10
    inside = (depth >= low - 1e-9) & (depth <= high + 1e-9)
    ring = np.where((depth > low - 0.15) & (depth < low) | (depth < high + 0.15) & (depth > high), 5.0, 1.0)
    assert not inside[ring == 5.0].any() and p2.bell_shaped(profile(list(ring)), **p).holds is False
    core = np.where(inside, 5.0, 1.0)
    assert p2.bell_shaped(profile(list(core)), **p).holds


def test_bell_undecided_within_its_batches_noise():
    p = params("p2-f1-decoders-bell")
    values = [1.0, 1.0, p["min_ratio"] * 1.02, p["min_ratio"] * 1.02, p["min_ratio"] * 1.02, 1.0, 1.0]
    frame = profile(values)
    assert p2.bell_shaped(frame, **p).holds
    noisy = frame.assign(sigma1_share_std=0.3, n_batches=4)
    out = p2.bell_shaped(noisy, **p)
    assert out.holds is None and "interval" in out.value


def test_the_protocol_reading_leaves_the_first_position_out_for_every_decoder():
    """A decoder whose first position was measured (no <bos>) is read without it, one whose <bos> the protocol left
    out as measured: the same reading for both."""
    p = params("p2-f1-decoders-bell")
    bell, flat = [0.1, 0.3, 0.6, 0.3, 0.1], [0.5] * 5
    smol = profile(flat, labels=("smol",)).assign(first_position_measured=True, sigma1_share_no_first=bell)
    gemma = profile(bell, labels=("gemma",)).assign(first_position_measured=False, sigma1_share_no_first=flat)
    out = p2.bell_shaped(pd.concat([smol, gemma]), **p)
    assert out.holds and "smol 4.00, first position out" in out.value and "gemma 4.00" in out.value


def test_encoders_and_decoders_compared_by_regions_not_layers():
    """One 0.05 layer in a flat encoder no longer gives it a larger spread than a bell (the issue's case)."""
    flat_dip, bell = [0.3, 0.3, 0.05, 0.3, 0.3], [0.1, 0.3, 0.5, 0.3, 0.1]
    frame = pd.concat([profile(flat_dip).assign(stack="encoder"), profile(bell, labels=("c", "d"))])
    assert max(flat_dip) / min(flat_dip) > max(bell) / min(bell)  # what the layer reading gave
    encoder, decoder = regions(flat_dip), regions(bell)
    assert max(encoder) / min(encoder) < max(decoder) / min(decoder)
    assert p2.more_uniform_than(frame).holds
    one_high = [0.1, 0.1, 0.5, 0.1, 0.1]
    tall = pd.concat([profile(one_high).assign(stack="encoder"), profile([0.3] * 5, ("c", "d"))])
    assert max(one_high) > 0.3 and max(regions(one_high)) < 0.3  # one layer above the decoders, no region
    assert p2.decoders_above_encoders(tall).holds
