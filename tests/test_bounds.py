"""The search's row bounds (``tables.compute_bounds`` and ``tables.exposed_bounds``) are lower
bounds: never above the least step time, by the enumerator's exact tables, of any candidate of
their row, on dense and mixture-of-experts problems with every schedule, CP flavour, offload and
pipeline split open; and the focus they drive (``cpsat.focus``) keeps the enumerator's answers."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from builders import NO_TIME_LIMIT_S

from layoutsearch import api
from layoutsearch.core.problem import SearchOptions, SearchRequest
from layoutsearch.core.stages import SPLIT_NAMES
from layoutsearch.core.units import KIB
from layoutsearch.costs.estimate import capacity_bytes
from layoutsearch.search import solve
from layoutsearch.search.cpsat import first_rows
from layoutsearch.search.enumerate import candidate_grid
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import (
    NEVER,
    PARALLEL_CHUNKS,
    _row_chunks,
    assemble,
    build_tables,
    compute_bounds,
    exposed_bounds,
    least_zero_memory,
    memory_table,
    term_keys,
    zero_memory_bytes,
)

# every choice of the search space open at once (scripts/search_space.py's "all four choices")
EVERY_CHOICE = SearchOptions(
    schedules=("1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe", "dualpipev"),
    cp_flavours=("ring", "allgather", "a2a", "a2a+ring"),
    offload=("none", "optimizer", "params"),
    pipeline_splits=tuple(SPLIT_NAMES.values()),
)
PROBLEMS = {
    # dense on a TPU torus: three axis orders per shape; MaxText's policies, none of them "none"
    # (the collectives' windows are costed again: tables.stage_windows)
    "dense-v5p": ("llama3-8b", "v5p-256", {"seqs": 256}),
    # mixture of experts on H100 nodes: EP all-to-alls, DualPipe's overlap
    "moe-h100": ("mixtral-8x7b", "h100-32", {"seqs": 64}),
    # long sequences: every CP flavour competes
    "long-h100": ("llama3-8b", "h100-32", {"seqs": 64, "seq_len": 32768}),
}


def least_step_by_row(space, tables) -> np.ndarray:
    """Each row's least quantised step over its fitting candidates (the enumerator's
    ``assemble``), NEVER where none fits."""
    rows = np.arange(len(space.sk_k))
    least = np.full(len(rows), NEVER)
    for chunk in np.array_split(rows, space.num_candidates() // (1 << 20) + 1):
        sk, ri, z, o = candidate_grid(space, chunk)
        m = assemble(tables, space, sk, ri, z, o)
        np.minimum.at(least, sk[m["fits"]], m["step"][m["fits"]])
    return least


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_row_bounds_never_exceed_the_rows_least_step(name):
    """compute_bounds + exposed_bounds <= the least step of every row that fits (some rows meet
    it: the bound is tight where a row's collectives are all exposed); the exposed part is the
    tables' own tp_s + cp_s + ep_s of the lighter stage plus pp_sends_s at the best allowed axis
    order, less the 4 quanta of rounding slack; and compute_bounds is NEVER only where no
    candidate of the row fits."""
    model, cluster, options = PROBLEMS[name]
    space = build_space(api.problem(model, cluster, **options), EVERY_CHOICE)
    assert (0 in space.recompute_codes) == (name != "dense-v5p")  # "none" searched, or not
    step_bound, costed = compute_bounds(space)
    tables = build_tables(space, costed=costed)
    exposed = exposed_bounds(space, np.arange(len(space.sk_k)), costed)
    least = least_step_by_row(space, tables)
    fits = least < NEVER
    assert fits.any() and (step_bound[fits] < NEVER).all()
    assert (step_bound[fits] + exposed[fits] <= least[fits]).all()
    t = tables
    per_order = (
        np.minimum(
            t.tp_s[..., 0] + t.cp_s + t.ep_s[..., 0], t.tp_s[..., 1] + t.cp_s + t.ep_s[..., 1]
        )
        + t.pp_sends_s
    )
    best_order = np.where(space.order_mask[space.sk_shape], per_order, NEVER).min(axis=1)
    assert (exposed == np.maximum(0, best_order - 4)).all()


def test_exposed_bounds_cut_the_rows_near_the_optimum():
    """On the mixture of experts, rows whose bound is within 5% of the least step: compute alone
    leaves 13,466 of the 45,927 rows that fit, the exposed collectives 4,496, of which 115 hold
    such a layout (measured with least_step_by_row; the counts are pinned: 12,026, 3,823 and 98 before the loss's
    passes were costed and the MoE host time refitted beside them, 2026-12-07; 11,829, 3,740 and 90 before the
    element-wise kernels ran at their measured fractions of the HBM bandwidth; 11,629, 3,693 and 89 before a slower
    last stage paced only the microbatches, not the bubble, 2026-12-06; 3,643 and 87 before Megatron's
    asynchronous backward TP collectives hid behind their GEMMs, 2026-12-06; 8,570, 2,094 and 33 before ZeRO-2
    reduce-scattered its gradients in every microbatch, which made the least step 1.413 s -> 1.456 s; 8,400, 2,601
    and 39 before the interleaved schedule's per-chunk gradient reductions and fill sends, 2026-12-05)."""
    model, cluster, options = PROBLEMS["moe-h100"]
    space = build_space(api.problem(model, cluster, **options), EVERY_CHOICE)
    step_bound, costed = compute_bounds(space)
    least = least_step_by_row(space, build_tables(space, costed=costed))
    fits = least < NEVER
    near = least[fits].min() * 1.05
    exposed = exposed_bounds(space, np.flatnonzero(fits), costed)
    assert int(fits.sum()) == 45_927
    assert int((step_bound[fits] <= near).sum()) == 13_466
    assert int((step_bound[fits] + exposed <= near).sum()) == 4_496
    assert int((least[fits] <= near).sum()) == 115


def test_focus_with_exposed_bounds_keeps_the_enumerators_answers():
    """CP-SAT over the rows focus keeps ranks the top 3 as the enumerator over every row does;
    here 22,897 rows stay within the first limit, which the exposed bounds and the second limit
    cut to 9,190."""
    model, cluster, options = PROBLEMS["moe-h100"]
    problem = api.problem(model, cluster, **options)
    runs = [
        solve(
            problem,
            SearchRequest(
                options=EVERY_CHOICE, top_k=3, method=method, time_limit_s=NO_TIME_LIMIT_S
            ),
        )
        for method in ("cpsat", "enumerate")
    ]
    proven, oracle = ([(e.layout, m["step"]) for e, m in zip(r.layouts, r.metrics)] for r in runs)
    assert proven == oracle and len(proven) == 3


def _in_shared_map(a: np.ndarray) -> bool:
    """Whether the array's memory is an anonymous map (what forked workers wrote into)."""
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_bounds_costed_in_chunks_are_those_costed_at_once():
    """compute_bounds costs the rows a run at a time (runs end where tp, pp or cp changes) and
    the ZeRO memory once per shape key (every field but the CP flavour): with runs of 64 rows
    and keys of 64 shapes at a time, the bounds, the quantum, the windows exposed_bounds reads
    and the busy times the energy bound reads are those of one chunk, to the bit; and the
    least ZeRO memory of each shape is the least over its allowed columns of its own memory."""
    model, cluster, options = PROBLEMS["long-h100"]
    space = build_space(api.problem(model, cluster, **options), EVERY_CHOICE)
    assert len(np.unique(space.shapes.cpf)) == 4  # every CP flavour: shapes share keys
    whole_bound, whole = compute_bounds(space)
    small_bound, small = compute_bounds(space, chunk=64)
    assert whole.rows is not None and small.rows is None  # one chunk keeps its row terms
    # runs of 64 rows are more than PARALLEL_CHUNKS: bounded by forked workers, into shared maps
    assert len(_row_chunks(space, 64)) >= PARALLEL_CHUNKS
    assert _in_shared_map(small.least_busy_s) and not _in_shared_map(whole.least_busy_s)
    assert whole.quantum_s == small.quantum_s
    assert np.array_equal(whole_bound, small_bound)
    rows = np.arange(len(space.sk_k))
    exact = np.array_equal(exposed_bounds(space, rows, whole), exposed_bounds(space, rows, small))
    assert exact
    assert np.array_equal(whole.least_busy_s[whole.key], small.least_busy_s[small.key])
    least, mz, key = least_zero_memory(space, chunk=64)
    assert len(mz) < space.num_shapes  # keys shared across CP flavours
    direct = memory_table(zero_memory_bytes(space))  # [s, z, st, moment], shape by shape
    assert np.array_equal(mz[key], direct)
    allowed = space.zero_mask[:, :, None, None]
    assert np.array_equal(least, np.where(allowed, direct, NEVER).min(axis=1))


def test_bounds_of_rows_that_cannot_fit_are_costed_in_chunks_as_at_once():
    """Of several chunks, rows whose shape's least ZeRO memory alone exceeds the capacity skip
    the memory check (their bound NEVER) and keys of such rows alone cost their compute only:
    the bounds, the quantum, the windows and the busy times equal one chunk's, to the bit. On
    the MoE problem 1,401 of its 47,346 rows are such, 111 of its 27,855 keys (term_keys)
    theirs alone (counted once with least_zero_memory against capacity_bytes, when this test
    was written)."""
    model, cluster, options = PROBLEMS["moe-h100"]
    space = build_space(api.problem(model, cluster, **options), EVERY_CHOICE)
    least = least_zero_memory(space)[0]
    capacity_kib = int(capacity_bytes(space.cluster, space.workload) // KIB)
    hopeless = (least > capacity_kib).any(axis=(1, 2))[space.sk_shape]
    whole_bound, whole = compute_bounds(space)
    small_bound, small = compute_bounds(space, chunk=4096)
    assert small.key is not None and small.least_busy_s is not None
    assert whole.least_busy_s is not None and whole.key is not None
    assert (len(space.sk_k), int(hopeless.sum())) == (47346, 1401)
    key = term_keys(space)[1]
    assert len(np.setdiff1d(key[hopeless], key[~hopeless])) == 111
    assert (small_bound[hopeless] == NEVER).all()
    assert whole.quantum_s == small.quantum_s
    assert np.array_equal(whole_bound, small_bound)
    assert np.array_equal(whole.least_busy_s[whole.key], small.least_busy_s[small.key])
    rows = np.flatnonzero(small_bound < NEVER)
    exact = np.array_equal(exposed_bounds(space, rows, whole), exposed_bounds(space, rows, small))
    assert exact
    every = np.arange(len(space.sk_k))
    kept, costed = whole.windows_of(every), small.windows_of(every)
    assert kept is not None and costed is not None  # "none" searched: the windows kept per key
    for st_whole, st_small in zip(kept, costed, strict=True):
        for name, w in st_whole.items():
            assert np.array_equal(w, st_small[name]), name


def test_first_rows_are_a_stable_sorts_first():
    """focus's first rows by bound: ties go to the earlier row, as a stable sort's first n."""
    value = np.array([5, 3, 3, 9, 3, 1, 3, 7])
    rows = np.array([0, 1, 2, 4, 5, 6, 7])
    for n in range(1, 9):
        expected = np.sort(rows[np.argsort(value[rows], kind="stable")[:n]])
        assert first_rows(value, rows, n).tolist() == expected.tolist()
    assert first_rows(value, rows, 3).tolist() == [1, 2, 5]  # 1, then the first two 3s
