"""JSON documents per OUTPUT.md: a contract; add fields freely, never rename or drop one."""

from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata

from layoutsearch.costs import params
from layoutsearch.costs.estimate import Estimate
from layoutsearch.core.specs import Layout, ModelSpec, Workload


def version() -> str:
    try:
        return metadata.version("layoutsearch")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"


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
        "memory_bytes": {k: v for k, v in est.memory_bytes.items()},
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


def model_hash(model: ModelSpec) -> str:
    """Content hash of the architecture (provenance)."""
    text = json.dumps({k: getattr(model, k) for k in model.__slots__}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def problem_record(model_name: str, model: ModelSpec, cluster_name: str, num_devices: int, workload: Workload) -> dict:
    return {
        "model": model_name,
        "model_sha256_16": model_hash(model),
        "cluster": cluster_name,
        "num_devices": num_devices,
        "global_batch_seqs": workload.global_batch_seqs,
        "seq_len": workload.seq_len,
        "global_batch_tokens": workload.global_batch_tokens,
        "state_bytes_per_param": workload.state_bytes_per_param,
        "versions": {"layoutsearch": version(), "python": platform.python_version()},
    }


def estimate_document(model_name: str, cluster_name: str, est: Estimate) -> dict:
    """`layoutsearch estimate --format json`."""
    return {
        "problem": problem_record(model_name, est.model, cluster_name, est.cluster.num_devices, est.workload),
        "params": {**est.params, "per_device_by_stage": {
            str(s): params.stage_params(est.model, est.layout, s) for s in sorted({0, est.layout.pp - 1})}},
        "layout": layout_record(est),
        "memory_moments_bytes": est.memory_moments,
        "collectives": est.collectives,
        "violations": [v.as_dict() for v in est.violations],
    }


def layout_from_record(rec: dict) -> Layout:
    """Rebuild a Layout from a layout record (for exports and re-estimation)."""
    d = rec["degrees"]
    return Layout(
        dp=d["dp"], fsdp=d["fsdp"], tp=d["tp"], pp=d["pp"], cp=d["cp"], zero_stage=rec["zero_stage"],
        virtual_stages=rec.get("virtual_stages", 1), num_microbatches=rec["num_microbatches"],
        recompute=rec["recompute"], sequence_parallel=rec.get("sequence_parallel", True),
        schedule=rec.get("schedule", "1f1b" if rec.get("virtual_stages", 1) == 1 else "interleaved"),
        axes=tuple((name, tuple((a, f) for a, f in placed)) for name, placed in rec.get("axes", {}).items()),
    )


def solve_document(model_name: str, cluster_name: str, result, explanation: dict | None = None) -> dict:
    """`layoutsearch solve --format json` (OUTPUT.md): problem, solver proof, ranked layouts."""
    est0 = result.layouts[0] if result.layouts else None
    space = result.space
    problem = problem_record(model_name, space.model, cluster_name, space.cluster.num_devices, space.workload)
    doc = {
        "problem": problem,
        "solver": {
            "method": result.method, "status": result.status, "objective": result.objective_value,
            "bound": result.bound, "gap": result.gap, "objective_name": result.objective,
            "objective_unit": "s" if result.objective == "step-time" else "bytes",
            "quantum_s": result.quantum_s, "wall_s": result.wall_s, "solver_wall_s": result.solver_wall_s,
            "num_candidates": result.num_candidates, "rows_kept_for_solver": result.rows_kept,
            "tie_break": "step time, then peak memory" if result.objective == "gather-volume" else "peak memory",
            "seed": 20240611,
        },
        "layouts": [layout_record(est, rank) for rank, est in enumerate(result.layouts, start=1)],
    }
    if est0 is None and explanation is not None:
        doc["explanation"] = explanation
    return doc
