"""Mixture-of-experts costs and expert parallelism (docs/cost_model.md "Mixture of experts"): the expert
degrees' rules, the token AllToAll on the links the ep group spans, expert state divided by ep,
the FLOPs of the active experts, MLA's attention widths, and the search over ep and etp."""

import json
import math
from dataclasses import replace
from statistics import NormalDist

import numpy as np
import pytest
from builders import DEEPSEEK_V3_H100_2048_SOLVE, proven_top
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layoutsearch.cli import main
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.specs import Layout, MlaSpec, ModelSpec, MoeSpec, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import flops
from layoutsearch.costs.estimate import estimate
from layoutsearch.export.megatron import recompute_modules
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

MIXTRAL_LAYERS, D, F, E, K = 32, 4096, 14336, 8, 2


def _mixtral(cluster="h100-16", seqs=64):
    return Problem.build(
        "mixtral-8x7b",
        cluster,
        Workload(global_batch_seqs=seqs, seq_len=4096, framework="megatron"),
    )


# The CLI's Mixtral 8x7B problem of _mixtral(): 64 sequences on 16 H100s
MIXTRAL_H100_16 = ("--model", "mixtral-8x7b", "--cluster", "h100-16", "--seqs", "64")


def _a2a(est):
    return next(c for c in est.collectives if c["name"].startswith("ep token"))


def _busiest(ep, rows, local, cv):
    """The busiest expert device's load over the balanced share, computed here from its definition: 1 + z sqrt(1 /
    (rows x local) + cv^2 / local), z = Blom's expected maximum of ep standard normals."""
    z = NormalDist().inv_cdf((ep - 0.375) / (ep + 0.25))
    return 1.0 + z * math.sqrt(1.0 / (rows * local) + cv * cv / local)


# Mixtral on 16 H100, ep=8, 4 microbatches of 64 x 4096 / 16 / 4 = 4096 tokens: each expert device (one local expert)
# gets m k ep / E = 8192 rows balanced; a learned router (the default, cv 0.15) makes the busiest 1.22 x that
MIXTRAL_EP8_LEARNED = _busiest(8, 8192, 1, 0.15)


def _routed_gemms_s(acc, rows: int) -> float:
    """Forward and both backward GEMMs of Mixtral's one local expert at ``rows`` on H100 (132 SMs in waves of
    128x256 tiles, or of 128x128 or 64x128 at 0.98 of that rate where they fill the SMs better, depth curve
    k / (k + 128)): fc1 (rows, 2F, D) and fc2 (rows, D, F), each also as the input gradient (rows, k, n) and
    the weight gradient (k, n, rows); docs/cost_model.md "GEMMs from their shapes"."""

    def filled(a, b):  # the tile the library picks (results/device_calibration.md)
        return max(
            share
            * a
            * b
            / (
                math.ceil(math.ceil(a / rows_t) * math.ceil(b / cols_t) / 132)
                * 132
                * rows_t
                * cols_t
            )
            for rows_t, cols_t, share in ((128, 256, 1.0), (128, 128, 0.98), (64, 128, 0.98))
        )

    total = 0.0
    for n, k in ((2 * F, D), (D, F)):
        for a, b, depth in ((rows, n, k), (rows, k, n), (k, n, rows)):
            busy = filled(a, b) * depth / (depth + 128)
            total += 2.0 * a * b * depth / (acc.peak_flops_per_s * acc.matmul_efficiency * busy)
    return total


# ----------------------------------------------------------------------------- the ep group's links
NODE = (("fsdp", (("node", 8), ("scale_out", 2))),)
# fsdp=16, ep=8 on two 8-GPU nodes with 4 of the ep group's GPUs in each node
EP_ACROSS_NODES = Layout(
    fsdp=16,
    ep=8,
    zero_stage=1,
    num_microbatches=4,
    axes=NODE + (("ep", (("node", 4), ("scale_out", 2))),),
)


def test_ep_across_scale_out_costs_more_than_the_same_group_inside_nvlink():
    """fsdp=16, ep=8 on two 8-GPU nodes: ep inside a node, or 4 GPUs in each of the two nodes."""
    problem = _mixtral()
    inside = Layout(
        fsdp=16, ep=8, zero_stage=1, num_microbatches=4, axes=NODE + (("ep", (("node", 8),)),)
    )
    across = EP_ACROSS_NODES
    a, b = estimate(problem, inside), estimate(problem, across)
    acc = problem.cluster.accelerator
    # the AllToAll of one MoE layer: each GPU sends its m tokens x k copies x D bf16 (m = 64 x 4096 / (16 x 4)),
    # and the busiest expert device receives (and sends back) the load times as many: all wait for it
    assert MIXTRAL_EP8_LEARNED == pytest.approx(1.2157, abs=1e-4)
    payload = 64 * 4096 / 16 / 4 * K * D * 2 * MIXTRAL_EP8_LEARNED
    assert _a2a(a)["bytes"] == pytest.approx(payload, rel=1e-12) and payload == pytest.approx(
        81_585_105, abs=1
    )
    half = acc.collective_half_efficiency_bytes
    nvlink = acc.link_bytes_per_s_per_direction * acc.collective_efficiency
    nic = acc.scale_out_bytes_per_s_per_direction * acc.scale_out_efficiency
    # inside the node: Megatron's flex dispatcher (DeepEP) sends a token once to each GPU holding one of its
    # k = 2 experts, 8 (1 - (7/8)^2) = 1.875 of its 2 copies; 7/8 of that buffer leaves each GPU over NVLink;
    # one NVLink latency
    per_device = 8 * (1 - (7 / 8) ** K) / K
    assert per_device == 0.9375
    assert _a2a(a)["time_s"] == pytest.approx(
        (payload * per_device + half) * 7 / 8 / nvlink + acc.link_latency_s, rel=1e-9
    )
    # across: 4 of the 8 members sit in the other node, half the buffer would go through the GPU's NIC;
    # Megatron's flex dispatcher sends a token once per node: of its k = 2 copies, 2 (1 - 1/2^2) = 1.5 cross
    dedup = 2 * (1 - 0.5**K) / K
    assert dedup == 0.75
    assert _a2a(b)["time_s"] == pytest.approx(
        (payload * dedup + half) * 4 / 8 / nic + acc.link_latency_s + acc.scale_out_latency_s,
        rel=1e-9,
    )
    assert b.time_s["exposed_comm/ep"] > 3 * a.time_s["exposed_comm/ep"] > 0
    # 4 AllToAlls per MoE layer and microbatch (dispatch, combine; forward, backward), all exposed with megatron
    assert a.time_s["exposed_comm/ep"] == pytest.approx(
        4 * MIXTRAL_LAYERS * 4 * _a2a(a)["time_s"], rel=1e-9
    )
    assert b.step_time_s > a.step_time_s
    assert a.time_s["compute/matmul"] == b.time_s["compute/matmul"]


def test_deepep_sends_a_token_once_per_node_and_only_a_dropless_model_can_use_it():
    """--deepep / --no-deepep (Workload.deepep) override the profile: with NCCL AllToAll both of a token's k = 2
    copies bound for the other node cross the NIC (dedup 1), with DeepEP 1.5 of them; a capacity-factor model
    pads its experts, which DeepEP cannot, so it keeps the AllToAll whatever is asked."""
    across = EP_ACROSS_NODES

    def a2a(deepep, model="mixtral-8x7b"):
        problem = Problem.build(
            model,
            "h100-16",
            Workload(global_batch_seqs=64, seq_len=4096, framework="torchtitan", deepep=deepep),
        )
        return problem, _a2a(estimate(problem, across))["time_s"]

    problem, default = a2a(None)  # torchtitan's standard all-to-all
    acc = problem.cluster.accelerator
    payload, half = 67_108_864 * MIXTRAL_EP8_LEARNED, acc.collective_half_efficiency_bytes
    nic = acc.scale_out_bytes_per_s_per_direction * acc.scale_out_efficiency
    fixed = acc.link_latency_s + acc.scale_out_latency_s
    assert (
        default == pytest.approx((payload + half) * 4 / 8 / nic + fixed, rel=1e-9) == a2a(False)[1]
    )
    assert a2a(True)[1] == pytest.approx((payload * 0.75 + half) * 4 / 8 / nic + fixed, rel=1e-9)
    assert problem.workload.deepep is False and a2a(True)[0].workload.deepep is True
    mixtral = load_model("mixtral-8x7b")
    padded = replace(mixtral, moe=replace(mixtral.moe, capacity_factor=1.25))
    # padded to 1.25 x the balanced rows, it moves 1.25 x the balanced buffer, whatever the routing
    assert (
        a2a(True, padded)[1]
        == pytest.approx(a2a(False, padded)[1])
        == pytest.approx(
            (payload / MIXTRAL_EP8_LEARNED * 1.25 + half) * 4 / 8 / nic + fixed, rel=1e-9
        )
    )


def test_deepep_sends_a_token_once_to_each_device_holding_its_experts_inside_a_node():
    """Qwen3-30B-A3B (128 experts, top 8) with ep=8 inside one NVLink node: the NCCL AllToAll sends all k = 8
    copies of a token, DeepEP one per destination GPU (its dispatch layout marks a token once per rank), of the
    8 GPUs 8 (1 - (7/8)^8) = 5.25 on average under uniform routing: 0.656 of the buffer."""
    lay = Layout(
        fsdp=8,
        ep=8,
        zero_stage=1,
        num_microbatches=4,
        axes=(("fsdp", (("node", 8),)), ("ep", (("node", 8),))),
    )

    def a2a(deepep):
        problem = Problem.build(
            "qwen3-30b-a3b",
            "h100-8",
            Workload(global_batch_seqs=32, seq_len=4096, framework="megatron", deepep=deepep),
        )
        return problem.cluster.accelerator, _a2a(estimate(problem, lay))

    acc, nccl = a2a(False)
    deepep = a2a(True)[1]
    assert (
        nccl["bytes"] == deepep["bytes"]
    )  # the buffer: m tokens x k copies x D, times the busiest device's load
    half, nvlink = (
        acc.collective_half_efficiency_bytes,
        acc.link_bytes_per_s_per_direction * acc.collective_efficiency,
    )
    share = 8 * (1 - (7 / 8) ** 8) / 8
    assert share == pytest.approx(0.6564, abs=1e-4)
    assert nccl["time_s"] == pytest.approx(
        (nccl["bytes"] + half) * 7 / 8 / nvlink + acc.link_latency_s, rel=1e-9
    )
    assert deepep["time_s"] == pytest.approx(
        (nccl["bytes"] * share + half) * 7 / 8 / nvlink + acc.link_latency_s, rel=1e-9
    )


def test_the_ideal_profile_hides_the_all_to_all_behind_the_layer():
    problem = Problem.build(
        "mixtral-8x7b", "h100-16", Workload(global_batch_seqs=64, seq_len=4096, framework="ideal")
    )
    lay = Layout(
        fsdp=16, ep=8, zero_stage=1, num_microbatches=4, axes=NODE + (("ep", (("node", 8),)),)
    )
    est = estimate(problem, lay)
    megatron = estimate(_mixtral(), lay)
    assert est.time_s["exposed_comm/ep"] < 0.1 * megatron.time_s["exposed_comm/ep"]
    # hidden, each second still slows the layer beside it (overlap_interference), itemised as interference
    eta = problem.cluster.accelerator.overlap_interference
    assert est.time_s["exposed_comm/interference"] >= eta * 0.9 * megatron.time_s["exposed_comm/ep"]


# ----------------------------------------------------------------------------- CUDA graphs
@pytest.mark.parametrize("graphs", ["scoped", "full_iteration"])
def test_cuda_graphs_remove_the_moe_layers_host_overhead(graphs):
    """Mixtral on 16 H100, fsdp=16, ep=8 (1 local expert), 4 microbatches: without graphs each of the 32 MoE layers
    adds, per microbatch, the dispatcher's sync (h100: 552.5 us) and whatever of its 33 + 12 + 45 launches at
    53.64 us (4.83 ms) the GPU's kernels do not cover; scoped graphs (attention, router and preprocessing as 2
    graphs each way) leave launches H100's kernels hide, so only the sync stays; a full-iteration graph removes
    moe_overhead_full_graph_share (1.0) of both. Nothing else moves. (The sync was 624 us and the latency 53.56 us,
    4.82 ms, before the element-wise kernels ran at their measured HBM rates.)"""
    lay = Layout(
        fsdp=16, ep=8, zero_stage=1, num_microbatches=4, axes=NODE + (("ep", (("node", 8),)),)
    )
    plain = estimate(_mixtral(), lay)
    graphed = estimate(
        Problem.build(
            "mixtral-8x7b",
            "h100-16",
            Workload(global_batch_seqs=64, seq_len=4096, framework="megatron", cuda_graphs=graphs),
        ),
        lay,
    )
    acc = plain.cluster.accelerator
    assert (
        acc.moe_launch_latency_s,
        acc.moe_host_sync_s,
        acc.moe_overhead_full_graph_share,
    ) == (pytest.approx(53.06e-6), pytest.approx(510.1e-6), 1.0)
    per_layer = plain.time_s["compute/moe_fixed"] / (MIXTRAL_LAYERS * 4)
    assert 510.1e-6 < per_layer < 510.1e-6 + 90 * 53.06e-6
    kept = {"scoped": 510.1e-6, "full_iteration": 0.0}[graphs]
    assert graphed.time_s["compute/moe_fixed"] == pytest.approx(
        MIXTRAL_LAYERS * 4 * kept, abs=1e-12
    )
    assert graphed.step_time_s == pytest.approx(
        plain.step_time_s - plain.time_s["compute/moe_fixed"] + graphed.time_s["compute/moe_fixed"],
        rel=1e-9,
    )


def test_the_moe_host_overhead_grows_with_the_local_experts():
    """Each local expert adds 6 launches per MoE layer and microbatch (Transformer Engine's GroupedLinear: fc1 and
    fc2, one GEMM forward, dgrad and wgrad backward): Qwen3-30B-A3B's 128 experts over ep=8 leave 16 per GPU, over
    ep=16 eight; 48 MoE layers, 1 microbatch on 16 H100. Host-bound after the sync and in backward both ways (the
    experts' GEMMs take about as long either way), the 8 extra experts show as 48 x 8 x 6 x 53.64 us = 123.6 ms
    (within 3%: the GEMMs' rows per expert and their tile waves differ; 53.56 us, 123.4 ms, before the element-wise
    kernels ran at their measured HBM rates)."""
    work = Workload(global_batch_seqs=16, seq_len=4096, framework="megatron")
    problem = Problem.build("qwen3-30b-a3b", "h100-16", work)
    fixed = {
        ep: estimate(problem, Layout(fsdp=16, ep=ep, zero_stage=1)).time_s["compute/moe_fixed"]
        for ep in (8, 16)
    }
    assert fixed[8] - fixed[16] == pytest.approx(48 * 8 * 6 * 53.64e-6, rel=0.03)
    assert fixed[16] > 48 * 552.5e-6


def test_a_capacity_factor_pads_every_expert_to_its_capacity():
    """Mixtral with capacity factor 1.25 (drop and pad: MaxText's capacity_factor, Megatron's
    --moe-pad-expert-input-to-capacity): each local expert multiplies 1.25 x its balanced rows, empty slots included,
    so the routed GEMMs cost 1.25 x the tokens at the efficiency of 1.25 x the rows, whatever the routing; dropless, the
    busiest device's load under learned routing (1.22). fsdp=16, ep=8, 4 microbatches: m = 4096 tokens per
    microbatch, balanced rows m k ep / E = 8192 per expert."""
    lay = Layout(
        fsdp=16, ep=8, zero_stage=1, num_microbatches=4, axes=NODE + (("ep", (("node", 8),)),)
    )
    mixtral = load_model("mixtral-8x7b")
    padded = replace(mixtral, moe=replace(mixtral.moe, capacity_factor=1.25))
    work = Workload(global_batch_seqs=64, seq_len=4096, framework="megatron")
    dropless, dropping = (
        estimate(Problem.build(m, "h100-16", work), lay) for m in (mixtral, padded)
    )
    acc = dropless.cluster.accelerator
    rows = 4096 * K * 8 / E
    assert rows == 8192

    def routed_s(load):  # the routed experts' GEMMs at the busiest rows, 32 layers, 4 microbatches
        return 4 * MIXTRAL_LAYERS * _routed_gemms_s(acc, math.ceil(rows * load))

    assert dropping.time_s["compute/matmul"] - dropless.time_s["compute/matmul"] == pytest.approx(
        routed_s(1.25) - routed_s(MIXTRAL_EP8_LEARNED), rel=1e-9
    )
    forced = estimate(Problem.build(padded, "h100-16", replace(work, routing="forced")), lay)
    assert forced.step_time_s == dropping.step_time_s
    # 1.25 x the FLOPs in whole waves: 10240 rows are 80 row tiles against 64 (fc1's forward: 68 waves against 55;
    # some of the GEMMs fill their last wave better with a smaller tile)
    assert routed_s(1.25) / routed_s(1.0) == pytest.approx(1.2405, abs=1e-4)


def test_maxtext_dispatches_a_capacity_factor_by_einsums_that_cost_matmul_time():
    """MaxText's capacity-factor path dispatches each sequence's tokens into E x C slots and combines them back by
    one-hot einsums ("BSM,BSEC -> EBCM", "EBCM,BSEC -> BSM", C = S k c / E = 1280 for Mixtral at S = 4096, c = 1.25):
    2 S k c D FLOPs per token each, forward; the backward runs 3 of them (the dispatch's input gradient, the
    combine's two). Megatron pads by permutation and pays none. fsdp=16 on 16 H100s, 4 microbatches of 4096 tokens:
    the same layout differs by exactly those FLOPs at the bf16 GEMM rate; a dropless model pays nothing more."""
    lay = Layout(fsdp=16, zero_stage=1, num_microbatches=4)
    mixtral = load_model("mixtral-8x7b")
    padded = replace(mixtral, moe=replace(mixtral.moe, capacity_factor=1.25))
    work = Workload(global_batch_seqs=64, seq_len=4096)
    acc = resolve_cluster("h100-16").accelerator
    m = 4096
    rate = (
        acc.peak_flops_per_s * acc.matmul_efficiency * m / (m + acc.matmul_half_efficiency_tokens)
    )
    per_token = 2 * (2 * 4096 * K * 1.25 * D)  # dispatch and combine, forward
    expected = 4 * MIXTRAL_LAYERS * (1 + 1.5) * per_token * m / rate
    # seconds per step at the h100 class's 0.6742 (0.3440 at 0.6667, before the loss's passes were costed; 0.3491 at
    # 0.6569, before the H200 measurement's refit)
    assert expected == pytest.approx(0.3401, abs=1e-4)
    for model, extra in ((padded, expected), (mixtral, 0.0)):
        maxtext, megatron = (
            estimate(Problem.build(model, "h100-16", replace(work, framework=f)), lay)
            for f in ("maxtext", "megatron")
        )
        assert maxtext.time_s["compute/matmul"] - megatron.time_s[
            "compute/matmul"
        ] == pytest.approx(extra, abs=1e-12)


def test_maxtext_holds_one_stacked_expert_matrix_and_the_next_not_two_moe_layers():
    """DeepSeek-V3 on 512 v5p chips, ZeRO-3 over all of them, every expert local (ep = 1), as MaxText's v5p recipe
    runs it: XLA gathers the stacked [256, 7168, 2048] expert matrix where the grouped matmul uses it, so the
    gathered temporaries are two of them in bf16 (15.0 GB), not two layers; the gradients two in fp32.
    FSDP2 (torchtitan) gathers whole layers."""
    lay = Layout(fsdp=512, zero_stage=3, num_microbatches=1)
    work = Workload(global_batch_seqs=512, seq_len=4096)
    expert_matrix = 256 * 7168 * 2048
    maxtext, torchtitan = (
        estimate(
            Problem.build("deepseek-v3", "v5p-512", replace(work, framework=f)), lay
        ).memory_moments["layer_backward"]
        for f in ("maxtext", "torchtitan")
    )
    assert maxtext["temporary/gathered"] == pytest.approx(2 * expert_matrix * 2, rel=1e-12)
    assert maxtext["temporary/layer_grads"] == pytest.approx(2 * expert_matrix * 4, rel=1e-12)
    # two mean layers (58 of 61 are MoE): 43.9 GB, 2.92 x
    assert torchtitan["temporary/gathered"] / maxtext["temporary/gathered"] == pytest.approx(
        2.919, abs=1e-3
    )


# ----------------------------------------------------------------------------- routing
def test_the_busiest_expert_device_sets_the_pace():
    """Dropless Mixtral, fsdp=16, ep=8 (one local expert each, 8192 rows balanced per microbatch): forced routing
    (random) leaves the multinomial spread, 1 + z(8) / sqrt(8192) = 1.0158 x the balanced rows on the busiest device;
    a learned router (cv 0.15) 1.2157 x. The routed GEMMs and the AllToAll scale with it; attention does not. On
    one expert device (ep = 1) every expert is local and nothing waits: both routings cost the same."""
    lay = Layout(
        fsdp=16, ep=8, zero_stage=1, num_microbatches=4, axes=NODE + (("ep", (("node", 8),)),)
    )
    work = Workload(global_batch_seqs=64, seq_len=4096, framework="megatron")
    learned, forced = (
        estimate(Problem.build("mixtral-8x7b", "h100-16", replace(work, routing=r)), lay)
        for r in ("learned", "forced")
    )
    loads = {"learned": MIXTRAL_EP8_LEARNED, "forced": _busiest(8, 8192, 1, 0.0)}
    assert loads["forced"] == pytest.approx(1.0158, abs=1e-4)
    acc = learned.cluster.accelerator

    def routed_s(load):  # the routed experts' GEMMs at the busiest rows, 32 layers, 4 microbatches
        return 4 * MIXTRAL_LAYERS * _routed_gemms_s(acc, math.ceil(8192 * load))

    assert learned.time_s["compute/matmul"] - forced.time_s["compute/matmul"] == pytest.approx(
        routed_s(loads["learned"]) - routed_s(loads["forced"]), rel=1e-9
    )
    assert learned.time_s["compute/attention"] == forced.time_s["compute/attention"]
    assert _a2a(learned)["bytes"] / _a2a(forced)["bytes"] == pytest.approx(
        loads["learned"] / loads["forced"], rel=1e-12
    )
    # a routing spread the user measured (Workload.routing_cv) replaces the fitted default
    measured = estimate(
        Problem.build("mixtral-8x7b", "h100-16", replace(work, routing_cv=0.2)), lay
    )
    assert _a2a(measured)["bytes"] == pytest.approx(
        67_108_864 * _busiest(8, 8192, 1, 0.2), rel=1e-12
    )
    one = Layout(fsdp=16, zero_stage=1, num_microbatches=4)
    assert (
        estimate(Problem.build("mixtral-8x7b", "h100-16", work), one).step_time_s
        == estimate(
            Problem.build("mixtral-8x7b", "h100-16", replace(work, routing="forced")), one
        ).step_time_s
    )


def test_routing_is_a_choice_of_the_cli_and_problem_files(capsys, tmp_path):
    """--routing forced costs the benchmark's random routing; a wrong value is one line, exit 2."""
    args = [
        "estimate",
        *MIXTRAL_H100_16,
        "--layout",
        "fsdp=16,ep=8",
        "--microbatches",
        "4",
        "--zero-stage",
        "3",
        "--recompute",
        "full",
        "--format",
        "json",
    ]
    assert main(args) == 0
    learned = json.loads(capsys.readouterr().out)
    assert main([*args, "--routing", "forced"]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert (
        learned["layout"]["time_s"]["exposed_comm/ep"]
        > 1.1 * forced["layout"]["time_s"]["exposed_comm/ep"]
        > 0
    )
    # --routing-cv: the spread a user measured on their router; 16 H100, ep=8 with one local expert, 4 microbatches of
    # one sequence (4,096 tokens, 8,192 rows per expert device): the AllToAll carries the busiest device's load
    assert main([*args, "--routing-cv", "0.2"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert (
        learned["problem"]["workload"]["routing_cv"],
        measured["problem"]["workload"]["routing_cv"],
    ) == (0.15, 0.2)
    a2a = {
        doc["problem"]["workload"]["routing_cv"]: next(
            c["bytes"] for c in doc["collectives"] if c["name"].startswith("ep ")
        )
        for doc in (learned, measured)
    }
    assert a2a[0.2] / a2a[0.15] == pytest.approx(
        _busiest(8, 8192, 1, 0.2) / _busiest(8, 8192, 1, 0.15), rel=1e-12
    )
    assert main([*args, "--routing-cv", "-0.5"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: Invalid value for '--routing-cv': Input should be greater than or equal to 0 (got '-0.5')"
    )
    problem = tmp_path / "p.problem.yaml"
    problem.write_text(
        "model: mixtral-8x7b\ncluster: h100-16\nseqs: 64\nrouting: balanced\nlayout: fsdp=16,ep=8\nmicrobatches: 4\nzero_stage: 3\nrecompute: full\n"
    )
    assert main(["estimate", "--problem", str(problem)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {problem}: field 'routing': Value error, 'balanced' is not one of "
        f"'learned', 'forced'. (got 'balanced')"
    )
    # the Python API checks the value it is given the same way
    with pytest.raises(
        InvalidArgumentError, match=r"^--routing: 'balanced' is not one of learned, forced$"
    ):
        Problem.build(
            "mixtral-8x7b",
            "h100-16",
            Workload(global_batch_seqs=64, seq_len=4096, routing="balanced"),
        )
    for bad in (-0.1, float("nan"), float("inf"), "0.2", None):
        with pytest.raises(
            InvalidArgumentError,
            match=r"^--routing-cv: .* is not a number from 0 to 10 \(a learned ",
        ):
            Problem.build(
                "mixtral-8x7b",
                "h100-16",
                Workload(global_batch_seqs=64, seq_len=4096, routing_cv=bad),
            )


def test_cuda_graphs_leave_a_dense_model_and_refuse_a_tpu(capsys):
    llama = Layout(fsdp=16, num_microbatches=4)
    plain, graphed = (
        estimate(
            Problem.build(
                "llama3-8b", "h100-16", Workload(global_batch_seqs=64, seq_len=4096, cuda_graphs=g)
            ),
            llama,
        )
        for g in ("none", "full_iteration")
    )
    assert graphed.step_time_s == plain.step_time_s
    assert (
        main(
            [
                "estimate",
                "--model",
                "mixtral-8x7b",
                "--cluster",
                "v5p-16",
                "--seqs",
                "64",
                "--layout",
                "fsdp=16",
                "--cuda-graphs",
                "scoped",
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        "error: --cuda-graphs scoped: v5p runs on xla (hardware/v5p.yaml runtime); XLA compiles the whole step "
        "already; use --cuda-graphs none"
    )


# ----------------------------------------------------------------------------- memory and FLOPs
def test_expert_weights_divide_by_ep():
    """With ZeRO-1 the bf16 weights are whole on every device: going from ep=4 to ep=8 saves
    1/8 of the routed experts' weights (32 layers x 8 experts x 3 x D x F, 2 bytes each)."""
    problem = _mixtral()
    ep4, ep8 = (
        estimate(problem, Layout(fsdp=16, ep=ep, zero_stage=1, num_microbatches=4)) for ep in (4, 8)
    )
    experts = MIXTRAL_LAYERS * E * 3 * D * F
    assert ep4.memory_bytes["state/weights"] - ep8.memory_bytes["state/weights"] == pytest.approx(
        experts * (1 / 4 - 1 / 8) * 2, rel=1e-9
    )
    # the fp32 master and Adam moments divide by the expert ZeRO group too: 16 / ep devices
    assert ep4.memory_bytes["state/optimizer"] - ep8.memory_bytes[
        "state/optimizer"
    ] == pytest.approx(experts * 8 * (1 / 4 / 4 - 1 / 8 / 2), rel=1e-6)


def test_norm_act_recomputes_the_separate_norm_and_the_experts_activation_only():
    """Megatron's --recompute-modules layernorm moe_act: against no recompute a MoE layer drops its pre-MLP norm's
    output (a separate module in Megatron's Transformer Engine spec; the input norm is fused into the QKV linear,
    which keeps its output) and the k routed experts' activation, D + K x F elements per token (bf16), for 4096
    tokens x 32 layers in flight; the attention core is not run again (selective reruns it) and the norms'
    element-wise pass is half again (3 passes -> 3.5); the loss's passes (Megatron's native kernel, 32 bytes a logit
    over 32,000 logits a token, 4 microbatches of 4,096 tokens at 3.35 TB/s x 0.885) are not rerun."""
    problem = _mixtral()
    none, sel, norm_act = (
        estimate(problem, Layout(fsdp=16, ep=8, zero_stage=1, num_microbatches=4, recompute=r))
        for r in ("none", "selective", "norm_act")
    )
    dropped = (D + K * F) * 2 * 4096 * MIXTRAL_LAYERS
    assert none.memory_bytes["activations/saved"] - norm_act.memory_bytes[
        "activations/saved"
    ] == pytest.approx(dropped, rel=1e-12)
    assert norm_act.time_s["compute/recompute"] == 0 < sel.time_s["compute/recompute"]
    loss = 4 * 4096 * 32_000 * 32 / (3.35e12 * 0.885)
    assert norm_act.time_s["compute/elementwise"] - loss == pytest.approx(
        (none.time_s["compute/elementwise"] - loss) * 3.5 / 3
    )
    # a dense model without latent attention has no separate norm and no experts: norm_act is no recompute at all,
    # and the rule norm-act refuses it (the search would list a twin of every none layout)
    llama = Problem.build(
        "llama3-8b", "h100-8", Workload(global_batch_seqs=64, seq_len=4096, framework="megatron")
    )
    dense = [
        estimate(llama, Layout(fsdp=8, num_microbatches=8, recompute=r), strict=False)
        for r in ("none", "norm_act")
    ]
    assert (
        dense[0].memory_bytes["activations/saved"] == dense[1].memory_bytes["activations/saved"] > 0
    )
    assert dense[0].step_time_s == dense[1].step_time_s
    (v,) = check_layout(llama, Layout(fsdp=8, num_microbatches=8, recompute="norm_act"))
    assert v.message == (
        "recompute norm_act recomputes nothing on llama3-8b: it has no experts and no separate norm "
        "module (Megatron fuses its norms into the next linear); it is recompute none"
    )


def _deepseek_v3_fsdp_2048(*policies: str) -> tuple:
    """DeepSeek-V3 on 2,048 H100s, fsdp 2048 x ep 64, ZeRO-3, one microbatch of 4096-token sequences, under
    each recompute policy (Megatron's profile)."""
    problem = Problem.build(
        "deepseek-v3",
        "h100-2048",
        Workload(global_batch_seqs=2048, seq_len=4096, framework="megatron"),
    )
    layout = Layout(fsdp=2048, ep=64, zero_stage=3, num_microbatches=1)
    return tuple(estimate(problem, replace(layout, recompute=r), strict=False) for r in policies)


def test_mla_up_proj_drops_the_up_projected_heads_and_reruns_their_projections():
    """Megatron's --recompute-modules mla_up_proj on DeepSeek-V3: against no recompute a layer drops q, k and v, 128
    heads x (192 + 192 + 128) bf16 elements per token, for 4096 tokens x 61 layers; in backward the up-projections
    run again from the saved latents: their FLOPs over the layer's matmul FLOPs, q_b 1536 x 128 x 192 + k_b and v_b
    512 x 128 x 128 each, over those + the latents 7168 x (1536 + 512 + 64) + o 128 x 128 x 7168 + the MLP 3 x 7168 x
    18432 (the mean layer: 3 dense layers of 18432, 58 of 8 experts + 1 shared of 2048), of the forward matmul time."""
    none, up = _deepseek_v3_fsdp_2048("none", "mla_up_proj")
    assert (
        none.memory_bytes["activations/saved"] - up.memory_bytes["activations/saved"]
        == 128 * (192 + 192 + 128) * 2 * 4096 * 61
    )
    rerun = 1536 * 128 * 192 + 2 * 512 * 128 * 128
    share = rerun / (rerun + 7168 * (1536 + 512 + 64) + 128 * 128 * 7168 + 3 * 7168 * 18432)
    assert up.time_s["compute/recompute"] == pytest.approx(
        up.time_s["compute/matmul"] / 3 * share, rel=1e-12
    )


def test_model_flops_count_the_k_active_experts():
    """Mixtral: 6 x (attention projections + k of 8 experts + router + output) per token + causal attention."""
    attention = D * (2 * 32 * 128 + 2 * 8 * 128)
    per_layer = attention + K * 3 * D * F + D * E
    expected = (
        6 * (MIXTRAL_LAYERS * per_layer + D * 32000) + 3 * MIXTRAL_LAYERS * 4 * 2048 * 128 * 32
    )
    assert flops.model_flops_per_token(load_model("mixtral-8x7b"), 4096) == pytest.approx(
        expected, rel=1e-12
    )
    assert expected == pytest.approx(6 * 12.9e9, rel=0.04)  # Mixtral paper: 12.9B active parameters


def test_mla_attention_uses_the_value_head_width():
    """DeepSeek-V3: QK^T over nope + rope = 192 per head, AV over v_head_dim = 128, 128 heads."""
    model = load_model("deepseek-v3")
    assert (
        flops.attention_flops_per_token_per_layer(model, 4096, causal=True)
        == 2 * 2048 * (192 + 128) * 128
    )
    # the latent projections: q 7168 x 1536 + 1536 x 128 x 192, kv 7168 x 576 + 512 x 128 x 256, o 128 x 128 x 7168
    assert flops.mla_projection_params(model) == (
        7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    )


# ----------------------------------------------------------------------------- rules
@pytest.mark.parametrize(
    "layout, message",
    [
        ("fsdp=16,ep=16", "ep(16) does not divide the 8 routed experts of each MoE layer"),
        ("fsdp=16,ep=3", "ep(3) does not divide the 8 routed experts of each MoE layer"),
        (
            "dp=2,fsdp=8,ep=8,etp=4",
            "zero_stage 1 with ep(8) x etp(4) = 32, which does not divide fsdp(8) x cp(1) x tp(1)",
        ),
    ],
)
def test_expert_rules_name_the_numbers(capsys, layout, message):
    code = main(
        ["estimate", *MIXTRAL_H100_16, "--seq-len", "4096", "--layout", layout, "--zero-stage", "1"]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_dense_model_has_no_expert_degrees(capsys):
    code = main(
        [
            "estimate",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-8",
            "--seqs",
            "8",
            "--layout",
            "fsdp=8,ep=2",
        ]
    )
    assert (
        code == 2
        and "ep(2) x etp(1): model 'llama3-8b' has no mixture-of-experts layers\n"
        in capsys.readouterr().err
    )


# ----------------------------------------------------------------------------- search
@pytest.mark.slow
def test_deepseek_v3_on_2048_h100_is_proven_optimal_with_expert_parallelism(capsys):
    """The issue's Done-when command."""
    code = main([*DEEPSEEK_V3_H100_2048_SOLVE, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    best = doc["layouts"][0]
    assert code == 0 and doc["solver"]["status"] == "OPTIMAL"
    assert best["degrees"]["ep"] > 1 and "ep" in best["axes"]
    assert best["time_s"]["exposed_comm/ep"] > 0


@st.composite
def moe_problems(draw):
    heads = draw(st.sampled_from([4, 8]))
    experts = draw(st.sampled_from([4, 8, 16]))
    layers = draw(st.sampled_from([4, 6, 8]))
    moe = MoeSpec(
        num_experts=experts,
        top_k=draw(st.sampled_from([1, 2])),
        expert_d_ff=heads * 64 * 2,
        num_shared_experts=draw(st.sampled_from([0, 1])),
        shared_d_ff=heads * 64,
        first_dense_layers=draw(st.sampled_from([0, 1])),
    )
    mla = MlaSpec(
        q_lora_rank=128, kv_lora_rank=64, qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64
    )
    use_mla = draw(st.booleans())
    model = ModelSpec(
        name="rand-moe",
        num_layers=layers,
        d_model=heads * 64,
        d_ff=heads * 64 * 4,
        mlp="gated",
        num_heads=heads,
        num_kv_heads=heads if use_mla else draw(st.sampled_from([1, heads])),
        head_dim=64,
        vocab_size=32000,
        tied_embeddings=False,
        moe=moe,
        mla=mla if use_mla else None,
    )
    cluster = resolve_cluster(draw(st.sampled_from(["h100-16", "v5p-16", "h100-8", "gb200-64"])))
    workload = Workload(
        global_batch_seqs=draw(st.sampled_from([16, 32, 64])),
        seq_len=draw(st.sampled_from([512, 2048])),
        framework=draw(st.sampled_from([None, "ideal"])),
    )
    return model, workload, cluster


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=moe_problems())
def test_cpsat_equals_the_enumerator_on_random_moe_instances(problem):
    model, workload, cluster = problem
    space = build_space(Problem.build(model, cluster, workload), SearchOptions())
    assert (
        not space.num_shapes or int(np.max(space.shapes.ep)) > 1
    )  # expert parallelism is in the candidate space
    tables = build_tables(space)
    found = {}
    enum, _ = enumerate_top(space, tables, "step-time", 3, found=found)
    cps, info = proven_top(space, tables, "step-time", 3)
    assert cps == enum
    if enum:
        assert info["status"] == "OPTIMAL" and info["objective"] == found["optimum"]


def test_the_infeasibility_funnel_names_the_expert_rule(capsys):
    """`--fix ep=16` on Mixtral's 8 experts: the funnel says which MoE rule removed the last layouts."""
    code = main(["solve", *MIXTRAL_H100_16, "--fix", "ep=16"])
    out = capsys.readouterr()
    assert code == 1
    assert (
        "no layout satisfies the rules: 'ep divides the experts (8)' (ep-experts) removes the last 35 degree tuples"
    ) in out.out + out.err


def test_moe_on_an_accelerator_without_moe_calibration_is_warned(capsys):
    """TPUs have no fitted MoE overhead: the plan comes with one warning line; calibrated GPUs get none."""
    args = ["--seqs", "512", "--seq-len", "4096", "--top", "1", "--format", "json"]
    assert main(["solve", "--model", "mixtral-8x7b", "--cluster", "v5p-128", *args]) == 0
    err = capsys.readouterr().err
    assert err == (
        "warning: v5p has no MoE calibration (hardware/v5p.yaml): its MoE layers are costed by FLOPs and "
        "traffic alone; on the 4 published TPU MoE runs that is 13% too slow to 10% too fast "
        "(results/validation_moe.md)\n"
    )
    assert main(["solve", "--model", "mixtral-8x7b", "--cluster", "h100-64", *args]) == 0
    assert capsys.readouterr().err == ""
    # the A100 carries the GPUs' shared host time (docs/calibration.md#moe-overheads)
    assert main(["solve", "--model", "mixtral-8x7b", "--cluster", "a100-80gb-64", *args]) == 0
    assert capsys.readouterr().err == ""


def test_an_a100_costs_moe_host_time_as_every_gpu():
    """The A100s carry the GPUs' shared MoE host time (host software, not the die): Mixtral 8x7B on 64 A100s pays
    compute/moe_fixed as on 64 H100s (the same values)."""
    work = Workload(global_batch_seqs=512, seq_len=4096)
    lay = Layout(fsdp=8, ep=8, tp=8, zero_stage=1, num_microbatches=8, recompute="full")
    times = {
        name: estimate(Problem.build("mixtral-8x7b", name, work), lay).time_s["compute/moe_fixed"]
        for name in ("a100-80gb-64", "h100-64")
    }
    acc = resolve_cluster("a100-80gb-64").accelerator
    assert (acc.moe_launch_latency_s, acc.moe_host_sync_s) == pytest.approx((53.06e-6, 510.1e-6))
    assert times["a100-80gb-64"] > 0 and times["h100-64"] > 0


def test_norm_mla_up_proj_also_drops_the_separate_norms_outputs_and_reruns_the_norms():
    """DeepSeek-V3 report section 3.2.3, "recompute all RMSNorm operations and MLA up-projections", as Megatron's
    --recompute-modules layernorm mla_up_proj: against mla_up_proj a layer also drops the input norm's output
    (7168 bf16 elements per token in each of the 61 layers) and the pre-MLP norm's output of the MoE layers (7168 in
    58 of them; the 3 dense layers' norm is fused into fc1 and kept), for 4096 tokens; the up-projections rerun as
    under mla_up_proj (the same recompute seconds) and the norms' half of the element-wise passes runs again (3.5
    passes where mla_up_proj pays 3: the forward and the backward's two); the loss's passes over the logits, the
    head's and the MTP module's (Megatron's native kernel, 32 bytes a logit over 129,280 logits a token each, 4,096
    tokens at 3.35 TB/s x 0.885), are not rerun."""
    up, norm_up = _deepseek_v3_fsdp_2048("mla_up_proj", "norm_mla_up_proj")
    dropped = up.memory_bytes["activations/saved"] - norm_up.memory_bytes["activations/saved"]
    assert dropped == pytest.approx((61 + 58) * 7168 * 2 * 4096, rel=1e-12)
    assert norm_up.time_s["compute/recompute"] == up.time_s["compute/recompute"] > 0
    loss = 2 * 4096 * 129_280 * 32 / (3.35e12 * 0.885)
    assert norm_up.time_s["compute/elementwise"] - loss == pytest.approx(
        (up.time_s["compute/elementwise"] - loss) * 3.5 / 3, rel=1e-9
    )


def test_norm_mla_up_proj_needs_latent_attention_and_megatron_writes_layernorm_mla_up_proj():
    """Like mla_up_proj, the policy reruns latent attention's up-projections: a model without MLA is refused
    naming it; on DeepSeek-V3 the Megatron exporter writes the two modules (megatron-core TransformerConfig
    recompute_modules: "layernorm" the input and pre-MLP norms, "mla_up_proj" the up-projections and RoPE)."""
    llama = Problem.build("llama3-8b", "h100-8", Workload(global_batch_seqs=8, seq_len=4096))
    (v,) = check_layout(llama, Layout(fsdp=8, num_microbatches=1, recompute="norm_mla_up_proj"))
    assert v.message == (
        "recompute norm_mla_up_proj reruns latent attention's up-projections, but llama3-8b has no latent "
        "attention (Megatron refuses mla_up_proj without it)"
    )
    assert recompute_modules(load_model("deepseek-v3"), "norm_mla_up_proj") == (
        "layernorm",
        "mla_up_proj",
    )


def test_the_mtp_module_holds_its_own_parameters_on_the_device_with_the_output_head():
    """DeepSeek-V3 report section 3.2.3: DualPipe puts the deepest layers, the output head and the MTP module on the
    PP rank of the shallowest layers and the embedding, which the MTP module shares (section 2.2); the module's own
    parameters are there: outside its routed experts 3 norms (3 x 7168), eh_proj 2 x 7168^2 = 102,760,448, the MLA
    attention 187,107,328 (q_a 7168 x 1536, q_b 1536 x 128 x 192, kv_a 7168 x 576, kv_b 512 x 128 x 256, o 128 x
    128 x 7168, latent norms 1536 + 512), the shared expert 3 x 7168 x 2048, the router 256 x 7168 + 256, the
    layer's two norms: 335,779,072; and 1/64 of its 256 experts, 256 x 3 x 7168 x 2048 / 64 = 176,160,768. The
    published layout's end device (ZeRO-1 over 128, the experts' over 128 / 64 = 2) holds 2 B weights and 4 B
    gradients of each, 4 B master and 8 B moments over 128 (dense) or 2 (experts) more than without the module."""
    v3 = load_model("deepseek-v3")
    workload = Workload(global_batch_seqs=15360, seq_len=4096, framework="megatron")
    layout = Layout(fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120, schedule="dualpipe")
    with_mtp, without = (
        estimate(
            Problem(
                model_id="deepseek-v3",
                model=model,
                cluster_name="h800-2048",
                cluster=resolve_cluster("h800-2048"),
                workload=workload,
            ),
            layout,
            strict=False,
        ).memory_bytes
        for model in (v3, replace(v3, mtp_layers=0))
    )
    dense, experts = 335_779_072, 176_160_768
    assert dense + 64 * experts == 11_610_068_224  # the module's exact count (param_counts 'mtp')
    expected = {
        "state/weights": 2 * (dense + experts),
        "state/grads": 4 * (dense + experts),
        "state/master": 4 * (dense / 128 + experts / 2),
        "state/optimizer": 8 * (dense / 128 + experts / 2),
    }
    for key, value in expected.items():
        assert with_mtp[key] - without[key] == pytest.approx(value, rel=1e-12), key
