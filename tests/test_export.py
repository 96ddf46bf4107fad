"""Config exporters: every target on several layouts, checked back by the frameworks' own rules."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml
from builders import INTERLEAVED_LAYOUT, doc_llama8b, export_docs, exported, solve_doc, solve_export

from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.problem import Problem, version
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import TARGETS, check_export, export_document
from layoutsearch.export.megatron import parse_args
from layoutsearch.report.output import estimate_document

FSDP, FSDP_TP, FSDP_TP_NO_SP, CP, HSDP = (
    export_docs()[k] for k in ("fsdp", "fsdp_tp", "fsdp_tp_no_sp", "cp", "hsdp")
)
# DeepSpeed's AutoTP has no sequence parallelism: its tp > 1 documents are costed without it
FSDP_TP_FOR = {"deepspeed": FSDP_TP_NO_SP}


def test_plain_fsdp_every_target():
    """Plain FSDP over 64 GPUs: all four files pass their checks and carry the batch identities."""
    args = parse_args(exported(FSDP, "megatron"))
    assert args["--global-batch-size"] == "256" and args["--micro-batch-size"] == "2"
    assert (
        args["--data-parallel-sharding-strategy"] == "optim_grads_params"
        and "--use-megatron-fsdp" in args
    )
    mt = yaml.safe_load(exported(FSDP, "maxtext"))
    assert mt["ici_fsdp_parallelism"] == 8 and mt["dcn_fsdp_parallelism"] == 8  # 8 nodes of 8 GPUs
    assert mt["per_device_batch_size"] * 64 * mt["gradient_accumulation_steps"] == 256
    tt = tomllib.loads(exported(FSDP, "torchtitan"))
    assert (
        tt["parallelism"]["data_parallel_shard_degree"] == 64
        and tt["training"]["local_batch_size"] == 2
    )
    ds = json.loads(exported(FSDP, "deepspeed"))
    assert (
        ds["train_batch_size"]
        == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 64
    )
    assert ds["zero_optimization"]["stage"] == 3


def test_fsdp_tp_degrees_and_recompute():
    """FSDP x TP: TP inside the node, FSDP across; full recompute maps to each framework's name."""
    args = parse_args(exported(FSDP_TP, "megatron"))
    assert args["--tensor-model-parallel-size"] == "8" and "--sequence-parallel" in args
    assert (
        args["--recompute-granularity"],
        args["--recompute-method"],
        args["--recompute-num-layers"],
    ) == (
        "full",
        "uniform",
        "1",
    )
    mt = yaml.safe_load(exported(FSDP_TP, "maxtext"))
    assert (mt["ici_tensor_parallelism"], mt["dcn_fsdp_parallelism"], mt["remat_policy"]) == (
        8,
        8,
        "full",
    )
    assert (
        math.prod(v for k, v in mt.items() if k.startswith("ici_") and k.endswith("_parallelism"))
        == 8
    )
    tt = tomllib.loads(exported(FSDP_TP, "torchtitan"))
    assert tt["model"]["flavor"] == "8B" and tt["parallelism"]["tensor_parallel_degree"] == 8
    assert tt["activation_checkpoint"]["mode"] == "full"
    # DeepSpeed's AutoTP has no sequence parallelism: the layout with it is refused, the same without it writes
    with pytest.raises(InvalidLayoutError) as refused:
        export_document(FSDP_TP, "deepspeed")
    assert str(refused.value).startswith(
        "deepspeed export of layout rank 1: DeepSpeed cannot express sequence parallelism with tp(8) "
        "(the layout's sequence_parallel) (AutoTP all-reduces each layer's output whole, so the norms and "
        "residuals are not sharded over tp (its sequence_parallel_size is Ulysses, the engine's cp)); nearest: "
        "--no-sequence-parallel, or export to maxtext or megatron"
    )
    ds = json.loads(exported(FSDP_TP_NO_SP, "deepspeed"))
    assert ds["tensor_parallel"]["autotp_size"] == 8 and ds["train_micro_batch_size_per_gpu"] == 8


def test_header_names_model_cluster_predictions_and_version():
    """Each file opens with model, cluster, step time, MFU, peak memory and the layoutsearch version."""
    rec = FSDP_TP["layouts"][0]
    for target in ("maxtext", "megatron", "torchtitan"):
        text = exported(FSDP_TP, target)
        head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        assert f"layoutsearch {version()}" in head and "llama3-8b" in head and "h100-64" in head
        assert (
            f"step {rec['time_s']['step']:.4g} s" in head
            and f"MFU {100 * rec['mfu']:.1f} %" in head
        )
        assert f"peak memory {rec['memory_bytes']['peak'] / 1e9:.1f} GB" in head
    side = json.loads(exported(FSDP_TP_NO_SP, "deepspeed"))["_layoutsearch"]
    assert any(f"layoutsearch {version()}" in line for line in side["header"])


def test_blocking_launches_are_named_in_every_file_and_exported_by_megatron():
    """--launch-blocking: every target's header says to launch with CUDA_LAUNCH_BLOCKING=1 (DeepSpeed's in its
    side key); Megatron's script exports it; without the option no file mentions it."""
    doc = doc_llama8b(Layout(fsdp=8, tp=8), launch_blocking=True)
    line = "Launch with CUDA_LAUNCH_BLOCKING=1: the prediction costed blocking kernel launches (--launch-blocking)."
    for target in ("maxtext", "megatron", "torchtitan"):
        assert f"# {line}" in exported(doc, target)
    no_sp = doc_llama8b(Layout(fsdp=8, tp=8, sequence_parallel=False), launch_blocking=True)
    assert line in json.loads(exported(no_sp, "deepspeed"))["_layoutsearch"]["header"]
    assert "\nexport CUDA_LAUNCH_BLOCKING=1  #" in exported(doc, "megatron")
    assert all(
        "CUDA_LAUNCH_BLOCKING" not in exported(FSDP_TP_FOR.get(t, FSDP_TP), t)
        for t in ("maxtext", "megatron", "torchtitan", "deepspeed")
    )


def refused(doc: dict, target: str, message: str) -> None:
    """The export to ``target`` fails with ``message`` (text, not a pattern) in its one-line error."""
    with pytest.raises(InvalidLayoutError, match=re.escape(message)):
        export_document(doc, target)


def test_bf16_gradients_and_moments_as_costed_or_refused():
    """--grad-bytes 2 --moment-bytes 2: Megatron writes bf16 gradient reduction and TE's precision-aware optimizer
    with bf16 Adam moments (which needs the distributed optimizer: ZeRO-0 is refused); torchtitan, DeepSpeed and
    MaxText write fp32 gradients and moments and refuse, naming the nearest."""
    doc = doc_llama8b(
        Layout(fsdp=64, num_microbatches=2, recompute="full"),
        grad_bytes_per_param=2,
        optimizer_bytes_per_param=4,
    )
    args = parse_args(exported(doc, "megatron"))
    assert (
        args["--grad-reduce-in-bf16"],
        args["--use-precision-aware-optimizer"],
        args["--exp-avg-dtype"],
        args["--exp-avg-sq-dtype"],
    ) == (True, True, "bf16", "bf16")
    assert not {"--grad-reduce-in-bf16", "--use-precision-aware-optimizer"} & set(
        parse_args(exported(FSDP, "megatron"))
    )
    refused(
        doc,
        "torchtitan",
        "torchtitan cannot express bf16 gradients (--grad-bytes 2) (FSDP2 reduces gradients in "
        "float32 only (mixed_precision_reduce) and its optimizers keep fp32 states); nearest: "
        "--grad-bytes 4, or export to megatron",
    )
    for target, name in (("maxtext", "MaxText"), ("deepspeed", "DeepSpeed")):
        refused(
            doc,
            target,
            f"{name} cannot express bf16 gradients (--grad-bytes 2); nearest: --grad-bytes 4, or export to megatron",
        )
    moments = doc_llama8b(
        Layout(dp=64, num_microbatches=2, recompute="full"),
        optimizer_bytes_per_param=4,
    )
    refused(
        moments,
        "megatron",
        "Megatron-LM cannot express bf16 Adam moments (--moment-bytes 2) with ZeRO-0 (its "
        "precision-aware optimizer needs the distributed optimizer); nearest: zero_stage 1 or "
        "2 or 3, or --moment-bytes 4",
    )
    refused(moments, "torchtitan", "torchtitan cannot express bf16 Adam moments (--moment-bytes 2)")


def test_materialised_attention_scores_as_costed_or_refused():
    """--no-fused-attention (the S x S scores in HBM, as pre-2022 Megatron and BLOOM ran): Megatron writes
    --attention-backend unfused, MaxText attention: dot_product; torchtitan and DeepSpeed refuse it."""
    doc = doc_llama8b(
        Layout(fsdp=8, tp=8, recompute="full"),
        flash_attention=False,
    )
    assert parse_args(exported(doc, "megatron"))["--attention-backend"] == "unfused"
    assert yaml.safe_load(exported(doc, "maxtext"))["attention"] == "dot_product"
    assert "attention" not in yaml.safe_load(exported(FSDP_TP, "maxtext"))
    refused(
        doc,
        "torchtitan",
        "torchtitan cannot express materialised attention scores (--no-fused-attention) (its "
        "attention is SDPA's fused kernels or FlexAttention); nearest: --fused-attention, or "
        "export to maxtext or megatron",
    )
    refused(
        doc_llama8b(
            Layout(fsdp=8, tp=8, recompute="full", sequence_parallel=False),
            flash_attention=False,
        ),
        "deepspeed",
        "DeepSpeed cannot express materialised attention scores (--no-fused-attention); "
        "nearest: --fused-attention, or export to maxtext or megatron",
    )


def test_a_loss_on_bf16_logits_as_costed_or_refused():
    """--no-fp32-logits: MaxText writes cast_logits_to_fp32: false (its base.yml default is true);
    torchtitan's and Megatron's losses upcast the logits, so they refuse it, naming the nearest."""
    doc = doc_llama8b(Layout(fsdp=8, tp=8), fp32_logits=False)
    assert yaml.safe_load(exported(doc, "maxtext"))["cast_logits_to_fp32"] is False
    assert "cast_logits_to_fp32" not in yaml.safe_load(exported(FSDP_TP, "maxtext"))
    refused(
        doc,
        "torchtitan",
        "torchtitan cannot express the loss on logits in the compute precision "
        "(--no-fp32-logits) (its cross_entropy_loss upcasts the logits to float32); nearest: "
        "--fp32-logits, or export to maxtext",
    )
    refused(
        doc,
        "megatron",
        "Megatron-LM cannot express the loss on logits in the compute precision "
        "(--no-fp32-logits); nearest: --fp32-logits, or export to maxtext",
    )


def test_mpt_triton_attention_is_refused_by_every_target():
    """--triton-attention costs MPT's 2022 Triton kernel (llm-foundry's attn_impl: triton), which no export
    target runs: each refuses it by rule, naming the nearest choice."""
    doc = doc_llama8b(Layout(fsdp=8, tp=8), triton_attention=True)
    for target, name in (
        ("megatron", "Megatron-LM"),
        ("torchtitan", "torchtitan"),
        ("maxtext", "MaxText"),
    ):
        refused(
            doc,
            target,
            f"{name} cannot express MPT's 2022 Triton attention kernel (--triton-attention: "
            "llm-foundry's); nearest: --no-triton-attention",
        )


def test_attention_kernel_as_costed_or_refused():
    """--no-vendor-attention under Megatron writes --attention-backend flash (FlashAttention, as costed), the
    default writes no backend (Transformer Engine picks its cuDNN kernel); torchtitan, MaxText and DeepSpeed cannot
    choose the vendor's kernel and refuse --vendor-attention, naming the nearest."""
    flash = doc_llama8b(Layout(fsdp=8, tp=8), vendor_attention=False)
    assert "--attention-backend flash" in exported(flash, "megatron")
    assert "--attention-backend" not in exported(FSDP_TP, "megatron")
    vendor = doc_llama8b(Layout(fsdp=8, tp=8), vendor_attention=True)
    for target, name in (
        ("torchtitan", "torchtitan"),
        ("maxtext", "MaxText"),
        ("deepspeed", "DeepSpeed"),
    ):
        with pytest.raises(
            InvalidLayoutError,
            match=f"{target} export of layout rank 1: {name} cannot express the vendor's fused attention kernel "
            r"\(cuDNN / Transformer Engine\); nearest: --no-vendor-attention, "
            "or export to megatron",
        ):
            exported(vendor, target)


def test_kv_replication():
    """tp above the KV heads: Megatron expresses it (groups divide tp); MaxText, torchtitan, DeepSpeed refuse."""
    tpu = solve_doc("llama70b", "v5p-256", 256, 4096, Layout(fsdp=8, tp=32, recompute="full"))
    assert tpu["layouts"][0]["kv_replication"] == 4
    with pytest.raises(
        InvalidLayoutError,
        match=r"MaxText cannot express tp\(32\) > num_kv_heads\(8\) .*nearest: tp=8",
    ):
        export_document(tpu, "maxtext")
    megatron_on_tpu = export_document(
        tpu, "megatron"
    )  # degrees carry over; the header says times do not
    assert "WARNING: planned for v5p TPUs; megatron runs on GPUs" in megatron_on_tpu
    gpu = solve_doc("llama70b", "h100-64", 256, 4096, Layout(fsdp=4, tp=16, recompute="full"))
    args = parse_args(exported(gpu, "megatron"))
    assert args["--tensor-model-parallel-size"] == "16" and args["--num-query-groups"] == "8"
    with pytest.raises(InvalidLayoutError, match="cannot replicate KV heads"):
        export_document(gpu, "torchtitan")
    with pytest.raises(InvalidLayoutError, match="AutoTP does not replicate KV heads"):
        export_document(gpu, "deepspeed")


def test_interleaved_pipeline():
    """Interleaved 1F1B: Megatron layers per virtual stage, torchtitan Interleaved1F1B; MaxText/DeepSpeed refuse."""
    layout = Layout(
        fsdp=2, tp=8, pp=4, virtual_stages=2, num_microbatches=8, schedule="interleaved"
    )
    doc = doc_llama8b(layout)
    zero1 = doc_llama8b(dataclasses.replace(layout, zero_stage=1))
    args = parse_args(exported(zero1, "megatron"))
    assert (
        args["--num-layers-per-virtual-pipeline-stage"] == "4"
        and args["--pipeline-model-parallel-size"] == "4"
    )
    # torchtitan with a pipeline: FSDP2 under torch.distributed.pipelining is ZeRO-1 (shards over dp_shard,
    # gathered through the step); ZeRO-3 with pp it refuses
    tt = tomllib.loads(exported(zero1, "torchtitan"))["parallelism"]
    assert (
        tt["pipeline_parallel_schedule"] == "Interleaved1F1B"
        and tt["pipeline_parallel_layers_per_stage"] == 4
    )
    assert tt["data_parallel_shard_degree"] == 2 and tt["fsdp_reshard_after_forward"] == "never"
    with pytest.raises(InvalidLayoutError, match="cannot express ZeRO-3 with pp\\(4\\)"):
        export_document(doc, "torchtitan")
    assert tt["pipeline_parallel_microbatch_size"] == 16
    with pytest.raises(
        InvalidLayoutError,
        match="pp\\(4\\) with the interleaved schedule .*GPipe order.*nearest: schedule gpipe",
    ):
        export_document(doc, "maxtext")
    with pytest.raises(InvalidLayoutError, match="runs 1F1B only"):
        export_document(doc, "deepspeed")


def test_context_parallel():
    """CP=2 (ring): Megatron, torchtitan and MaxText carry it; DeepSpeed has only Ulysses and says so."""
    assert parse_args(exported(CP, "megatron"))["--context-parallel-size"] == "2"
    tt = tomllib.loads(exported(CP, "torchtitan"))
    assert tt["parallelism"]["context_parallel_degree"] == 2
    assert tt["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    mt = yaml.safe_load(exported(CP, "maxtext"))
    assert (
        mt["ici_context_parallelism"] * mt["dcn_context_parallelism"] == 2
        and mt["remat_policy"] == "minimal"
    )
    with pytest.raises(
        InvalidLayoutError,
        match="cannot express cp flavour ring \\(its sequence parallelism is Ulysses.*nearest: cp flavour a2a",
    ):
        export_document(CP, "deepspeed")


def test_multislice_dcn():
    """Two v5p slices: dp goes over DCN (default placement), ici product = chips per slice."""
    doc = solve_doc("llama3-8b", "v5p-256x2", 512, 4096, Layout(dp=2, fsdp=256, recompute="full"))
    assert doc["layouts"][0]["axes"]["dp"] == [["dcn", 2]]
    mt = yaml.safe_load(exported(doc, "maxtext"))
    assert (mt["dcn_data_parallelism"], mt["ici_fsdp_parallelism"], mt["hardware"]) == (
        2,
        256,
        "tpu",
    )
    assert math.prod(v for k, v in mt.items() if k.startswith("dcn_")) == 2
    for target in ("megatron", "torchtitan"):
        text = export_document(doc, target)
        assert f"{target} runs on GPUs: the degrees, batch and recompute carry over" in text
        assert check_export(target, text, doc) == []
    with pytest.raises(
        InvalidLayoutError,
        match=r"DeepSpeed cannot express dp\(2\) copies of a ZeRO-3 shard over fsdp\(256\) .*nearest: dp=1, fsdp=512",
    ):
        export_document(doc, "deepspeed")


def test_maxtext_gpipe_pipeline_and_megatron_refuses_gpipe():
    """MaxText takes a GPipe pipeline (microbatches, layers per stage); Megatron has no GPipe schedule."""
    doc = solve_doc(
        "llama3-8b",
        "v5p-256",
        512,
        4096,
        Layout(fsdp=64, pp=4, num_microbatches=8, schedule="gpipe", recompute="full"),
    )
    mt = yaml.safe_load(exported(doc, "maxtext"))
    assert (
        mt["num_pipeline_microbatches"],
        mt["num_layers_per_pipeline_stage"],
        mt["ici_pipeline_parallelism"],
    ) == (
        8,
        8,
        4,
    )
    assert mt["gradient_accumulation_steps"] == 1 and mt["per_device_batch_size"] * 256 == 512
    gpu = doc_llama8b(
        Layout(fsdp=8, pp=8, num_microbatches=16, schedule="gpipe"),
    )
    with pytest.raises(
        InvalidLayoutError,
        match="Megatron-LM cannot express pp.8. with the gpipe schedule .*no GPipe.*nearest: schedule 1f1b or interleaved",
    ):
        export_document(gpu, "megatron")
    one_f_one_b = solve_doc(
        "llama3-8b", "v5p-256", 512, 4096, Layout(fsdp=64, pp=4, num_microbatches=8)
    )
    with pytest.raises(
        InvalidLayoutError,
        match="MaxText cannot express pp.4. with the 1f1b schedule .*nearest: schedule gpipe",
    ):
        export_document(one_f_one_b, "maxtext")


def test_zero_stage_mappings():
    """ZeRO-1 and ZeRO-2 map to each framework's nearest mechanism or are refused with the nearest stage."""
    z1 = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, zero_stage=1, num_microbatches=2))
    args = parse_args(exported(z1, "megatron"))
    assert "--use-distributed-optimizer" in args and "--use-megatron-fsdp" not in args
    mt = yaml.safe_load(exported(z1, "maxtext"))
    assert (
        mt["shard_optimizer_over_data"] is True
        and mt["ici_data_parallelism"] * mt["dcn_data_parallelism"] == 16
    )
    assert json.loads(exported(z1, "deepspeed"))["zero_optimization"]["stage"] == 1
    with pytest.raises(InvalidLayoutError, match="no ZeRO-1 .*nearest: zero_stage 2"):
        export_document(z1, "torchtitan")
    z2 = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, zero_stage=2))
    assert (
        parse_args(exported(z2, "megatron"))["--data-parallel-sharding-strategy"] == "optim_grads"
    )
    assert (
        tomllib.loads(exported(z2, "torchtitan"))["parallelism"]["fsdp_reshard_after_forward"]
        == "never"
    )
    with pytest.raises(
        InvalidLayoutError,
        match="MaxText cannot express ZeRO-2 .*no ZeRO-2.*nearest: zero_stage 1 or 3",
    ):
        export_document(z2, "maxtext")


def test_hybrid_sharded_data_parallel():
    """dp x fsdp (HSDP): Megatron distributed-optimizer instances, torchtitan replicate x shard; DeepSpeed refuses."""
    args = parse_args(exported(HSDP, "megatron"))
    assert args["--num-distributed-optimizer-instances"] == "2"
    par = tomllib.loads(exported(HSDP, "torchtitan"))["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 8)
    assert (
        tomllib.loads(exported(HSDP, "torchtitan"))["model"]["flavor"] == "debug"
    )  # custom flavor, documented
    mt = yaml.safe_load(exported(HSDP, "maxtext"))
    assert (mt["ici_fsdp_parallelism"], mt["dcn_data_parallelism"]) == (8, 2)
    with pytest.raises(InvalidLayoutError, match="MiCS was removed.*nearest: dp=1, fsdp=16"):
        export_document(HSDP, "deepspeed")


def test_gpt3_model_flags():
    """GPT-3 (tied, LayerNorm, learned positions, biases, GELU): Megatron and MaxText flags; torchtitan refuses."""
    doc = solve_doc(
        "gpt3-175b",
        "h100-64",
        64,
        2048,
        Layout(tp=8, pp=8, num_microbatches=8, recompute="full", zero_stage=0),
    )
    args = parse_args(exported(doc, "megatron"))
    assert (
        args["--normalization"] == "LayerNorm"
        and args["--position-embedding-type"] == "learned_absolute"
    )
    assert args["--max-position-embeddings"] == "2048"
    assert not {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear"} & set(
        args
    )
    with pytest.raises(
        InvalidLayoutError,
        match="torchtitan cannot express model gpt3-175b .*llama3 model is gated-MLP",
    ):
        export_document(doc, "torchtitan")


def test_checker_catches_edited_files():
    """A hand-edited file breaks the framework rules and the checker says which."""
    text = exported(FSDP_TP, "megatron").replace(
        "--global-batch-size 256", "--global-batch-size 250"
    )
    assert any(
        "not divisible by micro batch 8 x DP 8" in p
        for p in check_export("megatron", text, FSDP_TP)
    )
    text = exported(FSDP_TP, "maxtext").replace(
        "ici_tensor_parallelism: 8", "ici_tensor_parallelism: 4"
    )
    assert any("devices per slice is 8" in p for p in check_export("maxtext", text, FSDP_TP))
    text = exported(FSDP_TP, "torchtitan").replace(
        "tensor_parallel_degree = 8", "tensor_parallel_degree = 4"
    )
    assert any("!= WORLD_SIZE(64)" in p for p in check_export("torchtitan", text, FSDP_TP))
    cfg = json.loads(exported(FSDP_TP_NO_SP, "deepspeed"))
    cfg["gradient_accumulation_steps"] = 3
    assert any(
        "train_batch_size 256 != micro 8 x accumulation 3 x DP world 8" in p
        for p in check_export("deepspeed", json.dumps(cfg), FSDP_TP_NO_SP)
    )


def test_rank_and_estimate_documents():
    """Rank N picks the N-th layout; an estimate document (one 'layout') exports as rank 1."""
    doc = doc_llama8b(Layout(fsdp=64), Layout(fsdp=8, tp=8, num_microbatches=2))
    assert parse_args(exported(doc, "megatron", rank=2))["--tensor-model-parallel-size"] == "8"
    with pytest.raises(
        InvalidLayoutError, match=r"no layout with rank 3 in the document \(ranks: 1, 2\)"
    ):
        export_document(doc, "megatron", rank=3)
    model, cluster = load_model("llama3-8b"), resolve_cluster("h100-64")
    est = estimate(
        Problem.build(model, cluster, Workload(global_batch_seqs=256, seq_len=4096)),
        Layout(fsdp=64),
    )
    assert json.loads(exported(estimate_document(est), "deepspeed"))["train_batch_size"] == 256


def test_unknown_target_and_bad_document():
    """Unknown targets get a hint; a document without layouts is refused in one line."""
    with pytest.raises(
        InvalidLayoutError,
        match="unknown export target 'megatorn' \\(did you mean 'megatron'\\?\\)",
    ):
        export_document(FSDP, "megatorn")
    with pytest.raises(InvalidLayoutError, match="neither 'layouts'"):
        export_document({"problem": FSDP["problem"]}, "maxtext")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_megatron_file_is_valid_bash():
    """Sourcing the Megatron file defines MEGATRON_ARGS with exactly the parsed flags and values."""
    text = exported(HSDP, "megatron")
    out = subprocess.run(
        ["bash", "-c", 'source /dev/stdin; printf "%s\\n" "${MEGATRON_ARGS[@]}"'],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    flags = parse_args(text)
    assert out[0] == "--num-layers" and len([t for t in out if t.startswith("--")]) == len(flags)


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_round_trips_the_fsdp_layout(target):
    """The checker of each target accepts what its exporter wrote for the same document."""
    doc = FSDP_TP_FOR.get(target, FSDP_TP)
    assert check_export(target, export_document(doc, target), doc) == []


@pytest.mark.parametrize(
    "target", ["maxtext", "megatron", "torchtitan", "torchtitan-0.3", "deepspeed"]
)
@pytest.mark.parametrize(
    "model, cluster, seqs", [("llama70b", "v5p-256", 256), ("llama3-8b", "h100-64", 256)]
)
def test_solve_export_writes_the_best_expressible_layout(tmp_path, target, model, cluster, seqs):
    """`solve --export T -o F` searches what T can express, writes F whole, and F passes T's own rules."""
    doc, text = solve_export(
        model, cluster, target, tmp_path / f"layout-{target}", "--seqs", str(seqs)
    )
    assert check_export(target, text, doc) == []
    assert "layoutsearch" in text and str(doc["layouts"][0]["degrees"]["tp"]) in text


# ----------------------------------------------------------------------------- torchtitan 0.3 (config_registry module)
def tt03_constants(doc: dict) -> dict:
    from layoutsearch.export.torchtitan03 import read_constants

    return read_constants(exported(doc, "torchtitan-0.3"))


def test_torchtitan03_carries_the_0_2_mapping_and_the_model_numbers():
    """The 0.3 module holds the same degrees, batch and recompute as the 0.2 TOML (one mapping) and the model's numbers."""
    doc = doc_llama8b(
        dataclasses.replace(INTERLEAVED_LAYOUT, recompute="selective"),
    )
    c = tt03_constants(doc)
    toml = tomllib.loads(exported(doc, "torchtitan"))
    assert c["PARALLELISM"] == toml["parallelism"]
    assert c["PARALLELISM"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert c["TRAINING"] == {
        "local_batch_size": 128,
        "global_batch_size": 256,
        "seq_len": 4096,
        "disable_cuda_graphs": True,
    }
    assert c["ACTIVATION_CHECKPOINT"] == "selective" and c["FLAVOR"] == "8B"
    assert c["MODEL"] == {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "hidden_dim": 14336,
        "vocab_size": 128256,
        "rope_theta": 500000.0,
        "norm_eps": 1e-5,
    }
    assert c["ROPE"] == {
        "scaling": "llama",
        "scaling_factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    assert all(
        str(c[name]).startswith("<set me: ")
        for name in (
            "DUMP_FOLDER",
            "HF_ASSETS_PATH",
            "DATASET",
            "DATASET_PATH",
            "CHECKPOINT_FOLDER",
            "STEPS",
            "LR",
            "WARMUP_STEPS",
        )
    )
    text = exported(doc, "torchtitan-0.3")
    assert (
        "MODULE=<this file's name without .py> CONFIG=layoutsearch_job NGPU=8" not in text
    )  # 8 nodes: torchrun
    assert (
        "torchrun --nnodes 8 --nproc_per_node 8" in text and "-m torchtitan.train --module" in text
    )
    compile(text, "layout.py", "exec")  # a valid Python module


def test_torchtitan03_single_node_launch_and_no_pipeline_flags():
    c = tt03_constants(HSDP)
    assert (
        c["PARALLELISM"]["data_parallel_replicate_degree"],
        c["PARALLELISM"]["data_parallel_shard_degree"],
    ) == (
        2,
        8,
    )
    assert (
        "disable_cuda_graphs" not in c["TRAINING"]
        and c["FLAVOR"] == "debug"
        and c["ROPE"] == {"scaling": "none"}
    )
    one_node = solve_doc("debug", "h100-8", 32, 1024, Layout(fsdp=8))
    assert (
        "PYTHONPATH=<folder of this file> MODULE=<this file's name without .py> CONFIG=layoutsearch_job NGPU=8 "
        "./run_train.sh" in exported(one_node, "torchtitan-0.3")
    )


def test_torchtitan03_refuses_what_torchtitan_cannot_express():
    """The 0.3 target declares the same capabilities as 0.2 under its own rule codes."""
    from layoutsearch.export import capabilities_of, target_rules

    z1 = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, zero_stage=1, num_microbatches=2))
    with pytest.raises(
        InvalidLayoutError,
        match=r"torchtitan-0.3 export of layout rank 1: torchtitan cannot express "
        r"ZeRO-1 with pp = 1 \(FSDP2 has no ZeRO-1.*without a pipeline\); nearest: zero_stage 2 or 3",
    ):
        export_document(z1, "torchtitan-0.3")
    kv = solve_doc("llama70b", "h100-64", 256, 4096, Layout(fsdp=4, tp=16, recompute="full"))
    with pytest.raises(InvalidLayoutError, match="cannot replicate KV heads"):
        export_document(kv, "torchtitan-0.3")
    old, new = capabilities_of("torchtitan"), capabilities_of("torchtitan-0.3")
    assert (old.zero_stages, old.zero_stages_with_cp, old.kv_replication) == (
        new.zero_stages,
        new.zero_stages_with_cp,
        new.kv_replication,
    )
    codes = [r.code for r in target_rules("torchtitan-0.3")]
    assert "torchtitan-0.3-zero" in codes and "torchtitan-0.3-kv" in codes


def test_torchtitan03_checker_finds_a_wrong_degree_and_a_wrong_width():
    text = exported(FSDP_TP, "torchtitan-0.3")
    bad_tp = text.replace("'tensor_parallel_degree': 8", "'tensor_parallel_degree': 4")
    assert any("!= WORLD_SIZE(64)" in p for p in check_export("torchtitan-0.3", bad_tp, FSDP_TP))
    bad_ffn = text.replace("'hidden_dim': 14336", "'hidden_dim': 14335")
    assert check_export("torchtitan-0.3", bad_ffn, FSDP_TP) == [
        "MODEL hidden_dim is 14335, the model has 14336"
    ]
    assert check_export("torchtitan-0.3", "def (", FSDP_TP)[0].startswith("not valid Python")


def test_deepspeed_launch_line_on_a_cluster_smaller_than_a_node():
    """h100-2 is part of one 8-GPU node: the launch line starts 2 processes on 1 node (h100-16: 8 on 2)."""
    small = solve_doc("debug", "h100-2", 8, 128, Layout(fsdp=2, num_microbatches=2))
    assert "deepspeed --num_gpus 2 --num_nodes 1 train.py" in exported(small, "deepspeed")
    big = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, num_microbatches=2))
    assert "deepspeed --num_gpus 8 --num_nodes 2 train.py" in exported(big, "deepspeed")


def test_megatron_refuses_a_sliding_window_shorter_than_the_sequence(data_file, capsys):
    """Mistral-7B v0.1 attends over a 4096-token window: at 4096 tokens that is the whole sequence and the export is
    written; at 8192 the window matters, and the Megatron export, which writes no --window-size, refuses it."""
    from layoutsearch.cli import main

    mistral = str(data_file("hf/mistral-7b-v0.1.json"))
    args = [
        "solve",
        "--model",
        mistral,
        "--cluster",
        "h100-8",
        "--seqs",
        "64",
        "--export",
        "megatron",
    ]
    assert main([*args, "--seq-len", "4096"]) == 0
    assert "MEGATRON_ARGS=(" in capsys.readouterr().out
    assert main([*args, "--seq-len", "8192"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"no feasible layout: Megatron-LM cannot express the 4096-token sliding window of {mistral} (layoutsearch does "
        f"not write --window-size and --window-attn-skip-freq: the model catalogue records how many layers attend in "
        f"full, not which); nearest: export to deepspeed (DeepSpeed: the Hugging Face model code has it) (megatron-window)"
    )


def test_megatron_launch_flags_and_needs_line():
    """Megatron: --save-interval among the placeholders, --init-model-with-meta-device with Megatron-FSDP,
    and a header line naming Transformer Engine."""
    text = exported(FSDP, "megatron")
    placeholders = text[text.index("MEGATRON_PLACEHOLDER_ARGS=(") :]
    assert "--save-interval '<set me: iterations between checkpoints>'" in placeholders
    assert "--init-model-with-meta-device" in parse_args(text)
    assert (
        "# Needs, beside megatron-core: Transformer Engine (Megatron's default --transformer-impl "
        "transformer_engine)." in text
    )


def test_megatron_deepep_is_named_in_the_needs_line():
    """A MoE layout whose prediction used DeepEP names DeepEP in the header."""
    doc = solve_doc(
        "deepseek-v3", "h100-2048", 16384, 4096, Layout(fsdp=2048, ep=64, recompute="full")
    )
    text = export_document(doc, "megatron")
    assert "--moe-flex-dispatcher-backend deepep" in text
    assert "DeepEP (--moe-flex-dispatcher-backend deepep)" in text


def test_maxtext_gpu_multi_node_sets_num_slices():
    """MaxText on 8 nodes of 8 H100s: num_slices 8 beside dcn_fsdp_parallelism 8; one node writes none."""
    mt = yaml.safe_load(exported(FSDP, "maxtext"))
    assert (mt["num_slices"], mt["dcn_fsdp_parallelism"]) == (8, 8)
    one_node = solve_doc("debug", "h100-8", 32, 1024, Layout(fsdp=8))
    assert "num_slices" not in yaml.safe_load(exported(one_node, "maxtext"))


def test_deepspeed_optimizer_and_scheduler_placeholders():
    """DeepSpeed: an AdamW optimizer block and a scheduler block, their values '<set me: ...>'."""
    ds = json.loads(exported(FSDP, "deepspeed"))
    assert ds["optimizer"]["type"] == "AdamW"
    assert ds["optimizer"]["params"]["lr"] == "<set me: peak learning rate>"
    assert ds["scheduler"] == {
        "type": "<set me: e.g. WarmupCosineLR>",
        "params": {
            "warmup_num_steps": "<set me: warmup steps>",
            "total_num_steps": "<set me: optimizer steps>",
        },
    }
