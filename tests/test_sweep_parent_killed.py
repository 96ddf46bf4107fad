"""A sweep whose parent alone is killed with kill -9 leaves no worker behind, and the same
command resumes it (the workers would otherwise keep the journal's lock)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import LLAMA70B_V5P_SWEEP

from layoutsearch.sweep import journal_path, read_table

pytestmark = [
    pytest.mark.skipif(
        not Path("/proc/self/task").is_dir(), reason="reads child pids from /proc (Linux)"
    ),
    pytest.mark.slow,
]


def children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.update(int(c) for c in text)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_workers_exit_with_the_parent_and_the_same_command_resumes(tmp_path):
    out = tmp_path / "sweep.parquet"
    command = [
        sys.executable,
        "-m",
        "layoutsearch",
        *LLAMA70B_V5P_SWEEP,
        "--seqs",
        "256,512,1024",
        "-o",
        str(out),
        "--jobs",
        "2",
        "--no-progress",
    ]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = Path(journal_path(out))
    # the bounds are hang guards, generous for a loaded machine; the verdicts are the states
    assert wait_for(lambda: journal.exists() and journal.read_text().count("\n") >= 1, 600), (
        "hang guard: the sweep journalled no point within 600 s"
    )
    workers = children(parent.pid)
    assert workers, "the sweep should run its points in worker processes"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert wait_for(lambda: not any(alive(w) for w in workers), 120), (
        "a worker outlived its parent by 120 s"
    )
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)  # a hang guard
    assert rerun.returncode == 0, rerun.stderr
    rows = read_table(str(out))
    assert len(rows) == 15 and len({r["point_id"] for r in rows}) == 15
    assert "already done" in rerun.stderr or "solved now" in rerun.stderr
