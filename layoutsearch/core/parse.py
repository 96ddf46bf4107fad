"""Parsing of command-line values (degrees, choices, axes, names) into typed objects, with one-line errors.

Every message names the option and the value. Numbers are bounded (``MAX_DEVICES`` for a
degree or an axis factor) before anything is built from them, so no huge integer reaches numpy.
"""

from __future__ import annotations

import re

from layoutsearch.core.errors import InvalidArgumentError, did_you_mean
from layoutsearch.core.specs import ALL_DEGREE_NAMES
from layoutsearch.core.units import MAX_DEVICES

LAYOUT_KEYS = ALL_DEGREE_NAMES
_WHOLE = re.compile(r"[+]?[0-9]{1,30}")


def _shown(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def parse_int(text: str, field: str, minimum: int = 1, maximum: int = MAX_DEVICES) -> int:
    """A whole number in minimum..maximum (ASCII digits only)."""
    text = text.strip()
    if not _WHOLE.fullmatch(text) and not (text.startswith("-") and _WHOLE.fullmatch(text[1:])):
        raise InvalidArgumentError(f"{field}: '{_shown(text)}' is not an integer")
    value = int(text)
    if value < minimum:
        raise InvalidArgumentError(f"{field}: {value} must be >= {minimum}")
    if value > maximum:
        raise InvalidArgumentError(f"{field}: {_shown(str(value))} must be <= {maximum}")
    return value


def _degree_name(name: str, field: str) -> str:
    if name not in LAYOUT_KEYS:
        raise InvalidArgumentError(
            f"{field}: unknown degree '{_shown(name)}'{did_you_mean(name, LAYOUT_KEYS)}; "
            f"known: {', '.join(LAYOUT_KEYS)}"
        )
    return name


def _degree_item(item: str, field: str, form: str) -> tuple[str, str]:
    """'tp=8' -> ('tp', '8'): a known degree name and the text after '=' (an item without '=' is
    refused as not ``form``)."""
    if "=" not in item:
        raise InvalidArgumentError(f"{field}: '{_shown(item)}' is not {form}")
    name, value = (s.strip() for s in item.split("=", 1))
    return _degree_name(name, field), value


def parse_degrees(text: str, field: str = "--layout") -> dict[str, int]:
    """'fsdp=1024,tp=8' -> {'fsdp': 1024, 'tp': 8}; unknown names get a did-you-mean, repeats are refused."""
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, value = _degree_item(item, field, "NAME=VALUE (e.g. fsdp=1024,tp=8)")
        number = parse_int(value, f"{field} {name}")
        if name in out:
            raise InvalidArgumentError(f"{field}: {name} given twice ({out[name]}, {number})")
        out[name] = number
    return out


def parse_choices(text: str, field: str = "--choices") -> dict[str, tuple[int, ...]]:
    """'tp=8,16,32;pp=1,2' or 'tp=8,16,32,pp=1' -> {'tp': (8, 16, 32), 'pp': (1,)}; a degree or a
    value of one named twice is refused."""
    out: dict[str, list[int]] = {}
    current = None
    for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
        if "=" in item:
            name, value = _degree_item(item, field, "NAME=VALUE,...")
            if name in out:
                raise InvalidArgumentError(f"{field}: {name} given twice")
            current = name
            out[name] = []
        elif current is None:
            raise InvalidArgumentError(
                f"{field}: '{_shown(item)}' must follow NAME= (e.g. tp=8,16,32)"
            )
        else:
            value = item
        number = parse_int(value, f"{field} {current}")
        if number in out[current]:
            raise InvalidArgumentError(f"{field}: {current}={number} given twice")
        out[current].append(number)
    if not out:
        raise InvalidArgumentError(f"{field}: no degree given (e.g. 'tp=8,16,32;pp=1,2')")
    return {k: tuple(v) for k, v in out.items()}


def parse_names(
    text: str, allowed: tuple[str, ...], field: str, noun: str = "name"
) -> tuple[str, ...]:
    """'none,full' -> ('none', 'full'): each name known, at least one, none given twice."""
    names = tuple(filter(None, (s.strip() for s in text.split(","))))
    if not names:
        raise InvalidArgumentError(f"{field}: no {noun} given (known: {', '.join(allowed)})")
    for i, name in enumerate(names):
        if name not in allowed:
            raise InvalidArgumentError(
                f"{field}: unknown {noun} '{_shown(name)}'{did_you_mean(name, allowed)}; known: {', '.join(allowed)}"
            )
        if name in names[:i]:
            raise InvalidArgumentError(f"{field}: {noun} '{name}' given twice")
    return names


# a placement as solve's and estimate's tables print it: 'tp:y8; fsdp:z16*x8*dcn2' (an axis name, then its factor)
_SHOWN_PIECE = re.compile(r"([A-Za-z_]+)\s*(\d+)")


def _shown_form(group: str) -> tuple[str, str] | None:
    """'fsdp:z16*x8' -> ('fsdp', 'z:16,x:8'), the form the tables print; None for any other text."""
    name, sep, spec = group.partition(":")
    pieces = [p.strip() for p in spec.split("*")]
    matches = [_SHOWN_PIECE.fullmatch(p) for p in pieces]
    if "=" in group or not sep or not all(matches):
        return None
    return name.strip(), ",".join(f"{m[1]}:{m[2]}" for m in matches if m)


def parse_axes(
    text: str, field: str = "--axes"
) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """'tp=z:8;fsdp=z:4,y:16,x:16' -> (('tp', (('z', 8),)), ('fsdp', (('z', 4), ('y', 16), ('x', 16)))); the form
    solve's and estimate's tables print, 'tp:z8; fsdp:z4*y16*x16', reads the same."""
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    for group in filter(None, (s.strip() for s in text.split(";"))):
        shown = _shown_form(group)
        if shown is not None:
            name, spec = _degree_name(shown[0], field), shown[1]
        else:
            name, spec = _degree_item(
                group,
                field,
                "DEGREE=AXIS:FACTOR,... (e.g. tp=z:8;fsdp=x:16, or as the tables print it, tp:z8)",
            )
        if name in out:
            raise InvalidArgumentError(f"{field}: {name} given twice")
        parts: list[tuple[str, int]] = []
        for piece in filter(None, (s.strip() for s in spec.split(","))):
            if ":" not in piece:
                raise InvalidArgumentError(f"{field}: '{_shown(piece)}' is not AXIS:FACTOR")
            axis, factor = (s.strip() for s in piece.split(":", 1))
            if not axis:
                raise InvalidArgumentError(f"{field}: '{_shown(piece)}' names no axis")
            if any(axis == seen for seen, _ in parts):
                raise InvalidArgumentError(
                    f"{field}: {name} is placed on axis '{_shown(axis)}' twice"
                )
            parts.append((axis, parse_int(factor, f"{field} {name} {_shown(axis)}")))
        out[name] = tuple(parts)
    return tuple(out.items())
