"""The command outputs README.md and examples/README.md show are what the commands print now."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_shown_command_outputs_are_current():
    """scripts/refresh_docs.py --check reruns every complete `$ layoutsearch ...` block (all but the
    solver's wall time must match); regenerate with `python scripts/refresh_docs.py`."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "refresh_docs.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    stale = [line for line in r.stdout.splitlines() if line.startswith("stale")]
    assert r.returncode == 0 and not stale, r.stdout + r.stderr
