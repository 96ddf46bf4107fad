"""`layoutsearch models`: the model catalogue with exact parameter counts, or one model's
(`--model NAME|PATH`: a catalogue id or alias, a model YAML or a Hugging Face config.json)."""

from __future__ import annotations

from typing import Annotated

import typer

from layoutsearch.cli.common import Format, FormatOpt, print_document, reports_errors
from layoutsearch.core.catalogue import MODEL_ALIASES, load_model, model_names
from layoutsearch.core.specs import ModelSpec
from layoutsearch.costs import params
from layoutsearch.report import render

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="One model's exact counts: a catalogue id or alias, a model YAML or a config.json",
    ),
]
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
def models(model: ModelOpt = None, fmt: FormatOpt = Format.table) -> None:
    """List the model catalogue with exact parameter counts (total and active per token), or with
    --model one model's counts by component (total, active, embedding, ...)."""
    if model is not None:
        _one_model(model, fmt)
        return
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
        for row in rows:
            row["aliases"] = list(MODEL_ALIASES.get(row["id"], ()))
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


def model_counts(m: ModelSpec) -> dict[str, int]:
    """One model's exact counts: total, active per token (the total for a dense model), active
    without the input embedding (how DeepSeek and OpenAI publish it), the embedding, then every
    component of ``params.param_counts`` (attention, mlp, norms, output, experts, router, mtp)."""
    counts = params.param_counts(m)
    active = counts.get("active", counts["total"])
    return {
        "total": counts["total"],
        "active": active,
        "active_without_embedding": active - counts["embedding"],
        "embedding": counts["embedding"],
        **{k: v for k, v in counts.items() if k not in ("total", "active", "embedding")},
    }


def _one_model(name_or_path: str, fmt: Format) -> None:
    """``models --model``: the counts as a two-column table, or a JSON / YAML document."""
    m = load_model(name_or_path)
    counts = model_counts(m)
    if fmt != Format.table:
        print_document({"model": name_or_path, "name": m.name, "params": counts}, fmt)
        return
    rows = [{"parameters": key, "count": value} for key, value in counts.items()]
    render.table_of_dicts(f"{m.name}: exact parameter counts", rows)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
