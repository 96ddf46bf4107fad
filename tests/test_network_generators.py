"""Network generators: NVLink racks (nvl72, nvl144), multi-plane fat trees and two sites over a WAN,
built link by link (core.network_generators) and as factor graphs (a solve); the WAN's share and a
rack boundary costed from routes; cluster-file validation; the named clusters unchanged."""

from collections import Counter

import numpy as np
import pytest
from builders import proven_top
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.device_graph import product_graph
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.graph_axes import axes_from_device_graph, pod_oversubscription
from layoutsearch.core.network_generators import generated_device_graph
from layoutsearch.core.problem import Problem
from layoutsearch.core.routes import heaviest_link
from layoutsearch.core.specs import Workload
from layoutsearch.core.topology import (
    cluster_from_spec,
    file_cluster_factors,
    load_cluster_file,
    resolve_cluster,
)
from layoutsearch.costs import comms
from layoutsearch.search import SearchOptions
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

GB = 1e9
TWO_SITES = {"accelerator": "h100", "nodes": 4, "sites": 2}
WAN = {"wan_gbytes_per_s": 200, "wan_latency_us": 1000}


def link_counts(spec: dict) -> Counter:
    return Counter(axis for *_, axis in generated_device_graph(spec).edges(data="axis"))


def device_rate(spec: dict, axis: str) -> float:
    """Bytes/s one GPU has on ``axis``: the sum of its links with that label."""
    g = generated_device_graph(spec)
    links = g.edges(("gpu", 0, 0), data=True)
    return sum(d["bytes_per_s_per_direction"] for *_, d in links if d["axis"] == axis)


def axes_read_back(spec: dict):
    cluster = cluster_from_spec(spec, "c.yaml")
    return axes_from_device_graph(generated_device_graph(spec), cluster.accelerator)[
        0
    ], cluster.axes


def test_nvl72_rack_links_and_bandwidth():
    """Two GB200 NVL72 racks: 72 GPUs x 18 switch chips x 2 racks = 2,592 NVLink links of 50 GB/s,
    900 GB/s per GPU; one NIC per GPU, 144 links; the axes read back are the file's."""
    spec = {"accelerator": "gb200", "rack": "nvl72", "nodes": 2}
    assert link_counts(spec) == {"node": 2592, "scale_out": 144}
    assert device_rate(spec, "node") == 900 * GB
    read, built = axes_read_back(spec)
    assert read == built
    assert [(a.name, a.size) for a in built] == [("node", 72), ("scale_out", 2)]


def test_nvl72_racks_are_the_named_gb200_cluster():
    """Eight NVL72 racks of GB200 are gb200-576 (same axes), with trays of 4 GPUs per host."""
    cluster = cluster_from_spec({"accelerator": "gb200", "rack": "nvl72", "nodes": 8}, "c.yaml")
    assert cluster.axes == resolve_cluster("gb200-576").axes
    assert cluster.accelerator.devices_per_host == 4


def test_nvl144_is_72_packages_on_nvlink6():
    """nvl144 counts dies: 72 two-die packages per rack at NVLink 6's 3.6 TB/s both ways, i.e.
    1,800 GB/s per device each way (100 GB/s per switch chip), the source saying so."""
    spec = {"accelerator": "gb300", "rack": "nvl144", "nodes": 2}
    cluster = cluster_from_spec(spec, "c.yaml")
    assert cluster.axis("node").size == 72
    assert cluster.axis("node").bytes_per_s_per_direction == 1800 * GB
    assert (
        "144 GPU dies in 72 two-die"
        in cluster.accelerator.sources["link_gbytes_per_s_per_direction"]
    )
    assert device_rate(spec, "node") == 1800 * GB
    assert link_counts(spec)["node"] == 2 * 72 * 18


def test_a_file_nvlink_rate_overrides_the_rack():
    """nvlink_gbytes_per_s_per_direction in the file wins over the rack's NVLink rate."""
    spec = {
        "accelerator": "gb200",
        "rack": "nvl72",
        "nodes": 2,
        "nvlink_gbytes_per_s_per_direction": 600,
    }
    assert cluster_from_spec(spec, "c.yaml").axis("node").bytes_per_s_per_direction == 600 * GB


def test_multi_plane_links_and_bandwidth():
    """64 H100 nodes on 4 planes: 512 GPUs x 4 planes = 2,048 NIC links of 12.5 GB/s (50 per GPU);
    per plane 2 pods x 8 rail leaves each linked to 8 spines = 128 spine links, 512 in all."""
    spec = {"accelerator": "h100", "nodes": 64, "planes": 4}
    assert link_counts(spec) == {"scale_out": 2048, "node": 512, "scale_out_spine": 512}
    assert device_rate(spec, "scale_out") == 50 * GB
    read, built = axes_read_back(spec)
    assert read == built == cluster_from_spec({"accelerator": "h100", "nodes": 64}, "c.yaml").axes


def test_multi_plane_keeps_the_pods_ratio():
    """Two planes of a 4:1 tree: the pods and the ratio read back from the device graph are 32
    nodes and 4, as for one plane."""
    spec = {"accelerator": "h100", "nodes": 64, "planes": 2, "oversubscription": 4.0}
    read, built = axes_read_back(spec)
    assert read == built
    assert (built[1].pod_size, built[1].oversubscription) == (32, 4.0)


def test_routes_give_the_pods_ratio():
    """Every GPU of pod 0 of a 4:1 tree sending to its peer in pod 1: each rail leaf carries 32 NICs
    x 50 GB/s up 8 spine links of 50 GB/s (1,600 / 4 / 8), the heaviest load over capacity 4."""
    acc, factors, _ = file_cluster_factors(
        {"accelerator": "h100", "nodes": 64, "oversubscription": 4.0}, "c.yaml"
    )
    g = product_graph(factors)
    flows = [(("gpu", n, i), ("gpu", n + 32, i), 50 * GB) for n in range(32) for i in range(8)]
    ratio = pod_oversubscription(
        *heaviest_link(g, flows, lambda u, v: g.edges[u, v]["bytes_per_s_per_direction"])
    )
    assert ratio == 4.0


def test_two_sites_links_and_ratio_from_routes():
    """2 sites of 2 H100 nodes: 16 GPUs x 50 GB/s leave a site over a 200 GB/s WAN, ratio 4, the
    same routed on the factor graph (a solve) and on the whole device graph; the WAN link is one,
    and each site's 8 rail leaves link to its border router."""
    spec = {**TWO_SITES, **WAN}
    assert link_counts(spec) == {"node": 32, "scale_out": 32, "site_uplink": 16, "wan": 1}
    read, built = axes_read_back(spec)
    assert read == built
    axis = built[1]
    assert (axis.size, axis.pod_size, axis.oversubscription, axis.pod_latency_s) == (
        4,
        2,
        4.0,
        1e-3,
    )


def test_two_sites_ratio_at_scale():
    """256 H100 nodes in two sites over 1,600 GB/s: 128 x 8 x 50 GB/s / 1,600 = 32."""
    spec = {
        "accelerator": "h100",
        "nodes": 256,
        "sites": 2,
        "wan_gbytes_per_s": 1600,
        "wan_latency_us": 1000,
    }
    axis = cluster_from_spec(spec, "c.yaml").axis("scale_out")
    assert (axis.pod_size, axis.oversubscription) == (128, 32.0)


def test_a_fast_wan_adds_only_latency():
    """A WAN faster than a site's NICs (ratio 1) costs no bandwidth share; a ring that leaves its
    site pays 5 us + 1 ms per step, one that stays 5 us."""
    spec = {**TWO_SITES, "wan_gbytes_per_s": 10000, "wan_latency_us": 1000}
    axis = cluster_from_spec(spec, "c.yaml").axis("scale_out")
    assert axis.oversubscription == 1.0
    spans = comms.Spans(
        axes=(axis,), factor=np.array([[2], [2]]), stride=np.array([[1], [2]])
    )  # nodes {0, 1} in one site; nodes {0, 2} in two
    assert comms.span_latency(spans).tolist() == pytest.approx([5e-6, 1005e-6])


def test_wan_share_reuses_the_pods_rule():
    """Across two sites at ratio 4 (pods of 2 nodes): a ring of 2 interleaved groups keeps
    2 / (4 x 2) = 1/4 of its NIC; an all-to-all over 4 nodes sends half its buffer across and keeps
    1 / (0.5 x 4) = 1/2 (``comms.uplink_share``, the oversubscribed pods' rule)."""
    axis = cluster_from_spec({**TWO_SITES, **WAN}, "c.yaml").axis("scale_out")
    ring = comms.Spans(axes=(axis,), factor=np.array([[2]]), stride=np.array([[2]]))
    a2a = comms.Spans(axes=(axis,), factor=np.array([[4]]), stride=np.array([[1]]))
    c = comms._axis_constants((axis,))
    assert comms.uplink_share(ring, c)[0, 0] == 0.25
    assert comms.uplink_share(a2a, c, all_to_all=True)[0, 0] == 0.5


def test_ep_over_two_nvl72_racks_pays_the_nics_for_the_off_rack_half():
    """EP of 16 as 8 GPUs of a rack x 2 racks: half of each buffer leaves the rack over a 50 GB/s
    NIC at 0.8 efficiency, 0.5 / 40e9 = 1.25e-11 s per byte; inside one rack (EP 16 on NVLink,
    15/16 of it over 720 GB/s) 1.30e-12."""
    axes = cluster_from_spec({"accelerator": "gb200", "rack": "nvl72", "nodes": 8}, "c.yaml").axes
    spans = comms.Spans(
        axes=axes, factor=np.array([[8, 2], [16, 1]]), stride=np.array([[1, 1], [1, 1]])
    )
    per_byte = comms.all_to_all_coefficients_of(spans).seconds_per_byte
    assert per_byte[0] == pytest.approx(0.5 / 40e9)
    assert per_byte[1] == pytest.approx(15 / 16 / 720e9)


def test_tp_never_crosses_the_wan():
    """llama3-8b on 2 sites of 2 H100 nodes: in the five best layouts no tp group leaves its site."""
    from layoutsearch import api

    cluster = cluster_from_spec({**TWO_SITES, **WAN}, "c.yaml")
    result = api.solve("llama3-8b", cluster, top=5, seqs=64)
    assert result.layouts
    for found in result.layouts:
        span = comms.group_span(cluster, found.layout, ("tp",))
        s = comms.Spans.of(span) if span else None
        assert s is None or not comms.leaves_pod(s, comms._axis_constants(s.axes)).any()


def test_cpsat_equals_the_enumerator_on_two_sites():
    """The debug model on 2 sites of 2 nodes of 4 H100s over a slow WAN: CP-SAT and the
    enumerator rank the same three candidates."""
    spec = {**TWO_SITES, "devices_per_node": 4, "wan_gbytes_per_s": 20, "wan_latency_us": 500}
    cluster = cluster_from_spec(spec, "c.yaml")
    problem = Problem.build(
        load_model("debug"), cluster, Workload(global_batch_seqs=32, seq_len=512)
    )
    space = build_space(problem, SearchOptions())
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, _ = proven_top(space, tables, "step-time", 3)
    assert enum and cps == enum


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"rack": "nvl36"}, "field 'rack': Input should be 'nvl72' or 'nvl144' (got 'nvl36')"),
        (
            {"rack": "nvl72", "devices_per_node": 8},
            "field 'devices_per_node': an nvl72 rack is 72 devices, got 8",
        ),
        ({"planes": 0}, "field 'planes': Input should be greater than or equal to 1 (got 0)"),
        ({"sites": 3}, "field 'sites': Input should be less than or equal to 2 (got 3)"),
        ({"sites": 2}, "field 'wan_gbytes_per_s' is missing: the WAN's GB/s each way"),
        ({"sites": 2, "wan_gbytes_per_s": 100}, "field 'wan_latency_us' is missing"),
        ({"wan_gbytes_per_s": 100}, "field 'wan_gbytes_per_s' is for a cluster of 'sites: 2'"),
        ({"sites": 2, **WAN, "nodes": 3}, "field 'sites': 3 nodes do not split into 2 equal sites"),
        (
            {"sites": 2, **WAN, "oversubscription": 2.0},
            "field 'oversubscription': one oversubscribed tier",
        ),
        (
            {"sites": 2, "wan_gbytes_per_s": 100, "wan_latency_us": -1.0},
            "field 'wan_latency_us': Input should be greater than or equal to 0",
        ),
    ],
)
def test_bad_generator_fields_are_one_line(extra, message):
    """Each bad value is one line naming the file and the field."""
    with pytest.raises(CatalogueError) as err:
        cluster_from_spec({"accelerator": "h100", "nodes": 4, **extra}, "c.yaml")
    assert str(err.value).startswith("c.yaml: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_rack_needs_an_nvlink_switch():
    """mi300x's GPUs are joined by a full mesh: an NVLink rack of them is refused, naming the field."""
    with pytest.raises(
        CatalogueError,
        match="field 'rack': an nvl72 rack joins its GPUs through NVLink switches; mi300x",
    ):
        cluster_from_spec({"accelerator": "mi300x", "rack": "nvl72", "nodes": 2}, "c.yaml")


def test_bad_generator_field_exits_2(tmp_path):
    """On the command line a cluster file with three sites exits 2 with the one line."""
    path = tmp_path / "c.yaml"
    path.write_text("accelerator: h100\nnodes: 6\nsites: 3\n")
    r = CliRunner().invoke(app, ["solve", "--model", "llama3-8b", "--cluster", str(path)])
    assert r.exit_code == 2
    assert "field 'sites': Input should be less than or equal to 2 (got 3)" in r.output


@pytest.mark.parametrize(
    "name, axes",
    [
        (
            "h100-1024",
            [("node", 8, 450 * GB, 0, 1.0, 0.0), ("scale_out", 128, 50 * GB, 0, 1.0, 0.0)],
        ),
        (
            "gb200-576",
            [("node", 72, 900 * GB, 0, 1.0, 0.0), ("scale_out", 8, 50 * GB, 0, 1.0, 0.0)],
        ),
        (
            "v5p-8960x4",
            [
                ("x", 16, 90 * GB, 0, 1.0, 0.0),
                ("y", 20, 90 * GB, 0, 1.0, 0.0),
                ("z", 28, 90 * GB, 0, 1.0, 0.0),
                ("dcn", 4, 6.25 * GB, 0, 1.0, 0.0),
            ],
        ),
    ],
)
def test_named_clusters_unchanged(name, axes):
    """The named clusters keep their axes: no pod tier, no WAN latency."""
    got = [
        (
            a.name,
            a.size,
            a.bytes_per_s_per_direction,
            a.pod_size,
            a.oversubscription,
            a.pod_latency_s,
        )
        for a in resolve_cluster(name).axes
    ]
    assert got == axes


def test_a_two_site_graphml_reads_the_wan_from_routes(tmp_path):
    """The two-site device graph written as GraphML (a user's own network) gives the file's
    scale-out axis: pods of 2 nodes, ratio 4 routed on the graph, 1 ms across the WAN."""
    import networkx as nx

    g = generated_device_graph({**TWO_SITES, **WAN})
    h = nx.Graph(accelerator="h100")
    h.add_nodes_from(("-".join(map(str, n)), {"device": d}) for n, d in g.nodes(data="device"))
    for u, v, d in g.edges(data=True):
        h.add_edge(
            "-".join(map(str, u)),
            "-".join(map(str, v)),
            axis=d["axis"],
            gbytes_per_s=d["bytes_per_s_per_direction"] / GB,
            latency_us=round(d["latency_s"] * 1e6, 6),
        )
    path = tmp_path / "two-sites.graphml"
    nx.write_graphml(h, path)
    axis = load_cluster_file(str(path)).axis("scale_out")
    assert (axis.size, axis.pod_size, axis.oversubscription) == (4, 2, 4.0)
    assert axis.pod_latency_s == pytest.approx(1e-3)


def test_a_graph_with_two_wan_links_is_refused():
    """A user's graph whose sites are joined by two WAN links is one line naming the field."""
    links = [
        ["a", "sw0", "node", 450.0, 2.0],
        ["b", "sw1", "node", 450.0, 2.0],
        ["a", "leaf0", "scale_out", 50.0, 5.0],
        ["b", "leaf1", "scale_out", 50.0, 5.0],
        ["leaf0", "leaf1", "wan", 10.0, 1000.0],
        ["sw0", "sw1", "wan", 10.0, 1000.0],
    ]
    spec = {"accelerator": "h100", "graph": {"devices": ["a", "b"], "links": links}}
    with pytest.raises(
        CatalogueError, match="field 'graph': cluster graph: one 'wan' link must join two sites"
    ):
        cluster_from_spec(spec, "c.yaml")


def test_routes_spread_over_the_planes():
    """Two planes of a 4:1 tree, each GPU 25 GB/s on each: pod 0's GPUs sending to pod 1 at their
    50 GB/s split over both planes (ECMP), the heaviest load over capacity 4, not the 8 one plane
    carrying it all would give."""
    g = generated_device_graph(
        {"accelerator": "h100", "nodes": 64, "planes": 2, "oversubscription": 4.0}
    )
    flows = [(("gpu", n, i), ("gpu", n + 32, i), 50 * GB) for n in range(32) for i in range(8)]
    ratio = pod_oversubscription(
        *heaviest_link(g, flows, lambda u, v: g.edges[u, v]["bytes_per_s_per_direction"])
    )
    assert ratio == 4.0


def test_a_pipeline_pays_the_wan_on_its_crossing_hop_only():
    """pp = 4 over the 4 nodes of two sites (ratio 4, pods of 2): 1 of its 3 hops crosses, at the
    ring's share 2 / (4 x 1) = 1/2 of 40 GB/s: (2/3) / 40e9 + (1/3) / 20e9 = (4/3) / 40e9 s per
    byte, and 5 us + 1 ms / 3 per send; inside one site (pp = 2) 1 / 40e9 and 5 us."""
    axis = cluster_from_spec({**TWO_SITES, **WAN}, "c.yaml").axis("scale_out")
    spans = comms.Spans(axes=(axis,), factor=np.array([[4], [2]]), stride=np.array([[1], [1]]))
    sends = comms.send_coefficients_of(spans)
    assert sends.seconds_per_byte.tolist() == pytest.approx([4 / 3 / 40e9, 1 / 40e9])
    assert sends.latency_s.tolist() == pytest.approx([5e-6 + 1e-3 / 3, 5e-6])
