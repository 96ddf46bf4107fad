"""Shared fixtures: the repository's test data (tests/data/: the reference cases and the
measured-run development sets, copied into the repository with a provenance line)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


def data_path(name: str) -> Path:
    """tests/data/NAME; FileNotFoundError naming the path when it is missing (never a skip)."""
    path = DATA / name
    if not path.is_file():
        raise FileNotFoundError(
            f"test data file {path} not found: tests/data/ is part of the repository"
        )
    return path


@pytest.fixture(scope="session")
def data_file():
    """``data_file(name)``: the path of tests/data/NAME; a missing file fails the test that asks for it."""

    def get(name: str) -> Path:
        try:
            return data_path(name)
        except FileNotFoundError as exc:
            pytest.fail(str(exc))

    return get
