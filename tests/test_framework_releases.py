"""Searching without sequence parallelism, and a record's claim among what its framework release could run
(docs/run_record_mapping.md, rule 32)."""

import json
import re
from dataclasses import replace

import pytest
from builders import data_path, proven_top

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs.estimate import estimate
from layoutsearch.search import solve
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables
from layoutsearch.validation.mapping import (
    framework_releases,
    mapping_notes,
    release_of,
    release_options,
)
from layoutsearch.validation.runs import load_runs


def _problem() -> Problem:
    """Llama 3 8B's 64 sequences of 8192 tokens on 16 H100s: tensor parallelism pays, so SP matters."""
    return Problem.build(
        load_model("llama3-8b"),
        resolve_cluster("h100-16"),
        Workload(global_batch_seqs=64, seq_len=8192),
    )


def test_a_search_without_sequence_parallelism_costs_its_layouts_without_it():
    """With ``sequence_parallel=False`` every candidate is a layout without SP, the tables cost it as
    ``estimate`` does, and CP-SAT ranks what the enumerator ranks."""
    problem = _problem()
    options = SearchOptions(sequence_parallel=False, fix={"tp": 4})
    space = build_space(problem, options)
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, info = proven_top(space, tables, "step-time", 3)
    assert cps == enum and info["status"] == "OPTIMAL"
    result = solve(problem, SearchRequest(top_k=3, options=options))
    winner = result.layouts[0]
    assert winner.layout.tp == 4 and winner.layout.sequence_parallel is False
    again = estimate(problem, winner.layout)
    assert again.step_time_s == pytest.approx(winner.step_time_s, rel=1e-9)
    assert again.memory_bytes["peak"] == pytest.approx(winner.memory_bytes["peak"], rel=1e-9)
    # the same layout with SP holds less: SP shards the norms' and residuals' activations over tp
    with_sp = estimate(problem, replace(winner.layout, sequence_parallel=True))
    assert with_sp.memory_bytes["peak"] < again.memory_bytes["peak"]


def test_the_release_table_names_record_frameworks_and_known_values():
    """Four releases, each of a record framework, with a source; the limits read as written. The Megatron-LM of
    2021 and of 2022 waited for an interleaved schedule's sends (--overlap-p2p-communication came in 2023)."""
    releases = framework_releases()
    assert set(releases) == {
        "megatron-lm-2021",
        "megatron-lm-2022",
        "bigscience-megatron-deepspeed",
        "llm-foundry-2023",
    }
    assert releases["megatron-lm-2021"]["pp_comm_overlap"] is False
    assert releases["megatron-lm-2022"]["pp_comm_overlap"] is False
    assert releases["megatron-lm-2022"]["recompute"] == ["none", "selective", "full"]
    assert releases["llm-foundry-2023"]["degrees"] == ["dp", "fsdp"]
    assert releases["megatron-lm-2021"]["zero_stages"] == [0]
    assert releases["bigscience-megatron-deepspeed"]["schedules"] == ["1f1b"]
    assert all(r["source"] for r in releases.values())


def _record(**workload) -> dict:
    rec = next(
        r
        for r in load_runs(data_path("runs_dev.yaml"))
        if r["id"] == "llmfoundry-mpt-a100-40g-13b-seq2048-8gpu-mbs4-ga16"
    )
    return {**rec, "workload": {**rec["workload"], **workload}}


FSDP8 = Layout(dp=1, fsdp=8, zero_stage=3, num_microbatches=16, recompute="full")


def test_an_llm_foundry_2023_record_searches_fsdp_alone_without_selective_recompute():
    """llm-foundry's 2023 tables ran FSDP1: dp and fsdp only, ZeRO 0, 2 or 3, recompute on or off."""
    options = release_options(_record(), FSDP8)
    assert options.only == ("dp", "fsdp")
    assert options.zero_stages == (0, 2, 3)
    assert options.recompute == ("none", "full")
    assert options.sequence_parallel is True  # the table does not limit it (tp is 1 anyway)
    assert options.schedules is None and options.fix == {}


def test_the_published_layouts_own_choices_stay_allowed():
    """Narayanan et al.'s ZeRO-3 comparison rows ran DeepSpeed's ZeRO-3 over fsdp with tp 2, which the
    Megatron-LM of 2021 did not have: the search keeps their own stage and degrees."""
    rec = _record(framework="megatron", framework_release="megatron-lm-2021")
    zero3 = Layout(dp=1, fsdp=192, tp=2, zero_stage=3, num_microbatches=1, recompute="full")
    options = release_options(rec, replace(zero3, sequence_parallel=False))
    assert options.only == ("dp", "fsdp", "tp", "pp")
    assert options.zero_stages == (0, 3)
    assert options.sequence_parallel is False
    assert options.schedules == ("1f1b", "interleaved")
    # a published layout with sequence parallelism keeps it searchable
    assert release_options(rec, zero3).sequence_parallel is True


def test_an_unknown_release_or_one_of_another_framework_is_noted_and_searches_everything():
    unknown = _record(framework_release="llm-foundry-2022")
    assert release_options(unknown, FSDP8) == SearchOptions()
    assert release_of(unknown) == (
        "workload.framework_release 'llm-foundry-2022': not in framework_releases.yaml "
        "(did you mean 'llm-foundry-2023'?); the claim searches every choice"
    )
    assert release_of(unknown) in mapping_notes(unknown)
    other = _record(framework_release="megatron-lm-2021")
    assert release_options(other, FSDP8) == SearchOptions()
    assert release_of(other) == (
        "workload.framework_release 'megatron-lm-2021' is a megatron release, not of "
        "workload.framework 'llm-foundry'; the claim searches every choice"
    )
    assert release_of(_record(framework_release=None)) is None


def test_solve_no_sequence_parallel_searches_layouts_without_it(cli_main, tmp_path):
    """`solve --no-sequence-parallel` (and the problem file's `sequence_parallel: false`, the same layouts) returns
    layouts without sequence parallelism; without the flag, every layout has it."""
    args = (
        "solve",
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-16",
        *("--seqs", "64", "--fix", "tp=4"),
    )
    code, out, _ = cli_main(*args, "--no-sequence-parallel", "--format", "json")
    assert code == 0
    without = json.loads(out)["layouts"]
    assert [x["sequence_parallel"] for x in without] == [False] * 3
    code, out, _ = cli_main(*args, "--format", "json")
    assert code == 0 and [x["sequence_parallel"] for x in json.loads(out)["layouts"]] == [True] * 3
    problem = tmp_path / "p.yaml"
    problem.write_text(
        "model: llama3-8b\ncluster: h100-16\nseqs: 64\nfix: tp=4\nsequence_parallel: false\n"
    )
    code, out, _ = cli_main("solve", "--problem", problem, "--format", "json")
    assert code == 0 and json.loads(out)["layouts"] == without


def test_torchtitan_0_2_runs_tp_with_sequence_parallelism_only_and_0_3_writes_it_off():
    """torchtitan 0.2's TP plans shard the norms with SequenceParallel whenever tp > 1: a saved tp 8 layout
    costed without sequence parallelism is refused (rule torchtitan-tp-without-sp), and 0.3.0 writes its
    parallelism.enable_sequence_parallel = False, which its check reads back."""
    from builders import export_docs

    from layoutsearch.core.errors import InvalidLayoutError
    from layoutsearch.export import check_export, export_document

    doc = export_docs()["fsdp_tp_no_sp"]
    with pytest.raises(
        InvalidLayoutError,
        match=re.escape(
            "torchtitan cannot express tp(8) without sequence parallelism (the layout's sequence_parallel) "
            "(0.2's tensor-parallel plans shard the norms with SequenceParallel whenever tp > 1 "
            "(parallelism.enable_sequence_parallel from 0.3.0: export to torchtitan-0.3)); nearest: "
            "--sequence-parallel, or export to maxtext or megatron or megatron-bridge or torchtitan-0.3 "
            "or deepspeed"
        ),
    ):
        export_document(doc, "torchtitan")
    text = export_document(doc, "torchtitan-0.3")
    assert "'enable_sequence_parallel': False" in text
    assert check_export("torchtitan-0.3", text, doc) == []
    forged = text.replace("'enable_sequence_parallel': False", "'enable_sequence_parallel': True")
    assert check_export("torchtitan-0.3", forged, doc) == [
        "PARALLELISM enable_sequence_parallel is not the layout's sequence_parallel (False)"
    ]
    with_sp = export_docs()["fsdp_tp"]
    assert "enable_sequence_parallel" not in export_document(with_sp, "torchtitan-0.3")


def test_solve_for_torchtitan_without_sequence_parallelism_keeps_tp_at_1(cli_main, tmp_path):
    """`solve --no-sequence-parallel --export torchtitan` searches tp 1 alone; fixing tp 2 leaves nothing, and
    the explanation names the rule (exit 1)."""
    args = ["solve", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "64"]
    args += ["--seq-len", "8192", "--no-sequence-parallel", "--export", "torchtitan"]
    code, out, _ = cli_main(*args, "-o", tmp_path / "t.toml", "--format", "json")
    assert code == 0
    assert {x["degrees"]["tp"] for x in json.loads(out)["layouts"]} == {1}
    code, _, err = cli_main(*args, "--fix", "tp=2", "-o", tmp_path / "u.toml")
    assert code == 1 and err.strip().endswith(
        "no feasible layout: no layout satisfies the rules: 'torchtitan: tensor parallelism with sequence "
        "parallelism only' (torchtitan-tp-without-sp) removes the last 20 degree tuples"
    )


def test_fp16_megatron_runs_keep_fp16_gradients():
    """Rule 33: Megatron-LM's fp16 keeps and all-reduces fp16 gradients (--accumulate-allreduce-grads-in-fp32 is
    off by default, forced on only for bf16: megatron/arguments.py at de7dc40, as Narayanan et al. ran it): 2 bytes
    a gradient, named in the notes. DeepSpeed's fp16 rows keep 4 (their measured peaks lie above a prediction with
    2: the memory model lacks DeepSpeed's buffers); a record stating its reduction dtype keeps that."""
    from layoutsearch.validation.mapping import half_grads_because, record_to_problem

    runs = {r["id"]: r for r in load_runs(data_path("runs_dev.yaml"))}
    narayanan = runs["megatron2021-table1-1008-0b"]
    assert record_to_problem(narayanan)[0].workload.grad_bytes_per_param == 2
    assert (
        "Megatron-LM's fp16 keeps and all-reduces fp16 gradients (--accumulate-allreduce-grads-in-fp32 is off by "
        "default and forced on only for bf16) (rule 33)"
    ) in mapping_notes(narayanan)
    bloom = next(
        r
        for r in runs.values()
        if r["workload"].get("framework") == "megatron-deepspeed"
        and r["workload"]["precision"] == "fp16"
    )
    assert record_to_problem(bloom)[0].workload.grad_bytes_per_param == 4
    stated = {**narayanan, "workload": {**narayanan["workload"], "grad_reduce_dtype": "fp32"}}
    assert half_grads_because(stated) is None
    assert record_to_problem(stated)[0].workload.grad_bytes_per_param == 4
