"""Framework profiles: which collectives a training framework overlaps with which compute.

The cost model (``costs.terms``) asks the workload's profile, never the framework's name. Each
profile states what the framework does when launched with the flags its exporter writes
(``export.*`` emit exactly the flags a profile assumes):

- ``megatron`` (Megatron-LM / Megatron-Core / NeMo): ``--overlap-grad-reduce`` (DP and ZeRO
  reductions bucketed into the last microbatch's backward), ``--overlap-param-gather`` (the
  ZeRO-1 gather of updated weights into the next forward), ``--tp-comm-overlap`` (Transformer
  Engine userbuffers) only when asked: it is off by default in Megatron.
- ``deepspeed``: ``overlap_comm`` hides the ZeRO gradient reductions and the ZeRO-3 prefetch;
  the ZeRO-1/2 gather of updated weights runs after the optimizer step, exposed.
- ``torchtitan`` (FSDP2): forward and backward prefetch of the per-layer all-gathers, the
  reduce-scatter in backward; HSDP's all-reduce in backward; async TP only when asked.
- ``maxtext`` (XLA): the latency-hiding scheduler overlaps FSDP gathers and gradient reductions;
  on TPUs XLA's continuation fusion (async collective fusion: ``--xla_tpu_enable_async_collective_fusion``
  and its all-gather variants, on by default in libtpu and set again in every MaxText benchmark config)
  runs the TP collectives beside the matmuls; on GPUs XLA's collective matmul only when asked.
- ``ideal``: everything that can overlap does, TP included (the bound the others approach).

In every profile ZeRO-3 gathers are prefetched one layer ahead and their reduce-scatters run
in backward, and context-parallel ring passes hide behind the attention core.
TP collectives pipelined with their GEMMs need the fast domain (NVLink / ICI): a TP group that
crosses scale-out links is on the critical path in every profile (NeMo "Communication Overlap":
userbuffers run over NVLink only).
"""

from __future__ import annotations

from dataclasses import dataclass

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import Accelerator, Framework, ModelSpec, Recompute, Workload


@dataclass(frozen=True, slots=True)
class Profile:
    """What overlaps with what under one framework (each flag: hidden behind its compute window)."""

    name: str
    tp_overlap: tuple[
        str, ...
    ]  # accelerator kinds on which TP collectives are pipelined with their GEMMs
    # by default (inside the fast domain only)
    grad_reduce_overlap: bool  # DP / ZeRO-1/2 reductions behind the last microbatch's backward
    param_gather_overlap: bool  # ZeRO-1/2 gather of updated weights behind the next forward
    pipelined_grad_reduce_overlap: bool = (
        True  # the same with pp > 1; DeepSpeed's pipeline engine reduces
    )
    # after the whole schedule (its TrainSchedule ends with ReduceTiedGrads, ReduceGrads, OptimizerStep)
    fp8_param_gather: bool = (
        False  # with fp8: weights all-gathered in fp8 (Megatron --fp8-param-gather,
    )
    # torchtitan enable_fsdp_float8_all_gather), else in bf16
    recompute_policies: tuple[str, ...] = (
        "none",
        "selective",
        "full",
    )  # what the search tries by default
    vendor_attention: bool = (
        False  # the vendor's fused attention kernel (Transformer Engine's cuDNN attention)
    )
    # where the accelerator has one (``Accelerator.vendor_attention_efficiency``), else FlashAttention-2 class
    inplace_cross_entropy: bool = (
        False  # no second vocabulary-sized buffer for the loss gradient: Megatron's
    )
    # vocab-parallel cross entropy computes exp and the gradient in place of the fp32 logits it saved; XLA fuses
    # the elementwise softmax - one-hot into the output layer's backward matmuls (MaxText's Llama 4 Scout v5p recipe
    # holds 65,536 tokens of 202,048-entry logits per chip: one fp32 copy is 49 GiB of its 95, two would not fit);
    # else a second fp32 buffer (PyTorch's cross entropy)
    ep_overlap: bool = (
        False  # MoE token AllToAlls hidden behind another microbatch's compute (Megatron
    )
    # --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe); off by default in every framework
    ep_node_dedup: bool = (
        False  # a token crosses scale-out once per destination node, NVLink fans it out to
    )
    # its experts there (DeepEP / HybridEP: Megatron-Core's flex dispatcher), else once per expert (NCCL AllToAll)
    einsum_capacity_dispatch: bool = (
        False  # with a capacity factor, each sequence's tokens are dispatched to and
    )
    # combined from the experts' capacity slots by one-hot einsums (MaxText's dense path, sparse_matmul false:
    # "BSM,BSEC -> EBCM" and "EBCM,BSEC -> BSM", C = S k c / E per sequence), matmuls the MXU runs in full; else
    # by a permutation that moves the rows without FLOPs (Megatron's padded dispatch)
    zero3_gather_unit: str = (
        "layer"  # what a ZeRO-3 gather and gradient reduce-scatter move at once, and so the
    )
    # unsharded weights and gradients alive: a whole layer (FSDP units, DeepSpeed's and Megatron-FSDP's modules), or
    # one weight tensor (XLA's SPMD partitioner gathers each matmul's operand where it is used and reduces each
    # gradient where it is made: MaxText's DeepSeek-V3 v5p recipe, ZeRO-3 over 512 chips with every expert local,
    # runs with a MoE layer's experts 21 GiB in bf16, where two gathered layers and a layer's fp32 gradients would
    # not fit beside the state)
    transient_zero3_weights: bool = (
        False  # under ZeRO-3 the compute-precision weights exist only gathered: the
    )
    # sharded parameter is the fp32 master, cast at each gather (PyTorch FSDP2's MixedPrecisionPolicy casts the
    # shard to param_dtype before its all-gather; MaxText's weight_dtype float32 parameters are cast to dtype in
    # the layer), else a sharded bf16 copy persists beside the master (DeepSpeed ZeRO-3's 16-bit partitions,
    # Megatron-FSDP's model-weight buffer)


PROFILES = {
    "megatron": Profile(
        "megatron",
        tp_overlap=(),
        grad_reduce_overlap=True,
        param_gather_overlap=True,
        fp8_param_gather=True,
        inplace_cross_entropy=True,
        vendor_attention=True,
        ep_node_dedup=True,
        recompute_policies=("none", "selective", "full", "norm_act", "norm_moe", "mla_up_proj"),
    ),
    "deepspeed": Profile(
        "deepspeed",
        tp_overlap=(),
        grad_reduce_overlap=True,
        param_gather_overlap=False,
        pipelined_grad_reduce_overlap=False,
    ),
    "torchtitan": Profile(
        "torchtitan",
        tp_overlap=(),
        grad_reduce_overlap=True,
        param_gather_overlap=True,
        fp8_param_gather=True,
        recompute_policies=("none", "op", "full"),
        transient_zero3_weights=True,
    ),
    "maxtext": Profile(
        "maxtext",
        tp_overlap=("tpu",),
        grad_reduce_overlap=True,
        param_gather_overlap=True,
        transient_zero3_weights=True,
        einsum_capacity_dispatch=True,
        zero3_gather_unit="tensor",
        inplace_cross_entropy=True,
        recompute_policies=("minimal_with_context", "minimal", "save_dot_except_mlpwi", "full"),
    ),
    "ideal": Profile(
        "ideal",
        tp_overlap=("gpu", "tpu"),
        grad_reduce_overlap=True,
        param_gather_overlap=True,
        fp8_param_gather=True,
        recompute_policies=tuple(r.value for r in Recompute),
        vendor_attention=True,
        ep_overlap=True,
        ep_node_dedup=True,
    ),
}
assert set(PROFILES) == {f.value for f in Framework}

# The run-record framework names (docs/RUN_RECORDS.md) -> the profile that models them.
RECORD_FRAMEWORKS = {
    "megatron": "megatron",
    "nemo-automodel": "torchtitan",
    "torchtitan": "torchtitan",
    "pytorch-fsdp": "torchtitan",
    "llm-foundry": "torchtitan",
    "maxtext": "maxtext",
    "megatron-deepspeed": "deepspeed",
}


def default_framework(accelerator_kind: str) -> str:
    """The profile used when none is named: MaxText on TPUs, Megatron on GPUs."""
    return "maxtext" if accelerator_kind == "tpu" else "megatron"


def framework_of_record(name: str | None, accelerator_kind: str) -> str:
    """The profile of a run record's ``workload.framework`` (null or "other": the accelerator's default)."""
    return RECORD_FRAMEWORKS.get(name or "", default_framework(accelerator_kind))


def framework_of_target(target: str) -> str:
    """The profile an export target's framework runs with ('torchtitan-0.3' -> 'torchtitan')."""
    name = target.split("-")[0]
    return name if name in PROFILES else "ideal"


def deepep_of(workload: Workload, accelerator_kind: str) -> bool:
    """The DeepEP dispatch the workload asks for: ``Workload.deepep``, else the profile's ``ep_node_dedup``."""
    return (
        profile_of(workload.framework, accelerator_kind).ep_node_dedup
        if workload.deepep is None
        else workload.deepep
    )


def vendor_attention_of(workload: Workload, accelerator_kind: str) -> bool:
    """The attention kernel the workload asks for: ``Workload.vendor_attention``, else the profile's."""
    return (
        profile_of(workload.framework, accelerator_kind).vendor_attention
        if workload.vendor_attention is None
        else workload.vendor_attention
    )


def vendor_attention(workload: Workload, acc: Accelerator) -> bool:
    """Whether the attention core runs the vendor's fused kernel (``vendor_attention_of``) at the accelerator's
    ``vendor_attention_efficiency``: only where the catalogue has one."""
    return vendor_attention_of(workload, acc.kind) and acc.vendor_attention_efficiency is not None


def node_dedup(model: ModelSpec, workload: Workload, accelerator_kind: str) -> bool:
    """Whether the MoE dispatch sends a token once per destination GPU and node, not per expert copy (``deepep_of``):
    DeepEP cannot pad experts to a capacity, so a capacity-factor model does not."""
    return deepep_of(workload, accelerator_kind) and model.dropless_moe


def transient_zero3_weights(workload: Workload) -> bool:
    """Whether ZeRO-3 keeps no sharded compute-precision weights (the profile's ``transient_zero3_weights``): only
    where a master copy exists to cast them from (``master_bytes_per_param`` > 0)."""
    return (
        profile_of(workload.framework).transient_zero3_weights
        and workload.master_bytes_per_param > 0
    )


def profile_of(framework: str | None, accelerator_kind: str = "gpu") -> Profile:
    """The profile named ``framework`` (None: the accelerator's default)."""
    name = framework or default_framework(accelerator_kind)
    if name not in PROFILES:
        raise InvalidArgumentError(f"--framework: '{name:.60}' is not one of {', '.join(PROFILES)}")
    return PROFILES[name]
