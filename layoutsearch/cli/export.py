"""`layoutsearch export RESULT.json --to TARGET`: a saved layout as a training framework's configuration."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import OutputOpt, reports_errors, write_output
from layoutsearch.core import io
from layoutsearch.core.errors import InvalidArgumentError, InvalidLayoutError
from layoutsearch.export import export_document
from layoutsearch.export.context import not_a_result


@reports_errors
def export(
    result: Annotated[str, typer.Argument(help="A solve or estimate JSON document")],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="maxtext, megatron, megatron-bridge (recipe override YAML), torchtitan (0.2 TOML), torchtitan-0.3 (config_registry module) or deepspeed",
        ),
    ],
    rank: Annotated[
        int, typer.Option("--rank", min=1, max=50, help="Which layout of the result")
    ] = 1,
    output: OutputOpt = None,
) -> None:
    """Write a saved layout as a training framework's configuration (checked by that framework's rules)."""
    document = io.read_json(result, "RESULT")
    why = not_a_result(document)
    if why is not None:
        raise InvalidArgumentError(
            io.says(
                result,
                "RESULT",
                f"not a result document (solve or estimate --format json; OUTPUT.md): {why}",
            )
        )
    try:
        text = export_document(document, to, rank)
    except InvalidLayoutError as exc:
        raise InvalidLayoutError(f"{exc}; {rerun_hint(document, to)}") from None
    write_output(text, output)


def rerun_hint(document: dict, target: str) -> str:
    """The command that searches only the layouts ``target`` can express, for the document's problem."""
    problem = document.get("problem")
    if not isinstance(problem, dict):
        problem = {}
    named = [
        f"{flag} {problem[key]}"
        for flag, key in (
            ("--model", "model"),
            ("--cluster", "cluster"),
            ("--seqs", "global_batch_seqs"),
            ("--seq-len", "seq_len"),
        )
        if isinstance(problem.get(key), (str, int))
    ]
    command = " ".join(["layoutsearch solve", *named, "...", f"--export {target} -o FILE"])
    return f"re-run `{command}` (with the options that made this result) to search only layouts {target} can express"


def register(app: typer.Typer) -> None:
    app.command("export")(export)
