"""hub: what a failure while one model loads becomes (issue 28, items 4, 8 and 9), without any Hub: ``load_fn`` stubs
raise what transformers, hf-xet and huggingface_hub raise, and the endpoint is a socket on 127.0.0.1."""

from __future__ import annotations

import errno
import socket

import pytest
import requests
from conftest import measure_beside_tiny_bert
from huggingface_hub.errors import HfHubHTTPError

from anisotropy import hub
from anisotropy.models import registry

# The first lines of what transformers 4.57 raises for a legacy checkpoint, remote code written for another version,
# and a revision without tokenizer files (items 1 and 3 of issue 28).
UNKNOWN_TYPE = ValueError("The checkpoint you are trying to load has model type `character_bert` but Transformers "
                          "does not recognize this architecture. This could be because of an issue with the checkpoint, "
                          "or because your version of Transformers is out of date.\n\nYou can update Transformers with "
                          "the command `pip install --upgrade transformers`.")
REMOTE_IMPORT = ImportError("cannot import name 'add_start_docstrings_to_callable' from 'transformers.file_utils'")
NO_TOKENIZER = OSError("Can't load tokenizer for 'bigscience/bloom-560m-intermediate'. If you were trying to load it "
                       "from 'https://huggingface.co/models', make sure you don't have a local directory with the same "
                       "name.")


def _http(status: int) -> HfHubHTTPError:
    response = requests.Response()
    response.status_code = status
    return HfHubHTTPError(f"{status} Client Error: Too Many Requests for url: https://huggingface.co/x", response)


def _failing(exc: BaseException):
    """A load_fn that misses the cache (as a cold cache does), then raises ``exc`` when asked with the Hub."""
    def load_fn(repo, revision=None, local_files_only=False, **kwargs):
        if local_files_only:
            raise OSError("not cached")
        raise exc
    return load_fn


@pytest.fixture
def online(monkeypatch):
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(hub, "offline", lambda: False)


@pytest.mark.parametrize("exc, expected", [
    (UNKNOWN_TYPE, "helboukkouri/character-bert could not be loaded: ValueError: The checkpoint you are trying to load "
                   "has model type `character_bert` but Transformers does not recognize this architecture. This could "
                   "be because of an issue with the checkpoint, or because your version of Transformers is out of "
                   "date."),
    (REMOTE_IMPORT, "helboukkouri/character-bert could not be loaded: ImportError: cannot import name "
                    "'add_start_docstrings_to_callable' from 'transformers.file_utils'"),
    (NO_TOKENIZER, "helboukkouri/character-bert could not be loaded: OSError: Can't load tokenizer for "
                   "'bigscience/bloom-560m-intermediate'. If you were trying to load it from "
                   "'https://huggingface.co/models', make sure you don't have a local directory with the same name."),
    (_http(429),
     "helboukkouri/character-bert: the Hub refuses more requests for now (HTTP 429, rate limit): run again in a few "
     "minutes (what was measured is kept), or log in (HF_TOKEN) for a higher limit"),
])
def test_any_error_while_one_model_loads_is_one_unavailable_line(exc, expected, online):
    with pytest.raises(hub.Unavailable) as err:
        hub.load(_failing(exc), "helboukkouri/character-bert")
    assert str(err.value) == expected


def test_rate_limit_wrapped_by_transformers_is_read_from_the_chain(online):
    try:
        raise _http(429)
    except HfHubHTTPError as inner:
        wrapped = OSError("There was a specific connection error when trying to load bert-base-uncased")
        wrapped.__cause__ = inner
    with pytest.raises(hub.Unavailable, match=r"^bert-base-uncased@main: the Hub refuses more requests for now "
                                              r"\(HTTP 429, rate limit\)"):
        hub.load(_failing(wrapped), "bert-base-uncased", "main")


def test_chapter_skips_the_model_that_failed_and_measures_the_rest(online, monkeypatch, tmp_path):
    """A model whose loading raises something that is not the Hub's (here an unknown model_type) is one line in the
    skipped list; the chapter goes on with the others."""
    _, frame, skipped = measure_beside_tiny_bert(
        monkeypatch, tmp_path / "r", lambda: hub.load(_failing(UNKNOWN_TYPE), registry.spec("character-bert").hub_id))
    assert set(frame["model"]) == {"bert-base-uncased"}
    assert [(s.ref.name, s.reason) for s in skipped] == [(
        "character-bert", "helboukkouri/character-bert could not be loaded: ValueError: The checkpoint you are trying "
        "to load has model type `character_bert` but Transformers does not recognize this architecture. This could be "
        "because of an issue with the checkpoint, or because your version of Transformers is out of date.")]


# ---- item 8: a full disk under Xet ----------------------------------------------------------------------------------

# What hf-xet 1.8.0 raises: a RuntimeError (no errno) whose message ends in Rust's rendering of the I/O error.
XET_FULL = RuntimeError("Data processing error: I/O error: No space left on device (os error 28)")


@pytest.mark.parametrize("message, code", [
    ("Data processing error: I/O error: No space left on device (os error 28)", errno.ENOSPC),
    ("Data processing error: I/O error: Disk quota exceeded (os error 122)", errno.EDQUOT),
    ("Data processing error: CacheError: no storage space", errno.ENOSPC),
    ("Data processing error: I/O error: file too large", errno.EFBIG),
])
def test_no_space_recognises_xets_runtime_error(message, code):
    try:
        try:
            raise RuntimeError(message)
        except RuntimeError as inner:
            raise OSError("wrapped by the caller") from inner
    except OSError as outer:
        found = hub.no_space(outer)
    assert found is not None and found.errno == code


def test_no_space_ignores_other_runtime_errors():
    assert hub.no_space(RuntimeError("Data processing error: I/O error: Connection reset by peer (os error 104)")) \
        is None
    assert hub.no_space(RuntimeError("checksum mismatch in chunk 28")) is None


def test_disk_full_under_xet_discards_partial_blobs_and_the_xet_chunk_cache(online, monkeypatch, tmp_path):
    cache, xet = tmp_path / "hub", tmp_path / "xet"
    monkeypatch.setattr(hub, "cache_folder", lambda: cache)
    monkeypatch.setattr(hub, "xet_cache_folder", lambda: xet)
    blobs = cache / "models--EleutherAI--pythia-2.8b" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "abc.incomplete").write_bytes(b"x" * 10)
    (blobs / "kept").write_bytes(b"y")
    chunks = xet / "https___cas-server.xethub.hf.co" / "chunk-cache" / "ab"
    chunks.mkdir(parents=True)
    (chunks / "chunk").write_bytes(b"z" * 1000)
    shards = xet / "https___cas-server.xethub.hf.co" / "shard-cache"
    shards.mkdir(parents=True)
    with pytest.raises(hub.NoSpace, match=r"^the disk filled while downloading EleutherAI/pythia-2.8b@step1000 "
                                          r"\(No space left on device\)"):
        hub.load(_failing(XET_FULL), "EleutherAI/pythia-2.8b", "step1000")
    assert sorted(p.name for p in blobs.iterdir()) == ["kept"]
    assert not (xet / "https___cas-server.xethub.hf.co" / "chunk-cache").exists() and shards.is_dir()


def test_release_clears_the_xet_chunk_cache_with_the_checkpoint(monkeypatch, tmp_path):
    xet = tmp_path / "xet"
    monkeypatch.setattr(hub, "xet_cache_folder", lambda: xet)
    monkeypatch.setattr(hub, "delete", lambda repo, revision=None, repo_type="model": 5000)
    monkeypatch.delenv(hub.KEEP_ENV, raising=False)
    (xet / "endpoint" / "chunk-cache").mkdir(parents=True)
    (xet / "endpoint" / "chunk-cache" / "c").write_bytes(b"z" * 1000)
    monkeypatch.setattr(hub, "_FETCHED", {("EleutherAI/pythia-2.8b", "step1000", "model")})
    assert hub.release("EleutherAI/pythia-2.8b", "step1000") == 6000
    assert not (xet / "endpoint" / "chunk-cache").exists()


# ---- item 9: "offline" is probed again ------------------------------------------------------------------------------


def test_reachable_probes_again_after_a_failure(monkeypatch):
    with socket.socket() as probe:  # a free port on loopback: nothing listens there yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert hub.reachable(timeout=1.0) is False
    with socket.socket() as server:  # the network comes back
        server.bind(("127.0.0.1", port))
        server.listen()
        assert hub.reachable(timeout=1.0) is True
    assert hub.reachable(timeout=1.0) is True  # a success is remembered
