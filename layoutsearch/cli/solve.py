"""`layoutsearch solve`: the best layouts, proven optimal (optionally written for a framework)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from layoutsearch.cli.common import (
    OutputOpt, SearchArgs, Format, FormatOpt, exit_if_infeasible, print_document, reports_errors, run_search, search_command,
    write_output,
)
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.export import export_document
from layoutsearch.report import render


@reports_errors
@search_command()
def solve(
    search: SearchArgs,
    fmt: FormatOpt = Format.table,
    export: Annotated[Optional[str], typer.Option("--export", help="Also write layout 1 as maxtext|megatron|torchtitan|deepspeed")] = None,
    output: OutputOpt = None,
) -> None:
    """The best layouts, proven optimal: degrees and axes, memory, step time split, MFU, tokens/s."""
    if export and not output and fmt != Format.table:
        raise InvalidArgumentError(f"--format {fmt.value}: stdout carries the --export {export} file; "
                                   f"give it a file with -o FILE")
    run = run_search(search, target=export)
    if export and run.result.layouts:
        write_output(export_document(run.document, export), output)
        typer.echo(f"searched only layouts {export} can express", err=True)
    if fmt != Format.table:
        print_document(run.document, fmt)
    elif not (export and not output):
        render.solve_report(search.model, search.cluster, run.result, run.explanation)
    exit_if_infeasible(run)


def register(app: typer.Typer) -> None:
    app.command("solve")(solve)
