"""`layoutsearch solve`: the best layouts, proven optimal (optionally written for a framework),
with the time and cost to train (--tokens, --price-per-device-hour) and a what-if re-solve on
scaled hardware (--what-if)."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import (
    Format,
    FormatOpt,
    OutputOpt,
    SearchArgs,
    exit_if_infeasible,
    print_document,
    reports_errors,
    search_command,
    write_output,
)
from layoutsearch.cli.planning import (
    PriceOpt,
    TokensOpt,
    WhatIfOpt,
    check_plan,
    planned_search,
    solve_what_if,
)
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.export import export_document
from layoutsearch.report import render


@reports_errors
@search_command()
def solve(
    search: SearchArgs,
    fmt: FormatOpt = Format.table,
    export: Annotated[
        str | None,
        typer.Option(
            "--export",
            help="Also write layout 1 as maxtext|megatron|torchtitan|torchtitan-0.3|deepspeed",
        ),
    ] = None,
    output: OutputOpt = None,
    tokens: TokensOpt = None,
    price_per_device_hour: PriceOpt = None,
    what_if: WhatIfOpt = None,
) -> None:
    """The best layouts, proven optimal: degrees and axes, memory, step time split, MFU, tokens/s."""
    if output and not export:
        raise InvalidArgumentError(
            f"-o/--output {output}: solve writes a file only with --export TARGET "
            f"(for the result document: --format json > {output})"
        )
    if export and not output and fmt != Format.table:
        raise InvalidArgumentError(
            f"--format {fmt.value}: stdout carries the --export {export} file; give it a file with -o FILE"
        )
    factors = check_plan(tokens, price_per_device_hour, what_if)
    run = planned_search(search, tokens, price_per_device_hour, target=export)
    alt = solve_what_if(run, search, factors, price_per_device_hour, export) if factors else None
    if alt:
        run.document["what_if"] = alt.document
    if export and run.result.layouts:
        write_output(export_document(run.document, export), output)
        typer.echo(f"searched only layouts {export} can express", err=True)
    if fmt != Format.table:
        print_document(run.document, fmt)
    elif not (export and not output):
        render.solve_report(
            search.model_name,
            search.cluster_name,
            run.result,
            run.explanation,
            price_per_device_hour,
        )
        if alt:
            render.what_if_report(
                alt.document,
                run.result.layouts[0] if run.result.layouts else None,
                alt.winner,
                run.result.status,
            )
    exit_if_infeasible(run)


def register(app: typer.Typer) -> None:
    app.command("solve")(solve)
