"""The sweep's files: the fsynced journal and the atomically rewritten Parquet/CSV table."""

from __future__ import annotations

import csv
import json
import os
import tempfile

from layoutsearch.core.errors import InvalidArgumentError



# One row per point. Units in the names; kinds drive the Parquet schema and CSV parsing.
COLUMNS: list[tuple[str, str]] = [
    ("point_id", "str"), ("model", "str"), ("cluster", "str"), ("num_devices", "int"),
    ("global_batch_seqs", "int"), ("seq_len", "int"),
    ("status", "str"), ("objective_s", "float"), ("bound_s", "float"), ("wall_s", "float"),
    ("num_candidates", "int"),
    ("dp", "int"), ("fsdp", "int"), ("tp", "int"), ("pp", "int"), ("cp", "int"),
    ("zero_stage", "int"), ("virtual_stages", "int"), ("num_microbatches", "int"), ("microbatch_seqs", "int"),
    ("recompute", "str"), ("sequence_parallel", "bool"), ("schedule", "str"), ("axes", "str"),
    ("peak_bytes", "float"), ("capacity_bytes", "float"),
    ("compute_s", "float"), ("exposed_comm_s", "float"), ("bubble_s", "float"), ("overhead_s", "float"),
    ("step_time_s", "float"), ("mfu", "float"), ("tokens_per_s", "float"), ("tokens_per_s_per_device", "float"),
    ("reason", "str"), ("time_limit_s", "float"), ("point_wall_s", "float"), ("layoutsearch_version", "str"),
    ("finished_at", "str"),
]
COLUMN_NAMES = [name for name, _ in COLUMNS]



# ----------------------------------------------------------------------------- files

def journal_path(output: str | os.PathLike) -> str:
    return f"{os.fspath(output)}.jsonl"


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    """Append-only JSON lines, one per finished point, fsynced; the parent is the only writer (flock)."""

    def __init__(self, path: str):
        self.path = path
        self._fh = None

    def open(self, fresh: bool = False) -> dict[str, dict]:
        """Lock, read (a torn or corrupt line is dropped and the file rewritten without it), append."""
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        self._fh = open(self.path, "a+b")
        try:
            import fcntl

            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock on this platform: one sweep per output is the user's duty
            pass
        except OSError:
            self._fh.close()
            raise InvalidArgumentError(f"--output: another sweep is writing '{self.path}'") from None
        if fresh:
            self._fh.truncate(0)
        self._fh.seek(0)
        data = self._fh.read()
        rows, good, bad = {}, [], 0
        for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
            try:
                row = json.loads(line)
                rows[row["point_id"]] = row
                good.append(line)
            except (ValueError, KeyError, TypeError):
                bad += 1
        if bad or (data and not data.endswith(b"\n")):
            self._rewrite(good)
        return rows

    def _rewrite(self, lines: list[bytes]) -> None:
        # Same inode, so the lock stays: write the good lines back and cut what follows.
        self._fh.seek(0)
        self._fh.truncate(0)
        self._fh.write(b"".join(line + b"\n" for line in lines))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, row: dict) -> None:
        self._fh.write((json.dumps(row, separators=(",", ":")) + "\n").encode())
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def check_output(path: str | os.PathLike) -> str:
    """The output path as a string; .parquet needs pyarrow (checked before any solving)."""
    path = os.fspath(path)
    if not path.endswith((".parquet", ".csv")):
        raise InvalidArgumentError(f"--output: '{path}' must end in .parquet or .csv")
    if path.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InvalidArgumentError("--output: Parquet needs `pip install layoutsearch[parquet]` "
                                       "(or write a .csv)") from None
    return path


def write_table(rows: list[dict], path: str) -> None:
    """Parquet for .parquet, CSV otherwise; whole or not at all (temporary file, fsync, os.replace)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the table gets the usual permissions
        if path.endswith(".parquet"):
            os.close(fd)
            import pyarrow as pa
            import pyarrow.parquet as pq

            kinds = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}
            schema = pa.schema([(name, kinds[kind]) for name, kind in COLUMNS],
                               metadata={"generator": "layoutsearch sweep"})
            table = pa.Table.from_pylist([{k: r.get(k) for k in COLUMN_NAMES} for r in rows], schema=schema)
            pq.write_table(table, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        else:
            with os.fdopen(fd, "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=COLUMN_NAMES, extrasaction="ignore")
                writer.writeheader()
                writer.writerows({k: _csv_text(r.get(k)) for k in COLUMN_NAMES} for r in rows)
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(folder)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _csv_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def read_table(path: str | os.PathLike) -> list[dict]:
    """The rows of a sweep file (Parquet or CSV), typed as in COLUMNS; empty CSV cells are None."""
    path = os.fspath(path)
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    parse = {"str": str, "int": int, "float": float, "bool": lambda s: s == "true"}
    kinds = dict(COLUMNS)
    with open(path, newline="") as fh:
        return [{k: (None if v == "" else parse[kinds.get(k, "str")](v)) for k, v in row.items()}
                for row in csv.DictReader(fh)]


def _remove_stale_temporaries(path: str) -> None:
    """Temporary tables left by a killed run (we hold the journal lock, so none is in use)."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{os.path.basename(path)}."
    for name in os.listdir(folder):
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
