"""The typed boundary objects: a Problem (what is trained, on what, with every assumption) and
a SearchRequest (what the user restricts and how to search), shared by every command.

A Problem is written to each result document in full (``Problem.record``) and read back by
export, sweep and validate (``Problem.from_record``), so a result file says everything it
assumed. Reading validates every field with pydantic at the boundary: a wrong type, a null
where a number belongs or an absurd size is one ``InvalidArgumentError`` line naming the field
and the value.
"""

from __future__ import annotations

import hashlib
import json
import platform
import warnings
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Annotated, Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
)

from layoutsearch._version import __version__
from layoutsearch.core import io
from layoutsearch.core.catalogue import load_model, model_from_dict
from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchWarning
from layoutsearch.core.frameworks import (
    Profile,
    cross_entropy_of,
    deepep_of,
    fp4_recipe_of,
    fp8_recipe_of,
    profile_of,
)
from layoutsearch.core.options import MAX_ROUTING_CV, WorkloadOptions, option_type
from layoutsearch.core.specs import (
    ALL_DEGREE_NAMES,
    CP_FLAVOURS,
    CUDA_GRAPHS,
    FP4_RECIPES,
    FP8_RECIPES,
    LEARNED_ROUTING_EXPERT_CV,
    OFFLOADS,
    RECOMPUTE_POLICIES,
    ROUTINGS,
    Accelerator,
    Cluster,
    Layout,
    Method,
    ModelSpec,
    Objective,
    Precision,
    Schedule,
    Workload,
)
from layoutsearch.core.topology import CustomCluster, cluster_from_spec, resolve_cluster
from layoutsearch.core.units import (
    GIB,
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SEQS,
    MAX_HBM_BYTES,
    MAX_SEQ_LEN,
    MAX_TRAINING_TOKENS,
    MAX_VIRTUAL_STAGES_RECORD,
)

ZERO_STAGES = (0, 1, 2, 3)
SCHEDULES = tuple(s.value for s in Schedule)
PRECISIONS = tuple(p.value for p in Precision)
MAX_VIRTUAL_STAGES = 8


def version() -> str:
    """The layoutsearch version (``layoutsearch.__version__``, which the package metadata reads)."""
    return __version__


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """A model, a cluster and a workload: the inputs of estimate, solve, explain and export."""

    model_id: str
    model: ModelSpec
    cluster_name: str
    cluster: Cluster
    workload: Workload

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    @classmethod
    def build(cls, model: str | ModelSpec, cluster: str | Cluster, workload: Workload) -> Problem:
        """From catalogue ids or paths (as the CLI takes them: a model YAML or config.json, a cluster
        name or cluster YAML) or resolved objects (a ``CustomCluster`` keeps its description)."""
        check_workload(workload)
        spec = load_model(model) if isinstance(model, str) else model
        check_positions(model if isinstance(model, str) else spec.name, spec, workload)
        clus = resolve_cluster(cluster) if isinstance(cluster, str) else cluster
        workload = resolved_workload(workload, clus)
        warn_uncalibrated(spec, clus.accelerator)
        warn_fp4(workload)
        return cls(
            model_id=model if isinstance(model, str) else spec.name,
            model=spec,
            cluster_name=cluster if isinstance(cluster, str) else clus.name,
            cluster=clus,
            workload=workload,
        )

    def record(self) -> dict:
        """The `problem` object of every result document (OUTPUT.md), with every assumption."""
        wl = self.workload
        return {
            "model": self.model_id,
            "model_sha256_16": model_hash(self.model),
            "model_spec": spec_fields(self.model),
            "cluster": self.cluster_name,
            **(
                {"cluster_spec": spec}
                if isinstance(self.cluster, CustomCluster)
                and (spec := self.cluster.current_spec()) is not None
                else {}
            ),
            "num_devices": self.num_devices,
            "accelerator": self.cluster.accelerator.id,
            "global_batch_seqs": wl.global_batch_seqs,
            "seq_len": wl.seq_len,
            "global_batch_tokens": wl.global_batch_tokens,
            "state_bytes_per_param": wl.state_bytes_per_param,
            "workload": asdict(wl),
            "versions": {"layoutsearch": version(), "python": platform.python_version()},
        }

    @classmethod
    def from_record(cls, record: Any) -> Problem:
        """Rebuild the Problem of a result document's `problem` object (validated field by field)."""
        rec = validate_record(record, ProblemRecord, "problem")
        workload = Workload(
            **{
                **(rec.workload.model_dump(exclude_none=True) if rec.workload else {}),
                "global_batch_seqs": rec.global_batch_seqs,
                "seq_len": rec.seq_len,
            }
        )
        if rec.model_spec is not None:
            model = model_from_dict(
                {k: v for k, v in rec.model_spec.items()},
                str(rec.model_spec.get("name", rec.model)),
                "problem.model_spec",
            )
        else:
            model = load_model(rec.model)
        check_positions(rec.model, model, workload)
        cluster = (
            resolve_cluster(rec.cluster)
            if rec.cluster_spec is None
            else cluster_from_spec(rec.cluster_spec, "problem", "cluster_spec.", name=rec.cluster)
        )
        workload = resolved_workload(workload, cluster)
        return cls(
            model_id=rec.model,
            model=model,
            cluster_name=rec.cluster,
            cluster=cluster,
            workload=workload,
        )


class UncalibratedWarning(LayoutsearchWarning):
    """A cost the catalogue has no calibration for on this accelerator."""


def warn_uncalibrated(model: ModelSpec, acc) -> None:
    """A mixture-of-experts model on an accelerator without MoE calibration (no ``moe_launch_latency_us`` or
    ``moe_host_sync_us`` and the default grouped-GEMM efficiency: the TPUs today): its MoE layers are costed
    by FLOPs and traffic alone, which the published TPU MoE runs show within 13% either way."""
    if (
        model.moe is not None
        and acc.moe_launch_latency_s == 0.0
        and acc.moe_host_sync_s == 0.0
        and acc.grouped_matmul_efficiency == 1.0
    ):
        warnings.warn(
            f"{acc.id} has no MoE calibration (hardware/{acc.id}.yaml): its MoE layers are costed by FLOPs "
            f"and traffic alone; on the 4 published TPU MoE runs that is 13% too slow to 10% too fast "
            f"(results/validation_moe.md)",
            UncalibratedWarning,
            stacklevel=3,
        )


def warn_fp4(workload: Workload) -> None:
    """fp4 training: its GEMM rate is a kernel measurement's, one per part, times the share of its kernel rate fp8 keeps
    in training (docs/calibration.md#fp4_recipe_ratio), and no measured run of the development sets trains in fp4,
    so the prediction takes the uncalibrated band. Megatron-Bridge's
    published NVFP4 runs went 1.15x to 1.41x faster than its FP8 ones (docs/cost_model.md#fp4-training)."""
    if workload.precision == "fp4":
        warnings.warn(
            f"--precision fp4: fp4 GEMMs are costed at their {fp4_recipe_of(workload)} rate from a kernel measurement "
            f"and fp8's in-training share (docs/calibration.md#fp4_recipe_ratio), and no measured run of the "
            f"development sets trains in "
            f"fp4: the band is the uncalibrated one; Megatron-Bridge's published NVFP4 runs went 1.15x to 1.41x "
            f"faster than its FP8 ones",
            UncalibratedWarning,
            stacklevel=3,
        )


def build_workload(
    seqs: int, seq_len: int, tokens: float | None = None, **options: Any
) -> Workload:
    """A Workload from the workload options (``core.options.WorkloadOptions``: their names, units
    and defaults), converted as given: the values are checked when the Problem is built."""
    unknown = set(options) - set(WorkloadOptions.model_fields)
    if unknown:
        raise TypeError(f"build_workload: unknown workload options {', '.join(sorted(unknown))}")
    return WorkloadOptions.model_construct(**options).workload(seqs, seq_len, tokens)


def check_choice(value: str, choices, label: str) -> None:
    """``value`` one of ``choices``, else one line naming ``label``, the value and the choices."""
    if value not in choices:
        raise InvalidArgumentError(f"{label}: '{value:.80}' is not one of {', '.join(choices)}")


def resolved_workload(workload: Workload, cluster: Cluster) -> Workload:
    """The workload with its framework profile named (the accelerator's default when unset) and checked."""
    profile = profile_of(workload.framework, cluster.accelerator.kind)
    check_choice(workload.precision, PRECISIONS, "--precision")
    acc = cluster.accelerator
    recipe = check_recipe(
        workload, acc, "fp8", FP8_RECIPES, fp8_recipe_of(workload, acc.kind), "bf16", ""
    )
    fp4 = check_recipe(
        workload,
        acc,
        "fp4",
        FP4_RECIPES,
        fp4_recipe_of(workload),
        "fp8" if acc.peak_fp8_flops_per_s is not None else "bf16",
        ": fp4 tensor cores are Blackwell's",
    )
    if workload.fp8_dispatch and workload.precision != "fp8":
        raise InvalidArgumentError(
            f"--fp8-dispatch: tokens are dispatched in fp8 only in fp8 training, not with "
            f"--precision {workload.precision}; use --precision fp8 or --no-fp8-dispatch"
        )
    if workload.triton_attention and acc.triton_attention_efficiency is None:
        raise InvalidArgumentError(
            f"--triton-attention: hardware/{acc.id}.yaml has no triton_attention_efficiency (MPT's "
            f"Triton kernel is costed only on the parts llm-foundry's tables fitted it on); use "
            f"--no-triton-attention"
        )
    if workload.triton_attention and (workload.vendor_attention or not workload.flash_attention):
        raise InvalidArgumentError(
            "--triton-attention: MPT's Triton kernel is the attention core; it cannot run with "
            f"{'--vendor-attention' if workload.vendor_attention else '--no-fused-attention'}"
        )
    if workload.vendor_attention and acc.vendor_attention_efficiency is None:
        warnings.warn(
            f"--vendor-attention: {acc.id} has no vendor_attention_efficiency in hardware/{acc.id}.yaml; "
            f"the attention core is costed at its attention_efficiency",
            UncalibratedWarning,
            stacklevel=3,
        )
    if workload.launch_blocking and acc.blocking_launch_s_per_layer_pass is None:
        raise InvalidArgumentError(
            f"--launch-blocking: {acc.id} has no blocking-launch calibration (no "
            f"blocking_launch_us_per_layer_pass in hardware/{acc.id}.yaml): it applies to "
            f"CUDA kernel launches on GPUs; use --no-launch-blocking"
        )
    check_choice(workload.cuda_graphs, CUDA_GRAPHS, "--cuda-graphs")
    check_choice(workload.routing, ROUTINGS, "--routing")
    cv = workload.routing_cv
    if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not 0.0 <= cv <= MAX_ROUTING_CV:
        raise InvalidArgumentError(
            f"--routing-cv: {str(cv):.40} is not a number from 0 to {MAX_ROUTING_CV:g} (a learned "
            f"router's expert loads, standard deviation / mean)"
        )
    check_capacity(workload, acc)
    check_power_limit(workload.power_limit_w, acc)
    check_runtime(workload, acc)
    overlap = (
        acc.kind in profile.tp_overlap and acc.runtime in TP_OVERLAP_RUNTIMES
        if workload.tp_comm_overlap is None
        else workload.tp_comm_overlap
    )
    ep_overlap = (
        profile.ep_overlap if workload.ep_comm_overlap is None else workload.ep_comm_overlap
    )
    compiled = check_torch_compile(workload, profile, overlap and acc.kind == "gpu")
    compiled_loss = check_compiled_loss(workload, profile, compiled)
    return replace(
        workload,
        framework=profile.name,
        torch_compile=compiled,
        compiled_loss=compiled_loss,
        cross_entropy=check_cross_entropy(workload, profile, compiled_loss),
        tp_comm_overlap=overlap,
        ep_comm_overlap=ep_overlap,
        deepep=deepep_of(workload, acc.kind) and acc.runtime in DEEPEP_RUNTIMES,
        fp8_recipe=recipe,
        fp4_recipe=fp4,
    )


# What each GPU runtime runs (Accelerator.runtime; the TPUs' XLA compiles the whole step, so none of these):
# CUDA graphs (ROCm: HIP graphs behind the same torch.cuda.CUDAGraph API; Gaudi's HPU graphs are another
# mechanism, whose effect on the host time the MoE launch model does not know), TP collectives pipelined with
# their GEMMs (Transformer Engine's userbuffers, PyTorch's async TP over symmetric memory, XLA's continuation
# fusion on TPUs), DeepEP's dispatch (NVSHMEM; ROCm/DeepEP, AMD's port, over xGMI and rocSHMEM), and blocking
# launches (CUDA_LAUNCH_BLOCKING, ROCm's HIP_LAUNCH_BLOCKING); docs/cost_model.md "Runtimes".
CUDA_GRAPH_RUNTIMES = ("cuda", "rocm")
TP_OVERLAP_RUNTIMES = ("cuda", "rocm", "xla")
DEEPEP_RUNTIMES = ("cuda", "rocm")
BLOCKING_LAUNCH_RUNTIMES = ("cuda", "rocm")


def check_runtime(workload: Workload, acc: Accelerator) -> None:
    """A choice the part's runtime (``Accelerator.runtime``) cannot run is refused, naming the flag and the
    runtime (the runtimes of each: the module's ``*_RUNTIMES``)."""
    where = f"{acc.id} runs on {acc.runtime} (hardware/{acc.id}.yaml runtime)"
    if workload.cuda_graphs != "none" and acc.runtime not in CUDA_GRAPH_RUNTIMES:
        why = (
            "XLA compiles the whole step already"
            if acc.runtime == "xla"
            else "CUDA graphs run on CUDA and ROCm (HIP graphs); its own graphs are not modelled"
        )
        raise InvalidArgumentError(
            f"--cuda-graphs {workload.cuda_graphs}: {where}; {why}; use --cuda-graphs none"
        )
    refused = (
        (
            "--tp-comm-overlap",
            workload.tp_comm_overlap,
            TP_OVERLAP_RUNTIMES,
            "TP collectives pipelined with their GEMMs (Transformer Engine's userbuffers, PyTorch's async TP, "
            "XLA's continuation fusion)",
        ),
        (
            "--deepep",
            workload.deepep,
            DEEPEP_RUNTIMES,
            "DeepEP's dispatch (NVSHMEM, or AMD's port)",
        ),
        (
            "--launch-blocking",
            workload.launch_blocking,
            BLOCKING_LAUNCH_RUNTIMES,
            "blocking launches (CUDA_LAUNCH_BLOCKING, HIP_LAUNCH_BLOCKING)",
        ),
    )
    for flag, asked, runtimes, what in refused:
        if asked and acc.runtime not in runtimes:
            raise InvalidArgumentError(
                f"{flag}: {where}; {what}: on {' and '.join(runtimes)} only; use --no-{flag[2:]}"
            )


def check_recipe(
    workload: Workload,
    acc: Accelerator,
    precision: str,
    recipes: tuple[str, ...],
    resolved: str,
    other: str,
    why: str,
) -> str | None:
    """The scaling recipe of ``precision`` (fp8, fp4) training: ``resolved`` (the workload's, else the default),
    None outside that precision; refused where the part has no such unit (no ``peak_<precision>_tflops``:
    use ``other``, ``why`` says which parts have one) or cannot run the recipe (``<precision>_recipe_ratio``),
    and where a recipe is named without that precision."""
    flag, named = f"--{precision}-recipe", getattr(workload, f"{precision}_recipe")
    if workload.precision == precision and getattr(acc, f"peak_{precision}_flops_per_s") is None:
        raise InvalidArgumentError(
            f"--precision {precision}: {acc.id} has no {precision} matmul rate in the catalogue (no "
            f"peak_{precision}_tflops in hardware/{acc.id}.yaml{why}); use --precision {other}"
        )
    if named is not None:
        check_choice(named, recipes, flag)
        if workload.precision != precision:
            raise InvalidArgumentError(
                f"{flag} {named}: a scaling recipe applies to {precision} training, not to "
                f"--precision {workload.precision}; use --precision {precision} or leave {flag} out"
            )
    if workload.precision != precision:
        return named
    runs = dict(getattr(acc, f"{precision}_recipe_ratio"))
    if resolved not in runs:
        raise InvalidArgumentError(
            f"{flag} {resolved}: {acc.id} cannot run it (hardware/{acc.id}.yaml "
            f"{precision}_recipe_ratio: {', '.join(runs)}); use {flag} {next(iter(runs))}"
        )
    return resolved


def _pytorch_choice(
    field: str, workload: Workload, profile: Profile, theirs: str, what: str
) -> bool | None:
    """A PyTorch-module framework's switch ``field`` (``Workload`` and ``Profile`` alike): the workload's, else
    the profile's; refused, naming the flag, where the profile has no such choice (it runs ``theirs``:
    ``what`` is not its to choose)."""
    given, default = getattr(workload, field), getattr(profile, field)
    if default is None:
        if given is not None:
            flag = f"--{'' if given else 'no-'}{field.replace('_', '-')}"
            raise InvalidArgumentError(
                f"{flag}: {profile.name} runs its own {theirs}; {what} is a choice of "
                f"PyTorch-module frameworks (--framework torchtitan); leave {flag} out"
            )
        return None
    return default if given is None else given


def check_torch_compile(workload: Workload, profile: Profile, async_tp: bool) -> bool | None:
    """The workload's torch.compile choice against its profile's (``Profile.torch_compile``,
    ``_pytorch_choice``), refused eager beside async TP (PyTorch pipelines TP with its GEMMs only in a
    compiled graph)."""
    compiled = _pytorch_choice(
        "torch_compile",
        workload,
        profile,
        "fused element-wise kernels, compiled or not",
        "torch.compile",
    )
    if async_tp and compiled is False:
        raise InvalidArgumentError(
            f"--no-torch-compile with --tp-comm-overlap: {profile.name} pipelines TP with its "
            f"GEMMs (async TP) only in a compiled model; use --torch-compile or "
            f"--no-tp-comm-overlap"
        )
    return compiled


def check_compiled_loss(workload: Workload, profile: Profile, compiled: bool | None) -> bool | None:
    """The workload's compiled-loss choice against its profile's (``Profile.compiled_loss``,
    ``_pytorch_choice``): an eager model runs an eager loss, and refuses one asked compiled."""
    chosen = _pytorch_choice(
        "compiled_loss", workload, profile, "loss kernels", "compiling the loss"
    )
    if chosen is not None and not compiled:
        if workload.compiled_loss:
            raise InvalidArgumentError(
                "--compiled-loss with --no-torch-compile: the loss is compiled only with the model; "
                "use --torch-compile or leave --compiled-loss out"
            )
        return False
    return chosen


def check_cross_entropy(workload: Workload, profile: Profile, compiled_loss: bool | None) -> str:
    """The loss's kernels (``Workload.cross_entropy``, ``core.frameworks.cross_entropy_of``): the workload's where its
    profile runs them (``Profile.cross_entropies``), else the profile's; a PyTorch-module framework's follow its
    compiled-loss choice, and refuse the option where it says otherwise."""
    given = workload.cross_entropy
    flag = f"--cross-entropy {given}"
    resolved = replace(
        workload, cross_entropy=None, compiled_loss=compiled_loss, framework=profile.name
    )
    if profile.compiled_loss is not None:
        follows = cross_entropy_of(resolved)
        if given is not None and given != follows:
            raise InvalidArgumentError(
                f"{flag}: {profile.name}'s loss follows --compiled-loss (compiled) or --no-compiled-loss "
                f"(PyTorch's eager cross entropy); leave --cross-entropy out"
            )
        return follows
    if given is None:
        return cross_entropy_of(resolved)
    if given not in profile.cross_entropies:
        raise InvalidArgumentError(
            f"{flag}: {profile.name} runs {' or '.join(profile.cross_entropies)}; use "
            f"{'it' if len(profile.cross_entropies) == 1 else 'one of them'} or leave --cross-entropy out"
        )
    return str(given)


def check_moe_options(model_id: str, model: ModelSpec, workload: Workload) -> None:
    """A mixture-of-experts option turned on for a dense model changes nothing it costs or exports, so it is
    refused, naming the option (a wrong --model is the likelier mistake than a wasted flag). A sweep over
    several models applies them where they mean something and does not call this."""
    if model.moe is not None:
        return
    given = (
        ("--deepep", workload.deepep is True, "DeepEP dispatches the tokens of expert layers"),
        (
            "--ep-comm-overlap",
            workload.ep_comm_overlap is True,
            "it hides the expert layers' token all-to-alls",
        ),
        ("--fp8-dispatch", workload.fp8_dispatch, "it dispatches the expert layers' tokens in fp8"),
        ("--routing forced", workload.routing == "forced", "it forces the router's token balance"),
        (
            f"--routing-cv {workload.routing_cv:g}",
            workload.routing_cv != LEARNED_ROUTING_EXPERT_CV,
            "it is the spread of a learned router's expert loads",
        ),
    )
    for option, asked, what in given:
        if asked:
            raise InvalidArgumentError(
                f"{option}: {model_id} is a dense model (no experts) and {what}; leave it out, or name a "
                f"mixture-of-experts --model"
            )


def check_capacity(workload: Workload, acc) -> None:
    """The device memory (--hbm-gib, else the cluster's) less the runtime reserve and the margin
    (--memory-margin-gib) must leave room for a layout; else one line naming them with the numbers."""
    hbm = acc.hbm_bytes if workload.hbm_bytes is None else workload.hbm_bytes
    reserve, margin = acc.runtime_reserve_bytes, workload.memory_margin_bytes
    if hbm - reserve - margin > 0:
        return
    named = [
        option
        for option, value in (("--hbm-gib", workload.hbm_bytes), ("--memory-margin-gib", margin))
        if value
    ]
    source = acc.sources.get("hbm_gib", "")
    given = " and ".join(named) or (
        source if source.startswith("cluster file") else f"{acc.id} hbm_gib"
    )
    raise InvalidArgumentError(
        f"{given}: no usable memory per device: {hbm / GIB:.4g} GiB device memory - "
        f"{reserve / GIB:.4g} GiB runtime reserve ({acc.id} runtime_reserve_gib) - "
        f"{margin / GIB:.4g} GiB margin = {(hbm - reserve - margin) / GIB:.4g} GiB"
    )


def check_positions(model_id: str, model: ModelSpec, workload: Workload) -> None:
    """A model with a learned position table (GPT-3's 2,048 rows) has no position for a token beyond it: a longer
    sequence is refused, naming --seq-len and the table (a longer table is another model, with more parameters).
    Rotary and ALiBi models have no such bound."""
    rows = model.learned_positions
    if rows and workload.seq_len > rows:
        raise InvalidArgumentError(
            f"--seq-len {workload.seq_len}: {model_id} learns {rows:,} positions (its position embedding's rows), "
            f"so no sequence is longer; use --seq-len {rows} or less"
        )


def check_workload(workload: Workload, where: str = "") -> None:
    """The batch, sequence length and token count within the bounds everything downstream assumes."""
    for name, value, top, option in (
        ("global_batch_seqs", workload.global_batch_seqs, MAX_GLOBAL_BATCH_SEQS, "--seqs"),
        ("seq_len", workload.seq_len, MAX_SEQ_LEN, "--seq-len"),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise InvalidArgumentError(
                f"{where or option}{'.' + name if where else ''}: {value!r:.40} is not a whole number in 1..{top}"
            )
    bytes_value: float | None
    for name, bytes_value, low in (
        ("hbm_bytes", workload.hbm_bytes, 1),
        ("memory_margin_bytes", workload.memory_margin_bytes, 0),
    ):
        if bytes_value is not None and not (
            isinstance(bytes_value, (int, float)) and low <= bytes_value <= MAX_HBM_BYTES
        ):
            raise InvalidArgumentError(
                f"{where or 'workload'}.{name}: {bytes_value!r:.40} is not a byte count in [{low}, {MAX_HBM_BYTES:g}]"
            )
    tokens = workload.training_tokens
    if tokens is not None and not (
        isinstance(tokens, (int, float)) and 0 < tokens <= MAX_TRAINING_TOKENS
    ):
        raise InvalidArgumentError(
            f"{where or '--tokens'}{'.training_tokens' if where else ''}: {tokens!r:.40} is not "
            f"a number of tokens in (0, {MAX_TRAINING_TOKENS:g}]"
        )


# The ModelSpec fields that give a decoder's dimensions (how validation groups measured runs).
MODEL_SHAPE_FIELDS = (
    "num_layers",
    "d_model",
    "d_ff",
    "mlp",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "vocab_size",
)
# The ModelSpec fields of version 0.1 (documents written then list exactly these).
BASE_SPEC_FIELDS = (
    "name",
    *MODEL_SHAPE_FIELDS,
    "tied_embeddings",
    "norm",
    "linear_bias",
    "learned_positions",
)


class HasProblem:
    """Shortcuts for the results that hold a ``problem`` (Estimate, Space, ExportContext)."""

    problem: Problem
    model = property(lambda self: self.problem.model, doc="The problem's ModelSpec.")
    workload = property(lambda self: self.problem.workload, doc="The problem's Workload.")
    cluster = property(lambda self: self.problem.cluster, doc="The problem's Cluster.")


def spec_fields(model: ModelSpec) -> dict:
    """The architecture's fields; those added to ModelSpec later appear only where they differ
    from their default, so documents and hashes of earlier models stay as they were."""
    out = {
        f.name: getattr(model, f.name)
        for f in fields(model)
        if f.name in BASE_SPEC_FIELDS or getattr(model, f.name) != f.default
    }
    for key in (
        "rope_scaling",
        "moe",
        "mla",
    ):  # nested specs in JSON form; model_from_dict rebuilds them
        if out.get(key) is not None:
            out[key] = asdict(out[key])
    return out


def model_hash(model: ModelSpec) -> str:
    """Content hash of the architecture (provenance)."""
    return hashlib.sha256(json.dumps(spec_fields(model), sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- search request
@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What the user restricts: pinned degrees, allowed values, kept dimensions, policies."""

    fix: dict[str, int] = field(default_factory=dict)  # degree -> value
    choices: dict[str, tuple[int, ...]] = field(default_factory=dict)  # degree -> allowed values
    only: tuple[str, ...] | None = None  # degrees that may exceed 1
    recompute: tuple[str, ...] | None = (
        None  # None: the framework profile's policies (core.frameworks)
    )
    zero_stages: tuple[int, ...] = ZERO_STAGES
    offload: tuple[str, ...] = ("none",)  # specs.OFFLOADS the search may choose (--offload)
    max_virtual_stages: int = MAX_VIRTUAL_STAGES
    schedules: tuple[str, ...] | None = (
        None  # None: 1f1b and interleaved, or the export target's (search.space)
    )
    cp_flavours: tuple[str, ...] | None = None  # None: every flavour the target runs (CP_FLAVOURS)
    # core.stages.SPLIT_NAMES the search keeps where pp > 1; None: every split the framework writes
    pipeline_splits: tuple[str, ...] | None = None
    # the searched layouts shard the norms' and residuals' activations over tp (Megatron sequence
    # parallelism); False: a framework without it (Layout.sequence_parallel of every candidate)
    sequence_parallel: bool = True

    def allowed(self, degree: str, value):
        """Whether ``value`` (an int or a numpy array) of ``degree`` passes --fix, --choices and --only."""
        ok = np.ones_like(value, dtype=bool)
        if self.only is not None and degree not in self.only:
            ok &= value == 1
        if degree in self.fix:
            ok &= value == self.fix[degree]
        if degree in self.choices:
            ok &= np.isin(value, self.choices[degree])
        return ok


@dataclass(frozen=True, kw_only=True)
class SearchRequest:
    """How to search: the user's restrictions, the objective, the method, how many layouts.

    ``target`` names an export target whose limits (its exporter's declared capabilities)
    restrict the candidates, so that the winner can be written for it.
    """

    options: SearchOptions = field(default_factory=SearchOptions)
    objective: str = Objective.step_time.value
    top_k: int = 3
    method: str = Method.cpsat.value
    time_limit_s: float = 30.0
    target: str | None = None
    tie_tolerance: float | None = (
        None  # relative difference of two values that ties them (None: search.ranking's)
    )
    # the failure and checkpoint inputs of the time-to-train objective (costs.goodput.Resilience;
    # None: its defaults)
    resilience: Any = None

    def with_options(self, **changes) -> SearchRequest:
        return replace(self, options=replace(self.options, **changes))


# ----------------------------------------------------------------------------- record validation
class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=False, defer_build=True)


PositiveCount = Field(ge=1, le=MAX_DEVICES)


FiniteNumber = Annotated[StrictFloat, Field(allow_inf_nan=False)]  # an int is accepted too


def _record_type(name: str) -> tuple[Any, Any]:
    """A workload option's field in a record: strict, its range, a choice as text."""
    field = WorkloadOptions.model_fields[name]
    kind = option_type(field.annotation)
    strict = {bool: StrictBool, int: StrictInt, float: FiniteNumber}.get(kind)
    if strict is None:  # a closed choice: the record keeps its text, Problem.build checks it
        default = field.default.value if field.default is not None else None
        text = Annotated[StrictStr, Field(max_length=64)]
        return (text if field.default is not None else text | None), default
    bounds = {k: getattr(m, k) for m in field.metadata for k in ("ge", "le") if hasattr(m, k)}
    kind = Annotated[strict, Field(**bounds)] if bounds else strict
    return (kind if field.default is not None else kind | None), field.default


# every option named like its Workload field (values: create_model's (type, default) pairs)
_DERIVED_RECORD_FIELDS: dict[str, Any] = {
    name: _record_type(name)
    for name in WorkloadOptions.model_fields
    if name in Workload.__dataclass_fields__
}
# The workload record (``Problem.record()['workload']``): the Workload fields that no option sets
# or that an option sets converted, then every option named like its Workload field, derived.
WorkloadRecord = create_model(
    "WorkloadRecord",
    __base__=_Record,
    weight_bytes_per_param=(StrictInt, Field(ge=1, le=8)),
    master_bytes_per_param=(StrictInt, Field(ge=0, le=8)),
    grad_bytes_per_param=(StrictInt, Field(ge=1, le=8)),
    optimizer_bytes_per_param=(StrictInt, Field(ge=0, le=16)),
    activation_bytes=(StrictInt, Field(ge=1, le=8)),
    causal=(StrictBool, True),
    flash_attention=(StrictBool, True),
    fsdp_collectives_per_layer=(StrictInt, Field(default=1, ge=1, le=64)),
    training_tokens=(FiniteNumber | None, Field(default=None, gt=0, le=MAX_TRAINING_TOKENS)),
    hbm_bytes=(FiniteNumber | None, Field(default=None, gt=0, le=MAX_HBM_BYTES)),
    memory_margin_bytes=(FiniteNumber, Field(default=0.0, ge=0, le=MAX_HBM_BYTES)),
    **_DERIVED_RECORD_FIELDS,
)


class ProblemRecord(_Record):
    model: StrictStr = Field(min_length=1, max_length=4096)
    model_spec: dict | None = None
    cluster: StrictStr = Field(min_length=1, max_length=4096)
    cluster_spec: dict | None = None  # a cluster file's resolved description (topology.ClusterFile)
    global_batch_seqs: StrictInt = Field(ge=1, le=MAX_GLOBAL_BATCH_SEQS)
    seq_len: StrictInt = Field(ge=1, le=MAX_SEQ_LEN)
    workload: WorkloadRecord | None = None


class DegreesRecord(_Record):
    dp: StrictInt = PositiveCount
    fsdp: StrictInt = PositiveCount
    tp: StrictInt = PositiveCount
    pp: StrictInt = PositiveCount
    cp: StrictInt = PositiveCount
    ep: StrictInt = Field(default=1, ge=1, le=MAX_DEVICES)  # expert degrees (1 for a dense model)
    etp: StrictInt = Field(default=1, ge=1, le=MAX_DEVICES)


class LayoutRecord(_Record):
    rank: StrictInt | None = Field(default=None, ge=1, le=MAX_DEVICES)
    degrees: DegreesRecord
    zero_stage: StrictInt = Field(ge=0, le=3)
    virtual_stages: StrictInt = Field(default=1, ge=1, le=MAX_VIRTUAL_STAGES_RECORD)
    num_microbatches: StrictInt = Field(ge=1, le=MAX_GLOBAL_BATCH_SEQS)
    recompute: StrictStr
    offload: StrictStr = "none"  # present only when model state is offloaded
    sequence_parallel: StrictBool = True
    schedule: StrictStr | None = None
    cp_flavour: StrictStr = "ring"
    stage_layers: dict[StrictStr, StrictInt | StrictStr] | None = None  # first, middle, last, split
    axes: (
        dict[StrictStr, list[tuple[StrictStr, Annotated[StrictInt, Field(ge=1, le=MAX_DEVICES)]]]]
        | None
    ) = None
    # the predictions a file's header repeats (absent in hand-written records)
    memory_bytes: dict[StrictStr, FiniteNumber] | None = None
    time_s: dict[StrictStr, FiniteNumber] | None = None
    mfu: FiniteNumber | None = None
    fits: StrictBool | None = None


def validate_record(data: Any, schema: type[BaseModel], where: str):
    """Validate a document part; the first error is one line naming the field and the value."""
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{where}: expected an object, got {type(data).__name__}")
    return io.validated(schema, data, where)


def layout_from_record(record: Any, where: str = "layout") -> Layout:
    """Rebuild a Layout from a layout record (OUTPUT.md), validated field by field."""
    rec = validate_record(record, LayoutRecord, where)
    check_choice(rec.recompute, RECOMPUTE_POLICIES, f"{where}.recompute")
    check_choice(rec.offload, OFFLOADS, f"{where}.offload")
    if rec.schedule is not None:
        check_choice(rec.schedule, SCHEDULES, f"{where}.schedule")
    check_choice(rec.cp_flavour, CP_FLAVOURS, f"{where}.cp_flavour")
    degrees = rec.degrees.model_dump()
    schedule = rec.schedule or ("interleaved" if rec.virtual_stages > 1 else "1f1b")
    axes = (
        tuple(
            (name, tuple((str(a), int(f)) for a, f in placed))
            for name, placed in rec.axes.items()
            if name in ALL_DEGREE_NAMES
        )
        if rec.axes is not None
        else None
    )
    split = rec.stage_layers or {}
    given = (
        split.get("split") == "first-last"
    )  # the engine's own splits are recomputed, given ones kept
    return Layout(
        **degrees,
        zero_stage=rec.zero_stage,
        virtual_stages=rec.virtual_stages,
        first_stage_layers=_stage_count(split, "first", where) if given else None,
        last_stage_layers=_stage_count(split, "last", where) if given else None,
        balanced_split=split.get("split") == "balanced",
        num_microbatches=rec.num_microbatches,
        recompute=rec.recompute,
        offload=rec.offload,
        sequence_parallel=rec.sequence_parallel,
        schedule=schedule,
        cp_flavour=rec.cp_flavour,
        axes=axes,
    )


def _stage_count(split: dict, key: str, where: str) -> int:
    value = split.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DEVICES:
        raise InvalidArgumentError(
            f"{where}.stage_layers.{key}: {value!r:.40} is not a layer count"
        )
    return value


def check_power_limit(power_limit_w: float | None, acc: Accelerator) -> None:
    """A cap needs the part's board power, and must lie above its idle power (one-line error)."""
    if power_limit_w is None:
        return
    if acc.board_power_w is None:
        raise InvalidArgumentError(
            f"--power-limit-w {power_limit_w:g}: {acc.id} has no board_power_w in "
            f"hardware/{acc.id}.yaml, so a cap cannot be modelled"
        )
    floor_w = acc.idle_power_w or 0.0
    if not power_limit_w > floor_w:  # NaN fails too
        raise InvalidArgumentError(
            f"--power-limit-w: {power_limit_w:g} W is not above {acc.id}'s idle power "
            f"{floor_w:g} W (idle_power_w)"
        )
