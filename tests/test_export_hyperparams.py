"""Exports that launch: model hyper-parameters, the overlap flags the prediction assumes, and
placeholders for what layoutsearch does not decide (data, tokenizer, learning rate, steps, checkpoints)."""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml
from builders import data_path, doc_llama8b, exported, solve_doc

from layoutsearch.core.catalogue import load_model, read_hf_config
from layoutsearch.core.problem import Problem, model_hash, spec_fields
from layoutsearch.core.specs import Layout, RopeScaling
from layoutsearch.export import TARGETS, check_export
from layoutsearch.export.megatron import parse_args

L405 = solve_doc(
    "llama3-405b", "h100-64", 256, 4096, Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full")
)
# DeepSpeed's AutoTP has no sequence parallelism
L405_NO_SP = solve_doc(
    "llama3-405b",
    "h100-64",
    256,
    4096,
    Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full", sequence_parallel=False),
)
QWEN = str(data_path("hf/qwen2.5-7b.json"))


def test_catalogue_hyperparameters_and_old_hashes():
    """Published values in models/*.yaml; a model at every default keeps its document fields (and hash)."""
    m = load_model("llama3-405b")
    assert m.rope_theta == 500000 and m.norm_eps == 1e-5
    assert m.rope_scaling == RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    assert (
        load_model("llama70b").rope_theta == 500000 and load_model("llama70b").rope_scaling is None
    )
    assert load_model("llama2-7b").rope_theta == 10000
    debug = load_model("debug")
    assert set(spec_fields(debug)) == set(
        "name num_layers d_model d_ff mlp num_heads num_kv_heads head_dim vocab_size "
        "tied_embeddings norm linear_bias learned_positions".split()
    )
    assert spec_fields(m)["rope_scaling"]["factor"] == 8.0
    json.dumps(spec_fields(m))  # JSON-ready
    assert model_hash(m) != model_hash(debug)


def test_problem_record_round_trips_rope_scaling():
    problem = Problem.from_record(json.loads(json.dumps(L405["problem"])))
    assert problem.model == load_model("llama3-405b")


def test_hf_import_reads_hyperparameters(data_file):
    llama = read_hf_config(data_file("hf/llama-3.1-8b-instruct.json"))
    assert llama.model.rope_theta == 500000 and llama.model.rope_scaling.factor == 8
    qwen = read_hf_config(data_file("hf/qwen2.5-7b.json"))
    assert qwen.model.norm_eps == 1e-6 and qwen.model.activation == "silu" and qwen.model.qkv_bias
    for key in ("rope_theta", "rms_norm_eps", "hidden_act", "attention_dropout", "rope_scaling"):
        assert key not in llama.unused and key not in qwen.unused


def test_hf_import_keeps_other_rope_scaling_types_as_unused(tmp_path, data_file):
    cfg = json.loads(data_file("hf/llama-2-7b.json").read_text())
    cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    result = read_hf_config(path)
    assert result.model.rope_scaling is None and "rope_scaling" in result.unused


def test_megatron_llama3_405b_hyperparameters():
    a = parse_args(exported(L405, "megatron"))
    assert (
        a["--rotary-base"] == "500000"
        and a["--use-rope-scaling"] is True
        and a["--rope-scaling-factor"] == "8"
    )
    assert float(a["--attention-dropout"]) == 0.0 and float(a["--hidden-dropout"]) == 0.0
    assert float(a["--norm-epsilon"]) == 1e-5
    assert "--add-qkv-bias" not in a
    assert a["--overlap-grad-reduce"] is True and a["--overlap-param-gather"] is True


def test_megatron_qwen_gets_qkv_bias():
    doc = solve_doc(
        QWEN, "h100-64", 256, 4096, Layout(fsdp=16, tp=4, num_microbatches=4, recompute="full")
    )
    a = parse_args(exported(doc, "megatron"))
    assert a["--add-qkv-bias"] is True and "--disable-bias-linear" in a
    assert a["--rotary-base"] == "1000000" and float(a["--norm-epsilon"]) == 1e-6


@pytest.mark.parametrize("overlap", [True, False])
def test_megatron_tp_comm_overlap_follows_the_workload(overlap):
    doc = doc_llama8b(
        Layout(fsdp=8, tp=8, num_microbatches=4, recompute="full"),
        tp_comm_overlap=overlap,
    )
    text = exported(doc, "megatron")
    assert ("--tp-comm-overlap" in parse_args(text)) is overlap
    if overlap:  # the checker notices when the flag the prediction assumed is removed
        edited = text.replace("  --tp-comm-overlap\n", "")
        assert any(
            "--tp-comm-overlap is missing" in p for p in check_export("megatron", edited, doc)
        )


def test_megatron_checker_catches_wrong_hyperparameters():
    text = exported(L405, "megatron")
    problems = check_export(
        "megatron",
        text.replace("--rotary-base 500000", "--rotary-base 10000")
        .replace("  --use-rope-scaling\n", "")
        .replace("  --hidden-dropout 0.0\n", ""),
        L405,
    )
    assert any("--rotary-base is 10000" in p for p in problems)
    assert any("--use-rope-scaling is missing" in p for p in problems)
    assert any("--hidden-dropout is 0.1" in p for p in problems)  # Megatron's default when absent
    assert any(
        "--overlap-grad-reduce is missing" in p
        for p in check_export("megatron", text.replace("  --overlap-grad-reduce\n", ""), L405)
    )


def test_megatron_placeholders_are_a_separate_array():
    text = exported(L405, "megatron")
    assert "MEGATRON_PLACEHOLDER_ARGS=(" in text and "# PLACEHOLDER" in text
    for flag in ("--data-path", "--tokenizer-type", "--lr", "--train-iters", "--save", "--load"):
        assert f"  {flag} '<set me:" in text
        assert flag not in parse_args(text)  # MEGATRON_ARGS holds only what layoutsearch decided


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_deepspeed_overlap_comm(zero):
    doc = doc_llama8b(
        Layout(fsdp=64, num_microbatches=2, zero_stage=zero, recompute="full"),
    )
    cfg = json.loads(exported(doc, "deepspeed"))
    # ZeRO-3 also pins the reuse distance its regathers under recompute were costed at (DeepSpeed's default)
    reuse = {"stage3_max_reuse_distance": 1_000_000_000} if zero == 3 else {}
    assert cfg["zero_optimization"] == {
        "stage": zero,
        "overlap_comm": True,
        "contiguous_gradients": True,
        **reuse,
    }
    side = cfg["_layoutsearch"]
    assert side["model_hyperparameters"]["rope_theta"] == 500000
    assert all(v.startswith("<set me:") for k, v in side["placeholders"].items() if k != "note")
    cfg["zero_optimization"]["overlap_comm"] = False
    assert any("overlap_comm is off" in p for p in check_export("deepspeed", json.dumps(cfg), doc))


def test_maxtext_hyperparameters_and_model_name():
    doc = solve_doc("llama70b", "v5p-256", 256, 4096, Layout(fsdp=256, recompute="full"))
    cfg = yaml.safe_load(exported(doc, "maxtext"))
    assert cfg["rope_max_timescale"] == 500000 and cfg["normalization_layer_epsilon"] == 1e-5
    assert (
        cfg["dropout_rate"] == 0.0 and cfg["model_name"] == "llama3-70b" and "rope_type" not in cfg
    )
    cfg = yaml.safe_load(
        exported(
            solve_doc("llama3-405b", "v5p-256", 256, 4096, Layout(fsdp=256, recompute="full")),
            "maxtext",
        )
    )
    assert cfg["model_name"] == "llama3.1-405b" and cfg["rope_type"] == "llama3.1"
    debug = yaml.safe_load(
        exported(solve_doc("debug", "v5p-8", 32, 1024, Layout(fsdp=8)), "maxtext")
    )
    assert debug["model_name"] == "default" and debug["rope_max_timescale"] == 10000


def test_torchtitan_placeholders_replace_test_defaults():
    text = exported(L405, "torchtitan")
    cfg = tomllib.loads(text)
    assert cfg["training"]["dataset"].startswith("<set me:") and cfg["model"][
        "hf_assets_path"
    ].startswith("<set me:")
    assert cfg["job"]["dump_folder"].startswith("<set me:") and cfg["checkpoint"][
        "folder"
    ].startswith("<set me:")
    assert "# PLACEHOLDER: lr = <set me:" in text and "# PLACEHOLDER: steps = <set me:" in text


def test_torchtitan_custom_flavor_carries_rope_theta():
    from layoutsearch.export import context_for, torchtitan

    doc = solve_doc("debug", "h100-16", 64, 1024, Layout(dp=2, fsdp=8))
    args = torchtitan.custom_flavor_args(context_for(doc, "torchtitan"))
    assert "rope_theta=10000.0" in args and "norm_eps=1e-05" in args


@pytest.mark.parametrize("target", TARGETS)
def test_every_file_names_its_placeholders(target):
    text = exported(
        {"deepspeed": L405_NO_SP}.get(target, L405)
        if target != "maxtext"
        else solve_doc("llama3-405b", "v5p-256", 256, 4096, Layout(fsdp=256, recompute="full")),
        target,
    )
    assert "PLACEHOLDER" in text and "<set me:" in text
    for item in ("data path", "tokenizer", "learning rate", "training steps", "checkpoint paths"):
        assert item in text
