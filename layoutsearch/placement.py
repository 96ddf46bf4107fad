"""How each parallel degree is factored over the cluster's physical axes.

A placement lists (axis, factor) pairs; factors multiply to the degree, and on every axis
the factors of all degrees multiply to the axis size. Degrees nest in ``NESTING_ORDER`` on a
shared axis (tp innermost, pp outermost), which decides strides (see ``costs.comms``).
"""

from __future__ import annotations

from .costs.comms import NESTING_ORDER
from .errors import InvalidLayoutError
from .specs import Cluster, Layout, Placement

OUTER_FIRST = ("dp", "pp")  # these prefer the outer, slower axes (DCN, scale-out)


def _divisors_desc(n: int) -> list[int]:
    return [d for d in range(n, 0, -1) if n % d == 0]


def default_axes(cluster: Cluster, layout: Layout) -> tuple[tuple[str, Placement], ...]:
    """A greedy exact placement: tp, cp, fsdp fill the fast inner axes; dp and pp the outer ones.

    On a torus the inner axis is the last one (z), so `fsdp=1024,tp=8` on 16x16x32 gives
    tp on z(8) and fsdp on z(4) x y(16) x x(16).
    """
    inner_first = list(reversed(cluster.axes)) if cluster.accelerator.kind == "tpu" else list(cluster.axes)
    inner_first.sort(key=lambda a: a.kind in ("dcn", "scale_out"))
    room = {a.name: a.size for a in cluster.axes}

    def place(i: int) -> list[tuple[str, Placement]] | None:
        if i == len(NESTING_ORDER):
            return [] if all(v == 1 for v in room.values()) else None
        name = NESTING_ORDER[i]
        order = list(reversed(inner_first)) if name in OUTER_FIRST else inner_first
        for placed in _factorings(layout.degrees[name], order, room):
            for axis, f in placed:
                room[axis] //= f
            rest = place(i + 1)
            for axis, f in placed:
                room[axis] *= f
            if rest is not None:
                return ([(name, tuple(placed))] if placed else []) + rest
        return None

    result = place(0)
    if result is None:
        shape = " x ".join(f"{a.name}({a.size})" for a in cluster.axes)
        raise InvalidLayoutError(f"degrees {layout.degrees} cannot be laid onto the axes {shape} of {cluster.name}")
    return tuple(result)


def _factorings(n: int, order: list, room: dict[str, int]):
    """Ways to split n over the axes in ``order`` (largest factor first on earlier axes)."""
    if n == 1:
        yield []
        return
    if not order:
        return
    axis, rest = order[0], order[1:]
    for f in _divisors_desc(n):
        if room[axis.name] % f:
            continue
        for tail in _factorings(n // f, rest, room):
            yield ([(axis.name, f)] if f > 1 else []) + tail
