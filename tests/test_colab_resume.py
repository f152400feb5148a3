"""A paper-sim chapter killed mid-way (a Colab runtime that disconnects) continues from the results store when run
again, against the local Hub stand-in. Apart from tests/test_paper_profile.py, whose module-scoped book makes its
tests one long chain of one worker."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CHAPTER_S, PYTHON, communicate_guarded, copy_repo, hang_guard, run_cli
from test_paper_profile import PROFILE, _client_env

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hub_standin import serve  # noqa: E402


@pytest.fixture
def standin():
    with serve() as hub:
        yield hub


def test_a_paper_sim_chapter_killed_mid_way_continues_from_the_store(standin, tmp_path):
    """A Colab runtime that disconnects mid-chapter: the re-run measures only the checkpoints the first run had not
    stored (each checkpoint is stored as it is measured, ``experiments.spectral.profile``)."""
    root = copy_repo(tmp_path / "repo")
    env = _client_env(standin, root, tmp_path / "hf_home")
    stored = root / "results" / "paper2_spectral"
    command = [PYTHON, "-m", "anisotropy", "run", "p2_counterpoint_pythia", "--profile", PROFILE]
    proc = subprocess.Popen(command, cwd=root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + hang_guard(CHAPTER_S)
    try:
        while len(list(stored.glob("*.parquet"))) < 2:  # two checkpoints measured and stored
            assert proc.poll() is None, "the chapter ended before it was interrupted: " + proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no checkpoint was stored"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = communicate_guarded(proc, expected_s=CHAPTER_S, what="the interrupted chapter's exit")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    before = {p.name for p in stored.glob("*.parquet")}
    assert not (root / "book" / "executed" / "p2_counterpoint_pythia.ipynb").exists()

    again = run_cli(root, "run", "p2_counterpoint_pythia", "--profile", PROFILE, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = {p.name for p in stored.glob("*.parquet")}
    assert before < after, "the first run's results were kept and the rest measured"
    measured_again = re.findall(r"\] measuring ", again.stdout)
    # Each checkpoint the re-run measured is one progress line; the ones stored before are read back, not measured.
    assert len(measured_again) == len(after - before), again.stdout
