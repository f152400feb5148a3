"""layerwise: many models on one data source through the results store, and the drift correlation (Paper 1, Sec. 3).

Ground truths: the hidden states of the same tiny models computed directly with ``transformers`` and measured with
``measure.metrics``; scipy.stats on planted per-layer series; the exact isotropic quantile.
"""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from anisotropy.measure import baseline, metrics
from anisotropy.data import sources as data
from anisotropy import hub, results
from anisotropy.experiments import layerwise
from anisotropy.models import registry

TEXTS = data.load("prose", 3, seed=1)
MAX_LENGTH = 24


@pytest.fixture
def store(tmp_path):
    return results.Store(tmp_path / "results")


def _direct_text_states(name: str):
    """Hidden states and the content-token mask of the tiny model, computed without taps."""
    loaded = registry.load(name, variant="tiny", seed=0)
    enc = loaded.preprocessor(TEXTS, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt",
                              return_special_tokens_mask=True)
    keep = enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()
    with torch.no_grad():
        out = loaded.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                           output_hidden_states=True)
    return out.hidden_states, keep


def test_bert_rows_match_metrics_on_the_same_hidden_states(store):
    frame = layerwise.measure(layerwise.ModelRef("bert-base-uncased", "tiny"), lambda: TEXTS, source="prose", n=3,
                              seed=0, max_length=MAX_LENGTH, store=store)
    states, keep = _direct_text_states("bert-base-uncased")
    assert list(frame["layer"]) == list(range(len(states)))  # layer 0 = embeddings, then one per block
    for col in ("model", "label", "display", "family", "modality", "variant", "layer", "relative_depth", "dim", "n",
                "mean_cosine", "drift_norm", "mean_norm", "null_q95", "is_embedding", "part"):
        assert col in frame.columns, col
    assert set(frame["model"]) == {"bert-base-uncased"} and set(frame["variant"]) == {"tiny"}
    assert set(frame["family"]) == {"token-level"} and set(frame["label"]) == {"BERT (tiny)"}
    assert list(frame["is_embedding"]) == [True] + [False] * (len(states) - 1)
    assert np.allclose(frame["relative_depth"], np.linspace(0, 1, len(states)))
    for layer, h in enumerate(states):
        rows = h[keep]
        row = frame.set_index("layer").loc[layer]
        assert row["n"] == rows.shape[0] == int(keep.sum())
        assert row["dim"] == h.shape[-1] == 32
        assert row["mean_cosine"] == pytest.approx(metrics.mean_cosine(rows), abs=1e-6)
        assert row["drift_norm"] == pytest.approx(metrics.drift_norm(rows), rel=1e-5)
        assert row["mean_norm"] == pytest.approx(metrics.mean_norm(rows), rel=1e-5)
    assert frame["null_q95"].iloc[0] == pytest.approx(float(baseline.isotropic_cosine_quantile(0.95, 32)))


def test_full_stats_give_the_same_mean_cosine_and_add_the_spectral_share(store):
    kwargs = dict(source="prose", n=3, seed=0, max_length=MAX_LENGTH, store=store)
    ref = layerwise.ModelRef("gpt2", "tiny")
    moments = layerwise.measure(ref, lambda: TEXTS, **kwargs)
    full = layerwise.measure(ref, lambda: TEXTS, stats="full", **kwargs)
    assert np.allclose(moments["mean_cosine"], full["mean_cosine"], atol=1e-9)
    assert moments["sigma1_share"].isna().all() and full["sigma1_share"].between(0, 1).all()
    states, keep = _direct_text_states("gpt2")
    assert full["sigma1_share"].iloc[-1] == pytest.approx(metrics.sigma1_share(states[-1][keep]), rel=1e-4)


def test_encoder_decoder_rows_and_embedding_markers(store):
    frame = layerwise.measure(layerwise.ModelRef("t5-base", "tiny"), lambda: TEXTS, source="prose", n=3, seed=0,
                              max_length=MAX_LENGTH, store=store)
    n_blocks = registry.spec("t5-base").tiny["num_layers"]
    assert len(frame) == 2 * (n_blocks + 1)  # encoder embeddings + blocks, then decoder embeddings + blocks
    assert list(frame["part"]) == ["encoder"] * (n_blocks + 1) + ["decoder"] * (n_blocks + 1)
    assert list(frame.loc[frame["is_embedding"], "layer"]) == [0, n_blocks + 1]


def test_cnn_maps_are_flattened_per_image_and_match_metrics(store):
    images = data.load("synthetic-shapes", 5, seed=2, size=32)
    frame = layerwise.measure(layerwise.ModelRef("resnet-50", "tiny"), lambda: images, source="synthetic-shapes",
                              n=5, seed=0, store=store)
    loaded = registry.load("resnet-50", variant="tiny", seed=0)
    pixels = loaded.preprocessor(images, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        states = loaded.model(pixel_values=pixels, output_hidden_states=True).hidden_states
    assert len(frame) == len(states)
    for (_, row), h in zip(frame.sort_values("layer").iterrows(), states):
        flat = h.reshape(h.shape[0], -1)
        assert row["n"] == 5 and row["dim"] == flat.shape[1]
        assert row["mean_cosine"] == pytest.approx(metrics.mean_cosine(flat), abs=1e-6)
        assert row["drift_norm"] == pytest.approx(metrics.drift_norm(flat), rel=1e-5)


def test_first_moments_agree_with_metrics_and_exclude_bad_rows():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 7)) + 0.8
    x[3] = 0.0
    x[7, 2] = np.nan
    mask = rng.random(50) > 0.2
    acc = layerwise.FirstMoments(7)
    acc.update(torch.from_numpy(x[:20]), mask=torch.from_numpy(mask[:20]))
    acc.update(torch.from_numpy(x[20:]), mask=torch.from_numpy(mask[20:]))
    kept = x[mask]
    good = kept[np.isfinite(kept).all(axis=1) & (np.abs(kept).sum(axis=1) > 0)]
    assert acc.n == len(good) and acc.n_excluded == len(kept) - len(good)
    assert acc.mean_cosine == pytest.approx(metrics.mean_cosine(good), abs=1e-12)
    assert acc.drift_norm == pytest.approx(np.linalg.norm(good.mean(axis=0)), rel=1e-12)
    assert acc.mean_norm == pytest.approx(np.linalg.norm(good, axis=1).mean(), rel=1e-12)
    brute = good / np.linalg.norm(good, axis=1, keepdims=True)
    gram = brute @ brute.T
    assert acc.mean_cosine == pytest.approx((gram.sum() - np.trace(gram)) / (len(good) * (len(good) - 1)))


def test_first_moments_interval_resamples_the_examples_it_was_told():
    """Rows fed with their example index (as taps.extract does) give the interval of resampling examples, whatever
    the order and batching of the rows and with masked rows left out; without indices, no interval."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((90, 5)) + 0.5
    example = np.repeat(np.arange(9), 10)
    mask = rng.random(90) > 0.1
    acc = layerwise.FirstMoments(5, seed=2)
    for part in (slice(0, 40), slice(40, 90)):
        acc.update(torch.from_numpy(x[part]), mask=torch.from_numpy(mask[part]), groups=torch.from_numpy(example[part]))
    row = acc.as_dict()
    kept, ids = x[mask], example[mask]
    unit = kept / np.linalg.norm(kept, axis=1, keepdims=True)
    sums = np.stack([unit[ids == e].sum(axis=0) for e in range(9)])
    expected = metrics.grouped_bootstrap_mean_cosine(sums @ sums.T, np.bincount(ids), seed=2,
                                                     **layerwise.BOOTSTRAP)
    assert row["n_examples"] == 9 and row["mean_cosine"] == pytest.approx(expected.estimate, abs=1e-12)
    assert (row["mean_cosine_low"], row["mean_cosine_high"]) == pytest.approx((expected.low, expected.high), abs=1e-6)
    plain = layerwise.FirstMoments(5)
    plain.update(torch.from_numpy(x))
    assert np.isnan(plain.as_dict()["mean_cosine_low"])


def test_extract_gives_each_text_its_own_example(monkeypatch):
    """taps.extract tells the accumulators which text each token comes from: one example per text."""
    loaded = registry.load("bert-base-uncased", variant="tiny")
    from anisotropy.measure import taps

    stats = taps.extract(loaded, TEXTS, batch_size=2, max_length=MAX_LENGTH,
                         stats_factory=layerwise.stats_factory("moments"))
    for acc in stats.values():
        assert acc.as_dict()["n_examples"] == len(TEXTS)
        assert acc.as_dict()["mean_cosine_low"] <= acc.mean_cosine <= acc.as_dict()["mean_cosine_high"]


def test_store_reuses_rows_and_recomputes_only_what_a_parameter_changes(store, monkeypatch):
    ref = layerwise.ModelRef("bert-base-uncased", "tiny")
    kwargs = dict(source="prose", n=3, seed=0, max_length=MAX_LENGTH, store=store)
    first = layerwise.measure(ref, lambda: TEXTS, **kwargs)

    def refuse(*args, **kw):
        raise AssertionError("the stored rows should have been reused")

    monkeypatch.setattr(registry, "load", refuse)
    again = layerwise.measure(ref, lambda: TEXTS, **kwargs)
    pd.testing.assert_frame_equal(first, again, check_dtype=False)
    with pytest.raises(AssertionError, match="reused"):
        layerwise.measure(ref, lambda: TEXTS, **{**kwargs, "max_length": MAX_LENGTH - 4})


def test_measure_models_loads_data_once_and_reports_unavailable_models(store, monkeypatch):
    calls = []
    original = data.load

    def counting(source, n, seed=0, **options):
        calls.append((source, n, seed, options))
        return original(source, n, seed, **options)

    monkeypatch.setattr(data, "load", counting)
    refs = layerwise.model_refs(["bert-base-uncased", "character-bert"], "tiny", pretrained=[])
    frame, skipped = layerwise.measure_models(refs, source="prose", n=3, seed=1, max_length=MAX_LENGTH, store=store)
    assert calls == [("prose", 3, 1, {})]
    assert set(frame["model"]) == {"bert-base-uncased"}
    assert [s.ref.name for s in skipped] == ["character-bert"] and "remote code" in skipped[0].reason
    table = layerwise.skipped_table(skipped)
    assert list(table["model"]) == ["character-bert"]


@pytest.fixture
def load_calls(monkeypatch):
    """``data.load`` as it is, recording each call's (source, n, options)."""
    calls = []
    original = data.load
    monkeypatch.setattr(data, "load", lambda source, n, seed=0, **options: calls.append((source, n, options))
                        or original(source, n, seed, **options))
    return calls


def test_per_model_examples_give_a_model_its_own_sample(store, load_calls):
    calls = load_calls
    refs = layerwise.model_refs(["bert-base-uncased", "gpt2"], "tiny", pretrained=[])
    frame, _ = layerwise.measure_models(refs, source="prose", n=3, seed=1, max_length=MAX_LENGTH, store=store,
                                        per_model={"gpt2": {"n": 5, "max_length": MAX_LENGTH - 4}})
    assert calls == [("prose", 3, {}), ("prose", 5, {})]
    examples = frame.groupby("model")["n_examples"].max()
    assert examples["bert-base-uncased"] == 3 and examples["gpt2"] == 5
    # the same as measuring gpt2 alone with those arguments: same rows, read back from the store
    alone, _ = layerwise.measure_models(refs[1:], source="prose", n=5, seed=1, max_length=MAX_LENGTH - 4, store=store)
    assert len(calls) == 2
    pd.testing.assert_frame_equal(alone.reset_index(drop=True),
                                  frame[frame["model"] == "gpt2"].reset_index(drop=True))
    short = layerwise.short_layers(frame, minimum=int(frame["n"].max()) + 1)
    assert set(short["label"]) == set(frame["label"])
    assert (short["per_example"] == short["fewest"] / short["examples"]).all() and set(short["modality"]) == {"text"}
    with pytest.raises(ValueError, match="per_model"):
        layerwise.measure_models(refs, source="prose", n=3, store=store, per_model={"gpt2": {"seed": 2}})


def test_per_model_source_gives_a_model_another_language(store, load_calls):
    # RXNMapper's ALBERT reads SMILES on the character-level page, the other models prose: its rows are those of
    # measuring it alone on that source (read back from the store), and its data sample is the SMILES one
    calls = load_calls
    refs = layerwise.model_refs(["bert-base-uncased", "gpt2"], "tiny", pretrained=[])
    frame, _ = layerwise.measure_models(refs, source="prose", n=3, seed=1, max_length=MAX_LENGTH, store=store,
                                        per_model={"gpt2": {"source": "reaction-smiles", "n": 4}})
    assert calls == [("prose", 3, {}), ("reaction-smiles", 4, {})]
    alone, _ = layerwise.measure_models(refs[1:], source="reaction-smiles", n=4, seed=1, max_length=MAX_LENGTH,
                                        store=store)
    assert len(calls) == 2
    pd.testing.assert_frame_equal(alone.reset_index(drop=True),
                                  frame[frame["model"] == "gpt2"].reset_index(drop=True))


def _planted_frame():
    layers = np.arange(9)
    drift = np.exp(layers / 3.0)
    rows = []
    # "monotone": mean cosine a strictly increasing, non-linear function of the drift norm.
    for layer, d in zip(layers, drift):
        rows.append(dict(label="monotone", model="m", display="M", variant="tiny", family="speech",
                         modality="speech", layer=layer, drift_norm=d, mean_cosine=np.sqrt(d) / 10))
    noise = np.random.default_rng(3).permutation(layers).astype(float)
    for layer, d, c in zip(layers, drift, noise):
        rows.append(dict(label="shuffled", model="s", display="S", variant="tiny", family="token-level",
                         modality="text", layer=layer, drift_norm=d, mean_cosine=c))
    return pd.DataFrame(rows)


def test_drift_correlation_returns_scipy_values_for_a_planted_relation():
    frame = _planted_frame()
    corr = layerwise.drift_correlations(frame).set_index("label")
    assert list(corr.index) == ["shuffled", "monotone"]  # families in the paper's order: text before speech
    mono = corr.loc["monotone"]
    # nine layers: Spearman's p is exact, the 2 perfect orderings of the 9! (scipy's t approximation would say ~0)
    assert mono["spearman"] == pytest.approx(1.0) and mono["spearman_p"] == pytest.approx(2 / math.factorial(9))
    sub = frame[frame["label"] == "monotone"]
    r, p = stats.pearsonr(sub["mean_cosine"], sub["drift_norm"])
    assert (mono["pearson"], mono["pearson_p"]) == pytest.approx((r, p))
    assert mono["n_layers"] == 9
    sub = frame[frame["label"] == "shuffled"]
    rho = stats.spearmanr(sub["mean_cosine"], sub["drift_norm"]).statistic
    # the exact p by the textbook formula rho = 1 - 6 sum(d^2) / (n (n^2 - 1)) over all 9! orderings (no ties here)
    n, ranks = len(sub), stats.rankdata(sub["drift_norm"])
    orderings = np.array(list(itertools.permutations(range(n))), dtype=float)
    null = 1 - 6 * ((orderings - (ranks - 1)) ** 2).sum(axis=1) / (n * (n * n - 1))
    p = np.mean(np.abs(null) >= abs(rho) - 1e-12)
    assert (corr.loc["shuffled", "spearman"], corr.loc["shuffled", "spearman_p"]) == pytest.approx((rho, p))


def test_peaks_and_share_above_null():
    frame = pd.DataFrame(dict(label=["a"] * 3 + ["b"] * 2, model=["a"] * 3 + ["b"] * 2, variant="tiny",
                              family="cnn", layer=[0, 1, 2, 0, 1], relative_depth=[0, .5, 1, 0, 1],
                              dim=[768] * 3 + [100_000] * 2, mean_cosine=[0.01, 0.5, 0.3, 0.2, 0.1]))
    frame["null_q95"] = layerwise.null_q95(frame["dim"])
    peaks = layerwise.peaks(frame).set_index("label")
    assert peaks.loc["a", "layer"] == 1 and peaks.loc["a", "mean_cosine"] == 0.5
    q768 = float(baseline.isotropic_cosine_quantile(0.95, 768))
    assert peaks.loc["a", "above_null"] == pytest.approx(0.5 / q768)
    share = layerwise.share_above_null(frame)
    assert share["a"] == pytest.approx(2 / 3) and share["b"] == 1.0


def test_a_model_with_an_empty_layer_is_skipped_and_the_reason_is_stored(store, monkeypatch):
    from anisotropy.measure import taps

    calls = []

    extract = taps.extract

    def empty_layer(loaded, *args, **kwargs):
        if loaded.spec.name != "resnet-50":
            return extract(loaded, *args, **kwargs)
        calls.append(1)
        raise taps.NoVectorKept("resnet-50: no vector was kept in layers [3, 4] of 4 examples: 8 vectors were zero")

    monkeypatch.setattr(taps, "extract", empty_layer)
    refs = [layerwise.ModelRef("resnet-50", "tiny"), layerwise.ModelRef("vit-base", "tiny")]
    for _ in range(2):
        frame, skipped = layerwise.measure_models(refs, source="synthetic-shapes", n=4, store=store)
        assert set(frame["model"]) == {"vit-base"} and "no vector was kept in layers [3, 4]" in skipped[0].reason
    assert calls == [1]  # the second build read the stored reason instead of loading the model again
    # With no other model, the chapter stops in one line instead of going on with an empty frame.
    with pytest.raises(hub.Unavailable, match=r"none of the 1 models could be measured here; the first, resnet-50: "
                                              r"resnet-50: no vector was kept"):
        layerwise.measure_models(refs[:1], source="synthetic-shapes", n=4, store=store)
    monkeypatch.setattr(taps, "extract", lambda *a, **k: (_ for _ in ()).throw(ValueError("another problem")))
    with pytest.raises(ValueError, match="another problem"):
        layerwise.measure_models(refs, source="synthetic-shapes", n=5, store=store)
