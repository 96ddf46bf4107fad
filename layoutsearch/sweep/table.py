"""The sweep's files: the fsynced journal and the atomically rewritten Parquet/CSV table."""

from __future__ import annotations

import csv
import io as textio
import json
import math
import os
import stat
from collections.abc import Callable
from typing import BinaryIO

from layoutsearch.core import io
from layoutsearch.core.errors import InvalidArgumentError, missing_extra
from layoutsearch.core.specs import ALL_DEGREE_NAMES

# One row per point. Units in the names; kinds drive the Parquet schema and CSV parsing.
COLUMNS: list[tuple[str, str]] = [
    ("point_id", "str"),
    ("model", "str"),
    ("cluster", "str"),
    ("num_devices", "int"),
    ("global_batch_seqs", "int"),
    ("seq_len", "int"),
    ("framework", "str"),
    ("precision", "str"),
    ("status", "str"),
    ("objective_s", "float"),
    ("bound_s", "float"),
    ("wall_s", "float"),
    ("num_candidates", "int"),
    ("dp", "int"),
    ("fsdp", "int"),
    ("tp", "int"),
    ("pp", "int"),
    ("cp", "int"),
    ("ep", "int"),
    ("etp", "int"),
    ("zero_stage", "int"),
    ("virtual_stages", "int"),
    ("num_microbatches", "int"),
    ("microbatch_seqs", "int"),
    ("recompute", "str"),
    ("sequence_parallel", "bool"),
    ("schedule", "str"),
    ("axes", "str"),
    ("peak_bytes", "float"),
    ("capacity_bytes", "float"),
    ("compute_s", "float"),
    ("exposed_comm_s", "float"),
    ("bubble_s", "float"),
    ("overhead_s", "float"),
    ("step_time_s", "float"),
    ("mfu", "float"),
    ("tokens_per_s", "float"),
    ("tokens_per_s_per_device", "float"),
    ("risks", "str"),  # the ranking's risks the layout carries, "; "-joined ("none" for none)
    ("training_tokens", "float"),
    ("price_per_device_hour", "float"),
    ("goodput", "float"),
    ("train_days", "float"),
    ("device_hours", "float"),
    ("cost", "float"),
    ("price_per_kwh", "float"),
    ("energy_j_per_step", "float"),
    ("energy_j_per_token", "float"),
    ("energy_kwh", "float"),
    ("energy_cost", "float"),
    ("max_site_power_mw", "float"),
    ("site_power_mw", "float"),
    ("reason", "str"),
    ("time_limit_s", "float"),
    ("point_wall_s", "float"),
    ("layoutsearch_version", "str"),
    ("finished_at", "str"),
]
COLUMN_NAMES = [name for name, _ in COLUMNS]
KINDS = dict(COLUMNS)
STATUSES = ("OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID", "ERROR")
WITH_LAYOUT = ("OPTIMAL", "FEASIBLE")
REQUIRED = ("point_id", "model", "cluster", "global_batch_seqs", "seq_len", "status")
LAYOUT_COLUMNS = (
    *ALL_DEGREE_NAMES,
    *"zero_stage virtual_stages num_microbatches recompute peak_bytes capacity_bytes".split(),
    *"compute_s exposed_comm_s bubble_s overhead_s step_time_s mfu".split(),
    *"tokens_per_s tokens_per_s_per_device".split(),
)
# only with a layout (and training_tokens; the energy with a catalogued board power)
PLAN_COLUMNS = ("train_days", "device_hours", "cost", "energy_j_per_step", "energy_kwh")


# ----------------------------------------------------------------------------- rows
def _type_ok(kind: str, value) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**62
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1e30
    )


def check_row(row) -> str | None:
    """Why ``row`` is not a row of a sweep (None when it is): the columns of this version, each of
    its kind (numbers finite and non-negative), the inputs present, the point id made of them, a
    known status, and a whole layout exactly when the status has one."""
    if not isinstance(row, dict):
        return f"not an object ({type(row).__name__})"
    unknown = [k for k in row if k not in KINDS]
    if unknown:
        return f"unknown column '{str(unknown[0])[:40]}'"
    for name in REQUIRED:
        if row.get(name) is None:
            return f"no {name}"
    for name, value in row.items():
        if value is not None and not _type_ok(KINDS[name], value):
            return f"column {name}: {value!r:.40} is not {_KIND_NAMES[KINDS[name]]}" + (
                " (finite, >= 0)" if KINDS[name] in ("int", "float") else ""
            )
    base = f"{row['model']}|{row['cluster']}|{row['global_batch_seqs']}|{row['seq_len']}"
    if row["point_id"] != base and not row["point_id"].startswith(base + "|"):  # |option=value
        return (
            f"point_id '{row['point_id'][:80]}' does not match its model, cluster, batch and length"
        )
    if row["status"] not in STATUSES:
        return f"status '{row['status'][:40]}' is not one of {', '.join(STATUSES)}"
    has_layout = [row.get(name) is not None for name in LAYOUT_COLUMNS]
    if row["status"] in WITH_LAYOUT and not all(has_layout):
        return f"status {row['status']} without a whole layout"
    if row["status"] not in WITH_LAYOUT and any(has_layout):
        return f"status {row['status']} with a layout"
    if row["status"] not in WITH_LAYOUT and any(row.get(name) is not None for name in PLAN_COLUMNS):
        return f"status {row['status']} with a time or cost to train"
    if (
        all(has_layout)
        and min(row[k] for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "etp", "num_microbatches"))
        < 1
    ):
        return "a degree or microbatch count below 1"
    return None


# ----------------------------------------------------------------------------- files


def journal_path(output: str | os.PathLike) -> str:
    return f"{os.fspath(output)}.jsonl"


def _lock(fh) -> None:
    """An exclusive, non-blocking flock (BlockingIOError when another process holds it)."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: one sweep per output is the user's duty
        return
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


class Journal:
    """Append-only JSON lines, one per finished point, fsynced; the parent is the only writer (flock).

    Only valid rows (``check_row``) are trusted as finished points; a torn, corrupt or foreign
    line is dropped (``dropped`` counts them) and the journal rewritten without it, atomically.
    """

    def __init__(self, path: str):
        self.path = path
        self.dropped = 0
        self._fh: BinaryIO | None = None

    def open(self, fresh: bool = False) -> dict[str, dict]:
        """Lock, read (dropping what is not a valid row, as said above), and stay open for appends."""
        fh = self._fh = self._open_locked()
        try:
            fh.seek(0)
            data = fh.read()
        except OSError as exc:
            self.close()
            raise InvalidArgumentError(
                f"--output: cannot read '{self.path}' ({exc.strerror})"
            ) from None
        rows, good = {}, []
        lines = data.split(b"\n")
        for line in lines[:-1] if data.endswith(b"\n") else lines:
            row = _parse_line(line)
            if row is None or fresh:
                continue
            rows[row["point_id"]] = row
            good.append(line)
        self.dropped = 0 if fresh else sum(1 for line in lines if line) - len(good)
        if len(good) != sum(1 for line in lines if line) or (data and not data.endswith(b"\n")):
            try:
                self._rewrite(good)
            except BaseException:
                self.close()
                raise
        return rows

    def _open_locked(self) -> BinaryIO:
        for _ in range(5):
            fh = _open_journal(self.path)
            try:
                _lock(fh)
            except OSError:
                fh.close()
                raise InvalidArgumentError(
                    f"--output: another sweep is writing '{self.path}'"
                ) from None
            try:  # a rewrite by another process may have renamed a new journal over the one we locked
                here, there = os.fstat(fh.fileno()), os.lstat(self.path)
                if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                    return fh
            except FileNotFoundError:
                pass
            fh.close()
        raise InvalidArgumentError(f"--output: '{self.path}' keeps being replaced (another sweep?)")

    def _rewrite(self, lines: list[bytes]) -> None:
        """The good lines, written whole to a temporary file locked before it is renamed over the journal."""
        new: list[BinaryIO] = []

        def lock_new(fd: int) -> None:
            fh = os.fdopen(os.dup(fd), "a+b", buffering=0)
            new.append(fh)
            _lock(fh)

        try:
            io.atomic_write(
                self.path,
                b"".join(line + b"\n" for line in lines),
                "--output",
                before_replace=lock_new,
                follow=False,
            )
        except BaseException:
            for fh in new:
                fh.close()
            raise
        self._open_file().close()
        self._fh = new[0]
        self._fh.seek(0, os.SEEK_END)

    def _open_file(self) -> BinaryIO:
        if self._fh is None:
            raise RuntimeError(f"journal {self.path} is not open (Journal.open first)")
        return self._fh

    def append(self, row: dict) -> None:
        """One line, written whole (unbuffered: a failed write leaves nothing for close to flush)
        and fsynced; a full disk is one line (the torn end is dropped when the journal is opened)."""
        fh = self._open_file()
        view = memoryview((json.dumps(row, separators=(",", ":")) + "\n").encode())
        try:
            while view:
                view = view[fh.write(view) :]
            os.fsync(fh.fileno())
        except OSError as exc:
            raise io.write_error(self.path, "--output", exc) from None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _open_journal(path: str):
    """The journal opened unbuffered for reading and appending, created if absent; a symlink (the
    user named the table, not its journal), a FIFO or a device there is one line."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None  # absent (created below), or the open says why not
    if mode is not None and stat.S_ISLNK(mode):
        raise InvalidArgumentError(
            f"--output: '{path}' (the journal) is a symlink; a journal is never written through "
            f"one: remove it"
        )
    if mode is not None:
        io.check_regular(mode, path, "--output")
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise io.write_error(path, "--output", exc) from None
    fh = os.fdopen(fd, "a+b", buffering=0)
    try:
        io.check_regular(os.fstat(fd).st_mode, path, "--output")
    except InvalidArgumentError:
        fh.close()
        raise
    return fh


def _parse_line(line: bytes) -> dict | None:
    """A journal line's row, or None when the line is not a valid row (check_row)."""
    try:
        row = json.loads(line, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return None
    return row if check_row(row) is None else None


def _refuse(name: str):
    raise ValueError(name)


def check_output(path: str | os.PathLike) -> str:
    """The output path as a string; .parquet needs pyarrow (checked before any solving)."""
    path = os.fspath(path)
    if not path.endswith((".parquet", ".csv")):
        raise InvalidArgumentError(f"--output: '{path}' must end in .parquet or .csv")
    if os.path.isdir(path):
        raise InvalidArgumentError(f"--output: '{path}' is a directory")
    if os.path.exists(
        path
    ):  # a FIFO or a device is refused before any solving (a link: its target)
        io.check_regular(os.stat(path).st_mode, path, "--output")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidArgumentError(f"--output: '{path}': no such directory '{folder}'")
    if path.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise missing_extra("--output .parquet (or write a .csv)", "parquet") from None
    return path


def write_table(rows: list[dict], path: str) -> None:
    """Parquet for .parquet, CSV otherwise; whole or not at all (``io.atomic_write``)."""
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        kinds = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
        schema = pa.schema(
            [(name, kinds[kind]) for name, kind in COLUMNS],
            metadata={"generator": "layoutsearch sweep"},
        )
        table = pa.Table.from_pylist(
            [{k: r.get(k) for k in COLUMN_NAMES} for r in rows], schema=schema
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        data = sink.getvalue().to_pybytes()
    else:
        text = textio.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=COLUMN_NAMES, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: _csv_text(r.get(k)) for k in COLUMN_NAMES} for r in rows)
        data = text.getvalue().encode()
    io.atomic_write(path, data, "--output")


def _csv_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


_KIND_NAMES = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false"}
_PARSE: dict[str, Callable[[str], object]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": {"true": True, "false": False}.__getitem__,
}


def read_table(path: str | os.PathLike, what: str = "SWEEP_FILE") -> list[dict]:
    """The rows of a sweep file (Parquet or CSV), typed as in COLUMNS (empty CSV cells are None),
    each a valid row (``check_row``); anything else is one InvalidArgumentError naming ``what`` and the path."""
    path = os.fspath(path)
    where = io.label(path, what)
    if path.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = io.read_bytes(path, what)  # a regular file only (a FIFO would block pyarrow)
        try:
            rows = pq.read_table(pa.BufferReader(data)).to_pylist()
        except (pa.ArrowException, ValueError, OSError) as exc:
            raise InvalidArgumentError(
                f"{where}: not a sweep Parquet file ({str(exc).splitlines()[0][:120]})"
            ) from None
    else:
        rows = []
        reader = csv.DictReader(textio.StringIO(io.read_text(path, what), newline=""))
        try:
            for number, raw in enumerate(reader, start=2):
                if None in raw or None in raw.values():
                    raise InvalidArgumentError(
                        f"{where}: line {number} does not have one cell per column"
                    )
                row = {}
                for k, v in raw.items():
                    kind = KINDS.get(k)
                    if kind is None:
                        raise InvalidArgumentError(f"{where}: unknown column '{k[:40]}'")
                    try:
                        row[k] = None if v == "" else _PARSE[kind](v)
                    except (ValueError, KeyError):
                        raise InvalidArgumentError(
                            f"{where}: line {number}, column {k}: '{v[:40]}' is not {_KIND_NAMES[kind]}"
                        ) from None
                rows.append(row)
        except csv.Error as exc:
            raise InvalidArgumentError(f"{where}: not CSV ({exc})") from None
    for number, row in enumerate(rows, start=1):
        reason = check_row(row)
        if reason is not None:
            raise InvalidArgumentError(f"{where}: row {number} is not a sweep row: {reason}")
    return rows


def _remove_stale_temporaries(path: str) -> None:
    """Temporary tables left by a killed run (we hold the journal lock, so none is in use)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for prefix in (io.temp_prefix(path), io.temp_prefix(journal_path(path))):
        for name in names:
            if (
                name.startswith(prefix)
                and name.endswith(io.TEMP_SUFFIX)
                and len(name) == len(prefix) + 8 + 4
            ):
                try:
                    os.unlink(os.path.join(folder, name))
                except OSError:
                    pass
