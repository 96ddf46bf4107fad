"""The fp8 GEMM rate by scaling recipe on Hopper, from the H200 and H100 device calibrations.

For every Llama layer GEMM (set ``layer`` of ``gemm_fp8``: Llama 3 8B and 70B, tp 1 and 8, the
forward and input-gradient GEMMs at m = 8192 rows and the weight-gradient GEMMs) measured in fp8
and in bf16 (``gemm_bf16``, the same model, tp, weight, pass and m, n, k), the ratio

    (fp8 TFLOP/s / the fp8 peak) / (bf16 TFLOP/s / the bf16 peak)

is the fraction of the fp8 peak a recipe reaches over the fraction of the bf16 peak bf16 reaches on
that shape; a recipe's ratio is the median over its shapes. The peaks are hardware/h200.yaml's and
hardware/h100.yaml's (1,979 and 989 TFLOP/s dense). Each Hopper part takes the measurement of its own
board (``PART_MEASUREMENTS``): the h800 the H100's (the same GH100 with the same 80 GB of HBM3). The hardware files' ``fp8_recipe_ratio`` is ``training_ratios``: per
tensor at 0.8, the others by their measured ratio to per tensor (docs/calibration.md "fp8_recipe_ratio");
tests/test_fp8_recipe.py recomputes both from the JSON.

    python scripts/fp8_recipe_ratios.py [results/device/h100_2026-12-05.json]   # default: the H200's
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENT = ROOT / "results" / "device" / "h200_2026-12-04.json"
H100_MEASUREMENT = ROOT / "results" / "device" / "h100_2026-12-05.json"
PART_MEASUREMENTS = {"h200": MEASUREMENT, "h100": H100_MEASUREMENT, "h800": H100_MEASUREMENT}
PEAK_BF16_TFLOPS, PEAK_FP8_TFLOPS = 989.0, 1979.0  # hardware/h200.yaml and h100.yaml
SHAPE_KEYS = ("model", "tp", "weight", "pass", "m", "n", "k")
# the measured recipe -> the engine's fp8_recipe ("tensorwise_fast_accum" and "blockwise_recipes" are
# the same scalings through another call: fast accumulation, F.scaled_mm; reported, not pinned)
ENGINE_RECIPES = {"tensorwise": "tensorwise", "rowwise": "rowwise", "blockwise": "blockwise"}


def recipe_ratios(path: Path = MEASUREMENT) -> dict[str, dict[str, float]]:
    """Per measured recipe: the median, lowest and highest ratio over its layer shapes and their count."""
    data = json.loads(Path(path).read_text())
    bf16 = {
        tuple(r[k] for k in SHAPE_KEYS): r["tflops"]
        for r in data["gemm_bf16"]
        if r["set"] == "layer"
    }
    ratios: dict[str, list[float]] = {}
    for r in data["gemm_fp8"]:
        key = tuple(r.get(k) for k in SHAPE_KEYS)
        if r["set"] != "layer" or "tflops" not in r or key not in bf16:
            continue
        ratio = (r["tflops"] / PEAK_FP8_TFLOPS) / (bf16[key] / PEAK_BF16_TFLOPS)
        ratios.setdefault(r["recipe"], []).append(ratio)
    return {
        recipe: {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "shapes": len(values),
        }
        for recipe, values in ratios.items()
    }


PER_TENSOR_IN_TRAINING = (
    0.8  # the per-tensor fp8 GEMM fraction over bf16's that the fp8 records support
)


def training_ratios(path: Path = MEASUREMENT) -> dict[str, float]:
    """The hardware files' ``fp8_recipe_ratio``: per tensor at 0.8 of the bf16 fraction (what the fp8
    training records support: the kernel alone reaches the measured median, the rest of an fp8 layer's
    work, its casts, amax reductions and transposed copies, is not modelled), each other recipe by its
    measured kernel ratio to per tensor, 4 places."""
    medians = {recipe: row["median"] for recipe, row in recipe_ratios(path).items()}
    return {
        ENGINE_RECIPES[recipe]: round(PER_TENSOR_IN_TRAINING * median / medians["tensorwise"], 4)
        for recipe, median in medians.items()
        if recipe in ENGINE_RECIPES
    }


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else MEASUREMENT
    print("| recipe | engine fp8_recipe | layer shapes | median ratio | lowest | highest |")
    print("|---|---|---:|---:|---:|---:|")
    for recipe, row in recipe_ratios(path).items():
        print(
            f"| {recipe} | {ENGINE_RECIPES.get(recipe, '-')} | {row['shapes']} | "
            f"{row['median']:.4f} | {row['min']:.4f} | {row['max']:.4f} |"
        )
    print()
    print("fp8_recipe_ratio (hardware files):", training_ratios(path))


if __name__ == "__main__":
    main()
