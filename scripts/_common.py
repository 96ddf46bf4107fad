"""Generators of the committed results/ files; each is `python -m layoutsearch.reports.NAME`."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
RESULTS = REPO / "results"
