"""The `layoutsearch` command: parse, call the library, print. Exit codes: 0 found, 1 nothing
feasible, 2 bad input (one line on stderr naming the option or field and the value, never a
traceback).

One module per command (``models``, ``clusters``, ``estimate``, ``solve``, ``explain``,
``export``, ``validate``, ``calibrate``, ``sweep``, ``plot``), each with ``register(app)``;
``common`` holds the shared options (``SearchArgs``: the search options of solve and explain,
declared once), the formats and the error and file handling.
"""

from __future__ import annotations

import re
import sys

import typer
from pydantic import ValidationError

from layoutsearch.cli import (
    calibrate, clusters, common, estimate, explain, export, models, plot, solve, sweep, validate,
)
from layoutsearch.cli.common import one_line, reports_errors
from layoutsearch.core.errors import LayoutsearchError

__all__ = ["app", "main", "reports_errors", "usage_message", "COMMANDS"]

COMMANDS = (models, clusters, estimate, solve, explain, export, validate, calibrate, sweep, plot)

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Proven-optimal parallel layouts for transformer training.")
for _command in COMMANDS:
    _command.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; an input error is one line on stderr and exit 2, an infeasible search exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=argv or ["--help"], prog_name="layoutsearch", standalone_mode=False)
    except LayoutsearchError as exc:
        typer.echo(f"error: {one_line(str(exc))}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except typer.TyperException as exc:  # click usage errors: unknown option, bad value, missing argument
        typer.echo(f"error: {one_line(usage_message(exc))}", err=True)
        return 2
    return code if isinstance(code, int) else 0


def usage_message(exc: typer.TyperException) -> str:
    """Click's message, with the value typer's pydantic coercion refused (its message leaves it out)."""
    message = exc.format_message()
    extra = re.fullmatch(r"Got unexpected extra argument\(s\) \((.*)\)", message, re.S)
    if extra:  # click leaves the value unquoted: "(1)" would not read as the argument given
        return f"unexpected extra argument(s) '{extra[1]}' (an option's value given without its option?)"
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and cause.errors():
        value = cause.errors()[0].get("input")
        if isinstance(value, (str, int, float)) and f"'{value}'" not in message:
            message = f"{message.rstrip('.')} (got {str(value)[:40]!r})"
    return message


if __name__ == "__main__":
    sys.exit(main())
