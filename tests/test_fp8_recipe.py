"""fp8 by scaling recipe: the H200- and H100-measured rate ratios, the choice per framework and part, the exports."""

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.specs import Layout
from layoutsearch.costs import gemm
from layoutsearch.costs.estimate import estimate
from layoutsearch.validation.mapping import fp8_recipe

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "fp8_recipe_ratios", ROOT / "scripts" / "fp8_recipe_ratios.py"
)
assert _spec is not None and _spec.loader is not None
ratios_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ratios_script)

runner = CliRunner()


def test_an_fp8_tile_takes_about_a_bf16_tiles_fixed_time():
    """The depth sweeps (m = n = 8,192, k 64 to 16,384) fitted in the engine's GEMM model: fp8's half-efficiency
    depth is 2-3x bf16's (H200 410 against 144, H100 436 against 202, per tensor) where its rate is 1.9x, so a
    tile's fixed work takes about the same time in both precisions (0.94x to 1.82x; 1x with fast accumulation).
    Scaling the depth by the rate follows the 80 layer shapes' per-tensor ratios better (p90 of |log error|
    0.137 -> 0.106 on the H200); docs/calibration.md#fp8_recipe_ratio says why the engine does not."""
    h200 = ratios_script.depth_fits()
    h100 = ratios_script.depth_fits(ratios_script.H100_MEASUREMENT, "h100")
    assert (h200["bf16"]["k_half"], h200["tensorwise"]["k_half"]) == (144, 410)
    assert (h100["bf16"]["k_half"], h100["tensorwise"]["k_half"]) == (202, 436)
    assert round(h200["tensorwise"]["rate_ratio"], 2) == 1.92
    fixed = {
        (board, recipe): round(fits[recipe]["fixed_time_ratio"], 2)
        for board, fits in (("h200", h200), ("h100", h100))
        for recipe in ("tensorwise", "tensorwise_fast_accum", "rowwise", "blockwise")
    }
    assert min(fixed.values()) == 0.94 and max(fixed.values()) == 1.82
    assert (
        fixed["h200", "tensorwise_fast_accum"] == 0.94
        and fixed["h100", "tensorwise_fast_accum"] == 1.01
    )
    errors = ratios_script.shape_ratio_errors()
    assert (round(errors["flat"], 3), round(errors["scaled"], 3)) == (0.137, 0.106)


def test_the_measurement_gives_the_pinned_ratios():
    """Medians over the 80 layer GEMMs of results/device/h200_2026-12-04.json (Llama 3 8B and 70B, tp 1 and 8):
    per tensor 0.9275, per row 0.8961, DeepSeek-V3 blockwise 0.7864 of the bf16 fraction; the F.scaled_mm
    blockwise call refuses 3 of the shapes. hardware/h200.yaml holds per tensor at 0.8 (the fp8 records) and
    the others by their ratio to it: 0.8 x 0.8961 / 0.9275 = 0.7729, 0.8 x 0.7864 / 0.9275 = 0.6783."""
    got = ratios_script.recipe_ratios()
    assert {r: round(v["median"], 4) for r, v in got.items()} == {
        "tensorwise": 0.9275,
        "tensorwise_fast_accum": 0.9185,
        "rowwise": 0.8961,
        "blockwise": 0.7864,
        "blockwise_recipes": 0.8053,
    }
    assert {r: v["shapes"] for r, v in got.items()}["blockwise_recipes"] == 77
    pinned = dict(load_accelerator("h200").fp8_recipe_ratio)
    assert pinned == {"tensorwise": 0.8, "rowwise": 0.7729, "blockwise": 0.6783}
    assert pinned == ratios_script.training_ratios()


def test_the_h100_measurement_gives_the_h100_and_h800_ratios():
    """Medians over the same 80 layer GEMMs on an H100 80 GB HBM3 (results/device/h100_2026-12-05.json): per
    tensor 0.9048, per row 0.8508, blockwise 0.7959. hardware/h100.yaml and h800.yaml (the same board) hold
    0.8, 0.8 x 0.8508 / 0.9048 = 0.7522 and 0.8 x 0.7959 / 0.9048 = 0.7037."""
    got = ratios_script.recipe_ratios(ratios_script.H100_MEASUREMENT)
    assert {r: round(v["median"], 4) for r, v in got.items()} == {
        "tensorwise": 0.9048,
        "tensorwise_fast_accum": 0.9060,
        "rowwise": 0.8508,
        "blockwise": 0.7959,
        "blockwise_recipes": 0.8091,
    }
    for part in ("h100", "h800"):
        pinned = dict(load_accelerator(part).fp8_recipe_ratio)
        assert pinned == {"tensorwise": 0.8, "rowwise": 0.7522, "blockwise": 0.7037}
        assert pinned == ratios_script.training_ratios(ratios_script.PART_MEASUREMENTS[part])


def test_hopper_runs_no_mxfp8_and_blackwell_and_cdna4_do():
    assert "mxfp8" not in dict(load_accelerator("h100").fp8_recipe_ratio)
    assert "mxfp8" not in dict(load_accelerator("mi300x").fp8_recipe_ratio)
    assert dict(load_accelerator("b200").fp8_recipe_ratio)["mxfp8"] == 0.8
    assert dict(load_accelerator("mi355x").fp8_recipe_ratio)["mxfp8"] == 0.8
    assert load_accelerator("v5p").fp8_recipe_ratio == ()


def _matmul_s(recipe: str | None, framework: str = "megatron") -> float:
    """compute/matmul of Llama 3 70B, fsdp 64 x tp 8 on 512 H100s, 4096-token sequences (GEMMs far above the HBM
    floor), fp8 under ``recipe``."""
    workload = build_workload(512, 4096, precision="fp8", fp8_recipe=recipe, framework=framework)
    problem = Problem.build("llama70b", "h100-512", workload)
    return estimate(problem, Layout(fsdp=64, tp=8, zero_stage=3, recompute="full")).time_s[
        "compute/matmul"
    ]


def test_the_fp8_gemm_time_scales_with_the_recipe_ratio():
    """Layer GEMMs at matmul_efficiency x ratio: blockwise takes 0.8 / 0.7037 = 1.137x the per-tensor time,
    rowwise 0.8 / 0.7522 = 1.064x (the output head stays bf16, attention is not a GEMM here)."""
    tensorwise, rowwise, blockwise = (_matmul_s(r) for r in ("tensorwise", "rowwise", "blockwise"))
    assert blockwise / tensorwise == pytest.approx(1.1368, rel=1e-3)
    assert rowwise / tensorwise == pytest.approx(1.0635, rel=1e-3)
    assert _matmul_s(None) == tensorwise  # the megatron profile's default: per tensor


def test_mxfp8_on_hopper_is_refused_naming_the_part_and_its_recipes():
    r = runner.invoke(
        app,
        [
            *("estimate", "--model", "llama3-8b", "--cluster", "h100-8", "--layout", "fsdp=8"),
            *("--precision", "fp8", "--fp8-recipe", "mxfp8"),
        ],
    )
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: --fp8-recipe mxfp8: h100 cannot run it (hardware/h100.yaml fp8_recipe_ratio: "
        "tensorwise, rowwise, blockwise); use --fp8-recipe tensorwise"
    ]


def test_a_recipe_without_fp8_is_refused():
    r = runner.invoke(
        app,
        [
            *("estimate", "--model", "llama3-8b", "--cluster", "h100-8", "--layout", "fsdp=8"),
            *("--fp8-recipe", "rowwise"),
        ],
    )
    assert r.exit_code == 2
    assert (
        "--fp8-recipe rowwise: a scaling recipe applies to fp8 training, not to --precision bf16"
        in (r.output)
    )


def _solve(cluster: str, recipe: str, target: str, tmp_path) -> tuple[int, str, str]:
    out = tmp_path / f"layout.{target}"
    r = runner.invoke(
        app,
        [
            *("solve", "--model", "llama3-8b", "--cluster", cluster, "--seqs", "128"),
            *("--precision", "fp8", "--fp8-recipe", recipe, "--top", "1"),
            *("--export", target, "-o", str(out)),
        ],
    )
    return r.exit_code, out.read_text() if out.exists() else "", r.output


def test_megatron_refuses_rowwise_with_the_nearest_recipes(tmp_path):
    code, _, output = _solve("h100-16", "rowwise", "megatron", tmp_path)
    assert code == 1
    assert (
        "Megatron-LM cannot express the rowwise fp8 recipe (arguments.py's --fp8-recipe scales per tensor "
        "(delayed, tensorwise), per 1x128 / 128x128 block (blockwise) or per 32 values (mxfp8), not per row); "
        "nearest: --fp8-recipe blockwise or tensorwise (megatron-fp8-recipe)"
    ) in " ".join(output.split())


def test_torchtitan_refuses_blockwise_with_rowwise_nearest(tmp_path):
    code, _, output = _solve("h100-16", "blockwise", "torchtitan", tmp_path)
    assert code == 1
    assert "nearest: --fp8-recipe rowwise or tensorwise (torchtitan-fp8-recipe)" in " ".join(
        output.split()
    )


@pytest.mark.parametrize(
    "cluster, recipe, name",
    [
        ("h100-16", "tensorwise", "bf16_with_fp8_delayed_scaling_mixed"),
        ("h100-16", "blockwise", "bf16_with_fp8_subchannel_scaling_mixed"),
        ("b200-16", "mxfp8", "bf16_with_mxfp8_mixed"),
    ],
)
def test_megatron_bridge_names_the_recipe_of_mixed_precision_py(cluster, recipe, name, tmp_path):
    code, text, _ = _solve(cluster, recipe, "megatron-bridge", tmp_path)
    assert code == 0 and f'mixed_precision: "{name}"' in text


def test_the_result_document_records_the_resolved_recipe():
    r = runner.invoke(
        app,
        [
            *("solve", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "128"),
            *("--precision", "fp8", "--framework", "torchtitan", "--format", "json", "--top", "1"),
        ],
    )
    assert r.exit_code == 0
    doc = json.JSONDecoder().raw_decode(r.stdout)[0]
    assert doc["problem"]["workload"]["fp8_recipe"] == "tensorwise"  # torchtitan: recipe_name None


@pytest.mark.parametrize(
    "named, engine",
    [
        ("delayed-scaling", "tensorwise"),
        ("current-scaling", "tensorwise"),
        ("mxfp8", "mxfp8"),
        ("blockwise", "blockwise"),
        (None, None),
    ],
)
def test_a_record_names_its_recipe(named, engine):
    """Rule 5: delayed and current scaling are per-tensor; a record naming none takes the profile's default."""
    assert fp8_recipe({"workload": {"precision": "fp8", "fp8_recipe": named}}) == engine
    assert fp8_recipe({"workload": {"precision": "bf16", "fp8_recipe": named}}) is None


def test_the_scaled_rate_is_the_bf16_fraction_times_the_ratio():
    """gemm.fp8_matmul_efficiency = matmul_efficiency x ratio: 0.6742 x 0.7037 on the h100 (blockwise)."""
    assert gemm.fp8_matmul_efficiency(load_accelerator("h100"), "blockwise") == pytest.approx(
        0.6742 * 0.7037
    )


@pytest.mark.parametrize("recipe", ["rowwise", "blockwise"])
def test_cpsat_and_the_enumerator_rank_the_same_fp8_layouts(recipe):
    """The recipe's rate reaches both searches through the same cost tables: the same top 3, metrics included."""
    base = [
        *("solve", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "64"),
        *("--precision", "fp8", "--fp8-recipe", recipe, "--format", "json", "--top", "3"),
    ]
    docs = [
        json.JSONDecoder().raw_decode(runner.invoke(app, base + ["--method", m]).stdout)[0]
        for m in ("cpsat", "enumerate")
    ]
    keys = ("degrees", "zero_stage", "num_microbatches", "recompute", "axes", "time_s")
    cps, enum = ([{k: x[k] for k in keys} for x in d["layouts"]] for d in docs)
    assert len(cps) == 3 and cps == enum
