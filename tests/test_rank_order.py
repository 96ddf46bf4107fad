"""The rank order each export writes so the launched groups are the costed ones (issue 32 point 7)."""

import json

import pytest

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.specs import Layout
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.export import export_document
from layoutsearch.export.rank_order import (
    MEGATRON_ORDERS,
    TORCHTITAN_ORDERS,
    host_of_slot,
    jax_torus_axes,
    launch_order,
    pick_launch,
    placement_digits,
    take,
)

ORDERS = {name: groups for name, (groups, _) in MEGATRON_ORDERS.items()}


def test_tp_inside_a_node_is_on_consecutive_local_ranks():
    """tp(8) in an H100 node, fsdp and pp across: Megatron's default order, hosts in natural order."""
    cluster = resolve_cluster("h100-64")
    layout = Layout(
        tp=8,
        fsdp=4,
        pp=2,
        axes=(("tp", (("node", 8),)), ("fsdp", (("scale_out", 4),)), ("pp", (("scale_out", 2),))),
    )
    launch = pick_launch(cluster, layout, ORDERS)
    assert launch.order == "tp-cp-ep-dp-pp" and launch.natural
    ranks = [
        d
        for name in ("tp", "cp", "fsdp", "dp", "pp")
        for d in placement_digits(cluster, layout)[name]
    ]
    in_host, _ = take(ranks, 8)
    assert [(d.degree, d.axis, d.stride, d.size) for d in in_host] == [("tp", "node", 1, 8)]
    assert host_of_slot(launch, 5) == {"scale_out": 5}


def test_tp4_cp2_in_a_node_keeps_tp_on_local_ranks_0_to_3():
    """tp(4) then cp(2) inside the node: local ranks 0-3 are one tp group (torchtitan too)."""
    cluster = resolve_cluster("h100-16")
    layout = Layout(
        tp=4,
        cp=2,
        fsdp=2,
        zero_stage=3,
        axes=(("tp", (("node", 4),)), ("cp", (("node", 2),)), ("fsdp", (("scale_out", 2),))),
    )
    launch = launch_order(cluster, layout, *next(iter(TORCHTITAN_ORDERS.items())))
    assert launch.natural and launch.devices_per_host == 8
    ranks = [d for name in ("tp", "cp") for d in placement_digits(cluster, layout)[name]]
    assert [(d.degree, d.stride, d.size) for d in ranks] == [("tp", 1, 4), ("cp", 4, 2)]


def test_nvl72_cp_across_racks_needs_an_interleaved_host_order():
    """gb200-576, tp 8 in a rack, cp 2 across racks: slot 2 is rack 1's first tray, not rack 0's third."""
    cluster = resolve_cluster("gb200-576")
    layout = Layout(
        tp=8,
        cp=2,
        fsdp=36,
        zero_stage=3,
        axes=(
            ("tp", (("node", 8),)),
            ("cp", (("scale_out", 2),)),
            ("fsdp", (("node", 9), ("scale_out", 4))),
        ),
    )
    launch = pick_launch(cluster, layout, ORDERS)
    assert launch.order == "tp-cp-ep-dp-pp" and not launch.natural
    assert [d.size for d in launch.host_digits] == [2, 2, 9, 4]
    assert host_of_slot(launch, 1) == {"node": 1, "scale_out": 0}
    assert host_of_slot(launch, 2) == {"node": 0, "scale_out": 1}
    assert host_of_slot(launch, 4) == {"node": 2, "scale_out": 0}


def test_pp_inside_the_node_takes_megatrons_tp_pp_dp_mapping():
    """pp(2) in the node and fsdp across: only tp-cp-ep-pp-dp builds it, in the natural host order."""
    cluster = resolve_cluster("h100-64")
    layout = Layout(
        tp=4,
        fsdp=8,
        pp=2,
        axes=(("tp", (("node", 4),)), ("fsdp", (("scale_out", 8),)), ("pp", (("node", 2),))),
    )
    assert isinstance(
        launch_order(cluster, layout, "tp-cp-ep-dp-pp", ORDERS["tp-cp-ep-dp-pp"]), str
    )
    launch = pick_launch(cluster, layout, ORDERS)
    assert launch.order == "tp-cp-ep-pp-dp" and launch.natural
    assert MEGATRON_ORDERS[launch.order][1] == "--use-tp-pp-dp-mapping"


def test_tp_across_nodes_with_fsdp_inside_is_refused():
    """tp(2) across nodes, fsdp(8) inside: every order puts tp on one host, so no launch builds it."""
    cluster = resolve_cluster("h100-16")
    layout = Layout(
        tp=2,
        fsdp=8,
        zero_stage=3,
        axes=(("tp", (("scale_out", 2),)), ("fsdp", (("node", 8),))),
    )
    found = pick_launch(cluster, layout, ORDERS)
    assert found == (
        "tp-cp-ep-dp-pp puts tp(2) on scale_out x fsdp(4) on node on the 8 GPUs of a host, where "
        "the search costed fsdp(8) on node"
    )


@pytest.fixture(scope="module")
def h100_result(tmp_path_factory):
    from typer.testing import CliRunner

    from layoutsearch.cli import app

    out = CliRunner().invoke(
        app,
        [
            "solve",
            "--model",
            "llama3-8b",
            "--cluster",
            "h100-16",
            "--seqs",
            "64",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_megatron_export_names_the_rank_order_and_refuses_a_swapped_placement(h100_result):
    """The file states the order and host order; hand-written axes with tp across nodes exit as one line."""
    text = export_document(h100_result, "megatron")
    assert "# Rank order: Megatron tp-cp-ep-dp-pp" in text
    assert "list them domain by domain" in text
    doc = json.loads(json.dumps(h100_result))
    record = doc["layouts"][0]
    record["degrees"] = {"dp": 1, "fsdp": 8, "tp": 2, "pp": 1, "cp": 1}
    record["zero_stage"] = 3
    record["axes"] = {"tp": [["scale_out", 2]], "fsdp": [["node", 8]]}
    with pytest.raises(InvalidLayoutError, match="no host order makes Megatron's rank order"):
        export_document(doc, "megatron")


def test_jax_mesh_rule_matches_jax_on_two_slices():
    """JAX's whole-axis rule: (16, 8) on 4x4x8 takes x,y then z; (1024, 8) on 16x16x32 has none."""
    assert jax_torus_axes((4, 4, 8), [16, 8]) == [(0, 1), (2,)]
    assert jax_torus_axes((16, 16, 32), [1024, 8]) is None
