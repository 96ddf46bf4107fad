"""Every file the package reads or writes goes through here, so that each failure is one line.

Reading: ``read_text`` (UTF-8, a BOM allowed), ``read_json`` and ``read_yaml``. Only a regular
file is read: a directory, a FIFO, a device or a socket is refused from ``os.stat`` before it is
opened, and the open is non-blocking, so a FIFO swapped in meanwhile cannot hang the read. A file
that cannot be opened, is not UTF-8, is not JSON/YAML, nests too deeply to parse or repeats a
key in a YAML mapping raises the given ``LayoutsearchError`` subclass (exit 2) naming the option
or field and the path. YAML is parsed by libyaml (``yaml.CSafeLoader``) where PyYAML has it, else
by the pure-Python ``SafeLoader``: the same constructors and resolver, so the same documents.

Writing: ``atomic_write`` writes whole or not at all: a temporary file in the target's
directory, fsynced, renamed over the target (``os.replace``), the directory fsynced. Any
failure (no such directory, a directory as the target, no permission, a full disk, an
interrupt) removes the temporary file and leaves the target as it was; an ``OSError`` becomes
one line naming the option and the path. Only a regular file (or nothing) is replaced: a FIFO,
a device or a socket at the path is refused, as is a read-only file. A symlink given as the path
is followed to its target, which is replaced (the link stays). A new file gets the mode a plain
``open(path, "w")`` would give it (0666 less the umask), not mkstemp's 0600; a replaced one
keeps its mode (and, where permitted, its owner).
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError
from layoutsearch.core.units import MIB

PathArg = str | os.PathLike  # a file's path as the commands and the API take it
Raises = type[LayoutsearchError]  # what a bad file raises (exit code 2 by default)

__all__ = [
    "validated",
    "label",
    "says",
    "read_bytes",
    "read_text",
    "read_json",
    "read_yaml",
    "parse_yaml",
    "SafeLoader",
    "atomic_write",
    "write_error",
    "temp_prefix",
    "TEMP_SUFFIX",
    "fsync_dir",
    "check_regular",
    "MAX_INPUT_BYTES",
]


MAX_INPUT_BYTES = (
    256 * MIB
)  # /dev/zero or a runaway file as an input is refused, not read to the end


def validated(schema: type[BaseModel], data: Any, where: str, error: Raises = InvalidArgumentError):
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


def label(path: PathArg, what: str | None) -> str:
    """How messages name a file: "RESULT: 'r.json'", or the path alone without ``what``."""
    return f"{what}: '{os.fspath(path)}'" if what else os.fspath(path)


def says(path: PathArg, what: str | None, problem: str) -> str:
    """ "RESULT: 'r.json' is not JSON (...)" or, without ``what``, "r.json: not JSON (...)"."""
    return f"{label(path, what)} is {problem}" if what else f"{os.fspath(path)}: {problem}"


def _failed(verb: str, path: PathArg, what: str | None, exc: OSError) -> str:
    """ "RESULT: cannot read 'r.json' (No such file or directory)" or "r.json: cannot read (...)"."""
    reason = exc.strerror or type(exc).__name__
    return (
        f"{what}: cannot {verb} '{os.fspath(path)}' ({reason})"
        if what
        else f"{os.fspath(path)}: cannot {verb} ({reason})"
    )


def read_bytes(
    path: PathArg,
    what: str | None = None,
    error: Raises = InvalidArgumentError,
) -> bytes:
    """The bytes of a regular file; missing, not a regular file or no permission is one ``error`` line."""
    _check_name(path, what, error)
    try:
        check_regular(os.stat(path).st_mode, path, what, error)
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(_failed("read", path, what, exc)) from None
    try:
        check_regular(os.fstat(fd).st_mode, path, what, error)  # swapped since the stat
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise error(_failed("read", path, what, exc)) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise error(
            says(
                path,
                what,
                f"larger than the {MAX_INPUT_BYTES // MIB} MiB an input of this package may be",
            )
        )
    return data


_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO opened for reading does not wait for a writer
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(mode: int, path, what: str | None, error: Raises = InvalidArgumentError) -> None:
    """A directory, a FIFO, a device or a socket is one ``error`` line naming the path."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
        raise error(says(path, what, f"{kind}, not a regular file"))


def _check_name(path: PathArg, what: str | None, error: Raises) -> None:
    """A path no file can have (a NUL byte in it) is refused before the OS is asked."""
    if "\0" in os.fspath(path):
        raise error(says(path, what, "not a file name (it holds a NUL byte)"))


def read_text(path: PathArg, what: str | None = None, error: Raises = InvalidArgumentError) -> str:
    """The file as UTF-8 text (a BOM is allowed); unreadable or not UTF-8 is one ``error`` line."""
    data = read_bytes(path, what, error)
    return _parsed(lambda: data.decode("utf-8-sig"), "UTF-8 text", path, what, error)


def read_json(path: PathArg, what: str | None = None, error: Raises = InvalidArgumentError) -> Any:
    """Parse a JSON file (NaN and Infinity refused: they are not JSON)."""
    text = read_text(path, what, error)
    return _parsed(lambda: json.loads(text, parse_constant=_no_constant), "JSON", path, what, error)


T = TypeVar("T")


def _parsed(parse: Callable[[], T], kind: str, path: PathArg, what: str | None, error: Raises) -> T:
    """``parse()`` of the contents of ``path``; bytes that are not UTF-8, text that is not
    ``kind`` (JSON or YAML) or nests too deeply are one ``error`` line naming the path."""
    try:
        return parse()
    except (ValueError, RecursionError, yaml.YAMLError) as exc:
        raise error(says(path, what, _problem(exc, kind))) from None


def _problem(exc: Exception, kind: str) -> str:
    """What a failed parse says: the offending byte, line and column where the parser names them."""
    if isinstance(exc, UnicodeDecodeError):
        byte = exc.object[exc.start]
        return f"not UTF-8 text (byte 0x{byte:02x} at offset {exc.start}); save the file as UTF-8"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["syntax error"])[0]
        if problem == "exceeded maximum nesting depth":  # libyaml's limit (1000 levels)
            return _TOO_DEEP
        return f"malformed YAML{at}: {problem}"
    if isinstance(exc, RecursionError):
        return _TOO_DEEP
    return f"not {kind} ({exc})"  # a value the parser refuses: NaN in JSON, a 13th month in YAML


_TOO_DEEP = "nested too deeply to be a document of this package"


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


class _UniqueKeys:
    """A mapping that names a key twice is a ConstructorError at the second (PyYAML keeps the
    last); plain scalars are resolved through a memo (the resolver's regular expressions are most
    of the time a large file takes)."""

    def construct_mapping(self, node, deep=False):
        merges = isinstance(node, yaml.MappingNode) and any(k.tag == _MERGE for k, _ in node.value)
        keys = list(node.value) if isinstance(node, yaml.MappingNode) else []
        mapping = super().construct_mapping(node, deep)
        if merges or len(mapping) != len(keys):  # `<<: *base` keys may be overridden
            seen = set()
            for key_node, _ in keys:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {str(key)[:80]!r}", key_node.start_mark
                    )
                seen.add(key)
        return mapping

    def resolve(self, kind, value, implicit):
        if kind is not yaml.ScalarNode or not implicit[0]:
            return super().resolve(kind, value, implicit)
        memo = self.__dict__.setdefault("_tags", {})
        tag = memo.get(value)
        if tag is None:
            tag = memo[value] = super().resolve(kind, value, implicit)
        return tag


_MERGE = "tag:yaml.org,2002:merge"


# the base is libyaml's loader where PyYAML was built with it, chosen at import: no static type
class SafeLoader(_UniqueKeys, getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader, libyaml's parser where available, refusing repeated keys."""


class PurePythonSafeLoader(_UniqueKeys, yaml.SafeLoader):
    """The same loader without libyaml (what ``SafeLoader`` is where PyYAML was built without it)."""


def parse_yaml(
    text: str,
    path: PathArg,
    what: str | None = None,
    error: Raises = InvalidArgumentError,
) -> Any:
    """``text`` (the contents of ``path``) parsed by ``SafeLoader``; malformed, a repeated key or
    nesting too deep is one ``error`` line naming the path (``says``)."""
    return _parsed(lambda: yaml.load(text, Loader=SafeLoader), "YAML", path, what, error)


def read_yaml(path: PathArg, what: str | None = None, error: Raises = InvalidArgumentError) -> Any:
    """Parse a YAML file (``parse_yaml``); a syntax error names the line and column."""
    text = read_text(path, what, error)
    return parse_yaml(text, path, what, error)


# ----------------------------------------------------------------------------- writing
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


TEMP_SUFFIX = ".tmp"


def temp_prefix(path: PathArg) -> str:
    """The name of ``atomic_write``'s temporary files for ``path`` start with this (then 8 random
    characters and TEMP_SUFFIX), short enough for any file-name limit."""
    return f".{os.path.basename(os.fspath(path))[:100]}."


def write_error(path: PathArg, what: str | None, exc: OSError) -> InvalidArgumentError:
    """The one-line error of a failed write."""
    return InvalidArgumentError(_failed("write", path, what, exc))


def atomic_write(
    path: PathArg,
    data: str | bytes,
    what: str | None = "--output",
    *,
    before_replace: Callable[[int], None] | None = None,
    follow: bool = True,
) -> None:
    """Write ``data`` to ``path`` whole or not at all (see the module doc).

    ``before_replace(fd)`` runs on the complete, fsynced temporary file just before the rename
    (the sweep journal locks it there, so the path never names an unlocked journal). With
    ``follow`` False a symlink at ``path`` is replaced itself, never written through (for a path
    the package derived, which the user did not name).
    """
    path = os.fspath(path)
    _check_name(path, what, InvalidArgumentError)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    target = os.path.realpath(path) if follow and os.path.islink(path) else path
    old = _replaceable(target, path, what)
    folder = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(target), suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise write_error(path, what, exc) from None
    try:
        try:
            _take_mode(fd, old)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            if before_replace is not None:
                before_replace(fd)
        finally:
            os.close(fd)
        _replaceable(target, path, what)  # nothing swapped in meanwhile
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise write_error(path, what, exc) from None
        raise
    fsync_dir(folder)


def _replaceable(target: str, path: str, what: str | None) -> os.stat_result | None:
    """The stat of the regular, writable file ``target`` (``path`` or the file its link names),
    None when there is none; a directory, a FIFO, a device or a read-only file is one line."""
    try:
        old = os.lstat(target)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise write_error(path, what, exc) from None
    if stat.S_ISLNK(old.st_mode):  # a link not to be followed is replaced itself
        return None
    if stat.S_ISDIR(old.st_mode):
        raise InvalidArgumentError(says(path, what, "a directory, not a file"))
    check_regular(old.st_mode, path, what, InvalidArgumentError)
    if not old.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise InvalidArgumentError(
            says(path, what, f"read-only (mode {stat.S_IMODE(old.st_mode):04o}); not replaced")
        )
    return old


def _take_mode(fd: int, old: os.stat_result | None) -> None:
    """The mode (and, where permitted, the owner) of the file replaced, else what
    ``open(path, "w")`` gives a new file."""
    if old is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    os.fchmod(fd, old.st_mode & 0o777)
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:  # not permitted: the file becomes the writer's
            pass


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
