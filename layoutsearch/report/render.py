"""Rich tables for people; the JSON documents (output.py) are for programs."""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.table import Table

from layoutsearch.core.frameworks import profile_of
from layoutsearch.core.units import GB, GIB, KIB
from layoutsearch.costs import params
from layoutsearch.costs.estimate import Estimate, offload_seconds
from layoutsearch.costs.goodput import Resilience
from layoutsearch.report import planning
from layoutsearch.report.output import band_of, calibrated, stage_layers_record
from layoutsearch.search.explain import ranking_line, slice_wait_line
from layoutsearch.search.objectives import UNITS
from layoutsearch.search.ranking import (
    RISK_WORDS,
    headroom_margins_kib,
    layout_risks,
    risk_band,
    risk_names,
    value_name,
)

BAR_WIDTH = 30


WIDE_COLUMNS = (
    200  # `--wide`, and whenever stdout is not a terminal (a file or a pipe has no width)
)
_layout = {"wide": False}


def set_wide(wide: bool) -> None:
    """Tables at WIDE_COLUMNS even on a terminal (`layoutsearch --wide ...`)."""
    _layout["wide"] = wide


def console() -> Console:
    """The terminal's width on a terminal (rich wraps long tables to it), WIDE_COLUMNS otherwise."""
    return Console(width=WIDE_COLUMNS) if _layout["wide"] or not sys.stdout.isatty() else Console()


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_fitted(
    out: Console,
    headers: list[str],
    rows: list[list[str]],
    drop_order: tuple[str, ...],
    left: tuple[str, ...] = (),
    title: str | None = None,
) -> None:
    """Print a table that fits ``out``'s width without breaking a word: a number (it has no
    space) stays whole, a text column wraps between its words. The columns of ``drop_order`` are
    left out in that order until it fits, and a line under the table names them; ``--wide``
    keeps every column. ``left``: the text columns, aligned left; the others are right-aligned."""
    keep = list(headers)
    widths = _widths(out.width, headers, rows, left)
    for name in drop_order:
        if _layout["wide"] or widths is not None:
            break
        keep.remove(name)
        cols = [headers.index(col) for col in keep]
        widths = _widths(out.width, keep, [[row[i] for i in cols] for row in rows], left)
    table = Table(title=title)
    for i, col in enumerate(keep):
        table.add_column(
            col,
            justify="left" if col in left else "right",
            overflow="fold",
            width=None if widths is None else widths[i],
        )
    for row in rows:
        table.add_row(*(cell for col, cell in zip(headers, row, strict=True) if col in keep))
    out.print(table)
    dropped = [col for col in headers if col not in keep]
    if dropped:
        out.print(
            f"left out to fit {out.width} columns: {', '.join(dropped)} "
            "(--wide shows them; --format json has every number)",
            markup=False,
            highlight=False,
        )


def _widths(
    columns: int, headers: list[str], rows: list[list[str]], left: tuple[str, ...]
) -> list[int] | None:
    """Content widths of the columns within ``columns`` (a cell's padding and the borders take
    three columns per table column, plus one), a text column narrowed first, never below its
    longest word; None when even the narrowest table is too wide."""
    words = lambda text: [len(w) for w in text.split()] or [0]  # noqa: E731
    full = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    least = [
        max(*words(h), *(max(words(r[i])) if h in left else len(r[i]) for r in rows))
        for i, h in enumerate(headers)
    ]
    room = columns - 3 * len(headers) - 1
    if sum(least) > room:
        return None
    widths = list(full)
    while sum(widths) > room:  # narrow the widest text column that can still give way
        i = max(
            (j for j, h in enumerate(headers) if widths[j] > least[j] and h in left),
            key=lambda j: widths[j],
            default=None,
        )
        if i is None:
            return None
        widths[i] -= 1
    return widths


def table_of_dicts(title: str, rows: list[dict], drop_order: tuple[str, ...] = ()) -> None:
    """Rows of the same keys as one table; columns of ``drop_order`` are left out in that order
    where the table would not fit the terminal (``print_fitted``)."""
    out = console()
    if not rows:
        out.print(f"{title}: none")
        return
    headers = [str(key) for key in rows[0]]
    left = tuple(str(k) for k, v in rows[0].items() if not isinstance(v, (int, float)))
    cells = [[_fmt(v) for v in row.values()] for row in rows]
    print_fitted(out, headers, cells, drop_order, left, title)


def bar(fraction: float) -> str:
    filled = min(int(round(fraction * BAR_WIDTH)), BAR_WIDTH)
    over = "!" if fraction > 1 else ""
    return "#" * filled + "." * (BAR_WIDTH - filled) + over


def _offload_text(est: Estimate) -> str:
    """The offloaded state on the host, its node total against the node's memory, and the offload's step parts."""
    mem, times = est.memory_bytes, est.time_s
    cap = mem["host_capacity_per_node"]
    parts = ", ".join(
        f"{name.split('/', 1)[1]} {value:.3f} s"
        for name, value in offload_seconds(est.problem, est.layout).items()
    )
    return (
        f"offload {est.layout.offload}: {mem['host_offloaded_state'] / GB:.1f} GB of state per device in host "
        f"memory; {mem['host_per_node'] / GB:.1f} GB per node of "
        + (f"{cap / GB:.0f} GB" if cap is not None else "an uncatalogued host memory")
        + f" | optimizer step {times['compute/optimizer']:.3f} s ({parts})"
    )


def layout_summary(est: Estimate) -> str:
    lay = est.layout
    degrees = layout_degrees(lay) or "single device"
    axes = placement_text(lay.placements)
    rep = params.kv_replication(est.model, lay.tp)
    return (
        f"{degrees} | ZeRO-{lay.zero_stage} | {lay.num_microbatches} microbatch(es) of "
        f"{lay.microbatch_seqs(est.workload):g} seq | recompute={lay.recompute}"
        + (f" | virtual stages {lay.virtual_stages}" if lay.virtual_stages > 1 else "")
        + (f" | schedule {_schedule_suffix(lay).strip()}" if _schedule_suffix(lay) else "")
        + (f" | offload={lay.offload}" if lay.offload != "none" else "")
        + _split_text(est)
        + (f" | KV heads replicated x{rep}" if rep > 1 else "")
        + f"\n  axes: {axes}"
    )


def _split_text(est: Estimate) -> str:
    """' | layers per stage 7/8/7 (embedding-and-loss)' for an uneven pipeline split, else ''."""
    split = stage_layers_record(est)
    if est.layout.pp == 1 or split["split"] == "even":
        return ""
    return (
        f" | layers per stage {split['first']}/{split['middle']}/{split['last']} ({split['split']})"
    )


def assumptions(workload, model) -> str:
    """The workload choices every report names: framework profile, precision, TP overlap (and the MoE dispatch and,
    dropless, routing)."""
    return (
        f"{workload.precision}"
        + (f" ({workload.fp8_recipe} scaling)" if workload.fp8_recipe else "")
        + f", {workload.framework} overlap"
        + (", eager (no torch.compile)" if workload.torch_compile is False else "")
        + (" + TP comm overlap" if workload.tp_comm_overlap else "")
        + (" + EP comm overlap" if workload.ep_comm_overlap else "")
        + (" + DeepEP dispatch" if model.moe is not None and workload.deepep else "")
        + (
            f", {workload.routing} routing"
            if model.moe is not None and model.moe.capacity_factor is None
            else ""
        )
        + _attention_text(workload)
        + (", blocking launches" if workload.launch_blocking else "")
        + (f", CUDA graphs {workload.cuda_graphs}" if workload.cuda_graphs != "none" else "")
    )


def _attention_text(workload) -> str:
    """The attention kernel, where the workload overrides its profile's (``--vendor-attention``,
    ``--triton-attention``)."""
    if workload.triton_attention:
        return ", MPT's Triton attention"
    if (
        workload.vendor_attention is None
        or workload.vendor_attention == profile_of(workload.framework).vendor_attention
    ):
        return ""
    return (
        ", vendor fused attention"
        if workload.vendor_attention
        else ", FlashAttention-2 class attention"
    )


def estimate_report(
    model_name: str,
    cluster_name: str,
    est: Estimate,
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> None:
    out = console()
    cap = est.memory_bytes["capacity"]
    out.print(
        f"[bold]{model_name}[/bold] on [bold]{cluster_name}[/bold] ({est.cluster.num_devices} devices), "
        f"{est.workload.global_batch_seqs} x {est.workload.seq_len} tokens per step, {assumptions(est.workload, est.model)}"
    )
    out.print("  " + layout_summary(est))
    mem = Table(
        title=f"memory per device (stage {est.worst_stage}), capacity {cap / GB:.1f} GB "
        f"(HBM {est.memory_bytes['hbm'] / GB:.1f} GB less runtime reserve)"
    )
    for col in ("moment", "GB", "of capacity", ""):
        mem.add_column(col, justify="right" if col in ("GB", "of capacity") else "left")
    for name, items in est.memory_moments.items():
        total = sum(items.values())
        mem.add_row(name, f"{total / GB:.2f}", f"{total / cap:.0%}", bar(total / cap))
    out.print(mem)
    parts = Table(title=f"live arrays at the peak ({est.peak_moment})")
    parts.add_column("array")
    parts.add_column("GB", justify="right")
    for key, value in est.memory_moments[est.peak_moment].items():
        parts.add_row(key, f"{value / GB:.3f}")
    out.print(parts)
    times = Table(title="time per step by component")
    times.add_column("component")
    times.add_column("seconds", justify="right")
    times.add_column("share", justify="right")
    step = est.step_time_s
    for key, value in est.time_s.items():
        if "/" in key and value > 0:
            times.add_row(key, f"{value:.4f}", f"{value / step:.1%}")
    for key in ("compute", "exposed_comm", "bubble", "overhead", "step"):
        times.add_row(
            f"[bold]{key}[/bold]", f"{est.time_s[key]:.4f}", f"{est.time_s[key] / step:.1%}"
        )
    out.print(times)
    out.print(
        f"MFU {est.mfu:.1%} ({est.mfu_convention} FLOPs) | {est.tokens_per_s:,.0f} tokens/s | "
        f"{est.tokens_per_s / est.cluster.num_devices:,.1f} tokens/s/device | "
        f"fits: {'yes' if est.fits else 'NO'}"
    )
    if est.layout.offload != "none":
        out.print(_offload_text(est))
    elif est.memory_bytes["host_offloaded"]:
        out.print(
            f"host memory per device for offloaded activations: {est.memory_bytes['host_offloaded'] / GB:.1f} GB "
            f"(not checked against the host's RAM)"
        )
    plan = planning.estimate_plan(est, price_per_device_hour, resilience)
    if est.workload.training_tokens and plan["train_days"] is None:
        out.print(f"goodput {plan['goodput']:.1%}: failures stop the job before it finishes")
    elif est.workload.training_tokens:
        out.print(
            f"{plan['train_days']:.1f} days for {est.workload.training_tokens:.3g} tokens at "
            f"goodput {plan['goodput']:.1%} | "
            f"{plan['device_hours']:,.0f} device-hours"
            + _cost_text(plan["cost"], price_per_device_hour)
        )


def _cost_text(cost: float | None, price_per_device_hour: float | None) -> str:
    return (
        "" if cost is None else f" | cost {cost:,.0f} at {price_per_device_hour:g} per device-hour"
    )


def _gb(x: float) -> str:
    return f"{x / GB:.1f}"


def solve_report(
    model_name: str,
    cluster_name: str,
    result,
    explanation: dict | None,
    price_per_device_hour: float | None = None,
    resilience: Resilience | None = None,
) -> None:
    """The top layouts as a table, then the solver's status and proof."""
    out = console()
    space = result.space
    out.print(
        f"[bold]{model_name}[/bold] on [bold]{cluster_name}[/bold] ({space.cluster.num_devices} devices), "
        f"{space.workload.global_batch_seqs} x {space.workload.seq_len} tokens per step, "
        f"{assumptions(space.workload, space.model)}, objective {result.objective}"
    )
    if result.layouts:
        rows = [_solve_row(rank, est) for rank, est in enumerate(result.layouts, start=1)]
        print_fitted(out, list(SOLVE_COLUMNS), rows, SOLVE_DROP_ORDER, SOLVE_TEXT)
        low, high = band_of(result.layouts[0])
        risk = risk_band(result.layouts[0].problem)
        out.print(
            f"ranking: within {risk:.0%} of the least {value_name(result.objective)} the layout "
            f"with the fewest risks ({', '.join(RISK_WORDS)}; the first weighing most) ranks first, and "
            f"{value_name(result.objective, True)} within "
            f"{result.tie_tolerance:.1%} are "
            f"ties, won by the simplest "
            f"layout; band s: the model's uncertainty, {low * 100:+.0f}%..{high * 100:+.0f}% of the step time "
            f"on {result.layouts[0].cluster.accelerator.kind.upper()}s"
            + (" for MoE models" if result.layouts[0].problem.model.moe is not None else "")
            + _uncalibrated_note(result.layouts[0]),
            markup=False,
            highlight=False,
        )
        # layout 1 beyond the ties of the least step time: search.solve costed the layout at it
        if result.least is not None:
            least, first = result.objective_value, result.layouts[0]
            out.print(
                f"the least step time ({least:.4f} s) belongs to {_least_text(result.least, first)}; "
                f"layout 1 is {first.step_time_s / least - 1:.1%} slower, inside the risk band",
                markup=False,
                highlight=False,
            )
        carried = layout_risks(result.layouts[0])
        if carried and result.objective != "gather-volume":
            memory = result.layouts[0].memory_bytes
            free_gib = math.ceil(
                max(headroom_margins_kib(int(memory["capacity"] // KIB))) * KIB / GIB
            )
            out.print(
                f"layout 1 carries {len(carried)} risk(s): {'; '.join(carried)}; every layout "
                f"within {risk_band(result.layouts[0].problem):.0%} of the least "
                f"{value_name(result.objective)} carries these "
                "or heavier ones"
                + (
                    f" (--memory-margin-gib {free_gib} searches those that leave {free_gib} GiB free)"
                    if set(carried) & set(risk_names()[:2])
                    else ""
                ),
                markup=False,
                highlight=False,
            )
        hosted = [
            (rank, est.memory_bytes["host_offloaded"])
            for rank, est in enumerate(result.layouts, start=1)
            if est.memory_bytes["host_offloaded"]
        ]
        if hosted:
            out.print(
                "host memory per device for offloaded activations: "
                + ", ".join(f"#{rank} {b / GB:.1f} GB" for rank, b in hosted)
                + " (not checked against the host's RAM)",
                markup=False,
                highlight=False,
            )
        plan_report(result.layouts, price_per_device_hour, resilience)
    out.print(status_line(result))
    if explanation:
        out.print(f"[bold red]{explanation['message']}[/bold red]")


# The solve table's columns, and the order in which a narrow terminal leaves them out: the
# uncertainty band, the KV replication, the step time's parts, the recompute policy, the axes,
# the memory and tokens/s; rank, degrees, ZeRO, microbatches, step time and MFU always stay.
SOLVE_COLUMNS = (
    "#",
    "degrees",
    "axes",
    "ZeRO",
    "K x seqs",
    "remat",
    "KV rep",
    "peak/cap GB",
    "compute s",
    "comm s",
    "bubble s",
    "step s",
    "band s",
    "MFU",
    "tokens/s",
)
SOLVE_DROP_ORDER = (
    "band s",
    "KV rep",
    "bubble s",
    "compute s",
    "comm s",
    "remat",
    "axes",
    "peak/cap GB",
    "tokens/s",
)
SOLVE_TEXT = ("degrees", "axes", "remat")


def _schedule_suffix(lay) -> str:
    """The pipeline schedule where it is not the plain one its chunk count implies (1F1B with one chunk a
    device, interleaved 1F1B with more): without it, two rows differing only in schedule read alike."""
    plain = "interleaved" if lay.virtual_stages > 1 else "1f1b"
    return "" if lay.pp == 1 or lay.schedule == plain else f" {lay.schedule}"


def _least_text(est: Estimate, first: Estimate) -> str:
    """The layout at the least step time that the risk order ranked below layout 1 (``first``), and the risks it
    carries that layout 1 does not."""
    lay = est.layout
    what = (
        f"{layout_degrees(lay) or 'one device'} (ZeRO-{lay.zero_stage}, "
        f"{lay.num_microbatches} x {lay.microbatch_seqs(est.workload):g}, {lay.recompute})"
    )
    avoided = set(layout_risks(first))
    risks = [name for name in layout_risks(est) if name not in avoided]
    return f"{what}, which carries {'risks' if len(risks) > 1 else 'a risk'} layout 1 avoids" + (
        f" ({'; '.join(risks)})" if risks else ""
    )


def _solve_row(rank: int, est: Estimate) -> list[str]:
    """One layout's cells, in SOLVE_COLUMNS order."""
    lay = est.layout
    return [
        str(rank),
        layout_degrees(lay) or "1",
        placement_text(lay.placements),
        str(lay.zero_stage),
        f"{lay.num_microbatches} x {lay.microbatch_seqs(est.workload):g}"
        + (f" v{lay.virtual_stages}" if lay.virtual_stages > 1 else "")
        + _schedule_suffix(lay),
        lay.recompute + (f" +offload {lay.offload}" if lay.offload != "none" else ""),
        str(params.kv_replication(est.model, lay.tp)),
        f"{_gb(est.memory_bytes['peak'])} / {_gb(est.memory_bytes['capacity'])}",
        f"{est.time_s['compute']:.3f}",
        f"{est.time_s['exposed_comm']:.3f}",
        f"{est.time_s['bubble']:.3f}",
        f"{est.step_time_s:.3f}",
        _band_text(est),
        f"{est.mfu:.1%}",
        f"{est.tokens_per_s:,.0f}",
    ]


def _uncalibrated_note(est: Estimate) -> str:
    """The legend's words when the band is the uncalibrated one (the part's compute fractions borrowed)."""
    acc = est.cluster.accelerator
    if calibrated(est):
        return ""
    if acc.calibrated_for(est.problem.model.moe is not None):
        return ", the uncalibrated band: no fp4 training run is among the measured runs (core.problem.warn_fp4)"
    if acc.calibrated:
        return (
            f", the uncalibrated band: {acc.id}'s compute fractions are fitted on mixture-of-experts runs only "
            "(docs/calibration.md#blackwell-b200-gb200)"
        )
    return (
        f", the uncalibrated band: {acc.id}'s compute fractions are borrowed from another part's fit "
        "(error measured by leaving one accelerator family out)"
    )


def _band_text(est: Estimate) -> str:
    low, high = band_of(est)
    return f"{est.step_time_s * (1 + low):.3f}-{est.step_time_s * (1 + high):.3f}"


def plan_report(
    estimates: list[Estimate],
    price_per_device_hour: float | None,
    resilience: Resilience | None = None,
) -> None:
    """Days, device-hours and cost of each layout to train the workload's tokens (nothing without them)."""
    tokens = estimates[0].workload.training_tokens if estimates else None
    if tokens is None:
        return
    out = console()
    out.print(
        f"time to train {tokens:.3g} tokens"
        + (
            ""
            if price_per_device_hour is None
            else f" at {price_per_device_hour:g} per device-hour"
        )
    )
    table = Table()
    for col in ("#", "tokens/s", "goodput", "days", "device-hours", "cost"):
        table.add_column(col, justify="right")
    for rank, est in enumerate(estimates, start=1):
        plan = planning.estimate_plan(est, price_per_device_hour, resilience)
        table.add_row(
            str(rank),
            f"{est.tokens_per_s:,.0f}",
            f"{plan['goodput']:.1%}",
            *(
                "-" if plan[key] is None else f"{plan[key]:,.{digits}f}"
                for key, digits in (("train_days", 1), ("device_hours", 0), ("cost", 0))
            ),
        )
    out.print(table)


WHAT_IF_COLUMNS = (
    "hardware",
    "degrees",
    "axes",
    "ZeRO, K, remat",
    "peak/cap GB",
    "step s",
    "MFU",
    "tokens/s",
)
WHAT_IF_DROP_ORDER = ("axes", "ZeRO, K, remat", "peak/cap GB", "tokens/s")


def _winner_row(label: str, est: Estimate | None, status: str | None) -> list[str]:
    if est is None:
        return [label, f"no layout ({status})", "", "", "", "", "", ""]
    lay = est.layout
    return [
        label,
        layout_degrees(lay) or "1",
        placement_text(lay.placements),
        f"ZeRO-{lay.zero_stage} K={lay.num_microbatches} {lay.recompute}",
        f"{_gb(est.memory_bytes['peak'])} / {_gb(est.memory_bytes['capacity'])}",
        f"{est.step_time_s:.4f}",
        f"{est.mfu:.1%}",
        f"{est.tokens_per_s:,.0f}",
    ]


def what_if_report(
    doc: dict, base: Estimate | None, other: Estimate | None, base_status: str | None
) -> None:
    """The base winner against the winner on the scaled hardware (a `what_if` object, output.py)."""
    factors = ", ".join(f"{k} x{v:g}" for k, v in doc["factors"].items())
    out = console()
    out.print(f"what if {factors} ({doc['method']})")
    rows = [
        _winner_row("base", base, base_status),
        _winner_row("what-if", other, doc["status"]),
    ]
    print_fitted(out, list(WHAT_IF_COLUMNS), rows, WHAT_IF_DROP_ORDER, WHAT_IF_COLUMNS[:4])
    out.print(what_if_line(doc))


def what_if_line(doc: dict) -> str:
    """One line: the step-time change and whether the winner changed."""
    change = doc["step_time_rel_change"]
    if doc["step_time_s"] is None:
        return f"what-if: no layout on the scaled hardware ({doc['status']})"
    if change is None:
        return f"what-if: no layout on the base hardware; on the scaled hardware the winner takes {doc['step_time_s']:.4f} s"
    winner = (
        "the same layout"
        if doc["same_layout"]
        else "another layout"
        + (
            ""
            if doc["base_layout_step_time_s"] is None
            else f" (the base layout would take {doc['base_layout_step_time_s']:.4f} s"
            + ("" if doc["base_layout_fits"] else ", and no longer fits")
            + ")"
        )
    )
    return f"what-if: step {doc['base_step_time_s']:.4f} s -> {doc['step_time_s']:.4f} s ({change:+.2%}) with {winner}"


def sensitivity_report(sensitivity: dict[str, float], est: Estimate, factor: float) -> None:
    """How layout 1's step time moves when each hardware number alone is scaled (layout fixed)."""
    out = console()
    out.print(
        f"sensitivity of layout 1's step time ({est.step_time_s:.4f} s) to each hardware number x{factor:g}, "
        f"layout fixed"
    )
    table = Table()
    for col in ("key", "number", f"step s at x{factor:g}", "change"):
        table.add_column(col, justify="left" if col in ("key", "number") else "right")
    for key, change in sensitivity.items():
        table.add_row(
            key,
            planning.WHAT_IF_DESCRIPTIONS[key],
            f"{est.step_time_s * (1 + change):.4f}",
            f"{change:+.2%}",
        )
    out.print(table)


def status_line(result) -> str:
    unit = {"bytes": "B"}.get(UNITS[result.objective], UNITS[result.objective])
    value = "-" if result.objective_value is None else f"{result.objective_value:.6g} {unit}"
    bound = "-" if result.bound is None else f"{result.bound:.6g} {unit}"
    if result.status == "OPTIMAL":
        proof = f"OPTIMAL (bound {bound} = objective)"
    elif result.status == "INFEASIBLE":
        proof = "INFEASIBLE (no candidate fits)"
    else:
        why = (
            "the least step time is proven, not that layout 1 is the simplest of its ties"
            if result.layouts and result.ranking_status != "OPTIMAL" and not result.gap
            else "not proven optimal"
        )
        proof = (
            f"{result.status} (objective {value}, bound {bound}, gap {result.gap or 0:.2%}: "
            f"{why} within the time limit)"
        )
    rows = (
        f"{result.rows_kept:,} (shape, K) row(s) left for CP-SAT by the bounds"
        if result.method == "cpsat"
        else f"every one of {result.rows_kept:,} (shape, K) rows costed"
    )
    return (
        f"solver {result.method}: {proof} | {result.num_candidates:,} candidates ({rows}) | "
        f"wall {result.wall_s:.2f} s"
    )


def explain_report(result, explanation: dict | None) -> None:
    """Why the winner wins (term by term), or the infeasibility funnel (after ``solve_report``
    of the same result without its explanation)."""
    out = console()
    if result.layouts and explanation:
        for i, rows in enumerate(explanation["versus"], start=2):
            table = Table(
                title=f"layout 1 against layout {i}: where they differ (positive = layout {i} pays more)"
            )
            for col in ("term", "layout 1", f"layout {i}", "difference"):
                table.add_column(col, justify="left" if col == "term" else "right")
            for row in rows:
                fmt = (
                    (lambda x: f"{x:.4f} s")
                    if row["unit"] == "s"
                    else (lambda x: f"{x / GB:.2f} GB")
                )
                table.add_row(
                    row["term"], fmt(row["winner"]), fmt(row["other"]), fmt(row["difference"])
                )
            if rows:
                out.print(table)
            else:
                out.print(
                    f"layouts 1 and {i} cost the same in every term (time and memory): a tie, ranked by simplicity"
                )
            notes = {n["layout"]: n for n in explanation.get("ranking") or ()}
            if i in notes:
                band = tuple(explanation["comparison_rel_band"])
                out.print(
                    ranking_line(
                        notes[i],
                        explanation["tie_tolerance"],
                        band,
                        risk_band(result.layouts[0].problem),
                    ),
                    markup=False,
                    highlight=False,
                )
            else:
                first, other = result.layouts[0], result.layouts[i - 1]
                diff = other.step_time_s - first.step_time_s
                out.print(
                    f"layout 1 is faster by {diff:.4f} s per step ({diff / other.step_time_s:.2%})"
                )
        if explanation.get("slice_wait"):
            out.print(slice_wait_line(explanation["slice_wait"]), markup=False, highlight=False)
        if explanation.get("versus_layout"):
            out.print(
                versus_line(
                    explanation["versus_layout"],
                    explanation["comparison_rel_band"],
                    risk_band(result.layouts[0].problem),
                ),
                markup=False,
                highlight=False,
            )
        return
    if explanation:
        table = Table(title="what removes the candidates")
        for col in ("rule", "removed", "remaining"):
            table.add_column(col, justify="left" if col == "rule" else "right")
        for row in explanation["funnel"]:
            table.add_row(row["rule"], f"{row['removed']:,}", f"{row['remaining']:,}")
        out.print(table)
        out.print(f"[bold red]{explanation['message']}[/bold red]")


def _pct(x, signed=False) -> str:
    return "-" if x is None else (f"{x:+.1%}" if signed else f"{x:.1%}")


def validation_report(doc: dict) -> None:
    """Summary, groups and the worst misses of `layoutsearch validate`."""
    out = console()
    s = doc["summary"]
    for warning in s.get("warnings") or ():
        out.print(f"warning: {warning}", markup=False, highlight=False)
    if not s["count"]:
        out.print(
            f"[bold]0 records evaluated, {s['skipped']} skipped[/bold]: no record could be evaluated"
        )
    else:
        out.print(
            f"[bold]{s['count']} records evaluated, {s['skipped']} skipped[/bold]: median |error| "
            f"{_pct(s['median_abs_rel_error'])}, p90 {_pct(s['p90_abs_rel_error'])}, signed median "
            f"{_pct(s['median_rel_error'], True)} (+ = predicted too fast), "
            f"fit accuracy {_pct(s['fit_accuracy'])} ("
            f"{len(s['fit_errors']['predicted_oom_but_ran'])} predicted out of memory but ran, "
            f"{len(s['fit_errors']['predicted_fits_but_oom'])} predicted to fit but ran out)"
        )
    if s.get("median_claimed_speedup") is not None:
        out.print(
            f"the engine's winner over each published layout: median claimed speed-up "
            f"{s['median_claimed_speedup']:.2f}x, {_pct(s['claims_distinguishable_share'])} outside "
            "the model's uncertainty (results/claims.md splits the claims by cause)"
        )
    by_title = [("accelerator", s["by_accelerator"]), ("source", s["by_source"])]
    if set(s["by_power_limit"]) != {"uncapped"}:  # a table only where some record is capped
        by_title.append(("power limit", s["by_power_limit"]))
    for title, groups in by_title:
        table = Table(title=f"by {title}")
        for col in (title, "evaluated", "median |err|", "p90 |err|", "median signed", "skipped"):
            table.add_column(col, justify="left" if col == title else "right")
        for name, g in groups.items():
            table.add_row(
                "(not stated)" if name is None else str(name),  # a record without the field
                str(g["count"]),
                _pct(g["median_abs_rel_error"]),
                _pct(g["p90_abs_rel_error"]),
                _pct(g["median_rel_error"], True),
                str(g["skipped"]),
            )
        out.print(table)
    if s["worst"]:
        out.print("[bold]worst 5[/bold]")
    for w in s["worst"]:
        out.print(f"  {w['id']}: {_pct(w['rel_error'], True)}: {w['reason']}")
    if s.get("bloom_sweep_spearman") is not None:
        out.print(f"BLOOM layout sweep: Spearman rho {s['bloom_sweep_spearman']:.2f}")
    skipped = [r for r in doc["records"] if r.get("skipped_reason")]
    for r in skipped:
        out.print(f"  skipped {r['id']}: {r['skipped_reason']}", markup=False, highlight=False)


def calibration_report(result: dict, loss: str = "squares") -> None:
    """Before/after errors and the fitted values per accelerator."""
    how = "least squares" if loss == "squares" else "Huber loss"
    table = Table(title=f"calibration ({how} on log(predicted / measured))")
    for col in (
        "accelerator",
        "records",
        "median before -> after",
        "p90 before -> after",
        "fitted",
        "at a bound",
    ):
        table.add_column(col)
    for acc, fit in result.items():
        if not fit.get("fitted"):
            table.add_row(acc, str(fit.get("records", 0)), "-", "-", "no usable records", "-")
            continue
        table.add_row(
            acc,
            str(fit["records"]),
            f"{_pct(fit['before']['median_abs_rel_error'])} -> {_pct(fit['after']['median_abs_rel_error'])}",
            f"{_pct(fit['before']['p90_abs_rel_error'])} -> {_pct(fit['after']['p90_abs_rel_error'])}",
            ", ".join(f"{k} {v:.3g}" for k, v in fit["fitted"].items()),
            ", ".join(fit["at_bound"]) or "-",
        )
    console().print(table)


def against_best_line(versus: dict) -> str:
    """One sentence on the search's best layout held against the estimated one (``engine.against_best``)."""
    if versus["layout"] is None:
        return "against the best layout: nothing fits this problem in the search"
    best = versus["layout"]
    degrees = ",".join(f"{k}={v}" for k, v in best["degrees"].items() if v > 1) or "all degrees 1"
    text = (
        f"against the best layout ({degrees}, {versus['winner_step_time_s']:.3f} s per step; this one "
        f"{versus['step_time_s']:.3f} s)"
    )
    if versus["verdict"] == "not slower":
        why = (
            f", carrying a risk the best does not ({versus['safer_by']})"
            if versus["safer_by"]
            else ""
        )
        return text + f": this layout is as fast or faster{why}"
    low, high = versus["comparison_rel_band"]
    bands = f"80% bands {low * 100:+.0f}%..{high * 100:+.0f}% of each prediction"
    if versus["verdict"] == "distinguishable":
        return (
            text
            + f": the best claims {versus['speedup']:.3f}x, beyond the model's uncertainty ({bands} do not overlap)"
        )
    return (
        text
        + f": the best claims {versus['speedup']:.3f}x: NOT DISTINGUISHABLE, within the model's uncertainty "
        f"({bands} overlap)"
    )


def versus_line(versus: dict, band: list[float], risk: float) -> str:
    """One sentence on the winner against the given layout (``engine._versus``)."""
    given = ",".join(f"{k}={v}" for k, v in versus["degrees"].items() if v > 1) or "all degrees 1"
    reading = ""
    if versus.get("dp_read_as") == "fsdp":
        replicated = versus.get("replicated_step_time_s")
        reading = (
            f"; the dp={versus['degrees']['fsdp']} given read as sharding the optimizer state over it, as ZeRO "
            "and distributed optimizers do: "
            + (
                "replicated, no completion fits"
                if replicated is None
                else f"replicated, its best takes {replicated:.3f} s"
            )
        )
    if versus["verdict"] == "infeasible":
        return f"against {given}: no completion of those degrees fits or passes the rules"
    speedup, verdict = versus["speedup"], versus["verdict"]
    near, fitting = versus.get("within_memory_error"), versus["layout"]
    over = ""
    if near is not None:
        mem = near["memory_bytes"]
        best_fit = (
            f"the best predicted to fit takes {fitting['time_s']['step']:.3f} s"
            if fitting is not None and not near["fits"]
            else f"the completion the ranking puts first takes {fitting['time_s']['step']:.3f} s"
            if fitting is not None
            else "no completion is predicted to fit"
        )
        room = (
            "within what the memory model over-predicts measured peaks, so it may run"
            if not near["fits"]
            else f"{(mem['capacity'] - mem['peak']) / 1e9:.1f} GB of headroom, which the ranking counts as a risk"
        )
        over = (
            f", predicted at {mem['peak'] / 1e9:.1f} GB of {mem['capacity'] / 1e9:.1f} GB usable, {room}; "
            f"{best_fit}"
        )
    text = (
        f"against {given} at its best ({versus['step_time_s']:.3f} s per step{over}{reading}): layout 1 claims "
        f"{speedup:.3f}x"
    )
    if verdict == "not slower":
        held = near if near is not None else fitting
        if held is not None and not held["fits"]:
            return text + ": no speed-up; that completion is predicted over the usable memory"
        if versus.get("safer_by"):
            return (
                text + f": no speed-up; that completion carries a risk layout 1 does not "
                f"({versus['safer_by']}), and inside the {risk:.0%} risk band the lower-risk layout "
                "ranks first"
            )
        return text + ": no speed-up; layout 1 ranks first only by simplicity"
    bands = f"80% bands {band[0] * 100:+.0f}%..{band[1] * 100:+.0f}% of each prediction"
    if verdict == "distinguishable":
        return text + f", beyond the model's uncertainty ({bands} do not overlap)"
    return text + f": NOT DISTINGUISHABLE, within the model's uncertainty ({bands} overlap)"


# (label, layout record key, format) of the plan page's numbers; a null shows as '-'
PLAN_LINES = tuple(
    tuple(line.split("|"))
    for line in """step time|step_time_s|{:.3f} s
tokens/s|tokens_per_s|{:,.0f}
MFU|mfu|{:.1%}
goodput|goodput|{:.1%}
checkpoint every|checkpoint_interval_s|{:,.0f} s
checkpoint blocks|checkpoint_time_s|{:.1f} s
job MTBF|job_mtbf_h|{:.2f} h
days|train_days|{:,.1f}
device-hours|device_hours|{:,.0f}
cost|cost|{:,.0f}
energy|energy_kwh|{:,.0f} kWh
energy cost|energy_cost|{:,.0f}""".splitlines()
)
FALLBACK_COLUMNS: tuple[str, ...] = (
    *("lost", "family", "cluster", "idle", "batch", "layout", "tokens/s", "loss"),
    "reshard s",
)


def plan_lines(record: dict) -> list[tuple[str, str]]:
    """The plan page's (label, value) pairs of a layout record."""
    values = {**record, "step_time_s": record["time_s"]["step"]}
    return [
        (label, "-" if values.get(key) is None else fmt.format(values[key]))
        for label, key, fmt in PLAN_LINES
    ]


def placement_text(placements) -> str:
    """'tp:z8; fsdp:z4*y16*x16' of a layout's placements (degree, ((axis, factor), ...)): the form the tables print
    and ``--axes`` reads (``core.parse.parse_axes``)."""
    return "; ".join(f"{n}:" + "*".join(f"{a}{f}" for a, f in p) for n, p in placements)


def layout_degrees(lay) -> str:
    """'tp=8, cp=4 a2a' of a Layout: the degrees above 1, cp with its flavour."""
    return ", ".join(
        f"{k}={v}" + (f" {lay.cp_flavour}" if k == "cp" else "")
        for k, v in lay.all_degrees.items()
        if v > 1
    )


def degrees_text(record: dict) -> str:
    """'fsdp=128,tp=8,pp=16' of a layout record (the degrees above 1)."""
    return ",".join(f"{k}={v}" for k, v in record["degrees"].items() if v > 1) or "single device"


def fallback_cells(entry: dict) -> list[str]:
    """One fallback record as the plan page's cells (FALLBACK_COLUMNS)."""
    rec = entry["layout"]
    loss = entry["throughput_loss"]
    return [
        str(entry["nodes_lost"]),
        entry["family"],
        entry["cluster"] or "-",
        str(entry["nodes_idle"]),
        f"{entry['global_batch_seqs']:,}" + ("*" if entry["batch_changed"] else ""),
        degrees_text(rec) if rec else entry["status"],
        f"{rec['tokens_per_s']:,.0f}" if rec else "-",
        "-" if loss is None else f"{loss:.1%}",
        f"{entry['reshard_s']:,.0f}" if rec else "-",
    ]


# the footnote of a fallback row whose batch is not the healthy one (report.fallback's rule)
BATCH_CHANGED_NOTE = (
    "* a global batch the fallback's data-parallel degree divides: the nearest, or the largest up to the "
    "healthy one whose microbatches divide by the pipeline's stages, where that runs faster"
)


def plan_markdown(document: dict) -> str:
    """The plan page as Markdown a person can paste into a design document."""
    prob, rec = document["problem"], document["layout"]
    lines = [
        f"# Plan: {prob['model']} on {prob['cluster']} ({prob['num_devices']:,} devices)",
        "",
        f"Global batch {prob['global_batch_seqs']:,} x {prob['seq_len']:,} tokens; "
        f"solver {document['solver']['status']} in {document['solver']['wall_s']:.1f} s.",
        "",
    ]
    if rec is None:
        return "\n".join([*lines, "No feasible layout.", ""])
    lines += [f"**Layout:** {degrees_text(rec)}, ZeRO-{rec['zero_stage']}, "]
    lines[-1] += f"{rec['num_microbatches']} microbatches, recompute {rec['recompute']}"
    lines += ["", "| | |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in plan_lines(rec)]
    if document["fallback"]:
        lines += ["", "## Fallback layouts", ""]
        lines += ["| " + " | ".join(FALLBACK_COLUMNS) + " |", "|---" * len(FALLBACK_COLUMNS) + "|"]
        lines += ["| " + " | ".join(fallback_cells(e)) + " |" for e in document["fallback"]]
        if any(e["batch_changed"] for e in document["fallback"]):
            lines += [
                "",
                "\\" + BATCH_CHANGED_NOTE,
            ]
    return "\n".join([*lines, ""])


def plan_page(document: dict, winners: list[Estimate]) -> None:
    """The plan page on the terminal: the layout, its numbers and the fallback table."""
    out = console()
    rec = document["layout"]
    if rec is None:
        return
    out.print(f"{document['problem']['model']} on {document['problem']['cluster']}")
    out.print(layout_summary(winners[0]))
    table = Table(show_header=False)
    table.add_column("", justify="left")
    table.add_column("", justify="right")
    for label, value in plan_lines(rec):
        table.add_row(label, value)
    out.print(table)
    fallback_report(document["fallback"], rec["tokens_per_s"])


def fallback_report(entries: list[dict], healthy_tokens_per_s: float) -> None:
    """The fallback table of the solve document's ``fallback`` records (``report.fallback``):
    per lost-node count and family, the cluster it runs on, the batch, the layout, its
    throughput loss and the one-time resharding."""
    if not entries:
        return
    table = Table(title=f"fallback layouts (healthy: {healthy_tokens_per_s:,.0f} tokens/s)")
    for col in FALLBACK_COLUMNS:
        table.add_column(col, justify="left" if col in ("family", "cluster", "layout") else "right")
    for entry in entries:
        table.add_row(*fallback_cells(entry))
    console().print(table)
    if any(entry["batch_changed"] for entry in entries):
        console().print(BATCH_CHANGED_NOTE)
