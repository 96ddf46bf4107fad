"""The command line: output, JSON contract and exit codes (0 ok, 1 infeasible, 2 bad input)."""

import json
import subprocess
import sys

import pytest
from builders import LLAMA70B_V5P_ESTIMATE
from typer.testing import CliRunner

from layoutsearch.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_models_lists_exact_parameter_counts():
    r = run("models", "--format", "json")
    assert r.exit_code == 0
    rows = {row["id"]: row for row in json.loads(r.stdout)}
    assert rows["llama70b"]["params"] == 70_553_706_496
    assert rows["gpt3-175b"]["mlp"] == "plain"


def test_clusters_lists_accelerators_and_axes():
    r = run("clusters")
    assert r.exit_code == 0
    assert "x16(wrap) x y16(wrap) x z32(wrap)" in r.stdout  # v5p-8192
    assert "node8 x scale_out128" in r.stdout  # h100-1024


def test_estimate_json_follows_the_output_contract():
    r = run(*LLAMA70B_V5P_ESTIMATE, "--format", "json")
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["params"]["total"] == 70_553_706_496
    lay = doc["layout"]
    assert lay["degrees"] == {"dp": 1, "fsdp": 1024, "tp": 8, "pp": 1, "cp": 1, "ep": 1, "etp": 1}
    assert lay["axes"] == {"tp": [["z", 8]], "fsdp": [["z", 4], ["y", 16], ["x", 16]]}
    for key in ("state", "activations", "temporary", "peak", "capacity"):
        assert key in lay["memory_bytes"]
    t = lay["time_s"]
    assert t["step"] == pytest.approx(
        t["compute"] + t["exposed_comm"] + t["bubble"] + t["overhead"]
    )
    assert lay["tokens_per_s"] == pytest.approx(1024 * 4096 / t["step"])
    assert 0 < lay["mfu"] < 1 and lay["fits"] is True and lay["kv_replication"] == 1
    assert doc["problem"]["num_devices"] == 8192 and doc["violations"] == []


def test_estimate_table_shows_moments_components_and_mfu():
    r = run("estimate", "--layout", "fsdp=256,tp=32", "--tokens", "15e12")
    assert r.exit_code == 0
    for text in (
        "forward_end",
        "backward",
        "optimizer_step",
        "exposed_comm/tp",
        "MFU",
        "tokens/s",
        "KV heads replicated x4",
        "days for 1.5e+13 tokens",
    ):
        assert text in r.stdout, text


def test_layout_that_does_not_fit_exits_1_with_the_numbers():
    r = run(
        "estimate",
        "--model",
        "llama3-405b",
        "--cluster",
        "h100-64",
        "--layout",
        "dp=8,tp=8",
        "--zero-stage",
        "0",
        "--seqs",
        "64",
    )
    assert r.exit_code == 1
    assert "does not fit: needs" in r.stderr and "GB available" in r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--layout", "fsdp=1000,tp=8"],
            "dp(1) x fsdp(1000) x tp(8) x pp(1) x cp(1) = 8000, but cluster v5p-8192 has 8192 devices",
        ),
        (
            ["--layout", "fsdp=256,tp=32", "--model", "llama2-13b"],
            "tp(32) does not divide num_heads(40)",
        ),
        (
            ["--cluster", "h100-8"],
            "--layout fsdp=1024,tp=8 is the default (the main job's layout on v5p-8192); give the degrees for "
            "h100-8: dp(1) x fsdp(1024) x tp(8) x pp(1) x cp(1) = 8192, but cluster h100-8 has 8 devices",
        ),
        (["--layout", "fsdp=1024,tq=8"], "unknown degree 'tq' (did you mean 'tp'?)"),
        (["--layout", "fsdp=0"], "--layout fsdp: 0 must be >= 1"),
        (["--model", "llama71b"], "unknown model 'llama71b' (did you mean 'llama70b'?)"),
        (["--cluster", "h100-12"], "12 GPUs is not a whole number of 8-GPU nodes"),
        (["--zero-stage", "5"], "zero_stage(5) must be 0, 1, 2 or 3"),
        (["--layout", "fsdp=512,tp=8,pp=2", "--microbatches", "1"], "num_microbatches(1) < pp(2)"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    r = run("estimate", *args)
    assert r.exit_code == 2
    assert message in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_usage_errors_are_one_line_through_the_console_script():
    """Click usage errors (unknown option) also come out as one line with exit 2."""
    p = subprocess.run(
        [sys.executable, "-m", "layoutsearch.cli", "estimate", "--bogus"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert p.stderr == "error: No such option: --bogus\n"


def test_the_console_entry_returns_mains_code_and_freezes_the_objects(monkeypatch):
    """``cli.run`` (the console script, ``python -m layoutsearch``) returns ``main``'s exit code
    and leaves the process's objects frozen for the exit (``gc.freeze``)."""
    import gc

    import layoutsearch.cli as cli

    monkeypatch.setattr(cli, "main", lambda: 3)
    before = gc.get_freeze_count()
    try:
        assert cli.run() == 3
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_the_console_script_imports_the_command_line_without_collecting():
    """The console script (``_console.run``) imports the command line with the cyclic collector
    paused: a plain import of ``layoutsearch.cli`` runs over a hundred collections (112 young,
    10 middle on Python 3.11) that find nothing; through the console script `layoutsearch
    --version` runs none, leaves the imported objects frozen and the collector on."""
    probe = (
        "import gc, sys\n"
        "from layoutsearch import _console\n"
        "sys.argv = ['layoutsearch', '--version']\n"
        "before = [s['collections'] for s in gc.get_stats()]\n"
        "code = _console.run()\n"
        "ran = [s['collections'] - b for s, b in zip(gc.get_stats(), before)]\n"
        "print(code, gc.isenabled(), ran, gc.get_freeze_count() > 10_000)\n"
    )
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "0 True [0, 0, 0] True"
    plain = "import gc, layoutsearch.cli; print(gc.get_stats()[0]['collections'])"
    q = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True)
    assert int(q.stdout) > 50


def test_the_solver_line_says_what_each_method_costed():
    """CP-SAT names the rows its bounds left it; the enumerator costs every row of the space (1,419 for
    llama3-8b on 16 H100s), and says so instead of naming CP-SAT."""
    enumerated = run(
        "solve", "--model", "llama3-8b", "--cluster", "h100-16", "--method", "enumerate"
    )
    assert enumerated.exit_code == 0
    assert "solver enumerate: OPTIMAL" in enumerated.stdout
    assert "every one of 1,419 (shape, K) rows costed" in enumerated.stdout
    assert "CP-SAT" not in enumerated.stdout.splitlines()[-1]
    proven = run("solve", "--model", "llama3-8b", "--cluster", "h100-16")
    assert "row(s) left for CP-SAT by the bounds" in proven.stdout.splitlines()[-1]
