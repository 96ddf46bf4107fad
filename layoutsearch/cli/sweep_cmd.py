"""`layoutsearch sweep` and `layoutsearch plot`: added to the main typer app by ``register(app)``.

Exit codes of `sweep`: 0 done (infeasible points are results, recorded with their reason),
1 no point has a layout, 2 bad input (one line on stderr), 130 interrupted (rerun to resume).
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer


class Executor(str, Enum):
    local = "local"
    ray = "ray"


def register(app: typer.Typer) -> None:
    """Add the `sweep` and `plot` commands to ``app``."""
    from layoutsearch.cli import reports_errors

    @app.command("sweep")
    @reports_errors
    def sweep_cmd(
        model: Annotated[str, typer.Option("--model", "-m", help="Model ids, comma-separated: llama70b,llama3-405b")],
        cluster: Annotated[list[str], typer.Option(
            "--cluster", "-c", help="Clusters, comma-separated and repeatable; ranges: 'v5p-{256..8192:x2}' "
                                    "(multiply) or 'h100-{64..512:+64}' (add)")],
        output: Annotated[str, typer.Option("--output", "-o", help="sweep.parquet or sweep.csv")],
        seqs: Annotated[str, typer.Option("--seqs", help="Global batches in sequences: 256,512 or {256..2048:x2}")] = "1024",
        seq_len: Annotated[str, typer.Option("--seq-len", help="Tokens per sequence (comma list allowed)")] = "4096",
        jobs: Annotated[Optional[int], typer.Option("--jobs", "-j", min=1, help="Parallel solves (default: CPU count)")] = None,
        executor: Annotated[Executor, typer.Option("--executor", help="local (process pool) or ray")] = Executor.local,
        address: Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (default: start a local Ray)")] = None,
        time_limit: Annotated[float, typer.Option("--time-limit", min=0.1, help="CP-SAT time limit per point, seconds")] = 30.0,
        fresh: Annotated[bool, typer.Option("--fresh", help="Forget finished points (the journal) and solve all again")] = False,
        retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Solve ERROR and UNKNOWN points again")] = False,
        progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress bar on stderr")] = True,
    ) -> None:
        """Best layout for every (model, cluster, batch) point; resumable, one row per point."""
        from layoutsearch.sweep import expand_points, journal_path, print_summary, run_sweep

        points = expand_points(model, cluster, seqs, seq_len)
        try:
            summary = run_sweep(points, output, jobs=jobs, executor=executor.value, address=address,
                                time_limit_s=time_limit, progress=progress, fresh=fresh, retry_failed=retry_failed)
        except KeyboardInterrupt:
            typer.echo(f"interrupted: finished points are kept in {output} and {journal_path(output)}; "
                       "rerun the same command to resume", err=True)
            raise typer.Exit(130) from None
        print_summary(summary.rows)
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(summary.by_status.items()))
        typer.echo(f"wrote {summary.output}: {summary.total} points ({statuses}); {summary.solved} solved now, "
                   f"{summary.skipped} already done, {summary.wall_s:.1f} s", err=True)
        if not summary.with_layout:
            raise typer.Exit(1)

    @app.command("plot")
    @reports_errors
    def plot_cmd(
        sweep_file: Annotated[str, typer.Argument(help="A sweep file (.parquet or .csv)")],
        output: Annotated[str, typer.Option("--output", "-o", help="PNG to write")] = "sweep.png",
    ) -> None:
        """MFU and step time against device count, and the chosen degrees, from a sweep file."""
        from layoutsearch.report.plot import plot_sweep

        typer.echo(f"wrote {plot_sweep(sweep_file, output)}", err=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m layoutsearch.cli.sweep_cmd sweep ...`: the main CLI, with these commands registered once."""
    from layoutsearch import cli

    if not any(command.name == "sweep" for command in cli.app.registered_commands):
        register(cli.app)
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
