"""Cluster names resolve to graphs; axes are read back from the graph."""

import pytest

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.topology import cluster_graph, derive_axes, resolve_cluster


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


def test_multislice_adds_a_dcn_axis():
    c = resolve_cluster("v5p-256x4")
    assert c.num_devices == 1024 and c.num_slices == 4
    dcn = c.axis("dcn")
    assert (dcn.size, dcn.kind, dcn.bytes_per_s_per_direction) == (4, "dcn", 6.25e9)


def test_gpu_clusters_have_nvlink_then_scale_out():
    """h100-1024 = 128 nodes of 8 on NVLink, rail fat tree across; gb200-576 = 8 NVL72 domains."""
    c = resolve_cluster("h100-1024")
    assert [(a.name, a.size, a.kind) for a in c.axes] == [("node", 8, "switch"), ("scale_out", 128, "scale_out")]
    assert c.axis("node").bytes_per_s_per_direction == 450e9
    assert c.axis("scale_out").bytes_per_s_per_direction == 50e9
    assert [(a.name, a.size) for a in resolve_cluster("gb200-576").axes] == [("node", 72), ("scale_out", 8)]


def test_graph_has_devices_as_nodes_and_labelled_links():
    g = cluster_graph("v5p-64")
    devices = [n for n, d in g.nodes(data="device") if d]
    assert len(devices) == 64
    assert {d["axis"] for _, _, d in g.edges(data=True)} == {"x", "y", "z"}
    assert all(g.degree(n) == 6 for n in devices)  # 3-D torus with wraparound


def test_inconsistent_graph_is_detected():
    """A torus with one wraparound link removed mixes rings with and without wraparound."""
    acc = load_accelerator("v5p")
    g = cluster_graph("v5p-64")
    u = (0, 0, 0, 0)
    v = (0, 3, 0, 0)
    g.remove_edge(u, v)
    with pytest.raises(CatalogueError, match="axis 'x' mixes rings with and without wraparound"):
        derive_axes(g, acc)


@pytest.mark.parametrize("name, message", [
    ("v5p-1000", r"1000 v5p chips is not a slice shape \(valid nearby sizes: 896, 960, 1024, 1088"),
    ("h100-12", r"12 GPUs is not a whole number of 8-GPU nodes \(valid nearby sizes: 4, 8, 16, 24\)"),
    ("v5e-512", r"512 v5e chips is not a slice shape \(valid nearby sizes: 128, 256"),
    ("v9-8", r"unknown accelerator 'v9'"),
    ("h100", r"expected ACCELERATOR-COUNT"),
    ("v5p:4x4", r"an explicit shape needs 3 dimensions"),
])
def test_impossible_clusters_are_clear_errors(name, message):
    with pytest.raises(CatalogueError, match=message):
        resolve_cluster(name)
