"""Write the committed sweeps and results/sweeps.md.

- results/sweep_llama70b_v5p.{parquet,csv,png}: llama70b on v5p from 256 to 8960 chips,
  256 to 2048 sequences of 4096 tokens.
- results/sweep_llama3-405b_h100.{parquet,csv,png}: llama3-405b on H100 from 1024 to 16384 GPUs,
  1024 to 4096 sequences of 4096 tokens.

Regenerate: python scripts/sweeps.py
Every point is solved again (the journal is started fresh and removed at the end); points
without a layout stay in the tables with their status and reason.
"""

from __future__ import annotations

import os
import platform
import sys
import time

from _common import RESULTS  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.problem import Problem, version
from layoutsearch.core.specs import Workload
from layoutsearch.search.ranking import risk_band
from layoutsearch.sweep import expand_points, journal_path, run_sweep, summary_rows, write_table
from layoutsearch.sweep.plot import plot_sweep

SWEEPS = [
    {
        "name": "llama70b_v5p",
        "model": "llama70b",
        "clusters": ["v5p-{256..8192:x2}", "v5p-8960"],
        "seqs": "256,512,1024,2048",
        "seq_len": "4096",
        "title": "llama70b on TPU v5p, 256 to 8960 chips",
    },
    {
        "name": "llama3-405b_h100",
        "model": "llama3-405b",
        "clusters": ["h100-{1024..16384:x2}"],
        "seqs": "1024,2048,4096",
        "seq_len": "4096",
        "title": "llama3-405b on H100, 1024 to 16384 GPUs",
    },
]


def command(sweep: dict) -> str:
    clusters = " ".join(f"-c '{c}'" for c in sweep["clusters"])
    return (
        f"layoutsearch sweep -m {sweep['model']} {clusters} --seqs {sweep['seqs']} --seq-len {sweep['seq_len']} "
        f"-o results/sweep_{sweep['name']}.parquet"
    )


def markdown_table(rows: list[dict]) -> list[str]:
    records = summary_rows(rows)
    keys = list(records[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for rec in records:
        rec["devices"] = "-" if rec["devices"] is None else f"{rec['devices']:,}"
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in rec.values()) + " |")
    return lines


def observations(rows: list[dict], band: float) -> list[str]:
    """Facts read off the rows: best MFU, where tensor parallelism first appears, what has no layout (``band``:
    the sweep's risk band, ``search.ranking.risk_band``)."""
    ok = [r for r in rows if r.get("dp") is not None]
    out = []
    if ok:
        best = max(ok, key=lambda r: r["mfu"])
        out.append(
            f"- Highest MFU: {best['mfu']:.1%} ({best['cluster']}, {best['global_batch_seqs']} seqs)."
        )
        worst = min(ok, key=lambda r: r["mfu"])
        out.append(
            f"- Lowest MFU with a layout: {worst['mfu']:.1%} ({worst['cluster']}, "
            f"{worst['global_batch_seqs']} seqs): fewer sequences per device leave less compute "
            "to hide communication behind."
        )
        for seqs in sorted({r["global_batch_seqs"] for r in ok}):
            with_tp = [r for r in ok if r["global_batch_seqs"] == seqs and r["tp"] > 1]
            first = min(with_tp, key=lambda r: r["num_devices"]) if with_tp else None
            out.append(
                f"- {seqs} seqs: "
                + (
                    f"tensor parallelism first chosen at {first['num_devices']:,} devices (tp={first['tp']})."
                    if first
                    else "no tensor parallelism chosen."
                )
            )
        risky = [r for r in ok if r.get("risks") not in (None, "none")]
        for risks in dict.fromkeys(r["risks"] for r in risky):
            where = [r for r in risky if r["risks"] == risks]
            out.append(
                f"- Winners carrying {risks} (every layout within {band:.0%} of their step time carries "
                f"these or heavier risks): "
                + ", ".join(f"{r['cluster']} at {r['global_batch_seqs']} seqs" for r in where)
                + "."
            )
        if not risky:
            out.append("- No winner carries a risk of the ranking's risk order.")
    failed = [r for r in rows if r.get("dp") is None]
    for cluster in dict.fromkeys(r["cluster"] for r in failed):
        group = [r for r in failed if r["cluster"] == cluster]
        seqs = ", ".join(str(r["global_batch_seqs"]) for r in group)
        out.append(
            f"- No layout on {cluster} ({seqs} seqs; {group[0]['status']}): {group[0]['reason']}"
            + (" (likewise for the other batch sizes)" if len(group) > 1 else "")
            + _odd_devices(group[0])
        )
    return out


def _odd_devices(row: dict) -> str:
    """Why a device count defeats power-of-two batches: its odd factor must go to tp, pp or cp."""
    n, seqs = row.get("num_devices"), row["global_batch_seqs"]
    if not n or "whole sequences" not in (row.get("reason") or ""):
        return ""
    odd = n
    while odd % 2 == 0:
        odd //= 2
    if odd == 1 or seqs & (seqs - 1):
        return ""
    return (
        f". {n:,} = {n // odd} x {odd}: dp x fsdp must divide a power-of-two batch, so tp x pp x cp "
        f"would have to be a multiple of {odd}, which the model's heads, layers and sequence length do not allow."
    )


def _problem(point) -> Problem:
    """A sweep point's problem (its model and part: what its risk band depends on)."""
    workload = Workload(global_batch_seqs=point.global_batch_seqs, seq_len=point.seq_len)
    return Problem.build(point.model, point.cluster, workload)


def main() -> int:
    lines = [
        "# Sweeps",
        "",
        f"Regenerate all: `python scripts/sweeps.py` (machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, layoutsearch {version()}).",
        "",
        "Each point is the best layout found by `solve` (top 1, step-time objective, CP-SAT, 30 s limit); "
        "`status` OPTIMAL means proven optimal. Points with no layout stay in the tables with their reason. "
        "Columns of the Parquet/CSV files: see `layoutsearch.sweep.COLUMNS` (inputs, solver status, objective, "
        "bound, degrees, ZeRO stage, microbatches, recompute, axes as JSON, peak/capacity bytes, time split, "
        "MFU, tokens/s, the risks the layout carries).",
        "",
    ]
    for sweep in SWEEPS:
        parquet = RESULTS / f"sweep_{sweep['name']}.parquet"
        points = expand_points(sweep["model"], sweep["clusters"], sweep["seqs"], sweep["seq_len"])
        t0 = time.perf_counter()
        summary = run_sweep(points, parquet, fresh=True, progress=sys.stderr.isatty())
        wall = time.perf_counter() - t0
        os.unlink(journal_path(parquet))  # the journal is for resuming, not a result
        write_table(summary.rows, str(parquet.with_suffix(".csv")))
        png = plot_sweep(parquet, parquet.with_suffix(".png"))
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(summary.by_status.items()))
        print(f"{sweep['name']}: {len(points)} points ({statuses}) in {wall:.1f} s", flush=True)
        lines += [
            f"## {sweep['title']}",
            "",
            f"{len(points)} points ({statuses}), {wall:.1f} s wall on this machine.",
            "",
            "```sh",
            command(sweep),
            f"layoutsearch plot results/sweep_{sweep['name']}.parquet -o results/sweep_{sweep['name']}.png",
            "```",
            "",
            f"Files: [sweep_{sweep['name']}.parquet](sweep_{sweep['name']}.parquet), "
            f"[sweep_{sweep['name']}.csv](sweep_{sweep['name']}.csv).",
            "",
            f"![{sweep['title']}]({os.path.basename(png)})",
            "",
            *markdown_table(summary.rows),
            "",
            *observations(summary.rows, risk_band(_problem(points[0]))),
            "",
        ]
    (RESULTS / "sweeps.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'sweeps.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
