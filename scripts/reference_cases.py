"""Write results/reference_cases.md: every reference case, expected vs computed.

Regenerate: python -m layoutsearch.reports.reference_cases
"""

from __future__ import annotations

import sys

from layoutsearch import reference
from layoutsearch.reports import RESULTS
from layoutsearch.reports import SHARED


def _show(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def main() -> int:
    lines = ["# Reference cases: expected (shared/reference) vs computed (layoutsearch public API)", "",
             "Regenerate: `python -m layoutsearch.reports.reference_cases`", ""]
    failures = 0
    for name in ("seed_cases", "book_cases"):
        cases = reference.load_cases(SHARED / "reference" / f"{name}.yaml")
        lines += [f"## {name}.yaml ({len(cases)} cases)", "", "| id | expected | computed | rel_tol | ok |", "|---|---|---|---|---|"]
        for case in cases:
            value = reference.compute(case["id"])
            ok = reference.within(case["expected"], value, case["rel_tol"])
            failures += not ok
            lines.append(f"| {case['id']} | {_show(case['expected'])} | {_show(value)} | {case['rel_tol']:g} | "
                         f"{'yes' if ok else 'NO'} |")
        lines.append("")
    lines.append(f"All within tolerance: {'yes' if not failures else f'no ({failures} outside)'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reference_cases.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'reference_cases.md'} ({failures} outside tolerance)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
