"""A plan's parts and what of them fits a runtime. A part is what one session runs before the chapter can resume
(``Part``: a checkpoint's measurement, a training run, a piece of the chapter's own work); ``parts(plan)`` derives
them, ``estimate(plan, gpu)`` adds them up for one runtime (downloads, disk at the peak, the largest memories, the
minutes on every kind of GPU), ``part_problems``, ``fit`` and ``problems`` say what does not fit, ``hint`` what to
change; ``gib_text``, ``minutes_text`` and ``with_article`` word sizes, times and GPU kinds for them and the tables."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from anisotropy.data import sources as data
from anisotropy.models import registry
from anisotropy.pages.budget.requests import Checkpoint, Plan, Training, Work
from anisotropy.pages.budget.runtimes import (BYTES, CPU_TFLOPS, EFFICIENCY, FREE_GPU, GIB, GPUS, HUB_MB_PER_S,
                                              LOAD_S, RUNTIME_GIB, RUNTIMES, Runtime, gpu_seconds)
from anisotropy.pages.budget.sizes import (checkpoint_gpu_gib, checkpoint_metric_flops, download_gib, forward_flops,
                                           held_bytes, host_ram_bytes, n_params, weights_gib, xet_chunk_cache_gib)
from anisotropy.pages.budget.training import (preparation_bytes, recipe_params, token_array_gib, training_gpu_bytes,
                                              training_seconds)


def _local(model: str) -> bool:
    return bool(registry.spec(model).local_package)


def training_host_bytes(run: Training) -> float:
    """Peak host bytes of a training part beyond the kernel (``RUNTIME_GIB``): each run trained at the same time
    (``at_once``) prepares its data (``preparation_bytes``) and holds a host copy of its weights when it saves a
    checkpoint (4 x P); worker processes (``at_once`` > 1) each add a Python with torch, ``RUNTIME_GIB``. Bytes."""
    one = preparation_bytes(run.recipe, run.chunk_chars) + 4 * recipe_params(run.recipe)
    workers = RUNTIME_GIB * GIB if run.at_once > 1 else 0.0
    return run.at_once * (one + workers)


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

    device, held = checkpoint_gpu_gib(c), held_bytes(c) / GIB
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
        out.append(f"GPU memory: {part.name} needs about {gib_text(part.gpu_gib)}, more than {with_article(kind)}'s "
                   f"{GPUS[kind].memory_gib:.0f} GiB")
    ram = part.ram_gib if kind else part.cpu_ram_gib
    if ram > rt.ram_gib:
        out.append(f"host memory: {part.name} needs about {gib_text(ram)} at the peak, more than the "
                   f"{rt.ram_gib:.1f} GiB of {rt.description}")
    minutes = part.minutes[kind or FREE_GPU] * part.at_once
    if kind and rt.part_hours is not None and minutes > rt.part_hours * 60:
        at_once = f" ({part.at_once} runs at once)" if part.at_once > 1 else ""
        out.append(f"time: {part.name} takes about {minutes_text(minutes)} on {with_article(kind)}{at_once}, longer "
                   f"than the {rt.part_hours:g} h a part may take on {rt.description}")
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



def cpu_minutes(e: dict) -> float:
    """The estimate ``e`` (of ``estimate``) on two vCPUs instead of a GPU: its forward passes, per-batch metrics and
    training at ``CPU_TFLOPS`` with the same ``EFFICIENCY``, plus the same downloads and loads, in minutes."""
    flop = (e["forward_tflop"] + e["metric_tflop"] + e["training_tflop"]) * 1e12
    return (flop / (CPU_TFLOPS * 1e12 * EFFICIENCY) + e["download_gib"] * 1024 / HUB_MB_PER_S
            + LOAD_S * e["checkpoints"]) / 60


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
            fits = [x.model for x in p.checkpoints if checkpoint_gpu_gib(x) <= kind.memory_gib]
            largest = max(fits, key=n_params) if fits else None
            if c.dtype == "float32" and weights_gib(c.model, "float16") * 1.3 < kind.memory_gib:
                line += f"; in float16 {c.model} would fit"
            line += f"; the largest model that fits as set is {largest}" if largest else ""
        elif line.startswith("host memory") and part is not None and part.kind == "measure":
            c = next(c for c in p.checkpoints if _checkpoint_part(p.chapter, c).name == part.name)
            line += (": it pools its vectors (batch_size x n_batches per layer): use fewer batches or a narrower model"
                     if c.pool else ": it keeps one sum per example and layer: use fewer examples"
                     if c.per_example and host_ram_bytes(c) > n_params(c.model) * BYTES.get(c.dtype, 4)
                     else ": it loads its weights: use dtype float16 or a smaller model")
        elif line.startswith("host memory") and part is not None and part.kind == "train":
            line += f": {hint(part, line)}"
        out[key] = line
    lines = [line + (f" (so do {', '.join(like[key])})" if like[key] else "") for key, line in out.items()]
    if e["unknown"]:
        lines.append(f"size unknown: {', '.join(e['unknown'])} (the registry records no parameter count); download, "
                     f"disk and memory leave {'it' if len(e['unknown']) == 1 else 'them'} out")
    return lines


def gib_text(x: float) -> str:
    return f"{x * 1024:.0f} MiB" if x < 1 else f"{x:.1f} GiB" if x < 1e5 else f"{x:.1e} GiB"


def with_article(gpu: str) -> str:
    """The GPU kind with its article: "a T4", "an L4", "an A100"."""
    return ("an " if gpu[0] in "AEFHILMNORSX" else "a ") + gpu


def minutes_text(m: float) -> str:
    """Minutes in words: "12.3 min" below an hour and a half, else hours ("2.5 h")."""
    return f"{max(m, 0.1):.1f} min" if m < 90 else f"{m / 60:.1f} h"

