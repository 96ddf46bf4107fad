"""What the commands share: output formats, error reporting and writing files. The options
themselves are declared once, in ``core.options``; ``cli.options`` builds the commands' options
from them."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
import yaml

from layoutsearch.core import io
from layoutsearch.core.errors import LayoutsearchError, LayoutsearchWarning
from layoutsearch.core.options import Format


def reports_errors(command: Callable) -> Callable:
    """Turn a LayoutsearchError into one line on stderr and its exit code (2 bad input, 1 infeasible).
    The command's warnings are held until it ends: bad input (exit 2) is the error line alone."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        failure = other = None
        with warnings.catch_warnings(record=True) as held:
            warnings.simplefilter("always", LayoutsearchWarning)
            try:
                result = command(*args, **kwargs)
            except LayoutsearchError as exc:
                failure = exc
            except (
                BaseException
            ) as exc:  # typer.Exit (a layout that does not fit), KeyboardInterrupt
                other = exc
        # replayed outside the recording (inside it each replayed warning would be recorded again)
        if failure is not None:
            _replay(held, keep_ours=failure.exit_code != 2)
            typer.echo(f"error: {one_line(str(failure))}", err=True)
            raise typer.Exit(failure.exit_code) from None
        _replay(held)
        if other is not None:
            raise other
        return result

    return run


def _replay(held: list, keep_ours: bool = True) -> None:
    """Emit held warnings again (outside the recording), layoutsearch's own unless ``keep_ours`` is False."""
    for w in held:
        if keep_ours or not issubclass(w.category, LayoutsearchWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def one_line(text: str) -> str:
    """A message on one line: a newline inside a value must not split it, a control character
    (NUL, an escape sequence) is shown escaped rather than sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))


# ----------------------------------------------------------------------------- formats
def print_document(document: Any, fmt: str) -> None:
    """A result document on stdout as JSON or YAML; NaN or infinity in it is a bug (it is not JSON),
    never printed."""
    text = json.dumps(document, indent=2, allow_nan=False, default=float)
    typer.echo(
        text
        if fmt == Format.json
        else yaml.safe_dump(json.loads(text), sort_keys=False).rstrip("\n")
    )


def write_output(text: str, output: str | None, what: str = "--output") -> None:
    """``text`` on stdout without ``output``, else written whole or not at all (``io.atomic_write``)."""
    if not output:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    io.atomic_write(output, text, what)
    typer.echo(f"wrote {output}", err=True)


def finite_from(minimum: float) -> Callable[[float | None], float | None]:
    """Typer callback: a float option must be a finite number of at least ``minimum``, worded as the options'
    own checks word it (click's ranges let NaN through and would call it out of range)."""

    def check(value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"Input should be a finite number (got '{value}')")
        if value is not None and value < minimum:
            raise typer.BadParameter(
                f"Input should be greater than or equal to {minimum:g} (got '{value:g}')"
            )
        return value

    return check


FormatOpt = Annotated[Format, typer.Option("--format", help="table, json or yaml")]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", help="Output file (stdout without it)")
]


def exit_if_infeasible(run) -> None:
    """Exit 1 with the reason on stderr when the search found no layout."""
    if not run.result.layouts:
        what = "no layout" if run.explanation.get("stopped") else "no feasible layout"
        typer.echo(f"{what}: {one_line(run.explanation['message'])}", err=True)
        raise typer.Exit(1)


@contextlib.contextmanager
def progress_line(text: str) -> Iterator[Callable[[str], None]]:
    """While the block runs, one status line on stderr (spinner, ``text``, time elapsed) when
    stderr is a terminal, erased at the end; nothing when it is a pipe or a file. Yields a
    function that replaces the text (the phase in progress)."""
    if not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.console import Console  # rich's progress only on a terminal (import time)
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    ) as bar:
        task = bar.add_task(text, total=None)
        yield lambda new: bar.update(task, description=new)


def named(value: Any) -> str:
    """A model's or cluster's name for a status line (the option holds a name or, from a problem
    file, the object itself)."""
    return str(getattr(value, "name", value))
