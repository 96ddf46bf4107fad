"""Command-line options built from their one declaration (``core.options``).

A command is declared as the option groups it takes (``CommandSpec``); ``build_command`` turns
each field into a typer option (flag, short name, type, range, default, help) and the command
into a typer command. Click only reads the text; the values are converted and checked once per
group by the group's own pydantic model, together with those of a ``--problem`` file (which
fill the options not given on the command line). An error names the option
(``Invalid value for '--seqs': ...``) or the file and its field, as one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import typer
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from typer._click import Parameter
from typer._click.globals import get_current_context
from typer._coercion import RuntimeParam
from typer.core import DEFAULT_MARKUP_MODE, TyperCommand, TyperOption
from typer.main import _get_param
from typer.models import ParamMeta

from layoutsearch.cli.common import reports_errors
from layoutsearch.core.errors import InvalidArgumentError
from layoutsearch.core.options import (
    InputOptions,
    LayoutOptions,
    OptionGroup,
    OutputOptions,
    PlanOptions,
    PlanOutputOptions,
    ProblemOptions,
    SearchOptions,
    SweepOptions,
    WorkloadOptions,
    option_type,
)
from layoutsearch.core.specs import Cluster, ModelSpec

__all__ = ["CommandSpec", "Given", "build_command", "register_command", "flags_of"]

ALL = None  # every field of the group, in declaration order

# the attribute of ``Given`` that holds each group
_KEYS = {
    InputOptions: "input",
    ProblemOptions: "problem",
    WorkloadOptions: "workload",
    SearchOptions: "search",
    PlanOptions: "plan",
    LayoutOptions: "layout",
    OutputOptions: "output",
    PlanOutputOptions: "output",
    SweepOptions: "sweep",
}


@dataclasses.dataclass(frozen=True)
class Given:
    """The validated options of one command, by group (None: the command has no such group)."""

    input: InputOptions | None = None
    problem: ProblemOptions | None = None
    workload: WorkloadOptions | None = None
    search: SearchOptions | None = None
    plan: PlanOptions | None = None
    layout: LayoutOptions | None = None
    output: OutputOptions | None = None
    sweep: SweepOptions | None = None


@dataclasses.dataclass(frozen=True)
class CommandSpec:
    """A command's options: (group, field names or ALL) in the order ``--help`` lists them;
    ``defaults`` overrides a field's default for this command (explain ranks ``top=2``).
    ``inline``: a problem file may give a model or cluster mapping; ``lists``: a list in it is
    several values (sweep)."""

    name: str
    groups: tuple[tuple[type[OptionGroup], tuple[str, ...] | None], ...]
    defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    inline: bool = True
    lists: bool = False

    def fields(self) -> list[tuple[type[OptionGroup], str]]:
        """Every (group, field name) of the command, in order."""
        return [
            (group, name)
            for group, names in self.groups
            for name in (names if names is not None else group.model_fields)
        ]


def flags_of(group: type[OptionGroup], name: str) -> tuple[str, ...]:
    """The command-line spelling of a field: its declared flags, else ``--field-name`` (and
    ``--no-field-name`` for a boolean that is not a plain switch)."""
    declared = cli_of(group.model_fields[name]).get("flags")
    if declared:
        return tuple(declared)
    flag = "--" + name.replace("_", "-")
    is_bool = option_type(group.model_fields[name].annotation) is bool
    return (f"{flag}/--no-{flag[2:]}",) if is_bool else (flag,)


def cli_of(field: FieldInfo) -> dict[str, Any]:
    """A field's command-line metadata (``core.options.cli``, kept in its json_schema_extra)."""
    extra = field.json_schema_extra
    return extra if isinstance(extra, dict) else {}


def _option(group: type[OptionGroup], name: str, default: Any) -> TyperOption:
    """The typer option of one field; its value reaches the command as click read it."""
    field = group.model_fields[name]
    required = field.is_required()
    info = typer.Option(
        ... if required else default,
        *flags_of(group, name),
        help=field.description,
        min=_bound(field, "ge"),
        max=_bound(field, "le"),
    )
    param = _get_param(ParamMeta(name=name, default=info, annotation=field.annotation))
    assert isinstance(param, TyperOption)  # typer.Option info makes an option
    param._runtime_param = _AsGiven(info, param.type_descriptor.annotation)
    return param


def _bound(field, kind: str) -> float | None:
    for meta in field.metadata:
        value = getattr(meta, kind, None)
        if value is not None:
            return value
    return None


@dataclasses.dataclass(frozen=True)
class _AsGiven(RuntimeParam):
    """typer's per-option conversion (a pydantic TypeAdapter built per option at parse time),
    left out: the group's model converts all the options at once."""

    def _coerce_value(self, value: Any, param, ctx) -> Any:
        return value

    def coerce(self, value: Any, param, ctx) -> Any:
        if value is None:
            return () if param.multiple else None
        return value


def build_command(spec: CommandSpec, run: Callable[[Given], None], help: str) -> TyperCommand:
    """The typer command of ``spec``: parse, validate into ``Given``, call ``run``; an error is
    one line on stderr and its exit code (``reports_errors``)."""
    fields = spec.fields()
    params: list[Parameter] = [_option(InputOptions, "problem_file", None)]
    params += [
        _option(group, name, spec.defaults.get(name, group.model_fields[name].default))
        for group, name in fields
    ]

    def callback(**raw: Any) -> None:
        ctx = get_current_context()
        problem_file = raw.pop("problem_file")
        raw = {k: (list(v) if v else None) if isinstance(v, tuple) else v for k, v in raw.items()}
        from_file: dict[str, Any] = {}
        if problem_file is not None:
            from_file = _file_values(ctx, spec, problem_file, raw)
            raw.update(from_file)
        by_group: dict[type[OptionGroup], dict[str, Any]] = {}
        for group, name in fields:
            by_group.setdefault(group, {})[name] = raw[name]
        given: dict[str, Any] = {
            _KEYS[group]: _validated(ctx, group, values, problem_file, from_file)
            for group, values in by_group.items()
        }
        run(Given(input=InputOptions(problem_file=problem_file), **given))

    return TyperCommand(
        name=spec.name,
        callback=reports_errors(callback),
        params=params,
        help=help,
        rich_markup_mode=DEFAULT_MARKUP_MODE,
    )


def _validated(
    ctx, group: type[OptionGroup], values: dict, file: str | None, from_file: dict
) -> OptionGroup:
    """One group's values, converted and checked by its model; the first error names the option
    (or the problem file's field) and the value."""
    objects = {k: v for k, v in values.items() if isinstance(v, (ModelSpec, Cluster))}
    try:
        options = group.model_validate({k: v for k, v in values.items() if k not in objects})
    except ValidationError as exc:
        err = exc.errors()[0]
        name, message = str(err["loc"][0]), str(err["msg"])
        if name in from_file:
            shown = "" if isinstance(from_file[name], list) else f" (got {from_file[name]!r:.80})"
            raise InvalidArgumentError(f"{file}: field '{name}': {message}{shown}") from None
        raise typer.BadParameter(message, ctx=ctx, param=_param(ctx, name)) from exc
    return options.model_copy(update=objects) if objects else options


def _param(ctx, name: str):
    return next(p for p in ctx.command.params if p.name == name)


def given_on_command_line(ctx, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not left at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _file_values(ctx, spec: CommandSpec, path: str, raw: dict) -> dict[str, Any]:
    """The options a problem file sets: its keys that name an option of this command that was
    not given on the command line (a list joined with commas where the command takes several
    values, as sweep does)."""
    from layoutsearch.core.problem_file import load_problem_file

    values = load_problem_file(path, None if spec.inline else spec.name)
    params = {p.name: p for p in ctx.command.params}
    out = {}
    for key, value in values.items():
        if key in raw and not given_on_command_line(ctx, key):
            out[key] = _one_value(params[key], value, f"{path}: field '{key}'", spec.lists)
    return out


def _one_value(param, value: Any, where: str, lists: bool) -> Any:
    """A problem file's value as the option takes it: one value, or a list for a repeatable one."""
    if isinstance(value, list) and not param.multiple:
        if not lists:
            raise InvalidArgumentError(f"{where}: one value expected, got a list of {len(value)}")
        return ",".join(map(str, value))
    if param.multiple and not isinstance(value, list):
        return [value]
    if param.type_descriptor.annotation is str and isinstance(value, int | float):
        return str(value)  # a text option (sweep's --seqs) given a number
    return value


def register_command(app: typer.Typer, name: str, command: Callable[[], TyperCommand]) -> None:
    """Add a built command to a typer app (typer's ``cls`` hook returns it as it is)."""
    # typer calls cls(**attributes): a factory of the built command serves, though it is no class
    app.command(name, cls=lambda **_: command())(lambda: None)  # type: ignore[arg-type]
