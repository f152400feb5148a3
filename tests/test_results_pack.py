"""A packed results folder (Google Drive on Colab, or ``ANISOTROPY_PACK=1``): one file per chapter there, results
read back by a new runtime without computing them again, and a pack cut mid-write leaves the previous one whole.

A "runtime" is a working folder on the local disk (``ANISOTROPY_CACHE``); a "drive" is a temporary folder."""

from __future__ import annotations

import json
import subprocess
import tarfile
import types
from pathlib import Path

import pandas as pd
import pytest

from conftest import PYTHON

LIB = Path(__file__).resolve().parents[1] / "lib"
# One computation for every result, keyed by ``i``: compiled from this text in the test and in a second process, so
# both key it alike (the code enters the key).
COMPUTATION = 'lambda: pd.DataFrame({"i": [i] * 3, "v": [i / 7, i * i, -i]})'
N = 5


def expected(i: int) -> dict:
    return {"i": [i] * 3, "v": [i / 7, float(i * i), float(-i)]}


def store_results(store, chapter: str, n: int, calls: list) -> list[pd.DataFrame]:
    counted = types.SimpleNamespace(DataFrame=lambda data: calls.append(1) or pd.DataFrame(data))
    return [store.cached(chapter, {"i": i}, eval(COMPUTATION, {"pd": counted, "i": i})) for i in range(n)]


@pytest.fixture
def drive(tmp_path, monkeypatch):
    """A packed results folder, and a first runtime working on it."""
    monkeypatch.setenv("ANISOTROPY_PACK", "1")
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "runtime-1"))
    monkeypatch.delenv("ANISOTROPY_RECOMPUTE", raising=False)
    return tmp_path / "drive"


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_which_folders_are_packed(monkeypatch, tmp_path):
    from anisotropy import paths

    monkeypatch.delenv("ANISOTROPY_PACK", raising=False)
    assert paths.packed("/content/drive/MyDrive/anisotropy") and paths.packed("/content/drive")
    assert not paths.packed(tmp_path) and not paths.packed("/content/drivex/anisotropy")
    monkeypatch.setenv("ANISOTROPY_PACK", "1")
    assert paths.packed(tmp_path)
    monkeypatch.setenv("ANISOTROPY_PACK", "0")
    assert not paths.packed("/content/drive/MyDrive/anisotropy")


def test_a_chapter_leaves_one_file_per_chapter_on_the_drive(drive):
    from anisotropy import paths, results

    store, calls = results.Store(drive), []
    frames = store_results(store, "chapter_a", N, calls) + store_results(store, "chapter_b", 2, calls)
    assert calls == [1] * (N + 2)
    for i, frame in enumerate(frames[:N]):
        assert frame.to_dict("list") == expected(i)
    assert files_under(drive) == {"packs/chapter_a.tar", "packs/chapter_b.tar"}
    with tarfile.open(drive / "packs" / "chapter_a.tar") as tar:
        names = tar.getnames()
    hashes = sorted(results.key_hash(store.code_key({"i": i}, eval(COMPUTATION, {"pd": pd, "i": i}))[0])
                    for i in range(N))
    # every result whole (Parquet and sidecar), the sidecars after all the Parquet files
    assert names == [f"{h}.parquet" for h in hashes] + [f"{h}.json" for h in hashes]
    assert store.folder == paths.working_dir(drive) and not store.folder.is_relative_to(drive)


RUNTIME = r'''
import json, sys, types
import pandas as pd
from anisotropy import results

drive, computation, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = []
counted = types.SimpleNamespace(DataFrame=lambda data: calls.append(1) or pd.DataFrame(data))
store = results.Store(drive)
frames = [store.cached("chapter_a", {"i": i}, eval(computation, {"pd": counted, "i": i})) for i in range(n)]
print(json.dumps({"calls": len(calls), "frames": [f.to_dict("list") for f in frames], "folder": str(store.folder)}))
'''


def test_a_new_runtime_reads_every_result_from_the_pack(drive, tmp_path):
    from anisotropy import results

    store_results(results.Store(drive), "chapter_a", N, [])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(LIB), "ANISOTROPY_PACK": "1",
           "ANISOTROPY_CACHE": str(tmp_path / "runtime-2"), "HOME": str(tmp_path)}
    done = subprocess.run([PYTHON, "-c", RUNTIME, str(drive), COMPUTATION, str(N)], env=env, capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["calls"] == 0, "a result the pack holds was computed again"
    assert out["frames"] == [expected(i) for i in range(N)]
    assert Path(out["folder"]).is_relative_to(tmp_path / "runtime-2")
    assert files_under(drive) == {"packs/chapter_a.tar"}


def test_a_chapter_start_unpacks_the_drive(drive, tmp_path, monkeypatch):
    """``profiles.apply`` with a ``results_dir`` (a chapter's first cell) unpacks before anything is read."""
    from anisotropy import paths, profiles, results

    store_results(results.Store(drive), "chapter_a", N, [])
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "runtime-2"))
    monkeypatch.setenv("ANISOTROPY_RESULTS", str(tmp_path / "default"))
    working = paths.working_dir(drive)
    assert not working.exists()
    profiles.apply("p1_s3_token_level", {"profile": "local", "results_dir": str(drive)})
    assert len(list((working / "chapter_a").glob("*.parquet"))) == N
    assert len(list((working / "chapter_a").glob("*.json"))) == N


def test_a_pack_cut_mid_write_leaves_the_previous_one_whole(drive, tmp_path, monkeypatch):
    from anisotropy import results

    store_results(results.Store(drive), "chapter_a", N, [])
    pack = drive / "packs" / "chapter_a.tar"
    before = pack.read_bytes()

    # A write that dies part-way (the disk full, say): the pack is as it was, no temporary file stays.
    def cut(self, name, arcname=None, **kwargs):
        raise OSError("cut mid-write")

    with monkeypatch.context() as patch:
        patch.setattr(tarfile.TarFile, "add", cut)
        with pytest.raises(OSError, match="cut mid-write"):
            store_results(results.Store(drive), "chapter_a", N + 1, [])
    assert pack.read_bytes() == before and files_under(drive) == {"packs/chapter_a.tar"}

    # A runtime killed while writing the pack leaves its temporary file (half a pack): a new runtime ignores it.
    (drive / "packs" / ".chapter_a.tar.k1ll3d.tmp").write_bytes(before[: len(before) // 2])
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "runtime-2"))
    calls = []
    frames = store_results(results.Store(drive), "chapter_a", N + 1, calls)
    assert calls == [1], "only the result the cut write had not packed is computed"
    assert [f.to_dict("list") for f in frames] == [expected(i) for i in range(N + 1)]
    with tarfile.open(pack) as tar:
        assert len(tar.getnames()) == 2 * (N + 1)


def test_a_pack_written_by_another_runtime_is_kept(drive, tmp_path, monkeypatch):
    """Two runtimes on one drive (two Colab tabs): each rewrites a chapter's pack with the other's results in it."""
    from anisotropy import results

    first = results.Store(drive)
    store_results(first, "chapter_a", 2, [])
    monkeypatch.setenv("ANISOTROPY_CACHE", str(tmp_path / "runtime-2"))
    second = results.Store(drive)
    counted = types.SimpleNamespace(DataFrame=pd.DataFrame)
    second.cached("chapter_a", {"i": 7}, eval(COMPUTATION, {"pd": counted, "i": 7}))
    first.cached("chapter_a", {"i": 8}, eval(COMPUTATION, {"pd": counted, "i": 8}))  # after the second wrote
    with tarfile.open(drive / "packs" / "chapter_a.tar") as tar:
        assert len([n for n in tar.getnames() if n.endswith(".json")]) == 4


def test_removing_a_result_rewrites_its_pack(drive):
    from anisotropy import results

    store = results.Store(drive)
    store_results(store, "chapter_a", 3, [])
    meta = store.glob("chapter_a", "*.json")[0]
    store.remove([meta, meta.with_suffix(".parquet")])
    with tarfile.open(drive / "packs" / "chapter_a.tar") as tar:
        assert sorted(tar.getnames()) == sorted(p.name for p in store.glob("chapter_a", "*")) and len(
            tar.getnames()) == 4
    store.remove(store.glob("chapter_a", "*"))
    assert files_under(drive) == set()


def test_an_unpacked_folder_is_as_before(tmp_path, monkeypatch):
    from anisotropy import results

    monkeypatch.delenv("ANISOTROPY_PACK", raising=False)
    store = results.Store(tmp_path / "results")
    store_results(store, "chapter_a", 2, [])
    assert store.packs is None and store.folder == tmp_path / "results"
    assert len(files_under(tmp_path / "results")) == 4
