"""The balanced pipeline split (core.stages): its exact split of a weight list, its stage counts, its
Megatron layout string, CP-SAT against the enumerator where it is searched, the main job unchanged."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import numpy as np
import pytest
from builders import exported, solve_doc
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.rules import framework_rules, violations
from layoutsearch.core.specs import RECOMPUTE_CODES, SCHEDULE_CODES, Layout, Workload
from layoutsearch.core.stages import (
    SPLIT_NAMES,
    balanced_bubble_stages,
    balanced_chunk_sizes,
    balanced_chunks,
    balanced_split,
    balanced_stage_chunks,
)
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import params, terms
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import check_export
from layoutsearch.frameworks import capabilities_of
from layoutsearch.search import solve

runner = CliRunner()
ALL_SPLITS = tuple(SPLIT_NAMES.values())


def test_balanced_chunks_of_a_hand_made_weight_list():
    """Weights 1,1,1,1,1,3 in 3 chunks: the heaviest chunk is at least 3 (the last item), and 3 is
    reached; the boundaries go where the running weight is nearest the even shares 8/3 = 2.67 and 5.33
    (3 and 5): chunks of 3, 2 and 1 items weighing 3, 2, 3. Fewer items than chunks: no split."""
    assert balanced_chunk_sizes((1, 1, 1, 1, 1, 3), 3) == (3, 2, 1)
    assert balanced_chunk_sizes((1, 1, 1, 1, 1, 3), 6) == (1, 1, 1, 1, 1, 1)
    assert balanced_chunk_sizes((1, 1), 3) == ()


def test_two_stages_take_the_first_boundary_of_a_tie():
    """Eight unit weights and a last of 3 (total 11), pp = 2, v = 1: no split beats a heaviest stage of
    6 ((5, 4) items weigh 5 and 6, (6, 3) 6 and 5); the boundary nearest the even share 5.5 is after 5 or
    6 items, the first taken: first 5, last 4, the middle of two stages the heavier count, 5."""
    weights = (1.0,) * 8 + (3.0,)
    assert balanced_split(weights, 2, 1) == (5, 5, 4, True)


def test_layer_weights_of_deepseek_v3_dense_and_moe_layers():
    """DeepSeek-V3's weights, 2 FLOPs a parameter: MLA 187,107,328 (q_a 7168 x 1536, q_b 1536 x 128 x 192,
    kv_a 7168 x 576, kv_b 512 x 128 x 256, o 128 x 128 x 7168, latent norms 2048) and 2 norms of 7168;
    layers 0-2 dense (MLP 3 x 7168 x 18432 = 396,361,728: 583,483,392), layer 3 MoE (shared 3 x 7168 x
    2048 = 44,040,192, router 7168 x 256 + 256, 8 routed experts of 44,040,192: 398,196,992 MLP,
    585,318,656); the last adds the head 2 x 129280 x 7168 and the MTP module."""
    model = load_model("deepseek-v3")
    w = params.layer_weights(model)
    assert w[0] == 2 * 583_483_392
    assert w[3] == 2 * 585_318_656
    head = 2 * 129_280 * 7168
    mtp = 2 * (585_318_656 + 2 * 7168**2) + head
    assert w[60] == 2 * 585_318_656 + head + mtp
    assert params.moe_layers_in(model, 0, 9) == 6  # stage 0 of 9 layers: 3 dense, 6 MoE


def test_deepseek_v3_balanced_split_and_megatron_layout_string():
    """DeepSeek-V3 on pp = 8: the last layer with the head and the MTP module weighs 5.34 layers, so
    the balanced split holds 4 layers on the last stage (8.34 layers' work), 9 on the first and 8 on
    the others (no stage above 9); the layout string is Megatron's E/t/m/L chunks."""
    weights = params.layer_weights(load_model("deepseek-v3"))
    assert balanced_split(weights, 8, 1) == (9, 8, 4, True)
    chunks = balanced_chunks(weights, 8, 1, mtp_layers=1)
    layout = "|".join("".join(c) for c in chunks)
    assert layout == "E" + "t" * 9 + ("|" + "t" * 8) * 6 + "|ttttmL"


def test_interleaved_chunks_even_out_the_stages_and_set_the_bubble():
    """Ten unit weights on pp = 2 x v = 2: the heaviest chunk is at least 3 (10 / 4 = 2.5); the boundaries
    nearest the shares 2.5, 5, 7.5 give chunks (2, 3, 2, 3), stages 2 + 2 = 4 and 3 + 3 = 6; moving the
    first boundary a layer later gives (3, 2, 2, 3), stages 5 and 5. The bubble's v is the heaviest stage
    over the largest chunk, 5 / 3 (the bubble (p - 1) x 3 layers, not (p - 1)/2 x 5)."""
    weights = (1.0,) * 10
    assert balanced_chunk_sizes(weights, 4) == (2, 3, 2, 3)
    assert balanced_stage_chunks(weights, 2, 2) == (3, 2, 2, 3)
    assert balanced_split(weights, 2, 2) == (5, 5, 5, True)
    assert balanced_bubble_stages(weights, 2, 2) == 5 / 3


def _problem(model="llama3-8b", cluster="h100-16", seqs=16):
    return Problem.build(
        load_model(model),
        resolve_cluster(cluster),
        Workload(
            global_batch_seqs=seqs, seq_len=8192 if seqs == 16 else 4096, framework="megatron"
        ),
    )


@pytest.mark.parametrize(
    ("model", "cluster", "seqs", "fix"),
    [
        ("llama3-8b", "h100-16", 16, {"pp": 8}),
        ("deepseek-v2", "h100-128", 256, {"pp": 4, "tp": 2}),  # a dense first layer, MoE after
    ],
)
def test_cpsat_equals_the_enumerator_with_the_balanced_split(model, cluster, seqs, fix):
    """llama3-8b on 16 H100 with pp = 8 and deepseek-v2 on 128 with pp = 4, tp = 2 (Megatron, every
    split searched, the balanced one included): CP-SAT's top 5 are the enumerator's, layouts and
    step times, and a balanced split is among them (deepseek-v2's 5th, behind two ZeRO-2 layouts that
    rank first for their headroom and two ZeRO-1 ones; its 4th, behind norm_mla_up_proj's, until ZeRO-2
    reduce-scattered its gradients in every microbatch)."""
    problem = _problem(model, cluster, seqs)
    options = SearchOptions(fix=fix, pipeline_splits=ALL_SPLITS)
    proven = solve(problem, SearchRequest(options=options, top_k=5))
    oracle = solve(problem, SearchRequest(options=options, top_k=5, method="enumerate"))
    assert proven.status == "OPTIMAL"
    assert [e.layout for e in proven.layouts] == [e.layout for e in oracle.layouts]
    assert [e.step_time_s for e in proven.layouts] == [e.step_time_s for e in oracle.layouts]
    assert any(e.layout.balanced_split for e in proven.layouts)


def test_main_job_is_unchanged():
    """llama70b on v5p-8192 (MaxText: no balanced split): objective 0.7918784213998217 s (with the
    loss's passes; 0.7913092754911213 s, the GEMM shapes' value, before them) and 724,076 candidates, as before the split choice."""
    r = runner.invoke(
        app, ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--format", "json"]
    )
    doc = json.loads(r.stdout)
    assert doc["solver"]["objective"] == 0.7918784213998217
    assert doc["solver"]["num_candidates"] == 724_076


def test_deepseek_v3_first_stage_holds_its_own_moe_layers():
    """DeepSeek-V3 on pp = 2 (the engine's first-last split: 31 and 30 layers), ep = 8, tp = 1: stage 0
    holds layers 0-30, 3 dense and 28 MoE (the mean would say 31 x 58/61 = 29.5), the last 30 MoE. Its
    parameters: 31 x 187,121,664 (attention, norms) + 3 x 396,361,728 (dense MLPs) + 28 x 45,875,456
    (shared expert 44,040,192, router 1,835,264) + the embedding 129,280 x 7168 = 9,201,048,576; its
    routed experts 28 x 256/8 x 44,040,192 = 39,460,012,032."""
    model = load_model("deepseek-v3")
    sh = terms.Shapes.of(pp=2, ep=8)
    assert terms.moe_layers_per_stage(model, sh)[0] == 28
    assert terms.moe_layers_per_stage(model, sh, last=True)[0] == 30
    assert terms.stage_params(model, sh, first=True)[0] == 9_201_048_576
    assert terms.expert_stage_params(model, sh, first=True)[0] == 39_460_012_032


# DeepSeek-V3 per device at tp 1, from the test above: a layer's attention and norms, a dense layer's MLP, a
# MoE layer's shared expert and router, one routed expert, the embedding (and the untied output head)
V3_LAYER, V3_DENSE_MLP, V3_MOE_MLP = 187_121_664, 396_361_728, 45_875_456
V3_EXPERT, V3_EMBEDDING = 44_040_192, 129_280 * 7168
# the MTP module outside its experts: its layer (attention, norms, shared expert, router), the projection of the
# two concatenated 7168-wide inputs 2 x 7168 x 7168 and its three norms 3 x 7168
V3_MTP = V3_LAYER + V3_MOE_MLP + 2 * 7168 * 7168 + 3 * 7168


def test_deepseek_v3_first_stage_state_is_its_own_dense_layers_not_the_most_moe_layers():
    """DeepSeek-V3 on pp = 16, ep = 64 (4 local experts), the engine's split: stage 0 holds layers 0-3 (3 dense,
    1 MoE), the middle stages 4 MoE layers, the last 1. Under 1F1B stage 0 holds 4 x 187,121,664 + 3 x
    396,361,728 + 45,875,456 + the embedding 926,679,040 = 2,910,126,336 outside its experts and 176,160,768 of
    routed experts (a middle stage: 931,988,480 and 704,643,072, lighter in all). Costing it with the most MoE
    layers a stage holds, 4, said 1,858,667,520: a dense layer's MLP (18432 wide) outweighs a MoE layer's on
    one device by 350,486,272, so that was no upper bound."""
    model = load_model("deepseek-v3")
    sh = terms.Shapes.of(pp=16, ep=64, fsdp=128, sched=SCHEDULE_CODES["1f1b"])
    # first (4 layers, 1 MoE), last (1, 1); the middle candidates (second, most layers, most MoE): stage 1's 4
    assert [float(x[0]) for x in sh.stage_compositions(model)] == [4, 1, 1, 1] + [4, 4, 1] * 3
    own = 4 * V3_LAYER + 3 * V3_DENSE_MLP + V3_MOE_MLP + V3_EMBEDDING
    assert own == 2_910_126_336
    assert terms.stage_params(model, sh, first=True)[0] == own
    assert terms.expert_stage_params(model, sh, first=True)[0] == 4 * V3_EXPERT == 176_160_768


def test_dualpipe_end_device_holds_both_end_stages_and_a_middle_device_two_middle_ones():
    """DualPipe on the same split: device 0 holds stage 0 and stage 15 (and device 15 the same two): 5 layers (3
    dense, 2 MoE), the embedding, the output head 926,679,040, the final norm 7168 and the MTP module
    335,779,072 outside its experts: 4,405,588,736; routed experts of its 2 MoE layers and the MTP's, 3 x 4 x
    44,040,192. A middle device holds two middle stages, 8 MoE layers: 1,863,976,960 and 1,409,286,144, lighter.
    (The first stage's bound plus the last stage said 3,354,129,920: 1,051,458,816 short.)"""
    model = load_model("deepseek-v3")
    sh = terms.Shapes.of(pp=16, ep=64, fsdp=128, sched=SCHEDULE_CODES["dualpipe"])
    end = 5 * V3_LAYER + 3 * V3_DENSE_MLP + 2 * V3_MOE_MLP + 2 * V3_EMBEDDING + 7168 + V3_MTP
    assert end == 4_405_588_736
    for first in (True, False):
        assert terms.stage_params(model, sh, first)[0] == end
        assert terms.expert_stage_params(model, sh, first)[0] == 3 * 4 * V3_EXPERT
    ne, experts, layers = (float(x[0]) for x in terms.first_device_params(model, sh))
    assert (ne, experts, layers) == (end, 3 * 4 * V3_EXPERT, 5)
    (_, _), middles = terms.first_devices(model, sh)
    assert [[float(x[0]) for x in d] for d in middles] == [[0, 8, 1]]


def test_v_shaped_device_holds_chunk_i_and_chunk_2p_minus_1_minus_i():
    """ZB-V on pp = 8 (16 chunks of the engine's split: 3, 4 x 14, 2): device i holds chunks i and 15 - i, so
    device 0 holds layers 0-2 (dense) and 59-60 (MoE) with the embedding, the output head and the MTP module:
    4,405,588,736 outside its experts and (2 + 1) x 32 x 44,040,192 = 4,227,858,432 of routed experts (ep 8);
    a middle device 8 MoE layers: 8 x 232,997,120 = 1,863,976,960 and 8 x 32 x 44,040,192 = 11,274,289,152,
    the heavier, which the first stage's state takes. Interleaved 1F1B puts chunk i on device i mod 8: device 0
    holds chunks 0 and 8 (3 dense, 4 MoE), the last device chunks 7 and 15 (6 MoE)."""
    model = load_model("deepseek-v3")
    zbv = terms.Shapes.of(pp=8, v=2, ep=8, fsdp=8, sched=SCHEDULE_CODES["zb-v"])
    assert [float(x[0]) for x in zbv.stage_compositions(model)] == [5, 2, 8, 8] + [8, 8, 1] * 3
    end, mid = terms.device_params(model, zbv)
    end_ne = 5 * V3_LAYER + 3 * V3_DENSE_MLP + 2 * V3_MOE_MLP + 2 * V3_EMBEDDING + 7168 + V3_MTP
    assert [float(x[0]) for x in end] == [end_ne, 3 * 32 * V3_EXPERT, 5]
    assert [float(x[0]) for x in mid] == [8 * (V3_LAYER + V3_MOE_MLP), 8 * 32 * V3_EXPERT, 8]
    assert terms.stage_params(model, zbv, first=True)[0] == 1_863_976_960
    assert terms.expert_stage_params(model, zbv, first=True)[0] == 11_274_289_152
    inter = terms.Shapes.of(pp=8, v=2, ep=8, fsdp=8, sched=SCHEDULE_CODES["interleaved"])
    assert [float(x[0]) for x in inter.stage_compositions(model)] == [7, 4, 6, 6] + [8, 8, 1] * 3


def test_dualpipe_activations_are_the_heavier_of_an_end_and_a_middle_device():
    """DualPipe on pp = 16, K = 32 (mla_up_proj: a dense layer saves 102,720 bf16 elements a token, a MoE layer
    160,576, as above): device i holds min(K, 16 - i) microbatches of stage i and min(K, i + 1) of stage 15 - i.
    The end device: 16 of stage 0 (3 dense, 1 MoE) and 1 of stage 15 (1 MoE), 16 x 468,736 + 160,576 =
    7,660,352 elements a token; a middle device 17 of a middle stage (4 MoE), 17 x 642,304 = 10,919,168, the
    heavier. The last device is an end device. 64 x 4096 tokens over fsdp 8 and 32 microbatches: 1024 tokens."""
    model = load_model("deepseek-v3")
    workload, _, _, (_, r) = _v3_stage_terms()
    k = np.array([32])
    sh = terms.Shapes.of(pp=16, ep=8, fsdp=8, sched=SCHEDULE_CODES["dualpipe"])
    for first, widths in (
        (True, 17 * 4 * 160_576),
        (False, 16 * (3 * 102_720 + 160_576) + 160_576),
    ):
        saved = terms.memory_by_microbatch(model, workload, sh, k, r, first, not first)
        assert saved["activations/saved"][0] == pytest.approx(widths * 1024 * 2, rel=1e-12)


def _v3_stage_terms():
    """DeepSeek-V3 on 16 H800 (64 x 4096 tokens, K = 4, --recompute mla_up_proj), fsdp 8, ep 8, placed by
    ``estimate``: the workload, the accelerator, the placed layout's coefficients and the row keys."""
    problem = Problem.build("deepseek-v3", "h800-16", Workload(global_batch_seqs=64, seq_len=4096))
    layout = estimate(problem, Layout(fsdp=8, pp=2, ep=8, zero_stage=1, num_microbatches=4)).layout
    co = terms.layout_coeffs(problem.model, problem.cluster, layout)
    keys = (np.array([4]), np.array([RECOMPUTE_CODES["mla_up_proj"]]))
    return problem.workload, problem.cluster.accelerator, co, keys


def test_deepseek_v3_stage_activations_count_its_own_dense_and_moe_layers():
    """DeepSeek-V3 on pp = 2 (31 and 30 layers), tp 1, sequence parallel, mla_up_proj (q, k, v dropped): a
    layer saves per token, in bf16 elements, 7168 x 3 (the residual, the latent input, the MLP norm's input)
    + 2112 (q and kv latents, RoPE key) + 16384 (attention output) + 256 (fp32 log-sum-exp) + 18432 x 2 (the
    SwiGLU gate and up outputs); a dense layer also its MLP input 7168 and activation 18432: 102,720; a MoE
    layer its MoE input 7168, the 8 dispatched copies 57,344, the fp32 router probabilities 512, the shared
    expert's activation 2048 and the routed experts' 16,384: 160,576 (tests/test_fp8_memory.py). Stage 0 (3
    dense, 28 MoE; 2 microbatches in flight under 1F1B) saves 3 x 102,720 + 28 x 160,576 per token, the last
    (30 MoE, 1 in flight) 30 x 160,576; the mean layer would give 31 and 30 x 157,730.6."""
    model = load_model("deepseek-v3")
    workload, _, _, (k, r) = _v3_stage_terms()
    tokens = 64 * 4096 / 8 / 4  # per device and microbatch
    sh = terms.Shapes.of(pp=2, ep=8, fsdp=8)
    for first, in_flight, widths in (
        (True, 2, 3 * 102_720 + 28 * 160_576),
        (False, 1, 30 * 160_576),
    ):
        saved = terms.memory_by_microbatch(model, workload, sh, k, r, first, not first)
        assert saved["activations/saved"][0] == pytest.approx(
            widths * tokens * 2 * in_flight, rel=1e-12
        )


def test_deepseek_v3_stage_compute_and_alltoalls_count_its_own_moe_layers():
    """DeepSeek-V3 on pp = 2: stage 0's layer GEMMs are 3 dense layers' and 28 MoE layers' (each layer's
    from a model of that kind alone: DeepSeek-V3 without experts, and with every layer MoE, on pp = 1), the
    last stage's 31 MoE layers' (its 30 and the MTP module); the mean layer would give 31 x (3/61 dense +
    58/61 MoE). Its expert AllToAlls are 28 MoE layers' against 58 on pp = 1 (the mean: 31/61)."""
    model = load_model("deepseek-v3")
    workload, acc, co, (k, r) = _v3_stage_terms()

    def matmul(m, pp, last=False):
        sh = terms.Shapes.of(pp=pp, ep=8, fsdp=8)
        return terms.compute_per_microbatch(m, workload, acc, sh, k, r, last)["compute/matmul"][0]

    dense = matmul(replace(model, moe=None), 1) / 61
    moe = matmul(replace(model, moe=replace(model.moe, first_dense_layers=0)), 1) / 61
    assert matmul(model, 2) == pytest.approx(3 * dense + 28 * moe, rel=1e-12)
    assert matmul(model, 2, last=True) == pytest.approx(31 * moe, rel=1e-12)
    assert matmul(model, 2) != pytest.approx(31 * (3 * dense + 58 * moe) / 61, rel=1e-4)

    def alltoalls(pp):
        sh = terms.Shapes.of(pp=pp, ep=8, fsdp=8)
        return terms.ep_per_microbatch(model, workload, acc, sh, k, co)["base"][0]

    assert alltoalls(2) / alltoalls(1) == pytest.approx(28 / 58, rel=1e-12)


def test_megatron_export_writes_the_balanced_layout_of_a_json_record():
    """llama3-8b (32 layers of 2 x 218,112,000 FLOPs a token; the head 2 x 128256 x 4096 =
    1,050,673,152, 2.41 layers) on pp = 4: the last stage takes at most 6 layers under the bound 9
    (6 + 2.41 <= 9), so the others hold 26 and the optimum is 9; the boundaries nearest the shares 8.6,
    17.2, 25.8 give 9, 8, 9, 6. The JSON record says 'balanced' and the export writes the layout."""
    layout = Layout(fsdp=4, pp=4, zero_stage=1, num_microbatches=8, balanced_split=True)
    doc = solve_doc("llama3-8b", "h100-16", 32, 4096, layout, framework="megatron")
    assert doc["layouts"][0]["stage_layers"] == {
        "first": 9,
        "middle": 9,
        "last": 6,
        "split": "balanced",
    }
    text = exported(doc, "megatron")
    assert "--pipeline-model-parallel-layout 'Ettttttttt|tttttttt|ttttttttt|ttttttL'" in text
    assert "--decoder-first-pipeline-num-layers" not in text


def test_estimate_takes_the_balanced_split():
    """estimate --balanced-split (llama3-8b on 16 H100, pp = 4, Megatron): the balanced split's 9 / 9 / 6 layers
    (test_megatron_export_writes_the_balanced_layout_of_a_json_record), where the engine's is even (8 each); with
    --first-stage-layers, and on pp = 1, exit 2 with one line naming the options."""
    argv = [
        *"estimate --model llama3-8b --cluster h100-16 --seqs 32 --seq-len 4096".split(),
        *"--layout fsdp=4,pp=4 --zero-stage 1 --microbatches 8 --framework megatron".split(),
    ]
    r = runner.invoke(app, [*argv, "--balanced-split", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["layout"]["stage_layers"] == {
        "first": 9,
        "middle": 9,
        "last": 6,
        "split": "balanced",
    }
    r = runner.invoke(app, [*argv, "--format", "json"])
    assert json.loads(r.stdout)["layout"]["stage_layers"]["split"] == "even"
    bad = runner.invoke(app, [*argv, "--balanced-split", "--first-stage-layers", "9"])
    assert bad.exit_code == 2
    assert bad.stderr == (
        "error: --balanced-split: the balanced split chooses every stage's layers, "
        "not with --first-stage-layers(9)\n"
    )
    single = [a if a != "fsdp=4,pp=4" else "fsdp=16" for a in argv]
    bad = runner.invoke(app, [*single, "--balanced-split"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith(
        "error: --layout fsdp=16: the balanced split of num_layers(32) over pp(1)"
    )
    assert bad.stderr.count("\n") == 1


def test_pipeline_splits_option_restricts_the_split_and_names_bad_splits():
    """llama3-8b on 16 H100 with pp = 8 (Megatron): the balanced split is opt-in: the default winner
    holds an engine split, --pipeline-splits balanced,even a balanced one, and --pipeline-splits
    even,first-last none; an unknown split is exit 2 naming it."""
    argv = "solve --model llama3-8b --cluster h100-16 --seqs 16 --seq-len 8192 --fix pp=8".split()
    default = runner.invoke(app, [*argv, "--format", "json"])
    assert default.exit_code == 0, default.stderr
    assert json.loads(default.stdout)["layouts"][0]["stage_layers"]["split"] == "even"
    opted = runner.invoke(app, [*argv, "--pipeline-splits", "balanced,even", "--format", "json"])
    assert opted.exit_code == 0, opted.stderr
    assert json.loads(opted.stdout)["layouts"][0]["stage_layers"]["split"] == "balanced"
    r = runner.invoke(app, [*argv, "--pipeline-splits", "even,first-last", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    splits = {x["stage_layers"]["split"] for x in json.loads(r.stdout)["layouts"]}
    assert splits <= {"even", "first-last"}
    bad = runner.invoke(app, [*argv, "--pipeline-splits", "even,balancd"])
    assert bad.exit_code == 2
    assert "--pipeline-splits: unknown split 'balancd'" in bad.stderr


def test_targets_without_a_layout_refuse_the_balanced_split_by_rule():
    """llama3-8b on pp = 4 with the balanced split: MaxText, DeepSpeed and torchtitan 0.3 refuse it naming the
    split and the way out; Megatron, which writes the layout, and torchtitan 0.2, which writes the chunks'
    modules, do not."""
    problem = _problem()
    layout = Layout(fsdp=4, pp=4, zero_stage=1, num_microbatches=8, balanced_split=True)
    found = {
        target: [
            v.message
            for v in violations(problem, layout, framework_rules(capabilities_of(target)))
            if v.code.endswith("-split")
        ]
        for target in ("torchtitan", "torchtitan-0.3", "maxtext", "deepspeed", "megatron")
    }
    assert found["megatron"] == found["torchtitan"] == []
    assert found["torchtitan-0.3"][0].startswith("torchtitan cannot express the balanced split")
    assert found["maxtext"] == [
        "MaxText cannot express the balanced split of num_layers(32) over pp(4) x virtual_stages(1); "
        "nearest: the engine's split (--pipeline-splits without balanced), or export to megatron"
    ]
    assert found["deepspeed"][0].startswith("DeepSpeed cannot express the balanced split")


def test_torchtitan_export_writes_the_balanced_chunks_as_module_names():
    """llama3-8b's balanced split on pp = 4 holds 9 / 8 / 9 / 6 layers
    (test_megatron_export_writes_the_balanced_layout_of_a_json_record): torchtitan's
    module_fqns_per_model_part lists those chunks' modules in order, the embedding first and the norm and
    output head last, and no layer counts beside them; on pp = 2 x 2 virtual stages, four chunks under
    Interleaved1F1B. A part that drops a layer is the checker's finding."""
    layout = Layout(fsdp=4, pp=4, zero_stage=1, num_microbatches=8, balanced_split=True)
    doc = solve_doc("llama3-8b", "h100-16", 32, 4096, layout, framework="torchtitan")
    par = tomllib.loads(exported(doc, "torchtitan"))["parallelism"]
    bounds = (0, 9, 17, 26, 32)
    parts = [[f"layers.{i}" for i in range(a, b)] for a, b in zip(bounds, bounds[1:])]
    assert par["module_fqns_per_model_part"] == [
        ["tok_embeddings", *parts[0]],
        parts[1],
        parts[2],
        [*parts[3], "norm", "output"],
    ]
    assert "pipeline_parallel_layers_per_stage" not in par
    assert par["pipeline_parallel_schedule"] == "1F1B"
    layout = Layout(
        fsdp=8,
        pp=2,
        zero_stage=1,
        num_microbatches=4,
        virtual_stages=2,
        schedule="interleaved",
        balanced_split=True,
    )
    doc = solve_doc("llama3-8b", "h100-16", 32, 4096, layout, framework="torchtitan")
    text = exported(doc, "torchtitan")
    par = tomllib.loads(text)["parallelism"]
    assert len(par["module_fqns_per_model_part"]) == 4
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    broken = text.replace("'layers.3', ", "")
    assert (
        "module_fqns_per_model_part does not hold tok_embeddings, layers.0 .. layers.31"
        in " ".join(check_export("torchtitan", broken, doc))
    )


def test_a_torchtitan_export_searches_the_balanced_split_unasked():
    """torchtitan writes the even split and the balanced one (module_fqns_per_model_part), none of the engine's
    other uneven splits, so `solve --export torchtitan` tries the balanced split without --pipeline-splits.
    Llama 3 405B's 126 layers divide over no power-of-two pipeline of h100-1024: even splits alone left no
    pipeline (dp 2 x fsdp 256 x tp 2, full recompute, 54.179 s a step, as `--pipeline-splits even` still
    gives; 54.629 s before the loss's passes were costed); the balanced split puts 8, 8 and 7 layers on 16 stages x 3 chunks (46.422 s; 46.785 s before the loss's passes were costed and the h100 class
    refitted beside them). The 0.3 export,
    which writes even splits only, keeps to them."""
    from layoutsearch import api

    def best(**options):
        run = api.solve(
            model="llama3-405b", cluster="h100-1024", seqs=1024, seq_len=8192, top=1, **options
        )
        return run.document["layouts"][0]

    balanced = best(export="torchtitan")
    assert (balanced["degrees"]["pp"], balanced["virtual_stages"]) == (16, 3)
    assert balanced["stage_layers"] == {"first": 8, "middle": 8, "last": 7, "split": "balanced"}
    assert balanced["time_s"]["step"] == pytest.approx(46.422, abs=1e-3)
    for even in (best(export="torchtitan", pipeline_splits="even"), best(export="torchtitan-0.3")):
        assert (even["degrees"]["pp"], even["stage_layers"]["split"]) == (1, "even")
        assert even["time_s"]["step"] == pytest.approx(54.179, abs=1e-3)
