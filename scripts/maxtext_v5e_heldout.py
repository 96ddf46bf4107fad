"""Write tests/data/maxtext_v5e_heldout.yaml: MaxText's published TPU v5e table, outside the development set.

MaxText's configuration refactor of 2023-12-15 (commit 76bd53b0f of AI-Hypercomputer/maxtext, the commit the
development set's v5p rows were read at) published, in ``MaxText/configs/v5e/README.md``, the training
throughput of its synthetic 16B, 32B, 64B and 128B models on 1 to 32 slices of TPU v5e-256, with the scripts
that ran them beside it (``MaxText/configs/v5e/{16b,32b,64b,128b}.sh``, same commit): remat_policy=full,
per_device_batch_size 6, 4, 2 and 1, 2,048 tokens, FSDP over each slice's 256 chips (the 128B model: FSDP 16 x
TP 16) and data parallelism over the slices' data-centre network (``dcn_data_parallelism=-1``).

No v5e run is in the development sets: v5e's compute fractions are v5p's (``calibration.compute_fractions:
borrowed`` in hardware/v5e.yaml), so these rows measure how the engine carries to a TPU generation it was not
calibrated on, and how its multislice model follows 1 to 32 slices. Nothing is fitted on this file; the report
(scripts/validation.py) predicts each row, the fall of throughput with the slice count, and the rows' coverage by
the uncalibrated band.

The table gives TFLOP/s per chip by MaxText's own count (train.py ``calculate_training_tflops`` at that commit:
6 N per token for the weights, N every parameter with the tied embedding and the norm scales, plus 12 H L Q s / 2
for causal attention); tokens/s per chip = TFLOP/s x 1e12 / that count, as for the development set's v5p rows.

    python scripts/maxtext_v5e_heldout.py   # rewrites tests/data/maxtext_v5e_heldout.yaml
"""

from __future__ import annotations

from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "maxtext_v5e_heldout.yaml"
COMMIT = "76bd53b0f"
SOURCE = f"AI-Hypercomputer/maxtext MaxText/configs/v5e/README.md + v5e/*.sh @ {COMMIT} (Dec 2023)"
SEQ, VOCAB, HEAD_DIM, SLICE = 2048, 32768, 256, 256
# base.yml at the commit: emb 2560, heads 8, mlp 8192, layers 16, scaled by pyconfig.get_individual_scales
MODELS = {  # global_parameter_scale -> (layers, d_model, d_ff, heads)
    "16b": (32, 5120, 32768, 32),
    "32b": (32, 10240, 32768, 32),
    "64b": (64, 10240, 32768, 32),
    "128b": (64, 10240, 65536, 64),
}
SCRIPTS = {  # per_device_batch_size and ICI tensor parallelism of v5e/<model>.sh
    "16b": (6, 1),
    "32b": (4, 1),
    "64b": (2, 1),
    "128b": (1, 16),
}
# TFLOP/sec/chip as printed, per slice count (1x .. 32x v5e-256)
TABLE = {
    "16b": {1: 120, 2: 117, 4: 117, 8: 115, 16: 111, 32: 108},
    "32b": {1: 132, 2: 128, 4: 126, 8: 125, 16: 123, 32: 119},
    "64b": {1: 118, 2: 112, 4: 110, 8: 108, 16: 105, 32: 99},
    "128b": {1: 110, 2: 110, 4: 108, 8: 104, 16: 100, 32: 91},
}


def params(model: str) -> int:
    """Every parameter of the synthetic model: q, k, v, o and the two MLP matrices (relu), one norm scale a
    layer (the parallel block) and the final one, and the tied embedding."""
    layers, d, ff, heads = MODELS[model]
    per_layer = 4 * d * heads * HEAD_DIM + 2 * d * ff + d
    return layers * per_layer + d + VOCAB * d


def flops_per_token(model: str) -> int:
    layers, _, _, heads = MODELS[model]
    return 6 * params(model) + 12 * heads * layers * HEAD_DIM * SEQ // 2


def record(model: str, slices: int, tflops: int) -> dict:
    layers, d, ff, heads = MODELS[model]
    pdbs, tp = SCRIPTS[model]
    chips = SLICE * slices
    fsdp = SLICE // tp
    dp = chips // tp
    per_token = flops_per_token(model)
    return {
        "id": f"maxtext-v5e-2023-{model}-{slices}xv5e-256",
        "source": SOURCE,
        "trust": "medium",
        "model": {
            "num_layers": layers,
            "d_model": d,
            "d_ff": ff,
            "mlp": "plain",
            "num_heads": heads,
            "num_kv_heads": heads,
            "head_dim": HEAD_DIM,
            "vocab_size": VOCAB,
            "tied_embeddings": True,
            "parallel_block": True,
        },
        "workload": {
            "seq_len": SEQ,
            "global_batch_seqs": pdbs * chips,
            "precision": "bf16",
            "framework": "maxtext",
        },
        "cluster": {
            "accelerator": "v5e",
            "num_devices": chips,
            "devices_per_node": None,
            "scale_out_gbytes_per_s_per_device": None,
        },
        "layout": {
            "dp": dp,
            "fsdp": fsdp,
            "zero_stage": 3,
            "tp": tp,
            "sequence_parallel": None,
            "pp": 1,
            "virtual_stages": 1,
            "cp": 1,
            "microbatch_seqs": pdbs * tp,
            "num_microbatches": 1,
            "recompute": "full",
        },
        "measured": {
            "tokens_per_s_per_device": round(tflops * 1e12 / per_token, 1),
            "step_time_s": None,
            "mfu": None,
            "mfu_convention": "palm-causal",
            "peak_tflops_used": 197,
            "memory_gib_per_device": None,
            "oom": False,
        },
        "derived": {
            "tokens_per_s_per_device": f"{tflops} TFLOP/s per chip (the table) / MaxText @ {COMMIT} "
            f"calculate_training_tflops per token = 6 x {params(model):,} + 12 H L Q s / 2 = {per_token:.4e} FLOP",
            "layout": f"v5e/{model}.sh: per_device_batch_size {pdbs}, ici_tensor_parallelism {tp}, ICI FSDP "
            f"{fsdp} (ici_fsdp_parallelism), DCN data parallel over {slices} slice(s) of 256 chips",
            "microbatch_seqs": f"per_device_batch_size {pdbs} x tp {tp} sequences per data-parallel rank (the batch "
            "is sharded over the data and fsdp mesh axes only)",
            "recompute": "remat_policy=full -> full",
            "block": f"MaxText @ {COMMIT} DecoderLayer: a parallel block (attention and MLP read one RMSNorm output)",
            "model": f"global_parameter_scale={model[:-1]} (base.yml and pyconfig.get_individual_scales at {COMMIT})",
        },
    }


def main() -> None:
    records = [record(m, s, t) for m, row in TABLE.items() for s, t in row.items()]
    header = (
        f"# Written by scripts/maxtext_v5e_heldout.py from AI-Hypercomputer/maxtext MaxText/configs/v5e/README.md "
        f"and v5e/*.sh @ {COMMIT}; not in the development sets.\n"
    )
    OUT.write_text(header + yaml.safe_dump(records, sort_keys=False, width=120))
    print(f"wrote {len(records)} records to {OUT}")


if __name__ == "__main__":
    main()
