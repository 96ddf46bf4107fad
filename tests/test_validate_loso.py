"""`layoutsearch validate --loso`: the leave-one-source-out refit is opt-in, and its values are those
the per-call refit gave before it was (pinned on six records of tests/data/runs_dev.yaml)."""

from __future__ import annotations

import json

import pytest
import yaml
from builders import LOSO_SUBSET as SUBSET

from layoutsearch.cli import main
from layoutsearch.validation.validate import load_runs, validate_runs

# summary.loso and each record's loso_rel_error as the implementation before --loso computed them
# (the fits now remember the estimates they share; the numbers are the same), re-pinned when the GEMMs
# were costed from their shapes (costs.gemm), with the H200 measurement's physics and with FlashAttention-2 and
# MPT's Triton kernel apart (the fms-fsdp row's attention at FlashAttention-2's own fit, 0.3312), and with that row
# costed eager (rule 30; FlashAttention-2's fit 0.3882; fms-fsdp 0.007880955964789438 before, median 0.029430027100065037), and
# when FSDP2's copies around the ZeRO-3 collectives were costed (Profile.zero_gather_copy_out, zero_grad_copy_in), and when
# the llm-foundry A100 rows stated their bf16 gradient reduction (rule 31; "rule 31" below: the value before), and when the
# Megatron-LM of 2021 and DeepSpeed added each microbatch's gradients in a kernel of their own beside the A100 refit
# (2026-12-06; "12-06" below: the value before); to 1e-9: a least-squares
# fit's last digits move with the BLAS and the machine (1.6e-10 between two of them)
# the rows as rule 33 (Megatron's fp16 gradients, 2026-12-06) costs them; the values before it in the comments;
# re-pinned when the element-wise kernels ran at their measured fractions of the HBM bandwidth (norms 0.617,
# the others 0.885) and the a100 family was refitted beside them ("ew" below: the value before), and when the
# materialised scores' passes were counted whole, the softmax's at the norm rate, beside the a100 refit ("scores":
# the value before; the Narayanan rows' fold refits on the three records of the two other sources, none of which
# materialises its scores), and when the loss's passes over the logits were costed (Megatron-LM's unfused kernel for
# the 2021 rows, PyTorch's eager one for the FSDP rows, XLA's for MaxText's) beside the a100 refit ("loss": the value
# before), and when the fits took Huber's loss at the set's own scale and the a100 family was refitted with it
# ("huber": the value before)
PINNED_LOSO_REL_ERROR = {
    # -0.067456 huber, -0.059124 loss, 0.031474 scores, 0.062091 ew, 0.060120 before rule 33, 0.062749 before 12-06
    "megatron2021-table1-1-7b": -0.06404898090792388,
    # -0.052719 huber, -0.054950 loss, -0.028129 scores, -0.005570 ew, -0.009616 before rule 33, -0.004782 before 12-06
    "megatron2021-table1-18-4b": -0.04982213690401771,
    # 0.004902 loss, 0.011730 scores, -0.012268 ew, -0.010545 before rule 33, -0.013960 before 12-06
    "fmsfsdp-a100-llama2-7b-128gpu": -0.043329349526308514,
    # 0.091997 loss, 0.031483 scores, 0.016469 ew, 0.017459 before rule 33
    "llmfoundry-mpt-a100-40g-7b-seq16384-8gpu-mbs1-ga4": 0.09612375154070074,
    # 0.044047 loss, -0.029311 scores, -0.046502 ew, -0.045376 before rule 33
    "llmfoundry-mpt-a100-40g-7b-seq8192-8gpu-mbs3-ga4": 0.04934328630432261,
    # -0.021187 loss, -0.042558 costed as a serial block
    "maxtext-v5p-2023-32b-1xv5p-128": -0.02163667199872643,
}
PINNED_SUMMARY = {
    "count": 6,
    # 0.051031 huber, 0.049499 loss, 0.028720 scores, 0.018828 ew, 0.019323 before rule 33, 0.018340 before 12-06
    "median_abs_rel_error": 0.04958271160417016,
    # 0.081790 huber, 0.075560 loss, 0.031478 scores, 0.054296 ew, 0.052748 before rule 33, 0.055180 before 12-06
    "p90_abs_rel_error": 0.08008636622431231,
    # -0.032483 huber, -0.008142 loss, -0.004728 scores, -0.008919 ew, -0.010080 before rule 33, -0.009371 before 12-06
    "median_rel_error": -0.03248301076251747,
    # 0.024247 huber, 0.025986 loss, 0.028642 scores, 0.021905 ew, 0.021904587192 before the a100 refit beside the 2021
    # release's all-reduce (rule 32), 0.022228 before rule 33, 0.021586 before 12-06
    "in_sample_median_abs_rel_error": 0.02054390303450304,
}
PINNED_CALIBRATION = {
    "Narayanan et al. 2021": {
        "a100": "matmul_efficiency, overlap_interference refit on 3 records of 2 other sources"
    },
    "fms-fsdp": {
        "a100": "matmul_efficiency, triton_attention_efficiency, overlap_interference refit on 4 "
        "records of 2 other sources; attention_efficiency: the catalogue's 0.3882, fitted on this "
        "source (no other source runs its kernel)"
    },
    "llm-foundry": {
        "a100": "matmul_efficiency, overlap_interference refit on 3 records of 2 other sources; "
        "triton_attention_efficiency: the catalogue's 0.4213, fitted on this source (no other source "
        "runs its kernel)"
    },
    "maxtext": {"v5p": "catalogue values (no other source has records on this family)"},
}


@pytest.fixture(scope="module")
def subset_file(tmp_path_factory, data_file):
    """The six records in a runs file of their own."""
    raw = {r["id"]: r for r in yaml.safe_load(data_file("runs_dev.yaml").read_text())}
    path = tmp_path_factory.mktemp("loso") / "runs.yaml"
    path.write_text(yaml.safe_dump([raw[rid] for rid in SUBSET], sort_keys=False))
    return path


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``layoutsearch.cli.main(argv)``: exit code and stdout."""
    code = main(argv)
    return code, capsys.readouterr().out


def test_without_loso_there_is_no_loso_block_and_the_table_says_it_was_not_run(subset_file, capsys):
    """No --loso: summary.loso is null, no record has a loso_rel_error, and the table ends with a
    line saying the leave-one-source-out refit was not run and how to run it."""
    doc = validate_runs(load_runs(subset_file), rank=False)
    assert doc["summary"]["loso"] is None
    assert [e["loso_rel_error"] for e in doc["records"]] == [None] * len(SUBSET)
    code, out = run_cli(
        ["validate", str(subset_file), "--no-rank", "--max-median-error", "1", "--format", "json"],
        capsys,
    )
    assert code == 0 and json.loads(out)["summary"]["loso"] is None
    code, out = run_cli(
        ["validate", str(subset_file), "--no-rank", "--max-median-error", "1"], capsys
    )
    assert code == 0 and out.splitlines()[-1] == (
        "leave-one-source-out: not run (--loso refits the calibration without each source)"
    )


def test_loso_folds_give_the_values_of_the_previous_implementation(subset_file, capsys):
    """--loso on six records of three a100 sources and one v5p source: every fold's held-out errors,
    the summary and the calibration each fold used are those pinned from the implementation before
    (the MaxText row's since its parallel block is costed as one, 2026-12-05)."""
    code, out = run_cli(
        [
            "validate",
            str(subset_file),
            "--no-rank",
            "--loso",
            "--max-median-error",
            "1",
            "--format",
            "json",
        ],
        capsys,
    )
    doc = json.loads(out)
    loso = doc["summary"]["loso"]
    assert code == 0 and loso["params"] == [
        "matmul_efficiency",
        "attention_efficiency",
        "triton_attention_efficiency",
        "overlap_interference",
    ]
    assert {e["id"]: e["loso_rel_error"] for e in doc["records"]} == pytest.approx(
        PINNED_LOSO_REL_ERROR, rel=1e-9
    )
    assert {k: loso[k] for k in PINNED_SUMMARY} == pytest.approx(PINNED_SUMMARY, rel=1e-9)
    assert {s: g["calibration"] for s, g in loso["by_source"].items()} == PINNED_CALIBRATION
    assert {s: g["count"] for s, g in loso["by_source"].items()} == {
        "Narayanan et al. 2021": 2,
        "fms-fsdp": 1,
        "llm-foundry": 2,
        "maxtext": 1,
    }
    code, out = run_cli(
        ["validate", str(subset_file), "--no-rank", "--loso", "--max-median-error", "1"], capsys
    )
    # median 5.1%, p90 8.2%, in sample 2.4% before the fits took Huber's loss; median 4.9%, p90 7.6%, in sample 2.6%
    # before the loss's passes were costed;
    # median 2.9%, p90 3.1%, in sample 2.9% before the materialised scores' passes were counted whole; median
    # 1.9%, p90 5.4%, in sample 2.2% before the element-wise kernels ran at their measured rates;
    # p90 5.3% before rule 33; p90 5.7%, in sample 2.1% before rule 31
    assert code == 0 and out.splitlines()[-1] == (
        "leave-one-source-out: median |error| 5.0%, p90 8.0% over 6 records predicted from the "
        "other sources' calibration (in sample: median 2.1%)"
    )


def test_the_loso_option_is_documented_in_the_help(capsys, monkeypatch):
    """`validate --help` lists --loso / --no-loso with what it does and that it is off by default."""
    monkeypatch.setenv("COLUMNS", "120")
    code, out = run_cli(["validate", "--help"], capsys)
    text = " ".join(out.replace("│", " ").split())
    assert code == 0 and "--loso --no-loso" in text
    for words in (
        "refit the calibration without each source in turn and predict that source",
        "(leave one source out: summary.loso and each record's loso_rel_error; takes minutes)",
        "Off by default: then summary.loso is null",
    ):
        assert words in text, words
