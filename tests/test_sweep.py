"""Sweeps: range expansion, one row per point, failures recorded, resume after Ctrl-C or kill -9, Ray, CLI."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest
import typer
from builders import LLAMA70B_V5P_SWEEP
from typer.testing import CliRunner

from layoutsearch.cli import plot as plot_command
from layoutsearch.cli import sweep as sweep_command
from layoutsearch.core.errors import CatalogueError, InvalidArgumentError
from layoutsearch.sweep import (
    COLUMN_NAMES,
    Point,
    expand,
    expand_points,
    journal_path,
    read_table,
    run_sweep,
    solve_point,
)

needs_pyarrow = pytest.mark.skipif(
    find_spec("pyarrow") is None, reason="Parquet needs layoutsearch[parquet]"
)
needs_matplotlib = pytest.mark.skipif(
    find_spec("matplotlib") is None, reason="plots need layoutsearch[plot]"
)

# The real entry point (cli.main) with the sweep commands, whether or not cli.py registers them yet.
CLI = [sys.executable, "-m", "layoutsearch.cli"]
SMALL = expand_points(
    "llama3-8b", "h100-16,v5p-64", "64,128"
)  # 4 points, tens of milliseconds each


def ids(rows):
    return [r["point_id"] for r in rows]


def journal_lines(output) -> list[str]:
    return Path(journal_path(output)).read_text().splitlines()


def test_ranges_multiply_add_and_combine():
    """{A..B:xF} multiplies up to B inclusive, {A..B:+S} adds, comma items concatenate in order."""
    assert expand("v5p-{256..8192:x2}", "--cluster") == [
        f"v5p-{n}" for n in (256, 512, 1024, 2048, 4096, 8192)
    ]
    assert expand("h100-{64..256:+64},v5p-8960", "--cluster") == [
        "h100-64",
        "h100-128",
        "h100-192",
        "h100-256",
        "v5p-8960",
    ]
    assert expand("{256..1000:x2}", "--seqs") == ["256", "512"]  # stops at the last value <= B
    assert expand("{3..5}", "--seqs") == ["3", "4", "5"]
    assert expand("v5p:{4..8:x2}x4x4", "--cluster") == ["v5p:4x4x4", "v5p:8x4x4"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("v5p-{256..8192:y2}", "--cluster: malformed range in 'v5p-{256..8192:y2}'"),
        ("v5p-{256..8192:x2", "--cluster: malformed range in 'v5p-{256..8192:x2'"),
        ("v5p-256}", "--cluster: malformed range in 'v5p-256}'"),
        ("v5p-{8192..256:x2}", "runs backwards (8192 > 256)"),
        ("v5p-{256..8192:x1}", "needs a start >= 1 and a factor >= 2"),
        ("v5p-{0..8:x2}", "needs a start >= 1 and a factor >= 2"),
        ("v5p-{1..8:+0}", "needs a step >= 1"),
        ("v5p-{1..100000}", "has more than 10000 values"),
        ("v5p-256,,v5p-512", "--cluster: empty item in 'v5p-256,,v5p-512'"),
    ],
)
def test_malformed_ranges_name_the_field_and_value(text, message):
    """Each malformed range is an InvalidArgumentError (exit 2) quoting the option and the item."""
    with pytest.raises(InvalidArgumentError, match=None) as err:
        expand(text, "--cluster")
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_points_are_the_product_without_repeats():
    """One point per (model, cluster, seq_len, seqs); duplicates collapse; ids are stable strings."""
    points = expand_points(
        "debug,llama3-8b", ["h100-8,h100-16", "h100-8"], "{8..16:x2}", "2048,4096"
    )
    assert len(points) == 2 * 2 * 2 * 2
    assert points[0].id == "debug|h100-8|8|2048" and points[-1].id == "llama3-8b|h100-16|16|4096"
    with pytest.raises(InvalidArgumentError, match="--seqs: 'x' is not a whole number >= 1"):
        expand_points("debug", "h100-8", "8,x")


@needs_pyarrow
def test_one_row_per_point_with_the_contract_columns(tmp_path):
    """Every point gets one row with inputs, proof, degrees, memory, time split and throughput."""
    out = tmp_path / "s.parquet"
    summary = run_sweep(SMALL, out, jobs=1, progress=False)
    rows = read_table(out)
    assert ids(rows) == [p.id for p in SMALL] and list(rows[0]) == COLUMN_NAMES
    assert summary.solved == 4 and summary.skipped == 0 and summary.by_status == {"OPTIMAL": 4}
    for r in rows:
        assert (
            r["status"] == "OPTIMAL"
            and r["reason"] is None
            and r["bound_s"] <= r["objective_s"] + 1e-9
        )
        assert r["dp"] * r["fsdp"] * r["tp"] * r["pp"] * r["cp"] == r["num_devices"]
        assert r["step_time_s"] == pytest.approx(
            r["compute_s"] + r["exposed_comm_s"] + r["bubble_s"] + r["overhead_s"]
        )
        assert r["tokens_per_s"] == pytest.approx(
            r["global_batch_seqs"] * r["seq_len"] / r["step_time_s"]
        )
        assert r["tokens_per_s_per_device"] == pytest.approx(r["tokens_per_s"] / r["num_devices"])
        assert 0 < r["mfu"] < 1 and 0 < r["peak_bytes"] <= r["capacity_bytes"]
        for degree, placed in json.loads(r["axes"]).items():  # axis factors multiply to the degree
            assert r[degree] == math.prod(f for _, f in placed)
    h100 = rows[0]
    assert (h100["model"], h100["cluster"], h100["num_devices"], h100["global_batch_seqs"]) == (
        "llama3-8b",
        "h100-16",
        16,
        64,
    )


@needs_pyarrow
def test_csv_rows_match_parquet_rows(tmp_path):
    """The CSV output reads back with the same types and values as the Parquet one (local pool, 2 jobs)."""
    run_sweep(SMALL, tmp_path / "s.parquet", jobs=1, progress=False)
    run_sweep(SMALL, tmp_path / "s.csv", jobs=2, progress=False)
    pq_rows, csv_rows = read_table(tmp_path / "s.parquet"), read_table(tmp_path / "s.csv")
    skip = {"wall_s", "point_wall_s", "finished_at"}
    assert [{k: v for k, v in r.items() if k not in skip} for r in csv_rows] == [
        {k: v for k, v in r.items() if k not in skip} for r in pq_rows
    ]


def test_failing_points_are_recorded_with_reasons_and_the_sweep_continues(tmp_path):
    """A cluster size that does not exist and a model that fits nowhere are rows; later points still solve."""
    points = [
        Point(model="llama3-8b", cluster="v5p-1000", global_batch_seqs=64, seq_len=4096),
        Point(model="llama3-405b", cluster="h100-8", global_batch_seqs=64, seq_len=4096),
        Point(model="llama3-8b", cluster="h100-8", global_batch_seqs=64, seq_len=4096),
    ]
    summary = run_sweep(points, tmp_path / "f.csv", jobs=1, progress=False)
    bad_size, too_big, ok = read_table(tmp_path / "f.csv")
    assert bad_size["status"] == "ERROR" and bad_size["num_devices"] is None
    assert "1000 v5p chips is not a slice shape" in bad_size["reason"]
    assert (
        too_big["status"] == "INFEASIBLE" and too_big["num_devices"] == 8 and too_big["dp"] is None
    )
    assert (
        too_big["reason"].startswith("nothing fits: the nearest layout")
        and "GB per device" in too_big["reason"]
    )
    assert ok["status"] == "OPTIMAL" and ok["reason"] is None
    assert (
        summary.by_status == {"ERROR": 1, "INFEASIBLE": 1, "OPTIMAL": 1}
        and summary.with_layout == 1
    )


def test_rerun_after_losing_the_table_solves_nothing_and_duplicates_nothing(tmp_path):
    """The journal alone rebuilds the table: no point is solved twice or lost."""
    out = tmp_path / "s.csv"
    run_sweep(SMALL, out, jobs=1, progress=False)
    out.unlink()
    summary = run_sweep(SMALL, out, jobs=1, progress=False)
    assert summary.solved == 0 and summary.skipped == 4
    assert ids(read_table(out)) == [p.id for p in SMALL] and len(journal_lines(out)) == 4


def test_torn_last_journal_line_is_dropped_and_that_point_solved_again(tmp_path):
    """A kill during the journal write leaves half a line: it is cut off and its point solved once more."""
    out = tmp_path / "s.csv"
    run_sweep(SMALL, out, jobs=1, progress=False)
    lines = journal_lines(out)
    Path(journal_path(out)).write_text(
        "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]
    )
    summary = run_sweep(SMALL, out, jobs=1, progress=False)
    assert summary.solved == 1 and summary.skipped == 3
    lines = journal_lines(out)
    assert len(lines) == 4 and all(json.loads(line)["point_id"] for line in lines)
    assert ids(read_table(out)) == [p.id for p in SMALL]


def test_a_table_without_its_journal_is_adopted_and_extended(tmp_path):
    """Deleting the journal loses nothing: the table's rows seed a new journal; only new points are solved."""
    out = tmp_path / "s.csv"
    run_sweep(SMALL[:2], out, jobs=1, progress=False)
    os.unlink(journal_path(out))
    summary = run_sweep(SMALL, out, jobs=1, progress=False)
    assert summary.solved == 2 and summary.skipped == 2
    assert ids(read_table(out)) == [p.id for p in SMALL] and len(journal_lines(out)) == 4


def test_fresh_and_retry_failed(tmp_path):
    """--fresh solves everything again; --retry-failed solves only ERROR/UNKNOWN points again."""
    bad = Point(model="llama3-8b", cluster="v5p-1000", global_batch_seqs=64, seq_len=4096)
    out = tmp_path / "s.csv"
    run_sweep([*SMALL, bad], out, jobs=1, progress=False)
    assert run_sweep([*SMALL, bad], out, jobs=1, progress=False, retry_failed=True).solved == 1
    assert run_sweep([*SMALL, bad], out, jobs=1, progress=False, fresh=True).solved == 5
    assert len(journal_lines(out)) == 5 and len(read_table(out)) == 5


def test_bad_input_fails_before_any_solving(tmp_path, monkeypatch):
    """Unknown model, output suffix, executor and a missing Ray are exit-2 errors; nothing is written."""
    with pytest.raises(CatalogueError, match="unknown model 'llama71b'"):
        run_sweep(expand_points("llama71b", "h100-8", "8"), tmp_path / "a.csv", progress=False)
    with pytest.raises(
        InvalidArgumentError, match=r"--output: '.*a\.txt' must end in \.parquet or \.csv"
    ):
        run_sweep(SMALL, tmp_path / "a.txt", progress=False)
    with pytest.raises(
        InvalidArgumentError, match="--executor: unknown executor 'dask' \\(local or ray\\)"
    ):
        run_sweep(SMALL, tmp_path / "a.csv", executor="dask", progress=False)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--output .parquet \(or write a .csv\) needs the optional 'parquet' dependencies: pip install 'pyarrow>=15'",
    ):
        run_sweep(SMALL, tmp_path / "a.parquet", progress=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--executor ray needs the optional 'ray' dependencies: pip install 'ray>=2.9'; from the checkout: pip install -e '.*\[ray\]'$",
    ):
        run_sweep(SMALL, tmp_path / "b.csv", executor="ray", progress=False)
    assert not os.listdir(tmp_path)


@pytest.mark.slow
@needs_pyarrow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_interrupted_sweep_reruns_to_every_point_exactly_once(tmp_path, sig):
    """kill -9 (or Ctrl-C) of the whole sweep, parent and pool, after the first point; the rerun completes it."""
    out = tmp_path / "k.parquet"
    args = [
        *CLI,
        *LLAMA70B_V5P_SWEEP,
        "--seqs",
        "256,512",
        "--jobs",
        "2",
        "--no-progress",
        "-o",
        str(out),
    ]
    expected = [p.id for p in expand_points("llama70b", "v5p-{256..4096:x2}", "256,512")]
    proc = subprocess.Popen(
        args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    journal = Path(journal_path(out))
    deadline = time.monotonic() + 600  # a hang guard only: a loaded machine may take minutes
    while proc.poll() is None and time.monotonic() < deadline:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 1:
            break
        time.sleep(0.005)
    else:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("hang guard: the sweep journalled no point within 600 s")
    os.killpg(proc.pid, sig)  # the process group, as a terminal's Ctrl-C or a job killer does
    _, stderr = proc.communicate(timeout=600)  # a hang guard
    done_before = journal.read_bytes().count(b"\n")
    assert 1 <= done_before < len(expected), (
        "the sweep finished before the signal: nothing to resume"
    )
    if sig == signal.SIGINT:  # Ctrl-C: exit 130, and the table already holds what the journal holds
        assert proc.returncode == 130 and b"rerun the same command to resume" in stderr
        assert len(read_table(out)) == done_before
    if out.exists():  # a table, if there is one, is whole
        assert set(ids(read_table(out))) <= set(expected)
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=600)  # a hang guard
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(expected) - done_before} solved now, {done_before} already done" in rerun.stderr
    rows = read_table(out)
    assert ids(rows) == expected and all(r["status"] == "OPTIMAL" for r in rows)
    assert len(journal_lines(out)) == len(expected)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def cli_app() -> typer.Typer:
    app = typer.Typer()
    sweep_command.register(app)
    plot_command.register(app)
    return app


@needs_matplotlib
def test_cli_sweep_prints_a_summary_and_plot_writes_a_png(tmp_path):
    """`sweep` writes the table and prints the best layout per point; `plot` draws it (> 10 kB PNG)."""
    runner, app = CliRunner(), cli_app()
    out, png = tmp_path / "c.csv", tmp_path / "c.png"
    r = runner.invoke(
        app,
        [
            "sweep",
            "-m",
            "llama3-8b",
            "-c",
            "h100-{8..32:x2}",
            "-c",
            "v5p-1000",
            "--seqs",
            "64,128",
            "--jobs",
            "1",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.stderr
    assert "sweep: 8 points" in r.stdout and "OPTIMAL" in r.stdout and "ERROR" in r.stdout
    assert "fsdp=" in r.stdout and "%" in r.stdout
    assert f"wrote {out}: 8 points (2 ERROR, 6 OPTIMAL); 8 solved now, 0 already done" in r.stderr
    assert len(read_table(out)) == 8
    r = runner.invoke(app, ["plot", str(out), "-o", str(png)])
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["-m", "llama71b", "-c", "h100-8"],
            "error: unknown model 'llama71b' (did you mean 'llama70b'?)",
        ),
        (
            ["-m", "debug", "-c", "h100-{8..64:*2}"],
            "error: --cluster: malformed range in 'h100-{8..64:*2}'",
        ),
        (
            ["-m", "debug", "-c", "h100-8", "--seqs", "8,abc"],
            "error: --seqs: 'abc' is not a whole number >= 1",
        ),
        (
            ["-m", "debug", "-c", "h100-8", "-o", "x.json"],
            "error: --output: 'x.json' must end in .parquet or .csv",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, message):
    """Bad input exits 2 with one line naming the option and the value."""
    if "-o" not in args:
        args = [*args, "-o", str(tmp_path / "x.csv")]
    r = CliRunner().invoke(cli_app(), ["sweep", *args])
    assert r.exit_code == 2
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1


@pytest.mark.slow
def test_cli_unknown_executor_and_plot_input_through_the_console_script(tmp_path):
    """Usage errors are one line with exit 2 through the real entry point; a sweep that finds nothing exits 1."""
    base = CLI
    p = subprocess.run(
        [*base, "sweep", "-m", "debug", "-c", "h100-8", "--executor", "dask", "-o", "x.csv"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (
        p.returncode == 2
        and p.stderr.count("\n") == 1
        and "'dask' is not one of 'local', 'ray'" in p.stderr
    )
    p = subprocess.run([*base, "plot", "missing.csv"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("error: SWEEP_FILE: cannot read 'missing.csv'")
    p = subprocess.run(
        [
            *base,
            "sweep",
            "-m",
            "llama3-405b",
            "-c",
            "h100-8",
            "--seqs",
            "64",
            "-o",
            "n.csv",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert p.returncode == 1 and "INFEASIBLE" in p.stdout


@pytest.mark.slow
@needs_pyarrow
def test_ray_executor_matches_the_local_executor(tmp_path):
    """The same points through Ray tasks give the same statuses, degrees and objectives as the process pool."""
    ray = pytest.importorskip("ray")
    points = [
        *SMALL[:2],
        Point(model="llama3-8b", cluster="v5p-1000", global_batch_seqs=64, seq_len=4096),
    ]
    local = run_sweep(points, tmp_path / "local.parquet", jobs=1, progress=False).rows
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_sweep(points, tmp_path / "ray.parquet", executor="ray", progress=False).rows
    finally:
        ray.shutdown()
    keys = (
        "point_id",
        "status",
        "objective_s",
        "bound_s",
        "dp",
        "fsdp",
        "tp",
        "pp",
        "cp",
        "zero_stage",
        "num_microbatches",
        "recompute",
        "axes",
        "reason",
    )
    assert [[r[k] for k in keys] for r in remote] == [[r[k] for k in keys] for r in local]
    assert ids(read_table(tmp_path / "ray.parquet")) == [p.id for p in points]


def test_solve_point_never_raises():
    """A broken point (here: an unknown model reaching a worker) comes back as an ERROR row."""
    row = solve_point(Point(model="nope", cluster="h100-8", global_batch_seqs=8, seq_len=4096), 5.0)
    assert (
        row["status"] == "ERROR"
        and "unknown model 'nope'" in row["reason"]
        and list(row) == COLUMN_NAMES
    )


def test_a_sweep_row_names_the_risks_its_layout_carries():
    """The column ``risks`` is the layout record's, "; "-joined: Llama 3 405B on 1,024 H100s at
    4,096 x 4,096 tokens runs 512 microbatches of one sequence over pp 16 (above max(64, 8 x pp 16); cp 2 and
    1,024 over pp 32 while the risk band was 5%, cp 4 and 2,048 over pp 64 until 1F1B's steady-state sends were
    costed, 2026-12-06; cp 2 and 256 over pp 8 until ZeRO-2 reduce-scattered its gradients in every microbatch, 512 over pp 16 until the
    first pipeline stage's memory was its own or a middle stage's, 2026-12-05);
    a small dense point carries none; a point without a layout has none (null)."""
    risky = solve_point(
        Point(model="llama3-405b", cluster="h100-1024", global_batch_seqs=4096, seq_len=4096), 30.0
    )
    assert risky["num_microbatches"] == 512 and risky["cp"] == 1 and risky["pp"] == 16
    assert risky["risks"] == "microbatches above max(64, 8 x pp)"
    plain = solve_point(
        Point(model="llama3-8b", cluster="h100-8", global_batch_seqs=64, seq_len=4096), 30.0
    )
    assert plain["status"] == "OPTIMAL" and plain["risks"] == "none"
    none = solve_point(
        Point(model="llama3-405b", cluster="h100-8", global_batch_seqs=64, seq_len=4096), 30.0
    )
    assert none["status"] == "INFEASIBLE" and none["risks"] is None
