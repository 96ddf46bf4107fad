"""Framework knowledge in one place: one module per framework or export target, each declaring

- ``PROFILE``: which collectives the framework overlaps with which compute, when launched with
  the flags its exporter writes (read by the cost model through ``core.frameworks``);
- ``CAPABILITIES``: what its export target can write (``core.rules.framework_rules`` turns them
  into rules that restrict ``solve --export`` and make the exporter refuse; the exporter reads the
  same object);
- ``EXPORTER``: the module that writes the target's file (``layoutsearch.export`` loads it).

In every profile ZeRO-3 gathers are prefetched one layer ahead and their reduce-scatters run in
backward, and context-parallel ring passes hide behind the attention core. TP collectives
pipelined with their GEMMs need the fast domain (NVLink / ICI): a TP group that crosses scale-out
links is on the critical path in every profile (NeMo "Communication Overlap": userbuffers run
over NVLink only).

Nothing here imports the search, the cost model or the exporters.
"""

from __future__ import annotations

from types import ModuleType

from layoutsearch.core.errors import InvalidLayoutError, did_you_mean
from layoutsearch.core.specs import Framework
from layoutsearch.frameworks import (
    deepspeed,
    ideal,
    maxtext,
    megatron,
    megatron_bridge,
    torchtitan,
    torchtitan03,
)
from layoutsearch.frameworks.declaration import EXPERT_TENSOR, Capabilities, Profile

__all__ = [
    "EXPERT_TENSOR",
    "PROFILES",
    "TARGETS",
    "Capabilities",
    "Profile",
    "capabilities_of",
    "declaration_of",
    "exporter_of",
]

# --framework name -> profile (in the order messages list them)
PROFILES = {m.PROFILE.name: m.PROFILE for m in (megatron, deepspeed, torchtitan, maxtext, ideal)}
assert set(PROFILES) == {f.value for f in Framework}

# export target -> the declaration that holds its capabilities and names its exporter
_BY_TARGET: dict[str, ModuleType] = {
    m.CAPABILITIES.target: m
    for m in (maxtext, megatron, megatron_bridge, torchtitan, torchtitan03, deepspeed)
}
TARGETS = tuple(_BY_TARGET)


def declaration_of(target: str) -> ModuleType:
    """The framework module declaring export target ``target``."""
    if target not in _BY_TARGET:
        raise InvalidLayoutError(
            f"unknown export target '{target}'{did_you_mean(target, TARGETS)}; "
            f"known: {', '.join(TARGETS)}"
        )
    return _BY_TARGET[target]


def capabilities_of(target: str | None) -> Capabilities | None:
    """What ``target`` can express (its declaration's ``CAPABILITIES``); None for no target."""
    return None if target is None else declaration_of(target).CAPABILITIES


def exporter_of(target: str) -> str:
    """The name of the module that writes ``target``'s file."""
    return declaration_of(target).EXPORTER
