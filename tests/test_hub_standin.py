"""The Hub stand-in (tests/hub_standin): the paper profile's models and data served under their real hub ids, read
by the real clients (transformers, huggingface_hub, datasets, the project's registry) in subprocesses that get the
stand-in's environment (huggingface_hub and datasets read HF_ENDPOINT and HF_HOME at import time).

Every client script prints one JSON line; expected values come from the builder (the same seeds and functions), and
the server's request log shows what each client fetched.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import run_guarded  # noqa: E402
from hub_standin import build, serve  # noqa: E402

from anisotropy import hub  # noqa: E402

TOKEN = "hf_standin_accepted_token"
PRELUDE = """
import json, os, sys, tempfile, warnings
warnings.filterwarnings("ignore")
MANIFEST = json.load(open(os.environ["STANDIN_MANIFEST"]))
REPOS = {e["repo"]: e for e in MANIFEST["models"]}
TOKEN = os.environ["STANDIN_TOKEN"]

def log_mark():
    with open(os.environ["STANDIN_LOG"]) as fh:
        return sum(1 for _ in fh)

def err(fn):
    try:
        fn()
    except Exception as e:
        response = getattr(e, "response", None)
        return [type(e).__name__, [c.__name__ for c in type(e).__mro__], getattr(response, "status_code", None),
                str(e)]
    return None

def max_diff(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max((sa[k].float() - sb[k].float()).abs().max().item() for k in sa)
"""


def run_client(standin, code: str, tmp: Path, expected_s: float = 60) -> dict:
    """Run ``code`` (after PRELUDE) in a fresh interpreter with the stand-in's environment and an empty HF cache."""
    env = standin.env(hf_home=tmp / "hf-home")
    env.update(STANDIN_LOG=str(standin.log_path), STANDIN_MANIFEST=str(standin.root / "manifest.json"),
               STANDIN_TOKEN=TOKEN)
    proc = run_guarded([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], expected_s=expected_s,
                       what="a client script of the stand-in", env=env, cwd=tmp, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        pytest.fail(f"client script failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}",
                    pytrace=False)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def standin():
    with serve(gated_tokens=[TOKEN]) as s:
        yield s


@pytest.fixture(scope="session")
def models_run(standin, tmp_path_factory):
    return run_client(standin, """
        import torch
        from huggingface_hub import HfApi, hf_hub_download
        from transformers import BertModel, GPTNeoXModel
        from anisotropy.models import registry

        def tiny(name, seed):
            return registry.load(name, "tiny", seed=seed).model

        out = {"mark": log_mark()}
        bert = BertModel.from_pretrained("bert-base-uncased")
        out["bert_vs_builder"] = max_diff(bert, tiny("bert-base-uncased", REPOS["bert-base-uncased"]["seed"]))
        out["bert_vs_other_seed"] = max_diff(bert, tiny("bert-base-uncased", 12345))
        out["bert_params"] = sum(p.numel() for p in bert.parameters())
        p = REPOS["EleutherAI/pythia-2.8b"]
        at = {r: GPTNeoXModel.from_pretrained("EleutherAI/pythia-2.8b", revision=r)
              for r in ("step1000", "step143000", "step2000")}
        main = GPTNeoXModel.from_pretrained("EleutherAI/pythia-2.8b")
        out["step1000_vs_step143000"] = max_diff(at["step1000"], at["step143000"])
        out["main_vs_step143000"] = max_diff(main, at["step143000"])
        out["step2000_vs_main"] = max_diff(at["step2000"], main)
        out["step1000_vs_builder"] = max_diff(at["step1000"], tiny("pythia-2.8b", p["branches"]["step1000"]["seed"]))
        mb = "google/multiberts-seed_3-step_120k"
        out["multiberts_vs_builder"] = max_diff(BertModel.from_pretrained(mb),
                                                tiny("multiberts-seed-3", REPOS[mb]["seed"]))
        out["multiberts_final_vs_2000k"] = max_diff(BertModel.from_pretrained("google/multiberts-seed_3"),
                                                    BertModel.from_pretrained("google/multiberts-seed_3-step_2000k"))
        api = HfApi()
        out["pythia_refs"] = {b.name: b.target_commit for b in api.list_repo_refs("EleutherAI/pythia-2.8b").branches}
        out["imagenette_refs"] = [r.ref for r in api.list_repo_refs("frgfm/imagenette", repo_type="dataset").converts]
        out["bert_info_sha"] = api.model_info("bert-base-uncased").sha
        out["errors_mark"] = log_mark()
        gated = "meta-llama/Llama-2-7b-hf"
        out["gated_no_token"] = err(lambda: hf_hub_download(gated, "config.json"))
        out["gated_wrong_token"] = err(lambda: hf_hub_download(gated, "config.json", token="hf_not_accepted"))
        out["gated_accepted"] = json.load(open(hf_hub_download(gated, "config.json", token=TOKEN)))["model_type"]
        out["missing_revision"] = err(lambda: hf_hub_download("EleutherAI/pythia-2.8b", "config.json",
                                                              revision="step999"))
        out["missing_repo"] = err(lambda: hf_hub_download("nobody/no-such-model", "config.json"))
        out["missing_file"] = err(lambda: hf_hub_download("bert-base-uncased", "no-such-file.json"))
        out["remote_code_repo"] = err(lambda: api.model_info("helboukkouri/character-bert"))
        out["end_mark"] = log_mark()
        print(json.dumps(out))
    """, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def registry_run(standin, tmp_path_factory):
    return run_client(standin, """
        import torch
        from anisotropy.models import registry

        out = {}
        # What the paper profile does first on a cold cache (see test_registry_text_models_load_from_a_cold_cache).
        out["cold_text"] = err(lambda: registry.load("gpt2", "pretrained"))
        sample = "The quick brown fox"
        for name in ("gpt2", "whisper-base", "vit-base", "resnet-50"):
            loaded = registry.load(name, "pretrained")
            ref = registry.load(name, "tiny", seed=REPOS[registry.spec(name).hub_id]["seed"])
            pre = loaded.preprocessor
            out[name] = dict(model=type(loaded.model).__name__, source=loaded.source,
                             weights_diff=max_diff(loaded.model, ref.model), preprocessor=type(pre).__name__,
                             tokenizer=type(loaded.tokenizer).__name__ if loaded.tokenizer is not None else None)
            if name == "gpt2":
                out[name]["same_ids"] = pre(sample)["input_ids"] == ref.preprocessor(sample)["input_ids"]
            if name == "whisper-base":
                out[name]["same_ids"] = loaded.tokenizer(sample)["input_ids"] == ref.tokenizer(sample)["input_ids"]
                out[name]["chunk_length"] = pre.chunk_length
            if name in ("vit-base", "resnet-50"):
                out[name]["size"] = dict(pre.size)
        rev = registry.load("pythia-2.8b", "pretrained", revision="step1000")
        seed = REPOS["EleutherAI/pythia-2.8b"]["branches"]["step1000"]["seed"]
        out["pythia_step1000_diff"] = max_diff(rev.model, registry.load("pythia-2.8b", "tiny", seed=seed).model)
        llama = lambda: registry.load("llama-2-7b", "pretrained", dtype=torch.float16)
        out["llama_no_token"] = err(llama)
        os.environ["HF_TOKEN"] = "hf_not_accepted"
        out["llama_wrong_token"] = err(llama)
        os.environ["HF_TOKEN"] = TOKEN
        out["llama_accepted"] = type(llama().model).__name__
        out["character-bert"] = err(lambda: registry.load("character-bert", "pretrained"))  # an unknown model_type
        manta = registry.load("manta-lm", "pretrained")  # remote code (the stand-in's), at the pinned commit
        out["manta-lm"] = [type(manta.model).__name__, type(manta.preprocessor).__name__,
                           type(manta.model).__module__.split(".")[0]]
        print(json.dumps(out))
    """, tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def datasets_run(standin, tmp_path_factory):
    return run_client(standin, """
        import hashlib
        import io
        import numpy as np
        import soundfile as sf
        from datasets import Audio, Image, load_dataset

        out = {}
        k = log_mark()
        out["wikitext"] = list(load_dataset("Salesforce/wikitext", "wikitext-103-raw-v1", split="validation")["text"])
        out["wikitext_log"] = [k, log_mark()]
        k = log_mark()
        ds = load_dataset("frgfm/imagenette", data_dir="320px", split="validation", revision="refs/convert/parquet")
        image = ds[0]["image"]
        out["imagenette"] = dict(n=len(ds), labels=list(ds["label"]), names=ds.features["label"].names,
                                 first=[image.format, image.mode, list(image.size)],
                                 first_pixels=np.asarray(image.convert("RGB")).astype(float).mean(),
                                 sha=[hashlib.sha256(x["bytes"]).hexdigest()
                                      for x in ds.cast_column("image", Image(decode=False))["image"]])
        out["imagenette_log"] = [k, log_mark()]
        out["imagenette_main"] = err(lambda: load_dataset("frgfm/imagenette", "320px", split="validation",
                                                          cache_dir=tempfile.mkdtemp()))
        out["imagenette_config_on_parquet"] = err(lambda: load_dataset(
            "frgfm/imagenette", "320px", split="validation", revision="refs/convert/parquet",
            cache_dir=tempfile.mkdtemp()))
        k = log_mark()
        ds = load_dataset("openslr/librispeech_asr", data_files={"validation": "clean/validation/*.parquet"},
                          split="validation")
        rows = ds.cast_column("audio", Audio(decode=False))[:]
        decoded = [sf.read(io.BytesIO(a["bytes"]), dtype="float32") for a in rows["audio"]]
        out["librispeech"] = dict(columns=ds.column_names, text=rows["text"], id=rows["id"],
                                  speaker_id=rows["speaker_id"], rates=[r for _, r in decoded],
                                  sha=[hashlib.sha256(a["bytes"]).hexdigest() for a in rows["audio"]],
                                  lengths=[len(x) for x, _ in decoded], first=decoded[0][0][:400].tolist())
        out["librispeech_log"] = [k, log_mark()]
        k = log_mark()
        load_dataset("openslr/librispeech_asr", "clean", split="validation", cache_dir=tempfile.mkdtemp())
        out["librispeech_config_log"] = [k, log_mark()]
        print(json.dumps(out))
    """, tmp_path_factory.mktemp("datasets"))


def _log(standin, span):
    return standin.requests()[span[0]:span[1]]


# ---------------------------------------------------------------------------------------------------------------------
# What is served
# ---------------------------------------------------------------------------------------------------------------------


def test_manifest_serves_every_model_of_the_paper_profile(standin):
    from anisotropy import profiles
    from anisotropy.models import registry

    m = standin.manifest
    served = {e["model"] for e in m["models"]}
    not_served = {e["model"]: e["reason"] for e in m["not_served"]}
    names = set()

    def walk(v):
        if isinstance(v, str) and v in registry.MODELS:
            names.add(v)
        elif isinstance(v, (list, dict)):
            for x in (v.values() if isinstance(v, dict) else v):
                walk(x)

    walk(profiles.load("paper")["notebooks"])
    assert names - served == set(not_served) == set()  # hub_manifest.yml says none of them is missing from the Hub
    remote = {e["model"] for e in m["models"] if e["remote_code"]}
    assert remote == {"character-bert", "manta-lm"}
    for e in m["models"]:  # every served repository exists, with every branch of its revisions (and its pin)
        assert (standin.root / "models" / e["repo"] / "HEAD").is_file(), e["repo"]
        pinned = [f"refs/heads/{e['pinned']}"] if e.get("pinned") else []
        assert set(e["refs"]) == {"refs/heads/main", *(f"refs/heads/{r}" for r in e["branches"]), *pinned}, e["repo"]
        assert not pinned or e["refs"][pinned[0]] == e["refs"]["refs/heads/main"]  # the pin names main's commit
    assert {e["model"]: e.get("pinned") for e in m["models"] if e["remote_code"]} == {
        "character-bert": None, "manta-lm": registry.spec("manta-lm").code_revision}
    multiberts = [e for e in m["models"] if e["model"].startswith("multiberts")]
    # Five seeds, each: the cards' 28 checkpoints, step_0k (the initialisation, on the Hub beside them), the final model.
    assert len(multiberts) == 5 * (28 + 1 + 1)
    assert {e["repo"] for e in multiberts} >= {f"google/multiberts-seed_{s}-step_0k" for s in range(5)}
    pythia = next(e for e in m["models"] if e["repo"] == "EleutherAI/pythia-2.8b")
    named = profiles.load("paper")["notebooks"]["p2_training_dynamics"]["pythia_revisions"]
    assert {r for r, b in pythia["branches"].items() if b["distinct"]} == set(named) - {"step143000"}
    assert {e["repo"] for e in m["models"] if e["gated"]} == {s.hub_id for s in registry.MODELS.values()
                                                             if s.access == "gated"}
    size = sum(f.stat().st_size for f in standin.root.rglob("*") if f.is_file())
    assert size < 300e6, f"{size / 1e6:.0f} MB"


# ---------------------------------------------------------------------------------------------------------------------
# What is served against what the real Hub holds (lib/anisotropy/hub_manifest.yml, issue 28)
# ---------------------------------------------------------------------------------------------------------------------

HUB = hub.MANIFEST  # the package's record of the Hub, which the chapters read too
WEIGHT_FILES = {"model.safetensors", "pytorch_model.bin"}
TOKENIZER_FILES = {"tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model"}


def hub_records() -> dict:
    import yaml

    return yaml.safe_load(HUB.read_text())["repos"]


def hub_queries(records: dict) -> list[list[str]]:
    """Every (repo, revision, repo type) of the manifest whose repository exists or may (not `exists: false`)."""
    return [[repo, rev, entry["kind"]] for repo, entry in records.items() if entry.get("exists") is not False
            for rev in entry.get("revisions") or {}]


def served_differences(records: dict, listing: dict, served: dict) -> list[str]:
    """What the stand-in serves (``listing``: "repo@rev" -> {"files": [...], "model_type": ...} or {"error": name},
    read over HTTP) against what the Hub holds (``records``, hub_manifest.yml), one line per difference.

    For a revision whose file list was read: the served names are exactly the listed ones (a partial list,
    ``files_complete: false``: at least them); the only exception, folders (``coreml/``) whose content was not read,
    are not served. Where the manifest knows them: the weight files, tokenizer and preprocessor presence, the config's
    model_type. A repository or revision the Hub has (``exists: true``) must be served; one it lacks must not.
    ``served`` (the build's manifest.json) must record the same files, and every field it took from the registry
    because the manifest says ``unverified``."""
    bad = []
    for repo, entry in records.items():
        for rev, r in (entry.get("revisions") or {}).items():
            where, got = f"{repo}@{rev}", listing.get(f"{repo}@{rev}")
            if entry.get("exists") is False or r.get("exists") is False:
                if got is not None and "files" in got:
                    bad.append(f"{where}: served, but the Hub does not have it")
                continue
            if got is None or "error" in got:
                if entry.get("exists") is True and r.get("exists", True) is True:
                    bad.append(f"{where}: on the Hub, but the stand-in answers {(got or {}).get('error')}")
                continue
            files = set(got["files"])
            listed = r.get("files")
            if isinstance(listed, dict):
                want = {n for n in listed if not n.endswith("/")}
                if r.get("files_complete", True) and files != want:
                    bad.append(f"{where}: serves {sorted(files - want)} the Hub lacks, lacks {sorted(want - files)}")
                elif want - files:
                    bad.append(f"{where}: lacks {sorted(want - files)} of the Hub's (partial) list")
            if isinstance(r.get("weights"), list) and files & WEIGHT_FILES != set(r["weights"]) & WEIGHT_FILES:
                bad.append(f"{where}: weights {sorted(files & WEIGHT_FILES)}, the Hub's {sorted(r['weights'])}")
            for flag, names in (("tokenizer", TOKENIZER_FILES), ("preprocessor", {"preprocessor_config.json"})):
                if isinstance(r.get(flag), bool) and bool(files & names) != r[flag]:
                    bad.append(f"{where}: {flag} {'missing' if r[flag] else 'served'}, the Hub's {flag}: {r[flag]}")
            model_type = entry.get("model_type", "unverified")
            if model_type != "unverified" and got.get("model_type") != model_type:
                bad.append(f"{where}: config model_type {got.get('model_type')!r}, the Hub's {model_type!r}")
            record = served.get(repo, {}).get("served", {}).get(rev)
            if entry["kind"] == "model" and (record is None or record["files"] != sorted(files)):
                bad.append(f"{where}: manifest.json records {record and record['files']}, the server lists "
                           f"{sorted(files)}")
            elif record is not None:
                for field in ("files", "weights"):
                    if r.get(field, "unverified") == "unverified" and field not in record["unverified"]:
                        bad.append(f"{where}: {field} is unverified, manifest.json does not say so")
    return bad


@pytest.fixture(scope="session")
def hub_listing(standin, tmp_path_factory):
    queries = hub_queries(hub_records())
    return run_client(standin, f"""
        from huggingface_hub import HfApi, hf_hub_download
        api = HfApi()
        out = {{}}
        for repo, rev, kind in {json.dumps(queries)}:
            try:
                files = api.list_repo_files(repo, revision=rev, repo_type=kind)
            except Exception as e:
                out[f"{{repo}}@{{rev}}"] = dict(error=type(e).__name__)
                continue
            got = dict(files=sorted(files))
            if kind == "model" and "config.json" in files:
                token = TOKEN if REPOS.get(repo, {{}}).get("gated") else None
                got["model_type"] = json.load(open(hf_hub_download(repo, "config.json", revision=rev,
                                                                   token=token))).get("model_type")
            out[f"{{repo}}@{{rev}}"] = got
        print(json.dumps(out))
    """, tmp_path_factory.mktemp("listing"), expected_s=120)


def test_served_repositories_are_the_hubs(hub_listing, standin):
    """Every repository and revision hub_manifest.yml records, as the stand-in serves it over HTTP (list_repo_files,
    config.json), against the manifest: file names, weight format, tokenizer and preprocessor, model_type."""
    served = {e["repo"]: e for e in standin.manifest["models"]}
    assert len(hub_listing) >= 190
    found = served_differences(hub_records(), hub_listing, served)
    assert not found, "the stand-in serves what the Hub does not hold:\n" + "\n".join(found)
    bloom = hub_listing["bigscience/bloom-3b-intermediate@global_step1000"]["files"]
    assert bloom == [".gitattributes", "README.md", "config.json", "pytorch_model.bin"]
    assert hub_listing["almanach/manta-lm-base@main"]["model_type"] == "manta"
    assert hub_listing["helboukkouri/character-bert@main"]["model_type"] == "character_bert"


def test_served_differences_catch_the_registry_shaped_stand_in():
    """The comparison is not vacuous: the stand-in before issue 28's manifest (every revision a tokenizer and
    model.safetensors; CharacterBERT and MANTa missing) is reported."""
    records = hub_records()
    tiny = ["config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    old = {"bigscience/bloom-3b-intermediate@global_step1000": dict(files=[".gitattributes", "README.md", *tiny],
                                                                     model_type="bloom"),
           "helboukkouri/character-bert@main": dict(error="RepositoryNotFoundError"),
           "facebook/opt-1.3b@main": dict(files=[".gitattributes", "README.md", *tiny], model_type="opt")}
    found = served_differences(records, old, {})
    for expected in ("bigscience/bloom-3b-intermediate@global_step1000: serves",
                     "bigscience/bloom-3b-intermediate@global_step1000: weights ['model.safetensors']",
                     "bigscience/bloom-3b-intermediate@global_step1000: tokenizer served",
                     "helboukkouri/character-bert@main: on the Hub, but the stand-in answers RepositoryNotFoundError",
                     "facebook/opt-1.3b@main: weights ['model.safetensors'], the Hub's ['pytorch_model.bin']"):
        assert any(line.startswith(expected) for line in found), (expected, found)


def test_build_key_covers_the_hub_manifest(tmp_path, monkeypatch):
    """ensure_built() rebuilds when hub_manifest.yml changes (its bytes enter the key, not only the plan)."""
    plan = {"models": []}
    before = build.build_key(plan)
    changed = tmp_path / "hub_manifest.yml"
    changed.write_text(build.HUB_MANIFEST.read_text() + "\n# a changed note\n")
    monkeypatch.setattr(build, "HUB_MANIFEST", changed)
    assert build.build_key(plan) != before


# ---------------------------------------------------------------------------------------------------------------------
# Models through transformers and huggingface_hub
# ---------------------------------------------------------------------------------------------------------------------


def test_bert_weights_equal_the_builders(models_run):
    assert models_run["bert_vs_builder"] == 0.0
    assert models_run["bert_vs_other_seed"] > 0.01  # the comparison can fail
    assert models_run["bert_params"] > 100_000  # the tiny BertModel, all of it


def test_pythia_revisions_are_branches_with_their_own_weights(models_run, standin):
    assert models_run["step1000_vs_step143000"] > 0.01
    assert models_run["step1000_vs_builder"] == 0.0
    assert models_run["main_vs_step143000"] == 0.0  # the final checkpoint is the main branch's model
    assert models_run["step2000_vs_main"] == 0.0  # a revision the profile does not name shares the final weights
    from anisotropy.models import registry

    refs = models_run["pythia_refs"]
    assert set(refs) == {"main", *registry.PYTHIA_REVISIONS}
    entry = next(e for e in standin.manifest["models"] if e["repo"] == "EleutherAI/pythia-2.8b")
    assert refs == {r.removeprefix("refs/heads/"): c for r, c in entry["refs"].items()}
    assert len(set(refs.values())) == len(refs)  # every checkpoint its own commit


def test_multiberts_checkpoint_is_its_own_repo(models_run):
    assert models_run["multiberts_vs_builder"] == 0.0
    assert models_run["multiberts_final_vs_2000k"] == 0.0


def test_api_refs_and_info(models_run, standin):
    assert models_run["imagenette_refs"] == ["refs/convert/parquet"]
    assert models_run["bert_info_sha"] == next(e for e in standin.manifest["models"]
                                               if e["repo"] == "bert-base-uncased")["refs"]["refs/heads/main"]


def test_hub_errors_are_the_hubs(models_run):
    name, mro, status, message = models_run["gated_no_token"]
    assert (name, status) == ("GatedRepoError", 401) and "must have access to it and be authenticated" in message
    name, mro, status, message = models_run["gated_wrong_token"]
    assert (name, status) == ("GatedRepoError", 403) and "not in the authorized list" in message
    assert models_run["gated_accepted"] == "llama"
    name, mro, status, _ = models_run["missing_revision"]
    assert (name, status) == ("RevisionNotFoundError", 404)
    name, mro, status, _ = models_run["missing_repo"]
    assert (name, status) == ("RepositoryNotFoundError", 401)
    name, mro, status, _ = models_run["missing_file"]
    assert (name, status) == ("EntryNotFoundError", 404)
    assert models_run["remote_code_repo"] is None  # served in its Hub shape (issue 28), no longer a missing repo


def test_request_log_records_each_request(models_run, standin):
    log = _log(standin, [models_run["mark"], models_run["end_mark"]])
    assert log and all({"method", "path", "repo_type", "repo_id", "revision", "file", "status"} <= set(r) for r in log)
    downloads = {(r["repo_id"], r["revision"], r["file"]) for r in log if r["method"] == "GET" and r["status"] == 200}
    assert ("bert-base-uncased", "main", "model.safetensors") in downloads
    assert ("EleutherAI/pythia-2.8b", "step1000", "model.safetensors") in downloads
    errors = {(r["repo_id"], r["status"], r["error"]) for r in log[models_run["errors_mark"] - models_run["mark"]:]}
    assert {("meta-llama/Llama-2-7b-hf", 401, "GatedRepo"), ("meta-llama/Llama-2-7b-hf", 403, "GatedRepo"),
            ("EleutherAI/pythia-2.8b", 404, "RevisionNotFound"), ("nobody/no-such-model", 401, "RepoNotFound"),
            ("bert-base-uncased", 404, "EntryNotFound")} <= errors
    commits = {r["commit"] for r in log if r["repo_id"] == "EleutherAI/pythia-2.8b" and r["revision"] == "step1000"}
    assert commits == {models_run["pythia_refs"]["step1000"]}


# ---------------------------------------------------------------------------------------------------------------------
# The project's registry
# ---------------------------------------------------------------------------------------------------------------------


def test_registry_loads_one_model_of_each_modality(registry_run):
    expected = {"gpt2": ("GPT2Model", "PreTrainedTokenizerFast"), "whisper-base": ("WhisperModel",
                "WhisperFeatureExtractor"), "vit-base": ("ViTModel", "ViTImageProcessor"),
                "resnet-50": ("ResNetModel", "ConvNextImageProcessor")}
    for name, (model, pre) in expected.items():
        got = registry_run[name]
        assert (got["model"], got["preprocessor"], got["weights_diff"]) == (model, pre, 0.0), name
    assert registry_run["gpt2"]["same_ids"]
    assert registry_run["whisper-base"]["tokenizer"] == "PreTrainedTokenizerFast"
    assert registry_run["whisper-base"]["same_ids"] and registry_run["whisper-base"]["chunk_length"] == 2
    assert registry_run["vit-base"]["size"] == {"height": 32, "width": 32}
    assert registry_run["pythia_step1000_diff"] == 0.0


def test_registry_gated_model(registry_run):
    assert registry_run["llama_no_token"][0] == "AccessError"
    assert registry_run["llama_accepted"] == "LlamaModel"


def test_registry_text_models_load_from_a_cold_cache(registry_run):
    # transformers 4.57's AutoTokenizer raises TypeError/AttributeError, not OSError, when the model is cached and
    # its tokenizer is not: the cache probe must not take that for a final answer.
    assert registry_run["cold_text"] is None, registry_run["cold_text"][:2]


def test_registry_remote_code_models_load_or_are_one_line_skips(registry_run):
    """CharacterBERT (served as recorded: a `character_bert` config without auto_map, which no transformers class
    reads) is one Unavailable line naming the repository and the cause, never a traceback; MANTa (its config's
    auto_map recorded) loads the stand-in's remote code at its pinned commit, with ByT5's tokenizer."""
    name, mro, _, message = registry_run["character-bert"]
    assert name == "Unavailable" and "\n" not in message
    assert message.startswith("helboukkouri/character-bert could not be loaded: ValueError: ")
    assert "model type `character_bert`" in message
    assert registry_run["manta-lm"] == ["MantaModel", "ByT5Tokenizer", "transformers_modules"]


def test_registry_refused_token_is_a_model_access_error(registry_run):
    # transformers wraps GatedRepoError in OSError; hub.load reads it from the exception chain.
    assert registry_run["llama_wrong_token"][0] == "AccessError", registry_run["llama_wrong_token"][:2]
    assert "accept its licence" in registry_run["llama_wrong_token"][3] and "HF_TOKEN" in registry_run["llama_wrong_token"][3]


# ---------------------------------------------------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------------------------------------------------


def test_wikitext_validation_is_the_served_lines(datasets_run, standin):
    lines = datasets_run["wikitext"]
    assert lines == build.wikitext_split("validation")
    assert 200 < len(lines) < 1000
    assert any(t.startswith(" = ") and t.endswith(" = \n") for t in lines) and "" in lines
    fetched = {r["file"] for r in _log(standin, datasets_run["wikitext_log"]) if r["method"] == "GET"}
    assert "wikitext-103-raw-v1/validation-00000-of-00001.parquet" in fetched


def test_imagenette_320px_from_the_parquet_branch(datasets_run, standin):
    got = datasets_run["imagenette"]
    jpegs, labels = build.imagenette_split("320px", "validation")
    assert got["names"] == list(build.IMAGENETTE_CLASSES)
    assert got["labels"] == labels and sorted(set(labels)) == list(range(10))
    assert got["sha"] == [hashlib.sha256(j).hexdigest() for j in jpegs]
    assert got["first"] == ["JPEG", "RGB", [80, 64]]  # (width, height) of the 320px stand-ins
    from PIL import Image

    assert got["first_pixels"] == pytest.approx(np.asarray(Image.open(io.BytesIO(jpegs[0]))).astype(float).mean())
    log = _log(standin, datasets_run["imagenette_log"])
    assert {r["revision"] for r in log if r["repo_id"] == "frgfm/imagenette"} >= {"refs/convert/parquet"}
    assert {r["file"] for r in log if r["method"] == "GET" and (r["file"] or "").endswith(".parquet")} <= {
        "320px/train/0000.parquet", "320px/validation/0000.parquet"}


def test_imagenette_main_is_a_refused_script_and_has_no_320px_config(datasets_run):
    name, _, _, message = datasets_run["imagenette_main"]
    assert name == "RuntimeError" and message == "Dataset scripts are no longer supported, but found imagenette.py"
    name, _, _, message = datasets_run["imagenette_config_on_parquet"]
    assert name == "ValueError" and "BuilderConfig '320px' not found" in message


def test_librispeech_validation_downloads_only_validation_shards(datasets_run, standin):
    got = datasets_run["librispeech"]
    rows = build.librispeech_rows("clean", "validation", 0)
    assert got["columns"] == ["file", "audio", "text", "speaker_id", "chapter_id", "id"]
    assert (got["text"], got["id"], got["speaker_id"]) == (rows["text"], rows["id"], rows["speaker_id"])
    assert got["sha"] == [hashlib.sha256(a["bytes"]).hexdigest() for a in rows["audio"]]
    assert got["rates"] == [16000] * len(rows["id"])
    from anisotropy.data.speech import synthetic_speech

    n = len(rows["id"])
    original = synthetic_speech(n, seed=build._seed("librispeech", "clean", "validation", "0"),
                                seconds=build.VALIDATION_SECONDS)
    assert got["lengths"] == [len(u["array"]) for u in original]
    assert np.abs(np.array(got["first"]) - original[0]["array"][:400]).max() <= 1 / 32768  # FLAC, 16-bit
    resolved = {r["file"] for r in _log(standin, datasets_run["librispeech_log"])
                if r["method"] == "GET" and (r["file"] or "").endswith(".parquet")}
    assert resolved == {"clean/validation/0000.parquet"}
    tree = subprocess.run(["git", f"--git-dir={standin.root / 'datasets/openslr/librispeech_asr'}", "ls-tree", "-r",
                           "-l", "main", "clean/"], capture_output=True, text=True, check=True).stdout
    sizes = {line.split("\t")[1]: int(line.split()[3]) for line in tree.splitlines()}
    train = [size for path, size in sizes.items() if "/train." in path]
    assert len(train) == 4 and min(train) > sizes["clean/validation/0000.parquet"]  # served, never fetched
    assert max(got["lengths"]) > 20 * 16_000  # the book's split has full-length utterances, as LibriSpeech's has


def test_librispeech_config_form_downloads_every_split(datasets_run, standin):
    """Why data_speech.librispeech must not call load_dataset(repo, "clean", split="validation"): datasets prepares the
    whole config, so every train shard (tens of GB on the Hub) is downloaded first."""
    resolved = {r["file"] for r in _log(standin, datasets_run["librispeech_config_log"])
                if r["method"] == "GET" and (r["file"] or "").endswith(".parquet")}
    # (the validation shard is in the client's cache already, from the data_files load)
    assert {f"clean/{s}/{k:04d}.parquet" for s in ("train.100", "train.360") for k in (0, 1)} <= resolved


# ---------------------------------------------------------------------------------------------------------------------
# enwik8, the environment, the command line
# ---------------------------------------------------------------------------------------------------------------------


def test_enwik8_zip_downloads_with_its_sha256(standin):
    url, _, digest = standin.env()["ANISOTROPY_ENWIK8_URL"].partition("#sha256=")
    data = urllib.request.urlopen(url, timeout=10).read()
    assert hashlib.sha256(data).hexdigest() == digest == standin.manifest["files"]["enwik8"]["sha256"]
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.namelist() == ["enwik8"]
        text = z.read("enwik8").decode()
    assert text.startswith("<mediawiki ") and text.rstrip().endswith("</mediawiki>")
    for marker in ("<page>", "<title>", '<text xml:space="preserve">', "[[", "[[Image:", "{{", "&lt;ref&gt;",
                   "{|", "'''", "\n== ", "&quot;"):
        assert marker in text, marker
    assert len(text) > 100_000


def test_client_environment(standin, tmp_path):
    env = standin.env(base={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_TOKEN": "x", "PATH": "/bin"})
    assert env["HF_ENDPOINT"] == standin.endpoint and standin.endpoint.startswith("http://127.0.0.1:")
    assert not {"HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_TOKEN"} & set(env)
    assert env["HF_HUB_DISABLE_TELEMETRY"] == "1" and Path(env["HF_HOME"]).parent == standin.state


def test_clients_reached_nothing_beyond_loopback(standin, models_run, registry_run, datasets_run):
    # datasets asks "datasets-server.<endpoint host>" for a Parquet export of a repository's main branch: the guard
    # refuses it before any DNS query, as an offline machine would.
    assert set(standin.refused_hosts()) <= {"datasets-server.127.0.0.1"}


def test_cli_run_passes_the_environment_and_exit_code(standin):
    code = "import os, sys; print(os.environ['HF_ENDPOINT'], 'HF_HUB_OFFLINE' in os.environ); sys.exit(3)"
    proc = run_guarded([sys.executable, str(ROOT / "tests" / "hub_standin"), "run", "--root", str(standin.root),
                        "--", sys.executable, "-c", code], expected_s=30, capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 3, proc.stderr[-2000:]
    endpoint, offline = proc.stdout.split()
    assert endpoint.startswith("http://127.0.0.1:") and endpoint != standin.endpoint and offline == "False"
