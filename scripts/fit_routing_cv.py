"""Write results/routing_cv.md: the spread of a learned router's expert loads (``Workload.routing_cv``, the catalogue
default ``core.specs.LEARNED_ROUTING_EXPERT_CV``) fitted to the published MoE runs it affects.

The records: tests/data/runs_moe_dev.yaml costed with learned routing (their notes do not say the benchmark forced
balanced routing), dropless, ep > 1 (``validation.calibrate.learned_routing_problems``). The objective: the Huber loss
of `layoutsearch calibrate --loss huber` on log(predicted / measured), over a grid of 0.05 (a finer value is more
than a dozen records can say). The per-family MoE overheads are the catalogue's; they were refitted after the spread
was set (hardware/*.yaml sources.calibration_moe).

Regenerate: python scripts/fit_routing_cv.py
"""

from __future__ import annotations

import math

import numpy as np
from _common import (
    RESULTS,
    data_file,
)  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.specs import LEARNED_ROUTING_EXPERT_CV
from layoutsearch.validation.calibrate import (
    ROUTING_CV_GRID,
    learned_routing_problems,
    routing_cv_scan,
)
from layoutsearch.validation.runs import load_runs

NEAR_TIE = 0.01  # a default whose loss is within 1% of the best's is not told apart from it by these records


def verdict(scan: dict, best: float) -> str:
    """Whether the default is the best, a near tie (kept: moving it means refitting the MoE overheads, which were
    fitted at it), or differs (to be refitted, or held for a reason the calibration notes give)."""
    if math.isclose(best, LEARNED_ROUTING_EXPERT_CV):
        return " (the same)."
    default_loss, best_loss = scan[LEARNED_ROUTING_EXPERT_CV][0], scan[best][0]
    gap = default_loss / best_loss - 1
    if gap <= NEAR_TIE:
        return (
            f" (a near tie: its loss {default_loss:.4f} is {gap:.1%} above the best's {best_loss:.4f}, within "
            f"{NEAR_TIE:.0%}; the records do not tell them apart, and the default stays, since moving it means "
            f"refitting the MoE overheads fitted at it: hardware/*.yaml calibration_moe)."
        )
    return (
        f" (differs: its loss {default_loss:.4f} is {gap:.1%} above the best's {best_loss:.4f}: refit the "
        f"default, or say why it is held in docs/calibration.md, MoE overheads)."
    )


def main() -> None:
    problems = learned_routing_problems(load_runs(data_file("runs_moe_dev.yaml")))
    scan = routing_cv_scan(problems, ROUTING_CV_GRID)
    best = min(scan, key=lambda cv: scan[cv][0])
    out = [
        "# The spread of a learned router's expert loads, fitted",
        "",
        "Regenerate: `python scripts/fit_routing_cv.py`. A dropless MoE layer waits for its busiest expert device "
        "(`costs.terms.expert_load`): 1 + z(ep) sqrt(1 / lambda + cv^2 / (E / ep)), z(n) the expected maximum of "
        "n standard normals, lambda the device's balanced rows, cv the relative spread of a learned router's "
        "expert loads (0 under forced balance, which routes at random). The records that set cv: "
        f"{len(problems)} of `tests/data/runs_moe_dev.yaml`, costed with learned routing, dropless, ep > 1.",
        "",
        "| cv | Huber objective | median abs error | per record (predicted / measured - 1) |",
        "|---|---|---|---|",
    ]
    for cv, (objective, errors) in scan.items():
        rel = np.expm1(errors)
        mark = " (best)" if cv == best else ""
        out.append(
            f"| {cv:.2f}{mark} | {objective:.4f} | {100 * np.median(np.abs(rel)):.1f}% | "
            + ", ".join(f"{100 * x:+.1f}%" for x in rel)
            + " |"
        )
    out += [
        "",
        "Records, in the order of the columns: "
        + "; ".join(f"`{pid}`" for pid, _, _ in problems)
        + ".",
        "",
        f"Best on the grid: cv = {best:.2f}; the catalogue default (`core.specs.LEARNED_ROUTING_EXPERT_CV`) is "
        f"{LEARNED_ROUTING_EXPERT_CV:.2f}" + verdict(scan, best),
    ]
    (RESULTS / "routing_cv.md").write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS / 'routing_cv.md'}: best cv {best:.2f} of {len(problems)} records")


if __name__ == "__main__":
    main()
