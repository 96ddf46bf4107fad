"""`layoutsearch sweep`: the best layout for every (model, cluster, batch, sequence length) point.

Exit codes: 0 done (infeasible points are results, recorded with their reason), 1 no point has
a layout, 2 bad input (one line on stderr), 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import sys

import typer

from layoutsearch.cli.options import ALL, CommandSpec, Given, build_command, register_command
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import (
    FAILURE_OPTIONS,
    PLAN_FIELDS,
    PlanOptions,
    SearchOptions,
    SweepOptions,
    WorkloadOptions,
)

SPEC = CommandSpec(
    "sweep",
    (
        (
            SweepOptions,
            ("model", "cluster", "output", "seqs", "seq_len", "jobs", "executor", "address"),
        ),
        (SearchOptions, ("time_limit", "objective")),
        (SweepOptions, ("fresh", "retry_failed", "progress", "max_site_power_mw")),
        (PlanOptions, PLAN_FIELDS["sweep"]),
        (WorkloadOptions, ALL),
    ),
    inline=False,
    lists=True,
)


def sweep(given: Given) -> None:
    """Best layout for every (model, cluster, batch) point; resumable, one row per point."""
    from layoutsearch.engine import check_plan
    from layoutsearch.sweep import expand_points, journal_path, print_summary, run_sweep

    opts, plan, workload, search = given.sweep, given.plan, given.workload, given.search
    assert opts and plan and workload and search, "SPEC declares these groups"
    if not opts.model or not opts.cluster:
        missing = " and ".join(
            f"--{name}"
            for name, value in (("model", opts.model), ("cluster", opts.cluster))
            if not value
        )
        raise InvalidArgumentError(f"sweep needs {missing} (or the key in a --problem file)")
    check_plan(plan)
    points = expand_points(
        opts.model,
        opts.cluster,
        opts.seqs,
        opts.seq_len,
        plan.tokens,
        plan.price_per_device_hour,
        workload.values(),
        plan.price_per_kwh,
        opts.max_site_power_mw,
        search.objective.value,
        {name: getattr(plan, name) for name in FAILURE_OPTIONS},
    )
    output = opts.output
    try:
        summary = run_sweep(
            points,
            output,
            jobs=opts.jobs,
            executor=opts.executor.value,
            address=opts.address,
            time_limit_s=search.time_limit,
            progress=opts.progress and sys.stderr.isatty(),  # quiet in a pipe or a file
            fresh=opts.fresh,
            retry_failed=opts.retry_failed,
        )
    except KeyboardInterrupt:
        typer.echo(
            f"interrupted: finished points are kept in {output} and {journal_path(output)}; "
            "rerun the same command to resume",
            err=True,
        )
        raise typer.Exit(130) from None
    if summary.dropped:
        typer.echo(
            f"{journal_path(output)}: dropped {summary.dropped} line(s) that are not rows of a sweep; "
            f"their points were solved again",
            err=True,
        )
    print_summary(summary.rows)
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(summary.by_status.items()))
    typer.echo(
        f"wrote {summary.output}: {summary.total} points ({statuses}); {summary.solved} solved now, "
        f"{summary.skipped} already done, {summary.wall_s:.1f} s",
        err=True,
    )
    if not summary.with_layout:
        raise typer.Exit(1)


def command():
    return build_command(SPEC, sweep, sweep.__doc__)


def register(app: typer.Typer) -> None:
    register_command(app, "sweep", command)
