"""The megatron-bridge target: a recipe override whose ConfigContainer fields carry the layout."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from builders import (
    INTERLEAVED_LAYOUT,
    child_result,
    doc_llama8b,
    export_docs,
    exported,
    fp4_doc,
    framework_python,
    solve_doc,
)

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.specs import Layout
from layoutsearch.export import SUFFIXES, TARGETS, check_export, export_document

FSDP_TP, CP = (export_docs()[k] for k in ("fsdp_tp", "cp"))
INTERLEAVED_ZERO1 = doc_llama8b(dataclasses.replace(INTERLEAVED_LAYOUT, zero_stage=1))

MIXTRAL_EP8_FP8 = solve_doc(
    "mixtral-8x7b", "h100-64", 512, 4096, Layout(fsdp=32, tp=2, ep=8, zero_stage=1), precision="fp8"
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
        # Megatron's fused loss, the profile's default (docs/cost_model.md#the-loss)
        "cross_entropy_loss_fusion": True,
        "cross_entropy_fusion_impl": "native",
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
    doc = doc_llama8b(Layout(fsdp=2, tp=8, pp=4, num_microbatches=8))
    with pytest.raises(
        InvalidLayoutError,
        match=r"Megatron-Bridge cannot express ZeRO-3 with pp\(4\).*nearest: zero_stage 0 or 1",
    ):
        export_document(doc, "megatron-bridge")


def test_moe_and_precision_fields():
    """Mixtral ep 8 on 64 H100s in fp8: expert fields, the dispatcher, the fp8 recipe name."""
    doc = MIXTRAL_EP8_FP8
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


# ----------------------------------------------------------------------------- Megatron-Bridge itself
# Every `megatron.bridge.*` import runs the package __init__, which imports Transformer Engine (see
# docs/exports.md), so the loader runs the two Bridge modules that import only torch, hydra, omegaconf
# and megatron-core, from the installed 0.3.1 files: training/utils/omegaconf_utils.py (the merge) and
# models/transformer_config.py (the model section's base, whose finalize() runs megatron-core's checks).
# The other sections' field names are read from the installed sources.
BRIDGE_LOADER = r"""
import ast, dataclasses, importlib.util, json, logging, sys
from pathlib import Path
from megatron.core.distributed import DistributedDataParallelConfig

ROOT = Path(importlib.util.find_spec("megatron.bridge").submodule_search_locations[0])


def load(rel):
    spec = importlib.util.spec_from_file_location("bridge_" + Path(rel).stem, ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def class_fields(rel, name):
    tree = ast.parse((ROOT / rel).read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name).body
    return [n.target.id for n in body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def section(name, fields, bases=()):
    return dataclasses.make_dataclass(
        name, [(f, object, dataclasses.field(default=None)) for f in fields], bases=bases
    )


merge = load("training/utils/omegaconf_utils.py").process_config_with_overrides
TransformerConfig = load("models/transformer_config.py").TransformerConfig
Model = section("GPTModelProvider", class_fields("models/gpt_provider.py", "GPTModelProvider"), (TransformerConfig,))
sections = {
    name: section(name, class_fields("training/config.py", name))
    for name in ("TrainingConfig", "CheckpointConfig", "DistributedInitConfig")
}
Container = dataclasses.make_dataclass("ConfigContainer", [
    ("model", Model), ("train", sections["TrainingConfig"]), ("ddp", DistributedDataParallelConfig),
    ("dist", sections["DistributedInitConfig"]), ("checkpoint", sections["CheckpointConfig"]),
    ("mixed_precision", object, dataclasses.field(default=None)),
])
recipes = {
    n.name for n in ast.parse((ROOT / "training/mixed_precision.py").read_text()).body
    if isinstance(n, ast.FunctionDef)
}
skipped = []
handler = logging.Handler()
handler.emit = lambda record: skipped.append(record.getMessage())
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.WARNING)
out = {}
for path in sys.argv[1:]:
    # a llama3-8b-like recipe with its own recompute, which the override must clear
    cfg = Container(
        model=Model(num_layers=32, hidden_size=4096, num_attention_heads=32,
                    recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
        train=sections["TrainingConfig"](), ddp=DistributedDataParallelConfig(),
        dist=sections["DistributedInitConfig"](), checkpoint=sections["CheckpointConfig"](),
        mixed_precision="bf16_mixed",
    )
    skipped.clear()
    merge(cfg, config_filepath=path)
    got = {"skipped": list(skipped), "recipe_known": cfg.mixed_precision in recipes}
    try:
        cfg.model.finalize()
        DistributedDataParallelConfig.__post_init__(cfg.ddp)
    except Exception as exc:
        got["error"] = f"{type(exc).__name__}: {exc}"
    got["values"] = {
        s: {f.name: getattr(getattr(cfg, s), f.name) for f in dataclasses.fields(getattr(cfg, s))}
        for s in ("model", "train", "ddp", "dist", "checkpoint")
    }
    got["values"]["mixed_precision"] = cfg.mixed_precision
    out[Path(path).stem] = json.loads(json.dumps(got, default=str))
print("RESULT " + json.dumps(out))
"""


def bridge_python() -> str:
    return framework_python("LAYOUTSEARCH_BRIDGE_PYTHON", "bridge-venv", "Megatron-Bridge")


@pytest.mark.frameworks
def test_bridge_merges_the_overrides_onto_its_config_classes(tmp_path):
    """Megatron-Bridge 0.3.1's process_config_with_overrides merges each export (pp 4 x vp 2; Mixtral ep 8 fp8;
    cp 2; Megatron-FSDP; NVFP4 on GB200) onto a recipe-like container without skipping a key, the model section's finalize()
    (megatron-core's TransformerConfig checks) and DistributedDataParallelConfig accept the result, and a
    misspelled key is reported as skipped."""
    python = bridge_python()
    cases = {
        "interleaved": INTERLEAVED_ZERO1,
        "moe": MIXTRAL_EP8_FP8,
        "cp": CP,
        "fsdp_tp": FSDP_TP,
        "fp4": fp4_doc(),
    }
    paths = []
    for name, doc in cases.items():
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(exported(doc, "megatron-bridge"))
    paths.append(tmp_path / "typo.yaml")
    paths[-1].write_text(paths[0].read_text().replace("  context_parallel_size:", "  cp_size:"))
    got = child_result([python, "-c", BRIDGE_LOADER, *map(str, paths)])
    for name in cases:
        assert got[name]["skipped"] == [] and "error" not in got[name], (name, got[name])
        assert got[name]["recipe_known"], got[name]["values"]["mixed_precision"]
    model = {name: got[name]["values"]["model"] for name in got}
    ddp = {name: got[name]["values"]["ddp"] for name in got}
    assert (
        model["interleaved"]["pipeline_model_parallel_size"],
        model["interleaved"]["virtual_pipeline_model_parallel_size"],
        model["interleaved"]["tensor_model_parallel_size"],
        model["interleaved"]["recompute_granularity"],  # the recipe's "full" cleared
        ddp["interleaved"]["use_distributed_optimizer"],
        got["interleaved"]["values"]["train"]["micro_batch_size"],
    ) == (4, 2, 8, None, True, 16)
    assert (
        model["moe"]["num_moe_experts"],
        model["moe"]["moe_router_topk"],
        model["moe"]["expert_model_parallel_size"],
        model["moe"]["tensor_model_parallel_size"],
        got["moe"]["values"]["mixed_precision"],
    ) == (8, 2, 8, 2, "bf16_with_fp8_delayed_scaling_mixed")
    assert (
        model["cp"]["context_parallel_size"],
        model["cp"]["seq_length"],
        model["cp"]["recompute_modules"],
        got["cp"]["values"]["train"]["global_batch_size"],
    ) == (2, 8192, ["core_attn"], 128)
    assert (
        ddp["fsdp_tp"]["use_megatron_fsdp"],
        ddp["fsdp_tp"]["data_parallel_sharding_strategy"],
        got["fsdp_tp"]["values"]["dist"]["use_megatron_fsdp"],
        got["fsdp_tp"]["values"]["checkpoint"]["ckpt_format"],
        model["fsdp_tp"]["init_model_with_meta_device"],
    ) == (True, "optim_grads_params", True, "fsdp_dtensor", True)
    assert (
        got["fp4"]["values"]["mixed_precision"] == "bf16_with_nvfp4_mixed"
    )  # a recipe of 0.3.1 (recipe_known)
    assert got["typo"]["skipped"] == [
        "Key 'cp_size' in overrides not found in config object GPTModelProvider. Skipping."
    ]
