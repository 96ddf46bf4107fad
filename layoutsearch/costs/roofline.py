"""Closed-form thresholds of the scaling-book's training chapter (its simplifications:
perfect overlap T = max(T_math, T_comms), bidirectional ring bandwidth W, no latency).

alpha = C / W is the critical arithmetic intensity in FLOPs per byte (per token per chip for
DP/FSDP on a bf16 weight matrix).
"""

from __future__ import annotations

import math


def critical_intensity(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """alpha = C / W: per-chip tokens (FLOPs/byte) above which DP/FSDP is compute bound."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def tp_max_degree(d_ff: int, alpha: float, tp_axes: int = 1) -> float:
    """Largest compute-bound TP degree: Y < M_Y F / alpha."""
    return tp_axes * d_ff / alpha


def mixed_threshold_tokens_per_chip(alpha: float, fsdp_axes_times_tp_axes: int, d_ff: int) -> float:
    """Per-chip tokens above which mixed FSDP + TP is compute bound: alpha^2 / (M_X M_Y F)."""
    return alpha**2 / (fsdp_axes_times_tp_axes * d_ff)


def optimal_fsdp_degree(batch_tokens: float, d_ff: int, num_chips: int, fsdp_over_tp_axes: float) -> float:
    """X_opt = sqrt(B / F x M_X / M_Y x N): the FSDP degree balancing FSDP and TP comms."""
    return math.sqrt(batch_tokens / d_ff * fsdp_over_tp_axes * num_chips)


def step_time_at_mfu(batch_tokens: float, params: float, num_chips: int, peak_flops_per_s: float, mfu: float) -> float:
    """6 B P / (N C MFU) seconds per step."""
    return 6.0 * batch_tokens * params / (num_chips * peak_flops_per_s * mfu)


def comms_bound_batch_tokens(num_chips: int, alpha: float, d_ff: int) -> float:
    """Global batch below which every FSDP/TP mix is comms bound: N alpha^2 / (2F)."""
    return num_chips * alpha**2 / (2.0 * d_ff)


def fsdp_comms_bound_chips(batch_tokens: float, alpha: float) -> float:
    """Chips at which pure FSDP becomes comms bound: B / alpha."""
    return batch_tokens / alpha


def tp_fsdp_continuous_optimum(d_ff: int, num_chips: int, batch_tokens: float) -> float:
    """t* = sqrt(F N / B_tok), the minimiser of V(t) = 2DF/t + 2 B_tok D t / N (design notes section 6)."""
    return math.sqrt(d_ff * num_chips / batch_tokens)


def gather_volumes_bytes(d_model: int, d_ff: int, batch_tokens: float, num_chips: int, tp: int,
                         bytes_per_element: int = 2) -> tuple[float, float]:
    """(V_W, V_X): FSDP weight-gather target 2DF/t and TP input-gather target 2 B_tok D t / N."""
    v_w = bytes_per_element * d_model * d_ff / tp
    v_x = bytes_per_element * batch_tokens * d_model * tp / num_chips
    return v_w, v_x
