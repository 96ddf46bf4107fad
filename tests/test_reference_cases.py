"""Every worked number of the design notes and the book, as layoutsearch computes it.

The expected values and tolerances are read, as they are, from tests/data/seed_cases.yaml and
tests/data/book_cases.yaml; the computations are the table of ``layoutsearch.reference``, where
each case is an ``engine`` case (estimate(), solve(), the search space, the collective
primitives) or a ``closed-form`` case (``layoutsearch.closed_forms``, not used by the engine).
"""

import ast
from pathlib import Path

import pytest

from layoutsearch import reference

DATA = Path(__file__).resolve().parent / "data"
FILES = ("seed_cases.yaml", "book_cases.yaml")


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


def test_the_engine_does_not_use_the_closed_forms():
    """layoutsearch.closed_forms is for reference cases only: no other module of the package imports it."""
    package = Path(reference.__file__).resolve().parent
    users = []
    for path in package.rglob("*.py"):
        if path.name in ("reference.py", "closed_forms.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{node.module}.{a.name}" for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any("closed_forms" in n for n in names):
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
