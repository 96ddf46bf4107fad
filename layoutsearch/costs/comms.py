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
from functools import lru_cache

import numpy as np

from layoutsearch.core.placement import NESTING_ORDER
from layoutsearch.core.specs import Axis, Cluster, Layout
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
    placed = {name: dict(p) for name, p in layout.axes}
    parts = []
    for axis in cluster.axes:
        stride, factor, found_stride = 1, 1, None
        for name in NESTING_ORDER:
            f = placed.get(name, {}).get(axis.name, 1)
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


def message_efficiency(bytes_per_member, half_efficiency_bytes: float):
    """Achieved fraction of bandwidth for a message: x / (x + x_half) (small messages are slow)."""
    if half_efficiency_bytes <= 0:
        return 1.0
    return bytes_per_member / (bytes_per_member + half_efficiency_bytes)


@dataclass(frozen=True, slots=True)
class RingCoefficients:
    """A group's collective cost as an affine function of the array size A (bytes).

    With the message efficiency x / (x + h) on the per-member chunk x = A/n, the time at
    level l is A (n_l - 1) / (n_l inner_l W_l eff) = (A + h n) c_l, so an AllGather takes
    (A + h n) max_l c_l + latency: ``seconds_per_byte`` is max_l c_l.
    """

    members: int
    seconds_per_byte: float
    latency_s: float


def _levels(span: Span):
    """Per network level (ICI/NVLink, then DCN/scale-out): (members, seconds per byte of an
    AllGather at that level, whether it is a torus)."""
    inner = 1
    for level in (0, 1):
        parts = [p for p in span if LEVEL_OF_KIND[p.axis.kind] == level]
        if parts:
            n_l = math.prod(p.factor for p in parts)
            yield n_l, (n_l - 1) / n_l / (inner * sum(ring_bandwidth(p) for p in parts)), \
                any(p.axis.kind == "torus" for p in parts)
            inner *= n_l


@lru_cache(maxsize=65536)
def ring_coefficients(span: Span) -> RingCoefficients:
    """Reduce a span to its AllGather coefficients: the slowest level's seconds per byte."""
    n = span_size(span)
    if n <= 1:
        return RingCoefficients(members=1, seconds_per_byte=0.0, latency_s=0.0)
    return RingCoefficients(members=n, seconds_per_byte=max(c for _, c, _ in _levels(span)),
                            latency_s=span_latency(span))


def span_latency(span: Span) -> float:
    """Latency of one ring collective: per-axis hops on a torus (the axes run in parallel); on
    switched networks NCCL's ring passes every member, n - 1 steps at the slowest link's latency."""
    torus = sum(ring_latency(p) for p in span if p.axis.kind == "torus")
    other = [p for p in span if p.axis.kind != "torus"]
    if not other:
        return torus
    return torus + (math.prod(p.factor for p in other) - 1) * max(p.axis.latency_s for p in other)


def ring_time(array_bytes, coeffs: RingCoefficients, half_efficiency_bytes: float = 0.0):
    """AllGather (or ReduceScatter) seconds of ``array_bytes``; numbers or numpy arrays (also in coeffs)."""
    active = np.asarray(coeffs.members) > 1
    seconds = (array_bytes + half_efficiency_bytes * coeffs.members) * coeffs.seconds_per_byte + coeffs.latency_s
    return np.where(active, seconds, 0.0) if np.ndim(seconds) or np.ndim(active) else (seconds if active else 0.0)


def all_gather_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """Seconds to AllGather an array of ``array_bytes`` (the full result) over ``span``."""
    return ring_time(array_bytes, ring_coefficients(span), half_efficiency_bytes)


def reduce_scatter_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """ReduceScatter of an array of ``array_bytes`` (the full input): the AllGather's mirror."""
    return all_gather_time(array_bytes, span, half_efficiency_bytes)


def all_reduce_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """AllReduce = ReduceScatter + AllGather."""
    return 2.0 * all_gather_time(array_bytes, span, half_efficiency_bytes)


def all_to_all_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """AllToAll of an array of ``array_bytes`` (all members' data together): per level, 1/4 of an
    AllGather on a bidirectional ring (book, "AllToAll"), 1/n of it through a switch."""
    n = span_size(span)
    if n <= 1:
        return 0.0 * array_bytes
    per_byte = max(c / 4.0 if torus else c / n_l for n_l, c, torus in _levels(span))
    return (array_bytes + half_efficiency_bytes * n) * per_byte + span_latency(span)


def send_coefficients(span: Span) -> RingCoefficients:
    """Point-to-point to the neighbour along the innermost spanned axis, as (seconds per byte, latency)."""
    if not span:
        return RingCoefficients(members=1, seconds_per_byte=0.0, latency_s=0.0)
    part = span[0]
    axis = part.axis
    link = axis.bytes_per_s_per_direction * axis.efficiency / (part.stride if axis.kind == "torus" else 1)
    return RingCoefficients(members=2, seconds_per_byte=1.0 / link, latency_s=axis.latency_s)


def send_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """Point-to-point send of ``array_bytes``: (A + h) / link + latency (message efficiency on A)."""
    coeffs = send_coefficients(span)
    if not span:
        return 0.0 * array_bytes
    return (array_bytes + half_efficiency_bytes) * coeffs.seconds_per_byte + coeffs.latency_s


def ici_bandwidth_bytes_per_s(link_bytes_per_s_per_direction: float, num_axes: int, wraparound: bool = True) -> float:
    """W of the book: bidirectional bandwidth of a torus axis (2 x one-way link), times the axes used."""
    return num_axes * link_bytes_per_s_per_direction * (2.0 if wraparound else 1.0)
