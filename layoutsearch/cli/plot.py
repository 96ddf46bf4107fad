"""`layoutsearch plot SWEEP_FILE`: MFU, step time and the chosen degrees against device count."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import reports_errors
from layoutsearch.sweep.plot import plot_sweep


@reports_errors
def plot(
    sweep_file: Annotated[str, typer.Argument(help="A sweep file (.parquet or .csv)")],
    output: Annotated[str, typer.Option("--output", "-o", help="PNG to write")] = "sweep.png",
) -> None:
    """MFU and step time against device count, and the chosen degrees, from a sweep file."""
    typer.echo(f"wrote {plot_sweep(sweep_file, output)}", err=True)


def register(app: typer.Typer) -> None:
    app.command("plot")(plot)
