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


H100 = DATA.parent / "h100_2026-12-05.json"


def test_the_h100_keeps_the_same_bytes_per_policy():
    """The same script on an H100 (results/device/h100_2026-12-05.json): the layer keeps the H200's bytes to
    the byte under every policy, so the memory model's check holds on both boards."""
    h100 = {
        r["policy"]: r["trunk_kept_bytes_per_layer_token"]
        for r in json.loads(H100.read_text())["llama_step"]
    }
    h200 = {
        r["policy"]: r["trunk_kept_bytes_per_layer_token"]
        for r in json.loads(DATA.read_text())["llama_step"]
    }
    assert h100 == h200


def test_the_hopper_power_fields_are_the_measured_draws():
    """hardware/h100.yaml and h800.yaml (the same board) hold the H100's 69.19 W before any work (lowest clock)
    and 116.8 W median idle after work (clocks up), rounded; hardware/h200.yaml the H200's 81.93 W and 129 W."""
    from layoutsearch.core.catalogue import load_accelerator

    for part, path in (("h100", H100), ("h800", H100), ("h200", DATA)):
        data = json.loads(path.read_text())
        before = float(data["environment"]["nvidia_smi"]["power.draw"])
        after = data["power"]["idle"]["power_w_median"]
        acc = load_accelerator(part)
        assert (acc.static_power_w, acc.idle_power_w) == (round(before), round(after)), part
    assert (round(before), round(after)) == (82, 129)


def test_fused_casts_run_at_the_copy_rate_and_the_eager_chain_at_the_elementwise_rate():
    """Compiled row-wise and 1 x 128 casts move their least bytes (read 2, write 1) within 5% of the device
    copy's 3.05 TB/s; a per-tensor cast, which needs the tensor's amax first, at 0.56 of it (the tensor read
    twice: 5 bytes). The eager per-tensor chain (abs, amax, upcast, scale, cast: 25 bytes a value) runs at
    2.0-2.6 TB/s on its bytes, between the element-wise kernels' rates (rms_norm 2.0, swiglu 3.0 TB/s with its
    bytes recounted, scripts/device_report.py ELEMENTWISE_RECOUNT)."""
    data = json.loads(H100.read_text())
    copy = data["hbm"]["bytes_per_s"]
    assert copy == pytest.approx(3.05e12, rel=0.01)
    rows = [r for r in data["quantise"] if "seconds" in r]

    def rates(op, mode):
        return [r["bytes_per_s"] for r in rows if r["op"] == op and r["mode"] == mode]

    for op in ("rowwise", "blockwise_1x128"):
        assert all(0.95 < r / copy < 1.02 for r in rates(op, "compiled")), op
    assert all(0.54 < r / copy < 0.58 for r in rates("tensorwise", "compiled"))
    assert all(2.0e12 < r * 25 / 3 < 2.6e12 for r in rates("tensorwise", "eager"))


def test_the_committed_report_is_what_its_script_writes(tmp_path):
    """results/device_calibration.md sets the catalogue's figures beside the measurements, so a catalogue change
    must regenerate it (python scripts/device_report.py)."""
    import subprocess
    import sys

    root = DATA.parents[2]
    out = tmp_path / "report.md"
    subprocess.run(
        [sys.executable, str(root / "scripts" / "device_report.py"), "--out", str(out)],
        check=True,
        cwd=root,
        capture_output=True,
    )
    assert out.read_text() == (root / "results" / "device_calibration.md").read_text()


def test_only_rows_of_the_old_swiglu_count_are_recounted():
    """The runs of 2026-12-04 and -05 counted eager silu(g) * u as 4 x 8,192 x 14,336 bf16 elements (939,524,096
    bytes); its kernels move 5 (1,174,405,120). A row of the old count is recounted by 5/4, one of the new count
    (scripts/device_calibration.py since 2026-12-06) and every other op are taken as written."""
    import importlib.util
    import sys

    scripts = DATA.parents[2] / "scripts"
    spec = importlib.util.spec_from_file_location("device_report", scripts / "device_report.py")
    report = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(scripts))  # its sibling module _common
    try:
        spec.loader.exec_module(report)
    finally:
        sys.path.remove(str(scripts))
    old = {"op": "swiglu", "tokens": 8192, "bytes": 939_524_096, "bytes_per_s": 2.4e12}
    new = {"op": "swiglu", "tokens": 8192, "bytes": 1_174_405_120, "bytes_per_s": 3.0e12}
    norm = {"op": "rms_norm", "tokens": 8192, "bytes": 134_217_728, "bytes_per_s": 2.0e12}
    assert report.elementwise_rate(old) == pytest.approx(3.0e12)
    assert report.elementwise_rate(new) == 3.0e12
    assert report.elementwise_rate(norm) == 2.0e12
