"""Plot a sweep file: MFU and step time against device count, and the chosen degrees.

One line per (model, batch size); colour is the batch size, line style the model. Points with
no layout (infeasible, time limit, bad cluster) break the lines and are marked with an x along
the bottom of the MFU panel, labelled by their status, never drawn as an MFU of 0. The title
names the models, accelerators, batch sizes and sequence lengths. Reads Parquet or CSV (``layoutsearch.sweep.read_table``); matplotlib, Agg backend.
"""

from __future__ import annotations

import io as bytesio
import math
import os
from typing import Any

from layoutsearch.core import io
from layoutsearch.core.errors import InvalidArgumentError, LayoutsearchError, missing_extra
from layoutsearch.sweep.table import read_table

DEGREES = ("dp", "fsdp", "tp", "pp", "cp", "ep")
# Hollow markers of decreasing size, so degrees that coincide (often dp = pp = 1) stay visible.
DEGREE_STYLE = {
    "dp": ("tab:blue", "o", 8),
    "fsdp": ("tab:orange", "s", 6.5),
    "tp": ("tab:green", "^", 5.5),
    "pp": ("tab:red", "v", 4.5),
    "cp": ("tab:purple", "D", 3),
    "ep": ("tab:brown", "P", 2.5),
}
LINE_STYLES = ("-", "--", ":", "-.")
MAX_DEGREE_PANELS = 16


def _series(rows: list[dict]) -> dict[tuple[str, int, int], list[dict]]:
    """Rows grouped by (model, seq_len, batch), each sorted by device count; rows without a device count dropped."""
    groups: dict[tuple[str, int, int], list[dict]] = {}
    for row in rows:
        if row.get("num_devices") is not None:
            groups.setdefault((row["model"], row["seq_len"], row["global_batch_seqs"]), []).append(
                row
            )
    return {
        key: sorted(group, key=lambda r: r["num_devices"]) for key, group in sorted(groups.items())
    }


def _label(key: tuple[str, int, int], models: set, lengths: set) -> str:
    model, seq_len, seqs = key
    parts = (
        ([model] if len(models) > 1 else [])
        + [f"{seqs} seqs"]
        + ([f"x {seq_len}"] if len(lengths) > 1 else [])
    )
    return " ".join(parts)


def _accelerator(cluster: str) -> str:
    """The accelerator of a cluster name (``h100-1024``: h100), else the cluster name itself."""
    from layoutsearch.core.topology import parse_cluster_name

    try:
        return parse_cluster_name(cluster)[0].id
    except (LayoutsearchError, ValueError, KeyError):
        return cluster


def title_of(rows: list[dict], path: str) -> str:
    """What the sweep holds: models, accelerators, batch sizes and sequence lengths, and its file."""
    listed = lambda values: ", ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in values)  # noqa: E731
    models = sorted({r["model"] for r in rows})
    accelerators = sorted({_accelerator(str(r["cluster"])) for r in rows})
    batches = sorted({r["global_batch_seqs"] for r in rows})
    lengths = sorted({r["seq_len"] for r in rows})
    return (
        f"{listed(models)} on {listed(accelerators)}: batch {listed(batches)} seqs "
        f"x {listed(lengths)} tokens ({os.path.basename(path)})"
    )


def _device_axis(ax, devices: list[int]) -> None:
    """Log-2 device axis with a tick per device count; labels too close to the previous one are left out."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices)
    labels, last = [], None
    for d in devices:
        keep = last is None or math.log2(d / last) >= 0.35
        labels.append(f"{d:,}" if keep else "")
        last = d if keep else last
    ax.set_xticklabels(labels, rotation=45, fontsize=7)
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def plot_sweep(path: str | os.PathLike, out_png: str | os.PathLike) -> str:
    """Write the sweep plot as a PNG; returns its path."""
    try:
        import matplotlib
    except ImportError:
        raise missing_extra("plot", "plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path, out_png = os.fspath(path), os.fspath(out_png)
    if not path.endswith((".parquet", ".csv")):
        raise InvalidArgumentError(f"SWEEP_FILE: '{path}' must end in .parquet or .csv")
    if os.path.isdir(out_png):
        raise InvalidArgumentError(io.says(out_png, "--output", "a directory, not a file"))
    fig = sweep_figure(read_table(path, "SWEEP_FILE"), path)
    png = bytesio.BytesIO()
    fig.savefig(png, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    io.atomic_write(out_png, png.getvalue(), "--output")
    return out_png


def sweep_figure(rows: list[dict], path: str):
    """The matplotlib figure of a sweep's rows (read from ``path``, which the title names)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    groups = _series(rows)
    if not groups:
        raise InvalidArgumentError(f"SWEEP_FILE: '{path}' has no point with a device count to plot")
    models = {k[0] for k in groups}
    lengths = {k[1] for k in groups}
    batches = sorted({k[2] for k in groups})
    colours = plt.get_cmap("viridis")
    colour = {b: colours(i / max(1, len(batches) - 1) * 0.9) for i, b in enumerate(batches)}
    style = {m: LINE_STYLES[i % len(LINE_STYLES)] for i, m in enumerate(sorted(models))}
    devices = sorted({r["num_devices"] for g in groups.values() for r in g})

    panels = list(groups.items())[:MAX_DEGREE_PANELS]
    ncols = min(4, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = plt.figure(figsize=(4 * max(ncols, 3), 4.2 + 2.8 * nrows))
    grid = fig.add_gridspec(
        1 + nrows, 2 * ncols, height_ratios=[1.5] + [1] * nrows, hspace=0.55, wspace=0.6
    )
    ax_mfu, ax_step = fig.add_subplot(grid[0, :ncols]), fig.add_subplot(grid[0, ncols:])
    missing: dict[str, list[int]] = {}  # status -> device counts of the points without a layout
    for key, group in groups.items():
        kw: dict[str, Any] = {
            "color": colour[key[2]],
            "linestyle": style[key[0]],
            "marker": "o",
            "markersize": 4,
        }
        xs = [r["num_devices"] for r in group]
        mfu = [r["mfu"] * 100 if r.get("mfu") is not None else math.nan for r in group]
        step = [r["step_time_s"] if r.get("step_time_s") is not None else math.nan for r in group]
        ax_mfu.plot(xs, mfu, label=_label(key, models, lengths), **kw)
        ax_step.plot(xs, step, **kw)
        for row in group:
            if row.get("mfu") is None:
                status = str(row.get("status") or "no layout")
                missing.setdefault(status, []).append(row["num_devices"])
    for ax, title, unit in ((ax_mfu, "MFU", "MFU (%)"), (ax_step, "step time", "seconds per step")):
        _device_axis(ax, devices)
        ax.set_title(title)
        ax.set_xlabel("devices")
        ax.set_ylabel(unit)
    ax_step.set_yscale("log")
    for status, xs in sorted(missing.items()):  # along the bottom edge, outside the MFU scale
        ax_mfu.scatter(
            xs,
            [0.03] * len(xs),
            marker="x",
            color="tab:red",
            transform=ax_mfu.get_xaxis_transform(),
            clip_on=False,
            zorder=3,
            label=f"{status}: no layout ({len(xs)})",
        )
    ax_mfu.legend(fontsize=7, ncol=2 if len(groups) > 6 else 1)

    for i, (key, group) in enumerate(panels):
        r, c = divmod(i, ncols)
        ax = fig.add_subplot(grid[1 + r, 2 * c : 2 * c + 2])
        xs = [g["num_devices"] for g in group]
        for name in DEGREES:
            ys = [g[name] if g.get(name) is not None else math.nan for g in group]
            col, marker, size = DEGREE_STYLE[name]
            ax.plot(
                xs,
                ys,
                color=col,
                marker=marker,
                markersize=size,
                fillstyle="none",
                label=name,
                linewidth=1,
            )
        _device_axis(ax, devices)
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_title(f"degrees: {_label(key, models, lengths)}", fontsize=9)
        if c == 0:
            ax.set_ylabel("degree")
        if i == min(ncols, len(panels)) - 1:  # right of the first row of degree panels
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(title_of(rows, path))
    return fig
