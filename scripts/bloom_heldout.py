"""Write tests/data/bloom_prequel_heldout.yaml: BLOOM prequel rows the development set leaves out.

BigScience's chronicles-prequel.md (bigscience-workshop/bigscience, train/tr11-176B-ml) measured
the 181B candidate (72 layers, d_model 14336, 64 heads, vocabulary 250k, 48 nodes of 8 A100 80GB)
in several tables; runs_dev.yaml holds eleven rows of its 'GBS Variations' and 'NHEADs' tables.
This script writes the other rows of the same model from '48 node contenders' (2022-02-21) and
'GBS Variations' (2022-02-25), in the run-record format (docs/RUN_RECORDS.md), so that the one
constant fitted on the development set's BLOOM rows (blocking_launch_us_per_layer_pass) is checked
on measurements it was not fitted on. Nothing is calibrated on this file.

    python scripts/bloom_heldout.py   # rewrites tests/data/bloom_prequel_heldout.yaml
"""

from __future__ import annotations

from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "bloom_prequel_heldout.yaml"
SOURCE = (
    "bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md, '{table}' ({date})"
)
DEVICES, SEQ_LEN = 384, 2048
# (table, date, dp, tp, pp, mbs, gbs, memory GB or None, sec/it or None (OOM), TFLOPs as printed)
ROWS = [
    ("48 node contenders", "2022-02-21", 4, 8, 12, 1, 2048, 29, 143.31, 112.49),
    ("48 node contenders", "2022-02-21", 4, 8, 12, 2, 2048, 37, 134.02, 120.29),
    ("48 node contenders", "2022-02-21", 4, 8, 12, 4, 2048, 49, 123.69, 130.34),
    ("48 node contenders", "2022-02-21", 4, 8, 12, 8, 2048, 69, 129.26, 124.72),
    ("48 node contenders", "2022-02-21", 8, 8, 6, 1, 2048, 38, 139.82, 115.31),
    ("48 node contenders", "2022-02-21", 8, 8, 6, 2, 2048, 44, 131.02, 123.05),
    ("48 node contenders", "2022-02-21", 8, 8, 6, 4, 2048, 56, 121.48, 132.71),
    ("GBS Variations", "2022-02-25", 8, 8, 6, 4, 1568, 56, 113.01, 109.22),
    ("GBS Variations", "2022-02-25", 8, 8, 6, 6, 2016, 66, 123.57, 128.43),
    ("GBS Variations", "2022-02-25", 4, 8, 12, 4, 2048, 49, 117.07, 137.70),
    ("GBS Variations", "2022-02-25", 4, 8, 12, 2, 2048, None, 128.82, 125.15),
    ("GBS Variations", "2022-02-25", 12, 8, 4, 2, 2016, 53, 125.52, 126.43),
    ("GBS Variations", "2022-02-25", 24, 8, 2, 1, 2016, 65, 145.45, 109.11),
    ("GBS Variations", "2022-02-25", 48, 8, 1, 1, 2016, None, None, None),
    ("GBS Variations", "2022-02-25", 8, 4, 12, 2, 2048, 44, 110.48, 145.92),
    ("GBS Variations", "2022-02-25", 16, 4, 6, 4, 2048, 75, 117.11, 137.66),
    ("GBS Variations", "2022-02-25", 16, 2, 12, 2, 2048, 63, 112.50, 143.30),
    ("GBS Variations", "2022-02-25", 32, 2, 6, 1, 2048, None, None, None),
    ("GBS Variations", "2022-02-25", 8, 2, 24, 2, 2048, 53, 122.75, 131.33),
]


def record(table, date, dp, tp, pp, mbs, gbs, mem_gb, sec, tflops) -> dict:
    oom = sec is None
    k = gbs // (dp * mbs)
    derived = {
        "scale_out_gbytes_per_s_per_device": "same 48 Jean Zay nodes as the BLOOM production run, whose README gives "
        "4x OmniPath 100 Gb/s per 8-GPU node -> 6.25 GB/s per GPU",
        "fsdp": f"zero_stage 1: optimizer states sharded over the {dp}-way data-parallel group, weights not sharded "
        f"-> fsdp 1",
        "num_microbatches": f"GBS/(MBS*DP) = {gbs}/({mbs}*{dp})",
        "recompute": "full (activation checkpointing, --checkpoint-activations, on for every tr11 run)",
        "precision": "fp16 as the development set's rows of the same tables (the 02-17 tables name fp16 first)",
        "model": "NHIDDEN=14336 / NLAYERS=72, 'all NHEADS=64' (the table heading); d_ff 4 x d_model; vocabulary 250k",
    }
    if not oom:
        derived["tokens_per_s_per_device"] = f"GBS*2048/sec_per_it/384 = {gbs}*2048/{sec}/384"
        derived["source_tflops_per_device"] = (
            f"{tflops} (as printed: Megatron Eq.3 incl. recompute)"
        )
    if mem_gb is not None:
        derived["memory_gib_per_device"] = (
            f"source says {mem_gb} GB; converted GB -> GiB (x 1e9/2^30)"
        )
    return {
        "id": f"bloom-prequel-{date.replace('-', '')}-181b-dp{dp}-tp{tp}-pp{pp}-mbs{mbs}-gbs{gbs}-heldout",
        "source": SOURCE.format(table=table, date=date),
        "trust": "medium",
        "model": {
            "num_layers": 72,
            "d_model": 14336,
            "d_ff": 57344,
            "mlp": "plain",
            "num_heads": 64,
            "num_kv_heads": 64,
            "head_dim": 224,
            "vocab_size": 250000,
            "tied_embeddings": True,
        },
        "workload": {
            "seq_len": SEQ_LEN,
            "global_batch_seqs": gbs,
            "precision": "fp16",
            "framework": "megatron-deepspeed",
        },
        "cluster": {
            "accelerator": "a100-80gb",
            "num_devices": DEVICES,
            "devices_per_node": 8,
            "scale_out_gbytes_per_s_per_device": 6.25,
        },
        "layout": {
            "dp": dp,
            "fsdp": 1,
            "zero_stage": 1,
            "tp": tp,
            "sequence_parallel": None,
            "pp": pp,
            "virtual_stages": 1,
            "cp": 1,
            "microbatch_seqs": mbs,
            "num_microbatches": k,
            "recompute": "full",
        },
        "measured": {
            "tokens_per_s_per_device": None if oom else round(gbs * SEQ_LEN / sec / DEVICES, 2),
            "step_time_s": sec,
            "mfu": None,
            "mfu_convention": None,
            "peak_tflops_used": 312,
            "memory_gib_per_device": None if mem_gb is None else round(mem_gb * 1e9 / 2**30, 2),
            "oom": oom,
        },
        "derived": derived,
    }


def main() -> None:
    header = (
        "# Held-out BLOOM prequel rows: written by scripts/bloom_heldout.py from BigScience's\n"
        "# chronicles-prequel.md (bigscience-workshop/bigscience, train/tr11-176B-ml); not in runs_dev.yaml,\n"
        "# never used by calibration. Regenerate with the script rather than editing by hand.\n"
    )
    OUT.write_text(
        header + yaml.safe_dump([record(*row) for row in ROWS], sort_keys=False, width=110)
    )
    print(f"wrote {OUT} ({len(ROWS)} records)")


if __name__ == "__main__":
    main()
