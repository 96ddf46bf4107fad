"""The library core under the command line and the Python API: from the declared options
(``core.options``) to a run and its result document (docs/OUTPUT.md).

``solve``: the best layouts, the reason when nothing fits, the time and cost to train and a
what-if re-solve on scaled hardware. ``explain``: the same search, with why the winner wins and
optionally its sensitivity to each hardware number. ``estimate``: one layout, with the same plan
numbers and a what-if re-estimate. Option errors name the option through ``label`` (the CLI's
``--fix``, the API's ``fix``).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

from layoutsearch.core.errors import (
    CatalogueError,
    InvalidArgumentError,
    InvalidLayoutError,
    LayoutsearchWarning,
)
from layoutsearch.core.frameworks import framework_of_target
from layoutsearch.core.numbers import odd_part
from layoutsearch.core.options import (
    LayoutOptions,
    PlanOptions,
    ProblemOptions,
    SearchOptions,
    WorkloadOptions,
)
from layoutsearch.core.parse import parse_axes, parse_choices, parse_degrees, parse_names
from layoutsearch.core.problem import Problem, SearchRequest, check_moe_options
from layoutsearch.core.problem import SearchOptions as Restrictions
from layoutsearch.core.rules import refused_offloads
from layoutsearch.core.specs import (
    ALL_DEGREE_NAMES,
    CP_FLAVOURS,
    DEGREE_NAMES,
    OFFLOADS,
    RECOMPUTE_POLICIES,
    Layout,
    Objective,
    Schedule,
)
from layoutsearch.core.stages import SPLIT_NAMES, default_microbatches
from layoutsearch.core.topology import is_cluster_file, parse_cluster_name, resolve_cluster
from layoutsearch.core.uncertainty import largest_peak_that_may_run
from layoutsearch.costs.estimate import Estimate, capacity_bytes
from layoutsearch.costs.estimate import estimate as estimate_layout
from layoutsearch.frameworks import Capabilities, capabilities_of
from layoutsearch.report import planning
from layoutsearch.report.output import (
    band_of,
    comparison_band,
    estimate_document,
    layout_record,
    set_price,
    solve_document,
    what_if_document,
)
from layoutsearch.search import SearchResult
from layoutsearch.search import solve as solve_problem
from layoutsearch.search.explain import (
    compare,
    infeasibility,
    ranking_notes,
    safer_by,
    slice_wait_note,
    versus_claim,
)

__all__ = ["SolveRun", "EstimateRun", "WhatIf", "solve", "explain", "estimate", "build_problem"]

Label = Callable[[str], str]

# How far a command may run past --time-limit: the limit is checked between phases, and CP-SAT
# gets at least 0.05 s a phase; building the candidate space and its tables cannot be cut short,
# so a larger overrun is reported in a warning naming that time (interpreter start-up not counted).
TIME_LIMIT_SLACK_S = 1.0


def flag(name: str) -> str:
    """How the command line names an option in an error: ``--fix``."""
    return "--" + name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class WhatIf:
    """The what-if run: its `what_if` object (OUTPUT.md) and the winner on the scaled hardware."""

    document: dict
    winner: Estimate | None
    result: SearchResult | None


@dataclasses.dataclass(frozen=True)
class SolveRun:
    """One search (solve, explain): its problem, result, document (OUTPUT.md), the explanation
    when nothing fits, and the what-if. The result's attributes (``layouts``, ``status``, ...)
    are the run's too."""

    problem: Problem
    result: SearchResult
    document: dict
    explanation: dict | None
    what_if: WhatIf | None = None
    fallbacks: tuple = ()  # report.fallback.Fallback rows (--fallback-nodes)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.result, name)


@dataclasses.dataclass(frozen=True)
class EstimateRun:
    """One layout's estimate, its document (OUTPUT.md) and the what-if; the Estimate's attributes
    (``step_time_s``, ``memory_bytes``, ``fits``, ...) are the run's too."""

    problem: Problem
    estimate: Estimate
    document: dict
    what_if: WhatIf | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.estimate, name)


def build_problem(
    problem: ProblemOptions, workload: WorkloadOptions, tokens: float | None = None
) -> Problem:
    """The Problem of the options (the workload carries the training tokens when given)."""
    asked = workload.workload(problem.seqs, problem.seq_len, tokens)
    built = Problem.build(problem.model, problem.cluster, asked)
    # the options as given, before the framework's defaults fill them
    check_moe_options(built.model_id, built.model, asked)
    return built


def search_request(
    search: SearchOptions, *, target: str | None, top_k: int | None, label: Label
) -> SearchRequest:
    """The SearchRequest of the search options (texts parsed, each error naming its option)."""
    recompute = search.recompute
    return SearchRequest(
        options=Restrictions(
            fix=parse_degrees(search.fix, label("fix")) if search.fix is not None else {},
            choices=(
                parse_choices(search.choices, label("choices"))
                if search.choices is not None
                else {}
            ),
            only=(
                parse_names(search.only, DEGREE_NAMES, label("only"))
                if search.only is not None
                else None
            ),
            recompute=(
                parse_names(recompute, RECOMPUTE_POLICIES, label("recompute"), "policy")
                if recompute is not None
                else None
            ),
            schedules=(
                parse_names(
                    search.schedules,
                    tuple(s.value for s in Schedule),
                    label("schedules"),
                    "schedule",
                )
                if search.schedules is not None
                else None
            ),
            cp_flavours=(
                parse_names(search.cp_flavours, CP_FLAVOURS, label("cp_flavours"), "flavour")
                if search.cp_flavours is not None
                else None
            ),
            offload=parse_names(search.offload, OFFLOADS, label("offload"), "choice"),
            pipeline_splits=(
                parse_names(
                    search.pipeline_splits,
                    tuple(SPLIT_NAMES.values()),
                    label("pipeline_splits"),
                    "split",
                )
                if search.pipeline_splits is not None
                else None
            ),
            sequence_parallel=search.sequence_parallel,
        ),
        objective=search.objective.value,
        top_k=top_k or search.top,
        method=search.method.value,
        time_limit_s=search.time_limit,
        target=target,
    )


def check_plan(plan: PlanOptions, label: Label = flag) -> dict[str, float] | None:
    """The plan options checked before any solving; the what-if factors (None without one)."""
    planning.check_tokens(plan.tokens, label("tokens"))
    planning.check_price(plan.price_per_device_hour, label("price_per_device_hour"))
    if plan.price_per_device_hour is not None and plan.tokens is None:
        raise InvalidArgumentError(
            f"{label('price_per_device_hour')} {plan.price_per_device_hour:g}: a price prices the "
            f"device-hours to train {label('tokens')} tokens; give {label('tokens')} too"
        )
    return planning.parse_what_if(plan.what_if, label("what_if")) if plan.what_if else None


def _search(
    problem: ProblemOptions,
    workload: WorkloadOptions,
    search: SearchOptions,
    plan: PlanOptions,
    *,
    target: str | None,
    top_k: int | None,
    label: Label,
    deadline: float,
) -> tuple[SolveRun, SearchRequest]:
    """Solve, explain why nothing fits when nothing does, price every layout record. With an
    export ``target`` and no framework, the step time assumes the target framework's overlap."""
    if target and workload.framework is None:
        workload = workload.model_copy(update={"framework": framework_of_target(target)})
    prob = planning.with_training_tokens(build_problem(problem, workload), plan.tokens)
    request = search_request(search, target=target, top_k=top_k, label=label)
    resilience = planning.resilience_of(plan)  # time-to-train ranks by each layout's goodput
    request = dataclasses.replace(request, time_limit_s=_left(deadline), resilience=resilience)
    result = proven_or_feasible(solve_problem(prob, request))
    # asked-for choices no layout can take: said (nothing feasible: the explanation names the rule instead)
    unsearched = unsearched_choices(prob, request.options, target, label) if result.layouts else []
    for said in unsearched:
        warnings.warn(said, LayoutsearchWarning, stacklevel=2)
    explanation = (
        None
        if result.layouts
        else {"message": result.stopped, "stopped": True}
        if result.stopped
        else infeasibility(prob, result.space, result.tables)
    )
    document = solve_document(prob, result, explanation, resilience=resilience)
    document["solver"]["not_searched"] = unsearched
    set_price(document["layouts"], plan.price_per_device_hour)
    return SolveRun(prob, result, document, explanation), request


# the list options a user may ask for and the Capabilities field that names what an export target writes of them
WRITABLE = {
    "schedules": "pipeline_schedules",
    "cp_flavours": "cp_flavours",
    "offload": "offload",
    "pipeline_splits": "pipeline_splits",
    "recompute": "recompute_policies",
}
# the options only a pipelined layout (pp > 1) takes: a layout without one was searched whatever they say
PIPELINE_OPTIONS = ("schedules", "pipeline_splits")


def unsearched_choices(
    problem: Problem, options: Restrictions, target: str | None, label: Label = flag
) -> list[str]:
    """One line for each option whose asked-for values no layout can take, so a plan never reads as if they had
    been weighed and lost: those ``target`` cannot write (its ``Capabilities``), and offloads the part's hardware
    file gives no host for (``rules.refused_offloads``)."""
    caps = capabilities_of(target) if target else None
    out = [] if caps is None else _unwritable(options, caps, label)
    refused = refused_offloads(
        problem, [o for o in options.offload if not caps or o in caps.offload]
    )
    if refused:
        out.append(
            f"{label('offload')} {','.join(refused)}: not searched, no layout can take it: "
            f"{next(iter(refused.values()))}"
        )
    return out


def _unwritable(options: Restrictions, caps: Capabilities, label: Label) -> list[str]:
    """A line for each list option with values the export target cannot write (``WRITABLE``)."""
    out = []
    for option, field in WRITABLE.items():
        writes = getattr(caps, field)
        lost = [v for v in getattr(options, option) or () if v not in writes]
        if lost:
            scope = (
                " in a pipeline (layouts with pp=1 need none)" if option in PIPELINE_OPTIONS else ""
            )
            out.append(
                f"{label(option)} {','.join(lost)}: not searched{scope}, {caps.framework} cannot write "
                f"{'it' if len(lost) == 1 else 'them'} (it writes {', '.join(writes) or 'none'})"
            )
    return out


def _left(deadline: float) -> float:
    """The seconds left to ``deadline`` for a search (CP-SAT gets its least time past it)."""
    return max(0.0, deadline - time.perf_counter())


def proven_or_feasible(result: SearchResult) -> SearchResult:
    """OPTIMAL only when the ranking is proven too: a least step time proven while the simplest
    of the tied layouts was not (the time limit ran out) is FEASIBLE, its ranking FEASIBLE."""
    if not result.layouts or result.ranking_status == "OPTIMAL":
        return result
    return dataclasses.replace(result, status="FEASIBLE", ranking_status="FEASIBLE")


def check_deadline(started: float, time_limit_s: float, results: list[SearchResult]) -> None:
    """A warning when the command ran past its time limit by more than the slack, naming the
    time its searches spent outside CP-SAT (candidate spaces and tables, built whole)."""
    took = time.perf_counter() - started
    if took <= time_limit_s + TIME_LIMIT_SLACK_S:
        return
    outside = sum(max(0.0, r.wall_s - r.solver_wall_s) for r in results)
    what = (
        f"the search outside CP-SAT (the {results[0].num_candidates:,} candidates, their tables "
        "and bounds)"
        if len(results) == 1
        else f"its {len(results)} searches outside CP-SAT (candidates, tables and bounds)"
    )
    warnings.warn(
        f"took {took:.1f} s, over the time limit of {time_limit_s:g} s: {what} took "
        f"{outside:.1f} s and is not cut short",
        LayoutsearchWarning,
        stacklevel=2,
    )


def solve(
    problem: ProblemOptions,
    workload: WorkloadOptions,
    search: SearchOptions,
    plan: PlanOptions,
    *,
    export: str | None = None,
    label: Label = flag,
    on_phase: Callable[[str], None] = lambda _text: None,
) -> SolveRun:
    """The best layouts (only those ``export`` can express, when given), priced, with the
    what-if re-solve in ``document['what_if']`` when the plan asks for one. ``search.time_limit``
    bounds the whole run (every search in it), within ``TIME_LIMIT_SLACK_S``; ``on_phase`` is
    told each search as it starts (a progress line)."""
    started = time.perf_counter()
    deadline = started + search.time_limit
    factors = check_plan(plan, label)
    on_phase(f"searching the layouts{f' {export} can express' if export else ''}")
    run, request = _search(
        problem, workload, search, plan, target=export, top_k=None, label=label, deadline=deadline
    )
    if plan.fallback_nodes and run.result.layouts:
        on_phase("searching the fallback layouts")
        from layoutsearch.report import fallback  # only with --fallback-nodes (import time)

        rows, run.document["fallback"] = fallback.of_plan(
            run.problem, request, run.result.layouts[0], plan, label("fallback_nodes")
        )
        run = dataclasses.replace(run, fallbacks=rows)
    searches = [run.result]
    fewer = fewer_devices(run.problem) if request.objective == Objective.step_time else None
    if fewer and run.result.layouts and _left(deadline) > 0:  # advisory: only with time left
        on_phase(f"searching {fewer}, whose data parallelism the batch divides, to compare")
        searches.append(_compare_fewer_devices(run, request, fewer, deadline))
    if export and run.result.layouts and _left(deadline) > 0:  # advisory: only with time left
        on_phase(f"searching without {export}'s limits, to compare")
        searches.append(_compare_unrestricted(run, request, export, deadline))
    if factors:
        on_phase("re-solving on the what-if hardware")
        run = _what_if(run, request, factors, plan, deadline)
        assert run.what_if and run.what_if.result, "_what_if re-solves"
        searches.append(run.what_if.result)
    check_deadline(started, search.time_limit, searches)
    return run


def _what_if(
    run: SolveRun, request: SearchRequest, factors: dict, plan: PlanOptions, deadline: float
) -> SolveRun:
    """The run with its what-if: the winner re-solved on the scaled hardware."""
    result = solve_problem(
        planning.scaled_problem(run.problem, factors),
        dataclasses.replace(request, top_k=1, time_limit_s=_left(deadline)),
    )
    result = proven_or_feasible(result)
    base = run.result.layouts[0] if run.result.layouts else None
    winner = result.layouts[0] if result.layouts else None
    doc = what_if_document(
        factors,
        base,
        winner,
        method="re-solved",
        status=result.status,
        base_on_other=planning.re_estimate(base, factors) if base else None,
        price_per_device_hour=plan.price_per_device_hour,
        resilience=planning.resilience_of(plan),
    )
    run.document["what_if"] = doc
    return dataclasses.replace(run, what_if=WhatIf(doc, winner, result))


def _compare_unrestricted(
    run: SolveRun, request: SearchRequest, target: str, deadline: float
) -> SearchResult:
    """The unrestricted search, and a warning when ``target`` makes the plan slower than the model can
    tell apart: its best layout's step beyond the unrestricted winner's by more than their uncertainty
    bands allow (``versus_claim``'s distinguishable: the framework's limits, not the hardware, make the
    plan slow; until 2026-12-06 only from 1.5x, and torchtitan 0.3's 1.33x for Llama 3 405B on h100-1024
    went unsaid)."""
    free = solve_problem(
        run.problem,
        dataclasses.replace(request, target=None, top_k=1, time_limit_s=_left(deadline)),
    )
    if not free.layouts:
        return free
    ours, best = run.result.layouts[0], free.layouts[0]
    if not versus_claim(best, ours, comparison_band(best))["distinguishable"]:
        return free
    warnings.warn(
        f"{target} cannot express the fast layouts of this problem: its best reaches "
        f"{ours.mfu:.1%} MFU ({ours.step_time_s:.3g} s a step), the unrestricted winner "
        f"{best.mfu:.1%} ({best.step_time_s:.3g} s, {_degrees(best)}: "
        f"{ours.step_time_s / best.step_time_s:.2f}x faster, beyond the model's uncertainty); "
        f"`layoutsearch solve --framework {run.problem.workload.framework}` (no --export) shows it",
        LayoutsearchWarning,
        stacklevel=2,
    )
    return free


def fewer_devices(problem: Problem) -> str | None:
    """The catalogue GPU cluster to compare a solve with when the device count's odd factor cannot go to
    data parallelism: the global batch does not divide by it, so tp, pp or cp must carry it (576 GB200s
    at 1,024 sequences: the 9 becomes a 9-stage pipeline). The largest count of 2^a x g devices, g the
    part of that odd factor the batch divides, under the cluster's, named as the cluster is
    (``gb200-512``); None where the batch takes the whole odd factor, or the cluster is not a
    catalogue name (a file, a problem file's own) or a TPU slice or slices (their sizes are not free)."""
    name = problem.cluster_name
    if is_cluster_file(name) or problem.cluster.name != name:
        return None
    try:  # an inline cluster of a problem file is named as its file says
        acc, desc = parse_cluster_name(name)
    except CatalogueError:
        return None
    if acc.kind != "gpu" or "count" not in desc or desc.get("slices", 1) != 1:
        return None
    count = desc["count"]
    odd = odd_part(count)
    absorbed = math.gcd(odd, problem.workload.global_batch_seqs)
    if absorbed == odd:
        return None
    devices = absorbed << ((count // absorbed).bit_length() - 1)
    try:  # a GPU count the catalogue cannot build (partial nodes) is no comparison
        resolve_cluster(f"{acc.id}-{devices}")
    except CatalogueError:
        return None
    return f"{acc.id}-{devices}"


def _compare_fewer_devices(
    run: SolveRun, request: SearchRequest, cluster: str, deadline: float
) -> SearchResult:
    """The same problem on ``cluster`` (``fewer_devices``), and, where its winner's step is shorter than
    the winner's on every device, a warning and ``document['fewer_devices']`` (docs/OUTPUT.md). Two clusters'
    predictions: judged with each prediction's own band (``band_of``), not ``comparison_band``, whose measurement
    pairs layouts of one problem."""
    fewer = dataclasses.replace(run.problem, cluster_name=cluster, cluster=resolve_cluster(cluster))
    result = proven_or_feasible(
        solve_problem(fewer, dataclasses.replace(request, top_k=1, time_limit_s=_left(deadline)))
    )
    if not result.layouts:
        return result
    ours, theirs = run.result.layouts[0], result.layouts[0]
    if theirs.step_time_s >= ours.step_time_s:
        return result
    versus = versus_claim(theirs, ours, band_of(theirs))
    saving = 1.0 - theirs.step_time_s / ours.step_time_s
    run.document["fewer_devices"] = {
        "cluster": cluster,
        "num_devices": theirs.cluster.num_devices,
        "status": result.status,
        "step_time_saving": saving,
        "distinguishable": bool(versus["distinguishable"]),
        "layout": layout_record(theirs),
    }
    warnings.warn(
        f"{theirs.cluster.num_devices:,} of the {ours.cluster.num_devices:,} devices run a step "
        f"{saving:.1%} faster ({theirs.step_time_s:.3f} s against {ours.step_time_s:.3f} s, "
        f"{_degrees(theirs)}; {'outside' if versus['distinguishable'] else 'inside'} the model's "
        f"uncertainty): the global batch of {run.problem.workload.global_batch_seqs:,} sequences "
        f"does not divide by the odd factor of {ours.cluster.num_devices:,}, so the winner here "
        f"puts it in {_odd_degrees(ours, run.problem.workload.global_batch_seqs)} (a batch it divides "
        f"would let data parallelism take it); `layoutsearch solve --cluster {cluster}` shows that "
        f"layout",
        LayoutsearchWarning,
        stacklevel=2,
    )
    return result


def _odd_degrees(est: Estimate, batch: int) -> str:
    """The degrees of ``est`` that carry the part of the device count's odd factor ``batch`` does not
    divide (``fewer_devices``)."""
    odd = odd_part(est.cluster.num_devices)
    left = odd // math.gcd(odd, batch)
    named = [f"{k}={v}" for k, v in est.layout.all_degrees.items() if math.gcd(v, left) > 1]
    return ", ".join(named) or "its degrees"


def _degrees(est: Estimate) -> str:
    lay = est.layout
    return ", ".join(f"{k}={v}" for k, v in lay.all_degrees.items() if v > 1) or "one device"


def explain(
    problem: ProblemOptions,
    workload: WorkloadOptions,
    search: SearchOptions,
    plan: PlanOptions,
    *,
    label: Label = flag,
    on_phase: Callable[[str], None] = lambda _text: None,
) -> SolveRun:
    """The search of ``solve`` (at least two layouts) with why the winner beats each other one
    (``document['explanation']``) and, with ``plan.sensitivity``, the winner's step-time change
    when each hardware number is +10%."""
    if plan.what_if is not None:
        raise InvalidArgumentError(f"{label('what_if')}: explain takes no what-if; use solve")
    check_plan(plan, label)
    versus = parse_degrees(plan.versus, label("versus")) if plan.versus is not None else None
    started = time.perf_counter()
    on_phase("searching the layouts")
    run, request = _search(
        problem,
        workload,
        search,
        plan,
        target=None,
        top_k=max(search.top, 2),
        label=label,
        deadline=started + search.time_limit,
    )
    check_deadline(started, search.time_limit, [run.result])
    doc, layouts = run.document, run.result.layouts
    if versus is not None:
        devices = run.problem.cluster.num_devices
        used = math.prod(versus.get(name, 1) for name in DEGREE_NAMES)
        if used != devices:
            raise InvalidArgumentError(
                f"{label('versus')}: {' x '.join(DEGREE_NAMES)} = {used}, but "
                f"{run.problem.cluster_name} has {devices} devices"
            )
        for name, value in versus.items():  # ep and etp too, which the product leaves out
            if devices % value:
                raise InvalidArgumentError(
                    f"{label('versus')} {name}={value}: {value} does not divide the {devices} devices of "
                    f"{run.problem.cluster_name}"
                )
    if layouts:
        band = comparison_band(layouts[0])
        doc["explanation"] = {
            "versus": [compare(layouts[0], other) for other in layouts[1:]],
            "ranking": ranking_notes(run.result, band),
            "tie_tolerance": run.result.tie_tolerance,
            "uncertainty_rel_band": list(band_of(layouts[0])),
            "comparison_rel_band": list(band),
            "slice_wait": slice_wait_note(layouts[0]),
        }
        if versus is not None:
            doc["explanation"]["versus_layout"] = _versus(run, request, versus, band)
    if plan.sensitivity:
        factor = planning.SENSITIVITY_FACTOR
        doc["sensitivity"] = planning.sensitivity(layouts[0], factor) if layouts else None
        doc["sensitivity_factor"] = factor
    return run


def _versus(run: SolveRun, request: SearchRequest, degrees: dict[str, int], band) -> dict:
    """The winner held against the best completion of ``degrees`` (the degrees not given are 1;
    ZeRO stage, microbatches, recompute and placement searched as for the winner), or against a faster
    one predicted just over the memory or just under it (``_within_memory_error``): the layout a team ran
    may be that one. ``safer_by``: the first risk the completion held against carries and the winner does
    not (why the winner ranks first where that completion is as fast or faster).

    A ``dp`` given without ``fsdp`` names a data parallelism whose sharding it does not say: here dp
    replicates the optimizer state and fsdp shards it (Megatron's distributed optimizer, DeepSpeed's ZeRO,
    FSDP), and papers write both as data parallelism (DeepSeek-V3's DP 128 with ZeRO-1). Both readings are
    completed and the claim is held against the faster (``dp_read_as``: "fsdp" where that is the sharded
    one, with the replicated reading's step, ``replicated_step_time_s``, or null where none fits)."""
    readings = [degrees]
    if degrees.get("dp", 1) > 1 and "fsdp" not in degrees:
        readings.append({**{k: v for k, v in degrees.items() if k != "dp"}, "fsdp": degrees["dp"]})
    completions = [_completion(run, request, given) for given in readings]
    fixed, other, near = min(
        completions,
        key=lambda c: math.inf if (c[2] or c[1]) is None else (c[2] or c[1]).step_time_s,
    )
    sharded = len(completions) > 1 and fixed is completions[1][0]
    replicated = completions[0][2] or completions[0][1]
    winner, held = run.result.layouts[0], near or other
    return {
        "degrees": fixed,
        "dp_read_as": "fsdp" if sharded else None,
        "replicated_step_time_s": (
            None if not sharded or replicated is None else replicated.step_time_s
        ),
        "layout": layout_record(other) if other is not None else None,
        "within_memory_error": None if near is None else layout_record(near),
        "winner_step_time_s": winner.step_time_s,
        **versus_claim(winner, held, band),
        "safer_by": None if held is None else safer_by(winner, held),
    }


def _completion(run: SolveRun, request: SearchRequest, degrees: dict[str, int]) -> tuple:
    """(all seven degrees, the best completion of ``degrees`` or None, ``_within_memory_error``'s or None)."""
    fixed = {name: degrees.get(name, 1) for name in ALL_DEGREE_NAMES}
    pinned = dataclasses.replace(request.with_options(fix=fixed), top_k=1)
    result = solve_problem(run.problem, pinned)
    other = result.layouts[0] if result.layouts else None
    return fixed, other, _within_memory_error(run.problem, pinned, other)


def _within_memory_error(problem: Problem, request: SearchRequest, fitting: Estimate | None):
    """The best completion of the pinned ``request`` with the usable memory raised by what the memory model
    over-predicts measured peaks (``largest_peak_that_may_run``: x 1.16), when it is faster than ``fitting``
    (the first the ranking gives with the memory as it is; None: none fits), else None. It is predicted
    over the usable memory by no more than that, or under it with less headroom than the ranking's risk
    order allows (ranked below ``fitting`` for it). A claim over given degrees is held against it: it may
    be the layout that ran."""
    usable = capacity_bytes(problem.cluster, problem.workload)
    hbm = problem.workload.hbm_bytes or problem.cluster.accelerator.hbm_bytes
    room = largest_peak_that_may_run(usable) - usable
    roomier = dataclasses.replace(
        problem, workload=dataclasses.replace(problem.workload, hbm_bytes=hbm + room)
    )
    result = solve_problem(roomier, request)
    if not result.layouts:
        return None
    near = estimate_layout(problem, result.layouts[0].layout, strict=False)
    if fitting is not None and near.step_time_s >= fitting.step_time_s:
        return None
    return near


def _layout_named(
    given: LayoutOptions | Layout, layout: Layout, problem: Problem, label: Label
) -> str:
    """The option a refused layout came from, with its value; where it was left at its default (the main job's) and
    does not cover the cluster's devices, saying so: the degrees of the refusal are then none the user wrote."""
    if not isinstance(given, LayoutOptions):
        return ""
    default = LayoutOptions.model_fields["layout"].default
    if given.layout != default or math.prod(layout.degrees.values()) == problem.num_devices:
        return f"{label('layout')} {given.layout}: "
    main_cluster = ProblemOptions.model_fields["cluster"].default
    return (
        f"{label('layout')} {default} is the default (the main job's layout on {main_cluster}); give the degrees "
        f"for {problem.cluster_name}: "
    )


def layout_of(
    problem: ProblemOptions, layout: LayoutOptions | Layout, label: Label = flag
) -> Layout:
    """The Layout of the layout options (microbatches: 1, or with a pipeline the smallest count
    >= pp that divides the batch)."""
    if isinstance(layout, Layout):
        return layout
    degrees = parse_degrees(layout.layout, label("layout"))
    microbatches = layout.microbatches
    if microbatches is None:
        microbatches = default_microbatches(
            problem.seqs,
            degrees.get("dp", 1) * degrees.get("fsdp", 1),
            degrees.get("pp", 1),
            layout.virtual_stages,
        )
    if not 0 <= layout.zero_stage <= 3:
        raise InvalidArgumentError(
            f"{label('zero_stage')}: zero_stage({layout.zero_stage}) must be 0, 1, 2 or 3"
        )
    if layout.balanced_split and (layout.first_stage_layers or layout.last_stage_layers):
        given_split = "first_stage_layers" if layout.first_stage_layers else "last_stage_layers"
        raise InvalidArgumentError(
            f"{label('balanced_split')}: the balanced split chooses every stage's layers, "
            f"not with {label(given_split)}({getattr(layout, given_split)})"
        )
    axes = layout.axes
    given: dict[str, Any] = dict(degrees)  # degree name -> int (Layout has other fields than ints)
    return Layout(
        **given,
        zero_stage=layout.zero_stage,
        first_stage_layers=layout.first_stage_layers,
        last_stage_layers=layout.last_stage_layers,
        balanced_split=layout.balanced_split,
        virtual_stages=layout.virtual_stages,
        num_microbatches=microbatches,
        recompute=layout.recompute.value,
        offload=layout.offload.value,
        sequence_parallel=layout.sequence_parallel,
        schedule=(
            Schedule.interleaved.value
            if layout.virtual_stages > 1 and layout.schedule == Schedule.one_f_one_b
            else layout.schedule.value
        ),
        cp_flavour=layout.cp_flavour.value,
        axes=parse_axes(axes, label("axes")) if axes and axes.strip() else None,
    )


def estimate(
    problem: ProblemOptions,
    workload: WorkloadOptions,
    layout: LayoutOptions | Layout,
    plan: PlanOptions,
    *,
    label: Label = flag,
) -> EstimateRun:
    """One layout's itemised cost, with the time and cost to train and the what-if re-estimate
    (``document['what_if']``) when the plan asks for one."""
    factors = check_plan(plan, label)
    prob = build_problem(problem, workload, plan.tokens)
    mfu_convention = layout.mfu_convention.value if isinstance(layout, LayoutOptions) else "model"
    lay = layout_of(problem, layout, label)
    try:
        est = estimate_layout(prob, lay, mfu_convention=mfu_convention)
    except InvalidLayoutError as exc:
        raise InvalidLayoutError(f"{_layout_named(layout, lay, prob, label)}{exc}") from None
    price = plan.price_per_device_hour
    doc = estimate_document(est, price, planning.resilience_of(plan))
    what_if = None
    if factors:
        other = planning.re_estimate(est, factors)
        what_if = WhatIf(
            what_if_document(
                factors,
                est,
                other,
                method="re-estimated",
                status=None,
                base_on_other=other,
                price_per_device_hour=price,
                resilience=planning.resilience_of(plan),
            ),
            other,
            None,
        )
        doc["what_if"] = what_if.document
    if plan.against_best:
        doc["against_best"] = against_best(prob, est)
    return EstimateRun(prob, est, doc, what_if)


def against_best(problem: Problem, est: Estimate) -> dict:
    """The search's best layout of ``problem`` (top 1, the default choices) held against the estimated layout, as
    ``explain --versus`` holds the winner against a completion: ``layout`` (a layout record, null when nothing
    fits), ``winner_step_time_s``, ``step_time_s`` (the estimated layout's), ``speedup`` (its step / the best's),
    ``distinguishable`` and ``verdict`` (``versus_claim`` with ``comparison_band``: ``comparison_rel_band``) and
    ``safer_by`` (the first risk the estimated layout carries and the best does not: why the best ranks first where
    it is not faster)."""
    result = proven_or_feasible(solve_problem(problem, SearchRequest(top_k=1)))
    if not result.layouts:
        return {
            "layout": None,
            "winner_step_time_s": None,
            "step_time_s": est.step_time_s,
            "speedup": None,
            "distinguishable": None,
            "verdict": "infeasible",
            "comparison_rel_band": None,
            "safer_by": None,
        }
    best = result.layouts[0]
    band = comparison_band(best)
    return {
        "layout": layout_record(best),
        "winner_step_time_s": best.step_time_s,
        **versus_claim(best, est, band),
        "comparison_rel_band": list(band),
        "safer_by": safer_by(best, est),
    }
