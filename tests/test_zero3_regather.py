"""ZeRO-3's regathers under recompute (docs/cost_model.md, "ZeRO-3's regathers under recompute"): DeepSpeed's
module hooks gather a module's weights again for its recomputed forward and free them after, unless its backward
comes within ``stage3_max_reuse_distance`` (1e9) parameters; then the backward gathers them a third time."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from builders import proven_as_enumerated, solve_export

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.specs import RECOMPUTE_POLICIES, Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import terms
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import check_export
from layoutsearch.frameworks import PROFILES


def share(model: str, framework: str = "deepspeed", tp: int = 1, policy: str = "full") -> float:
    workload = Workload(global_batch_seqs=64, seq_len=4096, framework=framework)
    by_policy = terms.zero3_regathered_share(load_model(model), workload, tp)
    return float(by_policy[RECOMPUTE_POLICIES.index(policy)])


def test_llama70b_regathers_its_attention_under_full_recompute():
    """One layer's matrices: q and o 8192 x 8192 = 67,108,864, k and v 8192 x 1024 = 8,388,608, gate, up and down
    8192 x 28,672 = 234,881,024. Between gate's recomputed forward and its backward run up and down, recomputed,
    then down and up in the backward: 939,524,096 < 1e9, kept (so are up and down). Between o's: 1,409,286,144,
    freed; so are q, k, v. Regathered: 150,994,944 of 855,638,016."""
    assert share("llama70b") == pytest.approx(0.1764706, abs=1e-7)


def test_llama405b_regathers_all_but_its_down_projection():
    """q and o 16384 x 16384 = 268,435,456, k and v 16384 x 1024 = 16,777,216, gate, up and down 16384 x 53,248 =
    872,415,232. Only down is kept (nothing runs between its recomputed forward and its backward); up has down
    twice between, 1,744,830,464. Regathered: 2,315,255,808 of 3,187,671,040."""
    assert share("llama3-405b") == pytest.approx(0.7263158, abs=1e-7)


def test_tensor_parallel_shards_bring_the_modules_within_the_distance():
    """At tp 8 the 405B's largest span (q's: 2 x (k + v + o + gate + up + down) / 8 = 728,760,320) is under 1e9:
    nothing is regathered. An 8B model's layer is under it at tp 1."""
    assert share("llama3-405b", tp=8) == 0.0
    assert share("llama3-8b") == 0.0


def test_only_a_policy_that_reruns_weighted_modules_and_only_deepspeed():
    """Selective recompute reruns the attention core alone, which has no weights; FSDP units (torchtitan) and
    Megatron-FSDP gather once for both the recomputed forward and the backward."""
    assert share("llama3-405b", policy="selective") == 0.0
    assert share("llama3-405b", framework="torchtitan") == 0.0
    assert share("llama3-405b", framework="megatron") == 0.0


def llama405b_zero3(framework: str):
    problem = Problem.build(
        load_model("llama3-405b"),
        resolve_cluster("h100-1024"),
        Workload(global_batch_seqs=1024, seq_len=4096, framework=framework),
    )
    layout = Layout(fsdp=1024, zero_stage=3, recompute="full", num_microbatches=1)
    return estimate(problem, layout)


def test_the_regathers_slow_the_backward_they_hide_behind(monkeypatch):
    """llama3-405b, ZeRO-3 over 1,024 H100s, one sequence a device: DeepSpeed's and the same profile's step differ
    by the regathers alone, hidden behind the backward, so by the interference they charge: 0.32 (the h100
    class's overlap_interference) x 0.7263158 x 126 layers x one layer's gather. The gather row says so."""
    with_regathers = llama405b_zero3("deepspeed")
    gather = next(c for c in with_regathers.collectives if c["name"] == "fsdp weight gather")
    assert gather["frequency"] == (
        "per layer per microbatch x2.73 (the recomputed forward's regathers)"
    )
    assert with_regathers.time_s["exposed_comm/fsdp"] == pytest.approx(0.0282, abs=1e-3)
    profile = PROFILES["deepspeed"]
    monkeypatch.setitem(PROFILES, "deepspeed", replace(profile, zero3_reuse_distance_params=None))
    without = llama405b_zero3("deepspeed")
    extra = 0.32 * 0.7263158 * 126 * gather["time_s"]
    assert extra == pytest.approx(0.827, abs=0.002)
    assert with_regathers.time_s["step"] - without.time_s["step"] == pytest.approx(extra, rel=1e-6)


def test_cpsat_ranks_deepspeed_zero3_as_the_enumerator():
    """llama3-405b on 256 H100s for DeepSpeed, ZeRO-3 only: CP-SAT's top 3 (full recompute, its regathers costed)
    are the enumerator's, step times included."""
    problem = Problem.build(
        load_model("llama3-405b"),
        resolve_cluster("h100-256"),
        Workload(global_batch_seqs=256, seq_len=4096, framework="deepspeed"),
    )
    proven = proven_as_enumerated(problem, SearchOptions(zero_stages=(3,)), 3, "deepspeed")
    assert {e.layout.recompute for e in proven} == {"full"}


def test_deepspeed_export_writes_the_distance_the_regathers_were_costed_at(tmp_path):
    doc, text = solve_export(
        "llama3-405b", "h100-256", "deepspeed", tmp_path / "ds.json", "--seqs", "256"
    )
    assert doc["layouts"][0]["zero_stage"] == 3
    cfg = json.loads(text)
    assert cfg["zero_optimization"]["stage3_max_reuse_distance"] == 1_000_000_000
    cfg["zero_optimization"]["stage3_max_reuse_distance"] = 500_000_000
    assert check_export("deepspeed", json.dumps(cfg), doc) == [
        "zero_optimization.stage3_max_reuse_distance 500000000 is not the 1000000000 the prediction's ZeRO-3 "
        "regathers were costed at"
    ]
