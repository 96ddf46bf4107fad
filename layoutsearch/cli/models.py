"""`layoutsearch models`: the model catalogue with exact parameter counts."""

from __future__ import annotations

import typer

from layoutsearch.cli.common import Format, FormatOpt, print_document, reports_errors
from layoutsearch.core.catalogue import load_model, model_names
from layoutsearch.costs import params
from layoutsearch.report import render

# The columns a narrow terminal leaves out, in this order (id, layers, params, active stay).
DROP_ORDER = (
    "name",
    "mtp_params",
    "tied",
    "mlp",
    "head_dim",
    "d_ff",
    "vocab",
    "kv_heads",
    "heads",
    "d_model",
    "experts",
)


@reports_errors
def models(fmt: FormatOpt = Format.table) -> None:
    """List the model catalogue with exact parameter counts (total and active per token)."""
    rows = []
    for name in model_names():
        m = load_model(name)
        rows.append(
            {
                "id": name,
                "name": m.name,
                "layers": m.num_layers,
                "d_model": m.d_model,
                "d_ff": m.d_ff,
                "mlp": m.mlp,
                "heads": m.num_heads,
                "kv_heads": m.num_kv_heads,
                "head_dim": m.head_dim,
                "vocab": m.vocab_size,
                "tied": m.tied_embeddings,
                **_counts(m),
            }
        )
    if fmt != Format.table:
        print_document(rows, fmt)
    else:
        render.table_of_dicts("models", rows, DROP_ORDER)


def _counts(m) -> dict:
    """Total and active parameters; for a MoE model its experts (routed/top-k + shared), for one with
    multi-token prediction the MTP modules' own parameters (beside the total, not in it)."""
    counts = params.param_counts(m)
    moe = (
        f"{m.moe.num_experts}/{m.moe.top_k}"
        + (f"+{m.moe.num_shared_experts}" if m.moe.num_shared_experts else "")
        if m.moe is not None
        else ""
    )
    return {
        "params": counts["total"],
        "active": counts.get("active", counts["total"]),
        "experts": moe,
        "mtp_params": counts.get("mtp", 0),
    }


def register(app: typer.Typer) -> None:
    app.command("models")(models)
