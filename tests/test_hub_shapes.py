"""The paper path against the real Hub's shapes (issue 28): repositories as the Hub holds them, not as the registry
expects them, read by the project's code in client processes of the Hub stand-in (tests/hub_standin)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from hub_standin import build, serve  # noqa: E402
from test_hub_standin import run_client  # noqa: E402


@pytest.fixture(scope="module")
def standin():
    with serve() as hub:
        yield hub


def _tree(standin, repo: str, ref: str, kind: str = "models") -> set[str]:
    """The file paths of ``repo`` at ``ref`` in the stand-in's git repositories."""
    out = subprocess.run(["git", f"--git-dir={standin.root / kind / repo}", "ls-tree", "-r", "--name-only", ref],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _fetched(standin, span, suffix: str = "") -> set[tuple[str, str | None, str]]:
    """(repository, revision, file) of every GET in the request log between the two marks."""
    return {(r["repo_id"], r["revision"], r["file"]) for r in standin.requests()[span[0]:span[1]]
            if r["method"] == "GET" and (r["file"] or "").endswith(suffix)}


def test_bloom_checkpoint_without_tokenizer_takes_the_final_models(standin, tmp_path):
    """Item 1: bigscience/bloom-3b-intermediate holds weights only (as on the Hub); the registry reads the tokenizer
    from bigscience/bloom-3b, so the checkpoint loads with the same tokenizer as the model it became."""
    repo = "bigscience/bloom-3b-intermediate"
    assert _tree(standin, repo, "global_step1000") == {".gitattributes", "README.md", "config.json",
                                                        "pytorch_model.bin"}
    # main also holds the safetensors variant a later commit added (lib/anisotropy/hub_manifest.yml); the branches predate it
    assert _tree(standin, repo, "main") == _tree(standin, repo, "global_step1000") | {"model.safetensors"}
    got = run_client(standin, """
        from anisotropy.models import registry
        seed = REPOS["bigscience/bloom-3b-intermediate"]["branches"]["global_step1000"]["seed"]
        mark = log_mark()
        loaded = registry.load("bloom-3b", "pretrained", revision="global_step1000")
        span = [mark, log_mark()]
        ref = registry.load("bloom-3b", "tiny", seed=seed)
        sample = "The quick brown fox jumps over the lazy dog."
        print(json.dumps(dict(diff=max_diff(loaded.model, ref.model), span=span,
                              ids=loaded.preprocessor(sample)["input_ids"], ref_ids=ref.preprocessor(sample)["input_ids"],
                              pad=loaded.preprocessor.pad_token_id)))
    """, tmp_path)
    assert got["diff"] == 0.0  # the checkpoint's own weights
    assert got["ids"] == got["ref_ids"] and len(got["ids"]) > 5 and got["pad"] is not None
    fetched = _fetched(standin, got["span"])
    assert (repo, "global_step1000", "pytorch_model.bin") in fetched
    assert {f for r, _, f in fetched if r == "bigscience/bloom-3b"} >= {"tokenizer_config.json"}


def test_wikitext_reads_the_validation_files_only(standin, tmp_path):
    """Item 5: the stand-in serves Salesforce/wikitext at the real repository's paths; data_wikipedia.wikitext_lines fetches the
    validation Parquet file and nothing of the other splits."""
    served = _tree(standin, "Salesforce/wikitext", "main", "datasets")
    assert {"wikitext-103-raw-v1/validation-00000-of-00001.parquet", "wikitext-103-raw-v1/test-00000-of-00001.parquet",
            "wikitext-103-raw-v1/train-00000-of-00002.parquet",
            "wikitext-103-raw-v1/train-00001-of-00002.parquet"} <= served
    got = run_client(standin, """
        from anisotropy.data import wikipedia as data_wikipedia
        mark = log_mark()
        lines = data_wikipedia.wikitext_lines("validation", min_chars=80)
        print(json.dumps(dict(lines=lines, span=[mark, log_mark()])))
    """, tmp_path)
    expected = [t.strip() for t in build.wikitext_split("validation")]
    assert got["lines"] == [t for t in expected if len(t) >= 80 and not t.startswith("=")] and len(got["lines"]) > 20
    parquet = {f for _, _, f in _fetched(standin, got["span"], ".parquet")}
    assert parquet == {"wikitext-103-raw-v1/validation-00000-of-00001.parquet"}
