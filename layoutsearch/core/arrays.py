"""Number-or-array types for the cost functions.

One formula serves one layout (Python numbers) and a table of candidate rows at once (numpy arrays,
one value per row, evaluated elementwise), so its arguments and result are either.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from typing import TypeAlias

import numpy as np

IntArray: TypeAlias = int | np.ndarray  # an integer, or one per candidate row
FloatArray: TypeAlias = float | np.ndarray  # a real number (an int too), or one per candidate row
BoolArray: TypeAlias = bool | np.ndarray  # a flag, or one per candidate row

# keys (and key tuples) up to this many codes are found by a lookup table, not by sorting
PER_KEY_DIRECT_CODES = 1 << 22
# from this many entries per_key takes keys along disjoint axes as all their combinations (``_outer``)
PER_KEY_OUTER = 1 << 16


def _compact(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of a non-negative integer array, each entry's index among them, in its
    shape): by a lookup table when the values are small, else by sorting."""
    flat = column.ravel().astype(np.int64, copy=False)
    size = int(flat.max()) + 1 if flat.size else 1
    if size > min(PER_KEY_DIRECT_CODES, max(4 * flat.size, 1 << 16)):
        distinct, ids = np.unique(flat, return_inverse=True)
        return distinct, ids.reshape(column.shape)
    present = np.zeros(size, dtype=bool)
    present[flat] = True
    distinct = np.flatnonzero(present)
    position = np.zeros(size, dtype=np.int64)
    position[distinct] = np.arange(len(distinct))
    return distinct, position[column.astype(np.int64, copy=False)]


# inside ``shared_keys`` (this thread's): id -> (a key array that cannot change, its ``_compact``)
_SHARED = threading.local()


@contextmanager
def shared_keys() -> Iterator[None]:
    """Inside it ``per_key`` finds the distinct values of a key array that cannot change (read-only,
    owning its data or viewing read-only arrays) once, not at every call that takes it (a stage's
    terms take the tensor-parallel degree a dozen times); the arrays are held until it closes."""
    if getattr(_SHARED, "found", None) is not None:  # nested: the outer one's
        yield
        return
    _SHARED.found = {}
    try:
        yield
    finally:
        _SHARED.found = None


def _fixed(a: np.ndarray) -> bool:
    """No write can change ``a``'s values: it and every array it views are read-only, the last
    owning its data."""
    base: object = a
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return base is None


def _compact_key(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_compact(a)``, found once per array inside ``shared_keys``."""
    shared = getattr(_SHARED, "found", None)
    if shared is None or not _fixed(a):
        return _compact(a)
    found = shared.get(id(a))
    if found is None or found[0] is not a:
        found = shared[id(a)] = (a, _compact(a))
        read_only(*found[1])
    return found[1]


def distinct_rows(columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row index per distinct row of a non-negative integer array [rows, columns], each
    row's index among the distinct ones): the columns folded into one small code a column at a
    time (``_compact`` after each, so the code never overflows), not a sort of the rows."""
    code = np.zeros(columns.shape[0], dtype=np.int64)
    for column in columns.T:
        values, ids = _compact(column)
        code = _compact(code * len(values) + ids)[1]
    first = np.zeros(int(code.max()) + 1 if code.size else 0, dtype=np.int64)
    first[code[::-1]] = np.arange(len(code) - 1, -1, -1)  # the first row of each code
    return first, code


def per_key(fn, *keys, memo: dict | None = None):
    """``fn(*keys)`` of an elementwise ``fn`` over non-negative integer key arrays (broadcast
    together), computed once per distinct tuple of keys and spread back to every entry: the same
    values, at the cost of the distinct keys (a term of the tensor-parallel degree alone takes a
    handful of rows, not one per candidate). ``fn`` returns an array, a scalar, or a tuple or dict
    of them; with ``memo`` (a dict kept by the caller for one ``fn``, whatever else it reads fixed)
    an array, each key tuple's value remembered there from one call to the next (the points of a
    sweep share most of their keys)."""
    arrays = [np.asarray(key) for key in keys]
    if all(a.ndim == 0 for a in arrays):
        return fn(*keys)
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    if all(a.size == 1 for a in arrays):  # one row (an estimate's): its keys are the distinct ones
        values = [a.reshape(1).astype(np.int64) for a in arrays]
        found = fn(*values) if memo is None else _remembered(memo, fn, values)
        return _spread(found, np.zeros(shape, dtype=np.int64))
    compact = [_compact_key(a) for a in arrays]  # each key as small integers, before broadcasting
    bases = [len(distinct) for distinct, _ in compact]
    # keys along disjoint axes of a large broadcast: every combination of theirs is present
    outer = _outer(arrays, compact, bases, shape) if math.prod(shape) >= PER_KEY_OUTER else None
    if outer is not None:
        values, inverse = outer
        return _spread(fn(*values) if memo is None else _remembered(memo, fn, values), inverse)
    code = compact[0][1]  # one integer per tuple
    for (_, ids), base in zip(compact[1:], bases[1:]):
        code = code * base + ids
    distinct, inverse = _compact(np.broadcast_to(code, shape))
    digits, rest = [], distinct
    for base in reversed(bases):
        rest, digit = np.divmod(rest, base)
        digits.append(digit)
    digits.reverse()
    values = [values[digit] for (values, _), digit in zip(compact, digits)]
    return _spread(fn(*values) if memo is None else _remembered(memo, fn, values), inverse)


def _outer(arrays: list, compact: list, bases: list, shape: tuple):
    """Where the keys vary along disjoint axes of the broadcast (a key of the rows, [n, 1], and
    one of the policies, [1, r]), the key tuples present are every combination of the distinct
    tuples of each axis group: (the key values of each combination, each entry's combination),
    found without compacting the broadcast codes; None otherwise (or with one group)."""
    ndim = len(shape)
    axes = [
        frozenset(i for i, n in enumerate((1,) * (ndim - a.ndim) + a.shape) if n > 1)
        for a in arrays
    ]
    groups: dict[frozenset, list[int]] = {}
    for i, ax in enumerate(axes):
        groups.setdefault(ax, []).append(i)
    if (
        len(groups) < 2
        or any(a & b for a in groups for b in groups if a is not b)
        or frozenset() in groups
    ):
        return None
    codes, members = [], []  # per group: each entry's tuple index, and the tuples' key digits
    for group in groups.values():
        code = np.zeros((), dtype=np.int64)
        for i in group:
            ids = compact[i][1].reshape((1,) * (ndim - arrays[i].ndim) + arrays[i].shape)
            code = code * bases[i] + ids
        distinct, index = _compact(code)
        digits, rest = {}, distinct
        for i in reversed(group):
            rest, digits[i] = np.divmod(rest, bases[i])
        codes.append((index, len(distinct)))
        members.append(digits)
    # the combinations, the first group slowest
    sizes = [n for _, n in codes]
    grids = np.indices(sizes).reshape(len(sizes), -1)
    values: list = [None] * len(arrays)
    for g, digits in enumerate(members):
        for i, digit in digits.items():
            values[i] = compact[i][0][digit[grids[g]]]
    inverse = np.zeros((), dtype=np.int64)
    for index, n in codes:
        inverse = inverse * n + index
    return values, np.broadcast_to(inverse, shape)


def _remembered(memo: dict, fn, values: list[np.ndarray]) -> np.ndarray:
    """``fn(*values)`` (an elementwise array function of equally long key arrays) with each key
    tuple's value taken from ``memo`` where it is there, the others computed in one call and kept."""
    tuples = list(zip(*(v.tolist() for v in values)))
    out = np.fromiter((memo.get(t, np.nan) for t in tuples), dtype=np.float64, count=len(tuples))
    missing = np.flatnonzero(np.isnan(out))
    if len(missing):
        found = np.broadcast_to(fn(*(v[missing] for v in values)), missing.shape)
        out[missing] = found
        memo.update(zip((tuples[i] for i in missing.tolist()), found.tolist()))
    return out


def _spread(value, inverse: np.ndarray):
    """Each entry's value from the values of the distinct keys (``inverse``: its key's index), through
    the dicts and tuples ``per_key``'s function returns; a scalar stays one."""
    if isinstance(value, dict):
        return {name: _spread(v, inverse) for name, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_spread(v, inverse) for v in value)
    value = np.asarray(value)
    return value[inverse] if value.ndim else value


def read_only(*values) -> None:
    """Mark every array in ``values`` read-only, inside dataclasses, dicts, lists and tuples too:
    for arrays a cache shares between calls (an in-place write would change later costs)."""
    for value in values:
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        elif is_dataclass(value) and not isinstance(value, type):
            read_only(*(getattr(value, f.name) for f in fields(value)))
        elif isinstance(value, dict):
            read_only(*value.values())
        elif isinstance(value, (list, tuple)):
            read_only(*value)
