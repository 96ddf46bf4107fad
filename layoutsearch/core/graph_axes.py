"""Axes read from a whole device graph (networkx) by connected components: the graph of a
cluster's factor graphs (``core.device_graph``, which tests compare with ``topology.derive_axes``)
or a user's own network (``core.graph_file``). Also the names and the single-chip axis the factor
graphs use. networkx is imported by the functions that read a graph, never at import: a solve
resolves its cluster without it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING

from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.specs import Accelerator, Axis, AxisKind

if TYPE_CHECKING:
    import networkx as nx

TORUS_AXIS_NAMES = ("x", "y", "z")
SPINE_LINK = "scale_out_spine"  # the links from a pod's leaves to the spine layer
WAN_LINK = "wan"  # the wide-area link between two sites' fabrics
SITE_UPLINK = "site_uplink"  # a site's top switches to its WAN border router
# A single TPU chip: no link to span; one axis of size 1 so that a Cluster always has an axis.
SINGLE_CHIP_AXIS = Axis(
    name="x",
    size=1,
    kind="torus",
    bytes_per_s_per_direction=0.0,
    wraparound=False,
    latency_s=0.0,
    efficiency=1.0,
)


def pod_oversubscription(nic_bytes_per_s: float, uplink_bytes_per_s: float | None) -> float:
    """The NIC bandwidth under a leaf over its uplinks', to 6 decimals; 1 for a full bisection (or
    more uplink than NIC bandwidth, or no spine)."""
    if not uplink_bytes_per_s:
        return 1.0
    return max(1.0, round(nic_bytes_per_s / uplink_bytes_per_s, 6))


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
    u, v = edges[0]
    data = g.edges[u, v]
    device = v if g.nodes[v].get("device") else u
    # a device's links to switches add (NVLink switch chips, the planes of a multi-plane fabric)
    to_switches = [
        d["bytes_per_s_per_direction"]
        for _, w, d in g.edges(device, data=True)
        if d["axis"] == label and not g.nodes[w].get("device")
    ]
    if g.nodes[device].get("device") and to_switches:
        return sum(to_switches), data["latency_s"]
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
    import networkx as nx  # only where a graph is read (module docstring)

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
    import networkx as nx  # only where a graph is read (module docstring)

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
            axes.append(_with_wan(g, by_axis, _with_pods(g, by_axis, axis, domain_of), domain_of))
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
    import networkx as nx  # only where a graph is read (module docstring)

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


def _with_wan(g: nx.Graph, by_axis: dict[str, list[tuple]], axis: Axis, domain_of: dict) -> Axis:
    """The scale-out axis of two sites joined by one ``wan`` link: the sites are the graph's two
    parts without it, each site's NVLink domains a pod; the ratio is the heaviest link load over
    capacity when every device sends to the device at the same place in the other site at its NIC
    rate (``routes.heaviest_link``, O(devices) shortest-path searches), the WAN's latency
    paid per step that leaves a site."""
    import networkx as nx  # only where a graph is read (module docstring)

    from layoutsearch.core.routes import heaviest_link

    if WAN_LINK not in by_axis:
        return axis
    wan = by_axis[WAN_LINK]
    cut: nx.Graph[Hashable] = g.copy()
    cut.remove_edges_from(wan)
    parts = [c for c in nx.connected_components(cut) if any(g.nodes[n].get("device") for n in c)]
    # devices in the graph's order, so the k-th of one site pairs with the k-th of the other
    sites = [[n for n, dev in g.nodes(data="device") if dev and n in part] for part in parts]
    if len(wan) != 1 or len(sites) != 2 or len(sites[0]) != len(sites[1]):
        raise CatalogueError(
            f"cluster graph: one '{WAN_LINK}' link must join two sites of as many devices, got "
            f"{len(wan)} links and sites of {sorted(len(s) for s in sites)} devices"
        )

    def nic(device) -> float:  # its scale-out links, on every plane
        links = g.edges(device, data=True)
        return sum(d["bytes_per_s_per_direction"] for *_, d in links if d["axis"] == "scale_out")

    flows = [(a, b, nic(a)) for a, b in zip(*sites)]
    ratio = pod_oversubscription(
        *heaviest_link(g, flows, lambda u, v: g.edges[u, v]["bytes_per_s_per_direction"])
    )
    return replace(
        axis,
        pod_size=len({domain_of.get(d, d) for d in sites[0]}),
        oversubscription=ratio,
        pod_latency_s=g.edges[wan[0]]["latency_s"],
    )
