"""Validating the mappings of input files (cluster files, problem files) field by field.

Every error is one line naming the file and the field by its dotted path from the top of the
file (``p.yaml: field 'cluster.nodes': ...``), so a mapping nested in another file (an inline
cluster in a problem file) is named where it stands. Unknown keys are errors with a "did you
mean", checked before the types, so a misspelt key is never reported as a missing one.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError, create_model

from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError, did_you_mean

M = TypeVar("M", bound=BaseModel)

__all__ = ["check_keys", "validated_fields", "kind_of"]


def kind_of(value: Any) -> str:
    """How a message names a YAML value's type."""
    return {
        type(None): "null",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def check_keys(
    data: Any,
    known,
    file: str,
    prefix: str = "",
    error: type[LayoutsearchError] = InvalidArgumentError,
) -> dict:
    """``data`` as a mapping whose keys are all in ``known``; else one line naming the key."""
    if not isinstance(data, dict):
        where = f"field '{prefix.rstrip('.')}'" if prefix else "the file"
        raise error(f"{file}: {where} must be a mapping of fields, got {kind_of(data)}")
    known = list(known)
    for key in data:
        if not isinstance(key, str) or key not in known:
            raise error(
                f"{file}: unknown key '{prefix}{str(key)[:80]}'{did_you_mean(str(key), known)}; "
                f"known: {', '.join(known)}"
            )
    return data


def validated_fields(
    schema: type[BaseModel],
    data: Any,
    file: str,
    prefix: str = "",
    error: type[LayoutsearchError] = InvalidArgumentError,
):
    """``schema.model_validate(data)`` after ``check_keys``; the first error names the field and the value."""
    check_keys(data, schema.model_fields, file, prefix, error)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        value = err.get("input")
        shown = "" if isinstance(value, (dict, list)) else f" (got {value!r:.80})"
        raise error(
            f"{file}: field '{prefix}{loc}': {' '.join(str(err['msg']).split())}{shown}"
        ) from None


def _is_union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried in the location (``int``, ``list[int]``, ...)."""
    return isinstance(part, str) and (
        part in ("str", "int", "float", "bool", "dict", "list")
        or "[" in part
        or part.startswith(("constrained-", "function-"))
    )


def absent_is_none(name: str, base: type[M], /, *, nullable: bool, **fields: Any) -> type[M]:
    """A schema whose every field may be left out (then None); with ``nullable`` an explicit null
    is accepted too, else it is refused like any value of the wrong type."""
    definitions: dict[str, Any] = {
        key: ((kind | None) if nullable else kind, None) for key, kind in fields.items()
    }
    return create_model(
        name,
        __base__=base,
        **definitions,
    )
