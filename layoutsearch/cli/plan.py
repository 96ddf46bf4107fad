"""`layoutsearch plan`: the whole answer on one page: the best layout, its step time, goodput,
checkpoint interval, days, device-hours, energy and cost, and the fallback table
(--fallback-nodes), as a table, JSON, YAML or Markdown (``--format markdown`` or ``-o plan.md``)."""

from __future__ import annotations

from layoutsearch import engine
from layoutsearch.cli.common import exit_if_infeasible, print_document, write_output
from layoutsearch.cli.options import CommandSpec, Given, build_command, register_command
from layoutsearch.cli.solve import SEARCH
from layoutsearch.core.options import PLAN_FIELDS, PlanFormat, PlanOptions, PlanOutputOptions
from layoutsearch.report import render

MARKDOWN_SUFFIXES = (".md", ".markdown")

SPEC = CommandSpec(
    "plan",
    (*SEARCH, (PlanOutputOptions, ("format", "output")), (PlanOptions, PLAN_FIELDS["solve"])),
    defaults={"top": 1},
)


def plan(given: Given) -> None:
    """One page per plan: layout, step time, goodput, checkpoints, days, device-hours, energy, cost, fallbacks."""
    problem, workload, search, options = given.problem, given.workload, given.search, given.plan
    assert problem and workload and search and options, "SPEC declares these"
    assert isinstance(given.output, PlanOutputOptions), "SPEC declares plan's own outputs"
    fmt, output = given.output.format, given.output.output
    if output and output.lower().endswith(MARKDOWN_SUFFIXES):
        fmt = PlanFormat.markdown
    run = engine.solve(problem, workload, search, options)
    document = plan_document(run.document)
    if fmt == PlanFormat.markdown:
        write_output(render.plan_markdown(document), output)
    elif fmt == PlanFormat.table:
        render.plan_page(document, run.result.layouts[:1])
    elif output:
        import json

        write_output(json.dumps(document, indent=2, allow_nan=False), output)
    else:
        print_document(document, fmt.value)
    exit_if_infeasible(run)


def plan_document(solve_document: dict) -> dict:
    """The plan's JSON: the solve document's problem and solver, its winner (null when nothing
    fits) and its fallback list (empty without --fallback-nodes)."""
    layouts = solve_document["layouts"]
    return {
        "problem": solve_document["problem"],
        "solver": solve_document["solver"],
        "layout": layouts[0] if layouts else None,
        "fallback": solve_document.get("fallback", []),
    }


def command():
    return build_command(SPEC, plan, plan.__doc__)


def register(app) -> None:
    register_command(app, "plan", command)
