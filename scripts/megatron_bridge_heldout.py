"""Write tests/data/megatron_bridge_heldout.yaml: Megatron-Bridge's dense Llama tables, outside the development sets.

Megatron-Bridge's performance summary (``docs/performance-summary-archive.md`` of NVIDIA-NeMo/Megatron-Bridge, the
'26.04.01 NeMo Container' section as commit 21d102f set it, 2026-05-27) prints pre-training throughput for Llama 3
70B on 64 GPUs and Llama 3.1 405B on 256 (1,024 H100s) in three precisions on GB300 and GB200 NVL72 racks (FP8, MXFP8
and NVFP4) and in FP8 on H100: tokens/s per GPU with the global batch, microbatch, sequence length and FSDP, TP,
PP, CP and VP degrees of each row. No development record runs a dense model on GB300, in MXFP8 on a dense model or
in fp4: the rows test the Blackwell dense rate, the fp8 recipes and the fp4 model on published runs. Nothing is
fitted on this file; ``scripts/validation.py`` reports it.

What a row does not print, as the performance scripts of that release set it: "FP8" is current scaling (the
25.11 tables of the same configurations print FP8-CS, and the perf recipes' only non-MX fp8 variant is
``fp8_cs``, ``bf16_with_fp8_current_scaling_mixed``); FSDP > 0 is Megatron-FSDP sharding over #GPUs / (TP x PP)
(the page's nomenclature: ZeRO-3 here), FSDP 0 the distributed optimizer (ZeRO-1); sequence parallelism with TP;
no recompute and no CUDA graphs are stated, so neither is assumed (the engine's defaults). The FSDP rows' recipes
offload whole layers' activations to host memory (``cpu_offloading_num_layers``: 20 on GB300, 40 on GB200, in
``src/megatron/bridge/perf_recipes/llama/gb300|gb200/llama3.py`` at 067f987, the recipes' current form; the
26.04.01 release's scripts are taken to do the same), which the engine does not model: those two rows are
skipped with the reason (``layout.activation_offload_layers``, docs/run_record_mapping.md rule 13).

    python scripts/megatron_bridge_heldout.py   # rewrites tests/data/megatron_bridge_heldout.yaml
"""

from __future__ import annotations

from pathlib import Path

import yaml
from _common import llama_model, measured_throughput

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "megatron_bridge_heldout.yaml"
PAGE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md"
COMMIT = "21d102f95ecb"  # "26.04.01_perf_summary (#3997)", 2026-05-27
SOURCE = f"{PAGE} @ {COMMIT}, '26.04.01 NeMo Container' section, Pre-Training Performance"
MODELS = {  # Meta's params.json: layers, hidden, FFN, heads (8 KV heads of 128, vocabulary 128,256, untied)
    "70b": {"num_layers": 80, "d_model": 8192, "d_ff": 28672, "num_heads": 64},
    "405b": {"num_layers": 126, "d_model": 16384, "d_ff": 53248, "num_heads": 128},
}
SYSTEMS = {  # the table's System -> (catalogue part, devices a node: the NVLink domain)
    "DGX-GB300": ("gb300", 72),
    "DGX-GB200": ("gb200", 72),
    "DGX-H100": ("h100", 8),
}
PRECISIONS = {  # the table's Precision -> (precision, fp8_recipe, fp4_recipe)
    "FP8": ("fp8", "current-scaling", None),
    "MXFP8": ("fp8", "mxfp8", None),
    "NVFP4": ("fp4", None, "nvfp4"),
}

# layers whose activations the FSDP recipes offload to host memory (Megatron's cpu_offloading_num_layers)
OFFLOADED_LAYERS = {("70b", "DGX-GB300", "FP8"): 20, ("70b", "DGX-GB200", "FP8"): 40}

# (model, system, GPUs, precision, GBS, MBS, seq, FSDP, TP, PP, CP, VP, tokens/s/GPU), as printed (lines 201-219)
ROWS = [
    ("70b", "DGX-GB300", 64, "FP8", 256, 2, 8192, 64, 1, 1, 1, None, 5248),
    ("70b", "DGX-GB300", 64, "MXFP8", 256, 1, 8192, 0, 1, 4, 1, 5, 4864),
    ("70b", "DGX-GB300", 64, "NVFP4", 256, 1, 8192, 0, 1, 4, 1, 5, 7296),
    ("70b", "DGX-GB200", 64, "FP8", 256, 2, 8192, 64, 1, 1, 1, None, 4224),
    ("70b", "DGX-GB200", 64, "MXFP8", 256, 1, 8192, 0, 2, 4, 1, 5, 3712),
    ("70b", "DGX-GB200", 64, "NVFP4", 256, 1, 8192, 0, 2, 4, 1, 5, 4864),
    ("70b", "DGX-H100", 64, "FP8", 256, 1, 8192, 0, 4, 8, 1, 5, 1664),
    ("405b", "DGX-GB300", 256, "FP8", 1536, 1, 8192, 0, 4, 8, 1, 4, 1024),
    ("405b", "DGX-GB300", 256, "MXFP8", 1536, 1, 8192, 0, 2, 8, 2, 4, 960),
    ("405b", "DGX-GB300", 256, "NVFP4", 1536, 1, 8192, 0, 4, 8, 1, 4, 1440),
    ("405b", "DGX-GB200", 256, "FP8", 1536, 1, 8192, 0, 4, 16, 1, 4, 864),
    ("405b", "DGX-GB200", 256, "MXFP8", 1536, 1, 8192, 0, 4, 16, 1, 8, 800),
    ("405b", "DGX-GB200", 256, "NVFP4", 1536, 1, 8192, 0, 4, 16, 1, 8, 1184),
    ("405b", "DGX-H100", 1024, "FP8", 1536, 1, 8192, 0, 8, 8, 2, 8, 328),
]


CROSS_ENTROPY_NOTE = (
    "Megatron-Bridge's performance overrides set cross_entropy_fusion_impl 'te' for Llama 3, DeepSeek-V3, Qwen3 "
    "and gpt-oss in every release from 25.09 (568b3a3ef, August 2025)"
)


def record(row: tuple) -> dict:
    model, system, n, prec, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tps = row
    part, per_node = SYSTEMS[system]
    precision, fp8_recipe, fp4_recipe = PRECISIONS[prec]
    model_parallel = tp * pp * cp
    data = n // model_parallel  # data-parallel ranks: Megatron-FSDP's shards or the optimizer's
    k = gbs // (data * mbs)
    name = model.upper()
    return {
        "id": f"mbridge-26.04.01-{part}-llama3-{model}-{prec.lower()}-n{n}-"
        f"fsdp{fsdp}tp{tp}pp{pp}cp{cp}vp{vp or 1}-gbs{gbs}mbs{mbs}",
        "source": f"{SOURCE}, LLAMA3{'_70B' if model == '70b' else '.1_405B'} / {system} row ({prec})",
        "trust": "high",
        "model": llama_model(MODELS[model]),
        "workload": {
            "seq_len": seq,
            "global_batch_seqs": gbs,
            "precision": precision,
            "framework": "megatron",
            "cross_entropy": "te",
            **({"fp8_recipe": fp8_recipe} if fp8_recipe else {}),
            **({"fp4_recipe": fp4_recipe} if fp4_recipe else {}),
        },
        "cluster": {
            "accelerator": part,
            "num_devices": n,
            "devices_per_node": per_node,
            "scale_out_gbytes_per_s_per_device": None,
        },
        "layout": {
            "dp": data,
            "fsdp": data if fsdp else 1,
            "zero_stage": 3 if fsdp else 1,
            "tp": tp,
            "sequence_parallel": tp > 1,
            "pp": pp,
            "virtual_stages": vp or 1,
            "cp": cp,
            "microbatch_seqs": mbs,
            "num_microbatches": k,
            "recompute": "none",
            **(
                {"activation_offload_layers": OFFLOADED_LAYERS[model, system, prec]}
                if (model, system, prec) in OFFLOADED_LAYERS
                else {}
            ),
        },
        "measured": measured_throughput(float(tps)),
        "derived": {
            "cross_entropy": CROSS_ENTROPY_NOTE,
            "tokens_per_s_per_device": "the row's Tokens / sec / GPU",
            "layout": f"the row: {n} GPUs, GBS {gbs}, MBS {mbs}, seq {seq}, FSDP {fsdp}, TP{tp} PP{pp} CP{cp} "
            f"VP {vp if vp else 'n/a'}",
            "precision": {
                "FP8": "FP8, current scaling (the 25.11 tables' FP8-CS for these configurations; the perf "
                "recipes' fp8_cs): per tensor",
                "MXFP8": "MXFP8: an e8m0 scale per 32 values",
                "NVFP4": "NVFP4 (bf16_with_nvfp4_mixed): the layers' GEMMs in fp4",
            }[prec],
            "sharding": (
                f"FSDP {fsdp}: Megatron-FSDP over #GPUs / (TP x PP) = {data}, as ZeRO-3"
                if fsdp
                else "FSDP 0: the distributed optimizer over the data-parallel ranks, as ZeRO-1"
            ),
            "num_microbatches": f"global_batch_seqs / (microbatch_seqs x {data} data-parallel ranks)",
            "recompute": "not stated in the row; none taken",
            **(
                {
                    "activation_offload_layers": f"the recipe's cpu_offloading_num_layers "
                    f"{OFFLOADED_LAYERS[model, system, prec]} (perf_recipes/llama/{part}/llama3.py @ 067f987)"
                }
                if (model, system, prec) in OFFLOADED_LAYERS
                else {}
            ),
            "devices_per_node": "NVL72 rack: NVLink domain of 72 GPUs"
            if per_node == 72
            else "DGX H100: NVLink domain of 8",
            "model": f"{name}: Meta's params.json (layers, hidden, FFN, heads; 8 KV heads, vocabulary 128,256)",
        },
    }


def main() -> None:
    records = [record(row) for row in ROWS]
    header = f"# Written by scripts/megatron_bridge_heldout.py from {PAGE} @ {COMMIT}; not in the development sets.\n"
    OUT.write_text(header + yaml.safe_dump(records, sort_keys=False, width=120))
    print(f"wrote {len(records)} records to {OUT}")


if __name__ == "__main__":
    main()
