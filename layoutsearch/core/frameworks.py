"""Framework profiles as the cost model reads them: which collectives a training framework
overlaps with which compute.

The cost model (``costs.terms``) asks the workload's profile, never the framework's name. Each
framework declares its profile beside what its export target can write, in one module of
``layoutsearch.frameworks`` (``megatron``, ``deepspeed``, ``torchtitan``, ``maxtext``, ``ideal``);
this module looks profiles up by name and resolves the workload's choices against them.
"""

from __future__ import annotations

from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import Accelerator, ModelSpec, Workload
from layoutsearch.frameworks import PROFILES, TARGETS, Profile, declaration_of

__all__ = [
    "PROFILES",
    "RECORD_FRAMEWORKS",
    "Profile",
    "deepep_of",
    "default_framework",
    "fp8_activations_of",
    "fp8_recipe_of",
    "fp8_param_gather_of",
    "framework_of_record",
    "framework_of_target",
    "node_dedup",
    "profile_of",
    "transient_zero3_weights",
    "vendor_attention",
    "vendor_attention_of",
    "tp_backward_async_of",
    "pp_comm_overlap_of",
    "grad_reduce_overlap_of",
    "grad_accumulation_fusion_of",
]

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
    """The profile an export target's framework runs with ('torchtitan-0.3' -> 'torchtitan'); 'ideal'
    for a name no framework declares (the export then refuses it)."""
    return declaration_of(target).PROFILE.name if target in TARGETS else "ideal"


def _choice_of(
    workload: Workload, accelerator_kind: str, name: str, profile_field: str | None = None
) -> bool:
    """The workload's switch ``name`` where it sets it, else its framework profile's field
    ``profile_field`` (default: of the same name)."""
    asked = getattr(workload, name)
    if asked is not None:
        return asked
    return getattr(profile_of(workload.framework, accelerator_kind), profile_field or name)


def deepep_of(workload: Workload, accelerator_kind: str) -> bool:
    """The DeepEP dispatch the workload asks for: ``Workload.deepep``, else the profile's ``ep_node_dedup``."""
    return _choice_of(workload, accelerator_kind, "deepep", "ep_node_dedup")


def vendor_attention_of(workload: Workload, accelerator_kind: str) -> bool:
    """The attention kernel the workload asks for: ``Workload.vendor_attention``, else the profile's."""
    return _choice_of(workload, accelerator_kind, "vendor_attention")


def tp_backward_async_of(workload: Workload, accelerator_kind: str) -> bool:
    """Whether the backward's TP collectives run beside their GEMMs: ``Workload.tp_backward_async``, else the
    profile's (costs.terms.tp_async_backward)."""
    return _choice_of(workload, accelerator_kind, "tp_backward_async")


def grad_accumulation_fusion_of(workload: Workload, accelerator_kind: str) -> bool:
    """Whether each microbatch's gradients are accumulated by their GEMMs: ``Workload.grad_accumulation_fusion``,
    else the profile's (costs.terms.grad_accumulation)."""
    return _choice_of(workload, accelerator_kind, "grad_accumulation_fusion")


def pp_comm_overlap_of(workload: Workload, accelerator_kind: str) -> bool:
    """Whether an interleaved schedule's sends between stages run beside the other chunks' compute:
    ``Workload.pp_comm_overlap``, else the profile's (costs.terms.pipeline_sends)."""
    return _choice_of(workload, accelerator_kind, "pp_comm_overlap")


def grad_reduce_overlap_of(workload: Workload, accelerator_kind: str) -> bool:
    """Whether the once-per-step gradient reductions run in the last microbatch's backward:
    ``Workload.grad_reduce_overlap``, else the profile's (costs.terms.reduces_in_backward)."""
    return _choice_of(workload, accelerator_kind, "grad_reduce_overlap")


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


def fp8_recipe_of(workload: Workload, accelerator_kind: str) -> str:
    """The fp8 scaling recipe the workload asks for: ``Workload.fp8_recipe``, else the profile's ``fp8_recipe``."""
    return workload.fp8_recipe or profile_of(workload.framework, accelerator_kind).fp8_recipe


def cross_entropy_of(workload: Workload, accelerator_kind: str = "gpu") -> str:
    """The loss's kernels (core.specs.CrossEntropy): ``Workload.cross_entropy``, else its profile's: a PyTorch-module
    framework's compiled where the loss is compiled with the model (``compiled_loss``, unless the model itself runs
    eager), else PyTorch's eager ones; another framework's first (``Profile.cross_entropies``)."""
    if workload.cross_entropy is not None:
        return str(workload.cross_entropy)
    profile = profile_of(workload.framework, accelerator_kind)
    if profile.compiled_loss is not None:
        compiled = (
            workload.compiled_loss
            if workload.compiled_loss is not None
            else profile.compiled_loss and workload.torch_compile is not False
        )
        return "compiled" if compiled else "eager"
    return profile.cross_entropies[0]


def fp4_recipe_of(workload: Workload) -> str:
    """The fp4 scaling recipe the workload asks for: ``Workload.fp4_recipe``, else NVIDIA's NVFP4 (the recipe of
    every framework that trains in fp4)."""
    return workload.fp4_recipe or "nvfp4"


def fp8_param_gather_of(workload: Workload, accelerator_kind: str) -> bool:
    """Whether ZeRO gathers the weights in fp8: fp8 training under a recipe the profile gathers in fp8."""
    profile = profile_of(workload.framework, accelerator_kind)
    return (
        workload.precision == "fp8"
        and fp8_recipe_of(workload, accelerator_kind) in profile.fp8_param_gather
    )


def fp8_activations_of(workload: Workload) -> str:
    """How the workload stores its saved activations (costs.memory.fp8_storage): the profile's
    ``fp8_activations`` under fp8 training and under fp4 training (whose fp4 copies with their block scales,
    0.53 to 0.56 bytes a value, are costed at the fp8 copies' byte: an upper bound), else "none"."""
    if workload.precision not in ("fp8", "fp4"):
        return "none"
    return profile_of(workload.framework).fp8_activations


def profile_of(framework: str | None, accelerator_kind: str = "gpu") -> Profile:
    """The profile named ``framework`` (None: the accelerator's default)."""
    name = framework or default_framework(accelerator_kind)
    if name not in PROFILES:
        raise InvalidArgumentError(f"--framework: '{name:.60}' is not one of {', '.join(PROFILES)}")
    return PROFILES[name]
