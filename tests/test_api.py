"""The Python API takes the CLI's names and returns the result objects; the docs/usage.md example runs."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import layoutsearch as ls
from layoutsearch.cli import main
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import Layout

README = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


def test_solve_matches_the_cli(capsys):
    """ls.solve with CLI-style strings finds the layouts `layoutsearch solve --format json` prints."""
    result = ls.solve(
        model="debug",
        cluster="h100-16",
        seqs=64,
        seq_len=1024,
        top=2,
        fix="tp=2",
        recompute="none,full",
    )
    assert (
        main(
            [
                "solve",
                "--model",
                "debug",
                "--cluster",
                "h100-16",
                "--seqs",
                "64",
                "--seq-len",
                "1024",
                "--top",
                "2",
                "--fix",
                "tp=2",
                "--recompute",
                "none,full",
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert [e.layout.all_degrees for e in result.layouts] == [r["degrees"] for r in doc["layouts"]]
    assert [e.step_time_s for e in result.layouts] == [r["time_s"]["step"] for r in doc["layouts"]]
    assert all(e.layout.tp == 2 and e.layout.recompute in ("none", "full") for e in result.layouts)


def test_estimate_takes_strings_mappings_or_layouts():
    """The same layout given three ways costs the same."""
    a = ls.estimate("debug", "h100-16", "fsdp=8,tp=2", seqs=64, seq_len=1024, num_microbatches=2)
    b = ls.estimate(
        "debug", "h100-16", {"fsdp": 8, "tp": 2}, seqs=64, seq_len=1024, num_microbatches=2
    )
    c = ls.estimate(
        "debug", "h100-16", Layout(fsdp=8, tp=2, num_microbatches=2), seqs=64, seq_len=1024
    )
    assert a.step_time_s == b.step_time_s == c.step_time_s and a.layout.degrees["tp"] == 2


def test_bad_input_raises_the_cli_error():
    with pytest.raises(
        InvalidArgumentError, match=r"fix: unknown degree 'tq' \(did you mean 'tp'\?\)"
    ):
        ls.solve("debug", "h100-16", seqs=64, fix="tq=2")


def test_version_is_the_package_version(capsys):
    """ls.__version__, `layoutsearch --version` and the installed metadata agree."""
    from importlib.metadata import version

    assert ls.__version__ == version("layoutsearch")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"layoutsearch {ls.__version__}"


def test_the_readme_example_runs_and_prints_what_the_readme_says():
    """The Python API block of docs/usage.md, run as it is, prints the output shown there."""
    text = README.read_text()
    code, shown = re.search(
        r"## Python API.*?```python\n(.*?)```\n\n```\n(.*?)```", text, re.S
    ).groups()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out == shown
