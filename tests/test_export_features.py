"""Every model feature that changes the parameters or the cost is written by each export target or
refused by name (never dropped): every catalogue model x every target, the features read from the
model's own spec fields, the flags from each framework's source."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import pytest
from builders import solve_doc

from layoutsearch.core.catalogue import load_model, model_names
from layoutsearch.core.errors import InvalidLayoutError, LayoutsearchWarning
from layoutsearch.core.rules import violations
from layoutsearch.core.specs import Layout, ModelSpec
from layoutsearch.export import TARGETS, context_for, export_document, target_rules

SEQ_LEN = 4096
GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def _act(m: ModelSpec) -> str:
    return m.activation or ("silu" if m.mlp == "gated" else "gelu")


# The test's own reading of the spec: feature (as refusals name it) -> whether the model has it.
FEATURES: dict[str, Callable[[ModelSpec, int], bool]] = {
    "per-head q/k norms": lambda m, s: m.qk_norm == "head" and m.mla is None,
    "q/k projection norms": lambda m, s: m.qk_norm == "projection",
    "q/k L2 norms": lambda m, s: m.qk_norm == "l2",
    "NoPE layers": lambda m, s: m.nope_layers > 0,
    "post-attention and post-MLP norms": lambda m, s: m.norms_per_layer == 4,
    "parallel attention and MLP": lambda m, s: m.parallel_block,
    "non-parametric norms": lambda m, s: not m.norm_weights,
    "LayerNorm": lambda m, s: m.norm == "layernorm",
    "gated GELU MLP (GeGLU)": lambda m, s: m.mlp == "gated" and _act(m) in GELU,
    "linear biases": lambda m, s: m.linear_bias,
    "Q/K/V-only biases": lambda m, s: m.qkv_bias and not m.linear_bias,
    "tied embeddings": lambda m, s: m.tied_embeddings,
    "learned positions": lambda m, s: m.learned_positions > 0,
    "llama3 rope scaling": lambda m, s: m.rope_scaling is not None,
    "latent attention": lambda m, s: m.mla is not None,
    "shared experts": lambda m, s: m.moe is not None and m.moe.num_shared_experts > 0,
    "shared-expert gate": lambda m, s: m.moe is not None and m.moe.shared_expert_gate,
    "dense layers before the MoE layers": lambda m, s: (
        m.moe is not None and m.moe.first_dense_layers > 0
    ),
    "MoE in every n-th layer": lambda m, s: m.moe is not None and m.moe.layer_freq > 1,
    "router bias": lambda m, s: m.moe is not None and m.moe.router_bias,
    "multi-token prediction": lambda m, s: m.mtp_layers > 0,
    "attention sinks": lambda m, s: m.attention_sinks,
    "sliding window": lambda m, s: m.sliding_window is not None and m.sliding_window < s,
    "attention chunks": lambda m, s: m.attention_chunk is not None and m.attention_chunk < s,
    "attention output-projection bias without MLP biases": lambda m, s: (
        m.attention_out_bias and not m.linear_bias
    ),
    "output-head bias": lambda m, s: m.output_head_bias,
}
# ModelSpec fields that are sizes, carried by every target's size fields, or hyper-parameters that
# change neither the parameters nor the cost; every other field must be read by FEATURES above.
SIZES_AND_HYPER = {
    "name", "num_layers", "d_model", "d_ff", "mlp", "num_heads", "num_kv_heads", "head_dim",
    "vocab_size", "rope_theta", "norm_eps", "activation", "attention_dropout", "hidden_dropout",
    "full_attention_layers", "moe", "mla",
}  # fmt: skip
READ = {
    "tied_embeddings", "norm", "linear_bias", "learned_positions", "qkv_bias", "norms_per_layer",
    "norm_weights", "qk_norm", "sliding_window", "attention_chunk", "nope_layers", "rope_scaling",
    "attention_sinks", "mtp_layers",
    "attention_out_bias", "output_head_bias", "parallel_block",
}  # fmt: skip


def _has(flag: str) -> Callable[[str], bool]:
    return lambda text: flag in text


def _lacks(flag: str) -> Callable[[str], bool]:
    return lambda text: flag not in text


# target -> feature -> how its file shows the feature (the framework's own flag or field name)
WRITTEN: dict[str, dict[str, Callable[[str], bool]]] = {
    # NVIDIA/Megatron-LM megatron/training/arguments.py (flags generated from TransformerConfig)
    "megatron": {
        "per-head q/k norms": _has("--qk-layernorm"),
        "q/k L2 norms": _has("--qk-l2-norm"),
        "NoPE layers": _has("--no-rope-freq"),
        "LayerNorm": _has("--normalization LayerNorm"),
        "linear biases": _lacks(
            "--disable-bias-linear"
        ),  # Megatron's linears have biases by default
        "Q/K/V-only biases": _has("--add-qkv-bias"),
        "tied embeddings": _lacks("--untie-embeddings-and-output-weights"),
        "learned positions": _has("--position-embedding-type learned_absolute"),
        "llama3 rope scaling": _has("--use-rope-scaling"),
        "latent attention": _has("--multi-latent-attention"),
        "shared experts": _has("--moe-shared-expert-intermediate-size"),
        "shared-expert gate": _has("--moe-shared-expert-gate"),
        "dense layers before the MoE layers": _has("--moe-layer-freq"),
        "MoE in every n-th layer": _has("--moe-layer-freq"),
        "router bias": _has("--moe-router-enable-expert-bias"),
        "multi-token prediction": _has("--mtp-num-layers"),
    },
    # torchtitan 0.2.2 models: deepseek_v3 (MLA, shared and dense-first layers, expert_bias), qwen3
    # (q/k norms), llama3 (its flavors' rope scaling), llama4 (NoPE layers, chunks, MoE every n-th layer, one
    # shared expert; the registration the header gives), gpt_oss
    "torchtitan": {
        "per-head q/k norms": _has('name = "qwen3"'),
        "llama3 rope scaling": _has('name = "llama3"'),
        "latent attention": _has('name = "deepseek_v3"'),
        "NoPE layers": _has("every_n_layers_nope="),
        "attention chunks": _has("fixed_attn_block_size="),
        "MoE in every n-th layer": _has("interleave_moe_layer_step="),
        "shared experts": lambda t: 'name = "deepseek_v3"' in t or "num_shared_experts=1" in t,
        "dense layers before the MoE layers": _has('name = "deepseek_v3"'),
        "router bias": lambda t: 'name = "deepseek_v3"' in t or 'name = "gpt_oss"' in t,
        # gpt_oss: biases on Q, K, V, O and the experts, a sink per head, sliding windows on the even layers
        "linear biases": _has('name = "gpt_oss"'),
        "attention sinks": _has('name = "gpt_oss"'),
        "sliding window": _has('name = "gpt_oss"'),
    },
    "torchtitan-0.3": {"llama3 rope scaling": _has("ROPE = ")},
    # AI-Hypercomputer/maxtext configs/base.yml keys
    "maxtext": {
        "per-head q/k norms": _has("use_qk_norm: true"),
        "q/k L2 norms": _has("use_qk_norm: true"),
        "NoPE layers": _has("nope_layer_interval:"),
        "attention chunks": _has("chunk_attn_window_size:"),
        "MoE in every n-th layer": _has("interleave_moe_layer_step:"),
        "LayerNorm": _has('decoder_block: "gpt3"'),
        "linear biases": _has('decoder_block: "gpt3"'),
        "tied embeddings": _has("logits_via_embedding: true"),
        "learned positions": _has("trainable_position_size:"),
        "llama3 rope scaling": _has('rope_type: "llama3.1"'),
        "latent attention": _has('attention_type: "mla"'),
        "shared experts": _has("shared_experts:"),
        "dense layers before the MoE layers": _has("first_num_dense_layers:"),
        "router bias": _has("routed_bias: true"),
        "multi-token prediction": _has("mtp_num_layers:"),
    },
    # DeepSpeed builds no model: the Hugging Face model code does, told what it must have
    "deepspeed": {
        f: _has(f'"{f}"')
        for f in FEATURES
        if f not in ("multi-token prediction", "attention chunks")
    },
}


def _doc(name: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LayoutsearchWarning)
        m = load_model(name)
    seq = min(SEQ_LEN, m.learned_positions or SEQ_LEN)
    return solve_doc(name, "h100-64", 64, seq, Layout(fsdp=64))


def test_every_model_spec_field_is_read_or_declared_a_size():
    """A new ModelSpec field fails here until FEATURES reads it or it is declared a size/hyper-parameter."""
    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    assert fields == SIZES_AND_HYPER | READ


@pytest.mark.parametrize("target", [t for t in TARGETS if t in WRITTEN])
@pytest.mark.parametrize("name", model_names())
def test_each_feature_is_written_or_the_refusal_names_it(name, target):
    """The export writes the flag of every feature the model has, or refuses naming each one it cannot write."""
    doc = _doc(name)
    ctx = context_for(doc, target)
    model, seq = ctx.model, ctx.seq_len
    present = [f for f, has in FEATURES.items() if has(model, seq)]
    unwritable = [f for f in present if f not in WRITTEN[target]]
    try:
        text = export_document(doc, target)
    except InvalidLayoutError as exc:
        messages = " | ".join(
            v.message for v in violations(ctx.problem, ctx.layout, target_rules(target))
        )
        assert str(exc).split(": ", 1)[1] in messages
        missing = [f for f in unwritable if f not in messages]
        assert not missing, f"{target} refused {name} without naming {missing}: {messages}"
        assert "failed its own check" not in str(exc)  # refused by a declared rule, not a bug
        return
    assert not unwritable, f"{target} wrote {name} without {unwritable}"
    dropped = [f for f in present if not WRITTEN[target][f](text)]
    assert not dropped, f"{target} file of {name} lacks the flags of {dropped}"
