"""Solver-agnostic layout checks (docs/search.md "Checks"): every violation with a code and the numbers.

The structural rules come from the registry (``rules.py``); this module adds the placement
check (each degree's axis factors multiply to the degree, each axis is filled exactly).
Memory is not checked here: ``estimate()`` computes the peak and reports a ``memory``
violation itself, so each layout is costed once.
"""

from __future__ import annotations

import math

from layoutsearch.core.problem import Problem, SearchOptions
from layoutsearch.core.rules import Capabilities, Violation, registry, violations
from layoutsearch.core.specs import Layout

__all__ = ["Violation", "check_layout", "placement_violations"]


def check_layout(
    problem: Problem,
    layout: Layout,
    *,
    options: SearchOptions | None = None,
    capabilities: Capabilities | None = None,
) -> list[Violation]:
    """Every rule of the registry the layout breaks, then its placement's inconsistencies."""
    out = violations(problem, layout, registry(options, capabilities))
    return out or placement_violations(problem, layout)


def placement_violations(problem: Problem, layout: Layout) -> list[Violation]:
    """Each degree's factors multiply to the degree; each axis is filled exactly (placed layouts only)."""
    if not layout.placed:
        return []
    cluster, out = problem.cluster, []
    names = {a.name: a.size for a in cluster.axes}
    used = {a: 1 for a in names}
    degrees = layout.all_degrees
    for degree, placed in layout.placements:
        product = math.prod(f for _, f in placed)
        if product != degrees.get(degree, 0):
            out.append(
                Violation(
                    "axes",
                    f"axes of {degree} {list(placed)} multiply to {product}, not {degree}({degrees.get(degree)})",
                )
            )
        for axis, factor in placed:
            if axis not in names:
                out.append(
                    Violation(
                        "axes",
                        f"{degree} is placed on axis '{axis}', which cluster {cluster.name} "
                        f"does not have (axes: {', '.join(names)})",
                    )
                )
                continue
            if degree in layout.degrees:  # the expert degrees regroup devices the others place
                used[axis] *= factor
    for axis, size in names.items():
        if used[axis] != size and not out:
            out.append(
                Violation(
                    "axes",
                    f"degrees placed on axis '{axis}' multiply to {used[axis]}, not its size {size}",
                )
            )
    return out
