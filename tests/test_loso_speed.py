"""What makes a calibration fit's residuals cheap without changing them: the time-only step
(``estimate.step_seconds``), the layout keys kept per (model, cluster axes, layout) and
``per_key``'s one-row path."""

from dataclasses import replace

import numpy as np
import pytest

from layoutsearch.core.arrays import per_key
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs.estimate import estimate, step_seconds
from layoutsearch.validation.calibrate import usable_problems, with_calibration
from layoutsearch.validation.validate import load_runs


@pytest.fixture(scope="module")
def placed() -> tuple:
    """Llama 3 8B on 64 H100 (8 nodes of 8) at fsdp 16, tp 2, pp 2, ZeRO-3, 8 microbatches, as estimate places it."""
    problem = Problem.build(
        load_model("llama3-8b"),
        resolve_cluster("h100-64"),
        Workload(global_batch_seqs=256, seq_len=4096),
    )
    layout = Layout(fsdp=16, tp=2, pp=2, zero_stage=3, num_microbatches=8)
    return problem, estimate(problem, layout).layout


@pytest.mark.parametrize("name", ["runs_dev.yaml", "runs_moe_dev.yaml"])
def test_step_seconds_is_the_estimates_step_time_on_every_usable_record(data_file, name):
    """step_seconds equals estimate().step_time_s to the last bit on each record a fit uses."""
    problems = [
        prob
        for r in load_runs(data_file(name))
        if r["cluster"]["accelerator"] is not None
        for prob in usable_problems([r], r["cluster"]["accelerator"])
    ]
    assert len(problems) >= 60  # 149 dense and 69 MoE records when written
    for pid, (problem, layout), _ in problems:
        assert layout.placed, pid
        assert step_seconds(problem, layout) == estimate(problem, layout, strict=False).step_time_s


def test_a_link_bandwidth_changes_the_step_seconds(placed):
    """Halving every link's bandwidth after a first costing gives the new cluster's step time, not the kept one."""
    problem, layout = placed
    before = step_seconds(problem, layout)
    axes = tuple(
        replace(a, bytes_per_s_per_direction=a.bytes_per_s_per_direction / 2)
        for a in problem.cluster.axes
    )
    slower = replace(problem, cluster=replace(problem.cluster, axes=axes))
    after = step_seconds(slower, layout)
    assert after > before * 1.01
    assert after == estimate(slower, layout).step_time_s


def test_a_calibration_field_changes_the_step_seconds(placed):
    """Another matmul efficiency (the accelerator's, the axes kept) gives that calibration's step time."""
    problem, layout = placed
    before = step_seconds(problem, layout)
    acc = problem.cluster.accelerator
    assert acc.matmul_efficiency != 0.4
    slower = replace(problem, cluster=with_calibration(problem.cluster, matmul_efficiency=0.4))
    after = step_seconds(slower, layout)
    assert after != before
    assert after == estimate(slower, layout).step_time_s


def test_per_key_of_one_row_spreads_to_the_broadcast_shape():
    """A one-row key pair (3) and [[2]] gives [[32]]; fn sees int64 keys of one entry; dicts and tuples spread."""
    seen = []

    def fn(a, b):
        seen.append((a.dtype, a.shape, b.dtype, b.shape))
        return {"sum": a * 10 + b, "pair": (a, 7.5)}

    out = per_key(fn, np.array([3], dtype=np.int32), np.array([[2]]))
    assert seen == [(np.dtype(np.int64), (1,), np.dtype(np.int64), (1,))]
    assert out["sum"].tolist() == [[32]] and out["sum"].dtype == np.int64
    assert out["pair"][0].tolist() == [[3]] and out["pair"][1] == 7.5


def test_per_key_of_one_row_equals_the_distinct_keys_path():
    """The one-row path gives row 0 of the general path's answer for keys (5, 1) among two rows."""

    def fn(a, b):
        return a / (b + 2.0), a * b

    one = per_key(fn, np.array([5]), np.array([1]))
    two = per_key(fn, np.array([5, 9]), np.array([1, 4]))
    assert one[0].tolist() == [5 / 3] and one[0].tolist() == two[0][:1].tolist()
    assert one[1].tolist() == [5] and two[1].tolist() == [5, 36]
