"""Sweeps: many (model, cluster, batch, sequence length) points, each solved for its best layout.

Durability, kill -9 included: only the parent process writes. It appends one JSON line per
finished point to a journal beside the output (``sweep.parquet`` -> ``sweep.parquet.jsonl``),
flushed and fsynced before the point counts as done, then rebuilds the Parquet or CSV file
from the journal in a temporary file renamed into place (``os.replace``), so the table is
always whole. A rerun with the same output repairs a torn last journal line, skips the points
the journal holds and rewrites the table: no point is lost or duplicated. A point that fails
(nothing fits, time limit without a layout, a cluster size that does not exist) is a row with
its ``status`` and ``reason``; it never stops the sweep.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import re
import signal
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Sequence

from .errors import InvalidArgumentError, LayoutsearchError

EXECUTORS = ("local", "ray")
RETRYABLE = ("ERROR", "UNKNOWN")  # statuses that --retry-failed solves again
MAX_RANGE_VALUES = 10_000
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)(?::([x+])(\d+))?\}")

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


# ----------------------------------------------------------------------------- points

@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One sweep point; ``id`` is stable across runs and keys the journal."""

    model: str
    cluster: str
    global_batch_seqs: int
    seq_len: int

    @property
    def id(self) -> str:
        return f"{self.model}|{self.cluster}|{self.global_batch_seqs}|{self.seq_len}"


def expand(text: str, field_name: str) -> list[str]:
    """Comma items with ranges: 'v5p-{256..8192:x2}' multiplies by 2 from 256 up to 8192,
    '{64..256:+64}' adds 64, '{1..4}' steps by 1; several ranges in one item multiply out."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InvalidArgumentError(f"{field_name}: empty item in '{text}'")
    return [value for item in items for value in _expand_item(item, field_name)]


def _expand_item(item: str, field_name: str) -> list[str]:
    start = item.find("{")
    if start < 0:
        if "}" in item:
            raise InvalidArgumentError(f"{field_name}: malformed range in '{item}' ('}}' without '{{')")
        return [item]
    match = _RANGE.match(item, start)
    if not match:
        raise InvalidArgumentError(f"{field_name}: malformed range in '{item}' (expected {{A..B:xF}} or "
                                   f"{{A..B:+S}} with whole numbers, e.g. 'v5p-{{256..8192:x2}}')")
    values = _range_values(match, item, field_name)
    tails = _expand_item(item[match.end():], field_name)
    return [f"{item[:start]}{value}{tail}" for value in values for tail in tails]


def _range_values(match: re.Match, item: str, field_name: str) -> list[int]:
    """The values A, A op S, ... up to B inclusive, for op 'x' (multiply) or '+' (add)."""
    first, last, op, step = int(match[1]), int(match[2]), match[3] or "+", int(match[4] or 1)
    if first > last:
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' runs backwards ({first} > {last})")
    if op == "x" and (first < 1 or step < 2):
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' needs a start >= 1 and a factor >= 2")
    if op == "+" and step < 1:
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' needs a step >= 1")
    values, value = [], first
    while value <= last:
        values.append(value)
        if len(values) > MAX_RANGE_VALUES:
            raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' has more than "
                                       f"{MAX_RANGE_VALUES} values")
        value = value * step if op == "x" else value + step
    return values


def _whole_numbers(texts: Sequence[str], field_name: str) -> list[int]:
    out = []
    for text in texts:
        for value in expand(text, field_name):
            if not value.isdigit() or int(value) < 1:
                raise InvalidArgumentError(f"{field_name}: '{value}' is not a whole number >= 1")
            out.append(int(value))
    return out


def _as_list(values: str | Sequence[str] | int | Sequence[int]) -> list[str]:
    return [str(v) for v in values] if isinstance(values, (list, tuple)) else [str(values)]


def expand_points(models, clusters, seqs, seq_len=4096) -> list[Point]:
    """Every (model, cluster, seq_len, seqs) combination, in that nesting order, without repeats.
    Each argument is a string (comma items and ranges allowed) or a list of them."""
    model_ids = [m for text in _as_list(models) for m in expand(text, "--model")]
    cluster_ids = [c for text in _as_list(clusters) for c in expand(text, "--cluster")]
    for name in cluster_ids:
        if "|" in name:
            raise InvalidArgumentError(f"--cluster: '{name}' contains '|'")
    batch = _whole_numbers(_as_list(seqs), "--seqs")
    lengths = _whole_numbers(_as_list(seq_len), "--seq-len")
    points = [Point(model=m, cluster=c, global_batch_seqs=b, seq_len=s)
              for m in model_ids for c in cluster_ids for s in lengths for b in batch]
    return list(dict.fromkeys(points))


# ----------------------------------------------------------------------------- one point

def solve_point(point: Point, time_limit_s: float) -> dict:
    """Solve one point for its best layout (top 1). Never raises: a failure is a row with a reason."""
    from .catalogue import load_model
    from .output import version
    from .search import solve
    from .specs import Workload
    from .topology import resolve_cluster

    start = time.perf_counter()
    row = _input_columns(point, time_limit_s) | {"layoutsearch_version": version()}
    try:
        model, cluster = load_model(point.model), resolve_cluster(point.cluster)
        workload = Workload(global_batch_seqs=point.global_batch_seqs, seq_len=point.seq_len)
        row["num_devices"] = cluster.num_devices
        result = solve(model, workload, cluster, top_k=1, time_limit_s=time_limit_s)
        row.update(status=result.status, objective_s=result.objective_value, bound_s=result.bound,
                   wall_s=result.wall_s, num_candidates=result.num_candidates)
        if result.layouts:
            row.update(_layout_columns(result.layouts[0]))
        else:
            row["reason"] = _why_no_layout(model, workload, cluster, result, time_limit_s)
    except LayoutsearchError as exc:
        row.update(status="ERROR", reason=str(exc))
    except Exception as exc:  # a bug in one point must not stop the sweep; the row says what broke
        row.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}")
    row["point_wall_s"] = time.perf_counter() - start
    return _finish(row)


def error_row(point: Point, time_limit_s: float, exc: BaseException) -> dict:
    """The row of a point whose worker died or whose task failed outside solve_point."""
    row = _input_columns(point, time_limit_s)
    row.update(status="ERROR", reason=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}")
    return _finish(row)


def _input_columns(point: Point, time_limit_s: float) -> dict:
    return {"point_id": point.id, "model": point.model, "cluster": point.cluster,
            "global_batch_seqs": point.global_batch_seqs, "seq_len": point.seq_len, "time_limit_s": time_limit_s}


def _finish(row: dict) -> dict:
    row["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return {name: row.get(name) for name in COLUMN_NAMES}


def _layout_columns(est) -> dict:
    from .output import layout_record

    rec = layout_record(est, 1)
    mem, t = rec["memory_bytes"], rec["time_s"]
    return {**rec["degrees"], "zero_stage": rec["zero_stage"], "virtual_stages": rec["virtual_stages"],
            "num_microbatches": rec["num_microbatches"], "microbatch_seqs": rec["microbatch_seqs"],
            "recompute": rec["recompute"], "sequence_parallel": rec["sequence_parallel"], "schedule": rec["schedule"],
            "axes": json.dumps(rec["axes"], separators=(",", ":")), "peak_bytes": mem["peak"],
            "capacity_bytes": mem["capacity"], "compute_s": t["compute"], "exposed_comm_s": t["exposed_comm"],
            "bubble_s": t["bubble"], "overhead_s": t["overhead"], "step_time_s": t["step"], "mfu": rec["mfu"],
            "tokens_per_s": rec["tokens_per_s"], "tokens_per_s_per_device": rec["tokens_per_s_per_device"]}


def _why_no_layout(model, workload, cluster, result, time_limit_s: float) -> str:
    if result.status == "UNKNOWN":
        return f"time limit {time_limit_s:g} s reached without a layout (raise --time-limit)"
    from .explain import infeasibility
    from .search import SearchOptions

    try:
        return infeasibility(model, workload, cluster, SearchOptions(), result.space, result.tables)["message"]
    except Exception as exc:  # the explanation is a courtesy; the status already says INFEASIBLE
        return f"no feasible layout (explanation failed: {type(exc).__name__}: {exc})"


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


# ----------------------------------------------------------------------------- executors

def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which stops them and keeps what is done."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_local(todo: list[Point], jobs: int, time_limit_s: float, on_row: Callable[[dict], None]) -> None:
    """A process pool (fork where the platform has it: the workers start with the package imported)."""
    if jobs == 1 or len(todo) == 1:
        for point in todo:
            on_row(solve_point(point, time_limit_s))
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context, initializer=_ignore_sigint)
    clean = False
    try:
        futures = {pool.submit(solve_point, point, time_limit_s): point for point in todo}
        for future in as_completed(futures):
            try:
                row = future.result()
            except Exception as exc:  # a worker died (out of memory, killed): the point is recorded
                row = error_row(futures[future], time_limit_s, exc)
            on_row(row)
        clean = True
    finally:
        if clean:
            pool.shutdown(wait=True)
        else:  # interrupted: stop now rather than wait for the running solves
            pool.shutdown(wait=False, cancel_futures=True)
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()


def _import_ray():
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError("the ray executor needs `pip install layoutsearch[ray]`") from None
    return ray


def _run_ray(todo: list[Point], jobs: int, time_limit_s: float, on_row: Callable[[dict], None],
             address: str | None) -> None:
    """Points as Ray tasks, consumed as they complete; a local Ray instance when no address is given."""
    import logging

    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        local = address is None and not os.environ.get("RAY_ADDRESS")
        ray.init(address=address, num_cpus=jobs if local else None, include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING)
    refs = {}
    try:
        task = ray.remote(num_cpus=1)(solve_point)
        refs = {task.remote(point, time_limit_s): point for point in todo}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    row = ray.get(ref)
                except Exception as exc:  # the task or its worker failed outside solve_point
                    row = error_row(refs[ref], time_limit_s, exc)
                on_row(row)
    finally:
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # finished tasks cannot be cancelled; nothing to do
                pass
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------- the sweep

@dataclass(frozen=True, kw_only=True)
class SweepSummary:
    """What a run did: points asked, already done before, solved now, statuses, the rows in point order."""

    output: str
    journal: str
    total: int
    skipped: int
    solved: int
    wall_s: float
    by_status: dict[str, int] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)

    @property
    def with_layout(self) -> int:
        return sum(1 for r in self.rows if r.get("dp") is not None)


def run_sweep(points: Iterable[Point], output_path: str | os.PathLike, jobs: int | None = None,
              executor: str = "local", address: str | None = None, time_limit_s: float = 30.0,
              progress: bool = True, fresh: bool = False, retry_failed: bool = False) -> SweepSummary:
    """Solve every point not yet in the journal, writing each as it finishes (see the module doc).

    ``jobs``: worker processes (local) or CPUs of a local Ray instance; default os.cpu_count().
    ``fresh``: forget the journal and solve everything. ``retry_failed``: solve ERROR and UNKNOWN
    points again. Raises InvalidArgumentError / CatalogueError (exit 2) before any solving on bad input.
    """
    from .catalogue import load_model

    start = time.perf_counter()
    points = list(dict.fromkeys(points))
    output = check_output(output_path)
    if executor not in EXECUTORS:
        raise InvalidArgumentError(f"--executor: unknown executor '{executor}' (local or ray)")
    if executor == "ray":
        _import_ray()
    jobs = (os.cpu_count() or 1) if jobs is None else jobs
    if jobs < 1:
        raise InvalidArgumentError(f"--jobs: {jobs} must be >= 1")
    if time_limit_s <= 0:
        raise InvalidArgumentError(f"--time-limit: {time_limit_s:g} must be > 0")
    for name in dict.fromkeys(p.model for p in points):
        load_model(name)  # an unknown model is bad input, not a failed point
    journal = Journal(journal_path(output))
    had_journal = os.path.exists(journal.path)
    done = journal.open(fresh)
    try:
        if not had_journal and not fresh and os.path.exists(output):
            done = _adopt_existing_output(output, journal)
        _remove_stale_temporaries(output)
        todo = [p for p in points if p.id not in done or (retry_failed and done[p.id]["status"] in RETRYABLE)]
        table = _Table(output, points)
        bar = _progress_bar(len(todo), len(points) - len(todo)) if progress and todo else None

        interrupts = _Interrupts()

        def on_row(row: dict) -> None:
            with interrupts.deferred():  # a Ctrl-C here waits until the point is in the journal and in `done`
                journal.append(row)  # durable from here on
                done[row["point_id"]] = row
            table.write(done)
            if bar is not None:
                bar.advance(bar.task_ids[0])

        try:
            with interrupts.installed():
                if todo and executor == "ray":
                    _run_ray(todo, jobs, time_limit_s, on_row, address)
                elif todo:
                    _run_local(todo, jobs, time_limit_s, on_row)
        finally:
            if bar is not None:
                bar.stop()
            table.write(done, force=True)
    finally:
        journal.close()
    rows = [done[p.id] for p in points if p.id in done]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    return SweepSummary(output=output, journal=journal.path, total=len(points), skipped=len(points) - len(todo),
                        solved=len(todo), wall_s=time.perf_counter() - start, by_status=statuses, rows=rows)


class _Interrupts:
    """Ctrl-C raises KeyboardInterrupt at once, except while a finished point is being recorded."""

    def __init__(self):
        self.critical = self.pending = False

    def _handler(self, signum, frame) -> None:
        if self.critical:
            self.pending = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextmanager
    def deferred(self):
        self.critical = True
        try:
            yield
        finally:
            self.critical = False
            if self.pending:
                self.pending = False
                raise KeyboardInterrupt


def _adopt_existing_output(output: str, journal: Journal) -> dict[str, dict]:
    """An output without its journal (deleted, or copied alone): its rows become the journal."""
    try:
        rows = read_table(output)
    except Exception as exc:
        raise InvalidArgumentError(f"--output: '{output}' exists but cannot be read ({type(exc).__name__}: {exc}); "
                                   f"move it away or pass --fresh") from None
    done = {}
    for row in rows:
        if row.get("point_id"):
            row = {name: row.get(name) for name in COLUMN_NAMES}
            journal.append(row)
            done[row["point_id"]] = row
    return done


class _Table:
    """The output file, rebuilt from the journal's rows; at most every few tenths of a second unless forced."""

    def __init__(self, path: str, points: list[Point]):
        self.path, self.order = path, [p.id for p in points]
        self.last_write, self.cost_s = 0.0, 0.0

    def write(self, done: dict[str, dict], force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_write < max(0.2, 10 * self.cost_s):
            return
        asked = set(self.order)
        rows = [done[i] for i in self.order if i in done] + [r for i, r in done.items() if i not in asked]
        write_table(rows, self.path)
        self.last_write = time.perf_counter()
        self.cost_s = self.last_write - now


def _progress_bar(total: int, skipped: int):
    """Points done/total, rate, elapsed and time left, on stderr."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            elapsed = task.finished_time if task.finished else task.elapsed
            return Text(f"{task.completed / elapsed:.2f} points/s" if task.completed and elapsed else "- points/s")

    progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), Rate(), TimeElapsedColumn(),
                        TextColumn("left"), TimeRemainingColumn(),
                        TextColumn(f"({skipped} already done)" if skipped else ""),
                        console=Console(stderr=True), transient=False)
    progress.add_task("sweep", total=total)
    progress.start()
    return progress


# ----------------------------------------------------------------------------- summary

def layout_text(row: dict) -> str:
    """'fsdp=64,tp=4 | 2 mb | remat full | ZeRO-3' for a row with a layout, '-' otherwise."""
    if row.get("dp") is None:
        return "-"
    degrees = ",".join(f"{k}={row[k]}" for k in ("dp", "fsdp", "tp", "pp", "cp") if row[k] > 1) or "1 device"
    parts = [degrees, f"{row['num_microbatches']} mb", f"ZeRO-{row['zero_stage']}"]
    if row.get("recompute") and row["recompute"] != "none":
        parts.insert(2, f"remat {row['recompute']}")
    if (row.get("virtual_stages") or 1) > 1:
        parts.append(f"v{row['virtual_stages']}")
    return " | ".join(parts)


def summary_rows(rows: list[dict]) -> list[dict]:
    """One short record per point for tables (CLI summary, results/sweeps.md)."""
    out = []
    for r in rows:
        ok = r.get("dp") is not None
        out.append({"model": r["model"], "cluster": r["cluster"], "devices": r.get("num_devices"),
                    "seqs": r["global_batch_seqs"], "status": r["status"], "layout": layout_text(r),
                    "MFU": f"{r['mfu']:.1%}" if ok else "-", "step s": f"{r['step_time_s']:.3f}" if ok else "-",
                    "tokens/s/device": f"{r['tokens_per_s_per_device']:,.0f}" if ok else "-",
                    "reason": r.get("reason") or ""})
    return out


def print_summary(rows: list[dict], console=None) -> None:
    """A rich table of the best layout per point (stdout unless a console is given)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=200)
    table = Table(title=f"sweep: {len(rows)} points")
    records = summary_rows(rows)
    for key in (records[0] if records else {}):
        if key in ("reason", "layout"):
            table.add_column(key, no_wrap=True, overflow="ellipsis", max_width=60)
        else:
            table.add_column(key, justify="right" if key in ("devices", "seqs", "MFU", "step s", "tokens/s/device")
                             else "left")
    for rec in records:
        rec["devices"] = "-" if rec["devices"] is None else f"{rec['devices']:,}"
        table.add_row(*(str(v) for v in rec.values()))
    console.print(table)
