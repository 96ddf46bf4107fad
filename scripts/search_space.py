"""Write results/search_space.md: what each new choice of the search space changes in the winner.

Regenerate: python scripts/search_space.py [--out results/search_space.md]

For the three problems of the search-space issue (llama3-405b on h100-16384, deepseek-v3 on
h800-2048, Llama 3 70B on gb200-576: NVL72 racks) the baseline solve searches what the engine
searched before the choices existed (1F1B and interleaved schedules, ring context parallelism, no
model-state offload, the engine's pipeline splits, the step-time objective); each row then opens one
choice (and the last row the four of the search space together) and reports the winner and its step
time against the baseline's. fp4 training is a workload choice, not a searched one: its row solves the
baseline in fp4 where the part has fp4 tensor cores (the fp4 prediction warns: it is uncalibrated). The objectives rank by their own value (the step time is shown). Every
solve is the API's ``solve``, which is the command line's (``layoutsearch solve ... --schedules ...
--cp-flavours ... --offload ... --pipeline-splits ...``).
"""

from __future__ import annotations

import argparse
import subprocess
import time

from _common import REPO, RESULTS, table_head

import layoutsearch as ls
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.stages import SPLIT_NAMES

PROBLEMS = (
    ("llama3-405b", "h100-16384", {}),
    ("deepseek-v3", "h800-2048", {"seqs": 15360, "precision": "fp8"}),
    ("llama70b", "gb200-576", {}),
)
BASELINE = {"schedules": "1f1b,interleaved", "cp_flavours": "ring", "offload": "none"}
ALL_SCHEDULES = "1f1b,interleaved,zb-h1,zb-v,dualpipe,dualpipev"
ALL_SPLITS = ",".join(SPLIT_NAMES.values())
# every choice at once outgrows the default 30 s on these problems (the solve s column says how far)
TIME_LIMIT_S = 600.0
CHOICES = (
    ("baseline", {}),
    ("zero-bubble and DualPipe schedules", {"schedules": ALL_SCHEDULES}),
    ("context-parallel flavours", {"cp_flavours": "ring,allgather,a2a,a2a+ring"}),
    ("optimizer and parameter offload", {"offload": "none,optimizer,params"}),
    ("whole pipeline layouts (the balanced split)", {"pipeline_splits": ALL_SPLITS}),
    ("objective time-to-train", {"objective": "time-to-train"}),
    ("objective energy", {"objective": "energy"}),
    ("fp4 training (NVFP4, Blackwell parts)", {"precision": "fp4"}),
)
EVERYTHING = {
    "schedules": ALL_SCHEDULES,
    "cp_flavours": "ring,allgather,a2a,a2a+ring",
    "offload": "none,optimizer,params",
    "pipeline_splits": ALL_SPLITS,
}


def winner(model: str, cluster: str, extra: dict, choice: dict) -> tuple[dict, float, dict]:
    """The winner's record, the solve's wall time and its document (``fewer_devices`` where solve
    compared a smaller cluster: engine.fewer_devices; ``solver.not_searched``: the choices asked for
    that no layout could take, offload on a part whose hardware file gives no host memory)."""
    start = time.perf_counter()
    run = ls.solve(
        model=model,
        cluster=cluster,
        top=1,
        time_limit=TIME_LIMIT_S,
        **{**extra, **BASELINE, **choice},
    )
    return run.document["layouts"][0], time.perf_counter() - start, run.document


def describe(rec: dict) -> str:
    degrees = " ".join(f"{k}{v}" for k, v in rec["degrees"].items() if v > 1) or "1 device"
    parts = [degrees, f"ZeRO-{rec['zero_stage']}", f"K{rec['num_microbatches']}"]
    parts.append(rec["schedule"] if rec["degrees"]["pp"] > 1 else "")
    split = (rec.get("stage_layers") or {}).get("split")
    parts.append(f"{split} split" if rec["degrees"]["pp"] > 1 and split == "balanced" else "")
    parts.append(rec.get("cp_flavour", "") if rec["degrees"]["cp"] > 1 else "")
    parts.append(f"offload {rec['offload']}" if rec.get("offload") else "")
    parts.append(rec["recompute"] if rec["recompute"] != "none" else "")
    return ", ".join(p for p in parts if p)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "search_space.md"))
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    lines = [
        "# What the new search-space choices change",
        "",
        f"- code: git {commit}",
        "- regenerate: `python scripts/search_space.py` (from the repository root)",
        "- baseline: `--schedules 1f1b,interleaved --cp-flavours ring --offload none`, the engine's "
        "pipeline splits and the step-time objective (the space before these choices); each row "
        "opens one choice, the last the four of the search space together; the fp4 row runs the baseline in "
        "fp4 where the part has fp4 tensor cores, against the problem's precision (bf16; deepseek-v3 fp8)",
        "",
    ]
    for model, cluster, extra in PROBLEMS:
        lines += [f"## {model} on {cluster}", ""]
        lines += table_head("choice", "winner", "step s", "vs baseline", "solve s")
        base, fewer = None, None
        for name, choice in (*CHOICES, ("all four choices", EVERYTHING)):
            try:
                rec, wall, doc = winner(model, cluster, extra, choice)
            except InvalidArgumentError as exc:  # fp4 on a part without fp4 tensor cores
                lines.append(f"| {name} | refused: {str(exc).split(';')[0]} | - | - | - |")
                continue
            step = rec["time_s"]["step"]
            base = step if base is None else base
            fewer = doc.get("fewer_devices") if name == "baseline" else fewer
            change = "-" if name == "baseline" else f"{step / base - 1:+.1%}"
            said = "".join(f"; {m}" for m in doc["solver"]["not_searched"])
            lines.append(f"| {name} | {describe(rec)}{said} | {step:.3f} | {change} | {wall:.1f} |")
        lines.append("")
        if fewer:  # the baseline's comparison (solve's warning): the batch cannot spread the count
            sub = fewer["layout"]
            lines += [
                f"On fewer devices (solve's `fewer_devices`, docs/planning.md): with the baseline's "
                f"choices, {fewer['num_devices']:,} of these devices ({fewer['cluster']}) run "
                f"{describe(sub)} in {sub['time_s']['step']:.3f} s a step, "
                f"{fewer['step_time_saving']:.1%} less than the baseline here: the global batch does "
                f"not divide by the odd factor of the device count, so the layouts above carry it "
                f"in tp, pp or cp.",
                "",
            ]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
