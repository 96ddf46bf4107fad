"""Predictions against published measured runs (`layoutsearch validate RUNS.yaml`).

Input: the record format of docs/RUN_RECORDS.md, validated with pydantic at the boundary
(``load_runs``). Output: the document of OUTPUT.md "layoutsearch validate" (``validate_runs``).
How a record becomes an engine problem (``record_to_problem``, every rule applied to every
record) is docs/run_record_mapping.md (``layoutsearch.validation.mapping``; its names are re-exported here).

A record the engine cannot use (a null it needs, an unknown accelerator, precision, mlp or
recompute, a layout it rejects, an unforeseen engine error) is a per-record skip with its reason,
never an abort of the file; an unknown key is a loader warning. Only a malformed FILE (not
YAML, not a list, a wrong-typed value, a duplicate id) is one CatalogueError line.

Generalization (``summary.loso``, only with ``loso``: ``validate --loso``): leave-one-source-out calibration (``calibrate.leave_one_source_out``:
for each source family, the per-family calibration fitted on every other source, then that source
predicted); each record's out-of-sample error is its ``loso_rel_error``. Ranking
(``summary.ranking``): Spearman rho per layout sweep, and per group of runs that differ only in
the layout (same source, model, cluster, batch) whether the engine's fastest predicted layout is
the measured fastest.

Compared metric: every record's ``rel_error`` is on tokens/s per device
(``measured.tokens_per_s_per_device``, convention-free; ``compared_metric`` names it, null for a
record that has only ``oom: true`` to check). This holds for mixture-of-experts records too
(docs/RUN_RECORDS.md: their sources count FLOPs differently: causal attention halved or not, MTP counted
or not), whose ``measured.tflops_per_device`` is the source's own figure and is never compared.

MFU: where a record reports one, the prediction is reported under the record's convention,
divided by the record's own ``peak_tflops_used`` so both numbers share a denominator:
palm-6n-12lhqt -> "palm", palm-causal -> "palm-causal", megatron-core -> "palm" (its
num_floating_point_operations = 6 N_matmul + 12 L s n_q h (non-causal) + 6 D V per token, the
engine's "palm"), megatron-eq3-hardware -> "palm" plus the recomputed forward
(``hardware_flops_per_token``), anything else -> "model".
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from layoutsearch.core.errors import LayoutsearchError
from layoutsearch.core.parallel import parallel_map
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Objective
from layoutsearch.core.units import TERA
from layoutsearch.costs import flops
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.costs.flops import hardware_flops_per_token  # noqa: F401  (re-exported for the tests)
from layoutsearch.report.output import band_of, comparison_band
from layoutsearch.search import solve
from layoutsearch.search.cpsat import row_bounds
from layoutsearch.search.enumerate import candidate_grid
from layoutsearch.search.explain import versus_claim
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import assemble, build_tables
from layoutsearch.validation.bands import band_coverage, mark_in_band
from layoutsearch.validation.calibrate import DEFAULT_PARAMS, DEFAULT_SHARED, leave_one_source_out
from layoutsearch.validation.mapping import (  # noqa: F401  (re-exported: the mapping is part of this interface)
    ACCELERATOR_ALIASES,
    ENGINE_NEEDS,
    MODEL_KEYS,
    POWER_RATING_W,
    RECOMPUTE,
    UNMODELLED_PRECISIONS,
    Mapped,
    assumed_fields,
    fused_attention,
    mapping_notes,
    record_framework,
    record_to_estimate,
    record_to_problem,
    release_options,
    tp_comm_overlap,
    zero3_collectives_per_layer,
)
from layoutsearch.validation.runs import load_runs, source_family  # noqa: F401  (part of this module's interface)
from layoutsearch.validation.stats import (  # noqa: F401  (re-exported for the tests)
    best_layout_groups,
    error_stats,
    layout_sweeps,
    power_group,
    ranking,
    spearman,
    summarize,
)

RANK_ROWS = 256  # (S, K) rows costed first when ranking a published layout; each next batch doubles

ENGINE_CONVENTION = {
    "palm-6n-12lhqt": "palm",
    "palm-causal": "palm-causal",
    "megatron-core": "palm",
    "megatron-eq3-hardware": "palm",
    "other": "model",
}


# ----------------------------------------------------------------------------- per record
def predicted_mfu(record: dict, est: Estimate) -> float | None:
    """The prediction's MFU under the record's convention and per-device peak (None when no MFU is reported)."""
    meas = record["measured"]
    if meas["mfu"] is None or not meas["peak_tflops_used"]:
        return None
    conv = meas["mfu_convention"] or "other"
    s = est.workload.seq_len
    per_token = (
        hardware_flops_per_token(est.model, s, est.layout.recompute)
        if conv == "megatron-eq3-hardware"
        else flops.model_flops_per_token(est.model, s, ENGINE_CONVENTION.get(conv, "model"))
    )
    return (
        per_token * est.tokens_per_s / est.cluster.num_devices / (meas["peak_tflops_used"] * TERA)
    )


def time_shares(est: Estimate) -> dict[str, float]:
    """Each itemised (slash-keyed) time component and the bubble as a fraction of the step (sums to 1)."""
    step = est.time_s["step"]
    return {k: v / step for k, v in est.time_s.items() if ("/" in k or k == "bubble") and v > 0}


def miss_reason(rel_error: float, est: Estimate) -> str:
    """One line: direction and size of the miss, where the predicted step goes, the largest collective."""
    shares = time_shares(est)
    compute = sum(v for k, v in shares.items() if k.startswith("compute/"))
    rest = sorted(((v, k) for k, v in shares.items() if not k.startswith("compute/")), reverse=True)
    parts = (
        ", ".join(f"{k} {v:.0%}" for v, k in rest[:3] if v >= 0.005)
        or "no exposed comm, bubble or overhead"
    )
    side = "too fast" if rel_error > 0 else "too slow"
    text = (
        f"predicted {abs(rel_error):.0%} {side}; step {est.time_s['step']:.3g} s = compute {compute:.0%} "
        f"(attention {shares.get('compute/attention', 0):.0%}, recompute {shares.get('compute/recompute', 0):.0%})"
        f" + {parts}"
    )
    if est.collectives:
        big = max(est.collectives, key=lambda c: c.get("time_s", 0.0))
        text += (
            f"; longest collective: {big['name']} {big.get('time_s', 0.0):.3g} s each"
            f" ({big.get('frequency', '')}, group {big.get('group_size', '?')})"
        )
    return text


def _no_measurement(record: dict) -> str | None:
    """Rule 13: a skip reason when the record has nothing to compare (no throughput, not an OOM)."""
    meas = record["measured"]
    if meas["tokens_per_s_per_device"] is None and not meas["oom"]:
        return (
            "no measurement: measured.tokens_per_s_per_device is null and measured.oom is not true"
        )
    return None


def evaluate_record(record: dict) -> dict:
    """The validate entry of one record (OUTPUT.md fields plus diagnostics); never raises for a record."""
    return _evaluate(record)[0]


def _evaluate(record: dict) -> tuple[dict, tuple | None, Estimate | None]:
    """``evaluate_record``'s entry, with the record's (problem, layout) and estimate (None when skipped)."""
    meas = record["measured"]
    out = {
        "id": record["id"],
        "source_family": source_family(record),
        "accelerator": record["cluster"]["accelerator"],
        "power_limit": power_group(record["cluster"].get("power_limit_w")),
        "num_devices": record["cluster"]["num_devices"],
        "trust": record["trust"],
        "framework": record["workload"].get("framework"),
        "compared_metric": "tokens_per_s_per_device" if meas["tokens_per_s_per_device"] else None,
        "measured_tokens_per_s_per_device": meas["tokens_per_s_per_device"],
        "predicted_tokens_per_s_per_device": None,
        "rel_error": None,
        "measured_oom": bool(meas["oom"]),  # null with a throughput: the run ran
        "predicted_fits": None,
        "measured_mfu": meas["mfu"],
        "mfu_convention": meas["mfu_convention"],
        "predicted_mfu": None,
        "measured_memory_gib": meas["memory_gib_per_device"],
        "predicted_memory_gib": None,
        "predicted_memory_share": None,  # predicted peak / usable memory (> 1: predicted OOM)
        "published_layout_rank": None,
        "best_predicted_speedup": None,
        **NO_CLAIM,
        "time_shares": None,
        "reason": None,
        "notes": [],
        "skipped_reason": None,
        "loso_rel_error": None,
        "step_time_rel_band": None,
        "in_band": None,
        "loso_in_band": None,
        "assumed": [],
        "fit_depends_on_assumed": False,
    }
    try:
        out["notes"] = mapping_notes(record)
        out["assumed"] = assumed_fields(record)
        mapped = _no_measurement(record) or record_to_estimate(record)
        problem, est = (mapped, None) if isinstance(mapped, str) else (mapped[:2], mapped[2])
    except LayoutsearchError as exc:
        problem = f"engine rejects the record: {exc}"
    except Exception as exc:  # noqa: BLE001 - one unforeseen record must not hide the others; it is listed
        problem = f"engine error on this record ({type(exc).__name__}: {exc})"
    if isinstance(problem, str):
        out["skipped_reason"] = problem
        return out, None, None
    assert est is not None  # a problem, not a reason to skip, was estimated
    pred = est.tokens_per_s / est.cluster.num_devices
    out.update(
        predicted_tokens_per_s_per_device=pred,
        predicted_fits=est.fits,
        predicted_mfu=predicted_mfu(record, est),
        predicted_memory_gib=est.memory_bytes["peak"] / 2**30,
        predicted_memory_share=est.memory_bytes["peak"] / est.memory_bytes["capacity"],
        time_shares=time_shares(est),
        step_time_rel_band=list(band_of(est)),
        # rule 27: predicted out of memory with recompute none assumed: it may have run with recompute
        fit_depends_on_assumed=not est.fits and "layout.recompute" in out["assumed"],
    )
    if meas["tokens_per_s_per_device"]:
        out["rel_error"] = pred / meas["tokens_per_s_per_device"] - 1.0
        out["reason"] = miss_reason(out["rel_error"], est)
    mark_in_band([out], "rel_error", "in_band")
    return out, problem, est


def rank_published(record: dict) -> dict:
    """Rank of the published layout among every candidate of the engine for the same model,
    cluster and batch (1 = nothing predicted faster), and the best candidate's predicted
    speed-up over it (both by the search's tables)."""
    problem = record_to_problem(record)
    if isinstance(problem, str):
        return dict(NOT_RANKED)
    return rank_layouts(problem[0], [estimate(*problem, strict=False).step_time_s])[0]


NOT_RANKED = {"published_layout_rank": None, "best_predicted_speedup": None}
NO_CLAIM = {"claimed_speedup": None, "claim_distinguishable": None}


def ranked_claims(
    problem: Problem, step_times_s: list[float], options: SearchOptions | None = None
) -> list[dict]:
    """The engine's claim over layouts of one problem with these predicted step times: the
    published step over the search's first-ranked layout's (``solve`` top 1 under ``options``: what the
    record's framework release could run, ``mapping.release_options``; both by ``estimate``), and whether
    the two are distinguishable (``explain --versus``: uncertainty bands apart)."""
    result = solve(problem, SearchRequest(top_k=1, options=options or SearchOptions()))
    if not result.layouts:
        return [dict(NO_CLAIM) for _ in step_times_s]
    winner = result.layouts[0]
    out = []
    for published_s in step_times_s:
        versus = versus_claim(
            winner, replace(winner, step_time_s=published_s), comparison_band(winner)
        )
        out.append(
            {
                "claimed_speedup": versus["speedup"],
                "claim_distinguishable": versus["distinguishable"],
            }
        )
    return out


def rank_layouts(problem: Problem, step_times_s: list[float]) -> list[dict]:
    """``rank_published`` of layouts of one problem with these predicted step times, from one
    candidate space and one set of tables (as ``search.rank_among_candidates`` counts).

    Only the (S, K) rows whose lower bound (``search.cpsat.row_bounds``) is below both the
    published step and the best step found so far are costed: no other row holds a faster
    fitting candidate or a better best, so the counts are those of costing every candidate.
    """
    space = build_space(problem, SearchOptions())
    if not len(space.sk_k):
        return [dict(NOT_RANKED) for _ in step_times_s]
    tables = build_tables(space)
    bound, _, fits = row_bounds(space, tables, Objective.step_time.value)
    rows = np.nonzero(fits)[0]
    rows = rows[np.argsort(bound[rows], kind="stable")]
    return [_rank(space, tables, rows, bound, published) for published in step_times_s]


def _rank(space, tables, rows: np.ndarray, bound: np.ndarray, published_s: float) -> dict:
    """One published step time's rank among the fitting candidates of ``rows`` (sorted by ``bound``)."""
    target = published_s / tables.quantum_s - 0.5  # quantised steps below it are faster
    faster, best, start, size = 0, None, 0, RANK_ROWS
    while start < len(rows) and (
        bound[rows[start]] < target or best is None or bound[rows[start]] < best
    ):
        sk, ri, z, o = candidate_grid(space, rows[start : start + size])
        m = assemble(tables, space, sk, ri, z, o)
        steps = m["step"][m["fits"]]
        faster += int((steps < target).sum())
        if len(steps):
            best = int(steps.min()) if best is None else min(best, int(steps.min()))
        start, size = start + size, size * 2
    if best is None:
        return dict(NOT_RANKED)
    return {
        "published_layout_rank": faster + 1,
        "best_predicted_speedup": published_s / (best * tables.quantum_s),
        "candidates": space.num_candidates(),
    }


def loso_block(
    records: list[dict], entries: list[dict], params: tuple[str, ...] = DEFAULT_PARAMS
) -> dict:
    """``summary.loso`` (see ``calibrate.leave_one_source_out``); each entry gets its ``loso_rel_error``.

    An unforeseen failure of the fits is reported in the block (``error``), never raised.
    """
    try:
        result = leave_one_source_out(records, params, DEFAULT_SHARED)
    except Exception as exc:  # noqa: BLE001 - the per-record results stand without the generalization block
        return {
            "params": list(params),
            "count": 0,
            "median_abs_rel_error": None,
            "p90_abs_rel_error": None,
            "median_rel_error": None,
            "in_sample_median_abs_rel_error": None,
            "by_source": {},
            "error": f"leave-one-source-out failed ({type(exc).__name__}: {exc})",
        }
    rel = result.pop("rel_errors")
    for e in entries:
        e["loso_rel_error"] = rel.get(e["id"])
    return result


def loso_line(loso: dict | None) -> str:
    """One line on the leave-one-source-out block: its errors, its failure, or that it was not run."""
    if loso is None:
        return "leave-one-source-out: not run (--loso refits the calibration without each source)"
    if loso.get("error"):
        return f"leave-one-source-out: {loso['error']}"
    if not loso["count"]:
        return "leave-one-source-out: no record could be predicted from the other sources"
    return (
        f"leave-one-source-out: median |error| {loso['median_abs_rel_error']:.1%}, p90 "
        f"{loso['p90_abs_rel_error']:.1%} over {loso['count']} records predicted from the other "
        f"sources' calibration (in sample: median {loso['in_sample_median_abs_rel_error']:.1%})"
    )


def validate_runs(
    records: list[dict],
    max_median_error: float = 0.10,
    rank: bool = True,
    warnings: list[str] | None = None,
    loso: bool = False,
    workers: int | None = None,
) -> dict:
    """Evaluate every record; the OUTPUT.md document {"records": [...], "summary": {...}}.

    With ``rank`` each evaluated record also gets ``published_layout_rank`` and
    ``best_predicted_speedup`` (see ``rank_published``); without it those stay null. With
    ``loso`` (minutes: a calibration fit per source) the summary gets the leave-one-source-out
    block ``loso`` and each record its ``loso_rel_error``; without it (the default) those are
    null. Each record's ``step_time_rel_band`` and ``in_band`` (``loso_in_band`` with ``loso``)
    and the summary's ``band_coverage`` (``loso_band_coverage``) are ``validation.bands``'. ``summary["ranking"]`` (Spearman per layout sweep, best-layout hits) is always there.
    ``summary["warnings"]`` is ``warnings``, else the loader's (``load_runs(...).warnings``).
    Records, and problems to rank, are spread over ``workers`` processes (``core.parallel.parallel_map``;
    default: every CPU), with the values of a serial run.
    """
    evaluated = parallel_map(_evaluated, records, workers)
    entries = [e for e, *_ in evaluated]
    if rank:
        _rank_entries(evaluated, workers)
    sweeps = layout_sweeps(records, entries)
    summary = summarize(entries, sweeps, max_median_error)
    summary["ranking"] = ranking(sweeps, best_layout_groups(records, entries))
    summary["loso"] = loso_block(records, entries) if loso else None
    summary["band_coverage"] = band_coverage(records, entries)
    summary["loso_band_coverage"] = None
    if loso:
        mark_in_band(entries, "loso_rel_error", "loso_in_band")
        summary["loso_band_coverage"] = band_coverage(records, entries, "loso_in_band")
    summary["warnings"] = list(
        warnings if warnings is not None else getattr(records, "warnings", [])
    )
    return {"records": entries, "summary": summary}


Evaluated = tuple[dict, Problem | None, float | None, SearchOptions | None]


def _evaluated(record: dict) -> Evaluated:
    """``evaluate_record``'s entry, with the record's problem (up to its names, ``_unnamed``), the published
    layout's predicted step time, which the ranking and the claim measure it by, and the claim's search
    options (``release_options``; all None when skipped): what
    ranking needs, and little to pass between processes."""
    entry, mapped, est = _evaluate(record)
    if mapped is None or est is None:  # both or neither (_evaluate)
        return entry, None, None, None
    return entry, _unnamed(mapped[0]), est.step_time_s, release_options(record, mapped[1])


def _rank_entries(evaluated: list[Evaluated], workers: int | None = None) -> None:
    """``rank_published`` into each evaluated entry, records of one problem (up to its names) and one claim's
    search options ranked from one candidate space; a failure leaves those ranks null (the records' errors
    still stand)."""
    groups: dict[tuple[Problem, str], list[tuple[dict, float, SearchOptions | None]]] = {}
    for entry, problem, step_s, options in evaluated:
        if problem is not None and step_s is not None:
            groups.setdefault((problem, repr(options)), []).append((entry, step_s, options))
    ranked = parallel_map(
        _ranks_or_none,
        [(p, [s for _, s, _ in m], m[0][2]) for (p, _), m in groups.items()],
        workers,
    )
    for members, ranks in zip(groups.values(), ranked):
        for (entry, _, _), one in zip(members, ranks or ()):
            entry.update(one)


def _ranks_or_none(task: tuple[Problem, list[float], SearchOptions | None]) -> list[dict] | None:
    """``rank_layouts`` and ``ranked_claims`` (under the claim's options) of one problem's step times; None
    when either fails (the ranks and claims stay null)."""
    problem, steps, options = task
    try:
        return [
            {**a, **b}
            for a, b in zip(rank_layouts(problem, steps), ranked_claims(problem, steps, options))
        ]
    except Exception:  # noqa: BLE001 - the rank stays null; the record's error is still reported
        return None


def _unnamed(problem: Problem) -> Problem:
    """The problem without its model and cluster names (records name them by their own id)."""
    return replace(
        problem,
        model_id="",
        model=replace(problem.model, name=""),
        cluster_name="",
        cluster=replace(problem.cluster, name=""),
    )
