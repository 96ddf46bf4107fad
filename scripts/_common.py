"""Paths shared by the generators of the committed results/ files.

Each generator is run from a checkout as ``python scripts/NAME.py``; none of them ships in the
wheel. The checkout's own package comes first on ``sys.path`` (ahead of an installed copy), so
the results describe the code beside them. Input data is read from the repository only
(``tests/data/``), never from outside it.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
DATA = REPO / "tests" / "data"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def data_file(name: str) -> Path:
    """A file of tests/data/, or FileNotFoundError naming the path it looked for."""
    path = DATA / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the repository's reference data (tests/data/) is incomplete"
        )
    return path


def table_head(*columns: str) -> list[str]:
    """A Markdown table's header and separator lines."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
