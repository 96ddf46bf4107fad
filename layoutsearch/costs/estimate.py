"""estimate(model, workload, cluster, layout) -> Estimate: the itemised cost of one layout.

Evaluates the cost terms of ``costs.terms`` (the same functions the search tabulates) for
one layout and adds them up by the step rule written there: the slowest stage's microbatch
time x (K + (p - 1)/v), plus the once-per-step collectives and the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from layoutsearch.core.check import Violation, structural_violations
from layoutsearch.costs import flops, params, terms
from layoutsearch.costs.flops import MFU_CONVENTIONS
from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.placement import axis_orders, default_axes, placement_for_order
from layoutsearch.core.specs import Cluster, Layout, ModelSpec, Workload


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Itemised result for one (model, workload, cluster, layout)."""

    model: ModelSpec
    workload: Workload
    cluster: Cluster
    layout: Layout
    params: dict[str, int]
    memory_bytes: dict[str, float]  # worst stage: state, activations, temporary, peak, capacity, itemised
    memory_moments: dict[str, dict[str, float]]  # moment -> live arrays (worst stage)
    peak_moment: str
    worst_stage: int
    time_s: dict[str, float]  # compute, exposed_comm, bubble, overhead, step, itemised with slash keys
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

    def mfu_under(self, convention: str) -> float:
        """MFU under another FLOP-counting convention (see costs.flops.model_flops_per_token)."""
        per_token = flops.model_flops_per_token(self.model, self.workload.seq_len, convention)
        return flops.mfu(per_token * self.workload.global_batch_tokens, self.step_time_s, self.cluster.num_devices,
                         self.cluster.accelerator.peak_flops_per_s)

    def days_for_tokens(self, tokens: float) -> float:
        """Calendar days to train ``tokens`` tokens at this step time."""
        return tokens / self.tokens_per_s / 86400.0


def with_default_axes(cluster: Cluster, layout: Layout, model: ModelSpec | None = None,
                      workload: Workload | None = None) -> Layout:
    """The layout with a placement filled in when it has none: the fastest axis order when the
    model and workload are given, else the first order that places every degree."""
    if layout.axes:
        return layout
    if model is None or workload is None:
        return replace(layout, axes=default_axes(cluster, layout))
    placed = {p for o in axis_orders(cluster) if (p := placement_for_order(cluster, layout.degrees, o)) is not None}
    if not placed:
        return replace(layout, axes=default_axes(cluster, layout))
    ordered = sorted(placed, key=lambda p: [o for o in axis_orders(cluster)
                                            if placement_for_order(cluster, layout.degrees, o) == p][0])
    return min((replace(layout, axes=p) for p in ordered),
               key=lambda lay: estimate(model, workload, cluster, lay).step_time_s)


def capacity_bytes(cluster: Cluster) -> float:
    """HBM less the runtime reserve: what a layout's peak must fit in."""
    return cluster.accelerator.hbm_bytes - cluster.accelerator.runtime_reserve_bytes


def estimate(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout,
             mfu_convention: str = "model", strict: bool = True) -> Estimate:
    """Cost one layout. With ``strict`` a structural violation raises InvalidLayoutError."""
    if mfu_convention not in MFU_CONVENTIONS:
        raise InvalidLayoutError(f"mfu convention '{mfu_convention}' is not one of {', '.join(MFU_CONVENTIONS)}")
    violations = structural_violations(model, workload, cluster, layout)
    if violations and strict:
        raise InvalidLayoutError("; ".join(v.message for v in violations))
    layout = with_default_axes(cluster, layout, model, workload)
    acc = cluster.accelerator
    sh = terms.Shapes.of(**layout.degrees, v=layout.virtual_stages)
    k = np.array([layout.num_microbatches])
    r = np.array([terms.RECOMPUTE_CODES[layout.recompute]])
    z = np.array([layout.zero_stage])
    co = terms.layout_coeffs(model, cluster, layout)
    sp = layout.sequence_parallel
    stages = {0: _stage(model, workload, acc, sh, k, r, z, co, sp, first=True, last=layout.pp == 1)}
    if layout.pp > 1:
        stages[layout.pp - 1] = _stage(model, workload, acc, sh, k, r, z, co, sp, first=False, last=True)
    slow = max(stages, key=lambda s: stages[s]["per_microbatch"])
    big = max(stages, key=lambda s: stages[s]["peak"][1])
    times, colls = _step(model, workload, acc, sh, k, r, z, co, stages[0], stages[slow], layout)
    mfu_flops = flops.model_flops_per_token(model, workload.seq_len, mfu_convention) * workload.global_batch_tokens
    capacity = capacity_bytes(cluster)
    peak_name, peak_bytes = stages[big]["peak"]
    moment = stages[big]["moments"][peak_name]
    memory_bytes = {
        "state": sum(v for key, v in moment.items() if key.startswith("state/")),
        "activations": sum(v for key, v in moment.items() if key.startswith("activations/")),
        "temporary": sum(v for key, v in moment.items() if key.startswith("temporary/")),
        "peak": peak_bytes, "capacity": capacity, "hbm": acc.hbm_bytes, **moment,
    }
    est = Estimate(
        model=model, workload=workload, cluster=cluster, layout=layout, params=params.param_counts(model),
        memory_bytes=memory_bytes, memory_moments=stages[big]["moments"], peak_moment=peak_name, worst_stage=big,
        time_s=times, collectives=colls, step_time_s=times["step"],
        tokens_per_s=workload.global_batch_tokens / times["step"],
        mfu=flops.mfu(mfu_flops, times["step"], cluster.num_devices, acc.peak_flops_per_s),
        mfu_convention=mfu_convention, model_flops_per_step=mfu_flops, violations=list(violations))
    if not est.fits:
        est.violations.append(Violation("memory", f"needs {peak_bytes / 1e9:.1f} GB per device at {peak_name} "
                                                   f"(stage {big}), {capacity / 1e9:.1f} GB available"))
    return est


def _scalar(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _stage(model, workload, acc, sh, k, r, z, co, sp, first: bool, last: bool) -> dict:
    """Per-microbatch seconds and memory moments of the first or last pipeline stage."""
    c = terms.compute_per_microbatch(model, workload, acc, sh, k, r, last, sp)
    full = _scalar(r == 2)
    tp = terms.tp_per_microbatch(model, workload, acc, sh, k, co, last, c["window/matmul_fwd_layer"])
    cp = terms.cp_per_microbatch(model, workload, acc, sh, k, co, c["window/attn_fwd_layer"])
    fc = terms.fsdp_collectives(model, workload, acc, sh, co)
    zero3 = _scalar((z == 3) & (sh.shards > 1))
    fixed = terms.fsdp_exposed_fixed(model, sh, fc, c["window/fwd_layer"], c["window/logits"], first or last)
    bwd = terms.fsdp_backward_exposed(model, sh, fc, c["window/bwd_layer"])
    exposed = {
        "exposed_comm/tp": _scalar(tp["base"] + full * tp["if_full"]),
        "exposed_comm/cp": _scalar(cp["base"] + full * cp["if_full"]),
        "exposed_comm/fsdp": zero3 * _scalar(fixed["forward"] + fixed["vocab"] + bwd),
    }
    compute = {key: _scalar(v) for key, v in c.items() if key.startswith("compute/")}
    overhead = acc.microbatch_overhead_s * _scalar(sh.v)
    items = {**terms.memory_by_zero(model, workload, sh, z, first),
             **terms.memory_by_microbatch(model, workload, sh, k, r, first, last, sp)}
    moments = {name: {key: _scalar(v) for key, v in terms.moment_bytes(items, name).items()} for name in terms.MOMENTS}
    totals = {name: sum(items.values()) for name, items in moments.items()}
    peak = max(totals, key=totals.get)
    return {"compute": compute, "exposed": exposed, "overhead": overhead, "moments": moments,
            "per_microbatch": sum(compute.values()) + sum(exposed.values()) + overhead,
            "peak": (peak, totals[peak]), "windows": c, "tp": tp, "cp": cp, "fsdp": fc}


def _step(model, workload, acc, sh, k, r, z, co, first: dict, slow: dict, layout: Layout):
    """Step time by component, and the list of collectives with their sizes and exposed time."""
    kk = layout.num_microbatches
    steps = terms.step_collectives(model, workload, acc, sh, z, co)
    window = _scalar(terms.layers_per_stage(model, sh) * first["windows"]["window/bwd_layer"])
    per_step, budget = {}, window
    for key in ("reduce/zero", "reduce/dp", "reduce/kv_replica"):
        t = _scalar(steps[key])
        per_step["exposed_comm/" + key.split("/")[1]] = max(0.0, t - budget)
        budget = max(0.0, budget - t)
    forward = _scalar(terms.layers_per_stage(model, sh) * first["windows"]["window/fwd_layer"])
    per_step["exposed_comm/zero"] += max(0.0, _scalar(steps["gather/zero"]) - forward)
    per_step["exposed_comm/pp"] = _scalar(terms.pipeline_sends(model, workload, acc, sh, k, co))
    times = {key: kk * v for key, v in {**slow["compute"], **slow["exposed"]}.items()}
    times["compute/optimizer"] = _scalar(terms.optimizer_time(model, workload, acc, sh, z))
    times.update(per_step)
    times["overhead/microbatch"] = kk * slow["overhead"]
    times["overhead/step"] = acc.step_overhead_s
    times["bubble"] = (layout.pp - 1) / layout.virtual_stages * slow["per_microbatch"]
    out = {prefix: sum(v for key, v in times.items() if key.startswith(prefix + "/"))
           for prefix in ("compute", "exposed_comm")}
    out["bubble"] = times["bubble"]
    out["overhead"] = times["overhead/microbatch"] + times["overhead/step"]
    out["step"] = out["compute"] + out["exposed_comm"] + out["bubble"] + out["overhead"]
    return {**out, **{key: v for key, v in times.items() if "/" in key}}, _collectives(model, workload, sh, k, co, slow, steps)


def _collectives(model, workload, sh, k, co, slow, steps) -> list[dict]:
    """What each group moves, how often, and how long one takes (for explanations and JSON)."""
    m = _scalar(terms.tokens_per_microbatch(workload, sh, k))
    p_layer = _scalar(params.layer_params(model, sh.tp))
    rows = [
        ("tp activations (AG+RS or AR)", co.tp, m * model.d_model * workload.activation_bytes, "per layer per microbatch x4-6",
         _scalar(slow["tp"]["unit"])),
        ("cp ring K/V", co.cp, None, "per layer per microbatch", _scalar(slow["cp"]["t_kv"])),
        ("fsdp weight gather", co.shard, p_layer * workload.weight_bytes_per_param, "per layer per microbatch x2",
         _scalar(slow["fsdp"]["gather_layer"])),
        ("fsdp grad reduce-scatter", co.shard, p_layer * workload.grad_bytes_per_param, "per layer per microbatch",
         _scalar(slow["fsdp"]["reduce_layer"])),
        ("zero-1/2 grad reduce-scatter", co.shard, None, "per step", _scalar(steps["reduce/zero"])),
        ("dp grad all-reduce", co.dp, None, "per step", _scalar(steps["reduce/dp"])),
        ("kv-replica grad all-reduce", co.kv, None, "per step", _scalar(steps["reduce/kv_replica"])),
    ]
    return [{"name": name, "group_size": int(_scalar(c.members)), "bytes": nbytes, "frequency": freq, "time_s": t}
            for name, c, nbytes, freq, t in rows if _scalar(c.members) > 1 and t > 0]
