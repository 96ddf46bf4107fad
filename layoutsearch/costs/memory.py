"""Bytes per device at named moments (COSTS.md "Memory"; design notes sections 1-2).

The peak is the maximum over moments of the live objects, each array counted once:
M_peak = max_u [M_state(u) + M_activation(u) + M_temporary(u)].
"""

from __future__ import annotations

import numpy as np

from layoutsearch.core.specs import ModelSpec, Workload
from layoutsearch.costs.params import kv_heads_per_device

# What each checkpoint policy saves per layer, as (tensor, width) with width in elements per token.
# none: every input a backward kernel needs (FlashAttention keeps O and the row log-sum-exp, not scores);
# selective: drops what the attention core and the element-wise MLP activation recompute cheaply;
# full: the layer input only (Korthikanti et al. 2022 table 2, without dropout masks).
RECOMPUTED_BY_SELECTIVE = ("attn_out", "attn_lse", "attn_scores", "mlp_act")
SAVED_SCORE_BYTES = 5  # without fused attention: softmax output 2, dropout mask 1, dropout output 2 (Korthikanti)


def saved_tensor_widths(model: ModelSpec, tp: int, sequence_parallel: bool, seq_len: int = 0,
                        flash_attention: bool = True, activation_bytes: int = 2) -> dict[str, float]:
    """Elements per token of every tensor a layer saves for backward, on one TP rank."""
    d_sp = model.d_model / tp if sequence_parallel else float(model.d_model)
    q = model.num_heads // tp * model.head_dim
    kv = kv_heads_per_device(model, tp) * model.head_dim
    f = model.d_ff / tp
    return {
        "attn_norm_in": d_sp,  # residual stream entering the layer
        "qkv_in": d_sp,  # normalised input of the QKV projection
        "q": q, "k": kv, "v": kv,  # inputs of the attention core
        "attn_out": q,  # attention output, input of the O projection
        "attn_lse": model.num_heads / tp * 2.0 if flash_attention else 0.0,  # fp32 log-sum-exp per head
        "attn_scores": 0.0 if flash_attention else (model.num_heads // tp) * seq_len * SAVED_SCORE_BYTES / activation_bytes,
        "mlp_norm_in": d_sp,
        "mlp_in": d_sp,
        "mlp_pre": f * (model.mlp_matrices - 1),  # gate and up (gated) or pre-activation (plain)
        "mlp_act": f,  # input of the down projection
        # Gemma 2/3 post-attention and post-MLP norms: their inputs (the O and down projection outputs)
        "post_norm_in": max(model.norms_per_layer - 2, 0) * d_sp,
        "qk_norm_in": 0.0 if model.qk_norm == "none" else 1.0 * (q + kv),  # q and k before their norms
    }


def kept_by_policy(tensor: str, policy: str) -> bool:
    """Whether a checkpoint policy keeps ``tensor`` (a name of saved_tensor_widths) for backward."""
    if policy == "full":
        return tensor == "attn_norm_in"
    return policy == "none" or tensor not in RECOMPUTED_BY_SELECTIVE


def state_bytes(params: float, workload: Workload, zero_stage: int, shards: int) -> dict[str, float]:
    """Model state of ``params`` parameters on one device, sharded over ``shards`` per ZeRO stage.

    Stage 0 shards nothing; 1 shards optimizer moments and master weights; 2 also gradients;
    3 also the compute weights (ZeRO, Rajbhandari et al. 2020).
    """
    def sharded(bytes_per_param: int, from_stage: int):
        return params * bytes_per_param / np.where(np.asarray(zero_stage) >= from_stage, shards, 1)

    return {
        "weights": sharded(workload.weight_bytes_per_param, 3),
        "master": sharded(workload.master_bytes_per_param, 1),
        "grads": sharded(workload.grad_bytes_per_param, 2),
        "optimizer": sharded(workload.optimizer_bytes_per_param, 1),
    }
