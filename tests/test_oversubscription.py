"""Oversubscribed fat trees: pods and their uplinks read from the factor graph, a group's share of
the uplinks when it crosses pods (rings and AllToAlls), and the cluster-file fields."""

import json
from pathlib import Path

import numpy as np
import pytest

from layoutsearch.core.device_graph import axes_from_device_graph, product_graph
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.specs import Axis
from layoutsearch.core.topology import cluster_from_spec, file_cluster_factors, resolve_cluster
from layoutsearch.costs import comms

H100_128_NODES = {"accelerator": "h100", "nodes": 128}


def scale_out(spec: dict) -> Axis:
    return cluster_from_spec(spec, "c.yaml").axis("scale_out")


def test_full_bisection_is_the_named_cluster():
    """Without oversubscription a cluster file's axes equal the name's, with no pod tier."""
    assert cluster_from_spec(H100_128_NODES, "c.yaml").axes == resolve_cluster("h100-1024").axes
    axis = scale_out({**H100_128_NODES, "oversubscription": 1.0})
    assert (axis.pod_size, axis.oversubscription) == (0, 1.0)


@pytest.mark.parametrize("pod_nodes, ratio", [(32, 2.0), (32, 4.0), (16, 3.0)])
def test_pods_and_ratio_are_read_from_the_spine_links(pod_nodes, ratio):
    """The scale-out axis keeps the NIC's 50 GB/s and gains the pod size and the ratio, the same
    from the factor graphs and from the device graph built from them."""
    spec = {**H100_128_NODES, "pod_nodes": pod_nodes, "oversubscription": ratio}
    axis = scale_out(spec)
    assert axis.bytes_per_s_per_direction == 50e9
    assert (axis.size, axis.pod_size, axis.oversubscription) == (128, pod_nodes, ratio)
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
