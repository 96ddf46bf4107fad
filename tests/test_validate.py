"""`layoutsearch validate` and `calibrate`: record mapping, errors, statistics, calibration fit."""

import copy
import datetime
import shutil
from pathlib import Path

import pytest
import yaml

from layoutsearch.validation.calibrate import calibrate, with_calibration, write_calibration
from layoutsearch.core.catalogue import accelerator_from_dict, read_yaml
from layoutsearch.core.errors import CatalogueError
from layoutsearch.costs.estimate import estimate
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.validation.validate import (error_stats, hardware_flops_per_token, load_runs, rank_published,
                                   record_to_problem, spearman, summarize, validate_runs)

RUNS = Path(__file__).parents[1].parent / "shared/validation/runs_dev.yaml"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    if not RUNS.is_file():
        pytest.fail(f"{RUNS} not found: the tests need ../shared beside the repository")
    return {r["id"]: r for r in load_runs(RUNS)}


def degrees(problem) -> dict:
    layout = problem[3]
    return {**layout.degrees, "zero_stage": layout.zero_stage}


# ----------------------------------------------------------------------------- mapping
def test_megatron_distributed_optimizer_shards_over_all_dp_ranks(runs):
    """Megatron-Core dp=48, fsdp=1, ZeRO-1 -> engine dp 1 x fsdp 48; ZeRO-0 keeps dp replicated."""
    core = record_to_problem(runs["megatron-core-h100-2024-32b"])
    assert degrees(core) == {"dp": 1, "fsdp": 48, "tp": 8, "pp": 1, "cp": 1, "zero_stage": 1}
    assert core[3].sequence_parallel is True  # null -> on with tp > 1
    assert core[3].recompute == "none" and core[3].num_microbatches == 192 // 48
    t1 = record_to_problem(runs["megatron2021-table1-18-4b"])
    assert degrees(t1) == {"dp": 32, "fsdp": 1, "tp": 8, "pp": 1, "cp": 1, "zero_stage": 0}
    assert t1[2].num_devices == 256 and t1[2].axis("scale_out").bytes_per_s_per_direction == 25e9


def test_bigscience_sequence_parallel_defaults_off(runs):
    """BLOOM (Megatron-DeepSpeed, early 2022) predates sequence parallelism: null -> False."""
    problem = record_to_problem(runs["bloom-prequel-20220225-181b-dp8-tp8-pp6-mbs4-gbs2048"])
    assert problem[3].sequence_parallel is False
    assert degrees(problem)["fsdp"] == 8 and degrees(problem)["dp"] == 1


def test_hsdp_shards_inside_the_node_and_replicates_across(runs):
    """fms-fsdp 7b: dp 128 = 8 sharded (node) x 16 replicated (scale-out)."""
    model, workload, cluster, layout = record_to_problem(runs["fmsfsdp-a100-llama2-7b-128gpu"])
    assert (layout.dp, layout.fsdp, layout.zero_stage) == (16, 8, 3)
    assert dict(layout.axes)["fsdp"] == (("node", 8),) and dict(layout.axes)["dp"] == (("scale_out", 16),)


def test_maxtext_multislice_puts_the_replicas_on_dcn(runs):
    """MaxText 2 x v5p-128: 2 slices of 64 chips, fsdp 16 x tp 4 inside a slice, dp 2 over DCN."""
    model, workload, cluster, layout = record_to_problem(runs["maxtext-v5p-2023-32b-2xv5p-128"])
    assert cluster.name == "v5p-64x2" and cluster.num_slices == 2 and cluster.num_devices == 128
    assert (layout.dp, layout.fsdp, layout.tp, layout.zero_stage) == (2, 16, 4, 3)
    assert dict(layout.axes)["dp"] == (("dcn", 2),)
    single = record_to_problem(runs["maxtext-v5p-2023-32b-1xv5p-128"])
    assert single[2].num_slices == 1 and single[3].dp == 1


def test_fp8_and_rejected_records_are_skipped_with_a_reason(runs):
    """fp8 is not modelled; a layout the engine rejects carries the engine's message."""
    assert "fp8" in record_to_problem(runs["dgxc-h100-llama3-1-8b-fp8-8gpu"])
    reason = record_to_problem(runs["bloom176b-production-384gpu"])
    assert isinstance(reason, str) and "num_layers(70)" in reason
    doc = validate_runs([runs["dgxc-h100-llama3-1-8b-fp8-8gpu"], runs["dgxc-h100-llama3-1-8b-bf16-8gpu"]])
    assert doc["summary"]["skipped"] == 1 and doc["summary"]["count"] == 1
    assert doc["records"][0]["skipped_reason"].startswith("fp8") and doc["records"][0]["rel_error"] is None


# ----------------------------------------------------------------------------- errors
def write_runs(tmp_path, records) -> Path:
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(records, sort_keys=False))
    return path


def test_malformed_record_is_one_line_naming_record_and_field(runs, tmp_path):
    """A wrong type and an unknown key are one-line CatalogueErrors with the record id and the field."""
    bad = copy.deepcopy(runs["megatron2021-table1-1-7b"])
    bad["layout"]["tp"] = "eight"
    with pytest.raises(CatalogueError) as err:
        load_runs(write_runs(tmp_path, [bad]))
    msg = str(err.value)
    assert "megatron2021-table1-1-7b" in msg and "layout.tp" in msg and "\n" not in msg
    typo = copy.deepcopy(runs["megatron2021-table1-1-7b"])
    typo["layout"]["microbatch_seq"] = typo["layout"].pop("microbatch_seqs")
    with pytest.raises(CatalogueError, match=r"unknown key 'microbatch_seq' \(did you mean 'microbatch_seqs'\?\)"):
        load_runs(write_runs(tmp_path, [typo]))


def test_record_rules_across_fields(runs, tmp_path):
    """Duplicate ids and a missing throughput without OOM are rejected; an unknown accelerator,
    an unmodelled precision and a power-capped part are skipped per record, with the reason."""
    rec = runs["megatron2021-table1-1-7b"]
    with pytest.raises(CatalogueError, match="duplicate id"):
        load_runs(write_runs(tmp_path, [rec, rec]))
    unknown = copy.deepcopy(rec)
    unknown["cluster"]["accelerator"] = "a100-80g"
    (loaded,) = load_runs(write_runs(tmp_path, [unknown]))
    assert record_to_problem(loaded) == "unknown accelerator 'a100-80g' (did you mean 'a100-80gb'?): not in the catalogue"
    tf32 = copy.deepcopy(rec)
    tf32["workload"]["precision"] = "tf32"
    assert record_to_problem(load_runs(write_runs(tmp_path, [tf32]))[0]).startswith("precision 'tf32'")
    capped = copy.deepcopy(rec)
    capped["source"] += ", H100 SXM at 500 W"
    capped["cluster"]["accelerator"] = "h100"
    assert record_to_problem(load_runs(write_runs(tmp_path, [capped]))[0]).startswith("power-capped part")
    h800 = copy.deepcopy(rec)
    h800["source"] += " (H800 cluster)"
    h800["cluster"]["accelerator"] = "h100"
    cluster = record_to_problem(load_runs(write_runs(tmp_path, [h800]))[0])[2]
    assert cluster.axis("node").bytes_per_s_per_direction == 200e9
    missing = copy.deepcopy(rec)
    missing["measured"]["tokens_per_s_per_device"] = None
    with pytest.raises(CatalogueError, match="measured.tokens_per_s_per_device"):
        load_runs(write_runs(tmp_path, [missing]))


# ----------------------------------------------------------------------------- numbers
def test_megatron_eq3_hardware_flops_match_the_record(runs):
    """Narayanan 2021 eq. 3 per token (96 l h^2 (1 + s/6h + V/16lh)) = 1.4750e10 for the 1.7B model."""
    model, workload, _, layout = record_to_problem(runs["megatron2021-table1-1-7b"])
    assert hardware_flops_per_token(model, workload.seq_len, layout.recompute) == pytest.approx(1.4750e10, rel=1e-3)


def test_error_statistics_and_summary_on_a_tiny_set():
    """median/p90 of |rel error| (linear interpolation), fit accuracy, skipped count, pass/fail."""
    assert error_stats([0.1, -0.2, 0.3, -0.4, 0.5]) == pytest.approx(
        {"count": 5, "median_abs_rel_error": 0.3, "p90_abs_rel_error": 0.46, "median_rel_error": 0.1})

    def entry(i, err, oom=False, fits=True, skipped=None):
        return {"id": f"r{i}", "accelerator": "h100" if i % 2 else "v5p", "source_family": "x", "rel_error": err,
                "measured_oom": oom, "predicted_fits": fits, "skipped_reason": skipped, "reason": None}

    entries = [entry(1, 0.1), entry(2, -0.2), entry(3, 0.3, fits=False), entry(4, None, oom=True, fits=False),
               entry(5, None, skipped="fp8 precision: later")]
    s = summarize(entries, [], max_median_error=0.25)
    assert (s["count"], s["with_measured_throughput"], s["skipped"]) == (4, 3, 1)
    assert s["median_abs_rel_error"] == pytest.approx(0.2) and s["passed"] is True
    assert s["fit_accuracy"] == pytest.approx(3 / 4) and s["fit_mismatches"] == ["r3"]
    assert s["by_accelerator"]["h100"]["count"] == 2 and s["by_accelerator"]["v5p"]["skipped"] == 0
    assert s["worst"][0]["id"] == "r3" and s["bloom_sweep_spearman"] is None
    assert summarize(entries, [], max_median_error=0.1)["passed"] is False


def test_spearman_rank_correlation():
    """+1 for a monotone relation, -1 reversed, average ranks for ties, None below 3 points."""
    assert spearman([1, 2, 3, 4], [10, 20, 35, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833, rel=1e-6)
    assert spearman([1, 2], [2, 1]) is None


def test_validate_document_follows_the_output_contract(runs):
    """rel_error = predicted / measured - 1; an OOM record has no error and is a fit check."""
    recs = [runs["megatron2021-table1-1-7b"], runs["bloom-prequel-20220225-181b-dp32-tp2-pp6-mbs2-gbs2048"]]
    doc = validate_runs(recs)
    ok, oom = doc["records"]
    for key in ("id", "measured_tokens_per_s_per_device", "predicted_tokens_per_s_per_device", "rel_error",
                "measured_oom", "predicted_fits", "published_layout_rank", "best_predicted_speedup"):
        assert key in ok
    assert ok["rel_error"] == pytest.approx(ok["predicted_tokens_per_s_per_device"] / 9287.9 - 1)
    assert ok["predicted_mfu"] > 0 and ok["reason"].startswith("predicted")
    assert oom["measured_oom"] is True and oom["rel_error"] is None and oom["predicted_fits"] is False
    assert doc["summary"]["count"] == 2 and doc["summary"]["fit_accuracy"] == 1.0


def test_rank_published_against_the_search(runs):
    """Rank = 1 + candidates predicted faster; speed-up = published step / the solver's best step."""
    from layoutsearch.search import solve

    rec = runs["megatron2021-table1-18-4b"]
    model, workload, cluster, layout = record_to_problem(rec)
    published = estimate(model, workload, cluster, layout, strict=False).step_time_s
    result = rank_published(rec)
    best = solve(model, workload, cluster, top_k=1)
    assert result["published_layout_rank"] >= 1 and result["candidates"] > 1000
    assert result["best_predicted_speedup"] == pytest.approx(published / best.layouts[0].step_time_s, rel=1e-4)
    assert result["best_predicted_speedup"] >= 1.0


# ----------------------------------------------------------------------------- calibration
def test_with_calibration_rebuilds_the_axes_efficiencies():
    """NVLink axes take collective_efficiency, scale-out axes scale_out_efficiency."""
    cluster = with_calibration(resolve_cluster("h100-16"), collective_efficiency=0.5, scale_out_efficiency=0.3,
                               matmul_efficiency=0.6)
    assert cluster.axis("node").efficiency == 0.5 and cluster.axis("scale_out").efficiency == 0.3
    assert cluster.accelerator.matmul_efficiency == 0.6 and resolve_cluster("h100-16").accelerator.matmul_efficiency != 0.6


def synthetic(runs, ids, **truth) -> list[dict]:
    """Copies of records whose measured throughput is the engine's under the calibration ``truth``."""
    out = []
    for rid in ids:
        rec = copy.deepcopy(runs[rid])
        model, workload, cluster, layout = record_to_problem(rec)
        est = estimate(model, workload, with_calibration(cluster, **truth), layout, strict=False)
        rec["measured"]["tokens_per_s_per_device"] = est.tokens_per_s / cluster.num_devices
        out.append(rec)
    return out


def test_calibrate_recovers_known_efficiencies(runs):
    """Measured values built with matmul 0.6 and NVLink 0.5 are fitted back within 2%."""
    ids = ["megatron-core-h100-2024-7-1b", "megatron-core-h100-2024-16b", "megatron-core-h100-2024-32b",
           "dgxc-h100-llama3-1-70b-bf16-64gpu", "llmfoundry-mpt-h100-13b-seq2048-8gpu-mbs2-ga1",
           "llmfoundry-mpt-h100-7b-seq4096-8gpu-mbs16-ga2"]
    records = synthetic(runs, ids, matmul_efficiency=0.6, collective_efficiency=0.5)
    fit = calibrate(records, accelerators=["h100"], params=("matmul_efficiency", "collective_efficiency"))["h100"]
    assert fit["fitted"]["matmul_efficiency"] == pytest.approx(0.6, rel=0.02)
    assert fit["fitted"]["collective_efficiency"] == pytest.approx(0.5, rel=0.02)
    assert fit["after"]["p90_abs_rel_error"] < 1e-3 < fit["before"]["p90_abs_rel_error"]


def test_write_calibration_rewrites_only_the_calibration_values(tmp_path):
    """Values in YAML units, comments and other lines kept, sources.calibration names the fit."""
    shutil.copy(REPO / "hardware/h100.yaml", tmp_path / "h100.yaml")
    before = (tmp_path / "h100.yaml").read_text().splitlines()
    fitted = {"h100": {"records": 42, "fitted": {"matmul_efficiency": 0.5432, "microbatch_overhead_s": 3.5e-4}}}
    write_calibration(fitted, tmp_path, today=datetime.date(2026, 1, 2))
    after = (tmp_path / "h100.yaml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 3
    assert "  matmul_efficiency: 0.5432" in after and "  microbatch_overhead_us: 350" in after
    assert any("fitted by layoutsearch calibrate on runs_dev.yaml (42 records) on 2026-01-02" in line for line in after)
    acc = accelerator_from_dict(read_yaml(tmp_path / "h100.yaml"), "h100.yaml")
    assert acc.matmul_efficiency == 0.5432 and acc.microbatch_overhead_s == pytest.approx(3.5e-4)


# ----------------------------------------------------------------------------- command line
def _subset(tmp_path, runs, ids):
    import yaml as _yaml
    path = tmp_path / "runs.yaml"
    path.write_text(_yaml.safe_dump([runs[i] for i in ids], sort_keys=False))
    return path


def test_validate_cli_exit_codes_and_json(tmp_path, runs):
    """JSON per OUTPUT.md; exit 1 when the median error exceeds the limit; 2 for a malformed file."""
    import json
    from typer.testing import CliRunner
    from layoutsearch.cli import app

    path = _subset(tmp_path, runs, ["megatron2021-table1-18-4b", "maxtext-v5p-2023-128b-1xv5p-256"])
    r = CliRunner().invoke(app, ["validate", str(path), "--format", "json", "--no-rank"])
    doc = json.loads(r.stdout)
    assert {"records", "summary"} <= set(doc) and doc["summary"]["count"] == 2
    for rec in doc["records"]:
        assert rec["rel_error"] == pytest.approx(rec["predicted_tokens_per_s_per_device"]
                                                 / rec["measured_tokens_per_s_per_device"] - 1)
    assert r.exit_code == (0 if doc["summary"]["median_abs_rel_error"] <= 0.10 else 1)
    r = CliRunner().invoke(app, ["validate", str(path), "--no-rank", "--max-median-error", "0.0"])
    assert r.exit_code == 1 and "exceeds 0.0%" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n  source: [unclosed\n")
    r = CliRunner().invoke(app, ["validate", str(bad)])
    assert r.exit_code == 2 and "malformed YAML" in r.stderr and r.stderr.count("\n") == 1


def test_calibrate_cli_writes_only_when_asked(tmp_path, runs):
    from typer.testing import CliRunner
    from layoutsearch.core.catalogue import catalogue_dir
    from layoutsearch.cli import app

    before = (catalogue_dir("hardware") / "a100-40gb.yaml").read_text()
    path = _subset(tmp_path, runs, [i for i in runs if i.startswith("llmfoundry-mpt-a100-40g-7b")][:4])
    r = CliRunner().invoke(app, ["calibrate", str(path), "--accelerator", "a100-40gb"])
    assert r.exit_code == 0 and "a100-40gb" in r.stdout and "->" in r.stdout
    assert (catalogue_dir("hardware") / "a100-40gb.yaml").read_text() == before
    r = CliRunner().invoke(app, ["calibrate", str(path), "--fit", "matmul_eficiency"])
    assert r.exit_code == 2 and "did you mean 'matmul_efficiency'" in r.stderr


def test_tpu_records_larger_than_a_slice_become_multislice(runs, tmp_path):
    """512 v5e chips (pods of 256): two slices over DCN; a record the engine cannot cost is skipped, not fatal."""
    rec = copy.deepcopy(runs["dgxc-h100-llama3-1-8b-bf16-64gpu"])
    rec["cluster"].update(accelerator="v5e", num_devices=512, devices_per_node=None, scale_out_gbytes_per_s_per_device=None)
    lay = rec["layout"]
    lay.update(dp=512 // (lay["tp"] * lay["pp"] * lay["cp"]), fsdp=1, zero_stage=1)
    rec["workload"]["global_batch_seqs"] = lay["dp"] * lay["microbatch_seqs"] * lay["num_microbatches"]
    (loaded,) = load_runs(write_runs(tmp_path, [rec]))
    _, _, cluster, _ = record_to_problem(loaded)
    assert cluster.num_slices == 2 and cluster.axis("dcn").size == 2 and cluster.num_devices == 512
    weird = copy.deepcopy(loaded)
    weird["layout"]["pp"] = 7  # 32 layers over 7 stages
    entry = validate_runs([loaded, weird], rank=False)["records"][1]
    assert entry["skipped_reason"].startswith("engine rejects the layout") and "pp(7)" in entry["skipped_reason"]


def test_tp_overlap_rule_by_source(runs):
    """NeMo (dgxc) and Megatron-Core README runs overlap TP with GEMMs; Megatron 2021 and MaxText do not."""
    from layoutsearch.validation.validate import tp_comm_overlap
    assert tp_comm_overlap(runs["dgxc-h100-llama3-1-70b-bf16-64gpu"])
    assert tp_comm_overlap(runs["megatron-core-h100-2024-70b"])
    assert not tp_comm_overlap(runs["megatron2021-table1-18-4b"])
    assert not tp_comm_overlap(runs["maxtext-v5p-2023-128b-1xv5p-256"])
    _, workload, _, _ = record_to_problem(runs["megatron-core-h100-2024-70b"])
    assert workload.tp_comm_overlap
