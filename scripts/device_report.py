"""Write results/device_calibration.md: the cost model against what one GPU measured.

Regenerate: python scripts/device_report.py [--out results/device_calibration.md]

Reads the measurements that ``scripts/device_calibration.py`` wrote on an H200 and an H100 (results/device/)
and sets beside each the cost model's own figure for the same work: GEMM seconds from ``costs.gemm``,
the fused attention curve of ``costs.terms.attention_call_factor``, the bytes per token and layer a
layer keeps for backward under each recompute policy (``costs.memory``), and the catalogue's power
figures. Nothing here is fitted into the engine: where a measurement gives a number the catalogue
uses, the table says which, and the hardware file cites this report.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

import numpy as np
from _common import REPO, RESULTS, table_head
from fp8_recipe_ratios import recipe_ratios, training_ratios

from layoutsearch.core.catalogue import load_accelerator, load_model
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs import gemm, memory, params
from layoutsearch.costs.estimate import estimate

DATA = RESULTS / "device" / "h200_2026-12-04.json"
DATA2 = RESULTS / "device" / "h200_2026-12-04_part2.json"
H100 = RESULTS / "device" / "h100_2026-12-05.json"  # every section in one file, quantise added
POLICIES = ("none", "selective", "op", "full")


# The element-wise section of the runs of 2026-12-04 and -05 counted 4 t f bf16 elements for eager silu(g) * u
# (f = 14,336); its kernels move 5 (silu's output is written, then read by the product): a row counted so is
# recounted (the script counts 5 since).
ELEMENTWISE_RECOUNT = {
    "swiglu": (4 * 14336 * 2, 5 / 4)
}  # op: (bytes a token as counted then, factor)


def elementwise_rate(row: dict) -> float:
    """An element-wise kernel's bytes per second, a row of the old count recounted (``ELEMENTWISE_RECOUNT``)."""
    counted, factor = ELEMENTWISE_RECOUNT.get(row["op"], (None, 1.0))
    old = counted is not None and row["bytes"] == counted * row["tokens"]
    return row["bytes_per_s"] * (factor if old else 1.0)


def elementwise_fractions(runs: list[tuple[list[dict], float]]) -> dict[str, float]:
    """Per op, the mean over boards of its rate over the board's datasheet HBM bandwidth: ``runs`` is
    (elementwise rows, datasheet bytes/s) per board. The catalogue's ``norm_hbm_fraction`` is rms_norm's and its
    ``elementwise_hbm_fraction`` swiglu's (docs/calibration.md#element-wise-kernels)."""
    ops = {r["op"] for rows, _ in runs for r in rows}
    return {
        op: sum(elementwise_rate(r) / bw for rows, bw in runs for r in rows if r["op"] == op)
        / len(runs)
        for op in sorted(ops)
    }


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def median(xs) -> float:
    return float(statistics.median(xs))


def p90(xs) -> float:
    return float(np.percentile(np.abs(xs), 90))


SMALLER_TILES = ((128, 128), (64, 128))
BEFORE_MATMUL = 0.6569  # the h100 class's fraction before this measurement (docs/calibration.md)  # cuBLAS / CUTLASS Hopper tiles besides 128 x 256


def gemm_model(
    rows: list[dict], acc, efficiency: float, k_half: float, tile_eff: float | None = None
) -> np.ndarray:
    """``costs.gemm.gemm_seconds`` of each measured shape at ``efficiency`` and ``k_half``; the main
    tile alone (``tile_eff`` None) or with ``SMALLER_TILES`` at ``tile_eff`` of its rate."""
    tiles = {"gemm_smaller_tiles": (), "gemm_smaller_tile_efficiency": 1.0}
    if tile_eff is not None:
        tiles = {"gemm_smaller_tiles": SMALLER_TILES, "gemm_smaller_tile_efficiency": tile_eff}
    part = acc.__class__(**{**_fields(acc), "gemm_half_efficiency_depth": k_half, **tiles})
    m, n, k = (np.array([r[key] for r in rows], dtype=float) for key in "mnk")
    return gemm.gemm_seconds(m, n, k, part, acc.peak_flops_per_s * efficiency, 2)


def _fields(acc) -> dict:
    return {name: getattr(acc, name) for name in acc.__dataclass_fields__}


def fit_gemm(rows: list[dict], acc) -> tuple[float, float]:
    """The (efficiency, k_half) that minimise the squared log error over ``rows``: efficiency in
    closed form (the geometric mean ratio) for each k_half of a 1-step grid."""
    measured = np.array([r["seconds"] for r in rows])
    best = (np.inf, 0.0, 0.0)
    for k_half in np.arange(0.0, 401.0, 1.0):
        ratio = np.log(gemm_model(rows, acc, 1.0, k_half) / measured)
        eff = float(np.exp(ratio.mean()))
        err = float(((np.log(gemm_model(rows, acc, eff, k_half) / measured)) ** 2).sum())
        best = min(best, (err, eff, float(k_half)))
    return best[1], best[2]


def fit_tiles(rows: list[dict], acc) -> tuple[float, float]:
    """(efficiency, smaller-tile efficiency) at the catalogue's k_half over ``rows``: a 0.01 grid of
    the smaller tiles' share, the efficiency in closed form for each."""
    measured = np.array([r["seconds"] for r in rows])
    k_half = acc.gemm_half_efficiency_depth
    best = (np.inf, 0.0, 0.0)
    for tile_eff in np.arange(0.50, 1.001, 0.01):
        eff = float(np.exp(np.log(gemm_model(rows, acc, 1.0, k_half, tile_eff) / measured).mean()))
        err = float((np.log(gemm_model(rows, acc, eff, k_half, tile_eff) / measured) ** 2).sum())
        best = min(best, (err, eff, round(float(tile_eff), 2)))
    return best[1], best[2]


def gemm_section(data: dict, acc) -> list[str]:
    rows = [r for r in data["gemm_bf16"] if "seconds" in r]
    eff_all, k_all = fit_gemm([r for r in rows if r["set"] in ("depth", "layer")], acc)
    eff_depth, k_depth = fit_gemm([r for r in rows if r["set"] == "depth"], acc)
    eff_tiles, tile_eff = fit_tiles(rows, acc)
    out = [
        "## bf16 GEMMs (`costs.gemm`)",
        "",
        f"{len(rows)} GEMMs, `torch.mm` on random bf16 operands. The model's figure is `gemm_seconds` on the",
        "h200 part: tile and wave quantization on 132 SMs (128 x 256 tiles), the depth curve",
        "k / (k + k_half) and the HBM floor, at three settings: the catalogue's before this measurement",
        "(the fraction fitted on training records, k_half 128, one tile), the kernel-only fit of this data,",
        "and the kernel-only fit with the library's smaller tiles (below).",
        "",
        *table_head(
            "set",
            "GEMMs",
            "measured TFLOP/s (median)",
            f"catalogue before ({BEFORE_MATMUL}, k_half 128, one tile): median / p90 |error|",
            f"fit on depth+layer ({eff_all:.3f}, k_half {k_all:.0f})",
            f"smaller tiles at {tile_eff:.2f} ({eff_tiles:.3f}, k_half 128; fit on all)",
        ),
    ]
    acc_eff = acc.matmul_efficiency
    for name in ("depth", "width", "rows", "layer"):
        sub = [r for r in rows if r["set"] == name]
        measured = np.array([r["seconds"] for r in sub])
        cat = gemm_model(sub, acc, BEFORE_MATMUL, 128.0) / measured - 1
        fit = gemm_model(sub, acc, eff_all, k_all) / measured - 1
        tiled = (
            gemm_model(sub, acc, eff_tiles, acc.gemm_half_efficiency_depth, tile_eff) / measured - 1
        )
        out.append(
            f"| {name} | {len(sub)} | {median([r['tflops'] for r in sub]):.0f} | "
            f"{pct(median(cat))} / {100 * p90(cat):.1f}% | {pct(median(fit))} / {100 * p90(fit):.1f}% | "
            f"{pct(median(tiled))} / {100 * p90(tiled):.1f}% |"
        )
    depth = [r for r in rows if r["set"] == "depth"]
    layer = [r for r in rows if r["set"] == "layer"]
    moved = median(
        gemm_model(layer, acc, acc_eff, k_all) / gemm_model(layer, acc, acc_eff, 128.0) - 1
    )
    out += [
        "",
        "(error: predicted seconds over measured, minus 1; negative is predicted too fast.)",
        "",
        f"- **Depth curve.** The depth sweep alone (m = n = 8192, k 64 to 16384) fits k_half = {k_depth:.0f} at "
        f"{eff_depth:.3f} of the quantized peak; depth and layer shapes together fit k_half = {k_all:.0f}. The",
        f"  measured {k_all:.0f} instead of the catalogue's 128 (an assumption until now) moves the layer GEMMs'",
        f"  predicted seconds by a median {pct(moved)}, so 128 stays, with this measurement cited. Measured",
        "  TFLOP/s by depth: " + ", ".join(f"k {r['k']}: {r['tflops']:.0f}" for r in depth) + ".",
        f"- **Fraction.** The kernels alone reach {eff_all:.3f} of the shape-quantized peak; the catalogue's",
        f"  {acc_eff} is fitted on training runs, whose GEMMs also lose time to what runs beside them",
        "  (communication kernels, the power limit under a whole step). The two are not the same number and",
        "  the catalogue keeps its fit.",
        "- **Few rows.** With m from 16 to 2048 (n = k = 8192) one 128 x 256 tile makes the model far too",
        "  slow (the `rows` line): 256 rows fill 64 of 132 SMs, where the library picks a smaller tile and",
        "  fills them all. The last column lets the model pick 128 x 128 or 64 x 128 where it fills the",
        f"  SMs better, at {tile_eff:.2f} of the main tile's rate (fitted on all {len(rows)} GEMMs): the Hopper",
        "  parts' `gemm.smaller_tiles` and `smaller_tile_efficiency` (h100, h200, h800). Training's dense",
        "  GEMMs have thousands of rows; expert GEMMs with a few hundred rows per local expert are where",
        "  it matters (the grouped GEMM table below).",
    ]
    return out


def fp8_section() -> list[str]:
    ratios, training = recipe_ratios(DATA), training_ratios(DATA)
    out = [
        "## fp8 GEMMs by scaling recipe",
        "",
        "`torch._scaled_mm` (e4m3 operands, bf16 output) on the Llama 3 8B and 70B layer shapes at tp 1",
        "and 8 (m 8192, and the weight gradients at 4096 to 16384 rows). The ratio is the fp8 fraction of",
        "the fp8 peak (1979 TFLOP/s) over the bf16 fraction of the bf16 peak (989) on the same shape",
        "(`scripts/fp8_recipe_ratios.py`); the hardware files' `fp8_recipe_ratio` holds per tensor at 0.8",
        "(the fp8 training records) and each other recipe by its measured ratio to per tensor",
        "(docs/calibration.md#fp8_recipe_ratio).",
        "",
        *table_head("recipe", "shapes", "ratio to bf16 (median)", "range", "fp8_recipe_ratio"),
    ]
    for recipe, row in ratios.items():
        out.append(
            f"| {recipe} | {row['shapes']} | {row['median']:.3f} | {row['min']:.2f}-{row['max']:.2f} | "
            f"{training.get(recipe, '-')} |"
        )
    out += [
        "",
        "blockwise: 1 x 128 activation tiles and 128 x 128 weight blocks (DeepSeek-V3's recipe), through",
        "`torch._scaled_mm` and through `F.scaled_mm` with the recipes named (`blockwise_recipes`; it",
        "refused the shapes whose k / 128 is not a multiple of 4).",
    ]
    return out


def fit_attention(rows: list[dict], field: str) -> tuple[float, float]:
    """rate = R c / (c + h), c = S / 2 keys per query (causal): (R, h) by least squares on log rate."""
    s = np.array([r["seq"] / 2 for r in rows], dtype=float)
    rate = np.array([r[field] for r in rows])
    best = (np.inf, 0.0, 0.0)
    for h in np.arange(0.0, 1001.0, 2.0):
        shape = s / (s + h)
        big_r = float(np.exp(np.mean(np.log(rate / shape))))
        err = float(((np.log(big_r * shape / rate)) ** 2).sum())
        best = min(best, (err, big_r, float(h)))
    return best[1], best[2]


def attention_rows(data: dict, backend: str) -> list[dict]:
    """The measured causal calls of ``backend`` at head dim 128."""
    return [
        r
        for r in data["attention"]
        if r["backend"] == backend and r["causal"] and r["head_dim_qk"] == 128 and "forward_s" in r
    ]


def attention_section(data: dict, acc) -> list[str]:
    peak = acc.peak_flops_per_s / 1e12
    out = [
        "## Fused attention by sequence length",
        "",
        "PyTorch SDPA, causal, head dim 128, 32 heads, 32,768 tokens a call (batch 32768 / S; one",
        "sequence at 65,536), S from 512 to 65,536. FLOPs: 2 x 2 x S^2 x d / 2 a head (causal); the",
        "backward counts 2.5 forwards. The fit is the model's curve, rate = R c / (c + h) with c = S / 2",
        f"keys per query (`attention_call_factor`), R as a fraction of the {peak:.0f} TFLOP/s peak.",
        "",
        *table_head(
            "backend",
            "pass",
            "R (fraction of peak)",
            "h (keys)",
            "TFLOP/s at 512 / 4k / 64k",
        ),
    ]
    fits = {}
    for backend in ("flash", "cudnn", "efficient"):
        rows = attention_rows(data, backend)
        for field, name in (
            ("forward_tflops", "forward"),
            ("forward_backward_tflops", "forward + backward"),
        ):
            big_r, h = fit_attention(rows, field)
            fits[backend, field] = (big_r / peak, h)
            at = {r["seq"]: r[field] for r in rows}
            out.append(
                f"| {backend} | {name} | {big_r / peak:.3f} | {h:.0f} | "
                f"{at[512]:.0f} / {at[4096]:.0f} / {at[65536]:.0f} |"
            )
    flash_r, flash_h = fits["flash", "forward_backward_tflops"]
    cudnn_r, cudnn_h = fits["cudnn", "forward_backward_tflops"]
    h_cat = 200.0  # the catalogue's before this measurement (FlashAttention-3's forward curves)

    def ratio(seq: int) -> float:  # the catalogue's attention time over the measured curve's
        c = seq / 2
        return (c + h_cat) / (c + cudnn_h)

    short, mid, long = ratio(512), ratio(4096), ratio(8192)
    out += [
        "",
        f"Catalogue (h200, the h100-class values): `vendor_attention_efficiency` {acc.vendor_attention_efficiency}",
        f"(cuDNN / Transformer Engine), `attention_efficiency` {acc.attention_efficiency} (the",
        "FlashAttention-2 class: this kernel's fraction times the in-training share fitted on the A100",
        "FlashAttention-2 rows, docs/calibration.md), `attention_half_efficiency_keys`",
        f"{acc.attention_half_efficiency_keys:.0f} on every GPU since this measurement (200 before, from the",
        "FlashAttention-3 paper's forward curves).",
        f"- The vendor fraction agrees with cuDNN's measured forward + backward fraction ({cudnn_r:.3f}).",
        f"- Training runs forward and backward, whose h ({flash_h:.0f} FlashAttention-2, {cudnn_h:.0f} cuDNN) is about",
        "  twice the forward's. With the 200 used before, the attention of a causal 512-token sequence",
        f"  was {pct(1 / short - 1)} too fast against the measured forward + backward curve, at 4,096 tokens"
        f" {pct(1 / mid - 1)}, at 8,192 {pct(1 / long - 1)}.",
        f"- The kernel's own forward + backward fraction is {flash_r:.3f}. The FlashAttention-2 class's catalogue",
        f"  fraction ({acc.attention_efficiency}) is that times the share the A100 FlashAttention-2 training rows",
        "  (fms-fsdp, FSDP over 128 GPUs) reach of their kernel's benchmark; llm-foundry's tables ran MPT's Triton",
        f"  kernel, costed apart (`triton_attention_efficiency` {acc.triton_attention_efficiency}).",
    ]
    return out


def memory_section(data: dict) -> list[str]:
    steps = {r["policy"]: r for r in data["llama_step"]}
    cfg = steps["none"]
    model = load_model("llama3-8b")  # the measured layer's shapes: d 4096, 32 / 8 heads, ffn 14336
    widths = memory.saved_tensor_widths(model, 1, False, cfg["seq"], True, 2, "none")
    layers = cfg["layers"]
    # the trunk's own output (one layer input more than the layers keep), spread over the layers
    trunk_out = 2 * cfg["d"] / layers
    out = [
        "## Activations kept per recompute policy",
        "",
        f"A Llama 3 8B-shaped model of {layers} layers (d {cfg['d']}, {cfg['heads']} / {cfg['kv']} heads, ffn",
        f"{cfg['ffn']}, vocabulary {cfg['vocab']}) at {cfg['seq']} tokens, bf16 weights, AdamW, eager PyTorch with",
        "SDPA's fused kernel. Kept: the bytes the trunk's forward leaves allocated, per layer and token",
        f"(the trunk's output adds {trunk_out:.0f} bytes a layer, counted in the model's column). The",
        "model: `costs.memory.saved_tensor_widths` of llama3-8b at tp 1 under each policy's",
        "`POLICY_SAVES`, at 2 bytes an element.",
        "",
        *table_head(
            "policy",
            "measured kept B/token/layer",
            "model",
            "measured - model",
            "step s",
            "step vs none",
            "peak GB",
        ),
    ]
    for policy in POLICIES:
        r = steps[policy]
        kept = sum(v for name, v in widths.items() if memory.kept_by_policy(name, policy))
        model_bytes = 2 * kept + trunk_out
        meas = r["trunk_kept_bytes_per_layer_token"]
        out.append(
            f"| {policy} | {meas:,.0f} | {model_bytes:,.0f} | {meas - model_bytes:+,.0f} | "
            f"{r['step_s']:.3f} | {pct(r['step_s'] / steps['none']['step_s'] - 1)} | "
            f"{r['peak_bytes'] / 1e9:.1f} |"
        )
    d, f = cfg["d"], cfg["ffn"]
    out += [
        "",
        "What the differences are, tensor by tensor (2 bytes an element):",
        f"- none: {2 * f:,} for the eager SwiGLU's silu(g), kept beside g and u (a fused SwiGLU recomputes",
        f"  it), {2 * d:,} for the attention output's contiguous copy that the O projection reads beside the",
        "  kernel's own output (a fused layout has one), and 8 for the two norms' fp32 statistics, which",
        "  the model leaves out. These are eager PyTorch's, not the frameworks' fused layers, which the",
        "  model describes.",
        "- selective: the checkpoint frees the kernel's output in eager PyTorch only because the O",
        "  projection reads a copy, and the checkpointed SwiGLU frees silu(g); what is left is what a",
        "  fused layer keeps under Megatron's plain checkpoint of the attention core: everything but the",
        "  kernel's softmax statistics (the O projection keeps the output it reads). The model held",
        "  until this measurement that selective also freed the attention output and the MLP activation",
        f"  ({2 * (d + f):,} bytes a token and layer here); it no longer does.",
        "- op and full: exact. torchtitan's per-op policy caches every other matmul's output counted from",
        "  the layer's first, which in a layer of 7 matmuls includes the down projection's, never read",
        "  by a backward: the model counts it since this measurement.",
        "",
        f"Static memory (weights, gradients, AdamW moments in bf16, 8 bytes a parameter): "
        f"{cfg['static_bytes'] / 1e9:.2f} GB for {cfg['params'] / 1e9:.3f} B parameters.",
    ]
    return out


def step_problem(data: dict, cluster: str) -> Problem:
    """The measured step as a problem on ``cluster``: llama3-8b with the measurement's layers, batch and
    sequence, torchtitan's profile in eager PyTorch (rotary, SwiGLU and loss one kernel per op, as it ran)."""
    cfg = next(r for r in data["llama_step"] if r["policy"] == "none")
    model = replace(load_model("llama3-8b"), num_layers=cfg["layers"])
    work = Workload(
        global_batch_seqs=cfg["batch"],
        seq_len=cfg["seq"],
        framework="torchtitan",
        torch_compile=False,
    )
    return Problem.build(model, cluster, work)


def step_section(data: dict) -> list[str]:
    """The engine's estimate of the measured step (``costs.estimate`` on one H200, torchtitan's profile:
    eager PyTorch) beside the measurement, per recompute policy."""
    steps = {r["policy"]: r for r in data["llama_step"]}
    cfg = steps["none"]
    problem = step_problem(data, "h200-1")
    model = problem.model
    out = [
        "## The whole step",
        "",
        f"The measured model is llama3-8b with {cfg['layers']} layers: the engine counts "
        f"{params.param_counts(model)['total']:,} parameters, the measurement {cfg['params']:,}. Its estimate on",
        "one H200 under torchtitan's profile (eager PyTorch), against the measured step (forward,",
        "backward and AdamW; mean of 5):",
        "",
        *table_head(
            "policy",
            "measured s",
            "engine s",
            "error",
            "engine compute s",
            "of it attention",
            "recompute",
        ),
    ]
    for policy in POLICIES:
        est = estimate(problem, Layout(recompute=policy))
        t = est.time_s
        measured = steps[policy]["step_s"]
        out.append(
            f"| {policy} | {measured:.3f} | {est.step_time_s:.3f} | {pct(est.step_time_s / measured - 1)} | "
            f"{t['compute']:.3f} | {t['compute/attention']:.3f} | {t.get('compute/recompute', 0.0):.3f} |"
        )
    none = estimate(problem, Layout(recompute="none")).time_s
    kernel = next(
        r
        for r in data["attention"]
        if r["backend"] == "flash"
        and r["seq"] == cfg["seq"]
        and r["causal"]
        and r["head_dim_qk"] == 128
    )  # the same heads and head dim; its call held kernel["batch"] sequences
    kernel_s = kernel["forward_backward_s"] / kernel["batch"] * cfg["batch"] * cfg["layers"]
    out += [
        "",
        f"- The engine's step includes its fixed {1e3 * none['overhead/step']:.0f} ms a step (launch, logging, data",
        "  loading: a default for multi-node jobs, large beside a 0.27 s single-GPU step).",
        f"- Attention: the engine's {1e3 * none['compute/attention']:.0f} ms is at the FlashAttention-2 class's",
        f"  in-training fraction; the kernel measured above (forward + backward at {cfg['seq']:,} tokens)",
        f"  runs the step's {cfg['layers']} layers in {1e3 * kernel_s:.0f} ms: this one-GPU eager step reaches the",
        "  kernel's rate, the multi-GPU FSDP training rows the fraction is fitted on do not.",
    ]
    return out


def power_section(data: dict, data2: dict, acc) -> list[str]:
    p = data["power"]
    idle, busy = p["idle"], p["bf16_gemm_8192"]
    env = data["environment"]["nvidia_smi"]
    launch = data2["launch"]
    out = [
        "## Power, clocks and host overheads",
        "",
        f"- Board power limit {env['power.limit']} W (default and maximum {env['power.default_limit']} W).",
        f"- Idle before any work: {env['power.draw']} W at {env['clocks.sm']} MHz. Idle seconds after work (clocks",
        f"  still up): {idle['power_w_median']:.0f} W at {idle['sm_clock_mhz_median']:.0f} MHz. The catalogue's",
        f"  `idle_power_w` is now this measured {idle['power_w_median']:.0f} W: a device waiting inside a step",
        f"  (exposed communication, a bubble) keeps its clocks up. (It was {acc.board_power_w / 10:.0f} W,",
        "  a tenth of the rating, by assumption.)",
        f"- A sustained 8192^3 bf16 GEMM: {busy['power_w_median']:.0f} W, SM clock {busy['sm_clock_mhz_median']:.0f} MHz",
        f"  (maximum {env['clocks.max.sm']}), {busy['tflops']:.0f} TFLOP/s: at the rated power dense GEMMs already run",
        "  power-limited, below the maximum clock.",
        f"- Host time per kernel launch (this machine's CPU): {1e6 * launch['eager_s_per_kernel']:.1f} us for an",
        f"  element-wise op, {1e6 * launch['small_mm_s_per_launch']:.1f} us for a small GEMM, and",
        f"  {1e6 * launch['graph_s_per_kernel']:.2f} us a kernel replayed from a CUDA graph. The MoE overhead's",
        f"  fitted launch latency ({1e6 * acc.moe_launch_latency_s:.1f} us a launch on the h100 class) is of the",
        "  order of the small GEMM's host time.",
        f"- HBM: a device-to-device copy moves {data['hbm']['bytes_per_s'] / 1e12:.2f} TB/s (read + written),",
        f"  {data['hbm']['bytes_per_s'] / acc.hbm_bytes_per_s:.2f} of the datasheet's "
        f"{acc.hbm_bytes_per_s / 1e12:.1f} TB/s. Element-wise kernels at 8192 tokens: "
        + ", ".join(
            f"{r['op']} {elementwise_rate(r) / 1e12:.1f} TB/s" for r in data2["elementwise"]
        )
        + " (the residual add's operands partly in the 60 MB L2; swiglu recounted, `ELEMENTWISE_RECOUNT`).",
    ]
    return out


def grouped_section(data2: dict, acc, eff: float) -> list[str]:
    out = [
        "## Grouped expert GEMMs (DeepSeek-V3's expert: 7168 x 2048)",
        "",
        "`torch._grouped_mm` (one launch for all local experts, as torchtitan runs them) against one",
        "`torch.mm` per expert, TFLOP/s:",
        "",
        *table_head("weight", "local experts", "rows per expert 128", "512", "2048"),
    ]
    for r0 in data2["grouped_gemm"]:
        if r0["rows_per_expert"] != 128 or r0["experts"] not in (1, 8, 64):
            continue
        cells = []
        for rows in (128, 512, 2048):
            r = next(
                x
                for x in data2["grouped_gemm"]
                if x["weight"] == r0["weight"]
                and x["experts"] == r0["experts"]
                and x["rows_per_expert"] == rows
            )
            cells.append(f"{r['grouped_tflops']:.0f} (loop {r['loop_tflops']:.0f})")
        out.append(f"| {r0['weight']} | {r0['experts']} | " + " | ".join(cells) + " |")
    out += [
        "",
        f"The model's grouped GEMM (`gemm_seconds` with groups = local experts, at the kernel-only {eff:.3f}",
        "and the smaller tiles) against the grouped launch, median error (+ = predicted slower) by rows",
        "per expert, over 1 to 64 local experts and both weights:",
        "",
        *table_head("rows per expert", "median", "largest |error|"),
    ]
    for rows in sorted({r["rows_per_expert"] for r in data2["grouped_gemm"]}):
        sub = [r for r in data2["grouped_gemm"] if r["rows_per_expert"] == rows and r["grouped_s"]]
        errs = [
            float(
                gemm.gemm_seconds(
                    rows, r["n"], r["k"], acc, acc.peak_flops_per_s * eff, 2, groups=r["experts"]
                )
            )
            / r["grouped_s"]
            - 1
            for r in sub
        ]
        out.append(f"| {rows} | {pct(median(errs))} | {100 * max(abs(e) for e in errs):.0f}% |")
    out += [
        "",
        "Below about 256 rows per expert the grouped kernel loses more than its tiles' fill explains: the",
        "model is too fast there (fine-grained experts at small microbatches).",
    ]
    rep = data2["gemm_repeat"]
    first = {
        (r["set"], r["n"], r["k"]): r["tflops"] for r in json.loads(DATA.read_text())["gemm_bf16"]
    }
    diffs = [r["tflops"] / first[(r["set"], r["n"], r["k"])] - 1 for r in rep]
    out += [
        "",
        f"Run-to-run: the depth and width sweeps repeated minutes later differ by a median {pct(median(diffs))}",
        f"(90% of shapes within {100 * p90(diffs):.1f}%).",
    ]
    return out


def _engine_steps(data: dict, cluster: str) -> dict[str, float]:
    """The engine's step seconds per recompute policy for the measured 8-layer step on ``cluster``."""
    problem = step_problem(data, cluster)
    return {p: estimate(problem, Layout(recompute=p)).step_time_s for p in POLICIES}


def _attention_fits(data: dict, acc) -> dict[tuple[str, str], tuple[float, float]]:
    peak = acc.peak_flops_per_s / 1e12
    out = {}
    for backend in ("flash", "cudnn"):
        big_r, h = fit_attention(attention_rows(data, backend), "forward_backward_tflops")
        out[backend, "fb"] = (big_r / peak, h)
    return out


def h100_section(h200: dict, h200_part2: dict, h100: dict) -> list[str]:
    """The H100's run of the same script beside the H200's: what carries over between the two Hopper
    boards and what the h100 and h800 files take from their own."""
    a200, a100 = load_accelerator("h200"), load_accelerator("h100")
    means = elementwise_fractions(
        [
            (h200_part2["elementwise"], a200.hbm_bytes_per_s),
            (h100["elementwise"], a100.hbm_bytes_per_s),
        ]
    )
    env = h100["environment"]
    figures: list[tuple[str, str, str, str]] = []

    def gemm_figures(data: dict, acc) -> tuple[float, float, float, float, float]:
        rows = [r for r in data["gemm_bf16"] if "seconds" in r]
        eff, k_half = fit_gemm([r for r in rows if r["set"] in ("depth", "layer")], acc)
        layer = [r for r in rows if r["set"] == "layer"]
        measured = np.array([r["seconds"] for r in layer])
        at_catalogue = gemm_model(
            layer,
            acc,
            acc.matmul_efficiency,
            acc.gemm_half_efficiency_depth,
            acc.gemm_smaller_tile_efficiency,
        )
        return (
            median([r["tflops"] for r in layer]),
            eff,
            k_half,
            median(at_catalogue / measured - 1),
            fit_tiles(rows, acc)[1],
        )

    g200, g100 = gemm_figures(h200, a200), gemm_figures(h100, a100)
    figures += [
        ("bf16 layer GEMMs, median TFLOP/s (432 shapes)", f"{g200[0]:.0f}", f"{g100[0]:.0f}", "-"),
        (
            "kernel fraction of the quantized peak, k_half (fit on depth + layer)",
            f"{g200[1]:.3f}, {g200[2]:.0f}",
            f"{g100[1]:.3f}, {g100[2]:.0f}",
            f"{a100.matmul_efficiency} (fitted on training records), 128",
        ),
        (
            "smaller tiles' rate over the main tile's",
            f"{g200[4]:.2f}",
            f"{g100[4]:.2f}",
            f"{a100.gemm_smaller_tile_efficiency}",
        ),
        (
            "catalogue's layer GEMM seconds over measured (median)",
            pct(g200[3]),
            pct(g100[3]),
            "-",
        ),
    ]
    r200, r100 = recipe_ratios(DATA), recipe_ratios(H100)
    for recipe in ("tensorwise", "rowwise", "blockwise"):
        figures.append(
            (
                f"fp8 {recipe}: fraction of fp8 peak over bf16's (median of 80)",
                f"{r200[recipe]['median']:.3f}",
                f"{r100[recipe]['median']:.3f}",
                f"{dict(a100.fp8_recipe_ratio)[recipe]} (h100, h800)",
            )
        )
    f200, f100 = _attention_fits(h200, a200), _attention_fits(h100, a100)
    for backend, name in (("flash", "FlashAttention-2"), ("cudnn", "cuDNN")):
        figures.append(
            (
                f"{name} forward + backward: R, h (keys)",
                f"{f200[backend, 'fb'][0]:.3f}, {f200[backend, 'fb'][1]:.0f}",
                f"{f100[backend, 'fb'][0]:.3f}, {f100[backend, 'fb'][1]:.0f}",
                f"h {a100.attention_half_efficiency_keys:.0f}",
            )
        )
    s200 = {r["policy"]: r for r in h200["llama_step"]}
    s100 = {r["policy"]: r for r in h100["llama_step"]}
    e200, e100 = _engine_steps(h200, "h200-1"), _engine_steps(h100, "h100-1")
    for policy in POLICIES:
        figures.append(
            (
                f"8-layer Llama step, {policy}: measured s (engine)",
                f"{s200[policy]['step_s']:.3f} ({pct(e200[policy] / s200[policy]['step_s'] - 1)})",
                f"{s100[policy]['step_s']:.3f} ({pct(e100[policy] / s100[policy]['step_s'] - 1)})",
                "-",
            )
        )
    figures.append(
        (
            "kept bytes per token and layer, none / full",
            f"{s200['none']['trunk_kept_bytes_per_layer_token']:,.0f} / "
            f"{s200['full']['trunk_kept_bytes_per_layer_token']:,.0f}",
            f"{s100['none']['trunk_kept_bytes_per_layer_token']:,.0f} / "
            f"{s100['full']['trunk_kept_bytes_per_layer_token']:,.0f}",
            "-",
        )
    )
    p200, p100 = h200["power"], h100["power"]
    env200 = h200["environment"]["nvidia_smi"]
    figures += [
        (
            "idle W: before any work (lowest clock) / after work (clocks up)",
            f"{float(env200['power.draw']):.0f} / {p200['idle']['power_w_median']:.0f}",
            f"{float(env['nvidia_smi']['power.draw']):.0f} / {p100['idle']['power_w_median']:.0f}",
            f"static_power_w {a100.static_power_w:g}, idle_power_w {a100.idle_power_w:g}",
        ),
        (
            "sustained 8192^3 bf16 GEMM: W, SM MHz, TFLOP/s",
            f"{p200['bf16_gemm_8192']['power_w_median']:.0f}, "
            f"{p200['bf16_gemm_8192']['sm_clock_mhz_median']:.0f}, {p200['bf16_gemm_8192']['tflops']:.0f}",
            f"{p100['bf16_gemm_8192']['power_w_median']:.0f}, "
            f"{p100['bf16_gemm_8192']['sm_clock_mhz_median']:.0f}, {p100['bf16_gemm_8192']['tflops']:.0f}",
            f"board_power_w {a100.board_power_w:g}",
        ),
        (
            "HBM copy TB/s (of the datasheet)",
            f"{h200['hbm']['bytes_per_s'] / 1e12:.2f} ({h200['hbm']['bytes_per_s'] / a200.hbm_bytes_per_s:.2f})",
            f"{h100['hbm']['bytes_per_s'] / 1e12:.2f} ({h100['hbm']['bytes_per_s'] / a100.hbm_bytes_per_s:.2f})",
            f"{a100.hbm_bytes_per_s / 1e12:.2f} (h100)",
        ),
        (
            "element-wise TB/s (of the datasheet): rms_norm, swiglu",
            ", ".join(
                f"{elementwise_rate(r) / 1e12:.2f} ({elementwise_rate(r) / a200.hbm_bytes_per_s:.3f})"
                for r in h200_part2["elementwise"][:2]
            ),
            ", ".join(
                f"{elementwise_rate(r) / 1e12:.2f} ({elementwise_rate(r) / a100.hbm_bytes_per_s:.3f})"
                for r in h100["elementwise"][:2]
            ),
            f"norm_hbm_fraction {a100.norm_hbm_fraction}, elementwise_hbm_fraction "
            f"{a100.elementwise_hbm_fraction} (the two boards' means: "
            + ", ".join(f"{means[op]:.3f}" for op in ("rms_norm", "swiglu"))
            + ")",
        ),
        (
            "host us per launch: eager op, small GEMM, CUDA graph",
            ", ".join(
                f"{1e6 * h200_part2['launch'][k]:.1f}"
                for k in ("eager_s_per_kernel", "small_mm_s_per_launch", "graph_s_per_kernel")
            ),
            ", ".join(
                f"{1e6 * h100['launch'][k]:.1f}"
                for k in ("eager_s_per_kernel", "small_mm_s_per_launch", "graph_s_per_kernel")
            ),
            "-",
        ),
    ]
    out = [
        "## A second board: the H100 (2026-12-05)",
        "",
        f"The same script on an {env['device']} ({env['sm_count']} SMs, {env['nvidia_smi']['power.limit']} W limit, "
        f"driver {env['nvidia_smi']['driver_version']}), PyTorch {env['torch']}, CUDA {env['cuda']}, "
        f"{env['date_utc']}",
        f"(`python scripts/device_calibration.py --out DIR --name h100_2026-12-05`; the data: `{H100.relative_to(REPO)}`).",
        "The catalogue's column is hardware/h100.yaml; the engine's error is its step estimate on one such",
        "GPU (h200-1, h100-1) over the measured step.",
        "",
        *table_head("figure", "H200 (2026-12-04)", "H100 (2026-12-05)", "catalogue (h100)"),
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in figures),
        "",
        "What the H100 changed in the catalogue, each its own board's measurement (docs/calibration.md, \"H100",
        "measurement\"): the h100's and the h800's fp8 recipe ratios (row-wise and blockwise against per",
        "tensor), their idle power (117 W, the tenth-of-the-rating assumption before) and a static floor",
        "beside it, the power at the lowest clock with no work, which the power cap's clock law now uses on",
        "the three Hopper parts (the idle draw with clocks up is not a floor: its clock tree slows with the clock).",
        "What it did not change: the GEMM depth curve (k_half 128 kept; the fit moves with the shapes it is given)",
        "and one `attention_half_efficiency_keys` on every GPU: the H100's forward + backward curves rise more slowly than",
        f"the H200's, by {pct(f100['flash', 'fb'][1] / f200['flash', 'fb'][1] - 1)} of the keys (FlashAttention-2) and "
        f"{pct(f100['cudnn', 'fb'][1] / f200['cudnn', 'fb'][1] - 1)} (cuDNN),",
        "which at 8,192 tokens (4,096 keys a query) lengthens the attention by "
        f"{pct((4096 + f100['flash', 'fb'][1]) / (4096 + f200['flash', 'fb'][1]) - 1)} and "
        f"{pct((4096 + f100['cudnn', 'fb'][1]) / (4096 + f200['cudnn', 'fb'][1]) - 1)}.",
        "The activations kept per policy are the same bytes on both boards; the kernels' rates differ by a few",
        "per cent, the H100 ahead on GEMMs at the same 700 W.",
    ]
    return out


QUANTISE_OPS = {
    "tensorwise": "per tensor: amax over the tensor, then scale and cast",
    "rowwise": "per row: amax over each row, scale and cast",
    "blockwise_1x128": "1 x 128 tiles: amax per tile (DeepSeek-V3's activations)",
    "transposed_tensorwise": "per tensor, of the transposed copy (the weight gradient's operand)",
    "hadamard16": "a 16-point Hadamard transform (NVFP4's, before its column-wise cast), bf16 out",
}


def quantise_section(h100: dict) -> list[str]:
    """fp8 quantisation kernels, eager and compiled, against the bytes they move at least."""
    rows = [r for r in h100["quantise"] if "seconds" in r]
    copy = h100["hbm"]["bytes_per_s"]
    shapes = sorted({(r["rows"], r["cols"]) for r in rows}, key=lambda x: x[0] * x[1])
    out = [
        "## fp8 quantisation (H100)",
        "",
        "A layer input of bf16 cast to e4m3 with its scales, as a chain of eager PyTorch kernels and fused by",
        "`torch.compile`, and a 16-point Hadamard transform as a GEMM against a 16 x 16 matrix. Rate: the",
        "least bytes the operation moves (read 2 and write 1 a value; 1 x 128 tiles 4 / 128 more for their",
        f"scales; the transform reads and writes 2) over its seconds, beside a device copy's {copy / 1e12:.2f} TB/s.",
        "",
        *table_head(
            "operation",
            "mode",
            *(f"{m:,} x {n:,}" for m, n in shapes),
        ),
    ]
    for op, what in QUANTISE_OPS.items():
        for mode in ("eager", "compiled"):
            cells = []
            for m, n in shapes:
                r = next(
                    (
                        x
                        for x in rows
                        if (x["op"], x["mode"], x["rows"], x["cols"]) == (op, mode, m, n)
                    ),
                    None,
                )
                cells.append("-" if r is None else f"{r['bytes_per_s'] / 1e12:.2f} TB/s")
            if set(cells) != {"-"}:
                out.append(f"| {op}: {what} | {mode} | " + " | ".join(cells) + " |")

    def rate(op: str, mode: str) -> float:
        return median([r["bytes_per_s"] for r in rows if r["op"] == op and r["mode"] == mode])

    eager_bytes = 3.0 * copy / rate("tensorwise", "eager")
    chain = 4 * 2 + 17  # abs, amax, upcast, scale, cast of a bf16 value: the eager chain's bytes
    out += [
        "",
        f"- Fused, a scale per row or per 1 x 128 tile is one pass: {rate('rowwise', 'compiled') / 1e12:.2f} and "
        f"{rate('blockwise_1x128', 'compiled') / 1e12:.2f} TB/s on its least",
        f"  bytes, the copy's rate. A scale per tensor needs the whole tensor's amax before the cast: "
        f"{rate('tensorwise', 'compiled') / 1e12:.2f} TB/s,",
        f"  {rate('tensorwise', 'compiled') * 5 / 3 / copy:.2f} of the copy's rate on 5 bytes (the tensor read twice). "
        "The engine costs a fused fp8 cast as one read and one",
        "  write at HBM bandwidth (the extra read of a per-tensor scale is in the fp8 ratio fitted on training",
        "  records), and NVFP4's quantisations, whose fp32 scale per tensor needs the amax, with the extra read",
        "  (`costs.memory.FP4_AMAX_READS`, since this measurement).",
        f"- Eager, the per-tensor cast runs at {rate('tensorwise', 'eager') / 1e12:.2f} TB/s on its 3 bytes: "
        f"{eager_bytes:.0f} bytes' worth at the copy's",
        f"  rate. Its kernels (abs, amax, the fp32 upcast, the scale, the cast) move {chain} bytes a value: "
        f"{chain * rate('tensorwise', 'eager') / 3 / 1e12:.1f} TB/s,",
        "  between the RMSNorm's and the SwiGLU's rates in the table above (the chain holds a reduction, the",
        "  amax). torchao's Float8Linear in eager mode runs that chain and a clamp (33 bytes); the engine costs",
        "  eager fp8 casts so since this measurement (`costs.flops.EAGER_FP8_CAST_BYTES`; one extra read, 5 bytes,",
        "  before), at the element-wise rate (`elementwise_hbm_fraction`).",
        f"- The Hadamard transform runs at {rate('hadamard16', 'eager') / 1e12:.2f} TB/s eager and compiled "
        "(cuBLAS either way): "
        f"{copy / rate('hadamard16', 'eager'):.1f} times",
        "  its bytes' time at the copy's rate. Transformer Engine fuses it into NVFP4's column-wise cast on",
        "  Blackwell; no Blackwell part was measured.",
    ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS / "device_calibration.md"))
    args = parser.parse_args()
    data, data2 = json.loads(DATA.read_text()), json.loads(DATA2.read_text())
    acc = load_accelerator("h200")
    env = data["environment"]
    lines = [
        "# The cost model against one GPU's measurements",
        "",
        f"- measured: {env['device']} ({env['sm_count']} SMs, driver {env['nvidia_smi']['driver_version']}), "
        f"PyTorch {env['torch']}, CUDA {env['cuda']}, cuDNN {env['cudnn']}, {env['date_utc']}",
        "- measure: `python scripts/device_calibration.py --out DIR` (all sections; the second file:",
        "  `--name part2 --sections grouped_gemm,launch,elementwise,gemm_repeat`); the data:",
        f"  `{DATA.relative_to(REPO)}`, `{DATA2.relative_to(REPO)}`; the H100's (every section in one file):",
        f"  `{H100.relative_to(REPO)}`",
        "- regenerate this report: `python scripts/device_report.py`",
        "",
        *gemm_section(data, acc),
        "",
        *fp8_section(),
        "",
        *attention_section(data, acc),
        "",
        *memory_section(data),
        "",
        *step_section(data),
        "",
        *power_section(data, data2, acc),
        "",
        *grouped_section(
            data2, acc, fit_tiles([r for r in data["gemm_bf16"] if "seconds" in r], acc)[0]
        ),
        "",
        *h100_section(data, data2, json.loads(H100.read_text())),
        "",
        *quantise_section(json.loads(H100.read_text())),
        "",
    ]
    out_path = REPO / args.out if not args.out.startswith("/") else args.out
    with open(out_path, "w") as fh:
        fh.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
