"""`layoutsearch sweep`: the best layout for every (model, cluster, batch, sequence length) point.

Exit codes: 0 done (infeasible points are results, recorded with their reason), 1 no point has
a layout, 2 bad input (one line on stderr), 130 interrupted (rerun to resume).
"""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import (
    TimeLimitOpt,
    WorkloadArgs,
    reports_errors,
    takes_problem_file,
    takes_workload_options,
)
from layoutsearch.cli.planning import PriceOpt, TokensOpt
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import choices
from layoutsearch.sweep import expand_points, journal_path, print_summary, run_sweep

Executor = choices(
    "Executor", ("local", "ray"), "Where the sweep's points run: a local process pool or Ray."
)


@reports_errors
@takes_problem_file(inline=False, lists=True)
@takes_workload_options
def sweep(
    *,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Model ids, comma-separated: llama70b,llama3-405b"),
    ] = None,
    cluster: Annotated[
        list[str] | None,
        typer.Option(
            "--cluster",
            "-c",
            help="Clusters, comma-separated and repeatable; ranges: 'v5p-{256..8192:x2}' "
            "(multiply) or 'h100-{64..512:+64}' (add); cluster YAML files",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="sweep.parquet or sweep.csv")],
    seqs: Annotated[
        str, typer.Option("--seqs", help="Global batches in sequences: 256,512 or {256..2048:x2}")
    ] = "1024",
    seq_len: Annotated[
        str, typer.Option("--seq-len", help="Tokens per sequence (comma list allowed)")
    ] = "4096",
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, max=1024, help="Parallel solves (default: CPU count)"),
    ] = None,
    executor: Annotated[
        Executor, typer.Option("--executor", help="local (process pool) or ray")
    ] = Executor.local,
    address: Annotated[
        str | None,
        typer.Option("--address", help="Ray cluster address (default: start a local Ray)"),
    ] = None,
    time_limit: TimeLimitOpt = 30.0,
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Forget finished points (the journal) and solve all again"),
    ] = False,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Solve ERROR and UNKNOWN points again")
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr")
    ] = True,
    tokens: TokensOpt = None,
    price_per_device_hour: PriceOpt = None,
    workload_options: WorkloadArgs = WorkloadArgs(),
) -> None:
    """Best layout for every (model, cluster, batch) point; resumable, one row per point."""
    if not model or not cluster:
        missing = " and ".join(
            f"--{name}" for name, value in (("model", model), ("cluster", cluster)) if not value
        )
        raise InvalidArgumentError(f"sweep needs {missing} (or the key in a --problem file)")
    options = workload_options
    points = expand_points(
        model, cluster, seqs, seq_len, tokens, price_per_device_hour, options.workload_options()
    )
    try:
        summary = run_sweep(
            points,
            output,
            jobs=jobs,
            executor=executor.value,
            address=address,
            time_limit_s=time_limit,
            progress=progress,
            fresh=fresh,
            retry_failed=retry_failed,
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


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
