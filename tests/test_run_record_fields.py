"""The run-record fields that replaced reading a record's free text (docs/RUN_RECORDS.md, "Stated settings"): for
one record per field, the stated value reaches the engine, and another value changes the prediction while the
record's source and derived notes, which still say the old setting in the words the mapping once read, change
nothing."""

import copy

import pytest

from layoutsearch.validation.mapping import mapping_notes, record_to_estimate
from layoutsearch.validation.runs import load_runs

# (runs file, record id, block, field, value instead of the stated one, what the engine gets: (as stated, instead))
CASES = [
    (
        "runs_dev.yaml",
        "megatron2021-table1-1-7b",  # source: "Narayanan et al. 2021": the old year rule's unfused
        "workload",
        "fused_attention",
        None,
        ("workload.flash_attention", False, True),
    ),
    (
        "runs_dev.yaml",
        "megatron2021-table2-zero-3-175b-384gpu",  # source names DeepSpeed's ZeRO-3
        "workload",
        "fsdp_collectives_per_layer",
        None,
        ("workload.fsdp_collectives_per_layer", 12, 1),
    ),
    (
        "runs_dev.yaml",
        "bloom176b-production-384gpu",  # source: the tr11-176B-ml slurm
        "workload",
        "launch_blocking",
        None,
        ("workload.launch_blocking", True, False),
    ),
    (
        "runs_moe_dev.yaml",
        "mlperf6-deepseekv3-gb200-mxfp8-n256-tp2pp4vp4ep32-google",  # notes: full-iteration CUDA graph
        "workload",
        "cuda_graphs",
        None,
        ("workload.cuda_graphs", "full_iteration", "none"),
    ),
    (
        "runs_moe_dev.yaml",
        "modelzoo-qwen3-235b-h100-bf16-n256-script-320tf",  # notes: A2A_OVERLAP=1
        "workload",
        "ep_comm_overlap",
        False,
        ("workload.ep_comm_overlap", True, False),
    ),
    (
        "runs_moe_dev.yaml",
        "modelzoo-qwen3-235b-h100-bf16-n256-fsdp",  # notes: DeepEP
        "workload",
        "moe_dispatcher",
        "alltoall",
        ("workload.deepep", True, False),
    ),
    (
        "runs_moe_dev.yaml",
        "automodel-kimi-k2-h100-bf16-n256-pp8ep32fsdp32-gbs512",  # notes: a _te_ benchmark config
        "workload",
        "vendor_attention",
        None,
        ("workload.vendor_attention", True, None),  # None: the profile's,
    ),
    (
        "runs_dev.yaml",
        "maxtext-v5p-2023-32b-1xv5p-128",  # notes: remat_policy=minimal
        "layout",
        "recompute_policy",
        None,
        ("layout.recompute", "minimal", "selective"),
    ),
    (
        "runs_moe_dev.yaml",
        "modelzoo-qwen3-235b-h100-bf16-n256-seq32k-tp4cp2",  # notes: recompute of layernorm and moe
        "layout",
        "recompute_modules",
        None,
        ("layout.recompute", "norm_moe", "selective"),
    ),
]


@pytest.fixture(scope="module")
def records(data_file) -> dict[str, dict]:
    return {
        r["id"]: r
        for name in ("runs_dev.yaml", "runs_moe_dev.yaml")
        for r in load_runs(data_file(name))
    }


def engine_value(mapped: tuple, dotted: str):
    """``workload.x`` of the mapped Problem or ``layout.x`` of the placed Layout."""
    problem, layout, _ = mapped
    block, name = dotted.split(".")
    return getattr(problem.workload if block == "workload" else layout, name)


@pytest.mark.parametrize(("runs", "rid", "block", "field", "instead", "engine"), CASES)
def test_a_stated_field_alone_sets_the_engine_value(
    records, runs, rid, block, field, instead, engine
):
    """The record's field reaches the engine; another value in the field (its text unchanged) changes the engine
    value and the predicted tokens/s."""
    dotted, stated, changed = engine
    rec = records[rid]
    assert rec[block][field] is not None
    as_stated = record_to_estimate(rec)
    assert engine_value(as_stated, dotted) == stated
    other = copy.deepcopy(rec)
    other[block][field] = instead
    mapped = record_to_estimate(other)
    assert engine_value(mapped, dotted) == changed
    assert mapped[2].tokens_per_s != pytest.approx(as_stated[2].tokens_per_s, rel=1e-6)


def test_the_parallel_block_field_alone_makes_the_block_parallel(records):
    """model.parallel_block true is costed as a parallel block with one norm (rule 6): on MaxText's 32B on
    64 v5p chips (tp 4) half the exposed TP time (0.1990 s against 0.3979 s serial) and a lower peak (84.38
    GB against 95.45 GB). The same record without the field (its derived.block still saying "parallel
    block") is costed serial: the mapping reads the field, not the text. Until 2026-12-05 the field only
    wrote the note "parallel block costed as serial"."""
    rec = records["maxtext-v5p-2023-32b-1xv5p-128"]
    assert rec["model"]["parallel_block"] is True
    other = copy.deepcopy(rec)
    other["model"]["parallel_block"] = None
    assert "parallel block" in other["derived"]["block"]
    (problem, _, parallel), (serial_problem, _, serial) = (
        record_to_estimate(rec),
        record_to_estimate(other),
    )
    assert (problem.model.parallel_block, problem.model.norms_per_layer) == (True, 1)
    assert (serial_problem.model.parallel_block, serial_problem.model.norms_per_layer) == (False, 2)
    assert parallel.time_s["exposed_comm/tp"] == pytest.approx(0.19897, rel=1e-4)
    assert serial.time_s["exposed_comm/tp"] == pytest.approx(0.39791, rel=1e-4)
    assert parallel.memory_bytes["peak"] == pytest.approx(84.375e9, rel=1e-4)
    assert serial.memory_bytes["peak"] == pytest.approx(95.448e9, rel=1e-4)
    assert not any("parallel block" in n for n in mapping_notes(rec))


def test_an_unknown_recompute_policy_is_a_skip_naming_it(records):
    """layout.recompute_policy outside the engine's policies skips the record with the value and the choices."""
    rec = copy.deepcopy(records["maxtext-v5p-2023-32b-1xv5p-128"])
    rec["layout"]["recompute_policy"] = "everything"
    reason = record_to_estimate(rec)
    assert isinstance(reason, str) and reason.startswith(
        "layout: recompute_policy 'everything' is not one of none, selective, full"
    )
