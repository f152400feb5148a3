"""The results store: one Parquet file per result, keyed by everything that determines it.

``results/<chapter>/<hash>.parquet`` holds the rows, ``<hash>.json`` beside it the key and provenance (written last:
a Parquet file without its JSON sidecar is an unfinished write and is ignored). Writes go to a temporary name and are
renamed into place, so a run killed at any moment never leaves a file that a later run takes for complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from . import __version__, paths


class CorruptResultError(RuntimeError):
    """A stored result that cannot be read back."""


def key_hash(key: dict) -> str:
    """A stable 16-hex-digit hash of a JSON-serialisable key (sorted keys; the package version is added)."""
    payload = json.dumps({**key, "_package_version": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# Fields (of a training_state.json, or columns of a stored frame) that record how long something took and on how many
# threads, not what was computed: they differ between two runs of the same profile and seed, and nothing else may.
WALL_CLOCK_FIELDS = ("seconds", "cpu_seconds", "threads")


def checkpoint_key(folder: str | Path) -> dict:
    """What identifies a self-trained checkpoint folder in a results key: its path relative to the checkpoint cache
    (absolute outside it) and its training record without wall-clock fields, so the same recipe, seed and step give
    the same key on any machine or checkout, and a retrained folder gets a new one."""
    folder = Path(folder).resolve()
    try:
        where = "cache:" + folder.relative_to(paths.cache_dir().resolve()).as_posix()
    except ValueError:
        where = str(folder)
    state_file = folder / "training_state.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    for name in WALL_CLOCK_FIELDS:
        state.pop(name, None)
    digest = hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"folder": where, "training_state": digest if state else None}


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as fh:  # on disk before it carries the final name
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class Store:
    """Plain-file results store under ``root`` (default ``anisotropy.paths.results_dir()``)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else paths.results_dir()

    def _paths(self, chapter: str, key: dict) -> tuple[Path, Path]:
        h = key_hash(key)
        folder = self.root / chapter
        return folder / f"{h}.parquet", folder / f"{h}.json"

    def has(self, chapter: str, key: dict) -> bool:
        data, meta = self._paths(chapter, key)
        return data.is_file() and meta.is_file()

    def load(self, chapter: str, key: dict) -> pd.DataFrame:
        data, meta = self._paths(chapter, key)
        try:
            return pd.read_parquet(data)
        except Exception as exc:  # pyarrow raises several types for truncated or foreign files
            raise CorruptResultError(
                f"The stored result {data} cannot be read ({type(exc).__name__}: {exc}). "
                f"Delete it (and {meta.name}) to recompute it."
            ) from None

    def save(self, chapter: str, key: dict, frame: pd.DataFrame, seconds: float | None = None) -> Path:
        data, meta = self._paths(chapter, key)
        _atomic_write(data, lambda p: frame.to_parquet(p, index=False))
        sidecar = {
            "chapter": chapter,
            "key": key,
            "package_version": __version__,
            "rows": len(frame),
            "seconds": seconds,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _atomic_write(meta, lambda p: p.write_text(json.dumps(sidecar, indent=1, sort_keys=True, default=str)))
        return data

    def cached(self, chapter: str, key: dict, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """The stored frame for ``key``, computing and storing it first if absent."""
        if self.has(chapter, key):
            return self.load(chapter, key)
        start = time.perf_counter()
        frame = compute()
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"compute() for chapter {chapter!r} must return a pandas DataFrame, got {type(frame)}")
        self.save(chapter, key, frame, seconds=time.perf_counter() - start)
        return frame

    def frames(self, chapter: str) -> pd.DataFrame:
        """Every complete stored frame of ``chapter`` concatenated, with its key fields as extra columns."""
        parts = []
        for meta in sorted((self.root / chapter).glob("*.json")):
            data = meta.with_suffix(".parquet")
            if not data.is_file():
                continue
            try:
                key = json.loads(meta.read_text())["key"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptResultError(
                    f"The sidecar {meta} of a stored result cannot be read ({type(exc).__name__}: {exc}). "
                    f"Delete it (and {data.name}) to recompute that result.") from None
            frame = self.load(chapter, key)
            for name, value in key.items():
                if name not in frame.columns and not isinstance(value, (list, dict)):
                    frame[name] = value
            parts.append(frame)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
