"""The once-per-step gradient reductions run in the last microbatch's backward, or after the whole schedule
(Workload.grad_reduce_overlap; costs.terms.reduces_in_backward): Megatron-LM's local DDP of 2021 and its
distributed optimizer of 2022 reduced after the schedule, before --overlap-grad-reduce (August 2023), while
Narayanan et al.'s 1.7B to 18B rows ran PyTorch's DDP (rule 32)."""

import pytest
from builders import data_path

import layoutsearch as ls
from layoutsearch.core.frameworks import grad_reduce_overlap_of
from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import load_runs

RUNS = {r["id"]: r for r in load_runs(data_path("runs_dev.yaml"))}


def _dp_s(**extra) -> float:
    run = ls.estimate(model="llama3-8b", cluster="h100-16", seqs=64, layout="dp=2,tp=8", **extra)
    return run.estimate.time_s["exposed_comm/dp"]


def test_a_reduction_waited_for_is_exposed_whole():
    """llama3-8b on two H100 nodes, tp 8 in each and dp 2 across: Megatron's bf16 run reduces fp32 gradients,
    8,030,261,248 / 8 parameters x 4 B = 4.015 GB a GPU, all-reduced by two ranks over 50 GB/s x 0.8 of
    InfiniBand: 2 x 1/2 x 4.015 GB / 40 GB/s = 0.1004 s (plus the hops' latency). In the last microbatch's
    backward (Megatron's --overlap-grad-reduce, the profile's) it hides; waited for, all of it shows."""
    by_hand = 8_030_261_248 / 8 * 4 / 40e9
    assert by_hand == pytest.approx(0.10038, abs=1e-5)
    assert _dp_s() == 0.0
    assert _dp_s(grad_reduce_overlap=False) == pytest.approx(by_hand, rel=2e-3)


def test_the_2021_release_reduces_after_the_schedule_unless_the_run_used_torch_ddp():
    """Narayanan et al.'s 39B row takes its release's local DDP (false); the 18B row states PyTorch's DDP
    (examples/sc21/run_table_1.sh, DDP=torch), which reduces in the backward; Korthikanti et al.'s release of
    2022 reduced after the schedule too (their rows run no data parallelism)."""
    big = record_to_problem(RUNS["megatron2021-table1-39-1b"])[0].workload
    small = record_to_problem(RUNS["megatron2021-table1-18-4b"])[0].workload
    assert (big.grad_reduce_overlap, small.grad_reduce_overlap) == (False, True)
    assert not grad_reduce_overlap_of(big, "gpu") and grad_reduce_overlap_of(small, "gpu")
    korthikanti = load_runs(data_path("korthikanti_heldout.yaml"))[0]
    assert record_to_problem(korthikanti)[0].workload.grad_reduce_overlap is False
    today = {**RUNS["megatron2021-table1-39-1b"]}
    today["workload"] = {**today["workload"], "framework_release": None}
    assert (
        record_to_problem(today)[0].workload.grad_reduce_overlap is None
    )  # the profile's: overlapped


def test_the_command_line_and_the_exports_carry_the_choice(cli_main, tmp_path):
    """--no-grad-reduce-overlap: Megatron leaves out --overlap-grad-reduce (its default is off), Megatron-Bridge
    writes overlap_grad_reduce false, torchtitan refuses it."""
    base = ["estimate", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "64"]
    base += ["--layout", "dp=2,tp=8", "--microbatches", "8", "--format", "json"]

    def saved(name: str, *extra: str):
        path = tmp_path / f"{name}.json"
        code, out, err = cli_main(*base, *extra)
        assert code == 0, err
        path.write_text(out)
        return path

    waits, overlaps = saved("waits", "--no-grad-reduce-overlap"), saved("overlaps")
    code, _, _ = cli_main("export", waits, "--to", "megatron", "-o", tmp_path / "waits.sh")
    assert code == 0 and "--overlap-grad-reduce" not in (tmp_path / "waits.sh").read_text()
    code, _, _ = cli_main("export", overlaps, "--to", "megatron", "-o", tmp_path / "overlaps.sh")
    assert code == 0 and "--overlap-grad-reduce" in (tmp_path / "overlaps.sh").read_text()
    code, _, err = cli_main("export", waits, "--to", "megatron-bridge", "-o", tmp_path / "mb.yaml")
    assert code == 0, err
    assert "overlap_grad_reduce: false" in (tmp_path / "mb.yaml").read_text()
    refused = cli_main("export", waits, "--to", "torchtitan", "-o", tmp_path / "tt")
    words = "the gradient reductions waited for after the whole schedule (--no-grad-reduce-overlap)"
    assert refused[0] == 2 and f"torchtitan cannot express {words}" in refused[2]
    assert "nearest: --grad-reduce-overlap" in refused[2]
