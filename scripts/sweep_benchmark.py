"""Write results/sweep_benchmark.md: a 1,000-point sweep timed end to end (whole `layoutsearch sweep` process).

Regenerate: python scripts/sweep_benchmark.py (--help: a smaller run, one executor, a comparison)
Points: llama3-8b and llama70b on v5p and H100 clusters of 128 to 2048 devices, 128 to 6400
sequences of 4096 tokens in steps of 128 (2 x 10 x 50 = 1,000). Target: <= 60 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import find_spec

from _common import RESULTS  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.problem import version
from layoutsearch.sweep import expand_points, read_table

MODELS = "llama3-8b,llama70b"
CLUSTERS = "v5p-{128..2048:x2},h100-{128..2048:x2}"
SEQS = "{128..6400:+128}"
REPEATS = 1
TIMING_COLUMNS = ("wall_s", "point_wall_s", "finished_at")  # differ between runs of the same sweep


def timed_run(output: str, *extra: str, seqs: str = SEQS) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one whole `layoutsearch sweep` process and
    the workers it waited for (a Ray instance's workers are not its children: not counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            *("-m", "layoutsearch.cli", "sweep", "-m", MODELS, "-c", CLUSTERS, "--seqs", seqs),
            *("--no-progress", "-o", output, *extra),
        ],
        check=True,
        capture_output=True,
    )
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def differences(old: list[dict], new: list[dict]) -> list[str]:
    """Each point and column (timing columns aside) where a sweep's rows differ from an earlier
    sweep's, and its points the earlier one lacks (the earlier may have more: a subset compares)."""
    before = {r["point_id"]: r for r in old}
    out = []
    for row in new:
        was = before.get(row["point_id"])
        if was is None:
            out.append(f"{row['point_id']}: not in the earlier sweep")
            continue
        out.extend(
            f"{row['point_id']}: {key} {was.get(key)!r} -> {value!r}"
            for key, value in row.items()
            if key not in TIMING_COLUMNS and was.get(key) != value
        )
    return out


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seqs",
        default=SEQS,
        help=f"global batches (default {SEQS}: 1,000 points; others write no results file)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="only the local executor with --jobs CPU count"
    )
    parser.add_argument("--compare", help="an earlier sweep file: report every differing cell")
    parser.add_argument("--keep", help="copy the first run's output (.parquet) here")
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave results/sweep_benchmark.md"
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    n = len(expand_points(MODELS, CLUSTERS, args.seqs))
    cpus = os.cpu_count() or 1
    load = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        configs = [(f"local, --jobs {cpus}", cpus, [])]
        if not args.quick:
            configs.append(("local, --jobs 1", 1, []))
        if find_spec("ray") and not args.quick:
            configs.append(
                (
                    f"ray, --jobs {cpus} (a local Ray instance; its start and shutdown included)",
                    cpus,
                    ["--executor", "ray"],
                )
            )
        for i, (label, jobs, executor) in enumerate(configs):
            extra = [*executor, "--jobs", str(jobs)]
            walls, cpus_s = [], []
            for k in range(REPEATS):
                out = os.path.join(tmp, f"run{i}-{k}.parquet")
                wall_s, cpu_s = timed_run(out, *extra, seqs=args.seqs)
                walls.append(wall_s)
                cpus_s.append(cpu_s)
            rows = read_table(out)
            runs.append(
                {
                    "label": label,
                    "wall_s": statistics.median(walls),
                    "min_s": min(walls),
                    "cpu_s": statistics.median(cpus_s),
                    "jobs": jobs,
                    "ray": bool(executor),
                    "rows": rows,
                }
            )
            print(
                f"{label}: median {runs[-1]['wall_s']:.1f} s, min {min(walls):.1f} s, "
                f"CPU {runs[-1]['cpu_s']:.1f} s for {len(rows)} points",
                flush=True,
            )
        resume, _ = timed_run(
            os.path.join(tmp, "run0-0.parquet"), "--jobs", str(cpus), seqs=args.seqs
        )
        print(f"rerun with every point done: {resume:.2f} s", flush=True)
        if args.keep:
            shutil.copyfile(os.path.join(tmp, "run0-0.parquet"), args.keep)
    load_end = os.getloadavg()[0]
    print(f"load average {load:.1f} at the start, {load_end:.1f} at the end")
    main_rows = runs[0]["rows"]
    if args.compare:
        diff = differences(read_table(args.compare), main_rows)
        print(
            f"against {args.compare}: {len(main_rows)} points compared, {len(diff)} differing cells "
            "or points (timing columns aside)",
            *diff[:20],
            sep="\n",
        )
        if diff:
            return 1
    if args.no_write or args.seqs != SEQS:
        return 0
    point_s = sorted(r["point_wall_s"] for r in main_rows)
    solver_s = sorted(r["wall_s"] for r in main_rows if r["wall_s"] is not None)
    statuses = {}
    for r in main_rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    same = all(
        [
            (a["status"], a["objective_s"], a["dp"], a["fsdp"], a["tp"], a["pp"], a["cp"])
            for a in run["rows"]
        ]
        == [
            (a["status"], a["objective_s"], a["dp"], a["fsdp"], a["tp"], a["pp"], a["cp"])
            for a in main_rows
        ]
        for run in runs
    )
    command = f"layoutsearch sweep -m {MODELS} -c '{CLUSTERS}' --seqs '{SEQS}' --jobs {cpus} -o sweep.parquet"
    lines = [
        "# Sweep benchmark",
        "",
        f"Regenerate: `python scripts/sweep_benchmark.py` (machine: {platform.machine()}, {cpus} CPUs, "
        f"Python {platform.python_version()}, layoutsearch {version()}).",
        "",
        f"{n} points: {MODELS.replace(',', ' and ')} on v5p and H100 clusters of 128 to 2048 devices, 128 to 6400 "
        "sequences of 4096 tokens in steps of 128. Each time is one whole process, as a user runs it (interpreter start, imports, "
        "worker start, every solve, the journal fsync per point and the Parquet rewrites):",
        "",
        "```sh",
        command,
        "```",
        "",
        f"{REPEATS} runs each; load average {load:.1f} when the benchmark started and {load_end:.1f} "
        "when it ended (other work on the machine shares its cores: the wall times grow with it). "
        "CPU s is user + system time of the sweep process and its workers (a Ray instance's "
        "workers are not counted); CPU s / jobs is about the wall time the local executor takes "
        "with that many cores to itself.",
        "",
        "| executor | median wall s | min wall s | points/s (median) | CPU s (median) | CPU s / jobs |",
        "|---|---|---|---|---|---|",
        *[
            f"| {run['label']} | {run['wall_s']:.1f} | {run['min_s']:.1f} | "
            f"{len(run['rows']) / run['wall_s']:.1f} | "
            + (
                "- | - |"
                if run["ray"]
                else f"{run['cpu_s']:.1f} | {run['cpu_s'] / run['jobs']:.1f} |"
            )
            for run in runs
        ],
        f"| rerun of the finished sweep (every point skipped) | {resume:.2f} | | - | | |",
        "",
        f"Target: <= 60 s on a 2-core machine: {'met' if runs[0]['wall_s'] <= 60 else 'NOT met'} "
        f"({runs[0]['wall_s']:.1f} s with {cpus} jobs; {runs[0]['cpu_s'] / cpus:.1f} s of CPU per core).",
        "",
        f"Statuses: {', '.join(f'{v} {k}' for k, v in sorted(statuses.items()))}. "
        f"All executors agree on every point's status, objective and degrees: {'yes' if same else 'NO'}.",
        "",
        f"Per point (last run of the first row): median {statistics.median(point_s):.3f} s, p90 "
        f"{point_s[int(0.9 * (len(point_s) - 1))]:.3f} s, max {point_s[-1]:.3f} s including model/cluster loading "
        f"and the re-estimate; solve() alone median {statistics.median(solver_s):.3f} s; "
        f"sum over points {sum(point_s):.1f} s.",
        "",
        "On one machine the local executor is the one to use: a local Ray instance adds its own start "
        "(about 3-4 s here) and daemons that compete with the solves for the cores. Ray pays off across "
        "machines (`--executor ray --address HOST:PORT`, layoutsearch installed on every node).",
        "",
    ]
    (RESULTS / "sweep_benchmark.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'sweep_benchmark.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
