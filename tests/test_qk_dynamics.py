"""anisotropy.experiments.qk_dynamics on tiny checkpoints written here with save_pretrained: shapes, agreement with the model's own
attention, planted drifts recovered by the SVD projection and by the head-selection rule, and resume from the store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from anisotropy.measure import attention
from anisotropy.data import prose
from anisotropy.experiments import qk_dynamics
from anisotropy.models import registry
from anisotropy import results

HIDDEN, LAYERS, HEADS = 32, 2, 2
HEAD_DIM = HIDDEN // HEADS
STEPS = (0, 10, 100, 1000)
COMMON, OPPOSITE = (1, 0), (0, 1)  # the heads whose query/key biases carry a planted drift


def _tokenizer():
    """A character-level WordPiece tokenizer over the prose (no training needed, so the test stays fast)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    chars = sorted({c for p in prose.prose_paragraphs() for c in p.lower() if not c.isspace()})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*specials, *chars, *("##" + c for c in chars)])}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", model_max_length=64)


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A tiny BertForMaskedLM 'trained' by hand: at step s the query and key biases of head COMMON move by a(s)·u
    (both the same way) and those of head OPPOSITE by +a(s)·w and -a(s)·w; everything else stays at step 0."""
    from transformers import BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("suite")
    tok = _tokenizer()
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    base = BertForMaskedLM(config).eval()
    gen = torch.Generator().manual_seed(1)
    u, w = torch.randn(HEAD_DIM, generator=gen), torch.randn(HEAD_DIM, generator=gen)
    u, w = u / u.norm(), w / w.norm()
    stages = []
    for step in STEPS:
        model = BertForMaskedLM(config).eval()
        model.load_state_dict(base.state_dict())
        a = 3.0 * np.log1p(step) / np.log1p(STEPS[-1])
        with torch.no_grad():
            for (layer, head), (du, dk) in {COMMON: (u, u), OPPOSITE: (w, -w)}.items():
                att = model.bert.encoder.layer[layer].attention.self
                cut = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
                att.query.bias[cut] += a * du
                att.key.bias[cut] += a * dk
        path = folder / f"step-{step}"
        model.save_pretrained(path)
        tok.save_pretrained(path)
        stages.append(qk_dynamics.Stage("tiny seed 0", 0, step, str(path)))
    return {"stages": stages, "u": u.numpy(), "w": w.numpy()}


@pytest.fixture
def store(tmp_path):
    return results.Store(tmp_path / "results")


KW = dict(dataset="prose", n_samples=6, max_length=40, batch_size=4, progress=False)


def test_statistics_have_one_row_per_step_layer_head(suite, store):
    stats = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    assert len(stats) == len(STEPS) * LAYERS * HEADS
    assert set(stats["step"]) == set(STEPS) and set(stats["layer"]) == {0, 1} and set(stats["head"]) == {0, 1}
    assert all(np.shape(v) == (HEAD_DIM,) for v in stats["q_mean"]) and (stats["head_dim"] == HEAD_DIM).all()
    # the stored vectors agree with the stored scalars
    q, k = np.stack(stats["q_mean"]).astype(float), np.stack(stats["k_mean"]).astype(float)
    np.testing.assert_allclose((q * k).sum(1), stats["dot_qk"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(stats["cos_qk"], (q * k).sum(1) / np.linalg.norm(q, axis=1) / np.linalg.norm(k, axis=1),
                               rtol=1e-5, atol=1e-6)
    assert (stats["entropy"] <= stats["entropy_uniform"] + 1e-9).all() and (stats["entropy"] > 0).all()


def test_statistics_match_brute_force_from_the_model_outputs(suite):
    """Q̄, K̄ from the query/key maps applied to the hidden states, the entropy from output_attentions, both masked
    by padding by hand; and the captured Q and K reproduce the model's attention weights."""
    loaded = suite["stages"][-1].load()
    texts = [*prose.text_samples(4, 0), "A short line."]  # padded against the truncated paragraphs
    enc = loaded.preprocessor(texts, padding=True, truncation=True, max_length=40, return_tensors="pt")
    assert bool((enc["attention_mask"] == 0).any()), "the test needs padding"
    stats = qk_dynamics.head_statistics(loaded.model, qk_dynamics.batches(loaded, texts, 5, 40)).set_index(
        ["layer", "head"])
    mask = enc["attention_mask"].bool()
    with torch.no_grad():
        out = loaded.model(**enc, output_hidden_states=True, output_attentions=True)
        caps = attention.capture(loaded.model, dict(enc))
    for layer in range(LAYERS):
        att = loaded.model.bert.encoder.layer[layer].attention.self
        h = out.hidden_states[layer]
        cap = caps[layer]
        scores = cap.queries @ cap.keys.transpose(-1, -2) / np.sqrt(HEAD_DIM)
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        torch.testing.assert_close(scores.softmax(-1), out.attentions[layer], atol=1e-5, rtol=0)
        for head in range(HEADS):
            cut = slice(head * HEAD_DIM, (head + 1) * HEAD_DIM)
            q_all = att.query(h)[..., cut][mask].double().detach().numpy()
            k_all = att.key(h)[..., cut][mask].double().detach().numpy()
            q, k = q_all.mean(0), k_all.mean(0)
            p = out.attentions[layer][:, head].double()  # (batch, query, key)
            ent = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)[mask].mean().item()
            row = stats.loc[(layer, head)]
            np.testing.assert_allclose(row["q_mean"], q, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(row["k_mean"], k, rtol=1e-4, atol=1e-5)
            assert row["entropy"] == pytest.approx(ent, rel=1e-5)
            for column, x in (("q_cosine", q_all), ("k_cosine", k_all)):  # every distinct pair, by brute force
                u = x / np.linalg.norm(x, axis=1, keepdims=True)
                cos = u @ u.T
                n = len(u)
                assert row[column] == pytest.approx((cos.sum() - np.trace(cos)) / (n * (n - 1)), rel=1e-6, abs=1e-9)
            assert row["entropy_uniform"] == pytest.approx(np.log(mask.sum(1).double()).repeat_interleave(
                mask.sum(1)).mean().item(), rel=1e-9)


def test_vector_samples_shapes_and_same_tokens_at_every_step(suite, store):
    heads = [COMMON, OPPOSITE]
    vec = qk_dynamics.step_vectors(suite["stages"], heads, fraction=0.5, max_vectors=50, store=store, **KW)
    counts = vec.groupby(["step", "layer", "head", "kind"]).size()
    assert len(counts) == len(STEPS) * 2 * 2 and counts.nunique() == 1 and counts.iloc[0] <= 50
    assert all(np.shape(v) == (HEAD_DIM,) for v in vec["vector"])
    tokens = vec.groupby("step")["token"].apply(lambda t: tuple(sorted(t)))
    assert tokens.nunique() == 1


def test_svd_projection_recovers_a_planted_drift():
    """Isotropic noise whose mean moves along a known direction with the step: the first singular vector of the
    union of steps is that direction (and it is oriented along the drift)."""
    rng = np.random.default_rng(0)
    d, direction = 48, rng.normal(size=48)
    direction /= np.linalg.norm(direction)
    rows = []
    for step, a in enumerate(np.linspace(0, 6, 7)):
        for kind, sign in (("query", 1.0), ("key", 1.0)):
            x = rng.normal(size=(300, d)) + sign * a * direction
            rows.append(pd.DataFrame({"layer": 0, "head": 0, "kind": kind, "step": step, "token": range(300),
                                      "vector": list(x)}))
    vec = pd.concat(rows, ignore_index=True)
    for fit_on in ("union", "keys", "queries"):
        basis = qk_dynamics.projection_basis(vec, 0, 0, fit_on, fraction=0.2)
        assert basis.shape == (d, 2)
        np.testing.assert_allclose(basis.T @ basis, np.eye(2), atol=1e-10)
        assert basis[:, 0] @ direction > 0.99
    proj = qk_dynamics.project_vectors(vec, 0, 0, basis)
    means = proj.groupby("step")["x"].mean()
    assert means.is_monotonic_increasing and means.iloc[-1] == pytest.approx(6, abs=0.3)


def test_head_rule_picks_the_planted_heads_on_synthetic_trajectories():
    """Twelve heads: most wander randomly with small drifts; one pair of means moves together into alignment, one
    moves apart into anti-alignment, and a decoy moves together but gains little alignment (it starts aligned)."""
    rng = np.random.default_rng(1)
    d, steps = 16, [0, 1, 10, 100]
    u = np.eye(d)[0]
    rows = []
    for layer in range(3):
        for head in range(4):
            q0, k0 = rng.normal(size=d), rng.normal(size=d)
            k0 -= (k0 @ q0) / (q0 @ q0) * q0  # start orthogonal
            dq, dk = 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)
            if (layer, head) == (2, 1):
                dq, dk = 5 * u, 5 * u
            elif (layer, head) == (0, 3):
                dq, dk = 5 * u, -5 * u
            elif (layer, head) == (1, 2):
                k0 = q0.copy()
                dq, dk = 5 * u, 5 * u
            for i, step in enumerate(steps):
                t = i / (len(steps) - 1)
                q, k = q0 + t * dq, k0 + t * dk
                rows.append({"run": "r", "step": step, "layer": layer, "head": head, "q_mean": q, "k_mean": k,
                             "cos_qk": q @ k / np.linalg.norm(q) / np.linalg.norm(k)})
    picked = qk_dynamics.pick_heads(pd.DataFrame(rows))
    assert picked["common"] == (2, 1) and picked["opposite"] == (0, 3)
    assert picked["qualified"] == {"common": True, "opposite": True}
    dyn = picked["dynamics"].set_index(["layer", "head"])
    assert dyn.loc[(1, 2), "displacement_cos"] > 0.99 and abs(dyn.loc[(1, 2), "gain"]) < 0.05  # the decoy


def test_head_rule_says_when_no_head_moved_the_wanted_way():
    """Every head's means move apart: no common-direction head qualifies, and the rule says so."""
    rows = []
    for head, scale in enumerate((1.0, 2.0, 3.0)):
        q0, k0 = np.eye(4)[0], np.eye(4)[1]
        for step, t in ((0, 0.0), (10, 1.0)):
            q, k = q0 + t * scale * np.eye(4)[2], k0 - t * scale * np.eye(4)[2]
            rows.append({"run": "r", "step": step, "layer": 0, "head": head, "q_mean": q, "k_mean": k,
                         "cos_qk": q @ k / np.linalg.norm(q) / np.linalg.norm(k)})
    picked = qk_dynamics.pick_heads(pd.DataFrame(rows))
    assert picked["qualified"] == {"common": False, "opposite": True}
    assert picked["opposite"] == (0, 2)
    assert picked["common"] is None  # no head moved its means the same way at all: no panel, not a stand-in


def test_head_rule_never_offers_a_head_that_lost_alignment_as_common_direction():
    """The local run's case: a head whose |cos| fell (+0.40 -> -0.10) while its means moved apart scores
    gain * cos > 0 (two negatives); it must not be picked. A weak candidate (alignment grew a little, means moved
    slightly together, ends inside the band) is picked instead, marked as not qualifying."""
    e = np.eye(8)
    rows = []

    def add(head, q0, k0, q1, k1):
        for step, (q, k) in ((0, (q0, k0)), (10, (q1, k1))):
            rows.append({"run": "r", "step": step, "layer": 0, "head": head, "q_mean": q, "k_mean": k,
                         "cos_qk": q @ k / np.linalg.norm(q) / np.linalg.norm(k)})

    # head 0: starts aligned (cos ~ +0.6), means move far apart, ends nearly orthogonal: lost alignment
    add(0, e[0] + 0.8 * e[1], e[1] + 0.8 * e[0], e[0] + 0.8 * e[1] + 4 * e[2], e[1] + 0.8 * e[0] - 4 * e[2] + 4 * e[3])
    # head 1: |cos| 0 -> ~0.1, both means move a little along a shared direction plus their own
    add(1, e[4], e[5], e[4] + 0.1 * e[6] + 0.3 * e[7], e[5] + 0.1 * e[6] - 0.3 * e[4])
    stats = pd.DataFrame(rows)
    dyn = qk_dynamics.head_dynamics(stats).set_index("head")
    assert dyn.loc[0, "gain"] < 0 and dyn.loc[0, "displacement_cos"] < 0  # the old fallback's favourite
    assert dyn.loc[1, "gain"] > 0 and 0 < dyn.loc[1, "displacement_cos"] < 0.5
    picked = qk_dynamics.pick_heads(stats, band=0.48)
    assert picked["common"] == (0, 1) and picked["qualified"]["common"] is False
    assert picked["opposite"] is None  # head 0 moved apart but lost alignment: no opposite-direction candidate
    only_lost = qk_dynamics.pick_heads(stats[stats["head"] == 0], band=0.48)
    assert only_lost["common"] is None and only_lost["opposite"] is None

    # the page's words and panels follow the selection: the weak head is labelled for what it is, and no panel or
    # sentence calls a head that lost alignment an example of either kind
    from anisotropy.chapters import p1_s5_qk_training as page

    shown = page.shown_heads(picked)
    assert shown == [("closest to common direction, not an example", (0, 1))]
    assert page.example_head(shown) == ((0, 1), "shown in Figure 12 as closest to common direction, not an example")
    note = page.pick_note(picked, band=0.48, min_displacement=0.5)
    assert "layer 1, head 2, which is not an example of it" in note and "inside the isotropic band" in note
    assert "in opposite directions at all in this run, so no panel shows that kind" in note
    assert page.heads_text(shown, picked["dynamics"].set_index(["layer", "head"])).startswith(
        "In layer 1, head 2 (closest to common direction, not an example)")
    fallback = page.shown_heads(only_lost)
    assert fallback == [("an example of neither kind", (0, 0))]


def test_head_rule_does_not_call_a_head_inside_the_band_or_barely_moving_together_an_example():
    """The issue-31 case: a 'common-direction' head whose means moved together by a displacement cosine of +0.06 and
    that ends at cos -0.15, inside a band of 0.48, is no example of the common-direction dynamics."""
    d = 8
    e = np.eye(d)
    rows = []
    # head 0: alignment grows a little (|cos| 0.0 -> 0.15) while its means move almost at right angles
    q0, k0 = e[0], e[1]
    q1, k1 = e[0] + 0.3 * e[2], e[1] - 0.15 * e[0] + 0.3 * e[3] + 0.02 * e[2]
    # head 1: both means move the same way and end aligned, outside the band
    r0, s0 = e[4], e[5]
    r1, s1 = e[4] + 3 * e[6], e[5] + 3 * e[6]
    for head, (a0, b0, a1, b1) in enumerate(((q0, k0, q1, k1), (r0, s0, r1, s1))):
        for step, (q, k) in ((0, (a0, b0)), (10, (a1, b1))):
            rows.append({"run": "r", "step": step, "layer": 0, "head": head, "q_mean": q, "k_mean": k,
                         "cos_qk": q @ k / np.linalg.norm(q) / np.linalg.norm(k)})
    stats = pd.DataFrame(rows)
    dyn = qk_dynamics.head_dynamics(stats).set_index("head")
    assert 0 < dyn.loc[0, "displacement_cos"] < 0.5 and dyn.loc[0, "gain"] > 0 and abs(dyn.loc[0, "cos_last"]) < 0.48
    assert qk_dynamics.pick_heads(stats[stats["head"] == 0], band=0.48)["qualified"]["common"] is False
    assert qk_dynamics.pick_heads(stats[stats["head"] == 0], band=0.0, min_displacement=0.0)["qualified"]["common"]
    picked = qk_dynamics.pick_heads(stats, band=0.48)
    assert picked["common"] == (0, 1) and picked["qualified"]["common"]
    from anisotropy.chapters import p1_s5_qk_training as page

    assert page.shown_heads(picked)[0] == ("common direction", (0, 1))
    assert page.example_head(page.shown_heads(picked)) == ((0, 1), "the common-direction head of Figure 12")


def test_head_rule_picks_the_planted_heads_in_the_tiny_checkpoints(suite, store):
    stats = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    picked = qk_dynamics.pick_heads(stats)
    assert picked["common"] == COMMON and picked["opposite"] == OPPOSITE
    dyn = qk_dynamics.head_dynamics(stats).set_index(["layer", "head"])
    assert dyn.loc[COMMON, "displacement_cos"] == pytest.approx(1.0, abs=1e-5)  # both means moved by a(s)·u
    # the opposite head's queries moved by +a·w and keys by -a·w, so their means did too
    assert dyn.loc[OPPOSITE, "displacement_cos"] == pytest.approx(-1.0, abs=1e-5)
    last = stats[stats["step"] == STEPS[-1]].set_index(["layer", "head"])
    assert last.loc[COMMON, "cos_qk"] > 0.9 and last.loc[OPPOSITE, "cos_qk"] < -0.9


def test_second_run_reads_the_store_instead_of_loading_checkpoints(suite, store, monkeypatch, tmp_path):
    first = qk_dynamics.step_statistics(suite["stages"][:2], store=store, **KW)  # "interrupted" after two steps
    loads = []
    original = qk_dynamics.Stage.load
    monkeypatch.setattr(qk_dynamics.Stage, "load", lambda self, device="cpu", release=False: loads.append(self.step) or
                        original(self, device))
    full = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    assert loads == list(STEPS[2:])  # resumed: only the checkpoints not yet stored were loaded
    again = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    assert loads == list(STEPS[2:])  # nothing loaded the second time
    # fanned out, a run whose stages are all stored reads them here: no worker process is started to read them
    from anisotropy import executor

    monkeypatch.delenv(executor.SCHEDULER_ENV, raising=False)
    monkeypatch.delenv(executor.SLOTS_ENV, raising=False)
    monkeypatch.delenv(executor.WORKERS_ENV, raising=False)
    monkeypatch.setattr(executor, "cores", lambda: 2)

    def no_cluster(*args, **kwargs):
        raise RuntimeError("a cluster was started")

    monkeypatch.setattr(executor, "_local_client", no_cluster)
    fanned = qk_dynamics.step_statistics(suite["stages"], store=store, fan_out="auto", **KW)
    assert loads == list(STEPS[2:])
    pd.testing.assert_frame_equal(fanned.drop(columns=["q_mean", "k_mean"]), full.drop(columns=["q_mean", "k_mean"]))
    # ... while stages that are not stored yet go to the workers
    with pytest.raises(RuntimeError, match="a cluster was started"):
        qk_dynamics.step_statistics(suite["stages"], store=results.Store(tmp_path / "empty"), fan_out="auto", **KW)
    pd.testing.assert_frame_equal(again.drop(columns=["q_mean", "k_mean"]), full.drop(columns=["q_mean", "k_mean"]))
    pd.testing.assert_frame_equal(first.drop(columns=["q_mean", "k_mean"]),
                                  full[full["step"].isin(STEPS[:2])].drop(columns=["q_mean", "k_mean"]))


def test_a_checkpoint_that_cannot_be_downloaded_is_left_out_named_and_blocks_the_claims_on_its_run(suite, store,
                                                                                                     monkeypatch):
    from anisotropy import hub, profiles
    from anisotropy.claims import ledger, words
    from anisotropy.chapters import p1_s5_qk_training as page
    from anisotropy.experiments.layerwise import Skipped

    original = qk_dynamics.Stage.load
    missing = STEPS[1]

    def load(self, device="cpu", release=False):
        if self.step == missing:
            raise hub.Unavailable(f"google/multiberts-seed_0 at step_{missing}k: 504 Gateway Timeout")
        return original(self, device)

    monkeypatch.setattr(qk_dynamics.Stage, "load", load)
    stats = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    assert set(stats["step"]) == set(STEPS) - {missing}  # the others were measured
    left_out = qk_dynamics.skipped(stats)
    assert [(s.ref.step, s.ref.name) for s in left_out] == [(missing, suite["stages"][1].source)]
    assert "504 Gateway Timeout" in left_out[0].reason and f"step {missing:,}" in left_out[0].reason
    assert f"at step {missing:,}" in page.left_out_note(left_out)
    assert page.left_out_note([]) == "Every checkpoint of every run was measured."
    # a claim that names the run's model is not decided on the rest, its run partly measured (the ledger's word, added
    # for a checkpoint left out, never spelled by the experiment); the page's note says the same
    claim = next(c for c in ledger.ledger() if c.chapter == "p1_s5_qk_training")
    as_named = Skipped(dataclasses.replace(left_out[0].ref, source=claim.models[0]), left_out[0].reason)
    rows = ledger.evaluate("p1_s5_qk_training", profiles.Resolved("p1_s5_qk_training", "local"), store=store,
                           skipped=[as_named], qk=stats, axes=stats)
    row = rows[rows["id"] == claim.id].iloc[0]
    assert (f"{claim.models[0]}, which could not be measured here ({words.PARTLY}: its checkpoint at step {missing:,}"
            in row["why"])
    assert f"({words.PARTLY}: {left_out[0].reason})" in page.left_out_note(left_out)
    # offline stops at once, and a run with nothing measurable stops naming the first reason
    monkeypatch.setattr(qk_dynamics.Stage, "load", lambda self, device="cpu", release=False: (_ for _ in ()).throw(
        hub.Offline("the Hub is unreachable")))
    with pytest.raises(hub.Offline):
        qk_dynamics.step_statistics(suite["stages"], store=results.Store(Path(store.root) / "other"), **KW)
    monkeypatch.setattr(qk_dynamics.Stage, "load", lambda self, device="cpu", release=False: (_ for _ in ()).throw(
        hub.Unavailable("gone")))
    with pytest.raises(hub.Unavailable, match="none of the"):
        qk_dynamics.step_statistics(suite["stages"], store=results.Store(Path(store.root) / "other2"), **KW)


def test_alignment_summary_on_the_planted_suite(suite, store):
    stats = qk_dynamics.step_statistics(suite["stages"], store=store, **KW)
    summary = qk_dynamics.alignment_summary(stats).iloc[0]
    assert summary["first_step"] == 0 and summary["last_step"] == STEPS[-1]
    assert summary["null_bound"] == pytest.approx(0.49, abs=0.02)  # 97.5th percentile of the null cosine, d = 16
    assert summary["share_beyond_null_last"] >= 0.5  # the two planted heads


def test_multiberts_stages_name_every_revision_with_its_step():
    stages = qk_dynamics.multiberts_stages(3)
    assert [s.step for s in stages][:3] == [0, 20_000, 40_000] and stages[-1].step == 2_000_000
    assert len(stages) == 29 and {s.source for s in stages} == {"multiberts-seed-3"}
    assert registry.spec("multiberts-seed-3").hub_location(stages[1].revision) == ("google/multiberts-seed_3-step_20k",
                                                                                     None)


def test_decoder_and_vision_statistics_match_brute_force():
    """GPT-2 (causal: row i may attend to i + 1 keys) and ViT (every patch counts): entropies and their uniform
    ceiling against the model's own output_attentions."""
    from transformers import GPT2Config, GPT2Model, ViTConfig, ViTModel

    torch.manual_seed(0)
    gpt = GPT2Model(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=32,
                               attn_implementation="eager")).eval()
    ids = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[2, 6:] = 0  # right padding
    stats = qk_dynamics.head_statistics(gpt, [({"input_ids": ids, "attention_mask": mask}, mask.bool())])
    with torch.no_grad():
        att = gpt(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    valid = mask.bool()
    ceiling = np.mean([np.log(i + 1) for row in mask.tolist() for i, m in enumerate(row) if m])
    for r in stats.itertuples():
        p = att[r.layer][:, r.head].double()
        ent = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)[valid].mean().item()
        assert r.entropy == pytest.approx(ent, rel=1e-5) and r.entropy_uniform == pytest.approx(ceiling, rel=1e-9)

    vit = ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=16, patch_size=4)).eval()
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    stats = qk_dynamics.head_statistics(vit, [({"pixel_values": pixels}, None)])
    assert len(stats) == 4 and (stats["n_tokens"] == 2 * 17).all()  # 16 patches + [CLS] per image
    assert stats["entropy_uniform"].iloc[0] == pytest.approx(np.log(17))


def test_folder_of_checkpoints_lists_its_steps(suite):
    folder = suite["stages"][0].source.rsplit("/", 1)[0]
    found = qk_dynamics.runs(folder)
    assert list(found) == [0] and [s.step for s in found[0]] == list(STEPS)
    picked = qk_dynamics.pick_stages(found[0], 3)
    assert picked[0].step == 0 and picked[-1].step == STEPS[-1] and len(picked) == 3


def test_concatenated_alignment_is_the_cosine_of_the_concatenated_means():
    """Figure 23 concatenates the heads: two heads whose means are aligned (+1) and anti-aligned (-1) with equal norms
    give 0 together; brute force on random means agrees."""
    rng = np.random.default_rng(0)
    rows = []
    for step in (0, 10):
        for head in range(3):
            q, k = rng.normal(size=4), rng.normal(size=4)
            rows.append({"run": "r", "seed": 0, "layer": 1, "step": step, "head": head, "q_mean": q, "k_mean": k})
    stats = pd.DataFrame(rows)
    out = qk_dynamics.concatenated_alignment(stats)
    assert len(out) == 2 and set(out["dim"]) == {12}
    for step, got in out.set_index("step")["cos_qk"].items():
        part = stats[stats["step"] == step].sort_values("head")
        q, k = np.concatenate(part["q_mean"].to_list()), np.concatenate(part["k_mean"].to_list())
        assert got == pytest.approx(q @ k / np.linalg.norm(q) / np.linalg.norm(k))
    e = np.eye(4)[0]
    planted = pd.DataFrame([{"run": "r", "seed": 0, "layer": 0, "step": 0, "head": 0, "q_mean": e, "k_mean": e},
                            {"run": "r", "seed": 0, "layer": 0, "step": 0, "head": 1, "q_mean": e, "k_mean": -e}])
    assert qk_dynamics.concatenated_alignment(planted)["cos_qk"].iloc[0] == pytest.approx(0.0)


def _planted(sign_key: float, d: int = 48, steps: int = 7, seed: int = 0):
    """Queries drifting along a known unit direction u (mean a * u at step a), keys along sign_key * u; the per-step
    means as ``step_statistics`` keeps them."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    vec_rows, stat_rows = [], []
    for step, a in enumerate(np.linspace(0, 6, steps)):
        means = {}
        for kind, sign in (("query", 1.0), ("key", sign_key)):
            x = rng.normal(size=(300, d)) + sign * a * u
            means[kind] = x.mean(0)
            vec_rows.append(pd.DataFrame({"layer": 0, "head": 0, "kind": kind, "step": step, "token": range(300),
                                          "vector": list(x)}))
        stat_rows.append({"layer": 0, "head": 0, "step": step, "q_mean": means["query"], "k_mean": means["key"]})
    return pd.concat(vec_rows, ignore_index=True), pd.DataFrame(stat_rows), u


def test_drift_in_basis_reads_a_planted_drift_along_the_first_axis():
    """Means moving along u: the first axis of every basis is u, so each displacement lies along it (cos^2 near 1);
    with keys drifting the other way, the keys-only basis sees the queries end on the other side of the origin."""
    from anisotropy.claims.rules import p1_s5

    vec, stats, u = _planted(sign_key=-1.0)
    axes = qk_dynamics.drift_in_basis(vec, stats, [(0, 0)])
    assert set(axes["fit_on"]) == {"union", "keys", "queries"}
    assert (axes["q_axis_cos"] ** 2 > 0.98).all() and (axes["k_axis_cos"] ** 2 > 0.98).all()  # means of 300: noise
    keys = axes.set_index("fit_on").loc["keys"]
    # v1 oriented with the keys' mean (-a u): the keys project to about +6 at the end, the queries to about -6
    assert keys["k_last"] == pytest.approx(6, abs=0.3) and keys["q_last"] == pytest.approx(-6, abs=0.3)
    assert p1_s5.first_axis_is_drift(axes).holds
    assert p1_s5.other_drifts_opposite(axes).holds
    # the same drift for both: the other distribution ends on the same side, not the opposite one
    same = qk_dynamics.drift_in_basis(*_planted(sign_key=1.0)[:2], [(0, 0)])
    assert p1_s5.other_drifts_opposite(same).holds is False
    assert p1_s5.first_axis_is_drift(same).holds
