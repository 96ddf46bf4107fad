"""Llama 4's attention as costed: chunks on the RoPE layers (ModelSpec.attention_chunk), NoPE layers every k-th
(nope_layers), the weightless q/k L2 norm (qk_norm "l2"); refused by every export target where a chunk is shorter
than the sequence but by MaxText's llama4 block, written by Megatron-LM within one chunk."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import yaml
from builders import check_export, proven_top, solve_doc

from layoutsearch.core.catalogue import CatalogueError, load_model, model_from_dict
from layoutsearch.core.problem import Problem, SearchOptions, UncalibratedWarning
from layoutsearch.core.rules import violations
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs import flops, memory, params
from layoutsearch.export import context_for, export_document, target_rules
from layoutsearch.export.megatron import check, parse_args
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

SCOUT = load_model("llama4-scout")


def test_chunked_context_by_hand():
    """Causal: each whole chunk a causal square, c/2 keys per query; a partial last chunk of r adds r^2/2."""
    assert flops.chunked_attention_context(131072, 8192, True) == 4096
    assert flops.chunked_attention_context(131072, 8192, False) == 8192
    # 10,000 tokens: one chunk of 8,192 and one of 1,808: (8192^2 + 1808^2) / (2 x 10000)
    assert flops.chunked_attention_context(10000, 8192, True) == pytest.approx(3518.8864)
    assert flops.chunked_attention_context(10000, 8192, False) == pytest.approx(7037.7728)
    assert (
        flops.chunked_attention_context(8192, 8192, True) == 4096
    )  # one chunk: full causal attention
    assert flops.chunked_attention_context(4096, 8192, True) == 2048


def test_scout_attention_work_at_long_context():
    """Scout at 128k tokens: 36 chunked layers at 4,096 keys a query, 12 NoPE layers at 65,536: 19,456 on average,
    3.37x less than full attention in every layer; at 8,192 tokens the chunk is the sequence."""
    assert (SCOUT.attention_chunk, SCOUT.full_attention_layers, SCOUT.nope_layers) == (8192, 12, 12)
    assert flops.layer_attention_context(SCOUT, 131072, True) == 19456
    full = dataclasses.replace(SCOUT, attention_chunk=None, full_attention_layers=0)
    assert flops.layer_attention_context(full, 131072, True) == 65536
    assert flops.layer_attention_context(SCOUT, 8192, True) == 4096
    per_token = flops.attention_flops_per_token_per_layer(SCOUT, 131072, True)
    assert per_token == 2 * 19456 * (128 + 128) * 40


def test_nope_layers_and_l2_norms_in_the_element_wise_bytes():
    """Per token and layer (tp 1, bf16): q and k are (40 + 8) x 128 = 6,144 elements. The rotary embedding turns them
    in 36 of 48 layers (1.5 passes of a read and a write on average) and the L2 norm in every layer (2): 3.5 passes
    against a plain Llama block's 2, 1.5 x 6,144 x 2 bytes = 18,432 bytes more."""
    plain = dataclasses.replace(SCOUT, qk_norm="none", nope_layers=0)
    scout = flops.elementwise_bytes_per_token_per_layer(SCOUT, 1, False, 2)
    assert scout - flops.elementwise_bytes_per_token_per_layer(plain, 1, False, 2) == 18432
    assert flops.rotary_layer_share(SCOUT) == 0.75
    # no weights: the L2 norm adds no parameters; its input is kept for the backward as a head norm's is
    assert params.param_counts(SCOUT) == params.param_counts(plain)
    widths = memory.saved_tensor_widths(SCOUT, 1, False, 8192)
    assert widths["qk_norm_in"] == 6144
    assert memory.saved_tensor_widths(plain, 1, False, 8192)["qk_norm_in"] == 0


def test_megatron_writes_l2_norms_and_nope_within_one_chunk():
    """At 8,192 tokens (one chunk) Megatron-LM builds Scout: --qk-l2-norm and RoPE skipped every 4th layer; the
    checker notices either flag removed."""
    doc = solve_doc("llama4-scout", "h100-64", 64, 8192, Layout(fsdp=8, tp=8, ep=8, zero_stage=1))
    text = export_document(doc, "megatron")
    args = parse_args(text)
    assert args["--qk-l2-norm"] is True and args["--no-rope-freq"] == "4"
    ctx = context_for(doc, "megatron")
    assert check(text, ctx) == []
    problems = check(
        text.replace("  --qk-l2-norm\n", "").replace("--no-rope-freq 4", "--no-rope-freq 2"), ctx
    )
    assert "--qk-l2-norm is missing, the model has q/k L2 norms" in problems
    assert "--no-rope-freq is 2, the model has a NoPE layer every 4" in problems
    maverick = solve_doc(
        "llama4-maverick", "h100-64", 64, 8192, Layout(fsdp=8, tp=8, ep=8, zero_stage=1)
    )
    assert "--qk-l2-norm" not in parse_args(export_document(maverick, "megatron"))


@pytest.mark.parametrize("target", ["megatron", "megatron-bridge", "torchtitan-0.3", "deepspeed"])
def test_chunks_shorter_than_the_sequence_are_refused_by_the_gpu_targets(target):
    """16,384 tokens are two chunks: costed, and each target but MaxText and torchtitan (0.2) refuses the chunks by
    name with its reason (beside whatever else of the layout it cannot write); at 8,192 tokens no target's rules
    name them."""
    layout = Layout(fsdp=8, tp=8, ep=8, zero_stage=1)
    reasons = {
        "megatron": "megatron-core's attention has sliding windows (window_size), no chunked attention",
        "torchtitan-0.3": "its chunked attention (fixed_attn_block_size) is its llama4 model's, which the 0.3 "
        "export does not write",
        "deepspeed": "the Hugging Face model code skips masked chunks only under flex attention",
    }
    for seq, refused in ((16384, True), (8192, False)):
        ctx = context_for(solve_doc("llama4-scout", "h100-64", 64, seq, layout), target)
        messages = [v.message for v in violations(ctx.problem, ctx.layout, target_rules(target))]
        named = [m for m in messages if "the 8192-token attention chunks of llama4-scout" in m]
        assert bool(named) is refused, messages
        if refused:
            assert reasons[target.removesuffix("-bridge")] in named[0]
            assert "nearest: sequences no longer than the chunk (--seq-len)" in named[0]


def test_solve_costs_chunks_and_export_refuses_them(cli_main, tmp_path):
    """The CLI: a long-context solve is costed (exit 0); with --export megatron nothing is feasible (exit 1), and
    the explanation names the chunks and Megatron's reason."""
    argv = [
        "solve",
        "--model",
        "llama4-scout",
        "--cluster",
        "h100-64",
        "--seq-len",
        "16384",
        "--seqs",
        "64",
    ]
    assert cli_main(*argv)[0] == 0
    code, out, err = cli_main(*argv, "--export", "megatron", "-o", tmp_path / "m.sh")
    assert code == 1 and "Traceback" not in err
    assert (
        "Megatron-LM cannot express the 8192-token attention chunks of llama4-scout (megatron-core's attention "
        "has sliding windows (window_size), no chunked attention)" in out + err
    )
    assert not (tmp_path / "m.sh").exists()


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"sliding_window": 4096, "attention_chunk": 8192},
            "sliding_window(4096) and attention_chunk(8192): a model attends within a window or within chunks, "
            "not both",
        ),
        (
            {"full_attention_layers": 12, "attention_chunk": None},
            "full_attention_layers(12) without a sliding_window or an attention_chunk",
        ),
        (
            {"nope_layers": 5},
            "nope_layers(5): NoPE layers are every (num_layers / nope_layers)-th: a divisor of num_layers(48)",
        ),
        (
            {"nope_layers": 12, "learned_positions": 2048},
            "nope_layers(12): with learned positions no layer has a rotary embedding",
        ),
        ({"qk_norm": "l1"}, "qk_norm"),
        ({"attention_chunk": 0}, "attention_chunk"),
    ],
)
def test_model_files_with_impossible_attention_are_refused(change, message):
    data = {
        f.name: getattr(SCOUT, f.name)
        for f in dataclasses.fields(SCOUT)
        if f.name not in ("moe", "rope_scaling", "mla")
    }
    data["moe"] = dataclasses.asdict(SCOUT.moe)
    with pytest.raises(CatalogueError) as caught:
        model_from_dict({**data, **change}, "x", "x.yaml")
    assert message in str(caught.value)


def test_maxtext_writes_llama4_with_its_llama4_block():
    """MaxText's llama4 decoder block (configs/models/llama4-17b-16e.yml, -128e.yml) has Llama 4's attention and
    experts: Scout at 32,768 tokens on v5p is exported with chunks of 8,192 on the RoPE layers, NoPE every 4th
    layer, q/k L2 norms, one shared expert; Maverick's MoE every 2nd layer and no q/k norm; the checker notices an
    edited key; a Llama block with chunks (not Llama 4's experts) is refused by the block rule."""
    layout = Layout(fsdp=64, tp=4, ep=1, etp=4, zero_stage=3, recompute="full")
    doc = solve_doc("llama4-scout", "v5p-256", 256, 32768, layout)
    text = export_document(doc, "maxtext")
    cfg = yaml.safe_load(text)
    keys = (
        "decoder_block",
        "shared_experts",
        "interleave_moe_layer_step",
        "nope_layer_interval",
        "inhomogeneous_layer_cycle_interval",
        "chunk_attn_window_size",
        "use_qk_norm",
        "base_mlp_dim",
        "base_moe_mlp_dim",
    )
    assert [cfg[k] for k in keys] == ["llama4", 1, 1, 4, 4, 8192, True, 16384, 8192]
    assert (
        "temperature_tuning (Llama 4's query temperature scaling on its NoPE layers) is left"
        in text
    )
    edited = text.replace("chunk_attn_window_size: 8192", "chunk_attn_window_size: 4096")
    assert "chunk_attn_window_size = 4096, the model has 8192" in check_export(
        "maxtext", edited, doc
    )
    maverick = yaml.safe_load(
        export_document(solve_doc("llama4-maverick", "v5p-256", 256, 8192, layout), "maxtext")
    )
    assert [maverick[k] for k in keys[2:7]] == [2, 4, 4, 8192, False]
    chunked_llama = solve_doc(
        "llama3-8b",
        "v5p-256",
        256,
        32768,
        Layout(fsdp=256, zero_stage=3, recompute="full"),
        model_changes={"attention_chunk": 8192, "full_attention_layers": 8, "nope_layers": 8},
    )
    ctx = context_for(chunked_llama, "maxtext")
    messages = [v.message for v in violations(ctx.problem, ctx.layout, target_rules("maxtext"))]
    assert any(
        "MaxText cannot express model llama3-8b" in m and "NoPE layers" in m for m in messages
    )


def test_cpsat_equals_the_enumerator_on_chunked_attention():
    """Scout at 65,536 tokens on 64 H100s: the chunked layers' attention reaches CP-SAT through the same tables as
    the enumerator, which ranks the same top 3 (context-parallel and not)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncalibratedWarning)
        problem = Problem.build(
            "llama4-scout", "h100-64", Workload(global_batch_seqs=32, seq_len=65536)
        )
    space = build_space(problem, SearchOptions())
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, info = proven_top(space, tables, "step-time", 3)
    assert cps == enum and enum and info["status"] == "OPTIMAL"
