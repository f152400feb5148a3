"""A paper-sim chapter killed mid-way (a Colab runtime that disconnects) continues from the results store when run
again, against the local Hub stand-in. Apart from tests/test_paper_profile.py, whose module-scoped book makes its
tests one long chain of one worker."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CHAPTER_S, PYTHON, communicate_guarded, copy_repo, run_cli, wait_for
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
    try:
        wait_for(lambda: len(list(stored.glob("*.parquet"))) >= 2, proc, "two checkpoints were measured and stored")
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


def test_results_dir_moves_the_store_and_keeps_verdict_keys(tmp_path, monkeypatch):
    """``results_dir`` in the parameters cell (or ``-p``) puts the store there; like ``profile`` it is not a value
    the results or verdicts are keyed by, so the closing chapter finds the rows a chapter stored there."""
    import os

    from anisotropy import paths, profiles, results
    from anisotropy.claims import ledger

    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "default"))
    there = tmp_path / "drive" / "anisotropy"
    resolved = profiles.apply("p1_s3_token_level", {"profile": "local", "results_dir": str(there)})
    assert os.environ["ANISOTROPY_RESULTS"] == str(there) and Path(results.Store().root) == there
    assert resolved.results_dir == str(there) and "results_dir" not in resolved.values
    assert resolved.values == ledger.expected_parameters("p1_s3_token_level", "local")
    assert paths.results_dir() == there


def test_a_results_dir_on_colab_drive_mounts_drive_first(monkeypatch, tmp_path, colab):
    from anisotropy import paths

    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path))
    paths.use_results("/content/drive/MyDrive/anisotropy")
    assert colab.mounted == ["/content/drive"]
    paths.use_results(str(tmp_path / "elsewhere"))  # not on Drive: nothing to mount
    assert colab.mounted == ["/content/drive"]


def test_a_chapter_run_with_results_dir_stores_there(tmp_path):
    root = copy_repo(tmp_path / "repo")
    there = tmp_path / "elsewhere"
    proc = run_cli(root, "run", "appendix_b_isotropic", "--profile", "smoke", "-p", f"results_dir={there}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert list((there / "appendix_b_isotropic").glob("*.parquet")), "the chapter stored its results there"
    assert not (root / "results" / "appendix_b_isotropic").exists(), "and not in the default store"
