"""Speed measures of the sweep's workers that must not change what they compute."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
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
