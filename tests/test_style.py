"""The lint the project keeps (pyproject's [tool.ruff]): pyflakes and pycodestyle over the library, the tests and the
benchmarks, with the ruff that ``make test`` installs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=cwd, capture_output=True, text=True)


def test_ruff_check_passes():
    done = ruff("lib", "tests", "benchmarks")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_check_finds_an_undefined_name_and_an_unused_import(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    done = ruff("bad.py", cwd=tmp_path)
    assert done.returncode == 1
    assert "F401" in done.stdout and "F821" in done.stdout
