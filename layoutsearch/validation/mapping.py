"""Mapping a measured-run record onto the engine (the rules every validation and calibration uses).

``record_to_problem`` turns a record into an engine ``Problem`` and a placed ``Layout``, or a skip
reason. The rules, each applied to every record and numbered as the code and the notes cite them,
are docs/run_record_mapping.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from layoutsearch.core import io
from layoutsearch.core.catalogue import accelerator_names, load_accelerator, model_from_dict
from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import (
    CatalogueError,
    InvalidArgumentError,
    LayoutsearchError,
    did_you_mean,
)
from layoutsearch.core.frameworks import (
    RECORD_FRAMEWORKS,
    default_framework,
    framework_of_record,
    profile_of,
)
from layoutsearch.core.problem import (
    MODEL_SHAPE_FIELDS,
    SCHEDULES,
    Problem,
    SearchOptions,
    resolved_workload,
)
from layoutsearch.core.rules import SCHEDULE_VIRTUAL_STAGES, candidate_of, effective_zero
from layoutsearch.core.specs import (
    ALL_DEGREE_NAMES,
    CROSS_ENTROPIES,
    RECOMPUTE_POLICIES,
    Cluster,
    Layout,
    Workload,
)
from layoutsearch.core.topology import resolve_cluster, torus_shape
from layoutsearch.core.units import GB
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.frameworks import TARGETS, capabilities_of
from layoutsearch.validation.runs import source_family

Mapped = tuple[Problem, Layout]  # what a record is for the engine
MODEL_KEYS = (*MODEL_SHAPE_FIELDS, "tied_embeddings")
ENGINE_NEEDS = {
    "model": MODEL_KEYS,
    "workload": ("seq_len", "global_batch_seqs"),
    "cluster": ("accelerator", "num_devices"),
    "layout": ("dp", "fsdp", "zero_stage", "tp", "pp", "cp"),
}
MOE_NEEDS = ("num_experts", "top_k", "expert_d_ff")  # of model.moe (rule 16)
MLA_NEEDS = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
)  # of model.mla
RECOMPUTE = ("none", "selective", "full")
# Default board power of the GPU parts (W): SXM A100 400, SXM H100/H200 700, HGX B200 1000, GB200 1200 per GPU.
POWER_RATING_W = {
    "a100-40gb": 400,
    "a100-80gb": 400,
    "h100": 700,
    "h200": 700,
    "h800": 700,
    "b200": 1000,
    "gb200": 1200,
}
ACCELERATOR_ALIASES = {"h800": "h100"}  # used only while the catalogue has no such id (rule 10)
# Precisions the engine does not cost yet: such a record is skipped (rule 5). Empty it when fp8 is costed.
UNMODELLED_PRECISIONS: tuple[
    str, ...
] = ()  # every record precision is costed (fp8 since the trust issue)
ENGINE_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")


# ----------------------------------------------------------------------------- mapping
def _is_bigscience(record: dict) -> bool:
    return source_family(record) == "bigscience"


TP_OVERLAP_SOURCES = (
    "NeMo",
    "nemo-framework",
    "Megatron-Bridge",
    "dgxc-benchmarking",
    "Megatron-LM",
)  # rule 11 (source families)


PRESETS_PATH = Path(__file__).with_name("mbridge_presets.yaml")  # rule 22
PRESET_LAYOUT = (
    "num_devices",
    "tp",
    "pp",
    "cp",
    "virtual_stages",
    "ep",
    "etp",
    "microbatch_seqs",
    "global_batch_seqs",
)
PRESET_SETTINGS = {
    "cuda_graphs": ("none", "scoped", "full_iteration"),
    "ep_comm_overlap": (True, False),
    "dispatcher": ("alltoall", "deepep", "hybridep"),
}


def _release_table(
    path: Path, key: str, layout: tuple[str, ...], settings: dict[str, tuple]
) -> tuple[dict, ...]:
    """The entries under ``key`` of a table of release configurations (rules 22 and 26), each checked: release,
    model, system, precision, source, every ``layout`` field but etp, and each of ``settings`` among its values."""
    entries = (io.read_yaml(path, error=CatalogueError) or {}).get(key) or []
    for i, e in enumerate(entries):
        where = f"{path.name}: {key.rstrip('s')} #{i + 1}"
        missing = [
            f
            for f in ("release", "model", "system", "precision", "source", "layout", *settings)
            if f not in e
        ] + [f"layout.{f}" for f in layout if f != "etp" and f not in (e.get("layout") or {})]
        if missing:
            raise CatalogueError(f"{where}: missing {', '.join(missing)}")
        for name, allowed in settings.items():
            if e[name] not in allowed:
                raise CatalogueError(
                    f"{where}: {name} {e[name]!r}: expected one of {', '.join(map(str, allowed))}"
                )
    return tuple(entries)


@cache
def mbridge_presets() -> tuple[dict, ...]:
    """Rule 22: the Megatron-Bridge presets of ``mbridge_presets.yaml``, each checked for its fields."""
    return _release_table(PRESETS_PATH, "presets", PRESET_LAYOUT, PRESET_SETTINGS)


def _mbridge_row(record: dict) -> tuple[str, str, str, str] | None:
    """(release, model, system, precision) of a Megatron-Bridge performance-summary row, from its source."""
    if source_family(record) != "Megatron-Bridge":
        return None
    found = re.search(
        r"'(\d\d\.\d\d(?:\.\d\d)?) NeMo Container' section, (.+?) / (DGX-[\w-]+) row",
        str(record.get("source") or ""),
    )
    if not found:
        return None
    wl = record["workload"]
    precision = wl["precision"] or "bf16"
    if precision == "fp8":
        precision += {"mxfp8": "-mx", "current-scaling": "-cs"}.get(wl.get("fp8_recipe") or "", "")
    return found.group(1), found.group(2), found.group(3), precision


def _preset_layout_of(record: dict) -> dict:
    lay, wl = record["layout"], record["workload"]
    return {
        "num_devices": record["cluster"]["num_devices"],
        "tp": lay["tp"],
        "pp": lay["pp"],
        "cp": lay["cp"],
        "virtual_stages": lay["virtual_stages"] or 1,
        "ep": lay.get("ep") or 1,
        "etp": lay.get("etp") or 1,
        "microbatch_seqs": lay["microbatch_seqs"],
        "global_batch_seqs": wl["global_batch_seqs"],
    }


OVERRIDE_RELEASES_FROM = (
    25,
    11,
)  # rule 22: scripts/performance/utils/overrides.py set_user_overrides
NEMO_CONFIGS_PATH = Path(__file__).with_name("nemo_perf_configs.yaml")  # rule 26
NEMO_LAYOUT = PRESET_LAYOUT + ("seq_len",)


@cache
def nemo_perf_configs() -> tuple[dict, ...]:
    """Rule 26: the NeMo 2 performance configurations of ``nemo_perf_configs.yaml``, each checked for its fields."""
    return _release_table(
        NEMO_CONFIGS_PATH, "configs", NEMO_LAYOUT, {"cuda_graphs": ("none", "scoped")}
    )


def _name_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def nemo_perf_config(record: dict) -> dict | None:
    """Rule 26: the NeMo 2 performance configuration a row of the NeMo Framework performance summary ("(NeMo
    <release>, DGX-<system> table)") ran, where its model, precision and whole layout are the configuration's;
    else None."""
    source = " ".join(
        str(record.get("source") or "").split()
    )  # the YAML folds long sources over lines
    found = re.search(r"\(NeMo (\d\d\.\d\d(?:\.\d\d)?), (DGX-[\w-]+) table\)", source)
    if not found or source_family(record) != "nemo-framework":
        return None
    ours = {**_preset_layout_of(record), "seq_len": record["workload"]["seq_len"]}
    model, precision = _name_key(record["model"]["name"]), record["workload"]["precision"] or "bf16"
    return next(
        (
            e
            for e in nemo_perf_configs()
            if (e["release"], e["system"], e["precision"])
            == (found.group(1), found.group(2), precision)
            and model.startswith(_name_key(e["model"]))
            and all(ours[f] == v for f, v in e["layout"].items())
        ),
        None,
    )


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def mbridge_preset(record: dict) -> tuple[dict | None, list[str]]:
    """Rule 22: (the release preset of a Megatron-Bridge row, or None; the layout fields where the row differs
    from it). The preset whose layout is the row's; else, from 25.11 on (the performance scripts' parallelism
    overrides keep the preset's other settings), the one that differs in the fewest fields, with them; else
    (25.09) None with those fields."""
    row = _mbridge_row(record)
    if row is None:
        return None, []
    release, model, system, precision = row
    ours = _preset_layout_of(record)
    candidates: list[tuple[int, int, dict, list[str]]] = []
    for entry in mbridge_presets():
        # the 25.09 tables give no fp8 recipe: their presets' "fp8" is any
        same_precision = entry["precision"] in (precision, precision.split("-")[0])
        if (entry["release"], entry["model"], entry["system"]) == (
            release,
            model,
            system,
        ) and same_precision:
            differ = [
                f"{f} {ours[f]} (preset {entry['layout'][f]})"
                for f in PRESET_LAYOUT
                if f in entry["layout"] and ours[f] != entry["layout"][f]
            ]
            if not differ:
                return entry, []
            candidates.append((len(differ), len(candidates), entry, differ))
    if not candidates:
        return None, []
    _, _, entry, differ = min(candidates)
    return (entry if _release_key(release) >= OVERRIDE_RELEASES_FROM else None), differ


DEEPSEEK_V3_RECIPE_SPLITS = ((4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4))  # rule 23: (pp, vp)


def recipe_stage_layers(record: dict) -> tuple[int, int] | None:
    """Rule 23: (first, last) stage layers the record states (``layout.first_stage_layers`` and
    ``last_stage_layers``, both), else those of a Megatron-Bridge DeepSeek-V3 row whose (pp, vp) the recipe's
    layout map covers, else None (the engine's split)."""
    lay = record["layout"]
    if lay.get("first_stage_layers") is not None and lay.get("last_stage_layers") is not None:
        return lay["first_stage_layers"], lay["last_stage_layers"]
    pp, vp = lay["pp"], lay["virtual_stages"] or 1
    if record["model"]["num_layers"] != 61 or pp <= 1 or 64 % pp:
        return None
    row = _mbridge_row(record)
    if (
        row is not None
        and row[1].startswith("DeepSeekV3")
        and (pp, vp) in DEEPSEEK_V3_RECIPE_SPLITS
    ):
        return 64 // pp, 64 // pp - 3
    return None


def named_ep_comm_overlap(record: dict) -> bool | None:
    """Rule 17: the expert-parallel AllToAll overlap a MoE record states (``workload.ep_comm_overlap``: the
    Megatron-MoE model zoo's ``A2A_OVERLAP=1``, Megatron's ``--overlap-moe-expert-parallel-comm``), else None."""
    return record["workload"].get("ep_comm_overlap")


def ep_comm_overlap(record: dict) -> bool | None:
    """Rules 17 and 22: the record's AllToAll overlap as it names it, else its Megatron-Bridge preset's where that
    overlaps, else None (the framework profile decides: off for megatron); on, the token AllToAlls hide behind
    the other microbatch's compute."""
    preset = mbridge_preset(record)[0]
    named = named_ep_comm_overlap(record)
    if named is not None:
        return named
    return True if preset and preset["ep_comm_overlap"] else None


def named_cuda_graphs(record: dict) -> str | None:
    """Rule 20: the CUDA graphs a record states (``workload.cuda_graphs``: none, scoped or full_iteration), None
    where it states none."""
    return record["workload"].get("cuda_graphs")


def cuda_graphs(record: dict) -> str:
    """Rules 20, 22 and 26: the CUDA graphs the record names, else its Megatron-Bridge preset's, else its NeMo
    performance configuration's, else none."""
    preset, nemo = mbridge_preset(record)[0], nemo_perf_config(record)
    return named_cuda_graphs(record) or (
        preset["cuda_graphs"] if preset else nemo["cuda_graphs"] if nemo else "none"
    )


# Rule 33: the record frameworks whose fp16 runs keep and reduce fp16 gradients unless told otherwise. Not
# Megatron-DeepSpeed: DeepSpeed's fp16 optimizer keeps fp16 gradients too (the ZeRO paper's 2 bytes), but the
# BLOOM rows' measured peaks lie 19% above a prediction with them (3.5% below with 4 bytes): the memory model
# lacks what else DeepSpeed holds there, so its rows keep 4 until that is costed (docs/run_record_mapping.md).
FP16_GRAD_FRAMEWORKS = {
    "megatron": "Megatron-LM's fp16 keeps and all-reduces fp16 gradients (--accumulate-allreduce-grads-in-fp32 "
    "is off by default and forced on only for bf16)",
}


def half_grads_because(record: dict) -> str | None:
    """Rules 21, 25, 31 and 33: why the record's gradients are 16-bit (the dtype it states,
    ``workload.grad_reduce_dtype``: llm-foundry's PURE mixed precision, Megatron-FSDP's recommended bf16
    gradient communication; else, for a Megatron-Bridge performance-summary row, its release's configuration,
    ``grad_reduce_in_fp32 = False``; else an fp16 Megatron run, ``FP16_GRAD_FRAMEWORKS``),
    or None: fp32, every framework's default with bf16 weights."""
    stated = record["workload"].get("grad_reduce_dtype")
    if stated is not None:
        return "workload.grad_reduce_dtype: bf16 (rule 31)" if stated == "bf16" else None
    if _mbridge_row(record) is not None:
        return (
            "Megatron-Bridge performance configuration: gradients kept and reduced in bf16 "
            "(ddp.grad_reduce_in_fp32 = False)"
        )
    fp16 = FP16_GRAD_FRAMEWORKS.get(record["workload"].get("framework") or "")
    if record["workload"].get("precision") == "fp16" and fp16:
        return f"{fp16} (rule 33)"
    return None


def grad_bytes(record: dict) -> int:
    """Rules 21, 25, 31 and 33: bytes per gradient element the record keeps and its data-parallel reduction moves: 2
    where ``half_grads_because`` gives a reason, else 4."""
    return 2 if half_grads_because(record) else 4


def named_deepep(record: dict) -> bool | None:
    """Rule 17: the token dispatcher a MoE record states (``workload.moe_dispatcher``): DeepEP / HybridEP (True),
    NCCL alltoall (False), or None where it states none."""
    dispatcher = record["workload"].get("moe_dispatcher")
    return None if dispatcher is None else dispatcher != "alltoall"


def deepep(record: dict) -> bool | None:
    """Rules 17 and 22: the dispatcher the record names, else its Megatron-Bridge preset's, else None (the
    framework profile's choice: on for megatron)."""
    named, preset = named_deepep(record), mbridge_preset(record)[0]
    if named is not None:
        return named
    return (preset["dispatcher"] != "alltoall") if preset else None


def fp32_logits(record: dict) -> bool:
    """Rule 28: False for a record whose loss runs on the compute-precision logits
    (``workload.fp32_logits: false``: NeMo Automodel's benchmark configs), else True (every
    framework's default)."""
    return record["workload"].get("fp32_logits") is not False


def vendor_attention(record: dict) -> bool | None:
    """Rule 19: True for a record on Transformer Engine's attention (``workload.vendor_attention``: a NeMo Automodel
    ``_te_`` benchmark config, "TE + ..."), else None (the profile's choice)."""
    return True if record["workload"].get("vendor_attention") else None


# rule 5: a record's workload.fp8_recipe -> Workload.fp8_recipe (delayed and current scaling both scale per tensor)
RECORD_FP8_RECIPES = {
    "delayed-scaling": "tensorwise",
    "current-scaling": "tensorwise",
    "tensorwise": "tensorwise",
    "rowwise": "rowwise",
    "blockwise": "blockwise",
    "mxfp8": "mxfp8",
}


def triton_attention(record: dict) -> bool:
    """Rule 29: True for a record on MPT's 2022 Triton attention kernel (``workload.triton_attention``:
    llm-foundry's benchmark tables, whose ``submit_benchmarks.py`` defaults to ``--attn_impl triton``)."""
    return record["workload"].get("triton_attention") is True


def fp8_recipe(record: dict) -> str | None:
    """Rule 5: the fp8 scaling recipe the record names (``RECORD_FP8_RECIPES``); None where it names none (the
    framework profile's default) or the run is not fp8."""
    wl = record["workload"]
    if wl.get("precision") != "fp8":
        return None
    return RECORD_FP8_RECIPES.get(wl.get("fp8_recipe") or "")


def fp4_recipe(record: dict) -> str | None:
    """Rule 5: the fp4 scaling recipe the record names (``workload.fp4_recipe``: nvfp4, mxfp4); None where it names
    none (NVFP4, the engine's default) or the run is not fp4."""
    wl = record["workload"]
    return wl.get("fp4_recipe") if wl.get("precision") == "fp4" else None


def launch_blocking(record: dict) -> bool:
    """Rule 18: a run launched with CUDA_LAUNCH_BLOCKING=1 (``workload.launch_blocking``: BLOOM's tr11 slurm, the
    production run and the prequel's rows from 2022-02-18 on)."""
    return bool(record["workload"].get("launch_blocking"))


def automodel_ep(record: dict) -> int | None:
    """Rule 17: a NeMo Automodel record on DeepEP with ep null runs ep = its FSDP shard group (where it divides
    the experts); None otherwise."""
    lay, moe = record["layout"], (record["model"].get("moe") or {})
    if (
        lay.get("ep") is not None
        or record["workload"].get("framework") != "nemo-automodel"
        or not deepep(record)
        or not lay.get("fsdp")
        or not moe.get("num_experts")
        or moe["num_experts"] % lay["fsdp"]
    ):
        return None
    return lay["fsdp"]


def assumed_fields(record: dict) -> list[str]:
    """Rule 27: the record's null fields that ``record_to_problem`` fills with a value least favourable
    in one direction: ``layout.recompute`` without a named policy (none: the largest activation memory)
    and, for a MoE record with expert parallelism, ``workload.ep_comm_overlap`` without a preset that
    says it (the framework profile's default: off for megatron, every AllToAll exposed). An unstated
    schedule is not one of them: it is the fastest its framework runs (``unstated_schedules``)."""
    lay, out = record["layout"], []
    if lay["recompute"] is None and not named_policy(record):
        out.append("layout.recompute")
    if record["model"].get("moe") is not None and (lay.get("ep") or 1) > 1:
        if ep_comm_overlap(record) is None:
            out.append("workload.ep_comm_overlap")
    return out


def tp_comm_overlap(record: dict) -> bool | None:
    """Rule 11: NeMo and Megatron-Core (2024+) runs, and async-TP runs, overlap TP collectives with their GEMMs;
    the others as their framework profile does (None)."""
    if source_family(record) in TP_OVERLAP_SOURCES or record["layout"].get("async_tp") is True:
        return True
    return None


def release_workload(field: str) -> Callable[[dict], Any]:
    """Rule 32: the rule of a workload ``field`` (``RELEASE_WORKLOAD_FIELDS`` and ``cross_entropy``): the record's
    own where it states it (a run that set the release's flag otherwise: Narayanan et al.'s 1.7B to 18B rows ran
    PyTorch's DDP, the larger ones Megatron's local DDP), else what its framework release sets
    (``framework_releases.yaml``: the Megatron-LM of 2021 waited for its backward TP collectives and its gradient
    all-reduce, and added each microbatch's gradients in a kernel of their own; it and BigScience's
    Megatron-DeepSpeed ran Megatron's unfused cross entropy, rule 34); None: the profile's choice."""

    def rule(record: dict) -> Any:
        stated = record["workload"].get(field)
        if stated is not None:
            return stated
        release = release_of(record)
        return release.get(field) if isinstance(release, dict) else None

    return rule


def torch_compile(record: dict, framework: str) -> bool | None:
    """Rule 30: the record's ``workload.torch_compile`` where its framework profile has the choice
    (torchtitan's: eager PyTorch costed with one kernel per op), else None (the profile's own fused
    kernels; null: the profile's default, compiled)."""
    stated = record["workload"].get("torch_compile")
    return stated if profile_of(framework).torch_compile is not None else None


def compiled_loss(record: dict, framework: str) -> bool | None:
    """Rule 30: the record's ``workload.compiled_loss`` where its framework profile has the choice; else, for
    a record of another framework the profile stands for (llm-foundry, pytorch-fsdp, nemo-automodel), False:
    their losses are not torch-compiled; else None (the profile's: torchtitan compiles the loss)."""
    if profile_of(framework).compiled_loss is None:
        return None
    stated = record["workload"].get("compiled_loss")
    if stated is not None:
        return stated
    return None if record["workload"].get("framework") == "torchtitan" else False


def record_framework(record: dict, accelerator_kind: str) -> str:
    """Rule 14: the framework profile a record is costed with."""
    if zero3_collectives_per_layer(record) > 1:  # DeepSpeed ZeRO-3 of 2021 (rule 9)
        return "deepspeed"
    return framework_of_record(record["workload"].get("framework"), accelerator_kind)


def zero3_collectives_per_layer(record: dict) -> int:
    """Rule 9: the ZeRO-3 collectives per layer the record states (``workload.fsdp_collectives_per_layer``: 12
    per-tensor ones for DeepSpeed ZeRO-3 of 2021, GPT layer tensors) on a ZeRO-3 layout, else 1."""
    stated = record["workload"].get("fsdp_collectives_per_layer")
    return stated if stated and record["layout"]["zero_stage"] == 3 else 1


def fused_attention(record: dict) -> bool:
    """Rule 8: fused attention, unless the record states otherwise (``workload.fused_attention: false``: runs that
    predate it, of 2021 and before, and BigScience tr11)."""
    return record["workload"].get("fused_attention") is not False


def named_policy(record: dict) -> str | None:
    """Rule 15: the framework's own checkpoint policy where the record states one (``layout.recompute_policy``:
    MaxText ``remat_policy=minimal``; a custom remat with host offload, ``custom_offload_policy``), costed as that
    policy's saved tensors (costs.memory.POLICY_SAVES) instead of the record's none/selective/full approximation."""
    return record["layout"].get("recompute_policy")


MEGATRON_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)


def recompute_modules(record: dict) -> set[str]:
    """Rule 15: the Megatron ``--recompute-modules`` a selective record states (``layout.recompute_modules``)."""
    return set(record["layout"].get("recompute_modules") or ())


def modules_policy(record: dict) -> str | None:
    """Rule 15: a selective record's Megatron modules as the policy that recomputes the same: layernorm and
    moe_act (with mlp: the few dense layers' MLP, the nearest) -> norm_act; layernorm and moe (with mlp,
    moe_act) -> norm_moe; on a latent-attention model layernorm and mla_up_proj (with mlp, moe_act: the
    nearest) -> norm_mla_up_proj, mla_up_proj (with mlp, moe_act: the nearest) -> mla_up_proj; None otherwise
    (core_attn is the engine's selective; mlp alone or shared_experts keep selective, the nearest)."""
    if record["layout"]["recompute"] != "selective":
        return None
    modules = recompute_modules(record)
    if modules & {"layernorm", "moe_act"} and modules <= {"layernorm", "moe_act", "mlp"}:
        return "norm_act"
    if "moe" in modules and modules <= {"layernorm", "moe", "mlp", "moe_act"}:
        return "norm_moe"
    if (
        "mla_up_proj" in modules
        and modules <= {"mla_up_proj", "mlp", "moe_act", "layernorm"}
        and is_mla(record)
    ):
        return "norm_mla_up_proj" if "layernorm" in modules else "mla_up_proj"
    return None


def custom_offload_policy(record: dict) -> str | None:
    """Rule 15: the custom_offload_* policy a record states (a MaxText custom remat policy with host offload, the
    same offloaded tensors), else None."""
    policy = named_policy(record)
    return policy if policy and policy.startswith("custom_offload_") else None


def mapping_notes(record: dict) -> list[str]:
    """The approximations and defaults ``record_to_problem`` applies to this record (docs/run_record_mapping.md)."""
    lay, notes = record["layout"], []
    if lay["sequence_parallel"] is None and (lay["tp"] or 1) > 1:
        notes.append(f"sequence_parallel null -> {not _is_bigscience(record)}")
    if isinstance(release_of(record), str):
        notes.append(str(release_of(record)))
    if custom_offload_policy(record):
        notes.append(
            f"recompute -> {custom_offload_policy(record)} (MaxText custom remat with host offload)"
        )
    elif named_policy(record):
        notes.append(f"recompute -> the named policy {named_policy(record)}")
    elif modules_policy(record):
        notes.append(
            f"recompute -> {modules_policy(record)} (Megatron --recompute-modules "
            f"{' '.join(sorted(recompute_modules(record)))})"
        )
    elif lay["recompute"] is None:
        notes.append("recompute null -> none")
    if lay["microbatch_seqs"] is None and lay["num_microbatches"] is None:
        notes.append(
            "microbatch_seqs and num_microbatches null -> the count the stated degrees run fastest with "
            "among those that fit (a tuned benchmark's choice)"
        )
    elif lay["microbatch_seqs"] is None or lay["num_microbatches"] is None:
        notes.append("microbatch_seqs null -> 1, num_microbatches = batch / (dp x microbatch_seqs)")
    if lay.get("schedule") is None and lay["virtual_stages"] is None and (lay["pp"] or 1) > 1:
        notes.append(
            "schedule and virtual_stages null -> the fastest schedule the framework runs (1F1B, GPipe, or "
            "interleaved at a whole-layer chunk count) among those that fit (a tuned benchmark's choice)"
        )
    if lay.get("schedule") == "interleaved" and lay["virtual_stages"] is None:
        notes.append(
            "schedule interleaved, virtual_stages null -> the chunk count the stated degrees run fastest "
            "with among those that fit (a tuned benchmark's choice)"
        )
    if record["workload"]["precision"] is None:
        notes.append("precision null -> bf16")
    hbm = record["cluster"].get("hbm_gb_per_device")
    if hbm is not None:
        notes.append(
            f"HBM {hbm:g} GB per device (cluster.hbm_gb_per_device) instead of the catalogue's"
        )
    if (
        record["cluster"]["accelerator"] in ACCELERATOR_ALIASES
        and record["cluster"]["accelerator"] not in accelerator_names()
    ):
        notes.append("h800 costed as an H100 with NVLink at 200 GB/s per direction")
    framework = record["workload"].get("framework")
    if framework not in RECORD_FRAMEWORKS and _accelerator_id(record) in accelerator_names():
        kind = load_accelerator(_accelerator_id(record)).kind
        notes.append(
            f"framework {framework if framework is None else repr(framework)} -> the {kind}'s default "
            f"profile ({default_framework(kind)})"
        )
    if zero3_collectives_per_layer(record) > 1 and framework != "megatron-deepspeed":
        notes.append("DeepSpeed ZeRO-3 (2021) costed with the deepspeed profile")
    if vendor_attention(record):
        notes.append("Transformer Engine attention (attn: te): the vendor's fused attention")
    if triton_attention(record):
        notes.append("MPT's Triton attention (attn_impl: triton), not FlashAttention-2")
    if not fp32_logits(record):
        notes.append(
            "loss on bf16 logits (fp32_upcast: false): the logits and their gradient in 2 bytes"
        )
    if launch_blocking(record):
        notes.append(
            "CUDA_LAUNCH_BLOCKING=1 (BLOOM tr11 slurm): blocking launches, nothing overlapped"
        )
    if named_cuda_graphs(record) not in (None, "none"):
        notes.append(f"CUDA graphs: {named_cuda_graphs(record)}, as the record names them")
    preset, differ = mbridge_preset(record)
    if preset:
        commit, path, *name = preset["source"].split()
        layout = (
            f"its parallelism overridden ({', '.join(differ)})" if differ else "the row's layout"
        )
        notes.append(
            f"Megatron-Bridge {preset['release']} preset ({' '.join(name) or path} @ {commit}), {layout}: "
            f"CUDA graphs {cuda_graphs(record)}, AllToAll overlap "
            f"{'on' if ep_comm_overlap(record) else 'off'}, dispatcher "
            f"{'DeepEP/HybridEP' if deepep(record) else 'alltoall'} where the row names none"
        )
    elif differ:
        notes.append(
            f"Megatron-Bridge preset not applied: the row's layout differs ({', '.join(differ)})"
        )
    nemo = nemo_perf_config(record)
    if nemo and not named_cuda_graphs(record):
        tag, commit, path, key = nemo["source"].split()
        notes.append(
            f"NeMo {nemo['release']} performance configuration ({path.rsplit('/', 1)[1]} {key} @ {tag}, "
            f"{commit.strip('()')}), the row's layout: CUDA graphs {nemo['cuda_graphs']}"
            + (
                " (per-layer graphs: Megatron's enable_cuda_graph)"
                if nemo["cuda_graphs"] == "scoped"
                else ""
            )
        )
    stage_layers = recipe_stage_layers(record)
    if stage_layers:
        first, last = stage_layers
        whose = (
            "as the record states it"
            if lay.get("first_stage_layers") is not None
            else "of the Megatron-Bridge DeepSeek-V3 recipe"
        )
        notes.append(
            f"pipeline split {whose}: first stage {first} layers, last {last} (with the output head"
            f"{', the MTP module' if record['model'].get('mtp_num_layers') else ''} and the loss)"
        )
    half_grads = half_grads_because(record)
    if half_grads:
        notes.append(half_grads)
    if lay.get("async_tp") is True and source_family(record) not in TP_OVERLAP_SOURCES:
        notes.append("async_tp: TP collectives pipelined with their GEMMs (tp_comm_overlap on)")
    return notes + _moe_notes(record)


def _microbatching(record: dict) -> tuple[int, int] | str:
    """(microbatch_seqs, num_microbatches) per data-parallel rank, defaults filled; or a skip reason."""
    lay, batch = record["layout"], record["workload"]["global_batch_seqs"]
    mbs = lay["microbatch_seqs"] or 1
    k = lay["num_microbatches"] or batch // (lay["dp"] * mbs)
    if lay["dp"] * mbs * k != batch:
        return f"global_batch_seqs({batch}) != dp({lay['dp']}) x microbatch_seqs({mbs}) x num_microbatches({k})"
    return mbs, k


def fastest_microbatching(problem: Problem, est: Estimate) -> Estimate:
    """Rule 27: a record stating neither ``microbatch_seqs`` nor ``num_microbatches`` is costed at the microbatch
    count its stated degrees run fastest with among those that fit (a published benchmark's tuned choice, as the
    placement is the fastest axis order); ``est``, one sequence a microbatch, where none fits."""
    # one sequence a microbatch: the count is the data-parallel rank's sequences
    per_replica = est.layout.num_microbatches
    counts = (k for k in range(1, per_replica) if per_replica % k == 0)
    return _fastest(problem, est, (replace(est.layout, num_microbatches=k) for k in counts)) or est


def stated_chunks(schedule: str) -> int | None:
    """Rule 27: the virtual stages a record's stated ``layout.schedule`` runs where ``virtual_stages`` is null:
    the one count the schedule takes (``rules.SCHEDULE_VIRTUAL_STAGES``: 1 for 1F1B, GPipe and DualPipe, 2 for
    the V-shaped ones; ZB-H1's default 1); None for the interleaved schedule, whose count is chosen
    (``fastest_chunks``)."""
    values, _ = SCHEDULE_VIRTUAL_STAGES[schedule]
    if values is None:
        return 1
    return values[0] if isinstance(values, tuple) else None


def unstated_schedules(record: dict, framework: str) -> tuple[str, ...]:
    """Rule 27: the schedules a record with pp > 1 that states neither ``layout.schedule`` nor
    ``layout.virtual_stages`` may have run: its framework's (the export target's ``pipeline_schedules``)
    among 1F1B, GPipe and interleaved 1F1B, the classic ones (a zero-bubble or DualPipe run names its
    schedule); () where the record states either or pp is 1."""
    lay = record["layout"]
    if (
        lay.get("schedule") is not None
        or lay["virtual_stages"] is not None
        or (lay["pp"] or 1) == 1
    ):
        return ()
    caps = capabilities_of(framework) if framework in TARGETS else None
    runs = caps.pipeline_schedules if caps else SCHEDULES
    return tuple(s for s in ("1f1b", "gpipe", "interleaved") if s in runs)


def fastest_chunks(
    record: dict, problem: Problem, est: Estimate, or_as_is: bool = False
) -> Estimate | None:
    """Rule 27: a record stating the interleaved schedule (``layout.schedule``) but not its chunk count is
    costed at the fastest of its interleavings that fit, as ``fastest_microbatching`` (a published benchmark's
    tuned choice), among those with whole layers a chunk, the same on every stage (Megatron's
    ``--num-layers-per-virtual-pipeline-stage``); with ``or_as_is`` (a record that states no schedule,
    ``unstated_schedules``), ``est`` itself where no interleaving is faster. None where the rules allow
    none."""
    per_stage, uneven = divmod(problem.model.num_layers, est.layout.pp)
    chunks = [v for v in range(2, per_stage + 1) if not uneven and per_stage % v == 0]
    return _fastest(
        problem, est if or_as_is else None, _interleavings(record, problem, est, chunks)
    )


def _interleavings(record: dict, problem: Problem, est: Estimate, chunks):
    """``est``'s layout interleaved at each of the chunk counts ``chunks``, and at every microbatch count too
    where the record states that neither (as ``fastest_microbatching``)."""
    lay = record["layout"]
    per_replica = record["workload"]["global_batch_seqs"] // (est.layout.dp * est.layout.fsdp)
    unstated_k = lay["microbatch_seqs"] is None and lay["num_microbatches"] is None
    counts = [k for k in range(1, per_replica + 1) if per_replica % k == 0] if unstated_k else []
    interleaved = replace(est.layout, schedule="interleaved")
    return (
        replace(interleaved, virtual_stages=v, num_microbatches=k)
        for v in chunks
        for k in counts or [est.layout.num_microbatches]
    )


def _fastest(problem: Problem, best: Estimate | None, layouts) -> Estimate | None:
    """The fastest of ``best`` and the ``layouts`` the rules allow that are predicted to fit (each placed anew,
    the fastest axis order); one that fits beats one that does not; None where ``best`` is None and the rules
    allow none of ``layouts``."""
    for layout in layouts:
        candidate = replace(layout, axes=None)
        if check_layout(problem, candidate):
            continue
        other = estimate(problem, candidate, strict=False)
        if best is None or (other.fits and (not best.fits or other.step_time_s < best.step_time_s)):
            best = other
    return best


def _data_parallel(record: dict) -> tuple[int, int, int]:
    """(engine dp, engine fsdp, zero_stage): split the record's total dp into replicated x sharded."""
    lay = record["layout"]
    if lay["zero_stage"] == 0:
        return lay["dp"], 1, 0
    shard = lay["fsdp"] if lay["fsdp"] > 1 else lay["dp"]
    return lay["dp"] // shard, shard, lay["zero_stage"]


H800_NVLINK_BYTES_PER_S = 200e9  # hardware.md: H800 NVLink 400 GB/s bidirectional


def _accelerator_id(record: dict) -> str:
    """The catalogue id the record is costed on (``ACCELERATOR_ALIASES`` when the catalogue lacks the id)."""
    acc = record["cluster"]["accelerator"]
    return acc if acc in accelerator_names() else ACCELERATOR_ALIASES.get(acc, acc)


def _is_h800(record: dict) -> bool:
    return record["cluster"]["accelerator"] == "h800"


def _with_hbm(cluster: Cluster, hbm_gb: float | None) -> Cluster:
    """The cluster with the record's HBM per device (GB) in place of the catalogue's (rule 10)."""
    if hbm_gb is None:
        return cluster
    return replace(cluster, accelerator=replace(cluster.accelerator, hbm_bytes=hbm_gb * GB))


def _cluster(record: dict, replicas: int) -> Cluster | str:
    """The engine cluster for the record (multislice TPU when ``replicas`` > 1); or a skip reason."""
    c = record["cluster"]
    acc, n = _accelerator_id(record), c["num_devices"]
    try:
        if load_accelerator(acc).kind == "gpu":
            so = c["scale_out_gbytes_per_s_per_device"]
            cluster = resolve_cluster(f"{acc}-{n}", c["devices_per_node"], so * GB if so else None)
            if _is_h800(record):
                axes = tuple(
                    replace(a, bytes_per_s_per_direction=H800_NVLINK_BYTES_PER_S)
                    if a.kind == "switch"
                    else a
                    for a in cluster.axes
                )
                cluster = replace(cluster, axes=axes)
        elif replicas > 1:
            if n % replicas:
                return f"{n} chips do not split into {replicas} slices"
            cluster = resolve_cluster(f"{acc}-{n // replicas}x{replicas}")
        else:
            cluster = resolve_cluster(f"{acc}-{n}")
    except LayoutsearchError as exc:
        return f"cluster: {exc}"
    return _with_hbm(cluster, c.get("hbm_gb_per_device"))


def _divisors(n: int) -> list[int]:
    """The divisors of n in increasing order (trial division up to sqrt(n))."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def tpu_slices(record: dict) -> int | str:
    """Slices of a multislice TPU record: the replicated part of ZeRO-3 data parallelism; else, when
    the chips exceed the largest slice, the fewest equal slices (of 2 chips or more) that are valid
    slice shapes; else 1. A count that is neither one slice nor such a split is a skip reason."""

    lay, acc = record["layout"], load_accelerator(_accelerator_id(record))
    if acc.kind != "tpu":
        return 1
    if lay["zero_stage"] == 3 and lay["fsdp"] > 1 and lay["dp"] // lay["fsdp"] > 1:
        return lay["dp"] // lay["fsdp"]
    n = record["cluster"]["num_devices"]
    if torus_shape(acc, n) is not None:
        return 1
    largest = math.prod(acc.max_slice_shape)
    if n > largest:
        for k in _divisors(n):  # fewest slices first
            if 1 < k < n and n // k <= largest and torus_shape(acc, n // k) is not None:
                return k
        return f"cluster: {n} {acc.id} chips is more than one slice ({largest}) and no whole number of equal valid slices"
    return f"cluster: {n} {acc.id} chips is not a slice shape (one slice holds up to {largest})"


def is_mla(record: dict) -> bool:
    """Rule 16: latent attention: ``model.attention: mla``, or a ``model.mla`` block with attention null."""
    m = record["model"]
    return m.get("attention") == "mla" or (m.get("attention") is None and m.get("mla") is not None)


def _missing(record: dict) -> list[str]:
    """Rules 13 and 16: the dotted fields the engine needs that the record leaves null."""
    m = record["model"]
    moe, mla = m.get("moe"), is_mla(record)
    optional = ({"d_ff"} if moe is not None else set()) | (
        {"head_dim", "num_kv_heads"} if mla else set()
    )
    missing = [
        f"{block}.{key}"
        for block, keys in ENGINE_NEEDS.items()
        for key in keys
        if record[block][key] is None and not (block == "model" and key in optional)
    ]
    if moe is not None:
        missing += [f"model.moe.{key}" for key in MOE_NEEDS if moe[key] is None]
    if mla:
        missing += (
            ["model.mla"]
            if m.get("mla") is None
            else [f"model.mla.{key}" for key in MLA_NEEDS if m["mla"][key] is None]
        )
    return missing


def _unmodelled(record: dict) -> str | None:
    """Rule 13: the first reason the engine cannot cost this record at all, or None."""
    lay = record["layout"]
    missing = _missing(record)
    if missing:
        return f"missing value: {', '.join(missing)} null (the engine needs {'it' if len(missing) == 1 else 'them'})"
    if lay["dp"] % lay["fsdp"]:
        return f"layout: fsdp({lay['fsdp']}) does not divide the total data-parallel degree dp({lay['dp']})"
    if lay["recompute"] not in (None, *RECOMPUTE):
        return f"layout: recompute '{lay['recompute']}' is not one of {', '.join(RECOMPUTE)}"
    if lay.get("recompute_policy") not in (None, *RECOMPUTE_POLICIES):
        return f"layout: recompute_policy '{lay['recompute_policy']}' is not one of {', '.join(RECOMPUTE_POLICIES)}"
    if lay.get("activation_offload_layers"):
        return (
            f"layout: activation_offload_layers {lay['activation_offload_layers']}: the activations of whole "
            "layers offloaded to host memory (Megatron's cpu_offloading_num_layers) are not modelled"
        )
    return None


def model_dict(record: dict) -> dict | str:
    """The catalogue-style model mapping of a record (``model_from_dict``'s input; rules 6 and 16),
    or a skip reason. Assumes ``_unmodelled`` found nothing missing."""
    m = record["model"]
    shape = {k: m[k] for k in MODEL_KEYS}
    moe = m.get("moe")
    if moe is not None:
        first, freq, shared = (
            moe["first_dense_layers"] or 0,
            moe["moe_layer_freq"] or 1,
            moe["num_shared_experts"] or 0,
        )
        if shared and moe["shared_d_ff"] is None:
            return f"missing value: model.moe.shared_d_ff null with num_shared_experts({shared}) (the engine needs it)"
        if m["d_ff"] is None:
            if first or freq != 1:
                return (
                    f"missing value: model.d_ff null (every layer MoE) but moe.first_dense_layers({first}) and "
                    f"moe_layer_freq({freq}) leave dense layers, whose FFN width the engine needs"
                )
            shape["d_ff"] = moe["expert_d_ff"]  # no dense layer: the dense width is never used
        shape["moe"] = {
            "num_experts": moe["num_experts"],
            "top_k": moe["top_k"],
            "expert_d_ff": moe["expert_d_ff"],
            "num_shared_experts": shared,
            "shared_d_ff": moe["shared_d_ff"] if shared else 0,
            "first_dense_layers": first,
            "layer_freq": freq,
            "capacity_factor": moe["capacity_factor"],
        }
    if m.get("mla") is not None and not is_mla(record):
        return f"model: attention '{m['attention']}' with a model.mla block (latent attention is attention: mla)"
    if is_mla(record):
        a = {key: m["mla"][key] for key in MLA_NEEDS}
        shape.update(
            head_dim=a["qk_nope_head_dim"] + a["qk_rope_head_dim"],
            num_kv_heads=m["num_heads"],
            mla=a,
        )
    if m.get("parallel_block"):  # rule 6: attention and MLP read one norm's output
        shape.update(parallel_block=True, norms_per_layer=1)
    if m.get("mtp_num_layers"):
        shape["mtp_layers"] = m["mtp_num_layers"]
    if m.get("sliding_window") is not None:  # gpt-oss: windowed and full layers alternate
        shape.update(
            sliding_window=m["sliding_window"],
            full_attention_layers=m.get("full_attention_layers") or 0,
        )
    return shape


def record_model(record: dict):
    """The engine ``ModelSpec`` of a record (``model_from_dict`` of ``model_dict``), or a skip reason."""
    shape = model_dict(record)
    if isinstance(shape, str):
        return shape
    try:
        return model_from_dict(
            {"name": record["id"], **shape}, record["id"], f"record '{record['id']}'"
        )
    except CatalogueError as exc:
        return f"model: {exc}"


def routing(record: dict) -> str | None:
    """Rule 16: "real", "forced" or "not stated" for a MoE record (its ``workload.moe_routing``; null: not
    stated), else None."""
    if record["model"].get("moe") is None:
        return None
    return record["workload"].get("moe_routing") or "not stated"


def _moe_notes(record: dict) -> list[str]:
    """Rule 16's approximations and defaults for a MoE or MLA record."""
    m, lay, notes = record["model"], record["layout"], []
    moe = m.get("moe")
    if moe is not None:
        if m["d_ff"] is None and moe["expert_d_ff"] is not None:
            notes.append("d_ff null: every layer MoE")
        if automodel_ep(record):
            notes.append(
                f"ep null -> {automodel_ep(record)} (Automodel on DeepEP: ep_size = the FSDP shard group)"
            )
        notes += [
            f"{key} null -> 1"
            for key in ("ep", "etp")
            if lay.get(key) is None and not (key == "ep" and automodel_ep(record))
        ]
        if named_deepep(record) is not None:
            notes.append(
                f"token dispatch: {'DeepEP/HybridEP (once per destination GPU and node)' if deepep(record) else 'NCCL alltoall (once per expert)'}, as the record names it"
            )
        how = routing(record)
        assert how is not None  # a MoE record's routing is always classified
        notes.append(
            {
                "real": "real routing (workload.moe_routing): costed learned",
                "forced": "routing force-balanced (workload.moe_routing): costed forced (random routing)",
                "not stated": "routing balance not stated: costed learned (the engine's default)",
            }[how]
        )
    if is_mla(record) and m.get("mla") is not None:
        width = (m["mla"]["qk_nope_head_dim"] or 0) + (m["mla"]["qk_rope_head_dim"] or 0)
        if m["head_dim"] != width or m["num_kv_heads"] != m["num_heads"]:
            notes.append(
                f"MLA: head_dim {m['head_dim']} -> {width} (qk_nope + qk_rope), num_kv_heads -> num_heads"
            )
    if m.get("mtp_num_layers"):
        notes.append(
            f"MTP: {m['mtp_num_layers']} module(s) counted beside the model, costed as a layer and an "
            f"output-head pass each on the last stage (not their memory)"
        )
    if m.get("sliding_window") is not None:
        notes.append(
            f"sliding window {m['sliding_window']} (model.sliding_window): costed, "
            f"{m.get('full_attention_layers') or 0} of {m['num_layers']} layers attend over the whole sequence"
        )
    if m.get("notes") and moe is not None:  # free text: shown, never read
        notes.append(f"model notes not costed: {m['notes']}")
    return notes


def _power_capped(record: dict) -> str | None:
    """Rule 10: a skip reason for a power cap the engine cannot model, else None. A
    ``power_limit_w`` is evaluated with the cap (``Workload.power_limit_w``, costs.power) when the
    part's catalogue file gives its board power (the record's text is never read for a wattage)."""
    limit = record["cluster"].get("power_limit_w")
    if limit is None:
        return None
    acc = load_accelerator(_accelerator_id(record))
    if acc.board_power_w is None:
        return f"power-capped part: power_limit_w {limit:g} W, but {acc.id} has no board_power_w in the catalogue"
    if limit <= (acc.idle_power_w or 0.0):
        return (
            f"power_limit_w {limit:g} W is not above {acc.id}'s idle power {acc.idle_power_w:g} W"
        )
    return None


RELEASES_PATH = Path(__file__).with_name("framework_releases.yaml")  # rule 32
RELEASE_FIELDS = ("degrees", "zero_stages", "recompute", "sequence_parallel", "schedules")
RELEASE_WORKLOAD_FIELDS = (
    "tp_backward_async",
    "grad_accumulation_fusion",
    "pp_comm_overlap",
    "grad_reduce_overlap",
)  # its own steps' costing


# the Workload fields a record's rule decides from the record alone (docs/run_record_mapping.md)
WORKLOAD_RULES: dict[str, Callable[[dict], Any]] = {
    "fp8_recipe": fp8_recipe,
    "fp4_recipe": fp4_recipe,
    "flash_attention": fused_attention,
    "fsdp_collectives_per_layer": zero3_collectives_per_layer,
    "tp_comm_overlap": tp_comm_overlap,
    **{field: release_workload(field) for field in RELEASE_WORKLOAD_FIELDS},
    "ep_comm_overlap": ep_comm_overlap,
    "deepep": deepep,
    "vendor_attention": vendor_attention,
    "fp32_logits": fp32_logits,
    "triton_attention": triton_attention,
    "launch_blocking": launch_blocking,
    "cuda_graphs": cuda_graphs,
    "grad_bytes_per_param": grad_bytes,
    "cross_entropy": release_workload("cross_entropy"),  # rule 34
}


@cache
def framework_releases() -> dict[str, dict]:
    """Rule 32: the framework releases of ``framework_releases.yaml``, each checked: its record framework,
    a source, and each restriction among the values the search knows."""
    releases = (io.read_yaml(RELEASES_PATH, error=CatalogueError) or {}).get("releases") or {}
    known = {
        "degrees": ALL_DEGREE_NAMES,
        "zero_stages": (0, 1, 2, 3),
        "recompute": RECOMPUTE_POLICIES,
        "schedules": SCHEDULES,
    }
    for name, e in releases.items():
        where = f"{RELEASES_PATH.name}: {name}"
        missing = [f for f in ("framework", "what", "source") if not e.get(f)]
        if missing:
            raise CatalogueError(f"{where}: missing {', '.join(missing)}")
        if e["framework"] not in RECORD_FRAMEWORKS:
            raise CatalogueError(f"{where}: framework {e['framework']!r} is not a record framework")
        unknown = set(e) - {
            "framework",
            "what",
            "source",
            *RELEASE_FIELDS,
            *RELEASE_WORKLOAD_FIELDS,
            "cross_entropy",
        }
        if unknown:
            raise CatalogueError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        for field, allowed in known.items():
            bad = [v for v in e.get(field, ()) if v not in allowed]
            if bad:
                raise CatalogueError(
                    f"{where}: {field} {', '.join(map(str, bad))}: expected among {', '.join(map(str, allowed))}"
                )
        if e.get("cross_entropy", "te") not in CROSS_ENTROPIES:
            raise CatalogueError(
                f"{where}: cross_entropy {e['cross_entropy']!r}: expected among {', '.join(CROSS_ENTROPIES)}"
            )
        for flag in ("sequence_parallel", *RELEASE_WORKLOAD_FIELDS):
            if not isinstance(e.get(flag, True), bool):
                raise CatalogueError(f"{where}: {flag} {e[flag]!r}: expected true or false")
    return releases


def release_of(record: dict) -> dict | str | None:
    """Rule 32: the framework release the record names (``workload.framework_release``), None when it names
    none, or why it is not used: a release the table lacks, or one of another framework."""
    name = record["workload"].get("framework_release")
    if name is None:
        return None
    release = framework_releases().get(name)
    if release is None:
        return (
            f"workload.framework_release '{name}': not in {RELEASES_PATH.name}"
            f"{did_you_mean(name, list(framework_releases()))}; the claim searches every choice"
        )
    framework = record["workload"].get("framework")
    if release["framework"] != framework:
        return (
            f"workload.framework_release '{name}' is a {release['framework']} release, not of "
            f"workload.framework '{framework}'; the claim searches every choice"
        )
    return release


def release_options(record: dict, published: Layout) -> SearchOptions:
    """Rule 32: the search among what the record's framework release could run (``release_of``), widened by the
    published layout's own values (it ran them); the full search without a release it can use."""
    release = release_of(record)
    if not isinstance(release, dict):
        return SearchOptions()
    degrees = published.all_degrees
    changes: dict[str, Any] = {}
    if "degrees" in release:
        changes["only"] = tuple(d for d in degrees if d in release["degrees"] or degrees[d] > 1)
    if "zero_stages" in release:
        zero = int(effective_zero(candidate_of(published))[0])
        changes["zero_stages"] = tuple(sorted({*release["zero_stages"], zero}))
    if "recompute" in release:
        changes["recompute"] = tuple(
            p for p in RECOMPUTE_POLICIES if p in release["recompute"] or p == published.recompute
        )
    if release.get("sequence_parallel") is False:
        changes["sequence_parallel"] = published.sequence_parallel and published.tp > 1
    if "schedules" in release:
        changes["schedules"] = tuple(
            s for s in SCHEDULES if s in release["schedules"] or s == published.schedule
        )
        if "interleaved" not in changes["schedules"]:
            changes["max_virtual_stages"] = published.virtual_stages
    return SearchOptions(**changes)


def record_to_problem(record: dict) -> Mapped | str:
    """(engine Problem, placed Layout) for a record, or a skip reason (docs/run_record_mapping.md).

    The placement is the fastest of the cluster's axis orders (``estimate`` of the unplaced layout).
    """
    mapped = record_to_estimate(record)
    return mapped if isinstance(mapped, str) else mapped[:2]


def record_to_estimate(record: dict) -> tuple[Problem, Layout, Estimate] | str:
    """``record_to_problem``'s (Problem, placed Layout) and the placed layout's ``estimate`` (not strict),
    which placing it costed already; or the skip reason."""
    wl, lay = record["workload"], record["layout"]
    reason = _unmodelled(record)
    if reason:
        return reason
    if wl["precision"] in UNMODELLED_PRECISIONS:  # rule 5: delete when the engine costs fp8
        return f"{wl['precision']} precision: not modelled yet (no fp8 matmul rate or byte counts in the engine)"
    if wl["precision"] not in (None, *ENGINE_PRECISIONS):
        costed = "/".join(x for x in ENGINE_PRECISIONS if x not in UNMODELLED_PRECISIONS)
        return f"precision '{wl['precision']}': the engine models {costed} training only"
    acc = record["cluster"]["accelerator"]
    if _accelerator_id(record) not in accelerator_names():
        return f"unknown accelerator '{acc}'{did_you_mean(acc, accelerator_names())}: not in the catalogue"
    capped = _power_capped(record)
    if capped:
        return capped
    model = record_model(record)
    if isinstance(model, str):
        return model
    mb = _microbatching(record)
    if isinstance(mb, str):
        return mb
    framework = record_framework(record, load_accelerator(_accelerator_id(record)).kind)
    workload = Workload(
        global_batch_seqs=wl["global_batch_seqs"],
        seq_len=wl["seq_len"],
        precision=wl["precision"] or "bf16",
        routing="forced" if routing(record) == "forced" else "learned",
        framework=framework,
        torch_compile=torch_compile(record, framework),
        compiled_loss=compiled_loss(record, framework),
        power_limit_w=record["cluster"].get("power_limit_w"),
        **{field: rule(record) for field, rule in WORKLOAD_RULES.items()},
    )
    dp, fsdp, zero = _data_parallel(record)
    replicas = tpu_slices(record)
    if isinstance(replicas, str):
        return replicas
    cluster = _cluster(record, replicas)
    if isinstance(cluster, str):
        return cluster
    stated = lay.get("schedule")
    searched = stated == "interleaved" and lay["virtual_stages"] is None  # rule 27: fastest_chunks
    unstated = unstated_schedules(record, framework)  # rule 27: the fastest its framework runs
    vs = lay["virtual_stages"] or (stated_chunks(stated) if stated else None) or 1
    sp = (
        lay["sequence_parallel"]
        if lay["sequence_parallel"] is not None
        else (lay["tp"] > 1 and not _is_bigscience(record))
    )
    split = (lay.get("first_stage_layers"), lay.get("last_stage_layers"))
    if (split[0] is None) != (split[1] is None):
        return (
            "layout.first_stage_layers and last_stage_layers: a pipeline split states both or neither "
            f"(got {split[0]} and {split[1]})"
        )
    first, last = recipe_stage_layers(record) or (None, None)
    layout = Layout(
        dp=dp,
        fsdp=fsdp,
        tp=lay["tp"],
        pp=lay["pp"],
        cp=lay["cp"],
        ep=lay.get("ep") or automodel_ep(record) or 1,
        first_stage_layers=first,
        last_stage_layers=last,
        etp=lay.get("etp") or 1,
        zero_stage=zero,
        virtual_stages=vs,
        num_microbatches=mb[1],
        recompute=(named_policy(record) or modules_policy(record) or lay["recompute"] or "none"),
        sequence_parallel=sp,
        schedule=(
            ("1f1b" if searched else stated)
            if stated
            else unstated[0]
            if unstated
            else ("interleaved" if vs > 1 else "1f1b")
        ),
    )
    try:  # the checks every Problem gets (fp8 needs an fp8 matmul rate)
        workload = resolved_workload(workload, cluster)
    except InvalidArgumentError as exc:
        return str(exc)
    problem = Problem(
        model_id=record["id"],
        model=model,
        cluster_name=cluster.name,
        cluster=cluster,
        workload=workload,
    )
    violations = check_layout(problem, layout)
    if violations:
        return "engine rejects the layout: " + "; ".join(v.message for v in violations)
    try:
        est = estimate(problem, layout, strict=False)
        if lay["microbatch_seqs"] is None and lay["num_microbatches"] is None:
            est = fastest_microbatching(problem, est)
        if searched or "interleaved" in unstated:
            chosen = fastest_chunks(record, problem, est, or_as_is=not searched)
            if chosen is None:
                return (
                    "layout.schedule interleaved: the rules allow no chunk count with these degrees"
                )
            est = chosen
    except LayoutsearchError as exc:
        return f"placement: {exc}"
    layout = replace(
        layout,
        num_microbatches=est.layout.num_microbatches,
        virtual_stages=est.layout.virtual_stages,
        schedule=est.layout.schedule,
    )
    axes = est.layout.placements
    if replicas > 1 and dp == replicas and dict(dict(axes).get("dp", ())).get("dcn") != replicas:
        return f"placement: dp({dp}) does not land on the dcn axis ({dict(axes)})"
    return problem, replace(layout, axes=axes), est


# The terms of an estimate that a transformer layer's forward and backward spend on its stage: its GEMMs, attention
# core, recompute and element-wise kernels, and the TP collectives they wait for (the step's output head, optimizer,
# pipeline and data-parallel terms and overheads are not a layer's)
LAYER_TERMS = (
    "compute/matmul",
    "compute/attention",
    "compute/recompute",
    "compute/elementwise",
    "exposed_comm/tp",
    "exposed_comm/interference",
)


def layer_seconds(record: dict, recompute: str, sequence_parallel: bool) -> float:
    """Seconds one transformer layer's forward and backward take in ``record``'s run with that recompute policy and
    sequence parallelism: its estimate's ``LAYER_TERMS`` over its layers. For a run of one pipeline stage and one
    microbatch, whose every layer is alike (what a paper's per-layer timing measures)."""
    lay = record["layout"]
    if lay["pp"] != 1 or lay["num_microbatches"] != 1:
        raise ValueError(
            f"{record['id']}: per-layer seconds need one stage and one microbatch, not pp {lay['pp']} and "
            f"{lay['num_microbatches']} microbatches"
        )
    variant = {
        **record,
        "layout": {**lay, "recompute": recompute, "sequence_parallel": sequence_parallel},
    }
    out = record_to_estimate(variant)
    if isinstance(out, str):
        raise ValueError(f"{record['id']}: {out}")
    problem, _, est = out
    return sum(est.time_s.get(term, 0.0) for term in LAYER_TERMS) / problem.model.num_layers
