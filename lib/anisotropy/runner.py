"""Profiles, papermill execution, sweeps and the book build.

A chapter is ``notebooks/<name>.md`` (MyST markdown, paired with an output-free ``notebooks/<name>.ipynb`` for
Colab). The runner executes chapters in ``_toc.yml`` order with the parameters of a profile
(``profiles/<profile>.yml``) into ``book/executed/<name>.ipynb``, then Jupyter Book renders them; execution inside
Jupyter Book stays off. An executed notebook records the profile, parameters and source hash it ran with, so a build
that is interrupted resumes where it stopped and a finished chapter is not executed again.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import paths

EXECUTED = Path("book") / "executed"
SWEEPS = Path("book") / "sweeps"
KERNEL = "python3"


class RunnerError(RuntimeError):
    """A problem the user can fix, with a message that says how; printed without a traceback by the CLI."""


class ChapterFailed(RunnerError):
    pass


def root() -> Path:
    found = paths.project_root()
    if found is None:
        raise RunnerError("The runner needs a checkout of the book (a folder with _toc.yml and lib/anisotropy).")
    return found


# ---- profiles -------------------------------------------------------------------------------------------------------

def available_profiles() -> list[str]:
    return sorted(p.stem for p in (root() / "profiles").glob("*.yml"))


def load_profile(name: str) -> dict:
    """The profile's YAML as a dict with keys ``description``, ``env`` and ``notebooks`` (name -> parameters)."""
    path = root() / "profiles" / f"{name}.yml"
    if not path.is_file():
        known = available_profiles()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise RunnerError(f"Unknown profile {name!r}.{hint} Known profiles: {', '.join(known)} (files in profiles/).")
    profile = yaml.safe_load(path.read_text()) or {}
    profile.setdefault("env", {})
    profile.setdefault("notebooks", {})
    return profile


# ---- chapters and their sources -------------------------------------------------------------------------------------

def chapters() -> list[str]:
    """Chapter names in ``_toc.yml`` order: every toc entry under ``book/executed/``."""
    toc = yaml.safe_load((root() / "_toc.yml").read_text())
    found: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            file = node.get("file")
            if isinstance(file, str) and file.startswith(EXECUTED.as_posix() + "/"):
                found.append(file.split("/")[-1].removesuffix(".ipynb"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def source(name: str) -> Path:
    path = root() / "notebooks" / f"{name}.md"
    if not path.is_file():
        known = [p.stem for p in (root() / "notebooks").glob("*.md")]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise RunnerError(f"No notebook {name!r} in notebooks/.{hint}")
    return path


def read_notebook(name: str):
    """The MyST source as an nbformat notebook with the python3 kernelspec (jupytext writes none; papermill needs one)."""
    import jupytext

    nb = jupytext.read(source(name))
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": KERNEL}
    nb.metadata.setdefault("jupytext", {}).pop("text_representation", None)
    return nb


def paired_ipynb_text(name: str) -> str:
    """The exact text of the committed output-free ``notebooks/<name>.ipynb`` for the current source."""
    import nbformat

    nb = read_notebook(name)
    nb.metadata.pop("jupytext", None)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("vscode", None)
        # nbformat draws random cell ids; derive them from the content so the pair check is reproducible.
        cell["id"] = hashlib.sha256(f"{index}\n{cell.source}".encode()).hexdigest()[:8]
    return nbformat.writes(nb) + "\n"


def sync(check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) every ``notebooks/<name>.ipynb`` from its MyST source.

    Returns the names whose .ipynb was (or would be) changed.
    """
    changed = []
    for md in sorted((root() / "notebooks").glob("*.md")):
        target = md.with_suffix(".ipynb")
        text = paired_ipynb_text(md.stem)
        if not target.is_file() or target.read_text() != text:
            changed.append(md.stem)
            if not check:
                target.write_text(text)
    return changed


# ---- parameters -----------------------------------------------------------------------------------------------------

def notebook_parameters(name: str) -> dict:
    """The parameters cell's names and default values (by papermill's own inspection)."""
    import papermill

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.ipynb"
        import nbformat

        nbformat.write(read_notebook(name), path)
        found = papermill.inspect_notebook(str(path))
    params = {}
    for pname, info in found.items():
        try:
            params[pname] = yaml.safe_load(info["default"]) if info["default"] is not None else None
        except yaml.YAMLError:
            params[pname] = info["default"]
        params[pname] = _python_literal(info["default"], params[pname])
    return params


def _python_literal(text, fallback):
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError):
        return fallback


def _kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def check_parameters(name: str, given: dict, defaults: dict) -> None:
    """Refuse unknown names and values whose kind differs from the notebook default (bool/number/str/list/dict)."""
    problems = []
    for pname, value in given.items():
        if pname not in defaults:
            close = difflib.get_close_matches(pname, list(defaults), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown parameter {pname!r}{hint}")
            continue
        default = defaults[pname]
        if default is None or value is None:
            continue
        if _kind(value) != _kind(default):
            problems.append(f"parameter {pname!r} should be a {_kind(default)} like {default!r}, got {value!r}")
    if problems:
        raise RunnerError(
            f"Notebook {name!r}: " + "; ".join(problems) + f". Its parameters are: {', '.join(sorted(defaults))}."
        )


# ---- execution ------------------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    name: str
    path: Path
    seconds: float
    reused: bool = False
    error: str | None = None
    params: dict = field(default_factory=dict)


def _source_hash(name: str) -> str:
    return hashlib.sha256(source(name).read_bytes()).hexdigest()[:16]


def _stamp(profile: str, params: dict, name: str) -> dict:
    return {"profile": profile, "parameters": params, "source_hash": _source_hash(name)}


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


def _failure_message(name: str, exc, output: Path) -> str:
    cell = getattr(exc, "exec_count", None)
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    evalue = re.sub(r"\x1b\[[0-9;]*m", "", str(evalue)).strip().splitlines()
    first = evalue[0] if evalue else ""
    where = f"cell {cell}" if cell is not None else "a cell"
    return f"{name}: {where} raised {ename}: {first}\n    partially executed notebook: {output}"


def execute(name: str, profile: str, overrides: dict | None = None, output: Path | None = None,
            force: bool = False, quiet: bool = False) -> Outcome:
    """Execute chapter ``name`` with the profile's parameters (plus ``overrides``) into ``output``."""
    import nbformat
    import papermill

    prof = load_profile(profile)
    defaults = notebook_parameters(name)
    given = {**(prof["notebooks"].get(name) or {}), **(overrides or {})}
    check_parameters(name, given, defaults)
    params = {"profile": profile, **given} if "profile" in defaults else dict(given)
    output = output or root() / EXECUTED / f"{name}.ipynb"
    stamp = _stamp(profile, params, name)
    if not force and _is_current(output, stamp):
        return Outcome(name, output, 0.0, reused=True, params=params)

    output.parent.mkdir(parents=True, exist_ok=True)
    env_backup = dict(os.environ)
    os.environ.update({k: str(v) for k, v in prof["env"].items()})
    os.environ["ANISOTROPY_NOTEBOOK"] = name
    os.environ["ANISOTROPY_FIGURES"] = str(root() / "_build" / "figures" / name)
    partial = output.with_name(f".{output.stem}.partial.ipynb")
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / f"{name}.ipynb"
            nbformat.write(read_notebook(name), src)
            try:
                papermill.execute_notebook(str(src), str(partial), parameters=params, kernel_name=KERNEL,
                                           cwd=str(root()), progress_bar=False, log_output=False)
            except papermill.PapermillExecutionError as exc:
                message = _failure_message(name, exc, partial)
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


def _progress(outcome: Outcome, profile: str, index: int, total: int) -> None:
    status = "reused" if outcome.reused else ("FAILED" if outcome.error else f"{outcome.seconds:7.1f} s")
    print(f"[{index}/{total}] {outcome.name:<32} profile={profile:<6} {status}", flush=True)


def execute_all(profile: str, only: list[str] | None = None, force: bool = False) -> list[Outcome]:
    names = chapters()
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise RunnerError(f"Not chapters of the book: {', '.join(unknown)}. Chapters: {', '.join(names)}.")
        names = [n for n in names if n in only]
    outcomes = []
    for i, name in enumerate(names, 1):
        outcome = execute(name, profile, force=force)
        _progress(outcome, profile, i, len(names))
        outcomes.append(outcome)
    return outcomes


def build_html(strict: bool = True) -> Path:
    """Render the executed notebooks with Jupyter Book (a warning is a failure when ``strict``)."""
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


def build(profile: str = "local", force: bool = False) -> Path:
    """Execute every chapter under ``profile``, then render the book. Raises ``ChapterFailed`` with one report."""
    start = time.perf_counter()
    outcomes = execute_all(profile, force=force)
    failed = [o for o in outcomes if o.error]
    ran = sum(o.seconds for o in outcomes)
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} chapters executed ({ran:.0f} s of execution).")
    if failed:
        report = "\n".join(f"  - {o.error}" for o in failed)
        raise ChapterFailed(f"{len(failed)} chapter(s) failed; the book was not rendered:\n{report}")
    index = build_html()
    print(f"Book built in {time.perf_counter() - start:.0f} s: open {index}")
    return index


# ---- sweeps ---------------------------------------------------------------------------------------------------------

def _slug(value) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-") or "x"


def glued_values(nb_path: Path) -> dict:
    """The scalars a notebook glued (myst-nb stores them as outputs tagged ``scrapbook``), as plain text."""
    import nbformat

    nb = nbformat.read(nb_path, as_version=4)
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            if name and "text/plain" in out.get("data", {}) and "image/png" not in out["data"]:
                values[name] = out["data"]["text/plain"]
    return values


def sweep(name: str, profile: str, grid: dict[str, list]) -> Path:
    """Run chapter ``name`` once per point of the grid (cartesian product); one executed notebook per point, named by
    its parameters, and one table ``sweep.csv`` of every point's parameters and glued values."""
    import pandas as pd

    keys = list(grid)
    folder = root() / SWEEPS / name
    rows = []
    points = list(itertools.product(*(grid[k] for k in keys)))
    for i, values in enumerate(points, 1):
        point = dict(zip(keys, values))
        stem = "__".join([name, *(f"{k}={_slug(v)}" for k, v in point.items())])
        outcome = execute(name, profile, overrides=point, output=folder / f"{stem}.ipynb")
        _progress(outcome, profile, i, len(points))
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
