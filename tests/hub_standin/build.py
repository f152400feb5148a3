"""Repository builder of the Hub stand-in: the ``paper`` profile's models and data as tiny git repositories.

``paper_manifest()`` derives what to serve from the ``paper`` profile (never by hand); ``populate(root, manifest)``
writes it in olah's mirror layout, ``root/{models|datasets}/{org}/{repo}`` (bare git repositories, files committed
directly, no LFS), plus ``root/files/dc/enwik8.zip`` and ``root/manifest.json`` (what was served, what was not and
why, and the commit of every branch). ``ensure_built()`` keys a cached build by a hash of this file, the manifest and
the library inputs, so test sessions reuse it.

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
# What the real Hub holds where it is not "weights and preprocessor in one repository", recorded from the Hub, not
# from the registry: Bloom's intermediate-checkpoint repositories hold .gitattributes, README.md, config.json and
# pytorch_model.bin on every branch and no tokenizer files (issue 28, read from their file lists on huggingface.co;
# not re-read where this was written, without access to the Hub); the tokenizer is in the final model's repository,
# which is served too (weights and tokenizer).
WEIGHTS_ONLY = {"bigscience/bloom-560m-intermediate": "bigscience/bloom-560m",
                "bigscience/bloom-3b-intermediate": "bigscience/bloom-3b"}
WEIGHTS_ONLY_FILES = ("config.json", "pytorch_model.bin")


def _seed(*parts: str) -> int:
    """A stable seed per model and revision (independent of the profile's order)."""
    return int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:4], "big") % 2**31


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------------------------------
# The manifest: what the paper profile asks for
# ---------------------------------------------------------------------------------------------------------------------


def paper_manifest(profile: str = "paper") -> dict:
    """Every repository the profile's chapters request, as a JSON-able dict (the build's plan).

    Models: every string value of a chapter's parameters (also inside lists and dicts) that is a registry name, plus
    MultiBERTs from a chapter with ``encoder: multiberts`` (``seeds``; ``revisions: []`` = every revision), plus the
    gated Llama-2 ids (served, marked gated, to exercise access errors). A ``<x>_revisions`` list names the revisions
    of the models in ``<x>_models`` that get weights of their own; the other branches share the final weights.
    """
    from anisotropy import profiles, registry

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

    models, not_served = [], []
    for name in sorted(set(wanted) | extra):
        s = registry.spec(name)
        why = sorted(wanted.get(name, ())) or ["gated access checks (no chapter of the profile)"]
        if s.remote_code:
            not_served.append(dict(model=name, repo=s.hub_id, chapters=why,
                                   reason="remote code (trust_remote_code): its modelling code lives only on the "
                                          "Hub, so no local class can produce its weights"))
            continue
        base = dict(model=name, architecture=s.architecture, modality=s.modality, chapters=why,
                    gated=s.access == "gated", local_package=s.local_package)
        if s.revision_in_repo:  # MultiBERTs: one repository per checkpoint; the final model = the last checkpoint
            revs = [r for r in s.revisions if r in multiberts.get(name, ())]
            for r in revs:
                models.append(dict(base, repo=s.hub_location(r)[0], revision=r, seed=_seed(name, r), branches={}))
            final = s.revisions[-1]
            models.append(dict(base, repo=s.hub_id, revision=None, seed=_seed(name, final), branches={},
                               same_weights_as=s.hub_location(final)[0]))
            continue
        final = s.revisions[-1] if s.revisions and s.revisions_exhaustive else None
        branches = {}
        for r in s.revisions:
            distinct = r in explicit.get(name, ()) and r != final
            branches[r] = dict(seed=_seed(name, r) if distinct else _seed(name), distinct=distinct)
        if s.hub_id in WEIGHTS_ONLY:  # as on the Hub: weights only here, the tokenizer in the final model's repo
            models.append(dict(base, repo=s.hub_id, revision=None, seed=_seed(name), branches=branches,
                               final_branch=final, files=list(WEIGHTS_ONLY_FILES)))
            models.append(dict(base, repo=WEIGHTS_ONLY[s.hub_id], revision=None, seed=_seed(name), branches={},
                               role=f"final model, whose tokenizer {s.hub_id} lacks"))
            continue
        models.append(dict(base, repo=s.hub_id, revision=None, seed=_seed(name), branches=branches,
                           final_branch=final))
    return dict(
        format=FORMAT,
        profile=profile,
        models=models,
        not_served=not_served,
        datasets=[
            dict(repo="Salesforce/wikitext", configs=["wikitext-103-raw-v1"], used_by="data.wikitext"),
            dict(repo="frgfm/imagenette", configs=list(IMAGENETTE_SIZES), used_by="data.load('imagenette')",
                 layout="main: loading script + README; refs/convert/parquet: <size>/<split>/0000.parquet"),
            dict(repo="openslr/librispeech_asr", configs=["clean", "other", "all"], used_by="data.librispeech"),
        ],
        files=dict(enwik8=dict(path="/" + ENWIK8_PATH, used_by="data.enwik8 (ANISOTROPY_ENWIK8_URL)")),
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

    def commit(self, ref: str, files: dict[str, bytes], message: str, parent: int | None = None) -> int:
        marks = {path: self._blob(data) for path, data in sorted(files.items())}
        self.mark += 1
        self.tick += 1
        msg = message.encode()
        head = (f"commit {ref}\nmark :{self.mark}\nauthor {AUTHOR} {EPOCH + self.tick} +0000\n"
                f"committer {AUTHOR} {EPOCH + self.tick} +0000\n").encode()
        self.parts += [head, b"data %d\n" % len(msg), msg, b"\n"]
        if parent is not None:
            self.parts.append(b"from :%d\n" % parent)
        self.parts += [f"M 100644 :{marks[p]} {p}\n".encode() for p in marks]
        self.parts.append(b"\n")
        return self.mark

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


def model_files(name: str, seed: int, weights_only: bool = False, safetensors: bool = True) -> dict[str, bytes]:
    """The files ``save_pretrained`` writes for the tiny variant of ``name`` at ``seed``: model (config and
    safetensors, or ``pytorch_model.bin`` when not ``safetensors``) and, unless ``weights_only``, its preprocessor
    (and Whisper's text tokenizer)."""
    from anisotropy import registry

    loaded = registry.load(name, "tiny", seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        loaded.model.save_pretrained(tmp, safe_serialization=safetensors)
        if not weights_only:
            loaded.preprocessor.save_pretrained(tmp)
            if loaded.tokenizer is not None:
                loaded.tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


def _model_repo(entry: dict) -> _Repo:
    repo = _Repo()
    base = _initial(repo, f"---\nlibrary_name: transformers\n---\n# {entry['repo']}\n\nTiny random stand-in of "
                          f"`{entry['model']}` ({entry['architecture']}), seed {entry['seed']}.\n".encode())
    only = entry.get("files")  # the repository's real file list, where it holds weights only (WEIGHTS_ONLY)

    def files(seed: int, weights_only: bool) -> dict[str, bytes]:
        if only is None:
            return model_files(entry["model"], seed, weights_only)
        found = model_files(entry["model"], seed, weights_only=True, safetensors=False)
        return {name: found[name] for name in only}

    main = files(entry["seed"], weights_only=False)
    repo.commit("refs/heads/main", main, "Upload model", parent=base)
    weights = {entry["seed"]: main}
    for rev, b in entry["branches"].items():  # every branch: a commit of its own; shared weights share blobs
        if b["seed"] not in weights:
            weights[b["seed"]] = {**main, **files(b["seed"], weights_only=True)}
        repo.commit(f"refs/heads/{rev}", weights[b["seed"]], f"Checkpoint {rev}", parent=base)
    return repo


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
    from anisotropy.data import prose_paragraphs

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

    from anisotropy.data import synthetic_shapes

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


def librispeech_rows(config: str, split: str, shard: int) -> dict[str, list]:
    """Columns of one LibriSpeech shard: synthetic utterances (FLAC, 16 kHz) with upper-case prose transcripts."""
    import soundfile as sf

    from anisotropy.data import prose_paragraphs, synthetic_speech

    n = LIBRISPEECH_SPLITS[config][split][1]
    seed = _seed("librispeech", config, split, str(shard))
    speaker, chapter = 1000 + seed % 8000, 10000 + seed % 90000
    words = " ".join(prose_paragraphs()[seed % 500: seed % 500 + 3]).upper().split()
    cols = {k: [] for k in ("file", "audio", "text", "speaker_id", "chapter_id", "id")}
    for i, utt in enumerate(synthetic_speech(n, seed=seed, seconds=(1.0, 2.0))):
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

    from anisotropy.data import prose_paragraphs

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
        for entry in manifest["models"]:
            jobs[("model", entry["repo"])] = pool.submit(_model_repo(entry).write, repo_path(root, entry["repo"]))
        for build, ds in ((_wikitext, "Salesforce/wikitext"), (_imagenette, "frgfm/imagenette"),
                          (_librispeech, "openslr/librispeech_asr")):
            jobs[("dataset", ds)] = pool.submit(build().write, repo_path(root, ds, "dataset"))
        refs = {key: job.result() for key, job in jobs.items()}
    enwik8 = root / "files" / ENWIK8_PATH
    write_enwik8_zip(enwik8)
    served = json.loads(json.dumps(manifest))
    for entry in served["models"]:
        entry["refs"] = refs[("model", entry["repo"])]
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
    h.update(json.dumps(manifest, sort_keys=True).encode())
    for f in ("registry.py", "data.py"):
        h.update((lib / f).read_bytes())
    for p in sorted((lib / "tokenizers").glob("*.json")):
        h.update(p.name.encode() + p.read_bytes())
    h.update(repr([m.__version__ for m in (datasets, PIL, pyarrow, soundfile, torch, transformers)]).encode())
    h.update(subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """``$ANISOTROPY_CACHE/hub-standin`` if set, else ``<checkout>/.cache/hub-standin`` (git-ignored)."""
    base = os.environ.get("ANISOTROPY_CACHE")
    return (Path(base) if base else PROJECT / ".cache") / "hub-standin"


def ensure_built(manifest: dict | None = None, keep: int = 2) -> Path:
    """The populated root for ``manifest`` (default: the paper profile's), built once and cached by ``build_key``.

    Builds into a temporary folder and renames it, so concurrent sessions never see half a build; keeps the ``keep``
    most recently used builds and removes older ones."""
    try:
        import soundfile  # noqa: F401
    except ImportError:
        raise RuntimeError("the Hub stand-in's builder writes FLAC with soundfile, which this environment lacks: "
                           "rm .venv/.installed-* && make env (the Makefile installs it), or pip install "
                           "soundfile==0.14.0") from None
    manifest = manifest or paper_manifest()
    cache = cache_root()
    root = cache / build_key(manifest)
    if not (root / "manifest.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
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
