"""Collective times on the physical axes a group spans (COSTS.md "Communication").

Sources: scaling-book "Sharded matrices" and "TPUs" chapters (a ring AllGather moves
A (n-1)/n bytes through each device; a torus axis with wraparound is a bidirectional ring of
twice the one-way link bandwidth, without wraparound collectives take about twice as long;
the bandwidths of the axes a group spans add; AllToAll on a bidirectional ring costs 1/4 of
an AllGather) and "GPUs" chapter (NVLink inside a node, then the node's NICs: the precise form
is the maximum over network levels of A (n_l - 1) / (n_l x inner x W_l)).

A group that spans only part of an axis: members are ``stride`` devices apart (the factors of
more inner degrees on that axis, in ``NESTING_ORDER``). Interleaved groups share the links
between them, so each gets the link bandwidth / stride; the ring closes through the
wraparound only when the group reaches the whole axis (factor x stride = axis size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs import Axis, Cluster, Layout

NESTING_ORDER = ("tp", "cp", "fsdp", "dp", "pp")  # inner to outer on a shared axis (Megatron: tp-cp-dp-pp)
LEVEL_OF_KIND = {"torus": 0, "switch": 0, "scale_out": 1, "dcn": 1}


@dataclass(frozen=True, slots=True)
class SpanPart:
    """A group's extent on one axis: ``factor`` members, ``stride`` devices apart."""

    axis: Axis
    factor: int
    stride: int


Span = tuple[SpanPart, ...]


def group_span(cluster: Cluster, layout: Layout, degrees: tuple[str, ...]) -> Span:
    """The parts of the physical axes spanned by the group of ``degrees`` (e.g. ('fsdp', 'cp'))."""
    parts = []
    for axis in cluster.axes:
        stride, factor, found_stride = 1, 1, None
        for name in NESTING_ORDER:
            f = dict(layout.placement(name)).get(axis.name, 1)
            if name in degrees and f > 1:
                factor *= f
                found_stride = stride if found_stride is None else found_stride
            elif found_stride is None:
                stride *= f
        if factor > 1:
            parts.append(SpanPart(axis=axis, factor=factor, stride=found_stride))
    return tuple(parts)


def span_size(span: Span) -> int:
    return math.prod(p.factor for p in span)


def ring_bandwidth(part: SpanPart) -> float:
    """Bytes/s one member moves along this part of a ring (both directions when it wraps)."""
    axis = part.axis
    if axis.kind != "torus":
        return axis.bytes_per_s_per_direction * axis.efficiency
    wraps = axis.wraparound and part.factor * part.stride == axis.size and part.factor > 2
    return axis.bytes_per_s_per_direction * (2.0 if wraps else 1.0) / part.stride * axis.efficiency


def ring_latency(part: SpanPart) -> float:
    """Per-hop latency times the steps of a ring over this part (half with wraparound)."""
    axis = part.axis
    wraps = axis.kind == "torus" and axis.wraparound and part.factor * part.stride == axis.size
    steps = part.factor // 2 if wraps else part.factor - 1
    return steps * axis.latency_s


def message_efficiency(bytes_per_member: float, half_efficiency_bytes: float) -> float:
    """Achieved fraction of bandwidth for a message: x / (x + x_half) (small messages are slow)."""
    if half_efficiency_bytes <= 0:
        return 1.0
    return bytes_per_member / (bytes_per_member + half_efficiency_bytes)


def _level_terms(array_bytes: float, span: Span, half_efficiency_bytes: float) -> list[tuple[int, float]]:
    """Per network level (inner first): (members at this level, seconds of bandwidth time)."""
    n = span_size(span)
    eff = message_efficiency(array_bytes / max(n, 1), half_efficiency_bytes)
    terms, inner = [], 1
    for level in (0, 1):
        parts = [p for p in span if LEVEL_OF_KIND[p.axis.kind] == level]
        if not parts:
            continue
        n_l = math.prod(p.factor for p in parts)
        bandwidth = sum(ring_bandwidth(p) for p in parts) * eff
        terms.append((n_l, array_bytes * (n_l - 1) / n_l / (inner * bandwidth)))
        inner *= n_l
    return terms


def all_gather_time(array_bytes: float, span: Span, half_efficiency_bytes: float = 0.0) -> float:
    """Seconds to AllGather an array of ``array_bytes`` (the full result) over ``span``."""
    if span_size(span) <= 1 or array_bytes <= 0:
        return 0.0
    bandwidth = max(t for _, t in _level_terms(array_bytes, span, half_efficiency_bytes))
    return bandwidth + sum(ring_latency(p) for p in span)


def reduce_scatter_time(array_bytes: float, span: Span, half_efficiency_bytes: float = 0.0) -> float:
    """ReduceScatter of an array of ``array_bytes`` (the full input): the AllGather's mirror."""
    return all_gather_time(array_bytes, span, half_efficiency_bytes)


def all_reduce_time(array_bytes: float, span: Span, half_efficiency_bytes: float = 0.0) -> float:
    """AllReduce = ReduceScatter + AllGather."""
    return 2.0 * all_gather_time(array_bytes, span, half_efficiency_bytes)


def all_to_all_time(array_bytes: float, span: Span, half_efficiency_bytes: float = 0.0) -> float:
    """AllToAll: 1/4 of an AllGather on a bidirectional ring (book); 1/n of it through a switch."""
    if span_size(span) <= 1 or array_bytes <= 0:
        return 0.0
    terms = _level_terms(array_bytes, span, half_efficiency_bytes)
    kinds = [p.axis.kind for p in span]
    scaled = [t / 4.0 if "torus" in kinds and i == 0 else t / n for i, (n, t) in enumerate(terms)]
    return max(scaled) + sum(ring_latency(p) for p in span)


def send_time(array_bytes: float, span: Span, half_efficiency_bytes: float = 0.0) -> float:
    """Point-to-point send of ``array_bytes`` to the neighbour along the innermost spanned axis."""
    if not span or array_bytes <= 0:
        return 0.0
    part = span[0]
    axis = part.axis
    link = axis.bytes_per_s_per_direction * axis.efficiency / (part.stride if axis.kind == "torus" else 1)
    return array_bytes / (link * message_efficiency(array_bytes, half_efficiency_bytes)) + axis.latency_s


def ici_bandwidth_bytes_per_s(link_bytes_per_s_per_direction: float, num_axes: int, wraparound: bool = True) -> float:
    """W of the book: bidirectional bandwidth of a torus axis (2 x one-way link), times the axes used."""
    return num_axes * link_bytes_per_s_per_direction * (2.0 if wraparound else 1.0)
