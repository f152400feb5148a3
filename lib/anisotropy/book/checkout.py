"""The checkout's derived files: the output-free ``notebooks/<name>.ipynb`` copies for Colab, written from their
MyST sources (``python -m anisotropy sync``), and what no key of the current code reaches any more (``clean``)."""

from __future__ import annotations

import hashlib
import json
import re

from anisotropy import fingerprint, profiles, results
from anisotropy.book import runner
from anisotropy.pages.report import install_lines


# ---- the .ipynb copies -------------------------------------------------------------------------------------------------------

def paired_ipynb_text(name: str) -> str:
    """The exact text of the committed output-free ``notebooks/<name>.ipynb`` for the current source."""
    import nbformat

    nb = profiles.read_notebook(name)
    # Only jupytext's filter stays: it keeps the chapter's `anisotropy` metadata (what it runs after) when the .ipynb
    # is converted back to MyST.
    kept = nb.metadata.pop("jupytext", {}).get("notebook_metadata_filter")
    if kept:
        nb.metadata["jupytext"] = {"notebook_metadata_filter": kept}
    # Colab reads these two keys when it opens a notebook: it starts a GPU runtime (a T4 on the free tier) instead of
    # its default CPU one, so `profile = "paper"` runs where the budget assumes it does.
    nb.metadata.update(COLAB_GPU)
    for index, cell in enumerate(nb.cells):
        cell.metadata.pop("vscode", None)
        # nbformat draws random cell ids; derive them from the content so the pair check is reproducible.
        cell["id"] = hashlib.sha256(f"{index}\n{cell.source}".encode()).hexdigest()[:8]
    return nbformat.writes(nb) + "\n"


#: The metadata Colab writes for a notebook saved on a GPU runtime (Edit > Notebook settings > T4 GPU).
COLAB_GPU = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}

# The install cell's block: its `if` line and every line indented below it (the cell's fence ends it).
_INSTALL_BLOCK = re.compile(r'^( *)if "google\.colab" in sys\.modules:\n(?:\1 +\S.*(?:\n|$))+', flags=re.M)


def install_block(text: str, lines: list[str]) -> str:
    """``text`` with the body of its install block (``if "google.colab" in sys.modules:``) replaced by ``lines``."""
    def body(m):
        indent = m.group(1)
        return (f'{indent}if "google.colab" in sys.modules:\n'
                + "".join(f"{indent}    {line}\n" for line in lines))

    return _INSTALL_BLOCK.sub(body, text)


def sync(check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) every chapter's Colab install cell, derived from the repository of
    ``_config.yml``, the last commit that changed the library and Colab's default runtime
    (``pages.report.install_lines``), and every ``notebooks/<name>.ipynb`` from its MyST source.

    Returns the names whose source or .ipynb was (or would be) changed.
    """
    lines = install_lines()
    changed = []
    for md in sorted((runner.root() / "notebooks").glob("*.md")):
        text = md.read_text()
        installed = install_block(text, lines)
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


def clean(dry_run: bool = False) -> tuple[list, int]:
    """Remove what no key of the current code reaches: stored results computed by other code, trained runs and
    tokenizers of another trainer, conversions of other converters, executed notebooks stamped with other code (those
    of sweeps too, in a URL store). Returns (paths or URLs, bytes freed)."""
    import shutil

    # cost: pulls torch/transformers (~8 s) into every `python -m anisotropy` start (book.cli imports this module)
    from anisotropy.models import conversion
    from anisotropy.training import checkpoints

    store = results.Store()
    stored = store.stale()
    local = checkpoints.stale_runs() + conversion.stale_conversions()
    code = fingerprint.package()

    def stale_stamp(text: str | None) -> bool:
        try:
            stamp = json.loads(text)["metadata"].get("anisotropy", {}).get("stamp", {})
        except (TypeError, ValueError, KeyError, AttributeError):
            stamp = {}
        return stamp.get("code") != code

    for folder in (runner.root() / runner.EXECUTED, runner.root() / runner.SWEEPS):
        for nb in sorted(folder.rglob("*.ipynb")) if folder.is_dir() else []:
            if stale_stamp(runner.read_text(nb)):
                local.append(nb)
    if store.remote:
        for url in store.glob(runner.SWEEPS_IN_STORE, "*", "*.ipynb") + store.glob(runner.SWEEPS_IN_STORE, "*", ".*.ipynb"):
            if stale_stamp(runner.read_text(url)):
                stored.append(url)
    size = store.size(stored) + sum(f.stat().st_size for p in local for f in ([p] if p.is_file() else p.rglob("*"))
                                    if f.is_file())
    if not dry_run:
        store.remove(stored)
        for p in local:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    return stored + local, size
