"""Pipeline schedules (issue 32 point 1): zero bubble (ZB-H1, ZB-V) and DualPipe (DualPipe, DualPipeV)
beside 1F1B, interleaved and GPipe: bubble, memory in flight, parameter copies, the AllToAll overlap,
the search's choice among a target's schedules, exports and refusals."""

from __future__ import annotations

import json
import re
import tomllib

import numpy as np
import pytest
from builders import doc_llama8b, exported
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import SCHEDULE_CODES, Layout, ModelSpec, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import pipeline, terms
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import export_document
from layoutsearch.search import solve

runner = CliRunner()
SPLIT = (0.3, 0.4, 0.3)  # (F, B, W) shares: forward, input gradient, weight gradient


def _bubble(name: str, p: int, v: int = 1, split=SPLIT) -> float:
    return float(pipeline.bubble_microbatches_array(p, v, np.array(SCHEDULE_CODES[name]), split))


# (schedule, p, v, bubble in microbatch stage times), by hand with F = 0.3, B = 0.4, W = 0.3:
# 1f1b (p-1); interleaved (p-1)/v; zb-h1 (p-1)(F+B-W) = 0.4(p-1); zb-v (p-1)(F+B-2W)/2 = 0.05(p-1);
# dualpipe (p/2-1)(F+2B-W) = 0.8(p/2-1); dualpipev (p-1)(F+2B-W)/2 = 0.4(p-1)
BUBBLES = [
    ("1f1b", 4, 1, 3.0),
    ("1f1b", 8, 1, 7.0),
    ("gpipe", 8, 1, 7.0),
    ("interleaved", 8, 2, 3.5),
    ("zb-h1", 4, 1, 1.2),
    ("zb-h1", 8, 1, 2.8),
    ("zb-h1", 8, 2, 1.4),
    ("zb-v", 4, 2, 0.15),
    ("zb-v", 8, 2, 0.35),
    ("dualpipe", 4, 1, 0.8),
    ("dualpipe", 8, 1, 2.4),
    ("dualpipev", 4, 2, 1.2),
    ("dualpipev", 8, 2, 2.8),
]


@pytest.mark.parametrize(("name", "p", "v", "bubble"), BUBBLES)
def test_bubble_per_schedule_by_hand(name, p, v, bubble):
    """Each schedule's idle time in microbatch stage times against the hand arithmetic above."""
    assert _bubble(name, p, v) == pytest.approx(bubble)


@pytest.mark.parametrize(
    ("name", "p", "k", "fraction"),
    [
        ("1f1b", 4, 8, 3 / 11),  # 3 / (8 + 3)
        ("1f1b", 8, 16, 7 / 23),
        ("zb-h1", 4, 8, 1.2 / 9.2),
        ("zb-h1", 8, 16, 2.8 / 18.8),
        ("dualpipe", 4, 8, 0.8 / 8.8),
        ("dualpipe", 8, 16, 2.4 / 18.4),
        ("dualpipev", 8, 16, 2.8 / 18.8),
    ],
)
def test_bubble_fraction_of_the_step(name, p, k, fraction):
    """The bubble's share of a step of K microbatches: bubble / (K + bubble)."""
    v = 2 if name in ("zb-v", "dualpipev") else 1
    sh = terms.Shapes.of(pp=p, v=v, sched=SCHEDULE_CODES[name])
    mult = float(terms.step_multiplier(sh, np.array([k]), SPLIT)[0])
    assert (mult - k) / mult == pytest.approx(fraction)


def test_zero_bubble_v_has_no_bubble_when_the_three_passes_are_equal():
    """ZB-V with F = B = W: (p - 1)(F + B - 2W)/2 = 0 (arXiv 2401.10241 section 6); no pipeline: no
    bubble."""
    assert _bubble("zb-v", 8, 2, (1 / 3, 1 / 3, 1 / 3)) == pytest.approx(0.0)
    assert _bubble("dualpipe", 1, 1) == 0.0 and _bubble("zb-h1", 1, 1) == 0.0


def test_backward_split_of_a_small_dense_layer_by_hand():
    """d 64, d_ff 256 (plain MLP), one 64-wide head, 512 causal tokens: matmul forward 2 x 49,152 =
    98,304 FLOPs per token, attention 2 x 256 x 128 = 65,536; F = 163,840, W = 98,304, B = 98,304 +
    2.5 x 65,536 = 262,144 of 524,288: (0.3125, 0.5, 0.1875)."""
    heads = {"num_heads": 1, "num_kv_heads": 1, "head_dim": 64, "tied_embeddings": False}
    model = ModelSpec(
        name="t", num_layers=4, d_model=64, d_ff=256, mlp="plain", vocab_size=1000, **heads
    )
    split = terms.backward_split(model, Workload(global_batch_seqs=8, seq_len=512))
    assert split == pytest.approx((0.3125, 0.5, 0.1875))


@pytest.mark.parametrize(
    ("name", "v", "k", "alive"),
    [
        ("1f1b", 1, 16, 4.0),
        ("zb-h1", 1, 16, 4.0),  # as 1F1B
        ("gpipe", 1, 16, 16.0),  # every forward first
        ("interleaved", 2, 16, 4 + 3 / 2),
        ("zb-v", 2, 16, 4.0),  # 1F1B's first-stage peak on every device
        ("dualpipe", 1, 16, 5.0),  # p + 1
        ("dualpipev", 2, 16, 4.5),  # 2p + 1 half-stage chunks
        ("dualpipe", 1, 2, 2.0),  # never more than the microbatches
    ],
)
def test_microbatches_in_flight_on_the_first_stage(name, v, k, alive):
    """Activations alive on the first of 4 stages, in whole-stage microbatches."""
    assert pipeline.microbatches_in_flight_array(4, 0, k, v, SCHEDULE_CODES[name]) == alive


LLAMA_H64 = Problem.build(
    load_model("llama70b"), resolve_cluster("h100-64"), Workload(global_batch_seqs=64, seq_len=4096)
)
PIPE = dict(fsdp=4, tp=4, pp=4, zero_stage=1, num_microbatches=16)


def test_dualpipe_holds_both_ends_weights():
    """A DualPipe device holds stages i and p - 1 - i: its parameters are the first and last stage's
    together (llama70b, pp 4, tp 4: 20 layers of 213,925,888 weights each and the 262,668,288-weight
    embedding at the first, the head and the 8,192-weight final norm at the last)."""
    sh = terms.Shapes.of(pp=4, tp=4, sched=SCHEDULE_CODES["dualpipe"])
    model = load_model("llama70b")
    both = float(terms.stage_params(model, sh, first=True)[0])
    one = terms.Shapes.of(pp=4, tp=4)
    first, last = (float(terms.stage_params(model, one, first=f)[0]) for f in (True, False))
    assert both == pytest.approx(first + last)
    assert both == 2 * 20 * 213_925_888 + 2 * 262_668_288 + 8_192


def test_zero_bubble_holds_1f1b_activations_and_a_smaller_bubble():
    """ZB-H1 on 4 stages holds 1F1B's 4 microbatches at its peak (Qi et al. 2024, Table 1: its
    deferred W passes are within that count, no memory item beside it) and its bubble is under
    0.4 of 1F1B's."""
    zb = estimate(LLAMA_H64, Layout(**PIPE, schedule="zb-h1"))
    plain = estimate(LLAMA_H64, Layout(**PIPE))
    assert zb.memory_bytes["activations/saved"] == plain.memory_bytes["activations/saved"]
    assert not any(key.startswith("activations/deferred") for key in zb.memory_bytes)
    assert zb.time_s["bubble"] < 0.4 * plain.time_s["bubble"]


def test_zero_bubble_v_estimate_against_interleaved():
    """llama70b, pp 4 with two chunks per device: ZB-V's bubble is under a tenth of interleaved 1F1B's
    (W is nearly a third of a dense layer at 4k tokens, so F + B - 2W is small); its activations
    are 1F1B's p = 4 microbatches against interleaved's 4 + 3/2."""
    layout = {**PIPE, "virtual_stages": 2}
    zbv = estimate(LLAMA_H64, Layout(**layout, schedule="zb-v"))
    inter = estimate(LLAMA_H64, Layout(**layout, schedule="interleaved"))
    assert zbv.time_s["bubble"] < 0.1 * inter.time_s["bubble"]
    saved = zbv.memory_bytes["activations/saved"] / inter.memory_bytes["activations/saved"]
    assert saved == pytest.approx(4 / 5.5)


def test_overlapped_collective_by_hand():
    """10 s of AllToAll beside a 4 s window with 1 s latency: 6 s exposed; the compute of the 4 s
    hidden runs on 112 of 132 SMs (DeepSeek's 20 for the kernels), 4 x 20/112 = 0.714 s more."""
    exposed, lost = terms.overlapped_collective(10.0, 4.0, 1.0, terms.DUALPIPE_COMM_SM_SHARE)
    assert exposed == 6.0 and lost == pytest.approx(0.7142857)
    assert terms.overlapped_collective(2.0, 4.0, 1.0, 0.5) == (1.0, 0.5)  # the latency stays


def test_dualpipe_hides_the_moe_alltoalls_that_1f1b_exposes():
    """deepseek-v3 on h800-2048 (pp 16, ep 64) without --ep-comm-overlap: DualPipe hides part of the
    dispatch and combine behind the other direction's compute; 1F1B exposes them all."""
    problem = Problem.build(
        "deepseek-v3", "h800-2048", Workload(global_batch_seqs=15360, seq_len=4096, precision="fp8")
    )
    layout = dict(fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120)
    dual = estimate(problem, Layout(**layout, schedule="dualpipe"))
    plain = estimate(problem, Layout(**layout))
    assert dual.time_s["exposed_comm/ep"] < 0.8 * plain.time_s["exposed_comm/ep"]
    assert dual.time_s["bubble"] < 0.5 * plain.time_s["bubble"]


def test_schedule_rules_name_the_numbers():
    """Virtual stages and microbatches a schedule cannot run with are refused with their numbers."""
    codes = {
        v.code: v.message
        for v in check_layout(LLAMA_H64, Layout(**{**PIPE, "pp": 4}, schedule="zb-v"))
    }
    assert codes["schedule"] == (
        "schedule zb-v with virtual_stages(1): ZB-V runs two chunks per device in a V "
        "(virtual_stages 2)"
    )
    found = check_layout(LLAMA_H64, Layout(**{**PIPE, "num_microbatches": 4}, schedule="dualpipe"))
    assert [(v.code, v.message) for v in found] == [
        (
            "dualpipe",
            "schedule dualpipe with pp(4) and num_microbatches(4): DualPipe feeds half the "
            "microbatches from each end, so it needs an even pp, an even count and at least 2 pp of "
            "them (DualPipe.step's assertions)",
        )
    ]


def _doc(schedule: str, v: int, zero_stage: int = 1) -> dict:
    """llama3-8b on h100-64 with a 4-stage pipeline of ``schedule``, ZeRO-1 (every target's pipelines take
    it: torchtitan's FSDP2 runs as ZeRO-1 under torch.distributed.pipelining)."""
    shape = {"fsdp": 2, "tp": 8, "pp": 4, "num_microbatches": 8}
    layout = Layout(**shape, zero_stage=zero_stage, virtual_stages=v, schedule=schedule)
    return doc_llama8b(layout)


@pytest.mark.parametrize(
    ("schedule", "v", "name"),
    [
        ("zb-h1", 2, "InterleavedZeroBubble"),
        ("zb-v", 2, "ZBVZeroBubble"),
        ("dualpipev", 2, "DualPipeV"),
    ],
)
def test_torchtitan_writes_torch_pipelining_schedule_names(schedule, v, name):
    """torchtitan's pipeline_parallel_schedule takes torch.distributed.pipelining's class names."""
    tt = tomllib.loads(exported(_doc(schedule, v), "torchtitan"))["parallelism"]
    assert tt["pipeline_parallel_schedule"] == name
    assert tt["pipeline_parallel_layers_per_stage"] == 4  # 32 layers / (4 x 2)


@pytest.mark.parametrize(
    ("schedule", "v", "target", "message"),
    [
        (
            "dualpipe",
            1,
            "torchtitan",
            "torchtitan cannot express pp(4) with the dualpipe schedule (torch.distributed.pipelining "
            "runs 1F1B, GPipe, Interleaved1F1B, InterleavedZeroBubble (two or more stages per rank), "
            "ZBVZeroBubble and DualPipeV; not the bidirectional DualPipe with two copies of the "
            "weights; and it defers FSDP2's gradient reduce-scatter and reshard to the last backward, "
            "which is ZeRO-1); nearest: schedule 1f1b or gpipe or interleaved or zb-h1 or zb-v or dualpipev",
        ),
        (
            "zb-h1",
            1,
            "torchtitan",
            "torchtitan cannot express pp(4) with the zb-h1 schedule with virtual_stages(1)",
        ),
        (
            "zb-v",
            2,
            "megatron",
            "Megatron-LM cannot express pp(4) with the zb-v schedule (it runs 1F1B, or interleaved "
            "1F1B with virtual stages, no GPipe, zero-bubble or DualPipe schedule;",
        ),
        ("dualpipev", 2, "maxtext", "no 1F1B, zero-bubble or DualPipe schedule"),
        ("zb-h1", 1, "deepspeed", "runs 1F1B only (no interleaving, zero-bubble or DualPipe"),
    ],
)
def test_exports_refuse_schedules_their_framework_does_not_run(schedule, v, target, message):
    """Each target refuses the schedules its framework lacks, with the framework's reason."""
    with pytest.raises(InvalidLayoutError, match=re.escape(message)):
        export_document(_doc(schedule, v), target)


@pytest.mark.parametrize(
    ("model", "cluster", "seqs", "choices"),
    [("llama70b", "h100-64", 64, {"pp": (4, 8)}), ("debug", "h100-16", 64, {"pp": (2, 4)})],
)
def test_cpsat_equals_enumerator_with_torchtitan_schedules(model, cluster, seqs, choices):
    """With torchtitan's schedules (zero bubble, ZB-V, DualPipeV among them) CP-SAT ranks what the
    exhaustive enumerator does, layout for layout; a zero-bubble schedule wins."""
    problem = Problem.build(
        load_model(model),
        resolve_cluster(cluster),
        Workload(global_batch_seqs=seqs, seq_len=4096, framework="torchtitan"),
    )
    runs = [
        solve(
            problem,
            SearchRequest(
                options=SearchOptions(choices=choices), top_k=3, target="torchtitan", method=m
            ),
        )
        for m in ("cpsat", "enumerate")
    ]
    proven, oracle = ([(e.layout, m["step"]) for e, m in zip(r.layouts, r.metrics)] for r in runs)
    assert proven == oracle and len(proven) == 3
    assert proven[0][0].schedule in ("zb-h1", "zb-v", "dualpipev")


def test_schedules_option_restricts_the_search_and_names_a_bad_value():
    """--schedules zb-v keeps pipelines to ZB-V; an unknown name exits 2 naming the option."""
    base = ["solve", "--model", "llama70b", "--cluster", "h100-64", "--seqs", "64"]
    r = runner.invoke(
        app, [*base, "--choices", "pp=4", "--schedules", "zb-v", "--format", "json", "--top", "2"]
    )
    assert r.exit_code == 0, r.output
    layouts = json.loads(r.stdout)["layouts"]
    assert [x["schedule"] for x in layouts] == ["zb-v", "zb-v"]
    bad = runner.invoke(app, [*base, "--schedules", "zb-h2"])
    assert bad.exit_code == 2
    assert "--schedules: unknown schedule 'zb-h2'" in bad.stderr


def test_main_job_keeps_its_answer_and_candidates():
    """llama70b on v5p-8192 (no export target: 1f1b and interleaved searched): 724,076 candidates and
    fsdp 1024 x tp 8 without a pipeline, 0.8085 s a step (0.8079 before the loss's passes were costed, 0.807 before GEMMs were costed from
    their shapes)."""
    r = runner.invoke(
        app, ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--format", "json"]
    )
    doc = json.loads(r.stdout)
    assert doc["solver"]["num_candidates"] == 724_076
    top = doc["layouts"][0]
    assert top["degrees"] == {"dp": 1, "fsdp": 1024, "tp": 8, "pp": 1, "cp": 1, "ep": 1, "etp": 1}
    assert top["schedule"] == "1f1b" and top["time_s"]["step"] == pytest.approx(0.8085, abs=1e-4)


def test_the_solve_table_and_the_estimate_name_a_schedule_that_is_not_the_plain_one():
    """Two layouts that differ only in schedule (1F1B and zero-bubble ZB-H1, one chunk a device) read apart:
    the K cell adds the schedule where it is not the one the chunk count implies, and estimate's header too."""
    from layoutsearch.report.render import _solve_row

    plain = estimate(LLAMA_H64, Layout(**PIPE))
    zb = estimate(LLAMA_H64, Layout(**PIPE, schedule="zb-h1"))
    assert _solve_row(1, plain)[4] == "16 x 1" and _solve_row(1, zb)[4] == "16 x 1 zb-h1"
    out = runner.invoke(
        app,
        ["estimate", "--model", "llama3-8b", "--cluster", "h100-64", "--seqs", "64"]
        + ["--layout", "fsdp=4,tp=4,pp=4", "--microbatches", "16", "--schedule", "gpipe"],
    ).stdout
    assert " | schedule gpipe" in out and " | schedule" not in out.replace(" | schedule gpipe", "")


def test_the_fill_and_the_drain_cross_every_chunk_boundary():
    """The fill's critical path: p - 1 sends with one chunk a device, p v - 1 interleaved (4 stages x 3 chunks:
    11), 2 (p - 1) for ZB-V's V (its turn stays on the last device); no pipeline, none. Llama 3 8B on 64 H100s,
    pp 4 over InfiniBand with 8 microbatches under Megatron: 2 x 3 sends of fill and drain and 8 x 2 of 1F1B's
    steady state (its exchanges block: tests/test_pipeline_sends.py) with one chunk, 2 x 7 and 2 x 15 with 2
    and 4 chunks (their steady state overlapped): 22 : 14 : 30 (3 : 7 : 15 before the steady state was
    costed)."""
    codes = np.array([SCHEDULE_CODES[s] for s in ("1f1b", "interleaved", "zb-v", "1f1b")])
    hops = pipeline.fill_hops_array(np.array([4, 4, 4, 1]), np.array([1, 3, 2, 1]), codes)
    assert hops.tolist() == [3.0, 11.0, 6.0, 0.0]
    problem = Problem.build(
        load_model("llama3-8b"),
        resolve_cluster("h100-64"),
        Workload(global_batch_seqs=128, seq_len=4096, framework="megatron"),
    )

    def sends(v: int) -> float:
        layout = Layout(
            fsdp=16,
            pp=4,
            zero_stage=1,
            virtual_stages=v,
            num_microbatches=8,
            schedule="interleaved" if v > 1 else "1f1b",
        )
        est = estimate(problem, layout)
        assert dict(est.layout.placements)["pp"] == (("scale_out", 4),)
        return est.time_s["exposed_comm/pp"]

    assert sends(1) > 0 and sends(2) / sends(1) == pytest.approx(14 / 22, rel=1e-12)
    assert sends(4) / sends(1) == pytest.approx(30 / 22, rel=1e-12)
