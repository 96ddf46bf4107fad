"""The rule registry: every hard rule a layout obeys, stated once.

A rule is a code, the candidate fields it reads, a vectorised predicate over numpy arrays of
candidates (True where the rule holds), a title with the problem's numbers (for the
infeasibility funnel) and a message for one violating candidate with its numbers and the
nearest fix. Every consumer iterates these rules and nothing restates them:

- ``check.check_layout``: the violations of one layout (estimate, export, validate);
- ``search.space.build_space``: the candidate space, each rule applied at the first stage of
  the enumeration where its fields exist (degrees, then virtual stages, microbatches, ZeRO
  stage, recompute);
- ``search.explain.funnel``: how many degree tuples each rule removes, in registry order;
- export targets: ``framework_rules(capabilities)`` turns the capabilities a framework declares
  (``layoutsearch.frameworks``) into rules, one per ``Limit`` in ``LIMITS``, which restrict
  ``solve --export`` and make the exporter refuse what it cannot write.

Candidate fields (``Cand``, equal-length int arrays): dp, fsdp, tp, pp, cp (degrees), v
(virtual stages), sched (schedule code: 0 1f1b, 1 interleaved, 2 gpipe), k (microbatches),
z (ZeRO stage), f (offload code, specs.OFFLOADS: 0 none, 1 optimizer, 2 params), r (recompute
code: 0 none, 1 selective, 2 full).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from layoutsearch.core.frameworks import (
    fp4_recipe_of,
    fp8_recipe_of,
    node_dedup,
    profile_of,
    vendor_attention,
)
from layoutsearch.core.numbers import distinct
from layoutsearch.core.problem import MAX_VIRTUAL_STAGES, Problem, SearchOptions
from layoutsearch.core.specs import (
    ALL_DEGREE_NAMES,
    CP_FLAVOUR_CODES,
    CP_FLAVOURS,
    DEGREE_NAMES,
    OFFLOAD_POLICIES,
    OFFLOADS,
    RECOMPUTE_CODES,
    RECOMPUTE_POLICIES,
    SCHEDULE_CODES,
    Layout,
    ModelSpec,
)
from layoutsearch.core.stages import (
    BALANCED,
    BALANCED_SPLIT,
    CHUNK_LAYOUT,
    SPLIT_NAMES,
    split_layers,
)
from layoutsearch.frameworks import TARGETS, Capabilities, capabilities_of, declaration_of
from layoutsearch.frameworks.declaration import model_features

Cand = dict[str, np.ndarray]
SCHEDULE_NAMES = tuple(SCHEDULE_CODES)
# each schedule's virtual stages (the values it takes, None: any) and what a mismatch reads
SCHEDULE_VIRTUAL_STAGES: dict[str, tuple[tuple[int, ...] | str | None, str]] = {
    "1f1b": ((1,), "virtual stages above 1 are the interleaved schedule"),
    "gpipe": ((1,), "GPipe runs one stage per device"),
    "dualpipe": ((1,), "DualPipe runs one stage per device and direction (virtual_stages 1)"),
    "interleaved": ("above 1", "interleaved needs virtual stages above 1"),
    "zb-h1": (None, ""),
    "zb-v": ((2,), "ZB-V runs two chunks per device in a V (virtual_stages 2)"),
    "dualpipev": ((2,), "DualPipeV runs two chunks per device in a V (virtual_stages 2)"),
}


def _fits_table(most: int) -> np.ndarray:
    """[schedule code, v] for v in 0..most: whether the schedule runs v virtual stages."""
    v = np.arange(most + 1)
    table = np.zeros((len(SCHEDULE_CODES), most + 1), dtype=bool)
    for name, (values, _) in SCHEDULE_VIRTUAL_STAGES.items():
        fits = (
            (v > 1) if values == "above 1" else (v >= 1) if values is None else np.isin(v, values)
        )
        table[SCHEDULE_CODES[name]] = fits
    return table


_FITS = _fits_table(16)


def schedule_fits_virtual_stages(sched, v):
    """Whether each candidate's virtual stages are ones its schedule runs (SCHEDULE_VIRTUAL_STAGES),
    read from a [schedule, v] table."""
    v = np.asarray(v)
    table = _FITS if v.size == 0 or int(v.max()) < _FITS.shape[1] else _fits_table(int(v.max()))
    return table[np.asarray(sched), v]


def _dualpipe_fits(c: Cand):
    """DualPipe: pp even, K even and K >= 2 pp; DualPipeV: K >= 2 pp (the DualPipe repository's
    ``step`` assertions; torch's ScheduleDualPipeV asks K >= its 2 pp stages)."""
    sched, pp, k = c["sched"], c["pp"], c["k"]
    dual = (pp % 2 == 0) & (k % 2 == 0) & (k >= 2 * pp)
    return np.where(
        sched == SCHEDULE_CODES["dualpipe"],
        dual,
        np.where(sched == SCHEDULE_CODES["dualpipev"], k >= 2 * pp, True),
    )


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One hard rule: ``holds(problem, cand)`` is True where candidates satisfy it."""

    code: str
    needs: frozenset[str]
    holds: Callable[[Problem, Cand], np.ndarray | bool]
    title: Callable[[Problem], str]
    why: Callable[
        [Problem, dict], str
    ]  # one violating candidate (plain ints) -> message with numbers
    kind: str = "structure"  # structure | canonical (search only) | option | framework

    def mask(self, problem: Problem, cand: Cand) -> np.ndarray:
        """The predicate broadcast to the candidates' shape."""
        shape = np.broadcast_shapes(*(np.shape(cand[f]) for f in self.needs)) if self.needs else ()
        return np.broadcast_to(np.asarray(self.holds(problem, cand), dtype=bool), shape)


def _rule(*, code, needs, holds, title, why, kind="structure") -> Rule:
    """A rule reading candidate fields ``needs`` (any iterable of names)."""
    return Rule(code=code, needs=frozenset(needs), holds=holds, title=title, why=why, kind=kind)


def _canonical(
    *, code, needs, holds, title: str, layout, enumerated_as: str = "another layout"
) -> Rule:
    """A search-only canonical form ``title`` (each layout once): where it fails, the candidate's
    ``layout`` (its text) is enumerated as another candidate, ``enumerated_as``."""
    return _rule(
        code=code,
        needs=needs,
        holds=holds,
        title=lambda p: f"{title} (each layout once)",
        why=lambda p, c: f"{layout(p, c)} is enumerated as {enumerated_as}",
        kind="canonical",
    )


def effective_zero(c: Cand):
    """The ZeRO stage that acts: 0 when the shard group (fsdp x cp) has one member."""
    return np.where(c["fsdp"] * c["cp"] > 1, c["z"], 0)


def _degrees_text(c: dict) -> str:
    return " x ".join(f"{k}({c[k]})" for k in DEGREE_NAMES)


def _stage_devices(c: Cand):
    """Devices of one pipeline stage: dp x fsdp x tp x cp (the expert layers regroup them)."""
    return c["dp"] * c["fsdp"] * c["tp"] * c["cp"]


def _experts(p: Problem) -> int:
    return p.model.moe.num_experts if p.model.moe is not None else 1


def _expert_ffn(p: Problem) -> int:
    return p.model.moe.expert_d_ff if p.model.moe is not None else 1


# ----------------------------------------------------------------------------- context parallelism
A2A, A2A_RING = CP_FLAVOUR_CODES["a2a"], CP_FLAVOUR_CODES["a2a+ring"]


def cp_a2a_degree(devices_per_node: int, c: Cand):
    """a: the cp ranks that trade the sequence split for a head split by all-to-all (from c's cpf, cp,
    tp): cp for a2a; for a2a+ring those inside one node, gcd(cp, devices_per_node / tp) (tp innermost,
    then cp: Megatron's rank order tp-cp-ep-dp-pp; its --hierarchical-context-parallel-sizes a, cp / a);
    1 for ring and allgather."""
    inner = np.gcd(c["cp"], np.maximum(devices_per_node // c["tp"], 1))
    return np.where(c["cpf"] == A2A, c["cp"], np.where(c["cpf"] == A2A_RING, inner, 1))


def _a2a_of(p: Problem, c: Cand):
    return cp_a2a_degree(p.cluster.accelerator.devices_per_node, c)


def _cp_heads_ok(p: Problem, c: Cand):
    """Each of the a all-to-all ranks gets whole heads: tp x a divides num_heads, and the kv heads a
    tp rank holds and a divide one another (fewer kv heads than a are replicated)."""
    a = _a2a_of(p, c)
    kv = np.maximum(p.model.num_kv_heads // c["tp"], 1)
    whole = (p.model.num_heads % (c["tp"] * a) == 0) & ((kv % a == 0) | (a % kv == 0))
    return (a == 1) | whole


CP_RULES: tuple[Rule, ...] = (
    _rule(
        code="cp-heads",
        needs=("tp", "cp", "cpf"),
        holds=_cp_heads_ok,
        title=lambda p: (
            f"all-to-all CP: tp x a divides num_heads({p.model.num_heads}); a and the kv heads "
            "per tp rank divide one another"
        ),
        why=lambda p, c: (
            f"cp flavour {CP_FLAVOURS[c['cpf']]} with tp({c['tp']}) and cp({c['cp']}): its "
            f"all-to-all over {int(_a2a_of(p, c))} ranks needs tp x {int(_a2a_of(p, c))} = "
            f"{c['tp'] * int(_a2a_of(p, c))} to divide num_heads({p.model.num_heads}) and "
            f"{int(_a2a_of(p, c))} and the {max(p.model.num_kv_heads // c['tp'], 1)} kv heads per "
            "tp rank to divide one another"
        ),
    ),
)

# Search-only: a2a+ring whose all-to-all spans the whole group (a = cp) is a2a, one that spans a single
# rank (a = 1) is ring
CP_CANONICAL: tuple[Rule, ...] = (
    _canonical(
        code="cp-hierarchy",
        needs=("tp", "cp", "cpf"),
        holds=lambda p, c: (
            (c["cpf"] != A2A_RING) | ((_a2a_of(p, c) > 1) & (_a2a_of(p, c) < c["cp"]))
        ),
        title="a2a+ring only where cp spans nodes with more than one rank in each",
        layout=lambda p, c: (
            f"a2a+ring with cp({c['cp']}) and {int(_a2a_of(p, c))} of its ranks in a node"
        ),
        enumerated_as="ring or a2a",
    ),
)


# ----------------------------------------------------------------------------- structure
def _kv_ok(p: Problem, c: Cand):
    kv = p.model.num_kv_heads
    return (kv % c["tp"] == 0) | (c["tp"] % kv == 0)


def _tp_divides(code: str, dimension: str) -> Rule:
    """tp divides the model's ``dimension`` (a ModelSpec field): each tp rank holds a whole share."""
    return _rule(
        code=code,
        needs=("tp",),
        holds=lambda p, c: getattr(p.model, dimension) % c["tp"] == 0,
        title=lambda p: f"tp divides {dimension}({getattr(p.model, dimension)})",
        why=lambda p, c: (
            f"tp({c['tp']}) does not divide {dimension}({getattr(p.model, dimension)})"
        ),
    )


def _divides_moe(
    code: str, degree: str, title: str, whole: str, size: Callable[[Problem], int]
) -> Rule:
    """``degree`` divides ``size(problem)``, a size of the expert layers (``whole`` names it in a
    message, ``{}`` standing for the number); models without experts pass."""
    return _rule(
        code=code,
        needs=(degree,),
        holds=lambda p, c: (
            (p.model.moe is None) | ((c[degree] >= 1) & (size(p) % np.maximum(c[degree], 1) == 0))
        ),
        title=lambda p: f"{degree} divides {title} ({size(p)})",
        why=lambda p, c: f"{degree}({c[degree]}) does not divide " + whole.format(size(p)),
    )


def _recompute_needs(
    code: str,
    policies: tuple[str, ...],
    has: Callable[[Problem], bool],
    *,
    title: str,
    why: Callable[[Problem, dict], str],
) -> Rule:
    """The recompute ``policies`` only where the problem ``has`` what they act on."""
    codes = [RECOMPUTE_CODES[r] for r in policies]
    return _rule(
        code=code,
        needs=("r",),
        holds=lambda p, c: has(p) | ~np.isin(c["r"], codes),
        title=lambda p: title,
        why=why,
    )


STRUCTURE: tuple[Rule, ...] = (
    _rule(
        code="degree",
        needs=DEGREE_NAMES,
        holds=lambda p, c: np.all([c[d] >= 1 for d in DEGREE_NAMES], axis=0),
        title=lambda p: "every degree is a positive integer",
        why=lambda p, c: "degrees must be positive: " + _degrees_text(c),
    ),
    _rule(
        code="product",
        needs=DEGREE_NAMES,
        holds=lambda p, c: c["dp"] * c["fsdp"] * c["tp"] * c["pp"] * c["cp"] == p.num_devices,
        title=lambda p: f"product of degrees = devices ({p.num_devices})",
        why=lambda p, c: (
            f"{_degrees_text(c)} = {c['dp'] * c['fsdp'] * c['tp'] * c['pp'] * c['cp']}, but cluster "
            f"{p.cluster_name} has {p.num_devices} devices"
        ),
    ),
    _tp_divides("tp-heads", "num_heads"),
    _tp_divides("tp-ffn", "d_ff"),
    _rule(
        code="tp-kv-heads",
        needs=("tp",),
        holds=_kv_ok,
        title=lambda p: f"tp and num_kv_heads({p.model.num_kv_heads}) divide one another",
        why=lambda p, c: (
            f"tp({c['tp']}) does not divide num_kv_heads({p.model.num_kv_heads}) "
            f"and {p.model.num_kv_heads} does not divide {c['tp']}"
        ),
    ),
    _rule(
        code="pp-layers",
        needs=("pp", "v"),
        holds=lambda p, c: _split(p, c)[4],
        title=lambda p: (
            f"the pipeline splits num_layers({p.model.num_layers}): evenly, counting the embedding and "
            f"loss as layers, or with lighter first and last stages"
        ),
        why=lambda p, c: (
            f"the balanced split of num_layers({p.model.num_layers}) over pp({c['pp']}) x "
            f"virtual_stages({c['v']}) needs pp > 1, a layer for each chunk and the schedule "
            f"{' or '.join(BALANCED_SCHEDULES)} (chunk i on stage i mod pp)"
            if np.any(c.get("spl", 0) == BALANCED_SPLIT)
            else f"num_layers({p.model.num_layers}) cannot be split over pp({c['pp']}) x "
            f"virtual_stages({c['v']})"
            + (
                f" with first_stage_layers({c['lf']}) and last_stage_layers({c['ll']})"
                if c.get("lf", 0) or c.get("ll", 0)
                else ""
            )
            + ": the middle stages need equal shares and the first and last no more than a middle "
            "stage, at least virtual_stages each (a multiple of it, unless first and last are given)"
        ),
    ),
    _rule(
        code="schedule",
        needs=("pp", "v", "sched"),
        holds=lambda p, c: schedule_fits_virtual_stages(c["sched"], c["v"]),
        title=lambda p: (
            "virtual stages 1 for 1f1b, gpipe and dualpipe, above 1 for interleaved, 2 for zb-v "
            "and dualpipev, any for zb-h1"
        ),
        why=lambda p, c: (
            f"schedule {SCHEDULE_NAMES[c['sched']]} with virtual_stages({c['v']}): "
            + SCHEDULE_VIRTUAL_STAGES[SCHEDULE_NAMES[c["sched"]]][1]
        ),
    ),
    _rule(
        code="dualpipe",
        needs=("pp", "k", "sched"),
        holds=lambda p, c: _dualpipe_fits(c),
        title=lambda p: (
            "dualpipe: pp even and microbatches even and >= 2 pp; dualpipev: microbatches >= 2 pp"
        ),
        why=lambda p, c: (
            f"schedule {SCHEDULE_NAMES[c['sched']]} with pp({c['pp']}) and num_microbatches({c['k']}): "
            + (
                "DualPipe feeds half the microbatches from each end, so it needs an even pp, an "
                "even count and at least 2 pp of them (DualPipe.step's assertions)"
                if c["sched"] == SCHEDULE_CODES["dualpipe"]
                else "DualPipeV needs at least 2 pp microbatches (DualPipeV.step's assertion)"
            )
        ),
    ),
    _rule(
        code="ep-dense",
        needs=("ep", "etp"),
        holds=lambda p, c: (p.model.moe is not None) | ((c["ep"] == 1) & (c["etp"] == 1)),
        title=lambda p: "ep = etp = 1 without expert layers",
        why=lambda p, c: (
            f"ep({c['ep']}) x etp({c['etp']}): model '{p.model.name}' has no mixture-of-experts layers"
        ),
    ),
    _divides_moe(
        "ep-experts", "ep", "the experts", "the {} routed experts of each MoE layer", _experts
    ),
    _divides_moe("etp-ffn", "etp", "the expert FFN width", "the expert FFN width {}", _expert_ffn),
    _rule(
        code="ep-fold",
        needs=ALL_DEGREE_NAMES,
        holds=lambda p, c: _stage_devices(c) % np.maximum(c["ep"] * c["etp"], 1) == 0,
        title=lambda p: (
            "ep x etp divides the devices of a stage (dp x fsdp x tp x cp): expert layers regroup them"
        ),
        why=lambda p, c: (
            f"ep({c['ep']}) x etp({c['etp']}) = {c['ep'] * c['etp']} does not divide the "
            f"{_stage_devices(c)} devices of a pipeline stage (dp x fsdp x tp x cp): the expert layers "
            f"regroup those devices as edp x ep x etp"
        ),
    ),
    _rule(
        code="cp-seq",
        needs=("cp",),
        holds=lambda p, c: (c["cp"] == 1) | (p.workload.seq_len % (2 * c["cp"]) == 0),
        title=lambda p: f"seq_len({p.workload.seq_len}) divisible by 2 x cp",
        why=lambda p, c: f"seq_len({p.workload.seq_len}) is not divisible by 2 x cp({c['cp']})",
    ),
    _rule(
        code="whole-sequences",
        needs=("dp", "fsdp", "k"),
        holds=lambda p, c: p.workload.global_batch_seqs % (c["dp"] * c["fsdp"] * c["k"]) == 0,
        title=lambda p: (
            f"whole sequences: dp x fsdp x microbatches divides the batch ({p.workload.global_batch_seqs})"
        ),
        why=lambda p, c: (
            f"global batch {p.workload.global_batch_seqs} sequences is not divisible into dp({c['dp']}) x "
            f"fsdp({c['fsdp']}) data units x {c['k']} microbatches = {c['dp'] * c['fsdp'] * c['k']}: every "
            f"data unit needs whole sequences in every microbatch"
        ),
    ),
    _rule(
        code="pp-microbatches",
        needs=("pp", "k"),
        holds=lambda p, c: (c["pp"] == 1) | (c["k"] >= c["pp"]),
        title=lambda p: "microbatches >= pp",
        why=lambda p, c: f"num_microbatches({c['k']}) < pp({c['pp']}): the pipeline never fills",
    ),
    _rule(
        code="interleave",
        needs=("pp", "v", "k"),
        holds=lambda p, c: (c["v"] == 1) | ((c["pp"] > 1) & (c["k"] % c["pp"] == 0)),
        title=lambda p: "interleaving needs pp > 1 and microbatches divisible by pp",
        why=lambda p, c: (
            f"virtual_stages({c['v']}) needs pp > 1 and num_microbatches({c['k']}) divisible by pp({c['pp']})"
        ),
    ),
    _recompute_needs(
        "host-offload",
        OFFLOAD_POLICIES,
        lambda p: p.cluster.accelerator.host_bytes_per_s_per_direction is not None,
        title="host-offloading recompute policies need the accelerator's host bandwidth",
        why=lambda p, c: (
            f"recompute {RECOMPUTE_POLICIES[c['r']]} offloads activations to host memory, but "
            f"{p.cluster.accelerator.id} has no host_gbytes_per_s_per_direction in its hardware file"
        ),
    ),
    _recompute_needs(
        "mla-up-proj",
        ("mla_up_proj", "norm_mla_up_proj"),
        lambda p: p.model.mla is not None,
        title="recompute mla_up_proj and norm_mla_up_proj need multi-head latent attention",
        why=lambda p, c: (
            f"recompute {RECOMPUTE_POLICIES[c['r']]} reruns latent attention's up-projections, but "
            f"{p.model_id} has no latent attention (Megatron refuses mla_up_proj without it)"
        ),
    ),
    _recompute_needs(
        "norm-act",
        ("norm_act",),
        lambda p: p.model.moe is not None or p.model.mla is not None,
        title="recompute norm_act needs experts or latent attention (else it recomputes nothing)",
        why=lambda p, c: (
            f"recompute norm_act recomputes nothing on {p.model_id}: it has no experts and no separate "
            f"norm module (Megatron fuses its norms into the next linear); it is recompute none"
        ),
    ),
    _rule(
        code="zero-stage",
        needs=("z",),
        holds=lambda p, c: (c["z"] >= 0) & (c["z"] <= 3),
        title=lambda p: "ZeRO stage 0-3",
        why=lambda p, c: f"zero_stage({c['z']}) must be 0, 1, 2 or 3",
    ),
    _rule(
        code="ep-zero",
        needs=(*ALL_DEGREE_NAMES, "z"),
        holds=lambda p, c: (
            (effective_zero(c) == 0)
            | ((c["fsdp"] * c["cp"] * c["tp"]) % np.maximum(c["ep"] * c["etp"], 1) == 0)
        ),
        title=lambda p: (
            "with ZeRO, ep x etp divides fsdp x cp x tp (the experts shard over what remains, replicated over dp)"
        ),
        why=lambda p, c: (
            f"zero_stage {c['z']} with ep({c['ep']}) x etp({c['etp']}) = {c['ep'] * c['etp']}, which does not "
            f"divide fsdp({c['fsdp']}) x cp({c['cp']}) x tp({c['tp']}): the expert groups would straddle "
            f"the dp replicas; use ep x etp <= fsdp x cp x tp, or zero_stage 0"
        ),
    ),
)


def _host_fields_missing(p: Problem) -> list[str]:
    """The catalogue fields optimizer and parameter offload read that the accelerator lacks."""
    acc = p.cluster.accelerator
    wanted = {
        "host_gbytes_per_s_per_direction": acc.host_bytes_per_s_per_direction,
        "host_memory_gib_per_node": acc.host_memory_bytes_per_node,
        "host_cpu_cores_per_node": acc.host_cpu_cores_per_node,
    }
    return [name for name, value in wanted.items() if value is None]


def _host_fields_refusal(p: Problem, c: dict) -> str:
    missing = _host_fields_missing(p)
    return (
        f"offload {OFFLOADS[c['f']]} keeps model state in host memory, but "
        f"{p.cluster.accelerator.id} has no {', '.join(missing)} in its hardware file (a cluster file can "
        f"give {'them' if len(missing) > 1 else 'it'})"
    )


OFFLOAD_RULES: tuple[Rule, ...] = (
    _rule(
        code="offload-host",
        needs=("f",),
        holds=lambda p, c: (c["f"] == 0) | (not _host_fields_missing(p)),
        title=lambda p: "optimizer and parameter offload need the host's link, memory and cores",
        why=_host_fields_refusal,
    ),
    _rule(
        code="offload-params-zero3",
        needs=("fsdp", "cp", "z", "f"),
        holds=lambda p, c: (c["f"] != OFFLOADS.index("params")) | (effective_zero(c) == 3),
        title=lambda p: "parameter offload with ZeRO-3 over a shard group",
        why=lambda p, c: (
            f"offload params fetches each device's weight shard from the host (ZeRO-Infinity), "
            f"which needs zero_stage 3 over fsdp x cp > 1 (got zero_stage {c['z']}, "
            f"fsdp({c['fsdp']}) x cp({c['cp']}))"
        ),
    ),
)


def refused_offloads(p: Problem, offloads) -> dict[str, str]:
    """{choice: why} for each of the ``offloads`` asked for that no layout of ``p`` can take (the offload rules
    that read the choice alone: the host's fields), why as ``rule.why (code)``; empty where all are searchable."""
    out: dict[str, str] = {}
    for name in offloads:
        code = OFFLOADS.index(name)
        for rule in OFFLOAD_RULES:
            if rule.needs == {"f"} and not rule.mask(p, {"f": np.array([code])}).all():
                out.setdefault(name, f"{rule.why(p, {'f': code})} ({rule.code})")
    return out


# Search-only: variants that cannot differ are enumerated once (fsdp with ZeRO-0 would be
# replicated data parallelism, which dp already is; ZeRO >= 1 needs a shard group).
CANONICAL: tuple[Rule, ...] = (
    _canonical(
        code="zero-canonical",
        needs=("fsdp", "cp", "z"),
        holds=lambda p, c: (
            ((c["z"] == 0) & (c["fsdp"] == 1)) | ((c["z"] >= 1) & (c["fsdp"] * c["cp"] > 1))
        ),
        title="ZeRO-0 without fsdp, ZeRO >= 1 with a shard group",
        layout=lambda p, c: f"fsdp({c['fsdp']}) x cp({c['cp']}) with zero_stage {c['z']}",
    ),
    _canonical(
        code="schedule-canonical",
        needs=("pp", "sched"),
        holds=lambda p, c: (c["pp"] > 1) | (c["sched"] == SCHEDULE_CODES["1f1b"]),
        title="without a pipeline the schedule is 1f1b",
        layout=lambda p, c: f"pp({c['pp']}) with the {SCHEDULE_NAMES[c['sched']]} schedule",
        enumerated_as="1f1b",
    ),
    _rule(
        code="chunk-layout-search",
        needs=("pp", "v"),
        holds=lambda p, c: _standard_split_or_none(p, c),
        title=lambda p: (
            "a chunk layout only where pp has no even, embedding-and-loss or first-last split"
        ),
        why=lambda p, c: (
            f"pp({c['pp']}) splits num_layers({p.model.num_layers}) without a chunk layout; the search "
            f"keeps to that split (uneven chunks' bubble is costed only approximately)"
        ),
        kind="canonical",
    ),
)


def _pipeline_splits_rule(splits: tuple[str, ...]) -> Rule:
    """--pipeline-splits: where pp > 1, the candidates' split (``_split_name``) is one of ``splits``."""
    listed = ",".join(splits)

    def why(p: Problem, c: dict) -> str:
        return f"the {_split_name(p, c)[0]} split is not among --pipeline-splits {listed}"

    return _rule(
        code="option-pipeline-split",
        needs=("pp", "v"),
        holds=lambda p, c: (c["pp"] == 1) | np.isin(_split_name(p, c), splits),
        title=lambda p: f"pipeline split in {{{listed}}} where pp > 1",
        why=why,
        kind="option",
    )


# the schedules that place chunk i on stage i mod pp, as the balanced split's chunks are laid out
BALANCED_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved")


def _split(p: Problem, c: Cand):
    """``core.stages.split_layers`` of the candidates' pipelines (first, middle, last, kind, ok); the rules read
    only kind and ok, which the output head's weight (``head``) does not change; a balanced split (``spl``)
    holds its kind, valid where pp > 1 gives each of the pp x v chunks a layer (its counts are the engine's)."""
    first, middle, last, kind, ok = split_layers(
        p.model.num_layers, c["pp"], c["v"], c.get("lf", 0), c.get("ll", 0)
    )
    if not np.any(c.get("spl", 0)):  # the engine's split alone (every row of the main job)
        return first, middle, last, kind, ok
    balanced = np.broadcast_to(np.asarray(c["spl"]) == BALANCED_SPLIT, kind.shape)
    fits = (np.asarray(c["pp"]) > 1) & (p.model.num_layers >= np.asarray(c["pp"]) * c["v"])
    if "sched" in c:
        fits = fits & np.isin(c["sched"], [SCHEDULE_CODES[s] for s in BALANCED_SCHEDULES])
    return first, middle, last, np.where(balanced, BALANCED, kind), np.where(balanced, fits, ok)


def _standard_split_or_none(p: Problem, c: Cand) -> np.ndarray:
    """Search only: a candidate uses a chunk layout (core.stages) only when its pp has no other split
    for any number of virtual stages (Megatron runs awkward layer counts, DeepSeek-V3's 61, that way)."""
    kind = _split(p, c)[3]
    chunked = kind == CHUNK_LAYOUT
    if not chunked.any():
        return np.ones_like(chunked, dtype=bool)
    pp_values = distinct(np.asarray(c["pp"])[chunked])
    standard = set()
    for pp in pp_values.tolist():
        vs = np.arange(1, MAX_VIRTUAL_STAGES + 1)
        _, _, _, kinds, ok = split_layers(p.model.num_layers, np.full(len(vs), pp), vs)
        if (ok & (kinds != CHUNK_LAYOUT)).any():
            standard.add(pp)
    return ~chunked | ~np.isin(c["pp"], list(standard))


# ----------------------------------------------------------------------------- user options
def option_rules(options: SearchOptions | None) -> tuple[Rule, ...]:
    """The user's --fix, --choices, --only, --recompute and limits, as rules."""
    if options is None:
        return ()
    rules = []
    for d in ALL_DEGREE_NAMES:
        if (
            d in options.fix
            or d in options.choices
            or (options.only is not None and d not in options.only)
        ):
            rules.append(
                _rule(
                    code=f"option-{d}",
                    needs=(d,),
                    holds=lambda p, c, d=d: options.allowed(d, c[d]),
                    title=lambda p, d=d: f"your --fix/--choices/--only for {d}",
                    why=lambda p, c, d=d: f"{d}({c[d]}) is excluded by --fix/--choices/--only",
                    kind="option",
                )
            )

    def allowed(
        p: Problem,
    ) -> tuple[str, ...]:  # --recompute, else the framework profile's default set
        return (
            options.recompute
            or profile_of(p.workload.framework, p.cluster.accelerator.kind).recompute_policies
        )

    rules.append(
        _rule(
            code="option-recompute",
            needs=("r",),
            holds=lambda p, c: np.isin(c["r"], [RECOMPUTE_CODES[r] for r in allowed(p)]),
            title=lambda p: f"recompute in {{{', '.join(allowed(p))}}}",
            why=lambda p, c: (
                f"recompute {RECOMPUTE_POLICIES[c['r']]} is not among {', '.join(allowed(p))}"
                + (
                    ""
                    if options.recompute
                    else f" (the {p.workload.framework} default; --recompute widens it)"
                )
            ),
            kind="option",
        )
    )
    rules.append(
        _rule(
            code="option-offload",
            needs=("f",),
            holds=lambda p, c: np.isin(c["f"], [OFFLOADS.index(o) for o in options.offload]),
            title=lambda p: f"offload in {{{', '.join(options.offload)}}}",
            why=lambda p, c: (
                f"offload {OFFLOADS[c['f']]} is not among {', '.join(options.offload)} (--offload widens it)"
            ),
            kind="option",
        )
    )
    rules.append(
        _rule(
            code="option-zero",
            needs=("fsdp", "cp", "z"),
            holds=lambda p, c: np.isin(effective_zero(c), options.zero_stages),
            title=lambda p: f"ZeRO stage in {{{', '.join(map(str, options.zero_stages))}}}",
            why=lambda p, c: f"zero_stage {c['z']} is not among the allowed stages",
            kind="option",
        )
    )
    if options.schedules is not None:
        rules.append(
            _rule(
                code="option-schedule",
                needs=("pp", "sched"),
                holds=lambda p, c: (
                    (c["pp"] == 1)
                    | np.isin(c["sched"], [SCHEDULE_CODES[s] for s in options.schedules])
                ),
                title=lambda p: f"schedule in {{{', '.join(options.schedules)}}}",
                why=lambda p, c: (
                    f"schedule {SCHEDULE_NAMES[c['sched']]} is not among --schedules "
                    f"{','.join(options.schedules)}"
                ),
                kind="option",
            )
        )
    rules.append(
        _rule(
            code="option-virtual",
            needs=("v",),
            holds=lambda p, c: c["v"] <= options.max_virtual_stages,
            title=lambda p: f"virtual stages <= {options.max_virtual_stages}",
            why=lambda p, c: f"virtual_stages({c['v']}) > {options.max_virtual_stages}",
            kind="option",
        )
    )
    if options.pipeline_splits is not None:
        rules.append(_pipeline_splits_rule(options.pipeline_splits))
    flavours = options.cp_flavours
    if flavours is not None:
        rules.append(
            _rule(
                code="option-cp-flavour",
                needs=("cp", "cpf"),
                holds=lambda p, c: (
                    (c["cp"] == 1) | np.isin(c["cpf"], [CP_FLAVOUR_CODES[f] for f in flavours])
                ),
                title=lambda p: f"cp flavour in {{{', '.join(flavours)}}} where cp > 1",
                why=lambda p, c: (
                    f"cp flavour {CP_FLAVOURS[c['cpf']]} is not among --cp-flavours "
                    f"{','.join(flavours)}"
                ),
                kind="option",
            )
        )
    return tuple(rules)


# ----------------------------------------------------------------------------- frameworks
def llama_block(m: ModelSpec) -> bool:
    """RMSNorm, rotary positions, no linear biases, two weighted norms per layer, attention then the MLP,
    full attention (the Llama decoder block; QKV, output-projection or output-head biases, extra or q/k norms,
    sliding windows, attention chunks, NoPE layers and attention sinks are other blocks)."""
    return (
        m.norm == "rmsnorm"
        and not m.parallel_block
        and not m.linear_bias
        and not m.attention_out_bias
        and not m.output_head_bias
        and m.learned_positions == 0
        and not m.qkv_bias
        and m.norms_per_layer == 2
        and m.norm_weights
        and m.qk_norm == "none"
        and m.sliding_window is None
        and m.attention_chunk is None
        and m.nope_layers == 0
        and not m.attention_sinks
    )


def dense(m: ModelSpec) -> bool:
    """Dense MLPs and standard attention: no experts, no latent attention (the dense families below need it)."""
    return m.moe is None and m.mla is None


def gpt3_block(m: ModelSpec) -> bool:
    """LayerNorm, biases, learned positions, plain GELU MLP, attention then the MLP (GPT-3-style decoder
    block)."""
    return (
        dense(m)
        and not m.parallel_block
        and m.norm == "layernorm"
        and m.linear_bias
        and not m.output_head_bias
        and m.learned_positions > 0
        and m.mlp == "plain"
    )


def llama3_block(m: ModelSpec) -> bool:
    """The Llama 3 model code: gated MLP, untied, head_dim = d_model / heads, and a Llama block."""
    return (
        dense(m)
        and llama_block(m)
        and m.mlp == "gated"
        and not m.tied_embeddings
        and m.head_dim * m.num_heads == m.d_model
    )


def _routed_only(m: ModelSpec) -> bool:
    """Every layer MoE with SwiGLU experts, no shared experts, no router bias, standard attention, no MTP."""
    moe = m.moe
    return (
        moe is not None
        and m.mla is None
        and m.mtp_layers == 0
        and moe.num_shared_experts == 0
        and moe.first_dense_layers == 0
        and moe.layer_freq == 1
        and not moe.router_bias
        and m.mlp == "gated"
        and m.activation_name == "silu"
    )


def mixtral_block(m: ModelSpec) -> bool:
    """Mixtral: a Llama block whose MLP is a top-k mixture of SwiGLU experts in every layer."""
    return _routed_only(m) and llama_block(m)


def qwen3_moe_block(m: ModelSpec) -> bool:
    """Qwen3-MoE: Mixtral's layer with a per-head RMSNorm on queries and keys."""
    return (
        _routed_only(m)
        and m.norm == "rmsnorm"
        and not m.linear_bias
        and not m.qkv_bias
        and not m.attention_out_bias
        and not m.output_head_bias
        and m.learned_positions == 0
        and m.norms_per_layer == 2
        and m.norm_weights
        and m.qk_norm == "head"
        and m.sliding_window is None
        and m.attention_chunk is None
        and m.nope_layers == 0
    )


def deepseek_block(m: ModelSpec) -> bool:
    """DeepSeek-V2/V3: latent attention, first_dense_layers dense SwiGLU layers then MoE in every layer,
    shared experts as wide as a routed one, untied, a Llama-style norm/position layout."""
    moe = m.moe
    return (
        moe is not None
        and m.mla is not None
        and moe.layer_freq == 1
        and not moe.shared_expert_gate
        and (moe.num_shared_experts == 0 or moe.shared_d_ff == moe.expert_d_ff)
        and m.mlp == "gated"
        and m.activation_name == "silu"
        and not m.tied_embeddings
        and llama_block(m)
    )


def llama4_block(m: ModelSpec) -> bool:
    """Llama 4 (MaxText's llama4 block): a Llama block but for its attention, chunks on the RoPE layers and a NoPE
    layer every k-th attending over the whole sequence, with or without q/k L2 norms; a top-k mixture of SwiGLU
    experts every n-th layer beside one shared expert as wide as a routed one; its layers a whole number of
    lcm(k, n)-layer cycles."""
    moe = m.moe
    if moe is None or m.mla is not None or m.attention_chunk is None or not m.nope_layers:
        return False
    attention = replace(
        m, qk_norm="none", attention_chunk=None, full_attention_layers=0, nope_layers=0
    )
    return (
        llama_block(attention)
        and m.qk_norm in ("none", "l2")
        and m.full_attention_layers == m.nope_layers
        and m.mtp_layers == 0
        and moe.num_shared_experts == 1
        and moe.shared_d_ff == moe.expert_d_ff
        and not moe.shared_expert_gate
        and moe.first_dense_layers == 0
        and not moe.router_bias
        and m.mlp == "gated"
        and m.activation_name == "silu"
        and not m.tied_embeddings
        and m.num_layers % math.lcm(m.nope_interval, moe.layer_freq) == 0
    )


def gpt_oss_block(m: ModelSpec) -> bool:
    """gpt-oss (torchtitan's gpt_oss model, the Hugging Face GptOss code): a Llama block with biases on Q, K, V, O
    and on the experts (``linear_bias``), a learned sink logit per head, sliding-window and full attention in
    alternate layers; a top-k mixture of SwiGLU experts with a biased router in every layer, no shared expert, no
    dense MLP, untied."""
    moe = m.moe
    if moe is None or m.mla is not None or m.sliding_window is None:
        return False
    attention = replace(
        m, linear_bias=False, attention_sinks=False, sliding_window=None, full_attention_layers=0
    )
    return (
        llama_block(attention)
        and m.linear_bias
        and m.attention_sinks
        and 2 * m.full_attention_layers == m.num_layers
        and m.mtp_layers == 0
        and moe.num_shared_experts == 0
        and moe.first_dense_layers == 0
        and moe.layer_freq == 1
        and moe.router_bias
        and m.mlp == "gated"
        and m.activation_name == "silu"
        and not m.tied_embeddings
    )


MODEL_BLOCKS = {
    "llama": lambda m: dense(m) and llama_block(m),
    "gpt3": gpt3_block,
    "llama3": llama3_block,
    "mixtral": mixtral_block,
    "qwen3-moe": qwen3_moe_block,
    "deepseek": deepseek_block,
    "llama4": llama4_block,
    "gpt-oss": gpt_oss_block,
}


def _etp_kind(c: Cand) -> np.ndarray:
    """The EXPERT_TENSOR name of each candidate's etp: "1", "tp" (etp = tp > 1) or "other"."""
    return np.where(c["etp"] == 1, "1", np.where(c["etp"] == c["tp"], "tp", "other"))


def _etp_ok(caps: Capabilities, c: Cand) -> np.ndarray:
    """etp is one the target writes, given ep (etp = 1 = tp counts as both "1" and "tp")."""
    kind, tp_like = _etp_kind(c), c["etp"] == c["tp"]
    ok = {}
    for key, choices in (("ep", caps.expert_tensor), ("no-ep", caps.expert_tensor_without_ep)):
        ok[key] = np.isin(kind, choices) | (tp_like & ("tp" in choices))
    return np.where(c["ep"] > 1, ok["ep"], ok["no-ep"])


def _expert_span(caps: Capabilities, c: Cand) -> np.ndarray:
    """Devices an expert group may regroup on this target: the product of caps.expert_groups' degrees."""
    sharded = effective_zero(c) >= 2
    span = np.ones_like(c["tp"])
    for d in caps.expert_groups:
        if d == "fsdp" and "dp" not in caps.expert_groups:
            span = span * np.where(sharded, c["fsdp"], 1)
        else:
            span = span * c[d]
    return span


def _span_text(caps: Capabilities, c: dict) -> str:
    """`fsdp(8) x tp(2)`: the degrees _expert_span multiplies, an unsharded fsdp named as left out."""
    parts = [f"{d}({c[d]})" for d in caps.expert_groups]
    if (
        "fsdp" in caps.expert_groups
        and "dp" not in caps.expert_groups
        and int(effective_zero(c)) < 2
    ):
        parts = [
            f"fsdp({c['fsdp']}) unsharded, so 1" if d.startswith("fsdp(") else d for d in parts
        ]
    return " x ".join(parts)


def _experts_nearest(caps: Capabilities, c: dict) -> str:
    unsharded = (
        "fsdp" in caps.expert_groups
        and "dp" not in caps.expert_groups
        and c["fsdp"] > 1
        and int(effective_zero(c)) < 2
    )
    return (
        f"ep x etp dividing {int(_expert_span(caps, c))}"
        + (
            f", or zero_stage 3 so fsdp({c['fsdp']}) shards and can hold expert groups"
            if unsharded
            else ""
        )
        + ", or export to megatron"
    )


def _etp_nearest(caps: Capabilities, c: dict) -> str:
    choices = caps.expert_tensor if c["ep"] > 1 else caps.expert_tensor_without_ep
    values = sorted({1 if k == "1" else c["tp"] for k in choices if k != "other"})
    fix = " or ".join(f"etp={v}" for v in values) or "ep=1, etp=1"
    return fix + (", or ep > 1" if c["ep"] == 1 and set(caps.expert_tensor) - set(choices) else "")


def _graphs_ok(caps: Capabilities, p: Problem, c: Cand) -> np.ndarray:
    """The workload's CUDA graphs are ones the target writes, with the candidate's recompute policy and model."""
    graphs, ok = p.workload.cuda_graphs, np.ones_like(c["r"], dtype=bool)
    if graphs not in caps.cuda_graphs:
        return ~ok
    if graphs == "scoped" and caps.recompute_with_scoped_graphs is not None:
        return np.isin(c["r"], [RECOMPUTE_CODES[r] for r in caps.recompute_with_scoped_graphs])
    if graphs == "full_iteration" and p.model.dropless_moe and not caps.full_graph_dropless_moe:
        return ~ok
    return ok


def _graphs_title(caps: Capabilities, p: Problem) -> str:
    graphs = p.workload.cuda_graphs
    if (
        graphs == "scoped"
        and graphs in caps.cuda_graphs
        and caps.recompute_with_scoped_graphs is not None
    ):
        return f"scoped CUDA graphs with recompute {', '.join(caps.recompute_with_scoped_graphs)}"
    if (
        graphs == "full_iteration"
        and graphs in caps.cuda_graphs
        and not caps.full_graph_dropless_moe
    ):
        return "no full-iteration CUDA graph of a dropless MoE"
    return f"CUDA graphs {', '.join(caps.cuda_graphs)}"


def _graphs_refusal(caps: Capabilities, p: Problem, c: dict) -> tuple[str, str]:
    """(what the target cannot express, the nearest it can) for the workload's CUDA graphs."""
    graphs = p.workload.cuda_graphs
    if graphs not in caps.cuda_graphs:
        return f"--cuda-graphs {graphs}", "--cuda-graphs none, or export to megatron"
    if graphs == "scoped":
        allowed = caps.recompute_with_scoped_graphs or ()
        return (
            f"scoped CUDA graphs with the recompute policy {RECOMPUTE_POLICIES[c['r']]} (megatron-core: "
            f"full recompute needs a full-iteration graph, and a MoE layer's recompute cannot cover the "
            f"graphed router)",
            f"recompute {' or '.join(allowed)}, or --cuda-graphs none",
        )
    return (
        f"a full-iteration CUDA graph of the dropless MoE {p.model_id} (its token dispatcher copies "
        f"the token counts to the host in every MoE layer, which a graph cannot capture)",
        "--cuda-graphs scoped, or a capacity factor (drop and pad)",
    )


def _grads_ok(caps: Capabilities, grad_bytes: int) -> bool:
    """fp32 gradients everywhere, bf16 ones (--grad-bytes 2) where the target writes them."""
    return grad_bytes == 4 or (grad_bytes == 2 and caps.bf16_grads)


def _state_precision_ok(caps: Capabilities, p: Problem, c: Cand) -> np.ndarray:
    """fp32 gradients and Adam moments everywhere; bf16 ones (--grad-bytes 2, --moment-bytes 2) only where the
    target writes them."""
    moments = p.workload.optimizer_bytes_per_param
    return _grads_ok(caps, p.workload.grad_bytes_per_param) & (
        (moments == 8) | ((moments == 4) & np.isin(effective_zero(c), caps.bf16_moments_zero))
    )


def _state_precision_title(caps: Capabilities) -> str:
    moments = (
        f"bf16 Adam moments with ZeRO {set(caps.bf16_moments_zero)}"
        if caps.bf16_moments_zero
        else "fp32 Adam moments"
    )
    return ("bf16 gradients" if caps.bf16_grads else "fp32 gradients") + ", " + moments


def _state_precision_refusal(caps: Capabilities, p: Problem, c: dict) -> tuple[str, str]:
    """(what the target cannot express, the nearest it can) for the workload's gradient and moment bytes."""
    grad, moments = p.workload.grad_bytes_per_param, p.workload.optimizer_bytes_per_param
    elsewhere = ", or export to megatron" if caps.target != "megatron" else ""
    if not _grads_ok(caps, grad):
        return (
            f"{'bf16' if grad == 2 else f'{grad}-byte'} gradients (--grad-bytes {grad})",
            f"--grad-bytes 4{elsewhere if grad == 2 else ''}",
        )
    if moments != 4 or not caps.bf16_moments_zero:
        return (
            f"{'bf16' if moments == 4 else f'{moments // 2}-byte'} Adam moments (--moment-bytes {moments // 2})",
            f"--moment-bytes 4{elsewhere if moments == 4 else ''}",
        )
    return (
        f"bf16 Adam moments (--moment-bytes 2) with ZeRO-{int(effective_zero(c))} (its precision-aware "
        f"optimizer needs the distributed optimizer)",
        f"zero_stage {' or '.join(map(str, caps.bf16_moments_zero))}, or --moment-bytes 4",
    )


def _split_name(p: Problem, c: Cand) -> np.ndarray:
    kind = _split(p, c)[3]
    return np.vectorize(SPLIT_NAMES.get, otypes=[object])(kind)


def _writes_schedule(caps: Capabilities, c: Cand) -> np.ndarray:
    """Whether the candidates' pipeline schedule is one the target writes (with the virtual stages
    that a multi-stage one needs)."""
    multi = np.isin(c["sched"], [SCHEDULE_CODES[s] for s in caps.multi_stage_schedules])
    return np.isin(c["sched"], [SCHEDULE_CODES[s] for s in caps.pipeline_schedules]) & (
        ~multi | (c["v"] > 1)
    )


def _schedule_text(caps: Capabilities, c: dict) -> str:
    """A candidate's schedule as a refusal names it (with virtual_stages 1 where the target needs more)."""
    name = SCHEDULE_NAMES[c["sched"]]
    return (
        f"the {name} schedule with virtual_stages({c['v']})"
        if name in caps.multi_stage_schedules and name in caps.pipeline_schedules
        else f"the {name} schedule"
    )


def _ring_on_tpu_squared(caps: Capabilities, p: Problem) -> bool:
    """Whether the target's ring attention on this cluster's TPUs needs cp^2 to divide the
    sequence (MaxText's Tokamax ring: configs/types.py)."""
    return caps.tpu_ring_cp_seq_squared and p.cluster.accelerator.kind == "tpu"


def _or_(values) -> str:
    return " or ".join(map(str, values))


def _recipe_limit(precision: str, recipe_of, nearest) -> Limit:
    """The limit ``<precision>-recipe`` (fp8, fp4): a workload of that precision, which the target writes, needs
    a scaling recipe (``recipe_of(problem)``) among the target's ``<precision>_recipes``."""

    def recipes(caps: Capabilities) -> tuple[str, ...]:
        return getattr(caps, f"{precision}_recipes")

    return Limit(
        code=f"{precision}-recipe",
        needs=(),
        holds=lambda caps, p, c: (
            p.workload.precision != precision
            or precision not in caps.precisions
            or recipe_of(p) in recipes(caps)
        ),
        title=lambda caps, p: f"{precision} recipes {', '.join(recipes(caps)) or 'none'}",
        cannot=lambda caps, p, c: f"the {recipe_of(p)} {precision} recipe",
        nearest=lambda caps, p, c: nearest(caps, p),
    )


def _costed_elsewhere(caps: Capabilities, p: Problem) -> bool:
    """The target's framework is not the one the problem's step was costed for (its profile's loss kernels and
    the like are then the target's own, not the prediction's)."""
    return declaration_of(caps.target).PROFILE.name != p.workload.framework


def _fp8_recipe_nearest(caps: Capabilities, p: Problem) -> str:
    """--fp8-recipe with the target's recipes the part runs, the finer scalings first (blockwise and row-wise are
    nearest in accuracy to each other, per-tensor is the coarsest); else another target."""
    runs = dict(p.cluster.accelerator.fp8_recipe_ratio)
    order = ("blockwise", "rowwise", "mxfp8", "tensorwise")
    ok = [r for r in order if r in caps.fp8_recipes and r in runs]
    return f"--fp8-recipe {_or_(tuple(ok))}" if ok else "--precision bf16, or export to megatron"


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """One limit a framework may have, stated once for every export target: the rule
    ``<target>-<code>`` holds where ``holds(caps, problem, cand)``; the funnel titles it
    ``<framework>: <title>`` and a violating layout reads ``<framework> cannot express <cannot>
    (<the framework's reason, Capabilities.why>); nearest: <nearest>``."""

    code: str
    needs: tuple[str, ...]  # the candidate fields ``holds`` reads
    holds: Callable[[Capabilities, Problem, Cand], np.ndarray | bool]
    title: Callable[[Capabilities, Problem], str]
    cannot: Callable[[Capabilities, Problem, dict], str]
    nearest: Callable[[Capabilities, Problem, dict], str]

    @classmethod
    def feature(
        cls, *, code: str, used: Callable[[Problem, Cand], np.ndarray | bool], needs=()
    ) -> Limit:
        """A feature a target writes or not (``Capabilities.<capability>``, a boolean), binding only
        where the candidate ``used`` it; its words are ``LIMIT_WORDS[code]``."""
        words = LIMIT_WORDS[code]
        capability = words["capability"]
        return cls(
            code=code,
            needs=tuple(needs),
            holds=lambda caps, p, c: np.logical_or(
                getattr(caps, capability), np.logical_not(np.asarray(used(p, c), dtype=bool))
            ),
            title=lambda caps, p: (
                words["can"] if getattr(caps, capability) else words["cannot_title"]
            ),
            cannot=lambda caps, p, c: _refused_use(words, p, c),
            nearest=lambda caps, p, c: _feature_nearest(words, p),
        )

    @classmethod
    def option(cls, *, code: str, asked: Callable[[Problem], bool]) -> Limit:
        """A ``feature`` the workload ``asked`` for that acts only where the degree its words name is
        above 1: binding there, refused as ``<what> with <degree>(<n>)``."""
        degree = LIMIT_WORDS[code]["degree"]
        return cls.feature(
            code=code, needs=(degree,), used=lambda p, c: asked(p) & (c[degree] != 1)
        )

    @classmethod
    def choice(cls, *, code: str) -> Limit:
        """A named choice the target writes some of (``Capabilities.<allowed>``), in the words of
        ``LIMIT_WORDS[code]``: holds where the candidate's code ``field`` (an index of
        ``CODED_NAMES[field]``) is one of them, or, given ``where_above_1``, where that degree is 1
        (the choice unused). A refusal names the choice ``<refused or noun> <name>``."""
        words = LIMIT_WORDS[code]
        field, allowed, noun = words["field"], words["allowed"], words["noun"]
        names, refused = CODED_NAMES[field], words.get("refused", noun)
        where_above_1 = words.get("where_above_1", "")

        def writable(caps: Capabilities) -> tuple[str, ...]:
            return getattr(caps, allowed)

        def written(caps: Capabilities, c: Cand) -> np.ndarray:
            return np.isin(c[field], [names.index(n) for n in writable(caps)])

        return cls(
            code=code,
            needs=(where_above_1, field) if where_above_1 else (field,),
            holds=(
                (lambda caps, p, c: (c[where_above_1] == 1) | written(caps, c))
                if where_above_1
                else (lambda caps, p, c: written(caps, c))
            ),
            title=lambda caps, p: (
                f"{noun} {_or_(writable(caps))} where {where_above_1} > 1"
                if where_above_1
                else f"{noun} {', '.join(writable(caps))}"
            ),
            cannot=lambda caps, p, c: f"{refused} {names[c[field]]}",
            nearest=lambda caps, p, c: f"{noun} {_or_(writable(caps))}",
        )

    @classmethod
    def zero(
        cls,
        *,
        code: str,
        stages: str,
        title: str,
        cannot: Callable[[dict], str],
        needs: tuple[str, ...] = (),
        unless: Callable[[Cand], np.ndarray | bool] = lambda c: False,
        nearest: Callable[[tuple[int, ...], dict], str] = (
            lambda stages, c: f"zero_stage {_or_(stages)}"
        ),
    ) -> Limit:
        """The ZeRO stages a target writes (``Capabilities.<stages>``), of the stage that acts
        (``effective_zero``), except where ``unless`` holds; titled ``title`` with the set of stages
        in its ``{}``; ``cannot`` and ``nearest`` (given those stages) read the candidate."""

        def written(caps: Capabilities) -> tuple[int, ...]:
            return getattr(caps, stages)

        return cls(
            code=code,
            needs=("fsdp", "cp", "z", *needs),
            holds=lambda caps, p, c: unless(c) | np.isin(effective_zero(c), written(caps)),
            title=lambda caps, p: title.format(set(written(caps))),
            cannot=lambda caps, p, c: cannot(c),
            nearest=lambda caps, p, c: nearest(written(caps), c),
        )

    def rule(self, caps: Capabilities) -> Rule:
        """The limit as ``caps.target``'s rule; messages name the framework, its reason and the nearest fix."""
        code = f"{caps.target}-{self.code}"
        reason = f" ({caps.why[code]})" if code in caps.why else ""
        return Rule(
            code=code,
            needs=frozenset(self.needs),
            holds=lambda p, c: self.holds(caps, p, c),
            title=lambda p: f"{caps.framework}: {self.title(caps, p)}",
            why=lambda p, c: (
                f"{caps.framework} cannot express {self.cannot(caps, p, c)}{reason}; "
                f"nearest: {self.nearest(caps, p, c)}"
            ),
            kind="framework",
        )


def _moe(p: Problem) -> bool:
    return p.model.moe is not None


def _cp_beside_others(p: Problem, c: Cand) -> np.ndarray:
    return (c["cp"] > 1) & ((c["tp"] > 1) | (c["pp"] > 1) | (c["ep"] > 1))


def _ep_with_tp_and_pp(p: Problem, c: Cand) -> np.ndarray:
    return _moe(p) & (c["ep"] != 1) & (c["tp"] != 1) & (c["pp"] != 1)


def _deepep_asked(p: Problem) -> bool:
    return node_dedup(p.model, p.workload, p.cluster.accelerator.kind)


def _vendor_attention_asked(p: Problem, c: Cand) -> bool:
    return bool(p.workload.vendor_attention and vendor_attention(p.workload, p.cluster.accelerator))


def _refused_features(caps: Capabilities, p: Problem) -> list[str]:
    """The model's MODEL_FEATURES that ``caps``' target refuses."""
    return [f for f in model_features(p.model) if f in caps.refused_features]


def _writes_model(target: str, p: Problem) -> bool:
    """Whether ``target`` builds the model: no feature refused, and a decoder block it has."""
    caps = capabilities_of(target)
    if caps is None:
        return True
    blocks = not caps.model_blocks or any(MODEL_BLOCKS[b](p.model) for b in caps.model_blocks)
    return blocks and not set(model_features(p.model)) & set(caps.refused_features)


def _features_nearest(p: Problem) -> str:
    """The export targets that build the model (the features and model rules)."""
    able = [t for t in TARGETS if _writes_model(t, p)]
    return f"export to {' or '.join(able)}" if able else "no export target writes them all"


def _load_limit_words() -> dict[str, dict[str, str]]:
    """``limit_words.yaml``: per choice and feature limit, what it reads and its words (that file's
    header)."""
    path = Path(__file__).with_name("limit_words.yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)


LIMIT_WORDS = _load_limit_words()


def _refused_use(words: dict[str, str], p: Problem, c: dict) -> str:
    """What a layout refused by a feature limit asks for: an option's ``<what> with <degree>(n)``,
    else its ``cannot`` with the candidate's and the problem's numbers."""
    if "degree" in words:
        return f"{words['what']} with {words['degree']}({c[words['degree']]})"
    moe = p.model.moe
    return words["cannot"].format(
        **c,
        model_id=p.model_id,
        sliding_window=p.model.sliding_window,
        attention_chunk=p.model.attention_chunk,
        capacity_factor=None if moe is None else moe.capacity_factor,
    )


def _feature_nearest(words: dict[str, str], p: Problem) -> str:
    """The fix inside the workload, then the export targets that have the capability (and the one it qualifies,
    ``also``) and build the model (``_writes_model``)."""
    needed = [words["capability"], *([words["also"]] if "also" in words else [])]
    able = [
        t
        for t in TARGETS
        if all(getattr(capabilities_of(t), k) for k in needed) and _writes_model(t, p)
    ]
    export = f"export to {' or '.join(able)} {words.get('export_note', '')}".rstrip()
    return ", or ".join(([words["fix"]] if "fix" in words else []) + ([export] if able else []))


# The names a coded candidate field's values index (Limit.choice).
CODED_NAMES = {"cpf": CP_FLAVOURS, "r": RECOMPUTE_POLICIES, "f": OFFLOADS}

# The limits in funnel order; each reads the Capabilities fields it names.
LIMITS: tuple[Limit, ...] = (
    Limit(
        code="zero",
        needs=("fsdp", "cp", "z", "pp"),
        holds=lambda caps, p, c: (
            np.isin(effective_zero(c), caps.zero_stages)
            | ((c["pp"] > 1) & np.isin(effective_zero(c), caps.zero_stages_only_with_pp))
        ),
        title=lambda caps, p: (
            f"ZeRO stage in {set(caps.zero_stages)}"
            + (
                f" (and {set(caps.zero_stages_only_with_pp)} with pp > 1)"
                if caps.zero_stages_only_with_pp
                else ""
            )
        ),
        cannot=lambda caps, p, c: (
            f"ZeRO-{c['z']}" + (" with pp = 1" if c["z"] in caps.zero_stages_only_with_pp else "")
        ),
        nearest=lambda caps, p, c: f"zero_stage {_or_(s for s in caps.zero_stages if s)}",
    ),
    Limit.zero(
        code="replicas",
        needs=("dp",),
        stages="zero_stages_with_replicas",
        unless=lambda c: (c["dp"] == 1) | (effective_zero(c) == 0),
        title="dp replicas of a ZeRO shard only with ZeRO {}",
        cannot=lambda c: f"dp({c['dp']}) copies of a ZeRO-{c['z']} shard over fsdp({c['fsdp']})",
        nearest=lambda stages, c: f"dp=1, fsdp={c['dp'] * c['fsdp']}",
    ),
    Limit(
        code="cp",
        needs=("cp", "fsdp", "z"),
        holds=lambda caps, p, c: (
            (c["cp"] == 1)
            | (caps.context_parallel & np.isin(effective_zero(c), caps.zero_stages_with_cp))
        ),
        title=lambda caps, p: (
            "cp "
            + (f"with ZeRO {set(caps.zero_stages_with_cp)}" if caps.context_parallel else "= 1")
        ),
        cannot=lambda caps, p, c: f"cp({c['cp']}) with ZeRO-{c['z']}",
        nearest=lambda caps, p, c: (
            f"zero_stage {_or_(caps.zero_stages_with_cp)}"
            if caps.context_parallel
            else f"cp=1 with fsdp x {c['cp']}"
        ),
    ),
    Limit.choice(code="cp-flavour"),
    Limit.feature(code="cp-alone", needs=("cp", "tp", "pp", "ep"), used=_cp_beside_others),
    Limit(
        code="ring-cp-seq",
        needs=("cp", "cpf"),
        holds=lambda caps, p, c: (
            ~np.asarray(_ring_on_tpu_squared(caps, p))
            | (c["cp"] == 1)
            | (c["cpf"] != CP_FLAVOUR_CODES["ring"])
            | (p.workload.seq_len % (c["cp"] * c["cp"]) == 0)
        ),
        title=lambda caps, p: (
            "ring cp on TPUs where cp^2 divides the sequence"
            if _ring_on_tpu_squared(caps, p)
            else "ring cp at any sequence length"
        ),
        cannot=lambda caps, p, c: (
            f"ring cp({c['cp']}) over seq_len({p.workload.seq_len}), not a multiple of cp^2"
        ),
        nearest=lambda caps, p, c: "cp flavour allgather, or a cp whose square divides seq_len",
    ),
    Limit(
        code="pipeline",
        needs=("pp", "v", "sched", "fsdp", "cp", "z"),
        holds=lambda caps, p, c: (
            (c["pp"] == 1)
            | (_writes_schedule(caps, c) & np.isin(effective_zero(c), caps.zero_stages_with_pp))
        ),
        title=lambda caps, p: (
            f"pipelines {', '.join(caps.pipeline_schedules) or 'none'}"
            + (
                f" with ZeRO {set(caps.zero_stages_with_pp)}"
                if len(caps.zero_stages_with_pp) < 4
                else ""
            )
        ),
        cannot=lambda caps, p, c: (
            f"ZeRO-{c['z']} with pp({c['pp']})"
            if _writes_schedule(caps, c)
            else f"pp({c['pp']}) with {_schedule_text(caps, c)}"
        ),
        nearest=lambda caps, p, c: (
            f"zero_stage {_or_(caps.zero_stages_with_pp)}"
            if _writes_schedule(caps, c)
            else f"schedule {_or_(caps.pipeline_schedules)}"
            if caps.pipeline_schedules
            else "pp=1"
        ),
    ),
    Limit(
        code="split",
        needs=("pp", "v"),  # and the split choice ``spl`` where the candidates carry it
        holds=lambda caps, p, c: np.isin(_split_name(p, c), caps.pipeline_splits),
        title=lambda caps, p: f"pipeline splits {', '.join(caps.pipeline_splits)}",
        cannot=lambda caps, p, c: (
            f"the {_split_name(p, c)[0]} split of num_layers({p.model.num_layers}) over "
            f"pp({c['pp']}) x virtual_stages({c['v']})"
        ),
        nearest=lambda caps, p, c: (
            "the engine's split (--pipeline-splits without balanced), or export to megatron"
            if _split_name(p, c)[0] == "balanced"
            else "a pp that divides the layers, or export to megatron"
        ),
    ),
    Limit.choice(code="recompute"),
    Limit.choice(code="offload"),
    Limit.zero(
        code="offload-zero",
        needs=("f",),
        stages="offload_zero_stages",
        unless=lambda c: c["f"] == 0,
        title="offload with ZeRO {}",
        cannot=lambda c: f"offload {OFFLOADS[c['f']]} with ZeRO-{effective_zero(c)}",
    ),
    Limit(
        code="kv",
        needs=("tp",),
        holds=lambda caps, p, c: caps.kv_replication | (c["tp"] <= p.model.num_kv_heads),
        title=lambda caps, p: (
            f"tp <= num_kv_heads({p.model.num_kv_heads}) (no KV-head replication)"
        ),
        cannot=lambda caps, p, c: (
            f"tp({c['tp']}) > num_kv_heads({p.model.num_kv_heads}) (replicated KV heads)"
        ),
        nearest=lambda caps, p, c: f"tp={p.model.num_kv_heads} with the rest in fsdp",
    ),
    Limit(
        code="precision",
        needs=(),
        holds=lambda caps, p, c: p.workload.precision in caps.precisions,
        title=lambda caps, p: f"precision {', '.join(caps.precisions)}",
        cannot=lambda caps, p, c: f"{p.workload.precision} training",
        nearest=lambda caps, p, c: f"--precision {caps.precisions[0]}, or export to megatron",
    ),
    # fp8 (fp4) a target cannot write at all is the precision limit's
    _recipe_limit(
        "fp8",
        lambda p: fp8_recipe_of(p.workload, p.cluster.accelerator.kind),
        lambda caps, p: _fp8_recipe_nearest(caps, p),
    ),
    _recipe_limit(
        "fp4",
        lambda p: fp4_recipe_of(p.workload),
        lambda caps, p: (
            f"--fp4-recipe {_or_(caps.fp4_recipes)}" if caps.fp4_recipes else "--precision fp8"
        ),
    ),
    Limit(
        code="etp",
        needs=("ep", "etp", "tp"),
        holds=lambda caps, p, c: not _moe(p) or _etp_ok(caps, c),
        title=lambda caps, p: (
            f"expert TP {', '.join(caps.expert_tensor)} with ep > 1, "
            f"{', '.join(caps.expert_tensor_without_ep) or 'none'} with ep = 1"
        ),
        cannot=lambda caps, p, c: f"etp({c['etp']}) with ep({c['ep']}) and tp({c['tp']})",
        nearest=lambda caps, p, c: _etp_nearest(caps, c),
    ),
    Limit(
        code="experts",
        needs=(*ALL_DEGREE_NAMES, "z"),
        holds=lambda caps, p, c: (
            not _moe(p) or _expert_span(caps, c) % np.maximum(c["ep"] * c["etp"], 1) == 0
        ),
        title=lambda caps, p: f"ep x etp divides {' x '.join(caps.expert_groups)}",
        cannot=lambda caps, p, c: (
            f"ep({c['ep']}) x etp({c['etp']}) = {c['ep'] * c['etp']} expert devices, which do not "
            f"divide the {int(_expert_span(caps, c))} devices its expert groups can take "
            f"({_span_text(caps, c)})"
        ),
        nearest=lambda caps, p, c: _experts_nearest(caps, c),
    ),
    Limit.feature(code="ep-tp-pp", needs=("ep", "tp", "pp"), used=_ep_with_tp_and_pp),
    Limit.option(code="deepep", asked=_deepep_asked),
    Limit.option(code="fp8-dispatch", asked=lambda p: p.workload.fp8_dispatch),
    # only where the workload asks for it (--vendor-attention): a profile's own choice travels
    # with the profile
    Limit.feature(code="vendor-attention", used=_vendor_attention_asked),
    Limit.feature(code="triton-attention", used=lambda p, c: p.workload.triton_attention),
    Limit(
        code="cuda-graphs",
        needs=("r",),
        holds=_graphs_ok,
        title=_graphs_title,
        cannot=lambda caps, p, c: _graphs_refusal(caps, p, c)[0],
        nearest=lambda caps, p, c: _graphs_refusal(caps, p, c)[1],
    ),
    Limit.option(code="tp-overlap", asked=lambda p: bool(p.workload.tp_comm_overlap)),
    Limit.option(code="tp-backward-async", asked=lambda p: bool(p.workload.tp_backward_async)),
    Limit.option(code="tp-backward-waits", asked=lambda p: p.workload.tp_backward_async is False),
    Limit.option(code="pp-comm-waits", asked=lambda p: p.workload.pp_comm_overlap is False),
    Limit.feature(
        code="grad-reduce-waits",
        needs=("dp", "fsdp", "cp"),
        used=lambda p, c: (
            (p.workload.grad_reduce_overlap is False) & (c["dp"] * c["fsdp"] * c["cp"] != 1)
        ),
    ),
    Limit.feature(
        code="grad-accumulation-fusion", used=lambda p, c: bool(p.workload.grad_accumulation_fusion)
    ),
    Limit.feature(
        code="grad-accumulation-apart",
        used=lambda p, c: p.workload.grad_accumulation_fusion is False,
    ),
    # a given layout's (candidate_of) and the search's degrees (search.space.build_space: the space's one value)
    Limit.feature(
        code="sp", needs=("tp",), used=lambda p, c: "sp" in c and (c["sp"] != 0) & (c["tp"] > 1)
    ),
    Limit.feature(
        code="tp-without-sp",
        needs=("tp",),
        used=lambda p, c: "sp" in c and (c["sp"] == 0) & (c["tp"] > 1),
    ),
    Limit.option(code="ep-overlap", asked=lambda p: bool(p.workload.ep_comm_overlap) and _moe(p)),
    Limit.feature(code="unfused-attention", used=lambda p, c: not p.workload.flash_attention),
    Limit.feature(code="bf16-logits", used=lambda p, c: not p.workload.fp32_logits),
    Limit(
        code="cross-entropy",
        needs=(),
        # binding where the target is the framework the step was costed for: another's runs its own loss
        holds=lambda caps, p, c: (
            p.workload.cross_entropy in caps.cross_entropies or _costed_elsewhere(caps, p)
        ),
        title=lambda caps, p: f"loss kernels {', '.join(caps.cross_entropies)}",
        cannot=lambda caps, p, c: f"the {p.workload.cross_entropy} loss kernels (--cross-entropy)",
        nearest=lambda caps, p, c: f"--cross-entropy {_or_(caps.cross_entropies)}",
    ),
    Limit.feature(code="capacity", used=lambda p, c: _moe(p) and not p.model.dropless_moe),
    Limit(
        code="state-precision",
        needs=("fsdp", "cp", "z"),
        holds=_state_precision_ok,
        title=lambda caps, p: _state_precision_title(caps),
        cannot=lambda caps, p, c: _state_precision_refusal(caps, p, c)[0],
        nearest=lambda caps, p, c: _state_precision_refusal(caps, p, c)[1],
    ),
    Limit.feature(code="sinks", used=lambda p, c: p.model.attention_sinks),
    # a window as long as the sequence attends over all of it
    Limit.feature(
        code="window", used=lambda p, c: (p.model.sliding_window or np.inf) < p.workload.seq_len
    ),
    # chunks as long as the sequence are one chunk: full attention
    Limit.feature(
        code="chunk", used=lambda p, c: (p.model.attention_chunk or np.inf) < p.workload.seq_len
    ),
    Limit.option(
        code="chunk-cp", asked=lambda p: (p.model.attention_chunk or np.inf) < p.workload.seq_len
    ),
    # a framework whose gpt-oss model runs under fewer options than its other models: the workload's choices
    # first (no layout can help them, so the funnel names them), then the degrees
    Limit.feature(
        code="gpt-oss-compile",
        used=lambda p, c: gpt_oss_block(p.model) and p.workload.torch_compile is not False,
    ),
    Limit.feature(
        code="gpt-oss-fp8",
        used=lambda p, c: gpt_oss_block(p.model) and p.workload.precision == "fp8",
    ),
    Limit.option(code="gpt-oss-pp", asked=lambda p: gpt_oss_block(p.model)),
    Limit.option(code="gpt-oss-cp", asked=lambda p: gpt_oss_block(p.model)),
    Limit(
        code="features",
        needs=(),
        holds=lambda caps, p, c: not _refused_features(caps, p),
        title=lambda caps, p: (
            f"models without {', '.join(caps.refused_features)}"
            if caps.refused_features
            else "every modelled feature"
        ),
        cannot=lambda caps, p, c: (
            f"the {' and the '.join(_refused_features(caps, p))} of {p.model_id} ("
            + "; ".join(caps.refused_features[f] for f in _refused_features(caps, p))
            + ")"
        ),
        nearest=lambda caps, p, c: _features_nearest(p),
    ),
    Limit(
        code="model",
        needs=(),
        holds=lambda caps, p, c: (
            not caps.model_blocks or any(MODEL_BLOCKS[b](p.model) for b in caps.model_blocks)
        ),
        title=lambda caps, p: f"a model of the {' or '.join(caps.model_blocks) or 'any'} family",
        cannot=lambda caps, p, c: (
            f"model {p.model_id} (its decoder blocks: {' or '.join(caps.model_blocks)}; its "
            f"features: {', '.join(model_features(p.model)) or 'none'})"
        ),
        nearest=lambda caps, p, c: "export to megatron",
    ),
)


def framework_rules(caps: Capabilities) -> tuple[Rule, ...]:
    """The rules a target's capabilities imply (``LIMITS``, each for ``caps.target``)."""
    return tuple(limit.rule(caps) for limit in LIMITS)


# ----------------------------------------------------------------------------- evaluation
def registry(
    options: SearchOptions | None = None,
    capabilities: Capabilities | None = None,
    canonical: bool = False,
) -> tuple[Rule, ...]:
    """The rules in force, in funnel order: the user's options, structure, the search's canonical
    forms, then an export target's limits. A search that offloads nothing (``options.offload``
    none alone) leaves out the rules on the offload choice: offload none passes every one."""
    rules = (
        option_rules(options)
        + STRUCTURE
        + CP_RULES
        + OFFLOAD_RULES
        + (CANONICAL + CP_CANONICAL if canonical else ())
        + (framework_rules(capabilities) if capabilities else ())
    )
    if options is not None and options.offload == ("none",):
        rules = tuple(rule for rule in rules if "f" not in rule.needs)
    return rules


def candidate_of(layout: Layout, k: int | None = None) -> Cand:
    """One layout as a candidate (arrays of length 1)."""
    values = {
        **layout.all_degrees,
        "v": layout.virtual_stages,
        "sched": SCHEDULE_CODES.get(layout.schedule, -1),
        "cpf": CP_FLAVOUR_CODES.get(layout.cp_flavour, -1),
        "k": layout.num_microbatches if k is None else k,
        "z": layout.zero_stage,
        "f": OFFLOADS.index(layout.offload) if layout.offload in OFFLOADS else -1,
        "r": RECOMPUTE_CODES.get(layout.recompute, -1),
        "lf": layout.first_stage_layers or 0,
        "ll": layout.last_stage_layers or 0,
        "spl": int(layout.balanced_split),
        "sp": int(layout.sequence_parallel),
    }
    return {key: np.array([value], dtype=np.int64) for key, value in values.items()}


def violations(problem: Problem, layout: Layout, rules: tuple[Rule, ...]) -> list[Violation]:
    """Each rule the layout breaks, with its message (the first degree rule stops the rest)."""
    cand = candidate_of(layout)
    out = []
    for rule in rules:
        if not rule.mask(problem, cand).all():
            out.append(
                Violation(rule.code, rule.why(problem, {key: int(v[0]) for key, v in cand.items()}))
            )
            if rule.code == "degree":
                break
    return out
