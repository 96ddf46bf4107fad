"""A cluster given as its device graph: ``graph:`` in a cluster file (a list of devices and links),
or a GraphML file (``--cluster PATH.graphml``). The axes are read from the graph by connected
components (``device_graph.axes_from_device_graph``, as tests read those of the built-in clusters),
so a user's network plans exactly as the built-in one it equals. networkx is imported here only.

A link is ``[end, end, axis, GB/s per direction, latency in microseconds]``; the ends are device
ids (``devices``) or switches (any other id). Axis labels: on GPUs ``node`` (NVLink, to the node's
switch or between peers), ``scale_out`` (a GPU's NIC to its leaf switch) and ``scale_out_spine``
(a leaf to a spine: the oversubscription is the NIC bandwidth under a leaf over its spine links'),
and for two sites ``site_uplink`` (a site's top switches to its border router) and one ``wan``
link between the two borders (the ratio is read from routes, ``graph_axes._with_wan``);
on TPUs ``x``, ``y``, ``z`` (torus links between chips) and ``dcn`` (a chip to the DCN fabric).
"""

from __future__ import annotations

from typing import Annotated, Any

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.graph_axes import (
    SITE_UPLINK,
    SPINE_LINK,
    TORUS_AXIS_NAMES,
    WAN_LINK,
    axes_from_device_graph,
)
from layoutsearch.core.specs import Accelerator, Axis
from layoutsearch.core.units import GB, MAX_DEVICES

GPU_LINK_AXES = ("node", "scale_out", SPINE_LINK, SITE_UPLINK, WAN_LINK)
TPU_LINK_AXES = (*TORUS_AXIS_NAMES, "dcn")
MAX_LINKS = 16 * MAX_DEVICES  # a fat tree has a few links per device
MAX_LINK_GBYTES_PER_S = 1e6  # the range of hardware/*.yaml bandwidths
MAX_LINK_LATENCY_US = 1e6

NodeId = StrictStr | StrictInt
Link = tuple[
    NodeId,
    NodeId,
    StrictStr,
    Annotated[StrictFloat, Field(gt=0, le=MAX_LINK_GBYTES_PER_S, allow_inf_nan=False)],
    Annotated[StrictFloat, Field(ge=0, le=MAX_LINK_LATENCY_US, allow_inf_nan=False)],
]


class GraphSpec(BaseModel):
    """The ``graph:`` of a cluster file: its devices and its links (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    devices: Annotated[list[NodeId], Field(min_length=1, max_length=MAX_DEVICES)]
    links: Annotated[list[Link], Field(max_length=MAX_LINKS)] = []


def device_graph(spec: GraphSpec, acc: Accelerator, where: str) -> nx.Graph:
    """The networkx graph of ``spec``; a link with an unknown axis label, a loop or given twice is
    one ``CatalogueError`` line naming ``where`` and the link."""
    allowed = GPU_LINK_AXES if acc.kind == "gpu" else TPU_LINK_AXES
    g: nx.Graph = nx.Graph()
    g.add_nodes_from(spec.devices, device=True)
    if len(g) != len(spec.devices):
        raise CatalogueError(f"{where}.devices: a device id is listed twice")
    for i, (u, v, axis, gbytes_per_s, latency_us) in enumerate(spec.links):
        link = f"{where}.links[{i}] {[u, v, axis]}"
        if axis not in allowed:
            raise CatalogueError(
                f"{link}: axis '{axis:.40}' is not a {acc.kind.upper()} link; give one of "
                + ", ".join(allowed)
            )
        if u == v or g.has_edge(u, v):
            raise CatalogueError(f"{link}: a loop or a link given twice")
        g.add_edge(
            u,
            v,
            axis=axis,
            bytes_per_s_per_direction=gbytes_per_s * GB,
            latency_s=latency_us * 1e-6,
        )
    for node in g:
        g.nodes[node].setdefault("device", False)
    return g


def graph_axes(
    spec: GraphSpec, acc: Accelerator, file: str, prefix: str
) -> tuple[tuple[Axis, ...], int]:
    """The axes and the number of slices (NVLink domains) of the graph, read by connected
    components; a graph that is not a consistent cluster is one line naming the field."""
    where = f"{file}: field '{prefix}graph'"
    g = device_graph(spec, acc, where)
    try:
        return axes_from_device_graph(g, acc)
    except CatalogueError as exc:
        raise CatalogueError(f"{where}: {exc}") from None


def read_graphml(path: str) -> dict:
    """A GraphML file as a cluster-file mapping: the graph's ``accelerator`` (and optional ``name``,
    ``hbm_gib``) attributes, its nodes with ``device`` true as the devices, every edge with its
    ``axis``, ``gbytes_per_s`` and ``latency_us``; malformed is one line naming the path."""
    text = io.read_text(path, error=CatalogueError)
    try:
        g = nx.parse_graphml(text)
    except Exception as exc:  # networkx raises several kinds for a malformed file
        raise CatalogueError(f"{path}: not a GraphML device graph: {exc}"[:300]) from None
    data: dict[str, Any] = {
        key: g.graph[key] for key in ("name", "accelerator", "hbm_gib") if key in g.graph
    }
    try:
        links = [
            [u, v, d["axis"], float(d["gbytes_per_s"]), float(d.get("latency_us", 0.0))]
            for u, v, d in g.edges(data=True)
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise CatalogueError(
            f"{path}: every edge needs 'axis' and 'gbytes_per_s' (and 'latency_us'): {exc}"
        ) from None
    devices = [n for n, d in g.nodes(data="device") if d in (True, "true", "True", 1)]
    data["graph"] = {"devices": devices, "links": links}
    return data
