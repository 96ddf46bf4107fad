"""`layoutsearch calibrate RUNS.yaml`: fit a few calibration fields per accelerator; writes only with --write."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer

from layoutsearch.cli.common import reports_errors
from layoutsearch.core.catalogue import accelerator_names, catalogue_dir
from layoutsearch.core.parse import parse_names
from layoutsearch.report import render
from layoutsearch.validation.calibrate import SHARED_KIND, YAML_KEYS, calibrate as fit, write_calibration
from layoutsearch.validation.validate import load_runs


@reports_errors
def calibrate(
    runs: Annotated[str, typer.Argument(help="Measured runs (docs/RUN_RECORDS.md format)")],
    accelerator: Annotated[Optional[str], typer.Option("--accelerator", help="Only these, e.g. h100,a100-80gb")] = None,
    fit_fields: Annotated[str, typer.Option("--fit", help="Calibration fields to fit")] = "matmul_efficiency,attention_efficiency",
    shared: Annotated[str, typer.Option("--shared", help="Fields fitted once over every family of their kind "
                                        "(overlap_interference: the GPUs), beside --fit")] = "",
    write: Annotated[bool, typer.Option("--write", help="Write the fitted values into hardware/*.yaml")] = False,
) -> None:
    """Fit a few calibration fields per accelerator (least squares on log error); writes only with --write."""
    fields = parse_names(fit_fields, tuple(YAML_KEYS), "--fit", "field")
    accs = (parse_names(accelerator, tuple(accelerator_names()), "--accelerator", "accelerator")
            if accelerator is not None else None)
    common = parse_names(shared, tuple(SHARED_KIND), "--shared", "field") if shared else ()
    result = fit(load_runs(runs), accelerators=accs, params=fields, shared=common)
    render.calibration_report(result)
    if write:
        written = write_calibration(result, catalogue_dir("hardware"), runs_name=Path(runs).name,
                                    today=datetime.date.today())
        typer.echo(f"wrote {', '.join(str(p) for p in written)}", err=True)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
