"""The device graph of a cluster (networkx): the product of its factor graphs, built on demand.

``cluster_graph(name)`` builds it (inspection and tests; O(devices)); ``graph_axes.axes_from_device_graph``
reads the axes back from it by connected components, which tests compare with the axes
``topology.derive_axes`` reads from the factors. A solve never builds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import networkx as nx

from layoutsearch.core.topology import (
    GENERATED_FIELDS,
    FactorGraph,
    cluster_factors,
    is_cluster_file,
    members,
    positions,
    read_cluster_file,
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


def cluster_graph(
    name: str, devices_per_node: int | None = None, scale_out_bytes_per_s: float | None = None
) -> nx.Graph:
    """The device graph behind a cluster name, the product of its factor graphs (inspection, tests);
    a cluster file's racks, planes and sites as ``network_generators`` builds them link by link."""
    yaml_file = is_cluster_file(name) and not name.strip().lower().endswith(".graphml")
    if yaml_file and GENERATED_FIELDS & set(read_cluster_file(name)):
        from layoutsearch.core.network_generators import file_device_graph

        return file_device_graph(name)
    return product_graph(cluster_factors(name, devices_per_node, scale_out_bytes_per_s)[1])
