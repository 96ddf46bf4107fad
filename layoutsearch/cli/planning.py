"""The planning options of solve, estimate, explain and sweep (--tokens, --price-per-device-hour,
--what-if, --sensitivity) and the runs they add: a search whose Workload carries the training
tokens and whose layout records are priced, and the what-if re-solve on scaled hardware."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from layoutsearch.cli.common import SearchArgs, SearchRun, finite, run_search
from layoutsearch.core.problem import Problem
from layoutsearch.costs.estimate import Estimate
from layoutsearch.report.output import set_price, what_if_document
from layoutsearch.report.planning import (
    WHAT_IF_KEYS,
    check_price,
    check_tokens,
    parse_what_if,
    re_estimate,
    scaled_problem,
    with_training_tokens,
)
from layoutsearch.search import SearchResult, solve

TokensOpt = Annotated[
    float | None,
    typer.Option(
        "--tokens",
        callback=finite,
        help="Training tokens (e.g. 15e12): days, device-hours and cost of each layout",
    ),
]
PriceOpt = Annotated[
    float | None,
    typer.Option(
        "--price-per-device-hour",
        callback=finite,
        help="Price of one device for one hour (any currency): cost = device-hours x price",
    ),
]
WhatIfOpt = Annotated[
    str | None,
    typer.Option(
        "--what-if",
        help=f"Scale hardware numbers and compare: KEY=FACTOR[,KEY=FACTOR], KEY one of {', '.join(WHAT_IF_KEYS)}",
    ),
]
SensitivityOpt = Annotated[
    bool,
    typer.Option(
        "--sensitivity",
        help="Step-time change of layout 1 when each hardware number is +10% (layout fixed)",
    ),
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedSearch(SearchArgs):
    """SearchArgs whose Problem's Workload carries ``training_tokens`` (the problem record then holds them)."""

    training_tokens: float | None = None

    def problem(self) -> Problem:
        return with_training_tokens(super().problem(), self.training_tokens)


def check_plan(
    tokens: float | None, price: float | None, what_if: str | None = None
) -> dict[str, float] | None:
    """Check the planning options before any solving; the what-if factors (None without --what-if)."""
    check_tokens(tokens)
    check_price(price)
    return parse_what_if(what_if) if what_if is not None else None


def planned_search(
    search: SearchArgs,
    tokens: float | None,
    price: float | None,
    *,
    target: str | None = None,
    top_k: int | None = None,
) -> SearchRun:
    """run_search with the tokens in the Workload and every layout record priced."""
    fields = {f.name: getattr(search, f.name) for f in dataclasses.fields(search)}
    run = run_search(PlannedSearch(**fields, training_tokens=tokens), target=target, top_k=top_k)
    set_price(run.document["layouts"], price)
    return run


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """The what-if re-solve: its `what_if` object (output.py) and the winner on the scaled hardware."""

    document: dict
    winner: Estimate | None
    result: SearchResult | None


def solve_what_if(
    run: SearchRun,
    search: SearchArgs,
    factors: dict[str, float],
    price: float | None,
    target: str | None = None,
) -> WhatIf:
    """Solve the same request on the scaled hardware and compare its winner with the base one."""
    result = solve(scaled_problem(run.problem, factors), search.request(target=target, top_k=1))
    base = run.result.layouts[0] if run.result.layouts else None
    winner = result.layouts[0] if result.layouts else None
    doc = what_if_document(
        factors,
        base,
        winner,
        method="re-solved",
        status=result.status,
        base_on_other=re_estimate(base, factors) if base else None,
        price_per_device_hour=price,
    )
    return WhatIf(doc, winner, result)


def estimate_what_if(est: Estimate, factors: dict[str, float], price: float | None) -> WhatIf:
    """The same layout re-estimated on the scaled hardware."""
    other = re_estimate(est, factors)
    doc = what_if_document(
        factors,
        est,
        other,
        method="re-estimated",
        status=None,
        base_on_other=other,
        price_per_device_hour=price,
    )
    return WhatIf(doc, other, None)
