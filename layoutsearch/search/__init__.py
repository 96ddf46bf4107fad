"""Layout search: the candidate space, its integer tables, CP-SAT and the exhaustive oracle.

``solve()`` returns a SearchResult whose layouts are re-costed by ``estimate()`` (exact,
unquantised) and re-checked by ``check_layout()``, independently of the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Method, Objective
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.frameworks import Capabilities, capabilities_of
from layoutsearch.search.cpsat import cpsat_top, focus
from layoutsearch.search.enumerate import candidate_grid, enumerate_top
from layoutsearch.search.objectives import value_unit, weigh
from layoutsearch.search.ranking import MAX_TIE_TOLERANCE, TIE_TOLERANCE
from layoutsearch.search.space import Space, build_space
from layoutsearch.search.tables import OutOfTime, Tables, assemble, build_tables

OBJECTIVES = tuple(o.value for o in Objective)
METHODS = tuple(m.value for m in Method)


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """Solver status and proof, wall time, the ranked layouts with their estimates."""

    method: str
    objective: str
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    # quantised, in objectives.UNITS: seconds (step-time; time-to-train: step time / goodput),
    # bytes (gather-volume) or joules per step (energy)
    objective_value: float | None
    bound: float | None
    wall_s: float
    solver_wall_s: float
    num_candidates: int
    rows_kept: int
    quantum_s: float
    layouts: list[Estimate] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)  # quantised values per layout
    candidates: list[tuple] = field(default_factory=list)  # (sk row, r index, z, o) per layout
    tie_tolerance: float = (
        TIE_TOLERANCE  # relative: step times this close are ties (search.ranking)
    )
    ranking_status: str = "OPTIMAL"  # whether the simplest of the tied layouts was proven (CP-SAT)
    stopped: str | None = None  # the time limit ran out before CP-SAT: after which phase
    space: Space  # the candidates searched (CP-SAT by step time: the rows cpsat.focus keeps)
    tables: Tables | None = None
    # by step time, where layout 1 is slower than the least step time beyond the ties (it carries fewer risks):
    # the simplest layout at the least step time, costed (both methods find the same)
    least: Estimate | None = None

    @property
    def gap(self) -> float | None:
        if self.objective_value is None or self.bound is None or not self.objective_value:
            return None
        return max(0.0, (self.objective_value - self.bound) / self.objective_value)


def solve(problem: Problem, request: SearchRequest | None = None) -> SearchResult:
    """The top_k layouts by the objective, values within the tie tolerance counting as ties that
    go to the simplest layout (``search.ranking``; both methods rank alike). The time-to-train
    objective reads the failure and checkpoint options of ``request.resilience``.

    Each answer is costed once by ``estimate()`` (exact, unquantised), whose violations (the
    registry's rules and memory) must be empty: a non-empty list is a bug, never a user error.
    """
    start = time.perf_counter()
    request = request or SearchRequest()
    deadline = start + request.time_limit_s  # the whole search: space and tables included
    objective, method = request.objective, request.method
    tolerance = TIE_TOLERANCE if request.tie_tolerance is None else request.tie_tolerance
    if not 0.0 <= tolerance <= MAX_TIE_TOLERANCE:  # NaN fails too
        raise InvalidArgumentError(
            f"tie tolerance {tolerance} must be a fraction in 0..{MAX_TIE_TOLERANCE}"
        )
    space = build_space(problem, request.options, capabilities_of(request.target))
    if (
        not len(space.sk_k) or not space.num_candidates()
    ):  # e.g. no recompute policy left: nothing to tabulate
        return _unsearched(request, space, None, start, tolerance, "INFEASIBLE")
    if time.perf_counter() > deadline:
        return _stopped(request, space, None, start, tolerance, "the candidate space")
    searched = space.num_candidates()
    try:
        if method == Method.cpsat and objective != Objective.gather_volume:
            space, tables = focus(
                space, request.top_k, deadline, tolerance, objective, request.resilience
            )
        else:
            tables = weigh(build_tables(space, deadline), space, objective, request.resilience)
    except OutOfTime:
        return _stopped(request, space, None, start, tolerance, "the candidate tables")
    if method == Method.enumerate:
        t0 = time.perf_counter()
        found: dict = {}
        answers, _ = enumerate_top(space, tables, objective, request.top_k, tolerance, found)
        info: dict[str, Any] = {
            "status": "OPTIMAL" if answers else "INFEASIBLE",
            "rows_kept": len(space.sk_k),
            "wall_s": time.perf_counter() - t0,
            "objective": found.get("optimum"),
        }
        info["bound"] = info["objective"]
        info["least"] = found.get("least")
    else:
        answers, info = cpsat_top(
            space,
            tables,
            objective,
            request.top_k,
            deadline - time.perf_counter(),
            tolerance=tolerance,
        )
    if not answers and info["status"] == "UNKNOWN":
        return _stopped(request, space, tables, start, tolerance, "the rows' bounds")
    unit = value_unit(tables, space)
    estimates, metrics, candidates = [], [], []
    for row, ri, z, o, m in answers:
        est = estimate(problem, _layout_of(space, row, ri, z, o), strict=False)
        if est.violations:  # the tables and estimate() disagree: a bug, never a user error
            raise AssertionError(
                f"search returned an invalid layout {est.layout}: {[v.message for v in est.violations]}"
            )
        estimates.append(est)
        metrics.append(m)
        candidates.append((row, ri, z, o))
    value = info.get("objective")
    least = (
        _least_layout(
            problem,
            space,
            info.get("least"),
            estimates[0] if estimates else None,
            None if value is None else value * unit,
            tolerance,
        )
        if objective == Objective.step_time
        else None
    )
    return SearchResult(
        method=method,
        objective=objective,
        status=info["status"],
        objective_value=None if value is None else value * unit,
        bound=None if info.get("bound") is None else info["bound"] * unit,
        wall_s=time.perf_counter() - start,
        solver_wall_s=info.get("wall_s", 0.0),
        num_candidates=searched,
        rows_kept=info.get("rows_kept", 0),
        quantum_s=tables.quantum_s,
        layouts=estimates,
        metrics=metrics,
        candidates=candidates,
        space=space,
        tables=tables,
        tie_tolerance=tolerance,
        ranking_status=info.get("ranking_status", "OPTIMAL"),
        least=least,
    )


def _least_layout(
    problem: Problem,
    space: Space,
    least,
    first: Estimate | None,
    least_s: float | None,
    tolerance: float,
) -> Estimate | None:
    """The simplest layout at the least step time ``least_s`` (``least``: its candidate), costed, where layout 1
    (``first``) is slower than it beyond the ties (the risk order ranked a lower-risk layout first); else None."""
    if (
        least is None
        or first is None
        or not least_s
        or first.step_time_s <= least_s * (1 + tolerance)
    ):
        return None
    return estimate(problem, _layout_of(space, *least), strict=False)


def _layout_of(space: Space, row: int, ri: int, z: int, o: int):
    """The Layout of candidate (S,K row, recompute index, ZeRO stage, axis order)."""
    return space.layout(
        int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o
    )


def _unsearched(
    request, space: Space, tables, start: float, tolerance: float, status: str, stopped: str = ""
) -> SearchResult:
    """A result without a searched layout: INFEASIBLE (nothing to tabulate) or UNKNOWN (stopped)."""
    return SearchResult(
        method=request.method,
        objective=request.objective,
        status=status,
        objective_value=None,
        bound=None,
        wall_s=time.perf_counter() - start,
        solver_wall_s=0.0,
        num_candidates=space.num_candidates(),
        rows_kept=0,
        quantum_s=tables.quantum_s if tables is not None else 0.0,
        space=space,
        tables=tables,
        tie_tolerance=tolerance,
        ranking_status="UNKNOWN" if stopped else "OPTIMAL",
        stopped=stopped or None,
    )


def _stopped(request, space: Space, tables, start: float, tolerance: float, built: str):
    """The result of a search whose time limit ran out after building ``built``: UNKNOWN, no
    layout (the phases before CP-SAT cannot be cut short; the overrun is at most one of them)."""
    took = time.perf_counter() - start
    return _unsearched(
        request,
        space,
        tables,
        start,
        tolerance,
        "UNKNOWN",
        stopped=(
            f"the time limit ran out after {took:.1f} s of the search, while building {built} of "
            f"{space.num_candidates():,} candidates: no layout was searched (raise --time-limit)"
        ),
    )


__all__ = [
    "solve",
    "SearchOptions",
    "SearchRequest",
    "SearchResult",
    "OBJECTIVES",
    "METHODS",
    "Capabilities",
]


def rank_among_candidates(problem: Problem, step_time_s: float) -> dict:
    """Where a layout with ``step_time_s`` ranks among every fitting candidate of the problem,
    and the best candidate's step time (both by the same quantised tables)."""
    space = build_space(problem, SearchOptions())
    if not len(space.sk_k):
        return {"rank": None, "best_step_s": None, "num_candidates": 0}
    tables = build_tables(space)
    target = step_time_s / tables.quantum_s
    faster, best, rows = 0, None, np.arange(len(space.sk_k))
    for chunk in np.array_split(rows, max(1, space.num_candidates() // 1_000_000 + 1)):
        sk, ri, z, o = candidate_grid(space, chunk)
        m = assemble(tables, space, sk, ri, z, o)
        steps = m["step"][m["fits"]]
        faster += int((steps < target - 0.5).sum())
        if len(steps):
            best = min(best, int(steps.min())) if best is not None else int(steps.min())
    return {
        "rank": faster + 1,
        "best_step_s": None if best is None else best * tables.quantum_s,
        "num_candidates": space.num_candidates(),
    }
