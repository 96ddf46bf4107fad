"""The device graph of a cluster (networkx): the product of its factor graphs, built on demand.

``cluster_graph(name)`` builds it (inspection and tests; O(devices)); ``axes_from_device_graph``
reads the axes back from it by connected components, which tests compare with the axes
``topology.derive_axes`` reads from the factors. A solve never builds it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import replace

import networkx as nx

from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.specs import Accelerator, Axis, AxisKind
from layoutsearch.core.topology import (
    SINGLE_CHIP_AXIS,
    SPINE_LINK,
    TORUS_AXIS_NAMES,
    FactorGraph,
    cluster_factors,
    members,
    pod_oversubscription,
    positions,
)


def to_networkx(f: FactorGraph) -> nx.Graph:
    """A factor graph as a networkx graph (same graph, node and edge attributes)."""
    g: nx.Graph[Hashable] = nx.Graph(**f.graph)
    g.add_nodes_from(f.nodes(data=True))
    g.add_edges_from(f.edges(data=True))
    return g


def _member_links(f: FactorGraph, u, v) -> list[tuple]:
    """The links one factor edge stands for, position end first when there is one: the longer run
    splits into equal consecutive blocks, one per member of the shorter, block k linking to member k."""
    if f.nodes[v]["device"] and not f.nodes[u]["device"]:
        u, v = v, u
    us, vs = members(u), members(v)
    if len(us) >= len(vs):
        return [(a, vs[k * len(vs) // len(us)]) for k, a in enumerate(us)]
    return [(us[k * len(us) // len(vs)], b) for k, b in enumerate(vs)]


def _hub_links(f: FactorGraph):
    """(position, switch, link data) for every link between a position and a switch."""
    for u, v, data in f.edges(data=True):
        if f.nodes[u]["device"] != f.nodes[v]["device"]:
            for position, switch in _member_links(f, u, v):
                yield position, switch, data


def torus_product(factors: Sequence[FactorGraph]) -> nx.Graph:
    """Chip (slice, x, y, z) per slice and torus position: per slice the Cartesian product of the
    torus axes (a link joins chips one step apart along one axis); every chip links to the DCN fabric."""
    torus = [f for f in factors if f.graph["kind"] == "torus"]
    dcn = [f for f in factors if f.graph["kind"] == "dcn"]
    coords = list(itertools.product(*(positions(f) for f in torus)))
    g: nx.Graph[Hashable] = nx.Graph()
    for s in positions(dcn[0]) if dcn else [0]:
        for c in coords:
            g.add_node((s, *c), device=True)
            for d, f in enumerate(torus):
                for v, data in f.adj[c[d]].items():
                    g.add_edge((s, *c), (s, *c[:d], v, *c[d + 1 :]), **data)
    for s, hub, data in (link for f in dcn for link in _hub_links(f)):
        g.add_edges_from((((s, *c), hub) for c in coords), **data)
    return g


def gpu_product(factors: Sequence[FactorGraph]) -> nx.Graph:
    """GPU ('gpu', node, i) per scale-out position and NVLink position: each node has its own
    NVSwitch; every fat-tree switch is one per rail ('leaf', u, r), ('spine', r); GPU i links to its
    unit's leaf of rail i % rails, and every leaf to every spine."""
    nvlink, *scale_out = factors
    gpus = positions(nvlink)
    g: nx.Graph[Hashable] = nx.Graph()
    for n in positions(scale_out[0]) if scale_out else [0]:
        g.add_nodes_from((("gpu", n, i) for i in gpus), device=True)
        for i, hub, data in _hub_links(nvlink):
            g.add_edge(("gpu", n, i), (*hub, n), **data)
        for i, j, data in nvlink.edges(data=True):  # a full mesh's peer links
            if nvlink.nodes[i]["device"] and nvlink.nodes[j]["device"]:
                g.add_edge(("gpu", n, i), ("gpu", n, j), **data)
    for f in scale_out:
        rails = f.graph["rails"]
        for n, leaf, data in _hub_links(f):
            g.add_edges_from(((("gpu", n, i), (*leaf, i % rails)) for i in gpus), **data)
        for u, v, data in f.edges(data=True):
            if not (f.nodes[u]["device"] or f.nodes[v]["device"]):
                # every rail's leaf links to each of the rails spines: the leaf's uplink over them
                link = {
                    **data,
                    "bytes_per_s_per_direction": data["bytes_per_s_per_direction"] / rails,
                }
                for a, b in _member_links(f, u, v):
                    g.add_edges_from(
                        (((*a, r), (*b, s)) for r in range(rails) for s in range(rails)), **link
                    )
    return g


def product_graph(factors: Sequence[FactorGraph]) -> nx.Graph:
    """The device graph the factor graphs describe; devices have ``device=True``, switches False."""
    gpu = factors[0].graph["kind"] in ("switch", "mesh")
    g = gpu_product(factors) if gpu else torus_product(factors)
    for node in g:
        g.nodes[node].setdefault("device", False)
    return g


# ----------------------------------------------------------------------------- axes from a device graph
def _edges_by_axis(g: nx.Graph) -> dict[str, list[tuple]]:
    by_axis: dict[str, list[tuple]] = {}
    label: str
    for u, v, label in g.edges(data="axis"):
        by_axis.setdefault(label, []).append((u, v))
    return by_axis


def _edge_stats(g: nx.Graph, edges: list[tuple], label: str) -> tuple[float, float]:
    if not edges:
        raise CatalogueError(f"cluster graph has no '{label}' edge")
    data = g.edges[edges[0]]
    return data["bytes_per_s_per_direction"], data["latency_s"]


def _measured_axis(
    g: nx.Graph,
    by_axis: dict[str, list[tuple]],
    name: str,
    *,
    size: int,
    kind: AxisKind,
    efficiency: float,
    wraparound: bool = False,
) -> Axis:
    """Axis ``name`` of ``size`` members, its bandwidth and latency read from its links in ``g``."""
    bw, lat = _edge_stats(g, by_axis.get(name, []), name)
    return Axis(
        name=name,
        size=size,
        kind=kind,
        bytes_per_s_per_direction=bw,
        wraparound=wraparound,
        latency_s=lat,
        efficiency=efficiency,
    )


def _rings(edges: list[tuple]) -> list[tuple[int, int]]:
    """(nodes, edges) of each connected component of an axis's links."""
    sub: nx.Graph[Hashable] = nx.Graph(edges)
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
        ici: nx.Graph[Hashable] = nx.Graph(
            [e for name in TORUS_AXIS_NAMES for e in by_axis.get(name, [])]
        )
        ici.add_nodes_from(devices)
        slices = nx.number_connected_components(ici)
        for name in TORUS_AXIS_NAMES:
            if name not in by_axis:
                continue
            rings = _rings(by_axis[name])
            sizes = {n for n, _ in rings}
            if len(sizes) != 1:
                raise CatalogueError(
                    f"cluster graph: axis '{name}' has rings of different sizes {sorted(sizes)}"
                )
            size = sizes.pop()
            wrap = {e == n for n, e in rings}
            if len(wrap) != 1:
                raise CatalogueError(
                    f"cluster graph: axis '{name}' mixes rings with and without wraparound"
                )
            axes.append(
                _measured_axis(
                    g,
                    by_axis,
                    name,
                    size=size,
                    kind="torus",
                    efficiency=acc.collective_efficiency,
                    wraparound=wrap.pop() and size > 2,
                )
            )
        if slices > 1:
            axes.append(
                _measured_axis(
                    g, by_axis, "dcn", size=slices, kind="dcn", efficiency=acc.scale_out_efficiency
                )
            )
        axes = [a for a in axes if a.size > 1] or [SINGLE_CHIP_AXIS]
    else:
        nvl: nx.Graph[Hashable] = nx.Graph(by_axis.get("node", []))
        components = list(nx.connected_components(nvl))
        domains = [sum(1 for n in c if g.nodes[n]["device"]) for c in components]
        domain_of = {n: i for i, c in enumerate(components) for n in c}
        if len(set(domains)) != 1:
            raise CatalogueError(
                f"cluster graph: NVLink domains of different sizes {sorted(set(domains))}"
            )
        slices = len(domains)
        axes.append(
            _measured_axis(
                g,
                by_axis,
                "node",
                size=domains[0],
                kind="mesh"
                if all(g.nodes[u]["device"] for e in nvl.edges for u in e)
                else "switch",
                efficiency=acc.collective_efficiency,
            )
        )
        if slices > 1:
            axis = _measured_axis(
                g,
                by_axis,
                "scale_out",
                size=slices,
                kind="scale_out",
                efficiency=acc.scale_out_efficiency,
            )
            axes.append(_with_pods(g, by_axis, axis, domain_of))
    if math.prod(a.size for a in axes) != len(devices):
        raise CatalogueError(
            f"cluster graph: axes {[(a.name, a.size) for a in axes]} do not multiply to {len(devices)} devices"
        )
    return tuple(axes), slices


def _with_pods(g: nx.Graph, by_axis: dict[str, list[tuple]], axis: Axis, domain_of: dict) -> Axis:
    """The scale-out axis with its pods read from the graph: the devices under one leaf switch are
    a connected set of scale-out links, their NVLink domains the pod's nodes; the oversubscription
    is the NIC bandwidth under the leaf over its spine links' (``topology.pod_oversubscription``),
    the largest pod and ratio over the leaves."""
    if SPINE_LINK not in by_axis:
        return axis
    under: nx.Graph[Hashable] = nx.Graph(by_axis["scale_out"])
    spine: nx.Graph[Hashable] = nx.Graph(by_axis[SPINE_LINK])
    pod, ratio = 0, 1.0
    for leaf in nx.connected_components(under):
        devices = [n for n in leaf if g.nodes[n].get("device")]
        nics = sum(g.edges[e]["bytes_per_s_per_direction"] for e in under.edges(leaf))
        uplinks = sum(
            g.edges[e]["bytes_per_s_per_direction"] for e in spine.edges(leaf & spine.nodes)
        )
        pod = max(pod, len({domain_of.get(d, d) for d in devices}))
        ratio = max(ratio, pod_oversubscription(nics, uplinks))
    return replace(axis, pod_size=pod if ratio > 1.0 else 0, oversubscription=ratio)


def cluster_graph(
    name: str, devices_per_node: int | None = None, scale_out_bytes_per_s: float | None = None
) -> nx.Graph:
    """The device graph behind a cluster name, the product of its factor graphs (inspection, tests)."""
    return product_graph(cluster_factors(name, devices_per_node, scale_out_bytes_per_s)[1])
