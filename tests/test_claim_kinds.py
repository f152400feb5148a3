"""A stand-in decides only a claim of its kind, and every verdict names the question it answers (claims.stand_ins)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from anisotropy.claims import ledger as claims, stand_ins
from anisotropy.measure.baseline import isotropic_cosine_quantile
from anisotropy.models import registry, table

HOLDS, FAILS, UNTESTABLE = claims.HOLDS, claims.FAILS, claims.UNTESTABLE


def layers(model: str, values, origin: str = "pretrained", family: str = "token-level") -> pd.DataFrame:
    return pd.DataFrame({"label": model, "model": model, "layer": range(len(values)), "mean_cosine": values,
                         "dim": 768, "variant": origin, "family": family,
                         "null_q95": float(isotropic_cosine_quantile(0.95, 768))})


@pytest.fixture
def patched_ledger(monkeypatch):
    """Replace claims of the ledger by edited copies: ``patched_ledger(id, models=..., ...)``."""
    def patch(claim_id: str, **changes):
        edited = tuple(dataclasses.replace(c, **changes) if c.id == claim_id else c for c in claims.ledger())
        monkeypatch.setattr(claims, "_read_ledger", lambda: edited)
    return patch


def test_every_model_of_the_table_states_its_kind():
    for name in registry.names():
        spec = registry.spec(name)
        assert spec.objective in table.OBJECTIVES and spec.unit in table.UNITS, name


def test_the_kinds_of_the_offline_models_against_the_papers_models():
    # the three mismatches: SMILES wordpieces are not characters, DINOv2 is neither BEiT nor DeiT, a Whisper
    # is not wav2vec 2.0; and two that match: a Llama-like decoder is a GPT-2-like decoder, a Whisper is a Whisper
    char = claims.claim("p1-s3.1-char-anisotropic")
    assert not stand_ins.of_kind(char, "rxnmapper-albert")
    assert not stand_ins.of_kind(claims.claim("p1-s3.2-vit-anisotropic"), "vit-s14-focus")
    speech = claims.claim("p1-s3.2-speech-above-0.2")
    assert stand_ins.covers(speech, "whisper-tiny-en", "whisper-base")
    assert not stand_ins.covers(speech, "whisper-tiny-en", "wav2vec2-base")
    assert not stand_ins.covers(speech, "whisper-tiny-en", "hubert-base")
    assert stand_ins.covers(claims.claim("p1-f1-token-anisotropic"), "smollm2-135m", "gpt2")
    assert not stand_ins.covers(claims.claim("p1-f1-token-anisotropic"), "mpnet-base-v2", "bert-base-uncased")
    # the five CNNs the paper names are ImageNet classifiers: the task is part of the kind, so a text detector's VGG
    # (CRAFT) decides nothing, an ImageNet classifier shipped as real weights (EfficientNet-lite0) may
    cnns = claims.claim("p1-s3.2-cnns-isotropic")
    assert not stand_ins.of_kind(cnns, "craft-vgg16-bn") and not stand_ins.of_kind(cnns, "vit-s14-focus")
    assert stand_ins.of_kind(cnns, "efficientnet-lite0")


def test_no_claim_widens_its_kind_beyond_what_its_models_share():
    """A stated ``kind`` may say more than the models' kinds list (a value or a list per key), never less: on every
    key on which all the models a claim names agree (the task of the paper's five ImageNet classifiers, say), the
    stated kind allows that value only, so that no stand-in of another task or unit decides it."""
    for c in claims.ledger():
        kinds = [k for m in c.models if (k := stand_ins.model_kind(m)) is not None]
        if not c.kind or not kinds:
            continue
        for key in stand_ins.KIND_KEYS:
            shared = {k[key] for k in kinds}
            if len(shared) == 1:
                stated = c.kind.get(key)
                assert stated is not None and set([stated] if isinstance(stated, str) else stated) == shared, (
                    c.id, key, stated, shared)


def test_no_claim_is_decided_by_a_stand_in_of_another_kind():
    """Walk the ledger: with every real model measured (and none of the papers'), the models a claim is decided on
    are all of its kind, and those that are not are named as deciding nothing."""
    for c in claims.ledger():
        if not c.real_models:
            continue
        frame = pd.concat([layers(m, [0.3, 0.4, 0.5]) for m in c.real_models], ignore_index=True)
        selected, tested_on, why, question, _ = claims._select(c, [frame] * len(c.input))
        fitting = [m for m in c.real_models if stand_ins.of_kind(c, m)]
        unfit = [m for m in c.real_models if m not in fitting]
        if selected is not None:
            used = {m for f in selected if "model" in f.columns for m in f["model"]}
            assert used and used <= set(fitting), (c.id, used)
            assert question == "real", c.id
        for m in unfit:
            assert registry.spec(m).display in tested_on + why, (c.id, m)


def test_a_stand_in_of_the_claims_kind_decides_it_and_says_which_question_it_answers(patched_ledger):
    patched_ledger("p1-f1-token-anisotropic", models=("gpt2",), real_models=("smollm2-135m", "mpnet-base-v2"))
    frame = pd.concat([layers("smollm2-135m", [0.5, 0.6]), layers("mpnet-base-v2", [0.0, 0.0])], ignore_index=True)
    row = claims.verdict_rows("p1_s3_token_level", "local", {"layers": frame}).set_index("id").loc[
        "p1-f1-token-anisotropic"]
    assert row["verdict"] == HOLDS and row["question"] == "real"
    assert row["tested_on"].startswith(claims.REAL_STAND_IN) and "SmolLM2" in row["tested_on"]
    assert "deciding nothing: all-mpnet-base-v2 (text sentence-embedding" in row["tested_on"]  # shown as measured
    # the same claim with only the stand-in of another kind: not testable, saying why
    row = claims.verdict_rows("p1_s3_token_level", "local", {"layers": layers("mpnet-base-v2", [0.5, 0.6])}).set_index(
        "id").loc["p1-f1-token-anisotropic"]
    assert row["verdict"] == UNTESTABLE and row["question"] == ""
    assert "measured but not of the claim's kind (text causal-lm decoder, subword units)" in row["why"]
    # the paper's own model, measured, decides it, and answers the first question
    row = claims.verdict_rows("p1_s3_token_level", "paper", {"layers": layers("gpt2", [0.0, 0.0])}).set_index(
        "id").loc["p1-f1-token-anisotropic"]
    assert row["verdict"] == FAILS and row["question"] == "papers"


def test_an_every_model_claim_needs_a_stand_in_of_each_models_kind(patched_ledger):
    # "every speech Transformer": two Whispers stand for Whisper only, not for wav2vec 2.0 and HuBERT
    whispers = pd.concat([layers(m, [0.3, 0.4], family="speech") for m in ("whisper-tiny-en", "whisper-base-ct2")],
                         ignore_index=True)
    row = claims.verdict_rows("p1_s3_modalities", "local", {"layers": whispers}).set_index("id").loc[
        "p1-s3.2-speech-above-0.2"]
    assert row["verdict"] == UNTESTABLE and "missing: wav2vec2-base, hubert-base" in row["why"]
    # with the claim narrowed to Whisper, the same stand-ins decide it, both ways
    patched_ledger("p1-s3.2-speech-above-0.2", models=("whisper-base",))
    for values, verdict in (([0.3, 0.4], HOLDS), ([0.1, 0.4], FAILS)):
        frame = pd.concat([layers(m, values, family="speech") for m in ("whisper-tiny-en", "whisper-base-ct2")],
                          ignore_index=True)
        row = claims.verdict_rows("p1_s3_modalities", "local", {"layers": frame}).set_index("id").loc[
            "p1-s3.2-speech-above-0.2"]
        assert row["verdict"] == verdict and row["question"] == "real", row.to_dict()


def test_the_four_questions_are_counted_apart():
    frame = pd.DataFrame({"verdict": [HOLDS, FAILS, HOLDS, HOLDS, FAILS, HOLDS, FAILS, UNTESTABLE, UNTESTABLE],
                          "question": ["papers", "papers", "setup", "real", "self-trained", "self-trained",
                                       "self-trained", "", ""]})
    counts = claims.by_question(frame)
    labels = ["the papers' models", "the papers' setup", "other real models", "the book's training runs"]
    assert [label for label, _ in stand_ins.QUESTIONS.values()] == labels
    assert list(counts.index) == labels  # four lines, the undecided ones are not one of them
    assert counts.loc[labels[0], [HOLDS, FAILS, "decided"]].tolist() == [1, 1, 2]
    assert counts.loc[labels[1], [HOLDS, FAILS, "decided"]].tolist() == [1, 0, 1]
    assert counts.loc[labels[2], [HOLDS, FAILS, "decided"]].tolist() == [1, 0, 1]
    assert counts.loc[labels[3], [HOLDS, FAILS, "decided"]].tolist() == [1, 2, 3]
    assert counts["decided"].sum() == 7 == int((frame["verdict"] != UNTESTABLE).sum())
    # a decided verdict that answers none of the four questions is no line's: an error, not a silent drop
    with pytest.raises(ValueError, match="answer no question"):
        claims.by_question(frame.assign(question=["papers"] * 8 + [""]).assign(verdict=[HOLDS] * 9))


def test_a_claim_that_needs_no_pretrained_model_answers_the_setup_question_not_the_papers_models():
    """Section 4's untrained block and Appendix B's exact results are the papers' setup, not the papers' models: no
    verdict on them is counted on the line of the papers' models."""
    for c in claims.ledger():
        if c.scope != "any":
            continue
        selection = claims._select(c, [pd.DataFrame({"x": [1.0]})] * len(c.input))
        assert selection.question == (c.question or "setup"), c.id
        assert selection.question != "papers", c.id
    for cid in ("p1-s4-fixed-point", "p1-appB-null-concentrates", "book-s4-layernorm-fixed-point"):
        assert claims._select(claims.claim(cid), [pd.DataFrame({"x": [1.0]})]).question == "setup", cid


def test_a_claim_of_the_books_own_runs_answers_the_third_question():
    conjecture = claims.claim("p1-conclusion-sharp-without-anisotropy")
    assert conjecture.scope == "any" and conjecture.question == "self-trained"
    rows = claims.verdict_rows(conjecture.chapter, "local", {})
    assert rows.set_index("id").loc[conjecture.id, "question"] == ""  # not decided without its frame


def test_the_ledger_refuses_an_unknown_kind():
    entry = {"id": "x", "paper": "book", "section": "s", "figure": "none", "chapter": "c", "claim": "c",
             "evidence": "e", "quantity": "q", "rule": "bell_shaped", "input": "profiles", "scope": "any"}
    assert claims.read_claim({**entry, "kind": {"modality": "vision"}}).kind == {"modality": "vision"}
    with pytest.raises(ValueError, match="kind modality"):
        claims.read_claim({**entry, "kind": {"modality": "smell"}})
    with pytest.raises(ValueError, match="kind"):
        claims.read_claim({**entry, "kind": {"colour": "red"}})
