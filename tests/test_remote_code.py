"""The remote-code models (CharacterBERT, MANTa-LM) fed through their own contracts, on the Hub stand-in's remote code
(tests/hub_standin/remote: tiny modules with the real code's input shapes and masks) loaded as transformers loads a
Hub repository's code: CharacterBERT's words from the authors' indexer contract, MANTa's blocks and bytes one text a
pass, each layer's count and mean cosine against a brute-force computation (each text alone, every pair's cosine in
float64); the MANTa pin; an exception inside a remote-code forward pass as a one-line skip."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from anisotropy import hub, results
from anisotropy.experiments import layerwise
from anisotropy.measure import taps
from anisotropy.models import registry
from anisotropy.models.character_indexer import MAX_WORD_LENGTH, CharacterIndexer
from conftest import measure_beside_tiny_bert
from hub_standin import remote

TEXTS = ["Anisotropy makes hidden representations close to each other in angle.",
         "A short one.",
         "Words, punctuation; and a café: all of it counts!",
         "Names refer to objects."]


@pytest.fixture()
def stand_in(tmp_path, monkeypatch):
    """``load(repo)``: the stand-in repository written to a folder and loaded with ``trust_remote_code``, its dynamic
    modules kept under ``tmp_path``."""
    import transformers.dynamic_module_utils as dynamic
    from transformers import AutoModel

    monkeypatch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path / "modules"))

    def load(repo: str, seed: int = 0):
        folder = tmp_path / repo.replace("/", "--")
        folder.mkdir()
        for name, data in remote.repo_files(repo, seed).items():
            (folder / name).write_bytes(data)
        return AutoModel.from_pretrained(folder, trust_remote_code=True).eval()

    return load


def _mean_cosine(vectors: list[np.ndarray]) -> float:
    """Brute force: every ordered pair i != j's cosine, in float64."""
    x = np.concatenate(vectors).astype(np.float64)
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    c = u @ u.T
    n = len(u)
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


# ---- CharacterBERT ---------------------------------------------------------------------------------------------------


def test_indexer_gives_the_authors_words_and_character_ids():
    """The authors' README: "CharacterBERT attends to each token's characters" is 8 words for its basic tokenizer,
    (1, 8, 50) ids for its indexer; ids are the word's bytes framed by begin/end of word (258, 259), padded with 260,
    all shifted by +1; [CLS] / [SEP] frame the sentence characters 256 / 257; a padding word is zeros."""
    indexer = CharacterIndexer()
    text = "CharacterBERT attends to each token's characters"
    assert indexer.words(text) == ["characterbert", "attends", "to", "each", "token", "'", "s", "characters"]
    enc = indexer([text, "Hi"], max_length=512)
    assert enc["input_ids"].shape == (2, 10, MAX_WORD_LENGTH)
    hi = enc["input_ids"][1]
    assert hi[1].tolist() == [259, ord("h") + 1, ord("i") + 1, 260] + [261] * 46
    assert hi[0].tolist() == [259, 257, 260] + [261] * 47 and hi[2].tolist() == [259, 258, 260] + [261] * 47
    assert hi[3:].abs().sum() == 0
    assert enc["attention_mask"].tolist() == [[1] * 10, [1, 1, 1] + [0] * 7]
    assert enc["special_tokens_mask"][1].tolist() == [1, 0, 1] + [0] * 7
    assert indexer([text], max_length=5)["input_ids"].shape == (1, 5, MAX_WORD_LENGTH)  # [CLS] 3 words [SEP]
    long = "x" * 60
    assert bytes(c - 1 for c in indexer([long])["input_ids"][0, 1, 1:49].tolist()) == b"x" * 48


@pytest.mark.parametrize("keep_special", [False, True])
def test_character_bert_gives_one_vector_per_word(stand_in, keep_special):
    """Batched and padded, taps keeps exactly the words (and [CLS]/[SEP] with keep_special) of every text, and each
    layer's mean cosine is the brute force's over the model run on each text alone."""
    model = stand_in("helboukkouri/character-bert")
    indexer = CharacterIndexer()
    loaded = registry.Loaded(model, indexer, registry.spec("character-bert"), "pretrained")
    stats = taps.extract(loaded, TEXTS, batch_size=3, max_length=64, keep_special=keep_special)
    words = [len(indexer.words(t)) for t in TEXTS]
    assert sorted(stats) == [0, 1, 2]
    alone = []
    with torch.inference_mode():
        for text in TEXTS:
            enc = indexer([text], max_length=64)
            states = model(input_ids=enc["input_ids"], output_hidden_states=True).hidden_states
            alone.append([h[0].numpy() if keep_special else h[0, 1:-1].numpy() for h in states])
    for layer in stats:
        assert stats[layer].n == sum(words) + (2 * len(TEXTS) if keep_special else 0)
        assert stats[layer].mean_cosine == pytest.approx(_mean_cosine([a[layer] for a in alone]), abs=1e-5)


# ---- MANTa-LM --------------------------------------------------------------------------------------------------------


def _manta_loaded(model):
    from transformers import ByT5Tokenizer

    return registry.Loaded(model, ByT5Tokenizer(), registry.spec("manta-lm"), "pretrained")


def test_manta_counts_blocks_in_the_encoder_and_bytes_in_the_decoder(stand_in):
    """The stand-in cuts a block at every space after the first byte: a text of s such spaces is s + 1 blocks, all
    content; its decoder reads the UTF-8 bytes shifted right (start token excluded, so the bytes). Each layer's mean
    cosine is the brute force's on each text alone."""
    model = stand_in("almanach/manta-lm-base")
    loaded = _manta_loaded(model)
    stats = taps.extract(loaded, TEXTS, batch_size=3, max_length=256)
    blocks = [t[1:].count(" ") + 1 for t in TEXTS]
    nbytes = [len(t.encode()) for t in TEXTS]
    assert [stats.parts[layer] for layer in sorted(stats)] == ["encoder"] * 3 + ["decoder"] * 3
    tok = loaded.preprocessor
    alone = []
    with torch.inference_mode():
        for text in TEXTS:
            ids = tok([text], return_tensors="pt")["input_ids"]
            dec = torch.cat([torch.zeros_like(ids[:, :1]), ids[:, :-1]], dim=1)
            out = model(input_ids=ids, decoder_input_ids=dec, output_hidden_states=True)
            alone.append([h[0].numpy() for h in out.encoder_hidden_states]
                         + [h[0, 1:].numpy() for h in out.decoder_hidden_states])
    for layer in sorted(stats):
        assert stats[layer].n == (sum(blocks) if stats.parts[layer] == "encoder" else sum(nbytes))
        assert stats[layer].mean_cosine == pytest.approx(_mean_cosine([a[layer] for a in alone]), abs=1e-5)
    encoder = taps.extract(loaded, TEXTS, batch_size=3, max_length=256, part="encoder")
    for layer in encoder:
        assert encoder[layer].n == sum(blocks)
        assert encoder[layer].mean_cosine == pytest.approx(stats[layer].mean_cosine, abs=1e-6)


def test_manta_padded_batch_is_what_the_real_contract_refuses(stand_in):
    """Why one text a pass: MANTa's decoder masks the encoder's blocks with the byte mask, so a padded batch with its
    mask fails (blocks != bytes); without the mask, the shorter text gets the longer one's number of blocks, its
    padding joins its last block and every block attends to the empty ones: other vectors than the text alone."""
    model = stand_in("almanach/manta-lm-base")
    tok = _manta_loaded(model).preprocessor
    enc = tok(TEXTS[:2], padding=True, return_tensors="pt")
    dec = torch.cat([torch.zeros_like(enc["input_ids"][:, :1]), enc["input_ids"][:, :-1]], dim=1)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="must match the size"):
        model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=dec)
    with torch.inference_mode():
        batched = model.get_encoder()(input_ids=enc["input_ids"]).last_hidden_state[1]
        alone = model.get_encoder()(input_ids=tok([TEXTS[1]], return_tensors="pt")["input_ids"]).last_hidden_state[0]
    assert (batched.shape[0], alone.shape[0]) == (TEXTS[0].count(" ") + 1, TEXTS[1].count(" ") + 1)
    assert not torch.allclose(batched[: alone.shape[0]], alone, atol=1e-3)


# ---- loading: the indexer, the pin --------------------------------------------------------------------------------------


def test_pretrained_remote_models_load_pinned_and_with_their_own_preprocessor(monkeypatch):
    """MANTa-LM loads model and tokenizer at its pinned commit; CharacterBERT's model comes from the Hub (main: no
    commit was read) and its preprocessor is the indexer, not a Hub tokenizer."""
    calls = []

    def load(fn, repo, revision=None, gated=False, **kwargs):
        calls.append((fn.__self__.__name__, repo, revision, kwargs.get("trust_remote_code")))
        return torch.nn.Linear(1, 1)

    monkeypatch.setattr(hub, "load", load)
    monkeypatch.setattr(hub, "fetching", lambda *a, **k: None)
    manta = registry.load("manta-lm")
    pin = registry.spec("manta-lm").code_revision
    assert len(pin) == 40 and int(pin, 16) >= 0
    assert calls == [("AutoModel", "almanach/manta-lm-base", pin, True),
                     ("AutoTokenizer", "almanach/manta-lm-base", pin, True)]
    calls.clear()
    bert = registry.load("character-bert")
    assert calls == [("AutoModel", "helboukkouri/character-bert", None, True)]
    assert isinstance(bert.preprocessor, CharacterIndexer) and manta.spec.layout == "manta"


# ---- a failing forward pass -------------------------------------------------------------------------------------------


def _broken_indexer(texts, max_length):
    """Ids of the wrong shape (2-D, as AutoTokenizer would give): CharacterBERT's forward pass raises."""
    ids = torch.ones(len(texts), 4, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": ids, "special_tokens_mask": torch.zeros_like(ids)}


def test_a_remote_forward_failure_is_a_one_line_skip_naming_the_model(stand_in, monkeypatch, tmp_path):
    """An exception inside CharacterBERT's forward pass: the model is skipped in one line naming it, the chapter
    measures the others; the same exception from a model whose code is the library's own stops the chapter."""
    model = stand_in("helboukkouri/character-bert")
    spec = {"character-bert": registry.spec("character-bert")}
    refs, frame, skipped = measure_beside_tiny_bert(
        monkeypatch, tmp_path / "r",
        lambda: registry.Loaded(model, _broken_indexer, spec["character-bert"], "pretrained"))
    assert set(frame["model"]) == {"bert-base-uncased"}
    assert [(s.ref.name, s.reason) for s in skipped] == [(
        "character-bert", "character-bert: measuring it through its remote code (helboukkouri/character-bert) failed: "
        "ValueError: CharacterBERT takes (batch, words, 50) character ids, got (2, 4)")]
    spec["character-bert"] = replace(spec["character-bert"], remote_code=False)
    with pytest.raises(ValueError, match=r"takes \(batch, words, 50\) character ids"):
        layerwise.measure_models(refs[:1], source="prose", n=2, max_length=16, store=results.Store(tmp_path / "s"))
