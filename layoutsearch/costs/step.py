"""The step formula: how the cost terms add up to one optimizer step, written once.

Its terms are the fields of ``StageTerms`` (one pipeline stage's per-microbatch groups, over the
step) and ``StepTerms`` (the once-per-step ones): seconds per step for one layout
(``costs.estimate``), integer quanta in arrays over candidates (``search.tables``: the
enumerator, and the slowest stage the CP-SAT model looks up). The CP-SAT model
(``search.cpsat``) states the once-per-step part from the declarations ``EXPOSED`` and
``PLAIN`` below, over a ``StepTerms`` of its expressions, adding one integer variable per
``max(0, hidden - window)`` (the only non-linear piece).

With ``first`` and ``last`` the first and last stage's StageTerms:

    stage(s) = s.compute_s + s.tp_s + s.tp_rerun_fraction s.tp_rerun_s  (likewise cp_, ep_)
               + s.microbatch_zero (s.fsdp_fixed_s + max(0, s.fsdp_backward_s - s.backward_s)
                                   + s.eta min(s.fsdp_backward_s, s.backward_s) + s.zero_copies_s)
               + s.accumulate_s
               + each _lost_s field (times its group's _rerun_fraction or microbatch_zero)
               all x (1 + s.slice_wait): the wait for the slowest slice of a multislice TPU job
    step     = stage(first) + w max(0, stage(last) - stage(first)) + the EXPOSED parts + the PLAIN terms

with w = K / (K + bubble) (``costs.terms.paced_share``): a last stage slower than the others (its output
head) paces the K microbatches, while the fill and the drain cross the other stages at their own pace
(``paced_max``); w = 1, the slower of the two, where one device holds both ends (DualPipe, the V shapes)

and an EXPOSED part ``unhidden(max(0, hidden - window)) + interference``: what does not hide
is exposed; hidden seconds slow the compute beside them by ``eta`` of them, charged on all the
collective's time (``interference``) and taken off again for its exposed part (``unhidden``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

import numpy as np

# seconds per step (one layout) or integer quanta over candidates (the search's tables)
Term: TypeAlias = float | np.ndarray
V = TypeVar("V")  # a StepTerms' value type: Term, or a CP-SAT linear expression


@dataclass(frozen=True, kw_only=True, slots=True)
class StageTerms:
    """One pipeline stage's terms (first or last), each over the whole step: per-microbatch seconds
    x (K + (p - 1)/v). A group's term holds the compute its hidden part slows (``eta`` x it) unless
    its ``_lost_s`` field gives that apart (``estimate()`` itemises it; the tables leave them 0)."""

    compute_s: Term  # compute and per-microbatch overhead, the bubble included
    tp_s: Term  # exposed tensor-parallel collectives
    tp_rerun_s: Term  # the TP collectives of a forward run again
    tp_rerun_fraction: Term  # share of those the recompute policy reruns (memory.recompute_work)
    cp_s: Term  # exposed context-parallel collectives (the first stage's, every stage alike)
    cp_rerun_s: Term  # the CP collectives of a forward run again
    cp_rerun_fraction: Term  # 1 when the policy reruns the attention core, else 0
    # ZeRO-3 gathers that do not hide: the first layer's, the vocabulary's (ZeRO-2: 0)
    fsdp_fixed_s: Term
    # ZeRO traffic in the microbatches: ZeRO-3's per-layer gathers and reduce-scatters in every one's
    # backward, ZeRO-2's reduce-scatter (and, where FSDP reshards, its gather) in every one but the last
    # (whose is a once-per-step term), with the TP/CP traffic on their links
    fsdp_backward_s: Term
    # the compute that traffic hides behind: the backward (ZeRO-2 where FSDP reshards: the forward too)
    backward_s: Term
    # 1 when ZeRO collectives run in the microbatches (stage 2 or 3 and a shard group), else 0
    microbatch_zero: Term
    eta: float  # compute seconds a hidden collective second costs (overlap_interference)
    # the framework's own copies around those ZeRO collectives (costs.terms.zero_copy_bytes_per_param)
    zero_copies_s: Term = 0.0
    # the weight gradients added into their accumulators by a kernel of their own (costs.terms.grad_accumulation):
    # the whole stage's, or its shards' where ZeRO-2/3 reduce-scatter them in the microbatches
    accumulate_s: Term = 0.0
    ep_s: Term | None = None  # exposed MoE token AllToAlls; None: no expert terms (dense tables)
    ep_rerun_s: Term = 0.0  # those of a forward whose MLP runs again
    ep_rerun_fraction: Term = 0.0  # 1 when the policy reruns the MLP, else 0
    tp_lost_s: Term = 0.0  # compute the hidden part of tp_s slows, when given apart
    tp_rerun_lost_s: Term = 0.0  # the same of tp_rerun_s
    cp_lost_s: Term = 0.0  # of cp_s
    cp_rerun_lost_s: Term = 0.0  # of cp_rerun_s
    ep_lost_s: Term = 0.0  # of ep_s
    ep_rerun_lost_s: Term = 0.0  # of ep_rerun_s
    fsdp_fixed_lost_s: Term = 0.0  # of fsdp_fixed_s
    # the share of the stage's time the step adds waiting for the slowest slice of a multislice TPU job
    # (costs.terms.slice_wait_share; 0 on one slice): every item scaled by 1 + it (stage_total)
    slice_wait: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTerms(Generic[V]):
    """The once-per-step terms."""

    # gradient reductions (ZeRO reduce-scatter, DP and KV-replica all-reduces) of the chunk whose
    # backward ends last: all of them with one chunk a stage (costs.terms.chunk_shares)
    reduce_s: V
    reduce_link_busy_s: V  # hidden TP and CP traffic of that chunk's last backward on their links
    reduce_window_s: V  # that chunk's last microbatch's backward, which they hide behind
    # compute the reductions, of every chunk, slow if all hidden: eta x them
    reduce_interference_s: V
    zero_gather_s: V  # the ZeRO-1/2 gather of updated weights of the chunk whose forward runs first
    gather_window_s: V  # the next step's first forward of that chunk, which it hides behind
    gather_interference_s: V  # eta x the gathers of every chunk
    pp_sends_s: V  # pipeline fill and drain sends
    optimizer_s: V  # the optimizer step
    # the framework's own copies around the once-per-step ZeRO-1/2 collectives (costs.terms.zero_step_copies)
    zero_step_copies_s: V
    step_overhead_s: V  # fixed per-step overhead
    eta_pct: int  # eta in percent (costs.terms.interference_pct): the rate ``unhidden`` takes
    # the other chunks' reductions, and the backward after their chunks' last (costs.terms.step_windows);
    # their gathers and the forwards before their chunks' first: all 0 with one chunk a stage
    reduce_early_s: V
    reduce_early_link_busy_s: V
    reduce_early_window_s: V
    gather_late_s: V
    gather_late_window_s: V


@dataclass(frozen=True, kw_only=True, slots=True)
class Hidden(Generic[V]):
    """Collectives that hide behind a compute window, read off a StepTerms."""

    item: str  # the time_s key of the part (docs/OUTPUT.md)
    hidden: Callable[[StepTerms[V]], V]  # the hiding seconds, with the traffic sharing their links
    window: Callable[[StepTerms[V]], V]  # the compute they hide behind
    interference: Callable[[StepTerms[V]], V]  # eta x all of them


# the collectives that hide (the part: unhidden(max(0, hidden - window)) + interference) ...
EXPOSED: tuple[Hidden[Any], ...] = (
    Hidden(
        item="exposed_comm/reduce",
        hidden=lambda t: t.reduce_s + t.reduce_link_busy_s,
        window=lambda t: t.reduce_window_s,
        interference=lambda t: t.reduce_interference_s,
    ),
    Hidden(
        item="exposed_comm/reduce_early",
        hidden=lambda t: t.reduce_early_s + t.reduce_early_link_busy_s,
        window=lambda t: t.reduce_early_window_s,
        interference=lambda t: 0,
    ),
    Hidden(
        item="exposed_comm/zero_gather",
        hidden=lambda t: t.zero_gather_s,
        window=lambda t: t.gather_window_s,
        interference=lambda t: t.gather_interference_s,
    ),
    Hidden(
        item="exposed_comm/zero_gather_late",
        hidden=lambda t: t.gather_late_s,
        window=lambda t: t.gather_late_window_s,
        interference=lambda t: 0,
    ),
)
# ... and the terms added as they are
PLAIN: tuple[tuple[str, Callable[[StepTerms[Any]], Any]], ...] = (
    ("exposed_comm/pp", lambda t: t.pp_sends_s),
    ("compute/optimizer", lambda t: t.optimizer_s),
    ("overhead/zero_copies", lambda t: t.zero_step_copies_s),  # beside the stage's (stage_items)
    ("overhead/step", lambda t: t.step_overhead_s),
)


def unhidden(exposed, eta_pct: int):
    """An exposed collective's seconds less the interference its hidden share was already charged
    (``interference`` = ETA x all of it): exposed - ETA exposed, with ETA = eta_pct / 100; in integer
    quanta the subtracted part is floored (CP-SAT states it as an integer f with 100 f <= eta_pct e)."""
    if np.issubdtype(np.asarray(exposed).dtype, np.integer):
        return exposed - (eta_pct * exposed) // 100
    return exposed * (1.0 - eta_pct / 100.0)


def stage_items(s: StageTerms) -> dict[str, Any]:
    """The parts of one stage's time per step (floats or arrays), by time_s key."""
    items = {
        "stage/compute": s.compute_s,
        "exposed_comm/tp": s.tp_s + s.tp_rerun_fraction * s.tp_rerun_s,
        "exposed_comm/cp": s.cp_s + s.cp_rerun_fraction * s.cp_rerun_s,
        "exposed_comm/fsdp": s.microbatch_zero
        * (s.fsdp_fixed_s + np.maximum(0, s.fsdp_backward_s - s.backward_s)),
        "overhead/zero_copies": s.microbatch_zero * s.zero_copies_s,
        "overhead/grad_accumulation": s.accumulate_s,
        "exposed_comm/interference": (
            s.tp_lost_s
            + s.tp_rerun_fraction * s.tp_rerun_lost_s
            + s.cp_lost_s
            + s.cp_rerun_fraction * s.cp_rerun_lost_s
            + s.microbatch_zero
            * (s.fsdp_fixed_lost_s + s.eta * np.minimum(s.fsdp_backward_s, s.backward_s))
        ),
    }
    if s.ep_s is not None:
        items["exposed_comm/ep"] = s.ep_s + s.ep_rerun_fraction * s.ep_rerun_s
        items["exposed_comm/interference"] = (
            items["exposed_comm/interference"]
            + s.ep_lost_s
            + s.ep_rerun_fraction * s.ep_rerun_lost_s
        )
    return items


def stage_total(s: StageTerms):
    """One stage's time per step: the sum of its ``stage_items``, x (1 + ``slice_wait``) on several slices."""
    total = sum(stage_items(s).values())
    return total * (1.0 + s.slice_wait) if s.slice_wait else total


def paced_max(first, last, paced=1.0):
    """``first + paced max(0, last - first)`` over the first and the last stage's times per step (each per
    microbatch x (K + bubble)): where the last stage is the slower, it paces the K microbatches (``paced`` =
    K / (K + bubble)) and the bubble, the fill and the drain over the other stages, runs at the first's pace.
    1F1B's critical path is the fill's forwards over stages 0 .. p - 2, the last stage's K microbatches, the
    drain's backwards back. ``paced`` 1: the slower of the two. Never below the first, nor above the slower:
    a lower bound of the parts (computed alone) bounds the whole."""
    return first + paced * np.maximum(0, last - first)


def slowest_stage(first: StageTerms, last: StageTerms, paced=1.0):
    """Time per step of the stages' critical path (``paced_max`` of the first and the last stage's totals)."""
    return paced_max(stage_total(first), stage_total(last), paced)


def step_parts(t: StepTerms, stage) -> dict[str, Any]:
    """The step's parts given the slowest stage's time: the once-per-step terms of EXPOSED and PLAIN."""
    parts = {"stage": stage}
    for h in EXPOSED:
        exposed = np.maximum(0, h.hidden(t) - h.window(t))
        parts[h.item] = unhidden(exposed, t.eta_pct) + h.interference(t)
    for item, term in PLAIN:
        parts[item] = term(t)
    return parts


def step_total(t: StepTerms, stage):
    """One optimizer step: the sum of ``step_parts``."""
    return sum(step_parts(t, stage).values())
