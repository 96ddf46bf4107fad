"""Write tests/data/torchtitan_heldout.yaml: torchtitan's published H100 and H200 benchmarks, outside the development sets.

The torchtitan team's end-of-2024 benchmark (``benchmarks/llama3_h100_202412_torchtitan.md`` of pytorch/torchtitan,
torchtitan 9dec370 with torch and torchao of 2024-12-23) trained Llama 3.1 8B, 70B and 405B on 8 to 512 H100s from
FSDP alone to FSDP + TP + PP + CP, with torch.compile, Float8 linear layers and asynchronous TP switched on one at a
time, and printed tokens/s per GPU and the peak memory of each run. The GPUs are Grand Teton's H100 SXM with 96 GB
of HBM2e (2.4 TB/s), run at "the default 500W power limit", eight to a host on NVLink, 400 Gb/s RDMA per GPU.

No development set holds a torchtitan dense run, a 500 W cap or these GPUs: the rows test the torchtitan profile,
the power-cap model and the memory model (each row's measured memory) on a framework the sets cover thinly. Nothing
is fitted on this file; ``scripts/validation.py`` reports it.

What the page does not print is taken from the job configurations of that commit (``train_configs/llama3_*.toml``):
8,192-token sequences for tables 1, 3, 4 and 5; the 8B model's selective checkpointing is torchtitan's per-op policy
(``selective_ac_option = 'op'``); Float8 is torchao's dynamic tensorwise scaling with the weights all-gathered in
fp8 (``enable_fsdp_float8_all_gather``); a pipeline splits the local batch into as many microbatches as it has
stages (``pipeline_parallel_microbatches`` None -> the pipeline degree, ``pipelining_utils.build_pipeline_schedule``),
and Interleaved 1F1B runs two stages per rank (``generate_split_points``).

The page's companion on H200s (``benchmarks/llama3_8b_h200_2025-06_torchtitan.md``, Trainy, torchtitan e7c0cae) adds
Llama 3.1 8B on 32 and 64 H200s at their rating, run as the H100 table's 8B rows with Float8 and compile.

    python scripts/torchtitan_heldout.py   # rewrites tests/data/torchtitan_heldout.yaml
"""

from __future__ import annotations

from pathlib import Path

import yaml
from _common import llama_model, measured_throughput

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torchtitan_heldout.yaml"
PAGE = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
COMMIT = "9dec370ad26b"  # torchtitan, 2024-12-26 (the page's "Versions and Dates")
SOURCE = f"{PAGE} (torchtitan {COMMIT}, torch 1963fc8 2024-12-23)"
# Trainy's H200 baseline on torchtitan e7c0cae (2025-06-13): Llama 3.1 8B on 4 and 8 hosts of 8 H200 (400 Gb/s a GPU),
# local batch 2, torch.compile, Float8 tensorwise with fp8 weight all-gather, the llama3_8b.toml of that commit
# (8,192 tokens, per-op selective checkpointing, FSDP over every GPU); no power limit stated
H200_PAGE = "pytorch/torchtitan benchmarks/llama3_8b_h200_2025-06_torchtitan.md"
H200_COMMIT = "e7c0cae934df"
H200_ROWS = [
    (32, 10938, 47.96),
    (64, 10753, 46.97),
]  # GPUs, TPS/GPU, Memory(GiB) at the 100th iteration
MODELS = {  # torchtitan/models/llama/__init__.py @ 9dec370: the FFN width from ffn_dim_multiplier and multiple_of
    "8b": {"num_layers": 32, "d_model": 4096, "d_ff": 14336, "num_heads": 32},
    "70b": {"num_layers": 80, "d_model": 8192, "d_ff": 28672, "num_heads": 64},
    "405b": {"num_layers": 126, "d_model": 16384, "d_ff": 53248, "num_heads": 128},
}
TECHNIQUES = {  # the tables' "Techniques" column -> (torch.compile, Float8, async TP)
    "FSDP": (False, False, False),
    "FSDP + torch.compile": (True, False, False),
    "FSDP + torch.compile + Float8": (True, True, False),
    "2D": (True, True, False),
    "2D + AsyncTP": (True, True, True),
}

# (table, model, devices, fsdp, tp, pp, cp, seq, local batch, recompute, schedule, technique, TPS/GPU, GiB)
ROWS = [
    (1, "8b", 8, 8, 1, 1, 1, 8192, 2, "op", None, "FSDP", 5762, 82.4),
    (1, "8b", 8, 8, 1, 1, 1, 8192, 2, "op", None, "FSDP + torch.compile", 6667, 77.0),
    (1, "8b", 8, 8, 1, 1, 1, 8192, 2, "op", None, "FSDP + torch.compile + Float8", 8532, 76.8),
    (2, "8b", 8, 8, 1, 1, 1, 32768, 1, "full", None, "FSDP + torch.compile + Float8", 3890, 83.9),
    (2, "8b", 8, 4, 1, 1, 2, 65536, 1, "full", None, "FSDP + torch.compile + Float8", 2540, 84.2),
    (2, "8b", 8, 2, 1, 1, 4, 131072, 1, "full", None, "FSDP + torch.compile + Float8", 1071, 84.0),
    (2, "8b", 8, 1, 1, 1, 8, 262144, 1, "full", None, "FSDP + torch.compile + Float8", 548, 84.5),
    (3, "8b", 128, 128, 1, 1, 1, 8192, 2, "op", None, "FSDP", 5605, 67.0),
    (3, "8b", 128, 128, 1, 1, 1, 8192, 2, "op", None, "FSDP + torch.compile", 6514, 62.0),
    (3, "8b", 128, 128, 1, 1, 1, 8192, 2, "op", None, "FSDP + torch.compile + Float8", 8380, 61.8),
    (4, "70b", 256, 32, 8, 1, 1, 8192, 16, "full", None, "2D", 829, 71.9),
    (4, "70b", 256, 32, 8, 1, 1, 8192, 16, "full", None, "2D + AsyncTP", 876, 67.6),
    (5, "405b", 512, 8, 8, 8, 1, 8192, 32, "full", "1f1b", "2D + AsyncTP", 100, 82.5),
    (5, "405b", 512, 8, 8, 8, 1, 8192, 32, "full", "interleaved", "2D + AsyncTP", 128, 72.7),
    (6, "405b", 512, 8, 8, 8, 1, 32768, 8, "full", "1f1b", "2D + AsyncTP", 76, 75.3),
    (6, "405b", 512, 4, 8, 8, 2, 65536, 8, "full", "1f1b", "2D + AsyncTP", 47, 75.9),
    (6, "405b", 512, 2, 8, 8, 4, 131072, 8, "full", "1f1b", "2D + AsyncTP", 31, 77.1),
    (6, "405b", 512, 1, 8, 8, 8, 262144, 8, "full", "1f1b", "2D + AsyncTP", 16, 84.9),
]


def record(row: tuple) -> dict:
    table, model, n, fsdp, tp, pp, cp, seq, local, recompute, schedule, technique, tps, gib = row
    compiled, fp8, async_tp = TECHNIQUES[technique]
    tag = {
        "FSDP": "eager",
        "FSDP + torch.compile": "compile",
        "FSDP + torch.compile + Float8": "compile-fp8",
        "2D": "compile-fp8",
        "2D + AsyncTP": "compile-fp8-asynctp",
    }[technique]
    sched = f"-{schedule}" if schedule else ""
    k = (
        pp if pp > 1 else 1
    )  # microbatches: the pipeline degree (torchtitan's default), else the local batch at once
    return {
        "id": f"torchtitan-h100-2024-t{table}-{model}-n{n}-fsdp{fsdp}-tp{tp}-pp{pp}-cp{cp}-s{seq}-{tag}{sched}",
        "source": f"{SOURCE}, table {table}",
        "trust": "high",
        "model": llama_model(MODELS[model]),
        "workload": {
            "seq_len": seq,
            "global_batch_seqs": local * fsdp,
            "precision": "fp8" if fp8 else "bf16",
            "framework": "torchtitan",
            "fp8_recipe": "tensorwise" if fp8 else None,
            "torch_compile": compiled,
            "compiled_loss": False,
        },
        "cluster": {
            "accelerator": "h100",
            "num_devices": n,
            "devices_per_node": 8,
            "scale_out_gbytes_per_s_per_device": None,
            "hbm_gb_per_device": 96,
            "power_limit_w": 500,
        },
        "layout": {
            "dp": n // (tp * pp * cp),
            "fsdp": fsdp,
            "zero_stage": 3,
            "tp": tp,
            "sequence_parallel": tp > 1,
            "pp": pp,
            "virtual_stages": 2 if schedule == "interleaved" else 1,
            "schedule": schedule,
            "cp": cp,
            "microbatch_seqs": local // k,
            "num_microbatches": k,
            "recompute": "selective" if recompute == "op" else recompute,
            "recompute_policy": "op" if recompute == "op" else None,
            "async_tp": async_tp,
        },
        "measured": measured_throughput(tps, gib),
        "derived": {
            "tokens_per_s_per_device": "the table's TPS/GPU (read at the 90th iteration)",
            "memory_gib_per_device": "the table's Memory(GiB): the largest across the GPUs (footnote 1)",
            "technique": f"{technique}: torch.compile {'on' if compiled else 'off'}, Float8 "
            f"{'on (torchao dynamic tensorwise, fp8 weight all-gather)' if fp8 else 'off'}, async TP "
            f"{'on' if async_tp else 'off'}",
            "layout": f"FSDP {fsdp}, TP {tp}, PP {pp}, CP {cp} (the table); local batch {local}; torchtitan shards the "
            "weights over dp_shard x cp, as the engine's ZeRO-3 shard group (fsdp x cp) does",
            "microbatches": (
                f"pipeline_parallel_microbatches unset -> the pipeline degree {pp}: {k} microbatches of {local // k}"
                if pp > 1
                else "no pipeline: the local batch in one pass"
            ),
            "seq_len": "the table"
            if table in (2, 6)
            else "train_configs/llama3_*.toml @ 9dec370: seq_len 8192",
            "compiled_loss": "train.py @ 9dec370 leaves the loss uncompiled ('TODO: compiling loss function causes "
            "CUDA errors, turning off for now'): it upcasts the logits to fp32 eagerly",
            "recompute": (
                "selective, torchtitan's per-op policy (selective_ac_option 'op')"
                if recompute == "op"
                else "full activation checkpointing (the table)"
            ),
            "cluster": "Grand Teton H100 SXM, 96 GB HBM2e at 2.4 TB/s, the default 500 W power limit, 8 GPUs a host "
            "on NVLink, 400 Gb/s RDMA per GPU (the page's Hardware)",
        },
    }


def h200_record(n: int, tps: float, gib: float) -> dict:
    """A row of the H200 page: the H100 table's 8B record shape on H200s at their rating."""
    rec = record(
        (3, "8b", n, n, 1, 1, 1, 8192, 2, "op", None, "FSDP + torch.compile + Float8", tps, gib)
    )
    rec["id"] = f"torchtitan-h200-2025-8b-n{n}-fsdp{n}-s8192-compile-fp8"
    rec["source"] = (
        f"{H200_PAGE} (torchtitan {H200_COMMIT}, torch 2.8.0a0+5228986c39 2025-05-29), {n // 8} hosts"
    )
    rec["workload"]["compiled_loss"] = True
    rec["cluster"] = {
        "accelerator": "h200",
        "num_devices": n,
        "devices_per_node": 8,
        "scale_out_gbytes_per_s_per_device": None,
    }
    rec["derived"].update(
        tokens_per_s_per_device="the table's TPS/GPU (sampled at the 100th iteration)",
        memory_gib_per_device="the table's Memory(GiB) at the 100th iteration",
        layout=f"FSDP over all {n} GPUs (data_parallel_shard_degree -1), local batch 2 (--training.local_batch_size=2)",
        seq_len="torchtitan/models/llama3/train_configs/llama3_8b.toml @ e7c0cae: seq_len 8192",
        compiled_loss="torchtitan/components/loss.py @ e7c0cae compiles the loss with --training.compile (since "
        "bbb1b616e, 2025-04-02): the fp32 upcast of the logits is fused into its kernels",
        cluster=f"{n // 8} hosts of 8 H200 on NVLink, 400 Gb/s (CX-7) RDMA per GPU (the page's Hardware); no power "
        "limit stated",
    )
    return rec


def main() -> None:
    records = [record(row) for row in ROWS] + [h200_record(*row) for row in H200_ROWS]
    header = (
        f"# Written by scripts/torchtitan_heldout.py from {PAGE} @ {COMMIT} and {H200_PAGE} @ {H200_COMMIT}; not in "
        "the development sets.\n"
    )
    OUT.write_text(header + yaml.safe_dump(records, sort_keys=False, width=120))
    print(f"wrote {len(records)} records to {OUT}")


if __name__ == "__main__":
    main()
