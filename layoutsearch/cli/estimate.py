"""`layoutsearch estimate`: does MY layout fit, and where does the time go? With --tokens and
--price-per-device-hour, how long and how much to train; with --what-if, the same layout on
scaled hardware."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import (
    ClusterOpt,
    Format,
    FormatOpt,
    ModelOpt,
    SeqLenOpt,
    SeqsOpt,
    WorkloadArgs,
    check_range,
    one_line,
    print_document,
    reports_errors,
    takes_problem_file,
    takes_workload_options,
)
from layoutsearch.cli.planning import PriceOpt, TokensOpt, WhatIfOpt, check_plan, estimate_what_if
from layoutsearch.core.parse import parse_axes, parse_degrees
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, MfuConvention, Recompute, Schedule
from layoutsearch.core.stages import default_microbatches
from layoutsearch.core.units import MAX_MICROBATCHES, MAX_MODEL_DIM, MAX_VIRTUAL_STAGES_RECORD
from layoutsearch.costs.estimate import estimate as estimate_layout
from layoutsearch.report import render
from layoutsearch.report.output import estimate_document


@reports_errors
@takes_problem_file
@takes_workload_options
def estimate(
    model: ModelOpt = "llama70b",
    cluster: ClusterOpt = "v5p-8192",
    layout: Annotated[
        str, typer.Option("--layout", "-l", help="Degrees, e.g. fsdp=1024,tp=8 (missing = 1)")
    ] = "fsdp=1024,tp=8",
    seqs: SeqsOpt = 1024,
    seq_len: SeqLenOpt = 4096,
    microbatches: Annotated[
        int | None,
        typer.Option(
            "--microbatches",
            min=1,
            max=MAX_MICROBATCHES,
            help="Microbatches per step (default: 1, or with a pipeline the smallest count >= pp that divides the batch)",
        ),
    ] = None,
    first_stage_layers: Annotated[
        int | None,
        typer.Option(
            "--first-stage-layers",
            min=1,
            max=MAX_MODEL_DIM,
            help="Layers of the first pipeline stage (uneven split; default: the engine's split)",
        ),
    ] = None,
    last_stage_layers: Annotated[
        int | None,
        typer.Option(
            "--last-stage-layers",
            min=1,
            max=MAX_MODEL_DIM,
            help="Layers of the last pipeline stage",
        ),
    ] = None,
    recompute: Annotated[Recompute, typer.Option("--recompute")] = Recompute.none,
    zero_stage: Annotated[
        int, typer.Option("--zero-stage", help="0 DDP, 1 optimizer, 2 + grads, 3 + weights sharded")
    ] = 3,
    virtual_stages: Annotated[
        int, typer.Option("--virtual-stages", min=1, max=MAX_VIRTUAL_STAGES_RECORD)
    ] = 1,
    schedule: Annotated[Schedule, typer.Option("--schedule")] = Schedule["1f1b"],
    sequence_parallel: Annotated[
        bool, typer.Option("--sequence-parallel/--no-sequence-parallel")
    ] = True,
    axes: Annotated[
        str | None, typer.Option("--axes", help="Placement, e.g. 'tp=z:8;fsdp=z:4,y:16,x:16'")
    ] = None,
    mfu_convention: Annotated[
        MfuConvention, typer.Option("--mfu-convention")
    ] = MfuConvention.model,
    tokens: TokensOpt = None,
    workload_options: WorkloadArgs = WorkloadArgs(),
    fmt: FormatOpt = Format.table,
    price_per_device_hour: PriceOpt = None,
    what_if: WhatIfOpt = None,
) -> None:
    """Does MY layout fit, and where does the time go? Memory by moment, time by component."""
    factors = check_plan(tokens, price_per_device_hour, what_if)
    options = workload_options
    problem = Problem.build(model, cluster, options.workload(seqs, seq_len, tokens))
    degrees = parse_degrees(layout)
    if microbatches is None:
        microbatches = default_microbatches(
            seqs,
            degrees.get("dp", 1) * degrees.get("fsdp", 1),
            degrees.get("pp", 1),
            virtual_stages,
        )
    lay = Layout(
        **degrees,
        zero_stage=check_range(zero_stage, 0, 3, "--zero-stage", "zero_stage"),
        first_stage_layers=first_stage_layers,
        last_stage_layers=last_stage_layers,
        virtual_stages=virtual_stages,
        num_microbatches=microbatches,
        recompute=recompute.value,
        sequence_parallel=sequence_parallel,
        schedule=Schedule.interleaved.value if virtual_stages > 1 else schedule.value,
        axes=parse_axes(axes) if axes and axes.strip() else None,
    )
    est = estimate_layout(problem, lay, mfu_convention=mfu_convention.value)
    alt = estimate_what_if(est, factors, price_per_device_hour) if factors else None
    doc = estimate_document(est, price_per_device_hour)
    if alt:
        doc["what_if"] = alt.document
    if fmt != Format.table:
        print_document(doc, fmt)
    else:
        render.estimate_report(problem.model_id, problem.cluster_name, est, price_per_device_hour)
        if alt:
            render.what_if_report(alt.document, est, alt.winner, None)
    if not est.fits:
        typer.echo(f"does not fit: {one_line(est.violations[-1].message)}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
