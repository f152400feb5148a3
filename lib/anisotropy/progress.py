"""Progress lines of a long computation, for the console of the build that runs it.

A chapter's kernel writes its standard error to the chapter's log (``book/kernels.py``), which the book runner follows
and echoes to its console: ``say`` writes one line there, marked with ``MARK``, whatever process it runs in (the kernel,
a Dask worker it started). Outside a build the line goes to the terminal's standard error. Imports nothing of the
package.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

#: What starts a progress line in a chapter's log: the runner echoes exactly these lines.
MARK = "anisotropy> "


def say(message: str) -> None:
    """Write ``message`` as one progress line to the process's own standard error (in a kernel: the chapter's log,
    not the notebook)."""
    stream = sys.__stderr__ or sys.stderr
    try:
        stream.write(MARK + " ".join(str(message).split()) + "\n")
        stream.flush()
    except (OSError, ValueError):  # a closed stream: progress is never worth a failure
        pass


class Every:
    """``say`` at most once per ``seconds`` (and the first time): for loops whose steps are too many to name each."""

    def __init__(self, seconds: float = 30.0):
        self.seconds, self.last = seconds, float("-inf")

    def say(self, message: Callable[[], str] | str, force: bool = False) -> bool:
        """Say ``message`` (a string, or a function making one only when it is said) if ``seconds`` have passed since
        the last line or ``force``; whether it was said."""
        now = time.monotonic()
        if not force and now - self.last < self.seconds:
            return False
        self.last = now
        say(message() if callable(message) else message)
        return True
