"""Pipeline schedules: bubble and microbatches alive (docs/cost_model.md "Step").

Source: Narayanan et al. 2021 (1F1B bubble (p - 1)/K of the ideal time, divided by the
virtual stages v when interleaved); Korthikanti et al. 2022 (activations alive on the first
stage: p microbatches for 1F1B, p + (p - 1)/v stage-equivalents when interleaved). The design
notes' forward-only illustrations (T_forward = (K + p - 1)(C/K + delta), U_busy = K/(K + p - 1))
are in ``tests/closed_forms.py``, which the engine does not use.
"""

from __future__ import annotations

import numpy as np


def bubble_microbatches(stages: int, virtual_stages: int = 1) -> float:
    """Idle time in units of one microbatch's stage time: (p - 1) / v."""
    return (stages - 1) / virtual_stages


def microbatches_in_flight_array(stages, stage, num_microbatches, virtual_stages, gpipe=False):
    """Microbatches whose activations stage ``stage`` holds at its peak, in whole-stage units, over
    numpy arrays: min(K, p - stage) for 1F1B, min(K, p - stage + (p - 1)/v) interleaved (v > 1),
    K for GPipe (every forward runs before the first backward)."""
    p, k, v = (np.asarray(x, dtype=np.float64) for x in (stages, num_microbatches, virtual_stages))
    interleaved = np.minimum(k, p - stage + (p - 1) / v)
    one_f_one_b = np.minimum(k, p - stage)
    return np.where(p == 1, 1.0, np.where(gpipe, k, np.where(v > 1, interleaved, one_f_one_b)))
