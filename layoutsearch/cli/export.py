"""`layoutsearch export RESULT.json --to TARGET`: a saved layout as a training framework's configuration."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import OutputOpt, reports_errors, write_output
from layoutsearch.core import io
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.export import export_document


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
    if not isinstance(document, dict):
        raise InvalidArgumentError(
            io.says(
                result,
                "RESULT",
                f"not a result document: a JSON object (OUTPUT.md), not {type(document).__name__}",
            )
        )
    write_output(export_document(document, to, rank), output)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
