"""Published torchtitan runs the calibration never saw, as a guard on the attention and power physics.

None of these runs is in tests/data (the development sets), and no fraction is fitted to them. They
caught the FlashAttention-2 class costed at its isolated kernel's fraction: 8% to 31% too fast on the
H100 rows. docs/calibration.md#flashattention-2-and-mpts-triton-kernel tells that history. The eager
rows are costed with ``torch_compile`` off (docs/cost_model.md#eager-pytorch): 3.5% slower than the
compiled ones, of the 16% measured (PyTorch of late 2024 also ran RMSNorm as several kernels).

Sources (tokens per second per GPU, sequence length 8,192):
- H100: pytorch/torchtitan docs/performance.md @ eaea6f6a2fa9, Tables 1 and 3. The rows are
  Grand Teton H100s, 96 GB HBM2e, default 500 W power limit, Llama 3.1 8B with selective (per-op)
  activation checkpointing. The async-TP rows are bf16 at "June 2025", the same platform, from
  torchtitan commit 2887250bbd91 (docs, async TP results).
- A100: pytorch/torchtitan docs/performance.md @ 041336434916. These are Llama 3 on 64 A100 80GB
  with FSDP2: 8B, local batch 1, selective op AC; 70B, local batch 1, full AC; and Llama 2 13B at
  4,096 tokens, local batch 2, no AC and selective op AC.

Not modelled, and so part of the tolerance:
- the HBM2e H100's lower peak ("between SXM and NVL", the page's footnote 2);
- its 2.4 TB/s HBM, against the catalogue h100's 3.35;
- what torch.compile gains beyond the element-wise bytes (and the older PyTorch's unfused RMSNorm).

Fitted elsewhere and moving these rows: FlashAttention-2's in-training fraction (the fms-fsdp rows, eager since
2026-12-05: the compiled H100 rows went from -7%/-6% to -2%/-1%). Async TP pipelines the forward's collectives
only under torchtitan's profile (docs/cost_model.md#overlap): predicted gains +11% (8B) and +8% (70B), measured
+9.8% and +9.2% (the 8B async row was +16% while the backward was costed as pipelined too).
"""

from __future__ import annotations

import pytest

from layoutsearch.api import problem
from layoutsearch.core.specs import Layout
from layoutsearch.costs.estimate import estimate

H100_500W = {"framework": "torchtitan", "power_limit_w": 500, "hbm_gib": 96}
A100 = {"framework": "torchtitan"}
TOLERANCE = (
    0.15  # |predicted / measured - 1|: about the 80% band's width on GPUs (core/uncertainty.yaml)
)

# the runs' setups: (model, cluster, sequences, sequence length, layout, options)
T1 = ("llama3-8b", "h100-8", 16, 8192, Layout(fsdp=8, recompute="op"), H100_500W)
T3 = ("llama3-8b", "h100-128", 256, 8192, Layout(fsdp=128, recompute="op"), H100_500W)
TP_70B = ("llama70b", "h100-256", 512, 8192, Layout(fsdp=32, tp=8, recompute="full"), H100_500W)
TP_8B = ("llama3-8b", "h100-64", 96, 8192, Layout(fsdp=8, tp=8, recompute="op"), H100_500W)
A100_8B = ("llama3-8b", "a100-80gb-64", 64, 8192, Layout(fsdp=64, recompute="op"), A100)
A100_70B = ("llama70b", "a100-80gb-64", 64, 8192, Layout(fsdp=64, recompute="full"), A100)
A100_13B = ("llama2-13b", "a100-80gb-64", 128, 4096, Layout(fsdp=64), A100)
A100_13B_OP = (*A100_13B[:4], Layout(fsdp=64, recompute="op"), A100)
VANILLA, ASYNC = {"tp_comm_overlap": False}, {"tp_comm_overlap": True}
EAGER = {"torch_compile": False}
# what: (setup, options beside the setup's, measured tokens/s per GPU)
RUNS = {
    "T1 FSDP": (T1, EAGER, 5762),
    "T1 FSDP + compile": (T1, {}, 6667),
    "T3 FSDP": (T3, EAGER, 5605),
    "T3 FSDP + compile": (T3, {}, 6514),
    "70B vanilla TP": (TP_70B, VANILLA, 597.3),
    "70B async TP": (TP_70B, ASYNC, 652.4),
    "8B vanilla TP": (TP_8B, VANILLA, 4378),
    "8B async TP": (TP_8B, ASYNC, 4809.4),
    "A100 8B op AC": (A100_8B, {}, 2973),
    "A100 70B full AC": (A100_70B, {}, 331),
    "A100 13B no AC": (A100_13B, {}, 2162),
    "A100 13B op AC": (A100_13B_OP, {}, 1904),
}


def predicted(setup: tuple, options: dict) -> float:
    """The engine's tokens/s per GPU for a run's setup with ``options`` on top of its own."""
    model, cluster, seqs, seq_len, layout, own = setup
    p = problem(model, cluster, seqs=seqs, seq_len=seq_len, **own, **options)
    return estimate(p, layout).tokens_per_s / p.num_devices


@pytest.mark.parametrize(("setup", "options", "measured"), list(RUNS.values()), ids=list(RUNS))
def test_published_torchtitan_runs_are_predicted_within_the_band(setup, options, measured):
    """Each run's predicted tokens/s per GPU is within 15% of the published one."""
    got = predicted(setup, options)
    assert abs(got / measured - 1) <= TOLERANCE, (got, measured)


def test_the_spot_checks_are_neither_all_fast_nor_all_slow():
    """The signed errors straddle zero: no bias a fitted fraction should have removed (the
    kernel-figure FlashAttention-2 of af90bb9 had every H100 row too fast). Their median lies within 3% of zero
    (+1.9%: 10 rows fast, 2 slow; +1.6% before the fits took Huber's loss and the a100 family was refitted with it) and the slowest row is slower than measured. Until 2026-12-07 the test counted
    at least 3 rows on each side: two rows within 0.3% of zero (70B async TP, A100 13B no AC) then changed sides
    when the loss's passes were costed and the h100 class refitted beside them, a count of noise, not of bias."""
    errors = sorted(
        predicted(setup, options) / measured - 1 for setup, options, measured in RUNS.values()
    )
    median = (errors[5] + errors[6]) / 2
    assert len(errors) == 12 and abs(median) <= 0.03 and errors[0] < 0
    assert median == pytest.approx(0.0193, abs=5e-4)


def test_compile_is_predicted_faster_by_its_element_wise_bytes_alone():
    """Compiled over eager, T1 and T3: measured 1.157x and 1.162x; predicted 1.040x (the eager kernels' extra
    bytes at the element-wise rate, 0.885 x 3.35 TB/s; 1.035x at 3.35 TB/s before the element-wise kernels ran at
    their measured rates: a part of the measured gain, docs/cost_model.md#eager-pytorch)."""
    for setup, measured in ((T1, 6667 / 5762), (T3, 6514 / 5605)):
        gain = predicted(setup, {}) / predicted(setup, EAGER)
        assert 1.025 < gain < 1.045 and gain < measured, (gain, measured)
