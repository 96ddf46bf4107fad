"""Contention read from routes: the traffic a set of flows puts on each link of a network graph
(networkx shortest paths, an equal split over equal-cost paths as ECMP spreads it) over the link's
capacity. The heaviest link's load over capacity is the share a flow keeps when all run at once;
the WAN tier of a multi-site cluster takes its ratio from it (``topology.site_ratio``), and
tests read the pods' ratio and the WAN's from a whole device graph the same way. A leaf module:
networkx and nothing of layoutsearch; a solve of a named cluster never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TYPE_CHECKING

import networkx as nx

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


def heaviest_link(
    g: nx.Graph, flows: Iterable[Flow], capacity: Callable[[Hashable, Hashable], float]
) -> tuple[float, float | None]:
    """(load, capacity) in bytes/s of the link direction with the largest load over capacity
    (``capacity(u, v)``); (0, None) without flows. ``graph_axes.pod_oversubscription`` of the pair is
    the share a flow keeps."""
    loads = link_loads(g, flows)
    return max(
        ((load, capacity(u, v)) for (u, v), load in loads.items()),
        key=lambda pair: pair[0] / pair[1],
        default=(0.0, None),
    )
