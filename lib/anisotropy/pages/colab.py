"""The Colab runtime a chapter's install cell is written for, and that cell.

``colab_runtime.txt`` (beside this module) is the package list of Colab's default GPU runtime as its image publishes
it (googlecolab/backend-info, with its commit and date in the file's header). From it come:

- ``pins()``: the exact versions of the packages that shape numbers (``fingerprint.PACKAGES``: torch, transformers,
  tokenizers, numpy, scipy) that the runtime ships. The install cell asks for these very versions, so pip replaces
  nothing the runtime imported at start (no restart), and the result keys' versions (``fingerprint.versions``) are the
  same in every session on that image: a store on Drive is read back the next day.
- ``python()``: the runtime's Python; a kernel on another one is told, in one line, which runtime to choose.
- ``install_lines(url, commit)``: the body of the install cell (``make sync`` writes it into every chapter).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from anisotropy import fingerprint

RUNTIME_FILE = Path(__file__).resolve().parent / "colab_runtime.txt"


@lru_cache(maxsize=1)
def runtime() -> dict[str, str]:
    """The runtime's packages: normalised name -> version as listed (a CUDA build's local label kept:
    ``2.11.0+cu128``); packages installed from a URL map to ``"@ <url>"``."""
    found = {}
    for line in RUNTIME_FILE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(==\s*(\S+)|@\s*(\S+))", line)
        if m is None:
            raise ValueError(f"{RUNTIME_FILE.name}: cannot read {line!r}")
        found[normalise(m.group(1))] = m.group(3) or f"@ {m.group(4)}"
    return found


def normalise(name: str) -> str:
    """A project name as PEP 503 compares them (``PyYAML`` -> ``pyyaml``, ``huggingface_hub`` -> ``huggingface-hub``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public(version: str) -> str:
    """A version without its local label (``2.11.0+cu128`` -> ``2.11.0``): what a pin may ask for, since ``==2.11.0``
    accepts every local build of 2.11.0 (PEP 440), the runtime's CUDA build included."""
    return version.split("+", 1)[0]


@lru_cache(maxsize=1)
def python() -> tuple[int, int, int]:
    """The runtime's Python version (the file's ``# python:`` line)."""
    m = re.search(r"^# python: (\d+)\.(\d+)\.(\d+)$", RUNTIME_FILE.read_text(), flags=re.M)
    return tuple(int(x) for x in m.groups())


def source() -> str:
    """Where the list comes from (the file's ``# source:`` line)."""
    return re.search(r"^# source: (\S+)$", RUNTIME_FILE.read_text(), flags=re.M).group(1)


def pins() -> dict[str, str]:
    """The exact versions the install cell asks for: every package of ``fingerprint.PACKAGES`` at the runtime's own
    version (public part)."""
    packages = runtime()
    return {name: public(packages[normalise(name)]) for name in fingerprint.PACKAGES}


def wrong_python_message() -> str:
    """The one line a kernel on another Python reads (``{v}`` is filled with its version in the cell)."""
    major, minor, _ = python()
    return (f"This runtime is Python {{v}}, but this notebook installs the versions of Colab's default runtime with "
            f"Python {major}.{minor}: choose Runtime > Change runtime type > Runtime version: Latest (Python "
            f"{major}.{minor}), then run this cell again")


def install_command(url: str, commit: str) -> str:
    """The ``%pip install`` line: this library at ``commit`` with the ``colab`` extra, and ``pins()``."""
    pinned = " ".join(f'"{name}=={version}"' for name, version in pins().items())
    return f'%pip install -q "anisotropy[colab] @ git+{url}@{commit}" {pinned}'


def install_lines(url: str, commit: str) -> list[str]:
    """The body of the install cell's ``if "google.colab" in sys.modules:`` block (unindented): a Python other than
    the runtime's stops in one line naming the runtime to choose, else the library and the pins are installed."""
    major, minor, _ = python()
    message = wrong_python_message().replace("{v}", "%d.%d")
    return [f"if sys.version_info[:2] != ({major}, {minor}):",
            f'    sys.exit("{message}" % sys.version_info[:2])',
            install_command(url, commit)]
