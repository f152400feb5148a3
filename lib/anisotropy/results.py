"""The results store: one Parquet file per result, keyed by everything that determines it, the code included.

``results/<chapter>/<hash>.parquet`` holds the rows, ``<hash>.json`` beside it the key and provenance (written last:
a Parquet file without its JSON sidecar is an unfinished write and is ignored, and no Parquet is ever read without
its sidecar). In a folder, writes go to a temporary name and are renamed into place, so a run killed at any moment
never leaves a file that a later run takes for complete.

The store may also live at any fsspec URL (``ANISOTROPY_RESULTS=s3://bucket/prefix``, ``gcs://``, ``memory://``...),
shared by the machines of a cluster. Object stores have no rename, but each object is written whole by one request
(it exists complete or not at all), and the same order holds: Parquet first, sidecar last. ``file://`` URLs and plain
paths are the folder store.

A packed results folder (``paths.packed``: one on Google Drive, or any with ``ANISOTROPY_PACK=1``) holds one file per
chapter, ``<folder>/packs/<chapter>.tar``, since Drive times out on folders of many small files
(googlecolab/colabtools#751). The store reads and writes the same layout in a folder on the runtime's own disk
(``paths.working_dir``) and, after each result it stores, rewrites that chapter's pack (a temporary name in ``packs/``,
then a rename: a disconnect loses at most the result being computed, and a pack cut mid-write leaves the previous one
whole). The first store of a process (a chapter's first cell: ``profiles.apply``) unpacks every pack that changed
since this runtime last wrote or unpacked it. Self-trained checkpoints (``paths.checkpoints_dir``) stay unpacked.

``cached`` adds to every key the fingerprint of the code that computes it (``fingerprint``): the library modules the
computation depends on and the versions of the packages that shape numbers, so a changed metric recomputes and a
changed plot does not; a computation written outside the package (a notebook's lambda) adds its own code.
``ANISOTROPY_RECOMPUTE=1`` (the CLI's ``--recompute``) recomputes and overwrites instead of reading; ``stale`` lists
what no current code reaches (``anisotropy clean`` removes it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

import pandas as pd

from anisotropy import fingerprint, hub, paths
from anisotropy.errors import UserError


class CorruptResultError(RuntimeError):
    """A stored result that cannot be read back."""


class RecomputedWarning(UserWarning):
    """A stored result could not be read (a write cut off, on a network drive say) and is computed again."""


class StoreError(UserError):
    """A results store that cannot be used (its filesystem is not installed, its bucket does not exist, no access);
    one line naming it, printed by the CLI."""


def is_url(where) -> bool:
    """Whether ``where`` names a store by an fsspec URL other than a local ``file://`` one."""
    text = str(where)
    return "://" in text and not text.startswith("file://")


def local_path(where) -> Path:
    text = str(where)
    return Path(text[len("file://"):] if text.startswith("file://") else text)


def filesystem(url: str):
    """``(fsspec filesystem, path within it)`` of a store URL, with one-line errors for a protocol fsspec does not
    know or whose package is missing."""
    import fsspec

    try:  # no listings cache: another machine may have written since this process last listed a folder
        return fsspec.core.url_to_fs(url, use_listings_cache=False)
    except ImportError as exc:
        raise StoreError(f"The results store {url} needs a filesystem that is not installed: "
                         f"{str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        raise StoreError(f"The results store {url}: {str(exc).splitlines()[0]} (ANISOTROPY_RESULTS is a folder or "
                         "an fsspec URL such as s3://bucket/prefix or gcs://bucket/prefix).") from None


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
    (``cache:checkpoints/...`` wherever ``paths.checkpoints_dir`` puts the suites; absolute outside it) and its
    training record without wall-clock fields, so the same recipe, seed and step give the same key on any machine or
    checkout, and a retrained folder gets a new one."""
    folder = Path(folder).resolve()
    for root, prefix in ((paths.checkpoints_dir(), "cache:checkpoints/"), (paths.cache_dir(), "cache:")):
        if folder.is_relative_to(root.resolve()):
            where = prefix + folder.relative_to(root.resolve()).as_posix()
            break
    else:
        where = str(folder)
    state_file = folder / "training_state.json"
    state = json.loads(state_file.read_text()) if state_file.is_file() else {}
    for name in WALL_CLOCK_FIELDS:
        state.pop(name, None)
    digest = hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"folder": where, "training_state": digest if state else None}


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
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


PACKS = "packs"  # <packed results folder>/packs/<chapter>.tar
_UNPACKED: set[tuple[str, str]] = set()  # (packed folder, working folder) unpacked by this process


class Store:
    """The results store under ``root`` (default ``anisotropy.paths.results_location()``): a folder, or an fsspec URL
    (then ``root`` is the URL as a string and ``fs`` its filesystem). The files are in ``folder``: ``root`` itself, or
    for a packed ``root`` its working folder, with ``packs`` the folder of its packs (None when not packed)."""

    def __init__(self, root: str | Path | None = None):
        where = root if root is not None else paths.results_location()
        self.fs = None
        self.packs = None
        if is_url(where):
            self.root = str(where).rstrip("/")
            self.fs, self._base = filesystem(self.root)
            self.folder = None
        else:
            self.root = local_path(where)
            self.folder = self.root
            if paths.packed(self.root):
                self.packs, self.folder = self.root / PACKS, paths.working_dir(self.root)
                self._unpack()

    @property
    def remote(self) -> bool:
        return self.fs is not None

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def location(self, *parts: str):
        """A path (folder store) or URL (fsspec store) inside the store."""
        return self.folder.joinpath(*parts) if not self.remote else "/".join([self.root, *parts])

    def _fs_path(self, url: str) -> str:
        return self._base + url[len(self.root):]

    def _url(self, fs_path: str) -> str:
        return self.root + fs_path[len(self._base):]

    def glob(self, *parts: str) -> list:
        """The stored files matching ``parts`` (a glob pattern, one part per level), sorted: paths in a folder store,
        URLs in an fsspec store."""
        if not self.remote:
            return sorted(self.folder.glob("/".join(parts))) if self.folder.is_dir() else []
        return [self._url(p) for p in sorted(self.fs.glob(self._fs_path(self.location(*parts))))]

    def check(self) -> None:
        """Fail with one line now, before anything runs, if the store cannot be reached (a bucket that does not exist,
        no credentials); a folder store is created when first written."""
        if not self.remote:
            return
        bucket = self._base.split("/")[0]
        try:
            found = self.fs.exists(bucket) if bucket else True
        except Exception as exc:  # noqa: BLE001 - credentials, endpoint, permissions: one line whatever the cause
            raise StoreError(f"The results store {self.root} cannot be reached ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}).") from None
        if not found:
            raise StoreError(f"The results store {self.root}: the bucket {bucket!r} does not exist. Create it, or "
                             "set ANISOTROPY_RESULTS to a store that exists.")

    # -- bytes, for a folder or a URL --

    def _exists(self, where) -> bool:
        return where.is_file() if not self.remote else self.fs.exists(self._fs_path(where))

    def _read(self, where) -> bytes:
        return where.read_bytes() if not self.remote else self.fs.cat_file(self._fs_path(where))

    def _write(self, where, data: bytes) -> None:
        if not self.remote:
            atomic_write(where, lambda p: p.write_bytes(data))
        else:  # one request: the object exists whole or not at all
            self.fs.pipe_file(self._fs_path(where), data)

    def read_bytes(self, chapter: str, key: dict) -> bytes:
        """The stored Parquet file of ``key`` as bytes (what a digest of stored rows reads)."""
        data, _ = self._paths(chapter, key)
        return self._read(data)

    def _paths(self, chapter: str, key: dict):
        h = key_hash(key)
        return self.location(chapter, f"{h}.parquet"), self.location(chapter, f"{h}.json")

    def has(self, chapter: str, key: dict) -> bool:
        data, meta = self._paths(chapter, key)
        return self._exists(meta) and self._exists(data)

    def load(self, chapter: str, key: dict) -> pd.DataFrame:
        data, meta = self._paths(chapter, key)
        try:
            return pd.read_parquet(data if not self.remote else io.BytesIO(self._read(data)))
        except Exception as exc:  # pyarrow raises several types for truncated or foreign files
            name = meta.name if not self.remote else meta.rsplit("/", 1)[-1]
            raise CorruptResultError(
                f"The stored result {data} cannot be read ({type(exc).__name__}: {exc}). "
                f"Delete it (and {name}) to recompute it."
            ) from None

    def save(self, chapter: str, key: dict, frame: pd.DataFrame, seconds: float | None = None,
             code: dict | None = None):
        data, meta = self._paths(chapter, key)
        if not self.remote:
            atomic_write(data, lambda p: frame.to_parquet(p, index=False))
        else:
            buffer = io.BytesIO()
            frame.to_parquet(buffer, index=False)
            self._write(data, buffer.getvalue())
        sidecar = {
            "chapter": chapter,
            "key": key,
            "code": code,
            "rows": len(frame),
            "seconds": seconds,
            "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        text = json.dumps(sidecar, indent=1, sort_keys=True, default=str)
        if not self.remote:
            atomic_write(meta, lambda p: p.write_text(text))
        else:
            self._write(meta, text.encode())  # last: only now is the result complete
        if self.packs is not None:
            self._pack(chapter)
        return data

    # -- a packed results folder: one file per chapter --

    def _lock(self):
        from filelock import FileLock

        # On the local disk (a lock on Drive is not to be trusted): the processes of one runtime take turns, so a pack
        # is always written from the working folder as it stands, with every result stored before.
        self.folder.mkdir(parents=True, exist_ok=True)
        return FileLock(self.folder / ".packs.lock")

    def _stamp_file(self, chapter: str) -> Path:
        return self.folder / ".packs" / f"{chapter}.json"

    @staticmethod
    def _stamp(pack: Path) -> dict:
        stat = pack.stat()
        return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}

    def _pack(self, chapter: str) -> None:
        """Rewrite ``packs/<chapter>.tar`` from the chapter's complete results in the working folder (Parquet files
        first, sidecars last), whole or not at all; no results, no pack. A pack another runtime wrote since this one
        last read it is unpacked first, so its results are kept."""
        target = self.packs / f"{chapter}.tar"
        with self._lock():
            if target.is_file():
                self._unpack_one(target)
            pairs = [(meta.with_suffix(".parquet"), meta) for meta in sorted((self.folder / chapter).glob("*.json"))
                     if not meta.name.startswith(".") and meta.with_suffix(".parquet").is_file()]
            if not pairs:
                target.unlink(missing_ok=True)
                return

            def write(tmp: Path) -> None:
                with tarfile.open(tmp, "w") as tar:
                    for path in [data for data, _ in pairs] + [meta for _, meta in pairs]:
                        tar.add(path, arcname=path.name)

            atomic_write(target, write)
            atomic_write(self._stamp_file(chapter), lambda p: p.write_text(json.dumps(self._stamp(target))))

    def _unpack(self) -> None:
        """Bring into the working folder every pack that changed since this runtime last wrote or unpacked it (once
        per process); a pack that cannot be read is warned of and its results computed again."""
        done = (str(self.root), str(self.folder))
        if done in _UNPACKED:
            return
        # A leftover ``.<chapter>.tar.*.tmp`` (a write cut off) is not a pack: only complete ones carry the name.
        packs = sorted(p for p in self.packs.glob("*.tar") if not p.name.startswith(".")) if self.packs.is_dir() else []
        with self._lock():
            for pack in packs:
                self._unpack_one(pack)
        _UNPACKED.add(done)

    def _unpack_one(self, pack: Path) -> None:
        """Extract ``pack`` into its chapter's working folder unless this runtime wrote or read it as it is now (the
        caller holds the lock)."""
        chapter, stamp_file = pack.stem, self._stamp_file(pack.stem)
        stamp = self._stamp(pack)
        if stamp_file.is_file() and json.loads(stamp_file.read_text()) == stamp:
            return
        try:
            with tarfile.open(pack) as tar:
                files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()
                         if m.isfile() and _is_result_file(m.name)}
        except (tarfile.TarError, OSError, EOFError) as exc:
            warnings.warn(f"The pack {pack} cannot be read ({type(exc).__name__}: {exc}); its results are computed "
                          "again.", RecomputedWarning, stacklevel=4)
            return
        for name in sorted(files, key=lambda n: n.endswith(".json")):  # sidecars last, as ``save`` writes them
            atomic_write(self.folder / chapter / name, lambda p, data=files[name]: p.write_bytes(data))
        atomic_write(stamp_file, lambda p: p.write_text(json.dumps(stamp)))

    @staticmethod
    def code_key(key: dict, compute: Callable, code: tuple[str, ...] | None = None) -> tuple[dict, dict]:
        """``(key with the fingerprint of compute's code, the sidecar's record of that code)``: what ``cached`` stores
        ``compute``'s result under.

        ``code`` names the package modules the result depends on; by default those of ``compute``
        (``fingerprint.modules_of``: its own module, or the modules a notebook's lambda refers to).

        The key covers ``compute``'s code in one of two ways: a function of the package through its module's
        fingerprint; any other function (a notebook's lambda, a test's function) through the digest of its own code
        as well (``fingerprint.own_code``), so editing it recomputes. Such a function may call the library, not other
        functions of its notebook or module (their code would escape the key): those raise
        ``fingerprint.UnkeyedCodeError``; move them into the library.
        """
        own = fingerprint.own_code(compute)
        modules = tuple(code) if code else fingerprint.modules_of(compute)
        stamp = fingerprint.package() if modules == ("__all__",) else fingerprint.of(*modules)
        return ({**key, "_code": stamp, **({"_own_code": own} if own else {})},
                {"modules": list(modules), "fingerprint": stamp})

    def stored(self, chapter: str, key: dict, compute: Callable[[], pd.DataFrame],
               code: tuple[str, ...] | None = None) -> bool:
        """Whether ``cached`` with these arguments would read a stored frame instead of computing one."""
        return self.has(chapter, self.code_key(key, compute, code)[0]) and not recomputing()

    def cached(self, chapter: str, key: dict, compute: Callable[[], pd.DataFrame],
               code: tuple[str, ...] | None = None) -> pd.DataFrame:
        """The stored frame for ``key`` computed by the current code, computing and storing it first if absent; the
        code enters the key as ``code_key`` says (a computation whose code would escape it is refused before anything
        is read or computed)."""
        key, record = self.code_key(key, compute, code)
        if self.has(chapter, key) and not recomputing():
            try:
                return self.load(chapter, key)
            except CorruptResultError as exc:  # a cache miss, not a stop: the result is computed and stored anew
                warnings.warn(str(exc).split(" Delete it", 1)[0] + " Computing it again.", RecomputedWarning,
                              stacklevel=2)
        start = time.perf_counter()
        frame = compute()
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"compute() for chapter {chapter!r} must return a pandas DataFrame, got {type(frame)}")
        self.save(chapter, key, frame, seconds=time.perf_counter() - start, code=record)
        return frame

    def _sidecars(self, chapter: str | None = None):
        """(sidecar path, its content) of every complete stored result (of one chapter, or all)."""
        pattern = f"{chapter}/*.json" if chapter else "*/*.json"
        if not self.remote:
            pairs = [(meta, meta.with_suffix(".parquet")) for meta in sorted(self.folder.glob(pattern))]
            pairs = [(meta, data) for meta, data in pairs if data.is_file()]
        else:
            found = set(self.fs.glob(f"{self._base}/{pattern.removesuffix('.json')}.*"))
            pairs = [(self._url(m), self._url(m[:-len(".json")] + ".parquet")) for m in sorted(found)
                     if m.endswith(".json") and m[:-len(".json")] + ".parquet" in found]
        for meta, data in pairs:
            try:
                content = json.loads(self._read(meta))
                content["key"]
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptResultError(
                    f"The sidecar {meta} of a stored result cannot be read ({type(exc).__name__}: {exc}). "
                    f"Delete it (and {str(data).rsplit('/', 1)[-1]}) to recompute that result.") from None
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

    def stale(self) -> list:
        """Stored results (Parquet and sidecar: paths, or URLs of an fsspec store) that no key of the current code
        reaches: computed by other code (a changed module or package version) or by a version of the book before code
        fingerprints. (A notebook lambda's own code is not known here: the results of its earlier versions stay until
        a library module they depend on changes.)"""
        return [p for meta, content in self._sidecars() if _is_stale(content)
                for p in (_parquet_of(meta), meta)]

    def size(self, items) -> int:
        """Bytes of these stored files (paths or URLs of this store)."""
        if not self.remote:
            return sum(Path(p).stat().st_size for p in items if Path(p).is_file())
        return sum(self.fs.size(self._fs_path(u)) or 0 for u in items if self.fs.exists(self._fs_path(u)))

    def remove(self, items) -> None:
        """Delete these stored files, sidecars first (a Parquet without its sidecar is never read); a packed folder's
        packs are rewritten without them."""
        for item in sorted(items, key=lambda p: not str(p).endswith(".json")):
            if not self.remote:
                Path(item).unlink(missing_ok=True)
            elif self.fs.exists(self._fs_path(item)):
                self.fs.rm_file(self._fs_path(item))
        if self.packs is not None:
            for chapter in sorted({Path(item).parent.name for item in items}):
                self._pack(chapter)


def _is_result_file(name: str) -> bool:
    """A name a pack may hold: a result's Parquet file or sidecar, in the chapter's folder itself."""
    return ("/" not in name and "\\" not in name and not name.startswith(".")
            and name.endswith((".parquet", ".json")))


def _parquet_of(meta):
    return meta.with_suffix(".parquet") if isinstance(meta, Path) else meta[:-len(".json")] + ".parquet"


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
