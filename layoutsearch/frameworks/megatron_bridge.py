"""Megatron-Bridge (export target ``megatron-bridge``: a YAML override of a recipe's ConfigContainer).

The same Megatron-Core underneath, so the megatron profile and the megatron limits, under this
target's rule codes, less what the override does not write (checked against megatron-bridge 0.3.1,
training/config.py and mixed_precision.py): only even pipeline splits (no first/last stage sizes or
chunk layouts), no CUDA graphs, fp32 gradient reduction and fp32 Adam moments (the named
mixed-precision recipes reduce gradients in fp32 and torch dtypes have no YAML spelling), no TP
communication overlap or MoE all-to-all overlap (a CommOverlapConfig the override does not build),
fused attention only.
"""

import dataclasses

from layoutsearch.frameworks import megatron

EXPORTER = "layoutsearch.export.megatron_bridge"

PROFILE = megatron.PROFILE

TARGET = "megatron-bridge"
_WHY = {
    "split": "the override writes virtual_pipeline_model_parallel_size over an even split; uneven "
    "first/last stages and chunk layouts are left to Megatron-LM (--export megatron)",
    "cuda-graphs": "the override writes no CUDA graph settings; export to megatron for graphs",
    "state-precision": "its named mixed-precision recipes reduce gradients in fp32, and bf16 "
    "moments need a torch dtype the YAML override cannot spell",
    "tp-overlap": "TP communication overlap needs a CommOverlapConfig the override does not write",
    "ep-overlap": "overlapping the MoE all-to-alls needs a CommOverlapConfig the override does not write",
    "unfused-attention": "the override keeps Transformer Engine's fused attention",
    "fp8-recipe": "its mixed-precision recipes scale fp8 per tensor (delayed or current scaling), per "
    "1x128 / 128x128 block (subchannel) or as MXFP8, not per row",
    "offload": "the override writes no optimizer CPU offload (OptimizerConfig.optimizer_cpu_offload)",
    "grad-accumulation-apart": "the override writes no gradient_accumulation_fusion: its recipes fuse it",
    "pp-comm-waits": "the override writes no overlap_p2p_comm: its interleaved recipes overlap the sends",
}

CAPABILITIES = dataclasses.replace(
    megatron.CAPABILITIES,
    target=TARGET,
    framework="Megatron-Bridge",
    pipeline_splits=("even",),
    cp_flavours=("ring",),  # the override writes context_parallel_size alone (cp_comm_type p2p)
    cuda_graphs=("none",),
    recompute_with_scoped_graphs=None,
    bf16_grads=False,
    bf16_moments_zero=(),
    tp_comm_overlap=False,
    ep_comm_overlap=False,
    unfused_attention=False,
    grad_accumulation_apart=False,
    pp_comm_waits=False,
    offload=("none",),
    # TransformerConfig cross_entropy_loss_fusion and cross_entropy_fusion_impl: its recipes' te among them
    cross_entropies=("te", "native", "unfused"),
    why={
        **{
            code.replace("megatron-", f"{TARGET}-", 1): text
            for code, text in megatron.CAPABILITIES.why.items()
        },
        **{f"{TARGET}-{code}": text for code, text in _WHY.items()},
    },
)
