"""The measured-run format (shared/validation/SCHEMA.md): pydantic validation at the boundary.

``load_runs(path)`` returns the records as dicts (a ``Runs`` list, whose ``warnings`` lists
the loader's remarks), or raises a one-line CatalogueError naming the file, the record and the
field when the FILE is malformed: not UTF-8, not YAML, not a list, a record that is not a
mapping, a value of the wrong type (``num_layers: "abc"``), a duplicate id.

Every field the schema documents is accepted, and a key a record leaves out means null: the
dumped record always has every block and every field. What the engine cannot use (a null it
needs, an unknown accelerator or precision, a mixture-of-experts model) is not the loader's
business: ``validate.record_to_problem`` skips that record with its reason. A key the schema
does not know is a warning (record id, key, "did you mean"), never an abort; it is dropped.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                      field_validator)

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, did_you_mean

# Documented values of the open enumerations (SCHEMA.md). Other values are kept as given, with a warning.
TRUST = ("high", "medium", "low")
FRAMEWORKS = ("megatron", "torchtitan", "maxtext", "megatron-deepspeed", "llm-foundry", "pytorch-fsdp",
              "nemo-automodel", "other")
FP8_RECIPES = ("delayed-scaling", "current-scaling", "tensorwise", "rowwise", "blockwise", "mxfp8")
ATTENTION = ("mha", "gqa", "mla")
ENUMS = {"trust": TRUST, "workload.framework": FRAMEWORKS, "workload.fp8_recipe": FP8_RECIPES,
         "model.attention": ATTENTION}


class _Block(BaseModel):
    """Every field optional (absent = null); unknown keys are reported by ``_unknown_keys`` and ignored."""
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class RecMoE(_Block):
    num_experts: PositiveInt | None = None
    top_k: PositiveInt | None = None
    expert_d_ff: PositiveInt | None = None
    num_shared_experts: NonNegativeInt | None = None
    shared_d_ff: PositiveInt | None = None
    first_dense_layers: NonNegativeInt | None = None
    moe_layer_freq: PositiveInt | None = None
    capacity_factor: PositiveFloat | None = None  # null = dropless


class RecMLA(_Block):
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None


class RecModel(_Block):
    name: str | None = None
    num_layers: PositiveInt | None = None
    d_model: PositiveInt | None = None
    d_ff: PositiveInt | None = None  # MoE: the dense layers' FFN; null when every layer is MoE
    mlp: str | None = None  # plain | gated; another value is a skip (the engine's model check)
    num_heads: PositiveInt | None = None
    num_kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    vocab_size: PositiveInt | None = None
    tied_embeddings: bool | None = None
    moe: RecMoE | None = None
    attention: str | None = None  # mha | gqa | mla
    mla: RecMLA | None = None
    mtp_num_layers: NonNegativeInt | None = None
    params_total: PositiveInt | None = None
    params_active: PositiveInt | None = None
    notes: str | None = None


class RecWorkload(_Block):
    seq_len: PositiveInt | None = None
    global_batch_seqs: PositiveInt | None = None
    precision: str | None = None  # bf16 | fp16 | fp8; others are skipped per record, not refused for the file
    framework: str | None = None  # FRAMEWORKS; another value is kept as given
    fp8_recipe: str | None = None  # FP8_RECIPES
    torch_compile: bool | None = None


class RecCluster(_Block):
    accelerator: str | None = None
    num_devices: PositiveInt | None = None
    devices_per_node: PositiveInt | None = None
    scale_out_gbytes_per_s_per_device: PositiveFloat | None = None
    hbm_gb_per_device: PositiveFloat | None = None
    power_limit_w: PositiveFloat | None = None


class RecLayout(_Block):
    dp: PositiveInt | None = None
    fsdp: PositiveInt | None = None
    zero_stage: int | None = Field(default=None, ge=0, le=3)
    tp: PositiveInt | None = None
    sequence_parallel: bool | None = None
    pp: PositiveInt | None = None
    virtual_stages: PositiveInt | None = None
    cp: PositiveInt | None = None
    ep: PositiveInt | None = None
    etp: PositiveInt | None = None
    microbatch_seqs: PositiveInt | None = None
    num_microbatches: PositiveInt | None = None
    recompute: str | None = None  # none | selective | full; another value is a skip
    async_tp: bool | None = None


class RecMeasured(_Block):
    tokens_per_s_per_device: PositiveFloat | None = None
    step_time_s: PositiveFloat | None = None
    mfu: float | None = Field(default=None, gt=0, le=1)
    mfu_convention: str | None = None  # palm-6n-12lhqt | palm-causal | megatron-eq3-hardware | megatron-core | other
    peak_tflops_used: PositiveFloat | None = None
    tflops_per_device: PositiveFloat | None = None
    memory_gib_per_device: NonNegativeFloat | None = None
    oom: bool | None = None


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
            out.append(f"unknown key '{prefix}{key}' ignored{did_you_mean(str(key), schema.model_fields)}")
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
            out.append(f"field '{dotted}': value {value!r} is not one of {', '.join(allowed)}"
                       f"{did_you_mean(str(value), allowed)}; kept as given")
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
        where = f"{path}: record '{rid}'" if isinstance(rid, str) and rid else f"{path}: record #{i + 1}"
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
    """Group name: the repository of a 'owner/repo ...' source, else the citation up to its year."""
    source = (record.get("source") or "").strip()
    if not source:
        return record["id"]
    first = source.split()[0].rstrip(",;:")
    if "/" in first:
        return first.split("/")[1]
    year = re.match(r"^(.*?\b(?:19|20)\d\d)\b", source)
    return year.group(1) if year else " ".join(source.split()[:3])
