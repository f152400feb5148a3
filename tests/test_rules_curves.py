"""Rules about training and layer profiles see the whole curve: a plateau is no bell, a rise that falls back is no
growth, a jump from random initialisation is no growth; and each threshold is tested just above and just below the
value its claim gives it in claims.yml. The thresholds are read from claims.yml, so these tests follow an edited
threshold; a threshold edited without its quote or its reading_why fails tests/test_quotes.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anisotropy.claims import ledger as claims
from anisotropy.claims.rules import common, p1_s5, p2

STEPS = (0, 10, 100, 1000, 4000, 10000, 20000)


def runs(curve_of, labels=("pythia", "bloom"), column: str = "sigma1_share", steps=STEPS) -> pd.DataFrame:
    """Layer averages along training: one row per (run, step), ``curve_of(label)`` the values at ``steps``."""
    return pd.concat([pd.DataFrame({"label": label, "model": label, "variant": "pretrained", "stack": "decoder",
                                    "step": list(steps), column: curve_of(label)}) for label in labels],
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


# ---- the shared definitions ---------------------------------------------------------------------------------------

def test_growth_is_measured_from_the_first_checkpoint_after_warmup_or_after_initialisation():
    part = pd.DataFrame({"step": [0, 10, 50, 100], "warmup": 40, "v": [0, 1, 2, 3]})
    assert common.growth_start(part)["step"].tolist() == [50, 100]
    assert common.growth_start(part.assign(warmup=np.nan))["step"].tolist() == [10, 50, 100]
    assert common.growth_start(part.drop(columns="warmup"))["step"].tolist() == [10, 50, 100]


def test_a_rise_that_falls_back_or_a_flat_series_does_not_rise():
    steps = np.arange(6.0)
    assert common.rises(steps, [1, 2, 3, 4, 5, 6], 0.5)
    assert not common.rises(steps, [1, 4, 8, 6, 4, 2], 0.5)  # up to 0.8 and down to 0.2: the decoder
    assert not common.rises(steps, [5, 5, 5, 5, 5, 5], 0.5)
    assert not common.rises(steps, [1, 6, 5, 4, 3, 2], 0.5)  # ends above its start, but falls from the second point
    assert common.trend([0, 1], [1, 2]) == 1.0 and common.trend([0, 1], [2, 1]) == -1.0


# ---- Paper 2 ----------------------------------------------------------------------------------------------------

def test_a_plateau_that_reaches_an_end_is_no_bell_and_the_ratio_is_tested_at_its_threshold():
    params = claims.claim("p2-f1-decoders-bell").params
    ratio = params["min_ratio"]
    n = 11  # ends: the first and last fifth of depth, layers 0-2 and 8-10

    def bell(peak):  # ends at 1.0, a peak at the middle layer
        values = [1.0] * n
        values[5] = peak
        return profile(values)

    assert p2.bell_shaped(bell(ratio * 1.01), **params).holds
    assert p2.bell_shaped(bell(ratio * 0.99), **params).holds is False
    plateau = [0.1, 0.1, 0.1, 0.2, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1]  # 10 times its end layers, up to depth 0.9
    out = p2.bell_shaped(profile(plateau), **params)
    assert out.holds is False  # the last fifth averages (1.0 + 1.0 + 0.1) / 3
    assert plateau[5] / ((plateau[0] + plateau[-1]) / 2) == pytest.approx(10.0)  # what the end layers alone give


def test_bell_builds_up_at_its_threshold_and_not_on_a_plateau():
    params = claims.claim("p2-f34-bell-builds-up").params
    flat = [1.0] * 11

    def peaked(peak):
        values = list(flat)
        values[5] = peak
        return values

    assert p2.bell_builds_up(profiles({0: flat, 400: peaked(params["min_ratio"] * 1.01)}), **params).holds
    assert p2.bell_builds_up(profiles({0: flat, 400: peaked(params["min_ratio"] * 0.99)}), **params).holds is False
    plateau = [0.1, 0.1, 0.1, 0.2, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1]
    assert p2.bell_builds_up(profiles({0: flat, 400: plateau}), **params).holds is False


def test_grows_then_stabilises_from_the_first_checkpoint_after_initialisation_at_its_thresholds():
    params = claims.claim("p2-f34-anisotropy-grows-then-stabilises").params
    g, late = params["min_growth"], params["max_late_change"]

    def curve(growth, wobble=0.0):  # 0.05 at initialisation, 0.1 at the first checkpoint after it, then up to growth
        top = 0.1 * growth
        return lambda label: [0.05, 0.1, 0.1 + (top - 0.1) * 0.5, top, top, top - wobble * (top - 0.1), top]

    assert p2.grows_then_stabilises(runs(curve(g * 1.02)), **params).holds
    assert p2.grows_then_stabilises(runs(curve(g * 0.98)), **params).holds is False
    # the last third moves by just under and just over max_late_change of the rise
    assert p2.grows_then_stabilises(runs(curve(2.0, late * 0.95)), **params).holds
    assert p2.grows_then_stabilises(runs(curve(2.0, late * 1.05)), **params).holds is False
    # a step-0 jump: random weights at 0.05, then flat at 0.5; from step 0 it would be a tenfold growth
    jump = lambda label: [0.05, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]  # noqa: E731
    assert p2.grows_then_stabilises(runs(jump), **params).holds is False


def test_internal_layers_grow_sees_the_whole_series_and_its_thresholds():
    params = claims.claim("p2-s4-internal-layers-grow").params
    g = params["min_growth"]
    steps = (0, 10, 100, 1000, 10000)

    def series(ends_at, shape=(0.0, 1 / 3, 2 / 3, 1.0), start=0.1):
        """Internal layers go from ``start`` at step 10 to ``start * ends_at``, along ``shape``; step 0 at 0.01."""
        out = {0: [0.01] * 5}
        for step, t in zip(steps[1:], shape):
            v = start * (1 + (ends_at - 1) * t)
            out[step] = [0.01, v, v, v, 0.01]
        return profiles(out)

    assert p2.internal_layers_grow(series(g * 1.02), **params).holds
    assert p2.internal_layers_grow(series(g * 0.98), **params).holds is False
    # the rise-then-fall: up to 0.8 and down to 0.2 from 0.1 ends twice as high, yet does not grow
    rise_fall = {0: [0.01] * 5, 10: [0.01, 0.1, 0.1, 0.1, 0.01], 100: [0.01, 0.8, 0.8, 0.8, 0.01],
                 1000: [0.01, 0.5, 0.5, 0.5, 0.01], 10000: [0.01, 0.2, 0.2, 0.2, 0.01]}
    frame = profiles(rise_fall)
    assert p2.internal_layers_grow(frame, **params).holds is False
    # ... which the endpoint reading (last over first) would have called growth
    assert 0.2 / 0.1 >= g
    # a jump from step 0, flat after: no growth
    jump = {0: [0.01] * 5, **{s: [0.01, 0.5, 0.5, 0.5, 0.01] for s in steps[1:]}}
    assert p2.internal_layers_grow(profiles(jump), **params).holds is False


def test_internal_layers_grow_at_its_min_rho_and_share():
    """min_rho: every internal layer follows an order one rank step above, then below, the claim's min_rho (values
    doubling with the rank, so each ends at least twice where it starts); share: just enough internal layers grow, then
    one fewer."""
    params = claims.claim("p2-s4-internal-layers-grow").params
    steps = (0, 10, 100, 1000, 2000, 5000, 10000)
    for holds, (r, order) in orders_either_side(params["min_rho"]).items():
        values_at = {0: [0.01] * 5, **{s: [0.01, *[0.1 * 2 ** k] * 3, 0.01] for s, k in zip(steps[1:], order)}}
        assert p2.internal_layers_grow(profiles(values_at), **params).holds is holds, (r, order)
    n_inner = 5
    needed = int(np.ceil(params["share"] * n_inner - 1e-9))

    def growing(k):  # k of the internal layers double at every checkpoint, the others stay flat
        return profiles({s: [0.01, *[0.1 * 2 ** i] * k, *[0.1] * (n_inner - k), 0.01]
                         for i, s in enumerate(steps)})

    assert p2.internal_layers_grow(growing(needed), **params).holds
    assert p2.internal_layers_grow(growing(needed - 1), **params).holds is False


def test_grows_then_stabilises_does_not_take_a_rise_that_falls_back():
    params = claims.claim("p2-f34-anisotropy-grows-then-stabilises").params
    # the self-trained decoder's shape: 0.05 -> 0.64 -> 0.18; it reached 1.2 times its start but did not stabilise
    fall = lambda label: [0.05, 0.08, 0.53, 0.64, 0.46, 0.27, 0.18]  # noqa: E731
    assert p2.grows_then_stabilises(runs(fall), **params).holds is False
    # up and back down to where it started, early, then flat: the last third is still, but nothing grew
    back = lambda label: [0.05, 0.1, 0.5, 0.1, 0.1, 0.1, 0.1]  # noqa: E731
    assert p2.grows_then_stabilises(runs(back), **params).holds is False
    # ... and the same shape settling at the grown level does hold
    settled = lambda label: [0.05, 0.1, 0.5, 0.3, 0.3, 0.3, 0.3]  # noqa: E731
    assert p2.grows_then_stabilises(runs(settled), **params).holds


def test_growth_inside_the_warmup_does_not_count_where_the_frame_gives_the_warmup():
    """With a ``warmup`` column, the training rules start at the first checkpoint at or after it: a rise and a peak
    that happen during the warm-up (steps 10 and 100 of a 500-step warm-up) are no growth and no early peak."""
    warm = {"warmup": 500}
    rise = lambda label: [0.05, 0.3, 0.6, 0.6, 0.6, 0.6, 0.6]  # noqa: E731
    growth = claims.claim("p2-f34-anisotropy-grows-then-stabilises").params
    assert p2.grows_then_stabilises(runs(rise), **growth).holds  # from step 10 (no warm-up known): 0.3 -> 0.6
    assert p2.grows_then_stabilises(runs(rise).assign(**warm), **growth).holds is False
    peak = lambda label: [10.0, 12.0, 20.0, 14.0, 12.0, 11.0, 10.0]  # noqa: E731
    for claim_id, rule in (("p2-s4-dimension-peaks-early", p2.peaks_early),
                           ("p2-f2-dimension-rises-then-falls", p2.rise_then_fall)):
        params = claims.claim(claim_id).params
        assert rule(runs(peak, column="twonn_dimension"), **params).holds, claim_id
        assert rule(runs(peak, column="twonn_dimension").assign(**warm), **params).holds is False, claim_id


def test_bell_peak_at_the_edges_of_the_middle_band():
    """The peak just inside and just outside the claim's band of relative depth (101 layers: depths 0.00 to 1.00)."""
    params = claims.claim("p2-f1-decoders-bell").params
    low, high = params["band"]

    def peak_at(depth):
        values = [1.0] * 101
        values[int(round(depth * 100))] = 2 * params["min_ratio"]
        return profile(values)

    assert p2.bell_shaped(peak_at(low + 0.01), **params).holds
    assert p2.bell_shaped(peak_at(high - 0.01), **params).holds
    assert p2.bell_shaped(peak_at(low - 0.01), **params).holds is False
    assert p2.bell_shaped(peak_at(high + 0.01), **params).holds is False


def test_peaks_early_at_its_threshold_share_of_training():
    params = claims.claim("p2-s4-dimension-peaks-early").params
    share = params["share"]
    steps = (0, 10, 1000, round(share * 0.98 * 100000), round(share * 1.02 * 100000), 60000, 100000)

    def peak_at(i):
        values = [10.0, 11.0, 12.0, 12.5, 12.5, 12.0, 11.0]
        values[i] = 20.0
        return lambda label: values

    assert p2.peaks_early(runs(peak_at(3), column="twonn_dimension", steps=steps), **params).holds  # 24.5%
    assert p2.peaks_early(runs(peak_at(4), column="twonn_dimension", steps=steps), **params).holds is False  # 25.5%


def test_rise_then_fall_at_its_threshold_change():
    params = claims.claim("p2-f2-dimension-rises-then-falls").params
    c = params["min_change"]

    def curve(above):  # 10 at the first checkpoint after initialisation and at the end, the peak ``above`` both
        return lambda label: [30.0, 10.0, 10.0 * (1 + above), 10.0 * (1 + above) * 0.99, 10.0, 10.0, 10.0]

    assert p2.rise_then_fall(runs(curve(c * 1.1), column="twonn_dimension"), **params).holds
    assert p2.rise_then_fall(runs(curve(c * 0.9), column="twonn_dimension"), **params).holds is False
    # random initialisation's dimension (30) above everything after is not the rise the paper reads
    assert p2.rise_then_fall(runs(lambda label: [30.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0],
                                  column="twonn_dimension"), **params).holds is False


# ---- Paper 1, Section 5 -------------------------------------------------------------------------------------------

def qk(curve, column: str, runs=("mlm seed 0", "mlm seed 1"), steps=(0, 50, 100, 200, 400, 800, 1250),
       warmup: int = 40, **fixed) -> pd.DataFrame:
    """Per-head statistics along training: every head's ``column`` at the steps follows ``curve`` (step 0 included)."""
    rows = []
    for run in runs:
        for step, value in zip(steps, curve):
            for layer in range(2):
                for head in range(3):
                    rows.append({"run": run, "seed": 0, "layer": layer, "head": head, "step": step, "head_dim": 32,
                                 "warmup": warmup, "entropy_uniform": 4.1, "cos_qk": 0.5, "dot_qk": 1.0,
                                 "entropy": 3.0, **fixed, column: value})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("rule, column, sign", [(p1_s5.dot_grows, "dot_qk", 1), (p1_s5.entropy_falls, "entropy", -1),
                                                (p1_s5.alignment_grows, "cos_qk", 1)])
def test_section_5_trends_read_the_whole_series_after_warmup(rule, column, sign):
    params = claims.claim({"dot_qk": "p1-s5-dot-grows", "entropy": "p1-s5-entropy-falls",
                           "cos_qk": "p1-s5-alignment-grows"}[column]).params

    def values(shape):
        base = 2.0 if column == "entropy" else 0.05
        return [base + sign * 0.4 * t for t in shape]

    steady = values([0.0, 0.1, 0.3, 0.5, 0.6, 0.8, 1.0])
    assert rule(qk(steady, column), **params).holds, rule.__name__
    # a rise that falls back (for the entropy: a fall that comes back up) ends where it started
    back = values([0.0, 0.1, 0.6, 1.0, 0.6, 0.2, 0.05])
    assert rule(qk(back, column), **params).holds is False, rule.__name__
    # everything between step 0 and the end of warm-up, nothing after
    jump = values([0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert rule(qk(jump, column), **params).holds is False, rule.__name__


def orders_either_side(rho: float, n: int = 6) -> dict[bool, tuple[float, tuple[int, ...]]]:
    """The orderings of ``range(n)`` (each ending above where it starts) whose Spearman's rho against their position
    is closest to ``rho`` from above (key True: at least ``rho``) and from below (False): brute force over every
    permutation, so the cases sit one rank step (6 / 35 for six points) either side of the threshold."""
    import itertools

    from scipy import stats

    best = {True: None, False: None}
    for order in itertools.permutations(range(n)):
        if order[-1] > order[0]:
            r = float(stats.spearmanr(range(n), order).statistic)
            side = r >= rho
            if best[side] is None or abs(r - rho) < abs(best[side][0] - rho):
                best[side] = (r, order)
    for r, _ in best.values():
        assert abs(r - rho) < 0.2
    return best


def qk_per_head(values_at: list[list[float]], column: str, steps=(0, 50, 100, 200, 400, 800, 1250),
                warmup: int = 40) -> pd.DataFrame:
    """Like ``qk``, but ``values_at[i]`` gives the six heads (2 layers x 3) their own ``column`` at ``steps[i]``."""
    frame = qk([0.0] * len(steps), column, steps=steps, warmup=warmup)
    per_step = dict(zip(steps, values_at))
    position = frame["layer"] * 3 + frame["head"]
    return frame.assign(**{column: [per_step[s][i] for s, i in zip(frame["step"], position)]})


@pytest.mark.parametrize("rule, claim_id", [(p1_s5.dot_grows, "p1-s5-dot-grows"),
                                            (p1_s5.entropy_falls, "p1-s5-entropy-falls"),
                                            (p1_s5.alignment_grows, "p1-s5-alignment-grows")])
def test_section_5_trend_threshold_min_rho_on_either_side(rule, claim_id):
    """Each Section 5 trend at its claim's own min_rho: six checkpoints after warm-up in an order whose rho is one
    rank step above, then one below (the entropy mirrored: it must fall)."""
    params = claims.claim(claim_id).params
    for holds, (r, order) in orders_either_side(params["min_rho"]).items():
        if rule is p1_s5.alignment_grows:
            # at rank k, k + 1 of the six heads sit outside the isotropic band (|cos| 0.5 + 0.01 k > 0.344 for
            # head_dim 32) and the rest inside (0.01 k): the median |cos| and the share outside both follow the rank
            values = [[0.5] * 6] + [[0.5 + 0.01 * k] * (k + 1) + [0.01 * k] * (5 - k) for k in order]
            frame = qk_per_head(values, "cos_qk")
        elif rule is p1_s5.entropy_falls:
            frame = qk([4.0] + [3.0 - 0.1 * k for k in order], "entropy")
        else:
            frame = qk([0.0] + [1.0 + k for k in order], "dot_qk")
        assert rule(frame, **params).holds is holds, (rule.__name__, r, order)


def test_qk_norms_grow_at_its_threshold_ratio():
    params = claims.claim("p1-s5-qk-norms-grow").params
    ratio = params["min_ratio"]

    def frame(growth):
        curve = [0.2, 1.0, 1.0 + (growth - 1) / 3, 1.0 + 2 * (growth - 1) / 3, growth, growth, growth]
        return qk(curve, "q_norm").assign(k_norm=lambda f: 2 * f["q_norm"])

    assert p1_s5.qk_norms_grow(frame(ratio * 1.01), **params).holds
    assert p1_s5.qk_norms_grow(frame(ratio * 0.99), **params).holds is False


# ---- the ablation of Paper 1's conclusion (its bars are module constants, not claim params) ---------------------

def test_ablation_bars_at_their_thresholds():
    """The ablation answers only when its runs learnt (``LEARNT_NATS`` below the unigram baseline) and standard
    attention is sharp (entropy ratio at most ``SHARP_RATIO``); a variant is as sharp up to ``ABLATION_TOLERANCE``
    and more isotropic only beyond it. Each bar just met and just missed."""
    from anisotropy.claims.rules import ablation

    cols = ["variant", "seed", "val_loss", "entropy_ratio", "mean_cosine"]

    def frame(std_ratio=0.5, sharpness=0.5, cosine=0.1, gain=None):
        rows = [("standard", s, 2.0, std_ratio, 0.30) for s in (0, 1)]
        rows += [("qk_norm", s, 2.0, sharpness, cosine) for s in (0, 1)]
        out = pd.DataFrame(rows, columns=cols)
        return out if gain is None else out.assign(unigram=2.0 + gain)

    learnt, sharp, tol = ablation.LEARNT_NATS, ablation.SHARP_RATIO, ablation.ABLATION_TOLERANCE
    assert ablation.sharp_without_anisotropy(frame(gain=learnt * 1.01)).holds
    assert ablation.sharp_without_anisotropy(frame(gain=learnt * 0.99)).holds is None
    assert ablation.sharp_without_anisotropy(frame(std_ratio=sharp * 0.99, sharpness=sharp * 0.99)).holds
    assert ablation.sharp_without_anisotropy(frame(std_ratio=sharp * 1.01, sharpness=sharp * 1.01)).holds is None
    assert ablation.sharp_without_anisotropy(frame(sharpness=0.5 + tol * 0.9)).holds
    assert ablation.sharp_without_anisotropy(frame(sharpness=0.5 + tol * 1.1)).holds is False
    assert ablation.sharp_without_anisotropy(frame(cosine=0.30 - tol * 1.1)).holds
    assert ablation.sharp_without_anisotropy(frame(cosine=0.30 - tol * 0.9)).holds is False
