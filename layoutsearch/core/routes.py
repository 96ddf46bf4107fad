"""Contention read from routes: the traffic a set of flows puts on each link of a network graph
(networkx shortest paths, an equal split over equal-cost paths as ECMP spreads it) over the link's
capacity. The heaviest link's load over capacity is the share a flow keeps when all run at once;
the WAN tier of a multi-site cluster takes its ratio from it (``topology.fat_tree_graph``), and
tests read the pods' ratio and the WAN's from a whole device graph the same way. networkx is
imported here only; a solve of a named cluster never imports this module.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

import networkx as nx

from layoutsearch.core.graph_axes import pod_oversubscription
from layoutsearch.core.topology import FactorGraph, members

if TYPE_CHECKING:
    Flow = tuple[Hashable, Hashable, float]  # source, destination, bytes/s


def link_loads(g: nx.Graph, flows: Iterable[Flow]) -> dict[tuple, float]:
    """Bytes/s each flow set puts on each link direction (u, v): every flow split equally over
    its shortest paths (hop count), as ECMP hashes flows over equal-cost paths."""
    loads: dict[tuple, float] = {}
    for src, dst, rate in flows:
        paths = list(nx.all_shortest_paths(g, src, dst))
        for path in paths:
            for u, v in zip(path, path[1:]):
                loads[u, v] = loads.get((u, v), 0.0) + rate / len(paths)
    return loads


def heaviest_load_ratio(
    g: nx.Graph, flows: Iterable[Flow], capacity: Callable[[Hashable, Hashable], float]
) -> float:
    """The largest load over capacity of any link direction (``capacity(u, v)`` in bytes/s), at
    least 1 and to 6 decimals as ``graph_axes.pod_oversubscription`` rounds it."""
    loads = link_loads(g, flows)
    return max(
        (pod_oversubscription(load, capacity(u, v)) for (u, v), load in loads.items()),
        default=1.0,
    )


def _factor_capacity(f: FactorGraph) -> Callable[[Hashable, Hashable], float]:
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
    graph (a handful of nodes, however many devices), the heaviest link's load over capacity."""
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
    return heaviest_load_ratio(g, flows, capacity)
