"""Sweep points: models x clusters x batches x sequence lengths, with range syntax."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import FAILURE_OPTIONS, PlanOptions, WorkloadOptions, plain
from layoutsearch.core.units import MAX_GLOBAL_BATCH_SEQS, MAX_SEQ_LEN
from layoutsearch.report.planning import check_price, check_tokens

EXECUTORS = ("local", "ray")
RETRYABLE = ("ERROR", "UNKNOWN")  # statuses that --retry-failed solves again
MAX_RANGE_VALUES = 10_000
MAX_SWEEP_POINTS = (
    100_000  # points of one sweep (each a solve); more is refused before anything is built
)
_DIGITS = re.compile(r"[0-9]{1,30}")
_RANGE = re.compile(r"\{([0-9]+)\.\.([0-9]+)(?::([x+])([0-9]+))?\}")

# ----------------------------------------------------------------------------- points


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One sweep point; ``id`` is stable across runs and keys the journal. ``training_tokens``
    and ``price_per_device_hour`` only price the answer (train_days, device_hours, cost), so
    they are not part of the id."""

    model: str
    cluster: str
    global_batch_seqs: int
    seq_len: int
    training_tokens: float | None = None
    price_per_device_hour: float | None = None
    workload: tuple[tuple[str, Any], ...] = ()  # build_workload options other than their defaults
    price_per_kwh: float | None = None
    max_site_power_mw: float | None = None  # a budget decides feasibility: part of the id when set
    objective: str = "step-time"  # what the search ranks by: part of the id when not step-time
    # the failure and checkpoint options (core.options.FAILURE_OPTIONS) other than their defaults:
    # they decide a time-to-train answer, so they key the point
    failures: tuple[tuple[str, Any], ...] = ()

    @property
    def id(self) -> str:
        options = "".join(f"|{k}={v}" for k, v in self.workload)
        if self.max_site_power_mw is not None:
            options += f"|max_site_power_mw={self.max_site_power_mw}"
        if self.objective != "step-time":
            options += f"|objective={self.objective}"
        options += "".join(f"|{k}={v}" for k, v in self.failures)
        return f"{self.model}|{self.cluster}|{self.global_batch_seqs}|{self.seq_len}{options}"


def expand(text: str, field_name: str, limit: int = MAX_SWEEP_POINTS) -> list[str]:
    """Comma items with ranges: 'v5p-{256..8192:x2}' multiplies by 2 from 256 up to 8192,
    '{64..256:+64}' adds 64, '{1..4}' steps by 1; several ranges in one item multiply out.
    More than ``limit`` values in all is refused before they are built."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InvalidArgumentError(f"{field_name}: empty item in '{_shown(text)}'")
    out: list[str] = []
    for item in items:
        out.extend(_expand_item(item, field_name, limit - len(out)))
    return out


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _expand_item(item: str, field_name: str, limit: int) -> list[str]:
    """The values of one item: literal pieces and ranges, multiplied out left to right."""
    pieces: list[list[str]] = []
    rest, count = item, 1
    while True:
        start = rest.find("{")
        literal = rest if start < 0 else rest[:start]
        if "}" in literal:
            raise InvalidArgumentError(
                f"{field_name}: malformed range in '{_shown(item)}' ('}}' without '{{')"
            )
        pieces.append([literal])
        if start < 0:
            break
        match = _RANGE.match(rest, start)
        if not match:
            raise InvalidArgumentError(
                f"{field_name}: malformed range in '{_shown(item)}' (expected {{A..B:xF}} or "
                f"{{A..B:+S}} with whole numbers, e.g. 'v5p-{{256..8192:x2}}')"
            )
        values = _range_values(match, _shown(item), field_name)
        count *= len(values)
        if count > limit:
            raise InvalidArgumentError(
                f"{field_name}: '{_shown(item)}' expands to more than {max(limit, 0):,} values"
            )
        pieces.append([str(v) for v in values])
        rest = rest[match.end() :]
    out = [""]
    for choices in pieces:
        out = [head + choice for head in out for choice in choices]
    if len(out) > limit:
        raise InvalidArgumentError(
            f"{field_name}: '{_shown(item)}' expands to more than {max(limit, 0):,} values"
        )
    return out


def _range_values(match: re.Match, item: str, field_name: str) -> list[int]:
    """The values A, A op S, ... up to B inclusive, for op 'x' (multiply) or '+' (add)."""
    if any(len(g) > 30 for g in match.groups() if g):
        raise InvalidArgumentError(
            f"{field_name}: range '{_shown(match[0])}' in '{item}' has numbers of more than 30 digits"
        )
    first, last, op, step = int(match[1]), int(match[2]), match[3] or "+", int(match[4] or 1)
    if first > last:
        raise InvalidArgumentError(
            f"{field_name}: range '{match[0]}' in '{item}' runs backwards ({first} > {last})"
        )
    if op == "x" and (first < 1 or step < 2):
        raise InvalidArgumentError(
            f"{field_name}: range '{match[0]}' in '{item}' needs a start >= 1 and a factor >= 2"
        )
    if op == "+" and step < 1:
        raise InvalidArgumentError(
            f"{field_name}: range '{match[0]}' in '{item}' needs a step >= 1"
        )
    values, value = [], first
    while value <= last:
        values.append(value)
        if len(values) > MAX_RANGE_VALUES:
            raise InvalidArgumentError(
                f"{field_name}: range '{match[0]}' in '{item}' has more than {MAX_RANGE_VALUES} values"
            )
        value = value * step if op == "x" else value + step
    return values


def _whole_numbers(texts: Sequence[str], field_name: str, maximum: int) -> list[int]:
    out = []
    for text in texts:
        for value in expand(text, field_name):
            if not _DIGITS.fullmatch(value) or int(value) < 1:
                raise InvalidArgumentError(
                    f"{field_name}: '{_shown(value)}' is not a whole number >= 1"
                )
            if int(value) > maximum:
                raise InvalidArgumentError(f"{field_name}: {_shown(value)} is more than {maximum}")
            out.append(int(value))
    return list(dict.fromkeys(out))


def _as_list(values: str | Sequence[str] | int | Sequence[int]) -> list[str]:
    return [str(v) for v in values] if isinstance(values, (list, tuple)) else [str(values)]


def expand_points(
    models,
    clusters,
    seqs,
    seq_len=4096,
    training_tokens: float | None = None,
    price_per_device_hour: float | None = None,
    workload: dict | None = None,
    price_per_kwh: float | None = None,
    max_site_power_mw: float | None = None,
    objective: str = "step-time",
    failures: dict | None = None,
) -> list[Point]:
    """Every (model, cluster, seq_len, seqs) combination, in that nesting order, without repeats.
    Each of the first four arguments is a string (comma items and ranges allowed) or a list of
    them; every point carries ``training_tokens``, ``price_per_device_hour`` and the ``workload``
    options (``core.options.WorkloadOptions``) (those that differ from their defaults key the point),
    ``price_per_kwh``, the site power budget ``max_site_power_mw``, the search's ``objective``
    and the ``failures`` options (``core.options.FAILURE_OPTIONS``; these three key it too)."""
    defaults = {name: f.default for name, f in WorkloadOptions.model_fields.items()}
    options = tuple(sorted((k, v) for k, v in (workload or {}).items() if v != defaults[k]))
    failure_defaults = {
        name: plain(PlanOptions.model_fields[name].default) for name in FAILURE_OPTIONS
    }
    changed = tuple(
        sorted(
            (k, plain(v)) for k, v in (failures or {}).items() if plain(v) != failure_defaults[k]
        )
    )
    check_tokens(training_tokens)
    check_price(price_per_device_hour)
    model_ids = list(dict.fromkeys(m for text in _as_list(models) for m in expand(text, "--model")))
    cluster_ids = list(
        dict.fromkeys(c for text in _as_list(clusters) for c in expand(text, "--cluster"))
    )
    for option, names in (("--model", model_ids), ("--cluster", cluster_ids)):
        for name in names:
            if "|" in name:
                raise InvalidArgumentError(f"{option}: '{_shown(name)}' contains '|'")
    batch = _whole_numbers(_as_list(seqs), "--seqs", MAX_GLOBAL_BATCH_SEQS)
    lengths = _whole_numbers(_as_list(seq_len), "--seq-len", MAX_SEQ_LEN)
    count = len(model_ids) * len(cluster_ids) * len(batch) * len(lengths)
    if count > MAX_SWEEP_POINTS:
        raise InvalidArgumentError(
            f"--model x --cluster x --seqs x --seq-len: {count:,} points ({len(model_ids)} x {len(cluster_ids)} x "
            f"{len(batch)} x {len(lengths)}), more than the {MAX_SWEEP_POINTS:,} one sweep takes; split it"
        )
    return [
        Point(
            model=m,
            cluster=c,
            global_batch_seqs=b,
            seq_len=s,
            training_tokens=training_tokens,
            price_per_device_hour=price_per_device_hour,
            workload=options,
            price_per_kwh=price_per_kwh,
            max_site_power_mw=max_site_power_mw,
            objective=objective,
            failures=changed,
        )
        for m in model_ids
        for c in cluster_ids
        for s in lengths
        for b in batch
    ]
