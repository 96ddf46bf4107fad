"""The CP-SAT model: the same candidates and integer tables as the enumerator, the step rule of
``tables.assemble`` stated as constraints, optimality proven by the solver.

Before the model is built, (S, K) rows are costed best-first in the order of a valid lower
bound until the next bound exceeds the k-th best layout's value found (for step time, its tie
limit: ``search.ranking``); rows left out provably cannot enter the top k. Table entries above
that value (or above the memory capacity) are clipped to it, which keeps the coefficients modest
(google/or-tools#5293) without changing any top-k candidate.

Each rank is the ranking of ``search.ranking`` as solves: the least step time T0 (the proof), then
within its risk band the least risk and the least step time T of that risk (one solve, ``_merged_width``),
then, with the step time at most T's tie limit, the simplicity key as one or two mixed-radix objectives
over the one-hot choices (digits: ranks among the model's own shapes, microbatch counts and axis
orders, so the coefficients stay small); then the ranked layout, all its placements, is excluded.
A phase whose value earlier solves prove is not solved (``_implied``; a next rank's T0 held by a
layout found at this rank's and not ranked).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layoutsearch.core.numbers import distinct
from layoutsearch.costs import step as step_formula
from layoutsearch.search import (
    satmodel as cp_model,
)  # CP-SAT through cp_model_helper, without pandas
from layoutsearch.search.enumerate import METRICS, candidate_grid, fitting_metrics
from layoutsearch.search.objectives import costed_value_bounds, value_bounds, weigh
from layoutsearch.search.ranking import (
    RISKS,
    TIE_TOLERANCE,
    band_limit,
    best_per_layout,
    group_ids,
    headroom_flags,
    headroom_margins_kib,
    least_per_layout,
    reach,
    reach_limit,
    risk_band,
    risk_score,
    select,
    shape_risk,
    shape_simplicity,
    tie_limit,
    zero3_columns,
)
from layoutsearch.search.satmodel import LinearExpr
from layoutsearch.search.space import Space
from layoutsearch.search.tables import (
    MOMENT_NAMES,
    NEVER,
    Tables,
    assemble,
    build_tables,
    compute_bounds,
    exposed_bounds,
    fits_by_row,
    step_terms,
)

PROMISING_ROWS = 32
FOCUS_ROWS = 256  # rows tabulated to find the limit that keeps the rest (focus)
SEED = 20240611
BIG = np.iinfo(np.int64).max // 4
MAX_MERGED_KEY = (
    1 << 20
)  # the two simplicity objectives become one below this range (modest coefficients)
STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
    cp_model.UNKNOWN: "UNKNOWN",
}


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
    fetch: dict = field(default_factory=dict)  # (S, K) row -> bool: chosen with parameter offload
    # the variables a candidate's selections determine (a hint sets them too): per class of ZeRO collectives
    # in the microbatches that a candidate may run (Tables.microbatch_zero 2, 3) whether they run and their
    # extra stage time, each EXPOSED part's (exposed, floor(eta exposed)), the two headroom risks, and
    # for time-to-train the step and per goodput factor (chosen, step or 0)
    zero: dict = field(default_factory=dict)
    exposed: list = field(default_factory=list)
    low_headroom: list = field(default_factory=list)
    peak: Any = None  # KiB: no stage's memory at any moment exceeds it
    step: Any = None
    factors: dict = field(default_factory=dict)


def row_bounds(
    space: Space, t: Tables, objective: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per (S, K) row: a valid lower bound of the objective (the volume, else the value), which
    (row, r) fit in memory with some allowed ZeRO stage, and whether the row fits at all."""
    fits_r = fits_by_row(space, t.MZ, t.MB, t.capacity_kib)
    if objective == "gather-volume":
        bound = t.VOLUME[space.sk_shape]
    else:
        bound = value_bounds(space, t, _step_bound(space, t))
    return bound, fits_r, np.asarray(fits_r.any(axis=1))


def _step_bound(space: Space, t: Tables) -> np.ndarray:
    """Per (S, K) row a valid lower bound of its step time: its least stage time, optimizer step
    and pipeline sends over the allowed choices, plus the step overhead."""
    s = space.sk_shape
    omask, zmask = space.order_mask[s], space.zero_mask[s]
    # ZeRO-2/3's stage may be the least (its sharded gradients' accumulation: costs.terms.grad_accumulation)
    least = np.minimum(t.STAGE0, np.minimum(t.STAGE2, t.STAGE3))
    stage = np.where(omask[:, None, :], least, BIG).min(axis=(1, 2))
    extra = np.where(zmask, t.optimizer_s[s], BIG).min(axis=1)
    pp = np.where(omask, t.pp_sends_s, BIG).min(axis=1)
    return stage + extra + pp + t.step_overhead_s


def prune(
    space: Space,
    t: Tables,
    objective: str,
    top_k: int,
    exact_rows: bool = True,
    enabled: bool = True,
    tolerance: float = TIE_TOLERANCE,
    pool: dict | None = None,
):
    """(rows that may hold a top-k layout, the objective value above which none is ranked or
    None, (row, r) fit mask, each row's exact least value or lower bound). ``pool`` (a dict), when
    given, receives the fitting candidates of the kept rows it costed, all of them when ``enabled``
    (arrays ``sk``, ``ri``, ``z``, ``o``, ``step``, ``peak``, ``volume`` in ``candidate_grid``'s
    order over the kept rows), for ``_expected``.

    Rows are costed exactly, best first in the order of their lower bound, until the next bound
    exceeds the k-th best layout's (its best placement's) reach: the ``reach_limit`` of its step
    time (a layout inside its risk band or tied may be ranked before it, ``search.ranking``), or
    with k risk-free layouts found, the tie limit of the k-th least of their values if less
    (``ranking.reach``: each layout's candidates lie in one row, so its least risk-free value is
    known once its row is costed). By
    gather volume, (volume, step) in that order: a row of less volume than the k-th layout's, or
    as much and a step within its reach (``ranking.relevant``). A row is kept when its exact
    minimum (costed rows) or its bound (the rest) is within the reach; every other row provably
    holds no top-k layout. With ``exact_rows`` False, rows are kept on their bounds alone. The
    value returned: the reach's step, or by gather volume the k-th layout's volume.
    """
    bound, fits_r, fits = row_bounds(space, t, objective)
    rows = np.nonzero(fits)[0]
    if not enabled:  # the whole model: every row that fits in memory for some choice
        return rows, None, fits_r, bound
    by_volume = objective == "gather-volume"
    # by gather volume the rows' volumes (exact: one per shape) come first, their step bounds second
    volume = bound if by_volume else np.zeros(len(bound), dtype=np.int64)
    best = _step_bound(space, t) if by_volume else bound.copy()
    rows = rows[np.lexsort((best[rows], volume[rows]))]
    pairs = np.zeros((0, 2), dtype=np.int64)  # each layout's best (volume, step), the least k
    safe = np.zeros(0, dtype=np.int64)  # each layout's least risk-free value, the least k
    done, chunk, limit, cutoff = 0, PROMISING_ROWS, None, None
    pieces: list[dict] = []
    while done < len(rows):
        j = rows[done]
        if cutoff is not None and (volume[j], best[j]) > cutoff:
            break
        sk, ri, z, o = candidate_grid(space, rows[done : done + chunk])
        m = assemble(t, space, sk, ri, z, o)
        ok = m["fits"]
        metrics = fitting_metrics(m, sk.shape, ok)
        value = metrics["value"]
        if pool is not None:
            pieces.append({"sk": sk[ok], "ri": ri[ok], "z": z[ok], "o": o[ok]} | metrics)
        vol = volume[sk[ok]]
        gid = group_ids(space, sk[ok], ri[ok], z[ok])
        best_of = best_per_layout(gid, vol, value)
        pairs = np.concatenate([pairs, np.stack([vol, value], axis=1)[best_of]])
        pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))][:top_k]
        if not by_volume:  # each layout's least risk-free value, the least k (``ranking.reach``)
            risk = risk_score(space, sk[ok], z[ok], o[ok], metrics["peak"], t.capacity_kib)
            if pool is not None:
                pieces[-1]["risk"] = risk
            safe = np.concatenate([safe, least_per_layout(gid, value, risk == 0)])
            safe = np.partition(safe, top_k - 1)[:top_k] if len(safe) > top_k else safe
        exact = np.full(len(space.sk_k), BIG)
        np.minimum.at(exact, sk[ok], value)
        if exact_rows:
            best[rows[done : done + chunk]] = exact[rows[done : done + chunk]]
        if len(pairs) >= top_k:
            kth_volume, kth_step = (int(x) for x in pairs[top_k - 1])
            band = risk_band(space.problem)
            step_reach = (
                reach_limit(kth_step, tolerance, band)
                if by_volume
                else reach(kth_step, safe, top_k, tolerance, band)
            )
            cutoff = (kth_volume, step_reach)
            limit = kth_volume if by_volume else cutoff[1]
        done, chunk = done + chunk, chunk * 2
    if cutoff is None:
        keep = rows
    else:  # less volume, or as much and within the step reach (``ranking.relevant``)
        v, b = volume[rows], best[rows]
        keep = rows[(v < cutoff[0]) | ((v == cutoff[0]) & (b <= cutoff[1]))]
    keep = np.sort(keep)
    if pool is not None and pieces:
        merged = {key: np.concatenate([p[key] for p in pieces]) for key in pieces[0]}
        is_kept = np.zeros(len(space.sk_k), dtype=bool)
        is_kept[keep] = True
        kept = np.flatnonzero(is_kept[merged["sk"]])
        # a row's candidates are in one chunk, in candidate_grid's order: rows ascending is the rest
        kept = kept[np.argsort(merged["sk"][kept], kind="stable")]
        pool.update({key: a[kept] for key, a in merged.items()})
    return keep, limit, fits_r, best if not by_volume else bound


def first_rows(value: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` of ``rows`` by ``value``, ties to the earlier in ``rows`` (a stable sort's
    first n), ascending: by a partition, not a sort of every row."""
    if len(rows) <= n:
        return np.sort(rows)
    v = value[rows]
    nth = np.partition(v, n - 1)[n - 1]
    below = np.flatnonzero(v < nth)
    ties = np.flatnonzero(v == nth)[: n - len(below)]
    return np.sort(rows[np.concatenate([below, ties])])


def focus(
    space: Space,
    top_k: int,
    deadline: float | None = None,
    tolerance: float = TIE_TOLERANCE,
    objective: str = "step-time",
    resilience=None,
) -> tuple[Space, Tables]:
    """The rows that may hold a top-k layout by the objective's value (not gather-volume), and
    their tables weighed for it (``objectives.weigh``), without tabulating the rest: rows are
    ordered by a lower bound of their value (``objectives.costed_value_bounds`` of
    ``tables.compute_bounds``: their compute, costed for every row); above 4 FOCUS_ROWS rows the
    first FOCUS_ROWS are tabulated and ranked by ``prune``, and its limit (the k-th best layout's
    reach, at least the whole space's) keeps the rows whose bound does not exceed it; rows above
    it provably hold no top-k layout. Above 4 FOCUS_ROWS rows kept, their bounds add the exposed
    communication every completion pays (``tables.exposed_bounds``, costed for those rows alone),
    the limit keeps fewer, and the first FOCUS_ROWS by these bounds give a second limit (any
    rows' limit holds, so the lesser keeps). The whole space's tables when the first rows hold
    fewer than k layouts or the rows are few. The tables are in the whole space's quantum."""
    step_bound, costed = compute_bounds(space, deadline)
    bound = costed_value_bounds(space, step_bound, costed, objective, resilience)

    def tables_of(part: Space, rows=None) -> Tables:
        given = costed if rows is None else costed.restrict(space, rows)
        return weigh(build_tables(part, deadline, given), part, objective, resilience)

    def limit_of(rows: np.ndarray) -> int | None:
        """``prune``'s limit of the first FOCUS_ROWS of ``rows`` by their bound."""
        head = first_rows(bound, rows, FOCUS_ROWS)
        near = space.restrict(head)
        return prune(near, tables_of(near, head), objective, top_k, tolerance=tolerance)[1]

    rows = np.nonzero(bound < NEVER)[0]
    if not len(rows):  # nothing fits: the whole space's tables, for the explanation
        return space, tables_of(space)
    # fewer: tabulating them all costs about what the first rows do
    limit = limit_of(rows) if len(rows) > 4 * FOCUS_ROWS else None
    if limit is not None:
        rows = rows[bound[rows] <= limit]
        if len(rows) > 4 * FOCUS_ROWS:
            # still many: their exposed collectives (costed for them alone) bound them closer
            step_bound[rows] += exposed_bounds(space, rows, costed)
            bound = costed_value_bounds(space, step_bound, costed, objective, resilience)
            rows = rows[bound[rows] <= limit]
        if len(rows) > 4 * FOCUS_ROWS:  # the first rows by the closer bounds: a lower limit?
            again = limit_of(rows)
            rows = rows if again is None else rows[bound[rows] <= again]
    if len(rows) == len(space.sk_k):
        return space, tables_of(space)
    near = space.restrict(rows)
    return near, tables_of(near, rows)


def build_model(
    space: Space,
    t: Tables,
    rows: np.ndarray,
    clip: int | None,
    fits_r: np.ndarray,
    row_least: np.ndarray | None = None,
):
    """The CP-SAT model over the kept (S, K) rows: (model, vars, objective expressions). With
    ``row_least``, each row's least value (``tables.objective_value``) over its candidates or a
    lower bound of it, the value is held at least the chosen row's: a redundant cut that gives
    the LP relaxation the rows' bounds (one row is chosen: the least over the rows bounds the
    least value)."""
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
    for z in range(space.num_zero):
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
        model.add(v.shape[s] == LinearExpr.sum([v.y[j] for j in v.y if s_of[j] == s]))
    # ---- product selections agree with each factor (with one-hot factors this forces the product)
    _marginal(model, v.w, v.y, lambda k: k[0])
    _marginal(model, v.w, v.r, lambda k: k[1])
    _marginal(model, v.w, v.o, lambda k: k[2])
    _marginal(model, v.sz, v.shape, lambda k: k[0])
    _marginal(model, v.sz, v.z, lambda k: k[1])
    _marginal(model, v.szo, v.sz, lambda k: (k[0], k[1]))
    _marginal(model, v.szo, v.o, lambda k: k[2])

    # ---- table lookups: linear in the selections (clipped where a top-k answer cannot be affected)
    keys = {id(sel): _key_columns(sel) for sel in (v.w, v.sz, v.szo)}

    def over(sel, table, columns=None, top=limit):
        """sum(table[key] x selection): ``columns`` of the selection's keys index the table."""
        k = keys[id(sel)]
        values = np.asarray(table)[tuple(k[:, c] for c in columns or range(k.shape[1]))]
        if top is not None:
            values = np.minimum(values, top)
        return LinearExpr.weighted_vars(sel.values(), values.astype(np.int64).tolist())

    step = over(v.w, t.STAGE0)
    # ---- ZeRO collectives in the microbatches run only with stage 2 or 3 and more than one shard
    for zero, table in ((2, t.STAGE2), (3, t.STAGE3)):
        chosen = [b for (s, z), b in v.sz.items() if t.microbatch_zero[s, z] == zero]
        if not chosen:
            continue
        runs = model.new_bool_var(f"zero{zero}_runs")
        model.add(runs == LinearExpr.sum(chosen))
        # below 0 where the sharded gradients' accumulation saves more than the collectives cost
        extra = model.new_int_var(
            min(0, int((table - t.STAGE0).min())),
            int(limit if limit is not None else table.max()) + 1,
            f"zero{zero}_extra",
        )
        model.add(extra == over(v.w, table - t.STAGE0)).only_enforce_if(runs)
        model.add(extra == 0).only_enforce_if(~runs)
        v.zero[zero] = (runs, extra)
        step = step + extra
    # ---- the once-per-step terms of costs.step, looked up by the selections that key them
    term = step_formula.StepTerms(
        reduce_s=over(v.szo, t.reduce_s, top=None),
        reduce_link_busy_s=over(v.w, t.reduce_link_busy_s, (0, 2), None),
        reduce_window_s=over(v.w, t.reduce_window_s, (0, 1), None),
        reduce_early_s=over(v.szo, t.reduce_early_s, top=None),
        reduce_early_link_busy_s=over(v.w, t.reduce_early_link_busy_s, (0, 2), None),
        reduce_early_window_s=over(v.w, t.reduce_early_window_s, (0, 1), None),
        reduce_interference_s=over(v.szo, t.reduce_interference_s, top=None),
        zero_gather_s=over(v.szo, t.zero_gather_s, top=None),
        gather_window_s=over(v.w, t.gather_window_s, (0,), None),
        gather_late_s=over(v.szo, t.gather_late_s, top=None),
        gather_late_window_s=over(v.w, t.gather_late_window_s, (0,), None),
        gather_interference_s=over(v.szo, t.gather_interference_s, top=None),
        pp_sends_s=over(v.w, t.pp_sends_s, (0, 2)),
        optimizer_s=over(v.sz, t.optimizer_s),
        zero_step_copies_s=over(v.sz, t.zero_step_copies_s),
        step_overhead_s=t.step_overhead_s,
        eta_pct=t.eta_pct,
    )
    # every term's largest table entry: the exposed variables' upper bounds
    most = step_formula.StepTerms(
        reduce_s=int(t.reduce_s.max()),
        reduce_link_busy_s=int(t.reduce_link_busy_s.max()),
        reduce_window_s=int(t.reduce_window_s.max()),
        reduce_early_s=int(t.reduce_early_s.max()),
        reduce_early_link_busy_s=int(t.reduce_early_link_busy_s.max()),
        reduce_early_window_s=int(t.reduce_early_window_s.max()),
        reduce_interference_s=int(t.reduce_interference_s.max()),
        zero_gather_s=int(t.zero_gather_s.max()),
        gather_window_s=int(t.gather_window_s.max()),
        gather_late_s=int(t.gather_late_s.max()),
        gather_late_window_s=int(t.gather_late_window_s.max()),
        gather_interference_s=int(t.gather_interference_s.max()),
        pp_sends_s=int(t.pp_sends_s.max()),
        optimizer_s=int(t.optimizer_s.max()),
        zero_step_copies_s=int(t.zero_step_copies_s.max()),
        step_overhead_s=t.step_overhead_s,
        eta_pct=t.eta_pct,
    )
    # ---- hidden collectives: what does not fit behind their window is exposed (costs.step.EXPOSED)
    for hidden in step_formula.EXPOSED:
        top = hidden.hidden(most) + 1
        exposed = model.new_int_var(0, top, hidden.item)
        model.add(exposed >= hidden.hidden(term) - hidden.window(term))
        charged = model.new_int_var(
            0, top, hidden.item + "_interference"
        )  # floor(ETA exposed): step_formula.unhidden
        model.add(100 * charged <= t.eta_pct * exposed)
        v.exposed.append((exposed, charged))
        step = step + exposed - charged + hidden.interference(term)
    for _, plain in step_formula.PLAIN:
        step = step + plain(term)
    fetches, fetch_s = t.fetches, t.param_fetch_s
    if fetches is not None and fetch_s is not None:
        # parameter offload's host fetches: the row's, where the column fetches
        for j in v.y:
            v.fetch[j] = model.new_bool_var(f"fetch{j}")
            model.add(v.fetch[j] <= v.y[j])
        model.add(
            LinearExpr.sum(list(v.fetch.values()))
            == LinearExpr.sum([b for z, b in v.z.items() if fetches[z]])
        )
        fetch = fetch_s[list(v.fetch)]
        if limit is not None:
            fetch = np.minimum(fetch, limit)
        step = step + LinearExpr.weighted_vars(v.fetch.values(), fetch.astype(np.int64).tolist())
    value = step
    if t.objective == "time-to-train":
        value = _goodput_weighted(model, v, t, step, _step_upper(t, most))
    elif t.objective == "energy":  # IDLE x step + DYNAMIC x busy (search.objectives)
        value = t.idle_w * step + t.dynamic_w * (
            over(v.w, t.busy_s, (0, 1), None) + term.optimizer_s
        )
    if row_least is not None:  # a clipped candidate's step is at least the clip: so is the cut's
        least = np.minimum(row_least[list(v.y)], limit if limit is not None else NEVER)
        model.add(value >= LinearExpr.weighted_vars(v.y.values(), least.tolist()))
    # ---- every stage's memory fits at every moment: under the peak, which fits (the headroom
    # risks then read the peak alone, not every moment again)
    v.peak = model.new_int_var(0, cap, "peak")
    for st in (0, 1):
        for mi, _ in enumerate(MOMENT_NAMES):
            live = over(v.sz, t.MZ[..., st, mi], None, cap + 1) + over(
                v.w, t.MB[..., st, mi], (0, 1), cap + 1
            )
            model.add(live <= v.peak)
    if t.HZ is not None and t.HB is not None:  # ---- with state offload, the host memory fits too
        for st in (0, 1):
            hosted = over(v.sz, t.HZ[..., st], None, t.host_kib + 1)
            model.add(hosted + over(v.w, t.HB[..., st], (0, 1), t.host_kib + 1) <= t.host_kib)
    volume = LinearExpr.weighted_sum(list(v.shape.values()), [int(t.VOLUME[s]) for s in v.shape])
    return (
        model,
        v,
        {
            "step": step,
            "value": value,
            "volume": volume,
            "risk": risk_objective(space, t, model, v),
            "simplicity": simplicity_objectives(space, v),
        },
    )


def _step_upper(t: Tables, most: step_formula.StepTerms) -> int:
    """An upper bound of any candidate's step (quanta): each term at its table's largest entry."""
    hidden = sum(h.hidden(most) + 1 + h.interference(most) for h in step_formula.EXPOSED)
    plain = sum(term(most) for _, term in step_formula.PLAIN)
    extra = max(t.STAGE2.max(initial=0), t.STAGE3.max(initial=0))
    return int(t.STAGE0.max(initial=0) + extra + hidden + plain) + 1


def _goodput_weighted(model, v: Vars, t: Tables, step, upper: int):
    """F x step (time-to-train), F the chosen (shape, ZeRO stage)'s factor: per distinct factor a
    Boolean (its pairs chosen) and a step variable equal to the step when it is set, 0 otherwise;
    the value is their sum weighted by the factors (exact: one factor is chosen)."""
    v.step = model.new_int_var(0, upper, "step")
    model.add(v.step == step)
    by_factor: dict = {}
    for (s, z), chosen in v.sz.items():
        by_factor.setdefault(int(t.factor[s, z]), []).append(chosen)
    for factor, pairs in sorted(by_factor.items()):
        chosen = model.new_bool_var(f"factor{factor}")
        model.add(chosen == LinearExpr.sum(pairs))
        part = model.new_int_var(0, upper, f"step_at_factor{factor}")
        model.add(part == v.step).only_enforce_if(chosen)
        model.add(part == 0).only_enforce_if(~chosen)
        v.factors[factor] = (chosen, part)
    value = LinearExpr.weighted_sum([p for _, p in v.factors.values()], list(v.factors))
    least: int = min(v.factors, default=0)
    model.add(value >= least * v.step)  # a redundant cut for the relaxation
    return value


def risk_objective(space: Space, t: Tables, model, v: Vars):
    """``ranking.risk_score`` as a linear expression: each risk's 0/1 term weighted above all
    after it. Each headroom risk is a variable that must be 1 when the peak (every stage's memory
    at every moment is under it) exceeds the capacity less its margin (so its least value is the
    candidate's flag)."""
    r = shape_risk(space)
    zero3 = zero3_columns(space)
    n = len(RISKS)
    v.low_headroom = [model.new_bool_var(f"headroom_{i}") for i in range(2)]
    for low, margin in zip(v.low_headroom, headroom_margins_kib(t.capacity_kib)):
        model.add(v.peak <= t.capacity_kib - margin + margin * low)
    return (
        (1 << (n - 1)) * v.low_headroom[0]
        + (1 << (n - 2)) * v.low_headroom[1]
        + LinearExpr.weighted_sum(
            list(v.szo.values()),
            [
                (1 << (n - 3)) * int(r.slow_tp[s, o])
                + (1 << (n - 4)) * int(r.slow_cp[s, o])
                + (1 << (n - 5)) * int(r.wide_shard[s, o] * zero3[z])
                for s, z, o in v.szo
            ],
        )
        + LinearExpr.weighted_sum(
            list(v.shape.values()), [(1 << (n - 6)) * int(r.cp[s]) for s in v.shape]
        )
        + LinearExpr.weighted_sum(list(v.y.values()), [int(r.many_microbatches[j]) for j in v.y])
    )


def simplicity_objectives(space: Space, v: Vars) -> list:
    """``ranking.simplicity_key`` as one or two linear expressions to minimise in turn: each a
    mixed-radix number whose digits are the key's components (ranks among the model's own shapes,
    microbatch counts and orders, so coefficients stay small; google/or-tools#5293)."""
    p = shape_simplicity(space)
    k_of = space.sk_k
    shapes = sorted(v.shape, key=lambda s: p.degree_rank[s])
    shape_rank = {s: i for i, s in enumerate(shapes)}
    ks = sorted({int(k_of[j]) for j in v.y})
    k_rank = {k: i for i, k in enumerate(ks)}
    orders = sorted(v.o)
    n_cp = int(p.cp_rank.max()) + 1 if len(p.cp_rank) else 1
    head = {s: n_cp * int(p.degrees_above_one[s]) + int(p.cp_rank[s]) for s in v.shape}
    n_r, n_z = len(p.recompute_rank), space.num_zero
    # key A: (degrees above one, cp rank), TP beyond a node, ZeRO stage, microbatches, recompute
    w_r, w_k = 1, n_r
    w_z = w_k * len(ks)
    w_tp = w_z * n_z
    w_head = w_tp * 2
    key_a = (
        LinearExpr.weighted_sum([v.shape[s] for s in v.shape], [w_head * head[s] for s in v.shape])
        + LinearExpr.weighted_sum(
            list(v.szo.values()), [w_tp * int(p.tp_beyond_node[s, o]) for s, _, o in v.szo]
        )
        + LinearExpr.weighted_sum(list(v.z.values()), [w_z * z for z in v.z])
        + LinearExpr.weighted_sum(list(v.y.values()), [w_k * k_rank[int(k_of[j])] for j in v.y])
        + LinearExpr.weighted_sum(
            list(v.r.values()),
            [w_r * int(p.recompute_rank[space.recompute_codes[ri]]) for ri in v.r],
        )
    )
    range_a = w_head * (max(head.values()) + 1)
    # key B: the degrees in order, then the axis order
    key_b = LinearExpr.weighted_sum(
        [v.shape[s] for s in shapes], [len(orders) * shape_rank[s] for s in shapes]
    ) + LinearExpr.weighted_sum([v.o[o] for o in orders], list(range(len(orders))))
    range_b = len(shapes) * len(orders)
    return [range_b * key_a + key_b] if range_a * range_b <= MAX_MERGED_KEY else [key_a, key_b]


def _key_columns(selection: dict) -> np.ndarray:
    """The selection's tuple keys as the rows of an int array (one column per key component)."""
    width = len(next(iter(selection))) if selection else 1
    return np.array(list(selection), dtype=np.int64).reshape(len(selection), width)


def _marginal(model, product: dict, factor: dict, key) -> None:
    """For every value of a factor, the product selections with that value sum to it."""
    groups: dict = {}
    for k, var in product.items():
        groups.setdefault(key(k), []).append(var)
    for k, var in factor.items():
        group = groups.get(k, [])
        model.add_linear_terms([*group, var], [1] * len(group) + [-1], 0, 0)


def cpsat_top(
    space: Space,
    t: Tables,
    objective: str = "step-time",
    top_k: int = 1,
    time_limit_s: float = 30.0,
    exact_rows: bool = True,
    prune_rows: bool = True,
    tolerance: float = TIE_TOLERANCE,
):
    """The top-k layouts by the ranking of ``search.ranking``, rank after rank by re-solving: (the
    least volume, fixed, for gather-volume), the least step time T (its proof: the status), then,
    with step <= band_limit(T), the least risk score R, with risk R the least step time T', then,
    with step <= tie_limit(T'), the simplest candidate by the simplicity objectives, each fixed in
    turn; the chosen layout (all its placements) is then excluded.

    Returns (answers as (row, r index, z, o, metrics), info: status, objective, bound, rows, history, least: the
    simplest candidate (row, r index, z, o) at the first rank's least value, as the enumerator finds it).
    """
    started = time.perf_counter()
    costed: dict = {}
    rows, limit, fits_r, best = prune(
        space, t, objective, top_k, exact_rows, prune_rows, tolerance, costed
    )
    trace: list = []
    expected, pool = _expected(
        space, t, rows, objective, top_k, tolerance, trace, costed if prune_rows else None
    )
    # the simplest candidate at the first rank's least value, as the enumerator's ``found["least"]``
    least_candidate = trace[0][3] if trace else None
    if time.perf_counter() - started > time_limit_s:  # out of time before any solve
        return [], {**_info(space, rows), "status": "UNKNOWN", "ranking_status": "UNKNOWN"}
    if limit is not None and objective != "gather-volume" and len(trace) == top_k:
        # the proofs need only the rows that may beat a rank's values: with the least risk 0 at
        # every rank (nothing to prove below it) those within each rank's tie limit
        if all(rank[1] == 0 for rank in trace):
            fastest = max(tie_limit(rank[0], tolerance) for rank in trace)
            limit = max(tie_limit(rank[2], tolerance) for rank in trace)
            if limit > fastest:  # a riskier layout is the fastest: prove it apart, on its rows
                ranked, ranked_info = _risk_free_top(
                    space,
                    t,
                    (rows[best[rows] <= fastest], fastest),
                    (rows, best, limit),
                    fits_r,
                    expected,
                    trace,
                    top_k,
                    time_limit_s,
                    tolerance,
                )
                return ranked, {**ranked_info, "least": least_candidate}
            rows = rows[best[rows] <= limit]
    info = {**_info(space, rows), "least": least_candidate}
    if not len(rows):
        return [], info
    by_step = objective == "step-time"
    by_value = objective != "gather-volume"  # the rows' least values are those of the value
    model, v, exprs = build_model(
        space, t, rows, limit if by_step else None, fits_r, best if by_value else None
    )
    hints = [_hint(space, t, v, *answer) for answer in expected]
    keys = ["volume", "step"] if objective == "gather-volume" else ["step"]
    # the "step" phases rank the objective's value (the step time for step-time and gather-volume)
    phases = (
        [(key, exprs["value" if key == "step" else key]) for key in keys]
        + [("risk", exprs["risk"]), ("step", exprs["value"])]
        + [("simplicity", e) for e in exprs["simplicity"]]
    )
    answers: list[tuple] = []
    deadline = time.perf_counter() + time_limit_s
    # layouts (row, r index, z) the model still holds whose step is the last proven least: while
    # one is left, the next rank's least step is that value (exclusions only remove candidates)
    witnesses: set[tuple[int, int, int]] = set()
    least, proven = None, False
    first_step = len(keys) - 1  # the phase of the least step time (the proof)
    for rank in range(top_k):
        solver = None
        if rank < len(hints):  # the search still proves every phase; a hint only finds it sooner
            model.set_hint(hints[rank])
        # the enumerated ranking's values of this rank, while the ranks before it agree
        on_track = rank < len(trace) and [a[:4] for a in answers] == list(expected[:rank])
        carried = least if objective == "step-time" and witnesses else None
        least, then = None, None  # then: the second step phase's value, found with the risk
        for phase, (key, expr) in enumerate(phases):
            implied = _implied(key, phase - first_step, trace[rank] if on_track else None, least)
            if key == "step" and implied is None:
                implied = carried if phase == first_step else then
            if implied is not None:  # proven by an earlier phase's bound: nothing to solve
                value = implied
            else:
                if on_track:  # the enumerated candidate of this phase's value, found first
                    near = _near(key, phase - first_step, trace[rank], expected[rank])
                    if near[0] in v.y:
                        model.set_hint(_hint(space, t, v, *near))
                width = _merged_width(least, risk_band(space.problem)) if key == "risk" else None
                goal = expr if width is None else width * expr + exprs["value"]
                if width is not None and by_step:  # the rows' cut on the merged objective
                    floor = _merged_floor(space, pool, answers, width, limit)[list(v.y)]
                    model.add(goal >= LinearExpr.weighted_vars(v.y.values(), floor.tolist()))
                attempt = _solver(max(0.05, deadline - time.perf_counter()))
                callback = Incumbents()
                model.minimize(goal)
                status = attempt.solve(model, callback)
                info["wall_s"] += attempt.wall_time
                if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                    if rank == 0 and phase == 0:
                        info["status"] = STATUS[status]
                    solver = solver if _keeps_tied(key, status, info) else None
                    break
                solver = attempt
                value = int(solver.value(expr))
                step = int(solver.value(exprs["value"]))
                if goal is not expr:  # risk and step minimised at once: both phases proven
                    then = step
                if rank == 0 and phase == 0:
                    info.update(
                        status=STATUS[status],
                        objective=value,
                        bound=float(solver.best_objective_bound),
                        history=callback.history,
                    )
                if key == "simplicity" and status != cp_model.OPTIMAL:
                    info["ranking_status"] = STATUS[status]
                if phase == first_step:  # a new least, proven or not: no witness of it yet
                    witnesses, proven = set(), status == cp_model.OPTIMAL
                if proven and step == (value if phase == first_step else least):
                    witnesses.add(_decode(solver, v)[:3])
            if phase == first_step:
                least = value
            lit = model.new_bool_var(f"fix_{rank}_{phase}")
            if key == "step":  # the first step phase opens the risk band, the second the ties
                top = (
                    band_limit(value, risk_band(space.problem))
                    if phase == first_step
                    else tie_limit(value, tolerance)
                )
                model.add(expr <= top).only_enforce_if(lit)
            else:
                model.add(expr == value).only_enforce_if(lit)
            model.add_assumptions([lit])
        model.clear_assumptions()
        if solver is None:
            break
        row, ri, z, o = _decode(solver, v)
        m = assemble(t, space, np.array([row]), np.array([ri]), np.array([z]), np.array([o]))
        metrics = {key: int(np.broadcast_to(m[key], (1,))[0]) for key in METRICS}
        answers.append((row, ri, z, o, metrics))
        witnesses.discard((row, ri, z))
        model.add_bool_or(
            [~v.y[row], ~v.r[ri], ~v.z[z]]
        )  # the same layout placed otherwise is not ranked again
    return answers, info


def _risk_free_top(
    space: Space,
    t: Tables,
    fastest: tuple,
    safe: tuple,
    fits_r: np.ndarray,
    expected: list,
    trace: list,
    top_k: int,
    time_limit_s: float,
    tolerance: float,
):
    """``cpsat_top`` where the enumerated ranking has the least risk 0 at every rank but the
    least step time (the objective's value: here "step" stands for it) belongs to a riskier
    layout: two models. The first, over the rows that may
    hold a step within the tie limit of a rank's least (``fastest``: rows, limit), proves each
    rank's least step time T0 over every candidate; the second, over the rows without a row-level
    risk (cp > 1, too many microbatches) whose least step is within the tie limit of a rank's
    risk-free best (``safe``: rows, each row's least step or bound, limit), with the risk score
    held at 0 and the step within band_limit(T0), proves the least step T of the risk-free
    candidates and then the simplicity order with step <= tie_limit(T). A ranked layout is
    excluded from both. The first model's rows are few (the search's usual ones); a model with
    the band's every row and its risk phases would cost several times more."""
    rows_a, limit_a = fastest
    rows, best, limit_b = safe
    r = shape_risk(space)
    s_of = space.sk_shape
    plain = (r.cp[s_of[rows]] == 0) & (r.many_microbatches[rows] == 0)
    rows_b = rows[(best[rows] <= limit_b) & plain]
    info = _info(space, distinct(np.concatenate([rows_a, rows_b])))
    by_step = t.objective == "step-time"  # the tables clip at a step limit, not another value's
    model_a, v_a, exprs_a = build_model(
        space, t, rows_a, limit_a if by_step else None, fits_r, best
    )
    model_b, v_b, exprs_b = build_model(
        space, t, rows_b, limit_b if by_step else None, fits_r, best
    )
    model_b.add(exprs_b["risk"] == 0)
    answers, deadline, least = [], time.perf_counter() + time_limit_s, None
    for rank in range(top_k):
        model_b.set_hint(_hint(space, t, v_b, *expected[rank]))
        fastest = trace[rank][3]
        if least is not None and trace[rank - 1][3] == fastest and least == trace[rank][0]:
            # the proven fastest candidate was not ranked (its layout is not excluded) and
            # exclusions only remove candidates: the least step time stands, nothing to solve
            if fastest[:3] not in [a[:3] for a in answers]:
                _band(model_b, exprs_b, least, rank, limit_b, risk_band(space.problem))
                answer = _rank_risk_free(
                    space, t, model_b, v_b, exprs_b, rank, deadline, info, tolerance
                )
                if answer is None:
                    break
                answers.append(answer)
                _exclude(answer, (model_a, v_a), (model_b, v_b))
                continue
        if int(fastest[0]) in v_a.y:
            model_a.set_hint(_hint(space, t, v_a, *fastest))
        attempt = _solver(max(0.05, deadline - time.perf_counter()))
        callback = Incumbents()
        model_a.minimize(exprs_a["value"])
        status = attempt.solve(model_a, callback)
        info["wall_s"] += attempt.wall_time
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if rank == 0:
                info["status"] = STATUS[status]
            break
        least = int(attempt.value(exprs_a["value"]))
        if rank == 0:
            info.update(
                status=STATUS[status],
                objective=least,
                bound=float(attempt.best_objective_bound),
                history=callback.history,
            )
        _band(model_b, exprs_b, least, rank, limit_b, risk_band(space.problem))
        answer = _rank_risk_free(space, t, model_b, v_b, exprs_b, rank, deadline, info, tolerance)
        if answer is None:
            break
        answers.append(answer)
        _exclude(answer, (model_a, v_a), (model_b, v_b))
    return answers, info


def _keeps_tied(key: str, status, info: dict) -> bool:
    """Whether a phase that found nothing keeps the candidate so far: a simplicity phase out of
    time keeps the tied candidate found, not proven simplest (``ranking_status`` says so)."""
    if key == "simplicity":
        info["ranking_status"] = STATUS[status]
        return True
    return False


def _info(space: Space, rows: np.ndarray) -> dict:
    """A search's info before any solve (nothing found yet)."""
    return {
        "rows_kept": int(len(rows)),
        "rows_total": int(len(space.sk_k)),
        "status": "INFEASIBLE",
        "objective": None,
        "bound": None,
        "history": [],
        "wall_s": 0.0,
        "ranking_status": "OPTIMAL",
    }


def _band(model, exprs: dict, least: int, rank: int, cap: int, band: float) -> None:
    """Hold the step time within the risk band of the least one, for this rank, and at most
    ``cap``: the model's rows' limit, which every rank's tie limit is within (a tighter
    relaxation than the band's edge, the same solutions)."""
    lit = model.new_bool_var(f"band_{rank}")
    model.add(exprs["value"] <= min(band_limit(least, band), cap)).only_enforce_if(lit)
    model.add_assumptions([lit])


def _rank_risk_free(space, t, model, v, exprs, rank, deadline, info, tolerance):
    """One rank of the risk-free model: the least step time T (a proof), then with step <=
    tie_limit(T) the simplicity objectives; the answer, or None when a phase finds nothing."""
    solver = None
    phases = [("step", exprs["value"])] + [("simplicity", e) for e in exprs["simplicity"]]
    for phase, (key, expr) in enumerate(phases):
        attempt = _solver(max(0.05, deadline - time.perf_counter()))
        model.minimize(expr)
        status = attempt.solve(model)
        info["wall_s"] += attempt.wall_time
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            solver = solver if _keeps_tied(key, status, info) else None
            break
        solver = attempt
        value = int(solver.value(expr))
        if key == "simplicity" and status != cp_model.OPTIMAL:
            info["ranking_status"] = STATUS[status]
        lit = model.new_bool_var(f"fix_{rank}_{phase}")
        if key == "step":
            model.add(expr <= tie_limit(value, tolerance)).only_enforce_if(lit)
        else:
            model.add(expr == value).only_enforce_if(lit)
        model.add_assumptions([lit])
    model.clear_assumptions()
    if solver is None:
        return None
    row, ri, z, o = _decode(solver, v)
    m = assemble(t, space, np.array([row]), np.array([ri]), np.array([z]), np.array([o]))
    metrics = {key: int(np.broadcast_to(m[key], (1,))[0]) for key in METRICS}
    return (row, ri, z, o, metrics)


def _exclude(answer: tuple, *models) -> None:
    """The same layout placed otherwise is not ranked again, in every model holding its row."""
    row, ri, z = answer[:3]
    for model, v in models:
        if row in v.y:
            model.add_bool_or([~v.y[row], ~v.r[ri], ~v.z[z]])


def _merged_floor(
    space: Space, pool: dict | None, answers: list, width: int, clip: int | None
) -> np.ndarray:
    """Per row, the least of risk x ``width`` + step over its candidates in the pool that are not
    a ranked layout (``answers``): a lower bound of the merged risk phase's objective for any
    candidate the model still holds in that row. A row without one (every fitting candidate is in
    the pool) can hold no solution: its floor is the pool's largest value, plus one. The steps are
    clipped as ``build_model`` clips its tables: a clipped candidate's step is at least the clip."""
    if pool is None:
        return np.zeros(len(space.sk_k), dtype=np.int64)
    step = pool["value"] if clip is None else np.minimum(pool["value"], clip + 1)
    goal = width * pool["risk"] + step
    keep = np.ones(len(goal), dtype=bool)
    for row, ri, z in (answer[:3] for answer in answers):
        keep &= (pool["sk"] != row) | (pool["ri"] != ri) | (pool["z"] != z)
    floor = np.full(len(space.sk_k), int(goal.max(initial=0)) + 1, dtype=np.int64)
    np.minimum.at(floor, pool["sk"][keep], goal[keep])
    return floor


def _merged_width(least: int | None, band: float) -> int | None:
    """M, for the risk phase's objective with the second step phase's folded in: risk x M + step,
    M the risk band's width, so that one solve proves both (inside the band, step - least < M);
    None (the risk alone) where the least step is unknown or the merged range would not stay
    modest."""
    if least is None:
        return None
    width = band_limit(least, band) - least + 1
    return None if width << len(RISKS) > MAX_MERGED_KEY else width


def _near(key: str, after_step: int, trace: tuple, answer: tuple) -> tuple:
    """The enumerated ranking's candidate that holds a phase's value (the solver's hint): the
    fastest for the least step, the fastest of the least risk for the risk and the second step
    phases (so that a risk solution may show the least step of its risk), else the answer."""
    if key == "step" and after_step == 0:
        return trace[3]
    if key == "risk" or key == "step":
        return trace[4]
    return answer


def _implied(key: str, after_step: int, trace: tuple | None, least: int | None) -> int | None:
    """A phase's value that the phases before it already prove, else None: the least risk when
    the enumerated ranking's is 0 (no candidate is below 0), and the least step of that risk
    when it is the least step of all (``least``, proven by the first step phase). ``after_step``:
    the phase's position after the first step phase (1: risk, 2: the second step phase)."""
    if trace is None or least is None or least != trace[0]:
        return None
    if key == "risk" and after_step == 1 and trace[1] == 0:
        return 0
    if key == "step" and after_step == 2 and trace[1] == 0 and trace[2] == least:
        return least
    return None


def _expected(
    space: Space,
    t: Tables,
    rows: np.ndarray,
    objective: str,
    top_k: int,
    tolerance: float,
    trace: list | None = None,
    costed: dict | None = None,
) -> tuple[list, dict | None]:
    """The ranking of ``search.ranking`` over the kept rows' candidates, costed by ``tables.assemble``
    as the enumerator does: (row, r index, z, o) per rank, for the solver's hints; ``trace``
    receives each rank's (least step, least risk, least step of that risk). Also the pool of
    fitting candidates ranked (arrays ``sk``, ``ri``, ``z``, ``o``, ``step``, ``peak``,
    ``volume``, ``risk``: ``ranking.risk_score``), for ``_merged_floor``. ``costed``: that pool
    as ``prune`` costed it for these rows (else they are costed here)."""
    if not len(rows):
        return [], None
    if costed:
        pool = dict(costed)
    else:
        sk, ri, z, o = candidate_grid(space, rows)
        m = assemble(t, space, sk, ri, z, o)
        ok = m["fits"]
        pool = {"sk": sk[ok], "ri": ri[ok], "z": z[ok], "o": o[ok]}
        pool.update(fitting_metrics(m, sk.shape, ok))
    if "risk" not in pool:
        pool["risk"] = risk_score(
            space, pool["sk"], pool["z"], pool["o"], pool["peak"], t.capacity_kib
        )
    picks = select(
        space, pool, objective, top_k, tolerance, capacity_kib=t.capacity_kib, trace=trace
    )
    if trace is not None:  # the fastest candidates as (row, r index, z, o), for hints
        trace[:] = [
            (
                *rank[:3],
                *(tuple(int(pool[key][i]) for key in ("sk", "ri", "z", "o")) for i in rank[3:]),
            )
            for rank in trace
        ]
    return [tuple(int(pool[key][i]) for key in ("sk", "ri", "z", "o")) for i in picks], pool


def _hint(space: Space, t: Tables, v: Vars, row: int, ri: int, z: int, o: int) -> dict:
    """Every variable of the model set as candidate (row, ri, z, o) sets it: the one-hot
    selections, and the variables they determine from its table values (a complete hint is a
    solution at its step: the search need not repair it)."""
    s = int(space.sk_shape[row])
    at = tuple(np.array([x]) for x in (row, ri, z, o))
    terms = step_terms(t, space, *at)
    runs = int(t.microbatch_zero[s, z])
    determined = {}
    for zero, (flag, extra) in v.zero.items():
        table = t.STAGE2 if zero == 2 else t.STAGE3
        determined[flag] = int(runs == zero)
        determined[extra] = int(table[row, ri, o] - t.STAGE0[row, ri, o]) if runs == zero else 0
    metrics = assemble(t, space, *at)
    determined[v.peak] = int(metrics["peak"][0])
    for low, flag in zip(v.low_headroom, headroom_flags(metrics["peak"], t.capacity_kib)):
        determined[low] = int(flag[0])
    for hidden, (exposed, charged) in zip(step_formula.EXPOSED, v.exposed):
        gap = int(max(0, (hidden.hidden(terms) - hidden.window(terms))[0]))
        determined[exposed], determined[charged] = gap, t.eta_pct * gap // 100
    if v.step is not None:  # time-to-train: the step, and its factor's part
        step = int(metrics["step"][0])
        determined[v.step] = step
        for factor, (chosen, part) in v.factors.items():
            mine = factor == int(t.factor[s, z])
            determined[chosen], determined[part] = int(mine), step if mine else 0
    chosen = {
        "y": row,
        "shape": s,
        "r": ri,
        "z": z,
        "o": o,
        "w": (row, ri, o),
        "sz": (s, z),
        "szo": (s, z, o),
    }
    if v.fetch and t.fetches is not None:
        fetches = t.fetches
        determined.update({b: int(j == row and bool(fetches[z])) for j, b in v.fetch.items()})
    return {
        **{
            var: int(key == chosen[group])
            for group in chosen
            for key, var in getattr(v, group).items()
        },
        **determined,
    }


def _solver(time_limit_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.symmetry_level = 0
    solver.parameters.cp_model_probing_level = 0  # probing dominated presolve on these models
    # one presolve pass: later passes found little on these models and cost up to half a solve
    # (deepseek-v3 on h100-262144: 1.9 s -> 1.0 s of CP-SAT over 12 solves; proofs unchanged)
    solver.parameters.max_presolve_iterations = 1
    # OR-Tools 9.15's inclusion detection (constraints dominated by others) certified a wrong optimum on these
    # models: a 12-layer model on v5p-16 gave step 301928 as OPTIMAL with 300695 feasible (tests/test_search.py
    # test_cpsat_proves_the_true_least_step_where_inclusion_presolve_did_not); without it the proof is right
    solver.parameters.presolve_inclusion_work_limit = 0
    solver.parameters.linearization_level = 2
    return solver


def _decode(solver, v: Vars) -> tuple:
    pick = lambda d: next(k for k, b in d.items() if solver.boolean_value(b))  # noqa: E731
    return pick(v.y), pick(v.r), pick(v.z), pick(v.o)
