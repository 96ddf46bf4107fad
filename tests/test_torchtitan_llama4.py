"""Llama 4 for torchtitan 0.2 (its llama4 model, models/llama4): the registration the export's header gives, the
chunks under FlexAttention and its refusal of context parallelism there, and what it cannot build (q/k L2
norms, widths its MLP rule cannot reach). tests/test_frameworks.py builds the registered model in torchtitan."""

from __future__ import annotations

import dataclasses

import pytest
from builders import exported, solve_doc

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.rules import violations
from layoutsearch.core.specs import Layout
from layoutsearch.export import context_for, export_document, target_rules
from layoutsearch.export.torchtitan import llama4_widths

LAYOUT = Layout(fsdp=32, tp=2, ep=16, zero_stage=3)


def maverick(seq: int, layout: Layout = LAYOUT) -> dict:
    return solve_doc("llama4-maverick", "h100-64", 64, seq, layout)


def test_maverick_is_written_as_a_llama4_registration():
    """At 4,096 tokens (under its 8,192-token chunks) SDPA, which context parallelism needs; NoPE every 4th layer,
    MoE every 2nd; multiple_of 8,192 with ffn_dim_multiplier 16,384 / 13,653 gives the dense layers' 16,384 and,
    halved over top-1 plus one shared expert, the experts' 8,192; Llama 4's router (sigmoid top-1 scores on the
    experts' input, no load-balancing bias); causal masks, not its flavors' document masks."""
    text = exported(maverick(4096), "torchtitan")
    assert 'name = "llama4"' in text and 'flavor = "llama4-maverick"' in text
    assert (
        "register it in torchtitan/models/llama4/__init__.py llama4_args as TransformerModelArgs(dim=5120, "
        "n_layers=48, n_heads=40, n_kv_heads=8, vocab_size=202048, multiple_of=8192, "
        "ffn_dim_multiplier=1.200029297590273, norm_eps=1e-05, rope_theta=500000.0, rope_scaling_args=None, "
        "moe_args=MoEArgs(num_experts=128, num_shared_experts=1, top_k=1, score_func='sigmoid', "
        "route_norm=False, score_before_experts=True, load_balance_coeff=None), interleave_moe_layer_step=2, "
        "every_n_layers_nope=4, fixed_attn_block_size=8192, attn_type='sdpa', attn_mask_type='causal')"
    ) in text
    assert "expert_parallel_degree = 16" in text


def test_chunks_shorter_than_the_sequence_run_flex_without_context_parallelism():
    """At 16,384 tokens the RoPE layers attend within two chunks: FlexAttention, written with cp 1; cp 2 is refused
    by rule torchtitan-chunk-cp with torchtitan's reason."""
    assert "attn_type='flex'" in exported(maverick(16384), "torchtitan")
    ctx = context_for(
        maverick(16384, Layout(fsdp=16, tp=2, ep=16, cp=2, zero_stage=3)), "torchtitan"
    )
    refused = [
        v.message
        for v in violations(ctx.problem, ctx.layout, target_rules("torchtitan"))
        if v.code == "torchtitan-chunk-cp"
    ]
    assert refused == [
        "torchtitan cannot express attention chunks shorter than the sequence with cp(2) (its llama4 model "
        "runs chunked attention in FlexAttention (attn_type flex), and its TransformerModelArgs refuse context "
        "parallelism with any attention but SDPA); nearest: cp 1 (--fix cp=1) or sequences no longer than the "
        "chunk (--seq-len), or export to maxtext"
    ]


def test_scout_is_refused_for_its_qk_l2_norms():
    """torchtitan's llama4 attention has no q/k norm, so Scout (use_qk_norm) is refused, naming it."""
    doc = solve_doc("llama4-scout", "h100-64", 64, 4096, LAYOUT)
    ctx = context_for(doc, "torchtitan")
    messages = [v.message for v in violations(ctx.problem, ctx.layout, target_rules("torchtitan"))]
    assert any(
        "torchtitan cannot express the q/k L2 norms of llama4-scout (its llama4 model's attention has no q/k "
        "norm (Llama 4 Scout's use_qk_norm))" in m
        for m in messages
    ), messages


def test_widths_its_mlp_rule_cannot_reach_are_one_line():
    """multiple_of = expert_d_ff reaches a dense width that is a multiple of it and at most (top_k + shared) times
    it: Maverick's 16,384 over 8,192 and top-1 plus one shared; 20,480 is not, and the export says so in one line
    naming the field."""
    model = load_model("llama4-maverick")
    assert llama4_widths(model) == (8192, 16384)
    assert llama4_widths(dataclasses.replace(model, d_ff=20480)) is None
    doc = solve_doc("llama4-maverick", "h100-64", 64, 4096, LAYOUT, model_changes={"d_ff": 20480})
    with pytest.raises(InvalidArgumentError) as err:
        export_document(doc, "torchtitan")
    assert str(err.value) == (
        "model: torchtitan's llama4 block cannot build d_ff 20480 beside expert_d_ff 8192 (its FeedForward rounds "
        "to multiple_of and its MoE layers divide by top_k + shared experts)"
    )
