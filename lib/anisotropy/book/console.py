"""A build's console: a line for each item (a chapter, a training unit, a sweep's point) as it starts and as it ends,
and in between the progress lines its process writes to its log (``progress.say``), echoed with its name and elapsed
time (``Echo``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from anisotropy import progress

# A running chapter's console: its progress lines (``progress.say``) as they reach its log, polled every ECHO_POLL_S,
# and a line after SILENCE_S without one, so that no chapter is silent for a minute.
ECHO_POLL_S = 2.0
SILENCE_S = 55.0


def line(text: str) -> None:
    """Print ``text`` as one line in a single write: the build's items print from several threads, and ``print``
    writes a text and its newline apart, so two lines could share a row."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Echo(threading.Thread):
    """Echo the progress lines a chapter's kernel writes to its ``log`` (``progress.MARK``) to this console, each
    with the chapter's name and its elapsed time, and say that it is still running after ``SILENCE_S`` of silence."""

    def __init__(self, name: str, log: Path):
        super().__init__(name=f"echo-{name}", daemon=True)
        self.chapter, self.log, self.start_time = name, Path(log), time.perf_counter()
        self.done, self.position, self.last = threading.Event(), 0, time.perf_counter()

    def _drain(self) -> None:
        try:
            with open(self.log, "rb") as stream:
                stream.seek(self.position)
                data = stream.read()
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self.position += len(whole)
        for written in whole.decode(errors="replace").splitlines():
            if written.startswith(progress.MARK):
                self._print(written[len(progress.MARK):])

    def _print(self, text: str) -> None:
        self.last = time.perf_counter()
        line(f"    {self.chapter} [{self.last - self.start_time:5.0f} s] {text}")

    def tick(self) -> None:
        """One poll: echo the new progress lines, or say the chapter is still running after ``SILENCE_S``."""
        self._drain()
        if time.perf_counter() - self.last >= SILENCE_S:
            self._print("still running (no progress line in the last minute)")

    def run(self) -> None:
        while not self.done.wait(ECHO_POLL_S):
            self.tick()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self._drain()


def ended(outcome, profile: str, index: int, total: int, label: str | None = None,
          estimate: float | None = None) -> None:
    """The line of an item that ended (``outcome``, a ``book.execution.Outcome``): its time (and CPU time), and the
    estimate it started with."""
    if outcome.blocked:
        status = "not run"
    else:
        status = "reused" if outcome.reused else ("FAILED" if outcome.error else f"{outcome.seconds:7.1f} s")
        if outcome.cpu_seconds is not None and not (outcome.reused or outcome.error):
            status += f" ({outcome.cpu_seconds:.0f} s CPU)"
        if estimate and not outcome.reused:
            status += f", estimated {estimate:.0f} s"
    line(f"[{index}/{total}] {label or outcome.name:<32} profile={profile:<6} {status}")


def started(name: str, profile: str, estimate: float | None = None) -> None:
    """The line of a chapter that starts executing (with its estimated wall time on this machine, when known)."""
    about = f" (estimated {estimate:.0f} s here)" if estimate else ""
    line(f"[start] {name:<32} profile={profile:<6}{about}")

