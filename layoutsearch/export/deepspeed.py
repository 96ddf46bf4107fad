"""DeepSpeed: a ds_config JSON, with what JSON cannot say under the top-level key ``_layoutsearch``.

Mapping (checked against deepspeed 0.19.8: runtime/config.py, runtime/zero/config.py,
runtime/pipe/engine.py, runtime/engine.py, runtime/tensor_parallel/config.py):

- DeepSpeedConfig reads known keys with ``dict.get`` and rejects only a list of removed keys,
  so an unknown top-level key such as ``_layoutsearch`` is carried, not refused; it holds the
  provenance header and the settings that live in code.
- ``train_batch_size`` = ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x
  DP world, DP world = dp x fsdp (world / (pp x tp)); with a pipeline the accumulation steps are
  the pipeline's microbatches.
- ``zero_optimization.stage`` over the whole DP world; ``tensor_parallel.autotp_size`` = tp;
  pipeline degree only in code: ``PipelineModule(num_stages=pp)``.
- ``zero_optimization.overlap_comm`` (default false) and ``contiguous_gradients`` for ZeRO >= 1:
  the cost model overlaps the gradient reduction with the backward pass. ZeRO-3 writes
  ``stage3_max_reuse_distance`` (its default, 1e9 parameters), the distance past which the engine costs a
  recomputed module's weights gathered a third time (``Profile.zero3_reuse_distance_params``).
- The model's hyper-parameters (RoPE, norm epsilon, activation, dropout) and what layoutsearch does
  not decide (data, tokenizer, learning rate, steps, checkpoints; ``<set me: ...>``) are listed
  under ``_layoutsearch``: DeepSpeed builds neither the model nor the data loader. The ``optimizer``
  (AdamW: the predicted memory holds two moments) and ``scheduler`` blocks are written with
  ``<set me: ...>`` values.
- Mixture of experts: DeepSpeed 0.19.8's AutoEP (module_inject/auto_ep_config.py, auto_ep_folding.py)
  replaces a Hugging Face model's MoE blocks from the JSON: ``expert_parallel`` = {enabled,
  ``autoep_size`` = ep, ``expert_tensor_parallel_size`` 1, ``preset_model`` mixtral, qwen3_moe,
  deepseek_v3 or deepseek_v2 where the architecture is one}. Its folding regroups the devices of a
  pipeline stage as edp x ep (as the engine does); it has no expert TP yet (etp 1), needs ep > 1
  beside AutoTP and refuses AutoTP with a pipeline. With ep = 1 nothing is written: ZeRO shards
  the experts like every weight and AutoTP splits their linears over tp (etp = tp). The native
  ``deepspeed.moe.layer.MoE(ep_size=...)`` is model code and refuses ZeRO-3, so it is not the route.
- Offload: ``zero_optimization.offload_optimizer`` = {device: cpu, pin_memory: true} for
  ``optimizer`` (ZeRO-Offload: its CPU-Adam steps the host's master and moments) and also
  ``offload_param`` the same for ``params`` (ZeRO-Infinity, ZeRO-3 only).
- Context parallelism as Ulysses (runtime/sequence_parallel/ulysses_sp.py, the "Arctic Long Sequence
  Training" tutorial): ``sequence_parallel_size`` = cp in the JSON, and in code
  ``UlyssesSPAttentionHF.register_with_transformers(...)``, whose mpu goes to
  ``deepspeed.initialize(mpu=...)``, and ``UlyssesSPDataLoaderAdapter`` around the data loader. Its
  mpu has sequence- and data-parallel groups only (tp = pp = ep = 1 beside cp), each sequence group
  cp consecutive ranks; DeepSpeed's batch world is then world / cp.
- Not expressible: ring or all-gather context parallelism (Ulysses exchanges heads by all-to-all);
  ZeRO with dp replicas (MiCS was removed; hpZ keeps a secondary weight copy,
  not replicas); ZeRO-2/3 with a pipeline (PipelineEngine refuses it); GPipe or interleaved
  pipelines (PipelineEngine runs 1F1B); tp > kv heads (AutoTP leaves extra ranks without an
  attention shard instead of replicating KV heads).
"""

from __future__ import annotations

import json

from layoutsearch.core.frameworks import profile_of
from layoutsearch.core.rules import MODEL_BLOCKS, deepseek_block
from layoutsearch.export.context import (
    ExportContext,
    header_lines,
    mismatches,
    placeholder_note,
    set_me,
)
from layoutsearch.frameworks.declaration import model_features

SIDE_KEY = "_layoutsearch"
# the ZeRO-3 reuse distance the deepspeed profile costs its regathers at: DeepSpeed's default, which a config
# without the key runs
REUSE_DISTANCE = profile_of("deepspeed").zero3_reuse_distance_params


AUTOEP_PRESETS = {
    "mixtral": "mixtral",
    "qwen3-moe": "qwen3_moe",
}  # MODEL_BLOCKS name -> AutoEP preset_model


def autoep_preset(m) -> str | None:
    """AutoEP's preset_model for the architecture, None when it has none (its *_pattern keys then)."""
    if deepseek_block(m):
        return "deepseek_v3" if m.moe.router_bias else "deepseek_v2"
    return next(
        (preset for block, preset in AUTOEP_PRESETS.items() if MODEL_BLOCKS[block](m)), None
    )


def expert_parallel(ctx: ExportContext) -> dict | None:
    """The ``expert_parallel`` (AutoEP) section: only with ep > 1."""
    if ctx.model.moe is None or ctx.layout.ep == 1:
        return None
    section = {
        "enabled": True,
        "autoep_size": ctx.layout.ep,
        "expert_tensor_parallel_size": ctx.layout.etp,
    }
    preset = autoep_preset(ctx.model)
    return section | ({"preset_model": preset} if preset else {})


def _expert_notes(ctx: ExportContext) -> list[str]:
    m, lay = ctx.model, ctx.layout
    if m.moe is None:
        return []
    if lay.ep == 1:
        return [
            f"experts: no expert parallelism (ep 1): ZeRO-{ctx.effective_zero_stage} shards the "
            f"{m.moe.num_experts} experts of each MoE layer like every weight"
            + (f", and AutoTP splits their linears over tp {lay.tp}" if lay.tp > 1 else "")
        ]
    notes = [
        f"experts: AutoEP (expert_parallel) regroups each stage's {lay.dp * lay.fsdp * lay.tp} devices as "
        f"edp {lay.expert_data_parallel} x ep {lay.ep}; it replaces the Hugging Face model's MoE blocks when "
        f"deepspeed.initialize() builds the engine"
    ]
    if autoep_preset(m) is None:
        notes.append(
            "AutoEP has no preset for this architecture: set expert_parallel.moe_layer_pattern, "
            "router_pattern, expert_pattern (and expert_w1/w2/w3, num_experts_attr, top_k_attr) to your "
            "model's module names"
        )
    return notes


def in_code(ctx: ExportContext) -> list[str]:
    """What the JSON cannot carry: the settings the training script must make."""
    lay = ctx.layout
    notes = []
    if lay.pp > 1:
        notes.append(
            f"pipeline: build the model as deepspeed.pipe.PipelineModule(layers=..., num_stages={lay.pp}, "
            f"partition_method='uniform') ({ctx.model.num_layers // lay.pp} transformer layers per stage); "
            f"its topology gives DP world {lay.data_units}, and engine.train_batch() runs "
            f"{lay.num_microbatches} microbatches (gradient_accumulation_steps) in 1F1B order"
        )
    if lay.tp > 1:
        notes.append(
            f"tensor parallel: tensor_parallel.autotp_size = {lay.tp} shards a Hugging Face-style model when "
            f"deepspeed.initialize() builds the engine; keep the {lay.tp} TP ranks inside one node"
        )
    if lay.cp > 1:
        notes.append(
            f"sequence parallel (Ulysses): before deepspeed.initialize(), mpu = UlyssesSPAttentionHF."
            f"register_with_transformers(model_name_or_path=..., core_attn_implementation='flash_attention_2', "
            f"sequence_parallel_size={lay.cp}, micro_batch_size={ctx.microbatch_seqs}, seq_length={ctx.seq_len}, "
            f"seq_length_is_variable=False), then deepspeed.initialize(..., mpu=mpu); wrap the data loader in "
            f"UlyssesSPDataLoaderAdapter (its batches need position_ids) and combine the {lay.cp} ranks' losses "
            f"as the tutorial does; each group of {lay.cp} consecutive ranks splits one sequence"
        )
    if lay.recompute == "full":
        notes.append(
            "recompute full: checkpoint every transformer layer (model.gradient_checkpointing_enable(), or "
            "deepspeed.checkpointing.checkpoint(layer, ...) around each layer)"
        )
    elif lay.recompute == "selective":
        notes.append(
            "recompute selective: checkpoint only the attention core and the MLP activation "
            "(deepspeed.checkpointing.checkpoint around those calls); JSON has no selective policy"
        )
    notes += _expert_notes(ctx)
    per_node = (
        ctx.cluster.accelerator.devices_per_node if ctx.cluster.accelerator.kind == "gpu" else 8
    )
    per_node = min(
        per_node, ctx.num_devices
    )  # a cluster smaller than one node (h100-2) fills part of it
    notes.append(
        f"launch: deepspeed --num_gpus {per_node} --num_nodes "
        f"{max(1, ctx.num_devices // per_node)} train.py --deepspeed_config THIS_FILE"
    )
    return notes


def model_hyperparameters(ctx: ExportContext) -> dict:
    """The model's hyper-parameters in Hugging Face config.json names (the model is built in code)."""
    m = ctx.model
    out: dict = {
        "hidden_act": m.activation_name,
        "rms_norm_eps" if m.norm == "rmsnorm" else "layer_norm_eps": m.norm_eps,
        "attention_dropout": m.attention_dropout,
        "hidden_dropout": m.hidden_dropout,
        "attention_bias": m.qkv_bias or m.linear_bias,
    }
    if not m.learned_positions:
        out["rope_theta"] = m.rope_theta
        out["rope_scaling"] = (
            None
            if m.rope_scaling is None
            else {
                "rope_type": m.rope_scaling.rope_type,
                "factor": m.rope_scaling.factor,
                "low_freq_factor": m.rope_scaling.low_freq_factor,
                "high_freq_factor": m.rope_scaling.high_freq_factor,
                "original_max_position_embeddings": m.rope_scaling.original_max_position_embeddings,
            }
        )
    return out


def model_feature_names(ctx: ExportContext) -> list[str]:
    """The features the Hugging Face model code must build (declaration.MODEL_FEATURES, sinks, a window
    shorter than the sequence)."""
    m = ctx.model
    names = list(model_features(m))
    if m.attention_sinks:
        names.append("attention sinks")
    if m.sliding_window is not None and m.sliding_window < ctx.seq_len:
        names.append("sliding window")
    return names


def placeholders() -> dict:
    """What layoutsearch does not decide, for the training script (DeepSpeed's JSON has no place for it)."""
    return {
        "note": placeholder_note(),
        "data_path": set_me("training data"),
        "tokenizer": set_me("tokenizer"),
        "learning_rate": set_me(
            "peak learning rate and schedule: the 'optimizer' and 'scheduler' blocks"
        ),
        "train_steps": set_me("optimizer steps"),
        "checkpoint_dir": set_me("engine.save_checkpoint directory"),
    }


def optimizer_blocks() -> dict:
    """``optimizer`` and ``scheduler`` with their values as placeholders (DeepSpeedConfig keeps both
    blocks as given; the engine builds them at deepspeed.initialize). AdamW because the predicted memory
    holds two moments per parameter; a client optimizer passed to deepspeed.initialize replaces the block."""
    return {
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": set_me("peak learning rate"),
                "betas": set_me("[beta1, beta2]"),
                "weight_decay": set_me("weight decay"),
            },
        },
        "scheduler": {
            "type": set_me("e.g. WarmupCosineLR"),
            "params": {
                "warmup_num_steps": set_me("warmup steps"),
                "total_num_steps": set_me("optimizer steps"),
            },
        },
    }


def config(ctx: ExportContext) -> dict:
    lay = ctx.layout
    cfg: dict = {
        SIDE_KEY: {
            "header": header_lines(ctx),
            "set_in_code": in_code(ctx),
            "degrees": lay.all_degrees if ctx.model.moe is not None else lay.degrees,
            "virtual_stages": lay.virtual_stages,
            "schedule": lay.schedule,
            "model_hyperparameters": model_hyperparameters(ctx),
            # what the Hugging Face model code must build: the cost and parameters counted them
            "model_features": model_feature_names(ctx),
            "placeholders": placeholders(),
        },
        "train_batch_size": ctx.global_batch_seqs,
        "train_micro_batch_size_per_gpu": ctx.microbatch_seqs,
        "gradient_accumulation_steps": lay.num_microbatches,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": ctx.effective_zero_stage},
        **optimizer_blocks(),
    }
    if ctx.effective_zero_stage >= 1:
        cfg["zero_optimization"].update(overlap_comm=True, contiguous_gradients=True)
    cfg["zero_optimization"].update(offload_blocks(lay.offload))
    if (
        ctx.effective_zero_stage == 3
    ):  # the distance the regathers were costed at (Profile.zero3_reuse_distance_params)
        cfg["zero_optimization"]["stage3_max_reuse_distance"] = REUSE_DISTANCE
    if lay.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": lay.tp}
    if lay.cp > 1:
        cfg["sequence_parallel_size"] = lay.cp
    if expert_parallel(ctx) is not None:
        cfg["expert_parallel"] = expert_parallel(ctx)
    if lay.recompute != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
    return cfg


def offload_blocks(offload: str) -> dict:
    """The zero_optimization keys of an offload choice: offload_optimizer, and offload_param for params."""
    host = {"device": "cpu", "pin_memory": True}
    keys = {"optimizer": ("offload_optimizer",), "params": ("offload_optimizer", "offload_param")}
    return {key: dict(host) for key in keys.get(offload, ())}


def _offload_of(zero: dict) -> str:
    """The offload choice a zero_optimization block writes (an unknown device reads as none)."""
    on_cpu = [
        k for k in ("offload_optimizer", "offload_param") if zero.get(k, {}).get("device") == "cpu"
    ]
    written = {(): "none", ("offload_optimizer",): "optimizer"}
    written[("offload_optimizer", "offload_param")] = "params"
    return written.get(tuple(on_cpu), "offload_param without offload_optimizer")


def render(ctx: ExportContext) -> str:
    return json.dumps(config(ctx), indent=2) + "\n"


# ----------------------------------------------------------------------------- checker
def check(text: str, ctx: ExportContext) -> list[str]:
    """DeepSpeedConfig's batch assertion, ZeRO/pipeline rules, and agreement with the layout."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        return [f"not valid JSON: {exc}"]
    side = cfg.get(SIDE_KEY, {})
    degrees = side.get("degrees", {})
    tp, pp = (
        int(cfg.get("tensor_parallel", {}).get("autotp_size", 0) or 1),
        int(degrees.get("pp", 1)),
    )
    sp = int(cfg.get("sequence_parallel_size", 1))
    world = ctx.num_devices
    out = []
    if world % (tp * pp * sp):
        return [
            f"world {world} is not divisible by tp({tp}) x pp({pp}) x sequence_parallel_size({sp})"
        ]
    if sp > 1 and tp * pp > 1:
        out.append(
            f"sequence_parallel_size {sp} beside tp({tp}) x pp({pp}): Ulysses' mpu has no such groups"
        )
    dp_world = world // (tp * pp * sp)
    train, micro = cfg.get("train_batch_size"), cfg.get("train_micro_batch_size_per_gpu")
    acc = cfg.get("gradient_accumulation_steps")
    if None in (train, micro, acc):
        return [
            "train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps must all be set"
        ]
    if train != micro * acc * dp_world:
        out.append(
            f"train_batch_size {train} != micro {micro} x accumulation {acc} x DP world {dp_world}"
        )
    stage = int(cfg.get("zero_optimization", {}).get("stage", 0))
    if stage not in (0, 1, 2, 3):
        out.append(f"zero_optimization.stage {stage} is not 0-3")
    zero = cfg.get("zero_optimization", {})
    if stage >= 1 and not zero.get("overlap_comm"):
        out.append(
            f"zero_optimization.overlap_comm is off with ZeRO-{stage}; the predicted time overlaps the "
            f"gradient reduction"
        )
    reuse = zero.get("stage3_max_reuse_distance", REUSE_DISTANCE)
    if stage == 3 and reuse != REUSE_DISTANCE:
        out.append(
            f"zero_optimization.stage3_max_reuse_distance {reuse} is not the {REUSE_DISTANCE} the "
            f"prediction's ZeRO-3 regathers were costed at"
        )
    if pp > 1 and stage >= 2:
        out.append(f"ZeRO-{stage} is incompatible with pipeline parallelism (pp={pp})")
    if tp > ctx.model.num_kv_heads:
        out.append(f"autotp_size {tp} exceeds num_kv_heads {ctx.model.num_kv_heads}")
    if pp > 1 and not any("PipelineModule" in note for note in side.get("set_in_code", [])):
        out.append(
            f"pp={pp} but {SIDE_KEY}.set_in_code does not say how to build the PipelineModule"
        )
    out += _expert_problems(cfg, world, tp, pp, ctx)
    lay = ctx.layout
    return out + mismatches(
        {
            **ctx.degree_pairs(tp=tp, pp=pp, cp=sp),
            "DP world": (dp_world, lay.data_units),
            "train batch": (train, ctx.global_batch_seqs),
            "micro batch": (micro, ctx.microbatch_seqs),
            "accumulation": (acc, lay.num_microbatches),
            "zero stage": (stage, ctx.effective_zero_stage),
            "offload": (_offload_of(zero), lay.offload),
        }
    )


def _expert_problems(cfg: dict, world: int, tp: int, pp: int, ctx: ExportContext) -> list[str]:
    """AutoEP's folding rules (build_folding_spec, validate_folding_global) and agreement with the layout."""
    section = cfg.get("expert_parallel") or {}
    enabled = bool(section.get("enabled", False))
    ep, etp = int(section.get("autoep_size", 1)), int(section.get("expert_tensor_parallel_size", 1))
    m, lay, out = ctx.model, ctx.layout, []
    if m.moe is None:
        return ["expert_parallel enabled for a model without experts"] if enabled else []
    if enabled:
        if (world // pp) % (ep * etp):
            out.append(
                f"autoep_size {ep} x expert_tensor_parallel_size {etp} does not divide the stage size {world // pp}"
            )
        if etp != 1:
            out.append(f"expert_tensor_parallel_size {etp}: AutoEP supports 1 only")
        if tp > 1 and pp > 1:
            out.append(f"AutoEP with autotp_size {tp} needs pp = 1, got {pp}")
        if m.moe.num_experts % ep:
            out.append(f"autoep_size {ep} does not divide num_experts {m.moe.num_experts}")
    elif tp > 1 and lay.etp != tp:
        out.append(
            f"without AutoEP, AutoTP splits the experts over tp {tp}; the layout has etp {lay.etp}"
        )
    got_ep = ep if enabled else 1
    if (got_ep, etp if enabled else lay.etp) != (lay.ep, lay.etp):
        out.append(
            f"experts as ep {got_ep} x etp {etp if enabled else lay.etp}, layout has ep {lay.ep} x etp {lay.etp}"
        )
    return out
