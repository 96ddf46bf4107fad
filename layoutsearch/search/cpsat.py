"""The CP-SAT model: the same candidates and integer tables as the enumerator, the step rule of
``tables.assemble`` stated as constraints, optimality proven by the solver.

Before the model is built, (S, K) rows are costed best-first in the order of a valid lower
bound until the next bound exceeds the k-th best value found; rows left out provably cannot
enter the top k. Table entries above that value (or above the memory capacity) are clipped
to it, which keeps the coefficients modest (google/or-tools#5293) without changing any
top-k candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from layoutsearch.search import satmodel as cp_model  # CP-SAT through cp_model_helper, without pandas

from layoutsearch.search.enumerate import candidate_grid
from layoutsearch.costs import step as step_formula
from layoutsearch.search.space import Space
from layoutsearch.search.tables import MOMENT_NAMES, Tables, assemble

PROMISING_ROWS = 32
SEED = 20240611
BIG = np.iinfo(np.int64).max // 4
STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
          cp_model.MODEL_INVALID: "MODEL_INVALID", cp_model.UNKNOWN: "UNKNOWN"}


class Incumbents(cp_model.CpSolverSolutionCallback):
    """Records (seconds since start, objective) of every improving solution."""

    def __init__(self):
        super().__init__()
        self.start = time.perf_counter()
        self.history: list[tuple[float, float]] = []

    def on_solution_callback(self):
        self.history.append((time.perf_counter() - self.start, self.objective_value))


@dataclass
class Vars:
    """The decision variables, grouped by the key they select."""

    y: dict = field(default_factory=dict)  # (S, K) row -> bool
    shape: dict = field(default_factory=dict)  # shape -> bool
    r: dict = field(default_factory=dict)  # recompute index -> bool
    z: dict = field(default_factory=dict)  # ZeRO stage -> bool
    o: dict = field(default_factory=dict)  # axis order -> bool
    w: dict = field(default_factory=dict)  # (row, r, o) -> bool: the key of the stage time
    sz: dict = field(default_factory=dict)  # (shape, z) -> bool
    szo: dict = field(default_factory=dict)  # (shape, z, o) -> bool


def row_bounds(space: Space, t: Tables, objective: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (S, K) row: a valid lower bound of the objective, which (row, r) fit in memory with
    some allowed ZeRO stage, and whether the row fits at all."""
    s = space.sk_shape
    omask, zmask = space.order_mask[s], space.zero_mask[s]
    stage = np.where(omask[:, None, :], t.STAGE0, BIG).min(axis=(1, 2))
    extra = np.where(zmask, t.OPT[s], BIG).min(axis=1)
    pp = np.where(omask, t.PP, BIG).min(axis=1)
    mem = t.MZ[s][:, None] + t.MB[:, :, None]  # [sk, r, z, st, moment]
    fits_r = ((mem <= t.capacity_kib).all(axis=(3, 4)) & zmask[:, None, :]).any(axis=2)
    bound = t.VOLUME[s] if objective == "gather-volume" else stage + extra + pp + t.step0
    return bound, fits_r, fits_r.any(axis=1)


def prune(space: Space, t: Tables, objective: str, top_k: int, exact_rows: bool = True, enabled: bool = True):
    """(rows that may hold a top-k candidate, the exact k-th best value or None, (row, r) fit mask).

    Rows are costed exactly, best first in the order of their lower bound, until the next
    bound exceeds the k-th best value found. A row is kept when its exact minimum (costed
    rows) or its bound (the rest) does not exceed that value; every other row provably cannot
    enter the top k. With ``exact_rows`` False, rows are kept on their bounds alone.
    """
    bound, fits_r, fits = row_bounds(space, t, objective)
    rows = np.nonzero(fits)[0]
    if not enabled:  # the whole model: every row that fits in memory for some choice
        return rows, None, fits_r
    rows = rows[np.argsort(bound[rows], kind="stable")]
    key = "volume" if objective == "gather-volume" else "step"
    best = bound.copy()
    values, done, chunk = np.array([], dtype=np.int64), 0, PROMISING_ROWS
    while done < len(rows):
        if len(values) >= top_k and bound[rows[done]] > values[top_k - 1]:
            break
        sk, ri, z, o = candidate_grid(space, rows[done:done + chunk])
        m = assemble(t, space, sk, ri, z, o)
        ok = m["fits"]
        values = np.sort(np.concatenate([values, m[key][ok]]))[:top_k]
        exact = np.full(len(space.sk_k), BIG)
        np.minimum.at(exact, sk[ok], m[key][ok])
        if exact_rows:
            best[rows[done:done + chunk]] = exact[rows[done:done + chunk]]
        done, chunk = done + chunk, chunk * 2
    kth = int(values[top_k - 1]) if len(values) >= top_k else None
    keep = rows if kth is None else rows[best[rows] <= kth]
    return np.sort(keep), kth, fits_r


def build_model(space: Space, t: Tables, rows: np.ndarray, clip: int | None, fits_r: np.ndarray):
    """The CP-SAT model over the kept (S, K) rows: (model, vars, objective expressions)."""
    model = cp_model.CpModel()
    v = Vars()
    s_of = space.sk_shape
    shapes = sorted({int(s_of[j]) for j in rows})
    limit = clip + 1 if clip is not None else None
    cap = t.capacity_kib

    # ---- variables: one-hot selections and the products the tables are keyed by
    for j in rows:
        v.y[int(j)] = model.new_bool_var(f"row{j}")
    for s in shapes:
        v.shape[s] = model.new_bool_var(f"shape{s}")
    for ri in range(len(space.recompute_codes)):
        v.r[ri] = model.new_bool_var(f"r{ri}")
    for z in range(4):
        if space.zero_mask[shapes, z].any():
            v.z[z] = model.new_bool_var(f"z{z}")
    for o in range(len(space.orders)):
        if space.order_mask[shapes, o].any():
            v.o[o] = model.new_bool_var(f"o{o}")
    for j in v.y:
        for ri in v.r:
            for o in v.o:
                if fits_r[j, ri] and space.order_mask[s_of[j], o]:
                    v.w[j, ri, o] = model.new_bool_var(f"w{j}_{ri}_{o}")
    for s in shapes:
        for z in v.z:
            if space.zero_mask[s, z]:
                v.sz[s, z] = model.new_bool_var(f"sz{s}_{z}")
                for o in v.o:
                    if space.order_mask[s, o]:
                        v.szo[s, z, o] = model.new_bool_var(f"szo{s}_{z}_{o}")

    # ---- exactly one (S, K) row, recompute policy, ZeRO stage and axis order
    for group in (v.y, v.r, v.z, v.o):
        model.add_exactly_one(group.values())
    # ---- a shape is chosen when one of its rows is
    for s in shapes:
        model.add(v.shape[s] == sum(v.y[j] for j in v.y if s_of[j] == s))
    # ---- product selections agree with each factor (with one-hot factors this forces the product)
    _marginal(model, v.w, v.y, lambda k: k[0])
    _marginal(model, v.w, v.r, lambda k: k[1])
    _marginal(model, v.w, v.o, lambda k: k[2])
    _marginal(model, v.sz, v.shape, lambda k: k[0])
    _marginal(model, v.sz, v.z, lambda k: k[1])
    _marginal(model, v.szo, v.sz, lambda k: (k[0], k[1]))
    _marginal(model, v.szo, v.o, lambda k: k[2])

    # ---- table lookups: linear in the selections (clipped where a top-k answer cannot be affected)
    def over(sel, table, index=lambda k: k, top=limit):
        return sum((int(min(table[index(k)], top)) if top is not None else int(table[index(k)])) * b
                   for k, b in sel.items())

    stage = over(v.w, t.STAGE0)
    zero3_extra = over(v.w, t.STAGE3 - t.STAGE0)
    horizon = int(limit if limit is not None else t.STAGE3.max()) + 1
    # ---- ZeRO-3 collectives run only with stage 3 and more than one shard
    z3 = model.new_bool_var("zero3")
    model.add(z3 == sum(b for (s, z), b in v.sz.items() if t.Z3[s, z]))
    zero3 = model.new_int_var(0, horizon, "zero3_stage_extra")
    model.add(zero3 == zero3_extra).only_enforce_if(z3)
    model.add(zero3 == 0).only_enforce_if(~z3)
    # ---- the once-per-step terms of costs.step, looked up by the selections that key them
    term = {
        "RED": (over(v.szo, t.RED, top=None), int(t.RED.max())),
        "GATH": (over(v.szo, t.GATH, top=None), int(t.GATH.max())),
        "WIN": (over(v.w, t.WIN, lambda k: (k[0], k[1]), None), None),
        "FWD": (over(v.w, t.FWD, lambda k: k[0], None), None),
        "PP": (over(v.w, t.PP, lambda k: (k[0], k[2])), None),
        "OPT": (over(v.sz, t.OPT), None),
        "STEP0": (t.step0, None),
    }
    step = stage + zero3
    # ---- hidden collectives: what does not fit behind their window is exposed (costs.step.EXPOSED)
    for name, hidden, window in step_formula.EXPOSED:
        exposed = model.new_int_var(0, term[hidden][1] + 1, name)
        model.add(exposed >= term[hidden][0] - term[window][0])
        step = step + exposed
    for _, name in step_formula.PLAIN:
        step = step + term[name][0]
    # ---- every stage's memory fits at every moment; the peak is the last tie-break
    peak = model.new_int_var(0, 2 * cap + 2, "peak_kib")
    for st in (0, 1):
        for mi, _ in enumerate(MOMENT_NAMES):
            live = (over(v.sz, t.MZ, lambda k, st=st, mi=mi: (k[0], k[1], st, mi), cap + 1)
                    + over(v.w, t.MB, lambda k, st=st, mi=mi: (k[0], k[1], st, mi), cap + 1))
            model.add(live <= cap)
            model.add(peak >= live)
    volume = sum(int(t.VOLUME[s]) * b for s, b in v.shape.items())
    return model, v, {"step": step, "peak": peak, "volume": volume}


def _marginal(model, product: dict, factor: dict, key) -> None:
    """For every value of a factor, the product selections with that value sum to it."""
    groups: dict = {}
    for k, var in product.items():
        groups.setdefault(key(k), []).append(var)
    for k, var in factor.items():
        model.add(sum(groups.get(k, [])) == var)


def cpsat_top(space: Space, t: Tables, objective: str = "step-time", top_k: int = 1, time_limit_s: float = 30.0,
              exact_rows: bool = True, prune_rows: bool = True):
    """Top-k by re-solving with earlier answers excluded; each answer minimises the objective,
    then the named tie-breaks (step time for gather-volume, then peak memory).

    Returns (answers as (row, r index, z, o, metrics), info: status, objective, bound, rows, history).
    """
    rows, kth, fits_r = prune(space, t, objective, top_k, exact_rows, prune_rows)
    info = {"rows_kept": int(len(rows)), "rows_total": int(len(space.sk_k)), "status": "INFEASIBLE",
            "objective": None, "bound": None, "history": [], "wall_s": 0.0}
    if not len(rows):
        return [], info
    model, v, exprs = build_model(space, t, rows, kth if objective == "step-time" else None, fits_r)
    keys = ["volume", "step", "peak"] if objective == "gather-volume" else ["step", "peak"]
    answers, deadline = [], time.perf_counter() + time_limit_s
    for rank in range(top_k):
        solver = None
        for phase, key in enumerate(keys):
            solver = _solver(max(0.05, deadline - time.perf_counter()))
            callback = Incumbents()
            model.minimize(exprs[key])
            status = solver.solve(model, callback)
            info["wall_s"] += solver.wall_time
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                if rank == 0 and phase == 0:
                    info["status"] = STATUS[status]
                solver = None
                break
            value = int(solver.value(exprs[key]))
            if rank == 0 and phase == 0:
                info.update(status=STATUS[status], objective=value, bound=float(solver.best_objective_bound),
                            history=callback.history)
            lit = model.new_bool_var(f"fix_{rank}_{key}")
            model.add(exprs[key] == value).only_enforce_if(lit)
            model.add_assumptions([lit])
        model.clear_assumptions()
        if solver is None:
            break
        answer = _decode(solver, v, exprs)
        answers.append(answer)
        model.add_bool_or([~v.y[answer[0]], ~v.r[answer[1]], ~v.z[answer[2]], ~v.o[answer[3]]])
    return answers, info


def _solver(time_limit_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.symmetry_level = 0
    solver.parameters.cp_model_probing_level = 0  # probing dominated presolve on these models
    solver.parameters.linearization_level = 2
    return solver


def _decode(solver, v: Vars, exprs) -> tuple:
    pick = lambda d: next(k for k, b in d.items() if solver.boolean_value(b))  # noqa: E731
    metrics = {key: int(solver.value(e)) for key, e in exprs.items()}
    return pick(v.y), pick(v.r), pick(v.z), pick(v.o), metrics
