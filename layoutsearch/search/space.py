"""The candidate space both searches share: shapes, microbatch counts, ZeRO stages, recompute
policies and axis orders, with the hard rules applied (DESIGN.md "Search").

A candidate is (shape S, microbatches K, recompute r, ZeRO stage z, axis order o) where
S = (dp, fsdp, tp, pp, cp, virtual stages v). Variants that cannot differ are not repeated:
z is 0 only when nothing is sharded (fsdp x cp = 1), and z >= 1 when fsdp > 1 (fsdp with
ZeRO-0 would be replicated data parallelism, which dp already is); orders that place a shape
identically (same ring coefficients for every group) are kept once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from layoutsearch.costs import terms
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.placement import axis_orders, placement_for_order
from layoutsearch.core.specs import DEGREE_NAMES, RECOMPUTE_POLICIES, Cluster, Layout, ModelSpec, Workload

ZERO_STAGES = (0, 1, 2, 3)
MAX_VIRTUAL_STAGES = 8


@dataclass(frozen=True)
class SearchOptions:
    """What the user restricts: pinned degrees, allowed values, kept dimensions, policies."""

    fix: dict = field(default_factory=dict)  # degree -> value
    choices: dict = field(default_factory=dict)  # degree -> allowed values
    only: tuple[str, ...] | None = None  # degrees that may exceed 1
    recompute: tuple[str, ...] = RECOMPUTE_POLICIES
    zero_stages: tuple[int, ...] = ZERO_STAGES
    max_virtual_stages: int = MAX_VIRTUAL_STAGES
    max_kv_replication: int | None = None  # 1: tp may not exceed the KV heads
    rule: object = None  # optional callable(degrees: dict, zero_stage: int) -> bool (e.g. a framework's limits)
    rule_name: str = ""  # what ``rule`` stands for, for explanations

    def restricted(self, *, fix: dict | None = None, zero_stages: tuple[int, ...] | None = None,
                   max_kv_replication: int | None = None, max_virtual_stages: int | None = None,
                   rule=None, rule_name: str = "") -> "SearchOptions":
        """These options further restricted: pins merged, stage sets intersected, limits tightened, rules ANDed."""
        from dataclasses import replace as _replace

        first = self.rule
        combined = rule if first is None else (first if rule is None else (lambda d, z: first(d, z) and rule(d, z)))
        kv = [x for x in (self.max_kv_replication, max_kv_replication) if x is not None]
        return _replace(
            self, fix={**self.fix, **(fix or {})},
            zero_stages=tuple(z for z in self.zero_stages if zero_stages is None or z in zero_stages),
            max_kv_replication=min(kv) if kv else None,
            max_virtual_stages=min(self.max_virtual_stages, max_virtual_stages or self.max_virtual_stages),
            rule=combined, rule_name="; ".join(x for x in (self.rule_name, rule_name) if x))

    def allowed(self, degree: str, value: int) -> bool:
        if self.only is not None and degree not in self.only and value != 1:
            return False
        if degree in self.fix and value != self.fix[degree]:
            return False
        return degree not in self.choices or value in self.choices[degree]


@dataclass
class Space:
    """Shapes with their per-shape options, as arrays; orders and their per-shape coefficients."""

    model: ModelSpec
    workload: Workload
    cluster: Cluster
    shapes: terms.Shapes  # one row per shape
    sk_shape: np.ndarray  # (S, K) rows: shape index
    sk_k: np.ndarray  # (S, K) rows: microbatches
    recompute_codes: np.ndarray  # allowed r codes
    zero_mask: np.ndarray  # [shape, z] allowed
    orders: list  # axis orders
    order_mask: np.ndarray  # [shape, o] allowed (placeable and not a duplicate)
    coeffs: terms.Coeffs  # arrays over shape * len(orders) + o (rows of masked pairs are zeros)
    placements: dict  # (shape, o) -> placement

    @property
    def num_shapes(self) -> int:
        return len(self.shapes.dp)

    def num_candidates(self) -> int:
        per_shape = self.zero_mask.sum(1) * self.order_mask.sum(1) * len(self.recompute_codes)
        return int(per_shape[self.sk_shape].sum())

    def layout(self, shape: int, k: int, r: int, z: int, o: int) -> Layout:
        """The Layout of one candidate."""
        sh = self.shapes
        v = int(sh.v[shape])
        return Layout(dp=int(sh.dp[shape]), fsdp=int(sh.fsdp[shape]), tp=int(sh.tp[shape]), pp=int(sh.pp[shape]),
                      cp=int(sh.cp[shape]), zero_stage=int(z), virtual_stages=v, num_microbatches=int(k),
                      recompute=terms.RECOMPUTE_NAMES[int(r)], schedule="interleaved" if v > 1 else "1f1b",
                      axes=self.placements[(shape, o)])


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _validate_options(options: SearchOptions) -> None:
    for name in (*options.fix, *options.choices, *(options.only or ())):
        if name not in DEGREE_NAMES:
            raise InvalidArgumentError(f"unknown degree '{name}'; known: {', '.join(DEGREE_NAMES)}")
    for policy in options.recompute:
        if policy not in RECOMPUTE_POLICIES:
            raise InvalidArgumentError(f"recompute '{policy}' is not one of {', '.join(RECOMPUTE_POLICIES)}")


def enumerate_shapes(model: ModelSpec, workload: Workload, n: int, options: SearchOptions) -> list[tuple]:
    """(dp, fsdp, tp, pp, cp, v) tuples that satisfy every rule that does not involve K."""
    out = []
    b = workload.global_batch_seqs
    for tp in _divisors(n):
        if not options.allowed("tp", tp) or model.num_heads % tp or model.d_ff % tp:
            continue
        if model.num_kv_heads % tp and tp % model.num_kv_heads:
            continue
        if options.max_kv_replication is not None and max(tp // model.num_kv_heads, 1) > options.max_kv_replication:
            continue
        for pp in _divisors(n // tp):
            if not options.allowed("pp", pp) or model.num_layers % pp:
                continue
            for cp in _divisors(n // tp // pp):
                if not options.allowed("cp", cp) or (cp > 1 and workload.seq_len % (2 * cp)):
                    continue
                rest = n // tp // pp // cp
                for fsdp in _divisors(rest):
                    dp = rest // fsdp
                    if not (options.allowed("fsdp", fsdp) and options.allowed("dp", dp)) or b % (dp * fsdp):
                        continue
                    vs = [v for v in _divisors(model.num_layers // pp) if v <= options.max_virtual_stages] if pp > 1 else [1]
                    out.extend((dp, fsdp, tp, pp, cp, v) for v in vs)
    return out


def microbatch_choices(workload: Workload, dp: int, fsdp: int, pp: int, v: int) -> list[int]:
    """K such that every data unit has whole sequences per microbatch, K >= pp, and K % pp = 0 when interleaved."""
    per_unit = workload.global_batch_seqs // (dp * fsdp)
    return [k for k in _divisors(per_unit) if k >= pp and (v == 1 or k % pp == 0)]


@lru_cache(maxsize=200_000)
def _placed_coeffs(model: ModelSpec, cluster: Cluster, degrees: tuple, order: tuple):
    names = ("dp", "fsdp", "tp", "pp", "cp")
    placed = placement_for_order(cluster, dict(zip(names, degrees)), order)
    if placed is None:
        return None, None
    layout = Layout(**dict(zip(names, degrees)), axes=placed)
    return placed, terms.layout_coeffs(model, cluster, layout)


def build_space(model: ModelSpec, workload: Workload, cluster: Cluster, options: SearchOptions) -> Space:
    """Every candidate of the problem, organised by the keys the cost terms depend on."""
    _validate_options(options)
    rows, sk_shape, sk_k = [], [], []
    for shape in enumerate_shapes(model, workload, cluster.num_devices, options):
        ks = microbatch_choices(workload, shape[0], shape[1], shape[3], shape[5])
        if not ks:
            continue
        sk_shape.extend([len(rows)] * len(ks))
        sk_k.extend(ks)
        rows.append(shape)
    orders = axis_orders(cluster)
    zero_mask = np.zeros((len(rows), 4), dtype=bool)
    order_mask = np.zeros((len(rows), len(orders)), dtype=bool)
    coeff_rows, placements = [], {}
    empty = None
    for i, (dp, fsdp, tp, pp, cp, v) in enumerate(rows):
        sharded = fsdp * cp > 1
        degrees = {"dp": dp, "fsdp": fsdp, "tp": tp, "pp": pp, "cp": cp}
        for z in options.zero_stages:
            zero_mask[i, z] = ((z == 0 and fsdp == 1) or (z >= 1 and sharded)) and (
                options.rule is None or options.rule(degrees, z))
        seen = set()
        for o, order in enumerate(orders):
            placed, co = _placed_coeffs(model, cluster, (dp, fsdp, tp, pp, cp), order)
            if co is not None:
                empty = empty or co
                if co not in seen:
                    seen.add(co)
                    order_mask[i, o] = True
                    placements[(i, o)] = placed
            coeff_rows.append(co)
    coeff_rows = [c if c is not None else empty for c in coeff_rows]
    codes = np.array([terms.RECOMPUTE_CODES[p] for p in options.recompute], dtype=np.int64)
    shapes = terms.Shapes(**{k: np.array([r[j] for r in rows], dtype=np.int64)
                             for j, k in enumerate(("dp", "fsdp", "tp", "pp", "cp", "v"))}) if rows else terms.Shapes.of()
    if not rows:
        shapes = shapes.take(np.array([], dtype=np.int64))
    return Space(model=model, workload=workload, cluster=cluster, shapes=shapes,
                 sk_shape=np.array(sk_shape, dtype=np.int64), sk_k=np.array(sk_k, dtype=np.int64),
                 recompute_codes=codes, zero_mask=zero_mask, orders=orders, order_mask=order_mask,
                 coeffs=terms.stack_coeffs(coeff_rows) if coeff_rows else None, placements=placements)
