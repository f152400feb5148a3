"""Paper 1, Section 4 rules on the untrained block: each threshold just above and just below the value its claim
gives it in claims.yml, the verdict's range of N stated beside where the effect sets in, and Section 4.3's N = 0
read on BERT's whole embedding layer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from anisotropy.claims import ledger as claims
from anisotropy.claims.rules import p1_s4
from anisotropy.experiments import block as block_module
from anisotropy.measure.baseline import isotropic_cosine_quantile

NORMS = (0.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 128.0, 256.0, 512.0)
N_STAR = 27.7


def sweep(entropy_drop=lambda n: 0.0, seeds=(0, 1), **columns) -> pd.DataFrame:
    """A post-LN sweep whose average output norm crosses the input's (about N) at N* = 27.7, and whose attention
    entropy / uniform is 1 - entropy_drop(N)."""
    rows = []
    for seed in seeds:
        for n in NORMS:
            rows.append({"variant": "post_ln", "seed": seed, "bias_norm": n, "input_drift_norm": n + 0.01,
                         "output_drift_norm": N_STAR + 0.3 * (n - N_STAR), "entropy_ratio": 1 - entropy_drop(n),
                         "softmax_max": 1 / 512 + entropy_drop(n) / 100, "softmax_min": 1 / 512 - entropy_drop(n) / 1e4,
                         **{k: (v(n) if callable(v) else v) for k, v in columns.items()}})
    return pd.DataFrame(rows)


def test_rows_sharpen_at_its_threshold_and_says_where_the_effect_sets_in():
    params = claims.claim("p1-s4-rows-sharpen").params
    m, top = params["min_drop"], params["within"] * N_STAR  # the largest grid norm in the range: 64
    edge = max(n for n in NORMS if n <= top)
    above = p1_s4.rows_sharpen(sweep(lambda n: m * 1.05 * n / edge), **params)
    below = p1_s4.rows_sharpen(sweep(lambda n: m * 0.95 * n / edge), **params)
    assert above.holds and below.holds is False
    # the value gives the drop at N* and the first grid norm where it reaches min_drop (beyond the range: 128)
    assert "entropy drop" in below.value and "reaches 0.01 first at N = 128" in below.value


def test_small_at_low_bias_at_its_threshold():
    params = claims.claim("p1-s4-small-at-low-bias").params
    m = params["min_drop"]
    low = max(n for n in NORMS if n <= N_STAR)  # 24: the largest grid norm up to N*
    assert p1_s4.small_at_low_bias(sweep(lambda n: m * 0.95 * n / low), **params).holds
    assert p1_s4.small_at_low_bias(sweep(lambda n: m * 1.05 * n / low), **params).holds is False


def test_output_cosine_above_input_at_its_threshold_gap():
    params = claims.claim("p1-s4-output-cosine-above-input").params
    g = params["max_gap"]
    assert p1_s4.output_cosine_above_input(sweep(input_cosine=0.2, output_cosine=0.2 + g * 0.95), **params).holds
    assert p1_s4.output_cosine_above_input(sweep(input_cosine=0.2, output_cosine=0.2 + g * 1.05),
                                           **params).holds is False
    # below the input at one bias norm: "no matter the level of input bias" fails
    dips = sweep(input_cosine=0.2, output_cosine=lambda n: 0.19 if n == 64.0 else 0.21)
    assert p1_s4.output_cosine_above_input(dips, **params).holds is False


def test_anisotropic_at_zero_reads_its_inputs_against_the_isotropic_q95():
    params = claims.claim("p1-s4-qk-anisotropic-at-zero").params
    q95 = float(isotropic_cosine_quantile(0.95, params["dim"]))

    def frame(full):
        return pd.DataFrame({"seed": [0, 0], "inputs": [block_module.WORD_ONLY, block_module.FULL_EMBEDDINGS],
                             "query_cosine": [3e-5, full], "key_cosine": [3e-5, full]})

    assert p1_s4.anisotropic_at_zero(frame(q95 * 1.05), **params).holds
    assert p1_s4.anisotropic_at_zero(frame(q95 * 0.95), **params).holds is False
    assert params["inputs"] == block_module.FULL_EMBEDDINGS


def test_uniform_at_fixed_point_and_layernorm_fixed_point_at_their_thresholds():
    params = claims.claim("book-s4-uniform-at-nstar").params
    level = params["level"]
    frame = sweep(lambda n: (1 - level) * n / N_STAR * 0.95, output_norm=np.sqrt(768),
                  input_norm=lambda n: float(np.hypot(0.55, n)), predicted_n_star=float(np.sqrt(768 - 0.55**2)))
    assert p1_s4.uniform_at_fixed_point(frame, **params).holds
    frame = sweep(lambda n: (1 - level) * n / N_STAR * 1.05, output_norm=np.sqrt(768),
                  input_norm=lambda n: float(np.hypot(0.55, n)), predicted_n_star=float(np.sqrt(768 - 0.55**2)))
    assert p1_s4.uniform_at_fixed_point(frame, **params).holds is False
    params = claims.claim("book-s4-layernorm-fixed-point").params
    tol = params["tolerance"]
    exact = float(np.sqrt(768 - 0.55**2))
    for factor, expected in ((1 + tol * 0.9, True), (1 + tol * 1.1, False)):
        frame = sweep(output_norm=np.sqrt(768), input_norm=lambda n: float(np.hypot(0.55, n)),
                      predicted_n_star=exact * factor)
        assert p1_s4.layernorm_fixed_point(frame, **params).holds is expected, factor


def test_the_full_embedding_layer_gives_queries_and_keys_a_common_direction_at_zero():
    """On a narrow BERT (same initialiser), the token-type vector shared by every token makes the block's inputs,
    queries and keys anisotropic at N = 0; the table's rows alone do not."""
    frame = block_module.inputs_at_zero(seeds=(0,), n_sequences=4, seq_len=64, hidden_size=64,
                                        num_attention_heads=2, intermediate_size=128)
    by = frame.set_index("inputs")
    q95 = float(isotropic_cosine_quantile(0.95, 64))
    assert by.loc[block_module.FULL_EMBEDDINGS, "input_cosine"] > 0.1
    assert by.loc[block_module.FULL_EMBEDDINGS, "query_cosine"] > q95
    assert abs(by.loc[block_module.WORD_ONLY, "query_cosine"]) < q95
    # the rows alone are the sweep's inputs at N = 0: the same mean cosine as the sweep's first point
    swept = block_module.sweep([0.0], seeds=(0,), variants=("post_ln",), n_sequences=4, seq_len=64, hidden_size=64,
                               num_attention_heads=2, intermediate_size=128)
    assert by.loc[block_module.WORD_ONLY, "query_cosine"] == pytest.approx(swept["query_cosine"].iloc[0], rel=1e-6)
