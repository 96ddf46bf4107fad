"""Summary statistics of a validation: error quantiles, groups, rank correlation, layout sweeps,
whether the engine picks the measured-best layout, quantiles of the step-time error."""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping

import numpy as np

from layoutsearch.core.numbers import distinct
from layoutsearch.core.problem import MODEL_SHAPE_FIELDS
from layoutsearch.validation.runs import source_family


def error_stats(rel_errors: list[float]) -> dict:
    """count, median and 90th percentile (linear interpolation) of |rel_error|, and the signed median."""
    if not rel_errors:
        return {
            "count": 0,
            "median_abs_rel_error": None,
            "p90_abs_rel_error": None,
            "median_rel_error": None,
        }
    a = np.abs(np.asarray(rel_errors, dtype=float))
    return {
        "count": len(rel_errors),
        "median_abs_rel_error": float(np.median(a)),
        "p90_abs_rel_error": float(np.percentile(a, 90)),
        "median_rel_error": float(np.median(rel_errors)),
    }


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None below 3 points or with a constant side."""
    if len(x) < 3:
        return None
    rx, ry = _ranks(np.asarray(x, float)), _ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(1, len(v) + 1)
    for value in distinct(v):
        tie = v == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def layout_sweeps(records: list[dict], entries: list[dict], min_size: int = 4) -> list[dict]:
    """Groups of >= min_size evaluated runs of one model on one cluster (same source, devices, layers,
    d_model, d_ff, seq_len: only the layout and heads vary), with the Spearman rho of predicted vs measured."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    by_id = {e["id"]: e for e in entries}
    for r in records:
        e = by_id[r["id"]]
        if e["rel_error"] is None:
            continue
        m, c = r["model"], r["cluster"]
        key = (
            source_family(r),
            c["accelerator"],
            c["num_devices"],
            m["num_layers"],
            m["d_model"],
            m["d_ff"],
            r["workload"]["seq_len"],
        )
        groups[key].append(e)
    out = []
    for key, es in groups.items():
        if len(es) >= min_size:
            rho = spearman(
                [e["predicted_tokens_per_s_per_device"] for e in es],
                [e["measured_tokens_per_s_per_device"] for e in es],
            )
            out.append(
                {
                    "source_family": key[0],
                    "accelerator": key[1],
                    "num_devices": key[2],
                    "n": len(es),
                    "ids": [e["id"] for e in es],
                    "spearman": rho,
                }
            )
    return out


SHAPE_KEYS = MODEL_SHAPE_FIELDS


def layout_label(record: dict) -> str:
    """A record's layout in one short string: the degrees above 1 (expert degrees ep, etp included), ZeRO
    stage, microbatching, recompute, flags."""
    lay, wl = record["layout"], record["workload"]
    parts = [
        f"{k}{lay[k]}"
        for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "etp")
        if lay.get(k) not in (None, 1)
    ]
    if lay.get("virtual_stages") not in (None, 1):
        parts.append(f"vs{lay['virtual_stages']}")
    if lay.get("zero_stage"):
        parts.append(f"zero{lay['zero_stage']}")
    if lay.get("microbatch_seqs") is not None:
        parts.append(f"mbs{lay['microbatch_seqs']}")
    if lay.get("recompute") not in (None, "none"):
        parts.append(f"{lay['recompute']} recompute")
    parts += [
        flag
        for flag, on in (("async-tp", lay.get("async_tp")), ("compile", wl.get("torch_compile")))
        if on
    ]
    return " ".join(parts) or "dp1"


def problem_key(record: dict) -> tuple:
    """What runs of one problem share, only their layouts differing: (source, accelerator, devices, model shape,
    sequence length, global batch, precision, experts)."""
    m, c, w = record["model"], record["cluster"], record["workload"]
    return (
        source_family(record),
        c["accelerator"],
        c["num_devices"],
        tuple(m[k] for k in SHAPE_KEYS),
        w["seq_len"],
        w["global_batch_seqs"],
        w["precision"],
        repr(m["moe"]),
    )


def paired_errors(records: list[dict], rel_errors: Mapping[str, float | None]) -> dict | None:
    """How far the predicted step-time ratio of two layouts of one problem (``problem_key``) was from the measured
    one, over every pair of ``records`` with an error in ``rel_errors`` (id -> predicted / measured tokens/s - 1,
    e): the ratio's error (1 + e_a) / (1 + e_b) - 1, the larger way round. Its p50, p80 and p90 (rounded), the
    pairs and the groups with a pair; None without a pair. An error that moves both layouts alike (a compute
    fraction borrowed from another part) cancels in it: it is what a claim between two layouts of one problem
    (``search.explain.versus_claim``) is judged against."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        e = rel_errors.get(r["id"])
        if e is not None:
            groups[problem_key(r)].append(math.log1p(e))
    gaps = [abs(a - b) for g in groups.values() for a, b in itertools.combinations(g, 2)]
    if not gaps:
        return None
    p50, p80, p90 = np.expm1(np.percentile(gaps, (50, 80, 90)))
    return {
        "p50": round(float(p50), 4),
        "p80": round(float(p80), 4),
        "p90": round(float(p90), 4),
        "pairs": len(gaps),
        "groups": sum(len(g) > 1 for g in groups.values()),
        "error": "predicted / measured step-time ratio of two layouts of one problem - 1, the larger way round",
    }


def best_layout_groups(records: list[dict], entries: list[dict]) -> list[dict]:
    """For each group of >= 2 evaluated runs of one source, model, cluster and batch (only the layout
    differs) with at least one measured throughput: the measured-best run, the engine's pick (the
    fastest predicted among those it predicts fit) and whether they are the same run (``hit``).

    ``measured_loss`` = 1 - measured(pick) / measured(best): what following the engine costs
    (null when the pick has no measured throughput, e.g. it ran out of memory).
    """
    by_id = {e["id"]: e for e in entries}
    groups: dict[tuple, list[tuple[dict, dict]]] = defaultdict(list)
    for r in records:
        e = by_id[r["id"]]
        if e["skipped_reason"] is not None:
            continue
        groups[problem_key(r)].append((r, e))
    out = []
    for key, members in groups.items():
        ran = [(r, e) for r, e in members if e["measured_tokens_per_s_per_device"]]
        if len(members) < 2 or not ran:
            continue
        best_r, best_e = max(ran, key=lambda re: re[1]["measured_tokens_per_s_per_device"])
        fitting = [(r, e) for r, e in members if e["predicted_fits"]]
        pick = (
            max(fitting, key=lambda re: re[1]["predicted_tokens_per_s_per_device"])
            if fitting
            else None
        )
        pick_meas = pick[1]["measured_tokens_per_s_per_device"] if pick else None
        best_meas = best_e["measured_tokens_per_s_per_device"]
        out.append(
            {
                "source_family": key[0],
                "accelerator": key[1],
                "num_devices": key[2],
                "model": best_r["model"].get("name") or f"{key[3][0]} layers x d_model {key[3][1]}",
                "seq_len": key[4],
                "global_batch_seqs": key[5],
                "n": len(members),
                "measured_best": {
                    "id": best_r["id"],
                    "layout": layout_label(best_r),
                    "measured_tokens_per_s_per_device": best_meas,
                    "predicted_tokens_per_s_per_device": best_e[
                        "predicted_tokens_per_s_per_device"
                    ],
                },
                "predicted_best": None
                if pick is None
                else {
                    "id": pick[0]["id"],
                    "layout": layout_label(pick[0]),
                    "measured_tokens_per_s_per_device": pick_meas,
                    "predicted_tokens_per_s_per_device": pick[1][
                        "predicted_tokens_per_s_per_device"
                    ],
                },
                "hit": pick is not None
                and (pick[0]["id"] == best_r["id"] or pick_meas == best_meas),
                "measured_loss": None if not pick_meas else 1.0 - pick_meas / best_meas,
                "spearman": spearman(
                    [e["predicted_tokens_per_s_per_device"] for _, e in ran],
                    [e["measured_tokens_per_s_per_device"] for _, e in ran],
                ),
            }
        )
    return out


def ranking(sweeps: list[dict], groups: list[dict]) -> dict:
    """The ranking block of the summary: Spearman per layout sweep, best-layout hits per group."""
    bloom = [s for s in sweeps if s["source_family"] == "bigscience"]
    return {
        "layout_sweeps": [
            {k: s[k] for k in ("source_family", "accelerator", "num_devices", "n", "spearman")}
            for s in sweeps
        ],
        "bloom_sweep_spearman": bloom[0]["spearman"] if bloom else None,
        "best_layout": groups,
        "best_layout_groups": len(groups),
        "best_layout_hits": sum(g["hit"] for g in groups),
    }


def step_time_error(rel_error: float) -> float:
    """predicted step time / measured step time - 1, from rel_error on tokens/s (predicted / measured - 1)."""
    return 1.0 / (1.0 + rel_error) - 1.0


def quantiles(values: list[float]) -> dict:
    """p10, p50, p90 (linear interpolation) and the count; None quantiles for no values."""
    if not values:
        return {"p10": None, "p50": None, "p90": None, "count": 0}
    q = np.percentile(np.asarray(values, float), [10, 50, 90])
    return {"p10": float(q[0]), "p50": float(q[1]), "p90": float(q[2]), "count": len(values)}


def _skip_category(reason: str) -> str:
    return reason.split(":")[0]


def fit_errors(entries: list[dict]) -> dict[str, list[str]]:
    """The fit mismatches in each direction: predicted out of memory though the run ran, and
    predicted to fit though it ran out of memory (a one-sided memory model shows in one)."""
    return {
        "predicted_oom_but_ran": [
            e["id"] for e in entries if not e["predicted_fits"] and not e["measured_oom"]
        ],
        "predicted_fits_but_oom": [
            e["id"] for e in entries if e["predicted_fits"] and e["measured_oom"]
        ],
    }


def memory_error(entries: list[dict]) -> dict:
    """``error_stats`` of predicted / measured peak memory - 1 over the records that report their
    measured memory (+ = the engine predicts more memory than the run used)."""
    errors = [
        e["predicted_memory_gib"] / e["measured_memory_gib"] - 1.0
        for e in entries
        if e.get("measured_memory_gib") and e.get("predicted_memory_gib") is not None
    ]
    return error_stats(errors)


def fit_margin(entries: list[dict]) -> dict:
    """The ran / out-of-memory classifier by predicted peak / usable memory (a record's
    ``predicted_memory_share``; the engine's fit rule is share <= 1): the largest share of a run
    that ran, the smallest of one that ran out of memory, and ``balanced``, the least share t at
    which the runs that ran above t (predicted OOM but ran) and those out of memory at or below t
    (predicted to fit but OOM) are closest in number, then fewest, with both counts."""
    shares: list[tuple[float, bool]] = [
        (float(e["predicted_memory_share"]), bool(e["measured_oom"]))
        for e in entries
        if e.get("predicted_memory_share") is not None
    ]
    ran = [x for x, oom in shares if not oom]
    oom = [x for x, oom in shares if oom]

    def errors(t: float) -> tuple[int, int]:
        return sum(1 for x in ran if x > t), sum(1 for x in oom if x <= t)

    balanced = min(
        sorted({x for x, _ in shares}),
        key=lambda t: (abs(errors(t)[0] - errors(t)[1]), sum(errors(t))),
        default=None,
    )
    fp, fn = errors(balanced) if balanced is not None else (0, 0)
    return {
        "ran": len(ran),
        "oom": len(oom),
        "max_ran": max(ran, default=None),
        "min_oom": min(oom, default=None),
        "balanced": balanced,
        "balanced_predicted_oom_but_ran": fp,
        "balanced_predicted_fits_but_oom": fn,
    }


def memory_underestimates(entries: list[dict]) -> list[float]:
    """measured / predicted peak memory - 1 over the records that report their measured memory
    (+ = the run used more than predicted: the side that runs out of memory)."""
    return [
        e["measured_memory_gib"] / e["predicted_memory_gib"] - 1.0
        for e in entries
        if e.get("measured_memory_gib") and e.get("predicted_memory_gib")
    ]


def upper_memory_error(errors: list[float]) -> float | None:
    """u, the headroom risk's margin: the p90 of ``memory_underestimates`` at rank (n + 1) x 0.9
    (Hyndman & Fan 1996, definition 6; numpy's "weibull"), never below 0. On 9 or fewer records
    that rank is at or beyond the last, so u is the largest error, whose expected coverage is
    n / (n + 1) (87.5% on 7); a linear p90 would lie below one of only a few runs. None: no
    errors."""
    if not errors:
        return None
    return max(0.0, float(np.percentile(np.asarray(errors, float), 90, method="weibull")))


def power_group(power_limit_w: float | None) -> str:
    """A record's power-limit group: "uncapped", or its cap ("500 W"): capped runs (costs.power
    lowers their sustained clock) are reported apart, so the cap model's error shows on its own."""
    return "uncapped" if power_limit_w is None else f"{power_limit_w:g} W"


def summarize(entries: list[dict], sweeps: list[dict], max_median_error: float) -> dict:
    """The summary block of the validate document (OUTPUT.md) with per-group tables."""
    done = [e for e in entries if e["skipped_reason"] is None]
    errs = [e for e in done if e["rel_error"] is not None]
    stats = error_stats([e["rel_error"] for e in errs])
    judged = [e for e in done if not e.get("fit_depends_on_assumed")]  # rule 27
    fits = [e["predicted_fits"] == (not e["measured_oom"]) for e in judged]
    groups = {}
    for field in ("accelerator", "source_family", "power_limit"):
        keys = sorted({e[field] for e in entries}, key=lambda k: (k is None, str(k)))
        groups[field] = {
            k: {
                **error_stats([e["rel_error"] for e in errs if e[field] == k]),
                "skipped": sum(1 for e in entries if e[field] == k and e["skipped_reason"]),
            }
            for k in keys
        }
    worst = sorted(errs, key=lambda e: -abs(e["rel_error"]))[:5]
    bloom = [s for s in sweeps if s["source_family"] == "bigscience"]
    median = stats["median_abs_rel_error"]
    return {
        "count": len(done),
        "with_measured_throughput": stats["count"],
        "median_abs_rel_error": median,
        "p90_abs_rel_error": stats["p90_abs_rel_error"],
        "median_rel_error": stats["median_rel_error"],
        "fit_accuracy": sum(fits) / len(fits) if fits else None,
        "fit_mismatches": [e["id"] for e, ok in zip(judged, fits) if not ok],
        "fit_errors": fit_errors(judged),
        "memory_error": memory_error(done),
        "fit_margin": fit_margin(judged),
        "skipped": len(entries) - len(done),
        "skipped_reasons": dict(
            Counter(_skip_category(e["skipped_reason"]) for e in entries if e["skipped_reason"])
        ),
        "by_accelerator": groups["accelerator"],
        "by_source": groups["source_family"],
        "by_power_limit": groups["power_limit"],
        "worst": [
            {"id": e["id"], "rel_error": e["rel_error"], "reason": e["reason"]} for e in worst
        ],
        "layout_sweeps": sweeps,
        "bloom_sweep_spearman": bloom[0]["spearman"] if bloom else None,
        "bloom_sweep_note": (
            f"{bloom[0]['n']} BLOOM sweep runs" if bloom else "no BLOOM layout sweep records found"
        ),
        **claims_summary(errs),
        "max_median_error": max_median_error,
        "passed": median is not None and median <= max_median_error,
        "message": verdict(len(done), len(entries) - len(done), median, max_median_error),
    }


def claims_summary(entries: list[dict]) -> dict:
    """The median claimed speed-up of the ranked winner over the published layouts (entries with a
    claim) and the share of those claims that are distinguishable; both null without a claim."""
    claims = [e for e in entries if e.get("claimed_speedup") is not None]
    return {
        "median_claimed_speedup": float(np.median([e["claimed_speedup"] for e in claims]))
        if claims
        else None,
        "claims_distinguishable_share": sum(e["claim_distinguishable"] for e in claims)
        / len(claims)
        if claims
        else None,
    }


def verdict(count: int, skipped: int, median: float | None, max_median_error: float) -> str:
    """One line: the median error against the limit, or why there is no median (then not passed)."""
    if count == 0:
        return f"no record could be evaluated ({skipped} skipped): the median error is unknown"
    if median is None:
        return f"none of the {count} evaluated records has a measured throughput: the median error is unknown"
    return f"median error {median:.1%} {'within' if median <= max_median_error else 'exceeds'} {max_median_error:.1%}"
