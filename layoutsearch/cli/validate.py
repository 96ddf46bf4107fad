"""`layoutsearch validate RUNS.yaml`: the cost model against published measured runs."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import (
    Format,
    FormatOpt,
    finite_from,
    one_line,
    print_document,
    progress_line,
    reports_errors,
)
from layoutsearch.report import render
from layoutsearch.validation.bands import band_line
from layoutsearch.validation.validate import load_runs, loso_line, validate_runs


@reports_errors
def validate(
    runs: Annotated[str, typer.Argument(help="Measured runs (docs/RUN_RECORDS.md format)")],
    max_median_error: Annotated[
        float, typer.Option("--max-median-error", callback=finite_from(0.0))
    ] = 0.10,
    rank: Annotated[
        bool,
        typer.Option("--rank/--no-rank", help="Rank each published layout among the candidates"),
    ] = True,
    loso: Annotated[
        bool,
        typer.Option(
            "--loso/--no-loso",
            help="Also refit the calibration without each source in turn and predict that source "
            "(leave one source out: summary.loso and each record's loso_rel_error; takes minutes). "
            "Off by default: then summary.loso is null",
        ),
    ] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Predicted against measured tokens/s per device; exit 1 when the median error exceeds the limit."""
    records = load_runs(runs)
    work = ", ranking each among its candidates" if rank else ""
    work += ", refitting without each source" if loso else ""
    with progress_line(f"validating {len(records)} records{work}"):
        doc = validate_runs(records, max_median_error, rank=rank, loso=loso)
    if fmt != Format.table:
        print_document(doc, fmt)
    else:
        render.validation_report(doc)
        typer.echo(band_line(doc["summary"]))
        typer.echo(loso_line(doc["summary"]["loso"]))
    if not doc["summary"]["passed"]:
        typer.echo(one_line(doc["summary"]["message"]), err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
