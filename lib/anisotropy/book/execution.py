"""Executing one chapter with papermill: its ``Job`` (the notebook, what papermill injects, the stamp the executed
notebook will carry, the kernel's environment), prepared where the chapter's source is (``prepare``: parameters and
plan checked before a kernel starts, a current notebook reused), run anywhere (``run_job``: a thread of the build, a
Dask worker of a sweep), its ``Outcome`` and a failure worded as one paragraph (``finish``).

Papermill injects only ``profile`` and the user's overrides: the chapter resolves every other parameter from the
profile itself (``profiles.apply``), exactly as it does on Colab. An executed notebook records the profile, parameters
and source hash it ran with, so a build that is interrupted resumes where it stopped and a finished chapter is not
executed again.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from anisotropy import executor, fingerprint, paths, profiles, results
from anisotropy.book import kernels, units
from anisotropy.book.console import Echo
from anisotropy.book.notebooks import (fill_wall_time, forget_paths, glued_values, hide_parameter_cells, is_current,
                                       write_bytes)
from anisotropy.errors import UserError
from anisotropy.profiles import EXECUTED

KERNEL = "python3"
# How long a cell's outputs may trail its reply. papermill stops the chapter after nbclient's default 4 s (it raises on
# an IOPub timeout): on a loaded 2-core machine (load average 14, a test run beside the build) two chapters of the
# smoke book stopped that way although their cells had finished. A slow machine must not fail a build; a hung kernel
# is still caught by the kernel's liveness check.
IOPUB_TIMEOUT_S = 120

# One torch/BLAS thread per chapter kernel of a build: the build keeps every core busy with chapters (and their own
# Dask workers), and two threads on one core spin against each other. It also keeps the numbers independent of how
# the chapters happen to overlap. A value set in the environment is kept.
KERNEL_THREADS = {name: os.environ.get(name, "1") for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
# The allocator settings of every chapter kernel (``prepare``: a build's, a sweep's, a chapter run alone), which
# passes them on to its Dask workers: ``executor.MALLOC_DEFAULTS`` says why.
KERNEL_MALLOC = executor.malloc_env()


class RunnerError(UserError):
    """A problem the user can fix, with a message that says how; printed without a traceback by the CLI."""


class ChapterFailed(RunnerError):
    pass


def root() -> Path:
    """The checkout of the book this runs in (a folder with ``_toc.yml`` and ``lib/anisotropy``)."""
    found = paths.project_root()
    if found is None:
        raise RunnerError("The runner needs a checkout of the book (a folder with _toc.yml and lib/anisotropy).")
    return found


@dataclass
class Outcome:
    name: str
    path: Path | str  # the executed notebook (a path, or a URL of the results store), or the partial one on failure
    seconds: float
    reused: bool = False
    error: str | None = None
    params: dict = field(default_factory=dict)
    failure: dict | None = None  # what went wrong, as data: a worker reports it, the client words it (``finish``)
    glued: dict | None = None  # the glued values of a finished notebook (read where it ran)
    log: str | None = None  # the kernel's messages
    blocked: bool = False  # not executed: a chapter it runs after failed
    cpu_seconds: float | None = None  # CPU time of the chapter's kernel and every process it started
    span: tuple[float, float] | None = None  # (start, end) in a build, seconds since it started (``execute_all``)


@dataclass
class Job:
    """Everything needed to execute one chapter anywhere (a thread here, a Dask worker on another machine): the
    chapter source as a notebook, what papermill injects, the stamp the executed notebook will carry, where it goes
    (a path or a URL), and the kernel's extra environment (None removes a variable)."""

    name: str
    notebook: str
    injected: dict
    params: dict
    stamp: dict
    output: str
    env: dict = field(default_factory=dict)
    cwd: str | None = None
    log: str = ""


def _parameters(name: str, profile: str, overrides: dict | None = None) -> tuple[dict, dict, dict]:
    """(the parameters chapter ``name`` is given under ``profile`` plus ``overrides``, those and ``profile`` where
    the notebook has that parameter: what its stamp holds, the defaults of its notebook)."""
    defaults = profiles.notebook_parameters(name)
    given = {**profiles.chapter_parameters(profile, name), **(overrides or {})}
    return given, ({"profile": profile, **given} if "profile" in defaults else dict(given)), defaults


def _stamp(profile: str, params: dict, name: str) -> dict:
    """What an executed notebook is keyed by: profile, parameters, its source, and the library's code (every module:
    figures and text depend on them all; the numbers themselves come from the results store, keyed more finely); for
    a chapter that owns claims or gathers other chapters' rows, what those depend on (``claims.stamp_inputs``); the
    stamps of the chapters it runs after, under the same profile; and the recipes of the self-trained suites it
    measures (its front matter's ``suites``, ``book.units``): a changed recipe executes it again (it was reused with
    the old numbers)."""
    # cost: the claims ledger and the model table (~0.13 s) into each `python -m anisotropy` start (book.cli imports
    # this module through the runner); only a chapter about to execute is stamped
    from anisotropy.claims.ledger import stamp_inputs

    stamp = {"profile": profile, "parameters": params, "source_hash": profiles.source_hash(name),
             "code": fingerprint.package()}
    after = profiles.read_notebook(name).metadata.get("anisotropy", {}).get("after", []) or []
    if after:
        stamp["after"] = {dep: _stamp(profile, _parameters(dep, profile)[1], dep) for dep in after}
    read = units.suites_read(name)
    if read:  # the recipes of the suites it measures: other recipes, other checkpoints
        specs = profiles.chapter_parameters(profile, "checkpoint_suites").get("suites", {})
        stamp["suites"] = {suite: specs.get(suite) for suite in read}
    inputs = stamp_inputs(name, profile)
    return stamp if inputs is None else {**stamp, "inputs": inputs}


def first_line(text) -> str:
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(text)).strip().splitlines()
    return lines[0].strip() if lines else ""


def _cell_location(name: str, cell_source: str) -> str:
    """Where a failing cell is in ``notebooks/<name>.md``: "code cell K (notebooks/<name>.md, line L)"."""
    if not cell_source:
        return "a cell"
    try:
        code = [c.source for c in profiles.read_notebook(name).cells if c.cell_type == "code"]
        text = profiles.notebook_source(name).read_text()
    except (OSError, profiles.ProfileError):
        return "a cell"
    if cell_source not in code:
        return "the injected parameters cell" if "# Parameters" in cell_source.splitlines()[0] else "a cell"
    k = code.index(cell_source) + 1
    at = text.find(cell_source)
    line = f", line {text[:at].count(chr(10)) + 1}" if at >= 0 else ""
    return f"code cell {k} (notebooks/{name}.md{line})"


def _failure(exc) -> dict:
    import papermill

    if isinstance(exc, papermill.PapermillExecutionError):
        return {"cell": exc.source, "ename": exc.ename, "evalue": first_line(exc.evalue)}
    # the kernel died (e.g. killed for memory), could not start, or timed out
    return {"kernel": f"{type(exc).__name__}: {first_line(exc)}"}


def _failure_message(name: str, failure: dict, output, log=None) -> str:
    """One paragraph: notebook, cell, the exception line, the partially executed notebook."""
    if "cell" in failure:
        what = f"{_cell_location(name, failure['cell'])} raised {failure['ename']}: {failure['evalue']}"
    else:
        what = f"the kernel failed ({failure['kernel']})"
        if log is not None:
            what += f"; kernel messages: {log}"
    return f"{name}: {what}\n    partially executed notebook: {output}"


def prepare(name: str, profile: str, overrides: dict | None = None, output=None, rerun: bool = False,
            recompute: bool = False, env: dict | None = None) -> "Job | Outcome":
    """The ``Job`` that executes chapter ``name`` under ``profile`` (plus ``overrides``) into ``output`` (a path or
    a URL; default ``book/executed/<name>.ipynb``), or, when a finished notebook with the same stamp (profile,
    parameters, source, code) is already there and neither ``rerun`` nor ``recompute`` is given, its reused
    ``Outcome``. Parameters are checked here, before anything runs, and so is the chapter's plan against the runtime
    the profile assumes (``chapters.plans.check``). ``recompute`` makes the chapter recompute every
    result it reads from the store (``ANISOTROPY_RECOMPUTE``); ``env`` is added to the kernel's environment."""
    import nbformat

    given, params, defaults = _parameters(name, profile, overrides)
    profiles.check(name, given, defaults, profiles.parameter_rules(name))
    injected = {"profile": profile, **(overrides or {})} if "profile" in defaults else dict(given)
    output = output if output is not None else root() / EXECUTED / f"{name}.ipynb"
    stamp = _stamp(profile, params, name)
    if not (rerun or recompute) and is_current(output, stamp):
        return Outcome(name, output, 0.0, reused=True, params=params)
    # cost: the plans, the budget and the data sources (~0.2 s) into each `python -m anisotropy` start; only a
    # chapter about to execute is checked
    from anisotropy.chapters import plans

    # what the chapter's first cell checks (chapters.plans.apply), here before a kernel starts: a part that does not
    # fit the profile's runtime stops the run in one line
    plans.check(name, {k: v for k, v in {**defaults, **given}.items() if k not in profiles.RUNTIME}, profile)
    kernel_env = {"ANISOTROPY_RUNNER": "1",  # parameters are checked here; profiles.apply need not check again
                  "ANISOTROPY_FIGURES": str(root() / "_build" / "figures" / name), **KERNEL_MALLOC, **(env or {})}
    if recompute:
        kernel_env[results.RECOMPUTE_ENV] = "1"
    stem = str(output).replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".ipynb")
    return Job(name, nbformat.writes(profiles.read_notebook(name)), injected, params, stamp, str(output),
               env=kernel_env, cwd=str(root()), log=f"_build/logs/{stem}.log")


def run_job(job: Job) -> Outcome:
    """Execute a ``Job`` with papermill, here (a thread of the build, or a Dask worker's task thread).

    The notebook is executed into a hidden ``.<stem>.partial.ipynb`` (beside the output, or in a temporary folder
    when the output is a URL) and gets the final name only once complete, so an interrupted run never leaves an
    output that a later run takes for finished; a notebook at a URL is uploaded whole once complete (a failed one
    under its partial name). Failures come back as data (``Outcome.failure``), worded by ``finish``."""
    import nbformat
    import papermill

    remote = results.is_url(job.output)
    stem = job.output.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".ipynb")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="anisotropy-") as tmp:
        tmp = Path(tmp)
        cwd = Path(job.cwd) if job.cwd and Path(job.cwd).is_dir() else tmp
        log = cwd / job.log if job.log else tmp / f"{stem}.log"
        src = tmp / f"{job.name}.ipynb"
        src.write_text(job.notebook)
        if remote:
            partial, partial_at = tmp / f".{stem}.partial.ipynb", f"{job.output.rsplit('/', 1)[0]}/.{stem}.partial.ipynb"
        else:
            partial = Path(job.output).with_name(f".{stem}.partial.ipynb")
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial_at = partial
        env = dict(os.environ)
        for key, value in job.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        kernel_cpu: list[float] = []
        kernel_peak: list[int | None] = []
        try:
            with kernels.kernel(env, str(cwd), log, kernel_cpu, kernel_peak) as manager:
                echo = Echo(job.name, log)
                echo.start()
                try:
                    papermill.execute_notebook(str(src), str(partial), parameters=job.injected, kernel_name=KERNEL,
                                               progress_bar=False, log_output=False, kernel_manager_class=manager,
                                               iopub_timeout=IOPUB_TIMEOUT_S)
                finally:
                    echo.stop()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one report, never a traceback
            if remote and partial.is_file():
                write_bytes(partial_at, partial.read_bytes())
            return Outcome(job.name, partial_at, time.perf_counter() - start, params=job.params,
                           failure=_failure(exc), log=str(log))
        seconds = time.perf_counter() - start
        cpu_seconds = round(sum(kernel_cpu), 2) if kernel_cpu else None
        nb = nbformat.read(partial, as_version=4)
        fill_wall_time(nb, seconds)
        hide_parameter_cells(nb)
        forget_paths(nb, job.name, job.output)
        peaks = [p for p in kernel_peak if p is not None]
        nb.metadata["anisotropy"] = {**nb.metadata.get("anisotropy", {}), "stamp": job.stamp, "complete": True,
                                     "seconds": round(seconds, 2), "cpu_seconds": cpu_seconds,
                                     "peak_rss_bytes": max(peaks) if peaks else None}
        nbformat.write(nb, partial)
        glued = glued_values(partial)
        if remote:
            write_bytes(job.output, partial.read_bytes())
        else:
            os.replace(partial, job.output)  # only a complete notebook ever carries the final name
    return Outcome(job.name, job.output if remote else Path(job.output), seconds, params=job.params, glued=glued,
                   log=str(log), cpu_seconds=cpu_seconds)


def finish(outcome: Outcome) -> Outcome:
    """Word a failure reported as data (here, where the chapter's source is at hand)."""
    if outcome.failure and not outcome.error:
        outcome.error = _failure_message(outcome.name, outcome.failure, outcome.path, outcome.log)
    return outcome


def execute(name: str, profile: str, overrides: dict | None = None, output: Path | None = None,
            rerun: bool = False, recompute: bool = False, quiet: bool = False, env: dict | None = None) -> Outcome:
    """Execute chapter ``name`` under ``profile`` (plus ``overrides``) into ``output`` (``prepare``, then ``run_job``
    here).

    Papermill injects ``profile`` and the overrides; the chapter takes the rest from the profile (``profiles.apply``).
    ``rerun`` executes it again even if a current notebook exists; ``recompute`` also recomputes every result the
    chapter reads from the results store (``ANISOTROPY_RECOMPUTE``) instead of reading it.
    A finished notebook whose stamp (profile, parameters, source hash) matches is reused, not executed again.
    """
    job = prepare(name, profile, overrides, output, rerun=rerun, recompute=recompute, env=env)
    return job if isinstance(job, Outcome) else finish(run_job(job))

