"""Solving one sweep point into one row (never raising)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError
from layoutsearch.core.options import PlanOptions
from layoutsearch.core.problem import Problem, SearchRequest, build_workload, version
from layoutsearch.costs import power
from layoutsearch.costs.goodput import Resilience
from layoutsearch.report import planning
from layoutsearch.report.output import layout_record
from layoutsearch.search import solve
from layoutsearch.search.explain import infeasibility
from layoutsearch.search.objectives import UNITS
from layoutsearch.sweep.points import Point
from layoutsearch.sweep.table import COLUMN_NAMES

# ----------------------------------------------------------------------------- one point


def solve_point(point: Point, time_limit_s: float) -> dict:
    """Solve one point for its best layout (top 1). Never raises: a failure is a row with a reason."""
    start = time.perf_counter()
    row = _input_columns(point, time_limit_s) | {"layoutsearch_version": version()}
    try:
        problem = Problem.build(
            point.model,
            point.cluster,
            build_workload(
                point.global_batch_seqs,
                point.seq_len,
                point.training_tokens,
                **dict(point.workload),
            ),
        )
        row.update(framework=problem.workload.framework, precision=problem.workload.precision)
        row["num_devices"] = problem.num_devices
        over_budget = _site_power(problem, point.max_site_power_mw, row)
        if over_budget:
            row.update(status="INFEASIBLE", reason=over_budget)
            row["point_wall_s"] = time.perf_counter() - start
            return _finish(row)
        request = SearchRequest(
            top_k=1,
            time_limit_s=time_limit_s,
            objective=point.objective,
            resilience=resilience_of(point),
        )
        result = solve(problem, request)
        seconds = UNITS[result.objective] == "s"  # energy's joules are the energy columns
        row.update(
            status=result.status,
            objective_s=result.objective_value if seconds else None,
            bound_s=result.bound if seconds else None,
            wall_s=result.wall_s,
            num_candidates=result.num_candidates,
        )
        if result.layouts:
            row.update(_layout_columns(result.layouts[0], point))
        else:
            row["reason"] = _why_no_layout(problem, result, time_limit_s)
    except LayoutsearchError as exc:
        row.update(status="ERROR", reason=str(exc))
    except Exception as exc:  # a bug in one point must not stop the sweep; the row says what broke
        row.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}")
    row["point_wall_s"] = time.perf_counter() - start
    return _finish(row)


def error_row(point: Point, time_limit_s: float, exc: BaseException) -> dict:
    """The row of a point whose worker died or whose task failed outside solve_point."""
    row = _input_columns(point, time_limit_s)
    row.update(
        status="ERROR",
        reason=f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}",
    )
    return _finish(row)


def _input_columns(point: Point, time_limit_s: float) -> dict:
    return {
        "point_id": point.id,
        "model": point.model,
        "cluster": point.cluster,
        "global_batch_seqs": point.global_batch_seqs,
        "seq_len": point.seq_len,
        "time_limit_s": time_limit_s,
        "training_tokens": point.training_tokens,
        "price_per_device_hour": point.price_per_device_hour,
        "price_per_kwh": point.price_per_kwh,
        "max_site_power_mw": point.max_site_power_mw,
    }


def _site_power(problem: Problem, max_site_power_mw: float | None, row: dict) -> str | None:
    """Puts the devices' peak draw in ``row`` (site_power_mw, at their busy power); returns why
    it exceeds ``max_site_power_mw`` (None within it, or without a budget)."""
    acc = problem.cluster.accelerator
    site_w = power.site_power_w(problem.num_devices, acc, problem.workload.power_limit_w)
    row["site_power_mw"] = None if site_w is None else site_w / 1e6
    if max_site_power_mw is None:
        return None
    if site_w is None:
        raise InvalidArgumentError(
            f"--max-site-power-mw: {acc.id} has no board_power_w in hardware/{acc.id}.yaml"
        )
    if site_w <= max_site_power_mw * 1e6:
        return None
    return (
        f"site power {site_w / 1e6:.4g} MW ({problem.num_devices} devices x "
        f"{site_w / problem.num_devices:g} W) above --max-site-power-mw {max_site_power_mw:g}"
    )


def _finish(row: dict) -> dict:
    row["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return {name: row.get(name) for name in COLUMN_NAMES}


def resilience_of(point: Point) -> Resilience:
    """The point's failure, checkpoint and energy-price options in SI units."""
    plan = PlanOptions(**dict(point.failures), price_per_kwh=point.price_per_kwh)
    return planning.resilience_of(plan)


def _layout_columns(est, point: Point) -> dict:
    rec = layout_record(est, 1, point.price_per_device_hour, resilience_of(point))
    mem, t = rec["memory_bytes"], rec["time_s"]
    return {
        **rec["degrees"],
        "zero_stage": rec["zero_stage"],
        "virtual_stages": rec["virtual_stages"],
        "num_microbatches": rec["num_microbatches"],
        "microbatch_seqs": rec["microbatch_seqs"],
        "recompute": rec["recompute"],
        "sequence_parallel": rec["sequence_parallel"],
        "schedule": rec["schedule"],
        "axes": json.dumps(rec["axes"], separators=(",", ":")),
        "peak_bytes": mem["peak"],
        "capacity_bytes": mem["capacity"],
        "compute_s": t["compute"],
        "exposed_comm_s": t["exposed_comm"],
        "bubble_s": t["bubble"],
        "overhead_s": t["overhead"],
        "step_time_s": t["step"],
        "mfu": rec["mfu"],
        "tokens_per_s": rec["tokens_per_s"],
        "tokens_per_s_per_device": rec["tokens_per_s_per_device"],
        "risks": "; ".join(rec["risks"]) or "none",
        "goodput": rec["goodput"],
        "train_days": rec["train_days"],
        "device_hours": rec["device_hours"],
        "cost": rec["cost"],
        "energy_j_per_step": rec["energy_j_per_step"],
        "energy_j_per_token": rec["energy_j_per_token"],
        "energy_kwh": rec["energy_kwh"],
        "energy_cost": rec["energy_cost"],
    }


def _why_no_layout(problem: Problem, result, time_limit_s: float) -> str:
    if result.status == "UNKNOWN":
        return f"time limit {time_limit_s:g} s reached without a layout (raise --time-limit)"
    try:
        return infeasibility(problem, result.space, result.tables)["message"]
    except Exception as exc:  # the explanation is a courtesy; the status already says INFEASIBLE
        return f"no feasible layout (explanation failed: {type(exc).__name__}: {exc})"
