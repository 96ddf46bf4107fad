"""The cost model against the H200 measurements of scripts/device_calibration.py (results/device/).

The numbers below are the measurement's (results/device/h200_2026-12-04.json, written on the device
on 2026-12-04) and hand-computed tensor sizes of the measured layer (d 4096, 32 query and 8 key-value
heads of 128, ffn 14336), never the model's output at test time.
"""

import json
from pathlib import Path

import pytest

from layoutsearch.core.catalogue import load_model
from layoutsearch.costs import memory

DATA = Path(__file__).resolve().parents[1] / "results" / "device" / "h200_2026-12-04.json"
D, F = 4096, 14336


def measured_kept() -> dict[str, float]:
    """Bytes per layer and token the 8-layer trunk's forward kept, by policy, less its output's
    share (one more layer input, 2 d bytes over 8 layers)."""
    steps = json.loads(DATA.read_text())["llama_step"]
    return {r["policy"]: r["trunk_kept_bytes_per_layer_token"] - 2 * D / 8 for r in steps}


def model_kept(policy: str) -> float:
    widths = memory.saved_tensor_widths(load_model("llama3-8b"), 1, False, 8192, True, 2, "none")
    return 2 * sum(w for name, w in widths.items() if memory.kept_by_policy(name, policy))


def test_the_measurement_is_the_committed_one():
    kept = measured_kept()
    assert kept == {"none": 176264.125, "selective": 139272.0, "op": 63616.125, "full": 8192.0}


@pytest.mark.parametrize("policy", ["op", "full"])
def test_policies_the_measurement_pins_exactly(policy):
    """full keeps the layer input (2 d); torchtitan's per-op policy keeps the input, q and v, the
    attention output and its fp32 statistics, the gate projection and the down projection:
    2 (d + d + d / 4 + d) + 4 x 32 + 2 (f + d) = 63,616 bytes."""
    assert model_kept(policy) == {"full": 2 * D, "op": 2 * (3.25 * D + F + D) + 4 * 32}[policy]
    assert model_kept(policy) == pytest.approx(measured_kept()[policy], abs=0.2)


RSTD = 2 * 4  # the two norms' fp32 inverse RMS per token, which the model leaves out (0.006%)


def test_no_recompute_differs_by_the_eager_extras_only():
    """Eager PyTorch keeps two tensors a fused layer does not: SwiGLU's silu(g) beside g and u (2 f
    bytes), and the attention output's contiguous copy that the O projection reads beside the kernel's
    own output (2 d); with the norms' statistics that is the whole difference."""
    assert measured_kept()["none"] - model_kept("none") == pytest.approx(
        2 * (F + D) + RSTD, abs=0.2
    )


def test_selective_keeps_what_the_fused_layer_keeps():
    """The checkpointed attention core frees the kernel's output and statistics in eager PyTorch only
    because the O projection reads a copy; the checkpointed SwiGLU frees silu(g). What is left is what
    the model's fused layer keeps under selective: everything but the statistics (128 bytes)."""
    kept = measured_kept()
    assert kept["none"] - kept["selective"] == pytest.approx(2 * F + 2 * D + 128, abs=0.2)
    assert model_kept("none") - model_kept("selective") == 128
    assert kept["selective"] - model_kept("selective") == pytest.approx(RSTD, abs=0.2)
