"""The paper path when things go wrong: no Hub, a gated model, a missing revision, a missing dataset config or split,
a full disk, a model too large for the GPU. Each gives one clear line, and nothing partial is stored.

Most cases run against the local Hub stand-in (tests/hub_standin), which answers as the Hub does (401 GatedRepo,
404 RevisionNotFound, ...); "no Hub" points HF_ENDPOINT at a closed port on 127.0.0.1.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from conftest import CHAPTER_S, PYTHON, book_env, run_cli, run_guarded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hub_standin import serve  # noqa: E402

CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port


@pytest.fixture(scope="module")
def standin():
    with serve() as hub:
        yield hub


def _env(root: Path, hf_home: Path, hub=None, **extra) -> dict[str, str]:
    """A client environment: the stand-in's, or (hub None) the real Hub's address replaced by a closed port."""
    env = hub.env(base=book_env(root), hf_home=hf_home) if hub else {**book_env(root), "HF_ENDPOINT": CLOSED,
                                                                     "HF_HOME": str(hf_home)}
    for flag in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(flag, None)
    env.update(extra)
    return env


def _python(code: str, env: dict, cwd: Path, expected_s: float = CHAPTER_S) -> subprocess.CompletedProcess:
    return run_guarded([PYTHON, "-c", textwrap.dedent(code)], expected_s=expected_s, cwd=cwd, env=env,
                       capture_output=True, text=True)


def _stored(root: Path) -> list[Path]:
    return sorted((root / "results").rglob("*.parquet")) if (root / "results").is_dir() else []


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["unreachable", "offline"])
def test_no_hub_and_nothing_cached_stops_at_the_first_model(how, repo_copy, tmp_path):
    env = _env(repo_copy, tmp_path / "hf_home", **({"HF_HUB_OFFLINE": "1"} if how == "offline" else {}))
    proc = run_cli(repo_copy, "run", "p1_s3_token_level", "--profile", "paper", env=env)
    line = _one_error_line(proc)
    why = "offline (HF_HUB_OFFLINE)" if how == "offline" else f"unreachable ({CLOSED})"
    assert re.search(rf"raised Offline: bert-base-uncased is not in the local Hugging Face cache and the Hub is "
                     rf"{re.escape(why)}: connect to the network \(or set HF_ENDPOINT to a mirror\).* a profile that "
                     rf"runs offline \(local\)", line), line
    assert "KeyError" not in proc.stderr and _stored(repo_copy) == []


@pytest.mark.slow
def test_on_colab_the_reader_sees_one_line_not_a_traceback(repo_copy, tmp_path):
    nb = nbformat.read(repo_copy / "notebooks" / "p1_s3_token_level.ipynb", as_version=4)
    out = tmp_path / "out.ipynb"
    proc = run_guarded([PYTHON, "-m", "papermill", str(repo_copy / "notebooks" / "p1_s3_token_level.ipynb"),
                        str(out), "-p", "profile", "paper", "--cwd", str(repo_copy)], expected_s=CHAPTER_S,
                       cwd=repo_copy, env=_env(repo_copy, tmp_path / "hf_home"), capture_output=True, text=True)
    assert proc.returncode != 0 and len(nb.cells) > 3
    errors = [o for c in nbformat.read(out, as_version=4).cells for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "Offline"
    assert errors[0]["traceback"] == [f"Offline: {errors[0]['evalue']}"]  # the message, no traceback


@pytest.mark.slow
def test_models_that_cannot_be_had_are_listed_and_the_rest_measured(standin, repo_copy, tmp_path):
    # CharacterBERT (a legacy config of no transformers class, as recorded) exists on the Hub and fails to load: one
    # line; the others load, MANTa-LM through the stand-in's remote code (its block encoder, one text a pass).
    env = _env(repo_copy, tmp_path / "hf_home", standin)
    proc = run_cli(repo_copy, "run", "p1_s3_character_level", "--profile", "paper-sim", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from anisotropy.book import runner

    glued = runner.glued_values(repo_copy / "book" / "executed" / "p1_s3_character_level.ipynb")
    reasons = dict(part.split(" (pretrained): ", 1) for part in glued["char_not_measured"].split("; "))
    assert set(reasons) == {"character-bert"}
    assert reasons["character-bert"].startswith("helboukkouri/character-bert could not be loaded: ValueError: ") \
        and "model type `character_bert`" in reasons["character-bert"], reasons
    assert not any("\n" in r for r in reasons.values())
    from anisotropy import results
    from anisotropy.experiments import layerwise

    store = results.Store(repo_copy / "results")
    rows = store.frames(layerwise.STORE_CHAPTER)
    manta = rows[rows["model"] == "manta-lm"]
    # the stand-in's 2 + 2 layers and their inputs, in the order the model computes them
    assert list(manta.sort_values("layer")["part"]) == ["encoder"] * 3 + ["decoder"] * 3
    # The claims that needed CharacterBERT say so; the others are decided on the models that loaded.
    verdicts = store.frames("claims").set_index("id")
    row = verdicts.loc["p1-s3.1-char-anisotropic"]
    assert row["verdict"] == "not testable here" and "character-bert, which could not be measured here" in row["why"]
    # None of them: one line, nothing stored for them.
    before = _stored(repo_copy)
    proc = run_cli(repo_copy, "run", "p1_s3_character_level", "--profile", "paper-sim", "-p",
                   "models=[character-bert]", env=env)
    line = _one_error_line(proc)
    assert re.search(r"raised Unavailable: none of the 1 models could be measured here; the first, character-bert: "
                     r"helboukkouri/character-bert could not be loaded: ValueError: .*model type `character_bert`",
                     line), line
    assert _stored(repo_copy) == before


@pytest.mark.slow
def test_gated_model_names_its_card_and_the_token(standin, repo_copy, tmp_path):
    env = _env(repo_copy, tmp_path / "hf_home", standin)
    code = """
        import torch
        from anisotropy import hub; from anisotropy.models import registry
        registry._available_bytes = lambda device: 2**50  # whatever this machine has free: the Hub answers first
        for token in (None, "hf_not_accepted"):
            if token:
                import os; os.environ["HF_TOKEN"] = token
            try:
                registry.load("llama-2-7b", "pretrained", dtype=torch.float16)
            except hub.AccessError as exc:
                print(str(exc))
    """
    proc = _python(code, env, repo_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = f"{standin.endpoint}/meta-llama/Llama-2-7b-hf"
    assert proc.stdout.splitlines() == [
        f"meta-llama/Llama-2-7b-hf is gated: accept its licence at {card} and log in (huggingface-cli login, or set "
        f"HF_TOKEN)",
        f"meta-llama/Llama-2-7b-hf is gated and this token has no access: accept its licence at {card}, then set "
        f"HF_TOKEN to a token of that account"]


@pytest.mark.slow
def test_missing_revision_names_the_nearest_that_exist(standin, repo_copy, tmp_path):
    env = _env(repo_copy, tmp_path / "hf_home", standin)
    code = """
        from transformers import AutoConfig
        from anisotropy import hub; from anisotropy.models import registry
        try:  # the Hub answers 404 RevisionNotFound (a branch the registry's list does not know)
            hub.load(AutoConfig.from_pretrained, "EleutherAI/pythia-2.8b", "step999")
        except hub.MissingRevision as exc:
            print(exc)
        try:  # the registry's own list (the model cards')
            registry.load("bloom-560m", revision="global_step50000")
        except hub.MissingRevision as exc:
            print(exc)
        entries, notes = __import__("anisotropy.experiments.spectral").experiments.spectral.hub_checkpoints(
            "bloom-560m", ["global_step1000", "global_step50000"])
        print([e["revision"] for e in entries], notes)
    """
    proc = _python(code, env, repo_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "EleutherAI/pythia-2.8b has no revision 'step999' on the Hub; the nearest that exist: step512, " \
                       "step1000"
    assert lines[1] == "bloom-560m has no revision 'global_step50000'; the nearest that exist: global_step10000, " \
                       "global_step100000"
    assert lines[2] == ("['global_step1000'] ['bloom-560m has no checkpoint global_step50000; the nearest that exist: "
                        "global_step10000, global_step100000']")


@pytest.mark.slow
def test_missing_dataset_config_or_split_lists_the_ones_that_exist(standin, repo_copy, tmp_path):
    env = _env(repo_copy, tmp_path / "hf_home", standin)
    code = """
        from anisotropy import hub
        for config, split in (("wikitext-103-raw-v9", "validation"), ("wikitext-103-raw-v1", "valid")):
            try:
                hub.dataset("Salesforce/wikitext", "WikiText-103", config, split=split)
            except hub.Unavailable as exc:
                print(exc)
    """
    proc = _python(code, env, repo_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config, split = proc.stdout.splitlines()
    assert config.startswith("WikiText-103 (Salesforce/wikitext) could not be loaded: ") and \
        "wikitext-103-raw-v9" in config and "'wikitext-103-raw-v1'" in config, config
    assert '"valid"' in split and "'validation'" in split and "'train'" in split, split


@pytest.mark.slow
def test_disk_full_discards_the_checkpoint_in_progress_and_the_rerun_continues(standin, repo_copy, tmp_path):
    """A file-size quota (RLIMIT_FSIZE) lets the tokenizer, configs and results through but not a checkpoint's
    weights: the first two revisions are in the cache, the third must be downloaded."""
    env = _env(repo_copy, tmp_path / "hf_home", standin)
    revisions = ["step1000", "step4000", "step16000", "step64000"]
    code = f"""
        import json, resource, signal, sys
        from anisotropy import hub, results; from anisotropy.data import sources as data; from anisotropy.models import registry; from anisotropy.experiments import spectral
        revisions = {revisions!r}
        data.load("enwik8", 4, seed=0)  # the corpus is downloaded and cleaned before the quota
        for r in revisions[:2]:
            registry.load("pythia-2.8b", revision=r)  # in the cache before the quota
        if sys.argv[1:] == ["quota"]:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing us
            resource.setrlimit(resource.RLIMIT_FSIZE, (400_000, 400_000))
        entries, _ = spectral.hub_checkpoints("pythia-2.8b", revisions)
        try:
            frame, skipped = spectral.series(entries, source="enwik8", n_texts=4, max_length=32, batch_size=16,
                                             n_batches=1)
            print(json.dumps(sorted(frame["revision"].unique().tolist())))
        except hub.NoSpace as exc:
            print("NoSpace: " + str(exc))
    """
    script = tmp_path / "series.py"
    script.write_text(textwrap.dedent(code))
    full = run_guarded([PYTHON, str(script), "quota"], expected_s=CHAPTER_S, cwd=repo_copy, env=env,
                       capture_output=True, text=True)
    assert full.returncode == 0, full.stderr[-2000:]
    line = full.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"NoSpace: the disk filled while downloading EleutherAI/pythia-2.8b@step16000 \(File too "
                        r"large\); .* free on .*: the unfinished part was discarded and what was measured before is "
                        r"kept\. Free space .* and run again: it continues where it stopped", line), line
    blobs = tmp_path / "hf_home" / "hub" / "models--EleutherAI--pythia-2.8b" / "blobs"
    assert not list(blobs.glob("*.incomplete"))
    stored = {json.loads(p.with_suffix(".json").read_text())["key"]["model"]["revision"]: p.stat().st_mtime_ns
              for p in _stored(repo_copy)}
    assert set(stored) == set(revisions[:2])  # the two measured before the disk filled
    rerun = run_guarded([PYTHON, str(script)], expected_s=CHAPTER_S, cwd=repo_copy, env=env, capture_output=True,
                        text=True)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(rerun.stdout.strip().splitlines()[-1]) == sorted(revisions)
    again = {json.loads(p.with_suffix(".json").read_text())["key"]["model"]["revision"]: p.stat().st_mtime_ns
             for p in _stored(repo_copy)}
    assert set(again) == set(revisions) and all(again[r] == stored[r] for r in stored)  # continued, not redone


def test_out_of_gpu_memory_names_the_model_its_size_and_the_setting(monkeypatch, tmp_path):
    import torch

    from anisotropy.experiments import layerwise
    from anisotropy import results
    from anisotropy.measure import taps

    def full_gpu(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(taps, "extract", full_gpu)
    refs = layerwise.model_refs(["bert-base-uncased", "gpt2"], "tiny")
    with pytest.raises(Exception) as err:
        layerwise.measure_models(refs, source="prose", n=2, max_length=16, store=results.Store(tmp_path / "r"))
    # Every model ran out of memory: the chapter stops with the first one's reason, and nothing is stored.
    assert str(err.value) == ("none of the 2 models could be measured here; the first, bert-base-uncased: "
                              "bert-base-uncased ran out of GPU memory: its weights alone take 0.4 GiB in "
                              "torch.float32; use dtype float16 (or bfloat16), a smaller batch_size (now 8), or a "
                              "smaller model")
    assert not list((tmp_path / "r").rglob("*.parquet"))
