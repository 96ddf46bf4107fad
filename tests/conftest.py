"""Shared fixtures: the repository's test data (tests/data/: the reference cases and the
measured-run development sets, copied into the repository with a provenance line), the command
line run in this process, and the Hugging Face configs of tests/data/hf/ read once. Plain
builders that test modules need at import time are in builders.py."""

import warnings
from pathlib import Path

import pytest
from builders import DATA, data_path

from layoutsearch import cli
from layoutsearch.core.catalogue import HfConfigWarning, read_hf_config


@pytest.fixture(scope="session")
def data_file():
    """``data_file(name)``: the path of tests/data/NAME; a missing file fails the test that asks for it."""

    def get(name: str) -> Path:
        try:
            return data_path(name)
        except FileNotFoundError as exc:
            pytest.fail(str(exc))

    return get


@pytest.fixture
def cli_main(capsys):
    """``cli_main(*argv)``: ``cli.main`` in this process (arguments as strings), as the console
    script runs it: (exit code, stdout, stderr)."""

    def run(*argv) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture
def bad_input(cli_main):
    """``bad_input(*argv, code=2)``: runs the command and checks the contract of bad input (that
    exit code and exactly one 'error:' line on stderr, no traceback); the line, stripped."""

    def check(*argv, code: int = 2) -> str:
        got, _, err = cli_main(*argv)
        assert got == code, err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        return err.strip()

    return check


@pytest.fixture(scope="session")
def imported():
    """Every config of tests/data/hf/ read once (their unused-key warnings silenced): name (the
    file's stem) -> HfImport."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HfConfigWarning)
        return {path.stem: read_hf_config(path) for path in sorted((DATA / "hf").glob("*.json"))}
