"""Optimizer and parameter offload (issue 32 point 4): the state moved to host memory, the host
link's traffic and the CPU Adam step, the host-memory rule, the search over the choice and the
exports."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from builders import exported, proven_top, solve_doc
from typer.testing import CliRunner

from layoutsearch.cli import app, main
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import memory, terms
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import export_document
from layoutsearch.frameworks import capabilities_of
from layoutsearch.search.enumerate import candidate_grid, enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import assemble, build_tables

DEBUG_PARAMS = 7_082_240  # the debug model: 8 layers of d_model 256, d_ff 768, vocab 2048, untied
RUNNER = CliRunner()


def _debug_state(zero_stage: int, offload: int) -> dict:
    """memory_by_zero of the debug model on fsdp=4 (one pipeline stage) under Megatron."""
    sh = terms.Shapes.of(fsdp=4)
    workload = Workload(global_batch_seqs=8, seq_len=256, framework="megatron")
    items = terms.memory_by_zero(
        load_model("debug"), workload, sh, np.array([zero_stage]), True, np.array([offload])
    )
    return {k: float(v[0]) for k, v in items.items() if k.startswith(("state/", "host/"))}


def test_optimizer_offload_moves_master_and_moments_to_the_host():
    """ZeRO-1 over fsdp=4, debug model (7,082,240 parameters): the 12 B/param of master and
    moments shard to 21,246,720 B per device, all on the host; weights (2 B) and gradients (4 B)
    stay in HBM unsharded: 14,164,480 and 28,328,960 B."""
    state = _debug_state(1, 1)
    assert state["host/offloaded_state"] == DEBUG_PARAMS * 12 / 4 == 21_246_720
    assert state["state/master"] == state["state/optimizer"] == 0.0
    assert state["state/weights"] == 14_164_480 and state["state/grads"] == 28_328_960


def test_parameter_offload_leaves_no_model_state_in_hbm():
    """ZeRO-3 over fsdp=4 with parameter offload: all 18 B/param, 7,082,240 x 18 / 4 =
    31,870,080 B per device, on the host; none in HBM (the gathered layers stay temporaries)."""
    state = _debug_state(3, 2)
    assert state["host/offloaded_state"] == 31_870_080
    assert all(v == 0.0 for k, v in state.items() if k.startswith("state/"))


def test_cpu_adam_rate_reproduces_the_zero_offload_measurement():
    """The documented rates give back Ren et al. 2021 table 3 on the DGX-2 host (48 cores): a
    10-billion-parameter step in 2.57 s (CPU-Adam) and 14.76 s (PyTorch CPU Adam)."""
    assert memory.cpu_adam_seconds(10e9, 48, "cpu_adam") == pytest.approx(2.57)
    assert memory.cpu_adam_seconds(10e9, 48, "torch") == pytest.approx(14.76)


@pytest.mark.parametrize(
    "framework, expected",
    [
        # DeepSpeed hides the gradient copy behind the backward; CPU-Adam on 100 / 8 cores
        ("deepspeed", {"grads_down": 0.0, "cpu_adam": 0.98688, "params_up": 0.03125}),
        # Megatron: the copy exposed (1e9 x 4 B / 64 GB/s), torch's Adam: 1e9 / (14,114,724 x 12.5)
        ("megatron", {"grads_down": 0.0625, "cpu_adam": 5.66784, "params_up": 0.03125}),
    ],
)
def test_offloaded_optimizer_step_from_the_host_link_and_cores(framework, expected):
    """1e9 local parameters on an H100 host of 100 cores (12.5 per GPU), 64 GB/s each way:
    gradients down 4e9 B, bf16 weights up 2e9 B (0.03125 s), CPU Adam at the documented rate."""
    acc = dataclasses.replace(resolve_cluster("h100-8").accelerator, host_cpu_cores_per_node=100)
    workload = Workload(global_batch_seqs=8, seq_len=256, framework=framework)
    parts = terms.offload_step_parts(workload, acc, 1e9, 0.0, np.array(1))
    assert {k.split("/")[1]: float(v) for k, v in parts.items()} == pytest.approx(expected)


def test_maxtext_streams_the_state_through_the_host_link():
    """MaxText updates on the device: 1e9 parameters' 12 B of master and moments stream each way at
    15 GB/s (v5p's PCIe): 0.8 s, then the device update (0.1 s given)."""
    acc = resolve_cluster("v5p-8").accelerator
    workload = Workload(global_batch_seqs=8, seq_len=256, framework="maxtext")
    parts = terms.offload_step_parts(workload, acc, 1e9, 0.1, np.array(1))
    assert {k: float(v) for k, v in parts.items()} == pytest.approx(
        {"offload/state_stream": 0.8, "offload/device_update": 0.1}
    )


def test_parameter_fetch_per_step():
    """Debug model on fsdp=4, 8 microbatches: 1,770,560 parameters' 2 B fetched twice per
    microbatch (forward, backward), 56,657,920 B at 64 GB/s = 0.88528 ms."""
    acc = resolve_cluster("h100-8").accelerator
    workload = Workload(global_batch_seqs=8, seq_len=256)
    seconds = terms.param_fetch_time(
        load_model("debug"), workload, acc, terms.Shapes.of(fsdp=4), np.array([8])
    )
    assert float(seconds[0]) == pytest.approx(8.8528e-4)


def test_host_memory_refusal_names_both_numbers():
    """llama3-405b (405,853,388,800 parameters) on h100-8 with every state byte offloaded: 18 B
    per parameter over the 8 GPUs of one host is 7305.4 GB, above the DGX H100's 2 TiB."""
    problem = Problem.build(
        load_model("llama3-405b"),
        resolve_cluster("h100-8"),
        Workload(global_batch_seqs=16, seq_len=4096),
    )
    lay = Layout(fsdp=8, zero_stage=3, num_microbatches=2, recompute="full", offload="params")
    found = [v.message for v in estimate(problem, lay, strict=False).violations]
    assert found == ["offloads 7305.4 GB per node (8 devices), host memory 2199.0 GB"]


def test_offload_needs_the_hosts_catalogue_fields_and_zero3_for_parameters():
    """An accelerator without host memory or cores is refused naming what it lacks; parameter offload
    without ZeRO-3 names the stage and the shard group."""
    problem = Problem.build(
        load_model("debug"), resolve_cluster("h800-8"), Workload(global_batch_seqs=8, seq_len=256)
    )  # no first-party DGX H800 figures were found
    out = check_layout(problem, Layout(fsdp=8, zero_stage=1, offload="optimizer"))
    assert [v.message for v in out] == [
        "offload optimizer keeps model state in host memory, but h800 has no "
        "host_memory_gib_per_node, host_cpu_cores_per_node in its hardware file (a cluster file can give them)"
    ]
    catalogued = resolve_cluster("v6e-8")  # a part with the host's memory and not its cores
    without_cores = dataclasses.replace(catalogued.accelerator, host_cpu_cores_per_node=None)
    v6e = Problem.build(
        load_model("debug"),
        dataclasses.replace(catalogued, accelerator=without_cores),
        Workload(global_batch_seqs=8, seq_len=256),
    )
    assert v6e.cluster.host_memory_bytes_per_node == 1536 * 2**30
    out = check_layout(v6e, Layout(fsdp=8, zero_stage=1, offload="optimizer"))
    assert [v.message for v in out] == [
        "offload optimizer keeps model state in host memory, but v6e has no host_cpu_cores_per_node in its "
        "hardware file (a cluster file can give it)"
    ]
    h100 = Problem.build(
        load_model("debug"), resolve_cluster("h100-8"), Workload(global_batch_seqs=8, seq_len=256)
    )
    out = check_layout(h100, Layout(fsdp=8, zero_stage=1, offload="params"))
    assert [v.code for v in out] == ["offload-params-zero3"]
    assert "got zero_stage 1, fsdp(8) x cp(1)" in out[0].message


@pytest.mark.parametrize(
    "cluster, framework, winner",
    [("h100-8", "deepspeed", "optimizer"), ("h100-2", "deepspeed", "params")],
)
def test_cpsat_equals_enumerator_where_offload_is_allowed(cluster, framework, winner):
    """llama70b, 64 x 4096 tokens, with --offload none,optimizer,params: on 8 H100 only optimizer
    offload fits (1.26 TB of state), on 2 H100 only parameter offload; CP-SAT and the enumerator
    rank the same top 3, candidate for candidate, and the winner offloads."""
    seqs = 64 if cluster == "h100-8" else 16
    problem = Problem.build(
        load_model("llama70b"),
        resolve_cluster(cluster),
        Workload(global_batch_seqs=seqs, seq_len=4096, framework=framework),
    )
    space = build_space(problem, SearchOptions(offload=("none", "optimizer", "params")))
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, info = proven_top(space, tables, "step-time", 3)
    assert cps == enum and len(enum) == 3 and info["status"] == "OPTIMAL"
    row, ri, z, o, _ = enum[0]
    lay = space.layout(
        int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o
    )
    assert lay.offload == winner
    plain = build_space(problem, SearchOptions())
    assert enumerate_top(plain, build_tables(plain), "step-time", 1)[0] == []  # needs offload


def test_infeasible_explanation_suggests_offload():
    """llama70b on h100-8 does not fit without offload: exit 1, and the explanation names
    --offload optimizer as the change that fits."""
    result = RUNNER.invoke(
        app, ["solve", "--model", "llama70b", "--cluster", "h100-8", "--format", "json"]
    )
    assert result.exit_code == 1
    assert "fits with --offload optimizer or 2x the devices (h100-16)" in result.output


def test_estimate_offload_through_the_cli():
    """estimate --offload optimizer writes the choice in the layout record, the host memory per
    node and the offloaded step's parts (which add up to compute/optimizer)."""
    result = RUNNER.invoke(
        app,
        [
            *("estimate", "--model", "llama70b", "--cluster", "h100-8", "--seqs", "64"),
            *("--layout", "tp=4,pp=2", "--zero-stage", "0", "--microbatches", "64"),
            *("--offload", "optimizer", "--format", "json"),
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)["layout"]
    assert record["offload"] == "optimizer"
    assert record["memory_bytes"]["host_capacity_per_node"] == 2 * 1024**4
    assert sum(record["offload_s"].values()) == pytest.approx(record["time_s"]["compute/optimizer"])


def test_default_search_is_unchanged_by_the_choice():
    """The main job (llama70b on v5p-8192) keeps its 724,076 candidates and writes no offload key;
    --offload none is the default."""
    runs = [
        RUNNER.invoke(
            app,
            ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--format", "json", *extra],
        )
        for extra in ((), ("--offload", "none"))
    ]
    docs = [json.loads(r.output) for r in runs]
    assert docs[0]["solver"]["num_candidates"] == 724_076
    assert all("offload" not in lay for lay in docs[0]["layouts"])
    assert [lay["degrees"] for lay in docs[0]["layouts"]] == [
        lay["degrees"] for lay in docs[1]["layouts"]
    ]


def _offloaded_doc(offload: str, framework: str, zero_stage: int) -> dict:
    layout = Layout(fsdp=8, zero_stage=zero_stage, num_microbatches=2, offload=offload)
    return solve_doc("llama3-8b", "h100-8", 16, 4096, layout, framework=framework)


@pytest.mark.parametrize(
    "target, offload, zero_stage, written",
    [
        ("deepspeed", "optimizer", 1, '"offload_optimizer": {\n      "device": "cpu"'),
        ("deepspeed", "params", 3, '"offload_param": {\n      "device": "cpu"'),
        (
            "megatron",
            "optimizer",
            1,
            "--optimizer-cpu-offload\n  --optimizer-offload-fraction 1.0\n"
            "  --use-precision-aware-optimizer",
        ),
        ("torchtitan", "params", 3, "enable_cpu_offload = true"),
        ("maxtext", "optimizer", 3, "optimizer_memory_host_offload: true"),
        ("maxtext", "params", 3, "parameter_memory_host_offload: true"),
    ],
)
def test_exports_write_the_offload(target, offload, zero_stage, written):
    """Each exporter writes its framework's switch, and its checker reads it back."""
    text = exported(_offloaded_doc(offload, target, zero_stage), target)
    assert written in text


@pytest.mark.parametrize(
    "target, offload, zero_stage, reason",
    [
        ("megatron", "params", 3, "it has no parameter offload"),
        ("megatron", "optimizer", 0, "which needs the distributed optimizer (ZeRO-1)"),
        ("deepspeed", "optimizer", 0, "offload_optimizer is valid with stages 1-3"),
        ("torchtitan", "optimizer", 3, "parameter offload only"),
        ("megatron-bridge", "optimizer", 1, "OptimizerConfig.optimizer_cpu_offload"),
    ],
)
def test_exports_refuse_what_their_framework_cannot_offload(target, offload, zero_stage, reason):
    """A framework without the choice refuses it by rule, naming the choice and its reason."""
    doc = _offloaded_doc(offload, "megatron", zero_stage)
    with pytest.raises(InvalidLayoutError, match=re.escape(f"cannot express offload {offload}")):
        export_document(doc, target)
    caps = capabilities_of(target)
    assert any(reason in text for code, text in caps.why.items() if "-offload" in code)


def test_funnel_names_the_offload_rule_that_leaves_nothing():
    """--offload params on h800 (no host memory or cores in its hardware file): nothing is
    searched, exit 1, and the message is the rule's reason for that choice, naming the fields missing."""
    result = RUNNER.invoke(
        app,
        [
            *("solve", "--model", "debug", "--cluster", "h800-8", "--seqs", "8"),
            *("--seq-len", "256", "--offload", "params"),
        ],
    )
    assert result.exit_code == 1
    assert (
        "no feasible layout: offload params keeps model state in host memory, but h800 has no "
        "host_memory_gib_per_node, host_cpu_cores_per_node in its hardware file (a cluster file can give "
        "them) (offload-host)"
    ) in result.output


def test_an_offload_no_layout_can_take_is_said_where_other_choices_win(capsys):
    """--offload none,optimizer,params on h800: the layouts without offload still win (exit 0), and one warning
    line says the two choices were not searched and why (the rule's reason), instead of a plan that reads as if
    offload had been weighed and lost; on h100, whose hardware file gives the host's fields, no such line."""
    args = [
        *("solve", "--model", "debug", "--seqs", "8", "--seq-len", "256"),
        *("--offload", "none,optimizer,params", "--format", "json"),
    ]
    assert main([*args, "--cluster", "h800-8"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert "offload" not in doc["layouts"][0]  # a record names an offload only
    assert doc["solver"]["not_searched"] == [out.err.removeprefix("warning: ").rstrip("\n")]
    assert out.err == (
        "warning: --offload optimizer,params: not searched, no layout can take it: offload optimizer keeps model "
        "state in host memory, but h800 has no host_memory_gib_per_node, host_cpu_cores_per_node in its hardware "
        "file (a cluster file can give them) (offload-host)\n"
    )
    assert main([*args, "--cluster", "h100-8"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and json.loads(out.out)["solver"]["not_searched"] == []


def test_a_cluster_file_gives_the_host_memory_and_cores(tmp_path):
    """h800's hardware file has no host memory or cores; a cluster file's host_memory_gib_per_node and
    host_cpu_cores_per_node make offload plannable (the winner offloads where --offload allows only that), and
    the result records them, so export rebuilds the same cluster; a bad value is one line naming the field."""
    path = tmp_path / "h800.cluster.yaml"
    path.write_text(
        "accelerator: h800\nnodes: 1\nhost_memory_gib_per_node: 1536\nhost_cpu_cores_per_node: 96\n"
    )
    cluster = resolve_cluster(str(path))
    assert cluster.host_memory_bytes_per_node == 1536 * 1024**3
    assert cluster.accelerator.host_cpu_cores_per_node == 96
    assert cluster.accelerator.sources["host_memory_gib_per_node"] == (
        f"cluster file {path}: host_memory_gib_per_node"
    )
    result = RUNNER.invoke(
        app,
        [
            *("solve", "--model", "debug", "--cluster", str(path), "--seqs", "8"),
            *("--seq-len", "256", "--offload", "optimizer", "--format", "json"),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["layouts"][0]["offload"] == "optimizer"
    assert doc["problem"]["cluster_spec"]["host_memory_gib_per_node"] == 1536.0
    assert doc["problem"]["cluster_spec"]["host_cpu_cores_per_node"] == 96
    path.write_text("accelerator: h800\nnodes: 1\nhost_cpu_cores_per_node: 0\n")
    bad = RUNNER.invoke(app, ["solve", "--model", "debug", "--cluster", str(path)])
    assert bad.exit_code == 2
    assert bad.stderr == (
        f"error: {path}: field 'host_cpu_cores_per_node': Input should be greater than or equal to 1 (got 0)\n"
    )


@pytest.mark.parametrize(
    "cluster, devices, gib, cores",
    [
        ("gb200-72", 4, 894, 144),
        ("gb300-72", 4, 894, 144),
        ("v5e-256", 8, 384, 112),
        ("mi300x-8", 8, 1536, 128),
        ("mi325x-8", 8, 2304, 128),
        ("mi355x-8", 8, 3072, 128),
        ("b300-8", 8, 2048, 112),
        ("tpu7x-8", 4, 894, 112),
        ("v6e-8", 8, 1536, 90),
    ],
)
def test_catalogued_hosts(cluster, devices, gib, cores):
    """The hosts added on 2026-12-06 and 2026-12-07 (hardware files' sources): a GB200 or GB300 compute tray (2
    Grace CPUs for 4 GPUs), a v5e ct5lp-hightpu-8t VM (8 chips), AMD's MLPerf Training v5.1 MI300X, MI325X and
    MI355X servers (2 EPYC 9575F of 64 cores; 24 DIMMs of 64, 96 and 128 GB), NVIDIA's DGX B300 system description
    (2 Xeon Platinum 8570 of 56 cores, 2 TB), a TPU7x 4-chip VM (960 GB, 224 vCPUs) and a v6e 8-chip host
    (1,536 GiB, 180 vCPUs), two vCPUs a core."""
    c = resolve_cluster(cluster)
    assert (c.devices_per_node, c.host_memory_bytes_per_node) == (devices, gib * 1024**3)
    assert c.accelerator.host_cpu_cores_per_node == cores


def test_a_gb200_host_is_a_tray_of_two_grace_cpus():
    """gb200: a host is a compute tray (4 GPUs, 2 Grace CPUs): 2 x 480 GB of LPDDR5X and 2 x 72 cores, so
    Llama 3 405B's whole state offloaded from 8 GPUs (4 a tray) overflows the tray's 959.9 GB."""
    cluster = resolve_cluster("gb200-8")
    assert (cluster.devices_per_node, cluster.host_memory_bytes_per_node) == (4, 894 * 1024**3)
    assert cluster.accelerator.host_cpu_cores_per_node == 144
    problem = Problem.build(
        load_model("llama3-405b"), cluster, Workload(global_batch_seqs=8, seq_len=4096)
    )
    lay = Layout(fsdp=8, zero_stage=3, num_microbatches=1, recompute="full", offload="params")
    found = [v.message for v in estimate(problem, lay, strict=False).violations]
    assert found == ["offloads 3652.7 GB per node (4 devices), host memory 959.9 GB"]


def test_host_memory_counts_offloaded_activations_in_both_searches():
    """llama70b on v5p-8 under MaxText with its activation-offloading remat policies and
    --offload: some candidates fit HBM and put under 448 GiB / 4 chips of state on the host but
    not with their offloaded activations; both searches drop them and rank the same top 3, whose
    estimates pass the host-memory rule."""
    problem = Problem.build(
        load_model("llama70b"),
        resolve_cluster("v5p-8"),
        Workload(global_batch_seqs=64, seq_len=4096, framework="maxtext"),
    )
    options = SearchOptions(
        offload=("none", "optimizer", "params"),
        recompute=("full", "custom_offload_input", "minimal_offloaded", "qkv_proj_offloaded"),
    )
    space = build_space(problem, options)
    tables = build_tables(space)
    assert tables.host_kib == 448 * 1024**2 // 4
    sk, ri, z, o = candidate_grid(space, np.arange(len(space.sk_k)))
    s = space.sk_shape[sk]
    hbm_fits = (tables.MZ[s, z] + tables.MB[sk, ri] <= tables.capacity_kib).all(axis=(-2, -1))
    state_fits = (tables.HZ[s, z] <= tables.host_kib).all(axis=-1)
    dropped = hbm_fits & state_fits & ~assemble(tables, space, sk, ri, z, o)["fits"]
    assert dropped.any()
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    assert proven_top(space, tables, "step-time", 3)[0] == enum and len(enum) == 3
    for row, ri_, z_, o_, _ in enum:
        lay = space.layout(
            int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri_]), z_, o_
        )
        assert estimate(problem, lay).violations == []
