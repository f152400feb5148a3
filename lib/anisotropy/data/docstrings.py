"""The docstring corpus: English prose paragraphs of the docstrings of the packages the book installs, deduplicated
and split into train and validation documents, keyed by a content hash. The self-trained language models learn from
its train split; ``data.load("docstrings", ...)`` draws from its validation split.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from anisotropy.data.common import sample
from anisotropy.paths import cache_dir


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
    return [pool[i] for i in sample(len(pool), n, seed, f"the docstring corpus ({split})")]
