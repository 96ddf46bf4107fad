"""The `layoutsearch` command: parse, call the library, print. Exit codes: 0 found, 1 nothing
feasible, 2 bad input (one line on stderr, never a traceback)."""

from __future__ import annotations

import functools
import json
import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from layoutsearch.core.catalogue import accelerator_names, load_accelerator, load_model, model_names
from layoutsearch.core.errors import LayoutsearchError
from layoutsearch.core.parse import parse_axes, parse_choices, parse_degrees, parse_names
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import DEGREE_NAMES, RECOMPUTE_POLICIES, Layout, Workload
from layoutsearch.core.topology import EXAMPLE_CLUSTERS, resolve_cluster
from layoutsearch.costs import params
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import export_document
from layoutsearch.report import render
from layoutsearch.report.output import estimate_document, solve_document
from layoutsearch.search import solve
from layoutsearch.search.explain import compare, infeasibility

def reports_errors(command):
    """Turn a LayoutsearchError into one line on stderr and its exit code (2 bad input, 1 infeasible)."""
    @functools.wraps(command)
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except LayoutsearchError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
    return run


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Proven-optimal parallel layouts for transformer training.")


class Format(str, Enum):
    table = "table"
    json = "json"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class Schedule(str, Enum):
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    gpipe = "gpipe"


class MfuConvention(str, Enum):
    model = "model"
    palm = "palm"
    palm_causal = "palm-causal"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Catalogue id (llama70b) or a path to a model YAML / HF config.json")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="v5p-8192 (chips), v5p:16x20x28, v5p-8960x4, h100-1024")]
SeqsOpt = Annotated[int, typer.Option("--seqs", min=1, help="Global batch in sequences")]
SeqLenOpt = Annotated[int, typer.Option("--seq-len", min=1, help="Tokens per sequence")]
FormatOpt = Annotated[Format, typer.Option("--format", help="table or json")]


def workload_from_options(seqs: int, seq_len: int, tokens: float | None = None, tp_overlap: bool = False) -> Workload:
    """The design notes' defaults: 1024 x 4096 tokens, 18 B/param mixed-precision Adam."""
    return Workload(global_batch_seqs=seqs, seq_len=seq_len, training_tokens=tokens, tp_comm_overlap=tp_overlap)


TpOverlapOpt = Annotated[bool, typer.Option("--tp-comm-overlap/--no-tp-comm-overlap",
                                            help="TP collectives pipelined with their GEMMs (Transformer Engine, XLA)")]


@app.command("models")
@reports_errors
def models_cmd(fmt: FormatOpt = Format.table) -> None:
    """List the model catalogue with exact parameter counts."""
    rows = []
    for name in model_names():
        m = load_model(name)
        rows.append({"id": name, "name": m.name, "layers": m.num_layers, "d_model": m.d_model, "d_ff": m.d_ff,
                     "mlp": m.mlp, "heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                     "vocab": m.vocab_size, "tied": m.tied_embeddings, "params": params.param_counts(m)["total"]})
    if fmt == Format.json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        render.table_of_dicts("models", rows)


@app.command("clusters")
@reports_errors
def clusters_cmd(fmt: FormatOpt = Format.table) -> None:
    """List accelerators (with sources) and example cluster names with their axes."""
    accs = [load_accelerator(a) for a in accelerator_names()]
    clusters = []
    for name in EXAMPLE_CLUSTERS:
        c = resolve_cluster(name)
        clusters.append({"name": name, "devices": c.num_devices, "axes": " x ".join(
            f"{a.name}{a.size}{'(wrap)' if a.wraparound else ''}" for a in c.axes)})
    if fmt == Format.json:
        typer.echo(json.dumps({"accelerators": [{
            "id": a.id, "name": a.name, "peak_flops_per_s": a.peak_flops_per_s, "hbm_bytes": a.hbm_bytes,
            "hbm_bytes_per_s": a.hbm_bytes_per_s, "link_bytes_per_s_per_direction": a.link_bytes_per_s_per_direction,
            "scale_out_bytes_per_s_per_direction": a.scale_out_bytes_per_s_per_direction, "sources": a.sources}
            for a in accs], "clusters": clusters}, indent=2))
        return
    render.table_of_dicts("accelerators", [{
        "id": a.id, "bf16 TFLOP/s": a.peak_flops_per_s / 1e12, "HBM GB": round(a.hbm_bytes / 1e9, 1),
        "HBM GB/s": a.hbm_bytes_per_s / 1e9, "link GB/s/dir": a.link_bytes_per_s_per_direction / 1e9,
        "scale-out GB/s/dir": a.scale_out_bytes_per_s_per_direction / 1e9} for a in accs])
    render.table_of_dicts("example clusters (v5p-N counts chips; Google's Cloud names count TensorCores)", clusters)


@app.command("estimate")
@reports_errors
def estimate_cmd(
    model: ModelOpt = "llama70b",
    cluster: ClusterOpt = "v5p-8192",
    layout: Annotated[str, typer.Option("--layout", "-l", help="Degrees, e.g. fsdp=1024,tp=8 (missing = 1)")] = "fsdp=1024,tp=8",
    seqs: SeqsOpt = 1024,
    seq_len: SeqLenOpt = 4096,
    microbatches: Annotated[int, typer.Option("--microbatches", min=1, help="Microbatches per step")] = 1,
    recompute: Annotated[Recompute, typer.Option("--recompute")] = Recompute.none,
    zero_stage: Annotated[int, typer.Option("--zero-stage", help="0 DDP, 1 optimizer, 2 + grads, 3 + weights sharded")] = 3,
    virtual_stages: Annotated[int, typer.Option("--virtual-stages", min=1)] = 1,
    schedule: Annotated[Schedule, typer.Option("--schedule")] = Schedule.one_f_one_b,
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel")] = True,
    axes: Annotated[Optional[str], typer.Option("--axes", help="Placement, e.g. 'tp=z:8;fsdp=z:4,y:16,x:16'")] = None,
    mfu_convention: Annotated[MfuConvention, typer.Option("--mfu-convention")] = MfuConvention.model,
    tokens: Annotated[Optional[float], typer.Option("--tokens", help="Training tokens, for a days estimate")] = None,
    tp_comm_overlap: TpOverlapOpt = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Does MY layout fit, and where does the time go? Memory by moment, time by component."""
    problem = Problem.build(model, cluster, workload_from_options(seqs, seq_len, tokens, tp_comm_overlap))
    degrees = parse_degrees(layout)
    schedule_name = "interleaved" if virtual_stages > 1 else schedule.value
    lay = Layout(**degrees, zero_stage=zero_stage, virtual_stages=virtual_stages, num_microbatches=microbatches,
                 recompute=recompute.value, sequence_parallel=sequence_parallel, schedule=schedule_name,
                 axes=parse_axes(axes) if axes else None)
    est = estimate(problem, lay, mfu_convention=mfu_convention.value)
    if fmt == Format.json:
        typer.echo(json.dumps(estimate_document(est), indent=2))
    else:
        render.estimate_report(model, cluster, est)
    if not est.fits:
        typer.echo(f"does not fit: {est.violations[-1].message}", err=True)
        raise typer.Exit(1)


class Objective(str, Enum):
    step_time = "step-time"
    gather_volume = "gather-volume"


class Method(str, Enum):
    cpsat = "cpsat"
    enumerate = "enumerate"


class SolveFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


TopOpt = Annotated[int, typer.Option("--top", min=1, max=50, help="How many distinct layouts to rank")]
FixOpt = Annotated[Optional[str], typer.Option("--fix", help="Pin degrees, e.g. tp=8,pp=1")]
ChoicesOpt = Annotated[Optional[str], typer.Option("--choices", help="Allowed values, e.g. 'tp=8,16,32,64;pp=1,2'")]
OnlyOpt = Annotated[Optional[str], typer.Option("--only", help="Degrees that may exceed 1, e.g. fsdp,tp")]
ObjectiveOpt = Annotated[Objective, typer.Option("--objective", help="step-time, or the design notes' gather-volume")]
TimeLimitOpt = Annotated[float, typer.Option("--time-limit", min=0.1, help="CP-SAT time limit, seconds")]
MethodOpt = Annotated[Method, typer.Option("--method", help="cpsat (proof) or enumerate (exhaustive oracle)")]
RecomputeChoicesOpt = Annotated[Optional[str], typer.Option("--recompute", help="Allowed policies, e.g. none,full")]


def _search_inputs(model, cluster, seqs, seq_len, top, fix, choices, only, objective, time_limit, method, recompute,
                   target=None, tp_overlap=False) -> tuple[Problem, SearchRequest]:
    options = SearchOptions(
        fix=parse_degrees(fix, "--fix") if fix else {}, choices=parse_choices(choices) if choices else {},
        only=parse_names(only, DEGREE_NAMES, "--only") if only else None,
        recompute=parse_names(recompute, RECOMPUTE_POLICIES, "--recompute") if recompute else RECOMPUTE_POLICIES)
    problem = Problem.build(model, cluster, workload_from_options(seqs, seq_len, tp_overlap=tp_overlap))
    request = SearchRequest(options=options, objective=objective.value, top_k=top, method=method.value,
                            time_limit_s=time_limit, target=target)
    return problem, request


def _run_search(*args, **kwargs):
    problem, request = _search_inputs(*args, **kwargs)
    result = solve(problem, request)
    explanation = None if result.layouts else infeasibility(problem, result.space, result.tables)
    return problem, result, solve_document(problem, result, explanation), explanation


@app.command("solve")
@reports_errors
def solve_cmd(
    model: ModelOpt = "llama70b",
    cluster: ClusterOpt = "v5p-8192",
    seqs: SeqsOpt = 1024,
    seq_len: SeqLenOpt = 4096,
    top: TopOpt = 3,
    fix: FixOpt = None,
    choices: ChoicesOpt = None,
    only: OnlyOpt = None,
    objective: ObjectiveOpt = Objective.step_time,
    time_limit: TimeLimitOpt = 30.0,
    method: MethodOpt = Method.cpsat,
    recompute: RecomputeChoicesOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    fmt: Annotated[SolveFormat, typer.Option("--format", help="table, json or yaml")] = SolveFormat.table,
    export: Annotated[Optional[str], typer.Option("--export", help="Also write layout 1 as maxtext|megatron|torchtitan|deepspeed")] = None,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="File for --export (stdout without it)")] = None,
) -> None:
    """The best layouts, proven optimal: degrees and axes, memory, step time split, MFU, tokens/s."""
    _, result, doc, explanation = _run_search(model, cluster, seqs, seq_len, top, fix, choices, only, objective,
                                              time_limit, method, recompute, target=export, tp_overlap=tp_comm_overlap)
    if export and result.layouts:
        _write(export_document(doc, export), output)
        typer.echo(f"searched only layouts {export} can express", err=True)
    if fmt == SolveFormat.json:
        typer.echo(json.dumps(doc, indent=2))
    elif fmt == SolveFormat.yaml:
        import yaml

        typer.echo(yaml.safe_dump(doc, sort_keys=False))
    elif not (export and not output):
        render.solve_report(model, cluster, result, explanation)
    if not result.layouts:
        typer.echo(f"no feasible layout: {explanation['message']}", err=True)
        raise typer.Exit(1)


@app.command("explain")
@reports_errors
def explain_cmd(
    model: ModelOpt = "llama70b",
    cluster: ClusterOpt = "v5p-8192",
    seqs: SeqsOpt = 1024,
    seq_len: SeqLenOpt = 4096,
    top: TopOpt = 2,
    fix: FixOpt = None,
    choices: ChoicesOpt = None,
    only: OnlyOpt = None,
    objective: ObjectiveOpt = Objective.step_time,
    time_limit: TimeLimitOpt = 30.0,
    method: MethodOpt = Method.cpsat,
    recompute: RecomputeChoicesOpt = None,
    tp_comm_overlap: TpOverlapOpt = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Why the winner beats the next best, or why nothing fits (exit 1)."""
    _, result, doc, explanation = _run_search(model, cluster, seqs, seq_len, max(top, 2), fix, choices, only,
                                              objective, time_limit, method, recompute, tp_overlap=tp_comm_overlap)
    if result.layouts:
        others = result.layouts[1:] or []
        doc["explanation"] = {"versus": [compare(result.layouts[0], other) for other in others]}
    if fmt == Format.json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        render.explain_report(model, cluster, result, doc.get("explanation") or explanation)
    if not result.layouts:
        typer.echo(f"no feasible layout: {explanation['message']}", err=True)
        raise typer.Exit(1)


@app.command("export")
@reports_errors
def export_cmd(
    result: Annotated[str, typer.Argument(help="A solve or estimate JSON document")],
    to: Annotated[str, typer.Option("--to", help="maxtext, megatron, torchtitan or deepspeed")],
    rank: Annotated[int, typer.Option("--rank", min=1, help="Which layout of the result")] = 1,
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="Output file (stdout without it)")] = None,
) -> None:
    """Write a saved layout as a training framework's configuration (checked by that framework's rules)."""
    from layoutsearch.core.errors import InvalidArgumentError
    from layoutsearch.export import export_document

    try:
        with open(result) as fh:
            document = json.load(fh)
    except OSError as exc:
        raise InvalidArgumentError(f"RESULT: cannot read '{result}' ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"RESULT: '{result}' is not JSON (line {exc.lineno}: {exc.msg})") from None
    _write(export_document(document, to, rank), output)


@app.command("validate")
@reports_errors
def validate_cmd(
    runs: Annotated[str, typer.Argument(help="Measured runs (shared/validation/SCHEMA.md format)")],
    max_median_error: Annotated[float, typer.Option("--max-median-error", min=0.0)] = 0.10,
    rank: Annotated[bool, typer.Option("--rank/--no-rank", help="Rank each published layout among the candidates")] = True,
    fmt: FormatOpt = Format.table,
) -> None:
    """Predicted against measured tokens/s per device; exit 1 when the median error exceeds the limit."""
    from layoutsearch.validation.validate import load_runs, validate_runs

    doc = validate_runs(load_runs(runs), max_median_error, rank=rank)
    if fmt == Format.json:
        typer.echo(json.dumps(doc, indent=2, default=float))
    else:
        render.validation_report(doc)
    if not doc["summary"]["passed"]:
        typer.echo(f"median error {doc['summary']['median_abs_rel_error']:.1%} exceeds {max_median_error:.1%}", err=True)
        raise typer.Exit(1)


@app.command("calibrate")
@reports_errors
def calibrate_cmd(
    runs: Annotated[str, typer.Argument(help="Measured runs (shared/validation/SCHEMA.md format)")],
    accelerator: Annotated[Optional[str], typer.Option("--accelerator", help="Only these, e.g. h100,a100-80gb")] = None,
    fit: Annotated[str, typer.Option("--fit", help="Calibration fields to fit")] = "matmul_efficiency,attention_efficiency",
    write: Annotated[bool, typer.Option("--write", help="Write the fitted values into hardware/*.yaml")] = False,
) -> None:
    """Fit a few calibration fields per accelerator (least squares on log error); writes only with --write."""
    import datetime

    from layoutsearch.validation.calibrate import YAML_KEYS, calibrate, write_calibration
    from layoutsearch.core.catalogue import catalogue_dir
    from layoutsearch.core.parse import parse_names
    from layoutsearch.validation.validate import load_runs

    fields = parse_names(fit, tuple(YAML_KEYS), "--fit")
    accs = parse_names(accelerator, tuple(accelerator_names()), "--accelerator") if accelerator else None
    result = calibrate(load_runs(runs), accelerators=accs, params=fields)
    render.calibration_report(result)
    if write:
        written = write_calibration(result, catalogue_dir("hardware"), today=datetime.date.today())
        typer.echo(f"wrote {', '.join(str(p) for p in written)}", err=True)


def _write(text: str, output: str | None) -> None:
    """Write whole or not at all: a temporary file renamed into place."""
    import os
    import tempfile

    if not output:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    folder = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".layoutsearch-")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, output)
    typer.echo(f"wrote {output}", err=True)


from layoutsearch.cli.sweep_cmd import register as _register_sweep  # noqa: E402  (the sweep and plot commands)

_register_sweep(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app, turning every input error into one line on stderr and exit 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = app(args=argv or ["--help"], prog_name="layoutsearch", standalone_mode=False)
    except LayoutsearchError as exc:
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except typer.TyperException as exc:  # click usage errors: unknown option, bad value, missing argument
        typer.echo(f"error: {exc.format_message()}", err=True)
        return 2
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
