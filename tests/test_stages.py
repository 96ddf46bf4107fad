"""Uneven pipeline stages (core/stages.py): pp need not divide the layers."""

import json

import pytest
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.check import check_layout
from layoutsearch.core.problem import Problem, build_workload, layout_from_record
from layoutsearch.core.specs import Layout
from layoutsearch.core.stages import default_microbatches, split_layers
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import capabilities_of
from layoutsearch.report.output import layout_record

runner = CliRunner()
# An estimate of Llama 3 405B's 2048 sequences of 8192 tokens on 16,384 H100s at fsdp 128 x tp 8 x pp 16
LLAMA3_405B_PP16_ESTIMATE = (
    *("estimate", "--model", "llama3-405b", "--cluster", "h100-16384"),
    *("--seqs", "2048", "--seq-len", "8192", "--layout", "fsdp=128,tp=8,pp=16"),
)


@pytest.mark.parametrize(
    "args, expected",
    [
        ((126, 16, 1), (7, 8, 7, "embedding-and-loss")),  # Meta's Llama 3 405B: pp=16
        (
            (126, 8, 8),
            (15, 16, 15, "embedding-and-loss"),
        ),  # NVIDIA's Llama 3.1 405B: pp=8, 8 virtual stages
        ((80, 8, 1), (10, 10, 10, "even")),
        (
            (126, 16, 1, 6, 8),
            (6, 8, 8, "first-last"),
        ),  # given first and last: 14 middle stages of 8
        (
            (32, 3, 1),
            (11, 11, 10, "first-last"),
        ),  # proposed: middle ceil(32/3) = 11, the rest shared, the last lighter
        ((126, 1, 1), (126, 126, 126, "even")),
        # Megatron --pipeline-model-parallel-layout, as NVIDIA's DeepSeek-V3 recipes: 61 layers + embedding + loss
        # in 16 chunks of 4 slots (the last one 3): stage 0 holds E + 15 layers, stage 3 14 layers + the loss
        ((61, 4, 4), (15, 16, 14, "chunk-layout")),
        ((61, 8, 4), (7, 8, 6, "chunk-layout")),  # 32 chunks of 2 slots, "Et|(tt|)*30L"
        ((126, 16, 8), (7, 8, 7, "chunk-layout")),  # 128 chunks of one slot each
        # Megatron-Bridge's DeepSeek-V3 recipe (mapping rule 23): given first and last stages that virtual_stages does
        # not divide are a --pipeline-model-parallel-layout; the middle stages still share the rest equally
        ((61, 8, 2, 8, 5), (8, 8, 5, "first-last")),
        ((61, 4, 4, 16, 13), (16, 16, 13, "first-last")),
    ],
)
def test_splits(args, expected):
    first, middle, last, kind, ok = split_layers(*args)
    names = {0: "even", 1: "embedding-and-loss", 2: "first-last", 3: "chunk-layout"}
    assert (int(first[0]), int(middle[0]), int(last[0]), names[int(kind[0])]) == expected and ok[0]


def test_chunk_layout_lists_the_chunks_in_megatron_order():
    from layoutsearch.core.stages import chunk_layout

    chunks = chunk_layout(61, 8, 4)
    assert ["".join(c) for c in chunks] == ["Et"] + ["tt"] * 30 + ["L"]
    assert sum(c.count("t") for c in chunks) == 61


def test_given_chunks_spread_each_stage_over_its_virtual_stages_as_megatron_bridge_does():
    """A stage fills its chunks with the middle stages' chunk size, the remainder last: 61 layers on pp=8 x 2
    with first 8 and last 5 stage layers is the DeepSeek-V3 recipe's 'Et*4|(t*4|)*14tmL' (the MTP module beside
    the loss: export/megatron.pipeline_layout), as is pp=4 x 4 with 16 and 13."""
    from layoutsearch.core.stages import given_chunks
    from layoutsearch.export.megatron import pipeline_layout

    recipe = "Etttt|" + "tttt|" * 14 + "tmL"
    assert pipeline_layout(61, 8, 2, 1, 8, 5) == recipe == pipeline_layout(61, 4, 4, 1, 16, 13)
    # 30 layers on pp=3 x 4, 9 on the first and last stages: chunks of 3, the 9 as 3+3+2+1 (a layer left per chunk)
    assert ["".join(c) for c in given_chunks(30, 3, 4, 9, 9)] == [
        "Ettt",
        "ttt",
        "ttt",
        "ttt",
        "ttt",
        "ttt",
        "tt",
        "ttt",
        "tt",
        "t",
        "ttt",
        "tL",
    ]


@pytest.mark.parametrize(
    "layers, pp, v, head, expected",
    [
        (
            61,
            8,
            1,
            4,
            (8, 8, 5),
        ),  # DeepSeek-V3 (its output head and MTP module: 4 layers' worth) as Megatron-Bridge splits it
        (61, 16, 1, 4, (4, 4, 1)),  # ... and on pp=16: the recipe's 4 / 1
        (61, 8, 1, 0, (7, 8, 6)),  # no head: the rest shared, the odd layer first
        (36, 8, 1, 5, (5, 5, 1)),  # GPT-OSS-120B: at least one layer on the last stage
        (32, 3, 1, 30, (11, 11, 10)),  # the first stage takes no more than a middle one
        (36, 4, 3, 3, (9, 9, 9)),  # even splits stay even
    ],
)
def test_proposed_splits_take_the_output_head_off_the_last_stage(layers, pp, v, head, expected):
    first, middle, last, kind, ok = split_layers(layers, pp, v, head=head)
    assert (int(first[0]), int(middle[0]), int(last[0])) == expected and ok[0]


def test_the_output_head_weighs_whole_layers_by_the_models_own_weights():
    """V x D output weights against the mean layer's active ones: Llama 3 70B 1.05 B / 0.86 B -> 1; Llama 3 8B
    0.53 B / 0.22 B -> 2 (a large vocabulary on a small model); DeepSeek-V3 0.93 B / 0.59 B = 1.6 per head pass,
    two passes (the model's and the MTP module's) and the MTP module's layer -> 4."""
    from layoutsearch.core.catalogue import load_model
    from layoutsearch.costs.params import output_layer_equivalents

    assert {
        m: output_layer_equivalents(load_model(m)) for m in ("llama70b", "llama3-8b", "deepseek-v3")
    } == {
        "llama70b": 1,
        "llama3-8b": 2,
        "deepseek-v3": 4,
    }


def test_the_heads_weight_never_changes_whether_or_how_a_pipeline_splits():
    """The rules read a split's kind and validity without the head (core does not weigh layers): they must be
    the same for every head weight, and the stages' layers must still add up."""
    for layers in (7, 32, 36, 48, 61, 94, 126):
        for pp in (2, 3, 4, 5, 7, 8, 16):
            for v in (1, 2, 3, 4):
                base = split_layers(layers, pp, v)
                for head in (1, 2, 4, 9):
                    first, middle, last, kind, ok = split_layers(layers, pp, v, head=head)
                    assert (int(kind[0]), bool(ok[0])) == (int(base[3][0]), bool(base[4][0])), (
                        layers,
                        pp,
                        v,
                        head,
                    )
                    if ok[0] and pp > 2 and int(kind[0]) == 2:
                        assert int(first[0]) + int(last[0]) + (pp - 2) * int(middle[0]) == layers


def test_deepseek_v3_proposal_balances_the_last_stage_and_estimate_costs_it():
    """61 layers on pp=8: the last stage holds the output head and the MTP module (four layers' worth,
    params.output_layer_equivalents), so the engine proposes 8 / 8 / 5 layers, and the slowest stage is no longer
    the last: the step is faster than with the heavier last stage of the same pipeline given as 6 / 7. ZeRO-1, as
    DeepSeek-V3 ran (ZeRO-2 until ZeRO-2 reduce-scattered its gradients in every microbatch: 120 of them a step,
    alike on every stage, took the ratio to 1.053)."""
    problem = Problem.build("deepseek-v3", "h100-2048", build_workload(15360, 4096))
    base = dict(fsdp=128, tp=2, pp=8, ep=16, zero_stage=1, num_microbatches=120)
    proposed = estimate(problem, Layout(**base))
    assert layout_record(proposed)["stage_layers"] == {
        "first": 8,
        "middle": 8,
        "last": 5,
        "split": "first-last",
    }
    heavy_last = estimate(problem, Layout(**base, first_stage_layers=6, last_stage_layers=7))
    # measured 1.188 since the loss's passes over both heads' logits are costed (1.184 before), 1.184 since a slower
    # last stage paces the microbatches alone, the bubble running at the first's pace (2026-12-06; 1.197 before, with each stage's own MoE layers; 1.206 with every stage at the mean layer: the
    # middle stages' 8 MoE layers were 8 x 58/61)
    assert heavy_last.step_time_s / proposed.step_time_s == pytest.approx(1.188, abs=0.002)


@pytest.mark.parametrize(
    "args",
    [
        (126, 16, 9),
        (126, 16, 1, 9, 9),
        (126, 16, 1, 7, 6),
        (32, 2, 1, 10, 10),
        (61, 8, 2, 1, 4),
        (61, 8, 2, 10, 3),
    ],
)
def test_impossible_splits_are_refused(args):
    assert not split_layers(*args)[4][0]


def test_metas_405b_layout_is_estimated_near_its_published_throughput():
    """Llama 3 405B on 16,384 H100 (Meta, 'The Llama 3 Herd of Models', table 4): tp=8, pp=16, dp=128,
    8K sequences, 2048 per step, about 400 TFLOP/s per GPU. Meta's FSDP keeps weights gathered through
    a step's microbatches; read here as synchronising the gradients once a step, as pipeline runtimes do
    (ZeRO-1 timing: ZeRO-2 reduce-scatters them in every microbatch, 273 TFLOP/s with fp32 gradients;
    results/trust.md section 6 gives each reading the paper leaves open), interleaved over 4 chunks. Its predicted peak, 82.2 GB, is
    above the 76.65 GB usable by 7%: a run that ran, inside the memory model's measured error (+15.8%)."""
    problem = Problem.build("llama3-405b", "h100-16384", build_workload(2048, 8192))
    est = estimate(
        problem,
        Layout(
            fsdp=128,
            tp=8,
            pp=16,
            zero_stage=1,
            virtual_stages=4,
            schedule="interleaved",
            num_microbatches=16,
        ),
    )
    peak, usable = est.memory_bytes["peak"], est.memory_bytes["capacity"]
    assert peak / 2**30 == pytest.approx(82.2, abs=0.05) and usable / 2**30 == pytest.approx(
        76.65, abs=0.01
    )
    assert not est.fits and peak <= usable * (1 + 0.158)
    tflops = est.mfu * problem.cluster.accelerator.peak_flops_per_s / 1e12
    assert 340 <= tflops <= 460, tflops
    assert layout_record(est)["stage_layers"] == {
        "first": 7,
        "middle": 8,
        "last": 7,
        "split": "embedding-and-loss",
    }


def test_estimate_picks_microbatches_for_the_pipeline_and_the_split_shows():
    r = runner.invoke(
        app,
        [*LLAMA3_405B_PP16_ESTIMATE, "--zero-stage", "2", "--format", "json"],
    )
    assert r.exit_code == 0, r.output
    lay = json.loads(r.stdout)["layout"]
    assert lay["num_microbatches"] == 16 == default_microbatches(2048, 128, 16)
    assert lay["stage_layers"]["split"] == "embedding-and-loss"
    r = runner.invoke(
        app,
        [*LLAMA3_405B_PP16_ESTIMATE, "--first-stage-layers", "9", "--last-stage-layers", "9"],
    )
    assert r.exit_code == 2
    assert (
        "num_layers(126) cannot be split over pp(16) x virtual_stages(1) with first_stage_layers(9)"
        in r.output
    )


def test_given_first_and_last_stage_layers_are_costed_and_read_back():
    """A heavier last stage (8 layers and the logits) is the slowest stage; the split survives the record."""
    problem = Problem.build("llama3-405b", "h100-16384", build_workload(2048, 8192))
    base = dict(fsdp=128, tp=8, pp=16, zero_stage=2, num_microbatches=16)
    light = estimate(problem, Layout(**base, first_stage_layers=7, last_stage_layers=7))
    heavy_last = estimate(problem, Layout(**base, first_stage_layers=6, last_stage_layers=8))
    assert (
        heavy_last.step_time_s > light.step_time_s
    )  # the last stage: 8 layers and the logits, the slowest
    record = layout_record(heavy_last)
    assert record["stage_layers"] == {"first": 6, "middle": 8, "last": 8, "split": "first-last"}
    back = layout_from_record(record)
    assert (back.first_stage_layers, back.last_stage_layers) == (6, 8)


def test_search_uses_pipelines_that_do_not_divide_the_layers_and_megatron_writes_the_split(
    tmp_path,
):
    out = tmp_path / "run.sh"
    r = runner.invoke(
        app,
        [
            "solve",
            "--model",
            "llama3-405b",
            "--cluster",
            "h100-1024",
            "--seqs",
            "512",
            "--fix",
            "tp=8,pp=16",
            "--top",
            "1",
            "--export",
            "megatron",
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "--pipeline-model-parallel-size 16" in text
    assert (
        "--account-for-embedding-in-pipeline-split" in text
        and "--account-for-loss-in-pipeline-split" in text
    )
    problem = Problem.build("llama3-405b", "v5p-1024", build_workload(1024, 4096))
    gpipe = Layout(fsdp=64, pp=16, zero_stage=3, num_microbatches=16, schedule="gpipe")
    found = check_layout(problem, gpipe, capabilities=capabilities_of("maxtext"))
    assert [v.code for v in found] == ["maxtext-split"]
    assert found[0].message.startswith(
        "MaxText cannot express the embedding-and-loss split of num_layers(126) over pp(16) x virtual_stages(1)"
    )


def test_the_first_stage_is_costed_as_the_heavier_of_its_own_and_a_middle_stage():
    """Llama 3 405B on pp 8 (126 layers: 15 on the first and last stages, 16 in the middle; tp 4): the first stage
    holds 15 layers and the embedding (15 x 796,950,528 + 525,336,576 parameters), a middle stage 16 layers
    (12,751,208,448): the row standing for both costs the heavier, not 16 layers and the embedding. Activations:
    15 layers x 8 microbatches in flight on the first stage, 16 x 7 on the second: 120 layer-microbatches, not
    16 x 8; the last stage's 15 x 1 are its own."""
    import numpy as np

    from layoutsearch.core.catalogue import load_model
    from layoutsearch.core.specs import Workload
    from layoutsearch.costs import params, terms

    model = load_model("llama3-405b")
    sh = terms.Shapes.of(pp=8, tp=4, v=1, fsdp=32)
    first, middle, last = (int(x[0]) for x in sh.layer_split(model)[:3])
    assert (first, middle, last) == (15, 16, 15)
    per_layer, embedding = params.layer_params(model, 4), model.vocab_size * model.d_model // 4
    assert (per_layer, embedding) == (796_950_528, 525_336_576)
    assert terms.stage_params(model, sh, True)[0] == 16 * per_layer == 12_751_208_448
    workload = Workload(global_batch_seqs=256, seq_len=4096)
    k, r = np.array([32]), np.array([0])
    head = terms.memory_by_microbatch(model, workload, sh, k, r, True, False)["activations/saved"]
    tail = terms.memory_by_microbatch(model, workload, sh, k, r, False, True)["activations/saved"]
    assert head[0] / tail[0] == pytest.approx(120 / 15, rel=1e-12)


def test_a_memory_violation_names_the_ranks_whose_state_and_activations_it_takes():
    """The layout of the test above: the first stage's bound takes a middle device's state (16 layers,
    12,751,208,448 parameters, against the first's 15 layers and the embedding, 12,479,594,496) and the first
    device's activations (120 layer-microbatches against 112), so the message names both ranks and worst_stage
    is the activations' rank (they are the larger part). A DeepSeek-V3 split whose second rank holds 4 MoE layers
    (ep 8: 32 local experts each) where the first holds 3 dense and 1 is named as rank 1, not 0."""
    import numpy as np

    from layoutsearch.core.catalogue import load_model
    from layoutsearch.core.specs import Workload
    from layoutsearch.costs import terms

    model = load_model("llama3-405b")
    sh = terms.Shapes.of(pp=8, tp=4, v=1, fsdp=32)
    assert 15 * 796_950_528 + 525_336_576 == 12_479_594_496 < 12_751_208_448
    workload = Workload(global_batch_seqs=1024, seq_len=8192)
    state_at, saved_at = terms.first_stage_devices(
        model, workload, sh, np.array([3]), np.array([32]), np.array([0]), False
    )
    assert (int(state_at[0]), int(saved_at[0])) == (1, 0)
    problem = Problem.build("llama3-405b", "h100-1024", workload)
    est = estimate(
        problem,
        Layout(pp=8, tp=4, fsdp=32, zero_stage=3, num_microbatches=32, recompute="none"),
        strict=False,
    )
    assert est.worst_stage == 0
    assert [v.message for v in est.violations] == [
        "needs 142.1 GB per device at layer_backward (stage 1's state and stage 0's activations), "
        "82.3 GB available"
    ]
    moe = Problem.build("deepseek-v3", "h800-128", build_workload(512, 4096))
    est = estimate(moe, Layout(dp=8, pp=16, ep=8, zero_stage=3, num_microbatches=16), strict=False)
    assert est.worst_stage == 1
    assert "needs 567.9 GB per device at forward_end (stage 1), 82.3 GB available" in [
        v.message for v in est.violations
    ]
