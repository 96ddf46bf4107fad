"""Problem files (``--problem PATH.yaml``): the options of estimate, solve, explain and sweep as
one YAML mapping whose keys are the options' declared names (``core.options``: ``seq_len`` for
``--seq-len``).

``model`` is a catalogue id, a path (model YAML or Hugging Face config.json) or a mapping in the
``models/*.yaml`` format; ``cluster`` is a cluster name, a path to a cluster file or a mapping in
the cluster-file format (``topology.ClusterFile``); paths are relative to the problem file. The
degrees and lists take the option's text (``fix: "tp=8,pp=1"``) or YAML's own forms
(``fix: {tp: 8, pp: 1}``, ``choices: {tp: [8, 16]}``, ``only: [fsdp, tp]``). ``load_problem_file``
checks the types here and the values' syntax with the options' own parsers, each error one line
naming the file and the field; the command line validates them with its options (ranges and
choices are the options' own) and lets every option given on the command line override the file.
"""

from __future__ import annotations

import functools
import operator
import os
from pathlib import Path
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from layoutsearch.core import io
from layoutsearch.core.catalogue import model_from_dict
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.fields import absent_is_none, validated_fields
from layoutsearch.core.options import GROUPS, option_type
from layoutsearch.core.parse import parse_axes, parse_choices, parse_degrees, parse_names
from layoutsearch.core.specs import DEGREE_NAMES, RECOMPUTE_POLICIES
from layoutsearch.core.topology import cluster_from_spec, is_cluster_file

__all__ = ["ProblemFile", "load_problem_file", "problem_values", "MODEL_FILE_SUFFIXES"]

MODEL_FILE_SUFFIXES = (
    ".yaml",
    ".yml",
    ".json",
)  # load_model reads these as files, anything else as an id

_Text = Annotated[StrictStr, Field(min_length=1, max_length=4096)]
_Number = Annotated[StrictFloat, Field(allow_inf_nan=False)]  # an int is accepted too
_Degrees = dict[StrictStr, StrictInt]
_Axes = dict[StrictStr, StrictStr | list[tuple[StrictStr, StrictInt]] | dict[StrictStr, StrictInt]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# Options a problem file does not set: where and how this invocation writes, how a sweep runs.
NOT_IN_FILE: tuple[str, ...] = (
    "problem_file",
    "format",
    "output",
    "jobs",
    "executor",
    "address",
    "fresh",
)
NOT_IN_FILE += ("retry_failed", "progress")

# The forms YAML adds to an option's own type: several values (sweep), mappings for degrees.
YAML_FORMS: dict[str, Any] = {
    "model": dict | list[_Text],
    "cluster": dict,
    "seqs": list[StrictInt],
    "seq_len": list[StrictInt],
    "fix": _Degrees,
    "choices": dict[StrictStr, StrictInt | list[StrictInt]],
    "only": list[_Text],
    "recompute": list[_Text],
    "layout": _Degrees,
    "axes": _Axes,
}


def _file_type(annotation: Any) -> Any:
    """The strict YAML type of an option's type: a number is a number, never the text of one."""
    kind = option_type(annotation)
    if get_origin(kind) is list:
        return list[_Text]
    if kind is bool:
        return StrictBool
    if kind is int:
        return StrictInt
    if kind is float:
        return _Number
    return _Text  # text and closed choices (their option checks the choice)


def _file_fields() -> dict[str, Any]:
    """Every declared option (``core.options``) but NOT_IN_FILE, typed as YAML gives it: the
    types of every option of that name, then YAML's own forms."""
    kinds: dict[str, list] = {}
    for group in GROUPS:
        for name, field in group.model_fields.items():
            if name not in NOT_IN_FILE:
                kind = _file_type(field.annotation)
                if kind not in kinds.setdefault(name, []):
                    kinds[name].append(kind)
    for name, form in YAML_FORMS.items():
        kinds[name].append(form)
    return {name: functools.reduce(operator.or_, k) for name, k in kinds.items()}


# The keys of a problem file, typed; a null is refused like a wrong type. Ranges and choices
# (``top`` 1..50, ``objective``) are checked by the options' own models, not repeated here.
ProblemFile = absent_is_none("ProblemFile", _Strict, nullable=False, **_file_fields())


def load_problem_file(path: str, command: str | None = None) -> dict[str, Any]:
    """The values a problem file gives, by option name: text, numbers, booleans, lists (several
    models, clusters or batches, for sweep), a ``ModelSpec`` or a ``CustomCluster`` for a mapping
    (refused when ``command`` is given: it takes names and paths only)."""
    return problem_values(io.read_yaml(path, "--problem"), path, command)


def problem_values(data: Any, file: str, command: str | None = None) -> dict[str, Any]:
    """``load_problem_file`` on an already parsed mapping (``file`` names it in errors and anchors
    its relative paths)."""
    f = validated_fields(ProblemFile, data, file)
    values = {key: getattr(f, key) for key in f.model_fields_set if getattr(f, key) is not None}
    base = Path(file).parent

    def where(key: str) -> str:
        return f"{file}: field '{key}'"

    if command is not None:
        for key in ("model", "cluster"):
            if isinstance(values.get(key), dict):
                raise InvalidArgumentError(
                    f"{where(key)}: {command} takes {key} ids, names or paths, not a "
                    f"mapping; write the mapping to its own file and give its path"
                )

    if "model" in values:
        values["model"] = _each(values["model"], lambda m: _model(m, base, where("model")))
    if "cluster" in values:
        values["cluster"] = _each(
            values["cluster"], lambda c: _cluster(c, base, file, where("cluster"))
        )
    for key in ("fix", "layout"):
        if key in values:
            values[key] = _joined(values[key], ",")
            parse_degrees(values[key], where(key))
    if "choices" in values:
        values["choices"] = _joined(values["choices"], ";")
        parse_choices(values["choices"], where("choices"))
    for key, allowed, noun in (
        ("only", DEGREE_NAMES, "degree"),
        ("recompute", RECOMPUTE_POLICIES, "policy"),
    ):
        if key in values:
            values[key] = _joined(values[key], ",")
            parse_names(values[key], allowed, where(key), noun)
    if "axes" in values:
        values["axes"] = _axes_text(values["axes"])
        parse_axes(values["axes"], where("axes"))
    return values


def _each(value: Any, resolve) -> Any:
    return [resolve(v) for v in value] if isinstance(value, list) else resolve(value)


def _model(value: str | dict, base: Path, where: str):
    """An id as given, a path anchored at the problem file, or a ModelSpec from a mapping."""
    if isinstance(value, dict):
        name = value.get("name")
        return model_from_dict(value, name if isinstance(name, str) and name else "model", where)
    return _anchored(value, base, where) if value.lower().endswith(MODEL_FILE_SUFFIXES) else value


def _cluster(value: str | dict, base: Path, file: str, where: str):
    """A name as given, a cluster file's path anchored at the problem file, or a CustomCluster
    from a mapping (named by its ``name`` field, else ``FILE:cluster``)."""
    if isinstance(value, dict):
        name = value.get("name")
        return cluster_from_spec(
            value, file, "cluster.", name if isinstance(name, str) and name else f"{file}:cluster"
        )
    return _anchored(value, base, where) if is_cluster_file(value) else value


def _anchored(path: str, base: Path, where: str) -> str:
    """A relative path inside a problem file is relative to the problem file's folder; it must name a file."""
    anchored = path if Path(path).is_absolute() else os.path.normpath(base / path)
    if not os.path.isfile(anchored):  # False for a NUL byte or an over-long name too
        raise InvalidArgumentError(
            f"{where}: no file '{anchored:.200}' (a path in a problem file is relative to the problem file's folder)"
        )
    return anchored


def _joined(value: str | list | dict, separator: str) -> str:
    """An option's text from YAML's forms: [a, b] -> 'a,b'; {tp: 8, pp: 1} -> 'tp=8,pp=1';
    {tp: [8, 16], pp: 1} -> 'tp=8,16;pp=1' (``separator`` between degrees)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join(map(str, value))
    return separator.join(
        f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
    )


def _axes_text(value: str | dict) -> str:
    """{tp: 'z:8', fsdp: [[z, 4], [y, 16]]} or {fsdp: {z: 4, y: 16}} -> 'tp=z:8;fsdp=z:4,y:16'."""
    if isinstance(value, str):
        return value

    def placed(v) -> str:
        if isinstance(v, str):
            return v
        pairs = v.items() if isinstance(v, dict) else v
        return ",".join(f"{axis}:{factor}" for axis, factor in pairs)

    return ";".join(f"{degree}={placed(v)}" for degree, v in value.items())
