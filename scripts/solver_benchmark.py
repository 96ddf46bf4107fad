"""Write results/solver_benchmark.md: CP-SAT against the exhaustive enumerator, and the main job's wall time.

Regenerate: python scripts/solver_benchmark.py
Times are wall seconds on the machine that ran it; compare ratios within one run.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import sys
import time

from _common import RESULTS  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.problem import Problem, SearchRequest
from layoutsearch.core.specs import Workload
from layoutsearch.search import solve
from layoutsearch.search.cpsat import cpsat_top
from layoutsearch.search.enumerate import enumerate_top
from layoutsearch.search.space import build_space
from layoutsearch.search.tables import build_tables

CASES = [  # model, cluster, global batch in sequences (seq_len 4096)
    ("llama3-8b", "h100-8", 64),
    ("llama3-8b", "v5p-64", 256),
    ("llama70b", "h100-256", 512),
    ("llama70b", "h100-1024", 1024),
    ("llama70b", "v5p-4096", 1024),
    ("llama70b", "v5p-8192", 1024),
    ("llama70b", "v5p-8192", 256),
    ("llama70b", "v5p:16x20x28", 2240),
    ("llama3-405b", "h100-16384", 2048),
    ("llama3-405b", "v5p-8192x4", 4096),
    ("llama3-405b", "h100-65536", 16384),
    ("llama70b", "v5p:16x20x28", 8960),
    ("llama70b", "v5p-8192x8", 16384),
    ("llama70b", "h100-65536", 65536),
    ("llama70b", "v5p-8960x4", 35840),  # the largest natural space found: 3.5 million candidates
    # mixtures of experts: ep and etp in the space
    ("mixtral-8x7b", "h100-64", 512),
    ("qwen3-235b-a22b", "h100-256", 2048),
    ("deepseek-v3", "h100-2048", 15360),  # the MoE issue's Done-when command
]
MAIN_JOB = ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--format", "json"]


def main_job_times(runs: int = 7) -> list[float]:
    """Whole-process wall seconds of the README's main job (a fresh interpreter each time)."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "layoutsearch.cli", *MAIN_JOB], check=True, capture_output=True
        )
        out.append(time.perf_counter() - t0)
    return out


def compare(model_name: str, cluster_name: str, seqs: int) -> dict:
    workload = Workload(global_batch_seqs=seqs, seq_len=4096)
    problem = Problem.build(model_name, cluster_name, workload)
    t0 = time.perf_counter()
    focused = solve(problem, SearchRequest(top_k=1))  # the search as solve runs it (cpsat.focus)
    t_solve = time.perf_counter() - t0
    t0 = time.perf_counter()
    space = build_space(problem)
    tables = build_tables(space)
    shared = time.perf_counter() - t0
    t0 = time.perf_counter()
    cps, info = cpsat_top(space, tables, "step-time", 1, time_limit_s=300)
    t_cpsat = time.perf_counter() - t0
    t0 = time.perf_counter()
    enum, seen = enumerate_top(space, tables, "step-time", 1)
    t_enum = time.perf_counter() - t0
    value = lambda a: a[0][4]["step"] * tables.quantum_s if a else None  # noqa: E731
    best = enum[0][4]["step"] if enum else None
    return {
        "case": f"{model_name} on {cluster_name}, {seqs} seqs",
        "candidates": space.num_candidates(),
        "shared_s": shared,
        "cpsat_s": t_cpsat,
        "enumerate_s": t_enum,
        "cpsat_step_s": value(cps),
        "enumerate_step_s": value(enum),
        "solve_s": t_solve,
        "tabulated": len(focused.space.sk_k),
        "equal": (cps[0][4]["step"] if cps else None) == best
        and (focused.metrics[0]["step"] if focused.metrics else None) == best,
        "status": info["status"],
        "rows_kept": info["rows_kept"],
        "rows_total": info["rows_total"],
    }


def main() -> int:
    times = main_job_times()
    rows = []
    for case in CASES:
        rows.append(compare(*case))
        print(rows[-1], flush=True)
    lines = [
        "# Solver benchmark",
        "",
        "Regenerate: `python scripts/solver_benchmark.py` "
        f"(machine: {platform.machine()}, Python {platform.python_version()}).",
        "",
        "## Main job: `layoutsearch solve --model llama70b --cluster v5p-8192` (whole process)",
        "",
        f"{len(times)} runs: median {statistics.median(times):.2f} s, min {min(times):.2f} s, max {max(times):.2f} s "
        "(target: median <= 2 s with a proven optimum).",
        "",
        "## CP-SAT against the exhaustive enumerator (top 1, step-time objective)",
        "",
        "Both use the same candidate space and integer tables (built once: `tables s`). CP-SAT first costs "
        "(shape, K) rows best-first in the order of a valid lower bound and stops when the next bound exceeds "
        "the best value found; the model gets the rows that can still hold the optimum and proves it. "
        "The enumerator costs every candidate. `solve() s` is the whole search as `solve` runs it (space, "
        "the rows a compute bound keeps tabulated, CP-SAT, the winner re-costed): `rows tabulated` of the "
        "(shape, K) rows; `equal` holds when CP-SAT on the full tables, `solve()` and the enumerator find "
        "the same least step time.",
        "",
        "| case | candidates | tables s | CP-SAT s | enumerate s | speed-up | rows to CP-SAT | solve() s | rows tabulated | status | optimum (s) | equal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['candidates']:,} | {r['shared_s']:.2f} | {r['cpsat_s']:.3f} | "
            f"{r['enumerate_s']:.3f} | {r['enumerate_s'] / max(r['cpsat_s'], 1e-9):.1f}x | "
            f"{r['rows_kept']:,} of {r['rows_total']:,} | {r['solve_s']:.2f} | "
            f"{r['tabulated']:,} of {r['rows_total']:,} | {r['status']} | "
            f"{r['cpsat_step_s'] or float('nan'):.4f} | {'yes' if r['equal'] else 'NO'} |"
        )
    big = [r for r in rows if r["candidates"] > 1e7]
    lines += [
        "",
        f"Equal optima in {sum(r['equal'] for r in rows)} of {len(rows)} cases. "
        + (
            f"Spaces above 10^7 candidates: {len(big)}; CP-SAT faster in "
            f"{sum(r['cpsat_s'] < r['enumerate_s'] for r in big)} of them."
            if big
            else "No case exceeds 10^7 candidates: with placements by axis order the largest natural "
            "spaces found hold a few million (llama70b on four 16x20x28 pods at 35,840 sequences: 3.5 million)."
        ),
    ]
    (RESULTS / "solver_benchmark.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'solver_benchmark.md'}")
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
