"""The rank order a launcher must follow so that the groups it builds are the groups the search costed.

A placement (``Layout.axes``) factors each degree over the cluster's physical axes; on one axis the
degrees nest in ``NESTING_ORDER`` (``costs.comms``: the inner degree's members are adjacent). Each
(degree, axis) factor is a ``Digit``: ``size`` positions ``stride`` devices apart along that axis.

Megatron-Core (``parallel_state.RankGenerator``: rank = tp + tp x (cp + cp x (dp + dp x pp)) for its
default order ``tp-cp-ep-dp-pp``; ``--use-tp-pp-dp-mapping`` gives ``tp-cp-ep-pp-dp``) and torchtitan
(``ParallelDims.build_mesh`` unflattens the world as ``pp, dp_replicate, dp_shard, cp, tp``, tp
fastest) write a global rank as a mixed radix over their degrees, innermost first; their expert
layers read the same rank again as etp, ep, expert data parallel, pp. torchrun numbers ranks host by
host (rank = host slot x GPUs per host + local rank), so a launch builds the costed groups when the
framework's innermost GPUs-per-host digits are the GPU's index in its host and the hosts are listed
in the order of the remaining digits: NVLink domain by domain (the natural order) when they increase.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass

from layoutsearch.core.placement import EXPERT_NESTING, NESTING_ORDER, has_experts
from layoutsearch.core.specs import Cluster, Layout

MEGATRON_ORDERS = {  # order string -> (its groups of layoutsearch degrees, innermost first; the flag)
    "tp-cp-ep-dp-pp": ((("tp",), ("cp",), ("fsdp", "dp"), ("pp",)), None),
    "tp-cp-ep-pp-dp": ((("tp",), ("cp",), ("pp",), ("fsdp", "dp")), "--use-tp-pp-dp-mapping"),
}
TORCHTITAN_ORDERS = {
    "tp-cp-dp_shard-dp_replicate-pp": (("tp",), ("cp",), ("fsdp",), ("dp",), ("pp",))
}
# the export targets whose launch must build the costed groups (``gpu_rank_lines``): the search masks the
# placements their orders cannot build when it searches for one of them (``search.space``)
LAUNCH_ORDERS: dict[str, dict[str, tuple]] = {
    "megatron": {name: groups for name, (groups, _) in MEGATRON_ORDERS.items()},
    "torchtitan": TORCHTITAN_ORDERS,
    "torchtitan-0.3": TORCHTITAN_ORDERS,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Digit:
    """``size`` positions of ``degree``, ``stride`` devices apart along the physical ``axis``."""

    degree: str
    axis: str
    stride: int
    size: int


@dataclass(frozen=True, kw_only=True)
class LaunchOrder:
    """How ranks reach devices: the framework's ``order``; ``host_digits`` (fastest first) give the
    host at each slot of the hostfile, as host-level positions (``axis`` node: the host's index in
    its NVLink domain; other axes: the domain's index along them)."""

    order: str
    devices_per_host: int
    host_digits: tuple[Digit, ...]
    natural: bool


def placement_digits(cluster: Cluster, layout: Layout, nesting=NESTING_ORDER) -> dict[str, list]:
    """Each degree's digits, inner axis first; on one axis a degree's stride is the product of the
    factors of the degrees nested inside it there (as ``costs.comms.spans_from_factors``)."""
    factors = {name: dict(placed) for name, placed in layout.axes or ()}
    out: dict[str, list[Digit]] = {name: [] for name in nesting}
    for axis in cluster.axes:
        stride = 1
        for name in nesting:
            size = factors.get(name, {}).get(axis.name, 1)
            if size > 1:
                out[name].append(Digit(degree=name, axis=axis.name, stride=stride, size=size))
                stride *= size
    return out


def take(digits: list[Digit], size: int) -> tuple[list[Digit], list[Digit]] | None:
    """The leading digits whose sizes multiply to ``size`` (a digit split where needed) and the
    rest; None when ``size`` is not such a product."""
    taken, rest, need = [], list(digits), size
    while need > 1 and rest:
        d = rest.pop(0)
        part = math.gcd(d.size, need)
        if part == 1:
            return None
        taken.append(Digit(degree=d.degree, axis=d.axis, stride=d.stride, size=part))
        if part < d.size:
            rest.insert(
                0, Digit(degree=d.degree, axis=d.axis, stride=d.stride * part, size=d.size // part)
            )
        need //= part
    return (taken, rest) if need == 1 else None


def _merged(digits: list[Digit]) -> set[tuple[str, int, int]]:
    """The device set a group of digits spans, as merged (axis, stride, size) runs."""
    runs: list[list] = []
    for d in sorted(digits, key=lambda d: (d.axis, d.stride)):
        if runs and runs[-1][0] == d.axis and runs[-1][1] * runs[-1][2] == d.stride:
            runs[-1][2] *= d.size
        else:
            runs.append([d.axis, d.stride, d.size])
    return {tuple(r) for r in runs}


def launch_order(
    cluster: Cluster, layout: Layout, order: str, groups: tuple[tuple[str, ...], ...]
) -> LaunchOrder | str:
    """The launch that builds the costed groups with a framework whose rank is a mixed radix over
    ``groups`` (innermost first), or one line saying why no host order can."""
    digits = placement_digits(cluster, layout)
    ranks = [d for group in groups for name in group for d in digits[name]]
    inner = cluster.axes[0]
    host = min(cluster.accelerator.devices_per_host, inner.size)
    split = take(ranks, host)
    in_host = split[0] if split else []
    expected = 1
    for d in in_host:
        expected = expected * d.size if (d.axis, d.stride) == (inner.name, expected) else 0
    if split is None or expected != host:
        return (
            f"{order} puts {_text(ranks, host)} on the {host} GPUs of a host, where the search "
            f"costed {_text(sorted(ranks, key=_device_stride(cluster)), host)}"
        )
    if has_experts(layout.all_degrees):
        problem = _expert_problem(cluster, layout, ranks, order)
        if problem:
            return problem
    hosts = [_host_digit(d, inner.name, host) for d in split[1]]
    return LaunchOrder(
        order=order,
        devices_per_host=host,
        host_digits=tuple(hosts),
        natural=_natural(cluster, hosts, host),
    )


def _expert_problem(cluster: Cluster, layout: Layout, ranks: list[Digit], order: str) -> str | None:
    """Expert layers read the rank as etp, ep, ...: those groups against the costed ones."""
    costed = placement_digits(cluster, layout, EXPERT_NESTING)
    rest = ranks
    for name in ("etp", "ep"):
        split = take(rest, getattr(layout, name))
        if split is None or _merged(split[0]) != _merged(costed[name]):
            return f"{order} gives the expert layers' {name}({getattr(layout, name)}) other devices than the search costed"
        rest = split[1]
    return None


def _host_digit(d: Digit, inner: str, host: int) -> Digit:
    stride = d.stride // host if d.axis == inner else d.stride
    return Digit(degree=d.degree, axis=d.axis, stride=stride, size=d.size)


def _natural(cluster: Cluster, hosts: list[Digit], host: int) -> bool:
    """Whether slot s holds host s of the natural order (domain by domain, hosts in a domain in order)."""
    sizes = {a.name: a.size for a in cluster.axes}
    sizes[cluster.axes[0].name] //= host
    before = dict(zip(sizes, itertools.accumulate([1, *sizes.values()], operator.mul)))
    expected = 1
    for d in hosts:
        if d.stride * before[d.axis] != expected:
            return False
        expected *= d.size
    return True


def _device_stride(cluster: Cluster):
    before = dict(
        zip(
            (a.name for a in cluster.axes),
            itertools.accumulate([1, *(a.size for a in cluster.axes)], operator.mul),
        )
    )
    return lambda d: d.stride * before[d.axis]


def _text(digits: list[Digit], size: int) -> str:
    split = take(digits, size)
    shown = split[0] if split else digits[:1]
    return " x ".join(f"{d.degree}({d.size}) on {d.axis}" for d in shown) or "no degree"


def host_of_slot(launch: LaunchOrder, slot: int) -> dict[str, int]:
    """The host at hostfile position ``slot``: its position along each axis (node: its index in the NVLink domain)."""
    where: dict[str, int] = {}
    for d in launch.host_digits:
        slot, digit = divmod(slot, d.size)
        where[d.axis] = where.get(d.axis, 0) + digit * d.stride
    return where


def host_lines(cluster: Cluster, launch: LaunchOrder) -> list[str]:
    """The header lines for the hostfile (or Slurm node list) order."""
    inner = cluster.axes[0]
    per_domain = inner.size // launch.devices_per_host
    total = cluster.num_devices // launch.devices_per_host
    where = f"{launch.devices_per_host} GPUs per host, {per_domain} host(s) per {inner.name} domain"
    if launch.natural:
        return [
            f"Hosts ({total}, {where}): list them domain by domain (hostfile order = torchrun node rank; "
            "Slurm: --distribution=block over a node list in that order); local rank i = GPU i."
        ]
    radix = ", ".join(str(d.size) for d in launch.host_digits)
    terms: dict[str, list[str]] = {}
    for i, d in enumerate(launch.host_digits):
        terms.setdefault(d.axis, []).append(f"{d.stride} x a{i}")
    formula = "; ".join(f"{axis} position {' + '.join(parts)}" for axis, parts in terms.items())
    return [
        f"REQUIRED host order ({total} hosts, {where}): write hostfile slot s (torchrun node rank) in the mixed "
        f"radix ({radix}), fastest first, as digits a0, a1, ...; slot s holds the host at {formula} "
        f"(node position: the host's index in its domain); local rank i = GPU i. Listed domain by domain "
        "instead, the groups differ from the costed ones."
    ]


def rank_lines(cluster: Cluster, launch: LaunchOrder, what: str) -> list[str]:
    """The rank-order header lines: the framework's order, then the host order."""
    return [f"Rank order: {what} {launch.order}: the costed placement holds when"] + [
        "  " + line for line in host_lines(cluster, launch)
    ]


# ----------------------------------------------------------------------------- MaxText on a torus
def jax_torus_axes(shape: tuple[int, ...], sizes: list[int]) -> list[tuple[int, ...]] | None:
    """The physical axes JAX's ``create_device_mesh`` gives each logical axis of a TPU slice without
    splitting a physical axis (mesh_utils, ``allow_split_physical_axes`` false): from the last logical
    axis (the most network-intensive) to the first, each takes the first combination of still-free
    physical axes, most axes first, whose sizes multiply to its size; None when one finds none."""
    free = list(range(len(shape)))
    out: list[tuple[int, ...]] = [() for _ in sizes]
    for i in reversed(range(len(sizes))):
        if sizes[i] == 1:
            continue
        picks = (
            c
            for k in range(len(free), 0, -1)
            for c in itertools.combinations(free, k)
            if math.prod(shape[a] for a in c) == sizes[i]
        )
        pick = next(picks, None)
        if pick is None:
            return None
        out[i] = pick
        free = [a for a in free if a not in pick]
    return out


# ----------------------------------------------------------------------------- per framework
def pick_launch(cluster: Cluster, layout: Layout, orders: dict) -> LaunchOrder | str:
    """The first of ``orders`` (name -> groups) launched in the natural host order, else the first
    launched in some host order, else why the first cannot be."""
    found = {name: launch_order(cluster, layout, name, groups) for name, groups in orders.items()}
    launches = [f for f in found.values() if isinstance(f, LaunchOrder)]
    natural = [f for f in launches if f.natural]
    if natural or launches:
        return (natural or launches)[0]
    return next(iter(found.values()))


def gpu_rank_lines(ctx, orders: dict, what: str) -> tuple[LaunchOrder | None, list[str]]:
    """For a GPU framework: the chosen launch and its header lines; none for a TPU-planned layout or
    one host; raises the export's one-line error when no host order builds the costed groups."""
    if ctx.cluster.accelerator.kind != "gpu":
        return None, [f"Rank order: not written (planned for TPUs; {what} runs on GPUs)."]
    found = pick_launch(ctx.cluster, ctx.layout, orders)
    if isinstance(found, str):
        raise ctx.fail(
            f"no host order makes {what}'s rank order build the costed groups: {found}; "
            "nearest: the search's own placements (re-run solve or estimate without hand-written 'axes')"
        )
    if ctx.num_devices <= found.devices_per_host:
        return found, [f"Rank order: {what} {found.order}: local rank i = GPU i (one host)."]
    return found, rank_lines(ctx.cluster, found, what)


# MaxText's mesh_axes (configs/base.yml) that an export sets, least network-intensive first, and the
# layoutsearch degrees on each (the expert axis is carved out of fsdp: ``maxtext.parallelism``)
MAXTEXT_MESH_AXES = ("data", "pipeline", "fsdp", "context", "tensor", "expert")


def maxtext_torus_check(
    cluster: Cluster, ici: dict[str, int], costed: dict[str, dict]
) -> list[str]:
    """Header lines on whether MaxText's ``create_device_mesh`` lays the ``ici_*`` degrees on the torus
    axes the search costed (``costed``: mesh axis -> {torus axis: factor}); alike axes (same size and
    wraparound) count as the same. Empty when it does; a line starting 'allow_split' when the costed
    placement splits a torus axis, which JAX refuses unless ``allow_split_physical_axes`` is set."""
    torus = [a for a in cluster.axes if a.kind == "torus"]
    sizes = [ici.get(name, 1) for name in MAXTEXT_MESH_AXES]
    whole = all(
        f == next(a.size for a in torus if a.name == axis)
        for placed in costed.values()
        for axis, f in placed.items()
    )
    if not whole:
        return [
            "allow_split_physical_axes: the costed placement splits a torus axis; JAX's create_device_mesh "
            "refuses that unless allowed, and then its own heuristic picks the split (costed: "
            + _mesh_text(costed)
            + ")."
        ]
    picked = jax_torus_axes(tuple(a.size for a in torus), sizes)
    built = {
        name: {torus[i].name: torus[i].size for i in axes}
        for name, axes in zip(MAXTEXT_MESH_AXES, picked or [])
        if axes
    }

    def signature(placed: dict[str, dict]) -> dict:
        kinds = {a.name: (a.size, a.wraparound) for a in torus}
        return {k: sorted((kinds[a], f) for a, f in v.items()) for k, v in placed.items() if v}

    if signature(built) != signature(costed):
        return [
            f"WARNING: MaxText's create_device_mesh lays the mesh as {_mesh_text(built)}, the search costed "
            f"{_mesh_text(costed)}: the predicted step time does not hold for this mesh."
        ]
    return []


def _mesh_text(placed: dict[str, dict]) -> str:
    return "; ".join(
        f"{name} on " + " ".join(f"{axis}({f})" for axis, f in axes.items())
        for name, axes in placed.items()
        if axes
    )
