"""The step formula's typed terms (costs.step): one structure for estimate(), the tables and CP-SAT."""

from dataclasses import fields

import numpy as np
import pytest

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import step
from layoutsearch.costs.estimate import estimate, layout_terms
from layoutsearch.search.tables import Tables

# the fields a search table does not hold: per-policy fractions and the coefficient (arrays and
# a float of their own), and the interference parts that only estimate() gives apart
NOT_TABULATED = {
    "tp_rerun_fraction",
    "cp_rerun_fraction",
    "ep_rerun_fraction",
    "tp_lost_s",
    "tp_rerun_lost_s",
    "cp_lost_s",
    "cp_rerun_lost_s",
    "ep_lost_s",
    "ep_rerun_lost_s",
    "fsdp_fixed_lost_s",
}


def _names(cls) -> set[str]:
    return {f.name for f in fields(cls)}


def _stage(**overrides) -> step.StageTerms:
    values = dict(
        compute_s=1.0,
        tp_s=0.1,
        tp_rerun_s=0.2,
        tp_rerun_fraction=0.5,
        cp_s=0.05,
        cp_rerun_s=0.04,
        cp_rerun_fraction=1.0,
        fsdp_fixed_s=0.03,
        fsdp_backward_s=0.5,
        backward_s=0.4,
        microbatch_zero=1.0,
        eta=0.1,
    )
    return step.StageTerms(**{**values, **overrides})


def _once(**overrides) -> step.StepTerms:
    values = dict(
        reduce_s=0.3,
        reduce_link_busy_s=0.1,
        reduce_window_s=0.25,
        reduce_interference_s=0.03,
        zero_gather_s=0.2,
        gather_window_s=0.5,
        gather_interference_s=0.02,
        reduce_early_s=0.0,
        reduce_early_link_busy_s=0.0,
        reduce_early_window_s=0.0,
        gather_late_s=0.0,
        gather_late_window_s=0.0,
        pp_sends_s=0.01,
        optimizer_s=0.02,
        zero_step_copies_s=0.0,
        step_overhead_s=0.005,
        eta_pct=10,
    )
    return step.StepTerms(**{**values, **overrides})


def test_tables_hold_every_term_under_its_field_name():
    """Every once-per-step term and every tabulated stage term is a Tables field of the same name."""
    tables = _names(Tables)
    assert _names(step.StepTerms) <= tables
    assert _names(step.StageTerms) - NOT_TABULATED <= tables
    assert "eta" in tables and "microbatch_zero" in tables  # held once, not per candidate


def test_each_step_term_enters_the_exposed_and_plain_declarations_once():
    """EXPOSED and PLAIN (what the CP-SAT model states) read every once-per-step field exactly once."""
    names = sorted(_names(step.StepTerms) - {"eta_pct"})
    bit = {name: 1 << i for i, name in enumerate(names)}  # each field's value a distinct bit
    t = step.StepTerms(**bit, eta_pct=0)
    read = [g(t) for h in step.EXPOSED for g in (h.hidden, h.window, h.interference)]
    read += [term(t) for _, term in step.PLAIN]
    assert sum(read) == (1 << len(names)) - 1  # no field twice (a carry), none left out
    assert [h.item for h in step.EXPOSED] == [
        "exposed_comm/reduce",
        "exposed_comm/reduce_early",
        "exposed_comm/zero_gather",
        "exposed_comm/zero_gather_late",
    ]


def test_step_total_of_known_float_terms():
    """A stage of 1.46 s and once-per-step parts 0.165 + 0.02 + 0.035 s make a 1.68 s step."""
    first = _stage()  # 1 + (0.1 + 0.5 x 0.2) + (0.05 + 0.04) + (0.03 + 0.1) + 0.1 x 0.4
    last = _stage(compute_s=0.5)
    assert step.stage_total(first) == pytest.approx(1.46, abs=1e-12)
    stage = step.slowest_stage(first, last)
    parts = step.step_parts(_once(), stage)
    # reductions: max(0, 0.3 + 0.1 - 0.25) = 0.15 exposed, 90% of it unhidden, + 0.03 charged
    assert parts["exposed_comm/reduce"] == pytest.approx(0.165, abs=1e-12)
    assert parts["exposed_comm/zero_gather"] == pytest.approx(0.02, abs=1e-12)  # hidden
    assert step.step_total(_once(), stage) == pytest.approx(1.68, abs=1e-12)


def test_integer_terms_floor_the_interference_taken_off():
    """In quanta, 15 exposed at 10% keep 15 - floor(1.5) = 14; arrays go through elementwise."""
    t = _once(
        reduce_s=np.array([30, 10]),
        reduce_link_busy_s=np.array([10, 0]),
        reduce_window_s=np.array([25, 25]),
        reduce_interference_s=np.array([3, 1]),
        zero_gather_s=np.array([0, 0]),
        gather_window_s=np.array([0, 0]),
        gather_interference_s=np.array([0, 0]),
        pp_sends_s=np.array([1, 1]),
        optimizer_s=np.array([2, 2]),
        step_overhead_s=1,
    )
    parts = step.step_parts(t, np.array([100, 100]))
    assert parts["exposed_comm/reduce"].tolist() == [14 + 3, 0 + 1]
    assert step.step_total(t, np.array([100, 100])).tolist() == [121, 105]


def test_stage_without_expert_terms_has_no_ep_item():
    """A StageTerms without ep_s (a dense model's tables) itemises no exposed_comm/ep."""
    assert "exposed_comm/ep" not in step.stage_items(_stage())
    items = step.stage_items(
        _stage(ep_s=0.2, ep_rerun_s=0.1, ep_rerun_fraction=1.0, ep_lost_s=0.01)
    )
    assert items["exposed_comm/ep"] == pytest.approx(0.3, abs=1e-12)
    assert items["exposed_comm/interference"] == pytest.approx(0.05, abs=1e-12)  # 0.1 x 0.4 + 0.01


def test_estimate_step_time_is_step_total_of_its_terms():
    """estimate()'s step time is step.step_total of the layout's typed terms, to the last bit; a slower last
    stage paces the K microbatches alone, K / (K + 1) of the step at pp 2 with 1F1B."""
    problem = Problem.build(
        load_model("llama3-8b"),
        resolve_cluster("h100-64"),
        Workload(global_batch_seqs=256, seq_len=4096),
    )
    est = estimate(problem, Layout(fsdp=16, tp=2, pp=2, zero_stage=3), strict=False)
    first, last, once, paced = layout_terms(problem, est.layout)
    k = est.layout.num_microbatches
    assert paced == k / (k + 1)
    assert est.step_time_s == step.step_total(once, step.slowest_stage(first, last, paced))
    assert (
        first.microbatch_zero == 1.0 and first.cp_s == last.cp_s
    )  # ZeRO-3 over 16 shards; CP alike
    for item, _ in step.PLAIN:  # the output keys of the plain terms (docs/OUTPUT.md)
        assert item in est.time_s
    assert est.time_s["compute/optimizer"] == once.optimizer_s


def _queue_exposed(total_s: float, chunks: int, chunk_s: float, group: int) -> float:
    """What a link left after the last backward (or before the first forward) by simulating it:
    chunk j's share total / v becomes ready at the start of its last backward, (j x group + 1) chunk
    backwards before the end, and the link takes the chunks one after another."""
    free = -np.inf
    for j in reversed(range(chunks)):
        ready = -(j * group + 1) * chunk_s
        free = max(free, ready) + total_s / chunks
    return max(0.0, free)


@pytest.mark.parametrize(("v", "k"), [(1, 8), (2, 8), (4, 4), (4, 16), (10, 2), (10, 32), (20, 64)])
def test_interleaved_reductions_expose_what_a_queue_of_chunks_leaves(v, k):
    """Megatron's interleaved schedule reduces a chunk's gradients after its last backward and gathers
    its weights before its first forward: the step formula's two parts (the last chunk's, the rest's)
    expose exactly what a simulated queue of the chunks' collectives on one link leaves over, for
    the ZeRO-1 reduce-scatter over 48 nodes and its gather (Llama 70B-like, 84 layers on 2 stages)."""
    problem = Problem.build(
        load_model("llama70b"),
        resolve_cluster("h100-768"),
        Workload(global_batch_seqs=384, seq_len=4096, framework="megatron"),
    )
    layers_ok = 80 % (2 * v) == 0
    pp = 2 if layers_ok else 4
    layout = Layout(
        fsdp=768 // (8 * pp),
        tp=8,
        pp=pp,
        zero_stage=1,
        virtual_stages=v,
        num_microbatches=k,
        schedule="interleaved" if v > 1 else "1f1b",
    )
    est = estimate(problem, layout, strict=False)
    assert est.layout.virtual_stages == v
    _, _, once, _ = layout_terms(problem, est.layout)
    reduce_total = once.reduce_s + once.reduce_early_s
    assert reduce_total > 0 and once.reduce_link_busy_s == 0  # TP on NVLink, the reductions on IB
    assert once.reduce_early_s == pytest.approx(reduce_total * (v - 1) / v, rel=1e-12)
    exposed = {h.item: max(0.0, h.hidden(once) - h.window(once)) for h in step.EXPOSED}
    group = min(pp, k)
    reduce = _queue_exposed(reduce_total, v, once.reduce_window_s, group)
    gather = _queue_exposed(once.zero_gather_s + once.gather_late_s, v, once.gather_window_s, group)
    assert exposed["exposed_comm/reduce"] + exposed["exposed_comm/reduce_early"] == pytest.approx(
        reduce, rel=1e-9, abs=1e-12
    )
    assert exposed["exposed_comm/zero_gather"] + exposed[
        "exposed_comm/zero_gather_late"
    ] == pytest.approx(gather, rel=1e-9, abs=1e-12)
    if v == 1:  # one chunk: the whole stage's last backward and first forward, as before
        assert once.reduce_early_s == once.reduce_early_window_s == once.gather_late_s == 0
