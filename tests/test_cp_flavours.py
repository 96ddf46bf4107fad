"""Context-parallel flavours (ring, allgather, a2a, a2a+ring): traffic, memory, kernel calls,
divisibility, exports, and CP-SAT against the enumerator where cp > 1."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml
from builders import exported, per_candidate_funnel, solve_doc
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.rules import framework_rules, registry, violations
from layoutsearch.core.specs import CP_FLAVOUR_CODES, CP_FLAVOURS, Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import terms
from layoutsearch.costs.comms import RingCoefficients
from layoutsearch.frameworks import capabilities_of
from layoutsearch.search import explain, solve
from layoutsearch.search.space import build_space

runner = CliRunner()

# debug model: 8 layers, 8 heads / 2 kv heads of head_dim 32 (K and V: 32 + 32 = 64 wide), bf16.
# 8 sequences x 4096 tokens, dp = fsdp = 1, K = 1, cp = 4: m = 32768 / 4 = 8192 tokens per device;
# tp = 2: 4 query heads and 1 kv head per tp rank.
M_TOKENS = 8192
DEBUG = load_model("debug")
WORKLOAD = Workload(global_batch_seqs=8, seq_len=4096)
RING, ALLGATHER, A2A, A2A_RING = (CP_FLAVOUR_CODES[f] for f in CP_FLAVOURS)


def shapes(cpf: int, cpa: int) -> terms.Shapes:
    return terms.Shapes.of(tp=2, cp=4, cpf=cpf, cpa=cpa)


def test_a2a_bytes_are_the_queries_outputs_and_replicated_kv_heads():
    """a2a over 4 ranks: m x (4 query heads + max(1 kv head, 4)) x 64 x 2 B = 8192 x 8 x 128 B;
    a2a+ring over 2 ranks: 8192 x (4 + 2) x 128 B; ring: none."""
    m = terms.tokens_per_microbatch(WORKLOAD, shapes(A2A, 4), np.array([1]))
    assert float(m[0]) == M_TOKENS
    a2a = terms.cp_a2a_bytes(DEBUG, WORKLOAD, shapes(A2A, 4), m)
    hier = terms.cp_a2a_bytes(DEBUG, WORKLOAD, shapes(A2A_RING, 2), M_TOKENS)
    ring = terms.cp_a2a_bytes(DEBUG, WORKLOAD, shapes(RING, 1), M_TOKENS)
    assert float(a2a[0]) == 8192 * 8 * 128 == 8_388_608
    assert float(hier[0]) == 8192 * 6 * 128 == 6_291_456
    assert float(ring[0]) == 0.0


def test_cp_buffers_add_the_gathered_kv_or_the_a2a_buffers_to_the_workspace():
    """Beyond ring's workspace: allgather holds the layer's gathered K/V, 4 x 8192 x 1 x 64 x 2 B
    = 4,194,304 B; a2a its all-to-all buffers, 8,388,608 B."""
    k, r = np.array([1]), np.array([0])

    def workspace(cpf, cpa):
        items = terms.memory_by_microbatch(DEBUG, WORKLOAD, shapes(cpf, cpa), k, r, True, True)
        return float(np.asarray(items["temporary/workspace"]).reshape(-1)[0])

    ring = workspace(RING, 1)
    assert workspace(ALLGATHER, 1) - ring == pytest.approx(4_194_304, rel=1e-12)
    assert workspace(A2A, 4) - ring == pytest.approx(8_388_608, rel=1e-12)


def test_kernel_calls_per_query_by_flavour():
    """cp = 4: ring 4 calls, allgather 1, a2a 1, a2a+ring with 2 ranks inside a node 4 / 2 = 2."""
    sh = terms.Shapes.of(
        tp=[2] * 4, cp=[4] * 4, cpf=[RING, ALLGATHER, A2A, A2A_RING], cpa=[1, 1, 4, 2]
    )
    assert terms.cp_kernel_calls(sh).tolist() == [4, 1, 1, 2]


def _coeffs() -> terms.Coeffs:
    one = terms.single_device(1)
    groups = dict.fromkeys(terms.COEFF_GROUPS, one)
    groups["cp"] = RingCoefficients(
        members=np.array([4]), seconds_per_byte=np.array([1e-9]), latency_s=np.array([2e-5])
    )
    groups["cp_a2a"] = RingCoefficients(
        members=np.array([4]), seconds_per_byte=np.array([5e-10]), latency_s=np.array([1e-5])
    )
    groups["cp_in"] = RingCoefficients(
        members=np.array([2]), seconds_per_byte=np.array([2.5e-10]), latency_s=np.array([5e-6])
    )
    return terms.Coeffs(**groups)


@pytest.mark.parametrize(
    ("cpf", "cpa", "base_s"),
    [
        # ring: K/V 4 x 8192 x 1 x 64 x 2 = 4,194,304 B, t = 4194304e-9 + 2e-5 = 4.214304 ms;
        # 3 ms of attention hides it: fwd 1.214304 ms, bwd 2 t - 6 ms = 2.428608 ms; x 8 layers
        (RING, 1, 8 * (0.001214304 + 0.002428608)),
        # allgather: t exposed forward, 2 t backward (gathered again, dK/dV reduce-scattered)
        (ALLGATHER, 1, 8 * 3 * 0.004214304),
        # a2a: 8,388,608 B x 5e-10 s/B + 4 x 1e-5 s = 4.234304 ms each way, exposed
        (A2A, 4, 8 * 2 * 0.004234304),
        # a2a+ring: in-node 6,291,456 B x 2.5e-10 + 4 x 5e-6 = 1.592864 ms each way, plus the ring of
        # 4 x 8192 x max(1, 2) / 2 x 128 B = 4,194,304 B as above
        (A2A_RING, 2, 8 * (0.001214304 + 0.002428608 + 2 * 0.001592864)),
    ],
)
def test_exposed_cp_time_per_flavour(cpf, cpa, base_s):
    """Exposed CP seconds of a microbatch over the 8 layers, with hand-made coefficients, no
    small-message penalty and no interference, behind a 3 ms attention window."""
    acc = dataclasses.replace(
        resolve_cluster("h100-16").accelerator,
        collective_half_efficiency_bytes=0.0,
        overlap_interference=0.0,
    )
    out = terms.cp_per_microbatch(
        DEBUG, WORKLOAD, acc, shapes(cpf, cpa), np.array([1]), _coeffs(), 0.003
    )
    assert float(np.asarray(out["base"]).reshape(-1)[0]) == pytest.approx(base_s, rel=1e-12)


def _problem(model="llama70b", cluster="h100-64", seqs=16, seq_len=65536, framework="megatron"):
    return Problem.build(
        load_model(model),
        resolve_cluster(cluster),
        Workload(global_batch_seqs=seqs, seq_len=seq_len, framework=framework),
    )


def test_a2a_needs_tp_times_cp_to_divide_the_heads():
    """debug (8 heads, 2 kv heads) on 16 devices: a2a with tp 2, cp 4 passes (2 x 4 = 8 divides 8);
    with tp 2, cp 8 it is refused (2 x 8 = 16 does not), the message printing the numbers."""
    problem = _problem("debug", "h100-16", 32, 16384, "ideal")

    def refusals(layout):
        return [v.message for v in violations(problem, layout, registry()) if v.code == "cp-heads"]

    assert refusals(Layout(dp=2, tp=2, cp=4, zero_stage=0, cp_flavour="a2a")) == []
    assert refusals(Layout(tp=2, cp=8, zero_stage=0, cp_flavour="a2a")) == [
        "cp flavour a2a with tp(2) and cp(8): its all-to-all over 8 ranks needs tp x 8 = 16 "
        "to divide num_heads(8) and 8 and the 1 kv heads per tp rank to divide one another"
    ]
    assert refusals(Layout(tp=2, cp=8, zero_stage=0, cp_flavour="ring")) == []


def test_torchtitan_refuses_allgather_with_its_reason():
    """torchtitan runs ring attention only: an allgather layout is refused by its rule."""
    layout = Layout(fsdp=4, tp=4, cp=4, zero_stage=3, num_microbatches=16, cp_flavour="allgather")
    rules = framework_rules(capabilities_of("torchtitan"))
    found = [
        v.message
        for v in violations(_problem(), layout, rules)
        if v.code == "torchtitan-cp-flavour"
    ]
    assert len(found) == 1
    assert found[0].startswith(
        "torchtitan cannot express cp flavour allgather (its context parallelism is ring attention"
    )
    assert found[0].endswith("; nearest: cp flavour ring")


def test_megatron_export_writes_the_cp_comm_type_and_hierarchical_sizes():
    """a2a+ring on h100 nodes of 8 with tp 4: 2 cp ranks per node, --hierarchical-context-parallel-sizes 2 8;
    a2a writes --cp-comm-type a2a; ring writes nothing (p2p is Megatron's default)."""
    base = dict(tp=4, cp=16, zero_stage=2, num_microbatches=16)
    texts = {
        flavour: exported(
            solve_doc(
                "llama70b",
                "h100-64",
                16,
                65536,
                Layout(**base, cp_flavour=flavour),
                framework="megatron",
            ),
            "megatron",
        )
        for flavour in ("ring", "a2a", "a2a+ring")
    }
    assert "--cp-comm-type" not in texts["ring"]
    assert "--cp-comm-type a2a\n" in texts["a2a"]
    assert "--cp-comm-type a2a+p2p\n" in texts["a2a+ring"]
    assert "--hierarchical-context-parallel-sizes 2 8\n" in texts["a2a+ring"]


@pytest.mark.parametrize(
    ("model", "cluster", "seqs", "seq_len", "cp", "framework"),
    [
        ("llama3-8b", "h100-16", 16, 32768, 4, "megatron"),
        ("llama70b", "h100-64", 16, 65536, 16, "megatron"),
        ("debug", "h100-16", 32, 8192, 4, "ideal"),
    ],
)
def test_cpsat_ranks_the_flavours_as_the_enumerator(model, cluster, seqs, seq_len, cp, framework):
    """cp forced above 1 with every flavour allowed: CP-SAT's top 3 (layouts, flavours and step
    times) are the enumerator's."""
    problem = _problem(model, cluster, seqs, seq_len, framework)
    options = SearchOptions(fix={"cp": cp}, cp_flavours=CP_FLAVOURS)
    proven = solve(problem, SearchRequest(options=options, top_k=3))
    oracle = solve(problem, SearchRequest(options=options, top_k=3, method="enumerate"))
    assert proven.status == "OPTIMAL"
    assert [e.layout for e in proven.layouts] == [e.layout for e in oracle.layouts]
    assert [e.step_time_s for e in proven.layouts] == [e.step_time_s for e in oracle.layouts]
    # the choice is in play: a flavour other than the default ring is ranked
    assert any(e.layout.cp_flavour != "ring" for e in proven.layouts)


def test_cp_flavours_option_restricts_and_names_bad_flavours():
    """--cp-flavours a2a leaves a2a alone where cp > 1; an unknown flavour is exit 2 naming it."""
    argv = "solve --model llama3-8b --cluster h100-16 --seqs 16 --seq-len 32768".split()
    r = runner.invoke(app, [*argv, "--fix", "cp=4", "--cp-flavours", "a2a", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    assert {x["cp_flavour"] for x in json.loads(r.stdout)["layouts"]} == {"a2a"}
    bad = runner.invoke(app, [*argv, "--cp-flavours", "ring,ulysses"])
    assert bad.exit_code == 2
    assert "--cp-flavours: unknown flavour 'ulysses'" in bad.stderr


def test_main_job_is_unchanged():
    """llama70b on v5p-8192 (MaxText profile: ring alone by default): the objective, candidate count
    and winner of the run before the flavours existed (724,076 candidates, fsdp 1024 x tp 8; the objective
    0.7918784213998217 s since the loss's passes are costed, 0.7913092754911213 s since the GEMMs are costed from
    their shapes, 0.7996105278371362 before), and no
    cp_flavour key where cp = 1."""
    r = runner.invoke(
        app, ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--format", "json"]
    )
    doc = json.loads(r.stdout)
    assert doc["solver"]["objective"] == 0.7918784213998217
    assert doc["solver"]["num_candidates"] == 724_076
    assert doc["layouts"][0]["degrees"]["fsdp"] == 1024 and doc["layouts"][0]["degrees"]["tp"] == 8
    assert all("cp_flavour" not in x for x in doc["layouts"])


@pytest.mark.parametrize(("flavour", "strategy"), [("ring", "ring"), ("allgather", "all_gather")])
def test_maxtext_export_writes_the_context_parallel_strategy(flavour, strategy):
    """llama70b on v5p-256 with fsdp 16 x tp 4 x cp 4 (ZeRO-3): context_parallel_strategy names the
    flavour (MaxText's all_gather or ring) beside ici_context_parallelism 4."""
    layout = Layout(fsdp=16, tp=4, cp=4, zero_stage=3, recompute="full", cp_flavour=flavour)
    doc = solve_doc("llama70b", "v5p-256", 256, 32768, layout)
    config = yaml.safe_load(exported(doc, "maxtext"))
    assert config["context_parallel_strategy"] == strategy
    assert config["ici_context_parallelism"] == 4
    # TPU ring attention is Tokamax's splash kernel (configs/types.py); all_gather needs neither
    tokamax = {"attention": "flash", "use_tokamax_splash": True}
    assert ({k: config.get(k) for k in tokamax} == tokamax) == (flavour == "ring")


def test_maxtext_refuses_tpu_ring_where_cp_squared_does_not_divide_the_sequence():
    """MaxText's TPU ring needs max_target_length % cp^2 == 0: cp 8 over 32,768 tokens holds
    (32,768 = 512 x 64), cp 8 over 4,624 (16 x 289) does not; the refusal names the numbers and the reason."""
    layout = Layout(fsdp=8, cp=8, zero_stage=3, cp_flavour="ring")
    rules = framework_rules(capabilities_of("maxtext"))

    def refusals(seq_len: int) -> list[str]:
        problem = Problem.build(
            "llama3-8b", "v5p-64", Workload(global_batch_seqs=64, seq_len=seq_len)
        )
        return [
            v.message for v in violations(problem, layout, rules) if v.code == "maxtext-ring-cp-seq"
        ]

    assert refusals(32768) == []
    found = refusals(4624)
    assert len(found) == 1 and found[0].startswith(
        "MaxText cannot express ring cp(8) over seq_len(4624), not a multiple of cp^2 (its TPU "
        "ring attention (Tokamax splash) needs max_target_length divisible by"
    )


def test_the_funnel_counts_the_flavour_rules_as_theper_candidate_funnel():
    """debug on 16 GPUs with --cp-flavours a2a (cp > 1 only where tp x cp divides the 8 heads): the
    proportional funnel's counts after every rule are those of every candidate row, flavours
    included."""
    problem = _problem("debug", "h100-16", 64, 4096, "megatron")
    rules = build_space(problem, SearchOptions(cp_flavours=("a2a",))).rules
    counts = [s["remaining"] for s in explain.funnel(problem, rules)]
    assert counts == per_candidate_funnel(problem, rules)
    removed = {s["code"]: s["removed"] for s in explain.funnel(problem, rules)}
    assert removed["cp-heads"] > 0
