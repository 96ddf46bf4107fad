"""Local process pool and Ray executors: run points, hand each finished row to a callback."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

from layoutsearch.core.errors import missing_extra
from layoutsearch.sweep.points import Point
from layoutsearch.sweep.solving import error_row, solve_point

# ----------------------------------------------------------------------------- executors

PARENT_POLL_S = 0.5
# glibc mallopt parameters, and the size up to which a worker keeps freed memory for the next point
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 256 * 1024 * 1024


def _worker_init(parent_pid: int) -> None:
    """Workers leave Ctrl-C to the parent, which stops them and keeps what is done; and they exit
    when the parent dies (kill -9), so none outlives it holding the journal's lock: Linux's
    PR_SET_PDEATHSIG where it exists, and a thread that watches the parent id everywhere."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    _keep_freed_memory()
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _keep_freed_memory() -> bool:
    """Let glibc reuse a point's freed tables for the next point instead of returning them to the
    kernel: every point allocates arrays of tens of MiB, and mapping them afresh costs page faults
    (3-4x fewer with this, and about 5% of a point's CPU, on the 1,000-point benchmark's points).
    Whether it took effect; other C libraries keep their defaults."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return all(
        mallopt(param, KEEP_FREED_BYTES) == 1 for param in (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD)
    )


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the watching thread does it
        pass


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


PR_SET_PDEATHSIG = 1


def _run_local(
    todo: list[Point], jobs: int, time_limit_s: float, on_row: Callable[[dict], None]
) -> None:
    """A process pool (fork where the platform has it: the workers start with the package imported)."""
    if jobs == 1 or len(todo) == 1:
        for point in todo:
            on_row(solve_point(point, time_limit_s))
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)),
        mp_context=context,
        initializer=_worker_init,
        initargs=(os.getpid(),),
    )
    clean = False
    try:
        futures = {pool.submit(solve_point, point, time_limit_s): point for point in todo}
        for future in as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # a worker died (out of memory, killed): the point is recorded
                row = error_row(futures[future], time_limit_s, exc)
            on_row(row)
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)
        else:  # interrupted: stop now rather than wait for the running solves
            pool.shutdown(wait=False, cancel_futures=True)
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise missing_extra("--executor ray", "ray") from None
    return ray


def _run_ray(
    todo: list[Point],
    jobs: int,
    time_limit_s: float,
    on_row: Callable[[dict], None],
    address: str | None,
) -> None:
    """Points as Ray tasks, consumed as they complete; a local Ray instance when no address is given."""
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        local = address is None and not os.environ.get("RAY_ADDRESS")
        ray.init(
            address=address,
            num_cpus=jobs if local else None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    refs = {}
    try:
        task = ray.remote(num_cpus=1)(solve_point)
        refs = {task.remote(point, time_limit_s): point for point in todo}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    row = ray.get(ref)
                except Exception as exc:  # the task or its worker failed outside solve_point
                    row = error_row(refs[ref], time_limit_s, exc)
                on_row(row)
    finally:
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished tasks cannot be cancelled; nothing to do
                pass
        if started:
            ray.shutdown()
