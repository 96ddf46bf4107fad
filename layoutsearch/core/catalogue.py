"""Model and accelerator catalogues: one YAML file per item, file name = id.

This is the only place that reads human units (GiB, GB/s, TFLOP/s, us) and converts them to
SI. Validation happens here, with pydantic, and every error is one line naming the file, the
field and the value.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, StrictBool, StrictInt, create_model

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, did_you_mean
from layoutsearch.core.units import GB, GIB, KIB, MAX_MODEL_DIM, MAX_MODEL_PARAMS, MICRO, MILLI, TERA
from layoutsearch.core.specs import Accelerator, ModelSpec

Dim = Annotated[int, Field(gt=0, le=MAX_MODEL_DIM)]  # every model dimension: parameter counts stay exact in int64


def catalogue_dir(kind: str) -> Path:
    """The `models/` or `hardware/` folder: the repository's when run from a checkout, else the wheel's."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / kind, package / "_catalogue" / kind):
        if candidate.is_dir():
            return candidate
    raise CatalogueError(f"catalogue folder '{kind}' not found next to the package")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _file_schema(spec: type, overrides: dict) -> type[BaseModel]:
    """The YAML schema of a frozen spec dataclass: its fields, every integer a model dimension
    (``Dim``) unless ``overrides`` says otherwise, the dataclass defaults as defaults."""
    hints = typing.get_type_hints(spec)
    fields = {f.name: (overrides.get(f.name, Dim if hints[f.name] is int else hints[f.name]),
                       ... if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(spec)}
    return create_model(f"{spec.__name__}File", __base__=_Strict, **fields)


ModelFile = _file_schema(ModelSpec, {"name": Annotated[str, Field(min_length=1, max_length=256)],
                                     "learned_positions": Annotated[int, Field(ge=0, le=MAX_MODEL_DIM)]})


HfDim = Annotated[StrictInt, Field(gt=0, le=MAX_MODEL_DIM)]


class HfConfig(BaseModel):
    """The fields of a Hugging Face config.json the import reads (the others are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    num_hidden_layers: HfDim
    hidden_size: HfDim
    intermediate_size: HfDim
    num_attention_heads: HfDim
    vocab_size: HfDim
    num_key_value_heads: HfDim | None = None
    head_dim: HfDim | None = None
    hidden_act: str | None = None
    activation_function: str | None = None
    model_type: str | None = None
    tie_word_embeddings: StrictBool | None = None
    name_or_path: str | None = Field(default=None, alias="_name_or_path")


class TopologyFile(_Strict):
    torus_dims: int = Field(default=0, ge=0, le=3)
    wraparound_min_axis: int = 0
    wraparound_needs_full_cube: bool = False
    max_slice_shape: list[PositiveInt] = []
    devices_per_host: PositiveInt = 1
    devices_per_node: PositiveInt = 1


class CalibrationFile(_Strict):
    matmul_efficiency: float = Field(gt=0, le=1)
    matmul_half_efficiency_tokens: float = Field(ge=0)
    attention_efficiency: float = Field(gt=0, le=1)
    collective_efficiency: float = Field(gt=0, le=1)
    scale_out_efficiency: float = Field(gt=0, le=1)
    collective_half_efficiency_kib: float = Field(ge=0)
    microbatch_overhead_us: float = Field(ge=0)
    step_overhead_ms: float = Field(ge=0)


class AcceleratorFile(_Strict):
    id: str
    name: str
    kind: Literal["tpu", "gpu"]
    peak_bf16_tflops: PositiveFloat
    hbm_gib: PositiveFloat | None = None
    hbm_gb: PositiveFloat | None = None
    hbm_gbytes_per_s: PositiveFloat
    link_gbytes_per_s_per_direction: PositiveFloat
    links_per_device: PositiveInt | None = None
    link_latency_us: float = Field(ge=0)
    scale_out_gbytes_per_s_per_direction: PositiveFloat
    scale_out_latency_us: float = Field(ge=0)
    runtime_reserve_gib: float = Field(ge=0)
    topology: TopologyFile
    calibration: CalibrationFile
    sources: dict[str, str]


def _check_keys(data: Any, schema: type[BaseModel], where: str) -> None:
    """Unknown keys are an error naming the key, with a 'did you mean' hint (recursively)."""
    if not isinstance(data, dict):
        raise CatalogueError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = schema.model_fields
    for key, value in data.items():
        if key not in fields:
            raise CatalogueError(f"{where}: unknown key '{key}'{did_you_mean(str(key), fields)}")
        annotation = fields[key].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            _check_keys(value, annotation, f"{where}: {key}")


def _validate(data: Any, schema: type[BaseModel], where: str):
    _check_keys(data, schema, where)
    return io.validated(schema, data, where, CatalogueError)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; unreadable, not UTF-8 or malformed is a one-line CatalogueError naming the path."""
    return io.read_yaml(path, error=CatalogueError)


def model_param_bound(f: ModelFile) -> int:
    """An upper bound of the parameter count (every bias and norm counted), without the cost model."""
    attention = f.d_model * (2 * f.num_heads + 2 * f.num_kv_heads) * f.head_dim + (f.num_heads + 2 * f.num_kv_heads) * f.head_dim
    mlp = 3 * f.d_model * f.d_ff + 2 * f.d_ff + f.d_model
    per_layer = attention + mlp + 5 * f.d_model
    return f.num_layers * per_layer + (2 * f.vocab_size + f.learned_positions + 2) * f.d_model


def model_from_dict(data: Any, name: str, where: str) -> ModelSpec:
    """Validate a catalogue-style model mapping and freeze it."""
    f = _validate(data, ModelFile, where)
    if f.num_heads % f.num_kv_heads:
        raise CatalogueError(f"{where}: num_heads({f.num_heads}) is not a multiple of num_kv_heads({f.num_kv_heads})")
    bound = model_param_bound(f)
    if bound >= MAX_MODEL_PARAMS:
        raise CatalogueError(f"{where}: about {bound:.3g} parameters, more than the {MAX_MODEL_PARAMS:.3g} "
                             f"(2**53) this package counts exactly")
    return ModelSpec(name=name, **{k: v for k, v in f.model_dump().items() if k != "name"})


def model_from_hf_config(path: Path) -> ModelSpec:
    """Import a Hugging Face config.json (absent num_key_value_heads = MHA, head_dim = hidden/heads)."""
    cfg = io.read_json(path, error=CatalogueError)
    if not isinstance(cfg, dict):
        raise CatalogueError(f"{path}: expected a Hugging Face config (a JSON object), got {_json_kind(cfg)}")
    required = [k for k, field in HfConfig.model_fields.items() if field.is_required()]
    for key in required:
        if key not in cfg:
            raise CatalogueError(f"{path}: missing field '{key}' (a Hugging Face config needs {', '.join(required)})")
    c = io.validated(HfConfig, cfg, str(path), CatalogueError)
    act = c.hidden_act or c.activation_function or "silu"
    gated = (c.model_type or "llama") not in ("gpt2", "gpt_neox", "opt", "bloom") and "gelu" not in act
    head_dim = c.head_dim or c.hidden_size // c.num_attention_heads
    if not head_dim:
        raise CatalogueError(f"{path}: field 'hidden_size' ({c.hidden_size}) is smaller than 'num_attention_heads' "
                             f"({c.num_attention_heads}): no head_dim; give 'head_dim'")
    data = {
        "name": (c.name_or_path or path.parent.name or path.stem)[:256],
        "num_layers": c.num_hidden_layers,
        "d_model": c.hidden_size,
        "d_ff": c.intermediate_size,
        "mlp": "gated" if gated else "plain",
        "num_heads": c.num_attention_heads,
        "num_kv_heads": c.num_key_value_heads or c.num_attention_heads,
        "head_dim": head_dim,
        "vocab_size": c.vocab_size,
        "tied_embeddings": bool(c.tie_word_embeddings),
    }
    return model_from_dict(data, data["name"], str(path))


def _json_kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list"}.get(type(value), type(value).__name__)


def catalogue_file(kind: str, name: str, noun: str, alternatives: str = "") -> Path:
    """The YAML file of catalogue item ``name``, or one line naming it (shortened when absurdly long),
    the closest known id and every known id."""
    file = catalogue_dir(kind) / f"{name}.yaml"
    if _is_catalogue_id(name) and file.is_file():
        return file
    known = sorted(p.stem for p in catalogue_dir(kind).glob("*.yaml"))
    shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name)} characters)"
    raise CatalogueError(f"unknown {noun} '{shown}'{did_you_mean(name[:80], known)}; known: {', '.join(known)}"
                         f"{alternatives}")


def model_names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir("models").glob("*.yaml"))


def _is_catalogue_id(name: str) -> bool:
    """A plain file-name stem (no folder, not hidden, within the file-name limit)."""
    return (0 < len(name.encode(errors="surrogatepass")) <= 200 and os.sep not in name and "\0" not in name
            and (os.altsep is None or os.altsep not in name) and not name.startswith("."))


@lru_cache(maxsize=None)
def load_model(name_or_path: str) -> ModelSpec:
    """A catalogue id (`llama70b`), a model YAML path, or a Hugging Face config.json path."""
    path = Path(name_or_path)
    if path.suffix == ".json":
        return model_from_hf_config(path)
    if path.suffix in (".yaml", ".yml"):
        return model_from_dict(read_yaml(path), path.stem, str(path))
    file = catalogue_file("models", name_or_path, "model", ", or a path to a config.json")
    return model_from_dict(read_yaml(file), name_or_path, f"models/{file.name}")


def accelerator_names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir("hardware").glob("*.yaml"))


def accelerator_from_dict(data: Any, where: str) -> Accelerator:
    """Validate an accelerator mapping and convert its human units to SI, once."""
    f = _validate(data, AcceleratorFile, where)
    if (f.hbm_gib is None) == (f.hbm_gb is None):
        raise CatalogueError(f"{where}: give exactly one of 'hbm_gib' or 'hbm_gb'")
    undocumented = [k for k in ("peak_bf16_tflops", "hbm_gbytes_per_s", "link_gbytes_per_s_per_direction",
                                "scale_out_gbytes_per_s_per_direction", "calibration") if k not in f.sources]
    if undocumented:
        raise CatalogueError(f"{where}: field 'sources' lacks a source for {', '.join(undocumented)}")
    cal, topo = f.calibration, f.topology
    unitless = {"collective_half_efficiency_kib", "microbatch_overhead_us", "step_overhead_ms"}
    return Accelerator(
        id=f.id, name=f.name, kind=f.kind,
        peak_flops_per_s=f.peak_bf16_tflops * TERA,
        hbm_bytes=f.hbm_gib * GIB if f.hbm_gib is not None else f.hbm_gb * GB,
        hbm_bytes_per_s=f.hbm_gbytes_per_s * GB,
        link_bytes_per_s_per_direction=f.link_gbytes_per_s_per_direction * GB,
        link_latency_s=f.link_latency_us * MICRO,
        scale_out_bytes_per_s_per_direction=f.scale_out_gbytes_per_s_per_direction * GB,
        scale_out_latency_s=f.scale_out_latency_us * MICRO,
        runtime_reserve_bytes=f.runtime_reserve_gib * GIB,
        **cal.model_dump(exclude=unitless),  # fractions and token counts, already SI
        collective_half_efficiency_bytes=cal.collective_half_efficiency_kib * KIB,
        microbatch_overhead_s=cal.microbatch_overhead_us * MICRO,
        step_overhead_s=cal.step_overhead_ms * MILLI,
        **topo.model_dump(exclude={"max_slice_shape"}), max_slice_shape=tuple(topo.max_slice_shape),
        sources=dict(f.sources),
    )


@lru_cache(maxsize=None)
def load_accelerator(name: str) -> Accelerator:
    file = catalogue_file("hardware", name, "accelerator")
    acc = accelerator_from_dict(read_yaml(file), f"hardware/{file.name}")
    if acc.id != name:
        raise CatalogueError(f"hardware/{file.name}: field 'id' is '{acc.id}', expected the file name '{name}'")
    return acc
