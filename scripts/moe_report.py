"""Write results/moe.md: mixture-of-experts plans, the engine's winner against the published
layout, term by term (DeepSeek-V3 on 2048 H100 and on 2048 H800 as DeepSeek ran it; Qwen3-235B
on 256 H100 as the Megatron-Core MoE model zoo runs it).

Regenerate: python scripts/moe_report.py
"""

from __future__ import annotations

import sys
import time

from _common import RESULTS  # first: puts this checkout's package ahead of an installed one

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.problem import Problem, SearchRequest
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs import params
from layoutsearch.costs.estimate import estimate
from layoutsearch.report.render import placement_text
from layoutsearch.search import solve

# DeepSeek-V3 report section 3.2: pp 16 with DualPipe, ep 64, ZeRO-1, 120 microbatches of one sequence,
# RMSNorm and MLA up-projections recomputed
DEEPSEEK_V3_DEGREES = {"fsdp": 128, "pp": 16, "ep": 64, "zero_stage": 1, "num_microbatches": 120}
DEEPSEEK_V3_PUBLISHED = Layout(
    **DEEPSEEK_V3_DEGREES, recompute="norm_mla_up_proj", schedule="dualpipe"
)

CASES = [
    # (title, model, cluster, seqs, seq_len, published layout, where it is published)
    (
        "DeepSeek-V3 on 2048 H100",
        "deepseek-v3",
        "h100-2048",
        15360,
        4096,
        DEEPSEEK_V3_PUBLISHED,
        "DeepSeek-V3 technical report section 3.2: 16-way PP with DualPipe, 64-way EP over 8 nodes, "
        "ZeRO-1 DP, no TP, RMSNorm and MLA up-projections recomputed, batch 15360 x 4096 (run on H800 "
        "in fp8; both columns here in the default bf16 workload)",
    ),
    (
        "DeepSeek-V3 on 2048 H800 (DeepSeek's cluster: NVLink 200 GB/s)",
        "deepseek-v3",
        "h800-2048",
        15360,
        4096,
        DEEPSEEK_V3_PUBLISHED,
        "as above, on the H800 DeepSeek trained on",
    ),
    (
        "Qwen3-235B-A22B on 256 H100",
        "qwen3-235b-a22b",
        "h100-256",
        2048,
        4096,
        Layout(
            fsdp=16,
            tp=2,
            pp=8,
            ep=32,
            virtual_stages=4,
            zero_stage=1,
            num_microbatches=128,
            recompute="selective",
            schedule="interleaved",
        ),
        "Megatron-MoE-ModelZoo best_practice/qwen3 H100 table: TP2 PP8 VPP4 EP32, MBS 1, GBS 2048, DeepEP, "
        "1,663-2,157 tokens/s per GPU (tests/data/runs_moe_dev.yaml)",
    ),
]
TERMS = (
    "compute/matmul",
    "compute/attention",
    "compute/recompute",
    "compute/elementwise",
    "compute/logits",
    "compute/moe_fixed",
    "exposed_comm/tp",
    "exposed_comm/cp",
    "exposed_comm/ep",
    "exposed_comm/fsdp",
    "exposed_comm/zero",
    "exposed_comm/dp",
    "exposed_comm/pp",
    "exposed_comm/interference",
    "bubble",
    "overhead/microbatch",
    "step",
)


def _degrees(lay: Layout) -> str:
    return ", ".join(f"{k}={v}" for k, v in lay.all_degrees.items() if v > 1)


def _describe(est) -> str:
    lay = est.layout
    axes = placement_text(lay.axes)
    return (
        f"{_degrees(lay)} (axes {axes}), ZeRO-{lay.zero_stage}, {lay.num_microbatches} microbatches of "
        f"{lay.microbatch_seqs(est.workload):g} sequence(s), v={lay.virtual_stages}, recompute={lay.recompute}"
    )


def _case(title, model, cluster, seqs, seq_len, published, where) -> list[str]:
    problem = Problem.build(model, cluster, Workload(global_batch_seqs=seqs, seq_len=seq_len))
    start = time.perf_counter()
    result = solve(problem, SearchRequest(top_k=3))
    wall = time.perf_counter() - start
    best = result.layouts[0]
    pub = estimate(problem, published, strict=False)
    counts = params.param_counts(problem.model)
    lines = [
        f"## {title}",
        "",
        f"`layoutsearch solve --model {model} --cluster {cluster} --seqs {seqs} --seq-len {seq_len}`: "
        f"{result.status} in {wall:.1f} s over {result.num_candidates:,} candidates; {counts['total'] / 1e9:.1f} B "
        f"parameters, {counts['active'] / 1e9:.1f} B active; framework profile {problem.workload.framework}.",
        "",
        f"- winner: {_describe(best)}",
        f"- published: {_describe(pub)} ({where})",
        "",
        "| term (s per step) | winner | published |",
        "|---|---|---|",
    ]
    for term in TERMS:
        a, b = best.time_s.get(term, 0.0), pub.time_s.get(term, 0.0)
        if a or b:
            lines.append(f"| {term} | {a:.3f} | {b:.3f} |")
    for name, fn in (
        ("tokens/s per GPU", lambda e: f"{e.tokens_per_s / problem.num_devices:,.0f}"),
        ("MFU (model FLOPs, active experts)", lambda e: f"{e.mfu:.1%}"),
        (
            "peak memory GB (capacity)",
            lambda e: (
                f"{e.memory_bytes['peak'] / 1e9:.1f} ({e.memory_bytes['capacity'] / 1e9:.1f})"
            ),
        ),
        ("fits", lambda e: "yes" if e.fits else "no"),
    ):
        lines.append(f"| {name} | {fn(best)} | {fn(pub)} |")
    lines += [
        "",
        "Runners-up: "
        + "; ".join(
            f"{_degrees(e.layout)} ZeRO-{e.layout.zero_stage} K={e.layout.num_microbatches} "
            + (f"{e.layout.schedule} v={e.layout.virtual_stages} " if e.layout.pp > 1 else "")
            + f"{e.layout.recompute}: {e.step_time_s:.2f} s"
            for e in result.layouts[1:]
        ),
        "",
    ]
    return lines


def main() -> int:
    lines = [
        "# Mixture-of-experts plans: the engine's winner against the published layout",
        "",
        "Regenerate: `python scripts/moe_report.py` (from the repository root).",
        "",
        'The MoE cost model (docs/cost_model.md "Mixture of experts", `costs/terms.py`): routed experts as grouped GEMMs at the '
        "rows each local expert gets (m k ep etp / (tp E)) times the fitted `grouped_matmul_efficiency`; the MoE "
        "layers' host time: each layer's kernel launches (per layer and per local expert) at "
        f"{load_accelerator('h100').moe_launch_latency_s * 1e6:g} us each, shown as far as they outlast the GPU "
        f"work beside them, plus the dispatcher's {load_accelerator('h100').moe_host_sync_s * 1e6:g} us sync, one "
        "value for the GPUs, fitted on `tests/data/runs_moe_dev.yaml` (scoped CUDA graphs remove the attention's "
        "and router's launches, a full-iteration graph "
        f"{load_accelerator('h100').moe_overhead_full_graph_share:g} of all; the plans below assume none); the "
        "dispatch and combine AllToAlls (4 per "
        "MoE layer and microbatch) on the links the ep group spans, exposed unless the framework profile overlaps "
        "them; expert weights and optimizer state divided by ep x etp and by the expert ZeRO group; MLA's latent "
        "projections; the MTP module on the last stage. The validation of these terms against 71 published MoE runs "
        "is `results/validation_moe.md`.",
        "",
    ]
    for case in CASES:
        lines += _case(*case)
    (RESULTS / "moe.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'moe.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
