"""Device graphs (networkx) of the networks a cluster file can describe beyond one fat tree: NVLink
racks (``rack: nvl72`` / ``nvl144``), multi-plane scale-out fabrics (``planes``) and two sites
joined by a wide-area link (``sites``, ``wan_gbytes_per_s``, ``wan_latency_us``).

A solve reads the axes from the factor graphs (``topology.file_cluster_factors``); these graphs
are the same networks link by link, for inspection and for tests, which read the axes back from
them (``graph_axes.axes_from_device_graph``: a device's bandwidth on an axis is the sum of its links
to switches) and route flows on them (``routes``). Devices are ('gpu', node, i); every edge carries
``axis``, ``bytes_per_s_per_direction`` and ``latency_s``, as ``device_graph`` builds them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import networkx as nx

from layoutsearch.core.graph_axes import SITE_UPLINK, SPINE_LINK, WAN_LINK
from layoutsearch.core.specs import Accelerator
from layoutsearch.core.topology import (
    MAX_RAILS,
    RACKS,
    SCALABLE_UNIT_NODES,
    Rack,
    WanLink,
    file_cluster_factors,
    link,
    mesh_link_bytes_per_s,
    read_cluster_file,
)
from layoutsearch.core.units import GB


def nvl_rack(g: nx.Graph, node: int, rack: Rack, acc: Accelerator) -> list[tuple]:
    """One NVLink rack as node ``node``: its GPUs, each linked to every one of the rack's NVLink
    switch chips ('nvswitch', node, k) at the device's NVLink bandwidth over the chips (GB200 NVL72:
    18 links of 50 GB/s each way); returns the GPUs."""
    gpus = [("gpu", node, i) for i in range(rack.devices)]
    g.add_nodes_from(gpus, device=True)
    per_chip = acc.link_bytes_per_s_per_direction / rack.switch_chips
    attrs = link("node", per_chip, acc.link_latency_s)
    g.add_edges_from(
        ((gpu, ("nvswitch", node, k)) for gpu in gpus for k in range(rack.switch_chips)), **attrs
    )
    return gpus


def nvlink_node(g: nx.Graph, node: int, acc: Accelerator) -> list[tuple]:
    """One node's NVLink domain as the named clusters have it: a star around its NVSwitch, or a
    full mesh of peer links (AMD); returns the GPUs."""
    n = acc.devices_per_node
    gpus = [("gpu", node, i) for i in range(n)]
    g.add_nodes_from(gpus, device=True)
    if acc.node_fabric == "mesh":
        attrs = link("node", mesh_link_bytes_per_s(acc, n), acc.link_latency_s)
        g.add_edges_from(((a, b) for k, a in enumerate(gpus) for b in gpus[k + 1 :]), **attrs)
    else:
        attrs = link("node", acc.link_bytes_per_s_per_direction, acc.link_latency_s)
        g.add_edges_from(((gpu, ("nvswitch", node)) for gpu in gpus), **attrs)
    return gpus


def multi_plane_fat_tree(
    g: nx.Graph,
    nodes: list[list[tuple]],
    acc: Accelerator,
    *,
    planes: int,
    pod_nodes: int,
    oversubscription: float,
    site: int = 0,
) -> list[tuple]:
    """The rail-optimised fat tree of one site, ``planes`` times over: in plane p, GPU i of a node
    links to its pod's leaf ('leaf', site, p, pod, i mod rails) at the NIC bandwidth over the planes
    (the GPU's bandwidth is the sum over planes); with more than one pod every leaf links to each of
    the plane's rails spines ('spine', site, p, r) at its pods' NIC bandwidth over the
    oversubscription and the rails. Returns the site's top switches (its spines, or its leaves)."""
    per_node = len(nodes[0])
    rails = min(per_node, MAX_RAILS)
    nic = acc.scale_out_bytes_per_s_per_direction / planes
    pods = math.ceil(len(nodes) / pod_nodes)
    uplink = nic * pod_nodes * math.ceil(per_node / rails) / oversubscription / rails
    tops: list[tuple] = []
    for p in range(planes):
        for k, gpus in enumerate(nodes):
            for i, gpu in enumerate(gpus):
                leaf = ("leaf", site, p, k // pod_nodes, i % rails)
                g.add_edge(gpu, leaf, **link("scale_out", nic, acc.scale_out_latency_s))
        leaves = [("leaf", site, p, u, r) for u in range(pods) for r in range(rails)]
        if pods == 1:
            tops += leaves
            continue
        spines = [("spine", site, p, r) for r in range(rails)]
        attrs = link(SPINE_LINK, uplink, acc.scale_out_latency_s)
        g.add_edges_from(((leaf, spine) for leaf in leaves for spine in spines), **attrs)
        tops += spines
    return tops


def wan_join(
    g: nx.Graph, tops: list[list[tuple]], site_nic_bytes_per_s: float, wan: WanLink
) -> None:
    """Each site's top switches link to its border router ('border', s) at full bisection (the
    site's NIC bandwidth ``site_nic_bytes_per_s`` over its tops), and the two borders by the WAN."""
    for site, switches in enumerate(tops):
        attrs = link(SITE_UPLINK, site_nic_bytes_per_s / len(switches), wan.latency_s)
        g.add_edges_from(((top, ("border", site)) for top in switches), **attrs)
    g.add_edge(("border", 0), ("border", 1), **link(WAN_LINK, wan.bytes_per_s, wan.latency_s))


def generated_device_graph(data: dict, file: str = "cluster") -> nx.Graph:
    """The device graph a cluster-file mapping describes (validated as a solve validates it):
    racks or NVLink nodes, the fat tree of each site on its planes, the WAN between sites."""
    acc, _, spec = file_cluster_factors(data, file)
    nodes, sites = spec["nodes"], spec.get("sites", 1)
    g: nx.Graph[Hashable] = nx.Graph()
    rack = RACKS.get(spec.get("rack", ""))
    domains = [nvl_rack(g, n, rack, acc) if rack else nvlink_node(g, n, acc) for n in range(nodes)]
    tops = []
    if nodes > 1:
        per_site = nodes // sites
        for site in range(sites):
            tops.append(
                multi_plane_fat_tree(
                    g,
                    domains[site * per_site : (site + 1) * per_site],
                    acc,
                    planes=spec.get("planes", 1),
                    pod_nodes=spec.get("pod_nodes", SCALABLE_UNIT_NODES),
                    oversubscription=spec.get("oversubscription", 1.0),
                    site=site,
                )
            )
    if sites > 1:
        wan = WanLink(
            sites=sites,
            bytes_per_s=spec["wan_gbytes_per_s"] * GB,
            latency_s=spec["wan_latency_us"] * 1e-6,
        )
        site_nics = nodes // sites * len(domains[0]) * acc.scale_out_bytes_per_s_per_direction
        wan_join(g, tops, site_nics, wan)
    for node in g:
        g.nodes[node].setdefault("device", False)
    return g


def file_device_graph(path: str) -> nx.Graph:
    """``generated_device_graph`` of a cluster file."""
    return generated_device_graph(read_cluster_file(path), path)
