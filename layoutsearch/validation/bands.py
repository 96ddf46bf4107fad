"""Whether each measured run lay inside its prediction's uncertainty band, and the bands' coverage.

A prediction's band is ``core.uncertainty.uncertainty_band(accelerator kind)`` = (low, high), the
``step_time_rel_band`` solve gives each layout: the measured step time should lie within
predicted x (1 + low) .. predicted x (1 + high) for ``NOMINAL_COVERAGE`` of the runs. A record's
``rel_error`` = predicted / measured tokens/s - 1 = measured / predicted step time - 1 (one step
holds the same tokens either way), so the run is in its band when low <= rel_error <= high.

Coverage (``band_coverage``) is counted over every record with an error, and per class:
accelerator kind (gpu, tpu), model (dense, moe: the record's model has a ``moe`` block) and, for a
part whose compute fractions are borrowed (``calibrated_part`` False), "uncalibrated".
"""

from __future__ import annotations

from layoutsearch.core.catalogue import accelerator_names, load_accelerator
from layoutsearch.validation.mapping import ACCELERATOR_ALIASES
from layoutsearch.validation.uncertainty import accelerator_kind

NOMINAL_COVERAGE = 0.8  # the bands hold the 10th..90th percentile of the LOSO errors


def in_band(rel_error: float | None, band: tuple[float, float] | list[float] | None) -> bool | None:
    """Whether measured step time / predicted - 1 (= ``rel_error``) lies in [low, high];
    None without an error or a band."""
    if rel_error is None or band is None:
        return None
    return band[0] <= rel_error <= band[1]


def mark_in_band(entries: list[dict], error_field: str, flag_field: str) -> None:
    """Set each entry's ``flag_field`` from its ``error_field`` and ``step_time_rel_band``."""
    for e in entries:
        e[flag_field] = in_band(e.get(error_field), e.get("step_time_rel_band"))


def calibrated_part(accelerator: str | None, moe: bool = True) -> bool:
    """Whether a record's accelerator id (aliases included) has compute fractions fitted on its own
    die's runs of this kind of model (``Accelerator.calibrated_for``: a part fitted on MoE runs only is not
    calibrated for a dense one); an id outside the catalogue is not."""
    acc = (
        accelerator
        if accelerator in accelerator_names()
        else ACCELERATOR_ALIASES.get(accelerator or "")
    )
    return acc in accelerator_names() and load_accelerator(acc).calibrated_for(moe)


def record_class(record: dict, entry: dict) -> str:
    """ "gpu dense", "tpu moe", "gpu moe uncalibrated", ...: the record's accelerator kind ("unknown"
    when not in the catalogue), whether its model has experts, and whether the part is uncalibrated
    (a known part whose compute fractions are borrowed)."""
    kind = accelerator_kind(entry["accelerator"])
    model = "dense" if (record.get("model") or {}).get("moe") is None else "moe"
    borrowed = kind is not None and not calibrated_part(entry["accelerator"], model == "moe")
    return f"{kind or 'unknown'} {model}{' uncalibrated' if borrowed else ''}"


def _count(flags: list[bool]) -> dict:
    """{"count", "covered", "fraction"} of in-band flags (fraction None for none)."""
    covered = sum(flags)
    return {
        "count": len(flags),
        "covered": covered,
        "fraction": covered / len(flags) if flags else None,
    }


def band_coverage(records: list[dict], entries: list[dict], flag_field: str = "in_band") -> dict:
    """{"nominal", "all": {"count", "covered", "fraction"}, "by_class": {class: {...}}} over the
    entries (in the records' order) whose ``flag_field`` is not None."""
    by_class: dict[str, list[bool]] = {}
    flags = []
    for record, e in zip(records, entries, strict=True):
        if e.get(flag_field) is None:
            continue
        flags.append(e[flag_field])
        by_class.setdefault(record_class(record, e), []).append(e[flag_field])
    return {
        "nominal": NOMINAL_COVERAGE,
        "all": _count(flags),
        "by_class": {name: _count(by_class[name]) for name in sorted(by_class)},
    }


def band_line(summary: dict) -> str:
    """One line: the bands' measured coverage in sample and, when computed, leave one source out."""
    cov, loso = summary.get("band_coverage"), summary.get("loso_band_coverage")
    nominal = f"{cov['nominal']:.0%} band" if cov else "band"
    if not cov or not cov["all"]["count"]:
        return f"{nominal}: no record has a predicted and a measured step to check"
    text = f"{nominal}: measured coverage {cov['all']['fraction']:.0%} in sample"
    if loso and loso["all"]["count"]:
        return (
            f"{text} over {cov['all']['count']} records, {loso['all']['fraction']:.0%} "
            f"leave-one-source-out over {loso['all']['count']}"
        )
    return f"{text} over {cov['all']['count']} records (leave-one-source-out: --loso)"
