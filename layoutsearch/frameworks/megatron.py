"""Megatron-LM / Megatron-Core / NeMo (export target ``megatron``: ``pretrain_gpt.py`` arguments).

Overlap, as launched with the flags its exporter writes: ``--overlap-grad-reduce`` (DP and ZeRO
reductions bucketed into the last microbatch's backward), ``--overlap-param-gather`` (the ZeRO-1
gather of updated weights into the next forward), ``--tp-comm-overlap`` (Transformer Engine
userbuffers) only when asked: it is off by default in Megatron.

What it can express (checked against megatron-core 0.16.1 and megatron/training/arguments.py):
everything but a GPipe schedule, ZeRO-2/3 (Megatron-FSDP) with a pipeline, attention sinks and
sliding windows as the catalogue records them.
"""

from layoutsearch.frameworks.declaration import Capabilities, Profile

EXPORTER = "layoutsearch.export.megatron"

PROFILE = Profile(
    name="megatron",
    # --fp8-param-gather; not with blockwise scales, as Megatron-Bridge's subchannel recipe sets it
    # (training/mixed_precision.py, NVIDIA-NeMo/Megatron-Bridge 05097809: bf16_with_fp8_subchannel_scaling_mixed)
    fp8_param_gather=("tensorwise", "mxfp8"),
    # megatron/training/arguments.py (NVIDIA/Megatron-LM 307dcf37): --fp8-recipe default 'delayed' (per tensor)
    fp8_recipe="tensorwise",
    fp8_activations="transformer_engine",
    # megatron/core/tensor_parallel/layers.py (d98e8a64): the input gradient's all-reduce or reduce-scatter launched
    # with async_op=True before the weight-gradient GEMM, the sequence-parallel input re-gathered before the
    # input-gradient GEMM; the default since 3f65246 (September 2021, --no-async-tensor-model-parallel-allreduce)
    tp_backward_async=True,
    # megatron/core/pipeline_parallel/p2p_communication.py (d98e8a64): the 1F1B schedule's exchanges wait on their
    # requests (no overlap for the non-interleaved schedule); the interleaved one overlaps (pp_comm_overlap)
    pp_sends_block=True,
    inplace_cross_entropy=True,
    # megatron/training/arguments.py (d98e8a64): --cross-entropy-loss-fusion (off: the unfused vocab-parallel cross
    # entropy) and --cross-entropy-fusion-impl native | te (since 3b141a2, April 2025). The fused native one by
    # default, the fastest Megatron-LM's training arguments accept since they refuse Transformer Engine's
    # (168cb15d7, June 2026, core_v0.19.0), which NeMo's and Megatron-Bridge's performance recipes set
    cross_entropies=("native", "te", "unfused"),
    vendor_attention=True,
    ep_node_dedup=True,
    recompute_policies=(
        "none",
        "selective",
        "full",
        "norm_act",
        "norm_moe",
        "mla_up_proj",
        "norm_mla_up_proj",
    ),
    cpu_adam="torch",  # assumption: HybridDeviceOptimizer's host optimizer as torch's Adam
)

CAPABILITIES = Capabilities(
    target="megatron",
    framework="Megatron-LM",
    pipeline_schedules=("1f1b", "interleaved"),
    # arguments.py --cp-comm-type p2p | allgather | a2a | a2a+p2p (Transformer Engine's attention)
    cp_flavours=("ring", "allgather", "a2a", "a2a+ring"),
    # ZeRO-2/3 are written as Megatron-FSDP, which its documentation lists with TP, CP and EP only
    zero_stages_with_pp=(0, 1),
    deepep=True,
    vendor_attention=True,
    offload=("none", "optimizer"),  # --optimizer-cpu-offload; no parameter offload
    offload_zero_stages=(1,),
    recompute_policies=PROFILE.recompute_policies,  # each one the exporter's _parallel_args writes
    pipeline_splits=("even", "embedding-and-loss", "first-last", "chunk-layout", "balanced"),
    precisions=("bf16", "fp16", "fp8", "fp4"),
    # --cross-entropy-loss-fusion with --cross-entropy-fusion-impl native, or neither (export.megatron)
    cross_entropies=("native", "unfused"),
    # arguments.py (307dcf37) --fp8-recipe tensorwise | delayed | mxfp8 | blockwise (export.megatron.FP8_RECIPE_ARGS)
    fp8_recipes=("tensorwise", "blockwise", "mxfp8"),
    # megatron-core 0.16.1 TransformerConfig: fp4 'e2m1' (--fp4-format), fp4_recipe 'nvfp4' | 'custom' (Transformer
    # Engine's NVFP4BlockScaling); no MXFP4 recipe
    fp4_recipes=("nvfp4",),
    # megatron-core 0.16.1 TransformerConfig: full recompute only inside a full-iteration graph, and
    # "moe" recompute not with the router graphed (Transformer Engine graphs); its dropless
    # dispatcher syncs with the host each layer; transformer_layer.py (core_v0.16.1, lines 389-430) keeps
    # the pre-MLP norm of a MoE layer whose router is graphed unless the dispatcher is alltoall, so
    # norm_mla_up_proj (written for DeepEP's flex dispatcher too) is not offered beside scoped graphs
    cuda_graphs=("none", "scoped", "full_iteration"),
    recompute_with_scoped_graphs=("none", "selective", "norm_act", "mla_up_proj"),
    full_graph_dropless_moe=False,
    bf16_grads=True,
    bf16_moments_zero=(1, 2, 3),  # --use-precision-aware-optimizer needs the distributed optimizer
    drop_and_pad=True,
    ep_comm_overlap=True,
    # megatron/core/tensor_parallel/layers.py (d98e8a64) launches the backward's TP collectives asynchronously, with
    # no flag left to wait for them; arguments.py --no-gradient-accumulation-fusion adds the gradients apart
    tp_backward_async=True,
    tp_backward_waits=False,
    grad_accumulation_apart=True,
    # arguments.py --no-overlap-p2p-communication (overlap_p2p_comm, on by default since 4eeff55, October 2023)
    pp_comm_waits=True,
    # arguments.py --overlap-grad-reduce is off unless given (the exporter leaves it out)
    grad_reduce_waits=True,
    unfused_attention=True,
    # megatron-core 0.16.1 TransformerConfig fields, whose names arguments.py makes flags
    refused_features={
        "q/k projection norms": "--qk-layernorm normalises each head over head_dim, not the whole Q "
        "and K projections",
        "post-attention and post-MLP norms": "pretrain_gpt.py's layer specs have no norm after the "
        "attention or the MLP, and arguments.py no flag for one",
        "parallel attention and MLP": "its layer runs attention, then the MLP, "
        "each behind its own norm",
        "non-parametric norms": "its RMSNorm and LayerNorm always have weights",
        "gated GELU MLP (GeGLU)": "arguments.py gates the MLP with --swiglu (SiLU) or --quick-geglu "
        "(x sigmoid(1.702 x)), not with GELU",
        "MLP activation other than SwiGLU, GeGLU or GELU": "arguments.py writes GELU, --swiglu, "
        "--squared-relu or --quick-geglu",
        "attention output-projection bias without MLP biases": "--add-bias-linear puts biases on "
        "the attention output projection and every MLP linear together (--add-qkv-bias on Q, K and "
        "V only)",
        "output-head bias": "GPTModel builds its output layer without a bias",
    },
    why={
        "megatron-fp8-recipe": "arguments.py's --fp8-recipe scales per tensor (delayed, tensorwise), per "
        "1x128 / 128x128 block (blockwise) or per 32 values (mxfp8), not per row",
        "megatron-offload": "--optimizer-cpu-offload moves the optimizer state; it has no parameter "
        "offload",
        "megatron-offload-zero": "arguments.py pairs --optimizer-cpu-offload with "
        "--use-precision-aware-optimizer, which needs the distributed optimizer (ZeRO-1)",
        "megatron-pipeline": "it runs 1F1B, or interleaved 1F1B with virtual stages, no GPipe, "
        "zero-bubble or DualPipe schedule; and "
        "Megatron-FSDP (its ZeRO-2/3) is documented with TP, CP and EP, not with pipeline parallelism, "
        "so a pipeline takes the distributed optimizer (ZeRO-1)",
        # arguments.py has no flag for TransformerConfig.softmax_type; Megatron-Bridge's gpt-oss
        # bridge sets softmax_type "learnable" (with the clamped SwiGLU) in its model provider
        "megatron-sinks": "pretrain_gpt.py has no argument for TransformerConfig softmax_type "
        "'learnable'; a model provider sets it, as Megatron-Bridge's gpt-oss bridge does",
        # --window-size and --window-attn-skip-freq exist; the catalogue keeps how many layers are
        # full, not which
        "megatron-window": "layoutsearch does not write --window-size and --window-attn-skip-freq: "
        "the model catalogue records how many layers attend in full, not which",
        # TransformerConfig has window_size (sliding) and no chunk: the Llama 4 example (examples/inference/llama4)
        # runs 4,096-token sequences, within one chunk
        "megatron-chunk": "megatron-core's attention has sliding windows (window_size), no chunked attention",
        # megatron/training/arguments.py validate_args (168cb15d7, 2026-06-03; first in core_v0.19.0)
        "megatron-cross-entropy": "its training arguments refuse Transformer Engine's cross entropy "
        "(--cross-entropy-fusion-impl te) for stability since core_v0.19.0; Megatron-Bridge still writes it",
    },
)
