"""Sweep points: models x clusters x batches x sequence lengths, with range syntax."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from layoutsearch.core.errors import InvalidArgumentError



EXECUTORS = ("local", "ray")
RETRYABLE = ("ERROR", "UNKNOWN")  # statuses that --retry-failed solves again
MAX_RANGE_VALUES = 10_000
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)(?::([x+])(\d+))?\}")

# ----------------------------------------------------------------------------- points

@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One sweep point; ``id`` is stable across runs and keys the journal."""

    model: str
    cluster: str
    global_batch_seqs: int
    seq_len: int

    @property
    def id(self) -> str:
        return f"{self.model}|{self.cluster}|{self.global_batch_seqs}|{self.seq_len}"


def expand(text: str, field_name: str) -> list[str]:
    """Comma items with ranges: 'v5p-{256..8192:x2}' multiplies by 2 from 256 up to 8192,
    '{64..256:+64}' adds 64, '{1..4}' steps by 1; several ranges in one item multiply out."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InvalidArgumentError(f"{field_name}: empty item in '{text}'")
    return [value for item in items for value in _expand_item(item, field_name)]


def _expand_item(item: str, field_name: str) -> list[str]:
    start = item.find("{")
    if start < 0:
        if "}" in item:
            raise InvalidArgumentError(f"{field_name}: malformed range in '{item}' ('}}' without '{{')")
        return [item]
    match = _RANGE.match(item, start)
    if not match:
        raise InvalidArgumentError(f"{field_name}: malformed range in '{item}' (expected {{A..B:xF}} or "
                                   f"{{A..B:+S}} with whole numbers, e.g. 'v5p-{{256..8192:x2}}')")
    values = _range_values(match, item, field_name)
    tails = _expand_item(item[match.end():], field_name)
    return [f"{item[:start]}{value}{tail}" for value in values for tail in tails]


def _range_values(match: re.Match, item: str, field_name: str) -> list[int]:
    """The values A, A op S, ... up to B inclusive, for op 'x' (multiply) or '+' (add)."""
    first, last, op, step = int(match[1]), int(match[2]), match[3] or "+", int(match[4] or 1)
    if first > last:
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' runs backwards ({first} > {last})")
    if op == "x" and (first < 1 or step < 2):
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' needs a start >= 1 and a factor >= 2")
    if op == "+" and step < 1:
        raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' needs a step >= 1")
    values, value = [], first
    while value <= last:
        values.append(value)
        if len(values) > MAX_RANGE_VALUES:
            raise InvalidArgumentError(f"{field_name}: range '{match[0]}' in '{item}' has more than "
                                       f"{MAX_RANGE_VALUES} values")
        value = value * step if op == "x" else value + step
    return values


def _whole_numbers(texts: Sequence[str], field_name: str) -> list[int]:
    out = []
    for text in texts:
        for value in expand(text, field_name):
            if not value.isdigit() or int(value) < 1:
                raise InvalidArgumentError(f"{field_name}: '{value}' is not a whole number >= 1")
            out.append(int(value))
    return out


def _as_list(values: str | Sequence[str] | int | Sequence[int]) -> list[str]:
    return [str(v) for v in values] if isinstance(values, (list, tuple)) else [str(values)]


def expand_points(models, clusters, seqs, seq_len=4096) -> list[Point]:
    """Every (model, cluster, seq_len, seqs) combination, in that nesting order, without repeats.
    Each argument is a string (comma items and ranges allowed) or a list of them."""
    model_ids = [m for text in _as_list(models) for m in expand(text, "--model")]
    cluster_ids = [c for text in _as_list(clusters) for c in expand(text, "--cluster")]
    for name in cluster_ids:
        if "|" in name:
            raise InvalidArgumentError(f"--cluster: '{name}' contains '|'")
    batch = _whole_numbers(_as_list(seqs), "--seqs")
    lengths = _whole_numbers(_as_list(seq_len), "--seq-len")
    points = [Point(model=m, cluster=c, global_batch_seqs=b, seq_len=s)
              for m in model_ids for c in cluster_ids for s in lengths for b in batch]
    return list(dict.fromkeys(points))
