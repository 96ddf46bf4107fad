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

It also fits the ``depth`` sweeps (m = n = 8,192, k 64 to 16,384) in the engine's GEMM model per recipe
(``depth_fits``: how an fp8 tile's fixed time compares with a bf16 tile's) and measures how well a depth scaled by
the fp8 rate follows the layer shapes' ratios (``shape_ratio_errors``); docs/calibration.md#fp8_recipe_ratio.

    python scripts/fp8_recipe_ratios.py [results/device/h100_2026-12-05.json]   # default: the H200's
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.costs import gemm

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


def _rows(data: dict, section: str, set_name: str, recipe: str | None = None) -> list[dict]:
    return [
        r
        for r in data[section]
        if r["set"] == set_name and r.get("recipe") == recipe and "seconds" in r
    ]


def _model_seconds(rows: list[dict], part, efficiency: float, k_half: float, fp8: bool):
    """``costs.gemm.gemm_seconds`` of ``rows`` on ``part`` with its half-efficiency depth set to ``k_half``:
    at ``efficiency`` of the fp8 peak (1-byte operands) or of the bf16 peak."""
    acc = replace(part, gemm_half_efficiency_depth=k_half)
    m, n, k = (np.array([r[key] for r in rows], dtype=float) for key in "mnk")
    peak = part.peak_fp8_flops_per_s if fp8 else part.peak_flops_per_s
    return gemm.gemm_seconds(m, n, k, acc, peak * efficiency, 1 if fp8 else 2)


def fit_depth(rows: list[dict], part, fp8: bool) -> tuple[float, float]:
    """(efficiency, k_half) of the engine's GEMM model that minimise the squared log error over ``rows`` (the
    depth sweep: m = n = 8192, k 64 to 16,384): the efficiency in closed form for each k_half of a 2-step grid."""
    measured = np.array([r["seconds"] for r in rows])
    best = (np.inf, 0.0, 0.0)
    for k_half in np.arange(0.0, 1201.0, 2.0):
        eff = float(np.exp(np.log(_model_seconds(rows, part, 1.0, k_half, fp8) / measured).mean()))
        err = float((np.log(_model_seconds(rows, part, eff, k_half, fp8) / measured) ** 2).sum())
        best = min(best, (err, eff, float(k_half)))
    return best[1], best[2]


def depth_fits(path: Path = MEASUREMENT, part_name: str = "h200") -> dict[str, dict[str, float]]:
    """Per recipe (and bf16): the depth sweep's fitted fraction and half-efficiency depth, and for fp8 the
    depth ratio to bf16's, the rate ratio (fp8 TFLOP/s over bf16's at full depth) and their quotient, the
    ratio of an fp8 tile's fixed time to a bf16 tile's (1: the fixed work costs the same time, and the depth
    in steps scales with the rate)."""
    data = json.loads(Path(path).read_text())
    part = load_accelerator(part_name)
    eff_bf16, k_bf16 = fit_depth(_rows(data, "gemm_bf16", "depth"), part, False)
    out = {"bf16": {"efficiency": eff_bf16, "k_half": k_bf16}}
    for recipe in ("tensorwise", "tensorwise_fast_accum", "rowwise", "blockwise"):
        eff, k_half = fit_depth(_rows(data, "gemm_fp8", "depth", recipe), part, True)
        rate = eff * part.peak_fp8_flops_per_s / (eff_bf16 * part.peak_flops_per_s)
        out[recipe] = {
            "efficiency": eff,
            "k_half": k_half,
            "depth_ratio": k_half / k_bf16,
            "rate_ratio": rate,
            "fixed_time_ratio": k_half / k_bf16 / rate,
        }
    return out


def shape_ratio_errors(
    path: Path = MEASUREMENT, part_name: str = "h200", recipe: str = "tensorwise"
) -> dict[str, float]:
    """How well the engine's GEMM model follows the measured fp8-over-bf16 ratio from one layer shape to the
    next (the 80 of ``recipe_ratios``), with the depth unscaled (``flat``) and scaled by the fp8 rate over
    bf16's (``scaled``, at the catalogue's per-tensor 2 x 0.8): each with the one kernel ratio that centres
    it (the median), the p90 of |log(predicted / measured)| over the shapes. The engine costs them unscaled
    (docs/calibration.md#fp8_recipe_ratio: tried scaled and not kept)."""
    data = json.loads(Path(path).read_text())
    part = load_accelerator(part_name)
    bf16 = {tuple(r[k] for k in SHAPE_KEYS): r for r in data["gemm_bf16"] if r["set"] == "layer"}
    pairs = [
        (r, bf16[key])
        for r in data["gemm_fp8"]
        if r["set"] == "layer"
        and r.get("recipe") == recipe
        and "tflops" in r
        and (key := tuple(r.get(k) for k in SHAPE_KEYS)) in bf16
    ]
    measured = np.array(
        [(f["tflops"] / PEAK_FP8_TFLOPS) / (b["tflops"] / PEAK_BF16_TFLOPS) for f, b in pairs]
    )
    m, n, k = (np.array([f[key] for f, _ in pairs], dtype=float) for key in "mnk")
    bf16_s = gemm.gemm_seconds(m, n, k, part, part.peak_flops_per_s, 2)
    out = {}
    for name, scale in (("flat", 1.0), ("scaled", 2 * PER_TENSOR_IN_TRAINING)):
        deeper = replace(part, gemm_half_efficiency_depth=part.gemm_half_efficiency_depth * scale)
        fp8_s = gemm.gemm_seconds(m, n, k, deeper, 2 * part.peak_flops_per_s, 1)
        shape = bf16_s / fp8_s / 2  # the model's ratio on each shape at a kernel ratio of 1
        log_err = np.log(shape / measured)
        log_err -= np.median(log_err)
        out[name] = float(np.percentile(np.abs(log_err), 90))
    return out


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else MEASUREMENT
    part_name = "h100" if path.resolve() == H100_MEASUREMENT.resolve() else "h200"
    print("| recipe | engine fp8_recipe | layer shapes | median ratio | lowest | highest |")
    print("|---|---|---:|---:|---:|---:|")
    for recipe, row in recipe_ratios(path).items():
        print(
            f"| {recipe} | {ENGINE_RECIPES.get(recipe, '-')} | {row['shapes']} | "
            f"{row['median']:.4f} | {row['min']:.4f} | {row['max']:.4f} |"
        )
    print()
    print("fp8_recipe_ratio (hardware files):", training_ratios(path))
    print()
    print(
        "| depth sweep | fraction | k_half | k_half / bf16's | rate / bf16's | fixed time / bf16's |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for recipe, row in depth_fits(path, part_name).items():
        cells = [
            f"{row.get(c, 1.0):.2f}" for c in ("depth_ratio", "rate_ratio", "fixed_time_ratio")
        ]
        print(
            f"| {recipe} | {row['efficiency']:.3f} | {row['k_half']:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    errors = shape_ratio_errors(path, part_name)
    print()
    print(
        f"per-shape tensorwise ratio, p90 |log error|: depth unscaled {errors['flat']:.3f}, "
        f"scaled by the rate {errors['scaled']:.3f}"
    )


if __name__ == "__main__":
    main()
