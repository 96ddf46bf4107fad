"""The exhaustive oracle: every candidate of the space, costed with the same tables and rule
(``tables.assemble``) as the CP-SAT model, vectorised with numpy in chunks."""

from __future__ import annotations

import numpy as np

from layoutsearch.search.space import Space
from layoutsearch.search.tables import Tables, assemble

CHUNK_CANDIDATES = 1 << 20


def objective_keys(metrics: dict, objective: str) -> list[np.ndarray]:
    """Sort keys, most significant first: the objective, then the named tie-breaks."""
    if objective == "gather-volume":
        return [metrics["volume"], metrics["step"], metrics["peak"]]
    return [metrics["step"], metrics["peak"]]


def candidate_grid(space: Space, sk_rows: np.ndarray):
    """Index arrays (sk, r, z, o) of every allowed candidate of the given (S, K) rows."""
    s = space.sk_shape[sk_rows]
    n_r, n_o = len(space.recompute_codes), len(space.orders)
    mask = (space.zero_mask[s][:, None, :, None] & space.order_mask[s][:, None, None, :])
    mask = np.broadcast_to(mask, (len(sk_rows), n_r, 4, n_o))
    j, ri, z, o = np.nonzero(mask)
    return sk_rows[j], ri, z, o


def enumerate_top(space: Space, tables: Tables, objective: str = "step-time", top_k: int = 1) -> tuple[list, int]:
    """The top_k fitting candidates as (sk, r index, z, o, metrics) and the number of candidates costed."""
    per_row = (space.zero_mask.sum(1) * space.order_mask.sum(1))[space.sk_shape] * len(space.recompute_codes)
    bounds = np.searchsorted(np.cumsum(per_row), np.arange(CHUNK_CANDIDATES, per_row.sum() + CHUNK_CANDIDATES,
                                                          CHUNK_CANDIDATES))
    best, start, seen = None, 0, 0
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
        cand = {"sk": sk[keep], "ri": ri[keep], "z": z[keep], "o": o[keep],
                **{key: np.asarray(v)[keep] for key, v in m.items()}}
        best = cand if best is None else {key: np.concatenate([best[key], cand[key]]) for key in best}
        order = np.lexsort(tuple(reversed(objective_keys(best, objective))))[:top_k]
        best = {key: v[order] for key, v in best.items()}
    if best is None or not len(best["sk"]):
        return [], seen
    return [(int(best["sk"][i]), int(best["ri"][i]), int(best["z"][i]), int(best["o"][i]),
             {key: best[key][i].item() for key in ("step", "peak", "volume")}) for i in range(len(best["sk"]))], seen
