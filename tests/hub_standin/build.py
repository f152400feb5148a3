"""Repository builder of the Hub stand-in: the ``paper`` profile's models and data as tiny git repositories, in the
shapes the real Hub holds them.

Which repositories and revisions: ``paper_manifest()`` derives them from the ``paper`` profile (every registry name a
chapter asks for, MultiBERTs checkpoints as repositories of their own, Pythia and Bloom revisions as branches, the
repository the registry reads a weights-only checkpoint's tokenizer from, the gated Llama-2 ids). What each of them
holds: ``lib/anisotropy/hub_manifest.yml``, the record of the real Hub read from public pages independently of the
registry, shipped with the package (``hub_manifest()``; ``tests/test_hub_manifest.py`` checks it). Per revision (``revision_shape``) it gives the file
names, the weight format(s) (``pytorch_model.bin`` and/or ``model.safetensors``), whether a tokenizer and a
preprocessor are there; per repository (``repo_facts``) the config's ``model_type``, ``architectures``, ``auto_map``
and remote code. ``compose`` turns the tiny model's ``save_pretrained`` files (random weights of the exact class,
``tiny_files``) into that shape: the manifest's weight files only, no tokenizer where the Hub has none (Bloom's
intermediate checkpoints), a legacy vocabulary (``vocab.txt``, ``vocab.json`` + ``merges.txt``) where the Hub has no
``tokenizer.json`` (MultiBERTs, OPT), and a placeholder for each listed file no client reads here (TF/Flax/Rust/ONNX
weights, licences). Remote-code models (CharacterBERT, MANTa) are served with a config of their Hub shape
(``model_type``, ``auto_map``), tiny weights under the real file name and placeholder modules that raise ImportError
(``remote_files``): the code path meets them as on the Hub and skips them. Where the manifest says ``unverified`` (or
does not record a repository or revision), the registry's expectation is served instead (the tiny model's files with
``model.safetensors``, the tiny config) and ``manifest.json`` lists the field under ``served.<rev>.unverified``. A
repository or revision the manifest says does not exist is not served (``not_served``).

``populate(root, manifest)`` writes the plan in olah's mirror layout, ``root/{models|datasets}/{org}/{repo}`` (bare git
repositories, files committed directly, no LFS; each branch's tree exactly its files), plus
``root/files/dc/enwik8.zip`` and ``root/manifest.json`` (the plan, what was not served and why, the commit of every
branch, and per repository and revision the files served, the placeholders and the unverified fields).
``ensure_built()`` keys a cached build by a hash of this file, ``hub_manifest.yml``, the plan and the library inputs, so
test sessions reuse it and a changed ``hub_manifest.yml`` rebuilds.

Runs in the project's ``.venv`` (torch, transformers, datasets, pyarrow, Pillow, soundfile and ``anisotropy``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
FORMAT = 1
EPOCH = 1_704_067_200  # 2024-01-01T00:00:00Z: fixed commit times, so every build has the same commit hashes
AUTHOR = "hub stand-in <standin@localhost>"
GITATTRIBUTES = b"".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n".encode() for p in (
    "*.bin", "*.safetensors", "*.parquet", "*.zip", "*.flac"))
IMAGENETTE_CLASSES = ("tench", "English springer", "cassette player", "chain saw", "church", "French horn",
                      "garbage truck", "gas pump", "golf ball", "parachute")
IMAGENETTE_SIZES = {"160px": (32, 40), "320px": (64, 80), "full_size": (96, 120)}  # (height, width), tiny
ENWIK8_PATH = "dc/enwik8.zip"  # served at /dc/enwik8.zip, the real file's path on its host
# What the real Hub holds (recorded from public pages, not from the registry): the package's own record (hub.MANIFEST,
# which the chapters read to name what is unverified), read here by path: this module imports the package lazily.
HUB_MANIFEST = PROJECT / "lib" / "anisotropy" / "hub_manifest.yml"
UNVERIFIED = "unverified"
# Files a tokenizer is made of (dropped where the Hub's revision has no tokenizer).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "spiece.model", "added_tokens.json", "normalizer.json", "tokenizer.model",
                   "sentencepiece.bpe.model")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
DEFAULT_WEIGHTS = ["model.safetensors"]  # the registry's expectation where the Hub's weight files are unverified
# The slow tokenizer class that reads the legacy vocabulary files of a backend model, for a revision whose file list
# holds vocab.txt or vocab.json + merges.txt but no tokenizer.json (MultiBERTs, OPT).
LEGACY_TOKENIZER = {"WordPiece": "BertTokenizer", "BPE": "GPT2Tokenizer"}


def _seed(*parts: str) -> int:
    """A stable seed per model and revision (independent of the profile's order)."""
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:4], "big") % 2**31


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# The manifest: what the paper profile asks for
# ---------------------------------------------------------------------------------------------------------------------


def hub_manifest() -> dict:
    """``hub_manifest.yml``: what the real Hub holds, per repository and revision (read from public pages, not from the
    registry; ``tests/test_hub_manifest.py`` checks its form), through the package's one reader of it."""
    from anisotropy import hub

    return hub.manifest()


def repo_facts(recorded: dict | None) -> dict:
    """A repository's config shape as served: ``model_type``, ``architectures``, ``auto_map``, ``remote_code`` and
    the version of transformers its remote code was written for, where the manifest knows them (``None`` where it says
    ``unverified``, listed in ``unverified``; then the tiny model's own config, the registry's expectation, is
    served)."""
    if recorded is None:
        return dict(in_manifest=False, unverified=["repository not in hub_manifest.yml"])
    out, unverified = dict(in_manifest=True), []
    for key in ("model_type", "architectures", "auto_map", "remote_code", "written_for_transformers"):
        value = recorded.get(key, UNVERIFIED)
        if value == UNVERIFIED:
            if key in recorded:
                unverified.append(key)
            value = None
        out[key] = value
    return dict(out, unverified=unverified)


def revision_shape(recorded: dict | None, rev: str) -> dict:
    """What one revision serves, from the manifest: ``files`` (the names the Hub lists, or ``None`` where unverified:
    then the registry's expectation, the tiny model's ``save_pretrained`` files with ``.gitattributes`` and
    ``README.md``), ``complete`` (the list is the whole revision), ``models.weights`` (the weight files; unverified:
    ``model.safetensors``), ``tokenizer`` and ``preprocessor`` (present or not; ``None`` where unverified or not
    recorded), ``exists``, and ``unverified``: the fields that fell back to the registry's expectation."""
    found = None if recorded is None else (recorded.get("revisions") or {}).get(rev)
    if found is None:
        where = "repository" if recorded is None else "revision"
        return dict(exists=True, files=None, complete=False, folders=[], weights=list(DEFAULT_WEIGHTS),
                    tokenizer=None, preprocessor=None, unverified=[f"{where} not in hub_manifest.yml"])
    unverified = []
    files = found.get("files", UNVERIFIED)
    if isinstance(files, dict):
        folders = sorted(n for n in files if n.endswith("/"))  # e.g. coreml/: its content was not read
        files = sorted(n for n in files if not n.endswith("/"))
        complete = bool(found.get("files_complete", True))
        if not complete:
            unverified.append("files (the list read is partial: the registry's files are added)")
        if folders:
            unverified.append(f"folders {folders} (content not read: not served)")
    else:
        files, complete, folders = None, False, []
        unverified.append("files")
    weights = found.get("weights", UNVERIFIED)
    if weights == UNVERIFIED:
        unverified.append("weights")
        weights = list(DEFAULT_WEIGHTS)
    else:
        weights = [w for w in weights if w in WEIGHT_FILES]
    flags = {}
    for key in ("tokenizer", "preprocessor"):
        value = found.get(key)
        if value == UNVERIFIED:
            unverified.append(key)
        flags[key] = value if isinstance(value, bool) else None
    exists = found.get("exists", UNVERIFIED)
    if exists == UNVERIFIED:
        unverified.append("exists")
    return dict(exists=exists if isinstance(exists, bool) else True, files=files, complete=complete, folders=folders,
                weights=weights, **flags, unverified=unverified)


def paper_manifest(profile: str = "paper") -> dict:
    """Every repository the profile's chapters request, as a JSON-able dict (the build's plan).

    Models: every string value of a chapter's parameters (also inside lists and dicts) that is a registry name, plus
    MultiBERTs from a chapter with ``encoder: multiberts`` (``seeds``; ``revisions: []`` = every revision), plus the
    gated Llama-2 ids (served, marked gated, to exercise access errors), plus the repository a weights-only
    checkpoint's tokenizer comes from (``ModelSpec.tokenizer_repo``). A ``<x>_revisions`` list names the revisions
    of the models in ``<x>_models`` that get weights of their own; the other branches share the final weights.
    Each entry carries ``hub`` (``repo_facts``) and ``shapes`` (``revision_shape`` of main and every branch) from
    ``hub_manifest.yml``; remote-code models are served too (``remote_code: true``).
    """
    from anisotropy import profiles
    from anisotropy.models import registry

    chapters = profiles.load(profile)["notebooks"]
    wanted: dict[str, set[str]] = {}  # registry name -> chapters
    explicit: dict[str, set[str]] = {}  # registry name -> revisions the profile names
    multiberts: dict[str, set[str]] = {}

    def walk(value, chapter):
        if isinstance(value, str) and value in registry.MODELS:
            wanted.setdefault(value, set()).add(chapter)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, chapter)
        elif isinstance(value, dict):
            for v in value.values():
                walk(v, chapter)

    for chapter, params in chapters.items():
        params = params or {}
        walk(params, chapter)
        for key, revisions in params.items():
            if key.endswith("_revisions") and isinstance(params.get(key[:-len("_revisions")] + "_models"), list):
                for name in params[key[:-len("_revisions")] + "_models"]:
                    explicit.setdefault(name, set()).update(revisions or [])
        if params.get("encoder") == "multiberts":
            for s in params.get("seeds") or []:
                name = f"multiberts-seed-{s}"
                wanted.setdefault(name, set()).add(chapter)
                revs = params.get("revisions") or registry.spec(name).revisions
                multiberts.setdefault(name, set()).update(revs)
    extra = {s.name for s in registry.MODELS.values() if s.access == "gated"} - set(wanted)

    hub = hub_manifest()["repos"]
    models, not_served = [], []

    def add(entry: dict) -> None:
        """Attach what the Hub holds (the repository's facts, each revision's shape); a repository or revision the
        Hub's manifest says does not exist is not served."""
        recorded = hub.get(entry["repo"])
        if recorded is not None and recorded.get("exists") is False:
            not_served.append(dict(model=entry["model"], repo=entry["repo"], chapters=entry["chapters"],
                                   reason="does not exist on the Hub (hub_manifest.yml)"))
            return
        entry["hub"] = repo_facts(recorded)
        shapes = {"main": revision_shape(recorded, "main")}
        for rev in list(entry["branches"]):
            shape = revision_shape(recorded, rev)
            if shape["exists"] is False:
                del entry["branches"][rev]
                entry.setdefault("branches_not_served", []).append(rev)
                continue
            shapes[rev] = shape
        entry["shapes"] = shapes
        models.append(entry)

    for name in sorted(set(wanted) | extra):
        s = registry.spec(name)
        why = sorted(wanted.get(name, ())) or ["gated access checks (no chapter of the profile)"]
        base = dict(model=name, architecture=s.architecture, modality=s.modality, chapters=why,
                    gated=s.access == "gated", local_package=s.local_package, remote_code=s.remote_code)
        if s.remote_code:  # served in the Hub's shape, with the stand-in's code or a placeholder (serves_code)
            add(dict(base, repo=s.hub_id, revision=None, seed=_seed(name), branches={}, pinned=s.code_revision))
            continue
        if s.revision_in_repo:  # MultiBERTs: one repository per checkpoint; the final model = the last checkpoint
            revs = [r for r in s.revisions if r in multiberts.get(name, ())]
            for r in revs:
                add(dict(base, repo=s.hub_location(r)[0], revision=r, seed=_seed(name, r), branches={}))
            final = s.revisions[-1]
            add(dict(base, repo=s.hub_id, revision=None, seed=_seed(name, final), branches={},
                     same_weights_as=s.hub_location(final)[0]))
            continue
        final = s.revisions[-1] if s.revisions and s.revisions_exhaustive else None
        branches = {}
        for r in s.revisions:
            distinct = r in explicit.get(name, ()) and r != final
            branches[r] = dict(seed=_seed(name, r) if distinct else _seed(name), distinct=distinct)
        add(dict(base, repo=s.hub_id, revision=None, seed=_seed(name), branches=branches, final_branch=final))
        if s.tokenizer_repo is not None:  # the registry reads the tokenizer there (the checkpoints lack one)
            add(dict(base, repo=s.tokenizer_repo, revision=None, seed=_seed(name), branches={},
                     role=f"final model, whose tokenizer the registry reads for {s.hub_id}"))
    return dict(
        format=FORMAT,
        profile=profile,
        models=models,
        not_served=not_served,
        datasets=[
            dict(repo="Salesforce/wikitext", configs=["wikitext-103-raw-v1"], used_by="data.wikipedia.wikitext"),
            dict(repo="frgfm/imagenette", configs=list(IMAGENETTE_SIZES), used_by="data.load('imagenette')",
                 layout="main: loading script + README; refs/convert/parquet: <size>/<split>/0000.parquet"),
            dict(repo="openslr/librispeech_asr", configs=["clean", "other", "all"], used_by="data.speech.librispeech"),
        ],
        files=dict(enwik8=dict(path="/" + ENWIK8_PATH, used_by="data.wikipedia.enwik8 (ANISOTROPY_ENWIK8_URL)")),
    )


# ---------------------------------------------------------------------------------------------------------------------
# Git: one fast-import stream per repository
# ---------------------------------------------------------------------------------------------------------------------


class _Repo:
    """A git fast-import stream: blobs are stored once per repository, commits have fixed times."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.mark = 0
        self.blobs: dict[bytes, int] = {}
        self.tick = 0

    def _blob(self, data: bytes) -> int:
        key = hashlib.sha1(data).digest()
        if key not in self.blobs:
            self.mark += 1
            self.blobs[key] = self.mark
            self.parts += [b"blob\nmark :%d\ndata %d\n" % (self.mark, len(data)), data, b"\n"]
        return self.blobs[key]

    def commit(self, ref: str, files: dict[str, bytes], message: str, parent: int | None = None,
               exact: bool = False) -> int:
        marks = {path: self._blob(data) for path, data in sorted(files.items())}
        self.mark += 1
        self.tick += 1
        msg = message.encode()
        head = (f"commit {ref}\nmark :{self.mark}\nauthor {AUTHOR} {EPOCH + self.tick} +0000\n"
                f"committer {AUTHOR} {EPOCH + self.tick} +0000\n").encode()
        self.parts += [head, b"data %d\n" % len(msg), msg, b"\n"]
        if parent is not None:
            self.parts.append(b"from :%d\n" % parent)
            if exact:  # the commit's tree is exactly ``files``, not the parent's tree plus them
                self.parts.append(b"deleteall\n")
        self.parts += [f"M 100644 :{marks[p]} {p}\n".encode() for p in marks]
        self.parts.append(b"\n")
        return self.mark

    def alias(self, ref: str, mark: int) -> None:
        """``ref`` at the commit ``mark`` (the server resolves a branch name before a commit hash)."""
        self.parts.append(f"reset {ref}\nfrom :{mark}\n\n".encode())

    def write(self, path: Path) -> dict[str, str]:
        """Create the bare repository at ``path``; returns {ref: commit}."""
        path.parent.mkdir(parents=True, exist_ok=True)
        git = ["git", "-c", "gc.auto=0", f"--git-dir={path}"]
        subprocess.run(["git", "init", "-q", "--bare", "--template=", "--initial-branch=main", str(path)], check=True)
        subprocess.run([*git, "fast-import", "--quiet", "--done"], input=b"".join(self.parts) + b"done\n",
                       check=True)
        out = subprocess.run([*git, "for-each-ref", "--format=%(refname) %(objectname)"], check=True,
                             capture_output=True, text=True).stdout
        return dict(line.split() for line in out.splitlines())


def _initial(repo: _Repo, readme: bytes | None = None) -> int:
    files = {".gitattributes": GITATTRIBUTES}
    if readme is not None:
        files["README.md"] = readme
    return repo.commit("refs/heads/main", files, "initial commit")


# ---------------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------------


def tiny_files(name: str, seed: int) -> dict[str, bytes]:
    """Every file ``save_pretrained`` writes for the tiny variant of ``name`` at ``seed``: config, the weights in
    both formats (``model.safetensors`` and ``pytorch_model.bin``), the preprocessor (and Whisper's text tokenizer)."""
    from anisotropy.models import registry

    loaded = registry.load(name, "tiny", seed=seed)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for safe in (True, False):
            folder = Path(tmp) / str(safe)
            loaded.model.save_pretrained(folder, safe_serialization=safe)
            out.update({p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()})
        folder = Path(tmp) / "pre"
        loaded.preprocessor.save_pretrained(folder)
        if loaded.tokenizer is not None:
            loaded.tokenizer.save_pretrained(folder)
        out.update({p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()})
    return out


def placeholder(name: str, repo: str) -> bytes:
    """The content of a file the Hub lists but the stand-in does not simulate (TF/Flax/Rust/ONNX weights, licences,
    a tokenizer file no client reads here): ``{}`` for JSON (a reader gets an empty object), else one line saying so;
    a file the manifest records as 0 B stays empty."""
    if name.endswith(".json"):
        return b"{}\n"
    return f"hub stand-in: placeholder of {repo}/{name}; the real file is not simulated\n".encode()


def legacy_vocabulary(tokenizer_json: bytes) -> dict[str, bytes]:
    """The legacy vocabulary files of a tokenizer.json's model (WordPiece: vocab.txt; BPE: vocab.json, merges.txt),
    as the Hub's older repositories hold them instead of tokenizer.json."""
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        Tokenizer.from_str(tokenizer_json.decode()).model.save(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir()}


def compose(repo: str, tiny: dict[str, bytes], shape: dict, readme: bytes) -> tuple[dict[str, bytes], list[str]]:
    """The files of one revision in the Hub's shape (``revision_shape``) from the tiny model's files; returns them
    and the names served as placeholders.

    Weight files: the manifest's format(s) only. No tokenizer (preprocessor) on the Hub: none served. A file list
    read from the Hub: exactly those names (a partial list: those plus the registry's files); a listed legacy
    vocabulary (vocab.txt, vocab.json, merges.txt) comes from the tiny tokenizer, and where tokenizer.json is not
    listed, tokenizer_config.json names the slow class that reads it (BertTokenizer, GPT2Tokenizer), as on the Hub."""
    files = {".gitattributes": GITATTRIBUTES, "README.md": readme, **tiny}
    for w in WEIGHT_FILES:
        if w not in shape["weights"]:
            files.pop(w, None)
    if shape["tokenizer"] is False:
        files = {k: v for k, v in files.items() if k not in TOKENIZER_FILES}
    if shape["preprocessor"] is False:
        files.pop("preprocessor_config.json", None)
    listed, placeholders = shape["files"], []
    if listed is None:
        return files, placeholders
    if shape["complete"]:
        files = {k: v for k, v in files.items() if k in listed}
    legacy = legacy_vocabulary(tiny["tokenizer.json"]) if "tokenizer.json" in tiny else {}
    for name in listed:
        if name not in files:
            if name in legacy:
                files[name] = legacy[name]
            else:
                files[name] = placeholder(name, repo)
                placeholders.append(name)
    if "tokenizer.json" in tiny and "tokenizer.json" not in files and "tokenizer_config.json" in files \
            and "tokenizer_config.json" in tiny:
        from tokenizers import Tokenizer

        kind = type(Tokenizer.from_str(tiny["tokenizer.json"].decode()).model).__name__
        if kind in LEGACY_TOKENIZER and any(n in files for n in legacy):
            config = json.loads(tiny["tokenizer_config.json"])
            config["tokenizer_class"] = LEGACY_TOKENIZER[kind]
            files["tokenizer_config.json"] = json.dumps(config, indent=2).encode()
    return files, sorted(placeholders)


def _readme(entry: dict) -> bytes:
    return (f"---\nlibrary_name: transformers\n---\n# {entry['repo']}\n\nTiny random stand-in of "
            f"`{entry['model']}` ({entry['architecture']}), seed {entry['seed']}.\n").encode()


def _remote():
    """``hub_standin.remote`` (the stand-in's remote code), whether this module runs in its package or as a script."""
    import importlib

    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))
    return importlib.import_module("hub_standin.remote")


def serves_code(entry: dict) -> bool:
    """Whether the stand-in serves runnable remote code for a remote-code entry: where the manifest records the
    repository's ``auto_map`` (the Hub's config points at its code) and ``hub_standin/remote`` holds a stand-in of
    that code. Else (CharacterBERT: whether its config has an auto_map was not read) its code files are placeholders
    and its config has no auto_map, as recorded."""
    return bool(entry["hub"].get("auto_map")) and entry["repo"] in _remote().STANDINS


def remote_files(entry: dict, seed: int) -> dict[str, bytes]:
    """The files of a remote-code model (CharacterBERT, MANTa) that the stand-in cannot build from a local class: a
    config.json of the Hub's shape (its model_type, architectures, auto_map and transformers version where the
    manifest records them) and tiny random weights in the served formats. Where ``serves_code``: the stand-in's
    code (``hub_standin/remote``: the real code's input shapes and masks), its config keys and weights, and its
    tokenizer config; else placeholder modules for the code files (``*.py``) that raise ImportError."""
    import torch
    from safetensors.torch import save as save_safetensors

    facts = entry["hub"]
    config = {k: facts[k] for k in ("architectures", "auto_map") if facts.get(k)}
    config["model_type"] = facts.get("model_type") or entry["model"]
    if facts.get("written_for_transformers"):
        config["transformers_version"] = str(facts["written_for_transformers"])
    if serves_code(entry):
        files = _remote().repo_files(entry["repo"], seed)
        served = json.loads(files["config.json"])
        served.update(config, stand_in="tiny stand-in of a remote-code checkpoint: hub_standin/remote's code")
        files["config.json"] = json.dumps(served, indent=2, sort_keys=True).encode()
        return files
    config["stand_in"] = "tiny placeholder of a remote-code checkpoint; its keys beyond model_type are not simulated"
    gen = torch.Generator().manual_seed(seed)
    state = {"stand_in.weight": torch.randn(8, 8, generator=gen)}
    buf = io.BytesIO()
    torch.save(state, buf)
    files = {"config.json": json.dumps(config, indent=2, sort_keys=True).encode(),
             "model.safetensors": save_safetensors(state), "pytorch_model.bin": buf.getvalue()}
    return files


def remote_code_module(repo: str, name: str, written_for) -> bytes:
    version = f", written for transformers {written_for}" if written_for else ""
    return (f'"""Hub stand-in: placeholder of {repo}/{name}. The real remote code{version} is not served."""\n\n'
            f"raise ImportError(\"the Hub stand-in does not serve the remote code of {repo} ({name}{version})\")\n"
            ).encode()


def _model_repo(entry: dict) -> tuple[_Repo, dict]:
    """The repository of one manifest entry, every revision in the Hub's shape; returns it and, per revision, what
    was served (file names, placeholders, unverified fields)."""
    repo = _Repo()
    readme = _readme(entry)
    base = _initial(repo, readme)
    cache: dict[int, dict[str, bytes]] = {}
    recorded = hub_manifest()["repos"].get(entry["repo"], {})

    def tiny(seed: int) -> dict[str, bytes]:
        if seed not in cache:
            if entry.get("remote_code"):
                cache[seed] = remote_files(entry, seed)
            else:
                cache[seed] = tiny_files(entry["model"], seed)
        return cache[seed]

    def revision(rev: str, seed: int) -> tuple[dict[str, bytes], dict]:
        shape = entry["shapes"][rev]
        files, placeholders = compose(entry["repo"], tiny(seed), shape, readme)
        if entry.get("remote_code"):  # code files: the stand-in's or modules that refuse to import; 0 B stays empty
            sizes = (recorded.get("revisions") or {}).get(rev, {}).get("files") or {}
            code = _remote().code_files(entry["repo"]) if serves_code(entry) else {}
            for name in list(files):
                if name in code:
                    files[name] = code[name]
                elif name.endswith(".py"):
                    files[name] = remote_code_module(entry["repo"], name, entry["hub"].get("written_for_transformers"))
                    placeholders = sorted(set(placeholders) | {name})
                elif str(sizes.get(name)).strip() == "0 B":
                    files[name] = b""
        model_type = json.loads(files["config.json"]).get("model_type") if "config.json" in files else None
        return files, dict(files=sorted(files), placeholders=placeholders, unverified=shape["unverified"],
                           model_type=model_type)

    served = {}
    main, served["main"] = revision("main", entry["seed"])
    head = repo.commit("refs/heads/main", main, "Upload model", parent=base, exact=True)
    if entry.get("pinned"):  # the commit a remote-code model is pinned to: a ref of that name at main's commit
        repo.alias(f"refs/heads/{entry['pinned']}", head)
        served[entry["pinned"]] = served["main"]
    for rev, b in entry["branches"].items():  # every branch: a commit of its own; shared weights share blobs
        files, served[rev] = revision(rev, b["seed"])
        repo.commit(f"refs/heads/{rev}", files, f"Checkpoint {rev}", parent=base, exact=True)
    return repo, served


# ---------------------------------------------------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------------------------------------------------


def _parquet(columns: dict, features) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns, schema=features.arrow_schema)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _yaml_card(front: dict, body: str) -> bytes:
    import yaml

    return ("---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n" + body).encode()


def wikitext_lines(paragraphs, seed: int) -> list[str]:
    """WikiText-103 raw style: ' = Title = \\n', ' = = Section = = \\n', ' paragraph\\n', and '' between blocks."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines: list[str] = []
    for start in range(0, len(paragraphs), 6):
        article = paragraphs[start:start + 6]
        title = " ".join(article[0].split()[:4]).strip(".,;:")
        lines += ["", f" = {title} = \n", ""]
        for i, par in enumerate(article):
            if i and rng.random() < 0.3:
                lines += [f" = = {' '.join(par.split()[:3]).strip('.,;:')} = = \n", ""]
            lines += [f" {par}\n", ""]
    return lines


WIKITEXT_SPLITS = {"test": slice(0, 90), "validation": slice(90, 180), "train": slice(180, None)}  # paragraphs


def wikitext_split(split: str) -> list[str]:
    """The ``text`` column of one WikiText split, in order (distinct prose paragraphs per split)."""
    from anisotropy.data.prose import prose_paragraphs

    return wikitext_lines(prose_paragraphs()[WIKITEXT_SPLITS[split]], _seed("wikitext", split))


def _wikitext() -> _Repo:
    from datasets import Features, Value

    features = Features({"text": Value("string")})
    files = {}
    for split in WIKITEXT_SPLITS:
        lines = wikitext_split(split)
        shards = 2 if split == "train" else 1  # as in the real repository: train in two shards
        step = -(-len(lines) // shards)
        for k in range(shards):
            files[f"wikitext-103-raw-v1/{split}-{k:05d}-of-{shards:05d}.parquet"] = _parquet(
                {"text": lines[k * step:(k + 1) * step]}, features)
    card = _yaml_card(
        {"language": ["en"], "license": ["cc-by-sa-3.0", "gfdl"], "pretty_name": "WikiText (hub stand-in)",
         "dataset_info": [{"config_name": "wikitext-103-raw-v1",
                           "features": [{"name": "text", "dtype": "string"}]}],
         "configs": [{"config_name": "wikitext-103-raw-v1",
                      "data_files": [{"split": s, "path": f"wikitext-103-raw-v1/{s}-*"}
                                     for s in ("test", "train", "validation")]}]},
        "# WikiText (hub stand-in)\n\nWikiText-103-style lines of English prose (Python's language reference).\n")
    repo = _Repo()
    base = _initial(repo)
    repo.commit("refs/heads/main", {"README.md": card, **files}, "Add wikitext-103-raw-v1 data files", parent=base)
    return repo


def imagenette_split(size: str, split: str) -> tuple[list[bytes], list[int]]:
    """JPEG bytes and labels of one split of one Imagenette size (labels cycle through the 10 classes)."""
    import numpy as np
    from PIL import Image

    from anisotropy.data.images import synthetic_shapes

    h, w = IMAGENETTE_SIZES[size]
    n = 20 if split == "validation" else 30
    images, _ = synthetic_shapes(n, size=max(h, w), seed=_seed("imagenette", size, split))
    out = []
    for arr in images:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(arr[:h, :w])).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out, [i % len(IMAGENETTE_CLASSES) for i in range(n)]


def _imagenette() -> _Repo:
    from datasets import ClassLabel, Features, Image

    features = Features({"image": Image(), "label": ClassLabel(names=list(IMAGENETTE_CLASSES))})
    script = (
        '"""Imagenette: 10 easy ImageNet classes (hub stand-in of a loading script; datasets>=4 refuses it)."""\n\n'
        "import datasets\n\n\nclass Imagenette(datasets.GeneratorBasedBuilder):\n"
        '    BUILDER_CONFIGS = [datasets.BuilderConfig(name=n) for n in ("full_size", "320px", "160px")]\n\n'
        "    def _info(self):\n        raise NotImplementedError(\"stand-in: the script is never run\")\n").encode()
    card = _yaml_card({"license": "apache-2.0", "task_categories": ["image-classification"],
                       "pretty_name": "Imagenette (hub stand-in)", "size_categories": ["10K<n<100K"]},
                      "# Imagenette (hub stand-in)\n\nLoaded by a script on `main`; the Hub's Parquet conversion "
                      "lives on `refs/convert/parquet` as `<size>/<split>/0000.parquet`.\n")
    repo = _Repo()
    base = _initial(repo, card)
    repo.commit("refs/heads/main", {"imagenette.py": script}, "Add loading script", parent=base)
    files = {".gitattributes": GITATTRIBUTES}
    for size in IMAGENETTE_SIZES:
        for split in ("train", "validation"):
            jpegs, labels = imagenette_split(size, split)
            files[f"{size}/{split}/0000.parquet"] = _parquet(
                {"image": [{"bytes": b, "path": None} for b in jpegs], "label": labels}, features)
    repo.commit("refs/convert/parquet", files, "Update parquet files")
    return repo


LIBRISPEECH_SPLITS = {  # config -> split -> (shards, utterances per shard); train shards clearly larger
    "clean": {"test": (1, 4), "train.100": (2, 10), "train.360": (2, 10), "validation": (1, 4)},
    "other": {"test": (1, 4), "train.500": (2, 10), "validation": (1, 4)},
}
LIBRISPEECH_ALL = {"train.clean.100": ("clean", "train.100"), "train.clean.360": ("clean", "train.360"),
                   "train.other.500": ("other", "train.500"), "validation.clean": ("clean", "validation"),
                   "validation.other": ("other", "validation"), "test.clean": ("clean", "test"),
                   "test.other": ("other", "test")}


VALIDATION_SECONDS = (2.0, 33.0)
TRAIN_SECONDS = (10.0, 20.0)


def librispeech_rows(config: str, split: str, shard: int) -> dict[str, list]:
    """Columns of one LibriSpeech shard: synthetic utterances (FLAC, 16 kHz) with upper-case prose transcripts."""
    import soundfile as sf

    from anisotropy.data.prose import prose_paragraphs
    from anisotropy.data.speech import synthetic_speech

    n = LIBRISPEECH_SPLITS[config][split][1]
    seed = _seed("librispeech", config, split, str(shard))
    speaker, chapter = 1000 + seed % 8000, 10000 + seed % 90000
    words = " ".join(prose_paragraphs()[seed % 500: seed % 500 + 3]).upper().split()
    cols = {k: [] for k in ("file", "audio", "text", "speaker_id", "chapter_id", "id")}
    # The split the book reads (clean validation) has utterances as long as the real one's (LibriSpeech dev-clean:
    # about 2 to 33 s), so that the speech models' passes meet full-length clips; the others stay short.
    # Train shards stay larger than the validation one, as on the Hub (what a full-config download would cost).
    seconds = (VALIDATION_SECONDS if (config, split) == ("clean", "validation") else
               TRAIN_SECONDS if split.startswith("train") else (1.0, 2.0))
    for i, utt in enumerate(synthetic_speech(n, seed=seed, seconds=seconds)):
        uid = f"{speaker}-{chapter}-{i:04d}"
        buf = io.BytesIO()
        sf.write(buf, utt["array"], utt["sampling_rate"], format="FLAC", subtype="PCM_16")
        text = " ".join(w.strip(".,;:()'\"") for w in words[i * 12:(i + 1) * 12])
        cols["file"].append(f"{uid}.flac")
        cols["audio"].append({"bytes": buf.getvalue(), "path": f"{uid}.flac"})
        cols["text"].append(text)
        cols["speaker_id"].append(speaker)
        cols["chapter_id"].append(chapter)
        cols["id"].append(uid)
    return cols


def _librispeech() -> _Repo:
    from datasets import Audio, Features, Value

    features = Features({"file": Value("string"), "audio": Audio(sampling_rate=16000), "text": Value("string"),
                         "speaker_id": Value("int64"), "chapter_id": Value("int64"), "id": Value("string")})
    files = {}
    for config, splits in LIBRISPEECH_SPLITS.items():
        for split, (shards, _) in splits.items():
            for k in range(shards):
                files[f"{config}/{split}/{k:04d}.parquet"] = _parquet(librispeech_rows(config, split, k), features)
    for split, (config, sub) in LIBRISPEECH_ALL.items():  # same blobs under all/ (git stores them once)
        for path in [p for p in files if p.startswith(f"{config}/{sub}/")]:
            files[f"all/{split}/{path.rsplit('/', 1)[1]}"] = files[path]
    feats = [{"name": "file", "dtype": "string"}, {"name": "audio", "dtype": {"audio": {"sampling_rate": 16000}}},
             {"name": "text", "dtype": "string"}, {"name": "speaker_id", "dtype": "int64"},
             {"name": "chapter_id", "dtype": "int64"}, {"name": "id", "dtype": "string"}]
    configs = {**{c: list(s) for c, s in LIBRISPEECH_SPLITS.items()}, "all": list(LIBRISPEECH_ALL)}
    card = _yaml_card(
        {"language": ["en"], "license": ["cc-by-4.0"], "pretty_name": "LibriSpeech (hub stand-in)",
         "dataset_info": [{"config_name": c, "features": feats} for c in configs],
         "configs": [{"config_name": c, "data_files": [{"split": s, "path": f"{c}/{s}/*"} for s in sorted(splits)]}
                     for c, splits in configs.items()]},
        "# LibriSpeech (hub stand-in)\n\nSynthetic vowel-like utterances (FLAC, 16 kHz) with prose transcripts, in "
        "the layout of the Hub's Parquet conversion: `<config>/<split>/<shard>.parquet`.\n")
    repo = _Repo()
    base = _initial(repo)
    repo.commit("refs/heads/main", {"README.md": card, **files}, "Convert dataset to Parquet", parent=base)
    return repo


# ---------------------------------------------------------------------------------------------------------------------
# enwik8: a small MediaWiki XML dump
# ---------------------------------------------------------------------------------------------------------------------


def enwik8_text(n_pages: int = 120) -> str:
    """A MediaWiki XML dump in enwik8's format, its page texts built from the offline prose paragraphs."""
    from xml.sax.saxutils import escape

    import numpy as np

    from anisotropy.data.prose import prose_paragraphs

    rng = np.random.default_rng(8)
    pars = prose_paragraphs()
    titles = [" ".join(p.split()[:3]).strip(".,;:()'\"").title() for p in pars]
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.3/" '
           'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" version="0.3" xml:lang="en">\n  <siteinfo>\n'
           '    <sitename>Wikipedia</sitename>\n    <base>http://en.wikipedia.org/wiki/Main_Page</base>\n'
           '    <generator>MediaWiki 1.6alpha</generator>\n    <case>first-letter</case>\n  </siteinfo>\n']

    def linked(text: str) -> str:
        words = text.split()
        for j in sorted(rng.choice(len(words), size=min(4, len(words)), replace=False)):
            w = words[j].strip(".,;:()'\"")
            if w.isalpha() and len(w) > 3:
                words[j] = words[j].replace(w, f"[[{w}]]" if rng.random() < 0.6 else f"[[{w.title()}|{w}]]", 1)
        return " ".join(words)

    per_page = max(1, len(pars) // n_pages)
    for page in range(n_pages):
        body = pars[page * per_page:(page + 1) * per_page]
        title = titles[page * per_page]
        text = [f"{{{{Infobox topic\n| name = {title}\n| field = [[Programming language]]\n}}}}",
                f"'''{title}''' {linked(body[0])}"]
        for k, par in enumerate(body[1:], 1):
            text.append(f"== {titles[page * per_page + k]} ==")
            ref = f"<ref>{{{{cite book | title = {title} | year = {1990 + k} | page = {k * 7}}}}}</ref>"
            text.append(linked(par) + (ref if rng.random() < 0.5 else ""))
            if rng.random() < 0.3:
                text.append(f"[[Image:{title.replace(' ', '_')}_{k}.png|thumb|right|{titles[page * per_page + k]}]]")
        if page % 3 == 0:
            text.append('{| class="wikitable"\n! Term !! Meaning\n|-\n| ' + title + " || "
                        + " ".join(body[0].split()[:6]) + "\n|}")
        text.append("== See also ==\n" + "\n".join(f"* [[{titles[(page * per_page + j * 11) % len(titles)]}]]"
                                                  for j in range(1, 4)))
        text.append("[[Category:Python (programming language)]]")
        out.append(f"  <page>\n    <title>{escape(title)}</title>\n    <id>{page + 1}</id>\n    <revision>\n"
                   f"      <id>{1_000_000 + page}</id>\n      <timestamp>2006-03-{page % 28 + 1:02d}T12:00:00Z"
                   f"</timestamp>\n      <contributor>\n        <username>StandIn</username>\n        <id>1</id>\n"
                   f"      </contributor>\n      <text xml:space=\"preserve\">"
                   f"{escape(chr(10).join(text) + chr(10), {chr(34): '&quot;'})}</text>\n    </revision>\n  </page>\n")
    return "".join(out) + "</mediawiki>\n"


def write_enwik8_zip(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    info = zipfile.ZipInfo("enwik8", date_time=(2006, 3, 3, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(info, enwik8_text().encode())


# ---------------------------------------------------------------------------------------------------------------------
# populate / ensure_built
# ---------------------------------------------------------------------------------------------------------------------


def repo_path(root: Path, repo_id: str, repo_type: str = "model") -> Path:
    """Where olah looks for a repository: ``root/models/<org>/<name>`` (``root/models/<name>`` without an org)."""
    return Path(root) / f"{repo_type}s" / repo_id


def populate(root: Path, manifest: dict) -> Path:
    """Write every repository of ``manifest`` under ``root`` (which must be empty or missing); returns ``root``.

    ``root/manifest.json`` records the manifest with, per repository, its refs and commits, and the enwik8 file's
    size and SHA-256."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    import torch

    torch.set_num_threads(1)
    started = time.time()
    with ThreadPoolExecutor(max_workers=2) as pool:  # git writes run while the next models are built
        jobs = {}
        served_files = {}
        for entry in manifest["models"]:
            built, served_files[entry["repo"]] = _model_repo(entry)
            jobs[("model", entry["repo"])] = pool.submit(built.write, repo_path(root, entry["repo"]))
        for build, ds in ((_wikitext, "Salesforce/wikitext"), (_imagenette, "frgfm/imagenette"),
                          (_librispeech, "openslr/librispeech_asr")):
            jobs[("dataset", ds)] = pool.submit(build().write, repo_path(root, ds, "dataset"))
        refs = {key: job.result() for key, job in jobs.items()}
    enwik8 = root / "files" / ENWIK8_PATH
    write_enwik8_zip(enwik8)
    served = json.loads(json.dumps(manifest))
    for entry in served["models"]:
        entry["refs"] = refs[("model", entry["repo"])]
        entry["served"] = served_files[entry["repo"]]
    for entry in served["datasets"]:
        entry["refs"] = refs[("dataset", entry["repo"])]
    served["files"]["enwik8"].update(size=enwik8.stat().st_size, sha256=_sha256_file(enwik8))
    served["build_seconds"] = round(time.time() - started, 1)
    (root / "manifest.json").write_text(json.dumps(served, indent=1, sort_keys=True))
    return root


def build_key(manifest: dict) -> str:
    """Hash of everything a build depends on: this file, the manifest, the registry and data sources, the packaged
    tokenizers and the versions of the libraries that write the files."""
    import datasets
    import PIL
    import pyarrow
    import soundfile
    import torch
    import transformers

    import anisotropy

    lib = Path(anisotropy.__file__).parent
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(HUB_MANIFEST.read_bytes())  # what the Hub holds: a changed hub_manifest.yml rebuilds
    h.update(json.dumps(manifest, sort_keys=True).encode())
    for f in ("models/registry.py", "models/table.py", "models/models.yml",
              *sorted(p.relative_to(lib).as_posix() for p in (lib / "data").glob("*.py"))):
        h.update((lib / f).read_bytes())
    for p in sorted((lib / "models" / "tokenizers").glob("*.json")):
        h.update(p.name.encode() + p.read_bytes())
    for p in sorted((HERE / "remote").rglob("*.py")):  # the stand-in's remote code
        h.update(p.relative_to(HERE).as_posix().encode() + p.read_bytes())
    h.update(repr([m.__version__ for m in (datasets, PIL, pyarrow, soundfile, torch, transformers)]).encode())
    h.update(subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """``$ANISOTROPY_CACHE/hub-standin`` if set, else ``<checkout>/.cache/hub-standin`` (git-ignored)."""
    base = os.environ.get("ANISOTROPY_CACHE")
    return (Path(base) if base else PROJECT / ".cache") / "hub-standin"


def ensure_built(manifest: dict | None = None, keep: int = 2) -> Path:
    """The populated root for ``manifest`` (default: the paper profile's), built once and cached by ``build_key``.

    Builds into a temporary folder and renames it, so concurrent sessions never see half a build, under a file lock,
    so that the pytest-xdist workers whose modules start the stand-in at the same time (test_hub_standin,
    test_hub_shapes, test_paper_failures, test_paper_profile) build it once: each build is about 60 CPU-s on a slow
    2-core machine (issue 29). Keeps the ``keep`` most recently used builds and removes older ones."""
    try:
        import soundfile  # noqa: F401
    except ImportError:
        raise RuntimeError("the Hub stand-in's builder writes FLAC with soundfile, which this environment lacks: "
                           "rm .venv/.installed-* && make env (the Makefile installs it), or pip install "
                           "soundfile==0.14.0") from None
    from filelock import FileLock

    manifest = manifest or paper_manifest()
    cache = cache_root()
    root = cache / build_key(manifest)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f".{root.name}.lock")):
        return _build_locked(cache, root, manifest, keep)


def _build_locked(cache: Path, root: Path, manifest: dict, keep: int) -> Path:
    if not (root / "manifest.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
        try:
            populate(tmp / "root", manifest)
            try:
                (tmp / "root").rename(root)
            except OSError:  # another session finished the same build first
                if not (root / "manifest.json").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    os.utime(root)
    builds = sorted((p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return root


if __name__ == "__main__":  # python tests/hub_standin/build.py: build (or reuse) and print the root
    t = time.time()
    print(ensure_built(), f"({time.time() - t:.1f} s)", file=sys.stderr)
