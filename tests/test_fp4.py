"""fp4 training (issue 32 point 5): which parts run it, the fp4 GEMM rate and quantisation traffic, the weight
copies, the uncalibrated band, the exports that write NVFP4 and the ones that refuse it, CP-SAT against the
enumerator (docs/cost_model.md#fp4-training, docs/calibration.md#fp4_recipe_ratio)."""

from __future__ import annotations

import re
import warnings

import pytest
from builders import fp4_doc, proven_top
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.problem import Problem, SearchOptions, UncalibratedWarning
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.uncertainty import uncertainty_band
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import export_document
from layoutsearch.export.megatron import parse_args
from layoutsearch.report.output import band_of
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

runner = CliRunner()
SMALL = ["--model", "llama3-8b", "--seqs", "64", "--seq-len", "4096"]
LAYOUT = Layout(fsdp=8, zero_stage=1, num_microbatches=8)
MOE_LAYOUT = Layout(fsdp=8, ep=8, zero_stage=1, num_microbatches=8)


def _estimate(precision: str, cluster: str = "gb200-8", **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncalibratedWarning)
        problem = Problem.build(
            "llama3-8b",
            cluster,
            Workload(global_batch_seqs=64, seq_len=4096, precision=precision, **options),
        )
    return estimate(problem, LAYOUT)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--cluster", "h100-8", "--precision", "fp4"],
            "--precision fp4: h100 has no fp4 matmul rate in the catalogue (no peak_fp4_tflops in "
            "hardware/h100.yaml: fp4 tensor cores are Blackwell's); use --precision fp8",
        ),
        (
            ["--cluster", "a100-80gb-8", "--precision", "fp4"],
            "--precision fp4: a100-80gb has no fp4 matmul rate in the catalogue (no peak_fp4_tflops in "
            "hardware/a100-80gb.yaml: fp4 tensor cores are Blackwell's); use --precision bf16",
        ),
        (
            ["--cluster", "gb200-8", "--fp4-recipe", "nvfp4"],
            "--fp4-recipe nvfp4: a scaling recipe applies to fp4 training, not to --precision bf16; "
            "use --precision fp4 or leave --fp4-recipe out",
        ),
    ],
)
def test_fp4_is_refused_off_blackwell_and_its_recipe_without_it(argv, message):
    """A part without fp4 tensor cores (its hardware file has no peak_fp4_tflops) refuses fp4, naming the
    precision it has; a recipe without fp4 training is refused too: one line each, exit 2."""
    r = runner.invoke(app, ["estimate", *SMALL, "--layout", "fsdp=8", *argv])
    assert r.exit_code == 2 and message in r.stderr, r.stderr


def test_nvfp4_is_the_default_recipe_and_the_prediction_warns_and_widens_its_band():
    """--precision fp4 resolves to NVFP4; no development record trains in fp4, so the prediction warns and
    takes the uncalibrated band. A dense model on gb200 takes it in fp8 too (gb200's fractions are fitted on its
    MoE runs only); Mixtral 8x7B there keeps its calibrated MoE band in fp8 and widens it in fp4."""
    with pytest.warns(
        UncalibratedWarning, match="--precision fp4: fp4 GEMMs are costed at their nvfp4 rate"
    ):
        problem = Problem.build(
            "llama3-8b", "gb200-8", Workload(global_batch_seqs=64, seq_len=4096, precision="fp4")
        )
    assert problem.workload.fp4_recipe == "nvfp4"
    uncalibrated = uncertainty_band("gpu", calibrated=False)
    assert band_of(estimate(problem, LAYOUT)) == band_of(_estimate("fp8")) == uncalibrated
    moe = {}
    for precision in ("fp8", "fp4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UncalibratedWarning)
            work = Workload(global_batch_seqs=64, seq_len=4096, precision=precision)
            moe[precision] = band_of(
                estimate(Problem.build("mixtral-8x7b", "gb200-8", work), MOE_LAYOUT)
            )
    assert moe["fp8"] == uncertainty_band("gpu", moe=True)
    (low4, high4), (low8, high8) = moe["fp4"], moe["fp8"]
    assert low4 <= low8 and high4 >= high8 and (low4, high4) != (low8, high8)


def test_fp4_gemms_run_at_their_peak_ratio_and_quantise_twice():
    """On a GB200 (fp4 peak 10 PFLOP/s, fp8 5): the layer GEMMs at 0.6469 x matmul_efficiency of the fp4 peak (the
    B200's kernel ratio 0.75 x the share of its kernel ratio per-tensor fp8 keeps in training, 0.8 / 0.9275) against
    fp8's 0.8 x of its peak, 10 x 0.6469 / (5 x 0.8) = 1.617 times as fast (1.875 at the kernel's 0.75 until
    2026-12-06, 1.325 with the B300's 0.53 before; docs/calibration.md#fp4_recipe_ratio) (the output head stays bf16:
    compute/logits unchanged). Each linear input is quantised twice, each time read for its per-tensor amax and
    again to cast: 2 x (2 x 2 bytes read + 0.5625 written) = 9.125 bytes a value against fp8's 2 + 1 = 3, the
    cast traffic over bf16's 9.125 / 3 times fp8's; MXFP4's block scales need no amax pass, 2 x (2 + 0.53125) =
    5.0625 bytes. The
    weights' two fp4 copies, 2 x 0.5625 bytes a parameter, against fp8's one transposed byte (Megatron gathers
    fp8 weights, so only the transpose is kept beside them): 1.125 times."""
    bf16, fp8, fp4 = _estimate("bf16"), _estimate("fp8"), _estimate("fp4")
    assert fp8.time_s["compute/matmul"] / fp4.time_s["compute/matmul"] == pytest.approx(
        10 * 0.6469 / (5 * 0.8), rel=1e-12
    )
    assert fp4.time_s["compute/logits"] == fp8.time_s["compute/logits"]
    cast8, cast4 = (
        e.time_s["compute/elementwise"] - bf16.time_s["compute/elementwise"] for e in (fp8, fp4)
    )
    assert cast4 / cast8 == pytest.approx(2 * (2 * 2 + 0.5625) / 3, rel=1e-12)
    copies = fp4.memory_bytes["state/fp8_weights"] / fp8.memory_bytes["state/fp8_weights"]
    assert copies == pytest.approx(2 * 0.5625 / 1, rel=1e-12)
    mx = _estimate("fp4", fp4_recipe="mxfp4")
    cast_mx = mx.time_s["compute/elementwise"] - bf16.time_s["compute/elementwise"]
    assert cast_mx / cast8 == pytest.approx(2 * (2 + 0.53125) / 3, rel=1e-12)
    assert mx.memory_bytes["state/fp8_weights"] / fp4.memory_bytes[
        "state/fp8_weights"
    ] == pytest.approx(0.53125 / 0.5625, rel=1e-12)


def test_megatron_and_megatron_bridge_write_nvfp4():
    """Megatron: --fp4-format e2m1 --fp4-recipe nvfp4 (megatron-core 0.16.1 TransformerConfig.fp4 and
    fp4_recipe), no fp8 flag; Megatron-Bridge: the bf16_with_nvfp4_mixed recipe (megatron-bridge 0.3.1)."""
    args = parse_args(export_document(fp4_doc(), "megatron"))
    assert (args["--fp4-format"], args["--fp4-recipe"]) == ("e2m1", "nvfp4")
    assert "--fp8-format" not in args
    bridge = export_document(fp4_doc(), "megatron-bridge")
    assert 'mixed_precision: "bf16_with_nvfp4_mixed"' in bridge


@pytest.mark.parametrize(
    "recipe, target, message",
    [
        ("mxfp4", "megatron", "Megatron-LM cannot express the mxfp4 fp4 recipe"),
        ("mxfp4", "megatron-bridge", "Megatron-Bridge cannot express the mxfp4 fp4 recipe"),
        ("nvfp4", "torchtitan", "torchtitan cannot express fp4 training"),
        ("nvfp4", "maxtext", "MaxText cannot express fp4 training"),
        ("nvfp4", "deepspeed", "DeepSpeed cannot express fp4 training"),
    ],
)
def test_exports_refuse_the_fp4_they_cannot_write(recipe, target, message):
    """No framework has an MXFP4 training recipe; torchtitan, MaxText and DeepSpeed write no fp4 at all (the
    layout is one each can write in bf16: fsdp 8, ZeRO-3 where the target is not Megatron)."""
    zero_stage = 1 if target.startswith("megatron") else 3
    with pytest.raises(InvalidLayoutError, match=re.escape(message)):
        export_document(fp4_doc(recipe, zero_stage), target)


@pytest.mark.parametrize("cluster, seqs", [("gb200-72", 144), ("b300-64", 128)])
def test_cpsat_equals_the_enumerator_in_fp4(cluster, seqs):
    """The fp4 rates and copies reach CP-SAT through the same tables as the enumerator: the same top 3."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UncalibratedWarning)
        problem = Problem.build(
            "llama3-8b", cluster, Workload(global_batch_seqs=seqs, seq_len=4096, precision="fp4")
        )
    space = build_space(problem, SearchOptions())
    tables = build_tables(space)
    enum, _ = enumerate_top(space, tables, "step-time", 3)
    cps, info = proven_top(space, tables, "step-time", 3)
    assert cps == enum and enum and info["status"] == "OPTIMAL"
