"""The Jupyter kernels that execute chapters: each started with its own environment, working folder and log, so that
several run at once from threads of one process; its process tree's CPU time and peak memory; the plain processes of
the build's training units (``process``); stopping them all."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

# -- kernels: started with their own environment, working folder and log, so that several run at once from threads
# of one process (nothing process-wide is changed: no os.environ, no working directory, no file descriptor 2) --------

_KERNELS: dict[int, object] = {}  # pid -> kernel manager (or Popen), of the kernels and units this process has running
_KERNELS_LOCK = threading.Lock()


class _ThreadLog(logging.Handler):
    """Log records of papermill, nbclient and jupyter_client go to the log of the chapter the current thread
    executes (``kernel``), never to the terminal, where only progress lines and one failure report belong."""

    def __init__(self):
        super().__init__()
        self.local = threading.local()

    def emit(self, record):
        stream = getattr(self.local, "stream", None)
        if stream is not None:
            try:
                stream.write(self.format(record) + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass


_THREAD_LOG = _ThreadLog()
for _name in ("papermill", "nbclient", "traitlets", "jupyter_client"):
    logging.getLogger(_name).addHandler(_THREAD_LOG)
    logging.getLogger(_name).propagate = False


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid``, of the children it has waited for, and of its live descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + (t.children_user + t.children_system if proc is root else 0.0)
    return total


def _tree_peak_rss(pid: int) -> int | None:
    """The largest peak resident set (``VmHWM``, bytes) of process ``pid`` and its live descendants (a chapter's
    kernel and the Dask workers it still holds; processes that already exited are not seen). None where /proc does
    not say (not Linux)."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return None
    peaks = []
    for proc in procs:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmHWM:\s+(\d+) kB", status, flags=re.M)
        if found:
            peaks.append(int(found.group(1)) * 1024)
    return max(peaks) if peaks else None


@contextmanager
def kernel(env: dict, cwd: str, log: Path, cpu: list | None = None, peak: list | None = None):
    """A kernel manager class for papermill whose kernels start with ``env`` in ``cwd``, their standard output and
    error (and this thread's papermill log records) going to ``log``; running kernels are known to ``stop_kernels``.
    ``cpu`` receives each kernel's CPU seconds (its process tree's) when it is shut down, ``peak`` its process tree's
    largest peak resident set (``_tree_peak_rss``)."""
    from jupyter_client import AsyncKernelManager

    log.parent.mkdir(parents=True, exist_ok=True)
    started = []
    with open(log, "w") as stream:
        class ChapterKernel(AsyncKernelManager):
            # Public API only: start_kernel's keyword arguments are the kernel process's Popen arguments (env, cwd,
            # stdout, stderr), kept by jupyter_client for restarts too; restart_kernel relaunches without calling
            # start_kernel, so it registers the new process itself.
            async def start_kernel(self, **kw):
                kw.update(env=dict(env), cwd=cwd, stdout=stream, stderr=stream)
                await super().start_kernel(**kw)
                self._register()

            async def restart_kernel(self, now=False, newports=False, **kw):
                await super().restart_kernel(now=now, newports=newports, **kw)
                self._register()

            def _register(self):
                pid = getattr(self.provisioner, "pid", None)
                if pid:
                    started.append(pid)
                    with _KERNELS_LOCK:
                        _KERNELS[pid] = self

            async def shutdown_kernel(self, now=False, restart=False):
                pid = getattr(self.provisioner, "pid", None)
                if pid and cpu is not None:
                    cpu.append(_tree_cpu_seconds(pid))
                if pid and peak is not None:
                    peak.append(_tree_peak_rss(pid))
                return await super().shutdown_kernel(now=now, restart=restart)

        previous = getattr(_THREAD_LOG.local, "stream", None)
        _THREAD_LOG.local.stream = stream
        try:
            yield ChapterKernel
        finally:
            _THREAD_LOG.local.stream = previous
            with _KERNELS_LOCK:
                for pid in started:
                    _KERNELS.pop(pid, None)


def process(cmd: list[str], env: dict, cwd: str, log: Path) -> tuple[int, float | None]:
    """Run ``cmd`` (a training unit of the build) to its end with ``env`` in ``cwd``, in a session of its own that
    ``stop_kernels`` stops, its output going to ``log``. Returns its exit status and its CPU seconds (user and
    system, its own and its waited-for children's, from ``os.wait4``; None where that is missing)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as stream:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=stream, stderr=subprocess.STDOUT,
                                start_new_session=True)
        with _KERNELS_LOCK:
            _KERNELS[proc.pid] = proc
        try:
            if not hasattr(os, "wait4"):  # not POSIX
                return proc.wait(), None
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        finally:
            with _KERNELS_LOCK:
                _KERNELS.pop(proc.pid, None)


def stop_kernels() -> int:
    """Kill every kernel and unit this process has running (each runs in its own session, with whatever it started:
    its Dask workers, a training run), e.g. when a build is interrupted. Returns how many."""
    with _KERNELS_LOCK:
        pids = list(_KERNELS)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    return len(pids)
