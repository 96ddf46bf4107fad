"""torchtitan on FSDP2 (export target ``torchtitan``: a TOML job file, the v0.2.x schema).

Overlap: forward and backward prefetch of the per-layer all-gathers, the reduce-scatter in
backward; HSDP's all-reduce in backward; async TP only when asked.

What it can express (checked against torchtitan 0.2.2; the same limits in 0.3.x, ``torchtitan03``):
the pipeline schedules torch.distributed.pipelining names (zero bubble interleaved only, no
bidirectional DualPipe), ZeRO-1 only with a pipeline (FSDP2 under torch.distributed.pipelining), cp only
with weight sharding, no KV-head replication, its llama3, deepseek_v3, qwen3, llama4 and gpt_oss
models (gpt_oss: sinks and sliding windows, but no pipeline, no context parallelism, never compiled, bf16), expert
groups out of the FSDP shard, cp and tp devices, fp32 gradient reduction.
"""

from layoutsearch.frameworks.declaration import Capabilities, Profile

EXPORTER = "layoutsearch.export.torchtitan"

PROFILE = Profile(
    name="torchtitan",
    # torchtitan v0.2.2 (73a0e697) components/quantization/float8.py: enable_fsdp_float8_all_gather only
    # without a recipe_name, i.e. tensorwise; config/job_config.py Float8Linear.recipe_name default None,
    # which is tensorwise ("Float8 tensorwise scaled training active")
    fp8_param_gather=("tensorwise",),
    fp8_recipe="tensorwise",
    recompute_policies=("none", "op", "full"),
    # compile.enable (job_config.py Compile, components model and loss): off by default in torchtitan's
    # config, on in its performance tables (docs/performance.md) and in what the export writes
    torch_compile=True,
    # the loss compiled with the model (components/loss.py build_cross_entropy_loss since bbb1b616e, 2025-04-02;
    # the export's compile components model and loss): its fp32 upcast fused, the logits held in bf16
    compiled_loss=True,
    cross_entropies=("compiled", "eager"),  # as compiled_loss says
    # async TP (torch inductor's micro-pipeline pass) pays off in the forward: PyTorch's write-up (dev-discuss,
    # "Introducing Async Tensor Parallelism in PyTorch", 2024) measured up to ~29% forward and ~8% end-to-end for
    # Llama 3 8B, ~20% and ~8% for 70B, the end-to-end gain of the forward's alone; torchtitan's async-TP tables
    # (2025, docs/performance.md) +9.8% (8B) and +9.2% (70B) end to end
    tp_overlap_backward=False,
    transient_zero3_weights=True,
    # FSDP2 reshards after every backward (FSDPModule.set_reshard_after_backward defaults to True): with
    # reshard_after_forward=False (ZeRO-2) each microbatch's forward gathers the weights again
    zero2_regathers=True,
    # FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): foreach_all_gather_copy_out copies each
    # gather's output into the unsharded parameters (split_with_sizes_copy); foreach_reduce copies the unsharded
    # gradients into the reduce-scatter input in reduce_dtype (foreach_reduce_scatter_copy_in, chunk_cat)
    zero_gather_copy_out=True,
    zero_grad_copy_in=True,
    cpu_adam="torch",  # FSDP2's CPUOffloadPolicy steps torch's optimizer on the host tensors
)


def capabilities(target: str) -> Capabilities:
    """torchtitan's limits (the same in 0.2.x and 0.3.x), declared for export target ``target``."""
    moe = (
        target == "torchtitan"
    )  # the 0.3 export builds llama3 only (its MoE models are other builders)
    why = {
        "chunk": "its chunked attention (fixed_attn_block_size) is its llama4 model's, which the 0.3 export "
        "does not write",
        "chunk-cp": "its llama4 model runs chunked attention in FlexAttention (attn_type flex), and its "
        "TransformerModelArgs refuse context parallelism with any attention but SDPA",
        "tp-without-sp": "0.2's tensor-parallel plans shard the norms with SequenceParallel whenever tp > 1 "
        "(parallelism.enable_sequence_parallel from 0.3.0: export to torchtitan-0.3)",
        "zero": "FSDP2 has no ZeRO-1 (sharded optimizer, unsharded gradients) without a pipeline",
        # torch.distributed.pipelining (stage.py backward_maybe_with_nosync) turns FSDP2's gradient sync and
        # reshard off for every backward but the last: the gradients accumulate whole and are reduce-scattered
        # once a step, with the weights gathered through it, which is ZeRO-1 (whatever the reshard policy)
        "pipeline": "torch.distributed.pipelining runs 1F1B, GPipe, Interleaved1F1B, "
        "InterleavedZeroBubble (two or more stages per rank), ZBVZeroBubble and DualPipeV; not the "
        "bidirectional DualPipe with two copies of the weights; and it defers FSDP2's gradient "
        "reduce-scatter and reshard to the last backward, which is ZeRO-1",
        "cp": "it always runs FSDP over data_parallel_shard x cp, so cp shards the weights",
        "kv": "it shards wk/wv column-wise and cannot replicate KV heads",
        "model": "its llama3 model is gated-MLP, RMSNorm, RoPE, untied, bias-free, "
        "head_dim = dim / n_heads"
        + (
            "; its MoE models are deepseek_v3, qwen3, llama4 and gpt_oss"
            if moe
            else "; the 0.3 export writes llama3 only: export MoE models to torchtitan (0.2) or "
            "megatron"
        ),
        "etp": "with ep > 1 it runs routed experts with etp 1 or etp = tp, and with ep = 1 "
        "tensor-parallel over tp",
        "experts": "its expert mesh is dp_shard x cp x tp regrouped as efsdp x ep x etp; replicas "
        "keep whole expert sets",
        "state-precision": "FSDP2 reduces gradients in float32 only (mixed_precision_reduce) and "
        "its optimizers keep fp32 states",
        "capacity": "its MoE routes dropless",
        "unfused-attention": "its attention is SDPA's fused kernels or FlexAttention",
        "bf16-logits": "its cross_entropy_loss upcasts the logits to float32",
        "cp-flavour": "its context parallelism is ring attention, one SDPA call per K/V shard, the "
        "shards all-gathered or passed on by all-to-all (context_parallel_rotate_method): both priced "
        "as ring; it has no single-call all-gather and no head-parallel (Ulysses) attention",
        "fp8-recipe": "its Float8Linear recipes scale per tensor or per row (recipe_name tensorwise, "
        "rowwise), not per 1x128 / 128x128 block; its MXFP8 converter (quantize.linear.mx) is not written "
        "by this export"
        if moe
        else "the 0.3 export writes bf16 only",
        # torchtitan 0.2.2 models/gpt_oss: __init__.py get_train_spec (pipelining_fn None), model/args.py
        # update_from_config (NotImplementedError for cp > 1), infra/parallelize.py (no apply_compile; the TP plan
        # with enable_async_tp and float8 TP off)
        "gpt-oss-pp": "its gpt_oss model has no pipeline split (TrainSpec pipelining_fn None)",
        "gpt-oss-cp": "its gpt_oss model args raise NotImplementedError for context_parallel_degree > 1",
        "gpt-oss-compile": "parallelize_gptoss never compiles the model (only compile.components loss would "
        "be), so it runs eager PyTorch",
        "gpt-oss-fp8": "its Float8Linear converter would turn the attention projections to fp8 and leave the "
        "grouped experts in bf16, which is not the fp8 step costed",
        "offload": "FSDP2's CPUOffloadPolicy (enable_cpu_offload) moves parameters, gradients and "
        "optimizer state together: parameter offload only"
        + ("" if moe else "; the 0.3 export does not write it"),
    }
    return Capabilities(
        target=target,
        framework="torchtitan",
        # compile components model and loss, or model alone (an eager loss): export.torchtitan
        cross_entropies=("compiled", "eager"),
        zero_stages=(0, 2, 3),
        zero_stages_only_with_pp=(1,),
        zero_stages_with_pp=(0, 1),
        # torch.distributed.pipelining's get_schedule_class names (export.torchtitan.SCHEDULES)
        pipeline_schedules=("1f1b", "gpipe", "interleaved", "zb-h1", "zb-v", "dualpipev"),
        multi_stage_schedules=("zb-h1",),
        # even: pipeline_parallel_layers_per_stage; balanced: module_fqns_per_model_part (the chunks' modules,
        # torchtitan 0.2.x config/job_config.py; chunk i on rank i mod pp under 1F1B and Interleaved1F1B). The 0.3
        # export keeps to even: its module names are not checked (torchtitan's main renamed output to lm_head)
        pipeline_splits=("even", "balanced") if moe else ("even",),
        zero_stages_with_replicas=(1, 2, 3),
        recompute_policies=("none", "selective", "op", "full"),
        precisions=("bf16", "fp8") if moe else ("bf16",),
        # v0.2.2 config/job_config.py Float8Linear.recipe_name: tensorwise (None), rowwise
        fp8_recipes=("tensorwise", "rowwise") if moe else (),
        zero_stages_with_cp=(1, 2, 3),
        kv_replication=False,
        offload=("none", "params") if moe else ("none",),
        model_blocks=("llama3", "deepseek", "qwen3-moe", "llama4", "gpt-oss")
        if moe
        else ("llama3",),
        # its gpt_oss model (models/gpt_oss/model/model.py): a learned sink per head (the flex attention's
        # log-sum-exp rescaled), sliding-window attention on the even layers, under FlexAttention; the llama3,
        # deepseek_v3, qwen3 and llama4 blocks have neither (core.rules MODEL_BLOCKS)
        attention_sinks=moe,
        sliding_window=moe,
        gpt_oss_with_pp=not moe,
        gpt_oss_with_cp=not moe,
        gpt_oss_compiled=not moe,
        gpt_oss_fp8=not moe,
        # its llama4 model (models/llama4/model/model.py): NoPE every n-th layer (every_n_layers_nope) and chunks of
        # fixed_attn_block_size on the others under attn_type flex, which update_from_config refuses with cp > 1
        chunked_attention=moe,
        chunked_attention_with_cp=False,
        expert_tensor=("1", "tp"),
        expert_tensor_without_ep=("tp",),
        expert_groups=("fsdp", "tp", "cp"),
        deepep=moe,
        tp_without_sp=not moe,  # the 0.3 export writes parallelism.enable_sequence_parallel
        refused_features={
            "multi-token prediction": "its deepseek_v3 model has no multi-token prediction module",
            "q/k L2 norms": "its llama4 model's attention has no q/k norm (Llama 4 Scout's use_qk_norm)",
        },
        why={f"{target}-{code}": text for code, text in why.items()},
    )


CAPABILITIES = capabilities("torchtitan")
