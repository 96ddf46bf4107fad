"""Eager PyTorch against torch.compile (``Workload.torch_compile``, docs/cost_model.md#eager-pytorch): the
extra bytes eager kernels move, the refusals, the torchtitan export's ``[compile]`` and run-record rule 30."""

from __future__ import annotations

import tomllib

import pytest
import yaml
from builders import data_path, solve_doc

from layoutsearch.api import problem
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import Layout
from layoutsearch.costs import flops
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import context_for, export_document
from layoutsearch.export.torchtitan import check_config, sections
from layoutsearch.validation.mapping import record_to_problem

FMS_7B = "fmsfsdp-a100-llama2-7b-128gpu"
LLAMA3_8B = load_model(
    "llama3-8b"
)  # d 4096, d_ff 14336, 32 q heads, 8 kv heads of 128, vocab 128256


def test_eager_bytes_per_token_per_layer_by_hand():
    """Llama 3 8B in bf16: rotary 16 bytes per q/k element each way over (32 + 8) x 128 elements; the gated
    MLP 2 x 2 forward and 4 x 2 backward per d_ff element; both shrink with tp."""
    fwd, bwd = flops.eager_elementwise_bytes_per_token_per_layer(LLAMA3_8B, 1, 2)
    assert (fwd, bwd) == (16 * 5120 + 4 * 14336, 16 * 5120 + 8 * 14336) == (139_264, 196_608)
    fwd, bwd = flops.eager_elementwise_bytes_per_token_per_layer(LLAMA3_8B, 2, 2)
    assert (fwd, bwd) == (16 * 2560 + 4 * 7168, 16 * 2560 + 8 * 7168)


def test_eager_loss_bytes_per_token_by_hand():
    """The eager loss moves 2a + 40 bytes per logit against a compiled loss's 3a: 44 and 6 in bf16, 38 more,
    over V/tp logits."""
    eager = flops.loss_bytes_per_token(LLAMA3_8B, 1, "eager", 2, True)
    compiled = flops.loss_bytes_per_token(LLAMA3_8B, 1, "compiled", 2, True)
    assert (eager, compiled) == (44 * 128_256, 6 * 128_256)
    assert flops.loss_bytes_per_token(LLAMA3_8B, 4, "eager", 2, True) == 44 * 128_256 / 4


def _times(torch_compile, precision="bf16"):
    p = problem(
        "llama3-8b",
        "h100-8",
        seqs=8,
        seq_len=8192,
        framework="torchtitan",
        precision=precision,
        torch_compile=torch_compile,
    )
    return estimate(p, Layout(fsdp=8)).time_s


def test_eager_step_adds_exactly_those_bytes_at_the_hbm_rate():
    """One sequence of 8,192 tokens per H100 (3.35 TB/s x 0.885, the element-wise rate), no recompute: 32 layers x
    (139,264 + 196,608) bytes plus the loss's 38 x 128,256 per token = 15,621,632 bytes per token, 43.16 ms more
    element-wise time (38.20 ms at the datasheet 3.35 TB/s, before the element-wise kernels ran at their measured
    HBM rates); the default (compiled) equals --torch-compile, and nothing else moves."""
    compiled, eager, default = _times(True), _times(False), _times(None)
    assert default == compiled
    extra = eager["compute/elementwise"] - compiled["compute/elementwise"]
    assert extra == pytest.approx(15_621_632 * 8192 / (3.35e12 * 0.885), rel=1e-9)
    assert extra == pytest.approx(0.043165, abs=1e-6)  # 0.038201 at 3.35e12 before
    assert eager["step"] - compiled["step"] == pytest.approx(extra, rel=1e-9)
    assert eager["compute/matmul"] == compiled["compute/matmul"]


def test_fp8_casts_run_torchaos_kernel_chain_in_eager():
    """torchao's eager Float8Linear casts by a chain of kernels (abs, amax, fp32 upcast, scale, clamp, cast):
    4 x 2 + 25 = 33 bytes per element where a fused cast moves 2 + 1, 30 more, over the four linear inputs
    (QKV, attention output and MLP inputs: 3 x 4,096 + 14,336 = 26,624 per token), cast forward and their
    gradients backward: 32 layers x 1,597,440 bytes per token at the H100's element-wise rate (3.35 TB/s x 0.885),
    141.2 ms beyond bf16's eager extra (125.0 ms at the datasheet 3.35 TB/s, before the element-wise kernels ran
    at their measured HBM rates; the H100's measured chain: results/device_calibration.md, "fp8 quantisation")."""

    def gap(precision):
        return (
            _times(False, precision)["compute/elementwise"]
            - _times(True, precision)["compute/elementwise"]
        )

    assert 30 * 26_624 * 2 == 1_597_440
    assert gap("fp8") - gap("bf16") == pytest.approx(
        32 * 1_597_440 * 8192 / (3.35e12 * 0.885), rel=1e-9
    )
    assert gap("fp8") - gap("bf16") == pytest.approx(0.14125, abs=1e-5)  # 0.12500 at 3.35e12 before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"torch_compile": True},
            "--torch-compile: megatron runs its own fused element-wise kernels, compiled or not; "
            "torch.compile is a choice of PyTorch-module frameworks (--framework torchtitan); "
            "leave --torch-compile out",
        ),
        (
            {"torch_compile": False, "framework": "maxtext"},
            "--no-torch-compile: maxtext runs its own fused element-wise kernels",
        ),
        (
            {"torch_compile": False, "framework": "torchtitan", "tp_comm_overlap": True},
            "--no-torch-compile with --tp-comm-overlap: torchtitan pipelines TP with its GEMMs "
            "(async TP) only in a compiled model; use --torch-compile or --no-tp-comm-overlap",
        ),
    ],
)
def test_refusals_name_the_flag_and_the_way_out(options, message):
    with pytest.raises(InvalidArgumentError) as err:
        problem("llama3-8b", "h100-8", seqs=8, seq_len=8192, **options)
    assert message in str(err.value)


def test_torchtitan_export_writes_what_was_costed():
    """Compiled by default (torchtitan's own default is off), off when costed eager; the checker refuses a
    file whose compile differs from the prediction."""
    doc = solve_doc("llama3-8b", "h100-8", 8, 4096, Layout(fsdp=8), framework="torchtitan")
    assert tomllib.loads(export_document(doc, "torchtitan"))["compile"] == {
        "enable": True,
        "components": ["model", "loss"],
    }
    doc["problem"]["workload"]["torch_compile"] = False
    ctx = context_for(doc, "torchtitan")
    cfg = tomllib.loads(export_document(doc, "torchtitan"))
    assert cfg["compile"]["enable"] is False and check_config(cfg, ctx) == []
    assert check_config({**sections(ctx), "compile": {"enable": True}}, ctx) == [
        "compile.enable is True, but the prediction costed eager element-wise kernels",
        # torchtitan's default components compile the loss too, which an eager prediction did not cost
        "compile.components is ['model', 'loss'], but the prediction costed the loss eager (fp32 logits)",
    ]


def test_a_compiled_loss_holds_its_logits_in_bf16():
    """torchtitan compiles the loss with the model (components/loss.py since April 2025): the fp32 upcast fuses
    into its kernels, so Llama 3 8B's logits for a GPU's 4,096 tokens and their gradient take 2 bytes each, not 4:
    2 x 4,096 x 128,256 x 2 bytes = 1.96 GiB less. --no-compiled-loss holds the fp32 copies and exports
    compile components [model] only; megatron has no such choice, nor has an eager model."""
    layout = Layout(fsdp=8, num_microbatches=1)
    kw = dict(seqs=8, seq_len=4096, framework="torchtitan")
    compiled = estimate(problem("llama3-8b", "h100-8", **kw), layout, strict=False)
    eager_loss = estimate(
        problem("llama3-8b", "h100-8", compiled_loss=False, **kw), layout, strict=False
    )
    assert compiled.problem.workload.compiled_loss is True
    assert compiled.memory_bytes["temporary/logits"] == 4_096 * 128_256 * 2
    assert eager_loss.memory_bytes["temporary/logits"] == 4_096 * 128_256 * 4
    # and the eager loss's time: 38 bytes a logit more over the 4,096 x 128,256 logits at 3.35 TB/s x 0.885
    assert eager_loss.time_s["compute/elementwise"] - compiled.time_s[
        "compute/elementwise"
    ] == pytest.approx(38 * 4_096 * 128_256 / (3.35e12 * 0.885), rel=1e-9)
    doc = solve_doc("llama3-8b", "h100-8", 8, 4096, Layout(fsdp=8), framework="torchtitan")
    doc["problem"]["workload"]["compiled_loss"] = False
    cfg = tomllib.loads(export_document(doc, "torchtitan"))
    assert cfg["compile"] == {"enable": True, "components": ["model"]}
    assert check_config(cfg, context_for(doc, "torchtitan")) == []
    with pytest.raises(
        InvalidArgumentError, match="--compiled-loss: megatron runs its own loss kernels"
    ):
        problem("llama3-8b", "h100-8", seqs=8, compiled_loss=True)
    with pytest.raises(InvalidArgumentError, match="--compiled-loss with --no-torch-compile"):
        problem("llama3-8b", "h100-8", torch_compile=False, compiled_loss=True, **kw)


def _record(framework: str, compiled: bool | None) -> dict:
    """fms-fsdp's Llama 2 7B row of the development set, its framework and torch.compile restated."""
    record = next(
        r for r in yaml.safe_load(data_path("runs_dev.yaml").read_text()) if r["id"] == FMS_7B
    )
    record["workload"].update(framework=framework, torch_compile=compiled)
    return record


@pytest.mark.parametrize(
    ("framework", "stated", "costed"),
    [
        ("torchtitan", False, False),
        ("torchtitan", None, True),
        ("pytorch-fsdp", False, False),
        ("megatron", False, None),
        ("megatron", True, None),
    ],
)
def test_rule_30_applies_torch_compile_where_the_profile_has_it(framework, stated, costed):
    p, _ = record_to_problem(_record(framework, stated))
    assert p.workload.torch_compile is costed
