"""Integer tables of the cost terms over the keys they depend on, and the rule that adds them up.

The tables are the cost model's term functions (``costs.terms``) evaluated once per key and
quantised: times in ``quantum_s`` units (rounded), bytes in KiB (rounded up, so a table never
says a layout fits that ``estimate`` rejects). The time tables are the fields of the step
formula's ``costs.step.StageTerms`` and ``StepTerms`` under the same names, indexed by the keys
they depend on; ``assemble`` applies that formula (``costs.step``) to candidates: the enumerator
calls it on every candidate, and the CP-SAT model states the same formula as constraints (tests
hold the two to equal optima). Memory: ``MZ[s, z, st, moment] + MB[sk, r, st, moment]`` must fit
the capacity for every stage st (0 = first, 1 = last) and moment. The objective's value of a
candidate (``objective_value``) is its step time, or, weighted by ``search.objectives``, its
step time over goodput or its energy per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from layoutsearch.core.arrays import distinct_rows, read_only, shared_keys
from layoutsearch.core.numbers import distinct
from layoutsearch.core.units import KIB
from layoutsearch.costs import memory, roofline, step, terms
from layoutsearch.costs.estimate import capacity_bytes
from layoutsearch.search.space import Space

MOMENT_NAMES = tuple(terms.MOMENTS)
NEVER = np.iinfo(np.int64).max // 4  # a bound no candidate reaches (sums of a few stay in int64)


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
    # [sk, r] the compute ZeRO-2's traffic of every microbatch but the last hides behind (zero2_window_layer)
    zero2_window_s: np.ndarray
    # StepTerms over (S,K) x r
    reduce_window_s: np.ndarray  # [sk, r]
    reduce_early_window_s: np.ndarray  # [sk, r]
    gather_window_s: (
        np.ndarray
    )  # [sk] one microbatch's forward of the first chunk on the first stage
    gather_late_window_s: np.ndarray  # [sk]
    MB: np.ndarray  # [sk, r, st, moment] memory by microbatch, KiB
    # StageTerms over (S,K) x o
    tp_s: np.ndarray  # [sk, o, st]
    tp_rerun_s: np.ndarray  # [sk, o]
    cp_s: np.ndarray  # [sk, o]
    cp_rerun_s: np.ndarray  # [sk, o]
    ep_s: np.ndarray  # [sk, o, st]
    ep_rerun_s: np.ndarray  # [sk, o]
    fsdp_fixed_s: np.ndarray  # [sk, o, st]
    # [sk, st] ZeRO-3's copies (StageTerms.zero_copies_s); [sk] ZeRO-2's, of every microbatch but the last
    zero_copies_s: np.ndarray
    zero2_copies_s: np.ndarray
    # [sk, st, sharded] the gradient accumulation kernel (StageTerms.accumulate_s): the whole stage's gradients,
    # or their shards where ZeRO-2/3 reduce-scatter them in the microbatches
    accumulate_s: np.ndarray
    fsdp_backward_s: np.ndarray  # [sk, o] ZeRO-3's
    # [sk, r, o] ZeRO-3's gathers a recomputed forward repeats (regather_table); None where the framework has none
    fsdp_regather_s: np.ndarray | None
    # [sk, o] ZeRO-2's: the reduce-scatters of every microbatch's gradients but the last's
    fsdp_reduce_backward_s: np.ndarray
    # StepTerms over (S,K) x o
    pp_sends_s: np.ndarray  # [sk, o]
    reduce_link_busy_s: np.ndarray  # [sk, o]
    reduce_early_link_busy_s: np.ndarray  # [sk, o]
    # StepTerms over S x z (x o)
    reduce_s: np.ndarray  # [s, z, o]
    reduce_early_s: np.ndarray  # [s, z, o]
    zero_gather_s: np.ndarray  # [s, z, o]
    gather_late_s: np.ndarray  # [s, z, o]
    reduce_interference_s: np.ndarray  # [s, z, o]
    gather_interference_s: np.ndarray  # [s, z, o]
    optimizer_s: np.ndarray  # [s, z]
    zero_step_copies_s: np.ndarray  # [s, z]
    MZ: np.ndarray  # [s, z, st, moment] memory by ZeRO stage, KiB
    # [s, z] which ZeRO collectives run in the microbatches' backward: 3 ZeRO-3's gathers and reduce-scatters,
    # 2 ZeRO-2's reduce-scatters, 0 none (no shard group, or stage 0 or 1); StageTerms.microbatch_zero is 1
    # for 2 or 3
    microbatch_zero: np.ndarray
    VOLUME: np.ndarray  # [s] gather-volume objective, KiB
    # parameter offload: each row's host fetches per step ([sk]), charged where the column fetches ([z])
    param_fetch_s: np.ndarray | None = None
    fetches: np.ndarray | None = None
    # with state offload searched, host memory per device (KiB): HZ[s, z, st] + HB[sk, r, st] <= host_kib
    HZ: np.ndarray | None = None
    HB: np.ndarray | None = None
    host_kib: int = 0
    # [sk] the share of the step a slower last stage paces (costs.terms.paced_share; StageTerms' step.paced_max)
    paced: np.ndarray = field(default_factory=lambda: np.empty(0))
    slice_wait: float = 0.0  # StageTerms.slice_wait
    # filled by build_tables from the tables above (stage_parts)
    # [sk, r, o] the slowest stage without ZeRO collectives in the microbatches, with ZeRO-2's, with ZeRO-3's
    STAGE0: np.ndarray = field(default_factory=lambda: np.empty(0))
    STAGE2: np.ndarray = field(default_factory=lambda: np.empty(0))
    STAGE3: np.ndarray = field(default_factory=lambda: np.empty(0))
    # each device's busy (compute) time over the step besides the optimizer step: K x the compute
    # items of the stage with more of them (costs.estimate's time_s["compute"] less
    # "compute/optimizer", quanta)
    busy_s: np.ndarray = field(default_factory=lambda: np.empty(0))  # [sk, r]
    # the objective the value is of, and its integer weights (search.objectives.weigh)
    objective: str = "step-time"
    factor: np.ndarray = field(  # [s, z] time-to-train: FACTOR_SCALE / goodput, rounded up
        default_factory=lambda: np.empty((0, 0), dtype=np.int64)
    )
    idle_w: int = 0  # energy: watts x WATT_SCALE at idle, and busy less idle
    dynamic_w: int = 0


def _coeff_rows(
    space: Space, shape_idx: np.ndarray, order_idx: np.ndarray, names=terms.COEFF_GROUPS
) -> terms.Coeffs:
    """The coefficients of the shapes' placements by the orders; groups not in ``names`` are
    left as groups of one device (for terms that do not read them)."""
    rows = space.placed[shape_idx] * len(space.orders) + order_idx
    co = space.coeffs
    dense = space.model.moe is None  # expert groups of one device: nothing to take
    groups: dict[str, Any] = {
        name: terms.single_device(rows.shape)
        if (dense and name in terms.EXPERT_GROUPS) or name not in names
        else getattr(co, name).take(rows)
        for name in terms.COEFF_GROUPS
    }
    taken = terms.Coeffs(**groups)
    return terms.with_contention(taken, lambda name: getattr(co, name).take(rows))


# the groups whose collectives ``stage_collectives`` and ``terms.pipeline_sends`` read
SHARD_GROUPS = ("tp", "cp", "cp_a2a", "cp_in", "pp", "ep", "ep_in", "ep_out", "etp")


def stage_collectives(
    space: Space, sh: terms.Shapes, k, co: terms.Coeffs, windows: dict, last
) -> tuple[dict, dict, dict]:
    """One stage's per-microbatch TP, CP and EP collectives (``costs.terms``), hidden behind that
    stage's compute ``windows`` without recompute: build_tables' (S,K) x o terms, and
    ``exposed_bounds``'."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    tp = terms.tp_per_microbatch(
        model, workload, acc, sh, k, co, last, windows, space.sequence_parallel
    )
    cp = terms.cp_per_microbatch(model, workload, acc, sh, k, co, windows["window/attn_fwd_layer"])
    ep = terms.ep_per_microbatch(model, workload, acc, sh, k, co, windows["window/fwd_layer"])
    return tp, cp, ep


def stage_windows(space: Space, windows: list | None, sh: terms.Shapes, k, st: int, last) -> dict:
    """Stage ``st``'s compute windows without recompute: ``windows`` (``RowTerms.windows`` of the
    rows) where "none" is searched, else costed again with the recompute code 0."""
    if windows is not None:
        return windows[st]
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    return terms.compute_per_microbatch(
        model, workload, acc, sh, k, np.zeros_like(k), last, space.sequence_parallel
    )


def _stage_flags(sh: terms.Shapes):
    single = sh.pp == 1
    return {0: (True, single), 1: (False, np.ones_like(single, dtype=bool))}


class OutOfTime(Exception):
    """The deadline given to ``build_tables`` passed between two of its grids."""


def _check(deadline: float | None) -> None:
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime


@dataclass
class RowTerms:
    """The (S,K) x r terms in seconds and bytes, before quantisation: each stage's compute over the
    step ([sk, r] per stage, first then last), the backward ZeRO-3 traffic hides behind, the
    windows of the once-per-step collectives, and each stage's memory by microbatch per moment."""

    compute_s: list  # [st] -> [sk, r]
    busy_s: list  # [st] -> [sk, r] K x the compute items (the device's busy time)
    backward_s: np.ndarray  # [sk, r]
    # [sk, r] K - 1 microbatches' ZeRO-2 window (terms.zero2_window_layer)
    zero2_window_s: np.ndarray
    reduce_window_s: np.ndarray  # [sk, r]
    reduce_early_window_s: np.ndarray  # [sk, r]
    gather_window_s: np.ndarray  # [sk]
    gather_late_window_s: np.ndarray  # [sk]
    memory_bytes: list  # [st][moment] -> [sk, r]
    host_bytes: list  # [st] -> [sk, r]: the activations the policy offloads to host memory
    paced: (
        np.ndarray
    )  # [sk, 1] the share of the step a slower last stage paces (costs.terms.paced_share)
    # each stage's compute windows ("window/..." of costs.terms.compute_per_microbatch) without
    # recompute ([sk, 1]), which the (S,K) x o terms hide behind; None where "none" is not searched
    windows: list | None = None

    def take(self, rows: np.ndarray) -> RowTerms:
        """These terms of the rows ``rows`` alone (``Space.restrict``'s rows, in its order)."""
        return RowTerms(
            compute_s=[c[rows] for c in self.compute_s],
            busy_s=[c[rows] for c in self.busy_s],
            backward_s=self.backward_s[rows],
            zero2_window_s=self.zero2_window_s[rows],
            reduce_window_s=self.reduce_window_s[rows],
            reduce_early_window_s=self.reduce_early_window_s[rows],
            gather_window_s=self.gather_window_s[rows],
            gather_late_window_s=self.gather_late_window_s[rows],
            memory_bytes=[[m[rows] for m in stage] for stage in self.memory_bytes],
            host_bytes=[h[rows] for h in self.host_bytes],
            paced=self.paced[rows],
            windows=None
            if self.windows is None
            else [{key: w[rows] for key, w in stage.items()} for stage in self.windows],
        )

    def quantum_s(self) -> float:
        """The time quantum: 1e-5 of the least slowest-stage compute of any row (a tables' unit)."""
        if not self.compute_s[0].size:
            return self.quantum_of(None)
        return self.quantum_of(float(np.min(np.max(np.stack(self.compute_s), axis=0))))

    @staticmethod
    def quantum_of(least_compute_s: float | None) -> float:
        """The quantum of rows whose least slowest-stage compute is ``least_compute_s`` (None: no
        row)."""
        return 1e-5 if least_compute_s is None else max(1e-7, least_compute_s / 1e5)


@dataclass
class Costed:
    """What ``compute_bounds`` costed for a space, for ``build_tables`` and ``exposed_bounds`` to
    reuse: the quantum; each row's index among the distinct keys of the (S,K) x r terms
    (``term_keys``) and a row of each key; per key the least over the recompute policies of the
    busier stage's busy time (s: the energy objective's bound) and, where "none" is searched, the
    compute windows without recompute (``RowTerms.windows``). ``rows``: the RowTerms of the keys
    (of the rows themselves where ``key`` is None, ``restrict``'s), kept where the space was
    costed in one chunk; a larger space's are costed again per key when asked for
    (``row_terms``, ``restrict``): millions of rows never hold them all at once. The shapes'
    memory by ZeRO stage (KiB, [s, z, st, moment]): ``MZ``, or ``zero_memory`` of each shape's
    ``zero_key`` (``least_zero_memory``)."""

    quantum_s: float
    rows: RowTerms | None = None
    MZ: np.ndarray | None = None
    key: np.ndarray | None = None  # each row's key index; None: ``rows`` is the rows' own
    first: np.ndarray | None = None  # a row of each key
    least_busy_s: np.ndarray | None = None  # [keys]
    windows: list | None = None  # [st] -> {name: [keys, 1]}
    zero_key: np.ndarray | None = None  # [s] each shape's key of the S x z terms
    zero_memory: np.ndarray | None = None  # [zero keys, z, st, moment] KiB

    def shape_memory(self, shapes=slice(None)) -> np.ndarray | None:
        """The memory by ZeRO stage of the shapes ``shapes`` (KiB, [s, z, st, moment]); None
        where not costed."""
        if self.MZ is not None:
            return self.MZ[shapes]
        if self.zero_memory is None or self.zero_key is None:
            return None
        return self.zero_memory[self.zero_key[shapes]]

    def row_terms(self, space: Space) -> RowTerms:
        """The RowTerms of the space's rows, in its order."""
        if self.rows is not None:
            return self.rows if self.key is None else self.rows.take(self.key)
        assert self.key is not None and self.first is not None
        return terms_of_rows(space, self.first).take(self.key)

    def restrict(self, space: Space, rows: np.ndarray) -> Costed:
        """For ``space.restrict(rows)`` (``rows`` ascending): those rows' terms (costed once per
        key where not kept) and the shapes they use."""
        mz = self.shape_memory(distinct(space.sk_shape[rows]))
        if self.rows is not None:
            index = rows if self.key is None else self.key[rows]
            return Costed(self.quantum_s, self.rows.take(index), mz)
        assert self.key is not None and self.first is not None
        keys, index = np.unique(self.key[rows], return_inverse=True)
        return Costed(self.quantum_s, terms_of_rows(space, self.first[keys]).take(index), mz)

    def windows_of(self, rows: np.ndarray) -> list | None:
        """Each stage's compute windows without recompute of the rows ``rows``; None where "none"
        is not searched."""
        if self.key is None:
            assert self.rows is not None
            w = self.rows.windows
            index = rows
        else:
            w, index = self.windows, self.key[rows]
        return None if w is None else [{n: a[index] for n, a in st.items()} for st in w]


# The (S,K) x r terms read a row's microbatch count and its shape's degrees, but the data unit
# (dp x fsdp) only whole: through the tokens of a microbatch. Rows alike in these (they differ in
# how ZeRO shards the unit) share their terms, which are costed once per key.
TERM_DEGREES = ("tp", "pp", "cp", "v", "ep", "etp", "sched", "lf", "ll", "cpf", "cpa", "spl")


def shape_term_keys(space: Space) -> np.ndarray:
    """Each shape's index among the distinct shapes of the (S,K) x r terms (``TERM_DEGREES``)."""
    sh = space.shapes
    degrees = np.stack([sh.units, *(getattr(sh, name) for name in TERM_DEGREES)], axis=1)
    return distinct_rows(degrees)[1]


def term_keys(space: Space) -> tuple[np.ndarray, np.ndarray]:
    """(one (S,K) row per distinct key of the (S,K) x r terms, each row's index among the keys)."""
    shape_key = shape_term_keys(space)
    return distinct_rows(np.stack([shape_key[space.sk_shape], space.sk_k], axis=1))


def row_terms(space: Space) -> RowTerms:
    """The (S,K) x r terms of every row, costed once per key (``term_keys``)."""
    first, key = term_keys(space)
    return terms_of_rows(space, first).take(key)


@shared_keys()  # each key array of the rows compacted once
def terms_of_rows(space: Space, rows: np.ndarray) -> RowTerms:
    """The (S,K) x r terms of the rows ``rows``: keys as a column and a row, so a term of (S,K)
    alone is costed once per row."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    compute = compute_of_rows(space, rows)
    sh, k, r, grid = compute.sh, compute.k, compute.r, compute.grid
    mb: list = []
    hosted: list = []
    for first, last in _stage_flags(sh).values():
        items = terms.memory_by_microbatch(
            model, workload, sh, k, r, first, last, space.sequence_parallel
        )
        mb.append(
            [grid(sum(terms.moment_bytes(items, name).values(), 0.0 * k)) for name in MOMENT_NAMES]
        )
        hosted.append(grid(items["host/offloaded"] + 0.0 * k))
    first_stage = compute.first_stage
    win = {
        name: grid(x)
        for name, x in terms.step_windows(model, workload, acc, sh, first_stage, k).items()
    }
    layers = terms.layers_per_stage(model, sh)
    return RowTerms(
        compute_s=compute.compute_s,
        busy_s=compute.busy_s,
        backward_s=grid(compute.mult * layers * first_stage["window/bwd_layer"]),
        zero2_window_s=grid((k - 1) * layers * terms.zero2_window_layer(workload, first_stage)),
        reduce_window_s=win["reduce"],
        reduce_early_window_s=win["reduce_early"],
        gather_window_s=win["gather"][:, 0],
        gather_late_window_s=win["gather_late"][:, 0],
        memory_bytes=mb,
        host_bytes=hosted,
        paced=compute.paced,
        windows=compute.windows,
    )


@dataclass
class RowCompute:
    """The compute part of the (S,K) x r terms of some rows (``compute_of_rows``): RowTerms'
    compute_s, busy_s and windows, and what ``terms_of_rows`` costs the rest from (the rows'
    shapes ``sh``, microbatch counts ``k`` ([rows, 1]), the policies' codes ``r`` ([1, r]), the
    broadcast to [rows, r] ``grid``, the step multiplier ``mult``, the first stage's items of
    ``costs.terms.compute_per_microbatch``)."""

    compute_s: list  # [st] -> [sk, r]
    busy_s: list  # [st] -> [sk, r]
    windows: list | None
    sh: terms.Shapes
    k: np.ndarray
    r: np.ndarray
    grid: Any
    mult: Any
    first_stage: dict
    paced: np.ndarray  # [sk, 1] costs.terms.paced_share


@shared_keys()
def compute_of_rows(space: Space, rows: np.ndarray) -> RowCompute:
    """Each stage's compute and busy time, and the compute windows without recompute, of the
    rows ``rows`` (``terms_of_rows``' own, without the memory and step windows)."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    space.shapes.layer_split(model)  # once per shape; every grid takes its rows
    if model.moe is not None:
        space.shapes.moe_layer_split(model)
    n_sk, codes = len(rows), space.recompute_codes
    sh, k, r = space.shapes.take(space.sk_shape[rows, None]), space.sk_k[rows, None], codes[None, :]
    read_only(sh, k)  # keys of per_key, compacted once (shared_keys)

    def grid(x):
        return np.broadcast_to(x, (n_sk, len(codes)))

    mult = terms.step_multiplier(sh, k, terms.backward_split(model, workload), model)
    a: list = []
    busy: list = []
    windows: list = []
    first_stage: dict = {}
    none = np.flatnonzero(codes == 0)  # the column of recompute "none", if searched
    for _first, last in _stage_flags(sh).values():
        c = terms.compute_per_microbatch(
            model, workload, acc, sh, k, r, last, space.sequence_parallel
        )
        compute = sum(v for key, v in c.items() if key.startswith("compute/"))
        a.append(grid(mult * (compute + acc.microbatch_overhead_s * sh.v)))
        busy.append(grid(k * compute))
        first_stage = first_stage or c
        windows.append({key: grid(v)[:, none] for key, v in c.items() if key.startswith("window/")})
    return RowCompute(
        compute_s=a,
        busy_s=busy,
        windows=windows if len(none) else None,
        sh=sh,
        k=k,
        r=r,
        grid=grid,
        mult=mult,
        first_stage=first_stage,
        paced=np.broadcast_to(terms.paced_share(sh, k, mult), (n_sk, 1)),
    )


def zero_memory_bytes(space: Space, shapes: np.ndarray | None = None) -> list:
    """Memory by ZeRO stage and offload per shape (of the shapes ``shapes``, default all):
    [first stage, other stages][moment] -> [s, z] bytes."""
    model, workload, n_z = space.model, space.workload, space.num_zero
    shapes = np.arange(space.num_shapes) if shapes is None else shapes
    sh_z = space.shapes.take(shapes[:, None])
    z_row, f_row = space.zero_columns(np.arange(n_z)[None, :])
    out = []
    for first in (True, False):
        items = terms.memory_by_zero(model, workload, sh_z, z_row, first, f_row)
        out.append(
            [
                np.broadcast_to(
                    sum(terms.moment_bytes(items, name).values(), 0.0 * z_row),
                    (len(shapes), n_z),
                )
                for name in MOMENT_NAMES
            ]
        )
    return out


def optimizer_seconds(space: Space) -> np.ndarray:
    """The optimizer step per shape, ZeRO stage and offload: [s, z] seconds."""
    sh_z = space.shapes.take(np.arange(space.num_shapes)[:, None])
    z_row, f_row = space.zero_columns(np.arange(space.num_zero)[None, :])
    acc = space.cluster.accelerator
    opt = terms.optimizer_time(space.model, space.workload, acc, sh_z, z_row, f_row)
    return np.broadcast_to(opt, (space.num_shapes, space.num_zero))


def host_tables(space: Space, rt: RowTerms) -> tuple[np.ndarray, np.ndarray, int]:
    """Host memory per device in KiB: the offloaded state [s, z, st], the offloaded activations
    [sk, r, st], and what one device may use: the node's memory over the devices sharing it."""
    model, workload, cluster = space.model, space.workload, space.cluster
    sh_z = space.shapes.take(np.arange(space.num_shapes)[:, None])
    z_row, f_row = space.zero_columns(np.arange(space.num_zero)[None, :])
    state = [
        np.broadcast_to(
            terms.memory_by_zero(model, workload, sh_z, z_row, first, f_row)[
                "host/offloaded_state"
            ],
            (space.num_shapes, space.num_zero),
        )
        for first in (True, False)
    ]
    memory = cluster.host_memory_bytes_per_node
    per_device = np.inf if memory is None else memory / cluster.devices_per_node
    capacity = int(per_device // KIB) if np.isfinite(per_device) else int(NEVER)
    return kib(np.stack(state, axis=-1)), kib(np.stack(rt.host_bytes, axis=-1)), capacity


def fetching_columns(space: Space) -> np.ndarray | None:
    """[z]: the zero_mask columns whose offload fetches the weights from the host; None when none does."""
    fetches = memory.offloaded_by_code("weights")[space.zero_columns(np.arange(space.num_zero))[1]]
    return fetches if fetches.any() else None


def quanta(x, quantum_s: float) -> np.ndarray:
    """Seconds as integer quanta, rounded."""
    return np.rint(np.asarray(x, dtype=np.float64) / quantum_s).astype(np.int64)


def kib(x) -> np.ndarray:
    """Bytes as KiB, rounded up (a table never says a layout fits that ``estimate`` rejects)."""
    return np.ceil(np.asarray(x, dtype=np.float64) / KIB).astype(np.int64)


def memory_table(memory_bytes: list) -> np.ndarray:
    """[st][moment] -> [..] bytes as one [.., st, moment] KiB table."""
    return kib(np.stack([np.stack(m, axis=-1) for m in memory_bytes], axis=-2))


def fits_by_row(
    space: Space, MZ: np.ndarray, MB: np.ndarray, capacity_kib: int, chunk: int = 1 << 16
) -> np.ndarray:
    """[sk, r]: whether (row, recompute) fits in memory with some allowed ZeRO stage, at every
    stage and moment (``chunk`` rows and one ZeRO stage at a time: [sk, r, st, moment] bounds
    the peak memory)."""
    fits_r: np.ndarray = np.zeros(MB.shape[:2], dtype=bool)
    for start in range(0, len(space.sk_shape), chunk):
        rows = slice(start, start + chunk)
        s = space.sk_shape[rows]
        for z in range(MZ.shape[1]):
            allowed = space.zero_mask[s, z]
            if allowed.any():
                fits = (MZ[s, z][:, None] + MB[rows] <= capacity_kib).all(axis=(2, 3))
                fits_r[rows] |= fits & allowed[:, None]
    return fits_r


# A space of at least this many chunks of ``compute_bounds`` has its chunks bounded in parallel (forked
# processes, ``core.parallel``, writing their results into memory they share with this one): a million
# rows and more, where the fork costs a few hundredths of the work; the main job's space is one chunk.
PARALLEL_CHUNKS = 4


@dataclass
class ChunkBound:
    """One chunk's part of ``compute_bounds`` per row: for its rows that may fit at all (``live``,
    indices from its start) whether some policy may fit and the least compute of one that may; the
    least compute of any key and policy (its keys' busy times and windows go straight to ``BoundsOut``)."""

    live: np.ndarray  # the chunk's rows that may fit (indices from its start)
    fits: np.ndarray  # [live] some policy may fit
    least_s: np.ndarray  # [live] the least slowest-stage compute of a policy that may fit
    least_compute: float  # the least compute of any key and policy (s): the quantum's
    rows: RowTerms | None  # the costed keys' terms (``keep_rows``: where the space is one chunk)


@dataclass
class BoundsOut:
    """Where ``compute_bounds`` gathers its chunks' results: per row (some policy may fit, the least
    compute of one that may) and per key (the least busy time, the windows), in memory a forked worker
    writes into as the parent reads it (``shared``: anonymous shared maps), each chunk at its rows and keys."""

    fits: np.ndarray  # [rows]
    least_s: np.ndarray  # [rows]
    least_busy: np.ndarray  # [keys]
    shared: bool = False
    windows: list | None = None  # [st] -> {name: [keys, 1]}, shaped by the first chunk's
    rows: RowTerms | None = None  # the one chunk's terms (``ChunkBound.rows``)

    @classmethod
    def of(cls, n_rows: int, n_keys: int, shared: bool) -> BoundsOut:
        def array(shape, dtype) -> np.ndarray:
            return _shared_array(shape, dtype) if shared else np.zeros(shape, dtype=dtype)

        return cls(
            array(n_rows, bool), array(n_rows, np.float64), array(n_keys, np.float64), shared
        )

    def write(self, part: ChunkBound, rows: slice) -> float:
        """Put ``part`` (the chunk of rows ``rows``) in place; its least compute."""
        self.fits[rows][part.live] = part.fits
        self.least_s[rows][part.live] = part.least_s
        self.rows = part.rows
        return part.least_compute

    def write_keys(self, at: np.ndarray, part: RowTerms | RowCompute) -> None:
        """The least busy time and the windows of the keys ``at`` (indices across the chunks), from
        their costed terms ``part``; the windows' arrays are made at the first call that has them
        (the first chunk's, in the parent: every chunk has the same names)."""
        self.least_busy[at] = np.maximum(*part.busy_s).min(axis=1)
        if part.windows is None:
            return
        if self.windows is None:
            n_keys = len(self.least_busy)
            self.windows = [
                {
                    name: _shared_array((n_keys, 1), np.float64)
                    if self.shared
                    else np.empty((n_keys, 1))
                    for name in st
                }
                for st in part.windows
            ]
        for kept, given in zip(self.windows, part.windows, strict=True):
            for name, w in given.items():
                kept[name][at] = w


def _shared_array(shape, dtype) -> np.ndarray:
    """A zeroed array in an anonymous shared map: what a forked worker writes into it, its parent reads."""
    import mmap  # large spaces only

    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(
        mmap.mmap(-1, max(size, 1)), dtype=dtype, count=int(np.prod(shape))
    ).reshape(shape)


def compute_bounds(
    space: Space, deadline: float | None = None, chunk: int = 1 << 18
) -> tuple[np.ndarray, Costed]:
    """Per (S,K) row a valid lower bound of its step time in quanta, and what was costed for it.
    The bound: the least, over the recompute policies that may fit, of the slowest stage's
    compute, plus the least optimizer step of an allowed ZeRO stage and the step overhead (every
    other term of ``costs.step`` is at least 0); NEVER where no policy may fit. A policy may fit
    when each stage's memory at each moment fits with that moment's least per-shape memory over
    the allowed ZeRO stages: a necessary condition, a fraction of the cost of ``fits_by_row``.
    Costs the (S,K) x r terms (once per key of ``term_keys`` in each chunk of ``chunk`` rows: the
    rows of one key mostly sit together, the space's rows being ordered by tp, pp and cp first)
    and the per-shape memory only, keeping of each chunk what the bound and ``Costed`` need: the
    rest of the tables is left for the rows the bound keeps. The least compute is kept in seconds
    and rounded once the quantum (the least of every chunk's) is known: rounding is monotone, so
    the least of the rounded values is the rounded least. From ``PARALLEL_CHUNKS`` chunks on, the
    first chunk is bounded here and the others over the CPUs (``core.parallel.parallel_map``): the
    same values, each chunk at its rows and keys (``BoundsOut``)."""
    n_rows = len(space.sk_k)
    least_mz, zero_memory, zero_key = least_zero_memory(space)
    # [s, st, moment] KiB: the room the least per-shape memory leaves at each stage and moment
    room = int(capacity_bytes(space.cluster, space.workload) // KIB) - least_mz
    room_by_moment = np.ascontiguousarray(room.transpose(1, 2, 0))  # [st, moment, s]
    runs = _row_chunks(space, chunk)
    # rows whose shape's least memory by ZeRO stage alone exceeds the capacity at some stage and
    # moment: no policy fits (the memory by microbatch is at least 0). Of several chunks, keys of
    # such rows alone cost their compute only (the quantum, busy times and windows are every
    # key's); one chunk costs every key's terms, which Costed keeps
    hopeless = np.asarray((room < 0).any(axis=(1, 2))) & (len(runs) > 1)
    shape_key = shape_term_keys(space)
    # each chunk's keys (a row of each, each row's), numbered across the chunks from ``at``
    keyed = [
        distinct_rows(np.stack([shape_key[space.sk_shape[a:b]], space.sk_k[a:b]], axis=1))
        for a, b in runs
    ]
    at = np.cumsum([0] + [len(first) for first, _ in keyed])
    n_keys = int(at[-1])
    key = np.empty(n_rows, dtype=np.int64)  # each row's key, numbered across the chunks
    first_row = np.empty(n_keys, dtype=np.int64)
    for (a, b), (first, local), k0 in zip(runs, keyed, at[:-1], strict=False):
        key[a:b] = k0 + local
        first_row[k0 : k0 + len(first)] = a + first
    parallel = len(runs) >= PARALLEL_CHUNKS
    out = BoundsOut.of(n_rows, n_keys, shared=parallel)
    space.shapes.layer_split(space.model)  # the shapes' caches, filled before any fork
    if space.model.moe is not None:
        space.shapes.moe_layer_split(space.model)

    def bound(i: int) -> float:
        part = _chunk_bound(
            space,
            runs[i],
            keyed[i],
            room_by_moment,
            hopeless,
            deadline,
            (out, int(at[i])),
            keep_rows=len(runs) == 1,
        )
        return out.write(part, slice(*runs[i]))

    least = [bound(0)] if runs else []  # the first here: it shapes the windows
    if parallel:
        from layoutsearch.core.parallel import parallel_map  # large spaces only (import time)

        least += parallel_map(bound, range(1, len(runs)))
    else:
        least += [bound(i) for i in range(1, len(runs))]
    quantum = RowTerms.quantum_of(min(least) if n_rows else None)
    opt = np.where(space.zero_mask, quanta(optimizer_seconds(space), quantum), NEVER).min(axis=1)
    overhead = int(quanta(space.cluster.accelerator.step_overhead_s, quantum))
    fits = out.fits
    least_q = quanta(np.where(fits, out.least_s, 0.0), quantum)
    return (
        np.where(fits, least_q + opt[space.sk_shape] + overhead, NEVER),
        Costed(
            quantum,
            rows=out.rows if len(runs) == 1 else None,  # one chunk: its terms are every key's
            key=key,
            first=first_row,
            least_busy_s=out.least_busy,
            windows=out.windows,
            zero_key=zero_key,
            zero_memory=zero_memory,
        ),
    )


def _chunk_bound(
    space: Space,
    run: tuple[int, int],
    keyed: tuple[np.ndarray, np.ndarray],
    room_by_moment: np.ndarray,
    hopeless: np.ndarray,
    deadline: float | None,
    keys_to: tuple[BoundsOut, int],
    keep_rows: bool = False,
) -> ChunkBound:
    """``compute_bounds``' work on the rows ``start:stop`` of ``run``, whose keys of the (S,K) x r terms
    are ``keyed`` (a row of each key from ``start``, each row's key): each key costed once (only the compute
    of keys whose rows cannot fit), its busy time and windows written to ``keys_to`` (the BoundsOut and the
    chunk's first key's index there), and what the bound and ``Costed`` keep per row (the costed terms
    themselves with ``keep_rows``)."""
    n_r = len(space.recompute_codes)
    start, stop = run
    s = space.sk_shape[start:stop]
    first, local = keyed
    live = np.flatnonzero(~hopeless[s])  # the chunk's rows that may fit
    costed = np.zeros(len(first), dtype=bool)  # keys of such rows: their terms are costed
    costed[local[live]] = True
    # [keys, r]; a row's are its key's
    rt = terms_of_rows(space, start + first[costed]) if len(live) else None
    rest = compute_of_rows(space, start + first[~costed]) if not costed.all() else None
    _check(deadline)
    fits = np.zeros(len(live), dtype=bool)
    least_s = np.zeros(len(live))
    parts: list[tuple[np.ndarray, RowTerms | RowCompute]] = []
    if rest is not None:
        parts.append((np.flatnonzero(~costed), rest))
    if rt is not None:
        parts.append((np.flatnonzero(costed), rt))
        live_key = (np.cumsum(costed) - 1)[local[live]]  # among the costed keys
        # policy-major ([r, rows]): the reductions over the policies run along the rows
        compute = step.paced_max(rt.compute_s[0], rt.compute_s[1], rt.paced).T  # [r, keys]
        may_fit = np.ones((n_r, len(live)), dtype=bool)  # [r, rows that may fit]
        for st, moments in enumerate(rt.memory_bytes):
            for mi, row_bytes in enumerate(moments):
                need = np.ascontiguousarray(kib(row_bytes).T)  # [r, keys]
                may_fit &= need.take(live_key, axis=1) <= room_by_moment[st, mi][s[live]]
        fits = np.asarray(may_fit.any(axis=0))
        least_s = np.where(
            may_fit, np.ascontiguousarray(compute).take(live_key, axis=1), np.inf
        ).min(axis=0)
    out, key0 = keys_to
    least_compute = np.inf
    for at_keys, part in parts:
        least_compute = min(least_compute, float(np.maximum(*part.compute_s).min()))
        out.write_keys(key0 + at_keys, part)
    return ChunkBound(
        live=live,
        fits=fits,
        least_s=least_s,
        least_compute=least_compute,
        rows=rt if keep_rows else None,
    )


def _row_chunks(space: Space, chunk: int) -> list[tuple[int, int]]:
    """(start, stop) of consecutive runs of at most ``chunk`` rows, each ending where the rows'
    (tp, pp, cp) changes when one does inside it: the rows of a key of the (S,K) x r terms share
    these, so in the space's order (tp, pp, cp first) a key's rows fall in one run."""
    sh, n = space.shapes, len(space.sk_k)
    block = distinct_rows(np.stack([sh.tp, sh.pp, sh.cp], axis=1))[1][space.sk_shape]
    edges = np.flatnonzero(block[1:] != block[:-1]) + 1  # where a block starts
    out, start = [], 0
    while start < n:
        stop = min(start + chunk, n)
        if stop < n:
            inside = edges[(edges > start) & (edges <= stop)]
            stop = int(inside[-1]) if len(inside) else stop
        out.append((start, stop))
        start = stop
    return out


# The S x z terms (memory by ZeRO stage, the optimizer step) read every field of a shape but the
# CP flavour and its all-to-all degree, which only the CP collectives read: shapes alike in the
# rest share them (``least_zero_memory`` costs them once per key).
ZERO_TERM_FIELDS = tuple(
    f for f in (*terms.SHAPE_KEYS, *terms.EXTRA_KEYS) if f not in ("cpf", "cpa")
)


def zero_term_keys(space: Space) -> tuple[np.ndarray, np.ndarray]:
    """(one shape per distinct key of the S x z terms (``ZERO_TERM_FIELDS``), each shape's index
    among the keys)."""
    sh = space.shapes
    return distinct_rows(np.stack([getattr(sh, f) for f in ZERO_TERM_FIELDS], axis=1))


def least_zero_memory(
    space: Space, chunk: int = 1 << 16
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([s, st, moment] KiB: each shape's least memory by ZeRO stage over its allowed columns
    (``zero_mask``); the memory by ZeRO stage of each key ([keys, z, st, moment] KiB); each
    shape's key): costed once per key (``zero_term_keys``), ``chunk`` keys at a time, and the
    least taken once per key and allowed columns. Up to ``chunk`` shapes, each its own key."""
    if space.num_shapes <= chunk:  # few: finding the keys would cost what it saves
        shapes = np.arange(space.num_shapes)
        mz = memory_table(zero_memory_bytes(space, shapes))
        least = np.where(space.zero_mask[:, :, None, None], mz, NEVER).min(axis=1)
        return least.reshape(space.num_shapes, 2, len(MOMENT_NAMES)), mz, shapes
    first, key = zero_term_keys(space)
    mz = np.empty((len(first), space.num_zero, 2, len(MOMENT_NAMES)), dtype=np.int64)
    for start in range(0, len(first), chunk):
        mz[start : start + chunk] = memory_table(
            zero_memory_bytes(space, first[start : start + chunk])
        )
    # the least over the allowed columns, once per distinct (key, allowed columns)
    columns = space.zero_mask.astype(np.int64) @ (1 << np.arange(space.num_zero, dtype=np.int64))
    pair, index = distinct_rows(np.stack([key, columns], axis=1))
    allowed = space.zero_mask[pair][:, :, None, None]
    return np.where(allowed, mz[key[pair]], NEVER).min(axis=1)[index], mz, key


def exposed_bounds(
    space: Space, rows: np.ndarray, costed: Costed, chunk: int = 1 << 17
) -> np.ndarray:
    """Per row of ``rows`` (the space's, ascending) a valid lower bound in quanta of the exposed
    communication every completion of the row pays on top of ``compute_bounds``' bound: the
    least, over the shape's allowed axis orders o, of the lesser of the two stages' exposed TP,
    CP and EP collectives (build_tables' tp_s + cp_s + ep_s of that stage) plus the pipeline's
    fill and drain sends (pp_sends_s). Valid: by ``costs.step`` a candidate (r, z, o) of the row
    takes stage + the EXPOSED parts (each >= 0) + pp_sends(o) + optimizer(z) + overhead (+ host
    fetches >= 0), and the slowest stage is at least either stage's compute(r) + tp(o) + cp(o) +
    ep(o) (its rerun and ZeRO-3 terms are >= 0), so at least max over the stages of compute(r)
    plus the lesser stage's collectives; compute_bounds' bound takes the least compute over r,
    optimizer over z and the overhead. The collectives are the tables' own terms
    (``stage_collectives``, ``terms.pipeline_sends``) rounded alike, less one quantum for each of
    the four rounded terms (a float path differing in the last bit cannot lift it above them).
    Costs the collectives of ``rows`` alone, ``chunk`` rows at a time."""
    model, workload = space.model, space.workload
    q = costed.quantum_s
    split = terms.backward_split(model, workload)
    out = np.empty(len(rows), dtype=np.int64)
    n_o = len(space.orders)
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        part_windows = costed.windows_of(part)
        shape_idx = space.sk_shape[part]
        sh, k = space.shapes.take(shape_idx[:, None]), space.sk_k[part, None]
        co = _coeff_rows(space, shape_idx[:, None], np.arange(n_o)[None, :], SHARD_GROUPS)
        mult = terms.step_multiplier(sh, k, split, model)
        stages: list = []
        cp_q: np.ndarray | int = 0  # the first stage's CP collectives, both stages' (as cp_s)
        for st, (_first, last) in _stage_flags(sh).items():
            windows = stage_windows(space, part_windows, sh, k, st, last)
            tp, cp, ep = stage_collectives(space, sh, k, co, windows, last)
            if st == 0:
                cp_q = quanta(mult * cp["base"], q)
            stages.append(quanta(mult * tp["base"], q) + cp_q + quanta(mult * ep["base"], q))
        pp = quanta(terms.pipeline_sends(model, workload, space.cluster.accelerator, sh, k, co), q)
        least = np.minimum(*np.broadcast_arrays(*stages)) + pp  # [rows, o]
        allowed = space.order_mask[shape_idx]
        out[start : start + chunk] = np.where(allowed, least, NEVER).min(axis=1)
    return np.maximum(0, out - 4)


def regather_table(
    space: Space, sh_o: terms.Shapes, dense_gathers: np.ndarray, q
) -> np.ndarray | None:
    """[sk, r, o] quanta of ZeRO-3's per-layer gathers (``dense_gathers``, [sk, o] seconds over the step) that a
    recomputed forward repeats, each recompute policy's share of them (``terms.zero3_regathered_share``); None
    where the framework repeats none."""
    share = terms.zero3_regathered_share(space.model, space.workload, sh_o.tp)
    if not share.any():
        return None
    by_r = np.moveaxis(share[space.recompute_codes][..., 0], 0, 1)  # [sk, r]
    return q(by_r[:, :, None] * dense_gathers[:, None, :])


def build_tables(
    space: Space, deadline: float | None = None, costed: Costed | None = None
) -> Tables:
    """Evaluate every cost term once per key it depends on, then quantise (in the quantum of
    ``costed``, what ``compute_bounds`` costed for this space, else ``RowTerms.quantum_s``)."""
    model, workload, acc = space.model, space.workload, space.cluster.accelerator
    n_sk, codes, n_o = len(space.sk_k), space.recompute_codes, len(space.orders)
    rt = row_terms(space) if costed is None else costed.row_terms(space)
    _check(deadline)  # between grids: a time limit stops the search at most one grid late
    # ---- (S,K) x o: likewise, a term of (S,K) alone (the compute windows) once per row
    sh_o, k_o = space.shapes.take(space.sk_shape[:, None]), space.sk_k[:, None]
    co = _coeff_rows(space, space.sk_shape[:, None], np.arange(n_o)[None, :])

    def grid_o(x):
        return np.broadcast_to(x, (n_sk, n_o))

    mult_o = terms.step_multiplier(sh_o, k_o, terms.backward_split(model, workload), model)
    tp_st, fx_st, ep_st, copies_st, accumulate_st = [], [], [], [], []
    fc = terms.fsdp_collectives(model, workload, acc, sh_o, co)
    for st, (_first, last) in _stage_flags(sh_o).items():
        c = stage_windows(space, rt.windows, sh_o, k_o, st, last)
        tp, cp, ep = stage_collectives(space, sh_o, k_o, co, c, last)
        busy = terms.shard_link_traffic(tp, cp, fc, co)
        tp_st.append(grid_o(mult_o * tp["base"]))
        ep_st.append(grid_o(mult_o * ep["base"]))
        fixed = terms.fsdp_exposed_fixed(
            model, acc, sh_o, fc, c["window/fwd_layer"], c["window/logits"], True, busy["fwd"], last
        )
        fx_st.append(grid_o(mult_o * (fixed["forward"] + fixed["vocab"])))
        copies_st.append(np.broadcast_to(mult_o * fixed["copies"], (n_sk, 1))[:, 0])
        accumulate_st.append(
            [
                np.broadcast_to(
                    mult_o * terms.grad_accumulation(model, workload, acc, sh_o, last, sharded),
                    (n_sk, 1),
                )[:, 0]
                for sharded in (False, True)
            ]
        )
        if st == 0:
            layers_o = mult_o * terms.layers_per_stage(model, sh_o)
            x = grid_o(layers_o * (fc["gather_layer"] + fc["reduce_layer"] + busy["bwd"]))
            dense_gathers = grid_o(layers_o * (fc["gather_layer"] - fc["gather_experts_layer"]))
            rcon = grid_o(terms.reduction_link_traffic(model, workload, acc, sh_o, tp, cp, co))
            x2 = grid_o(
                (k_o - 1) * terms.zero2_microbatch_traffic(model, workload, acc, sh_o, co, rcon)
            )
            tpf = grid_o(mult_o * tp["rerun"])
            epf = grid_o(mult_o * ep["rerun"])
            cps, cpf = grid_o(mult_o * cp["base"]), grid_o(mult_o * cp["rerun"])
    pp = grid_o(terms.pipeline_sends(model, workload, acc, sh_o, k_o, co))
    _check(deadline)
    # ---- S x z (x o)
    n_s, n_z = space.num_shapes, space.num_zero
    s_col = np.arange(n_s)[:, None]
    z_row = space.zero_columns(np.arange(n_z)[None, :])[0]  # the collectives read the stage alone

    def grid_z(x, *more):
        return np.broadcast_to(x, (n_s, n_z, *more))

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
    # the shares of the chunks but the last (costs.terms.chunk_shares), by shape and by row
    early_s, late_s = (x[:, None, None] for x in terms.chunk_shares(workload, acc, space.shapes))
    red_last, red_early = terms.split_by_chunks(red, early_s)
    gather_first, gather_late = terms.split_by_chunks(steps["gather/zero"], late_s)
    busy_last, busy_others = (grid_o(x) for x in terms.window_shares(workload, acc, sh_o, k_o))
    sh_z = space.shapes.take(s_col)
    microbatch_zero = np.where(sh_z.shards > 1, np.where(z_row >= 2, z_row, 0), 0)  # [s, z]
    v_w, v_x = roofline.gather_volumes_bytes(
        model.d_model,
        model.d_ff,
        workload.global_batch_tokens,
        space.cluster.num_devices,
        space.shapes.tp,
    )

    quantum = rt.quantum_s() if costed is None else costed.quantum_s

    def q(x):
        return quanta(x, quantum)

    nr = len(codes)
    reduce_interference, gather_interference = terms.step_interference(acc, steps)
    tables = Tables(
        quantum_s=quantum,
        capacity_kib=int(capacity_bytes(space.cluster, workload) // KIB),
        step_overhead_s=int(q(acc.step_overhead_s)),
        eta=acc.overlap_interference,
        eta_pct=terms.interference_pct(acc),
        slice_wait=terms.slice_wait_share(space.cluster.num_slices),
        compute_s=q(np.stack(rt.compute_s, axis=-1)).reshape(n_sk, nr, 2),
        busy_s=q(np.maximum(*rt.busy_s)).reshape(n_sk, nr),
        backward_s=q(rt.backward_s).reshape(n_sk, nr),
        zero2_window_s=q(rt.zero2_window_s).reshape(n_sk, nr),
        reduce_window_s=q(rt.reduce_window_s).reshape(n_sk, nr),
        reduce_early_window_s=q(rt.reduce_early_window_s).reshape(n_sk, nr),
        gather_window_s=q(rt.gather_window_s),
        gather_late_window_s=q(rt.gather_late_window_s),
        MB=memory_table(rt.memory_bytes).reshape(n_sk, nr, 2, len(MOMENT_NAMES)),
        tp_s=q(np.stack(tp_st, axis=-1)).reshape(n_sk, n_o, 2),
        tp_rerun_s=q(tpf).reshape(n_sk, n_o),
        cp_s=q(cps),
        cp_rerun_s=q(cpf),
        ep_s=q(np.stack(ep_st, axis=-1)).reshape(n_sk, n_o, 2),
        ep_rerun_s=q(epf).reshape(n_sk, n_o),
        fsdp_fixed_s=q(np.stack(fx_st, axis=-1)).reshape(n_sk, n_o, 2),
        zero_copies_s=q(np.stack(copies_st, axis=-1)).reshape(n_sk, 2),
        accumulate_s=q(np.stack([np.stack(a, axis=-1) for a in accumulate_st], axis=1)),
        zero2_copies_s=q(
            np.broadcast_to((k_o - 1) * terms.zero2_copies(model, workload, acc, sh_o), (n_sk, 1))
        ).reshape(n_sk),
        fsdp_backward_s=q(x).reshape(n_sk, n_o),
        fsdp_regather_s=regather_table(space, sh_o, dense_gathers, q),
        fsdp_reduce_backward_s=q(x2).reshape(n_sk, n_o),
        pp_sends_s=q(pp).reshape(n_sk, n_o),
        reduce_link_busy_s=q(rcon * busy_last).reshape(n_sk, n_o),
        reduce_early_link_busy_s=q(rcon * busy_others).reshape(n_sk, n_o),
        reduce_s=q(red_last).reshape(n_s, n_z, n_o),
        reduce_early_s=q(red_early).reshape(n_s, n_z, n_o),
        zero_gather_s=q(gather_first).reshape(n_s, n_z, n_o),
        gather_late_s=q(gather_late).reshape(n_s, n_z, n_o),
        reduce_interference_s=q(reduce_interference).reshape(n_s, n_z, n_o),
        gather_interference_s=q(gather_interference).reshape(n_s, n_z, n_o),
        optimizer_s=q(optimizer_seconds(space)).reshape(n_s, n_z),
        zero_step_copies_s=q(
            np.broadcast_to(terms.zero_step_copies(model, workload, acc, sh_z, z_row), (n_s, n_z))
        ),
        MZ=(
            memory_table(zero_memory_bytes(space))
            if costed is None or (kept_mz := costed.shape_memory()) is None
            else kept_mz
        ).reshape(n_s, n_z, 2, len(MOMENT_NAMES)),
        microbatch_zero=microbatch_zero,
        VOLUME=kib(v_w + v_x),
    )
    if space.offload_codes.any():
        tables.HZ, tables.HB, tables.host_kib = host_tables(space, rt)
    fetches = fetching_columns(space)
    if fetches is not None:
        sh_k = space.shapes.take(space.sk_shape)
        fetch = terms.param_fetch_time(model, workload, acc, sh_k, space.sk_k)
        tables.param_fetch_s, tables.fetches = q(fetch), fetches
    work = memory.recompute_arrays(model)
    _check(deadline)
    tables.paced = rt.paced[:, 0]
    tables.STAGE0, tables.STAGE2, tables.STAGE3 = stage_parts(
        tables, work["tp"][codes], work["attention"][codes], work["moe"][codes]
    )
    return tables


def stage_parts(
    t: Tables, tp_rerun_by_r: np.ndarray, cp_rerun_by_r: np.ndarray, ep_rerun_by_r: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stages' critical path per (S,K,r,o) by ``step.slowest_stage``: without ZeRO collectives in the microbatches'
    backward, with ZeRO-2's and with ZeRO-3's (``Tables.microbatch_zero``); ZeRO-2's as STAGE0 where no
    candidate runs them."""
    experts = t.ep_s.any() or t.ep_rerun_s.any()  # a dense model's are all zero: left out

    def stage(st: int, zero: int) -> step.StageTerms:
        # without those collectives the formula multiplies the fsdp fields by zero: zeros cost nothing
        traffic = {3: t.fsdp_backward_s, 2: t.fsdp_reduce_backward_s}.get(zero)
        if traffic is not None:
            traffic = traffic[:, None, :]
            if zero == 3 and t.fsdp_regather_s is not None:
                traffic = traffic + t.fsdp_regather_s
        window = {3: t.backward_s, 2: t.zero2_window_s}.get(zero)
        return step.StageTerms(
            compute_s=t.compute_s[:, :, None, st],
            tp_s=t.tp_s[:, None, :, st],
            tp_rerun_s=t.tp_rerun_s[:, None, :],
            tp_rerun_fraction=tp_rerun_by_r[None, :, None],
            cp_s=t.cp_s[:, None, :],
            cp_rerun_s=t.cp_rerun_s[:, None, :],
            cp_rerun_fraction=cp_rerun_by_r[None, :, None],
            fsdp_fixed_s=t.fsdp_fixed_s[:, None, :, st] if zero == 3 else 0,
            fsdp_backward_s=traffic if traffic is not None else 0,
            backward_s=window[:, :, None] if window is not None else 0,
            microbatch_zero=int(zero > 0),
            zero_copies_s={
                3: t.zero_copies_s[:, None, None, st],
                2: t.zero2_copies_s[:, None, None],
            }.get(zero, 0),
            accumulate_s=t.accumulate_s[:, None, None, st, int(zero > 0)],
            eta=t.eta,
            slice_wait=t.slice_wait,
            ep_s=t.ep_s[:, None, :, st] if experts else None,
            ep_rerun_s=t.ep_rerun_s[:, None, :] if experts else 0.0,
            ep_rerun_fraction=ep_rerun_by_r[None, :, None] if experts else 0.0,
        )

    # a policy rerunning part of the forward's collectives makes fractions: round once
    def quanta(zero: int) -> np.ndarray:
        paced = t.paced[:, None, None]
        return np.rint(step.slowest_stage(stage(0, zero), stage(1, zero), paced)).astype(np.int64)

    stage0 = quanta(0)
    stage2 = quanta(2) if (t.microbatch_zero == 2).any() else stage0
    return stage0, stage2, quanta(3)


def step_terms(t: Tables, space: Space, sk, ri, z, o) -> step.StepTerms:
    """The once-per-step terms of ``costs.step`` for candidates (index arrays)."""
    s = space.sk_shape[sk]
    return step.StepTerms(
        reduce_s=t.reduce_s[s, z, o],
        reduce_link_busy_s=t.reduce_link_busy_s[sk, o],
        reduce_window_s=t.reduce_window_s[sk, ri],
        reduce_early_s=t.reduce_early_s[s, z, o],
        reduce_early_link_busy_s=t.reduce_early_link_busy_s[sk, o],
        reduce_early_window_s=t.reduce_early_window_s[sk, ri],
        reduce_interference_s=t.reduce_interference_s[s, z, o],
        zero_gather_s=t.zero_gather_s[s, z, o],
        gather_window_s=t.gather_window_s[sk],
        gather_late_s=t.gather_late_s[s, z, o],
        gather_late_window_s=t.gather_late_window_s[sk],
        gather_interference_s=t.gather_interference_s[s, z, o],
        pp_sends_s=t.pp_sends_s[sk, o],
        optimizer_s=t.optimizer_s[s, z],
        zero_step_copies_s=t.zero_step_copies_s[s, z],
        step_overhead_s=t.step_overhead_s,
        eta_pct=t.eta_pct,
    )


def stage_of(t: Tables, s, sk, ri, z, o):
    """The slowest stage's quanta of candidates (index arrays; ``s`` the shapes of the rows ``sk``): the
    STAGE table of the ZeRO collectives each runs in the microbatches."""
    zero = t.microbatch_zero[s, z]
    return np.where(
        zero == 3,
        t.STAGE3[sk, ri, o],
        np.where(zero == 2, t.STAGE2[sk, ri, o], t.STAGE0[sk, ri, o]),
    )


def assemble(t: Tables, space: Space, sk, ri, z, o) -> dict:
    """Quantised step time, peak memory (KiB), fit and gather volume of candidates (index arrays)."""
    s = space.sk_shape[sk]
    stage = stage_of(t, s, sk, ri, z, o)
    total = step.step_total(step_terms(t, space, sk, ri, z, o), stage)
    fetches, fetch_s = t.fetches, t.param_fetch_s
    if (
        fetches is not None and fetch_s is not None
    ):  # parameter offload's host fetches, a plain part
        total = total + fetch_s[sk] * fetches[z]
    mem = t.MZ[s, z] + t.MB[sk, ri]  # [.., st, moment]
    peak = mem.reshape(mem.shape[0], -1).max(axis=1) if mem.ndim > 2 else mem.max()
    fits = peak <= t.capacity_kib
    if t.HZ is not None and t.HB is not None:  # the host's memory, where state offload is searched
        fits = fits & (t.HZ[s, z] + t.HB[sk, ri] <= t.host_kib).all(axis=-1)
    return {
        "step": total,
        "peak": peak,
        "fits": fits,
        "volume": t.VOLUME[s],
        "value": objective_value(t, s, sk, ri, z, total),
    }


def objective_value(t: Tables, s, sk, ri, z, step_q):
    """The objective's integer value of candidates (index arrays; ``step_q`` their quantised
    step): the step, F[s, z] x step (time-to-train), or IDLE x step + DYNAMIC x busy (energy),
    busy = busy_s + optimizer_s."""
    if t.objective == "time-to-train":
        return t.factor[s, z] * step_q
    if t.objective == "energy":
        return t.idle_w * step_q + t.dynamic_w * (t.busy_s[sk, ri] + t.optimizer_s[s, z])
    return step_q
