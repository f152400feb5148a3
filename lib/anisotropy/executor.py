"""One seam for running independent pieces of work in parallel: a Dask client, and the cores a build shares.

``map(fn, items)`` computes ``[fn(item) for item in items]`` on a Dask client: by default a ``LocalCluster`` of worker
processes on this machine (one per core, one thread each: the book's work is single-threaded by design, and two
threads on one core spin against each other), or a running cluster when an address is given (``address=`` or the
``DASK_SCHEDULER_ADDRESS`` convention), e.g. several GPU machines. The training runs of the self-trained suites,
sweeps (``book.sweeps.sweep``) and the checkpoint loops of the training-dynamics chapters (``fan_out``) go through it.

How many worker processes ``map`` starts on this machine:

- ``workers=`` (default: the cores), never more than there are items; one runs here, in this process;
- at most ``$ANISOTROPY_WORKERS``: a sweep point's kernel gets 1, since the point itself is one unit of work on one
  core of the sweep's cluster;
- inside a chapter executed by the book build (``$ANISOTROPY_SLOTS``): one plus the cores the build leaves free
  (``Slots``, a jobserver in the manner of ``make -j``), growing while the map runs as other chapters finish.

``schedule(fn, items, after)`` is the build's side: every item after the items it depends on, as many at a time as
there are cores (slots), in threads of this process that each wait on a chapter's kernel (or, ``processes=True``,
in Dask worker processes; ``benchmarks/bench_parallel.py`` compares the two). A process an item started that waits
on another one (a chapter that needs a training run another item is training) gives its core back to the build for
the time it waits, and takes one again after (``waiting``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from anisotropy.errors import UserError

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
WORKERS_ENV = "ANISOTROPY_WORKERS"
SLOTS_ENV = "ANISOTROPY_SLOTS"
HOLDER_ENV = "ANISOTROPY_SLOT_HOLDER"  # which of the build's items this process is (``waiting`` lends its core)
CONNECT_TIMEOUT_S = 10
POLL_S = 0.5  # how often a running map looks for cores the build has freed (never a synchronisation by itself)
# glibc hands every freed block above its mmap threshold (32 MiB at most) back to the operating system, and the next
# forward pass faults the same pages in again, zeroed by the kernel: measured on the 2-core build machine, a sixth of
# the CPU time of a BERT-base forward pass with its attention maps was system time, and a training run in a Dask
# worker (whose nanny sets a 64 KiB trim threshold) took twice the CPU time of the same run in a plain process. Freed
# memory stays in the process's heap instead (the numbers are unchanged: only where memory comes from changes). The
# book's kernels get these (``book.execution``), and so does every worker of a LocalCluster, whoever starts it; a value
# set in the environment is kept.
MALLOC_DEFAULTS = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(4 << 30), "MALLOC_TOP_PAD_": str(256 << 20)}


def malloc_env() -> dict[str, str]:
    """The allocator settings for the processes that compute (``MALLOC_DEFAULTS``, or this process's own)."""
    return {name: os.environ.get(name, value) for name, value in MALLOC_DEFAULTS.items()}


class ExecutorError(UserError):
    """A scheduler that cannot be reached or a fan-out setting that cannot be read; one line, printed by the CLI."""


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cap() -> int | None:
    text = os.environ.get(WORKERS_ENV, "").strip()
    return max(1, int(text)) if text.isdigit() else None


def scheduler_address(address: str | None = None) -> str | None:
    """The scheduler to use: ``address``, else ``$DASK_SCHEDULER_ADDRESS``, else None (a LocalCluster here)."""
    return (address or os.environ.get(SCHEDULER_ENV) or "").strip() or None


# ---- cores shared between a build and its chapters ------------------------------------------------------------------

class Slots:
    """The cores of a build as a folder of files, one per core (a jobserver, as ``make -j`` shares its jobs with the
    makes it starts). Whoever holds the OS file lock beside a core's file (``filelock.FileLock``: flock on POSIX,
    LockFileEx on Windows) may keep one core busy; the lock goes away with its holder, so a killed kernel never keeps
    a core. The build holds one slot per chapter it runs (given up while the chapter's kernel waits on another
    process: ``waiting``); a chapter's ``map`` takes the free ones for extra worker processes and gives them back
    when it ends."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @classmethod
    def create(cls, n: int, folder: str | Path) -> "Slots":
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(max(1, n)):
            (folder / f"slot-{i}").touch()
        return cls(folder)

    @classmethod
    def from_env(cls, env=None) -> "Slots | None":
        folder = (os.environ if env is None else env).get(SLOTS_ENV)
        if not folder or not Path(folder).is_dir():
            return None
        return cls(folder)

    def __len__(self) -> int:
        return len(list(self.folder.glob("slot-*")))

    def take(self):
        """A free slot (a held ``filelock.FileLock`` on the hidden ``.slot-<i>.lock`` beside ``slot-<i>``), or None
        when every core is busy. The lock is a file of its own because Windows removes a lock's file on release."""
        from filelock import FileLock, Timeout

        for path in sorted(self.folder.glob("slot-*")):
            if not path.is_file():
                return None  # the build has ended and removed its slots
            # not thread-local: the thread that gives a slot back need not be the one that took it
            lock = FileLock(path.with_name(f".{path.name}.lock"), thread_local=False)
            try:
                lock.acquire(timeout=0)
            except (Timeout, OSError):  # held by another process, or by another slot holder of this one
                continue
            if not path.is_file():  # the build ended while we took it
                lock.release()
                return None
            return lock
        return None

    def signal(self, holder: str, what: str) -> Path:
        """The file by which the process of the build's item ``holder`` tells the build that it waits on another
        process (``what`` = "lent": the build gives the core it holds for the item to other work) or that its wait
        has ended ("wanted": the build takes a core for it again, before it starts another item). The build removes
        the file once done (``schedule``); ``waiting`` writes them."""
        return self.folder / f"{what}-{holder}"

    @staticmethod
    def release(lock) -> None:
        if lock is not None:
            lock.release()


@contextmanager
def waiting(env=None):
    """A block in which this process waits on another one (a training run it needs that another process is
    training) and computes nothing. Inside a build (``schedule``: ``$ANISOTROPY_SLOTS`` and ``$ANISOTROPY_SLOT_HOLDER``
    in ``env``, default ``os.environ``), the core the build holds for this process goes to other work while the block
    runs, and the block ends once the build holds a core for it again (polled every ``POLL_S``, as a ``make -j`` job
    waits for a token). Anywhere else it changes nothing."""
    env = os.environ if env is None else env
    holder, slots = env.get(HOLDER_ENV, ""), Slots.from_env(env)
    if not holder or slots is None:
        yield
        return
    slots.signal(holder, "lent").touch()
    try:
        yield
    finally:
        wanted = slots.signal(holder, "wanted")
        wanted.touch()
        while wanted.exists() and slots.folder.is_dir():
            time.sleep(POLL_S)


# ---- a Dask client --------------------------------------------------------------------------------------------------

def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def _quiet_dask() -> None:
    for name in ("distributed", "tornado", "bokeh"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextmanager
def client(address: str | None = None, workers: int | None = None, *, retries: int = 2,
           announce: Callable[[str], None] | None = None):
    """A Dask ``Client``: of the cluster at ``address`` (or ``$DASK_SCHEDULER_ADDRESS``), else of a fresh
    ``LocalCluster`` on 127.0.0.1 with ``workers`` single-threaded worker processes (default: the cores), closed on
    exit. A worker that dies while it runs a task costs that task one of ``retries`` + 1 attempts (the scheduler's
    ``allowed-failures``; a cluster started elsewhere keeps its own setting). ``announce`` receives one line naming
    the cluster and its dashboard."""
    import dask
    from distributed import Client, LocalCluster

    address = scheduler_address(address)
    _quiet_dask()
    if address:
        try:
            c = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ExecutorError(
                f"No Dask scheduler answers at {address} ({first}). Start one (`dask scheduler`, then "
                f"`dask worker {address}` on each machine), or leave out --scheduler and {SCHEDULER_ENV} to run on "
                "a LocalCluster here.") from None
        with c:
            if announce:
                n = len(c.scheduler_info().get("workers", {}))
                announce(f"Dask: the cluster at {address} ({n} workers); dashboard {c.dashboard_link}")
            yield c
        return
    n = max(1, workers or cores())
    settings = {"distributed.scheduler.allowed-failures": retries,
                # a worker's own memory is small (a kernel or a model lives beside it); no nanny limit
                "distributed.worker.memory.terminate": False}
    # the nanny's own 64 KiB trim threshold would make every training step fault its activations in again
    settings.update({f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in malloc_env().items()})
    # a worker is not the build's item whose kernel started it: only that kernel may lend the item's core (``waiting``)
    settings[f"distributed.nanny.pre-spawn-environ.{HOLDER_ENV}"] = ""
    with dask.config.set(settings):
        dashboard = "127.0.0.1:0" if announce else None
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=dashboard, memory_limit=0, silence_logs=logging.CRITICAL) as cluster, \
                Client(cluster) as c:
            if announce:
                board = f"dashboard {c.dashboard_link}" if _has_bokeh() else "no dashboard (it needs bokeh: pip " \
                                                                            "install -e '.[scale]')"
                announce(f"Dask: a LocalCluster of {n} worker processes on 127.0.0.1; {board}")
            yield c


_LOCAL: dict = {}  # this process's LocalCluster and its client, started by the first map that needs one
_LOCAL_LOCK = threading.Lock()


def _local_client(n: int, retries: int, announce=None):
    """The client of this process's LocalCluster, started on first use (a worker process costs seconds to start and
    to import torch; the checkpoint loops of a chapter call ``map`` several times) with at least ``n`` workers, and
    closed when the process exits. How many tasks run at once is ``map``'s business, not the cluster's size."""
    import atexit

    with _LOCAL_LOCK:
        if "client" not in _LOCAL:
            context = client(workers=n, retries=retries, announce=announce)
            _LOCAL.update(client=context.__enter__(), context=context, workers=n)
            atexit.register(_close_local)
        elif _LOCAL["workers"] < n:
            _LOCAL["client"].cluster.scale(n)
            _LOCAL["workers"] = n
        return _LOCAL["client"]


def _close_local() -> None:
    with _LOCAL_LOCK:
        context = _LOCAL.pop("context", None)
        _LOCAL.clear()
    if context is not None:
        try:
            context.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - the process is ending anyway
            pass


def _dask_map(c, fn, items, retries, on_done, errors, allowed=None) -> list:
    """Submit the items as tasks, no more at once than ``allowed(in_flight, waiting)`` says (default: all), and
    collect their results in order as they finish."""
    from distributed import wait

    results: list = [None] * len(items)
    inflight: dict = {}
    nxt = 0
    try:
        while nxt < len(items) or inflight:
            limit = len(items) if allowed is None else allowed(len(inflight), len(items) - nxt)
            while nxt < len(items) and len(inflight) < limit:
                inflight[c.submit(fn, items[nxt], retries=retries, pure=False)] = nxt
                nxt += 1
            try:
                done, _ = wait(list(inflight), timeout=POLL_S if allowed else None, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for future in done:
                i = inflight.pop(future)
                try:
                    results[i] = future.result()
                except Exception as exc:  # noqa: BLE001 - a task that failed for good (or its workers, retries times)
                    if errors == "raise":
                        raise
                    results[i] = exc
                if on_done:
                    on_done(items[i], results[i])
    finally:
        for future in inflight:
            future.cancel()
    return results


def map(fn: Callable, items: Iterable, *, address: str | None = None, workers: int | None = None,
        retries: int = 2, on_done: Callable | None = None, errors: str = "raise",
        announce: Callable[[str], None] | None = None, ready: Callable | None = None) -> list:
    """``[fn(item) for item in items]``, computed in parallel on a Dask client, in the items' order.

    With an address (or ``$DASK_SCHEDULER_ADDRESS``), on that cluster. Without, on this process's LocalCluster,
    as many tasks at once as ``workers`` (default: the cores) and the limits of the module docstring allow; when that
    is one, the items run here, one after another, without a cluster. A task whose worker dies, or that raises, is
    retried elsewhere up to ``retries`` times. ``on_done(item, result)`` is called as each task finishes.
    ``errors="return"`` puts a task's exception in its place of the result instead of raising it. ``announce``
    receives one line naming the cluster and its dashboard when one is started. ``ready(item)`` True: the item's
    result is already stored, so it is read here, before any worker starts (a worker costs seconds of imports; a
    chapter executed again would otherwise start a cluster to read its own results)."""
    items = list(items)
    if not items:
        return []
    if ready is not None:
        here = [i for i, item in enumerate(items) if ready(item)]
        if here:
            done = dict(zip(here, _here(fn, [items[i] for i in here], on_done, errors)))
            rest = [i for i in range(len(items)) if i not in done]
            done.update(zip(rest, map(fn, [items[i] for i in rest], address=address, workers=workers,
                                      retries=retries, on_done=on_done, errors=errors, announce=announce)))
            return [done[i] for i in range(len(items))]
    address = scheduler_address(address)
    if address:
        with client(address, retries=retries, announce=announce) as c:
            return _dask_map(c, fn, items, retries, on_done, errors)
    wanted = min(len(items), workers or cores(), _cap() or len(items))
    if wanted <= 1:
        return _here(fn, items, on_done, errors)
    slots = Slots.from_env()
    if slots is None:
        c = _local_client(wanted, retries, announce)
        return _dask_map(c, fn, items, retries, on_done, errors, allowed=lambda inflight, waiting: wanted)
    return _with_slots(fn, items, slots, wanted, retries, on_done, errors, announce)


def _here(fn, items, on_done, errors) -> list:
    out = []
    for item in items:
        try:
            out.append(fn(item))
        except Exception as exc:  # noqa: BLE001
            if errors == "raise":
                raise
            out.append(exc)
        if on_done:
            on_done(item, out[-1])
    return out


def _with_slots(fn, items, slots: Slots, wanted: int, retries, on_done, errors, announce) -> list:
    """Inside a build: this process's own core plus the free ones. The items run here until the build frees a slot;
    then on the LocalCluster, one more task at once for each slot the build frees (up to ``wanted``), each slot given
    back as soon as nothing is left to start on it."""
    held: list = []  # the slots' locks
    try:
        out: list = []
        i = 0
        while i < len(items):
            if len(items) - i > 1 and (fd := slots.take()) is not None:
                held.append(fd)
                break
            out += _here(fn, items[i:i + 1], on_done, errors)
            i += 1
        if i == len(items):
            return out

        def allowed(inflight: int, waiting: int) -> int:
            while waiting and len(held) + 1 < min(wanted, inflight + waiting) and (fd := slots.take()) is not None:
                held.append(fd)
            while held and not waiting and inflight < len(held) + 1:
                Slots.release(held.pop())  # nothing left to start: the core goes back to the build
            return len(held) + 1

        c = _local_client(wanted, retries, announce)
        return out + _dask_map(c, fn, items[i:], retries, on_done, errors, allowed=allowed)
    finally:
        for fd in held:
            Slots.release(fd)


def fan_out(setting: str | None) -> dict:
    """``map`` keywords for a chapter's ``fan_out`` parameter: "none" (one after another, in the kernel), "auto" (the
    cores the build leaves free, or this machine's cores, or the cluster of ``$DASK_SCHEDULER_ADDRESS``), or a
    scheduler address (tcp://host:8786)."""
    text = (setting or "none").strip()
    if text == "none":
        return {"workers": 1}
    if text == "auto":
        return {}
    if "://" in text:
        return {"address": text}
    raise ExecutorError(f"fan_out should be \"auto\", \"none\" or a Dask scheduler address such as "
                        f"tcp://host:8786, got {setting!r}.")


# ---- the build's side: items after their dependencies, as many at a time as there are cores ----------------------

@dataclass
class Blocked:
    """The result of an item that did not run because an item it depends on failed (or was blocked itself)."""

    item: object
    because: object


def schedule(fn: Callable, items: list, after: dict, *, jobs: int | None = None, processes: bool = False,
             failed: Callable[[object], bool] = lambda result: False, on_done: Callable | None = None) -> dict:
    """Run ``fn(item, env)`` for every item once the items of ``after[item]`` (those among ``items``) have finished
    and none ``failed``; an item behind a failure gets ``Blocked`` and is not run. Ready items start in the order of
    ``items``, as many at a time as ``jobs`` (default: the cores) slots allow; the slots are shared with the work the
    items start themselves (``map`` in a chapter's kernel) through ``env``, the environment ``fn`` passes on to it.

    ``fn`` runs in a thread of this process (an item is a chapter whose work happens in its own kernel process: the
    thread only waits on it), or with ``processes=True`` in a worker process of a LocalCluster. An exception ``fn``
    raises becomes the item's result (and counts as failed). ``on_done(item, result)`` is called in this thread as
    each item ends. Returns ``{item: result}``. KeyboardInterrupt (Ctrl-C, or SIGTERM through the CLI) propagates at
    once; stopping what the items started (their kernels) is the caller's part.

    Each item's ``env`` names it (``$ANISOTROPY_SLOT_HOLDER``): while a process it started waits on another one
    (``waiting``), its core is given to other items; when the wait ends, it gets a core again before any other item
    starts."""
    jobs = max(1, jobs or cores())
    wanted = set(items)
    deps = {item: [d for d in after.get(item, ()) if d in wanted] for item in items}
    results: dict = {}
    running: dict = {}  # item -> (future, slot lock or None once lent, holder)
    woken = threading.Event()

    def bad(result) -> bool:
        return isinstance(result, (Blocked, Exception)) or failed(result)

    def finish(item, result) -> None:
        results[item] = result
        if on_done:
            on_done(item, result)

    with tempfile.TemporaryDirectory(prefix="anisotropy-slots-") as folder, _pool(processes, jobs) as submit:
        slots = Slots.create(jobs, folder)
        holders = {item: str(i) for i, item in enumerate(items)}
        try:
            while len(results) < len(items):
                pending = _lend(slots, running)  # items whose processes wait for a core again, before new ones
                for item in items if not pending else ():
                    if item in results or item in running:
                        continue
                    failure = next((d for d in deps[item] if d in results and bad(results[d])), None)
                    if failure is not None:
                        finish(item, Blocked(item, failure))
                        continue
                    if any(d not in results for d in deps[item]):
                        continue
                    fd = slots.take()
                    if fd is None:
                        break  # every core is busy: wait for one
                    future = submit(fn, item, {SLOTS_ENV: folder, HOLDER_ENV: holders[item]})
                    future.add_done_callback(lambda _: woken.set())
                    running[item] = (future, fd, holders[item])
                if len(results) == len(items):
                    break
                if not running and len(results) < len(items) and slots_free(slots):
                    stuck = [i for i in items if i not in results]
                    raise ValueError(f"these items wait on each other: {stuck}")
                woken.wait(POLL_S)  # an item has ended, or (after the timeout) a kernel may have given a slot back
                woken.clear()
                for item, (future, fd, holder) in list(running.items()):
                    if future.done():
                        del running[item]
                        Slots.release(fd)
                        for what in ("lent", "wanted"):
                            slots.signal(holder, what).unlink(missing_ok=True)
                        try:
                            result = future.result()
                        except Exception as exc:  # noqa: BLE001 - reported as the item's failure
                            result = exc
                        finish(item, result)
        finally:
            for future, fd, _ in running.values():
                future.cancel()
                Slots.release(fd)
    return results


def _lend(slots: Slots, running: dict) -> bool:
    """Act on what the running items' processes signal (``waiting``): give up the core of one that waits ("lent"),
    take one again for one whose wait has ended ("wanted"). ``running``: item -> (future, slot lock or None,
    holder), updated. Whether an item still waits for a core. ``waiting`` writes "lent" before "wanted", so "wanted"
    is looked for first: seen with a core still held, the item keeps that core."""
    pending = False
    for item, (future, fd, holder) in list(running.items()):
        lent, wanted = slots.signal(holder, "lent"), slots.signal(holder, "wanted")
        if wanted.exists():
            if fd is None:
                fd = slots.take()
                if fd is None:
                    pending = True
                    continue
            wanted.unlink()
            lent.unlink(missing_ok=True)
        elif lent.exists():
            Slots.release(fd)
            fd = None
            lent.unlink()
        running[item] = (future, fd, holder)
    return pending


def slots_free(slots: Slots) -> bool:
    fd = slots.take()
    Slots.release(fd)
    return fd is not None


@contextmanager
def _pool(processes: bool, jobs: int):
    """``submit(fn, *args) -> future``: on daemon threads of this process (an interrupted build never waits for them
    at exit), or on the worker processes of a LocalCluster."""
    if processes:
        with client(workers=jobs, retries=0) as c:
            yield lambda fn, *args: c.submit(fn, *args, pure=False)
        return
    import concurrent.futures

    def submit(fn, *args):
        future = concurrent.futures.Future()

        def work():
            # A running future cannot be cancelled, so an interrupted build's cancel() in ``schedule`` cannot race the
            # kernel's own failure into InvalidStateError printed after the interruption's message.
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the scheduling thread
                future.set_exception(exc)

        threading.Thread(target=work, daemon=True, name=f"chapter-{args[0] if args else ''}").start()
        return future

    yield submit
