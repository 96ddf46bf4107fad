"""`layoutsearch calibrate RUNS.yaml`: fit a few calibration fields per accelerator; writes only with --write."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Annotated

import typer

from layoutsearch.cli.common import reports_errors
from layoutsearch.core.catalogue import accelerator_names, catalogue_dir
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.parse import parse_names
from layoutsearch.core.specs import CUDA_GRAPHS
from layoutsearch.report import render
from layoutsearch.validation.calibrate import (
    DEFAULT_LOSS,
    FAMILIES,
    SHARED_KIND,
    YAML_KEYS,
    write_calibration,
)
from layoutsearch.validation.calibrate import calibrate as fit
from layoutsearch.validation.mapping import cuda_graphs as record_cuda_graphs
from layoutsearch.validation.validate import load_runs


@reports_errors
def calibrate(
    runs: Annotated[str, typer.Argument(help="Measured runs (docs/RUN_RECORDS.md format)")],
    accelerator: Annotated[
        str | None, typer.Option("--accelerator", help="Only these, e.g. h100,a100-80gb")
    ] = None,
    fit_fields: Annotated[
        str, typer.Option("--fit", help="Calibration fields to fit")
    ] = "matmul_efficiency,attention_efficiency",
    shared: Annotated[
        str,
        typer.Option(
            "--shared",
            help="Fields fitted once over every family of their kind (overlap_interference: the GPUs), beside --fit",
        ),
    ] = "",
    fit_families: Annotated[
        str | None,
        typer.Option(
            "--fit-families",
            help="Fit a --fit field only for some families or accelerators, FIELD=FAMILY[+FAMILY],..., e.g. "
            "matmul_efficiency=b200-class; the others keep their values of it",
        ),
    ] = None,
    graphs: Annotated[
        str | None,
        typer.Option(
            "--cuda-graphs",
            help="Only the records costed with these CUDA graphs (mapping rules 20 and 22), e.g. "
            "full_iteration: fit moe_overhead_full_graph_share on the runs with one graph per step",
        ),
    ] = None,
    loss: Annotated[
        str,
        typer.Option(
            "--loss",
            help="Of the log errors: huber (squares within Huber's 1.345 robust standard deviations of the "
            "records' log errors, linear beyond: a run far off the rest pulls less), or squares",
        ),
    ] = DEFAULT_LOSS,
    write: Annotated[
        bool, typer.Option("--write", help="Write the fitted values into hardware/*.yaml")
    ] = False,
) -> None:
    """Fit a few calibration fields per accelerator (Huber's loss, or --loss squares, on log error); writes only
    with --write."""
    fields = (
        parse_names(fit_fields, tuple(YAML_KEYS), "--fit", "field")
        if fit_fields or not shared
        else ()
    )
    accs = (
        parse_names(accelerator, tuple(accelerator_names()), "--accelerator", "accelerator")
        if accelerator is not None
        else None
    )
    only = _fit_families(fit_families) if fit_families is not None else None
    common = parse_names(shared, tuple(SHARED_KIND), "--shared", "field") if shared else ()
    records = load_runs(runs)
    wanted = (
        parse_names(graphs, CUDA_GRAPHS, "--cuda-graphs", "value")
        if graphs is not None
        else CUDA_GRAPHS
    )
    exclude = [r["id"] for r in records if record_cuda_graphs(r) not in wanted]
    result = fit(
        records,
        accelerators=accs,
        params=fields,
        shared=common,
        exclude=exclude,
        loss=loss,
        fit_families=only,
    )
    if not any(
        family.get("records") for family in result.values()
    ):  # nothing to fit: say so, exit 1
        which = f"of {', '.join(accs)} " if accs else ""
        graphed = f" costed with --cuda-graphs {graphs}" if graphs is not None else ""
        typer.echo(
            f"error: no record {which}in {runs}{graphed} has a measured throughput to fit", err=True
        )
        raise typer.Exit(1)
    render.calibration_report(result, loss)
    if write:
        written = write_calibration(
            result,
            catalogue_dir("hardware"),
            runs_name=Path(runs).name,
            today=datetime.date.today(),
        )
        typer.echo(f"wrote {', '.join(str(p) for p in written)}", err=True)


def _fit_families(text: str) -> dict[str, tuple[str, ...]]:
    """'matmul_efficiency=b200-class+a100' -> {'matmul_efficiency': ('b200-class', 'a100')}: known fields and
    families (or accelerator ids), each field once."""
    known = (*accelerator_names(), *sorted(set(FAMILIES.values())))
    out: dict[str, tuple[str, ...]] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        field, sep, families = item.partition("=")
        if not sep:
            raise InvalidArgumentError(
                f"--fit-families: '{item}' is not FIELD=FAMILY[+FAMILY] (e.g. matmul_efficiency=b200-class)"
            )
        (name,) = parse_names(field, tuple(YAML_KEYS), "--fit-families", "field")
        if name in out:
            raise InvalidArgumentError(f"--fit-families: field '{name}' given twice")
        out[name] = parse_names(families.replace("+", ","), known, "--fit-families", "family")
    if not out:
        raise InvalidArgumentError("--fit-families: no FIELD=FAMILY given")
    return out


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
