"""Cluster names -> per-axis factor graphs (networkx) -> the axes a collective group can span.

The topology is defined by one small networkx graph per physical axis, inner axis first:

- a torus axis (x, y, z): positions 0..size-1, a cycle with wraparound, a path without;
- the NVLink domain (``node``): the GPUs of a node as a star around its NVSwitch;
- the scale-out fat tree (``scale_out``): nodes under one leaf per scalable unit of 32 nodes,
  leaves under the spine layer when there is more than one unit (rail-optimised: in the device
  graph every switch is one per rail and GPU i uses rail i mod 8);
- DCN between TPU slices (``dcn``): the slices as a star around the DCN fabric.

Factor-graph nodes with ``device=True`` are positions along the axis, switches have
``device=False``. Positions or switches that link alike are one node standing for a run: a
``range`` of positions, or a tuple ending in a range of switches (``('leaf', range(0, 64))``); an
edge between runs links them in equal consecutive blocks. So a torus axis has one node per position (at
most 28 in the catalogue) and any other factor at most five, whatever the device count. Every edge carries
``axis``, ``bytes_per_s_per_direction`` and ``latency_s``; the graph carries its
``axis`` name and ``kind``. ``derive_axes`` reads size, wraparound, bandwidth and latency from
the factors. ``cluster_graph`` builds the device graph, their product, on demand (inspection and
tests); ``axes_from_device_graph`` reads the same axes back from it by connected components.

Names: ``v5p-8192`` counts chips (16x16x32, as in the design notes; Google's Cloud names count
TensorCores for v4/v5p, so their ``v5p-8192`` is 4096 chips); ``v5p:16x20x28`` gives a shape;
``v5p-8960x4`` is four slices joined over DCN; ``h100-1024`` is 128 nodes of 8 GPUs. A cluster
has at most ``MAX_DEVICES`` devices, checked before anything is built. One TPU chip (``v5p-1``)
gets a single placeholder axis ``x`` of size 1 without bandwidth; one GPU (``h100-1``) its
NVLink axis of size 1.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import networkx as nx

from layoutsearch.core.catalogue import accelerator_names, load_accelerator
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.numbers import divisors
from layoutsearch.core.specs import Accelerator, Axis, Cluster

MAX_DEVICES = 262_144  # 2^18 devices in one cluster, all slices together
TORUS_AXIS_NAMES = ("x", "y", "z")
SMALL_3D_SHAPES = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}
SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
SCALABLE_UNIT_NODES = 32  # H100 reference: 32 nodes under one set of rail leaves
MAX_RAILS = 8  # NICs per node: one leaf per rail in each scalable unit, as many spines
# A single TPU chip: no link to span; one axis of size 1 so that a Cluster always has an axis.
SINGLE_CHIP_AXIS = Axis(name="x", size=1, kind="torus", bytes_per_s_per_direction=0.0, wraparound=False,
                        latency_s=0.0, efficiency=1.0)


# ----------------------------------------------------------------------------- shapes
def _max_slice_chips(acc: Accelerator) -> int:
    return math.prod(acc.max_slice_shape)


def torus_shape(acc: Accelerator, num_chips: int) -> tuple[int, ...] | None:
    """The canonical torus shape of a slice of ``num_chips``, or None when there is none."""
    if acc.torus_dims == 2:
        return SHAPES_2D.get(num_chips) if num_chips <= _max_slice_chips(acc) else None
    if num_chips in SMALL_3D_SHAPES:
        return SMALL_3D_SHAPES[num_chips]
    if num_chips % 64 or num_chips > _max_slice_chips(acc):
        return None
    best = None
    cubes = num_chips // 64
    for a in range(1, cubes + 1):
        for b in range(a, cubes // a + 1):
            c, rem = divmod(cubes, a * b)
            if rem or c < b:
                continue
            shape = (4 * a, 4 * b, 4 * c)
            key = (shape[2] / shape[0], shape[2])  # most cube-like, then the shorter long axis
            if best is None or key < best[0]:
                best = (key, shape)
    return best[1] if best else None


def torus_wraparound(acc: Accelerator, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Per axis: v4/v5p wrap every axis from a full 4x4x4 cube up; v5e/v6e only axes of 16."""
    if acc.wraparound_needs_full_cube:
        full = all(s % 4 == 0 for s in shape)
        return tuple(full and s >= acc.wraparound_min_axis for s in shape)
    return tuple(s >= acc.wraparound_min_axis for s in shape)


def valid_sizes(acc: Accelerator, limit: int) -> list[int]:
    """Device counts the catalogue can lay out for one slice (TPU) or a cluster (GPU), up to
    ``min(limit, MAX_DEVICES)``."""
    limit = min(limit, MAX_DEVICES)
    if acc.kind == "gpu":
        n = acc.devices_per_node
        return [d for d in divisors(n) if d < n] + list(range(n, limit + 1, n))
    return [k for k in range(1, min(limit, _max_slice_chips(acc)) + 1) if torus_shape(acc, k)]


def _nearby_sizes(acc: Accelerator, n: int, per_node: int = 1) -> list[int]:
    """Up to two valid sizes below n and two above, from candidates near n (no scan up to n)."""
    if acc.kind == "gpu":
        k = n // per_node
        candidates = [d for d in divisors(per_node) if d < per_node]
        candidates += [m * per_node for m in range(max(k - 1, 1), k + 3)]
    elif acc.torus_dims == 2:
        candidates = [s for s in SHAPES_2D if torus_shape(acc, s)]
    else:
        k = min(n, _max_slice_chips(acc)) // 64
        candidates = [s for s in [*SMALL_3D_SHAPES, *(64 * m for m in range(max(k - 1, 1), k + 3))]
                      if torus_shape(acc, s)]
    valid = sorted({s for s in candidates if s <= MAX_DEVICES})
    return [s for s in valid if s < n][-2:] + [s for s in valid if s > n][:2]


# ----------------------------------------------------------------------------- factor graphs
def _link(axis: str, bytes_per_s: float, latency_s: float) -> dict:
    return {"axis": axis, "bytes_per_s_per_direction": bytes_per_s, "latency_s": latency_s}


def torus_axis_graph(name: str, size: int, wraparound: bool, bytes_per_s: float, latency_s: float) -> nx.Graph:
    """Positions 0..size-1 along one torus axis: a cycle with wraparound (from 3 positions), else a path."""
    g = nx.Graph(axis=name, kind="torus")
    g.add_nodes_from(range(size), device=True)
    links = size if wraparound and size > 2 else size - 1
    g.add_edges_from(((i, (i + 1) % size) for i in range(links)), **_link(name, bytes_per_s, latency_s))
    return g


def hub_graph(name: str, kind: str, size: int, hub, bytes_per_s: float, latency_s: float) -> nx.Graph:
    """``size`` positions each linked to one switch ``hub``: a star, its positions one run."""
    g = nx.Graph(axis=name, kind=kind)
    g.add_node(range(size), device=True)
    g.add_node(hub, device=False)
    g.add_edge(range(size), hub, **_link(name, bytes_per_s, latency_s))
    return g


def fat_tree_graph(num_nodes: int, rails: int, nic_bytes_per_s: float, latency_s: float) -> nx.Graph:
    """Nodes 0..num_nodes-1 under one leaf ('leaf', u) per scalable unit of 32 nodes; with more than
    one unit, every leaf under the spine layer ('spine',) at the unit's aggregate bandwidth. The full
    units are one run of nodes on a run of leaves, a last partial unit another."""
    g = nx.Graph(axis="scale_out", kind="scale_out", rails=rails)
    full, rest = divmod(num_nodes, SCALABLE_UNIT_NODES)
    units = full + (rest > 0)
    for first, last in ((0, full), (full, units)):
        if last == first:
            continue
        nodes = range(first * SCALABLE_UNIT_NODES, min(last * SCALABLE_UNIT_NODES, num_nodes))
        leaves = ("leaf", range(first, last))
        g.add_node(nodes, device=True)
        g.add_node(leaves, device=False)
        g.add_edge(nodes, leaves, **_link("scale_out", nic_bytes_per_s, latency_s))
        if units > 1:
            g.add_node(("spine",), device=False)
            g.add_edge(leaves, ("spine",), **_link("scale_out_spine", nic_bytes_per_s * SCALABLE_UNIT_NODES, latency_s))
    return g


def torus_factors(acc: Accelerator, shape: tuple[int, ...], num_slices: int = 1) -> tuple[nx.Graph, ...]:
    """The torus axes of one slice, then DCN between slices when there is more than one."""
    factors = [torus_axis_graph(name, size, wrap, acc.link_bytes_per_s_per_direction, acc.link_latency_s)
               for name, size, wrap in zip(TORUS_AXIS_NAMES, shape, torus_wraparound(acc, shape))]
    if num_slices > 1:
        factors.append(hub_graph("dcn", "dcn", num_slices, "dcn", acc.scale_out_bytes_per_s_per_direction,
                                 acc.scale_out_latency_s))
    return tuple(factors)


def gpu_factors(acc: Accelerator, num_nodes: int, devices_per_node: int,
                scale_out_bytes_per_s: float | None = None) -> tuple[nx.Graph, ...]:
    """The NVLink domain of one node, then the scale-out fat tree when there is more than one node."""
    factors = [hub_graph("node", "switch", devices_per_node, ("nvswitch",), acc.link_bytes_per_s_per_direction,
                         acc.link_latency_s)]
    if num_nodes > 1:
        nic = scale_out_bytes_per_s or acc.scale_out_bytes_per_s_per_direction
        factors.append(fat_tree_graph(num_nodes, min(devices_per_node, MAX_RAILS), nic, acc.scale_out_latency_s))
    return tuple(factors)


# ----------------------------------------------------------------------------- axes from factor graphs
def _members(node) -> list:
    """What a factor-graph node stands for: a range is a run of positions, a tuple ending in a range
    a run of switches, anything else itself."""
    if isinstance(node, range):
        return list(node)
    if isinstance(node, tuple) and node and isinstance(node[-1], range):
        return [(*node[:-1], i) for i in node[-1]]
    return [node]


def _positions(f: nx.Graph) -> list[int]:
    return [p for node, dev in f.nodes(data="device") if dev for p in _members(node)]


def _size(f: nx.Graph) -> int:
    return sum(len(node) if isinstance(node, range) else 1 for node, dev in f.nodes(data="device") if dev)


def _is_ring(f: nx.Graph) -> bool:
    """True for a cycle, False for a path; anything else is an inconsistent torus axis."""
    n, e = f.number_of_nodes(), f.number_of_edges()
    if e not in (n - 1, n) or max(d for _, d in f.degree) > 2 or not nx.is_connected(f):
        raise CatalogueError(f"factor graph '{f.graph['axis']}': a torus axis must be a ring or a line, "
                             f"got {n} positions and {e} links")
    return e == n and n > 2


def factor_axis(f: nx.Graph, acc: Accelerator) -> Axis:
    """The axis one factor graph describes: its positions, its links' rate, a ring or not."""
    name, kind = f.graph["axis"], f.graph["kind"]
    rates = {(d["bytes_per_s_per_direction"], d["latency_s"]) for *_, d in f.edges(data=True) if d["axis"] == name}
    if len(rates) > 1:
        raise CatalogueError(f"factor graph '{name}': links differ in (bandwidth, latency): {sorted(rates)}")
    bytes_per_s, latency_s = rates.pop() if rates else (0.0, 0.0)
    efficiency = acc.collective_efficiency if kind in ("torus", "switch") else acc.scale_out_efficiency
    return Axis(name=name, size=_size(f), kind=kind, bytes_per_s_per_direction=bytes_per_s,
                wraparound=kind == "torus" and _is_ring(f), latency_s=latency_s, efficiency=efficiency)


def derive_axes(factors: Sequence[nx.Graph], acc: Accelerator) -> tuple[tuple[Axis, ...], int]:
    """The axes a collective can span, one per factor graph, in order; O(total factor size).

    An axis of size 1 is left out (a torus axis of one position has no link), except the NVLink
    domain, which stays even for one GPU; a single TPU chip gets ``SINGLE_CHIP_AXIS``.
    Returns (axes, number of ICI slices / NVLink domains).
    """
    axes = [factor_axis(f, acc) for f in factors]
    slices = next((a.size for a in axes if a.kind in ("dcn", "scale_out")), 1)
    kept = tuple(a for a in axes if a.size > 1 or a.kind == "switch")
    return kept or (SINGLE_CHIP_AXIS,), slices


# ----------------------------------------------------------------------------- device graph (product)
def _member_links(f: nx.Graph, u, v) -> list[tuple]:
    """The links one factor edge stands for, position end first when there is one: the longer run
    splits into equal consecutive blocks, one per member of the shorter, block k linking to member k."""
    if f.nodes[v]["device"] and not f.nodes[u]["device"]:
        u, v = v, u
    us, vs = _members(u), _members(v)
    if len(us) >= len(vs):
        return [(a, vs[k * len(vs) // len(us)]) for k, a in enumerate(us)]
    return [(us[k * len(us) // len(vs)], b) for k, b in enumerate(vs)]


def _hub_links(f: nx.Graph):
    """(position, switch, link data) for every link between a position and a switch."""
    for u, v, data in f.edges(data=True):
        if f.nodes[u]["device"] != f.nodes[v]["device"]:
            for position, switch in _member_links(f, u, v):
                yield position, switch, data


def torus_product(factors: Sequence[nx.Graph]) -> nx.Graph:
    """Chip (slice, x, y, z) per slice and torus position: per slice the Cartesian product of the
    torus axes (a link joins chips one step apart along one axis); every chip links to the DCN fabric."""
    torus = [f for f in factors if f.graph["kind"] == "torus"]
    dcn = [f for f in factors if f.graph["kind"] == "dcn"]
    coords = list(itertools.product(*(_positions(f) for f in torus)))
    g = nx.Graph()
    for s in _positions(dcn[0]) if dcn else [0]:
        for c in coords:
            g.add_node((s, *c), device=True)
            for d, f in enumerate(torus):
                for v, data in f.adj[c[d]].items():
                    g.add_edge((s, *c), (s, *c[:d], v, *c[d + 1:]), **data)
    for s, hub, data in (link for f in dcn for link in _hub_links(f)):
        g.add_edges_from((((s, *c), hub) for c in coords), **data)
    return g


def gpu_product(factors: Sequence[nx.Graph]) -> nx.Graph:
    """GPU ('gpu', node, i) per scale-out position and NVLink position: each node has its own
    NVSwitch; every fat-tree switch is one per rail ('leaf', u, r), ('spine', r); GPU i links to its
    unit's leaf of rail i % rails, and every leaf to every spine."""
    nvlink, *scale_out = factors
    gpus = _positions(nvlink)
    g = nx.Graph()
    for n in _positions(scale_out[0]) if scale_out else [0]:
        g.add_nodes_from((("gpu", n, i) for i in gpus), device=True)
        for i, hub, data in _hub_links(nvlink):
            g.add_edge(("gpu", n, i), (*hub, n), **data)
    for f in scale_out:
        rails = f.graph["rails"]
        for n, leaf, data in _hub_links(f):
            g.add_edges_from(((("gpu", n, i), (*leaf, i % rails)) for i in gpus), **data)
        for u, v, data in f.edges(data=True):
            if not (f.nodes[u]["device"] or f.nodes[v]["device"]):
                for a, b in _member_links(f, u, v):
                    g.add_edges_from((((*a, r), (*b, s)) for r in range(rails) for s in range(rails)), **data)
    return g


def product_graph(factors: Sequence[nx.Graph]) -> nx.Graph:
    """The device graph the factor graphs describe; devices have ``device=True``, switches False."""
    g = gpu_product(factors) if factors[0].graph["kind"] == "switch" else torus_product(factors)
    for node in g:
        g.nodes[node].setdefault("device", False)
    return g


# ----------------------------------------------------------------------------- axes from a device graph
def _edges_by_axis(g: nx.Graph) -> dict[str, list[tuple]]:
    by_axis: dict[str, list[tuple]] = {}
    for u, v, label in g.edges(data="axis"):
        by_axis.setdefault(label, []).append((u, v))
    return by_axis


def _edge_stats(g: nx.Graph, edges: list[tuple], label: str) -> tuple[float, float]:
    if not edges:
        raise CatalogueError(f"cluster graph has no '{label}' edge")
    data = g.edges[edges[0]]
    return data["bytes_per_s_per_direction"], data["latency_s"]


def _rings(edges: list[tuple]) -> list[tuple[int, int]]:
    """(nodes, edges) of each connected component of an axis's links."""
    sub = nx.Graph(edges)
    components = list(nx.connected_components(sub))
    index = {node: i for i, comp in enumerate(components) for node in comp}
    edge_counts = [0] * len(components)
    for u, _ in sub.edges():
        edge_counts[index[u]] += 1
    return [(len(c), e) for c, e in zip(components, edge_counts)]


def axes_from_device_graph(g: nx.Graph, acc: Accelerator) -> tuple[tuple[Axis, ...], int]:
    """The axes read back from a whole device graph by connected components, checking it is
    consistent (O(devices); tests use it to check ``derive_axes`` against the product).

    Returns (axes, number of ICI slices / NVLink domains).
    """
    devices = [n for n, dev in g.nodes(data="device") if dev]
    by_axis = _edges_by_axis(g)
    axes: list[Axis] = []
    if acc.kind == "tpu":
        ici = nx.Graph([e for name in TORUS_AXIS_NAMES for e in by_axis.get(name, [])])
        ici.add_nodes_from(devices)
        slices = nx.number_connected_components(ici)
        for name in TORUS_AXIS_NAMES:
            if name not in by_axis:
                continue
            rings = _rings(by_axis[name])
            sizes = {n for n, _ in rings}
            if len(sizes) != 1:
                raise CatalogueError(f"cluster graph: axis '{name}' has rings of different sizes {sorted(sizes)}")
            size = sizes.pop()
            wrap = {e == n for n, e in rings}
            if len(wrap) != 1:
                raise CatalogueError(f"cluster graph: axis '{name}' mixes rings with and without wraparound")
            bw, lat = _edge_stats(g, by_axis[name], name)
            axes.append(Axis(name=name, size=size, kind="torus", bytes_per_s_per_direction=bw,
                             wraparound=wrap.pop() and size > 2, latency_s=lat, efficiency=acc.collective_efficiency))
        if slices > 1:
            bw, lat = _edge_stats(g, by_axis.get("dcn", []), "dcn")
            axes.append(Axis(name="dcn", size=slices, kind="dcn", bytes_per_s_per_direction=bw, wraparound=False,
                             latency_s=lat, efficiency=acc.scale_out_efficiency))
        axes = [a for a in axes if a.size > 1] or [SINGLE_CHIP_AXIS]
    else:
        nvl = nx.Graph(by_axis.get("node", []))
        domains = [sum(1 for n in c if g.nodes[n]["device"]) for c in nx.connected_components(nvl)]
        if len(set(domains)) != 1:
            raise CatalogueError(f"cluster graph: NVLink domains of different sizes {sorted(set(domains))}")
        slices = len(domains)
        bw, lat = _edge_stats(g, by_axis.get("node", []), "node")
        axes.append(Axis(name="node", size=domains[0], kind="switch", bytes_per_s_per_direction=bw,
                         wraparound=False, latency_s=lat, efficiency=acc.collective_efficiency))
        if slices > 1:
            bw, lat = _edge_stats(g, by_axis.get("scale_out", []), "scale_out")
            axes.append(Axis(name="scale_out", size=slices, kind="scale_out", bytes_per_s_per_direction=bw,
                             wraparound=False, latency_s=lat, efficiency=acc.scale_out_efficiency))
    if math.prod(a.size for a in axes) != len(devices):
        raise CatalogueError(f"cluster graph: axes {[(a.name, a.size) for a in axes]} do not multiply to "
                             f"{len(devices)} devices")
    return tuple(axes), slices


# ----------------------------------------------------------------------------- names and bounds
_NAME = re.compile(r"^(?P<acc>[a-z0-9.]+(?:-[0-9]+gb)?)(?:-(?P<n>[0-9]+)|:(?P<shape>[0-9]+(?:x[0-9]+)*))(?:x(?P<slices>[0-9]+))?$")


def _number(name: str, digits: str, what: str) -> int:
    """A number from a cluster name; one with more digits than MAX_DEVICES is refused before int()."""
    if len(digits.lstrip("0")) > len(str(MAX_DEVICES)):
        raise CatalogueError(f"cluster '{name}': {what} {digits} is over the limit of {MAX_DEVICES:,} devices")
    return int(digits)


def _dims(shape: Iterable[int]) -> str:
    return "x".join(str(s) for s in shape)


def _check_shape(name: str, acc: Accelerator, shape: tuple[int, ...]) -> None:
    """An explicit shape: the accelerator's dimensions, each >= 1, within its largest slice."""
    if acc.kind != "tpu":
        raise CatalogueError(f"cluster '{name}': an explicit shape is for TPUs; give the GPU count ({acc.id}-N)")
    if len(shape) != acc.torus_dims:
        raise CatalogueError(f"cluster '{name}': an explicit shape needs {acc.torus_dims} "
                             f"dimensions for {acc.id}, got {len(shape)}")
    if min(shape) < 1:
        raise CatalogueError(f"cluster '{name}': every shape dimension must be >= 1, got {_dims(shape)}")
    largest = acc.max_slice_shape  # sorted dims within sorted dims, so the product is within too
    if any(s > m for s, m in zip(sorted(shape), sorted(largest))):
        raise CatalogueError(f"cluster '{name}': shape {_dims(shape)} does not fit in the largest {acc.id} slice "
                             f"{_dims(largest)} (sorted {_dims(sorted(shape))} vs {_dims(sorted(largest))})")


def parse_cluster_name(name: str) -> tuple[Accelerator, dict]:
    """Split a cluster name into its accelerator and a description (shape, slices, or device count);
    every count is checked against MAX_DEVICES here."""
    m = _NAME.match(name.strip().lower())
    if not m:
        raise CatalogueError(f"cluster '{name}': expected ACCELERATOR-COUNT (v5p-8192, h100-1024), "
                             f"ACCELERATOR:SHAPE (v5p:16x20x28) or ACCELERATOR-COUNTxSLICES (v5p-8960x4)")
    acc_id = m["acc"]
    if acc_id not in accelerator_names():
        raise CatalogueError(f"cluster '{name}': unknown accelerator '{acc_id}'{did_you_mean(acc_id, accelerator_names())}; "
                             f"known: {', '.join(accelerator_names())}")
    acc = load_accelerator(acc_id)
    slices = _number(name, m["slices"], "slice count") if m["slices"] else 1
    if slices < 1:
        raise CatalogueError(f"cluster '{name}': the number of slices (xN) must be >= 1, got {slices}")
    if m["shape"]:
        shape = tuple(_number(name, s, "shape dimension") for s in m["shape"].split("x"))
        _check_shape(name, acc, shape)
        desc, per_slice = {"shape": shape, "slices": slices}, math.prod(shape)
    else:
        per_slice = _number(name, m["n"], "device count")
        if per_slice < 1:
            raise CatalogueError(f"cluster '{name}': device count must be positive, got {per_slice}")
        desc = {"count": per_slice, "slices": slices}
    if per_slice * slices > MAX_DEVICES:
        counted = f"{per_slice:,} devices x {slices:,} slices = " if slices > 1 else ""
        raise CatalogueError(f"cluster '{name}': {counted}{per_slice * slices:,} devices is over the limit of "
                             f"{MAX_DEVICES:,} devices")
    return acc, desc


def cluster_factors(name: str, devices_per_node: int | None = None,
                    scale_out_bytes_per_s: float | None = None) -> tuple[Accelerator, tuple[nx.Graph, ...]]:
    """The accelerator and the factor graphs a cluster name describes, inner axis first (cheap).

    ``devices_per_node`` and ``scale_out_bytes_per_s`` override the GPU catalogue (validation
    records describe their own nodes).
    """
    acc, desc = parse_cluster_name(name)
    slices = desc["slices"]
    if acc.kind == "tpu":
        shape = desc.get("shape") or torus_shape(acc, desc["count"])
        if shape is None:
            n = desc["count"]
            raise CatalogueError(f"cluster '{name}': {n} {acc.id} chips is not a slice shape "
                                 f"(valid nearby sizes: {', '.join(map(str, _nearby_sizes(acc, n)))}; "
                                 f"or give a shape, e.g. '{acc.id}:{_dims(acc.max_slice_shape)}')")
        return acc, torus_factors(acc, shape, slices)
    if slices != 1:
        raise CatalogueError(f"cluster '{name}': multislice (xN) is for TPUs; give the GPU count")
    n = desc["count"]
    per_node = devices_per_node or acc.devices_per_node
    if n % per_node and per_node % n:
        raise CatalogueError(f"cluster '{name}': {n} GPUs is not a whole number of {per_node}-GPU nodes "
                             f"(valid nearby sizes: {', '.join(map(str, _nearby_sizes(acc, n, per_node)))})")
    nodes, per_node = (n // per_node, per_node) if n >= per_node else (1, n)
    return acc, gpu_factors(acc, nodes, per_node, scale_out_bytes_per_s)


@lru_cache(maxsize=64)
def resolve_cluster(name: str, devices_per_node: int | None = None,
                    scale_out_bytes_per_s: float | None = None) -> Cluster:
    """The cluster a name describes, its axes derived from the factor graphs (no device graph)."""
    acc, factors = cluster_factors(name, devices_per_node, scale_out_bytes_per_s)
    axes, slices = derive_axes(factors, acc)
    return Cluster(name=name, accelerator=acc, axes=axes, num_slices=slices if acc.kind == "tpu" else 1)


def cluster_graph(name: str, devices_per_node: int | None = None,
                  scale_out_bytes_per_s: float | None = None) -> nx.Graph:
    """The device graph behind a cluster name, the product of its factor graphs (inspection, tests)."""
    return product_graph(cluster_factors(name, devices_per_node, scale_out_bytes_per_s)[1])


EXAMPLE_CLUSTERS = ("v5p-8192", "v5p-8960", "v5p:16x20x28", "v5p-8960x4", "v5p-256", "v4-4096", "v5e-256",
                    "v6e-256", "tpu7x-9216", "a100-80gb-1024", "h100-1024", "h200-1024", "b200-1024", "gb200-576")
