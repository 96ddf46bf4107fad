"""MaxText on XLA (export target ``maxtext``: a YAML override of base.yml).

Overlap: the latency-hiding scheduler overlaps FSDP gathers and gradient reductions; on TPUs XLA's
continuation fusion (async collective fusion: ``--xla_tpu_enable_async_collective_fusion`` and its
all-gather variants, on by default in libtpu and set again in every MaxText benchmark config) runs
the TP collectives beside the matmuls; on GPUs XLA's collective matmul only when asked.

What it can express (checked against maxtext 0.2.5): no ZeRO-2, ZeRO-1 without dp replicas, cp
only with ZeRO-3, GPipe-order pipelines only, no KV-head replication, its own decoder blocks, and
expert TP = tp with the expert axis carved out of a ZeRO-3 fsdp.
"""

from layoutsearch.core.specs import RECOMPUTE_POLICIES
from layoutsearch.frameworks.declaration import Capabilities, Profile

EXPORTER = "layoutsearch.export.maxtext"

PROFILE = Profile(
    name="maxtext",
    # quantization "fp8" (configs/base.yml, AI-Hypercomputer/maxtext e591f30c): Flax's Fp8DotGeneral, per tensor
    fp8_recipe="tensorwise",
    tp_overlap=("tpu",),
    transient_zero3_weights=True,
    einsum_capacity_dispatch=True,
    zero3_gather_unit="tensor",
    inplace_cross_entropy=True,
    cross_entropies=("xla",),  # max_utils.py cross_entropy_with_logits, compiled by XLA
    recompute_policies=("minimal_with_context", "minimal", "save_dot_except_mlpwi", "full"),
    offload_update="device",  # optimizer_memory_host_offload: the state streams in for the update
)

CAPABILITIES = Capabilities(
    target="maxtext",
    framework="MaxText",
    drop_and_pad=True,
    unfused_attention=True,
    bf16_logits=True,  # configs/types.py cast_logits_to_fp32 (default true)
    cross_entropies=("xla",),
    # every policy but torchtitan's per-op one and Megatron's recompute modules (the exporter's REMAT
    # maps each to a remat_policy, and asserts it)
    recompute_policies=tuple(
        r
        for r in RECOMPUTE_POLICIES
        if r not in ("op", "norm_act", "norm_moe", "mla_up_proj", "norm_mla_up_proj")
    ),
    precisions=("bf16", "fp8"),
    # quantization "fp8": Flax's Fp8DotGeneral, one delayed scale per tensor (configs/base.yml, layers/quantizations.py)
    fp8_recipes=("tensorwise",),
    # optimizer_memory_host_offload; parameter_memory_host_offload (with it)
    offload=("none", "optimizer", "params"),
    zero_stages=(0, 1, 3),
    zero_stages_with_replicas=(3,),
    zero_stages_with_cp=(3,),
    # configs/types.py context_parallel_strategy: 'all_gather' (its default) or 'ring'
    cp_flavours=("allgather", "ring"),
    tpu_ring_cp_seq_squared=True,  # configs/types.py: TPU Tokamax ring attention
    pipeline_schedules=("gpipe",),
    kv_replication=False,
    model_blocks=("llama", "gpt3", "mixtral", "qwen3-moe", "deepseek", "llama4"),
    chunked_attention=True,  # its llama4 block's chunk_attn_window_size (the block rule refuses chunks elsewhere)
    expert_tensor=("tp",),
    expert_tensor_without_ep=("tp",),
    expert_groups=("fsdp", "tp"),
    why={
        "maxtext-fp8-recipe": "its quantization 'fp8' scales per tensor; its Transformer Engine recipes "
        "(te_mxfp8 and others, GPUs) are not written by this export",
        "maxtext-zero": "it has no ZeRO-2: sharded gradients with replicated weights",
        "maxtext-replicas": "its ZeRO-1 (shard_optimizer_over_data) shards over all data replicas",
        "maxtext-cp": "it shards weights over the context axis, i.e. ZeRO-3 over fsdp x cp",
        "maxtext-cp-flavour": "its context_parallel_strategy is all_gather or ring; it has no "
        "head-parallel (Ulysses) attention",
        "maxtext-ring-cp-seq": "its TPU ring attention (Tokamax splash) needs max_target_length "
        "divisible by context_parallel_size squared",
        "maxtext-pipeline": "its pipeline runs microbatches in GPipe order, circular when "
        "num_pipeline_repeats > 1; no 1F1B, zero-bubble or DualPipe schedule",
        "maxtext-kv": "it shards KV heads over the tensor axis and cannot replicate them",
        "maxtext-model": "its llama2 block needs RMSNorm, RoPE and no biases; its gpt3 block "
        "LayerNorm, biases and learned positions; its MoE blocks are mixtral, qwen3_moe, deepseek and llama4",
        "maxtext-etp": "it shards every expert's FFN over the tensor axis (etp = tp)",
        "maxtext-experts": "its expert axis shards the batch and the weights as fsdp does: ep comes "
        "out of a ZeRO-3 fsdp",
    },
)
