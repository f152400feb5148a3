"""The machines a profile may assume and the rates every estimate assumes: the kinds of Colab GPU (``GpuKind``,
``GPUS``, ``FREE_GPU``), a free Colab runtime's limits written once (``COLAB``), the runtimes a profile names
(``Runtime``, ``RUNTIMES``, ``runtime(profile)``), the download, load and compute rates (``HUB_MB_PER_S``, ``LOAD_S``,
``EFFICIENCY``, ``CPU_TFLOPS``, ``NORMALS_PER_S``), the sizes they count in (``GIB``, ``BYTES``) and
``gpu_seconds``, the time of a number of flops on a kind of GPU."""
from __future__ import annotations

from dataclasses import dataclass

from anisotropy import profiles


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
# Characters per token of a text window under the papers' byte-level BPE tokenizers (GPT-2's, Pythia's): English
# prose runs about 4 (3.8 on the offline prose under GPT-2's own vocabulary); 3.5 errs towards more tokens, so a
# window's cost is not undercounted (tests/test_budget.py measures it with GPT-2's tokenizer from Whisper's wheel).
CHARS_PER_TOKEN = 3.5
CNN_MB_PER_IMAGE = 50.0  # float32 feature maps of one 224 x 224 image through a CNN's stages, kept per stage


def gpu_seconds(flops: float, dtype: str, gpu: str = FREE_GPU) -> float:
    """Seconds of ``flops`` on the ``gpu`` kind of ``GPUS`` at the ``dtype``'s peak rate times ``EFFICIENCY``."""
    return flops / (GPUS[gpu].rate(dtype) * 1e12 * EFFICIENCY)

