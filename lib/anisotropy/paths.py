"""Where the project keeps things: the repository root, the results store, the cache and the trained checkpoints.

Environment variables override the defaults: ``ANISOTROPY_RESULTS`` (results store: a folder, or any fsspec URL such
as ``s3://bucket/prefix``; a chapter's ``results_dir`` parameter sets it, ``use_results``) and ``ANISOTROPY_CACHE``
(tokenizers, token arrays, conversions; self-trained checkpoints unless ``checkpoints_dir`` puts them beside a moved
results store). Outside a checkout (e.g. a pip install on Colab) both fall back to ``~/.cache/anisotropy``.
A results folder on Google Drive is kept packed, one file per chapter (``packed``, ``working_dir``; ``ANISOTROPY_PACK``).
``atomic_folder`` and ``write_folder_once`` write a folder of the cache (a tokenizer, a checkpoint; a conversion) so
that it appears whole or not at all.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def project_root() -> Path | None:
    """The checkout that holds ``_toc.yml``, searched upward from the working directory, then from this file."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "_toc.yml").is_file() and (folder / "lib" / "anisotropy").is_dir():
                return folder
    return None


def _default(sub: str) -> Path:
    root = project_root()
    return (root / sub) if root is not None else Path.home() / ".cache" / "anisotropy" / sub


def results_location() -> str | Path:
    """Where the results store lives: a folder, or the fsspec URL of ``$ANISOTROPY_RESULTS`` as written."""
    given = os.environ.get("ANISOTROPY_RESULTS")
    if given and "://" in given and not given.startswith("file://"):
        return given
    return results_dir()


def results_dir() -> Path:
    given = os.environ.get("ANISOTROPY_RESULTS") or ""
    return Path(given.removeprefix("file://")) if given else _default("results")


DRIVE = "/content/drive"  # where Colab mounts Google Drive


def use_results(location: str) -> None:
    """Keep this process's results store (and its children's) at ``location``, a folder or an fsspec URL, from now
    on. A folder under Colab's ``DRIVE`` mounts Google Drive first when it is not mounted (Colab asks the reader to
    allow it once)."""
    location = str(location)
    if location.startswith(DRIVE) and not os.path.ismount(DRIVE) and not Path(DRIVE, "MyDrive").is_dir():
        try:
            from google.colab import drive  # only on Colab
        except ImportError:
            pass
        else:
            drive.mount(DRIVE)
    os.environ["ANISOTROPY_RESULTS"] = location


PACK_ENV = "ANISOTROPY_PACK"


def packed(folder: str | Path) -> bool:
    """Whether the results folder ``folder`` is kept packed (``results.Store``: read and written in ``working_dir``,
    kept there as one file per chapter), because its drive times out on folders of many small files (Google Drive,
    googlecolab/colabtools#751). ``ANISOTROPY_PACK=1`` packs any results folder, ``ANISOTROPY_PACK=0`` none; unset, a
    folder under Colab's ``DRIVE`` is packed."""
    given = os.environ.get(PACK_ENV, "").strip().upper()
    if given:
        return given in ("1", "ON", "YES", "TRUE")
    text = Path(folder).as_posix()
    return text == DRIVE or text.startswith(DRIVE + "/")


def working_dir(folder: str | Path) -> Path:
    """The folder on this runtime's own disk where the packed results folder ``folder`` is unpacked, read and written:
    ``cache_dir()/packed-results/<digest of folder's path>`` (a new runtime starts with none and unpacks)."""
    digest = hashlib.sha256(str(Path(folder).absolute()).encode()).hexdigest()[:12]
    return cache_dir() / "packed-results" / digest


def cache_dir() -> Path:
    return Path(os.environ.get("ANISOTROPY_CACHE") or _default(".cache"))


def checkpoints_dir() -> Path:
    """The root of the self-trained suites and their resumable snapshots: ``<results folder>/checkpoints`` when the
    results store was moved to a folder of its own (``ANISOTROPY_RESULTS``, a chapter's ``results_dir``: Google Drive
    on Colab), so that they outlive the runtime as the results do; else ``cache_dir()/checkpoints`` (the default store,
    or a URL store, which cannot hold a ``save_pretrained`` folder). They stay unpacked in a ``packed`` results folder:
    a few large files per step, which Drive handles, unlike a folder of many small results."""
    given = os.environ.get("ANISOTROPY_RESULTS") or ""
    if given and ("://" not in given or given.startswith("file://")):
        folder = results_dir()
        if folder.resolve() != _default("results").resolve():
            return folder / "checkpoints"
    return cache_dir() / "checkpoints"


def atomic_folder(folder: Path, write) -> bool:
    """Write a folder under a temporary name and rename it into place; False if another writer got there first."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
        os.replace(tmp, folder)
        return True
    except OSError:
        if folder.is_dir():  # a concurrent run of the same recipe finished it: keep theirs
            return False
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_folder_once(target: Path, write, marker: str = "conversion.json") -> Path:
    """``write(tmp_folder)`` then rename it to ``target``, unless ``target / marker`` shows it complete already (a
    crash leaves no half-written cache entry). Two processes that want the same folder (a conversion two chapters of a
    parallel build need) take turns on a lock file: the second finds the first one's folder complete, and nobody
    removes a folder another process is reading. (``atomic_folder``: a folder whose first complete copy wins.)"""
    if (target / marker).is_file():
        return target
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    # An OS lock (flock on POSIX, LockFileEx on Windows): the second process waits here; released on leaving the
    # block, or when its holder dies.
    with FileLock(target.parent / f".{target.name}.lock"):
        if (target / marker).is_file():
            return target
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
        try:
            write(tmp)
            if target.exists():  # an incomplete earlier attempt
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
