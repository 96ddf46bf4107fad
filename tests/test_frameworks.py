"""Exported configs loaded by the training frameworks' own code (CPU only; install with .ci/frameworks.sh).

Each test skips cleanly when its framework is not installed. MaxText needs Python >= 3.12 and
JAX, so it runs in its own interpreter: LAYOUTSEARCH_MAXTEXT_PYTHON, or the venv that
.ci/frameworks.sh builds under ~/.cache/layoutsearch/maxtext-venv. torchtitan 0.3 (the
torchtitan-0.3 target) cannot share an environment with 0.2.2: LAYOUTSEARCH_TORCHTITAN03_PYTHON, or
~/.cache/layoutsearch/torchtitan03-venv. Besides loading configs, the tests build each framework's
model from the exported file and compare its sizes and parameter count with costs.params, and run
one real CPU training step where the framework allows it (DeepSpeed, MaxText).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from builders import (
    DSV3_BRIDGE_LAYOUT,
    INTERLEAVED_LAYOUT,
    child_result,
    custom_doc,
    deepspeed_config,
    doc_llama8b,
    export_docs,
    fp4_doc,
    framework_python,
    maxtext_python,
    maxtext_script,
    maxtext_train_log,
    solve_doc,
    solve_export,
    torchtitan_degrees,
)

from layoutsearch.core.specs import Layout
from layoutsearch.export import export_document
from layoutsearch.export.megatron import parse_args

FSDP_TP, FSDP_TP_NO_SP, CP, HSDP = (
    export_docs()[k] for k in ("fsdp_tp", "fsdp_tp_no_sp", "cp", "hsdp")
)

pytestmark = pytest.mark.frameworks

INTERLEAVED = doc_llama8b(INTERLEAVED_LAYOUT)
# Megatron writes a pipeline with the distributed optimizer (Megatron-FSDP is not documented with pp)
INTERLEAVED_ZERO1 = doc_llama8b(dataclasses.replace(INTERLEAVED_LAYOUT, zero_stage=1))
KV_REPLICATED = solve_doc("llama70b", "h100-64", 256, 4096, Layout(fsdp=4, tp=16, recompute="full"))
ZERO1 = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, zero_stage=1, num_microbatches=2))
PIPE_1F1B = doc_llama8b(
    Layout(fsdp=1, dp=2, tp=8, pp=4, num_microbatches=8, zero_stage=1, sequence_parallel=False),
)


# ----------------------------------------------------------------------------- Megatron (megatron-core)
def megatron_config(doc: dict):
    """TransformerConfig (which validates heads, groups, recompute, pipeline) from the exported flags."""
    torch = pytest.importorskip("torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    a = parse_args(export_document(doc, "megatron"))
    layers, pp = int(a["--num-layers"]), int(a["--pipeline-model-parallel-size"])
    lpvs = int(a.get("--num-layers-per-virtual-pipeline-stage", 0))
    vp = (
        layers // pp // lpvs
        if lpvs
        else (
            int(a["--num-virtual-stages-per-pipeline-rank"])
            if "--num-virtual-stages-per-pipeline-rank" in a
            else None
        )
    )
    uneven = (
        {
            "num_layers_in_first_pipeline_stage": int(a["--decoder-first-pipeline-num-layers"]),
            "num_layers_in_last_pipeline_stage": int(a["--decoder-last-pipeline-num-layers"]),
        }
        if "--decoder-first-pipeline-num-layers" in a
        else {}
    )
    if "--account-for-embedding-in-pipeline-split" in a:
        uneven = {
            "account_for_embedding_in_pipeline_split": True,
            "account_for_loss_in_pipeline_split": True,
        }
    return tc.TransformerConfig(
        **uneven,
        num_layers=layers,
        hidden_size=int(a["--hidden-size"]),
        num_attention_heads=int(a["--num-attention-heads"]),
        num_query_groups=int(a.get("--num-query-groups", a["--num-attention-heads"])),
        ffn_hidden_size=int(a["--ffn-hidden-size"]),
        kv_channels=int(a["--kv-channels"]),
        tensor_model_parallel_size=int(a["--tensor-model-parallel-size"]),
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp,
        context_parallel_size=int(a["--context-parallel-size"]),
        sequence_parallel="--sequence-parallel" in a,
        recompute_granularity=a.get("--recompute-granularity"),
        recompute_method=a.get("--recompute-method"),
        recompute_num_layers=int(a["--recompute-num-layers"])
        if "--recompute-num-layers" in a
        else None,
        gated_linear_unit="--swiglu" in a,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16 if pp > 1 else None,
    ), a


# 126 layers on pp=8 x 8 virtual stages (NVIDIA's Llama 3.1 405B split: embedding and loss count as layers)
# and on pp=16 with given lighter first and last stages (6 / 8 / 8)
UNEVEN_VP = solve_doc(
    "llama3-405b",
    "h100-1024",
    512,
    4096,
    Layout(
        fsdp=16,
        tp=8,
        pp=8,
        virtual_stages=8,
        num_microbatches=32,
        zero_stage=1,
        schedule="interleaved",
    ),
)
UNEVEN_FL = solve_doc(
    "llama3-405b",
    "h100-1024",
    512,
    4096,
    Layout(
        fsdp=8,
        tp=8,
        pp=16,
        num_microbatches=64,
        zero_stage=1,
        first_stage_layers=6,
        last_stage_layers=8,
    ),
)


@pytest.mark.parametrize(
    "doc",
    [FSDP_TP, CP, HSDP, INTERLEAVED_ZERO1, KV_REPLICATED, ZERO1, UNEVEN_VP, UNEVEN_FL],
    ids=[
        "fsdp_tp",
        "cp",
        "hsdp",
        "interleaved",
        "kv_replicated",
        "zero1",
        "uneven_vp",
        "uneven_first_last",
    ],
)
def test_megatron_core_accepts_exported_sizes(doc):
    """megatron-core's TransformerConfig and microbatch calculator accept the sizes and give the layout's K."""
    calc = pytest.importorskip("megatron.core.num_microbatches_calculator")
    cfg, a = megatron_config(doc)
    lay = doc["layouts"][0]
    world = doc["problem"]["num_devices"]
    dp = world // (
        cfg.tensor_model_parallel_size
        * cfg.pipeline_model_parallel_size
        * cfg.context_parallel_size
    )
    counter = calc.ConstantNumMicroBatchesCalculator(
        int(a["--global-batch-size"]), int(a["--micro-batch-size"]), dp, False, 0
    )
    assert counter.get() == lay["num_microbatches"]
    assert cfg.num_query_groups == int(a.get("--num-query-groups", a["--num-attention-heads"]))


def test_megatron_core_rejects_a_bad_tp():
    """The same path refuses a TP that does not divide the heads (the check is real)."""
    pytest.importorskip("megatron.core")
    text = export_document(FSDP_TP, "megatron").replace(
        "--tensor-model-parallel-size 8", "--tensor-model-parallel-size 3"
    )
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    a = parse_args(text)
    with pytest.raises(ValueError, match="must be a multiple of"):
        tc.TransformerConfig(
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=int(a["--num-attention-heads"]),
            tensor_model_parallel_size=int(a["--tensor-model-parallel-size"]),
        )


MEGATRON_BUILD = textwrap.dedent("""
    import json, os, sys
    import torch, torch.nn.functional as F
    torch.distributed.init_process_group("gloo", init_method="file://" + sys.argv[3], rank=0, world_size=1)
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    parallel_state.initialize_model_parallel(1, 1)
    a, vocab = json.loads(sys.argv[1]), int(sys.argv[2])
    cfg = TransformerConfig(
        num_layers=int(a["--num-layers"]), hidden_size=int(a["--hidden-size"]),
        ffn_hidden_size=int(a["--ffn-hidden-size"]), num_attention_heads=int(a["--num-attention-heads"]),
        num_query_groups=int(a.get("--num-query-groups", a["--num-attention-heads"])), kv_channels=int(a["--kv-channels"]),
        normalization=a["--normalization"], layernorm_epsilon=float(a["--norm-epsilon"]),
        attention_dropout=float(a["--attention-dropout"]), hidden_dropout=float(a["--hidden-dropout"]),
        gated_linear_unit="--swiglu" in a, activation_func=F.silu if "--swiglu" in a else F.gelu,
        add_bias_linear="--disable-bias-linear" not in a, add_qkv_bias="--add-qkv-bias" in a,
        use_cpu_initialization=True, params_dtype=torch.float32)
    model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(normalization=a["--normalization"]),
                     vocab_size=vocab, max_sequence_length=int(a["--max-position-embeddings"]),
                     position_embedding_type=a["--position-embedding-type"],
                     rotary_base=int(float(a.get("--rotary-base", 10000))),
                     share_embeddings_and_output_weights="--untie-embeddings-and-output-weights" not in a)
    layer = model.decoder.layers[0]
    print("RESULT " + json.dumps({
        "layers": len(model.decoder.layers), "qkv": list(layer.self_attention.linear_qkv.weight.shape),
        "fc1": list(layer.mlp.linear_fc1.weight.shape), "vocab": model.embedding.word_embeddings.weight.shape[0],
        "params": sum(p.numel() for p in model.parameters())}))
""")

TINY_GPT3 = dict(
    num_layers=2,
    d_model=128,
    d_ff=512,
    num_heads=4,
    num_kv_heads=4,
    head_dim=32,
    vocab_size=1024,
    learned_positions=256,
)


@pytest.mark.parametrize("case", ["debug_hsdp", "tiny_gpt3"])
def test_megatron_core_builds_the_engine_model(case, tmp_path):
    """megatron-core builds a GPTModel (local layer spec, CPU, one gloo rank) from the exported flags with the engine's
    layers, widths, heads and exactly its parameter count: RMSNorm/SwiGLU/GQA/RoPE/untied (debug) and
    LayerNorm/GELU/biases/learned positions/tied embeddings (a 2-layer GPT-3). The vocabulary is not a flag (it
    comes from the tokenizer) and is passed as the model's, a multiple of 128 so Megatron pads nothing."""
    pytest.importorskip("megatron.core.models.gpt")
    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    doc = (
        HSDP
        if case == "debug_hsdp"
        else custom_doc("gpt3-175b", "h100-8", 16, 256, Layout(fsdp=8), **TINY_GPT3)
    )
    m = context_for(doc, "megatron").model
    assert m.vocab_size % 128 == 0
    args = json.dumps(parse_args(export_document(doc, "megatron")))
    got = child_result(
        [
            sys.executable,
            "-c",
            MEGATRON_BUILD,
            args,
            str(m.vocab_size),
            str(tmp_path / "rendezvous"),
        ],
        timeout=300,
    )
    assert got == {
        "layers": m.num_layers,
        "qkv": [(m.num_heads + 2 * m.num_kv_heads) * m.head_dim, m.d_model],
        "fc1": [m.d_ff * (2 if m.mlp_matrices == 3 else 1), m.d_model],
        "vocab": m.vocab_size,
        "params": param_counts(m)["total"],
    }
    assert got["params"] == {"debug_hsdp": 7_082_240, "tiny_gpt3": 560_640}[case]


# ----------------------------------------------------------------------------- DeepSpeed
@pytest.mark.parametrize(
    "doc", [FSDP_TP_NO_SP, ZERO1, PIPE_1F1B], ids=["fsdp_tp", "zero1", "pipeline_1f1b"]
)
def test_deepspeed_config_batch_assertion(doc):
    """DeepSpeedConfig accepts the JSON (with its _layoutsearch key) for DP world = dp x fsdp."""
    cfg = json.loads(export_document(doc, "deepspeed"))
    lay = doc["layouts"][0]
    dp_world = lay["degrees"]["dp"] * lay["degrees"]["fsdp"]
    ds = deepspeed_config(cfg, dp_world)
    assert (ds.train_batch_size, ds.gradient_accumulation_steps) == (
        doc["problem"]["global_batch_seqs"],
        lay["num_microbatches"],
    )
    assert ds.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        deepspeed_config(cfg, dp_world * 2)


# ----------------------------------------------------------------------------- torchtitan
@pytest.mark.parametrize(
    "doc", [FSDP_TP, CP, HSDP, INTERLEAVED], ids=["fsdp_tp", "cp", "hsdp", "interleaved"]
)
def test_torchtitan_config_manager_and_parallel_dims(doc, tmp_path):
    """torchtitan's ConfigManager loads the TOML and ParallelDims validates the degrees against the world."""
    manager = pytest.importorskip("torchtitan.config.manager")
    pdims = pytest.importorskip("torchtitan.distributed.parallel_dims")
    path = tmp_path / "job.toml"
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    p = job.parallelism
    world = doc["problem"]["num_devices"]
    degrees = torchtitan_degrees(p)
    dims = pdims.ParallelDims(**degrees, world_size=world)
    assert job.training.seq_len % dims.seq_len_divisor == 0
    batch_degree = dims.dp_replicate * dims.dp_shard
    assert job.training.global_batch_size % (job.training.local_batch_size * batch_degree) == 0
    with pytest.raises(AssertionError, match="Invalid parallel dims"):
        pdims.ParallelDims(**degrees, world_size=world * 2)


def test_torchtitan_pipeline_split_is_even():
    """With first/last_stage_less_layers = 0, torchtitan's split gives each virtual stage L/(pp v) layers."""
    pipe = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    import tomllib

    par = tomllib.loads(export_document(INTERLEAVED, "torchtitan"))["parallelism"]
    stages = 32 // par["pipeline_parallel_layers_per_stage"]
    parts = pipe.generate_llm_fqn_per_model_part(
        stages,
        32,
        par["pipeline_parallel_first_stage_less_layers"],
        par["pipeline_parallel_last_stage_less_layers"],
    )
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [4] * 8
    assert (
        pipe.get_schedule_class(par["pipeline_parallel_schedule"]).__name__
        == "ScheduleInterleaved1F1B"
    )


def test_torchtitan_reads_the_balanced_split_as_module_names(tmp_path):
    """The balanced split of llama3-8b on pp = 4 (9 / 8 / 9 / 6 layers): torchtitan 0.2.2's ConfigManager reads
    module_fqns_per_model_part as the exported chunks, which pipeline_llm then uses instead of generating a split."""
    manager = pytest.importorskip("torchtitan.config.manager")
    import tomllib

    layout = Layout(fsdp=4, pp=4, zero_stage=1, num_microbatches=8, balanced_split=True)
    doc = solve_doc("llama3-8b", "h100-16", 32, 4096, layout, framework="torchtitan")
    path = tmp_path / "job.toml"
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    parts = job.parallelism.module_fqns_per_model_part
    assert parts == tomllib.loads(path.read_text())["parallelism"]["module_fqns_per_model_part"]
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [9, 8, 9, 6]


def test_torchtitan_flavors_match_the_table_and_custom_flavors_build():
    """layoutsearch's copy of the llama3 flavors matches torchtitan; a custom flavor builds the model's widths."""
    torch = pytest.importorskip("torch")
    llama3 = pytest.importorskip("torchtitan.models.llama3")
    from layoutsearch.export import context_for, torchtitan

    for name, (
        dim,
        layers,
        heads,
        kv,
        vocab,
        mult,
        multiple_of,
    ) in torchtitan.LLAMA3_FLAVORS.items():
        args = llama3.llama3_args[name]
        assert (
            args.dim,
            args.n_layers,
            args.n_heads,
            args.n_kv_heads or args.n_heads,
            args.vocab_size,
            args.ffn_dim_multiplier,
            args.multiple_of,
        ) == (dim, layers, heads, kv, vocab, mult, multiple_of)
    ctx = context_for(HSDP, "torchtitan")
    args = eval(
        torchtitan.custom_flavor_args(ctx), {"TransformerModelArgs": llama3.TransformerModelArgs}
    )  # noqa: S307
    with torch.device("meta"):
        model = llama3.Transformer(args)
    block = model.layers["0"]
    assert tuple(block.feed_forward.w1.weight.shape) == (ctx.model.d_ff, ctx.model.d_model)
    assert tuple(block.attention.wk.weight.shape) == (
        ctx.model.num_kv_heads * ctx.model.head_dim,
        ctx.model.d_model,
    )


@pytest.mark.parametrize("doc", [FSDP_TP, HSDP], ids=["flavor_8B", "custom_debug"])
def test_torchtitan_builds_the_engine_model(doc, tmp_path):
    """The model torchtitan 0.2 builds for the exported TOML (its flavor, or the TransformerModelArgs the header says
    to register) has the engine's layers, widths, heads and exactly its parameter count (meta device)."""
    torch = pytest.importorskip("torch")
    llama3 = pytest.importorskip("torchtitan.models.llama3")
    manager = pytest.importorskip("torchtitan.config.manager")
    import re

    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    text = export_document(doc, "torchtitan")
    path = tmp_path / "job.toml"
    path.write_text(text)
    flavor = manager.ConfigManager().parse_args([f"--job.config_file={path}"]).model.flavor
    if flavor in llama3.llama3_args:
        args = llama3.llama3_args[flavor]
    else:  # what the header tells the user to register
        registration = re.search(r"llama3_args as (TransformerModelArgs\(.*\))$", text, re.M).group(
            1
        )
        args = eval(registration, {"TransformerModelArgs": llama3.TransformerModelArgs})  # noqa: S307
    with torch.device("meta"):
        model = llama3.Transformer(args)
    m = context_for(doc, "torchtitan").model
    block = model.layers["0"]
    assert (
        len(model.layers),
        model.tok_embeddings.weight.shape[0],
        block.attention.n_heads,
        block.attention.n_kv_heads,
        block.feed_forward.w1.weight.shape[0],
        block.attention.wq.weight.shape[1],
    ) == (m.num_layers, m.vocab_size, m.num_heads, m.num_kv_heads, m.d_ff, m.d_model)
    params = sum(t.numel() for t in model.parameters())
    assert params == param_counts(m)["total"] == {"8B": 8_030_261_248, "debug": 7_082_240}[flavor]


@pytest.mark.parametrize("seq", [4096, 16384], ids=["sdpa", "flex_chunks"])
def test_torchtitan_builds_llama4_maverick_from_the_registration(seq, tmp_path):
    """Llama 4 Maverick exported to torchtitan 0.2: the TransformerModelArgs the header says to register build its
    llama4 model (meta device) with the engine's layers, the dense layers' 16,384 and the experts' 8,192 widths, the
    MoE layers every 2nd (1, 3, ...), 12 NoPE layers, and exactly the engine's 400,711,848,960 parameters; the job
    loads (ConfigManager), the model's update_from_config accepts it with cp 1 and, where the chunks need
    FlexAttention, refuses cp 2 as the engine's rule does."""
    torch = pytest.importorskip("torch")
    llama4 = pytest.importorskip("torchtitan.models.llama4")
    manager = pytest.importorskip("torchtitan.config.manager")
    import re

    from torchtitan.models.llama4.model.args import RoPEScalingArgs
    from torchtitan.models.moe import MoEArgs

    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    doc = solve_doc(
        "llama4-maverick", "h100-64", 64, seq, Layout(fsdp=32, tp=2, ep=16, zero_stage=3)
    )
    text = export_document(doc, "torchtitan")
    path = tmp_path / "job.toml"
    path.write_text(text)
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    assert (job.model.name, job.model.flavor) == ("llama4", "llama4-maverick")
    registration = re.search(r"llama4_args as (TransformerModelArgs\(.*\))$", text, re.M).group(1)
    names = {
        "TransformerModelArgs": llama4.TransformerModelArgs,
        "MoEArgs": MoEArgs,
        "RoPEScalingArgs": RoPEScalingArgs,
    }
    args = eval(registration, names)  # noqa: S307
    args.update_from_config(job)  # cp 1: accepted
    with torch.device("meta"):
        model = llama4.Transformer(args)
    m = context_for(doc, "torchtitan").model
    layers = [model.layers[str(i)] for i in range(len(model.layers))]
    assert len(layers) == 48
    assert [i for i, b in enumerate(layers) if b.moe_enabled] == list(range(1, 48, 2))
    assert sum(not b.attention.use_rope for b in layers) == 12
    assert layers[0].feed_forward.w1.weight.shape == (16384, 5120)
    assert layers[1].moe.experts.w1.shape == (128, 8192, 5120)
    assert layers[1].moe.shared_experts.w1.weight.shape == (8192, 5120)
    assert args.attn_type == ("flex" if seq > 8192 else "sdpa")
    params = sum(t.numel() for t in model.parameters())
    assert params == param_counts(m)["total"] == 400_711_848_960
    if seq > 8192:
        job.parallelism.context_parallel_degree = 2
        with pytest.raises(NotImplementedError, match="Context Parallel only supports SDPA"):
            args.update_from_config(job)


@pytest.mark.parametrize("window", [128, 256], ids=["flavor_120b", "registration"])
def test_torchtitan_builds_gpt_oss_from_the_flavor_or_the_registration(window, tmp_path):
    """gpt-oss-120b exported to torchtitan 0.2 (eager, as its gpt_oss model runs): the job loads (ConfigManager) as
    gpt_oss with the 120b flavor, or, with a 256-token window, the GptOssModelArgs the header says to register; the
    model built from it (meta device) has 36 layers, sinks on every layer, windows on the even ones, 128 experts of
    2,880 with biases, and exactly the engine's parameters (116,829,156,672 at the model card's sizes); its train spec
    has no pipelining function and its args refuse cp 2, as the engine's rules do."""
    torch = pytest.importorskip("torch")
    gpt_oss = pytest.importorskip("torchtitan.models.gpt_oss")
    manager = pytest.importorskip("torchtitan.config.manager")
    import re

    from torchtitan.models.moe import MoEArgs

    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    doc = solve_doc(
        "gpt-oss-120b",
        "h100-64",
        512,
        4096,
        Layout(fsdp=64, ep=8, zero_stage=3),
        model_changes={"sliding_window": window},
        framework="torchtitan",
        torch_compile=False,
    )
    text = export_document(doc, "torchtitan")
    path = tmp_path / "job.toml"
    path.write_text(text)
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    assert job.model.name == "gpt_oss" and job.compile.enable is False
    if window == 128:
        assert job.model.flavor == "120b"
        args = gpt_oss.gptoss_configs["120b"]
    else:
        registration = re.search(r"gptoss_configs as (GptOssModelArgs\(.*\))$", text, re.M).group(1)
        args = eval(registration, {"GptOssModelArgs": gpt_oss.GptOssModelArgs, "MoEArgs": MoEArgs})  # noqa: S307
    args.update_from_config(job)  # cp 1: accepted
    with torch.device("meta"):
        model = gpt_oss.GptOssModel(args)
    layers = [model.layers[str(i)] for i in range(len(model.layers))]
    assert len(layers) == 36 and all(b.attention.sinks.shape == (64,) for b in layers)
    assert [i for i, b in enumerate(layers) if b.use_sliding_attention] == list(range(0, 36, 2))
    assert args.sliding_window_size == window
    assert layers[0].moe.experts.mlp1_weight.shape[0] == 128
    assert layers[0].attention.wq.bias is not None and layers[0].moe.experts.mlp2_bias is not None
    params = sum(t.numel() for t in model.parameters())
    m = context_for(doc, "torchtitan").model
    assert params == param_counts(m)["total"] == 116_829_156_672
    assert gpt_oss.get_train_spec().pipelining_fn is None
    job.parallelism.context_parallel_degree = 2
    with pytest.raises(NotImplementedError, match="CP support for gpt-oss"):
        args.update_from_config(job)


# ----------------------------------------------------------------------------- torchtitan 0.3 (separate venv)
TT03_LOADER = textwrap.dedent("""
    import importlib, json, sys, torch
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import pipeline_parallel as pipe
    from torchtitan.distributed.parallel_dims import ParallelDims
    out = []
    for name, world in zip(sys.argv[1::2], sys.argv[2::2]):
        try:
            cfg = ConfigManager().parse_args(["--module", name, "--config", "layoutsearch_job", "--training.steps", "7"])
            p, t, mc = cfg.parallelism, cfg.training, cfg.model_spec.model
            dims = ParallelDims.from_config(p, int(world))
            mc.update_from_config(config=cfg)
            parts = []
            if p.pipeline_parallel_degree > 1:
                stages, layers, first, last = pipe._get_pipeline_metadata(dims, p, mc)
                parts = [sum(f.startswith("layers.") for f in part)
                         for part in pipe._generate_llm_fqn_per_model_part(stages, layers, first, last)]
            with torch.device("meta"):
                model = mc.build()
            block = model.layers["0"]
            attn = mc.layers[0].attention
            out.append({"degrees": [dims.dp_replicate, dims.dp_shard, dims.tp, dims.pp, dims.cp],
                        "batch": [t.local_batch_size, t.global_batch_size, t.seq_len, t.steps],
                        "microbatch": p.pipeline_parallel_microbatch_size, "schedule": p.pipeline_parallel_schedule,
                        "stage_layers": parts, "ac": type(cfg.activation_checkpoint).__qualname__,
                        "reshard": p.fsdp_reshard_after_forward,
                        "model": {"layers": len(model.layers), "dim": mc.dim, "heads": attn.n_heads,
                                  "kv_heads": attn.n_kv_heads, "ffn": block.feed_forward.w1.weight.shape[0],
                                  "vocab": model.tok_embeddings.weight.shape[0],
                                  "qkv_out": block.attention.qkv_linear.wqkv.weight.shape[0],
                                  "rope_theta": attn.rope.theta, "rope_scaling": attn.rope.scaling,
                                  "norm_eps": [block.attention_norm.eps, model.norm.eps]},
                        "params": sum(x.numel() for x in model.parameters())})
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    print("RESULT " + json.dumps(out))
""")


def torchtitan03_python() -> str:
    return framework_python(
        "LAYOUTSEARCH_TORCHTITAN03_PYTHON", "torchtitan03-venv", "torchtitan 0.3"
    )


def run_tt03_loader(python: str, folder: Path, argv: list[str]) -> list[dict]:
    """TT03_LOADER run by ``python`` in ``folder`` (the exported modules lie there) on ``argv`` (module name,
    device count, ...): its RESULT line, one dict a module."""
    return child_result(
        [python, "-c", TT03_LOADER, *argv],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder)},
    )


def fill_placeholders(text: str, values: dict[str, object]) -> str:
    """What a user does before launch: replace every '<set me: ...>' constant of the exported module."""
    import re

    return re.sub(
        r"^([A-Z_]+) = '<set me: [^']*>'",
        lambda m: f"{m.group(1)} = {values[m.group(1)]!r}",
        text,
        flags=re.M,
    )


TT03_VALUES = {
    "DUMP_FOLDER": "/tmp/out",
    "HF_ASSETS_PATH": "/tmp/tokenizer",
    "DATASET": "c4",
    "DATASET_PATH": "/tmp/c4",
    "CHECKPOINT_FOLDER": "checkpoint",
    "STEPS": 10,
    "LR": 3e-4,
    "WARMUP_STEPS": 2,
}


def test_torchtitan03_config_manager_builds_the_exported_job(tmp_path):
    """torchtitan 0.3's ConfigManager loads each exported config_registry entry (--module/--config, with a
    --training.steps override), ParallelDims checks the degrees against the world, its pipeline split gives
    L/(pp v) layers per stage, and the llama3 model it builds on the meta device has the engine's shape and
    exactly the engine's parameter count (costs.params.param_counts); a tp 8 layout without sequence
    parallelism loads with its enable_sequence_parallel off."""
    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    python = torchtitan03_python()
    cases = {
        "hsdp": HSDP,
        "fsdp_tp": FSDP_TP,
        "fsdp_tp_no_sp": FSDP_TP_NO_SP,  # parallelism.enable_sequence_parallel = False
        "cp": CP,
        "interleaved": INTERLEAVED,
        "eps": custom_doc(
            "debug",
            "h100-8",
            32,
            2048,
            Layout(fsdp=4, tp=2, num_microbatches=2, recompute="full"),
            norm_eps=1e-6,
            rope_theta=1e6,
        ),
    }
    argv = []
    for name, doc in cases.items():
        (tmp_path / f"ls_{name}.py").write_text(
            fill_placeholders(export_document(doc, "torchtitan-0.3"), TT03_VALUES)
        )
        argv += [f"ls_{name}", str(doc["problem"]["num_devices"])]
    results = dict(zip(cases, run_tt03_loader(python, tmp_path, argv)))
    for name, doc in cases.items():
        got = results[name]
        assert "error" not in got, f"{name}: {got}"
        ctx = context_for(doc, "torchtitan-0.3")
        m, lay = ctx.model, ctx.layout
        sharded = (
            ctx.effective_zero_stage >= 1
        )  # ZeRO-1 only with a pipeline: FSDP2 under pipelining
        assert got["degrees"] == [
            lay.dp if sharded else lay.data_units,
            lay.fsdp if sharded else 1,
            lay.tp,
            lay.pp,
            lay.cp,
        ], name
        assert got["batch"][1:] == [ctx.global_batch_seqs, ctx.seq_len, 7], (
            name
        )  # 7: the launch-line override
        assert got["model"] == {
            "layers": m.num_layers,
            "dim": m.d_model,
            "heads": m.num_heads,
            "kv_heads": m.num_kv_heads,
            "ffn": m.d_ff,
            "vocab": m.vocab_size,
            "qkv_out": (m.num_heads + 2 * m.num_kv_heads) * m.head_dim,
            "rope_theta": m.rope_theta,
            "rope_scaling": "none" if m.rope_scaling is None else "llama",
            "norm_eps": [m.norm_eps, m.norm_eps],
        }, name
        assert got["params"] == param_counts(m)["total"], name
        assert (
            got["ac"]
            == {"none": "NoneType", "full": "FullAC.Config", "selective": "SelectiveAC.Config"}[
                lay.recompute
            ]
        )
    assert results["hsdp"]["params"] == 7_082_240 and results["fsdp_tp"]["params"] == 8_030_261_248
    assert (
        results["eps"]["model"]["norm_eps"] == [1e-6, 1e-6]
        and results["eps"]["model"]["rope_theta"] == 1e6
    )
    inter = results["interleaved"]
    assert (inter["schedule"], inter["stage_layers"]) == ("Interleaved1F1B", [4] * 8)
    assert inter["batch"][0] // inter["microbatch"] == 8  # the layout's 8 microbatches
    assert results["hsdp"]["reshard"] == "always"


def test_torchtitan03_refuses_unset_placeholders(tmp_path):
    """Launched as exported (placeholders unset), the registry entry refuses to build and names them."""
    python = torchtitan03_python()
    (tmp_path / "ls_raw.py").write_text(export_document(HSDP, "torchtitan-0.3"))
    error = run_tt03_loader(python, tmp_path, ["ls_raw", "16"])[0]["error"]
    assert error.startswith(
        "ValueError: set DUMP_FOLDER, HF_ASSETS_PATH, DATASET, DATASET_PATH, CHECKPOINT_FOLDER, "
        "STEPS, LR, WARMUP_STEPS at the top of"
    ), error


def test_torchtitan03_trainer_needs_cuda(tmp_path):
    """No CPU training step for torchtitan: its Trainer takes the device from torchtitan/tools/utils.py get_device_info,
    which falls back to "cuda" when no accelerator is found, and Trainer.__init__ calls device_module.set_device
    (torch.cuda.set_device) before anything else, so on a CPU-only torch the launch fails there. This runs the real
    entry point (python -m torchtitan.train --module ... --config layoutsearch_job) with the exported module and checks
    that it gets past config parsing and stops exactly at that call; with CUDA present it is skipped (a GPU step also
    needs torchtitan's tokenizer and dataset assets, which the wheel does not ship)."""
    python = torchtitan03_python()
    probe = subprocess.run(
        [python, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.stdout.strip() == "True":
        pytest.skip(
            "CUDA present: a torchtitan step needs its tokenizer/dataset assets (not in the wheel)"
        )
    (tmp_path / "ls_step.py").write_text(
        fill_placeholders(export_document(HSDP, "torchtitan-0.3"), TT03_VALUES)
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    run = subprocess.run(
        [
            python,
            "-m",
            "torchtitan.train",
            "--module",
            "ls_step",
            "--config",
            "layoutsearch_job",
            "--training.steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode != 0
    assert (
        "device_module.set_device(self.device)" in run.stderr
        and "torch/cuda/__init__.py" in run.stderr
    ), run.stderr[-3000:]


# ----------------------------------------------------------------------------- MaxText (separate interpreter)
MAXTEXT_LOADER = maxtext_script(
    """
    from maxtext.utils import maxtext_utils
    """,
    """
    mesh = maxtext_utils.create_device_mesh(cfg)
    out.append({"mesh": dict(zip(cfg.mesh_axes, mesh.shape)), "global": cfg.global_batch_size_to_train_on,
                "accumulation": cfg.gradient_accumulation_steps, "remat": cfg.remat_policy,
                "offloaded": sorted(k for k in ("decoder_layer_input", "query_proj", "key_proj", "value_proj",
                                                "qkv_proj", "out_proj", "mlpwi", "mlpwo", "context")
                                    if getattr(cfg, k, None) == "offload")})
    """,
)


def test_maxtext_pyconfig_and_mesh(tmp_path):
    """MaxText's pyconfig loads each override and builds its device mesh on 8 CPU devices."""
    python = maxtext_python()
    cases = {
        "fsdp_tp": (Layout(fsdp=4, tp=2, num_microbatches=2, recompute="selective"), 32, 1024),
        "gpipe": (
            Layout(fsdp=4, pp=2, num_microbatches=4, schedule="gpipe", recompute="full"),
            32,
            1024,
        ),
        # MaxText's checker refuses ring attention on CPU devices (GPUs, or TPUs with Tokamax):
        # the CPU mesh loads the all-gather flavour, tests/test_cp_flavours.py the TPU ring keys
        "cp": (Layout(fsdp=4, cp=2, cp_flavour="allgather"), 16, 1024),
        "zero1": (Layout(fsdp=8, zero_stage=1, num_microbatches=2), 32, 512),
        "offload": (Layout(fsdp=8, recompute="custom_offload_dots_except_mlp"), 16, 1024),
        "offload_named": (Layout(fsdp=8, recompute="qkv_proj_offloaded"), 16, 1024),
    }
    remat = {
        "fsdp_tp": ("minimal", []),
        "gpipe": ("full", []),
        "cp": ("minimal_with_context", []),
        "zero1": ("minimal_with_context", []),
        "offload_named": ("qkv_proj_offloaded", []),
        "offload": (
            "custom",
            ["decoder_layer_input", "key_proj", "out_proj", "qkv_proj", "query_proj", "value_proj"],
        ),
    }
    paths, docs = [], []
    for name, (layout, batch, seq) in cases.items():
        doc = solve_doc("debug", "v5p-8", batch, seq, layout)
        path = tmp_path / f"{name}.yml"
        path.write_text(export_document(doc, "maxtext"))
        paths.append(str(path))
        docs.append(doc)
    for _doc, result, (name, (layout, batch, _)) in zip(
        docs, child_result([python, "-c", MAXTEXT_LOADER, *paths]), cases.items()
    ):
        assert "error" not in result, f"{name}: {result}"
        mesh = result["mesh"]
        assert (mesh["fsdp"] * mesh["data"], mesh["tensor"], mesh["stage"], mesh["context"]) == (
            layout.fsdp,
            layout.tp,
            layout.pp,
            layout.cp,
        ), name
        assert result["global"] == batch, name
        assert (result["remat"], result["offloaded"]) == remat[name], name


MAXTEXT_PARAMS = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from maxtext.configs import pyconfig
    from maxtext.utils import max_utils, maxtext_utils, model_creation_utils
    cfg = pyconfig.initialize(["", sys.argv[1], "hardware=cpu", "skip_jax_distributed_system=true",
                               "run_name=layoutsearch-test", "enable_checkpointing=false"])
    mesh = maxtext_utils.get_mesh_from_config(cfg)
    abstract = maxtext_utils.get_abstract_param(model_creation_utils.create_model(cfg, mesh), cfg)["params"]
    shapes = {"/".join(str(getattr(k, "key", k)) for k in path): list(leaf.shape)
              for path, leaf in jax.tree_util.tree_leaves_with_path(abstract)}
    print("RESULT " + json.dumps({"params": max_utils.calculate_num_params_from_pytree(abstract), "shapes": shapes,
                                  "layers": cfg.num_decoder_layers, "emb": cfg.emb_dim, "heads": cfg.num_query_heads,
                                  "kv_heads": cfg.num_kv_heads, "mlp": cfg.mlp_dim, "vocab": cfg.vocab_size}))
""")

MAXTEXT_STEP = solve_doc(
    "debug", "v5p-8", 32, 128, Layout(fsdp=4, tp=2, num_microbatches=2, recompute="full")
)


def test_maxtext_builds_the_engine_model(tmp_path):
    """MaxText's own model (create_model on the mesh of the exported override, shapes by jax.eval_shape, no weights)
    has the engine's sizes and exactly its parameter count."""
    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    python = maxtext_python()
    path = tmp_path / "model.yml"
    path.write_text(export_document(MAXTEXT_STEP, "maxtext"))
    got = child_result([python, "-c", MAXTEXT_PARAMS, str(path)])
    m = context_for(MAXTEXT_STEP, "maxtext").model
    assert (got["layers"], got["emb"], got["heads"], got["kv_heads"], got["mlp"], got["vocab"]) == (
        m.num_layers,
        m.d_model,
        m.num_heads,
        m.num_kv_heads,
        m.d_ff,
        m.vocab_size,
    )
    assert got["params"] == param_counts(m)["total"] == 7_082_240
    shapes = {
        k.removesuffix("/.value"): v for k, v in got["shapes"].items()
    }  # layers scanned: axis 1
    assert shapes["token_embedder/embedding"] == [m.vocab_size, m.d_model]
    assert shapes["decoder/layers/self_attention/key/kernel"] == [
        m.d_model,
        m.num_layers,
        m.num_kv_heads,
        m.head_dim,
    ]
    assert shapes["decoder/layers/mlp/wi_0/kernel"] == [m.d_model, m.num_layers, m.d_ff]
    assert shapes["decoder/logits_dense/kernel"] == [m.d_model, m.vocab_size]  # untied


def test_maxtext_cpu_training_step(tmp_path):
    """One real MaxText training step (its train entry point, synthetic data) from the exported override on 8
    simulated CPU devices: fsdp 4 x tensor 2, 2 accumulation steps, full remat; the step's loss is finite and near
    ln(vocab) for a fresh model, and it counts the global batch's tokens."""
    python = maxtext_python()
    path = tmp_path / "step.yml"
    path.write_text(export_document(MAXTEXT_STEP, "maxtext"))
    log = maxtext_train_log(python, path, tmp_path, "layoutsearch-step")
    import math
    import re

    mesh = re.search(r"Num_devices: 8, shape \(([\d, ]+)\)", log).group(1)
    assert sorted(int(x) for x in mesh.split(",") if int(x) > 1) == [2, 4]
    step = re.search(r"completed step: 0, .*total_weights: (\d+), loss: ([\d.naif]+)", log)
    assert step, log[-3000:]
    assert int(step.group(1)) == 32 * 128  # the global batch's tokens
    loss = float(step.group(2))
    assert math.isfinite(loss) and abs(loss - math.log(2048)) < 1.5, loss


# ----------------------------------------------------------------------------- DeepSpeed, one CPU step
DEEPSPEED_STEP = textwrap.dedent("""
    import json, os, sys
    os.environ["DS_ACCELERATOR"] = "cpu"
    import torch
    import torch.multiprocessing as mp
    F = torch.nn.functional


    def lm(shape):
        d, f, v, h, kv = shape["d_model"], shape["d_ff"], shape["vocab"], shape["heads"], shape["kv_heads"]
        hd = shape["head_dim"]

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.n1, self.n2 = torch.nn.RMSNorm(d), torch.nn.RMSNorm(d)
                self.qkv = torch.nn.Linear(d, (h + 2 * kv) * hd, bias=False)
                self.o = torch.nn.Linear(h * hd, d, bias=False)
                self.gate, self.up = torch.nn.Linear(d, f, bias=False), torch.nn.Linear(d, f, bias=False)
                self.down = torch.nn.Linear(f, d, bias=False)

            def forward(self, x):
                b, s, _ = x.shape
                q, k, val = self.qkv(self.n1(x)).split([h * hd, kv * hd, kv * hd], dim=-1)
                q, k, val = (t.view(b, s, -1, hd).transpose(1, 2) for t in (q, k, val))
                a = F.scaled_dot_product_attention(q, k, val, is_causal=True, enable_gqa=True)
                x = x + self.o(a.transpose(1, 2).reshape(b, s, h * hd))
                y = self.n2(x)
                return x + self.down(F.silu(self.gate(y)) * self.up(y))

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(v, d)
                self.blocks = torch.nn.ModuleList(Block() for _ in range(shape["layers"]))
                self.norm, self.head = torch.nn.RMSNorm(d), torch.nn.Linear(d, v, bias=False)

            def forward(self, tokens):
                x = self.emb(tokens)
                for block in self.blocks:
                    x = block(x)
                logits = self.head(self.norm(x)).float()
                return F.cross_entropy(logits[:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1))

        return LM()


    def worker(rank, world, rendezvous, cfg, shape, out):
        # A file rendezvous (no TCP port to race for); MASTER_ADDR/PORT only name DeepSpeed's shared-memory buffers.
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(os.getppid()), RANK=str(rank), LOCAL_RANK=str(rank),
                          WORLD_SIZE=str(world), LOCAL_SIZE=str(world))
        import deepspeed
        deepspeed.init_distributed(dist_backend="gloo", init_method="file://" + rendezvous, rank=rank, world_size=world)
        torch.manual_seed(0)
        model = lm(shape)
        params = sum(p.numel() for p in model.parameters())
        before = model.head.weight.detach().clone()
        engine, _, _, _ = deepspeed.initialize(model=model, config=cfg,
                                               optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3))
        gen = torch.Generator().manual_seed(rank)
        losses = []
        for _ in range(engine.gradient_accumulation_steps()):
            tokens = torch.randint(0, shape["vocab"], (engine.train_micro_batch_size_per_gpu(), shape["seq_len"]),
                                   generator=gen)
            loss = engine(tokens)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
        with deepspeed.zero.GatheredParameters([engine.module.head.weight]):
            moved = (engine.module.head.weight.detach().float() - before.float()).abs().max().item()
        if rank == 0:
            with open(out, "w") as fh:
                json.dump({"losses": losses, "optimizer_steps": engine.global_steps, "micro_steps": engine.micro_steps,
                           "world": torch.distributed.get_world_size(), "zero": engine.zero_optimization_stage(),
                           "dtype": str(next(engine.module.parameters()).dtype), "params": params,
                           "train_batch": engine.train_batch_size(), "head_moved": moved}, fh)
        # Leave together and tear the groups down before the interpreter does: a rank that exited with gloo's
        # threads still up once aborted ("terminate called without an active exception") on a loaded CI machine.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        # ... and it did again once after both (2026-12-06, a fresh clone's first run, which builds DeepSpeed's
        # shared-memory op): leave without the interpreter's teardown, whose native thread destructors abort.
        # The results are written and flushed above; spawn reads exit code 0.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


    if __name__ == "__main__":
        cfg, shape = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
        # the step passes its own AdamW: the file's optimizer/scheduler blocks hold placeholders
        cfg.pop("optimizer"), cfg.pop("scheduler")
        mp.spawn(worker, args=(int(sys.argv[3]), sys.argv[4], cfg, shape, sys.argv[5]), nprocs=int(sys.argv[3]))
""")


def test_deepspeed_cpu_training_step(tmp_path):
    """One real optimizer step with DeepSpeed on its CPU accelerator (gloo, 2 ranks): deepspeed.initialize takes the
    exported JSON (its placeholder optimizer and scheduler blocks left out: the step passes its own AdamW; ZeRO-3, bf16, 2 accumulation micro-steps of 2 sequences, train_batch_size 8 = 2 x 2 x world
    2) and trains a torch model with the engine's debug shape (its parameter count equals costs.params). The first
    run compiles DeepSpeed's shared-memory comm op (about 3 minutes on 2 cores) unless .ci/frameworks.sh built it."""
    pytest.importorskip("deepspeed")
    import math

    from layoutsearch.costs.params import param_counts
    from layoutsearch.export import context_for

    doc = solve_doc("debug", "h100-2", 8, 128, Layout(fsdp=2, num_microbatches=2, zero_stage=3))
    m = context_for(doc, "deepspeed").model
    config = tmp_path / "ds.json"
    config.write_text(export_document(doc, "deepspeed"))
    shape = {
        "d_model": m.d_model,
        "d_ff": m.d_ff,
        "vocab": m.vocab_size,
        "heads": m.num_heads,
        "kv_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "layers": m.num_layers,
        "seq_len": 128,
    }
    (tmp_path / "step.py").write_text(DEEPSPEED_STEP)
    out = tmp_path / "out.json"
    run = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "step.py"),
            str(config),
            json.dumps(shape),
            "2",
            str(tmp_path / "rendezvous"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert run.returncode == 0 and out.is_file(), (run.stdout + run.stderr)[-4000:]
    got = json.loads(out.read_text())
    assert (
        got["world"],
        got["zero"],
        got["train_batch"],
        got["optimizer_steps"],
        got["micro_steps"],
    ) == (
        2,
        3,
        8,
        1,
        2,
    )
    assert (
        got["dtype"] == "torch.bfloat16" and got["params"] == param_counts(m)["total"] == 7_082_240
    )
    assert all(math.isfinite(x) and abs(x - math.log(m.vocab_size)) < 1.5 for x in got["losses"]), (
        got["losses"]
    )
    assert got["head_moved"] > 0  # the optimizer step changed the weights


# ----------------------------------------------------------------------------- the main job, end to end
def _main_job_export(target: str, tmp_path) -> tuple[dict, str]:
    """`layoutsearch solve --model llama70b --cluster v5p-8192 --export TARGET -o FILE`: (document, file text)."""
    return solve_export("llama70b", "v5p-8192", target, tmp_path / f"main-job.{target}")


def test_main_job_export_accepted_by_megatron_core(tmp_path):
    calc = pytest.importorskip("megatron.core.num_microbatches_calculator")
    doc, text = _main_job_export("megatron", tmp_path)
    assert text == export_document(doc, "megatron")
    cfg, a = megatron_config(doc)
    dp = 8192 // (
        cfg.tensor_model_parallel_size
        * cfg.pipeline_model_parallel_size
        * cfg.context_parallel_size
    )
    counter = calc.ConstantNumMicroBatchesCalculator(
        int(a["--global-batch-size"]), int(a["--micro-batch-size"]), dp, False, 0
    )
    assert counter.get() == doc["layouts"][0]["num_microbatches"]


def test_main_job_export_accepted_by_torchtitan(tmp_path):
    manager = pytest.importorskip("torchtitan.config.manager")
    pdims = pytest.importorskip("torchtitan.distributed.parallel_dims")
    doc, text = _main_job_export("torchtitan", tmp_path)
    path = tmp_path / "main.toml"
    path.write_text(text)
    p = manager.ConfigManager().parse_args([f"--job.config_file={path}"]).parallelism
    pdims.ParallelDims(**torchtitan_degrees(p), world_size=8192)


def test_main_job_export_accepted_by_deepspeed(tmp_path):
    doc, text = _main_job_export("deepspeed", tmp_path)
    lay = doc["layouts"][0]
    ds = deepspeed_config(json.loads(text), lay["degrees"]["dp"] * lay["degrees"]["fsdp"])
    assert ds.train_batch_size == 1024


def test_megatron_core_rejects_a_split_that_does_not_add_up():
    """The uneven split flags are checked by megatron-core itself: 7 + 14 x m + 8 != 126 is refused."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    doc = json.loads(json.dumps(UNEVEN_FL))
    text = export_document(doc, "megatron").replace(
        "--decoder-first-pipeline-num-layers 6", "--decoder-first-pipeline-num-layers 7"
    )
    a = parse_args(text)
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    with pytest.raises(ValueError, match="middle"):
        tc.TransformerConfig(
            num_layers=int(a["--num-layers"]),
            hidden_size=int(a["--hidden-size"]),
            num_attention_heads=int(a["--num-attention-heads"]),
            pipeline_model_parallel_size=int(a["--pipeline-model-parallel-size"]),
            num_layers_in_first_pipeline_stage=int(a["--decoder-first-pipeline-num-layers"]),
            num_layers_in_last_pipeline_stage=int(a["--decoder-last-pipeline-num-layers"]),
            pipeline_dtype=torch.bfloat16,
        )


def test_torchtitan_reads_the_fp8_sections_of_an_fp8_export(tmp_path):
    """An fp8 export names torchao's Float8Linear converter and fp8 FSDP all-gathers in keys torchtitan parses;
    per-tensor scaling is torchtitan's default recipe (recipe_name unset), the only one it gathers in fp8."""
    manager = pytest.importorskip("torchtitan.config.manager")
    doc = json.loads(json.dumps(FSDP_TP))
    doc["problem"]["workload"]["precision"] = "fp8"
    path = tmp_path / "job.toml"
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    assert job.model.converters == ["quantize.linear.float8"]
    assert job.quantize.linear.float8.enable_fsdp_float8_all_gather is True
    assert job.quantize.linear.float8.recipe_name is None


def test_torchtitan_reads_async_tp_when_the_prediction_overlaps_tp(tmp_path):
    """With TP overlap assumed, the torchtitan file turns on async TP and the compile it needs; torchtitan parses both.
    Without it, compile stays on (the prediction costed fused element-wise kernels); eager only where costed so."""
    manager = pytest.importorskip("torchtitan.config.manager")
    doc = json.loads(json.dumps(FSDP_TP))
    doc["problem"]["workload"]["tp_comm_overlap"] = True
    path = tmp_path / "job.toml"
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    assert job.parallelism.enable_async_tensor_parallel is True and job.compile.enable is True
    doc["problem"]["workload"]["tp_comm_overlap"] = False
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    assert job.parallelism.enable_async_tensor_parallel is False and job.compile.enable is True
    doc["problem"]["workload"].update(framework="torchtitan", torch_compile=False)
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    # an eager model runs an eager loss (Workload.compiled_loss): the components name the model alone
    assert job.compile.enable is False and job.compile.components == ["model"]


def test_megatron_core_takes_the_fp4_flags_of_an_fp4_export():
    """An fp4 export writes --fp4-format e2m1 --fp4-recipe nvfp4: megatron-core's TransformerConfig builds with
    them as its fp4 and fp4_recipe fields (its __post_init__ refuses fp4 beside fp8, and an unknown recipe)."""
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    cfg, a = megatron_config(fp4_doc())
    fp4 = dataclasses.replace(cfg, fp4=a["--fp4-format"], fp4_recipe=a["--fp4-recipe"])
    assert isinstance(fp4, tc.TransformerConfig)
    assert (fp4.fp4, fp4.fp4_recipe, fp4.fp8) == ("e2m1", "nvfp4", None)
    with pytest.raises(ValueError, match="fp4 and fp8 cannot be used simultaneously"):
        dataclasses.replace(fp4, fp8="hybrid")


def deepseek_v3_megatron_args(cluster: str, lay: Layout) -> dict:
    """The Megatron arguments exported for DeepSeek-V3's fp8 batch (4096 sequences of 4096 tokens) on ``cluster``
    at ``lay`` (estimated with strict=False)."""
    from layoutsearch.core.problem import Problem, build_workload
    from layoutsearch.costs.estimate import estimate
    from layoutsearch.report.output import estimate_document

    problem = Problem.build("deepseek-v3", cluster, build_workload(4096, 4096, precision="fp8"))
    return parse_args(
        export_document(estimate_document(estimate(problem, lay, strict=False)), "megatron")
    )


def test_megatron_core_accepts_the_chunk_layout_of_deepseek_v3(tmp_path):
    """61 layers + embedding + loss (+ the MTP module) over pp=4 x 4 virtual stages, as NVIDIA's DeepSeek-V3
    recipes run them: the exported --pipeline-model-parallel-layout passes megatron-core's own layout checks."""
    layouts = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
    PipelineParallelLayerLayout = layouts.PipelineParallelLayerLayout
    lay = Layout(
        fsdp=64,
        pp=4,
        ep=64,
        virtual_stages=4,
        schedule="interleaved",
        zero_stage=1,
        num_microbatches=64,
        recompute="selective",
    )
    args = deepseek_v3_megatron_args("gb200-256", lay)
    layout = args["--pipeline-model-parallel-layout"]
    assert layout.count("|") == 15 and layout.startswith("Ettt|") and layout.endswith("|ttmL")
    assert "--num-virtual-stages-per-pipeline-rank" not in args
    parsed = PipelineParallelLayerLayout(layout, 4)
    parsed.validate_layer_layout(61, 1)
    assert parsed.virtual_pipeline_model_parallel_size == 4


def test_megatron_core_accepts_the_megatron_bridge_deepseek_v3_split():
    """Megatron-Bridge's DeepSeek-V3 recipe on pp=8 x 2 virtual stages (mapping rule 23: 8 layers on the first
    stage, 5 with the MTP module and the loss on the last): first/last counts the virtual stages do not divide are
    exported as chunks, and megatron-core's own layout checks take them."""
    layouts = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
    layout = deepseek_v3_megatron_args("b200-256", DSV3_BRIDGE_LAYOUT)[
        "--pipeline-model-parallel-layout"
    ]
    assert layout == "Etttt|" + "tttt|" * 14 + "tmL"
    parsed = layouts.PipelineParallelLayerLayout(layout, 8)
    parsed.validate_layer_layout(61, 1)
    assert parsed.virtual_pipeline_model_parallel_size == 2
