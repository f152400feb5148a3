"""Executed notebooks as files, at a path or at a URL of the results store: read and written whole, whether one is
current (the stamp it ran with: ``book.execution``), what the runner edits in one once its kernel has finished (the
wall time, the hidden parameter cells, the paths papermill recorded), and the values it glued."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from anisotropy import paths, results
from anisotropy.pages.report import WALL_TIME_PLACEHOLDER

SWEEPS = Path("book") / "sweeps"
SWEEPS_IN_STORE = "_sweeps"  # <store URL>/_sweeps/<chapter>/: a sweep's notebooks when the store is a URL (``book.sweeps``)


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


def is_current(output, stamp: dict) -> bool:
    """Whether ``output`` is a complete executed notebook that ran with ``stamp`` (``book.execution``)."""
    text = read_text(output)
    if text is None:
        return False
    try:
        meta = json.loads(text)["metadata"].get("anisotropy", {})
    except (ValueError, KeyError, AttributeError):
        return False
    return meta.get("stamp") == json.loads(json.dumps(stamp)) and meta.get("complete") is True


def fill_wall_time(nb, seconds: float) -> None:
    text = f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/html" in data and WALL_TIME_PLACEHOLDER in data["text/html"]:
                data["text/html"] = data["text/html"].replace(WALL_TIME_PLACEHOLDER, text)


def hide_parameter_cells(nb) -> None:
    """The provenance box lists every parameter; the raw parameter cells stay in the notebook, not on the page."""
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("parameters" in tags or "injected-parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")


def forget_paths(nb, name: str, output) -> None:
    """papermill records where it read and wrote the notebook: here a temporary file and a path of this machine (the
    build root, which a published notebook must not show). What stays is the chapter's source and the output relative
    to the checkout."""
    record = nb.metadata.get("papermill", {})
    record["input_path"] = f"notebooks/{name}.md"
    output, root_ = str(output), paths.project_root()
    if root_ is not None and not results.is_url(output) and Path(output).resolve().is_relative_to(root_.resolve()):
        output = Path(output).resolve().relative_to(root_.resolve()).as_posix()
    record["output_path"] = output


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
