"""Why the winner wins, and why nothing fits when nothing does.

- ``compare``: the terms (seconds, bytes) in which two estimates differ, largest first.
- ``funnel``: how many degree tuples each rule of the registry removes, in registry order.
- ``infeasibility``: the funnel, the layout closest to fitting, what it lacks, and which
  single change would make it fit (full recompute, ZeRO-3, twice the devices).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from layoutsearch.core.errors import LayoutsearchError
from layoutsearch.core.problem import Problem, SearchRequest
from layoutsearch.core.rules import Rule
from layoutsearch.core.specs import RECOMPUTE_POLICIES
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.core.units import GB, KIB, TB
from layoutsearch.costs import memory, params
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.search import solve
from layoutsearch.search.enumerate import candidate_grid
from layoutsearch.search.ranking import simpler_because, tie_limit
from layoutsearch.search.space import (
    Space,
    problem_degree_tuples,
    with_microbatches,
    with_virtual_stages,
)
from layoutsearch.search.tables import Tables, assemble


def compare(winner: Estimate, other: Estimate, limit: int = 8) -> list[dict]:
    """Itemised terms that differ between two estimates (time in seconds, memory in bytes)."""
    rows = []
    for key in sorted(set(winner.time_s) | set(other.time_s)):
        if "/" in key or key == "bubble":
            a, b = winner.time_s.get(key, 0.0), other.time_s.get(key, 0.0)
            if abs(a - b) > 1e-6:
                rows.append(
                    {
                        "term": f"time/{key}",
                        "winner": a,
                        "other": b,
                        "difference": b - a,
                        "unit": "s",
                    }
                )
    for key in sorted(set(winner.memory_bytes) | set(other.memory_bytes)):
        if "/" in key:
            a, b = winner.memory_bytes.get(key, 0.0), other.memory_bytes.get(key, 0.0)
            if abs(a - b) > 1e6:
                rows.append(
                    {
                        "term": f"memory/{key}",
                        "winner": a,
                        "other": b,
                        "difference": b - a,
                        "unit": "B",
                    }
                )
    time_rows = sorted((r for r in rows if r["unit"] == "s"), key=lambda r: -abs(r["difference"]))
    mem_rows = sorted((r for r in rows if r["unit"] == "B"), key=lambda r: -abs(r["difference"]))
    return time_rows[:limit] + mem_rows[:limit]


def ranking_notes(result, band: tuple[float, float]) -> list[dict]:
    """How each runner-up stands against layout 1: its step-time difference (relative), whether it
    is tied with the best step time (within the tie tolerance, step-time objective), why layout 1
    ranks first when tied (the first simplicity component that differs), and whether its step time
    lies inside layout 1's uncertainty band ``band`` = (low, high), relative."""
    layouts = result.layouts
    if not layouts:
        return []
    first = layouts[0].step_time_s
    low, high = band
    best_q = None
    if result.objective == "step-time" and result.objective_value is not None and result.quantum_s:
        best_q = int(round(result.objective_value / result.quantum_s))
    notes = []
    for i, est in enumerate(layouts[1:], start=2):
        tied = (
            best_q is not None
            and len(result.metrics) >= i
            and result.metrics[i - 1]["step"] <= tie_limit(best_q, result.tie_tolerance)
        )
        reason = None
        if tied and result.space is not None and len(result.candidates) >= i:
            reason = simpler_because(result.space, result.candidates[0], result.candidates[i - 1])
        diff = est.step_time_s / first - 1 if first else 0.0
        notes.append(
            {
                "layout": i,
                "step_time_rel_diff": diff,
                "within_tie_tolerance": bool(tied),
                "simpler_by": reason,
                "within_uncertainty": bool(
                    first * (1 + low) <= est.step_time_s <= first * (1 + high)
                ),
            }
        )
    return notes


def ranking_line(note: dict, tolerance: float, band: tuple[float, float]) -> str:
    """One or two sentences on a runner-up (``ranking_notes``)."""
    i, diff = note["layout"], note["step_time_rel_diff"]
    who = "the runner-up" if i == 2 else f"layout {i}"
    how = f"{abs(diff):.1%} {'slower' if diff >= 0 else 'faster'}"
    band_text = f"band {band[0] * 100:+.0f}%..{band[1] * 100:+.0f}%"
    out = []
    if note["within_tie_tolerance"]:
        out.append(
            f"{who} is within the model's resolution of the best step time (ties below "
            f"{tolerance:.1%}): layout 1 ranks first as the simpler layout"
            + (f" ({note['simpler_by']})" if note["simpler_by"] else "")
        )
    if note["within_uncertainty"]:
        out.append(f"{who} is within the model's uncertainty: {how}, {band_text}")
    else:
        out.append(f"{who} is {how}, outside the model's uncertainty ({band_text})")
    return "\n".join(out)


def funnel(problem: Problem, rules: tuple[Rule, ...]) -> list[dict]:
    """Degree tuples (dp, fsdp, tp, pp, cp) with product = devices, and how many each rule removes.

    The rules run in registry order over the enumeration's superset (degrees x virtual stages x
    microbatches, each with its four ZeRO stages and three recompute policies); a degree tuple
    is removed when its last candidate is.
    """
    tuples = problem_degree_tuples(problem)
    ids = {name: a for name, a in tuples.items()}
    ids["tuple"] = np.arange(len(tuples["dp"]))
    c = with_microbatches(with_virtual_stages(ids), problem.workload.global_batch_seqs)
    rows = len(c["dp"])
    alive = np.ones(rows, dtype=bool)
    zero_ok = np.ones((rows, 4), dtype=bool)
    recompute_ok = np.ones(len(RECOMPUTE_POLICIES), dtype=bool)
    z = np.arange(4)
    out = [
        {
            "rule": "product of degrees = devices",
            "code": "product",
            "removed": 0,
            "remaining": len(ids["tuple"]),
        }
    ]
    left = len(ids["tuple"])
    for rule in rules:
        if rule.code in ("product", "degree"):
            continue
        if rule.needs == {"r"}:
            recompute_ok &= rule.mask(problem, {"r": np.arange(len(RECOMPUTE_POLICIES))})
        elif "z" in rule.needs:
            zero_ok &= rule.mask(
                problem, {**{k: v[:, None] for k, v in c.items()}, "z": z[None, :]}
            )
        else:
            alive &= rule.mask(problem, c)
        survivors = alive & zero_ok.any(axis=1) & recompute_ok.any()
        remaining = len(np.unique(c["tuple"][survivors]))
        out.append(
            {
                "rule": rule.title(problem),
                "code": rule.code,
                "removed": left - remaining,
                "remaining": remaining,
            }
        )
        left = remaining
    return out


def nearest(space: Space, tables: Tables) -> tuple[tuple, float] | None:
    """The candidate whose worst (stage, moment) peak is closest to the capacity: (indices, peak bytes)."""
    if not len(space.sk_k):
        return None
    sk, ri, z, o = candidate_grid(space, np.arange(len(space.sk_k)))
    if not len(sk):
        return None
    m = assemble(tables, space, sk, ri, z, o)
    i = int(np.lexsort((m["step"], m["peak"]))[0])
    return (int(sk[i]), int(ri[i]), int(z[i]), int(o[i])), float(m["peak"][i]) * KIB


def infeasibility(problem: Problem, space: Space, tables: Tables | None) -> dict:
    """The explanation printed (and put in the JSON) when no candidate fits."""
    steps = funnel(problem, space.rules)
    out = {"funnel": steps, "candidates": space.num_candidates()}
    found = nearest(space, tables) if tables is not None else None
    if found is None:
        last = next((s for s in steps if s["remaining"] == 0), steps[-1])
        rule = next((r for r in space.rules if r.code == last["code"]), None)
        if (
            rule is not None and not rule.needs
        ):  # a rule on the whole problem (model, precision): its own reason
            out["message"] = f"{rule.why(problem, {})} ({rule.code})"
        else:
            out["message"] = (
                f"no layout satisfies the rules: '{last['rule']}' ({last['code']}) removes the last "
                f"{last['removed']} degree tuples"
            )
        return out
    (row, ri, z, o), _ = found
    layout = space.layout(
        int(space.sk_shape[row]), int(space.sk_k[row]), int(space.recompute_codes[ri]), z, o
    )
    est = estimate(problem, layout, strict=False)
    capacity = est.memory_bytes["capacity"]
    fixes = []
    for name, changed in (
        ("recompute=full", replace(layout, recompute="full")),
        ("zero-stage=3", replace(layout, zero_stage=3) if layout.fsdp * layout.cp > 1 else None),
    ):
        if (
            changed is not None
            and changed != layout
            and estimate(problem, changed, strict=False).fits
        ):
            fixes.append(name)
    doubled = _fits_on_doubled(problem)
    if doubled:
        fixes.append(f"2x the devices ({doubled})")
    state = sum(
        memory.state_bytes(
            params.param_counts(problem.model)["total"], problem.workload, 0, 1
        ).values()
    )
    min_devices = int(-(-state // capacity))
    out["nearest_layout"] = {
        "degrees": layout.all_degrees,
        "recompute": layout.recompute,
        "zero_stage": layout.zero_stage,
        "num_microbatches": layout.num_microbatches,
        "peak_bytes": est.memory_bytes["peak"],
        "capacity_bytes": capacity,
        "peak_moment": est.peak_moment,
    }
    out["fixes"] = fixes
    out["message"] = (
        f"nothing fits: the nearest layout ({_degrees(layout)}, recompute={layout.recompute}, "
        f"ZeRO-{layout.zero_stage}) needs {est.memory_bytes['peak'] / GB:.1f} GB per device, "
        f"{capacity / GB:.1f} GB available"
        + (f"; fits with {' or '.join(fixes)}" if fixes else "; no single change found that fits")
        + f"; the model state alone ({state / TB:.2f} TB at {problem.workload.state_bytes_per_param} "
        f"B/param) needs at least {min_devices} devices"
    )
    return out


def _degrees(layout) -> str:
    return ",".join(f"{k}={v}" for k, v in layout.all_degrees.items() if v > 1) or "1 device"


def _fits_on_doubled(problem: Problem) -> str | None:
    """The name of a cluster with twice the devices on which some layout fits, if one resolves."""
    cluster = problem.cluster
    name = (
        f"{cluster.accelerator.id}-{2 * cluster.num_devices}" if cluster.num_slices == 1 else None
    )
    try:
        bigger = resolve_cluster(name) if name else None
    except LayoutsearchError:
        return None
    if bigger is None:
        return None
    result = solve(replace(problem, cluster_name=name, cluster=bigger), SearchRequest(top_k=1))
    return name if result.layouts else None
