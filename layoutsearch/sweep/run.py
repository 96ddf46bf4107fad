"""run_sweep: resume from the journal, run the rest, write every point as it finishes; the summary."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.units import MAX_TIME_LIMIT_S
from layoutsearch.report import render
from layoutsearch.sweep.executors import _import_ray, _run_local, _run_ray
from layoutsearch.sweep.points import EXECUTORS, RETRYABLE, Point
from layoutsearch.sweep.table import (
    COLUMN_NAMES,
    Journal,
    _remove_stale_temporaries,
    check_output,
    journal_path,
    read_table,
    write_table,
)

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
    dropped: int = 0  # journal lines that were not rows of a sweep (torn, corrupt, foreign): their points solved again

    @property
    def with_layout(self) -> int:
        return sum(1 for r in self.rows if r.get("dp") is not None)


def run_sweep(
    points: Iterable[Point],
    output_path: str | os.PathLike,
    jobs: int | None = None,
    executor: str = "local",
    address: str | None = None,
    time_limit_s: float = 30.0,
    progress: bool = True,
    fresh: bool = False,
    retry_failed: bool = False,
) -> SweepSummary:
    """Solve every point not yet in the journal, writing each as it finishes (see the module doc).

    ``jobs``: worker processes (local) or CPUs of a local Ray instance; default os.cpu_count().
    ``fresh``: forget the journal and solve everything. ``retry_failed``: solve ERROR and UNKNOWN
    points again. Raises InvalidArgumentError / CatalogueError (exit 2) before any solving on bad input.
    """
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
    if not 0 < time_limit_s <= MAX_TIME_LIMIT_S:  # NaN fails too
        raise InvalidArgumentError(
            f"--time-limit: {time_limit_s:g} must be in (0, {MAX_TIME_LIMIT_S:g}]"
        )
    for name in dict.fromkeys(p.model for p in points):
        load_model(name)  # an unknown model is bad input, not a failed point
    journal = Journal(journal_path(output))
    had_journal = os.path.exists(journal.path)
    done = journal.open(fresh)
    try:
        if not had_journal and not fresh and os.path.exists(output):
            try:
                done = _adopt_existing_output(output, journal)
            except InvalidArgumentError:
                journal.close()
                os.unlink(journal.path)  # leave things as they were
                raise
        _remove_stale_temporaries(output)
        todo = [
            p
            for p in points
            if p.id not in done or (retry_failed and done[p.id]["status"] in RETRYABLE)
        ]
        table = _Table(output, points)
        bar = _progress_bar(len(todo), len(points) - len(todo)) if progress and todo else None

        interrupts = _Interrupts()

        def on_row(row: dict) -> None:
            with (
                interrupts.deferred()
            ):  # a Ctrl-C here waits until the point is in the journal and in `done`
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
    return SweepSummary(
        output=output,
        journal=journal.path,
        total=len(points),
        skipped=len(points) - len(todo),
        solved=len(todo),
        wall_s=time.perf_counter() - start,
        by_status=statuses,
        rows=rows,
        dropped=journal.dropped,
    )


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
        if (
            threading.current_thread() is not threading.main_thread()
        ):  # signals reach the main thread only
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
        rows = read_table(output, "--output")
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(
            f"{exc}; the file exists without its journal: move it away or pass --fresh"
        ) from None
    done = {}
    for row in rows:
        if row.get("point_id"):
            row = {name: row.get(name) for name in COLUMN_NAMES}
            journal.append(row)
            done[row["point_id"]] = row
    return done


# The table is a convenience copy of the journal (which alone makes a point durable): rewritten at
# most once a second, and for at most 1/20 of the parent's time, so that on 2 cores the rewrites
# of a 1,000-row table do not take CPU from the solves
TABLE_REWRITE_S = 1.0
TABLE_REWRITE_SHARE = 20


class _Table:
    """The output file, rebuilt from the journal's rows; at most once a second unless forced."""

    def __init__(self, path: str, points: list[Point]):
        self.path, self.order = path, [p.id for p in points]
        self.last_write, self.cost_s = 0.0, 0.0

    def write(self, done: dict[str, dict], force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_write < max(
            TABLE_REWRITE_S, TABLE_REWRITE_SHARE * self.cost_s
        ):
            return
        asked = set(self.order)
        rows = [done[i] for i in self.order if i in done] + [
            r for i, r in done.items() if i not in asked
        ]
        write_table(rows, self.path)
        self.last_write = time.perf_counter()
        self.cost_s = self.last_write - now


class RateColumn(ProgressColumn):
    """Points per second so far."""

    def render(self, task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        return Text(
            f"{task.completed / elapsed:.2f} points/s"
            if task.completed and elapsed
            else "- points/s"
        )


class TimesColumn(ProgressColumn):
    """'0:00:11 elapsed, about 0:00:05 left' while running, 'done in 0:00:11' at the end."""

    def render(self, task) -> Text:
        elapsed = _clock(task.finished_time if task.finished else task.elapsed)
        if task.finished:
            return Text(f"done in {elapsed}")
        left = task.time_remaining
        return Text(
            f"{elapsed} elapsed, "
            + (f"about {_clock(left)} left" if left is not None else "time left unknown")
        )


def _clock(seconds: float | None) -> str:
    whole = int(seconds or 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _progress_bar(total: int, skipped: int):
    """Points done/total, rate, elapsed and time left, on stderr."""
    progress = Progress(
        TextColumn("sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimesColumn(),
        TextColumn(f"({skipped} already done)" if skipped else ""),
        console=Console(stderr=True),
        transient=False,
    )
    progress.add_task("sweep", total=total)
    progress.start()
    return progress


# ----------------------------------------------------------------------------- summary


def layout_text(row: dict) -> str:
    """'fsdp=64,tp=4 | 2 mb | remat full | ZeRO-3' for a row with a layout, '-' otherwise."""
    if row.get("dp") is None:
        return "-"
    degrees = (
        ",".join(
            f"{k}={row[k]}" for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "etp") if row[k] > 1
        )
        or "1 device"
    )
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
        out.append(
            {
                "model": r["model"],
                "cluster": r["cluster"],
                "devices": r.get("num_devices"),
                "seqs": r["global_batch_seqs"],
                "status": r["status"],
                "layout": layout_text(r),
                "MFU": f"{r['mfu']:.1%}" if ok else "-",
                "step s": f"{r['step_time_s']:.3f}" if ok else "-",
                "tokens/s/device": f"{r['tokens_per_s_per_device']:,.0f}" if ok else "-",
                "reason": r.get("reason") or "",
            }
        )
    return out


def print_summary(rows: list[dict], console=None) -> None:
    """A rich table of the best layout per point (stdout unless a console is given)."""
    console = console or render.console()
    table = Table(title=f"sweep: {len(rows)} points")
    records = summary_rows(rows)
    for key in records[0] if records else {}:
        if key in ("reason", "layout"):
            table.add_column(
                key, no_wrap=True, overflow="ellipsis", max_width=56 if key == "layout" else 48
            )
        else:
            table.add_column(
                key,
                justify="right"
                if key in ("devices", "seqs", "MFU", "step s", "tokens/s/device")
                else "left",
            )
    for rec in records:
        rec["devices"] = "-" if rec["devices"] is None else f"{rec['devices']:,}"
        table.add_row(*(str(v) for v in rec.values()))
    console.print(table)
