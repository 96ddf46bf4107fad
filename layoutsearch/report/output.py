"""JSON documents per docs/OUTPUT.md: a contract; add fields freely, never rename or drop one."""

from __future__ import annotations

from layoutsearch.core.problem import Problem
from layoutsearch.costs import params
from layoutsearch.costs.estimate import Estimate
from layoutsearch.search.cpsat import SEED


def layout_record(est: Estimate, rank: int = 1) -> dict:
    """One layout record (OUTPUT.md 'A layout record'), with itemised keys beside the contract's."""
    lay = est.layout
    return {
        "rank": rank,
        "degrees": lay.degrees,
        "zero_stage": lay.zero_stage,
        "virtual_stages": lay.virtual_stages,
        "num_microbatches": lay.num_microbatches,
        "microbatch_seqs": int(lay.microbatch_seqs(est.workload)),
        "recompute": lay.recompute,
        "sequence_parallel": lay.sequence_parallel,
        "schedule": lay.schedule,
        "kv_replication": params.kv_replication(est.model, lay.tp),
        "axes": {name: [[axis, factor] for axis, factor in placed] for name, placed in lay.axes},
        "memory_bytes": dict(est.memory_bytes),
        "memory_moments_bytes": {name: sum(items.values()) for name, items in est.memory_moments.items()},
        "peak_moment": est.peak_moment,
        "worst_stage": est.worst_stage,
        "time_s": dict(est.time_s),
        "mfu": est.mfu,
        "mfu_convention": est.mfu_convention,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_device": est.tokens_per_s / est.cluster.num_devices,
        "fits": est.fits,
    }


def estimate_document(est: Estimate) -> dict:
    """`layoutsearch estimate --format json`."""
    return {
        "problem": est.problem.record(),
        "params": {**est.params, "per_device_by_stage": {
            str(s): params.stage_params(est.model, est.layout, s) for s in sorted({0, est.layout.pp - 1})}},
        "layout": layout_record(est),
        "memory_moments_bytes": est.memory_moments,
        "collectives": est.collectives,
        "violations": [v.as_dict() for v in est.violations],
    }


def solve_document(problem: Problem, result, explanation: dict | None = None) -> dict:
    """`layoutsearch solve --format json` (OUTPUT.md): problem, solver proof, ranked layouts."""
    doc = {
        "problem": problem.record(),
        "solver": {
            "method": result.method, "status": result.status, "objective": result.objective_value,
            "bound": result.bound, "gap": result.gap, "objective_name": result.objective,
            "objective_unit": "s" if result.objective == "step-time" else "bytes",
            "quantum_s": result.quantum_s, "wall_s": result.wall_s, "solver_wall_s": result.solver_wall_s,
            "num_candidates": result.num_candidates, "rows_kept_for_solver": result.rows_kept,
            "tie_break": "step time, then peak memory" if result.objective == "gather-volume" else "peak memory",
            "seed": SEED,
        },
        "layouts": [layout_record(est, rank) for rank, est in enumerate(result.layouts, start=1)],
    }
    if not result.layouts and explanation is not None:
        doc["explanation"] = explanation
    return doc
