"""Exports are safe to run: a hostile model name (newlines, quotes, control characters) stays inside
its comment or string in every target's syntax, and the files still parse to the layout's values."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import tomllib

import pytest
import yaml
from builders import solve_doc

from layoutsearch.core.specs import Layout
from layoutsearch.export import check_export, export_document
from layoutsearch.export.context import comment_block, printable, yaml_value
from layoutsearch.export.deepspeed import SIDE_KEY
from layoutsearch.export.megatron import parse_args
from layoutsearch.export.torchtitan03 import read_constants

# A name that would end a comment (newline, CR, NEL, U+2028), close a Python or TOML string, start a
# YAML key, run code in bash and Python, and colour a terminal.
EVIL = (
    "evil\nimport os; os.system('touch PWNED') #\r\nrm -rf x; touch PWNED\x85top_key: 1"
    '\u2028"""\'\\\x1b[31m\x00\u202e end'
)


def evil_doc(layout: Layout) -> dict:
    """A debug-model solve document whose model id and model name are EVIL."""
    doc = solve_doc("debug", "h100-16", 64, 1024, layout, model_changes={"name": EVIL})
    doc["problem"]["model"] = EVIL
    return doc


HSDP = evil_doc(Layout(dp=2, fsdp=8))  # megatron, maxtext, torchtitan, torchtitan-0.3
ZERO1 = evil_doc(Layout(fsdp=16, zero_stage=1, num_microbatches=2))  # deepspeed


def _comments(text: str, prefix: str = "#") -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith(prefix)]


def test_printable_escapes_every_line_break_and_control_character():
    """printable writes newline, CR, NEL, U+2028, ESC, NUL and a bidi override as escapes, keeps the rest."""
    assert printable("a\nb\r\x85\u2028\x1b\x00\u202e é") == (
        "a\\nb\\r\\x85\\u2028\\x1b\\x00\\u202e é"
    )
    assert comment_block(["x\ny", "z"]) == "# x\\ny\n# z\n"


@pytest.mark.parametrize(
    "value",
    [EVIL, 'a: "b"', "\ufeff\u200b", "😀 \U0001f600", "#not a comment", "- item"],
)
def test_yaml_value_reads_back_exactly(value):
    """yaml_value quotes any string so that yaml.safe_load returns it unchanged, astral characters included."""
    assert yaml.safe_load(f"key: {yaml_value(value)}\n") == {"key": value}
    assert yaml.safe_load(f"key: {yaml_value([value, 2])}\n") == {"key": [value, 2]}


def test_megatron_script_runs_nothing_and_parses():
    """The Megatron script keeps the name in one comment line: bash -n passes, sourcing it defines the
    array and runs nothing, and the arguments read back are the layout's."""
    text = export_document(HSDP, "megatron")
    assert check_export("megatron", text, HSDP) == []
    assert "PWNED" not in "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    )
    assert any("evil\\nimport os" in line for line in _comments(text))
    args = parse_args(text)
    assert args["--global-batch-size"] == "64" and args["--num-layers"] == "8"
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    assert subprocess.run([bash, "-n"], input=text, text=True).returncode == 0
    run = subprocess.run(
        [bash, "-c", 'source /dev/stdin; echo "${#MEGATRON_ARGS[@]}"'],
        input=text,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0 and run.stderr == ""
    assert int(run.stdout) == sum(1 + (v is not True) for v in args.values())


def test_maxtext_yaml_gets_no_injected_key():
    """The MaxText override loads with yaml.safe_load to the written keys only (no 'top_key')."""
    text = export_document(HSDP, "maxtext")
    assert check_export("maxtext", text, HSDP) == []
    cfg = yaml.safe_load(text)
    assert "top_key" not in cfg and "rm -rf x; touch PWNED" not in cfg
    assert (cfg["dcn_data_parallelism"], cfg["ici_fsdp_parallelism"]) == (2, 8)


def test_torchtitan_toml_keeps_the_name_in_its_strings():
    """The torchtitan TOML parses; the name reads back unchanged as job.description's model and as flavor."""
    text = export_document(HSDP, "torchtitan")
    assert check_export("torchtitan", text, HSDP) == []
    cfg = tomllib.loads(text)
    assert cfg["model"]["flavor"] == EVIL
    assert cfg["job"]["description"] == f"layoutsearch layout rank 1 for {EVIL} on h100-16"
    assert set(cfg) >= {"job", "model", "training", "parallelism"} and "top_key" not in cfg


def test_torchtitan03_module_has_no_statement_from_the_name():
    """The torchtitan 0.3 module parses with ast, its docstring and FLAVOR hold the name as data, and its
    top level is only the docstring, constant assignments and function definitions: nothing calls os."""
    text = export_document(HSDP, "torchtitan-0.3")
    assert check_export("torchtitan-0.3", text, HSDP) == []
    tree = ast.parse(text)
    assert ast.get_docstring(tree) == (
        f"layoutsearch layout rank 1 for {EVIL} on h100-16: a torchtitan 0.3 config_registry entry."
    )
    kinds = {type(node).__name__ for node in tree.body[1:]}
    assert kinds == {"Assign", "FunctionDef"}
    assert read_constants(text)["FLAVOR"] == EVIL
    assert not any(isinstance(n, ast.Attribute) and n.attr == "system" for n in ast.walk(tree))


def test_deepspeed_json_keeps_the_name_on_one_header_line():
    """The DeepSpeed JSON parses; the header's model line holds the escaped name and no control character."""
    text = export_document(ZERO1, "deepspeed")
    assert check_export("deepspeed", text, ZERO1) == []
    header = json.loads(text)[SIDE_KEY]["header"]
    model_line = header[1]
    assert model_line.startswith("model: evil\\nimport os; os.system('touch PWNED') #\\r\\n")
    assert not any(ch in line for line in header for ch in "\n\r\x85\u2028\x1b\x00")


def test_megatron_bridge_yaml_keeps_the_name_in_comments():
    """The Megatron-Bridge override loads to its six sections only; the name stays in the header comment."""
    text = export_document(HSDP, "megatron-bridge")
    assert check_export("megatron-bridge", text, HSDP) == []
    cfg = yaml.safe_load(text)
    assert set(cfg) == {"model", "train", "ddp", "dist", "checkpoint", "mixed_precision"}
    assert cfg["train"] == {"global_batch_size": 64, "micro_batch_size": 4}
    assert any("evil\\nimport os" in line for line in _comments(text))
