"""torchtitan: a TOML job file in the v0.2.x schema (torchtitan/config/job_config.py, v0.2.2).

Mapping (checked against torchtitan 0.2.2: config/job_config.py, distributed/parallel_dims.py,
distributed/pipeline_parallel.py, train.py, models/llama3):

- ``[parallelism]``: dp -> data_parallel_replicate_degree, fsdp -> data_parallel_shard_degree
  (FSDP2; HSDP when both > 1), tp, pp, cp -> their degrees. ParallelDims requires
  replicate x shard x cp x tp x pp = world; FSDP runs over shard x cp.
- ZeRO-3 -> ``fsdp_reshard_after_forward = "always"``; ZeRO-2 -> ``"never"`` (gathered weights
  stay until backward). ZeRO-0 -> everything in the replicate degree (DDP).
- Batch: ``local_batch_size`` is sequences per data-parallel rank per step part: without
  pipeline, one microbatch (accumulation = global / (local x dp x fsdp)); with pipeline, all
  K microbatches, split by ``pipeline_parallel_microbatch_size``.
- Pipeline: 1f1b -> 1F1B, gpipe -> GPipe, interleaved -> Interleaved1F1B, zb-h1 (v > 1) ->
  InterleavedZeroBubble, zb-v -> ZBVZeroBubble, dualpipev -> DualPipeV (``SCHEDULES``), with
  ``pipeline_parallel_layers_per_stage`` = L / (pp x v) and no embedding weight in the split
  (first/last_stage_less_layers = 0), so stages hold equal layer counts as in the cost model; the
  balanced split (``core.stages.balanced_chunks``) as ``module_fqns_per_model_part``, the modules of
  each of the pp x v chunks in order (``tok_embeddings`` opening the first, ``layers.<i>``, ``norm`` and
  ``output`` closing the last; distributed/pipeline_parallel.py pipeline_module_split places chunk i on
  rank i mod pp under 1F1B and Interleaved1F1B, as the balanced split is costed).
- Recompute: none/full -> mode none/full; selective -> mode selective with op-level SAC (saves
  every other matmul and the attention output: not the same set of tensors as layoutsearch's
  selective policy, which keeps all matmul inputs and recomputes the attention core).
- ``[compile] enable`` (components model and loss, or model alone where the loss was costed eager,
  ``Workload.compiled_loss``): what the prediction costed, fused element-wise
  kernels (on; ``Workload.torch_compile``, off by default in torchtitan's config), or eager PyTorch
  with one kernel per op (off: ``--no-torch-compile``). Async TP requires it on.
- Offload params -> ``[training] enable_cpu_offload = true`` (FSDP2's CPUOffloadPolicy: parameters,
  gradients and optimizer state in host memory, the optimizer stepping there); optimizer state alone
  is refused (``torchtitan-offload``).
- Model hyper-parameters: the llama3 flavors fix rope_theta 500000 and norm_eps 1e-5; a custom
  flavor (``custom_flavor_args``) carries the model's rope_theta and norm_eps. Dropout: none in
  torchtitan's llama3 (a model with dropout is noted).
- Not decided: ``[job] dump_folder``, ``[model] hf_assets_path`` (tokenizer),
  ``[training] dataset`` / ``dataset_path``, ``[checkpoint] folder`` are ``<set me: ...>`` strings
  (so nothing falls back to the test dataset ``c4_test`` or the test tokenizer); the learning rate
  (``[optimizer] lr``) and ``[training] steps`` are numbers, so they are ``# PLACEHOLDER:`` comments.
- Mixture of experts (torchtitan 0.2.2 models/deepseek_v3, models/qwen3, models/moe,
  distributed/parallel_dims.py): ``[model] name`` deepseek_v3 (latent attention, dense first layers,
  shared experts) or qwen3 (MoE with q/k norms), the flavor whose sizes match or the ModelArgs the
  header says to register; ``expert_parallel_degree`` = ep and ``expert_tensor_parallel_degree`` = etp.
  torchtitan builds expert groups as pp x dp_replicate x efsdp x ep x etp with efsdp = dp_shard x cp
  x tp / (ep x etp): ep x etp come out of the FSDP shard, cp and tp devices, never out of replicas;
  with ep > 1 etp is 1 or tp, with ep = 1 the experts are tensor-parallel over tp (etp = tp, written
  as expert_tensor_parallel_degree 1, torchtitan's "no effect when ep = 1"). A router bias is
  torchtitan's expert_bias buffer (load_balance_coeff), not a parameter. ``expert_parallel_comm_backend
  = "deepep"`` where the prediction sent tokens over scale-out once per node (``Workload.deepep``).
- Llama 4 (models/llama4): no flavor is matched (they mask by document, block_causal); the header gives the
  ``TransformerModelArgs`` to register (``llama4_args``): NoPE every n-th layer, chunks of fixed_attn_block_size on
  the others under FlexAttention where the chunk is shorter than the sequence (SDPA elsewhere; its model args refuse
  cp > 1 beside FlexAttention: rule chunk-cp), causal masks, Llama 4's router, multiple_of = the expert width.
  Scout's q/k L2 norms are refused (its attention has none).
- gpt-oss (models/gpt_oss): its 20b / 120b flavor where the sizes match (``GPT_OSS_FLAVORS``), else the
  ``GptOssModelArgs`` to register (``custom_flavor_args``): biases on Q, K, V, O and the experts, a sink per head,
  sliding windows on the even layers under FlexAttention, a biased softmax top-k router. That model has no
  pipelining function, refuses cp > 1, is never compiled and takes fp8 on its attention's linears only, so the
  capabilities refuse pp, cp, a compiled prediction and fp8 for it (rules gpt-oss-*); compile.enable is written
  false, as the eager prediction costed.
- Not expressible: ZeRO-1; KV-head replication (tp > kv heads); cp without weight sharding;
  architectures other than Llama-3 (gated MLP, RMSNorm, RoPE, untied, no biases), DeepSeek-V3,
  Qwen3-MoE, Llama 4 and gpt-oss (Mixtral, Grok: export to megatron); etp other than 1 or tp, etp without ep
  other than tp, ep over dp replicas.
"""

from __future__ import annotations

import math
import operator
import tomllib
import unicodedata

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.frameworks import fp8_recipe_of, node_dedup
from layoutsearch.core.rules import deepseek_block, gpt_oss_block, llama4_block, qwen3_moe_block
from layoutsearch.core.stages import balanced_chunks
from layoutsearch.costs.params import layer_weights
from layoutsearch.export.context import (
    ExportContext,
    comment_block,
    header_lines,
    mismatches,
    placeholder_note,
    set_me,
)
from layoutsearch.export.rank_order import TORCHTITAN_ORDERS, gpu_rank_lines

# layoutsearch's schedules as torch.distributed.pipelining's get_schedule_class names (torchtitan
# passes pipeline_parallel_schedule to it); zb-h1 runs there interleaved only (two or more stages
# per rank), DualPipe (two weight copies) not at all (frameworks.torchtitan)
SCHEDULES = {
    "1f1b": "1F1B",
    "gpipe": "GPipe",
    "interleaved": "Interleaved1F1B",
    "zb-h1": "InterleavedZeroBubble",
    "zb-v": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}
SINGLE_STAGE = ("1F1B", "GPipe")
V_STYLE = ("ZBVZeroBubble", "DualPipeV")  # exactly two stages per rank, in a V
# torchtitan 0.2.2 models/llama3/__init__.py: flavor -> (dim, n_layers, n_heads, n_kv_heads, vocab,
# ffn_dim_multiplier, multiple_of); the FFN width follows FeedForward (model.py).
LLAMA3_FLAVORS = {
    "debugmodel": (256, 6, 16, 16, 2048, None, 256),
    "8B": (4096, 32, 32, 8, 128256, 1.3, 1024),
    "70B": (8192, 80, 64, 8, 128256, 1.3, 4096),
    "405B": (16384, 126, 128, 8, 128256, 1.2, 4096),
}


def llama3_ffn(dim: int, multiplier: float | None, multiple_of: int) -> int:
    """torchtitan llama3 FeedForward width: 2/3 of 4 dim, times the multiplier, rounded up."""
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


# torchtitan 0.2.2 models/deepseek_v3/__init__.py deepseekv3_args: flavor -> (vocab, dim, inter_dim, moe_inter_dim,
# n_layers, n_dense_layers, n_heads, num_experts, num_shared_experts, top_k, q_lora_rank, kv_lora_rank,
# qk_nope_head_dim, qk_rope_head_dim, v_head_dim); each has norm_eps 1e-5 and rope_theta 10000
DEEPSEEK_V3_FLAVORS = {
    "debugmodel": (2048, 256, 1024, 256, 6, 1, 16, 8, 2, 3, 0, 512, 128, 64, 128),
    "16B": (102400, 2048, 10944, 1408, 27, 1, 16, 64, 2, 6, 0, 512, 128, 64, 128),
    "236B": (102400, 5120, 12288, 1536, 60, 1, 128, 160, 2, 6, 1536, 512, 128, 64, 128),
    "671B": (129280, 7168, 18432, 2048, 61, 3, 128, 256, 1, 8, 1536, 512, 128, 64, 128),
}
DEEPSEEK_V3_FIXED = {"norm_eps": 1e-5, "rope_theta": 10000.0}
DEEPSEEK_V3_FLEX = (
    "16B",
    "236B",
    "671B",
)  # attn_type "flex": DeepSeekV3ModelArgs refuses them with cp > 1
# models/qwen3/__init__.py qwen3_args, the MoE flavors: flavor -> (vocab, head_dim, dim, n_layers, n_heads,
# n_kv_heads, hidden_dim, moe_inter_dim, num_experts, num_shared_experts, top_k, enable_weight_tying); norm_eps 1e-6
QWEN3_MOE_FLAVORS = {
    "debugmodel_moe": (2048, 128, 256, 8, 16, 8, 3072, 768, 64, 0, 8, False),
    "30B-A3B": (151936, 128, 2048, 48, 32, 4, 6144, 768, 128, 0, 8, False),
    "235B-A22B": (151936, 128, 4096, 94, 64, 4, 12288, 1536, 128, 0, 8, False),
}
QWEN3_THETA = {"debugmodel_moe": 1e6, "30B-A3B": 1e6, "235B-A22B": 5e6}
# models/gpt_oss/__init__.py gptoss_configs over GptOssModelArgs' defaults (model/args.py): flavor -> (vocab, dim,
# moe_inter_dim, n_layers, n_heads, n_kv_heads, head_dim, sliding_window_size, num_experts, top_k); each has
# norm_eps 1e-5, rope_theta 150000, swiglu_limit 7.0, YaRN (factor 32 over 4096 positions), causal masks
GPT_OSS_FLAVORS = {
    "debugmodel": (201088, 256, 2880, 4, 64, 8, 64, 128, 8, 4),
    "20b": (201088, 2880, 2880, 24, 64, 8, 64, 128, 32, 4),
    "120b": (201088, 2880, 2880, 36, 64, 8, 64, 128, 128, 4),
}
GPT_OSS_FIXED = {"norm_eps": 1e-5, "rope_theta": 150000.0}
FAMILY_REGISTRY = {
    "llama3": ("llama3/__init__.py", "llama3_args"),
    "deepseek_v3": ("deepseek_v3/__init__.py", "deepseekv3_args"),
    "qwen3": ("qwen3/__init__.py", "qwen3_args"),
    "llama4": ("llama4/__init__.py", "llama4_args"),
    "gpt_oss": ("gpt_oss/__init__.py", "gptoss_configs"),
}


def family_of(m) -> str:
    """torchtitan's model name for the model (capabilities admit only these five)."""
    if deepseek_block(m):
        return "deepseek_v3"
    if llama4_block(m):
        return "llama4"
    if gpt_oss_block(m):
        return "gpt_oss"
    return "qwen3" if qwen3_moe_block(m) else "llama3"


# The model fields each family's flavor table is keyed by, in its order (dotted: a field of model.moe or model.mla)
FLAVOR_KEYS = {
    "deepseek_v3": (
        "vocab_size", "d_model", "d_ff", "moe.expert_d_ff", "num_layers", "moe.first_dense_layers",
        "num_heads", "moe.num_experts", "moe.num_shared_experts", "moe.top_k", "mla.q_lora_rank",
        "mla.kv_lora_rank", "mla.qk_nope_head_dim", "mla.qk_rope_head_dim", "mla.v_head_dim",
    ),
    "qwen3": (
        "vocab_size", "head_dim", "d_model", "num_layers", "num_heads", "num_kv_heads", "d_ff",
        "moe.expert_d_ff", "moe.num_experts", "moe.num_shared_experts", "moe.top_k", "tied_embeddings",
    ),
    "gpt_oss": (
        "vocab_size", "d_model", "moe.expert_d_ff", "num_layers", "num_heads", "num_kv_heads", "head_dim",
        "sliding_window", "moe.num_experts", "moe.top_k",
    ),
}  # fmt: skip


def _key(m, family: str) -> tuple:
    """The model's sizes in the order of the family's flavor table (an absent rank, None, as torchtitan's 0)."""
    return tuple(operator.attrgetter(name)(m) or 0 for name in FLAVOR_KEYS[family])


def flavor_for(ctx: ExportContext) -> str | None:
    m = ctx.model
    family = family_of(m)
    if (
        family == "llama4"
    ):  # its flavors mask by document (block_causal), not the causal attention costed
        return None
    if family == "deepseek_v3":
        name = next(
            (name for name, key in DEEPSEEK_V3_FLAVORS.items() if key == _key(m, "deepseek_v3")),
            None,
        )
        return (
            None if name in DEEPSEEK_V3_FLEX and ctx.layout.cp > 1 else name
        )  # the SDPA registration then
    if family == "qwen3":
        return next(
            (name for name, key in QWEN3_MOE_FLAVORS.items() if key == _key(m, "qwen3")), None
        )
    if family == "gpt_oss":
        return next(
            (name for name, key in GPT_OSS_FLAVORS.items() if key == _key(m, "gpt_oss")), None
        )
    for name, (dim, layers, heads, kv, vocab, mult, mo) in LLAMA3_FLAVORS.items():
        if (dim, layers, heads, kv, vocab, llama3_ffn(dim, mult, mo)) == (
            m.d_model,
            m.num_layers,
            m.num_heads,
            m.num_kv_heads,
            m.vocab_size,
            m.d_ff,
        ):
            return name
    return None


def _moe_args_text(m, score_before_experts: bool = False, **router) -> str:
    moe = m.moe
    fields = {
        "num_experts": moe.num_experts,
        "num_shared_experts": moe.num_shared_experts,
        "top_k": moe.top_k,
        **router,
        "score_before_experts": score_before_experts,
        "load_balance_coeff": 1e-3 if moe.router_bias else None,
    }  # expert_bias only with a router bias
    return "MoEArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


def custom_flavor_args(ctx: ExportContext) -> str:
    """The ModelArgs that reproduce the model in its family (llama3: multiple_of = d_ff makes the width exact)."""
    m = ctx.model
    family = family_of(m)
    if family == "deepseek_v3":
        a = m.mla
        router = (
            {"score_func": "sigmoid", "route_norm": True}
            if m.moe.router_bias
            else {"score_func": "softmax"}
        )
        return (
            f"DeepSeekV3ModelArgs(vocab_size={m.vocab_size}, dim={m.d_model}, inter_dim={m.d_ff}, "
            f"moe_inter_dim={m.moe.expert_d_ff}, n_layers={m.num_layers}, n_dense_layers={m.moe.first_dense_layers}, "
            f"n_heads={m.num_heads}, norm_eps={float(m.norm_eps)!r}, moe_args={_moe_args_text(m, **router)}, "
            f"q_lora_rank={a.q_lora_rank or 0}, kv_lora_rank={a.kv_lora_rank}, "
            f"qk_nope_head_dim={a.qk_nope_head_dim}, qk_rope_head_dim={a.qk_rope_head_dim}, "
            f"v_head_dim={a.v_head_dim}, rope_theta={float(m.rope_theta)!r})"
        )
    if family == "qwen3":
        return (
            f"Qwen3ModelArgs(vocab_size={m.vocab_size}, head_dim={m.head_dim}, dim={m.d_model}, "
            f"n_layers={m.num_layers}, n_heads={m.num_heads}, n_kv_heads={m.num_kv_heads}, qk_norm=True, "
            f"hidden_dim={m.d_ff}, norm_eps={float(m.norm_eps)!r}, rope_theta={float(m.rope_theta)!r}, "
            f"enable_weight_tying={m.tied_embeddings}, moe_enabled=True, moe_inter_dim={m.moe.expert_d_ff}, "
            f"moe_args={_moe_args_text(m, score_func='softmax', route_norm=True)})"
        )
    if family == "llama4":
        return llama4_args(ctx)
    if family == "gpt_oss":
        moe_args = _moe_args_text(m, score_func="softmax", route_norm=True, gate_bias=True)
        return (
            f"GptOssModelArgs(vocab_size={m.vocab_size}, dim={m.d_model}, moe_inter_dim={m.moe.expert_d_ff}, "
            f"n_layers={m.num_layers}, n_heads={m.num_heads}, n_kv_heads={m.num_kv_heads}, head_dim={m.head_dim}, "
            f"sliding_window_size={m.sliding_window}, norm_eps={float(m.norm_eps)!r}, "
            f"rope_theta={float(m.rope_theta)!r}, moe_args={moe_args})"
        )
    base = int(2 * (4 * m.d_model) / 3)
    mult = None if base <= m.d_ff else m.d_ff / base
    return (
        f"TransformerModelArgs(dim={m.d_model}, n_layers={m.num_layers}, n_heads={m.num_heads}, "
        f"n_kv_heads={m.num_kv_heads}, vocab_size={m.vocab_size}, ffn_dim_multiplier={mult!r}, "
        f"multiple_of={m.d_ff}, rope_theta={float(m.rope_theta)!r}, norm_eps={float(m.norm_eps)!r})"
    )


def llama4_widths(m) -> tuple[int, int] | None:
    """(multiple_of, the MLP width its width rule starts from) that give torchtitan's llama4 block the model's dense
    MLP width d_ff and expert width F_e: its FeedForward rounds the width up to multiple_of, its MoE layers
    first divide it by top_k + shared experts (auto_scale_hidden_dim). With multiple_of F_e both come out exact
    where F_e divides the dense width and the width over top_k + shared is at most F_e; None elsewhere."""
    moe = m.moe
    per = moe.top_k + moe.num_shared_experts
    dense = (
        m.d_ff if moe.layer_freq > 1 else per * moe.expert_d_ff
    )  # all-MoE models build no dense MLP
    if dense % moe.expert_d_ff or dense > per * moe.expert_d_ff:
        return None
    return moe.expert_d_ff, dense


def llama4_args(ctx: ExportContext) -> str:
    """The llama4 TransformerModelArgs of the model: NoPE every n-th layer, chunks on the others under FlexAttention
    where they are shorter than the sequence (SDPA, which context parallelism needs, elsewhere), causal masks (its
    flavors' block_causal masks by document), the router of Llama 4 (sigmoid top-k scores applied before the
    experts, no load-balancing bias)."""
    m = ctx.model
    widths = llama4_widths(m)
    if widths is None:
        raise InvalidArgumentError(
            f"model: torchtitan's llama4 block cannot build d_ff {m.d_ff} beside expert_d_ff {m.moe.expert_d_ff} "
            f"(its FeedForward rounds to multiple_of and its MoE layers divide by top_k + shared experts)"
        )
    multiple_of, dense = widths
    base = int(2 * (4 * m.d_model) / 3)
    chunked = (m.attention_chunk or ctx.seq_len) < ctx.seq_len
    r = m.rope_scaling
    scaling = (
        "None"
        if r is None
        else f"RoPEScalingArgs(scaling_factor={r.factor!r}, low_freq_factor={r.low_freq_factor!r}, "
        f"high_freq_factor={r.high_freq_factor!r}, "
        f"original_max_position_embeddings={r.original_max_position_embeddings})"
    )
    moe_args = _moe_args_text(m, True, score_func="sigmoid", route_norm=False)
    return (
        f"TransformerModelArgs(dim={m.d_model}, n_layers={m.num_layers}, n_heads={m.num_heads}, "
        f"n_kv_heads={m.num_kv_heads}, vocab_size={m.vocab_size}, multiple_of={multiple_of}, "
        f"ffn_dim_multiplier={dense / base!r}, norm_eps={float(m.norm_eps)!r}, rope_theta={float(m.rope_theta)!r}, "
        f"rope_scaling_args={scaling}, moe_args={moe_args}, interleave_moe_layer_step={m.moe.layer_freq}, "
        f"every_n_layers_nope={m.nope_interval}, fixed_attn_block_size={m.attention_chunk}, "
        f"attn_type={'flex' if chunked else 'sdpa'!r}, attn_mask_type='causal')"
    )


FLAVOR_ROPE_THETA, FLAVOR_NORM_EPS = (
    500000.0,
    1e-5,
)  # torchtitan llama3 flavors (TransformerModelArgs)


# core.stages chunk items -> torchtitan module names (the embedding, the final norm and the output head)
CHUNK_MODULES = {"E": ["tok_embeddings"], "L": ["norm", "output"]}


def balanced_fqns(ctx: ExportContext) -> list[list[str]]:
    """The balanced split's pp x v chunks (``core.stages.balanced_chunks``) as torchtitan module names."""
    lay, layer = ctx.layout, 0
    chunks = balanced_chunks(layer_weights(ctx.model), lay.pp, lay.virtual_stages)
    out: list[list[str]] = []
    for chunk in chunks:
        names: list[str] = []
        for item in chunk:
            if item == "t":
                names.append(f"layers.{layer}")
                layer += 1
            else:
                names += CHUNK_MODULES[item]
        out.append(names)
    return out


def _sharded(ctx: ExportContext) -> bool:
    """Whether the layout shards over FSDP2's data_parallel_shard: ZeRO-2 and 3, and ZeRO-1, which the
    capabilities allow with a pipeline only (FSDP2 under torch.distributed.pipelining)."""
    return ctx.effective_zero_stage >= 1


def sections(ctx: ExportContext) -> dict[str, dict]:
    lay = ctx.layout
    sharded = _sharded(ctx)
    replicate, shard = (lay.dp, lay.fsdp) if sharded else (lay.dp * lay.fsdp, 1)
    k, mbs = lay.num_microbatches, ctx.microbatch_seqs
    parallelism: dict = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": "always" if ctx.effective_zero_stage == 3 else "never",
        "tensor_parallel_degree": lay.tp,
        "context_parallel_degree": lay.cp,
        "pipeline_parallel_degree": lay.pp,
    }
    if ctx.model.moe is not None:  # with ep = 1 torchtitan shards the experts over tp by itself
        parallelism.update(
            expert_parallel_degree=lay.ep,
            expert_tensor_parallel_degree=lay.etp if lay.ep > 1 else 1,
        )
        if comm_backend(ctx) != "standard":  # what the prediction assumed for the token dispatch
            parallelism["expert_parallel_comm_backend"] = comm_backend(ctx)
    async_tp = bool(ctx.workload.tp_comm_overlap) and lay.tp > 1  # what the prediction assumed
    if async_tp:  # micro-pipelined TP: torchtitan applies it only to a compiled model
        parallelism["enable_async_tensor_parallel"] = True
    # fused element-wise kernels, as the prediction assumed unless it was told eager (Workload.torch_compile)
    compiled = ctx.workload.torch_compile is not False
    if lay.pp > 1:
        parallelism.update(
            pipeline_parallel_schedule=SCHEDULES[
                "interleaved" if lay.virtual_stages > 1 and lay.schedule == "1f1b" else lay.schedule
            ],
            pipeline_parallel_microbatch_size=mbs,
        )
        if lay.balanced_split:  # the chunks themselves; torchtitan then ignores the layer counts
            parallelism["module_fqns_per_model_part"] = balanced_fqns(ctx)
        else:
            parallelism.update(
                pipeline_parallel_layers_per_stage=ctx.model.num_layers
                // (lay.pp * lay.virtual_stages),
                pipeline_parallel_first_stage_less_layers=0,
                pipeline_parallel_last_stage_less_layers=0,
            )
    ac: dict = {"mode": lay.recompute}
    if lay.recompute in ("selective", "op"):  # "op" is torchtitan's own per-op SAC, exactly
        ac = {"mode": "selective", "selective_ac_option": "op"}
    flavor = flavor_for(ctx) or ctx.model_id
    return {
        "job": {
            "description": f"layoutsearch layout rank {ctx.record.get('rank', 1)} for {ctx.model_id} on {ctx.cluster.name}",
            "dump_folder": set_me("output folder for logs and checkpoints"),
        },
        "model": {
            "name": family_of(ctx.model),
            "flavor": flavor,
            "hf_assets_path": set_me("folder with the tokenizer (HF assets)"),
            **(
                {"converters": ["quantize.linear.float8"]}
                if ctx.workload.precision == "fp8"
                else {}
            ),
        },
        "training": {
            "local_batch_size": mbs * k if lay.pp > 1 else mbs,
            "global_batch_size": ctx.global_batch_seqs,
            "seq_len": ctx.seq_len,
            "dataset": set_me("dataset name registered in torchtitan"),
            "dataset_path": set_me("dataset location"),
            **({"enable_cpu_offload": True} if lay.offload == "params" else {}),
        },
        "parallelism": parallelism,
        "activation_checkpoint": ac,
        # the loss compiled with the model unless the prediction costed it eager (Workload.compiled_loss)
        "compile": {
            "enable": compiled,
            "components": ["model"] if ctx.workload.compiled_loss is False else ["model", "loss"],
        },
        **float8_sections(ctx),
        "checkpoint": {"folder": set_me("checkpoint folder under dump_folder")},
    }


def float8_sections(ctx: ExportContext) -> dict[str, dict]:
    """fp8: torchao's Float8Linear converter; none for bf16. tensorwise: no recipe_name (None is tensorwise)
    and fp8 FSDP all-gathers (what the torchtitan profile costs), since v0.2.2's Float8LinearConverter asserts
    that enable_fsdp_float8_all_gather comes without a recipe_name (components/quantization/float8.py);
    rowwise: recipe_name "rowwise", weights gathered in bf16."""
    if ctx.workload.precision != "fp8":
        return {}
    if fp8_recipe_of(ctx.workload, "gpu") == "rowwise":
        return {"quantize.linear.float8": {"recipe_name": "rowwise"}}
    return {
        "quantize.linear.float8": {
            "enable_fsdp_float8_all_gather": True,
            "precompute_float8_dynamic_scale_for_fsdp": True,
        }
    }


# Numeric fields cannot hold a '<set me>' string (the loader would refuse it): commented per section.
NUMERIC_PLACEHOLDERS = {
    "training": [f"steps = {set_me('training steps')}"],
    "optimizer": [f"lr = {set_me('peak learning rate')}"],
    "lr_scheduler": [f"warmup_steps = {set_me('warmup steps')}"],
}


def _toml_value(value) -> str:
    """A TOML value: strings basic-quoted with every control character escaped (TOML 1.0 allows none
    raw in a string), lists element by element."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + "".join(_toml_char(ch) for ch in value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_item(v) for v in value) + "]"
    return str(value)


def _toml_item(value) -> str:
    """A list item: a plain string as a TOML literal string ('name'), anything else as a value."""
    plain = isinstance(value, str) and all(_toml_char(ch) == ch and ch != "'" for ch in value)
    return f"'{value}'" if plain else _toml_value(value)


def _toml_char(ch: str) -> str:
    if ch in '"\\':
        return "\\" + ch
    if ord(ch) < 0x20 or ord(ch) == 0x7F or unicodedata.category(ch) in ("Zl", "Zp", "Cf"):
        return f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}"
    return ch


def policy_notes(ctx: ExportContext, sac: str) -> list[str]:
    """What torchtitan runs differently from the costed layout (both targets): selective recompute as
    its per-op SAC (``sac`` names it)."""
    notes = []
    if ctx.layout.recompute == "selective":
        notes.append(
            f"selective -> {sac}: torchtitan saves every other matmul and the attention output, which is "
            f"not exactly layoutsearch's selective policy (memory and recompute time differ; recompute "
            f"'op' is torchtitan's own policy)."
        )
    return notes


def render(ctx: ExportContext) -> str:
    notes = header_lines(ctx)
    family = family_of(ctx.model)
    if flavor_for(ctx) is None:
        path, table = FAMILY_REGISTRY[family]
        flex = family == "deepseek_v3" and any(
            key == _key(ctx.model, "deepseek_v3")
            for name, key in DEEPSEEK_V3_FLAVORS.items()
            if name in DEEPSEEK_V3_FLEX
        )
        notes.append(
            f"flavor '{ctx.model_id}' is not a torchtitan {family} flavor"
            + (
                " usable here (its sizes' flavor runs FlexAttention, which torchtitan refuses with context parallelism)"
                if flex
                else ""
            )
            + f": register it in torchtitan/models/{path} {table} as {custom_flavor_args(ctx)}"
        )
    notes += policy_notes(ctx, "op-level SAC")
    notes += gpu_rank_lines(ctx, TORCHTITAN_ORDERS, "torchtitan")[1]
    notes += _model_notes(ctx)
    notes.append(
        "Usage: NGPU=... CONFIG_FILE=THIS_FILE ./run_train.sh (torchtitan 0.2.x TOML schema)"
    )
    notes.append(placeholder_note())
    body = ""
    secs = sections(ctx)
    for name in list(secs) + [n for n in NUMERIC_PLACEHOLDERS if n not in secs]:
        keys = secs.get(name, {})
        body += f"\n[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
        body += "".join(f"# PLACEHOLDER: {line}\n" for line in NUMERIC_PLACEHOLDERS.get(name, []))
    return comment_block(notes) + body


def _flavor_hyper(ctx: ExportContext) -> tuple[float, float]:
    """(rope_theta, norm_eps) of the matched flavor."""
    family, flavor = family_of(ctx.model), flavor_for(ctx)
    if family == "deepseek_v3":
        return DEEPSEEK_V3_FIXED["rope_theta"], DEEPSEEK_V3_FIXED["norm_eps"]
    if family == "qwen3":
        assert flavor is not None, "a qwen3 export matches a flavor (export rules)"
        return QWEN3_THETA[flavor], 1e-6
    if family == "gpt_oss":
        return GPT_OSS_FIXED["rope_theta"], GPT_OSS_FIXED["norm_eps"]
    return FLAVOR_ROPE_THETA, FLAVOR_NORM_EPS


def _moe_notes(ctx: ExportContext) -> list[str]:
    m, lay = ctx.model, ctx.layout
    if m.moe is None:
        return []
    notes = [
        f"experts: {m.moe.num_experts} per MoE layer over ep {lay.ep} x etp {lay.etp}"
        + (
            " (etp = tp: torchtitan shards the experts over tp when ep = 1)"
            if lay.ep == 1 and lay.tp > 1
            else ""
        )
        + "; "
        + "router recipe (score function, routing groups, load-balancing coefficient) from the flavor or the "
        "ModelArgs above, not decided by layoutsearch."
    ]
    if m.moe.router_bias and family_of(m) == "gpt_oss":
        notes.append(
            "router bias: the gate's bias (MoEArgs.gate_bias), a parameter as in layoutsearch; torchtitan adds "
            "its expert_bias load-balancing buffer (load_balance_coeff) beside it, as its gpt_oss flavors do."
        )
    elif m.moe.router_bias:
        notes.append(
            "router bias: torchtitan keeps it as the expert_bias buffer (MoEArgs.load_balance_coeff), "
            f"so it counts {m.moe.num_experts} parameters per MoE layer fewer than layoutsearch."
        )
    return notes  # multi-token prediction: refused (frameworks.torchtitan refused_features)


def _model_notes(ctx: ExportContext) -> list[str]:
    m, notes = ctx.model, _moe_notes(ctx)
    if family_of(m) == "gpt_oss":
        notes.append(
            "gpt_oss runs FlexAttention (sinks applied to its log-sum-exp), costed as the FlashAttention-2 class, and "
            "its clamped SwiGLU (limit 7.0), costed as SwiGLU."
        )
    theta, eps = _flavor_hyper(ctx) if flavor_for(ctx) is not None else (m.rope_theta, m.norm_eps)
    if flavor_for(ctx) is not None and (m.rope_theta != theta or m.norm_eps != eps):
        notes.append(
            f"flavor {flavor_for(ctx)} has rope_theta {theta:g} and norm_eps "
            f"{eps:g}; this model has {m.rope_theta:g} and {m.norm_eps:g}: register "
            f"{custom_flavor_args(ctx)} instead."
        )
    if m.rope_scaling is not None:
        r = m.rope_scaling
        notes.append(
            f"rope scaling llama3: factor {r.factor:g}, low_freq_factor {r.low_freq_factor:g}, "
            f"high_freq_factor {r.high_freq_factor:g}, original context {r.original_max_position_embeddings} "
            f"(torchtitan's llama3 RoPE; check the flavor's rope scaling arguments match)."
        )
    if m.attention_dropout or m.hidden_dropout:
        notes.append(
            f"dropout attention {m.attention_dropout:g} / hidden {m.hidden_dropout:g}: torchtitan's llama3 "
            f"has no dropout."
        )
    return notes


# ----------------------------------------------------------------------------- checker
def check(text: str, ctx: ExportContext) -> list[str]:
    """ParallelDims, train.py batch and pipeline_parallel.py rules on the written TOML, and agreement with the layout."""
    try:
        cfg = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not valid TOML: {exc}"]
    return check_config(cfg, ctx)


def check_config(cfg: dict, ctx: ExportContext) -> list[str]:
    """The rules on a parsed job (sections ``parallelism``, ``training``, ``activation_checkpoint``, ``model``,
    ``compile`` as in the v0.2 TOML; the torchtitan-0.3 exporter builds the same dict from its module)."""
    par, tr = cfg.get("parallelism", {}), cfg.get("training", {})
    world, out = ctx.num_devices, []
    rep, shard = (
        int(par.get("data_parallel_replicate_degree", 1)),
        int(par.get("data_parallel_shard_degree", -1)),
    )
    cp, tp, pp = (
        int(par.get(f"{n}_parallel_degree", 1)) for n in ("context", "tensor", "pipeline")
    )
    if shard == -1:
        shard = world // (rep * cp * tp * pp)
    if rep * shard * cp * tp * pp != world:
        return [
            f"dp_replicate({rep}) * dp_shard({shard}) * cp({cp}) * tp({tp}) * pp({pp}) != WORLD_SIZE({world})"
        ]
    local, gbs, seq = (
        int(tr.get("local_batch_size", 8)),
        int(tr.get("global_batch_size", -1)),
        int(tr.get("seq_len", 2048)),
    )
    batch_degree = rep * shard
    gbs = local * batch_degree if gbs < 0 else gbs
    if gbs % (local * batch_degree):
        out.append(
            f"global batch {gbs} % (local batch {local} * data-parallel degree {batch_degree}) != 0"
        )
    if seq % (tp * 2 * cp):
        out.append(f"seq_len {seq} is not divisible by tp({tp}) x 2 x cp({cp})")
    compiled, costed = cfg.get("compile", {}).get("enable", False), ctx.workload.torch_compile
    if bool(compiled) != (costed is not False):
        out.append(
            f"compile.enable is {bool(compiled)}, but the prediction costed "
            f"{'eager' if costed is False else 'fused (compiled)'} element-wise kernels"
        )
    components = cfg.get("compile", {}).get("components", ["model", "loss"])  # torchtitan's default
    loss_costed = ctx.workload.compiled_loss is not False
    if compiled and ("loss" in components) != loss_costed:
        out.append(
            f"compile.components is {components}, but the prediction costed the loss "
            f"{'compiled (bf16 logits)' if loss_costed else 'eager (fp32 logits)'}"
        )
    m = ctx.model
    if m.num_heads % tp or m.num_kv_heads % tp:
        out.append(f"tp({tp}) must divide n_heads({m.num_heads}) and n_kv_heads({m.num_kv_heads})")
    microbatches = gbs // max(local * batch_degree, 1)
    if pp > 1:
        microbatches = _pipeline_problems(par, local, pp, m.num_layers, out)
    lay = ctx.layout
    sharded = _sharded(ctx)
    out += mismatches(
        {
            "dp_replicate": (rep, lay.dp if sharded else lay.data_units),
            "dp_shard": (shard, lay.fsdp if sharded else 1),
            **ctx.degree_pairs(tp=tp, pp=pp, cp=cp),
            "global batch": (gbs, ctx.global_batch_seqs),
            "seq_len": (seq, ctx.seq_len),
            "microbatches": (microbatches, lay.num_microbatches),
            "offload": ("params" if tr.get("enable_cpu_offload") else "none", lay.offload),
        }
    )
    mode = cfg.get("activation_checkpoint", {}).get("mode", "selective")
    if mode not in ("none", "selective", "full", "memory_budget"):
        out.append(f"activation_checkpoint.mode '{mode}' is not a torchtitan mode")
    model = cfg.get("model", {})
    flavor = model.get("flavor")
    if model.get("name", "llama3") != family_of(m):
        out.append(
            f"model name {model.get('name', 'llama3')} is not the model's family {family_of(m)}"
        )
    tables: dict[str, dict] = {
        "llama3": LLAMA3_FLAVORS,
        "deepseek_v3": DEEPSEEK_V3_FLAVORS,
        "qwen3": QWEN3_MOE_FLAVORS,
        "gpt_oss": GPT_OSS_FLAVORS,
    }
    if flavor in tables.get(model.get("name", "llama3"), {}) and flavor_for(ctx) != flavor:
        out.append(f"flavor {flavor} does not have the model's sizes")
    return out + _expert_problems(par, shard, cp, tp, ctx)


def comm_backend(ctx: ExportContext) -> str:
    """torchtitan's expert_parallel_comm_backend: deepep where the prediction sent tokens over scale-out once
    per node (``core.frameworks.node_dedup``), else standard (all-to-all)."""
    dedup = ctx.layout.ep > 1 and node_dedup(ctx.model, ctx.workload, ctx.cluster.accelerator.kind)
    return "deepep" if dedup else "standard"


def _expert_problems(par: dict, shard: int, cp: int, tp: int, ctx: ExportContext) -> list[str]:
    """ParallelDims' expert rules (etp 1 or tp with ep > 1, efsdp = dp_shard x cp x tp / (ep x etp)) and the layout's."""
    ep, etp = (
        int(par.get("expert_parallel_degree", 1)),
        int(par.get("expert_tensor_parallel_degree", 1)),
    )
    lay, out = ctx.layout, []
    if ctx.model.moe is None:
        return (
            []
            if ep == etp == 1
            else [f"expert degrees ep {ep} / etp {etp} written for a model without experts"]
        )
    if par.get("expert_parallel_comm_backend", "standard") != comm_backend(ctx):
        out.append(
            f"expert_parallel_comm_backend {par.get('expert_parallel_comm_backend', 'standard')}, the "
            f"prediction assumed {comm_backend(ctx)}"
        )
    if ep > 1 and etp not in (1, tp):
        out.append(
            f"expert_tensor_parallel_degree {etp} with ep {ep}: torchtitan supports etp = tp or 1"
        )
    if (shard * cp * tp) % (ep * etp):
        out.append(
            f"efsdp = dp_shard({shard}) x cp({cp}) x tp({tp}) / (ep({ep}) x etp({etp})) is not whole"
        )
    elif ctx.model.moe.num_experts % ep:
        out.append(f"ep({ep}) does not divide the {ctx.model.moe.num_experts} experts")
    effective_etp = etp if ep > 1 else tp  # ep = 1: torchtitan applies TP to the experts
    if (ep, effective_etp) != (lay.ep, lay.etp):
        out.append(
            f"experts run as ep {ep} x etp {effective_etp}, layout has ep {lay.ep} x etp {lay.etp}"
        )
    return out


def _pipeline_problems(par: dict, local: int, pp: int, num_layers: int, out: list[str]) -> int:
    """pipeline_parallel.py: microbatch split and stages per rank; returns the microbatch count."""
    mbs = int(par.get("pipeline_parallel_microbatch_size", 1))
    if local % mbs:
        out.append(
            f"local batch {local} is not divisible by pipeline_parallel_microbatch_size {mbs}"
        )
        return 0
    n = local // mbs
    schedule = par.get("pipeline_parallel_schedule", "1F1B")
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    parts = par.get("module_fqns_per_model_part")
    stages = None
    if parts is not None:  # pipeline_module_split: the parts themselves, each stage's modules
        stages = len(parts)
        out += _fqn_problems(parts, num_layers)
    elif per_stage is not None:
        first = int(par.get("pipeline_parallel_first_stage_less_layers", 1))
        last = int(par.get("pipeline_parallel_last_stage_less_layers", 1))
        stages = math.ceil((num_layers + first + last) / int(per_stage))
    if stages is not None:
        if stages % pp:
            out.append(f"{stages} virtual stages are not divisible by pp({pp})")
        per_rank = stages // pp
        if schedule in SINGLE_STAGE and per_rank != 1:
            out.append(f"{schedule} needs 1 stage per rank, got {per_rank}")
        if schedule not in SINGLE_STAGE and per_rank < 2:
            out.append(f"{schedule} needs at least 2 stages per rank, got {per_rank}")
        if schedule in V_STYLE and per_rank != 2:
            out.append(f"{schedule} needs exactly 2 stages per rank, got {per_rank}")
        if schedule == "Interleaved1F1B" and n % max(1, n // pp):
            out.append(
                f"Interleaved1F1B needs {n} microbatches divisible by their rounds ({max(1, n // pp)})"
            )
    return n


def _fqn_problems(parts: list, num_layers: int) -> list[str]:
    """module_fqns_per_model_part against the model: every part non-empty, tok_embeddings opening the first,
    norm and output closing the last, layers.0 .. layers.<L-1> each once, in order."""
    flat = [name for part in parts for name in part]
    out = [f"part {i} holds no module" for i, part in enumerate(parts) if not part]
    expected = CHUNK_MODULES["E"] + [f"layers.{i}" for i in range(num_layers)] + CHUNK_MODULES["L"]
    if flat != expected:
        out.append(
            "module_fqns_per_model_part does not hold tok_embeddings, layers.0 .. "
            f"layers.{num_layers - 1} and norm, output once each, in order"
        )
    return out
