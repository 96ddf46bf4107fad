"""JSON documents per docs/OUTPUT.md: a contract; add fields freely, never rename or drop one."""

from __future__ import annotations

from layoutsearch.core.problem import Problem
from layoutsearch.core.stages import SPLIT_NAMES
from layoutsearch.core.uncertainty import uncertainty_band
from layoutsearch.costs import params, terms
from layoutsearch.costs.estimate import Estimate, offload_seconds
from layoutsearch.costs.goodput import Resilience
from layoutsearch.report import planning
from layoutsearch.search.cpsat import SEED
from layoutsearch.search.objectives import UNITS
from layoutsearch.search.ranking import layout_risks, ranking_description, risk_band


def layout_record(
    est: Estimate,
    rank: int | None = 1,
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> dict:
    """One layout record (OUTPUT.md 'A layout record'), with itemised keys beside the contract's,
    its goodput under failures (``resilience``; the defaults without it) and the time and cost
    to train the workload's ``training_tokens`` at that goodput (null without them)."""
    lay = est.layout
    low, high = band_of(est)
    good = planning.layout_goodput(est, resilience)
    return {
        "rank": rank,
        "degrees": lay.all_degrees,
        "zero_stage": lay.zero_stage,
        "virtual_stages": lay.virtual_stages,
        "num_microbatches": lay.num_microbatches,
        "microbatch_seqs": int(lay.microbatch_seqs(est.workload)),
        "recompute": lay.recompute,
        **({} if lay.offload == "none" else {"offload": lay.offload}),
        "sequence_parallel": lay.sequence_parallel,
        "schedule": lay.schedule,
        **({"cp_flavour": lay.cp_flavour} if lay.cp > 1 else {}),  # read only where cp > 1
        "stage_layers": stage_layers_record(est),
        "kv_replication": params.kv_replication(est.model, lay.tp),
        "axes": {
            name: [[axis, factor] for axis, factor in placed] for name, placed in lay.placements
        },
        "memory_bytes": dict(est.memory_bytes),
        "memory_moments_bytes": {
            name: sum(items.values()) for name, items in est.memory_moments.items()
        },
        "peak_moment": est.peak_moment,
        "worst_stage": est.worst_stage,
        "time_s": dict(est.time_s),
        **({} if lay.offload == "none" else {"offload_s": offload_seconds(est.problem, lay)}),
        "mfu": est.mfu,
        "mfu_convention": est.mfu_convention,
        "tokens_per_s": est.tokens_per_s,
        "tokens_per_s_per_device": est.tokens_per_s / est.cluster.num_devices,
        "fits": est.fits,
        "risks": list(layout_risks(est)),
        "step_time_band_s": [est.step_time_s * (1 + low), est.step_time_s * (1 + high)],
        "step_time_rel_band": [low, high],
        **good.record(),
        **planning.plan_numbers(
            est.workload.training_tokens,
            est.tokens_per_s,
            est.cluster.num_devices,
            price_per_device_hour,
            good.goodput,
        ),
        "price_per_device_hour": price_per_device_hour,
        **planning.energy_numbers(est, good.goodput, (resilience or Resilience()).price_per_kwh),
    }


def stage_layers_record(est: Estimate) -> dict:
    """Layers of the first, a middle and the last pipeline stage, and how they were split (core.stages)."""
    lay = est.layout
    first, middle, last, kind, _ = terms.layout_split(est.model, lay)
    return {"first": first, "middle": middle, "last": last, "split": SPLIT_NAMES[kind]}


def band_of(est: Estimate) -> tuple[float, float]:
    """The relative uncertainty band (low, high) of the estimate's step time (``core.uncertainty``:
    by accelerator kind, dense or MoE, and whether the part's compute fractions were fitted: not for fp4
    training, which no development record runs)."""
    acc = est.cluster.accelerator
    return uncertainty_band(acc.kind, est.problem.model.moe is not None, calibrated(est))


def comparison_band(est: Estimate) -> tuple[float, float]:
    """The band a claim between two layouts of one problem is judged with (``search.explain.versus_claim``: ``explain
    --versus``, the ranking notes, an export target's best against the unrestricted winner, validate's claims): the
    calibrated band of the estimate's class (accelerator kind, dense or MoE) even where its part's compute fractions
    are borrowed or its GEMMs run fp4, as the ranking's risk band is (``search.ranking.risk_band``). A borrowed
    fraction moves both layouts' compute alike and their ratio cancels most of it: measured, the ratio of two layouts
    of one problem predicted with another family's fractions errs by about as much as with the part's own
    (core/uncertainty.yaml ``uncalibrated.paired`` against ``paired``, ``validation.stats.paired_errors``), well
    inside what this band's test asks of a claim (tests/test_versus.py), where the level band of ``band_of`` would
    ask about 1.7x on a dense GPU."""
    return uncertainty_band(est.cluster.accelerator.kind, est.problem.model.moe is not None)


def calibrated(est: Estimate) -> bool:
    """Whether the estimate's rates were fitted on measured runs: the part's compute fractions, on runs of this
    kind of model (dense or MoE), and not fp4 GEMMs (``core.problem.warn_fp4``)."""
    moe = est.problem.model.moe is not None
    return est.cluster.accelerator.calibrated_for(moe) and est.problem.workload.precision != "fp4"


def set_price(records: list[dict], price_per_device_hour: float | None) -> None:
    """Price layout records in place: ``cost`` = ``device_hours`` x the price (null without either)."""
    for rec in records:
        rec["price_per_device_hour"] = price_per_device_hour
        rec["cost"] = planning.cost(rec["device_hours"], price_per_device_hour)


def estimate_document(
    est: Estimate, price_per_device_hour: float | None = None, resilience: Resilience | None = None
) -> dict:
    """`layoutsearch estimate --format json`."""
    return {
        "problem": est.problem.record(),
        "params": {
            **est.params,
            "per_device_by_stage": {
                str(s): params.stage_params(est.model, est.layout, s)
                for s in sorted({0, est.layout.pp - 1})
            },
        },
        "layout": layout_record(est, 1, price_per_device_hour, resilience),
        "memory_moments_bytes": est.memory_moments,
        "collectives": est.collectives,
        "violations": [v.as_dict() for v in est.violations],
    }


def solve_document(
    problem: Problem,
    result,
    explanation: dict | None = None,
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> dict:
    """`layoutsearch solve --format json` (OUTPUT.md): problem, solver proof, ranked layouts."""
    doc = {
        "problem": problem.record(),
        "solver": {
            "method": result.method,
            "status": result.status,
            "objective": result.objective_value,
            "bound": result.bound,
            "gap": result.gap,
            "objective_name": result.objective,
            "objective_unit": UNITS[result.objective],
            "quantum_s": result.quantum_s,
            "wall_s": result.wall_s,
            "solver_wall_s": result.solver_wall_s,
            "num_candidates": result.num_candidates,
            "rows_kept_for_solver": result.rows_kept,
            "tie_break": ranking_description(result.objective, risk_band(problem)),
            "tie_tolerance": result.tie_tolerance,
            "ranking_status": result.ranking_status,
            "seed": SEED,
            # by step time, where the risk order ranked layout 1 beyond the ties of the least step time: the
            # simplest layout at it (a layout record), else null
            "least_step_layout": None
            if result.least is None
            else layout_record(result.least, None, price_per_device_hour, resilience),
        },
        "layouts": [
            layout_record(est, rank, price_per_device_hour, resilience)
            for rank, est in enumerate(result.layouts, start=1)
        ],
    }
    if not result.layouts and explanation is not None:
        doc["explanation"] = explanation
    return doc


def what_if_document(
    factors: dict[str, float],
    base: Estimate | None,
    other: Estimate | None,
    *,
    method: str,
    status: str | None = None,
    base_on_other: Estimate | None = None,
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> dict:
    """The `what_if` object: the factors, the winner on the scaled hardware (``other``; the same
    layout re-estimated for `estimate`) and its step time against the base winner's.

    ``base_on_other`` is the base winner re-estimated on the scaled hardware (what keeping the
    old layout would give)."""
    base_s = base.step_time_s if base else None
    other_s = other.step_time_s if other else None
    return {
        "factors": dict(factors),
        "method": method,
        "status": status,
        "layout": layout_record(other, 1, price_per_device_hour, resilience) if other else None,
        "same_layout": None if base is None or other is None else base.layout == other.layout,
        "base_step_time_s": base_s,
        "step_time_s": other_s,
        "step_time_rel_change": planning.relative_change(other_s, base_s),
        "base_layout_step_time_s": base_on_other.step_time_s if base_on_other else None,
        "base_layout_fits": base_on_other.fits if base_on_other else None,
    }
