"""What the commands share: option declarations, output formats, error reporting, writing files,
and the search options of `solve` and `explain` (declared once, in ``SearchArgs``).

``search_command`` turns ``command(search: SearchArgs, **own)`` into a typer command whose
parameters are SearchArgs' fields followed by the command's own: typer reads the combined
``__signature__``, the wrapper builds one SearchArgs from the parsed values, and SearchArgs
builds the one Problem and SearchRequest of the run.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import math
import warnings
from collections.abc import Callable
from typing import Annotated, Any, get_type_hints

import typer
import yaml

from layoutsearch.core import io
from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError, LayoutsearchWarning
from layoutsearch.core.frameworks import framework_of_target
from layoutsearch.core.parse import parse_choices, parse_degrees, parse_names
from layoutsearch.core.problem import (
    MAX_ROUTING_CV,
    Problem,
    SearchOptions,
    SearchRequest,
    build_workload,
)
from layoutsearch.core.problem_file import load_problem_file
from layoutsearch.core.specs import (
    DEGREE_NAMES,
    LEARNED_ROUTING_EXPERT_CV,
    RECOMPUTE_POLICIES,
    Cluster,
    CudaGraphs,
    Framework,
    Method,
    ModelSpec,
    Objective,
    Precision,
    Routing,
    Workload,
    choices,
)
from layoutsearch.core.units import MAX_GLOBAL_BATCH_SEQS, MAX_SEQ_LEN, MAX_TIME_LIMIT_S
from layoutsearch.report.output import solve_document
from layoutsearch.search import SearchResult, solve
from layoutsearch.search.explain import infeasibility


def reports_errors(command: Callable) -> Callable:
    """Turn a LayoutsearchError into one line on stderr and its exit code (2 bad input, 1 infeasible).
    The command's warnings are held until it ends: bad input (exit 2) is the error line alone."""

    @functools.wraps(command)
    def run(*args, **kwargs):
        failure = other = None
        with warnings.catch_warnings(record=True) as held:
            warnings.simplefilter("always", LayoutsearchWarning)
            try:
                result = command(*args, **kwargs)
            except LayoutsearchError as exc:
                failure = exc
            except (
                BaseException
            ) as exc:  # typer.Exit (a layout that does not fit), KeyboardInterrupt
                other = exc
        # replayed outside the recording (inside it each replayed warning would be recorded again)
        if failure is not None:
            _replay(held, keep_ours=failure.exit_code != 2)
            typer.echo(f"error: {one_line(str(failure))}", err=True)
            raise typer.Exit(failure.exit_code) from None
        _replay(held)
        if other is not None:
            raise other
        return result

    return run


def _replay(held: list, keep_ours: bool = True) -> None:
    """Emit held warnings again (outside the recording), layoutsearch's own unless ``keep_ours`` is False."""
    for w in held:
        if keep_ours or not issubclass(w.category, LayoutsearchWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def one_line(text: str) -> str:
    """A message on one line: a newline inside a value must not split it, a control character
    (NUL, an escape sequence) is shown escaped rather than sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(text.split()))


# ----------------------------------------------------------------------------- formats
Format = choices(
    "Format", ("table", "json", "yaml"), "Output format; every command prints all three."
)


def print_document(document: Any, fmt: str) -> None:
    """A result document on stdout as JSON or YAML; NaN or infinity in it is a bug (it is not JSON),
    never printed."""
    text = json.dumps(document, indent=2, allow_nan=False, default=float)
    typer.echo(
        text
        if fmt == Format.json
        else yaml.safe_dump(json.loads(text), sort_keys=False).rstrip("\n")
    )


def write_output(text: str, output: str | None, what: str = "--output") -> None:
    """``text`` on stdout without ``output``, else written whole or not at all (``io.atomic_write``)."""
    if not output:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    io.atomic_write(output, text, what)
    typer.echo(f"wrote {output}", err=True)


# ----------------------------------------------------------------------------- option checks
def finite(value: float | None) -> float | None:
    """Typer callback: a float option must be a finite number (click's ranges let NaN through)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


# ----------------------------------------------------------------------------- shared options
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="Catalogue id (llama70b) or a path to a model YAML / HF config.json"
    ),
]
ClusterOpt = Annotated[
    str,
    typer.Option(
        "--cluster",
        "-c",
        help="v5p-8192 (chips), v5p:16x20x28, v5p-8960x4, h100-1024, or a cluster YAML (examples/*.cluster.yaml)",
    ),
]
ProblemOpt = Annotated[
    str | None,
    typer.Option(
        "--problem",
        help="Problem YAML (examples/*.problem.yaml): keys mirror the options, which override it",
    ),
]
SeqsOpt = Annotated[
    int, typer.Option("--seqs", min=1, max=MAX_GLOBAL_BATCH_SEQS, help="Global batch in sequences")
]
SeqLenOpt = Annotated[
    int, typer.Option("--seq-len", min=1, max=MAX_SEQ_LEN, help="Tokens per sequence")
]
FormatOpt = Annotated[Format, typer.Option("--format", help="table, json or yaml")]
TpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--tp-comm-overlap/--no-tp-comm-overlap",
        help="TP collectives pipelined with their GEMMs inside NVLink/ICI (default: the framework's choice)",
    ),
]
EpOverlapOpt = Annotated[
    bool | None,
    typer.Option(
        "--ep-comm-overlap/--no-ep-comm-overlap",
        help="MoE token all-to-alls hidden behind another microbatch's compute (default: the framework's choice)",
    ),
]
DeepEpOpt = Annotated[
    bool | None,
    typer.Option(
        "--deepep/--no-deepep",
        help="MoE dispatch sends a token once per destination GPU and over scale-out once per destination node (DeepEP; "
        "Megatron's flex dispatcher, torchtitan's deepep backend) instead of once per expert (default: the "
        "framework's choice)",
    ),
]
VendorAttentionOpt = Annotated[
    bool | None,
    typer.Option(
        "--vendor-attention/--no-vendor-attention",
        help="The attention core runs the vendor's fused kernel (Transformer Engine / cuDNN) where the accelerator has "
        "one, else the FlashAttention-2 class (default: the framework's choice: megatron and ideal use the vendor's)",
    ),
]
LaunchBlockingOpt = Annotated[
    bool,
    typer.Option(
        "--launch-blocking/--no-launch-blocking",
        help="Every kernel launch waits for the GPU (CUDA_LAUNCH_BLOCKING=1): the host's time per layer is exposed and "
        "no collective overlaps compute",
    ),
]
CudaGraphsOpt = Annotated[
    CudaGraphs,
    typer.Option(
        "--cuda-graphs",
        help="GPU kernels launched as CUDA graphs: none; scoped (per layer: attention, MoE router and preprocessing); "
        "full_iteration (one graph per step). They remove MoE layers' host overhead",
    ),
]
RoutingOpt = Annotated[
    Routing,
    typer.Option(
        "--routing",
        help="How a dropless MoE routes tokens: learned (a trained router: the expert devices' loads vary and the busiest "
        "sets the pace) or forced (random routing, as benchmarks force it: --moe-router-force-load-balancing)",
    ),
]
RoutingCvOpt = Annotated[
    float,
    typer.Option(
        "--routing-cv",
        min=0,
        max=MAX_ROUTING_CV,
        callback=finite,
        help=f"A learned router's spread of expert loads per MoE layer and microbatch, standard deviation / mean "
        f"(default {LEARNED_ROUTING_EXPERT_CV:g}, fitted to published runs: results/routing_cv.md); unused with "
        f"--routing forced",
    ),
]
FrameworkOpt = Annotated[
    Framework | None,
    typer.Option(
        "--framework",
        help="Whose overlap the step time assumes: megatron, torchtitan, maxtext, deepspeed or ideal "
        "(default: maxtext on TPUs, megatron on GPUs)",
    ),
]
PrecisionOpt = Annotated[
    Precision, typer.Option("--precision", help="bf16 (fp16 costs the same) or fp8 GEMMs")
]
GradBytesOpt = Annotated[
    int,
    typer.Option(
        "--grad-bytes", min=2, max=4, help="Bytes per gradient element: 4 fp32 main grads, 2 bf16"
    ),
]
MomentBytesOpt = Annotated[
    int,
    typer.Option(
        "--moment-bytes",
        min=2,
        max=4,
        help="Bytes per Adam moment element (m and v): 4 fp32, 2 bf16",
    ),
]
FusedAttentionOpt = Annotated[
    bool,
    typer.Option(
        "--fused-attention/--no-fused-attention",
        help="FlashAttention-style kernels (no S x S scores in HBM)",
    ),
]
HbmOpt = Annotated[
    float | None,
    typer.Option(
        "--hbm-gib",
        min=1,
        max=4096,
        callback=finite,
        help="Device memory in GiB when the part differs (e.g. 96)",
    ),
]
MarginOpt = Annotated[
    float,
    typer.Option(
        "--memory-margin-gib",
        min=0,
        max=1024,
        callback=finite,
        help="Memory kept free on every device, GiB",
    ),
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", help="Output file (stdout without it)")
]
TimeLimitOpt = Annotated[
    float,
    typer.Option(
        "--time-limit",
        min=0.1,
        max=MAX_TIME_LIMIT_S,
        callback=finite,
        help="CP-SAT time limit, seconds",
    ),
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkloadArgs:
    """The workload options every costing command takes (estimate, solve, explain, sweep), declared once."""

    model: ModelOpt = "llama70b"
    cluster: ClusterOpt = "v5p-8192"
    seqs: SeqsOpt = 1024
    seq_len: SeqLenOpt = 4096
    framework: FrameworkOpt = None
    precision: PrecisionOpt = Precision.bf16
    tp_comm_overlap: TpOverlapOpt = None
    ep_comm_overlap: EpOverlapOpt = None
    deepep: DeepEpOpt = None
    vendor_attention: VendorAttentionOpt = None
    launch_blocking: LaunchBlockingOpt = False
    cuda_graphs: CudaGraphsOpt = CudaGraphs.none
    routing: RoutingOpt = Routing.learned
    routing_cv: RoutingCvOpt = LEARNED_ROUTING_EXPERT_CV
    grad_bytes: GradBytesOpt = 4
    moment_bytes: MomentBytesOpt = 4
    fused_attention: FusedAttentionOpt = True
    hbm_gib: HbmOpt = None
    memory_margin_gib: MarginOpt = 0.0

    def workload(self, seqs: int, seq_len: int, tokens: float | None = None) -> Workload:
        """The Workload of these options (18 B/param mixed-precision Adam by default)."""
        return build_workload(seqs, seq_len, tokens, **self.workload_options())

    def workload_options(self) -> dict:
        """These options as ``build_workload`` keywords (choices as their plain values)."""
        values = {name: getattr(self, name) for name in WORKLOAD_FIELDS}
        return {
            k: (v.value if isinstance(v, (Framework, Precision, CudaGraphs, Routing)) else v)
            for k, v in values.items()
        }


WORKLOAD_FIELDS = tuple(f.name for f in dataclasses.fields(WorkloadArgs))[4:]
assert WORKLOAD_FIELDS == tuple(inspect.signature(build_workload).parameters)[3:]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchArgs(WorkloadArgs):
    """The options of a search (`solve`, `explain`), declared once: each field is a typer option.

    With ``--problem``, ``model`` may be a ModelSpec and ``cluster`` a Cluster (a problem file's
    inline mappings); ``model_name`` and ``cluster_name`` are their labels.
    """

    top: Annotated[
        int, typer.Option("--top", min=1, max=50, help="How many distinct layouts to rank")
    ] = 3
    fix: Annotated[str | None, typer.Option("--fix", help="Pin degrees, e.g. tp=8,pp=1")] = None
    choices: Annotated[
        str | None, typer.Option("--choices", help="Allowed values, e.g. 'tp=8,16,32,64;pp=1,2'")
    ] = None
    only: Annotated[
        str | None, typer.Option("--only", help="Degrees that may exceed 1, e.g. fsdp,tp")
    ] = None
    objective: Annotated[
        Objective,
        typer.Option(
            "--objective",
            help="step-time, or gather-volume: the FSDP weight gather plus the TP input gather per step, 2DF/tp + 2BD tp/N",
        ),
    ] = Objective.step_time
    time_limit: TimeLimitOpt = 30.0
    method: Annotated[
        Method, typer.Option("--method", help="cpsat (proof) or enumerate (exhaustive oracle)")
    ] = Method.cpsat
    recompute: Annotated[
        str | None, typer.Option("--recompute", help="Allowed policies, e.g. none,full")
    ] = None

    @property
    def model_name(self) -> str:
        """How reports name the model: the id or path given, or an inline model's name (--problem)."""
        return self.model if isinstance(self.model, str) else self.model.name

    @property
    def cluster_name(self) -> str:
        """How reports name the cluster: the name or path given, or an inline cluster's name (--problem)."""
        return self.cluster if isinstance(self.cluster, str) else self.cluster.name

    def options(self) -> SearchOptions:
        return SearchOptions(
            fix=parse_degrees(self.fix, "--fix") if self.fix is not None else {},
            choices=parse_choices(self.choices, "--choices") if self.choices is not None else {},
            only=parse_names(self.only, DEGREE_NAMES, "--only") if self.only is not None else None,
            recompute=(
                parse_names(self.recompute, RECOMPUTE_POLICIES, "--recompute", "policy")
                if self.recompute is not None
                else None
            ),
        )

    def problem(self) -> Problem:
        return Problem.build(self.model, self.cluster, self.workload(self.seqs, self.seq_len))

    def request(self, *, target: str | None = None, top_k: int | None = None) -> SearchRequest:
        return SearchRequest(
            options=self.options(),
            objective=self.objective.value,
            top_k=top_k or self.top,
            method=self.method.value,
            time_limit_s=self.time_limit,
            target=target,
        )


_SEARCH_OPTIONS = get_type_hints(
    SearchArgs, include_extras=True
)  # field -> Annotated[type, typer.Option(...)]


def search_command(**defaults: Any) -> Callable[[Callable], Callable]:
    """Decorator: ``command(search, **own)`` gets SearchArgs' options (``defaults`` override their
    defaults, e.g. ``top=2``) ahead of its own in the signature typer reads."""
    shared = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=_SEARCH_OPTIONS[f.name],
            default=defaults.pop(f.name, f.default),
        )
        for f in dataclasses.fields(SearchArgs)
    ]
    if defaults:
        raise TypeError(f"search_command: {', '.join(defaults)} are not search options")
    names = [p.name for p in shared]

    def wrap(command: Callable) -> Callable:
        own = list(inspect.signature(command, eval_str=True).parameters.values())[
            1:
        ]  # after `search`
        clash = set(names) & {p.name for p in own}
        if clash:
            raise TypeError(
                f"{command.__name__}: {', '.join(sorted(clash))} are search options already"
            )

        @functools.wraps(command)
        def run(**kwargs):
            search = SearchArgs(**{name: kwargs.pop(name) for name in names})
            return command(search, **kwargs)

        params = shared + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        run.__signature__ = inspect.Signature(params)
        run.__annotations__ = {p.name: p.annotation for p in params}
        del run.__wrapped__  # typer must see the combined signature, not the command's
        return takes_problem_file(run)

    return wrap


def takes_workload_options(command: Callable) -> Callable:
    """Decorator: ``command(..., workload_options: WorkloadArgs)`` gets the workload options
    (``WORKLOAD_FIELDS``, declared once in ``WorkloadArgs``) as typer options after its own."""
    hints = get_type_hints(WorkloadArgs, include_extras=True)
    defaults = {f.name: f.default for f in dataclasses.fields(WorkloadArgs)}
    extra = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[name], default=defaults[name]
        )
        for name in WORKLOAD_FIELDS
    ]
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(command, eval_str=True).parameters.values()
        if p.name != "workload_options"
    ]

    @functools.wraps(command)
    def run(**kwargs):
        options = WorkloadArgs(**{name: kwargs.pop(name) for name in WORKLOAD_FIELDS})
        return command(**kwargs, workload_options=options)

    params = own + extra
    run.__signature__ = inspect.Signature(params)
    run.__annotations__ = {p.name: p.annotation for p in params}
    del run.__wrapped__
    return run


# ----------------------------------------------------------------------------- problem files
def takes_problem_file(
    command: Callable | None = None, *, inline: bool = True, lists: bool = False
) -> Callable:
    """Decorator: the command also takes ``--problem FILE`` (``core/problem_file.py``). The file's
    values fill the options that were not given on the command line (click's parameter source is
    DEFAULT), each converted and checked by the option itself (ranges, choices, callbacks); keys
    for options the command does not have are left alone (a problem file serves estimate and
    solve alike). Sweep's variant: ``inline=False`` (ids and paths only, not an inline model or
    cluster mapping) and ``lists=True`` (a list is several values). ``search_command`` applies it
    to solve and explain."""
    if command is None:
        return functools.partial(takes_problem_file, inline=inline, lists=lists)
    params = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(command, eval_str=True).parameters.values()
    ]
    if {"ctx", "problem_file"} & {p.name for p in params}:
        raise TypeError(
            f"{command.__name__}: ctx and problem_file are the problem file's parameters"
        )

    @functools.wraps(command)
    def run(ctx: typer.Context, problem_file: str | None = None, **kwargs):
        if problem_file is not None:
            kwargs.update(
                problem_file_options(ctx, problem_file, kwargs, inline=inline, lists=lists)
            )
        return command(**kwargs)

    added = [
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
        inspect.Parameter(
            "problem_file", inspect.Parameter.KEYWORD_ONLY, annotation=ProblemOpt, default=None
        ),
    ]
    run.__signature__ = inspect.Signature(added + params)
    run.__annotations__ = {p.name: p.annotation for p in added + params}
    del run.__wrapped__  # typer must see this signature, not the command's
    return run


def given_on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not left at its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def problem_file_options(
    ctx: typer.Context,
    path: str,
    options: dict[str, Any],
    *,
    inline: bool = True,
    lists: bool = False,
) -> dict[str, Any]:
    """The options a problem file sets: its keys that name an option of this command that was not
    given on the command line, as that option's values (``lists``: a list is joined with commas,
    as sweep's options take several values)."""
    values = load_problem_file(path, None if inline else ctx.info_name or "this command")
    params = {p.name: p for p in ctx.command.params}
    out = {}
    for key, value in values.items():
        if key in options and key in params and not given_on_command_line(ctx, key):
            out[key] = _option_value(ctx, params[key], value, f"{path}: field '{key}'", lists)
    return out


def _option_value(ctx: typer.Context, param, value: Any, where: str, lists: bool) -> Any:
    """A problem file's value as the option's own value: a list joined for a text option (sweep's
    'llama70b,llama3-8b'), wrapped for a repeatable one; then the option's conversion and checks."""
    if isinstance(value, (ModelSpec, Cluster)):
        return value  # an inline mapping, already validated and built
    if isinstance(value, list):
        if not param.multiple:
            if not lists:
                raise InvalidArgumentError(
                    f"{where}: one value expected, got a list of {len(value)}"
                )
            value = ",".join(map(str, value))
    elif param.multiple:
        value = [value]
    try:
        return param.process_value(ctx, value)
    except typer.BadParameter as exc:
        shown = "" if isinstance(value, list) else f" (got {value!r:.80})"
        raise InvalidArgumentError(f"{where}: {one_line(exc.message)}{shown}") from None


@dataclasses.dataclass(frozen=True)
class SearchRun:
    """One search: its problem, result, document (OUTPUT.md) and, when nothing fits, the explanation."""

    problem: Problem
    result: SearchResult
    document: dict
    explanation: dict | None


def run_search(
    search: SearchArgs, *, target: str | None = None, top_k: int | None = None
) -> SearchRun:
    """Solve, and explain why nothing fits when nothing does. With an export ``target`` and no
    --framework, the step time assumes the target framework's overlap (its file sets those flags)."""
    if target and search.framework is None:
        search = dataclasses.replace(search, framework=Framework(framework_of_target(target)))
    problem = search.problem()
    result = solve(problem, search.request(target=target, top_k=top_k))
    explanation = None if result.layouts else infeasibility(problem, result.space, result.tables)
    return SearchRun(problem, result, solve_document(problem, result, explanation), explanation)


def exit_if_infeasible(run: SearchRun) -> None:
    """Exit 1 with the reason on stderr when the search found no layout."""
    if not run.result.layouts:
        typer.echo(f"no feasible layout: {one_line(run.explanation['message'])}", err=True)
        raise typer.Exit(1)


def check_range(value: int, low: int, high: int, option: str, name: str) -> int:
    """An integer option whose bounds are rules (so the message is the rule's), checked before use."""
    if not low <= value <= high:
        raise InvalidArgumentError(
            f"{option}: {name}({value}) must be {', '.join(map(str, range(low, high)))} or {high}"
            if high - low < 5
            else f"{option}: {name}({value}) must be in {low}..{high}"
        )
    return value
