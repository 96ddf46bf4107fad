"""`layoutsearch clusters`: the accelerators (with their sources) and example clusters with their axes."""

from __future__ import annotations

import typer

from layoutsearch.cli.common import Format, FormatOpt, print_document, reports_errors
from layoutsearch.core.catalogue import accelerator_names, load_accelerator
from layoutsearch.core.topology import EXAMPLE_CLUSTERS, resolve_cluster
from layoutsearch.core.units import GB, TERA
from layoutsearch.report import render


@reports_errors
def clusters(fmt: FormatOpt = Format.table) -> None:
    """List accelerators (with sources) and example cluster names with their axes."""
    accs = [load_accelerator(a) for a in accelerator_names()]
    examples = []
    for name in EXAMPLE_CLUSTERS:
        c = resolve_cluster(name)
        examples.append(
            {
                "name": name,
                "devices": c.num_devices,
                "axes": " x ".join(
                    f"{a.name}{a.size}{'(wrap)' if a.wraparound else ''}" for a in c.axes
                ),
            }
        )
    if fmt != Format.table:
        print_document(
            {
                "accelerators": [
                    {
                        "id": a.id,
                        "name": a.name,
                        "peak_flops_per_s": a.peak_flops_per_s,
                        "hbm_bytes": a.hbm_bytes,
                        "hbm_bytes_per_s": a.hbm_bytes_per_s,
                        "link_bytes_per_s_per_direction": a.link_bytes_per_s_per_direction,
                        "scale_out_bytes_per_s_per_direction": a.scale_out_bytes_per_s_per_direction,
                        "sources": a.sources,
                    }
                    for a in accs
                ],
                "clusters": examples,
            },
            fmt,
        )
        return
    render.table_of_dicts(
        "accelerators",
        [
            {
                "id": a.id,
                "bf16 TFLOP/s": a.peak_flops_per_s / TERA,
                "HBM GB": round(a.hbm_bytes / GB, 1),
                "HBM GB/s": a.hbm_bytes_per_s / GB,
                "link GB/s/dir": a.link_bytes_per_s_per_direction / GB,
                "scale-out GB/s/dir": a.scale_out_bytes_per_s_per_direction / GB,
            }
            for a in accs
        ],
    )
    render.table_of_dicts(
        "example clusters (v5p-N counts chips; Google's Cloud names count TensorCores)", examples
    )


def register(app: typer.Typer) -> None:
    app.command("clusters")(clusters)
