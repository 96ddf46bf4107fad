"""The infeasibility explanation costs about what the search does: the funnel evaluates each degree
tuple once and the (v, K) rows once per distinct key, the nearest layout costs only the candidates
with the least peak, both in bounded chunks; and it says what the per-candidate version said
(messages pinned from that version, before the change)."""

import pytest
from builders import per_candidate_funnel

from layoutsearch.cli import main
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Workload
from layoutsearch.export import capabilities_of
from layoutsearch.search import explain
from layoutsearch.search.space import (
    build_space,
    problem_degree_tuples,
    with_microbatches,
    with_virtual_stages,
)
from layoutsearch.search.tables import build_tables

# grok-1's 8 experts on 280 = 8 x 5 x 7 GPUs with 8 sequences: the factor 35 fits no degree (the
# reduced form of grok-1 on v5p-8960x4, whose 35840 chips fail the same way)
GROK_280 = ["solve", "--model", "grok-1", "--cluster", "h100-280", "--seqs", "8"]
GROK_280_REMAINING = [12726, 12726, 12726, 12726, 7448, 7448, 7448, 7284, 7284, 7284, 7284]
# ep-experts, etp-ffn, ep-fold, cp-seq, then whole-sequences ends it (the schedule, dualpipe,
# cp-heads and cp-hierarchy rules remove none)
GROK_280_REMAINING += [2274, 2274, 2274, 1212] + [0] * 13


def _grok_280() -> Problem:
    return Problem.build("grok-1", "h100-280", Workload(global_batch_seqs=8, seq_len=4096))


def test_grok_on_280_gpus_names_the_whole_sequences_rule(capsys):
    """The reduced grok-1 case: exit 1 with the message the per-candidate funnel printed, and what the batch
    leaves to tp x pp x cp: gcd(280, 8) = 8 devices of data parallelism at most, so a multiple of 35; a batch
    of 8 x 35 = 280 sequences, or 8 x 32 = 256 devices, leaves a power of two (the sentence after the rule is new since
    2026-12-06)."""
    assert main(GROK_280) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "no feasible layout: no layout satisfies the rules: 'whole sequences: dp x fsdp x "
        "microbatches divides the batch (8)' (whole-sequences) removes the last 1212 degree tuples; 8 sequences a "
        "step put at most 8 of the 280 devices in data parallelism (whole sequences), so tp x pp x cp must be a "
        "multiple of 35: a batch of 280 sequences, or 256 devices, would leave it a power of two"
    )


@pytest.mark.parametrize(
    "cluster, seqs, tail",
    [
        # 35,840 v5p chips (4 slices of 16 x 20 x 28) at 4,096 sequences: gcd 1,024, so 35 is left: 4,096 x 35 sequences, or 1,024 x 32 devices
        (
            "v5p-8960x4",
            4096,
            "at most 1,024 of the 35,840 devices in data parallelism (whole sequences), so tp x pp "
            "x cp must be a multiple of 35: a batch of 143,360 sequences, or 32,768 devices, would leave it a power of two",
        ),
        # 576 GB200s at 1,000 sequences: gcd 8, so 72 is left, odd part 9: a batch of 9,000, or 8 x 64 = 512 devices
        (
            "gb200-576",
            1000,
            "at most 8 of the 576 devices in data parallelism (whole sequences), so tp x pp x cp "
            "must be a multiple of 72: a batch of 9,000 sequences, or 512 devices, would leave it a power of two",
        ),
        # 64 H100s at 16 sequences: 4 left, a power of two already, so no suggestion
        (
            "h100-64",
            16,
            "at most 16 of the 64 devices in data parallelism (whole sequences), so tp x pp x cp must "
            "be a multiple of 4",
        ),
        ("h100-64", 128, ""),  # the batch takes every device
    ],
)
def test_the_batch_limit_sentence_names_what_data_parallelism_cannot_take(cluster, seqs, tail):
    """``_batch_limit``: dp x fsdp divides gcd(devices, batch), so tp x pp x cp carries the rest."""
    from layoutsearch.search.explain import _batch_limit

    text = _batch_limit(
        Problem.build("llama70b", cluster, Workload(global_batch_seqs=seqs, seq_len=8192))
    )
    assert text == (f"; {seqs:,} sequences a step put " + tail if tail else "")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--model", "llama3-405b", "--cluster", "h100-8", "--seqs", "8"],
            "nothing fits: the nearest layout (tp=8, recompute=full, ZeRO-0) needs 915.9 GB per "
            "device, 82.3 GB available; no single change found that fits; the model state alone "
            "(7.31 TB at 18 B/param) needs at least 89 devices",
        ),
        (
            ["--model", "deepseek-v3", "--cluster", "h100-16", "--seqs", "48"],
            "nothing fits: the nearest layout (cp=16,ep=16, recompute=full, ZeRO-3) needs 770.4 GB "
            "per device, 82.3 GB available; no single change found that fits; the model state "
            "alone (12.08 TB at 18 B/param) needs at least 147 devices",
        ),
        (
            ["--model", "llama3-405b", "--cluster", "v5p-64"],
            "nothing fits: the nearest layout (tp=8,cp=8, recompute=full, ZeRO-3) needs 103.1 GB "
            "per device, 102.8 GB available; fits with --offload optimizer or 2x the devices "
            "(v5p-128); the model state "
            "alone (7.31 TB at 18 B/param) needs at least 72 devices",  # 99.9 GB and 74 before v5p read 96 GiB less 0.26
        ),
    ],
)
def test_memory_bound_cases_keep_their_nearest_layout(capsys, args, message):
    """Problems that fail only on memory: the nearest layout, its numbers and the fix, as before."""
    assert main(["solve", *args]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"no feasible layout: {message}"


def test_the_funnel_counts_as_the_per_candidate_funnel_did():
    """grok-1 on 280 GPUs (counts pinned from the per-candidate funnel), Mixtral with Megatron's
    rules and debug with DeepSpeed's: the counts after every rule equal those of applying each
    rule to every candidate row."""
    grok = _grok_280()
    assert [s["remaining"] for s in explain.funnel(grok, build_space(grok).rules)] == (
        GROK_280_REMAINING
    )
    mixtral = Problem.build("mixtral-8x7b", "h100-32", Workload(global_batch_seqs=96, seq_len=4096))
    debug = Problem.build("debug", "h100-16", Workload(global_batch_seqs=64, seq_len=1024))
    for problem, target in ((mixtral, "megatron"), (debug, "deepspeed")):
        space = build_space(problem, capabilities=capabilities_of(target))
        # with the space's sequence parallelism (DeepSpeed's: off), as infeasibility passes it
        counts = [
            s["remaining"] for s in explain.funnel(problem, space.rules, space.sequence_parallel)
        ]
        assert counts == per_candidate_funnel(problem, space.rules)
    mixtral_rules = build_space(mixtral, capabilities=capabilities_of("megatron")).rules
    steps = explain.funnel(mixtral, mixtral_rules)
    assert (steps[0]["remaining"], steps[-1]["remaining"]) == (868, 675)


def test_the_funnel_evaluates_each_tuple_once_in_bounded_chunks(monkeypatch):
    """grok-1 on 280 GPUs: the per-candidate funnel evaluated 278096 (tuple, v, K) rows; this one
    evaluates the 12726 tuples, 6400 key rows and 312 (tp, cp, CP flavour) rows, and with chunks of
    1000 rows no rule sees more (the counts unchanged)."""
    grok = _grok_280()
    rules = build_space(grok).rules
    superset = with_microbatches(with_virtual_stages(problem_degree_tuples(grok)), 8)
    assert len(superset["dp"]) == 278096
    seen = []
    falls = explain._falls

    def counting(problem, c, rules, never):
        seen.append(len(next(iter(c.values()))))
        return falls(problem, c, rules, never)

    monkeypatch.setattr(explain, "_falls", counting)
    explain.funnel(grok, rules)
    assert sum(seen) == 12726 + 6400 + 312
    seen.clear()
    monkeypatch.setattr(explain, "FUNNEL_CHUNK_ROWS", 1000)
    assert [s["remaining"] for s in explain.funnel(grok, rules)] == GROK_280_REMAINING
    assert max(seen) <= 1000 and sum(seen) == 12726 + 6400 + 312


def test_the_nearest_layout_costs_only_the_least_peak(monkeypatch):
    """deepseek-v3 on 16 GPUs: the nearest layout is found by peaks per (S,K) row, recompute and
    ZeRO stage; step times are costed for the orders of the least-peak ones alone (1 candidate of
    45122: 6 x 7,521 rows x 7 Megatron policies, norm_mla_up_proj the 7th); chunks of 7 (S,K) rows find the same layout."""
    problem = Problem.build("deepseek-v3", "h100-16", Workload(global_batch_seqs=48, seq_len=4096))
    space = build_space(problem)
    tables = build_tables(space)
    costed = []
    assemble = explain.assemble

    def counting(t, s, sk, ri, z, o):
        costed.append(len(sk))
        return assemble(t, s, sk, ri, z, o)

    monkeypatch.setattr(explain, "assemble", counting)
    found = explain.nearest(space, tables)
    assert space.num_candidates() == 45122 and costed == [1]  # one least-peak triple, one order
    (row, ri, z, o), peak_bytes = found
    layout = space.layout(
        int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o
    )
    assert (layout.cp, layout.ep, layout.recompute, layout.zero_stage) == (16, 16, "full", 3)
    # 757.3 GB before the MTP module's state was counted, + its 11,610,068,224 parameters x 18 B / 16 = 13.06 GB
    assert peak_bytes == pytest.approx(770.4e9, rel=1e-3)
    monkeypatch.setattr(explain, "NEAREST_CHUNK_ROWS", 7)
    assert explain.nearest(space, tables) == found
