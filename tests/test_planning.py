"""Time to train and cost (--tokens, --price-per-device-hour), what-if hardware (--what-if) and
explain --sensitivity: the numbers, the JSON fields, the sweep columns, the input errors, and the
committed examples (examples/*.md) against a fresh run."""

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
from builders import LLAMA3_405B_H100_8, LLAMA70B_V5P_ESTIMATE
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.report import planning
from layoutsearch.search import solve
from layoutsearch.sweep import check_row, expand_points, read_table, run_sweep
from layoutsearch.sweep.table import LAYOUT_COLUMNS, PLAN_COLUMNS

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TOKENS, PRICE = 15e12, 2.0

# The command lines several tests here start from: the time to train (15e12 tokens at 2 per
# device-hour) of Llama-70B on a v5p-8192 pod, and a solve of Llama 3 8B on 64 H100s
LLAMA70B_V5P_PRICED_SOLVE = (
    *("solve", "--model", "llama70b", "--cluster", "v5p-8192"),
    *("--tokens", "15e12", "--price-per-device-hour", "2.0"),
)
LLAMA3_8B_H100_64_SOLVE = ("solve", "--model", "llama3-8b", "--cluster", "h100-64")


def run_json(*argv) -> dict:
    r = runner.invoke(app, [*argv, "--format", "json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


# ----------------------------------------------------------------------------- time and cost
def assert_priced(rec: dict, tokens: float, devices: int, price: float | None) -> None:
    assert 0.5 < rec["goodput"] < 1  # the default failure rate costs a few percent
    assert rec["train_days"] == tokens / rec["tokens_per_s"] / rec["goodput"] / 86400
    assert rec["device_hours"] == rec["train_days"] * 24 * devices
    assert rec["cost"] == (None if price is None else rec["device_hours"] * price)
    assert rec["price_per_device_hour"] == price


def test_solve_json_prices_every_layout_from_its_own_record():
    doc = run_json(*LLAMA70B_V5P_PRICED_SOLVE)
    assert doc["problem"]["workload"]["training_tokens"] == TOKENS
    assert len(doc["layouts"]) == 3
    for rec in doc["layouts"]:
        assert_priced(rec, TOKENS, 8192, PRICE)
    best = doc["layouts"][0]
    unpriced = run_json("solve", "--model", "llama70b", "--cluster", "v5p-8192")["layouts"][0]
    assert (best["degrees"], best["tokens_per_s"]) == (
        unpriced["degrees"],
        unpriced["tokens_per_s"],
    )  # pricing ranks nothing
    assert best["cost"] == pytest.approx(
        2.0 * 8192 * 24 * 15e12 / best["tokens_per_s"] / best["goodput"] / 86400, rel=1e-12
    )


def test_without_tokens_the_fields_are_null_and_without_a_price_only_cost_is():
    plain = run_json("solve", "--model", "llama3-8b", "--cluster", "h100-64", "--top", "1")[
        "layouts"
    ][0]
    assert (
        plain["train_days"],
        plain["device_hours"],
        plain["cost"],
        plain["price_per_device_hour"],
    ) == (
        None,
        None,
        None,
        None,
    )
    for key in (
        "degrees",
        "axes",
        "memory_bytes",
        "time_s",
        "mfu",
        "tokens_per_s",
        "fits",
    ):  # nothing dropped
        assert key in plain
    doc = run_json(
        "solve", "--model", "llama3-8b", "--cluster", "h100-64", "--top", "1", "--tokens", "1e12"
    )
    assert_priced(doc["layouts"][0], 1e12, 64, None)


def test_estimate_json_and_table_carry_days_device_hours_and_cost():
    argv = [*LLAMA70B_V5P_ESTIMATE, "--tokens", "15e12", "--price-per-device-hour", "2.0"]
    rec = run_json(*argv)["layout"]
    assert_priced(rec, TOKENS, 8192, PRICE)
    text = runner.invoke(app, argv).stdout
    line = (
        f"{rec['train_days']:.1f} days for 1.5e+13 tokens at goodput {rec['goodput']:.1%} | "
        f"{rec['device_hours']:,.0f} device-hours | cost {rec['cost']:,.0f} at 2 per device-hour"
    )
    days = 15e12 / rec["tokens_per_s"] / rec["goodput"] / 86400
    assert line in text and line.startswith(f"{days:.1f} days")


def test_solve_table_prints_the_time_to_train_of_each_layout():
    argv = [
        *LLAMA3_8B_H100_64_SOLVE,
        "--top",
        "2",
        "--tokens",
        "1e12",
        "--price-per-device-hour",
        "2.5",
    ]
    recs = run_json(*argv)["layouts"]
    text = runner.invoke(app, argv).stdout
    assert "time to train 1e+12 tokens at 2.5 per device-hour" in text
    for rank, rec in enumerate(recs, start=1):
        row = re.search(
            rf"│ {rank} │ +{rec['tokens_per_s']:,.0f} │ +{rec['goodput']:.1%} │ +([0-9.,]+) │ "
            rf"+([0-9,]+) │ +([0-9,]+) │",
            text,
        )
        assert row, text
        assert row.groups() == (
            f"{rec['train_days']:,.1f}",
            f"{rec['device_hours']:,.0f}",
            f"{rec['cost']:,.0f}",
        )
    assert "time to train" not in runner.invoke(app, argv[:7]).stdout  # no --tokens: no table


def test_explain_takes_tokens_and_price():
    doc = run_json(
        "explain",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-64",
        "--tokens",
        "1e12",
        "--price-per-device-hour",
        "0",
    )
    for rec in doc["layouts"]:
        assert_priced(rec, 1e12, 64, 0.0)
        assert rec["cost"] == 0.0


def test_plan_numbers_are_the_formulas():
    got = planning.plan_numbers(1e12, 1e6, 64, 3.0)
    days = 1e12 / 1e6 / 86400
    assert got == {"train_days": days, "device_hours": days * 24 * 64, "cost": days * 24 * 64 * 3.0}
    assert planning.plan_numbers(None, 1e6, 64, 3.0) == {
        "train_days": None,
        "device_hours": None,
        "cost": None,
    }


# ----------------------------------------------------------------------------- what-if
def test_scaled_cluster_scales_the_accelerator_and_the_matching_axes_only():
    base = resolve_cluster("h100-64")
    scaled = planning.scaled_cluster(base, {"scale_out_bandwidth": 0.5, "peak_flops": 2.0})
    acc, new = base.accelerator, scaled.accelerator
    assert new.scale_out_bytes_per_s_per_direction == 0.5 * acc.scale_out_bytes_per_s_per_direction
    assert new.peak_flops_per_s == 2.0 * acc.peak_flops_per_s
    assert new.link_bytes_per_s_per_direction == acc.link_bytes_per_s_per_direction
    assert (new.hbm_bytes, new.hbm_bytes_per_s) == (acc.hbm_bytes, acc.hbm_bytes_per_s)
    by_name = {a.name: a for a in base.axes}
    for axis in scaled.axes:
        factor = 0.5 if axis.kind == "scale_out" else 1.0
        assert axis == dataclasses.replace(
            by_name[axis.name],
            bytes_per_s_per_direction=factor * by_name[axis.name].bytes_per_s_per_direction,
        )
    assert (scaled.name, scaled.num_devices) == (base.name, base.num_devices)
    assert resolve_cluster("h100-64") == base  # the cached cluster is untouched

    tpu = resolve_cluster("v5p-8960x4")
    kinds = {a.kind for a in tpu.axes}
    assert kinds == {"torus", "dcn"}
    ici = planning.scaled_cluster(tpu, {"link_bandwidth": 0.5})
    for old, axis in zip(tpu.axes, ici.axes):
        assert axis.bytes_per_s_per_direction == old.bytes_per_s_per_direction * (
            0.5 if old.kind == "torus" else 1.0
        )
    dcn = planning.scaled_cluster(tpu, {"scale_out_bandwidth": 0.25, "hbm": 2.0})
    for old, axis in zip(tpu.axes, dcn.axes):
        assert axis.bytes_per_s_per_direction == old.bytes_per_s_per_direction * (
            0.25 if old.kind == "dcn" else 1.0
        )
    assert dcn.accelerator.hbm_bytes == 2.0 * tpu.accelerator.hbm_bytes


def test_halving_scale_out_bandwidth_never_speeds_up_the_winner_and_is_reported():
    doc = run_json(*LLAMA3_8B_H100_64_SOLVE, "--what-if", "scale_out_bandwidth=0.5")
    w, base = doc["what_if"], doc["layouts"][0]
    assert (
        w["factors"] == {"scale_out_bandwidth": 0.5}
        and w["method"] == "re-solved"
        and w["status"] == "OPTIMAL"
    )
    assert w["base_step_time_s"] == base["time_s"]["step"]
    assert w["step_time_s"] == w["layout"]["time_s"]["step"] >= base["time_s"]["step"]
    assert (
        w["step_time_rel_change"]
        == (w["step_time_s"] - w["base_step_time_s"]) / w["base_step_time_s"]
        >= 0
    )
    # the NIC traffic hides here: only the compute it slows while hidden grows (overlap_interference)
    assert 0.0 < w["step_time_rel_change"] < 0.02 and w["same_layout"] is True
    assert w["base_layout_step_time_s"] == w["step_time_s"] and w["base_layout_fits"] is True
    text = runner.invoke(
        app,
        [*LLAMA3_8B_H100_64_SOLVE, "--what-if", "scale_out_bandwidth=0.5"],
    ).stdout
    assert "what if scale_out_bandwidth x0.5 (re-solved)" in text
    assert (
        f"what-if: step {w['base_step_time_s']:.4f} s -> {w['step_time_s']:.4f} s "
        f"(+{100 * w['step_time_rel_change']:.2f}%) with the same layout"
    ) in text


def test_a_twentieth_of_the_scale_out_bandwidth_changes_the_winner():
    """On 5% of the InfiniBand bandwidth fsdp=64 gives way to fsdp=32 x pp=2 (a tenth no longer moved it
    once the interleaved schedule's fill and drain paid their p v - 1 sends, 2026-12-05)."""
    doc = run_json(
        *LLAMA3_8B_H100_64_SOLVE,
        "--top",
        "1",
        "--what-if",
        "scale_out_bandwidth=0.05",
        "--tokens",
        "1e12",
    )
    w, base = doc["what_if"], doc["layouts"][0]

    def layout_of(rec):
        return (
            rec["degrees"],
            rec["zero_stage"],
            rec["num_microbatches"],
            rec["recompute"],
        )

    assert w["same_layout"] is False and layout_of(w["layout"]) != layout_of(base)
    # the re-solve is at least as good as keeping the old winner on the slower network (up to the tie
    # tolerance of search.ranking: the winner is the simplest layout within 0.5% of the fastest), and slower than before
    assert base["time_s"]["step"] < w["step_time_s"] <= w["base_layout_step_time_s"] * 1.005
    assert w["step_time_rel_change"] == pytest.approx(
        w["step_time_s"] / base["time_s"]["step"] - 1, rel=1e-12
    )
    assert_priced(w["layout"], 1e12, 64, None)


def test_what_if_on_the_library_matches_a_solve_of_the_scaled_problem():
    problem = Problem.build("llama3-8b", "h100-64", Workload(global_batch_seqs=1024, seq_len=4096))
    factors = {"link_bandwidth": 0.5, "hbm_bandwidth": 2.0}
    scaled = planning.scaled_problem(problem, factors)
    assert (
        scaled.cluster.accelerator.hbm_bytes_per_s
        == 2.0 * problem.cluster.accelerator.hbm_bytes_per_s
    )
    by_hand = solve(scaled).layouts[0]
    doc = run_json(*LLAMA3_8B_H100_64_SOLVE, "--what-if", "link_bandwidth=0.5,hbm_bandwidth=2")
    assert doc["what_if"]["factors"] == factors
    assert doc["what_if"]["step_time_s"] == by_hand.step_time_s


def test_what_if_where_the_base_does_not_fit():
    argv = [
        "solve",
        "--model",
        "llama3-405b",
        "--cluster",
        "h100-64",
        "--seqs",
        "64",
        "--what-if",
        "hbm=4",
    ]
    r = runner.invoke(app, [*argv, "--format", "json"])
    assert r.exit_code == 1  # the base problem has no layout
    w = json.loads(r.stdout)["what_if"]
    assert w["status"] == "OPTIMAL" and w["layout"]["fits"] and w["base_step_time_s"] is None
    assert w["step_time_rel_change"] is None and w["same_layout"] is None
    assert (
        "what-if: no layout on the base hardware; on the scaled hardware the winner takes"
        in runner.invoke(app, argv).stdout
    )


def test_estimate_what_if_re_estimates_the_same_layout():
    argv = [*LLAMA70B_V5P_ESTIMATE, "--what-if", "peak_flops=2"]
    doc = run_json(*argv)
    w = doc["what_if"]
    assert w["method"] == "re-estimated" and w["same_layout"] is True
    assert w["layout"]["axes"] == doc["layout"]["axes"]
    assert (
        0.5 < w["layout"]["time_s"]["compute"] / doc["layout"]["time_s"]["compute"] < 0.55
    )  # HBM-bound parts stay
    assert w["step_time_s"] < w["base_step_time_s"]
    assert "what if peak_flops x2 (re-estimated)" in runner.invoke(app, argv).stdout


# ----------------------------------------------------------------------------- sensitivity
def test_sensitivity_of_a_compute_bound_layout_to_peak_flops_is_about_minus_9_percent():
    doc = run_json("explain", "--model", "llama3-8b", "--cluster", "h100-64", "--sensitivity")
    best, sens = doc["layouts"][0], doc["sensitivity"]
    # compute-bound: no bubble, and exposed traffic only the compute its hidden collectives slow
    assert (
        best["time_s"]["exposed_comm"] < 0.02 * best["time_s"]["step"]
        and best["time_s"]["bubble"] == 0.0
    )
    assert list(sens) == list(planning.WHAT_IF_KEYS) and doc["sensitivity_factor"] == 1.1
    assert (
        1 / 1.1 - 1 <= sens["peak_flops"] < -0.08
    )  # -9.1% for pure compute; the fixed overheads stay
    assert sens["hbm"] == 0.0  # capacity does not change the time of a fixed layout
    # hidden communication: faster links only shorten the compute it slows (overlap_interference)
    assert -0.005 < sens["scale_out_bandwidth"] <= 0.0 and -0.005 < sens["link_bandwidth"] <= 0.0
    assert all(v <= 0 for v in sens.values())  # faster hardware never slows a fixed layout down
    text = runner.invoke(
        app, ["explain", "--model", "llama3-8b", "--cluster", "h100-64", "--sensitivity"]
    ).stdout
    assert (
        f"│ peak_flops          │ peak dense FLOP/s                     │ "
        f"{best['time_s']['step'] * (1 + sens['peak_flops']):14.4f} │ {sens['peak_flops']:+.2%} │"
        in text
    )


def test_sensitivity_is_a_re_estimate_of_the_fixed_layout():
    problem = Problem.build("llama70b", "v5p-8192", Workload(global_batch_seqs=1024, seq_len=4096))
    best = solve(problem).layouts[0]
    sens = planning.sensitivity(best)
    moved = planning.re_estimate(best, {"link_bandwidth": 1.1})
    assert moved.layout == best.layout
    assert sens["link_bandwidth"] == (moved.step_time_s - best.step_time_s) / best.step_time_s < 0
    assert sens["scale_out_bandwidth"] == 0.0  # one slice: no DCN


def test_explain_without_sensitivity_adds_nothing_and_without_a_layout_it_is_null():
    doc = run_json("explain", "--model", "llama3-8b", "--cluster", "h100-64")
    assert "sensitivity" not in doc
    r = runner.invoke(
        app,
        ["explain", *LLAMA3_405B_H100_8, "--sensitivity", "--format", "json"],
    )
    assert r.exit_code == 1 and json.loads(r.stdout)["sensitivity"] is None


# ----------------------------------------------------------------------------- sweep
def test_sweep_rows_carry_time_and_cost_columns(tmp_path):
    out = tmp_path / "s.csv"
    points = expand_points(
        "llama3-8b", "h100-64,h100-8", "1024", training_tokens=1e12, price_per_device_hour=2.5
    )
    assert [p.id for p in points] == [
        "llama3-8b|h100-64|1024|4096",
        "llama3-8b|h100-8|1024|4096",
    ]  # ids unchanged
    summary = run_sweep(points, out, jobs=1, progress=False)
    rows = {r["cluster"]: r for r in read_table(out)}
    assert rows == {r["cluster"]: r for r in summary.rows}
    row = rows["h100-64"]
    assert row["status"] == "OPTIMAL" and check_row(row) is None
    assert (row["training_tokens"], row["price_per_device_hour"]) == (1e12, 2.5)
    assert row["train_days"] == 1e12 / row["tokens_per_s"] / row["goodput"] / 86400
    assert row["device_hours"] == row["train_days"] * 24 * 64
    assert row["cost"] == row["device_hours"] * 2.5
    for name in ("train_days", "device_hours", "cost"):
        assert rows["h100-8"][name] is None or rows["h100-8"]["status"] in ("OPTIMAL", "FEASIBLE")
    bad = {
        **row,
        "status": "INFEASIBLE",
        **{k: None for k in LAYOUT_COLUMNS},
    }
    assert check_row(bad) == "status INFEASIBLE with a time or cost to train"
    assert check_row({**bad, "train_days": None, "device_hours": None, "cost": None}) == (
        "status INFEASIBLE with a time or cost to train"  # the energy columns are still set
    )
    assert set(PLAN_COLUMNS) == {
        "train_days",
        "device_hours",
        "cost",
        "energy_j_per_step",
        "energy_kwh",
    }
    assert check_row({**bad, **{k: None for k in PLAN_COLUMNS}}) is None


def test_sweep_cli_takes_tokens_and_price(tmp_path):
    out = tmp_path / "s.csv"
    r = runner.invoke(
        app,
        [
            "sweep",
            "-m",
            "llama3-8b",
            "-c",
            "h100-64",
            "-o",
            str(out),
            "--no-progress",
            "--tokens",
            "2e12",
            "--price-per-device-hour",
            "1",
        ],
    )
    assert r.exit_code == 0, r.stderr
    (row,) = read_table(out)
    days = 2e12 / row["tokens_per_s"] / row["goodput"] / 86400
    assert row["cost"] == row["device_hours"] == pytest.approx(days * 24 * 64, rel=1e-12)


# ----------------------------------------------------------------------------- bad input
SWEEP = ["sweep", "-m", "debug", "-c", "h100-8", "-o"]


@pytest.mark.parametrize("command", ["solve", "estimate", "explain", "sweep"])
@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--tokens", "-1", "error: --tokens: -1.0 is not a number of tokens in (0, 1e+18]"),
        ("--tokens", "0", "error: --tokens: 0.0 is not a number of tokens in (0, 1e+18]"),
        ("--tokens", "2e18", "error: --tokens: 2e+18 is not a number of tokens in (0, 1e+18]"),
        (
            "--tokens",
            "nan",
            "error: Invalid value for '--tokens': Input should be a finite number (got 'nan')",
        ),
        (
            "--tokens",
            "inf",
            "error: Invalid value for '--tokens': Input should be a finite number (got 'inf')",
        ),
        (
            "--price-per-device-hour",
            "-0.5",
            "error: --price-per-device-hour: -0.5 is not a price in [0, 1e+06]",
        ),
        (
            "--price-per-device-hour",
            "nan",
            "error: Invalid value for '--price-per-device-hour': Input should be a finite number (got 'nan')",
        ),
        (
            "--price-per-device-hour",
            "1e7",
            "error: --price-per-device-hour: 10000000.0 is not a price in [0, 1e+06]",
        ),
    ],
)
def test_bad_tokens_and_price_exit_2_naming_the_option(
    bad_input, tmp_path, command, option, value, message
):
    base = (
        [*SWEEP, tmp_path / "s.csv"]
        if command == "sweep"
        else [command, "--model", "debug", "--cluster", "h100-8"]
    )
    assert bad_input(*base, option, value) == message
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("command", ["solve", "estimate"])
@pytest.mark.parametrize(
    "value, message",
    [
        (
            "scale_out_bandwith=0.5",
            "error: --what-if: unknown key 'scale_out_bandwith' (did you mean "
            "'scale_out_bandwidth'?); known: scale_out_bandwidth, link_bandwidth, hbm, "
            "hbm_bandwidth, peak_flops",
        ),
        ("peak_flop=2", "error: --what-if: unknown key 'peak_flop' (did you mean 'peak_flops'?)"),
        ("hbm=0", "error: --what-if hbm: 0 is not a factor in [0.001, 1000]"),
        ("hbm=-2", "error: --what-if hbm: -2 is not a factor in [0.001, 1000]"),
        ("hbm=nan", "error: --what-if hbm: nan is not a factor in [0.001, 1000]"),
        ("hbm=inf", "error: --what-if hbm: inf is not a factor in [0.001, 1000]"),
        ("hbm=two", "error: --what-if hbm: 'two' is not a number"),
        ("hbm", "error: --what-if: 'hbm' is not KEY=FACTOR (e.g. scale_out_bandwidth=0.5)"),
        ("hbm=2,hbm=3", "error: --what-if: hbm given twice"),
        ("hbm=2,", "error: --what-if: empty item in 'hbm=2,'"),
    ],
)
def test_bad_what_if_exits_2_naming_the_option(bad_input, command, value, message):
    assert bad_input(
        command, "--model", "debug", "--cluster", "h100-8", "--what-if", value
    ).startswith(message)


def test_library_checks_raise_the_same_errors():
    with pytest.raises(InvalidArgumentError, match="--tokens"):
        planning.check_tokens(float("nan"))
    with pytest.raises(InvalidArgumentError, match="--price-per-device-hour"):
        planning.check_price(float("inf"))
    with pytest.raises(InvalidArgumentError, match="--tokens"):
        expand_points("debug", "h100-8", "8", training_tokens=-1.0)
    assert planning.parse_what_if(" hbm = 2 , peak_flops=0.5") == {"hbm": 2.0, "peak_flops": 0.5}


# ----------------------------------------------------------------------------- the committed examples
BLOCK = re.compile(r"```console\n\$ layoutsearch (.*?)\n(.*?)```", re.S)


def volatile(line: str) -> bool:
    return "| wall " in line  # the solver's wall-clock time


@pytest.mark.parametrize("name", ["time_to_train.md", "what_if.md"])
def test_examples_show_what_the_commands_print(name):
    """Each console block of examples/NAME is the current output of its command (but wall times);
    regenerate with `python examples/generate_planning.py`."""
    blocks = BLOCK.findall((EXAMPLES / name).read_text())
    assert len(blocks) >= 3
    for command, shown in blocks:
        r = runner.invoke(app, shlex.split(command))
        assert r.exit_code == 0, (command, r.stderr)
        got = [line.rstrip() for line in r.stdout.rstrip("\n").splitlines() if not volatile(line)]
        want = [line.rstrip() for line in shown.rstrip("\n").splitlines() if not volatile(line)]
        assert got == want, (
            f"examples/{name}: `layoutsearch {command}` prints otherwise; run python examples/generate_planning.py"
        )


def test_time_to_train_example_is_llama70b_on_v5p_8192_at_15t_tokens():
    text = (EXAMPLES / "time_to_train.md").read_text()
    assert (
        "$ layoutsearch solve --model llama70b --cluster v5p-8192 --tokens 15e12 --price-per-device-hour 2.0"
        in text
    )
    best = run_json(*LLAMA70B_V5P_PRICED_SOLVE)["layouts"][0]
    row = (
        f"│ 1 │ {best['tokens_per_s']:,.0f} │ {best['goodput']:>7.1%} │ {best['train_days']:.1f} │ "
        f"{best['device_hours']:>12,.0f} │ {best['cost']:,.0f} │"
    )
    assert row in text and best["cost"] == 2.0 * best["device_hours"]
