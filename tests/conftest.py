"""Shared fixtures: where the reference files are (../shared beside the repository)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    if not (SHARED / "reference").is_dir():
        pytest.fail(f"reference files not found at {SHARED}: the tests need ../shared beside the repository")
    return SHARED
