"""Parameter sweeps: one chapter run once per point of a grid of its parameters (``python -m anisotropy sweep``), each
point a papermill job (``book.execution``) on a Dask worker, with one table of every point's parameters and glued
values.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from anisotropy import executor, profiles, results
from anisotropy.book.console import ended
from anisotropy.book.execution import (KERNEL_THREADS, ChapterFailed, Job, Outcome, finish, first_line, prepare, root,
                                       run_job)
from anisotropy.book.notebooks import SWEEPS, SWEEPS_IN_STORE, glued_values, write_bytes


def _slug(value) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def sweep_folder(name: str, store: results.Store | None = None):
    """Where a sweep's executed notebooks go: ``book/sweeps/<name>`` beside a folder store, or
    ``<store URL>/_sweeps/<name>`` when the results store is a URL (shared by the machines that run the points)."""
    store = store or results.Store()
    return store.location(SWEEPS_IN_STORE, name) if store.remote else root() / SWEEPS / name


def sweep(name: str, profile: str, grid: dict[str, list], address: str | None = None,
          workers: int | None = None, retries: int = 2, announce=print) -> Path:
    """Run chapter ``name`` once per point of the grid (cartesian product); one executed notebook per point, named by
    its parameters (``sweep_folder``), and one table ``book/sweeps/<name>/sweep.csv`` of every point's parameters
    and glued values (and a copy beside the notebooks when they are in a URL store).

    The points are tasks of a Dask client (``executor.map``): a LocalCluster of ``workers`` processes (default: the
    cores; 1 runs them here, one after another), or the cluster at ``address`` / ``$DASK_SCHEDULER_ADDRESS``. Each
    task runs its point's notebook with papermill on its worker and writes the notebook and the results to the
    store. A point whose notebook is finished is not run again; a worker that dies mid-point costs the point one of
    ``retries`` + 1 attempts elsewhere; a point that fails for good has its one-line reason in the table. Everything
    is checked first (parameters, store, scheduler): a bad input writes nothing."""
    import pandas as pd

    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    given = profiles.chapter_parameters(profile, name)
    defaults, rules = profiles.notebook_parameters(name), profiles.parameter_rules(name)
    for point in points:  # every point is checked before the first one runs
        profiles.check(name, {**given, **point}, defaults, rules)
    store = results.Store()
    store.check()
    folder = sweep_folder(name, store)
    # A point is one unit of work on one worker: its kernel starts no cluster of its own, and writes to this store.
    env = {"ANISOTROPY_RESULTS": str(store.root), executor.WORKERS_ENV: "1", executor.SCHEDULER_ENV: None,
           **KERNEL_THREADS}
    rows: list = [None] * len(points)
    jobs: list[Job] = []
    where: dict[int, tuple[int, str]] = {}
    errors: dict[int, str] = {}
    finished = 0

    def record(i: int, stem: str, outcome: Outcome) -> None:
        nonlocal finished
        finished += 1
        ended(outcome, profile, finished, len(points), label=stem)
        path = str(outcome.path).replace("\\", "/")
        row = {**points[i], "notebook": path.rsplit("/", 1)[-1], "seconds": round(outcome.seconds, 2),
               "error": first_line(outcome.error) if outcome.error else ""}
        rows[i] = {**row, **(outcome.glued or {})} if not outcome.error else row
        if outcome.error:
            errors[i] = outcome.error

    for i, point in enumerate(points):
        stem = "__".join([name, *(f"{k}={_slug(v)}" for k, v in point.items())])
        output = folder / f"{stem}.ipynb" if isinstance(folder, Path) else f"{folder}/{stem}.ipynb"
        prepared = prepare(name, profile, overrides=point, output=output, env=env)
        if isinstance(prepared, Outcome):
            prepared.glued = glued_values(prepared.path)
            record(i, stem, prepared)
        else:
            where[id(prepared)] = (i, stem)
            jobs.append(prepared)

    def done(job: Job, result) -> None:
        i, stem = where[id(job)]
        if isinstance(result, BaseException):  # its workers died (retries + 1 times), or the task could not run
            outcome = Outcome(name, job.output, 0.0, params=job.params,
                              error=f"{stem}: {type(result).__name__}: {first_line(result)}")
        else:
            outcome = finish(result)
        record(i, stem, outcome)

    executor.map(run_job, jobs, address=address, workers=workers, retries=retries, on_done=done, errors="return",
                 announce=announce)
    table = root() / SWEEPS / name / "sweep.csv"
    table.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.to_csv(table, index=False)
    if not isinstance(folder, Path):
        write_bytes(f"{folder}/sweep.csv", frame.to_csv(index=False).encode())
    if errors:
        raise ChapterFailed(f"{len(errors)} of {len(rows)} sweep points failed:\n" +
                            "\n".join(f"  - {errors[i]}" for i in sorted(errors)) + f"\n  table: {table}")
    return table
