"""Power caps and energy by component: pure functions on numbers, SI units (watts, seconds, joules).

A power cap (``Workload.power_limit_w``, nvidia-smi -pl) below the board's rating makes the GPU's
power manager lower the SM clock until the board draws the cap while it computes. Dynamic power
is P = a C V^2 f (CMOS switching) and in the DVFS range the voltage rises with the clock, so the
draw above the idle floor grows as f^3; the sustained clock under a cap, as a share of the
clock at the rating, is

    clock_factor = ((cap - idle) / (draw - idle)) ** (1 / CLOCK_POWER_EXPONENT)   cap < draw
                 = 1                                                             cap >= draw

with ``draw`` what the kernel would draw at the rating's clock and ``idle`` the floor that does not
scale with the clock: the part's static power (``Accelerator.static_power_w``, measured at its lowest
clock doing nothing), else its idle power. The idle power a device draws waiting inside a step, clocks
up, is higher (the H100 measured 69 W and 117 W): its clock tree switches and scales. The part's GEMMs draw its rating
(they are what a board's power limit is set for), and a kernel that keeps the tensor cores
``activity`` as busy draws in proportion, the switching activity a of P = a C V^2 f:

    draw = idle + activity x (board - idle),   activity = its rate / the GEMMs' (at most 1)

So the matmuls and the output head slow first; FlashAttention-2, at about a third of the GEMMs' rate on
Hopper, draws under most caps and keeps its clock (``costs.terms`` gives each its activity). HBM, link
and host bandwidths do not scale. The exponent and the proportionality are physics, not a fit;
docs/planning.md#power-caps names the published power-cap measurements they are checked against.

Energy by component: a device draws its busy power (the board power, or the cap below it) while
it computes and its idle power while it waits (exposed communication, the pipeline bubble, the
fixed overheads): per step

    energy_j = devices x (busy_w x compute_s + idle_w x (step_s - compute_s))
             = devices x step_s x (idle_w + u x (busy_w - idle_w)),   u = compute_s / step_s

Without a catalogued idle power the whole step counts at busy power (an upper bound).
"""

from __future__ import annotations

from layoutsearch.core.specs import Accelerator, Workload

__all__ = [
    "CLOCK_POWER_EXPONENT",
    "WAITING_COMPONENTS",
    "clock_factor",
    "compute_rate_factor",
    "busy_power_w",
    "step_energy_j",
    "energy_by_component_j",
    "site_power_w",
]

CLOCK_POWER_EXPONENT = 3.0  # P - idle ~ f V^2 with V ~ f (docs/planning.md#power-caps)
# time_s parts a device waits through at idle power (costs.estimate itemises the step into these
# and "compute")
WAITING_COMPONENTS = ("exposed_comm", "bubble", "overhead")


def clock_factor(
    power_limit_w: float | None, board_power_w: float, idle_power_w: float, activity: float = 1.0
) -> float:
    """The sustained clock under a cap over the clock at the rating, for a kernel that keeps the tensor
    cores ``activity`` as busy as the part's GEMMs (module docstring); 1 with no cap or a cap at or above
    the kernel's draw."""
    draw = idle_power_w + min(activity, 1.0) * (board_power_w - idle_power_w)
    if power_limit_w is None or power_limit_w >= draw:
        return 1.0
    share = (power_limit_w - idle_power_w) / (draw - idle_power_w)
    return share ** (1.0 / CLOCK_POWER_EXPONENT)


def compute_rate_factor(workload: Workload, acc: Accelerator, activity: float = 1.0) -> float:
    """What the workload's power cap leaves of a compute rate whose kernels keep the tensor cores
    ``activity`` as busy as the part's GEMMs (1: no cap)."""
    if workload.power_limit_w is None or acc.board_power_w is None:
        return 1.0  # core.problem refuses a cap on a part without a board power
    floor_w = acc.idle_power_w if acc.static_power_w is None else acc.static_power_w
    return clock_factor(workload.power_limit_w, acc.board_power_w, floor_w or 0.0, activity)


def busy_power_w(acc: Accelerator, power_limit_w: float | None = None) -> float | None:
    """Watts one device draws while it computes: the board power, or the cap below it."""
    if acc.board_power_w is None:
        return None
    return acc.board_power_w if power_limit_w is None else min(acc.board_power_w, power_limit_w)


def step_energy_j(
    num_devices: int,
    step_time_s: float,
    compute_s: float,
    board_power_w: float,
    idle_power_w: float | None,
) -> float:
    """Joules of one step on ``num_devices``: ``board_power_w`` (the busy power) over the compute
    seconds, idle power over the rest (busy power when idle is unknown)."""
    idle_w = board_power_w if idle_power_w is None else idle_power_w
    busy_s = min(compute_s, step_time_s)
    return num_devices * (board_power_w * busy_s + idle_w * (step_time_s - busy_s))


def energy_by_component_j(
    num_devices: int, time_s: dict[str, float], busy_w: float, idle_w: float | None
) -> dict[str, float]:
    """Joules per step of each part of the step (``Estimate.time_s``): compute at busy power,
    exposed communication, bubble and overhead at idle power (busy when idle is unknown)."""
    wait_w = busy_w if idle_w is None else idle_w
    out = {"compute": num_devices * busy_w * time_s["compute"]}
    for name in WAITING_COMPONENTS:
        out[name] = num_devices * wait_w * time_s[name]
    return out


def site_power_w(num_devices: int, acc: Accelerator, power_limit_w: float | None) -> float | None:
    """The devices' peak draw: each at its busy power (None without a catalogued board power)."""
    busy_w = busy_power_w(acc, power_limit_w)
    return None if busy_w is None else num_devices * busy_w
