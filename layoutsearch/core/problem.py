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
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import metadata
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layoutsearch.core.catalogue import load_model, model_from_dict
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.specs import (
    DEGREE_NAMES, RECOMPUTE_POLICIES, Cluster, Layout, Method, ModelSpec, Objective, Workload,
)
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.core.units import MAX_DEVICES, MAX_GLOBAL_BATCH_SEQS, MAX_SEQ_LEN

ZERO_STAGES = (0, 1, 2, 3)
MAX_VIRTUAL_STAGES = 8


def version() -> str:
    """The installed layoutsearch version ('0+unknown' from a source tree without install)."""
    try:
        return metadata.version("layoutsearch")
    except metadata.PackageNotFoundError:
        return "0+unknown"


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
    def build(cls, model: str | ModelSpec, cluster: str | Cluster, workload: Workload) -> "Problem":
        """From catalogue ids or paths (as the CLI takes them) or resolved objects."""
        spec = load_model(model) if isinstance(model, str) else model
        clus = resolve_cluster(cluster) if isinstance(cluster, str) else cluster
        return cls(model_id=model if isinstance(model, str) else spec.name, model=spec,
                   cluster_name=cluster if isinstance(cluster, str) else clus.name, cluster=clus, workload=workload)

    def record(self) -> dict:
        """The `problem` object of every result document (OUTPUT.md), with every assumption."""
        wl = self.workload
        return {
            "model": self.model_id,
            "model_sha256_16": model_hash(self.model),
            "model_spec": {f.name: getattr(self.model, f.name) for f in fields(self.model)},
            "cluster": self.cluster_name,
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
    def from_record(cls, record: Any) -> "Problem":
        """Rebuild the Problem of a result document's `problem` object (validated field by field)."""
        rec = validate_record(record, ProblemRecord, "problem")
        workload = Workload(**{**(rec.workload.model_dump(exclude_none=True) if rec.workload else {}),
                               "global_batch_seqs": rec.global_batch_seqs, "seq_len": rec.seq_len})
        if rec.model_spec is not None:
            model = model_from_dict({k: v for k, v in rec.model_spec.items()}, str(rec.model_spec.get("name", rec.model)),
                                    "problem.model_spec")
        else:
            model = load_model(rec.model)
        return cls(model_id=rec.model, model=model, cluster_name=rec.cluster, cluster=resolve_cluster(rec.cluster),
                   workload=workload)


def model_hash(model: ModelSpec) -> str:
    """Content hash of the architecture (provenance)."""
    text = json.dumps({f.name: getattr(model, f.name) for f in fields(model)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- search request
@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """What the user restricts: pinned degrees, allowed values, kept dimensions, policies."""

    fix: dict[str, int] = field(default_factory=dict)  # degree -> value
    choices: dict[str, tuple[int, ...]] = field(default_factory=dict)  # degree -> allowed values
    only: tuple[str, ...] | None = None  # degrees that may exceed 1
    recompute: tuple[str, ...] = RECOMPUTE_POLICIES
    zero_stages: tuple[int, ...] = ZERO_STAGES
    max_virtual_stages: int = MAX_VIRTUAL_STAGES

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

    def with_options(self, **changes) -> "SearchRequest":
        return replace(self, options=replace(self.options, **changes))


# ----------------------------------------------------------------------------- record validation
class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=False)


PositiveCount = Field(ge=1, le=MAX_DEVICES)


class WorkloadRecord(_Record):
    weight_bytes_per_param: int = Field(ge=1, le=8)
    master_bytes_per_param: int = Field(ge=0, le=8)
    grad_bytes_per_param: int = Field(ge=1, le=8)
    optimizer_bytes_per_param: int = Field(ge=0, le=16)
    activation_bytes: int = Field(ge=1, le=8)
    causal: bool = True
    flash_attention: bool = True
    tp_comm_overlap: bool = False
    fsdp_collectives_per_layer: int = Field(default=1, ge=1, le=64)
    training_tokens: float | None = Field(default=None, gt=0, le=1e18)
    precision: str = "bf16"


class ProblemRecord(_Record):
    model: str = Field(min_length=1, max_length=4096)
    model_spec: dict | None = None
    cluster: str = Field(min_length=1, max_length=256)
    global_batch_seqs: int = Field(ge=1, le=MAX_GLOBAL_BATCH_SEQS)
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    workload: WorkloadRecord | None = None


class DegreesRecord(_Record):
    dp: int = PositiveCount
    fsdp: int = PositiveCount
    tp: int = PositiveCount
    pp: int = PositiveCount
    cp: int = PositiveCount


class LayoutRecord(_Record):
    degrees: DegreesRecord
    zero_stage: int = Field(ge=0, le=3)
    virtual_stages: int = Field(default=1, ge=1, le=1024)
    num_microbatches: int = Field(ge=1, le=MAX_GLOBAL_BATCH_SEQS)
    recompute: str
    sequence_parallel: bool = True
    schedule: str | None = None
    axes: dict[str, list[tuple[str, int]]] | None = None


def validate_record(data: Any, schema: type[BaseModel], where: str):
    """Validate a document part; the first error is one line naming the field and the value."""
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{where}: expected an object, got {type(data).__name__}")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r:.80})"
        raise InvalidArgumentError(f"{where}.{loc}: {err['msg']}{shown}") from None


def layout_from_record(record: Any, where: str = "layout") -> Layout:
    """Rebuild a Layout from a layout record (OUTPUT.md), validated field by field."""
    rec = validate_record(record, LayoutRecord, where)
    if rec.recompute not in RECOMPUTE_POLICIES:
        raise InvalidArgumentError(f"{where}.recompute: '{rec.recompute}' is not one of {', '.join(RECOMPUTE_POLICIES)}")
    degrees = rec.degrees.model_dump()
    schedule = rec.schedule or ("interleaved" if rec.virtual_stages > 1 else "1f1b")
    axes = tuple((name, tuple((str(a), int(f)) for a, f in placed)) for name, placed in rec.axes.items()
                 if name in DEGREE_NAMES) if rec.axes is not None else None
    return Layout(**degrees, zero_stage=rec.zero_stage, virtual_stages=rec.virtual_stages,
                  num_microbatches=rec.num_microbatches, recompute=rec.recompute,
                  sequence_parallel=rec.sequence_parallel, schedule=schedule, axes=axes)
