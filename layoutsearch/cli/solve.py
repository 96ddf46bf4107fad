"""`layoutsearch solve`: the best layouts, proven optimal (optionally written for a framework),
with the time and cost to train (--tokens, --price-per-device-hour) and a what-if re-solve on
scaled hardware (--what-if)."""

from __future__ import annotations

import typer

from layoutsearch import engine
from layoutsearch.cli.common import (
    exit_if_infeasible,
    named,
    print_document,
    progress_line,
    write_output,
)
from layoutsearch.cli.options import ALL, CommandSpec, Given, build_command, register_command
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import (
    PLAN_FIELDS,
    Format,
    OutputOptions,
    PlanOptions,
    ProblemOptions,
    SearchOptions,
    WorkloadOptions,
)
from layoutsearch.report import planning

# The options of a search, shared with explain.
SEARCH = ((ProblemOptions, ALL), (WorkloadOptions, ALL), (SearchOptions, ALL))
SPEC = CommandSpec(
    "solve",
    (
        *SEARCH,
        (OutputOptions, ("format", "export", "output")),
        (PlanOptions, PLAN_FIELDS["solve"]),
    ),
)


def solve(given: Given) -> None:
    """The best layouts, proven optimal: degrees and axes, memory, step time split, MFU, tokens/s."""
    problem, workload, search, plan = given.problem, given.workload, given.search, given.plan
    assert problem and workload and search and plan and given.output, "SPEC declares these groups"
    fmt, export, output = given.output.format, given.output.export, given.output.output
    if output and not export:
        raise InvalidArgumentError(
            f"-o/--output {output}: solve writes a file only with --export TARGET "
            f"(for the result document: --format json > {output})"
        )
    if export and not output and fmt != Format.table:
        raise InvalidArgumentError(
            f"--format {fmt.value}: stdout carries the --export {export} file; give it a file with -o FILE"
        )
    with progress_line(f"solving {named(problem.model)} on {named(problem.cluster)}") as phase:
        run = engine.solve(problem, workload, search, plan, export=export, on_phase=phase)
    if export and run.result.layouts:
        from layoutsearch.export import export_document

        write_output(export_document(run.document, export), output)
        typer.echo(f"searched only layouts {export} can express", err=True)
    if fmt != Format.table:
        print_document(run.document, fmt)
    elif not (export and not output):
        from layoutsearch.report import render

        render.solve_report(
            run.problem.model_id,
            run.problem.cluster_name,
            run.result,
            run.explanation,
            plan.price_per_device_hour,
            planning.resilience_of(plan),
        )
        if run.fallbacks:
            render.fallback_report(run.document["fallback"], run.result.layouts[0].tokens_per_s)
        if run.what_if:
            render.what_if_report(
                run.what_if.document,
                run.result.layouts[0] if run.result.layouts else None,
                run.what_if.winner,
                run.result.status,
            )
    exit_if_infeasible(run)


def command():
    return build_command(SPEC, solve, solve.__doc__)


def register(app: typer.Typer) -> None:
    register_command(app, "solve", command)
