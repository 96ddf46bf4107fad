"""Why the winner wins, and why nothing fits when nothing does.

- ``compare``: the terms (seconds, bytes) in which two estimates differ, largest first.
- ``funnel``: how many degree tuples each constraint family removes, in order.
- ``infeasibility``: the funnel, the layout closest to fitting, what it lacks, and which
  single change would make it fit (full recompute, ZeRO-3, twice the devices).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from layoutsearch.costs import memory, params, terms
from layoutsearch.core.errors import LayoutsearchError
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.search.space import SearchOptions, Space, _divisors, microbatch_choices
from layoutsearch.search.tables import KIB, Tables
from layoutsearch.core.specs import Cluster, ModelSpec, Workload

GB = 1e9


def compare(winner: Estimate, other: Estimate, limit: int = 8) -> list[dict]:
    """Itemised terms that differ between two estimates (time in seconds, memory in bytes)."""
    rows = []
    for key in sorted(set(winner.time_s) | set(other.time_s)):
        if "/" in key or key == "bubble":
            a, b = winner.time_s.get(key, 0.0), other.time_s.get(key, 0.0)
            if abs(a - b) > 1e-6:
                rows.append({"term": f"time/{key}", "winner": a, "other": b, "difference": b - a, "unit": "s"})
    for key in sorted(set(winner.memory_bytes) | set(other.memory_bytes)):
        if "/" in key:
            a, b = winner.memory_bytes.get(key, 0.0), other.memory_bytes.get(key, 0.0)
            if abs(a - b) > 1e6:
                rows.append({"term": f"memory/{key}", "winner": a, "other": b, "difference": b - a, "unit": "B"})
    time_rows = sorted((r for r in rows if r["unit"] == "s"), key=lambda r: -abs(r["difference"]))
    mem_rows = sorted((r for r in rows if r["unit"] == "B"), key=lambda r: -abs(r["difference"]))
    return time_rows[:limit] + mem_rows[:limit]


def funnel(model: ModelSpec, workload: Workload, cluster: Cluster, options: SearchOptions) -> list[dict]:
    """Degree tuples (dp, fsdp, tp, pp, cp) with product = devices, and how many each rule removes."""
    n = cluster.num_devices
    tuples = [(dp, f, t, p, c) for t in _divisors(n) for p in _divisors(n // t) for c in _divisors(n // t // p)
              for f in _divisors(n // t // p // c) for dp in [n // t // p // c // f]]
    rules = [
        ("your --fix/--choices/--only", lambda dp, f, t, p, c: all(options.allowed(k, v) for k, v in
                                                                   zip(("dp", "fsdp", "tp", "pp", "cp"), (dp, f, t, p, c)))),
        (f"tp divides num_heads({model.num_heads}) and d_ff({model.d_ff})",
         lambda dp, f, t, p, c: model.num_heads % t == 0 and model.d_ff % t == 0),
        (f"tp and num_kv_heads({model.num_kv_heads}) divide one another",
         lambda dp, f, t, p, c: model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0),
        (f"pp divides num_layers({model.num_layers})", lambda dp, f, t, p, c: model.num_layers % p == 0),
        (f"seq_len({workload.seq_len}) divisible by 2 x cp", lambda dp, f, t, p, c: c == 1 or workload.seq_len % (2 * c) == 0),
        (f"whole sequences: dp x fsdp divides the batch ({workload.global_batch_seqs})",
         lambda dp, f, t, p, c: workload.global_batch_seqs % (dp * f) == 0),
        ("a microbatch count with K >= pp exists", lambda dp, f, t, p, c: bool(microbatch_choices(workload, dp, f, p, 1))),
    ]
    out, left = [], tuples
    for name, rule in rules:
        kept = [x for x in left if rule(*x)]
        out.append({"rule": name, "removed": len(left) - len(kept), "remaining": len(kept)})
        left = kept
    return [{"rule": "product of degrees = devices", "removed": 0, "remaining": len(tuples)}] + out


def nearest(space: Space, tables: Tables) -> tuple[tuple, float] | None:
    """The candidate whose worst (stage, moment) peak is closest to the capacity: (indices, peak bytes)."""
    from layoutsearch.search.enumerate import candidate_grid
    from layoutsearch.search.tables import assemble

    if not len(space.sk_k):
        return None
    sk, ri, z, o = candidate_grid(space, np.arange(len(space.sk_k)))
    if not len(sk):
        return None
    m = assemble(tables, space, sk, ri, z, o)
    i = int(np.lexsort((m["step"], m["peak"]))[0])
    return (int(sk[i]), int(ri[i]), int(z[i]), int(o[i])), float(m["peak"][i]) * KIB


def infeasibility(model: ModelSpec, workload: Workload, cluster: Cluster, options: SearchOptions,
                  space: Space, tables: Tables) -> dict:
    """The explanation printed (and put in the JSON) when no candidate fits."""
    steps = funnel(model, workload, cluster, options)
    structural_left = steps[-1]["remaining"]
    out = {"funnel": steps, "candidates": space.num_candidates()}
    if not structural_left or not space.num_candidates():
        last = next((s for s in steps if s["remaining"] == 0), steps[-1])
        out["message"] = f"no layout satisfies the rules: '{last['rule']}' removes the last {last['removed']} degree tuples"
        return out
    found = nearest(space, tables)
    (row, ri, z, o), peak = found
    layout = space.layout(int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o)
    est = estimate(model, workload, cluster, layout)
    capacity = est.memory_bytes["capacity"]
    fixes = []
    for name, changed in (("recompute=full", replace(layout, recompute="full")),
                          ("zero-stage=3", replace(layout, zero_stage=3) if layout.fsdp * layout.cp > 1 else None)):
        if changed is not None and changed != layout and estimate(model, workload, cluster, changed).fits:
            fixes.append(name)
    doubled = _fits_on_doubled(model, workload, cluster)
    if doubled:
        fixes.append(f"2x the devices ({doubled})")
    state = sum(memory.state_bytes(params.param_counts(model)["total"], workload, 0, 1).values())
    min_devices = int(-(-state // capacity))
    out["nearest_layout"] = {"degrees": layout.degrees, "recompute": layout.recompute, "zero_stage": layout.zero_stage,
                             "num_microbatches": layout.num_microbatches, "peak_bytes": est.memory_bytes["peak"],
                             "capacity_bytes": capacity, "peak_moment": est.peak_moment}
    out["fixes"] = fixes
    out["message"] = (f"nothing fits: the nearest layout ({_degrees(layout)}, recompute={layout.recompute}, "
                      f"ZeRO-{layout.zero_stage}) needs {est.memory_bytes['peak'] / GB:.1f} GB per device, "
                      f"{capacity / GB:.1f} GB available"
                      + (f"; fits with {' or '.join(fixes)}" if fixes else "; no single change found that fits")
                      + f"; the model state alone ({state / 1e12:.2f} TB at {workload.state_bytes_per_param} B/param) "
                        f"needs at least {min_devices} devices")
    return out


def _degrees(layout) -> str:
    return ",".join(f"{k}={v}" for k, v in layout.degrees.items() if v > 1) or "1 device"


def _fits_on_doubled(model: ModelSpec, workload: Workload, cluster: Cluster) -> str | None:
    """The name of a cluster with twice the devices on which some layout fits, if one resolves."""
    from layoutsearch.search import solve
    from layoutsearch.core.topology import resolve_cluster

    name = f"{cluster.accelerator.id}-{2 * cluster.num_devices}" if cluster.num_slices == 1 else None
    try:
        bigger = resolve_cluster(name) if name else None
    except LayoutsearchError:
        return None
    if bigger is None:
        return None
    result = solve(model, workload, bigger, top_k=1)
    return name if result.layouts else None


__all__ = ["compare", "funnel", "infeasibility", "terms"]
