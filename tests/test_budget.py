"""The Colab budget (``anisotropy.pages.budget``): its host-memory formulas against the bytes the measuring code really
allocates at small sizes, the training a chapter does counted in its time, hf-xet's chunk cache on disk, and models of
unknown size shown as unknown (issue 28, item 7)."""

import tracemalloc

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from anisotropy.measure import batches
from anisotropy.pages import budget
from anisotropy.experiments import layerwise
from anisotropy import profiles

GIB = 2**30


def peak_bytes(fn) -> int:
    """The most bytes ``fn`` held at once: torch's CPU allocations (every allocation and free the profiler records,
    summed in time order) plus the peak of Python and numpy allocations (tracemalloc)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        tracemalloc.start()
        try:
            fn()
            traced = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    return int(np.cumsum([b for _, b in events]).max()) + traced


def feed_pools(states, width, batch, n_batches, stream, chunk, metric_names):
    """What ``experiments.spectral.measure`` does with ``measure.taps.extract``'s states, on random rows: one shuffled ``BatchedLayer``
    per state, each forward batch's rows given to every state in turn, then the batches measured."""
    layers = [batches.BatchedLayer(width, batch, n_batches, metric_names, shuffle_seed=0) for _ in range(states)]
    g = torch.Generator().manual_seed(0)
    fed = 0
    while fed < stream:
        rows = torch.randn(min(chunk, stream - fed), width, generator=g)
        for layer in layers:
            layer.update(rows)
        fed += rows.shape[0]
        del rows
    assert all(len(layer.rows()) == n_batches for layer in layers)


@pytest.mark.parametrize("stream", [3000, 1200])  # trimmed while streaming (> 1.25 x pool), and held whole (below)
def test_pool_formula_matches_the_pools_allocated(stream):
    states, width, batch, n_batches, chunk = 4, 256, 512, 2, 300
    measured = peak_bytes(lambda: feed_pools(states, width, batch, n_batches, stream, chunk, ("mean_norm",)))
    estimated = budget.pool_bytes(states, width, batch * n_batches, stream, chunk)
    assert 0.9 * estimated <= measured <= 1.1 * estimated + 2**20, (measured, estimated)
    # With Paper 2's metrics (sigma1 share, TwoNN...) the per-batch work stays within metric_bytes.
    measured = peak_bytes(lambda: feed_pools(states, width, batch, n_batches, stream, chunk,
                                             ("sigma1_share", "twonn_dimension", "mean_cosine")))
    bound = budget.pool_bytes(states, width, batch * n_batches, stream, chunk, budget.metric_bytes(batch, width))
    assert 0.9 * estimated <= measured <= 1.1 * bound + 2**20, (measured, bound)


@pytest.mark.parametrize("device_path", [False, True], ids=["cpu", "device"])
@pytest.mark.parametrize("batch, width", [(512, 256), (1024, 256), (128, 768)])
def test_metric_bytes_bound_the_metrics(batch, width, device_path):
    # The device path (forced on the CPU here, where the profiler sees its allocations) holds what it would hold on a
    # GPU, which ``_gpu_gib`` counts with the same formula.
    import contextlib

    from anisotropy.measure import metrics

    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(0))
    with metrics.on_device(torch.device("cpu")) if device_path else contextlib.nullcontext():
        measured = max(peak_bytes(lambda: batches.BATCH_METRICS[name](x)) for name in batches.BATCH_METRICS)
    assert measured <= budget.metric_bytes(batch, width), (measured, budget.metric_bytes(batch, width))


def test_per_example_formula_matches_the_sums_allocated():
    widths, n, per_batch = [3000, 6000, 1500], 200, 4

    def run():
        acc = [layerwise.FirstMoments(w) for w in widths]
        g = torch.Generator().manual_seed(0)
        for start in range(0, n, per_batch):  # one flattened map per image, as taps gives a CNN's stages
            for a, w in zip(acc, widths):
                a.update(torch.randn(per_batch, w, generator=g), groups=torch.arange(start, start + per_batch))
        assert all(a.as_dict()["n_examples"] == n for a in acc)  # the bootstrap interval of every state

    measured = peak_bytes(run)
    estimated = budget.per_example_bytes(n, widths)
    assert 0.85 * estimated <= measured <= 1.15 * estimated + 2**20, (measured, estimated)


def test_budget_reads_the_measuring_modules_own_constants(monkeypatch):
    # No copies: the bootstrap's resamples are measure.metrics' (what layerwise runs), the pool's trimming point is
    # measure.batches' (what BatchedLayer trims at); changing the owner's value changes the estimate.
    from anisotropy.measure import metrics

    assert layerwise.BOOTSTRAP is metrics.BOOTSTRAP
    assert not hasattr(budget, "BOOTSTRAP_RESAMPLES") and not hasattr(budget, "POOL_TRIM_AT")
    n, widths = 50, (32, 64)
    assert budget.per_example_bytes(n, widths) == budget.per_example_bytes(n, widths, metrics.BOOTSTRAP["n_boot"])
    monkeypatch.setitem(metrics.BOOTSTRAP, "n_boot", 10)
    assert budget.per_example_bytes(n, widths) == budget.per_example_bytes(n, widths, 10)
    before = budget.pool_bytes(2, 16, 100, 10_000, 10)
    monkeypatch.setattr(batches, "POOL_TRIM_AT", 2 * batches.POOL_TRIM_AT)
    assert budget.pool_bytes(2, 16, 100, 10_000, 10) > before


def test_cnn_widths_are_the_flattened_maps():
    # ResNet-50 at 224 px: the stem's 64 x 56 x 56 map, then its four stages (He et al. 2016, Table 1).
    assert budget.state_widths("resnet-50") == (64 * 56 * 56, 256 * 56 * 56, 512 * 28 * 28, 1024 * 14 * 14,
                                                2048 * 7 * 7)


def paper(chapter, **changes):
    return budget.plan(chapter, {**profiles.chapter_parameters("paper", chapter), **changes})


def test_host_memory_at_paper_sizes_is_flagged():
    # Pythia-2.8B (32 layers + embeddings, width 2560) pooling 8 batches of 4096 vectors per state: the pools alone,
    # 33 x 32,768 x 2,560 float32, are 10.3 GiB; with the kernel that is more than Colab's 12.7 GiB.
    p = paper("p2_training_dynamics", n_batches=8)
    e = budget.estimate(p)
    assert e["ram_gib"] >= 33 * 32768 * 2560 * 4 / GIB + budget.RUNTIME_GIB
    assert any(line.startswith("host memory") for line in budget.problems(p, e))
    # As set (4 batches), at least the 5.2 GiB of pools the issue counts, and more than loading the weights.
    e = budget.estimate(paper("p2_training_dynamics"))
    assert e["ram_gib"] >= 33 * 16384 * 2560 * 4 / GIB + budget.RUNTIME_GIB
    # ResNet-50's per-image sums at 1,000 images: 1,000 x 1,705,984 float32 (6.4 GiB) held, and the float64 copy of
    # its widest stage for the interval (1,000 x 802,816 x 8 bytes, 6.0 GiB).
    p = paper("p1_s3_modalities", n_images=1000)
    e = budget.estimate(p)
    assert e["ram_gib"] >= (1000 * 1705984 * 4 + 1000 * 802816 * 8) / GIB
    assert any(line.startswith("host memory") for line in budget.problems(p, e))


def test_host_memory_at_local_sizes_is_not_flagged():
    from anisotropy.book import runner

    for chapter in runner.chapters():
        p = budget.plan(chapter, profiles.chapter_parameters("local", chapter), "local")
        assert not [line for line in budget.problems(p) if line.startswith("host memory")], chapter
    p = paper("p1_s3_token_level")  # BERT-size models on 2,000 texts: a few hundred MB of sums
    assert not [line for line in budget.problems(p) if line.startswith("host memory")]


def test_training_of_the_extensions_counts_in_the_qk_chapter_time():
    suites = profiles.chapter_parameters("paper", "checkpoint_suites")["suites"]

    def training_flops(spec):  # 6 x parameters x positions trained on (Kaplan et al. 2020)
        params = 12 * spec["depth"] * spec["width"] ** 2 + spec.get("vocab_size", 256) * spec["width"]
        positions = ((spec["image_size"] // spec["patch_size"]) ** 2 if spec["kind"] == "vit" else spec["seq_len"])
        return 6 * params * positions * spec["batch_size"] * spec["steps"] * len(spec.get("seeds", [0]))

    flops = training_flops(suites["vit"]) + training_flops(suites["clm"])
    minutes = flops / (budget.T4_TFLOPS["float32"] * 1e12 * budget.EFFICIENCY) / 60
    assert 50 < minutes < 58  # the "about 54 T4-minutes"
    with_ext = budget.estimate(paper("p1_s5_qk_training"))
    without = budget.estimate(paper("p1_s5_qk_training", extensions=[]))
    assert with_ext["training_minutes"] == pytest.approx(minutes, rel=1e-9)
    assert without["training_minutes"] == 0
    # the page's time grows by the training (and by the download of its corpus, if no other run needs it)
    assert minutes <= with_ext["t4_minutes"] - without["t4_minutes"] <= minutes + 1
    table = budget.table("p1_s5_qk_training", profiles.chapter_parameters("paper", "p1_s5_qk_training"))
    assert "of which training (vit, clm suites)" in set(table["quantity"])


def test_xet_chunk_cache_counts_on_disk_up_to_its_cap(monkeypatch):
    p = paper("p1_s3_token_level")
    monkeypatch.setenv(budget.XET_CHUNK_CACHE_ENV, "0")
    off = budget.estimate(p)
    assert off["xet_gib"] == 0
    monkeypatch.setenv(budget.XET_CHUNK_CACHE_ENV, str(GIB))
    capped = budget.estimate(p)
    assert capped["xet_gib"] == pytest.approx(1.0) and capped["disk_gib"] == pytest.approx(off["disk_gib"] + 1.0)
    monkeypatch.delenv(budget.XET_CHUNK_CACHE_ENV)
    models = sum(budget.download_gib(c.model) for c in p.checkpoints)  # kept: the four models, each below 10 GB
    assert budget.estimate(p)["xet_gib"] == pytest.approx(min(models, 10e9 / GIB))


def test_a_model_of_unknown_size_is_shown_as_unknown():
    params = profiles.chapter_parameters("paper", "p1_s3_character_level")
    assert "manta-lm" in params["models"]
    e = budget.estimate(budget.plan("p1_s3_character_level", params))
    assert e["unknown"] == ["almanach/manta-lm-base"]
    assert any("size unknown" in line and "manta" in line for line in budget.problems(
        budget.plan("p1_s3_character_level", params), e))
    table = budget.table("p1_s3_character_level", params).set_index("quantity")["estimate"]
    assert table["size unknown (not counted)"] == "almanach/manta-lm-base"
    assert table["download (models and data)"].startswith("at least ")
    assert "at least" in budget.summary("p1_s3_character_level", params)
    known = budget.table("p1_s3_token_level", profiles.chapter_parameters("paper", "p1_s3_token_level"))
    assert "size unknown (not counted)" not in set(known["quantity"])


@pytest.mark.parametrize("metric, batch, width", [("sigma1_share", 600, 48), ("sigma1_share", 5000, 32),
                                                  ("twonn_dimension", 600, 48)])
def test_metric_flops_count_the_matrix_products_the_metrics_run(metric, batch, width):
    # torch's FlopCounterMode counts every matrix product (2 m n k each) the metric runs, on its device path as on the
    # CPU; it has no formula for eigendecompositions, whose 4/3 d^3 is the textbook count (Golub & Van Loan).
    from torch.utils.flop_counter import FlopCounterMode

    from anisotropy.measure import metrics

    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1))
    with metrics.on_device(torch.device("cpu")), FlopCounterMode(display=False) as counter:
        batches.BATCH_METRICS[metric](x)
    float32, float64 = budget.metric_flops(metric, batch, width)
    assert counter.get_total_flops() == float32
    assert float64 == (4 / 3 * width**3 if metric == "sigma1_share" else 0.0)


def test_metric_minutes_count_every_state_batch_and_pass():
    # Pythia-2.8B under `paper` (training dynamics: TwoNN too): 33 states x 4 batches of 4096 per checkpoint, and the
    # time is the float32 and float64 flops at the T4's rates.
    p = paper("p2_training_dynamics")
    c = next(c for c in p.checkpoints if c.model == "pythia-2.8b")
    assert "twonn_dimension" in c.metrics and c.pool // c.metric_batch == 4
    f32, f64 = budget.checkpoint_metric_flops(c)
    d, b, n = 2560, 4096, 33 * 4 * c.passes
    assert f32 == pytest.approx(n * (3 * 2 * b * d * d + 2 * b * b * (d + 1)))
    assert f64 == pytest.approx(n * 3 * 4 / 3 * d**3)
    e = budget.estimate(p)
    total = sum(sum(budget.checkpoint_metric_flops(c)) for c in p.checkpoints)
    assert e["metric_tflop"] == pytest.approx(total / 1e12)
    assert 0 < e["metric_minutes"] < e["t4_minutes"]
    assert "of which metrics" in set(budget.table("p2_training_dynamics",
                                                  profiles.chapter_parameters("paper", "p2_training_dynamics"))["quantity"])


@pytest.mark.parametrize("chapter", ["p1_s3_token_level", "p2_layer_profiles", "p1_s5_qk_training"])
def test_the_worked_budget_adds_up_to_the_estimate(chapter):
    from anisotropy import profiles

    params = profiles.chapter_parameters("paper", chapter)
    rows = budget.worked(chapter, params)
    e = budget.estimate(budget.plan(chapter, params))
    assert rows["minutes"].sum() == pytest.approx(e["t4_minutes"], rel=1e-9)
    assert (rows["minutes"] > 0).all()


def test_the_worked_forward_passes_are_twice_the_parameters_times_the_tokens_read():
    # The parameters counted on the model itself, built from the registry's config on the meta device (no memory):
    # the registry's rounded count is within 1% of it; the tokens are the page's examples x positions.
    import transformers

    from anisotropy import profiles
    from anisotropy.models import registry

    params = profiles.chapter_parameters("paper", "p1_s3_token_level")
    rows = budget.worked("p1_s3_token_level", params).set_index("model")
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(**registry.spec("gpt2").config))
    counted = sum(p.numel() for p in model.parameters())
    tokens = params["n_samples"] * params["max_length"]
    gpt2 = rows.loc["gpt2"]
    assert gpt2["tokens"] == tokens
    assert gpt2["TFLOP"] == pytest.approx(2 * counted * tokens / 1e12, rel=0.01)
    assert gpt2["rate (TFLOP/s)"] == budget.T4_TFLOPS[params.get("dtype") or "float32"]
    assert gpt2["minutes"] == pytest.approx(gpt2["TFLOP"] / (gpt2["rate (TFLOP/s)"] * budget.EFFICIENCY) / 60)


def test_speech_models_count_the_front_end_of_a_pass_over_full_length_utterances():
    # taps cuts a batch of long clips so that the convolutional front end stays under SPEECH_PASS_BYTES; the GPU peak
    # of a speech encoder holds that much beside its hidden states, a text model of the same size does not.
    from anisotropy.measure import taps

    speech = budget.Checkpoint("wav2vec2-base", examples=32, positions=budget.SPEECH_FRAMES, batch=32)
    alone = budget.weights_gib("wav2vec2-base") * budget.GIB
    assert budget._gpu_gib(speech) * budget.GIB - alone >= taps.SPEECH_PASS_BYTES
    assert budget._gpu_gib(speech) < budget.COLAB["gpu"]


def test_the_profile_page_plans_its_registry_models_with_the_commands_own_batching():
    """The profile page's plan: a registry model named by its Hub id is that entry, a model outside the registry is
    a note (no size), random weights download nothing; the batching is experiments.model_profile's."""
    from anisotropy.experiments import model_profile

    assert budget.PROFILE_BATCHES == model_profile.N_BATCHES
    assert budget.PROFILE_METRICS == model_profile.PAPER2_METRICS
    assert budget.EXTRACTION_BATCH == model_profile.EXTRACTION_BATCH
    params = dict(models=["EleutherAI/pythia-410m", "gpt2", "someone/not-in-the-registry"], variant="pretrained",
                  text="", source="enwik8", n=600, max_length=512, dtype="float32")
    p = budget.plan("profile_a_model", params)
    assert [c.model for c in p.checkpoints] == ["pythia-410m", "gpt2"]
    assert p.requests == [("EleutherAI/pythia-410m", None), ("gpt2", None)]
    assert {c.pool for c in p.checkpoints} == {batches.BATCH_SIZE * model_profile.N_BATCHES}
    assert p.data == [("enwik8", 600)] and any("someone/not-in-the-registry" in note for note in p.notes)
    assert budget.plan("profile_a_model", {**params, "variant": "tiny"}).checkpoints == []
    assert budget.plan("profile_a_model", {**params, "text": "notes.txt"}).data == []
