"""Parameter counts, whole-model and per device (DESIGN.md "Parameters").

Source: the design notes section 5 (3LDF gated MLP, 2LD(n_q+n_kv)h attention, 2DV untied
vocabulary) and the public checkpoints (RMSNorm weights: 2 per layer + final; Gemma 2/3: 4 per
layer; Qwen2: Q, K, V biases; Qwen3, Gemma 3: a head_dim RMSNorm of q and of k; OLMo 2: RMSNorm
over the whole Q and K projections; OLMo 1: non-parametric LayerNorm).
"""

from __future__ import annotations

import numpy as np

from layoutsearch.core.specs import Layout, ModelSpec


def kv_heads_per_device(model: ModelSpec, tp):
    """KV heads each TP rank holds: n_kv/tp, or one (replicated) when tp exceeds n_kv (int or array)."""
    return np.maximum(model.num_kv_heads // tp, 1) if isinstance(tp, np.ndarray) else max(model.num_kv_heads // tp, 1)


def kv_replication(model: ModelSpec, tp):
    """On how many TP ranks each KV head is stored: tp/n_kv when tp > n_kv, else 1 (int or array)."""
    return np.maximum(tp // model.num_kv_heads, 1) if isinstance(tp, np.ndarray) else max(tp // model.num_kv_heads, 1)


def attention_params_per_layer(model: ModelSpec, tp: int = 1) -> int:
    """Q, K, V, O projection parameters of one layer held by one TP rank (KV replicated)."""
    q_out = model.num_heads // tp * model.head_dim
    kv_out = kv_heads_per_device(model, tp) * model.head_dim
    weights = model.d_model * (2 * q_out + 2 * kv_out)
    if model.linear_bias:
        bias = q_out + 2 * kv_out + model.d_model
    else:
        bias = (q_out + 2 * kv_out) if model.qkv_bias else 0
    return weights + bias


def mlp_params_per_layer(model: ModelSpec, tp: int = 1) -> int:
    """MLP parameters of one layer per TP rank: 3 (gated) or 2 (plain) D x F/tp matrices."""
    f_local = model.d_ff // tp
    bias = (f_local * (model.mlp_matrices - 1) + model.d_model) if model.linear_bias else 0
    return model.mlp_matrices * model.d_model * f_local + bias


def qk_norm_params_per_layer(model: ModelSpec, tp: int = 1) -> int:
    """Query/key norm weights of one layer on one TP rank: a head_dim vector each for q and k
    ("head", replicated), or one weight per element of the local Q and K projections ("projection")."""
    if model.qk_norm == "head":
        return 2 * model.head_dim
    if model.qk_norm == "projection":
        return (model.num_heads // tp + kv_heads_per_device(model, tp)) * model.head_dim
    return 0


def norm_params_per_layer(model: ModelSpec, tp: int = 1) -> int:
    """The norms of one layer (``norms_per_layer`` of them, replicated across TP; LayerNorm has a
    bias too, a non-parametric norm nothing) and the query/key norms."""
    return model.norms_per_layer * model.params_per_norm + qk_norm_params_per_layer(model, tp)


def final_norm_params(model: ModelSpec) -> int:
    """The norm after the last layer (on the last pipeline stage)."""
    return model.params_per_norm


def layer_params(model: ModelSpec, tp: int = 1) -> int:
    """All parameters of one transformer layer held by one TP rank."""
    return attention_params_per_layer(model, tp) + mlp_params_per_layer(model, tp) + norm_params_per_layer(model, tp)


def param_counts(model: ModelSpec) -> dict[str, int]:
    """Exact parameter count by component (no TP); 'total' includes norms."""
    counts = {
        "attention": model.num_layers * attention_params_per_layer(model),
        "mlp": model.num_layers * mlp_params_per_layer(model),
        "norms": model.num_layers * norm_params_per_layer(model) + final_norm_params(model),
        "embedding": model.vocab_size * model.d_model + model.learned_positions * model.d_model,
        "output": 0 if model.tied_embeddings else model.vocab_size * model.d_model,
    }
    counts["total"] = sum(counts.values())
    return counts


def stage_layers(model: ModelSpec, pp: int) -> int:
    """Transformer layers on one pipeline stage (layers are divisible by pp in a valid layout)."""
    return model.num_layers // pp


def stage_params(model: ModelSpec, layout: Layout, stage: int) -> int:
    """Parameters one device of pipeline ``stage`` holds after TP (before FSDP/ZeRO sharding).

    The first stage holds the input embedding, the last the output projection (vocab-parallel
    over TP) and the final norm; with tied embeddings and pp > 1 the last stage keeps a copy.
    """
    tp, last = layout.tp, layout.pp - 1
    params = stage_layers(model, layout.pp) * layer_params(model, tp)
    vocab_rows = model.vocab_size * model.d_model // tp
    if stage == 0:
        params += vocab_rows + model.learned_positions * model.d_model
    if stage == last:
        params += final_norm_params(model)
        if not model.tied_embeddings or layout.pp > 1:
            params += vocab_rows
    return params
