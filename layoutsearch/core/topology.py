"""Cluster names -> per-axis factor graphs -> the axes a collective group can span.

The topology is defined by one small graph per physical axis, inner axis first (``FactorGraph``,
the networkx interface in plain Python; ``device_graph`` turns them into networkx graphs):

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
the factors. ``device_graph.cluster_graph`` builds the device graph (networkx), their product, on
demand (inspection and tests); ``device_graph.axes_from_device_graph`` reads the same axes back
from it by connected components.

Names: ``v5p-8192`` counts chips (16x16x32, as in the design notes; Google's Cloud names count
TensorCores for v4/v5p, so their ``v5p-8192`` is 4096 chips); ``v5p:16x20x28`` gives a shape;
``v5p-8960x4`` is four slices joined over DCN; ``h100-1024`` is 128 nodes of 8 GPUs. A cluster
has at most ``MAX_DEVICES`` devices, checked before anything is built. One TPU chip (``v5p-1``)
gets a single placeholder axis ``x`` of size 1 without bandwidth; one GPU (``h100-1``) its
NVLink axis of size 1.

Cluster files: a ``--cluster`` value ending in .yaml/.yml is a ``ClusterFile`` (accelerator id or
inline accelerator; GPU nodes, node size, NIC and NVLink bandwidths; TPU shape, slices and DCN
bandwidth; HBM), validated field by field (unknown keys with a "did you mean", each error one line
naming the file and the field). It builds its factor graphs with the same ``gpu_factors`` and
``torus_factors`` as the names (a file with ``accelerator: h100, devices_per_node: 8, nodes:
128`` is ``h100-1024``); its bandwidth and HBM overrides change a copy of the accelerator. The
result is a ``CustomCluster`` that keeps its resolved description (``spec``) for the result
document's ``problem.cluster_spec``, from which ``Problem.from_record`` rebuilds it.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from layoutsearch.core import io
from layoutsearch.core.catalogue import (
    MAX_GBYTES_PER_S,
    MAX_HBM_GIB,
    MAX_HOST_CPU_CORES,
    MAX_HOST_MEMORY_GIB,
    MIN_GBYTES_PER_S,
    accelerator_from_dict,
    accelerator_names,
    load_accelerator,
)
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.fields import validated_fields
from layoutsearch.core.graph_axes import (
    SINGLE_CHIP_AXIS,
    SPINE_LINK,
    TORUS_AXIS_NAMES,
    WAN_LINK,
    pod_oversubscription,
)
from layoutsearch.core.numbers import divisors
from layoutsearch.core.specs import Accelerator, Axis, Cluster
from layoutsearch.core.units import GB, GIB, MAX_DEVICES

SMALL_3D_SHAPES = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}
SHAPES_2D = {
    1: (1, 1),
    4: (2, 2),
    8: (2, 4),
    16: (4, 4),
    32: (4, 8),
    64: (8, 8),
    128: (8, 16),
    256: (16, 16),
}
SCALABLE_UNIT_NODES = 32  # H100 reference: 32 nodes under one set of rail leaves
MAX_OVERSUBSCRIPTION = 16.0  # the fat trees built (2:1 and 4:1 in practice)
MAX_RAILS = 8  # NICs per node: one leaf per rail in each scalable unit, as many spines
MAX_PLANES = 8  # separate scale-out fabrics, one NIC port of each GPU on each
MAX_SITES = 2  # sites joined by one WAN link (a ring crosses it once each way)
MAX_WAN_LATENCY_US = 1e5  # 100 ms: a link across a continent is about 30 ms


@dataclass(frozen=True, kw_only=True, slots=True)
class Rack:
    """An NVLink rack: ``devices`` GPUs (packages: one CUDA device each) in trays of
    ``tray_devices``, each linked to every one of ``switch_chips`` NVLink switch chips, at
    ``nvlink_gbytes_per_s`` per device one way in all (``source``)."""

    devices: int
    tray_devices: int
    switch_chips: int
    nvlink_gbytes_per_s: float
    source: str


RACKS = {
    "nvl72": Rack(
        devices=72,
        tray_devices=4,
        switch_chips=18,
        nvlink_gbytes_per_s=900.0,
        source="NVIDIA GB200 NVL72: 18 compute trays of 4 GPUs, 9 NVLink switch trays of 2 NVLink 5 "
        "switch chips; 1.8 TB/s per GPU both ways (18 links of 100 GB/s), 130 TB/s per rack",
    ),
    "nvl144": Rack(
        devices=72,
        tray_devices=4,
        switch_chips=18,
        nvlink_gbytes_per_s=1800.0,
        source="NVIDIA Vera Rubin NVL144 (GTC 2025): 144 GPU dies in 72 two-die Rubin packages, "
        "18 trays of 4; NVLink 6 at 3.6 TB/s per package both ways, 260 TB/s per rack; a package "
        "is one CUDA device, so the rack plans as 72 devices (switch chips assumed as NVL72's 18)",
    ),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class WanLink:
    """Equal sites joined by a wide-area link of ``bytes_per_s`` each way per site pair."""

    sites: int
    bytes_per_s: float
    latency_s: float


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
        n, host = acc.devices_per_node, acc.devices_per_host
        if host < n:  # partial domains in whole hosts (partial_domains)
            return sorted(set(d for d in divisors(n) if d < n) | set(range(host, limit + 1, host)))
        return [d for d in divisors(n) if d < n] + list(range(n, limit + 1, n))
    return [k for k in range(1, min(limit, _max_slice_chips(acc)) + 1) if torus_shape(acc, k)]


def _nearby_sizes(acc: Accelerator, n: int, per_node: int = 1) -> list[int]:
    """Up to two valid sizes below n and two above, from candidates near n (no scan up to n)."""
    if acc.kind == "gpu":
        k = n // per_node
        candidates = [d for d in divisors(per_node) if d < per_node]
        candidates += [m * per_node for m in range(max(k - 1, 1), k + 3)]
        host = acc.devices_per_host
        candidates += [
            m * host
            for m in range(max(n // host - 2, 1), n // host + 3)
            if partial_domains(acc, m * host, per_node)
        ]
    elif acc.torus_dims == 2:
        candidates = [s for s in SHAPES_2D if torus_shape(acc, s)]
    else:
        k = min(n, _max_slice_chips(acc)) // 64
        candidates = [
            s
            for s in [*SMALL_3D_SHAPES, *(64 * m for m in range(max(k - 1, 1), k + 3))]
            if torus_shape(acc, s)
        ]
    valid = sorted({s for s in candidates if s <= MAX_DEVICES})
    return [s for s in valid if s < n][-2:] + [s for s in valid if s > n][:2]


# ----------------------------------------------------------------------------- factor graphs
class FactorGraph:
    """One axis's graph: an undirected graph with graph, node and edge attributes, with the
    interface of ``networkx.Graph`` that factor graphs use (so the networkx device graph is
    built from them, ``device_graph.to_networkx``); plain Python, because a solve resolves its
    cluster and must not pay for importing networkx."""

    def __init__(self, **attrs):
        self.graph = dict(attrs)
        self._node: dict = {}
        self._adj: dict = {}

    def add_node(self, node, **attrs) -> None:
        self._node.setdefault(node, {}).update(attrs)
        self._adj.setdefault(node, {})

    def add_nodes_from(self, nodes, **attrs) -> None:
        for node in nodes:
            self.add_node(node, **attrs)

    def add_edge(self, u, v, **attrs) -> None:
        for node in (u, v):
            if node not in self._node:
                self.add_node(node)
        data = self._adj[u].get(v, {})
        data.update(attrs)
        self._adj[u][v] = self._adj[v][u] = data

    def add_edges_from(self, edges, **attrs) -> None:
        for u, v in edges:
            self.add_edge(u, v, **attrs)

    @property
    def nodes(self) -> _NodeView:
        return _NodeView(self._node)

    @property
    def adj(self) -> dict:
        return self._adj

    def edges(self, data: bool = False):
        seen = set()
        for u, nbrs in self._adj.items():
            for v, d in nbrs.items():
                if (v, u) not in seen:
                    seen.add((u, v))
                    yield (u, v, d) if data else (u, v)

    @property
    def degree(self):
        return [(n, len(nbrs) + (n in nbrs)) for n, nbrs in self._adj.items()]

    def number_of_nodes(self) -> int:
        return len(self._node)

    def number_of_edges(self) -> int:
        return sum(1 for _ in self.edges())

    def is_connected(self) -> bool:
        """Every node reachable from the first (a graph without nodes is not connected)."""
        if not self._adj:
            return False
        start = next(iter(self._adj))
        seen, todo = {start}, [start]
        while todo:
            for v in self._adj[todo.pop()]:
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        return len(seen) == len(self._adj)


class _NodeView:
    """``g.nodes(data='device')`` and ``g.nodes[n]['device']``, as networkx reads them."""

    def __init__(self, nodes: dict):
        self._nodes = nodes

    def __call__(self, data: str | bool = False):
        if data is False:
            return list(self._nodes)
        return [(n, d if data is True else d.get(data)) for n, d in self._nodes.items()]

    def __getitem__(self, node) -> dict:
        return self._nodes[node]

    def __iter__(self):
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def link(axis: str, bytes_per_s: float, latency_s: float) -> dict:
    """A graph edge's attributes (factor graphs here, device graphs in ``network_generators``)."""
    return {"axis": axis, "bytes_per_s_per_direction": bytes_per_s, "latency_s": latency_s}


def mesh_link_bytes_per_s(acc: Accelerator, devices: int) -> float:
    """One peer link of a node whose ``devices`` are a full mesh (AMD Infinity Fabric): the part's
    link rate over its peers."""
    return acc.link_bytes_per_s_per_direction / max(devices - 1, 1)


def torus_axis_graph(
    name: str, size: int, wraparound: bool, bytes_per_s: float, latency_s: float
) -> FactorGraph:
    """Positions 0..size-1 along one torus axis: a cycle with wraparound (from 3 positions), else a path."""
    g = FactorGraph(axis=name, kind="torus")
    g.add_nodes_from(range(size), device=True)
    links = size if wraparound and size > 2 else size - 1
    g.add_edges_from(
        ((i, (i + 1) % size) for i in range(links)), **link(name, bytes_per_s, latency_s)
    )
    return g


def hub_graph(
    name: str, kind: str, size: int, hub, bytes_per_s: float, latency_s: float
) -> FactorGraph:
    """``size`` positions each linked to one switch ``hub``: a star, its positions one run."""
    g = FactorGraph(axis=name, kind=kind)
    g.add_node(range(size), device=True)
    g.add_node(hub, device=False)
    g.add_edge(range(size), hub, **link(name, bytes_per_s, latency_s))
    return g


def mesh_graph(name: str, size: int, bytes_per_s: float, latency_s: float) -> FactorGraph:
    """``size`` positions, every two joined by a direct link of ``bytes_per_s`` each way (a full
    mesh, as AMD's Infinity Fabric joins the 8 GPUs of a node): a group of k positions has k - 1
    links per member (``costs.comms.ring_bandwidth``)."""
    g = FactorGraph(axis=name, kind="mesh")
    g.add_nodes_from(range(size), device=True)
    g.add_edges_from(itertools.combinations(range(size), 2), **link(name, bytes_per_s, latency_s))
    return g


def fat_tree_graph(
    num_nodes: int,
    rails: int,
    nic_bytes_per_s: float,
    latency_s: float,
    pod_nodes: int = SCALABLE_UNIT_NODES,
    oversubscription: float = 1.0,
    nics_per_rail: int = 1,
    wan: WanLink | None = None,
) -> FactorGraph:
    """Nodes 0..num_nodes-1 under one leaf ('leaf', u) per pod (scalable unit) of ``pod_nodes``
    nodes (per rail: ``nics_per_rail`` NICs of each node); with more than one pod, every leaf under
    the spine layer ('spine',) at the NIC bandwidth under it over ``oversubscription`` (1: full
    bisection). The full pods are one run of nodes on a run of leaves, a last partial pod another.
    With ``wan``, the nodes split into ``wan.sites`` equal sites, each its own tree ('spine', s),
    whose tops join the ('wan',) link at the WAN's bandwidth over the rails (one rail's share)."""
    sites = wan.sites if wan else 1
    g = FactorGraph(
        axis="scale_out",
        kind="scale_out",
        rails=rails,
        pod_nodes=pod_nodes,
        nics_per_rail=nics_per_rail,
        sites=sites,
    )
    per_site = num_nodes // sites
    full, rest = divmod(per_site, pod_nodes)
    units = full + (rest > 0)
    uplink = nic_bytes_per_s * pod_nodes * nics_per_rail / oversubscription
    for site in range(sites):
        spine: tuple = ("spine", site) if wan else ("spine",)
        for first, last in ((0, full), (full, units)):
            if last == first:
                continue
            nodes = range(
                site * per_site + first * pod_nodes,
                site * per_site + min(last * pod_nodes, per_site),
            )
            leaves = ("leaf", range(site * units + first, site * units + last))
            g.add_node(nodes, device=True)
            g.add_node(leaves, device=False)
            g.add_edge(nodes, leaves, **link("scale_out", nic_bytes_per_s, latency_s))
            if units > 1:
                g.add_node(spine, device=False)
                g.add_edge(leaves, spine, **link(SPINE_LINK, uplink, latency_s))
            elif wan:
                spine = leaves  # one pod per site: its leaf is the site's top
        if wan:
            g.add_node(("wan",), device=False)
            g.add_edge(spine, ("wan",), **link(WAN_LINK, wan.bytes_per_s / rails, wan.latency_s))
    return g


def torus_factors(
    acc: Accelerator, shape: tuple[int, ...], num_slices: int = 1
) -> tuple[FactorGraph, ...]:
    """The torus axes of one slice, then DCN between slices when there is more than one."""
    factors = [
        torus_axis_graph(name, size, wrap, acc.link_bytes_per_s_per_direction, acc.link_latency_s)
        for name, size, wrap in zip(TORUS_AXIS_NAMES, shape, torus_wraparound(acc, shape))
    ]
    if num_slices > 1:
        factors.append(
            hub_graph(
                "dcn",
                "dcn",
                num_slices,
                "dcn",
                acc.scale_out_bytes_per_s_per_direction,
                acc.scale_out_latency_s,
            )
        )
    return tuple(factors)


def gpu_factors(
    acc: Accelerator,
    num_nodes: int,
    devices_per_node: int,
    scale_out_bytes_per_s: float | None = None,
    pod_nodes: int = SCALABLE_UNIT_NODES,
    oversubscription: float = 1.0,
    wan: WanLink | None = None,
) -> tuple[FactorGraph, ...]:
    """The NVLink domain of one node (a full mesh of peer links where the part has one), then the
    scale-out fat tree (``fat_tree_graph``, over ``wan``'s sites) when there is more than one node."""
    if acc.node_fabric == "mesh":  # the part's peer links: its link rate over its node's peers
        per_link = mesh_link_bytes_per_s(acc, acc.devices_per_node)
        node = mesh_graph("node", devices_per_node, per_link, acc.link_latency_s)
    else:
        node = hub_graph(
            "node",
            "switch",
            devices_per_node,
            ("nvswitch",),
            acc.link_bytes_per_s_per_direction,
            acc.link_latency_s,
        )
    factors = [node]
    if num_nodes > 1:
        nic = scale_out_bytes_per_s or acc.scale_out_bytes_per_s_per_direction
        rails = min(devices_per_node, MAX_RAILS)
        factors.append(
            fat_tree_graph(
                num_nodes,
                rails,
                nic,
                acc.scale_out_latency_s,
                pod_nodes,
                oversubscription,
                nics_per_rail=-(-devices_per_node // rails),
                wan=wan,
            )
        )
    return tuple(factors)


# ----------------------------------------------------------------------------- axes from factor graphs
def members(node) -> list:
    """What a factor-graph node stands for: a range is a run of positions, a tuple ending in a range
    a run of switches, anything else itself."""
    if isinstance(node, range):
        return list(node)
    if isinstance(node, tuple) and node and isinstance(node[-1], range):
        return [(*node[:-1], i) for i in node[-1]]
    return [node]


def positions(f: FactorGraph) -> list[int]:
    return [p for node, dev in f.nodes(data="device") if dev for p in members(node)]


def _size(f: FactorGraph) -> int:
    return sum(
        len(node) if isinstance(node, range) else 1 for node, dev in f.nodes(data="device") if dev
    )


def _is_ring(f: FactorGraph) -> bool:
    """True for a cycle, False for a path; anything else is an inconsistent torus axis."""
    n, e = f.number_of_nodes(), f.number_of_edges()
    if e not in (n - 1, n) or max(d for _, d in f.degree) > 2 or not f.is_connected():
        raise CatalogueError(
            f"factor graph '{f.graph['axis']}': a torus axis must be a ring or a line, got {n} positions and {e} links"
        )
    return e == n and n > 2


def factor_axis(f: FactorGraph, acc: Accelerator) -> Axis:
    """The axis one factor graph describes: its positions, its links' rate, a ring or not."""
    name, kind = f.graph["axis"], f.graph["kind"]
    rates = {
        (d["bytes_per_s_per_direction"], d["latency_s"])
        for *_, d in f.edges(data=True)
        if d["axis"] == name
    }
    if len(rates) > 1:
        raise CatalogueError(
            f"factor graph '{name}': links differ in (bandwidth, latency): {sorted(rates)}"
        )
    bytes_per_s, latency_s = rates.pop() if rates else (0.0, 0.0)
    efficiency = (
        acc.collective_efficiency
        if kind in ("torus", "switch", "mesh")
        else acc.scale_out_efficiency
    )
    pod = f.graph.get("pod_nodes", 0)
    uplinks = {
        d["bytes_per_s_per_direction"] for *_, d in f.edges(data=True) if d["axis"] == SPINE_LINK
    }
    nics = bytes_per_s * pod * f.graph.get("nics_per_rail", 1)  # under one leaf
    ratio = pod_oversubscription(nics, max(uplinks, default=None))
    axis = Axis(
        name=name,
        size=_size(f),
        kind=kind,
        bytes_per_s_per_direction=bytes_per_s,
        wraparound=kind == "torus" and _is_ring(f),
        latency_s=latency_s,
        efficiency=efficiency,
        pod_size=pod if ratio > 1.0 else 0,
        oversubscription=ratio,
    )
    return _with_sites(f, axis) if f.graph.get("sites", 1) > 1 else axis


def _with_sites(f: FactorGraph, axis: Axis) -> Axis:
    """The scale-out axis of sites joined by a WAN: its pods are the sites, its ratio the heaviest
    link load over capacity when every node sends to its peer in the next site at its NIC rate
    (``site_ratio``), and a step that leaves a site pays the WAN's latency on top."""
    wan_latency_s = next(d["latency_s"] for *_, d in f.edges(data=True) if d["axis"] == WAN_LINK)
    return replace(
        axis,
        pod_size=axis.size // f.graph["sites"],
        oversubscription=site_ratio(f),
        pod_latency_s=wan_latency_s,
    )


def _factor_capacity(f: FactorGraph):
    """A factor edge's bytes/s each way: its rate times the links it stands for (the longer run's
    members; a device end has ``nics_per_rail`` NICs per member)."""

    def capacity(u, v) -> float:
        links = max(len(members(u)), len(members(v)))
        nics = (
            f.graph.get("nics_per_rail", 1) if f.nodes[u]["device"] or f.nodes[v]["device"] else 1
        )
        return f.adj[u][v]["bytes_per_s_per_direction"] * links * nics

    return capacity


def site_ratio(f: FactorGraph) -> float:
    """The WAN's ratio on a multi-site scale-out factor graph (one rail's tree): every run of nodes
    sends to the run at the same place in the next site at its NICs' rate; routed on the factor
    graph (a handful of nodes, however many devices; ``routes.heaviest_link``, networkx: WAN
    clusters only), the heaviest link's load over capacity."""
    import networkx as nx

    from layoutsearch.core.routes import heaviest_link

    g: nx.Graph = nx.Graph()
    g.add_edges_from(f.edges())
    per_site = sum(len(members(n)) for n, dev in f.nodes(data="device") if dev) // f.graph["sites"]
    total = per_site * f.graph["sites"]
    runs = [n for n, dev in f.nodes(data="device") if dev]
    by_start = {members(n)[0]: n for n in runs}
    capacity = _factor_capacity(f)
    flows = []
    for run in runs:
        first = members(run)[0]
        peer = by_start[(first + per_site) % total]
        nic_bytes_per_s = capacity(run, next(iter(f.adj[run])))
        flows.append((run, peer, nic_bytes_per_s))
    return pod_oversubscription(*heaviest_link(g, flows, capacity))


def derive_axes(factors: Sequence[FactorGraph], acc: Accelerator) -> tuple[tuple[Axis, ...], int]:
    """The axes a collective can span, one per factor graph, in order; O(total factor size).

    An axis of size 1 is left out (a torus axis of one position has no link), except the NVLink
    domain, which stays even for one GPU; a single TPU chip gets ``SINGLE_CHIP_AXIS``.
    Returns (axes, number of ICI slices / NVLink domains).
    """
    axes = [factor_axis(f, acc) for f in factors]
    slices = next((a.size for a in axes if a.kind in ("dcn", "scale_out")), 1)
    kept = tuple(a for a in axes if a.size > 1 or a.kind in ("switch", "mesh"))
    return kept or (SINGLE_CHIP_AXIS,), slices


# ----------------------------------------------------------------------------- names and bounds
_NAME = re.compile(
    r"^(?P<acc>[a-z0-9.]+(?:-[0-9]+gb)?)(?:-(?P<n>[0-9]+)|:(?P<shape>[0-9]+(?:x[0-9]+)*))(?:x(?P<slices>[0-9]+))?$"
)


def _number(name: str, digits: str, what: str) -> int:
    """A number from a cluster name; one with more digits than MAX_DEVICES is refused before int()."""
    if len(digits.lstrip("0")) > len(str(MAX_DEVICES)):
        shown = (
            f"{int(digits):,}" if len(digits) <= 30 else f"{digits[:12]}... ({len(digits)} digits)"
        )
        raise CatalogueError(
            f"cluster '{name}': {what} {shown} is over the limit of {MAX_DEVICES:,} devices"
        )
    return int(digits)


def _dims(shape: Iterable[int]) -> str:
    return "x".join(str(s) for s in shape)


def _check_shape(where: str, acc: Accelerator, shape: tuple[int, ...]) -> None:
    """An explicit shape: the accelerator's dimensions, each >= 1, within its largest slice;
    ``where`` opens each message (``cluster 'v5p:4x4'``, ``c.yaml: field 'shape'``)."""
    if acc.kind != "tpu":
        raise CatalogueError(
            f"{where}: an explicit shape is for TPUs; give the GPU count ({acc.id}-N)"
        )
    if len(shape) != acc.torus_dims:
        raise CatalogueError(
            f"{where}: an explicit shape needs {acc.torus_dims} dimensions for {acc.id}, got {len(shape)}"
        )
    if min(shape) < 1:
        raise CatalogueError(f"{where}: every shape dimension must be >= 1, got {_dims(shape)}")
    largest = acc.max_slice_shape  # sorted dims within sorted dims, so the product is within too
    if any(s > m for s, m in zip(sorted(shape), sorted(largest))):
        raise CatalogueError(
            f"{where}: shape {_dims(shape)} does not fit in the largest {acc.id} slice "
            f"{_dims(largest)} (sorted {_dims(sorted(shape))} vs {_dims(sorted(largest))})"
        )


def parse_cluster_name(name: str) -> tuple[Accelerator, dict]:
    """Split a cluster name into its accelerator and a description (shape, slices, or device count);
    every count is checked against MAX_DEVICES here."""
    m = _NAME.match(name.strip().lower())
    if not m:
        raise CatalogueError(
            f"cluster '{name}': expected ACCELERATOR-COUNT (v5p-8192, h100-1024), "
            f"ACCELERATOR:SHAPE (v5p:16x20x28) or ACCELERATOR-COUNTxSLICES (v5p-8960x4)"
        )
    acc_id = m["acc"]
    if acc_id not in accelerator_names():
        raise CatalogueError(
            f"cluster '{name}': unknown accelerator '{acc_id}'{did_you_mean(acc_id, accelerator_names())}; "
            f"known: {', '.join(accelerator_names())}"
        )
    acc = load_accelerator(acc_id)
    slices = _number(name, m["slices"], "slice count") if m["slices"] else 1
    if slices < 1:
        raise CatalogueError(
            f"cluster '{name}': the number of slices (xN) must be >= 1, got {slices}"
        )
    if m["shape"]:
        shape = tuple(_number(name, s, "shape dimension") for s in m["shape"].split("x"))
        _check_shape(f"cluster '{name}'", acc, shape)
        desc, per_slice = {"shape": shape, "slices": slices}, math.prod(shape)
    else:
        per_slice = _number(name, m["n"], "device count")
        if per_slice < 1:
            raise CatalogueError(
                f"cluster '{name}': device count must be positive, got {per_slice}"
            )
        desc = {"count": per_slice, "slices": slices}
    if per_slice * slices > MAX_DEVICES:
        counted = f"{per_slice:,} devices x {slices:,} slices = " if slices > 1 else ""
        raise CatalogueError(
            f"cluster '{name}': {counted}{per_slice * slices:,} devices is over the limit of {MAX_DEVICES:,} devices"
        )
    return acc, desc


def partial_domains(acc: Accelerator, n: int, per_node: int) -> int | None:
    """The fewest NVLink domains ``n`` GPUs fill equally in whole hosts (trays) when n is not a
    multiple of the domain: GB200 NVL72 runs of 128 GPUs use 2 domains of 64 (16 trays of 4 each),
    as NVIDIA's published GB200 runs do. None where the host is the whole domain (H100: 8 of 8)."""
    host = acc.devices_per_host
    if host >= per_node or n % host:
        return None
    for domains in range(-(-n // per_node), n // host + 1):
        if n % domains == 0 and (n // domains) % host == 0:
            return domains
    return None


def cluster_factors(
    name: str, devices_per_node: int | None = None, scale_out_bytes_per_s: float | None = None
) -> tuple[Accelerator, tuple[FactorGraph, ...]]:
    """The accelerator and the factor graphs a cluster name (or a cluster file's path) describes,
    inner axis first (cheap).

    ``devices_per_node`` and ``scale_out_bytes_per_s`` override the GPU catalogue (validation
    records describe their own nodes).
    """
    if is_cluster_file(name):
        acc, factors, _ = file_cluster_factors(read_cluster_file(name), name)
        return acc, factors
    acc, desc = parse_cluster_name(name)
    slices = desc["slices"]
    if acc.kind == "tpu":
        shape = desc.get("shape") or torus_shape(acc, desc["count"])
        if shape is None:
            n = desc["count"]
            raise CatalogueError(
                f"cluster '{name}': {n} {acc.id} chips is not a slice shape "
                f"(valid nearby sizes: {', '.join(map(str, _nearby_sizes(acc, n)))}; "
                f"or give a shape, e.g. '{acc.id}:{_dims(acc.max_slice_shape)}')"
            )
        return acc, torus_factors(acc, shape, slices)
    if slices != 1:
        raise CatalogueError(f"cluster '{name}': multislice (xN) is for TPUs; give the GPU count")
    n = desc["count"]
    per_node = devices_per_node or acc.devices_per_node
    if n % per_node and per_node % n and (spread := partial_domains(acc, n, per_node)):
        return acc, gpu_factors(acc, spread, n // spread, scale_out_bytes_per_s)
    if n % per_node and per_node % n:
        trays = (
            f" or of {acc.devices_per_host}-GPU hosts" if acc.devices_per_host < per_node else ""
        )
        raise CatalogueError(
            f"cluster '{name}': {n} GPUs is not a whole number of {per_node}-GPU nodes{trays} "
            f"(valid nearby sizes: {', '.join(map(str, _nearby_sizes(acc, n, per_node)))})"
        )
    nodes, per_node = (n // per_node, per_node) if n >= per_node else (1, n)
    return acc, gpu_factors(acc, nodes, per_node, scale_out_bytes_per_s)


def resolve_cluster(
    name: str, devices_per_node: int | None = None, scale_out_bytes_per_s: float | None = None
) -> Cluster:
    """The cluster a name describes, its axes derived from the factor graphs (no device graph); a
    path ending in .yaml/.yml is a cluster file (``load_cluster_file``, read again on every call)."""
    if is_cluster_file(name):
        if devices_per_node is not None or scale_out_bytes_per_s is not None:
            raise CatalogueError(
                f"cluster file '{name}': node size and NIC bandwidth come from the file"
            )
        return load_cluster_file(name)
    return _resolve_name(name, devices_per_node, scale_out_bytes_per_s)


@lru_cache(maxsize=64)
def _resolve_name(
    name: str, devices_per_node: int | None, scale_out_bytes_per_s: float | None
) -> Cluster:
    acc, factors = cluster_factors(name, devices_per_node, scale_out_bytes_per_s)
    axes, slices = derive_axes(factors, acc)
    return Cluster(
        name=name, accelerator=acc, axes=axes, num_slices=slices if acc.kind == "tpu" else 1
    )


# calibration rewrites the catalogue; a function attribute, which type checkers do not model
resolve_cluster.cache_clear = _resolve_name.cache_clear  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- cluster files
CLUSTER_FILE_SUFFIXES = (".yaml", ".yml", ".graphml")
GPU_FIELDS = (
    "devices_per_node",
    "nodes",
    "scale_out_gbytes_per_s_per_device",
    "nvlink_gbytes_per_s_per_direction",
    "pod_nodes",
    "oversubscription",
    "rack",
    "planes",
    "sites",
    "wan_gbytes_per_s",
    "wan_latency_us",
)
TPU_FIELDS = ("shape", "slices", "dcn_gbytes_per_s_per_chip")
GENERATED_FIELDS = {"rack", "planes", "sites"}  # networks core.network_generators builds
_Count = Annotated[StrictInt, Field(ge=1, le=MAX_DEVICES)]
_Rate = Annotated[
    StrictFloat, Field(ge=MIN_GBYTES_PER_S, le=MAX_GBYTES_PER_S, allow_inf_nan=False)
]  # GB/s, the range of hardware/*.yaml; an int is accepted too
_Gib = Annotated[StrictFloat, Field(gt=0, le=MAX_HBM_GIB, allow_inf_nan=False)]
_Text = Annotated[StrictStr, Field(min_length=1, max_length=256)]
# The default of a field that may be left out but not given as null: None, which pydantic does
# not validate (defaults are not), typed Any as it is not a value of the field's type
ABSENT: Any = None


class ClusterFile(BaseModel):
    """A custom cluster: ``--cluster PATH.yaml``, or ``cluster:`` as a mapping in a problem file.

    The accelerator is a catalogue id (``accelerator: h100``) or a whole accelerator mapping in the
    ``hardware/*.yaml`` format (``accelerator_spec``, validated as the catalogue is). A GPU cluster
    is ``nodes`` of ``devices_per_node`` GPUs (default: the accelerator's NVLink domain) on a
    rail-optimised fat tree with ``scale_out_gbytes_per_s_per_device`` per GPU, one direction (the
    NIC), in pods of ``pod_nodes`` nodes (32) whose uplinks carry their NICs' bandwidth over
    ``oversubscription`` (1: full bisection; 2 or 4 for a 2:1 or 4:1 tree);
    ``rack`` (nvl72, nvl144) makes the nodes NVLink racks of 72 devices in trays of 4, ``planes``
    spreads each GPU's NIC bandwidth over that many separate fabrics, and ``sites`` (2) splits the
    nodes into two sites joined by ``wan_gbytes_per_s`` each way at ``wan_latency_us`` (docs/usage.md);
    ``nvlink_gbytes_per_s_per_direction`` overrides the NVLink bandwidth. A TPU cluster is a
    torus ``shape`` ([x, y, z], within the largest slice) times ``slices`` joined over DCN at
    ``dcn_gbytes_per_s_per_chip``. ``hbm_gib`` overrides the memory per device, and
    ``host_memory_gib_per_node`` and ``host_cpu_cores_per_node`` one host's memory and cores (what optimizer and
    parameter offload check and run on; the catalogue's where the file is silent). The factor graphs
    are the ones cluster names build (``gpu_factors``, ``torus_factors``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    # absent = None (ABSENT); an explicit null is refused like a wrong type
    name: _Text = ABSENT
    accelerator: _Text = ABSENT
    accelerator_spec: dict = ABSENT
    hbm_gib: _Gib = ABSENT
    host_memory_gib_per_node: Annotated[
        StrictFloat, Field(gt=0, le=MAX_HOST_MEMORY_GIB, allow_inf_nan=False)
    ] = ABSENT
    host_cpu_cores_per_node: Annotated[StrictInt, Field(ge=1, le=MAX_HOST_CPU_CORES)] = ABSENT
    devices_per_node: _Count = ABSENT
    nodes: _Count = ABSENT
    scale_out_gbytes_per_s_per_device: _Rate = ABSENT
    nvlink_gbytes_per_s_per_direction: _Rate = ABSENT
    pod_nodes: _Count = ABSENT
    oversubscription: Annotated[
        StrictFloat, Field(ge=1.0, le=MAX_OVERSUBSCRIPTION, allow_inf_nan=False)
    ] = ABSENT
    rack: Literal["nvl72", "nvl144"] = ABSENT
    planes: Annotated[StrictInt, Field(ge=1, le=MAX_PLANES)] = ABSENT
    sites: Annotated[StrictInt, Field(ge=1, le=MAX_SITES)] = ABSENT
    wan_gbytes_per_s: _Rate = ABSENT
    wan_latency_us: Annotated[
        StrictFloat, Field(ge=0.0, le=MAX_WAN_LATENCY_US, allow_inf_nan=False)
    ] = ABSENT
    shape: Annotated[list[_Count], Field(min_length=1, max_length=3)] = ABSENT
    slices: _Count = ABSENT
    dcn_gbytes_per_s_per_chip: _Rate = ABSENT
    graph: dict = ABSENT  # the devices and links themselves (core.graph_file), instead of the above


@dataclass(frozen=True, kw_only=True, slots=True)
class CustomCluster(Cluster):
    """A cluster described by a cluster file or mapping; ``spec`` is its resolved description
    (``ClusterFile`` fields, defaults filled in), which a result document records as
    ``problem.cluster_spec`` so that export can rebuild the cluster without the file."""

    spec: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def current_spec(self) -> dict | None:
        """``spec`` when it still builds this cluster; None after a change to the cluster (a what-if
        scaling, a calibration), whose description would rebuild the unchanged one."""
        try:
            return (
                self.spec
                if cluster_from_spec(self.spec, "cluster_spec", name=self.name) == self
                else None
            )
        except CatalogueError:
            return None


def is_cluster_file(name: str) -> bool:
    """A --cluster value naming a file (cluster names never end in .yaml/.yml/.graphml)."""
    return isinstance(name, str) and name.strip().lower().endswith(CLUSTER_FILE_SUFFIXES)


def read_cluster_file(path: str) -> dict:
    """A cluster file's mapping; unreadable, not UTF-8 or malformed is one line naming the path."""
    return io.read_yaml(path, error=CatalogueError)


def load_cluster_file(path: str) -> CustomCluster:
    """The cluster a cluster file (or a GraphML device graph) describes; named by its ``name``
    field, else by its path."""
    if path.strip().lower().endswith(".graphml"):
        from layoutsearch.core.graph_file import read_graphml  # networkx: graph files only

        return cluster_from_spec(read_graphml(path), path)
    return cluster_from_spec(read_cluster_file(path), path)


def cluster_from_spec(
    data: Any, file: str, prefix: str = "", name: str | None = None
) -> CustomCluster:
    """The cluster a ``ClusterFile`` mapping describes; every error one line naming ``file`` and the
    field (``prefix`` + key, e.g. ``cluster.nodes`` for a mapping inside a problem file)."""
    if isinstance(data, dict) and data.get("graph") is not None:
        acc, axes, slices, spec = graph_cluster(data, file, prefix)
    else:
        acc, factors, spec = file_cluster_factors(data, file, prefix)
        axes, slices = derive_axes(factors, acc)
    return CustomCluster(
        name=name or spec.get("name") or file,
        accelerator=acc,
        axes=axes,
        num_slices=slices if acc.kind == "tpu" else 1,
        spec=spec,
    )


def graph_cluster(
    data: dict, file: str, prefix: str = ""
) -> tuple[Accelerator, tuple[Axis, ...], int, dict]:
    """The accelerator, the axes and slices read from a ``graph`` (``core.graph_file``), and the
    resolved description; the shape fields of the other forms are refused beside it."""
    from layoutsearch.core.graph_file import GraphSpec, graph_axes  # networkx: graph files only

    f = validated_fields(ClusterFile, data, file, prefix, CatalogueError)
    extra = [key for key in (*GPU_FIELDS, *TPU_FIELDS) if getattr(f, key) is not None]
    if extra:
        raise CatalogueError(
            f"{file}: field '{prefix}{extra[0]}': give the network as 'graph' or as "
            "nodes/shape, not both"
        )
    acc = _file_accelerator(f, file, prefix)
    if f.hbm_gib is not None:
        sources = {**acc.sources, "hbm_gib": f"cluster file {file}: {prefix}hbm_gib"}
        acc = replace(acc, hbm_bytes=f.hbm_gib * GIB, sources=sources)
    graph = validated_fields(GraphSpec, f.graph, file, f"{prefix}graph.", CatalogueError)
    axes, slices = graph_axes(graph, acc, file, prefix)
    if math.prod(a.size for a in axes) > MAX_DEVICES:
        raise CatalogueError(f"{file}: field '{prefix}graph' is over {MAX_DEVICES:,} devices")
    return acc, axes, slices, f.model_dump(exclude_none=True)


def file_cluster_factors(
    data: Any, file: str, prefix: str = ""
) -> tuple[Accelerator, tuple[FactorGraph, ...], dict]:
    """The accelerator, the factor graphs (as a cluster name builds them) and the resolved description
    of a ``ClusterFile`` mapping; the device count is checked against MAX_DEVICES before any is built."""
    f = validated_fields(ClusterFile, data, file, prefix, CatalogueError)

    def where(key: str) -> str:
        return f"{file}: field '{prefix}{key}'"

    acc = _file_accelerator(f, file, prefix)
    gpu = acc.kind == "gpu"
    wrong = [key for key in (TPU_FIELDS if gpu else GPU_FIELDS) if getattr(f, key) is not None]
    if wrong:
        raise CatalogueError(
            f"{where(wrong[0])} is for {'TPU' if gpu else 'GPU'} clusters; {acc.id} is a "
            f"{acc.kind.upper()}: give "
            + ("'nodes' (and 'devices_per_node')" if gpu else "'shape' (and 'slices')")
        )
    sources = dict(acc.sources)
    changes: dict = {}

    def override(key: str, attr: str, value: float | None, unit: float) -> None:
        if value is not None:
            changes[attr] = value * unit
            sources[key] = f"cluster file {file}: {prefix}{key}"

    override("hbm_gib", "hbm_bytes", f.hbm_gib, GIB)
    spec = f.model_dump(exclude_none=True)
    if gpu:
        if f.rack is not None:
            rack = _rack(f, acc, where)
            changes["devices_per_host"] = rack.tray_devices
            changes["link_bytes_per_s_per_direction"] = rack.nvlink_gbytes_per_s * GB
            sources["link_gbytes_per_s_per_direction"] = f"rack {f.rack}: {rack.source}"
        per_node = (f.rack and RACKS[f.rack].devices) or f.devices_per_node or acc.devices_per_node
        if f.nodes is None:
            raise CatalogueError(
                f"{where('nodes')} is missing: the number of nodes of {per_node} {acc.id} GPUs"
            )
        total = f.nodes * per_node
        if total > MAX_DEVICES:
            raise CatalogueError(
                f"{where('nodes')}: {f.nodes:,} nodes x {per_node} GPUs = {total:,} devices is "
                f"over the limit of {MAX_DEVICES:,} devices"
            )
        changes["devices_per_node"] = spec["devices_per_node"] = per_node
        override(
            "nvlink_gbytes_per_s_per_direction",
            "link_bytes_per_s_per_direction",
            f.nvlink_gbytes_per_s_per_direction,
            GB,
        )
        override(
            "scale_out_gbytes_per_s_per_device",
            "scale_out_bytes_per_s_per_direction",
            f.scale_out_gbytes_per_s_per_device,
            GB,
        )
        acc = replace(acc, **changes, sources=sources)
        tree = gpu_factors(
            acc,
            f.nodes,
            per_node,
            pod_nodes=f.pod_nodes or SCALABLE_UNIT_NODES,
            oversubscription=f.oversubscription or 1.0,
            wan=_wan(f, where),
        )
        return acc, tree, spec
    if f.shape is None:
        raise CatalogueError(
            f"{where('shape')} is missing: the torus of one slice, e.g. "
            f"{list(acc.max_slice_shape)} for the largest {acc.id} slice"
        )
    shape = tuple(f.shape)
    if shape != torus_shape(
        acc, math.prod(shape)
    ):  # a shape a count name builds (16x16x32), else as v5p:XxYxZ
        _check_shape(where("shape"), acc, shape)
    slices = spec["slices"] = f.slices or 1
    total = math.prod(shape) * slices
    if total > MAX_DEVICES:
        raise CatalogueError(
            f"{where('slices')}: {math.prod(shape):,} chips ({_dims(shape)}) x {slices:,} slices = "
            f"{total:,} devices is over the limit of {MAX_DEVICES:,} devices"
        )
    override(
        "dcn_gbytes_per_s_per_chip",
        "scale_out_bytes_per_s_per_direction",
        f.dcn_gbytes_per_s_per_chip,
        GB,
    )
    acc = replace(acc, **changes, sources=sources)
    return acc, torus_factors(acc, shape, slices), spec


def _rack(f: ClusterFile, acc: Accelerator, where) -> Rack:
    """The NVLink rack of ``f.rack`` (its NVLink bandwidth unless the file overrides it); a node
    size other than the rack's, or a part without an NVLink switch, is one line naming the field."""
    rack = RACKS[f.rack]
    if f.devices_per_node not in (None, rack.devices):
        raise CatalogueError(
            f"{where('devices_per_node')}: an {f.rack} rack is {rack.devices} devices, got "
            f"{f.devices_per_node}; leave it out"
        )
    if acc.node_fabric != "switch":
        raise CatalogueError(
            f"{where('rack')}: an {f.rack} rack joins its GPUs through NVLink switches; {acc.id} "
            "joins a node's GPUs by a full mesh of peer links"
        )
    return rack


def _wan(f: ClusterFile, where) -> WanLink | None:
    """The sites and their WAN link; the WAN fields without two sites, two sites without the WAN's
    bandwidth, nodes that do not split evenly or a second oversubscribed tier is one line."""
    sites = f.sites or 1
    if sites == 1:
        given = [k for k in ("wan_gbytes_per_s", "wan_latency_us") if getattr(f, k) is not None]
        if given:
            raise CatalogueError(f"{where(given[0])} is for a cluster of 'sites: 2'")
        return None
    if f.wan_gbytes_per_s is None or f.wan_latency_us is None:
        key, what = (
            ("wan_gbytes_per_s", "GB/s each way")
            if f.wan_gbytes_per_s is None
            else ("wan_latency_us", "one-way latency in microseconds")
        )
        raise CatalogueError(f"{where(key)} is missing: the WAN's {what} between the {sites} sites")
    if f.nodes is not None and f.nodes % sites:
        raise CatalogueError(
            f"{where('sites')}: {f.nodes} nodes do not split into {sites} equal sites"
        )
    if (f.oversubscription or 1.0) > 1.0:
        raise CatalogueError(
            f"{where('oversubscription')}: one oversubscribed tier per network; with 'sites' the "
            "WAN is that tier (give a full-bisection fabric in each site)"
        )
    return WanLink(
        sites=sites, bytes_per_s=f.wan_gbytes_per_s * GB, latency_s=f.wan_latency_us * 1e-6
    )


def _file_accelerator(f: ClusterFile, file: str, prefix: str) -> Accelerator:
    """A catalogue accelerator (``accelerator``) or an inline one (``accelerator_spec``), exactly one, with the
    host's memory and cores the file gives (``_with_host``)."""
    if f.accelerator is not None and f.accelerator_spec is not None:
        raise CatalogueError(
            f"{file}: fields '{prefix}accelerator' and '{prefix}accelerator_spec': give one, not both"
        )
    if f.accelerator_spec is not None:
        return _with_host(
            f,
            accelerator_from_dict(f.accelerator_spec, f"{file}: field '{prefix}accelerator_spec'"),
            file,
            prefix,
        )
    known = accelerator_names()
    if f.accelerator is None:
        raise CatalogueError(
            f"{file}: field '{prefix}accelerator' is missing: give 'accelerator' (a catalogue id: "
            f"{', '.join(known)}) or 'accelerator_spec' (a mapping in the hardware/*.yaml format)"
        )
    if f.accelerator not in known:
        raise CatalogueError(
            f"{file}: field '{prefix}accelerator': unknown accelerator '{f.accelerator:.80}'"
            f"{did_you_mean(f.accelerator, known)}; known: {', '.join(known)}"
        )
    return _with_host(f, load_accelerator(f.accelerator), file, prefix)


def _with_host(f: ClusterFile, acc: Accelerator, file: str, prefix: str) -> Accelerator:
    """``acc`` with one host's memory and CPU cores where the file gives them (a host other than the catalogue's
    system, or a part whose hardware file has none), each source naming the file's field."""
    given = {
        key: value
        for key, value in (
            ("host_memory_gib_per_node", f.host_memory_gib_per_node),
            ("host_cpu_cores_per_node", f.host_cpu_cores_per_node),
        )
        if value is not None
    }
    if not given:
        return acc
    changes: dict[str, Any] = {}
    if "host_memory_gib_per_node" in given:
        changes["host_memory_bytes_per_node"] = given["host_memory_gib_per_node"] * GIB
    if "host_cpu_cores_per_node" in given:
        changes["host_cpu_cores_per_node"] = given["host_cpu_cores_per_node"]
    sources = {**acc.sources, **{key: f"cluster file {file}: {prefix}{key}" for key in given}}
    return replace(acc, **changes, sources=sources)


EXAMPLE_CLUSTERS = (
    "v5p-8192",
    "v5p-8960",
    "v5p:16x20x28",
    "v5p-8960x4",
    "v5p-256",
    "v4-4096",
    "v5e-256",
    "v6e-256",
    "tpu7x-9216",
    "a100-80gb-1024",
    "h100-1024",
    "h200-1024",
    "b200-1024",
    "gb200-576",
)
