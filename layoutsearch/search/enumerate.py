"""The exhaustive oracle: every candidate of the space, costed with the same tables and rule
(``tables.assemble``) as the CP-SAT model, vectorised with numpy in chunks."""

from __future__ import annotations

import numpy as np

from layoutsearch.search.ranking import TIE_TOLERANCE, relevant, select
from layoutsearch.search.space import Space
from layoutsearch.search.tables import Tables, assemble

CHUNK_CANDIDATES = 1 << 20
METRICS = ("step", "peak", "volume", "value")


def fitting_metrics(m: dict, shape: tuple, keep: np.ndarray) -> dict:
    """The METRICS of ``tables.assemble``'s result ``m`` for the candidates ``keep`` selects; the
    value shares the step's array where it is the step (step time and gather volume)."""
    out = {key: np.broadcast_to(np.asarray(m[key]), shape)[keep] for key in METRICS[:-1]}
    same = m["value"] is m["step"]
    out["value"] = out["step"] if same else np.broadcast_to(m["value"], shape)[keep]
    return out


def candidate_grid(space: Space, sk_rows: np.ndarray):
    """Index arrays (sk, r, z, o) of every allowed candidate of the given (S, K) rows."""
    s = space.sk_shape[sk_rows]
    n_r, n_o = len(space.recompute_codes), len(space.orders)
    mask = space.zero_mask[s][:, None, :, None] & space.order_mask[s][:, None, None, :]
    mask = np.broadcast_to(mask, (len(sk_rows), n_r, space.num_zero, n_o))
    j, ri, z, o = np.nonzero(mask)
    return sk_rows[j], ri, z, o


def enumerate_top(
    space: Space,
    tables: Tables,
    objective: str = "step-time",
    top_k: int = 1,
    tolerance: float = TIE_TOLERANCE,
    found: dict | None = None,
) -> tuple[list, int]:
    """The top_k layouts by the ranking of ``search.ranking`` as (sk, r index, z, o, metrics), and
    the number of candidates costed. Every fitting candidate is costed; the pool keeps those that
    may still be ranked (``ranking.relevant``) as chunks arrive. ``found`` (a dict) receives the
    ``optimum``: the least objective value (volume, else ``value``: the step time, step time over
    goodput or energy), which the winner, the simplest of those tied with it, need not have, and ``least``: the
    simplest candidate (sk, r index, z, o) at the first rank's least value (``ranking.select``'s trace), which
    the winner need not be where it carries a risk (the risk order ranks a lower-risk layout first)."""
    per_row = (space.zero_mask.sum(1) * space.order_mask.sum(1))[space.sk_shape] * len(
        space.recompute_codes
    )
    bounds = np.searchsorted(
        np.cumsum(per_row),
        np.arange(CHUNK_CANDIDATES, per_row.sum() + CHUNK_CANDIDATES, CHUNK_CANDIDATES),
    )
    pool, start, seen = None, 0, 0
    for stop in list(bounds) + [len(per_row)]:
        stop = min(max(stop, start + 1), len(per_row))
        if start >= len(per_row):
            break
        sk, ri, z, o = candidate_grid(space, np.arange(start, stop))
        start = stop
        seen += len(sk)
        if not len(sk):
            continue
        m = assemble(tables, space, sk, ri, z, o)
        keep = m["fits"]
        cand = {
            "sk": sk[keep],
            "ri": ri[keep],
            "z": z[keep],
            "o": o[keep],
            **fitting_metrics(m, sk.shape, keep),
        }
        pool = (
            cand if pool is None else {key: np.concatenate([pool[key], cand[key]]) for key in pool}
        )
        mask = relevant(space, pool, objective, top_k, tolerance, tables.capacity_kib)
        pool = {key: v[mask] for key, v in pool.items()}
    if pool is None or not len(pool["sk"]):
        return [], seen
    trace: list = []
    picks = select(
        space, pool, objective, top_k, tolerance, capacity_kib=tables.capacity_kib, trace=trace
    )
    if (
        found is not None
    ):  # the pool holds the least value (every candidate tied with it is relevant)
        found["optimum"] = int(pool["volume" if objective == "gather-volume" else "value"].min())
        i = trace[0][3]  # the simplest candidate at the first rank's least value
        found["least"] = tuple(int(pool[key][i]) for key in ("sk", "ri", "z", "o"))
    return [
        (
            int(pool["sk"][i]),
            int(pool["ri"][i]),
            int(pool["z"][i]),
            int(pool["o"][i]),
            {key: pool[key][i].item() for key in METRICS},
        )
        for i in picks
    ], seen
