"""Time to train, cost, what-if hardware and sensitivity: pure functions on numbers, Problems
and Estimates (the CLI's --tokens, --price-per-device-hour, --what-if and explain --sensitivity).

    train_days   = training_tokens / tokens_per_s / goodput / 86400
    device_hours = train_days x 24 x num_devices
    cost         = device_hours x price_per_device_hour   (in the price's currency)
    energy_kwh   = energy_j_per_token x training_tokens / goodput / 3.6e6  (``costs.power``)

The goodput (``costs.goodput``: failures, checkpoints and restarts) comes from the failure and
checkpoint options (``resilience_of``) and the layout's own checkpoint bytes (``layout_goodput``).

A what-if scales hardware numbers of the cluster (``scaled_cluster``): the accelerator's field
and, for the bandwidths, every axis of the matching kinds (the cost model reads the axes).
"""

from __future__ import annotations

import math
from dataclasses import replace

from layoutsearch.core.errors import InvalidArgumentError, did_you_mean
from layoutsearch.core.options import PlanOptions
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Accelerator, Axis, Cluster
from layoutsearch.core.units import MAX_TRAINING_TOKENS, SECONDS_PER_DAY
from layoutsearch.costs import goodput, power
from layoutsearch.costs.estimate import Estimate, estimate

HOURS_PER_DAY = 24.0
JOULES_PER_KWH = 3.6e6
MAX_PRICE_PER_DEVICE_HOUR = (
    1e6  # keeps every cost finite (and below the sweep's 1e30 bound on numbers)
)
MIN_WHAT_IF_FACTOR = 1e-3
MAX_WHAT_IF_FACTOR = 1e3
SENSITIVITY_FACTOR = 1.1  # explain --sensitivity: each number +10%

# what-if key -> (accelerator field, axis kinds whose bytes_per_s_per_direction scale with it)
WHAT_IF_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "scale_out_bandwidth": ("scale_out_bytes_per_s_per_direction", ("scale_out", "dcn")),
    "link_bandwidth": ("link_bytes_per_s_per_direction", ("torus", "switch", "mesh")),
    "hbm": ("hbm_bytes", ()),
    "hbm_bandwidth": ("hbm_bytes_per_s", ()),
    "peak_flops": ("peak_flops_per_s", ()),
}
WHAT_IF_KEYS = tuple(WHAT_IF_FIELDS)
WHAT_IF_DESCRIPTIONS = {
    "scale_out_bandwidth": "scale-out bytes/s (GPU NICs, TPU DCN)",
    "link_bandwidth": "ICI / NVLink bytes/s",
    "hbm": "HBM capacity bytes",
    "hbm_bandwidth": "HBM bytes/s",
    "peak_flops": "peak dense FLOP/s",
}


# ----------------------------------------------------------------------------- option checks
def check_tokens(tokens: float | None, option: str = "--tokens") -> float | None:
    """A token count in (0, 1e18] (None: not given)."""
    if tokens is not None and not (
        isinstance(tokens, (int, float)) and 0 < tokens <= MAX_TRAINING_TOKENS
    ):
        raise InvalidArgumentError(
            f"{option}: {tokens!r:.40} is not a number of tokens in (0, {MAX_TRAINING_TOKENS:g}]"
        )
    return tokens


def check_price(price: float | None, option: str = "--price-per-device-hour") -> float | None:
    """A price per device-hour in [0, 1e6] (None: not given)."""
    if price is not None and not (
        isinstance(price, (int, float)) and 0 <= price <= MAX_PRICE_PER_DEVICE_HOUR
    ):
        raise InvalidArgumentError(
            f"{option}: {price!r:.40} is not a price in [0, {MAX_PRICE_PER_DEVICE_HOUR:g}]"
        )
    return price


def parse_what_if(text: str, option: str = "--what-if") -> dict[str, float]:
    """'scale_out_bandwidth=0.5,hbm=2' -> {'scale_out_bandwidth': 0.5, 'hbm': 2.0}."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or not all(items):
        raise InvalidArgumentError(
            f"{option}: empty item in '{text:.80}' (e.g. scale_out_bandwidth=0.5)"
        )
    factors: dict[str, float] = {}
    for item in items:
        key, factor = _what_if_item(item, option)
        if key in factors:
            raise InvalidArgumentError(f"{option}: {key} given twice")
        factors[key] = factor
    return factors


def _what_if_item(item: str, option: str) -> tuple[str, float]:
    if "=" not in item:
        raise InvalidArgumentError(
            f"{option}: '{item:.40}' is not KEY=FACTOR (e.g. scale_out_bandwidth=0.5)"
        )
    key, text = (s.strip() for s in item.split("=", 1))
    if key not in WHAT_IF_FIELDS:
        raise InvalidArgumentError(
            f"{option}: unknown key '{key:.40}'{did_you_mean(key, WHAT_IF_KEYS)}; known: {', '.join(WHAT_IF_KEYS)}"
        )
    try:
        factor = float(text)
    except ValueError:
        raise InvalidArgumentError(f"{option} {key}: '{text:.40}' is not a number") from None
    if not MIN_WHAT_IF_FACTOR <= factor <= MAX_WHAT_IF_FACTOR:  # NaN fails too
        raise InvalidArgumentError(
            f"{option} {key}: {factor:g} is not a factor in [{MIN_WHAT_IF_FACTOR:g}, {MAX_WHAT_IF_FACTOR:g}]"
        )
    return key, factor


# ----------------------------------------------------------------------------- time and cost
def cost(device_hours: float | None, price_per_device_hour: float | None) -> float | None:
    """device_hours x price, None when either is unknown."""
    return (
        None
        if device_hours is None or price_per_device_hour is None
        else device_hours * price_per_device_hour
    )


def plan_numbers(
    training_tokens: float | None,
    tokens_per_s: float,
    num_devices: int,
    price_per_device_hour: float | None,
    goodput_fraction: float = 1.0,
) -> dict[str, float | None]:
    """train_days, device_hours and cost of training ``training_tokens`` at ``goodput_fraction``
    of the healthy throughput (all None without tokens, or when the job never ends: goodput 0)."""
    if training_tokens is None or goodput_fraction == 0:
        return {"train_days": None, "device_hours": None, "cost": None}
    train_days = training_tokens / tokens_per_s / goodput_fraction / SECONDS_PER_DAY
    device_hours = train_days * HOURS_PER_DAY * num_devices
    return {
        "train_days": train_days,
        "device_hours": device_hours,
        "cost": cost(device_hours, price_per_device_hour),
    }


def resilience_of(plan: PlanOptions) -> goodput.Resilience:
    """The failure, checkpoint and energy-price options in SI units (ranges are the declaration's)."""
    return goodput.Resilience(
        failure_rate_per_device_hour=plan.failure_rate_per_device_hour,
        restart_time_s=plan.restart_time_s,
        checkpoint_mode=plan.checkpoint_mode.value,
        write_bytes_per_s_per_node=goodput.gbytes_per_s(
            plan.checkpoint_write_gbytes_per_s_per_node
        ),
        price_per_kwh=plan.price_per_kwh,
    )


def layout_goodput(est: Estimate, resilience: goodput.Resilience | None = None) -> goodput.Goodput:
    """The goodput of an estimated layout: its own checkpoint bytes, the cluster's hosts, the
    accelerator's host link and storage bandwidth."""
    resilience = resilience or goodput.Resilience()
    # the larger pipeline stage's shard, the replicas sharing the writing (the search's too)
    bytes_per_device = goodput.layout_checkpoint_bytes(
        est.problem.model, est.problem.workload, est.layout
    )
    return goodput.cluster_goodput(resilience, est.cluster, bytes_per_device, est.step_time_s)


def estimate_plan(
    est: Estimate,
    price_per_device_hour: float | None,
    resilience: goodput.Resilience | None = None,
) -> dict[str, float | None]:
    """The layout's goodput and its goodput-aware days, device-hours and cost (``plan_numbers``)."""
    fraction = layout_goodput(est, resilience).goodput
    return {
        "goodput": fraction,
        **plan_numbers(
            est.workload.training_tokens,
            est.tokens_per_s,
            est.cluster.num_devices,
            price_per_device_hour,
            fraction,
        ),
    }


ENERGY_KEYS = ("energy_j_per_step", "energy_j_per_token", "energy_kwh", "energy_cost")


def energy_numbers(
    est: Estimate, goodput_fraction: float, price_per_kwh: float | None = None
) -> dict[str, float | dict[str, float] | None]:
    """Energy per step (itemised by component: ``energy_j_per_step_by_component``) and per token
    (joules), of the whole run at the goodput (kWh; lost time draws as much as useful time) and
    its cost; null where the board power is not catalogued (``costs.power``)."""
    acc = est.cluster.accelerator
    busy_w = power.busy_power_w(acc, est.workload.power_limit_w)
    if busy_w is None:
        return {**dict.fromkeys(ENERGY_KEYS), "energy_j_per_step_by_component": None}
    devices, times = est.cluster.num_devices, est.time_s
    step_j = power.step_energy_j(devices, times["step"], times["compute"], busy_w, acc.idle_power_w)
    per_token = step_j / est.workload.global_batch_tokens
    tokens = est.workload.training_tokens
    kwh = (
        None
        if tokens is None or goodput_fraction == 0
        else per_token * tokens / goodput_fraction / JOULES_PER_KWH
    )
    energy_cost = None if kwh is None or price_per_kwh is None else kwh * price_per_kwh
    return {
        **dict(zip(ENERGY_KEYS, (step_j, per_token, kwh, energy_cost), strict=True)),
        "energy_j_per_step_by_component": power.energy_by_component_j(
            devices, times, busy_w, acc.idle_power_w
        ),
    }


def with_training_tokens(problem: Problem, training_tokens: float | None) -> Problem:
    """The problem with ``training_tokens`` in its Workload (unchanged when None)."""
    if training_tokens is None:
        return problem
    return replace(
        problem, workload=replace(problem.workload, training_tokens=check_tokens(training_tokens))
    )


# ----------------------------------------------------------------------------- what-if hardware
def scaled_accelerator(acc: Accelerator, factors: dict[str, float]) -> Accelerator:
    """The accelerator with each named number multiplied by its factor."""
    return replace(
        acc,
        **{
            WHAT_IF_FIELDS[key][0]: getattr(acc, WHAT_IF_FIELDS[key][0]) * f
            for key, f in factors.items()
        },
    )


def scaled_axis(axis: Axis, factors: dict[str, float]) -> Axis:
    """The axis with its bytes/s multiplied by the factors of the bandwidths of its kind."""
    scale = math.prod(f for key, f in factors.items() if axis.kind in WHAT_IF_FIELDS[key][1])
    return replace(axis, bytes_per_s_per_direction=axis.bytes_per_s_per_direction * scale)


def scaled_cluster(cluster: Cluster, factors: dict[str, float]) -> Cluster:
    """The cluster with its hardware numbers scaled (same name, shape and axes)."""
    return replace(
        cluster,
        accelerator=scaled_accelerator(cluster.accelerator, factors),
        axes=tuple(scaled_axis(a, factors) for a in cluster.axes),
    )


def scaled_problem(problem: Problem, factors: dict[str, float]) -> Problem:
    return replace(problem, cluster=scaled_cluster(problem.cluster, factors))


def relative_change(new: float | None, base: float | None) -> float | None:
    """(new - base) / base, None when either is unknown."""
    return None if new is None or base is None else (new - base) / base


def re_estimate(est: Estimate, factors: dict[str, float]) -> Estimate:
    """The same (placed) layout costed on the estimate's hardware scaled by ``factors``."""
    return estimate(
        scaled_problem(est.problem, factors),
        est.layout,
        mfu_convention=est.mfu_convention,
        strict=False,
    )


def sensitivity(est: Estimate, factor: float = SENSITIVITY_FACTOR) -> dict[str, float]:
    """Key -> relative change of the layout's step time when that number alone is x ``factor``
    (the layout held fixed: re-estimated, not re-solved)."""
    base = est.step_time_s
    return {
        key: (re_estimate(est, {key: factor}).step_time_s - base) / base for key in WHAT_IF_KEYS
    }
