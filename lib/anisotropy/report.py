"""What every chapter page shows besides its figures: the provenance box, the Colab badge, glued numbers.

The runner sets ``ANISOTROPY_NOTEBOOK`` (the chapter's name) and ``ANISOTROPY_FIGURES`` (a folder where glued
figures are also saved as PNG, for people to look at) in the kernel's environment, and afterwards fills the wall
time into the box from papermill's own record.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import platform
import subprocess
from pathlib import Path

from . import __version__, paths

REPOSITORY_URL = "https://github.com/anisotropy-book/anisotropy-book"
BRANCH = "main"
WALL_TIME_PLACEHOLDER = "measured by the book runner"


def colab_url(notebook: str) -> str:
    """Colab link to the committed, output-free copy ``notebooks/<notebook>.ipynb`` on GitHub."""
    repo = REPOSITORY_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{BRANCH}/notebooks/{notebook}.ipynb"


def git_commit() -> str:
    root = paths.project_root()
    if root is None:
        return "unknown (not a checkout)"
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + (" (with uncommitted changes)" if dirty else "")


def device_description() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    return f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def _format_value(value) -> str:
    if isinstance(value, (list, tuple)):
        shown = ", ".join(str(v) for v in value[:12])
        return f"[{shown}{', …' if len(value) > 12 else ''}]"
    return str(value)


def check_parameters(profile: str, params: dict, notebook: str) -> None:
    """Check a chapter's parameters the way the runner does (profile name, kinds, ``allowed:`` ranges), for runs that
    bypass it (plain ``papermill -p``, Jupyter). A no-op outside a checkout (e.g. on Colab without the sources)."""
    from . import runner

    root = paths.project_root()
    if root is None or not (root / "notebooks" / f"{notebook}.md").is_file():
        return
    runner.load_profile(profile)
    defaults = runner.notebook_parameters(notebook)
    given = {k: v for k, v in params.items() if k in defaults}
    if "profile" in defaults:
        given["profile"] = profile
    runner.check_parameters(notebook, given, defaults, runner.parameter_rules(notebook))


def provenance(profile: str, params: dict, models=(), notebook: str | None = None):
    """Display the provenance box: profile, models, parameters, package version, commit, device, date, wall time.

    ``models`` is a list of strings that say what was measured, e.g. "bert-base-uncased (untrained, true size)".
    ``notebook`` (the chapter's name; the runner also passes it in ``ANISOTROPY_NOTEBOOK``) lets a run that bypasses
    the runner check its parameters first (``check_parameters``). Returns the IPython HTML object (displayed when it
    is the cell's last expression).
    """
    from IPython.display import HTML

    if notebook and os.environ.get("ANISOTROPY_RUNNER") != "1":
        check_parameters(profile, params, notebook)
    notebook = notebook or os.environ.get("ANISOTROPY_NOTEBOOK")
    warning = ""
    if profile != "paper":
        warning = (
            f"<p><b>This page was produced with the <code>{html.escape(profile)}</code> profile</b>, not with the "
            "papers' pretrained models: read its numbers as what the offline models below show, not as the papers' "
            "results.</p>"
        )
    rows = [
        ("profile", profile),
        ("models", "; ".join(models) if models else "none (no model is measured on this page)"),
        *((name, _format_value(value)) for name, value in params.items()),
        ("package", f"anisotropy {__version__}"),
        ("commit", git_commit()),
        ("device", device_description()),
        ("date", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("wall time", f'<span class="wall-time">{WALL_TIME_PLACEHOLDER}</span>'),
    ]
    cells = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{v if k == 'wall time' else html.escape(str(v))}</td></tr>"
        for k, v in rows
    )
    badge = ""
    if notebook:
        badge = (f'<p><a class="colab-badge" href="{colab_url(notebook)}">'
                 'Open this notebook in Colab</a> (runs the committed copy; pick the <code>paper</code> profile there)</p>')
    box = (
        '<div class="admonition note provenance"><p class="admonition-title">Provenance</p>'
        f"{warning}<table class='provenance-table'>{cells}</table>{badge}</div>"
    )
    return HTML(box)


def glue(name: str, value, fmt: str | None = None):
    """Glue ``value`` (formatted with ``fmt`` such as "{:.3f}") for ``{glue:text}`name``` roles; displays nothing.

    Formatted values are glued as strings: myst-nb evaluates glued plain text as a Python literal, so "100,000"
    would otherwise come back as the tuple (100, 0).
    """
    from myst_nb import glue as _glue

    _glue(name, fmt.format(value) if fmt else value, display=False)
    # Returns None: a returned value would be displayed as a stray output when glue is a cell's last line.


def glue_figure(name: str, fig, dpi: int = 110):
    """Glue a matplotlib figure for a ``{glue:figure}`` directive, save a PNG copy for people to look at, close it."""
    import matplotlib.pyplot as plt
    from myst_nb import glue as _glue

    folder = os.environ.get("ANISOTROPY_FIGURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(folder) / f"{name}.png", dpi=dpi, bbox_inches="tight")
    _glue(name, fig, display=False)
    plt.close(fig)
