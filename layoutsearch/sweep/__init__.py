"""Sweeps: many (model, cluster, batch, sequence length) points, each solved for its best layout.

Durability, kill -9 included: only the parent process writes. It appends one JSON line per
finished point to a journal beside the output (``sweep.parquet`` -> ``sweep.parquet.jsonl``),
flushed and fsynced before the point counts as done, then rebuilds the Parquet or CSV file
from the journal in a temporary file renamed into place (``os.replace``), so the table is
always whole. A rerun with the same output repairs a torn last journal line, skips the points
the journal holds and rewrites the table: no point is lost or duplicated. A point that fails
(nothing fits, time limit without a layout, a cluster size that does not exist) is a row with
its ``status`` and ``reason``; it never stops the sweep.
"""

from layoutsearch.sweep.points import (  # noqa: F401
    EXECUTORS,
    MAX_RANGE_VALUES,
    MAX_SWEEP_POINTS,
    RETRYABLE,
    Point,
    expand,
    expand_points,
)
from layoutsearch.sweep.run import SweepSummary, layout_text, print_summary, run_sweep, summary_rows  # noqa: F401
from layoutsearch.sweep.solving import error_row, solve_point  # noqa: F401
from layoutsearch.sweep.table import (  # noqa: F401
    COLUMN_NAMES,
    COLUMNS,
    Journal,
    check_output,
    check_row,
    journal_path,
    read_table,
    write_table,
)
