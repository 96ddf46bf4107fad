"""`layoutsearch explain`: why the winner beats the next best, or why nothing fits (exit 1); with
--sensitivity, how the winner's step time moves with each hardware number (layout fixed)."""

from __future__ import annotations

import typer

from layoutsearch import engine
from layoutsearch.cli.common import exit_if_infeasible, named, print_document, progress_line
from layoutsearch.cli.options import CommandSpec, Given, build_command, register_command
from layoutsearch.cli.solve import SEARCH
from layoutsearch.core.options import PLAN_FIELDS, Format, OutputOptions, PlanOptions
from layoutsearch.report import planning

SPEC = CommandSpec(
    "explain",
    (
        *SEARCH,
        (OutputOptions, ("format",)),
        (PlanOptions, PLAN_FIELDS["explain"]),
    ),
    defaults={"top": 2},
)


def explain(given: Given) -> None:
    """Why the winner beats the next best, or why nothing fits (exit 1)."""
    problem, workload, search, plan = given.problem, given.workload, given.search, given.plan
    assert problem and workload and search and plan and given.output, "SPEC declares these groups"
    with progress_line(f"explaining {named(problem.model)} on {named(problem.cluster)}") as phase:
        run = engine.explain(problem, workload, search, plan, on_phase=phase)
    doc, fmt = run.document, given.output.format
    if fmt != Format.table:
        print_document(doc, fmt)
    else:
        from layoutsearch.report import render
        from layoutsearch.report.planning import SENSITIVITY_FACTOR

        render.solve_report(
            run.problem.model_id,
            run.problem.cluster_name,
            run.result,
            None,
            plan.price_per_device_hour,
            planning.resilience_of(plan),
        )
        render.explain_report(run.result, doc.get("explanation") or run.explanation)
        if doc.get("sensitivity"):
            render.sensitivity_report(doc["sensitivity"], run.result.layouts[0], SENSITIVITY_FACTOR)
    exit_if_infeasible(run)


def command():
    return build_command(SPEC, explain, explain.__doc__)


def register(app: typer.Typer) -> None:
    register_command(app, "explain", command)
