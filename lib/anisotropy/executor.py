"""One seam for running independent pieces of work in parallel: a Dask client.

By default a ``LocalCluster`` of worker processes on this machine (one per core, one thread each: the book's work is
single-threaded by design, and two threads on one core spin against each other); a running cluster when an address
is given (``address=`` or the ``DASK_SCHEDULER_ADDRESS`` convention), e.g. several GPU machines. The training runs of
the self-trained suites, sweeps and checkpoint loops go through ``map``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterable

SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"


def cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextmanager
def client(address: str | None = None, workers: int | None = None):
    """A Dask ``Client``: of the cluster at ``address`` (or ``$DASK_SCHEDULER_ADDRESS``), else of a fresh
    ``LocalCluster`` with ``workers`` single-threaded worker processes (default: the cores), closed on exit."""
    from distributed import Client, LocalCluster

    address = address or os.environ.get(SCHEDULER_ENV)
    if address:
        with Client(address) as c:
            yield c
        return
    n = max(1, workers or cores())
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=40) as cluster, Client(cluster) as c:
        yield c


def map(fn: Callable, items: Iterable, *, address: str | None = None, workers: int | None = None,
        retries: int = 2, on_done: Callable | None = None) -> list:
    """``[fn(item) for item in items]``, computed in parallel on a Dask client (``client``), in the items' order.

    One item alone, or ``workers=1`` without an address, runs here without starting a cluster. A task whose worker
    dies is retried elsewhere up to ``retries`` times. ``on_done(item, result)`` is called as each task finishes."""
    from distributed import as_completed

    items = list(items)
    if not items:
        return []
    if (len(items) == 1 or workers == 1) and not (address or os.environ.get(SCHEDULER_ENV)):
        out = []
        for item in items:
            out.append(fn(item))
            if on_done:
                on_done(item, out[-1])
        return out
    with client(address, min(workers or cores(), len(items))) as c:
        futures = c.map(fn, items, retries=retries, pure=False)
        where = {f.key: i for i, f in enumerate(futures)}
        results: list = [None] * len(items)
        for future in as_completed(futures):
            i = where[future.key]
            results[i] = future.result()
            if on_done:
                on_done(items[i], results[i])
        return results
