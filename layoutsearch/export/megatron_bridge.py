"""Megatron-Bridge: a YAML override of a recipe's ``ConfigContainer`` (NVIDIA-NeMo/Megatron-Bridge).

Mapping (checked against megatron-bridge 0.3.1: training/config.py ConfigContainer, TrainingConfig,
CheckpointConfig, DistributedInitConfig; training/mixed_precision.py; training/utils/omegaconf_utils.py
``process_config_with_overrides``, which merges such a file onto a recipe with OmegaConf; and the
megatron-core 0.16.1 dataclasses its sections extend: ModelParallelConfig, TransformerConfig,
DistributedDataParallelConfig). The degrees, batch and recompute are the ``megatron`` target's:

- ``model``: the sizes (num_layers, hidden_size, ffn_hidden_size, num_attention_heads, and for
  non-latent attention num_query_groups and kv_channels; seq_length), ``tensor_model_parallel_size``,
  ``pipeline_model_parallel_size``, ``virtual_pipeline_model_parallel_size`` (null without
  interleaving), ``context_parallel_size``, ``sequence_parallel``; for a MoE model
  ``num_moe_experts``, ``moe_router_topk``, ``moe_ffn_hidden_size``, ``expert_model_parallel_size``,
  ``expert_tensor_parallel_size``, ``moe_token_dispatcher_type`` (``flex`` with
  ``moe_flex_dispatcher_backend: deepep`` where the prediction used DeepEP, else ``alltoall``);
  ``recompute_granularity`` / ``recompute_method`` / ``recompute_num_layers`` / ``recompute_modules``
  (null where none, so a recipe's own recompute does not stay); ``init_model_with_meta_device`` with
  Megatron-FSDP; ``cross_entropy_loss_fusion`` and ``cross_entropy_fusion_impl`` (the loss's kernels,
  ``Workload.cross_entropy``).
- ``train``: ``global_batch_size`` = B, ``micro_batch_size`` = sequences per DP rank per microbatch.
- ``ddp``: ``use_distributed_optimizer`` (ZeRO >= 1), ``use_megatron_fsdp`` and
  ``data_parallel_sharding_strategy`` ``optim_grads`` / ``optim_grads_params`` (ZeRO-2/3, never with
  a pipeline: the declaration's rule), ``num_distributed_optimizer_instances`` (dp replicas),
  ``overlap_grad_reduce`` / ``overlap_param_gather`` (what the prediction overlaps),
  ``grad_reduce_in_fp32``; ``dist.use_megatron_fsdp``; ``checkpoint.ckpt_format`` ``fsdp_dtensor``
  under Megatron-FSDP (ConfigContainer.validate asserts it when saving), else ``torch_dist``.
- ``mixed_precision``: a recipe name of mixed_precision.py: ``bf16_mixed``, ``fp16_mixed``, fp8 by
  its scaling recipe (``Workload.fp8_recipe``): ``bf16_with_fp8_delayed_scaling_mixed`` (per tensor, the
  hybrid E4M3/E5M2 format the megatron target writes), ``bf16_with_fp8_subchannel_scaling_mixed``
  (blockwise) or ``bf16_with_mxfp8_mixed``; rowwise is refused.
- Not decided: data blend, tokenizer, learning rate and schedule, iterations, checkpoint paths and
  interval, written as commented ``PLACEHOLDER`` keys (a merged ``<set me>`` would reach int fields).
"""

from __future__ import annotations

import yaml

from layoutsearch.core.frameworks import fp4_recipe_of, fp8_recipe_of
from layoutsearch.export import context as common
from layoutsearch.export.context import ExportContext, yaml_value
from layoutsearch.export.megatron import dispatcher_args, recompute_modules, written_loss_kernel

RELEASE = "megatron-bridge 0.3.1"
PRECISION_RECIPES = {"bf16": "bf16_mixed", "fp16": "fp16_mixed"}
# the engine's fp8 recipe -> a recipe of training/mixed_precision.py (NVIDIA-NeMo/Megatron-Bridge 05097809);
# rowwise it has not (the megatron-bridge-fp8-recipe rule refuses it)
FP8_PRECISION_RECIPES = {
    "tensorwise": "bf16_with_fp8_delayed_scaling_mixed",
    "blockwise": "bf16_with_fp8_subchannel_scaling_mixed",
    "mxfp8": "bf16_with_mxfp8_mixed",
}
# the engine's fp4 recipe -> a recipe of training/mixed_precision.py (megatron-bridge 0.3.1: bf16_with_nvfp4_mixed,
# fp4 e2m1 with the nvfp4 recipe, weights gathered in bf16 as the prediction keeps them)
FP4_PRECISION_RECIPES = {"nvfp4": "bf16_with_nvfp4_mixed"}
PLACEHOLDER_KEYS = {
    "train.train_iters": "training iterations",
    "optimizer.lr": "peak learning rate",
    "optimizer.min_lr": "final learning rate",
    "scheduler.lr_warmup_iters": "warmup iterations",
    "scheduler.lr_decay_style": "e.g. cosine",
    "dataset.blend": "[[data prefix, ...], weights or null]",
    "tokenizer.tokenizer_type": "e.g. HuggingFaceTokenizer",
    "tokenizer.tokenizer_model": "tokenizer path or Hugging Face id",
    "checkpoint.save": "checkpoint directory",
    "checkpoint.save_interval": "iterations between checkpoints",
    "checkpoint.load": "checkpoint directory to resume from",
}


def _recompute(ctx: ExportContext) -> dict:
    policy = ctx.layout.recompute
    if policy == "full":
        return {
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
            "recompute_modules": None,
        }
    modules = ["core_attn"] if policy == "selective" else None
    if policy not in ("none", "selective", "full"):
        modules = list(recompute_modules(ctx.model, policy))
    return {
        "recompute_granularity": None if modules is None else "selective",
        "recompute_method": None,
        "recompute_num_layers": None,
        "recompute_modules": modules,
    }


def _moe(ctx: ExportContext) -> dict:
    moe, lay = ctx.model.moe, ctx.layout
    if moe is None:
        return {}
    dispatch = {flag.removeprefix("--").replace("-", "_"): v for flag, v in dispatcher_args(ctx)}
    return {
        "num_moe_experts": moe.num_experts,
        "moe_router_topk": moe.top_k,
        "moe_ffn_hidden_size": moe.expert_d_ff,
        "moe_grouped_gemm": True,  # as the megatron target writes (moe_act recompute needs it)
        "expert_model_parallel_size": lay.ep,
        "expert_tensor_parallel_size": lay.etp,
        **dispatch,
    }


def override(ctx: ExportContext) -> dict:
    """The ConfigContainer sections the layout decides, as nested dicts (section -> field -> value)."""
    m, lay = ctx.model, ctx.layout
    zero = ctx.effective_zero_stage
    fsdp = zero >= 2
    # a gradient reduction to overlap, unless it is costed waited for (Workload.grad_reduce_overlap)
    reduce = lay.data_units * lay.cp > 1 and ctx.workload.grad_reduce_overlap is not False
    model = {
        "num_layers": m.num_layers,
        "hidden_size": m.d_model,
        "ffn_hidden_size": m.d_ff,
        "num_attention_heads": m.num_heads,
        **(
            {"num_query_groups": m.num_kv_heads, "kv_channels": m.head_dim} if m.mla is None else {}
        ),
        "seq_length": ctx.seq_len,
        "tensor_model_parallel_size": lay.tp,
        "pipeline_model_parallel_size": lay.pp,
        "virtual_pipeline_model_parallel_size": lay.virtual_stages
        if lay.virtual_stages > 1
        else None,
        "context_parallel_size": lay.cp,
        "sequence_parallel": lay.tp > 1 and lay.sequence_parallel,
        **_moe(ctx),
        **_recompute(ctx),
        **({"init_model_with_meta_device": True} if fsdp else {}),
        # the loss's kernels as costed (Workload.cross_entropy; TransformerConfig's fields)
        "cross_entropy_loss_fusion": written_loss_kernel(ctx) != "unfused",
        **(
            {"cross_entropy_fusion_impl": written_loss_kernel(ctx)}
            if written_loss_kernel(ctx) != "unfused"
            else {}
        ),
    }
    ddp = {
        "use_distributed_optimizer": zero >= 1,
        "use_megatron_fsdp": fsdp,
        **(
            {
                "data_parallel_sharding_strategy": "optim_grads"
                if zero == 2
                else "optim_grads_params"
            }
            if fsdp
            else {}
        ),
        "num_distributed_optimizer_instances": lay.dp if zero >= 1 and lay.dp > 1 else 1,
        "overlap_grad_reduce": reduce,
        "overlap_param_gather": reduce and zero >= 1,
        "grad_reduce_in_fp32": True,
    }
    return {
        "model": model,
        "train": {
            "global_batch_size": ctx.global_batch_seqs,
            "micro_batch_size": ctx.microbatch_seqs,
        },
        "ddp": ddp,
        "dist": {"use_megatron_fsdp": fsdp},
        "checkpoint": {"ckpt_format": "fsdp_dtensor" if fsdp else "torch_dist"},
        "mixed_precision": precision_recipe(ctx),
    }


def precision_recipe(ctx: ExportContext) -> str:
    """The mixed_precision recipe name for the workload precision (fp8: by its scaling recipe)."""
    if ctx.workload.precision == "fp8":
        return FP8_PRECISION_RECIPES[fp8_recipe_of(ctx.workload, "gpu")]
    if ctx.workload.precision == "fp4":
        return FP4_PRECISION_RECIPES[fp4_recipe_of(ctx.workload)]
    return PRECISION_RECIPES[ctx.workload.precision]


def render(ctx: ExportContext) -> str:
    """The override file: header comments, the sections, the commented placeholders."""
    cfg = override(ctx)
    deepep = cfg["model"].get("moe_flex_dispatcher_backend") == "deepep"
    notes = common.header_lines(ctx) + [
        "Needs, beside megatron-bridge and megatron-core: Transformer Engine (a megatron-bridge dependency)"
        + (", DeepEP (moe_flex_dispatcher_backend deepep)." if deepep else "."),
        f"A recipe override for {RELEASE}: build the recipe of this model family (megatron.bridge.recipes, e.g. "
        "llama3_8b_pretrain_config), then process_config_with_overrides(cfg, config_filepath=THIS_FILE) "
        "(megatron.bridge.training.utils.omegaconf_utils) and pretrain(cfg, forward_step). The model block "
        "sets the engine's sizes over the recipe's.",
        f"Data-parallel size = {ctx.num_devices} / (tp {ctx.layout.tp} x pp {ctx.layout.pp} x cp {ctx.layout.cp}) "
        f"= {ctx.layout.data_units}; {ctx.layout.num_microbatches} microbatches per step.",
    ]
    body = ""
    for section, keys in cfg.items():
        if isinstance(keys, dict):
            body += f"\n{section}:\n" + "".join(
                f"  {k}: {yaml_value(v)}\n" for k, v in keys.items()
            )
        else:
            body += f"\n{section}: {yaml_value(keys)}\n"
    placeholders = [common.placeholder_note()] + [
        f"PLACEHOLDER: {k}: {common.set_me(w)}" for k, w in PLACEHOLDER_KEYS.items()
    ]
    return common.comment_block(notes) + body + "\n" + common.comment_block(placeholders)


# ----------------------------------------------------------------------------- checker
def check(text: str, ctx: ExportContext) -> list[str]:
    """ConfigContainer's parallel and batch identities re-derived on the file, and every written field
    against the layout's."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"not valid YAML: {exc}"]
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        return ["not a ConfigContainer override with a model section"]
    model, train = cfg["model"], cfg.get("train") or {}
    tp, pp, cp = (
        int(model.get(f"{n}_parallel_size", 1) or 1)
        for n in ("tensor_model", "pipeline_model", "context")
    )
    world = ctx.num_devices
    if world % (tp * pp * cp):
        return [f"world size {world} is not divisible by tp({tp}) x pp({pp}) x cp({cp})"]
    dp, out = world // (tp * pp * cp), []
    gbs, mbs = train.get("global_batch_size"), train.get("micro_batch_size")
    if not isinstance(gbs, int) or not isinstance(mbs, int) or gbs % (mbs * dp):
        out.append(f"global_batch_size {gbs} is not a multiple of micro_batch_size {mbs} x DP {dp}")
    elif gbs // (mbs * dp) != ctx.layout.num_microbatches:
        out.append(
            f"{gbs // (mbs * dp)} microbatches per step, layout has {ctx.layout.num_microbatches}"
        )
    vp = model.get("virtual_pipeline_model_parallel_size") or 1
    if model.get("num_layers", 0) % (pp * vp):
        out.append(f"num_layers({model.get('num_layers')}) is not divisible by pp({pp}) x vp({vp})")
    if model.get("num_attention_heads", 0) % tp:
        out.append(
            f"num_attention_heads({model.get('num_attention_heads')}) is not a multiple of tp({tp})"
        )
    if model.get("sequence_parallel") and tp == 1:
        out.append("sequence_parallel needs tensor_model_parallel_size > 1")
    if (cfg.get("ddp") or {}).get("use_megatron_fsdp") and pp > 1:
        out.append(f"Megatron-FSDP is documented without pipeline parallelism, got pp({pp})")
    want = override(ctx)
    for section, keys in want.items():
        got = cfg.get(section)
        if not isinstance(keys, dict):
            out += common.mismatches({section: (got, keys)})
            continue
        got = got if isinstance(got, dict) else {}
        out += common.mismatches({f"{section}.{k}": (got.get(k), v) for k, v in keys.items()})
    return out
