"""Sends between pipeline stages once the pipeline is full (costs.pipeline.steady_sends_array,
costs.terms.pipeline_sends): 1F1B waits for them, an interleaved schedule hides them where its framework
overlaps them, and the Megatron-LM of 2021 and 2022 did not (rule 32)."""

import pytest
from builders import data_path
from pipeline_sim import sends_waited

from layoutsearch.core.frameworks import pp_comm_overlap_of
from layoutsearch.core.specs import SCHEDULE_CODES
from layoutsearch.costs import pipeline
from layoutsearch.validation.mapping import record_to_estimate, record_to_problem
from layoutsearch.validation.runs import load_runs


def _steady(schedule: str, p: int, v: int, overlap: bool = True, blocking: bool = False) -> float:
    return float(pipeline.steady_sends_array(p, v, SCHEDULE_CODES[schedule], overlap, blocking))


@pytest.mark.parametrize(
    ("schedule", "p", "v", "overlap", "blocking", "sends"),
    [
        (
            "1f1b",
            4,
            1,
            True,
            False,
            1.5,
        ),  # 2 (p - 1)/p: one round trip of 6 sends for 4 microbatches
        ("1f1b", 8, 1, True, False, 1.75),
        ("1f1b", 2, 1, True, False, 1.0),
        (
            "1f1b",
            8,
            1,
            True,
            True,
            2.0,
        ),  # Megatron's and DeepSpeed's blocking exchanges: two a microbatch
        ("1f1b", 2, 1, True, True, 1.0),  # one exchange at two stages
        ("interleaved", 8, 3, True, True, 0.0),  # overlapped: hidden in the warm-up's slack
        (
            "interleaved",
            8,
            3,
            False,
            True,
            6.0,
        ),  # waited for: two sends out of the device per chunk
        ("gpipe", 8, 1, False, True, 0.0),
        ("zb-h1", 8, 1, False, True, 0.0),
        ("dualpipev", 8, 2, False, True, 0.0),
        ("1f1b", 1, 1, False, True, 0.0),  # no pipeline
    ],
)
def test_sends_each_microbatch_waits_for(schedule, p, v, overlap, blocking, sends):
    assert _steady(schedule, p, v, overlap, blocking) == pytest.approx(sends)


@pytest.mark.parametrize(
    ("schedule", "p", "k", "v"),
    [
        ("1f1b", 2, 40, 1),
        ("1f1b", 4, 80, 1),
        ("1f1b", 8, 160, 1),
        ("interleaved", 4, 80, 2),
        ("interleaved", 8, 64, 3),
        ("gpipe", 4, 80, 1),
    ],
)
def test_an_event_simulation_waits_for_as_many_sends(schedule, p, k, v):
    """tests/pipeline_sim.py runs Megatron's orders with asynchronous sends: the sends on its critical path are
    the fill's and the drain's (``fill_hops_array``, twice) and K x the steady state's, 2 fewer for 1F1B (its
    last warm-up forward's send and the first cool-down backward's overlap the steady state)."""
    code = SCHEDULE_CODES[schedule]
    costed = 2 * float(pipeline.fill_hops_array(p, v, code)) + k * _steady(schedule, p, v)
    assert sends_waited(schedule, p, k, v) == pytest.approx(
        costed - (2 if schedule == "1f1b" else 0), abs=1e-6
    )


def _korthikanti(record_id: str):
    return next(r for r in load_runs(data_path("korthikanti_heldout.yaml")) if r["id"] == record_id)


def test_the_530b_rows_chunks_waited_for_their_sends_by_hand():
    """Korthikanti et al.'s 530B row (tp 8, pp 35, 3 chunks, 280 microbatches of 2,048 tokens, sequence
    parallel) ran the Megatron-LM of May 2022, before --overlap-p2p-communication: each send is 2,048 x 20,480
    x 2 B / 8 = 10,485,760 B, plus the 1 MiB half-efficiency size, over 25 GB/s x 0.8 of InfiniBand and its
    5 us: 0.5817168 ms. The fill and the drain wait for 2 x (35 x 3 - 1) = 208 of them, the steady state for
    280 x 2 x 3 = 1,680: 1.0982813 s. Overlapped, as today's Megatron runs it: the 208 alone, 0.1209971 s."""
    record = _korthikanti("korthikanti2022-530b-selective-sp")
    send_s = (10_485_760 + 1_048_576) / 20e9 + 5e-6
    assert send_s == pytest.approx(5.817168e-4)
    workload = record_to_problem(record)[0].workload
    assert (workload.pp_comm_overlap, pp_comm_overlap_of(workload, "gpu")) == (False, False)
    est = record_to_estimate(record)[2]
    assert est.time_s["exposed_comm/pp"] == pytest.approx(1888 * send_s)
    today = {**record, "workload": {**record["workload"], "framework_release": None}}
    assert record_to_estimate(today)[2].time_s["exposed_comm/pp"] == pytest.approx(208 * send_s)


def test_megatrons_1f1b_waits_for_two_sends_a_microbatch_in_any_release():
    """The 1T row runs 1F1B (pp 64, 512 microbatches of 2,048 tokens at d_model 25,600, tp 8): each send
    (13,107,200 + 1,048,576) B / 20 GB/s + 5 us = 0.7127888 ms; 2 x 63 of the fill and drain, 2 x 512 of the
    steady state (Megatron's exchanges block), whether its release overlaps an interleaved schedule or not."""
    record = _korthikanti("korthikanti2022-1t-selective-sp")
    send_s = (13_107_200 + 1_048_576) / 20e9 + 5e-6
    today = {**record, "workload": {**record["workload"], "framework_release": None}}
    for r in (record, today):
        assert record_to_estimate(r)[2].time_s["exposed_comm/pp"] == pytest.approx(1150 * send_s)


def test_the_command_line_and_the_exports_carry_the_choice(cli_main, tmp_path):
    """--no-pp-comm-overlap costs an interleaved layout's sends as waited for; Megatron writes
    --no-overlap-p2p-communication for it (and nothing for an overlapped one), torchtitan refuses it."""
    base = ["estimate", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "64"]
    layout = ["--layout", "dp=2,tp=2,pp=4", "--virtual-stages", "2", "--schedule", "interleaved"]
    layout += ["--microbatches", "32"]

    def saved(name: str, *extra: str):
        path = tmp_path / f"{name}.json"
        code, out, err = cli_main(*base, *layout, *extra, "--format", "json")
        assert code == 0, err
        path.write_text(out)
        return path

    waits, overlaps = saved("waits", "--no-pp-comm-overlap"), saved("overlaps")
    code, _, _ = cli_main("export", waits, "--to", "megatron", "-o", tmp_path / "waits.sh")
    assert code == 0 and "--no-overlap-p2p-communication" in (tmp_path / "waits.sh").read_text()
    code, _, _ = cli_main("export", overlaps, "--to", "megatron", "-o", tmp_path / "overlaps.sh")
    assert code == 0 and "overlap-p2p" not in (tmp_path / "overlaps.sh").read_text()
    code, _, err = cli_main("export", waits, "--to", "torchtitan", "-o", tmp_path / "tt")
    assert code == 2
    assert (
        "torchtitan cannot express an interleaved pipeline whose chunks wait for their sends between stages "
        "(--no-pp-comm-overlap) with pp(4); nearest: --pp-comm-overlap"
    ) in err
