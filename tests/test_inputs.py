"""Every input handled: each hostile input found so far is one line on stderr naming the option,
field or path and the value, with exit 2 (1 when nothing fits), never a traceback."""

import contextlib
import errno
import io as textio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from builders import (
    DEBUG_H100_1_ESTIMATE,
    DEBUG_H100_8,
    DEBUG_H100_8_SOLVE,
    TINY_HF_CONFIG,
    dp8_estimate,
    sweep_argv,
)

from layoutsearch import cli
from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, InvalidArgumentError
from layoutsearch.sweep import (
    COLUMN_NAMES,
    MAX_SWEEP_POINTS,
    expand,
    expand_points,
    journal_path,
    read_table,
    run_sweep,
)

LONG = "a" * 300


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def solve_doc() -> dict:
    """A solve document (two layouts) of debug on h100-8."""
    out = textio.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(textio.StringIO()):
        assert cli.main([*DEBUG_H100_8_SOLVE, "--top", "2", "--format", "json"]) == 0
    return json.loads(out.getvalue())


# ----------------------------------------------------------------------------- the CLI package
def test_one_module_per_command_and_all_registered():
    """Each command has its own module with register(app); the app lists them all, loading each on demand."""
    assert " ".join(cli.COMMANDS) == (
        "models clusters estimate solve explain export validate calibrate sweep plot plan"
    )
    group = typer.main.get_command(cli.app)
    assert group.list_commands(None) == list(cli.COMMANDS)
    for name in cli.COMMANDS:
        module = cli.command_module(name)
        assert module.__name__ == f"layoutsearch.cli.{name}" and callable(module.register)
        assert group.get_command(None, name).name == name


def test_a_command_loads_only_its_own_module():
    """`solve` does not import the validation, calibration or sweep machinery (a fresh process)."""
    code = (
        "import sys; from layoutsearch.cli import main; main(['solve', '--model', 'debug', '--cluster', 'h100-8',"
        " '--seqs', '16', '--format', 'json']); "
        "print(sorted(m for m in sys.modules if m.startswith(('layoutsearch.validation', 'layoutsearch.sweep', "
        "'networkx', 'pandas'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("module", ["layoutsearch", "layoutsearch.cli"])
def test_python_dash_m_entry_points(module):
    argv = ["estimate", *DEBUG_H100_8, "--layout", "dp=8", "--seqs", "64", "--format", "json"]
    p = subprocess.run(
        [sys.executable, "-m", module, *argv],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["layout"]["degrees"]["dp"] == 8


# ----------------------------------------------------------------------------- 1-device clusters
def test_one_device_clusters_estimate_and_solve(cli_main):
    """Formerly a RecursionError: a 1-device cluster has no axis to place a degree on."""
    code, out, err = cli_main(*DEBUG_H100_1_ESTIMATE)
    assert code == 0, err
    doc = json.loads(out)
    assert (
        doc["problem"]["num_devices"] == 1 and doc["layout"]["fits"] and doc["layout"]["axes"] == {}
    )
    code, out, err = cli_main(
        "solve", "--model", "debug", "--cluster", "v5p-1", "--seqs", "8", "--format", "json"
    )
    assert code == 0, err
    layouts = json.loads(out)["layouts"]
    assert layouts and all(set(lay["degrees"].values()) == {1} for lay in layouts)
    code, _, err = cli_main(
        "estimate", "--model", "debug", "--cluster", "h100-1", "--layout", "dp=1"
    )
    assert (
        code == 1 and err.startswith("does not fit: needs") and err.count("\n") == 1
    )  # 1024 x 4096 tokens


# ----------------------------------------------------------------------------- files that are not text
def test_non_utf8_files_are_one_line_naming_the_path(bad_input, tmp_path, solve_doc):
    for name in ("m.yaml", "config.json", "result.json", "runs.yaml"):
        (tmp_path / name).write_bytes(b"\xff\xfe")
    model = tmp_path / "m.yaml"
    err = bad_input("estimate", "--model", model, "--cluster", "h100-8", "--layout", "dp=8")
    assert err == f"error: {model}: not UTF-8 text (byte 0xff at offset 0); save the file as UTF-8"
    err = bad_input("solve", "--model", tmp_path / "config.json", "--cluster", "h100-8")
    assert f"{tmp_path / 'config.json'}: not UTF-8 text" in err
    err = bad_input("export", tmp_path / "result.json", "--to", "megatron")
    assert err.startswith(
        f"error: RESULT: '{tmp_path / 'result.json'}' is not UTF-8 text (byte 0xff at offset 0)"
    )
    err = bad_input("validate", tmp_path / "runs.yaml")
    assert f"{tmp_path / 'runs.yaml'}: not UTF-8 text" in err


def test_export_of_a_json_file_that_is_not_a_result_says_so(bad_input, tmp_path):
    """Export reads a solve or estimate document; any other JSON is one line naming the file and what it lacks."""
    other = tmp_path / "other.json"
    other.write_text('{"layouts": []}')
    assert bad_input("export", other, "--to", "megatron") == (
        f"error: RESULT: '{other}' is not a result document (solve or estimate --format json; OUTPUT.md): "
        f"no 'problem' object"
    )
    other.write_text("[1, 2]")
    assert bad_input("export", other, "--to", "megatron").endswith(
        "OUTPUT.md): a list, not a JSON object"
    )
    # the Python API runs the same check (export.context.not_a_result), naming the document
    from layoutsearch.core.errors import InvalidArgumentError
    from layoutsearch.export import export_document

    with pytest.raises(InvalidArgumentError) as refused:
        export_document({"layouts": []}, "megatron")
    assert str(refused.value) == (
        "document: not a result document (solve or estimate --format json; OUTPUT.md): no 'problem' object"
    )


def test_a_sequence_longer_than_the_learned_position_table_is_refused(
    bad_input, cli_main, tmp_path
):
    """GPT-3 learns 2,048 positions: a 4,096-token sequence has no position for half its tokens, and a longer
    table is another model. Refused, naming --seq-len and the table, for a catalogue model and a Hugging Face
    config alike (GPT-2's n_positions); at the table's length it runs, and rotary models have no such bound."""
    assert bad_input("solve", "--model", "gpt3-175b", "--cluster", "a100-80gb-64") == (
        "error: --seq-len 4096: gpt3-175b learns 2,048 positions (its position embedding's rows), so no sequence "
        "is longer; use --seq-len 2048 or less"
    )
    config = tmp_path / "config.json"
    config.write_text(
        '{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257, '
        '"n_positions": 1024}'
    )
    err = bad_input("estimate", "--model", config, "--cluster", "h100-8", "--layout", "dp=8")
    assert err.startswith(f"error: --seq-len 4096: {config} learns 1,024 positions")
    code, _, err = cli_main(
        "estimate",
        "--model",
        config,
        "--cluster",
        "h100-8",
        "--layout",
        "dp=8",
        "--seq-len",
        "1024",
    )
    assert code == 0, err


def test_a_saved_result_beyond_the_learned_positions_is_not_exported(bad_input, cli_main, tmp_path):
    """A result document whose sequence outruns its model's learned positions (written before the check, or edited)
    is refused on export as on solve, not written as a Megatron run with --seq-length beyond
    --max-position-embeddings."""
    code, out, err = cli_main(
        "estimate",
        "--model",
        "gpt3-175b",
        "--cluster",
        "a100-80gb-64",
        "--seqs",
        "64",
        "--seq-len",
        "2048",
        "--layout",
        "tp=8,pp=8",
        "--format",
        "json",
    )
    assert code in (0, 1), err
    doc = json.loads(out)
    doc["problem"]["seq_len"] = 4096
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps(doc))
    assert bad_input("export", saved, "--to", "megatron") == (
        "error: --seq-len 4096: gpt3-175b learns 2,048 positions (its position embedding's rows), so no sequence "
        "is longer; use --seq-len 2048 or less"
    )


def test_read_helpers(tmp_path):
    """One reading helper: missing, a directory, NUL in the name, not UTF-8, not JSON, NaN, too deep, bad YAML."""
    f = tmp_path / "f.json"
    with pytest.raises(
        InvalidArgumentError, match=r"^RESULT: cannot read '.*missing.json' \(No such file"
    ):
        io.read_json(tmp_path / "missing.json", "RESULT")
    with pytest.raises(
        InvalidArgumentError, match=r"^RESULT: '.*' is a directory, not a regular file$"
    ):
        io.read_json(tmp_path, "RESULT")
    with pytest.raises(InvalidArgumentError, match=r"NUL byte"):
        io.read_text("a\0b.json", "RESULT")
    f.write_text('{"a": NaN}')
    with pytest.raises(InvalidArgumentError, match=r"is not JSON \(NaN is not a JSON number\)"):
        io.read_json(f, "RESULT")
    f.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidArgumentError, match=r"nested too deeply"):
        io.read_json(f, "RESULT")
    f.write_text("[1, ")
    with pytest.raises(CatalogueError, match=r"f.json: not JSON \(line 1, column 5"):
        io.read_json(f, None, CatalogueError)
    f.write_text("\ufeff{}")  # a BOM is allowed
    assert io.read_json(f) == {}
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: no disk space used
        fh.truncate(256 * 2**20 + 1)
    with pytest.raises(
        InvalidArgumentError, match=r"^RESULT: '.*big.json' is larger than the 256 MiB"
    ):
        io.read_json(big, "RESULT")
    y = tmp_path / "f.yaml"
    y.write_text("a: [1\n")
    with pytest.raises(InvalidArgumentError, match=r"f.yaml' is malformed YAML at line 2"):
        io.read_yaml(y, "--model")
    y.write_text("a: " + "[" * 20_000 + "]" * 20_000)
    with pytest.raises(InvalidArgumentError, match=r"nested too deeply"):
        io.read_yaml(y, "--model")


# ----------------------------------------------------------------------------- Hugging Face configs
@pytest.mark.parametrize(
    "content, message",
    [
        ("null", "expected a Hugging Face config (a JSON object), got null"),
        ("[1, 2]", "expected a Hugging Face config (a JSON object), got a list"),
        ("[" * 10_000 + "]" * 10_000, "nested too deeply"),
        (
            json.dumps({**TINY_HF_CONFIG, "num_attention_heads": 0}),
            "field 'num_attention_heads': Input should be greater than 0 (got 0)",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "num_attention_heads": None}),
            "field 'num_attention_heads': Input should be a valid integer (got None)",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "hidden_size": "256"}),
            "field 'hidden_size': Input should be a valid integer (got '256')",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "hidden_size": 2**70}),
            "field 'hidden_size': Input should be less than or equal to 16777216",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "vocab_size": 1e30}),
            "field 'vocab_size': Input should be a valid integer (got 1e+30)",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "num_key_value_heads": [2]}),
            "field 'num_key_value_heads': Input should be a valid integer",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "tie_word_embeddings": "yes"}),
            "field 'tie_word_embeddings': Input should be a valid boolean",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "hidden_size": 4, "num_attention_heads": 8}),
            "'hidden_size' (4) is smaller than 'num_attention_heads' (8)",
        ),
        (
            json.dumps({k: v for k, v in TINY_HF_CONFIG.items() if k != "vocab_size"}),
            "missing field 'vocab_size'",
        ),
        (
            json.dumps({**TINY_HF_CONFIG, "num_key_value_heads": 3}),
            "num_heads(8) is not a multiple of num_kv_heads(3)",
        ),
    ],
)
def test_hugging_face_config_errors_name_the_key(bad_input, tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    err = bad_input("estimate", "--model", path, "--cluster", "h100-8", "--layout", "dp=8")
    assert err.startswith(f"error: {path}: ") and message in err


def test_hugging_face_config_that_is_valid_still_imports(cli_main, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {**TINY_HF_CONFIG, "model_type": "llama", "head_dim": None, "_name_or_path": "tiny"}
        )
    )
    code, out, err = cli_main(*dp8_estimate(path, "--format", "json"))
    assert code == 0, err
    assert json.loads(out)["problem"]["model_spec"]["head_dim"] == 32


# ----------------------------------------------------------------------------- result documents
def mutate(doc: dict, path: str, value):
    doc = json.loads(json.dumps(doc))
    keys = path.split(".")
    target = doc
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[keys[-1]] = value
    return doc


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            "layouts.0.num_microbatches",
            None,
            "layouts[rank 1]: field 'num_microbatches': Input should be a valid integer (got None)",
        ),
        (
            "layouts.0.virtual_stages",
            0,
            "layouts[rank 1]: field 'virtual_stages': Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "problem.global_batch_seqs",
            1e30,
            "problem: field 'global_batch_seqs': Input should be a valid integer (got 1e+30)",
        ),
        (
            "problem.global_batch_seqs",
            2**70,
            "problem: field 'global_batch_seqs': Input should be less than or equal to 16777216",
        ),
        (
            "layouts.0.degrees.cp",
            "8",
            "layouts[rank 1]: field 'degrees.cp': Input should be a valid integer (got '8')",
        ),
        (
            "layouts.0.degrees.tp",
            True,
            "layouts[rank 1]: field 'degrees.tp': Input should be a valid integer (got True)",
        ),
        (
            "layouts.0.degrees",
            "cp=8",
            "layouts[rank 1]: field 'degrees': Input should be a valid dictionary",
        ),
        ("layouts", 5, "document 'layouts': expected a list of layout records"),
        ("layouts", [5], "document 'layouts': expected a list of layout records"),
        ("problem", [], "problem: expected an object, got list"),
        (
            "problem.seq_len",
            -1,
            "problem: field 'seq_len': Input should be greater than or equal to 1 (got -1)",
        ),
        ("problem.model", 7, "problem: field 'model': Input should be a valid string (got 7)"),
        ("problem.cluster", "h100-12", "12 GPUs is not a whole number of 8-GPU nodes"),
        (
            "problem.workload.training_tokens",
            -5,
            "problem: field 'workload.training_tokens': Input should be greater than 0",
        ),
        (
            "problem.model_spec.d_model",
            2**70,
            "problem.model_spec: field 'd_model': Input should be less than or equal to",
        ),
        (
            "problem.model_spec",
            [],
            "problem: field 'model_spec': Input should be a valid dictionary",
        ),
        (
            "layouts.0.recompute",
            "most",
            "layouts[rank 1].recompute: 'most' is not one of none, selective, full, op, minimal, minimal_with_context, save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, save_out_proj, qkv_proj_offloaded, minimal_offloaded, custom_offload_input, custom_offload_qkv_proj, custom_offload_out_proj, custom_offload_dots_except_mlp, norm_act, norm_moe, mla_up_proj, norm_mla_up_proj",
        ),
        (
            "layouts.0.schedule",
            "zigzag",
            "layouts[rank 1].schedule: 'zigzag' is not one of 1f1b, interleaved, gpipe",
        ),
        (
            "layouts.0.sequence_parallel",
            "yes",
            "layouts[rank 1]: field 'sequence_parallel': Input should be a valid boolean",
        ),
        (
            "layouts.0.axes",
            {"cp": [["node", 8, 1]]},
            "layouts[rank 1]: field 'axes.cp.0': Tuple should have at most 2 items",
        ),
        (
            "layouts.0.axes",
            {"cp": [["node", 0]]},
            "layouts[rank 1]: field 'axes.cp.0.1': Input should be greater than or equal to 1",
        ),
        (
            "layouts.0.memory_bytes",
            "lots",
            "layouts[rank 1]: field 'memory_bytes': Input should be a valid dictionary",
        ),
        (
            "layouts.0.time_s",
            {"step": "fast"},
            "layouts[rank 1]: field 'time_s.step': Input should be a valid number",
        ),
        ("layouts.0.mfu", "high", "layouts[rank 1]: field 'mfu': Input should be a valid number"),
        ("layouts.0.fits", "no", "layouts[rank 1]: field 'fits': Input should be a valid boolean"),
        ("layouts.0.rank", "1", "--rank 1: no layout with rank 1 in the document (ranks: '1', 2)"),
    ],
)
def test_export_refuses_fields_of_the_wrong_type(
    bad_input, tmp_path, solve_doc, path, value, message
):
    result = tmp_path / "result.json"
    result.write_text(json.dumps(mutate(solve_doc, path, value)))
    err = bad_input("export", result, "--to", "megatron")
    assert message in err


def test_export_of_the_unmutated_document_works(cli_main, tmp_path, solve_doc):
    result = tmp_path / "result.json"
    result.write_text(json.dumps(solve_doc))
    for target in ("megatron", "torchtitan", "torchtitan-0.3", "maxtext"):
        code, out, err = cli_main("export", result, "--to", target, "--rank", "2")
        assert code in (0, 2), err  # a layout a target cannot express is refused, in one line
        assert code == 0 or err.count("\n") == 1


@pytest.mark.parametrize("field", ["memory_bytes", "time_s", "mfu", "fits"])
def test_export_of_a_record_with_null_predictions(cli_main, tmp_path, solve_doc, field):
    """The predictions a file's header repeats may be null (or absent): the header says nan."""
    result = tmp_path / "result.json"
    result.write_text(json.dumps(mutate(solve_doc, f"layouts.0.{field}", None)))
    code, out, err = cli_main("export", result, "--to", "megatron")
    assert code == 0, err
    assert "# Written by layoutsearch" in out


def test_export_refuses_a_json_document_with_nan(bad_input, tmp_path):
    result = tmp_path / "result.json"
    result.write_text('{"problem": NaN}')
    assert "is not JSON (NaN is not a JSON number)" in bad_input(
        "export", result, "--to", "megatron"
    )


# ----------------------------------------------------------------------------- huge integers
def test_huge_integers_are_refused_with_bounds(bad_input, tmp_path):
    base = ("--model", "debug", "--cluster", "h100-8")
    err = bad_input("estimate", *base, "--seqs", "99999999999999999999")
    assert "'--seqs'" in err and "16777216" in err and "99999999999999999999" in err
    err = bad_input("estimate", *base, "--layout", "tp=99999999999999999999")
    assert err == "error: --layout tp: 99999999999999999999 must be <= 1048576"
    err = bad_input("estimate", *base, "--axes", "dp=node:99999999999999999999", "--layout", "dp=8")
    assert err == "error: --axes dp node: 99999999999999999999 must be <= 1048576"
    err = bad_input("estimate", *base, "--zero-stage", "99999999999999999999")
    assert err == "error: --zero-stage: zero_stage(99999999999999999999) must be 0, 1, 2 or 3"
    err = bad_input("estimate", *base, "--microbatches", str(2**63))
    assert "'--microbatches'" in err
    err = bad_input("solve", *base, "--choices", "tp=1,99999999999999999999")
    assert err == "error: --choices tp: 99999999999999999999 must be <= 1048576"
    debug = Path(__file__).resolve().parents[1] / "models" / "debug.yaml"
    for value, message in (
        ("1e30", "unable to parse string as an integer (got '1e30')"),
        ("1.0e+30", "exceeded maximum size (got 1e+30)"),
        (str(2**70), "less than or equal to 16777216"),
        (str(-(2**70)), "greater than 0"),
    ):
        model = tmp_path / "big.yaml"
        model.write_text(debug.read_text().replace("d_model: 256", f"d_model: {value}"))
        err = bad_input("estimate", "--model", model, "--cluster", "h100-8", "--layout", "dp=8")
        assert err.startswith(f"error: {model}: field 'd_model'") and message in err, err
    model = tmp_path / "huge.yaml"  # every dimension within bounds, the parameter count not
    model.write_text(
        debug.read_text()
        .replace("d_model: 256", "d_model: 16777216")
        .replace("num_layers: 8", "num_layers: 16777216")
    )
    err = bad_input("estimate", "--model", model, "--cluster", "h100-8", "--layout", "dp=8")
    assert "parameters, more than the 9.01e+15 (2**53) this package counts exactly" in err


@pytest.mark.parametrize("command", ["estimate", "solve", "explain"])
@pytest.mark.parametrize(
    "option, value, bound",
    [
        ("--seqs", "100000000", "16777216"),
        ("--seqs", "0", "1"),
        ("--seq-len", "4194304", "2097152"),
        ("--seq-len", "-1", "1"),
    ],
)
def test_seqs_and_seq_len_are_bounded_on_every_command(bad_input, command, option, value, bound):
    err = bad_input(command, "--model", "debug", "--cluster", "h100-8", option, value)
    assert f"'{option}'" in err and bound in err and value in err


def test_sweep_seqs_and_seq_len_are_bounded(bad_input, tmp_path):
    out = tmp_path / "s.csv"
    err = bad_input("sweep", "-m", "debug", "-c", "h100-8", "--seqs", "100000000", "-o", out)
    assert err == "error: --seqs: 100000000 is more than 16777216"
    err = bad_input("sweep", "-m", "debug", "-c", "h100-8", "--seq-len", "9" * 40, "-o", out)
    assert err.startswith("error: --seq-len: '9999") and "is not a whole number >= 1" in err
    err = bad_input("sweep", "-m", "debug", "-c", "h100-8", "--seqs", "٣", "-o", out)
    assert err == "error: --seqs: '٣' is not a whole number >= 1"


# ----------------------------------------------------------------------------- lists of names and degrees
@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["solve", "--recompute", ","],
            "error: --recompute: no policy given (known: none, selective, full, op, minimal, minimal_with_context, save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, save_out_proj, qkv_proj_offloaded, minimal_offloaded, custom_offload_input, custom_offload_qkv_proj, custom_offload_out_proj, custom_offload_dots_except_mlp, norm_act, norm_moe, mla_up_proj, norm_mla_up_proj)",
        ),
        (
            ["solve", "--recompute", ""],
            "error: --recompute: no policy given (known: none, selective, full, op, minimal, minimal_with_context, save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, save_out_proj, qkv_proj_offloaded, minimal_offloaded, custom_offload_input, custom_offload_qkv_proj, custom_offload_out_proj, custom_offload_dots_except_mlp, norm_act, norm_moe, mla_up_proj, norm_mla_up_proj)",
        ),
        (["solve", "--only", ",,"], "error: --only: no name given (known: dp, fsdp, tp, pp, cp)"),
        (["solve", "--fix", "tp=8,tp=4"], "error: --fix: tp given twice (8, 4)"),
        (["explain", "--fix", "tp=8,tp=4"], "error: --fix: tp given twice (8, 4)"),
        (["estimate", "--layout", "dp=4,tp=2,tp=2"], "error: --layout: tp given twice (2, 2)"),
        (["solve", "--choices", "tp=1,2;tp=4"], "error: --choices: tp given twice"),
        (
            ["solve", "--choices", ";"],
            "error: --choices: no degree given (e.g. 'tp=8,16,32;pp=1,2')",
        ),
        (
            ["solve", "--choices", "8,16"],
            "error: --choices: '8' must follow NAME= (e.g. tp=8,16,32)",
        ),
        (
            ["estimate", "--layout", "dp=8", "--axes", "dp=node:8;dp=node:8"],
            "error: --axes: dp given twice",
        ),
        (
            ["estimate", "--layout", "dp=8", "--axes", "dp=node:2,node:4"],
            "error: --axes: dp is placed on axis 'node' twice",
        ),
        (["estimate", "--layout", "dp=8", "--axes", "dp=:8"], "error: --axes: ':8' names no axis"),
        (
            ["estimate", "--layout", "dp=8", "--axes", "dp:node8x"],
            "error: --axes: 'dp:node8x' is not DEGREE=AXIS:FACTOR,... (e.g. tp=z:8;fsdp=x:16, or as the tables "
            "print it, tp:z8)",
        ),
        (
            ["estimate", "--layout", "dp=8", "--axes", "dp:node4*node2"],
            "error: --axes: dp is placed on axis 'node' twice",
        ),
        (["estimate", "--layout", "tp=1e3"], "error: --layout tp: '1e3' is not an integer"),
        (["estimate", "--layout", "tp=８"], "error: --layout tp: '８' is not an integer"),
        (
            ["estimate", "--layout", "dp=8", "--tokens", "-1e12"],
            "error: --tokens: -1000000000000.0 is not a number of tokens in (0, 1e+18]",
        ),
        (
            ["estimate", "--layout", "dp=8", "--tokens", "0"],
            "error: --tokens: 0.0 is not a number of tokens in (0, 1e+18]",
        ),
        (
            ["estimate", "--layout", "dp=8", "--tokens", "nan"],
            "error: Invalid value for '--tokens': Input should be a finite number (got 'nan')",
        ),
        (
            ["estimate", "--layout", "dp=8", "--tokens", "inf"],
            "error: Invalid value for '--tokens': Input should be a finite number (got 'inf')",
        ),
        (
            ["estimate", "--layout", "dp=8", "--tokens", "1e400"],
            "error: Invalid value for '--tokens': Input should be a finite number (got '1e400')",
        ),
        (
            ["solve", "--time-limit", "nan"],
            "error: Invalid value for '--time-limit': Input should be a finite number (got 'nan')",
        ),
        (
            ["validate", "x.yaml", "--max-median-error", "nan"],
            "error: Invalid value for '--max-median-error': Input should be a finite number (got 'nan')",
        ),
        (
            ["validate", "x.yaml", "--max-median-error", "inf"],
            "error: Invalid value for '--max-median-error': Input should be a finite number (got 'inf')",
        ),
        (["calibrate", "x.yaml", "--fit", ","], "error: --fit: no field given (known: "),
        (
            ["calibrate", "x.yaml", "--accelerator", ""],
            "error: --accelerator: no accelerator given (known: ",
        ),
    ],
)
def test_option_values_are_checked(bad_input, argv, message):
    command, *rest = argv
    base = (
        [] if command in ("validate", "calibrate") else ["--model", "debug", "--cluster", "h100-8"]
    )
    assert bad_input(command, *base, *rest).startswith(message)


def test_fix_that_does_not_divide_the_devices_is_named(bad_input):
    err = bad_input("solve", "--model", "llama70b", "--cluster", "v5p-8192", "--fix", "tp=3")
    assert err == "error: --fix tp=3: 3 does not divide the 8192 devices of v5p-8192"


@pytest.mark.parametrize(
    "cluster, message",
    [
        (
            "h100-99999999999999999999",
            "device count 99,999,999,999,999,999,999 is over the limit of 1,048,576 devices",
        ),
        ("v5p:0x2x2", "every shape dimension must be >= 1"),
        ("", "expected ACCELERATOR-COUNT"),
        (LONG + "-8", "unknown accelerator 'aaaa"),
        ("h100-8\0", "expected ACCELERATOR-COUNT"),
    ],
)
def test_cluster_errors_pass_through_as_one_line(bad_input, cluster, message):
    for command in ("estimate", "solve", "explain"):
        err = bad_input(command, "--model", "debug", "--cluster", cluster)
        assert err.startswith("error: cluster '") and message in err


@pytest.mark.parametrize(
    "model", [LONG, "a" * 5000, "../../../../etc/passwd", "models/debug", ".", "x\0y", "ü" * 200]
)
def test_unknown_model_ids_of_any_length_are_unknown(bad_input, model):
    err = bad_input("estimate", "--model", model, "--cluster", "h100-8")
    assert err.startswith("error: unknown model '") and len(err) < 400


def test_model_paths_with_a_nul_byte(bad_input):
    for name in ("x\0.yaml", "x\0.json"):
        err = bad_input("estimate", "--model", name, "--cluster", "h100-8")
        assert "not a file name (it holds a NUL byte)" in err


# ----------------------------------------------------------------------------- writing files
def export_argv(output):
    return [*DEBUG_H100_8_SOLVE, "--top", "1", "--export", "megatron", "-o", str(output)]


@pytest.mark.parametrize(
    "where, message",
    [
        (
            "/nonexistent/x.sh",
            "error: --output: cannot write '/nonexistent/x.sh' (No such file or directory)",
        ),
        ("/proc/x.sh", "error: --output: cannot write '/proc/x.sh' ("),
        ("{tmp}", "error: --output: '{tmp}' is a directory, not a file"),
        (
            "{tmp}/a\0b.sh",
            "error: --output: '{tmp}/a\\x00b.sh' is not a file name (it holds a NUL byte)",
        ),  # shown escaped
    ],
)
def test_unwritable_outputs_are_one_line_naming_the_path(bad_input, tmp_path, where, message):
    where, message = where.format(tmp=tmp_path), message.format(tmp=tmp_path)
    assert bad_input(*export_argv(where)).startswith(message)
    assert temporaries(tmp_path) == []


def test_read_only_directory(bad_input, tmp_path, monkeypatch):
    """A directory the user may not write to (simulated: the tests may run as root, who may)."""

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(io.tempfile, "mkstemp", refuse)
    out = tmp_path / "x.sh"
    err = bad_input(*export_argv(out))
    assert err == f"error: --output: cannot write '{out}' (Permission denied)"
    assert not out.exists()


def disk_full(monkeypatch, call="write"):
    """os.write (or os.fsync) fails with ENOSPC, as on a full disk."""
    original = getattr(os, call)

    def full(fd, *args):
        if (
            os.fstat(fd).st_size or call == "write"
        ):  # let pytest's own empty-file fsyncs, if any, through
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(fd, *args)

    monkeypatch.setattr(os, call, full)


def test_full_disk_leaves_the_old_file_and_no_temporary(bad_input, tmp_path, monkeypatch):
    out = tmp_path / "x.sh"
    out.write_text("old\n")
    with monkeypatch.context() as m:
        disk_full(m)
        err = bad_input(*export_argv(out))
    assert err == f"error: --output: cannot write '{out}' (No space left on device)"
    assert out.read_text() == "old\n" and temporaries(tmp_path) == []


def test_atomic_write_mode_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        io.atomic_write(tmp_path / "a.txt", "x")
        os.umask(0o077)
        io.atomic_write(tmp_path / "b.txt", b"y")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600
    assert (tmp_path / "a.txt").read_text() == "x" and temporaries(tmp_path) == []


def test_atomic_write_cleans_up_on_interrupt(tmp_path, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        io.atomic_write(tmp_path / "a.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_export_command_output_full_disk(bad_input, tmp_path, monkeypatch, solve_doc):
    result = tmp_path / "result.json"
    result.write_text(json.dumps(solve_doc))
    out = tmp_path / "layout.sh"
    with monkeypatch.context() as m:
        disk_full(m)
        err = bad_input("export", result, "--to", "megatron", "-o", out)
    assert err == f"error: --output: cannot write '{out}' (No space left on device)"
    assert not out.exists() and temporaries(tmp_path) == []
    assert bad_input("export", result, "--to", "megatron", "-o", tmp_path).endswith(
        "is a directory, not a file"
    )


def test_plot_output_unwritable(bad_input, tmp_path, monkeypatch):
    table = tmp_path / "s.csv"
    run_sweep(expand_points("debug", "h100-8", "64"), table, jobs=1, progress=False)
    err = bad_input("plot", table, "-o", "/nonexistent/s.png")
    assert err == "error: --output: cannot write '/nonexistent/s.png' (No such file or directory)"
    err = bad_input("plot", table, "-o", tmp_path)
    assert err == f"error: --output: '{tmp_path}' is a directory, not a file"
    with monkeypatch.context() as m:
        disk_full(m)
        err = bad_input("plot", table, "-o", tmp_path / "s.png")
    assert err.endswith("(No space left on device)") and temporaries(tmp_path) == []


@pytest.mark.parametrize("call", ["write", "fsync"])
def test_sweep_on_a_full_disk_is_one_line(bad_input, cli_main, tmp_path, monkeypatch, call):
    """The journal append (fsync) or the table write (os.write) failing: exit 2 naming the path, no temporary."""
    out = tmp_path / "s.csv"
    with monkeypatch.context() as m:
        disk_full(m, call)
        err = bad_input(*sweep_argv(out))
    assert err.startswith("error: --output: cannot write '") and err.endswith(
        "(No space left on device)"
    )
    assert str(tmp_path) in err and temporaries(tmp_path) == []
    code, _, err = cli_main(*sweep_argv(out))
    assert code == 0, err  # disk space back: the rerun finishes


@pytest.mark.parametrize(
    "where, message",
    [
        (
            "/nonexistent/s.csv",
            "error: --output: '/nonexistent/s.csv': no such directory '/nonexistent'",
        ),
        ("/proc/s.csv", "error: --output: cannot write '/proc/s.csv.jsonl' ("),
        ("{tmp}/d.csv", "error: --output: '{tmp}/d.csv' is a directory"),
    ],
)
def test_sweep_unwritable_output(bad_input, tmp_path, where, message):
    (tmp_path / "d.csv").mkdir()
    where, message = where.format(tmp=tmp_path), message.format(tmp=tmp_path)
    err = bad_input(
        "sweep", "-m", "debug", "-c", "h100-8", "--seqs", "64", "--no-progress", "-o", where
    )
    assert err.startswith(message)


# ----------------------------------------------------------------------------- sweeps
def test_sweep_refuses_too_many_points_up_front(bad_input, tmp_path):
    err = bad_input(
        "sweep",
        "-m",
        "debug,llama3-8b",
        "-c",
        "h100-{8..8000:+8}",
        "--seqs",
        "{1..100}",
        "-o",
        tmp_path / "s.csv",
    )
    assert err == (
        f"error: --model x --cluster x --seqs x --seq-len: 200,000 points (2 x 1000 x 100 x 1), more than "
        f"the {MAX_SWEEP_POINTS:,} one sweep takes; split it"
    )
    err = bad_input(
        "sweep", "-m", "debug", "-c", "h100-{1..10000}{1..10000}", "-o", tmp_path / "s.csv"
    )
    assert (
        err
        == f"error: --cluster: 'h100-{{1..10000}}{{1..10000}}' expands to more than {MAX_SWEEP_POINTS:,} values"
    )
    assert expand("h100-8" + "{1..1}" * 5000, "--cluster") == [
        "h100-8" + "1" * 5000
    ]  # no recursion
    assert not (tmp_path / "s.csv").exists() and not Path(journal_path(tmp_path / "s.csv")).exists()


def test_sweep_journal_trusts_only_rows_of_this_sweep(tmp_path):
    """A foreign or garbage journal line is not a finished point: it is dropped and its point solved."""
    out = tmp_path / "s.csv"
    points = expand_points("debug", "h100-8", "32,64")
    first = run_sweep(points, out, jobs=1, progress=False)
    good = Path(journal_path(out)).read_text().splitlines()
    rows = [json.loads(line) for line in good]
    forged = [
        {**rows[0], "dp": "8"},  # a degree as a string
        {**rows[0], "mfu": -1.0},  # a negative number
        {**rows[0], "point_id": "debug|h100-8|32|999"},  # an id that is not made of its columns
        {**rows[0], "status": "DONE"},  # an unknown status
        {**rows[0], "fsdp": None},  # OPTIMAL without a whole layout
        {**rows[0], "surprise": 1},  # a column this version does not have
        {"point_id": points[0].id},  # not a row
        [1, 2, 3],
    ]
    for forged_row in forged:
        Path(journal_path(out)).write_bytes(
            f"{json.dumps(forged_row)}\n{good[1]}\n{{not json\n".encode()
            + b"\xff\xfe\n"
            + b"[" * 100_000
            + b"\n"
        )
        summary = run_sweep(points, out, jobs=1, progress=False)
        assert (summary.skipped, summary.solved, summary.dropped) == (1, 1, 4), forged_row
        assert [r["point_id"] for r in read_table(out)] == [p.id for p in points]
        assert len(Path(journal_path(out)).read_text().splitlines()) == 2
    assert first.by_status == {"OPTIMAL": 2}


def test_sweep_rows_written_pass_the_row_check(tmp_path):
    from layoutsearch.sweep.table import check_row

    out = tmp_path / "s.csv"
    points = expand_points("debug,llama3-405b", "h100-8,h100-12", "64")
    summary = run_sweep(points, out, jobs=1, progress=False)
    assert {r["status"] for r in summary.rows} == {"OPTIMAL", "INFEASIBLE", "ERROR"}
    for row in summary.rows + read_table(out):
        assert check_row(row) is None and list(row) == COLUMN_NAMES


def test_sweep_table_that_is_not_a_sweep_is_refused(bad_input, tmp_path):
    out = tmp_path / "s.csv"
    out.write_text("point_id,model\nx,y\n")
    err = bad_input(
        "sweep", "-m", "debug", "-c", "h100-8", "--seqs", "64", "--no-progress", "-o", out
    )
    assert err.startswith(f"error: --output: '{out}': row 1 is not a sweep row: no cluster")
    assert err.endswith("move it away or pass --fresh") and not Path(journal_path(out)).exists()
    for content, message in (
        ("a,b\n1,2\n", "unknown column 'a'"),
        (b"\xff", "is not UTF-8 text"),
        (
            f"{','.join(COLUMN_NAMES)}\n" + "x," * (len(COLUMN_NAMES) - 1) + "x\n",
            "column num_devices: 'x' is not an integer",
        ),
    ):
        (out.write_bytes if isinstance(content, bytes) else out.write_text)(content)
        err = bad_input("plot", out, "-o", tmp_path / "p.png")
        assert err.startswith(f"error: SWEEP_FILE: '{out}'") and message in err


def test_sweep_cli_says_how_many_journal_lines_it_dropped(cli_main, tmp_path):
    out = tmp_path / "s.csv"
    argv = sweep_argv(out)
    assert cli_main(*argv)[0] == 0
    journal = Path(journal_path(out))
    journal.write_text(journal.read_text().replace('"status":"OPTIMAL"', '"status":"DONE"'))
    code, _, err = cli_main(*argv)
    assert code == 0 and f"{journal}: dropped 1 line(s) that are not rows of a sweep" in err
    assert "1 solved now, 0 already done" in err


def test_axes_read_as_the_tables_print_them():
    """A placement copied from solve's or estimate's table ('tp:y8; fsdp:z16*x8*dcn2') places the layout as the
    DEGREE=AXIS:FACTOR form does."""
    from layoutsearch.core.parse import parse_axes

    printed = parse_axes("tp:y8; fsdp:z16*x8*dcn2")
    assert printed == (("tp", (("y", 8),)), ("fsdp", (("z", 16), ("x", 8), ("dcn", 2))))
    assert printed == parse_axes("tp=y:8;fsdp=z:16,x:8,dcn:2")
    assert parse_axes("fsdp:node8*scale_out128") == (("fsdp", (("node", 8), ("scale_out", 128))),)
