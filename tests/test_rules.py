"""The rule registry is the one source of every hard rule: the check, the search space, the
infeasibility funnel and the exporters all read it."""

from dataclasses import replace

import numpy as np
import pytest

from layoutsearch.core import rules
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.export import export_document
from layoutsearch.frameworks import capabilities_of, megatron, megatron_bridge
from layoutsearch.report.output import solve_document
from layoutsearch.search import solve
from layoutsearch.search.explain import funnel
from layoutsearch.search.space import build_space

DEBUG_H16 = Problem.build("debug", "h100-16", Workload(global_batch_seqs=64, seq_len=1024))

# A layout breaking exactly one structural rule, per rule code (debug: 8 layers, 8 heads, 2 KV heads, d_ff 768).
BREAKS = {
    "product": Layout(fsdp=8),
    "tp-heads": Layout(fsdp=1, tp=16, zero_stage=0),
    "tp-ffn": Layout(fsdp=1, tp=16, zero_stage=0),
    "tp-kv-heads": Layout(fsdp=4, tp=6, zero_stage=3),
    "pp-layers": Layout(pp=16, num_microbatches=16, zero_stage=0),
    "schedule": Layout(fsdp=8, pp=2, num_microbatches=2, schedule="interleaved"),
    "dualpipe": Layout(fsdp=8, pp=2, num_microbatches=2, schedule="dualpipe"),
    "cp-seq": Layout(fsdp=1, cp=16, zero_stage=3),
    "whole-sequences": Layout(fsdp=16, num_microbatches=8),
    "pp-microbatches": Layout(fsdp=4, pp=4, num_microbatches=2),
    "interleave": Layout(
        fsdp=8, pp=2, virtual_stages=2, num_microbatches=3, schedule="interleaved"
    ),
    "zero-stage": Layout(fsdp=16, zero_stage=4),
    "host-offload": Layout(
        fsdp=16, recompute="qkv_proj_offloaded"
    ),  # on a GPU without host bandwidth
    "mla-up-proj": Layout(fsdp=16, recompute="mla_up_proj"),  # on a model without latent attention
    "norm-act": Layout(fsdp=16, recompute="norm_act"),  # on a dense model without latent attention
    # the expert degrees (Mixtral-8x7B: 8 experts of width 14336, on 16 or 12 GPUs)
    "ep-dense": Layout(fsdp=16, ep=2, zero_stage=1),
    "ep-experts": Layout(fsdp=16, ep=16, zero_stage=1),
    "etp-ffn": Layout(fsdp=16, etp=16, zero_stage=1),
    "ep-fold": Layout(dp=24, ep=8, etp=2, zero_stage=0),
    "ep-zero": Layout(dp=2, fsdp=8, ep=8, etp=2, zero_stage=1),
}
MIXTRAL_H16 = Problem.build("mixtral-8x7b", "h100-16", Workload(global_batch_seqs=64, seq_len=1024))


def test_every_structural_rule_is_checked_by_its_code():
    """check_layout reports each registry rule, by code, on a layout that breaks only that rule."""
    odd_seq = replace(DEBUG_H16, workload=Workload(global_batch_seqs=64, seq_len=1000))
    # 12 heads in 4 KV groups and d_ff 1536 on 24 devices: tp=6 divides the heads and d_ff, not the KV heads
    gqa = Problem.build(
        replace(DEBUG_H16.model, num_heads=12, num_kv_heads=4, d_ff=1536),
        "h100-24",
        DEBUG_H16.workload,
    )
    # 8 heads but d_ff 1000: tp=16 breaks both tp rules; check the ffn rule alone with 16 heads
    wide = replace(
        DEBUG_H16, model=replace(DEBUG_H16.model, num_heads=16, num_kv_heads=16, d_ff=1000)
    )
    batch48 = replace(DEBUG_H16, workload=Workload(global_batch_seqs=48, seq_len=1024))
    narrow_experts = replace(
        MIXTRAL_H16,
        model=replace(MIXTRAL_H16.model, moe=replace(MIXTRAL_H16.model.moe, expert_d_ff=1000)),
    )
    no_host = replace(
        DEBUG_H16,
        cluster=replace(
            DEBUG_H16.cluster,
            accelerator=replace(DEBUG_H16.cluster.accelerator, host_bytes_per_s_per_direction=None),
        ),
    )
    assert (
        check_layout(DEBUG_H16, BREAKS["host-offload"]) == []
    )  # the catalogue's H100 has its PCIe rate
    special = {
        "host-offload": no_host,
        "cp-seq": odd_seq,
        "tp-kv-heads": gqa,
        "tp-ffn": wide,
        "interleave": batch48,
        "ep-experts": MIXTRAL_H16,
        "etp-ffn": narrow_experts,
        "ep-zero": MIXTRAL_H16,
        "ep-fold": Problem.build(
            "mixtral-8x7b", "h100-24", Workload(global_batch_seqs=48, seq_len=1024)
        ),
    }
    for code, layout in BREAKS.items():
        found = [v.code for v in check_layout(special.get(code, DEBUG_H16), layout)]
        assert found == [code], (code, found)
    covered = set(BREAKS) | {"degree"}
    assert {r.code for r in rules.STRUCTURE} <= covered


def test_mla_up_proj_needs_latent_attention():
    """Megatron's mla_up_proj module recomputes latent attention's up-projections: a model without MLA is refused with
    the model named; DeepSeek-V3 takes it."""
    (v,) = check_layout(DEBUG_H16, BREAKS["mla-up-proj"])
    assert v.message == (
        "recompute mla_up_proj reruns latent attention's up-projections, but debug has no latent "
        "attention (Megatron refuses mla_up_proj without it)"
    )
    dsv3 = Problem.build(
        "deepseek-v3", "h100-2048", Workload(global_batch_seqs=15360, seq_len=4096)
    )
    assert [
        x.code
        for x in check_layout(
            dsv3,
            Layout(
                fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120, recompute="mla_up_proj"
            ),
        )
    ] == []


def test_messages_carry_the_numbers():
    """A violation names the values involved, e.g. tp(16) and num_heads(8)."""
    (v,) = check_layout(DEBUG_H16, BREAKS["tp-heads"])
    assert v.message == "tp(16) does not divide num_heads(8)"
    (v,) = check_layout(DEBUG_H16, BREAKS["product"])
    assert (
        v.message
        == "dp(1) x fsdp(8) x tp(1) x pp(1) x cp(1) = 8, but cluster h100-16 has 16 devices"
    )


def test_a_new_registry_rule_reaches_check_space_and_funnel(monkeypatch):
    """Adding one rule to the registry changes the check, the search space and the funnel alike."""
    no_tp = rules.Rule(
        code="test-no-tp",
        needs=frozenset({"tp"}),
        holds=lambda p, c: c["tp"] == 1,
        title=lambda p: "test: tp = 1",
        why=lambda p, c: f"test: tp({c['tp']}) > 1",
    )
    before = build_space(DEBUG_H16)
    assert (before.shapes.tp > 1).any()
    monkeypatch.setattr(rules, "STRUCTURE", rules.STRUCTURE + (no_tp,))
    space = build_space(DEBUG_H16)
    assert len(space.shapes.tp) and (space.shapes.tp == 1).all()
    assert [v.code for v in check_layout(DEBUG_H16, Layout(fsdp=8, tp=2))] == ["test-no-tp"]
    steps = {s["code"]: s for s in funnel(DEBUG_H16, space.rules)}
    assert steps["test-no-tp"]["rule"] == "test: tp = 1" and steps["test-no-tp"]["removed"] > 0


def test_export_limits_come_from_declared_capabilities(monkeypatch):
    """A target's capabilities restrict `solve --export` and make its exporter refuse, with one message."""
    problem = Problem.build("llama3-8b", "h100-64", Workload(global_batch_seqs=256, seq_len=4096))
    narrowed = replace(
        megatron.CAPABILITIES, zero_stages=(0, 3), why={"megatron-zero": "test limit"}
    )
    monkeypatch.setattr(megatron, "CAPABILITIES", narrowed)
    result = solve(problem, SearchRequest(top_k=3, target="megatron"))
    assert result.layouts and all(
        e.layout.zero_stage in (0, 3) or e.layout.fsdp * e.layout.cp == 1 for e in result.layouts
    )
    free = solve(problem, SearchRequest(top_k=1))
    assert free.layouts[0].layout.zero_stage == 1  # without the limit the winner is ZeRO-1
    doc = solve_document(problem, free)
    with pytest.raises(
        InvalidLayoutError,
        match=r"Megatron-LM cannot express ZeRO-1 \(test limit\); nearest: zero_stage 3",
    ):
        export_document(doc, "megatron")
    codes = [r.code for r in result.space.rules]
    assert "megatron-zero" in codes


def test_every_limit_word_entry_is_one_declared_limit():
    """limit_words.yaml holds words only for limits LIMITS declares (no orphan entry), each naming a
    Capabilities field that exists."""
    declared = {limit.code for limit in rules.LIMITS}
    assert set(rules.LIMIT_WORDS) <= declared
    assert {"cp-flavour", "recompute", "offload", "deepep", "capacity", "window"} <= set(
        rules.LIMIT_WORDS
    )
    fields = rules.Capabilities.__dataclass_fields__
    for code, words in rules.LIMIT_WORDS.items():
        assert (words.get("capability") or words.get("allowed")) in fields, code


def test_an_export_suggestion_follows_the_capabilities(monkeypatch):
    """The 'export to ...' of a feature's refusal lists the targets that declare the capability and build the
    model: one more target declaring TP overlap joins the list, with no word of the rule changed; for Mixtral,
    which torchtitan's models do not include, neither torchtitan target is suggested."""

    def nearest(model: str) -> str:
        problem = Problem.build(model, "h100-16", Workload(global_batch_seqs=64, seq_len=4096))
        problem = replace(problem, workload=replace(problem.workload, tp_comm_overlap=True))
        (rule,) = [
            r
            for r in rules.framework_rules(capabilities_of("deepspeed"))
            if r.code == "deepspeed-tp-overlap"
        ]
        return rule.why(problem, {"tp": 8}).split("nearest: ")[1]

    assert nearest("llama3-8b") == (
        "--no-tp-comm-overlap, or export to maxtext or megatron or torchtitan or torchtitan-0.3"
    )
    assert nearest("mixtral-8x7b") == "--no-tp-comm-overlap, or export to maxtext or megatron"
    monkeypatch.setattr(
        megatron_bridge,
        "CAPABILITIES",
        replace(megatron_bridge.CAPABILITIES, tp_comm_overlap=True),
    )
    assert nearest("llama3-8b") == (
        "--no-tp-comm-overlap, or export to maxtext or megatron or megatron-bridge or torchtitan "
        "or torchtitan-0.3"
    )


def test_framework_rules_are_vectorised_like_the_structural_ones():
    """Framework rules evaluate over candidate arrays (the search) and single layouts (the export) alike."""
    caps = rules.Capabilities(target="t", framework="T", context_parallel=False)
    (cp_rule,) = [r for r in rules.framework_rules(caps) if r.code == "t-cp"]
    cand = {"cp": np.array([1, 2, 4]), "fsdp": np.array([4, 2, 1]), "z": np.array([3, 3, 3])}
    assert cp_rule.mask(DEBUG_H16, cand).tolist() == [True, False, False]


# Each limit a named constructor declares (Limit.zero, .choice, .option) and the canonical forms
# (_canonical), with a layout that breaks it: its funnel title and refusal, pinned from the output of
# the tuples of lambdas they replaced (commit e88e131), word for word.
MOE_FLAGS_H16 = Problem.build(
    "mixtral-8x7b",
    "h100-16",
    Workload(
        global_batch_seqs=64,
        seq_len=1024,
        precision="fp8",
        deepep=True,
        fp8_dispatch=True,
        tp_comm_overlap=True,
        ep_comm_overlap=True,
    ),
)
CONSTRUCTED_LIMITS = [
    (
        "maxtext",
        "zero",
        DEBUG_H16,
        Layout(fsdp=16, zero_stage=2),
        "MaxText: ZeRO stage in {0, 1, 3}",
        "MaxText cannot express ZeRO-2 (it has no ZeRO-2: sharded gradients with replicated "
        "weights); nearest: zero_stage 1 or 3",
    ),
    (
        "maxtext",
        "replicas",
        DEBUG_H16,
        Layout(dp=2, fsdp=8, zero_stage=1),
        "MaxText: dp replicas of a ZeRO shard only with ZeRO {3}",
        "MaxText cannot express dp(2) copies of a ZeRO-1 shard over fsdp(8) (its ZeRO-1 "
        "(shard_optimizer_over_data) shards over all data replicas); nearest: dp=1, fsdp=16",
    ),
    (
        "megatron",
        "offload-zero",
        DEBUG_H16,
        Layout(fsdp=16, zero_stage=3, offload="optimizer"),
        "Megatron-LM: offload with ZeRO {1}",
        "Megatron-LM cannot express offload optimizer with ZeRO-3 (arguments.py pairs "
        "--optimizer-cpu-offload with --use-precision-aware-optimizer, which needs the distributed "
        "optimizer (ZeRO-1)); nearest: zero_stage 1",
    ),
    (
        "deepspeed",
        "cp-flavour",
        DEBUG_H16,
        Layout(fsdp=8, cp=2, cp_flavour="ring"),
        "DeepSpeed: cp flavour a2a where cp > 1",
        "DeepSpeed cannot express cp flavour ring (its sequence parallelism is Ulysses, which "
        "exchanges heads by all-to-all; it has no ring attention); nearest: cp flavour a2a",
    ),
    (
        "deepspeed",
        "recompute",
        DEBUG_H16,
        Layout(fsdp=16, recompute="norm_act"),
        "DeepSpeed: recompute none, selective, full",
        "DeepSpeed cannot express the recompute policy norm_act; nearest: recompute none or "
        "selective or full",
    ),
    (
        "deepspeed",
        "deepep",
        MOE_FLAGS_H16,
        Layout(fsdp=2, ep=8),
        "DeepSpeed: no DeepEP dispatch with ep > 1",
        "DeepSpeed cannot express the DeepEP token dispatch with ep(8); nearest: --no-deepep, or "
        "export to megatron or megatron-bridge",  # torchtitan has DeepEP but no Mixtral
    ),
    (
        "deepspeed",
        "fp8-dispatch",
        MOE_FLAGS_H16,
        Layout(fsdp=2, ep=8),
        "DeepSpeed: no fp8 token dispatch with ep > 1",
        "DeepSpeed cannot express the fp8 token dispatch with ep(8); nearest: --no-fp8-dispatch",
    ),
    (
        "deepspeed",
        "tp-overlap",
        MOE_FLAGS_H16,
        Layout(fsdp=2, tp=8),
        "DeepSpeed: no TP communication overlap",
        "DeepSpeed cannot express the TP communication overlap (--tp-comm-overlap) with tp(8) "
        "(AutoTP all-reduces after its GEMMs); nearest: --no-tp-comm-overlap, or export to "
        "maxtext or megatron",  # the targets with TP overlap that build Mixtral
    ),
    (
        "deepspeed",
        "ep-overlap",
        MOE_FLAGS_H16,
        Layout(fsdp=2, ep=8),
        "DeepSpeed: no expert-parallel AllToAll overlap",
        "DeepSpeed cannot express the expert-parallel AllToAll overlap (--ep-comm-overlap) with "
        "ep(8); nearest: --no-ep-comm-overlap, or export to megatron",
    ),
    (
        None,
        "zero-canonical",
        DEBUG_H16,
        Layout(fsdp=16, zero_stage=0),
        "ZeRO-0 without fsdp, ZeRO >= 1 with a shard group (each layout once)",
        "fsdp(16) x cp(1) with zero_stage 0 is enumerated as another layout",
    ),
    (
        None,
        "schedule-canonical",
        DEBUG_H16,
        Layout(fsdp=16, schedule="gpipe"),
        "without a pipeline the schedule is 1f1b (each layout once)",
        "pp(1) with the gpipe schedule is enumerated as 1f1b",
    ),
]


@pytest.mark.parametrize(
    "target, code, problem, layout, title, why",
    CONSTRUCTED_LIMITS,
    ids=[f"{c[0]}-{c[1]}" if c[0] else c[1] for c in CONSTRUCTED_LIMITS],
)
def test_constructed_limits_keep_their_titles_and_refusals(
    target, code, problem, layout, title, why
):
    found = rules.framework_rules(capabilities_of(target)) if target else rules.CANONICAL
    (rule,) = [r for r in found if r.code == (f"{target}-{code}" if target else code)]
    cand = rules.candidate_of(layout)
    assert not rule.mask(problem, cand).any()
    assert rule.title(problem) == title
    assert rule.why(problem, {k: int(v[0]) for k, v in cand.items()}) == why


def test_options_are_rules_too():
    """--fix/--choices/--only become registry rules that the space applies."""
    options = SearchOptions(fix={"tp": 2}, only=("fsdp", "tp"))
    space = build_space(DEBUG_H16, options)
    assert set(space.shapes.tp.tolist()) == {2} and set(space.shapes.pp.tolist()) == {1}
    assert {r.code for r in space.rules} >= {"option-tp", "option-pp", "option-recompute"}


def test_a_target_that_cannot_write_any_allowed_policy_is_infeasible_not_a_crash():
    """--recompute minimal,op with --export megatron: Megatron writes neither policy, so nothing is left to
    tabulate (fuzz seed 3 found an IndexError here); exit 1 naming the target's rule."""
    from typer.testing import CliRunner

    from layoutsearch.cli import app

    r = CliRunner().invoke(
        app,
        [
            "solve",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-8",
            "--seqs",
            "64",
            "--recompute",
            "minimal,op",
            "--export",
            "megatron",
        ],
    )
    assert r.exit_code == 1
    assert (
        "'Megatron-LM: recompute none, selective, full, norm_act, norm_moe, mla_up_proj, norm_mla_up_proj' (megatron-recompute)"
        in r.output
    )
