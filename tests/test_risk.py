"""The ranking's risk order (search.ranking): inside the model's uncertainty of the best step time
a layout an expert would distrust does not win (issue: claims a user can act on)."""

from __future__ import annotations

import numpy as np
import pytest

import layoutsearch as ls
from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.specs import Workload
from layoutsearch.search.ranking import (
    RISK_BAND,
    RISKS,
    headroom_flags,
    headroom_kib,
    risk_flags,
    shape_risk,
    tight_headroom_kib,
)
from layoutsearch.search.space import build_space


def test_the_headroom_threshold_is_the_measured_memory_error_or_2_gib():
    """u = 15.84% (core/uncertainty.yaml): 80 GB usable (78,125,000 KiB) keeps peaks up to
    floor(78,125,000 / 1.1584) = 67,442,161 KiB, headroom 10,682,839 KiB; 16 GB usable: 2,136,568
    KiB; 8 GB usable: 1,068,284 KiB is under the 2 GiB floor, 2,097,152 KiB."""
    assert headroom_kib(80_000_000_000 // 1024) == 10_682_839
    assert headroom_kib(16_000_000_000 // 1024) == 2_136_568
    assert headroom_kib(8_000_000_000 // 1024) == 2_097_152
    assert RISK_BAND == 0.10 and len(RISKS) == 7


def test_the_risk_band_covers_the_models_own_band():
    """RISK_BAND reaches both sides of the dense GPU 80% band (core/uncertainty.yaml bands.gpu: -7.29% .. +9.43% since
    the fits take Huber's loss (2026-12-07; RISK_BAND 9% before), -8.16% .. +7.93% before, -7.02% .. +7.58%
    since the loss's passes are costed, -7.12% .. +7.58% since the materialised scores' passes are counted whole, -8.39% .. +8.31% since the element-wise kernels run
    at their measured rates, -8.78% .. +8.44% before them at 2026-12-06,
    -8.79% .. +8.42% before the Megatron-LM of 2021 waited for its gradient all-reduce), so an in-domain layout inside the band of a riskier winner outranks it; a regenerated band
    that outgrows it fails here."""
    from layoutsearch.core.uncertainty import uncertainty_band

    low, high = uncertainty_band("gpu")
    assert (
        (low, high) == (-0.0729, 0.0943)
    )  # (-0.0816, 0.0793) before the fits took Huber's loss; (-0.0614, 0.08) before two ZeRO-3 records' layouts were corrected (2026-12-07); (-0.0702, 0.0758) before DeepSpeed's ZeRO-3 regathers
    assert RISK_BAND >= max(-low, high)


def test_each_class_of_prediction_ranks_by_risk_inside_its_own_band():
    """The risk band is the half-width of the prediction class's calibrated 80% band, rounded up to a whole
    percent, never under 10%: a dense model on GPUs 10% (-7.29% .. +9.43%), on TPUs 13% (-12.07% .. +11.76%), a
    mixture of experts on GPUs 19% (-18.67% .. +18.36%, core/uncertainty_moe.yaml); an uncalibrated part keeps its
    class's (a borrowed fraction moves every layout alike). The bands are read here from the files themselves."""
    import yaml

    from layoutsearch.core.uncertainty import MOE_PATH, PATH
    from layoutsearch.search.ranking import risk_band

    dense, moe = (yaml.safe_load(path.read_text())["bands"] for path in (PATH, MOE_PATH))
    assert dense == {"gpu": [-0.0729, 0.0943], "tpu": [-0.1207, 0.1176]}
    assert moe["gpu"] == [-0.1867, 0.1836]

    def band(model: str, cluster: str) -> float:
        return risk_band(
            Problem.build(model, cluster, Workload(global_batch_seqs=256, seq_len=4096))
        )

    assert band("llama3-8b", "h100-64") == RISK_BAND == 0.10
    assert band("llama70b", "v5p-256") == 0.13
    assert band("mixtral-8x7b", "h100-64") == band("deepseek-v3", "h800-2048") == 0.19
    assert (
        band("llama3-8b", "mi300x-64") == band("llama3-8b", "b300-64") == 0.10
    )  # borrowed fractions


def test_tight_headroom_is_min_4_gib_or_10_percent_and_weighs_first():
    """The heavier tier: min(4 GiB, 10%): 4,194,304 KiB on 80 GB usable, 1,562,500 KiB (10%) on
    16 GB; a peak 3 GiB under 80 GB carries both headroom risks, 6 GiB under only the second."""
    assert tight_headroom_kib(80_000_000_000 // 1024) == 4_194_304
    assert tight_headroom_kib(16_000_000_000 // 1024) == 1_562_500
    capacity = 80_000_000_000 // 1024
    peaks = [capacity - 3 * 1024 * 1024, capacity - 6 * 1024 * 1024, capacity - 11 * 1024 * 1024]
    tight, low = headroom_flags(peaks, capacity)
    assert tight.tolist() == [1, 0, 0] and low.tolist() == [1, 1, 0]
    assert RISKS[0] == "memory headroom under min(4 GiB, 10% of the usable memory)"


def test_the_main_jobs_context_parallel_fastest_gives_way_to_a_cp_free_layout():
    """llama70b on v5p-8192: the least step time is a cp=2 layout's (0.7919 s; 0.7913 s before
    the loss's passes were costed); within the risk band the
    winner has no context parallelism and keeps TP on the torus (2.1% slower)."""
    run = ls.solve(model="llama70b", cluster="v5p-8192", top=1)
    winner = run.result.layouts[0]
    least = run.result.objective_value
    assert winner.layout.cp == 1 and winner.layout.tp == 8
    assert least == pytest.approx(0.7919, abs=5e-4)
    assert 1.005 < winner.step_time_s / least < 1 + RISK_BAND
    assert run.document["solver"]["status"] == "OPTIMAL"


def test_llama3_405b_at_128k_keeps_tp_inside_a_node():
    """The issue's case: 128 x 131,072 tokens on h100-16384 put tp=16 across InfiniBand for a
    2.3% predicted gain (4.8% at the H200 measurement's physics, still inside the +/-11% band); now tp=8
    stays inside a node and cp crosses instead, 4.3% slower than the fastest (1.1% while ZeRO-2 reduced its
    gradients once per step: that winner ran ZeRO-2 over 16 microbatches, this one ZeRO-1 over 32; 4-6% before
    the interleaved schedule's per-chunk gradient reductions and fill sends, 2026-12-05)."""
    run = ls.solve(model="llama3-405b", cluster="h100-16384", seqs=128, seq_len=131072, top=1)
    record = run.document["layouts"][0]
    assert record["axes"]["tp"] == [["node", 8]]
    assert record["degrees"]["cp"] > 1
    assert 1.04 < record["time_s"]["step"] / run.result.objective_value < 1.05


def test_microbatch_and_cp_risks_follow_their_declared_limits():
    """K > max(64, 8 pp) and cp > 1 are flagged exactly where the declaration says."""
    space = build_space(
        Problem.build("llama3-8b", "h100-64", Workload(global_batch_seqs=1024, seq_len=4096)),
        SearchOptions(),
    )
    r = shape_risk(space)
    pp = space.shapes.pp[space.sk_shape]
    k = np.asarray(space.sk_k)
    assert (r.many_microbatches == (k > np.maximum(64, 8 * pp))).all()
    assert r.many_microbatches.any() and not r.many_microbatches.all()
    assert (r.cp == (space.shapes.cp > 1)).all()
    # a TP group of 16 on nodes of 8 crosses the scale-out network in every placement
    tp16 = np.nonzero(space.shapes.tp == 16)[0]
    assert len(tp16) and (r.slow_tp[tp16] == 1).all()
    flags = risk_flags(space, [0], [0], [0], [0], capacity_kib=10_000_000)
    assert [int(f[0]) for f in flags][0] == 0  # nothing resident: no headroom risk


def test_each_layout_record_names_the_risks_it_carries(capsys):
    """A winner that carries risks says which: Llama 3 405B on 1,024 H100s at 4,096 x 4,096 tokens
    has 512 microbatches of one sequence over pp 16 with 4 chunks (above max(64, 8 x 16)), as Meta's in-node
    fsdp x tp 8 x pp 16 layout, and so does every layout within the 9% risk band of the least step (1,024 over
    pp 32 with cp 2 while the band was 5%, until 2026-12-06; 2,048 over pp 64 with cp 4 until 1F1B's
    steady-state sends were costed, 2026-12-06: 2 x 2,048 of them; 256 over pp 8 and cp 2 with ZeRO-2 until ZeRO-2 reduce-scattered its gradients
    in every microbatch: 256 of them now cost more than holding whole gradients, which takes 128-way model
    parallelism to fit; 512 over pp 16 until the first pipeline stage's memory was its own or a
    middle stage's, 2026-12-05); Qwen3-30B-A3B on 8 H100s at 512 sequences: the least step (24.64 s) leaves
    under 4 GiB free; inside a mixture of experts' 19% risk band (``ranking.risk_band``) every layout is within the
    memory model's measured error of the usable memory, and the winner (76.1 of 82.3 GB, 10.5% slower) carries that
    lighter risk alone (both while the band was 9% for every model, until 2026-12-07), the table saying so with the
    margin that asks for room (the measured error +15.8% of 76.65 GiB usable: 10.5 GiB, rounded up to 11); the main
    job carries none."""
    big = ls.solve(model="llama3-405b", cluster="h100-1024", seqs=4096, top=1)
    first = big.document["layouts"][0]
    assert first["num_microbatches"] == 512 and first["degrees"]["pp"] == 16
    assert (first["degrees"]["tp"], first["degrees"]["cp"]) == (8, 1)
    assert first["risks"] == [RISKS[6]]
    assert ls.solve(top=1).document["layouts"][0]["risks"] == []
    from layoutsearch.cli import main

    assert (
        main(["solve", "-m", "qwen3-30b-a3b", "-c", "h100-8", "--seqs", "512", "--top", "1"]) == 0
    )
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "layout 1 carries 1 risk(s): a predicted peak within the memory model's measured error (+15.8%, "
        "core/uncertainty.yaml) of the usable memory or within 2 GiB of it;" in text
    )
    assert (
        "every layout within 19% of the least step time carries these or heavier ones "
        "(--memory-margin-gib 11 searches those that leave 11 GiB free)" in text
    )


def test_layout_risks_agree_with_the_tables_risk_flags():
    """One rule, two data paths: the risks ``layout_risks`` reads off each ranked layout's estimate
    are the flags the search's tables gave the same candidates (headroom from the KiB tables, slow
    axes from the placement tables), on a memory-bound MoE problem, a pipeline with many
    microbatches and a multi-slice TPU problem."""
    from layoutsearch.core.problem import SearchRequest
    from layoutsearch.search import solve as search_solve
    from layoutsearch.search.ranking import layout_risks, risk_names

    for model, cluster, seqs in (
        ("qwen3-30b-a3b", "h100-8", 512),
        ("llama3-405b", "h100-1024", 4096),
        ("llama70b", "v5p-8960x4", 4480),
    ):
        problem = Problem.build(model, cluster, Workload(global_batch_seqs=seqs, seq_len=4096))
        result = search_solve(problem, SearchRequest(top_k=5, options=SearchOptions()))
        assert result.tables is not None and len(result.layouts) == 5
        for est, (sk, _r, z, o), metric in zip(result.layouts, result.candidates, result.metrics):
            flags = risk_flags(
                result.space,
                np.array([sk]),
                np.array([z]),
                np.array([o]),
                np.array([metric["peak"]]),
                result.tables.capacity_kib,
            )
            expected = tuple(n for n, f in zip(risk_names(), flags) if int(f[0]))
            assert layout_risks(est) == expected, (model, est.layout)


def test_a_zero3_shard_group_over_more_than_64_nodes_is_a_risk(tmp_path):
    """On 128 nodes of one H100 each every fsdp and cp factor crosses the scale-out network: the fsdp x cp group
    spans fsdp x cp nodes, a risk where that is above 64 and the layout runs ZeRO-3 (ZeRO-1 over the same group
    gathers the weights once a step, as the Megatron runs over 96 nodes do). ``layout_risks``, reading the
    estimate's placement, says the same of those candidates."""
    import yaml

    from layoutsearch.costs.estimate import estimate
    from layoutsearch.search.ranking import layout_risks, risk_names

    path = tmp_path / "h100-1x128.yaml"
    path.write_text(yaml.safe_dump({"accelerator": "h100", "devices_per_node": 1, "nodes": 128}))
    problem = Problem.build("llama3-70b", str(path), Workload(global_batch_seqs=1024, seq_len=4096))
    space = build_space(problem, SearchOptions())
    r = shape_risk(space)
    group = space.shapes.fsdp * space.shapes.cp
    assert (r.wide_shard == (group > 64)[:, None]).all()
    assert set(group[r.wide_shard[:, 0] == 1].tolist()) == {128}
    assert r.wide_shard.any() and not r.wide_shard.all()
    name = risk_names()[4]
    assert name == "a ZeRO-3 shard group over more than 64 nodes or slices"
    wide = int(np.flatnonzero((space.shapes.fsdp == 128) & (space.shapes.cp == 1))[0])
    narrow = int(np.flatnonzero((space.shapes.fsdp == 64) & (space.shapes.cp == 1))[0])
    for shape, stage, carried in ((wide, 3, True), (wide, 1, False), (narrow, 3, False)):
        sk = int(np.flatnonzero(space.sk_shape == shape)[0])
        (z,) = np.flatnonzero(space.zero_mask[shape] & (np.arange(space.num_zero) % 4 == stage))[:1]
        flags = risk_flags(space, [sk], [z], [0], [0], capacity_kib=10**9)
        assert int(flags[4][0]) == carried, (shape, stage)
        layout = space.layout(shape, int(space.sk_k[sk]), 0, int(z), 0)
        assert (name in layout_risks(estimate(problem, layout))) == carried, layout


def test_the_zero3_node_limit_is_where_the_development_runs_stop_holding():
    """MAX_ZERO3_NODES rests on tests/data/runs_dev.yaml: its ZeRO-3 GPU runs predicted within 5% span at most 64
    nodes (llm-foundry's FSDP runs, 16 to 64 nodes), and every ZeRO-3 run over 64 nodes (Narayanan et al.'s
    DeepSpeed rows on 80, 96, 140, 192 and 280 nodes: +40%, +17%, +58%, -25%, +15%) misses by more than 10%. A model
    change or a new record that predicts one of those within the band fails here: the limit, and the risk, are then
    to be revisited."""
    import math

    from builders import data_path

    from layoutsearch.search.ranking import MAX_ZERO3_NODES, SLOW_AXIS_KINDS
    from layoutsearch.validation.mapping import record_to_estimate
    from layoutsearch.validation.runs import load_runs

    spans: dict[str, tuple[int, float]] = {}
    for record in load_runs(data_path("runs_dev.yaml")):
        lay = record["layout"]
        if lay["zero_stage"] != 3 or (lay["fsdp"] or 1) * (lay["cp"] or 1) <= 1:
            continue
        _, _, est = record_to_estimate(record)
        if est.cluster.accelerator.kind != "gpu":
            continue
        slow = {a.name for a in est.cluster.axes if a.kind in SLOW_AXIS_KINDS}
        placed = dict(est.layout.placements)
        nodes = math.prod(
            f for d in ("fsdp", "cp") for axis, f in placed.get(d, ()) if axis in slow
        )
        measured = record["measured"]["tokens_per_s_per_device"]
        spans[record["id"]] = (nodes, est.tokens_per_s / est.cluster.num_devices / measured - 1)
    within = [nodes for nodes, error in spans.values() if abs(error) <= 0.05]
    beyond = {i: error for i, (nodes, error) in spans.items() if nodes > MAX_ZERO3_NODES}
    assert MAX_ZERO3_NODES == 64 and max(within) == 64 and len(within) >= 10
    assert sorted(n for n, _ in spans.values() if n > 64) == [80, 96, 140, 192, 280]
    assert all(abs(error) > 0.10 for error in beyond.values()), beyond
    assert all(i.startswith("megatron2021-table2-zero-3-") for i in beyond)
