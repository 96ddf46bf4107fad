"""GEMM seconds from the shard's shape (docs/cost_model.md "GEMMs from their shapes").

A GEMM of m rows, n columns and depth k (C[m, n] = A[m, k] B[k, n]) on one device is cut into
output tiles of ``gemm_tile_rows`` x ``gemm_tile_cols`` (or a smaller tile the library picks where it
fills the units better: ``shape_fraction``) that the part's ``gemm_units`` (GPU: SMs; TPU: MXUs) work
through in waves. The useful share of the issued tile work is the tile and wave
quantization of NVIDIA's "Matrix Multiplication Background" guide (Deep Learning Performance
documentation: tiles padded at the matrix edge, a partly filled last wave). Each tile also pays a
fixed cost along its depth (filling the operand pipeline, writing C), as many more steps of depth as
``gemm_half_efficiency_depth``: k / (k + k_half). A roofline floor: a GEMM never runs faster than
HBM moves A, B and C. Arguments are arrays (numpy broadcasting); seconds out.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from layoutsearch.core.arrays import FloatArray, IntArray
from layoutsearch.core.specs import Accelerator

OUTPUT_BYTES = 2  # C is written in bf16 (fp8 GEMMs too: Transformer Engine's outputs are bf16)


def fp8_matmul_efficiency(acc: Accelerator, recipe: str) -> float:
    """The fraction of the fp8 peak fp8 GEMMs of scaling ``recipe`` reach: the part's bf16 fraction
    ``matmul_efficiency`` x the recipe's ratio (``Accelerator.fp8_recipe_ratio``; docs/calibration.md
    "fp8_recipe_ratio"). The scale factors' own traffic (a scale per tensor, row, 128 values or 32
    values) is not counted: at most 1/32 of the fp8 operand bytes."""
    return acc.matmul_efficiency * dict(acc.fp8_recipe_ratio)[recipe]


def fp4_matmul_efficiency(acc: Accelerator, recipe: str) -> float:
    """The fraction of the fp4 peak fp4 GEMMs of scaling ``recipe`` reach: ``matmul_efficiency`` x the recipe's
    ratio (``Accelerator.fp4_recipe_ratio``; docs/calibration.md "fp4_recipe_ratio"). Their block scales travel
    with the operands (``costs.memory.fp4_bytes``)."""
    return acc.matmul_efficiency * dict(acc.fp4_recipe_ratio)[recipe]


def quantized_fraction(
    m: FloatArray, n: FloatArray, units: int, tile_rows: int, tile_cols: int, groups: IntArray = 1
) -> FloatArray:
    """Useful over issued tile work of ``groups`` GEMMs of m x n on ``units`` units (one grouped
    launch): groups m n / (waves x units x tile_rows x tile_cols), waves = ceil(tiles / units),
    tiles = groups x ceil(m / tile_rows) x ceil(n / tile_cols). 1 when the tiles fit exactly."""
    tiles = groups * np.ceil(m / tile_rows) * np.ceil(n / tile_cols)
    waves = np.maximum(np.ceil(tiles / units), 1.0)
    return groups * np.asarray(m, dtype=np.float64) * n / (waves * units * tile_rows * tile_cols)


def shape_fraction(
    m: FloatArray, n: FloatArray, acc: Accelerator, groups: IntArray = 1
) -> FloatArray:
    """``quantized_fraction`` of the tile the library picks: the part's main tile or, where one fills
    the units better, one of its ``gemm_smaller_tiles`` at ``gemm_smaller_tile_efficiency`` of its rate
    (cuBLAS and CUTLASS choose among tile shapes by the problem's size; measured on Hopper,
    results/device_calibration.md)."""
    units = acc.gemm_units
    best = quantized_fraction(m, n, units, acc.gemm_tile_rows, acc.gemm_tile_cols, groups)
    for rows, cols in acc.gemm_smaller_tiles:
        smaller = quantized_fraction(m, n, units, rows, cols, groups)
        best = np.maximum(best, acc.gemm_smaller_tile_efficiency * smaller)
    return best


def depth_fraction(k: FloatArray, half_depth: float) -> FloatArray:
    """k / (k + k_half): the share of a tile's time spent on its k-long reduction."""
    k = np.asarray(k, dtype=np.float64)
    return k / (k + half_depth)


def gemm_seconds(
    m: FloatArray,
    n: FloatArray,
    k: FloatArray,
    acc: Accelerator,
    rate_flops_per_s: float,
    operand_bytes: float,
    groups: IntArray = 1,
) -> FloatArray:
    """Seconds of ``groups`` (m, n, k) GEMMs at ``rate_flops_per_s`` (the part's peak x its fitted
    fraction): 2 m n k groups FLOPs over the rate x ``quantized_fraction`` x ``depth_fraction``, at
    least the HBM time of A and B (``operand_bytes`` each element) and C (bf16)."""
    flops = 2.0 * groups * np.asarray(m, dtype=np.float64) * n * k
    shape = shape_fraction(m, n, acc, groups) * depth_fraction(k, acc.gemm_half_efficiency_depth)
    moved = groups * ((m * k + k * n) * operand_bytes + m * n * OUTPUT_BYTES)
    compute = np.divide(flops, rate_flops_per_s * shape, out=np.zeros_like(flops), where=flops > 0)
    return np.maximum(compute, moved / acc.hbm_bytes_per_s)  # an empty GEMM (n = 0): 0 s


def training_seconds(
    m: FloatArray,
    shapes: Iterable[tuple[FloatArray, FloatArray, FloatArray]],
    acc: Accelerator,
    rate_flops_per_s: float,
    operand_bytes: float,
    groups: IntArray = 1,
) -> FloatArray:
    """Seconds of the forward and both backward GEMMs of weights ``shapes``, (count, n, k) each, at m
    rows: the forward (m, n, k), the input gradient (m, k, n) and the weight gradient (k, n, m), the
    weight's count times each (a mean layer's share of a weight). One ``gemm_seconds`` call over
    [pass, weight, *the keys' shape]."""
    weights = tuple(shapes)
    m = np.asarray(m, dtype=np.float64)
    shape = np.broadcast_shapes(m.shape, *(np.shape(x) for weight in weights for x in weight))
    count, n, k = (
        np.stack([np.broadcast_to(np.asarray(w[i], dtype=np.float64), shape) for w in weights])
        for i in range(3)
    )  # each [weight, *shape]
    rows = np.broadcast_to(m, n.shape)
    seconds = np.asarray(
        gemm_seconds(
            np.stack((rows, rows, k)),
            np.stack((n, k, n)),
            np.stack((k, n, rows)),
            acc,
            rate_flops_per_s,
            operand_bytes,
            groups,
        )
    )  # [pass, weight, *shape]
    per_weight = seconds[0] + seconds[1] + seconds[2]
    total: FloatArray = 0.0
    for c, t in zip(count, per_weight):  # weight by weight, in the order of ``shapes``
        total = total + c * t
    return total


@lru_cache(maxsize=64)
def memo(*context) -> dict:
    """A dict for ``core.arrays.per_key(..., memo=)``, one per ``context`` (what a GEMM term reads
    besides its keys: the model, the part, the rate, the operand bytes and the term's name): a
    sweep's points cost each (keys) GEMM time once per worker."""
    return {}
