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
    # read with the interval's upper end: a point just below whose interval reaches above is not isotropic
    wide = layers({"vgg": [null + t * 0.9] * 4, "effnet": [null + t * 0.9] * 4}, half_width=t * 0.2,
                  nonnegative=True, null_support=null)
    assert p1_s3.majority_isotropic(wide, **params).holds is False


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
