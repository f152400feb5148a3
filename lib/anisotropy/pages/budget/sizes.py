"""What one checkpoint's measurement asks of a runtime, from the registry's shapes and parameter counts: the
positions of a text example (``text_positions``), its forward flops (``forward_flops``) and activations
(``forward_bytes``), its weights (``weights_gib``, ``download_gib``), its peak GPU memory (``checkpoint_gpu_gib``),
the per-batch metrics' flops (``metric_flops``, ``checkpoint_metric_flops``) and bytes (``metric_bytes``), and what
it holds on the host (``pool_bytes``, ``per_example_bytes``, ``layer_stats_bytes``, ``held_bytes``,
``host_ram_bytes``); hf-xet's chunk cache on disk (``xet_chunk_cache_gib``). The measuring modules (torch) are
imported where they are read, so that importing the budget stays cheap (the command line's ``plan``, every page)."""
from __future__ import annotations

import inspect
import math
import os
from functools import lru_cache

from anisotropy.data import wikipedia
from anisotropy.models import registry
from anisotropy.pages.budget.requests import Checkpoint
from anisotropy.pages.budget.runtimes import (BYTES, CHARS_PER_TOKEN, CNN_MB_PER_IMAGE, GIB, IMAGE_SIZE, STORED_HALF,
                                              XET_CHUNK_CACHE_DEFAULT_BYTES, XET_CHUNK_CACHE_ENV)

# Positions one example becomes, per modality, where the chapter does not set a length: a LibriSpeech utterance
# (about 7 s, 50 frames/s; Whisper's encoder always reads 30 s = 1500 frames), a 224 x 224 image in 16-pixel patches.
SPEECH_FRAMES, WHISPER_FRAMES, IMAGE_PATCHES = 350, 1500, 197


def text_positions(source: str, max_length: int) -> int:
    """Token positions one text example of ``source`` fills: ``max_length`` (truncation's upper bound), or fewer for
    enwik8, whose examples are windows of a fixed number of characters (``data.wikipedia.enwik8``'s ``chars``):
    chars / ``CHARS_PER_TOKEN``, rounded up."""
    if source != "enwik8":
        return max_length
    chars = inspect.signature(wikipedia.enwik8).parameters["chars"].default
    return min(max_length, math.ceil(chars / CHARS_PER_TOKEN))


def forward_flops(c: Checkpoint) -> float:
    """Flops of a checkpoint's forward passes: 2 per parameter and token, tokens = examples x positions x passes."""
    return 2.0 * n_params(c.model) * c.examples * c.positions * c.passes



def n_params(model: str) -> float:
    """The registry's parameter count of ``model`` (0 where it records none)."""
    return float(registry.spec(model).n_params or 0)


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


@lru_cache(maxsize=None)
def _block(model: str) -> dict:
    """What one block of a registry model holds during a forward pass beyond its input: ``intermediate`` (the MLP's
    width: ``intermediate_size``, ``n_inner``, ``d_ff``, ``ffn_dim`` or 4 d), ``gelu_copies`` (MLP-wide tensors alive
    at once: the product and its activation, 4 for GPT-2's tanh GELU written as five element-wise passes,
    ``gelu_new``), ``scores`` (whether its attention materialises the heads x T x T scores: its class has no SDPA
    path, ``_supports_sdpa``) and ``cache`` (a decoder keeping every layer's keys and values, ``use_cache``)."""
    from transformers import AutoConfig, AutoModel

    s = registry.spec(model)
    config = dict(s.config or {})
    if not config:
        return {"intermediate": 0, "gelu_copies": 2, "scores": True, "cache": False}
    cfg = AutoConfig.for_model(config.pop("model_type"), **config)
    width = _shape(model)[0]
    intermediate = next((getattr(cfg, n) for n in ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim")
                         if isinstance(getattr(cfg, n, None), int)), 4 * width)
    act = str(getattr(cfg, "activation_function", None) or getattr(cfg, "hidden_act", ""))
    try:
        cls = AutoModel._model_mapping[type(cfg)]
    except KeyError:  # a config no AutoModel class takes (remote code): counted with its scores
        cls = None
    return {"intermediate": intermediate, "gelu_copies": 4 if act == "gelu_new" else 2,
            "scores": not getattr(cls, "_supports_sdpa", False),
            "cache": s.stack in ("decoder", "encoder-decoder") and bool(getattr(cfg, "use_cache", False))}


def forward_bytes(model: str, batch: int, positions: int, dtype: str = "float32") -> float:
    """Peak activation bytes of one forward pass of a registry model over ``batch`` examples of ``positions``, with
    every layer's hidden states returned (``measure.taps``: ``output_hidden_states=True``, under inference mode):

        batch x T x e x (d (L + 1) + cache 2 d L + copies x i + 4 d + scores 2 h T),

    e the dtype's bytes; the hidden states of the embeddings and the L layers, kept to the end; a decoder's keys and
    values of every layer (``use_cache``, on by default: 2 d L); within the running block the MLP's ``copies`` tensors
    of its width i and about four of width d (attention's output, the residual sum, the norm); the scores and
    their softmax, 2 h T, where attention has no fused path (``_block``). Checked against torch's CPU allocations of
    BERT-base and GPT-2-medium at the paper profile's batch shapes (tests/test_plan_measured.py). Bytes."""
    width, layers, heads = _shape(model)
    b = _block(model)
    per_position = (width * (layers + 1) + (2 * width * layers if b["cache"] else 0)
                    + b["gelu_copies"] * b["intermediate"] + 4 * width + (2 * heads * positions if b["scores"] else 0))
    return float(batch * positions * per_position * BYTES.get(dtype, 4))


def weights_gib(model: str, dtype: str = "float32") -> float:
    return (registry.spec(model).n_params or 0) * BYTES.get(dtype, 4) / GIB


def download_gib(model: str) -> float:
    """Size of a checkpoint's weights as the Hub stores them (half precision for the families that publish it)."""
    return weights_gib(model, "float16" if model.startswith(STORED_HALF) else "float32")


def checkpoint_gpu_gib(c: Checkpoint) -> float:
    """Peak device GiB of measuring checkpoint ``c``: its weights in its dtype, one forward pass's activations
    (``forward_bytes``; a CNN's feature maps, ``CNN_MB_PER_IMAGE`` an image), and what the measurement keeps where the
    model is (Paper 2's per-batch metrics, the ``LayerStats`` accumulators)."""
    s = registry.spec(c.model)
    width = _shape(c.model)[0]
    batch = min(c.batch, max(c.examples, 1))
    if s.family == "cnn":
        activations = batch * CNN_MB_PER_IMAGE * 2**20
    else:  # every layer's hidden states are kept for one batch, with a decoder's cache and one block's transients
        activations = forward_bytes(c.model, batch, c.positions, c.dtype)
    if s.layout == "speech-encoder":
        # the convolutional front end of a pass over full-length utterances, which taps cuts to this size
        from anisotropy.measure import taps  # here: it loads torch, which importing budget must not (cost)

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
    - ``twonn_dimension``: the Gram strips of the centred rows, each pair once, 2 d ``measure.twonn.gram_entries(b)``
      (about b^2 d) in float32 (the float64 re-measure of 3 candidates per row is O(b d));
    - the first moments (mean cosine, drift, norms): O(b d), counted as 0.

    Units: floating-point operations."""
    from anisotropy.measure import eigen, twonn  # here: they load torch, which importing budget must not (cost)

    b, d = float(batch), float(width)
    if metric == "sigma1_share":
        return 2 * b * d * d, eigen.top_eigenvalue_flops(width)
    if metric == "twonn_dimension":
        return 2 * d * twonn.gram_entries(int(batch)), 0.0
    return 0.0, 0.0


def batch_metric_flops(names, batch: int, width: int, robust: bool = True) -> tuple[float, float]:
    """(float32, float64) flops of ``measure.batches.BatchedLayer`` measuring one batch: every metric in ``names``,
    and with ``sigma1_share`` and ``robust`` the robust metrics' two more sigma1 shares (on at most the whole
    batch)."""
    from anisotropy.measure import batches  # here: it loads torch, which importing budget must not (cost)

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
    from anisotropy.measure import batches  # here: it loads torch, which importing budget must not (cost)

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
    (counted in ``checkpoint_gpu_gib``), host memory on the CPU path (counted in ``pool_bytes``, which stays an upper
    bound):

    - ``sigma1_share``: the float64 d x d scatter with its merge and eigenvalue workspace (about six copies) and the
      batch's float32 product: 50 x d^2 + 4 x batch x d;
    - ``twonn_dimension``: the float32 copy of the centred batch, ``numpy.unique``'s sorted copy and the float64
      recomputation of the candidates (at most six float32 copies in all), and the float32 Gram strip of at most
      ``measure.twonn._GRAM_BLOCK_ENTRIES`` (32 Mi) entries with its transposed part and top-k temporaries (about
      four):
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
        from anisotropy.measure import metrics  # here: it loads torch, which importing budget must not (cost)

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
    return int(max(n_params(c.model) * BYTES.get(c.dtype, 4), held_bytes(c)))


def xet_chunk_cache_gib(hub_gib: float) -> float:
    """Disk that hf-xet's chunk cache adds while ``hub_gib`` of Hub files are on disk at the peak: the same pieces
    again, up to its cap (``HF_XET_CHUNK_CACHE_SIZE_BYTES`` when set, else the 10 GB default). ``hub.release``
    clears it with each released checkpoint, so released series count their largest checkpoint only. GiB."""
    text = os.environ.get(XET_CHUNK_CACHE_ENV, "").strip()
    cap = int(text) if text.isdigit() else XET_CHUNK_CACHE_DEFAULT_BYTES
    return min(cap / GIB, hub_gib)

