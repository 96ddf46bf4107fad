"""The search's faster paths give the numbers the plain ones do: per-key evaluation, the layer
split, the enumeration's rows, the placements shared by shapes, and the 2^20 device limit."""

from __future__ import annotations

import numpy as np

from layoutsearch import api
from layoutsearch.core import arrays
from layoutsearch.core.arrays import PER_KEY_DIRECT_CODES, per_key
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.stages import CHUNK_LAYOUT, EVEN, split_layers
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.core.units import MAX_DEVICES
from layoutsearch.costs import terms
from layoutsearch.search.space import build_space, degree_tuples, with_microbatches


def test_per_key_spreads_values_over_broadcast_keys():
    """A function of two keys, a row against a column, takes each pair's value."""
    out = per_key(lambda a, b: a * 10 + b, np.array([3, 1, 3]), np.array([[0], [2]]))
    assert out.tolist() == [[30, 10, 30], [32, 12, 32]]


def test_per_key_of_wide_keys_and_of_no_rows():
    """Keys beyond the lookup table (a pipeline of 2^20) keep their values; no rows give no rows."""
    wide = np.array([PER_KEY_DIRECT_CODES * 3, 7, PER_KEY_DIRECT_CODES * 3])
    assert per_key(lambda x: x + 1, wide).tolist() == [12582913, 8, 12582913]
    empty = per_key(lambda x: (x * 2, x > 0), np.zeros(0, dtype=np.int64))
    assert [e.shape for e in empty] == [(0,), (0,)]


def test_split_layers_of_many_rows_matches_each_row():
    """DeepSeek-V3's 61 layers on pp=4 x 4 chunks: 15 / 16 / 14 layers, the chunk layout; 80 on pp=4 even."""
    first, middle, last, kind, ok = split_layers(61, np.array([4, 4, 4, 1]), np.array([4, 4, 1, 1]))
    assert first[:2].tolist() == [15, 15] and middle[0] == 16 and last[0] == 14
    assert kind[0] == CHUNK_LAYOUT and ok.all()
    assert split_layers(80, np.array([4]), np.array([1]))[:4] == (20, 20, 20, EVEN)


def test_degree_tuples_and_microbatches_rows():
    """8 devices: 35 dense degree tuples (5 degrees, product 8); dp x fsdp = 2 with a batch of 8: K in 1, 2, 4."""
    c = degree_tuples(8)
    assert len(c["dp"]) == 35
    assert ((c["dp"] * c["fsdp"] * c["tp"] * c["pp"] * c["cp"]) == 8).all()
    assert (c["ep"] == 1).all() and (c["etp"] == 1).all()
    one = {name: np.array([v]) for name, v in dict(dp=2, fsdp=1, tp=4, pp=1, cp=1).items()}
    assert with_microbatches(one, 8)["k"].tolist() == [1, 2, 4]


def test_shapes_differing_in_virtual_stages_share_their_placement():
    """Shapes with the same degrees and other virtual stages point at one row of coefficients."""
    space = build_space(api.problem("llama70b", "v5p-1024"))
    sh = space.shapes
    same = (sh.pp == 4) & (sh.tp == 4) & (sh.fsdp == 64) & (sh.cp == 1)
    assert set(sh.v[same].tolist()) >= {1, 2}
    assert len(set(space.placed[same].tolist())) == 1


def test_the_device_limit_is_two_to_the_twentieth():
    """1,048,576 devices resolve (H100 nodes, v5p slices); the limit is 2^20."""
    assert MAX_DEVICES == 2**20
    assert resolve_cluster("h100-1048576").num_devices == 1_048_576
    assert resolve_cluster("v5p-8192x128").num_devices == 1_048_576


def test_distinct_rows_finds_each_distinct_row_once_without_sorting_rows():
    """Rows [1,2], [3,4], [1,2], [0,0], [3,4]: three distinct; the first row of each code, and
    every row's code, rebuild the array."""
    from layoutsearch.core.arrays import distinct_rows

    a = np.array([[1, 2], [3, 4], [1, 2], [0, 0], [3, 4]])
    first, code = distinct_rows(a)
    assert first.tolist() == [3, 0, 1] and code.tolist() == [1, 2, 1, 0, 2]
    assert (a[first][code] == a).all()


def test_coefficients_per_distinct_span_equal_those_of_every_row():
    """``per_distinct_span`` gives the coefficients the function gives row by row (h100-64's tp
    and dp groups of every degree tuple)."""
    from layoutsearch.core.placement import axis_orders, fill_order
    from layoutsearch.core.specs import DEGREE_NAMES
    from layoutsearch.costs.comms import (
        per_distinct_span,
        ring_coefficients_of,
        spans_from_factors,
    )
    from layoutsearch.search.space import degree_tuples

    cluster = resolve_cluster("h100-64")
    c = degree_tuples(64)
    table, _ = fill_order(cluster, {k: c[k] for k in DEGREE_NAMES}, axis_orders(cluster)[0])
    for group in (("tp",), ("dp",), ("fsdp", "cp")):
        s = spans_from_factors(cluster.axes, table, group)
        a, b = ring_coefficients_of(s), per_distinct_span(ring_coefficients_of, s)
        for f in ("members", "seconds_per_byte", "latency_s", "scale_out"):
            assert np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))), f


def test_per_key_of_keys_along_disjoint_axes_takes_every_combination(monkeypatch):
    """Keys of the rows ([n, 1]) against keys of the policies ([1, r]) are costed as every
    combination of their distinct values (``arrays._outer``), each entry the value of its own
    keys, as the general path gives it."""
    rows_a, rows_b = np.array([[4], [2], [4], [7]]), np.array([[1], [1], [0], [1]])
    policy = np.array([[0, 3, 3]])
    calls = []

    def fn(a, b, r):
        calls.append(len(a))
        return a * 100 + b * 10 + r

    expected = rows_a * 100 + rows_b * 10 + policy
    monkeypatch.setattr(arrays, "PER_KEY_OUTER", 1)
    assert np.array_equal(per_key(fn, rows_a, rows_b, policy), expected)
    assert calls == [8]  # 4 row tuples (4, 1), (2, 1), (4, 0), (7, 1) x 2 policies (0, 3)
    monkeypatch.setattr(arrays, "PER_KEY_OUTER", 1 << 30)
    assert np.array_equal(per_key(fn, rows_a, rows_b, policy), expected)


def test_per_key_at_share_mixes_once_per_distinct_keys_and_share():
    """A per-layer term of (tp, r) at each row's MoE share: dense + share x (MoE - dense) of the
    row's own keys (here 10 tp + r dense, 7 more in a MoE layer), costed once per distinct
    (tp, share) x policy, as ``at_stage_share`` of ``per_key`` gives it; a dense model's term is
    the term as it was (share None)."""
    v3, dense = load_model("deepseek-v3"), load_model("llama3-8b")
    tp, r = np.array([[1], [2], [1], [1]]), np.array([[0, 3]])
    share = np.array([[0.25], [1.0], [0.25], [0.0]])
    calls = []

    def of(tp, r, s):
        calls.append((len(tp), s))
        return tp * 10.0 + r + (0.0 if s is None else s * 7.0)

    out = terms.per_key_at_share(terms.share_keys(v3, share), of, tp, r)
    # 10 + 0.25 x 7 = 11.75 (tp 1, r 0); 23 + 7 (tp 2, a MoE layer, r 3); the dense row 10, 13
    assert out.tolist() == [[11.75, 14.75], [27.0, 30.0], [11.75, 14.75], [10.0, 13.0]]
    assert calls == [(6, 0.0), (6, 1.0)]  # 3 distinct (tp, share) x 2 policies, at each end
    plain = terms.at_stage_share(v3, share, lambda s: per_key(lambda t, p: of(t, p, s), tp, r))
    assert np.array_equal(out, plain)
    assert terms.share_keys(dense, share) is None
    assert terms.per_key_at_share(None, of, tp, r).tolist() == [
        [10, 13],
        [20, 23],
        [10, 13],
        [10, 13],
    ]


def test_shared_keys_compacts_an_unchangeable_key_once_and_a_writable_one_at_each_call(
    monkeypatch,
):
    """Inside ``shared_keys`` a read-only key array is compacted at its first ``per_key`` call
    only; a writable one, or a read-only view of writable data, at every call, so a write
    between the calls changes the values as outside it."""
    seen = []
    compact = arrays._compact
    monkeypatch.setattr(arrays, "_compact", lambda a: seen.append(a) or compact(a))
    fixed = np.array([3, 1, 3])
    fixed.flags.writeable = False
    writable = np.array([2, 2, 5])
    view = writable[:]
    view.flags.writeable = False
    with arrays.shared_keys():
        for _ in range(2):
            assert per_key(lambda x: x * 2, fixed).tolist() == [6, 2, 6]
        assert sum(a is fixed for a in seen) == 1
        assert per_key(lambda x: x * 2, writable).tolist() == [4, 4, 10]
        writable[0] = 7
        assert per_key(lambda x: x * 2, writable).tolist() == [14, 4, 10]
        assert per_key(lambda x: x + 1, view).tolist() == [8, 3, 6]
        writable[1] = 0
        assert per_key(lambda x: x + 1, view).tolist() == [8, 1, 6]
    assert arrays._SHARED.found is None  # closed: nothing held
