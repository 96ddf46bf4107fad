"""The options are declared once (core/options.py); the commands, problem files, API and
docs/cli.md derive from it, and each command's option set is frozen here."""

import subprocess
import sys
from pathlib import Path

import pytest

from layoutsearch.cli import loaded_command, main
from layoutsearch.core.options import WorkloadOptions
from layoutsearch.core.problem import WorkloadRecord, build_workload
from layoutsearch.core.problem_file import ProblemFile
from layoutsearch.report.planning import WHAT_IF_KEYS

ROOT = Path(__file__).resolve().parents[1]

WORKLOAD = [
    "--framework",
    "--precision",
    "--fp8-recipe",
    "--fp4-recipe",
    "--tp-comm-overlap",
    "--no-tp-comm-overlap",
    "--tp-backward-async",
    "--no-tp-backward-async",
    "--grad-accumulation-fusion",
    "--no-grad-accumulation-fusion",
    "--pp-comm-overlap",
    "--no-pp-comm-overlap",
    "--grad-reduce-overlap",
    "--no-grad-reduce-overlap",
    "--ep-comm-overlap",
    "--no-ep-comm-overlap",
    "--deepep",
    "--no-deepep",
    "--fp8-dispatch",
    "--no-fp8-dispatch",
    "--vendor-attention",
    "--no-vendor-attention",
    "--triton-attention",
    "--no-triton-attention",
    "--torch-compile",
    "--no-torch-compile",
    "--compiled-loss",
    "--no-compiled-loss",
    "--cross-entropy",
    "--launch-blocking",
    "--no-launch-blocking",
    "--cuda-graphs",
    "--routing",
    "--routing-cv",
    "--grad-bytes",
    "--moment-bytes",
    "--fused-attention",
    "--no-fused-attention",
    "--fp32-logits",
    "--no-fp32-logits",
    "--hbm-gib",
    "--memory-margin-gib",
    "--power-limit-w",
]
PROBLEM = ["--problem", "--model", "-m", "--cluster", "-c"]
SEARCH = ["--top", "--fix", "--choices", "--only", "--objective", "--time-limit", "--method"]
SEARCH += ["--recompute", "--schedules", "--pipeline-splits", "--cp-flavours", "--offload"]
SEARCH += ["--sequence-parallel", "--no-sequence-parallel"]
GOODPUT = [
    "--failure-rate-per-device-hour",
    "--restart-time-s",
    "--checkpoint-mode",
    "--checkpoint-write-gbytes-per-s-per-node",
    "--price-per-kwh",
]
# what solve and plan both take, first (the searched problem) and last (the run's plan)
SEARCHED = [*PROBLEM, "--seqs", "--seq-len", *WORKLOAD, *SEARCH, "--format"]
PLANNED = ["--tokens", "--price-per-device-hour", "--what-if", *GOODPUT, "--fallback-nodes"]

# Each command's flags, in --help order: changing a command's interface changes this list.
FLAGS = {
    "estimate": [
        *PROBLEM,
        "--layout",
        "-l",
        "--seqs",
        "--seq-len",
        "--microbatches",
        "--first-stage-layers",
        "--last-stage-layers",
        "--balanced-split",
        "--no-balanced-split",
        "--recompute",
        "--zero-stage",
        "--offload",
        "--virtual-stages",
        "--schedule",
        "--cp-flavour",
        "--sequence-parallel",
        "--no-sequence-parallel",
        "--axes",
        "--mfu-convention",
        "--tokens",
        "--format",
        "--price-per-device-hour",
        "--what-if",
        "--against-best",
        *GOODPUT,
        *WORKLOAD,
    ],
    "solve": [*SEARCHED, "--export", "--output", "-o", *PLANNED],
    "plan": [*SEARCHED, "--output", "-o", *PLANNED],
    "explain": [
        *PROBLEM,
        "--seqs",
        "--seq-len",
        *WORKLOAD,
        *SEARCH,
        "--format",
        "--tokens",
        "--price-per-device-hour",
        "--sensitivity",
        "--versus",
        *GOODPUT,
    ],
    "sweep": [
        *PROBLEM,
        "--output",
        "-o",
        "--seqs",
        "--seq-len",
        "--jobs",
        "-j",
        "--executor",
        "--address",
        "--time-limit",
        "--objective",
        "--fresh",
        "--retry-failed",
        "--progress",
        "--no-progress",
        "--max-site-power-mw",
        "--tokens",
        "--price-per-device-hour",
        *GOODPUT,
        *WORKLOAD,
    ],
}


@pytest.mark.parametrize("name", list(FLAGS))
def test_each_command_has_exactly_its_frozen_flags(name):
    """The flags of estimate, solve, plan, explain and sweep are the reviewed lists above, then --wide."""
    command = loaded_command(name)
    assert [o for p in command.params for o in p.opts + p.secondary_opts] == [
        *FLAGS[name],
        "--wide",
    ]


def test_docs_cli_md_is_generated_from_the_declaration():
    """docs/cli.md is what scripts/cli_docs.py writes now (rerun it after changing an option)."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    text = (ROOT / "docs" / "cli.md").read_text()
    assert "| `--seqs` | int | `1024` | 1..16777216 | Global batch in sequences |" in text
    assert "| `--top` | int | `2` | 1..50 |" in text  # explain's own default


def test_problem_file_keys_and_workload_record_derive_from_the_options():
    """A problem file takes every workload option by name; the record validates each option
    named like its Workload field with the option's range."""
    assert set(WorkloadOptions.model_fields) <= set(ProblemFile.model_fields)
    assert {"what_if", "first_stage_layers", "tokens", "export"} <= set(ProblemFile.model_fields)
    assert not {"format", "output", "jobs", "problem_file"} & set(ProblemFile.model_fields)
    cv = WorkloadRecord.model_fields["routing_cv"]
    assert [getattr(m, "le", None) for m in cv.metadata if hasattr(m, "le")] == [10.0]
    assert WorkloadRecord.model_fields["cuda_graphs"].default == "none"


def test_build_workload_converts_the_units_once():
    """GiB become bytes, moment bytes become optimizer bytes per parameter (two moments)."""
    wl = build_workload(64, 1024, 1e9, hbm_gib=96, moment_bytes=2, precision="fp8")
    assert wl.hbm_bytes == 96 * 2**30 and wl.optimizer_bytes_per_param == 4
    assert wl.precision == "fp8" and wl.training_tokens == 1e9 and wl.routing_cv == 0.15
    with pytest.raises(TypeError, match="unknown workload options hbm_gb"):
        build_workload(64, 1024, hbm_gb=96)


def test_the_what_if_help_lists_the_what_if_keys():
    """--what-if's description names exactly report.planning's keys."""
    from layoutsearch.core.options import PlanOptions

    assert PlanOptions.model_fields["what_if"].description.endswith(", ".join(WHAT_IF_KEYS))


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--seqs", "0"],
            "error: Invalid value for '--seqs': Input should be greater than or equal to 1 (got '0')",
        ),
        (
            ["--framework", "foo"],
            "error: Invalid value for '--framework': Value error, 'foo' is not one of",
        ),
        (
            ["--tokens", "nan"],
            "error: Invalid value for '--tokens': Input should be a finite number (got 'nan')",
        ),
        (
            ["--grad-bytes", "7"],
            "error: Invalid value for '--grad-bytes': Input should be less than or equal to 4 (got '7')",
        ),
    ],
)
def test_a_bad_option_value_is_one_line_naming_the_option(capsys, argv, message):
    """Values are checked by the declaration's models; the error names the flag and the value."""
    assert main(["solve", "--model", "debug", "--cluster", "h100-8", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
