"""What every chapter page shows besides its figures: the provenance box, the Colab badge, glued numbers, and the
one reader of where the book is published (``repository``). The box names no folder of the machine that built the
page (``measured``, ``portable``): a published book would otherwise show the build machine's paths.

The runner sets ``ANISOTROPY_FIGURES`` (a folder where glued figures are also saved as PNG, for people to look at) in
the kernel's environment, and afterwards fills the wall time into the box from papermill's own record.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import platform
import re
import subprocess
from functools import lru_cache
from pathlib import Path

from anisotropy import __version__, devices, fingerprint, hub, paths, profiles
from anisotropy.pages import colab

WALL_TIME_PLACEHOLDER = "measured by the book runner"


@lru_cache(maxsize=1)
def repository() -> tuple[str, str]:
    """(URL, branch) of the book's repository: ``repository.url`` and ``repository.branch`` of ``_config.yml``, the
    one place that says where the book is published. Every Colab link, badge and install line derives from it.
    Outside a checkout (a pip install from git, as on Colab) it is where pip installed this package from."""
    import json

    import yaml

    root = paths.project_root()
    if root is not None:
        config = yaml.safe_load((root / "_config.yml").read_text())["repository"]
        return config["url"].rstrip("/"), config.get("branch", "main")
    try:
        import importlib.metadata

        origin = json.loads(importlib.metadata.distribution("anisotropy").read_text("direct_url.json") or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        origin = {}
    if "vcs_info" not in origin:
        raise FileNotFoundError("the repository URL lives in the checkout's _config.yml (no checkout here, and this "
                                "package was not installed from git)")
    return origin["url"].removesuffix(".git").rstrip("/"), origin["vcs_info"].get("requested_revision", "main")


def committed_text(relative: str) -> str:
    """A committed file of the repository (a benchmark's results, say): from the checkout, else from GitHub."""
    import urllib.request

    root = paths.project_root()
    if root is not None and (root / relative).is_file():
        return (root / relative).read_text()
    url, branch = repository()
    raw = url.replace("https://github.com/", "https://raw.githubusercontent.com/", 1)
    with urllib.request.urlopen(f"{raw}/{branch}/{relative}", timeout=30) as response:
        return response.read().decode()


def install_commit() -> str:
    """The commit a chapter's install cell installs the library at: in a git checkout, the last commit that changed
    the library (``lib/`` or ``pyproject.toml``), so that the notebooks name the code they were synced with and
    change only when it does (``make sync``); outside one, the commit pip installed this package from (a Colab
    runtime); in a checkout without git (a tarball), the commit its notebooks name."""
    import importlib.metadata
    import json
    import re

    root = paths.project_root()
    if root is None:
        try:
            origin = json.loads(importlib.metadata.distribution("anisotropy").read_text("direct_url.json") or "{}")
        except (importlib.metadata.PackageNotFoundError, ValueError):
            origin = {}
        commit = origin.get("vcs_info", {}).get("commit_id")
        if not commit:
            raise FileNotFoundError("no checkout here, and this package was not installed from git: no commit to "
                                    "install")
        return commit
    try:
        commit = subprocess.run(["git", "log", "-1", "--format=%H", "--", "lib", "pyproject.toml"], cwd=root,
                                capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    if re.fullmatch(r"[0-9a-f]{40}", commit):
        return commit
    for notebook in sorted((root / "notebooks").glob("*.md")):
        found = re.search(r'anisotropy\[colab\] @ git\+\S+@([0-9a-f]{40})"', notebook.read_text())
        if found:
            return found.group(1)
    raise FileNotFoundError(f"{root} is not a git checkout and no notebook names a commit to install")


def install_command() -> str:
    """The Colab cell's install line: this library at ``install_commit()`` with the dependencies a chapter needs (the
    ``colab`` extra), not the book-building stack, and the exact versions of the packages that shape numbers that
    Colab's default runtime ships (``pages.colab``)."""
    return colab.install_command(repository()[0], install_commit())


def install_lines() -> list[str]:
    """The body of the install cell's ``if "google.colab" in sys.modules:`` block (``pages.colab.install_lines``)."""
    return colab.install_lines(repository()[0], install_commit())


def colab_url(notebook: str) -> str:
    """Colab link to the committed, output-free copy ``notebooks/<notebook>.ipynb`` on GitHub."""
    url, branch = repository()
    return (f"https://colab.research.google.com/github/{url.removeprefix('https://github.com/')}/blob/{branch}/"
            f"notebooks/{notebook}.ipynb")


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


# A self-trained checkpoint's folder, <cache>/checkpoints/<suite>/<recipe hash>/seed-<k>/step-<n>
# (training.checkpoints.run_dir), wherever the cache is
_CHECKPOINT = re.compile(r"[^\s(),;]*checkpoints/(?P<suite>[\w.-]+)/(?P<recipe>[0-9a-f]+)/seed-(?P<seed>\d+)/"
                         r"step-(?P<step>\d+)")
_STEPS = "\0steps\0"  # where a line's checkpoint steps go once the lines of one run are merged


def _steps(steps: list[int]) -> str:
    steps = sorted(set(steps))
    return f"step {steps[0]:,}" if len(steps) == 1 else \
        f"{len(steps)} checkpoints, steps {steps[0]:,} to {steps[-1]:,}"


def portable(text: str) -> str:
    """``text`` with this machine's own folders written as a reader of any machine reads them: the cache as
    ``<cache>``, the checkout as ``<checkout>``, the home folder as ``~`` (the deepest first: the cache is usually
    inside the checkout)."""
    roots = [(paths.cache_dir(), "<cache>"), (paths.project_root(), "<checkout>"), (Path.home(), "~")]
    found = {}
    for folder, name in roots:
        for form in {str(folder), str(Path(folder).resolve())} if folder is not None else ():
            if len(Path(form).parts) > 1:  # never "/" itself
                found.setdefault(form.rstrip("/"), name)
    for form in sorted(found, key=len, reverse=True):
        text = re.sub(re.escape(form) + r"(?![\w.-])", lambda _, name=found[form]: name, text)
    return text


def measured(models) -> list[str]:
    """The provenance box's "measured" lines: a self-trained checkpoint's folder becomes its run (suite, recipe hash,
    seed); lines that then differ only in the checkpoint become one line with the steps' range ("10 checkpoints,
    steps 0 to 800"); any other folder of this machine is written as ``portable`` writes it."""
    merged: dict[str, list[int]] = {}
    for line in map(str, models):
        steps = [int(m["step"]) for m in _CHECKPOINT.finditer(line)]
        key = _CHECKPOINT.sub(lambda m: f"suite {m['suite']}, recipe {m['recipe']}, seed {m['seed']}, {_STEPS}", line)
        merged.setdefault(portable(key), []).extend(steps)
    return [line.replace(_STEPS, _steps(steps)) if steps else line for line, steps in merged.items()]


def provenance(resolved, models=(), described: dict | None = None):
    """Display the provenance box: profile, what was measured, every parameter with where its value came from,
    code (package version and fingerprint, package versions), commit, machine, date, wall time.

    ``resolved`` is the chapter's run (``chapters.plans.apply(...)``: its parameters and, under a paper-like profile,
    its plan); a plain ``profiles.apply(...)`` result does elsewhere. ``models`` is a list of strings that say what was
    measured, e.g. "bert-base-uncased (untrained, true size)". ``described`` maps a parameter to the text shown
    instead of its raw value (e.g. a data source with its description). ``models`` are summarised (``measured``) and
    no folder of this machine is shown (``portable``). Returns the IPython HTML object (displayed when it is the
    cell's last expression).
    """
    from IPython.display import HTML

    profile = resolved.profile
    described = described or {}
    cpu_fallback(resolved)
    warning = ""
    if profile != "paper":
        warning = (
            f"<p><b>This page was produced with the <code>{html.escape(profile)}</code> profile</b>, not with the "
            "papers' pretrained models: read its numbers as what the offline models below show, not as the papers' "
            "results.</p>"
        )
    unverified = unverified_note(resolved)
    if unverified:
        warning += f'<p class="hub-unverified">{html.escape(unverified)}</p>'
    rows = [
        ("profile", html.escape(profile)),
        ("measured", html.escape("; ".join(measured(models)) if models else
                                 "nothing (no model is measured on this page)")),
        ("parameters", _parameter_table(resolved, described)),
        *([("results store", html.escape(f"{portable(resolved.results_dir)} (results_dir, set in this run)"))]
          if getattr(resolved, "results_dir", "") else []),
        ("code", html.escape(f"anisotropy {__version__}, code fingerprint {fingerprint.package()} ("
                             + ", ".join(f"{k} {v}" for k, v in fingerprint.versions().items()) + ")")),
        ("commit", html.escape(git_commit())),
        ("machine", html.escape(device_description())),
        ("date", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        ("wall time", f'<span class="wall-time">{WALL_TIME_PLACEHOLDER}</span>'),
    ]
    cells = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in rows)
    badge = ""
    try:
        link = colab_url(resolved.chapter)
    except FileNotFoundError:  # no checkout (e.g. already on Colab): nothing to link to
        link = None
    if link:
        badge = (f'<p><a class="colab-badge" href="{link}">Open this notebook in Colab</a> (runs the committed '
                 'copy; set <code>profile = "paper"</code> in its parameters cell)</p>')
    box = (
        '<div class="admonition note provenance"><p class="admonition-title">Provenance</p>'
        f"{warning}<table class='provenance-table'>{cells}</table>{badge}</div>"
    )
    return HTML(box)


def _parameter_table(resolved, described: dict) -> str:
    """The chapter's parameters: name, value (or its description), and where the value came from."""
    if not resolved.values:
        return "none besides the profile"
    rows = "".join(
        f"<tr><td><code>{html.escape(name)}</code></td>"
        f"<td>{html.escape(portable(str(described.get(name, _format_value(value)))))}</td>"
        f"<td>{html.escape(resolved.origin_words(name))}</td></tr>"
        for name, value in resolved.values.items())
    return ("<table class='provenance-parameters'><tr><th>name</th><th>value</th><th>from</th></tr>"
            f"{rows}</table>")


def _paper_like(profile: str) -> bool:
    """The ``paper`` profile, or one based on it (``paper-sim``): its chapters load the papers' models from the Hub."""
    return "paper" in (profile, profiles.load(profile).get("base"))


def unverified_note(resolved) -> str:
    """Under a paper-like profile, the sentence that names the Hub facts this chapter's loads rely on (the requests of
    its run's plan, ``resolved.plan``) that the manifest of the Hub (``hub.MANIFEST``) leaves unverified; empty under
    any other profile, or when every such fact was read from a public page."""
    if not _paper_like(resolved.profile):
        return ""
    requests = resolved.plan.requests
    text = hub.unverified_text(hub.unverified(requests))
    return (f"Unverified against the Hub: {text}. No public page read for the package's record of the Hub "
            f"({hub.MANIFEST.name}) showed these; the loads assume what the registry expects.") if text else ""


def cpu_fallback(resolved) -> str:
    """Under the ``paper`` profile with ``device`` "auto" on a machine without a GPU: one ``CPUFallbackWarning``
    with the chapter's estimated time on two vCPUs beside its time on a T4 (``pages.budget.cpu_minutes`` of its run's
    plan, ``resolved.plan``), returned as text; "" otherwise."""
    import warnings

    # cost: the budget and the model table (~0.1 s) into each `python -m anisotropy` start (via book.checkout)
    from anisotropy.pages import budget

    device = resolved.values.get("device", "auto")
    if resolved.profile != "paper" or str(device or "auto") != "auto" or devices.resolve(device) != "cpu":
        return ""
    e = budget.estimate(resolved.plan)
    text = (f"device \"auto\" found no GPU: this chapter measures the papers' models on the CPU, about "
            f"{budget.minutes_text(budget.cpu_minutes(e))} on two cores (about "
            f"{budget.minutes_text(e['gpu_minutes'])} on a T4); on Colab choose Runtime > Change runtime type > "
            f"T4 GPU.")
    warnings.warn(text, devices.CPUFallbackWarning, stacklevel=3)
    return text


def paper_route(resolved) -> tuple[dict, str]:
    """The parameters and profile whose Colab budget a page shows: this run's under the ``paper`` profile or one based
    on it, else the ``paper`` profile's for this chapter (the profile also says where the suites a chapter trains are
    defined)."""
    if _paper_like(resolved.profile):
        return resolved.values, resolved.profile
    return profiles.chapter_parameters("paper", resolved.chapter), "paper"


def colab_budget(plan):
    """What a chapter asks of a Colab runtime on the ``paper`` route, from its plan there (a ``pages.budget.Plan``;
    ``chapters.plans.colab_budget`` makes it with ``paper_route``): glues ``paper_requests`` (what it downloads, in
    words) and ``colab_budget`` (time, downloads, and what would not fit), and returns the budget table."""
    # cost: the budget and the model table (~0.1 s) into each `python -m anisotropy` start (via book.checkout)
    from anisotropy.pages import budget

    glue("paper_requests", budget.describe(plan))
    glue("colab_budget", budget.summary(plan))
    return budget.table(plan).style.hide(axis="index")


def listing(items, empty: str = "none") -> str:
    """Items in running text: "a", "a and b", "a, b and c"; ``empty`` when there are none."""
    items = [str(i) for i in items]
    return empty if not items else items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def model_size(name: str) -> str:
    """The true size of registry model ``name`` in words, from its config: "30 blocks, d = 576" (encoder and decoder
    blocks for an encoder-decoder)."""
    # cost: the model table (~0.1 s) into each `python -m anisotropy` start (via book.checkout)
    from anisotropy.models import registry

    cfg = registry.spec(name).config
    if "encoder_layers" in cfg:
        return f"{cfg['encoder_layers']} encoder and {cfg['decoder_layers']} decoder blocks, d = {cfg['d_model']}"
    return f"{cfg['num_hidden_layers']} blocks, d = {cfg['hidden_size']}"


def glue(name: str, value, fmt: str | None = None):
    """Glue ``value`` (formatted with ``fmt`` such as "{:.3f}") for ``{glue:text}`name``` roles; displays nothing.

    Formatted values are glued as strings: myst-nb evaluates glued plain text as a Python literal, so "100,000"
    would otherwise come back as the tuple (100, 0).
    """
    (_myst_glue() or _record)(name, fmt.format(value) if fmt else value, display=False)
    # Returns None: a returned value would be displayed as a stray output when glue is a cell's last line.


def glue_fields(prefix: str, row, fields: dict[str, str], absent: str = "not measured under this profile"):
    """Glue ``<prefix>_<field>`` for each ``field: format`` of ``fields`` from ``row`` (a mapping or a frame row), or
    ``absent`` for every one when ``row`` is None, so that a page builds under every profile."""
    for field, fmt in fields.items():
        glue(f"{prefix}_{field}", absent if row is None else fmt.format(row[field]))


def glue_figure(name: str, fig, dpi: int = 110):
    """Glue a matplotlib figure for a ``{glue:figure}`` directive, save a PNG copy for people to look at, close it."""
    import matplotlib.pyplot as plt

    folder = os.environ.get("ANISOTROPY_FIGURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(folder) / f"{name}.png", dpi=dpi, bbox_inches="tight")
    _glue = _myst_glue()
    if _glue is None:  # outside the book stack (Colab): show the figure where it is made
        from IPython.display import display

        display(fig)
    else:
        _glue(name, fig, display=False)
    plt.close(fig)


def _record(name: str, value, display: bool = False):
    """myst-nb's ``glue(name, value, display=False)`` where myst-nb is not installed (the ``colab`` extra): the same
    hidden output (the value's display formats under ``application/papermill.record/``, named in the ``scrapbook``
    metadata), which a front end does not show, so that a Colab run's notebook holds the numbers the book's holds
    (``book.notebooks.glued_values`` reads either)."""
    from IPython.core.formatters import format_display_data
    from IPython.display import display as show

    bundle, metadata = format_display_data(value)
    metadata["scrapbook"] = {"name": name, "mime_prefix": "application/papermill.record/"}
    show({f"application/papermill.record/{k}": v for k, v in bundle.items()}, raw=True, metadata=metadata)


def _myst_glue():
    """myst-nb's ``glue`` (part of the book stack), or None where only the chapters' own dependencies are installed
    (the ``colab`` extra): there nothing renders glued values (``glue`` records them as myst-nb would), and figures are
    shown in place."""
    try:
        from myst_nb import glue
    except ImportError:
        return None
    return glue
