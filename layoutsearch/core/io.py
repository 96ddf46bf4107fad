"""Every file the package reads or writes goes through here, so that each failure is one line.

Reading: ``read_text`` (UTF-8, a BOM allowed), ``read_json`` and ``read_yaml``. A file that
cannot be opened, is not UTF-8, is not JSON/YAML or nests too deeply to parse raises the
given ``LayoutsearchError`` subclass (exit 2) naming the option or field and the path.

Writing: ``atomic_write`` writes whole or not at all: a temporary file in the target's
directory, fsynced, renamed over the target (``os.replace``), the directory fsynced. Any
failure (no such directory, a directory as the target, no permission, a full disk, an
interrupt) removes the temporary file and leaves the target as it was; an ``OSError`` becomes
one line naming the option and the path. The file gets the mode a plain ``open(path, "w")``
would give it (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError
from layoutsearch.core.units import MIB

__all__ = [
    "validated",
    "label",
    "says",
    "read_bytes",
    "read_text",
    "read_json",
    "read_yaml",
    "atomic_write",
    "write_error",
    "temp_prefix",
    "TEMP_SUFFIX",
    "fsync_dir",
    "MAX_INPUT_BYTES",
]


MAX_INPUT_BYTES = (
    256 * MIB
)  # /dev/zero or a runaway file as an input is refused, not read to the end


def validated(
    schema: type[BaseModel],
    data: Any,
    where: str,
    error: type[LayoutsearchError] = InvalidArgumentError,
):
    """``schema.model_validate(data)``; the first error is one ``error`` line naming the field and the value."""
    if not isinstance(data, dict):
        raise error(f"{where}: expected a mapping of fields, got {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        value = err.get("input")
        shown = "" if isinstance(value, (dict, list)) else f" (got {value!r:.80})"
        raise error(f"{where}: field '{loc}': {' '.join(str(err['msg']).split())}{shown}") from None


def label(path: str | os.PathLike, what: str | None) -> str:
    """How messages name a file: "RESULT: 'r.json'", or the path alone without ``what``."""
    return f"{what}: '{os.fspath(path)}'" if what else os.fspath(path)


def says(path: str | os.PathLike, what: str | None, problem: str) -> str:
    """ "RESULT: 'r.json' is not JSON (...)" or, without ``what``, "r.json: not JSON (...)"."""
    return f"{label(path, what)} is {problem}" if what else f"{os.fspath(path)}: {problem}"


def _failed(verb: str, path: str | os.PathLike, what: str | None, exc: OSError) -> str:
    """ "RESULT: cannot read 'r.json' (No such file or directory)" or "r.json: cannot read (...)"."""
    reason = exc.strerror or type(exc).__name__
    return (
        f"{what}: cannot {verb} '{os.fspath(path)}' ({reason})"
        if what
        else f"{os.fspath(path)}: cannot {verb} ({reason})"
    )


def read_bytes(
    path: str | os.PathLike,
    what: str | None = None,
    error: type[LayoutsearchError] = InvalidArgumentError,
) -> bytes:
    """The file's bytes; a missing file, a directory or no permission is one ``error`` line."""
    _check_name(path, what, error)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise error(_failed("read", path, what, exc)) from None
    if len(data) > MAX_INPUT_BYTES:
        raise error(
            says(
                path,
                what,
                f"larger than the {MAX_INPUT_BYTES // MIB} MiB an input of this package may be",
            )
        )
    return data


def _check_name(path: str | os.PathLike, what: str | None, error: type[LayoutsearchError]) -> None:
    """A path no file can have (a NUL byte in it) is refused before the OS is asked."""
    if "\0" in os.fspath(path):
        raise error(says(path, what, "not a file name (it holds a NUL byte)"))


def read_text(
    path: str | os.PathLike,
    what: str | None = None,
    error: type[LayoutsearchError] = InvalidArgumentError,
) -> str:
    """The file as UTF-8 text (a BOM is allowed); unreadable or not UTF-8 is one ``error`` line."""
    data = read_bytes(path, what, error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(
            says(
                path,
                what,
                f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save the file as UTF-8",
            )
        ) from None


def read_json(
    path: str | os.PathLike,
    what: str | None = None,
    error: type[LayoutsearchError] = InvalidArgumentError,
) -> Any:
    """Parse a JSON file (NaN and Infinity refused: they are not JSON)."""
    text = read_text(path, what, error)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise error(
            says(path, what, f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
        ) from None
    except ValueError as exc:  # _no_constant
        raise error(says(path, what, f"not JSON ({exc})")) from None
    except RecursionError:
        raise error(
            says(path, what, "nested too deeply to be a document of this package")
        ) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def read_yaml(
    path: str | os.PathLike,
    what: str | None = None,
    error: type[LayoutsearchError] = InvalidArgumentError,
) -> Any:
    """Parse a YAML file; a syntax error names the line and column."""
    text = read_text(path, what, error)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["syntax error"])[0]
        raise error(says(path, what, f"malformed YAML{at}: {problem}")) from None
    except RecursionError:
        raise error(
            says(path, what, "nested too deeply to be a document of this package")
        ) from None


# ----------------------------------------------------------------------------- writing
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


TEMP_SUFFIX = ".tmp"


def temp_prefix(path: str | os.PathLike) -> str:
    """The name of ``atomic_write``'s temporary files for ``path`` start with this (then 8 random
    characters and TEMP_SUFFIX), short enough for any file-name limit."""
    return f".{os.path.basename(os.fspath(path))[:100]}."


def write_error(path: str | os.PathLike, what: str | None, exc: OSError) -> InvalidArgumentError:
    """The one-line error of a failed write."""
    return InvalidArgumentError(_failed("write", path, what, exc))


def atomic_write(
    path: str | os.PathLike,
    data: str | bytes,
    what: str | None = "--output",
    *,
    before_replace: Callable[[int], None] | None = None,
) -> None:
    """Write ``data`` to ``path`` whole or not at all (see the module doc).

    ``before_replace(fd)`` runs on the complete, fsynced temporary file just before the rename
    (the sweep journal locks it there, so the path never names an unlocked journal).
    """
    path = os.fspath(path)
    _check_name(path, what, InvalidArgumentError)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    if os.path.isdir(path):
        raise InvalidArgumentError(says(path, what, "a directory, not a file"))
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(path), suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise write_error(path, what, exc) from None
    try:
        try:
            os.fchmod(fd, 0o666 & ~_umask())
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            if before_replace is not None:
                before_replace(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise write_error(path, what, exc) from None
        raise
    fsync_dir(folder)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (where the platform lets a directory be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
