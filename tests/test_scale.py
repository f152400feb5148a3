"""Scale (issue 18, and the parallel build): sweep points dispatched by Dask, a results store on an fsspec URL (a local
S3 server), a worker killed mid-point, bad scheduler and store inputs, the build's dependency order and its
interruption, and the executor's core sharing. Everything listens on 127.0.0.1; nothing sleeps: every wait polls a
condition with a bound.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from conftest import (CHAPTER_S, PYTHON, SMOKE_BUILD_S, book_env, communicate_guarded, copy_repo,
                      hang_guard, run_cli, run_guarded, wait_for)

CHAPTER = "appendix_b_isotropic"  # a smoke point is a few seconds, most of it the kernel's start
# Four points: twice the two workers, so that each worker runs points one after another and the table interleaves
# both workers' points (six cost two more kernel starts per sweep, ~50 CPU-s over the three sweeps; issue 29).
SEEDS = [0, 1, 2, 3]


def sweep_args(*extra: str) -> tuple[str, ...]:
    return ("sweep", CHAPTER, "--profile", "smoke", "-p", f"seed={','.join(map(str, SEEDS))}", *extra)


def comparable(table: pd.DataFrame) -> pd.DataFrame:
    """A sweep table without what is allowed to differ between runs: timings."""
    from anisotropy.book import runner

    timing = [c for c in table.columns if c == "seconds" or runner.WALL_CLOCK_GLUE.search(c)]
    return table.drop(columns=timing).reset_index(drop=True)


def progress_lines(stdout: str) -> list[str]:
    return re.findall(r"^\[\d+/\d+\] .*$", stdout, flags=re.M)


@pytest.fixture(scope="module")
def serial_table(tmp_path_factory) -> pd.DataFrame:
    """The sweep (SEEDS) on the serial path (one worker: the points one after another, in the CLI's process)."""
    repo = copy_repo(tmp_path_factory.mktemp("serial") / "repo")
    proc = run_cli(repo, *sweep_args("--workers", "1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Dask:" not in proc.stdout  # no cluster on the serial path
    table = pd.read_csv(repo / "book" / "sweeps" / CHAPTER / "sweep.csv")
    assert table["seed"].tolist() == SEEDS and table["error"].isna().all()
    assert table["worst_rel_error"].nunique() > 1, "the points must differ, or the comparison shows nothing"
    return table


# ---- sweeps on a LocalCluster -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_two_workers_give_the_serial_table(serial_table, tmp_path):
    repo = copy_repo(tmp_path / "repo")
    proc = run_cli(repo, *sweep_args("--workers", "2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    announced = [line for line in proc.stdout.splitlines() if line.startswith("Dask:")]
    assert len(announced) == 1 and re.fullmatch(
        r"Dask: a LocalCluster of 2 worker processes on 127\.0\.0\.1; dashboard http://127\.0\.0\.1:\d+/status",
        announced[0]), proc.stdout
    assert len(progress_lines(proc.stdout)) == len(SEEDS) and proc.stderr == ""
    table = pd.read_csv(repo / "book" / "sweeps" / CHAPTER / "sweep.csv")
    pd.testing.assert_frame_equal(comparable(table), comparable(serial_table))
    notebooks = sorted(p.name for p in (repo / "book" / "sweeps" / CHAPTER).glob("*.ipynb"))
    assert notebooks == [f"{CHAPTER}__seed={s}.ipynb" for s in SEEDS]


# ---- the results store on S3 (moto's server on 127.0.0.1) -------------------------------------------------------------

@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A local S3 server and the environment that points the store (s3fs) at it, with throw-away credentials."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    nowhere = tmp_path_factory.mktemp("aws") / "none"
    env = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(nowhere), AWS_SHARED_CREDENTIALS_FILE=str(nowhere),
               AWS_EC2_METADATA_DISABLED="true", FSSPEC_S3_ENDPOINT_URL=endpoint)
    import s3fs

    fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=endpoint, use_listings_cache=False,
                           skip_instance_cache=True)
    try:
        yield env, fs
    finally:
        server.stop()


def objects(fs, prefix: str) -> dict[str, str]:
    """Every object under ``prefix`` and its ETag (which changes whenever the object is written again)."""
    return {path: info["ETag"] for path, info in fs.find(prefix, detail=True).items()}


@pytest.mark.slow
def test_sweep_with_the_store_on_s3_lands_there_and_resumes(serial_table, s3, tmp_path):
    env, fs = s3
    fs.mkdir("sweeps-bucket")
    repo = copy_repo(tmp_path / "repo")
    env = book_env(repo, ANISOTROPY_RESULTS="s3://sweeps-bucket/book", **env)
    proc = run_cli(repo, *sweep_args("--workers", "2"), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stored = objects(fs, "sweeps-bucket/book")
    # the chapter's results, one per point, each Parquet with its sidecar; the notebooks and the table beside them
    sidecars = [p for p in stored if p.startswith(f"sweeps-bucket/book/{CHAPTER}/") and p.endswith(".json")]
    seeds = sorted(json.loads(fs.cat_file(p))["key"]["seed"] for p in sidecars)
    assert seeds == SEEDS
    assert all(p.removesuffix(".json") + ".parquet" in stored for p in sidecars)
    verdicts = [json.loads(fs.cat_file(p))["key"]["parameters"]["seed"] for p in stored
                if p.startswith("sweeps-bucket/book/claims/") and p.endswith(".json")]
    assert sorted(verdicts) == SEEDS
    sweeps = f"sweeps-bucket/book/_sweeps/{CHAPTER}"
    assert sorted(p.rsplit("/", 1)[-1] for p in stored if p.startswith(sweeps) and p.endswith(".ipynb")) == [
        f"{CHAPTER}__seed={s}.ipynb" for s in SEEDS]
    assert f"{sweeps}/sweep.csv" in stored
    assert not (repo / "results").exists(), "nothing of the store is written locally"
    assert sorted(p.name for p in (repo / "book" / "sweeps" / CHAPTER).iterdir()) == ["sweep.csv"]
    table = pd.read_csv(repo / "book" / "sweeps" / CHAPTER / "sweep.csv")
    pd.testing.assert_frame_equal(comparable(table), comparable(serial_table))

    # A second run recomputes nothing: every point reused, no object written again, no cluster started.
    again = run_cli(repo, *sweep_args("--workers", "2"), env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = progress_lines(again.stdout)
    assert len(lines) == len(SEEDS) and all(line.endswith(" reused") for line in lines), again.stdout
    assert "Dask:" not in again.stdout
    now = objects(fs, "sweeps-bucket/book")
    assert {k: now[k] for k in stored if k != f"{sweeps}/sweep.csv"} == {
        k: v for k, v in stored.items() if k != f"{sweeps}/sweep.csv"}
    assert set(now) == set(stored)
    pd.testing.assert_frame_equal(comparable(pd.read_csv(repo / "book" / "sweeps" / CHAPTER / "sweep.csv")),
                                  comparable(serial_table))


# ---- a worker killed mid-point --------------------------------------------------------------------------------------

def kernels_under(pid: int):
    """The notebook kernels among the descendants of ``pid`` (a Dask worker's kernel has the worker as parent)."""
    import psutil

    try:
        family = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for p in family:
        try:
            if "ipykernel_launcher" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.slow
def test_a_worker_killed_mid_point_loses_nothing(tmp_path):
    import psutil

    repo = copy_repo(tmp_path / "repo")
    seeds = [10, 11, 12, 13]
    proc = subprocess.Popen([PYTHON, "-m", "anisotropy", "sweep", CHAPTER, "--profile", "smoke", "-p",
                             f"seed={','.join(map(str, seeds))}", "--workers", "2"], cwd=repo, env=book_env(repo),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # a kernel whose parent is a worker process (not the CLI): a point is running on that worker
        kernel = wait_for(lambda: next((k for k in kernels_under(proc.pid) if k.ppid() != proc.pid), None), proc,
                          "a point running on a worker")
        worker = psutil.Process(kernel.ppid())
        worker.send_signal(signal.SIGKILL)
        out, err = communicate_guarded(proc, expected_s=CHAPTER_S, what="the sweep, after a worker was killed")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    table = pd.read_csv(repo / "book" / "sweeps" / CHAPTER / "sweep.csv")
    assert table["seed"].tolist() == seeds and table["error"].isna().all(), table
    store = repo / "results"
    keys = [json.loads(p.read_text())["key"] for p in (store / CHAPTER).glob("*.json")]
    assert sorted(k["seed"] for k in keys) == seeds, "every point stored exactly once"
    assert len(list((store / CHAPTER).glob("*.parquet"))) == len(seeds)
    verdicts = [json.loads(p.read_text())["key"]["parameters"]["seed"] for p in (store / "claims").glob("*.json")]
    assert sorted(verdicts) == seeds
    folder = repo / "book" / "sweeps" / CHAPTER
    assert sorted(p.name for p in folder.glob("*.ipynb")) == [f"{CHAPTER}__seed={s}.ipynb" for s in seeds]
    assert not list(folder.glob(".*.partial.ipynb")), "the retried point finished under its own name"
    # the killed worker's kernel noticed its parent was gone and left
    gone, alive = psutil.wait_procs([kernel], timeout=hang_guard(5))  # returns as soon as it is gone
    assert not alive


# ---- bad input: one line naming the thing, nothing written ----------------------------------------------------------

@pytest.fixture(scope="module")
def bad_repo(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("bad") / "repo")


def written(repo: Path) -> list[str]:
    """What a run left in the copy besides the repository's own files."""
    return sorted(p for p in ("results", "book/sweeps", "book/executed", "_build") if (repo / p).exists())


@pytest.mark.parametrize("case", ["unreachable-scheduler", "filesystem-not-installed", "unknown-protocol",
                                  "missing-bucket"])
def test_bad_scheduler_or_store_is_one_line_and_writes_nothing(case, bad_repo, s3):
    s3_env, fs = s3
    extra, env = (), book_env(bad_repo)
    if case == "unreachable-scheduler":
        extra, expected = ("--scheduler", "tcp://127.0.0.1:1"), r"No Dask scheduler answers at tcp://127\.0\.0\.1:1 "
    elif case == "filesystem-not-installed":
        env["ANISOTROPY_RESULTS"] = "gcs://some-bucket/book"
        expected = r"The results store gcs://some-bucket/book needs a filesystem that is not installed: .*gcsfs"
    elif case == "unknown-protocol":
        env["ANISOTROPY_RESULTS"] = "nosuchfs://bucket/book"
        expected = r"The results store nosuchfs://bucket/book: .*nosuchfs"
    else:
        env.update(s3_env, ANISOTROPY_RESULTS="s3://no-such-bucket/book")
        expected = r"The results store s3://no-such-bucket/book: the bucket 'no-such-bucket' does not exist"
    proc = run_cli(bad_repo, *sweep_args(*extra), env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and re.match(rf"error: {expected}", lines[0]), proc.stderr
    assert not progress_lines(proc.stdout)
    assert written(bad_repo) == []
    if case == "missing-bucket":
        assert not fs.exists("no-such-bucket")


# ---- the build: what each chapter runs after, and an interrupted parallel build ---------------------------------------

def test_every_chapter_states_what_it_runs_after_and_the_gatherers_run_last():
    from anisotropy.claims import ledger
    from anisotropy import profiles
    from anisotropy.book import runner

    from anisotropy.book import units

    after = runner.dependencies()
    order = runner.chapters()
    suites = set(profiles.chapter_parameters("local", "checkpoint_suites")["suites"])
    for name in order:
        meta = profiles.read_notebook(name).metadata
        assert isinstance(meta.get("anisotropy", {}).get("after"), list), f"{name}: no `anisotropy: {{after: [...]}}`"
        text = profiles.notebook_source(name).read_text()
        if "train_missing" in text or "qk.runs(" in text:  # it measures (or would train) the self-trained suites
            for profile in ("local", "smoke"):  # its front matter names every suite its parameters read
                params = profiles.chapter_parameters(profile, name)
                read = [*params.get("self_trained", []), *params.get("suites", []), *params.get("extensions", []),
                        params.get("encoder")]
                assert {s for s in read if s in suites} <= set(units.suites_read(name)), (name, profile)
        assert "checkpoint_suites" not in after[name], f"{name} waits for the suites' runs, not for their chapter"
    assert set(units.suites_read("checkpoint_suites")) == suites
    # the chapters whose stamp depends on what others stored (claims.stamp_inputs) run after all of those
    assert set(ledger.MEASURING_CHAPTERS) <= set(after["appendix_b_isotropic"])
    assert set(ledger._chapters()) - {"what_holds_up"} <= set(after["what_holds_up"])
    assert set(runner.dependencies()["p1_s3_drift"]) >= {"p1_s3_token_level", "p1_s3_character_level",
                                                          "p1_s3_modalities"}
    assert "p2_layer_profiles" in after["p2_two_measures"]


def test_what_a_chapter_runs_after_survives_the_round_trip_through_ipynb():
    import jupytext
    import nbformat

    from anisotropy import profiles
    from anisotropy.book import checkout

    for name in ("p1_s3_drift", "what_holds_up"):
        ipynb = nbformat.reads(checkout.paired_ipynb_text(name), as_version=4)
        back = jupytext.reads(jupytext.writes(ipynb, "md:myst"), "md:myst")
        assert back.metadata["anisotropy"] == profiles.read_notebook(name).metadata["anisotropy"]


@pytest.mark.slow
def test_an_interrupted_parallel_build_stops_its_kernels_and_resumes(tmp_path):
    import psutil

    repo = copy_repo(tmp_path / "repo")
    # Three chapters that depend on nothing: a short one beside a long one, then a third once a core is free. The
    # build starts the longest first (the committed reference build's CPU seconds): the third is the shortest of all,
    # and none reads a suite (which would add its training units).
    short, long, third = "profile_a_model", "beyond_sharp_without_anisotropy", "appendix_performance"
    (repo / "_toc.yml").write_text(f"format: jb-book\nroot: book/intro\nchapters:\n  - file: book/executed/{short}\n"
                                   f"  - file: book/executed/{long}\n  - file: book/executed/{third}\n")
    executed = repo / "book" / "executed"
    proc = subprocess.Popen([PYTHON, "-m", "anisotropy", "build", "--profile", "smoke", "--jobs", "2"], cwd=repo,
                            env=book_env(repo), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (executed / f"{short}.ipynb").is_file() and (executed / f".{long}.partial.ipynb").is_file(),
                 proc, "the short chapter finished while the long one runs")
        kernels = kernels_under(proc.pid)
        assert kernels, "a chapter is running"
        proc.send_signal(signal.SIGTERM)
        out, err = communicate_guarded(proc, expected_s=CHAPTER_S, what="the interrupted build's exit")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out + err
    assert err.strip().splitlines()[-1].startswith("interrupted (SIGTERM): finished notebooks and results are kept")
    assert re.search(rf"^\[1/3\] {short} .* \d+\.\d s \(\d+ s CPU\)$", out, flags=re.M), out
    gone, alive = psutil.wait_procs(kernels, timeout=hang_guard(5))  # returns as soon as all are gone
    assert not alive, "an interrupted build leaves no kernel running"
    assert not (executed / f"{long}.ipynb").exists(), "an interrupted chapter never carries a finished name"
    then = (executed / f"{short}.ipynb").stat().st_mtime_ns

    code = "import sys; from anisotropy.book import runner; sys.exit(any(o.error for o in runner.execute_all('smoke')))"
    done = run_guarded([PYTHON, "-c", code], expected_s=SMOKE_BUILD_S, what="the smoke chapters, resumed", cwd=repo,
                       env=book_env(repo), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = progress_lines(done.stdout)
    assert len(lines) == 3 and re.search(rf"\] {short} .* reused$", done.stdout, flags=re.M), done.stdout
    assert (executed / f"{short}.ipynb").stat().st_mtime_ns == then
    assert all((executed / f"{n}.ipynb").is_file() for n in (short, long, third))


# ---- the executor: dependency order, failures, shared cores --------------------------------------------------------

def test_a_cancelled_running_chapter_still_reports_its_own_failure_without_a_second_error():
    # An interrupted build cancels the futures still running; the chapter's thread then ends with the kernel's error.
    # That must not become concurrent.futures' InvalidStateError printed after the interruption's message.
    from anisotropy import executor

    started, release, errors = threading.Event(), threading.Event(), []
    before = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        def fn():
            started.set()
            release.wait(hang_guard(1))
            raise RuntimeError("kernel stopped")

        with executor._pool(False, 1) as submit:
            future = submit(fn)
            assert started.wait(hang_guard(1))
            assert not future.cancel(), "a running chapter's future cannot be cancelled"
            release.set()
            with pytest.raises(RuntimeError, match="kernel stopped"):
                future.result(timeout=hang_guard(1))
    finally:
        threading.excepthook = before
    assert errors == []


def test_schedule_runs_items_after_their_dependencies_and_blocks_what_follows_a_failure():
    from anisotropy import executor

    after = {"b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["x"], "f": ["e"], "x": []}
    started, lock = [], threading.Lock()
    both = threading.Barrier(2, timeout=hang_guard(1))  # b and c must be running at the same time (jobs=2)

    def fn(item, env):
        assert os.path.isdir(env[executor.SLOTS_ENV])
        with lock:
            started.append(item)
        if item in ("b", "c"):
            both.wait()
        return "failed" if item == "x" else "ok"

    seen = []
    results = executor.schedule(fn, ["a", "b", "c", "d", "x", "e", "f"], after, jobs=2,
                                failed=lambda r: r == "failed", on_done=lambda item, r: seen.append(item))
    assert started.index("a") < started.index("b") and started.index("a") < started.index("c")
    assert started.index("d") > max(started.index("b"), started.index("c"))
    assert results["d"] == "ok" and results["x"] == "failed"
    assert isinstance(results["e"], executor.Blocked) and results["e"].because == "x"
    assert isinstance(results["f"], executor.Blocked) and results["f"].because == "e"
    assert "e" not in started and "f" not in started and sorted(seen) == sorted(results)


def test_a_build_starts_the_longest_units_first_and_a_chapter_waits_only_for_the_run_it_reads(tmp_path):
    # A fake build on 2 cores: two training units (clm seed 0, the longest, and mlm seed 0), a chapter that measures
    # a real model and then the clm run, a chapter that needs no suite. The units start first, longest first; when
    # mlm ends, the clm chapter starts beside clm's unit, does its real-model part, and waits for clm's run only
    # (the run's lock), giving its core to the chapter that needs no suite; it then reads the run, trains nothing.
    from filelock import FileLock, Timeout

    from anisotropy import executor
    from anisotropy.book import runner

    guard = hang_guard(1)
    estimates = {"train:clm:0": 300.0, "train:mlm:0": 250.0, "reads_clm": 200.0, "no_suite": 100.0}
    order = runner.longest_first(["no_suite", "reads_clm", "train:mlm:0", "train:clm:0"], estimates)
    assert order == ["train:clm:0", "train:mlm:0", "reads_clm", "no_suite"]
    started = {item: threading.Event() for item in order}
    ended = {item: threading.Event() for item in order}
    go = {item: threading.Event() for item in ("train:clm:0", "train:mlm:0")}
    measured, waiting, trained, seen = threading.Event(), threading.Event(), [], {}
    runs = {item: tmp_path / f"{item.replace(':', '-')}.lock" for item in go}

    def fn(item, env):
        started[item].set()
        if item in go:  # a unit: trains its run, the run's lock held
            with FileLock(runs[item], thread_local=False):
                assert go[item].wait(guard)
                trained.append(item)
        elif item == "reads_clm":
            measured.set()  # its real-model part, done while the suites train
            lock = FileLock(runs["train:clm:0"], thread_local=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                waiting.set()  # before its core goes: what starts on it sees the wait
                with executor.waiting(env):
                    lock.acquire()
            seen[item] = list(trained)  # the run is trained when the chapter reads it: it trains nothing
            lock.release()
        else:  # needs no suite: what is running beside it
            seen[item] = (measured.is_set(), waiting.is_set(), list(trained))
        ended[item].set()
        return "ok"

    build = threading.Thread(target=lambda: seen.update(
        results=executor.schedule(fn, order, {}, jobs=2)), daemon=True)
    build.start()
    assert started["train:clm:0"].wait(guard) and started["train:mlm:0"].wait(guard)
    assert not started["reads_clm"].is_set() and not started["no_suite"].is_set()  # both cores train
    go["train:mlm:0"].set()  # mlm's run ends: the chapter reading clm starts, though clm still trains
    assert waiting.wait(guard) and not ended["train:clm:0"].is_set()
    assert ended["no_suite"].wait(guard)  # on the core the waiting chapter gave back, clm's unit still training
    assert seen["no_suite"] == (True, True, ["train:mlm:0"])
    go["train:clm:0"].set()
    build.join(guard)
    assert not build.is_alive()
    assert seen["reads_clm"] == ["train:mlm:0", "train:clm:0"]
    assert seen["results"] == {item: "ok" for item in order}


@pytest.mark.slow
def test_map_in_a_build_uses_the_free_cores_and_gives_them_back(tmp_path, monkeypatch):
    from anisotropy import executor

    slots = executor.Slots.create(2, tmp_path / "slots")
    monkeypatch.setenv(executor.SLOTS_ENV, str(slots.folder))
    monkeypatch.delenv(executor.SCHEDULER_ENV, raising=False)
    mine = slots.take()  # the build's slot for this "chapter"
    try:
        other = slots.take()  # another chapter holds the second core: everything runs here
        pid = lambda _: os.getpid()  # noqa: E731 - pickled by value for the workers
        assert executor.map(pid, range(4)) == [os.getpid()] * 4
        executor.Slots.release(other)  # the core is free: the map takes it, on worker processes
        pids = executor.map(pid, range(6))
        assert os.getpid() not in pids
        both = [slots.take(), slots.take()]  # given back: the build could take it again
        assert both[0] is not None and both[1] is None
        executor.Slots.release(both[0])
        # a sweep point's kernel: one process whatever the cores
        monkeypatch.setenv(executor.WORKERS_ENV, "1")
        assert executor.map(pid, range(3)) == [os.getpid()] * 3
    finally:
        executor.Slots.release(mine)
        executor._close_local()


# ---- the store on an fsspec URL, in process ---------------------------------------------------------------------------

def test_store_on_a_url_reads_writes_resumes_and_cleans(tmp_path):
    import uuid

    from anisotropy import fingerprint, results

    url = f"memory://anisotropy-test-{uuid.uuid4().hex[:8]}/book"
    store = results.Store(url)
    assert store.remote and str(store.root) == url
    store.check()
    calls = []
    compute = lambda: calls.append(1) or pd.DataFrame({"x": [1, 2, 3]})  # noqa: E731 - one code: one key
    frame = store.cached("chapter", {"model": "m"}, compute)
    again = results.Store(url).cached("chapter", {"model": "m"}, compute)
    assert calls == [1]
    pd.testing.assert_frame_equal(again, frame)
    assert results.Store(url).frames("chapter")["x"].tolist() == [1, 2, 3]
    # a Parquet without its sidecar is an unfinished write: never read
    key = {"model": "half", "_code": fingerprint.package()}
    data, meta = store._paths("chapter", key)
    store._write(data, b"not even parquet")
    assert not store.has("chapter", key) and len(store.frames("chapter")) == 3
    # a result of other code is stale, and clean's removal takes both files
    store.save("chapter", {"model": "old"}, frame, code={"modules": ["metrics"], "fingerprint": "0" * 12})
    stale = store.stale()
    assert len(stale) == 2 and store.size(stale) > 0
    store.remove(stale)
    assert store.stale() == [] and len(store.frames("chapter")) == 3
    # listing by pattern gives the store's own URLs (what clean removes), the half-written Parquet included
    listed = store.glob("chapter", "*.parquet")
    assert len(listed) == 2 and all(u.startswith(f"{url}/chapter/") for u in listed) and str(data) in listed
    # file:// is the folder store
    local = results.Store(f"file://{tmp_path}/store")
    assert not local.remote and local.root == tmp_path / "store"


@pytest.mark.slow
def test_fan_out_measures_the_same_numbers_as_one_after_another(tmp_path, monkeypatch):
    from anisotropy import executor, results
    from anisotropy.experiments import spectral

    monkeypatch.delenv(executor.SLOTS_ENV, raising=False)
    monkeypatch.delenv(executor.WORKERS_ENV, raising=False)
    entries = [{"model": m, "variant": "tiny", "label": m} for m in ("bert-base-uncased", "gpt2", "roberta-base")]
    kwargs = dict(source="prose", n_texts=8, batch_size=32, n_batches=1, max_length=32, device="cpu")
    try:
        apart, _ = spectral.profiles(entries, fan_out="auto", store=results.Store(tmp_path / "a"), **kwargs)
    finally:
        executor._close_local()
    here, _ = spectral.profiles(entries, fan_out="none", store=results.Store(tmp_path / "b"), **kwargs)
    pd.testing.assert_frame_equal(apart, here, check_exact=True)
    assert len(list((tmp_path / "a").rglob("*.json"))) == 3


def test_dask_workers_keep_the_kernels_malloc_settings(monkeypatch, tmp_path):
    """The nanny's default 64 KiB trim threshold would hand a training worker's activations back to the system at every
    update (half its CPU time in the kernel); the workers start with the process's own settings instead."""
    from anisotropy import executor
    from anisotropy.book import runner

    for name, value in runner.KERNEL_MALLOC.items():
        monkeypatch.setenv(name, value)
    with executor.client(workers=1) as c:
        seen = list(c.run(lambda: {k: os.environ.get(k) for k in runner.KERNEL_MALLOC}).values())
    assert seen == [runner.KERNEL_MALLOC]
    job = runner.prepare("appendix_b_isotropic", "smoke", output=tmp_path / "x.ipynb", rerun=True)
    assert job.env.items() >= runner.KERNEL_MALLOC.items()  # a chapter run alone gets them too, not only a build


def test_dask_workers_get_the_malloc_settings_outside_a_build(monkeypatch):
    """A plain Python session (a script calling ``experiments.ablation.run`` or a sweep) sets none of them: its workers still get
    the book's, not the nanny's 64 KiB trim threshold (which doubled a training run's CPU time on 2 cores)."""
    from anisotropy import executor

    for name in executor.MALLOC_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    with executor.client(workers=1) as c:
        seen = list(c.run(lambda: {k: os.environ.get(k) for k in executor.MALLOC_DEFAULTS}).values())
    assert seen == [executor.MALLOC_DEFAULTS]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (the test extra's dadapy "
                    "brings it): nothing for transformers to import")
def test_the_package_keeps_transformers_from_importing_jax():
    """With jax installed, transformers imports it at start (3 CPU-s on the slow machine); importing the package
    first keeps it out, in that process and in the processes it starts (chapter kernels, Dask workers), and without
    the package it comes in (the check can tell the two apart)."""
    import anisotropy

    plain = {k: v for k, v in os.environ.items() if k not in anisotropy.FRAMEWORK_DEFAULTS}
    probes = {"package first": "import anisotropy.experiments.layerwise, sys, transformers.image_transforms; "
                               "print('jax' in sys.modules)",
              "child of the package": "import anisotropy, subprocess, sys; print(subprocess.run([sys.executable, "
                                      "'-c', 'import sys, transformers.image_transforms; print(\"jax\" in "
                                      "sys.modules)'], capture_output=True, text=True).stdout.strip())",
              "transformers alone": "import sys, transformers.image_transforms; print('jax' in sys.modules)"}
    loaded = {label: subprocess.run([sys.executable, "-c", code], env=plain, capture_output=True, text=True,
                                    check=True).stdout.strip() for label, code in probes.items()}
    assert loaded == {"package first": "False", "child of the package": "False", "transformers alone": "True"}
