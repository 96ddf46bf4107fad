"""Write results/multislice.md: the wait for the slowest slice of a multislice TPU job (``costs.terms.SLICE_STEP_JITTER``)
fitted to the published runs that ran one model and per-slice layout on one slice and on several.

The pairs (``validation.multislice.slice_pairs``): MaxText's v5p table (tests/data/runs_dev.yaml, 8 pairs of 1 and 2
slices) and its v5e table (tests/data/maxtext_v5e_heldout.yaml, 20 pairs of 1 and 2 to 32 slices). A pair's ratio,
N-slice over one-slice tokens/s per chip, cancels what both runs share (compute fractions, kernels, layout), so the fit
sees the slices alone. The objective: squared log ratio errors, on a grid of 0.0001.

Regenerate: python scripts/fit_slice_jitter.py
"""

from __future__ import annotations

import numpy as np
from _common import (
    RESULTS,
    data_file,
    table_head,
)  # first: puts this checkout's package ahead of an installed one

from layoutsearch.costs.terms import SLICE_STEP_JITTER, expected_max_of_normals
from layoutsearch.validation.multislice import (
    fit_slice_jitter,
    leave_one_table_out,
    median_abs,
    ratio_errors,
    slice_pairs,
)
from layoutsearch.validation.runs import load_runs

SOURCES = ("runs_dev.yaml", "maxtext_v5e_heldout.yaml")


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _two_slice_note(pairs: list, loto: dict, best: float) -> str:
    """Why one value fits both tables: each table's loss at two slices, and what the other table's j does to it."""
    loss = {
        t: [1 - p.measured_ratio for p in pairs if p.table == t and p.slices == 2]
        for t in sorted({p.table for p in pairs})
    }
    (small, big) = sorted(loss, key=lambda t: float(np.median(loss[t])))
    held = loto[small]
    worst = max(median_abs(ratio_errors([p for p in pairs if p.table == t], best)) for t in loss)
    return (
        f"At two slices the {big} pairs lost a median {100 * float(np.median(loss[big])):.1f}% per chip "
        f"({100 * min(loss[big]):.1f}% to {100 * max(loss[big]):.1f}%), the {small} pairs "
        f"{100 * float(np.median(loss[small])):.1f}%. So j fitted on {big} alone over-predicts the {small} table's "
        f"loss (median error {100 * median_abs(held['errors']):.1f}% against the flat prediction's "
        f"{100 * median_abs(held['flat']):.1f}%, though its largest falls from {100 * np.abs(held['flat']).max():.1f}% "
        f"to {100 * np.abs(held['errors']).max():.1f}%), and j fitted on {small} alone under-predicts {big}'s; one "
        f"value fitted on both predicts each table's ratios within a median {100 * worst:.1f}%."
    )


def main() -> None:
    records = [r for name in SOURCES for r in load_runs(data_file(name))]
    pairs = slice_pairs(records)
    best = fit_slice_jitter(pairs)
    loto = leave_one_table_out(pairs)
    out = [
        "# The wait for the slowest slice, fitted",
        "",
        "Regenerate: `python scripts/fit_slice_jitter.py`. The slices of a multislice TPU job run in lock step inside "
        "(their ICI collectives meet every layer) and meet each other over the data-centre network once a step, at "
        "the gradient reduction. A slice's step varies by a relative standard deviation j, and the step waits for "
        "the slowest of N: j x E[max of N standard normals] of the slices' time (`costs.terms.slice_wait_share`, "
        "time_s item `overhead/slice_sync`; docs/cost_model.md#multislice-tpus). Without it the engine predicted "
        "the same tokens/s per chip on 1 and on 32 slices: the reduction between slices hides behind the backward.",
        "",
        f"The pairs: {len(pairs)} published runs on N slices, each with its one-slice twin (the same model, per-slice "
        "layout, sequences per chip and chips per slice), from `tests/data/runs_dev.yaml` (MaxText's v5p table) and "
        "`tests/data/maxtext_v5e_heldout.yaml` (its v5e table). A pair's ratio, N-slice over one-slice tokens/s per "
        "chip, cancels what both runs share (the compute fractions, the kernels, the layout), so the fit sees the "
        "slices alone. Objective: the squared log ratio errors, on a grid of 0.0001.",
        "",
        f"Fitted on all {len(pairs)} pairs: j = {best:.4f}; the engine's `SLICE_STEP_JITTER` is "
        f"{SLICE_STEP_JITTER:.4f}"
        + (" (the same)." if best == SLICE_STEP_JITTER else " (differs: refit it)."),
        "",
        *table_head(
            "table",
            "pairs",
            "median abs ratio error, flat",
            f"with j = {best:.4f}",
            "largest, flat",
            "largest, with j",
        ),
    ]
    for table in sorted({p.table for p in pairs}):
        held = [p for p in pairs if p.table == table]
        flat, fitted = ratio_errors(held, 0.0), ratio_errors(held, best)
        out.append(
            f"| {table} | {len(held)} | {100 * median_abs(flat):.1f}% | {100 * median_abs(fitted):.1f}% | "
            f"{100 * np.abs(flat).max():.1f}% | {100 * np.abs(fitted).max():.1f}% |"
        )
    out += [
        "",
        "## Leave one table out",
        "",
        "Each table's ratios predicted with j fitted on the other table alone:",
        "",
        *table_head(
            "held-out table",
            "j fitted on the other",
            "median abs ratio error",
            "flat",
            "largest",
            "largest, flat",
        ),
    ]
    for table, d in loto.items():
        out.append(
            f"| {table} | {d['jitter']:.4f} | {100 * median_abs(d['errors']):.1f}% | "
            f"{100 * median_abs(d['flat']):.1f}% | {100 * np.abs(d['errors']).max():.1f}% | "
            f"{100 * np.abs(d['flat']).max():.1f}% |"
        )
    out += [
        "",
        _two_slice_note(pairs, loto, best),
        "",
        "## The pairs",
        "",
        *table_head(
            "N-slice run",
            "slices",
            "E[max of N]",
            "measured ratio",
            "predicted, flat",
            f"predicted, j = {best:.4f}",
            "error",
        ),
    ]
    for p in pairs:
        out.append(
            f"| `{p.many_id}` | {p.slices} | {expected_max_of_normals(p.slices):.3f} | {p.measured_ratio:.3f} | "
            f"{p.predicted_ratio(0.0):.3f} | {p.predicted_ratio(best):.3f} | "
            f"{pct(p.predicted_ratio(best) / p.measured_ratio - 1)} |"
        )
    (RESULTS / "multislice.md").write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS / 'multislice.md'}: j {best:.4f} over {len(pairs)} pairs")


if __name__ == "__main__":
    main()
