"""Corpora and their offline defaults, with deterministic sampling; Hub datasets come through ``hub.dataset``.

``load(source, n, seed)`` is the one entry point; ``SOURCES`` lists what it knows:

- text: ``"prose"`` (offline default: the English prose of Python's own language reference, ``pydoc_data.topics``,
  ~465k characters present on every Python install, split into paragraphs with code blocks and grammar rules
  removed), ``"docstrings"`` (offline: the prose paragraphs of the docstrings of the installed packages, several MB,
  deduplicated and split into train and validation documents, keyed by a content hash; the self-trained language
  models learn from its train split, ``load`` draws from its validation split; see ``docstring_corpus``), ``"wikitext-103"`` (WikiText-103 raw validation, paper profile), ``"enwik8"`` (the Hutter Prize
  file, downloaded once with its checksum verified, its articles cleaned as the second paper does; see ``enwik8``);
- speech: ``"espeak-speech"`` (offline default: sentences of the prose spoken by eSpeak NG's English voices, 16 kHz,
  with their transcripts), ``"synthetic-speech"`` (offline: vowel-like utterances from a source-filter model, 16 kHz;
  used to train nothing now, kept as the untrained models' simplest input),
  ``"librispeech"`` (LibriSpeech clean validation, paper profile; Paper 1's Common Voice 11 is no longer on the Hub);
- images: ``"photos"`` (offline default: crops of the photographs bundled with scikit-image and matplotlib),
  ``"synthetic-shapes"`` (offline: procedurally generated shapes, labelled by shape, so that a small vision
  model can be trained on them), ``"imagenette"`` (ungated ImageNet subset, paper profile), ``"imagenet"`` (gated).

Hub sources fail at once, in one line, when the Hub is unreachable and the data is not cached.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import hub

PROSE_SOURCE = "Python language reference prose (pydoc_data.topics)"


@lru_cache(maxsize=1)
def prose_paragraphs(min_chars: int = 80) -> tuple[str, ...]:
    """Paragraphs of English prose from ``pydoc_data.topics``, in a fixed order, whitespace normalised.

    Indented blocks (code, grammar productions) and underline rules are dropped: what is left is running text.
    """
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = block.split("\n")
            if any(line.startswith((" ", "\t")) for line in lines):
                continue  # code sample, grammar rule or indented note
            if re.fullmatch(r"[*=\-~^]+", lines[-1].strip() or "x"):
                continue  # section heading with its underline
            text = " ".join(line.strip() for line in lines).strip()
            if len(text) >= min_chars:
                paragraphs.append(text)
    return tuple(paragraphs)


def prose_corpus() -> str:
    """All offline prose paragraphs joined by blank lines (for tokenizer and language-model training)."""
    return "\n\n".join(prose_paragraphs())


def text_samples(n: int, seed: int = 0) -> list[str]:
    """``n`` prose paragraphs drawn without replacement (with replacement only if ``n`` exceeds the corpus)."""
    paragraphs = prose_paragraphs()
    if n <= 0:
        raise ValueError(f"text_samples needs n >= 1 samples, got n={n}")
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(paragraphs), size=n, replace=n > len(paragraphs))
    return [paragraphs[i] for i in idx]


# ---- the docstring corpus: English prose from the installed packages' documentation ---------------------------------

# The packages whose docstrings make the corpus: the book's dependencies and theirs, all installed by `make book`.
# A package that is missing here is left out, and the corpus's content hash says so (it is a different corpus).
DOCSTRING_PACKAGES = ("IPython", "PIL", "dask", "datasets", "distributed", "docutils", "fsspec", "huggingface_hub",
                      "jedi", "jinja2", "matplotlib", "mpmath", "networkx", "numpy", "pandas", "pyarrow", "pygments",
                      "scipy", "seaborn", "skimage", "sklearn", "sphinx", "sympy", "tornado", "torch", "traitlets",
                      "transformers")
DOCSTRING_SOURCE = ("English prose paragraphs of the docstrings of the Python packages the book installs (torch, "
                    "transformers, scipy, sympy, ...): technical English, not Wikipedia")
DOCSTRING_VALIDATION_PERCENT = 4  # of the source files (documents), chosen by a hash of their package and path
_SKIPPED_FOLDERS = frozenset({"tests", "test", "testing", "_vendor", "vendor", "vendored", "externals", "_external"})
_SECTION = re.compile(r"(args|arguments|parameters|params|returns?|yields?|raises?|examples?|notes?|attributes|"
                      r"see also|references|warnings?|todo|inputs?|outputs?|shape|keyword arguments|kwargs|methods|"
                      r"properties|usage|example usage)\s*:?", re.I)
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)*:`~?([^`<]*?)(?:\s*<[^>]*>)?`")  # :class:`~torch.Tensor` -> Tensor
_LINK = re.compile(r"\[`~?([^`\]]+)`\]")  # transformers' [`~PreTrainedModel.save_pretrained`] -> save_pretrained
_TICKS = re.compile(r"``([^`]+)``|`([^`]+)`")
_PROSE_WORD = re.compile(r"[A-Za-z][a-z]*(?:'[a-z]+)?|[A-Z]+")
_CODE = re.compile(r"[{}\\]|https?:|::|->|==|\b\w+\s*=\s*\S")
_MARKUP_START = (">>>", "...", "..", "#", "|", "=", "```", "$", "- ", "* ", "+ ", "-", "*")


def _unmarkup(text: str) -> str:
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = _LINK.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text)
    text = _TICKS.sub(lambda m: m.group(1) or m.group(2), text)
    return re.sub(r"\s+", " ", text).strip()


def docstring_paragraph(block: str, min_chars: int = 40, min_words: int = 7) -> str | None:
    """The prose of one blank-line-separated block of a cleaned docstring, or None.

    Kept: the block's leading unindented lines, up to an indented line (a code sample, a parameter's description) or a
    section header (``Args:``, ``Returns``, ``Examples``, ...), if they form running text: no doctest (``>>>``), no
    directive, list item, table or heading underline, no code (``x = 1``, ``->``, braces, URLs), at least
    ``min_words`` words of which 80% are plain words, starting with a capital and ending with a full stop, question
    or exclamation mark. Inline markup (reST roles, Markdown code links, backquotes) is reduced to its text."""
    lines = block.split("\n")
    kept = []
    for line in lines:
        if line.startswith((" ", "\t")) or _SECTION.fullmatch(line.strip()):
            break
        kept.append(line.strip())
    if kept and len(kept) < len(lines) and kept[-1].endswith(":"):
        kept.pop()  # "... as follows:" introduces what was cut
    if not kept or any(line.startswith(_MARKUP_START) or re.match(r"\d+[.)] ", line) for line in kept):
        return None
    if len(kept) > 1 and re.fullmatch(r"[*=\-~^`#]{3,}", kept[1]):
        return None  # a heading with its underline
    text = _unmarkup(" ".join(kept))
    if len(text) < min_chars or not text[0].isupper() or text[-1] not in ".!?" or _CODE.search(text):
        return None
    words = text.split()
    plain = sum(1 for w in words if _PROSE_WORD.fullmatch(w.strip(".,;:!?()\"'")))
    return text if len(words) >= min_words and plain >= 0.8 * len(words) else None


def _template_key(text: str) -> str:
    """What remains of a paragraph when capitalised words and numbers are blanked: transformers copies a docstring
    from model to model with only the model's name changed ("The bare Bert Model ...", "The bare Roberta Model ..."),
    and those copies must count once."""
    return re.sub(r"\b[A-Z]\w*|\d+", "X", text).lower()


def _definitions(tree):
    """The nodes of ``tree`` in ``ast.walk``'s order (breadth first), skipping expressions: a docstring belongs to a
    module, class or function, and those sit only among statements (and except/case clauses), so the expressions
    (most of a tree's nodes, and most of the time of a full walk) are never visited. Same order, same corpus."""
    import ast
    from collections import deque

    containers = (ast.stmt, ast.excepthandler, ast.match_case)
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, containers))
        yield node


def _package_documents(package: str):
    """(document, paragraphs) for every source file of an installed package, in path order: document =
    "<package>/<path inside it>", paragraphs = the prose of every module, class and function docstring
    (``docstring_paragraph``). Files are parsed with ``ast``, never imported; test and vendored folders are skipped."""
    import ast
    import importlib.util

    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        return
    root = Path(list(found.submodule_search_locations)[0])
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for file in sorted(root.rglob("*.py")):
        rel = file.relative_to(root)
        if _SKIPPED_FOLDERS.intersection(rel.parts[:-1]):
            continue
        try:
            tree = ast.parse(file.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
        paragraphs = []
        for node in _definitions(tree):
            if isinstance(node, kinds) and (doc := ast.get_docstring(node, clean=True)):
                paragraphs += [p for b in re.split(r"\n\s*\n", doc) if (p := docstring_paragraph(b.strip("\n")))]
        if paragraphs:
            yield f"{package}/{rel.as_posix()}", paragraphs


@dataclass(frozen=True)
class DocstringCorpus:
    """The docstring corpus: ``train`` and ``validation`` paragraphs (deduplicated, in package and path order), the
    ``packages`` read (name -> version), the number of ``documents`` (source files) on each side and ``content_hash``
    (SHA-256 of the paragraphs of both splits, 16 hex digits): the corpus's identity in every training key."""

    train: tuple[str, ...]
    validation: tuple[str, ...]
    packages: dict
    documents: dict
    content_hash: str

    @property
    def chars(self) -> dict:
        return {"train": sum(map(len, self.train)), "validation": sum(map(len, self.validation))}


def _installed_versions(packages) -> dict[str, str]:
    """{package: version of its distribution} for the importable packages among ``packages``."""
    import importlib.metadata
    import importlib.util

    dists = importlib.metadata.packages_distributions()
    return {p: importlib.metadata.version(dists.get(p, [p])[0]) for p in sorted(packages)
            if importlib.util.find_spec(p) is not None}


def _is_validation_document(document: str) -> bool:
    import hashlib

    return int(hashlib.sha256(document.encode()).hexdigest()[:8], 16) % 100 < DOCSTRING_VALIDATION_PERCENT


def build_docstring_corpus(packages=None) -> DocstringCorpus:
    """Extract the corpus from the installed ``packages`` (default ``DOCSTRING_PACKAGES``; about half a minute for
    them all): every prose paragraph of their
    docstrings, deduplicated (exact copies and transformers' per-model copies, ``_template_key``; the first in package
    and path order is kept), split by document: the files whose hash falls in ``DOCSTRING_VALIDATION_PERCENT`` percent
    are held out whole, so no validation paragraph has a sibling from its own file in training."""
    import hashlib

    seen, split = set(), {"train": [], "validation": []}
    versions = _installed_versions(DOCSTRING_PACKAGES if packages is None else packages)
    documents = {"train": 0, "validation": 0}
    for package in sorted(versions):
        for document, paragraphs in _package_documents(package):
            side = "validation" if _is_validation_document(document) else "train"
            fresh = []
            for p in paragraphs:
                key = _template_key(p)
                if key not in seen:
                    seen.add(key)
                    fresh.append(p)
            if fresh:
                split[side] += fresh
                documents[side] += 1
    h = hashlib.sha256()
    for side in ("train", "validation"):
        h.update(side.encode() + b"\0" + "\n\n".join(split[side]).encode() + b"\0")
    return DocstringCorpus(tuple(split["train"]), tuple(split["validation"]), versions, documents, h.hexdigest()[:16])


def read_docstring_corpus(file: str | os.PathLike) -> DocstringCorpus:
    """A corpus stored by ``docstring_corpus`` (``docstrings-<key>.json.gz``): e.g. to train on another machine on
    exactly the corpus of this one (``benchmarks/bench_recipes.py --corpus``)."""
    import gzip
    import json

    stored = json.loads(gzip.decompress(Path(file).read_bytes()))
    return DocstringCorpus(tuple(stored["train"]), tuple(stored["validation"]), stored["packages"],
                           stored["documents"], stored["content_hash"])


@lru_cache(maxsize=1)
def docstring_corpus() -> DocstringCorpus:
    """The docstring corpus of this installation, extracted once and cached under ``cache_dir()/corpora`` by the
    package versions and the extracting code (this module's source): a changed package version is a new file and,
    if its prose changed, a new ``content_hash``."""
    import gzip
    import hashlib
    import json
    import sys

    from .paths import cache_dir

    installed = _installed_versions(DOCSTRING_PACKAGES)
    key = hashlib.sha256(json.dumps({"packages": installed, "python": sys.version_info[:2],
                                     "code": Path(__file__).read_text()}, sort_keys=True).encode()).hexdigest()[:16]
    file = cache_dir() / "corpora" / f"docstrings-{key}.json.gz"
    if file.is_file():
        return read_docstring_corpus(file)
    corpus = build_docstring_corpus()
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
    tmp.write_bytes(gzip.compress(json.dumps({"train": corpus.train, "validation": corpus.validation,
                                              "packages": corpus.packages, "documents": corpus.documents,
                                              "content_hash": corpus.content_hash}).encode(), mtime=0))
    os.replace(tmp, file)
    return corpus


def docstrings(n: int, seed: int = 0, split: str = "validation") -> list[str]:
    """``n`` paragraphs of the docstring corpus, drawn without replacement from its held-out ``split`` (default: the
    validation documents, which no self-trained model has seen)."""
    corpus = docstring_corpus()
    pool = {"train": corpus.train, "validation": corpus.validation}[split]
    return [pool[i] for i in _sample(len(pool), n, seed, f"the docstring corpus ({split})")]


SHAPES = ("disc", "square", "triangle", "ring", "cross", "stripes")


def synthetic_shapes(n: int, size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` RGB images (uint8, shape (n, size, size, 3)) of one coloured shape on a noisy background, and labels.

    Label ``k`` is the index of the shape in ``SHAPES``; position, scale, colours and noise are random, so the task
    needs shape recognition rather than colour statistics.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = rng.integers(0, len(SHAPES), size=n)
    for i, label in enumerate(labels):
        cx, cy = rng.uniform(0.3, 0.7, size=2)
        r = rng.uniform(0.15, 0.28)
        dx, dy = xx - cx, yy - cy
        shape = SHAPES[label]
        if shape == "disc":
            mask = dx**2 + dy**2 < r**2
        elif shape == "square":
            mask = (np.abs(dx) < r * 0.85) & (np.abs(dy) < r * 0.85)
        elif shape == "triangle":
            mask = (dy < r * 0.8) & (dy > -r) & (np.abs(dx) < (dy + r) * 0.6)
        elif shape == "ring":
            d2 = dx**2 + dy**2
            mask = (d2 < r**2) & (d2 > (0.55 * r) ** 2)
        elif shape == "cross":
            mask = ((np.abs(dx) < r * 0.3) & (np.abs(dy) < r)) | ((np.abs(dy) < r * 0.3) & (np.abs(dx) < r))
        else:  # stripes inside a square window
            mask = (np.abs(dx) < r) & (np.abs(dy) < r) & (np.sin(dx * 40 / (r * 8)) > 0)
        background = rng.uniform(0, 255, size=3)
        foreground = rng.uniform(0, 255, size=3)
        img = np.where(mask[..., None], foreground, background) + rng.normal(0, 12, size=(size, size, 3))
        images[i] = np.clip(img, 0, 255).astype(np.uint8)
    return images, labels


# ---------------------------------------------------------------------------------------------------------------------
# Synthetic speech (offline default for speech models)
# ---------------------------------------------------------------------------------------------------------------------

SAMPLING_RATE = 16_000
# Formant frequencies F1-F3 (Hz) of adult vowels (Peterson & Barney 1952, rounded): the spectral envelope that makes a
# vowel recognisable. Bandwidths grow with frequency.
VOWELS = {"a": (730, 1090, 2440), "i": (270, 2290, 3010), "u": (300, 870, 2240), "e": (530, 1840, 2480),
          "o": (570, 840, 2410), "ae": (660, 1720, 2410)}
_BANDWIDTHS = (80.0, 100.0, 140.0)


def _resonator(signal: np.ndarray, freq: float, bandwidth: float, rate: int) -> np.ndarray:
    """Two-pole resonance at ``freq`` Hz (bandwidth in Hz) with unit gain at DC:
    y[t] = g x[t] + 2 r cos(w) y[t-1] - r^2 y[t-2], r = exp(-pi bandwidth / rate), w = 2 pi freq / rate."""
    from scipy.signal import lfilter

    r = np.exp(-np.pi * bandwidth / rate)
    w = 2 * np.pi * freq / rate
    a = [1.0, -2 * r * np.cos(w), r * r]
    return lfilter([sum(a)], a, signal)


def _ramp(n: int, rate: int, ms: float = 15.0) -> np.ndarray:
    """Raised-cosine attack and release of ``ms`` milliseconds over ``n`` samples."""
    k = min(n // 2, int(rate * ms / 1000))
    env = np.ones(n)
    if k > 0:
        rise = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, k))
        env[:k], env[n - k:] = rise, rise[::-1]
    return env


def synthetic_utterance(rng: np.random.Generator, seconds: float, rate: int = SAMPLING_RATE) -> tuple[np.ndarray, str]:
    """One vowel-like utterance (source-filter model) and the sequence of its vowels.

    A glottal source (sawtooth pulses at a pitch f0 that starts at 90-220 Hz, declines by up to 25 % over the utterance
    with a slow intonation wave and 1 % jitter) is shaped by three formant resonators per vowel, scaled by a speaker's
    vocal-tract factor (0.85-1.15). Syllables of 120-320 ms, some preceded by a fricative (high-passed noise), are
    grouped into words separated by 80-300 ms pauses; a faint noise floor runs under everything.
    """
    from scipy.signal import butter, sosfilt, sawtooth

    total = int(seconds * rate)
    t = np.arange(total) / rate
    f0 = rng.uniform(90, 220) * (1 - rng.uniform(0.0, 0.25) * t / max(seconds, 1e-9))
    f0 = f0 * (1 + 0.06 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t + rng.uniform(0, 2 * np.pi)))
    f0 = f0 * (1 + 0.01 * rng.standard_normal(total))
    source = sawtooth(2 * np.pi * np.cumsum(f0) / rate)
    tract = rng.uniform(0.85, 1.15)
    hiss = butter(4, rng.uniform(2500, 5000), btype="highpass", fs=rate, output="sos")
    out = np.zeros(total)
    vowels, pos, left_in_word = [], 0, rng.integers(1, 5)
    while pos < total:
        if rng.random() < 0.3:  # fricative onset
            n = min(int(rng.uniform(0.05, 0.12) * rate), total - pos)
            out[pos:pos + n] += 0.3 * sosfilt(hiss, rng.standard_normal(n)) * _ramp(n, rate, 10)
            pos += n
        n = min(int(rng.uniform(0.12, 0.32) * rate), total - pos)
        if n <= 0:
            break
        name = list(VOWELS)[rng.integers(len(VOWELS))]
        seg = source[pos:pos + n]
        for f, bw in zip(VOWELS[name], _BANDWIDTHS):
            seg = _resonator(seg, f * tract, bw, rate)
        out[pos:pos + n] += seg / (np.abs(seg).max() + 1e-9) * rng.uniform(0.5, 1.0) * _ramp(n, rate)
        vowels.append(name)
        pos += n
        left_in_word -= 1
        if left_in_word == 0:  # pause between words
            pos += int(rng.uniform(0.08, 0.3) * rate)
            left_in_word = rng.integers(1, 5)
    out += 0.003 * rng.standard_normal(total)
    out *= rng.uniform(0.3, 0.8) / (np.abs(out).max() + 1e-9)
    return out.astype(np.float32), " ".join(vowels)


def synthetic_speech(n: int, seed: int = 0, seconds: tuple[float, float] = (1.0, 4.0),
                     transcripts: bool = False) -> list[dict]:
    """``n`` synthetic utterances at 16 kHz of ``seconds`` (uniform range) each, as
    ``{"array", "sampling_rate", "text", "vowels"}`` dicts. ``text`` is None unless ``transcripts=True``, which puts
    the vowel sequence there (a label of the synthesis, not words: Whisper's decoder is then fed it)."""
    if n <= 0:
        raise ValueError(f"synthetic_speech needs n >= 1 samples, got n={n}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        array, vowels = synthetic_utterance(rng, float(rng.uniform(*seconds)))
        out.append({"array": array, "sampling_rate": SAMPLING_RATE, "text": vowels if transcripts else None,
                    "vowels": vowels})
    return out


# ---------------------------------------------------------------------------------------------------------------------
# Hub and file sources (paper profile)
# ---------------------------------------------------------------------------------------------------------------------


class DataUnavailableError(hub.Unavailable):
    """A data source that cannot be read here for a reason of its own (a file missing or damaged); the Hub's reasons
    are ``hub.Unavailable``."""


@dataclass(frozen=True)
class Source:
    """A data source of ``load``: its modality, what it is, and whether it works without network."""

    name: str
    modality: str
    description: str
    offline: bool
    download_mb: float = 0.0  # what a first use downloads (approximate, for the Colab budget)
    train_mb: float = 0.0  # what training on the corpus downloads (its train split)


SOURCES = {s.name: s for s in (
    Source("prose", "text", PROSE_SOURCE, True),
    Source("docstrings", "text", DOCSTRING_SOURCE + "; its held-out validation documents", True),
    # The validation split's Parquet file (about 1.2 MB of text); training on the corpus reads train too (~300 MB).
    Source("wikitext-103", "text", "WikiText-103 raw, validation split (Salesforce/wikitext, wikitext-103-raw-v1)",
           False, 1.3, 300.0),
    Source("enwik8", "text", "enwik8: the first 10^8 bytes of an English Wikipedia XML dump, articles cleaned of "
                             "markup, code and media", False, 34.8),
    Source("reaction-smiles", "text", "36 textbook organic reactions written as reaction SMILES (reactants and "
                                      "reagents >> products), the input rxnmapper's ALBERT was trained on", True),
    Source("synthetic-speech", "speech", "synthetic vowel-like utterances (source-filter model, 16 kHz)", True),
    Source("espeak-speech", "speech", "sentences of the offline prose spoken by eSpeak NG's English voices (formant "
                                      "synthesis, from the PyPI package espeakng-loader), resampled to 16 kHz, with "
                                      "their transcripts", True),
    # dev-clean is 337 MB as FLAC archives (openslr.org/12); its Parquet shards hold the same FLAC bytes.
    Source("librispeech", "speech", "LibriSpeech ASR, clean validation split (openslr/librispeech_asr)", False, 337.0),
    Source("synthetic-shapes", "vision", "procedurally generated coloured shapes on noisy backgrounds", True),
    Source("photos", "vision", "random square crops of the 15 photographs bundled with scikit-image and matplotlib "
                               "(astronaut, coffee, cat, rocket, motorcycle, Hubble deep field, retina, ...), resized "
                               "to the model's input size", True),
    # 3,925 validation JPEGs of the 320-pixel version (the 13,394-image archive is 325 MB).
    Source("imagenette", "vision", "Imagenette (10 easy ImageNet classes), 320px validation split "
                                   "(frgfm/imagenette)", False, 95.0),
    Source("imagenet", "vision", "ImageNet-1k validation split (ILSVRC/imagenet-1k, gated)", False, 6400.0),
)}


def _sample(pool_size: int, n: int, seed: int, what: str) -> np.ndarray:
    if pool_size == 0:
        raise ValueError(f"{what} is empty: nothing to sample")
    if n <= 0:
        raise ValueError(f"{what}: n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    return rng.choice(pool_size, size=n, replace=n > pool_size)


# The split's own Parquet files, at their paths in the Hub repository: naming the config (wikitext-103-raw-v1) makes
# datasets download and prepare every split, the two train shards (~300 MB) too, for a 1.3 MB validation split.
WIKITEXT_FILES = "wikitext-103-raw-v1/{split}-*.parquet"


def wikitext_lines(split: str = "validation", min_chars: int = 80) -> list[str]:
    """The lines of a WikiText-103 raw split with at least ``min_chars`` characters, headings dropped, in order; only
    that split's files are downloaded."""
    ds = hub.dataset("Salesforce/wikitext", "WikiText-103", data_files={split: WIKITEXT_FILES.format(split=split)},
                     split=split)
    lines = [t.strip() for t in ds["text"]]
    return [t for t in lines if len(t) >= min_chars and not t.startswith("=")]


def wikitext(n: int, seed: int = 0, min_chars: int = 80) -> list[str]:
    """``n`` lines of WikiText-103 raw validation (``wikitext_lines``), drawn without replacement."""
    lines = wikitext_lines("validation", min_chars)
    return [lines[i] for i in _sample(len(lines), n, seed, "WikiText-103 (after filtering)")]


# ---- enwik8 ---------------------------------------------------------------------------------------------------------

# The Hutter Prize file: 36,445,475 bytes zipped, 10^8 bytes unzipped. A mirror is given as ANISOTROPY_ENWIK8_URL with
# its own checksum in the URL's fragment (pip's convention), e.g. "http://host/enwik8.zip#sha256=<hex>".
ENWIK8_URL = "http://mattmahoney.net/dc/enwik8.zip#sha256=547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"


def enwik8_url() -> tuple[str, str]:
    """(download URL, expected SHA-256) of enwik8.zip: ``ANISOTROPY_ENWIK8_URL`` or the Hutter Prize page."""
    url = os.environ.get("ANISOTROPY_ENWIK8_URL") or ENWIK8_URL
    address, _, fragment = url.partition("#sha256=")
    if not re.fullmatch(r"[0-9a-f]{64}", fragment):
        raise DataUnavailableError(f"ANISOTROPY_ENWIK8_URL must end with #sha256=<64 hex digits> (the checksum of "
                                   f"the file it names), got {url!r}")
    return address, fragment


def download_enwik8(folder: str | os.PathLike | None = None) -> Path:
    """Download enwik8.zip once into ``folder`` (default the cache), verify its SHA-256, and return its path.
    A partial or corrupted download never takes the final name."""
    import hashlib
    import urllib.request

    from .paths import cache_dir

    address, expected = enwik8_url()
    target = Path(folder or cache_dir()) / "enwik8.zip"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(".enwik8.zip.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(address, timeout=60) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as err:
        partial.unlink(missing_ok=True)
        raise DataUnavailableError(f"enwik8 could not be downloaded from {address} ({err}): connect to the network, "
                                   f"or put enwik8.zip into {target.parent} yourself") from None
    if digest.hexdigest() != expected:
        partial.unlink(missing_ok=True)
        raise DataUnavailableError(f"enwik8 from {address} has SHA-256 {digest.hexdigest()}, not {expected}: the "
                                   f"download is damaged or not enwik8; nothing was kept")
    os.replace(partial, target)
    return target


def enwik8_path(path: str | os.PathLike | None = None, download: bool = True) -> Path:
    """Where enwik8 is read from: ``path``, else ``$ANISOTROPY_ENWIK8``, else ``cache_dir()/enwik8`` (or
    ``enwik8.zip``), else (``download``) a fresh verified download into the cache (``download_enwik8``)."""
    from .paths import cache_dir

    candidates = [Path(path)] if path else []
    if os.environ.get("ANISOTROPY_ENWIK8"):
        candidates.append(Path(os.environ["ANISOTROPY_ENWIK8"]))
    candidates += [cache_dir() / "enwik8", cache_dir() / "enwik8.zip"]
    for c in candidates:
        if c.is_file():
            return c
    if download and not path:
        return download_enwik8()
    raise DataUnavailableError(
        f"enwik8 not found (looked at {', '.join(str(c) for c in candidates)}): download "
        f"{enwik8_url()[0]} into {cache_dir()} or set ANISOTROPY_ENWIK8")


def _read_enwik8(file: Path) -> bytes:
    if file.suffix == ".zip":
        import zipfile

        with zipfile.ZipFile(file) as z:
            return z.read("enwik8")
    return file.read_bytes()


def _drop_nested(text: str, opening: str, closing: str) -> str:
    """``text`` without every (possibly nested) span from ``opening`` to its matching ``closing``."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith(opening, i):
            depth, i = depth + 1, i + len(opening)
        elif depth and text.startswith(closing, i):
            depth, i = depth - 1, i + len(closing)
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


_MEDIA = re.compile(r"\[\[(?:image|file|media|category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
                    flags=re.I)


def clean_wikitext(markup: str) -> str:
    """Plain English prose from one article's MediaWiki markup, as the second paper prepares enwik8: markup, code and
    media removed. Dropped: templates ``{{...}}``, tables ``{|...|}``, references, comments, ``<math>``/``<pre>``/
    ``<code>``/``<source>`` blocks and every other tag, image/file/media/category and interlanguage links, bold and
    italic quotes, list and indentation markers; kept: the text of internal links (``[[target|text]]`` -> text),
    external links' labels, headings' words."""
    import html as html_lib

    text = html_lib.unescape(markup)  # the dump escapes the article's markup (&lt;ref&gt;...)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"<(math|pre|code|source|syntaxhighlight|timeline|gallery)\b.*?</\1\s*>", " ", text,
                  flags=re.S | re.I)
    text = re.sub(r"<ref\b[^>]*/>", " ", text, flags=re.I)
    text = re.sub(r"<ref\b.*?</ref\s*>", " ", text, flags=re.S | re.I)
    text = re.sub(r"<[^>]+>", " ", text)
    text = _drop_nested(_drop_nested(text, "{{", "}}"), "{|", "|}")
    text = _MEDIA.sub(" ", text)
    text = re.sub(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]", r"\1", text)
    text = re.sub(r"\[(?:https?|ftp)://\S+\s*([^\]]*)\]", r"\1", text)
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"^=+\s*(.*?)\s*=+\s*$", r"\1", text, flags=re.M)
    text = re.sub(r"^[*#:;]+\s*", "", text, flags=re.M)
    text = re.sub(r"__[A-Z]+__", " ", text)
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", re.sub(r"[ \t]+", " ", text))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def enwik8_text(path: str | os.PathLike | None = None) -> str:
    """The articles of enwik8 as plain prose (``clean_wikitext`` of every non-redirect page's text), joined by blank
    lines; cached in the cache folder under the SHA-256 of the file's content (cleaning 10^8 bytes takes a while)."""
    import hashlib

    from .paths import cache_dir

    file = enwik8_path(path)
    data = _read_enwik8(file)
    cached = cache_dir() / f"enwik8-{hashlib.sha256(data).hexdigest()[:16]}.clean.txt"
    if cached.is_file():
        return cached.read_text(encoding="utf-8")
    raw = data.decode("utf-8", errors="ignore")
    articles = []
    for body in re.findall(r"<text[^>]*>(.*?)</text>", raw, flags=re.S):
        if body.lstrip().upper().startswith("#REDIRECT"):
            continue
        cleaned = clean_wikitext(body)
        if cleaned:
            articles.append(cleaned)
    text = "\n\n".join(articles)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name("." + cached.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, cached)
    return text


# Distinct characters left in enwik8 once code, media and HTML tags are removed, as the second paper reports (its
# Section 2.1; it does not list them).
ENWIK8_PAPER_ALPHABET = 205


def enwik8_alphabet(path: str | os.PathLike | None = None) -> str:
    """The distinct characters of enwik8's cleaned articles (``enwik8_text``), in code-point order."""
    return "".join(sorted(set(enwik8_text(path))))


def compare_alphabet(alphabet: str) -> str:
    """The cleaned text's alphabet size against the second paper's 205, in words (with how many of the characters
    lie outside ASCII, the part of the alphabet a cleaning keeps or drops most easily)."""
    n, paper = len(alphabet), ENWIK8_PAPER_ALPHABET
    outside = sum(ord(c) > 127 for c in alphabet)
    against = "as many as" if n == paper else f"{abs(n - paper)} {'more' if n > paper else 'fewer'} than"
    return f"{n} distinct characters ({outside} of them outside ASCII), {against} the {paper} the second paper reports"


def enwik8(n: int, seed: int = 0, chars: int = 512, path: str | os.PathLike | None = None,
           clean: bool = True) -> list[str]:
    """``n`` windows of ``chars`` characters at seeded uniform offsets of enwik8: of its articles cleaned as the second
    paper does (``clean=True``, see ``clean_wikitext``), or of the raw XML dump decoded as UTF-8 (``clean=False``,
    partial characters at the window edges dropped)."""
    file = enwik8_path(path)
    if clean:
        text = enwik8_text(file)
        if len(text) <= chars:
            raise ValueError(f"enwik8 at {file} holds {len(text)} characters of prose, fewer than one window of "
                             f"{chars}")
        offsets = _sample(len(text) - chars, n, seed, f"enwik8 at {file}")
        return [text[o:o + chars] for o in offsets]
    raw = _read_enwik8(file)
    if len(raw) <= chars:
        raise ValueError(f"enwik8 at {file} holds {len(raw)} bytes, fewer than one window of {chars}")
    offsets = _sample(len(raw) - chars, n, seed, f"enwik8 at {file}")
    return [raw[o:o + chars].decode("utf-8", errors="ignore") for o in offsets]


# ---- LibriSpeech and images -----------------------------------------------------------------------------------------

# Only the validation shards of the "clean" config: naming the config would download and prepare every split of it
# (train.100 and train.360 too, about 30 GB) for a few hundred validation utterances.
LIBRISPEECH_FILES = {"validation": "clean/validation/*.parquet"}


# Imagenette's 320-pixel validation images in the Hub's Parquet conversion (data_dir="320px" would fetch train too).
IMAGENETTE_FILES = {"validation": "320px/validation/*.parquet"}


def librispeech(n: int, seed: int = 0) -> list[dict]:
    """``n`` utterances of LibriSpeech clean validation as ``{"array", "sampling_rate", "text"}`` (16 kHz).

    Paper 1 used Common Voice 11, which is no longer on the Hugging Face Hub; LibriSpeech (read English audiobooks)
    is the paper profile's replacement. Only the validation files are downloaded; the FLAC audio is decoded with
    ``soundfile`` (``datasets`` would need ``torchcodec`` and FFmpeg).
    """
    import io

    try:
        import soundfile
    except ImportError:
        raise DataUnavailableError("LibriSpeech's FLAC audio needs the soundfile package: pip install "
                                   "'anisotropy[colab]' (or pip install soundfile)") from None
    import datasets

    ds = hub.dataset("openslr/librispeech_asr", "LibriSpeech", data_files=LIBRISPEECH_FILES, split="validation")
    ds = ds.cast_column("audio", datasets.Audio(decode=False))
    idx = _sample(len(ds), n, seed, "LibriSpeech validation")
    out = []
    for i in idx:
        row = ds[int(i)]
        array, rate = soundfile.read(io.BytesIO(row["audio"]["bytes"]), dtype="float32")
        out.append({"array": array, "sampling_rate": int(rate), "text": row["text"]})
    return out


def _hub_images(repo: str, what: str, n: int, seed: int, **kwargs) -> list[np.ndarray]:
    ds = hub.dataset(repo, what, split="validation", **kwargs)
    idx = _sample(len(ds), n, seed, f"{what} validation")
    key = "image" if "image" in ds.column_names else ds.column_names[0]
    return [np.asarray(ds[int(i)][key].convert("RGB")) for i in idx]


def images(n: int, seed: int = 0, size: int = 128) -> list[np.ndarray]:
    """``n`` synthetic shape images of ``size`` pixels as a list of (size, size, 3) uint8 arrays."""
    if n <= 0:
        raise ValueError(f"synthetic shapes need n >= 1 samples, got n={n}")
    return list(synthetic_shapes(n, size=size, seed=seed)[0])


def load(source: str, n: int, seed: int = 0, **options) -> list:
    """``n`` raw examples of ``source`` (see ``SOURCES``), deterministic given ``seed``.

    Text sources give strings; speech sources ``{"array", "sampling_rate", "text"}`` dicts at 16 kHz; vision sources
    (H, W, 3) uint8 arrays. ``options`` go to the source's function (``min_chars``, ``chars``/``path`` for enwik8,
    ``seconds``/``transcripts`` for synthetic speech, ``voices``/``sentences`` for eSpeak speech, ``size`` for
    synthetic shapes and photos). A source that cannot be read here
    raises ``DataUnavailableError`` with one line saying how to fix it.
    """
    _known(source)
    if source == "prose":
        return _prose(n, seed, **options)
    if source == "docstrings":
        return docstrings(n, seed, **options)
    if source == "wikitext-103":
        return wikitext(n, seed, **options)
    if source == "enwik8":
        return enwik8(n, seed, **options)
    if source == "reaction-smiles":
        return reaction_smiles(n, seed, **options)
    if source == "synthetic-speech":
        return synthetic_speech(n, seed, **options)
    if source == "espeak-speech":
        return espeak_speech(n, seed, **options)
    if source == "photos":
        return photos(n, seed, **options)
    if source == "librispeech":
        return librispeech(n, seed, **options)
    if source == "synthetic-shapes":
        return images(n, seed, **options)
    if source == "imagenette":
        # The repo's main branch holds a loading script (refused by datasets >= 4); the Hub's Parquet conversion has
        # one folder per resolution, not a config of that name. Only its validation files are fetched.
        return _hub_images("frgfm/imagenette", "Imagenette", n, seed, revision="refs/convert/parquet",
                           data_files=IMAGENETTE_FILES)
    return _hub_images("ILSVRC/imagenet-1k", "ImageNet-1k (gated: accept its terms on the Hub and log in)", n, seed)


def _known(source: str) -> None:
    if source not in SOURCES:
        import difflib

        close = difflib.get_close_matches(source, list(SOURCES), n=3, cutoff=0.4)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise ValueError(f"unknown data source {source!r}{hint}; choose from {', '.join(SOURCES)}")


def _prose(n: int, seed: int, min_chars: int = 80) -> list[str]:
    # Same draw as text_samples(n, seed) for the default min_chars.
    paragraphs = prose_paragraphs(min_chars)
    idx = _sample(len(paragraphs), n, seed, f"the prose corpus (paragraphs of >= {min_chars} characters)")
    return [paragraphs[i] for i in idx]


def modality(source: str) -> str:
    """The modality of a source: "text", "speech" or "vision"."""
    _known(source)
    return SOURCES[source].modality


# ---------------------------------------------------------------------------------------------------------------------
# Real spoken English (eSpeak NG) and real photographs, offline
# ---------------------------------------------------------------------------------------------------------------------

# eSpeak NG voices ("voice+variant") of espeak-speech: American, British RP and Lancashire accents, male timbres and
# one female. Whisper tiny.en transcribes these best among eSpeak's English voices (measured here on four prose
# sentences: word error rates of about 0.2-0.3; eSpeak's Scottish, West Midlands and Caribbean voices and most female
# variants come out at 0.4-0.9).
ESPEAK_VOICES = ("en-us", "en-us+m7", "en-gb-x-rp", "en-gb-x-rp+m3", "en-gb-x-gbclan", "en-us+f3")
_SPOKEN = re.compile(r"[A-Z][A-Za-z ,;'-]*[a-z]\.")


@lru_cache(maxsize=None)
def spoken_sentences(min_words: int = 6, max_words: int = 24) -> tuple[str, ...]:
    """Sentences of the offline prose that can be read aloud and transcribed: letters, spaces, commas, semicolons,
    apostrophes and hyphens only (no code, numbers or symbols), ending with a full stop, ``min_words`` to
    ``max_words`` words; in corpus order, without duplicates."""
    out = []
    for paragraph in prose_paragraphs():
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph):
            sentence = sentence.strip()
            if _SPOKEN.fullmatch(sentence) and min_words <= len(sentence.split()) <= max_words:
                out.append(sentence)
    return tuple(dict.fromkeys(out))


def espeak_speech(n: int, seed: int = 0, voices: tuple[str, ...] | list[str] = ESPEAK_VOICES,
                  sentences: tuple[int, int] | list[int] = (1, 1), rates: tuple[int, int] | list[int] = (150, 180),
                  pitches: tuple[int, int] | list[int] = (40, 60), max_seconds: float = 28.0) -> list[dict]:
    """``n`` clips of spoken English: each reads ``sentences`` (a range) consecutive-in-draw prose sentences
    (``spoken_sentences``) in one of ``voices`` (cycled, so every voice speaks), at a rate (words per minute) and
    pitch drawn from their ranges; eSpeak NG output resampled to 16 kHz. A clip longer than ``max_seconds`` (Whisper
    reads 30-second windows) loses its last sentences. Returns ``{"array", "sampling_rate", "text", "voice", "rate",
    "pitch"}`` dicts; deterministic given the arguments (``espeak`` synthesises deterministically)."""
    from . import espeak

    if n <= 0:
        raise ValueError(f"espeak_speech needs n >= 1 samples, got n={n}")
    pool = spoken_sentences()
    rng = np.random.default_rng(seed)
    low, high = int(sentences[0]), int(sentences[1])
    out = []
    for i in range(n):
        k = int(rng.integers(low, high + 1))
        texts = [pool[j] for j in rng.choice(len(pool), size=k, replace=False)]
        voice, _, variant = voices[i % len(voices)].partition("+")
        rate = int(rng.integers(rates[0], rates[1] + 1))
        pitch = int(rng.integers(pitches[0], pitches[1] + 1))
        while True:
            text = " ".join(texts)
            wave = espeak.speak(text, voice, variant or None, rate, pitch)
            if wave.size <= max_seconds * espeak.SAMPLING_RATE or len(texts) == 1:
                break
            texts = texts[:-1]
        out.append({"array": wave[: int(max_seconds * espeak.SAMPLING_RATE)], "sampling_rate": espeak.SAMPLING_RATE,
                    "text": text, "voice": voices[i % len(voices)], "rate": rate, "pitch": pitch})
    return out


# (package, path inside it, what it shows): colour photographs first, then greyscale ones (read as RGB).
PHOTOS = (
    ("skimage", "data/astronaut.png", "astronaut Eileen Collins (NASA)"),
    ("skimage", "data/coffee.png", "a cup of coffee"),
    ("skimage", "data/chelsea.png", "Chelsea the cat"),
    ("skimage", "data/rocket.jpg", "a rocket on the launch pad (NASA)"),
    ("skimage", "data/motorcycle_left.png", "a motorcycle (Middlebury stereo set)"),
    ("skimage", "data/hubble_deep_field.jpg", "the Hubble eXtreme Deep Field (NASA)"),
    ("skimage", "data/retina.jpg", "a human retina (fundus photograph)"),
    ("skimage", "data/ihc.png", "immunohistochemistry stain (microscopy)"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg", "Grace Hopper"),
    ("skimage", "data/camera.png", "a cameraman (greyscale)"),
    ("skimage", "data/coins.png", "Greek coins (greyscale)"),
    ("skimage", "data/moon.png", "the surface of the moon (greyscale)"),
    ("skimage", "data/grass.png", "grass (greyscale)"),
    ("skimage", "data/gravel.png", "gravel (greyscale)"),
    ("skimage", "data/brick.png", "a brick wall (greyscale)"),
)


@lru_cache(maxsize=None)
def _photo(package: str, relative: str) -> np.ndarray:
    import importlib.util

    from PIL import Image

    found = importlib.util.find_spec(package)
    if found is None or found.origin is None:
        raise DataUnavailableError(f"the photographs of {package} are not installed: pip install "
                                   f"{'scikit-image' if package == 'skimage' else package}")
    with Image.open(Path(found.origin).parent / relative) as im:
        return np.asarray(im.convert("RGB"))


def photo_library() -> list[np.ndarray]:
    """Every photograph of ``PHOTOS`` as an (H, W, 3) uint8 array."""
    return [_photo(package, relative) for package, relative, _ in PHOTOS]


def photos(n: int, seed: int = 0, size: int = 224, min_fraction: float = 0.3) -> list[np.ndarray]:
    """``n`` square crops of the bundled photographs as (size, size, 3) uint8 arrays: photograph drawn uniformly,
    side between ``min_fraction`` and 1 of its shorter side, position uniform, mirrored with probability 1/2,
    resized with a bicubic filter (PIL). Deterministic given the arguments. Crops of the same photograph overlap,
    so they are not independent images: 15 photographs are the whole pool."""
    from PIL import Image

    if n <= 0:
        raise ValueError(f"photos needs n >= 1 samples, got n={n}")
    library = photo_library()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        image = library[int(rng.integers(len(library)))]
        h, w = image.shape[:2]
        side = int(round(rng.uniform(min_fraction, 1.0) * min(h, w)))
        top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(image[top:top + side, left:left + side]).resize((size, size), Image.BICUBIC)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        out.append(np.asarray(crop))
    return out


# Textbook organic reactions as reaction SMILES, written here (rxnmapper ships only two examples, in its README):
# reactants and reagents, ">>", the product, in the USPTO style rxnmapper's ALBERT was trained on. Each was written by
# hand from the named reaction; they are inputs for the masked-token check and the character-level chapter, not a
# curated dataset (no stereochemistry, few reagents).
REACTIONS = (
    "CC(=O)O.CCO>>CCOC(C)=O",  # Fischer esterification
    "CC(=O)Cl.NCc1ccccc1>>CC(=O)NCc1ccccc1",  # amide from an acid chloride
    "O=C(O)c1ccccc1.CO>>COC(=O)c1ccccc1",  # methyl benzoate
    "c1ccccc1.O=[N+]([O-])O>>O=[N+]([O-])c1ccccc1",  # nitration
    "O=[N+]([O-])c1ccccc1.[H][H]>>Nc1ccccc1",  # nitro reduction
    "O=Cc1ccccc1.[BH4-].[Na+]>>OCc1ccccc1",  # aldehyde reduction
    "Brc1ccccc1.OB(O)c1ccccc1>>c1ccc(-c2ccccc2)cc1",  # Suzuki coupling
    "CC[O-].[Na+].CI>>CCOC",  # Williamson ether synthesis
    "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C.NCCO>>CC(C)(C)OC(=O)NCCO",  # Boc protection
    "CC(C)(C)OC(=O)NCc1ccccc1.O=C(O)C(F)(F)F>>NCc1ccccc1",  # Boc removal
    "CC(=O)OC(C)=O.Nc1ccccc1>>CC(=O)Nc1ccccc1",  # acetylation of aniline
    "CCOC(=O)c1ccccc1.[Na+].[OH-]>>O=C(O)c1ccccc1",  # ester hydrolysis
    "C[Mg]Br.O=C1CCCCC1>>CC1(O)CCCCC1",  # Grignard addition
    "O=Cc1ccccc1.CN.[BH3-]C#N.[Na+]>>CNCc1ccccc1",  # reductive amination
    "Oc1ccccc1.BrBr>>Oc1ccc(Br)cc1",  # bromination of phenol
    "c1ccccc1.CC(=O)Cl.Cl[Al](Cl)Cl>>CC(=O)c1ccccc1",  # Friedel-Crafts acylation
    "C=CC=C.C=CC(=O)OC>>COC(=O)C1CC=CCC1",  # Diels-Alder
    "C=Cc1ccccc1.[H][H]>>CCc1ccccc1",  # hydrogenation
    "CS(=O)(=O)Cl.OCCc1ccccc1.CCN(CC)CC>>CS(=O)(=O)OCCc1ccccc1",  # mesylation
    "O=[N+]([O-])c1ccc(F)cc1.C1CCNCC1>>O=[N+]([O-])c1ccc(N2CCCCC2)cc1",  # nucleophilic aromatic substitution
    "Brc1ccc(C)cc1.C1COCCN1>>Cc1ccc(N2CCOCC2)cc1",  # Buchwald-Hartwig amination
    "Ic1ccccc1.C#Cc1ccccc1>>c1ccc(C#Cc2ccccc2)cc1",  # Sonogashira coupling
    "O=Cc1ccccc1.C=P(c1ccccc1)(c1ccccc1)c1ccccc1>>C=Cc1ccccc1",  # Wittig
    "O=C(O)c1ccncc1.NC1CC1>>O=C(NC1CC1)c1ccncc1",  # amide coupling
    "Cc1ccc(S(=O)(=O)Cl)cc1.NCc1ccccc1>>Cc1ccc(S(=O)(=O)NCc2ccccc2)cc1",  # sulfonamide
    "Oc1ccc(Cl)cc1.CI.O=C([O-])[O-].[K+].[K+]>>COc1ccc(Cl)cc1",  # O-methylation of a phenol
    "N#Cc1ccccc1.O>>NC(=O)c1ccccc1",  # nitrile hydration
    "CCOC(=O)CCc1ccccc1.[Li+].[AlH4-]>>OCCCc1ccccc1",  # ester reduction
    "O=C=Nc1ccccc1.NCC>>CCNC(=O)Nc1ccccc1",  # urea from an isocyanate
    "CC(C)=O.O=Cc1ccccc1>>CC(=O)/C=C/c1ccccc1",  # aldol condensation
    "O=C(O)c1ccc(Cl)cc1.O=S(Cl)Cl>>O=C(Cl)c1ccc(Cl)cc1",  # acid chloride with thionyl chloride
    "O=C(NCCc1ccccc1)OCc1ccccc1.[H][H]>>NCCc1ccccc1",  # Cbz removal
    "BrCc1ccccc1.C1CCNC1>>c1ccc(CN2CCCC2)cc1",  # N-alkylation
    "C=Cc1ccccc1.O=C(OO)c1cccc(Cl)c1>>c1ccc(C2CO2)cc1",  # epoxidation
    "CC(C)S.CN(C)C=O.Fc1cccnc1F.O=C([O-])[O-].[K+].[K+]>>CC(C)Sc1ncccc1F",  # rxnmapper's README example
    "C1COCCO1.CC(C)(C)OC(=O)CONC(=O)NCc1cccc2ccccc12.Cl>>O=C(O)CONC(=O)NCc1cccc2ccccc12",  # rxnmapper's README
)


def reaction_smiles(n: int, seed: int = 0) -> list[str]:
    """``n`` of the ``REACTIONS`` (reaction SMILES), drawn without replacement by ``seed`` (all of them, in a seeded
    order, for n >= 36)."""
    order = np.random.default_rng(seed).permutation(len(REACTIONS))
    return [REACTIONS[i] for i in order[:n]]
