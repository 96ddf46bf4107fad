"""What makes `layoutsearch validate` fast without changing its numbers: the work spread over processes
(``core.parallel``), each record's placement estimate reused (``mapping.record_to_estimate``), and the
run-record fields that replaced reading the notes (docs/RUN_RECORDS.md)."""

import copy
import os

import pytest

from layoutsearch.core.parallel import parallel_map
from layoutsearch.costs.estimate import estimate
from layoutsearch.validation.mapping import record_to_estimate, record_to_problem, routing
from layoutsearch.validation.validate import load_runs, validate_runs

SMALL = (  # three 8-GPU records of one source: quick to rank
    "llmfoundry-mpt-h100-7b-seq8192-8gpu-mbs8-ga2",
    "llmfoundry-mpt-h100-13b-seq2048-8gpu-mbs2-ga1",
    "llmfoundry-mpt-h100-30b-seq1024-8gpu-mbs6-ga21",
)


@pytest.fixture(scope="module")
def dense(data_file) -> dict[str, dict]:
    return {r["id"]: r for r in load_runs(data_file("runs_dev.yaml"))}


@pytest.fixture(scope="module")
def moe(data_file) -> dict[str, dict]:
    return {r["id"]: r for r in load_runs(data_file("runs_moe_dev.yaml"))}


def test_parallel_map_keeps_the_order_and_takes_closures():
    """Two workers square 0..9 in order, a closure over a local (unpicklable) reaching them by fork."""
    offset = 3
    assert parallel_map(lambda x: x * x + offset, list(range(10)), workers=2) == [
        x * x + 3 for x in range(10)
    ]


def test_parallel_map_inside_a_worker_is_serial():
    """A map inside a worker runs serially (a pool's workers have no children) and still answers."""
    out = parallel_map(lambda x: parallel_map(lambda y: 10 * x + y, [1, 2], workers=2), [1, 2], 2)
    assert out == [[11, 12], [21, 22]]


def _pids_of_a_map(queue) -> None:
    queue.put(parallel_map(lambda _: os.getpid(), [0, 1, 2, 3], workers=2) + [os.getpid()])


def test_parallel_map_in_another_pools_worker_is_serial():
    """In a process that multiprocessing started (a sweep's executor, a user's pool), the map stays in that
    process: every item runs where the map was called, not in new children of a worker that has one CPU."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pids_of_a_map, args=(queue,))
    child.start()
    pids = queue.get(timeout=60)
    child.join(60)
    assert pids[:4] == [pids[4]] * 4 and pids[4] != os.getpid()


def test_parallel_map_runs_in_other_processes():
    """With two workers and two slow-enough items, the results come from processes other than this one."""
    pids = parallel_map(lambda _: os.getpid(), [0, 1, 2, 3], workers=2)
    assert os.getpid() not in pids


def test_parallel_and_serial_validation_are_identical(dense):
    """validate_runs on three records gives the same document with 2 workers as with 1 (ranks included)."""
    records = [dense[i] for i in SMALL]
    serial = validate_runs(records, workers=1, warnings=[])
    spread = validate_runs(records, workers=2, warnings=[])
    assert spread == serial
    assert [e["published_layout_rank"] is not None for e in serial["records"]] == [True] * 3


def test_the_placement_estimate_is_the_placed_layouts(dense):
    """record_to_estimate's estimate (the fastest placement, costed while placing) is the placed layout's."""
    rec = dense[SMALL[1]]
    problem, layout, est = record_to_estimate(rec)
    assert (problem, layout) == record_to_problem(rec)
    again = estimate(problem, layout, strict=False)
    assert est.tokens_per_s == again.tokens_per_s and est.memory_bytes == again.memory_bytes
    assert est.layout == layout


def test_routing_is_the_records_field_not_its_notes(moe):
    """workload.moe_routing decides the routing: forced -> costed forced; a 'real routing' phrase in the
    notes alone (field null) is 'not stated', costed learned."""
    (rec,) = [r for rid, r in moe.items() if rid.startswith("mbridge-26.04-b200-deepseek-v3")][:1]
    assert rec["workload"]["moe_routing"] == "forced"
    assert record_to_problem(rec)[0].workload.routing == "forced"
    worded = copy.deepcopy(rec)
    worded["workload"]["moe_routing"] = None
    worded["model"]["notes"] = "real routing, force-balanced"
    assert routing(worded) == "not stated"
    assert record_to_problem(worded)[0].workload.routing == "learned"


def test_sliding_window_is_the_records_field_not_its_notes(moe):
    """model.sliding_window 128 with full_attention_layers 18 maps to the engine model; the old phrase in the
    notes alone maps to no window."""
    rec = next(r for rid, r in moe.items() if rid.startswith("mbridge-26.04.01-b200-gpt-oss-120b"))
    assert (rec["model"]["sliding_window"], rec["model"]["full_attention_layers"]) == (128, 18)
    worded = copy.deepcopy(rec)
    worded["model"].update(sliding_window=None, full_attention_layers=None)
    worded["model"]["notes"] = "sliding-window 128 on every other layer"
    model = record_to_problem(worded)[0].model
    assert (model.sliding_window, model.full_attention_layers) == (None, 0)


def test_a_joint_fit_starts_from_the_values_it_is_given(dense, monkeypatch):
    """fit_joint(start_from=...) starts at those values (a family's own field and the shared one), at the mean
    of the catalogue values without them: the search is stopped at its start to read it."""
    from layoutsearch.validation import calibrate

    monkeypatch.setattr(calibrate, "levenberg_marquardt", lambda fn, u0: (u0, 0, None))
    probs = calibrate.usable_problems([dense[i] for i in SMALL], "h100")
    start = {"h100-class": {"matmul_efficiency": 0.61, "overlap_interference": 0.3}}
    fields = ("matmul_efficiency",), ("overlap_interference",)
    warm = calibrate.fit_joint({"h100-class": probs}, *fields, start_from=start)["h100-class"]
    assert warm == pytest.approx({"matmul_efficiency": 0.61, "overlap_interference": 0.3})
    cold = calibrate.fit_joint({"h100-class": probs}, *fields)["h100-class"]
    acc = probs[0][1][0].cluster.accelerator
    assert cold["matmul_efficiency"] == pytest.approx(acc.matmul_efficiency)
