"""The measured-run format (shared/validation/SCHEMA.md): pydantic validation at the boundary.

``load_runs(path)`` returns the records as dicts, or raises a one-line CatalogueError naming
the record id and the field (unknown keys get a "did you mean").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt

from layoutsearch.core.catalogue import _validate, read_yaml
from layoutsearch.core.errors import CatalogueError

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecModel(_Strict):
    num_layers: PositiveInt
    d_model: PositiveInt
    d_ff: PositiveInt
    mlp: Literal["plain", "gated"]
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    vocab_size: PositiveInt
    tied_embeddings: bool


class RecWorkload(_Strict):
    seq_len: PositiveInt
    global_batch_seqs: PositiveInt
    precision: str | None  # bf16 | fp16 | fp8; others are skipped per record, not refused for the file


class RecCluster(_Strict):
    accelerator: str
    num_devices: PositiveInt
    devices_per_node: PositiveInt | None
    scale_out_gbytes_per_s_per_device: PositiveFloat | None


class RecLayout(_Strict):
    dp: PositiveInt
    fsdp: PositiveInt
    zero_stage: int = Field(ge=0, le=3)
    tp: PositiveInt
    sequence_parallel: bool | None
    pp: PositiveInt
    virtual_stages: PositiveInt | None
    cp: PositiveInt
    microbatch_seqs: PositiveInt | None
    num_microbatches: PositiveInt | None
    recompute: Literal["none", "selective", "full"] | None


class RecMeasured(_Strict):
    tokens_per_s_per_device: PositiveFloat | None
    step_time_s: PositiveFloat | None
    mfu: float | None = Field(gt=0, le=1)
    mfu_convention: str | None  # palm-6n-12lhqt | palm-causal | megatron-eq3-hardware | megatron-core | other
    peak_tflops_used: PositiveFloat | None
    memory_gib_per_device: NonNegativeFloat | None
    oom: bool


class RunRecord(_Strict):
    id: str = Field(min_length=1)
    source: str
    trust: Literal["high", "medium", "low"]
    model: RecModel
    workload: RecWorkload
    cluster: RecCluster
    layout: RecLayout
    measured: RecMeasured
    derived: dict[str, Any] = {}


def load_runs(path: str | Path) -> list[dict]:
    """Read and validate a runs file; every error is one CatalogueError line naming record id and field."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, list):
        raise CatalogueError(f"{path}: expected a list of records, got {type(data).__name__}")
    out, seen = [], set()
    for i, raw in enumerate(data):
        rid = raw.get("id") if isinstance(raw, dict) else None
        where = f"{path.name}: record '{rid}'" if rid else f"{path.name}: record #{i + 1}"
        rec = _validate(raw, RunRecord, where).model_dump()
        _check_record(rec, where, seen)
        seen.add(rec["id"])
        out.append(rec)
    return out


def _check_record(rec: dict, where: str, seen: set) -> None:
    """Rules across fields: unique id, known accelerator, a throughput unless the run ran out of memory."""
    if rec["id"] in seen:
        raise CatalogueError(f"{where}: field 'id': duplicate id")
    meas = rec["measured"]
    if not meas["oom"] and meas["tokens_per_s_per_device"] is None:
        raise CatalogueError(f"{where}: field 'measured.tokens_per_s_per_device': required unless measured.oom is true")
    lay = rec["layout"]
    if lay["dp"] % lay["fsdp"]:
        raise CatalogueError(f"{where}: field 'layout.fsdp': fsdp({lay['fsdp']}) does not divide the total "
                             f"data-parallel degree dp({lay['dp']})")


def source_family(record: dict) -> str:
    """Group name: the repository of a 'owner/repo ...' source, else the citation up to its year."""
    first = record["source"].split()[0].rstrip(",;:") if record["source"].strip() else record["id"]
    if "/" in first:
        return first.split("/")[1]
    year = re.match(r"^(.*?\b(?:19|20)\d\d)\b", record["source"])
    return year.group(1) if year else " ".join(record["source"].split()[:3])
