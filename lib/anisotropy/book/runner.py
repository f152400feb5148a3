"""Papermill execution and the book build (a sweep of one chapter: ``book.sweeps``).

A chapter is ``notebooks/<name>.md`` (MyST markdown, paired with an output-free ``notebooks/<name>.ipynb`` for
Colab). The runner executes chapters in ``_toc.yml`` order under a profile (``anisotropy.profiles``) into
``book/executed/<name>.ipynb``, then Jupyter Book renders them; execution inside Jupyter Book stays off. Papermill
injects only ``profile`` and the user's overrides: the chapter resolves every other parameter from the profile
itself (``profiles.apply``), exactly as it does on Colab. An executed notebook records the profile, parameters and source hash it ran with, so a build
that is interrupted resumes where it stopped and a finished chapter is not executed again.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from anisotropy import executor, fingerprint, paths, profiles, progress as progress_lines, results
from anisotropy.book import kernels, timeline, units
from anisotropy.errors import UserError

from anisotropy.profiles import EXECUTED, chapters  # noqa: E402 - the book's chapters, read from _toc.yml

SWEEPS = Path("book") / "sweeps"
SWEEPS_IN_STORE = "_sweeps"  # <store URL>/_sweeps/<chapter>/: a sweep's notebooks when the store is a URL (``book.sweeps``)
KERNEL = "python3"
# How long a cell's outputs may trail its reply. papermill stops the chapter after nbclient's default 4 s (it raises on
# an IOPub timeout): on a loaded 2-core machine (load average 14, a test run beside the build) two chapters of the
# smoke book stopped that way although their cells had finished. A slow machine must not fail a build; a hung kernel
# is still caught by the kernel's liveness check.
IOPUB_TIMEOUT_S = 120


# A running chapter's console: its progress lines (``progress.say``) as they reach its log, polled every ECHO_POLL_S,
# and a line after SILENCE_S without one, so that no chapter is silent for a minute.
ECHO_POLL_S = 2.0
SILENCE_S = 55.0


class _Echo(threading.Thread):
    """Echo the progress lines a chapter's kernel writes to its ``log`` (``progress.MARK``) to this console, each
    with the chapter's name and its elapsed time, and say that it is still running after ``SILENCE_S`` of silence."""

    def __init__(self, name: str, log: Path):
        super().__init__(name=f"echo-{name}", daemon=True)
        self.chapter, self.log, self.start_time = name, Path(log), time.perf_counter()
        self.done, self.position, self.last = threading.Event(), 0, time.perf_counter()

    def _drain(self) -> None:
        try:
            with open(self.log, "rb") as stream:
                stream.seek(self.position)
                data = stream.read()
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self.position += len(whole)
        for line in whole.decode(errors="replace").splitlines():
            if line.startswith(progress_lines.MARK):
                self._print(line[len(progress_lines.MARK):])

    def _print(self, text: str) -> None:
        self.last = time.perf_counter()
        print(f"    {self.chapter} [{self.last - self.start_time:5.0f} s] {text}", flush=True)

    def tick(self) -> None:
        """One poll: echo the new progress lines, or say the chapter is still running after ``SILENCE_S``."""
        self._drain()
        if time.perf_counter() - self.last >= SILENCE_S:
            self._print("still running (no progress line in the last minute)")

    def run(self) -> None:
        while not self.done.wait(ECHO_POLL_S):
            self.tick()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self._drain()


class RunnerError(UserError):
    """A problem the user can fix, with a message that says how; printed without a traceback by the CLI."""


class ChapterFailed(RunnerError):
    pass


def root() -> Path:
    found = paths.project_root()
    if found is None:
        raise RunnerError("The runner needs a checkout of the book (a folder with _toc.yml and lib/anisotropy).")
    return found


# ---- execution ------------------------------------------------------------------------------------------------------

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


def read_text(where) -> str | None:
    """The text of a file at a path or an fsspec URL; None when it is not there."""
    try:
        if results.is_url(where):
            fs, path = results.filesystem(str(where))
            return fs.cat_file(path).decode() if fs.exists(path) else None
        return Path(where).read_text() if Path(where).is_file() else None
    except (OSError, UnicodeDecodeError):
        return None


def write_bytes(where, data: bytes) -> None:
    """Write a whole file at a path (atomically: under a temporary name, then renamed) or an fsspec URL (one
    request: the object exists complete or not at all)."""
    if results.is_url(where):
        fs, path = results.filesystem(str(where))
        fs.pipe_file(path, data)
    else:
        results.atomic_write(Path(where), lambda p: p.write_bytes(data))


def _is_current(output, stamp: dict) -> bool:
    text = read_text(output)
    if text is None:
        return False
    try:
        meta = json.loads(text)["metadata"].get("anisotropy", {})
    except (ValueError, KeyError, AttributeError):
        return False
    return meta.get("stamp") == json.loads(json.dumps(stamp)) and meta.get("complete") is True


def _fill_wall_time(nb, seconds: float) -> None:
    from anisotropy.pages.report import WALL_TIME_PLACEHOLDER

    text = f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/html" in data and WALL_TIME_PLACEHOLDER in data["text/html"]:
                data["text/html"] = data["text/html"].replace(WALL_TIME_PLACEHOLDER, text)


def _hide_parameter_cells(nb) -> None:
    """The provenance box lists every parameter; the raw parameter cells stay in the notebook, not on the page."""
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("parameters" in tags or "injected-parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")


def _forget_paths(nb, name: str, output) -> None:
    """papermill records where it read and wrote the notebook: here a temporary file and a path of this machine (the
    build root, which a published notebook must not show). What stays is the chapter's source and the output relative
    to the checkout."""
    record = nb.metadata.get("papermill", {})
    record["input_path"] = f"notebooks/{name}.md"
    output, root_ = str(output), paths.project_root()
    if root_ is not None and not results.is_url(output) and Path(output).resolve().is_relative_to(root_.resolve()):
        output = Path(output).resolve().relative_to(root_.resolve()).as_posix()
    record["output_path"] = output


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
    if not (rerun or recompute) and _is_current(output, stamp):
        return Outcome(name, output, 0.0, reused=True, params=params)
    # what the chapter's first cell checks (chapters.plans.apply), here before a kernel starts: a part that does not
    # fit the profile's runtime stops the run in one line
    from anisotropy.chapters import plans

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
                echo = _Echo(job.name, log)
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
        _fill_wall_time(nb, seconds)
        _hide_parameter_cells(nb)
        _forget_paths(nb, job.name, job.output)
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


def progress(outcome: Outcome, profile: str, index: int, total: int, label: str | None = None,
             estimate: float | None = None) -> None:
    """The line of a chapter that ended: its time (and CPU time), and the estimate it started with."""
    if outcome.blocked:
        status = "not run"
    else:
        status = "reused" if outcome.reused else ("FAILED" if outcome.error else f"{outcome.seconds:7.1f} s")
        if outcome.cpu_seconds is not None and not (outcome.reused or outcome.error):
            status += f" ({outcome.cpu_seconds:.0f} s CPU)"
        if estimate and not outcome.reused:
            status += f", estimated {estimate:.0f} s"
    print(f"[{index}/{total}] {label or outcome.name:<32} profile={profile:<6} {status}", flush=True)


def started(name: str, profile: str, estimate: float | None = None) -> None:
    """The line of a chapter that starts executing (with its estimated wall time on this machine, when known)."""
    about = f" (estimated {estimate:.0f} s here)" if estimate else ""
    print(f"[start] {name:<32} profile={profile:<6}{about}", flush=True)


# ---- what a chapter runs after ---------------------------------------------------------------------------------------

def dependencies(names: list[str] | None = None) -> dict[str, list[str]]:
    """For each chapter, the chapters it runs after, as its front matter states (``anisotropy: {after: [...]}``):
    those whose stored results it reads. Each must be a chapter that comes before it in ``_toc.yml`` (the serial
    order stays a valid order). The self-trained suites it measures are not among them (``suites``: ``book.units``)."""
    order = chapters()
    names = names or order
    found, problems = {}, []
    for name in names:
        after = profiles.read_notebook(name).metadata.get("anisotropy", {}).get("after", []) or []
        for dep in after:
            if dep not in order:
                problems.append(f"notebooks/{name}.md runs after {dep!r}, which is not a chapter of _toc.yml")
            elif name in order and order.index(dep) >= order.index(name):
                problems.append(f"notebooks/{name}.md runs after {dep!r}, which comes after it in _toc.yml")
        found[name] = list(after)
    if problems:
        raise RunnerError("; ".join(problems) + ".")
    return found


# One torch/BLAS thread per chapter kernel of a build: the build keeps every core busy with chapters (and their own
# Dask workers), and two threads on one core spin against each other. It also keeps the numbers independent of how
# the chapters happen to overlap. A value set in the environment is kept.
KERNEL_THREADS = {name: os.environ.get(name, "1") for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
# The allocator settings of every chapter kernel (``prepare``: a build's, a sweep's, a chapter run alone), which
# passes them on to its Dask workers: ``executor.MALLOC_DEFAULTS`` says why.
KERNEL_MALLOC = executor.malloc_env()


@dataclass
class Plan:
    """What a build executes: its ``chapters`` (``_toc.yml`` order) with what each runs after (``after``), and the
    training ``units`` the chapters to execute need (``book.units``), costliest first."""

    profile: str
    chapters: list[str]
    after: dict[str, list[str]]
    units: list = field(default_factory=list)

    @property
    def items(self) -> list[str]:
        """The units' names, then the chapters."""
        return [u.name for u in self.units] + self.chapters


def plan(profile: str, only: list[str] | None = None, rerun: bool = False, recompute: bool = False) -> Plan:
    """The ``Plan`` of a build under ``profile`` (``only`` some chapters): a unit for every run not yet trained of
    the suites read by the chapters that will execute (not reused: ``prepare``, asked here once more; a chapter is
    prepared again when it starts, since a gatherer's stamp depends on what the chapters before it stored)."""
    names = chapters()
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise RunnerError(f"Not chapters of the book: {', '.join(unknown)}. Chapters: {', '.join(names)}.")
        names = [n for n in names if n in only]
    profiles.check_profile(profile, names)
    after = dependencies(names)

    def executes(name: str) -> bool:
        try:
            return not isinstance(prepare(name, profile, rerun=rerun, recompute=recompute), Outcome)
        except Exception:  # noqa: BLE001 - its failure is reported when the build reaches it
            return False

    reading = [n for n in names if units.suites_read(n) and executes(n)]
    return Plan(profile, names, after, units.needed(profile, reading) if reading else [])


def longest_first(items: list[str], seconds: dict[str, float]) -> list[str]:
    """``items`` by estimated ``seconds``, longest first; those without an estimate last, in their own order."""
    return sorted(items, key=lambda name: -seconds.get(name, 0.0))


def _build_item(name: str, env: dict, profile: str, rerun: bool, recompute: bool, clock: float,
                estimates: dict | None = None) -> Outcome:
    """Execute one item of a build (a chapter, or a training unit in a process of its own) with the slots' ``env``;
    its outcome carries its span on the build's ``clock``."""
    start = time.perf_counter()
    if units.is_unit(name):
        outcome = _train_unit(units.parse(name), env, profile, (estimates or {}).get(name))
    else:
        job = prepare(name, profile, rerun=rerun, recompute=recompute, env={**KERNEL_THREADS, **env})
        if isinstance(job, Outcome):  # reused: nothing starts
            return job
        started(name, profile, (estimates or {}).get(name))
        outcome = finish(run_job(job))
    if not outcome.reused:
        outcome.span = (start - clock, time.perf_counter() - clock)
    return outcome


def _train_unit(unit, env: dict, profile: str, estimate: float | None = None) -> Outcome:
    """Train one unit's run in a process of its own (``book.units``), its progress lines echoed to this console; a
    run that a chapter has trained, or is training, by now needs no process (it is reused)."""
    from anisotropy.training import checkpoints

    recipe = unit.recipe(profile)
    if checkpoints.is_trained(recipe) or checkpoints.in_training(recipe):
        return Outcome(unit.name, checkpoints.run_dir(recipe), 0.0, reused=True)
    started(unit.name, profile, estimate)
    log = root() / "_build" / "logs" / unit.log
    cmd = [sys.executable, "-m", "anisotropy.book.units", unit.suite, str(unit.seed), profile]
    start = time.perf_counter()
    echo = _Echo(unit.name, log)
    echo.start()
    try:
        code, cpu = kernels.process(cmd, {**os.environ, **KERNEL_THREADS, **KERNEL_MALLOC, **env}, str(root()), log)
    finally:
        echo.stop()
    seconds = time.perf_counter() - start
    error = None
    if code != 0:
        tail = [line for line in (read_text(log) or "").splitlines() if line.strip()][-3:]
        error = f"{unit.name}: the training run failed (exit {code}): {' / '.join(tail)}\n    log: {log}"
    return Outcome(unit.name, log, seconds, error=error, cpu_seconds=round(cpu, 2) if cpu is not None else None)


def execute_all(profile: str, only: list[str] | None = None, rerun: bool = False, recompute: bool = False,
                jobs: int | None = None, processes: bool = False, estimates: dict | None = None,
                plan_: Plan | None = None) -> list[Outcome]:
    """Execute the chapters (``only`` some) under ``profile``, and the training runs of the suites they read as units
    of their own (``book.units``): each chapter after the chapters it depends on (``dependencies``), independent
    items at the same time, longest first (``estimates``, item -> estimated wall seconds, else the reference build's
    CPU seconds, ``machine.item_seconds``), ``jobs`` at a time (default: the cores; the cores are shared with what a
    chapter starts itself through ``executor.map``, and a chapter that waits for a unit's run gives its core back
    meanwhile, ``executor.waiting``). A line per item as it starts and as it ends (with its estimate), its progress
    lines in between (``_Echo``); a failed item does not stop the others, but the chapters that run after it are not
    run. Returns the outcomes: the units', then the chapters' in ``_toc.yml`` order. ``plan_``: the build's ``plan``
    if already made."""
    import functools

    from anisotropy.book import machine

    plan_ = plan_ or plan(profile, only, rerun=rerun, recompute=recompute)
    items = plan_.items
    order = longest_first(items, estimates or machine.item_seconds(machine.reference(), items, profile))
    outcomes: dict[str, Outcome] = {}

    def done(name, result) -> None:
        if isinstance(result, executor.Blocked):
            outcome = Outcome(name, root() / EXECUTED / f"{name}.ipynb", 0.0, blocked=True,
                              error=f"{name}: not run, because it runs after {result.because}, which "
                                    f"{'was not run' if outcomes[result.because].blocked else 'failed'}")
        elif isinstance(result, BaseException):
            outcome = Outcome(name, root() / EXECUTED / f"{name}.ipynb", 0.0,
                              error=f"{name}: {type(result).__name__}: {first_line(result)}")
        else:
            outcome = result
        outcomes[name] = outcome
        progress(outcome, profile, len(outcomes), len(items), estimate=(estimates or {}).get(name))

    fn = functools.partial(_build_item, profile=profile, rerun=rerun, recompute=recompute, clock=time.perf_counter(),
                           estimates=estimates)
    try:
        executor.schedule(fn, order, plan_.after, jobs=jobs, processes=processes, failed=lambda o: bool(o.error),
                          on_done=done)
    except KeyboardInterrupt:
        kernels.stop_kernels()  # the chapters and units still running: their partial notebooks stay partial
        raise
    return [outcomes[n] for n in items]


def _cpu_seconds() -> float:
    """CPU time of this process and of every child it has waited for (the chapters' kernels, with whatever they
    started and waited for in turn: their Dask workers, jupyter-book). The one POSIX-only call of the library: where
    ``resource`` is missing (Windows), this process's own CPU time alone, the children counting 0."""
    try:
        import resource
    except ImportError:
        return time.process_time()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def vendor_mathjax() -> Path:
    """Copy MathJax's self-contained SVG build (and its licence) from the installed ``django-static-mathjax`` wheel
    into ``book/_static/mathjax/``, where ``_config.yml``'s ``mathjax_path`` points."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RunnerError("MathJax is missing: pip install django-static-mathjax==3.2.2.1 (`make book` does)")
    source = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax"
    target = root() / "book" / "_static" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("es5/tex-svg.js", "LICENSE"):
        dest = target / Path(name).name
        if not dest.is_file() or dest.stat().st_size != (source / name).stat().st_size:
            shutil.copy2(source / name, dest)
    return target / "tex-svg.js"


def build_html(strict: bool = True) -> Path:
    """Render the executed notebooks with Jupyter Book (a warning is a failure when ``strict``)."""
    vendor_mathjax()
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(root()), "--builder", "html"]
    if strict:
        cmd += ["-W", "-n", "--keep-going"]
    proc = subprocess.run(cmd, cwd=root(), capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines()
                 if "WARNING" in line or "ERROR" in line or "Error" in line]
        detail = "\n    ".join(lines[-15:]) or (proc.stdout + proc.stderr)[-2000:]
        raise RunnerError(f"Jupyter Book failed to render the book:\n    {detail}")
    return root() / "_build" / "html" / "index.html"


def build(profile: str = "local", rerun: bool = False, recompute: bool = False, jobs: int | None = None,
          processes: bool = False, html: bool = True) -> Path | None:
    """Execute every chapter under ``profile``, and the training runs of the suites they read as units of their own
    (``execute_all``: independent items at once, longest first, ``jobs`` at a time), then render the book (unless not
    ``html``: then returns None). Reports wall and CPU time beside the machine's calibration (``book.machine``):
    before it starts, the estimate from the committed reference build, and after it, the measured figures with the
    cores busy on average and the idle core-seconds on the critical path (``book.timeline``), also written to
    ``_build/build-times.json`` (the reference's format); raises ``ChapterFailed`` with one report."""
    from anisotropy.book import machine
    from anisotropy.executor import cores

    start, cpu_start = time.perf_counter(), _cpu_seconds()
    jobs = max(1, jobs or cores())
    cal = ref = None
    if profile == machine.REFERENCE_PROFILE:  # the full-size build: its times are worth comparing across machines
        ref = machine.reference()
        cal = machine.calibrate(profile)
        print(f"This machine: {machine.describe(cal)} (calibrated in {cal['seconds']:.0f} s).", flush=True)
    plan_ = plan(profile, rerun=rerun, recompute=recompute)
    estimates = None
    if cal and ref and ref.get("calibration") and ref.get("profile") == profile:
        fresh = [u.name for u in units.needed(profile, plan_.chapters, trained=True)] + plan_.chapters
        est = machine.estimate_build(cal, ref, fresh, profile)
        estimates = {name: seconds / est["speed_index"] for name, seconds in
                     machine.item_seconds(ref, plan_.items, profile).items()}
        print(f"Estimated for a fresh build here: {est['cpu_seconds'] / 60:.0f} CPU-minutes, "
              f"{est['wall_seconds'] / 60:.0f} minutes of wall time (the reference build of {ref['commit']}: "
              f"{ref['cpu_seconds'] / 60:.0f} CPU-minutes on a machine {1 / est['speed_index']:.2f} times "
              f"{'slower' if est['speed_index'] > 1 else 'faster'} at the suites' updates; one calibration varies "
              f"10-30% between runs a minute apart on the same machine, so read it as +/- 20%; chapters already "
              f"executed are reused, so a rebuild takes less).", flush=True)
    outcomes = execute_all(profile, rerun=rerun, recompute=recompute, jobs=jobs, processes=processes,
                           estimates=estimates, plan_=plan_)
    failed = [o for o in outcomes if o.error and not o.blocked]
    blocked = [o for o in outcomes if o.blocked]
    ran = sum(o.seconds for o in outcomes)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    spans = [timeline.Span(o.name, *o.span, o.cpu_seconds or 0.0, tuple(plan_.after.get(o.name, ())))
             for o in outcomes if o.span]
    path = timeline.critical_path(spans)
    idle = timeline.idle_core_seconds(spans, path, jobs)
    trained = len(plan_.units)
    print(f"{len(outcomes) - trained - len(failed) - len(blocked)} of {len(plan_.chapters)} chapters executed"
          f"{f' and {trained} training run(s) as units' if trained else ''} ({ran:.0f} s of execution, up to {jobs} "
          f"at a time): {wall:.0f} s of wall time, {cpu:.0f} s of CPU time (this process, the chapters' kernels and "
          f"the units), {timeline.cores_busy(cpu, wall):.2f} cores busy on average, {idle:.0f} idle core-seconds on "
          f"the critical path ({' > '.join(s.name for s in path) or 'nothing executed'}).")
    if failed or blocked:
        report = "\n".join(f"  - {o.error}" for o in failed + blocked)
        after = f" ({len(blocked)} not run after them)" if blocked else ""
        runs = sum(units.is_unit(o.name) for o in failed)
        what = f"{len(failed) - runs} chapter(s)" + (f" and {runs} training run(s)" if runs else "")
        raise ChapterFailed(f"{what} failed{after}; the book was not rendered:\n{report}")
    if not html:
        return None
    index = build_html()
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    print(f"Book built in {wall:.0f} s of wall time, {cpu:.0f} s of CPU time ({timeline.cores_busy(cpu, wall):.2f} "
          f"cores busy on average; {idle:.0f} idle core-seconds on the critical path): open {index}")
    _record_times(profile, outcomes, wall, cpu, cal, spans=spans, path=path, idle=idle)
    return index


def _record_times(profile: str, outcomes: list[Outcome], wall: float, cpu: float, cal: dict | None,
                  spans: list | None = None, path: list | None = None, idle: float | None = None) -> Path:
    """Write ``_build/build-times.json``: the build's wall and CPU seconds, each executed item's (chapter's or
    training unit's) CPU and wall seconds and span, the cores busy on average, the critical path with its idle
    core-seconds (``book.timeline``), and the calibration, in the format of ``book.machine.REFERENCE`` (a fresh
    build's file, copied there, is the next reference; ``benchmarks/results/builds.csv``'s ``cores_busy`` and
    ``idle_core_s`` come from it). With chapters reused, the file describes a partial build (``reused`` lists
    them)."""
    per = {o.name: o.cpu_seconds for o in outcomes if o.cpu_seconds is not None and not o.reused}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root(), capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    record = {"profile": profile, "commit": commit, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
              "chapters_cpu_seconds": per, "other_cpu_seconds": round(max(0.0, cpu - sum(per.values())), 1),
              "chapters_wall_seconds": {o.name: round(o.seconds, 1) for o in outcomes if not o.reused},
              "reused": [o.name for o in outcomes if o.reused],
              "cores_busy": round(timeline.cores_busy(cpu, wall), 2),
              "idle_core_s": None if idle is None else round(idle),
              "critical_path": [s.name for s in path or []],
              "spans": {s.name: [round(s.start, 1), round(s.end, 1)] for s in spans or []}, "calibration": cal}
    out = root() / "_build" / "build-times.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return out


# ---- glued values ---------------------------------------------------------------------------------------------------

# Glued names that report a wall-clock measurement (training or run time) end this way; they are the only glued
# values allowed to differ between two runs of the same profile and seed.
WALL_CLOCK_GLUE = re.compile(r"(seconds|minutes)$")


def glued_values(nb_path, wall_clock: bool = True) -> dict:
    """The scalars a notebook (a path, or a URL of the results store) glued, as plain text (myst-nb stores them as
    ``display_data`` outputs tagged ``scrapbook``, under ``application/papermill.record/text/plain``);
    ``wall_clock=False`` leaves out timings."""
    import nbformat

    nb = nbformat.reads(read_text(nb_path), as_version=4) if results.is_url(nb_path) else \
        nbformat.read(nb_path, as_version=4)
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            data = out.get("data", {})
            text = next((v for k, v in data.items() if k.endswith("text/plain")), None)
            if not name or text is None or any(k.endswith("image/png") for k in data):
                continue
            if wall_clock or not WALL_CLOCK_GLUE.search(name):
                try:  # report.glue stores formatted strings, so most values come back as their repr
                    values[name] = ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    values[name] = text
    return values
