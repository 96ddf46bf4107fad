"""estimate(model, workload, cluster, layout) -> Estimate: the itemised cost of one layout.

Composes the cost model's pure functions (``layoutsearch.costs``); computes nothing itself
beyond adding them up. Overlap rule (COSTS.md):

- TP collectives are on the critical path (fully exposed).
- FSDP weight gathers hide behind the previous layer's compute (prefetch), the first layer's
  gather of each microbatch is exposed; in backward the gather and the gradient
  reduce-scatter hide behind the layer's backward compute.
- CP ring passes hide behind the attention core of the same layer.
- DP / ZeRO-1/2 gradient reductions (and the KV-replica reduction) hide behind the backward
  of the last microbatch; the ZeRO-1/2 gather of updated weights is exposed.
- Pipeline sends are hidden in steady state; the fill and drain (2 (p - 1) sends) are exposed.
Exposed time of a collective = max(0, collective - its compute window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .check import Violation, structural_violations
from .costs import comms, flops, memory, params, pipeline
from .costs.flops import MFU_CONVENTIONS
from .errors import InvalidLayoutError
from .placement import default_axes
from .specs import Cluster, Layout, ModelSpec, Workload


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Itemised result for one (model, workload, cluster, layout)."""

    model: ModelSpec
    workload: Workload
    cluster: Cluster
    layout: Layout
    params: dict[str, int]
    memory_bytes: dict[str, float]  # on the worst stage: state, activations, temporary, peak, capacity, itemised
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

    @property
    def valid(self) -> bool:
        return not self.violations

    def mfu_under(self, convention: str) -> float:
        """MFU under another FLOP-counting convention (see costs.flops.model_flops_per_token)."""
        per_token = flops.model_flops_per_token(self.model, self.workload.seq_len, convention)
        return per_token * self.workload.global_batch_tokens / (
            self.step_time_s * self.cluster.num_devices * self.cluster.accelerator.peak_flops_per_s)

    def days_for_tokens(self, tokens: float) -> float:
        """Calendar days to train ``tokens`` tokens at this step time."""
        return tokens / self.tokens_per_s / 86400.0


def with_default_axes(cluster: Cluster, layout: Layout) -> Layout:
    """The layout with a placement filled in when it has none."""
    return layout if layout.axes else replace(layout, axes=default_axes(cluster, layout))


def estimate(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout,
             mfu_convention: str = "model", strict: bool = True) -> Estimate:
    """Cost one layout. With ``strict`` a structural violation raises InvalidLayoutError."""
    if mfu_convention not in MFU_CONVENTIONS:
        raise InvalidLayoutError(f"mfu convention '{mfu_convention}' is not one of {', '.join(MFU_CONVENTIONS)}")
    violations = structural_violations(model, workload, cluster, layout)
    if violations and strict:
        raise InvalidLayoutError("; ".join(v.message for v in violations))
    layout = with_default_axes(cluster, layout)
    stages = sorted({0, layout.pp - 1})
    per_stage = {s: _stage_costs(model, workload, cluster, layout, s) for s in stages}
    worst_time = max(stages, key=lambda s: per_stage[s]["t_microbatch"])
    worst_mem = max(stages, key=lambda s: per_stage[s]["peak"][1])
    step = _step_times(model, workload, cluster, layout, per_stage[worst_time])
    mem = per_stage[worst_mem]
    mfu_flops = flops.model_flops_per_token(model, workload.seq_len, mfu_convention) * workload.global_batch_tokens
    acc = cluster.accelerator
    capacity = acc.hbm_bytes - acc.runtime_reserve_bytes
    peak_name, peak_bytes = mem["peak"]
    moment = mem["moments"][peak_name]
    memory_bytes = {
        "state": sum(v for k, v in moment.items() if k.startswith("state/")),
        "activations": sum(v for k, v in moment.items() if k.startswith("activations/")),
        "temporary": sum(v for k, v in moment.items() if k.startswith("temporary/")),
        "peak": peak_bytes,
        "capacity": capacity,
        "hbm": acc.hbm_bytes,
        **moment,
    }
    est = Estimate(
        model=model, workload=workload, cluster=cluster, layout=layout,
        params=params.param_counts(model), memory_bytes=memory_bytes, memory_moments=mem["moments"],
        peak_moment=peak_name, worst_stage=worst_mem, time_s=step, collectives=per_stage[worst_time]["collectives"],
        step_time_s=step["step"], tokens_per_s=workload.global_batch_tokens / step["step"],
        mfu=mfu_flops / (step["step"] * cluster.num_devices * acc.peak_flops_per_s),
        mfu_convention=mfu_convention, model_flops_per_step=mfu_flops, violations=list(violations))
    if not est.fits:
        est.violations.append(Violation("memory", f"needs {peak_bytes / 1e9:.1f} GB per device at {peak_name} "
                                                   f"(stage {worst_mem}), {capacity / 1e9:.1f} GB available"))
    return est


def microbatch_tokens(workload: Workload, layout: Layout) -> float:
    """m: tokens one device processes per microbatch (its data unit's sequences / cp)."""
    return layout.microbatch_seqs(workload) * workload.seq_len / layout.cp


def _stage_costs(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout, stage: int) -> dict:
    """Per-microbatch time and memory moments of one pipeline stage."""
    acc = cluster.accelerator
    tp, last = layout.tp, layout.pp - 1
    m = microbatch_tokens(workload, layout)
    layers = params.stage_layers(model, layout.pp)
    rate = acc.peak_flops_per_s * acc.matmul_efficiency * m / (m + acc.matmul_half_efficiency_tokens)
    half = acc.collective_half_efficiency_bytes
    act_b = workload.activation_bytes

    # ---- compute per layer per microbatch
    per_tok = flops.layer_training_flops_per_token(model, workload.seq_len, workload.causal, tp, layout.recompute)
    attn_fwd = flops.attention_flops_per_token_per_layer(model, workload.seq_len, workload.causal, tp) * m / rate
    mm_fwd = flops.matmul_flops_per_token_per_layer(model, tp) * m / rate
    ew_passes = 3.0 + (1.0 if layout.recompute == "full" else 0.0)
    ew = flops.elementwise_bytes_per_token_per_layer(model, tp, layout.sequence_parallel, act_b) * m * ew_passes / acc.hbm_bytes_per_s
    layer_compute = (per_tok["matmul"] + per_tok["attention"] + per_tok["recompute"]) * m / rate + ew
    fwd_window = mm_fwd + attn_fwd
    bwd_window = layer_compute - fwd_window
    logits = 3.0 * flops.logits_flops_per_token(model, tp) * m / rate if stage == last else 0.0
    compute = {
        "compute/matmul": layers * per_tok["matmul"] * m / rate,
        "compute/attention": layers * per_tok["attention"] * m / rate,
        "compute/recompute": layers * per_tok["recompute"] * m / rate,
        "compute/elementwise": layers * ew,
        "compute/logits": logits,
    }

    # ---- collectives per microbatch
    tp_span = comms.group_span(cluster, layout, ("tp",))
    cp_span = comms.group_span(cluster, layout, ("cp",))
    shard_span = comms.group_span(cluster, layout, ("fsdp", "cp"))
    colls: list[dict] = []

    def coll(name, kind, span, nbytes, per_mb, seconds, exposed_each):
        colls.append({"name": name, "collective": kind, "group_size": comms.span_size(span),
                      "axes": [[p.axis.name, p.factor] for p in span], "bytes": nbytes,
                      "count_per_microbatch": per_mb, "time_s": seconds, "exposed_s": exposed_each})
        return per_mb * exposed_each

    exposed = {"exposed_comm/tp": 0.0, "exposed_comm/cp": 0.0, "exposed_comm/fsdp": 0.0}
    if tp > 1:
        a_tp = m * model.d_model * act_b
        unit = 2.0 * comms.all_gather_time(a_tp, tp_span, half)  # AG + RS (sequence parallel) or one AllReduce
        count = layers * (4 + (2 if layout.recompute == "full" else 0))
        kind = "allgather+reducescatter" if layout.sequence_parallel else "allreduce"
        exposed["exposed_comm/tp"] += coll("tp activations", kind, tp_span, a_tp, count, unit, unit)
        if stage == last:
            loss = comms.all_reduce_time(m * 4.0, tp_span, half)
            exposed["exposed_comm/tp"] += coll("vocab-parallel loss", "allreduce", tp_span, m * 4.0, 3, loss, loss)
    if layout.cp > 1:
        a_kv = layout.cp * m * 2 * params.kv_heads_per_device(model, tp) * model.head_dim * act_b
        t_kv = comms.all_gather_time(a_kv, cp_span, half)
        fwd_passes = 2 if layout.recompute == "full" else 1
        exposed["exposed_comm/cp"] += coll("cp ring K/V (forward)", "ring", cp_span, a_kv, layers * fwd_passes,
                                           t_kv, max(0.0, t_kv - attn_fwd))
        exposed["exposed_comm/cp"] += coll("cp ring K/V and grads (backward)", "ring", cp_span, a_kv, layers,
                                           2 * t_kv, max(0.0, 2 * t_kv - 2 * attn_fwd))
    zero3 = layout.zero_stage == 3 and comms.span_size(shard_span) > 1
    if zero3:
        p_layer = params.layer_params(model, tp)
        w_bytes, g_bytes = p_layer * workload.weight_bytes_per_param, p_layer * workload.grad_bytes_per_param
        t_ag = comms.all_gather_time(w_bytes, shard_span, half)
        t_rs = comms.reduce_scatter_time(g_bytes, shard_span, half)
        exposed["exposed_comm/fsdp"] += coll("fsdp weight gather (forward)", "allgather", shard_span, w_bytes, layers,
                                             t_ag, max(0.0, t_ag - fwd_window))
        exposed["exposed_comm/fsdp"] += coll("fsdp first-layer gather", "allgather", shard_span, w_bytes, 1, t_ag, t_ag)
        exposed["exposed_comm/fsdp"] += coll("fsdp gather + grad reduce-scatter (backward)", "allgather+reducescatter",
                                             shard_span, w_bytes + g_bytes, layers, t_ag + t_rs,
                                             max(0.0, t_ag + t_rs - bwd_window))
        vocab = model.vocab_size * model.d_model // tp
        if stage in (0, last):
            v_bytes = vocab * (workload.weight_bytes_per_param + workload.grad_bytes_per_param)
            t_v = comms.all_gather_time(vocab * workload.weight_bytes_per_param, shard_span, half) + \
                comms.reduce_scatter_time(vocab * workload.grad_bytes_per_param, shard_span, half)
            exposed["exposed_comm/fsdp"] += coll("fsdp vocabulary gather + reduce-scatter", "allgather+reducescatter",
                                                 shard_span, v_bytes, 1, t_v, max(0.0, t_v - logits))
    overhead = acc.microbatch_overhead_s * layout.virtual_stages
    t_compute = sum(compute.values())
    t_mb = t_compute + sum(exposed.values()) + overhead
    moments = _memory_moments(model, workload, cluster, layout, stage, m)
    return {"compute": compute, "exposed": exposed, "overhead": overhead, "t_microbatch": t_mb,
            "bwd_window": layers * bwd_window, "collectives": colls, "moments": moments,
            "peak": memory.peak(moments)}


def _step_times(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout, st: dict) -> dict[str, float]:
    """Whole-step time: K microbatches on the slowest stage, bubble, per-step collectives, optimizer."""
    acc = cluster.accelerator
    half = acc.collective_half_efficiency_bytes
    k = layout.num_microbatches
    stage = layout.pp - 1
    p_stage = params.stage_params(model, layout, stage)
    shard_span = comms.group_span(cluster, layout, ("fsdp", "cp"))
    shards = comms.span_size(shard_span)
    grad_b = workload.grad_bytes_per_param
    window = st["bwd_window"]
    per_step: dict[str, float] = {"exposed_comm/dp": 0.0, "exposed_comm/zero": 0.0, "exposed_comm/kv_replica": 0.0,
                                  "exposed_comm/pp": 0.0}

    def add(key, name, kind, span, nbytes, seconds, exposed_s):
        st["collectives"].append({"name": name, "collective": kind, "group_size": comms.span_size(span),
                                  "axes": [[p.axis.name, p.factor] for p in span], "bytes": nbytes,
                                  "count_per_step": 1, "time_s": seconds, "exposed_s": exposed_s})
        per_step[key] += exposed_s

    hidden_budget = window
    if layout.zero_stage in (1, 2) and shards > 1:
        t_rs = comms.reduce_scatter_time(p_stage * grad_b, shard_span, half)
        add("exposed_comm/zero", "zero-1/2 grad reduce-scatter", "reducescatter", shard_span, p_stage * grad_b, t_rs,
            max(0.0, t_rs - hidden_budget))
        hidden_budget = max(0.0, hidden_budget - t_rs)
        w_bytes = p_stage * workload.weight_bytes_per_param
        t_ag = comms.all_gather_time(w_bytes, shard_span, half)
        add("exposed_comm/zero", "zero-1/2 updated-weight gather", "allgather", shard_span, w_bytes, t_ag, t_ag)
    dp_degrees = ("dp", "fsdp", "cp") if layout.zero_stage == 0 else ("dp",)
    dp_span = comms.group_span(cluster, layout, dp_degrees)
    if comms.span_size(dp_span) > 1:
        local = p_stage * grad_b / (shards if layout.zero_stage >= 1 else 1)
        t_ar = comms.all_reduce_time(local, dp_span, half)
        add("exposed_comm/dp", "data-parallel grad all-reduce", "allreduce", dp_span, local, t_ar,
            max(0.0, t_ar - hidden_budget))
        hidden_budget = max(0.0, hidden_budget - t_ar)
    rep = params.kv_replication(model, layout.tp)
    if rep > 1:
        kv_span = _replica_span(comms.group_span(cluster, layout, ("tp",)), rep)
        kv_bytes = params.stage_layers(model, layout.pp) * 2 * model.d_model * model.head_dim * grad_b
        t_kv = comms.all_reduce_time(kv_bytes, kv_span, half)
        add("exposed_comm/kv_replica", "kv-replica grad all-reduce", "allreduce", kv_span, kv_bytes, t_kv,
            max(0.0, t_kv - hidden_budget))
    if layout.pp > 1:
        pp_span = comms.group_span(cluster, layout, ("pp",))
        a_pp = microbatch_tokens(workload, layout) * model.d_model * workload.activation_bytes / layout.tp
        t_send = comms.send_time(a_pp, pp_span, half)
        add("exposed_comm/pp", "pipeline sends (fill and drain)", "send", pp_span, a_pp, t_send,
            2 * (layout.pp - 1) * t_send)
    opt_params = p_stage / (shards if layout.zero_stage >= 1 else 1)
    opt_bytes = opt_params * (grad_b + 2 * workload.master_bytes_per_param + 2 * workload.optimizer_bytes_per_param
                              + workload.weight_bytes_per_param)
    bubble = pipeline.bubble_microbatches(layout.pp, layout.virtual_stages) * st["t_microbatch"]
    times = {key: k * v for key, v in {**st["compute"], **st["exposed"]}.items()}
    times["compute/optimizer"] = opt_bytes / acc.hbm_bytes_per_s
    times.update(per_step)
    times["overhead/microbatch"] = k * st["overhead"]
    times["overhead/step"] = acc.step_overhead_s
    times["bubble"] = bubble
    out = {
        "compute": sum(v for key, v in times.items() if key.startswith("compute/")),
        "exposed_comm": sum(v for key, v in times.items() if key.startswith("exposed_comm/")),
        "bubble": bubble,
        "overhead": times["overhead/microbatch"] + times["overhead/step"],
    }
    out["step"] = out["compute"] + out["exposed_comm"] + out["bubble"] + out["overhead"]
    return {**out, **{key: v for key, v in times.items() if "/" in key}}


def _replica_span(tp_span: comms.Span, replicas: int) -> comms.Span:
    """The innermost ``replicas`` members of the TP group: the ranks sharing one KV head."""
    out, left = [], replicas
    for part in tp_span:
        f = math.gcd(left, part.factor)
        if f > 1:
            out.append(comms.SpanPart(axis=part.axis, factor=f, stride=part.stride))
        left //= f
        if left == 1:
            break
    return tuple(out)


def _memory_moments(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout, stage: int,
                    m: float) -> dict[str, dict[str, float]]:
    """Live arrays of one stage's device at the end of warm-up forward, inside backward, at the optimizer step."""
    tp, last = layout.tp, layout.pp - 1
    shard_span = comms.group_span(cluster, layout, ("fsdp", "cp"))
    shards = comms.span_size(shard_span) if layout.zero_stage >= 1 else 1
    p_stage = params.stage_params(model, layout, stage)
    state = {f"state/{k}": v for k, v in memory.state_bytes(p_stage, workload, layout.zero_stage, shards).items()}
    layers = params.stage_layers(model, layout.pp)
    act_b = workload.activation_bytes
    saved = memory.saved_tensors_per_layer(model, tp, layout.sequence_parallel, m, act_b, layout.recompute)
    in_flight = pipeline.microbatches_in_flight(layout.schedule if layout.virtual_stages == 1 else "interleaved",
                                                layout.pp, stage, layout.num_microbatches, layout.virtual_stages)
    activations = {"activations/saved": layers * sum(saved.values()) * in_flight}
    p_layer = params.layer_params(model, tp)
    temp: dict[str, float] = {}
    if layout.zero_stage == 3 and shards > 1:
        temp["temporary/fsdp_gathered_weights"] = 2 * p_layer * workload.weight_bytes_per_param  # current + prefetched
    temp["temporary/workspace"] = 2 * m * max(model.d_ff / tp, model.d_model) * act_b  # operands of the running op
    if stage == last:
        temp["temporary/logits"] = m * model.vocab_size / tp * 4.0  # fp32 logits of one microbatch
    backward = dict(temp)
    if layout.zero_stage >= 2 and shards > 1:
        backward["temporary/layer_grads"] = p_layer * workload.grad_bytes_per_param  # unsharded, before reduce-scatter
    if layout.recompute != "none":
        full = memory.saved_tensors_per_layer(model, tp, layout.sequence_parallel, m, act_b, "none")
        kept = saved if layout.recompute == "selective" else {}
        backward["temporary/recompute"] = sum(v for k, v in full.items() if k not in kept)
    if stage == last:
        backward["temporary/logits_grad"] = m * model.vocab_size / tp * 4.0
    return {
        "forward_end": {**state, **activations, **temp},
        "backward": {**state, **activations, **backward},
        "optimizer_step": dict(state),
    }
