"""anisotropy.experiments.block: the untrained-block drift experiment of Paper 1, Section 4."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from anisotropy.measure import attention
from anisotropy.experiments import block


@pytest.fixture(scope="module")
def blocks():
    """BERT-base at its true width (768, 12 heads, 3072), seed 0, all three variants."""
    return block.build(0, variants=block.VARIANTS)


def test_initialisation_is_berts(blocks):
    post, pre = blocks["post_ln"], blocks["pre_ln"]
    table = post.embeddings
    assert table.shape == (30522, 768)
    assert float(table[1:].std()) == pytest.approx(0.02, rel=0.01)
    layer = post.layer
    for linear in (layer.attention.self.query, layer.intermediate.dense, layer.output.dense):
        assert float(linear.weight.detach().std()) == pytest.approx(0.02, rel=0.02)
        assert float(linear.bias.detach().abs().max()) == 0.0
    assert float((layer.output.LayerNorm.weight.detach() - 1).abs().max()) == 0.0
    # pre-LN shares every weight matrix with post-LN; only the LayerNorm placement differs
    torch.testing.assert_close(pre.layer.attention.self.key.weight, layer.attention.self.key.weight, rtol=0, atol=0)
    torch.testing.assert_close(pre.layer.output.dense.weight, layer.output.dense.weight, rtol=0, atol=0)


@pytest.mark.parametrize("n", [0.0, 5.0, 1000.0])
def test_post_ln_output_norm_is_analytic(blocks, n):
    """A LayerNorm with unit gain and zero bias outputs rows of norm sqrt(d * var / (var + eps)), var the variance
    of its input row; with eps = 1e-12 that is sqrt(768) = 27.7128... to float32 precision (rel. tolerance 1e-5)."""
    post = blocks["post_ln"]
    tokens, direction = block.draw_inputs(post.embeddings, 2, 32, seed=0)
    seen = {}
    ln = post.final_layer_norm()
    handle = ln.register_forward_hook(lambda m, inp, out: seen.update(x=inp[0]))
    try:
        with torch.no_grad():
            y = post(tokens + n * direction)
    finally:
        handle.remove()
    var = seen["x"].double().var(dim=-1, unbiased=False)
    expected = torch.sqrt(768 * var / (var + ln.eps))
    torch.testing.assert_close(y.double().norm(dim=-1), expected, rtol=1e-5, atol=0)
    np.testing.assert_allclose(y.norm(dim=-1).numpy(), math.sqrt(768), rtol=1e-5)
    assert block.analytic_output_norm(ln) == pytest.approx(math.sqrt(768), rel=1e-6)


def test_pre_ln_output_follows_the_residual_stream(blocks):
    """Pre-LN: sublayers see LN(x), so their output is bounded whatever N is; the output norm tracks the input norm
    to within a few sublayer norms (here: within 2 % at N = 1000)."""
    for variant in ("pre_ln", "gpt2"):
        b = blocks[variant]
        tokens, direction = block.draw_inputs(b.embeddings, 2, 32, seed=0)
        with torch.no_grad():
            y = b(tokens + 1000.0 * direction)
        assert float(y.norm(dim=-1).mean()) == pytest.approx(1000.0, rel=0.02)


def test_fixed_point_is_stable_across_seeds():
    """Reduced scale (2 sequences of 64 tokens, true width). N* must agree across three seeds within 0.05 (0.2 %) and
    with the analytic prediction sqrt(d - mean ||x_i||^2) within 0.05; pre-LN has no crossing below N = 40."""
    grid = [0, 16, 26, 27, 28, 29, 40]
    frame = block.sweep(grid, seeds=(0, 1, 2), variants=("post_ln", "pre_ln"), n_sequences=2, seq_len=64, n_rows=8)
    fixed = block.fixed_points(frame)
    post = fixed[fixed["variant"] == "post_ln"]
    assert post["n_star"].notna().all()
    assert post["n_star"].max() - post["n_star"].min() < 0.05
    np.testing.assert_allclose(post["n_star"], post["predicted_n_star"], atol=0.05)
    assert post["n_star"].mean() == pytest.approx(math.sqrt(768 - 0.02**2 * 768), abs=0.05)
    assert fixed.loc[fixed["variant"] == "pre_ln", "n_star"].isna().all()


def test_fixed_point_interpolation_on_known_curves():
    n = np.array([0.0, 1.0, 2.0, 4.0])
    frame = pd.DataFrame({"variant": "v", "seed": 0, "bias_norm": n, "input_norm": n, "output_norm": 2.5,
                          "predicted_n_star": 2.5})
    assert block.fixed_points(frame)["n_star"].iloc[0] == pytest.approx(2.5)
    never = frame.assign(output_norm=n + 1.0)
    assert np.isnan(block.fixed_points(never)["n_star"].iloc[0])


def _capture(causal: bool, seed: int = 0) -> attention.AttentionCapture:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 3, 10, 4, generator=g) * 2, torch.randn(2, 3, 10, 4, generator=g) * 2
    scores = q @ k.transpose(-1, -2) * 0.5
    if causal:
        scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    return attention.AttentionCapture(q, k, scores.softmax(-1), 0.5, causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_statistics_match_brute_force(causal):
    """Every row statistic against numpy loops over the visible keys of every row (S = 10: an even count, where the
    median is the mean of the two middle values)."""
    cap = _capture(causal)
    stats = block.attention_statistics(cap, n_rows=None)
    p = cap.probs.double().numpy()
    s = (cap.queries @ cap.keys.transpose(-1, -2)).double().numpy() * cap.scale
    B, H, S, _ = p.shape
    first = 1 if causal else 0  # a causal first row has one key: no spread, no entropy ratio
    rows = {"max": [], "median": [], "min": []}
    entropy, ratio, row_std, values = [], [], [], []
    for b in range(B):
        for h in range(H):
            for i in range(S):
                keys = slice(0, i + 1) if causal else slice(0, S)
                row, sc = p[b, h, i, keys], s[b, h, i, keys]
                values.extend(sc)
                for stat, value in (("max", row.max()), ("median", np.median(row)), ("min", row.min())):
                    rows[stat].append(value)
                if i >= first:
                    e = -(row * np.log(row)).sum()
                    entropy.append(e)
                    ratio.append(e / np.log(len(row)))
                    row_std.append(sc.std(ddof=1))
    for name in rows:
        per_position = np.array(rows[name]).reshape(B, H, S).mean(axis=0)
        assert stats[f"softmax_{name}"] == pytest.approx(per_position.mean(), rel=1e-5)
        assert stats[f"softmax_{name}_q90"] == pytest.approx(np.quantile(per_position, 0.9), rel=1e-5)
    assert stats["entropy"] == pytest.approx(np.mean(entropy), rel=1e-5)
    assert stats["entropy_ratio"] == pytest.approx(np.mean(ratio), rel=1e-5)
    assert stats["score_row_std"] == pytest.approx(np.mean(row_std), rel=1e-5)
    assert stats["score_mean"] == pytest.approx(np.mean(values), rel=1e-4, abs=1e-6)
    visible = np.where(np.tril(np.ones((S, S))) > 0, p, np.inf) if causal else p
    assert stats["seq_min"] == pytest.approx(visible.min(axis=(2, 3)).mean(axis=0).mean(), rel=1e-5)
    assert stats["seq_max"] == pytest.approx(p.max(axis=(2, 3)).mean(axis=0).mean(), rel=1e-5)


def test_fixed_point_on_the_norms_of_the_averages():
    """Paper 1's Figure 6 follows the norm of the average output: with the output's average at sqrt(d) * sqrt(cos)
    and the input's at about N, the curves cross where N reaches the output's average norm."""
    n = np.array([0.0, 4.0, 16.0, 28.0, 64.0])
    out_avg = np.sqrt(768) * np.sqrt(n / (n + 0.5))  # aligns as N grows
    frame = pd.DataFrame({"variant": "post_ln", "seed": 0, "bias_norm": n, "input_norm": np.hypot(0.55, n),
                          "output_norm": np.sqrt(768), "input_drift_norm": n + 0.01, "output_drift_norm": out_avg,
                          "predicted_n_star": 27.7})
    star = block.fixed_points(frame, on="average")["n_star"].iloc[0]
    i = 2  # the gap changes sign between N = 16 and N = 28
    gap = out_avg - (n + 0.01)
    assert star == pytest.approx(n[i] + gap[i] * (n[i + 1] - n[i]) / (gap[i] - gap[i + 1]))
    assert 16 < star < 28 and block.fixed_points(frame)["n_star"].iloc[0] != star


@pytest.mark.parametrize("n", [0.0, 27.7, 500.0])
def test_mean_query_and_key_are_the_maps_of_the_mean_input(blocks, n):
    """Paper 1, Section 4.3, Equation (1): in a post-LN block the attention reads its inputs unnormalised and its
    query and key maps are affine, so over the positions E(Q_i) = W_Q x̄ + b_Q and E(K_i) = W_K x̄ + b_K, head by head
    (the captured queries against the maps applied to the mean input, in float64)."""
    post = blocks["post_ln"]
    tokens, direction = block.draw_inputs(post.embeddings, 2, 32, seed=1)
    x = tokens + n * direction
    with torch.no_grad(), attention.hooks(post.layer, layers=0) as caps:
        post(x)
    cap = caps[0]
    heads, d_k = cap.queries.shape[1], cap.queries.shape[-1]
    x_bar = x.reshape(-1, x.shape[-1]).double().mean(0)
    for captured, linear in ((cap.queries, post.layer.attention.self.query), (cap.keys, post.layer.attention.self.key)):
        mean = captured.double().mean(dim=(0, 2)).reshape(heads * d_k)  # (B, H, S, d_k): over examples and positions
        expected = linear.weight.double() @ x_bar + linear.bias.double()
        torch.testing.assert_close(mean, expected, rtol=1e-4, atol=1e-5 * (1 + n))


def test_reference_models_load_and_measure_on_the_chapters_device(monkeypatch):
    """Section 4's reference models are loaded on the chapter's ``device`` (on a GPU runtime, not on the host's vCPUs:
    issue 45 found them loaded without one), one row per hidden state."""
    from anisotropy.models import registry

    asked, real = [], registry.load

    def load(name, **kwargs):
        asked.append(kwargs.get("device"))
        return real(name, **kwargs)

    monkeypatch.setattr(registry, "load", load)
    frame = block.reference_norms(["bert-base-uncased"], n_texts=4, max_length=16, variant="tiny", device="cpu")
    assert asked == ["cpu"]
    assert list(frame["layer"]) == list(range(len(frame))) and len(frame) > 1
