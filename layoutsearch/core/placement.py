"""How each parallel degree is factored over the cluster's physical axes.

A placement lists (axis, factor) pairs per degree; factors multiply to the degree, and on
every axis the factors of all degrees multiply to the axis size. Degrees nest in
``NESTING_ORDER`` (tp innermost, pp outermost), which decides strides (see ``costs.comms``).

The search places degrees by an *axis order*, the way a device mesh is reshaped (JAX
``create_device_mesh``, Megatron's rank order): degrees in nesting order take factors from
the axes in the given order, each taking gcd(what it still needs, what the axis has left).
Slow outer axes (DCN between slices, the GPU scale-out network) always come last; the
order of the fast axes is the choice (up to 3! on a 3-D torus, fewer when axes are alike).
"""

from __future__ import annotations

import itertools

import numpy as np

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.specs import Cluster, Layout, Placements

NESTING_ORDER = (
    "tp",
    "cp",
    "fsdp",
    "dp",
    "pp",
)  # inner to outer on a shared axis (Megatron: tp-cp-dp-pp)
# Expert layers regroup the same devices (Megatron-Core MoE parallel folding, rank order tp-ep-dp-pp
# with the expert TP): etp innermost, then ep, the expert ZeRO shard group, the replicas, pp.
EXPERT_NESTING = ("etp", "ep", "efsdp", "edpr", "pp")
Order = tuple[str, ...]


def axis_orders(cluster: Cluster) -> list[Order]:
    """Distinct orders of the fast axes (alike axes - same size, kind, wraparound - are not permuted)."""
    fast = [a for a in cluster.axes if a.kind in ("torus", "switch", "mesh")]
    slow = tuple(a.name for a in cluster.axes if a.kind not in ("torus", "switch", "mesh"))
    seen, orders = set(), []
    for perm in itertools.permutations(fast[::-1]):  # the last torus axis (z) first by default
        signature = tuple((a.size, a.kind, a.wraparound) for a in perm)
        if signature not in seen:
            seen.add(signature)
            orders.append(tuple(a.name for a in perm) + slow)
    return orders


def fill_order(
    cluster: Cluster,
    degrees: dict[str, np.ndarray],
    order: Order,
    nesting: tuple[str, ...] = NESTING_ORDER,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the axes in ``order`` with the degrees in nesting order, for many degree tuples at
    once: each degree takes gcd(what it still needs, what the axis has left) from each axis.

    Returns the factor tables [rows, axis (cluster order), degree (``nesting``)] and whether
    every degree was placed whole.
    """
    rows = len(next(iter(degrees.values())))
    index = {a.name: i for i, a in enumerate(cluster.axes)}
    room = np.tile(np.array([a.size for a in cluster.axes], dtype=np.int64), (rows, 1))
    table = np.ones((rows, len(cluster.axes), len(nesting)), dtype=np.int64)
    ok = np.ones(rows, dtype=bool)
    for j, name in enumerate(nesting):
        need = np.asarray(degrees.get(name, np.ones(rows, dtype=np.int64)), dtype=np.int64).copy()
        for axis in order:
            a = index[axis]
            f = np.gcd(need, room[:, a])
            table[:, a, j] = f
            room[:, a] //= f
            need //= f
        ok &= need == 1
    return table, ok


def expert_degrees(degrees: dict) -> dict:
    """The expert layers' groups of a degree tuple (ints or arrays; EXPERT_NESTING): etp, ep, the
    expert ZeRO shard group efsdp = fsdp x cp x tp / (ep x etp) and the replicas edpr = dp where ep x
    etp divides fsdp x cp x tp, else efsdp = 1 and every expert copy a replica (ZeRO-0 only,
    ``rules``), and pp."""
    one = np.ones_like(np.asarray(degrees["tp"]))
    ep, etp = (np.asarray(degrees.get(name, one)) for name in ("ep", "etp"))
    inner = (
        np.asarray(degrees.get("fsdp", one))
        * np.asarray(degrees.get("cp", one))
        * np.asarray(degrees["tp"])
    )
    dp = np.asarray(degrees.get("dp", one))
    fits = inner % (ep * etp) == 0
    efsdp = np.where(fits, inner // np.maximum(ep * etp, 1), 1)
    edpr = np.where(fits, dp, dp * inner // np.maximum(ep * etp, 1))
    return {
        "etp": etp,
        "ep": ep,
        "efsdp": efsdp,
        "edpr": edpr,
        "pp": np.asarray(degrees.get("pp", one)),
    }


def has_experts(degrees: dict) -> bool:
    return degrees.get("ep", 1) * degrees.get("etp", 1) > 1


def placement_for_order(
    cluster: Cluster, degrees: dict[str, int], order: Order
) -> Placements | None:
    """``fill_order`` for one degree tuple, as a placement; None when a degree does not fit. A
    mixture-of-experts layout also places etp and ep (their own nesting, ``EXPERT_NESTING``)."""
    dense = {k: np.array([v]) for k, v in degrees.items() if k in NESTING_ORDER}
    table, ok = fill_order(cluster, dense, order)
    if not ok[0]:
        return None
    out = _entries(cluster, table, order, NESTING_ORDER, NESTING_ORDER)
    if has_experts(degrees):
        expert = {k: np.atleast_1d(v) for k, v in expert_degrees(degrees).items()}
        table, ok = fill_order(cluster, expert, order, EXPERT_NESTING)
        if not ok[0]:
            return None
        out += _entries(cluster, table, order, EXPERT_NESTING, ("etp", "ep"))
    return tuple(out)


def _entries(cluster: Cluster, table: np.ndarray, order: Order, nesting, names) -> list:
    index = {a.name: i for i, a in enumerate(cluster.axes)}
    out = []
    for j, name in enumerate(nesting):
        placed = tuple(
            (axis, int(table[0, index[axis], j])) for axis in order if table[0, index[axis], j] > 1
        )
        if placed and name in names:
            out.append((name, placed))
    return out


def candidate_placements(cluster: Cluster, degrees: dict[str, int]) -> list[Placements]:
    """The distinct placements of the axis orders, in order; else any exact factoring; else none."""
    out = []
    for order in axis_orders(cluster):
        placed = placement_for_order(cluster, degrees, order)
        if placed is not None and placed not in out:
            out.append(placed)
    if not out and not has_experts(degrees):
        exact = _exact_placement(cluster, degrees)
        out = [exact] if exact is not None else []
    return out


def default_axes(cluster: Cluster, layout: Layout) -> Placements:
    """The first candidate placement (z first on a torus: `fsdp=1024,tp=8` on 16x16x32 gives tp
    on z(8) and fsdp on z(4) x y(16) x x(16))."""
    placements = candidate_placements(cluster, layout.all_degrees)
    if not placements:
        shape = " x ".join(f"{a.name}({a.size})" for a in cluster.axes)
        raise InvalidLayoutError(
            f"degrees {layout.all_degrees} cannot be laid onto the axes {shape} of {cluster.name}"
        )
    return placements[0]


def _exact_placement(cluster: Cluster, degrees: dict[str, int]) -> Placements | None:
    """Depth-first search for any factoring of the degrees over the axes (rarely needed)."""
    room = {a.name: a.size for a in cluster.axes}
    names = [a.name for a in cluster.axes]

    def place(i: int):
        if i == len(NESTING_ORDER):
            return [] if all(v == 1 for v in room.values()) else None
        name = NESTING_ORDER[i]
        for placed in _factorings(degrees.get(name, 1), names, room):
            for axis, f in placed:
                room[axis] //= f
            rest = place(i + 1)
            for axis, f in placed:
                room[axis] *= f
            if rest is not None:
                return ([(name, tuple(placed))] if placed else []) + rest
        return None

    found = place(0)
    return tuple(found) if found is not None else None


def _factorings(n: int, names: list[str], room: dict[str, int]):
    if n == 1:
        yield []
        return
    if not names:
        return
    axis, rest = names[0], names[1:]
    for f in (d for d in range(n, 0, -1) if n % d == 0 and room[axis] % d == 0):
        for tail in _factorings(n // f, rest, room):
            yield ([(axis, f)] if f > 1 else []) + tail
