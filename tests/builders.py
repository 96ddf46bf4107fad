"""Builders shared by several test modules (a helper module, not a test module: pytest collects
nothing here). Fixtures are in conftest.py; what test modules need at import time (parametrize
lists, module constants) is built here."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from typer.testing import CliRunner

from layoutsearch.cli import app, main
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import LayoutsearchWarning
from layoutsearch.core.problem import Problem, SearchRequest
from layoutsearch.core.specs import RECOMPUTE_POLICIES, Layout, ModelSpec, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import check_export, export_document
from layoutsearch.report.output import layout_record
from layoutsearch.search import SearchOptions, solve
from layoutsearch.search.cpsat import cpsat_top
from layoutsearch.search.space import (
    build_space,
    problem_degree_tuples,
    with_cp_flavours,
    with_microbatches,
    with_virtual_stages,
)
from layoutsearch.validation.calibrate import with_calibration

DATA = Path(__file__).resolve().parent / "data"

# Six records of four sources of tests/data/runs_dev.yaml: a leave-one-source-out run small enough
# for a test (tests/test_validate_loso.py, tests/test_validate_bands.py)
LOSO_SUBSET = (
    "megatron2021-table1-1-7b",
    "megatron2021-table1-18-4b",
    "fmsfsdp-a100-llama2-7b-128gpu",
    "llmfoundry-mpt-a100-40g-7b-seq16384-8gpu-mbs1-ga4",
    "llmfoundry-mpt-a100-40g-7b-seq8192-8gpu-mbs3-ga4",
    "maxtext-v5p-2023-32b-1xv5p-128",
)

# A solver limit that a correct solve of the tests' small instances never reaches: their verdicts
# must not depend on the machine's speed (the README's `python -m pytest -q` runs on loaded CI).
NO_TIME_LIMIT_S = 86_400.0


# DeepSeek-V3's published pre-training layout and batch (arXiv 2412.19437 sections 3.2, 3.3 and 4.2; the
# docstring of tests/test_end_to_end_plans.py says which flag stands for what), for `layoutsearch estimate`
DEEPSEEK_V3_ARGS = [
    *("--model", "deepseek-v3", "--cluster", "h800-2048"),
    *("--seqs", "15360", "--seq-len", "4096", "--tokens", "14.8e12"),
    *("--layout", "fsdp=128,pp=16,ep=64", "--zero-stage", "1", "--microbatches", "120"),
    *("--precision", "fp8", "--recompute", "norm_mla_up_proj", "--deepep", "--ep-comm-overlap"),
    *("--schedule", "dualpipe", "--fp8-dispatch", "--fp8-recipe", "blockwise"),
]


# A tiny Hugging Face config.json (Llama field names) that the hostile-input tests vary field by field
TINY_HF_CONFIG = {
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


# The command lines several CLI tests start from (options they add follow): an estimate of
# Llama-70B's fsdp 1024 x tp 8 on a v5p-8192 pod, and a solve of Llama 3 8B's 256 sequences on 64 H100s
LLAMA70B_V5P_ESTIMATE = (
    "estimate",
    "--model",
    "llama70b",
    "--cluster",
    "v5p-8192",
    "--layout",
    "fsdp=1024,tp=8",
)
LLAMA3_8B_H100_SOLVE = ("solve", "--model", "llama3-8b", "--cluster", "h100-64", "--seqs", "256")
MAIN_JOB = ("solve", "--model", "llama70b", "--cluster", "v5p-8192")  # the README's first command
# A sweep of Llama-70B over five v5p clusters (256 to 4096 chips), long enough to interrupt (the
# batches follow)
LLAMA70B_V5P_SWEEP = ("sweep", "-m", "llama70b", "-c", "v5p-{256..4096:x2}")
# Llama 3 405B's 8 sequences on 8 H100s, where nothing fits (the command follows)
LLAMA3_405B_H100_8 = ("--model", "llama3-405b", "--cluster", "h100-8", "--seqs", "8")
# DeepSeek-V3's batch (15,360 sequences of 4096 tokens) on 2048 H100s: the MoE issue's solve
DEEPSEEK_V3_H100_2048_SOLVE = (
    *("solve", "--model", "deepseek-v3", "--cluster", "h100-2048"),
    *("--seqs", "15360", "--seq-len", "4096"),
)
# A solve of the debug model's 64 sequences on 8 H100s (options the tests add follow)
DEBUG_H100_8 = ("--model", "debug", "--cluster", "h100-8")
DEBUG_H100_8_SOLVE = ("solve", *DEBUG_H100_8, "--seqs", "64")
# An estimate of the debug model on a 1-device cluster (formerly a RecursionError: no axis to place
# a degree on)
DEBUG_H100_1_ESTIMATE = (
    *("estimate", "--model", "debug", "--cluster", "h100-1"),
    *("--layout", "dp=1", "--seqs", "8", "--format", "json"),
)


def dp8_estimate(model: object, *options: str) -> list[str]:
    """`layoutsearch estimate` of ``model`` (a catalogue name or a config file's path) replicated
    over 8 H100s (dp=8), 8 sequences; ``options`` follow."""
    argv = ["estimate", "--model", str(model), "--cluster", "h100-8", "--layout", "dp=8"]
    return [*argv, "--seqs", "8", *options]


def sweep_argv(out: object) -> list:
    """A one-worker sweep of debug on h100-8, 64 sequences, writing its table to ``out``."""
    return [
        "sweep",
        "-m",
        "debug",
        "-c",
        "h100-8",
        "--seqs",
        "64",
        "-j",
        "1",
        "--no-progress",
        "-o",
        out,
    ]


def estimate_record(capsys, args: list[str]) -> dict:
    """The layout record of `layoutsearch estimate ARGS --format json`."""
    main(["estimate", *args, "--format", "json"])
    return json.loads(capsys.readouterr().out)["layout"]


def catalogue_space(model_id: str, cluster_id: str, seqs: int, seq_len: int = 4096):
    """The candidate space of a catalogue model on a catalogue cluster (default search options)."""
    problem = Problem.build(
        load_model(model_id),
        resolve_cluster(cluster_id),
        Workload(global_batch_seqs=seqs, seq_len=seq_len),
    )
    return build_space(problem, SearchOptions())


def proven_top(space, tables, objective: str, top_k: int, **options):
    """``cpsat_top`` without a time limit; fails, naming the statuses, when CP-SAT returned an
    answer it did not prove (so a mismatch with the enumerator is never a timeout in disguise)."""
    answers, info = cpsat_top(
        space, tables, objective, top_k, time_limit_s=NO_TIME_LIMIT_S, **options
    )
    if info["status"] not in ("OPTIMAL", "INFEASIBLE") or info["ranking_status"] != "OPTIMAL":
        pytest.fail(
            f"CP-SAT did not prove its answer: status {info['status']}, ranking status "
            f"{info['ranking_status']} ({info['wall_s']:.1f} s, no time limit)"
        )
    return answers, info


# ----------------------------------------------------------------------------- test data
def data_path(name: str) -> Path:
    """tests/data/NAME; FileNotFoundError naming the path when it is missing (never a skip)."""
    path = DATA / name
    if not path.is_file():
        raise FileNotFoundError(
            f"test data file {path} not found: tests/data/ is part of the repository"
        )
    return path


def write_json(folder: Path, data, name: str = "config.json") -> Path:
    """``data`` as JSON in folder/NAME; the path."""
    path = folder / name
    path.write_text(json.dumps(data))
    return path


# ----------------------------------------------------------------------------- solve documents
def solve_doc(
    model_id: str,
    cluster_name: str,
    batch: int,
    seq: int,
    *layouts: Layout,
    model_changes: dict | None = None,
    **workload_options,
) -> dict:
    """A solve document (OUTPUT.md) holding ``layouts`` ranked in the given order, for a catalogue
    model (or a config.json path, its unused-key warning silenced) with ``model_changes`` applied;
    ``workload_options`` are Workload fields such as ``framework``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutsearchWarning)
        model = load_model(model_id)
    model = dataclasses.replace(model, **(model_changes or {}))
    problem = Problem(
        model_id=model_id,
        model=model,
        cluster_name=cluster_name,
        cluster=resolve_cluster(cluster_name),
        workload=Workload(global_batch_seqs=batch, seq_len=seq, **workload_options),
    )
    records = [layout_record(estimate(problem, lay), rank=i + 1) for i, lay in enumerate(layouts)]
    return {
        "problem": problem.record(),
        "solver": {"method": "test", "status": "FEASIBLE"},
        "layouts": records,
    }


def doc_llama8b(*layouts: Layout, **workload_options) -> dict:
    """solve_doc of the export tests' usual problem: Llama 3 8B's 256 sequences of 4096 tokens on 64 H100s."""
    return solve_doc("llama3-8b", "h100-64", 256, 4096, *layouts, **workload_options)


def custom_doc(
    model_id: str, cluster: str, batch: int, seq: int, layout: Layout, **model_changes
) -> dict:
    """A one-layout solve document for a catalogue model with some fields changed."""
    return solve_doc(model_id, cluster, batch, seq, layout, model_changes=model_changes)


# Llama 3 8B's interleaved pipeline of the export tests: pp=4 x 2 virtual stages, fsdp 2 x tp 8, 8 microbatches
# ZeRO-1: what Megatron's distributed optimizer and FSDP2 under torch.distributed.pipelining run with a pipeline
INTERLEAVED_LAYOUT = Layout(
    fsdp=2,
    tp=8,
    pp=4,
    virtual_stages=2,
    num_microbatches=8,
    schedule="interleaved",
    zero_stage=1,
)
# Megatron-Bridge's DeepSeek-V3 recipe on pp=8 x 2 virtual stages (mapping rule 23): 8 layers on the first
# stage, 5 on the last
DSV3_BRIDGE_LAYOUT = Layout(
    fsdp=32,
    pp=8,
    ep=32,
    virtual_stages=2,
    schedule="interleaved",
    zero_stage=1,
    num_microbatches=128,
    recompute="mla_up_proj",
    first_stage_layers=8,
    last_stage_layers=5,
)


@st.composite
def problems(draw):
    """Small random models, clusters (4 and 8 devices: a switch, a torus, two TPU slices) and
    batches: small enough that CP-SAT proves three ranks of the whole model in seconds (16 to 64
    devices took up to 100 s an instance, 544 s for the test on a loaded machine)."""
    heads = draw(st.sampled_from([4, 8, 16]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16) if heads % h == 0]))
    model = ModelSpec(
        name="rand",
        num_layers=draw(st.sampled_from([4, 6, 8])),
        d_model=heads * 64,
        d_ff=draw(st.sampled_from([2, 3, 4])) * heads * 64,
        mlp=draw(st.sampled_from(["gated", "plain"])),
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=64,
        vocab_size=draw(st.sampled_from([1000, 32000])),
        tied_embeddings=draw(st.booleans()),
    )
    cluster = resolve_cluster(
        draw(st.sampled_from(["h100-4", "v5e-4", "h100-8", "v5p-8", "a100-40gb-8", "v5e-4x2"]))
    )
    # hidden collectives slowing the compute beside them (0: free overlap)
    cluster = with_calibration(
        cluster, overlap_interference=draw(st.sampled_from([0.0, 0.15, 0.4]))
    )
    workload = Workload(
        global_batch_seqs=draw(st.sampled_from([8, 16, 32, 64])),
        seq_len=draw(st.sampled_from([512, 2048])),
        # the backward's TP collectives beside their GEMMs or waited for; the gradients accumulated by
        # their GEMMs or by a kernel of their own (whose sharded ZeRO-2/3 form costs less than ZeRO-0/1's)
        tp_backward_async=draw(st.sampled_from([None, False])),
        grad_accumulation_fusion=draw(st.sampled_from([None, False])),
        # an interleaved schedule's sends beside the other chunks' compute or waited for
        pp_comm_overlap=draw(st.sampled_from([None, False])),
        # the gradient reductions in the last microbatch's backward or after the schedule
        grad_reduce_overlap=draw(st.sampled_from([None, False])),
    )
    return model, workload, cluster


@functools.cache
def export_docs() -> dict[str, dict]:
    """The export tests' common documents (llama3-8b on h100-64 and debug on h100-16), built once:
    fsdp, fsdp_tp, fsdp_tp_no_sp (the same without sequence parallelism, which DeepSpeed's AutoTP lacks), cp
    and hsdp."""
    return {
        "fsdp": doc_llama8b(Layout(fsdp=64, num_microbatches=2, recompute="full")),
        "fsdp_tp": doc_llama8b(
            Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full"),
        ),
        "fsdp_tp_no_sp": doc_llama8b(
            Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full", sequence_parallel=False),
        ),
        "cp": solve_doc(
            "llama3-8b", "h100-64", 128, 8192, Layout(fsdp=4, tp=8, cp=2, recompute="selective")
        ),
        "hsdp": solve_doc("debug", "h100-16", 64, 1024, Layout(dp=2, fsdp=8)),
    }


def fp4_doc(recipe: str = "nvfp4", zero_stage: int = 1) -> dict:
    """Llama 3 8B on 8 GB200 in fp4 (``recipe``): fsdp 8, 8 microbatches of 64 x 4096 tokens."""
    layout = Layout(fsdp=8, zero_stage=zero_stage, num_microbatches=8)
    return solve_doc("llama3-8b", "gb200-8", 64, 4096, layout, precision="fp4", fp4_recipe=recipe)


def exported(doc: dict, target: str, rank: int = 1) -> str:
    """Export and assert the checker finds nothing."""
    text = export_document(doc, target, rank)
    assert check_export(target, text, doc, rank) == []
    return text


def solve_export(
    model: str, cluster: str, target: str, out: Path, *options: str
) -> tuple[dict, str]:
    """`layoutsearch solve --model M --cluster C --top 1 --export T -o OUT --format json OPTIONS`,
    which must exit 0: (the JSON document, the written file's text)."""
    argv = ["solve", "--model", model, "--cluster", cluster, "--top", "1", "--export", target]
    r = CliRunner().invoke(app, [*argv, "-o", str(out), "--format", "json", *options])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), out.read_text()


# ----------------------------------------------------------------------------- frameworks
def deepspeed_config(cfg: dict, dp_world: int):
    """DeepSpeedConfig with a given data-parallel world (no process group needed)."""
    dsc = pytest.importorskip("deepspeed.runtime.config")

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return dp_world

    original = dsc.dist.get_rank
    dsc.dist.get_rank = lambda *args, **kwargs: 0
    try:
        return dsc.DeepSpeedConfig(cfg, mpu=Mpu())
    finally:
        dsc.dist.get_rank = original


def maxtext_script(imports: str, body: str) -> str:
    """A script for MaxText's interpreter: each override file named on its command line is loaded by pyconfig
    on 8 CPU devices (``cfg``), then ``body`` appends what it reads to ``out``; an exception is that file's
    ``error``; the last line is RESULT and the JSON list."""
    return (
        textwrap.dedent("""
        import json, os, sys
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        os.environ["JAX_PLATFORMS"] = "cpu"
        from maxtext.configs import pyconfig
        """)
        + textwrap.dedent(imports)
        + textwrap.dedent("""
        out = []
        for path in sys.argv[1:]:
            try:
                cfg = pyconfig.initialize(["", path, "hardware=cpu", "skip_jax_distributed_system=true",
                                           "run_name=layoutsearch-test", "enable_checkpointing=false"])
        """)
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + textwrap.dedent("""
            except Exception as exc:
                out.append({"error": f"{type(exc).__name__}: {exc}"})
        print("RESULT " + json.dumps(out))
        """)
    )


def child_result(args: list[str], timeout: int = 600, **kwargs) -> Any:
    """Run ``args`` (a loader script that prints one line ``RESULT <json>``; ``kwargs`` go to
    subprocess.run): the JSON of its RESULT line, which must be there."""
    run = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (run.stdout + run.stderr)[-4000:]
    return json.loads(lines[0][7:])


def framework_python(env_var: str, venv: str, name: str, where: str = "") -> str:
    """A framework's interpreter: the environment variable ``env_var``, else the venv ``venv`` that
    .ci/frameworks.sh installs under ~/.cache/layoutsearch; or a skip naming where it looked
    (``where``: what the install needs, e.g. " on a machine with python3.12")."""
    path = os.environ.get(env_var) or str(
        Path.home() / ".cache" / "layoutsearch" / venv / "bin" / "python"
    )
    if not Path(path).is_file():
        pytest.skip(f"no {name} interpreter at {path} (run .ci/frameworks.sh{where})")
    return path


def maxtext_python() -> str:
    """The MaxText interpreter (LAYOUTSEARCH_MAXTEXT_PYTHON, else the one .ci/frameworks.sh
    installs), or a skip naming where it looked."""
    return framework_python(
        "LAYOUTSEARCH_MAXTEXT_PYTHON", "maxtext-venv", "MaxText", " on a machine with python3.12"
    )


def maxtext_train_log(python: str, override: Path, tmp_path: Path, run_name: str) -> str:
    """One MaxText training step (its train entry point, synthetic data) from an override file on
    8 simulated CPU devices; it must exit 0. Its stdout and stderr."""
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "JAX_PLATFORMS": "cpu",
    }
    run = subprocess.run(
        [
            python,
            "-m",
            "maxtext.trainers.pre_train.train",
            str(override),
            f"run_name={run_name}",
            "hardware=cpu",
            "skip_jax_distributed_system=true",
            "enable_checkpointing=false",
            "steps=1",
            "dataset_type=synthetic",
            f"base_output_directory={tmp_path / 'out'}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-3000:]
    return log


def torchtitan_degrees(parallelism) -> dict[str, int]:
    """torchtitan's ParallelDims degrees (no experts) from a loaded job's ``parallelism`` section."""
    return {
        "dp_replicate": parallelism.data_parallel_replicate_degree,
        "dp_shard": parallelism.data_parallel_shard_degree,
        "cp": parallelism.context_parallel_degree,
        "tp": parallelism.tensor_parallel_degree,
        "pp": parallelism.pipeline_parallel_degree,
        "ep": 1,
        "etp": 1,
    }


def per_candidate_funnel(problem: Problem, rules) -> list[int]:
    """Reference: every rule applied to every (tuple, v, K) row and ZeRO stage, tuples recounted
    after each rule (what the explanation did before it was made proportional)."""
    c = dict(problem_degree_tuples(problem))
    c["tuple"] = np.arange(len(c["dp"]))
    c = with_microbatches(
        with_virtual_stages(with_cp_flavours(c)), problem.workload.global_batch_seqs
    )
    alive = np.ones(len(c["dp"]), dtype=bool)
    zero_ok = np.ones((len(alive), 4), dtype=bool)
    recompute_ok = np.ones(len(RECOMPUTE_POLICIES), dtype=bool)
    out = [int(c["tuple"].max()) + 1]
    for rule in rules:
        if rule.code in ("product", "degree"):
            continue
        if rule.needs == {"r"}:
            recompute_ok &= rule.mask(problem, {"r": np.arange(len(RECOMPUTE_POLICIES))})
        elif "z" in rule.needs:
            cand = {**{k: v[:, None] for k, v in c.items()}, "z": np.arange(4)[None, :]}
            zero_ok &= rule.mask(problem, cand)
        else:
            alive &= rule.mask(problem, c)
        survivors = alive & zero_ok.any(axis=1) & recompute_ok.any()
        out.append(len(np.unique(c["tuple"][survivors])))
    return out


def check_record_layout(record: dict) -> None:
    """A held-out run record's layout is whole: its degrees multiply to its devices, its microbatches to its
    global batch, and the engine's layout keeps its data-parallel degree (replicated x sharded)."""
    from layoutsearch.validation.mapping import record_to_problem

    lay, rid = record["layout"], record["id"]
    assert lay["dp"] * lay["tp"] * lay["pp"] * lay["cp"] == record["cluster"]["num_devices"], rid
    batch = lay["microbatch_seqs"] * lay["num_microbatches"] * lay["dp"]
    assert batch == record["workload"]["global_batch_seqs"], rid
    problem, layout = record_to_problem(record)
    assert (layout.dp * layout.fsdp, layout.num_microbatches) == (
        lay["dp"],
        lay["num_microbatches"],
    ), rid


def proven_as_enumerated(
    problem: Problem, options: SearchOptions, top_k: int, target: str | None = None
):
    """CP-SAT's top ``top_k`` for ``problem`` (exporting to ``target``), asserted OPTIMAL and equal to the
    enumerator's, layouts and step times: its layouts."""
    proven = solve(problem, SearchRequest(options=options, top_k=top_k, target=target))
    oracle = solve(
        problem, SearchRequest(options=options, top_k=top_k, target=target, method="enumerate")
    )
    assert proven.status == "OPTIMAL"
    assert [e.layout for e in proven.layouts] == [e.layout for e in oracle.layouts]
    assert [e.step_time_s for e in proven.layouts] == [e.step_time_s for e in oracle.layouts]
    return proven.layouts
