"""Fallback layouts: what to run when 1..K nodes (GPU nodes; TPU slices) of the cluster die.

For each count k of lost nodes, two families, each the optimum of the ordinary search:

- *reshard-free*: the healthy winner's tp, pp, cp, ep and etp kept, only the data-parallel
  degrees (dp, fsdp) shrink, so the checkpoint loads as it is;
- *free*: any layout, paying once for resharding the checkpoint: its bytes (every device's
  checkpoint bytes, ``costs.goodput``) over the storage bandwidth of the nodes that read it.

The search uses every device of its cluster and needs the batch to divide by dp x fsdp, so a
fallback runs on the largest cluster of whole nodes its degrees can fill (``h100-(8 x m)``) and
says how many of the surviving nodes idle. The reshard-free family keeps the global batch when
the data-parallel degree it reaches divides it, else it takes the nearest batch that degree
divides (ties to the smaller) or, where the pipeline's microbatches per data unit would then not
divide by its stages (what an interleaved or zero-bubble schedule needs), the largest batch up to
the healthy one that divides by data-parallel degree x stages too (never a larger batch, whose
smaller bubble share would win by itself), whichever runs more tokens per second (the nearer
within ``TIE``), and says so; the free family runs at each of those batches, on each
cluster from all surviving nodes down to the reshard-free one's, and keeps the fastest (so it is
never slower than the reshard-free layout). Throughput loss = 1 - tokens/s / healthy tokens/s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import PlanOptions
from layoutsearch.core.problem import Problem, SearchRequest
from layoutsearch.core.topology import is_cluster_file, parse_cluster_name, resolve_cluster
from layoutsearch.costs import goodput
from layoutsearch.costs.estimate import Estimate
from layoutsearch.costs.goodput import Resilience
from layoutsearch.report import planning
from layoutsearch.report.output import layout_record
from layoutsearch.search import SearchResult
from layoutsearch.search import solve as solve_problem

__all__ = [
    "FAMILIES",
    "Fallback",
    "Nodes",
    "nodes_of",
    "fallbacks",
    "reshard_s",
    "records",
    "of_plan",
]

FAMILIES = ("reshard-free", "free")
TIE = 0.005  # relative tokens/s within which the batch nearer the healthy one is kept
KEPT_DEGREES = ("tp", "pp", "cp", "ep", "etp")  # what a reshard-free fallback keeps

Solver = Callable[[Problem, SearchRequest], SearchResult]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Nodes:
    """How a cluster splits into the units that fail together: ``count`` units of ``devices``
    each, named ``unit`` ('node', 'slice'); ``name(m)`` is the cluster of m of them."""

    count: int
    devices: int
    unit: str
    accelerator: str
    per_slice: int = 0  # TPU: chips per slice

    def name(self, units: int) -> str:
        if self.unit == "slice":
            return f"{self.accelerator}-{self.per_slice}" + (f"x{units}" if units > 1 else "")
        return f"{self.accelerator}-{units * self.devices}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fallback:
    """One fallback: ``nodes_lost`` units gone, the ``family``'s best layout (None when none
    fits), the cluster it runs on and the batch it runs at."""

    nodes_lost: int
    family: str
    problem: Problem | None
    estimate: Estimate | None
    status: str
    nodes_used: int
    nodes_idle: int
    global_batch_seqs: int
    batch_changed: bool
    throughput_loss: float | None
    reshard_s: float


def nodes_of(problem: Problem, label: str) -> Nodes:
    """The failing units of the problem's cluster: GPU nodes (NVLink domains) or TPU slices."""
    name = problem.cluster_name
    if is_cluster_file(name) or problem.cluster.name != name:
        raise InvalidArgumentError(
            f"{label}: cluster '{name}' is not a catalogue cluster name; fallback layouts "
            f"rebuild smaller clusters by name (h100-16384, v5p-8960x4)"
        )
    acc, desc = parse_cluster_name(name)
    if acc.kind == "tpu":
        if "count" not in desc or desc["slices"] < 2:
            raise InvalidArgumentError(
                f"{label}: cluster '{name}' is one TPU slice; a TPU fallback loses whole slices "
                f"(give slices: {acc.id}-COUNTxSLICES)"
            )
        count = desc["count"]
        return Nodes(
            count=desc["slices"], devices=count, unit="slice", accelerator=acc.id, per_slice=count
        )
    per_node = acc.devices_per_node
    if desc["count"] % per_node:
        raise InvalidArgumentError(
            f"{label}: cluster '{name}' is not whole {per_node}-GPU nodes ({desc['count']} GPUs)"
        )
    return Nodes(count=desc["count"] // per_node, devices=per_node, unit="node", accelerator=acc.id)


def nearest_batch(seqs: int, data_parallel: int) -> int:
    """The multiple of ``data_parallel`` nearest ``seqs`` (ties to the smaller, at least one)."""
    below = max(data_parallel, seqs // data_parallel * data_parallel)
    above = below + data_parallel
    return above if above - seqs < seqs - below else below


def reshard_s(healthy: Estimate, devices: int, write_bytes_per_s_per_node: float | None) -> float:
    """Seconds to read the healthy layout's checkpoint once into another layout on ``devices``
    (``costs.goodput.reshard_time_s``)."""
    acc = healthy.cluster.accelerator
    return goodput.reshard_time_s(
        planning.layout_goodput(healthy).checkpoint_bytes_per_device,
        healthy.cluster.num_devices,
        devices // acc.devices_per_host,
        goodput.storage_bytes_per_s_per_node(
            write_bytes_per_s_per_node, acc.checkpoint_write_bytes_per_s_per_node
        ),
    )


class _Searches:
    """The fallback searches of one healthy problem, each (cluster units, batch, fixed degrees)
    solved once: k lost nodes and k+1 often leave the same cluster."""

    def __init__(self, problem: Problem, request: SearchRequest, nodes: Nodes, solver: Solver):
        self.problem, self.request, self.nodes, self.solver = problem, request, nodes, solver
        self.done: dict[tuple, tuple[Problem, SearchResult]] = {}

    def run(self, units: int, seqs: int, fix: dict[str, int]) -> tuple[Problem, SearchResult]:
        key = (units, seqs, tuple(sorted(fix.items())))
        if key not in self.done:
            name = self.nodes.name(units)
            workload = dataclasses.replace(self.problem.workload, global_batch_seqs=seqs)
            prob = dataclasses.replace(
                self.problem, cluster_name=name, cluster=resolve_cluster(name), workload=workload
            )
            request = dataclasses.replace(
                self.request.with_options(fix={**self.request.options.fix, **fix}), top_k=1
            )
            self.done[key] = (prob, self.solver(prob, request))
        return self.done[key]


def fallbacks(
    problem: Problem,
    request: SearchRequest,
    healthy: Estimate,
    max_nodes_lost: int,
    *,
    resilience: Resilience | None = None,
    label: str = "--fallback-nodes",
    solver: Solver = solve_problem,
) -> list[Fallback]:
    """For k = 1..``max_nodes_lost``, the reshard-free and the free fallback of ``healthy``
    (the winner of ``problem`` under ``request``), in that order (module docstring)."""
    nodes = nodes_of(problem, label)
    if not 1 <= max_nodes_lost < nodes.count:
        raise InvalidArgumentError(
            f"{label}: {max_nodes_lost} must be from 1 to {nodes.count - 1} (cluster "
            f"'{problem.cluster_name}' has {nodes.count} {nodes.unit}s of {nodes.devices} devices)"
        )
    searches = _Searches(problem, request, nodes, solver)
    write_bw = (resilience or Resilience()).write_bytes_per_s_per_node
    lay, seqs = healthy.layout, problem.workload.global_batch_seqs
    kept = {name: getattr(lay, name) for name in KEPT_DEGREES}
    group = lay.tp * lay.pp * lay.cp
    rows = []
    for lost in range(1, max_nodes_lost + 1):
        left = nodes.count - lost
        units = next((u for u in range(left, 0, -1) if u * nodes.devices % group == 0), 0)
        batches = [seqs]
        if units:
            data_parallel = units * nodes.devices // group
            if seqs % data_parallel:
                batches = [nearest_batch(seqs, data_parallel)]
                rounds = data_parallel * lay.pp  # a whole number of microbatches per stage
                whole = max(rounds, seqs // rounds * rounds)
                if (batches[0] // data_parallel) % lay.pp and whole != batches[0]:
                    batches.append(whole)
        kept_row = None
        for batch in batches:
            row = _row(searches, healthy, units, (batch, seqs), kept, (lost, left), 0.0)
            if kept_row is None or _faster(row, kept_row):
                kept_row = row
        assert kept_row is not None
        rows.append(kept_row)
        floor = units if kept_row.estimate is not None else max(1, left - group // nodes.devices)
        best = None
        for batch in batches:
            for size in range(left, floor - 1, -1):
                row = _row(
                    searches,
                    healthy,
                    size,
                    (batch, seqs),
                    {},
                    (lost, left),
                    reshard_s(healthy, size * nodes.devices, write_bw),
                )
                if row.estimate is not None and (
                    best is None
                    or best.estimate is None
                    or row.estimate.tokens_per_s > best.estimate.tokens_per_s
                ):
                    best = row
        rows.append(best or dataclasses.replace(row, family="free"))
    return rows


def _faster(row: Fallback, than: Fallback) -> bool:
    """Whether ``row`` runs more tokens per second than ``than`` by more than ``TIE`` (a row that fits
    beats one that does not)."""
    if row.estimate is None or than.estimate is None:
        return than.estimate is None and row.estimate is not None
    return row.estimate.tokens_per_s > than.estimate.tokens_per_s * (1 + TIE)


def _row(
    searches: _Searches,
    healthy: Estimate,
    units: int,
    batches: tuple[int, int],
    fix: dict[str, int],
    nodes: tuple[int, int],
    reshard: float,
) -> Fallback:
    """The fallback of one search (reshard-free when ``fix`` holds degrees, else free) on ``units`` nodes at
    ``batches`` (the fallback's batch, the healthy one), ``nodes`` (lost, left)."""
    family = FAMILIES[0] if fix else FAMILIES[1]
    (batch, seqs), (lost, left) = batches, nodes
    common: dict[str, Any] = {
        "nodes_lost": lost,
        "global_batch_seqs": batch,
        "batch_changed": batch != seqs,
    }
    if not units:
        return Fallback(
            family=family,
            problem=None,
            estimate=None,
            status="NO_CLUSTER",
            nodes_used=0,
            nodes_idle=left,
            throughput_loss=None,
            reshard_s=reshard,
            **common,
        )
    prob, result = searches.run(units, batch, fix)
    est = result.layouts[0] if result.layouts else None
    if est is not None and all(
        getattr(est.layout, name) == getattr(healthy.layout, name) for name in KEPT_DEGREES
    ):
        reshard = 0.0  # a free winner that keeps the degrees loads the checkpoint as it is
    return Fallback(
        family=family,
        problem=prob,
        estimate=est,
        status=result.status,
        nodes_used=units,
        nodes_idle=left - units,
        throughput_loss=None if est is None else 1 - est.tokens_per_s / healthy.tokens_per_s,
        reshard_s=reshard,
        **common,
    )


def records(
    rows: list[Fallback],
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> list[dict]:
    """The solve document's ``fallback`` list (OUTPUT.md): one object per row, with its
    ``problem`` and ``layout`` record, so that each is a document ``export`` takes."""
    return [
        {
            "nodes_lost": row.nodes_lost,
            "family": row.family,
            "status": row.status,
            "cluster": row.problem.cluster_name if row.problem else None,
            "nodes_used": row.nodes_used,
            "nodes_idle": row.nodes_idle,
            "global_batch_seqs": row.global_batch_seqs,
            "batch_changed": row.batch_changed,
            "throughput_loss": row.throughput_loss,
            "reshard_s": row.reshard_s,
            "problem": row.problem.record() if row.problem else None,
            "layout": (
                layout_record(row.estimate, 1, price_per_device_hour, resilience)
                if row.estimate
                else None
            ),
        }
        for row in rows
    ]


def of_plan(
    problem: Problem, request: SearchRequest, healthy: Estimate, plan: PlanOptions, label: str
) -> tuple[tuple[Fallback, ...], list[dict]]:
    """The fallbacks ``plan.fallback_nodes`` asks for, and their records priced as the plan's."""
    resilience = planning.resilience_of(plan)
    rows = fallbacks(
        problem, request, healthy, plan.fallback_nodes, resilience=resilience, label=label
    )
    return tuple(rows), records(rows, plan.price_per_device_hour, resilience)
