"""`layoutsearch validate` on mixture-of-experts records (docs/RUN_RECORDS.md "Mixture-of-experts records";
mapping rule 16): the model and layout a MoE/MLA record maps to, its skips, the compared metric,
and the whole MoE development set (tests/data/runs_moe_dev.yaml) end to end."""

import copy
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.specs import LEARNED_ROUTING_EXPERT_CV
from layoutsearch.costs.params import param_counts
from layoutsearch.validation.calibrate import learned_routing_problems, routing_cv_scan
from layoutsearch.validation.mapping import (
    cuda_graphs,
    mapping_notes,
    named_cuda_graphs,
    record_model,
    record_to_problem,
    routing,
)
from layoutsearch.validation.validate import (
    evaluate_record,
    load_runs,
    record_to_estimate,
    validate_runs,
)

REPO = Path(__file__).resolve().parents[1]
DEEPSEEK = (
    "mbridge-26.04-b200-deepseek-v3-fp8-n256-tp1pp16vp1ep8-gbs4096mbs1"  # evaluated (pp16, no vp)
)
GROK_EP_ETP = "dgxc-grok1-h100-fp8-n8-L2-tp4pp1cp1ep2"  # tp4, ep2, etp4 on 8 GPUs
QWEN3_30B = "mbridge-26.06-h100-qwen3-30b-fp8-n16-tp1pp1vp1ep16-gbs1024mb"  # prefix; every layer MoE (d_ff null)
MLPERF_REAL = "mlperf6-gptoss20b-b200-mxfp8-n8-tp1cp1ep2-dell"  # real routing, ZeRO-3 + ep2
AUTOMODEL_NO_EP = "automodel-gpt-oss-20b-h100-bf16-n8-pp1epNAfsdp8-gbs256"  # ep, etp null
MOE_DEV = REPO / "tests" / "data" / "runs_moe_dev.yaml"


@pytest.fixture(scope="module")
def moe_runs(data_file):
    return load_runs(data_file("runs_moe_dev.yaml"))


@pytest.fixture(scope="module")
def by_id(moe_runs) -> dict[str, dict]:
    return {r["id"]: r for r in moe_runs}


def one(by_id: dict, prefix: str) -> dict:
    """A deep copy of the one record whose id starts with ``prefix``."""
    (rec,) = [r for rid, r in by_id.items() if rid.startswith(prefix)]
    return copy.deepcopy(rec)


# ----------------------------------------------------------------------------- the model
def test_deepseek_v3_record_maps_to_its_parameter_count(by_id):
    """The DeepSeek-V3 record's model counts params_total to 0.0002%: the difference is exactly the norms the
    record leaves out (two per layer and the final one, in 'norms', and MLA's two latent norms per layer,
    counted with the attention). MTP is counted beside the model; MLA fixes head_dim and the KV heads."""
    rec = by_id[DEEPSEEK]
    m = rec["model"]
    model = record_model(rec)
    counts = param_counts(model)
    latent_norms = m["num_layers"] * (m["mla"]["q_lora_rank"] + m["mla"]["kv_lora_rank"])
    assert counts["total"] - m["params_total"] == counts["norms"] + latent_norms == 1_006_592
    assert abs(counts["total"] / m["params_total"] - 1) < 1e-3
    assert counts["active"] - m["params_active"] == counts["norms"] + latent_norms
    assert counts["mtp"] == 11_610_067_968 and model.mtp_layers == 1  # beside 'total', not in it
    assert (model.head_dim, model.num_kv_heads, model.d_ff) == (
        192,
        128,
        18432,
    )  # the record says head_dim 128
    assert (model.num_moe_layers, model.num_dense_layers, model.moe.layer_freq) == (58, 3, 1)
    assert model.moe.capacity_factor is None and model.mla.v_head_dim == 128
    problem, _ = record_to_problem(rec)
    assert (
        problem.model == model and problem.workload.routing == "forced"
    )  # the Megatron-Bridge configs force it
    assert (
        "MLA: head_dim 128 -> 192 (qk_nope + qk_rope), num_kv_heads -> num_heads"
        in mapping_notes(rec)
    )
    assert (
        "MTP: 1 module(s) counted beside the model, costed as a layer and an output-head pass each on the last "
        "stage (not their memory)"
    ) in mapping_notes(rec)


def test_every_moe_model_counts_its_records_params_total(moe_runs):
    """Each distinct model of the file counts its params_total within 0.1% (the engine adds only norms)."""
    models = {}
    for r in moe_runs:
        models.setdefault(r["model"]["name"], r)
    assert len(models) == 11
    for name, r in models.items():
        counts = param_counts(record_model(r))
        assert (
            0 < counts["total"] - r["model"]["params_total"] < 1e-3 * r["model"]["params_total"]
        ), name


def test_all_moe_record_takes_the_expert_width_and_dense_layers_need_theirs(by_id):
    """d_ff null: every layer MoE, the engine's dense width is the expert's; with dense layers it is a skip."""
    rec = one(by_id, QWEN3_30B)
    model = record_model(rec)
    assert rec["model"]["d_ff"] is None and model.d_ff == model.moe.expert_d_ff == 768
    assert (
        model.num_moe_layers == model.num_layers == 48
        and "d_ff null: every layer MoE" in mapping_notes(rec)
    )
    rec["model"]["moe"]["first_dense_layers"] = 2
    assert record_to_problem(rec) == (
        "missing value: model.d_ff null (every layer MoE) but moe.first_dense_layers(2) "
        "and moe_layer_freq(1) leave dense layers, whose FFN width the engine needs"
    )


def test_moe_and_mla_fields_the_engine_needs(by_id):
    """A null expert count or MLA rank is a skip naming the field; an mla block with gqa attention is refused."""
    rec = one(by_id, DEEPSEEK)
    rec["model"]["moe"]["expert_d_ff"] = None
    rec["model"]["mla"]["kv_lora_rank"] = None
    assert record_to_problem(rec) == (
        "missing value: model.moe.expert_d_ff, model.mla.kv_lora_rank null (the engine needs them)"
    )
    rec = one(by_id, DEEPSEEK)
    rec["model"]["attention"] = "gqa"
    assert (
        record_to_problem(rec)
        == "model: attention 'gqa' with a model.mla block (latent attention is attention: mla)"
    )
    rec = one(by_id, DEEPSEEK)
    rec["model"]["mla"] = None
    assert record_to_problem(rec) == "missing value: model.mla null (the engine needs it)"


# ----------------------------------------------------------------------------- the layout
def test_expert_degrees_land_on_the_layout(by_id):
    """ep and etp land on the Layout (and in its placement); dp is split by rule 1; null ep/etp -> 1, except an
    Automodel record on DeepEP, whose ep is its FSDP shard group (rule 17)."""
    problem, layout = record_to_problem(by_id[GROK_EP_ETP])
    assert (layout.dp, layout.fsdp, layout.tp, layout.ep, layout.etp, layout.zero_stage) == (
        1,
        2,
        4,
        2,
        4,
        1,
    )
    assert layout.expert_data_parallel == 1 and problem.model.moe.capacity_factor == 1.0
    assert {"ep", "etp"} <= dict(layout.axes).keys()
    _, layout = record_to_problem(by_id[DEEPSEEK])
    assert (layout.dp, layout.fsdp, layout.pp, layout.ep, layout.etp) == (1, 16, 16, 8, 1)
    assert layout.expert_data_parallel == 2
    rec = one(by_id, AUTOMODEL_NO_EP)
    problem, layout = record_to_problem(rec)
    assert (layout.ep, layout.etp, layout.fsdp, layout.zero_stage, problem.workload.deepep) == (
        8,
        1,
        8,
        3,
        True,
    )
    assert {
        "ep null -> 8 (Automodel on DeepEP: ep_size = the FSDP shard group)",
        "etp null -> 1",
        "token dispatch: DeepEP/HybridEP (once per destination GPU and node), as the record names it",
    } <= set(mapping_notes(rec))
    rec["workload"]["moe_dispatcher"] = None  # none stated: ep null -> 1, the profile's dispatch
    problem, layout = record_to_problem(rec)
    assert (layout.ep, problem.workload.deepep) == (1, False) and "ep null -> 1" in mapping_notes(
        rec
    )
    assert (
        record_to_problem(by_id[GROK_EP_ETP])[0].workload.deepep is False
    )  # "alltoall dispatcher" in its notes


def test_an_expert_layout_the_engine_rejects_is_a_skip(by_id):
    """ep that does not divide the experts is the engine's rule ep-experts, reported as the skip reason."""
    rec = one(by_id, GROK_EP_ETP)
    rec["layout"].update(ep=8, etp=1)  # 8 experts: fine; now 3
    assert not isinstance(record_to_problem(rec), str)
    rec["layout"]["ep"] = 3
    reason = record_to_problem(rec)
    assert (
        reason.startswith("engine rejects the layout: ")
        and "ep(3) does not divide the 8 routed experts" in reason
    )


def test_unknown_accelerator_is_skipped_with_its_reason(by_id):
    rec = one(by_id, DEEPSEEK)
    rec["cluster"]["accelerator"] = "h900"
    assert (
        record_to_problem(rec)
        == "unknown accelerator 'h900' (did you mean 'h800'?): not in the catalogue"
    )
    entry = evaluate_record(rec)
    assert entry["skipped_reason"] == record_to_problem(rec)
    assert entry["rel_error"] is None and entry["predicted_tokens_per_s_per_device"] is None


def test_maxtext_custom_remat_with_host_offload_maps_to_the_policy_offloading_the_same_tensors(
    by_id,
):
    """Rule 15: the tpu-recipes' remat_policy custom (layer input and named projections offloaded to host)
    is costed as the custom_offload_* policy of the same tensors, and the notes say so."""
    expected = {
        "maxtext-v6e-mixtral-8x7b": "custom_offload_dots_except_mlp",  # decoder_layer_input/out_proj/q/k/v
        "maxtext-v5p-deepseekv3": "custom_offload_out_proj",  # decoder_layer_input and out_proj
        "maxtext-v5p-llama4-maverick": "custom_offload_dots_except_mlp",  # ... and q/k/v/out projections
        "maxtext-v5p-llama4-scout": "custom_offload_input",
    }  # decoder_layer_input
    for prefix, policy in expected.items():
        rec = one(by_id, prefix)
        _, layout = record_to_problem(rec)
        assert layout.recompute == policy, prefix
        assert f"recompute -> {policy} (MaxText custom remat with host offload)" in mapping_notes(
            rec
        )
    assert (
        record_to_problem(one(by_id, "dgxc-deepseekv3-gb200"))[1].recompute == "selective"
    )  # a GPU record keeps its own


def test_megatron_recompute_modules_map_to_the_policy_recomputing_the_same(by_id):
    """Rule 15: a selective record naming Megatron's --recompute-modules is costed as the policy that recomputes
    them: the model zoo's "norm, act" and "--recompute-modules moe_act layernorm" -> norm_act, its long-context
    command's "layernorm moe" -> norm_moe, Megatron-Bridge's DeepSeek-V3 mla_up_proj -> mla_up_proj; core_attn and mlp
    keep selective. norm_act runs no
    attention core again: the 32k record's recompute time goes from the attention core's to the MoE layer's."""
    expected = {
        "modelzoo-qwen3-235b-h100-bf16-n256-a2a-overlap-off": "norm_act",  # table "norm, act"
        "modelzoo-qwen3-235b-h100-bf16-n256-script-320tf": "norm_act",  # --recompute-modules moe_act layernorm
        "modelzoo-qwen3-235b-gb200-fp8-n128-seq128k": "norm_act",  # "moe_act+layernorm"
        "modelzoo-qwen3-235b-h100-bf16-n256-seq32k": "norm_moe",  # "selective recompute of layernorm and moe"
        "mbridge-26.04.01-h100-gpt-oss-120b": "norm_act",  # "selective -- layernorm, moe_act (...)"
        "mbridge-26.04.01-b200-deepseek-v3": "mla_up_proj",  # mla_up_proj, mlp: the nearest
        "mbridge-26.04-b200-deepseek-v3": "mla_up_proj",  # "selective -- mla_up_proj (...)"
        "dgxc-deepseekv3-gb200": "selective",  # core_attn
        "mlperf6-deepseekv3-gb200-mxfp8-n256": "selective",
    }  # mlp
    for prefix, policy in expected.items():
        assert record_to_problem(one(by_id, prefix))[1].recompute == policy, prefix
    rec = one(by_id, "modelzoo-qwen3-235b-h100-bf16-n256-seq32k")
    assert "recompute -> norm_moe (Megatron --recompute-modules layernorm moe)" in mapping_notes(
        rec
    )
    problem, layout = record_to_problem(rec)
    from layoutsearch.costs.estimate import estimate

    moe_rerun, attn_rerun = (
        estimate(problem, replace(layout, recompute=r), strict=False)
        for r in ("norm_moe", "selective")
    )
    assert moe_rerun.time_s["compute/recompute"] < attn_rerun.time_s["compute/recompute"]
    assert (
        moe_rerun.time_s["exposed_comm/ep"] > attn_rerun.time_s["exposed_comm/ep"]
    )  # the dispatch runs again


def test_layernorm_and_mla_up_proj_modules_map_to_norm_mla_up_proj(by_id):
    """Rule 15: a DeepSeek-V3 record recomputing the modules layernorm and mla_up_proj (no published record does
    yet) is costed as norm_mla_up_proj, the DeepSeek-V3 report's RMSNorm and up-projection recompute; without
    layernorm it stays mla_up_proj."""
    rec = copy.deepcopy(one(by_id, "mbridge-26.04-b200-deepseek-v3"))
    rec["layout"]["recompute_modules"] = ["layernorm", "mla_up_proj"]
    assert record_to_problem(rec)[1].recompute == "norm_mla_up_proj"
    assert (
        "recompute -> norm_mla_up_proj (Megatron --recompute-modules layernorm mla_up_proj)"
        in mapping_notes(rec)
    )
    rec["layout"]["recompute_modules"] = ["mla_up_proj", "moe_act"]
    assert record_to_problem(rec)[1].recompute == "mla_up_proj"


def test_automodel_records_cost_their_loss_on_bf16_logits_and_fit(by_id):
    """Rule 28: the Automodel benchmark configs run MaskedCrossEntropy with fp32_upcast: false, so the
    records' logits and their gradient at the loss are bf16: Qwen3-30B-A3B on 8 H100s holds 16,384
    tokens of 151,936-entry logits, 4.6 GiB each instead of 9.3, and fits (it ran); predicted with fp32
    logits its peak was 78.8 GiB of the 76.6 usable. Other records keep the fp32 upcast."""
    rec = by_id["automodel-qwen3-30b-h100-bf16-n8-pp1ep8fsdp8-gbs512"]
    problem, layout, est = record_to_estimate(rec)
    assert problem.workload.fp32_logits is False and est.fits
    assert est.memory_bytes["temporary/logits"] == pytest.approx(16384 * 151936 * 2)
    assert est.memory_bytes["peak"] / 2**30 == pytest.approx(69.50, abs=0.01)
    assert "loss on bf16 logits (fp32_upcast: false)" in " ".join(mapping_notes(rec))
    for name in (
        "automodel-kimi-k2-h100-bf16-n256-pp8ep32fsdp32-gbs512",
        "automodel-gpt-oss-20b-h100-bf16-n8-pp1epNAfsdp8-gbs256",
        "automodel-gpt-oss-120b-h100-bf16-n64-pp1epNAfsdp64-gbs512",
    ):
        assert record_to_estimate(by_id[name])[2].fits, name
    torchtitan, _ = record_to_problem(by_id["torchtitan-llama4-scout-gb200-bf16-n256-fsdp256-ep16"])
    assert torchtitan.workload.fp32_logits is True


def test_automodel_records_on_transformer_engine_attention_cost_the_vendor_kernel(by_id):
    """Rule 19: the Automodel benchmark configs *_te_deepep.yaml set backend attn: te, so their records are costed
    with the vendor's fused attention (H100: 0.5868 of peak at long contexts) although their profile (torchtitan) uses
    FlashAttention-2's (0.2); other records keep their profile's choice."""
    from layoutsearch.costs.terms import attention_efficiency

    problem, _ = record_to_problem(by_id["automodel-qwen3-30b-h100-bf16-n8-pp1ep8fsdp8-gbs512"])
    assert problem.workload.framework == "torchtitan" and problem.workload.vendor_attention is True
    assert attention_efficiency(problem.workload, problem.cluster.accelerator) == 0.5868
    assert "Transformer Engine attention (attn: te): the vendor's fused attention" in mapping_notes(
        by_id["automodel-qwen3-30b-h100-bf16-n8-pp1ep8fsdp8-gbs512"]
    )
    torchtitan, _ = record_to_problem(by_id["torchtitan-llama4-scout-gb200-bf16-n256-fsdp256-ep16"])
    assert torchtitan.workload.vendor_attention is None  # the profile's: FlashAttention-2 class
    assert (
        attention_efficiency(torchtitan.workload, torchtitan.cluster.accelerator)
        == torchtitan.cluster.accelerator.attention_efficiency
    )


def test_routing_is_costed_as_the_record_says_and_noted(by_id):
    """MLPerf's real routing is costed learned, the vendors' forced balance forced (random routing), a record that
    does not say learned (the engine's default); each noted."""
    real, grok = by_id[MLPERF_REAL], by_id[GROK_EP_ETP]
    assert (
        routing(real) == "real"
        and routing(by_id[DEEPSEEK]) == "forced"
        and routing(grok) == "not stated"
    )
    assert "real routing (workload.moe_routing): costed learned" in mapping_notes(real)
    assert (
        "routing force-balanced (workload.moe_routing): costed forced (random routing)"
        in mapping_notes(by_id[DEEPSEEK])
    )
    assert "routing balance not stated: costed learned (the engine's default)" in mapping_notes(
        grok
    )
    problem, layout = record_to_problem(real)
    assert problem.workload.routing == "learned" and (layout.ep, layout.fsdp) == (2, 8)
    assert record_to_problem(by_id[DEEPSEEK])[0].workload.routing == "forced"
    assert record_to_problem(grok)[0].workload.routing == "learned"
    # NeMo's rows say "forced balancing not stated" in their notes: moe_routing null
    nemo = one(by_id, "nemo25.04-gb200-mixtral-8x7b")
    assert nemo["workload"]["moe_routing"] is None and routing(nemo) == "not stated"
    assert record_to_problem(nemo)[0].workload.routing == "learned"


def test_nemo_rows_take_the_cuda_graphs_of_their_release_configuration(by_id):
    """Rule 26: a NeMo performance-summary row ran its release's recommended configuration (nemo_perf_configs.yaml:
    the MoE pre-training rows of NeMo 2.3.0's and 2.4.0's model_configs_<gpu>.csv); where the model, precision and
    whole layout match, its cuda_graphs column (Megatron's per-layer enable_cuda_graph) is costed scoped. NeMo 25.04's
    GB200 Mixtral-8x7B fp8 row on 64 GPUs has cuda_graphs 1; its Mixtral-8x22B row has no GB200 configuration, and a
    changed layout matches none."""
    from layoutsearch.validation.mapping import nemo_perf_config, nemo_perf_configs

    assert (
        len(nemo_perf_configs()) == 54
        and sum(c["cuda_graphs"] == "scoped" for c in nemo_perf_configs()) == 20
    )
    small = one(by_id, "nemo25.04-gb200-mixtral-8x7b")
    assert nemo_perf_config(small)["source"] == (
        "v2.3.0 (2b03b748bb7d) scripts/performance/recommended_model_configs/"
        "model_configs_gb200.csv mixtral,8x7b,fp8,64"
    )
    assert record_to_problem(small)[0].workload.cuda_graphs == "scoped"
    assert (
        "NeMo 25.04 performance configuration (model_configs_gb200.csv mixtral,8x7b,fp8,64 @ v2.3.0, 2b03b748bb7d), "
        "the row's layout: CUDA graphs scoped (per-layer graphs: Megatron's enable_cuda_graph)"
    ) in mapping_notes(small)
    assert nemo_perf_config(one(by_id, "nemo25.04-gb200-mixtral-8x22b")) is None
    assert (
        record_to_problem(one(by_id, "nemo25.04-gb200-mixtral-8x22b"))[0].workload.cuda_graphs
        == "none"
    )
    moved = copy.deepcopy(small)
    moved["layout"]["microbatch_seqs"] = 1
    assert nemo_perf_config(moved) is None and cuda_graphs(moved) == "none"
    elsewhere = copy.deepcopy(
        small
    )  # the same text in another source's record is not a NeMo summary row
    elsewhere["source"] = "NVIDIA/dgxc-benchmarking mixtral (NeMo 25.04, DGX-GB200 table)"
    assert nemo_perf_config(elsewhere) is None


def test_gpt_oss_records_cost_their_sliding_window(by_id):
    """Rule 16: a record's model.sliding_window 128 with full_attention_layers 18 is costed: 18 of gpt-oss-120b's 36
    layers attend over the whole 4096-token sequence (2048 keys per query, causal), 18 over a 128-token band
    (128 - 128^2 / (2 x 4096) = 126 keys), each query paying the kernel's per-call work of B200's 200 keys
    (attention_half_efficiency_keys) on both; the rest of the notes (sinks, biases, the clamp) stays uncosted and noted."""
    from layoutsearch.costs.estimate import estimate

    rec = one(by_id, "mbridge-26.04.01-b200-gpt-oss-120b")
    problem, layout = record_to_problem(rec)
    assert (problem.model.sliding_window, problem.model.full_attention_layers) == (128, 18)
    assert (
        "sliding window 128 (model.sliding_window): costed, 18 of 36 layers attend over the whole sequence"
    ) in mapping_notes(rec)
    assert (
        "model notes not costed: learned attention sinks, QKV/O and expert biases; clamped SwiGLU (limit 7.0)"
        in mapping_notes(rec)
    )
    full = replace(
        problem, model=replace(problem.model, sliding_window=None, full_attention_layers=0)
    )
    windowed, whole = (
        estimate(p, layout, strict=False).time_s["compute/attention"] for p in (problem, full)
    )
    assert windowed / whole == pytest.approx(
        (18 * (126 + 456) + 18 * (2048 + 456)) / (36 * (2048 + 456)), rel=1e-12
    )


def test_the_learned_routing_spread_is_what_its_fit_finds(moe_runs):
    """core.specs.LEARNED_ROUTING_EXPERT_CV (0.15) against the 14 dev records costed learned, dropless, with ep > 1
    (NeMo's three Mixtral rows among them), Huber loss at the records' own scale: within 1% of the best of the four
    (0.2, 0.8% lower: a near tie, and the default stays, as scripts/fit_routing_cv.py rules), 0.05's loss 9.1% above
    it. Before the fits took Huber's loss at the set's own scale (20% then) it was the best of the four, 0.05's loss
    4.7% above it (3.5% before
    the loss's passes were costed and the fits redone beside them; the
    0.05 grid's best, scripts/fit_routing_cv.py, is 0.15 itself) since the element-wise kernels run at their
    measured rates and the MoE host time and Blackwell's fraction were refitted beside them (moving these records'
    errors 2-3% the way a wider spread takes back). Before, 0.15 was 3.1% above the 0.05 grid's best, 0.05
    (3.2% until a slower last pipeline stage paced only the microbatches, 2026-12-06; a
    near tie within 1% until the interleaved schedule's per-chunk reductions and fill
    sends, 2026-12-05; 3.1% until FSDP2's copies around the ZeRO-3 collectives were costed). Held, as docs/calibration.md says: at 0.15 these records' median |error| is 7.4% (8.9% at
    0.05; 5.9% and 7.9% before the element-wise kernels ran at their measured rates, 5.8% at 0.15 before the paced
    last stage), and DeepSeek-V3's pre-training stays within 10% of its published GPU-hours
    (tests/test_end_to_end_plans.py; 11% below them at 0.05)."""
    problems = learned_routing_problems(moe_runs)
    assert len(problems) == 14 and all(
        p[1][0].workload.routing == "learned" and p[1][1].ep > 1 for p in problems
    )
    assert {
        "torchtitan-llama4-scout-gb200-bf16-n256-fsdp256-ep16",
        "nemo25.04-gb200-mixtral-8x7b-fp8-n64-tp1pp1cp1vp1ep8",
    } <= {p[0] for p in problems}
    scan = routing_cv_scan(problems, (0.05, 0.1, LEARNED_ROUTING_EXPERT_CV, 0.2))
    assert LEARNED_ROUTING_EXPERT_CV == 0.15
    # 0.05 < 0.1 < 0.15 < 0.2 before the element-wise kernels ran at their measured rates; 0.15 < 0.2 before the fits
    # took Huber's loss at the set's own scale
    assert scan[0.05][0] > scan[0.1][0] > scan[0.15][0] > scan[0.2][0]
    assert scan[0.15][0] / scan[0.2][0] - 1 == pytest.approx(0.008, abs=0.001)
    assert scan[0.15][0] / scan[0.05][0] - 1 == pytest.approx(
        -0.0914, abs=0.001
    )  # -0.0449 before the fits took Huber's loss at the set's own scale; -0.0340, +0.0311 before
    # the median |error| over the same records: lower at 0.15
    median = {cv: float(np.median(np.abs(np.expm1(scan[cv][1])))) for cv in (0.05, 0.15)}
    # (0.0885, 0.0743) before the loss's passes were costed; (0.079, 0.0587) before the element-wise kernels ran at
    # their measured rates
    assert (median[0.05], median[0.15]) == pytest.approx((0.0901, 0.0714), abs=5e-4)
    # (0.2100 at 0.2 before each pipeline stage's parameters counted its own MoE layers; 0.2154, 0.2081, 0.2101
    # before its compute, activations and AllToAlls did, before the H200 physics and refit and before the
    # contention between TP, CP and the ZeRO-3 gathers was read from the links each loads; 0.2052, 0.2001, 0.2058
    # while GB200's FlashAttention-2 fraction, which the torchtitan Scout row runs, was the h100 class's
    # Triton-kernel fit 0.2, not the H200-measured rate per SM on its SMs, 0.1486; 0.1826, 0.1813, 0.1905 while
    # that row, which states torch_compile false, was costed with fused element-wise kernels; 0.1764 at 0.05 and
    # 0.1783, 0.1779, 0.1881 before the interleaved schedule's per-chunk reductions and fill sends; 0.1640, 0.1675,
    # 0.1691, 0.1816 before FSDP2's copies around the ZeRO-3 collectives; 0.1814 at 0.2 before a pipeline's
    # first stage cost the heaviest device's own layers, 2026-12-05; 0.1635, 0.1671, 0.1688 before a slower last
    # stage paced only the microbatches, 2026-12-06; 0.1638, 0.1673, 0.1689, 0.1813 before the element-wise
    # kernels ran at their measured rates and the MoE host time and Blackwell's fraction were refitted beside them;
    # 0.1769, 0.1743, 0.1709, 0.1763 before the loss's passes were costed and the fits redone beside them; 0.1787,
    # 0.1751, 0.1707, 0.1751 at Huber's former fixed scale, 20%, before the fits took the records' own)
    assert (scan[0.05][0], scan[0.1][0], scan[0.15][0], scan[0.2][0]) == pytest.approx(
        (0.1663, 0.1587, 0.1511, 0.1499), abs=5e-5
    )


# ----------------------------------------------------------------------------- the compared metric
def test_moe_records_compare_tokens_per_s_per_device(by_id):
    """rel_error is on tokens/s per device even where the source gives its own TFLOP/s; without tokens/s the
    record has nothing to compare."""
    rec = by_id[DEEPSEEK]
    assert rec["measured"]["tflops_per_device"] is not None
    entry = evaluate_record(rec)
    assert entry["compared_metric"] == "tokens_per_s_per_device"
    assert entry["rel_error"] == pytest.approx(
        entry["predicted_tokens_per_s_per_device"] / 2815.0 - 1
    )
    rec = one(by_id, DEEPSEEK)
    rec["measured"]["tokens_per_s_per_device"] = None
    entry = evaluate_record(rec)
    assert entry["compared_metric"] is None and entry["skipped_reason"].startswith("no measurement")


# ----------------------------------------------------------------------------- the whole file
@pytest.mark.slow
def test_moe_dev_set_end_to_end(moe_runs):
    """All 71 records are evaluated or skipped with a reason. 2 are skipped: the MLPerf GPT-OSS runs whose
    ZeRO stage is not given. The 9 runs of the 61-layer DeepSeek-V3 / Kimi-K2 with virtual pipeline stages
    are split as Megatron's pipeline layouts split them (core.stages chunk layout)."""
    doc = validate_runs(moe_runs, rank=False, loso=False)
    entries, s = doc["records"], doc["summary"]
    assert len(entries) == len(moe_runs) == 71 and s["warnings"] == []
    for e in entries:
        assert (e["skipped_reason"] is None) != (e["predicted_tokens_per_s_per_device"] is None)
        assert e["skipped_reason"] is None or e["skipped_reason"].strip()
        if e["rel_error"] is not None:
            assert e["rel_error"] == pytest.approx(
                e["predicted_tokens_per_s_per_device"] / e["measured_tokens_per_s_per_device"] - 1
            )
    assert s["skipped"] == 2 and s["count"] == s["with_measured_throughput"] == 69
    assert s["skipped_reasons"] == {"missing value": 2}
    by_id = {r["id"]: r for r in moe_runs}
    chunked = [
        e
        for e in entries
        if by_id[e["id"]]["model"]["num_layers"] == 61
        and (by_id[e["id"]]["layout"]["virtual_stages"] or 1) > 1
    ]
    assert len(chunked) == 9 and all(e["skipped_reason"] is None for e in chunked)
    missing = [e["id"] for e in entries if (e["skipped_reason"] or "").startswith("missing value")]
    assert missing == [
        "mlperf6-gptoss20b-gb200-mxfp8-n8-tp1cp1ep1-nvidia",
        "mlperf6-gptoss20b-gb200-mxfp8-n72-tp1cp2ep4-nvidia",
    ]


@pytest.mark.slow
def test_moe_dev_set_skips_at_most_ten_percent(moe_runs):
    """The issue's target: at most 10% of the MoE records skipped."""
    doc = validate_runs(moe_runs, rank=False, loso=False)
    assert doc["summary"]["skipped"] <= 0.10 * len(moe_runs)


def test_validate_cli_on_moe_records(tmp_path, capsys, by_id):
    """`layoutsearch validate FILE --format json` on MoE records: per-record skips with reasons, exit 1/0 by
    the median (OUTPUT.md)."""
    from layoutsearch.cli import main

    ids = [DEEPSEEK, GROK_EP_ETP, "mlperf6-gptoss20b-gb200-mxfp8-n8-tp1cp1ep1-nvidia"]
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump([by_id[i] for i in ids], sort_keys=False))
    code = main(["validate", str(path), "--format", "json", "--no-rank"])
    doc = json.loads(capsys.readouterr().out)
    assert [e["id"] for e in doc["records"]] == ids
    assert doc["summary"]["count"] == 2 and doc["summary"]["skipped"] == 1
    assert doc["records"][2]["skipped_reason"] == (
        "missing value: layout.fsdp, layout.zero_stage null (the engine needs them)"
    )
    assert code == (0 if doc["summary"]["median_abs_rel_error"] <= 0.10 else 1)
    code = main(["validate", str(path), "--no-rank", "--max-median-error", "100"])
    assert code == 0 and "2 records evaluated, 1 skipped" in capsys.readouterr().out


@pytest.mark.slow
def test_moe_report_script(tmp_path):
    """scripts/validation.py --moe writes validation_moe.md only: the command at the top, a row per record."""
    script = REPO / "scripts" / "validation.py"
    r = subprocess.run(
        [sys.executable, str(script), "--moe", "--no-loso", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("69 evaluated, 2 of 71 skipped: median ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["validation_moe.md"]
    text = (tmp_path / "validation_moe.md").read_text()
    assert (
        "`python scripts/validation.py --moe tests/data/runs_moe_dev.yaml`"
        in text.split("## Summary")[0]
    )
    assert "| skipped | 2 of 71 = 2.8% (target <= 10%: met" in text
    rows = [
        line
        for line in text.split("## Records")[1].splitlines()
        if line.startswith("| ") and "---" not in line
    ]
    assert len(rows) == 1 + 71
    assert (
        "| dgxc-grok1-h100-fp8-n8-L2-tp4pp1cp1ep2 | h100 | 8 | dp2 tp4 ep2 etp4 zero1 mbs1 | fp8 (delayed-scaling) "
        "| 26,595 | "
    ) in text


def test_cuda_graphs_are_costed_as_the_record_names_them(by_id):
    """Rule 20: MLPerf's "full-iteration CUDA graph" -> full_iteration; a scope list or "CUDA graphs on for GB200"
    -> scoped; the Llama 4 Maverick note "H100 FP8 run used CUDA graphs (README); GB200 launch default
    CUDA_GRAPH=false" -> scoped for the H100 fp8 row only; a record that names none -> none. The graphed rows lose
    the MoE layers' host overhead: 0.85 of it in a full-iteration graph, 0.83 of its per-layer part with scoped
    graphs. Records that name none take their Megatron-Bridge release preset's (rule 22): 11 more. Dell's GPT-OSS-20B
    states its configuration file's (rule 24)."""
    expected = {
        "mlperf6-deepseekv3-gb200-mxfp8-n256": "full_iteration",
        "mlperf6-deepseekv3-gb200-mxfp8-n2048": "full_iteration",
        "modelzoo-qwen3-235b-gb200-bf16-n256-seq4k": "scoped",  # CUDA graphs (attn, moe_router, moe_preprocess)
        "modelzoo-qwen3-235b-h100-bf16-n256-script-320tf": "scoped",  # CUDA graphs (moe_router, moe_preprocess)
        "mcore-blog-deepseekv3-gb200": "scoped",  # "HybridEP, CUDA graphs"
        "dgxc-grok1-gb200-bf16-n128": "scoped",
        "dgxc-grok1-gb200-bf16-n512": "scoped",  # on for GB200
        "dgxc-llama4-maverick-h100-fp8-n512": "scoped",
        "dgxc-llama4-maverick-h100-bf16-n512": "none",
        "dgxc-llama4-maverick-gb200-fp8-n256": "none",  # CUDA_GRAPH=false on GB200
        "modelzoo-qwen3-235b-h100-bf16-n256-a2a-overlap-off": "none",
    }
    for prefix, graphs in expected.items():
        assert record_to_problem(one(by_id, prefix))[0].workload.cuda_graphs == graphs, prefix
    # the 8 above and Dell's GPT-OSS-20B (its configuration file's, rule 24)
    assert sum(named_cuda_graphs(r) not in (None, "none") for r in by_id.values()) == 9
    assert (
        sum(cuda_graphs(r) != "none" for r in by_id.values()) == 21
    )  # with NeMo 25.04's Mixtral 8x7B (rule 26)
    b200 = one(by_id, "dgxc-llama4-maverick-gb200-fp8-n256")  # the field, not the notes, decides
    b200["workload"]["cuda_graphs"] = None
    b200["derived"]["cuda_graphs"] = "GB200 used CUDA graphs; H100 launch default CUDA_GRAPH=false"
    assert cuda_graphs(b200) == "none" and named_cuda_graphs(b200) is None
    rec = one(by_id, "mlperf6-deepseekv3-gb200-mxfp8-n256")
    assert "CUDA graphs: full_iteration, as the record names them" in mapping_notes(rec)
    from layoutsearch.costs.estimate import estimate

    problem, layout = record_to_problem(rec)
    ungraphed = replace(problem, workload=replace(problem.workload, cuda_graphs="none"))
    full, none = (
        estimate(p, layout, strict=False).time_s["compute/moe_fixed"] for p in (problem, ungraphed)
    )
    assert (
        full == 0.0 and none > 1.0
    )  # the fitted share 1.0: one graph per step leaves no host time
    rec = one(by_id, "dgxc-grok1-gb200-bf16-n128")
    problem, layout = record_to_problem(rec)
    plain = replace(problem, workload=replace(problem.workload, cuda_graphs="none"))
    graphed, ungraphed = (
        estimate(p, layout, strict=False).time_s["compute/moe_fixed"] for p in (problem, plain)
    )
    # scoped graphs leave 2 + 12 + 16 launches, all hidden behind GB200's kernels: only the 510.1 us sync (552.5 us
    # before the loss's passes were costed and the MoE host time refitted beside them, 624 us before the element-wise kernels ran at their measured rates and the MoE host time was refitted beside them)
    # of each of the 64 MoE layers and 8 microbatches stays; without graphs the attention's and router's 33
    # forward and 31 backward launches show
    assert graphed == pytest.approx(64 * 8 * 510.1e-6, rel=1e-9) and ungraphed > 2.5 * graphed


@pytest.mark.slow
def test_the_catalogues_moe_host_overhead_is_what_its_commands_fit(moe_runs, capsys):
    """hardware/*.yaml calibration_moe: one joint fit, Huber loss, on every H100/H200/H800/B200/GB200 record (30
    h100-class, 35 b200-class, with or without CUDA graphs) set, one value for the GPUs, the per-launch host latency
    (53.06 us), the dispatcher's sync (510.1 us) and the share of both a full-iteration graph removes (1.0, at its
    bound); since GEMMs are costed from their shapes Blackwell's own matmul_efficiency is refitted with those held
    (0.4908; 0.488, 53.64 us and 552.5 us before the loss's passes were costed; docs/calibration.md#gemm-shapes,
    #element-wise-kernels, #the-losss-kernels). `calibrate --cuda-graphs` picks the records by
    mapping rules 20, 22, 24 and 26.
    Until the element-wise kernels ran at their measured rates and these were refitted beside them (2026-12-06:
    53.56 us, 624 us, 0.4646) the test was a strict xfail: the fit then found b200-class matmul_efficiency 0.476
    and the catalogue kept 0.4646 (the Huber optimum moved the class's median error from 7.8% to 9.5%). The
    catalogue's 0.4908 is the fit at Huber's former fixed scale (20%); at the records' own scale (14.1%,
    docs/calibration.md#the-fits-loss) the fraction is 0.486, 1% lower and held, inside its spread between
    sources."""
    from layoutsearch.cli import main
    from layoutsearch.validation.calibrate import calibrate

    fitted = calibrate(
        moe_runs,
        accelerators=["h100", "h200", "h800", "b200", "gb200"],
        params=("matmul_efficiency",),
        loss="huber",
        fit_families={"matmul_efficiency": ("b200-class",)},
    )
    assert {f: (v["records"], v["fitted"].get("matmul_efficiency")) for f, v in fitted.items()} == {
        "b200-class": (35, pytest.approx(0.4858, abs=5e-4))
    }
    assert load_accelerator("b200").matmul_efficiency == 0.4908  # held: 1% from the fit
    assert (
        main(
            [
                "calibrate",
                str(MOE_DEV),
                "--accelerator",
                "h100,h200,h800,b200,gb200",
                "--fit",
                "",
                "--shared",
                "moe_overhead_full_graph_share",
                "--cuda-graphs",
                "full_iteration",
                "--loss",
                "huber",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "moe_overhead_full_graph_share" in line)
    # only GB200 runs used full-iteration graphs: Megatron-Bridge 26.08's three and MLPerf Training v6.0's two
    assert row.split("\u2502")[1:3] == [" b200-class  ", " 5       "]
    assert "Huber loss on log(predicted / measured)" in out
    for acc in ("h100", "h200", "h800", "b200", "gb200"):  # one value for every GPU
        cal = load_accelerator(acc)
        assert (
            round(cal.moe_launch_latency_s * 1e8),
            round(cal.moe_host_sync_s * 1e7),
            cal.moe_overhead_full_graph_share,
        ) == (5306, 5101, 1.0), acc  # (5364, 5525, 1.0) before the loss's passes were costed
    assert (
        main(["calibrate", str(MOE_DEV), "--fit", "moe_launch_latency_s", "--loss", "median"]) == 2
    )
    assert (
        capsys.readouterr().err.strip()
        == "error: --loss: unknown loss 'median'; known: huber, squares"
    )
    assert (
        main(["calibrate", str(MOE_DEV), "--fit", "moe_launch_latency_s", "--cuda-graphs", "some"])
        == 2
    )
    assert capsys.readouterr().err.strip() == (
        "error: --cuda-graphs: unknown value 'some' (did you mean 'scoped'?); known: none, scoped, full_iteration"
    )
    # nothing to fit (no A100 MoE record; no H100 record with a full-iteration graph): one line and exit 1
    for args in (
        ["--accelerator", "a100-80gb", "--fit", "moe_launch_latency_s"],
        ["--accelerator", "a100-80gb", "--fit", "", "--shared", "overlap_interference"],
        [
            "--accelerator",
            "h100",
            "--fit",
            "moe_host_sync_s",
            "--cuda-graphs",
            "full_iteration",
        ],
    ):
        assert main(["calibrate", str(MOE_DEV), *args]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: no record of ") and err.endswith(
            "has a measured throughput to fit"
        ), err
        assert "\n" not in err and "Traceback" not in err
    assert err == (
        f"error: no record of h100 in {MOE_DEV} costed with --cuda-graphs full_iteration has a measured "
        f"throughput to fit"
    )


def test_megatron_fsdp_records_reduce_gradients_in_bf16(by_id):
    """Rule 21: the records run with Megatron-FSDP state workload.grad_reduce_dtype bf16 (Megatron-FSDP's
    recommended --grad-reduce-in-bf16) and are costed with 2-byte gradients; their ZeRO-3 reduce-scatters move
    half the bytes. Other ZeRO-3 records (FSDP2) keep fp32 gradients. No rule reads the notes for it: the same
    record without the field, its notes still naming Megatron-FSDP, keeps fp32."""
    from layoutsearch.costs.estimate import estimate

    fsdp = one(
        by_id, "modelzoo-qwen3-235b-h100-bf16-n256-fsdp"
    )  # states bf16: "Megatron-FSDP (FSDP On)"
    dell = one(
        by_id, MLPERF_REAL
    )  # "data_parallel_sharding_strategy optim_grads_params (Megatron-FSDP, ZeRO-3)"
    fsdp2 = one(by_id, AUTOMODEL_NO_EP)  # PyTorch FSDP2
    assert [record_to_problem(r)[0].workload.grad_bytes_per_param for r in (fsdp, dell, fsdp2)] == [
        2,
        2,
        4,
    ]
    assert "workload.grad_reduce_dtype: bf16 (rule 31)" in mapping_notes(fsdp)
    problem, layout = record_to_problem(fsdp)
    fp32 = replace(problem, workload=replace(problem.workload, grad_bytes_per_param=4))
    half, full = (estimate(p, layout, strict=False) for p in (problem, fp32))
    # per layer: the attention (split by tp 2), router and two RMSNorms over the 128 FSDP ranks, the 16 local experts'
    # over the 32 expert-data-parallel ranks: half the bytes, one latency each
    rs_half, rs_full = (
        {
            c["name"]: (c["group_size"], c["bytes"], c["time_s"])
            for c in e.collectives
            if "reduce-scatter" in c["name"]
        }
        for e in (half, full)
    )
    attention, router, norms = (
        4096 * (64 + 2 * 4) * 128 // 2 + 64 * 128 * 4096 // 2,
        4096 * 128,
        2 * 4096,
    )
    layer, experts = attention + router + norms, 128 * 3 * 4096 * 1536 // 8
    assert {name: v[:2] for name, v in rs_half.items()} == {
        "fsdp grad reduce-scatter": (128, 2 * layer),
        "expert fsdp grad reduce-scatter": (32, 2 * experts),
    }
    assert [v[2] for v in rs_half.values()] == pytest.approx([0.001886, 0.015595], rel=1e-3)
    # fp32 gradients add their second half at each group's seconds per byte: every byte of the expert group (one
    # GPU in each of 32 nodes) leaves through the GPU's NIC; the FSDP group has 4 GPUs in each node, 4 NICs
    acc = problem.cluster.accelerator
    nic = acc.scale_out_bytes_per_s_per_direction * acc.scale_out_efficiency
    assert [rs_full[n][2] - rs_half[n][2] for n in rs_half] == pytest.approx(
        [2 * layer * 31 / 32 / (4 * nic), 2 * experts * 31 / 32 / nic], rel=1e-9
    )
    # (28.38 s and 34.05 s before the loss's passes were costed and the MoE fits redone beside them; 28.25 s and
    # 33.92 s before the element-wise kernels ran at their measured rates and the MoE host time was
    # refitted beside them; 28.29 s and 33.96 s before the attention's backward TP collectives ran beside its QKV
    # GEMMs, 2026-12-06)
    assert (half.step_time_s, full.step_time_s) == pytest.approx((28.35, 34.02), abs=0.01)
    unstated = copy.deepcopy(fsdp)
    unstated["workload"]["grad_reduce_dtype"] = None
    assert "Megatron-FSDP (FSDP On)" in unstated["derived"]["zero_stage"]
    assert record_to_problem(unstated)[0].workload.grad_bytes_per_param == 4


def test_megatron_bridge_rows_take_their_release_presets_unstated_settings(by_id):
    """Rule 22: a Megatron-Bridge performance-summary row whose layout is its release preset's takes the preset's
    CUDA graphs, AllToAll overlap and dispatcher where it names none (mbridge_presets.yaml); from 25.11 on, a row
    whose layout differs ran the preset with its parallelism overridden (the performance scripts' set_user_overrides
    keeps the rest) and takes them too, its notes naming the overridden fields; a 25.09 row whose layout differs
    takes nothing; a record of another source is never matched."""
    from layoutsearch.validation.mapping import mbridge_preset, mbridge_presets

    assert len(mbridge_presets()) == 76
    full = one(by_id, "mbridge-26.08-gb200-deepseek-v3-fp8")  # perf_recipes full-iteration helper
    problem = record_to_problem(full)[0]
    assert (
        problem.workload.cuda_graphs,
        problem.workload.ep_comm_overlap,
        problem.workload.deepep,
    ) == (
        "full_iteration",
        True,
        True,
    )
    assert (
        "Megatron-Bridge 26.08 preset (deepseek_v3_pretrain_256gpu_gb200_fp8mx_config @ 4ab94dfad366), the "
        "row's layout: CUDA graphs full_iteration, AllToAll overlap on, dispatcher DeepEP/HybridEP where the row "
        "names none"
    ) in mapping_notes(full)
    scoped = record_to_problem(one(by_id, "mbridge-26.02-b200-qwen3-30b"))[
        0
    ].workload  # TE [moe_router, ...], alltoall
    assert (scoped.cuda_graphs, scoped.ep_comm_overlap, scoped.deepep) == ("scoped", False, False)
    local = one(
        by_id, "mbridge-25.09-b200-qwen3-30b"
    )  # 25.09: enable_cuda_graph (per-layer local graphs), "fp8"
    assert mbridge_preset(local)[0]["precision"] == "fp8" and cuda_graphs(local) == "scoped"
    other = one(by_id, "mbridge-25.11-gb200-qwen3-235b-bf16")  # the 25.11 preset is a 64-GPU layout
    preset, differ = mbridge_preset(other)
    assert preset["source"].endswith(
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG"
    ) and differ == [
        "num_devices 256 (preset 64)",
        "virtual_stages 3 (preset 1)",
        "ep 32 (preset 8)",
        "global_batch_seqs 8192 (preset 1024)",
    ]
    workload = record_to_problem(other)[
        0
    ].workload  # TE graphs [attn, moe_router, moe_preprocess], HybridEP
    assert (workload.cuda_graphs, workload.ep_comm_overlap, workload.deepep) == (
        "scoped",
        False,
        True,
    )
    assert (
        "Megatron-Bridge 25.11 preset (QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_BF16_BASE_CONFIG @ 5776a6d90b4d), its "
        "parallelism overridden (num_devices 256 (preset 64), virtual_stages 3 (preset 1), ep 32 (preset 8), "
        "global_batch_seqs 8192 (preset 1024)): CUDA graphs scoped, AllToAll overlap off, dispatcher "
        "DeepEP/HybridEP where the row names none"
    ) in mapping_notes(other)
    older = copy.deepcopy(
        local
    )  # 25.09's performance matrix has no overrides: another layout is another run
    older["layout"]["microbatch_seqs"] = 2
    assert mbridge_preset(older) == (None, ["microbatch_seqs 2 (preset 1)"])
    assert (
        cuda_graphs(older) == "none"
        and "Megatron-Bridge preset not applied: the row's layout differs (microbatch_seqs 2 (preset 1))"
        in mapping_notes(older)
    )
    named = copy.deepcopy(full)  # what a row states wins over its preset
    named["workload"]["cuda_graphs"] = "none"
    assert cuda_graphs(named) == "none"
    others = (
        one(by_id, "dgxc-deepseekv3-gb200"),
        one(by_id, "mlperf6-deepseekv3-gb200-mxfp8-n256"),
    )
    assert [mbridge_preset(r) for r in others] == [(None, [])] * 2
    bad = copy.deepcopy(full)  # 26.08: the preset with the global batch overridden
    bad["workload"]["global_batch_seqs"] = 2048
    assert (
        mbridge_preset(bad)[1] == ["global_batch_seqs 2048 (preset 4096)"]
        and cuda_graphs(bad) == "full_iteration"
    )


def test_megatron_bridge_rows_keep_and_reduce_their_gradients_in_bf16(by_id):
    """Rule 25: the performance configurations set ddp.grad_reduce_in_fp32 = False, so the gradient buffer is bf16:
    GPT-OSS-120B on 64 B200 (ep=8, ZeRO-1) holds 30.7 GB of gradients instead of 61.3 and fits in the 176 GB it ran
    in; a row stating fp32 reduction (workload.grad_reduce_dtype) keeps 4 bytes, and its notes are not read for
    it; the DGX Cloud (NeMo 2.0) rows keep fp32."""
    from layoutsearch.costs.estimate import estimate
    from layoutsearch.validation.mapping import half_grads_because

    row = one(by_id, "mbridge-26.04.01-b200-gpt-oss-120b")
    problem, layout = record_to_problem(row)
    assert problem.workload.grad_bytes_per_param == 2
    assert (
        "Megatron-Bridge performance configuration: gradients kept and reduced in bf16 (ddp.grad_reduce_in_fp32 "
        "= False)"
    ) in mapping_notes(row)
    bf16, fp32 = (
        estimate(p, layout, strict=False)
        for p in (
            problem,
            replace(problem, workload=replace(problem.workload, grad_bytes_per_param=4)),
        )
    )
    assert (
        bf16.memory_bytes["state/grads"] / 2**30,
        fp32.memory_bytes["state/grads"] / 2**30,
    ) == pytest.approx((30.66, 61.31), abs=0.01)
    assert (bf16.fits, fp32.fits) == (True, False) and row["measured"]["oom"] is False
    named = copy.deepcopy(row)
    named["workload"]["grad_reduce_dtype"] = "fp32"
    assert (
        half_grads_because(named) is None
        and record_to_problem(named)[0].workload.grad_bytes_per_param == 4
    )
    noted = copy.deepcopy(row)
    noted["derived"]["note"] = "ddp.grad_reduce_in_fp32 = True"  # free text: not read
    assert record_to_problem(noted)[0].workload.grad_bytes_per_param == 2
    assert (
        record_to_problem(one(by_id, "dgxc-deepseekv3-h100-bf16-n512"))[
            0
        ].workload.grad_bytes_per_param
        == 4
    )


def test_mlperf_records_state_the_cuda_graphs_of_their_configuration_file(by_id):
    """Rule 24: Dell's MLPerf v6.0 GPT-OSS-20B row states the CUDA graphs its configuration file sets (Transformer
    Engine graphs of attn, moe_router and moe_preprocess: scoped), with the file in derived.cuda_graphs; the mapping
    reads the field, not the file's name in the notes: without the field the same record is costed without graphs."""
    dell = one(by_id, "mlperf6-gptoss20b-b200-mxfp8-n8-tp1cp1ep2-dell")
    assert "config_DGXB200_1x8x2xtp1pp1cp1ep2_mxfp8.sh" in dell["derived"]["cuda_graphs"]
    assert record_to_problem(dell)[0].workload.cuda_graphs == "scoped"
    assert "CUDA graphs: scoped, as the record names them" in mapping_notes(dell)
    unstated = copy.deepcopy(dell)
    unstated["workload"]["cuda_graphs"] = None
    assert cuda_graphs(unstated) == "none"
    nvidia = one(by_id, "mlperf6-gptoss20b-gb200-mxfp8-n8")  # names no graphs
    assert cuda_graphs(nvidia) == "none"


def test_megatron_bridge_deepseek_v3_rows_take_the_recipes_pipeline_split(by_id):
    """Rule 23: Megatron-Bridge's DeepSeek-V3 recipe lays 61 layers out in chunks of 64 / (pp vp), the last holding
    one layer, the MTP module and the loss: first stage 64 / pp layers, last 64 / pp - 3. The DGX Cloud runs state
    theirs (layout.first_stage_layers / last_stage_layers: NeMo 25.04's performance script sets 64 / pp - 1 and
    64 / pp - 2); without the fields they take the engine's split, whatever their notes say."""
    from layoutsearch.costs.estimate import estimate
    from layoutsearch.validation.mapping import recipe_stage_layers

    cases = {
        "mbridge-26.04-b200-deepseek-v3": (4, 1),  # pp16
        "mbridge-26.04.01-b200-deepseek-v3": (8, 5),  # pp8 x 2
        "mbridge-26.08-gb200-deepseek-v3": (16, 13),
    }  # pp4 x 4
    for prefix, split in cases.items():
        layout = record_to_problem(one(by_id, prefix))[1]
        assert (layout.first_stage_layers, layout.last_stage_layers) == split, prefix
    rec = one(by_id, "mbridge-26.04-b200-deepseek-v3")
    assert (
        "pipeline split of the Megatron-Bridge DeepSeek-V3 recipe: first stage 4 layers, last 1 (with the output head, "
        "the MTP module and the loss)"
    ) in mapping_notes(rec)
    problem, layout = record_to_problem(rec)
    blind = estimate(
        problem, replace(layout, first_stage_layers=2, last_stage_layers=3), strict=False
    )
    recipe = estimate(problem, layout, strict=False)
    # the last stage, the slowest either way at Blackwell's 0.4908 matmul fraction, no longer carries 3 layers
    # beside the MTP module and the two output heads but 1: its layers' matmuls halve (4 layers' worth to 2)
    # (33.00 and 24.10 s, the heads' GEMMs 11.395 s, before the loss's passes were costed, Transformer Engine's kernel
    # over both heads' logits, and Blackwell's fraction refitted beside them from 0.488: 11.395 x 0.488 / 0.4908 =
    # 11.330 s; 33.51 and 24.64 s, the heads' GEMMs 11.969 s, before the element-wise kernels ran at their measured rates
    # and Blackwell's fraction was refitted beside them from 0.4646: 11.969 x 0.4646 / 0.488 = 11.395 s;
    # 34.21 and 24.82 s before a slower last stage paced only the microbatches, its bubble at the first stage's
    # pace; 33.44 and 24.06 s before 1F1B's steady-state sends were costed, two a microbatch under Megatron,
    # 2026-12-06; 32.85 and 23.72 s before each stage's compute counted its own MoE layers and before the H200 physics)
    assert (blind.step_time_s, recipe.step_time_s) == pytest.approx((33.12, 24.31), abs=0.01)
    assert (
        blind.time_s["compute/logits"]
        == recipe.time_s["compute/logits"]
        == pytest.approx(11.330, abs=1e-3)
    )
    assert blind.time_s["compute/matmul"] == pytest.approx(
        2 * recipe.time_s["compute/matmul"], rel=1e-9
    )
    # the engine's own proposal (core.stages, the head's 4 layers' worth off the last stage) is the recipe's split
    ours = estimate(
        problem, replace(layout, first_stage_layers=None, last_stage_layers=None), strict=False
    )
    assert ours.step_time_s == pytest.approx(recipe.step_time_s, rel=1e-9)
    dgxc = one(by_id, "dgxc-deepseekv3-h100-bf16-n1024-tp2pp16ep64")
    assert recipe_stage_layers(dgxc) == (3, 2)
    assert (
        "pipeline split as the record states it: first stage 3 layers, last 2 (with the output head, the MTP "
        "module and the loss)"
    ) in mapping_notes(dgxc)
    assert "NeMo 25.04" in dgxc["derived"]["container"]
    unstated = copy.deepcopy(dgxc)
    unstated["layout"]["first_stage_layers"] = unstated["layout"]["last_stage_layers"] = None
    assert recipe_stage_layers(unstated) is None
    unstated["layout"]["first_stage_layers"] = 3
    assert record_to_problem(unstated) == (
        "layout.first_stage_layers and last_stage_layers: a pipeline split states both or neither (got 3 and None)"
    )
    assert recipe_stage_layers(one(by_id, "maxtext-v5p-deepseekv3")) is None


def test_a_broken_release_table_is_one_error_naming_the_entry_and_field(tmp_path, monkeypatch):
    """Rules 22 and 26 read their tables through one check: a missing field or a value outside its choices names the
    file, the entry and the field."""
    from layoutsearch.core.errors import CatalogueError
    from layoutsearch.validation import mapping

    entry = {
        "release": "25.04",
        "model": "Mixtral-8x7B",
        "system": "DGX-GB200",
        "precision": "fp8",
        "source": "s",
        "layout": {f: 1 for f in mapping.NEMO_LAYOUT},
        "cuda_graphs": "full",
    }
    table = tmp_path / "nemo_perf_configs.yaml"
    monkeypatch.setattr(mapping, "NEMO_CONFIGS_PATH", table)
    for broken, message in (
        (
            {**entry, "layout": {"tp": 1}},
            "nemo_perf_configs.yaml: config #2: missing layout.num_devices, layout.pp, "
            "layout.cp, layout.virtual_stages, layout.ep, layout.microbatch_seqs, "
            "layout.global_batch_seqs, layout.seq_len",
        ),
        (
            entry,
            "nemo_perf_configs.yaml: config #2: cuda_graphs 'full': expected one of none, scoped",
        ),
    ):
        table.write_text(yaml.safe_dump({"configs": [{**entry, "cuda_graphs": "none"}, broken]}))
        mapping.nemo_perf_configs.cache_clear()
        with pytest.raises(CatalogueError) as err:
            mapping.nemo_perf_configs()
        assert str(err.value) == message
    mapping.nemo_perf_configs.cache_clear()
