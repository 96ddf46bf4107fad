"""Number-or-array types for the cost functions.

One formula serves one layout (Python numbers) and a table of candidate rows at once (numpy arrays,
one value per row, evaluated elementwise), so its arguments and result are either.
"""

from __future__ import annotations

import math
from typing import TypeAlias

import numpy as np

IntArray: TypeAlias = int | np.ndarray  # an integer, or one per candidate row
FloatArray: TypeAlias = float | np.ndarray  # a real number (an int too), or one per candidate row
BoolArray: TypeAlias = bool | np.ndarray  # a flag, or one per candidate row

PER_KEY_DIRECT_CODES = (
    1 << 22
)  # keys (and key tuples) up to this many codes are found by a lookup table


def _compact(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values of a non-negative integer column, each row's index among them)."""
    size = int(column.max()) + 1 if column.size else 1
    if size > PER_KEY_DIRECT_CODES:
        return np.unique(column, return_inverse=True)
    present = np.zeros(size, dtype=bool)
    present[column] = True
    distinct = np.flatnonzero(present)
    position = np.zeros(size, dtype=np.int64)
    position[distinct] = np.arange(len(distinct))
    return distinct, position[column]


def per_key(fn, *keys):
    """``fn(*keys)`` of an elementwise ``fn`` over non-negative integer key arrays, computed once per
    distinct tuple of keys and spread back to every row: the same values, at the cost of the
    distinct keys (a term of the tensor-parallel degree alone takes a handful of rows, not one per
    candidate). ``fn`` returns an array, a scalar, or a tuple or dict of them."""
    arrays = [np.asarray(key) for key in keys]
    if all(a.ndim == 0 for a in arrays):
        return fn(*keys)
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    columns = [np.broadcast_to(a, shape).ravel().astype(np.int64, copy=False) for a in arrays]
    compact = [_compact(column) for column in columns]  # each key as small integers
    bases = [len(distinct) for distinct, _ in compact]
    code = compact[0][1]  # one integer per tuple
    for (_, ids), base in zip(compact[1:], bases[1:]):
        code = code * base + ids
    distinct, inverse = _compact(code) if math.prod(bases) < 1 << 62 else (None, None)
    if distinct is None:  # too many tuples for one integer code
        rows, inverse = np.unique(
            np.stack([ids for _, ids in compact], axis=1), axis=0, return_inverse=True
        )
        digits = list(rows.T)
    else:
        digits, rest = [], distinct
        for base in reversed(bases):
            rest, digit = np.divmod(rest, base)
            digits.append(digit)
        digits.reverse()
    values = [values[digit] for (values, _), digit in zip(compact, digits)]
    inverse = inverse.reshape(shape)

    def spread(value):
        if isinstance(value, dict):
            return {name: spread(v) for name, v in value.items()}
        if isinstance(value, tuple):
            return tuple(spread(v) for v in value)
        value = np.asarray(value)
        return value[inverse] if value.ndim else value

    return spread(fn(*values))
