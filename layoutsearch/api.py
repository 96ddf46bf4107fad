"""The Python API: the commands' options as keyword arguments, the commands' documents as results.

    import layoutsearch as ls
    run = ls.solve(model="llama3-8b", cluster="h100-64", seqs=256, tokens=15e12, what_if="hbm=2")
    best = run.layouts[0]      # an Estimate: .layout, .step_time_s, .mfu, .memory_bytes
    run.document               # what `layoutsearch solve --format json` prints
    est = ls.estimate(model="llama70b", cluster="v5p-8192", layout="fsdp=1024,tp=8")

Every keyword is an option of the command, by its declared name (``core.options``: ``seq_len``
for ``--seq-len``), with the same default, range and check; the degrees and lists take the
option's text (``fix="tp=8"``) or a problem file's forms (``fix={"tp": 8}``, ``only=["fsdp",
"tp"]``). Models and clusters are given as the CLI takes them or as objects (ModelSpec,
Cluster). Bad input raises the CLI's one-line errors (``core.errors.LayoutsearchError``), naming
the keyword. The work is ``layoutsearch.engine``'s, the same the commands call.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError

from layoutsearch import engine
from layoutsearch.core import options as declared
from layoutsearch.core.errors import InvalidArgumentError, did_you_mean
from layoutsearch.core.problem import Problem
from layoutsearch.core.problem_file import _axes_text, _joined
from layoutsearch.core.specs import Cluster, Layout, ModelSpec

__all__ = ["solve", "explain", "estimate", "problem"]

G = TypeVar("G", bound=declared.OptionGroup)
_TEXT_FORMS = {"fix": ",", "choices": ";", "only": ",", "recompute": ",", "layout": ","}


def _group(group: type[G], given: dict[str, Any]) -> G:
    """The options of ``group`` among ``given`` (removed from it), validated by the group's model."""
    values = {k: given.pop(k) for k in list(given) if k in group.model_fields}
    objects = {k: v for k, v in values.items() if isinstance(v, (ModelSpec, Cluster))}
    for key, separator in _TEXT_FORMS.items():
        if not isinstance(values.get(key, ""), str | None):
            values[key] = _joined(values[key], separator)
    if isinstance(values.get("axes"), dict):
        values["axes"] = _axes_text(values["axes"])
    try:
        options = group.model_validate({k: v for k, v in values.items() if k not in objects})
    except ValidationError as exc:
        err = exc.errors()[0]
        value = err.get("input")
        raise InvalidArgumentError(
            f"{err['loc'][0]}: {' '.join(str(err['msg']).split())} (got {value!r:.80})"
        ) from None
    return options.model_copy(update=objects) if objects else options


def _known(command: str, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` when every keyword is an option of the command (an unknown one is an error); the
    command then takes its option groups from it in order (``_group``)."""
    unknown = [k for k in given if k not in _KEYWORDS[command]]
    if unknown:
        known = sorted(_KEYWORDS[command])
        raise InvalidArgumentError(
            f"{command}: unknown option '{unknown[0]}'{did_you_mean(unknown[0], known)}; "
            f"known: {', '.join(known)}"
        )
    return given


_KEYWORDS = {
    "solve": {
        *declared.ProblemOptions.model_fields,
        *declared.WorkloadOptions.model_fields,
        *declared.SearchOptions.model_fields,
        "tokens",
        "price_per_device_hour",
        *declared.GOODPUT_OPTIONS,
        "what_if",
        "export",
    },
    "explain": {
        *declared.ProblemOptions.model_fields,
        *declared.WorkloadOptions.model_fields,
        *declared.SearchOptions.model_fields,
        "tokens",
        "price_per_device_hour",
        *declared.GOODPUT_OPTIONS,
        "sensitivity",
    },
    "estimate": {
        *declared.ProblemOptions.model_fields,
        *declared.WorkloadOptions.model_fields,
        *declared.LayoutOptions.model_fields,
        "tokens",
        "price_per_device_hour",
        *declared.GOODPUT_OPTIONS,
        "what_if",
    },
}


def _label(name: str) -> str:
    return name


def solve(model: str | ModelSpec = "llama70b", cluster: str | Cluster = "v5p-8192", **options):
    """`layoutsearch solve`: the ``top`` best layouts, proven optimal (``.layouts``, best first),
    with every option of the command (``fix``, ``tokens``, ``price_per_device_hour``,
    ``what_if``, ``export``, the workload options...); ``.document`` is the JSON document."""
    given = _known("solve", {"model": model, "cluster": cluster, **options})
    problem, workload = (
        _group(declared.ProblemOptions, given),
        _group(declared.WorkloadOptions, given),
    )
    search, plan = _group(declared.SearchOptions, given), _group(declared.PlanOptions, given)
    output = _group(declared.OutputOptions, given)
    return engine.solve(problem, workload, search, plan, export=output.export, label=_label)


def explain(model: str | ModelSpec = "llama70b", cluster: str | Cluster = "v5p-8192", **options):
    """`layoutsearch explain`: the search of ``solve`` (``top`` 2 by default) with why the winner
    wins (``.document['explanation']``) and, with ``sensitivity=True``, its sensitivity."""
    options.setdefault("top", 2)
    given = _known("explain", {"model": model, "cluster": cluster, **options})
    problem, workload = (
        _group(declared.ProblemOptions, given),
        _group(declared.WorkloadOptions, given),
    )
    search, plan = _group(declared.SearchOptions, given), _group(declared.PlanOptions, given)
    return engine.explain(problem, workload, search, plan, label=_label)


def estimate(
    model: str | ModelSpec = "llama70b",
    cluster: str | Cluster = "v5p-8192",
    layout: str | dict | Layout = "fsdp=1024,tp=8",
    **options,
):
    """`layoutsearch estimate`: the itemised cost of one layout (degrees as 'fsdp=1024,tp=8', a
    mapping or a Layout) with the command's options (``microbatches``, ``zero_stage``,
    ``recompute``, the workload and plan options); the Estimate's attributes are the result's."""
    given: dict[str, Any] = {"model": model, "cluster": cluster, **options}
    if not isinstance(layout, Layout):
        given["layout"] = layout
    _known("estimate", given)
    problem, workload = (
        _group(declared.ProblemOptions, given),
        _group(declared.WorkloadOptions, given),
    )
    layout_options, plan = (
        _group(declared.LayoutOptions, given),
        _group(declared.PlanOptions, given),
    )
    chosen = layout if isinstance(layout, Layout) else layout_options
    return engine.estimate(problem, workload, chosen, plan, label=_label)


def problem(
    model: str | ModelSpec = "llama70b", cluster: str | Cluster = "v5p-8192", **options
) -> Problem:
    """The Problem the commands build from the model, cluster, batch and workload options (and
    ``tokens``)."""
    tokens = options.pop("tokens", None)
    given = {"model": model, "cluster": cluster, **options}
    unknown = set(given) - {
        *declared.ProblemOptions.model_fields,
        *declared.WorkloadOptions.model_fields,
    }
    if unknown:
        raise InvalidArgumentError(f"problem: unknown option '{sorted(unknown)[0]}'")
    prob, workload = _group(declared.ProblemOptions, given), _group(declared.WorkloadOptions, given)
    return engine.build_problem(prob, workload, tokens)
