"""Wall and CPU time of the parallel paths (issue 18 and the parallel build) on this machine.

- ``sweep``: a sweep of the smoke ``appendix_b_isotropic`` chapter over ``--points`` seeds, on 1 worker (the serial
  path: the points one after another, in the CLI's process) and on a LocalCluster of 2 worker processes;
- ``build`` (with ``--builds``): the whole smoke book (``python -m anisotropy build --profile smoke``) one chapter at a
  time (``--jobs 1``), two at a time on threads of the build process (the default), and two at a time in Dask worker
  processes (``runner.build(..., processes=True)``), the design the default was chosen over.

Every run starts from a fresh copy of the repository (nothing stored, nothing trained), so each computes everything.
CPU time is that of the command and every process it started and waited for (``RUSAGE_CHILDREN``): the chapters'
kernels, Dask's workers, jupyter-book. The configurations alternate within each repeat, so that a change in the
machine's load falls on all of them. Writes ``results/parallel.csv`` (one row per run) and
``results/parallel_machine.json``; the book's performance appendix shows both.

    .venv/bin/python benchmarks/bench_parallel.py                 # sweeps only, ~1 min
    .venv/bin/python benchmarks/bench_parallel.py --builds        # and the three builds, ~6 min more
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CHAPTER = "appendix_b_isotropic"


def project_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return sorted(p for p in out.split("\0") if p and (ROOT / p).is_file())


def fresh_copy(dest: Path) -> Path:
    for rel in project_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


def environment(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANISOTROPY_")}
    env.update(ANISOTROPY_RESULTS=str(root / "results"), ANISOTROPY_CACHE=str(root / ".cache"),
               PYTHONPATH=str(root / "lib"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], root: Path) -> tuple[float, float, str]:
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(command, cwd=root, env=environment(root), capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, cpu, proc.stdout


def configurations(points: int, builds: bool) -> list[tuple[str, str, list[str]]]:
    seeds = ",".join(str(s) for s in range(points))
    sweep = [sys.executable, "-m", "anisotropy", "sweep", CHAPTER, "--profile", "smoke", "-p", f"seed={seeds}"]
    found = [("sweep", "1 worker (serial path)", [*sweep, "--workers", "1"]),
             ("sweep", "2 workers (LocalCluster)", [*sweep, "--workers", "2"])]
    if builds:
        build = [sys.executable, "-m", "anisotropy", "build", "--profile", "smoke"]
        processes = [sys.executable, "-c", "from anisotropy.book import runner; runner.build('smoke', jobs=2, "
                     "processes=True)"]
        found += [("build", "one chapter at a time (--jobs 1)", [*build, "--jobs", "1"]),
                  ("build", "2 at a time, threads (default)", [*build, "--jobs", "2"]),
                  ("build", "2 at a time, Dask worker processes", processes)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=6)
    parser.add_argument("--builds", action="store_true", help="also time the three smoke builds")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "parallel.csv")
    parser.add_argument("--note", default="", help="free text for the machine record (e.g. what else ran)")
    args = parser.parse_args()

    load_before, start = os.getloadavg(), time.perf_counter()
    rows = []
    for repeat in range(args.repeats):
        for section, config, command in configurations(args.points, args.builds):
            with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
                root = fresh_copy(Path(tmp) / "repo")
                load = os.getloadavg()[0]
                wall, cpu, _ = timed(command, root)
            rows.append({"section": section, "configuration": config, "repeat": repeat,
                         "points": args.points if section == "sweep" else None, "wall_seconds": round(wall, 1),
                         "cpu_seconds": round(cpu, 1), "cpu_per_wall": round(cpu / wall, 2),
                         "load_before": round(load, 2)})
            print(f"{section:<6} {config:<38} wall {wall:6.1f} s  CPU {cpu:6.1f} s  ({cpu / wall:.2f} cores busy; "
                  f"load before {load:.1f})", flush=True)
    table = pd.DataFrame(rows)
    for section, part in table.groupby("section"):
        first = part[part.configuration == part.configuration.iloc[0]].wall_seconds.median()
        table.loc[part.index, "speedup"] = (first / part.wall_seconds).round(2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    versions = {name: importlib.metadata.version(name) for name in ("dask", "distributed", "papermill", "torch")}
    machine = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
               "cpu": platform.processor() or platform.machine(), "logical_cpus": os.cpu_count(),
               "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
               "python": platform.python_version(), "versions": versions,
               "load_average_before": [round(x, 2) for x in load_before],
               "load_average_after": [round(x, 2) for x in os.getloadavg()],
               "wall_minutes": round((time.perf_counter() - start) / 60, 1), "note": args.note}
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
        machine["cpu"] = model
    except (OSError, StopIteration):
        pass
    args.out.with_name(args.out.stem + "_machine.json").write_text(json.dumps(machine, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
