"""Issue 31, points 5 and 6: an honest time limit, progress on a terminal only, tables that fit
100 columns, and the friction a new user met (bad margins, options that would do nothing, a
refused export, a framework that makes the plan slow, sweep plots, the API's names)."""

import dataclasses
import io
import json
import re
import sys
import time
import warnings

import pytest

import layoutsearch
from layoutsearch import engine
from layoutsearch.cli import common, main
from layoutsearch.core.errors import LayoutsearchWarning
from layoutsearch.core.options import PlanOptions, ProblemOptions, SearchOptions, WorkloadOptions
from layoutsearch.report import render
from layoutsearch.report.output import solve_document

SMALL = ["--model", "llama3-8b", "--cluster", "h100-64", "--seqs", "256"]


@pytest.fixture
def terminal(capsys, monkeypatch):
    """stdout (the captured one) is a 100-column terminal: ``terminal(*argv)`` runs the command
    and returns (exit code, stdout without its colours)."""
    monkeypatch.setenv("COLUMNS", "100")

    def run(*argv) -> tuple[int, str]:
        # the test's own captured stdout (the fixture's setup sees another one)
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
        code = main(list(argv))
        return code, re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)

    yield run
    render.set_wide(False)


@pytest.fixture(scope="module")
def small_run():
    """llama3-8b on h100-64, 256 sequences, solved once through the engine."""
    return engine.solve(
        ProblemOptions(model="llama3-8b", cluster="h100-64", seqs=256),
        WorkloadOptions(),
        SearchOptions(),
        PlanOptions(),
    )


# ----------------------------------------------------------------------------- time limit
def test_every_search_of_a_solve_gets_what_is_left_of_the_time_limit(monkeypatch):
    """With --export and --what-if, the three searches share one 20 s budget, each getting the rest."""
    given, real = [], engine.solve_problem

    def recorded(problem, request):
        given.append(request.time_limit_s)
        return real(problem, request)

    monkeypatch.setattr(engine, "solve_problem", recorded)
    started = time.perf_counter()
    run = engine.solve(
        ProblemOptions(model="llama3-8b", cluster="h100-64", seqs=256),
        WorkloadOptions(),
        SearchOptions(time_limit=20.0),
        PlanOptions(tokens=1e12, what_if="hbm=2"),
        export="megatron",
    )
    took = time.perf_counter() - started
    assert len(given) == 3 and 20.0 >= given[0] > given[1] > given[2] >= 20.0 - took
    assert run.result.status == "OPTIMAL" and run.what_if is not None


def test_the_search_counts_its_tables_in_the_time_limit(monkeypatch, small_run):
    """CP-SAT gets the search's limit less the time spent building the candidates and tables."""
    import layoutsearch.search as search

    given, real = [], search.cpsat_top

    def recorded(space, tables, objective, top_k, time_limit_s, **kw):
        given.append(time_limit_s)
        return real(space, tables, objective, top_k, time_limit_s, **kw)

    monkeypatch.setattr(search, "cpsat_top", recorded)
    started = time.perf_counter()
    result = search.solve(small_run.problem, search.SearchRequest(time_limit_s=20.0))
    (left,) = given
    assert 20.0 - (time.perf_counter() - started) <= left < 20.0
    assert result.status == "OPTIMAL"


def test_an_overrun_is_a_warning_naming_the_time_outside_cpsat(small_run):
    """A run past its limit by more than the slack says how long it took and what is not cut short."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.check_deadline(time.perf_counter() - 5.0, 0.1, [small_run.result])
        engine.check_deadline(time.perf_counter(), 0.1, [small_run.result])
        engine.check_deadline(time.perf_counter() - 3.0, 1.0, [small_run.result] * 2)
    one, two = caught
    assert one.category is two.category is LayoutsearchWarning
    text = str(one.message)
    assert text.startswith("took 5.0 s, over the time limit of 0.1 s: the search outside CP-SAT")
    assert "(the 34,380 candidates, their tables and bounds)" in text
    assert text.endswith("is not cut short")
    assert str(two.message).startswith(
        "took 3.0 s, over the time limit of 1 s: its 2 searches outside CP-SAT (candidates, "
        "tables and bounds) took "
    )


def test_an_unproven_ranking_is_feasible_in_the_table_and_the_json(small_run):
    """A least step time proven whose tie-break ran out of time reads FEASIBLE, table and JSON alike."""
    unproven = dataclasses.replace(small_run.result, ranking_status="UNKNOWN")
    result = engine.proven_or_feasible(unproven)
    assert (result.status, result.ranking_status) == ("FEASIBLE", "FEASIBLE")
    solver = solve_document(small_run.problem, result, None)["solver"]
    assert (solver["status"], solver["ranking_status"], solver["gap"]) == (
        "FEASIBLE",
        "FEASIBLE",
        0.0,
    )
    line = render.status_line(result)
    # 1.51299 s before the loss's passes were costed; 1.49378 s before the element-wise kernels ran at their measured
    # fractions of the HBM bandwidth
    assert line.startswith(
        "solver cpsat: FEASIBLE (objective 1.52256 s, bound 1.52256 s, gap 0.00%: the least step "
        "time is proven, not that layout 1 is the simplest of its ties within the time limit)"
    )
    assert render.status_line(small_run.result).startswith(
        "solver cpsat: OPTIMAL (bound 1.52256 s = objective)"
    )


def test_a_gap_left_by_the_time_limit_is_named(small_run):
    """A result whose bound is below its objective shows the gap and says it is not proven:
    (1.52256 - 1.4) / 1.52256 = 8.05% (1.51299 s and 7.47% before the loss's passes were costed; 1.49378 s and 6.28%
    before the element-wise kernels ran at their
    measured fractions of the HBM bandwidth)."""
    result = dataclasses.replace(small_run.result, status="FEASIBLE", bound=1.4)
    assert "FEASIBLE (objective 1.52256 s, bound 1.4 s, gap 8.05%: not proven optimal within" in (
        render.status_line(result)
    )


# ----------------------------------------------------------------------------- progress
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_status_line_on_a_terminal(monkeypatch):
    """On a terminal stderr shows the phase text while the block runs."""
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    with common.progress_line("solving llama3-8b on h100-64") as phase:
        phase("searching the layouts")
        time.sleep(0.3)
    assert "searching the layouts" in stream.getvalue()


def test_progress_is_silent_in_a_pipe(cli_main):
    """A solve whose stderr is not a terminal writes nothing there."""
    code, out, err = cli_main("solve", *SMALL, "--format", "json")
    assert code == 0 and err == ""
    assert json.loads(out)["solver"]["status"] == "OPTIMAL"


def test_a_sweep_in_a_pipe_has_no_progress_bar(cli_main, tmp_path):
    """A sweep whose stderr is not a terminal prints its one summary line there, no bar."""
    out = tmp_path / "s.csv"
    code, _, err = cli_main("sweep", "-m", "debug", "-c", "h100-8", "--seqs", "8", "-o", str(out))
    assert code == 0
    assert err.startswith(f"wrote {out}: 1 points (1 OPTIMAL); 1 solved now, 0 already done, ")
    assert err.count("\n") == 1


# ----------------------------------------------------------------------------- tables
def test_the_solve_table_fits_100_columns_leaving_columns_out_in_order(terminal):
    """On 100 columns no line is longer, numbers stay whole, and the left-out columns are named."""
    code, out = terminal("solve", *SMALL)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 100, [
        x for x in out.splitlines() if len(x) > 100
    ]
    assert (
        "│ 1 │ fsdp=64 │ fsdp:node8*scale_out8  │    1 │    4 x 1 │ 70.3 / 82.3 │  1.523 │ 52.5% │  688,696 │"
        in out
    )  # 1.513 s, 52.8%, 693,059 before the loss's passes were costed; 1.494 s, 53.5%, 701,964 before the element-wise kernels ran at their measured fractions of the HBM
    # bandwidth; ZeRO-2 over 2 microbatches of 2 (1.482 s) until ZeRO-2 reduce-scattered its gradients in each
    assert (
        "left out to fit 100 columns: remat, KV rep, compute s, comm s, bubble s, band s (--wide shows"
        in out
    )


@pytest.mark.parametrize("before", [True, False])
def test_wide_is_taken_before_or_after_the_command(terminal, before):
    """`layoutsearch --wide solve ...` and `layoutsearch solve ... --wide` both keep every column."""
    argv = ["--wide", "solve", *SMALL] if before else ["solve", *SMALL, "--wide"]
    code, out = terminal(*argv)
    assert code == 0
    assert "left out to fit" not in out
    assert (
        "│ 1.412-1.666 │ 52.5% │  688,696 │"
        in out  # 1.398-1.643 before the fits took Huber's loss (the bands regenerated, 2026-12-07); 1.429-1.644 before two ZeRO-3 records' layouts were corrected (2026-12-07); 1.416-1.638 before DeepSpeed's ZeRO-3 regathers under recompute moved the bands; 1.405-1.628, 52.8%, 693,059 before the loss's passes were costed; 1.386-1.639 before the materialised scores' passes were counted whole (the bands regenerated); 1.363-1.620, 53.5%, 701,964 before the element-wise kernels ran at their measured fractions of
        # the HBM bandwidth (and the bands were regenerated); 1.362-1.620 before the 2021 release waited for its all-reduce (rule 32); 1.372-1.616 before Megatron's fp16 gradients (rule 33); 1.376-1.617 before a slower last stage paced only the microbatches; 1.368-1.617 before the steady state's pipeline sends were costed (2026-12-06); 1.350-1.616 before llm-foundry's A100 rows stated bf16 reduction (rule 31); 1.347-1.604 before
        # the band of 2026-12-05's ZeRO copies
    )  # the GPU band: 1.350-1.650, then 1.346-1.633 before the Megatron-Core rows stated their schedule,
    # 1.348-1.592 before Narayanan et al.'s unstated schedules were costed at their fastest interleaving,
    # 1.337-1.592 of ZeRO-2's 1.482 s before ZeRO-2 reduce-scattered its gradients in every microbatch


def test_the_models_table_fits_100_columns(terminal):
    """`models` on 100 columns keeps whole ids and counts, leaving out the named columns."""
    code, out = terminal("models")
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 100, [
        x for x in out.splitlines() if len(x) > 100
    ]
    assert (
        "│ deepseek-v3     │     61 │   7,168 │   128 │   671,026,419,200 │  37,552,297,472 │"
        in out  # the params column is as wide as kimi-k2's 1,026,408,232,448
    )
    assert "left out to fit 100 columns: name, d_ff, mlp, kv_heads, head_dim, vocab, tied," in out


# ----------------------------------------------------------------------------- friction
def test_a_margin_above_the_device_memory_is_bad_input(bad_input):
    """--memory-margin-gib 100 on an 80 GB H100 is exit 2 naming the option and the numbers."""
    assert bad_input("solve", *SMALL, "--memory-margin-gib", "100") == (
        "error: --memory-margin-gib: no usable memory per device: 79.65 GiB device memory - "
        "3 GiB runtime reserve (h100 runtime_reserve_gib) - 100 GiB margin = -23.35 GiB"
    )


@pytest.mark.parametrize("command", ["solve", "explain", "estimate", "sweep"])
def test_a_price_without_tokens_is_bad_input(bad_input, tmp_path, command):
    """--price-per-device-hour without --tokens would price nothing: exit 2 naming both options."""
    argv = {
        "solve": ["solve", *SMALL],
        "explain": ["explain", *SMALL],
        "estimate": ["estimate", *SMALL, "--layout", "fsdp=64"],
        "sweep": ["sweep", *SMALL, "-o", str(tmp_path / "s.csv"), "--no-progress"],
    }[command]
    assert bad_input(*argv, "--price-per-device-hour", "2") == (
        "error: --price-per-device-hour 2: a price prices the device-hours to train --tokens "
        "tokens; give --tokens too"
    )


def test_a_refused_export_names_the_command_that_works(cli_main, tmp_path):
    """`export --to maxtext` of a ZeRO-2 layout (the runner-up; the winner since ZeRO-2 reduce-scatters its
    gradients in every microbatch is ZeRO-1) says to re-run solve with --export maxtext."""
    code, out, _ = cli_main("solve", *SMALL, "--format", "json")
    result = tmp_path / "r.json"
    result.write_text(out)
    code, _, err = cli_main("export", str(result), "--to", "maxtext", "--rank", "2")
    assert code == 2
    assert err.startswith("error: maxtext export of layout rank 2: MaxText cannot express ZeRO-2")
    assert err.strip().endswith(
        "re-run `layoutsearch solve --model llama3-8b --cluster h100-64 --seqs 256 --seq-len 4096 "
        "... --export maxtext -o FILE` (with the options that made this result) to search only "
        "layouts maxtext can express"
    )


def test_a_framework_that_makes_the_plan_slow_is_named(cli_main, tmp_path):
    """DeepSpeed for llama3-405b on h100-16384 reaches 3.5% MFU (36.3 s): one warning with the free winner's (31.8%,
    4.03 s, fsdp 128 x tp 8 x pp 16; DeepSpeed's 36.4 s and the free winner's 31.6%, 4.06 s before the loss's passes
    were costed; DeepSpeed's 36.3 s and the free winner's 31.9%, 4.02 s before the
    element-wise kernels ran at their measured fractions of the HBM bandwidth; 35.9%, 3.57 s, fsdp 64 x tp 4 x pp 16 x cp 4 until its bf16 optimizer's
    accumulation of each microbatch's gradients into fp32 ones was costed, 2026-12-06; 3.6%, 35.7 s until AutoTP's layouts were
    costed without sequence parallelism, which it lacks, 2026-12-06; the free winner 35.7%, 3.58 s
    while the h100 class's FlashAttention-2 fraction was 0.1656; 35.8%, 3.58 s while the interleaved schedule's
    fill and drain paid their p v - 1 sends and the first pipeline stage's memory was a middle stage's layers
    plus its embedding, 2026-12-05; 36.2%, 3.54 s, fsdp 128 x tp 2 until ZeRO-2 reduce-scattered its gradients in
    every microbatch; DeepSpeed's best 35.6 s and the free winner 36.0%, 3.56 s until its gradient buckets' copies
    were costed)."""
    code, _, err = cli_main(
        *["solve", "--model", "llama3-405b", "--cluster", "h100-16384", "--seqs", "2048"],
        *["--export", "deepspeed", "-o", str(tmp_path / "ds.json")],
    )
    assert code == 0
    (line,) = [x for x in err.splitlines() if x.startswith("warning:")]
    assert line == (
        "warning: deepspeed cannot express the fast layouts of this problem: its best reaches "
        "3.5% MFU (36.3 s a step), the unrestricted winner 31.8% (4.03 s, fsdp=128, tp=8, pp=16: 9.02x "
        "faster, beyond the model's uncertainty); `layoutsearch solve --framework deepspeed` (no --export) "
        "shows it"
    )


def test_a_framework_that_costs_more_than_the_bands_is_named():
    """Megatron-Bridge writes even pipeline splits only, so Llama 3 405B's 126 layers get no pipeline on
    h100-1024 at 1,024 x 8,192 tokens: its best, dp 2 x fsdp 256 x tp 2 with full recompute, takes 48.41 s a
    step against the megatron winner's 40.7 s (fsdp 2 x tp 4 x pp 32 x cp 4), 1.19x: beyond the 80% bands
    (40.7 x 1.0943 = 44.5 < 48.41 x 0.9271 = 44.9 with the GPU band -7.29% .. +9.43%; 43.9 < 44.5 with -8.16% ..
    +7.93% before the fits took Huber's loss), so said (only from 1.5x
    until 2026-12-06; 48.85 s against 41.12 s before the loss's passes were costed). torchtitan 0.3's best (54.18 s)
    against torchtitan's own winner (46.1 s), 1.17x, lies on the band's edge: said while the bands were narrower
    (-6.14% .. +8.0% until two ZeRO-3 records' layouts were corrected on 2026-12-07: 46.1 x 1.08 = 49.8 < 54.18 x
    0.9386 = 50.9), not since (46.1 x 1.0943 = 50.4 > 54.18 x 0.9271 = 50.2; 49.8 > 49.76 before Huber's loss). torchtitan 0.2's best (46.42 s, the
    balanced split it writes) against the same winner lies inside them: not said."""
    problem = {
        "model": "llama3-405b",
        "cluster": "h100-1024",
        "seqs": 1024,
        "seq_len": 8192,
        "top": 1,
    }
    with pytest.warns(LayoutsearchWarning) as said:
        run = layoutsearch.solve(**problem, export="megatron-bridge")
    assert run.result.layouts[0].step_time_s == pytest.approx(48.409, abs=1e-3)
    (line,) = [str(w.message) for w in said if "cannot express" in str(w.message)]
    assert (
        "the unrestricted winner 51.3% (40.7 s, fsdp=2, tp=4, pp=32, cp=4: 1.19x faster, beyond"
        in line
    )
    with warnings.catch_warnings(record=True) as edge:
        warnings.simplefilter("always")
        run = layoutsearch.solve(**problem, export="torchtitan-0.3")
    assert run.result.layouts[0].step_time_s == pytest.approx(54.179, abs=1e-3)
    assert not [w for w in edge if "cannot express" in str(w.message)]
    with warnings.catch_warnings(record=True) as unsaid:
        warnings.simplefilter("always")
        run = layoutsearch.solve(**problem, export="torchtitan")
    assert run.result.layouts[0].step_time_s == pytest.approx(
        46.422, abs=1e-3
    )  # 46.785 before the loss's passes
    assert not [w for w in unsaid if "cannot express" in str(w.message)]


def test_a_framework_as_fast_as_the_free_search_is_not_named(cli_main, tmp_path):
    """Megatron for llama3-8b on h100-64 loses nothing: no warning."""
    code, _, err = cli_main("solve", *SMALL, "--export", "megatron", "-o", str(tmp_path / "m.sh"))
    assert code == 0 and "warning" not in err


def _row(devices: int, status: str, mfu: float | None) -> dict:
    layout = {"dp": 1, "fsdp": devices, "tp": 1, "pp": 1, "cp": 1, "ep": 1}
    return {
        "model": "llama3-8b",
        "cluster": f"h100-{devices}",
        "num_devices": devices,
        "global_batch_seqs": 256,
        "seq_len": 4096,
        "status": status,
        "mfu": mfu,
        "step_time_s": None if mfu is None else 1.5,
        **({} if mfu is None else layout),
    }


def test_the_sweep_plot_names_its_problem_and_marks_infeasible_points():
    """The title names model, accelerator, batch and length; an infeasible point is not an MFU of 0."""
    pytest.importorskip("matplotlib")
    from layoutsearch.sweep.plot import sweep_figure

    rows = [_row(8, "INFEASIBLE", None), _row(64, "OPTIMAL", 0.5), _row(128, "OPTIMAL", 0.45)]
    fig = sweep_figure(rows, "runs/s.csv")
    assert fig._suptitle.get_text() == ("llama3-8b on h100: batch 256 seqs x 4,096 tokens (s.csv)")
    ax_mfu = fig.axes[0]
    legend = [t.get_text() for t in ax_mfu.get_legend().get_texts()]
    assert legend == ["256 seqs", "INFEASIBLE: no layout (1)"]
    (line,) = ax_mfu.get_lines()
    assert [y for y in line.get_ydata() if y == y] == [50.0, 45.0]  # no 0 for the infeasible point


def test_dir_lists_the_api():
    """`dir(layoutsearch)` lists solve, explain, estimate and problem, which load on first use."""
    assert {"solve", "explain", "estimate", "problem", "__version__"} <= set(dir(layoutsearch))


def test_a_time_limit_spent_before_the_solver_stops_the_search_with_no_layout(
    cli_main, monkeypatch
):
    """A time limit that runs out while the candidate tables are built stops the search there:
    UNKNOWN, no layout, exit 1, one line saying while building what (the deadline is made to pass
    inside the tables' first grid, so the verdict never depends on the machine's speed)."""
    import layoutsearch.search.tables as tables

    def out_of_time(space, rows):
        raise tables.OutOfTime

    monkeypatch.setattr(tables, "terms_of_rows", out_of_time)
    argv = ["solve", "--model", "llama3-8b", "--cluster", "h100-8", "--seqs", "64"]
    code, out, err = cli_main(*argv, "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert doc["solver"]["status"] == "UNKNOWN" and doc["layouts"] == []
    assert doc["explanation"]["stopped"] is True
    (line,) = [x for x in err.splitlines() if x.startswith("no layout:")]
    assert line.startswith("no layout: the time limit ran out after ")
    assert line.endswith(
        "while building the candidate tables of 4,192 candidates: no layout was searched "
        "(raise --time-limit)"
    )


def test_a_search_with_no_time_left_stops_after_the_candidate_space():
    """time_limit_s 0: the deadline has passed once the space is built, whatever the machine."""
    from layoutsearch.core.problem import Problem, SearchRequest
    from layoutsearch.core.specs import Workload
    from layoutsearch.search import solve

    problem = Problem.build("llama3-8b", "h100-8", Workload(global_batch_seqs=64, seq_len=4096))
    result = solve(problem, SearchRequest(time_limit_s=0.0))
    assert (result.status, result.layouts, result.tables) == ("UNKNOWN", [], None)
    assert "while building the candidate space of 4,192 candidates" in result.stopped


def test_choices_the_export_target_cannot_write_are_said_not_searched(cli_main, tmp_path):
    """An option's values the export target cannot write are named in one warning line each, with what it writes,
    so a plan never reads as if they had been weighed and lost: MaxText runs GPipe only (zb-v, dualpipe), Megatron-LM
    has no parameter offload, torchtitan no Ulysses context parallelism and none of MaxText's remat policies. A
    schedule's line says it concerns pipelined layouts only (pp=1 layouts were searched). Values it writes give no
    line."""
    base = ["solve", "--model", "debug", "--cluster", "h100-8", "--seqs", "8", "--seq-len", "256"]

    def said(*extra: str) -> list[str]:
        target = extra[1]
        code, _, err = cli_main(*base, *extra, "-o", str(tmp_path / f"{target}.out"))
        assert code == 0, err
        return [x for x in err.splitlines() if "not searched" in x]

    assert said("--export", "maxtext", "--schedules", "zb-v,dualpipe") == [
        "warning: --schedules zb-v,dualpipe: not searched in a pipeline (layouts with pp=1 need none), MaxText "
        "cannot write them (it writes gpipe)"
    ]
    assert said("--export", "megatron", "--offload", "none,optimizer,params") == [
        "warning: --offload params: not searched, Megatron-LM cannot write it (it writes none, optimizer)"
    ]
    assert said(
        "--export", "torchtitan", "--cp-flavours", "ring,a2a", "--recompute", "none,minimal"
    ) == [
        "warning: --cp-flavours a2a: not searched, torchtitan cannot write it (it writes ring)",
        "warning: --recompute minimal: not searched, torchtitan cannot write it (it writes none, selective, op, "
        "full)",
    ]
    assert (
        said(
            "--export", "megatron", "--offload", "none,optimizer", "--schedules", "1f1b,interleaved"
        )
        == []
    )
