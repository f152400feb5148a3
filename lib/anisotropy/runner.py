"""Papermill execution, sweeps and the book build.

A chapter is ``notebooks/<name>.md`` (MyST markdown, paired with an output-free ``notebooks/<name>.ipynb`` for
Colab). The runner executes chapters in ``_toc.yml`` order under a profile (``anisotropy.profiles``) into
``book/executed/<name>.ipynb``, then Jupyter Book renders them; execution inside Jupyter Book stays off. Papermill
injects only ``profile`` and the user's overrides: the chapter resolves every other parameter from the profile
itself (``profiles.apply``), exactly as it does on Colab. An executed notebook records the profile, parameters and source hash it ran with, so a build
that is interrupted resumes where it stopped and a finished chapter is not executed again.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import fingerprint, paths, profiles, results

from .profiles import EXECUTED, chapters  # noqa: E402 - the book's chapters, read from _toc.yml

SWEEPS = Path("book") / "sweeps"
KERNEL = "python3"


class RunnerError(profiles.ProfileError):
    """A problem the user can fix, with a message that says how; printed without a traceback by the CLI."""


class ChapterFailed(RunnerError):
    pass


def root() -> Path:
    found = paths.project_root()
    if found is None:
        raise RunnerError("The runner needs a checkout of the book (a folder with _toc.yml and lib/anisotropy).")
    return found


# ---- chapters -------------------------------------------------------------------------------------------------------

def paired_ipynb_text(name: str) -> str:
    """The exact text of the committed output-free ``notebooks/<name>.ipynb`` for the current source."""
    import nbformat

    nb = profiles.read_notebook(name)
    nb.metadata.pop("jupytext", None)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("vscode", None)
        # nbformat draws random cell ids; derive them from the content so the pair check is reproducible.
        cell["id"] = hashlib.sha256(f"{index}\n{cell.source}".encode()).hexdigest()[:8]
    return nbformat.writes(nb) + "\n"


_INSTALL_LINE = re.compile(r'^( *)%pip install -q "anisotropy\[colab\] @ git\+[^"]*"$', flags=re.M)


def sync(check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) every chapter's Colab install line, derived from the repository of
    ``_config.yml`` (``report.install_command``), and every ``notebooks/<name>.ipynb`` from its MyST source.

    Returns the names whose source or .ipynb was (or would be) changed.
    """
    from .report import install_command

    command = install_command()
    changed = []
    for md in sorted((root() / "notebooks").glob("*.md")):
        text = md.read_text()
        installed = _INSTALL_LINE.sub(lambda m: m.group(1) + command, text)
        if installed != text:
            changed.append(md.stem)
            if not check:
                md.write_text(installed)
        target = md.with_suffix(".ipynb")
        paired = paired_ipynb_text(md.stem)
        if not target.is_file() or target.read_text() != paired:
            changed.append(md.stem)
            if not check:
                target.write_text(paired)
    return sorted(set(changed))


# ---- execution ------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    name: str
    path: Path
    seconds: float
    reused: bool = False
    error: str | None = None
    params: dict = field(default_factory=dict)


def _stamp(profile: str, params: dict, name: str) -> dict:
    """What an executed notebook is keyed by: profile, parameters, its source, and the library's code (every module:
    figures and text depend on them all; the numbers themselves come from the results store, keyed more finely); for
    a chapter that owns claims or gathers other chapters' rows, what those depend on (``claims.stamp_inputs``)."""
    from .claims import stamp_inputs

    stamp = {"profile": profile, "parameters": params, "source_hash": profiles.source_hash(name),
             "code": fingerprint.package()}
    inputs = stamp_inputs(name, profile)
    return stamp if inputs is None else {**stamp, "inputs": inputs}


def _is_current(output: Path, stamp: dict) -> bool:
    if not output.is_file():
        return False
    try:
        meta = json.loads(output.read_text())["metadata"].get("anisotropy", {})
    except (OSError, ValueError, KeyError):
        return False
    return meta.get("stamp") == json.loads(json.dumps(stamp)) and meta.get("complete") is True


def _fill_wall_time(nb, seconds: float) -> None:
    from .report import WALL_TIME_PLACEHOLDER

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


def _first_line(text) -> str:
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


def _failure_message(name: str, exc, output: Path, log: Path | None = None) -> str:
    """One paragraph: notebook, cell, the exception line, the partially executed notebook."""
    import papermill

    if isinstance(exc, papermill.PapermillExecutionError):
        what = f"{_cell_location(name, exc.source)} raised {exc.ename}: {_first_line(exc.evalue)}"
    else:  # the kernel died (e.g. killed for memory), could not start, or timed out
        what = f"the kernel failed ({type(exc).__name__}: {_first_line(exc)})"
        if log is not None:
            what += f"; kernel messages: {log}"
    return f"{name}: {what}\n    partially executed notebook: {output}"


@contextmanager
def _stderr_to(path: Path):
    """Send this process's standard error (inherited by the kernel it starts) to ``path``: the kernel's start-up
    chatter stays out of the terminal, where only progress lines and one failure report belong."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "w") as log:
            os.dup2(log.fileno(), 2)
            try:
                yield
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def execute(name: str, profile: str, overrides: dict | None = None, output: Path | None = None,
            force: bool = False, recompute: bool = False, quiet: bool = False) -> Outcome:
    """Execute chapter ``name`` under ``profile`` (plus ``overrides``) into ``output``.

    Papermill injects ``profile`` and the overrides; the chapter takes the rest from the profile (``profiles.apply``).
    ``force`` executes it again even if a current notebook exists; ``recompute`` also recomputes every result the
    chapter reads from the results store (``ANISOTROPY_RECOMPUTE``) instead of reading it.
    A finished notebook whose stamp (profile, parameters, source hash) matches is reused, not executed again. The
    notebook is executed into a hidden ``.<stem>.partial.ipynb`` and renamed to ``output`` only once complete, so an
    interrupted run never leaves an output that a later run takes for finished.
    """
    import nbformat
    import papermill

    defaults = profiles.notebook_parameters(name)
    given = {**profiles.chapter_parameters(profile, name), **(overrides or {})}
    profiles.check(name, given, defaults, profiles.parameter_rules(name))
    params = {"profile": profile, **given} if "profile" in defaults else dict(given)
    injected = {"profile": profile, **(overrides or {})} if "profile" in defaults else dict(given)
    output = output or root() / EXECUTED / f"{name}.ipynb"
    stamp = _stamp(profile, params, name)
    if not (force or recompute) and _is_current(output, stamp):
        return Outcome(name, output, 0.0, reused=True, params=params)

    output.parent.mkdir(parents=True, exist_ok=True)
    env_backup = dict(os.environ)
    os.environ["ANISOTROPY_RUNNER"] = "1"  # parameters are checked here; profiles.apply need not check again
    if recompute:
        os.environ[results.RECOMPUTE_ENV] = "1"
    os.environ["ANISOTROPY_FIGURES"] = str(root() / "_build" / "figures" / name)
    partial = output.with_name(f".{output.stem}.partial.ipynb")
    log = root() / "_build" / "logs" / f"{output.stem}.log"
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / f"{name}.ipynb"
            nbformat.write(profiles.read_notebook(name), src)
            try:
                with _stderr_to(log):
                    papermill.execute_notebook(str(src), str(partial), parameters=injected, kernel_name=KERNEL,
                                               cwd=str(root()), progress_bar=False, log_output=False)
            except Exception as exc:  # noqa: BLE001 - every failure becomes one report, never a traceback
                message = _failure_message(name, exc, partial, log)
                return Outcome(name, partial, time.perf_counter() - start, error=message, params=params)
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    seconds = time.perf_counter() - start
    nb = nbformat.read(partial, as_version=4)
    _fill_wall_time(nb, seconds)
    _hide_parameter_cells(nb)
    nb.metadata["anisotropy"] = {"stamp": stamp, "complete": True, "seconds": round(seconds, 2)}
    nbformat.write(nb, partial)
    os.replace(partial, output)  # only a complete notebook ever carries the final name
    return Outcome(name, output, seconds, params=params)


def _progress(outcome: Outcome, profile: str, index: int, total: int, label: str | None = None) -> None:
    status = "reused" if outcome.reused else ("FAILED" if outcome.error else f"{outcome.seconds:7.1f} s")
    print(f"[{index}/{total}] {label or outcome.name:<32} profile={profile:<6} {status}", flush=True)


def execute_all(profile: str, only: list[str] | None = None, force: bool = False, recompute: bool = False
                ) -> list[Outcome]:
    names = chapters()
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise RunnerError(f"Not chapters of the book: {', '.join(unknown)}. Chapters: {', '.join(names)}.")
        names = [n for n in names if n in only]
    profiles.check_profile(profile, names)
    outcomes = []
    for i, name in enumerate(names, 1):
        outcome = execute(name, profile, force=force, recompute=recompute)
        _progress(outcome, profile, i, len(names))
        outcomes.append(outcome)
    return outcomes


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


def build(profile: str = "local", force: bool = False, recompute: bool = False) -> Path:
    """Execute every chapter under ``profile``, then render the book. Raises ``ChapterFailed`` with one report."""
    start = time.perf_counter()
    outcomes = execute_all(profile, force=force, recompute=recompute)
    failed = [o for o in outcomes if o.error]
    ran = sum(o.seconds for o in outcomes)
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} chapters executed ({ran:.0f} s of execution).")
    if failed:
        report = "\n".join(f"  - {o.error}" for o in failed)
        raise ChapterFailed(f"{len(failed)} chapter(s) failed; the book was not rendered:\n{report}")
    index = build_html()
    print(f"Book built in {time.perf_counter() - start:.0f} s: open {index}")
    return index


def clean(dry_run: bool = False) -> tuple[list[Path], int]:
    """Remove what no key of the current code reaches: stored results computed by other code, trained runs and
    tokenizers of another trainer, conversions of other converters, executed notebooks stamped with other code.
    Returns (paths, bytes freed)."""
    import shutil

    from . import formats, training

    stale = results.Store().stale() + training.stale_runs() + formats.stale_conversions()
    code = fingerprint.package()
    for folder in (root() / EXECUTED, root() / SWEEPS):
        for nb in sorted(folder.rglob("*.ipynb")) if folder.is_dir() else []:
            try:
                stamp = json.loads(nb.read_text())["metadata"].get("anisotropy", {}).get("stamp", {})
            except (OSError, ValueError, KeyError):
                stamp = {}
            if stamp.get("code") != code:
                stale.append(nb)
    size = sum(f.stat().st_size for p in stale for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())
    if not dry_run:
        for p in stale:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    return stale, size


# ---- sweeps ---------------------------------------------------------------------------------------------------------

def _slug(value) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


# Glued names that report a wall-clock measurement (training or run time) end this way; they are the only glued
# values allowed to differ between two runs of the same profile and seed.
WALL_CLOCK_GLUE = re.compile(r"(seconds|minutes)$")


def glued_values(nb_path: Path, wall_clock: bool = True) -> dict:
    """The scalars a notebook glued, as plain text (myst-nb stores them as ``display_data`` outputs tagged
    ``scrapbook``, under ``application/papermill.record/text/plain``); ``wall_clock=False`` leaves out timings."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
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


def sweep(name: str, profile: str, grid: dict[str, list]) -> Path:
    """Run chapter ``name`` once per point of the grid (cartesian product); one executed notebook per point, named by
    its parameters, and one table ``sweep.csv`` of every point's parameters and glued values."""
    import pandas as pd

    keys = list(grid)
    folder = root() / SWEEPS / name
    rows = []
    points = list(itertools.product(*(grid[k] for k in keys)))
    given = profiles.chapter_parameters(profile, name)
    defaults, rules = profiles.notebook_parameters(name), profiles.parameter_rules(name)
    for values in points:  # every point is checked before the first one runs
        profiles.check(name, {**given, **dict(zip(keys, values))}, defaults, rules)
    for i, values in enumerate(points, 1):
        point = dict(zip(keys, values))
        stem = "__".join([name, *(f"{k}={_slug(v)}" for k, v in point.items())])
        outcome = execute(name, profile, overrides=point, output=folder / f"{stem}.ipynb")
        _progress(outcome, profile, i, len(points), label=stem)
        row = {**point, "notebook": outcome.path.name, "seconds": round(outcome.seconds, 2),
               "error": outcome.error or ""}
        if not outcome.error:
            row.update(glued_values(outcome.path))
        rows.append(row)
    table = folder / "sweep.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    failed = [r for r in rows if r["error"]]
    if failed:
        raise ChapterFailed(f"{len(failed)} of {len(rows)} sweep points failed:\n" +
                            "\n".join(f"  - {r['error']}" for r in failed) + f"\n  table: {table}")
    return table
