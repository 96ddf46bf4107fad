"""Goodput of a training job under failures and checkpoints: pure functions on numbers, SI units.

A job on N devices, each failing at ``failure_rate_per_device_hour``, fails as a Poisson process:

    job_mtbf_s   = 3600 / (failure_rate_per_device_hour x N)
    checkpoint   = what each device's optimizer holds (fp32 master + moments, from the layout's
                   memory terms), written by every device at once (a fully parallel save): the
                   larger of the first and last pipeline stage's, whose write ends the save
    write_s      = checkpoint_bytes_per_device x devices_per_host / write_bytes_per_s_per_node
    blocking_s   = write_s (blocking), or the device-to-host copy only (async):
                   checkpoint_bytes_per_device / host_bytes_per_s_per_direction
    interval_s   = sqrt(2 x blocking_s x job_mtbf_s)            (Young 1974; Daly 2006, eq. 3)
    restart_s    = restart_time_s + write_s (the load, read at the write bandwidth)
                   + write_s in async mode (the checkpoint in flight when a failure strikes)
    goodput      = interval_s / (M e^(restart_s/M) (e^((interval_s + blocking_s)/M) - 1)), M = MTBF

The last line is Daly's complete model (Daly 2006, "A higher order estimate of the optimum
checkpoint interval for restart dumps", FGCS 22, eq. 11): wall time per useful second with
exponential failures, failures during a restart included. For interval, checkpoint and restart
much shorter than the MTBF it is 1 - blocking/interval - interval/(2M) - restart/M (Young).
docs/planning.md derives the default failure rate from Llama 3's published interruptions.

Energy per step (``step_energy_j``) lives in ``costs.power`` with the power cap; it is
importable from here as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import DEFAULT_RESTART_TIME_S, LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR
from layoutsearch.core.specs import SCHEDULE_CODES, Layout, ModelSpec, Workload
from layoutsearch.core.units import GB
from layoutsearch.costs import memory, pipeline, terms
from layoutsearch.costs.power import step_energy_j

__all__ = [
    "LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR",
    "DEFAULT_RESTART_TIME_S",
    "DEFAULT_WRITE_BYTES_PER_S_PER_NODE",
    "CHECKPOINT_MODES",
    "Resilience",
    "Goodput",
    "job_mtbf_s",
    "checkpoint_bytes_per_device",
    "checkpoint_bytes_of_shapes",
    "layout_checkpoint_bytes",
    "optimal_interval_s",
    "daly_goodput",
    "goodput",
    "step_energy_j",
    "storage_bytes_per_s_per_node",
    "check_async",
    "cluster_goodput",
    "reshard_time_s",
]

SECONDS_PER_HOUR = 3600.0
# Llama 3 (Dubey et al. 2024, section 3.3.4): 419 unexpected interruptions in a 54-day snapshot on
# 16,384 H100 GPUs: 419 / (54 x 24 x 16,384) = 1.973e-5 per GPU-hour (job MTBF 3.09 h).
# Llama 3's storage (Tectonic): 2 TB/s sustained for 16,384 GPUs in 2,048 hosts of 8.
DEFAULT_WRITE_BYTES_PER_S_PER_NODE = 2e12 / 2048
CHECKPOINT_MODES = ("blocking", "async")
MAX_EXPONENT = 700.0  # e^700 is near the float maximum: beyond it the job never finishes


@dataclass(frozen=True, kw_only=True, slots=True)
class Resilience:
    """The failure and checkpoint inputs of a plan, in SI units.

    ``write_bytes_per_s_per_node`` None: the accelerator's catalogue value, else the default."""

    failure_rate_per_device_hour: float = LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR
    restart_time_s: float = DEFAULT_RESTART_TIME_S
    checkpoint_mode: str = "blocking"
    write_bytes_per_s_per_node: float | None = None
    price_per_kwh: float | None = None  # prices the energy, not the goodput


@dataclass(frozen=True, kw_only=True, slots=True)
class Goodput:
    """A layout's goodput and the numbers behind it (seconds, bytes; MTBF in hours)."""

    goodput: float
    checkpoint_interval_s: float
    checkpoint_time_s: float  # what a checkpoint blocks training for
    checkpoint_write_s: float  # until it is on storage
    checkpoint_bytes_per_device: float
    restart_s: float
    job_mtbf_h: float

    def record(self) -> dict[str, float | None]:
        """The layout record's fields (OUTPUT.md); infinite MTBF (no failures) is null."""
        finite = math.isfinite(self.job_mtbf_h)
        return {
            "goodput": self.goodput,
            "checkpoint_interval_s": self.checkpoint_interval_s if finite else None,
            "checkpoint_time_s": self.checkpoint_time_s,
            "job_mtbf_h": self.job_mtbf_h if finite else None,
        }


def job_mtbf_s(failure_rate_per_device_hour: float, num_devices: int) -> float:
    """Mean time between failures of a job on ``num_devices``, seconds (inf without failures)."""
    rate_per_s = failure_rate_per_device_hour * num_devices / SECONDS_PER_HOUR
    return math.inf if rate_per_s == 0 else 1.0 / rate_per_s


def checkpoint_bytes_per_device(memory_bytes: dict[str, float], data_parallel: int) -> float:
    """Bytes one device writes: its fp32 master weights and optimizer moments (its bf16 weights
    when there is no master copy), divided among the ``data_parallel`` devices that hold the
    same copy (a fully parallel save writes each byte once)."""
    master = memory_bytes["state/master"]
    weights = master if master > 0 else memory_bytes["state/weights"]
    return (weights + memory_bytes["state/optimizer"]) / data_parallel


def checkpoint_bytes_of_shapes(
    model: ModelSpec, workload: Workload, sh: terms.Shapes, zero_stage: np.ndarray
) -> np.ndarray:
    """Bytes each device writes per checkpoint, for shapes (arrays) at ZeRO stages ``zero_stage``:
    its state's master weights and moments (``checkpoint_bytes_per_device``) over the devices
    holding the same copy, the dense state's and the routed experts' apart (a dense copy is held
    by all but the tp x pp (x the ZeRO shards) devices; an expert copy by all but pp x ep x etp
    (x the expert ZeRO shards); DualPipe's pipeline holds two copies): the devices together write the state
    once. The largest of a pipeline's devices' (``terms.device_params``, and the last stage's), whose write
    ends the save."""
    z = np.asarray(zero_stage)
    # DualPipe's devices hold the model twice (two stages each): either copy is the one written
    devices = sh.dp * sh.fsdp * sh.tp * sh.pp * sh.cp * pipeline.parameter_copies_array(sh.sched)
    sharded = z >= 1
    shards = (np.where(sharded, sh.shards, 1), np.where(sharded, sh.expert_shards, 1))
    splits = (sh.tp * sh.pp, sh.pp * sh.ep * sh.etp)

    def written(*params_by_group) -> np.ndarray:
        out = 0.0
        for params, group_shards, split in zip(params_by_group, shards, splits, strict=False):
            state = memory.state_bytes(params, workload, z, group_shards)
            kept = np.where(state["master"] > 0, state["master"], state["weights"])
            out = out + (kept + state["optimizer"]) * split * group_shards / devices
        return np.asarray(out)

    moe = model.moe is not None
    # the first stage's devices (``terms.device_params``: the first and the middle ones) and the last stage
    by_device = [written(*d[: 1 + moe]) for d in terms.device_params(model, sh)]
    last = [terms.stage_params(model, sh, False)]
    if moe:
        last.append(terms.expert_stage_params(model, sh, False))
    return np.maximum.reduce([*by_device, written(*last)])


def layout_checkpoint_bytes(model: ModelSpec, workload: Workload, layout: Layout) -> float:
    """``checkpoint_bytes_of_shapes`` of one layout, bytes per device."""
    sh = terms.Shapes.of(
        **layout.all_degrees,
        v=layout.virtual_stages,
        sched=SCHEDULE_CODES[layout.schedule],
        lf=layout.first_stage_layers or 0,
        ll=layout.last_stage_layers or 0,
        spl=int(layout.balanced_split),
    )
    return float(checkpoint_bytes_of_shapes(model, workload, sh, np.array([layout.zero_stage]))[0])


def optimal_interval_s(blocking_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval sqrt(2 C M), seconds (Young 1974; Daly 2006 eq. 3)."""
    return math.sqrt(2.0 * blocking_s * mtbf_s)


def daly_goodput(interval_s: float, blocking_s: float, restart_s: float, mtbf_s: float) -> float:
    """Useful seconds per wall second with Poisson failures (Daly 2006, eq. 11: wall time
    M e^(R/M) (e^((tau + C)/M) - 1) per tau of work); 1 without failures, 0 if it never ends."""
    if math.isinf(mtbf_s):  # never fails: never needs a checkpoint
        return 1.0
    exponent = (interval_s + blocking_s) / mtbf_s
    if exponent + restart_s / mtbf_s > MAX_EXPONENT:
        return 0.0
    return interval_s / (mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(exponent))


def storage_bytes_per_s_per_node(given: float | None, catalogue: float | None) -> float:
    """One host's checkpoint storage bandwidth: the option's, else the accelerator's catalogue
    value, else Llama 3's (``DEFAULT_WRITE_BYTES_PER_S_PER_NODE``)."""
    return given or catalogue or DEFAULT_WRITE_BYTES_PER_S_PER_NODE


def reshard_time_s(
    checkpoint_bytes_per_device: float,
    num_devices: int,
    reading_hosts: int,
    host_bytes_per_s: float,
) -> float:
    """Reading a whole checkpoint (each device's bytes x devices) once into another layout, over
    the storage bandwidth of the hosts that read it."""
    return checkpoint_bytes_per_device * num_devices / (host_bytes_per_s * max(1, reading_hosts))


def check_async(resilience: Resilience, acc) -> None:
    """Refuse async checkpoints on an accelerator without a catalogued host link (the copy to host
    memory is what blocks), naming the option and the accelerator."""
    if resilience.checkpoint_mode == "async" and acc.host_bytes_per_s_per_direction is None:
        raise InvalidArgumentError(
            f"--checkpoint-mode async: accelerator {acc.id} has no host link bandwidth "
            f"(host_gbytes_per_s_per_direction) in its catalogue file"
        )


def goodput(
    resilience: Resilience,
    *,
    checkpoint_bytes: float,
    num_devices: int,
    devices_per_host: int,
    host_bytes_per_s: float | None,
    node_write_bytes_per_s: float | None,
    step_time_s: float,
) -> Goodput:
    """The layout's goodput (module docstring). The interval is at least one step, and in async
    mode at least the write (a checkpoint is on storage before the next one starts). Without
    failures the MTBF and the interval are infinite and the goodput is 1."""
    write_bw = storage_bytes_per_s_per_node(
        resilience.write_bytes_per_s_per_node, node_write_bytes_per_s
    )
    write_s = checkpoint_bytes * devices_per_host / write_bw
    is_async = resilience.checkpoint_mode == "async"
    blocking_s = checkpoint_bytes / host_bytes_per_s if is_async and host_bytes_per_s else write_s
    # (async without a host link in the catalogue is refused by the caller, naming the option)
    mtbf_s = job_mtbf_s(resilience.failure_rate_per_device_hour, num_devices)
    interval_s = max(optimal_interval_s(blocking_s, mtbf_s), step_time_s)
    if is_async:
        interval_s = max(interval_s, write_s)
    restart_s = resilience.restart_time_s + write_s + (write_s if is_async else 0.0)
    return Goodput(
        goodput=daly_goodput(interval_s, blocking_s, restart_s, mtbf_s),
        checkpoint_interval_s=interval_s,
        checkpoint_time_s=blocking_s,
        checkpoint_write_s=write_s,
        checkpoint_bytes_per_device=checkpoint_bytes,
        restart_s=restart_s,
        job_mtbf_h=mtbf_s / SECONDS_PER_HOUR,
    )


def cluster_goodput(
    resilience: Resilience, cluster, checkpoint_bytes: float, step_time_s: float
) -> Goodput:
    """``goodput`` of a layout on ``cluster``: all its devices, its hosts, the accelerator's host
    link and storage bandwidth."""
    acc = cluster.accelerator
    check_async(resilience, acc)
    return goodput(
        resilience,
        checkpoint_bytes=checkpoint_bytes,
        num_devices=cluster.num_devices,
        devices_per_host=min(acc.devices_per_host, cluster.num_devices),
        host_bytes_per_s=acc.host_bytes_per_s_per_direction,
        node_write_bytes_per_s=acc.checkpoint_write_bytes_per_s_per_node,
        step_time_s=step_time_s,
    )


def gbytes_per_s(value: float | None) -> float | None:
    """A bandwidth option in GB/s as bytes/s (None stays None)."""
    return None if value is None else value * GB
