"""The step formula: how the cost terms add up to one optimizer step, written once.

``estimate()`` applies it to float term values of one layout; ``search.tables`` to integer
tables indexed by candidates (the enumerator) and to precompute the slowest stage; the CP-SAT
model states the per-step part from the declarations ``EXPOSED`` and ``PLAIN`` below, adding
one integer variable per ``max(0, hidden - window)`` (the only non-linear piece).

Terms (all seconds per step, or quanta in the tables; "st" = stage 0 first, 1 last):

    stage[st] = A[st] + TP[st] + CP + EP[st] + tp_rerun TPF + cp_rerun CPF + ep_rerun EPF
                + z3 (FX[st] + max(0, X - Y) + ETA min(X, Y)) + the LOST parts where given apart
    step      = max_st stage[st] + unhidden(max(0, RED + RCON - WIN)) + REDI + unhidden(max(0, GATH - FWD)) + GATHI
                + PP + OPT + STEP0,  unhidden(e) = e - ETA e (floor(ETA_PCT e / 100) in integer quanta)

A: compute and per-microbatch overhead x (K + (p - 1)/v) (the bubble included); TP, CP: exposed
tensor- and context-parallel collectives; FX: ZeRO-3 gathers that do not hide (the first
layer's, the vocabulary's); X, Y: ZeRO-3 backward traffic and the backward it hides behind;
ETA: the compute a second of hidden collective costs
(``Accelerator.overlap_interference``; the per-microbatch terms TP, CP, EP and FX include theirs; REDI, GATHI =
ETA x RED, ETA x GATH: the once-per-step ones', less ETA x their exposed part); RED, WIN: once-per-step gradient reductions and the last microbatch's backward; RCON: the hidden
TP and CP traffic of that backward on the links the reductions use (they share them); GATH, FWD: the
ZeRO-1/2 gather of updated weights and the next step's first forward; PP: pipeline fill and
drain sends; OPT: the optimizer step; STEP0: a fixed per-step overhead. TPF, CPF: the TP and CP
collectives of a forward run again; EP, EPF: the exposed expert-parallel token AllToAlls (MoE), and
those of a forward whose MLP runs again (``ep_rerun``); ``tp_rerun`` is the share of them the recompute policy reruns,
``cp_rerun`` 1 when it reruns the attention core (``memory.recompute_work``); ``z3`` 1 when
ZeRO-3 collectives run (stage 3 and a shard group).
"""

from __future__ import annotations

import numpy as np

# (1 - ETA) max(0, hidden - window) + loss: collectives that hide behind a compute window, what does not fit
# is exposed, and the compute they slow while hidden, ETA x (collective - exposed), written as loss = ETA x
# collective less ETA x exposed (exact while the other traffic on the links fits the window)
# (name, the terms that share the hidden links, window, loss)
EXPOSED = (
    ("exposed_comm/reduce", ("RED", "RCON"), "WIN", "REDI"),
    ("exposed_comm/zero_gather", ("GATH",), "FWD", "GATHI"),
)
# added as they are
PLAIN = (("exposed_comm/pp", "PP"), ("compute/optimizer", "OPT"), ("overhead/step", "STEP0"))
STAGES = (0, 1)


def unhidden(exposed, eta_pct: int):
    """An exposed collective's seconds less the interference its hidden share was already charged
    (``loss`` = ETA x all of it): exposed - ETA exposed, with ETA = eta_pct / 100; in integer quanta the
    subtracted part is floored (CP-SAT states it as an integer f with 100 f <= eta_pct e)."""
    if np.issubdtype(np.asarray(exposed).dtype, np.integer):
        return exposed - (eta_pct * exposed) // 100
    return exposed * (1.0 - eta_pct / 100.0)


# The interference parts of the per-microbatch groups (costs.terms: each term's 'lost'), given apart by
# estimate() to itemise them; the search's tables fold them into their groups' terms (the same sum).
LOST = ("TPL", "TPFL", "CPL", "CPFL", "EPL", "EPFL", "FXL")


def stage_items(t: dict, st: int) -> dict:
    """The parts of stage ``st``'s time per step (floats or integer arrays; ``t`` holds the terms)."""
    lost = {name: t.get(name, 0.0) for name in LOST}
    per_stage = {
        name: (value[st] if isinstance(value, list) else value) for name, value in lost.items()
    }
    items = {
        "stage/compute": t["A"][st],
        "exposed_comm/tp": t["TP"][st] + t["tp_rerun"] * t["TPF"],
        "exposed_comm/cp": t["CP"] + t["cp_rerun"] * t["CPF"],
        "exposed_comm/fsdp": t["z3"] * (t["FX"][st] + np.maximum(0, t["X"] - t["Y"])),
        "exposed_comm/interference": (
            per_stage["TPL"]
            + t["tp_rerun"] * per_stage["TPFL"]
            + per_stage["CPL"]
            + t["cp_rerun"] * per_stage["CPFL"]
            + t["z3"] * (per_stage["FXL"] + t["ETA"] * np.minimum(t["X"], t["Y"]))
        ),
    }
    if (
        t.get("EP") is not None
    ):  # the search leaves the expert terms out of a dense model's tables (all zero)
        items["exposed_comm/ep"] = t["EP"][st] + t["ep_rerun"] * t["EPF"]
        items["exposed_comm/interference"] = (
            items["exposed_comm/interference"]
            + per_stage["EPL"]
            + t["ep_rerun"] * per_stage["EPFL"]
        )
    return items


def stage_total(t: dict, st: int):
    return sum(stage_items(t, st).values())


def slowest_stage(t: dict):
    """Time per step of the slowest stage (elementwise max over the first and last stage)."""
    return np.maximum(stage_total(t, 0), stage_total(t, 1))


def step_parts(t: dict, stage) -> dict:
    """The step's parts given the slowest stage's time: the once-per-step terms of EXPOSED and PLAIN."""
    parts = {"stage": stage}
    for name, hidden, window, loss in EXPOSED:
        parts[name] = (
            unhidden(np.maximum(0, sum(t[h] for h in hidden) - t[window]), t["ETA_PCT"]) + t[loss]
        )
    for name, term in PLAIN:
        parts[name] = t[term]
    return parts


def step_total(t: dict, stage=None):
    """One optimizer step: the sum of ``step_parts`` (the slowest stage computed when not given)."""
    return sum(step_parts(t, slowest_stage(t) if stage is None else stage).values())
