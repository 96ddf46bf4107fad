"""`layoutsearch models`: the model catalogue with exact parameter counts."""

from __future__ import annotations

import typer

from layoutsearch.cli.common import Format, FormatOpt, print_document, reports_errors
from layoutsearch.core.catalogue import load_model, model_names
from layoutsearch.costs import params
from layoutsearch.report import render


@reports_errors
def models(fmt: FormatOpt = Format.table) -> None:
    """List the model catalogue with exact parameter counts."""
    rows = []
    for name in model_names():
        m = load_model(name)
        rows.append({"id": name, "name": m.name, "layers": m.num_layers, "d_model": m.d_model, "d_ff": m.d_ff,
                     "mlp": m.mlp, "heads": m.num_heads, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                     "vocab": m.vocab_size, "tied": m.tied_embeddings, "params": params.param_counts(m)["total"]})
    if fmt != Format.table:
        print_document(rows, fmt)
    else:
        render.table_of_dicts("models", rows)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
