"""estimate(problem, layout) -> Estimate: the itemised cost of one layout.

Evaluates the cost terms of ``costs.terms`` (the functions the search tabulates) at one
layout and adds them up with the step formula of ``costs.step`` (the one the search uses).
The structural rules come from the registry (``core.check``); memory is checked here, on the
peak this function computes, so every layout is costed once. An unplaced layout
(``axes=None``) gets the fastest placement of the cluster's axis orders, resolved once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from layoutsearch.core.arrays import read_only
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.frameworks import profile_of
from layoutsearch.core.placement import candidate_placements
from layoutsearch.core.problem import HasProblem, Problem
from layoutsearch.core.rules import Violation, cp_a2a_degree
from layoutsearch.core.specs import (
    CP_FLAVOUR_CODES,
    OFFLOADS,
    RECOMPUTE_CODES,
    SCHEDULE_CODES,
    Layout,
    MfuConvention,
)
from layoutsearch.core.units import GB
from layoutsearch.costs import flops, memory, params, step, terms


@dataclass(frozen=True, kw_only=True)
class Estimate(HasProblem):
    """Itemised result for one (problem, layout)."""

    problem: Problem
    layout: Layout
    params: dict[str, int]
    memory_bytes: dict[
        str, float
    ]  # worst stage: state, activations, temporary, peak, capacity, itemised
    memory_moments: dict[str, dict[str, float]]  # moment -> live arrays (worst stage)
    peak_moment: str
    worst_stage: int
    time_s: dict[
        str, float
    ]  # compute, exposed_comm, bubble, overhead, step, itemised with slash keys
    collectives: list[dict] = field(default_factory=list)
    step_time_s: float
    tokens_per_s: float
    mfu: float
    mfu_convention: str
    model_flops_per_step: float
    violations: list[Violation] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.memory_bytes["peak"] <= self.memory_bytes["capacity"]


def capacity_bytes(cluster, workload) -> float:
    """HBM (the workload's device memory variant, else the catalogue's) less the runtime reserve
    and the user's margin: what a layout's peak must fit in."""
    acc = cluster.accelerator
    hbm = acc.hbm_bytes if workload.hbm_bytes is None else workload.hbm_bytes
    return hbm - acc.runtime_reserve_bytes - workload.memory_margin_bytes


def estimate(
    problem: Problem,
    layout: Layout,
    mfu_convention: str = MfuConvention.model.value,
    strict: bool = True,
) -> Estimate:
    """Cost one layout. With ``strict`` a structural violation raises InvalidLayoutError."""
    if mfu_convention not in flops.MFU_CONVENTIONS:
        raise InvalidLayoutError(
            f"mfu convention '{mfu_convention}' is not one of {', '.join(flops.MFU_CONVENTIONS)}"
        )
    violations = check_layout(problem, layout)
    if violations and strict:
        raise InvalidLayoutError("; ".join(v.message for v in violations))
    if layout.placed:
        return _estimate_placed(problem, layout, mfu_convention, violations)
    options = [
        replace(layout, axes=p) for p in candidate_placements(problem.cluster, layout.all_degrees)
    ]
    if not options:
        raise InvalidLayoutError(
            f"degrees {layout.all_degrees} cannot be laid onto the axes "
            f"{' x '.join(f'{a.name}({a.size})' for a in problem.cluster.axes)} of {problem.cluster_name}"
        )
    costed = [_estimate_placed(problem, lay, mfu_convention, violations) for lay in options]
    return min(costed, key=lambda e: e.step_time_s)


def layout_terms(
    problem: Problem, layout: Layout
) -> tuple[step.StageTerms, step.StageTerms, step.StepTerms[float], float]:
    """The step formula's terms of one placed layout in seconds per step, as ``estimate()`` adds
    them up: the first stage's, the last stage's, the once-per-step ones and the share of the step a slower
    last stage paces (``step.slowest_stage``'s ``paced``)."""
    key, _, (first, last), _, t = _costed(problem, layout, with_memory=False)
    return first, last, t, key.paced


def step_seconds(problem: Problem, layout: Layout) -> float:
    """``estimate(problem, layout).step_time_s`` of a placed layout, to the last bit: the step formula
    of ``layout_terms`` (``step.step_total``: the sum ``estimate`` takes) without the layout checks,
    memory moments and itemised times a step time does not read."""
    first, last, once, paced = layout_terms(problem, layout)
    return _scalar(step.step_total(once, step.slowest_stage(first, last, paced)))


def _costed(problem: Problem, layout: Layout, with_memory: bool = True):
    """(keys, per-stage dicts of ``_stage``, their StageTerms, ``terms.step_collectives``, StepTerms);
    without ``with_memory`` the stage dicts lack the memory moments (a step time reads none)."""
    key = _Keys.of(problem, layout)
    stages = [
        _stage(problem, key, first=True, last=layout.pp == 1, with_memory=with_memory),
        _stage(problem, key, first=False, last=True, with_memory=with_memory),
    ]
    per_stage = tuple(_stage_terms(problem, key, stages, st) for st in (0, 1))
    acc = problem.cluster.accelerator
    steps = terms.step_collectives(problem.model, problem.workload, acc, key.sh, key.z, key.co)
    return key, stages, per_stage, steps, _step_terms(problem, key, stages[0], steps)


def _estimate_placed(
    problem: Problem, layout: Layout, mfu_convention: str, violations: list
) -> Estimate:
    model, workload, cluster = problem.model, problem.workload, problem.cluster
    acc = cluster.accelerator
    key, stages, per_stage, steps, t = _costed(problem, layout)
    parts = step.step_parts(t, step.slowest_stage(per_stage[0], per_stage[1], key.paced))
    slow = int(step.stage_total(per_stage[1]) > step.stage_total(per_stage[0]))
    times = _itemise(
        layout,
        stages[slow],
        step.stage_items(per_stage[slow]),
        parts,
        key.mult,
        t,
        steps,
        per_stage[slow].slice_wait,
    )
    big = max((0, 1), key=lambda s: stages[s]["peak"][1])
    peak_name, peak_bytes = stages[big]["peak"]
    moment = stages[big]["moments"][peak_name]
    capacity = capacity_bytes(cluster, workload)
    memory_bytes = {
        "state": sum(v for k, v in moment.items() if k.startswith("state/")),
        "activations": sum(v for k, v in moment.items() if k.startswith("activations/")),
        "temporary": sum(v for k, v in moment.items() if k.startswith("temporary/")),
        "peak": peak_bytes,
        "capacity": capacity,
        "hbm": acc.hbm_bytes if workload.hbm_bytes is None else workload.hbm_bytes,
        **moment,
        "host_offloaded": stages[big][
            "host_offloaded"
        ],  # activations the policy keeps in host memory (not HBM)
        **({} if layout.offload == "none" else _host_memory(problem, stages)),
    }
    mfu_flops = (
        flops.model_flops_per_token(model, workload.seq_len, mfu_convention)
        * workload.global_batch_tokens
    )
    violations = list(violations)
    if layout.offload != "none":
        violations += _host_memory_violations(problem, memory_bytes)
    worst_stage, where = _worst_stage(problem, key, layout.pp, big, moment)
    if peak_bytes > capacity:
        violations.append(
            Violation(
                "memory",
                f"needs {peak_bytes / GB:.1f} GB per device at {peak_name} "
                f"({where}), {capacity / GB:.1f} GB available",
            )
        )
    return Estimate(
        problem=problem,
        layout=layout,
        params=params.param_counts(model),
        memory_bytes=memory_bytes,
        memory_moments=stages[big]["moments"],
        peak_moment=peak_name,
        worst_stage=worst_stage,
        time_s=times,
        collectives=_collectives(problem, key, stages[slow], steps),
        step_time_s=times["step"],
        tokens_per_s=workload.global_batch_tokens / times["step"],
        mfu=flops.mfu(mfu_flops, times["step"], cluster.num_devices, acc.peak_flops_per_s),
        mfu_convention=mfu_convention,
        model_flops_per_step=mfu_flops,
        violations=violations,
    )


@dataclass(frozen=True)
class _Keys:
    """The decisions of one layout as the one-row arrays the term functions take."""

    sh: terms.Shapes
    k: np.ndarray
    r: np.ndarray
    z: np.ndarray
    f: np.ndarray  # offload code (specs.OFFLOADS)
    co: terms.Coeffs
    mult: float
    paced: (
        float  # K / mult, or 1 (terms.paced_share): the share of the step a slower last stage paces
    )
    sp: bool

    @classmethod
    def of(cls, problem: Problem, layout: Layout) -> _Keys:
        """The keys of a layout, built once per (model, cluster axes, layout): they read the cluster's
        axes alone (``terms.layout_coeffs``), never its accelerator, so a calibration fit that varies
        the accelerator's fields finds them again. Shared between calls: their arrays are read-only."""
        found = _KEYS.get(key := (problem.model, problem.cluster.axes, layout))
        if found is None:
            if len(_KEYS) >= _KEYS_KEPT:
                _KEYS.clear()
            found = _KEYS[key] = cls._build(problem, layout)
        return found

    @classmethod
    def _build(cls, problem: Problem, layout: Layout) -> _Keys:
        cpf = CP_FLAVOUR_CODES[layout.cp_flavour]
        degrees = {name: np.array([d]) for name, d in layout.all_degrees.items()}
        degrees["cpf"] = np.array([cpf])
        sh = terms.Shapes.of(
            **layout.all_degrees,
            v=layout.virtual_stages,
            sched=SCHEDULE_CODES[layout.schedule],
            cpf=cpf,
            cpa=cp_a2a_degree(problem.cluster.accelerator.devices_per_node, degrees),
            lf=layout.first_stage_layers or 0,
            ll=layout.last_stage_layers or 0,
            spl=int(layout.balanced_split),
        )
        k = np.array([layout.num_microbatches])
        co = terms.layout_coeffs(problem.model, problem.cluster, layout)
        r, z = np.array([RECOMPUTE_CODES[layout.recompute]]), np.array([layout.zero_stage])
        f = np.array([OFFLOADS.index(layout.offload)])
        read_only(k, r, z, f, sh, co)  # kept for later calls
        mult = _scalar(
            terms.step_multiplier(
                sh, k, terms.backward_split(problem.model, problem.workload), problem.model
            )
        )
        paced = _scalar(terms.paced_share(sh, k, mult))
        return cls(
            sh=sh, k=k, r=r, z=z, f=f, co=co, mult=mult, paced=paced, sp=layout.sequence_parallel
        )


_KEYS: dict[tuple, _Keys] = {}  # _Keys.of's, by (model, cluster axes, layout)
_KEYS_KEPT = 1 << 12  # a calibration fit's records many times over; then it starts afresh


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _stage(problem: Problem, key: _Keys, first: bool, last: bool, with_memory: bool = True) -> dict:
    """Per-microbatch seconds (compute items, collectives) and, ``with_memory``, the memory moments
    of the first or last stage."""
    model, workload, acc = problem.model, problem.workload, problem.cluster.accelerator
    sh, k, co = key.sh, key.k, key.co
    c = terms.compute_per_microbatch(model, workload, acc, sh, k, key.r, last, key.sp)
    fc = terms.fsdp_collectives(model, workload, acc, sh, co)
    tp = terms.tp_per_microbatch(model, workload, acc, sh, k, co, last, c, key.sp)
    cp = terms.cp_per_microbatch(model, workload, acc, sh, k, co, c["window/attn_fwd_layer"])
    busy = terms.shard_link_traffic(tp, cp, fc, co)
    ep = terms.ep_per_microbatch(model, workload, acc, sh, k, co, c["window/fwd_layer"])
    times = {
        "last": last,  # whether the stage holds the output layer
        "compute": {kk: _scalar(v) for kk, v in c.items() if kk.startswith("compute/")},
        "overhead": acc.microbatch_overhead_s * _scalar(sh.v),
        "windows": c,
        "tp": tp,
        "cp": cp,
        "ep": ep,
        "fsdp": fc,
        "link_busy": busy,
        "fsdp_fixed": terms.fsdp_exposed_fixed(
            model, acc, sh, fc, c["window/fwd_layer"], c["window/logits"], True, busy["fwd"], last
        ),
    }
    return {**times, **_stage_memory(problem, key, first, last)} if with_memory else times


def _stage_memory(problem: Problem, key: _Keys, first: bool, last: bool) -> dict:
    """The memory moments of the first or last stage, its peak and what it offloads to the host."""
    model, workload, sh = problem.model, problem.workload, key.sh
    items = {
        **terms.memory_by_zero(model, workload, sh, key.z, first, key.f),
        **terms.memory_by_microbatch(model, workload, sh, key.k, key.r, first, last, key.sp),
    }
    moments = {
        name: {kk: _scalar(v) for kk, v in terms.moment_bytes(items, name).items()}
        for name in terms.MOMENTS
    }
    totals = {name: sum(live.values()) for name, live in moments.items()}
    peak = max(totals, key=lambda name: totals[name])
    return {
        "moments": moments,
        "peak": (peak, totals[peak]),
        "host_offloaded": _scalar(items["host/offloaded"]),
        "host_offloaded_state": _scalar(items.get("host/offloaded_state", 0.0)),
    }


def _worst_stage(problem: Problem, key: _Keys, pp: int, big: int, moment: dict) -> tuple[int, str]:
    """The pipeline rank of the peak memory (``big``: 0 the first stage's bound, 1 the last stage) and its
    words: the first stage's bound takes the state and the saved activations of the devices before the last
    that hold more of each (``terms.first_stage_devices``), one rank or two."""
    if big == 1:
        return pp - 1, f"stage {pp - 1}"
    if pp == 1:
        return 0, "stage 0"
    state_at, saved_at = (
        int(np.ravel(x)[0])
        for x in terms.first_stage_devices(
            problem.model, problem.workload, key.sh, key.z, key.k, key.r, key.sp
        )
    )
    if state_at == saved_at:
        return state_at, f"stage {state_at}"
    state = sum(v for name, v in moment.items() if name.startswith("state/"))
    saved = sum(v for name, v in moment.items() if name.startswith("activations/"))
    return (
        state_at if state >= saved else saved_at,
        f"stage {state_at}'s state and stage {saved_at}'s activations",
    )


def _stage_terms(problem: Problem, key: _Keys, stages: list[dict], st: int) -> step.StageTerms:
    """The terms of stage ``st`` (0 first, 1 last) of this layout, in seconds per step; each group's
    exposed part, and apart from it (the ``_lost_s`` fields) the compute its hidden part slows."""
    model, acc, mult = problem.model, problem.cluster.accelerator, key.mult
    layers = _scalar(terms.layers_per_stage(model, key.sh))
    s, first = stages[st], stages[0]
    work = memory.recompute_arrays(model)
    r = int(_scalar(key.r))
    # ZeRO collectives in every microbatch (a shard group): ZeRO-3's per-layer gathers and reduce-scatters
    # behind every microbatch's backward; ZeRO-2's reduce-scatter of each microbatch's gradients but the last's
    # (a once-per-step term, as ZeRO-1's) behind that microbatch's backward, and with FSDP's resharding
    # (Profile.zero2_regathers) the gather of its weights but the first's behind its forward
    z, sharded = int(_scalar(key.z)), _scalar(key.sh.shards) > 1
    zero3 = float(sharded and z == 3)
    if zero3:
        fsdp, busy = first["fsdp"], first["link_busy"]
        # with the gathers a recomputed forward repeats (terms.zero3_regathered_share)
        regathered = _scalar(terms.zero3_regathered_share(model, problem.workload, key.sh.tp)[r])
        traffic = mult * _scalar(
            layers
            * (
                fsdp["gather_layer"]
                + fsdp["reduce_layer"]
                + busy["bwd"]
                + regathered * (fsdp["gather_layer"] - fsdp["gather_experts_layer"])
            )
        )
        window = mult * layers * _scalar(first["windows"]["window/bwd_layer"])
        copies = mult * _scalar(s["fsdp_fixed"]["copies"])
    else:
        others = _scalar(key.k) - 1.0
        link_busy = terms.reduction_link_traffic(
            model, problem.workload, acc, key.sh, first["tp"], first["cp"], key.co
        )
        traffic = others * _scalar(
            terms.zero2_microbatch_traffic(model, problem.workload, acc, key.sh, key.co, link_busy)
        )
        window = (
            others * layers * _scalar(terms.zero2_window_layer(problem.workload, first["windows"]))
        )
        copies = others * _scalar(terms.zero2_copies(model, problem.workload, acc, key.sh))
    return step.StageTerms(
        compute_s=mult * (sum(s["compute"].values()) + s["overhead"]),
        tp_s=mult * _scalar(s["tp"]["base"] - s["tp"]["lost"]),
        tp_lost_s=mult * _scalar(s["tp"]["lost"]),
        tp_rerun_s=mult * _scalar(first["tp"]["rerun"] - first["tp"]["rerun_lost"]),
        tp_rerun_lost_s=mult * _scalar(first["tp"]["rerun_lost"]),
        tp_rerun_fraction=float(work["tp"][r]),
        cp_s=mult * _scalar(first["cp"]["base"] - first["cp"]["lost"]),
        cp_lost_s=mult * _scalar(first["cp"]["lost"]),
        cp_rerun_s=mult * _scalar(first["cp"]["rerun"] - first["cp"]["rerun_lost"]),
        cp_rerun_lost_s=mult * _scalar(first["cp"]["rerun_lost"]),
        cp_rerun_fraction=float(work["attention"][r]),
        ep_s=mult * _scalar(s["ep"]["base"] - s["ep"]["lost"]),
        ep_lost_s=mult * _scalar(s["ep"]["lost"]),
        ep_rerun_s=mult * _scalar(first["ep"]["rerun"] - first["ep"]["rerun_lost"]),
        ep_rerun_lost_s=mult * _scalar(first["ep"]["rerun_lost"]),
        ep_rerun_fraction=float(work["moe"][r]),
        fsdp_fixed_s=zero3
        * mult
        * _scalar(s["fsdp_fixed"]["forward"] + s["fsdp_fixed"]["vocab"] - s["fsdp_fixed"]["lost"]),
        fsdp_fixed_lost_s=zero3 * mult * _scalar(s["fsdp_fixed"]["lost"]),
        fsdp_backward_s=traffic,
        backward_s=window,
        microbatch_zero=float(sharded and z >= 2),
        zero_copies_s=copies,
        accumulate_s=mult
        * _scalar(
            terms.grad_accumulation(
                model,
                problem.workload,
                acc,
                key.sh,
                s["last"],
                sharded and z >= 2,
            )
        ),
        eta=acc.overlap_interference,
        slice_wait=terms.slice_wait_share(problem.cluster.num_slices),
    )


def _step_terms(problem: Problem, key: _Keys, first: dict, steps: dict) -> step.StepTerms[float]:
    """The once-per-step terms of this layout, in seconds per step (``steps``: step_collectives)."""
    model, workload, acc = problem.model, problem.workload, problem.cluster.accelerator
    sh, co = key.sh, key.co
    windows = terms.step_windows(model, workload, acc, sh, first["windows"], key.k)
    early, late = (_scalar(x) for x in terms.chunk_shares(workload, acc, sh))
    busy_last, busy_others = (_scalar(x) for x in terms.window_shares(workload, acc, sh, key.k))
    reduce_interference, gather_interference = terms.step_interference(acc, steps)
    reduce = _scalar(steps["reduce/zero"] + steps["reduce/dp"] + steps["reduce/kv_replica"])
    busy = _scalar(
        terms.reduction_link_traffic(model, workload, acc, sh, first["tp"], first["cp"], co)
    )
    reduce_last, reduce_early = terms.split_by_chunks(reduce, early)
    gather, gather_late = terms.split_by_chunks(_scalar(steps["gather/zero"]), late)
    return step.StepTerms(
        reduce_s=reduce_last,
        reduce_link_busy_s=busy * busy_last,
        reduce_window_s=_scalar(windows["reduce"]),
        reduce_early_s=reduce_early,
        reduce_early_link_busy_s=busy * busy_others,
        reduce_early_window_s=_scalar(windows["reduce_early"]),
        reduce_interference_s=_scalar(reduce_interference),
        zero_gather_s=gather,
        gather_window_s=_scalar(windows["gather"]),
        gather_late_s=gather_late,
        gather_late_window_s=_scalar(windows["gather_late"]),
        gather_interference_s=_scalar(gather_interference),
        pp_sends_s=_scalar(terms.pipeline_sends(model, workload, acc, sh, key.k, co)),
        optimizer_s=_scalar(terms.optimizer_time(model, workload, acc, sh, key.z, key.f))
        + _param_fetch_s(problem, key),
        zero_step_copies_s=_scalar(terms.zero_step_copies(model, workload, acc, sh, key.z)),
        step_overhead_s=acc.step_overhead_s,
        eta_pct=terms.interference_pct(acc),
    )


def _param_fetch_s(problem: Problem, key: _Keys) -> float:
    """The parameter offload's host fetches per step (``terms.param_fetch_time``), 0 without it."""
    if not memory.offloaded_by_code("weights")[int(key.f[0])]:
        return 0.0
    acc = problem.cluster.accelerator
    return _scalar(terms.param_fetch_time(problem.model, problem.workload, acc, key.sh, key.k))


def offload_seconds(problem: Problem, layout: Layout) -> dict:
    """The parts of an offloaded layout's ``compute/optimizer`` time per step (``offload/...``: its
    offloaded optimizer step by ``terms.offload_step_parts`` and the parameter fetches); {} without offload."""
    if layout.offload == "none":
        return {}
    key = _Keys.of(problem, layout)
    model, workload, acc = problem.model, problem.workload, problem.cluster.accelerator
    local = terms.optimizer_params(model, key.sh, key.z)
    device = terms.optimizer_time(model, workload, acc, key.sh, key.z)
    parts = terms.offload_step_parts(workload, acc, local, device, key.f)
    return {
        **{name: _scalar(v) for name, v in parts.items()},
        "offload/param_fetch": _param_fetch_s(problem, key),
    }


def _host_memory(problem: Problem, stages: list[dict]) -> dict:
    """memory_bytes items of an offloaded layout, on the stage that offloads the most: its state on
    the host per device and, with the activations it offloads, per node (the devices sharing a host)
    against the node's memory."""
    stage = max(stages, key=lambda s: s["host_offloaded_state"] + s["host_offloaded"])
    per_device = stage["host_offloaded_state"] + stage["host_offloaded"]
    return {
        "host_offloaded_state": stage["host_offloaded_state"],
        "host_per_node": per_device * problem.cluster.devices_per_node,
        "host_capacity_per_node": problem.cluster.host_memory_bytes_per_node,
    }


def _host_memory_violations(problem: Problem, memory_bytes: dict) -> list[Violation]:
    """The host-memory rule: what the layout offloads per node fits the node's memory."""
    need, have = memory_bytes["host_per_node"], memory_bytes["host_capacity_per_node"]
    if have is None or need <= have:
        return []
    return [
        Violation(
            "host-memory",
            f"offloads {need / GB:.1f} GB per node ({problem.cluster.devices_per_node} "
            f"devices), host memory {have / GB:.1f} GB",
        )
    ]


def _itemise(
    layout: Layout,
    slow: dict,
    stage_items: dict,
    parts: dict,
    mult: float,
    t: step.StepTerms[float],
    steps: dict,
    slice_wait: float = 0.0,
) -> dict:
    """time_s: the step formula's parts, with the slowest stage's per-step time split into its
    compute items (x K), exposed collectives (x K), microbatch overhead (x K), the wait for the slowest slice
    (``slice_wait`` of the rest: ``overhead/slice_sync``) and the bubble (the rest of the stages' critical path,
    ``step.paced_max``: the first stage's pace where the last is the slower); what hidden collectives cost the
    compute beside them is ``exposed_comm/interference``, not their group's item."""
    kk = layout.num_microbatches
    per_mb = {
        **slow["compute"],
        "overhead/microbatch": slow["overhead"],
        **{name: v / mult for name, v in stage_items.items() if name != "stage/compute"},
    }
    times = {name: kk * v for name, v in per_mb.items()}
    stage = _scalar(parts["stage"])
    times["overhead/slice_sync"] = stage * slice_wait / (1.0 + slice_wait)
    times["bubble"] = stage - times["overhead/slice_sync"] - kk * sum(per_mb.values())
    for name, value in parts.items():
        # overhead/zero_copies has a stage part (above) and a once-per-step part: they add
        if name != "stage" and name not in _REDUCTIONS + _GATHERS:
            times[name] = times.get(name, 0.0) + _scalar(value)
    for name, value in _split_reductions(
        t,
        steps,
        sum(_scalar(parts[name]) for name in _REDUCTIONS),
        sum(_scalar(parts[name]) for name in _GATHERS),
    ).items():
        times[name] = times.get(name, 0.0) + value
    out = {
        prefix: sum(v for name, v in times.items() if name.startswith(prefix + "/"))
        for prefix in ("compute", "exposed_comm", "overhead")
    }
    out["bubble"] = times.pop("bubble")
    out["step"] = _scalar(sum(parts.values()))
    return {name: float(v) for name, v in {**out, **times}.items()}


# the step formula's parts that ``_split_reductions`` itemises by group
_REDUCTIONS = ("exposed_comm/reduce", "exposed_comm/reduce_early")
_GATHERS = ("exposed_comm/zero_gather", "exposed_comm/zero_gather_late")


def _split_reductions(
    t: step.StepTerms[float], steps: dict, exposed: float, gather_exposed: float
) -> dict:
    """The exposed once-per-step reductions by group: each window (the last chunk's, the other
    chunks') hides its share of them in order (ZeRO reduce-scatter, DP all-reduce, KV-replica
    all-reduce), the rest is each group's share."""
    total = t.reduce_s + t.reduce_early_s
    early = t.reduce_early_s / total if total else 0.0
    # what the TP and CP traffic on those links leave free of each window
    windows = (
        (1.0 - early, max(0.0, t.reduce_window_s - t.reduce_link_busy_s)),
        (early, max(0.0, t.reduce_early_window_s - t.reduce_early_link_busy_s)),
    )
    # the compute each hidden second of them slows (overlap_interference; costs.step.unhidden), as its own item
    loss_rate = t.reduce_interference_s / total if total else 0.0
    keep = step.unhidden(1.0, t.eta_pct)
    names = ("zero", "dp", "kv_replica")
    out = {"exposed_comm/" + name: 0.0 for name in names}
    out["exposed_comm/interference"] = 0.0
    for share, budget in windows:
        for name in names:
            seconds = share * _scalar(steps["reduce/" + name])
            beyond = max(0.0, seconds - budget)
            out["exposed_comm/" + name] += beyond
            out["exposed_comm/interference"] += loss_rate * seconds - (1.0 - keep) * beyond
            budget = max(0.0, budget - seconds)
    gather_beyond = max(0.0, t.zero_gather_s - t.gather_window_s) + max(
        0.0, t.gather_late_s - t.gather_late_window_s
    )
    out["exposed_comm/zero"] += gather_beyond
    out["exposed_comm/interference"] += gather_exposed - gather_beyond
    if abs(out["exposed_comm/interference"]) <= 1e-12 * max(1.0, exposed + gather_exposed):
        out["exposed_comm/interference"] = (
            0.0  # nothing hidden (windows of 0): the differences cancel up to rounding
        )
    assert abs(sum(out.values()) - exposed - gather_exposed) <= 1e-9 * max(
        1.0, exposed + gather_exposed
    )
    return out


def _collectives(problem: Problem, key: _Keys, slow: dict, steps: dict) -> list[dict]:
    """What each group moves, how often, and how long one takes (for explanations and JSON);
    ``steps``: ``terms.step_collectives``."""
    model, workload, acc = problem.model, problem.workload, problem.cluster.accelerator
    sh, co = key.sh, key.co
    m = _scalar(terms.tokens_per_microbatch(workload, sh, key.k))
    gathered = terms.gathered_bytes_per_param(workload, acc)
    p_layer = _scalar(params.layer_params(model, sh.tp))
    p_experts = _scalar(terms.expert_params_per_layer(model, sh)) if model.moe is not None else 0.0
    z = int(_scalar(key.z))
    zero3 = float(z == 3)  # its per-layer collectives run
    # a third gather of the share of each layer's weights a recomputed forward frees (terms.zero3_regathered_share)
    regathered = _scalar(terms.zero3_regathered_share(model, workload, sh.tp)[int(_scalar(key.r))])
    rows = [
        (
            "tp activations (AG+RS or AR)",
            co.tp,
            m * model.d_model * workload.activation_bytes,
            f"per layer per microbatch x{2 * terms.tp_blocks_per_layer(model)}-{3 * terms.tp_blocks_per_layer(model)}",
            _scalar(slow["tp"]["unit"]),
        ),
        ("cp ring K/V", co.cp, None, "per layer per microbatch", _scalar(slow["cp"]["t_kv"])),
        *(
            [
                (
                    "cp all-to-alls (q, k, v, output)",
                    co.cp_a2a if _scalar(sh.cpa) == _scalar(sh.cp) else co.cp_in,
                    None,
                    "per layer per microbatch x2",
                    t,
                )
            ]
            if (t := _scalar(slow["cp"]["t_a2a"]))
            else []
        ),
        (
            "fsdp weight gather",
            co.shard,
            p_layer * gathered,
            f"per layer per microbatch x{2 + regathered:.3g}"
            + (" (the recomputed forward's regathers)" if regathered else ""),
            zero3 * _scalar(slow["fsdp"]["gather_layer"] - slow["fsdp"]["gather_experts_layer"]),
        ),
        (
            "fsdp grad reduce-scatter",
            co.shard,
            p_layer * workload.grad_bytes_per_param,
            "per layer per microbatch",
            zero3 * _scalar(slow["fsdp"]["reduce_layer"] - slow["fsdp"]["reduce_experts_layer"]),
        ),
        (
            "expert fsdp weight gather",
            co.eshard,
            p_experts * gathered,
            "per layer per microbatch x2",
            zero3 * _scalar(slow["fsdp"]["gather_experts_layer"]),
        ),
        (
            "expert fsdp grad reduce-scatter",
            co.eshard,
            p_experts * workload.grad_bytes_per_param,
            "per layer per microbatch",
            zero3 * _scalar(slow["fsdp"]["reduce_experts_layer"]),
        ),
        (
            "zero-1 grad reduce-scatter",
            co.shard,
            None,
            "per step",
            float(z == 1) * _scalar(steps["reduce/zero"]),
        ),
        (
            "zero-2 grad reduce-scatter",
            co.shard,
            None,
            "per microbatch",
            float(z == 2) * _scalar(steps["reduce/zero"]),
        ),
        (
            f"zero-{z} weight gather",  # of the updated weights; FSDP's ZeRO-2 again in every microbatch
            co.shard,
            None,
            "per microbatch"
            if z == 2 and profile_of(workload.framework).zero2_regathers
            else "per step",
            float(z in (1, 2)) * _scalar(steps["gather/zero"]),
        ),
        ("dp grad all-reduce", co.dp, None, "per step", _scalar(steps["reduce/dp"])),
        (
            "kv-replica grad all-reduce",
            co.kv,
            None,
            "per step",
            _scalar(steps["reduce/kv_replica"]),
        ),
        (
            "ep token dispatch/combine all-to-all",
            co.ep,
            _scalar(slow["ep"]["payload"]),
            "per MoE layer per microbatch x4",
            _scalar(slow["ep"]["a2a"]),
        ),
    ]
    return [
        {
            "name": name,
            "group_size": int(_scalar(c.members)),
            "bytes": nbytes,
            "frequency": freq,
            "time_s": t_s,
        }
        for name, c, nbytes, freq, t_s in rows
        if _scalar(c.members) > 1 and t_s > 0
    ]
