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

import re
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.fields import absent_is_none

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
ENUMS = {
    "trust": TRUST,
    "workload.framework": FRAMEWORKS,
    "workload.fp8_recipe": FP8_RECIPES,
    "model.attention": ATTENTION,
}


class _Block(BaseModel):
    """Every field optional (absent = null); unknown keys are reported by ``_unknown_keys`` and ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


def _block(block_name: str, /, **fields) -> type[_Block]:
    """A record block whose every field is optional (a key a record leaves out means null)."""
    return absent_is_none(block_name, _Block, nullable=True, **fields)


RecMoE = _block(
    "RecMoE",
    num_experts=PositiveInt,
    top_k=PositiveInt,
    expert_d_ff=PositiveInt,
    num_shared_experts=NonNegativeInt,
    shared_d_ff=PositiveInt,
    first_dense_layers=NonNegativeInt,
    moe_layer_freq=PositiveInt,
    capacity_factor=PositiveFloat,
)  # capacity_factor null = dropless
RecMLA = _block(
    "RecMLA",
    q_lora_rank=PositiveInt,
    kv_lora_rank=PositiveInt,
    qk_rope_head_dim=PositiveInt,
    qk_nope_head_dim=PositiveInt,
    v_head_dim=PositiveInt,
)
# d_ff: MoE records give the dense layers' FFN (null when every layer is MoE); mlp plain | gated, another
# value is a per-record skip; attention mha | gqa | mla
RecModel = _block(
    "RecModel",
    name=str,
    num_layers=PositiveInt,
    d_model=PositiveInt,
    d_ff=PositiveInt,
    mlp=str,
    num_heads=PositiveInt,
    num_kv_heads=PositiveInt,
    head_dim=PositiveInt,
    vocab_size=PositiveInt,
    tied_embeddings=bool,
    moe=RecMoE,
    attention=str,
    mla=RecMLA,
    mtp_num_layers=NonNegativeInt,
    params_total=PositiveInt,
    params_active=PositiveInt,
    notes=str,
)
# precision bf16 | fp16 | fp8 (others are per-record skips); framework FRAMEWORKS, fp8_recipe FP8_RECIPES
# (another value is kept as given, with a warning)
RecWorkload = _block(
    "RecWorkload",
    seq_len=PositiveInt,
    global_batch_seqs=PositiveInt,
    precision=str,
    framework=str,
    fp8_recipe=str,
    torch_compile=bool,
)
RecCluster = _block(
    "RecCluster",
    accelerator=str,
    num_devices=PositiveInt,
    devices_per_node=PositiveInt,
    scale_out_gbytes_per_s_per_device=PositiveFloat,
    hbm_gb_per_device=PositiveFloat,
    power_limit_w=PositiveFloat,
)


RecLayout = _block(
    "RecLayout",
    dp=PositiveInt,
    fsdp=PositiveInt,
    zero_stage=Annotated[int, Field(ge=0, le=3)],
    tp=PositiveInt,
    sequence_parallel=bool,
    pp=PositiveInt,
    virtual_stages=PositiveInt,
    cp=PositiveInt,
    ep=PositiveInt,
    etp=PositiveInt,
    microbatch_seqs=PositiveInt,
    num_microbatches=PositiveInt,
    recompute=str,
    async_tp=bool,
)  # recompute none | selective | full; another value is a skip
# mfu_convention: palm-6n-12lhqt | palm-causal | megatron-eq3-hardware | megatron-core | other
RecMeasured = _block(
    "RecMeasured",
    tokens_per_s_per_device=PositiveFloat,
    step_time_s=PositiveFloat,
    mfu=Annotated[float, Field(gt=0, le=1)],
    mfu_convention=str,
    peak_tflops_used=PositiveFloat,
    tflops_per_device=PositiveFloat,
    memory_gib_per_device=NonNegativeFloat,
    oom=bool,
)


class RunRecord(_Block):
    id: str = Field(min_length=1)
    source: str | None = None
    trust: str | None = None  # high | medium | low
    model: RecModel = RecModel()
    workload: RecWorkload = RecWorkload()
    cluster: RecCluster = RecCluster()
    layout: RecLayout = RecLayout()
    measured: RecMeasured = RecMeasured()
    derived: dict[str, Any] = {}

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
        sub = _submodel(field.annotation)
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
