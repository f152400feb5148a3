"""The one place that talks to the Hugging Face Hub: offline detection, loading from the local cache or the Hub with
one-line failures, a repository's revisions and the training step a revision names (``step``, the one parser of
checkpoint names), the blobs a cached snapshot's weights are (``weight_blobs``), and clean-up of checkpoints
downloaded only to be measured.

``models.registry`` (models) and ``data`` (datasets) call it; it imports neither. The endpoint is ``HF_ENDPOINT`` (the real
Hub, a mirror, or the tests' local stand-in), the cache ``HF_HOME`` / ``HF_HUB_CACHE``, as for every Hugging Face
library.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import socket
from functools import lru_cache
from pathlib import Path

KEEP_ENV = "ANISOTROPY_KEEP_CHECKPOINTS"  # "1": keep intermediate checkpoints in the cache after measuring them


class Unavailable(RuntimeError):
    """A model or dataset that cannot be had here (offline and not cached, missing on the Hub, remote code...),
    with one line saying how to fix it."""


class AccessError(Unavailable):
    """A gated repository without an accepted licence or a token."""


class Offline(Unavailable):
    """The Hub cannot be reached (or offline mode is on) and the thing is not cached: nothing else will load either,
    so a chapter stops at the first one instead of skipping them one by one."""


class MissingRevision(Unavailable):
    """A revision the model does not have (named with the nearest that exist)."""


class NoSpace(RuntimeError):
    """The disk filled while a checkpoint was downloaded or a result written: what was in progress is discarded."""


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# hf-xet (Rust) raises RuntimeError with no errno: its message carries Rust's rendering of the I/O error, either
# "<strerror> (os error 28)" or, for an error built from its kind alone, "no storage space" / "quota exceeded" /
# "file too large" (std::io::ErrorKind's descriptions, read from the hf-xet 1.8.0 binary).
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_XET_KINDS = {"no storage space": errno.ENOSPC, "quota exceeded": errno.EDQUOT, "file too large": errno.EFBIG}


def _xet_no_space(exc: BaseException) -> OSError | None:
    """The disk-full error in a message without errno (hf-xet), as an ``OSError`` with that errno."""
    message = str(exc)
    codes = [int(c) for c in _OS_ERROR.findall(message)]
    codes += [code for words, code in _XET_KINDS.items() if words in message.lower()]
    code = next((c for c in codes if c in _NO_SPACE), None)
    return None if code is None else OSError(code, os.strerror(code))


def no_space(exc: BaseException) -> OSError | None:
    """The disk-full ``OSError`` (no space, quota, file size limit) in ``exc``'s cause chain, if any; also when the
    chain holds only hf-xet's ``RuntimeError`` saying so (an ``OSError`` with the errno it names is returned)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return exc
        if not isinstance(exc, OSError) or exc.errno is None:
            found = _xet_no_space(exc)
            if found is not None:
                return found
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def cache_folder() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def xet_cache_folder() -> Path:
    """Where hf-xet keeps its caches (``HF_XET_CACHE``, by default ``HF_HOME/xet``)."""
    from huggingface_hub import constants

    return Path(constants.HF_XET_CACHE)


def clear_xet_chunks() -> int:
    """Delete hf-xet's chunk caches (``<HF_XET_CACHE>/<endpoint>/chunk-cache``): pieces of checkpoints already
    downloaded, kept for later downloads (up to 10 GB by default), which a series of checkpoints measured once never
    needs again. Returns the bytes freed."""
    freed = 0
    folder = xet_cache_folder()
    for chunks in (list(folder.glob("*/chunk-cache")) if folder.is_dir() else []):
        freed += sum(f.stat().st_size for f in chunks.rglob("*") if f.is_file())
        shutil.rmtree(chunks, ignore_errors=True)
    return freed


def _discard_partial(repo: str, repo_type: str = "model") -> None:
    """Delete the unfinished downloads (``*.incomplete`` blobs) of a repository from the cache, and hf-xet's chunk
    cache (a disk that filled under Xet holds its chunks there, not in ``*.incomplete`` files)."""
    folder = cache_folder() / f"{repo_type}s--{repo.replace('/', '--')}" / "blobs"
    for partial in folder.glob("*.incomplete"):
        partial.unlink(missing_ok=True)
    clear_xet_chunks()


def no_space_error(what: str, exc: OSError, folder: Path) -> NoSpace:
    """The one line for a full disk: what was in progress, how much is free where, what to do."""
    try:
        free = shutil.disk_usage(folder if folder.exists() else folder.parent).free / 2**30
        room = f"{free:.1f} GiB free on {folder}"
    except OSError:
        room = f"no room on {folder}"
    return NoSpace(f"the disk filled while {what} ({exc.strerror or exc}); {room}: the unfinished part was "
                   f"discarded and what was measured before is kept. Free space (or point HF_HOME and "
                   f"ANISOTROPY_RESULTS at a larger disk) and run again: it continues where it stopped")


def offline() -> bool:
    """True when the user asked for offline mode (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    flags = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(f, "").upper() in ("1", "ON", "YES", "TRUE") for f in flags)


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


_REACHED: set[str] = set()  # endpoints this process has connected to


def reachable(timeout: float = 3.0) -> bool:
    """One TCP connection attempt to the endpoint (at most ``timeout`` seconds). A success is remembered per endpoint
    for the process; a failure is not, so a kernel that started while the network was down sees it come back."""
    from urllib.parse import urlparse

    url = endpoint()
    if url in _REACHED:
        return True
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            _REACHED.add(url)
            return True
    except OSError:
        return False


def _why_offline() -> str:
    return "offline (HF_HUB_OFFLINE)" if offline() else f"unreachable ({endpoint()})"


def _cause(exc: BaseException, kind: type) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` in its cause/context chain (transformers wraps the Hub's
    errors in ``OSError``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


# A checkpoint's name: "step1000" (Pythia's branches), "global_step1000" (Bloom's), "step_20k" (MultiBERTs' repositories,
# "k" = thousands), "step-1000" (a self-trained checkpoint's folder, training.checkpoints).
_STEP = re.compile(r"(?:global_)?step[_-]?(\d+)(k?)")


def step(revision: str | None, required: bool = False) -> int | None:
    """The training step a checkpoint's revision name stands for: "step1000" -> 1000, "global_step1000" -> 1000,
    "step_20k" -> 20000, "step-1000" -> 1000. None for a name that names no step ("main", a commit hash, a tag, None:
    the final model); with ``required=True`` such a name is a ``ValueError`` instead (a checkpoint series, whose
    every member must have a step). The whole name must match: "v2" or a hash ending in digits names no step."""
    match = _STEP.fullmatch(revision or "")
    if match is None:
        if required:
            raise ValueError(f"cannot read a training step from revision {revision!r}")
        return None
    return int(match.group(1)) * (1000 if match.group(2) else 1)


def nearest(revision: str, available, n: int = 2) -> list[str]:
    """The names of ``available`` around ``revision`` by training step: the closest before and the closest after
    (then the next closest, up to ``n``), in step order; by spelling when the names carry no step."""
    available = list(dict.fromkeys(available))
    target = step(revision)
    if target is None or not any(step(a) is not None for a in available):
        import difflib

        return difflib.get_close_matches(revision, available, n=n, cutoff=0)
    numbered = sorted((a for a in available if step(a) is not None), key=step)
    below = [a for a in numbered if step(a) < target][-1:]
    above = [a for a in numbered if step(a) > target][:1]
    rest = sorted((a for a in numbered if a not in below + above), key=lambda a: abs(step(a) - target))
    return sorted((below + above + rest)[:n], key=step)


def refs(repo: str, repo_type: str = "model") -> list[str]:
    """The branches and tags of a Hub repository (empty when they cannot be listed)."""
    from huggingface_hub import HfApi

    try:
        found = HfApi().list_repo_refs(repo, repo_type=repo_type)
    except Exception:  # noqa: BLE001 - only a hint for a message
        return []
    return [r.name for r in (*found.branches, *found.tags)]


def load(load_fn, repo: str, revision: str | None = None, gated: bool = False, candidates=None, **kwargs):
    """``load_fn(repo, revision=..., **kwargs)`` from the local cache, else from the Hub; every failure is one
    ``Unavailable`` line: offline or unreachable and not cached, gated, a missing revision (naming the nearest that
    exist: ``candidates``, else the repository's refs), a missing repository, the Hub's rate limit (HTTP 429), and
    any other error while this one repository loads (its type and first line), so that a chapter skips the model
    rather than stopping. A full disk is ``NoSpace`` (the partial download discarded)."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                         RevisionNotFoundError)

    what = repo + (f"@{revision}" if revision else "")
    try:
        return load_fn(repo, revision=revision, local_files_only=True, **kwargs)
    except Exception:  # noqa: BLE001 - not cached, or cached incompletely (a model without its tokenizer makes
        pass  # AutoTokenizer raise TypeError or AttributeError, not OSError): ask the Hub below
    if offline() or not reachable():
        raise Offline(
            f"{what} is not in the local Hugging Face cache and the Hub is {_why_offline()}: connect to the network "
            f"(or set HF_ENDPOINT to a mirror), cache it on a machine with network (huggingface-cli download "
            f"{repo}), or use a profile that runs offline (local)") from None
    if gated:
        from huggingface_hub import get_token

        if get_token() is None:
            raise AccessError(
                f"{repo} is gated: accept its licence at {endpoint()}/{repo} and log in "
                f"(huggingface-cli login, or set HF_TOKEN)") from None
    try:
        return load_fn(repo, revision=revision, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the library wraps the Hub's answer; read it from the chain
        full = no_space(exc)
        if full is not None:
            _discard_partial(repo)
            raise no_space_error(f"downloading {what}", full, cache_folder()) from None
        if _cause(exc, GatedRepoError) is not None:
            raise AccessError(f"{repo} is gated and this token has no access: accept its licence at "
                              f"{endpoint()}/{repo}, then set HF_TOKEN to a token of that account") from None
        if _cause(exc, RevisionNotFoundError) is not None:
            close = nearest(revision or "", candidates if candidates is not None else refs(repo))
            hint = f"; the nearest that exist: {', '.join(close)}" if close else ""
            raise MissingRevision(f"{repo} has no revision {revision!r} on the Hub{hint}") from None
        if _cause(exc, RepositoryNotFoundError) is not None:
            raise Unavailable(f"{repo} does not exist on the Hub (or is private)") from None
        http = _cause(exc, HfHubHTTPError)
        if http is not None and getattr(http.response, "status_code", None) == 429:
            raise Unavailable(f"{what}: the Hub refuses more requests for now (HTTP 429, rate limit): run again in a "
                              f"few minutes (what was measured is kept), or log in (HF_TOKEN) for a higher "
                              f"limit") from None
        # Anything else the repository's content causes (a missing tokenizer, a model_type this transformers does
        # not know, remote code that fails to import...) concerns this model only: one line, so the chapter skips it.
        raise Unavailable(f"{what} could not be loaded: {one_line(exc)}") from None


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its type and the first non-empty line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def is_cached(repo: str, revision: str | None = None, repo_type: str = "model") -> bool:
    """Whether ``repo@revision`` already has its ``config.json`` in the local cache (models)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "config.json", revision=revision or "main", repo_type=repo_type)
    return isinstance(found, str)


def cached_snapshot(repo: str, revision: str | None = None, repo_type: str = "model") -> Path | None:
    """The folder of ``repo@revision``'s snapshot in the local cache (``.../snapshots/<commit>``, whose links name the
    blobs: ``weight_blobs``), or None where its ``config.json`` is not cached."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "config.json", revision=revision or "main", repo_type=repo_type)
    return Path(found).parent if isinstance(found, str) else None


def delete(repo: str, revision: str | None = None, repo_type: str = "model") -> int:
    """Remove ``repo@revision`` from the local cache (files no other cached revision shares); returns bytes freed."""
    from huggingface_hub import scan_cache_dir

    try:
        cache = scan_cache_dir()
    except Exception:  # noqa: BLE001 - no cache folder yet: nothing to delete
        return 0
    wanted = revision or "main"
    hashes = [rev.commit_hash for info in cache.repos if info.repo_id == repo and info.repo_type == repo_type
              for rev in info.revisions if wanted in rev.refs or rev.commit_hash == wanted]
    if not hashes:
        return 0
    strategy = cache.delete_revisions(*hashes)
    strategy.execute()
    return int(strategy.expected_freed_size)


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf")  # what a snapshot's weights are stored as


def weight_blobs(snapshot: str | Path) -> dict[str, str]:
    """``{file name: blob}`` of the weight files (``WEIGHT_FILES``) of a snapshot of the local cache (the folder
    ``snapshot_download`` returns, ``.../snapshots/<commit>``): the blob is the name of the file under ``blobs/`` that
    the snapshot's link points at, which for a weights file (Git LFS or Xet) is the SHA-256 of its content. A file
    that is no link (a cache written without symlinks) is hashed here: the same SHA-256."""
    out = {}
    for file in sorted({f for pattern in WEIGHT_FILES for f in Path(snapshot).glob(pattern)}):
        if file.is_symlink():
            out[file.name] = Path(os.readlink(file)).name
            continue
        digest = hashlib.sha256()
        with open(file, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        out[file.name] = digest.hexdigest()
    return out


_FETCHED: set[tuple[str, str | None, str]] = set()  # what this process downloaded: (repo, revision, repo type)


def fetching(repo: str, revision: str | None = None, repo_type: str = "model") -> None:
    """Note, before loading ``repo@revision``, whether this process is about to download it (not in the cache)."""
    if not is_cached(repo, revision, repo_type):
        _FETCHED.add((repo, revision, repo_type))


def release(repo: str, revision: str | None = None, repo_type: str = "model") -> int:
    """Delete ``repo@revision`` from the cache if this process downloaded it (``fetching``) and the user does not
    keep checkpoints (``ANISOTROPY_KEEP_CHECKPOINTS``); what the user had cached before is never touched. hf-xet's
    chunk cache goes with it (``clear_xet_chunks``: it holds the same checkpoint's pieces again). Returns the bytes
    freed."""
    if keep_checkpoints() or (repo, revision, repo_type) not in _FETCHED:
        return 0
    _FETCHED.discard((repo, revision, repo_type))
    return delete(repo, revision, repo_type) + clear_xet_chunks()


def keep_checkpoints() -> bool:
    """Whether intermediate checkpoints stay in the cache after they are measured (``ANISOTROPY_KEEP_CHECKPOINTS``)."""
    return os.environ.get(KEEP_ENV, "").upper() in ("1", "ON", "YES", "TRUE")


def dataset(repo: str, what: str, config: str | None = None, split: str | None = None, **kwargs):
    """``datasets.load_dataset(repo, config, split=split, **kwargs)`` from the cache or the Hub; every failure is one
    ``Unavailable`` line."""
    try:
        import datasets
    except Exception as err:  # a broken install (e.g. pyarrow built for another numpy) must not be a traceback wall
        raise Unavailable(f"{what}: the datasets library failed to import ({err})") from None

    dataset_offline = offline() or os.environ.get("HF_DATASETS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") \
        or not reachable()
    saved = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = saved or dataset_offline  # read the cache only: no retries against a dead Hub
    try:
        return datasets.load_dataset(repo, config, split=split, **kwargs)
    except Exception as err:  # noqa: BLE001 - one line for the user, whatever the library raised
        full = no_space(err)
        if full is not None:
            raise no_space_error(f"downloading {what}", full, cache_folder()) from None
        if dataset_offline:
            raise Offline(
                f"{what} ({repo}) is not in the local cache and the Hub is {_why_offline()}: connect to the network "
                f"(or set HF_ENDPOINT to a mirror), or use a profile that runs offline (local)") from None
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise Unavailable(f"{what} ({repo}) could not be loaded: {first}") from None
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


# ---- what the real Hub holds: the manifest (issue 28) -------------------------------------------------------------

# What the Hub holds for every repository and revision the `paper` profile uses, read from public pages (never from the
# registry or the live Hub); what nobody could read says `unverified`. The tests' Hub stand-in serves it.
MANIFEST = Path(__file__).resolve().with_name("hub_manifest.yml")
UNVERIFIED = "unverified"
# The facts a load relies on, as the manifest's keys, with the words a page uses for them ("recorded": the
# repository or revision is not in the manifest at all).
REPO_FACTS = {"recorded": "anything (not in the manifest)", "exists": "existence", "model_type": "model_type"}
REVISION_FACTS = {"recorded": "anything (not in the manifest)", "exists": "existence", "files": "file list",
                  "weights": "weight files", "tokenizer": "tokenizer"}


@lru_cache(maxsize=1)
def manifest() -> dict:
    """The manifest (``hub_manifest.yml``, shipped with the package), read once per process."""
    import yaml

    return yaml.safe_load(MANIFEST.read_text())


def unverified(requests, recorded: dict | None = None) -> dict[str, dict]:
    """The Hub facts that loading ``requests`` ((repository, revision or None) pairs, as ``pages.budget.Plan.requests``)
    relies on and ``recorded`` (default: the manifest) leaves unverified: per repository, ``{"repo": [facts],
    "revisions": {revision: [facts]}}`` with the keys of ``REPO_FACTS`` / ``REVISION_FACTS`` (a revision's full file
    list counts as unverified where only part of it was read), in the order first requested; repositories with none
    are left out. Empty when every fact is verified."""
    repos = (recorded or manifest())["repos"]
    out: dict[str, dict] = {}
    for repo, revision in requests:
        entry = repos.get(repo)
        found = out.setdefault(repo, {"repo": [], "revisions": {}})
        if entry is None:
            found["repo"] = ["recorded"]
            continue
        found["repo"] = [k for k in ("exists", "model_type") if entry.get(k, UNVERIFIED) == UNVERIFIED]
        rev = (entry.get("revisions") or {}).get(revision or "main")
        if rev is None:
            facts = ["recorded"]
        else:
            facts = [k for k in ("exists", "files", "weights", "tokenizer") if rev.get(k, UNVERIFIED) == UNVERIFIED
                     or (k == "files" and rev.get("files_complete", True) is False)]
        if facts:
            found["revisions"][revision or "main"] = facts
    return {repo: f for repo, f in out.items() if f["repo"] or f["revisions"]}


def unverified_text(found: dict[str, dict]) -> str:
    """``unverified``'s answer in words, one clause per group of repositories that lack the same facts, e.g. "the
    existence and file list of bigscience/bloom-3b-intermediate at revisions global_step1000, global_step10000";
    empty when there is none."""
    def the(keys, names, of):
        if tuple(keys) == ("recorded",):
            return f"anything about {of} (not in the manifest)"
        listed = [names[k] for k in keys]
        return "the " + (listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]) + f" of {of}"

    groups: dict[tuple, list[str]] = {}
    for repo, f in found.items():
        by_facts: dict[tuple, list[str]] = {}
        for rev, facts in f["revisions"].items():
            by_facts.setdefault(tuple(facts), []).append(rev)
        groups.setdefault((tuple(f["repo"]), tuple((tuple(r), k) for k, r in by_facts.items())), []).append(repo)
    clauses = []
    for (repo_facts, revisions), names in groups.items():
        subject = ", ".join(names)
        parts = [the(repo_facts, REPO_FACTS, subject)] if repo_facts else []
        for revs, facts in revisions:
            where = f"{'revision' if len(revs) == 1 else 'revisions'} {', '.join(revs)}"
            own = "its" if len(names) == 1 else "their"
            parts.append(the(facts, REVISION_FACTS, f"{own} {where}" if parts else f"{subject} at {where}"))
        clauses.append(", and ".join(parts))
    return "; ".join(clauses)
