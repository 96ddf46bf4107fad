"""Summary statistics of a validation: error quantiles, groups, rank correlation, layout sweeps."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from layoutsearch.validation.runs import source_family

def error_stats(rel_errors: list[float]) -> dict:
    """count, median and 90th percentile (linear interpolation) of |rel_error|, and the signed median."""
    if not rel_errors:
        return {"count": 0, "median_abs_rel_error": None, "p90_abs_rel_error": None, "median_rel_error": None}
    a = np.abs(np.asarray(rel_errors, dtype=float))
    return {"count": len(rel_errors), "median_abs_rel_error": float(np.median(a)),
            "p90_abs_rel_error": float(np.percentile(a, 90)), "median_rel_error": float(np.median(rel_errors))}


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
    for value in np.unique(v):
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
        key = (source_family(r), c["accelerator"], c["num_devices"], m["num_layers"], m["d_model"], m["d_ff"],
               r["workload"]["seq_len"])
        groups[key].append(e)
    out = []
    for key, es in groups.items():
        if len(es) >= min_size:
            rho = spearman([e["predicted_tokens_per_s_per_device"] for e in es],
                           [e["measured_tokens_per_s_per_device"] for e in es])
            out.append({"source_family": key[0], "accelerator": key[1], "num_devices": key[2], "n": len(es),
                        "ids": [e["id"] for e in es], "spearman": rho})
    return out


def _skip_category(reason: str) -> str:
    return reason.split(":")[0]


def summarize(entries: list[dict], sweeps: list[dict], max_median_error: float) -> dict:
    """The summary block of the validate document (OUTPUT.md) with per-group tables."""
    done = [e for e in entries if e["skipped_reason"] is None]
    errs = [e for e in done if e["rel_error"] is not None]
    stats = error_stats([e["rel_error"] for e in errs])
    fits = [e["predicted_fits"] == (not e["measured_oom"]) for e in done]
    groups = {}
    for field in ("accelerator", "source_family"):
        keys = sorted({e[field] for e in entries}, key=lambda k: (k is None, str(k)))
        groups[field] = {k: {**error_stats([e["rel_error"] for e in errs if e[field] == k]),
                             "skipped": sum(1 for e in entries if e[field] == k and e["skipped_reason"])}
                         for k in keys}
    worst = sorted(errs, key=lambda e: -abs(e["rel_error"]))[:5]
    bloom = [s for s in sweeps if s["source_family"] == "bigscience"]
    median = stats["median_abs_rel_error"]
    return {
        "count": len(done), "with_measured_throughput": stats["count"],
        "median_abs_rel_error": median, "p90_abs_rel_error": stats["p90_abs_rel_error"],
        "median_rel_error": stats["median_rel_error"],
        "fit_accuracy": sum(fits) / len(fits) if fits else None,
        "fit_mismatches": [e["id"] for e, ok in zip(done, fits) if not ok],
        "skipped": len(entries) - len(done),
        "skipped_reasons": dict(Counter(_skip_category(e["skipped_reason"]) for e in entries if e["skipped_reason"])),
        "by_accelerator": groups["accelerator"], "by_source": groups["source_family"],
        "worst": [{"id": e["id"], "rel_error": e["rel_error"], "reason": e["reason"]} for e in worst],
        "layout_sweeps": sweeps,
        "bloom_sweep_spearman": bloom[0]["spearman"] if bloom else None,
        "bloom_sweep_note": (f"{bloom[0]['n']} BLOOM sweep runs" if bloom else "no BLOOM layout sweep records found"),
        "max_median_error": max_median_error,
        "passed": median is not None and median <= max_median_error,
        "message": verdict(len(done), len(entries) - len(done), median, max_median_error),
    }


def verdict(count: int, skipped: int, median: float | None, max_median_error: float) -> str:
    """One line: the median error against the limit, or why there is no median (then not passed)."""
    if count == 0:
        return f"no record could be evaluated ({skipped} skipped): the median error is unknown"
    if median is None:
        return f"none of the {count} evaluated records has a measured throughput: the median error is unknown"
    return f"median error {median:.1%} {'within' if median <= max_median_error else 'exceeds'} {max_median_error:.1%}"


