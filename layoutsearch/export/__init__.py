"""Write a solved layout as a training framework's own configuration, and check it back.

``export_document(document, target, rank)`` returns the file text (or raises
InvalidLayoutError with one line naming what the framework cannot express and the nearest
layout it can); ``check_export(target, text, document, rank)`` parses such a text and
re-derives the framework's rules (products of degrees, divisibility, batch identities),
returning a list of problems (empty = consistent). Targets and their file formats:

- ``maxtext``: YAML override of base.yml;
- ``megatron``: sourceable bash defining ``MEGATRON_ARGS=( ... )`` for pretrain_gpt.py;
- ``torchtitan``: TOML job file (v0.2.x schema);
- ``deepspeed``: ds_config JSON with a ``_layoutsearch`` key for what must be set in code.
"""

from __future__ import annotations

from types import ModuleType

from ..errors import InvalidLayoutError, did_you_mean
from . import deepspeed, maxtext, megatron, torchtitan
from .context import ExportContext, build_context

TARGETS = ("maxtext", "megatron", "torchtitan", "deepspeed")
_MODULES: dict[str, ModuleType] = {"maxtext": maxtext, "megatron": megatron, "torchtitan": torchtitan,
                                   "deepspeed": deepspeed}
GPU_ONLY = ("megatron", "torchtitan", "deepspeed")
SUFFIXES = {"maxtext": ".yml", "megatron": ".sh", "torchtitan": ".toml", "deepspeed": ".json"}

__all__ = ["TARGETS", "SUFFIXES", "export_document", "check_export", "context_for"]


def _module(target: str) -> ModuleType:
    if target not in _MODULES:
        raise InvalidLayoutError(f"unknown export target '{target}'{did_you_mean(target, TARGETS)}; "
                                 f"known: {', '.join(TARGETS)}")
    return _MODULES[target]


def context_for(document: dict, target: str, rank: int = 1) -> ExportContext:
    """The resolved model, cluster and layout of ``rank`` in ``document``, for ``target``."""
    _module(target)
    ctx = build_context(document, target, rank)
    if target in GPU_ONLY and ctx.cluster.accelerator.kind != "gpu":
        raise ctx.fail(f"{target} runs on GPUs and cluster {ctx.cluster.name} is {ctx.cluster.accelerator.id} TPUs; "
                       f"nearest: export to maxtext")
    return ctx


def export_document(document: dict, target: str, rank: int = 1) -> str:
    """The configuration text of layout ``rank`` of a solve/estimate ``document`` for ``target``.

    Raises InvalidLayoutError when the framework cannot express the layout; never returns
    partial output.
    """
    ctx = context_for(document, target, rank)
    text = _module(target).render(ctx)
    problems = _module(target).check(text, ctx)
    if problems:  # an exporter bug, not bad input: refuse rather than write a file the framework rejects
        raise InvalidLayoutError(f"{target} export of layout rank {rank} failed its own check: {'; '.join(problems)}")
    return text


def check_export(target: str, text: str, document: dict, rank: int = 1) -> list[str]:
    """Problems found by re-deriving ``target``'s rules on ``text`` (empty when it is consistent)."""
    return _module(target).check(text, context_for(document, target, rank))
