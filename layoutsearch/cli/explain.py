"""`layoutsearch explain`: why the winner beats the next best, or why nothing fits (exit 1); with
--sensitivity, how the winner's step time moves with each hardware number (layout fixed)."""

from __future__ import annotations

import typer

from layoutsearch.cli.common import (
    Format,
    FormatOpt,
    SearchArgs,
    exit_if_infeasible,
    print_document,
    reports_errors,
    search_command,
)
from layoutsearch.cli.planning import (
    PriceOpt,
    SensitivityOpt,
    TokensOpt,
    check_plan,
    planned_search,
)
from layoutsearch.report import render
from layoutsearch.report.output import band_of
from layoutsearch.report.planning import SENSITIVITY_FACTOR
from layoutsearch.report.planning import sensitivity as step_sensitivity
from layoutsearch.search.explain import compare, ranking_notes


@reports_errors
@search_command(top=2)
def explain(
    search: SearchArgs,
    fmt: FormatOpt = Format.table,
    tokens: TokensOpt = None,
    price_per_device_hour: PriceOpt = None,
    sensitivity: SensitivityOpt = False,
) -> None:
    """Why the winner beats the next best, or why nothing fits (exit 1)."""
    check_plan(tokens, price_per_device_hour)
    run = planned_search(search, tokens, price_per_device_hour, top_k=max(search.top, 2))
    doc, layouts = run.document, run.result.layouts
    if layouts:
        band = band_of(layouts[0])
        doc["explanation"] = {
            "versus": [compare(layouts[0], other) for other in layouts[1:]],
            "ranking": ranking_notes(run.result, band),
            "tie_tolerance": run.result.tie_tolerance,
            "uncertainty_rel_band": list(band),
        }
    if sensitivity:
        doc["sensitivity"] = step_sensitivity(layouts[0], SENSITIVITY_FACTOR) if layouts else None
        doc["sensitivity_factor"] = SENSITIVITY_FACTOR
    if fmt != Format.table:
        print_document(doc, fmt)
    else:
        render.explain_report(
            search.model_name,
            search.cluster_name,
            run.result,
            doc.get("explanation") or run.explanation,
            price_per_device_hour,
        )
        if doc.get("sensitivity"):
            render.sensitivity_report(doc["sensitivity"], layouts[0], SENSITIVITY_FACTOR)
    exit_if_infeasible(run)


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
