"""The wait for the slowest slice of a multislice TPU job, fitted (``costs.terms.SLICE_STEP_JITTER``).

A published table that runs one model at one per-slice layout on 1 and on N slices (MaxText's v5p and v5e tables)
measures what N slices cost per chip apart from everything else: the one-slice run's throughput over the N-slice
run's cancels the compute fractions, the kernels and the layout, which both share. ``slice_pairs`` finds such
twins, ``fit_slice_jitter`` the one jitter whose predicted ratios come closest to the measured ones (least squares on
their logarithms, on a grid of ``JITTER_STEP``), and ``leave_one_table_out`` how it carries from one table to the
other. scripts/fit_slice_jitter.py writes results/multislice.md with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from layoutsearch.costs import step, terms
from layoutsearch.costs.estimate import layout_terms
from layoutsearch.validation.mapping import record_to_estimate, tpu_slices
from layoutsearch.validation.runs import source_family

JITTER_STEP = 1e-4  # the fit's grid: a finer value is more than 28 ratios of rounded published figures can say
JITTER_MAX = (
    0.5  # the grid's end: a slice's step varying by half of itself is no longer a straggler
)


@dataclass(frozen=True)
class SlicePair:
    """One run on one slice and its twin on ``slices`` slices: measured tokens/s per chip of each, and what the
    engine predicts for the twin without the wait (``step0_s``) and of the slices' time it scales (``stage_s``)."""

    table: str  # the published table: source family and accelerator
    one_id: str
    many_id: str
    slices: int
    measured_ratio: float  # tokens/s per chip on N slices over on one
    one_tokens_per_s: float  # predicted, per chip (one slice: no wait)
    many_tokens: float  # tokens per step per chip on N slices
    step0_s: float  # the N-slice step without the wait
    stage_s: float  # the slices' time the wait scales (costs.step.StageTerms.slice_wait)

    def predicted_ratio(self, jitter: float) -> float:
        """Predicted tokens/s per chip on N slices over on one, with ``jitter`` as SLICE_STEP_JITTER: the stages'
        time scaled by 1 + ``terms.slice_wait_share`` (``step.stage_total``; ``step.paced_max`` is linear in a
        factor common to both stages), the once-per-step terms unchanged."""
        wait = terms.slice_wait_share(self.slices, jitter) * self.stage_s
        return self.many_tokens / (self.step0_s + wait) / self.one_tokens_per_s


def _twin_key(record: dict, slices: int) -> tuple:
    """What two runs share when they differ only in the number of slices: the model, accelerator, sequence,
    microbatching, per-slice layout and chips per slice."""
    lay, wl = record["layout"], record["workload"]
    per_slice = {k: v for k, v in lay.items() if k != "dp"}
    per_slice["dp"] = lay["dp"] // slices
    return (
        repr(sorted(record["model"].items())),
        record["cluster"]["accelerator"],
        record["cluster"]["num_devices"] // slices,
        wl["seq_len"],
        wl["precision"],
        wl["global_batch_seqs"] // slices,
        repr(sorted(per_slice.items())),
    )


def _wait_free(record: dict) -> tuple[float, float, float, float] | None:
    """(predicted tokens/s per chip, tokens per step per chip, step without the wait, the slices' time the wait
    scales) of a record, or None when the engine skips it."""
    costed = record_to_estimate(record)
    if isinstance(costed, str):
        return None
    problem, layout, est = costed
    first, last, once, paced = layout_terms(problem, layout)
    stage = step.slowest_stage(replace(first, slice_wait=0.0), replace(last, slice_wait=0.0), paced)
    devices = problem.cluster.num_devices
    tokens = problem.workload.global_batch_tokens / devices
    return est.tokens_per_s / devices, tokens, float(step.step_total(once, stage)), float(stage)


def slice_pairs(records: list[dict]) -> list[SlicePair]:
    """Every (one slice, N slices) pair of twins among ``records`` with a measured throughput, N > 1."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in records:
        slices = tpu_slices(r)
        if isinstance(slices, str) or not r["measured"].get("tokens_per_s_per_device"):
            continue
        groups.setdefault(_twin_key(r, slices), {})[slices] = r
    pairs = []
    for twins in groups.values():
        one = twins.get(1)
        if one is None or len(twins) < 2:
            continue
        base = _wait_free(one)
        if base is None:
            continue
        for n, many in sorted(twins.items()):
            costed = _wait_free(many) if n > 1 else None
            if costed is None:
                continue
            pairs.append(
                SlicePair(
                    table=f"{source_family(many)} {many['cluster']['accelerator']}",
                    one_id=one["id"],
                    many_id=many["id"],
                    slices=n,
                    measured_ratio=many["measured"]["tokens_per_s_per_device"]
                    / one["measured"]["tokens_per_s_per_device"],
                    one_tokens_per_s=base[0],
                    many_tokens=costed[1],
                    step0_s=costed[2],
                    stage_s=costed[3],
                )
            )
    return pairs


def ratio_errors(pairs: list[SlicePair], jitter: float) -> np.ndarray:
    """Predicted over measured ratio - 1 of each pair at ``jitter``."""
    return np.array([p.predicted_ratio(jitter) / p.measured_ratio - 1.0 for p in pairs])


def fit_slice_jitter(pairs: list[SlicePair]) -> float:
    """The jitter on the grid (``JITTER_STEP`` to ``JITTER_MAX``) that minimises the squared log ratio errors."""
    grid = np.arange(0.0, JITTER_MAX + JITTER_STEP / 2, JITTER_STEP)
    loss = [float(np.sum(np.log1p(ratio_errors(pairs, j)) ** 2)) for j in grid]
    return round(float(grid[int(np.argmin(loss))]), 4)


def leave_one_table_out(pairs: list[SlicePair]) -> dict[str, dict]:
    """Per table: the jitter fitted on the other tables' pairs and this table's ratio errors with it, and
    without any wait (the flat prediction)."""
    out = {}
    for table in sorted({p.table for p in pairs}):
        held = [p for p in pairs if p.table == table]
        others = [p for p in pairs if p.table != table]
        if not others:
            continue
        jitter = fit_slice_jitter(others)
        out[table] = {
            "jitter": jitter,
            "errors": ratio_errors(held, jitter),
            "flat": ratio_errors(held, 0.0),
        }
    return out


def median_abs(errors: np.ndarray) -> float:
    """Median |error| (nan for none)."""
    return float(np.median(np.abs(errors))) if len(errors) else math.nan
