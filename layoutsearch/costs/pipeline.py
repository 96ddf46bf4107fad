"""Pipeline schedules: time, bubble, busy fraction, microbatches alive (COSTS.md "Step").

Source: the design notes section 4 (T_forward = (K + p - 1)(C/K + delta), U_busy =
K/(K + p - 1)); Narayanan et al. 2021 (1F1B bubble (p - 1)/K of the ideal time, divided by
the virtual stages v when interleaved); Korthikanti et al. 2022 (activations alive on the
first stage: p microbatches for 1F1B, p + (p - 1)/v stage-equivalents when interleaved).
"""

from __future__ import annotations


def forward_time(num_microbatches: int, stages: int, compute_per_stage_s: float, overhead_per_microbatch_s: float) -> float:
    """Forward-only pipeline: (K + p - 1)(C/K + delta) seconds (design notes section 4)."""
    k = num_microbatches
    return (k + stages - 1) * (compute_per_stage_s / k + overhead_per_microbatch_s)


def busy_fraction(num_microbatches: int, stages: int) -> float:
    """Fraction of the forward timeline a device is busy: K / (K + p - 1)."""
    return num_microbatches / (num_microbatches + stages - 1)


def bubble_microbatches(stages: int, virtual_stages: int = 1) -> float:
    """Idle time in units of one microbatch's stage time: (p - 1) / v."""
    return (stages - 1) / virtual_stages


def step_time(num_microbatches: int, stages: int, virtual_stages: int, microbatch_time_s: float) -> float:
    """Forward + backward over a 1F1B / interleaved / GPipe schedule: (K + (p - 1)/v) t_mb."""
    return (num_microbatches + bubble_microbatches(stages, virtual_stages)) * microbatch_time_s


def microbatches_in_flight(schedule: str, stages: int, stage: int, num_microbatches: int, virtual_stages: int = 1) -> float:
    """Microbatches whose activations stage ``stage`` holds at its peak (in whole-stage units)."""
    k, p = num_microbatches, stages
    if p == 1:
        return 1.0
    if schedule == "gpipe":
        return float(k)
    if schedule == "interleaved" and virtual_stages > 1:
        return float(min(k, p - stage + (p - 1) / virtual_stages))
    return float(min(k, p - stage))


def microbatches_in_flight_array(stages, stage, num_microbatches, virtual_stages):
    """``microbatches_in_flight`` over numpy arrays (1F1B, or interleaved where v > 1)."""
    import numpy as np

    p, k, v = (np.asarray(x, dtype=np.float64) for x in (stages, num_microbatches, virtual_stages))
    interleaved = np.minimum(k, p - stage + (p - 1) / v)
    one_f_one_b = np.minimum(k, p - stage)
    return np.where(p == 1, 1.0, np.where(v > 1, interleaved, one_f_one_b))
