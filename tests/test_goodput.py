"""Goodput under failures and checkpoints (costs.goodput): the formulas against hand-computed
numbers, Llama 3 405B on 16,384 H100 at the published interruption rate, the options on the
command line and the catalogue fields."""

import json
import math

import pytest
from typer.testing import CliRunner

import layoutsearch as ls
from layoutsearch.cli import app, main
from layoutsearch.core.catalogue import (
    accelerator_from_dict,
    catalogue_file,
    load_accelerator,
    load_model,
    read_yaml,
)
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs import goodput

runner = CliRunner()
LLAMA3_MTBF_S = 54 * 24 * 3600 / 419  # Llama 3: 419 unexpected interruptions in 54 days
LLAMA3_405B = dict(  # Llama 3 paper, table 4: 16,384 GPUs, tp 8, pp 16, dp 128, 16M-token batch
    model="llama3-405b",
    cluster="h100-16384",
    layout="fsdp=128,tp=8,pp=16",
    zero_stage=1,
    seqs=2048,
    seq_len=8192,
    recompute="full",
    tokens=15.6e12,
)


def test_the_default_failure_rate_is_llama3s_interruptions_per_gpu_hour():
    """419 / (54 days x 24 h x 16,384 GPUs) = 1.9733e-5 per GPU-hour; the job MTBF is 3.09 h."""
    assert goodput.LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR == pytest.approx(1.97328e-5, rel=1e-5)
    mtbf_s = goodput.job_mtbf_s(goodput.LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR, 16_384)
    assert mtbf_s == pytest.approx(11_135.08, rel=1e-6)
    assert goodput.job_mtbf_s(0.0, 16_384) == math.inf


def test_young_interval_and_daly_goodput_by_hand():
    """C = 2 s, M = 10,000 s: tau = sqrt(2 C M) = 200 s; Daly's goodput is 200 / (M e^(R/M)
    (e^(202/M) - 1)) = 0.9231 with R = 600 s, near Young's 1 - 2/200 - 200/2e4 - 600/1e4 = 0.92."""
    assert goodput.optimal_interval_s(2.0, 10_000.0) == pytest.approx(200.0)
    got = goodput.daly_goodput(200.0, 2.0, 600.0, 10_000.0)
    assert got == pytest.approx(200 / (10_000 * math.exp(0.06) * (math.exp(0.0202) - 1)))
    assert got == pytest.approx(0.9231, abs=1e-4)  # 200 / (1.061837 x 204.054)
    assert goodput.daly_goodput(200.0, 2.0, 600.0, math.inf) == 1.0
    assert goodput.daly_goodput(1.0, 1e6, 0.0, 1.0) == 0.0  # never finishes: no overflow


def test_checkpoint_bytes_are_master_and_moments_shared_by_replicas():
    """A device writes its fp32 master and moments (its weights only without a master copy),
    replicas splitting the writing."""
    mem = {"state/weights": 2.0, "state/master": 4.0, "state/optimizer": 8.0}
    assert goodput.checkpoint_bytes_per_device(mem, 1) == 12.0
    assert goodput.checkpoint_bytes_per_device(mem, 4) == 3.0
    assert goodput.checkpoint_bytes_per_device({**mem, "state/master": 0.0}, 1) == 10.0


def test_the_heaviest_pipeline_device_writes_and_dualpipe_writes_one_of_its_two_copies():
    """DeepSeek-V3 in bf16 on 2,048 GPUs, fsdp 128, pp 16, ep 64, ZeRO-1 (fp32 master and moments: 12 bytes a
    parameter). Under 1F1B a middle device holds 4 MoE layers: 4 x (187,121,664 + 45,875,456) parameters outside
    the routed experts, a copy held by all but tp x pp = 16 devices, and 4 x 4 x 44,040,192 routed-expert ones,
    a copy held by all but pp x ep = 1024; the 2,048 devices write each byte once: 12 x (931,988,480 x 16 +
    704,643,072 x 1024) / 2048 = 4,315,232,352 bytes each, more than the first device's (3 dense layers and
    the embedding beside 1 MoE layer's experts). Under DualPipe a middle device holds 8 MoE layers, and the
    pipeline the model twice: the same bytes (the first device's two ends, 4.4B and 0.5B, write less)."""
    model = load_model("deepseek-v3")
    work = Workload(global_batch_seqs=15360, seq_len=4096)
    common = dict(fsdp=128, pp=16, ep=64, zero_stage=1, num_microbatches=120)
    middle = 12 * (4 * (187_121_664 + 45_875_456) * 16 + 4 * 4 * 44_040_192 * 1024) / 2048
    assert middle == 4_315_232_352
    for schedule in ("1f1b", "dualpipe"):
        layout = Layout(**common, schedule=schedule)
        assert goodput.layout_checkpoint_bytes(model, work, layout) == middle


def test_llama3_405b_on_16384_h100_trains_more_than_90_percent_of_the_time():
    """Published: more than 90% effective training time over the 54 days. Checkpoint: the
    master and moments of a device x 8 GPUs per host over 2 TB/s / 2,048 hosts; Young's interval,
    Daly's goodput, and Young's first-order goodput within 0.4%."""
    rec = ls.estimate(**LLAMA3_405B).document["layout"]
    mem = rec["memory_bytes"]
    ckpt_s = (mem["state/master"] + mem["state/optimizer"]) * 8 / (2e12 / 2048)
    assert rec["checkpoint_time_s"] == pytest.approx(ckpt_s, rel=1e-9)
    assert (
        1.0 < ckpt_s < 5.0
    )  # 405e9 x 12 bytes / 16,384 devices x 8 / 0.977 GB/s = 2.4 s (2.6 on the embedding stage)
    tau = math.sqrt(2 * ckpt_s * LLAMA3_MTBF_S)
    assert rec["checkpoint_interval_s"] == pytest.approx(tau, rel=1e-9)
    assert rec["job_mtbf_h"] == pytest.approx(54 * 24 / 419, rel=1e-9)
    m, restart_s = LLAMA3_MTBF_S, 600 + ckpt_s  # the restart loads the checkpoint
    daly = tau / (m * math.exp(restart_s / m) * math.expm1((tau + ckpt_s) / m))
    assert rec["goodput"] == pytest.approx(daly, rel=1e-9)
    young = 1 - ckpt_s / tau - tau / (2 * m) - restart_s / m  # first order: (R/M)^2 = 0.003 off
    assert rec["goodput"] == pytest.approx(young, abs=4e-3)
    assert 0.90 < rec["goodput"] < 0.95
    days = 15.6e12 / rec["tokens_per_s"] / rec["goodput"] / 86400
    assert rec["train_days"] == pytest.approx(days, rel=1e-12)


def test_async_checkpoints_block_only_for_the_copy_to_host():
    """Async: the blocking time is the device's checkpoint over its 64 GB/s host link, the
    interval at least one step, and the goodput higher than blocking's."""
    blocking = ls.estimate(**LLAMA3_405B).document["layout"]
    run = ls.estimate(**LLAMA3_405B, checkpoint_mode="async")
    rec, mem = run.document["layout"], run.document["layout"]["memory_bytes"]
    copy_s = (mem["state/master"] + mem["state/optimizer"]) / 64e9
    assert rec["checkpoint_time_s"] == pytest.approx(copy_s, rel=1e-9)
    assert rec["checkpoint_interval_s"] == pytest.approx(rec["time_s"]["step"], rel=1e-9)
    assert blocking["goodput"] < rec["goodput"] < 1


def test_without_failures_the_goodput_is_one_and_the_plan_unchanged():
    """--failure-rate-per-device-hour 0: goodput 1, no MTBF nor interval, days = tokens / rate."""
    rec = ls.estimate(
        model="llama3-8b",
        cluster="h100-64",
        layout="fsdp=64",
        tokens=1e12,
        failure_rate_per_device_hour=0.0,
    ).document["layout"]
    assert (rec["goodput"], rec["job_mtbf_h"], rec["checkpoint_interval_s"]) == (1.0, None, None)
    assert rec["train_days"] == 1e12 / rec["tokens_per_s"] / 86400


def test_a_faster_storage_and_a_shorter_restart_raise_the_goodput():
    """--checkpoint-write-gbytes-per-s-per-node 10 and --restart-time-s 60 on the command line."""
    base = ["estimate", "-m", "llama3-8b", "-c", "h100-1024", "-l", "fsdp=1024", "--format", "json"]
    recs = []
    for extra in ([], ["--checkpoint-write-gbytes-per-s-per-node", "10", "--restart-time-s", "60"]):
        r = runner.invoke(app, [*base, *extra])
        assert r.exit_code == 0, r.stderr
        recs.append(json.loads(r.stdout)["layout"])
    assert recs[1]["checkpoint_time_s"] == pytest.approx(
        recs[0]["checkpoint_time_s"] * 0.9765625 / 10
    )
    assert recs[0]["goodput"] < recs[1]["goodput"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--failure-rate-per-device-hour", "-1"],
            "error: Invalid value for '--failure-rate-per-device-hour': Input should be greater "
            "than or equal to 0",
        ),
        (["--checkpoint-mode", "sometimes"], "error: Invalid value for '--checkpoint-mode'"),
        (
            ["--checkpoint-write-gbytes-per-s-per-node", "0"],
            "error: Invalid value for '--checkpoint-write-gbytes-per-s-per-node': Input should "
            "be greater than 0",
        ),
    ],
)
def test_bad_goodput_options_exit_2_naming_the_option(capsys, argv, message):
    """A bad value is one line naming the flag, exit code 2."""
    assert main(["solve", "--model", "debug", "--cluster", "h100-8", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_the_checkpoint_bandwidth_field_needs_a_source():
    """hardware/h100.yaml carries 2 TB/s / 2,048 hosts per host; without its source the file is refused."""
    assert load_accelerator("h100").checkpoint_write_bytes_per_s_per_node == pytest.approx(
        0.9765625e9
    )
    data = read_yaml(catalogue_file("hardware", "h100", "accelerator"))
    del data["sources"]["checkpoint_write_gbytes_per_s_per_node"]
    with pytest.raises(CatalogueError, match="lacks a source for checkpoint_write_gbytes_per_s"):
        accelerator_from_dict(data, "h100.yaml")


def test_energy_per_step_token_and_run_at_board_power():
    """H100 at its 700 W rating while it computes, its measured 117 W idle power for the rest of the step:
    16,384 x (700 W x compute + 117 W x the other seconds) per step; per token over 2,048 x 8,192
    tokens; the run's kWh at the goodput, x 0.1 per kWh."""
    rec = ls.estimate(**LLAMA3_405B, price_per_kwh=0.1).document["layout"]
    t = rec["time_s"]
    step_j = 16_384 * (700 * t["compute"] + 117 * (t["step"] - t["compute"]))
    assert rec["energy_j_per_step"] == pytest.approx(step_j, rel=1e-12)
    assert rec["energy_j_per_token"] == pytest.approx(step_j / (2048 * 8192), rel=1e-12)
    kwh = 15.6e12 * step_j / (2048 * 8192) / rec["goodput"] / 3.6e6
    assert rec["energy_kwh"] == pytest.approx(kwh, rel=1e-12)
    assert rec["energy_cost"] == pytest.approx(0.1 * kwh, rel=1e-12)


def test_idle_power_counts_outside_compute_and_no_board_power_means_null_energy():
    """With an idle power the non-compute seconds draw it; v5p has no board power: null."""
    assert goodput.step_energy_j(2, 10.0, 4.0, 700.0, 100.0) == 2 * (700 * 4 + 100 * 6)
    assert goodput.step_energy_j(2, 10.0, 4.0, 700.0, None) == 2 * 700 * 10
    rec = ls.estimate(model="debug", cluster="v5p-8", layout="fsdp=8").document["layout"]
    assert rec["energy_j_per_step"] is None and rec["energy_cost"] is None
