"""DeepSpeed's context parallelism is Ulysses (the all-to-all flavour) beside the data-parallel
degrees only: the search, the ds_config it writes, and its checker."""

from __future__ import annotations

import json

from builders import exported, proven_as_enumerated, solve_doc, solve_export

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.export import check_export

# llama3-8b (32 heads, 8 kv heads) on 16 H100s, 16 sequences of 32768 tokens: fsdp 4 x cp 4.
ULYSSES = Layout(fsdp=4, cp=4, cp_flavour="a2a", zero_stage=3, recompute="full")


def _doc() -> dict:
    return solve_doc("llama3-8b", "h100-16", 16, 32768, ULYSSES, framework="deepspeed")


def test_ulysses_writes_sequence_parallel_size_and_the_code_that_registers_it():
    """sequence_parallel_size = cp = 4; DeepSpeed's batch world is 16 / 4 = 4 ranks, so micro x
    accumulation x 4 = the 16 sequences; no AutoTP; the script registers Ulysses with the same size."""
    cfg = json.loads(exported(_doc(), "deepspeed"))
    assert cfg["sequence_parallel_size"] == 4
    assert "tensor_parallel" not in cfg
    assert cfg["train_batch_size"] == 16
    assert cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 4 == 16
    ulysses = [n for n in cfg["_layoutsearch"]["set_in_code"] if n.startswith("sequence parallel")]
    assert len(ulysses) == 1
    assert "register_with_transformers(" in ulysses[0]
    assert "sequence_parallel_size=4," in ulysses[0]
    assert "seq_length=32768," in ulysses[0]
    assert "each group of 4 consecutive ranks splits one sequence" in ulysses[0]


def test_the_checker_reads_sequence_parallel_size():
    """A JSON whose sequence_parallel_size is 2 instead of 4: DeepSpeed's batch world becomes 16 / 2 = 8,
    so the batch no longer adds up, and the written cp and DP world differ from the layout's."""
    doc = _doc()
    cfg = json.loads(exported(doc, "deepspeed"))
    cfg["sequence_parallel_size"] = 2
    assert check_export("deepspeed", json.dumps(cfg), doc) == [
        "train_batch_size 16 != micro 4 x accumulation 1 x DP world 8",
        "cp is 2, layout has 4",
        "DP world is 8, layout has 4",
    ]


def test_solve_for_deepspeed_runs_ulysses_alone(tmp_path):
    """128k-token sequences of llama3-8b on 64 H100s for DeepSpeed: the winner splits the sequence
    with Ulysses (a2a) and keeps tp = pp = 1, and its export carries the same cp."""
    doc, text = solve_export(
        "llama3-8b",
        "h100-64",
        "deepspeed",
        tmp_path / "ds.json",
        "--seq-len",
        "131072",
        "--seqs",
        "64",
    )
    best = doc["layouts"][0]
    assert best["degrees"]["cp"] > 1
    assert best["cp_flavour"] == "a2a"
    assert (best["degrees"]["tp"], best["degrees"]["pp"]) == (1, 1)
    assert json.loads(text)["sequence_parallel_size"] == best["degrees"]["cp"]


def test_cpsat_ranks_deepspeed_cp_as_the_enumerator():
    """cp pinned to 4 for DeepSpeed (llama3-8b, 16 sequences of 32768 tokens on h100-16): CP-SAT's
    top 3 are the enumerator's, all Ulysses with tp = pp = 1."""
    problem = Problem.build(
        load_model("llama3-8b"),
        resolve_cluster("h100-16"),
        Workload(global_batch_seqs=16, seq_len=32768, framework="deepspeed"),
    )
    proven = proven_as_enumerated(problem, SearchOptions(fix={"cp": 4}), 3, "deepspeed")
    assert {(e.layout.cp_flavour, e.layout.tp, e.layout.pp) for e in proven} == {("a2a", 1, 1)}
