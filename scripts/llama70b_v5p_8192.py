"""Write results/llama70b-v5p-8192.md: the design notes' choice reproduced, and what the full
objective picks for 1024 and 256 sequences of 4096 tokens, with the winner against the runner-up.

Regenerate: python scripts/llama70b_v5p_8192.py
"""

from __future__ import annotations

import sys

from _common import RESULTS  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Workload
from layoutsearch.costs import params
from layoutsearch.report.render import placement_text
from layoutsearch.search import solve
from layoutsearch.search.explain import compare

MIB = 2**20


def _layout_line(est) -> str:
    lay = est.layout
    degrees = ", ".join(f"{k}={v}" for k, v in lay.degrees.items() if v > 1)
    axes = placement_text(lay.axes)
    return (
        f"{degrees} (axes {axes}), ZeRO-{lay.zero_stage}, {lay.num_microbatches} microbatch(es) of "
        f"{lay.microbatch_seqs(est.workload):g} sequence(s), recompute={lay.recompute}, "
        f"KV replication {params.kv_replication(est.model, lay.tp)}"
    )


def _knobs(est) -> tuple:
    """What a user would call a different layout: degrees and knobs, not only the axis placement."""
    lay = est.layout
    return (
        tuple(lay.degrees.values()),
        lay.zero_stage,
        lay.num_microbatches,
        lay.recompute,
        lay.virtual_stages,
    )


def _breakdown(est) -> list[str]:
    t, m = est.time_s, est.memory_bytes
    return [
        f"- step {t['step']:.4f} s = compute {t['compute']:.4f} + exposed communication {t['exposed_comm']:.4f} "
        f"+ bubble {t['bubble']:.4f} + overhead {t['overhead']:.4f}; MFU {est.mfu:.1%}; "
        f"{est.tokens_per_s:,.0f} tokens/s",
        f"- peak memory {m['peak'] / 1e9:.2f} GB of {m['capacity'] / 1e9:.1f} GB ({est.peak_moment}): state "
        f"{m['state'] / 1e9:.2f}, saved activations {m['activations'] / 1e9:.2f}, temporaries {m['temporary'] / 1e9:.2f}",
    ]


def main() -> int:
    problems = {
        seqs: Problem.build("llama70b", "v5p-8192", Workload(global_batch_seqs=seqs, seq_len=4096))
        for seqs in (1024, 256)
    }
    model = problems[1024].model
    lines = [
        "# llama70b (Llama 3 70B) on v5p-8192 (16x16x32 chips), 4096-token sequences",
        "",
        "Regenerate: `python scripts/llama70b_v5p_8192.py`",
        "",
        "## The design notes' choice (objective `gather-volume`)",
        "",
        "`layoutsearch solve --model llama70b --cluster v5p-8192 --seqs N --only fsdp,tp "
        "--choices tp=8,16,32,64 --objective gather-volume` minimises V(t) = 2DF/t + 2 B_tok D t / N "
        "subject to whole sequences per data unit and memory:",
        "",
        "| sequences | chosen tp | fsdp | KV replication | V_W + V_X (MiB) | status |",
        "|---|---|---|---|---|---|",
    ]
    for seqs in (1024, 256):
        r = solve(
            problems[seqs],
            SearchRequest(
                options=SearchOptions(only=("fsdp", "tp"), choices={"tp": (8, 16, 32, 64)}),
                objective="gather-volume",
                top_k=1,
            ),
        )
        lay = r.layouts[0].layout
        lines.append(
            f"| {seqs} | {lay.tp} | {lay.fsdp} | {params.kv_replication(model, lay.tp)} | "
            f"{r.objective_value / MIB:.0f} | {r.status} |"
        )
    lines += [
        "",
        "tp=16 at 256 sequences would leave 512 data units for 256 sequences, so it is not a candidate.",
        "",
        "## The full objective (step time)",
        "",
    ]
    for seqs in (1024, 256):
        r = solve(problems[seqs], SearchRequest(top_k=12))
        win = r.layouts[0]
        run = next((e for e in r.layouts[1:] if _knobs(e) != _knobs(win)), r.layouts[1])
        lines += [
            f"### {seqs} sequences",
            "",
            f"Solver: {r.status}, objective {r.objective_value:.4f} s, bound {r.bound:.4f} s, "
            f"{r.num_candidates:,} candidates, {r.wall_s:.2f} s.",
            "",
            f"**Winner**: {_layout_line(win)}",
            *_breakdown(win),
            "",
            f"**Runner-up** (the best layout that differs in more than its axis placement): {_layout_line(run)}",
            *_breakdown(run),
            "",
            "Where they differ (positive: the runner-up pays more):",
            "",
            "| term | winner | runner-up | difference |",
            "|---|---|---|---|",
        ]
        for row in compare(win, run):
            fmt = (
                (lambda x: f"{x:.4f} s") if row["unit"] == "s" else (lambda x: f"{x / 1e9:.3f} GB")
            )
            lines.append(
                f"| {row['term']} | {fmt(row['winner'])} | {fmt(row['other'])} | {fmt(row['difference'])} |"
            )
        if not compare(win, run):
            lines.append(
                "| (none: the two cost the same in every term; the tie-break ranks them) | | | |"
            )
        lines.append("")
        nearest_notes = solve(
            problems[seqs], SearchRequest(options=SearchOptions(only=("fsdp", "tp")), top_k=1)
        )
        if nearest_notes.layouts:
            e = nearest_notes.layouts[0]
            lines += [
                f"Restricted to FSDP x TP only (the notes' family), the best is {_layout_line(e)}: "
                f"step {e.step_time_s:.4f} s, MFU {e.mfu:.1%} "
                f"({e.step_time_s / win.step_time_s - 1:+.1%} against the winner).",
                "",
            ]
    (RESULTS / "llama70b-v5p-8192.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'llama70b-v5p-8192.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
