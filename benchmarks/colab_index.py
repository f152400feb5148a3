"""What PyPI serves for Colab's default runtime: the metadata of every package the Colab install cell resolves to.

Not a test (it needs PyPI): tests/test_colab_runtime.py resolves the install cell offline against Colab's package list
(``lib/anisotropy/pages/colab_runtime.txt``), and reads, from the file this script writes, the exact metadata PyPI
serves for Python 3.13 on Linux x86_64 (name, version, Requires-Dist, Requires-Python, Provides-Extra and the wheel's
file name) of every package in that resolution, from which it writes metadata-only wheels into a local find-links
folder. Run it again when the runtime's list, the pins (``pages/colab.py``) or pyproject's dependencies change (the
test says so), and commit its result:

    .venv/bin/python benchmarks/colab_index.py [--also /path/to/python3.13]   # minutes, needs https://pypi.org

It runs pip's own resolver, ``pip install --dry-run --ignore-installed --target T --report`` with ``--python-version 3.13``,
``--only-binary :all:``, manylinux platforms up to the runtime's glibc (Ubuntu 22.04: 2.35), the runtime's versions as
constraints and PyPI as the only index (``--isolated``: no local find-links or constraints of this machine), once with
this interpreter and once with a Python 3.13 interpreter where there is one (pip evaluates environment markers with
the interpreter it runs on; the test's pip runs on this one), and keeps the union.

torch is the exception. The runtime's build, 2.11.0+cu128, comes from download.pytorch.org (another index), and PyPI's
torch 2.11.0 for Linux is a CUDA 13 build: it requires cuda-toolkit 13.0.2 and nvidia-*-cu13 packages, where the
runtime holds the CUDA 12.8 ones its own build was installed with. So torch's metadata is PyPI's 2.11.0 without its
CUDA requirements (``CUDA_PREFIXES``; listed under ``dropped``), and the rest of the resolution is that of the install
without torch plus torch's remaining requirements. No pin of the install touches a CUDA package.

Writes ``benchmarks/results/colab_index.json``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
sys.path.insert(0, str(ROOT / "tests"))

import install_set  # noqa: E402

from anisotropy.pages import colab  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "colab_index.json"
INDEX = "https://pypi.org/simple"
# Ubuntu 22.04's glibc is 2.35: every manylinux tag up to it, newest first, and the legacy aliases of the oldest.
PLATFORMS = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(35, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")


def target_python() -> str:
    major, minor, _ = colab.python()
    return f"{major}.{minor}"


# The requirements of torch's CUDA build that are not kept (see the module's docstring).
CUDA_PREFIXES = ("cuda-", "nvidia-")


def requirements() -> list[str]:
    """What the install cell asks pip for, but the package itself: its base dependencies, its ``colab`` extra and the
    pins (``colab.install_command``)."""
    project = install_set.pyproject()
    return [*project["dependencies"], *project["optional-dependencies"]["colab"],
            *(f"{n}=={v}" for n, v in colab.pins().items())]


def is_cuda(requirement: str) -> bool:
    return install_set.name(requirement).startswith(CUDA_PREFIXES)


def constraints() -> list[str]:
    """The runtime's versions, public part (PyPI serves no local builds), but those installed from a URL."""
    return [f"{n}=={colab.public(v)}" for n, v in sorted(colab.runtime().items()) if not v.startswith("@")]


def pip_options() -> list[str]:
    """The resolution's options, shared with the test: the runtime's Python and platforms, wheels only (pip before 24
    takes platform options only with ``--target``, which ``--dry-run`` leaves empty)."""
    return ["--python-version", target_python(), "--implementation", "cp", "--only-binary", ":all:",
            *(a for p in PLATFORMS for a in ("--platform", p))]


def resolve(python: str, folder: Path, requirements: list[str], no_deps: bool = False) -> dict:
    """pip's report of the resolution of ``requirements`` by the pip of ``python`` against PyPI."""
    (folder / "constraints.txt").write_text("\n".join(constraints()) + "\n")
    report = folder / f"report-{Path(python).name}.json"
    cert = os.environ.get("PIP_CERT")
    cmd = [python, "-m", "pip", "--isolated", "--disable-pip-version-check", "install", "--dry-run",
           "--ignore-installed", "--target", str(folder / "target"), "--quiet", "--report", str(report),
           "--index-url", INDEX, *(["--cert", cert] if cert else []), *(["--no-deps"] if no_deps else []),
           *pip_options(), "-c", str(folder / "constraints.txt"), *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{python}: the resolution failed:\n{proc.stderr[-4000:]}")
    return json.loads(report.read_text())


def entry(item: dict) -> dict:
    """A report's install item as the test's index holds it."""
    meta = item["metadata"]
    return {"name": meta["name"], "version": meta["version"], "requires_python": meta.get("requires_python"),
            "requires_dist": meta.get("requires_dist", []), "provides_extra": meta.get("provides_extra", []),
            "wheel": item["download_info"]["url"].rsplit("/", 1)[-1]}


def python313() -> str | None:
    """A Python of the runtime's minor version on this machine, with pip, if any."""
    found = shutil.which(f"python{target_python()}")
    if found and subprocess.run([found, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return found
    return None


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--also", metavar="PYTHON", help=f"a Python {target_python()} interpreter with pip (default: "
                        f"python{target_python()} on PATH, if it runs)")
    args = parser.parse_args()
    also = args.also or python313()
    interpreters = [sys.executable] + ([also] if also else [])
    wanted = [r for r in requirements() if install_set.name(r) != "torch"]
    packages, pips = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        torch = entry(resolve(sys.executable, Path(tmp), [f"torch=={colab.pins()['torch']}"], no_deps=True)["install"][0])
        torch["dropped"] = [r for r in torch["requires_dist"] if is_cuda(r)]
        torch["requires_dist"] = [r for r in torch["requires_dist"] if not is_cuda(r)]
        packages["torch"] = torch
        wanted += [r for r in torch["requires_dist"] if "extra ==" not in r]
        for python in interpreters:
            report = resolve(python, Path(tmp), wanted)
            version = subprocess.run([python, "--version"], capture_output=True, text=True).stdout.strip()
            pips[version] = report["pip_version"]
            for item in report["install"]:
                found = entry(item)
                name = colab.normalise(found["name"])
                if name in packages and packages[name]["version"] != found["version"]:
                    sys.exit(f"{name}: {packages[name]['version']} under one interpreter, {found['version']} under "
                             f"another")
                packages.setdefault(name, found)
    for name, found in sorted(packages.items()):
        print(f"{name}=={found['version']}  {found['wheel']}")
    result = {
        "about": "the metadata PyPI serves of each package the Colab install cell resolves to (benchmarks/"
                 "colab_index.py); tests/test_colab_runtime.py resolves the install offline against it",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "index": INDEX,
        "pip": pips,
        "python_version": target_python(),
        "platforms": list(PLATFORMS),
        "runtime_file": colab.RUNTIME_FILE.relative_to(ROOT).as_posix(),
        "runtime_sha256": hashlib.sha256(colab.RUNTIME_FILE.read_bytes()).hexdigest(),
        "requirements": requirements(),
        "packages": dict(sorted(packages.items())),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(packages)} packages -> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
