"""Speed measures of the sweep (workers and parent) that must not change what they compute."""

import platform
import subprocess
import sys

import pytest

from layoutsearch.sweep import run

needs_glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt thresholds are glibc's",
)

# Frees a 64 MiB array (above glibc's largest automatic mmap threshold, 32 MiB) before and after
# the workers' allocator setting and prints how many MiB of it the process still holds each time.
HELD_AFTER_FREE = """
import numpy as np
from layoutsearch.sweep.executors import _keep_freed_memory

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

def held_mib():
    before = rss_mib()
    block = np.ones(64 * 1024 * 1024 // 8)
    del block
    return rss_mib() - before

print(round(held_mib()), _keep_freed_memory(), round(held_mib()))
"""


@needs_glibc
def test_workers_keep_freed_tables_for_the_next_point():
    """With the workers' setting a freed 64 MiB array stays with the process (no new page faults
    for the next point); by default glibc hands it back to the kernel at once."""
    out = subprocess.run(
        [sys.executable, "-c", HELD_AFTER_FREE], capture_output=True, text=True, check=True
    )
    default_mib, applied, kept_mib = out.stdout.split()
    assert applied == "True"
    assert abs(int(default_mib)) <= 2
    assert 62 <= int(kept_mib) <= 66


class _Clock:
    """A fake time.perf_counter that the test advances by hand."""

    def __init__(self, now_s: float):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _writes(monkeypatch, arrivals_s: list[float], write_cost_s: float) -> list[float]:
    """The clock times at which _Table rewrote the file, rows arriving at ``arrivals_s``, then forced."""
    clock, written = _Clock(arrivals_s[0]), []

    def fake_write(rows, path):
        written.append(clock.now_s)
        clock.now_s += write_cost_s

    monkeypatch.setattr(run.time, "perf_counter", clock)
    monkeypatch.setattr(run, "write_table", fake_write)
    table = run._Table("out.csv", [])
    done: dict = {}
    for i, t in enumerate(arrivals_s):
        clock.now_s = max(clock.now_s, t)
        done[str(i)] = {"point_id": str(i)}
        table.write(done)
    table.write(done, force=True)
    return written


def test_table_is_rewritten_at_most_once_a_second_and_at_the_end(monkeypatch):
    """100 rows 50 ms apart (5 s): rewrites at 0, 1, 2, 3, 4 s after the first row, plus the forced last."""
    arrivals = [100.0 + 0.05 * i for i in range(100)]
    written = _writes(monkeypatch, arrivals, write_cost_s=0.0)
    assert [round(t - 100.0, 2) for t in written] == [0.0, 1.0, 2.0, 3.0, 4.0, 4.95]


def test_a_slow_rewrite_waits_twenty_times_its_cost(monkeypatch):
    """A rewrite that takes 0.1 s is followed by none for 2 s: at most 1/20 of the parent's time."""
    arrivals = [100.0 + 0.05 * i for i in range(100)]
    written = _writes(monkeypatch, arrivals, write_cost_s=0.1)
    assert [round(t - 100.0, 2) for t in written] == [0.0, 2.1, 4.2, 4.95]
