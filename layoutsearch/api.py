"""The Python API: the CLI's names, returning the result objects.

    import layoutsearch as ls
    result = ls.solve(model="llama3-8b", cluster="h100-64", seqs=256)
    best = result.layouts[0]                      # an Estimate: .layout, .step_time_s, .mfu, .memory_bytes
    est = ls.estimate(model="llama70b", cluster="v5p-8192", layout="fsdp=1024,tp=8")

Models and clusters are given as the CLI takes them (a catalogue id, a model YAML or a Hugging
Face config.json path; a cluster name) or as objects (ModelSpec, Cluster). Degrees, choices and
options are the CLI's strings (``fix="tp=8"``) or mappings (``fix={"tp": 8}``). Bad input raises
the CLI's one-line errors (``layoutsearch.core.errors.LayoutsearchError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from layoutsearch.core.parse import parse_choices, parse_degrees, parse_names
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest, build_workload
from layoutsearch.core.specs import DEGREE_NAMES, RECOMPUTE_POLICIES, Cluster, Layout, ModelSpec
from layoutsearch.core.stages import default_microbatches
from layoutsearch.costs.estimate import Estimate
from layoutsearch.costs.estimate import estimate as estimate_layout
from layoutsearch.search import SearchResult
from layoutsearch.search import solve as solve_problem

__all__ = ["solve", "estimate", "problem"]


def problem(
    model: str | ModelSpec,
    cluster: str | Cluster,
    seqs: int = 1024,
    seq_len: int = 4096,
    *,
    tokens: float | None = None,
    **workload_options,
) -> Problem:
    """The Problem the CLI builds from ``--model --cluster --seqs --seq-len`` and the workload options
    (``framework``, ``precision``, ``tp_comm_overlap``, ``ep_comm_overlap``, ``deepep``, ``vendor_attention``,
    ``launch_blocking``, ``cuda_graphs``, ``routing``, ``routing_cv``, ``grad_bytes``, ``moment_bytes``,
    ``fused_attention``, ``hbm_gib``, ``memory_margin_gib``: the CLI's names)."""
    return Problem.build(model, cluster, build_workload(seqs, seq_len, tokens, **workload_options))


def solve(
    model: str | ModelSpec,
    cluster: str | Cluster,
    seqs: int = 1024,
    seq_len: int = 4096,
    *,
    top: int = 3,
    fix: str | Mapping[str, int] | None = None,
    choices: str | Mapping[str, Sequence[int]] | None = None,
    only: str | Sequence[str] | None = None,
    recompute: str | Sequence[str] | None = None,
    objective: str = "step-time",
    method: str = "cpsat",
    time_limit_s: float = 30.0,
    target: str | None = None,
    **workload_options,
) -> SearchResult:
    """`layoutsearch solve`: the ``top`` best layouts, proven optimal (``result.layouts``, best first)."""
    options = SearchOptions(
        fix=parse_degrees(fix, "fix") if isinstance(fix, str) else dict(fix or {}),
        choices=parse_choices(choices, "choices")
        if isinstance(choices, str)
        else {k: tuple(v) for k, v in (choices or {}).items()},
        only=_names(only, DEGREE_NAMES, "only"),
        recompute=_names(recompute, RECOMPUTE_POLICIES, "recompute"),
    )
    request = SearchRequest(
        options=options,
        objective=objective,
        top_k=top,
        method=method,
        time_limit_s=time_limit_s,
        target=target,
    )
    return solve_problem(problem(model, cluster, seqs, seq_len, **workload_options), request)


def estimate(
    model: str | ModelSpec,
    cluster: str | Cluster,
    layout: str | Mapping[str, int] | Layout,
    seqs: int = 1024,
    seq_len: int = 4096,
    *,
    workload: Mapping | None = None,
    **layout_options,
) -> Estimate:
    """`layoutsearch estimate`: the itemised cost of one layout (degrees as 'fsdp=1024,tp=8' or a
    mapping, plus Layout fields such as ``zero_stage``, ``num_microbatches``, ``recompute``); ``workload``
    holds the workload options of ``problem`` (e.g. ``{"framework": "ideal", "precision": "fp8"}``)."""
    prob = problem(model, cluster, seqs, seq_len, **dict(workload or {}))
    if not isinstance(layout, Layout):
        degrees = parse_degrees(layout, "layout") if isinstance(layout, str) else dict(layout)
        if "num_microbatches" not in layout_options:
            layout_options["num_microbatches"] = default_microbatches(
                seqs,
                degrees.get("dp", 1) * degrees.get("fsdp", 1),
                degrees.get("pp", 1),
                layout_options.get("virtual_stages", 1),
            )
        layout = Layout(**degrees, **layout_options)
    return estimate_layout(prob, layout)


def _names(
    value: str | Sequence[str] | None, allowed: tuple[str, ...], field: str
) -> tuple[str, ...] | None:
    if value is None:
        return None
    return parse_names(value if isinstance(value, str) else ",".join(value), allowed, field)
