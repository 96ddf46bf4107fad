"""Layout search: the candidate space, its integer tables, CP-SAT and the exhaustive oracle.

``solve()`` returns a SearchResult whose layouts are re-costed by ``estimate()`` (exact,
unquantised) and re-checked by ``check_layout()``, independently of the search.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from layoutsearch.core.check import check_layout
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.core.specs import Cluster, ModelSpec, Workload
from layoutsearch.search.cpsat import cpsat_top
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import SearchOptions, Space, build_space
from layoutsearch.search.tables import KIB, Tables, build_tables

OBJECTIVES = ("step-time", "gather-volume")
METHODS = ("cpsat", "enumerate")


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """Solver status and proof, wall time, the ranked layouts with their estimates."""

    method: str
    objective: str
    status: str  # OPTIMAL, FEASIBLE, INFEASIBLE, UNKNOWN
    objective_value: float | None  # seconds (step-time) or bytes (gather-volume), quantised
    bound: float | None
    wall_s: float
    solver_wall_s: float
    num_candidates: int
    rows_kept: int
    quantum_s: float
    layouts: list[Estimate] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)  # quantised values per layout
    space: Space | None = None
    tables: Tables | None = None

    @property
    def gap(self) -> float | None:
        if self.objective_value is None or self.bound is None or not self.objective_value:
            return None
        return max(0.0, (self.objective_value - self.bound) / self.objective_value)


def solve(model: ModelSpec, workload: Workload, cluster: Cluster, options: SearchOptions | None = None,
          objective: str = "step-time", top_k: int = 3, method: str = "cpsat", time_limit_s: float = 30.0,
          exact_rows: bool = True) -> SearchResult:
    """The top_k layouts by the objective (then the tie-breaks: step time, peak memory)."""
    start = time.perf_counter()
    options = options or SearchOptions()
    space = build_space(model, workload, cluster, options)
    if not len(space.sk_k):
        return SearchResult(method=method, objective=objective, status="INFEASIBLE", objective_value=None, bound=None,
                            wall_s=time.perf_counter() - start, solver_wall_s=0.0, num_candidates=0, rows_kept=0,
                            quantum_s=0.0, space=space, tables=None)
    tables = build_tables(space)
    if method == "enumerate":
        t0 = time.perf_counter()
        answers, _ = enumerate_top(space, tables, objective, top_k)
        info = {"status": "OPTIMAL" if answers else "INFEASIBLE",
                "objective": answers[0][4]["volume" if objective == "gather-volume" else "step"] if answers else None,
                "rows_kept": len(space.sk_k), "wall_s": time.perf_counter() - t0}
        info["bound"] = info["objective"]
    else:
        answers, info = cpsat_top(space, tables, objective, top_k, time_limit_s, exact_rows)
    unit = tables.quantum_s if objective == "step-time" else KIB
    estimates, metrics = [], []
    for row, ri, z, o, m in answers:
        layout = space.layout(int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o)
        est = estimate(model, workload, cluster, layout)
        problems = check_layout(model, workload, cluster, layout)
        if problems:  # the tables and estimate() disagree: a bug, never a user error
            raise AssertionError(f"search returned an invalid layout {layout}: {[p.message for p in problems]}")
        estimates.append(est)
        metrics.append(m)
    value = info.get("objective")
    return SearchResult(
        method=method, objective=objective, status=info["status"],
        objective_value=None if value is None else value * unit,
        bound=None if info.get("bound") is None else info["bound"] * unit,
        wall_s=time.perf_counter() - start, solver_wall_s=info.get("wall_s", 0.0),
        num_candidates=space.num_candidates(), rows_kept=info.get("rows_kept", 0), quantum_s=tables.quantum_s,
        layouts=estimates, metrics=metrics, space=space, tables=tables)


__all__ = ["solve", "SearchOptions", "SearchResult", "OBJECTIVES", "METHODS"]


def rank_among_candidates(model: ModelSpec, workload: Workload, cluster: Cluster, step_time_s: float) -> dict:
    """Where a layout with ``step_time_s`` ranks among every fitting candidate of the problem,
    and the best candidate's step time (both by the same quantised tables)."""
    import numpy as np

    from layoutsearch.search.enumerate import candidate_grid
    from layoutsearch.search.tables import assemble

    space = build_space(model, workload, cluster, SearchOptions())
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
    return {"rank": faster + 1, "best_step_s": None if best is None else best * tables.quantum_s,
            "num_candidates": space.num_candidates()}
