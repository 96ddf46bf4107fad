"""Integer tables of the cost terms over the keys they depend on, and the rule that adds them up.

The tables are the cost model's term functions (``costs.terms``) evaluated once per key and
quantised: times in ``quantum_s`` units (rounded), bytes in KiB (rounded up, so a table never
says a layout fits that ``estimate`` rejects). The time tables are the fields of the step
formula's ``costs.step.StageTerms`` and ``StepTerms`` under the same names, indexed by the keys
they depend on; ``assemble`` applies that formula (``costs.step``) to candidates: the enumerator
calls it on every candidate, and the CP-SAT model states the same formula as constraints (tests
hold the two to equal optima). Memory: ``MZ[s, z, st, moment] + MB[sk, r, st, moment]`` must fit
the capacity for every stage st (0 = first, 1 = last) and moment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from layoutsearch.core.units import KIB
from layoutsearch.costs import memory, roofline, step, terms
from layoutsearch.costs.estimate import capacity_bytes
from layoutsearch.search.space import Space

MOMENT_NAMES = tuple(terms.MOMENTS)


@dataclass
class Tables:
    """The tables; a time field's meaning is its namesake's in ``costs.step`` (quanta here)."""

    quantum_s: float
    capacity_kib: int
    step_overhead_s: int  # StepTerms.step_overhead_s
    eta: float  # StageTerms.eta
    eta_pct: int  # StepTerms.eta_pct
    # StageTerms over (S,K) x r
    compute_s: np.ndarray  # [sk, r, st]
    backward_s: np.ndarray  # [sk, r]
    # StepTerms over (S,K) x r
    reduce_window_s: np.ndarray  # [sk, r]
    gather_window_s: np.ndarray  # [sk] one microbatch's forward on the first stage
    MB: np.ndarray  # [sk, r, st, moment] memory by microbatch, KiB
    # StageTerms over (S,K) x o
    tp_s: np.ndarray  # [sk, o, st]
    tp_rerun_s: np.ndarray  # [sk, o]
    cp_s: np.ndarray  # [sk, o]
    cp_rerun_s: np.ndarray  # [sk, o]
    ep_s: np.ndarray  # [sk, o, st]
    ep_rerun_s: np.ndarray  # [sk, o]
    fsdp_fixed_s: np.ndarray  # [sk, o, st]
    fsdp_backward_s: np.ndarray  # [sk, o]
    # StepTerms over (S,K) x o
    pp_sends_s: np.ndarray  # [sk, o]
    reduce_link_busy_s: np.ndarray  # [sk, o]
    # StepTerms over S x z (x o)
    reduce_s: np.ndarray  # [s, z, o]
    zero_gather_s: np.ndarray  # [s, z, o]
    reduce_interference_s: np.ndarray  # [s, z, o]
    gather_interference_s: np.ndarray  # [s, z, o]
    optimizer_s: np.ndarray  # [s, z]
    MZ: np.ndarray  # [s, z, st, moment] memory by ZeRO stage, KiB
    zero3: np.ndarray  # [s, z] bool: StageTerms.zero3
    VOLUME: np.ndarray  # [s] gather-volume objective, KiB
    # filled by build_tables from the tables above (stage_parts)
    STAGE0: np.ndarray = field(
        default_factory=lambda: np.empty(0)
    )  # [sk, r, o] slowest stage without ZeRO-3 collectives
    STAGE3: np.ndarray = field(
        default_factory=lambda: np.empty(0)
    )  # [sk, r, o] slowest stage with them


def _coeff_rows(space: Space, shape_idx: np.ndarray, order_idx: np.ndarray) -> terms.Coeffs:
    rows = space.placed[shape_idx] * len(space.orders) + order_idx
    co = space.coeffs
    dense = space.model.moe is None  # expert groups of one device: nothing to take
    return terms.Coeffs(
        **{
            name: terms.single_device(rows.shape)
            if dense and name in terms.EXPERT_GROUPS
            else getattr(co, name).take(rows)
            for name in terms.COEFF_GROUPS
        }
    )


def _stage_flags(sh: terms.Shapes):
    single = sh.pp == 1
    return {0: (True, single), 1: (False, np.ones_like(single, dtype=bool))}


class OutOfTime(Exception):
    """The deadline given to ``build_tables`` passed between two of its grids."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime


def build_tables(space: Space, deadline: float | None = None) -> Tables:
    """Evaluate every cost term once per key it depends on, then quantise."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    space.shapes.layer_split(model)  # once per shape; every grid below takes its rows
    n_sk, codes, n_o = len(space.sk_k), space.recompute_codes, len(space.orders)

    # ---- (S,K) x r: keys as a column and a row, so a term of (S,K) alone is costed once per row
    sh, k, r = space.shapes.take(space.sk_shape[:, None]), space.sk_k[:, None], codes[None, :]

    def grid(x):
        return np.broadcast_to(x, (n_sk, len(codes)))

    mult = terms.step_multiplier(sh, k)
    a, mb, win = [], [], None
    for st, (first, last) in _stage_flags(sh).items():
        c = terms.compute_per_microbatch(model, workload, acc, sh, k, r, last)
        a.append(
            grid(
                mult
                * (
                    sum(v for key, v in c.items() if key.startswith("compute/"))
                    + acc.microbatch_overhead_s * sh.v
                )
            )
        )
        items = terms.memory_by_microbatch(model, workload, sh, k, r, first, last)
        mb.append(
            [grid(sum(terms.moment_bytes(items, name).values(), 0.0 * k)) for name in MOMENT_NAMES]
        )
        if st == 0:
            y = grid(mult * terms.layers_per_stage(model, sh) * c["window/bwd_layer"])
            win, fwd = (grid(x) for x in terms.step_windows(model, workload, acc, sh, c))
            fwd = fwd[:, 0]
    del sh, k, r, mult, c, items  # the (S,K) x r grid: free it before the next one (peak memory)
    _check(deadline)  # between grids: a time limit stops the search at most one grid late
    # ---- (S,K) x o
    # ---- (S,K) x o: likewise, a term of (S,K) alone (the compute windows) once per row
    sh_o, k_o = space.shapes.take(space.sk_shape[:, None]), space.sk_k[:, None]
    co = _coeff_rows(space, space.sk_shape[:, None], np.arange(n_o)[None, :])

    def grid_o(x):
        return np.broadcast_to(x, (n_sk, n_o))

    mult_o = terms.step_multiplier(sh_o, k_o)
    r0 = np.zeros_like(k_o)
    tp_st, fx_st, ep_st = [], [], []
    fc = terms.fsdp_collectives(model, workload, acc, sh_o, co)
    for st, (_first, last) in _stage_flags(sh_o).items():
        c = terms.compute_per_microbatch(model, workload, acc, sh_o, k_o, r0, last)
        tp = terms.tp_per_microbatch(
            model, workload, acc, sh_o, k_o, co, last, c["window/matmul_fwd_layer"]
        )
        cp = terms.cp_per_microbatch(
            model, workload, acc, sh_o, k_o, co, c["window/attn_fwd_layer"]
        )
        busy = terms.shard_link_traffic(tp, cp, co)
        ep = terms.ep_per_microbatch(model, workload, acc, sh_o, k_o, co, c["window/fwd_layer"])
        tp_st.append(grid_o(mult_o * tp["base"]))
        ep_st.append(grid_o(mult_o * ep["base"]))
        fixed = terms.fsdp_exposed_fixed(
            model, acc, sh_o, fc, c["window/fwd_layer"], c["window/logits"], True, busy["fwd"], last
        )
        fx_st.append(grid_o(mult_o * (fixed["forward"] + fixed["vocab"])))
        if st == 0:
            x = grid_o(
                mult_o
                * terms.layers_per_stage(model, sh_o)
                * (fc["gather_layer"] + fc["reduce_layer"] + busy["bwd"])
            )
            rcon = grid_o(terms.reduction_link_traffic(model, workload, acc, sh_o, tp, cp, co))
            tpf = grid_o(mult_o * tp["rerun"])
            epf = grid_o(mult_o * ep["rerun"])
            cps, cpf = grid_o(mult_o * cp["base"]), grid_o(mult_o * cp["rerun"])
    pp = grid_o(terms.pipeline_sends(model, workload, acc, sh_o, k_o, co))
    _check(deadline)
    # ---- S x z (x o)
    n_s = space.num_shapes
    s_col, z_row = np.arange(n_s)[:, None], np.arange(4)[None, :]

    def grid_z(x, *more):
        return np.broadcast_to(x, (n_s, 4, *more))

    steps = {
        name: grid_z(value, n_o)
        for name, value in terms.step_collectives(
            model,
            workload,
            acc,
            space.shapes.take(s_col[:, :, None]),
            z_row[:, :, None],
            _coeff_rows(space, s_col[:, :, None], np.arange(n_o)[None, None, :]),
        ).items()
    }
    red = steps["reduce/zero"] + steps["reduce/dp"] + steps["reduce/kv_replica"]
    sh_z = space.shapes.take(s_col)
    opt = grid_z(terms.optimizer_time(model, workload, acc, sh_z, z_row))
    mz = [
        [
            grid_z(
                sum(
                    terms.moment_bytes(
                        terms.memory_by_zero(model, workload, sh_z, z_row, first), name
                    ).values(),
                    0.0 * z_row,
                )
            )
            for name in MOMENT_NAMES
        ]
        for first in (True, False)
    ]
    z3 = (z_row == 3) & (sh_z.shards > 1)  # [s, z]
    v_w, v_x = roofline.gather_volumes_bytes(
        model.d_model,
        model.d_ff,
        workload.global_batch_tokens,
        space.cluster.num_devices,
        space.shapes.tp,
    )

    lower = float(np.min(np.max(np.stack(a), axis=0))) if n_sk else 1.0
    quantum = max(1e-7, lower / 1e5)

    def q(x):
        return np.rint(np.asarray(x, dtype=np.float64) / quantum).astype(np.int64)

    def kib(x):
        return np.ceil(np.asarray(x, dtype=np.float64) / KIB).astype(np.int64)

    nr = len(codes)
    reduce_interference, gather_interference = terms.step_interference(acc, steps)
    tables = Tables(
        quantum_s=quantum,
        capacity_kib=int(capacity_bytes(space.cluster, workload) // KIB),
        step_overhead_s=int(q(acc.step_overhead_s)),
        eta=acc.overlap_interference,
        eta_pct=terms.interference_pct(acc),
        compute_s=q(np.stack(a, axis=-1)).reshape(n_sk, nr, 2),
        backward_s=q(y).reshape(n_sk, nr),
        reduce_window_s=q(win).reshape(n_sk, nr),
        gather_window_s=q(fwd),
        MB=kib(np.stack([np.stack(m, axis=-1) for m in mb], axis=-2)).reshape(
            n_sk, nr, 2, len(MOMENT_NAMES)
        ),
        tp_s=q(np.stack(tp_st, axis=-1)).reshape(n_sk, n_o, 2),
        tp_rerun_s=q(tpf).reshape(n_sk, n_o),
        cp_s=q(cps),
        cp_rerun_s=q(cpf),
        ep_s=q(np.stack(ep_st, axis=-1)).reshape(n_sk, n_o, 2),
        ep_rerun_s=q(epf).reshape(n_sk, n_o),
        fsdp_fixed_s=q(np.stack(fx_st, axis=-1)).reshape(n_sk, n_o, 2),
        fsdp_backward_s=q(x).reshape(n_sk, n_o),
        pp_sends_s=q(pp).reshape(n_sk, n_o),
        reduce_link_busy_s=q(rcon).reshape(n_sk, n_o),
        reduce_s=q(red).reshape(n_s, 4, n_o),
        zero_gather_s=q(steps["gather/zero"]).reshape(n_s, 4, n_o),
        reduce_interference_s=q(reduce_interference).reshape(n_s, 4, n_o),
        gather_interference_s=q(gather_interference).reshape(n_s, 4, n_o),
        optimizer_s=q(opt).reshape(n_s, 4),
        MZ=kib(np.stack([np.stack(m, axis=-1) for m in mz], axis=-2)).reshape(
            n_s, 4, 2, len(MOMENT_NAMES)
        ),
        zero3=z3,
        VOLUME=kib(v_w + v_x),
    )
    work = memory.recompute_arrays(model)
    _check(deadline)
    tables.STAGE0, tables.STAGE3 = stage_parts(
        tables, work["tp"][codes], work["attention"][codes], work["moe"][codes]
    )
    return tables


def stage_parts(
    t: Tables, tp_rerun_by_r: np.ndarray, cp_rerun_by_r: np.ndarray, ep_rerun_by_r: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The slowest stage per (S,K,r,o) by ``step.slowest_stage``: without ZeRO-3 collectives and with them."""
    experts = t.ep_s.any() or t.ep_rerun_s.any()  # a dense model's are all zero: left out

    def stage(st: int, zero3: int) -> step.StageTerms:
        # without ZeRO-3 the formula multiplies the fsdp fields by zero: zeros cost nothing
        return step.StageTerms(
            compute_s=t.compute_s[:, :, None, st],
            tp_s=t.tp_s[:, None, :, st],
            tp_rerun_s=t.tp_rerun_s[:, None, :],
            tp_rerun_fraction=tp_rerun_by_r[None, :, None],
            cp_s=t.cp_s[:, None, :],
            cp_rerun_s=t.cp_rerun_s[:, None, :],
            cp_rerun_fraction=cp_rerun_by_r[None, :, None],
            fsdp_fixed_s=t.fsdp_fixed_s[:, None, :, st] if zero3 else 0,
            fsdp_backward_s=t.fsdp_backward_s[:, None, :] if zero3 else 0,
            backward_s=t.backward_s[:, :, None] if zero3 else 0,
            zero3=zero3,
            eta=t.eta,
            ep_s=t.ep_s[:, None, :, st] if experts else None,
            ep_rerun_s=t.ep_rerun_s[:, None, :] if experts else 0.0,
            ep_rerun_fraction=ep_rerun_by_r[None, :, None] if experts else 0.0,
        )

    # a policy rerunning part of the forward's collectives makes fractions: round once
    def quanta(zero3: int) -> np.ndarray:
        return np.rint(step.slowest_stage(stage(0, zero3), stage(1, zero3))).astype(np.int64)

    return quanta(0), quanta(1)


def step_terms(t: Tables, space: Space, sk, ri, z, o) -> step.StepTerms:
    """The once-per-step terms of ``costs.step`` for candidates (index arrays)."""
    s = space.sk_shape[sk]
    return step.StepTerms(
        reduce_s=t.reduce_s[s, z, o],
        reduce_link_busy_s=t.reduce_link_busy_s[sk, o],
        reduce_window_s=t.reduce_window_s[sk, ri],
        reduce_interference_s=t.reduce_interference_s[s, z, o],
        zero_gather_s=t.zero_gather_s[s, z, o],
        gather_window_s=t.gather_window_s[sk],
        gather_interference_s=t.gather_interference_s[s, z, o],
        pp_sends_s=t.pp_sends_s[sk, o],
        optimizer_s=t.optimizer_s[s, z],
        step_overhead_s=t.step_overhead_s,
        eta_pct=t.eta_pct,
    )


def assemble(t: Tables, space: Space, sk, ri, z, o) -> dict:
    """Quantised step time, peak memory (KiB), fit and gather volume of candidates (index arrays)."""
    s = space.sk_shape[sk]
    stage = np.where(t.zero3[s, z], t.STAGE3[sk, ri, o], t.STAGE0[sk, ri, o])
    total = step.step_total(step_terms(t, space, sk, ri, z, o), stage)
    mem = t.MZ[s, z] + t.MB[sk, ri]  # [.., st, moment]
    peak = mem.reshape(mem.shape[0], -1).max(axis=1) if mem.ndim > 2 else mem.max()
    return {"step": total, "peak": peak, "fits": peak <= t.capacity_kib, "volume": t.VOLUME[s]}
