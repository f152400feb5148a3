"""The book build (a sweep of one chapter: ``book.sweeps``).

A chapter is ``notebooks/<name>.md`` (MyST markdown, paired with an output-free ``notebooks/<name>.ipynb`` for
Colab). The runner executes chapters in ``_toc.yml`` order under a profile (``anisotropy.profiles``) into
``book/executed/<name>.ipynb``, then Jupyter Book renders them; execution inside Jupyter Book stays off. A build's
``plan`` holds the chapters, what each runs after (``dependencies``) and the training units the chapters need
(``book.units``); ``execute_all`` runs them at once, longest first, and ``build`` renders the book and records its
times (``book.timeline``).

The modules beside it, by concept (every name they held here stays importable from here, ``runner.<name>``: they were
this one module before it was split):

- ``book.execution``: one chapter's papermill job (``prepare``, ``run_job``, ``finish``, ``execute``, ``Outcome``);
- ``book.notebooks``: executed notebooks as files (``read_text``, ``write_bytes``) and their glued values
  (``glued_values``);
- ``book.console``: the lines of an item as it starts and ends (``started``, ``ended``) and its progress lines in
  between (``Echo``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from anisotropy import executor, profiles
from anisotropy.book import kernels, timeline, units
from anisotropy.book.console import Echo, ended, started
from anisotropy.book.execution import (KERNEL_MALLOC, KERNEL_THREADS, ChapterFailed, Outcome, RunnerError, finish,
                                       first_line, prepare, root, run_job)
from anisotropy.book.notebooks import read_text
from anisotropy.profiles import EXECUTED, chapters  # noqa: F401 - the book's chapters, read from _toc.yml

# The names this module held before it was split, importable from here as they were.
from anisotropy.book.console import ECHO_POLL_S, SILENCE_S  # noqa: F401
from anisotropy.book.console import Echo as _Echo  # noqa: F401
from anisotropy.book.execution import IOPUB_TIMEOUT_S, KERNEL, Job, execute  # noqa: F401
from anisotropy.book.execution import _parameters, _stamp  # noqa: F401
from anisotropy.book.notebooks import (SWEEPS, SWEEPS_IN_STORE, WALL_CLOCK_GLUE, glued_values,  # noqa: F401
                                       write_bytes)

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
    # cost: pulls torch (~1.1 s) into each `python -m anisotropy` start (book.cli imports this module); only a
    # build with a unit to train reads the checkpoints
    from anisotropy.training import checkpoints

    recipe = unit.recipe(profile)
    if checkpoints.is_trained(recipe) or checkpoints.in_training(recipe):
        return Outcome(unit.name, checkpoints.run_dir(recipe), 0.0, reused=True)
    started(unit.name, profile, estimate)
    log = root() / "_build" / "logs" / unit.log
    cmd = [sys.executable, "-m", "anisotropy.book.units", unit.suite, str(unit.seed), profile]
    start = time.perf_counter()
    echo = Echo(unit.name, log)
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
    lines in between (``console.Echo``); a failed item does not stop the others, but the chapters that run after it are not
    run. Returns the outcomes: the units', then the chapters' in ``_toc.yml`` order. ``plan_``: the build's ``plan``
    if already made."""
    # cost: pulls torch (~1.4 s) into each `python -m anisotropy` start (book.cli imports this module); only a
    # build reads the machine's calibration
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
        ended(outcome, profile, len(outcomes), len(items), estimate=(estimates or {}).get(name))

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
    # cost: pulls torch (~1.4 s) into each `python -m anisotropy` start (book.cli imports this module); only a
    # build reads the machine's calibration
    from anisotropy.book import machine

    start, cpu_start = time.perf_counter(), _cpu_seconds()
    jobs = max(1, jobs or executor.cores())
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

