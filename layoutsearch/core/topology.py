"""Cluster names -> networkx graphs -> the axes a collective group can span.

Devices are graph nodes (``device=True``); NVSwitches, leaf/spine switches and the DCN fabric
are nodes with ``device=False``. Every edge carries ``axis`` (x/y/z, node, scale_out, dcn),
``bytes_per_s_per_direction`` and ``latency_s``. ``derive_axes`` reads the axes back from the
graph (ring sizes, wraparound, bandwidth) and checks the graph is consistent.

Names: ``v5p-8192`` counts chips (16x16x32, as in the design notes; Google's Cloud names count
TensorCores for v4/v5p, so their ``v5p-8192`` is 4096 chips); ``v5p:16x20x28`` gives a shape;
``v5p-8960x4`` is four slices joined over DCN; ``h100-1024`` is 128 nodes of 8 GPUs.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import networkx as nx

from layoutsearch.core.catalogue import accelerator_names, load_accelerator
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.specs import Accelerator, Axis, Cluster

TORUS_AXIS_NAMES = ("x", "y", "z")
SMALL_3D_SHAPES = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4)}
SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
SCALABLE_UNIT_NODES = 32  # H100 reference: 32 nodes under one set of rail leaves


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
    """Device counts the catalogue can lay out for one slice (TPU) or a cluster (GPU), up to limit."""
    if acc.kind == "gpu":
        n = acc.devices_per_node
        small = [d for d in range(1, n) if n % d == 0]
        return small + list(range(n, limit + 1, n))
    return [k for k in range(1, min(limit, _max_slice_chips(acc)) + 1) if torus_shape(acc, k)]


def _nearby(sizes: list[int], n: int) -> str:
    below = [s for s in sizes if s < n][-2:]
    above = [s for s in sizes if s > n][:2]
    return ", ".join(str(s) for s in below + above)


# ----------------------------------------------------------------------------- graphs
def torus_graph(acc: Accelerator, shape: tuple[int, ...], num_slices: int = 1) -> nx.Graph:
    """Chips of ``num_slices`` tori of ``shape``; slices joined through a DCN fabric node."""
    g = nx.Graph()
    wrap = torus_wraparound(acc, shape)
    names = TORUS_AXIS_NAMES[: len(shape)]
    for s in range(num_slices):
        for coord in _coords(shape):
            g.add_node((s, *coord), device=True)
        for coord in _coords(shape):
            for d, size in enumerate(shape):
                nxt = list(coord)
                nxt[d] += 1
                if nxt[d] == size:
                    if not (wrap[d] and size > 2):
                        continue
                    nxt[d] = 0
                g.add_edge((s, *coord), (s, *nxt), axis=names[d],
                           bytes_per_s_per_direction=acc.link_bytes_per_s_per_direction,
                           latency_s=acc.link_latency_s)
    if num_slices > 1:
        g.add_node("dcn", device=False)
        for node in [n for n, dev in g.nodes(data="device") if dev]:
            g.add_edge(node, "dcn", axis="dcn",
                       bytes_per_s_per_direction=acc.scale_out_bytes_per_s_per_direction,
                       latency_s=acc.scale_out_latency_s)
    return g


def _coords(shape: tuple[int, ...]):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in _coords(shape[1:]):
            yield (i, *rest)


def gpu_graph(acc: Accelerator, num_nodes: int, devices_per_node: int,
              scale_out_bytes_per_s: float | None = None) -> nx.Graph:
    """Nodes of GPUs on an NVSwitch, and a rail-optimised fat tree (NIC i -> leaf i) across nodes."""
    g = nx.Graph()
    nic = scale_out_bytes_per_s or acc.scale_out_bytes_per_s_per_direction
    rails = min(devices_per_node, 8)
    for n in range(num_nodes):
        hub = ("nvswitch", n)
        g.add_node(hub, device=False)
        for i in range(devices_per_node):
            gpu = ("gpu", n, i)
            g.add_node(gpu, device=True)
            g.add_edge(gpu, hub, axis="node", bytes_per_s_per_direction=acc.link_bytes_per_s_per_direction,
                       latency_s=acc.link_latency_s)
            if num_nodes > 1:
                leaf = ("leaf", n // SCALABLE_UNIT_NODES, i % rails)
                g.add_node(leaf, device=False)
                g.add_edge(gpu, leaf, axis="scale_out", bytes_per_s_per_direction=nic,
                           latency_s=acc.scale_out_latency_s)
    units = (num_nodes + SCALABLE_UNIT_NODES - 1) // SCALABLE_UNIT_NODES
    if num_nodes > 1 and units > 1:
        for u in range(units):
            for r in range(rails):
                for spine in range(rails):
                    g.add_node(("spine", spine), device=False)
                    g.add_edge(("leaf", u, r), ("spine", spine), axis="scale_out_spine",
                               bytes_per_s_per_direction=nic * SCALABLE_UNIT_NODES, latency_s=acc.scale_out_latency_s)
    return g


# ----------------------------------------------------------------------------- axes
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


def derive_axes(g: nx.Graph, acc: Accelerator) -> tuple[tuple[Axis, ...], int]:
    """Read the axes a collective can span from the graph; check the graph is consistent.

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
        axes = [a for a in axes if a.size > 1] or [Axis(name="x", size=1, kind="torus", bytes_per_s_per_direction=0.0,
                                                          wraparound=False, latency_s=0.0, efficiency=1.0)]
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


# ----------------------------------------------------------------------------- names
_NAME = re.compile(r"^(?P<acc>[a-z0-9.]+(?:-[0-9]+gb)?)(?:-(?P<n>[0-9]+)|:(?P<shape>[0-9]+(?:x[0-9]+)*))(?:x(?P<slices>[0-9]+))?$")


def parse_cluster_name(name: str) -> tuple[Accelerator, dict]:
    """Split a cluster name into its accelerator and a description (shape, slices, or GPU count)."""
    m = _NAME.match(name.strip().lower())
    if not m:
        raise CatalogueError(f"cluster '{name}': expected ACCELERATOR-COUNT (v5p-8192, h100-1024), "
                             f"ACCELERATOR:SHAPE (v5p:16x20x28) or ACCELERATOR-COUNTxSLICES (v5p-8960x4)")
    acc_id = m["acc"]
    if acc_id not in accelerator_names():
        raise CatalogueError(f"cluster '{name}': unknown accelerator '{acc_id}'{did_you_mean(acc_id, accelerator_names())}; "
                             f"known: {', '.join(accelerator_names())}")
    acc = load_accelerator(acc_id)
    slices = int(m["slices"]) if m["slices"] else 1
    if m["shape"]:
        shape = tuple(int(s) for s in m["shape"].split("x"))
        if acc.kind != "tpu" or len(shape) != acc.torus_dims or min(shape) < 1:
            raise CatalogueError(f"cluster '{name}': an explicit shape needs {acc.torus_dims or 'a TPU'} "
                                 f"dimensions for {acc_id}, got {len(shape)}")
        return acc, {"shape": shape, "slices": slices}
    count = int(m["n"])
    if count < 1:
        raise CatalogueError(f"cluster '{name}': device count must be positive, got {count}")
    return acc, {"count": count, "slices": slices}


@lru_cache(maxsize=64)
def resolve_cluster(name: str, devices_per_node: int | None = None,
                    scale_out_bytes_per_s: float | None = None) -> Cluster:
    """Build the graph a cluster name describes and derive its axes.

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
                                 f"(valid nearby sizes: {_nearby(valid_sizes(acc, 4 * n + 64), n)}; "
                                 f"or give a shape, e.g. '{acc.id}:{'x'.join(str(s) for s in acc.max_slice_shape)}')")
        graph = torus_graph(acc, shape, slices)
    else:
        if slices != 1:
            raise CatalogueError(f"cluster '{name}': multislice (xN) is for TPUs; give the GPU count")
        n = desc["count"]
        per_node = devices_per_node or acc.devices_per_node
        if n % per_node and per_node % n:
            raise CatalogueError(f"cluster '{name}': {n} GPUs is not a whole number of {per_node}-GPU nodes "
                                 f"(valid nearby sizes: {_nearby(valid_sizes(acc, 2 * n + per_node), n)})")
        nodes, per_node = (n // per_node, per_node) if n >= per_node else (1, n)
        graph = gpu_graph(acc, nodes, per_node, scale_out_bytes_per_s)
    axes, _ = derive_axes(graph, acc)
    return Cluster(name=name, accelerator=acc, axes=axes, num_slices=slices if acc.kind == "tpu" else 1)


def cluster_graph(name: str) -> nx.Graph:
    """The networkx graph behind a cluster name (for inspection and tests)."""
    acc, desc = parse_cluster_name(name)
    if acc.kind == "tpu":
        shape = desc.get("shape") or torus_shape(acc, desc["count"])
        return torus_graph(acc, shape, desc["slices"])
    per_node = acc.devices_per_node
    n = desc["count"]
    return gpu_graph(acc, max(n // per_node, 1), min(per_node, n))


EXAMPLE_CLUSTERS = ("v5p-8192", "v5p-8960", "v5p:16x20x28", "v5p-8960x4", "v5p-256", "v4-4096", "v5e-256",
                    "v6e-256", "tpu7x-9216", "a100-80gb-1024", "h100-1024", "h200-1024", "b200-1024", "gb200-576")
