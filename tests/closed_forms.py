"""Closed-form formulas of the design notes and of "How To Scale Your Model" (jax-ml/scaling-book),
reproduced for reference only.

NOT used by the engine's cost model: ``estimate()``, ``solve()`` and the search never call
anything here (this module sits under tests/, outside the package and the wheel; only
``tests/reference.py`` imports it). They exist so that the reference cases whose quantity is one of these
formulas (the book's rooflines, the notes' pipeline and memory illustrations) are computed by
code with a name and a source, rather than by a lambda; those cases check the formula and the
catalogue figures passed to it, never the engine. The engine's own costs are in
``layoutsearch.costs``.

The book's simplifications hold throughout: perfect overlap T = max(T_math, T_comms), a
bidirectional ring bandwidth W per torus axis, no latency term. Symbols: D d_model, F d_ff, B
global batch in tokens, N chips, X FSDP degree, Y TP degree, M_X / M_Y hardware axes a strategy
spans, C peak FLOP/s per chip, alpha = C / W.
"""

from __future__ import annotations

import math

# --- rooflines (book: "Training", "TPUs", "GPUs" chapters) -------------------------------------


def ici_bandwidth(link_bytes_per_s_per_direction: float, num_axes: int) -> float:
    """W of the book: a wraparound torus axis is a bidirectional ring (2 x one-way link), times the axes."""
    return num_axes * 2.0 * link_bytes_per_s_per_direction


def critical_intensity(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """alpha = C / W: per-chip tokens (FLOPs/byte) above which DP/FSDP is compute bound."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def tp_max_degree(d_ff: int, alpha: float, tp_axes: int = 1) -> float:
    """Largest compute-bound TP degree: Y < M_Y F / alpha."""
    return tp_axes * d_ff / alpha


def mixed_threshold_tokens_per_chip(alpha: float, fsdp_axes_times_tp_axes: int, d_ff: int) -> float:
    """Per-chip tokens above which mixed FSDP + TP is compute bound: alpha^2 / (M_X M_Y F)."""
    return alpha**2 / (fsdp_axes_times_tp_axes * d_ff)


def optimal_fsdp_degree(
    batch_tokens: float, d_ff: int, num_chips: int, fsdp_over_tp_axes: float
) -> float:
    """X_opt = sqrt(B / F x M_X / M_Y x N): the FSDP degree balancing FSDP and TP comms."""
    return math.sqrt(batch_tokens / d_ff * fsdp_over_tp_axes * num_chips)


def step_time_at_mfu(
    batch_tokens: float, params: float, num_chips: int, peak_flops_per_s: float, mfu: float
) -> float:
    """6 B P / (N C MFU) seconds per step."""
    return 6.0 * batch_tokens * params / (num_chips * peak_flops_per_s * mfu)


def comms_bound_batch_tokens(num_chips: int, alpha: float, d_ff: int) -> float:
    """Global batch below which every FSDP/TP mix is comms bound: N alpha^2 / (2F)."""
    return num_chips * alpha**2 / (2.0 * d_ff)


def fsdp_comms_bound_chips(batch_tokens: float, alpha: float) -> float:
    """Chips at which pure FSDP becomes comms bound: B / alpha."""
    return batch_tokens / alpha


# --- training budget (design notes section 5) --------------------------------------------------


def training_flops_total(params: float, tokens: float) -> float:
    """6 P N_tok: total training FLOPs of dense matmuls."""
    return 6.0 * params * tokens


def calendar_days(total_flops: float, effective_flops_per_s: float) -> float:
    """Days of training at an effective model throughput (FLOP/s counted the same way)."""
    return total_flops / effective_flops_per_s / 86400.0


def model_state_bytes(params: float, bytes_per_param: float) -> float:
    """Total model state: parameters x bytes per parameter (18 for mixed-precision Adam)."""
    return params * bytes_per_param


# --- memory illustrations (design notes sections 1-2, 5) ---------------------------------------


def checkpoint_bytes(
    num_layers: int, tokens: float, d_model: int, tensors_per_layer: int, bytes_per_element: int
) -> float:
    """Logical saved activations: tensors_per_layer x [tokens, D] per layer.

    The engine instead sums an explicit list of saved tensors per checkpoint policy
    (``costs.memory.saved_tensor_widths``).
    """
    return num_layers * tensors_per_layer * tokens * d_model * bytes_per_element


def fsdp_weight_bytes(
    layer_bytes: float, num_layers: int, shards: int, gathered_layers: int
) -> float:
    """Weight bytes on one device while ``gathered_layers`` layers are gathered in full, the full
    buffer including the local shard (the notes' accounting).

    The engine allocates the gathered layers beside the kept shards (PyTorch FSDP2, XLA).
    """
    shard = layer_bytes / shards
    return (num_layers - gathered_layers) * shard + gathered_layers * layer_bytes


def peak_bytes(moments: dict[str, dict[str, float]]) -> tuple[str, float]:
    """The moment with the most live bytes, and that total (each moment lists each array once)."""
    totals = {name: sum(items.values()) for name, items in moments.items()}
    name = max(totals, key=lambda n: totals[n])
    return name, totals[name]


# --- pipelines (design notes section 4: forward only, balanced stages, no communication) ---------


def pipeline_forward_time(
    num_microbatches: int, stages: int, compute_per_stage_s: float, overhead_per_microbatch_s: float
) -> float:
    """(K + p - 1)(C/K + delta) seconds for K microbatches through p stages."""
    k = num_microbatches
    return (k + stages - 1) * (compute_per_stage_s / k + overhead_per_microbatch_s)


def pipeline_busy_fraction(num_microbatches: int, stages: int) -> float:
    """Fraction of the forward timeline a device is busy: K / (K + p - 1)."""
    return num_microbatches / (num_microbatches + stages - 1)
