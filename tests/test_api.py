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


def cli_argv(command: str, keywords: dict) -> list[str]:
    """The command line that asks ``command`` what the API keywords ask, ``--format json``: each keyword is its
    flag (underscores as dashes) and the value's str, a True keyword the flag alone."""
    argv = [command, "--format", "json"]
    for key, value in keywords.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def test_solve_matches_the_cli(capsys):
    """ls.solve with CLI-style strings finds the layouts `layoutsearch solve --format json` prints."""
    keywords = dict(
        model="debug",
        cluster="h100-16",
        seqs=64,
        seq_len=1024,
        top=2,
        fix="tp=2",
        recompute="none,full",
    )
    result = ls.solve(**keywords)
    assert main(cli_argv("solve", keywords)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e.layout.all_degrees for e in result.layouts] == [r["degrees"] for r in doc["layouts"]]
    assert [e.step_time_s for e in result.layouts] == [r["time_s"]["step"] for r in doc["layouts"]]
    assert all(e.layout.tp == 2 and e.layout.recompute in ("none", "full") for e in result.layouts)


def test_estimate_takes_strings_mappings_or_layouts():
    """The same layout given three ways costs the same."""
    a = ls.estimate("debug", "h100-16", "fsdp=8,tp=2", seqs=64, seq_len=1024, microbatches=2)
    b = ls.estimate("debug", "h100-16", {"fsdp": 8, "tp": 2}, seqs=64, seq_len=1024, microbatches=2)
    c = ls.estimate(
        "debug", "h100-16", Layout(fsdp=8, tp=2, num_microbatches=2), seqs=64, seq_len=1024
    )
    assert a.step_time_s == b.step_time_s == c.step_time_s and a.layout.degrees["tp"] == 2


def test_bad_input_raises_the_cli_error():
    """A bad keyword value is the CLI's one-line error, naming the keyword."""
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


WALL_KEYS = {"wall_s", "solver_wall_s"}


def without_wall_times(doc):
    """The document with every wall-time field removed (they differ from run to run)."""
    if isinstance(doc, dict):
        return {k: without_wall_times(v) for k, v in doc.items() if k not in WALL_KEYS}
    if isinstance(doc, list):
        return [without_wall_times(v) for v in doc]
    return doc


@pytest.mark.parametrize(
    "command, keywords",
    [
        (
            "solve",
            dict(model="debug", cluster="h100-16", seqs=64, seq_len=1024, top=2, fix="tp=2"),
        ),
        (
            "solve",
            dict(
                model="llama3-8b",
                cluster="h100-64",
                seqs=256,
                tokens=1e12,
                price_per_device_hour=2.5,
                what_if="hbm=2,link_bandwidth=0.5",
                precision="fp8",
            ),
        ),
        (
            "solve",
            dict(
                model="llama3-8b",
                cluster="v5p-64",
                seqs=128,
                tokens=2e12,
                what_if="peak_flops=2",
                recompute="none,full",
                export="maxtext",
                memory_margin_gib=1.5,
            ),
        ),
        (
            "explain",
            dict(model="debug", cluster="h100-8", seqs=32, tokens=1e11, sensitivity=True),
        ),
        (
            "estimate",
            dict(
                model="llama3-8b",
                cluster="h100-64",
                layout="fsdp=32,tp=2",
                seqs=64,
                tokens=1e12,
                price_per_device_hour=3.0,
                what_if="hbm_bandwidth=2",
                zero_stage=2,
            ),
        ),
    ],
)
def test_the_api_document_is_the_cli_json_document(capsys, tmp_path, command, keywords):
    """ls.solve / ls.explain / ls.estimate return the document `--format json` prints, field by
    field (wall times aside), with what-if, tokens, price and export targets."""
    run = getattr(ls, command)(**keywords)
    argv = cli_argv(command, keywords)
    if "export" in keywords:
        argv += ["-o", str(tmp_path / "export.txt")]
    assert main(argv) == 0
    cli_doc = json.loads(capsys.readouterr().out)
    api_doc = json.loads(json.dumps(run.document, default=float))
    assert set(api_doc) == set(cli_doc)
    for key in cli_doc:
        assert without_wall_times(api_doc[key]) == without_wall_times(cli_doc[key]), key
    if "what_if" in keywords:
        assert api_doc["what_if"]["factors"] and cli_doc["what_if"] == api_doc["what_if"]


def test_the_api_lists_its_names_and_refuses_unknown_keywords():
    """dir(layoutsearch) lists the API; a misspelt keyword is one line with a suggestion."""
    assert {"solve", "explain", "estimate", "problem"} <= set(dir(ls))
    with pytest.raises(InvalidArgumentError, match=r"unknown option 'seq_length' \(did you mean"):
        ls.solve("debug", "h100-8", seq_length=1024)
    with pytest.raises(
        InvalidArgumentError, match=r"seqs: Input should be greater than or equal to 1"
    ):
        ls.solve("debug", "h100-8", seqs=0)
