"""Megatron-LM: a bash array of ``pretrain_gpt.py`` arguments, one flag per line.

Mapping (checked against NVIDIA/Megatron-LM megatron/training/arguments.py and megatron-core
0.16.1 model_parallel_config.py, transformer_config.py, parallel_state.py,
num_microbatches_calculator.py):

- DP = world / (TP x PP x CP) = dp x fsdp; ``--micro-batch-size`` is sequences per DP rank per
  microbatch, ``--global-batch-size`` = B, microbatches = B / (micro x DP).
- Offload optimizer -> ``--optimizer-cpu-offload --optimizer-offload-fraction 1.0`` (the whole
  optimizer state on the host; layoutsearch prices whole offload only) with
  ``--use-precision-aware-optimizer`` (arguments.py asserts it), so with the distributed optimizer
  (ZeRO-1, rule ``megatron-offload-zero``). No parameter offload: refused (``megatron-offload``).
- ZeRO-1 -> ``--use-distributed-optimizer``; ZeRO-2/3 -> Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params``, with
  ``--init-model-with-meta-device``, which Megatron-FSDP's documentation pairs with it). Megatron-FSDP
  is documented with TP, CP and EP, not with pipelining: ZeRO-2/3 with pp > 1 is refused by the
  framework declaration's rule (``megatron-pipeline``), so ``solve --export megatron`` picks ZeRO-0/1 there.
  A replicated dp part over a sharded fsdp part -> ``--num-distributed-optimizer-instances dp``
  (partial distributed optimizer; HSDP under Megatron-FSDP). Sharding spans fsdp x cp, as in
  Megatron's dp-cp group.
- Interleaving -> ``--num-layers-per-virtual-pipeline-stage L / (PP x v)``; with an uneven split
  (core.stages) ``--num-virtual-stages-per-pipeline-rank v`` and either
  ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`` or
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``.
- Recompute: full -> granularity full, method uniform, 1 layer per unit (the layer input is
  kept); selective -> granularity selective (core attention; Megatron cannot recompute only the
  dense MLP activation, so that part of layoutsearch's selective policy is kept in memory);
  norm_act -> granularity selective with ``--recompute-modules layernorm moe_act`` (``layernorm``
  alone for a dense model: moe_act is the routed experts' activation and needs grouped GEMMs; Megatron
  recomputes only the norms that are not fused into the next linear, as the cost model does);
  norm_moe -> ``layernorm moe``, plus ``mlp`` where some layers are dense (``recompute_modules``);
  mla_up_proj -> ``mla_up_proj`` (latent attention's up-projections); norm_mla_up_proj -> ``layernorm
  mla_up_proj`` (the DeepSeek-V3 report's RMSNorm and up-projection recompute). Under fp8 outside MXFP8 a
  policy with ``layernorm`` or ``moe_act`` writes ``--fp8-recipe tensorwise``: megatron-core refuses both
  under delayed scaling, the flag's default.
- Hyper-parameters: ``--rotary-base`` (an int in arguments.py), ``--use-rope-scaling`` /
  ``--rope-scaling-factor`` (Llama 3.1 scaling; megatron-core fixes low 1, high 4, original 8192),
  ``--norm-epsilon``, ``--attention-dropout`` / ``--hidden-dropout`` (Megatron's default is 0.1),
  ``--add-qkv-bias`` (Qwen2), ``--qk-layernorm`` (Qwen3's per-head q/k RMSNorms), ``--qk-l2-norm`` (Llama
  4's weightless L2 norms), ``--no-rope-freq k`` (NoPE in every k-th layer), activation
  ``--swiglu`` (gated SiLU) or GELU (Megatron's default). Features it has no flag for (post-norms,
  GeGLU, other activations, projection-wide q/k norms, attention chunks) are refused by the declaration
  (``refused_features``, ``chunked_attention``), never written as something else.
- Attention kernel: Transformer Engine's choice (its cuDNN fused attention, as the megatron profile
  costs it) unless the workload asked for the FlashAttention-2 class (``--no-vendor-attention``):
  ``--attention-backend flash``, or for materialised scores (``--no-fused-attention``): ``unfused``.
- Overlap the cost model assumes: ``--overlap-grad-reduce`` with data parallelism,
  ``--overlap-param-gather`` with the distributed optimizer, ``--tp-comm-overlap`` when the
  workload says TP collectives are pipelined with their GEMMs (Transformer Engine userbuffers).
- Mixture of experts (megatron-core 0.16.1 TransformerConfig fields; the flags are the field names
  that megatron/training/arguments.py generates with ArgumentGroupFactory, and its MoE and MLA groups):
  ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size`` (one routed expert),
  ``--moe-shared-expert-intermediate-size`` = shared experts x their width (``--moe-shared-expert-gate``
  for Qwen2-MoE's gate), ``--moe-layer-freq`` as Megatron's list expression when some layers are
  dense (``([0]*3+[1]*58)``; Megatron's integer N makes layers 0, N, 2N... MoE, the engine's
  layer_freq N layers N-1, 2N-1..., so only a list says the same), ``--moe-grouped-gemm``,
  ``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep`` where the prediction
  sent tokens over scale-out once per node (``Workload.deepep``, the megatron profile's default,
  dropless), else ``--moe-token-dispatcher-type alltoall``, ``--moe-router-dtype fp32`` from 32 experts (what
  megatron-core warns for), ``--moe-router-pre-softmax`` with top-1 routing (TransformerConfig
  refuses a softmax top-1 router without it), ``--moe-router-score-function sigmoid
  --moe-router-enable-expert-bias`` for a router bias on a bias-free model (DeepSeek-V3's score
  correction, aux-loss-free), a capacity factor as ``--moe-expert-capacity-factor c
  --moe-token-drop-policy probs --moe-pad-expert-input-to-capacity`` (the cost model's cap is the
  padded expert load), none = dropless; ``--expert-model-parallel-size`` ep and
  ``--expert-tensor-parallel-size`` etp, always written (Megatron's default etp is tp).
  Megatron's expert layers regroup the stage's devices (MoE parallel folding), as the engine does.
- Latent attention: ``--multi-latent-attention --q-lora-rank --kv-lora-rank --qk-head-dim
  --qk-pos-emb-head-dim --v-head-dim``, ``--qk-layernorm`` (the RMSNorms on the latents), ``--rope-type
  rope --no-rope-fusion`` (the model has plain RoPE; MLA's default is YaRN, and megatron-core fuses
  RoPE into MLA only for YaRN). ``--mtp-num-layers`` for multi-token prediction.
- CUDA graphs (``Workload.cuda_graphs``, megatron-core 0.16.1's flags): scoped -> ``--cuda-graph-impl
  transformer_engine --cuda-graph-scope attn moe_router moe_preprocess`` (``attn mlp`` on a dense model);
  full_iteration -> ``--cuda-graph-impl local --cuda-graph-scope full_iteration``. Refused: a full-iteration graph
  of a dropless MoE (its dispatcher syncs with the host each layer), scoped graphs beside full or ``moe``
  recompute (TransformerConfig asserts both). Megatron-LM after 0.16 renames the scope flag
  ``--cuda-graph-modules`` and writes a full-iteration graph as ``--cuda-graph-impl full_iteration``.
- bf16 state (``--grad-bytes 2``, ``--moment-bytes 2``): ``--grad-reduce-in-bf16``; ``--use-precision-aware-optimizer
  --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16`` (Transformer Engine's FusedAdam; needs the distributed optimizer).
- Not decided (``MEGATRON_PLACEHOLDER_ARGS``, values ``<set me: ...>``): data, tokenizer, learning
  rate and schedule, training iterations, checkpoint paths and ``--save-interval`` (validate_args
  asserts it is set).
- A header line names the libraries the written flags need beside megatron-core: Transformer Engine
  (Megatron's default ``--transformer-impl``), DeepEP for the flex dispatcher, flash-attn for
  ``--attention-backend flash``.
- Not expressible: the GPipe, zero-bubble and DualPipe schedules (Megatron runs 1F1B or interleaved
  1F1B; its combined 1F1B overlaps the expert AllToAlls, ``--overlap-moe-expert-parallel-comm``).
"""

from __future__ import annotations

import math
import re
import shlex

from layoutsearch.core.frameworks import (
    fp4_recipe_of,
    fp8_param_gather_of,
    fp8_recipe_of,
    node_dedup,
)
from layoutsearch.core.rules import candidate_of, cp_a2a_degree
from layoutsearch.core.specs import ModelSpec
from layoutsearch.core.stages import (
    BALANCED,
    CHUNK_LAYOUT,
    EMBEDDING_AND_LOSS,
    EVEN,
    FIRST_LAST,
    balanced_chunks,
    chunk_layout,
    given_chunks,
    split_layers,
)
from layoutsearch.costs.params import layer_weights, output_layer_equivalents
from layoutsearch.export.context import (
    ExportContext,
    comment_block,
    header_lines,
    mismatches,
    mtp_notes,
    placeholder_note,
    set_me,
)
from layoutsearch.export.rank_order import LAUNCH_ORDERS, MEGATRON_ORDERS, gpu_rank_lines
from layoutsearch.frameworks import megatron as declaration

ARRAY = "MEGATRON_ARGS"
PLACEHOLDER_ARRAY = "MEGATRON_PLACEHOLDER_ARGS"
# megatron-core's llama3 scaling (rope_utils / rotary_pos_embedding): only the factor is a flag.
MEGATRON_ROPE_FIXED = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# the engine's fp8 recipe -> --fp8-recipe (megatron/training/arguments.py, NVIDIA/Megatron-LM 307dcf37: tensorwise,
# delayed, mxfp8, blockwise): per-tensor scales as its default, delayed scaling (current scaling, "tensorwise",
# runs the same GEMMs); rowwise it has not (the megatron-fp8-recipe rule refuses it)
FP8_RECIPE_ARGS = {"tensorwise": "delayed", "blockwise": "blockwise", "mxfp8": "mxfp8"}

RECOMPUTE_MODULES = (
    "norm_act",
    "norm_moe",
    "mla_up_proj",
    "norm_mla_up_proj",
)  # the policies written as --recompute-modules lists
# each policy the framework declares, _parallel_args writes
assert set(declaration.CAPABILITIES.recompute_policies) == {
    "none",
    "selective",
    "full",
    *RECOMPUTE_MODULES,
}


# The flag of each degree Megatron takes (dp and fsdp are what remains of the world size)
DEGREE_FLAGS = {
    "tp": "--tensor-model-parallel-size",
    "pp": "--pipeline-model-parallel-size",
    "cp": "--context-parallel-size",
    "ep": "--expert-model-parallel-size",
    "etp": "--expert-tensor-parallel-size",
}


def _model_args(ctx: ExportContext) -> list[tuple[str, object]]:
    m = ctx.model
    args: list[tuple[str, object]] = [
        ("--num-layers", m.num_layers),
        ("--hidden-size", m.d_model),
        ("--ffn-hidden-size", m.d_ff),
        ("--num-attention-heads", m.num_heads),
        ("--kv-channels", m.head_dim),
        ("--seq-length", ctx.seq_len),
        ("--max-position-embeddings", m.learned_positions if m.learned_positions else ctx.seq_len),
        ("--position-embedding-type", "learned_absolute" if m.learned_positions else "rope"),
        ("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
        ("--norm-epsilon", repr(float(m.norm_eps))),
    ]
    if not m.learned_positions:
        args.append(("--rotary-base", int(m.rope_theta)))
        if m.rope_scaling is not None:
            args += [
                ("--use-rope-scaling", None),
                ("--rope-scaling-factor", f"{m.rope_scaling.factor:g}"),
            ]
        if m.nope_layers:  # RoPE skipped in every k-th layer, the last of each period (Llama 4: 4)
            args.append(("--no-rope-freq", m.nope_interval))
    args += [
        ("--attention-dropout", repr(float(m.attention_dropout))),
        ("--hidden-dropout", repr(float(m.hidden_dropout))),
    ]
    if m.num_kv_heads != m.num_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.mlp == "gated":
        args.append(("--swiglu", None))
    if m.qk_norm == "head" and m.mla is None:  # Qwen3: an RMSNorm over each query and key head
        args.append(("--qk-layernorm", None))
    if (
        m.qk_norm == "l2"
    ):  # Llama 4: a weightless L2 norm of each query and key head (TransformerConfig.qk_l2_norm)
        args.append(("--qk-l2-norm", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", None))
    args.append(("--bf16", None))
    if (
        ctx.workload.precision == "fp8"
    ):  # Transformer Engine fp8 GEMMs (E4M3 forward, E5M2 gradients)
        args.append(("--fp8-format", "hybrid"))
        recipe = FP8_RECIPE_ARGS[fp8_recipe_of(ctx.workload, "gpu")]
        if recipe == "delayed" and DELAYED_SCALING_REFUSES.intersection(_modules_of(ctx)):
            # megatron-core 0.16.1 transformer_config.py 1241-1247: "Delayed scaling does not support moe_act and
            # layernorm recompute for fp8"; current scaling, per-tensor scales as the cost model's Transformer
            # Engine storage has them (costs.memory.fp8_storage)
            recipe = "tensorwise"
        args.append(("--fp8-recipe", recipe))
        if fp8_param_gather_of(ctx.workload, "gpu") and ctx.effective_zero_stage >= 1:
            args.append(("--fp8-param-gather", None))  # the prediction gathers fp8 weights
    if (
        ctx.workload.precision == "fp4"
    ):  # Transformer Engine NVFP4BlockScaling (megatron-core 0.16.1)
        args += [("--fp4-format", "e2m1"), ("--fp4-recipe", fp4_recipe_of(ctx.workload))]
    return args


ROUTER_FP32_FROM = 32  # megatron-core warns from this many experts without --moe-router-dtype
PATTERN_CHARS = re.compile(r"[^,\d\[\]\(\)\+\*]")  # arguments.py _eval_pattern's alphabet


def moe_layer_freq(m: ModelSpec) -> int | str:
    """``--moe-layer-freq``: 1 when every layer is MoE, else a list expression of 1 (MoE) / 0 (dense)
    per layer in Megatron's syntax: a dense head, then a repeated period (the shortest such text)."""
    flags = [int(m.is_moe_layer(i)) for i in range(m.num_layers)]
    if all(flags):
        return 1
    first = next((i for i, f in enumerate(flags) if f), len(flags))
    return min((_pattern_text(h, flags[h:]) for h in range(first + 1)), key=len)


def _pattern_text(head: int, tail: list[int]) -> str:
    parts = [f"[0]*{head}"] if head else []
    if tail:
        period = next(
            p
            for p in range(1, len(tail) + 1)
            if len(tail) % p == 0 and tail == tail[:p] * (len(tail) // p)
        )
        runs = _runs(tail[:period])
        if len(runs) == 1:  # one value throughout
            parts.append(f"[{runs[0][0]}]*{len(tail)}")
        else:
            body = "+".join(f"[{v}]*{n}" for v, n in runs)
            parts.append(f"({body})*{len(tail) // period}" if period < len(tail) else body)
    return "(" + "+".join(parts) + ")"


def _runs(seq: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in seq:
        if out and out[-1][0] == v:
            out[-1] = (v, out[-1][1] + 1)
        else:
            out.append((v, 1))
    return out


def eval_layer_freq(value: str | int, num_layers: int) -> list[int]:
    """Megatron's reading of ``--moe-layer-freq`` (arguments.py moe_freq_type, gpt_layer_specs): 1 = MoE."""
    text = str(value)
    if "[" not in text:
        freq = int(text)
        return [int(i % freq == 0) for i in range(num_layers)]
    if PATTERN_CHARS.search(text):
        raise ValueError(f"Invalid pattern: {text}")
    return list(eval(text))  # noqa: S307 -- the alphabet above is Megatron's own guard


def _moe_args(ctx: ExportContext) -> list[tuple[str, object]]:
    m, lay = ctx.model, ctx.layout
    moe = m.moe
    if moe is None:
        return []
    args: list[tuple[str, object]] = [
        ("--num-experts", moe.num_experts),
        ("--moe-router-topk", moe.top_k),
        ("--moe-ffn-hidden-size", moe.expert_d_ff),
    ]
    if moe.num_shared_experts:
        args.append(
            ("--moe-shared-expert-intermediate-size", moe.num_shared_experts * moe.shared_d_ff)
        )
        if moe.shared_expert_gate:
            args.append(("--moe-shared-expert-gate", None))
    freq = moe_layer_freq(m)
    if freq != 1:
        args.append(("--moe-layer-freq", freq))
    args += [("--moe-grouped-gemm", None), *dispatcher_args(ctx)]
    if moe.num_experts >= ROUTER_FP32_FROM:
        args.append(("--moe-router-dtype", "fp32"))
    if (
        moe.router_bias and not m.linear_bias
    ):  # DeepSeek-V3's score-correction bias: aux-loss-free balancing
        args += [
            ("--moe-router-score-function", "sigmoid"),
            ("--moe-router-enable-expert-bias", None),
        ]
    elif moe.top_k == 1:
        args.append(("--moe-router-pre-softmax", None))
    if moe.capacity_factor is not None:
        args += [
            ("--moe-expert-capacity-factor", f"{moe.capacity_factor:g}"),
            ("--moe-token-drop-policy", "probs"),
            ("--moe-pad-expert-input-to-capacity", None),
        ]
    return args + [(DEGREE_FLAGS[d], getattr(lay, d)) for d in ("ep", "etp")]


def _mla_args(ctx: ExportContext) -> list[tuple[str, object]]:
    m = ctx.model
    args: list[tuple[str, object]] = []
    if m.mla is not None:
        a = m.mla
        args.append(("--multi-latent-attention", None))
        if a.q_lora_rank is not None:
            args.append(("--q-lora-rank", a.q_lora_rank))
        args += [
            ("--kv-lora-rank", a.kv_lora_rank),
            ("--qk-head-dim", a.qk_nope_head_dim),
            ("--qk-pos-emb-head-dim", a.qk_rope_head_dim),
            ("--v-head-dim", a.v_head_dim),
            ("--qk-layernorm", None),
            ("--rope-type", "rope"),
            ("--no-rope-fusion", None),
        ]
    if m.mtp_layers:
        args.append(("--mtp-num-layers", m.mtp_layers))
    return args


# Layout.cp_flavour -> arguments.py --cp-comm-type (its default p2p, the ring, is not written)
CP_COMM_TYPE = {"allgather": "allgather", "a2a": "a2a", "a2a+ring": "a2a+p2p"}


def cp_comm_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """--cp-comm-type of the layout's CP flavour where cp > 1, and for a2a+p2p
    --hierarchical-context-parallel-sizes (the all-to-all ranks inside a node, then the ring's)."""
    lay = ctx.layout
    if lay.cp == 1 or lay.cp_flavour == "ring":
        return []
    args: list[tuple[str, object]] = [("--cp-comm-type", CP_COMM_TYPE[lay.cp_flavour])]
    if lay.cp_flavour == "a2a+ring":
        a = int(cp_a2a_degree(ctx.cluster.accelerator.devices_per_node, candidate_of(lay))[0])
        args.append(("--hierarchical-context-parallel-sizes", (a, lay.cp // a)))
    return args


def _parallel_args(ctx: ExportContext) -> list[tuple[str, object]]:
    lay = ctx.layout
    args: list[tuple[str, object]] = [
        (DEGREE_FLAGS[d], getattr(lay, d)) for d in ("tp", "pp", "cp")
    ]
    if lay.tp > 1 and lay.sequence_parallel:
        args.append(("--sequence-parallel", None))
    args += cp_comm_args(ctx)
    first, middle, last, kind, _ = (
        int(x[0])
        for x in split_layers(
            ctx.model.num_layers,
            lay.pp,
            lay.virtual_stages,
            lay.first_stage_layers or 0,
            lay.last_stage_layers or 0,
            head=output_layer_equivalents(ctx.model),
        )
    )
    v = lay.virtual_stages
    chunked = (
        kind == FIRST_LAST and v > 1 and bool(first % v or middle % v or last % v)
    )  # core.stages.given_chunks
    if lay.balanced_split:  # core.stages.balanced_chunks: only the layout string says it
        kind, chunked = BALANCED, False
        weights = layer_weights(ctx.model)
        chunks = balanced_chunks(weights, lay.pp, v, ctx.model.mtp_layers)
        args.append(("--pipeline-model-parallel-layout", "|".join("".join(c) for c in chunks)))
    if v > 1 and kind == EVEN:
        args.append(
            ("--num-layers-per-virtual-pipeline-stage", ctx.model.num_layers // (lay.pp * v))
        )
    elif (
        v > 1 and kind not in (CHUNK_LAYOUT, BALANCED) and not chunked
    ):  # uneven splits give the chunk count, not its layers
        args.append(("--num-virtual-stages-per-pipeline-rank", v))
    if (
        kind == CHUNK_LAYOUT or chunked
    ):  # the chunks themselves: the virtual stages are their count / pp
        given = (first, last) if chunked else (0, 0)
        args.append(
            (
                "--pipeline-model-parallel-layout",
                pipeline_layout(ctx.model.num_layers, lay.pp, v, ctx.model.mtp_layers, *given),
            )
        )
    if kind == EMBEDDING_AND_LOSS:
        args += [
            ("--account-for-embedding-in-pipeline-split", None),
            ("--account-for-loss-in-pipeline-split", None),
        ]
    elif kind == FIRST_LAST and not chunked:
        args += [
            ("--decoder-first-pipeline-num-layers", first),
            ("--decoder-last-pipeline-num-layers", last),
        ]
    args += [
        ("--micro-batch-size", ctx.microbatch_seqs),
        ("--global-batch-size", ctx.global_batch_seqs),
    ]
    zero = ctx.effective_zero_stage
    if zero == 1:
        args.append(("--use-distributed-optimizer", None))
    elif zero in (2, 3):
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        args += [
            ("--use-megatron-fsdp", None),
            ("--data-parallel-sharding-strategy", strategy),
            ("--use-distributed-optimizer", None),
            ("--no-gradient-accumulation-fusion", None),
            ("--ckpt-format", "fsdp_dtensor"),
            # Megatron-FSDP's documentation pairs it with meta-device init: no rank builds the whole model
            ("--init-model-with-meta-device", None),
        ]
    if zero >= 1 and lay.dp > 1:
        args.append(("--num-distributed-optimizer-instances", lay.dp))
    if lay.offload == "optimizer":
        args += [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", 1.0)]
        if ctx.workload.optimizer_bytes_per_param != 4:  # else written with the bf16 moments below
            # arguments.py: the hybrid device optimizer reuses the precision-aware optimizer's code path
            args.append(("--use-precision-aware-optimizer", None))
    if (
        ctx.workload.grad_bytes_per_param == 2
    ):  # bf16 gradient buffers, reduced in bf16 (else fp32: Megatron's default)
        args.append(("--grad-reduce-in-bf16", None))
    if (
        ctx.workload.optimizer_bytes_per_param == 4
    ):  # bf16 Adam moments (Transformer Engine's FusedAdam)
        args += [
            ("--use-precision-aware-optimizer", None),
            ("--exp-avg-dtype", "bf16"),
            ("--exp-avg-sq-dtype", "bf16"),
        ]
    if (
        lay.data_units * lay.cp > 1 and ctx.workload.grad_reduce_overlap is not False
    ):  # the cost model overlaps the gradient reduction with the backward pass (unless told it waits)
        args.append(("--overlap-grad-reduce", None))
        if zero >= 1:  # and the parameter all-gather with the forward pass
            args.append(("--overlap-param-gather", None))
    if (
        lay.tp > 1 and lay.sequence_parallel and ctx.workload.tp_comm_overlap
    ):  # arguments.py: needs SP
        args.append(("--tp-comm-overlap", None))
    kernel = written_loss_kernel(ctx)
    if kernel != "unfused":  # the loss's kernels, as costed (unfused: Megatron-LM's default)
        args += [("--cross-entropy-loss-fusion", None), ("--cross-entropy-fusion-impl", kernel)]
    if ctx.workload.grad_accumulation_fusion is False:  # the gradients added apart, as costed
        args.append(("--no-gradient-accumulation-fusion", None))
    if (
        lay.virtual_stages > 1 and ctx.workload.pp_comm_overlap is False
    ):  # chunks wait for their sends, as costed
        args.append(("--no-overlap-p2p-communication", None))
    if not ctx.workload.flash_attention:  # materialised scores, as costed (--no-fused-attention)
        args.append(("--attention-backend", "unfused"))
    elif (
        ctx.workload.vendor_attention is False
        and ctx.cluster.accelerator.vendor_attention_efficiency is not None
    ):
        args.append(
            ("--attention-backend", "flash")
        )  # FlashAttention, as costed, not Transformer Engine's cuDNN
    if (
        lay.ep > 1 and ctx.workload.ep_comm_overlap
    ):  # the token all-to-alls behind the other microbatch
        args.append(("--overlap-moe-expert-parallel-comm", None))
    args += cuda_graph_args(ctx)
    if lay.recompute == "full":
        args += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    elif lay.recompute == "selective":
        args.append(("--recompute-granularity", "selective"))
    elif lay.recompute in RECOMPUTE_MODULES:
        args += [
            ("--recompute-granularity", "selective"),
            ("--recompute-modules", recompute_modules(ctx.model, lay.recompute)),
        ]
    return args


def cuda_graph_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """Workload.cuda_graphs as megatron-core's flags: scoped -> Transformer Engine graphs of the attention and, on a
    MoE model, the router and its preprocessing (dense: the attention and the MLP); full_iteration -> MCore's own
    graph of the whole forward-backward (``CudaGraphScope.full_iteration``; rules.py refuses it for a dropless MoE)."""
    graphs = ctx.workload.cuda_graphs
    if graphs == "scoped":
        scope = (
            ("attn", "moe_router", "moe_preprocess")
            if ctx.model.moe is not None
            else ("attn", "mlp")
        )
        return [("--cuda-graph-impl", "transformer_engine"), ("--cuda-graph-scope", scope)]
    if graphs == "full_iteration":
        return [("--cuda-graph-impl", "local"), ("--cuda-graph-scope", ("full_iteration",))]
    return []


DELAYED_SCALING_REFUSES = frozenset(
    {"layernorm", "moe_act"}
)  # recompute modules fp8 delayed scaling refuses


def _modules_of(ctx: ExportContext) -> tuple[str, ...]:
    """The --recompute-modules the layout's policy writes (none for a policy written otherwise)."""
    policy = ctx.layout.recompute
    return recompute_modules(ctx.model, policy) if policy in RECOMPUTE_MODULES else ()


def recompute_modules(model, policy: str) -> tuple[str, ...]:
    """Megatron's --recompute-modules for a policy (costs.memory.POLICY_SAVES): norm_act -> layernorm moe_act (moe_act
    is the routed experts' and needs grouped GEMMs: a dense model gets layernorm alone); norm_moe ->
    layernorm moe, with mlp for the dense layers (moe reruns MoE layers only, mlp dense layers only); mla_up_proj
    -> mla_up_proj, norm_mla_up_proj -> layernorm mla_up_proj (latent attention only: rules.py 'mla-up-proj')."""
    if policy == "mla_up_proj":
        return ("mla_up_proj",)
    if policy == "norm_mla_up_proj":
        return ("layernorm", "mla_up_proj")
    moe = model.moe is not None
    if policy == "norm_act":
        return ("layernorm", "moe_act") if moe else ("layernorm",)
    dense = not moe or model.moe.first_dense_layers > 0 or model.moe.layer_freq > 1
    return ("layernorm",) + (("moe",) if moe else ()) + (("mlp",) if dense else ())


def _placeholder_args() -> list[tuple[str, str]]:
    """What layoutsearch does not decide, as in Megatron-LM's examples/ scripts (DATA_ARGS, TRAINING_ARGS)."""
    return [
        ("--data-path", set_me("data prefix of your preprocessed .bin/.idx files")),
        ("--split", set_me("train,valid,test shares, e.g. 969,30,1")),  # else a warning
        ("--tokenizer-type", set_me("e.g. HuggingFaceTokenizer")),
        ("--tokenizer-model", set_me("tokenizer path or Hugging Face id")),
        ("--lr", set_me("peak learning rate")),
        ("--min-lr", set_me("final learning rate")),
        ("--lr-decay-style", set_me("e.g. cosine")),
        ("--lr-warmup-iters", set_me("warmup iterations")),
        ("--train-iters", set_me("training iterations")),
        ("--save", set_me("checkpoint directory")),
        ("--save-interval", set_me("iterations between checkpoints")),  # validate_args asserts it
        ("--load", set_me("checkpoint directory to resume from")),
    ]


# Libraries beyond megatron-core that a written flag needs, in the order the header names them
TE_FLAGS = (
    "--fp8-format",
    "--fp4-format",
    "--tp-comm-overlap",
    "--use-precision-aware-optimizer",
    "--moe-grouped-gemm",
)
LIBRARY_FLAGS = (
    ("DeepEP", "--moe-flex-dispatcher-backend", "deepep"),
    ("flash-attn", "--attention-backend", "flash"),
)


def needs_line(args: list[tuple[str, object]]) -> str:
    """The header line naming every library the written flags need: Transformer Engine always (Megatron's
    default --transformer-impl), DeepEP for its dispatcher, flash-attn for Transformer Engine's flash backend."""
    written = dict(args)
    te = [flag for flag in TE_FLAGS if flag in written]
    if written.get("--cuda-graph-impl") == "transformer_engine":
        te.append("--cuda-graph-impl transformer_engine")
    libraries = [
        "Transformer Engine (Megatron's default --transformer-impl transformer_engine"
        + (f"; {', '.join(te)}" if te else "")
        + ")"
    ]
    libraries += [
        f"{name} ({flag} {value})"
        for name, flag, value in LIBRARY_FLAGS
        if written.get(flag) == value
    ]
    return "Needs, beside megatron-core: " + ", ".join(libraries) + "."


def _moe_notes(ctx: ExportContext) -> list[str]:
    m, lay = ctx.model, ctx.layout
    if m.moe is None:
        return []
    experts = (
        f"experts: {m.moe.num_experts} per MoE layer ({m.num_moe_layers} of {m.num_layers} layers) over "
        f"ep {lay.ep} x etp {lay.etp}; expert data parallel = {lay.dp * lay.fsdp * lay.tp * lay.cp} / "
        f"(ep x etp) = {lay.expert_data_parallel} (MoE parallel folding)."
    )
    router = (
        "router recipe not decided by layoutsearch (it changes neither the parameters nor the modelled "
        "cost): load-balancing loss and coefficient (--moe-router-load-balancing-type, --moe-aux-loss-coeff; "
        "Megatron's default coefficient is 0), score function, group-limited routing, score scaling."
    )
    return [experts, router]


def _model_notes(ctx: ExportContext) -> list[str]:
    m, notes = ctx.model, _moe_notes(ctx)
    if m.mla is not None:
        notes.append(
            "rope: the model has plain RoPE (theta "
            f"{m.rope_theta:g}); MLA defaults to YaRN, so --rope-type rope is written (set --rope-type yarn "
            "and its --rotary-scaling-factor/--mscale for a long-context run)."
        )
    notes += mtp_notes(ctx, "--mtp-num-layers")
    scaling = m.rope_scaling
    if scaling is not None and any(
        getattr(scaling, k) != v for k, v in MEGATRON_ROPE_FIXED.items()
    ):
        notes.append(
            f"rope scaling: megatron-core fixes low_freq_factor 1, high_freq_factor 4 and original "
            f"context 8192; this model has {scaling.low_freq_factor:g}, {scaling.high_freq_factor:g}, "
            f"{scaling.original_max_position_embeddings}."
        )
    return notes


def render(ctx: ExportContext) -> str:
    """A sourceable bash file defining ``MEGATRON_ARGS``."""
    lay = ctx.layout
    fsdp = ctx.effective_zero_stage >= 2
    sections = [
        ("model", _model_args(ctx)),
        ("latent attention, multi-token prediction", _mla_args(ctx)),
        ("mixture of experts", _moe_args(ctx)),
        ("parallelism, batch, recompute", _parallel_args(ctx)),
    ]
    launch, order_lines = gpu_rank_lines(ctx, LAUNCH_ORDERS["megatron"], "Megatron")
    order_flag = MEGATRON_ORDERS[launch.order][1] if launch else None
    if order_flag:
        sections.append(("rank order", [(order_flag, None)]))
    notes = (
        header_lines(ctx)
        + [
            needs_line([arg for _, args in sections for arg in args]),
            f"Data-parallel size (Megatron's DP) = {lay.num_devices} / (tp {lay.tp} x pp {lay.pp} x cp {lay.cp}) = "
            f"{lay.data_units}; {lay.num_microbatches} microbatches per step.",
            f"Vocabulary: {ctx.model.vocab_size} tokens from your tokenizer (Megatron pads it to a multiple of 128 x tp).",
            f'Usage: source THIS_FILE; torchrun ... pretrain_gpt.py "${{{ARRAY}[@]}}" "${{{PLACEHOLDER_ARRAY}[@]}}"',
            placeholder_note() + f" They are in {PLACEHOLDER_ARRAY}.",
        ]
        + _model_notes(ctx)
        + order_lines
    )
    if lay.recompute == "selective":
        notes.append(
            "recompute selective -> --recompute-granularity selective (core attention only; with Transformer "
            "Engine's fused attention that saves little). layoutsearch's selective also drops the MLP "
            "activation, which Megatron keeps: expect somewhat more activation memory than predicted."
        )
    lines = ["#!/usr/bin/env bash", comment_block(notes).rstrip("\n")]
    if (lay.tp > 1 or lay.cp > 1) and not fsdp:
        lines.append(
            "export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron requires it with TP/CP before Blackwell"
        )
    elif fsdp:
        lines.append(
            "unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP overlaps better without it"
        )
    if ctx.problem.workload.launch_blocking:
        lines.append(
            "export CUDA_LAUNCH_BLOCKING=1  # the prediction costed blocking kernel launches (--launch-blocking)"
        )
    lines.append(f"{ARRAY}=(")
    for title, args in sections:
        if not args:
            continue
        lines.append(f"  # {title}")
        lines += [
            f"  {flag}" if value is None else f"  {flag} {_shell_words(value)}"
            for flag, value in args
        ]
    lines.append(")")
    lines.append(
        "# PLACEHOLDER: not decided by layoutsearch; replace every <set me: ...> before launch"
    )
    lines.append(f"{PLACEHOLDER_ARRAY}=(")
    lines += [f"  {flag} {shlex.quote(value)}" for flag, value in _placeholder_args()]
    lines.append(")")
    return "\n".join(lines) + "\n"


def _shell_words(value) -> str:
    """A flag's value as shell words: one quoted word, or one per item of a tuple (an nargs='+' flag)."""
    return (
        " ".join(shlex.quote(str(v)) for v in value)
        if isinstance(value, tuple)
        else shlex.quote(str(value))
    )


# ----------------------------------------------------------------------------- checker
def written_loss_kernel(ctx: ExportContext) -> str:
    """The loss's kernels to write: the costed ones (``Workload.cross_entropy``), or, for a step costed under
    another framework (whose loss kernels Megatron has not), Megatron's default."""
    kernel = str(ctx.workload.cross_entropy)
    kernels = declaration.PROFILE.cross_entropies
    return kernel if kernel in kernels else kernels[0]


def parse_args(text: str) -> dict[str, str | bool | list[str]]:
    """The flags inside ``MEGATRON_ARGS=( ... )``: {flag: value, a list of values for an nargs='+' flag
    given several, or True for a switch}."""
    inside, tokens = False, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(f"{ARRAY}=("):
            inside = True
            continue
        if inside and stripped == ")":
            break
        if inside:
            tokens += shlex.split(stripped, comments=True)
    flags: dict[str, str | bool | list[str]] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            values = []
            for nxt in tokens[i + 1 :]:
                if nxt.startswith("--"):
                    break
                values.append(nxt)
            flags[tok] = True if not values else values[0] if len(values) == 1 else values
    return flags


def _int(flags: dict, name: str, default: int | None = None) -> int | None:
    value = flags.get(name, default)
    return None if value is None or value is True else int(value)


def _count(flags: dict, name: str, default: int) -> int:
    """An integer flag's value; ``default`` where it is absent (or given without a value)."""
    value = _int(flags, name, default)
    return default if value is None else value


def check(text: str, ctx: ExportContext) -> list[str]:
    """arguments.py / megatron-core rules re-derived on the written arguments, and agreement with the layout."""
    f = parse_args(text)
    if not f:
        return [f"no {ARRAY}=( ... ) array found"]
    world, out = ctx.num_devices, []
    tp, pp, cp = (_count(f, DEGREE_FLAGS[d], 1) for d in ("tp", "pp", "cp"))
    if world % (tp * pp * cp):
        return [f"world size {world} is not divisible by tp({tp}) x pp({pp}) x cp({cp})"]
    dp = world // (tp * pp * cp)
    layers, heads = _count(f, "--num-layers", 0), _count(f, "--num-attention-heads", 0)
    groups = _count(f, "--num-query-groups", heads) if "--group-query-attention" in f else heads
    if heads % tp:
        out.append(f"num_attention_heads({heads}) is not a multiple of tp({tp})")
    if groups % tp and tp % groups:
        out.append(f"num_query_groups({groups}) must be a multiple or divisor of tp({tp})")
    out += _split_problems(f, layers, pp)
    out += _batch_problems(f, dp, pp, ctx) + _option_problems(f, tp, pp, cp, dp, layers, ctx)
    out += _moe_problems(f, world, tp, pp, layers, ctx) + _mla_problems(f, ctx)
    out += _cp_problems(f, cp, heads, tp)
    lay = ctx.layout
    out += mismatches(
        {
            **ctx.degree_pairs(tp=tp, pp=pp, cp=cp),
            "dp x fsdp": (dp, lay.data_units),
            "global batch": (_int(f, "--global-batch-size"), ctx.global_batch_seqs),
            "micro batch": (_int(f, "--micro-batch-size"), ctx.microbatch_seqs),
            "offload": (_offload_written(f), lay.offload),
        }
    )
    if "--optimizer-cpu-offload" in f and "--use-precision-aware-optimizer" not in f:
        out.append("--optimizer-cpu-offload needs --use-precision-aware-optimizer (arguments.py)")
    return out


def _cp_problems(f: dict, cp: int, heads: int, tp: int) -> list[str]:
    """--cp-comm-type as arguments.py takes it: a known type; a2a needs heads / tp divisible by cp;
    a2a+p2p's --hierarchical-context-parallel-sizes multiply to cp."""
    kind = f.get("--cp-comm-type", "p2p")
    if kind not in ("p2p", "allgather", "a2a", "a2a+p2p"):
        return [f"--cp-comm-type {kind} is not p2p, allgather, a2a or a2a+p2p"]
    if kind == "a2a" and heads % (tp * cp):
        return [
            f"--cp-comm-type a2a: num_attention_heads({heads}) / tp({tp}) not divisible by cp({cp})"
        ]
    sizes = f.get("--hierarchical-context-parallel-sizes")
    if kind == "a2a+p2p" and (
        not isinstance(sizes, list) or math.prod(int(s) for s in sizes) != cp
    ):
        return [f"--hierarchical-context-parallel-sizes {sizes} does not multiply to cp({cp})"]
    return []


def _offload_written(f: dict) -> str:
    """The offload choice the arguments write: optimizer with --optimizer-cpu-offload and a whole fraction."""
    if "--optimizer-cpu-offload" not in f:
        return "none"
    fraction = _float(f, "--optimizer-offload-fraction", 1.0)
    return "optimizer" if fraction == 1.0 else f"optimizer fraction {fraction}"


def pipeline_layout(
    num_layers: int, pp: int, v: int, mtp_layers: int = 0, first: int = 0, last: int = 0
) -> str:
    """Megatron's ``--pipeline-model-parallel-layout`` of ``core.stages.chunk_layout`` (or, with ``first`` and
    ``last``, of ``given_chunks``): the pp x v chunks in order, '|' between them, E the embedding, t a layer,
    m an MTP module, L the loss."""
    chunks = [
        "".join(c)
        for c in (
            given_chunks(num_layers, pp, v, first, last)
            if first or last
            else chunk_layout(num_layers, pp, v)
        )
    ]
    chunks[-1] = chunks[-1].replace("L", "m" * mtp_layers + "L")
    return "|".join(chunks)


def _split_problems(f: dict, layers: int, pp: int) -> list[str]:
    """The pipeline split as megatron-core's TransformerConfig checks it (uneven PP)."""
    layout = f.get("--pipeline-model-parallel-layout")
    if isinstance(layout, str):
        chunks = layout.split("|")
        if (
            len(chunks) % pp
            or layout.count("t") != layers
            or not chunks[0].startswith("E")
            or not chunks[-1].endswith("L")
        ):
            return [
                f"pipeline layout {layout[:40]}... has {len(chunks)} chunks for pp({pp}) and {layout.count('t')} "
                f"layers for num_layers({layers})"
            ]
        return []
    vp = _count(f, "--num-virtual-stages-per-pipeline-rank", 1)
    first, last = (
        _int(f, "--decoder-first-pipeline-num-layers"),
        _int(f, "--decoder-last-pipeline-num-layers"),
    )
    if "--account-for-embedding-in-pipeline-split" in f:
        if (layers + 2) % (pp * vp):
            return [
                f"num_layers({layers}) + embedding + loss is not divisible by pp({pp}) x vp({vp})"
            ]
        return []
    if first is None and last is None:
        return [f"num_layers({layers}) is not divisible by pp({pp})"] if layers % pp else []
    rest, middle = (
        layers - (first or 0) - (last or 0),
        pp - (first is not None) - (last is not None),
    )
    if any(n is not None and n % vp for n in (first, last)):
        return [f"first/last stage layers ({first}, {last}) are not divisible by vp({vp})"]
    if bool(rest) != bool(middle) or (middle and (rest % middle or (rest // middle) % vp)):
        return [f"{rest} middle layers do not split evenly over {middle} middle stages x vp({vp})"]
    return []


def _batch_problems(f: dict, dp: int, pp: int, ctx: ExportContext) -> list[str]:
    out = []
    gbs, mbs = _int(f, "--global-batch-size"), _int(f, "--micro-batch-size")
    if gbs is None or mbs is None:
        return ["--global-batch-size and --micro-batch-size are required"]
    if gbs % (mbs * dp):
        return [f"global batch {gbs} is not divisible by micro batch {mbs} x DP {dp}"]
    k = gbs // (mbs * dp)
    layers = _count(f, "--num-layers", 0)
    lpvs = _int(f, "--num-layers-per-virtual-pipeline-stage")
    if lpvs and (layers // pp) % lpvs:
        out.append(
            f"layers per stage {layers // pp} are not divisible by --num-layers-per-virtual-pipeline-stage {lpvs}"
        )
    elif lpvs and layers // pp // lpvs > 1:
        min_pp = 1 if "--no-overlap-p2p-communication" not in f else 2
        if pp <= min_pp:
            out.append(f"interleaving needs pp > {min_pp}, got {pp}")
        if (
            k < pp or k % pp
        ):  # microbatch groups of pp (Megatron's default group size) must be whole
            out.append(f"interleaving needs microbatches ({k}) to be a multiple of pp({pp})")
    if k != ctx.layout.num_microbatches:
        out.append(f"{k} microbatches per step, layout has {ctx.layout.num_microbatches}")
    return out


def _option_problems(
    f: dict, tp: int, pp: int, cp: int, dp: int, layers: int, ctx: ExportContext
) -> list[str]:
    out = []
    seq = _count(f, "--seq-length", 0)
    if cp > 1 and seq % (2 * cp):
        out.append(f"seq_length({seq}) is not a multiple of 2 x cp({cp})")
    if _count(f, "--max-position-embeddings", 0) < seq:
        out.append(
            f"max_position_embeddings({f.get('--max-position-embeddings')}) < seq_length({seq})"
        )
    if "--sequence-parallel" in f and tp == 1:
        out.append("--sequence-parallel needs tp > 1")
    granularity = f.get("--recompute-granularity")
    if granularity == "full":
        n = _int(f, "--recompute-num-layers")
        if (
            f.get("--recompute-method") not in ("uniform", "block")
            or n is None
            or not 1 <= n <= layers // pp
        ):
            out.append(
                "full recompute needs --recompute-method uniform|block and 1 <= --recompute-num-layers <= layers/pp"
            )
    elif granularity == "selective" and "--recompute-method" in f:
        out.append("selective recompute takes no --recompute-method")
    if "--use-megatron-fsdp" in f:
        if f.get("--ckpt-format") != "fsdp_dtensor" or "--use-distributed-optimizer" not in f:
            out.append(
                "Megatron-FSDP needs --ckpt-format fsdp_dtensor and --use-distributed-optimizer"
            )
        if "--init-model-with-meta-device" not in f:
            out.append("Megatron-FSDP is written with --init-model-with-meta-device")
        if pp > 1:
            out.append(f"Megatron-FSDP is documented without pipeline parallelism, got pp({pp})")
    out += _hyper_problems(f, tp, dp, cp, ctx)
    instances = _count(f, "--num-distributed-optimizer-instances", 1)
    if (dp * cp) % instances:
        out.append(
            f"DP x CP ({dp * cp}) is not divisible by --num-distributed-optimizer-instances {instances}"
        )
    return out


def _float(flags: dict, name: str, default: float) -> float | None:
    value = flags.get(name, default)
    try:
        return None if value is True else float(value)
    except ValueError:
        return None


def _hyper_problems(f: dict, tp: int, dp: int, cp: int, ctx: ExportContext) -> list[str]:
    """The model's hyper-parameters and the overlap flags the prediction assumes (Megatron defaults when absent)."""
    m, out = ctx.model, []
    want = {
        "--norm-epsilon": (1e-5, m.norm_eps),
        "--attention-dropout": (0.1, m.attention_dropout),
        "--hidden-dropout": (0.1, m.hidden_dropout),
    }
    if not m.learned_positions:
        want["--rotary-base"] = (10000.0, float(int(m.rope_theta)))
        if m.rope_scaling is not None:
            want["--rope-scaling-factor"] = (8.0, m.rope_scaling.factor)
    for flag, (default, value) in want.items():
        got = _float(f, flag, default)
        if got is None or not math.isclose(got, value, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{flag} is {f.get(flag, default)}, the model has {value:g}")
    if not m.learned_positions and ("--use-rope-scaling" in f) != (m.rope_scaling is not None):
        out.append(
            f"--use-rope-scaling is {'set' if '--use-rope-scaling' in f else 'missing'}, the model has "
            f"{'no ' if m.rope_scaling is None else ''}llama3 rope scaling"
        )
    qk = m.qk_norm == "head" or m.mla is not None  # MLA's --qk-layernorm: its latent norms
    if ("--qk-layernorm" in f) != qk:
        out.append(
            f"--qk-layernorm is {'set' if '--qk-layernorm' in f else 'missing'}, the model has "
            f"{'' if qk else 'no '}per-head q/k norms"
        )
    if ("--qk-l2-norm" in f) != (m.qk_norm == "l2"):
        out.append(
            f"--qk-l2-norm is {'set' if '--qk-l2-norm' in f else 'missing'}, the model has "
            f"{'' if m.qk_norm == 'l2' else 'no '}q/k L2 norms"
        )
    nope = m.nope_interval
    if f.get("--no-rope-freq") != (str(nope) if nope else None):
        out.append(
            f"--no-rope-freq is {f.get('--no-rope-freq', 'missing')}, the model has "
            + (f"a NoPE layer every {nope}" if nope else "RoPE in every layer")
        )
    qkv = m.qkv_bias and not m.linear_bias
    if ("--add-qkv-bias" in f) != qkv:
        out.append(
            f"--add-qkv-bias is {'set' if '--add-qkv-bias' in f else 'missing'}, the model has "
            f"{'' if qkv else 'no '}Q/K/V-only biases"
        )
    if "--tp-comm-overlap" in f and (tp == 1 or "--sequence-parallel" not in f):
        out.append("--tp-comm-overlap needs tp > 1 and --sequence-parallel")
    if "--overlap-param-gather" in f and "--use-distributed-optimizer" not in f:
        out.append("--overlap-param-gather needs --use-distributed-optimizer")
    fused = (
        f.get("--cross-entropy-fusion-impl", "native")
        if "--cross-entropy-loss-fusion" in f
        else "unfused"
    )
    if fused != written_loss_kernel(ctx):
        out.append(
            f"the loss runs {fused} (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl); the prediction "
            f"costs {written_loss_kernel(ctx)}"
        )
    waits = ctx.workload.grad_reduce_overlap is False
    if dp * cp > 1 and ("--overlap-grad-reduce" in f) == waits:
        out.append(
            "--overlap-grad-reduce is set; the predicted time waits for the gradient reduction"
            if waits
            else "--overlap-grad-reduce is missing; the predicted time overlaps the gradient reduction"
        )
    lay = ctx.layout
    if (
        lay.tp > 1
        and lay.sequence_parallel
        and ctx.workload.tp_comm_overlap
        and "--tp-comm-overlap" not in f
    ):
        out.append(
            "--tp-comm-overlap is missing; the predicted time assumed TP communication overlap"
        )
    return out


def _moe_problems(
    f: dict, world: int, tp: int, pp: int, layers: int, ctx: ExportContext
) -> list[str]:
    """arguments.py validate_args, parallel_state and TransformerConfig rules for the MoE flags, and the model's numbers."""
    m, lay, out = ctx.model, ctx.layout, []
    experts = _int(f, "--num-experts")
    ep, etp = _count(f, DEGREE_FLAGS["ep"], 1), _count(f, DEGREE_FLAGS["etp"], tp)
    if m.moe is None:
        if experts is not None or ep > 1:
            out.append(f"--num-experts {experts} / ep {ep} written for a model without experts")
        return out
    moe = m.moe
    if experts is None:
        return [f"--num-experts is missing; the model has {moe.num_experts} experts"]
    if experts % ep:
        out.append(f"num_experts({experts}) is not a multiple of --expert-model-parallel-size {ep}")
    if world % (etp * ep * pp):
        out.append(f"world size {world} is not divisible by etp({etp}) x ep({ep}) x pp({pp})")
    else:
        edp = world // (etp * ep * pp)
        instances = _count(f, "--num-distributed-optimizer-instances", 1)
        if edp % instances:
            out.append(
                f"expert data parallel size {edp} is not divisible by --num-distributed-optimizer-instances {instances}"
            )
    try:
        pattern = eval_layer_freq(f.get("--moe-layer-freq", 1), layers)
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError) as exc:
        pattern = None
        out.append(
            f"--moe-layer-freq {f.get('--moe-layer-freq')!r} is not a Megatron pattern: {exc}"
        )
    if pattern is not None and pattern != [int(m.is_moe_layer(i)) for i in range(m.num_layers)]:
        out.append(
            f"--moe-layer-freq {f.get('--moe-layer-freq', 1)} makes layers "
            f"{[i for i, v in enumerate(pattern) if v][:8]}... MoE, the model "
            f"{[i for i in range(m.num_layers) if m.is_moe_layer(i)][:8]}..."
        )
    topk = _count(f, "--moe-router-topk", 2)
    score = f.get("--moe-router-score-function", "softmax")
    if topk == 1 and score == "softmax" and "--moe-router-pre-softmax" not in f:
        out.append("a top-1 softmax router needs --moe-router-pre-softmax (TransformerConfig)")
    if "--moe-router-enable-expert-bias" in f and score != "sigmoid":
        out.append("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid")
    if "--moe-pad-expert-input-to-capacity" in f and "--moe-expert-capacity-factor" not in f:
        out.append("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor")
    if dict(dispatcher_args(ctx)) != {k: f.get(k) for k in dict(dispatcher_args(ctx))}:
        out.append(
            f"dispatcher {f.get('--moe-token-dispatcher-type')} / {f.get('--moe-flex-dispatcher-backend')}, "
            f"the prediction assumed {dict(dispatcher_args(ctx))}"
        )
    if "--disable-bias-linear" not in f and etp != 1:
        out.append(f"biases in MoE layers need --expert-tensor-parallel-size 1, got {etp}")
    shared = moe.num_shared_experts * moe.shared_d_ff or None
    capacity = _float(f, "--moe-expert-capacity-factor", -1.0)
    return out + mismatches(
        {
            "num_experts": (experts, moe.num_experts),
            "topk": (topk, moe.top_k),
            "expert ffn": (_int(f, "--moe-ffn-hidden-size"), moe.expert_d_ff),
            "shared ffn": (_int(f, "--moe-shared-expert-intermediate-size"), shared),
            "ep": (ep, lay.ep),
            "etp": (etp, lay.etp),
            "capacity factor": (
                None if capacity is None or capacity < 0 else capacity,
                moe.capacity_factor,
            ),
            "shared gate": (
                "--moe-shared-expert-gate" in f,
                bool(moe.shared_expert_gate and moe.num_shared_experts),
            ),
        },
        has="the model and layout have",
    )


def dispatcher_args(ctx: ExportContext) -> list[tuple[str, object]]:
    """The token dispatcher the prediction assumed: DeepEP behind the flex dispatcher where tokens cross
    scale-out once per node (``core.frameworks.node_dedup``), else NCCL AllToAll."""
    if ctx.layout.ep > 1 and node_dedup(ctx.model, ctx.workload, ctx.cluster.accelerator.kind):
        return [
            ("--moe-token-dispatcher-type", "flex"),
            ("--moe-flex-dispatcher-backend", "deepep"),
        ]
    return [("--moe-token-dispatcher-type", "alltoall")]


def _mla_problems(f: dict, ctx: ExportContext) -> list[str]:
    """Latent attention and MTP flags against the model (MLATransformerConfig's rules included)."""
    m, out = ctx.model, []
    if ("--multi-latent-attention" in f) != (m.mla is not None):
        return [
            f"--multi-latent-attention is {'set' if '--multi-latent-attention' in f else 'missing'}, the model "
            f"has {'no ' if m.mla is None else ''}latent attention"
        ]
    if m.mla is not None:
        a = m.mla
        out += mismatches(
            {
                "q_lora_rank": (_int(f, "--q-lora-rank"), a.q_lora_rank),
                "kv_lora_rank": (_count(f, "--kv-lora-rank", 32), a.kv_lora_rank),
                "qk_head_dim": (_count(f, "--qk-head-dim", 128), a.qk_nope_head_dim),
                "qk_pos_emb_head_dim": (_count(f, "--qk-pos-emb-head-dim", 64), a.qk_rope_head_dim),
                "v_head_dim": (_count(f, "--v-head-dim", 128), a.v_head_dim),
                "latent norms": ("--qk-layernorm" in f, True),
            },
            has="the model has",
        )
        if "--group-query-attention" in f:
            out.append(
                "--group-query-attention is mutually exclusive with --multi-latent-attention"
            )
        if f.get("--rope-type", "yarn") != "yarn" and "--no-rope-fusion" not in f:
            out.append("MLA with --rope-type rope needs --no-rope-fusion (MLATransformerConfig)")
    if _count(f, "--mtp-num-layers", 0) != m.mtp_layers:
        out.append(
            f"--mtp-num-layers is {f.get('--mtp-num-layers', 0)}, the model has {m.mtp_layers}"
        )
    return out
