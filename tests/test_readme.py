"""The README is the front door: short, and every command of its "One chapter" block runs as written (the cheap ones
here; the parameters of a run or a sweep are checked as the runner checks them, without executing the chapter)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent


def commands(section: str) -> list[list[str]]:
    """The command lines of the first bash block after the heading ``section``, comments dropped, split as a shell."""
    after = README.split(f"## {section}", 1)[1]
    block = re.search(r"```bash\n(.*?)```", after, flags=re.S).group(1)
    return [shlex.split(line.split("  #", 1)[0]) for line in block.splitlines() if line.strip()]


def test_the_readme_fits_on_two_screens():
    assert len(README.splitlines()) <= 120


def test_the_two_commands_are_the_makefile_targets():
    targets = re.findall(r"^(\w+):", (ROOT / "Makefile").read_text(), flags=re.M)
    assert [c[:2] for c in commands("Build it and read it")] == [["make", "book"], ["make", "test"]]
    assert {"book", "test"} <= set(targets)


def test_every_command_of_the_one_chapter_block_runs_or_is_accepted(tmp_path):
    from anisotropy import profiles
    from anisotropy.book import cli

    ran = []
    for argv in commands("One chapter, a sweep, plain papermill"):
        tool = Path(argv[0]).name
        if tool == "python" and argv[1:3] == ["-m", "anisotropy"] and argv[3] in ("run", "sweep"):
            name, rest = argv[4], argv[5:]
            pairs = [rest[i + 1] for i, flag in enumerate(rest) if flag == "-p"]
            profile = rest[rest.index("--profile") + 1] if "--profile" in rest else "local"
            values = cli._parse_assignments(pairs, as_grid=argv[3] == "sweep")
            points = [values] if argv[3] == "run" else [{k: v[0] for k, v in values.items()}]
            for given in points:
                profiles.check(name, {**profiles.chapter_parameters(profile, name), **given},
                               profiles.notebook_parameters(name), profiles.parameter_rules(name))
            ran.append(argv[3])
            continue
        argv = [str(BIN / tool) if tool in ("python", "papermill") else argv[0], *argv[1:]]
        argv = [str(tmp_path / "out.ipynb") if a == "/tmp/out.ipynb" else a for a in argv]
        env = {**os.environ, "ANISOTROPY_RESULTS": str(tmp_path / "results")}  # nothing written into the checkout
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
        if "--help-notebook" in argv:
            assert "n_pairs" in proc.stdout
        ran.append(tool if tool != "python" else argv[3])
    assert ran == ["chapters", "chapters", "run", "sweep", "papermill", "papermill"]
