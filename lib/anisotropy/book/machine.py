"""The machine's calibration: how fast this computer does the book's kinds of work, so that timings measured on
different machines (or on the same machine on different days) can be compared.

Machines sold under one name differ about 3x in speed from host to host and day to day, and not uniformly: one 2-core
AMD EPYC did large matrix products as fast as another but ran the suites' small training steps three times slower,
because it paid ~10 us per page fault (fresh pages filled at ~5 GB/s, against ~11 GB/s for copies into memory
already touched; a freshly allocated 33 MB tensor cost five times a write into an old one). So the calibration
measures each kind of work the build does, in a few seconds:

- ``gemm_gflops_1`` / ``gemm_gflops_all``: float32 matrix products of 1024 x 1024, one thread and every core (GFLOP/s);
- ``stream_gbs``: copying 64 MiB into memory already touched (GB/s, read + write);
- ``first_touch_gbs``: filling freshly allocated memory (GB/s; page faults included: what a new tensor costs);
- ``step_seconds``: one update of each suite recipe of the ``local`` profile (its model, batch shape and loss, on
  random data of the right shape; one thread, as the build trains), seconds per update.

``speed_index(cal, reference)`` is the geometric mean of the reference machine's step times over this machine's: 1 on
the reference, 0.5 on a machine that trains at half its speed. ``estimate_build(cal)`` scales the committed reference
build (``benchmarks/results/build_reference.json``: the CPU seconds of each chapter and the calibration of the machine
that measured them) by it: the build prints that estimate before it starts and the measured figures after.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from anisotropy import executor, paths
from anisotropy.book import units
from anisotropy.training import recipes, tasks, trainer

REFERENCE = Path("benchmarks") / "results" / "build_reference.json"
REFERENCE_PROFILE = "local"  # the build whose times benchmarks/results/builds.csv records, calibrated before it starts
SUITES_CHAPTER = "checkpoint_suites"  # the chapter whose kernel trained every suite before the build had units
_STEP_REPEATS = 3  # measured updates per recipe, after one warm-up update


def _best(fn, repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_gflops(threads: int, n: int = 1024, repeats: int = 5) -> float:
    """float32 n x n matrix products per second on ``threads`` threads, in GFLOP/s (2 n^3 flops each)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        seconds = _best(lambda: torch.mm(a, b), repeats)
    finally:
        torch.set_num_threads(before)
    return 2 * n**3 / seconds / 1e9


def stream_gbs(mib: int = 64, repeats: int = 5) -> float:
    """Copy bandwidth into memory already touched, GB/s (bytes read + written)."""
    src = np.ones(mib << 17)  # float64: mib MiB
    dst = np.empty_like(src)
    return 2 * src.nbytes / _best(lambda: np.copyto(dst, src), repeats) / 1e9


def first_touch_gbs(mib: int = 64, repeats: int = 3) -> float:
    """Filling freshly allocated memory, GB/s: the page faults of a new tensor included."""
    return (mib << 20) / _best(lambda: np.ones(mib << 17), repeats) / 1e9


def _synthetic_step(recipe) -> float:
    """Seconds of one update of ``recipe`` (its model, batch shape and loss; random tokens or images), one thread."""
    vocab = recipe.vocab_size if recipe.kind in ("mlm", "clm") else 256 + 5  # char-mlm: bytes and 5 specials
    special = {"pad_token_id": 0}
    if recipe.kind == "clm":
        special.update(bos_token_id=1, eos_token_id=1)
    config = recipes.model_config(recipe, vocab if recipe.kind in recipes.TEXT_KINDS else None,
                                           special if recipe.kind in recipes.TEXT_KINDS else None)
    torch.manual_seed(0)
    model = recipes.model_class(recipe.kind)(config)
    model.train()
    optimizer = trainer.make_optimizer(recipe, model)
    gen = torch.Generator().manual_seed(0)
    b, n = recipe.batch_size, recipe.seq_len
    if recipe.kind in recipes.TEXT_KINDS:
        ids = torch.randint(5, vocab, (b, n), generator=gen)
        labels = ids
        if recipe.kind in recipes.BERT_KINDS:
            labels = torch.where(torch.rand(b, n, generator=gen) < recipe.mask_prob, ids, -100)
        batch = {"input_ids": ids, "labels": labels}

        def loss():
            return tasks.text_loss(model, batch, recipe.kind in recipes.BERT_KINDS)
    else:
        pixels = torch.randn(b, 3, recipe.image_size, recipe.image_size, generator=gen)
        labels = torch.randint(0, config.num_labels, (b,), generator=gen)

        def loss():
            return model(pixel_values=pixels, labels=labels).loss

    def update():
        value = loss()
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _best(update, _STEP_REPEATS)
    finally:
        torch.set_num_threads(before)


def calibrate(profile: str = "local") -> dict:
    """The calibration of this machine (see the module's docstring); about 10-20 s on a slow 2-core machine."""
    start = time.perf_counter()
    steps = {}
    for name, spec in recipes.suite_specs(profile).items():
        recipe = recipes.recipes(name, spec)[0]
        steps[name] = round(_synthetic_step(recipe), 4)
    cal = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpu": _cpu_name(), "cores": executor.cores(), "python": platform.python_version(),
        "torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability(),
        "gemm_gflops_1": round(gemm_gflops(1), 1), "gemm_gflops_all": round(gemm_gflops(executor.cores()), 1),
        "stream_gbs": round(stream_gbs(), 2), "first_touch_gbs": round(first_touch_gbs(), 2),
        "step_seconds": steps, "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    cal["seconds"] = round(time.perf_counter() - start, 1)
    return cal


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def speed_index(cal: dict, reference: dict) -> float:
    """Geometric mean over the suite recipes both calibrations timed of reference step time / this step time:
    1 on the reference machine, 0.5 on one that trains at half its speed."""
    common = sorted(set(cal["step_seconds"]) & set(reference["step_seconds"]))
    if not common:
        raise ValueError("the two calibrations timed no suite recipe in common")
    logs = [math.log(reference["step_seconds"][k] / cal["step_seconds"][k]) for k in common]
    return math.exp(sum(logs) / len(logs))


def describe(cal: dict) -> str:
    """One line: the calibration's numbers, to print beside every timing."""
    steps = ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in cal["step_seconds"].items())
    return (f"{cal['cpu']}, {cal['cores']} cores ({cal['isa']}): GEMM {cal['gemm_gflops_1']:.0f} GFLOP/s on one "
            f"core, {cal['gemm_gflops_all']:.0f} on all; memory {cal['stream_gbs']:.1f} GB/s, fresh pages "
            f"{cal['first_touch_gbs']:.1f} GB/s; one update of {steps}; load average {cal['load_average'][0]:.1f}")


def reference(path: Path | None = None) -> dict | None:
    """The committed reference build (per-chapter CPU seconds and the calibration of the machine that measured
    them), or None when there is none."""
    path = path or paths.project_root() / REFERENCE
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def item_seconds(ref: dict | None, items: list[str], profile: str = REFERENCE_PROFILE) -> dict[str, float]:
    """The reference build's CPU seconds of each of a build's ``items`` that it tells: a chapter's own, and a
    training unit's (``book.units``) as its run's cost (``training.trainer.cost``) times the reference's CPU seconds
    of training per unit of cost (its units', or, in a reference from before the units, its suites chapter's, whose
    kernel trained every run: that chapter's own seconds are then taken as nothing beside units). ``{}`` without a
    reference."""
    if not ref:
        return {}
    per = ref["chapters_cpu_seconds"]
    out = {n: float(per[n]) for n in items if n in per and not units.is_unit(n)}
    trains = [units.parse(n) for n in items if units.is_unit(n)]
    if not trains:
        return out
    source = ref.get("profile", REFERENCE_PROFILE)
    timed = [units.parse(n) for n in per if units.is_unit(n)]
    if timed:
        spent = sum(per[u.name] for u in timed)
    else:
        timed = [units.Unit(r.suite, r.seed) for name, spec in recipes.suite_specs(source).items()
                 for r in recipes.recipes(name, spec)]
        spent = per.get(SUITES_CHAPTER, 0.0)
        if SUITES_CHAPTER in out:
            out[SUITES_CHAPTER] = 0.0
    rate = spent / max(sum(trainer.cost(u.recipe(source)) for u in timed), 1.0)
    out.update({u.name: rate * trainer.cost(u.recipe(profile)) for u in trains})
    return out



def estimate_build(cal: dict, ref: dict | None, chapters: list[str] | None = None,
                   profile: str = REFERENCE_PROFILE) -> dict | None:
    """Estimated CPU and wall seconds of a fresh build on the calibrated machine: the reference build's CPU seconds
    of each item (``chapters``: those to run, training units included; all by default; ``item_seconds``) divided by
    ``speed_index``, and the wall time at the reference build's cores-busy ratio."""
    if not ref:
        return None
    index = speed_index(cal, ref["calibration"])
    per = ref["chapters_cpu_seconds"]
    wanted = list(chapters or per)
    seconds = item_seconds(ref, wanted, profile)
    cpu = sum(seconds.values()) / index + ref.get("other_cpu_seconds", 0.0) / index
    busy = ref["cpu_seconds"] / ref["wall_seconds"]
    return {"speed_index": index, "cpu_seconds": cpu, "wall_seconds": cpu / busy,
            "chapters": len(seconds), "missing": [c for c in (chapters or []) if c not in seconds]}
