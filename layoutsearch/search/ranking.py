"""The one ranking both searches apply, for every objective: values closer than the model's
resolution are ties, and a tie goes to the simplest layout.

The value (``T`` below, the pool's ``value``) is the objective's (``tables.objective_value``): the
quantised step time for step-time and gather-volume, step time over goodput for time-to-train,
energy per step for energy; the risk band and the tie tolerance are relative to it.

Resolution: ``TIE_TOLERANCE`` (relative, 0.5%). The cost model's terms are calibrated fractions of
peak numbers, validated to about 10-25% (``core.uncertainty``), so two step times less than half a
percent apart are not told apart by it; ranking them by that difference would pick layouts by
noise, and the two searches would break such near-ties differently.

The ranking, rank after rank (the enumerator applies it to arrays, CP-SAT states it as solves):

1. the candidates left are those of no layout ranked yet (a layout = degrees, virtual stages,
   microbatches, recompute and ZeRO stage: one of them is ranked with its best placement only,
   so ``--top N`` never lists the same layout placed differently);
2. with the gather-volume objective, only those of the least volume among them (exact);
3. ``T0`` = the least value among those; the candidates within
   ``band_limit(T0)`` = T0 (1 + ``risk_band``), rounded down, are inside the model's uncertainty
   of the best: among them only those of the least ``risk_score`` stay (``RISKS``: memory
   headroom under min(4 GiB, 10%) (``tight_headroom_kib``), a predicted peak within the memory
   model's measured error of the usable memory (``headroom_kib``), a TP or CP
   group across a scale-out or DCN link, a ZeRO-3 shard group over more than
   ``MAX_ZERO3_NODES`` nodes, context parallelism, more microbatches than
   ``MAX_PLAIN_MICROBATCHES`` or ``MICROBATCHES_PER_STAGE`` per pipeline stage, each weighing
   more than all after it); a layout an expert would distrust never wins on a predicted gain the
   model cannot resolve;
4. ``T`` = the least value of those; the eligible ones are within ``tie_limit(T)`` =
   T (1 + tolerance), rounded down;
5. the next layout is the eligible candidate that is first by ``simplicity_key``: fewer degrees
   above one, then the smaller cp (1 first: fewer ring passes, longer sequence chunks), then a TP
   group inside a node (on no scale-out or DCN axis), a lower ZeRO stage, fewer microbatches,
   lighter recompute, then the degrees (dp, fsdp, tp, pp, cp, virtual stages) in lexicographic
   order, then the axis order (a total order: the key tells every candidate apart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layoutsearch.core.numbers import distinct
from layoutsearch.core.placement import NESTING_ORDER, fill_order
from layoutsearch.core.specs import ALL_DEGREE_NAMES, RECOMPUTE_POLICIES
from layoutsearch.core.uncertainty import memory_error_upper, uncertainty_band
from layoutsearch.core.units import GIB, KIB
from layoutsearch.costs import memory

# The model's resolution: 0.5% is far above the tables' rounding (a quantum is 1e-5 of the best
# stage time) and far below the validated error of a predicted step time (core.uncertainty, about
# 10-25%): a smaller difference does not say which of two layouts is faster.
TIE_TOLERANCE = 0.005
MAX_TIE_TOLERANCE = 0.5  # a larger "tie" would rank by simplicity alone

# The risk order (issue: claims a user can act on). Within the risk band of the best step time
# (``risk_band``: the prediction class's own, never under RISK_BAND) the model cannot tell two layouts
# apart: its validated 80% band of one dense GPU prediction, -7.3%..+9.4% (core/uncertainty.yaml bands.gpu,
# leave-one-source-out), holds a layout that much slower, so a layout an expert would run (TP and CP inside
# the fast domain, headroom, few microbatches) is not beaten by a gain inside it. 10%, the floor, covers both
# sides of that band (tests/test_risk.py keeps it at least the band's; 9% while the band was -8.2%..+7.9%, before
# the fits took Huber's loss on 2026-12-07); TPU and MoE predictions, less sure, take their own wider bands. 5% until
# 2026-12-06 left winners with CP across InfiniBand 4-7% ahead of the in-domain layout Meta ran
# (llama3-405b on 2,048-16,384 H100s). The wider band costs the search nothing where k risk-free
# layouts are found: the reach is then their tie limit, not the band's (``reach``). There a layout
# with fewer of these risks ranks first, the first weighing most:
RISK_BAND = 0.10
# The memory model's measured error decides the headroom (core.uncertainty.memory_error_upper): a
# run used up to u more than its predicted peak; below that, at least this stays free (an allocator
# spike or fragmentation beyond the catalogue's runtime reserve):
HEADROOM_FLOOR_BYTES = 2 * GIB
# ... and, weighing more, a peak that leaves less than this free (an allocator spike or
# fragmentation OOMs it whatever the model's error): min(4 GiB, 10% of the usable memory)
TIGHT_HEADROOM_BYTES = 4 * GIB
TIGHT_HEADROOM_FRACTION = 0.10  # ... on small parts (16 GB v5e)
MAX_PLAIN_MICROBATCHES = 64  # gradient-accumulation steps beyond which a step is mostly bookkeeping
MICROBATCHES_PER_STAGE = 8  # with a pipeline: microbatches per stage that already hide its bubble
# ZeRO-3 (the fsdp x cp shard group gathering every layer's weights) has runs predicted within 5% up to
# 64 nodes (llm-foundry's FSDP runs on 128 to 512 H100s, tests/data/runs_dev.yaml); the only runs of it
# over more (Narayanan et al.'s DeepSpeed ZeRO-3 rows, 80 to 280 nodes) are predicted 25% too slow to 58%
# too fast (docs/cost_model.md, limits): beyond this the band does not hold.
MAX_ZERO3_NODES = 64
# Each risk: its name (``risk_names``, the JSON ``risks``) and its short words (solve's ranking line, a table cell)
_RISK_DECLARATIONS = (
    ("memory headroom under min(4 GiB, 10% of the usable memory)", "tight headroom"),
    (
        "a predicted peak within the memory model's measured error of the usable memory",
        "memory margin",
    ),
    ("a TP group across a scale-out or DCN link", "TP on scale-out"),
    ("a CP group across a scale-out or DCN link", "CP on scale-out"),
    (
        f"a ZeRO-3 shard group over more than {MAX_ZERO3_NODES} nodes or slices",
        f"ZeRO-3 over > {MAX_ZERO3_NODES} nodes",
    ),
    ("context parallelism", "CP"),
    ("microbatches above max(64, 8 x pp)", "many microbatches"),
)
RISKS = tuple(name for name, _ in _RISK_DECLARATIONS)
RISK_WORDS = tuple(words for _, words in _RISK_DECLARATIONS)

# What ``simplicity_key`` compares, most significant first (explanations name the first that differs).
SIMPLICITY = (
    "degrees above one",
    "context parallelism",
    "TP group beyond a node",
    "ZeRO stage",
    "microbatches",
    "recompute",
    "degrees in order (dp, fsdp, tp, pp, cp, virtual stages)",
    "axis placement",
)
SIMPLER = (
    "fewer degrees above one",
    "smaller cp",
    "TP inside a node",
    "lower ZeRO stage",
    "fewer microbatches",
    "lighter recompute",
    "degrees (dp, fsdp, tp, pp, cp, virtual stages) in lexicographic order",
    "axis order",
)
SLOW_AXIS_KINDS = ("scale_out", "dcn")
SHARD_DEGREES = ("fsdp", "cp")  # the ZeRO-3 shard group (costs.terms: ``shard``)


def ranking_description(objective: str, band: float) -> str:
    """The tie-break in words (the solve document's ``solver.tie_break``), for a risk band of ``band``
    (``risk_band``)."""
    first = "least gather volume, then " if objective == "gather-volume" else ""
    value = value_name(objective)
    return (
        f"{first}within {band:.0%} of the best {value} the fewest risks ("
        + "; ".join(risk_names())
        + f", the first weighing most), then {value_name(objective, True)} within the tie "
        "tolerance of the best of "
        "those are ties, won by the simplest layout: "
        + ", then ".join(SIMPLER)
        + "; each layout (degrees, virtual stages, ZeRO stage, microbatches, "
        "recompute) ranked once, with the first of its placements by this ranking"
    )


def risk_names() -> tuple[str, ...]:
    """``RISKS`` with the headroom risk's numbers (the measured error u and the floor)."""
    return (
        RISKS[0],
        f"a predicted peak within the memory model's measured error (+{memory_error_upper():.1%}, "
        f"core/uncertainty.yaml) of the usable memory or within {HEADROOM_FLOOR_BYTES / GIB:g} GiB "
        "of it",
        *RISKS[2:],
    )


def value_name(objective: str, plural: bool = False) -> str:
    """What the ranking's value is for ``objective``, in words (``plural``: its values)."""
    name = {"time-to-train": "step time / goodput", "energy": "energy per step"}.get(objective)
    if name is None:
        return "step times" if plural else "step time"
    return f"values of {name}" if plural else name


def tie_limit(best: int, tolerance: float = TIE_TOLERANCE) -> int:
    """The largest quantised step time tied with ``best``: best (1 + tolerance), rounded down."""
    return int(best) + int(float(best) * tolerance)


def risk_band(problem) -> float:
    """The risk band of the problem's predictions: the half-width of its class's calibrated 80% band (accelerator
    kind, dense or mixture of experts: ``core.uncertainty.uncertainty_band``), rounded up to a whole percent and
    never under ``RISK_BAND``, the dense GPU band's. Two layouts of one problem differ inside it by no more than
    the model can resolve for that class: a MoE prediction's layout-dependent terms (the expert all-to-alls, the
    host launches per local expert, the routing spread) are its least certain, hence its wider band. A part whose
    compute fractions are borrowed keeps its class's band here: the borrowed fraction's error moves every
    layout's compute alike (the level of ``solve``'s band, not the order of its layouts)."""
    return class_risk_band(problem.cluster.accelerator.kind, problem.model.moe is not None)


def class_risk_band(accelerator_kind: str, moe: bool) -> float:
    """``risk_band`` of a class of predictions: accelerator kind ("gpu", "tpu"), dense or ``moe``."""
    low, high = uncertainty_band(accelerator_kind, moe=moe)
    return max(RISK_BAND, math.ceil(round(100 * max(-low, high), 6)) / 100)


def band_limit(best: int, band: float) -> int:
    """The largest quantised step time inside the risk band of ``best``: best (1 + band)."""
    return tie_limit(best, band)


def reach_limit(best: int, tolerance: float, band: float) -> int:
    """The largest step time a layout ranked against a best of ``best`` can have: the tie limit
    of the risk band's limit (a lower-risk layout inside the band, then its ties)."""
    return tie_limit(band_limit(best, band), tolerance)


def reach(kth: int, safe, top_k: int, tolerance: float, band: float) -> int:
    """The largest value a top_k layout can have, given k layouts whose least values are at most
    ``kth`` and ``safe``, the least value of each layout's risk-free candidates (one per layout
    that has one, any number of layouts): ``reach_limit(kth)``, and with k risk-free layouts at
    most W (the k-th least of ``safe``) also ``tie_limit(W)``.

    The second: at a rank j <= k, T0 its least value, one of those k layouts is still unranked.
    If W <= band_limit(T0), its risk-free candidate is inside the band, so the least risk is 0
    and T (the least value of that risk) <= W; else T <= band_limit(T0) < W. Either way every
    eligible candidate is within tie_limit(T) <= tie_limit(W). Both limits only fall as layouts
    join, so any subset of the space's layouts gives a limit that holds for the whole."""
    limit = reach_limit(kth, tolerance, band)
    safe = np.asarray(safe)
    if len(safe) >= top_k:
        limit = min(limit, tie_limit(int(np.partition(safe, top_k - 1)[top_k - 1]), tolerance))
    return limit


def best_per_layout(gid, *keys) -> np.ndarray:
    """The index of each layout's (``gid``'s) best candidate: the least by ``keys``, the first
    most significant, one per layout, in the order of the layouts' ids."""
    gid = np.asarray(gid)
    order = np.lexsort((*reversed(keys), gid))
    first = np.ones(len(order), dtype=bool)
    first[1:] = gid[order][1:] != gid[order][:-1]
    return order[first]


def least_per_layout(gid, value, mask=None) -> np.ndarray:
    """The least ``value`` of each layout (``gid``) among the candidates ``mask`` selects (all by
    default), one entry per layout that has one."""
    gid, value = np.asarray(gid), np.asarray(value)
    if mask is not None:
        gid, value = gid[mask], value[mask]
    return value[best_per_layout(gid, value)]


def headroom_kib(capacity_kib: int, error: float | None = None) -> int:
    """The memory (KiB) a predicted peak must leave free of the usable ``capacity_kib`` (KiB) not
    to carry the headroom risk: a peak p above floor(capacity / (1 + u)) would OOM were the run to
    use u more than predicted (u: ``error``, by default the memory model's measured upper error,
    ``core.uncertainty.memory_error_upper``); at least ``HEADROOM_FLOOR_BYTES``."""
    u = memory_error_upper() if error is None else error
    return max(capacity_kib - int(capacity_kib / (1.0 + u)), int(HEADROOM_FLOOR_BYTES // KIB))


def tight_headroom_kib(capacity_kib: int) -> int:
    """The memory (KiB) under which a layout carries the tight-headroom risk, the heavier one."""
    return int(min(TIGHT_HEADROOM_BYTES / KIB, TIGHT_HEADROOM_FRACTION * capacity_kib))


def headroom_margins_kib(capacity_kib: int) -> tuple[int, int]:
    """(tight, within the measured error): the two headroom risks' margins, in ``RISKS`` order."""
    return tight_headroom_kib(capacity_kib), headroom_kib(capacity_kib)


def headroom_flags(peak_kib, capacity_kib: int) -> tuple[np.ndarray, np.ndarray]:
    """The two headroom risks (0/1 per candidate) of predicted peaks (KiB): the one rule both
    searches apply (CP-SAT states it with ``headroom_margins_kib``)."""
    peak = np.asarray(peak_kib)
    return tuple(  # type: ignore[return-value]
        (peak > capacity_kib - margin).astype(np.int64)
        for margin in headroom_margins_kib(capacity_kib)
    )


def low_headroom(peak_kib, capacity_kib: int) -> np.ndarray:
    """The headroom risk (0/1 per candidate) of predicted peaks (KiB): the one rule both searches
    apply (CP-SAT states it with ``headroom_kib``)."""
    return (np.asarray(peak_kib) > capacity_kib - headroom_kib(capacity_kib)).astype(np.int64)


@dataclass(frozen=True)
class ShapeRisk:
    """The risks that depend on the shape (and the axis order) and the (S, K) row."""

    slow_tp: np.ndarray  # [shape, order] 0/1: the TP group spans a scale-out or DCN axis
    slow_cp: np.ndarray  # [shape, order] 0/1: the CP group spans a scale-out or DCN axis
    # [shape, order] 0/1: the fsdp x cp group spans more than MAX_ZERO3_NODES positions of the scale-out
    # and DCN axes (a risk under ZeRO-3 only: ``zero3_columns``)
    wide_shard: np.ndarray
    cp: np.ndarray  # [shape] 0/1: cp > 1
    many_microbatches: np.ndarray  # [sk row] 0/1: K above max(64, 8 pp)


def per_space(space, attribute: str, build):
    """``build(space, degrees)`` once per space (cached on it as ``attribute``); ``degrees``: name
    -> the shapes' degree array."""
    cached = getattr(space, attribute, None)
    if cached is None:
        sh = space.shapes
        cached = build(space, {name: np.asarray(getattr(sh, name)) for name in ALL_DEGREE_NAMES})
        object.__setattr__(space, attribute, cached)
    return cached


def shape_risk(space) -> ShapeRisk:
    """Computed once per space (cached on it)."""
    return per_space(space, "_shape_risk", _shape_risk)


def _shape_risk(space, degrees: dict) -> ShapeRisk:
    slow = [i for i, a in enumerate(space.cluster.axes) if a.kind in SLOW_AXIS_KINDS]
    crossing = {
        name: np.zeros((space.num_shapes, len(space.orders)), dtype=np.int64)
        for name in ("tp", "cp")
    }
    wide = np.zeros((space.num_shapes, len(space.orders)), dtype=np.int64)
    if slow and space.num_shapes:
        shard = [NESTING_ORDER.index(name) for name in SHARD_DEGREES]
        for o, order in enumerate(space.orders):
            table, _ = fill_order(space.cluster, degrees, order)
            for name, flags in crossing.items():
                flags[:, o] = (table[:, slow, NESTING_ORDER.index(name)] > 1).any(axis=1)
            nodes = table[:, slow][:, :, shard].prod(axis=(1, 2))
            wide[:, o] = nodes > MAX_ZERO3_NODES
    limit = microbatch_limit(degrees["pp"][space.sk_shape])
    return ShapeRisk(
        slow_tp=crossing["tp"],
        slow_cp=crossing["cp"],
        wide_shard=wide,
        cp=(degrees["cp"] > 1).astype(np.int64),
        many_microbatches=(np.asarray(space.sk_k) > limit).astype(np.int64),
    )


def microbatch_limit(pp):
    """The microbatch count above which a layout carries the many-microbatches risk."""
    return np.maximum(MAX_PLAIN_MICROBATCHES, MICROBATCHES_PER_STAGE * np.asarray(pp))


def layout_risks(est) -> tuple[str, ...]:
    """The risks (``risk_names``) one estimated layout carries, by the rules ``risk_flags`` applies
    to the search's tables: its predicted peak against the usable memory (the whole peak rounded up
    to KiB; the tables round each memory item up, so at a margin's very edge they can read a few KiB
    more), a TP or CP group placed on a scale-out or DCN axis, a ZeRO-3 shard group over more than
    ``MAX_ZERO3_NODES`` of their positions, cp > 1, the microbatches."""
    lay, axes = est.layout, {a.name: a.kind for a in est.cluster.axes}
    placements = dict(lay.placements)

    def slow_factors(degree: str) -> list[int]:
        placed = placements.get(degree, ())
        return [factor for axis, factor in placed if axes.get(axis) in SLOW_AXIS_KINDS]

    def slow(degree: str) -> bool:
        return any(factor > 1 for factor in slow_factors(degree))

    nodes = math.prod(f for degree in SHARD_DEGREES for f in slow_factors(degree))

    peak_kib = int(np.ceil(est.memory_bytes["peak"] / KIB))
    flags = (
        *(bool(f) for f in headroom_flags(peak_kib, int(est.memory_bytes["capacity"] // KIB))),
        slow("tp"),
        slow("cp"),
        lay.zero_stage == 3 and nodes > MAX_ZERO3_NODES,
        lay.cp > 1,
        bool(lay.num_microbatches > microbatch_limit(lay.pp)),
    )
    return tuple(name for name, flag in zip(risk_names(), flags) if flag)


def zero3_columns(space) -> np.ndarray:
    """0/1 per ``zero_mask`` column: ZeRO stage 3."""
    return (space.zero_columns(np.arange(space.num_zero))[0] == 3).astype(np.int64)


def risk_flags(space, sk, z, o, peak_kib, capacity_kib: int) -> tuple[np.ndarray, ...]:
    """Each risk of ``RISKS`` (0/1 arrays) for candidates (index arrays: (S, K) row, ZeRO column,
    axis order; peak memory in KiB)."""
    r = shape_risk(space)
    s = space.sk_shape[np.asarray(sk, dtype=np.int64)]
    o = np.asarray(o, dtype=np.int64)
    return (
        *headroom_flags(peak_kib, capacity_kib),
        r.slow_tp[s, o],
        r.slow_cp[s, o],
        r.wide_shard[s, o] * zero3_columns(space)[np.asarray(z, dtype=np.int64)],
        r.cp[s],
        r.many_microbatches[np.asarray(sk, dtype=np.int64)],
    )


def risk_score(space, sk, z, o, peak_kib, capacity_kib: int) -> np.ndarray:
    """The risks as one number, each weighing more than all after it (smaller is safer)."""
    flags = risk_flags(space, sk, z, o, peak_kib, capacity_kib)
    n = len(flags)
    score = np.zeros(np.shape(flags[0]), dtype=np.int64)
    for i, flag in enumerate(flags):
        score += flag << (n - 1 - i)
    return score


def riskier_because(flags_a: tuple[int, ...], flags_b: tuple[int, ...]) -> str | None:
    """The first risk ``b`` carries that ``a`` does not (by ``risk_names``), else None."""
    for name, x, y in zip(risk_names(), flags_a, flags_b):
        if x != y:
            return name if y else None
    return None


@dataclass(frozen=True)
class ShapeSimplicity:
    """The parts of the key that depend on the shape (and the axis order), per shape."""

    degrees_above_one: np.ndarray  # [shape]
    cp_rank: np.ndarray  # [shape] rank of cp among the space's cp degrees: 0 for cp = 1
    tp_beyond_node: np.ndarray  # [shape, order] 0/1: the TP group spans a scale-out or DCN axis
    degree_rank: np.ndarray  # [shape] rank by (dp, fsdp, tp, pp, cp, ep, etp, v)
    recompute_rank: (
        np.ndarray
    )  # [recompute code] 0 for the lightest policy (``recompute_lightness``)


def shape_simplicity(space) -> ShapeSimplicity:
    """Computed once per space (cached on it)."""
    return per_space(space, "_shape_simplicity", _shape_simplicity)


def _shape_simplicity(space, degrees: dict) -> ShapeSimplicity:
    sh = space.shapes
    above = sum(
        ((degrees[name] > 1).astype(np.int64) for name in ALL_DEGREE_NAMES),
        np.zeros(space.num_shapes, dtype=np.int64),
    )
    beyond = shape_risk(space).slow_tp  # one rule for "TP beyond a node": the risk's
    order = np.lexsort(
        tuple(
            np.asarray(getattr(sh, f)) for f in ("v", "etp", "ep", "cp", "pp", "tp", "fsdp", "dp")
        )
    )
    rank = np.empty(space.num_shapes, dtype=np.int64)
    rank[order] = np.arange(space.num_shapes)
    lightness = [
        recompute_lightness(space.model, policy) + (code,)
        for code, policy in enumerate(RECOMPUTE_POLICIES)
    ]
    recompute_rank = np.empty(len(RECOMPUTE_POLICIES), dtype=np.int64)
    recompute_rank[sorted(range(len(lightness)), key=lightness.__getitem__)] = np.arange(
        len(lightness)
    )
    cp_rank = np.searchsorted(distinct(np.append(degrees["cp"], 1)), degrees["cp"]).astype(np.int64)
    return ShapeSimplicity(
        degrees_above_one=above,
        cp_rank=cp_rank,
        tp_beyond_node=beyond,
        degree_rank=rank,
        recompute_rank=recompute_rank,
    )


def recompute_lightness(model, policy: str) -> tuple[float, ...]:
    """How much a checkpoint policy reruns in backward (``costs.memory.recompute_work``): the share
    of the forward's matmul FLOPs, then the attention core, the element-wise passes and the TP
    collectives; smaller is lighter (none < selective < full)."""
    work = memory.recompute_work(model, policy)
    return tuple(float(work[key]) for key in ("matmul", "attention", "elementwise", "tp"))


def simplicity_key(space, sk, ri, z, o) -> tuple[np.ndarray, ...]:
    """The sort key of candidates (index arrays: (S, K) row, recompute index, ZeRO stage, axis
    order), most significant first, in the order of ``SIMPLICITY``; smaller is simpler."""
    sk, ri, z, o = (np.asarray(a, dtype=np.int64) for a in (sk, ri, z, o))
    p = shape_simplicity(space)
    s = space.sk_shape[sk]
    return (
        p.degrees_above_one[s],
        p.cp_rank[s],
        p.tp_beyond_node[s, o],
        z,
        space.sk_k[sk],
        p.recompute_rank[space.recompute_codes[ri]],
        p.degree_rank[s],
        o,
    )


def simpler_because(space, a: tuple, b: tuple) -> str | None:
    """Why candidate ``a`` = (sk, ri, z, o) is first by the simplicity key against ``b``: the first
    component that differs, with both values (None when they are the same candidate)."""
    ka = [int(x[0]) for x in simplicity_key(space, *([v] for v in a))]
    kb = [int(x[0]) for x in simplicity_key(space, *([v] for v in b))]
    for name, kx, ky in zip(SIMPLICITY, ka, kb):
        if kx != ky:
            x: object = kx
            y: object = ky
            if name == "recompute":
                x, y = (RECOMPUTE_POLICIES[int(space.recompute_codes[c[1]])] for c in (a, b))
            elif name == "TP group beyond a node":
                x, y = ("no" if not kx else "yes"), ("no" if not ky else "yes")
            elif name == "context parallelism":
                x, y = (f"cp={int(space.shapes.cp[space.sk_shape[c[0]]])}" for c in (a, b))
            elif name.startswith("degrees in order") or name == "axis placement":
                return f"{name}: first in that order"
            return f"{name}: {x} against {y}"
    return None


def group_ids(space, sk, ri, z) -> np.ndarray:
    """One id per layout up to placement: (S, K) row, recompute, ZeRO stage and offload."""
    return (np.asarray(sk, dtype=np.int64) * len(space.recompute_codes) + ri) * space.num_zero + z


def select(
    space,
    pool: dict,
    objective: str,
    top_k: int,
    tolerance: float = TIE_TOLERANCE,
    *,
    capacity_kib: int,
    trace: list | None = None,
) -> list[int]:
    """The ranking above over a pool of fitting candidates (arrays ``sk``, ``ri``, ``z``, ``o``,
    ``value``, ``peak``, ``volume``): the indices of the top_k, in rank order. ``trace`` (a list)
    receives per rank (least value T0, least risk score inside the band, least value T of those,
    the pool index of a candidate at T0, the pool index of a candidate of that risk at T)."""
    n = len(pool["sk"])
    if not n:
        return []
    order = np.lexsort(
        tuple(reversed(simplicity_key(space, pool["sk"], pool["ri"], pool["z"], pool["o"])))
    )
    value = pool["value"][order]
    primary = pool["volume"][order] if objective == "gather-volume" else np.zeros(n, dtype=np.int64)
    gid = group_ids(space, pool["sk"], pool["ri"], pool["z"])[order]
    risk = risk_score(space, pool["sk"], pool["z"], pool["o"], pool["peak"], capacity_kib)[order]
    band = risk_band(space.problem)
    alive = np.ones(n, dtype=bool)
    picks: list[int] = []
    while len(picks) < top_k and alive.any():
        eligible = alive & (primary == primary[alive].min())
        fastest = int(np.argmin(np.where(eligible, value, np.iinfo(np.int64).max)))
        least = int(value[fastest])
        eligible &= value <= band_limit(least, band)
        safest = int(risk[eligible].min())
        eligible &= risk == safest
        at_best = int(np.argmin(np.where(eligible, value, np.iinfo(np.int64).max)))
        best = int(value[at_best])
        eligible &= value <= tie_limit(best, tolerance)
        i = int(np.argmax(eligible))
        picks.append(int(order[i]))
        if trace is not None:
            trace.append((least, safest, best, int(order[fastest]), int(order[at_best])))
        alive &= gid != gid[i]
    return picks


def relevant(
    space, pool: dict, objective: str, top_k: int, tolerance: float, capacity_kib: int
) -> np.ndarray:
    """A mask of the pool's candidates that may still be ranked in the top_k once more candidates
    join the pool: with the k-th best layout (by its best candidate, lexicographically (volume,
    value) for gather-volume) at (V, S), a candidate with more volume than V, or the same and a
    value above reach_limit(S), is behind k layouts each of which keeps it ineligible at every rank (at
    rank j <= k one of the k is left, so the least step T0 <= S and every pick is within
    reach_limit(T0)). For the other objectives the limit is ``reach``'s, which also reads the
    pool's risk-free layouts (``capacity_kib``: the usable memory, for the headroom risks)."""
    n = len(pool["sk"])
    primary = pool["volume"] if objective == "gather-volume" else np.zeros(n, dtype=np.int64)
    gid = group_ids(space, pool["sk"], pool["ri"], pool["z"])
    value = pool["value"]
    best = best_per_layout(gid, primary, value)  # each layout's best candidate
    if len(best) < top_k:
        return np.ones(n, dtype=bool)
    kth = best[np.lexsort((value[best], primary[best]))[top_k - 1]]
    v, s = primary[kth], value[kth]
    band = risk_band(space.problem)
    if objective == "gather-volume":
        return (primary < v) | ((primary == v) & (value <= reach_limit(int(s), tolerance, band)))
    safe = risk_score(space, pool["sk"], pool["z"], pool["o"], pool["peak"], capacity_kib) == 0
    return value <= reach(int(s), least_per_layout(gid, value, safe), top_k, tolerance, band)
