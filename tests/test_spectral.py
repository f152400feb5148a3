"""Paper 2's batched per-layer protocol (anisotropy.experiments.spectral) against direct computations and planted data."""

import numpy as np
import pandas as pd
import pytest
import torch

from anisotropy.measure import batches, metrics
from anisotropy.data import sources, prose
from anisotropy.models import registry
from anisotropy import results
from anisotropy.experiments import spectral
from anisotropy.measure import final_norm, planted

BATCH = 96  # tiny models give few vectors; the protocol is the same as with the paper's 4096
N_BATCHES = 3


@pytest.fixture(scope="module")
def texts():
    return prose.text_samples(48, seed=3)


def _direct_rows(loaded, texts, chunk=8, max_length=128):
    """Content-token hidden states per layer, computed without taps, in the same stream order (chunks of texts,
    row-major over (text, position)), with padding and special tokens removed."""
    tok, model = loaded.preprocessor, loaded.model
    per_layer: dict[int, list] = {}
    with torch.inference_mode():
        for start in range(0, len(texts), chunk):
            enc = tok(texts[start:start + chunk], padding=True, truncation=True, max_length=max_length,
                      return_tensors="pt", return_special_tokens_mask=True, padding_side="right")
            keep = (enc["attention_mask"].bool() & ~enc["special_tokens_mask"].bool()).reshape(-1)
            inputs = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            if model.config.model_type == "gpt2":
                inputs.pop("token_type_ids", None)
            hs = model(**inputs, output_hidden_states=True).hidden_states
            for i, h in enumerate(hs):
                per_layer.setdefault(i, []).append(h.reshape(-1, h.shape[-1])[keep].float())
    return {i: torch.cat(v).numpy() for i, v in per_layer.items()}


@pytest.mark.parametrize("name", ["bert-base-uncased", "gpt2"])
def test_per_layer_values_equal_direct_metrics_on_the_same_hidden_states(name, texts):
    loaded = registry.load(name, variant="tiny")
    names = ("sigma1_share", "twonn_dimension", "mean_cosine")
    frame = spectral.measure(loaded, texts, batch_size=BATCH, n_batches=N_BATCHES, metric_names=names,
                             shuffle_seed=None)
    shuffled = spectral.measure(loaded, texts, batch_size=BATCH, n_batches=N_BATCHES, metric_names=names,
                                shuffle_seed=5)
    direct = _direct_rows(loaded, texts)
    assert sorted(frame["layer"].unique()) == sorted(direct)
    for layer, rows in direct.items():
        assert rows.shape[0] >= BATCH * N_BATCHES  # the corpus is large enough for every batch
        got = frame[frame["layer"] == layer].sort_values("batch")
        assert list(got["batch"]) == list(range(N_BATCHES))
        # the whole stream of the layer's vectors shuffled, then its first batches (as Paper 2, Section 2.2)
        pool = rows[batches.shuffle_order(len(rows), 5)[: BATCH * N_BATCHES]]
        got_shuffled = shuffled[shuffled["layer"] == layer].sort_values("batch")
        for metric in names:
            want = metrics.batched(batches.BATCH_METRICS[metric], rows[: BATCH * N_BATCHES], BATCH)
            np.testing.assert_allclose(got[metric], want.values, rtol=2e-4, atol=1e-6, err_msg=f"{name} {metric}")
            # Shuffled before batching (Paper 2, Section 2.2): every text's vectors, permuted, then cut into batches.
            want = metrics.batched(batches.BATCH_METRICS[metric], pool, BATCH)
            np.testing.assert_allclose(got_shuffled[metric], want.values, rtol=2e-4, atol=1e-6,
                                       err_msg=f"{name} {metric} shuffled")
    summ = spectral.summary(frame)
    assert len(summ) == len(direct) and (summ["n_batches"] == N_BATCHES).all()
    assert np.allclose(summ.sort_values("layer")["relative_depth"], np.linspace(0, 1, len(direct)))


def test_final_norm_split_gives_the_states_before_and_after_the_final_layernorm(texts):
    loaded = registry.load("gpt2", variant="tiny")
    plain = spectral.measure(loaded, texts, batch_size=BATCH, n_batches=2)
    split = spectral.measure(loaded, texts, batch_size=BATCH, n_batches=2, split_final_norm=True)
    last = plain["layer"].max()
    after = split[(split["layer"] == last) & split["after_final_norm"]].reset_index(drop=True)
    before = split[(split["layer"] == last) & ~split["after_final_norm"]].reset_index(drop=True)
    usual = plain[plain["layer"] == last].reset_index(drop=True)
    assert usual["after_final_norm"].all()  # GPT-2's last hidden state is after ln_f
    for metric in batches.DEFAULT_METRICS:
        np.testing.assert_allclose(after[metric], usual[metric], rtol=1e-5)
    # Before the norm: the direct hidden states with ln_f removed.
    ln_f = loaded.model.ln_f
    loaded.model.ln_f = torch.nn.Identity()
    try:
        rows = _direct_rows(loaded, texts)[last]
    finally:
        loaded.model.ln_f = ln_f
    want = metrics.batched(metrics.sigma1_share, rows[batches.shuffle_order(len(rows), 0)[: 2 * BATCH]], BATCH)
    np.testing.assert_allclose(before["sigma1_share"], want.values, rtol=2e-4)
    assert isinstance(loaded.model.ln_f, torch.nn.LayerNorm)  # restored


def _spiked(rng, n, d, share):
    """Gaussian rows whose covariance is diag(s^2, 1, ..., 1) with s^2 / (s^2 + d - 1) = share, plus a common mean
    that the centred share must ignore."""
    return planted.planted_cloud(n, d, drift=2.0, spike_share=share, seed=int(rng.integers(1 << 30)))


def test_batched_layer_matches_metrics_batched_and_recovers_planted_values():
    rng = np.random.default_rng(0)
    d, n = 16, 4096
    shares = [0.2, 0.4, 0.6]
    dims = [2, 3, 4]
    # Stream 1: batch k has a planted top-direction share shares[k]; a 4th batch lies beyond the cap of 3.
    spikes = np.concatenate([_spiked(rng, n, d, s) for s in shares + shares[:1]]).astype(np.float32)
    # Stream 2: batch k is uniform on a dims[k]-dimensional cube inside R^d (TwoNN should return dims[k]).
    cubes = np.concatenate([np.pad(rng.uniform(size=(n, k)), ((0, 0), (0, d - k))) for k in dims]).astype(np.float32)

    acc = batches.BatchedLayer(d, batch_size=n, n_batches=3, metric_names=("sigma1_share", "mean_cosine"))
    pos = 0
    while pos < len(spikes):  # ragged chunks, each followed by a NaN row, a zero row and a masked-out valid row
        size = int(rng.integers(1, 1500))
        chunk = spikes[pos:pos + size]
        junk = np.stack([np.full(d, np.nan), np.zeros(d), np.full(d, 7.0)]).astype(np.float32)
        mask = np.r_[np.ones(len(chunk), dtype=bool), True, True, False]
        acc.update(np.concatenate([chunk, junk]), mask=mask)
        pos += size
    assert acc.full and acc.batches_done == 3 and acc.n == len(spikes)
    want = metrics.batched(metrics.sigma1_share, spikes[: 3 * n], n)
    np.testing.assert_allclose(acc.values["sigma1_share"], want.values, rtol=1e-9)
    # The planted shares come back, and so do their mean and standard deviation over batches.
    np.testing.assert_allclose(acc.values["sigma1_share"], shares, atol=0.03)
    rows = pd.DataFrame(acc.rows())
    assert rows["sigma1_share"].mean() == pytest.approx(np.mean(shares), abs=0.02)
    assert rows["sigma1_share"].std(ddof=0) == pytest.approx(np.std(shares), abs=0.02)

    ids = batches.BatchedLayer(d, batch_size=n, n_batches=3, metric_names=("twonn_dimension",))
    for start in range(0, len(cubes), 1000):
        ids.update(torch.from_numpy(cubes[start:start + 1000]))
    np.testing.assert_allclose(ids.values["twonn_dimension"], dims, rtol=0.12)
    np.testing.assert_allclose(ids.values["twonn_dimension"],
                               metrics.batched(metrics.twonn_dimension, cubes, n).values, rtol=1e-9)


def test_shuffling_before_batching_mixes_texts_that_stream_order_keeps_together():
    """A stream of "texts" of 64 tokens each, every token a near-copy of its text's first one: in stream order a
    batch holds a few texts (TwoNN sees near-duplicates, sigma1 share of a few clusters); shuffled, every batch
    mixes all texts, and batch k holds the same tokens in every layer (same seed, same pool)."""
    rng = np.random.default_rng(1)
    d, n, k = 8, 256, 3
    texts_ = np.repeat(rng.normal(size=(3 * n // 64, d)), 64, axis=0) + 1e-3 * rng.normal(size=(3 * n, d))
    plain = batches.BatchedLayer(d, batch_size=n, n_batches=k, metric_names=("mean_cosine",))
    mixed = batches.BatchedLayer(d, batch_size=n, n_batches=k, metric_names=("mean_cosine",), shuffle_seed=0)
    again = batches.BatchedLayer(d, batch_size=n, n_batches=k, metric_names=("mean_cosine",), shuffle_seed=0)
    for start in range(0, len(texts_), 100):
        for acc in (plain, mixed, again):
            acc.update(torch.from_numpy(texts_[start:start + 100].astype(np.float32)))
    assert not mixed.full  # any later row could still be drawn first: the pool waits for the end of the stream
    assert mixed.batches_done == k == again.batches_done and mixed.full and again.values == mixed.values
    pool = texts_.astype(np.float32)[batches.shuffle_order(3 * n, 0)]
    np.testing.assert_allclose(mixed.values["mean_cosine"],
                               metrics.batched(metrics.mean_cosine, pool, n).values, rtol=1e-6)
    # shuffled batches are alike (each mixes every text); stream-order batches differ from one another
    assert np.ptp(mixed.values["mean_cosine"]) < np.ptp(plain.values["mean_cosine"])
    # a stream that ends early: the rows there are shuffled and cut into as many full batches as they make
    short = batches.BatchedLayer(d, batch_size=n, n_batches=k, metric_names=("mean_cosine",), shuffle_seed=0)
    short.update(torch.from_numpy(texts_[: n + 10].astype(np.float32)))
    assert not short.full and short.batches_done == 1


@pytest.mark.parametrize("trim_at", [1.01, batches.POOL_TRIM_AT, 2.0, 100.0])
def test_the_whole_stream_is_shuffled_before_batching_not_only_its_first_vectors(trim_at, monkeypatch):
    """Paper 2 shuffles all the vectors, then batches: the first batch may hold the last texts' tokens. A stream of
    8 pools' worth of rows whose norm is their text's position: shuffling only the first rows would give batches of
    the first texts alone (norm 1). Where the pool is trimmed (after every chunk, ..., never) changes nothing."""
    monkeypatch.setattr(batches, "POOL_TRIM_AT", trim_at)
    rng = np.random.default_rng(2)
    d, n, k = 6, 64, 3
    position = np.repeat(np.arange(8 * n * k // 32), 32).astype(float)  # 32 tokens a text
    stream = rng.normal(size=(len(position), d))
    stream = (stream / np.linalg.norm(stream, axis=1, keepdims=True) * (1 + position[:, None])).astype(np.float32)
    acc = batches.BatchedLayer(d, batch_size=n, n_batches=k, metric_names=("mean_norm",), shuffle_seed=7)
    start = 0
    while start < len(stream):  # ragged chunks: the keys are drawn in stream order whatever the chunks
        size = int(rng.integers(1, 200))
        acc.update(torch.from_numpy(stream[start:start + size]))
        start += size
    assert acc.batches_done == k and acc.n == len(stream)
    want = metrics.batched(metrics.mean_norm, stream[batches.shuffle_order(len(stream), 7)[: n * k]], n)
    np.testing.assert_allclose(acc.values["mean_norm"], want.values, rtol=1e-6)
    # every batch draws from the whole stream: its mean position is near the stream's, far beyond the first texts'
    first_pool = 1 + position[: n * k].mean()
    assert min(acc.values["mean_norm"]) > 3 * first_pool
    assert abs(np.mean(acc.values["mean_norm"]) / (1 + position.mean()) - 1) < 0.2


def test_rows_wider_than_the_scatter_take_the_gram_matrix_and_give_the_same_share(monkeypatch):
    """Past ``SCATTER_MAX_DIM`` (a CNN's flattened map), fewer rows than columns: the n x n Gram matrix of the centred
    rows has the scatter's non-zero eigenvalues, so the share is the same (up to metrics' float32 products), and a
    rank-one cloud 20,000 wide still gives 1."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 64, generator=g) * torch.linspace(0.1, 3.0, 64)
    narrow = batches.sigma1_share(x)
    assert narrow == metrics.sigma1_share(x)  # at or below the threshold: metrics' own path
    monkeypatch.setattr(batches, "SCATTER_MAX_DIM", 16)
    np.testing.assert_allclose(batches.sigma1_share(x), narrow, rtol=1e-7)
    centred = x.double() - x.double().mean(0)
    s = torch.linalg.svdvals(centred)
    np.testing.assert_allclose(batches.sigma1_share(x), float(s[0] ** 2 / (s ** 2).sum()), rtol=1e-12)
    monkeypatch.undo()
    line = torch.randn(10, 1, generator=g) * torch.randn(1, 20_000, generator=g)
    assert 20_000 > batches.SCATTER_MAX_DIM and abs(batches.sigma1_share(line) - 1) < 1e-12


def test_batched_layer_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown metric"):
        batches.BatchedLayer(4, metric_names=("anisotropy",))
    acc = batches.BatchedLayer(4, batch_size=8, n_batches=1)
    with pytest.raises(ValueError, match="dimension"):
        acc.update(np.ones((3, 5)))


def test_measure_says_when_a_layer_gets_no_full_batch(texts):
    loaded = registry.load("gpt2", variant="tiny")
    with pytest.raises(ValueError, match="fewer than batch_size"):
        spectral.measure(loaded, texts[:2], batch_size=4096, n_batches=1)


def test_identical_checkpoints_are_detected(tmp_path, texts, monkeypatch):
    loaded = registry.load("gpt2", variant="tiny")
    folders = {}
    for name in ("a", "b", "c"):
        folders[name] = tmp_path / name
        if name == "c":  # one parameter changed
            with torch.no_grad():
                loaded.model.ln_f.bias[0] += 1e-3
        loaded.model.save_pretrained(folders[name])
        loaded.preprocessor.save_pretrained(folders[name])
    fps = {k: spectral.weights_fingerprint(registry.load(v).model) for k, v in folders.items()}
    assert fps["a"] == fps["b"] != fps["c"]

    def refuse(model):
        raise AssertionError("the weights were hashed on the host where their files give a digest")
    monkeypatch.setattr(spectral, "weights_fingerprint", refuse)  # a folder's files are hashed instead
    store = results.Store(tmp_path / "results")
    entries = [{"model": str(folders[k]), "step": s, "label": "tiny"} for k, s in (("a", 0), ("b", 10), ("c", 20))]
    frame, skipped = spectral.series(entries, n_texts=48, batch_size=64, n_batches=1, store=store)
    assert skipped == []
    flags = frame.groupby("step")["same_weights_as"].first()
    assert np.isnan(flags[0]) and flags[10] == 0 and np.isnan(flags[20])
    # Measured through the store: a second call reads the stored frames.
    again, _ = spectral.series(entries, n_texts=48, batch_size=64, n_batches=1, store=store)
    pd.testing.assert_frame_equal(frame, again)
    kwargs = dict(n_texts=48, batch_size=64, n_batches=1, store=store)
    assert all(spectral._entry_stored(e, kwargs) for e in entries)
    assert not any(spectral._entry_stored(e, {**kwargs, "n_batches": 2}) for e in entries)
    assert not spectral._entry_stored({**entries[0], "max_length": 64}, kwargs)
    # fanned out, stored entries are read here, without starting a worker process to read them
    from anisotropy import executor

    for name in (executor.SCHEDULER_ENV, executor.SLOTS_ENV, executor.WORKERS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(executor, "cores", lambda: 2)

    def no_cluster(*args, **kwargs):
        raise RuntimeError("a cluster was started")

    monkeypatch.setattr(executor, "_local_client", no_cluster)
    fanned, _ = spectral.series(entries, fan_out="auto", **kwargs)
    pd.testing.assert_frame_equal(frame, fanned)
    with pytest.raises(RuntimeError, match="a cluster was started"):  # entries not stored go to the workers
        spectral.series(entries, fan_out="auto", **{**kwargs, "n_batches": 2})
    # Identical weights give identical measurements.
    s = spectral.summary(frame)
    np.testing.assert_allclose(s[s["step"] == 0]["sigma1_share"].to_numpy(),
                               s[s["step"] == 10]["sigma1_share"].to_numpy())


def test_hub_checkpoints_carry_the_step_of_each_revision():
    """Bloom-560m's branches, from its model card's list of intermediate checkpoints; a branch that names no step
    (asked of a size whose list is not exhaustive) is an error, not a checkpoint at an unknown step."""
    entries, notes = spectral.hub_checkpoints("bloom-560m")
    assert [e["step"] for e in entries] == [1000, 10000, 100000, 200000, 300000, 400000, 500000, 600000] and not notes
    with pytest.raises(ValueError, match="main"):
        spectral.hub_checkpoints("bloom-3b", ["main"])


def test_isotropic_sigma1_share_matches_simulation():
    rng = np.random.default_rng(1)
    for d in (32, 128):
        sims = [metrics.sigma1_share(rng.normal(size=(4096, d))) for _ in range(3)]
        assert np.mean(sims) == pytest.approx(planted.isotropic_sigma1_share(d, 4096), rel=0.06)


def test_planted_clouds_separate_the_two_measures():
    # A drift of norm r * sqrt(d) on unit-variance noise: mean cosine r^2 / (1 + r^2), sigma1 share isotropic.
    x = planted.planted_cloud(4096, 64, drift=1.5, seed=0)
    assert metrics.mean_cosine(x) == pytest.approx(1.5**2 / (1 + 1.5**2), abs=0.01)
    assert metrics.sigma1_share(x) == pytest.approx(planted.isotropic_sigma1_share(64), rel=0.1)
    # A zero-mean spike: sigma1 share as planted, mean cosine ~ 0.
    y = planted.planted_cloud(4096, 64, spike_share=0.5, seed=1)
    assert metrics.sigma1_share(y) == pytest.approx(0.5, abs=0.02)
    assert abs(metrics.mean_cosine(y)) < 0.01


def test_summary_and_layer_average_on_a_planted_frame():
    # Two layers x three batches of one checkpoint: the layer average is taken per batch, then over batches.
    values = {0: [1.0, 2.0, 3.0], 1: [5.0, 6.0, 10.0]}
    frame = pd.DataFrame([{"label": "run", "step": 7, "layer": layer, "relative_depth": float(layer), "batch": b,
                           "n_vectors": 4096, "twonn_dimension": v} for layer, vs in values.items()
                          for b, v in enumerate(vs)])
    s = spectral.summary(frame).set_index("layer")
    assert s.loc[1, "twonn_dimension"] == pytest.approx(7.0)
    assert s.loc[1, "twonn_dimension_std"] == pytest.approx(np.std([5, 6, 10]))
    avg = spectral.layer_average(frame).iloc[0]
    assert avg["twonn_dimension"] == pytest.approx(np.mean([3, 4, 6.5]))
    assert avg["twonn_dimension_std"] == pytest.approx(np.std([3, 4, 6.5]))
    assert avg["n_batches"] == 3 and avg["step"] == 7


@pytest.mark.parametrize("name", ["gpt2", "opt-125m", "opt-350m", "pythia-70m", "bloom-560m", "gpt-j-6b",
                                  "llama-2-7b", "falcon-7b", "bert-base-uncased", "roberta-base", "albert-base-v2"])
def test_final_norm_of_every_paper2_architecture(name, texts):
    """Decoders with a final norm: the split's 'after' state is the usual last hidden state; encoders and the post-LN
    OPT-350m have none, and the split then changes nothing."""
    loaded = registry.load(name, variant="tiny")
    found = final_norm.find_final_norm(loaded.model)
    assert (found is not None) == (loaded.spec.stack == "decoder" and name != "opt-350m")
    plain = spectral.measure(loaded, texts[:24], batch_size=48, n_batches=1, metric_names=("sigma1_share",))
    split = spectral.measure(loaded, texts[:24], batch_size=48, n_batches=1, metric_names=("sigma1_share",),
                             split_final_norm=True)
    last = plain["layer"].max()
    assert split["layer"].max() == last and len(split) == len(plain) + (found is not None)
    usual = plain[plain["layer"] == last]["sigma1_share"].to_numpy()
    after = split[(split["layer"] == last) & (split["after_final_norm"] | (found is None))]["sigma1_share"]
    np.testing.assert_allclose(after.to_numpy(), usual, rtol=1e-4)
    assert plain["after_final_norm"].sum() == (found is not None)


def test_by_length_within_keeps_the_texts_and_groups_lengths():
    texts = prose.text_samples(100, seed=0)
    out = spectral.by_length_within(texts, 16)
    assert sorted(out) == sorted(texts)
    for start in range(0, 100, 16):
        window = out[start:start + 16]
        assert [len(t) for t in window] == sorted(len(t) for t in window)
        assert sorted(window) == sorted(texts[start:start + 16])


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_one_stack_of_whisper_is_measured_on_its_own_vectors(part):
    """part= measures the encoder on audio frames or the decoder on transcript tokens, numbered from 0 within the
    stack; each layer's value equals the metric on the first batch of that stack's valid vectors, all of them
    shuffled first (``shuffle_seed`` 0, as Paper 2 does)."""
    from anisotropy.measure import taps

    loaded = registry.load("whisper-base", "tiny", seed=0)
    clips = sources.load("synthetic-speech", 3, seed=0, seconds=(0.5, 1.0), transcripts=True)
    batch = 8 if part == "decoder" else 40
    frame = spectral.measure(loaded, clips, batch_size=batch, n_batches=1, max_length=64, extraction_batch=3,
                             part=part)
    assert sorted(frame["layer"].unique()) == [0, 1, 2]  # embeddings + 2 blocks of the tiny model
    assert frame["relative_depth"].tolist() == [0.0, 0.5, 1.0]
    rows = {}

    def keep(dim):
        rows[len(rows)] = metrics_rows = []

        class Collect:
            n = 1

            def update(self, x, mask=None):
                x = torch.as_tensor(x).reshape(-1, x.shape[-1])
                metrics_rows.append(x if mask is None else x[torch.as_tensor(mask).reshape(-1) != 0])
                return self

        return Collect()

    result = taps.extract(loaded, clips, batch_size=3, max_length=64, part=part, stats_factory=keep)
    for i, layer in enumerate(sorted(result)):
        stream = torch.cat(rows[i])
        vectors = stream[torch.from_numpy(batches.shuffle_order(len(stream), 0)[:batch])]
        value = frame.loc[frame["layer"] == i, "sigma1_share"].item()
        assert value == pytest.approx(metrics.sigma1_share(vectors), rel=1e-5)


def test_both_stacks_of_whisper_come_from_one_pass_each_as_measured_alone(tmp_path, monkeypatch):
    """``profile`` of one stack of Whisper measures both stacks in one pass and stores the other under its own key: the
    call for the other stack reads it (no second pass), and each frame equals its stack measured alone (``measure``
    with that ``part``). Without shuffling, a stack is read only until its batches are full, so nothing is shared."""
    from anisotropy.measure import taps

    options = {"seconds": [0.5, 1.0], "transcripts": True}
    kwargs = dict(variant="tiny", source="synthetic-speech", n_texts=3, batch_size=8, n_batches=1, max_length=64,
                  extraction_batch=3, data_options=options, store=results.Store(tmp_path / "results"))
    encoder = spectral.profile("whisper-base", part="encoder", **kwargs)
    assert spectral._entry_stored({"model": "whisper-base", "part": "decoder"}, kwargs)

    def no_pass(*args, **kw):
        raise AssertionError("a second pass through the model")

    with monkeypatch.context() as patched:
        patched.setattr(taps, "extract", no_pass)
        decoder = spectral.profile("whisper-base", part="decoder", **kwargs)
    loaded = registry.load("whisper-base", "tiny", seed=0)
    clips = sources.load("synthetic-speech", 3, seed=0, **options)
    for part, frame in (("encoder", encoder), ("decoder", decoder)):
        alone = spectral.measure(loaded, clips, batch_size=8, n_batches=1, max_length=64, extraction_batch=3,
                                 part=part, shuffle_seed=0)
        assert frame["n_layers"].iloc[0] == 3  # embeddings + the tiny model's 2 blocks, in each stack
        pd.testing.assert_frame_equal(frame[list(alone.columns)], alone, check_exact=True, obj=part)
    assert not encoder[["sigma1_share"]].equals(decoder[["sigma1_share"]])
    spectral.profile("whisper-base", part="encoder", shuffle=False, **kwargs)
    assert not spectral._entry_stored({"model": "whisper-base", "part": "decoder"}, {**kwargs, "shuffle": False})
