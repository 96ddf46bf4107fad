"""The `layoutsearch` command: parse, call the library, print. Exit codes: 0 found, 1 nothing
feasible, 2 bad input (one line on stderr naming the option or field and the value, never a
traceback).

One module per command (``models``, ``clusters``, ``estimate``, ``solve``, ``explain``,
``export``, ``validate``, ``calibrate``, ``sweep``, ``plot``), each with ``register(app)``;
estimate, solve, explain and sweep build their options from their one declaration
(``core.options``, through ``cli.options``); ``common`` holds the formats and the error and file
handling. A command's module is imported
when that command runs (``LazyGroup``, click's lazily loaded subcommands), so `layoutsearch
solve` does not pay for the validation, calibration and sweep machinery.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import re
import sys
import warnings

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from layoutsearch._version import __version__
from layoutsearch.cli.common import one_line, reports_errors
from layoutsearch.core.errors import LayoutsearchError, LayoutsearchWarning
from layoutsearch.report import render

__all__ = [
    "app",
    "main",
    "reports_errors",
    "usage_message",
    "COMMANDS",
    "command_module",
    "loaded_command",
]

COMMANDS = (
    "models",
    "clusters",
    "estimate",
    "solve",
    "explain",
    "export",
    "validate",
    "calibrate",
    "sweep",
    "plot",
    "plan",
)


def command_module(name: str):
    """The module of command ``name`` (``layoutsearch.cli.<name>``), imported on first use."""
    return importlib.import_module(f"layoutsearch.cli.{name}")


WIDE_HELP = (
    f"Tables {render.WIDE_COLUMNS} columns wide, every column, even on a narrower terminal (by "
    "default a table fits the terminal, leaving columns out in a stated order)"
)


@functools.cache
def loaded_command(name: str):
    """Command ``name`` as `layoutsearch NAME` runs it: its options, then ``--wide``."""
    module = command_module(name)
    if hasattr(module, "command"):  # built from the declared options (cli.options)
        command = module.command()
    else:
        single = typer.Typer(add_completion=False)
        module.register(single)
        command = typer.main.get_group(single).commands[name]
    command.params.append(_wide_option())
    return command


def _wide_option():
    """``--wide`` after the command name, as before it (`layoutsearch --wide solve ...`)."""
    from typer.main import _get_param
    from typer.models import ParamMeta

    info = typer.Option(False, "--wide", help=WIDE_HELP)
    param = _get_param(ParamMeta(name="wide", default=info, annotation=bool))
    param.expose_value = False
    param.callback = lambda ctx, param, value: render.set_wide(True) if value else None
    return param


class LazyGroup(TyperGroup):
    """The commands, each built from its module only when it is asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        return loaded_command(name) if name in COMMANDS else None


app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Proven-optimal parallel layouts for transformer training.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"layoutsearch {__version__}")
        raise typer.Exit(0)


@app.callback()
def _group(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print the version and exit.",
    ),
    wide: bool = typer.Option(
        False,
        "--wide",
        help=WIDE_HELP,
    ),
) -> None:
    """Proven-optimal parallel layouts for transformer training."""
    render.set_wide(wide)


# glibc's mallopt parameters (malloc.h) and the values ``run`` sets: blocks up to 32 MiB (the
# largest threshold glibc takes) come from the heap, and the heap keeps up to 1 GiB it freed
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 << 20, 1 << 30


def _reuse_freed_memory() -> None:
    """Let the process reuse the memory it frees: glibc maps a block above its dynamic threshold
    afresh and unmaps it when freed (and trims the heap), so each of the search's large temporary
    arrays (a chunk's terms: megabytes) is paged in again, zeroed by the kernel (about 1 s of
    system time of the largest solves). Nothing where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)


def run() -> int:
    """The console script and ``python -m layoutsearch``: ``main`` with freed memory reused
    (``_reuse_freed_memory``), then the process's objects are moved out of the cyclic garbage
    collector's reach (``gc.freeze``): the interpreter's shutdown would otherwise walk every one
    of them once more (about 0.15 s of the main job, more than its search) to free what the exit
    frees anyway."""
    _reuse_freed_memory()
    code = main()
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; an input error is one line on stderr and exit 2, an infeasible search exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    # the command loads no pydantic plugin: skip pydantic's scan of every installed package's
    # entry points on its first validation (a setting the user's environment may still override)
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            code = app(args=argv or ["--help"], prog_name="layoutsearch", standalone_mode=False)
    except LayoutsearchError as exc:
        typer.echo(f"error: {one_line(str(exc))}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except (
        typer.TyperException
    ) as exc:  # click usage errors: unknown option, bad value, missing argument
        typer.echo(f"error: {one_line(usage_message(exc))}", err=True)
        return 2
    return code if isinstance(code, int) else 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A LayoutsearchWarning is one `warning:` line on stderr; any other warning is Python's own."""
    if issubclass(category, LayoutsearchWarning):
        typer.echo(f"warning: {one_line(str(message))}", err=True)
    else:
        _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


_PYTHON_SHOWWARNING = warnings.showwarning


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
