"""Parsing of command-line values (degrees, choices, axes) into typed objects, with one-line errors."""

from __future__ import annotations

from layoutsearch.core.errors import InvalidArgumentError, did_you_mean
from layoutsearch.core.specs import DEGREE_NAMES

LAYOUT_KEYS = DEGREE_NAMES


def parse_int(text: str, field: str, minimum: int = 1) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgumentError(f"{field}: '{text}' is not an integer") from None
    if value < minimum:
        raise InvalidArgumentError(f"{field}: {value} must be >= {minimum}")
    return value


def parse_degrees(text: str, field: str = "--layout") -> dict[str, int]:
    """'fsdp=1024,tp=8' -> {'fsdp': 1024, 'tp': 8}; unknown names get a did-you-mean."""
    out: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise InvalidArgumentError(f"{field}: '{item}' is not NAME=VALUE (e.g. fsdp=1024,tp=8)")
        name, value = (s.strip() for s in item.split("=", 1))
        if name not in LAYOUT_KEYS:
            raise InvalidArgumentError(f"{field}: unknown degree '{name}'{did_you_mean(name, LAYOUT_KEYS)}; "
                                       f"known: {', '.join(LAYOUT_KEYS)}")
        out[name] = parse_int(value, f"{field} {name}")
    return out


def parse_choices(text: str, field: str = "--choices") -> dict[str, tuple[int, ...]]:
    """'tp=8,16,32;pp=1,2' or 'tp=8,16,32,pp=1' -> {'tp': (8, 16, 32), 'pp': (1,)}."""
    out: dict[str, list[int]] = {}
    current = None
    for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
        if "=" in item:
            name, value = (s.strip() for s in item.split("=", 1))
            if name not in LAYOUT_KEYS:
                raise InvalidArgumentError(f"{field}: unknown degree '{name}'{did_you_mean(name, LAYOUT_KEYS)}")
            current = name
            out.setdefault(name, [])
        elif current is None:
            raise InvalidArgumentError(f"{field}: '{item}' must follow NAME= (e.g. tp=8,16,32)")
        else:
            value = item
        out[current].append(parse_int(value, f"{field} {current}"))
    return {k: tuple(v) for k, v in out.items()}


def parse_names(text: str, allowed: tuple[str, ...], field: str) -> tuple[str, ...]:
    names = tuple(filter(None, (s.strip() for s in text.split(","))))
    for name in names:
        if name not in allowed:
            raise InvalidArgumentError(f"{field}: unknown name '{name}'{did_you_mean(name, allowed)}; "
                                       f"known: {', '.join(allowed)}")
    return names


def parse_axes(text: str, field: str = "--axes") -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """'tp=z:8;fsdp=z:4,y:16,x:16' -> (('tp', (('z', 8),)), ('fsdp', (('z', 4), ('y', 16), ('x', 16))))."""
    out = []
    for group in filter(None, (s.strip() for s in text.split(";"))):
        if "=" not in group:
            raise InvalidArgumentError(f"{field}: '{group}' is not DEGREE=AXIS:FACTOR,... (e.g. tp=z:8;fsdp=x:16)")
        name, spec = (s.strip() for s in group.split("=", 1))
        if name not in LAYOUT_KEYS:
            raise InvalidArgumentError(f"{field}: unknown degree '{name}'{did_you_mean(name, LAYOUT_KEYS)}")
        parts = []
        for piece in filter(None, (s.strip() for s in spec.split(","))):
            if ":" not in piece:
                raise InvalidArgumentError(f"{field}: '{piece}' is not AXIS:FACTOR")
            axis, factor = piece.split(":", 1)
            parts.append((axis.strip(), parse_int(factor, f"{field} {name} {axis}")))
        out.append((name, tuple(parts)))
    return tuple(out)
