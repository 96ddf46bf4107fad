"""Small things a new user trips over: table width, options that would do nothing, help that cites
documents the user does not have."""

import sys

import pytest

from layoutsearch.cli import main
from layoutsearch.report import render


@pytest.fixture
def terminal(monkeypatch):
    """stdout is an 80-column terminal."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    yield
    render.set_wide(False)


def test_tables_fit_the_terminal_unless_wide(terminal):
    """On a terminal tables take its width; --wide (or a pipe) gives 200 columns."""
    assert render.console().width == 80
    render.set_wide(True)
    assert render.console().width == render.WIDE_COLUMNS == 200


def test_a_pipe_gets_wide_tables(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert render.console().width == 200


def test_solve_refuses_an_output_file_without_export(capsys, tmp_path):
    """`solve -o FILE` without --export would silently write nothing: exit 2 saying what to do."""
    target = tmp_path / "x.sh"
    assert (
        main(
            ["solve", "--model", "debug", "--cluster", "h100-8", "--seqs", "16", "-o", str(target)]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "solve writes a file only with --export TARGET" in err
        and not target.exists()
    )


@pytest.mark.parametrize("command", ["solve", "explain", "estimate", "sweep", "export", "validate"])
def test_help_is_self_contained(capsys, command):
    """Help text does not send the user to documents they do not have."""
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out.lower()
    assert "design notes" not in text and "shared/" not in text


def test_wide_is_a_global_option(capsys):
    assert main(["--wide", "models"]) == 0
    assert "llama70b" in capsys.readouterr().out
