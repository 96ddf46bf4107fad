"""The megatron-bridge target: a recipe override whose ConfigContainer fields carry the layout."""

from __future__ import annotations

import pytest
import yaml
from builders import export_docs, exported, solve_doc

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.specs import Layout
from layoutsearch.export import SUFFIXES, TARGETS, check_export, export_document

FSDP_TP = export_docs()["fsdp_tp"]
INTERLEAVED_ZERO1 = solve_doc(
    "llama3-8b",
    "h100-64",
    256,
    4096,
    Layout(
        fsdp=2,
        tp=8,
        pp=4,
        virtual_stages=2,
        num_microbatches=8,
        schedule="interleaved",
        zero_stage=1,
    ),
)


def test_bridge_is_a_declared_target_with_a_yaml_suffix():
    """megatron-bridge is an export target (framework declarations) written as .yaml."""
    assert "megatron-bridge" in TARGETS and SUFFIXES["megatron-bridge"] == ".yaml"


def test_fsdp_tp_override_fields():
    """FSDP 8 x TP 8 on 64 H100s: the model, train, ddp, dist, checkpoint and precision fields."""
    cfg = yaml.safe_load(exported(FSDP_TP, "megatron-bridge"))
    assert cfg["model"] == {
        "num_layers": 32,
        "hidden_size": 4096,
        "ffn_hidden_size": 14336,
        "num_attention_heads": 32,
        "num_query_groups": 8,
        "kv_channels": 128,
        "seq_length": 4096,
        "tensor_model_parallel_size": 8,
        "pipeline_model_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None,
        "context_parallel_size": 1,
        "sequence_parallel": True,
        "recompute_granularity": "full",
        "recompute_method": "uniform",
        "recompute_num_layers": 1,
        "recompute_modules": None,
        "init_model_with_meta_device": True,
    }
    assert cfg["train"] == {"global_batch_size": 256, "micro_batch_size": 8}
    assert cfg["ddp"]["use_megatron_fsdp"] and cfg["dist"] == {"use_megatron_fsdp": True}
    assert cfg["ddp"]["data_parallel_sharding_strategy"] == "optim_grads_params"
    assert cfg["checkpoint"] == {"ckpt_format": "fsdp_dtensor"}
    assert cfg["mixed_precision"] == "bf16_mixed"


def test_interleaved_pipeline_takes_the_distributed_optimizer():
    """pp 4 x 2 virtual stages with ZeRO-1: vp 2, the distributed optimizer, no Megatron-FSDP; 8 microbatches."""
    cfg = yaml.safe_load(exported(INTERLEAVED_ZERO1, "megatron-bridge"))
    assert (
        cfg["model"]["pipeline_model_parallel_size"],
        cfg["model"]["virtual_pipeline_model_parallel_size"],
    ) == (4, 2)
    assert cfg["ddp"]["use_distributed_optimizer"] and not cfg["ddp"]["use_megatron_fsdp"]
    assert "data_parallel_sharding_strategy" not in cfg["ddp"]
    assert cfg["train"] == {"global_batch_size": 256, "micro_batch_size": 16}  # 256 / (2 x 8)
    assert "init_model_with_meta_device" not in cfg["model"]


def test_megatron_fsdp_with_a_pipeline_is_refused():
    """ZeRO-3 with pp 4 is refused by rule, naming the distributed optimizer as the way out."""
    doc = solve_doc(
        "llama3-8b", "h100-64", 256, 4096, Layout(fsdp=2, tp=8, pp=4, num_microbatches=8)
    )
    with pytest.raises(
        InvalidLayoutError,
        match=r"Megatron-Bridge cannot express ZeRO-3 with pp\(4\).*nearest: zero_stage 0 or 1",
    ):
        export_document(doc, "megatron-bridge")


def test_moe_and_precision_fields():
    """Mixtral ep 8 on 64 H100s in fp8: expert fields, the dispatcher, the fp8 recipe name."""
    doc = solve_doc(
        "mixtral-8x7b",
        "h100-64",
        512,
        4096,
        Layout(fsdp=32, tp=2, ep=8, zero_stage=1),
        precision="fp8",
    )
    model = yaml.safe_load(exported(doc, "megatron-bridge"))["model"]
    assert (
        model["num_moe_experts"],
        model["moe_router_topk"],
        model["moe_ffn_hidden_size"],
        model["expert_model_parallel_size"],
        model["expert_tensor_parallel_size"],
    ) == (8, 2, 14336, 8, 1)
    assert model["moe_token_dispatcher_type"] in ("alltoall", "flex")
    text = export_document(doc, "megatron-bridge")
    assert 'mixed_precision: "bf16_with_fp8_delayed_scaling_mixed"' in text


def test_checker_catches_an_edited_field():
    """A hand-edited micro_batch_size breaks the batch identity and the checker says so."""
    text = exported(FSDP_TP, "megatron-bridge").replace(
        "micro_batch_size: 8", "micro_batch_size: 3"
    )
    problems = check_export("megatron-bridge", text, FSDP_TP)
    assert problems[0] == "global_batch_size 256 is not a multiple of micro_batch_size 3 x DP 8"


def test_placeholders_are_comments():
    """The undecided keys are commented placeholders: the loaded YAML has no optimizer or dataset section."""
    text = exported(FSDP_TP, "megatron-bridge")
    assert (
        "# PLACEHOLDER: checkpoint.save_interval: <set me: iterations between checkpoints>" in text
    )
    assert set(yaml.safe_load(text)) == {
        "model",
        "train",
        "ddp",
        "dist",
        "checkpoint",
        "mixed_precision",
    }
