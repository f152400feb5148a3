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


def published_url(repository_url: str) -> str:
    """Where GitHub Pages publishes the book of the repository at ``repository_url`` (publish.yml deploys there)."""
    owner, name = repository_url.removeprefix("https://github.com/").split("/")
    return f"https://{owner.lower()}.github.io/{name}/"


def test_the_readme_fits_on_two_screens():
    assert len(README.splitlines()) <= 120


def test_the_first_screen_links_the_book_the_badges_and_make_env_all_derived_from_config():
    """Every URL of the README is one that ``report.repository()`` (``_config.yml``, the one place that says where
    the book lives) derives: the published book, the two workflows' badges, Colab on the first chapter, pip's source."""
    from anisotropy import profiles
    from anisotropy.pages import report

    url, branch = report.repository()
    first = profiles.chapters()[0]
    expected = {
        published_url(url),
        *(f"{url}/actions/workflows/{flow}{badge}" for flow in ("ci.yml", "publish.yml")
          for badge in ("", f"/badge.svg?branch={branch}")),
        "https://colab.research.google.com/assets/colab-badge.svg", report.colab_url(first),
        f"git+{url}",
    }
    assert set(re.findall(r"(?:git\+)?https://[^\s)>\"]+", README)) == expected
    first_screen = "\n".join(README.splitlines()[:12])
    assert all(link in first_screen for link in expected - {f"git+{url}"})
    assert all((ROOT / ".github" / "workflows" / flow).is_file() for flow in ("ci.yml", "publish.yml"))
    assert (ROOT / "notebooks" / f"{first}.ipynb").is_file()
    assert "`make env`" in README and re.search(r"^env:", (ROOT / "Makefile").read_text(), flags=re.M)


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
    assert ran == ["chapters", "chapters", "plan", "run", "sweep", "papermill", "papermill"]
