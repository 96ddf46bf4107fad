"""The objectives beyond step time and gather volume, as integer weights on the tables.

Both searches rank a candidate by its integer value (``tables.objective_value``):

    time-to-train   value = F[s, z] x step,  F = ceil(FACTOR_SCALE / goodput)
    energy          value = IDLE x step + DYNAMIC x busy,   IDLE = idle_w x WATT_SCALE,
                    DYNAMIC = (busy_w - idle_w) x WATT_SCALE, rounded

``step`` and ``busy`` are a candidate's quantised step time and busy time (its compute and its
optimizer step: ``costs.estimate``'s time_s["compute"]). The goodput
(``costs.goodput``, Daly's complete model) depends on the failure and checkpoint options, the
device count and the checkpoint bytes per device, a function of the shape and the ZeRO stage
alone (``costs.goodput.checkpoint_bytes_of_shapes``); the search takes Young's interval, without
the report's floor of one step (which binds only where the optimum interval is shorter than a
step). Energy per step is ``costs.power.step_energy_j``: devices x (idle_w x step + (busy_w -
idle_w) x compute), the devices a constant factor; without a catalogued idle power the whole
step counts at busy power (``costs.power``'s fallback) and energy ranks as step time does.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.units import KIB
from layoutsearch.costs import goodput, power
from layoutsearch.search.space import Space
from layoutsearch.search.tables import NEVER, Costed, Tables, optimizer_seconds, quanta

FACTOR_SCALE = 10_000  # F's resolution: 1e-4 of the step, far below the tie tolerance (0.5%)
MAX_FACTOR = 10_000  # a goodput under 1e-4 (a job that hardly progresses) ranks as 1e-4
WATT_SCALE = 10  # 0.1 W: the energy's resolution, 1e-3 of an idle power of 100 W
UNITS = {"step-time": "s", "gather-volume": "bytes", "time-to-train": "s", "energy": "J"}


def weigh(t: Tables | SimpleNamespace, space: Space, objective: str, resilience=None):
    """The tables with the weights of ``objective`` (module docstring); ``resilience``: the
    failure and checkpoint options (``costs.goodput.Resilience``, None: its defaults)."""
    t.objective = objective
    if objective == "time-to-train":
        t.factor = goodput_factors(space, resilience or goodput.Resilience())
    elif objective == "energy":
        t.idle_w, t.dynamic_w = energy_weights(space)
    return t


def goodput_factors(space: Space, resilience: goodput.Resilience) -> np.ndarray:
    """[s, z] FACTOR_SCALE / goodput, rounded up (at most MAX_FACTOR x FACTOR_SCALE)."""
    sh = space.shapes.take(np.arange(space.num_shapes)[:, None])
    z = np.arange(4)[None, :]
    per_device = goodput.checkpoint_bytes_of_shapes(space.model, space.workload, sh, z)
    distinct, index = np.unique(
        np.broadcast_to(per_device, (space.num_shapes, 4)), return_inverse=True
    )
    top = MAX_FACTOR * FACTOR_SCALE
    factors = []
    for checkpoint_bytes in distinct:
        fraction = goodput.cluster_goodput(resilience, space.cluster, float(checkpoint_bytes), 0.0)
        share = fraction.goodput
        factors.append(top if share * top <= FACTOR_SCALE else math.ceil(FACTOR_SCALE / share))
    return np.asarray(factors, dtype=np.int64)[index].reshape(space.num_shapes, 4)


def energy_weights(space: Space) -> tuple[int, int]:
    """(IDLE, DYNAMIC) of the accelerator, busy power under the workload's power cap; a part
    without a catalogued board power is refused."""
    acc = space.cluster.accelerator
    busy_w = power.busy_power_w(acc, space.workload.power_limit_w)
    if busy_w is None:
        raise InvalidArgumentError(
            f"--objective energy: accelerator {acc.id} has no board power (board_power_w) in "
            f"its catalogue file"
        )
    idle_w = busy_w if acc.idle_power_w is None else min(acc.idle_power_w, busy_w)
    return round(idle_w * WATT_SCALE), round((busy_w - idle_w) * WATT_SCALE)


def value_unit(t: Tables, space: Space) -> float:
    """What one unit of the objective's value is in SI (``UNITS``)."""
    if t.objective == "time-to-train":
        return t.quantum_s / FACTOR_SCALE
    if t.objective == "energy":
        return space.cluster.num_devices * t.quantum_s / WATT_SCALE
    return KIB if t.objective == "gather-volume" else t.quantum_s


def costed_value_bounds(
    space: Space, step_bound: np.ndarray, costed: Costed, objective: str, resilience=None
) -> np.ndarray:
    """``value_bounds`` from ``tables.compute_bounds``'s step bounds and costed terms, before the
    tables: the same weights (``weigh``) on the whole space's shapes and busy times."""
    if objective not in ("time-to-train", "energy"):
        return step_bound
    # value_bounds reads the least busy time over the policies: rounding is monotone, so the
    # rounded least is the least rounded
    if costed.key is not None and costed.least_busy_s is not None:
        busy = costed.least_busy_s[costed.key]
    else:
        busy = np.maximum(*costed.row_terms(space).busy_s).min(axis=1)
    terms = SimpleNamespace(  # the fields of Tables that value_bounds reads
        busy_s=quanta(busy[:, None], costed.quantum_s),
        optimizer_s=quanta(optimizer_seconds(space), costed.quantum_s),
    )
    return value_bounds(space, weigh(terms, space, objective, resilience), step_bound)


def value_bounds(space: Space, t: Tables | SimpleNamespace, step_bound: np.ndarray) -> np.ndarray:
    """Per (S, K) row a lower bound of the value from a lower bound of its step time: the least
    F of the row's shape over the allowed ZeRO stages x the step, or IDLE x the step + DYNAMIC x
    the least busy time over the recompute policies and optimizer step over the ZeRO stages."""
    done = step_bound >= NEVER
    step_q = np.where(done, 0, step_bound)
    if t.objective == "time-to-train":
        least = np.where(space.zero_mask, t.factor, NEVER).min(axis=1)[space.sk_shape]
        value = least * step_q
    elif t.objective == "energy":
        optimizer = np.where(space.zero_mask, t.optimizer_s, NEVER).min(axis=1)[space.sk_shape]
        value = t.idle_w * step_q + t.dynamic_w * (t.busy_s.min(axis=1) + optimizer)
    else:
        value = step_q
    return np.where(done, NEVER, value)
