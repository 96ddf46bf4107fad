"""`layoutsearch explain`: why the winner beats the next best, or why nothing fits (exit 1)."""

from __future__ import annotations

import typer

from layoutsearch.cli.common import (
    Format, FormatOpt, SearchArgs, exit_if_infeasible, print_document, reports_errors, run_search, search_command,
)
from layoutsearch.report import render
from layoutsearch.search.explain import compare


@reports_errors
@search_command(top=2)
def explain(search: SearchArgs, fmt: FormatOpt = Format.table) -> None:
    """Why the winner beats the next best, or why nothing fits (exit 1)."""
    run = run_search(search, top_k=max(search.top, 2))
    doc, layouts = run.document, run.result.layouts
    if layouts:
        doc["explanation"] = {"versus": [compare(layouts[0], other) for other in layouts[1:]]}
    if fmt != Format.table:
        print_document(doc, fmt)
    else:
        render.explain_report(search.model, search.cluster, run.result, doc.get("explanation") or run.explanation)
    exit_if_infeasible(run)


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
