"""Mixture-of-experts, latent-attention and multi-token-prediction exports (issue point 4).

The first part runs everywhere: the flags and keys each exporter writes equal the model's and the
layout's numbers, the checkers catch edited files, and a layout a target cannot express is refused
by the target's capability rules with the nearest option. The ``frameworks`` part loads the files
with the frameworks' own code, as tests/test_frameworks.py does for dense models (install them
with .ci/frameworks.sh): megatron-core 0.16.1's TransformerConfig / MLATransformerConfig built from the
exported flags through this file's own table of flag -> config field (MEGATRON_CONFIG_FLAGS; every
written flag is a config field, a GPTModel argument or a listed training-loop flag, or the test fails),
its parallel_state on a fake process group of the whole world, and a GPTModel with MoE layers; torchtitan 0.2.2's ConfigManager,
ParallelDims with its expert mesh, and its deepseek_v3 / qwen3 models; MaxText's pyconfig, mesh and
MoE models; DeepSpeed's config and its AutoEP validation.

Tiny models (custom ModelSpecs of catalogue entries; parameter counts from costs.params):
- TINY_DSV3: 4 layers (1 dense + 3 MoE), D 256, MLA r_q 64 r_kv 32 nope 32 rope 16 v 32 (head_dim 48),
  8 experts of 128, top-2, 1 shared expert of 128, one MTP module: 3,908,224 + MTP 1,101,152.
- TINY_MAVERICK: 4 layers alternating dense / MoE (layer_freq 2), top-1, 1 shared expert, capacity 1.25.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import replace

import pytest
import yaml
from builders import (
    DEEPSEEK_V3_H100_2048_SOLVE,
    DSV3_BRIDGE_LAYOUT,
    child_result,
    custom_doc,
    doc_llama8b,
    exported,
    maxtext_python,
    maxtext_script,
    maxtext_train_log,
    solve_doc,
    solve_export,
)

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.specs import Layout, MlaSpec, MoeSpec
from layoutsearch.costs.params import param_counts
from layoutsearch.export import check_export, context_for, export_document
from layoutsearch.export.megatron import eval_layer_freq, moe_layer_freq, parse_args

DSV3 = solve_doc(
    "deepseek-v3",
    "h100-2048",
    15360,
    4096,
    Layout(
        fsdp=64,
        pp=16,
        cp=2,
        ep=8,
        zero_stage=1,  # Megatron-FSDP (ZeRO-2/3) is not written with a pipeline
        num_microbatches=240,
        recompute="selective",
        first_stage_layers=2,
        last_stage_layers=3,
    ),
)
MIXTRAL = solve_doc("mixtral-8x7b", "h100-64", 512, 4096, Layout(fsdp=32, tp=2, ep=8, zero_stage=1))
MIXTRAL_DS = solve_doc(
    "mixtral-8x7b",
    "h100-64",
    512,
    4096,
    Layout(fsdp=32, tp=2, ep=8, zero_stage=1, sequence_parallel=False),  # AutoTP has no SP
    framework="deepspeed",
)  # DeepSpeed's own overlap: NCCL AllToAll dispatch
QWEN3 = solve_doc(
    "qwen3-30b-a3b", "h100-64", 256, 4096, Layout(fsdp=32, tp=2, ep=8, recompute="full")
)
QWEN3_ETP = solve_doc(
    "qwen3-30b-a3b", "h100-64", 256, 4096, Layout(fsdp=32, tp=2, ep=8, etp=2, recompute="full")
)
TINY_MLA = MlaSpec(
    q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32
)
TINY_DSV3 = dict(
    num_layers=4,
    d_model=256,
    d_ff=512,
    num_heads=4,
    num_kv_heads=4,
    head_dim=48,
    vocab_size=1024,
    moe=MoeSpec(
        num_experts=8,
        top_k=2,
        expert_d_ff=128,
        num_shared_experts=1,
        shared_d_ff=128,
        first_dense_layers=1,
    ),
    mla=TINY_MLA,
    mtp_layers=1,
)
TINY_MAVERICK = dict(
    num_layers=4,
    full_attention_layers=1,  # Maverick's NoPE layer every 4th
    nope_layers=1,
    d_model=128,
    d_ff=256,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    vocab_size=1024,
    moe=MoeSpec(
        num_experts=4,
        top_k=1,
        expert_d_ff=64,
        num_shared_experts=1,
        shared_d_ff=64,
        layer_freq=2,
        capacity_factor=1.25,
    ),
)
# Two-layer stand-ins for Mixtral (drop-and-pad, capacity factor 1.25) and Qwen3-MoE (dropless) that a v5p-8
# solves in a moment (TINY_MAVERICK's dense shape)
TINY_MIXTRAL = {
    **TINY_MAVERICK,
    "num_layers": 2,
    "full_attention_layers": 0,
    "nope_layers": 0,
    "moe": MoeSpec(num_experts=4, top_k=2, expert_d_ff=256, capacity_factor=1.25),
}
TINY_QWEN3 = {**TINY_MIXTRAL, "d_ff": 384, "moe": MoeSpec(num_experts=8, top_k=2, expert_d_ff=64)}
# The frameworks other than Megatron, as their refusals name them
NON_MEGATRON_TARGETS = (
    ("torchtitan", "torchtitan"),
    ("maxtext", "MaxText"),
    ("deepspeed", "DeepSpeed"),
)


def qwen3_norm_act_doc(**workload) -> dict:
    """Qwen3-30B-A3B's 256 sequences of 4096 tokens on 16 H100s at fsdp 16 x ep 8, ZeRO-1, recompute norm_act
    (``workload``: Workload fields changed, e.g. cuda_graphs)."""
    return solve_doc(
        "qwen3-30b-a3b",
        "h100-16",
        256,
        4096,
        Layout(fsdp=16, ep=8, zero_stage=1, recompute="norm_act"),
        **workload,
    )


def llama_full_iteration_graphs_doc() -> dict:
    """Llama 3 8B's 256 sequences of 4096 tokens on 64 H100s at fsdp 8 x tp 8, full recompute, one CUDA graph of
    the whole iteration (a dense model)."""
    return doc_llama8b(
        Layout(fsdp=8, tp=8, recompute="full"),
        cuda_graphs="full_iteration",
    )


def assert_fields(mapping: dict, expected: dict) -> None:
    """``mapping`` holds each key of ``expected`` with its value (other keys are not looked at)."""
    assert {k: mapping[k] for k in expected} == expected


def layer_freq(text: str) -> int | list[int]:
    """``--moe-layer-freq`` read without eval: an integer N (every N-th layer is MoE), or a list expression of the
    form the exporter writes, ``([0]*3+[1]*58)`` or ``(([0]*1+[1]*1)*2)``: [int, ...] lists, ``+`` joins, ``* N``
    repeats, parentheses group. Anything else is a ValueError."""
    text = str(text).strip()
    if text.isdigit():
        return int(text)
    tokens = re.findall(r"\d+|[\[\]()+*,]|\S", text)
    pos = 0

    def take(expected: str | None = None) -> str:
        nonlocal pos
        if pos == len(tokens) or (expected is not None and tokens[pos] != expected):
            raise ValueError(f"not a layer pattern: {text!r}")
        pos += 1
        return tokens[pos - 1]

    def number() -> int:
        token = take()
        if not token.isdigit():
            raise ValueError(f"not a layer pattern: {text!r}")
        return int(token)

    def atom() -> list[int]:
        if tokens[pos : pos + 1] == ["("]:
            take("(")
            value = expr()
            take(")")
            return value
        take("[")
        items = [number()]
        while tokens[pos : pos + 1] == [","]:
            take(",")
            items.append(number())
        take("]")
        return items

    def term() -> list[int]:
        value = atom()
        while tokens[pos : pos + 1] == ["*"]:
            take("*")
            value = value * number()
        return value

    def expr() -> list[int]:
        value = term()
        while tokens[pos : pos + 1] == ["+"]:
            take("+")
            value = value + term()
        return value

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"not a layer pattern: {text!r}")
    return value


# ----------------------------------------------------------------------------- Megatron flags
def test_megatron_deepseek_v3_flags_are_the_model_and_layout_numbers():
    args = parse_args(exported(DSV3, "megatron"))
    m = load_model("deepseek-v3")
    assert_fields(
        args,
        {
            "--num-experts": "256",
            "--moe-router-topk": "8",
            "--moe-ffn-hidden-size": "2048",
            "--moe-shared-expert-intermediate-size": "2048",
            "--moe-layer-freq": "([0]*3+[1]*58)",
            "--expert-model-parallel-size": "8",
            "--expert-tensor-parallel-size": "1",
        },
    )
    assert eval_layer_freq(args["--moe-layer-freq"], 61) == [
        int(m.is_moe_layer(i)) for i in range(61)
    ]
    assert (
        "# --mtp-num-layers 1: the MTP modules are counted in the parameters and the predicted time (a layer and "
        "an output-head pass each, on the last stage), not in the memory."
    ) in exported(DSV3, "megatron")
    assert_fields(
        args,
        {
            "--q-lora-rank": "1536",
            "--kv-lora-rank": "512",
            "--qk-head-dim": "128",
            "--qk-pos-emb-head-dim": "64",
            "--v-head-dim": "128",
            "--mtp-num-layers": "1",
            "--rope-type": "rope",
        },
    )
    for switch in (
        "--multi-latent-attention",
        "--qk-layernorm",
        "--no-rope-fusion",
        "--moe-grouped-gemm",
        "--moe-router-enable-expert-bias",
    ):
        assert args[switch] is True, switch
    # the megatron profile's DeepEP dispatch (a token crosses the NICs once per node), as the prediction assumed
    assert (
        args["--moe-token-dispatcher-type"],
        args["--moe-flex-dispatcher-backend"],
        args["--moe-router-score-function"],
        args["--moe-router-dtype"],
    ) == ("flex", "deepep", "sigmoid", "fp32")
    # dropless, no GQA with MLA, no top-1 pre-softmax; the rest of the layout as for dense models
    assert not {
        "--moe-expert-capacity-factor",
        "--group-query-attention",
        "--moe-router-pre-softmax",
    } & set(args)
    assert (
        args["--pipeline-model-parallel-size"],
        args["--context-parallel-size"],
        args["--micro-batch-size"],
        args["--decoder-first-pipeline-num-layers"],
        args["--decoder-last-pipeline-num-layers"],
    ) == ("16", "2", "1", "2", "3")


def test_megatron_writes_given_stages_that_the_virtual_stages_do_not_divide_as_a_layout():
    """Megatron-Bridge's DeepSeek-V3 split on pp=8 x 2 virtual stages (mapping rule 23): 8 layers on the first
    stage, 5 on the last (MTP module and loss beside them); --decoder-last-pipeline-num-layers needs a multiple of
    the virtual stages, so the export writes the chunks, the recipe's own layout, and no chunk count."""
    doc = solve_doc(
        "deepseek-v3",
        "b200-256",
        4096,
        4096,
        DSV3_BRIDGE_LAYOUT,
    )
    args = parse_args(exported(doc, "megatron"))
    assert args["--pipeline-model-parallel-layout"] == "Etttt|" + "tttt|" * 14 + "tmL"
    assert not {
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--num-virtual-stages-per-pipeline-rank",
        "--num-layers-per-virtual-pipeline-stage",
    } & set(args)


def test_megatron_layer_patterns_routers_and_capacity():
    """Megatron's integer --moe-layer-freq N makes layers 0, N, 2N... MoE; the engine's layer_freq N layers N-1,
    2N-1...: a list says it. Top-1 needs --moe-router-pre-softmax; a capacity factor pads to capacity."""
    maverick = load_model("llama4-maverick")
    assert moe_layer_freq(maverick) == "(([0]*1+[1]*1)*24)"
    assert eval_layer_freq("2", 48) != [
        int(maverick.is_moe_layer(i)) for i in range(48)
    ]  # why not "2"
    assert moe_layer_freq(load_model("mixtral-8x7b")) == 1
    doc = custom_doc(
        "llama4-maverick", "h100-8", 16, 256, Layout(fsdp=8, ep=4, zero_stage=1), **TINY_MAVERICK
    )
    args = parse_args(exported(doc, "megatron"))
    assert args["--moe-layer-freq"] == "(([0]*1+[1]*1)*2)" and args["--moe-router-topk"] == "1"
    assert args["--moe-router-pre-softmax"] is True and "--moe-router-score-function" not in args
    assert (
        args["--moe-expert-capacity-factor"],
        args["--moe-token-drop-policy"],
        args["--moe-pad-expert-input-to-capacity"],
    ) == ("1.25", "probs", True)
    assert (
        args["--moe-shared-expert-intermediate-size"],
        args["--moe-ffn-hidden-size"],
        args["--ffn-hidden-size"],
    ) == ("64", "64", "256")
    mix = parse_args(exported(MIXTRAL, "megatron"))
    assert (
        mix["--num-experts"],
        mix["--moe-router-topk"],
        mix["--moe-ffn-hidden-size"],
        mix["--expert-model-parallel-size"],
        mix["--expert-tensor-parallel-size"],
    ) == ("8", "2", "14336", "8", "1")
    assert not {
        "--moe-layer-freq",
        "--moe-shared-expert-intermediate-size",
        "--multi-latent-attention",
        "--moe-router-dtype",
        "--mtp-num-layers",
    } & set(mix)
    dense = parse_args(exported(doc_llama8b(Layout(fsdp=8, tp=8)), "megatron"))
    assert not [
        flag for flag in dense if flag.startswith(("--moe", "--expert", "--num-experts", "--mtp"))
    ]


def test_moe_layer_freq_reader():
    """layer_freq (how the frameworks tests below read --moe-layer-freq, without eval) gives each model's MoE layers
    and refuses anything but the list-pattern form."""
    for model_id in ("deepseek-v3", "llama4-maverick"):
        m = load_model(model_id)
        assert layer_freq(moe_layer_freq(m)) == [
            int(m.is_moe_layer(i)) for i in range(m.num_layers)
        ], model_id
    assert layer_freq("1") == 1 and layer_freq("[1,0]*2") == [1, 0, 1, 0]
    for bad in ("__import__('os')", "([0]*3+", "[0]*-1", "[0]**2", "(1)", "[0]*3+[1]*len('x')", ""):
        with pytest.raises(ValueError, match="not a layer pattern"):
            layer_freq(bad)


@pytest.mark.parametrize(
    "edit, problem",
    [
        (("--num-experts 256", "--num-experts 128"), "num_experts is 128"),
        (
            ("--moe-layer-freq '([0]*3+[1]*58)'", "--moe-layer-freq 1"),
            "--moe-layer-freq 1 makes layers",
        ),
        (
            ("--expert-model-parallel-size 8", "--expert-model-parallel-size 3"),
            "is not a multiple of --expert-model-parallel-size 3",
        ),
        (("  --no-rope-fusion\n", ""), "needs --no-rope-fusion"),
        (
            ("--moe-router-score-function sigmoid", "--moe-router-score-function softmax"),
            "needs --moe-router-score-function sigmoid",
        ),
        (("--mtp-num-layers 1", "--mtp-num-layers 2"), "--mtp-num-layers is 2"),
        (("--q-lora-rank 1536", "--q-lora-rank 1024"), "q_lora_rank is 1024"),
    ],
)
def test_megatron_checker_catches_edited_moe_flags(edit, problem):
    text = export_document(DSV3, "megatron")
    assert edit[0] in text
    problems = check_export("megatron", text.replace(*edit), DSV3)
    assert any(problem in p for p in problems), problems


# ----------------------------------------------------------------------------- torchtitan, MaxText, DeepSpeed
def test_torchtitan_expert_degrees_model_family_and_flavor():
    tt = tomllib.loads(exported(QWEN3, "torchtitan"))
    assert tt["model"] == {
        "name": "qwen3",
        "flavor": "30B-A3B",
        "hf_assets_path": tt["model"]["hf_assets_path"],
    }
    par = tt["parallelism"]
    assert (
        par["expert_parallel_degree"],
        par["expert_tensor_parallel_degree"],
        par["tensor_parallel_degree"],
        par["data_parallel_shard_degree"],
    ) == (8, 1, 2, 32)
    assert (
        tomllib.loads(exported(QWEN3_ETP, "torchtitan"))["parallelism"][
            "expert_tensor_parallel_degree"
        ]
        == 2
    )
    no_ep = solve_doc(
        "qwen3-30b-a3b", "h100-64", 256, 4096, Layout(fsdp=32, tp=2, etp=2, recompute="full")
    )
    par = tomllib.loads(exported(no_ep, "torchtitan"))[
        "parallelism"
    ]  # ep = 1: torchtitan's own TP on experts
    assert (par["expert_parallel_degree"], par["expert_tensor_parallel_degree"]) == (1, 1)
    dense = tomllib.loads(exported(doc_llama8b(Layout(fsdp=64)), "torchtitan"))
    assert (
        "expert_parallel_degree" not in dense["parallelism"] and dense["model"]["name"] == "llama3"
    )


def test_torchtitan_deepseek_v3_registers_sdpa_args_under_context_parallelism():
    """deepseek-v3 has the sizes of torchtitan's 671B flavor, which runs FlexAttention; with cp the file names the
    SDPA ModelArgs to register (with the model's norm eps), and without cp the flavor itself (without
    its MTP module, which torchtitan refuses)."""
    no_mtp = {"mtp_layers": 0}
    doc = solve_doc(
        "deepseek-v3",
        "h100-2048",
        15360,
        4096,
        Layout(dp=2, fsdp=512, cp=2, ep=8, recompute="full"),
        model_changes=no_mtp,
    )
    text = exported(doc, "torchtitan")
    tt = tomllib.loads(text)
    assert tt["model"]["name"] == "deepseek_v3" and tt["model"]["flavor"] == "deepseek-v3"
    assert "FlexAttention, which torchtitan refuses with context parallelism" in text
    assert (
        "DeepSeekV3ModelArgs(vocab_size=129280, dim=7168, inter_dim=18432, moe_inter_dim=2048, n_layers=61, "
        "n_dense_layers=3, n_heads=128, norm_eps=1e-06"
    ) in text
    assert (
        tt["parallelism"]["expert_parallel_degree"],
        tt["parallelism"]["data_parallel_replicate_degree"],
    ) == (8, 2)
    no_cp = solve_doc(
        "deepseek-v3",
        "h100-2048",
        16384,
        4096,
        Layout(dp=2, fsdp=1024, ep=8, recompute="full"),
        model_changes=no_mtp,
    )
    assert tomllib.loads(exported(no_cp, "torchtitan"))["model"]["flavor"] == "671B"


def test_maxtext_moe_keys_and_expert_axis():
    doc = solve_doc(
        "qwen3-30b-a3b", "v5p-64", 128, 4096, Layout(fsdp=16, tp=4, ep=8, etp=4, recompute="full")
    )
    mt = yaml.safe_load(exported(doc, "maxtext"))
    assert_fields(
        mt,
        {
            "decoder_block": "qwen3_moe",
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "base_moe_mlp_dim": 768,
            "megablox": True,
            "sparse_matmul": True,
            "capacity_factor": -1.0,
            "use_qk_norm": True,
        },
    )
    # the expert axis is carved out of fsdp: fsdp 16 = fsdp axis 2 x expert 8; etp = the tensor axis
    assert (
        mt["ici_fsdp_parallelism"] * mt["dcn_fsdp_parallelism"],
        mt["ici_expert_parallelism"] * mt["dcn_expert_parallelism"],
        mt["ici_tensor_parallelism"],
    ) == (2, 8, 4)
    # a capacity factor: MaxText's dense einsum path, which drops and pads to capacity (its sparse path ignores it)
    dropping = custom_doc(
        "mixtral-8x7b",
        "v5p-8",
        32,
        128,
        Layout(fsdp=8),
        **TINY_MIXTRAL,
    )
    mt = yaml.safe_load(exported(dropping, "maxtext"))
    assert (mt["megablox"], mt["sparse_matmul"], mt["capacity_factor"]) == (False, False, 1.25)
    for target, name, why in (
        ("torchtitan", "torchtitan", "its MoE routes dropless"),
        ("deepspeed", "DeepSpeed", "AutoEP routes dropless"),
    ):
        with pytest.raises(
            InvalidLayoutError,
            match=re.escape(
                f"{name} cannot express the capacity factor 1.25 of mixtral-8x7b (every expert padded to its "
                f"capacity) ({why}); nearest: a dropless model (moe capacity_factor null), or export to maxtext "
                f"or megatron or megatron-bridge"
            ),
        ):
            export_document(dropping, target)
    ds = solve_doc(
        "deepseek-v3",
        "v5p-2048",
        2048,
        4096,
        Layout(fsdp=256, tp=8, ep=64, etp=8, recompute="full"),
    )
    mt = yaml.safe_load(exported(ds, "maxtext"))
    assert_fields(
        mt,
        {
            "decoder_block": "deepseek",
            "first_num_dense_layers": 3,
            "shared_experts": 1,
            "routed_bias": True,
            "routed_score_func": "sigmoid",
            "attention_type": "mla",
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "mtp_num_layers": 1,
            "base_mlp_dim": 18432,
            "base_moe_mlp_dim": 2048,
        },
    )
    assert mt["ici_expert_parallelism"] * mt["dcn_expert_parallelism"] == 64
    assert mt["ici_fsdp_parallelism"] * mt["dcn_fsdp_parallelism"] == 4
    dense = yaml.safe_load(
        exported(solve_doc("llama3-8b", "v5p-64", 128, 4096, Layout(fsdp=64)), "maxtext")
    )
    assert "ici_expert_parallelism" not in dense and "num_experts" not in dense


def test_deepspeed_autoep_section():
    ds = json.loads(exported(MIXTRAL_DS, "deepspeed"))
    assert ds["expert_parallel"] == {
        "enabled": True,
        "autoep_size": 8,
        "expert_tensor_parallel_size": 1,
        "preset_model": "mixtral",
    }
    assert ds["tensor_parallel"] == {"autotp_size": 2} and ds["zero_optimization"]["stage"] == 1
    side = ds["_layoutsearch"]
    assert side["degrees"] == {"dp": 1, "fsdp": 32, "tp": 2, "pp": 1, "cp": 1, "ep": 8, "etp": 1}
    assert any("edp 8 x ep 8" in note for note in side["set_in_code"])
    ds3 = json.loads(
        exported(
            solve_doc(
                "deepseek-v3",
                "h100-2048",
                2048,
                4096,
                Layout(fsdp=2048, ep=64, recompute="full"),
                model_changes={"mtp_layers": 0},  # the Hugging Face code has no MTP: refused
                framework="deepspeed",
            ),
            "deepspeed",
        )
    )
    assert (
        ds3["expert_parallel"]["preset_model"] == "deepseek_v3"
        and ds3["zero_optimization"]["stage"] == 3
    )
    no_ep = json.loads(
        exported(
            solve_doc(
                "qwen3-30b-a3b", "h100-64", 256, 4096, Layout(fsdp=64), framework="deepspeed"
            ),
            "deepspeed",
        )
    )
    assert "expert_parallel" not in no_ep and any(
        "no expert parallelism" in n for n in no_ep["_layoutsearch"]["set_in_code"]
    )
    grok = json.loads(
        exported(
            solve_doc(
                "grok-1",
                "h100-1024",
                1024,
                4096,
                Layout(fsdp=1024, ep=8, recompute="full"),
                framework="deepspeed",
            ),
            "deepspeed",
        )
    )
    assert "preset_model" not in grok["expert_parallel"]
    # a prediction made with the megatron profile's DeepEP dispatch is one DeepSpeed cannot run; the nearest targets
    # are those that dispatch with DeepEP and build Mixtral (torchtitan's MoE models do not include it)
    with pytest.raises(
        InvalidLayoutError,
        match=r"DeepSpeed cannot express the DeepEP token dispatch with ep\(8\); "
        r"nearest: --no-deepep, or export to megatron or megatron-bridge$",
    ):
        export_document(MIXTRAL, "deepspeed")
    assert any("no preset for this architecture" in n for n in grok["_layoutsearch"]["set_in_code"])


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "target, model, cluster, batch, layout, message",
    [
        (
            "torchtitan",
            "qwen3-30b-a3b",
            "h100-64",
            256,
            Layout(fsdp=32, tp=2, recompute="full"),
            r"torchtitan cannot express etp\(1\) with ep\(1\) and tp\(2\) .*tensor-parallel over tp\); nearest: etp=2, or ep > 1",
        ),
        (
            "torchtitan",
            "qwen3-30b-a3b",
            "h100-64",
            256,
            Layout(fsdp=16, tp=4, ep=4, etp=2, recompute="full"),
            r"torchtitan cannot express etp\(2\) with ep\(4\) and tp\(4\) .*nearest: etp=1 or etp=4",
        ),
        (
            "torchtitan",
            "qwen3-30b-a3b",
            "h100-64",
            256,
            Layout(dp=64, ep=8, zero_stage=0, recompute="full"),
            r"torchtitan cannot express ep\(8\) x etp\(1\) = 8 expert devices, which do not divide the 1 devices its expert "
            r"groups can take \(fsdp\(1\) unsharded, so 1 x tp\(1\) x cp\(1\)\).*nearest: ep x etp dividing 1",
        ),
        (
            "torchtitan",
            "mixtral-8x7b",
            "h100-64",
            512,
            Layout(fsdp=64),
            r"torchtitan cannot express model mixtral-8x7b .*its MoE models are deepseek_v3, qwen3, llama4 and gpt_oss\); nearest: export to megatron",
        ),
        (
            "torchtitan-0.3",
            "qwen3-30b-a3b",
            "h100-64",
            256,
            Layout(fsdp=64),
            r"torchtitan cannot express model qwen3-30b-a3b .*export MoE models to torchtitan \(0.2\) or megatron",
        ),
        (
            "maxtext",
            "mixtral-8x7b",
            "v5p-128",
            256,
            Layout(fsdp=32, tp=4, ep=8),
            r"MaxText cannot express etp\(1\) with ep\(8\) and tp\(4\) \(it shards every expert's FFN over the tensor axis "
            r"\(etp = tp\)\); nearest: etp=4",
        ),
        (
            "maxtext",
            "mixtral-8x7b",
            "v5p-128",
            256,
            Layout(fsdp=128, ep=8, zero_stage=1),
            r"MaxText cannot express ep\(8\) .*nearest: ep x etp dividing 1, or zero_stage 3 so fsdp\(128\) shards",
        ),
        (
            "maxtext",
            "grok-1",
            "v5p-1024",
            1024,
            Layout(fsdp=1024, recompute="full"),
            r"MaxText cannot express model grok-1 .*MoE blocks are mixtral, qwen3_moe, deepseek and llama4",
        ),
        (
            "deepspeed",
            "mixtral-8x7b",
            "h100-64",
            512,
            Layout(fsdp=16, tp=4, ep=4, etp=4),
            r"DeepSpeed cannot express etp\(4\) with ep\(4\) and tp\(4\) \(AutoEP has no expert tensor parallelism yet.*"
            r"nearest: etp=1",
        ),
        (
            "deepspeed",
            "mixtral-8x7b",
            "h100-64",
            512,
            Layout(fsdp=16, tp=2, pp=2, ep=8, zero_stage=1, num_microbatches=4),
            r"DeepSpeed cannot express ep\(8\) with both tp\(2\) and pp\(2\) \(AutoEP's folding with AutoTP supports pp = 1 "
            r"only\); nearest: tp=1 or pp=1 with ep > 1",
        ),
    ],
)
def test_targets_refuse_moe_layouts_they_cannot_express(
    target, model, cluster, batch, layout, message
):
    with pytest.raises(InvalidLayoutError, match=message):
        export_document(solve_doc(model, cluster, batch, 4096, layout), target)


def test_megatron_expresses_every_folded_moe_layout():
    """Megatron-Core folds any ep x etp dividing a stage: etp without ep, etp other than tp, ep over replicas."""
    for layout in (
        Layout(fsdp=32, tp=2, etp=2, zero_stage=1),
        Layout(fsdp=16, tp=4, ep=4, etp=2, zero_stage=1),
        Layout(dp=64, ep=8, zero_stage=0),
    ):
        args = parse_args(
            exported(solve_doc("mixtral-8x7b", "h100-64", 512, 4096, layout), "megatron")
        )
        assert (
            int(args["--expert-model-parallel-size"]),
            int(args["--expert-tensor-parallel-size"]),
        ) == (
            layout.ep,
            layout.etp,
        )


@pytest.mark.parametrize(
    "target, model, cluster",
    [
        ("megatron", "deepseek-v3", "h100-256"),
        ("torchtitan", "qwen3-30b-a3b", "h100-64"),
        ("deepspeed", "mixtral-8x7b", "h100-64"),
        ("maxtext", "deepseek-v3", "v5p-256"),
    ],
)
def test_solve_export_on_moe_models(tmp_path, target, model, cluster):
    """`solve --export T -o F` on a MoE model: only T's expressible layouts are searched, and F passes T's rules."""
    doc, text = solve_export(model, cluster, target, tmp_path / f"layout-{target}", "--seqs", "512")
    assert check_export(target, text, doc) == []
    degrees = doc["layouts"][0]["degrees"]
    ctx = context_for(doc, target)
    assert (ctx.layout.ep, ctx.layout.etp) == (
        degrees["ep"],
        degrees["etp"],
    )  # the file's layout is the document's


# ----------------------------------------------------------------------------- frameworks: Megatron
# The exported flags read onto megatron-core by hand, one entry per flag the Megatron exporter can write (this is
# not Megatron-LM's parser: it knows only our flags, and says what each one sets). A config entry is
# flag -> (field, how): `how` is the value a switch sets (a bool) or the function that reads the flag's value.
def attn_backend(value: str):
    """--attention-backend's argparse type in Megatron's arguments.py: the AttnBackend member of that name."""
    from megatron.core.transformer.enums import AttnBackend

    return AttnBackend[value]


MEGATRON_CONFIG_FLAGS = {  # TransformerConfig fields
    "--num-layers": ("num_layers", int),
    "--hidden-size": ("hidden_size", int),
    "--ffn-hidden-size": ("ffn_hidden_size", int),
    "--num-attention-heads": ("num_attention_heads", int),
    "--num-query-groups": ("num_query_groups", int),
    "--kv-channels": ("kv_channels", int),
    "--normalization": ("normalization", str),
    "--norm-epsilon": ("layernorm_epsilon", float),
    "--attention-dropout": ("attention_dropout", float),
    "--hidden-dropout": ("hidden_dropout", float),
    "--swiglu": ("gated_linear_unit", True),  # and activation_func silu (megatron_config)
    "--disable-bias-linear": ("add_bias_linear", False),
    "--add-qkv-bias": ("add_qkv_bias", True),
    "--bf16": ("bf16", True),  # and params_dtype / pipeline_dtype bfloat16 (megatron_config)
    "--fp8-format": ("fp8", str),
    "--fp8-recipe": ("fp8_recipe", str),
    "--fp8-param-gather": ("fp8_param", True),
    "--multi-latent-attention": ("multi_latent_attention", True),  # and MLATransformerConfig
    "--qk-layernorm": ("qk_layernorm", True),
    "--qk-l2-norm": ("qk_l2_norm", True),
    "--no-rope-freq": ("no_rope_freq", int),
    "--no-rope-fusion": ("apply_rope_fusion", False),
    "--attention-backend": ("attention_backend", attn_backend),
    "--mtp-num-layers": ("mtp_num_layers", int),
    # mixture of experts
    "--num-experts": ("num_moe_experts", int),
    "--moe-router-topk": ("moe_router_topk", int),
    "--moe-ffn-hidden-size": ("moe_ffn_hidden_size", int),
    "--moe-shared-expert-intermediate-size": ("moe_shared_expert_intermediate_size", int),
    "--moe-shared-expert-gate": ("moe_shared_expert_gate", True),
    "--moe-layer-freq": ("moe_layer_freq", layer_freq),
    "--moe-grouped-gemm": ("moe_grouped_gemm", True),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", str),
    "--moe-flex-dispatcher-backend": ("moe_flex_dispatcher_backend", str),
    "--moe-enable-deepep": ("moe_enable_deepep", True),
    "--moe-router-dtype": ("moe_router_dtype", str),
    "--moe-router-score-function": ("moe_router_score_function", str),
    "--moe-router-enable-expert-bias": ("moe_router_enable_expert_bias", True),
    "--moe-router-pre-softmax": ("moe_router_pre_softmax", True),
    "--moe-expert-capacity-factor": ("moe_expert_capacity_factor", float),
    "--moe-token-drop-policy": ("moe_token_drop_policy", str),
    "--moe-pad-expert-input-to-capacity": ("moe_pad_expert_input_to_capacity", True),
    # parallelism, pipeline split, recompute
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", int),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", int),
    "--context-parallel-size": ("context_parallel_size", int),
    "--expert-model-parallel-size": ("expert_model_parallel_size", int),
    "--expert-tensor-parallel-size": ("expert_tensor_parallel_size", int),
    "--sequence-parallel": ("sequence_parallel", True),
    "--init-model-with-meta-device": ("init_model_with_meta_device", True),
    "--tp-comm-overlap": ("tp_comm_overlap", True),
    "--cross-entropy-loss-fusion": ("cross_entropy_loss_fusion", True),
    "--cross-entropy-fusion-impl": ("cross_entropy_fusion_impl", str),
    "--no-overlap-p2p-communication": ("overlap_p2p_comm", False),
    "--no-gradient-accumulation-fusion": ("gradient_accumulation_fusion", False),
    "--decoder-first-pipeline-num-layers": ("num_layers_in_first_pipeline_stage", int),
    "--decoder-last-pipeline-num-layers": ("num_layers_in_last_pipeline_stage", int),
    "--account-for-embedding-in-pipeline-split": ("account_for_embedding_in_pipeline_split", True),
    "--account-for-loss-in-pipeline-split": ("account_for_loss_in_pipeline_split", True),
    "--num-virtual-stages-per-pipeline-rank": ("virtual_pipeline_model_parallel_size", int),
    # layers per virtual stage: turned into the number of virtual stages in megatron_fields
    "--num-layers-per-virtual-pipeline-stage": ("virtual_pipeline_model_parallel_size", int),
    "--recompute-granularity": ("recompute_granularity", str),
    "--recompute-method": ("recompute_method", str),
    "--recompute-num-layers": ("recompute_num_layers", int),
    "--recompute-modules": (
        "recompute_modules",
        lambda value: value if isinstance(value, list) else [value],
    ),  # nargs +
    "--cuda-graph-impl": ("cuda_graph_impl", str),
    "--cuda-graph-scope": (
        "cuda_graph_scope",
        lambda value: value if isinstance(value, list) else [value],
    ),  # nargs +
}
MEGATRON_MLA_FLAGS = {  # MLATransformerConfig's own fields; with --multi-latent-attention only
    "--q-lora-rank": ("q_lora_rank", int),
    "--kv-lora-rank": ("kv_lora_rank", int),
    "--qk-head-dim": ("qk_head_dim", int),
    "--qk-pos-emb-head-dim": ("qk_pos_emb_head_dim", int),
    "--v-head-dim": ("v_head_dim", int),
    "--rope-type": ("rope_type", str),
    "--rotary-base": ("rotary_base", float),
}
MEGATRON_MODEL_FLAGS = {  # GPTModel arguments (pretrain_gpt.py passes them to the model, not to the config)
    "--max-position-embeddings": ("max_sequence_length", int),
    "--position-embedding-type": ("position_embedding_type", str),
    "--rotary-base": ("rotary_base", lambda value: int(float(value))),
    "--use-rope-scaling": ("rope_scaling", True),
    "--rope-scaling-factor": ("rope_scaling_factor", float),
    "--untie-embeddings-and-output-weights": ("share_embeddings_and_output_weights", False),
}
# switches whose absence is a setting the checks depend on: Megatron fuses RoPE unless told --no-rope-fusion (which
# the exporter writes because MLA's fused RoPE is YaRN only) and ties the embeddings unless told to untie them
MEGATRON_ABSENT = {
    "--no-rope-fusion": ("apply_rope_fusion", True),
    "--untie-embeddings-and-output-weights": ("share_embeddings_and_output_weights", True),
}
# --group-query-attention is the switch under which Megatron reads --num-query-groups (mapped above)
MEGATRON_PAIRED = {"--group-query-attention": "--num-query-groups"}
# the training loop's flags (data, batch, optimizer, data-parallel wrapper, checkpoints): no config field or model
# argument; the tests check them against the layout (or dense tests do, through megatron-core's batch calculator)
MEGATRON_TRAINING_FLAGS = {
    "--seq-length",
    "--micro-batch-size",
    "--global-batch-size",
    "--use-distributed-optimizer",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--num-distributed-optimizer-instances",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--ckpt-format",
    "--grad-reduce-in-bf16",
    "--use-precision-aware-optimizer",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
}


def _read_flags(flags: dict, table: dict) -> dict:
    out = {}
    for flag, (name, how) in table.items():
        if flag not in flags:
            if flag in MEGATRON_ABSENT and MEGATRON_ABSENT[flag][0] == name:
                out[name] = MEGATRON_ABSENT[flag][1]
            continue
        value = flags[flag]
        if isinstance(how, bool):
            if value is not True:
                raise ValueError(f"{flag} is a switch, but the file gives it {value!r}")
            out[name] = how
        else:
            if value is True:
                raise ValueError(f"{flag} needs a value")
            out[name] = how(value)
    return out


def megatron_fields(text: str) -> tuple[dict, dict, set]:
    """The exported MEGATRON_ARGS (read by the exporter's own parse_args) as megatron-core config fields, GPTModel
    arguments and the training-loop flags. A flag that none of the tables above knows is a ValueError."""
    flags = parse_args(text)
    mla = flags.get("--multi-latent-attention") is True
    tables = [MEGATRON_CONFIG_FLAGS] + ([MEGATRON_MLA_FLAGS] if mla else [])
    known = set().union(*tables, MEGATRON_MODEL_FLAGS, MEGATRON_PAIRED, MEGATRON_TRAINING_FLAGS)
    unknown = sorted(set(flags) - known)
    if unknown:
        raise ValueError(
            f"flags that are no megatron-core config field, GPTModel argument or listed training-loop flag: {unknown}"
        )
    for switch, paired in MEGATRON_PAIRED.items():
        if (switch in flags) != (paired in flags):
            raise ValueError(
                f"{paired} is read only under {switch}: the file has one without the other"
            )
    fields = {}
    for table in tables:
        fields.update(_read_flags(flags, table))
    if "--num-layers-per-virtual-pipeline-stage" in flags:
        fields["virtual_pipeline_model_parallel_size"] = (
            fields["num_layers"]
            // fields["pipeline_model_parallel_size"]
            // fields["virtual_pipeline_model_parallel_size"]
        )
    return fields, _read_flags(flags, MEGATRON_MODEL_FLAGS), set(flags) & MEGATRON_TRAINING_FLAGS


def _admits(annotation, value) -> bool:
    """Whether a megatron-core field's annotation (int, float, str, bool, Optional, Union, Literal, List) admits a
    value read from a flag."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_admits(arg, value) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_admits(args[0], item) for item in value)
    if annotation is type(None):
        return value is None
    if annotation in (int, float):
        return isinstance(value, (int, float) if annotation is float else int) and not isinstance(
            value, bool
        )
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def megatron_config(text: str, **overrides):
    """megatron-core's TransformerConfig, or MLATransformerConfig under --multi-latent-attention, from the exported
    flags (its __post_init__ checks heads, MoE, MLA, the pipeline), with the GPTModel arguments and the training-loop
    flags. Each value must be one the field's annotation admits (Literal choices included)."""
    import typing

    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    tc = pytest.importorskip("megatron.core.transformer.transformer_config")

    fields, model, training = megatron_fields(text)
    cls = tc.MLATransformerConfig if fields.get("multi_latent_attention") else tc.TransformerConfig
    hints = typing.get_type_hints(cls)
    for name, value in fields.items():
        if name not in hints:
            raise ValueError(f"{name} is no field of megatron-core's {cls.__name__}")
        if not _admits(hints[name], value):
            raise ValueError(
                f"{name} = {value!r}: megatron-core's {cls.__name__}.{name} is {hints[name]}"
            )
    dtype = torch.bfloat16 if fields.get("bf16") else torch.float32
    derived = {"params_dtype": dtype, "pipeline_dtype": dtype}
    if fields.get("gated_linear_unit"):
        derived["activation_func"] = F.silu
    return cls(**{**fields, **derived, **overrides}), model, training


MEGATRON_PARALLEL_STATE = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    a, world = json.loads(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    from megatron.core import parallel_state as ps
    ps.initialize_model_parallel(
        tensor_model_parallel_size=a["tp"], pipeline_model_parallel_size=a["pp"], context_parallel_size=a["cp"],
        expert_model_parallel_size=a["ep"], expert_tensor_parallel_size=a["etp"],
        num_distributed_optimizer_instances=a["instances"], create_gloo_process_groups=False)
    print("RESULT " + json.dumps({"dp": ps.get_data_parallel_world_size(), "ep": ps.get_expert_model_parallel_world_size(),
                                  "etp": ps.get_expert_tensor_parallel_world_size(),
                                  "edp": ps.get_expert_data_parallel_world_size()}))
""")


@pytest.mark.frameworks
def test_megatron_flag_tables_name_megatron_core_fields():
    """Every field and GPTModel argument the tables above name exists in the installed megatron-core, and no
    training-loop flag is also mapped."""
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    import dataclasses
    import inspect

    from megatron.core.models.gpt import GPTModel

    base = {f.name for f in dataclasses.fields(tc.TransformerConfig)}
    mla = {f.name for f in dataclasses.fields(tc.MLATransformerConfig)} - base
    assert {name for name, _ in MEGATRON_CONFIG_FLAGS.values()} <= base
    assert {name for name, _ in MEGATRON_MLA_FLAGS.values()} <= mla
    assert {name for name, _ in MEGATRON_MODEL_FLAGS.values()} <= set(
        inspect.signature(GPTModel.__init__).parameters
    )
    assert not MEGATRON_TRAINING_FLAGS & (
        set(MEGATRON_CONFIG_FLAGS)
        | set(MEGATRON_MLA_FLAGS)
        | set(MEGATRON_MODEL_FLAGS)
        | set(MEGATRON_PAIRED)
    )


@pytest.mark.frameworks
def test_megatron_core_takes_the_flash_attention_backend():
    """--no-vendor-attention: the export writes --attention-backend flash, which megatron-core's TransformerConfig
    takes as AttnBackend.flash (FlashAttention instead of Transformer Engine's cuDNN kernel)."""
    pytest.importorskip("megatron.core.transformer.transformer_config")
    from megatron.core.transformer.enums import AttnBackend

    doc = doc_llama8b(Layout(fsdp=8, tp=8), vendor_attention=False)
    config, _, _ = megatron_config(
        exported(doc, "megatron"), apply_rope_fusion=False
    )  # (fused RoPE needs TE)
    assert config.attention_backend is AttnBackend.flash


@pytest.mark.frameworks
def test_megatron_core_takes_the_norm_act_recompute_modules():
    """recompute norm_act: the export writes --recompute-granularity selective --recompute-modules layernorm moe_act,
    which megatron-core's TransformerConfig takes (moe_act needs the grouped GEMM the export also asks for)."""
    pytest.importorskip("megatron.core.transformer.transformer_config")
    doc = qwen3_norm_act_doc()
    config, _, _ = megatron_config(exported(doc, "megatron"), apply_rope_fusion=False)
    assert (config.recompute_granularity, config.recompute_modules, config.moe_grouped_gemm) == (
        "selective",
        ["layernorm", "moe_act"],
        True,
    )


def test_cuda_graphs_are_written_by_megatron_and_refused_elsewhere():
    """--cuda-graphs scoped -> Transformer Engine graphs of the attention, the router and its preprocessing;
    full_iteration -> MCore's whole-iteration graph, on a dense model or a drop-and-pad MoE. Megatron refuses a
    full-iteration graph of a dropless MoE (the dispatcher syncs with the host each layer) and scoped graphs beside
    full recompute; torchtitan, MaxText and DeepSpeed write no CUDA graphs."""
    scoped = qwen3_norm_act_doc(cuda_graphs="scoped")
    args = parse_args(exported(scoped, "megatron"))
    assert (args["--cuda-graph-impl"], args["--cuda-graph-scope"]) == (
        "transformer_engine",
        ["attn", "moe_router", "moe_preprocess"],
    )
    dense = llama_full_iteration_graphs_doc()
    args = parse_args(exported(dense, "megatron"))
    assert (args["--cuda-graph-impl"], args["--cuda-graph-scope"]) == ("local", "full_iteration")
    assert "--cuda-graph-impl" not in parse_args(
        exported(doc_llama8b(Layout(fsdp=8, tp=8)), "megatron")
    )
    full = solve_doc(
        "qwen3-30b-a3b",
        "h100-16",
        256,
        4096,
        Layout(fsdp=16, ep=8, zero_stage=1, recompute="full"),
        cuda_graphs="full_iteration",
    )
    with pytest.raises(
        InvalidLayoutError,
        match=re.escape(
            "Megatron-LM cannot express a full-iteration CUDA graph of the dropless MoE qwen3-30b-a3b (its token "
            "dispatcher copies the token counts to the host in every MoE layer, which a graph cannot capture); "
            "nearest: --cuda-graphs scoped, or a capacity factor (drop and pad)"
        ),
    ):
        export_document(full, "megatron")
    scoped_full = solve_doc(
        "qwen3-30b-a3b",
        "h100-16",
        256,
        4096,
        Layout(fsdp=16, ep=8, zero_stage=1, recompute="full"),
        cuda_graphs="scoped",
    )
    with pytest.raises(
        InvalidLayoutError,
        match=r"scoped CUDA graphs with the recompute policy full .*nearest: "
        r"recompute none or selective or norm_act or mla_up_proj, or "
        r"--cuda-graphs none",
    ):
        export_document(scoped_full, "megatron")
    dense_scoped = doc_llama8b(
        Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full"),
        cuda_graphs="scoped",
    )
    for target, name in NON_MEGATRON_TARGETS:
        with pytest.raises(
            InvalidLayoutError,
            match=f"{name} cannot express --cuda-graphs scoped; nearest: --cuda-graphs none, or export to megatron",
        ):
            export_document(dense_scoped, target)


def test_overlaps_the_prediction_assumed_are_exported_or_refused():
    """--ep-comm-overlap: Megatron writes --overlap-moe-expert-parallel-comm; torchtitan, MaxText and DeepSpeed have
    no such overlap and refuse an ep > 1 layout costed with it. --tp-comm-overlap: DeepSpeed's AutoTP cannot pipeline
    its collectives and refuses tp > 1 with it (torchtitan writes async TP, MaxText XLA's collective matmul)."""
    ep = solve_doc(
        "qwen3-30b-a3b",
        "h100-16",
        256,
        4096,
        Layout(fsdp=16, ep=8, zero_stage=3, recompute="full"),
        ep_comm_overlap=True,
        deepep=False,
    )
    assert parse_args(exported(ep, "megatron"))["--overlap-moe-expert-parallel-comm"] is True
    for target, name in NON_MEGATRON_TARGETS:
        with pytest.raises(
            InvalidLayoutError,
            match=re.escape(
                f"{name} cannot express the expert-parallel AllToAll overlap (--ep-comm-overlap) with ep(8); nearest: "
                f"--no-ep-comm-overlap, or export to megatron"
            ),
        ):
            export_document(ep, target)
    tp = doc_llama8b(
        Layout(dp=8, tp=8, num_microbatches=2),
        tp_comm_overlap=True,
    )
    with pytest.raises(
        InvalidLayoutError,
        match=re.escape(
            "DeepSpeed cannot express the TP communication overlap (--tp-comm-overlap) with tp(8) (AutoTP all-reduces "
            "after its GEMMs); nearest: --no-tp-comm-overlap, or export to maxtext or megatron or torchtitan "
            "or torchtitan-0.3"
        ),
    ):
        export_document(tp, "deepspeed")
    assert (
        tomllib.loads(exported(tp, "torchtitan"))["parallelism"]["enable_async_tensor_parallel"]
        is True
    )


@pytest.mark.frameworks
def test_megatron_core_takes_the_exported_cuda_graphs():
    """megatron-core's TransformerConfig builds from the scoped and full-iteration exports; with full recompute
    instead of norm_act its __post_init__ refuses the scoped graphs, as the export rule megatron-cuda-graphs does."""
    pytest.importorskip("megatron.core.transformer.transformer_config")
    from megatron.core.transformer.enums import CudaGraphScope

    doc = qwen3_norm_act_doc(cuda_graphs="scoped")
    config, _, _ = megatron_config(exported(doc, "megatron"), apply_rope_fusion=False)
    assert (config.cuda_graph_impl, config.cuda_graph_scope) == (
        "transformer_engine",
        [CudaGraphScope.attn, CudaGraphScope.moe_router, CudaGraphScope.moe_preprocess],
    )
    with pytest.raises(
        AssertionError, match="full recompute is only supported with full iteration CUDA graph"
    ):
        megatron_config(
            exported(doc, "megatron"),
            apply_rope_fusion=False,
            recompute_granularity="full",
            recompute_method="uniform",
            recompute_num_layers=1,
        )
    dense = llama_full_iteration_graphs_doc()
    config, _, _ = megatron_config(exported(dense, "megatron"), apply_rope_fusion=False)
    assert (config.cuda_graph_impl, config.cuda_graph_scope) == (
        "local",
        [CudaGraphScope.full_iteration],
    )


@pytest.mark.frameworks
def test_megatron_core_has_the_fields_the_bf16_state_flags_set():
    """Megatron-LM's arguments.py turns --grad-reduce-in-bf16 into DistributedDataParallelConfig.grad_reduce_in_fp32
    False, and --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 into the OptimizerConfig
    fields of those names (bf16 -> torch.bfloat16). megatron-core has them, and its OptimizerConfig refuses the
    precision-aware optimizer without the distributed optimizer, as the export rule does at ZeRO-0."""
    torch = pytest.importorskip("torch")
    ddp = pytest.importorskip("megatron.core.distributed.distributed_data_parallel_config")
    opt = pytest.importorskip("megatron.core.optimizer.optimizer_config")
    import dataclasses

    assert ddp.DistributedDataParallelConfig(grad_reduce_in_fp32=False).grad_reduce_in_fp32 is False
    fields = {f.name: f.default for f in dataclasses.fields(opt.OptimizerConfig)}
    assert (
        fields["use_precision_aware_optimizer"],
        fields["exp_avg_dtype"],
        fields["exp_avg_sq_dtype"],
    ) == (
        False,
        torch.float32,
        torch.float32,
    )
    with pytest.raises(AssertionError, match="only supported with distributed optimizer"):
        opt.OptimizerConfig(
            use_precision_aware_optimizer=True,
            use_distributed_optimizer=False,
            exp_avg_dtype=torch.bfloat16,
            exp_avg_sq_dtype=torch.bfloat16,
        )


@pytest.mark.frameworks
@pytest.mark.parametrize(
    "policy, modules",
    [("mla_up_proj", ["mla_up_proj"]), ("norm_mla_up_proj", ["layernorm", "mla_up_proj"])],
)
def test_megatron_core_takes_the_mla_up_proj_recompute_module(policy, modules):
    """recompute mla_up_proj on DeepSeek-V3: --recompute-granularity selective --recompute-modules mla_up_proj, which
    megatron-core's MLATransformerConfig takes (its __post_init__ refuses mla_up_proj without latent attention);
    norm_mla_up_proj (the DeepSeek-V3 report's RMSNorm and up-projection recompute) as layernorm mla_up_proj."""
    pytest.importorskip("megatron.core.transformer.transformer_config")
    doc = solve_doc(
        "deepseek-v3",
        "h100-2048",
        15360,
        4096,
        Layout(fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120, recompute=policy),
    )
    config, _, _ = megatron_config(exported(doc, "megatron"))
    assert (type(config).__name__, config.recompute_granularity, config.recompute_modules) == (
        "MLATransformerConfig",
        "selective",
        modules,
    )


def test_norm_mla_up_proj_is_written_as_layernorm_mla_up_proj_and_refused_beside_scoped_graphs():
    """The DeepSeek-V3 report's RMSNorm and up-projection recompute: --recompute-granularity selective
    --recompute-modules layernorm mla_up_proj. Beside scoped graphs the export refuses it: megatron-core 0.16.1's
    transformer_layer.py keeps a MoE layer's pre-MLP norm output when the router is graphed unless the dispatcher
    is alltoall (DeepEP's is flex), so the cost model's dropped norm would not be."""
    layout = Layout(
        fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120, recompute="norm_mla_up_proj"
    )
    args = parse_args(
        exported(solve_doc("deepseek-v3", "h100-2048", 15360, 4096, layout), "megatron")
    )
    assert (args["--recompute-granularity"], args["--recompute-modules"]) == (
        "selective",
        ["layernorm", "mla_up_proj"],
    )
    assert "--fp8-recipe" not in args  # bf16
    # fp8: megatron-core refuses layernorm (and moe_act) recompute under delayed scaling, --fp8-recipe's default
    # (written out for the per-tensor recipe otherwise)
    for policy, recipe in (("norm_mla_up_proj", "tensorwise"), ("mla_up_proj", "delayed")):
        fp8 = solve_doc(
            "deepseek-v3",
            "h800-2048",
            15360,
            4096,
            replace(layout, recompute=policy),
            precision="fp8",
        )
        assert parse_args(exported(fp8, "megatron")).get("--fp8-recipe") == recipe, policy
    scoped = solve_doc("deepseek-v3", "h100-2048", 15360, 4096, layout, cuda_graphs="scoped")
    with pytest.raises(
        InvalidLayoutError,
        match=r"scoped CUDA graphs with the recompute policy norm_mla_up_proj .*nearest: "
        r"recompute none or selective or norm_act or mla_up_proj, or --cuda-graphs none",
    ):
        export_document(scoped, "megatron")


@pytest.mark.frameworks
def test_megatron_core_accepts_the_deepseek_v3_solve(tmp_path):
    """The issue's Done-when: `layoutsearch solve --model deepseek-v3 --cluster h100-2048 --seqs 15360 --seq-len 4096
    --export megatron -o FILE` writes flags that are, each of them, a megatron-core config field, a GPTModel argument
    or a listed training-loop flag (megatron_fields), that build megatron-core's MLATransformerConfig (its
    __post_init__ checks MoE, MLA and the pipeline), and whose parallel sizes megatron-core's parallel_state lays out
    on a 2048-rank (fake) process group."""
    pytest.importorskip("megatron.core.transformer.transformer_config")
    from typer.testing import CliRunner

    from layoutsearch.cli import app

    out = tmp_path / "deepseek.sh"
    r = CliRunner().invoke(
        app,
        [*DEEPSEEK_V3_H100_2048_SOLVE, "--export", "megatron", "-o", str(out), "--format", "json"],
    )
    assert r.exit_code == 0, r.stderr
    doc, text = json.loads(r.stdout), out.read_text()
    cfg, model, training = megatron_config(text)
    lay = context_for(doc, "megatron").layout
    # Megatron-FSDP is refused with a pipeline, so the pp-16 winner holds ZeRO-1 (distributed optimizer); inside a
    # mixture of experts' 19% risk band it is the risk-free fsdp 128 x pp 16 x ep 8 with 120 microbatches (fsdp 64
    # while the band was 9% for every model, until 2026-12-07)
    assert (lay.pp, lay.fsdp, lay.dp, lay.zero_stage) == (16, 128, 1, 1)
    assert training == {
        "--seq-length",
        "--micro-batch-size",
        "--global-batch-size",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    }, training
    assert model == {
        "max_sequence_length": 4096,
        "position_embedding_type": "rope",
        "rotary_base": 10000,
        "share_embeddings_and_output_weights": False,
    }
    m, lay = load_model("deepseek-v3"), context_for(doc, "megatron").layout
    assert type(cfg).__name__ == "MLATransformerConfig"
    assert (
        cfg.num_moe_experts,
        cfg.moe_router_topk,
        cfg.moe_ffn_hidden_size,
        cfg.moe_shared_expert_intermediate_size,
        cfg.q_lora_rank,
        cfg.kv_lora_rank,
        cfg.qk_head_dim,
        cfg.qk_pos_emb_head_dim,
        cfg.v_head_dim,
        cfg.mtp_num_layers,
    ) == (256, 8, 2048, 2048, 1536, 512, 128, 64, 128, 1)
    assert (cfg.num_layers, cfg.hidden_size, cfg.ffn_hidden_size, cfg.num_attention_heads) == (
        m.num_layers,
        m.d_model,
        m.d_ff,
        m.num_heads,
    )
    assert cfg.moe_layer_freq == [int(m.is_moe_layer(i)) for i in range(61)]
    assert (
        cfg.expert_model_parallel_size,
        cfg.expert_tensor_parallel_size,
        cfg.tensor_model_parallel_size,
        cfg.pipeline_model_parallel_size,
        cfg.context_parallel_size,
    ) == (lay.ep, lay.etp, lay.tp, lay.pp, lay.cp)
    assert (
        cfg.moe_router_enable_expert_bias
        and cfg.moe_router_score_function == "sigmoid"
        and cfg.qk_layernorm
    )
    assert cfg.rope_type == "rope" and cfg.apply_rope_fusion is False and cfg.moe_grouped_gemm
    assert lay.ep > 1  # the solve chose expert parallelism; parallel_state must lay it out
    sizes = {
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "ep": lay.ep,
        "etp": lay.etp,
        "instances": int(parse_args(text).get("--num-distributed-optimizer-instances", 1)),
    }
    got = child_result([sys.executable, "-c", MEGATRON_PARALLEL_STATE, json.dumps(sizes), "2048"])
    assert got == {
        "dp": lay.data_units,
        "ep": lay.ep,
        "etp": lay.etp,
        "edp": 2048 // (lay.ep * lay.etp * lay.pp),
    }


@pytest.mark.frameworks
def test_megatron_core_rejects_what_the_flags_guard():
    """The same path is a real check: without --no-rope-fusion MLATransformerConfig refuses plain RoPE, an expert
    bias needs the sigmoid router, a top-1 softmax router needs pre-softmax (megatron-core's own messages); a
    dispatcher outside the field's choices, a flag the tables do not know and --num-query-groups without
    --group-query-attention are refused before; and parallel_state refuses an ep x etp x pp that does not divide the
    world."""
    pytest.importorskip("megatron.core.transformer.transformer_config")

    text = export_document(DSV3, "megatron")
    megatron_config(text)  # the unedited file is accepted
    for drop, match in (
        ("  --no-rope-fusion\n", "apply_rope_fusion for MLA only works with YARN RoPE"),
        ("  --moe-router-score-function sigmoid\n", "only supports sigmoid score function"),
    ):
        assert drop in text
        with pytest.raises(ValueError, match=match):
            megatron_config(text.replace(drop, ""))
    doc = custom_doc(
        "llama4-maverick", "h100-8", 16, 256, Layout(fsdp=8, ep=4, zero_stage=1), **TINY_MAVERICK
    )
    maverick = export_document(doc, "megatron")
    megatron_config(
        maverick, apply_rope_fusion=False
    )  # (fused RoPE without MLA needs Transformer Engine)
    assert "  --moe-router-pre-softmax\n" in maverick
    with pytest.raises(ValueError, match="Please use --moe-router-pre-softmax when topk is 1"):
        megatron_config(
            maverick.replace("  --moe-router-pre-softmax\n", ""), apply_rope_fusion=False
        )
    with pytest.raises(
        ValueError,
        match=r"moe_token_dispatcher_type = 'all2all': .*'allgather', 'alltoall', 'flex'",
    ):
        megatron_config(
            text.replace("--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type all2all")
        )
    with pytest.raises(
        ValueError, match="DeepEP backend is only supported with flex token dispatcher"
    ):
        megatron_config(
            text.replace(
                "--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type alltoall"
            ).replace("--moe-flex-dispatcher-backend deepep", "--moe-enable-deepep")
        )
    with pytest.raises(ValueError, match=r"no megatron-core config field.*\['--moe-expert-bias'\]"):
        megatron_config(
            text.replace("  --moe-router-enable-expert-bias\n", "  --moe-expert-bias\n")
        )
    with pytest.raises(
        ValueError, match="--num-query-groups is read only under --group-query-attention"
    ):
        megatron_config(
            maverick.replace("  --group-query-attention\n", ""), apply_rope_fusion=False
        )
    sizes = {"tp": 1, "pp": 16, "cp": 2, "ep": 3, "etp": 1, "instances": 1}
    run = subprocess.run(
        [sys.executable, "-c", MEGATRON_PARALLEL_STATE, json.dumps(sizes), "2048"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        run.returncode != 0
        and "is not divisible by expert_tensor_model_pipeline_parallel size" in run.stderr
    )


MEGATRON_MOE_BUILD = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch, torch.nn.functional as F
    torch.cuda.current_device = lambda: "cpu"  # MLA's RotaryEmbedding asks CUDA for its buffer's device (no parameters)
    torch.distributed.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    import megatron.core.transformer.multi_latent_attention as mla
    if not isinstance(mla.TELinear, type):  # without Transformer Engine the wheel stubs TELinear (a MagicMock)
        mla.HAVE_TE = False
    parallel_state.initialize_model_parallel(1, 1)
    (fields, model_args), vocab = json.loads(sys.argv[1]), int(sys.argv[3])  # megatron_fields of the exported file
    cls = MLATransformerConfig if fields.get("multi_latent_attention") else TransformerConfig
    # one CPU rank holds the whole model in fp32: no parallelism, SequentialMLP experts (grouped GEMM needs Transformer
    # Engine), the allgather dispatcher (alltoall creates CUDA streams), no fused kernels; none changes a parameter
    cfg = cls(**{**fields, "activation_func": F.silu if fields.get("gated_linear_unit") else F.gelu,
                 "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
                 "expert_model_parallel_size": 1, "expert_tensor_parallel_size": 1, "sequence_parallel": False,
                 "moe_grouped_gemm": False, "moe_token_dispatcher_type": "allgather", "apply_rope_fusion": False,
                 "gradient_accumulation_fusion": False, "use_cpu_initialization": True, "params_dtype": torch.float32,
                 "pipeline_dtype": None, "bf16": False, "virtual_pipeline_model_parallel_size": None,
                 "num_layers_in_first_pipeline_stage": None, "num_layers_in_last_pipeline_stage": None})
    block = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False, normalization=cfg.normalization)


    class CoreAttention(torch.nn.Module):  # parameter-free; MLA's k_channels/v_channels need Transformer Engine's
        def __init__(self, *args, **kwargs):
            super().__init__()


    if cfg.multi_latent_attention:
        for spec in block.layer_specs:
            spec.submodules.self_attention.submodules.core_attention = CoreAttention
    mtp = get_gpt_mtp_block_spec(cfg, block, use_transformer_engine=False) if cfg.mtp_num_layers else None
    model = GPTModel(config=cfg, transformer_layer_spec=block, vocab_size=vocab, mtp_block_spec=mtp, **model_args)
    count = lambda mod: sum(p.numel() for p in mod.parameters()) if mod is not None else 0
    layers = model.decoder.layers
    moe = [i for i, layer in enumerate(layers) if type(layer.mlp).__name__ == "MoELayer"]
    first = layers[moe[0]].mlp
    shared = first.shared_experts
    print("RESULT " + json.dumps({
        "layers": len(layers), "moe_layers": moe, "params": count(model), "mtp": count(getattr(model, "mtp", None)),
        "experts": len(first.experts.local_experts), "router": list(first.router.weight.shape),
        "expert_fc1": list(first.experts.local_experts[0].linear_fc1.weight.shape),
        "shared_fc1": list(shared.linear_fc1.weight.shape) if shared is not None else None,
        "capacity": cfg.moe_expert_capacity_factor, "attention": type(layers[0].self_attention).__name__}))
""")


@pytest.mark.frameworks
@pytest.mark.parametrize("case", ["deepseek_like", "maverick_like"])
def test_megatron_core_builds_the_engine_moe_model(case, tmp_path):
    """megatron-core builds a GPTModel with MoE layers (local spec, CPU, one gloo rank) from the exported flags with
    exactly the engine's parameter count, MTP module included: latent attention, a dense first layer, a shared expert
    and MTP (deepseek_like); alternating dense / MoE layers, top-1 routing, a shared expert and a capacity factor
    (maverick_like). The router has no score-correction bias here: Megatron keeps that one in a CUDA buffer."""
    pytest.importorskip("megatron.core.models.gpt")
    model_id, spec = (
        ("deepseek-v3", TINY_DSV3)
        if case == "deepseek_like"
        else ("llama4-maverick", TINY_MAVERICK)
    )
    doc = custom_doc(model_id, "h100-8", 16, 256, Layout(fsdp=8, ep=4, zero_stage=1), **spec)
    m = context_for(doc, "megatron").model
    fields, model_args, _ = megatron_fields(export_document(doc, "megatron"))
    got = child_result(
        [
            sys.executable,
            "-c",
            MEGATRON_MOE_BUILD,
            json.dumps([fields, model_args]),
            str(tmp_path / "rendezvous"),
            str(m.vocab_size),
        ]
    )
    counts = param_counts(m)
    moe = m.moe
    assert got["moe_layers"] == [i for i in range(m.num_layers) if m.is_moe_layer(i)]
    assert (
        got["layers"],
        got["experts"],
        got["router"],
        got["expert_fc1"],
        got["shared_fc1"],
        got["capacity"],
    ) == (
        m.num_layers,
        moe.num_experts,
        [moe.num_experts, m.d_model],
        [2 * moe.expert_d_ff, m.d_model],
        [2 * moe.num_shared_experts * moe.shared_d_ff, m.d_model],
        moe.capacity_factor,
    )
    assert got["params"] == counts["total"] + counts.get("mtp", 0) and got["mtp"] == counts.get(
        "mtp", 0
    )
    assert got["attention"] == ("MLASelfAttention" if m.mla else "SelfAttention")
    if case == "deepseek_like":
        assert (counts["total"], counts["mtp"]) == (3_908_224, 1_101_152)


# ----------------------------------------------------------------------------- frameworks: torchtitan
TORCHTITAN_MESH = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    p, world = json.loads(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    import torchtitan.distributed.parallel_dims as pd
    pd.device_type = "cpu"  # the fake process group lives on the CPU
    dims = pd.ParallelDims(world_size=world, **p)
    dims.build_mesh()  # unflattens the world into the dense and the sparse (expert) meshes and checks their sizes
    print("RESULT " + json.dumps({name: dims._meshes[name].size() for name in ("ep", "efsdp", "etp", "fsdp")}))
""")


def _torchtitan_job(text: str, tmp_path):
    manager = pytest.importorskip("torchtitan.config.manager")
    path = tmp_path / "job.toml"
    path.write_text(text)
    return manager.ConfigManager().parse_args([f"--job.config_file={path}"])


@pytest.mark.frameworks
@pytest.mark.parametrize("doc", [QWEN3, QWEN3_ETP], ids=["etp1", "etp_tp"])
def test_torchtitan_builds_the_expert_mesh(doc, tmp_path):
    """ConfigManager reads expert_parallel_degree / expert_tensor_parallel_degree and ParallelDims builds torchtitan's
    sparse mesh (efsdp x ep x etp) from them on a fake process group of the whole world."""
    job = _torchtitan_job(export_document(doc, "torchtitan"), tmp_path)
    p = job.parallelism
    dims = {
        "dp_replicate": p.data_parallel_replicate_degree,
        "dp_shard": p.data_parallel_shard_degree,
        "cp": p.context_parallel_degree,
        "tp": p.tensor_parallel_degree,
        "pp": p.pipeline_parallel_degree,
        "ep": p.expert_parallel_degree,
        "etp": p.expert_tensor_parallel_degree,
    }
    got = child_result(
        [
            sys.executable,
            "-c",
            TORCHTITAN_MESH,
            json.dumps(dims),
            str(doc["problem"]["num_devices"]),
        ]
    )
    lay = context_for(doc, "torchtitan").layout
    assert got == {
        "ep": lay.ep,
        "etp": lay.etp,
        "efsdp": lay.fsdp * lay.cp * lay.tp // (lay.ep * lay.etp),
        "fsdp": lay.fsdp * lay.cp,
    }


@pytest.mark.frameworks
def test_torchtitan_moe_flavor_tables_match_torchtitan():
    ds = pytest.importorskip("torchtitan.models.deepseek_v3")
    qwen3 = pytest.importorskip("torchtitan.models.qwen3")
    from layoutsearch.export import torchtitan

    for name, key in torchtitan.DEEPSEEK_V3_FLAVORS.items():
        a, moe = ds.deepseekv3_args[name], ds.deepseekv3_args[name].moe_args
        assert (
            a.vocab_size,
            a.dim,
            a.inter_dim,
            a.moe_inter_dim,
            a.n_layers,
            a.n_dense_layers,
            a.n_heads,
            moe.num_experts,
            moe.num_shared_experts,
            moe.top_k,
            a.q_lora_rank,
            a.kv_lora_rank,
            a.qk_nope_head_dim,
            a.qk_rope_head_dim,
            a.v_head_dim,
        ) == key, name
        assert (a.norm_eps, a.rope_theta) == (
            torchtitan.DEEPSEEK_V3_FIXED["norm_eps"],
            torchtitan.DEEPSEEK_V3_FIXED["rope_theta"],
        )
        assert (a.attn_type != "sdpa") == (name in torchtitan.DEEPSEEK_V3_FLEX), name
    for name, key in torchtitan.QWEN3_MOE_FLAVORS.items():
        a, moe = qwen3.qwen3_args[name], qwen3.qwen3_args[name].moe_args
        assert (
            a.moe_enabled
            and (
                a.vocab_size,
                a.head_dim,
                a.dim,
                a.n_layers,
                a.n_heads,
                a.n_kv_heads,
                a.hidden_dim,
                a.moe_inter_dim,
                moe.num_experts,
                moe.num_shared_experts,
                moe.top_k,
                a.enable_weight_tying,
            )
            == key
        ), name
        assert (a.rope_theta, a.norm_eps, a.attn_type) == (
            torchtitan.QWEN3_THETA[name],
            1e-6,
            "sdpa",
        ), name


@pytest.mark.frameworks
@pytest.mark.parametrize(
    "case", ["qwen3_flavor", "deepseek_v3_registration", "tiny_deepseek_registration"]
)
def test_torchtitan_builds_the_engine_moe_model(case, tmp_path):
    """The model torchtitan 0.2 builds for the exported TOML (its flavor, or the ModelArgs the header says to register,
    updated from the parsed job as its trainer does) has the engine's parameter count on the meta device, less the
    router bias, which torchtitan keeps as the expert_bias buffer."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchtitan.models.deepseek_v3")
    import copy
    import re

    from torchtitan.models.deepseek_v3 import DeepSeekV3ModelArgs
    from torchtitan.models.moe import MoEArgs
    from torchtitan.models.qwen3 import Qwen3ModelArgs
    from torchtitan.protocols.train_spec import get_train_spec

    doc = {
        "qwen3_flavor": QWEN3,
        "deepseek_v3_registration": solve_doc(  # without its MTP module, which torchtitan refuses
            "deepseek-v3",
            "h100-2048",
            15360,
            4096,
            Layout(dp=2, fsdp=512, cp=2, ep=8, recompute="full"),
            model_changes={"mtp_layers": 0},
        ),
        "tiny_deepseek_registration": custom_doc(
            "deepseek-v3",
            "h100-8",
            16,
            256,
            Layout(fsdp=8, ep=4),
            **{
                **TINY_DSV3,
                "moe": MoeSpec(
                    **{
                        **{
                            f: getattr(TINY_DSV3["moe"], f)
                            for f in (
                                "num_experts",
                                "top_k",
                                "expert_d_ff",
                                "num_shared_experts",
                                "shared_d_ff",
                                "first_dense_layers",
                            )
                        },
                        "router_bias": True,
                    }
                ),
                "mtp_layers": 0,  # torchtitan refuses the MTP module
            },
        ),
    }[case]
    text = export_document(doc, "torchtitan")
    job = _torchtitan_job(text, tmp_path)
    # the prediction's DeepEP dispatch (the megatron profile's); DeepEP's kernels need CUDA and do not change the
    # parameters, so the model is built with the standard all-to-all
    assert job.parallelism.expert_parallel_comm_backend == "deepep"
    job.parallelism.expert_parallel_comm_backend = "standard"
    spec = get_train_spec(job.model.name)
    if job.model.flavor in spec.model_args:
        args = copy.deepcopy(spec.model_args[job.model.flavor])
    else:
        registration = re.search(
            r"_args as ((?:DeepSeekV3|Qwen3)ModelArgs\(.*\))$", text, re.M
        ).group(1)
        args = eval(
            registration,
            {
                "DeepSeekV3ModelArgs": DeepSeekV3ModelArgs,  # noqa: S307
                "Qwen3ModelArgs": Qwen3ModelArgs,
                "MoEArgs": MoEArgs,
            },
        )
    args.update_from_config(job)
    with torch.device("meta"):
        model = spec.model_cls(args)
    m = context_for(doc, "torchtitan").model
    buffers = m.num_moe_layers * m.moe.num_experts if m.moe.router_bias else 0
    assert sum(p.numel() for p in model.parameters()) == param_counts(m)["total"] - buffers
    if (
        buffers
    ):  # (torchtitan's qwen3 flavors keep an expert_bias buffer for their own balancing as well)
        assert (
            sum(b.numel() for n, b in model.named_buffers() if n.endswith("expert_bias")) == buffers
        )
    assert {
        "qwen3_flavor": (job.model.name, job.model.flavor) == ("qwen3", "30B-A3B"),
        "deepseek_v3_registration": job.model.flavor == "deepseek-v3",
        "tiny_deepseek_registration": job.model.flavor == "deepseek-v3",
    }[case]


# ----------------------------------------------------------------------------- frameworks: MaxText
MAXTEXT_MOE = maxtext_script(
    """
    import jax
    from flax.core.spmd import logical_axis_rules
    from maxtext.utils import max_utils, maxtext_utils, model_creation_utils
    """,
    """
    mesh = maxtext_utils.get_mesh_from_config(cfg)
    # get_abstract_param leaves its logical-axis-rules context before jax.eval_shape runs; training runs
    # inside one, so the shapes are evaluated inside one here too
    with mesh, logical_axis_rules(cfg.logical_axis_rules):
        abstract = maxtext_utils.get_abstract_param(model_creation_utils.create_model(cfg, mesh), cfg)["params"]
    shapes = {"/".join(str(getattr(k, "key", k)) for k in p).removesuffix("/.value"): list(leaf.shape)
              for p, leaf in jax.tree_util.tree_leaves_with_path(abstract)}
    out.append({"params": max_utils.calculate_num_params_from_pytree(abstract), "shapes": shapes,
                "mesh": dict(zip(cfg.mesh_axes, mesh.devices.shape)), "experts": cfg.num_experts,
                "global": cfg.global_batch_size_to_train_on})
    """,
)


@pytest.mark.frameworks
def test_maxtext_builds_the_engine_moe_models(tmp_path):
    """MaxText's pyconfig, device mesh (with its expert axis) and MoE models from the exported overrides on 8 CPU
    devices: mixtral (with a capacity factor: the dense dropping path), qwen3_moe (with a tensor axis: etp = tp),
    deepseek (latent attention, a dense first layer, shared expert, router bias, MTP) and llama4 (MoE every 2nd
    layer beside a shared expert, a NoPE layer every 4th, 64-token chunks on the others, q/k L2 norms) blocks have
    exactly the engine's parameter count (MTP included)."""
    python = maxtext_python()
    docs = {
        "mixtral": custom_doc(
            "mixtral-8x7b",
            "v5p-8",
            32,
            128,
            Layout(fsdp=8, ep=2),
            **TINY_MIXTRAL,
        ),
        "qwen3_moe": custom_doc(
            "qwen3-30b-a3b",
            "v5p-8",
            32,
            128,
            Layout(fsdp=4, tp=2, ep=2, etp=2),
            **TINY_QWEN3,
        ),
        "deepseek": custom_doc(
            "deepseek-v3",
            "v5p-8",
            32,
            128,
            Layout(fsdp=8, ep=2),
            **{
                **TINY_DSV3,
                "num_layers": 3,
                "moe": replace(TINY_DSV3["moe"], router_bias=True),
            },
        ),
        "llama4": custom_doc(
            "llama4-maverick",
            "v5p-8",
            32,
            128,
            Layout(fsdp=8, ep=2),
            **{
                **TINY_MAVERICK,
                "qk_norm": "l2",
                "attention_chunk": 64,
                "moe": replace(TINY_MAVERICK["moe"], capacity_factor=None),
            },
        ),
    }
    paths = []
    for name, doc in docs.items():
        path = tmp_path / f"{name}.yml"
        path.write_text(export_document(doc, "maxtext"))
        paths.append(str(path))
    results = dict(zip(docs, child_result([python, "-c", MAXTEXT_MOE, *paths], timeout=900)))
    for name, doc in docs.items():
        got = results[name]
        assert "error" not in got, f"{name}: {got}"
        ctx = context_for(doc, "maxtext")
        m, lay = ctx.model, ctx.layout
        counts = param_counts(m)
        assert got["params"] == counts["total"] + counts.get("mtp", 0), name
        assert (got["mesh"]["expert"], got["mesh"]["fsdp"], got["mesh"]["tensor"]) == (
            lay.ep,
            lay.fsdp // lay.ep,
            lay.tp,
        ), name
        assert got["experts"] == m.moe.num_experts and got["global"] == 32, name
    qwen = results["qwen3_moe"]["shapes"]
    assert qwen["decoder/layers/moe_block/wi_0"] == [
        8,
        2,
        128,
        64,
    ]  # experts, scanned layers, D, F_e
    ds = results["deepseek"]["shapes"]
    assert ds["decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias"] == [
        8,
        2,
    ]  # the router bias, 2 MoE layers
    assert ds["decoder/dense_layers/self_attention/wq_a/kernel"] == [
        256,
        1,
        64,
    ]  # q_lora_rank, 1 dense layer


@pytest.mark.frameworks
def test_maxtext_moe_cpu_training_step(tmp_path):
    """One real MaxText training step of a qwen3_moe override (sparse matmul, 8 experts, top-2) on 8 CPU devices with
    synthetic data: finite loss near ln(vocab), the global batch's tokens. Without expert parallelism: MaxText's
    expert axis exchanges tokens with ragged-all-to-all, which XLA:CPU does not implement (the expert mesh is
    checked by test_maxtext_builds_the_engine_moe_models)."""
    python = maxtext_python()
    doc = custom_doc(
        "qwen3-30b-a3b",
        "v5p-8",
        32,
        128,
        Layout(fsdp=8, recompute="full"),
        **TINY_QWEN3,
    )
    path = tmp_path / "moe.yml"
    path.write_text(export_document(doc, "maxtext"))
    log = maxtext_train_log(python, path, tmp_path, "layoutsearch-moe")
    import re

    step = re.search(r"completed step: 0, .*total_weights: (\d+), loss: ([\d.naif]+)", log)
    assert step, log[-3000:]
    assert int(step.group(1)) == 32 * 128
    loss = float(step.group(2))
    assert math.isfinite(loss) and abs(loss - math.log(1024)) < 1.5, loss


# ----------------------------------------------------------------------------- frameworks: DeepSpeed
@pytest.mark.frameworks
def test_deepspeed_takes_the_autoep_section():
    """DeepSpeedConfig reads the JSON (batch assertion included), and AutoEP's own validation (parse_autoep_config,
    validate_autoep_config: folding spec, ETP, AutoTP with pipelines) accepts the expert_parallel section for the
    world, pp, tp and ZeRO stage of the layout; an etp of 2 or a pipeline beside AutoTP is refused by the same code."""
    pytest.importorskip("deepspeed.module_inject.auto_ep_config")
    from builders import deepspeed_config
    from deepspeed.module_inject.auto_ep_config import parse_autoep_config, validate_autoep_config

    for doc in (
        MIXTRAL_DS,
        solve_doc(  # without its MTP module, which DeepSpeed's Hugging Face model code lacks
            "deepseek-v3",
            "h100-2048",
            2048,
            4096,
            Layout(fsdp=2048, ep=64, recompute="full"),
            framework="deepspeed",
            model_changes={"mtp_layers": 0},
        ),
    ):
        cfg = json.loads(export_document(doc, "deepspeed"))
        lay = context_for(doc, "deepspeed").layout
        ds = deepspeed_config(cfg, lay.data_units)
        assert ds.train_batch_size == doc["problem"]["global_batch_seqs"]
        ep_cfg = parse_autoep_config(cfg["expert_parallel"])
        assert (ep_cfg.enabled, ep_cfg.autoep_size, ep_cfg.expert_tensor_parallel_size) == (
            True,
            lay.ep,
            lay.etp,
        )
        validate_autoep_config(
            ep_cfg,
            world_size=doc["problem"]["num_devices"],
            pp_size=lay.pp,
            tp_size=lay.tp,
            sp_size=1,
            zero_stage=cfg["zero_optimization"]["stage"],
        )
        assert ep_cfg.preset_model == cfg["expert_parallel"]["preset_model"]
    cfg = json.loads(export_document(MIXTRAL_DS, "deepspeed"))
    with pytest.raises(ValueError, match="expert_tensor_parallel_size=2 is reserved"):
        validate_autoep_config(
            parse_autoep_config({**cfg["expert_parallel"], "expert_tensor_parallel_size": 2}),
            world_size=64,
            pp_size=1,
            tp_size=2,
            sp_size=1,
            zero_stage=1,
        )
    with pytest.raises(ValueError, match="supports pp_size=1 only"):
        validate_autoep_config(
            parse_autoep_config(cfg["expert_parallel"]),
            world_size=64,
            pp_size=2,
            tp_size=2,
            sp_size=1,
            zero_stage=1,
        )
