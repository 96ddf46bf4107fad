"""Every worked number of the design notes and the book, as layoutsearch computes it.

The expected values and tolerances are read, as they are, from tests/data/seed_cases.yaml and
tests/data/book_cases.yaml; the computations are the table of ``tests/reference.py``, where
each case is an ``engine`` case (estimate(), solve(), the search space, the collective
primitives) or a ``closed-form`` case (``tests/closed_forms.py``, not used by the engine).
"""

import ast
from pathlib import Path

import pytest
import reference

DATA = Path(__file__).resolve().parent / "data"
FILES = ("seed_cases.yaml", "book_cases.yaml")
HELPERS = ("reference", "closed_forms")


def _read():
    """(file, case) pairs of both files, and the errors of the files that cannot be read."""
    cases, missing = [], []
    for name in FILES:
        try:
            cases += [(name, c) for c in reference.load_cases(DATA / name)]
        except FileNotFoundError as exc:
            missing.append(str(exc))
    return cases, missing


CASES, MISSING = _read()


def test_reference_files_are_read():
    """Both case files are present, and the table computes exactly their cases (none skipped)."""
    assert not MISSING, MISSING
    ids = [c["id"] for _, c in CASES]
    assert len(ids) == len(set(ids)) >= 46
    assert set(ids) == set(reference.CASES)
    assert {c["id"] for name, c in CASES if name == "seed_cases.yaml"} == set(reference.SEED)


def test_every_case_has_a_kind():
    assert {case.kind for case in reference.CASES.values()} <= set(reference.KINDS)
    assert sum(case.kind == reference.ENGINE for case in reference.CASES.values()) >= 15


def test_the_package_neither_holds_nor_imports_the_reference_helpers():
    """reference.py and closed_forms.py live under tests/ (not in the wheel): the package has no
    such module and none of its modules imports one."""
    package = Path(__file__).resolve().parents[1] / "layoutsearch"
    assert sorted(p.name for p in package.rglob("*.py") if p.stem in HELPERS) == []
    users = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(part in HELPERS for n in names for part in n.split(".")):
                users.append(str(path.relative_to(package)))
    assert users == []


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[c["id"] for _, c in CASES])
def test_reference_case(case):
    """The value is within the case's rel_tol of the expected value."""
    computed = reference.compute(case["id"])
    assert reference.within(case["expected"], computed, case["rel_tol"]), (
        case["id"],
        case["expected"],
        computed,
    )
