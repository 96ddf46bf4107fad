"""Every worked number of the design notes and the book, reproduced through the public API.

The expected values and tolerances are read from ../shared/reference/*.yaml as they are.
"""

from pathlib import Path

import pytest

from layoutsearch import reference

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
CASES = [(f.stem, c) for f in (SHARED / "seed_cases.yaml", SHARED / "book_cases.yaml") if f.exists()
         for c in reference.load_cases(f)]


def test_reference_files_are_read():
    """Both case files are present and every case has a computation (none skipped)."""
    ids = {c["id"] for _, c in CASES}
    assert len(CASES) >= 46
    assert ids == set(reference.SEED) | set(reference.BOOK)


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[c["id"] for _, c in CASES])
def test_reference_case(case):
    """The engine's value is within the case's rel_tol of the expected value."""
    computed = reference.compute(case["id"])
    assert reference.within(case["expected"], computed, case["rel_tol"]), (case["id"], case["expected"], computed)
