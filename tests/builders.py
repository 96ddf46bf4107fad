"""Builders shared by several test modules (a helper module, not a test module: pytest collects
nothing here). Fixtures are in conftest.py; what test modules need at import time (parametrize
lists, module constants) is built here."""

from __future__ import annotations

import pytest

from layoutsearch.search.cpsat import cpsat_top

# A solver limit that a correct solve of the tests' small instances never reaches: their verdicts
# must not depend on the machine's speed (the README's `python -m pytest -q` runs on loaded CI).
NO_TIME_LIMIT_S = 86_400.0


def proven_top(space, tables, objective: str, top_k: int, **options):
    """``cpsat_top`` without a time limit; fails, naming the statuses, when CP-SAT returned an
    answer it did not prove (so a mismatch with the enumerator is never a timeout in disguise)."""
    answers, info = cpsat_top(
        space, tables, objective, top_k, time_limit_s=NO_TIME_LIMIT_S, **options
    )
    if info["status"] not in ("OPTIMAL", "INFEASIBLE") or info["ranking_status"] != "OPTIMAL":
        pytest.fail(
            f"CP-SAT did not prove its answer: status {info['status']}, ranking status "
            f"{info['ranking_status']} ({info['wall_s']:.1f} s, no time limit)"
        )
    return answers, info
