"""Training text as token arrays on disk: one split of a corpus, tokenized once, ``CHUNK_CHARS`` characters of
paragraphs at a time, into one flat array of token ids (each paragraph's ids followed by the joiner token, in the
corpus's order) in the smallest unsigned type that holds the vocabulary (``dtype_for``: uint8 up to 256 ids, uint16 up
to 65,536, else uint32), with the count of every id. Read back as a read-only ``np.memmap`` that every recipe and
worker process shares, so a run holds a few windows of its corpus in memory, never the corpus.

Peak memory of a preparation is one chunk's: its text, the tokenizer's encodings of it (~100-200 bytes a token) and
its ids, whatever the corpus's size (``tests/test_tokens.py`` measures it). An array is keyed by its caller's ``name``
(``training.tasks``: corpus, split, content hash, tokenizer hash, joiner, trainer fingerprint) and written whole or not
at all under ``cache_dir()/tokens/<name>``; two processes that want the same array take turns on a lock, and the
second reads the first one's (``paths.write_folder_once``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from anisotropy import paths

CHUNK_CHARS = 1 << 20  # characters tokenized at once: ~1 Mi tokens of a byte-level tokenizer, ~150 MiB of encodings
MARKER = "tokens.json"  # written last: the array is complete


@dataclass(frozen=True)
class TokenArray:
    """``ids``: the split's token stream (read-only memmap); ``counts[i]``: occurrences of id ``i`` in it."""

    ids: np.ndarray
    counts: np.ndarray
    folder: Path


def dtype_for(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type holding the ids ``0 .. vocab_size - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"a vocabulary of {vocab_size:,} ids does not fit 32 bits")


def tokenizer_fingerprint(backend) -> str:
    """12 hex digits of a ``tokenizers.Tokenizer``'s whole definition (vocabulary, merges, normalisation, specials)."""
    return hashlib.sha256(backend.to_str().encode()).hexdigest()[:12]


def _chunks(batches: Iterable[list[str]], chunk_chars: int):
    """The paragraphs of ``batches`` regrouped into lists of about ``chunk_chars`` characters, in order."""
    chunk, size = [], 0
    for batch in batches:
        for paragraph in batch:
            chunk.append(paragraph)
            size += len(paragraph)
            if size >= chunk_chars:
                yield chunk
                chunk, size = [], 0
    if chunk:
        yield chunk


def write(folder: Path, batches: Iterable[list[str]], backend, vocab_size: int, joiner: int,
          chunk_chars: int = CHUNK_CHARS) -> None:
    """Tokenize ``batches`` (lists of paragraphs) with ``backend`` (no special tokens added) into ``folder``:
    ``tokens.bin`` (the ids, each paragraph followed by ``joiner``), ``counts.npy`` and ``tokens.json`` last."""
    dtype = dtype_for(vocab_size)
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # the same ids, without offsets
    counts = np.zeros(vocab_size, dtype=np.int64)
    n_tokens = n_paragraphs = n_chars = 0
    with open(folder / "tokens.bin", "wb") as out:
        for chunk in _chunks(batches, chunk_chars):
            ids = [e.ids for e in encode(chunk, add_special_tokens=False)]
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)) + 1  # the joiner after each
            flat = np.full(int(lengths.sum()), joiner, dtype=np.int64)
            body = np.ones(len(flat), dtype=bool)
            body[np.cumsum(lengths) - 1] = False
            flat[body] = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(body.sum()))
            if len(flat) and (flat.min() < 0 or flat.max() >= vocab_size):
                raise ValueError(f"token id {int(flat.max())} outside a vocabulary of {vocab_size:,}")
            counts += np.bincount(flat, minlength=vocab_size)
            flat.astype(dtype).tofile(out)
            n_tokens += len(flat)
            n_paragraphs += len(chunk)
            n_chars += sum(map(len, chunk))
    np.save(folder / "counts.npy", counts)
    meta = {"dtype": dtype.name, "tokens": n_tokens, "vocab_size": vocab_size, "joiner": joiner,
            "paragraphs": n_paragraphs, "characters": n_chars, "tokenizer": tokenizer_fingerprint(backend)}
    (folder / MARKER).write_text(json.dumps(meta, indent=1))


def read(folder: Path) -> TokenArray:
    """The token array written to ``folder`` (``write``), its ids memory-mapped read-only."""
    meta = json.loads((Path(folder) / MARKER).read_text())
    dtype = np.dtype(meta["dtype"])
    ids = (np.memmap(folder / "tokens.bin", dtype=dtype, mode="r", shape=(meta["tokens"],)) if meta["tokens"]
           else np.zeros(0, dtype=dtype))  # an empty file cannot be mapped
    return TokenArray(ids, np.load(folder / "counts.npy"), Path(folder))


def token_array(name: str, batches: Callable[[], Iterable[list[str]]], backend, vocab_size: int, joiner: int,
                root: str | Path | None = None) -> TokenArray:
    """The array ``name`` under ``root`` (default ``cache_dir()/tokens``), written from ``batches()`` the first time
    (``write``), by one process at a time."""
    folder = Path(root if root is not None else paths.cache_dir() / "tokens") / name
    paths.write_folder_once(folder, lambda tmp: write(tmp, batches(), backend, vocab_size, joiner), marker=MARKER)
    return read(folder)
