"""Cluster files (`--cluster PATH.yaml`) and problem files (`--problem PATH.yaml`): the same
factor graphs and layouts as the names, command-line precedence, one-line errors naming the file
and the field, and the examples under examples/."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import catalogue_dir
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.problem import Problem
from layoutsearch.core.problem_file import load_problem_file
from layoutsearch.core.specs import Workload
from layoutsearch.core.topology import (
    CustomCluster,
    cluster_factors,
    load_cluster_file,
    resolve_cluster,
)
from layoutsearch.core.units import GB, GIB

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def solve_json(*args) -> dict:
    r = run("solve", "--format", "json", *args)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def without_walls_and_cluster(doc: dict) -> dict:
    """A solve document less its wall times and the problem's cluster fields (a name or a path)."""
    doc = json.loads(json.dumps(doc))
    doc["solver"] = {k: v for k, v in doc["solver"].items() if "wall" not in k}
    for key in ("cluster", "cluster_spec"):
        doc["problem"].pop(key, None)
    return doc


def factor_graphs(factors) -> list:
    return [
        (f.graph, sorted(map(repr, f.nodes(data=True))), sorted(map(repr, f.edges(data=True))))
        for f in factors
    ]


def one_error_line(r, *parts: str) -> str:
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for part in parts:
        assert part in r.stderr, (part, r.stderr)
    return r.stderr


# ----------------------------------------------------------------------------- cluster files
H100_1024 = {"accelerator": "h100", "devices_per_node": 8, "nodes": 128}
V5P_8192 = {"accelerator": "v5p", "shape": [16, 16, 32]}


@pytest.mark.parametrize(
    "spec, name",
    [
        (H100_1024, "h100-1024"),
        (V5P_8192, "v5p-8192"),
        ({"accelerator": "v5p", "shape": [16, 20, 28], "slices": 4}, "v5p-8960x4"),
        ({"accelerator": "h100", "devices_per_node": 4, "nodes": 1}, "h100-4"),
        ({"accelerator": "v5e", "shape": [16, 16]}, "v5e-256"),
    ],
)
def test_a_cluster_file_builds_the_factor_graphs_and_axes_of_its_name(tmp_path, spec, name):
    path = str(write(tmp_path / "c.yaml", spec))
    named, filed = resolve_cluster(name), resolve_cluster(path)
    assert isinstance(filed, CustomCluster) and filed.name == path
    assert filed.axes == named.axes and filed.num_slices == named.num_slices
    # a file's node is devices_per_node GPUs; the name h100-4 is half of an 8-GPU node (the same one axis)
    same = replace(filed.accelerator, devices_per_node=named.accelerator.devices_per_node)
    assert same == named.accelerator and (filed.accelerator == named.accelerator) == (
        name != "h100-4"
    )
    assert filed.num_devices == named.num_devices
    acc_n, factors_n = cluster_factors(name)
    acc_f, factors_f = cluster_factors(path)
    assert acc_f == filed.accelerator and factor_graphs(factors_f) == factor_graphs(factors_n)


@pytest.mark.parametrize("spec, name", [(H100_1024, "h100-1024"), (V5P_8192, "v5p-8192")])
def test_solve_on_a_cluster_file_gives_the_layouts_of_its_name(tmp_path, spec, name):
    path = write(tmp_path / "c.yaml", spec)
    by_file, by_name = (
        solve_json("--model", "llama70b", "--cluster", path),
        solve_json("--model", "llama70b", "--cluster", name),
    )
    assert by_file["layouts"] and by_file["layouts"] == by_name["layouts"]
    assert without_walls_and_cluster(by_file) == without_walls_and_cluster(by_name)
    assert by_file["problem"]["cluster"] == str(path) and "cluster_spec" not in by_name["problem"]


def test_the_example_cluster_file_is_h100_1024():
    assert (
        resolve_cluster(str(EXAMPLES / "h100-1024.cluster.yaml")).axes
        == resolve_cluster("h100-1024").axes
    )


def test_the_record_carries_the_cluster_file_so_export_needs_no_file(tmp_path):
    """The problem record holds the resolved description; from_record and export rebuild the cluster
    from it after the file is gone."""
    path = write(
        tmp_path / "c.yaml",
        {**H100_1024, "nodes": 2, "hbm_gib": 100, "scale_out_gbytes_per_s_per_device": 25},
    )
    problem = Problem.build("debug", str(path), Workload(global_batch_seqs=64, seq_len=1024))
    record = json.loads(json.dumps(problem.record()))
    assert record["cluster_spec"] == {
        "accelerator": "h100",
        "hbm_gib": 100.0,
        "devices_per_node": 8,
        "nodes": 2,
        "scale_out_gbytes_per_s_per_device": 25.0,
    }
    doc = solve_json("--model", "debug", "--cluster", path, "--seqs", "64", "--seq-len", "1024")
    path.unlink()
    back = Problem.from_record(record)
    assert back.cluster == problem.cluster and back.cluster_name == str(path)
    assert back.cluster.accelerator.hbm_bytes == 100 * GIB
    with pytest.raises(
        CatalogueError,
        match=r"^problem: field 'cluster_spec\.nodes': Input should be a valid integer",
    ):
        Problem.from_record(record | {"cluster_spec": {**record["cluster_spec"], "nodes": "2"}})
    result = tmp_path / "result.json"
    result.write_text(json.dumps(doc))
    r = run("export", result, "--to", "megatron")
    assert r.exit_code == 0, r.stderr
    assert f"cluster: {path} (16 h100 devices)" in r.stdout


def test_the_custom_4_gpu_cluster_solves():
    path = EXAMPLES / "custom-4gpu-nodes.cluster.yaml"
    cluster = load_cluster_file(str(path))
    node, scale_out = cluster.axes
    assert (node.name, node.size, scale_out.size) == ("node", 4, 32)
    assert (
        scale_out.bytes_per_s_per_direction == 25 * GB
        and node.bytes_per_s_per_direction == 300 * GB
    )
    assert cluster.accelerator.hbm_bytes == 94 * GIB and cluster.accelerator.devices_per_node == 4
    assert cluster.name == "custom-4gpu-nodes"
    doc = solve_json("--model", "llama3-8b", "--cluster", path, "--seqs", "256")
    assert doc["solver"]["status"] == "OPTIMAL" and doc["problem"]["num_devices"] == 128
    assert doc["layouts"][0]["memory_bytes"]["capacity"] == pytest.approx((94 - 3) * GIB)


def test_overrides_reach_the_axes(tmp_path):
    """NIC, NVLink and DCN bandwidths and HBM of a file differ from the catalogue's where given."""
    gpu = load_cluster_file(
        str(
            write(
                tmp_path / "g.yaml",
                {
                    **H100_1024,
                    "scale_out_gbytes_per_s_per_device": 12.5,
                    "nvlink_gbytes_per_s_per_direction": 200,
                },
            )
        )
    )
    assert gpu.axis("scale_out").bytes_per_s_per_direction == 12.5 * GB
    assert gpu.axis("node").bytes_per_s_per_direction == 200 * GB
    tpu = load_cluster_file(
        str(write(tmp_path / "t.yaml", {**V5P_8192, "slices": 2, "dcn_gbytes_per_s_per_chip": 25}))
    )
    assert tpu.axis("dcn").bytes_per_s_per_direction == 25 * GB and tpu.num_devices == 16384


def test_an_inline_accelerator_is_validated_like_the_catalogue(tmp_path):
    spec = yaml.safe_load((catalogue_dir("hardware") / "h100.yaml").read_text()) | {
        "id": "h100-custom"
    }
    cluster = load_cluster_file(
        str(write(tmp_path / "c.yaml", {"accelerator_spec": spec, "nodes": 4}))
    )
    assert cluster.accelerator.id == "h100-custom" and cluster.num_devices == 32
    with pytest.raises(
        CatalogueError, match=r"c\.yaml: field 'accelerator_spec': field 'peak_bf16_tflops'"
    ):
        load_cluster_file(
            str(
                write(
                    tmp_path / "c.yaml",
                    {"accelerator_spec": spec | {"peak_bf16_tflops": "fast"}, "nodes": 4},
                )
            )
        )


@pytest.mark.parametrize(
    "spec, parts",
    [
        ({"accelerator": "h100", "nodes": "many"}, ["field 'nodes'", "valid integer", "'many'"]),
        ({"accelerator": "h100", "node": 4}, ["unknown key 'node'", "did you mean 'nodes'?"]),
        ({"nodes": 4}, ["field 'accelerator' is missing", "accelerator_spec"]),
        ({"accelerator": "h10", "nodes": 4}, ["field 'accelerator'", "did you mean 'h100'?"]),
        (
            {"accelerator": "h100", "nodes": 150000},
            ["field 'nodes'", "1,200,000 devices is over the limit of 1,048,576"],
        ),
        (
            {"accelerator": "v5p", "shape": [16, 20, 28], "slices": 118},
            ["field 'slices'", "1,057,280 devices is over the limit"],
        ),
        ({"accelerator": "h100"}, ["field 'nodes' is missing"]),
        ({"accelerator": "v5p", "nodes": 4}, ["field 'nodes' is for GPU clusters", "give 'shape'"]),
        ({"accelerator": "v5p", "shape": [16, 16]}, ["field 'shape'", "needs 3 dimensions"]),
        (
            {"accelerator": "v5p", "shape": [32, 32, 32]},
            ["field 'shape'", "does not fit in the largest v5p slice"],
        ),
        ({"accelerator": "h100", "nodes": 2, "hbm_gib": -1}, ["field 'hbm_gib'", "greater than 0"]),
        ({"accelerator": "h100", "nodes": None}, ["field 'nodes'", "valid integer (got None)"]),
        (
            {"accelerator": "h100", "accelerator_spec": {}, "nodes": 2},
            ["'accelerator' and 'accelerator_spec'"],
        ),
        ([1, 2], ["must be a mapping"]),
    ],
)
def test_a_bad_cluster_file_is_one_line_naming_the_file_and_the_field(tmp_path, spec, parts):
    path = write(tmp_path / "bad.cluster.yaml", spec)
    for command in (["solve"], ["estimate", "--layout", "fsdp=8"], ["explain"]):
        one_error_line(run(*command, "--cluster", path), str(path), *parts)


def test_a_malformed_or_missing_cluster_file_is_one_line(tmp_path):
    one_error_line(
        run("solve", "--cluster", write(tmp_path / "c.yaml", "nodes: [")),
        "c.yaml",
        "malformed YAML",
    )
    one_error_line(run("solve", "--cluster", tmp_path / "none.yaml"), "none.yaml", "cannot read")


# ----------------------------------------------------------------------------- problem files
def test_the_example_problem_file_is_the_design_notes_choice():
    """FSDP x TP, TP from 8 to 64, gather-volume: tp=8 for 1024 sequences, tp=32 for 256 (docs/search.md)."""
    path = EXAMPLES / "llama70b-v5p.problem.yaml"
    doc = solve_json("--problem", path)
    assert (
        doc["problem"]["cluster"] == "v5p-8192"
        and doc["solver"]["objective_name"] == "gather-volume"
    )
    assert len(doc["layouts"]) == 2 and doc["layouts"][0]["degrees"]["tp"] == 8
    assert solve_json("--problem", path, "--seqs", "256")["layouts"][0]["degrees"]["tp"] == 32
    r = run("estimate", "--problem", path, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["layout"]["degrees"] == {
        "dp": 1,
        "fsdp": 1024,
        "tp": 8,
        "pp": 1,
        "cp": 1,
        "ep": 1,
        "etp": 1,
    }


def test_a_problem_file_gives_the_same_result_as_its_options(tmp_path):
    path = write(
        tmp_path / "p.yaml",
        {
            "model": "llama3-8b",
            "cluster": "h100-64",
            "seqs": 256,
            "seq_len": 2048,
            "fix": {"tp": 2},
            "choices": {"pp": [1, 2]},
            "only": ["fsdp", "tp", "pp"],
            "recompute": ["none", "full"],
            "top": 2,
            "method": "enumerate",
        },
    )
    by_file = solve_json("--problem", path)
    by_options = solve_json(
        "--model",
        "llama3-8b",
        "--cluster",
        "h100-64",
        "--seqs",
        "256",
        "--seq-len",
        "2048",
        "--fix",
        "tp=2",
        "--choices",
        "pp=1,2",
        "--only",
        "fsdp,tp,pp",
        "--recompute",
        "none,full",
        "--top",
        "2",
        "--method",
        "enumerate",
    )
    assert without_walls_and_cluster(by_file) == without_walls_and_cluster(by_options)
    assert by_file["solver"]["method"] == "enumerate" and len(by_file["layouts"]) == 2
    assert all(
        x["degrees"]["tp"] == 2 and x["recompute"] in ("none", "full") for x in by_file["layouts"]
    )


def test_options_on_the_command_line_override_the_file(tmp_path):
    path = write(
        tmp_path / "p.yaml",
        {"model": "debug", "cluster": "h100-8", "seqs": 256, "seq_len": 1024, "top": 1},
    )
    assert solve_json("--problem", path)["problem"]["global_batch_seqs"] == 256
    assert solve_json("--problem", path, "--seqs", "512")["problem"]["global_batch_seqs"] == 512
    # given explicitly, even the default value wins over the file
    assert solve_json("--problem", path, "--seqs", "1024")["problem"]["global_batch_seqs"] == 1024
    assert solve_json("--problem", path, "--cluster", "h100-16")["problem"]["num_devices"] == 16
    r = run(
        "estimate",
        "--problem",
        path,
        "--layout",
        "fsdp=4,tp=2",
        "--seqs",
        "512",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["problem"]["global_batch_seqs"] == 512


def test_inline_model_and_cluster_and_paths_relative_to_the_problem_file(tmp_path):
    model = yaml.safe_load((catalogue_dir("models") / "debug.yaml").read_text()) | {"name": "tiny"}
    (tmp_path / "sub").mkdir()
    write(tmp_path / "c.yaml", {"accelerator": "h100", "devices_per_node": 4, "nodes": 2})
    write(tmp_path / "m.yaml", model)
    inline = write(
        tmp_path / "sub" / "inline.yaml",
        {
            "model": model,
            "cluster": {
                "accelerator": "h100",
                "devices_per_node": 4,
                "nodes": 2,
                "name": "two-nodes",
            },
            "seqs": 64,
            "seq_len": 1024,
            "layout": "fsdp=4,tp=2",
        },
    )
    paths = write(
        tmp_path / "sub" / "paths.yaml",
        {"model": "../m.yaml", "cluster": "../c.yaml", "seqs": 64, "seq_len": 1024},
    )
    a, b = solve_json("--problem", inline), solve_json("--problem", paths)
    assert a["problem"]["model"] == "tiny" and a["problem"]["cluster"] == "two-nodes"
    assert a["problem"]["cluster_spec"] == {
        "name": "two-nodes",
        "accelerator": "h100",
        "devices_per_node": 4,
        "nodes": 2,
    }
    assert a["layouts"] == b["layouts"] and b["problem"]["cluster"] == str(tmp_path / "c.yaml")
    r = run("estimate", "--problem", inline)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("tiny on two-nodes (8 devices)")


def test_load_problem_file_normalises_the_yaml_forms(tmp_path):
    values = load_problem_file(
        str(
            write(
                tmp_path / "p.yaml",
                {
                    "fix": {"tp": 8, "pp": 1},
                    "choices": {"tp": [8, 16], "pp": 1},
                    "only": ["fsdp", "tp"],
                    "recompute": "none",
                    "layout": {"fsdp": 1024, "tp": 8},
                    "axes": {"tp": "z:8", "fsdp": [["z", 4], ["y", 16]], "cp": {"x": 2}},
                },
            )
        )
    )
    assert values == {
        "fix": "tp=8,pp=1",
        "choices": "tp=8,16;pp=1",
        "only": "fsdp,tp",
        "recompute": "none",
        "layout": "fsdp=1024,tp=8",
        "axes": "tp=z:8;fsdp=z:4,y:16;cp=x:2",
    }


@pytest.mark.parametrize(
    "data, parts",
    [
        ({"seqs": "many"}, ["field 'seqs'", "'many'"]),
        ({"seqs": 1.5}, ["field 'seqs'", "valid integer"]),
        ({"seqs": None}, ["field 'seqs'"]),
        ({"seqz": 256}, ["unknown key 'seqz'", "did you mean 'seqs'?"]),
        ({"top": 0}, ["field 'top'", "greater than or equal to 1"]),
        ({"objective": "speed"}, ["field 'objective'", "'speed' is not one of"]),
        ({"fix": {"tq": 8}}, ["field 'fix'", "did you mean 'tp'?"]),
        ({"recompute": ["none", "fast"]}, ["field 'recompute'", "unknown policy 'fast'"]),
        ({"model": ["llama70b", "debug"]}, ["field 'model'", "one value expected"]),
        ({"model": "missing.yaml"}, ["field 'model'", "no file"]),
        ({"cluster": {"nodes": 4}}, ["field 'cluster.accelerator' is missing"]),
        (
            {"cluster": {"accelerator": "h100", "nodes": 150000}},
            ["field 'cluster.nodes'", "1,200,000 devices"],
        ),
        (
            {"cluster": {"accelerator": "h100", "nodes": 2, "nods": 2}},
            ["unknown key 'cluster.nods'", "did you mean 'nodes'?"],
        ),
        ({"model": {"name": "x", "num_layers": 2}}, ["field 'model'", "Field required"]),
        ({"time_limit": float("inf")}, ["field 'time_limit'", "finite"]),
        ("- a list", ["must be a mapping"]),
    ],
)
def test_a_bad_problem_file_is_one_line_naming_the_file_and_the_field(tmp_path, data, parts):
    path = write(tmp_path / "bad.problem.yaml", data)
    one_error_line(run("solve", "--problem", path), str(path), *parts)


def test_problem_file_errors_in_estimate_and_missing_files(tmp_path):
    path = write(tmp_path / "p.yaml", {"recompute": ["none", "full"]})  # estimate takes one policy
    one_error_line(
        run("estimate", "--problem", path), "p.yaml: field 'recompute'", "'none,full' is not one of"
    )
    one_error_line(
        run(
            "estimate",
            "--problem",
            write(tmp_path / "z.yaml", {"zero_stage": 5, "layout": "fsdp=8192"}),
        ),
        "zero_stage(5) must be 0, 1, 2 or 3",
    )
    one_error_line(
        run("solve", "--problem", tmp_path / "none.yaml"), "--problem: cannot read", "none.yaml"
    )


def test_sweep_takes_the_problem_file_and_refuses_inline_mappings(tmp_path):
    path = write(
        tmp_path / "p.yaml",
        {
            "model": ["debug"],
            "cluster": ["h100-8", "h100-16"],
            "seqs": [64, 128],
            "seq_len": 1024,
            "fix": "tp=2",
        },
    )
    r = run("sweep", "--problem", path, "-o", tmp_path / "s.csv", "--no-progress", "--jobs", "1")
    assert r.exit_code == 0, r.stderr
    assert "4 points" in r.stderr
    r = run(
        "sweep",
        "--problem",
        path,
        "-c",
        "h100-8",
        "-o",
        tmp_path / "t.csv",
        "--no-progress",
        "--jobs",
        "1",
    )
    assert r.exit_code == 0 and "2 points" in r.stderr
    inline = write(
        tmp_path / "i.yaml", {"model": "debug", "cluster": {"accelerator": "h100", "nodes": 1}}
    )
    one_error_line(
        run("sweep", "--problem", inline, "-o", tmp_path / "u.csv"),
        "field 'cluster'",
        "not a mapping",
    )
    one_error_line(run("sweep", "-o", tmp_path / "u.csv"), "sweep needs --model and --cluster")


def test_a_changed_custom_cluster_records_no_stale_description(tmp_path):
    """A cluster changed after it was built (what-if scaling, calibration) is no longer what its
    description builds, so the record leaves the description out."""
    problem = Problem.build(
        "debug",
        str(write(tmp_path / "c.yaml", {**H100_1024, "nodes": 2})),
        Workload(global_batch_seqs=64, seq_len=1024),
    )
    assert "cluster_spec" in problem.record()
    faster = replace(
        problem.cluster, accelerator=replace(problem.cluster.accelerator, hbm_bytes=1e12)
    )
    assert "cluster_spec" not in replace(problem, cluster=faster).record()
