"""The attention variants of the ablation chapter: captured probabilities are the model's own, the variants do what
their formulas say, and a variant checkpoint reloads bit-identically with its variant active."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from anisotropy.measure import attention
from anisotropy.models import attention_variants, registry
from anisotropy.training import trainer, recipes


def _model(variant: str, seed: int = 0):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, attn_implementation="eager")
    model = attention_variants.apply_attention_variant(BertForMaskedLM(config), variant)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # move the learned parameters off their initial values so that they matter
        for name, p in model.named_parameters():
            if name.endswith(("gain", "log_temperature")):
                p.copy_(torch.rand(p.shape, generator=gen) * 1.5 + 0.3)
    return model.eval()


def _inputs():
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 60, (3, 12), generator=gen)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 7:] = 0  # padding: the centring must ignore it
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("variant", attention_variants.VARIANTS)
def test_captured_probs_are_the_models_and_follow_from_captured_queries_keys(variant):
    model, inputs = _model(variant), _inputs()
    caps = attention.capture(model, inputs)
    with torch.no_grad():
        own = model(**inputs, output_attentions=True).attentions
    additive = torch.where(inputs["attention_mask"].bool(), 0.0, torch.finfo(torch.float32).min)[:, None, None, :]
    for layer, cap in caps.items():
        assert torch.equal(cap.probs, own[layer])
        # the captured queries and keys are the effective ones: softmax(scale q k^T + mask) gives the probs
        torch.testing.assert_close(torch.softmax(cap.scores() + additive, -1), own[layer], rtol=0, atol=1e-6)


def test_variants_change_the_attention():
    inputs = _inputs()
    probs = {v: attention.capture(_model(v), inputs)[1].probs for v in attention_variants.VARIANTS}
    for v in ("qk_norm", "centred", "temperature"):
        assert (probs[v] - probs["standard"]).abs().max() > 1e-3


def test_centred_queries_and_keys_have_zero_mean_per_head_over_valid_tokens():
    inputs = _inputs()
    valid = inputs["attention_mask"].bool()
    for cap in attention.capture(_model("centred"), inputs).values():
        for x in (cap.queries, cap.keys):
            w = valid[:, None, :, None].float()
            means = (x * w).sum(2) / w.sum(2)
            assert means.abs().max() < 1e-5
            assert x.abs().mean() > 1e-3  # not trivially zero


def test_qk_norm_rows_are_unit_rms_before_the_learned_gain(monkeypatch):
    # with eps = 0 the normalisation is exact (eps only guards all-zero rows)
    monkeypatch.setattr(attention_variants, "RMS_EPS", 0.0)
    model, inputs = _model("qk_norm"), _inputs()
    for cap, (_, _, block) in zip(attention.capture(model, inputs).values(),
                                  attention_variants.self_attention_modules(model)):
        for x, lin in ((cap.queries, block.query), (cap.keys, block.key)):
            raw = x / lin.gain.detach()[None, :, None, :]  # undo the gain: (batch, heads, seq, head_dim)
            rms = raw.pow(2).mean(-1).sqrt()
            torch.testing.assert_close(rms, torch.ones_like(rms), rtol=0, atol=1e-4)


def test_temperature_scales_scores_per_head():
    inputs = _inputs()
    plain, hot = _model("standard"), _model("temperature")
    cap_plain, cap_hot = attention.capture(plain, inputs)[0], attention.capture(hot, inputs)[0]
    tau = attention_variants.self_attention_modules(hot)[0][2].query.log_temperature.detach().exp()
    # first layer: same input, same projections, so the scores differ by exactly tau_h (keys carry their own tau)
    tau_k = attention_variants.self_attention_modules(hot)[0][2].key.log_temperature.detach().exp()
    expected = cap_plain.scores() * (tau * tau_k)[None, :, None, None]
    torch.testing.assert_close(cap_hot.scores(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["qk_norm", "centred", "temperature"])
def test_variant_checkpoint_reloads_bit_identically_with_variant_active(tmp_path, variant):
    recipe = recipes.Recipe(suite=f"t-{variant}", kind="mlm", width=32, depth=1, heads=2, seq_len=32,
                                     vocab_size=300, batch_size=4, steps=3, warmup=1, n_checkpoints=2, eval_every=0,
                                     eval_size=4, attention_variant=variant)
    last = trainer.train(recipe, out_dir=tmp_path, progress=False, threads=1)[-1]
    trained = recipes.load_model(recipe, last.path).eval()
    loaded = registry.load(last.path).model  # the one loader restores the variant
    assert attention_variants.variant_of(loaded) == variant
    saved = trained.state_dict()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved[name]), name
    extra = [n for n in saved if n.endswith(("gain", "log_temperature"))]
    assert (len(extra) > 0) == (variant != "centred")  # centring has no parameters
    assert all(n in loaded.state_dict() for n in extra)
    inputs = _inputs()
    inputs["input_ids"] = inputs["input_ids"] % 300
    with torch.no_grad():
        a = trained(**inputs, output_attentions=True)
        b = loaded(**inputs, output_attentions=True)
    assert torch.equal(a.logits, b.logits)
    assert all(torch.equal(x, y) for x, y in zip(a.attentions, b.attentions))
    # a standard model given the same weights computes something else: the variant is really active
    plain = BertForMaskedLM.from_pretrained(last.path, attn_implementation="eager").eval()
    with torch.no_grad():
        assert not torch.equal(plain(**inputs).logits, b.logits)


def test_every_checkpoint_is_loaded_on_the_device_its_run_trained_on(tmp_path, monkeypatch):
    # registry.load defaults to the CPU: the ablation must name its recipe's device (a GPU under `paper`) for each of
    # its checkpoint measurements, here and in the worker processes alike (workers=1 measures here).
    from anisotropy import results
    from anisotropy.experiments import ablation
    from anisotropy.models import session

    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    asked = []

    def recording(name, **options):
        asked.append(options.get("device", "not given"))
        return session.session(name, **options)
    monkeypatch.setattr(ablation, "session", recording)
    recipe = dict(kind="mlm", width=32, depth=1, heads=2, seq_len=32, vocab_size=300, batch_size=4, steps=3, warmup=1,
                  n_checkpoints=2, eval_every=0, eval_size=4)
    frames = ablation.run(["standard"], [0], recipe, n_texts=4, max_length=16, store=results.Store(tmp_path / "r"),
                          progress=False, workers=1)
    runs = ablation.recipes(["standard"], [0], **recipe)
    assert len(asked) == frames["hidden"]["step"].nunique() >= 2
    assert asked == [runs[0].device] * len(asked)
