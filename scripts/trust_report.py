"""Write results/trust.md: the seven observations of the trust issue, each answered with the
engine's output today (what changed, and what is still open).

Regenerate: python scripts/trust_report.py   (after python scripts/validation.py, whose summary it quotes)
"""

from __future__ import annotations

import json
import re
import shlex

from _common import (
    RESULTS,
    data_file,
)  # first: puts this checkout's package ahead of an installed one
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.specs import Layout
from layoutsearch.costs.estimate import estimate


def cli_json(command: str) -> dict:
    result = CliRunner().invoke(app, [*shlex.split(command), "--format", "json"])
    if result.exit_code not in (0, 1):
        raise SystemExit(f"layoutsearch {command}: exit {result.exit_code}: {result.output}")
    return json.loads(result.stdout)


def layout_text(rec: dict) -> str:
    degrees = ",".join(f"{k}={v}" for k, v in rec["degrees"].items() if v > 1) or "1 device"
    axes = "; ".join(f"{n}:" + "*".join(f"{a}{f}" for a, f in p) for n, p in rec["axes"].items())
    return (
        f"{degrees} ({axes}), ZeRO-{rec['zero_stage']}, K={rec['num_microbatches']}, recompute {rec['recompute']}, "
        f"{rec['time_s']['step']:.3f} s, MFU {rec['mfu']:.1%}, peak {rec['memory_bytes']['peak'] / 1e9:.1f} GB"
    )


def winner(command: str) -> str:
    doc = cli_json(command)
    return layout_text(doc["layouts"][0]) if doc["layouts"] else "no layout"


# Meta's Llama 3 405B pre-training at 8,192 tokens on 16,384 H100s (the Llama 3 paper, arXiv 2407.21783, Table 4:
# tp 8, cp 1, pp 16, dp 128, 16 sequences per data-parallel rank, 400 TFLOP/s per GPU, 41% BF16 MFU)
META_TFLOPS_PER_GPU = 400


def meta_405b_lines() -> list[str]:
    """Meta's 405B layout costed under each setting the paper leaves unstated: when the sharded gradients are
    reduced (every microbatch, ZeRO-2, or once a step, ZeRO-1 timing), their dtype and the chunk count."""
    rows = []
    for zero, when in ((2, "every microbatch (ZeRO-2)"), (1, "once a step (ZeRO-1)")):
        for grad_bytes in (4, 2):
            for chunks in (2, 4, 8):
                problem = Problem.build(
                    "llama3-405b", "h100-16384", build_workload(2048, 8192, grad_bytes=grad_bytes)
                )
                e = estimate(
                    problem,
                    Layout(
                        fsdp=128,
                        tp=8,
                        pp=16,
                        zero_stage=zero,
                        virtual_stages=chunks,
                        schedule="interleaved",
                        num_microbatches=16,
                    ),
                )
                tflops = e.mfu * problem.cluster.accelerator.peak_flops_per_s / 1e12
                rows.append(
                    f"| {when} | {'fp32' if grad_bytes == 4 else 'bf16'} | {chunks} | {e.step_time_s:.2f} | "
                    f"{tflops:.0f} | {tflops / META_TFLOPS_PER_GPU - 1:+.0%} | {e.memory_bytes['peak'] / 1e9:.1f} | "
                    f"{'yes' if e.fits else 'no'} |"
                )
    return [
        "Meta's Llama 3 405B layout at 8,192 tokens on 16,384 H100s (the Llama 3 paper, arXiv 2407.21783, Table 4: "
        f"tp 8, pp 16, dp 128, 16 sequences per data-parallel rank, {META_TFLOPS_PER_GPU} TFLOP/s per GPU). The "
        "paper shards the optimizer state and the gradients and keeps the gathered weights from the forward to the "
        "backward, with an interleaved schedule; it does not say when the sharded gradients are reduced, in which "
        "dtype, or how many chunks a stage holds. `estimate --model llama3-405b --cluster h100-16384 --seqs 2048 "
        "--seq-len 8192 --layout fsdp=128,tp=8,pp=16 --zero-stage Z --virtual-stages V --grad-bytes B` under each "
        "(126 layers on 16 stages: the embedding and the loss count as layers, 7/8/7 per stage; model TFLOP/s, "
        "the paper's measure):",
        "",
        "| gradients reduced | dtype | chunks | step s | TFLOP/s per GPU | against 400 | peak GB | fits |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "A pipeline runtime defers the gradient reduction to a step's last microbatch (Megatron's and "
        "torch.distributed.pipelining's no-sync backward; DeepSpeed's pipeline runs ZeRO-0 and 1 only), which is "
        "the ZeRO-1 rows' timing; reducing fp32 gradients every microbatch, the slowest reading, sends 16 times the bytes of one "
        "reduction a step over the scale-out network. The paper's figure lies inside what its unstated settings span, "
        "so this layout is not a validation record (`results/validation.md`).",
    ]


def main() -> None:
    out = [
        "# The trust issue's observations, answered with today's engine",
        "",
        "Regenerate: `python scripts/trust_report.py` (after `python scripts/validation.py "
        "tests/data/runs_dev.yaml`, whose summary it quotes). Each section runs the command it names.",
        "",
    ]

    cmd = "solve --model gpt3-175b --cluster a100-80gb-64 --seqs 1536 --seq-len 2048 --tp-comm-overlap --top 1"
    out += [
        "## 1. TP across scale-out links",
        "",
        "TP pipelined with its GEMMs needs NVLink/ICI (`core/frameworks.py`): a TP group crossing the NICs is "
        "on the critical path whatever the profile, so it loses on cost.",
        "",
        f"- `{cmd}`: {winner(cmd)}",
    ]
    cmd = "solve --model llama3-405b --cluster h100-1024 --tp-comm-overlap --top 1"
    out += [f"- `{cmd}`: {winner(cmd)}", ""]

    cmd = "solve --model llama2-70b --cluster v5p-512 --seqs 2048 --seq-len 4096 --top 1"
    problem = Problem.build("llama2-70b", "v5p-512", build_workload(2048, 4096))
    published = estimate(
        problem, Layout(fsdp=512, num_microbatches=1, recompute="save_dot_except_mlpwi")
    )
    best = cli_json(cmd)["layouts"][0]
    verdict = (
        "**Met**: the winner is at or below the 72% target."
        if best["mfu"] <= 0.72
        else "**Open**: the winner stays above the 72% target."
    )
    out += [
        "## 2. llama2-70b on v5p-512 at 4 sequences per chip",
        "",
        f"- `{cmd}`: {winner(cmd)}",
        f"- MaxText's published setting (fsdp=512, no gradient accumulation, remat save_dot_except_mlpwi): "
        f"{published.step_time_s:.3f} s, MFU {published.mfu:.1%} (published: about 65%).",
        f"- {verdict} v5p's matmul efficiency was an uncalibrated 0.85; it is now fitted on the 16 MaxText v5p "
        "records (0.753) with their TP collectives pipelined with the matmuls, as XLA's continuation fusion runs "
        "them (libtpu's default, and the flags of every MaxText v5p config: the maxtext profile on TPUs). Before, "
        "those records' exposed TP time (tp=4 to 16) stood in for the lower matmul rate, so a TP-free winner "
        "got the higher one (78.9% MFU).",
        "",
    ]

    doc = cli_json("solve --model llama70b --cluster v5p-8192 --top 1")
    rec = doc["layouts"][0]
    t = rec["time_s"]
    out += [
        "## 3. The main job's ZeRO-2 reduce-scatter and shared links",
        "",
        f"- `solve --model llama70b --cluster v5p-8192`: {layout_text(rec)}",
        f"- Exposed: TP {t['exposed_comm/tp']:.4f} s, CP {t['exposed_comm/cp']:.4f} s, ZeRO "
        f"{t['exposed_comm/zero']:.4f} s. The gradient reduce-scatter shares its window with the hidden TP "
        "and CP traffic of the same backward on the links they have in common (`terms.reduction_link_traffic`). "
        "The winner keeps no replicated weights now: with MaxText's TP pipelined with the matmuls on ICI "
        "(continuation fusion) tp=8 inside a z ring of the torus beats cp, and ZeRO-1 shards the optimizer state "
        "over the 1024-way group. TPU collectives cost no compute while hidden (overlap_interference 0: DMA engines).",
        "",
    ]

    cmd = "solve --model llama3-8b --cluster h100-64 --seqs 256 --top 3"
    cps, enum = cli_json(cmd)["layouts"], cli_json(cmd + " --method enumerate")["layouts"]
    out += [
        "## 4. Context parallelism is no longer free, and ties are broken one way",
        "",
        "Each CP ring step waits for its block (the hops' latency is exposed, `terms.cp_per_microbatch`); "
        "step times within 0.5% are ties won by the simplest layout (`search/ranking.py`), by both methods.",
        "",
        f"- `{cmd}` (cpsat): " + " | ".join(layout_text(r) for r in cps),
        "- the same with `--method enumerate`: "
        + (
            "identical"
            if [layout_text(r) for r in cps] == [layout_text(r) for r in enum]
            else "DIFFERENT"
        ),
        "",
    ]

    found = re.search(r"BLOOM sweep: rho = ([-0-9.]+)", (RESULTS / "validation.md").read_text())
    out += [
        "## 5. Ranking: the BLOOM sweep",
        "",
        "See `results/validation.md` (ranking section and leave-one-source-out table)."
        + (f" BLOOM sweep Spearman rho {found.group(1)}." if found else ""),
        ("- **Met**" if found and float(found.group(1)) >= 0.6 else "- **Open**")
        + ": the target is 0.6 (0.34 before hidden collectives were charged the compute they slow, 0.46 before "
        "the BLOOM runs' blocking kernel launches were costed: BigScience set CUDA_LAUNCH_BLOCKING=1 against NCCL "
        "hangs, so each layer pass waits for the host, which small microbatches pay most; mapping rule 18, "
        "`--launch-blocking`). The prequel's rows outside the development set, which nothing was fitted on, "
        "check it (`results/validation.md`, held-out section). The pp=2 layout ran at 76 of 80 GB and "
        "is still predicted 13% too fast (the engine predicts it out of memory).",
        "",
    ]

    out += [
        "## 6. fp8 records and Meta's 405B layout",
        "",
        "fp8 is costed (`--precision fp8`: the fp8 matmul peak per accelerator with its source, fp8-saved "
        "linear inputs, cached fp8 weights, casts, fp8 weight gathers where the framework does them); the "
        "dev set's 16 fp8 records are evaluated (`results/validation.md`).",
        "",
        *meta_405b_lines(),
        "",
    ]

    problem = Problem.build("llama2-70b", "v5p-512", build_workload(2048, 4096))
    rows = []
    for policy in ("minimal", "save_dot_except_mlpwi", "save_qkv_proj", "selective", "full"):
        e = estimate(problem, Layout(fsdp=512, recompute=policy))
        rows.append(
            f"| {policy} | {e.memory_bytes['activations'] / 1e9:.1f} | {e.time_s['compute/recompute']:.2f} "
            f"| {e.memory_bytes['peak'] / 1e9:.1f} | {'yes' if e.fits else 'no'} |"
        )
    out += [
        "## 7. Recompute policies as sets of saved tensors",
        "",
        "llama2-70b on v5p-512, fsdp=512, 4 sequences per chip in one pass (`costs/memory.py POLICY_SAVES`):",
        "",
        "| policy | saved activations GB | recompute s | peak GB | fits |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Gradient and Adam-moment bytes, fused attention and a device memory variant are CLI options "
        "(`--grad-bytes`, `--moment-bytes`, `--fused-attention`, `--hbm-gib`, `--memory-margin-gib`).",
        "",
    ]
    (RESULTS / "trust.md").write_text("\n".join(out))
    print(f"wrote {RESULTS / 'trust.md'}")


if __name__ == "__main__":
    data_file("runs_dev.yaml")  # the repository's reference data is present
    main()
