"""The candidate space both searches share (docs/search.md), built from the rule registry.

A candidate is (shape S, microbatches K, recompute r, ZeRO stage z, axis order o) with
S = (dp, fsdp, tp, pp, cp, virtual stages v). The enumeration proposes supersets and the
registry's rules (``core.rules``) decide: each rule is applied at the first stage where the
fields it reads exist:

1. degree tuples (dp, fsdp, tp, pp, cp) whose product is the device count (from the
   factorisation of the count);
1b. x the context-parallel flavours searched (``cp_flavours_searched``) where cp > 1 (ring where
   cp = 1, which reads none);
2. x virtual stages v in 1..MAX_VIRTUAL_STAGES and the searched schedules that run with v
   (``searched_schedules``: 1f1b and interleaved, or the export target's, or --schedules);
2b. x the balanced split (``core.stages``, code ``spl``) beside the engine's where pp > 1, the framework
   writes it (``balanced_split_searched``) and the engine's split does not dominate it
   (``with_balanced_split``);
3. x microbatch counts K among the divisors of B / gcd(B, dp x fsdp);
4. ZeRO stages with the offload choices per shape (a mask: column z + 4 x the offload's index
   in ``offload_codes``; a column whose offloaded state does not fit the host's memory is off),
   recompute policies (a list).

Axis orders that place a shape identically (same ring coefficients for every group) are
kept once; placements are computed once per degree tuple.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np

from layoutsearch.core.arrays import distinct_rows, read_only
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.frameworks import profile_of
from layoutsearch.core.numbers import divisors
from layoutsearch.core.placement import (
    EXPERT_NESTING,
    axis_orders,
    expert_degrees,
    fill_order,
    placement_for_order,
)
from layoutsearch.core.problem import MAX_VIRTUAL_STAGES, HasProblem, Problem, SearchOptions
from layoutsearch.core.rules import (
    BALANCED_SCHEDULES,
    SCHEDULE_NAMES,
    Cand,
    Capabilities,
    Rule,
    cp_a2a_degree,
    registry,
    schedule_fits_virtual_stages,
)
from layoutsearch.core.specs import (
    ALL_DEGREE_NAMES,
    CP_FLAVOUR_CODES,
    CP_FLAVOURS,
    DEGREE_NAMES,
    OFFLOADS,
    RECOMPUTE_POLICIES,
    SCHEDULE_CODES,
    Cluster,
    Layout,
    ModelSpec,
)
from layoutsearch.core.stages import BALANCED_SPLIT, CHUNK_LAYOUT
from layoutsearch.costs import params, terms

SHAPE_FIELDS = (*ALL_DEGREE_NAMES, "v", "sched", "cpf", "spl")
SHAPE_INDEX = (
    "shape_index"  # the row of the tuple a microbatch count was proposed for (no rule reads it)
)
STAGE_FIELDS = {  # the fields known at each stage of the enumeration
    "degrees": frozenset(ALL_DEGREE_NAMES),
    "cp_flavour": frozenset((*ALL_DEGREE_NAMES, "cpf")),
    "virtual": frozenset(SHAPE_FIELDS),
    "microbatches": frozenset((*SHAPE_FIELDS, "k")),
    "zero": frozenset((*SHAPE_FIELDS, "z", "f")),
    "recompute": frozenset(("r",)),
}


@dataclass
class Space(HasProblem):
    """Shapes with their per-shape options, as arrays; orders and their per-shape coefficients."""

    problem: Problem
    rules: tuple[Rule, ...]  # the registry's rules in force
    shapes: terms.Shapes  # one row per shape
    sk_shape: np.ndarray  # (S, K) rows: shape index
    sk_k: np.ndarray  # (S, K) rows: microbatches
    recompute_codes: np.ndarray  # allowed r codes
    zero_mask: np.ndarray  # [shape, z] allowed; column z: ZeRO stage z % 4, offload_codes[z // 4]
    orders: list  # axis orders
    order_mask: np.ndarray  # [shape, o] allowed (placeable and not a duplicate)
    coeffs: (
        terms.Coeffs | None
    )  # arrays over placed * len(orders) + o (masked pairs hold unused values)
    placed: np.ndarray  # [shape] its row of ``coeffs``: shapes of one degree tuple share one
    offload_codes: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    launch: str | None = (
        None  # the export target whose rank order masked the placements (launch_target)
    )
    sequence_parallel: bool = True  # every candidate's Layout.sequence_parallel (SearchOptions)

    @property
    def num_shapes(self) -> int:
        return len(self.shapes.dp)

    @property
    def num_zero(self) -> int:
        """Columns of ``zero_mask``: the ZeRO stages 0-3 for each allowed offload choice."""
        return 4 * len(self.offload_codes)

    def zero_columns(self, z) -> tuple[np.ndarray, np.ndarray]:
        """(ZeRO stage, offload code) of ``zero_mask`` columns ``z``."""
        z = np.asarray(z)
        return z % 4, self.offload_codes[z // 4]

    def num_candidates(self) -> int:
        per_shape = self.zero_mask.sum(1) * self.order_mask.sum(1) * len(self.recompute_codes)
        return int(per_shape[self.sk_shape].sum())

    def layout(self, shape: int, k: int, r: int, z: int, o: int) -> Layout:
        """The Layout of one candidate."""
        sh = self.shapes
        v = int(sh.v[shape])
        stage, offload = self.zero_columns(z)
        return Layout(
            dp=int(sh.dp[shape]),
            fsdp=int(sh.fsdp[shape]),
            tp=int(sh.tp[shape]),
            pp=int(sh.pp[shape]),
            cp=int(sh.cp[shape]),
            ep=int(sh.ep[shape]),
            etp=int(sh.etp[shape]),
            zero_stage=int(stage),
            offload=OFFLOADS[int(offload)],
            virtual_stages=v,
            num_microbatches=int(k),
            recompute=RECOMPUTE_POLICIES[int(r)],
            schedule=SCHEDULE_NAMES[int(sh.sched[shape])],
            cp_flavour=CP_FLAVOURS[int(sh.cpf[shape])],
            axes=self.placement(shape, o),
            balanced_split=bool(sh.spl[shape] == BALANCED_SPLIT),
            sequence_parallel=self.sequence_parallel,
        )

    def restrict(self, rows: np.ndarray) -> Space:
        """The space of the (S, K) rows ``rows`` alone, with only the shapes they use: both keep
        their order, so the simplicity ranks (``search.ranking``) order them alike."""
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        used, sk_shape = np.unique(self.sk_shape[rows], return_inverse=True)
        return replace(
            self,
            shapes=self.shapes.take(used),
            sk_shape=sk_shape.astype(np.int64).reshape(-1),
            sk_k=self.sk_k[rows],
            zero_mask=self.zero_mask[used],
            order_mask=self.order_mask[used],
            placed=self.placed[used],
        )

    def placement(self, shape: int, o: int):
        """The placement of shape ``shape`` by axis order ``o``."""
        degrees = {name: int(getattr(self.shapes, name)[shape]) for name in ALL_DEGREE_NAMES}
        return placement_for_order(self.cluster, degrees, self.orders[o])


# ----------------------------------------------------------------------------- staged enumeration
def stage_of(rule: Rule) -> str:
    """The first enumeration stage whose fields include everything ``rule`` reads."""
    for stage, known in STAGE_FIELDS.items():
        if rule.needs <= known:
            return stage
    raise ValueError(
        f"rule '{rule.code}' reads {sorted(rule.needs)}, which no enumeration stage has together"
    )


def degree_tuples(num_devices: int, experts: int = 0) -> Cand:
    """Every (dp, fsdp, tp, pp, cp) with product ``num_devices``, and with ``experts`` > 0 every
    (ep, etp) whose product divides the devices of a stage times tp (the rules then keep ep
    dividing the experts, so the funnel names them) and etp 1 or tp (the expert TP the frameworks
    offer: Megatron-Core's default is tp, its MoE recipes 1; torchtitan takes 1 or tp); ep = etp
    = 1 otherwise. Built a degree at a time over the divisors (rows in no particular order:
    ``build_space`` orders the shapes)."""
    d = np.array(divisors(num_devices), dtype=np.int64)
    rows = np.ones((1, 0), dtype=np.int64)  # the degrees so far, tp first
    for _ in ("tp", "pp", "cp", "fsdp"):
        used = rows.prod(axis=1)[:, None]
        ok = num_devices % (used * d[None, :]) == 0
        r, c = np.nonzero(ok)
        rows = np.column_stack([rows[r], d[c]])
    tp, pp, cp, fsdp = rows.T
    dp = num_devices // (tp * pp * cp * fsdp)
    ep = etp = np.ones_like(tp)
    if experts:  # (ep, etp) with ep x etp dividing the stage's devices x tp = num_devices / pp
        room = (num_devices // pp)[:, None]
        blocks = []
        for etp_of in (np.ones_like(tp), np.where(tp > 1, tp, 0)):  # etp 1, then etp tp (tp > 1)
            ok = (etp_of[:, None] > 0) & (room % (d[None, :] * np.maximum(etp_of, 1)[:, None]) == 0)
            r, c = np.nonzero(ok)
            blocks.append((r, d[c], etp_of[r]))
        r = np.concatenate([b[0] for b in blocks])
        ep, etp = np.concatenate([b[1] for b in blocks]), np.concatenate([b[2] for b in blocks])
        dp, fsdp, tp, pp, cp = dp[r], fsdp[r], tp[r], pp[r], cp[r]
    table = dict(dp=dp, fsdp=fsdp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp)
    return {name: np.asarray(table[name], dtype=np.int64) for name in ALL_DEGREE_NAMES}


def problem_degree_tuples(problem: Problem) -> Cand:
    """``degree_tuples`` of the problem's devices, with the expert degrees when the model has experts."""
    return degree_tuples(
        problem.num_devices, problem.model.moe.num_experts if problem.model.moe is not None else 0
    )


DEFAULT_SCHEDULES = ("1f1b", "interleaved")  # searched without --schedules or an export target


def searched_schedules(
    options: SearchOptions | None, capabilities: Capabilities | None
) -> tuple[str, ...]:
    """The schedules the search proposes: --schedules; else the export target's but GPipe (1F1B's
    bubble with every microbatch's activations alive: never better); else DEFAULT_SCHEDULES. 1f1b
    always, as the form of a layout without a pipeline (the rules keep only what is allowed)."""
    if options is not None and options.schedules is not None:
        chosen = options.schedules
    elif capabilities is not None:
        chosen = tuple(s for s in capabilities.pipeline_schedules if s != "gpipe")
    else:
        chosen = DEFAULT_SCHEDULES
    return tuple(dict.fromkeys(("1f1b", *chosen)))


def with_virtual_stages(
    c: Cand,
    max_virtual_stages: int = MAX_VIRTUAL_STAGES,
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES,
) -> Cand:
    """Each row x (v in 1..max, schedule) for each of ``schedules`` that runs with v stages per
    device (``rules.SCHEDULE_VIRTUAL_STAGES``)."""
    v = np.arange(1, max_virtual_stages + 1, dtype=np.int64)
    pairs = [
        (int(x), SCHEDULE_CODES[s])
        for x in v
        for s in schedules
        if schedule_fits_virtual_stages(SCHEDULE_CODES[s], x)
    ]
    pv, ps = (np.array(col, dtype=np.int64) for col in zip(*pairs, strict=True))
    out = {name: np.repeat(a, len(pv)) for name, a in c.items()}
    rows = len(next(iter(c.values())))
    out["v"], out["sched"] = np.tile(pv, rows), np.tile(ps, rows)
    return out


def balanced_split_searched(
    problem: Problem, options: SearchOptions, capabilities: Capabilities | None
) -> bool:
    """Whether the search tries the balanced split: where --pipeline-splits names it, and without
    --pipeline-splits where the --export target writes it and no other uneven split (torchtitan: even
    or balanced). Elsewhere it is opt-in, as offload is: searched by default it multiplied a Megatron
    search's candidates by 2 to 5 (deepseek-v3 on h800-2048: 1.3M -> 7.2M, twice the CPU) for a winner
    1.7% faster there. For torchtitan the engine's splits are the even one alone, so a layer count the
    pipeline does not divide has no pipeline without it: Llama 3 405B's 126 layers on h100-1024 took
    54.6 s a step without one, 46.8 s on 16 balanced stages. An export target that cannot write it
    refuses it by rule (``split``)."""
    if options.pipeline_splits is not None:
        return "balanced" in options.pipeline_splits
    return capabilities is not None and set(capabilities.pipeline_splits) == {"even", "balanced"}


def with_balanced_split(problem: Problem, c: Cand, searched: bool) -> Cand:
    """Each row (split code ``spl`` 0, the engine's split) and, where ``searched``, pp > 1 and the schedule
    places chunk i on stage i mod pp (``rules.BALANCED_SCHEDULES``), once more with code 1 unless the engine's
    split dominates it: valid, not a chunk layout (which the search keeps to some pps), and no heavier in
    the dense layers or MoE layers either stage's terms read (``terms.layers_per_stage`` less
    ``moe_layers_per_stage``, and ``moe_layers_per_stage``: every term is a non-negative sum over the
    two kinds, ``terms.stage_moe_share``), the balanced bubble being never smaller (``Shapes.bubble_stages`` <= v)."""
    c = {**c, "spl": np.zeros_like(c["pp"])}
    if not searched or not len(c["pp"]):
        return c
    # the splits read pp and v alone: costed once per distinct pair, spread to the rows
    model, (pairs, pair) = problem.model, distinct_rows(np.stack([c["pp"], c["v"]], axis=1))
    keys = {k: c[k][pairs] for k in ("pp", "v")}
    engine = terms.Shapes.of(dp=1, fsdp=1, tp=1, cp=1, **keys)
    balanced = terms.Shapes.of(dp=1, fsdp=1, tp=1, cp=1, **keys, spl=1)
    dominated = engine.layer_split(model)[4] & (engine.layer_split(model)[3] != CHUNK_LAYOUT)
    for last in (False, True):
        moe = [terms.moe_layers_per_stage(model, sh, last) for sh in (engine, balanced)]
        dense = [
            terms.layers_per_stage(model, sh, last) - n for sh, n in zip((engine, balanced), moe)
        ]
        dominated &= (dense[0] <= dense[1]) & (moe[0] <= moe[1])
    looped = np.isin(c["sched"], [SCHEDULE_CODES[s] for s in BALANCED_SCHEDULES])
    valid = balanced.layer_split(model)[4] & ~dominated
    added = valid[pair] & looped & (c["pp"] > 1)
    extra = {name: a[added] for name, a in c.items()}
    extra["spl"] = np.full(int(added.sum()), BALANCED_SPLIT, dtype=np.int64)
    return {name: np.concatenate([c[name], extra[name]]) for name in c}


def with_microbatches(c: Cand, global_batch_seqs: int) -> Cand:
    """Each row x K among the divisors of B / gcd(B, dp x fsdp) (a superset of the valid counts)."""
    distinct, unit_of = np.unique(c["dp"] * c["fsdp"], return_inverse=True)
    by_unit = [divisors(global_batch_seqs // math.gcd(global_batch_seqs, int(u))) for u in distinct]
    starts = np.cumsum([0] + [len(ks) for ks in by_unit])  # each unit's counts in ``flat``
    flat = np.array([k for ks in by_unit for k in ks], dtype=np.int64)
    counts = np.diff(starts)[unit_of]
    out = {name: np.repeat(a, counts) for name, a in c.items()}
    first = np.cumsum(counts) - counts  # each row's first output row
    within = np.arange(int(counts.sum())) - np.repeat(first, counts)
    out["k"] = flat[np.repeat(starts[:-1][unit_of], counts) + within]
    return out


def with_cp_flavours(c: Cand, flavours: tuple[str, ...] = CP_FLAVOURS) -> Cand:
    """Each row with cp > 1 x the CP ``flavours`` (codes ``cpf``); a row with cp = 1 once, as ring."""
    codes = np.array([CP_FLAVOUR_CODES[f] for f in flavours], dtype=np.int64)
    counts = np.where(c["cp"] > 1, len(codes), 1)
    out = {name: np.repeat(a, counts) for name, a in c.items()}
    first = np.cumsum(counts) - counts
    within = np.arange(int(counts.sum())) - np.repeat(first, counts)
    out["cpf"] = np.where(out["cp"] > 1, codes[within % len(codes)], CP_FLAVOUR_CODES["ring"])
    return out


def cp_flavours_searched(problem: Problem, options: SearchOptions) -> tuple[str, ...]:
    """The CP flavours tried where cp > 1: --cp-flavours, else the framework profile's default set
    (like its recompute policies); an export target's rule then drops those it cannot write."""
    if options.cp_flavours is not None:
        return options.cp_flavours
    return profile_of(problem.workload.framework, problem.cluster.accelerator.kind).cp_flavours


def _keep(c: Cand, mask: np.ndarray) -> Cand:
    return {name: a[mask] for name, a in c.items()}


def _apply(problem: Problem, rules: list[Rule], c: Cand) -> Cand:
    return _keep(c, _apply_mask(problem, rules, c))


def search_rules(
    options: SearchOptions | None, capabilities: Capabilities | None
) -> tuple[Rule, ...]:
    """The rules the search applies: the registry with its canonical forms, options and target limits."""
    return registry(options, capabilities, canonical=True)


def build_space(
    problem: Problem, options: SearchOptions | None = None, capabilities: Capabilities | None = None
) -> Space:
    """Every candidate of the problem, organised by the keys the cost terms depend on."""
    options = options or SearchOptions()
    _validate_options(problem, options)
    rules = search_rules(options, capabilities)
    by_stage: dict[str, list[Rule]] = {stage: [] for stage in STAGE_FIELDS}
    for rule in rules:
        by_stage[stage_of(rule)].append(rule)
    sequence_parallel = options.sequence_parallel and (
        capabilities is None or capabilities.sequence_parallel
    )
    # the degrees with the space's one sequence parallelism, which the rules read
    degrees = problem_degree_tuples(problem)
    sp = np.full(len(degrees["tp"]), int(sequence_parallel), dtype=np.int64)
    c = _apply(problem, by_stage["degrees"], {**degrees, "sp": sp})
    flavours = cp_flavours_searched(problem, options)
    c = _apply(problem, by_stage["cp_flavour"], with_cp_flavours(c, flavours))
    c = _apply(
        problem,
        by_stage["virtual"],
        with_balanced_split(
            problem,
            with_virtual_stages(
                c, options.max_virtual_stages, searched_schedules(options, capabilities)
            ),
            balanced_split_searched(problem, options, capabilities),
        ),
    )
    shape_rows = np.stack([c[f] for f in SHAPE_FIELDS], axis=1).reshape(-1, len(SHAPE_FIELDS))
    shape_rows, sk_shape, sk_k = _microbatch_rows(
        problem, by_stage["microbatches"], shape_rows, problem.workload.global_batch_seqs
    )
    shapes = {f: shape_rows[:, i] for i, f in enumerate(SHAPE_FIELDS)}
    # in code order whatever the option's: a column's index ranks its simplicity (no offload first)
    offload_codes = np.array(sorted(OFFLOADS.index(o) for o in options.offload), dtype=np.int64)
    n = len(shape_rows)
    zero_mask = (
        np.stack(
            [
                _apply_mask(
                    problem, by_stage["zero"], {**shapes, "z": np.full(n, z), "f": np.full(n, f)}
                )
                for f in offload_codes
                for z in range(4)
            ],
            axis=1,
        )
        if n
        else np.zeros((0, 4 * len(offload_codes)), dtype=bool)
    )
    if offload_codes.any() and n:
        zero_mask &= _host_memory_fits(problem, shapes, offload_codes)
    codes = np.arange(len(RECOMPUTE_POLICIES), dtype=np.int64)
    codes = codes[_apply_mask(problem, by_stage["recompute"], {"r": codes})]
    orders = axis_orders(problem.cluster)
    degree_rows, placed = _unique_rows(shape_rows[:, : len(ALL_DEGREE_NAMES)])
    cpa = cp_a2a_degree(problem.cluster.accelerator.devices_per_node, shapes)
    launch = launch_target(problem, capabilities.target if capabilities is not None else None)
    order_mask, coeffs = _placements(problem, degree_rows, orders, bool(np.any(cpa > 1)), launch)
    return Space(
        problem=problem,
        rules=rules,
        shapes=terms.Shapes(
            **{f: shapes[f] for f in (*terms.SHAPE_KEYS, "sched", "cpf", "spl")},
            cpa=np.asarray(cpa, dtype=np.int64).reshape(-1),
        ),
        sk_shape=sk_shape,
        sk_k=sk_k,
        recompute_codes=codes,
        zero_mask=zero_mask,
        orders=orders,
        order_mask=order_mask[placed],
        coeffs=coeffs,
        placed=placed,
        offload_codes=offload_codes,
        launch=launch,
        sequence_parallel=sequence_parallel,
    )


def _host_memory_fits(problem: Problem, shapes: dict, offload_codes: np.ndarray) -> np.ndarray:
    """[shape, z]: the host-memory rule, the model state a column offloads per node (the devices of
    a host, the larger pipeline stage's) fits the node's memory (estimate's ``host-memory``)."""
    acc = problem.cluster.accelerator
    # costed once per distinct tuple of the fields it reads (the shapes' many schedules, splits
    # and CP flavours share them)
    rows, index = distinct_rows(np.stack([shapes[f] for f in terms.SHAPE_KEYS], axis=1))
    sh = terms.Shapes(**{f: shapes[f][rows, None] for f in terms.SHAPE_KEYS})
    z = np.tile(np.arange(4), len(offload_codes))[None, :]
    f = np.repeat(offload_codes, 4)[None, :]
    hosted = [
        terms.memory_by_zero(problem.model, problem.workload, sh, z, first, f)
        for first in (True, False)
    ]
    per_node = (
        np.maximum(*(h["host/offloaded_state"] for h in hosted)) * problem.cluster.devices_per_node
    )
    limit = acc.host_memory_bytes_per_node
    return ((f == 0) | (per_node <= (np.inf if limit is None else limit)))[index]


def _apply_mask(problem: Problem, rules: list[Rule], c: Cand) -> np.ndarray:
    mask = np.ones(len(next(iter(c.values()))), dtype=bool)
    for rule in rules:
        mask &= rule.mask(problem, c)
    return mask


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``a`` (sorted) and each row's index among them."""
    if not len(a):
        return a, np.zeros(0, dtype=np.int64)
    order = np.lexsort(a.T[::-1])
    new = np.ones(len(a), dtype=bool)
    new[1:] = (a[order][1:] != a[order][:-1]).any(axis=1)
    ids = np.cumsum(new) - 1
    inverse = np.empty(len(a), dtype=np.int64)
    inverse[order] = ids
    return a[order][new], inverse


def _shape_order(shape_rows: np.ndarray) -> np.ndarray:
    """The enumeration order of shapes (rows of SHAPE_FIELDS): tp, pp, cp, fsdp, ep, etp, the CP
    flavour, v, the schedule code, then the split code ascending."""
    col = {f: i for i, f in enumerate(SHAPE_FIELDS)}
    keys = ("spl", "sched", "v", "cpf", "etp", "ep", "fsdp", "cp", "pp", "tp")
    return np.lexsort(tuple(shape_rows[:, col[f]] for f in keys))


def _microbatch_rows(
    problem: Problem, rules: list[Rule], shape_rows: np.ndarray, global_batch_seqs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the shapes with some microbatch count, in enumeration order (``_shape_order``); the (S, K)
    rows: each shape's index and K, by shape then K ascending). K: the counts ``with_microbatches``
    proposes that the microbatch stage's ``rules`` keep, decided once per distinct tuple of the
    fields those rules and the proposal read (the data unit, pp, v, the schedule: a few thousand
    tuples, where the shapes x K are millions) and spread to the shapes of each tuple."""
    shape_rows = shape_rows[_shape_order(shape_rows)]
    col = {f: i for i, f in enumerate(SHAPE_FIELDS)}
    read = sorted({"dp", "fsdp"}.union(*(rule.needs for rule in rules)) - {"k"})
    first, key = distinct_rows(shape_rows[:, [col[f] for f in read]])
    proposed = with_microbatches(
        {**{f: shape_rows[first, col[f]] for f in read}, SHAPE_INDEX: np.arange(len(first))},
        global_batch_seqs,
    )
    kept = _apply(problem, rules, proposed)  # by tuple, K ascending within one
    per_key = np.bincount(kept[SHAPE_INDEX], minlength=len(first))
    key_start = np.cumsum(per_key) - per_key
    counts = per_key[key]
    used = counts > 0
    shape_rows, key, counts = shape_rows[used], key[used], counts[used]
    sk_shape = np.repeat(np.arange(len(shape_rows), dtype=np.int64), counts)
    within = np.arange(len(sk_shape), dtype=np.int64) - np.repeat(
        np.cumsum(counts) - counts, counts
    )
    sk_k = kept["k"][np.repeat(key_start[key], counts) + within].astype(np.int64)
    return shape_rows, sk_shape, sk_k


def launch_target(problem: Problem, target: str | None) -> str | None:
    """The export target whose rank order must build the searched placements (a GPU framework whose
    launcher numbers ranks in a fixed order: ``export.rank_order.LAUNCH_ORDERS``), else None."""
    if target is None or problem.cluster.accelerator.kind != "gpu":
        return None
    from layoutsearch.export.rank_order import LAUNCH_ORDERS  # only with such an export target

    return target if target in LAUNCH_ORDERS else None


def _placements(
    problem: Problem,
    degree_rows: np.ndarray,
    orders: list,
    cp_all_to_all: bool,
    launch: str | None = None,
):
    """Per degree tuple (rows of ALL_DEGREE_NAMES) and axis order: whether the order places it (and,
    with a ``launch`` target, whether that target's rank order can build the placement's groups:
    ``export.rank_order.pick_launch``, the export's own check), once per distinct coefficients
    (orders that place a tuple identically, for every group, are kept once), and the ring
    coefficients of every group, all tuples of one order at once.

    Remembered (read-only arrays) for the last few (cluster, model, degree tuples): the points of
    a sweep over batches mostly keep the same degree tuples (``axis_orders`` of the cluster are
    the ``orders``). ``cp_all_to_all``: some row runs a CP all-to-all (``Shapes.cpa`` > 1), else
    the cp all-to-all groups' coefficients are left out (``terms.coeffs_of``)."""
    rows = np.ascontiguousarray(degree_rows, dtype=np.int64)
    return _placements_of(
        problem.cluster, problem.model, rows.tobytes(), rows.shape, cp_all_to_all, launch
    )


def _launchable(cluster: Cluster, degree_rows: np.ndarray, order, ok: np.ndarray, launch: str):
    """Of the rows ``order`` places (``ok``), those whose placement ``launch``'s rank order builds."""
    from layoutsearch.export.rank_order import LAUNCH_ORDERS, pick_launch

    out = np.zeros(len(degree_rows), dtype=bool)
    for i in np.flatnonzero(ok):
        degrees: dict[str, Any] = {
            name: int(degree_rows[i, j]) for j, name in enumerate(ALL_DEGREE_NAMES)
        }
        axes = placement_for_order(cluster, degrees, order)
        layout = Layout(**degrees, axes=axes)
        out[i] = axes is not None and not isinstance(
            pick_launch(cluster, layout, LAUNCH_ORDERS[launch]), str
        )
    return out


@lru_cache(maxsize=16)
def _placements_of(
    cluster: Cluster,
    model: ModelSpec,
    rows_bytes: bytes,
    shape: tuple,
    cp_all_to_all: bool,
    launch: str | None = None,
):
    degree_rows = np.frombuffer(rows_bytes, dtype=np.int64).reshape(shape)
    orders = axis_orders(cluster)
    degrees = {name: degree_rows[:, i] for i, name in enumerate(ALL_DEGREE_NAMES)}
    kv = params.kv_replication(model, degrees["tp"])
    order_mask = np.zeros((len(degree_rows), len(orders)), dtype=bool)
    per_order: list[terms.Coeffs] = []
    keys: list[np.ndarray] = []
    moe = model.moe is not None
    for o, order in enumerate(orders):
        table, ok = fill_order(cluster, {k: degrees[k] for k in DEGREE_NAMES}, order)
        expert_table = None
        if moe:
            expert_table, expert_ok = fill_order(
                cluster, expert_degrees(degrees), order, EXPERT_NESTING
            )
            ok = ok & expert_ok
        if launch is not None:
            ok = _launchable(cluster, degree_rows, order, ok, launch)
        co = terms.coeffs_of(cluster, table, kv, expert_table, cp_all_to_all)
        key = np.stack(
            [
                getattr(getattr(co, g), f)
                # the cp all-to-all groups follow the cp group's placement: orders alike in every
                # ring group are kept once (the all-to-all flavours take the first one's coefficients)
                for g in terms.COEFF_GROUPS
                if g not in ("cp_a2a", "cp_in")
                for f in ("members", "seconds_per_byte", "latency_s")
            ],
            axis=1,
        )
        duplicate = np.zeros(len(degree_rows), dtype=bool)
        for earlier, earlier_key in enumerate(keys):
            duplicate |= order_mask[:, earlier] & (key == earlier_key).all(axis=1)
        order_mask[:, o] = ok & ~duplicate
        per_order.append(co)
        keys.append(key)
    coeffs = terms.interleave_coeffs(per_order) if len(degree_rows) else None
    read_only(order_mask, coeffs)
    return order_mask, coeffs


def _validate_options(problem: Problem, options: SearchOptions) -> None:
    """Options that name unknown degrees or policies, or pin a degree that cannot divide the devices."""
    for name in (*options.fix, *options.choices, *(options.only or ())):
        if name not in ALL_DEGREE_NAMES:
            raise InvalidArgumentError(
                f"unknown degree '{name}'; known: {', '.join(ALL_DEGREE_NAMES)}"
            )
    for choice in options.offload:
        if choice not in OFFLOADS:
            raise InvalidArgumentError(f"offload '{choice}' is not one of {', '.join(OFFLOADS)}")
    for policy in options.recompute or ():
        if policy not in RECOMPUTE_POLICIES:
            raise InvalidArgumentError(
                f"recompute '{policy}' is not one of {', '.join(RECOMPUTE_POLICIES)}"
            )
    n = problem.num_devices
    for name, value in options.fix.items():
        if n % value:
            raise InvalidArgumentError(
                f"--fix {name}={value}: {value} does not divide the {n} devices of {problem.cluster_name}"
            )
