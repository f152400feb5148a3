"""Shared fixtures: a throw-away copy of the repository, and the `smoke` book built there once per session.

Tests never touch the developer's ``book/executed``, ``_build``, ``results`` or ``.cache``: every build, run and sweep
happens in a copy of the repository's files (tracked plus untracked-but-not-ignored, as ``git ls-files`` lists them)
under pytest's temporary folder, with ``ANISOTROPY_RESULTS`` and ``ANISOTROPY_CACHE`` pointing into that copy and the
copy's own ``lib/`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Generated folders that a copy must not inherit when git is unavailable (a tarball instead of a clone).
GENERATED = {".git", ".venv", "_build", "results", ".cache", ".pytest_cache", "__pycache__", ".helpers", ".gl",
             ".ipynb_checkpoints"}
BUILD_TIMEOUT_S = 1200


def project_files(root: Path = ROOT) -> list[str]:
    """Relative paths of the repository's files: tracked plus untracked files that git does not ignore."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
        return sorted({p for p in out.split("\0") if p and (root / p).is_file()})
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(root):
            rel = Path(folder).relative_to(root)
            dirs[:] = [d for d in dirs if d not in GENERATED and (rel / d).as_posix() not in ("book/executed",
                                                                                               "book/sweeps")]
            found += [(rel / f).as_posix() for f in files]
        return sorted(found)


def copy_repo(dest: Path) -> Path:
    """Copy the repository's files into ``dest`` (created) and return it."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in project_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    return dest


def book_env(root: Path, **extra: str) -> dict[str, str]:
    """The environment for running the CLI inside the copy ``root``: its own results store, cache and library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANISOTROPY_")}
    env.update(
        ANISOTROPY_RESULTS=str(root / "results"),
        ANISOTROPY_CACHE=str(root / ".cache"),
        PYTHONPATH=os.pathsep.join([str(root / "lib"), *filter(None, [os.environ.get("PYTHONPATH")])]),
        # Tests never reach the network: smoke runs are offline by design, and a slip must fail fast.
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",  # a run must leave nothing but its outputs in the copy
    )
    env.update(extra)
    return env


def run_cli(root: Path, *args: str, timeout: float = BUILD_TIMEOUT_S, env: dict | None = None
            ) -> subprocess.CompletedProcess:
    """``python -m anisotropy <args>`` inside the copy ``root``; returns the finished process (stdout, stderr)."""
    return subprocess.run([PYTHON, "-m", "anisotropy", *args], cwd=root, env=env or book_env(root),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A fresh copy of the repository for one test (nothing executed or built in it)."""
    return copy_repo(tmp_path / "repo")


@pytest.fixture(scope="session")
def smoke_book(tmp_path_factory) -> Path:
    """Build the whole book under the `smoke` profile, once per session, in a copy of the repository.

    Returns the copy's root: the HTML is in ``<root>/_build/html``, executed notebooks in ``<root>/book/executed``,
    results in ``<root>/results``; the build's output is kept in ``<root>/_build/smoke_build.log``.
    """
    root = copy_repo(tmp_path_factory.mktemp("smoke_book") / "repo")
    proc = run_cli(root, "build", "--profile", "smoke")
    log = root / "_build" / "smoke_build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ python -m anisotropy build --profile smoke\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"the smoke build failed (exit {proc.returncode}); log: {log}\n{proc.stdout[-3000:]}"
                    f"\n{proc.stderr[-3000:]}", pytrace=False)
    return root
