"""Cluster names resolve to per-axis factor graphs; axes are read from the factors, and the device
graph built as their product gives the same axes."""

import functools

import networkx as nx
import pytest

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.device_graph import cluster_graph, to_networkx
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.graph_axes import axes_from_device_graph
from layoutsearch.core.topology import (
    EXAMPLE_CLUSTERS,
    MAX_DEVICES,
    SINGLE_CHIP_AXIS,
    cluster_factors,
    derive_axes,
    resolve_cluster,
    torus_axis_graph,
    valid_sizes,
)


def shape(name):
    return [(a.name, a.size, a.wraparound) for a in resolve_cluster(name).axes]


def test_v5p_names_count_chips():
    """v5p-8192 is 16x16x32 with wraparound; v5p-8960 and v5p:16x20x28 are the full pod."""
    assert shape("v5p-8192") == [("x", 16, True), ("y", 16, True), ("z", 32, True)]
    assert shape("v5p-8960") == [("x", 16, True), ("y", 20, True), ("z", 28, True)]
    assert shape("v5p:16x20x28") == shape("v5p-8960")


def test_small_slices_wrap_only_from_a_full_cube():
    """2x2x4 has no wraparound; 4x4x4 wraps every axis; v5e wraps only axes of 16."""
    assert all(not w for _, _, w in shape("v5p-16"))
    assert all(w for _, _, w in shape("v5p-64"))
    assert shape("v5e-128") == [("x", 8, False), ("y", 16, True)]
    assert shape("v4-4096") == [("x", 16, True), ("y", 16, True), ("z", 16, True)]
    assert shape("v5p-4") == [("x", 2, False), ("y", 2, False)]  # 2x2x1: no axis of one position


def test_multislice_adds_a_dcn_axis():
    c = resolve_cluster("v5p-256x4")
    assert c.num_devices == 1024 and c.num_slices == 4
    dcn = c.axis("dcn")
    assert (dcn.size, dcn.kind, dcn.bytes_per_s_per_direction) == (4, "dcn", 6.25e9)


def test_gpu_clusters_have_nvlink_then_scale_out():
    """h100-1024 = 128 nodes of 8 on NVLink, rail fat tree across; gb200-576 = 8 NVL72 domains."""
    c = resolve_cluster("h100-1024")
    assert [(a.name, a.size, a.kind) for a in c.axes] == [
        ("node", 8, "switch"),
        ("scale_out", 128, "scale_out"),
    ]
    assert c.axis("node").bytes_per_s_per_direction == 450e9
    assert c.axis("scale_out").bytes_per_s_per_direction == 50e9
    assert [(a.name, a.size) for a in resolve_cluster("gb200-576").axes] == [
        ("node", 72),
        ("scale_out", 8),
    ]
    assert (
        resolve_cluster("h100-64", scale_out_bytes_per_s=25e9)
        .axis("scale_out")
        .bytes_per_s_per_direction
        == 25e9
    )
    assert [(a.name, a.size) for a in resolve_cluster("h100-64", devices_per_node=4).axes] == [
        ("node", 4),
        ("scale_out", 16),
    ]


def test_single_device_clusters():
    """One TPU chip: one placeholder torus axis of size 1 without bandwidth; one GPU: an NVLink axis of size 1."""
    for name in ("v5p-1", "v5e-1", "v5p:1x1x1"):
        c = resolve_cluster(name)
        assert c.axes == (SINGLE_CHIP_AXIS,) and c.num_devices == 1 and c.num_slices == 1
    c = resolve_cluster("h100-1")
    assert [(a.name, a.size, a.kind, a.bytes_per_s_per_direction) for a in c.axes] == [
        ("node", 1, "switch", 450e9)
    ]
    assert c.num_devices == 1
    assert [(a.name, a.size) for a in resolve_cluster("v5p-1x4").axes] == [("dcn", 4)]


# ----------------------------------------------------------------------------- factor graphs
def test_factor_graphs_are_small_per_axis_graphs():
    """A torus axis is a cycle (wraparound) or a path; the NVLink domain a star around the NVSwitch."""
    _, (x, y, z) = cluster_factors("v5p-16")
    assert [f.graph["axis"] for f in (x, y, z)] == ["x", "y", "z"]
    assert nx.is_isomorphic(to_networkx(z), nx.path_graph(4))
    _, (x, y, z) = cluster_factors("v5p-64")
    assert nx.is_isomorphic(to_networkx(x), nx.cycle_graph(4))
    assert {d["bytes_per_s_per_direction"] for *_, d in x.edges(data=True)} == {90e9}
    _, (nvlink, fat_tree) = cluster_factors("h100-512")
    assert nvlink.graph["kind"] == "switch" and list(nvlink.edges()) == [
        (range(8), ("nvswitch",))
    ]  # a star, one run
    assert set(fat_tree.edges()) == {
        (range(64), ("leaf", range(2))),
        (("leaf", range(2)), ("spine",)),
    }
    _, (_, fat_tree) = cluster_factors(
        "h100-264"
    )  # one full scalable unit of 32 nodes and one of 1
    assert sorted(map(str, fat_tree.nodes)) == [
        "('leaf', range(0, 1))",
        "('leaf', range(1, 2))",
        "('spine',)",
        "range(0, 32)",
        "range(32, 33)",
    ]


@pytest.mark.parametrize(
    "name, devices, most_nodes",
    [
        ("v5p-1x262144", 262_144, 2),
        ("v5p-8960x29", 259_840, 28),
        ("h100-262144", 262_144, 3),
        ("gb200-262080", 262_080, 5),
        ("h100-262136", 262_136, 5),
    ],
)
def test_factors_stay_small_whatever_the_device_count(name, devices, most_nodes):
    """No factor grows with the device count: runs stand for the positions and switches that link alike."""
    acc, factors = cluster_factors(name)
    assert max(f.number_of_nodes() for f in factors) <= most_nodes
    resolve_cluster.cache_clear()
    assert resolve_cluster(name).num_devices == devices


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("v5p-1", {}),
        ("v5p-4", {}),
        ("v5p-16", {}),
        ("v5p-64", {}),
        ("v5p:4x4x8", {}),
        ("v5p:4x8x12", {}),
        ("v5p-8x2", {}),
        ("v5p-64x2", {}),
        ("v5p-1x3", {}),
        ("v4-64", {}),
        ("tpu7x-128", {}),
        ("v5e-1", {}),
        ("v5e-16", {}),
        ("v5e-128", {}),
        ("v6e-256x2", {}),
        ("h100-1", {}),
        ("h100-4", {}),
        ("h100-8", {}),
        ("h100-16", {}),
        ("h100-264", {}),
        ("h100-512", {}),
        ("h100-1288", {}),
        ("a100-80gb-64", {}),
        ("gb200-144", {}),
        ("h100-64", {"devices_per_node": 4, "scale_out_bytes_per_s": 25e9}),
        ("mi300x-8", {}),  # a full mesh of peer links inside the node
        ("mi300x-64", {}),
        ("mi355x-32", {"devices_per_node": 4}),
    ],
)
def test_factor_axes_equal_those_of_the_device_graph(name, kwargs):
    """The axes derived from the factor graphs equal those read from their product by connected components."""
    acc, factors = cluster_factors(name, **kwargs)
    g = cluster_graph(name, **kwargs)
    assert derive_axes(factors, acc) == axes_from_device_graph(g, acc)
    assert resolve_cluster(name, **kwargs).axes == axes_from_device_graph(g, acc)[0]
    assert (
        sum(1 for _, d in g.nodes(data="device") if d)
        == resolve_cluster(name, **kwargs).num_devices
    )


@pytest.mark.parametrize("name", ["v5p-64", "v5p-16", "v5e-128", "v5p:4x8x12"])
def test_device_graph_of_a_slice_is_the_networkx_cartesian_product(name):
    _, factors = cluster_factors(name)
    product = functools.reduce(nx.cartesian_product, map(to_networkx, factors))

    def flat(node):
        return (*flat(node[0]), node[1]) if isinstance(node[0], tuple) else node

    expected = {
        frozenset({(0, *flat(u)), (0, *flat(v))}): d["axis"] for u, v, d in product.edges(data=True)
    }
    g = cluster_graph(name)
    assert {frozenset(e): d["axis"] for *e, d in g.edges(data=True)} == expected


def test_device_graph_has_devices_as_nodes_and_labelled_links():
    g = cluster_graph("v5p-64")
    devices = [n for n, d in g.nodes(data="device") if d]
    assert len(devices) == 64
    assert {d["axis"] for _, _, d in g.edges(data=True)} == {"x", "y", "z"}
    assert all(g.degree(n) == 6 for n in devices)  # 3-D torus with wraparound
    g = cluster_graph("v5p-8x2")
    assert g.degree("dcn") == 16 and not g.nodes["dcn"]["device"]


def test_gpu_device_graph_is_a_rail_optimised_fat_tree():
    """h100-512: 64 nodes with their own NVSwitch; GPU i on the leaf of rail i in its unit; 8 shared spines, each leaf's uplink split over them."""
    g = cluster_graph("h100-512")
    kinds = {}
    for node in g:
        kinds.setdefault(node[0], []).append(node)
    assert {k: len(v) for k, v in kinds.items()} == {
        "gpu": 512,
        "nvswitch": 64,
        "leaf": 16,
        "spine": 8,
    }
    assert set(g[("gpu", 40, 3)]) == {("nvswitch", 40), ("leaf", 1, 3)}
    assert g.degree(("leaf", 1, 3)) == 32 + 8 and g.degree(("spine", 0)) == 16
    # full bisection: a leaf's 32 NICs of 50 GB/s leave over its 8 spine links, 200 GB/s each
    assert g.edges[("leaf", 0, 0), ("spine", 5)]["bytes_per_s_per_direction"] == 32 * 50e9 / 8


def test_inconsistent_device_graph_is_detected():
    """A torus with one wraparound link removed mixes rings with and without wraparound."""
    acc = load_accelerator("v5p")
    g = cluster_graph("v5p-64")
    g.remove_edge((0, 0, 0, 0), (0, 3, 0, 0))
    with pytest.raises(CatalogueError, match="axis 'x' mixes rings with and without wraparound"):
        axes_from_device_graph(g, acc)


def test_inconsistent_factor_graph_is_detected():
    acc = load_accelerator("v5p")
    x = torus_axis_graph("x", 6, True, 90e9, 1e-6)
    x.add_edge(0, 3, axis="x", bytes_per_s_per_direction=90e9, latency_s=1e-6)
    with pytest.raises(
        CatalogueError,
        match="factor graph 'x': a torus axis must be a ring or a line, got 6 positions and 7 links",
    ):
        derive_axes([x], acc)
    y = torus_axis_graph("y", 4, True, 90e9, 1e-6)
    y.add_edge(0, 1, bytes_per_s_per_direction=45e9)
    with pytest.raises(
        CatalogueError, match=r"factor graph 'y': links differ in \(bandwidth, latency\)"
    ):
        derive_axes([y], acc)


# ----------------------------------------------------------------------------- errors and bounds
@pytest.mark.parametrize(
    "name, message",
    [
        (
            "v5p-1000",
            r"1000 v5p chips is not a slice shape \(valid nearby sizes: 896, 960, 1024, 1088;",
        ),
        ("v5p-2", r"2 v5p chips is not a slice shape \(valid nearby sizes: 1, 4, 8;"),
        ("v5p-65536", r"65536 v5p chips is not a slice shape \(valid nearby sizes: 8896, 8960;"),
        (
            "h100-12",
            r"12 GPUs is not a whole number of 8-GPU nodes \(valid nearby sizes: 4, 8, 16, 24\)",
        ),
        (
            "h100-1048572",
            r"1048572 GPUs is not a whole number of 8-GPU nodes \(valid nearby sizes: 1048560, 1048568, 1048576\)",
        ),
        (
            "gb200-98",
            r"98 GPUs is not a whole number of 72-GPU nodes or of 4-GPU hosts \(valid nearby sizes: 92, 96, 100, 104\)",
        ),
        ("v5e-512", r"512 v5e chips is not a slice shape \(valid nearby sizes: 128, 256;"),
        ("v9-8", r"unknown accelerator 'v9'"),
        ("h100", r"expected ACCELERATOR-COUNT"),
        ("v5p:4x4", r"an explicit shape needs 3 dimensions for v5p, got 2"),
        ("v5p:0x4x4", r"every shape dimension must be >= 1, got 0x4x4"),
        ("h100:8x8", r"an explicit shape is for TPUs"),
        ("h100-16x2", r"multislice \(xN\) is for TPUs"),
        (
            "v5p:100x100x100",
            r"shape 100x100x100 does not fit in the largest v5p slice 16x20x28 "
            r"\(sorted 100x100x100 vs 16x20x28\)",
        ),
        (
            "v5p:16x16x32",
            r"shape 16x16x32 does not fit in the largest v5p slice 16x20x28 \(sorted 16x16x32 vs 16x20x28\)",
        ),
        ("v5e:32x8", r"shape 32x8 does not fit in the largest v5e slice 16x16"),
        ("v5p-64x0", r"the number of slices \(xN\) must be >= 1, got 0"),
        ("v5p-0", r"device count must be positive, got 0"),
        (
            "h100-99999999999999999999",
            r"cluster 'h100-99999999999999999999': device count 99,999,999,999,999,999,999 is over the "
            r"limit of 1,048,576 devices",
        ),
        (
            "v5p-100000000",
            r"cluster 'v5p-100000000': device count 100,000,000 is over the limit of 1,048,576 devices",
        ),
        (
            "h100-1048584",
            r"cluster 'h100-1048584': 1,048,584 devices is over the limit of 1,048,576 devices",
        ),
        (
            "v5p-8960x118",
            r"cluster 'v5p-8960x118': 8,960 devices x 118 slices = 1,057,280 devices is over the limit of 1,048,576",
        ),
        (
            "v5p-64x99999999999",
            r"slice count 99,999,999,999 is over the limit of 1,048,576 devices",
        ),
        (
            "v5p:4x4x" + "9" * 5000,
            r"shape dimension 999999999999\.\.\. \(5000 digits\) is over the limit of 1,048,576 devices",
        ),
    ],
)
def test_impossible_clusters_are_clear_one_line_errors(name, message):
    with pytest.raises(CatalogueError, match=message) as err:
        resolve_cluster(name)
    assert "\n" not in str(err.value)


def test_the_limit_itself_resolves():
    assert resolve_cluster("h100-1048576").num_devices == MAX_DEVICES == 1_048_576
    assert resolve_cluster("v5p-8192x128").num_devices == MAX_DEVICES
    assert resolve_cluster("v5p-1x1048576").axes[0].size == MAX_DEVICES


def test_valid_sizes_stop_at_the_device_limit():
    h100 = load_accelerator("h100")
    assert valid_sizes(h100, 40) == [1, 2, 4, 8, 16, 24, 32, 40]
    assert valid_sizes(h100, 10**30)[-1] == MAX_DEVICES
    assert valid_sizes(load_accelerator("v5e"), 100) == [1, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("name", EXAMPLE_CLUSTERS)
def test_example_clusters_resolve(name):
    c = resolve_cluster(name)
    assert c.num_devices > 1 and all(a.size > 1 for a in c.axes)


def test_gb200_partial_nvl72_domains_in_whole_trays():
    """128 GB200 GPUs are 2 NVL72 domains of 64 (16 trays of 4 each), not an error; 100 are 5 of 20."""
    from layoutsearch.core.topology import resolve_cluster as resolve

    assert [(a.name, a.size) for a in resolve("gb200-128").axes] == [("node", 64), ("scale_out", 2)]
    assert [(a.name, a.size) for a in resolve("gb200-100").axes] == [("node", 20), ("scale_out", 5)]
    assert [(a.name, a.size) for a in resolve("gb200-144").axes] == [("node", 72), ("scale_out", 2)]
    with pytest.raises(CatalogueError, match="not a whole number of 8-GPU nodes"):
        resolve("h100-12")  # an H100 host is its whole NVLink domain: no partial nodes
