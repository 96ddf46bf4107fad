"""A last pipeline stage slower than the others (its output head) paces the K microbatches, while the fill and
the drain cross the other stages at their own pace (costs.step.paced_max, costs.terms.paced_share)."""

import pytest
from builders import data_path
from pipeline_sim import step_time

from layoutsearch.costs import step
from layoutsearch.costs.estimate import layout_terms
from layoutsearch.validation.mapping import record_to_estimate, record_to_problem
from layoutsearch.validation.runs import load_runs


def test_paced_max_by_hand():
    """first 10 s, last 12 s over K + bubble = 20 microbatch-times with K = 16: 10 + 0.8 x 2 = 11.6 s; a last
    stage no slower than the first leaves the first's 10 s; paced 1 is the slower of the two."""
    assert step.paced_max(10.0, 12.0, 16 / 20) == pytest.approx(11.6)
    assert step.paced_max(10.0, 9.0, 16 / 20) == 10.0
    assert step.paced_max(10.0, 12.0) == 12.0


@pytest.mark.parametrize(
    ("schedule", "p", "k", "v", "scale"),
    [("1f1b", 4, 16, 1, 1.5), ("1f1b", 8, 64, 1, 1.2), ("interleaved", 4, 16, 2, 1.5)],
)
def test_an_event_simulation_paces_the_bubble_at_the_other_stages(schedule, p, k, v, scale):
    """tests/pipeline_sim.py with the last device's passes ``scale`` times as long (forward 1, backward 2 on
    the others): the step is K x its 3 scale + (p - 1)/v x 3, the step formula's paced_max of the two stages'
    times over K + (p - 1)/v microbatch-times (1F1B at pp 4, K 16, scale 1.5: 81 s, not 19 x 4.5 = 85.5)."""
    mult = k + (p - 1) / v
    middle, last = 3.0, 3.0 * scale
    assert step_time(schedule, p, k, v, 1.0, 2.0, 0.0, last_scale=scale) == pytest.approx(
        step.paced_max(mult * middle, mult * last, k / mult)
    )
    assert step_time("1f1b", 4, 16, 1, 1.0, 2.0, 0.0, last_scale=1.5) == pytest.approx(81.0)


def test_the_1t_rows_bubble_runs_at_the_first_stages_pace():
    """Korthikanti et al.'s 1T row (1F1B, pp 64, 512 microbatches, 2 layers a stage): the last stage, which
    holds the output head, is the slower and paces the 512 microbatches; the bubble is 63 of the first
    stage's microbatch-times."""
    record = next(
        r
        for r in load_runs(data_path("korthikanti_heldout.yaml"))
        if r["id"] == "korthikanti2022-1t-selective-sp"
    )
    problem, layout = record_to_problem(record)
    est = record_to_estimate(record)[2]
    first, last, _, paced = layout_terms(problem, est.layout)
    mult = 512 + 63
    assert paced == pytest.approx(512 / mult)
    assert step.stage_total(last) > step.stage_total(first)
    assert est.time_s["bubble"] == pytest.approx(63 * step.stage_total(first) / mult)
    assert est.time_s["bubble"] < 63 * step.stage_total(last) / mult - 0.5  # the head's 0.6 s off
