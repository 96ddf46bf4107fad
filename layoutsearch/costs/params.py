"""Parameter counts, whole-model and per device (docs/cost_model.md "Parameters").

Source: the design notes section 5 (3LDF gated MLP, 2LD(n_q+n_kv)h attention, 2DV untied
vocabulary) and the public checkpoints (RMSNorm weights: 2 per layer + final; Gemma 2/3: 4 per
layer; Qwen2: Q, K, V biases; Qwen3, Gemma 3: a head_dim RMSNorm of q and of k; OLMo 2: RMSNorm
over the whole Q and K projections; OLMo 1: non-parametric LayerNorm). Mixtures of experts
(docs/cost_model.md "Mixture of experts"): per MoE layer a router [D, E] (gpt-oss: with a bias; DeepSeek-V3:
an E-value score-correction bias), E routed and s shared experts of the model's MLP kind; MLA per
the DeepSeek-V2 paper section 2.1; gpt-oss attention sinks (one logit per head per layer); the
DeepSeek-V3 MTP module (technical report section 2.2) beside the total; Phi-3.5-MoE: Q, K, V and O
biases without MLP biases, and a bias on the output head.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from layoutsearch.core.arrays import FloatArray, IntArray
from layoutsearch.core.specs import Layout, ModelSpec


def kv_heads_per_device(model: ModelSpec, tp: IntArray) -> IntArray:
    """KV heads each TP rank holds: n_kv/tp, or one (replicated) when tp exceeds n_kv (int or array)."""
    return (
        np.maximum(model.num_kv_heads // tp, 1)
        if isinstance(tp, np.ndarray)
        else max(model.num_kv_heads // tp, 1)
    )


def kv_replication(model: ModelSpec, tp: IntArray) -> IntArray:
    """On how many TP ranks each KV head is stored: tp/n_kv when tp > n_kv, else 1 (int or array)."""
    return (
        np.maximum(tp // model.num_kv_heads, 1)
        if isinstance(tp, np.ndarray)
        else max(tp // model.num_kv_heads, 1)
    )


def attention_matrices(model: ModelSpec, tp: IntArray = 1) -> list[IntArray]:
    """Elements of each weight matrix of one layer's attention on one TP rank (ints, or arrays for an array of
    tp): the Q, K, V and O projections (KV heads replicated below one per rank); with multi-head latent attention
    (DeepSeek-V2 paper section 2.1; the checkpoints' q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj),
    r_q, r_kv the latent ranks and h_n/h_r/h_v the no-RoPE, RoPE and value head widths: the query down- and
    up-projections D r_q and r_q n_q (h_n + h_r), or D n_q (h_n + h_r) without a query latent; the key-value
    down-projection D (r_kv + h_r), replicated, and up-projection r_kv n_q (h_n + h_v); the output n_q h_v D.
    The head-wise matrices divide over TP."""
    d, heads = model.d_model, model.num_heads // tp
    if model.mla is None:
        q_out, kv_out = heads * model.head_dim, kv_heads_per_device(model, tp) * model.head_dim
        return [d * q_out, d * kv_out, d * kv_out, q_out * d]
    a = model.mla
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    query = (
        [d * heads * qk]
        if a.q_lora_rank is None
        else [d * a.q_lora_rank, a.q_lora_rank * heads * qk]
    )
    return query + [
        d * (a.kv_lora_rank + a.qk_rope_head_dim),
        a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim),
        heads * a.v_head_dim * d,
    ]


def attention_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """Q, K, V, O projection parameters of one layer held by one TP rank (``attention_matrices``) with
    their biases; with MLA the latent projections and their norms (``mla_attention_params_per_layer``);
    plus one sink logit per local query head where the model has attention sinks. The output projection's
    bias (``linear_bias`` or ``attention_out_bias``) is D values on every TP rank (a row-parallel bias)."""
    sinks = model.num_heads // tp if model.attention_sinks else 0
    if model.mla is not None:
        return mla_attention_params_per_layer(model, tp) + sinks
    q_out = model.num_heads // tp * model.head_dim
    kv_out = kv_heads_per_device(model, tp) * model.head_dim
    qkv_bias = model.qkv_bias or model.linear_bias
    out_bias = model.attention_out_bias or model.linear_bias
    bias = (q_out + 2 * kv_out if qkv_bias else 0) + (model.d_model if out_bias else 0)
    return sum(attention_matrices(model, tp)) + bias + sinks


def mla_attention_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """Multi-head latent attention of one layer on one TP rank: its matrices (``attention_matrices``)
    and the latent norms, r_q (the query latent's, where it has one) and r_kv, replicated."""
    a = model.mla
    assert a is not None, "called for latent-attention models only"
    return sum(attention_matrices(model, tp)) + (a.q_lora_rank or 0) + a.kv_lora_rank


def ffn_params(model: ModelSpec, width: int, tp: IntArray = 1) -> IntArray:
    """One feed-forward block of ``width`` on one TP rank: 3 (gated) or 2 (plain) D x width/tp
    matrices, with biases (width/tp on each input matrix, D on the output) under ``linear_bias``."""
    f_local = width // tp
    bias = (f_local * (model.mlp_matrices - 1) + model.d_model) if model.linear_bias else 0
    return model.mlp_matrices * model.d_model * f_local + bias


def mlp_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """Dense MLP parameters of one layer per TP rank: 3 (gated) or 2 (plain) D x F/tp matrices."""
    return ffn_params(model, model.d_ff, tp)


def routed_expert_params(model: ModelSpec) -> int:
    """One routed expert (an MLP of width F_e)."""
    assert model.moe is not None, "called for mixture-of-experts models only"
    return int(ffn_params(model, model.moe.expert_d_ff))


def shared_expert_params(model: ModelSpec) -> int:
    """The shared experts of one MoE layer (s MLPs of width F_s)."""
    assert model.moe is not None, "called for mixture-of-experts models only"
    return model.moe.num_shared_experts * int(ffn_params(model, model.moe.shared_d_ff))


def router_params(model: ModelSpec) -> int:
    """The router of one MoE layer: [D, E], plus E bias (or score-correction) values, plus the
    [D, 1] shared-expert gate (Qwen2-MoE)."""
    moe = model.moe
    assert moe is not None, "called for mixture-of-experts models only"
    return (
        model.d_model * moe.num_experts
        + (moe.num_experts if moe.router_bias else 0)
        + (model.d_model if moe.shared_expert_gate else 0)
    )


def moe_mlp_params(model: ModelSpec) -> int:
    """Everything the MLP of one MoE layer holds: E routed experts, the shared ones, the router."""
    assert model.moe is not None, "called for mixture-of-experts models only"
    return (
        model.moe.num_experts * routed_expert_params(model)
        + shared_expert_params(model)
        + router_params(model)
    )


def qk_norm_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """Query/key norm weights of one layer on one TP rank: a head_dim vector each for q and k
    ("head", replicated), or one weight per element of the local Q and K projections ("projection")."""
    if model.qk_norm == "head":
        return 2 * model.head_dim
    if model.qk_norm == "projection":
        return (model.num_heads // tp + kv_heads_per_device(model, tp)) * model.head_dim
    return 0


def norm_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """The norms of one layer (``norms_per_layer`` of them, replicated across TP; LayerNorm has a
    bias too, a non-parametric norm nothing) and the query/key norms."""
    return model.norms_per_layer * model.params_per_norm + qk_norm_params_per_layer(model, tp)


def final_norm_params(model: ModelSpec) -> int:
    """The norm after the last layer (on the last pipeline stage)."""
    return model.params_per_norm


def output_bias_params(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """The output head's bias on one TP rank (``output_head_bias``): V / tp values, split over the
    vocabulary as the head's rows are; 0 without one (int or array)."""
    return model.vocab_size // tp if model.output_head_bias else 0 * tp


def largest_layer_tensor(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """Elements of the largest weight tensor of a layer outside the routed experts on one TP rank (int or array):
    a Q, K, V or O projection (with MLA the down- and up-projections and the output), one matrix of the dense MLP
    where the model has dense layers, or of the shared experts (stacked, as one tensor). What a framework that
    gathers weights per tensor (``Profile.zero3_gather_unit``) holds unsharded at once, with the next one."""
    d, tensors = model.d_model, attention_matrices(model, tp)
    if model.moe is None or model.num_moe_layers < model.num_layers:
        tensors.append(d * (model.d_ff // tp))
    if model.moe is not None and model.moe.num_shared_experts:
        tensors.append(d * (model.moe.num_shared_experts * model.moe.shared_d_ff // tp))
    return (
        np.maximum.reduce(np.broadcast_arrays(*tensors))
        if isinstance(tp, np.ndarray)
        else max(tensors)
    )


def largest_expert_tensor(model: ModelSpec, ep: IntArray = 1, etp: IntArray = 1) -> FloatArray:
    """Elements of one stacked matrix of a MoE layer's local experts on one expert-TP rank (int or array): E / ep
    experts of D x F_e / etp, what a framework that gathers per tensor (``Profile.zero3_gather_unit``) holds at once
    for the routed experts (a MoE layer's own, not the mean layer's share); 0 for a dense model."""
    if model.moe is None:
        return 0.0 * ep * etp
    return model.moe.num_experts / ep * model.d_model * (model.moe.expert_d_ff // etp)


def layer_params(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Parameters of one transformer layer held by one TP rank outside the routed experts (the
    per-device terms of the cost model): attention, norms and the MLP. A mixture-of-experts model
    is costed at its mean layer (``moe_layer_share``): the dense MLP of its dense layers, the
    shared experts (split over TP like a dense MLP) and the router (replicated) of its MoE layers."""
    mlp: FloatArray = mlp_params_per_layer(model, tp)
    if model.moe is not None:
        f = moe_layer_share(model)
        moe = model.moe.num_shared_experts * ffn_params(
            model, model.moe.shared_d_ff, tp
        ) + router_params(model)
        mlp = (1.0 - f) * mlp + f * moe
    return attention_params_per_layer(model, tp) + mlp + norm_params_per_layer(model, tp)


def moe_over_dense_mlp(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Parameters per TP rank a MoE layer holds beyond a dense one outside its routed experts: its shared
    experts and router less the dense MLP (``layer_params``' two parts; a stage with more MoE layers than
    the mean's share holds this much more per extra MoE layer)."""
    assert model.moe is not None, "called for mixture-of-experts models only"
    moe = model.moe.num_shared_experts * ffn_params(
        model, model.moe.shared_d_ff, tp
    ) + router_params(model)
    return moe - mlp_params_per_layer(model, tp)


@lru_cache(maxsize=1024)  # per model: ``num_moe_layers`` counts the layers one by one
def moe_layer_share(model: ModelSpec) -> float:
    """The share of the layers that are MoE layers (0 for a dense model): the mean layer's. A pipeline stage's
    compute, activations and parameters count its own MoE layers instead (``costs.terms.moe_layers_per_stage``,
    ``stage_moe_share``: DeepSeek-V3's 3 dense layers, of 61, sit on the first stage)."""
    return model.num_moe_layers / model.num_layers if model.moe is not None else 0.0


def expert_layer_params(model: ModelSpec, etp: IntArray = 1) -> FloatArray:
    """Routed-expert parameters of the mean layer on one expert-TP rank, all E experts (a device of
    the ep group holds 1/ep of them): share x E x one expert's FFN of width F_e / etp."""
    if model.moe is None:
        return 0.0 * etp
    return (
        moe_layer_share(model)
        * model.moe.num_experts
        * ffn_params(model, model.moe.expert_d_ff, etp)
    )


def param_counts(model: ModelSpec) -> dict[str, int]:
    """Exact parameter count by component (no TP); 'total' includes norms.

    'mlp' counts the dense layers' MLPs. A MoE model adds 'experts' (routed), 'shared_experts' and
    'router' over its MoE layers, and 'active': the parameters one token uses, the total less the
    E - k routed experts it is not sent to in each MoE layer (embedding and output counted, as
    in Mistral's, Qwen's and Meta's published figures; DeepSeek and OpenAI publish it without the
    input embedding: 'active' - 'embedding'). With multi-token prediction, 'mtp' is the MTP
    modules' own parameters, reported beside 'total', not in it.
    """
    counts = {
        "attention": model.num_layers * int(attention_params_per_layer(model)),
        "mlp": model.num_dense_layers * int(mlp_params_per_layer(model)),
        "norms": model.num_layers * int(norm_params_per_layer(model)) + final_norm_params(model),
        "embedding": model.vocab_size * model.d_model + model.learned_positions * model.d_model,
        "output": (0 if model.tied_embeddings else model.vocab_size * model.d_model)
        + int(output_bias_params(model)),
    }
    moe_layers = model.num_moe_layers
    if model.moe is not None:
        counts["experts"] = moe_layers * model.moe.num_experts * routed_expert_params(model)
        counts["shared_experts"] = moe_layers * shared_expert_params(model)
        counts["router"] = moe_layers * router_params(model)
    counts["total"] = sum(counts.values())
    if model.moe is not None:
        idle = model.moe.num_experts - model.moe.top_k
        counts["active"] = counts["total"] - moe_layers * idle * routed_expert_params(model)
    if model.mtp_layers:
        counts["mtp"] = model.mtp_layers * mtp_params_per_layer(model)
    return counts


def active_params(model: ModelSpec) -> int:
    """Parameters one token uses (``param_counts`` 'active'; the total for a dense model)."""
    counts = param_counts(model)
    return counts.get("active", counts["total"])


def mtp_params_per_layer(model: ModelSpec) -> int:
    """One DeepSeek-V3 multi-token-prediction module (technical report section 2.2; checkpoint
    layer 61): RMSNorms of the hidden state and of the next token's embedding (hnorm, enorm), the
    projection [2D, D] of their concatenation (eh_proj), one transformer layer like the main
    model's last (MoE where the model has MoE layers), and the norm before the output head
    (shared_head.norm). The embedding and the output head are the main model's (shared; the
    published checkpoint stores copies of both, 2 V D more)."""
    routed = model.moe.num_experts * routed_expert_params(model) if model.moe is not None else 0
    return int(mtp_params_outside_experts(model)) + routed


def mtp_params_outside_experts(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """One multi-token-prediction module (``mtp_params_per_layer``) on one TP rank, less its routed experts
    (a device of the ep group holds 1/ep of them): the three norms, eh_proj column-parallel (2D x D/tp),
    the layer's attention and norms, and its dense MLP or its shared experts and router."""
    if model.moe is not None:
        mlp = model.moe.num_shared_experts * ffn_params(
            model, model.moe.shared_d_ff, tp
        ) + router_params(model)
    else:
        mlp = mlp_params_per_layer(model, tp)
    block = attention_params_per_layer(model, tp) + mlp + norm_params_per_layer(model, tp)
    return 3 * model.params_per_norm + 2 * model.d_model * model.d_model // tp + block


@lru_cache(maxsize=1024)  # per model: every pipeline split of a search or a fit asks for it
def output_layer_equivalents(model: ModelSpec) -> int:
    """Whole layers' worth of work the last pipeline stage does besides its own layers (``core.stages``
    proposals take them off it): the output head, V x D weights against the mean layer's active ones (its
    own and the top-k routed experts'), once for the model and once per multi-token-prediction module, plus
    each module's layer. Llama 3 70B: 1; Llama 3 8B: 2; DeepSeek-V3 (one MTP module): 4."""
    active = float(layer_params(model))
    if model.moe is not None:
        active = (
            active + float(expert_layer_params(model)) * model.moe.top_k / model.moe.num_experts
        )
    head = model.vocab_size * model.d_model / active
    return int(round(model.mtp_layers + (1 + model.mtp_layers) * head))


def active_layer_params(model: ModelSpec, layer: int) -> int:
    """Parameters one token multiplies in layer ``layer`` (from 0): attention, norms and its MLP, the dense
    one or (a MoE layer) the shared experts, the router and its top-k routed experts."""
    if model.is_moe_layer(layer):
        moe = model.moe
        assert moe is not None
        mlp = shared_expert_params(model) + router_params(model)
        mlp += moe.top_k * routed_expert_params(model)
    else:
        mlp = int(mlp_params_per_layer(model))
    return int(attention_params_per_layer(model)) + mlp + int(norm_params_per_layer(model))


@lru_cache(maxsize=1024)  # per model: each balanced split of a search reads it
def layer_weights(model: ModelSpec) -> tuple[float, ...]:
    """Forward matmul FLOPs per token of each layer in order (2 x ``active_layer_params``), the first
    with the embedding (a lookup: 0) and the last with the output head (2 V D) and each multi-token-prediction
    module (its layer, its [2D, D] projection and its own pass through the head; DeepSeek-V3 technical
    report section 2.2): the weights ``core.stages.balanced_split`` balances (attention scores, the same in
    every layer, left out)."""
    weights = [2.0 * active_layer_params(model, i) for i in range(model.num_layers)]
    head = 2.0 * model.vocab_size * model.d_model
    mtp = 2.0 * (active_layer_params(model, model.num_layers - 1) + 2 * model.d_model**2) + head
    weights[-1] += head + model.mtp_layers * mtp
    return tuple(weights)


@lru_cache(maxsize=4096)  # per (model, stage span): a handful per search
def moe_layers_in(model: ModelSpec, start: int, stop: int) -> int:
    """MoE layers among layers ``start`` to ``stop`` - 1 (from 0)."""
    return sum(model.is_moe_layer(i) for i in range(max(start, 0), min(stop, model.num_layers)))


def stage_layers(model: ModelSpec, pp: int) -> int:
    """Transformer layers on one pipeline stage (layers are divisible by pp in a valid layout)."""
    return model.num_layers // pp


def stage_params(model: ModelSpec, layout: Layout, stage: int) -> float:
    """Parameters one device of pipeline ``stage`` holds after TP (before FSDP/ZeRO sharding).

    The first stage holds the input embedding, the last the output projection (vocab-parallel
    over TP, with its bias where it has one) and the final norm; with tied embeddings and pp > 1 the
    last stage keeps a copy.
    """
    tp, last = layout.tp, layout.pp - 1
    params = stage_layers(model, layout.pp) * float(layer_params(model, tp))
    vocab_rows = model.vocab_size * model.d_model // tp
    if stage == 0:
        params += vocab_rows + model.learned_positions * model.d_model
    if stage == last:
        params += final_norm_params(model) + int(output_bias_params(model, tp))
        if not model.tied_embeddings or layout.pp > 1:
            params += vocab_rows
    return params
