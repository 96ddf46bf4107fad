"""Collective times on the physical axes a group spans (docs/cost_model.md "Communication").

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

from layoutsearch.core.arrays import BoolArray, FloatArray, IntArray, distinct_rows
from layoutsearch.core.placement import EXPERT_NESTING, NESTING_ORDER, expert_degrees
from layoutsearch.core.specs import Axis, Cluster, Layout

LEVEL_OF_KIND = {"torus": 0, "switch": 0, "mesh": 0, "scale_out": 1, "dcn": 1}


@dataclass(frozen=True, slots=True)
class SpanPart:
    """A group's extent on one axis: ``factor`` members, ``stride`` devices apart."""

    axis: Axis
    factor: int
    stride: int


Span = tuple[SpanPart, ...]


@dataclass(frozen=True)
class Spans:
    """The extents of one group on each axis of ``axes``, for many rows at once (a search's
    candidates, or one layout): ``factor`` members, ``stride`` devices apart, int arrays
    [rows, axes] (factor 1 where the group does not span an axis). The array form of ``Span``."""

    axes: tuple[Axis, ...]
    factor: np.ndarray
    stride: np.ndarray

    @classmethod
    def of(cls, span: Span) -> Spans:
        return cls(
            axes=tuple(p.axis for p in span),
            factor=np.array([[p.factor for p in span]], dtype=np.int64),
            stride=np.array([[p.stride for p in span]], dtype=np.int64),
        )


def spans_from_factors(
    axes: tuple[Axis, ...],
    table: np.ndarray,
    degrees: tuple[str, ...],
    nesting: tuple[str, ...] = NESTING_ORDER,
) -> Spans:
    """The group of ``degrees`` from a factor table [rows, axes, degree in ``nesting``]: on each
    axis its factor is the product of its degrees' factors, its stride the product of the factors
    of the degrees nested inside it up to the first of its own."""
    rows = table.shape[0]
    factor = np.ones((rows, len(axes)), dtype=np.int64)
    stride = np.ones_like(factor)
    found = np.zeros(factor.shape, dtype=bool)
    for i, name in enumerate(nesting):
        f = table[:, :, i]
        if name in degrees:
            factor = factor * f
            found |= f > 1
        else:
            stride = np.where(found, stride, stride * f)
    return Spans(axes=axes, factor=factor, stride=np.where(factor > 1, stride, 1))


def group_span(cluster: Cluster, layout: Layout, degrees: tuple[str, ...]) -> Span:
    """The parts of the physical axes spanned by the group of ``degrees`` (e.g. ('fsdp', 'cp'))."""
    s = spans_from_factors(cluster.axes, factor_table(cluster, layout.axes)[None], degrees)
    return tuple(
        SpanPart(axis=a, factor=int(f), stride=int(st))
        for a, f, st in zip(s.axes, s.factor[0], s.stride[0])
        if f > 1
    )


def factor_table(cluster: Cluster, axes) -> np.ndarray:
    """[axis, degree in NESTING_ORDER]: the factor of each degree on each axis of a placement."""
    placed = {name: dict(p) for name, p in axes or ()}
    return np.array(
        [
            [placed.get(name, {}).get(axis.name, 1) for name in NESTING_ORDER]
            for axis in cluster.axes
        ],
        dtype=np.int64,
    ).reshape(len(cluster.axes), len(NESTING_ORDER))


def expert_factor_table(cluster: Cluster, layout: Layout) -> np.ndarray:
    """[axis, degree in EXPERT_NESTING] of a placed layout: etp and ep where it places them, pp as
    the dense placement has it, the replicas (dp's factors where ``expert_degrees`` makes dp the
    replicas) and the expert shard group in what remains of each axis."""
    placed = {name: dict(p) for name, p in layout.axes or ()}
    fits = bool(expert_degrees(layout.all_degrees)["edpr"] == layout.dp)
    rows = []
    for axis in cluster.axes:
        etp, ep, pp = (placed.get(n, {}).get(axis.name, 1) for n in ("etp", "ep", "pp"))
        rest = max(axis.size // (etp * ep * pp), 1)
        dp = placed.get("dp", {}).get(axis.name, 1) if fits else rest
        dp = math.gcd(dp, rest)
        rows.append([etp, ep, rest // dp, dp, pp])
    return np.array(rows, dtype=np.int64).reshape(len(cluster.axes), len(EXPERT_NESTING))


def span_size(span: Span) -> int:
    return math.prod(p.factor for p in span)


def _axis_constants(axes: tuple[Axis, ...]) -> dict[str, np.ndarray]:
    return {
        "torus": np.array([a.kind == "torus" for a in axes], dtype=bool),
        "mesh": np.array([a.kind == "mesh" for a in axes], dtype=bool),
        "level": np.array([LEVEL_OF_KIND[a.kind] for a in axes], dtype=np.int64),
        "size": np.array([a.size for a in axes], dtype=np.int64),
        "wrap": np.array([a.wraparound for a in axes], dtype=bool),
        "bw": np.array(
            [a.bytes_per_s_per_direction * a.efficiency for a in axes], dtype=np.float64
        ),
        "latency": np.array([a.latency_s for a in axes], dtype=np.float64),
        "pod": np.array([a.pod_size for a in axes], dtype=np.int64),
        "oversubscription": np.array([a.oversubscription for a in axes], dtype=np.float64),
        "pod_latency": np.array([a.pod_latency_s for a in axes], dtype=np.float64),
    }


def leaves_pod(s: Spans, c: dict) -> np.ndarray:
    """Whether each row's group leaves a pod on each axis (its aligned block of factor x stride
    positions is larger than a pod or does not tile it), [rows, axes]; False without pods."""
    pod = c["pod"][None, :]
    span = s.factor * s.stride  # positions one group reaches; aligned blocks stay in one pod
    return (pod > 0) & (s.factor > 1) & ((span > pod) | (pod % np.maximum(span, 1) != 0))


def step_latency(s: Spans, c: dict) -> np.ndarray:
    """Seconds per step on each axis, [rows, axes]: the axis's latency, plus the pod tier's (a WAN)
    where the group leaves its pod (``leaves_pod``)."""
    if not c["pod_latency"].any():  # no WAN tier (every named cluster)
        return np.broadcast_to(c["latency"][None, :], s.factor.shape)
    return c["latency"][None, :] + np.where(leaves_pod(s, c), c["pod_latency"][None, :], 0.0)


def uplink_share(s: Spans, c: dict, all_to_all: bool = False) -> np.ndarray:
    """The share of its NIC bandwidth a member keeps on each axis when its group crosses the pods
    of an oversubscribed fat tree (1 elsewhere), [rows, axes]. A pod of P positions has uplinks of
    P NICs' bandwidth / R. A ring leaves a pod once per group: the min(stride, P) groups
    interleaved in a pod share the uplinks, each keeps min(1, P / (R min(stride, P))). An AllToAll
    sends the share x = 1 - (its members in the pod) / factor of every member's buffer out of the
    pod: all P positions at once, each keeps 1 / max(1, x R) (Leiserson 1985; the 2:1 and 4:1
    trees of docs/cost_model.md "Oversubscribed fat trees")."""
    if not c["pod"].any():  # no oversubscribed tier (every named cluster)
        return np.ones(s.factor.shape)
    pod, ratio = c["pod"][None, :], c["oversubscription"][None, :]
    crossing = leaves_pod(s, c)
    if not crossing.any():
        return np.ones(s.factor.shape)
    safe_pod = np.maximum(pod, 1)
    if all_to_all:
        in_pod = np.clip(safe_pod // s.stride, 1, s.factor)
        share = 1.0 / np.maximum(1.0, (1.0 - in_pod / s.factor) * ratio)
    else:
        share = np.minimum(1.0, safe_pod / (ratio * np.minimum(s.stride, safe_pod)))
    return np.where(crossing, share, 1.0)


def ring_bandwidth(s: Spans, all_to_all: bool = False) -> np.ndarray:
    """Bytes/s one member moves along each axis of a ring (both directions when it closes
    through a torus axis's wraparound: the group reaches the whole axis with more than 2
    members; interleaved groups share the links between them, each gets 1/stride). On a full
    mesh a member of a group of k has a link to each of the k - 1 others (the collective's rings
    use them all; other groups use other links). Across the pods of an oversubscribed fat tree,
    the share of the uplinks it keeps (``uplink_share``; ``all_to_all``: for an AllToAll)."""
    c = _axis_constants(s.axes)
    wraps = c["torus"] & c["wrap"] & (s.factor * s.stride == c["size"]) & (s.factor > 2)
    torus = c["bw"] * np.where(wraps, 2.0, 1.0) / s.stride
    mesh = c["bw"] * np.maximum(s.factor - 1, 1)
    switched = c["bw"] * uplink_share(s, c, all_to_all)
    return np.where(c["torus"], torus, np.where(c["mesh"], mesh, switched))


def _levels(s: Spans, all_to_all: bool = False):
    """Per network level (ICI/NVLink, then DCN/scale-out): (members, seconds per byte of an
    AllGather at that level, whether a torus axis is in it), arrays over rows."""
    c, bw, inner = (
        _axis_constants(s.axes),
        ring_bandwidth(s, all_to_all),
        np.ones(s.factor.shape[0]),
    )
    for level in (0, 1):
        on = (c["level"] == level)[None, :] & (s.factor > 1)
        n_l = np.where(on, s.factor, 1).prod(axis=1)
        total_bw = np.where(on, bw, 0.0).sum(axis=1)
        per_byte = np.where(
            n_l > 1, (n_l - 1) / n_l / (inner * np.where(total_bw > 0, total_bw, 1.0)), 0.0
        )
        yield n_l, per_byte, (on & c["torus"][None, :]).any(axis=1)
        inner = inner * n_l


def span_latency(s: Spans) -> np.ndarray:
    """Latency of one ring collective: per-axis hops on a torus (the axes run in parallel, half
    the hops with wraparound); on switched networks NCCL's ring passes every member, n - 1
    steps at the slowest link's latency."""
    c, on = _axis_constants(s.axes), s.factor > 1
    wraps = c["torus"] & c["wrap"] & (s.factor * s.stride == c["size"])
    steps = np.where(wraps, s.factor // 2, s.factor - 1)
    latency = step_latency(s, c)
    torus = np.where(on & c["torus"], steps * latency, 0.0).sum(axis=1)
    other = on & ~c["torus"]
    members = np.where(other, s.factor, 1).prod(axis=1)
    return torus + (members - 1) * np.where(other, latency, 0.0).max(axis=1, initial=0.0)


@dataclass(frozen=True, slots=True)
class RingCoefficients:
    """A group's collective cost as an affine function of the array size A (bytes).

    With the message efficiency x / (x + h) on the per-member chunk x = A/n, the time at
    level l is A (n_l - 1) / (n_l inner_l W_l eff) = (A + h n) c_l, so an AllGather takes
    (A + h n) max_l c_l + latency: ``seconds_per_byte`` is max_l c_l. ``scale_out`` is whether
    it crosses a scale-out or DCN axis. Numbers, or arrays with one entry per row.
    """

    members: IntArray
    seconds_per_byte: FloatArray
    latency_s: FloatArray
    scale_out: BoolArray = False

    def row(self, i: int = 0) -> RingCoefficients:
        return RingCoefficients(
            members=int(np.asarray(self.members)[i]),
            seconds_per_byte=float(np.asarray(self.seconds_per_byte)[i]),
            latency_s=float(np.asarray(self.latency_s)[i]),
            scale_out=bool(np.asarray(self.scale_out)[i]),
        )

    def take(self, rows) -> RingCoefficients:
        """The coefficients of the given rows (arrays)."""
        return RingCoefficients(**{f: np.asarray(getattr(self, f))[rows] for f in RING_FIELDS})


RING_FIELDS = ("members", "seconds_per_byte", "latency_s", "scale_out")


def _scale_out(s: Spans, on: np.ndarray):
    """Whether each row's group spans (``on``) a scale-out or DCN axis."""
    return (on & (_axis_constants(s.axes)["level"] == 1)[None, :]).any(axis=1)


# ----------------------------------------------------------------------------- links and contention
LinkColumn = tuple[int, str, int]  # (axis index, 'port' | 'mesh' | 'uplink', digit)


@lru_cache(maxsize=256)
def link_columns(axes: tuple[Axis, ...]) -> tuple[LinkColumn, ...]:
    """The link classes of a cluster's axes, the columns of ``link_use_of``: per axis a device's links
    on it ('port': a torus axis's links, an NVLink switch port, a NIC, a chip's DCN link); on a full
    mesh (``mesh_graph``) one class per digit d (a divisor of the axis size below it) instead: a
    group of ``factor`` members ``stride`` apart reaches its peers over the links of the digits d
    with stride <= d < stride x factor, so groups of different degrees use disjoint links; where
    the axis has pods (an oversubscribed fat tree, two sites) the pods' uplinks ('uplink')."""
    columns: list[LinkColumn] = []
    for i, axis in enumerate(axes):
        if axis.kind == "mesh":
            columns += [(i, "mesh", d) for d in range(1, axis.size) if axis.size % d == 0]
        else:
            columns.append((i, "port", 0))
        if axis.pod_size:
            columns.append((i, "uplink", 0))
    return tuple(columns)


def link_use_of(s: Spans) -> np.ndarray:
    """The share of each link class's capacity (``link_columns``) a row's ring collective keeps
    busy while it runs, [rows, columns], as its routes load the links: every link of a torus axis
    it spans (interleaved groups take 1/stride each, all of them together the whole link), its
    switch port, DCN link or mesh links at 1; its NIC at the share of the uplinks it keeps across
    oversubscribed pods (``uplink_share``), and those uplinks at the crossing groups' rate over
    their capacity, min(1, R min(stride, P) / P). A level that is not the slowest runs the same
    bytes in less time: its links are busy its seconds per byte over the slowest level's."""
    c = _axis_constants(s.axes)
    columns = link_columns(s.axes)
    on = s.factor > 1
    busy = on.astype(np.float64)  # [rows, axes]: the busy share of the axis's level
    if len(set(c["level"].tolist())) > 1:
        per_level = [per_byte for _, per_byte, _ in _levels(s)]
        slowest = np.maximum(*per_level)
        safe = np.where(slowest > 0, slowest, 1.0)
        busy *= np.stack([p / safe for p in per_level], axis=1)[:, c["level"]]
    if len(columns) == len(s.axes):  # one class per axis, no pods: its ports
        return busy
    share = uplink_share(s, c)
    pod, ratio = np.maximum(c["pod"], 1)[None, :], c["oversubscription"][None, :]
    uplink = leaves_pod(s, c) * np.minimum(1.0, ratio * np.minimum(s.stride, pod) / pod)
    use = []
    for i, kind, d in columns:
        if kind == "port":
            u = share[:, i]
        elif kind == "mesh":
            u = (s.stride[:, i] <= d) & (d < s.stride[:, i] * s.factor[:, i])
        else:
            u = uplink[:, i]
        use.append(u * busy[:, i])
    return np.stack(use, axis=1).astype(np.float64) if use else np.zeros((len(on), 0))


@dataclass(frozen=True, slots=True)
class Contention:
    """Where collectives running beside a collective b can delay it, per row (a placement): on each
    of K link classes (slots) that b uses and one of them loads, ``use[k][g]`` the share of the class
    beside-group g keeps busy and ``spare[k]`` the share b leaves free (1 - its own use; None: not
    credited), arrays with one entry per row; a row's unused slots are zeros, and a class that
    another of the row dominates (no less use by each group, no more spare) is left out.
    ``contention_s`` gives the seconds. One array per slot and group: taking rows is a plain gather."""

    use: tuple[tuple[np.ndarray, ...], ...]
    spare: tuple[np.ndarray, ...] | None

    def take(self, rows) -> Contention:
        """The rows given (an index array of any shape)."""
        return Contention(
            use=tuple(tuple(u[rows] for u in slot) for slot in self.use),
            spare=None if self.spare is None else tuple(s[rows] for s in self.spare),
        )

    @staticmethod
    def stack(items: list[Contention]) -> Contention:
        """One Contention over (row, item) pairs, index row x len(items) + item (alike items:
        all crediting b's spare capacity or none)."""
        k = max(len(c.use) for c in items)
        credit = items[0].spare is not None
        if not k:
            return Contention(use=(), spare=() if credit else None)
        groups = len(next(c.use[0] for c in items if c.use))
        rows = len(next(c.use[0][0] for c in items if c.use))  # every item has as many

        def interleave(arrays: list[np.ndarray | None]) -> np.ndarray:
            columns = [np.zeros(rows) if a is None else a for a in arrays]
            return np.stack(columns, axis=1).reshape(-1)

        def at(c: Contention, slot: int, g: int | None):
            if slot >= len(c.use):
                return None
            return c.use[slot][g] if g is not None else c.spare[slot]  # type: ignore[index]

        return Contention(
            use=tuple(
                tuple(interleave([at(c, i, g) for c in items]) for g in range(groups))
                for i in range(k)
            ),
            spare=tuple(interleave([at(c, i, None) for c in items]) for i in range(k))
            if credit
            else None,
        )


def contention_of(beside: list[np.ndarray], b: np.ndarray, credit_spare: bool = True) -> Contention:
    """The ``Contention`` of collective b beside the collectives ``beside``, from their link use
    (``link_use_of``: [rows, link classes] each); without ``credit_spare`` b's own spare capacity on
    a class is not counted (an upper bound on the delay)."""
    kept = b > 0
    loaded = np.zeros(b.shape, dtype=bool)
    for use in beside:
        loaded |= use > 0
    kept &= loaded
    spare = (1.0 - b) if credit_spare else np.zeros(b.shape)
    # leave out a class another of the row covers (no less use by each group, no more spare); of
    # two alike the first is kept. Pairwise over the classes some row keeps: a handful at most
    classes = np.flatnonzero(kept.any(axis=0)).tolist()
    if len(classes) > 1:
        columns = [np.ascontiguousarray(x.T) for x in (kept, spare, *beside)]
        k_col, s_col, u_col = columns[0], columns[1], columns[2:]
        dropped = np.zeros(k_col.shape, dtype=bool)
        for i in classes:
            for j in classes:
                if i == j:
                    continue
                covers = k_col[j] & (s_col[j] <= s_col[i])
                alike = s_col[j] == s_col[i]
                for u in u_col:
                    covers &= u[j] >= u[i]
                    alike &= u[j] == u[i]
                dropped[i] |= covers & (~alike if j > i else True)
        kept &= ~dropped.T
    slot = np.cumsum(kept, axis=1) - 1  # the kept classes of a row fill its first slots
    k = int(slot[:, -1].max(initial=-1)) + 1 if b.shape[1] else 0
    at = [kept & (slot == i) for i in range(k)]  # [rows, classes]: the class in each slot
    return Contention(
        use=tuple(tuple(np.where(on, use, 0.0).sum(axis=1) for use in beside) for on in at),
        spare=tuple(np.where(on, spare, 0.0).sum(axis=1) for on in at) if credit_spare else None,
    )


def contention_s(c: Contention, seconds: tuple, b_seconds=0.0):
    """Seconds the collectives of ``c`` (``seconds``: each one's, in its order) delay b (``b_seconds``
    alone): each link serves its loads in turn, so a link class b uses is busy for the others' use
    x seconds and b's, and b finishes the heaviest class's total after it would alone:
    max(0, max over the classes of sum_a u_a t_a - (1 - u_b) t_b) (docs/cost_model.md "Shared
    links"). Rows as the Contention's (numbers or arrays that broadcast to them)."""
    delay = 0.0
    for k, use in enumerate(c.use):
        extra = sum(u * t for u, t in zip(use, seconds, strict=True))
        if c.spare is not None:
            extra = extra - c.spare[k] * b_seconds
        delay = np.maximum(delay, extra)
    return delay


def ring_coefficients_of(s: Spans) -> RingCoefficients:
    """AllGather coefficients of every row's group: the slowest level's seconds per byte."""
    members = s.factor.prod(axis=1)
    per_byte = np.max(np.stack([c for _, c, _ in _levels(s)]), axis=0)
    active = members > 1
    return RingCoefficients(
        members=members,
        seconds_per_byte=np.where(active, per_byte, 0.0),
        latency_s=np.where(active, span_latency(s), 0.0),
        scale_out=_scale_out(s, s.factor > 1),
    )


def pod_hop_share(s: Spans, c: dict) -> np.ndarray:
    """The share of a pipeline's factor - 1 neighbour hops that leave a pod, [rows, axes]: an
    aligned block of factor x stride positions over whole pods crosses factor x stride / P - 1 pod
    boundaries (every hop when the stride is a pod or more); a block that leaves its pod without
    tiling the pods counts every hop; 0 inside a pod."""
    leaves = leaves_pod(s, c)
    if not leaves.any():
        return np.zeros(s.factor.shape)
    pod = np.maximum(c["pod"][None, :], 1)
    span, hops = s.factor * s.stride, np.maximum(s.factor - 1, 1)
    crossings = np.minimum(span // pod - 1, hops)
    return np.where(leaves & (span % pod == 0), crossings / hops, np.where(leaves, 1.0, 0.0))


def send_coefficients_of(s: Spans) -> RingCoefficients:
    """Point-to-point to the neighbour along the innermost spanned axis (pipeline sends), the mean
    over the pipeline's hops: those that leave a pod (``pod_hop_share``) at the share of the
    uplinks a ring keeps (``uplink_share``) and the pod tier's latency on top, the others at the link."""
    c = _axis_constants(s.axes)
    on = s.factor > 1
    first = np.argmax(on, axis=1)
    rows = np.arange(len(first))
    active = on.any(axis=1)
    link = np.where(
        active, c["bw"][first] / np.where(c["torus"][first], s.stride[rows, first], 1), 1.0
    )
    crossing = pod_hop_share(s, c)[rows, first]
    share = uplink_share(s, c)[rows, first]
    per_byte = np.where(
        crossing > 0, (1.0 - crossing) / link + crossing / (link * share), 1.0 / link
    )
    used = on & (np.arange(on.shape[1])[None, :] == first[:, None])
    return RingCoefficients(
        members=np.where(active, 2, 1),
        seconds_per_byte=np.where(active, per_byte, 0.0),
        latency_s=np.where(active, c["latency"][first] + crossing * c["pod_latency"][first], 0.0),
        scale_out=_scale_out(s, used),
    )


def per_distinct_span(fn, s: Spans, *args) -> RingCoefficients:
    """``fn(s, *args)`` of a row-wise coefficient function, computed once per distinct row of the
    spans (factor and stride: many candidates place a group alike) and spread back to every row."""
    if s.factor.shape[0] <= 1:
        return fn(s, *args)
    first, inverse = distinct_rows(np.concatenate([s.factor, s.stride], axis=1))
    distinct = Spans(axes=s.axes, factor=s.factor[first], stride=s.stride[first])
    return fn(distinct, *args).take(inverse)


def all_to_all_coefficients_of(s: Spans, level: int | None = None) -> RingCoefficients:
    """AllToAll coefficients of every row's group, per byte one member sends (its whole buffer,
    the share kept local included): per level, n/4 of the AllGather's seconds per byte of the
    whole array on a torus ring (book, "AllToAll"); through a switch each member's NIC or NVLink
    port carries the share of its buffer bound for members reached over that level; the slowest level; one
    round trip of the slowest spanned link's latency per level (the messages go out at once).
    Per member: the share of its buffer that leaves over each level's links, at its bandwidth.
    With ``level`` (0: NVLink / ICI, 1: scale-out / DCN) only that level's seconds per byte, and
    ``members`` the members it spans at that level (nodes, for level 1)."""
    members = s.factor.prod(axis=1)
    c = _axis_constants(s.axes)
    per_level, counts, inner = [], [], np.ones(len(members))
    for n_l, cost, torus in _levels(s, all_to_all=True):
        # cost = (n_l - 1) / (n_l inner W_l): through a switch the share (n_l - 1) inner / members of
        # the buffer leaves over the level's links, at W_l per member
        switch = cost * n_l * inner * inner / np.maximum(members, 1)
        per_level.append(np.where(torus, cost * members / 4.0, switch))
        counts.append(n_l)
        inner = inner * n_l
    per_byte = np.max(np.stack(per_level), axis=0) if level is None else per_level[level]
    if level is not None:
        members = counts[level]
    on = s.factor > 1
    step = step_latency(s, c)
    latency = sum(
        np.where(on & (c["level"] == level)[None, :], step, 0.0).max(axis=1, initial=0.0)
        for level in (0, 1)
    )
    active = members > 1
    return RingCoefficients(
        members=members,
        seconds_per_byte=np.where(active, per_byte, 0.0),
        latency_s=np.where(active, latency, 0.0),
        scale_out=_scale_out(s, on),
    )


def replica_spans(s: Spans, replicas: np.ndarray) -> Spans:
    """The innermost ``replicas`` members of each row's group (e.g. the TP ranks sharing a KV head)."""
    left = np.asarray(replicas, dtype=np.int64).copy()
    factor = np.ones_like(s.factor)
    for a in range(s.factor.shape[1]):
        f = np.gcd(left, s.factor[:, a])
        factor[:, a] = f
        left //= f
    return Spans(axes=s.axes, factor=factor, stride=np.where(factor > 1, s.stride, 1))


@lru_cache(maxsize=65536)
def ring_coefficients(span: Span) -> RingCoefficients:
    """``ring_coefficients_of`` for one span."""
    if not span:
        return RingCoefficients(members=1, seconds_per_byte=0.0, latency_s=0.0)
    return ring_coefficients_of(Spans.of(span)).row()


def ring_time(array_bytes, coeffs: RingCoefficients, half_efficiency_bytes: float = 0.0):
    """AllGather (or ReduceScatter) seconds of ``array_bytes``; numbers or numpy arrays (also in coeffs)."""
    active = np.asarray(coeffs.members) > 1
    seconds = (
        array_bytes + half_efficiency_bytes * coeffs.members
    ) * coeffs.seconds_per_byte + coeffs.latency_s
    return (
        np.where(active, seconds, 0.0)
        if np.ndim(seconds) or np.ndim(active)
        else (seconds if active else 0.0)
    )


def all_gather_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """Seconds to AllGather an array of ``array_bytes`` (the full result) over ``span``."""
    return ring_time(array_bytes, ring_coefficients(span), half_efficiency_bytes)


def all_reduce_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """AllReduce = ReduceScatter + AllGather."""
    return 2.0 * all_gather_time(array_bytes, span, half_efficiency_bytes)


def all_to_all_time(array_bytes, span: Span, half_efficiency_bytes: float = 0.0):
    """AllToAll of an array of ``array_bytes`` (all members' data together): per level, 1/4 of an
    AllGather on a bidirectional ring (book, "AllToAll"), 1/n of it through a switch."""
    n = span_size(span)
    if n <= 1:
        return 0.0 * array_bytes
    s = Spans.of(span)
    per_byte = max(
        float(np.where(torus, c / 4.0, c / n_l)[0])
        for n_l, c, torus in _levels(s, all_to_all=True)
        if n_l[0] > 1
    )
    return (array_bytes + half_efficiency_bytes * n) * per_byte + float(span_latency(s)[0])
