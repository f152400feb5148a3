"""A paper-sim chapter killed mid-way (a Colab runtime that disconnects) continues from the results store when run
again, against the local Hub stand-in. Apart from tests/test_paper_profile.py, whose module-scoped book makes its
tests one long chain of one worker. Trained suites and their snapshots live beside a moved results store: a second
runtime finds them (and the results) instead of training, and resumes a run cut off."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CHAPTER_S, PYTHON, book_env, communicate_guarded, copy_repo, run_cli, run_guarded, wait_for
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


# ---- trained suites beside the results: a second runtime trains nothing ----------------------------------------------

def test_checkpoints_follow_a_moved_results_store_and_keep_their_keys(tmp_path, monkeypatch):
    """The suites live in the cache unless the results store was moved to a folder of its own; a checkpoint's results
    key names it ``cache:checkpoints/...`` in either place, so moving the suites re-measures nothing."""
    from anisotropy import paths, results

    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ANISOTROPY_RESULTS", raising=False)
    assert paths.checkpoints_dir() == tmp_path / "cache" / "checkpoints"
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(paths.results_dir()))  # the default folder, named: no move
    assert paths.checkpoints_dir() == tmp_path / "cache" / "checkpoints"
    monkeypatch.setenv("ANISOTROPY_RESULTS", "s3://bucket/book")  # a URL store cannot hold model folders
    assert paths.checkpoints_dir() == tmp_path / "cache" / "checkpoints"
    keys = []
    for results_env, root in ((None, tmp_path / "cache" / "checkpoints"), (str(tmp_path / "drive"), tmp_path / "drive" / "checkpoints")):
        if results_env:
            monkeypatch.setenv("ANISOTROPY_RESULTS", results_env)
        else:
            monkeypatch.delenv("ANISOTROPY_RESULTS")
        assert paths.checkpoints_dir() == root
        folder = root / "mlm" / "abc" / "seed-0" / "step-8"
        folder.mkdir(parents=True)
        (folder / "training_state.json").write_text(json.dumps({"step": 8, "seconds": 1.0}))
        keys.append(results.checkpoint_key(folder))
    assert keys[0] == keys[1] == {"folder": "cache:checkpoints/mlm/abc/seed-0/step-8", "training_state": keys[0]["training_state"]}


_RESUME = """
import json, sys
from anisotropy.training import checkpoints, trainer
from anisotropy.training.recipes import Recipe

recipe = Recipe(**json.loads(sys.argv[1]))
run = checkpoints.run_dir(recipe)
before = checkpoints.resumable(run)
updates = []
make = trainer.task_for

def counting(r):  # the updates this process runs: each draws its batch once
    task = make(r)
    batch = task.batch
    task.batch = lambda step: updates.append(step) or batch(step)
    return task

trainer.task_for = counting
trainer.train(recipe, progress=False, threads=1, stop_after=int(sys.argv[2]) or None)
print(json.dumps({"run": str(run), "resumed_from": before and before.name, "updates": updates}))
"""


def test_a_run_cut_off_resumes_in_a_new_runtime_from_its_snapshot_under_results_dir(tmp_path, monkeypatch):
    """Two processes ("runtimes") share only the results folder, each with its own fresh cache: the first trains 7 of
    12 updates and stops (a disconnect), its snapshot under <results>/checkpoints; the second resumes from that
    snapshot, runs updates 8-12 only, and ends bit-identical to an uninterrupted run."""
    from anisotropy.training import trainer
    from anisotropy.training.recipes import Recipe

    spec = dict(suite="tiny-char-mlm", kind="char-mlm", width=32, depth=2, heads=2, seq_len=32, batch_size=8,
                steps=12, warmup=4, lr=3e-3, n_checkpoints=5, eval_every=0, eval_size=16)
    drive = tmp_path / "drive"

    def runtime(n: int, stop_after: int) -> dict:
        env = {**os.environ, "ANISOTROPY_RESULTS": str(drive), "ANISOTROPY_CACHE": str(tmp_path / f"cache-{n}"),
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1] / "lib"),
                                              os.environ.get("PYTHONPATH", "")])}
        proc = run_guarded([PYTHON, "-c", _RESUME, json.dumps(spec), str(stop_after)], expected_s=60,
                           capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = runtime(1, stop_after=7)
    run = Path(first["run"])
    assert run.is_relative_to(drive / "checkpoints") and first["resumed_from"] is None
    assert first["updates"] == list(range(1, 8)) and (run / "resume-7" / "optimizer.pt").is_file()
    second = runtime(2, stop_after=0)
    assert second["run"] == first["run"] and second["resumed_from"] == "resume-7"
    assert second["updates"] == list(range(8, 13))
    assert not (tmp_path / "cache-1" / "checkpoints").exists() and not (tmp_path / "cache-2" / "checkpoints").exists()

    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "cache-here"))
    straight = trainer.train(Recipe(**spec), out_dir=tmp_path / "straight", progress=False, threads=1)
    from safetensors.torch import load_file

    a, b = (load_file(str(folder / "step-12" / "model.safetensors")) for folder in (straight[-1].path.parent, run))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _files(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` but the claims' verdict rows (records rewritten on every run, not computations),
    with its modification time (ns)."""
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.is_file() and not p.relative_to(folder).parts[0].startswith("claims")}


@pytest.mark.slow
def test_a_training_chapter_in_a_second_runtime_trains_nothing_and_recomputes_nothing(tmp_path):
    """p1_s5_qk_training under smoke trains three suites (mlm, vit, clm) and measures their checkpoints. Run again in
    a second "runtime" (a fresh copy of the repository, a fresh cache) sharing only results_dir with the first, it
    finds the suites under results_dir/checkpoints and the measurements in the store: no training line, no
    measuring line, no file under results_dir written (but the verdict rows every run records), nothing cached."""
    chapter, drive = "p1_s5_qk_training", tmp_path / "drive"

    def runtime(n: int) -> str:
        root = copy_repo(tmp_path / f"runtime-{n}")
        env = book_env(root, ANISOTROPY_CACHE=str(tmp_path / f"cache-{n}"))
        proc = run_cli(root, "run", chapter, "--profile", "smoke", "-p", f"results_dir={drive}", env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert (root / "book" / "executed" / f"{chapter}.ipynb").is_file()
        return proc.stdout

    trained, measured = re.compile(r"\] training \S+ seed \d+: update"), re.compile(r"\] \S+ seed \d+: checkpoint at step")
    first = runtime(1)
    assert trained.search(first) and measured.search(first), first  # the patterns see the work when it is done
    assert {p.split("/")[1] for p in _files(drive) if p.startswith("checkpoints/")} == {"mlm", "vit", "clm"}
    written = _files(drive)
    second = runtime(2)
    assert not trained.search(second) and not measured.search(second), second
    assert _files(drive) == written, "nothing trained, stored or rewritten under results_dir"
    assert not (tmp_path / "cache-2" / "checkpoints").exists()
