"""Contention between collectives that run at the same time (docs/cost_model.md "Shared links"):
the share of each link class a group's ring keeps busy (``comms.link_use_of``), checked against
the loads its flows put on the links of the whole device graph (``core.routes``, networkx), and the
delay one group's traffic causes another on their heaviest shared link (``comms.contention_of``,
``contention_s``), with hand-computed numbers; CP-SAT equals the enumerator on an oversubscribed
cluster."""

import numpy as np
import pytest
from builders import proven_top

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.network_generators import generated_device_graph
from layoutsearch.core.problem import Problem
from layoutsearch.core.routes import link_loads
from layoutsearch.core.specs import Workload
from layoutsearch.core.topology import cluster_from_spec, resolve_cluster
from layoutsearch.costs import comms
from layoutsearch.search import SearchOptions
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

GB = 1e9
# 4 H100 nodes in pods of 2 under a 2:1 oversubscribed spine: a pod's uplinks carry one NIC's worth
# per rail (2 nodes x 50 GB/s / 2)
TWO_TO_ONE = {"accelerator": "h100", "nodes": 4, "pod_nodes": 2, "oversubscription": 2.0}
# groups on the scale-out axis (node index = position): all 4 nodes; {0, 2} and {1, 3}, each
# crossing the pods; {0, 1} and {2, 3}, each inside a pod
GROUPS = {"all": (4, 1), "across": (2, 2), "inside": (2, 1)}


def scale_out_spans(axes, factor: int, stride: int) -> comms.Spans:
    return comms.Spans(axes=axes, factor=np.array([[1, factor]]), stride=np.array([[1, stride]]))


def ring_flows(nodes: list[list[int]], gpus: int, rate: float):
    """Each GPU of each group sends to its ring successor (the same GPU of the next node)."""
    return [
        (("gpu", ring[k], i), ("gpu", ring[(k + 1) % len(ring)], i), rate)
        for ring in nodes
        for k in range(len(ring))
        for i in range(gpus)
    ]


def groups_of(factor: int, stride: int, size: int) -> list[list[int]]:
    block = factor * stride
    return [
        [start + k * stride for k in range(factor)]
        for base in range(0, size, block)
        for start in range(base, base + stride)
    ]


def routed_use(g, flows, axis: str) -> float:
    """The heaviest load over capacity among the links labelled ``axis`` (either direction)."""
    loads = link_loads(g, flows)
    return max(
        (
            load / g.edges[u, v]["bytes_per_s_per_direction"]
            for (u, v), load in loads.items()
            if g.edges[u, v]["axis"] == axis
        ),
        default=0.0,
    )


def test_link_columns_of_an_oversubscribed_tree():
    """NVLink port, NIC, and the pods' uplinks."""
    axes = cluster_from_spec(TWO_TO_ONE, "c.yaml").axes
    assert comms.link_columns(axes) == ((0, "port", 0), (1, "port", 0), (1, "uplink", 0))


@pytest.mark.parametrize(
    "group, nic, uplink",
    [
        # ring of 4 nodes, one crossing per pod and rail: NIC full, uplinks 1 x 50 / 50 GB/s
        ("all", 1.0, 1.0),
        # 2 interleaved groups cross together at 2 / (2 x 2) = 1/2 of their NIC, filling the uplinks
        ("across", 0.5, 1.0),
        # inside a pod: NIC full, no uplink
        ("inside", 1.0, 0.0),
    ],
)
def test_link_use_is_what_the_routes_load(group, nic, uplink):
    """On the 2:1 tree the model's link use per class is hand-computed and is what the group's ring
    flows, each GPU sending at its ring rate (NIC x ``uplink_share``), put on the heaviest NIC and
    spine link of the whole device graph (networkx shortest paths, ECMP over the spines)."""
    cluster = cluster_from_spec(TWO_TO_ONE, "c.yaml")
    factor, stride = GROUPS[group]
    s = scale_out_spans(cluster.axes, factor, stride)
    use = comms.link_use_of(s)[0]
    assert use.tolist() == pytest.approx([0.0, nic, uplink])
    share = comms.uplink_share(s, comms._axis_constants(cluster.axes))[0, 1]
    g = generated_device_graph(TWO_TO_ONE)
    flows = ring_flows(groups_of(factor, stride, 4), 8, 50 * GB * share)
    assert routed_use(g, flows, "scale_out") == pytest.approx(nic)
    assert routed_use(g, flows, "scale_out_spine") == pytest.approx(uplink)


def model_delay(
    beside: list[tuple[comms.Spans, float]], b: comms.Spans, t_b: float = 0.0, credit=True
):
    """The model's delay of B (alone t_b) beside the groups of ``beside`` (spans, seconds)."""
    c = comms.contention_of([comms.link_use_of(s) for s, _ in beside], comms.link_use_of(b), credit)
    return float(np.max(comms.contention_s(c, tuple(t for _, t in beside), t_b)))


def routed_delay(g, beside: list[tuple[list, float]], b: tuple[list, float]) -> float:
    """B's delay read off the routes: on each link B's flows load, the link-seconds of every
    collective's flows (load x seconds / capacity), less B's seconds alone; the heaviest link."""
    b_flows, t_b = b
    b_loads = link_loads(g, b_flows)
    others = [(link_loads(g, flows), t) for flows, t in beside]
    worst = 0.0
    for (u, v), load in b_loads.items():
        cap = g.edges[u, v]["bytes_per_s_per_direction"]
        busy = load * t_b / cap + sum(loads.get((u, v), 0.0) * t / cap for loads, t in others)
        worst = max(worst, busy - t_b)
    return worst


@pytest.mark.parametrize(
    "a, t_a, b, t_b, delay",
    [
        # B inside a pod beside A across the pods: A holds half of the NIC B fills: 0.5 x 1 s
        ("across", 1.0, "inside", 1.0, 0.5),
        # A inside beside B across: B's NIC idles half its 2 s, room for A's 1 s: no delay
        ("inside", 1.0, "across", 2.0, 0.0),
        # ... but only 0.5 s of room when B takes 1 s: 1 - 0.5 x 1
        ("inside", 1.0, "across", 1.0, 0.5),
        # both cross: the uplinks serve them in turn, 1 s
        ("all", 1.0, "across", 1.0, 1.0),
    ],
)
def test_delay_on_the_heaviest_shared_link(a, t_a, b, t_b, delay):
    """Two groups sharing the 2:1 tree's NICs and uplinks: the delay A's traffic causes B, by hand,
    from the model's link use and from the routed flows of both rings."""
    cluster = cluster_from_spec(TWO_TO_ONE, "c.yaml")
    spans = {name: scale_out_spans(cluster.axes, *GROUPS[name]) for name in (a, b)}
    assert model_delay([(spans[a], t_a)], spans[b], t_b) == pytest.approx(delay)
    g = generated_device_graph(TWO_TO_ONE)
    c = comms._axis_constants(cluster.axes)

    def flows(name):
        s = scale_out_spans(cluster.axes, *GROUPS[name])
        return ring_flows(groups_of(*GROUPS[name], 4), 8, 50 * GB * comms.uplink_share(s, c)[0, 1])

    assert routed_delay(g, [(flows(a), t_a)], (flows(b), t_b)) == pytest.approx(delay)


def test_nvlink_traffic_fits_where_a_two_level_ring_idles():
    """H100 nodes (NVLink 450 GB/s, NICs 50 GB/s, both at 0.8): a shard group of 4 GPUs 2 apart x
    4 nodes runs its NVLink level at (3/4) / 360e9 s per byte against the NICs' (3/4) / (4 x 40e9),
    so its NVLink ports are busy 160/360 = 4/9 of its time; TP pairs on NVLink for 1 s delay a 0.9 s
    gather by 1 - (5/9) 0.9 = 0.5 s (the old shared-axis check: the whole 1 s)."""
    axes = cluster_from_spec({"accelerator": "h100", "nodes": 4}, "c.yaml").axes
    shard = comms.Spans(axes=axes, factor=np.array([[4, 4]]), stride=np.array([[2, 1]]))
    tp = comms.Spans(axes=axes, factor=np.array([[2, 1]]), stride=np.array([[1, 1]]))
    assert comms.link_use_of(shard)[0].tolist() == pytest.approx([4 / 9, 1.0])
    assert comms.link_use_of(tp)[0].tolist() == pytest.approx([1.0, 0.0])
    assert model_delay([(tp, 1.0)], shard, 0.9) == pytest.approx(0.5)
    # with no spare capacity credited (the gradient reductions' bound) the whole second
    assert model_delay([(tp, 1.0)], shard, 0.9, credit=False) == pytest.approx(1.0)


def test_groups_of_a_full_mesh_use_disjoint_links():
    """MI300X's 8 GPUs as a full mesh: TP pairs (1 apart) use the links of digit 1, CP pairs (2 apart)
    those of digit 2, a shard group of fsdp x cp (4 GPUs 2 apart) digits 2 and 4; the routes of
    their rings on the node's peer links agree: TP does not delay the shard group, CP does (1 s)."""
    axes = cluster_from_spec({"accelerator": "mi300x", "nodes": 2}, "c.yaml").axes
    assert comms.link_columns(axes)[:3] == ((0, "mesh", 1), (0, "mesh", 2), (0, "mesh", 4))

    def node_spans(factor, stride):
        return comms.Spans(
            axes=axes, factor=np.array([[factor, 1]]), stride=np.array([[stride, 1]])
        )

    tp, cp, shard = (node_spans(*fs) for fs in ((2, 1), (2, 2), (4, 2)))
    assert comms.link_use_of(tp)[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert comms.link_use_of(cp)[0].tolist() == [0.0, 1.0, 0.0, 0.0]
    assert comms.link_use_of(shard)[0].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert model_delay([(tp, 1.0)], shard, 1.0) == 0.0
    assert model_delay([(cp, 1.0)], shard, 1.0) == 1.0
    g = generated_device_graph({"accelerator": "mi300x", "nodes": 2})

    def pairs(groups):  # each GPU to its ring successor in node 0
        return {
            (("gpu", 0, r[k]), ("gpu", 0, r[(k + 1) % len(r)]))
            for r in groups
            for k in range(len(r))
        }

    tp_links = {e for e in link_loads(g, [(*p, 1.0) for p in pairs(groups_of(2, 1, 8))])}
    cp_links = {e for e in link_loads(g, [(*p, 1.0) for p in pairs(groups_of(2, 2, 8))])}
    shard_links = {e for e in link_loads(g, [(*p, 1.0) for p in pairs(groups_of(4, 2, 8))])}
    assert not tp_links & shard_links
    assert cp_links & shard_links


def test_torus_groups_on_one_axis_take_turns_and_on_two_run_side_by_side():
    """v5p-8192: TP over z8 and the shard group over z4 x y16 x x16 share every z link (both fill
    it): TP's 1 s delays the gathers 1 s, as the old shared-axis check had it; TP on y (1 s) and CP
    on z (2 s) beside a shard group over y and z load different links: 2 s, not 1 + 2."""
    axes = resolve_cluster("v5p-8192").axes  # x16, y16, z32

    def spans(x, y, z, sx=1, sy=1, sz=1):
        return comms.Spans(axes=axes, factor=np.array([[x, y, z]]), stride=np.array([[sx, sy, sz]]))

    tp, shard = spans(1, 1, 8), spans(16, 16, 4, sz=8)
    assert comms.link_use_of(shard)[0].tolist() == [1.0, 1.0, 1.0]
    assert model_delay([(tp, 1.0)], shard, 0.5) == pytest.approx(1.0)
    tp_y, cp_z, shard_yz = spans(1, 16, 1), spans(1, 1, 2), spans(1, 16, 2)
    assert model_delay([(tp_y, 1.0), (cp_z, 2.0)], shard_yz, 0.5) == pytest.approx(2.0)
    # both on z beside it: the z links serve them in turn, 1 + 2
    tp_z = spans(1, 1, 4, sz=2)
    assert model_delay([(tp_z, 1.0), (cp_z, 2.0)], shard_yz, 0.5) == pytest.approx(3.0)


def test_cpsat_equals_the_enumerator_on_a_two_to_one_tree():
    """The debug model on 4 nodes of 4 H100s in pods of 2 under a 2:1 spine: CP-SAT and the
    enumerator rank the same three candidates."""
    cluster = cluster_from_spec({**TWO_TO_ONE, "devices_per_node": 4}, "c.yaml")
    problem = Problem.build(
        load_model("debug"),
        cluster,
        Workload(global_batch_seqs=32, seq_len=512, tp_comm_overlap=True),
    )
    space = build_space(problem, SearchOptions())
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, _ = proven_top(space, tables, "step-time", 3)
    assert enum and cps == enum


def test_a_class_another_covers_is_left_out_and_orders_interleave():
    """Three link classes of a row: TP loads classes 0 and 2, CP classes 1 and 2, b all three at
    full use: class 2 (both, no spare) covers the others, one slot; 1 s of TP and 2 s of CP delay b
    3 s there. A row with TP on class 0 and CP on class 1 keeps both (2 s). Stacked per order
    (rows x orders), the one-slot order is padded with zeros."""
    tp = np.array([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    cp = np.array([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    b = np.ones((2, 3))
    c = comms.contention_of([tp, cp], b)
    assert len(c.use) == 2
    assert [u.tolist() for u in c.use[0]] == [[1.0, 1.0], [1.0, 0.0]]
    assert [u.tolist() for u in c.use[1]] == [[0.0, 0.0], [0.0, 1.0]]
    assert comms.contention_s(c, (1.0, 2.0), 0.5).tolist() == [3.0, 2.0]
    one = comms.contention_of([tp[:1].repeat(2, 0), cp[:1].repeat(2, 0)], b)
    assert len(one.use) == 1
    both = comms.Contention.stack([c, one])  # rows (0, c), (0, one), (1, c), (1, one)
    assert comms.contention_s(both, (1.0, 2.0), 0.5).tolist() == [3.0, 3.0, 2.0, 3.0]
    assert both.spare is not None and both.spare[1].tolist() == [0.0, 0.0, 0.0, 0.0]
