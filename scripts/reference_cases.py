"""Write results/reference_cases.md: every reference case, expected vs computed, and how.

Regenerate: python scripts/reference_cases.py
Reads tests/data/seed_cases.yaml and tests/data/book_cases.yaml (copies of the design notes'
and the book's worked numbers); the computations are the table of ``tests/reference.py``.
"""

from __future__ import annotations

import sys

from _common import (
    REPO,
    RESULTS,
    data_file,
)  # first: puts this checkout's package ahead of an installed one

sys.path.insert(0, str(REPO / "tests"))  # the reference table is a helper of the tests
import reference  # noqa: E402

FILES = ("seed_cases.yaml", "book_cases.yaml")


def _show(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def main() -> int:
    per_file = {name: reference.load_cases(data_file(name)) for name in FILES}
    kinds = [reference.kind(c["id"]) for cases in per_file.values() for c in cases]
    lines = [
        "# Reference cases: expected (tests/data) vs computed (layoutsearch)",
        "",
        "Regenerate: `python scripts/reference_cases.py`",
        "",
        "Kind `engine`: computed by what the engine runs (`estimate()`, `solve()`, the search space, the "
        "collective primitives) on small fixtures; a change to the engine that moves the number fails the tests. "
        "Kind `closed-form`: the notes' or the book's formula from `tests/closed_forms.py`, which the "
        "engine's cost model does not use; these check the formula and the catalogue figures it is given, "
        "not the engine.",
        "",
        f"{kinds.count(reference.ENGINE)} engine cases, {kinds.count(reference.CLOSED_FORM)} closed-form cases.",
        "",
    ]
    failures = 0
    for name, cases in per_file.items():
        lines += [
            f"## {name} ({len(cases)} cases)",
            "",
            "| id | kind | expected | computed | rel_tol | ok | computed by |",
            "|---|---|---|---|---|---|---|",
        ]
        for case in cases:
            entry = reference.CASES[case["id"]]
            value = entry.compute()
            ok = reference.within(case["expected"], value, case["rel_tol"])
            failures += not ok
            lines.append(
                f"| {case['id']} | {entry.kind} | {_show(case['expected'])} | {_show(value)} | "
                f"{case['rel_tol']:g} | {'yes' if ok else 'NO'} | {entry.how.replace('|', '/')} |"
            )
        lines.append("")
    lines.append(f"All within tolerance: {'yes' if not failures else f'no ({failures} outside)'}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "reference_cases.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'reference_cases.md'} ({failures} outside tolerance)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
