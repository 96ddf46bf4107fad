"""Write the uncertainty data file (``layoutsearch/core/uncertainty.yaml``) from a validation.

The quantiles of the signed step-time error (predicted / measured step time - 1) per accelerator
kind and over all records, and the bands derived from them that ``core.uncertainty.uncertainty_band``
returns (see that module for the format). Out-of-sample errors
(the records' ``loso_rel_error``) are used when the validation computed them, else the in-sample
``rel_error`` (the file says which). The dense file also holds the memory model's measured
error (``memory_section``), from which the ranking's headroom risk takes its margin.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from layoutsearch.core import io
from layoutsearch.core.catalogue import accelerator_names, load_accelerator
from layoutsearch.core.uncertainty import PATH, band_of
from layoutsearch.validation.mapping import ACCELERATOR_ALIASES
from layoutsearch.validation.stats import (
    memory_underestimates,
    quantiles,
    step_time_error,
    upper_memory_error,
)


def accelerator_kind(accelerator: str | None) -> str | None:
    """ "gpu" or "tpu" for a record's accelerator id (aliases included), None when unknown."""
    acc = (
        accelerator
        if accelerator in accelerator_names()
        else ACCELERATOR_ALIASES.get(accelerator or "")
    )
    return load_accelerator(acc).kind if acc in accelerator_names() else None


MIN_COUNT = 5  # a kind with fewer records gets no band of its own (the default applies)


def uncertainty_table(doc: dict) -> dict:
    """The data file's content (core/uncertainty.py) from a validate document: ``default`` and
    ``bands`` ([low, high] per kind with at least ``MIN_COUNT`` records), ``quantiles`` per kind
    and ``all``, ``basis``."""
    records = doc["records"]
    out_of_sample = any(e.get("loso_rel_error") is not None for e in records)
    field = "loso_rel_error" if out_of_sample else "rel_error"
    errors: dict[str, list[float]] = {}
    for e in records:
        if e.get(field) is None:
            continue
        err = step_time_error(e[field])
        kind = accelerator_kind(e["accelerator"])
        for key in (kind, "all") if kind else ("all",):
            errors.setdefault(key, []).append(err)
    table = {
        k: {
            x: (round(v, 4) if isinstance(v, float) else v)
            for x, v in quantiles(errors.get(k, [])).items()
        }
        for k in sorted(errors, key=lambda k: (k == "all", k))
    }

    def band(q: dict) -> list[float] | None:
        return (
            [round(x, 4) for x in band_of(q["p10"], q["p90"])] if q["count"] >= MIN_COUNT else None
        )

    bands = {k: b for k, q in table.items() if k != "all" and (b := band(q)) is not None}
    return {
        "default": band(table["all"]) if "all" in table else None,
        "bands": bands,
        "quantiles": table,
        "basis": "leave-one-source-out" if out_of_sample else "in-sample",
        "error": "predicted step time / measured step time - 1",
    }


def memory_section(entries: list[dict]) -> dict | None:
    """The dense file's ``memory`` block (core.uncertainty.memory_error_upper): ``upper`` = u of
    ``stats.upper_memory_error`` over the records with a measured peak, the rule, the error's
    count, min, median and max, and which records, parts and frameworks it rests on; None
    without such records."""
    measured = [
        e for e in entries if e.get("measured_memory_gib") and e.get("predicted_memory_gib")
    ]
    errors = memory_underestimates(measured)
    upper = upper_memory_error(errors)
    if upper is None:
        return None
    return {
        "upper": round(upper, 4),
        "rule": "p90 at rank (n + 1) x 0.9 (Hyndman-Fan 6): the largest error on 9 or fewer records",
        "error": "measured / predicted peak memory - 1",
        "count": len(errors),
        "min": round(min(errors), 4),
        "p50": round(float(quantiles(errors)["p50"]), 4),
        "max": round(max(errors), 4),
        "accelerators": sorted({e["accelerator"] for e in measured}),
        "frameworks": sorted({str(e.get("framework")) for e in measured}),
        "records": [e["id"] for e in measured],
    }


def write_uncertainty(
    doc: dict, header: list[str], path: Path = PATH, extra: dict | None = None
) -> dict:
    """Write the table (``uncertainty_table``) and the ``extra`` keys after it (the dense file's
    ``uncalibrated`` section) under the ``header`` comment lines; returns the table with them."""
    table = {**uncertainty_table(doc), **(extra or {})}
    body = yaml.safe_dump(table, sort_keys=False, default_flow_style=None, width=110)
    io.atomic_write(Path(path), "".join(f"# {line}\n" for line in header) + body, "uncertainty")
    return table
