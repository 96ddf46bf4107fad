"""The error of an uncalibrated part: leave one accelerator family out (issue 30 point 6).

A part whose compute fractions are borrowed (catalogue ``calibration.compute_fractions: borrowed``:
b200 and gb200 take the h100 class's, v4, v5e, v6e and tpu7x take v5p's) is predicted with another
family's fitted fractions (``calibrate.DEFAULT_PARAMS``) and its attention kernels' fractions
(``BORROWED_KERNELS``, which such a part borrows or derives too). Its error is measured here on
parts that do have runs, by pretending they have none: for each accelerator family F (``calibrate.
FAMILIES``) and each source S with records on F, the calibration (``calibrate.DEFAULT_PARAMS`` per
family, ``DEFAULT_SHARED`` jointly, by ``DEFAULT_LOSS`` at one scale for every fold, as the dense
leave-one-source-out fits it) is fitted on the records of the other families of F's kind that are not
from S, and F's records from S are predicted with the fitted fields of the donor: the other family of
the kind with the most records (the way the catalogue borrows; F keeps its own other catalogue values). A family whose kind has no other family
with records (v5p, the only TPU with runs) cannot be measured so: ``no_sibling`` names it.

``uncalibrated_section`` turns the errors into the ``uncalibrated`` section of
``core/uncertainty.yaml`` (quantiles and bands per kind, as ``validation.uncertainty``), plus the
errors' quantiles per held-out family and its donor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from layoutsearch.core.parallel import parallel_map
from layoutsearch.validation.calibrate import (
    DEFAULT_LOSS,
    DEFAULT_PARAMS,
    DEFAULT_SHARED,
    KERNEL_FIELDS,
    family_of,
    fit_joint,
    log_residuals,
    loss_scale,
    usable_problems,
)
from layoutsearch.validation.runs import source_family
from layoutsearch.validation.stats import quantiles, step_time_error
from layoutsearch.validation.uncertainty import uncertainty_table

MIN_DONOR_RECORDS = 2  # as leave_one_source_out: a family with fewer training records is not fitted
# the kernel fractions a part without records takes from another part: the donor's catalogue values where its records
# do not fit them (no record of the other sources runs the kernel), else its fit
BORROWED_KERNELS = (*KERNEL_FIELDS, "vendor_attention_efficiency")


def leave_one_family_out(records: list[dict], workers: int | None = None) -> dict:
    """{"rel_errors": {id: rel error of predicted / measured tokens/s - 1}, "accelerator": {id: its
    accelerator id}, "donor": {family: donor family}, "no_sibling": [families not measurable]} over
    the records ``calibrate.usable_problems`` keeps (the folds spread over ``workers`` processes)."""
    items = []  # (source, family, kind, problem tuple)
    for r in records:
        acc = r["cluster"]["accelerator"]
        for prob in usable_problems([r], acc) if acc is not None else ():
            items.append(
                (source_family(r), family_of(acc), prob[1][0].cluster.accelerator.kind, prob)
            )
    families = sorted({f for _, f, _, _ in items})
    kind = {f: k for _, f, k, _ in items}
    donors = {
        f: max(
            (g for g in families if g != f and kind[g] == kind[f]),
            key=lambda g: (sum(x[1] == g for x in items), g),
            default=None,
        )
        for f in families
    }
    folds = sorted({(f, s) for s, f, _, _ in items if donors[f] is not None})
    # one Huber scale for every fold, as leave_one_source_out: the whole set's spread at the catalogue's values
    scale = loss_scale(DEFAULT_LOSS, log_residuals([p for _, _, _, p in items], {}))

    def fold(task: tuple[str, str]) -> dict[str, float]:
        """The held-out family's records of one source, predicted with the donor's fit without that source."""
        family, source = task
        groups = {
            g: [p for s, f, _, p in items if f == g and s != source]
            for g in families
            if g != family and kind[g] == kind[family]
        }
        groups = {g: probs for g, probs in groups.items() if len(probs) >= MIN_DONOR_RECORDS}
        donor = donors[family]
        if donor is None or donor not in groups:
            return {}
        held = [p for s, f, _, p in items if f == family and s == source]
        theirs, ours = (probs[0][1][0].cluster.accelerator for probs in (groups[donor], held))
        fields = {
            **{
                k: getattr(theirs, k)
                for k in BORROWED_KERNELS
                if None not in (getattr(theirs, k), getattr(ours, k))
            },
            **fit_joint(groups, DEFAULT_PARAMS, DEFAULT_SHARED, DEFAULT_LOSS, scale=scale)[donor],
        }
        return {p[0]: float(np.expm1(r)) for p, r in zip(held, log_residuals(held, fields))}

    rel: dict[str, float] = {}
    for part in parallel_map(fold, folds, workers):
        rel.update(part)
    return {
        "rel_errors": rel,
        "accelerator": {p[0]: p[1][0].cluster.accelerator.id for _, _, _, p in items},
        "donor": {f: d for f, d in donors.items() if d is not None},
        "no_sibling": [f for f, d in donors.items() if d is None],
    }


def uncalibrated_section(lofo: dict, held_out: Sequence[tuple[str, float]] = ()) -> dict:
    """The ``uncalibrated`` section of core/uncertainty.yaml from ``leave_one_family_out``'s result and the
    errors of held-out published runs on parts not calibrated for their kind of model (``held_out``:
    (accelerator id, tokens/s rel error) pairs, never fitted on; results/validation.md's held-out sections):
    ``default``, ``bands``, ``quantiles`` (``validation.uncertainty.uncertainty_table`` of both),
    ``basis``, ``held_out_records``, ``by_family`` (donor and quantiles of each left-out family's step-time
    errors) and ``no_sibling``. Each kind's band is the union of three 80% bands: the leave-one-family-out errors'
    own, the held-out runs' own and that of both together, so that it holds for the parts that do lack a
    calibration (the held-out runs: newer parts, which borrowed fractions predict too slow) as well as for the
    families left out; a side only widens. ``default`` (the kinds without a band of their own: TPUs, whose
    held-out runs are not pooled) leaves the GPU-only held-out band out."""
    rel, acc = lofo["rel_errors"], lofo["accelerator"]
    entries = [{"accelerator": acc[i], "loso_rel_error": e} for i, e in rel.items()]
    alone = uncertainty_table({"records": entries})
    held = [{"accelerator": a, "loso_rel_error": e} for a, e in held_out]
    held_alone = uncertainty_table({"records": held}) if held else {"bands": {}}
    table = uncertainty_table({"records": entries + held})

    def union(*bands: list[float] | None) -> list[float] | None:
        given = [b for b in bands if b is not None]
        return [min(b[0] for b in given), max(b[1] for b in given)] if given else None

    table["default"] = union(alone["default"], table["default"])
    table["bands"] = {
        kind: union(
            alone["bands"].get(kind), held_alone["bands"].get(kind), table["bands"].get(kind)
        )
        for kind in sorted(set(alone["bands"]) | set(table["bands"]))
    }
    by_family = {}
    for family, donor in sorted(lofo["donor"].items()):
        errors = [step_time_error(e) for i, e in rel.items() if family_of(acc[i]) == family]
        q = quantiles(errors)
        by_family[family] = {
            "donor": donor,
            **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in q.items()},
        }
    return {
        "default": table["default"],
        "bands": table["bands"],
        "quantiles": table["quantiles"],
        "basis": "leave-one-family-out (and the held-out records' source), and the held-out published runs "
        "on parts not calibrated for their kind of model",
        "held_out_records": len(held_out),
        "by_family": by_family,
        "no_sibling": list(lofo["no_sibling"]),
    }
