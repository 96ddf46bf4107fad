"""Why the winner wins, and why nothing fits when nothing does.

- ``compare``: the terms (seconds, bytes) in which two estimates differ, largest first.
- ``funnel``: how many degree tuples each rule of the registry removes, in registry order.
- ``infeasibility``: the funnel, the layout closest to fitting, what it lacks, and which
  single change would make it fit (full recompute, ZeRO-3, twice the devices).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any

import numpy as np

from layoutsearch.core.errors import LayoutsearchError
from layoutsearch.core.numbers import divisors, odd_part
from layoutsearch.core.problem import MAX_VIRTUAL_STAGES, Problem, SearchRequest
from layoutsearch.core.rules import Cand, Rule, refused_offloads
from layoutsearch.core.specs import ALL_DEGREE_NAMES, OFFLOADS, RECOMPUTE_POLICIES
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.core.units import GB, KIB, TB
from layoutsearch.costs import memory, params, terms
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.search import solve
from layoutsearch.search.ranking import (
    layout_risks,
    risk_flags,
    risk_names,
    riskier_because,
    simpler_because,
    tie_limit,
)
from layoutsearch.search.space import (
    Space,
    problem_degree_tuples,
    with_cp_flavours,
    with_microbatches,
    with_virtual_stages,
)
from layoutsearch.search.tables import Tables, assemble


def versus_claim(
    winner: Estimate, other: Estimate | None, band: tuple[float, float]
) -> dict[str, Any]:
    """How far the winner's step time claims to beat ``other``'s, and whether the model can tell
    them apart: only when their uncertainty bands (relative ``band`` = (low, high), the 80% band of
    a prediction: ``core.uncertainty``) do not overlap, winner x (1 + high) < other x (1 + low).
    ``other`` None: no completion of the given degrees fits."""
    if other is None:
        return {
            "step_time_s": None,
            "speedup": None,
            "distinguishable": None,
            "verdict": "infeasible",
        }
    speedup = other.step_time_s / winner.step_time_s if winner.step_time_s else 1.0
    apart = winner.step_time_s * (1 + claim_margin(band)) < other.step_time_s
    if speedup <= 1.0:
        verdict = (
            "not slower"  # the given layout is as fast or faster (it ranked lower by simplicity)
        )
    else:
        verdict = "distinguishable" if apart else "not distinguishable"
    return {
        "step_time_s": other.step_time_s,
        "speedup": speedup,
        "distinguishable": bool(apart),
        "verdict": verdict,
    }


def claim_margin(band: tuple[float, float]) -> float:
    """The speed-up, less 1, beyond which ``versus_claim`` calls a claim distinguishable: where the two predictions'
    relative bands (low, high) stop overlapping, (1 + high) / (1 + low) - 1."""
    low, high = band
    return (1.0 + high) / (1.0 + low) - 1.0


def safer_by(winner: Estimate, other: Estimate) -> str | None:
    """The first risk (``ranking.risk_names``) ``other`` carries and ``winner`` does not, else None: why
    the ranking puts the winner first where ``other`` is as fast or faster inside the risk band."""
    carried = [set(layout_risks(est)) for est in (winner, other)]
    flags = [tuple(int(name in risks) for name in risk_names()) for risks in carried]
    return riskier_because(flags[0], flags[1])


def slice_wait_note(winner: Estimate) -> dict | None:
    """What the winner's step waits for the slowest slice of a multislice TPU job (costs.terms.slice_wait_share):
    {"slices", "jitter", "expected_max" (E[max of that many standard normals]), "seconds", "step_share"}; None on
    one slice."""
    slices = winner.cluster.num_slices
    if slices <= 1:
        return None
    seconds = winner.time_s.get("overhead/slice_sync", 0.0)
    return {
        "slices": slices,
        "jitter": terms.SLICE_STEP_JITTER,
        "expected_max": terms.expected_max_of_normals(slices),
        "seconds": seconds,
        "step_share": seconds / winner.step_time_s if winner.step_time_s else 0.0,
    }


def slice_wait_line(note: dict) -> str:
    """One sentence on ``slice_wait_note``."""
    return (
        f"the {note['slices']} slices meet over the data-centre network once a step and wait for the slowest: "
        f"{note['seconds']:.4f} s ({note['step_share']:.1%} of layout 1's step), a jitter of {note['jitter']:.4f} x "
        f"{note['expected_max']:.3f} (the expected maximum of {note['slices']} standard normals) of the slices' time, "
        "fitted on MaxText's published multislice runs (results/multislice.md)"
    )


def compare(winner: Estimate, other: Estimate, limit: int = 8) -> list[dict]:
    """Itemised terms that differ between two estimates (time in seconds, memory in bytes)."""
    rows: list[dict[str, Any]] = []
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
        safer_by = _safer_by(result, i)
        tied = (  # the same risk, and the two step times within the tolerance of each other
            best_q is not None
            and safer_by is None
            and len(result.metrics) >= i
            and result.metrics[i - 1]["step"]
            <= tie_limit(result.metrics[0]["step"], result.tie_tolerance)
            and result.metrics[0]["step"]
            <= tie_limit(result.metrics[i - 1]["step"], result.tie_tolerance)
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
                "safer_by": safer_by,
                "within_uncertainty": bool(
                    first * (1 + low) <= est.step_time_s <= first * (1 + high)
                ),
            }
        )
    return notes


def _safer_by(result, i: int) -> str | None:
    """The first risk (``ranking.RISKS``) runner-up ``i`` carries and layout 1 does not, else None."""
    if result.space is None or result.tables is None or len(result.candidates) < i:
        return None
    flags = [
        tuple(
            int(f[0])
            for f in risk_flags(
                result.space, [c[0]], [c[2]], [c[3]], [m["peak"]], result.tables.capacity_kib
            )
        )
        for c, m in (
            (result.candidates[0], result.metrics[0]),
            (result.candidates[i - 1], result.metrics[i - 1]),
        )
    ]
    return riskier_because(flags[0], flags[1])


def ranking_line(note: dict, tolerance: float, band: tuple[float, float], risk: float) -> str:
    """One or two sentences on a runner-up (``ranking_notes``)."""
    i, diff = note["layout"], note["step_time_rel_diff"]
    who = "the runner-up" if i == 2 else f"layout {i}"
    how = f"{abs(diff):.1%} {'slower' if diff >= 0 else 'faster'}"
    band_text = f"band {band[0] * 100:+.0f}%..{band[1] * 100:+.0f}%"
    out = []
    if note.get("safer_by") and diff < 0:
        out.append(
            f"{who} is {how} but carries a risk layout 1 does not ({note['safer_by']}): inside "
            f"the {risk:.0%} risk band the lower-risk layout ranks first"
        )
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


def funnel(problem: Problem, rules: tuple[Rule, ...], sequence_parallel: bool = True) -> list[dict]:
    """Degree tuples (dp, fsdp, tp, pp, cp) with product = devices, and how many each rule removes;
    each tuple with the searched space's one ``sequence_parallel``, as ``build_space`` gives its rules.

    The rules run in registry order over the enumeration's superset (degrees x virtual stages x
    microbatches, each with its four ZeRO stages and three recompute policies); a degree tuple
    is removed when its last candidate is. Each tuple's removal is found once (``_removed_at``)
    rather than re-counted after every rule.
    """
    degrees = problem_degree_tuples(problem)
    sp = np.full(len(degrees["tp"]), int(sequence_parallel), dtype=np.int64)
    tuples = {**degrees, "sp": sp}
    steps = [rule for rule in rules if rule.code not in ("product", "degree")]
    removed_at = _removed_at(problem, tuples, steps)
    left = len(removed_at) - np.cumsum(np.bincount(removed_at, minlength=len(steps) + 1))
    out: list[dict[str, Any]] = [
        {
            "rule": "product of degrees = devices",
            "code": "product",
            "removed": 0,
            "remaining": len(removed_at),
        }
    ]
    for i, rule in enumerate(steps):
        out.append(
            {
                "rule": rule.title(problem),
                "code": rule.code,
                "removed": out[-1]["remaining"] - int(left[i]),
                "remaining": int(left[i]),
            }
        )
    return out


FUNNEL_CHUNK_ROWS = 1 << 18  # degree tuples (or expanded key rows) evaluated at once
_DEGREE_FIELDS = frozenset(ALL_DEGREE_NAMES)
_ZERO_STAGES = np.arange(4)
_NONE = np.zeros((1, 1), dtype=np.int64)  # offload none


def _removed_at(problem: Problem, tuples: Cand, steps: list[Rule]) -> np.ndarray:
    """Per degree tuple, the index of the rule in ``steps`` that removes its last candidate
    (``len(steps)`` if none does).

    A candidate falls at the first rule it breaks, a tuple with its last candidate: the latest
    fall among its (v, K) rows, where a row falls at its first broken rule or when its last ZeRO
    stage has, and every row once no recompute policy is left. Rules on degrees alone run once
    per tuple; those that read v or K run once per distinct value of the degrees they read
    (with dp and fsdp, which set the microbatch counts), expanded by v and K.
    """
    never = len(steps)
    n = len(tuples["dp"])
    everything = never  # when a rule on the whole problem or on recompute leaves nothing
    recompute_ok = np.ones(len(RECOMPUTE_POLICIES), dtype=bool)
    offload_ok = np.ones(len(OFFLOADS), dtype=bool)
    on_degrees, on_flavours, on_rows = [], [], []
    for i, rule in enumerate(steps):
        if rule.needs == {"r"}:
            recompute_ok &= rule.mask(problem, {"r": np.arange(len(RECOMPUTE_POLICIES))})
            if not recompute_ok.any():
                everything = min(everything, i)
        elif not rule.needs:
            if not rule.mask(problem, {}).all():
                everything = min(everything, i)
        elif rule.needs == {"f"}:  # the offload choices: none left leaves nothing
            offload_ok &= rule.mask(problem, {"f": np.arange(len(OFFLOADS))})
            if not offload_ok.any():
                everything = min(everything, i)
        elif rule.needs - {"z", "f"} <= _DEGREE_FIELDS:
            on_degrees.append((i, rule))
        elif rule.needs <= _DEGREE_FIELDS | {"cpf"}:
            on_flavours.append((i, rule))
        else:
            on_rows.append((i, rule))
    key_fields = [
        f
        for f in ALL_DEGREE_NAMES
        if f in ("dp", "fsdp") or any(f in rule.needs for _, rule in on_rows)
    ]
    key_of, row_falls = _row_falls(problem, tuples, key_fields, on_rows, never)
    flavour_falls = _flavour_falls(problem, tuples, on_flavours, never)
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, FUNNEL_CHUNK_ROWS):
        part = slice(start, start + FUNNEL_CHUNK_ROWS)
        falls, zero_falls = _falls(
            problem, {f: a[part] for f, a in tuples.items()}, on_degrees, never
        )
        per_zero = np.minimum(zero_falls, row_falls[key_of[part]]).max(axis=1)
        out[part] = np.minimum(np.minimum(falls, per_zero), flavour_falls[part])
    return np.minimum(out, everything)


def _flavour_falls(problem: Problem, tuples: Cand, rules: list, never: int) -> np.ndarray:
    """Per tuple, the latest fall among its CP flavours under ``rules`` (those that read the flavour
    and degrees alone), evaluated once per distinct value of the degrees they read: a candidate falls
    at the first of the degree, flavour and (v, K, z) rules it breaks, so its tuple falls at the
    least of the three latest falls."""
    if not rules:
        return np.full(len(tuples["dp"]), never, dtype=np.int64)
    fields = sorted(set().union(*(rule.needs for _, rule in rules)) - {"cpf"})
    keys, key_of = np.unique(
        np.stack([tuples[f] for f in fields], axis=1), axis=0, return_inverse=True
    )
    c = with_cp_flavours(
        {**{f: keys[:, j] for j, f in enumerate(fields)}, "key": np.arange(len(keys))}
    )
    falls, _ = _falls(problem, c, rules, never)
    latest = np.full(len(keys), -1, dtype=np.int64)
    np.maximum.at(latest, c["key"], falls)
    return latest[key_of.reshape(-1)]


def _row_falls(
    problem: Problem, tuples: Cand, key_fields: list[str], rules: list, never: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each tuple's key (its ``key_fields``) and, per key and ZeRO stage, the latest fall among the
    key's (v, K) rows under ``rules`` (those that read v or K)."""
    # one integer per key, the fields' ranks in mixed radix: a field takes at most as many values
    # as the device count has divisors, so the code stays below 2**63
    code = np.zeros(len(tuples["dp"]), dtype=np.int64)
    for f in key_fields:
        values, rank = np.unique(tuples[f], return_inverse=True)
        code = code * len(values) + rank.reshape(-1)
    _, first, key_of = np.unique(code, return_index=True, return_inverse=True)
    keys = np.stack([tuples[f][first] for f in key_fields], axis=1)
    key_of = key_of.reshape(-1)
    out = np.full((len(keys), len(_ZERO_STAGES)), never, dtype=np.int64)
    if not rules:
        return key_of, out
    batch = problem.workload.global_batch_seqs
    per_key = MAX_VIRTUAL_STAGES * len(divisors(batch))  # the most (v, K) rows of one key
    step = max(1, FUNNEL_CHUNK_ROWS // per_key)
    for start in range(0, len(keys), step):
        ids = np.arange(start, min(start + step, len(keys)))
        c = {f: keys[ids, j] for j, f in enumerate(key_fields)}
        c["key"] = ids
        c = with_microbatches(with_virtual_stages(c), batch)
        falls, zero_falls = _falls(problem, c, rules, never)
        row = np.minimum(falls[:, None], zero_falls)
        first = np.flatnonzero(np.r_[True, c["key"][1:] != c["key"][:-1]])
        out[ids] = np.maximum.reduceat(row, first, axis=0)
    return key_of, out


def _falls(problem: Problem, c: Cand, rules: list, never: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``c``, the index of the first rule it breaks, and per row and ZeRO stage the
    first rule reading z that the pair breaks (``never`` where none)."""
    n = len(next(iter(c.values())))
    falls = np.full(n, never, dtype=np.int64)
    zero_falls = np.full((n, len(_ZERO_STAGES)), never, dtype=np.int64)
    for i, rule in rules:
        if "z" in rule.needs:
            ok = rule.mask(
                problem,
                # beside the degrees, the funnel counts the offload choice as none
                {**{k: v[:, None] for k, v in c.items()}, "z": _ZERO_STAGES[None, :], "f": _NONE},
            )
            zero_falls = np.where(
                np.broadcast_to(ok, zero_falls.shape), zero_falls, np.minimum(zero_falls, i)
            )
        else:
            ok = np.broadcast_to(rule.mask(problem, c), falls.shape)
            falls = np.where(ok, falls, np.minimum(falls, i))
    return falls, zero_falls


NEAREST_CHUNK_ROWS = 1 << 14  # (S, K) rows whose peaks are tabulated at once


def nearest(space: Space, tables: Tables) -> tuple[tuple, float] | None:
    """The candidate whose worst (stage, moment) peak is closest to the capacity: (indices, peak bytes).

    The least peak, then the least step time, then the first in enumeration order (sk, r, z, o).
    Memory does not depend on the axis order o, so the peaks are found per (sk, r, z) and only
    those with the least peak are costed over their orders."""
    if not len(space.sk_k):
        return None
    s = space.sk_shape
    allowed = space.zero_mask[s] & space.order_mask[s].any(axis=1)[:, None]  # [sk, z]
    n_r = len(space.recompute_codes)
    unset = np.iinfo(np.int64).max
    least = unset
    tied: list[tuple[np.ndarray, ...]] = []
    for start in range(0, len(s), NEAREST_CHUNK_ROWS):
        rows = np.arange(start, min(start + NEAREST_CHUNK_ROWS, len(s)))
        mem = tables.MZ[s[rows]][:, None] + tables.MB[rows][:, :, None]  # [sk, r, z, st, moment]
        peak = np.where(
            allowed[rows][:, None, :],
            mem.reshape(len(rows), n_r, space.num_zero, -1).max(axis=-1),
            unset,
        )
        low = int(peak.min())
        if low < least:
            least, tied = low, []
        if low == least < unset:
            j, ri, z = np.nonzero(peak == least)
            tied.append((rows[j], ri, z))
    if least == unset:
        return None
    sk, ri, z = (np.concatenate(a) for a in zip(*tied))
    best = None
    for start in range(0, len(sk), NEAREST_CHUNK_ROWS):
        part = slice(start, start + NEAREST_CHUNK_ROWS)
        j, o = np.nonzero(space.order_mask[s[sk[part]]])
        cand = (sk[part][j], ri[part][j], z[part][j], o)
        steps = assemble(tables, space, *cand)["step"]
        i = int(np.argmin(steps))
        if best is None or steps[i] < best[0]:
            best = (int(steps[i]), tuple(int(a[i]) for a in cand))
    assert best is not None  # some candidate reaches the least peak
    return best[1], float(least) * KIB


def _batch_limit(problem: Problem) -> str:
    """Where the global batch caps data parallelism below the device count, what that leaves to tp, pp and cp:
    dp x fsdp divides the devices and, with whole sequences per microbatch, the batch, so it divides their
    greatest common divisor g, and tp x pp x cp is a multiple of r = devices / g (576 GB200s at 1,024
    sequences: 9). Where r has an odd factor, the batch that many times larger, or the largest count of g x 2^k
    devices, leaves r a power of two. The rules that then leave nothing are the model's divisibility of heads,
    layers and sequence; the sentence names the numbers, not a rule. Empty where the batch takes every device."""
    devices, batch = problem.cluster.num_devices, problem.workload.global_batch_seqs
    g = math.gcd(devices, batch)
    r = devices // g
    if r == 1:
        return ""
    text = (
        f"; {batch:,} sequences a step put at most {g:,} of the {devices:,} devices in data parallelism "
        f"(whole sequences), so tp x pp x cp must be a multiple of {r:,}"
    )
    odd = odd_part(r)
    if odd == 1:
        return text
    return text + (
        f": a batch of {batch * odd:,} sequences, or {g << (r.bit_length() - 1):,} devices, would leave it a "
        "power of two"
    )


def _refused_choice(problem: Problem, space: Space, rule: Rule) -> dict | None:
    """Where ``rule`` reads only choices the search was asked to try (the offload, ZeRO stage, recompute policy), no
    degree, the first such choice it refuses (plain ints, as ``Rule.why`` takes one), else None: its reason then
    names what is missing for that choice, which the rule's title cannot."""
    choices = {"f": space.offload_codes, "z": np.arange(4), "r": space.recompute_codes}
    if not rule.needs or not rule.needs <= choices.keys():
        return None
    names = sorted(rule.needs)
    for values in itertools.product(*(choices[n] for n in names)):
        cand = {n: int(v) for n, v in zip(names, values, strict=True)}
        if not np.all(rule.holds(problem, {n: np.array([v]) for n, v in cand.items()})):
            return cand
    return None


def infeasibility(problem: Problem, space: Space, tables: Tables | None) -> dict:
    """The explanation printed (and put in the JSON) when no candidate fits."""
    steps = funnel(problem, space.rules, space.sequence_parallel)
    out = {"funnel": steps, "candidates": space.num_candidates()}
    found = nearest(space, tables) if tables is not None else None
    if found is None and len(space.order_mask) and not space.order_mask.any():
        tuples = len(np.unique(space.placed))
        out["message"] = (
            f"no axis order places the {tuples} degree tuple(s) the rules leave on "
            f"{problem.cluster_name}"
            + (
                f" so that {space.launch}'s launcher, which numbers ranks in its own fixed order (tp "
                "fastest), builds the costed groups (export/rank_order.py); nearest: other degrees or "
                "another export target"
                if space.launch
                else ""
            )
        )
        return out
    if found is None:
        last = next((s for s in steps if s["remaining"] == 0), steps[-1])
        rule = next((r for r in space.rules if r.code == last["code"]), None)
        refused = _refused_choice(problem, space, rule) if rule is not None else None
        if (
            rule is not None and not rule.needs
        ):  # a rule on the whole problem (model, precision): its own reason
            out["message"] = f"{rule.why(problem, {})} ({rule.code})"
        elif rule is not None and refused is not None:  # a choice asked for: why not it
            out["message"] = f"{rule.why(problem, refused)} ({rule.code})"
        else:
            out["message"] = (
                f"no layout satisfies the rules: '{last['rule']}' ({last['code']}) removes the last "
                f"{last['removed']} degree tuples"
            ) + _batch_limit(problem)
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
        ("--offload optimizer", _offloaded(problem, layout)),
    ):
        if (
            changed is not None
            and changed != layout
            and _fits(estimate(problem, changed, strict=False))
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


def _fits(est: Estimate) -> bool:
    """Whether an estimated layout fits the device's memory and, offloading, the host's."""
    return est.fits and not any(v.code == "host-memory" for v in est.violations)


def _offloaded(problem: Problem, layout):
    """The layout with its optimizer state offloaded, where the host's fields are catalogued (else None)."""
    if layout.offload != "none" or refused_offloads(problem, ("optimizer",)):
        return None
    return replace(layout, offload="optimizer")


def _degrees(layout) -> str:
    return ",".join(f"{k}={v}" for k, v in layout.all_degrees.items() if v > 1) or "1 device"


def _fits_on_doubled(problem: Problem) -> str | None:
    """The name of a cluster with twice the devices on which some layout fits, if one resolves."""
    cluster = problem.cluster
    name = (
        f"{cluster.accelerator.id}-{2 * cluster.num_devices}" if cluster.num_slices == 1 else None
    )
    if not name:
        return None
    try:
        bigger = resolve_cluster(name)
    except LayoutsearchError:
        return None
    result = solve(replace(problem, cluster_name=name, cluster=bigger), SearchRequest(top_k=1))
    return name if result.layouts else None
