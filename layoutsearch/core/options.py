"""Every option of a run, declared once: its name, type, range, default and description.

The groups are frozen pydantic models, one per concern: the problem (model, cluster, batch),
the workload assumptions, the search restrictions, the plan (tokens, price, what-if), one
layout (estimate), the outputs and the sweep's own. Everything else is derived from them: the
command-line options of estimate, solve, plan, explain and sweep (``layoutsearch.cli.options``), the
keys of a problem file (``core.problem_file``), the keyword arguments of the Python API
(``layoutsearch.api``), ``docs/cli.md`` (``scripts/cli_docs.py``) and the option-backed fields
of a result document's workload record (``core.problem.WorkloadRecord``).

A field's command-line spelling is ``--field-name`` (``--name/--no-name`` for a boolean)
unless ``flags`` in its metadata gives another (a short name, a plain switch). Every float must be
a finite number (``OptionGroup``: pydantic's ``allow_inf_nan=False``; a range alone lets NaN through).
"""

from __future__ import annotations

from enum import Enum, StrEnum
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from layoutsearch.core.catalogue import MAX_DEVICE_POWER_W
from layoutsearch.core.specs import (
    LEARNED_ROUTING_EXPERT_CV,
    CPFlavour,
    CrossEntropy,
    CudaGraphs,
    Fp4Recipe,
    Fp8Recipe,
    Framework,
    Method,
    MfuConvention,
    Objective,
    Offload,
    Precision,
    Recompute,
    Routing,
    Schedule,
    Workload,
)
from layoutsearch.core.units import (
    GIB,
    MAX_GLOBAL_BATCH_SEQS,
    MAX_MICROBATCHES,
    MAX_MODEL_DIM,
    MAX_SEQ_LEN,
    MAX_TIME_LIMIT_S,
    MAX_VIRTUAL_STAGES_RECORD,
)

__all__ = [
    "Format",
    "Executor",
    "CheckpointMode",
    "GOODPUT_OPTIONS",
    "FAILURE_OPTIONS",
    "OptionGroup",
    "InputOptions",
    "ProblemOptions",
    "WorkloadOptions",
    "SearchOptions",
    "PlanOptions",
    "LayoutOptions",
    "OutputOptions",
    "PlanFormat",
    "PlanOutputOptions",
    "SweepOptions",
    "GROUPS",
    "MAX_ROUTING_CV",
    "plain",
    "option_type",
]

MAX_FALLBACK_NODES = 64  # each lost node count is a row of two searches
MAX_ROUTING_CV = 10.0  # a learned router's load spread beyond this is a collapse, not a plan
# Goodput defaults (costs.goodput): Llama 3's 419 unexpected interruptions in 54 days on 16,384
# H100 (the Llama 3 paper, section 3.3.4), per device-hour; the restart besides loading the
# checkpoint (relaunch, rendezvous, warm-up) is an assumption (docs/planning.md)
LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR = 419 / (54 * 24 * 16_384)
DEFAULT_RESTART_TIME_S = 600.0


class Format(StrEnum):
    """Output format; every command prints all three."""

    table, json, yaml = "table", "json", "yaml"


class PlanFormat(StrEnum):
    """The plan page's format: the commands' three and a Markdown report."""

    table, json, yaml, markdown = "table", "json", "yaml", "markdown"


class CheckpointMode(StrEnum):
    """How a checkpoint stops training: for the whole write, or only for the copy to host."""

    blocking, async_ = "blocking", "async"


class Executor(StrEnum):
    """Where the sweep's points run: a local process pool or Ray."""

    local, ray = "local", "ray"


def framework_choice(description: str) -> Any:
    """A workload switch left to the framework profile unless given (None: its choice)."""
    return Field(None, description=f"{description} (default: the framework's choice)")


def cli(*flags: str) -> dict[str, Any]:
    """A field's command-line metadata: its flags where they differ from ``--field-name``."""
    return {"flags": flags}


def switch(flag: str, description: str) -> Any:
    """An off-by-default boolean set by the lone ``flag`` (no ``--no-`` form)."""
    return Field(False, description=description, json_schema_extra=cli(flag))


def plain(value: Any) -> Any:
    """A choice as its plain value ('bf16', not Precision.bf16); anything else as it is."""
    return value.value if isinstance(value, Enum) else value


def option_type(annotation: Any) -> Any:
    """The type of a field without ``| None`` (``list[str]`` stays a list)."""
    if get_origin(annotation) in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def _choice_of(annotation: Any) -> type[Enum] | None:
    """The Enum of a choice field (``Framework | None`` -> Framework), else None."""
    members = (
        get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    )
    return next((m for m in members if isinstance(m, type) and issubclass(m, Enum)), None)


class OptionGroup(BaseModel):
    """Options of one concern: frozen, unknown names refused, validated only when used."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _choice(cls, value: Any, info: ValidationInfo) -> Any:
        """A closed choice by its value ('bf16'); anything else refused naming the choices."""
        assert info.field_name is not None  # a field validator always has its field
        enum = _choice_of(cls.model_fields[info.field_name].annotation)
        if enum is None or value is None or isinstance(value, enum):
            return value
        for member in enum:
            if member.value == value:
                return member
        raise ValueError(f"{value!r} is not one of {', '.join(repr(m.value) for m in enum)}.")

    def values(self) -> dict[str, Any]:
        """The options by name, choices as their plain values."""
        return {name: plain(getattr(self, name)) for name in type(self).model_fields}


class InputOptions(OptionGroup):
    """Where options come from besides the command line."""

    problem_file: str | None = Field(
        None,
        description="Problem YAML (examples/*.problem.yaml): keys mirror the options, which "
        "override it",
        json_schema_extra=cli("--problem"),
    )


class ProblemOptions(OptionGroup):
    """What is trained, on what, with what batch."""

    model: str = Field(
        "llama70b",
        description="Catalogue id (llama70b) or a path to a model YAML / HF config.json",
        json_schema_extra=cli("--model", "-m"),
    )
    cluster: str = Field(
        "v5p-8192",
        description="v5p-8192 (chips), v5p:16x20x28, v5p-8960x4, h100-1024, or a cluster YAML "
        "(examples/*.cluster.yaml)",
        json_schema_extra=cli("--cluster", "-c"),
    )
    seqs: int = Field(1024, ge=1, le=MAX_GLOBAL_BATCH_SEQS, description="Global batch in sequences")
    seq_len: int = Field(4096, ge=1, le=MAX_SEQ_LEN, description="Tokens per sequence")


class WorkloadOptions(OptionGroup):
    """The workload assumptions; ``workload()`` turns them into a ``Workload`` in SI units."""

    framework: Framework | None = Field(
        None,
        description="Whose overlap the step time assumes: megatron, torchtitan, maxtext, "
        "deepspeed or ideal (default: maxtext on TPUs, megatron on GPUs)",
    )
    precision: Precision = Field(
        Precision.bf16,
        description="bf16 (fp16 costs the same), fp8 GEMMs, or fp4 GEMMs of the linear layers "
        "(Blackwell parts)",
    )
    fp8_recipe: Fp8Recipe | None = Field(
        None,
        description="How fp8 GEMMs scale their operands, which sets their rate: tensorwise (per tensor: "
        "Transformer Engine delayed or current scaling), rowwise, blockwise (DeepSeek-V3's 1x128 / "
        "128x128 tiles), mxfp8 (32-value blocks, Blackwell and MI355X); with --precision fp8 "
        "(default: the framework's, tensorwise in each)",
    )
    fp4_recipe: Fp4Recipe | None = Field(
        None,
        description="How fp4 GEMMs scale their operands: nvfp4 (an e4m3 scale per 16 values, NVIDIA's "
        "recipe: Transformer Engine, Megatron) or mxfp4 (an e8m0 scale per 32 values, no framework "
        "trains with it yet); with --precision fp4 (default: nvfp4)",
    )
    tp_comm_overlap: bool | None = framework_choice(
        "TP collectives pipelined with their GEMMs inside NVLink/ICI"
    )
    tp_backward_async: bool | None = framework_choice(
        "Each column-parallel linear's backward TP collective runs beside its weight- and "
        "input-gradient GEMMs (Megatron's asynchronous all-reduce, its default since September 2021, and "
        "Transformer Engine's); --no-tp-backward-async: exposed (Megatron-LM before September 2021)"
    )
    grad_accumulation_fusion: bool | None = framework_choice(
        "Each microbatch's weight gradients are added to their fp32 accumulators by the GEMM that "
        "computes them (Megatron's --gradient-accumulation-fusion, its default since February 2022); "
        "--no-grad-accumulation-fusion: by a memory-bound kernel of their own each microbatch "
        "(Megatron-LM before it, DeepSpeed)"
    )
    pp_comm_overlap: bool | None = framework_choice(
        "An interleaved pipeline's sends between stages run beside the other chunks' compute (Megatron's "
        "--overlap-p2p-communication, its default since October 2023); --no-pp-comm-overlap: each chunk "
        "waits for its sends (Megatron-LM before it). 1F1B's sends are exposed either way"
    )
    grad_reduce_overlap: bool | None = framework_choice(
        "The once-per-step gradient reductions (DP, ZeRO-1/2) run in the last microbatch's backward "
        "(Megatron's --overlap-grad-reduce, since August 2023; PyTorch DDP and FSDP); "
        "--no-grad-reduce-overlap: after the whole schedule, waited for (Megatron-LM's local DDP and "
        "distributed optimizer before it)"
    )
    ep_comm_overlap: bool | None = framework_choice(
        "MoE token all-to-alls hidden behind another microbatch's compute"
    )
    deepep: bool | None = framework_choice(
        "MoE dispatch sends a token once per destination GPU and over scale-out once per "
        "destination node (DeepEP; Megatron's flex dispatcher, torchtitan's deepep backend) "
        "instead of once per expert"
    )
    fp8_dispatch: bool = Field(
        False,
        description="MoE tokens dispatched in fp8 with a scale per 128 values, combined in bf16 "
        "(DeepSeek-V3, DeepEP); with --precision fp8",
    )
    vendor_attention: bool | None = Field(
        None,
        description="The attention core runs the vendor's fused kernel (Transformer Engine / "
        "cuDNN) where the accelerator has one, else the FlashAttention-2 class (default: the "
        "framework's choice: megatron and ideal use the vendor's)",
    )
    triton_attention: bool = Field(
        False,
        description="The attention core runs MPT's 2022 Triton FlashAttention kernel "
        "(llm-foundry's attn_impl: triton), at the accelerator's triton_attention_efficiency "
        "(a100 and the h100 class, fitted on llm-foundry's benchmark tables)",
    )
    torch_compile: bool | None = framework_choice(
        "The model runs under torch.compile (torchtitan's compile.enable, which its export "
        "writes): element-wise ops fused; --no-torch-compile: eager PyTorch, one kernel per op "
        "(the rotary embedding's fp32 complex multiply, the MLP activation and its product, "
        "the loss's upcast and softmax, fp8 scaling), costed as the extra bytes they move; "
        "torchtitan only (megatron and maxtext run fused kernels either way)"
    )
    compiled_loss: bool | None = framework_choice(
        "Under torch.compile the loss is compiled with the model (torchtitan's compile "
        "components model and loss, since April 2025): the fp32 upcast of the logits is fused "
        "into its kernels, so the logits and their gradient are held in the compute precision; "
        "--no-compiled-loss: the loss runs eagerly and holds fp32 copies (torchtitan before April "
        "2025); torchtitan only"
    )
    cross_entropy: CrossEntropy | None = Field(
        None,
        description="The loss's kernels over the logits: megatron's native (its compiled fp32 one, "
        "--cross-entropy-fusion-impl native; the default), te (Transformer Engine's Triton kernel in "
        "bf16, the gradient in place: Megatron-Bridge) or unfused (its fp32 PyTorch ops, without "
        "--cross-entropy-loss-fusion); deepspeed's eager (the Hugging Face loss; the default) or "
        "unfused (Megatron-DeepSpeed's); torchtitan's follows --compiled-loss, MaxText's is XLA's",
    )
    launch_blocking: bool = Field(
        False,
        description="Every kernel launch waits for the GPU (CUDA_LAUNCH_BLOCKING=1): the host's "
        "time per layer is exposed and no collective overlaps compute",
    )
    cuda_graphs: CudaGraphs = Field(
        CudaGraphs.none,
        description="GPU kernels launched as CUDA graphs: none; scoped (per layer: attention, "
        "MoE router and preprocessing); full_iteration (one graph per step). They remove MoE "
        "layers' host overhead",
    )
    routing: Routing = Field(
        Routing.learned,
        description="How a dropless MoE routes tokens: learned (a trained router: the expert "
        "devices' loads vary and the busiest sets the pace) or forced (random routing, as "
        "benchmarks force it: --moe-router-force-load-balancing)",
    )
    routing_cv: float = Field(
        LEARNED_ROUTING_EXPERT_CV,
        ge=0,
        le=MAX_ROUTING_CV,
        description=f"A learned router's spread of expert loads per MoE layer and microbatch, "
        f"standard deviation / mean (default {LEARNED_ROUTING_EXPERT_CV:g}, fitted to published "
        f"runs: results/routing_cv.md); unused with --routing forced",
    )
    grad_bytes: int = Field(
        4, ge=2, le=4, description="Bytes per gradient element: 4 fp32 main grads, 2 bf16"
    )
    moment_bytes: int = Field(
        4, ge=2, le=4, description="Bytes per Adam moment element (m and v): 4 fp32, 2 bf16"
    )
    fused_attention: bool = Field(
        True, description="FlashAttention-style kernels (no S x S scores in HBM)"
    )
    fp32_logits: bool = Field(
        True,
        description="The loss upcasts the output head's logits to fp32 (Megatron, torchtitan, "
        "MaxText, NeMo Automodel's default); --no-fp32-logits: the loss runs on them in the "
        "compute precision (Automodel's fp32_upcast: false, MaxText's cast_logits_to_fp32: "
        "false), the logits and their gradient in half the bytes",
    )
    hbm_gib: float | None = Field(
        None, ge=1, le=4096, description="Device memory in GiB when the part differs (e.g. 96)"
    )
    memory_margin_gib: float = Field(
        0.0, ge=0, le=1024, description="Memory kept free on every device, GiB"
    )
    power_limit_w: float | None = Field(
        None,
        gt=0,
        le=MAX_DEVICE_POWER_W,
        description="Power cap per device, W (nvidia-smi -pl): below the board power it lowers "
        "the sustained clock and so the compute rate (docs/planning.md#power-caps); default: "
        "the rating, no cap",
    )

    def workload(self, seqs: int, seq_len: int, tokens: float | None = None) -> Workload:
        """The Workload of these options: GiB become bytes, bytes per element bytes per
        parameter (Adam keeps two moments); an option named like a Workload field is copied."""
        converted: dict[str, Any] = {
            "grad_bytes_per_param": self.grad_bytes,
            "optimizer_bytes_per_param": 2 * self.moment_bytes,
            "flash_attention": self.fused_attention,
            "hbm_bytes": None if self.hbm_gib is None else self.hbm_gib * GIB,
            "memory_margin_bytes": self.memory_margin_gib * GIB,
        }
        same = {k: v for k, v in self.values().items() if k not in _CONVERTED}
        return Workload(
            global_batch_seqs=seqs,
            seq_len=seq_len,
            training_tokens=tokens,
            **same,
            **converted,
        )


_CONVERTED = ("grad_bytes", "moment_bytes", "fused_attention", "hbm_gib", "memory_margin_gib")


class SearchOptions(OptionGroup):
    """What a search (solve, explain) may return and how it searches."""

    top: int = Field(3, ge=1, le=50, description="How many distinct layouts to rank")
    fix: str | None = Field(None, description="Pin degrees, e.g. tp=8,pp=1")
    choices: str | None = Field(None, description="Allowed values, e.g. 'tp=8,16,32,64;pp=1,2'")
    only: str | None = Field(None, description="Degrees that may exceed 1, e.g. fsdp,tp")
    objective: Objective = Field(
        Objective.step_time,
        description="step-time; gather-volume: the FSDP weight gather plus the TP input "
        "gather per step, 2DF/tp + 2BD tp/N; time-to-train: step time / goodput (each layout's "
        "checkpoint and the failure options; --tokens not needed: it scales every layout "
        "alike); energy: joules per step, busy power while computing, idle power otherwise",
    )
    time_limit: float = Field(
        30.0,
        ge=0.1,
        le=MAX_TIME_LIMIT_S,
        description="Time limit in seconds of the whole command (of each point in a sweep); "
        "the candidate tables are built whole, so a tiny limit runs past by their time",
    )
    method: Method = Field(
        Method.cpsat, description="cpsat (proof) or enumerate (exhaustive oracle)"
    )
    recompute: str | None = Field(None, description="Allowed policies, e.g. none,full")
    schedules: str | None = Field(
        None,
        description="Pipeline schedules to search, e.g. 1f1b,zb-v,dualpipev (default: 1f1b and "
        "interleaved, or those of the --export target)",
    )
    pipeline_splits: str | None = Field(
        None,
        description="Pipeline layer splits to search where pp > 1, e.g. even,first-last (even, "
        "embedding-and-loss, first-last, chunk-layout, balanced; default every one the framework "
        "writes but balanced, which is opt-in: Megatron writes it; with --export torchtitan, whose "
        "only other split is even, balanced too)",
    )
    cp_flavours: str | None = Field(
        None,
        description="Context-parallel flavours to search where cp > 1, e.g. ring,a2a (ring, "
        "allgather, a2a, a2a+ring; default ring, all four with --framework ideal; an --export "
        "target drops those it cannot write)",
    )
    offload: str = Field(
        "none",
        description="Allowed model-state offload to host memory, e.g. none,optimizer,params "
        "(optimizer: fp32 master and Adam moments; params: and the weights); opt-in",
    )
    sequence_parallel: bool = Field(
        True,
        description="Search layouts with Megatron sequence parallelism inside the TP group; "
        "--no-sequence-parallel for a framework without it (Megatron-LM before April 2022)",
    )


class PlanOptions(OptionGroup):
    """The plan around a layout: time and cost to train, a what-if, the sensitivity."""

    tokens: float | None = Field(
        None,
        description="Training tokens (e.g. 15e12): days, device-hours and cost of each layout",
    )
    price_per_device_hour: float | None = Field(
        None,
        description="Price of one device for one hour (any currency): cost = device-hours x price",
    )
    what_if: str | None = Field(
        None,
        description="Scale hardware numbers and compare: KEY=FACTOR[,KEY=FACTOR], KEY one of "
        "scale_out_bandwidth, link_bandwidth, hbm, hbm_bandwidth, peak_flops",
    )
    sensitivity: bool = switch(
        "--sensitivity",
        "Step-time change of layout 1 when each hardware number is +10% (layout fixed)",
    )
    against_best: bool = switch(
        "--against-best",
        "Also search the problem and say how much faster its best layout is predicted than this one, and "
        "whether that lies beyond the model's uncertainty (the rule of explain --versus)",
    )
    failure_rate_per_device_hour: float = Field(
        LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR,
        ge=0,
        le=1e-2,
        description=f"Job-stopping failures per device-hour (default "
        f"{LLAMA3_FAILURE_RATE_PER_DEVICE_HOUR:.4g}: Llama 3's 419 in 54 days on 16,384 H100); "
        f"0: no failures, goodput 1",
    )
    restart_time_s: float = Field(
        DEFAULT_RESTART_TIME_S,
        ge=0,
        le=1e6,
        description="Seconds from a failure to training again (relaunch, warm-up), besides "
        "loading the checkpoint",
    )
    checkpoint_mode: CheckpointMode = Field(
        CheckpointMode.blocking,
        description="blocking (training waits for the write) or async (only the copy to host "
        "memory blocks)",
    )
    checkpoint_write_gbytes_per_s_per_node: float | None = Field(
        None,
        gt=0,
        le=1e4,
        description="Checkpoint write bandwidth of one node (host), GB/s (default: the "
        "accelerator's catalogue value, else Llama 3's 2 TB/s over 2,048 hosts)",
    )
    price_per_kwh: float | None = Field(
        None,
        ge=0,
        le=1e3,
        description="Price of a kWh of device energy (any currency): energy_cost of each layout",
    )
    fallback_nodes: int = Field(
        0,
        ge=0,
        le=MAX_FALLBACK_NODES,
        description="For 1..K lost nodes (GPU nodes; TPU slices), the best layout on what "
        "remains: reshard-free (same tp, pp, cp, ep, etp) and free (with the one-time "
        "resharding of the checkpoint), each with its throughput loss (0: none)",
    )
    versus: str | None = Field(
        None,
        description="Hold the winner against a layout's degrees (e.g. fsdp=128,tp=8,pp=16, the "
        "rest 1): the best completion of them is searched, and the claimed speed-up is called "
        "distinguishable only when the two step times' uncertainty bands do not overlap; a dp given "
        "without fsdp is completed both replicated and sharding the optimizer state (as fsdp), and the "
        "claim held against the faster",
    )


class LayoutOptions(OptionGroup):
    """One layout, as estimate takes it."""

    layout: str = Field(
        "fsdp=1024,tp=8",
        json_schema_extra=cli("--layout", "-l"),
        description="Degrees, e.g. fsdp=1024,tp=8 (missing = 1)",
    )
    microbatches: int | None = Field(
        None,
        ge=1,
        le=MAX_MICROBATCHES,
        description="Microbatches per step (default: 1, or with a pipeline the smallest count "
        ">= pp that divides the batch)",
    )
    first_stage_layers: int | None = Field(
        None,
        ge=1,
        le=MAX_MODEL_DIM,
        description="Layers of the first pipeline stage (uneven split; default: the engine's "
        "split)",
    )
    last_stage_layers: int | None = Field(
        None, ge=1, le=MAX_MODEL_DIM, description="Layers of the last pipeline stage"
    )
    balanced_split: bool = Field(
        False,
        description="The balanced pipeline split: the layers, weighed by their FLOPs (dense and MoE "
        "layers, the output head), cut into pp x virtual-stages chunks whose heaviest is lightest "
        "(1f1b or interleaved; Megatron --pipeline-model-parallel-layout); not with "
        "--first-stage-layers/--last-stage-layers",
    )
    recompute: Recompute = Field(
        Recompute.none, description="Activation-checkpoint policy of the layout"
    )
    zero_stage: int = Field(3, description="0 DDP, 1 optimizer, 2 + grads, 3 + weights sharded")
    offload: Offload = Field(
        Offload.none,
        description="Model state in host memory: none, optimizer (fp32 master and Adam "
        "moments) or params (and the weights)",
    )
    virtual_stages: int = Field(
        1, ge=1, le=MAX_VIRTUAL_STAGES_RECORD, description="Model chunks per pipeline stage"
    )
    schedule: Schedule = Field(Schedule.one_f_one_b, description="Pipeline schedule")
    cp_flavour: CPFlavour = Field(
        CPFlavour.ring,
        description="Context-parallel flavour where cp > 1: ring, allgather, a2a (Ulysses) "
        "or a2a+ring (all-to-all inside a node, ring across)",
    )
    sequence_parallel: bool = Field(
        True, description="Megatron sequence parallelism inside the TP group"
    )
    axes: str | None = Field(
        None,
        description="Placement, e.g. 'tp=z:8;fsdp=z:4,y:16,x:16', or as the tables print it, 'tp:z8; fsdp:z4*y16*x16'",
    )
    mfu_convention: MfuConvention = Field(
        MfuConvention.model, description="How MFU counts FLOPs: model, palm or palm-causal"
    )


class OutputOptions(OptionGroup):
    """Where and how a command writes its result."""

    format: Format = Field(Format.table, description="table, json or yaml")
    export: str | None = Field(
        None,
        description="Also write layout 1 as maxtext|megatron|megatron-bridge|torchtitan|torchtitan-0.3|deepspeed",
    )
    output: str | None = Field(
        None,
        description="Output file (stdout without it)",
        json_schema_extra=cli("--output", "-o"),
    )


class PlanOutputOptions(OutputOptions):
    """Where and how plan writes its page: the outputs, with Markdown among the formats."""

    format: PlanFormat = Field(  # type: ignore[assignment]  # a wider choice than Format
        PlanFormat.table,
        description="table, json, yaml or markdown (-o FILE.md: markdown)",
    )


class SweepOptions(OptionGroup):
    """A sweep's points (several values per option) and how it runs them."""

    model: str | None = Field(
        None,
        description="Model ids, comma-separated: llama70b,llama3-405b",
        json_schema_extra=cli("--model", "-m"),
    )
    cluster: list[str] | None = Field(
        None,
        description="Clusters, comma-separated and repeatable; ranges: 'v5p-{256..8192:x2}' "
        "(multiply) or 'h100-{64..512:+64}' (add); cluster YAML files",
        json_schema_extra=cli("--cluster", "-c"),
    )
    seqs: str = Field("1024", description="Global batches in sequences: 256,512 or {256..2048:x2}")
    seq_len: str = Field("4096", description="Tokens per sequence (comma list allowed)")
    output: str = Field(
        ..., description="sweep.parquet or sweep.csv", json_schema_extra=cli("--output", "-o")
    )
    jobs: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Parallel solves (default: CPU count)",
        json_schema_extra=cli("--jobs", "-j"),
    )
    executor: Executor = Field(Executor.local, description="local (process pool) or ray")
    address: str | None = Field(
        None, description="Ray cluster address (default: start a local Ray)"
    )
    fresh: bool = switch("--fresh", "Forget finished points (the journal) and solve all again")
    retry_failed: bool = switch("--retry-failed", "Solve ERROR and UNKNOWN points again")
    progress: bool = Field(True, description="Progress bar on stderr, when it is a terminal")
    max_site_power_mw: float | None = Field(
        None,
        gt=0,
        le=1e5,
        description="Site power budget, MW: a point whose devices draw more at their busy power "
        "(board power, or --power-limit-w below it) is INFEASIBLE with the reason",
    )


# The PlanOptions of the goodput of each layout (and of the time-to-train objective)
FAILURE_OPTIONS = (
    "failure_rate_per_device_hour",
    "restart_time_s",
    "checkpoint_mode",
    "checkpoint_write_gbytes_per_s_per_node",
)
# ... and every command with --tokens takes them with the energy's price
GOODPUT_OPTIONS = (*FAILURE_OPTIONS, "price_per_kwh")

# The plan options each command takes (the CLI's command specs and the API's keywords alike)
PLAN_FIELDS: dict[str, tuple[str, ...]] = {
    "solve": ("tokens", "price_per_device_hour", "what_if", *GOODPUT_OPTIONS, "fallback_nodes"),
    "explain": ("tokens", "price_per_device_hour", "sensitivity", "versus", *GOODPUT_OPTIONS),
    "estimate": ("tokens", "price_per_device_hour", "what_if", "against_best", *GOODPUT_OPTIONS),
    "sweep": ("tokens", "price_per_device_hour", *GOODPUT_OPTIONS),
}

GROUPS = (
    InputOptions,
    ProblemOptions,
    WorkloadOptions,
    SearchOptions,
    PlanOptions,
    LayoutOptions,
    OutputOptions,
    PlanOutputOptions,
    SweepOptions,
)
