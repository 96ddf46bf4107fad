"""Megatron-LM: a bash array of ``pretrain_gpt.py`` arguments, one flag per line.

Mapping (checked against NVIDIA/Megatron-LM megatron/training/arguments.py and megatron-core
0.16.1 model_parallel_config.py, transformer_config.py, parallel_state.py,
num_microbatches_calculator.py):

- DP = world / (TP x PP x CP) = dp x fsdp; ``--micro-batch-size`` is sequences per DP rank per
  microbatch, ``--global-batch-size`` = B, microbatches = B / (micro x DP).
- ZeRO-1 -> ``--use-distributed-optimizer``; ZeRO-2/3 -> Megatron-FSDP
  (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads|optim_grads_params``).
  A replicated dp part over a sharded fsdp part -> ``--num-distributed-optimizer-instances dp``
  (partial distributed optimizer; HSDP under Megatron-FSDP). Sharding spans fsdp x cp, as in
  Megatron's dp-cp group.
- Interleaving -> ``--num-layers-per-virtual-pipeline-stage L / (PP x v)``; with an uneven split
  (core.stages) ``--num-virtual-stages-per-pipeline-rank v`` and either
  ``--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split`` or
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``.
- Recompute: full -> granularity full, method uniform, 1 layer per unit (the layer input is
  kept); selective -> granularity selective (core attention; Megatron cannot recompute only the
  dense MLP activation, so that part of layoutsearch's selective policy is kept in memory).
- Hyper-parameters: ``--rotary-base`` (an int in arguments.py), ``--use-rope-scaling`` /
  ``--rope-scaling-factor`` (Llama 3.1 scaling; megatron-core fixes low 1, high 4, original 8192),
  ``--norm-epsilon``, ``--attention-dropout`` / ``--hidden-dropout`` (Megatron's default is 0.1),
  ``--add-qkv-bias`` (Qwen2), activation ``--swiglu`` (gated SiLU) or GELU (Megatron's default).
- Overlap the cost model assumes: ``--overlap-grad-reduce`` with data parallelism,
  ``--overlap-param-gather`` with the distributed optimizer, ``--tp-comm-overlap`` when the
  workload says TP collectives are pipelined with their GEMMs (Transformer Engine userbuffers).
- Not decided (``MEGATRON_PLACEHOLDER_ARGS``, values ``<set me: ...>``): data, tokenizer, learning
  rate and schedule, training iterations, checkpoint paths.
- Not expressible: a GPipe schedule (Megatron runs 1F1B or interleaved 1F1B).
"""

from __future__ import annotations

import math
import shlex

from layoutsearch.core.frameworks import profile_of
from layoutsearch.core.stages import EMBEDDING_AND_LOSS, EVEN, FIRST_LAST, split_layers
from layoutsearch.core.rules import Capabilities
from layoutsearch.export.context import ExportContext, comment_block, header_lines, placeholder_note, set_me

ARRAY = "MEGATRON_ARGS"
PLACEHOLDER_ARRAY = "MEGATRON_PLACEHOLDER_ARGS"
# megatron-core's llama3 scaling (rope_utils / rotary_pos_embedding): only the factor is a flag.
MEGATRON_ROPE_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
GATED_ACTIVATIONS = ("silu", "swish")  # --swiglu
PLAIN_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # Megatron's default GELU
MXFP8_ACCELERATORS = ("b200", "gb200")  # Blackwell: fp8 with per-block scales (MXFP8)

CAPABILITIES = Capabilities(
    target="megatron", framework="Megatron-LM", pipeline_schedules=("1f1b", "interleaved"),
    pipeline_splits=("even", "embedding-and-loss", "first-last"), precisions=("bf16", "fp16", "fp8"),
    why={"megatron-pipeline": "it runs 1F1B, or interleaved 1F1B with virtual stages; no GPipe"})


def _model_args(ctx: ExportContext) -> list[tuple[str, object]]:
    m = ctx.model
    args: list[tuple[str, object]] = [
        ("--num-layers", m.num_layers), ("--hidden-size", m.d_model), ("--ffn-hidden-size", m.d_ff),
        ("--num-attention-heads", m.num_heads), ("--kv-channels", m.head_dim),
        ("--seq-length", ctx.seq_len),
        ("--max-position-embeddings", m.learned_positions if m.learned_positions else ctx.seq_len),
        ("--position-embedding-type", "learned_absolute" if m.learned_positions else "rope"),
        ("--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"),
        ("--norm-epsilon", repr(float(m.norm_eps))),
    ]
    if not m.learned_positions:
        args.append(("--rotary-base", int(m.rope_theta)))
        if m.rope_scaling is not None:
            args += [("--use-rope-scaling", None), ("--rope-scaling-factor", f"{m.rope_scaling.factor:g}")]
    args += [("--attention-dropout", repr(float(m.attention_dropout))),
             ("--hidden-dropout", repr(float(m.hidden_dropout)))]
    if m.num_kv_heads != m.num_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    if m.mlp == "gated":
        args.append(("--swiglu", None))
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", None))
    args.append(("--bf16", None))
    if ctx.workload.precision == "fp8":  # Transformer Engine fp8 GEMMs (E4M3 forward, E5M2 gradients)
        args.append(("--fp8-format", "hybrid"))
        if ctx.cluster.accelerator.id in MXFP8_ACCELERATORS:
            args.append(("--fp8-recipe", "mxfp8"))
        if profile_of(ctx.workload.framework, "gpu").fp8_param_gather and ctx.effective_zero_stage >= 1:
            args.append(("--fp8-param-gather", None))  # the prediction gathers fp8 weights
    return args


def _parallel_args(ctx: ExportContext) -> list[tuple[str, object]]:
    lay = ctx.layout
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", lay.tp), ("--pipeline-model-parallel-size", lay.pp),
        ("--context-parallel-size", lay.cp),
    ]
    if lay.tp > 1 and lay.sequence_parallel:
        args.append(("--sequence-parallel", None))
    first, middle, last, kind, _ = (int(x[0]) for x in split_layers(
        ctx.model.num_layers, lay.pp, lay.virtual_stages, lay.first_stage_layers or 0, lay.last_stage_layers or 0))
    if lay.virtual_stages > 1 and kind == EVEN:
        args.append(("--num-layers-per-virtual-pipeline-stage", ctx.model.num_layers // (lay.pp * lay.virtual_stages)))
    elif lay.virtual_stages > 1:  # Megatron-LM: uneven splits give the chunk count instead of its layers
        args.append(("--num-virtual-stages-per-pipeline-rank", lay.virtual_stages))
    if kind == EMBEDDING_AND_LOSS:
        args += [("--account-for-embedding-in-pipeline-split", None), ("--account-for-loss-in-pipeline-split", None)]
    elif kind == FIRST_LAST:
        args += [("--decoder-first-pipeline-num-layers", first), ("--decoder-last-pipeline-num-layers", last)]
    args += [("--micro-batch-size", ctx.microbatch_seqs), ("--global-batch-size", ctx.global_batch_seqs)]
    zero = ctx.effective_zero_stage
    if zero == 1:
        args.append(("--use-distributed-optimizer", None))
    elif zero in (2, 3):
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        args += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", strategy),
                 ("--use-distributed-optimizer", None), ("--no-gradient-accumulation-fusion", None),
                 ("--ckpt-format", "fsdp_dtensor")]
    if zero >= 1 and lay.dp > 1:
        args.append(("--num-distributed-optimizer-instances", lay.dp))
    if lay.data_units * lay.cp > 1:  # the cost model overlaps the gradient reduction with the backward pass
        args.append(("--overlap-grad-reduce", None))
        if zero >= 1:  # and the parameter all-gather with the forward pass
            args.append(("--overlap-param-gather", None))
    if lay.tp > 1 and lay.sequence_parallel and ctx.workload.tp_comm_overlap:  # arguments.py: needs SP
        args.append(("--tp-comm-overlap", None))
    if lay.recompute == "full":
        args += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    elif lay.recompute == "selective":
        args.append(("--recompute-granularity", "selective"))
    return args


def _placeholder_args() -> list[tuple[str, str]]:
    """What layoutsearch does not decide, as in Megatron-LM's examples/ scripts (DATA_ARGS, TRAINING_ARGS)."""
    return [("--data-path", set_me("data prefix of your preprocessed .bin/.idx files")),
            ("--tokenizer-type", set_me("e.g. HuggingFaceTokenizer")),
            ("--tokenizer-model", set_me("tokenizer path or Hugging Face id")),
            ("--lr", set_me("peak learning rate")), ("--min-lr", set_me("final learning rate")),
            ("--lr-decay-style", set_me("e.g. cosine")), ("--lr-warmup-iters", set_me("warmup iterations")),
            ("--train-iters", set_me("training iterations")),
            ("--save", set_me("checkpoint directory")), ("--load", set_me("checkpoint directory to resume from"))]


def _model_notes(ctx: ExportContext) -> list[str]:
    m, notes = ctx.model, []
    act = m.activation_name
    if act not in (GATED_ACTIVATIONS if m.mlp == "gated" else PLAIN_ACTIVATIONS):
        notes.append(f"activation {act}: Megatron writes {'--swiglu (SiLU)' if m.mlp == 'gated' else 'GELU'}; "
                     f"set the activation in your model provider to match.")
    scaling = m.rope_scaling
    if scaling is not None and any(getattr(scaling, k) != v for k, v in MEGATRON_ROPE_FIXED.items()):
        notes.append(f"rope scaling: megatron-core fixes low_freq_factor 1, high_freq_factor 4 and original "
                     f"context 8192; this model has {scaling.low_freq_factor:g}, {scaling.high_freq_factor:g}, "
                     f"{scaling.original_max_position_embeddings}.")
    return notes


def render(ctx: ExportContext) -> str:
    """A sourceable bash file defining ``MEGATRON_ARGS``."""
    lay = ctx.layout
    fsdp = ctx.effective_zero_stage >= 2
    notes = header_lines(ctx) + [
        f"Data-parallel size (Megatron's DP) = {lay.num_devices} / (tp {lay.tp} x pp {lay.pp} x cp {lay.cp}) = "
        f"{lay.data_units}; {lay.num_microbatches} microbatches per step.",
        f"Vocabulary: {ctx.model.vocab_size} tokens from your tokenizer (Megatron pads it to a multiple of 128 x tp).",
        f"Usage: source THIS_FILE; torchrun ... pretrain_gpt.py \"${{{ARRAY}[@]}}\" \"${{{PLACEHOLDER_ARRAY}[@]}}\"",
        placeholder_note() + f" They are in {PLACEHOLDER_ARRAY}.",
    ] + _model_notes(ctx)
    if lay.recompute == "selective":
        notes.append("recompute selective -> --recompute-granularity selective (core attention only; with Transformer "
                     "Engine's fused attention that saves little). layoutsearch's selective also drops the MLP "
                     "activation, which Megatron keeps: expect somewhat more activation memory than predicted.")
    lines = ["#!/usr/bin/env bash", comment_block(notes).rstrip("\n")]
    if (lay.tp > 1 or lay.cp > 1) and not fsdp:
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron requires it with TP/CP before Blackwell")
    elif fsdp:
        lines.append("unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP overlaps better without it")
    lines.append(f"{ARRAY}=(")
    for title, args in (("model", _model_args(ctx)), ("parallelism, batch, recompute", _parallel_args(ctx))):
        lines.append(f"  # {title}")
        lines += [f"  {flag}" if value is None else f"  {flag} {shlex.quote(str(value))}" for flag, value in args]
    lines.append(")")
    lines.append(f"# PLACEHOLDER: not decided by layoutsearch; replace every <set me: ...> before launch")
    lines.append(f"{PLACEHOLDER_ARRAY}=(")
    lines += [f"  {flag} {shlex.quote(value)}" for flag, value in _placeholder_args()]
    lines.append(")")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- checker
def parse_args(text: str) -> dict[str, str | bool]:
    """The flags inside ``MEGATRON_ARGS=( ... )``: {flag: value, or True for a switch}."""
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
    flags: dict[str, str | bool] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            flags[tok] = nxt if nxt is not None and not nxt.startswith("--") else True
    return flags


def _int(flags: dict, name: str, default: int | None = None) -> int | None:
    value = flags.get(name, default)
    return None if value is None or value is True else int(value)


def check(text: str, ctx: ExportContext) -> list[str]:
    """arguments.py / megatron-core rules re-derived on the written arguments, and agreement with the layout."""
    f = parse_args(text)
    if not f:
        return [f"no {ARRAY}=( ... ) array found"]
    world, out = ctx.num_devices, []
    tp, pp, cp = (_int(f, n, 1) for n in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                          "--context-parallel-size"))
    if world % (tp * pp * cp):
        return [f"world size {world} is not divisible by tp({tp}) x pp({pp}) x cp({cp})"]
    dp = world // (tp * pp * cp)
    layers, heads = _int(f, "--num-layers", 0), _int(f, "--num-attention-heads", 0)
    groups = _int(f, "--num-query-groups", heads) if "--group-query-attention" in f else heads
    if heads % tp:
        out.append(f"num_attention_heads({heads}) is not a multiple of tp({tp})")
    if groups % tp and tp % groups:
        out.append(f"num_query_groups({groups}) must be a multiple or divisor of tp({tp})")
    out += _split_problems(f, layers, pp)
    out += _batch_problems(f, dp, pp, ctx) + _option_problems(f, tp, pp, cp, dp, layers, ctx)
    lay = ctx.layout
    got = {"tp": tp, "pp": pp, "cp": cp, "dp x fsdp": dp, "global batch": _int(f, "--global-batch-size"),
           "micro batch": _int(f, "--micro-batch-size")}
    want = {"tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "dp x fsdp": lay.data_units,
            "global batch": ctx.global_batch_seqs, "micro batch": ctx.microbatch_seqs}
    out += [f"{k} is {got[k]}, layout has {want[k]}" for k in want if got[k] != want[k]]
    return out


def _split_problems(f: dict, layers: int, pp: int) -> list[str]:
    """The pipeline split as megatron-core's TransformerConfig checks it (uneven PP)."""
    vp = _int(f, "--num-virtual-stages-per-pipeline-rank", 1)
    first, last = _int(f, "--decoder-first-pipeline-num-layers"), _int(f, "--decoder-last-pipeline-num-layers")
    if "--account-for-embedding-in-pipeline-split" in f:
        if (layers + 2) % (pp * vp):
            return [f"num_layers({layers}) + embedding + loss is not divisible by pp({pp}) x vp({vp})"]
        return []
    if first is None and last is None:
        return [f"num_layers({layers}) is not divisible by pp({pp})"] if layers % pp else []
    rest, middle = layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
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
    layers = _int(f, "--num-layers", 0)
    lpvs = _int(f, "--num-layers-per-virtual-pipeline-stage")
    if lpvs and (layers // pp) % lpvs:
        out.append(f"layers per stage {layers // pp} are not divisible by --num-layers-per-virtual-pipeline-stage {lpvs}")
    elif lpvs and layers // pp // lpvs > 1:
        min_pp = 1 if "--no-overlap-p2p-communication" not in f else 2
        if pp <= min_pp:
            out.append(f"interleaving needs pp > {min_pp}, got {pp}")
        if k < pp or k % pp:  # microbatch groups of pp (Megatron's default group size) must be whole
            out.append(f"interleaving needs microbatches ({k}) to be a multiple of pp({pp})")
    if k != ctx.layout.num_microbatches:
        out.append(f"{k} microbatches per step, layout has {ctx.layout.num_microbatches}")
    return out


def _option_problems(f: dict, tp: int, pp: int, cp: int, dp: int, layers: int, ctx: ExportContext) -> list[str]:
    out = []
    seq = _int(f, "--seq-length", 0)
    if cp > 1 and seq % (2 * cp):
        out.append(f"seq_length({seq}) is not a multiple of 2 x cp({cp})")
    if _int(f, "--max-position-embeddings", 0) < seq:
        out.append(f"max_position_embeddings({f.get('--max-position-embeddings')}) < seq_length({seq})")
    if "--sequence-parallel" in f and tp == 1:
        out.append("--sequence-parallel needs tp > 1")
    granularity = f.get("--recompute-granularity")
    if granularity == "full":
        n = _int(f, "--recompute-num-layers")
        if f.get("--recompute-method") not in ("uniform", "block") or n is None or not 1 <= n <= layers // pp:
            out.append("full recompute needs --recompute-method uniform|block and 1 <= --recompute-num-layers <= layers/pp")
    elif granularity == "selective" and "--recompute-method" in f:
        out.append("selective recompute takes no --recompute-method")
    if "--use-megatron-fsdp" in f:
        if f.get("--ckpt-format") != "fsdp_dtensor" or "--use-distributed-optimizer" not in f:
            out.append("Megatron-FSDP needs --ckpt-format fsdp_dtensor and --use-distributed-optimizer")
    out += _hyper_problems(f, tp, dp, cp, ctx)
    instances = _int(f, "--num-distributed-optimizer-instances", 1)
    if (dp * cp) % instances:
        out.append(f"DP x CP ({dp * cp}) is not divisible by --num-distributed-optimizer-instances {instances}")
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
    want = {"--norm-epsilon": (1e-5, m.norm_eps), "--attention-dropout": (0.1, m.attention_dropout),
            "--hidden-dropout": (0.1, m.hidden_dropout)}
    if not m.learned_positions:
        want["--rotary-base"] = (10000.0, float(int(m.rope_theta)))
        if m.rope_scaling is not None:
            want["--rope-scaling-factor"] = (8.0, m.rope_scaling.factor)
    for flag, (default, value) in want.items():
        got = _float(f, flag, default)
        if got is None or not math.isclose(got, value, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{flag} is {f.get(flag, default)}, the model has {value:g}")
    if not m.learned_positions and ("--use-rope-scaling" in f) != (m.rope_scaling is not None):
        out.append(f"--use-rope-scaling is {'set' if '--use-rope-scaling' in f else 'missing'}, the model has "
                   f"{'no ' if m.rope_scaling is None else ''}llama3 rope scaling")
    qkv = m.qkv_bias and not m.linear_bias
    if ("--add-qkv-bias" in f) != qkv:
        out.append(f"--add-qkv-bias is {'set' if '--add-qkv-bias' in f else 'missing'}, the model has "
                   f"{'' if qkv else 'no '}Q/K/V-only biases")
    if "--tp-comm-overlap" in f and (tp == 1 or "--sequence-parallel" not in f):
        out.append("--tp-comm-overlap needs tp > 1 and --sequence-parallel")
    if "--overlap-param-gather" in f and "--use-distributed-optimizer" not in f:
        out.append("--overlap-param-gather needs --use-distributed-optimizer")
    if dp * cp > 1 and "--overlap-grad-reduce" not in f:
        out.append("--overlap-grad-reduce is missing; the predicted time overlaps the gradient reduction")
    lay = ctx.layout
    if lay.tp > 1 and lay.sequence_parallel and ctx.workload.tp_comm_overlap and "--tp-comm-overlap" not in f:
        out.append("--tp-comm-overlap is missing; the predicted time assumed TP communication overlap")
    return out
