"""Fit an accelerator family's calibration parameters to measured runs (`layoutsearch calibrate`).

Per accelerator FAMILY (``FAMILIES``: a100 = A100 40/80 GB, h100-class = H100/H200/H800 (one
GH100 die), b200-class = B200/GB200, and each TPU generation on its own), at most
``MAX_FIT_PARAMS`` calibration fractions (default ``DEFAULT_PARAMS``: the matmul fraction and the
portable attention kernels', each where a record runs it; never one per record) are fitted by Huber's loss (``huber_scale``;
or least squares) on r_i = log(predicted_i / measured_i) over that family's usable records: mapped by ``mapping.record_to_problem`` (not
skipped), not out of memory, with a measured throughput. The residual is symmetric in over- and
under-prediction. Every member of a family gets the same fitted values; a family with fewer
than 2 records per parameter gets matmul_efficiency only. A shared field (``SHARED_KIND``:
``overlap_interference``, the compute a hidden collective slows, one effect of the communication
library on every GPU) is fitted once over the families of its accelerator kind, jointly with each
family's own fields (``fit_joint``; ``calibrate --shared``): fitted per family it is not identified; so are
``moe_launch_latency_s`` and ``moe_host_sync_s``, the same host software's time per kernel launch and per
dispatcher sync on every GPU (fitted per family they would absorb a family's compute misfit). ``calibrate --fit-families`` limits a fitted field
to some families (a generation's own compute fraction), the others keeping their catalogue values of it. Huber's loss (``fit_residuals``, the default; ``calibrate --loss squares``: least squares) weighs log errors beyond
the fit's Huber scale (``huber_scale``: Huber's 1.345 robust standard deviations of its records' log errors at
the start) linearly instead of squared, so that a run the model does not describe, or the same layout measured
far apart, does not pull the fraction every typical run is costed at.

Method: Levenberg-Marquardt with forward-difference Jacobians in an unbounded parameterisation
(efficiencies e = lo + (hi - lo) sigmoid(u) inside (0.2, 1.0]; overheads and half-efficiency
points x = scale exp(u) >= 0), numpy only (scipy is not a dependency). A parameter the records
do not constrain (zero Jacobian column, e.g. scale-out efficiency when every record fits in one
node) keeps its catalogue value and is listed under ``unconstrained``.

The fitted values reach the catalogue only through an explicit ``write_calibration`` call.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import yaml

from layoutsearch.core import catalogue, io, topology
from layoutsearch.core.catalogue import accelerator_from_dict
from layoutsearch.core.errors import CatalogueError, InvalidArgumentError
from layoutsearch.core.parallel import parallel_map
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Cluster, Layout
from layoutsearch.costs.estimate import estimate, step_seconds
from layoutsearch.costs.terms import attention_kernel_field
from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import source_family
from layoutsearch.validation.stats import error_stats

# the fractions a family's records fit by default: the matmul fraction and the portable attention kernels' (the
# FlashAttention-2 class, MPT's Triton kernel of llm-foundry's tables), each only where a record runs it
# (KERNEL_FIELDS); the vendor's is fitted on its own (docs/calibration.md)
DEFAULT_PARAMS = ("matmul_efficiency", "attention_efficiency", "triton_attention_efficiency")
# {field: the families (or accelerator ids) that fit it}: a field not named is fitted by every family
FitFamilies = Mapping[str, Collection[str]] | None
DEFAULT_SHARED = ("overlap_interference",)  # fitted with them over the GPU families (SHARED_KIND)
MAX_FIT_PARAMS = 4  # a few fractions per family, never one per record
LOSSES = (
    "huber",
    "squares",
)  # of the log errors: Huber's (squares within ``huber_scale``, linear beyond), or least squares
DEFAULT_LOSS = "huber"  # the catalogue's fits and their leave-one-source-out folds (docs/calibration.md#the-fits-loss)
ROUTING_CV_GRID = tuple(
    round(0.05 * i, 2) for i in range(13)
)  # Workload.routing_cv's fit: 0 .. 0.6 by 0.05
# Huber's tuning constant, in robust standard deviations of the log errors: 95% of least squares' efficiency where
# the errors are normal (Huber 1981, "Robust Statistics", section 7.7; statsmodels' HuberT default), and the
# standard deviation estimated as 1.4826 x their median absolute deviation (the normal's MAD-to-sigma factor)
HUBER_TUNING = 1.345
MAD_TO_SIGMA = 1.4826
MIN_HUBER_LOG_SCALE = (
    0.01  # a set that agrees to within 1 % is fitted as by least squares within that
)
# Accelerator id -> the family whose records share one calibration (same compute die and clocks).
FAMILIES = {
    "a100-40gb": "a100",
    "a100-80gb": "a100",
    "h100": "h100-class",
    "h200": "h100-class",
    "h800": "h100-class",
    "b200": "b200-class",
    "gb200": "b200-class",
}
EFFICIENCY_BOUNDS = (0.2, 1.0)
SHARE_BOUNDS = (0.0, 1.0)  # fractions that may be zero (overlap_interference)
# Shared fields: one value fitted together with every family of that accelerator kind (``fit_joint``): an effect
# of the communication library on the chip, not of one chip's kernels (NCCL's kernels on the SMs of every GPU)
SHARED_KIND = {
    "overlap_interference": "gpu",
    "moe_overhead_full_graph_share": "gpu",
    "moe_launch_latency_s": "gpu",
    "moe_host_sync_s": "gpu",
}
SCALES = {
    "matmul_half_efficiency_tokens": 128.0,
    "gemm_half_efficiency_depth": 512.0,
    "attention_half_efficiency_keys": 128.0,
    "microbatch_overhead_s": 1e-4,
    "step_overhead_s": 1e-2,
    "moe_launch_latency_s": 1e-5,
    "moe_host_sync_s": 1e-4,
    "blocking_launch_s_per_layer_pass": 1e-3,
    "collective_half_efficiency_bytes": 65536.0,
}
# The fittable calibration fields of Accelerator (SI), in the order the CLI lists them
CALIBRATION_FIELDS = (
    "matmul_efficiency",
    "attention_efficiency",
    "vendor_attention_efficiency",
    "triton_attention_efficiency",
    "attention_half_efficiency_keys",
    "matmul_half_efficiency_tokens",
    "gemm_half_efficiency_depth",
    "collective_efficiency",
    "scale_out_efficiency",
    "collective_half_efficiency_bytes",
    "microbatch_overhead_s",
    "step_overhead_s",
    "grouped_matmul_efficiency",
    "moe_launch_latency_s",
    "moe_host_sync_s",
    "overlap_interference",
    "moe_overhead_full_graph_share",
    "blocking_launch_s_per_layer_pass",
)
# The hardware YAML writes these in another unit, named in its key: unit -> (factor from SI, SI unit, fields)
YAML_UNITS = {
    "us": (
        1e6,
        "s",
        (
            "microbatch_overhead_s",
            "moe_launch_latency_s",
            "moe_host_sync_s",
            "blocking_launch_s_per_layer_pass",
        ),
    ),
    "ms": (1e3, "s", ("step_overhead_s",)),
    "kib": (1 / 1024, "bytes", ("collective_half_efficiency_bytes",)),
}


def _yaml_key(name: str) -> tuple[str, float]:
    """(the key under `calibration:` of hardware/<id>.yaml, factor from SI to its unit) of a calibration field."""
    for unit, (factor, si, names) in YAML_UNITS.items():
        if (
            name in names
        ):  # the unit at the end (moe_host_sync_s), else its first place (blocking_launch_s_per_...)
            if name.endswith(f"_{si}"):
                return f"{name[: -len(si)]}{unit}", factor
            return name.replace(f"_{si}", f"_{unit}", 1), factor
    return name, 1.0


YAML_KEYS = {name: _yaml_key(name) for name in CALIBRATION_FIELDS}
AXIS_EFFICIENCY = {
    "torus": "collective_efficiency",
    "switch": "collective_efficiency",
    "mesh": "collective_efficiency",
    "scale_out": "scale_out_efficiency",
    "dcn": "scale_out_efficiency",
}


def with_calibration(cluster: Cluster, **fields: float) -> Cluster:
    """The cluster with calibration fields of its accelerator replaced, axes' efficiencies rebuilt.

    Axes copy ``collective_efficiency`` (torus, NVLink switch) or ``scale_out_efficiency``
    (scale-out, DCN) from the accelerator when the cluster is resolved; both are refreshed here. A new
    ``matmul_efficiency`` moves the fp8 rates with it (each recipe's ``fp8_recipe_ratio`` x it).
    """
    changes: dict[str, Any] = dict(fields)  # calibration fields of Accelerator
    acc = replace(cluster.accelerator, **changes)
    axes = tuple(
        a
        if a.bytes_per_s_per_direction == 0 or a.kind not in AXIS_EFFICIENCY
        else replace(a, efficiency=getattr(acc, AXIS_EFFICIENCY[a.kind]))
        for a in cluster.axes
    )
    return replace(cluster, accelerator=acc, axes=axes)


@overload
def family_of(accelerator: str) -> str: ...
@overload
def family_of(accelerator: None) -> None: ...
def family_of(accelerator: str | None) -> str | None:
    """The calibration family of an accelerator id (``FAMILIES``; any other id is its own family)."""
    return FAMILIES.get(accelerator, accelerator) if accelerator is not None else None


# ----------------------------------------------------------------------------- data
def usable_problems(records: Iterable[dict], accelerator: str) -> list[tuple[str, tuple, float]]:
    """(id, problem, measured tokens/s per device) of the records calibration may use for one
    accelerator id or family (``FAMILIES``)."""
    out = []
    for r in records:
        meas, acc = r["measured"], r["cluster"]["accelerator"]
        if (
            accelerator not in (acc, family_of(acc))
            or meas["oom"]
            or not meas["tokens_per_s_per_device"]
        ):
            continue
        try:
            problem = record_to_problem(r)
        except Exception:  # noqa: BLE001 - validation lists this record's engine error; the fit goes without it
            continue
        if not isinstance(problem, str):
            out.append((r["id"], problem, float(meas["tokens_per_s_per_device"])))
    return out


def log_residuals(problems: list[tuple[str, tuple, float]], fields: dict[str, float]) -> np.ndarray:
    """log(predicted / measured) tokens/s per device of each problem under the given calibration."""
    out = np.empty(len(problems))
    for i, (_, (problem, layout), measured) in enumerate(problems):
        calibrated = replace(problem, cluster=with_calibration(problem.cluster, **fields))
        out[i] = math.log(tokens_per_s(calibrated, layout) / problem.num_devices / measured)
    return out


@functools.lru_cache(maxsize=1 << 16)
def tokens_per_s(problem: Problem, layout: Layout) -> float:
    """``estimate(problem, layout).tokens_per_s``, remembered: a fit asks again for the same values
    (a forward difference in one family's fields leaves the other families' records as they were;
    every leave-one-source-out fold starts from the same catalogue values and scans the same
    routing spreads), and ``estimate`` is a pure function of its arguments.

    A placed layout (every record's) is costed by the step formula alone (``estimate.step_seconds``:
    the same sum ``estimate`` takes), without the layout checks, memory report and itemised times a
    fit never reads.
    """
    if not layout.placed:
        return estimate(problem, layout, strict=False).tokens_per_s
    return problem.workload.global_batch_tokens / step_seconds(problem, layout)


def huber_scale(log_errors: np.ndarray) -> float:
    """The log error beyond which a record's pull stops growing: ``HUBER_TUNING`` x the robust standard deviation
    of ``log_errors`` (``MAD_TO_SIGMA`` x their median absolute deviation from their median), at least
    ``MIN_HUBER_LOG_SCALE``. Taken once per fit, from its records' log errors at the start."""
    r = np.asarray(log_errors, dtype=np.float64)
    mad = float(np.median(np.abs(r - np.median(r)))) if r.size else 0.0
    return max(HUBER_TUNING * MAD_TO_SIGMA * mad, MIN_HUBER_LOG_SCALE)


def loss_scale(loss: str, log_errors: np.ndarray) -> float:
    """The Huber scale a fit with ``loss`` holds through its iterations: ``huber_scale`` of ``log_errors`` (its
    records' log errors at the start) for ``huber``; least squares has none (0)."""
    return huber_scale(log_errors) if loss == "huber" else 0.0


def fit_residuals(
    log_errors: np.ndarray, loss: str = DEFAULT_LOSS, scale: float | None = None
) -> np.ndarray:
    """What the fit squares: the log errors themselves (least squares), or for ``huber`` their Huber-weighted
    equivalents, sign(r) sqrt(2 c |r| - c^2) beyond c = ``scale`` (``huber_scale`` of the fit's records), so that a
    record measured 2x off the others (a release's slow run, a run the model does not describe) pulls like one
    c off with a longer lever, not like many records (Huber 1964). Without ``scale``, c is ``huber_scale`` of these
    errors (a fit passes the one it took at its start)."""
    if loss == "squares":
        return log_errors
    c = huber_scale(log_errors) if scale is None else scale
    a = np.abs(log_errors)
    return np.where(
        a <= c, log_errors, np.sign(log_errors) * np.sqrt(np.maximum(2.0 * c * a - c * c, 0.0))
    )


# ----------------------------------------------------------------------------- parameterisation
def _bounds(name: str) -> tuple[float, float] | None:
    """(low, high) of a bounded fraction, None for a scale (overheads, half-efficiency points)."""
    if name.endswith("efficiency"):
        return EFFICIENCY_BOUNDS
    return (
        SHARE_BOUNDS if name in ("overlap_interference", "moe_overhead_full_graph_share") else None
    )


def _to_value(name: str, u: float) -> float:
    """Bounded physical value of an unbounded coordinate (fractions: sigmoid; others: scale exp)."""
    bounds = _bounds(name)
    if bounds:
        lo, hi = bounds
        return lo + (hi - lo) / (1.0 + math.exp(-min(max(u, -40.0), 40.0)))
    return SCALES.get(name, 1.0) * math.exp(min(max(u, -25.0), 12.0))


def _to_coord(name: str, value: float) -> float:
    """Inverse of ``_to_value`` (values at a bound are pulled just inside it)."""
    bounds = _bounds(name)
    if bounds:
        lo, hi = bounds
        p = min(max((value - lo) / (hi - lo), 1e-2), 1 - 1e-4)
        return math.log(p / (1 - p))
    return math.log(max(value, 1e-6 * SCALES.get(name, 1.0)) / SCALES.get(name, 1.0))


def levenberg_marquardt(
    residual_fn: Callable[[np.ndarray], np.ndarray],
    u0: np.ndarray,
    max_iter: int = 40,
    step: float = 1e-3,
) -> tuple[np.ndarray, int, np.ndarray]:
    """Minimise ||r(u)||^2 (dimensionless residuals). Returns (u, iterations, mask of constrained coordinates).

    Coordinates whose Jacobian column is zero at the start are not constrained by the data and
    never move.
    """
    u, lam = np.asarray(u0, float).copy(), 1e-2
    r = residual_fn(u)
    active, it = None, 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the last count is reported)
        jac = np.column_stack([(residual_fn(u + step * e) - r) / step for e in np.eye(len(u))])
        if active is None:
            active = np.linalg.norm(jac, axis=0) > 1e-9
            if not active.any():
                break
        jtj, jtr, cost = jac.T @ jac, jac.T @ r, float(r @ r)
        sub = np.ix_(active, active)
        while lam < 1e8:
            a = jtj[sub] + lam * np.diag(np.diag(jtj[sub])) + 1e-12 * np.eye(int(active.sum()))
            delta = np.zeros(len(u))
            delta[active] = np.linalg.solve(a, -jtr[active])
            r_new = residual_fn(u + delta)
            if float(r_new @ r_new) < cost:
                u, r, lam = u + delta, r_new, max(lam / 3, 1e-9)
                break
            lam *= 4
        if lam >= 1e8 or cost - float(r @ r) < 1e-10 * max(cost, 1e-30):
            break
    return u, it, active if active is not None else np.zeros(len(u), bool)


# ----------------------------------------------------------------------------- fit
def fit_fields(
    problems: list[tuple[str, tuple, float]],
    params: tuple[str, ...],
    loss: str = DEFAULT_LOSS,
    scale: float | None = None,
) -> tuple[dict, dict, list, int]:
    """Values of ``params`` shared by all ``problems`` minimising the ``loss`` of their log errors (``fit_residuals``):
    (fitted, start, unconstrained, iterations).

    The start is the mean of the problems' accelerators' values (members of a family may differ).
    """
    start = {
        p: float(np.mean([getattr(pr.cluster.accelerator, p) for _, (pr, _), _ in problems]))
        for p in params
    }

    if scale is None:
        scale = loss_scale(loss, log_residuals(problems, {}))

    def residual_fn(u: np.ndarray) -> np.ndarray:
        return fit_residuals(
            log_residuals(problems, {p: _to_value(p, x) for p, x in zip(params, u)}),
            loss,
            scale,
        )

    u, iterations, active = levenberg_marquardt(
        residual_fn, np.array([_to_coord(p, start[p]) for p in params])
    )
    fitted = {p: (_to_value(p, x) if ok else start[p]) for p, x, ok in zip(params, u, active)}
    return fitted, start, [p for p, ok in zip(params, active) if not ok], iterations


def fit_joint(
    groups: dict[str, list],
    params: tuple[str, ...],
    shared: tuple[str, ...],
    loss: str = DEFAULT_LOSS,
    start_from: dict[str, dict[str, float]] | None = None,
    fit_families: FitFamilies = None,
    scale: float | None = None,
) -> dict[str, dict]:
    """``params`` per family and ``shared`` fields common to the families of their kind (``SHARED_KIND``),
    fitted as one problem over every family's residuals (``loss``, ``fit_residuals``): {family: fitted fields}.

    A family with fewer than 2 records per parameter fits matmul_efficiency alone, and none of the ``params``
    that ``fit_families`` limits to other families (``chosen_params``); one of another kind keeps its catalogue
    values of the shared fields. Shared fractions are rounded to 0.01, the resolution the step tables count them in. The search starts from the values in ``start_from`` (a
    fit_joint result: a warm start) where it has them, else from the mean of the records' catalogue values.
    """
    kind = {f: probs[0][1][0].cluster.accelerator.kind for f, probs in groups.items() if probs}
    own = {f: params_of(params, probs, f, fit_families) for f, probs in groups.items() if probs}
    joins = {f: tuple(s for s in shared if SHARED_KIND.get(s) == kind[f]) for f in own}
    names = [(f, p) for f in own for p in own[f]] + [("*", s) for s in shared]

    def mean_of(f, p):
        fams = [f] if f != "*" else [g for g in own if p in joins[g]]
        return float(
            np.mean(
                [getattr(pr.cluster.accelerator, p) for g in fams for _, (pr, _), _ in groups[g]]
                or [0.0]
            )
        )

    def start_of(f, p):
        known = [v[p] for g, v in (start_from or {}).items() if (g == f or f == "*") and p in v]
        return known[0] if known else mean_of(f, p)

    start = np.array([_to_coord(p, start_of(f, p)) for f, p in names])

    def fields_of(u: np.ndarray, f: str) -> dict:
        return {
            p: _to_value(p, x)
            for (g, p), x in zip(names, u)
            if g == f or (g == "*" and p in joins[f])
        }

    def log_errors(u: np.ndarray) -> np.ndarray:
        return np.concatenate([log_residuals(groups[f], fields_of(u, f)) for f in own])

    if scale is None:
        scale = loss_scale(loss, log_errors(start))

    def residual_fn(u: np.ndarray) -> np.ndarray:
        return fit_residuals(log_errors(u), loss, scale)

    u, _, _ = levenberg_marquardt(residual_fn, start)
    return {
        f: {
            p: round(v, 2) if p in joins[f] and _bounds(p) else v
            for p, v in fields_of(u, f).items()
        }
        for f in own
    }


def fit_accelerator(
    problems: list[tuple[str, tuple, float]], params: tuple[str, ...], loss: str = DEFAULT_LOSS
) -> dict:
    """Fit ``params`` of one accelerator family to its problems; before/after error statistics and values."""
    before = log_residuals(problems, {})
    fitted, start, unconstrained, iterations = fit_fields(problems, params, loss)
    after = log_residuals(problems, fitted)
    members = sorted({pr.cluster.accelerator.id for _, (pr, _), _ in problems})
    return {
        "records": len(problems),
        "accelerators": members,
        "ids": [pid for pid, _, _ in problems],
        "start": start,
        "fitted": fitted,
        "unconstrained": unconstrained,
        "at_bound": _at_bound(fitted),
        "iterations": iterations,
        "before": error_stats(list(np.expm1(before))),
        "after": error_stats(list(np.expm1(after))),
    }


def _at_bound(fitted: dict[str, float]) -> list[str]:
    """Parameters the fit pushed to a bound: a sign of a missing physical effect, not a calibration."""

    def at_bound(p, v):
        if _bounds(p) is None:
            return v < 1e-9
        lo, hi = _bounds(p)
        return v < lo + 1e-3 or v > hi - 1e-3

    return [p for p, v in fitted.items() if at_bound(p, v)]


def check_params(params: tuple[str, ...], shared: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The fitted fields: known calibration fields, at most ``MAX_FIT_PARAMS`` of them, none only beside shared
    fields (else InvalidArgumentError)."""
    params = tuple(dict.fromkeys(params))
    unknown = [p for p in params if p not in YAML_KEYS]
    if unknown or not (params or shared) or len(params) > MAX_FIT_PARAMS:
        raise InvalidArgumentError(
            f"calibration fits 1 to {MAX_FIT_PARAMS} of {', '.join(YAML_KEYS)} per accelerator "
            f"family; got {', '.join(params) or 'none'}"
        )
    return params


def runs_attention_kernel(problem: Problem, field: str) -> bool:
    """Whether the problem's fused attention runs at the accelerator's ``field`` (``attention_kernel_field``)."""
    return problem.workload.flash_attention and (
        attention_kernel_field(problem.workload, problem.cluster.accelerator) == field
    )


# A kernel's own fraction, which only the records running that kernel identify
KERNEL_FIELDS = ("attention_efficiency", "triton_attention_efficiency")


def defined_params(params: tuple[str, ...], problems: list) -> tuple[str, ...]:
    """The fields of ``params`` the problems identify: not one that is None on a part (no figure, so the kernel
    it costs is refused there: ``triton_attention_efficiency`` on a TPU), nor a kernel's own fraction
    (``KERNEL_FIELDS``) that none of them runs."""
    return tuple(
        p
        for p in params
        if all(getattr(pr.cluster.accelerator, p, 0.0) is not None for _, (pr, _), _ in problems)
        and (
            p not in KERNEL_FIELDS
            or any(runs_attention_kernel(pr, p) for _, (pr, _), _ in problems)
        )
    )


def unfitted_kernels(
    params: tuple[str, ...], fitted: Collection[str], held: list
) -> dict[str, float]:
    """The kernel fractions of ``params`` (``KERNEL_FIELDS``) that held-out problems run but a fold did not fit, as
    no other source runs the kernel: {field: the catalogue's value, which they keep}."""
    return {
        p: getattr(held[0][1][0].cluster.accelerator, p)
        for p in params
        if p in KERNEL_FIELDS and p not in fitted and defined_params((p,), held)
    }


def chosen_params(
    params: tuple[str, ...],
    num_records: int,
    family: str | None = None,
    fit_families: FitFamilies = None,
) -> tuple[str, ...]:
    """The fields of ``params`` a ``family`` fits: those ``fit_families`` ({field: accelerator ids or family names})
    does not limit to other families; all of them with at least 2 records per field, else matmul_efficiency alone
    (where the family may fit it)."""
    limits = fit_families or {}

    def allowed(name: str) -> bool:
        return name not in limits or family in {family_of(f) for f in limits[name]}

    own = tuple(p for p in params if allowed(p))
    if not own or num_records >= 2 * len(own):
        return own
    return ("matmul_efficiency",) if allowed("matmul_efficiency") else ()


def params_of(
    params: tuple[str, ...], problems: list, family: str | None, fit_families: FitFamilies = None
) -> tuple[str, ...]:
    """The fields of ``params`` a family fits on ``problems``: those they identify (``defined_params``), as
    ``chosen_params`` limits them."""
    return chosen_params(defined_params(params, problems), len(problems), family, fit_families)


def calibrate(
    records: list[dict],
    accelerators: Iterable[str] | None = None,
    params: tuple[str, ...] = DEFAULT_PARAMS,
    exclude: Iterable[str] = (),
    shared: tuple[str, ...] = (),
    loss: str = DEFAULT_LOSS,
    fit_families: FitFamilies = None,
) -> dict:
    """Fit calibration parameters per accelerator family; {family: fit_accelerator(...) result}.

    ``accelerators`` (ids or family names) defaults to every accelerator with records; ``exclude``
    lists record ids to leave out. With fewer than 2 records per parameter only
    matmul_efficiency is fitted. ``shared`` fields (``SHARED_KIND``) are fitted once over the
    families of their kind, together with each family's ``params`` (``fit_joint``); ``fit_families`` ({field: ids or
    family names}) limits a field of ``params`` to those families, the others keep their values of it (a family left
    with no field of its own only joins the shared fields). ``loss``: ``LOSSES``.
    """
    params = check_params(tuple(params), tuple(shared))
    stray = [f for f in fit_families or {} if f not in params]
    if stray:
        raise InvalidArgumentError(
            f"--fit-families: {', '.join(stray)} is not a fitted field (--fit {','.join(params) or 'none'})"
        )
    if loss not in LOSSES:
        raise InvalidArgumentError(f"--loss: unknown loss '{loss}'; known: {', '.join(LOSSES)}")
    if shared:
        return _calibrate_joint(
            records, accelerators, params, tuple(shared), exclude, loss, fit_families
        )
    kept = _kept_records(records, accelerators, exclude)
    out = {}
    for name in sorted({family_of(r["cluster"]["accelerator"]) for r in kept}):
        problems = usable_problems(kept, name)
        if not problems:
            out[name] = {"records": 0, "skipped_reason": "no usable records"}
            continue
        chosen = params_of(params, problems, name, fit_families)
        if chosen:
            out[name] = fit_accelerator(problems, chosen, loss)
    return out


def _kept_records(records: list[dict], accelerators, exclude) -> list[dict]:
    """The records a fit uses: not excluded by id, with an accelerator, of the asked accelerators
    (ids or family names; all when None)."""
    skip = set(exclude)
    kept = [r for r in records if r["id"] not in skip and r["cluster"]["accelerator"] is not None]
    if accelerators is None:
        return kept
    wanted = set(accelerators)
    return [
        r
        for r in kept
        if {r["cluster"]["accelerator"], family_of(r["cluster"]["accelerator"])} & wanted
    ]


def _calibrate_joint(
    records, accelerators, params, shared, exclude, loss, fit_families=None
) -> dict:
    """``calibrate`` with shared fields: one joint fit, reported per family as ``fit_accelerator`` does."""
    unknown = [s for s in shared if s not in SHARED_KIND]
    if unknown or set(shared) & set(params):
        raise InvalidArgumentError(
            f"--shared: {', '.join(shared)}: shared fields are {', '.join(SHARED_KIND)}, not also in --fit"
        )
    kept = _kept_records(records, accelerators, exclude)
    groups = {
        name: usable_problems(kept, name)
        for name in sorted({family_of(r["cluster"]["accelerator"]) for r in kept})
    }
    if not any(groups.values()):  # nothing to fit
        return {name: {"records": 0, "skipped_reason": "no usable records"} for name in groups}
    fitted = fit_joint(groups, params, shared, loss, fit_families=fit_families)
    out = {}
    for name, problems in groups.items():
        if not problems:
            out[name] = {"records": 0, "skipped_reason": "no usable records"}
            continue
        before, after = log_residuals(problems, {}), log_residuals(problems, fitted[name])
        out[name] = {
            "records": len(problems),
            "accelerators": sorted({pr.cluster.accelerator.id for _, (pr, _), _ in problems}),
            "ids": [pid for pid, _, _ in problems],
            "fitted": fitted[name],
            "unconstrained": [],
            "at_bound": _at_bound(fitted[name]),
            "shared": [s for s in shared if s in fitted[name]],
            "before": error_stats(list(np.expm1(before))),
            "after": error_stats(list(np.expm1(after))),
        }
    return out


# ----------------------------------------------------------------------------- generalization
def learned_routing_problems(records: Iterable[dict]) -> list[tuple[str, tuple, float]]:
    """(id, (problem, layout), measured tokens/s per device) of the records that set ``Workload.routing_cv``: costed
    with learned routing (``mapping.routing``: their notes do not say the benchmark forced balance), dropless (no
    capacity factor pads the experts) and with ep > 1 (one expert device holds every expert and waits for none)."""
    out = []
    for r in records:
        meas = r["measured"]
        if r["model"].get("moe") is None or meas["oom"] or not meas["tokens_per_s_per_device"]:
            continue
        mapped = record_to_problem(r)
        if isinstance(mapped, str):
            continue
        problem, layout = mapped
        moe = problem.model.moe
        assert moe is not None  # the record has a moe block
        if problem.workload.routing == "learned" and moe.capacity_factor is None and layout.ep > 1:
            out.append((r["id"], mapped, float(meas["tokens_per_s_per_device"])))
    return out


def routing_cv_scan(
    problems: list[tuple[str, tuple, float]],
    values: Iterable[float],
    loss: str = DEFAULT_LOSS,
    scale: float | None = None,
) -> dict[float, tuple[float, np.ndarray]]:
    """For each candidate ``routing_cv``: (the fit's objective, the sum of squared ``fit_residuals``; the log errors
    of ``problems``), the problems costed with that spread and the catalogue's calibration. One Huber scale for every
    candidate: ``huber_scale`` of the problems' log errors as costed (their own spread)."""
    if scale is None:
        scale = loss_scale(loss, log_residuals(problems, {}))
    out = {}
    for cv in values:
        errors = np.empty(len(problems))
        for i, prob in enumerate(problems):
            _, (varied, layout), measured = _with_routing_cv(prob, float(cv))
            errors[i] = math.log(tokens_per_s(varied, layout) / varied.num_devices / measured)
        out[float(cv)] = (float(np.sum(fit_residuals(errors, loss, scale) ** 2)), errors)
    return out


def _with_fields(
    prob: tuple[str, tuple, float], fields: dict[str, float]
) -> tuple[str, tuple, float]:
    """A problem tuple with calibration ``fields`` applied to its accelerator (held while other fields are fitted)."""
    pid, (problem, layout), measured = prob
    return (
        pid,
        (replace(problem, cluster=with_calibration(problem.cluster, **fields)), layout),
        measured,
    )


def _kind_of(fold: list, family: str) -> str:
    """The accelerator kind of a family's problems in a fold (gpu, tpu)."""
    return next(p[1][0].cluster.accelerator.kind for _, f, p in fold if f == family)


def _with_routing_cv(prob: tuple[str, tuple, float], cv: float) -> tuple[str, tuple, float]:
    pid, (problem, layout), measured = prob
    return (
        pid,
        (replace(problem, workload=replace(problem.workload, routing_cv=cv)), layout),
        measured,
    )


def leave_one_source_out(
    records: list[dict],
    params: tuple[str, ...] = DEFAULT_PARAMS,
    shared: tuple[str, ...] = (),
    fit_on: Callable[[dict], bool] | None = None,
    loss: str = DEFAULT_LOSS,
    routing_cv_grid: Iterable[float] | None = None,
    then: tuple[tuple[str, Callable[[dict], bool]], ...] = (),
    warm_start: bool = False,
    fit_families: FitFamilies = None,
) -> dict:
    """Leave-one-source-out: for each source family, fit the calibration (``params`` per accelerator
    family, as ``calibrate``) on every OTHER source's usable records and predict the held-out source.

    A family with fewer than 2 usable records in the other sources keeps the catalogue's values
    (``calibration`` says which, per held-out source). ``shared`` fields are refitted too, jointly over
    the other sources' families of their kind (``fit_joint``). Returns {"params", "count",
    "median_abs_rel_error", "p90_abs_rel_error", "median_rel_error", "in_sample_median_abs_rel_error"
    (the same records, calibration fitted on all sources), "by_source": {source: error stats +
    "calibration": {family: how}}, "rel_errors": {id: LOSO rel error}}. ``fit_on`` (default: every record)
    picks the records a fit may use, as the catalogue's was made (``calibrate --cuda-graphs``); all are predicted.
    ``loss`` as the catalogue's fit used (``calibrate --loss``). With ``routing_cv_grid``, each fold first refits
    ``Workload.routing_cv`` on that grid (``routing_cv_scan`` of the other sources' ``learned_routing_problems``, as
    scripts/fit_routing_cv.py set the default) and costs all its records with it; "calibration" names the value.
    ``then``: (shared field, which records fit it) fitted in turn after the fold's ``params``, with those held, on the
    other sources' records it picks (as the catalogue's CUDA-graph shares were fitted after the overheads); fewer
    than 2 such records keep the catalogue's value. With ``warm_start`` and ``shared`` fields, each fold's joint fit
    starts from the all-sources fit (fitted first) instead of the catalogue values: fewer iterations, and a
    fold may stop at a slightly different point of a flat optimum. ``fit_families`` limits fields of ``params`` to
    some families, as ``calibrate``.
    """
    params = check_params(tuple(params), tuple(shared))
    items = []  # (source, family, problem tuple)
    fitted_ids = set()  # the records a fit may use
    for r in records:
        acc = r["cluster"]["accelerator"]
        for prob in usable_problems([r], acc) if acc is not None else ():
            items.append((source_family(r), family_of(acc), prob))
            if fit_on is None or fit_on(r):
                fitted_ids.add(prob[0])
    picked_by = {name: {r["id"] for r in records if picks(r)} for name, picks in then}
    grid = tuple(routing_cv_grid or ())
    learned = {pid for pid, _, _ in learned_routing_problems(records)} if grid else set()

    groups = {fam: [p for _, f, p in items if f == fam] for fam in sorted({f for _, f, _ in items})}
    fit_groups = {fam: [p for p in probs if p[0] in fitted_ids] for fam, probs in groups.items()}
    # one Huber scale for every fit of every fold: the whole set's spread at the catalogue's values
    scale = loss_scale(loss, log_residuals([p for _, _, p in items if p[0] in fitted_ids], {}))

    def joint_on_all() -> dict[str, dict]:
        """The ``shared`` joint fit on every source's records (``fit_joint``)."""
        return fit_joint(
            {f: g for f, g in fit_groups.items() if len(g) >= 2},
            params,
            shared,
            loss,
            fit_families=fit_families,
            scale=scale,
        )

    everywhere = joint_on_all() if shared and warm_start else None  # the folds start from it

    def fold(source: str) -> tuple[dict[str, float], dict]:
        """The held-out source's LOSO rel errors by id and its ``by_source`` entry."""
        rel: dict[str, float] = {}
        how: dict[str, str] = {}
        fold = items
        if grid:
            train_learned = [p for s, _, p in items if s != source and p[0] in learned]
            scan = routing_cv_scan(train_learned, grid, loss, scale)
            cv = min(scan, key=lambda c: scan[c][0])
            fold = [(s, f, _with_routing_cv(p, cv)) for s, f, p in items]
            how["routing_cv"] = (
                f"{cv:.2f}, refit on {len(train_learned)} learned-routing records of the other sources"
            )
        joint = {}
        if shared:
            train_groups = {
                f: [p for s, g, p in fold if s != source and g == f and p[0] in fitted_ids]
                for f in sorted({f for _, f, _ in items})
            }
            joint = fit_joint(
                {f: g for f, g in train_groups.items() if len(g) >= 2},
                params,
                shared,
                loss,
                start_from=everywhere,
                fit_families=fit_families,
                scale=scale,
            )
        fold_fields: dict[
            str, dict[str, float]
        ] = {}  # every family's: the held-out source's, and what ``then`` fits on
        held_families = {f for s, f, _ in fold if s == source}
        for fam in sorted({f for _, f, _ in fold} if then else held_families):
            train = [p for s, f, p in fold if s != source and f == fam and p[0] in fitted_ids]
            fields: dict[str, float] = {}
            if len(train) >= 2:
                chosen = params_of(params, train, fam, fit_families) + tuple(
                    s for s in shared if s in joint.get(fam, {})
                )
                fields = (
                    joint[fam]
                    if shared
                    else fit_fields(train, chosen, loss, scale)[0]
                    if chosen
                    else {}
                )
                others = len(
                    {s for s, f, p in fold if s != source and f == fam and p[0] in fitted_ids}
                )
                note = (
                    f"{', '.join(chosen)} refit on {len(train)} records of {others} other "
                    f"source{'s' if others > 1 else ''}"
                )
            else:
                note = "catalogue values (no other source has records on this family)"
            held = [p for s, f, p in fold if s == source and f == fam]
            note += "".join(  # where the family was refit: which kernel fractions it could not refit
                f"; {p}: the catalogue's {v:g}, fitted on this source (no other source runs its kernel)"
                for p, v in (
                    unfitted_kernels(params, fields, held) if fields and held else {}
                ).items()
            )
            if fam in held_families:
                how[fam] = note
            fold_fields[fam] = fields
        for name, _ in then:  # each in turn, the fold's fields (and the shares before it) held
            stage = {
                f: [
                    _with_fields(p, fold_fields[f])
                    for s, f2, p in fold
                    if f2 == f and s != source and p[0] in picked_by[name]
                ]
                for f in fold_fields
            }
            stage = {f: probs for f, probs in stage.items() if probs}
            if sum(map(len, stage.values())) < 2:
                how[name] = "catalogue value (fewer than 2 such records in the other sources)"
                continue
            values = fit_joint(stage, (), (name,), loss, scale=scale)
            value = next(iter(values.values()))[name]
            for fam in fold_fields:
                if SHARED_KIND.get(name) == _kind_of(fold, fam):
                    fold_fields[fam] = {**fold_fields[fam], name: value}
            how[name] = (
                f"{value:.2f}, refit on {sum(map(len, stage.values()))} records of the other sources"
            )
        for fam in sorted({f for s, f, _ in fold if s == source}):
            held = [p for s, f, p in fold if s == source and f == fam]
            for (pid, _, _), r_log in zip(held, log_residuals(held, fold_fields[fam])):
                rel[pid] = float(np.expm1(r_log))
        ids = {p[0] for s, _, p in fold if s == source}
        return rel, {**error_stats([rel[i] for i in ids if i in rel]), "calibration": how}

    def in_sample_errors() -> list[float]:
        """Every usable record's rel error under the calibration fitted on all sources."""
        out: list[float] = []
        joint = (everywhere or joint_on_all()) if shared else {}
        for fam, probs in groups.items():
            train = fit_groups[fam]
            chosen = params_of(params, train, fam, fit_families)
            fields = (
                joint.get(fam, {})
                if shared
                else fit_fields(train, chosen, loss, scale)[0]
                if len(train) >= 2 and chosen
                else {}
            )
            out += list(np.expm1(log_residuals(probs, fields)))
        return out

    sources = sorted({s for s, _, _ in items})
    # the in-sample fit (the largest, first) and every fold are independent: spread over the CPUs
    done = parallel_map(
        lambda task: in_sample_errors() if task is None else fold(task), [None, *sources]
    )
    in_sample = cast(list[float], done[0])
    rel: dict[str, float] = {}
    by_source: dict[str, dict] = {}
    for source, (fold_rel, entry) in zip(sources, cast(list[tuple[dict, dict]], done[1:])):
        rel.update(fold_rel)
        by_source[source] = entry
    overall = error_stats(list(rel.values()))
    return {
        "params": list(params) + list(shared),
        **{
            k: overall[k]
            for k in ("count", "median_abs_rel_error", "p90_abs_rel_error", "median_rel_error")
        },
        "in_sample_median_abs_rel_error": error_stats(in_sample)["median_abs_rel_error"],
        "by_source": by_source,
        "rel_errors": rel,
    }


# ----------------------------------------------------------------------------- catalogue
def write_calibration(
    fitted: dict,
    hardware_dir: str | Path,
    runs_name: str = "runs_dev.yaml",
    today: _dt.date | None = None,
) -> list[Path]:
    """Rewrite the ``calibration:`` values (and ``sources.calibration``, or ``sources.calibration_moe`` for a fit of
    MoE fields only, which leaves the dense fields' provenance alone) of hardware/<id>.yaml.

    ``fitted`` is ``calibrate()``'s result or {accelerator: {field: SI value}}. Comments and
    every other line are kept; the new file must still load, else nothing is written.
    """
    written = []
    for name, entry in fitted.items():
        values = (
            (entry.get("fitted") if "fitted" in entry or "records" in entry else entry)
            if isinstance(entry, dict)
            else {}
        )
        if not values:
            continue
        n = entry.get("records", "?")
        # a family's fit goes to every member of it (one calibration, FAMILIES), whether or not its records ran there:
        # the h100 class's dense records are all H100s, and the H200 and H800 carry the fit
        members = sorted(a for a, f in FAMILIES.items() if f == name) or [name]
        for acc_id in members:
            path = Path(hardware_dir) / f"{acc_id}.yaml"
            of = f", family {name}" if members != [name] else ""
            note = (
                f"fitted by layoutsearch calibrate on {runs_name} ({n} records{of}) on "
                f"{(today or _dt.date.today()).isoformat()}"
            )
            text = _rewrite(path.read_text(), values, note)
            accelerator_from_dict(_load_text(text, path), str(path))
            io.atomic_write(path, text, "--write")
            written.append(path)
    catalogue.load_accelerator.cache_clear()
    topology.resolve_cluster.cache_clear()  # type: ignore[attr-defined]  # set in core.topology
    return written


def _rewrite(text: str, values: dict[str, float], note: str) -> str:
    """Replace the values of the given fields inside the top-level ``calibration:`` block and the note (under
    ``calibration_moe`` when only MoE fields were fitted)."""
    lines, block = text.splitlines(keepends=True), None
    note_key = "calibration_moe" if all(k.startswith("moe_") for k in values) else "calibration"
    yaml_values = {YAML_KEYS[k][0]: v * YAML_KEYS[k][1] for k, v in values.items()}
    for i, line in enumerate(lines):
        top = re.match(r"^(\w+):", line)
        if top:
            block = top.group(1)
            continue
        # the value: a double-quoted string (which may hold '#') or plain text up to a comment
        m = re.match(r'^(\s+)(\w+):(\s*)("[^"\n]*"|[^#\n]*?)(\s*#.*)?(\r?\n)?$', line)
        if not m:
            continue
        indent, key, gap, _, comment, end = m.groups()
        if block == "calibration" and key in yaml_values:
            lines[i] = f"{indent}{key}:{gap or ' '}{yaml_values[key]:.4g}{comment or ''}{end or ''}"
        elif block == "sources" and key == note_key:
            lines[i] = f'{indent}{key}: "{note}"{comment or ""}{end or ""}'
    return "".join(lines)


def _load_text(text: str, path: Path) -> dict:
    """Parse rewritten YAML text; a syntax error is a one-line CatalogueError."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogueError(
            f"{path}: rewritten calibration is not valid YAML ({str(exc).splitlines()[0]})"
        ) from None
