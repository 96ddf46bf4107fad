"""Element-wise kernels at their measured rates (docs/calibration.md#element-wise-kernels): the norms at
``norm_hbm_fraction``, the other element-wise kernels at ``elementwise_hbm_fraction`` of the datasheet HBM
bandwidth, a MoE layer's permutation (a copy) at the datasheet rate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from layoutsearch.api import problem
from layoutsearch.core.catalogue import load_accelerator, load_model
from layoutsearch.core.specs import Layout
from layoutsearch.costs import flops, memory
from layoutsearch.costs.estimate import estimate

REPO = Path(__file__).resolve().parents[1]
TOKENS, D, F = (
    8192,
    4096,
    14336,
)  # the measurement's shapes (scripts/device_calibration.py, elementwise)
GPUS = ("a100-40gb", "a100-80gb", "h100", "h200", "h800", "b200", "gb200", "b300", "gb300")
GPUS += ("mi300x", "mi325x", "mi355x", "gaudi3")
TPUS = ("v4", "v5e", "v5p", "v6e", "tpu7x")


def _measured(name: str) -> dict[str, float]:
    rows = json.loads((REPO / "results" / "device" / name).read_text())["elementwise"]
    return {r["op"]: r["seconds"] for r in rows}


def test_the_catalogue_fractions_are_the_two_boards_measured_means():
    """bf16 RMSNorm reads and writes 8,192 x 4,096 (2 x 2 bytes an element); the eager SwiGLU silu(g) * u moves 5
    x 8,192 x 14,336 (silu reads g and writes, the product reads that and u and writes), over each board's
    datasheet 3.35 and 4.8 TB/s: RMSNorm 0.609 and 0.625, SwiGLU 0.907 and 0.863, means 0.617 and 0.885."""
    h100, h200 = _measured("h100_2026-12-05.json"), _measured("h200_2026-12-04_part2.json")
    norm = [
        2 * TOKENS * D * 2 / run["rms_norm"] / bw for run, bw in ((h100, 3.35e12), (h200, 4.8e12))
    ]
    swiglu = [
        5 * TOKENS * F * 2 / run["swiglu"] / bw for run, bw in ((h100, 3.35e12), (h200, 4.8e12))
    ]
    assert norm == [pytest.approx(0.6093, abs=1e-4), pytest.approx(0.6253, abs=1e-4)]
    assert swiglu == [pytest.approx(0.9073, abs=1e-4), pytest.approx(0.8629, abs=1e-4)]
    for gpu in GPUS:
        acc = load_accelerator(gpu)
        assert acc.norm_hbm_fraction == round(sum(norm) / 2, 3) == 0.617, gpu
        assert acc.elementwise_hbm_fraction == round(sum(swiglu) / 2, 3) == 0.885, gpu
    for tpu in TPUS:  # XLA fuses them; nothing measured
        acc = load_accelerator(tpu)
        assert (acc.norm_hbm_fraction, acc.elementwise_hbm_fraction) == (1.0, 1.0), tpu


def test_norm_and_permutation_bytes_by_hand():
    """Llama 3 8B in bf16: two norms, each reading and writing 4,096 values of 2 bytes, 32,768 bytes a token
    (8,192 with sequence parallelism over tp 4); no permutation in a dense model. Qwen3-30B-A3B (d 2,048, top 8, every layer
    MoE): 8 copies gathered and scattered back, 2 x 2 x 2,048 x 2 bytes each, 131,072 bytes a token, 32,768 over
    tp 4."""
    llama = load_model("llama3-8b")
    assert flops.norm_bytes_per_token_per_layer(llama, 1, False, 2) == 32_768
    assert flops.norm_bytes_per_token_per_layer(llama, 4, True, 2) == 8_192
    assert flops.norm_bytes_per_token_per_layer(llama, 4, False, 2) == 32_768
    assert flops.permute_bytes_per_token_per_layer(llama, 1, 2) == 0.0
    qwen = load_model("qwen3-30b-a3b")
    assert (qwen.d_model, qwen.moe.top_k) == (2048, 8)
    assert flops.permute_bytes_per_token_per_layer(qwen, 1, 2) == 131_072
    assert flops.permute_bytes_per_token_per_layer(qwen, 4, 2) == 32_768


def _elementwise_s(acc_changes: dict, model="llama3-8b", cluster="h100-8", layout=None) -> float:
    p = problem(model, cluster, seqs=8, seq_len=8192, framework="torchtitan")
    acc = dataclasses.replace(p.cluster.accelerator, **acc_changes)
    p = dataclasses.replace(p, cluster=dataclasses.replace(p.cluster, accelerator=acc))
    return estimate(p, layout or Layout(fsdp=8)).time_s["compute/elementwise"]


def test_the_norms_take_their_own_rate():
    """Llama 3 8B, one 8,192-token sequence per H100, no recompute: the norms' 32,768 bytes a token and layer
    move three times (forward read and write, backward twice that) over 32 layers, 8,192 x 32 x 3 x 32,768 =
    25.77 GB; at 0.617 of 3.35 TB/s they take 12.467 ms, at the datasheet rate 7.692 ms: 4.775 ms more."""
    at_rate = _elementwise_s({})
    at_datasheet = _elementwise_s({"norm_hbm_fraction": 1.0})
    moved = 8192 * 32 * 3 * 32_768
    assert at_rate - at_datasheet == pytest.approx(moved / 3.35e12 * (1 / 0.617 - 1), rel=1e-9)
    assert at_rate - at_datasheet == pytest.approx(4.775e-3, abs=1e-6)


def test_a_moe_permutation_moves_at_the_datasheet_rate():
    """The element-wise fraction leaves the permutation alone: Qwen3-30B-A3B's element-wise time at fractions of
    1 against 0.885 differs by the non-permutation bytes only, so setting the HBM rate apart from the fraction
    changes the permutation's time and nothing else moves with the fraction."""
    layout = Layout(fsdp=8, ep=8)
    base = _elementwise_s({}, "qwen3-30b-a3b", "h100-8", layout)
    no_fraction = _elementwise_s(
        {"elementwise_hbm_fraction": 1.0}, "qwen3-30b-a3b", "h100-8", layout
    )
    acc = load_accelerator("h100")
    faster_hbm = _elementwise_s(
        {"hbm_bytes_per_s": 2 * acc.hbm_bytes_per_s}, "qwen3-30b-a3b", "h100-8", layout
    )
    # 48 layers x 8,192 tokens x 3 passes x 131,072 bytes at 3.35 TB/s: the permutation's 46.15 ms
    permutation = 48 * 8192 * 3 * 131_072 / 3.35e12
    assert permutation == pytest.approx(46.15e-3, abs=1e-5)
    assert base - faster_hbm == pytest.approx(
        base / 2, rel=1e-9
    )  # every element-wise byte rides the HBM rate
    assert (base - no_fraction) == pytest.approx(
        (base - permutation - _norm_s()) * (1 - 0.885), rel=1e-9
    )


def _norm_s() -> float:
    """Qwen3-30B-A3B's norms (2 x 2 x 2,048 x 2 = 16,384 bytes a token and layer) at 0.617 of 3.35 TB/s, 48
    layers, 3 passes, 8,192 tokens: 9.349 ms."""
    return 48 * 8192 * 3 * 16_384 / (3.35e12 * 0.617)


def test_learned_positions_move_no_rotary_bytes():
    """GPT-3 175B (d 12,288, plain MLP of 49,152, learned positions) at tp 8 without sequence parallelism, bf16,
    fused attention: two residual adds (3 x 12,288 each) and the GELU (read and write 6,144), 86,016 values, 172,032
    bytes a token; no rotary. Llama 3 8B (RoPE) at tp 1 adds its rotary passes over q and k, 2 x (32 + 8) x 128."""
    gpt3 = load_model("gpt3-175b")
    assert (gpt3.d_model, gpt3.d_ff, gpt3.mlp, gpt3.learned_positions > 0) == (
        12288,
        49152,
        "plain",
        True,
    )
    assert flops.elementwise_bytes_per_token_per_layer(gpt3, 8, False, 2) == 2 * (
        2 * 3 * 12288 + 2 * 6144
    )
    llama = load_model("llama3-8b")
    rope = 2 * (32 + 8) * 128
    assert flops.elementwise_bytes_per_token_per_layer(llama, 1, False, 2) == 2 * (
        2 * 3 * 4096 + 3 * 14336 + rope
    )


def test_hidden_dropout_costs_its_masks():
    """GPT-3 175B with hidden dropout 0.1 at tp 8 with sequence parallelism: two residual dropouts, each a bool mask
    of d/tp = 1,536 values a token, 3,072 bytes written a token and layer, and kept for the backward (1,536 bf16
    units in saved_tensor_widths) by the policies that keep what lies outside the recomputed modules; full
    recompute keeps none. On h100-64 at tp 8, pp 8 and 64 microbatches of 2,048 tokens, stage 0 holds 8 microbatches
    of its 12 layers: 12 x 8 x 2,048 x 3,072 = 603,979,776 bytes more activations. A parallel block has one."""
    gpt3 = load_model("gpt3-175b")
    dropped = dataclasses.replace(gpt3, hidden_dropout=0.1)
    added = flops.elementwise_bytes_per_token_per_layer(
        dropped, 8, True, 2
    ) - flops.elementwise_bytes_per_token_per_layer(gpt3, 8, True, 2)
    assert added == 3072
    assert memory.saved_tensor_widths(dropped, 8, True, 2048)["dropout_masks"] == 1536
    assert memory.saved_tensor_widths(gpt3, 8, True, 2048)["dropout_masks"] == 0
    assert [
        memory.kept_by_policy("dropout_masks", p) for p in ("none", "selective", "full", "op")
    ] == [
        True,
        True,
        False,
        False,
    ]
    assert flops.residual_dropouts(dataclasses.replace(dropped, parallel_block=True)) == 1

    def activations(model, recompute):
        est = estimate(
            problem(model, "h100-64", seqs=64, seq_len=2048),
            Layout(tp=8, pp=8, num_microbatches=64, recompute=recompute),
            strict=False,
        )
        return est.memory_bytes["activations"], est.time_s["compute/elementwise"]

    for recompute in ("none", "selective"):
        assert activations(dropped, recompute)[0] - activations(gpt3, recompute)[0] == 603_979_776
    (full_dropped, ew_dropped), (full_plain, ew_plain) = (
        activations(dropped, "full"),
        activations(gpt3, "full"),
    )
    assert full_dropped == full_plain and ew_dropped > ew_plain
