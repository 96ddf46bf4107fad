"""fp8 training: the fp8 matmul peak, fp8-saved linear inputs, cached fp8 weights, fp8 weight gathers."""

import pytest
from builders import LLAMA3_8B_H100_SOLVE
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.specs import Layout
from layoutsearch.costs import gemm, memory, params
from layoutsearch.costs.estimate import estimate

LAYOUT = Layout(fsdp=64, zero_stage=3, recompute="selective")


def _pair(layout=LAYOUT, model="llama3-8b", cluster="h100-64", **options):
    def one(precision):
        return estimate(
            Problem.build(
                model, cluster, build_workload(256, 4096, precision=precision, **options)
            ),
            layout,
        )

    return one("bf16"), one("fp8")


def test_fp8_runs_the_layer_matmuls_at_the_fp8_rate_and_keeps_attention_and_logits_in_bf16():
    bf16, fp8 = _pair()
    acc = load_accelerator("h100")
    ratio = (acc.peak_fp8_flops_per_s * gemm.fp8_matmul_efficiency(acc, "tensorwise")) / (
        acc.peak_flops_per_s * acc.matmul_efficiency
    )
    # 1979 x 0.8 / 989: the megatron profile's default recipe, tensorwise, at its ratio in training
    assert ratio == pytest.approx(1.6008, rel=1e-3)
    assert fp8.time_s["compute/matmul"] == pytest.approx(bf16.time_s["compute/matmul"] / ratio)
    assert fp8.time_s["compute/attention"] == pytest.approx(bf16.time_s["compute/attention"])
    assert fp8.time_s["compute/logits"] == pytest.approx(bf16.time_s["compute/logits"])
    assert fp8.time_s["compute/elementwise"] > bf16.time_s["compute/elementwise"]  # the casts
    assert 1.15 < bf16.step_time_s / fp8.step_time_s < 1.6


def test_fp8_saves_linear_inputs_in_one_byte_and_caches_fp8_weights():
    bf16, fp8 = _pair()
    saved = memory.saved_tensor_widths(bf16.model, 1, True, 4096)
    kept = [n for n in saved if memory.kept_by_policy(n, "selective")]
    per_token_bf16 = sum(saved[n] for n in kept) * 2
    # Transformer Engine (the megatron profile) stores the QKV, fc1 and fc2 inputs in fp8, one byte instead of
    # two; the attention output, which selective keeps for the O projection, stays bf16
    per_token_fp8 = per_token_bf16 - sum(
        saved[n] for n in ("qkv_in", "mlp_in", "mlp_act") if n in kept
    )
    ratio = fp8.memory_bytes["activations/saved"] / bf16.memory_bytes["activations/saved"]
    assert ratio == pytest.approx(per_token_fp8 / per_token_bf16)
    layer_params = bf16.model.num_layers * params.layer_params(bf16.model, 1)
    # megatron gathers fp8 parameters (--fp8-param-gather): the fp8 copy is the weight (1 byte instead of the
    # bf16 2), and the transposed fp8 copy sits beside it
    assert fp8.memory_moments["forward_end"]["state/fp8_weights"] == pytest.approx(
        layer_params / 64
    )
    assert bf16.memory_moments["forward_end"]["state/weights"] - fp8.memory_moments["forward_end"][
        "state/weights"
    ] == pytest.approx(layer_params / 64 * (2 - 1))
    assert "state/fp8_weights" not in bf16.memory_moments["forward_end"]
    # a framework that keeps sharded bf16 weights and gathers them in bf16 (DeepSpeed) caches both fp8 copies
    bf16_ds, fp8_ds = _pair(framework="deepspeed")
    assert fp8_ds.memory_moments["forward_end"]["state/fp8_weights"] == pytest.approx(
        2 * layer_params / 64
    )
    weights = [e.memory_moments["forward_end"]["state/weights"] for e in (bf16_ds, fp8_ds)]
    assert weights[0] == weights[1]
    # one that casts the fp32 master shard at each ZeRO-3 gather (MaxText, FSDP2) keeps no copy of either
    for e in _pair(framework="maxtext") + _pair(framework="torchtitan"):
        assert e.memory_moments["forward_end"]["state/weights"] == 0.0
        assert e.memory_moments["forward_end"].get("state/fp8_weights", 0.0) == 0.0


@pytest.mark.parametrize(
    "framework, gathered_bytes",
    [("megatron", 1), ("torchtitan", 1), ("maxtext", 2), ("deepspeed", 2)],
)
def test_fp8_weight_gathers_where_the_framework_does_them(framework, gathered_bytes):
    bf16, fp8 = _pair(framework=framework)
    gather_bf16, gather_fp8 = (
        next(c["time_s"] for c in e.collectives if c["name"] == "fsdp weight gather")
        for e in (bf16, fp8)
    )
    if gathered_bytes == 1:
        assert (
            0.5 * gather_bf16 < gather_fp8 < 0.7 * gather_bf16
        )  # half the bytes; latency and small-message cost stay
    else:
        assert gather_fp8 == pytest.approx(gather_bf16)


def test_fp8_is_refused_where_the_catalogue_has_no_fp8_rate():
    r = CliRunner().invoke(
        app, ["estimate", "--model", "llama3-8b", "--cluster", "v5p-64", "--precision", "fp8"]
    )
    assert r.exit_code == 2
    assert r.output.strip() == (
        "error: --precision fp8: v5p has no fp8 matmul rate in the catalogue (no "
        "peak_fp8_tflops in hardware/v5p.yaml); use --precision bf16"
    )


def test_solve_takes_fp8_and_records_it():
    r = CliRunner().invoke(
        app,
        [*LLAMA3_8B_H100_SOLVE, "--precision", "fp8", "--top", "1", "--format", "json"],
    )
    assert r.exit_code == 0, r.output
    assert '"precision": "fp8"' in r.stdout


def _export(target: str, cluster: str, tmp_path, *options: str) -> tuple[int, str, str]:
    out = tmp_path / f"layout.{target}"
    r = CliRunner().invoke(
        app,
        [
            "solve",
            "--model",
            "llama3-8b",
            "--cluster",
            cluster,
            "--seqs",
            "128",
            "--precision",
            "fp8",
            "--top",
            "1",
            "--export",
            target,
            "-o",
            str(out),
            *options,
        ],
    )
    return r.exit_code, out.read_text() if out.exists() else "", r.output


def test_exports_carry_the_fp8_the_prediction_assumed(tmp_path):
    code, text, _ = _export("megatron", "h100-16", tmp_path)
    # per-tensor scaling, the profile's default: Megatron's own default recipe, written out
    assert code == 0 and "--fp8-format hybrid" in text and "--fp8-recipe delayed" in text
    assert ("--fp8-param-gather" in text) == (
        "--use-distributed-optimizer" in text
    )  # fp8 weight gathers: megatron
    code, text, _ = _export("megatron", "gb200-72", tmp_path, "--fp8-recipe", "mxfp8")
    assert code == 0 and "--fp8-recipe mxfp8" in text  # Blackwell: 32-value block scales
    code, text, _ = _export("megatron", "h100-16", tmp_path, "--fp8-recipe", "blockwise")
    assert code == 0 and "--fp8-recipe blockwise" in text
    assert (
        "--fp8-param-gather" not in text
    )  # not with block scales (Megatron-Bridge's subchannel recipe)
    code, text, _ = _export("maxtext", "h100-16", tmp_path)
    assert code == 0 and 'quantization: "fp8"' in text
    code, text, _ = _export("torchtitan", "h100-16", tmp_path)
    assert code == 0 and "converters = ['quantize.linear.float8']" in text
    assert "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true" in text
    assert (
        "recipe_name" not in text
    )  # v0.2.2 asserts the fp8 all-gather comes without one (tensorwise)
    code, text, _ = _export("torchtitan", "h100-16", tmp_path, "--fp8-recipe", "rowwise")
    assert code == 0 and '[quantize.linear.float8]\nrecipe_name = "rowwise"' in text
    assert "enable_fsdp_float8_all_gather" not in text


def test_a_target_without_fp8_says_so(tmp_path):
    code, _, output = _export("deepspeed", "h100-16", tmp_path)
    assert code == 1
    assert (
        "no feasible layout: DeepSpeed cannot express fp8 training; nearest: --precision bf16, or export to "
        "megatron (deepspeed-precision)"
    ) in output
