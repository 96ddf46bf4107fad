"""`layoutsearch estimate`: does MY layout fit, and where does the time go? With --tokens and
--price-per-device-hour, how long and how much to train; with --what-if, the same layout on
scaled hardware."""

from __future__ import annotations

import typer

from layoutsearch import engine
from layoutsearch.cli.common import one_line, print_document
from layoutsearch.cli.options import ALL, CommandSpec, Given, build_command, register_command
from layoutsearch.core.options import (
    GOODPUT_OPTIONS,
    Format,
    LayoutOptions,
    OutputOptions,
    PlanOptions,
    ProblemOptions,
    WorkloadOptions,
)

SPEC = CommandSpec(
    "estimate",
    (
        (ProblemOptions, ("model", "cluster")),
        (LayoutOptions, ("layout",)),
        (ProblemOptions, ("seqs", "seq_len")),
        (LayoutOptions, tuple(name for name in LayoutOptions.model_fields if name != "layout")),
        (PlanOptions, ("tokens",)),
        (OutputOptions, ("format",)),
        (PlanOptions, ("price_per_device_hour", "what_if", "against_best", *GOODPUT_OPTIONS)),
        (WorkloadOptions, ALL),
    ),
)


def estimate(given: Given) -> None:
    """Does MY layout fit, and where does the time go? Memory by moment, time by component."""
    problem, workload, layout, plan = given.problem, given.workload, given.layout, given.plan
    assert problem and workload and layout and plan and given.output, "SPEC declares these groups"
    run = engine.estimate(problem, workload, layout, plan)
    est, fmt = run.estimate, given.output.format
    if fmt != Format.table:
        print_document(run.document, fmt)
    else:
        from layoutsearch.report import planning, render

        price = plan.price_per_device_hour
        render.estimate_report(
            run.problem.model_id, run.problem.cluster_name, est, price, planning.resilience_of(plan)
        )
        if run.what_if:
            render.what_if_report(run.what_if.document, est, run.what_if.winner, None)
        if run.document.get("against_best"):
            typer.echo(render.against_best_line(run.document["against_best"]))
    if not est.fits:
        typer.echo(
            f"does not fit: {one_line(est.violations[-1].message)}{_may_run(est)}"
            f"{_one_sequence_microbatches(est)}",
            err=True,
        )
        raise typer.Exit(1)


def _one_sequence_microbatches(est) -> str:
    """Where memory is violated and each microbatch holds several sequences (``--microbatches`` defaults to
    the whole local batch in one pass without a pipeline), a clause with the peak of one sequence a
    microbatch: what a reader would try first, and whether it fits."""
    from dataclasses import replace

    from layoutsearch.costs.estimate import estimate

    lay = est.layout
    seqs = int(lay.microbatch_seqs(est.workload))
    if "memory" not in [v.code for v in est.violations] or seqs <= 1:
        return ""
    k = lay.num_microbatches * seqs
    smaller = estimate(est.problem, replace(lay, num_microbatches=k), strict=False)
    return (
        f"; its microbatch holds {seqs} sequences: with --microbatches {k} (one each) it needs "
        f"{smaller.memory_bytes['peak'] / 1e9:.1f} GB{' and fits' if smaller.fits else ''}"
    )


def _may_run(est) -> str:
    """Where memory is the only violation and the peak is over the usable memory by no more than the memory
    model over-predicts measured peaks (``largest_peak_that_may_run``), a clause that says the layout may run."""
    from layoutsearch.core.uncertainty import largest_peak_that_may_run

    if [v.code for v in est.violations] != ["memory"]:
        return ""
    peak, usable = est.memory_bytes["peak"], est.memory_bytes["capacity"]
    largest = largest_peak_that_may_run(usable)
    if peak > largest:
        return ""
    return (
        f"; {peak / usable - 1:.1%} over, within what the memory model over-predicts measured peaks "
        f"(up to {largest / usable:.2f}x), so it may run"
    )


def command():
    return build_command(SPEC, estimate, estimate.__doc__)


def register(app: typer.Typer) -> None:
    register_command(app, "estimate", command)
