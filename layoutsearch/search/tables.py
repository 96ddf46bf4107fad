"""Integer tables of the cost terms over the keys they depend on, and the rule that adds them up.

The tables are the cost model's term functions (``costs.terms``) evaluated once per key and
quantised: times in ``quantum_s`` units (rounded), bytes in KiB (rounded up, so a table never
says a layout fits that ``estimate`` rejects). ``assemble`` is the step rule of
``costs.terms`` over those integers; the enumerator applies it to every candidate, and the
CP-SAT model states the same rule as constraints (tests hold the two to equal optima).

Per stage st (0 = first, 1 = last):
  stage[st] = A[SKr,st] + TP[SKo,st] + tp_rerun[r]*TPF[SKo] + CP[SKo] + cp_rerun[r]*CPF[SKo]
              + EP[SKo,st] + ep_rerun[r]*EPF[SKo]
              + z3 * (FX[SKo,st] + max(0, X[SKo] - Y[SKr]) + eta min(X[SKo], Y[SKr]))
  STAGE     = max_st stage[st], tabulated per (S,K,r,o) without (STAGE0) and with ZeRO-3 (STAGE3)
  step      = STAGE + max(0, RED[Szo] + RCON[SKo] - WIN[SKr]) + REDI[Szo] + max(0, GATH[Szo] - FWD[SK]) + GATHI[Szo]
              + PP[SKo] + OPT[Sz] + STEP0
  memory    = MZ[Sz,st,moment] + MB[SKr,st,moment] <= capacity, for every st and moment
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from layoutsearch.core.units import KIB
from layoutsearch.costs import memory, roofline, step, terms
from layoutsearch.costs.estimate import capacity_bytes
from layoutsearch.search.space import Space

MOMENT_NAMES = tuple(terms.MOMENTS)


@dataclass
class Tables:
    quantum_s: float
    capacity_kib: int
    step0: int  # fixed per-step overhead, quanta
    eta: float  # compute lost per hidden collective second (Accelerator.overlap_interference)
    eta_pct: int  # the same in percent (terms.interference_pct: the catalogue holds it to 0.01)
    # (S,K) x r
    A: np.ndarray  # [sk, r, st]
    Y: np.ndarray  # [sk, r]
    WIN: np.ndarray  # [sk, r]
    FWD: np.ndarray  # [sk] one microbatch's forward on the first stage (hides the ZeRO-1/2 gather)
    MB: np.ndarray  # [sk, r, st, moment]
    # (S,K) x o
    TP: np.ndarray  # [sk, o, st]
    TPF: np.ndarray  # [sk, o]
    CP: np.ndarray  # [sk, o]
    CPF: np.ndarray  # [sk, o]
    EP: np.ndarray  # [sk, o, st] exposed MoE token AllToAlls
    EPF: np.ndarray  # [sk, o] those of a forward whose MLP runs again
    FX: np.ndarray  # [sk, o, st]
    X: np.ndarray  # [sk, o]
    PP: np.ndarray  # [sk, o]
    RCON: np.ndarray  # [sk, o] hidden TP/CP traffic of the last backward on the reductions' links
    # S x z (x o)
    RED: np.ndarray  # [s, z, o]
    GATH: np.ndarray  # [s, z, o]
    REDI: np.ndarray  # [s, z, o] compute the hidden reductions slow (overlap_interference x RED)
    GATHI: np.ndarray  # [s, z, o] and the hidden ZeRO-1/2 gather
    OPT: np.ndarray  # [s, z]
    MZ: np.ndarray  # [s, z, st, moment]
    Z3: np.ndarray  # [s, z] bool: ZeRO-3 collectives run
    VOLUME: np.ndarray  # [s] gather-volume objective, KiB
    # filled by build_tables from the tables above (stage_parts)
    STAGE0: np.ndarray = field(
        default_factory=lambda: np.empty(0)
    )  # [sk, r, o] slowest stage without ZeRO-3 collectives
    STAGE3: np.ndarray = field(
        default_factory=lambda: np.empty(0)
    )  # [sk, r, o] slowest stage with them


def _grid(space: Space, sk_rows: np.ndarray, extra: int):
    """Shapes and K repeated ``extra`` times per (S,K) row (row-major: sk, then extra)."""
    shape_idx = np.repeat(space.sk_shape[sk_rows], extra)
    return space.shapes.take(shape_idx), np.repeat(space.sk_k[sk_rows], extra), shape_idx


def _coeff_rows(space: Space, shape_idx: np.ndarray, order_idx: np.ndarray) -> terms.Coeffs:
    rows = shape_idx * len(space.orders) + order_idx
    co = space.coeffs
    dense = space.model.moe is None  # expert groups of one device: nothing to take
    return terms.Coeffs(
        **{
            name: terms.single_device(len(rows))
            if dense and name in terms.EXPERT_GROUPS
            else getattr(co, name).take(rows)
            for name in terms.COEFF_GROUPS
        }
    )


def _stage_flags(sh: terms.Shapes):
    single = sh.pp == 1
    return {0: (True, single), 1: (False, np.ones_like(single, dtype=bool))}


def build_tables(space: Space) -> Tables:
    """Evaluate every cost term once per key it depends on, then quantise."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    space.shapes.layer_split(model)  # once per shape; every grid below takes its rows
    n_sk, codes, n_o = len(space.sk_k), space.recompute_codes, len(space.orders)
    sk = np.arange(n_sk)

    # ---- (S,K) x r
    sh, k, _ = _grid(space, sk, len(codes))
    r = np.tile(codes, n_sk)
    mult = terms.step_multiplier(sh, k)
    a, mb, win = [], [], None
    for st, (first, last) in _stage_flags(sh).items():
        c = terms.compute_per_microbatch(model, workload, acc, sh, k, r, last)
        a.append(
            mult
            * (
                sum(v for key, v in c.items() if key.startswith("compute/"))
                + acc.microbatch_overhead_s * sh.v
            )
        )
        items = terms.memory_by_microbatch(model, workload, sh, k, r, first, last)
        mb.append([sum(terms.moment_bytes(items, name).values(), 0.0 * k) for name in MOMENT_NAMES])
        if st == 0:
            y = mult * terms.layers_per_stage(model, sh) * c["window/bwd_layer"]
            windows = terms.step_windows(model, workload, acc, sh, c)
            win, fwd = windows["WIN"], windows["FWD"].reshape(n_sk, len(codes))[:, 0]
    del sh, k, r, mult, c, items  # the (S,K) x r grid: free it before the next one (peak memory)
    # ---- (S,K) x o
    sh_o, k_o, shape_o = _grid(space, sk, n_o)
    order_o = np.tile(np.arange(n_o), n_sk)
    co = _coeff_rows(space, shape_o, order_o)
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
        tp_st.append(mult_o * tp["base"])
        ep_st.append(mult_o * ep["base"])
        fixed = terms.fsdp_exposed_fixed(
            model, acc, sh_o, fc, c["window/fwd_layer"], c["window/logits"], True, busy["fwd"], last
        )
        fx_st.append(mult_o * (fixed["forward"] + fixed["vocab"]))
        if st == 0:
            x = (
                mult_o
                * terms.layers_per_stage(model, sh_o)
                * (fc["gather_layer"] + fc["reduce_layer"] + busy["bwd"])
            )
            rcon = terms.reduction_link_traffic(model, workload, acc, sh_o, tp, cp, co)
            tpf = mult_o * tp["rerun"]
            epf = mult_o * ep["rerun"]
    pp = terms.pipeline_sends(model, workload, acc, sh_o, k_o, co)
    # ---- S x z (x o)
    n_s = space.num_shapes
    s_zo = np.repeat(np.arange(n_s), 4 * n_o)
    z_zo = np.tile(np.repeat(np.arange(4), n_o), n_s)
    o_zo = np.tile(np.arange(n_o), 4 * n_s)
    steps = terms.step_collectives(
        model, workload, acc, space.shapes.take(s_zo), z_zo, _coeff_rows(space, s_zo, o_zo)
    )
    red = steps["reduce/zero"] + steps["reduce/dp"] + steps["reduce/kv_replica"]
    s_z, z_z = np.repeat(np.arange(n_s), 4), np.tile(np.arange(4), n_s)
    sh_z = space.shapes.take(s_z)
    opt = terms.optimizer_time(model, workload, acc, sh_z, z_z)
    mz = [
        [
            sum(
                terms.moment_bytes(
                    terms.memory_by_zero(model, workload, sh_z, z_z, first), name
                ).values(),
                0.0 * z_z,
            )
            for name in MOMENT_NAMES
        ]
        for first in (True, False)
    ]
    z3 = ((z_z == 3) & (sh_z.shards > 1)).reshape(n_s, 4)
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
    tables = Tables(
        quantum_s=quantum,
        capacity_kib=int(capacity_bytes(space.cluster, workload) // KIB),
        step0=int(q(acc.step_overhead_s)),
        eta=acc.overlap_interference,
        eta_pct=terms.interference_pct(acc),
        A=q(np.stack(a, axis=-1)).reshape(n_sk, nr, 2),
        Y=q(y).reshape(n_sk, nr),
        WIN=q(win).reshape(n_sk, nr),
        FWD=q(fwd),
        MB=kib(np.stack([np.stack(m, axis=-1) for m in mb], axis=-2)).reshape(
            n_sk, nr, 2, len(MOMENT_NAMES)
        ),
        TP=q(np.stack(tp_st, axis=-1)).reshape(n_sk, n_o, 2),
        TPF=q(tpf).reshape(n_sk, n_o),
        CP=q(mult_o * cp["base"]).reshape(n_sk, n_o),
        CPF=q(mult_o * cp["rerun"]).reshape(n_sk, n_o),
        EP=q(np.stack(ep_st, axis=-1)).reshape(n_sk, n_o, 2),
        EPF=q(epf).reshape(n_sk, n_o),
        FX=q(np.stack(fx_st, axis=-1)).reshape(n_sk, n_o, 2),
        X=q(x).reshape(n_sk, n_o),
        PP=q(pp).reshape(n_sk, n_o),
        RCON=q(rcon).reshape(n_sk, n_o),
        RED=q(red).reshape(n_s, 4, n_o),
        GATH=q(steps["gather/zero"]).reshape(n_s, 4, n_o),
        **{
            name: q(v).reshape(n_s, 4, n_o)
            for name, v in terms.step_interference(acc, steps).items()
        },
        OPT=q(opt).reshape(n_s, 4),
        MZ=kib(np.stack([np.stack(m, axis=-1) for m in mz], axis=-2)).reshape(
            n_s, 4, 2, len(MOMENT_NAMES)
        ),
        Z3=z3,
        VOLUME=kib(v_w + v_x),
    )
    work = memory.recompute_arrays(model)
    tables.STAGE0, tables.STAGE3 = stage_parts(
        tables, work["tp"][codes], work["attention"][codes], work["moe"][codes]
    )
    return tables


def stage_parts(
    t: Tables, tp_rerun_by_r: np.ndarray, cp_rerun_by_r: np.ndarray, ep_rerun_by_r: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The slowest stage per (S,K,r,o) by ``step.slowest_stage``: without ZeRO-3 collectives and with them."""
    terms_sk_r_o = {
        "A": [t.A[:, :, None, st] for st in step.STAGES],
        "TP": [t.TP[:, None, :, st] for st in step.STAGES],
        "TPF": t.TPF[:, None, :],
        "CP": t.CP[:, None, :],
        "CPF": t.CPF[:, None, :],
        **(
            {
                "EP": [t.EP[:, None, :, st] for st in step.STAGES],
                "EPF": t.EPF[:, None, :],
                "ep_rerun": ep_rerun_by_r[None, :, None],
            }
            if (t.EP.any() or t.EPF.any())
            else {}
        ),
        "FX": [t.FX[:, None, :, st] for st in step.STAGES],
        "X": t.X[:, None, :],
        "Y": t.Y[:, :, None],
        "ETA": t.eta,
        "tp_rerun": tp_rerun_by_r[None, :, None],
        "cp_rerun": cp_rerun_by_r[None, :, None],
    }

    def quanta(
        x,
    ):  # a policy rerunning part of the forward's collectives makes fractions: round once
        return np.rint(x).astype(np.int64)

    return quanta(step.slowest_stage({**terms_sk_r_o, "z3": 0})), quanta(
        step.slowest_stage({**terms_sk_r_o, "z3": 1})
    )


def step_terms(t: Tables, space: Space, sk, ri, z, o) -> dict:
    """The once-per-step terms of ``costs.step`` for candidates (index arrays)."""
    s = space.sk_shape[sk]
    return {
        "RED": t.RED[s, z, o],
        "RCON": t.RCON[sk, o],
        "WIN": t.WIN[sk, ri],
        "GATH": t.GATH[s, z, o],
        "FWD": t.FWD[sk],
        "REDI": t.REDI[s, z, o],
        "GATHI": t.GATHI[s, z, o],
        "ETA_PCT": t.eta_pct,
        "PP": t.PP[sk, o],
        "OPT": t.OPT[s, z],
        "STEP0": t.step0,
    }


def assemble(t: Tables, space: Space, sk, ri, z, o) -> dict:
    """Quantised step time, peak memory (KiB), fit and gather volume of candidates (index arrays)."""
    s = space.sk_shape[sk]
    stage = np.where(t.Z3[s, z], t.STAGE3[sk, ri, o], t.STAGE0[sk, ri, o])
    total = step.step_total(step_terms(t, space, sk, ri, z, o), stage)
    mem = t.MZ[s, z] + t.MB[sk, ri]  # [.., st, moment]
    peak = mem.reshape(mem.shape[0], -1).max(axis=1) if mem.ndim > 2 else mem.max()
    return {"step": total, "peak": peak, "fits": peak <= t.capacity_kib, "volume": t.VOLUME[s]}
