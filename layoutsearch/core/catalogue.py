"""Model and accelerator catalogues: one YAML file per item, file name = id.

This is the only place that reads human units (GiB, GB/s, TFLOP/s, us) and converts them to
SI. Validation happens here, with pydantic, and every error is one line naming the file, the
field and the value.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
import warnings
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    create_model,
)

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, LayoutsearchWarning, did_you_mean
from layoutsearch.core.fields import kind_of
from layoutsearch.core.specs import (
    Accelerator,
    Fp4Recipe,
    Fp8Recipe,
    MlaSpec,
    MlpKind,
    ModelSpec,
    MoeSpec,
    QkNorm,
    RopeScaling,
)
from layoutsearch.core.units import (
    GB,
    GIB,
    KIB,
    MAX_DEVICES,
    MAX_HBM_BYTES,
    MAX_MODEL_DIM,
    MAX_MODEL_PARAMS,
    MICRO,
    MILLI,
    TERA,
)

Dim = Annotated[
    int, Field(gt=0, le=MAX_MODEL_DIM)
]  # every model dimension: parameter counts stay exact in int64
MAX_NORMS_PER_LAYER = 8

# The ranges of the hardware numbers (hardware/*.yaml, an accelerator_spec, a cluster file): wide
# enough for any device built or announced, narrow enough that every time and byte count the
# search quantises stays far inside int64 (a 1e-300 GB/s link or 2**70 GiB overflowed it).
MIN_TFLOPS, MAX_TFLOPS = 1e-3, 1e5  # 1 GFLOP/s .. 100 PFLOP/s per device
MIN_GBYTES_PER_S, MAX_GBYTES_PER_S = 1e-3, 1e6  # 1 MB/s .. 1 PB/s per device and direction
MAX_HBM_GIB = MAX_HBM_BYTES / GIB  # 4096 GiB per device (what leaves nothing usable: problem.py)
MAX_LATENCY_US = 1e6  # one second per collective step
MAX_OVERHEAD_US = 1e6  # per microbatch, MoE layer or expert: one second
Tflops = Annotated[float, Field(ge=MIN_TFLOPS, le=MAX_TFLOPS, allow_inf_nan=False)]
GBytesPerS = Annotated[float, Field(ge=MIN_GBYTES_PER_S, le=MAX_GBYTES_PER_S, allow_inf_nan=False)]
Gib = Annotated[float, Field(gt=0, le=MAX_HBM_GIB, allow_inf_nan=False)]
Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_US, allow_inf_nan=False)]
Overhead = Annotated[float, Field(ge=0, le=MAX_OVERHEAD_US, allow_inf_nan=False)]


def catalogue_dir(kind: str) -> Path:
    """The `models/` or `hardware/` folder: the repository's when run from a checkout, else the wheel's."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / kind, package / "_catalogue" / kind):
        if candidate.is_dir():
            return candidate
    raise CatalogueError(f"catalogue folder '{kind}' not found next to the package")


class _Strict(BaseModel):
    """Every float of a catalogue file finite (a YAML .inf or .nan is refused, naming the field)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True, allow_inf_nan=False)


def _file_schema(spec: type, overrides: dict) -> type[BaseModel]:
    """The YAML schema of a frozen spec dataclass: its fields, every integer a model dimension
    (``Dim``) unless ``overrides`` says otherwise, the dataclass defaults as defaults."""
    hints = typing.get_type_hints(spec)
    fields = {
        f.name: (
            overrides.get(f.name, Dim if hints[f.name] is int else hints[f.name]),
            ... if f.default is dataclasses.MISSING else f.default,
        )
        for f in dataclasses.fields(spec)
    }
    definitions: dict[str, Any] = fields  # create_model's (type, default) pairs
    return create_model(f"{spec.__name__}File", __base__=_Strict, **definitions)


class RopeScalingFile(_Strict):
    rope_type: Literal["llama3"] = "llama3"
    factor: float = Field(gt=0, le=MAX_MODEL_DIM)
    low_freq_factor: float = Field(gt=0, le=MAX_MODEL_DIM)
    high_freq_factor: float = Field(gt=0, le=MAX_MODEL_DIM)
    original_max_position_embeddings: Dim


Unit = Annotated[float, Field(ge=0, lt=1)]
MAX_ROPE_THETA = 1e12  # published bases reach 1e8
Count = Annotated[int, Field(ge=0, le=MAX_MODEL_DIM)]
MAX_MTP_LAYERS = 16
MoeFile = _file_schema(
    MoeSpec,
    {
        "num_shared_experts": Count,
        "shared_d_ff": Count,
        "first_dense_layers": Count,
        "expert_groups": Dim,
        "groups_per_token": Dim,
        "capacity_factor": Optional[Annotated[float, Field(gt=0, le=MAX_MODEL_DIM)]],
    },
)
MlaFile = _file_schema(MlaSpec, {"q_lora_rank": Optional[Dim]})
# Built from the spec dataclasses' fields at import: a type checker cannot see their attributes
# (ModelSpec's, MoeSpec's, MlaSpec's), so functions of a validated ModelFile take it as Any.
ModelFile = _file_schema(
    ModelSpec,
    {
        "moe": Optional[MoeFile],
        "mla": Optional[MlaFile],
        "mtp_layers": Annotated[int, Field(ge=0, le=MAX_MTP_LAYERS)],
        "name": Annotated[str, Field(min_length=1, max_length=256)],
        "learned_positions": Annotated[int, Field(ge=0, le=MAX_MODEL_DIM)],
        "norms_per_layer": Annotated[int, Field(ge=1, le=MAX_NORMS_PER_LAYER)],
        "sliding_window": Optional[Dim],
        "attention_chunk": Optional[Dim],
        "full_attention_layers": Annotated[int, Field(ge=0, le=MAX_MODEL_DIM)],
        "nope_layers": Annotated[int, Field(ge=0, le=MAX_MODEL_DIM)],
        "rope_theta": Annotated[float, Field(gt=0, le=MAX_ROPE_THETA)],
        "rope_scaling": Optional[RopeScalingFile],
        "norm_eps": Annotated[float, Field(gt=0, lt=1)],
        "activation": Optional[Annotated[str, Field(min_length=1, max_length=64)]],
        "attention_dropout": Unit,
        "hidden_dropout": Unit,
    },
)


DeviceCount = Annotated[int, Field(ge=1, le=MAX_DEVICES)]


class TopologyFile(_Strict):
    torus_dims: int = Field(default=0, ge=0, le=3)
    wraparound_min_axis: int = Field(default=0, ge=0, le=MAX_DEVICES)
    wraparound_needs_full_cube: bool = False
    max_slice_shape: list[DeviceCount] = Field(default=[], max_length=3)
    devices_per_host: DeviceCount = 1
    devices_per_node: DeviceCount = 1
    node_fabric: Literal["switch", "mesh"] = Field(
        default="switch",
        description="GPU: how a node's devices connect: one switch (NVSwitch: a group of any size "
        "inside the node gets link_gbytes_per_s_per_direction) or a full mesh of direct links (AMD "
        "Infinity Fabric: link_gbytes_per_s_per_direction is the sum over the devices_per_node - 1 "
        "peer links, so a group of k devices gets k - 1 of them)",
    )


class GemmFile(_Strict):
    compute_units: int = Field(
        ge=1,
        le=MAX_DEVICES,
        description="units that work through a GEMM's output tiles in waves (GPU: SMs or CUs; TPU: MXUs)",
    )
    tile_rows: int = Field(
        ge=1, le=MAX_MODEL_DIM, description="rows of the output tile one unit computes"
    )
    tile_cols: int = Field(ge=1, le=MAX_MODEL_DIM, description="columns of that tile")
    smaller_tiles: list[tuple[int, int]] = Field(
        default_factory=list,
        max_length=8,
        description="other (rows, cols) tiles the GEMM library picks where they fill the units better "
        "(GPU libraries; a TPU's MXU has one): each runs at smaller_tile_efficiency of the main tile's rate",
    )
    smaller_tile_efficiency: float = Field(default=1.0, gt=0, le=1)


# an fp8 fraction twice the bf16 fraction bounds typos (measured on the H200: 0.79-0.93)
MAX_FP8_RECIPE_RATIO = 2.0


class CalibrationFile(_Strict):
    compute_fractions: Literal["fitted", "fitted-moe", "borrowed"] = Field(
        default="borrowed",
        description="fitted: matmul_efficiency and attention_efficiency were fitted on measured runs of "
        "this part's compute die (a member of a fitted class on the same die counts: h200 and h800 in the "
        "h100-class fit of GH100); fitted-moe: fitted on its mixture-of-experts runs only, so dense models' "
        "predictions get the uncalibrated band; borrowed: taken from another part's fit, and predictions get the "
        "uncalibrated uncertainty band (core.uncertainty). Absent = borrowed, the cautious reading.",
    )
    matmul_efficiency: float = Field(gt=0, le=1)
    matmul_half_efficiency_tokens: float = Field(ge=0, le=MAX_MODEL_DIM)
    gemm_half_efficiency_depth: float = Field(
        ge=0, le=MAX_MODEL_DIM
    )  # a GEMM's depth k at which a tile's fixed cost halves its rate
    attention_efficiency: float = Field(gt=0, le=1)
    collective_efficiency: float = Field(gt=0, le=1)
    scale_out_efficiency: float = Field(gt=0, le=1)
    collective_half_efficiency_kib: float = Field(ge=0, le=MAX_HBM_BYTES / KIB)
    microbatch_overhead_us: Overhead
    step_overhead_ms: float = Field(ge=0, le=MAX_OVERHEAD_US)
    # per fp8 recipe the part runs: its fraction of the fp8 peak over matmul_efficiency (docs/calibration.md
    # "fp8_recipe_ratio"); needs peak_fp8_tflops; a recipe absent is one the part cannot run
    fp8_recipe_ratio: (
        dict[Fp8Recipe, Annotated[float, Field(gt=0, le=MAX_FP8_RECIPE_RATIO)]] | None
    ) = None
    # the same for fp4 (docs/calibration.md "fp4_recipe_ratio"); needs peak_fp4_tflops
    fp4_recipe_ratio: dict[Fp4Recipe, Annotated[float, Field(gt=0, le=1)]] | None = None
    elementwise_hbm_fraction: float = Field(
        default=1.0, gt=0, le=1
    )  # of the datasheet HBM bandwidth, the rate element-wise kernels move bytes at
    norm_hbm_fraction: float = Field(
        default=1.0, gt=0, le=1
    )  # of the datasheet HBM bandwidth, the rate norm kernels (row reductions) move bytes at
    vendor_attention_efficiency: float | None = Field(
        default=None, gt=0, le=1
    )  # cuDNN / TE fused attention
    triton_attention_efficiency: float | None = Field(
        default=None, gt=0, le=1
    )  # MPT's 2022 Triton FlashAttention kernel (llm-foundry's attn_impl: triton)
    attention_half_efficiency_keys: float = Field(
        default=0.0, ge=0, le=MAX_MODEL_DIM
    )  # keys per query per kernel
    # call at which fused attention runs at half its long-context rate
    grouped_matmul_efficiency: float = Field(
        default=1.0, gt=0, le=1
    )  # MoE expert GEMMs, of the dense fraction
    moe_launch_latency_us: Overhead = 0.0  # host time per kernel launch of a MoE layer
    moe_host_sync_us: Overhead = 0.0  # the dispatcher's host sync per MoE layer and microbatch
    moe_overhead_full_graph_share: float = Field(
        default=1.0, ge=0, le=1
    )  # of the MoE host time, what a full-iteration graph removes
    overlap_interference: float = Field(
        default=0.0, ge=0, le=1
    )  # compute lost per second of hidden collective
    blocking_launch_us_per_layer_pass: float | None = Field(
        default=None, ge=0, le=MAX_OVERHEAD_US
    )  # host time per layer pass
    # exposed by blocking kernel launches (CUDA_LAUNCH_BLOCKING=1); absent = not calibrated


MAX_DEVICE_POWER_W = 1e5  # a board draws kilowatts; this bounds typos
MAX_HOST_MEMORY_GIB = 1 << 16  # 64 TiB per host bounds typos (DGX hosts hold 1-4 TiB)
MAX_HOST_CPU_CORES = 4096


class AcceleratorFile(_Strict):
    id: str
    name: str
    kind: Literal["tpu", "gpu"]
    # the runtime its frameworks launch kernels through (absent: "xla" on a TPU, "cuda" on a GPU); what it
    # cannot run is refused (core.problem.resolved_workload: CUDA graphs, TP overlap, DeepEP, blocking launches)
    runtime: Literal["cuda", "rocm", "synapse", "xla"] | None = None
    peak_bf16_tflops: Tflops
    peak_fp8_tflops: Tflops | None = None  # dense fp8 (MXFP8 on Blackwell); absent = no fp8 matmuls
    peak_fp4_tflops: Tflops | None = None  # dense fp4 (NVFP4, MXFP4); absent = no fp4 matmuls
    hbm_gib: Gib | None = None
    hbm_gb: Annotated[float, Field(gt=0, le=MAX_HBM_BYTES / GB)] | None = None
    hbm_gbytes_per_s: GBytesPerS
    link_gbytes_per_s_per_direction: GBytesPerS
    links_per_device: Annotated[int, Field(ge=1, le=1024)] | None = None
    link_latency_us: Latency
    scale_out_gbytes_per_s_per_direction: GBytesPerS
    scale_out_latency_us: Latency
    host_gbytes_per_s_per_direction: GBytesPerS | None = None  # PCIe / NVLink-C2C to host memory
    runtime_reserve_gib: float = Field(ge=0, le=MAX_HBM_GIB)
    topology: TopologyFile
    gemm: GemmFile
    calibration: CalibrationFile
    sources: dict[str, str]
    checkpoint_write_gbytes_per_s_per_node: GBytesPerS | None = None  # storage writes per host
    board_power_w: Annotated[float, Field(gt=0, le=MAX_DEVICE_POWER_W)] | None = None  # rated (TDP)
    idle_power_w: Annotated[float, Field(gt=0, le=MAX_DEVICE_POWER_W)] | None = None
    static_power_w: Annotated[float, Field(gt=0, le=MAX_DEVICE_POWER_W)] | None = None
    # one host's memory and CPU cores (physical), for optimizer and parameter offload; absent = not catalogued
    host_memory_gib_per_node: Annotated[float, Field(gt=0, le=MAX_HOST_MEMORY_GIB)] | None = None
    host_cpu_cores_per_node: Annotated[int, Field(ge=1, le=MAX_HOST_CPU_CORES)] | None = None


def _check_keys(data: Any, schema: type[BaseModel], where: str) -> None:
    """Unknown keys are an error naming the key, with a 'did you mean' hint (recursively)."""
    if not isinstance(data, dict):
        raise CatalogueError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = schema.model_fields
    for key, value in data.items():
        if key not in fields:
            raise CatalogueError(f"{where}: unknown key '{key}'{did_you_mean(str(key), fields)}")
        annotation = fields[key].annotation
        if typing.get_origin(annotation) in (
            typing.Union,
            types.UnionType,
        ):  # Optional[a nested schema]
            annotation = next(
                (a for a in typing.get_args(annotation) if a is not type(None)), annotation
            )
            if value is None:
                continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _check_keys(value, annotation, f"{where}: {key}")


def _validate(data: Any, schema: type[BaseModel], where: str):
    _check_keys(data, schema, where)
    return io.validated(schema, data, where, CatalogueError)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; unreadable, not UTF-8 or malformed is a one-line CatalogueError naming the path."""
    return io.read_yaml(path, error=CatalogueError)


def model_param_bound(f: Any) -> int:
    """An upper bound of the parameter count (every bias and norm counted), without the cost model."""
    attention = (
        f.d_model * (2 * f.num_heads + 2 * f.num_kv_heads) * f.head_dim
        + (f.num_heads + 2 * f.num_kv_heads) * f.head_dim
    )
    if f.qk_norm != "none":
        attention += (f.num_heads + f.num_kv_heads) * f.head_dim
    if f.mla is not None:  # every latent projection at its widest
        a = f.mla
        rank = a.q_lora_rank or f.d_model
        attention = (
            2 * f.d_model * rank
            + rank * f.num_heads * f.head_dim
            + f.d_model * (a.kv_lora_rank + a.qk_rope_head_dim)
            + a.kv_lora_rank * (1 + f.num_heads * (a.qk_nope_head_dim + a.v_head_dim))
            + f.num_heads * a.v_head_dim * f.d_model
        )
    attention += f.num_heads

    def ffn(width: int) -> int:
        return 3 * f.d_model * width + 2 * width + f.d_model

    mlp = ffn(f.d_ff)
    if f.moe is not None:
        m = f.moe
        mlp += (
            m.num_experts * ffn(m.expert_d_ff)
            + m.num_shared_experts * ffn(m.shared_d_ff)
            + (m.num_experts + 1) * (f.d_model + 1)
        )
    per_layer = attention + mlp + (2 * f.norms_per_layer + 1) * f.d_model
    mtp = f.mtp_layers * (per_layer + 2 * f.d_model * f.d_model + 3 * f.d_model)
    head = (2 * f.vocab_size + f.learned_positions + 2) * f.d_model + f.vocab_size  # and its bias
    return f.num_layers * per_layer + mtp + head


def _check_sparse(f: Any, where: str) -> None:
    """The MoE, MLA and MTP fields agree with each other and with the layers."""
    m, a = f.moe, f.mla
    if m is not None:
        if m.top_k > m.num_experts:
            raise CatalogueError(
                f"{where}: field 'moe.top_k' ({m.top_k}) is more than moe.num_experts({m.num_experts})"
            )
        if (m.num_shared_experts == 0) != (m.shared_d_ff == 0):
            raise CatalogueError(
                f"{where}: field 'moe.shared_d_ff' ({m.shared_d_ff}) with moe.num_shared_experts"
                f"({m.num_shared_experts}): give both or neither"
            )
        if not 1 <= m.groups_per_token <= m.expert_groups or m.num_experts % m.expert_groups:
            raise CatalogueError(
                f"{where}: field 'moe.groups_per_token' ({m.groups_per_token}) with "
                f"moe.expert_groups({m.expert_groups}): the groups must divide "
                f"moe.num_experts({m.num_experts}) and a token choose 1 to all of them"
            )
        if m.shared_expert_gate and not m.num_shared_experts:
            raise CatalogueError(
                f"{where}: field 'moe.shared_expert_gate' (True) without shared experts"
            )
        if m.first_dense_layers >= f.num_layers or not any(
            i >= m.first_dense_layers and (i + 1) % m.layer_freq == 0 for i in range(f.num_layers)
        ):
            raise CatalogueError(
                f"{where}: field 'moe': first_dense_layers({m.first_dense_layers}) and "
                f"layer_freq({m.layer_freq}) leave no MoE layer among num_layers({f.num_layers})"
            )
    if a is not None:
        if f.num_kv_heads != f.num_heads:
            raise CatalogueError(
                f"{where}: field 'num_kv_heads' ({f.num_kv_heads}): with mla it must equal num_heads({f.num_heads})"
            )
        if f.head_dim != a.qk_nope_head_dim + a.qk_rope_head_dim:
            raise CatalogueError(
                f"{where}: field 'head_dim' ({f.head_dim}): with mla it is the query-key width "
                f"qk_nope_head_dim + qk_rope_head_dim = {a.qk_nope_head_dim + a.qk_rope_head_dim}"
            )
        if f.linear_bias or f.qkv_bias or f.attention_out_bias or f.qk_norm != "none":
            raise CatalogueError(
                f"{where}: field 'mla': latent attention with projection biases or q/k norms is not modelled"
            )


def model_from_dict(data: Any, name: str, where: str) -> ModelSpec:
    """Validate a catalogue-style model mapping and freeze it."""
    f = _validate(data, ModelFile, where)
    if f.num_heads % f.num_kv_heads:
        raise CatalogueError(
            f"{where}: num_heads({f.num_heads}) is not a multiple of num_kv_heads({f.num_kv_heads})"
        )
    if f.sliding_window is not None and f.attention_chunk is not None:
        raise CatalogueError(
            f"{where}: sliding_window({f.sliding_window}) and attention_chunk({f.attention_chunk}): a model "
            f"attends within a window or within chunks, not both"
        )
    if f.full_attention_layers and f.sliding_window is None and f.attention_chunk is None:
        raise CatalogueError(
            f"{where}: full_attention_layers({f.full_attention_layers}) without a sliding_window or an "
            f"attention_chunk"
        )
    if f.full_attention_layers > f.num_layers:
        raise CatalogueError(
            f"{where}: full_attention_layers({f.full_attention_layers}) is more than num_layers({f.num_layers})"
        )
    if f.nope_layers and (f.learned_positions or f.num_layers % f.nope_layers):
        why = (
            "with learned positions no layer has a rotary embedding"
            if f.learned_positions
            else f"NoPE layers are every (num_layers / nope_layers)-th: a divisor of num_layers({f.num_layers})"
        )
        raise CatalogueError(f"{where}: nope_layers({f.nope_layers}): {why}")
    if f.norms_per_layer == 1 and not f.parallel_block:
        raise CatalogueError(
            f"{where}: norms_per_layer(1) with parallel_block false: one norm per layer feeds attention and "
            f"MLP side by side (parallel_block: true)"
        )
    _check_sparse(f, where)
    bound = model_param_bound(f)
    if bound >= MAX_MODEL_PARAMS:
        raise CatalogueError(
            f"{where}: about {bound:.3g} parameters, more than the {MAX_MODEL_PARAMS:.3g} "
            f"(2**53) this package counts exactly"
        )
    values = {k: getattr(f, k) for k in type(f).model_fields if k != "name"}
    for key, spec in (("rope_scaling", RopeScaling), ("moe", MoeSpec), ("mla", MlaSpec)):
        if values[key] is not None:
            values[key] = spec(**values[key].model_dump())
    return ModelSpec(name=name, **values)


# ----------------------------------------------------------------------------- Hugging Face import
# A config.json is read per `model_type`, by the rules transformers' modeling code builds that
# decoder with (HF_FAMILIES, one row per family): the count comes from the shape formulas of
# costs/params.py, so each rule says which shapes the checkpoint has. A key that changes the count
# or the cost and is not modelled is refused (exit 2, naming it); a key that changes neither is
# named in one HfConfigWarning.
HfDim = Annotated[StrictInt, Field(gt=0, le=MAX_MODEL_DIM)]
WindowRule = Literal["none", "all", "pattern", "qwen"]


class HfConfigWarning(LayoutsearchWarning):
    """Keys of a Hugging Face config.json the import does not use (they change neither the
    parameter count nor the cost model), or a missing `model_type`; the message names them."""


@dataclasses.dataclass(frozen=True)
class HfFamily:
    """How transformers builds one ``model_type``'s decoder, as far as the count and the cost see it.

    ``tied`` is the config class's ``tie_word_embeddings`` default, used when the key is absent;
    ``head_dim`` the class's default when ``head_dim`` is absent (None: hidden_size / heads);
    ``attention_bias`` the value of the ``attention_bias`` key the count assumes (another value
    is refused; None: the modeling code does not read the key). ``window``: "none" (the code
    has no sliding window), "all" (every layer attends within ``sliding_window``), "pattern"
    (``layer_types``, else every ``pattern``-th layer global, Gemma 2/3), "qwen" (only with
    ``use_sliding_window``).
    """

    mlp: MlpKind  # gated or plain by model_type, whatever the activation is called (Gemma: GeGLU)
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norms_per_layer: int = 2
    norm_weights: bool = True
    qk_norm: QkNorm = "none"
    qkv_bias: bool = False
    linear_bias: bool = False
    tied: bool = False
    head_dim: int | None = None
    reads_head_dim: bool = True
    reads_kv_heads: bool = True
    attention_bias: bool | None = False
    window: WindowRule = "none"
    window_default: int | None = None  # sliding_window when the key is absent
    pattern: int = (
        0  # "pattern": every pattern-th layer attends globally when layer_types is absent
    )
    pattern_keys: tuple[
        str, ...
    ] = ()  # keys that give the pattern (Gemma 3: sliding_window_pattern)
    sparse: bool = False  # a mixture of experts (and latent attention): read by _hf_sparse


# Qwen2/2.5 attention: Q, K, V biases, sliding windows on the layers the config names (Qwen2-MoE
# keeps it); Qwen3-MoE: q/k RMSNorm per head, head_dim hidden / heads when absent (Qwen3: 128).
_QWEN2 = HfFamily(
    mlp="gated", qkv_bias=True, attention_bias=None, window="qwen", window_default=4096
)
_QWEN3_MOE = HfFamily(mlp="gated", qk_norm="head", window="qwen", window_default=4096, sparse=True)
# GPT-2's decoder (HF_FAMILIES' comment), also Falcon's: falcon reads its biases, KV heads and norms
# from keys of its own (_hf_falcon).
_GPT2 = HfFamily(mlp="plain", norm="layernorm", linear_bias=True, tied=True, attention_bias=None)

HF_FAMILIES: dict[str, HfFamily] = {
    # SwiGLU, RMSNorm before attention and MLP, RoPE (Llama 2/3/3.1/3.2; Mistral; Qwen2/2.5 with
    # Q, K, V biases; Qwen3 with q/k RMSNorm per head; Phi-3 with fused qkv_proj / gate_up_proj,
    # the same shapes as separate ones). Granite 3: the Llama decoder; its embedding, attention,
    # residual and logit multipliers scale activations, not shapes (unused keys).
    "llama": HfFamily(mlp="gated"),
    "granite": HfFamily(mlp="gated"),
    # GLM-4 (glm): Q, K, V biases (attention_bias), a fused gate_up_proj (the shapes of separate
    # ones), RoPE on half of each head; GLM-4-0414 (glm4) adds post-attention and post-MLP norms.
    "glm": HfFamily(mlp="gated", qkv_bias=True, attention_bias=True, head_dim=128),
    "glm4": HfFamily(
        mlp="gated", qkv_bias=True, attention_bias=True, head_dim=128, norms_per_layer=4
    ),
    "mistral": HfFamily(mlp="gated", window="all", window_default=4096),
    "qwen2": _QWEN2,
    "qwen3": dataclasses.replace(_QWEN3_MOE, head_dim=128, sparse=False),
    "phi3": HfFamily(mlp="gated", window="all"),
    # OLMo 1: LayerNorm without weight or bias; OLMo 2: RMSNorm after attention and MLP (still
    # two) and over the whole Q and K projections.
    "olmo": HfFamily(mlp="gated", norm="layernorm", norm_weights=False),
    "olmo2": HfFamily(mlp="gated", qk_norm="projection"),
    # Gemma: GeGLU, head_dim 256, tied embeddings; Gemma 2/3 add post-attention and post-MLP
    # norms (4 per layer) and alternate sliding-window and global layers.
    "gemma": HfFamily(mlp="gated", tied=True, head_dim=256),
    "gemma2": HfFamily(
        mlp="gated",
        norms_per_layer=4,
        tied=True,
        head_dim=256,
        window="pattern",
        window_default=4096,
        pattern=2,
    ),
    "gemma3_text": HfFamily(
        mlp="gated",
        norms_per_layer=4,
        qk_norm="head",
        tied=True,
        head_dim=256,
        window="pattern",
        window_default=4096,
        pattern=6,
        pattern_keys=("sliding_window_pattern", "_sliding_window_pattern"),
    ),
    # LayerNorm with bias, biases on every linear layer, plain GELU MLP, head_dim = hidden / heads.
    # GPT-2: learned positions, GPT-2 key names, tied; GPT-NeoX (Pythia): untied embed_out, parallel
    # residual (use_parallel_residual: the same parameters, parallel_block); Falcon: see _hf_falcon. GPT-2 and GPT-NeoX honour a head_dim
    # or num_key_value_heads given explicitly (transformers ignores them there; no published
    # config of theirs has them; tests/test_catalogue.py imports such a GPT-2 config).
    "gpt2": _GPT2,
    "gpt_neox": HfFamily(mlp="plain", norm="layernorm", linear_bias=True, attention_bias=True),
    "falcon": dataclasses.replace(
        _GPT2, linear_bias=False, reads_head_dim=False, reads_kv_heads=False
    ),
    # Mixtures of experts (the expert, router and latent-attention keys: _hf_sparse). Mixtral: the
    # Mistral decoder, every MLP 8 SwiGLU experts; Qwen2-MoE: Qwen2 attention, routed experts plus a
    # gated shared expert; Qwen3-MoE: Qwen3 attention, routed experts; DeepSeek-V3: latent attention,
    # dense layers first, a shared expert and a score-correction bias; gpt-oss: biases everywhere,
    # attention sinks, alternating 128-token windows; Llama 4: the decoder of a llama4 config's
    # text_config, a shared expert, MoE every interleave_moe_layer_step-th layer.
    "mixtral": HfFamily(mlp="gated", window="all", attention_bias=None, sparse=True),
    "qwen2_moe": dataclasses.replace(_QWEN2, sparse=True),
    "qwen3_moe": _QWEN3_MOE,
    "deepseek_v3": HfFamily(mlp="gated", reads_kv_heads=False, sparse=True),
    # DeepSeek-V2 / V2-Lite: the V3 decoder without the score-correction bias (unless topk_method
    # is noaux_tc) and without MTP modules; V2-Lite has no query latent (q_lora_rank null).
    "deepseek_v2": HfFamily(mlp="gated", reads_kv_heads=False, sparse=True),
    # Kimi-K2: DeepSeek-V3's architecture and modeling code (DeepseekV3ForCausalLM) under its own
    # model_type (read by the deepseek_v3 rules; 384 experts, 64 heads, one dense layer).
    "kimi_k2": HfFamily(mlp="gated", reads_kv_heads=False, sparse=True),
    # OLMoE: OLMo 2's attention (RMSNorm over the whole Q and K projections), every MLP a MoE of
    # num_experts SwiGLU experts of intermediate_size, a bias-free router.
    "olmoe": HfFamily(mlp="gated", qk_norm="projection", sparse=True),
    # GLM-4.5 (glm4_moe): DeepSeek-V3's MoE (dense layers first, shared experts, score-correction
    # bias, MTP modules) with GQA attention: Q, K, V biases under attention_bias and per-head q/k
    # RMSNorms under use_qk_norm (both read by _hf_glm4_moe).
    "glm4_moe": HfFamily(mlp="gated", head_dim=128, attention_bias=None, sparse=True),
    "gpt_oss": HfFamily(
        mlp="gated",
        linear_bias=True,
        attention_bias=True,
        window="pattern",
        window_default=128,
        pattern=2,
        sparse=True,
    ),
    "llama4_text": HfFamily(mlp="gated", sparse=True),
    # Phi-3.5-MoE (phimoe): Mixtral's layer with LayerNorms (weight and bias), Q, K, V and O
    # biases under attention_bias, a bias-free MLP and router, and an output-head bias under
    # lm_head_bias (both read by _hf_phimoe; PhimoeConfig: both false by default).
    "phimoe": HfFamily(
        mlp="gated", norm="layernorm", window="all", attention_bias=None, sparse=True
    ),
}
# Multimodal configs whose decoder is read from a nested config (the other encoders are not counted).
_HF_NESTED = {
    "llama4": ("text_config", "llama4_text"),
    "gemma3": ("text_config", "gemma3_text"),
}
# The config class's defaults of keys a published config leaves out (Gemma3TextConfig's: the
# text_config of gemma-3-4b/12b/27b gives no vocab_size, epsilon, RoPE base or activation).
_HF_KEY_DEFAULTS = {
    "gemma3_text": {
        "vocab_size": 262_208,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1_000_000.0,
        "hidden_activation": "gelu_pytorch_tanh",
    }
}
HF_DEFAULT_FAMILY = "llama"  # a config without model_type (warned)

# Key names per family: the canonical name, then the names the config class also accepts.
_HF_KEYS = {
    "num_hidden_layers": ("num_hidden_layers",),
    "hidden_size": ("hidden_size",),
    "intermediate_size": ("intermediate_size",),
    "num_attention_heads": ("num_attention_heads",),
    "vocab_size": ("vocab_size",),
}
_HF_ALIASES = {
    "gpt2": {
        "num_hidden_layers": ("n_layer", "num_hidden_layers"),
        "hidden_size": ("n_embd", "hidden_size"),
        "num_attention_heads": ("n_head", "num_attention_heads"),
        "intermediate_size": ("n_inner",),
    },
    "falcon": {
        "hidden_size": ("hidden_size", "n_embed"),
        "intermediate_size": ("ffn_hidden_size",),
    },
}
_HF_INNER_DEFAULT = {
    "gpt2": 4,
    "falcon": 4,
}  # intermediate size = 4 x hidden when the key is absent or null

# Keys that change the parameter count or the cost and that no family here models: refused when set.
HF_REFUSED = {
    "num_local_experts": "mixture of experts",
    "num_experts": "mixture of experts",
    "n_routed_experts": "mixture of experts",
    "n_shared_experts": "mixture of experts",
    "num_experts_per_tok": "mixture of experts",
    "moe_intermediate_size": "mixture of experts",
    "shared_expert_intermediate_size": "mixture of experts",
    "first_k_dense_replace": "mixture of experts",
    "moe_layer_freq": "mixture of experts",
    "q_lora_rank": "multi-head latent attention",
    "kv_lora_rank": "multi-head latent attention",
    "qk_nope_head_dim": "multi-head latent attention",
    "qk_rope_head_dim": "multi-head latent attention",
    "v_head_dim": "multi-head latent attention",
    "text_config": "a multimodal model's nested decoder config",
    "vision_config": "a vision encoder",
    "audio_config": "an audio encoder",
    "is_encoder_decoder": "an encoder-decoder model",
    "add_cross_attention": "cross-attention layers",
    "num_nextn_predict_layers": "multi-token prediction layers",
    "lm_head_bias": "a bias on the output head outside phimoe",
}
_HF_LAYER_TYPES = {"sliding_attention": True, "full_attention": False}


@dataclasses.dataclass(frozen=True)
class HfImport:
    """A config.json read: the spec, and the keys the import did not use (file order)."""

    model: ModelSpec
    unused: tuple[str, ...]
    family: str
    model_type_given: bool = True
    notes: tuple[str, ...] = ()  # what is read but approximated (one warning line each)


def _hf_error(where: str, key: str, exc: ValidationError) -> CatalogueError:
    err = exc.errors()[0]
    value = err.get("input")
    shown = "" if isinstance(value, (dict, list)) else f" (got {value!r:.80})"
    return CatalogueError(f"{where}: field '{key}': {' '.join(str(err['msg']).split())}{shown}")


_HF_ADAPTERS: dict[Any, TypeAdapter] = {}


def _hf_value(cfg: dict, key: str, kind: Any, where: str, default: Any = None) -> Any:
    """cfg[key] validated as ``kind`` (a one-line error naming the key), or ``default`` when absent."""
    if key not in cfg:
        return default
    adapter = _HF_ADAPTERS.get(kind) or _HF_ADAPTERS.setdefault(kind, TypeAdapter(kind))
    try:
        return adapter.validate_python(cfg[key])
    except ValidationError as exc:
        raise _hf_error(where, key, exc) from None


def _hf_is_set(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def _hf_pick(cfg: dict, names: tuple[str, ...], where: str) -> str | None:
    """The one key of ``names`` the config gives (a key and its alias disagreeing is an error)."""
    given = [n for n in names if n in cfg]
    if len(given) > 1 and any(cfg[n] != cfg[given[0]] for n in given[1:]):
        raise CatalogueError(
            f"{where}: field '{given[0]}' ({cfg[given[0]]!r:.40}) and its alias '{given[1]}' "
            f"({cfg[given[1]]!r:.40}) differ"
        )
    return given[0] if given else None


def _hf_model_type(cfg: dict, where: str) -> tuple[str, bool]:
    if "model_type" not in cfg or cfg["model_type"] is None:
        return HF_DEFAULT_FAMILY, False
    model_type = cfg["model_type"]
    if not isinstance(model_type, str):
        raise CatalogueError(
            f"{where}: field 'model_type': expected a string (got {model_type!r:.40})"
        )
    if model_type not in HF_FAMILIES:
        what = f"is not a family this import counts exactly{did_you_mean(model_type[:60], HF_FAMILIES)}"
        raise CatalogueError(
            f"{where}: field 'model_type': '{model_type[:60]}' {what}; known: {', '.join(HF_FAMILIES)}"
        )
    return model_type, True


def _hf_window(
    fam: HfFamily, cfg: dict, layers: int, where: str, used: set
) -> tuple[int | None, int]:
    """(sliding_window, full_attention_layers) as the family's attention code applies them."""
    if fam.window == "none":
        return None, 0
    used.add("sliding_window")
    window = _hf_value(cfg, "sliding_window", Optional[HfDim], where, fam.window_default)
    if fam.window == "all":
        return window, 0
    types = None
    if "layer_types" in cfg:
        used.add("layer_types")
        types = _hf_value(cfg, "layer_types", Optional[list[StrictStr]], where)
    if types is not None:
        unknown = sorted({t for t in types if t not in _HF_LAYER_TYPES})
        if unknown:
            raise CatalogueError(
                f"{where}: field 'layer_types': layer type '{unknown[0][:40]}' is not modelled "
                f"(only {', '.join(_HF_LAYER_TYPES)})"
            )
        if len(types) != layers:
            raise CatalogueError(
                f"{where}: field 'layer_types': {len(types)} entries for num_hidden_layers({layers})"
            )
    if fam.window == "qwen":
        used.update(("use_sliding_window", "max_window_layers"))
        if not _hf_value(cfg, "use_sliding_window", StrictBool, where, False):
            return None, 0  # transformers: sliding_window = None unless use_sliding_window
        if types is None:
            raise CatalogueError(
                f"{where}: field 'max_window_layers': with use_sliding_window, which layers slide is "
                f"not modelled (Qwen's documentation and transformers' code disagree); give "
                f"'layer_types'"
            )
    if window is None:
        return None, 0
    if types is None:
        pattern = fam.pattern
        for key in fam.pattern_keys:
            used.add(key)
            pattern = _hf_value(cfg, key, HfDim, where, pattern)
        return window, layers // pattern  # layer i global when (i + 1) % pattern == 0
    full = sum(1 for t in types if not _HF_LAYER_TYPES[t])
    return (window, full) if full < layers else (None, 0)


def _hf_unnest(cfg: dict, where: str) -> tuple[dict, str | None, tuple[str, ...], list[str]]:
    """A multimodal config (_HF_NESTED) -> (its decoder's config, the key it sits under, the outer
    keys not read, notes); any other config -> (itself, None, (), [])."""
    outer_type = cfg.get("model_type")
    if not isinstance(outer_type, str) or outer_type not in _HF_NESTED:
        return cfg, None, (), []
    key, inner_type = _HF_NESTED[outer_type]
    inner = cfg.get(key)
    if not isinstance(inner, dict):
        raise CatalogueError(
            f"{where}: field '{key}': expected the decoder's config (an object) in a "
            f"'{outer_type}' config, got {kind_of(inner)}"
        )
    if inner.get("model_type", inner_type) not in (inner_type, outer_type):
        raise CatalogueError(
            f"{where}: field '{key}.model_type': {inner.get('model_type')!r:.40} is not '{inner_type}'"
        )
    notes = []
    if "vision_config" in cfg:
        notes.append(
            f"field 'vision_config': the vision encoder is not counted; the model is the '{key}' decoder alone"
        )
    outer = tuple(k for k in cfg if k not in ("model_type", key, "vision_config"))
    return {**inner, "model_type": inner_type}, key, outer, notes


# The expert and latent-attention keys each sparse family reads (HF_REFUSED does not apply to them).
_HF_SPARSE_KEYS = {
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": (
        "num_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
    ),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "deepseek_v3": (
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "first_k_dense_replace",
        "moe_layer_freq",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "num_nextn_predict_layers",
    ),
    "gpt_oss": ("num_local_experts", "num_experts_per_tok"),
    "llama4_text": ("num_local_experts", "num_experts_per_tok"),
    "olmoe": ("num_experts", "num_experts_per_tok"),
    "phimoe": ("num_local_experts", "num_experts_per_tok", "lm_head_bias"),
    "glm4_moe": (
        "n_routed_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "n_shared_experts",
        "first_k_dense_replace",
        "num_nextn_predict_layers",
    ),
}
_HF_SPARSE_KEYS["deepseek_v2"] = _HF_SPARSE_KEYS["kimi_k2"] = _HF_SPARSE_KEYS["deepseek_v3"]
# The config classes' defaults (transformers) where a key is absent: experts, top-k, expert width
# (None: the expert is intermediate_size wide). DeepSeek-V2's class has no top-k default (the
# key is required); Kimi-K2 ships DeepSeek-V3's configuration class.
_HF_MOE_DEFAULTS = {
    "mixtral": (8, 2, None),
    "qwen2_moe": (60, 4, 1408),
    "qwen3_moe": (128, 8, 768),
    "deepseek_v3": (256, 8, 2048),
    "deepseek_v2": (64, None, 1407),
    "kimi_k2": (256, 8, 2048),
    "gpt_oss": (128, 4, None),
    "llama4_text": (16, 1, None),
    "olmoe": (64, 8, None),
    "glm4_moe": (128, 8, 1408),
    "phimoe": (16, 2, None),
}
_HF_EXPERT_KEYS = {
    "mixtral": "num_local_experts",
    "gpt_oss": "num_local_experts",
    "llama4_text": "num_local_experts",
    "phimoe": "num_local_experts",
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "olmoe": "num_experts",
    "deepseek_v3": "n_routed_experts",
    "deepseek_v2": "n_routed_experts",
    "kimi_k2": "n_routed_experts",
    "glm4_moe": "n_routed_experts",
}


def _hf_sparse(family: str, cfg: dict, layers: int, d_ff: int, where: str, used: set) -> dict:
    """The MoE (and MLA, MTP, sinks) fields of a sparse family's config as its transformers modeling
    code builds them: experts, top-k and expert width (the config class's defaults when absent),
    then the family's own keys (_HF_SPARSE_READERS: Llama 4's attention chunks, NoPE layers and q/k L2 norms
    too). What changes the count and is not modelled is refused naming the key."""
    n_experts, top_k, width = _HF_MOE_DEFAULTS[family]
    experts_key = _HF_EXPERT_KEYS[family]
    used.update((experts_key, "num_experts_per_tok", "moe_intermediate_size"))
    moe = {
        "num_experts": _hf_value(cfg, experts_key, HfDim, where, n_experts),
        "top_k": _hf_value(cfg, "num_experts_per_tok", HfDim, where, top_k),
    }
    if moe["top_k"] is None:
        raise CatalogueError(
            f"{where}: missing field 'num_experts_per_tok' (a {family} config needs it)"
        )
    width = _hf_value(cfg, "moe_intermediate_size", HfDim, where, width) if width else None
    moe["expert_d_ff"] = (
        width or d_ff
    )  # Mixtral, gpt-oss, Llama 4, OLMoE: the experts are intermediate_size wide
    out: dict = {"d_ff": d_ff, "notes": [], "moe": moe}
    reader = _HF_SPARSE_READERS.get(family)
    if reader is not None:
        reader(cfg, layers, d_ff, where, used, moe, out)
    return out


_LayerList = Optional[list[Annotated[StrictInt, Field(ge=0)]]]
_HfCount = Annotated[StrictInt, Field(ge=0, le=MAX_MODEL_DIM)]


def _hf_llama4(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """Llama 4 (Llama4TextMoe): experts and one shared expert of intermediate_size, MoE every
    interleave_moe_layer_step-th layer (moe_layers, when given, must say the same), dense layers
    of intermediate_size_mlp."""
    used.update(("intermediate_size_mlp", "interleave_moe_layer_step", "moe_layers"))
    out["d_ff"] = _hf_value(cfg, "intermediate_size_mlp", HfDim, where, 16384)
    step = _hf_value(cfg, "interleave_moe_layer_step", HfDim, where, 1)
    moe.update(num_shared_experts=1, shared_d_ff=d_ff, layer_freq=step)
    given = _hf_value(cfg, "moe_layers", _LayerList, where)
    if given is not None and given != list(range(step - 1, layers, step)):
        raise CatalogueError(
            f"{where}: field 'moe_layers': MoE layers other than every "
            f"interleave_moe_layer_step-th ({step}) are not modelled"
        )
    out.update(_hf_llama4_attention(cfg, layers, where, used))


def _hf_llama4_attention(cfg: dict, layers: int, where: str, used: set) -> dict:
    """Llama 4's attention (Llama4TextConfig, Llama4TextAttention): layer i turns q and k by RoPE where
    no_rope_layers[i] is 1 (absent or empty: all but every no_rope_layer_interval-th, 4); the RoPE layers attend
    within chunks of attention_chunk_size (layer_types "chunked_attention"), the NoPE ones over the whole
    sequence; use_qk_norm puts a weightless L2 norm on q and k."""
    used.update(("no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "use_qk_norm"))

    def every(
        k: int,
    ) -> list[int]:  # 1 = RoPE, 0 = NoPE in every k-th layer, the last of each period
        return [int((i + 1) % k != 0) for i in range(layers)]

    rope = _hf_value(
        cfg, "no_rope_layers", Optional[list[Annotated[StrictInt, Field(ge=0, le=1)]]], where
    )
    if not rope:
        rope = every(_hf_value(cfg, "no_rope_layer_interval", HfDim, where, 4))
    if len(rope) != layers:
        raise CatalogueError(
            f"{where}: field 'no_rope_layers': {len(rope)} entries for num_hidden_layers({layers})"
        )
    nope = rope.count(0)
    if nope and rope != every(layers // nope):
        raise CatalogueError(
            f"{where}: field 'no_rope_layers': NoPE layers other than every k-th (the last of each period) are "
            f"not modelled"
        )
    if "layer_types" in cfg:
        used.add("layer_types")
        types = _hf_value(cfg, "layer_types", Optional[list[StrictStr]], where)
        expected = ["chunked_attention" if r else "full_attention" for r in rope]
        if types is not None and types != expected:
            raise CatalogueError(
                f"{where}: field 'layer_types': chunked layers other than the RoPE layers are not modelled"
            )
    chunk = _hf_value(cfg, "attention_chunk_size", Optional[HfDim], where, 8192)
    if nope == layers:
        chunk = None  # no RoPE layer, so none chunked
    return {
        "attention_chunk": chunk,
        "full_attention_layers": nope if chunk is not None else 0,
        "nope_layers": nope,
        "qk_norm": "l2" if _hf_value(cfg, "use_qk_norm", StrictBool, where, True) else "none",
    }


def _hf_qwen_moe(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """Qwen2/3-MoE: layer i is MoE unless in mlp_only_layers, when (i + 1) % decoder_sparse_step == 0
    (only leading mlp_only_layers are modelled); Qwen2-MoE adds one shared expert of
    shared_expert_intermediate_size with a [D, 1] sigmoid gate."""
    used.update(("decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size"))
    moe["layer_freq"] = _hf_value(cfg, "decoder_sparse_step", HfDim, where, 1)
    dense = _hf_value(cfg, "mlp_only_layers", _LayerList, where) or []
    if sorted(dense) != list(range(len(dense))):
        raise CatalogueError(
            f"{where}: field 'mlp_only_layers': dense layers other than the first ones ({dense!r:.60}) are not modelled"
        )
    moe["first_dense_layers"] = len(dense)
    if cfg.get("model_type") == "qwen2_moe":
        shared = _hf_value(cfg, "shared_expert_intermediate_size", Optional[HfDim], where, 5632)
        if shared:
            moe.update(num_shared_experts=1, shared_d_ff=shared, shared_expert_gate=True)


# DeepSeek-style MoE defaults per family: shared experts, dense layers first (the config classes').
_HF_DEEPSEEK_DEFAULTS = {
    "deepseek_v3": (1, 3),
    "kimi_k2": (1, 3),
    "deepseek_v2": (2, 0),
    "glm4_moe": (1, 1),
}


def _hf_deepseek_moe(family: str, cfg: dict, where: str, used: set, moe: dict, out: dict) -> None:
    """first_k_dense_replace dense layers, then MoE layers with n_shared_experts of
    moe_intermediate_size (one MLP n_shared x wider in the code: the same count);
    num_nextn_predict_layers MTP modules (DeepSeek-V3 and GLM-4.5 store them, counted beside)."""
    used.update(("n_shared_experts", "first_k_dense_replace", "num_nextn_predict_layers"))
    shared_default, dense_default = _HF_DEEPSEEK_DEFAULTS[family]
    shared = _hf_value(cfg, "n_shared_experts", Optional[_HfCount], where, shared_default) or 0
    moe.update(
        num_shared_experts=shared,
        shared_d_ff=moe["expert_d_ff"] if shared else 0,
        first_dense_layers=_hf_value(cfg, "first_k_dense_replace", _HfCount, where, dense_default),
    )
    mtp = _hf_value(
        cfg,
        "num_nextn_predict_layers",
        Optional[Annotated[StrictInt, Field(ge=0, le=MAX_MTP_LAYERS)]],
        where,
        0,
    )
    out["mtp_layers"] = mtp or 0
    # group-limited routing: n_group groups, a token's experts from topk_group of them (the
    # modeling code's group-limited methods; greedy top-k ignores the groups)
    used.update(("n_group", "topk_group", "topk_method"))
    groups = _hf_value(cfg, "n_group", Optional[_HfCount], where, 1) or 1
    chosen = _hf_value(cfg, "topk_group", Optional[_HfCount], where, 1) or 1
    if _hf_value(cfg, "topk_method", Optional[StrictStr], where) != "greedy" and groups > 1:
        moe.update(expert_groups=groups, groups_per_token=min(chosen, groups))


def _hf_deepseek(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """DeepSeek-V2/V3 and Kimi-K2: the DeepSeek MoE (``_hf_deepseek_moe``) with the router's
    e_score_correction_bias (V3 and Kimi always; V2 only with topk_method noaux_tc); MLA attention."""
    family = cfg["model_type"]
    used.update(("moe_layer_freq", "num_key_value_heads"))
    freq = _hf_value(cfg, "moe_layer_freq", HfDim, where, 1)
    if freq != 1:  # DeepSeek's rule (i % freq == 0) is not MoeSpec's ((i + 1) % freq == 0)
        raise CatalogueError(
            f"{where}: field 'moe_layer_freq' ({freq}): MoE layers at other than every "
            f"layer after first_k_dense_replace are not modelled"
        )
    _hf_deepseek_moe(family, cfg, where, used, moe, out)
    moe["router_bias"] = True
    if family == "deepseek_v2":  # V3's code always has the bias; V2's with noaux_tc only
        used.add("topk_method")
        method = _hf_value(cfg, "topk_method", Optional[StrictStr], where)
        moe["router_bias"] = method == "noaux_tc"
    mla = {}
    for key, default in (
        ("q_lora_rank", 1536),
        ("kv_lora_rank", 512),
        ("qk_rope_head_dim", 64),
        ("qk_nope_head_dim", 128),
        ("v_head_dim", 128),
    ):
        used.add(key)
        mla[key] = _hf_value(
            cfg, key, Optional[HfDim] if key == "q_lora_rank" else HfDim, where, default
        )
    out.update(mla=mla, head_dim=mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"])


def _hf_glm4_moe(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """GLM-4.5 (Glm4MoeForCausalLM): the DeepSeek MoE (``_hf_deepseek_moe``) with the router's
    e_score_correction_bias; Q, K, V biases with attention_bias (the output projection has none)
    and a head_dim RMSNorm of q and of k with use_qk_norm (Glm4MoeConfig: both false by default)."""
    used.update(("attention_bias", "use_qk_norm"))
    _hf_deepseek_moe("glm4_moe", cfg, where, used, moe, out)
    moe["router_bias"] = True
    out["qkv_bias"] = bool(_hf_value(cfg, "attention_bias", Optional[StrictBool], where))
    if _hf_value(cfg, "use_qk_norm", Optional[StrictBool], where):
        out["qk_norm"] = "head"


def _hf_gpt_oss(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """gpt-oss: the router Linear(D, E) has a bias; one sink logit per head (GptOssAttention.sinks);
    experts_per_token, when given, must equal num_experts_per_tok."""
    used.add("experts_per_token")
    if "experts_per_token" in cfg and cfg["experts_per_token"] != moe["top_k"]:
        raise CatalogueError(
            f"{where}: field 'experts_per_token' ({cfg['experts_per_token']!r:.40}) and "
            f"'num_experts_per_tok' ({moe['top_k']}) differ"
        )
    moe["router_bias"] = True
    out["attention_sinks"] = True


def _hf_phimoe(
    cfg: dict, layers: int, d_ff: int, where: str, used: set, moe: dict, out: dict
) -> None:
    """Phi-3.5-MoE (PhimoeForCausalLM): attention_bias puts a bias on each of q_proj, k_proj,
    v_proj and o_proj (the experts and the router have none); lm_head_bias one on lm_head."""
    used.update(("attention_bias", "lm_head_bias"))
    attention_bias = bool(_hf_value(cfg, "attention_bias", Optional[StrictBool], where))
    out.update(qkv_bias=attention_bias, attention_out_bias=attention_bias)
    out["output_head_bias"] = bool(_hf_value(cfg, "lm_head_bias", Optional[StrictBool], where))


_HF_SPARSE_READERS = {
    "llama4_text": _hf_llama4,
    "qwen2_moe": _hf_qwen_moe,
    "qwen3_moe": _hf_qwen_moe,
    "deepseek_v3": _hf_deepseek,
    "deepseek_v2": _hf_deepseek,
    "kimi_k2": _hf_deepseek,
    "glm4_moe": _hf_glm4_moe,
    "gpt_oss": _hf_gpt_oss,
    "phimoe": _hf_phimoe,
}


def _hf_falcon(cfg: dict, heads: int, where: str, used: set) -> dict:
    """Falcon's KV heads, norms per layer and biases (transformers FalconAttention/FalconDecoderLayer)."""
    used.update(
        (
            "new_decoder_architecture",
            "multi_query",
            "parallel_attn",
            "num_kv_heads",
            "bias",
            "num_ln_in_parallel_attn",
        )
    )
    new = _hf_value(cfg, "new_decoder_architecture", Optional[StrictBool], where) or False
    multi_query = _hf_value(cfg, "multi_query", Optional[StrictBool], where)
    parallel = _hf_value(cfg, "parallel_attn", Optional[StrictBool], where)
    kv = _hf_value(cfg, "num_kv_heads", Optional[HfDim], where) or heads
    n_ln = _hf_value(cfg, "num_ln_in_parallel_attn", Optional[HfDim], where)
    multi_query = True if multi_query is None else multi_query
    parallel = True if parallel is None else parallel
    if not new:
        if multi_query:
            kv = 1  # one K and one V head: Q, K, V = hidden + 2 head_dim
        elif kv != heads:  # the fused QKV is 3 x hidden wide whatever num_kv_heads says
            raise CatalogueError(
                f"{where}: field 'num_kv_heads': {kv} with multi_query and new_decoder_architecture "
                f"false is not modelled (the fused QKV projection has {heads} K and V heads)"
            )
    norms = 2 if (new and n_ln in (None, 2)) or not parallel else 1
    if n_ln not in (None, 1, 2):
        raise CatalogueError(f"{where}: field 'num_ln_in_parallel_attn': {n_ln} is not 1 or 2")
    bias = bool(_hf_value(cfg, "bias", Optional[StrictBool], where))
    return {
        "num_kv_heads": kv,
        "norms_per_layer": norms,
        "linear_bias": bias,
        # FalconDecoderLayer adds the MLP's output to the attention's, read from the same input, under
        # either key (transformers modeling_falcon)
        "parallel_block": bool(new or parallel),
    }


# Hyper-parameters that change no parameter count and that the exporters write (hidden dropout also costs its
# masks: ModelSpec's comment): ModelSpec field -> the config keys that give it, the first given wins (Gemma's
# hidden_activation is what its modeling code reads, over hidden_act; GPT-2 names its own).
_HF_HYPER = {
    "rope_theta": ("rope_theta",),
    "norm_eps": ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"),
    "activation": ("hidden_activation", "hidden_act", "activation_function"),
    "attention_dropout": ("attention_dropout", "attn_pdrop"),
    "hidden_dropout": ("hidden_dropout", "resid_pdrop"),
}
_HF_HYPER_KINDS = {
    "rope_theta": Annotated[float, Field(gt=0)],
    "norm_eps": Annotated[float, Field(gt=0, lt=1)],
    "activation": Annotated[StrictStr, Field(min_length=1, max_length=64)],
    "attention_dropout": Annotated[float, Field(ge=0, lt=1)],
    "hidden_dropout": Annotated[float, Field(ge=0, lt=1)],
}


def _hf_hyperparams(cfg: dict, where: str, used: set) -> dict:
    """rope_theta, rope_scaling (rope_type llama3 only; another type stays an unused key, warned),
    norm epsilon, activation and dropouts, where the config gives them (null = the default)."""
    out: dict = {}
    for field_name, keys in _HF_HYPER.items():
        for key in keys:
            if key in cfg:
                used.add(key)
                value = _hf_value(cfg, key, Optional[_HF_HYPER_KINDS[field_name]], where)
                if value is not None and field_name not in out:
                    out[field_name] = value
    scaling = cfg.get("rope_scaling")
    if scaling is None:
        used.add("rope_scaling")
    elif (
        isinstance(scaling, dict) and (scaling.get("rope_type") or scaling.get("type")) == "llama3"
    ):
        used.add("rope_scaling")
        fields = (
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        )
        missing = [k for k in fields if k not in scaling]
        if missing:
            raise CatalogueError(
                f"{where}: field 'rope_scaling': rope_type llama3 without '{missing[0]}'"
            )
        out["rope_scaling"] = {k: scaling[k] for k in fields}
    return out


def read_hf_config(path: Path) -> HfImport:
    """Read a Hugging Face config.json into a ModelSpec by its model_type's rules (HF_FAMILIES).

    Refused (CatalogueError, exit 2, naming the key): an unknown model_type, a key of
    HF_REFUSED that is set, a bias or layer type the family's count does not model. The keys
    not used are returned (``unused``), not warned; ``model_from_hf_config`` warns.
    """
    where = str(path)
    cfg = io.read_json(path, error=CatalogueError)
    if not isinstance(cfg, dict):
        raise CatalogueError(
            f"{where}: expected a Hugging Face config (a JSON object), got {kind_of(cfg)}"
        )
    cfg, nested, outer_unused, notes = _hf_unnest(cfg, where)
    family, typed = _hf_model_type(cfg, where)
    fam = HF_FAMILIES[family]
    sparse_keys = _HF_SPARSE_KEYS.get(family, ()) if fam.sparse else ()
    key: str | None  # a config key, None where the config has none of its spellings
    for key, what in HF_REFUSED.items():
        if key in cfg and _hf_is_set(cfg[key]) and key not in sparse_keys:
            raise CatalogueError(
                f"{where}: field '{key}' ({cfg[key]!r:.40}): {what} is not modelled"
            )
    used = {"model_type", "_name_or_path", "tie_word_embeddings"}

    cfg = {**_HF_KEY_DEFAULTS.get(family, {}), **cfg}
    names = {**_HF_KEYS, **_HF_ALIASES.get(family, {})}
    inner = _HF_INNER_DEFAULT.get(family)
    keys = {canon: _hf_pick(cfg, alias, where) for canon, alias in names.items()}
    required = [names[k][0] for k in names if not (k == "intermediate_size" and inner)]
    for canon, key in keys.items():
        if key is None and names[canon][0] in required:
            raise CatalogueError(
                f"{where}: missing field '{names[canon][0]}' (a "
                f"{'Hugging Face' if family not in _HF_ALIASES else family} config needs "
                f"{', '.join(required)})"
            )
    used.update(k for alias in names.values() for k in alias)
    dims = {
        canon: _hf_value(
            cfg, key, Optional[HfDim] if canon == "intermediate_size" and inner else HfDim, where
        )
        for canon, key in keys.items()
        if key is not None
    }
    layers, hidden, heads = (
        dims["num_hidden_layers"],
        dims["hidden_size"],
        dims["num_attention_heads"],
    )
    d_ff = dims.get("intermediate_size") or inner * hidden

    kv_heads = heads
    if fam.reads_kv_heads:
        used.add("num_key_value_heads")
        kv_heads = _hf_value(cfg, "num_key_value_heads", Optional[HfDim], where) or heads
    head_dim = fam.head_dim or hidden // heads
    if fam.reads_head_dim:
        used.add("head_dim")
        head_dim = _hf_value(cfg, "head_dim", Optional[HfDim], where) or head_dim
    elif hidden % heads:
        raise CatalogueError(
            f"{where}: field 'hidden_size' ({hidden}) is not a multiple of 'num_attention_heads' "
            f"({heads}), as {family} needs"
        )
    if not head_dim:
        raise CatalogueError(
            f"{where}: field 'hidden_size' ({hidden}) is smaller than 'num_attention_heads' "
            f"({heads}): no head_dim; give 'head_dim'"
        )

    spec = {
        "norm": fam.norm,
        "norms_per_layer": fam.norms_per_layer,
        "norm_weights": fam.norm_weights,
        "qk_norm": fam.qk_norm,
        "qkv_bias": fam.qkv_bias,
        "linear_bias": fam.linear_bias,
    }
    if fam.attention_bias is not None:
        used.add("attention_bias")
        value = _hf_value(cfg, "attention_bias", Optional[StrictBool], where)
        if value is not None and value != fam.attention_bias:
            raise CatalogueError(
                f"{where}: field 'attention_bias' ({value}): {family} "
                f"{'without' if fam.attention_bias else 'with'} attention biases is not modelled"
            )
    used.add("mlp_bias")
    if _hf_value(cfg, "mlp_bias", Optional[StrictBool], where) and not fam.linear_bias:
        raise CatalogueError(
            f"{where}: field 'mlp_bias' (True): MLP biases without attention biases are not modelled"
        )
    if family == "falcon":
        spec.update(_hf_falcon(cfg, heads, where, used))
        kv_heads = spec.pop("num_kv_heads")
    if (
        family == "gpt_neox"
    ):  # GPTNeoXLayer: x + attn(ln1(x)) + mlp(ln2(x)) unless use_parallel_residual is false
        used.add("use_parallel_residual")
        parallel = _hf_value(cfg, "use_parallel_residual", Optional[StrictBool], where)
        spec["parallel_block"] = parallel is not False
    learned = 0
    if family == "gpt2":  # learned absolute positions: n_positions rows (GPT2Config default 1024)
        key = _hf_pick(cfg, ("n_positions", "max_position_embeddings"), where)
        used.update(("n_positions", "max_position_embeddings"))
        learned = _hf_value(cfg, key, HfDim, where) if key else 1024
    window, full = _hf_window(fam, cfg, layers, where, used)
    if fam.sparse:
        sparse = _hf_sparse(family, cfg, layers, d_ff, where, used)
        d_ff = sparse.pop("d_ff")
        if "mla" in sparse:
            kv_heads, head_dim = heads, sparse.pop("head_dim")
        notes += sparse.pop("notes")
        spec.update(sparse)

    spec.update(_hf_hyperparams(cfg, where, used))
    tied = _hf_value(cfg, "tie_word_embeddings", Optional[StrictBool], where)
    name = _hf_value(cfg, "_name_or_path", Optional[StrictStr], where)
    data = {
        "name": (name or (path.parent.name if path.stem == "config" else "") or path.stem)[:256],
        "num_layers": layers,
        "d_model": hidden,
        "d_ff": d_ff,
        "mlp": fam.mlp,
        "num_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": dims["vocab_size"],
        "tied_embeddings": fam.tied if tied is None else tied,
        "learned_positions": learned,
        "sliding_window": window,
        "full_attention_layers": full,
        **spec,
    }
    model = model_from_dict(data, data["name"], where)
    notes.extend(_hf_uncosted_notes(cfg, used, where))
    unused = outer_unused + tuple(f"{nested}.{k}" if nested else k for k in cfg if k not in used)
    return HfImport(
        model=model, unused=unused, family=family, model_type_given=typed, notes=tuple(notes)
    )


# Keys whose work the cost model leaves out or approximates, small beside a layer's (a pass over a tensor the layer
# has, or a kernel's inner loop): each validated as its kind (a bad value is one line naming it) and, where set,
# named in a warning line of its own, never among the keys that change neither the count nor the cost. A fraction of
# 1 (the whole head rotated), null, 0 and false are not set.
_HfCap = Annotated[float, Field(ge=0)]
_HfFraction = Annotated[float, Field(gt=0, le=1)]
_HF_UNCOSTED: dict[str, tuple[Any, str]] = {
    "embd_pdrop": (
        Annotated[float, Field(ge=0, lt=1)],
        "the embedding dropout's mask (a byte per token and model dimension, held by the first pipeline stage) "
        "is not costed",
    ),
    "attn_logit_softcapping": (
        _HfCap,
        "the attention scores' tanh cap (inside the attention kernel) is not costed",
    ),
    "final_logit_softcapping": (
        _HfCap,
        "the output logits' tanh cap (a pass over the logits) is not costed",
    ),
    "clip_qkv": (
        _HfCap,
        "the clamp of the QKV projections' output (an element-wise pass) is not costed",
    ),
    "partial_rotary_factor": (
        _HfFraction,
        "the rotary embedding turns part of each head and is costed over the whole head",
    ),
    "rotary_pct": (
        _HfFraction,
        "the rotary embedding turns part of each head and is costed over the whole head",
    ),
    "attn_temperature_tuning": (
        Annotated[int, Field(ge=0)],
        "the NoPE layers' query temperature scaling (an element-wise pass) is not costed",
    ),
    "input_jitter_noise": (
        _HfCap,
        "the training noise on the experts' input (an element-wise pass) is not costed",
    ),
    "router_jitter_noise": (_HfCap, "the training noise on the router's logits is not costed"),
    "alibi": (StrictBool, "ALiBi attention biases are costed as a rotary embedding"),
}


def _hf_uncosted_notes(cfg: dict, used: set, where: str) -> list[str]:
    """A note for each ``_HF_UNCOSTED`` key the config sets that no family rule read (all of them marked read,
    each value validated as its kind)."""
    notes = []
    for key, (kind, what) in _HF_UNCOSTED.items():
        if key not in cfg or key in used:
            continue
        used.add(key)
        value = _hf_value(cfg, key, Optional[kind], where)
        whole = kind is _HfFraction and value == 1
        if _hf_is_set(value) and not whole:
            notes.append(f"field '{key}' ({value!r:.40}): {what}")
    return notes


def hf_warnings(result: HfImport, where: str) -> list[str]:
    """The warnings of an import, one line each (what ``model_from_hf_config`` warns)."""
    lines = []
    if not result.model_type_given:
        lines.append(
            f"{where}: no 'model_type': read as {HF_DEFAULT_FAMILY} (known: {', '.join(HF_FAMILIES)})"
        )
    lines.extend(f"{where}: {note}" for note in result.notes)
    if result.unused:
        lines.append(
            f"{where}: {len(result.unused)} key(s) not used (they change neither the parameter count nor "
            f"the modelled cost): {', '.join(k[:60] for k in result.unused)}"
        )
    return lines


def model_from_hf_config(path: Path) -> ModelSpec:
    """Import a Hugging Face config.json (``read_hf_config``), warning (HfConfigWarning) about the
    keys it does not use and a missing model_type."""
    result = read_hf_config(path)
    for line in hf_warnings(result, str(path)):
        warnings.warn(line, HfConfigWarning, stacklevel=2)
    return result.model


def catalogue_file(kind: str, name: str, noun: str, alternatives: str = "") -> Path:
    """The YAML file of catalogue item ``name``, or one line naming it (shortened when absurdly long),
    the closest known id and every known id."""
    file = catalogue_dir(kind) / f"{name}.yaml"
    if _is_catalogue_id(name) and file.is_file():
        return file
    known = sorted(p.stem for p in catalogue_dir(kind).glob("*.yaml"))
    shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name)} characters)"
    raise CatalogueError(
        f"unknown {noun} '{shown}'{did_you_mean(name[:80], known)}; known: {', '.join(known)}{alternatives}"
    )


def model_names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir("models").glob("*.yaml"))


def _is_catalogue_id(name: str) -> bool:
    """A plain file-name stem (no folder, not hidden, within the file-name limit)."""
    return (
        0 < len(name.encode(errors="surrogatepass")) <= 200
        and os.sep not in name
        and "\0" not in name
        and (os.altsep is None or os.altsep not in name)
        and not name.startswith(".")
    )


@cache
def load_model(name_or_path: str) -> ModelSpec:
    """A catalogue id (`llama70b`), a model YAML path, or a Hugging Face config.json path."""
    path = Path(name_or_path)
    if path.suffix == ".json":
        return model_from_hf_config(path)
    if path.suffix in (".yaml", ".yml"):
        return model_from_dict(read_yaml(path), path.stem, str(path))
    name = resolve_model_name(name_or_path)
    file = catalogue_file("models", name, "model", ", or a path to a config.json")
    return model_from_dict(read_yaml(file), name, f"models/{file.name}")


def accelerator_names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir("hardware").glob("*.yaml"))


def accelerator_from_dict(data: Any, where: str) -> Accelerator:
    """Validate an accelerator mapping and convert its human units to SI, once."""
    f = _validate(data, AcceleratorFile, where)
    if (f.hbm_gib is None) == (f.hbm_gb is None):
        raise CatalogueError(f"{where}: give exactly one of 'hbm_gib' or 'hbm_gb'")
    undocumented = [
        k
        for k in (
            "peak_bf16_tflops",
            "hbm_gbytes_per_s",
            "link_gbytes_per_s_per_direction",
            "scale_out_gbytes_per_s_per_direction",
            "gemm",
            "calibration",
        )
        if k not in f.sources
    ]
    undocumented += [
        k
        for k in (
            "runtime",
            "peak_fp8_tflops",
            "peak_fp4_tflops",
            "host_gbytes_per_s_per_direction",
            "checkpoint_write_gbytes_per_s_per_node",
            "board_power_w",
            "idle_power_w",
            "static_power_w",
            "host_memory_gib_per_node",
            "host_cpu_cores_per_node",
        )
        if getattr(f, k) is not None and k not in f.sources
    ]
    if undocumented:
        raise CatalogueError(
            f"{where}: field 'sources' lacks a source for {', '.join(undocumented)}"
        )
    hbm_bytes = f.hbm_gib * GIB if f.hbm_gib is not None else f.hbm_gb * GB
    if f.runtime_reserve_gib * GIB >= hbm_bytes:
        raise CatalogueError(
            f"{where}: field 'runtime_reserve_gib' ({f.runtime_reserve_gib:g}) leaves no usable "
            f"memory of the {hbm_bytes / GIB:.4g} GiB per device"
        )
    if f.idle_power_w is not None and not (f.board_power_w or 0) > f.idle_power_w:
        raise CatalogueError(
            f"{where}: field 'idle_power_w' ({f.idle_power_w:g}) needs a board_power_w above it "
            f"(got {f.board_power_w})"
        )
    if f.runtime is not None and (f.runtime == "xla") != (f.kind == "tpu"):
        raise CatalogueError(
            f"{where}: field 'runtime' ({f.runtime}) does not run a {f.kind}: xla is the TPUs' runtime, "
            f"cuda, rocm and synapse the GPUs'"
        )
    if f.static_power_w is not None and not (f.idle_power_w or 0) >= f.static_power_w:
        raise CatalogueError(
            f"{where}: field 'static_power_w' ({f.static_power_w:g}) needs an idle_power_w at or above "
            f"it (got {f.idle_power_w})"
        )
    ratios = _recipe_ratios(where, f, "fp8")
    fp4_ratios = _recipe_ratios(where, f, "fp4")
    cal, topo = f.calibration, f.topology
    unitless = {
        "collective_half_efficiency_kib",
        "microbatch_overhead_us",
        "step_overhead_ms",
        "moe_launch_latency_us",
        "moe_host_sync_us",
        "overlap_interference",
        "blocking_launch_us_per_layer_pass",
    }
    return Accelerator(
        id=f.id,
        name=f.name,
        kind=f.kind,
        runtime=f.runtime or ("xla" if f.kind == "tpu" else "cuda"),
        peak_flops_per_s=f.peak_bf16_tflops * TERA,
        peak_fp8_flops_per_s=_times(f.peak_fp8_tflops, TERA),
        hbm_bytes=hbm_bytes,
        hbm_bytes_per_s=f.hbm_gbytes_per_s * GB,
        link_bytes_per_s_per_direction=f.link_gbytes_per_s_per_direction * GB,
        link_latency_s=f.link_latency_us * MICRO,
        scale_out_bytes_per_s_per_direction=f.scale_out_gbytes_per_s_per_direction * GB,
        scale_out_latency_s=f.scale_out_latency_us * MICRO,
        host_bytes_per_s_per_direction=_times(f.host_gbytes_per_s_per_direction, GB),
        runtime_reserve_bytes=f.runtime_reserve_gib * GIB,
        **cal.model_dump(
            exclude=unitless | {"compute_fractions", "fp8_recipe_ratio", "fp4_recipe_ratio"}
        ),  # fractions, token counts: SI
        fp8_recipe_ratio=tuple((r.value, x) for r, x in ratios.items()),
        peak_fp4_flops_per_s=_times(f.peak_fp4_tflops, TERA),
        fp4_recipe_ratio=tuple((r.value, x) for r, x in fp4_ratios.items()),
        compute_fractions=cal.compute_fractions,
        collective_half_efficiency_bytes=cal.collective_half_efficiency_kib * KIB,
        microbatch_overhead_s=cal.microbatch_overhead_us * MICRO,
        moe_launch_latency_s=cal.moe_launch_latency_us * MICRO,
        moe_host_sync_s=cal.moe_host_sync_us * MICRO,
        blocking_launch_s_per_layer_pass=_times(cal.blocking_launch_us_per_layer_pass, MICRO),
        overlap_interference=round(
            cal.overlap_interference, 2
        ),  # the step tables count it in percent
        step_overhead_s=cal.step_overhead_ms * MILLI,
        gemm_units=f.gemm.compute_units,
        gemm_tile_rows=f.gemm.tile_rows,
        gemm_tile_cols=f.gemm.tile_cols,
        gemm_smaller_tiles=tuple(tuple(t) for t in f.gemm.smaller_tiles),
        gemm_smaller_tile_efficiency=f.gemm.smaller_tile_efficiency,
        **topo.model_dump(exclude={"max_slice_shape"}),
        max_slice_shape=tuple(topo.max_slice_shape),
        sources=dict(f.sources),
        checkpoint_write_bytes_per_s_per_node=_times(f.checkpoint_write_gbytes_per_s_per_node, GB),
        board_power_w=f.board_power_w,
        idle_power_w=f.idle_power_w,
        static_power_w=f.static_power_w,
        host_memory_bytes_per_node=_times(f.host_memory_gib_per_node, GIB),
        host_cpu_cores_per_node=f.host_cpu_cores_per_node,
    )


def _recipe_ratios(where: str, f: AcceleratorFile, precision: str) -> dict:
    """``calibration: <precision>_recipe_ratio`` (fp8, fp4), given together with ``peak_<precision>_tflops`` and
    none of its ratios putting the recipe above that peak."""
    ratios = getattr(f.calibration, f"{precision}_recipe_ratio") or {}
    if (getattr(f, f"peak_{precision}_tflops") is None) != (not ratios):
        raise CatalogueError(
            f"{where}: give 'peak_{precision}_tflops' and 'calibration: {precision}_recipe_ratio' together"
        )
    too_fast = [r.value for r, x in ratios.items() if x * f.calibration.matmul_efficiency > 1]
    if too_fast:
        raise CatalogueError(
            f"{where}: field 'calibration: {precision}_recipe_ratio' ({', '.join(too_fast)}) times "
            f"matmul_efficiency ({f.calibration.matmul_efficiency:g}) exceeds the {precision} peak"
        )
    return ratios


def _times(value: float | None, unit: float) -> float | None:
    """An optional value in ``unit`` converted to SI (``value * unit``); None stays None."""
    return None if value is None else value * unit


@cache
def load_accelerator(name: str) -> Accelerator:
    file = catalogue_file("hardware", name, "accelerator")
    acc = accelerator_from_dict(read_yaml(file), f"hardware/{file.name}")
    if acc.id != name:
        raise CatalogueError(
            f"hardware/{file.name}: field 'id' is '{acc.id}', expected the file name '{name}'"
        )
    return acc


# ----------------------------------------------------------------------------- model names
# Other names of catalogue models: the family's other releases with the same architecture and
# hyper-parameters, other spellings, and Hugging Face repo ids (matched without case, with or
# without the owner, and without an -Instruct / -it / -Base / -hf / -pt / -chat suffix, which
# name the same architecture trained further).
MODEL_ALIASES = {
    "llama70b": (
        "llama3-70b",
        "meta-llama/Meta-Llama-3-70B",
    ),
    "llama3-8b": (
        "llama3.1-8b",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B",
    ),
    "llama3.1-70b": (
        "llama3.3-70b",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Meta-Llama-3.1-70B",
        "meta-llama/Llama-3.3-70B-Instruct",
    ),
    "llama3-405b": (
        "llama3.1-405b",
        "meta-llama/Llama-3.1-405B",
        "meta-llama/Meta-Llama-3.1-405B",
    ),
    "llama2-7b": ("meta-llama/Llama-2-7b-hf",),
    "llama2-13b": ("meta-llama/Llama-2-13b-hf",),
    "llama2-70b": ("meta-llama/Llama-2-70b-hf",),
    "llama4-scout": ("meta-llama/Llama-4-Scout-17B-16E",),
    "llama4-maverick": ("meta-llama/Llama-4-Maverick-17B-128E",),
    "mistral-7b": ("mistralai/Mistral-7B-v0.1",),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-v0.1",),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-v0.1",),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B",),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B",),
    "qwen3-8b": ("Qwen/Qwen3-8B",),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B",),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B",),
    "gemma2-9b": ("gemma-2-9b", "google/gemma-2-9b"),
    "gemma2-27b": ("gemma-2-27b", "google/gemma-2-27b"),
    "gemma3-27b": ("gemma-3-27b", "google/gemma-3-27b-pt"),
    "phi4-14b": ("phi-4", "phi4", "microsoft/phi-4"),
    "phi3.5-moe": ("microsoft/Phi-3.5-MoE-instruct",),
    "deepseek-v2": ("deepseek-ai/DeepSeek-V2",),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-Base"),
    "kimi-k2": ("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Base"),
    "glm4.5": ("glm-4.5", "zai-org/GLM-4.5"),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
    "gpt-oss-120b": ("openai/gpt-oss-120b",),
    "grok-1": ("xai-org/grok-1",),
}
_VARIANT_SUFFIXES = ("-instruct", "-it", "-base", "-hf", "-pt", "-chat")


def _name_key(name: str) -> str:
    """A name as aliases match it: lower case, without the owner and a variant suffix."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    for suffix in _VARIANT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)]
    return key


@cache
def _alias_index() -> dict[str, str]:
    """Every alias (as ``_name_key`` spells it) -> its catalogue id."""
    index: dict[str, str] = {}
    for model_id, aliases in MODEL_ALIASES.items():
        for alias in aliases:
            index.setdefault(_name_key(alias), model_id)
    return index


def resolve_model_name(name: str) -> str:
    """The catalogue id of ``name``: itself when it is one, else the id its alias names; an unknown
    name is one line naming the family's models (``CatalogueError``)."""
    if _is_catalogue_id(name) and name in model_names():
        return name
    if name.count("/") <= 1 and _is_catalogue_id(name.replace("/", "-")):  # an id or owner/name
        model_id = _alias_index().get(_name_key(name))
        if model_id is not None:
            return model_id
    raise CatalogueError(unknown_model_message(name))


def model_family(name: str) -> str:
    """The family part of a model name: its leading letters and the major version right after
    them, a number followed by b, m, k or x being a size, not a version (llama3.1-70b,
    Llama-3.1-70B -> llama3; gemma-2-9b -> gemma2; gpt-oss-20b, llama70b -> gpt-oss, llama)."""
    key = _name_key(name)
    match = re.match(r"([a-z-]*[a-z])(-?(\d+)(\.\d+)?)?", key)
    if match is None:
        return key
    letters, version, end = match.group(1), match.group(3), match.end()
    if version and not (end < len(key) and key[end] in "bmkx"):
        return letters.rstrip("-") + version
    return letters.rstrip("-")


def unknown_model_message(name: str) -> str:
    """One line for an unknown model name: the closest catalogue model of its family and the
    family's others (by id or alias: llama3-13b names the Llama 3 models, not llama2-13b), else the
    closest id or alias; where the catalogue and its aliases are listed."""
    shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name)} characters)"
    ids, key = model_names(), _name_key(name)[:80]
    family = model_family(name)
    kin = sorted(
        {i for i in ids if model_family(i) == family}
        | {i for alias, i in _alias_index().items() if model_family(alias) == family}
    )
    hint = did_you_mean(key, kin or [*ids, *_alias_index()])
    if not hint and kin:  # nothing close: the family's first model
        hint = f" (did you mean '{kin[0]}'?)"
    if len(kin) > 1:
        hint += f", one of the {family} models here: {', '.join(kin)}"
    return (
        f"unknown model '{shown}'{hint}; `layoutsearch models --format json` lists the "
        f"catalogue and its aliases, or give a path to a config.json"
    )
