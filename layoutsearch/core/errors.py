"""Typed, actionable errors. Every message names the field and prints the numbers.

The CLI maps ``LayoutsearchError`` subclasses to their ``exit_code``: bad input (catalogue,
layout, argument) exits 2. An infeasible search is a result, not an error: its command exits 1.
"""

from __future__ import annotations

import difflib
from pathlib import Path


class LayoutsearchError(Exception):
    """Base class; ``exit_code`` is what the CLI returns for it."""

    exit_code = 2


class CatalogueError(LayoutsearchError):
    """A model, accelerator or cluster description that cannot be read or is invalid."""


class InvalidLayoutError(LayoutsearchError):
    """A layout that breaks a hard rule (product of degrees, divisibility, ...)."""


class InvalidArgumentError(LayoutsearchError):
    """A command-line value that cannot be parsed."""


class LayoutsearchWarning(UserWarning):
    """Something the engine accepts but a user should know (e.g. config keys it does not use);
    the CLI prints it as one ``warning:`` line on stderr."""


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' when a close choice exists, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


# The optional dependency groups of pyproject.toml, by extra (what `pip install` needs for each).
EXTRAS = {"ray": "ray>=2.9", "parquet": "pyarrow>=15", "plot": "matplotlib>=3.8"}


def missing_extra(what: str, extra: str) -> InvalidArgumentError:
    """The one-line error for an optional dependency that is not installed, with an install
    command that works (layoutsearch is installed from its repository, not a package index)."""
    checkout = Path(__file__).resolve().parents[2]
    local = (
        f"; from the checkout: pip install -e '{checkout}[{extra}]'"
        if (checkout / "pyproject.toml").is_file()
        else ""
    )
    return InvalidArgumentError(
        f"{what} needs the optional '{extra}' dependencies: pip install '{EXTRAS[extra]}'{local}"
    )
