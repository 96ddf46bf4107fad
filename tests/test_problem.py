"""A result document carries its whole problem, and export, sweep and validate read it back."""

import json

import pytest

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.problem import Problem, layout_from_record
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs.estimate import estimate
from layoutsearch.report.output import estimate_document


def test_problem_record_round_trips_every_assumption():
    """Every Workload field (precisions, overlap, fused attention, ZeRO-3 collectives, routing) survives JSON."""
    workload = Workload(
        global_batch_seqs=64,
        seq_len=2048,
        grad_bytes_per_param=2,
        optimizer_bytes_per_param=4,
        flash_attention=False,
        tp_comm_overlap=True,
        fsdp_collectives_per_layer=12,
        training_tokens=1e12,
        precision="fp16",
        routing="forced",
        routing_cv=0.12,
    )
    problem = Problem.build("debug", "h100-16", workload)
    back = Problem.from_record(json.loads(json.dumps(problem.record())))
    assert back.workload == problem.workload
    assert (
        problem.workload.framework == "megatron" and workload.framework is None
    )  # the GPU default, named
    assert back.model == problem.model and back.cluster.axes == problem.cluster.axes


def test_estimate_document_reads_back_to_the_same_cost():
    """The layout record of an estimate document rebuilds the same layout, which costs the same."""
    problem = Problem.build(
        "debug", "h100-16", Workload(global_batch_seqs=64, seq_len=1024, tp_comm_overlap=True)
    )
    est = estimate(problem, Layout(fsdp=8, tp=2, recompute="selective"))
    doc = json.loads(json.dumps(estimate_document(est)))
    again = estimate(Problem.from_record(doc["problem"]), layout_from_record(doc["layout"]))
    assert again.layout == est.layout and again.step_time_s == est.step_time_s


def test_unplaced_and_empty_placements_differ():
    """axes=None is 'not placed yet' (the fastest placement is chosen once); () is a placed layout of
    one device: a 1-device cluster estimates without recursion."""
    one = Problem.build("debug", "h100-1", Workload(global_batch_seqs=8, seq_len=1024))
    est = estimate(one, Layout(dp=1))
    assert est.layout.axes == () and est.layout.placed and est.step_time_s > 0
    assert not Layout(dp=1).placed


def test_a_record_field_of_the_wrong_type_is_one_line():
    with pytest.raises(
        InvalidArgumentError,
        match=r"layout: field 'num_microbatches': Input should be a valid integer",
    ):
        layout_from_record(
            {
                "degrees": {"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "cp": 1},
                "zero_stage": 0,
                "num_microbatches": None,
                "recompute": "none",
            }
        )
