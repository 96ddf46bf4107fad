"""Networks as graphs: oversubscribed fat trees (pods and their uplinks read from the factor graph,
a group's share of the uplinks when it crosses pods, the cluster-file fields) and a user's own
device graph (``graph:`` in a cluster file, or GraphML)."""

import json
from pathlib import Path

import numpy as np
import pytest

from layoutsearch.core.device_graph import product_graph
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.graph_axes import axes_from_device_graph
from layoutsearch.core.specs import Axis
from layoutsearch.core.topology import (
    cluster_from_spec,
    file_cluster_factors,
    load_cluster_file,
    resolve_cluster,
)
from layoutsearch.costs import comms

H100_128_NODES = {"accelerator": "h100", "nodes": 128}


def scale_out(spec: dict) -> Axis:
    return cluster_from_spec(spec, "c.yaml").axis("scale_out")


def test_full_bisection_is_the_named_cluster():
    """Without oversubscription a cluster file's axes equal the name's, with no pod tier."""
    assert cluster_from_spec(H100_128_NODES, "c.yaml").axes == resolve_cluster("h100-1024").axes
    axis = scale_out({**H100_128_NODES, "oversubscription": 1.0})
    assert (axis.pod_size, axis.oversubscription) == (0, 1.0)


@pytest.mark.parametrize(
    "base, pod_nodes, ratio, size",
    [
        (H100_128_NODES, 32, 2.0, 128),
        (H100_128_NODES, 32, 4.0, 128),
        (H100_128_NODES, 16, 3.0, 128),
        ({"accelerator": "gb200", "nodes": 8}, 4, 2.0, 8),  # NVL72 racks: 9 GPUs per rail leaf
    ],
)
def test_pods_and_ratio_are_read_from_the_spine_links(base, pod_nodes, ratio, size):
    """The scale-out axis keeps the NIC's bandwidth and gains the pod size and the ratio, the same
    from the factor graphs and from the device graph built from them."""
    spec = {**base, "pod_nodes": pod_nodes, "oversubscription": ratio}
    axis = scale_out(spec)
    assert axis.bytes_per_s_per_direction == scale_out(base).bytes_per_s_per_direction
    assert (axis.size, axis.pod_size, axis.oversubscription) == (size, pod_nodes, ratio)
    acc, factors, _ = file_cluster_factors(spec, "c.yaml")
    assert axes_from_device_graph(product_graph(factors), acc)[0] == resolve_axes(spec)


def resolve_axes(spec: dict) -> tuple[Axis, ...]:
    return cluster_from_spec(spec, "c.yaml").axes


def test_one_pod_has_no_spine():
    """A cluster within one pod has no uplink to share: no pod tier whatever the ratio."""
    axis = scale_out({"accelerator": "h100", "nodes": 32, "oversubscription": 4.0})
    assert (axis.pod_size, axis.oversubscription) == (0, 1.0)


def shares(axis: Axis, factor: int, stride: int, all_to_all: bool) -> float:
    s = comms.Spans(
        axes=(axis,),
        factor=np.array([[factor]], dtype=np.int64),
        stride=np.array([[stride]], dtype=np.int64),
    )
    return float(comms.uplink_share(s, comms._axis_constants(s.axes), all_to_all)[0, 0])


@pytest.mark.parametrize(
    "ratio, factor, stride, all_to_all, expected",
    [
        (2.0, 128, 1, False, 1.0),  # one contiguous ring: 1 group crosses, 32 / (2 x 1) >= 1
        (2.0, 8, 8, False, 1.0),  # 8 interleaved groups cross: 32 / (2 x 8) = 2 >= 1
        (2.0, 4, 32, False, 0.5),  # one member per pod: all 32 groups cross, 32 / (2 x 32)
        (4.0, 4, 32, False, 0.25),
        (4.0, 8, 16, False, 0.5),  # 16 groups cross a 4:1 pod: 32 / (4 x 16)
        (2.0, 16, 1, False, 1.0),  # inside one pod: no crossing
        (2.0, 128, 1, True, 1 / 1.5),  # 32 of 128 members in the pod: 3/4 out, x R = 1.5
        (4.0, 128, 1, True, 1 / 3.0),  # 3/4 out at 4:1
        (4.0, 4, 32, True, 1 / 3.0),  # one member per pod: 3/4 of the buffer out
        (2.0, 64, 1, True, 1.0),  # 32 of 64 in the pod: 1/2 out, x R = 1
        (4.0, 32, 1, True, 1.0),  # a whole pod, inside it
    ],
)
def test_uplink_share_of_rings_and_alltoalls(ratio, factor, stride, all_to_all, expected):
    """The share of the NIC a member keeps on a 128-node axis with 32-node pods."""
    axis = scale_out({**H100_128_NODES, "oversubscription": ratio})
    assert shares(axis, factor, stride, all_to_all) == pytest.approx(expected)


def test_alltoall_across_a_4to1_tree_takes_three_times_as_long():
    """An expert AllToAll over all 128 nodes: 3/4 of each buffer leaves the pod at a quarter of
    the bandwidth, 3x the full-bisection time (latency apart); a ring over the same nodes is not
    slowed."""
    full = scale_out(H100_128_NODES)
    tree = scale_out({**H100_128_NODES, "oversubscription": 4.0})
    a2a = [comms.all_to_all_time(1e9, (comms.SpanPart(a, 128, 1),)) for a in (full, tree)]
    ring = [comms.all_gather_time(1e9, (comms.SpanPart(a, 128, 1),)) for a in (full, tree)]
    latency = float(comms.span_latency(comms.Spans.of((comms.SpanPart(full, 128, 1),)))[0])
    assert (a2a[1] - latency) / (a2a[0] - latency) == pytest.approx(3.0)
    assert ring[1] == ring[0]


def test_deepseek_v3_keeps_its_expert_groups_inside_a_pod_on_a_4to1_tree(cli_main):
    """At full bisection (h100-2048) the winner's expert groups span 16 nodes; on the example's
    4:1 tree (the same 256 nodes) 2 nodes."""

    def expert_axes(cluster: str) -> list:
        code, out, err = cli_main(
            "solve",
            "--model",
            "deepseek-v3",
            "--cluster",
            cluster,
            "--top",
            "1",
            "--format",
            "json",
        )
        assert code == 0, err
        return json.loads(out)["layouts"][0]["axes"]["ep"]

    assert expert_axes("h100-2048") == [["node", 8], ["scale_out", 16]]
    tree = Path(__file__).parents[1] / "examples" / "oversubscribed-4to1.cluster.yaml"
    assert expert_axes(str(tree)) == [["node", 8], ["scale_out", 2]]


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {**H100_128_NODES, "oversubscription": 0.5},
            "c.yaml: field 'oversubscription'",
        ),
        (
            {**H100_128_NODES, "oversubscription": 64},
            "c.yaml: field 'oversubscription'",
        ),
        ({**H100_128_NODES, "pod_nodes": 0}, "c.yaml: field 'pod_nodes'"),
        (
            {"accelerator": "v5p", "shape": [4, 4, 4], "oversubscription": 2.0},
            "c.yaml: field 'oversubscription' is for GPU clusters",
        ),
    ],
)
def test_bad_oversubscription_fields_are_one_line_errors(spec, message):
    """Out of range, or on a TPU cluster: one CatalogueError naming the file and the field."""
    with pytest.raises(CatalogueError) as err:
        cluster_from_spec(spec, "c.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


# ----------------------------------------------------------------------------- a user's device graph
def graph_spec(name: str, spec: dict) -> dict:
    """The cluster file ``spec`` as a device graph written out link by link (``graph:``)."""
    acc, factors, _ = file_cluster_factors(spec, name)
    g = product_graph(factors)
    return {
        "accelerator": spec["accelerator"],
        "graph": {
            "devices": [str(n) for n, d in g.nodes(data="device") if d],
            "links": [
                [
                    str(u),
                    str(v),
                    d["axis"],
                    d["bytes_per_s_per_direction"] / 1e9,
                    d["latency_s"] * 1e6,
                ]
                for u, v, d in g.edges(data=True)
            ],
        },
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"accelerator": "h100", "nodes": 8},
        {"accelerator": "h100", "nodes": 64, "oversubscription": 2.0},
        {"accelerator": "mi300x", "nodes": 2},  # a full mesh of peer links in the node
        {"accelerator": "v5p", "shape": [4, 4, 8], "slices": 2},
    ],
)
def test_a_graph_written_out_plans_as_the_cluster_it_equals(spec):
    """The device graph of a cluster file, given as devices and links, reads back the same axes
    (sizes, bandwidths, latencies, pods) and slices."""
    mine = cluster_from_spec(graph_spec("g.yaml", spec), "g.yaml")
    built = cluster_from_spec(spec, "c.yaml")
    assert mine.axes == built.axes and mine.num_slices == built.num_slices


def test_a_graphml_file_is_a_cluster(tmp_path):
    """GraphML with the accelerator as a graph attribute, ``device`` on nodes and ``axis``,
    ``gbytes_per_s``, ``latency_us`` on edges: 2 nodes of 2 GPUs on one NVSwitch each, a NIC per
    GPU to one leaf."""
    import networkx as nx

    g = nx.Graph(accelerator="h100", name="tiny")
    for n in range(2):
        for i in range(2):
            gpu = f"gpu{n}{i}"
            g.add_node(gpu, device=True)
            g.add_edge(gpu, f"nvswitch{n}", axis="node", gbytes_per_s=450.0, latency_us=2.0)
            g.add_edge(gpu, "leaf", axis="scale_out", gbytes_per_s=50.0, latency_us=5.0)
    path = tmp_path / "tiny.graphml"
    nx.write_graphml(g, path)
    cluster = load_cluster_file(str(path))
    assert cluster.name == "tiny" and cluster.num_devices == 4
    assert [(a.name, a.size, a.kind, a.bytes_per_s_per_direction) for a in cluster.axes] == [
        ("node", 2, "switch", 450e9),
        ("scale_out", 2, "scale_out", 50e9),
    ]


@pytest.mark.parametrize(
    "graph, message",
    [
        (
            {"devices": ["a", "b"], "links": [["a", "b", "ici", 100.0, 1.0]]},
            "c.yaml: field 'graph'.links[0] ['a', 'b', 'ici']: axis 'ici' is not a GPU link",
        ),
        (
            {"devices": ["a", "b"], "links": [["a", "a", "node", 100.0, 1.0]]},
            "a loop or a link given twice",
        ),
        (
            {"devices": ["a", "b"], "links": [["a", "b", "node", -1.0, 1.0]]},
            "c.yaml: field 'graph.links.0.3'",
        ),
        (
            {"devices": ["a", "b", "c"], "links": [["a", "b", "node", 100.0, 1.0]]},
            "c.yaml: field 'graph': cluster graph:",
        ),
    ],
)
def test_bad_graphs_are_one_line_errors(graph, message):
    """An unknown axis label, a loop, a negative bandwidth or an inconsistent network: one line
    naming the file and the field."""
    with pytest.raises(CatalogueError) as err:
        cluster_from_spec({"accelerator": "h100", "graph": graph}, "c.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_graph_and_nodes_together_are_refused():
    """The network is given one way: 'graph' beside 'nodes' names the field."""
    with pytest.raises(CatalogueError, match="field 'nodes': give the network as 'graph'"):
        cluster_from_spec(
            {"accelerator": "h100", "nodes": 2, "graph": {"devices": ["a"]}}, "c.yaml"
        )
