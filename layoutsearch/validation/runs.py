"""The measured-run format (docs/RUN_RECORDS.md): pydantic validation at the boundary.

``load_runs(path)`` returns the records as dicts (a ``Runs`` list, whose ``warnings`` lists
the loader's remarks), or raises a one-line CatalogueError naming the file, the record and the
field when the FILE is malformed: not UTF-8, not YAML, not a list, a record that is not a
mapping, a value of the wrong type (``num_layers: "abc"``), a duplicate id.

Every field the schema documents is accepted, and a key a record leaves out means null: the
dumped record always has every block and every field. What the engine cannot use (a null it
needs, an unknown accelerator or precision, a layout the engine rejects) is not the loader's
business: ``validate.record_to_problem`` skips that record with its reason. A key the schema
does not know is a warning (record id, key, "did you mean"), never an abort; it is dropped.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Hashable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from layoutsearch.core import io
from layoutsearch.core.catalogue import (
    MAX_GBYTES_PER_S,
    MAX_HBM_GIB,
    MAX_TFLOPS,
    MIN_GBYTES_PER_S,
    MIN_TFLOPS,
)
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.fields import absent_is_none
from layoutsearch.core.problem import SCHEDULES
from layoutsearch.core.specs import CROSS_ENTROPIES
from layoutsearch.core.units import (
    GB,
    GIB,
    MAX_DEVICES,
    MAX_GLOBAL_BATCH_SEQS,
    MAX_MICROBATCHES,
    MAX_MODEL_DIM,
    MAX_MODEL_PARAMS,
    MAX_SEQ_LEN,
    MAX_VIRTUAL_STAGES_RECORD,
)

# Documented values of the open enumerations (docs/RUN_RECORDS.md). Other values are kept as given, with a warning.
TRUST = ("high", "medium", "low")
FRAMEWORKS = (
    "megatron",
    "torchtitan",
    "maxtext",
    "megatron-deepspeed",
    "llm-foundry",
    "pytorch-fsdp",
    "nemo-automodel",
    "other",
)
FP8_RECIPES = ("delayed-scaling", "current-scaling", "tensorwise", "rowwise", "blockwise", "mxfp8")
ATTENTION = ("mha", "gqa", "mla")
MOE_ROUTING = ("real", "forced")  # what the benchmark's router did; null: the source does not say
ENUMS = {
    "workload.moe_routing": MOE_ROUTING,
    "trust": TRUST,
    "workload.framework": FRAMEWORKS,
    "workload.fp8_recipe": FP8_RECIPES,
    "model.attention": ATTENTION,
}


class _Block(BaseModel):
    """Every field optional (absent = null); unknown keys are reported by ``_unknown_keys`` and
    ignored; every number finite and within its field's range."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True, allow_inf_nan=False)


def _range(kind: type, low: float, high: float, *, open_low: bool = False) -> Any:
    """``kind`` from ``low`` (excluded with ``open_low``) to ``high``, finite."""
    low_bound: dict[str, Any] = {"gt": low} if open_low else {"ge": low}
    return Annotated[kind, Field(**low_bound, le=high, allow_inf_nan=False)]


Dim = _range(int, 1, MAX_MODEL_DIM)  # layers, widths, heads, experts, vocabulary
Count = _range(int, 0, MAX_MODEL_DIM)
Degree = _range(int, 1, MAX_DEVICES)
Params = _range(int, 1, MAX_MODEL_PARAMS)
GBytesPerS = _range(float, MIN_GBYTES_PER_S, MAX_GBYTES_PER_S)
Tflops = _range(float, MIN_TFLOPS, MAX_TFLOPS)
MAX_TOKENS_PER_S_PER_DEVICE = 1e9  # far beyond any device: 1e5 TFLOP/s on a 1e5-parameter model
MAX_STEP_TIME_S = 1e7  # about 4 months for one step
MAX_POWER_W = 1e6


def _block(block_name: str, /, **fields) -> type[_Block]:
    """A record block whose every field is optional (a key a record leaves out means null)."""
    return absent_is_none(block_name, _Block, nullable=True, **fields)


RecMoE = _block(
    "RecMoE",
    num_experts=Dim,
    top_k=Dim,
    expert_d_ff=Dim,
    num_shared_experts=Count,
    shared_d_ff=Dim,
    first_dense_layers=Count,
    moe_layer_freq=Dim,
    capacity_factor=_range(float, 0, MAX_MODEL_DIM, open_low=True),
)  # capacity_factor null = dropless
RecMLA = _block(  # every field a dimension
    "RecMLA",
    **dict.fromkeys(
        "q_lora_rank kv_lora_rank qk_rope_head_dim qk_nope_head_dim v_head_dim".split(), Dim
    ),
)
# d_ff: MoE records give the dense layers' FFN (null when every layer is MoE); mlp plain | gated, another
# value is a per-record skip; attention mha | gqa | mla; sliding_window (tokens) on every layer but
# full_attention_layers of them; notes: free text, never read by the mapping
RecModel = _block(
    "RecModel",
    name=str,
    num_layers=Dim,
    d_model=Dim,
    d_ff=Dim,
    mlp=str,
    num_heads=Dim,
    num_kv_heads=Dim,
    head_dim=Dim,
    vocab_size=Dim,
    tied_embeddings=bool,
    moe=RecMoE,
    attention=str,
    mla=RecMLA,
    mtp_num_layers=Count,
    sliding_window=Dim,
    full_attention_layers=Count,
    params_total=Params,
    params_active=Params,
    parallel_block=bool,
    notes=str,
)
# precision bf16 | fp16 | fp8 | fp4 (others are per-record skips); framework FRAMEWORKS, fp8_recipe FP8_RECIPES,
# moe_routing MOE_ROUTING (another value is kept as given, with a warning)
RecWorkload = _block(
    "RecWorkload",
    seq_len=_range(int, 1, MAX_SEQ_LEN),
    global_batch_seqs=_range(int, 1, MAX_GLOBAL_BATCH_SEQS),
    precision=str,
    framework=str,
    fp8_recipe=str,
    fp4_recipe=Literal["nvfp4", "mxfp4"],
    torch_compile=bool,
    moe_routing=str,
    fused_attention=bool,
    fsdp_collectives_per_layer=Dim,
    launch_blocking=bool,
    cuda_graphs=Literal["none", "scoped", "full_iteration"],
    ep_comm_overlap=bool,
    moe_dispatcher=Literal["alltoall", "deepep", "hybridep"],
    vendor_attention=bool,
    fp32_logits=bool,
    triton_attention=bool,
    grad_reduce_dtype=Literal["bf16", "fp32"],
    grad_reduce_overlap=bool,
    framework_release=str,
    compiled_loss=bool,
    cross_entropy=Literal[CROSS_ENTROPIES],
)
RecCluster = _block(
    "RecCluster",
    accelerator=str,
    num_devices=Degree,
    devices_per_node=Degree,
    scale_out_gbytes_per_s_per_device=GBytesPerS,
    hbm_gb_per_device=_range(float, 0, MAX_HBM_GIB * GIB / GB, open_low=True),
    power_limit_w=_range(float, 0, MAX_POWER_W, open_low=True),
)


RecLayout = _block(
    "RecLayout",
    dp=Degree,
    fsdp=Degree,
    zero_stage=_range(int, 0, 3),
    tp=Degree,
    sequence_parallel=bool,
    pp=Degree,
    virtual_stages=_range(int, 1, MAX_VIRTUAL_STAGES_RECORD),
    schedule=Literal[SCHEDULES],
    cp=Degree,
    ep=Degree,
    etp=Degree,
    microbatch_seqs=_range(int, 1, MAX_GLOBAL_BATCH_SEQS),
    num_microbatches=_range(int, 1, MAX_MICROBATCHES),
    recompute=str,
    recompute_policy=str,
    recompute_modules=tuple[str, ...],
    async_tp=bool,
    first_stage_layers=Dim,
    last_stage_layers=Dim,
    activation_offload_layers=Count,
)  # recompute none | selective | full; another value is a skip
# mfu_convention: palm-6n-12lhqt | palm-causal | megatron-eq3-hardware | megatron-core | other
RecMeasured = _block(
    "RecMeasured",
    tokens_per_s_per_device=_range(float, 0, MAX_TOKENS_PER_S_PER_DEVICE, open_low=True),
    step_time_s=_range(float, 0, MAX_STEP_TIME_S, open_low=True),
    mfu=_range(float, 0, 1, open_low=True),
    mfu_convention=str,
    peak_tflops_used=Tflops,
    tflops_per_device=_range(float, 0, MAX_TFLOPS, open_low=True),
    memory_gib_per_device=_range(float, 0, MAX_HBM_GIB),
    oom=bool,
)


class RunRecord(_Block):
    id: str = Field(min_length=1)
    source: str | None = None
    trust: str | None = None  # high | medium | low
    # the blocks are schemas built at import (_block), which a type checker cannot use as types
    model: RecModel = RecModel()  # type: ignore[valid-type]
    workload: RecWorkload = RecWorkload()  # type: ignore[valid-type]
    cluster: RecCluster = RecCluster()  # type: ignore[valid-type]
    layout: RecLayout = RecLayout()  # type: ignore[valid-type]
    measured: RecMeasured = RecMeasured()  # type: ignore[valid-type]
    derived: dict[str, Any] = {}

    @field_validator("derived")
    @classmethod
    def _finite_notes(cls, value: dict) -> dict:
        """The free-form notes hold no .inf or .nan (what is printed as JSON must be JSON)."""
        stack = [("derived", value)]
        while stack:
            where, item = stack.pop()
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"{where} is {item}, not a finite number")
            if isinstance(item, dict):
                stack.extend((f"{where}.{k}", v) for k, v in item.items())
            elif isinstance(item, list):
                stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
        return value

    @field_validator("model", "workload", "cluster", "layout", "measured", "derived", mode="before")
    @classmethod
    def _null_block(cls, value: Any) -> Any:
        """A block written as null (or left empty) is a block of nulls."""
        return {} if value is None else value


class Runs(list):
    """The records of a runs file (dicts), with the loader's one-line ``warnings``."""

    def __init__(self, records=(), warnings=()):
        super().__init__(records)
        self.warnings: list[str] = list(warnings)


@cache
def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``Sub`` or ``Sub | None``, else None."""
    for t in (annotation, *typing.get_args(annotation)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None


def _unknown_keys(data: dict, schema: type[BaseModel], prefix: str = "") -> list[str]:
    """Dotted paths of the keys the schema does not know, each with a 'did you mean' hint (recursively)."""
    out = []
    for key, value in data.items():
        field = schema.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            out.append(
                f"unknown key '{prefix}{key}' ignored{did_you_mean(str(key), schema.model_fields)}"
            )
            continue
        sub = _submodel(typing.cast(Hashable, field.annotation))  # an annotation is hashable
        if sub is not None and isinstance(value, dict):
            out.extend(_unknown_keys(value, sub, f"{prefix}{key}."))
    return out


def _unknown_values(rec: dict) -> list[str]:
    """Values of the documented enumerations that are not among them (kept as given)."""
    out = []
    for dotted, allowed in ENUMS.items():
        *block, key = dotted.split(".")
        value = (rec[block[0]] if block else rec)[key]
        if value is not None and value not in allowed:
            out.append(
                f"field '{dotted}': value {value!r} is not one of {', '.join(allowed)}"
                f"{did_you_mean(str(value), allowed)}; kept as given"
            )
    return out


def _validate_record(raw: Any, where: str) -> RunRecord:
    """One record through pydantic; the first error is one CatalogueError line with the dotted field."""
    return io.validated(RunRecord, raw, where, CatalogueError)


def load_runs(path: str | Path) -> Runs:
    """Read and validate a runs file: the records as dicts, warnings on ``.warnings``; a malformed
    file is one CatalogueError line naming the file, the record and the field."""
    path = Path(path)
    data = io.read_yaml(path, error=CatalogueError)
    if data is None:
        raise CatalogueError(f"{path}: empty file: expected a list of records")
    if not isinstance(data, list):
        raise CatalogueError(f"{path}: expected a list of records, got {type(data).__name__}")
    out, warnings, seen = Runs(), [], set()
    for i, raw in enumerate(data):
        rid = raw.get("id") if isinstance(raw, dict) else None
        where = (
            f"{path}: record '{rid}'"
            if isinstance(rid, str) and rid
            else f"{path}: record #{i + 1}"
        )
        rec = _validate_record(raw, where).model_dump()
        if rec["id"] in seen:
            raise CatalogueError(f"{where}: field 'id': duplicate id (record #{i + 1})")
        seen.add(rec["id"])
        name = f"{path.name}: record '{rec['id']}'"
        warnings += [f"{name}: {w}" for w in _unknown_keys(raw, RunRecord) + _unknown_values(rec)]
        out.append(rec)
    out.warnings = warnings
    return out


def source_family(record: dict) -> str:
    """Group name: the repository of a 'owner/repo ...' source, else the citation up to its year, else
    the source's first three words before any parenthesis or colon ('mlcommons training_results_v6.0')."""
    source = (record.get("source") or "").strip()
    if not source:
        return record["id"]
    first = source.split()[0].rstrip(",;:")
    if "/" in first:
        return first.split("/")[1]
    year = re.match(r"^(.*?\b(?:19|20)\d\d)\b", source)
    return (
        year.group(1)
        if year
        else " ".join(re.split(r"[(:]", source)[0].split()[:3]) or source.split()[0]
    )
