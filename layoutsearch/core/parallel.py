"""Independent work over the CPUs: validation's records, problems to rank and leave-one-source-out folds, and
the search's bound of a large space, chunk by chunk (``search.tables.compute_bounds``).

``parallel_map(fn, items)`` is ``[fn(x) for x in items]``: same order, same values (``fn`` is pure), in
forked worker processes when there are several CPUs and several items. Fork hands ``fn`` and ``items``
to the workers as they are (closures and unpicklable objects included); only the results are pickled
back. Without fork (not POSIX), with one CPU, inside a worker (this module's, or any process that
multiprocessing started, such as a sweep's executor), or with ``workers=1``, the map is serial.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_task: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # set in each worker by fork
_in_worker = False


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def parallel_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, over up to ``workers`` (default: ``available_cpus``) forked processes."""
    n = min(workers or available_cpus(), len(items))
    if (
        n <= 1
        or _in_worker
        or multiprocessing.parent_process() is not None  # a worker of another pool: its CPU only
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        return [fn(x) for x in items]
    global _task
    _task = (fn, items)  # the workers inherit it: nothing of fn or items is pickled
    try:
        with multiprocessing.get_context("fork").Pool(n, initializer=_enter_worker) as pool:
            return pool.map(_run, range(len(items)), chunksize=1)
    finally:
        _task = None


def _enter_worker() -> None:
    """Mark the process as a worker: a map inside it is serial (a pool's workers have no children)."""
    global _in_worker
    _in_worker = True


def _run(index: int) -> Any:
    """The result of the inherited task's item ``index``."""
    assert _task is not None  # set before the pool forked this worker
    fn, items = _task
    return fn(items[index])
