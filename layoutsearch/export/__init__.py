"""Write a solved layout as a training framework's own configuration, and check it back.

``export_document(document, target, rank)`` returns the file text (or raises
InvalidLayoutError with one line naming what the framework cannot express and the nearest
layout it can); ``check_export(target, text, document, rank)`` parses such a text and
re-derives the framework's rules (products of degrees, divisibility, batch identities),
returning a list of problems (empty = consistent). What a target can express, and which module
here writes it, is declared with its framework (``layoutsearch.frameworks``). Targets and their
file formats:

- ``maxtext``: YAML override of base.yml;
- ``megatron``: sourceable bash defining ``MEGATRON_ARGS=( ... )`` for pretrain_gpt.py;
- ``megatron-bridge``: YAML override of a Megatron-Bridge recipe's ConfigContainer;
- ``torchtitan``: TOML job file (v0.2.x schema);
- ``torchtitan-0.3``: a Python module with one torchtitan 0.3.x ``config_registry`` entry (0.3 reads no TOML);
- ``deepspeed``: ds_config JSON with a ``_layoutsearch`` key for what must be set in code.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.rules import Rule, framework_rules, violations
from layoutsearch.export.context import ExportContext, build_context
from layoutsearch.frameworks import TARGETS, capabilities_of, exporter_of

SUFFIXES = {
    "maxtext": ".yml",
    "megatron": ".sh",
    "megatron-bridge": ".yaml",
    "torchtitan": ".toml",
    "torchtitan-0.3": ".py",
    "deepspeed": ".json",
}

__all__ = [
    "TARGETS",
    "SUFFIXES",
    "export_document",
    "check_export",
    "context_for",
    "capabilities_of",
    "target_rules",
]


def _module(target: str) -> ModuleType:
    """The exporter that ``target``'s framework declaration names (an unknown target is refused)."""
    return importlib.import_module(exporter_of(target))


def context_for(document: dict, target: str, rank: int = 1) -> ExportContext:
    """The resolved model, cluster and layout of ``rank`` in ``document``, for ``target``."""
    _module(target)
    return build_context(document, target, rank)


def export_document(document: dict, target: str, rank: int = 1) -> str:
    """The configuration text of layout ``rank`` of a solve/estimate ``document`` for ``target``.

    Raises InvalidLayoutError when the framework cannot express the layout; never returns
    partial output.
    """
    ctx = context_for(document, target, rank)
    refused = violations(ctx.problem, ctx.layout, target_rules(target))
    if refused:
        raise ctx.fail(refused[0].message)
    text = _module(target).render(ctx)
    problems = _module(target).check(text, ctx)
    if (
        problems
    ):  # an exporter bug, not bad input: refuse rather than write a file the framework rejects
        raise InvalidLayoutError(
            f"{target} export of layout rank {rank} failed its own check: {'; '.join(problems)}"
        )
    return text


def check_export(target: str, text: str, document: dict, rank: int = 1) -> list[str]:
    """Problems found by re-deriving ``target``'s rules on ``text`` (empty when it is consistent)."""
    return _module(target).check(text, context_for(document, target, rank))


def target_rules(target: str) -> tuple[Rule, ...]:
    """The registry's rules for ``target``'s limits (they restrict `solve --export` and refuse exports)."""
    caps = capabilities_of(target)
    assert caps is not None  # a named target declares what it can express
    return framework_rules(caps)
