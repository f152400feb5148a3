"""Paper 1, Section 3 and Appendix B rules: a layer counts as above (below) a threshold only when its whole interval
is; a non-negative layer is read against the isotropic reference of its own support; and each threshold is tested
just above and just below the value its claim gives it in claims.yml."""

from __future__ import annotations

import numpy as np
import pandas as pd

from anisotropy.claims import ledger as claims
from anisotropy.claims.rules import p1_s3
from anisotropy.measure.baseline import isotropic_cosine_quantile

Q = float(isotropic_cosine_quantile(0.95, 768))


def layers(values: dict[str, list[float]], half_width: float | None = None, dim: int = 768, **columns) -> pd.DataFrame:
    rows = []
    for label, series in values.items():
        for layer, v in enumerate(series):
            row = {"label": label, "model": label, "variant": "pretrained", "family": "cnn", "layer": layer,
                   "dim": dim, "mean_cosine": v, "null_q95": Q, **columns}
            if half_width is not None:
                row.update(mean_cosine_low=v - half_width, mean_cosine_high=v + half_width)
            rows.append(row)
    return pd.DataFrame(rows)


def test_a_layer_counts_above_or_below_only_with_its_whole_interval():
    # every_layer_above at the speech claim's 0.2: a layer at 0.21 with an interval of +-0.02 is not above
    t = claims.claim("p1-s3.2-speech-above-0.2").params["threshold"]
    assert p1_s3.every_layer_above(layers({"w": [0.5, t + 0.01]}), threshold=t).holds
    assert p1_s3.every_layer_above(layers({"w": [0.5, t + 0.01]}, half_width=0.02), threshold=t).holds is False
    assert p1_s3.every_layer_above(layers({"w": [0.5, t + 0.03]}, half_width=0.02), threshold=t).holds
    # close_to_isotropic at MiT's 0.1: a layer at 0.09 whose interval reaches 0.11 is not below
    t = claims.claim("p1-s3.2-mit-isotropic").params["threshold"]
    assert p1_s3.close_to_isotropic(layers({"mit": [0.0, t - 0.01]}), threshold=t).holds
    assert p1_s3.close_to_isotropic(layers({"mit": [0.0, t - 0.01]}, half_width=0.02), threshold=t).holds is False
    # some_layer_above_null: a layer just above the q95 whose interval dips below it does not count
    assert p1_s3.some_layer_above_null(layers({"a": [0.0, Q * 1.2]})).holds
    assert p1_s3.some_layer_above_null(layers({"a": [0.0, Q * 1.2]}, half_width=Q * 0.5)).holds is False


def test_cnn_layers_after_a_relu_are_read_against_the_null_of_their_support():
    params = claims.claim("p1-s3.2-cnns-isotropic").params
    t = params["threshold"]
    null = 1 / np.pi  # rectified Gaussian coordinates: a mean cosine of 0.318 is what no direction at all gives
    at_null = layers({"vgg": [null + 0.01] * 4, "effnet": [null + 0.02] * 4}, nonnegative=True, null_support=null)
    assert p1_s3.majority_isotropic(at_null, **params).holds
    # the same cosines in signed layers (reference 0) are far from isotropic
    signed = at_null.assign(nonnegative=False)
    assert p1_s3.majority_isotropic(signed, **params).holds is False
    # just below and just above the threshold over the null
    below = layers({"vgg": [null + t * 0.9] * 4, "effnet": [null + t * 0.9] * 4}, nonnegative=True, null_support=null)
    above = layers({"vgg": [null + t * 1.1] * 4, "effnet": [null + t * 1.1] * 4}, nonnegative=True, null_support=null)
    assert p1_s3.majority_isotropic(below, **params).holds
    assert p1_s3.majority_isotropic(above, **params).holds is False
    # read with the interval's ends: a point just below whose interval reaches above is not counted isotropic, nor
    # against it (undecided); a point just above whose whole interval is above counts against it
    wide = layers({"vgg": [null + t * 0.9] * 4, "effnet": [null + t * 0.9] * 4}, half_width=t * 0.2,
                  nonnegative=True, null_support=null)
    assert p1_s3.majority_isotropic(wide, **params).holds is None
    narrow = layers({"vgg": [null + t * 1.1] * 4, "effnet": [null + t * 1.1] * 4}, half_width=t * 0.05,
                    nonnegative=True, null_support=null)
    assert p1_s3.majority_isotropic(narrow, **params).holds is False


def test_most_layers_above_null_at_the_claims_share():
    share = claims.claim("p1-s3.2-vit-anisotropic").params["share"]
    n = 10
    k_at = int(np.ceil(share * n))  # the fewest layers above that make the share
    at = [0.5] * k_at + [0.0] * (n - k_at)
    under = [0.5] * (k_at - 1) + [0.0] * (n - k_at + 1)
    assert p1_s3.most_layers_above_null(layers({"beit": at, "deit": at}), share=share).holds
    assert p1_s3.most_layers_above_null(layers({"beit": at, "deit": under}), share=share).holds is False


def test_models_above_null_just_above_and_below_the_q95():
    frame = pd.DataFrame({"label": ["a", "b"], "model": ["a", "b"], "variant": "pretrained",
                          "mean_cosine": [0.5, Q * 1.01], "null_q95": [Q, Q]})
    assert p1_s3.models_above_null(frame).holds
    assert p1_s3.models_above_null(frame.assign(mean_cosine=[0.5, Q * 0.99])).holds is False


def test_null_concentrates_at_the_claims_tolerance():
    from scipy.stats import norm

    tol = claims.claim("p1-appB-null-concentrates").params["tolerance"]
    d = np.array([16, 256, 8192])
    limit = norm.ppf(0.95) / np.sqrt(d)

    def frame(last_factor):
        q = limit * np.array([1.2, 1.05, last_factor])
        return pd.DataFrame({"d": d, "exact_q95": q})

    assert p1_s3.null_concentrates(frame(1 + tol * 0.9), tolerance=tol).holds
    assert p1_s3.null_concentrates(frame(1 + tol * 1.1), tolerance=tol).holds is False


def test_the_character_groups_are_the_papers_and_need_two_models_each():
    params = claims.claim("p1-s3.1-char-only-above-subword").params
    assert set(params["high"]["models"]) == {"byt5-small", "canine-c", "manta-lm"}
    assert set(params["low"]["models"]) == {"character-bert", "canine-s"}
    frame = pd.concat([layers({m: [0.6, 0.7]}) for m in params["high"]["models"]]
                      + [layers({m: [0.2, 0.3]}) for m in params["low"]["models"]], ignore_index=True)
    assert p1_s3.group_above(frame, **params).holds
    assert p1_s3.group_above(frame.assign(mean_cosine=1 - frame["mean_cosine"]), **params).holds is False
    # CANINE-c against CANINE-s alone: one model a group, not decided
    two = frame[frame["model"].isin(["canine-c", "canine-s"])]
    assert p1_s3.group_above(two, **params).holds is None


def corr(rows) -> pd.DataFrame:
    return pd.DataFrame([{"label": m, "model": m, "variant": "pretrained", "family": "token-level", "spearman": r,
                          "spearman_p": p, "pearson": pr, "pearson_p": pp, "n_layers": 13}
                         for m, r, p, pr, pp in rows])


def test_the_reread_rows_at_their_thresholds():
    t = claims.claim("p1-s3.1-byt5-decoder-extreme").params["threshold"]
    dec = lambda v: layers({"byt5": [v, v, v]}).assign(part="decoder")  # noqa: E731
    assert p1_s3.part_above(dec(t * 1.02), **claims.claim("p1-s3.1-byt5-decoder-extreme").params).holds
    assert p1_s3.part_above(dec(t * 0.98), **claims.claim("p1-s3.1-byt5-decoder-extreme").params).holds is False
    params = claims.claim("p1-s3.2-resnet-only-exception").params
    t = params["threshold"]
    for resnet, expected in ((t * 1.05, True), (t * 0.95, False)):
        frame = layers({"resnet-50": [resnet] * 3, "van-base": [0.0] * 3, "cvt-13": [0.01] * 3})
        assert p1_s3.only_exception(frame, **params).holds is expected
    # alpha of the correlation rows: p just below and just above it
    params = claims.claim("p1-s3.3-gpt2-exception").params
    a = params["alpha"]
    for p_bert, expected in ((a * 0.9, True), (a * 1.1, False)):
        frame = corr([("bert-base-uncased", 0.8, p_bert, 0.8, 0.01), ("roberta-base", 0.8, 0.001, 0.8, 0.01),
                      ("gpt2", 0.2, 0.5, 0.9, 0.001)])
        assert p1_s3.correlated_except(frame, **params).holds is expected
    params = claims.claim("p1-appA-gpt2-tests-disagree").params
    a = params["alpha"]
    assert p1_s3.tests_disagree(corr([("gpt2", 0.3, a * 1.1, 0.9, a * 0.9)]), **params).holds
    assert p1_s3.tests_disagree(corr([("gpt2", 0.3, a * 0.9, 0.9, a * 0.9)]), **params).holds is False
    params = claims.claim("p1-s3.3-speech-not-correlated").params
    assert p1_s3.not_correlated(corr([("hubert-base", 0.5, params["alpha"] * 1.1, 0, 1)]), **params).holds
    assert p1_s3.not_correlated(corr([("hubert-base", 0.5, params["alpha"] * 0.9, 0, 1)]), **params).holds is False


def test_encoders_consistent_across_models_at_its_threshold_ratio():
    from anisotropy.claims.rules import p2

    params = claims.claim("p2-s4-encoders-consistent-across-models").params
    r = params["max_ratio"]

    def frame(ratio):
        rows = []
        for label, level in (("bert", 0.1), ("roberta", 0.1 * ratio)):
            for layer in range(5):
                rows.append({"label": label, "stack": "encoder", "layer": layer, "relative_depth": layer / 4,
                             "sigma1_share": level})
        return pd.DataFrame(rows)

    assert p2.consistent_across_models(frame(r * 0.98), **params).holds
    assert p2.consistent_across_models(frame(r * 1.02), **params).holds is False


# ---- the null of a non-negative layer, read by every rule that reads a cosine ---------------------------------------

RECTIFIED = 1 / np.pi  # two independent vectors of rectified Gaussian coordinates: their mean cosine, no direction


def post_relu(values: dict[str, list[float]], null: float = RECTIFIED, **kwargs) -> pd.DataFrame:
    return layers(values, nonnegative=True, null_support=null, **kwargs)


def test_every_rule_reads_a_non_negative_layer_against_its_own_null():
    at_null = post_relu({"vgg": [RECTIFIED + 0.01] * 4, "effnet": [RECTIFIED + 0.02] * 4})
    signed = at_null.assign(nonnegative=False)
    # raw 0.33 is far above the Gaussian q95 of d = 768, and nothing above the null of its support
    assert p1_s3.most_layers_above_null(signed, share=0.5).holds
    assert p1_s3.most_layers_above_null(at_null, share=0.5).holds is False
    assert p1_s3.some_layer_above_null(at_null).holds is False
    assert p1_s3.close_to_isotropic(at_null, threshold=0.1).holds
    assert p1_s3.close_to_isotropic(signed, threshold=0.1).holds is False
    assert p1_s3.every_layer_above(at_null, threshold=0.2).holds is False
    assert (p1_s3.above_null(at_null) == (at_null["mean_cosine"] - RECTIFIED > Q)).all()
    # a group of post-ReLU CNNs at their null is below Transformers at 0.2, though its raw cosines are higher
    transformers = layers({"w2v": [0.2] * 4, "vit": [0.2] * 4}).assign(family="speech")
    both = pd.concat([transformers, at_null], ignore_index=True)
    specs = {"high": {"families": ["speech"]}, "low": {"families": ["cnn"]}}
    assert p1_s3.group_above(both, **specs).holds
    assert p1_s3.group_above(pd.concat([transformers, signed], ignore_index=True), **specs).holds is False
    # a model summary carries the mean of its layers' references, and models_above_null reads it
    summary = claims.measured_summary(at_null)
    assert summary["reference"].tolist() == [RECTIFIED, RECTIFIED]
    assert p1_s3.models_above_null(summary).holds is False
    assert p1_s3.models_above_null(claims.measured_summary(signed)).holds


def test_falls_with_depth_reads_the_whole_curve_with_an_interval():
    params = claims.claim("p1-s3.2-resnet-falls").params
    assert p1_s3.falls_with_depth(layers({"resnet-50": [0.9, 0.7, 0.5, 0.3, 0.2]}), **params).holds
    # the curve: a fall that rises again at the end, one rank correlation of -0.5 on five points, is no fall
    assert p1_s3.falls_with_depth(layers({"resnet-50": [0.50, 0.55, 0.60, 0.10, 0.49]}), **params).holds is not True
    assert p1_s3.falls_with_depth(layers({"resnet-50": [0.2, 0.3, 0.5, 0.7, 0.9]}), **params).holds is False
    # a fall whose end is not kept: the last layer's interval reaches the first's
    kept = layers({"resnet-50": [0.50, 0.49, 0.48, 0.47, 0.46]}, half_width=0.005)
    lost = layers({"resnet-50": [0.50, 0.49, 0.48, 0.47, 0.46]}, half_width=0.03)
    assert p1_s3.falls_with_depth(kept, **params).holds
    assert p1_s3.falls_with_depth(lost, **params).holds is None
    # post-ReLU layers whose raw cosine falls only as far as their null falls do not become more isotropic
    nulls = [0.8, 0.6, 0.4, 0.3, 0.2]
    frame = post_relu({"resnet-50": [n + 0.1 for n in [0.8, 0.6, 0.4, 0.3, 0.2]]}).assign(null_support=nulls)
    assert p1_s3.falls_with_depth(frame, **params).holds is not True


def test_a_point_estimate_just_over_a_threshold_is_not_above_it_without_its_interval():
    q95 = 0.0594  # the case: 0.061 against the q95 of d = 768
    one = pd.DataFrame({"label": ["a"], "model": ["a"], "variant": "pretrained", "mean_cosine": [0.061],
                        "null_q95": [q95]})
    assert p1_s3.models_above_null(one.assign(mean_cosine_low=0.056, mean_cosine_high=0.066)).holds is None
    assert p1_s3.models_above_null(one.assign(mean_cosine_low=0.0600, mean_cosine_high=0.062)).holds
    assert p1_s3.models_above_null(one.assign(mean_cosine=0.05, mean_cosine_low=0.045, mean_cosine_high=0.055)
                                   ).holds is False
    # two groups whose means differ by less than their intervals: undecided, not "above"
    high = layers({"c": [0.30, 0.31], "c2": [0.30, 0.31]}, half_width=0.02)
    low = layers({"s": [0.29, 0.30], "s2": [0.29, 0.30]}, half_width=0.02)
    frame = pd.concat([high, low], ignore_index=True)
    spec = {"high": {"models": ["c", "c2"]}, "low": {"models": ["s", "s2"]}}
    assert p1_s3.group_above(frame, **spec).holds is None
    assert p1_s3.group_above(pd.concat([layers({"c": [0.40] * 2, "c2": [0.40] * 2}, half_width=0.02), low]),
                             **spec).holds


def test_the_only_exception_is_read_at_its_floor():
    params = claims.claim("p1-s3.2-resnet-only-exception").params
    t = params["threshold"]
    others = layers({"van-base": [0.0] * 3, "cvt-13": [0.01] * 3}, half_width=0.005)
    # ResNet-50's point just above the threshold, its interval reaching below: not yet the exception
    wide = pd.concat([layers({"resnet-50": [t * 1.05] * 3}, half_width=t * 0.2), others], ignore_index=True)
    assert p1_s3.only_exception(wide, **params).holds is None
    narrow = pd.concat([layers({"resnet-50": [t * 1.5] * 3}, half_width=t * 0.2), others], ignore_index=True)
    assert p1_s3.only_exception(narrow, **params).holds
    low = pd.concat([layers({"resnet-50": [t * 0.5] * 3}, half_width=t * 0.2), others], ignore_index=True)
    assert p1_s3.only_exception(low, **params).holds is False


def test_the_cnn_contrast_is_with_transformers_of_the_same_modality():
    params = claims.claim("p1-s3.3-cnns-not-correlated").params
    assert params["than_families"] == ["vision-transformer"]  # "contrary to Transformers-based models in the same modality"
    rows = [("bert", "token-level", 0.9, 0.001), ("gpt2", "token-level", 0.9, 0.001),
            ("vit", "vision-transformer", 0.0, 0.9), ("deit", "vision-transformer", 0.1, 0.8),
            ("resnet", "cnn", 0.05, 0.8), ("van", "cnn", -0.1, 0.5)]
    frame = pd.DataFrame([{"label": m, "model": m, "family": f, "spearman": r, "spearman_p": p, "n_layers": 60}
                          for m, f, r, p in rows])
    # text Transformers are correlated, the vision ones not: no contrast within the modality
    assert p1_s3.drift_contrast(frame, **params).holds is False
    assert p1_s3.drift_contrast(frame, **{**params, "than_families": None}).holds
    vision = frame.assign(spearman_p=np.where(frame["family"] == "vision-transformer", 0.001, frame["spearman_p"]),
                          spearman=np.where(frame["family"] == "vision-transformer", 0.9, frame["spearman"]))
    assert p1_s3.drift_contrast(vision, **params).holds


# ---- the Bonett-Wright interval of a Spearman correlation, checked by simulation -------------------------------------

SIMULATIONS = 4000  # per cell: the binomial 99% band around 0.95 is +-2.576 sqrt(0.95 x 0.05 / 4000) = +-0.0089
#: Bonett and Wright's variance is an approximation: by a run of 40,000 samples per cell its coverage is 0.954-0.958
#: at n = 20 and 0.945-0.965 at n = 8 (conservative at rho = 0.3), so the band allows that much besides sampling.
APPROXIMATION = {8: 0.02, 20: 0.01}


def spearman_samples(rho_s: float, n: int, rng) -> np.ndarray:
    """SIMULATIONS Spearman correlations of n points drawn from a bivariate normal whose population Spearman rho is
    ``rho_s`` (Pearson's r = 2 sin(pi rho_s / 6)), computed from ranks (no ties)."""
    from scipy.stats import rankdata

    r = 2 * np.sin(np.pi * rho_s / 6)
    x = rng.standard_normal((SIMULATIONS, n))
    y = r * x + np.sqrt(1 - r * r) * rng.standard_normal((SIMULATIONS, n))
    a, b = rankdata(x, axis=1), rankdata(y, axis=1)
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def test_the_spearman_interval_covers_rho_about_95_percent_of_the_time():
    from scipy.stats import norm

    rng = np.random.default_rng(56)
    sampling = norm.ppf(0.995) * np.sqrt(0.95 * 0.05 / SIMULATIONS)
    for n in (8, 20):
        for rho_s in (0.3, 0.6, 0.9):
            rho = spearman_samples(rho_s, n, rng)
            ends = np.array([p1_s3.spearman_interval(r, n, 0.95) for r in rho])
            coverage = float(np.mean((ends[:, 0] <= rho_s) & (rho_s <= ends[:, 1])))
            assert abs(coverage - 0.95) <= sampling + APPROXIMATION[n], (n, rho_s, coverage)
            if rho_s == 0.9 and n == 20:
                # without Bonett and Wright's rho^2 / 2 (Fisher's 1 / (n - 3) alone) the same samples are covered
                # far less often: the band sees the term the rule depends on (at n = 8 the two differ by less than
                # the approximation allowed there)
                half = norm.ppf(0.975) / np.sqrt(n - 3)
                z = np.arctanh(np.clip(rho, -0.999, 0.999))
                fisher = float(np.mean((np.tanh(z - half) <= rho_s) & (rho_s <= np.tanh(z + half))))
                assert fisher < 0.95 - sampling - APPROXIMATION[n], (n, fisher)
