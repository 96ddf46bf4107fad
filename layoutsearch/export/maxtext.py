"""MaxText: a YAML override of ``base.yml`` (AI-Hypercomputer/maxtext, src/maxtext/configs).

Mapping (checked against maxtext 0.2.5: configs/base.yml, configs/types.py, layers/nnx_decoders.py):

- Degrees become ``ici_<axis>_parallelism`` (inside a slice; on GPUs inside a node) and
  ``dcn_<axis>_parallelism`` (across slices/nodes): dp -> data, fsdp -> fsdp (ZeRO-3) or data
  (ZeRO-0; ZeRO-1 adds ``shard_optimizer_over_data``), tp -> tensor, cp -> context,
  pp -> pipeline. Products: ici = devices per slice, dcn = ``num_slices``; on GPUs a node is a
  slice and a multi-node file sets ``num_slices`` (MaxText finds one slice on GPUs by itself).
- Batch: MaxText's global batch = devices x ``per_device_batch_size`` x
  ``gradient_accumulation_steps``; microbatches become accumulation steps without pipeline
  and ``num_pipeline_microbatches`` with it.
- Recompute: none -> ``minimal_with_context`` (saves every matmul output and the attention
  context; MaxText's ``none`` would become full remat under scanned layers), selective ->
  ``minimal`` (recomputes the attention core and element-wise ops), full -> ``full``; MaxText's
  own policy names as they are (``qkv_proj_offloaded`` and ``minimal_offloaded`` keep their tensors
  in host memory); ``custom_offload_*`` -> ``remat_policy: custom`` with ``decoder_layer_input`` and
  the named projections set to ``offload``, every other tensor ``remat`` (the tpu-recipes configs).
- Offload (configs/base.yml): optimizer -> ``optimizer_memory_host_offload: true`` (the optimizer
  state in pinned host memory between steps, streamed in for the device update); params -> that and
  ``parameter_memory_host_offload: true``.
- Hyper-parameters: ``rope_max_timescale`` (the RoPE base), ``rope_type: llama3.1`` for Llama 3.1
  scaling (MaxText fixes factor 8, low 1, high 4, original 8192), ``normalization_layer_epsilon``,
  ``dropout_rate`` (one rate for attention and residual; ``enable_dropout`` is base.yml's true),
  ``mlp_activations``. ``model_name`` names MaxText's own model config (configs/models/*.yml)
  when every size and hyper-parameter equals it; pyconfig refuses a key set by both the model
  config and the override with different values, so a match is exact or ``default``.
- Not decided (``<set me: ...>`` under ``# PLACEHOLDER``): dataset, tokenizer, learning rate,
  steps, output/checkpoint directory; written as comments, since pyconfig would load a value.
- Mixture of experts (configs/base.yml "mixture of experts (moe)", "deepseek moe", configs/models/
  mixtral-8x7b.yml, deepseek3-671b.yml, qwen3-30b-a3b.yml, llama4-17b-16e.yml): ``decoder_block`` mixtral,
  deepseek, qwen3_moe or llama4, ``num_experts``, ``num_experts_per_tok``, ``base_moe_mlp_dim``, ``megablox`` and
  ``sparse_matmul`` (dropless grouped matmuls), ``capacity_factor`` (-1 = dropless; with a capacity factor
  ``sparse_matmul`` and ``megablox`` false: MaxText's sparse path ignores the capacity, its dense einsum path
  drops and pads every expert to it, as the cost model does),
  ``first_num_dense_layers`` and ``shared_experts`` (DeepSeek; a shared expert is as wide as a routed
  one), ``routed_bias`` with ``routed_score_func: sigmoid`` for a router bias, ``use_qk_norm`` (Qwen3),
  ``attention_type: mla`` with its ranks and head widths, ``mtp_num_layers``; Llama 4's
  ``interleave_moe_layer_step``, ``nope_layer_interval``, ``inhomogeneous_layer_cycle_interval`` (their least
  common multiple), ``chunk_attn_window_size`` (chunks on the RoPE layers) and ``use_qk_norm`` (its L2 norm).
  The ``expert`` mesh axis (``ici_/dcn_expert_parallelism``) is ep: MaxText shards the batch and the dense
  weights over it as over fsdp, so it is carved out of the layout's fsdp (fsdp axis = fsdp / ep) with
  ZeRO-3, and it shards the experts' FFN over the tensor axis (etp = tp).
- TP communication overlap (the prediction's ``Workload.tp_comm_overlap``) is a compiler flag, not a
  config key: with tp > 1 the header names the environment the prediction assumed. On TPUs libtpu's
  continuation fusion is on by default (MaxText's benchmarks/xla_flags_library.py ``CF_FOR_ALL_GATHER``
  sets it again); a prediction made with TP exposed says how to turn it off. On GPUs XLA's collective
  matmul needs ``XLA_FLAGS`` (MaxText's GPU recipes: ``--xla_gpu_threshold_for_windowed_einsum_mib=0
  --xla_gpu_multi_streamed_windowed_einsum=true``).
- Not expressible: ZeRO-2; ZeRO-1 with dp replicas; KV-head replication (tp > kv heads);
  1F1B and interleaved pipelines (MaxText's pipeline runs in GPipe order, circular when
  ``num_pipeline_repeats`` > 1); cp without ZeRO-3 (MaxText shards weights over ``context``).
"""

from __future__ import annotations

import math

import yaml

from layoutsearch.core.rules import deepseek_block, gpt3_block, llama4_block, qwen3_moe_block
from layoutsearch.core.specs import ModelSpec, Recompute
from layoutsearch.costs import memory
from layoutsearch.export.context import (
    ExportContext,
    comment_block,
    header_lines,
    mtp_notes,
    placeholder_note,
    set_me,
    yaml_value,
)
from layoutsearch.export.rank_order import MAXTEXT_MESH_AXES, maxtext_torus_check
from layoutsearch.frameworks import maxtext as declaration

AXES = ("data", "fsdp", "tensor", "context", "pipeline", "expert")
REMAT_POLICIES = tuple(
    "minimal_with_context minimal save_dot_with_context_except_mlp save_dot_except_mlpwi "
    "save_dot_except_mlp save_qkv_proj qkv_proj_offloaded custom minimal_offloaded "
    "save_out_proj full".split()
)
# layoutsearch's policies -> remat_policy: MaxText's own names as they are (costs.memory.POLICY_SAVES
# models each); none and selective by their nearest (MaxText's none rematerialises scanned layers fully)
# The engine's saved tensors (costs.memory.PRODUCER) -> MaxText's checkpoint names for them (configs/base.yml)
CHECKPOINT_NAMES = {
    "attn_norm_in": ("decoder_layer_input",),
    "q": ("query_proj", "qkv_proj"),
    "k": ("key_proj",),
    "v": ("value_proj",),
    "qk_norm_in": ("query_proj", "key_proj"),
    "mlp_norm_in": ("out_proj",),
    "post_norm_in": ("out_proj",),
}
# The offloading policies MaxText has no name for: remat_policy custom with the tensors costs.memory.OFFLOADED
# puts on the host set to 'offload', every other name at base.yml's 'remat' (decoder_layer_input: 'device')
CUSTOM_OFFLOADS = {
    policy: tuple(sorted({name for tensor in hosted for name in CHECKPOINT_NAMES.get(tensor, ())}))
    for policy, (_, hosted) in memory.OFFLOADED.items()
    if policy not in REMAT_POLICIES
}
REMAT = {
    "none": "minimal_with_context",
    "selective": "minimal",
    **{p.value: p.value for p in Recompute if p.value in REMAT_POLICIES},
    **dict.fromkeys(CUSTOM_OFFLOADS, "custom"),
}


def remat_keys(policy: str) -> dict:
    """The remat_policy key, with the custom policy's per-tensor locations."""
    return {
        "remat_policy": REMAT[policy],
        **dict.fromkeys(CUSTOM_OFFLOADS.get(policy, ()), "offload"),
    }


# Continuation fusion (TPU) and collective matmul (GPU): the compiler flags of TP communication overlap
TPU_TP_OVERLAP_FLAGS = (
    "--xla_tpu_enable_async_collective_fusion=true "
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true "
    "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true"
)
GPU_TP_OVERLAP_FLAGS = (
    "--xla_gpu_threshold_for_windowed_einsum_mib=0 --xla_gpu_multi_streamed_windowed_einsum=true"
)
BASE_DEFAULTS = {
    "ici_fsdp_parallelism": -1,
    "dcn_data_parallelism": -1,
}  # base.yml auto-sharded axes


def slice_shape(ctx: ExportContext) -> tuple[int, int]:
    """(devices per slice, number of slices): a TPU ICI slice, or a GPU node (MaxText's GPU convention)."""
    outer = math.prod(a.size for a in ctx.cluster.axes if a.kind in ("dcn", "scale_out"))
    return ctx.num_devices // outer, outer


def gpu_slices(ctx: ExportContext) -> dict:
    """``num_slices`` for a multi-node GPU job: MaxText counts TPU slices by itself, but GPUs carry no
    slice index, so without the key it finds one slice and refuses dcn_* parallelism ("DCN parallelism
    requested but only one slice available", configs/types.py)."""
    slices = slice_shape(ctx)[1]
    return {"num_slices": slices} if ctx.cluster.accelerator.kind == "gpu" and slices > 1 else {}


# each policy the framework declares has a remat_policy
assert tuple(REMAT) == declaration.CAPABILITIES.recompute_policies


def expert_split(ctx: ExportContext) -> tuple[int, int]:
    """(ici, dcn) factors of the expert axis, taken out of fsdp's (inside, across) split: the engine's
    placement of ep where it nests in fsdp's, else the largest inner factor that does."""
    ep = ctx.layout.ep
    if ep == 1:
        return 1, 1
    inner, outer = ctx.split("fsdp")
    placed = ctx.split("ep")
    if placed[0] * placed[1] == ep and inner % placed[0] == 0 and outer % placed[1] == 0:
        return placed
    ici = math.gcd(ep, inner)
    if outer % (ep // ici):
        raise ctx.fail(
            f"ep({ep}) does not fit in fsdp's {inner} devices per slice x {outer} slices "
            f"(MaxText's expert axis is part of fsdp); nearest: an ep dividing {inner}"
        )
    return ici, ep // ici


def parallelism(ctx: ExportContext) -> dict[str, int]:
    """ici_* and dcn_* degrees per MaxText mesh axis (the expert axis carved out of fsdp)."""
    data_degrees = ("dp",) if ctx.effective_zero_stage == 3 else ("dp", "fsdp")
    groups = {
        "data": data_degrees,
        "fsdp": ("fsdp",) if ctx.effective_zero_stage == 3 else (),
        "tensor": ("tp",),
        "context": ("cp",),
        "pipeline": ("pp",),
        "expert": (),
    }
    expert = expert_split(ctx)
    out: dict[str, int] = {}
    for level, index in (("ici", 0), ("dcn", 1)):
        for axis in AXES:
            if axis == "expert" and ctx.model.moe is None:
                continue
            degree = math.prod(ctx.split(d)[index] for d in groups[axis])
            if axis == "fsdp":
                degree //= expert[index]
            elif axis == "expert":
                degree = expert[index]
            out[f"{level}_{axis}_parallelism"] = degree
    return out


def batch_keys(ctx: ExportContext) -> dict:
    """per_device_batch_size (sequences per device per accumulation step), accumulation, pipeline microbatches."""
    lay = ctx.layout
    accumulation = 1 if lay.pp > 1 else lay.num_microbatches
    per_step = (
        ctx.global_batch_seqs // accumulation
    )  # sequences in one forward pass of the whole cluster
    per_device = per_step / ctx.num_devices
    if int(ctx.num_devices * per_device) != per_step:
        raise ctx.fail(
            f"per_device_batch_size {per_step}/{ctx.num_devices} is not exact in floating point; "
            f"nearest: a batch of {ctx.num_devices * max(1, round(per_device))} sequences per step"
        )
    keys: dict = {
        "per_device_batch_size": int(per_device) if per_device.is_integer() else per_device,
        "gradient_accumulation_steps": accumulation,
        "max_target_length": ctx.seq_len,
    }
    if lay.pp > 1:
        keys.update(
            num_pipeline_microbatches=lay.num_microbatches,
            num_pipeline_repeats=1,
            num_layers_per_pipeline_stage=ctx.model.num_layers // lay.pp,
        )
    return keys


# MaxText 0.2.5 configs/models/<name>.yml: (d_model, heads, kv heads, layers, d_ff, head_dim, vocab, RoPE base,
# llama3.1 scaling). Each is a llama2 block, SwiGLU, untied, RMSNorm epsilon 1e-5, dropout disabled.
MAXTEXT_MODELS = {
    "llama2-7b": (4096, 32, 32, 32, 11008, 128, 32000, 10000, False),
    "llama2-13b": (5120, 40, 40, 40, 13824, 128, 32000, 10000, False),
    "llama2-70b": (8192, 64, 8, 80, 28672, 128, 32000, 10000, False),
    "llama3-8b": (4096, 32, 8, 32, 14336, 128, 128256, 500000, False),
    "llama3-70b": (8192, 64, 8, 80, 28672, 128, 128256, 500000, False),
    "llama3-405b": (16384, 128, 8, 126, 53248, 128, 128256, 500000, False),
    "llama3.1-8b": (4096, 32, 8, 32, 14336, 128, 128256, 500000, True),
    "llama3.1-70b": (8192, 64, 8, 80, 28672, 128, 128256, 500000, True),
    "llama3.1-405b": (16384, 128, 8, 126, 53248, 128, 128256, 500000, True),
}
MAXTEXT_ROPE_FIXED = (
    8.0,
    1.0,
    4.0,
    8192,
)  # LLaMARotaryEmbedding: factor, low, high, original context


def maxtext_model_name(ctx: ExportContext) -> str:
    """The MaxText model config with exactly this model's sizes and hyper-parameters, else "default"."""
    m = ctx.model
    if (
        m.moe is not None
        or m.mla is not None
        or m.mlp != "gated"
        or m.norm != "rmsnorm"
        or m.linear_bias
        or m.qkv_bias
        or m.tied_embeddings
        or m.learned_positions
        or m.qk_norm != "none"
        or m.sliding_window is not None
        or m.norms_per_layer != 2
        or m.parallel_block
        or not m.norm_weights
        or m.norm_eps != 1e-5
        or m.activation_name != "silu"
        or m.attention_dropout
        or m.hidden_dropout
        or (m.rope_scaling is not None and _rope_fixed(m) != MAXTEXT_ROPE_FIXED)
    ):
        return "default"
    key = (
        m.d_model,
        m.num_heads,
        m.num_kv_heads,
        m.num_layers,
        m.d_ff,
        m.head_dim,
        m.vocab_size,
        m.rope_theta,
        m.rope_scaling is not None,
    )
    return next((name for name, sizes in MAXTEXT_MODELS.items() if sizes == key), "default")


def _rope_fixed(m) -> tuple:
    r = m.rope_scaling
    return (r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings)


def decoder_block(m) -> str:
    """MaxText's decoder block for the model (the capabilities admit only these)."""
    if gpt3_block(m):
        return "gpt3"
    if m.moe is None:
        return "llama2"
    if llama4_block(m):
        return "llama4"
    return "deepseek" if deepseek_block(m) else "qwen3_moe" if qwen3_moe_block(m) else "mixtral"


def moe_keys(ctx: ExportContext) -> dict:
    """base.yml's mixture-of-experts and latent-attention keys for the model."""
    m = ctx.model
    if m.moe is None:
        return {}
    moe = m.moe
    dropless = (
        moe.capacity_factor is None
    )  # MaxText drops (and pads to capacity) only in its dense einsum path
    keys: dict = {
        "num_experts": moe.num_experts,
        "num_experts_per_tok": moe.top_k,
        "base_moe_mlp_dim": moe.expert_d_ff,
        "megablox": dropless,
        "sparse_matmul": dropless,
        "capacity_factor": -1.0 if dropless else float(moe.capacity_factor),
    }
    block = decoder_block(m)
    if block == "deepseek":
        keys.update(
            first_num_dense_layers=moe.first_dense_layers, shared_experts=moe.num_shared_experts
        )
        if moe.router_bias:
            keys.update(routed_bias=True, routed_score_func="sigmoid")
        a = m.mla
        keys.update(
            attention_type="mla",
            q_lora_rank=a.q_lora_rank or 0,
            kv_lora_rank=a.kv_lora_rank,
            qk_nope_head_dim=a.qk_nope_head_dim,
            qk_rope_head_dim=a.qk_rope_head_dim,
            v_head_dim=a.v_head_dim,
        )
        if m.mtp_layers:
            keys["mtp_num_layers"] = m.mtp_layers
    elif block == "qwen3_moe":
        keys.update(use_qk_norm=True, norm_topk_prob=True)
    elif block == "llama4":  # configs/models/llama4-17b-16e.yml and -128e.yml
        nope = m.nope_interval
        keys.update(
            shared_experts=moe.num_shared_experts,
            interleave_moe_layer_step=moe.layer_freq,
            nope_layer_interval=nope,
            inhomogeneous_layer_cycle_interval=math.lcm(nope, moe.layer_freq),
            chunk_attn_window_size=m.attention_chunk,
            use_qk_norm=m.qk_norm == "l2",
        )
    return keys


def _dimension_keys(m: ModelSpec) -> dict:
    """The model's dimensions as MaxText's keys (written, and checked in a file read back)."""
    return {
        "base_emb_dim": m.d_model,
        "base_num_query_heads": m.num_heads,
        "base_num_kv_heads": m.num_kv_heads,
        "base_mlp_dim": m.d_ff,
        "base_num_decoder_layers": m.num_layers,
        "head_dim": m.head_dim,
        "vocab_size": m.vocab_size,
    }


def model_keys(ctx: ExportContext) -> dict:
    m = ctx.model
    keys = {
        "model_name": maxtext_model_name(ctx),
        "decoder_block": decoder_block(m),
        **_dimension_keys(m),
        "mlp_activations": ["silu", "linear"] if m.mlp == "gated" else ["gelu"],
        "logits_via_embedding": m.tied_embeddings,
        "normalization_layer_epsilon": float(m.norm_eps),
        "dropout_rate": float(max(m.attention_dropout, m.hidden_dropout)),
    }
    if gpt3_block(m):
        keys["trainable_position_size"] = m.learned_positions
    else:
        keys["rope_max_timescale"] = (
            int(m.rope_theta) if float(m.rope_theta).is_integer() else float(m.rope_theta)
        )
        if m.rope_scaling is not None:
            keys["rope_type"] = "llama3.1"
    if not ctx.workload.flash_attention:  # materialised scores, as costed (--no-fused-attention)
        keys["attention"] = "dot_product"
    if not ctx.workload.fp32_logits:  # the loss on bf16 logits, as costed (--no-fp32-logits)
        keys["cast_logits_to_fp32"] = False
    return keys | moe_keys(ctx)


def costed_mesh(ctx: ExportContext) -> dict[str, dict[str, int]]:
    """MaxText mesh axis -> {torus axis: factor} of the costed placement (the expert axis's factors
    taken out of fsdp's, as ``parallelism`` does); DCN is not a torus axis."""
    torus = {a.name for a in ctx.cluster.axes if a.kind == "torus"}
    zero3 = ctx.effective_zero_stage == 3
    groups = {
        "data": ("dp",) if zero3 else ("dp", "fsdp"),
        "pipeline": ("pp",),
        "fsdp": ("fsdp",) if zero3 else (),
        "context": ("cp",),
        "tensor": ("tp",),
        "expert": ("ep",) if ctx.model.moe is not None else (),
    }
    out: dict[str, dict[str, int]] = {}
    for name, degrees in groups.items():
        placed: dict[str, int] = {}
        for degree in degrees:
            for axis, f in ctx.layout.placement(degree):
                if axis in torus:
                    placed[axis] = placed.get(axis, 1) * f
        out[name] = placed
    for axis, f in out["expert"].items():
        out["fsdp"][axis] = out["fsdp"].get(axis, 1) // f
    out["fsdp"] = {axis: f for axis, f in out["fsdp"].items() if f > 1}
    return out


def mesh_lines(ctx: ExportContext, par: dict[str, int]) -> list[str]:
    """Whether MaxText's own device mesh is the costed placement (TPU slices; rank_order)."""
    if ctx.cluster.accelerator.kind != "tpu":
        return [
            "Mesh on GPUs: MaxText orders devices by id in mesh_axes order; each degree keeps its ici (in a node) "
            "and dcn (across nodes) factors, which is what the costed time depends on there."
        ]
    ici = {axis: par.get(f"ici_{axis}_parallelism", 1) for axis in MAXTEXT_MESH_AXES}
    lines = maxtext_torus_check(ctx.cluster, ici, costed_mesh(ctx))
    return lines or [
        "Mesh: MaxText's create_device_mesh lays each ici_* axis on the torus axes the search costed."
    ]


def render(ctx: ExportContext) -> str:
    """The override file text."""
    hardware = "tpu" if ctx.cluster.accelerator.kind == "tpu" else "gpu"
    per_slice, slices = slice_shape(ctx)
    par = parallelism(ctx)
    mesh = mesh_lines(ctx, par)
    split = {"allow_split_physical_axes": True} if mesh[0].startswith("allow_split") else {}
    notes = (
        header_lines(ctx)
        + [
            f"MaxText mesh: {slices} slice(s) of {per_slice} devices (ici_* inside a slice/node, dcn_* across); "
            "the physical placement above is what layoutsearch assumed; MaxText builds its own device mesh.",
            f"remat_policy {REMAT[ctx.layout.recompute]} stands for layoutsearch recompute '{ctx.layout.recompute}' "
            "(none -> minimal_with_context, selective -> minimal, full -> full; custom_offload_* -> custom with the "
            "named tensors offloaded to host memory).",
            "Usage: python3 -m maxtext.trainers.pre_train.train THIS_FILE run_name=... base_output_directory=... dataset_path=...",
        ]
        + mesh
        + tp_overlap_notes(ctx)
        + _model_notes(ctx)
    )
    sections = [
        (
            "model (explicit sizes; a model_name other than 'default' is MaxText's config with these same values)",
            model_keys(ctx),
        ),
        (
            "batch: global = devices x per_device_batch_size x gradient_accumulation_steps",
            batch_keys(ctx),
        ),
        (
            "parallelism",
            {
                "hardware": hardware,
                **gpu_slices(ctx),
                **par,
                **split,
                **({"shard_optimizer_over_data": True} if ctx.effective_zero_stage == 1 else {}),
                **cp_keys(ctx),
            },
        ),
        ("activation rematerialisation", remat_keys(ctx.layout.recompute)),
        *(
            [("model state in host memory", offload_keys(ctx.layout.offload))]
            if ctx.layout.offload != "none"
            else []
        ),
        *([("fp8 matmuls", {"quantization": "fp8"})] if ctx.workload.precision == "fp8" else []),
    ]
    body = 'base_config: "base.yml"\n'
    for title, keys in sections:
        body += f"\n# {title}\n" + "".join(f"{k}: {yaml_value(v)}\n" for k, v in keys.items())
    return comment_block(notes) + body + "\n" + comment_block(placeholder_lines())


# Layout.cp_flavour -> configs/types.py context_parallel_strategy (the capabilities refuse the rest)
CP_STRATEGY = {"ring": "ring", "allgather": "all_gather"}


def cp_keys(ctx: ExportContext) -> dict:
    """context_parallel_strategy of the layout's CP flavour where cp > 1 (MaxText's default, all_gather,
    written too: the file states what the prediction assumed); ring on TPUs is Tokamax's splash ring
    attention, which configs/types.py takes with attention flash and use_tokamax_splash (and no
    packing with MLA)."""
    lay = ctx.layout
    if lay.cp == 1:
        return {}
    keys: dict = {"context_parallel_strategy": CP_STRATEGY[lay.cp_flavour]}
    if lay.cp_flavour == "ring" and ctx.cluster.accelerator.kind == "tpu":
        keys.update(attention="flash", use_tokamax_splash=True)
        if ctx.model.mla is not None:
            keys["packing"] = False
    return keys


OFFLOAD_KEYS = ("optimizer_memory_host_offload", "parameter_memory_host_offload")


def offload_keys(offload: str) -> dict:
    """base.yml's host-offload switches of an offload choice (both false for none)."""
    return dict(zip(OFFLOAD_KEYS, (offload != "none", offload == "params")))


def tp_overlap_notes(ctx: ExportContext) -> list[str]:
    """The compiler environment the predicted TP communication matches (module docstring); none without TP."""
    if ctx.layout.tp == 1:
        return []
    if ctx.cluster.accelerator.kind == "tpu":
        if ctx.workload.tp_comm_overlap:
            return [
                f"TP collectives run beside the matmuls as predicted (libtpu default; to make sure, as MaxText's "
                f'benchmarks do): LIBTPU_INIT_ARGS="{TPU_TP_OVERLAP_FLAGS}"'
            ]
        return [
            "the prediction has TP collectives on the critical path (--no-tp-comm-overlap); libtpu overlaps them "
            'by default: LIBTPU_INIT_ARGS="--xla_tpu_enable_async_collective_fusion=false" matches it'
        ]
    if ctx.workload.tp_comm_overlap:
        return [
            f"the prediction overlaps TP collectives with their matmuls (XLA collective matmul): "
            f'XLA_FLAGS="{GPU_TP_OVERLAP_FLAGS}"'
        ]
    return []


def placeholder_lines() -> list[str]:
    """What layoutsearch does not decide, as commented keys (MaxText's base.yml names)."""
    return [
        placeholder_note(),
        f"PLACEHOLDER: run_name: {set_me('run name')}",
        f"PLACEHOLDER: base_output_directory: {set_me('gs:// or local directory for checkpoints and logs')}",
        f"PLACEHOLDER: dataset_type: {set_me('tfds, grain or hf')}",
        f"PLACEHOLDER: dataset_path: {set_me('training data')}",
        f"PLACEHOLDER: tokenizer_path: {set_me('tokenizer')}",
        f"PLACEHOLDER: learning_rate: {set_me('peak learning rate')}",
        f"PLACEHOLDER: steps: {set_me('training steps')}",
        f"PLACEHOLDER: load_parameters_path: {set_me('checkpoint to start from, or leave unset')}",
    ]


def _moe_notes(ctx: ExportContext) -> list[str]:
    m, lay = ctx.model, ctx.layout
    if m.moe is None:
        return []
    return [
        f"experts: {m.moe.num_experts} per MoE layer; the expert axis ({lay.ep}) is carved out of fsdp "
        f"({lay.fsdp} = fsdp axis {lay.fsdp // lay.ep} x expert {lay.ep}); their FFN is sharded over the "
        f"tensor axis (etp = tp = {lay.tp}). Router recipe (load_balance_loss_weight, routed_scaling_factor, "
        f"expert groups) not decided by layoutsearch."
    ]


def _model_notes(ctx: ExportContext) -> list[str]:
    m = ctx.model
    notes = _moe_notes(ctx) + mtp_notes(ctx, "mtp_num_layers")
    if decoder_block(m) == "llama4":
        notes.append(
            "temperature_tuning (Llama 4's query temperature scaling on its NoPE layers) is left at base.yml's "
            "false: the model spec does not carry it and the prediction does not cost it; set it true to "
            "train Llama 4 as published."
        )
    if m.rope_scaling is not None and _rope_fixed(m) != MAXTEXT_ROPE_FIXED:
        notes.append(
            "rope scaling: MaxText's llama3.1 RoPE fixes factor 8, low 1, high 4, original context 8192; "
            f"this model has {', '.join(f'{v:g}' for v in _rope_fixed(m))}."
        )
    if m.attention_dropout != m.hidden_dropout:
        notes.append(
            f"dropout: MaxText has one dropout_rate; written as the larger of attention "
            f"{m.attention_dropout:g} and hidden {m.hidden_dropout:g}."
        )
    if m.activation_name not in ("silu", "gelu"):
        notes.append(
            f"activation {m.activation_name}: written as MaxText's "
            f"{'silu' if m.mlp == 'gated' else 'gelu'}; change mlp_activations to match."
        )
    return notes


# ----------------------------------------------------------------------------- checker
def resolved_parallelism(
    cfg: dict, per_slice: int, slices: int
) -> tuple[dict[str, int], list[str]]:
    """ici/dcn degrees with base.yml defaults and MaxText's single -1 per level filled with the remainder."""
    problems: list[str] = []
    out: dict[str, int] = {}
    for level, total in (("ici", per_slice), ("dcn", slices)):
        keys = [k for k in cfg if k.startswith(f"{level}_") and k.endswith("_parallelism")]
        keys += [k for k in BASE_DEFAULTS if k.startswith(level) and k not in cfg]
        values = {k: int(cfg.get(k, BASE_DEFAULTS.get(k, 1))) for k in keys}
        auto = [k for k, v in values.items() if v == -1]
        known = math.prod(v for v in values.values() if v != -1)
        if len(auto) > 1:
            problems.append(f"more than one {level}_* axis is -1: {', '.join(auto)}")
        elif auto:
            if total % known:
                problems.append(
                    f"{level}_* fixed axes multiply to {known}, which does not divide {total}"
                )
            values[auto[0]] = total // known
        product = math.prod(values.values())
        if product != total:
            factors = " x ".join(f"{k}({v})" for k, v in values.items() if v != 1) or "1"
            where = "devices per slice" if level == "ici" else "num_slices"
            problems.append(f"{level}_* product {factors} = {product}, but {where} is {total}")
        out.update(values)
    return out, problems


def check(text: str, ctx: ExportContext) -> list[str]:
    """MaxText's own rules (configs/types.py) and agreement with the layout, on the written file."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not valid YAML: {exc}"]
    if not isinstance(cfg, dict):
        return ["not a YAML mapping"]
    per_slice, slices = slice_shape(ctx)
    par, problems = resolved_parallelism(cfg, per_slice, slices)
    deg = {a: par.get(f"ici_{a}_parallelism", 1) * par.get(f"dcn_{a}_parallelism", 1) for a in AXES}
    problems += _batch_problems(cfg, deg, ctx) + _model_problems(cfg, deg, ctx)
    lay = ctx.layout
    expected = {
        "tensor": lay.tp,
        "context": lay.cp,
        "pipeline": lay.pp,
        "data": lay.dp * (1 if ctx.effective_zero_stage == 3 else lay.fsdp),
        "fsdp": lay.fsdp // lay.ep if ctx.effective_zero_stage == 3 else 1,
        "expert": lay.ep,
    }
    problems += [
        f"{a} degree {deg[a]} != layout {expected[a]}" for a in AXES if deg[a] != expected[a]
    ]
    dcn = [k for k, v in par.items() if k.startswith("dcn_") and v > 1]
    if dcn and cfg.get("num_slices", -1) != slices and ctx.cluster.accelerator.kind == "gpu":
        problems.append(
            f"{', '.join(dcn)} across {slices} GPU nodes needs num_slices {slices}, got "
            f"{cfg.get('num_slices', 'none')}"
        )
    if cfg.get("shard_optimizer_over_data") and deg["fsdp"] > 1:
        problems.append(f"shard_optimizer_over_data cannot be combined with fsdp({deg['fsdp']})")
    written = {k: bool(cfg.get(k, False)) for k in OFFLOAD_KEYS}
    if written != offload_keys(lay.offload):
        problems.append(f"host offload keys {written} != layout offload {lay.offload}")
    if cfg.get("remat_policy", "full") not in REMAT_POLICIES:
        problems.append(f"remat_policy '{cfg.get('remat_policy')}' is not a MaxText policy")
    elif remat_keys(lay.recompute) != {
        k: cfg.get(k, "full" if k == "remat_policy" else None) for k in remat_keys(lay.recompute)
    }:
        problems.append(
            f"remat keys { ({k: cfg.get(k) for k in remat_keys(lay.recompute)}) } != layout "
            f"recompute {lay.recompute} ({remat_keys(lay.recompute)})"
        )
    return problems


def _batch_problems(cfg: dict, deg: dict[str, int], ctx: ExportContext) -> list[str]:
    out = []
    pdbs = float(cfg.get("per_device_batch_size", 12.0))
    accumulation = int(cfg.get("gradient_accumulation_steps", 1))
    micro = int(ctx.num_devices * pdbs)  # MaxText's micro_batch_size_to_train_on
    if micro * accumulation != ctx.global_batch_seqs:
        out.append(
            f"global batch int({ctx.num_devices} x {pdbs}) x {accumulation} = {micro * accumulation}, "
            f"problem says {ctx.global_batch_seqs}"
        )
    if int(cfg.get("max_target_length", 2048)) != ctx.seq_len:
        out.append(f"max_target_length {cfg.get('max_target_length')} != seq_len {ctx.seq_len}")
    stages = deg["pipeline"]
    pieces = 1
    if stages > 1:
        nmb = int(cfg.get("num_pipeline_microbatches", -1))
        nmb = stages if nmb == -1 else nmb
        pieces = nmb
        if nmb % stages:
            out.append(f"num_pipeline_microbatches({nmb}) is not divisible by the {stages} stages")
        if micro % nmb:
            out.append(
                f"batch per forward pass {micro} is not divisible by num_pipeline_microbatches({nmb})"
            )
        layers = int(cfg.get("base_num_decoder_layers", 16))
        repeats = int(cfg.get("num_pipeline_repeats", -1))
        per_stage = int(cfg.get("num_layers_per_pipeline_stage", 1))
        repeats = layers // (stages * per_stage) if repeats == -1 else repeats
        if stages * repeats * per_stage != layers:
            out.append(
                f"stages({stages}) x repeats({repeats}) x layers per stage({per_stage}) != {layers} layers"
            )
    shards = (
        deg["data"] * deg["fsdp"] * deg["expert"]
    )  # the batch is sharded over the expert axis too
    if micro % pieces or (micro // pieces) % shards:
        out.append(
            f"a microbatch of {micro}/{pieces} sequences cannot be split over data x fsdp = {shards}"
        )
    cp = deg["context"]
    if cp > 1 and ctx.seq_len % (2 * cp):
        out.append(
            f"max_target_length({ctx.seq_len}) is not divisible by 2 x context({cp}) (load balancing)"
        )
    return out


def _model_problems(cfg: dict, deg: dict[str, int], ctx: ExportContext) -> list[str]:
    m, out = ctx.model, []
    want = _dimension_keys(m)
    out += [f"{k} = {cfg.get(k)}, model has {v}" for k, v in want.items() if cfg.get(k) != v]
    tensor = deg["tensor"]
    if int(cfg.get("base_num_kv_heads", 0)) % tensor:
        out.append(
            f"tensor({tensor}) does not divide base_num_kv_heads({cfg.get('base_num_kv_heads')})"
        )
    if int(cfg.get("base_num_query_heads", 0)) % tensor:
        out.append(
            f"tensor({tensor}) does not divide base_num_query_heads({cfg.get('base_num_query_heads')})"
        )
    if not math.isclose(
        float(cfg.get("normalization_layer_epsilon", 1e-5)), m.norm_eps, rel_tol=1e-9
    ):
        out.append(
            f"normalization_layer_epsilon {cfg.get('normalization_layer_epsilon')}, model has {m.norm_eps:g}"
        )
    if not m.learned_positions and float(cfg.get("rope_max_timescale", 10_000)) != float(
        m.rope_theta
    ):
        out.append(
            f"rope_max_timescale {cfg.get('rope_max_timescale', 10_000)}, model has {m.rope_theta:g}"
        )
    if not m.learned_positions and (cfg.get("rope_type") == "llama3.1") != (
        m.rope_scaling is not None
    ):
        out.append(
            f"rope_type {cfg.get('rope_type', 'default')}, model has "
            f"{'no ' if m.rope_scaling is None else ''}llama3.1 rope scaling"
        )
    out += _moe_problems(cfg, deg, ctx)
    name = cfg.get("model_name", "default")
    if name != "default" and name != maxtext_model_name(ctx):
        out.append(f"model_name {name} is not a MaxText config with this model's sizes")
    if (
        cfg.get("decoder_block") == "gpt3"
        and int(cfg.get("trainable_position_size", 0)) < ctx.seq_len
    ):
        out.append(
            f"trainable_position_size({cfg.get('trainable_position_size')}) < max_target_length({ctx.seq_len})"
        )
    return out


def _moe_problems(cfg: dict, deg: dict[str, int], ctx: ExportContext) -> list[str]:
    """The MoE and MLA keys against the model (base.yml defaults when absent), and the expert axis's rules."""
    m, out = ctx.model, []
    if cfg.get("decoder_block", "llama2") != decoder_block(m):
        out.append(
            f"decoder_block {cfg.get('decoder_block', 'llama2')}, the model's is {decoder_block(m)}"
        )
    if m.moe is None:
        return out + (
            [f"expert axis {deg['expert']} for a model without experts"]
            if deg["expert"] > 1
            else []
        )
    want = moe_keys(ctx)
    defaults = {
        "num_experts": 1,
        "num_experts_per_tok": 1,
        "base_moe_mlp_dim": -1,
        "megablox": True,
        "sparse_matmul": True,
        "capacity_factor": -1.0,
        "first_num_dense_layers": 0,
        "shared_experts": 0,
        "routed_bias": False,
        "routed_score_func": "",
        "attention_type": "global",
        "q_lora_rank": 0,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mtp_num_layers": 0,
        "use_qk_norm": False,
        "norm_topk_prob": False,
        "interleave_moe_layer_step": 1,
        "nope_layer_interval": -1,
        "inhomogeneous_layer_cycle_interval": 1,
        "chunk_attn_window_size": 0,
    }
    out += [
        f"{k} = {cfg.get(k, defaults[k])}, the model has {v}"
        for k, v in want.items()
        if cfg.get(k, defaults[k]) != v
    ]
    experts = int(cfg.get("num_experts", 1))
    if experts % deg["expert"]:
        out.append(f"expert axis {deg['expert']} does not divide num_experts {experts}")
    return out
