"""The results store: one Parquet file per result, keyed by everything that determines it, the code included.

``results/<chapter>/<hash>.parquet`` holds the rows, ``<hash>.json`` beside it the key and provenance (written last:
a Parquet file without its JSON sidecar is an unfinished write and is ignored). Writes go to a temporary name and are
renamed into place, so a run killed at any moment never leaves a file that a later run takes for complete.

``cached`` adds to every key the fingerprint of the code that computes it (``fingerprint``): the library modules the
computation depends on and the versions of the packages that shape numbers, so a changed metric recomputes and a
changed plot does not. ``ANISOTROPY_RECOMPUTE=1`` (the runner's ``--force``) recomputes and overwrites instead of
reading; ``stale`` lists what no current code reaches (``anisotropy clean`` removes it).
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

from . import fingerprint, hub, paths


class CorruptResultError(RuntimeError):
    """A stored result that cannot be read back."""


RECOMPUTE_ENV = "ANISOTROPY_RECOMPUTE"


def key_hash(key: dict) -> str:
    """A stable 16-hex-digit hash of a JSON-serialisable key (sorted keys)."""
    payload = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def recomputing() -> bool:
    """Whether stored results are to be recomputed rather than read (``ANISOTROPY_RECOMPUTE``)."""
    return os.environ.get(RECOMPUTE_ENV, "").upper() in ("1", "ON", "YES", "TRUE")


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
    except OSError as exc:
        full = hub.no_space(exc)
        if full is None:
            raise
        raise hub.no_space_error(f"writing the result {path.name}", full, path.parent) from None
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

    def save(self, chapter: str, key: dict, frame: pd.DataFrame, seconds: float | None = None,
             code: dict | None = None) -> Path:
        data, meta = self._paths(chapter, key)
        _atomic_write(data, lambda p: frame.to_parquet(p, index=False))
        sidecar = {
            "chapter": chapter,
            "key": key,
            "code": code,
            "rows": len(frame),
            "seconds": seconds,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _atomic_write(meta, lambda p: p.write_text(json.dumps(sidecar, indent=1, sort_keys=True, default=str)))
        return data

    def cached(self, chapter: str, key: dict, compute: Callable[[], pd.DataFrame],
               code: tuple[str, ...] | None = None) -> pd.DataFrame:
        """The stored frame for ``key`` computed by the current code, computing and storing it first if absent.

        ``code`` names the package modules the result depends on; by default those of ``compute``
        (``fingerprint.modules_of``: its own module, or the modules a notebook's lambda refers to).
        """
        modules = tuple(code) if code else fingerprint.modules_of(compute)
        stamp = fingerprint.package() if modules == ("__all__",) else fingerprint.of(*modules)
        key = {**key, "_code": stamp}
        if self.has(chapter, key) and not recomputing():
            return self.load(chapter, key)
        start = time.perf_counter()
        frame = compute()
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"compute() for chapter {chapter!r} must return a pandas DataFrame, got {type(frame)}")
        self.save(chapter, key, frame, seconds=time.perf_counter() - start,
                  code={"modules": list(modules), "fingerprint": stamp})
        return frame

    def _sidecars(self, chapter: str | None = None):
        """(sidecar path, its content) of every complete stored result (of one chapter, or all)."""
        pattern = f"{chapter}/*.json" if chapter else "*/*.json"
        for meta in sorted(self.root.glob(pattern)):
            data = meta.with_suffix(".parquet")
            if not data.is_file():
                continue
            try:
                content = json.loads(meta.read_text())
                content["key"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptResultError(
                    f"The sidecar {meta} of a stored result cannot be read ({type(exc).__name__}: {exc}). "
                    f"Delete it (and {data.name}) to recompute that result.") from None
            yield meta, content

    def frames(self, chapter: str) -> pd.DataFrame:
        """Every complete frame of ``chapter`` stored by the current code, concatenated, with its key fields as extra
        columns (results of older code are left out: ``stale``)."""
        parts = []
        for meta, content in self._sidecars(chapter):
            if _is_stale(content):
                continue
            key = content["key"]
            frame = self.load(chapter, key)
            for name, value in key.items():
                if name not in frame.columns and not name.startswith("_") and not isinstance(value, (list, dict)):
                    frame[name] = value
            parts.append(frame)
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def stale(self) -> list[Path]:
        """Stored results (Parquet and sidecar) that no key of the current code reaches: computed by other code (a
        changed module or package version) or by a version of the book before code fingerprints."""
        return [p for meta, content in self._sidecars() if _is_stale(content)
                for p in (meta.with_suffix(".parquet"), meta)]


def _is_stale(content: dict) -> bool:
    code = content.get("code")
    if not code:
        return True
    modules = tuple(code["modules"])
    try:
        current = fingerprint.package() if modules == ("__all__",) else fingerprint.of(*modules)
    except ValueError:  # a module that no longer exists
        return True
    return current != code["fingerprint"]
