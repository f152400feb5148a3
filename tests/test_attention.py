"""anisotropy.measure.attention: the captured queries and keys reproduce the library's own attention weights."""

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, ViTConfig, ViTModel

from anisotropy.measure import attention

TOL = 1e-5


def _reproduce(cap: attention.AttentionCapture, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(scale * Q K^T + mask), written out independently of the hooked modules."""
    scores = cap.queries @ cap.keys.transpose(-1, -2) * cap.scale
    if cap.causal:
        n = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask.bool()[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1)


def _bert(attn):
    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=48, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                     vocab_size=500, attn_implementation=attn)
    return BertModel(cfg).eval()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_queries_keys_reproduce_attention_weights(attn):
    model = _bert(attn)
    ids = torch.randint(0, 500, (3, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0  # padding: masked keys must get zero weight in both
    caps = attention.capture(model, {"input_ids": ids, "attention_mask": mask})
    assert sorted(caps) == [0, 1, 2]
    with torch.no_grad():  # the library's weights, from the same model in eager attention (sdpa returns none in 5)
        library = _bert("eager")(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    for layer, cap in caps.items():
        assert cap.queries.shape == (3, 4, 11, 12) and cap.keys.shape == (3, 4, 11, 12)
        assert cap.probs.shape == (3, 4, 11, 11)
        assert cap.scale == pytest.approx(12 ** -0.5)
        torch.testing.assert_close(_reproduce(cap, mask), cap.probs, atol=TOL, rtol=0)
        torch.testing.assert_close(cap.probs, library[layer], atol=TOL, rtol=0)
        assert float(cap.probs[1, :, :, 7:].abs().max()) == 0.0
    # hooks are gone and the attention implementation is restored
    # (transformers 5 leaves hooks of its own, which record outputs)
    assert not [h for m in model.modules() for h in m._forward_hooks.values()
                if getattr(h, "__module__", "") == attention.__name__]
    assert model.config._attn_implementation == attn


def test_queries_are_the_query_map_of_the_layer_input():
    """Peer check of the reshape: the captured queries of layer 1 equal query(hidden_states[1]) split into heads."""
    model = _bert("eager")
    ids = torch.randint(0, 500, (2, 9), generator=torch.Generator().manual_seed(2))
    caps = attention.capture(model, {"input_ids": ids}, layers=[1])
    assert list(caps) == [1]
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[1]
        q = model.encoder.layer[1].attention.self.query(hidden)
    torch.testing.assert_close(caps[1].queries, q.view(2, 9, 4, 12).transpose(1, 2))


def test_bare_layer_and_selected_rows_of_scores():
    layer = _bert("eager").encoder.layer[0]
    x = torch.randn(2, 16, 48, generator=torch.Generator().manual_seed(3))
    cap = attention.capture(layer, x)[0]
    torch.testing.assert_close(_reproduce(cap), cap.probs, atol=TOL, rtol=0)
    rows = torch.tensor([0, 5, 15])
    torch.testing.assert_close(cap.scores(rows), cap.scores()[:, :, rows])


def test_gpt2_causal_queries_keys_reproduce_attention_weights():
    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_embd=48, n_layer=2, n_head=4, vocab_size=500, n_positions=64)).eval()
    assert model.config._attn_implementation == "sdpa"  # capture must switch to eager by itself
    ids = torch.randint(0, 500, (2, 13), generator=torch.Generator().manual_seed(4))
    caps = attention.capture(model, {"input_ids": ids})
    assert sorted(caps) == [0, 1] and all(c.causal for c in caps.values())
    for cap in caps.values():
        torch.testing.assert_close(_reproduce(cap), cap.probs, atol=TOL, rtol=0)
        assert float(cap.probs.triu(diagonal=1).abs().max()) == 0.0
    assert model.config._attn_implementation == "sdpa"


def test_vit_queries_keys_reproduce_attention_weights():
    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, image_size=32,
                    patch_size=8)
    model = ViTModel(cfg).eval()
    caps = attention.capture(model, {"pixel_values": torch.randn(2, 3, 32, 32)})
    for cap in caps.values():
        assert cap.probs.shape == (2, 4, 17, 17)
        torch.testing.assert_close(_reproduce(cap), cap.probs, atol=TOL, rtol=0)


def test_unsupported_model_says_so():
    with pytest.raises(NotImplementedError, match="No supported self-attention"):
        attention.capture(torch.nn.Linear(4, 4), torch.randn(2, 4))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_queries_keys_without_probabilities_match(attn):
    """keep_probs=False leaves the implementation alone and returns the same queries and keys."""
    model = _bert(attn)
    ids = torch.randint(0, 500, (2, 8), generator=torch.Generator().manual_seed(5))
    full = attention.capture(model, {"input_ids": ids})
    light = attention.capture(model, {"input_ids": ids}, keep_probs=False)
    for layer in full:
        assert light[layer].probs is None
        torch.testing.assert_close(light[layer].queries, full[layer].queries, atol=1e-6, rtol=0)
        torch.testing.assert_close(light[layer].keys, full[layer].keys, atol=1e-6, rtol=0)
