"""The step's cost terms, each a pure function of exactly the decisions it depends on.

Every function takes numpy arrays (one row per key) so that one call costs a whole table:
``estimate()`` calls them with one row, the exhaustive search and the CP-SAT tables with
one row per key. Keys:

- shape ``S`` = (dp, fsdp, tp, pp, cp, virtual stages v, CP flavour), in ``Shapes``;
- ``K`` microbatches, ``r`` recompute code (RECOMPUTE_CODES: a policy's saved tensors), ``z`` ZeRO stage;
- ``o`` axis order, reduced to the ring coefficients of each group (``Coeffs``).

Overlap rule (docs/cost_model.md "Overlap"; exposed = max(0, collective - its compute window)):
- TP collectives are on the critical path (fully exposed);
- FSDP weight gathers hide behind the previous layer's forward (the first layer's is
  exposed); in backward the gather plus the gradient reduce-scatter hide behind the layer's
  backward; the vocabulary gather hides behind the logits;
- CP ring passes hide behind the attention core of the same layer (the allgather and all-to-all
  flavours' collectives are exposed: ``cp_per_microbatch``);
- DP / ZeRO-1/2 / KV-replica gradient reductions hide behind the backward of the last
  microbatch; the ZeRO-1/2 gather of updated weights is exposed;
- pipeline sends hide in steady state; fill and drain (2 (p - 1) sends) are exposed.
A hidden second is not free: the compute beside it slows by ``Accelerator.overlap_interference`` of
it (``interference``; costs.step charges the once-per-step reductions and gathers theirs).
Step = (K + (p - 1)/v) x slowest stage's microbatch + per-step terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache, lru_cache, partial
from statistics import NormalDist
from typing import Any

import numpy as np

from layoutsearch.core.arrays import per_key, read_only
from layoutsearch.core.frameworks import (
    cross_entropy_of,
    fp4_recipe_of,
    fp8_activations_of,
    fp8_param_gather_of,
    fp8_recipe_of,
    grad_accumulation_fusion_of,
    grad_reduce_overlap_of,
    node_dedup,
    pp_comm_overlap_of,
    profile_of,
    tp_backward_async_of,
    transient_zero3_weights,
    vendor_attention,
)
from layoutsearch.core.placement import EXPERT_NESTING, expert_degrees
from layoutsearch.core.specs import (
    CP_FLAVOUR_CODES,
    RECOMPUTE_POLICIES,
    SCHEDULE_CODES,
    Accelerator,
    ModelSpec,
    MoeSpec,
    Workload,
)
from layoutsearch.core.stages import (
    BALANCED,
    BALANCED_SPLIT,
    balanced_bubble_stages,
    balanced_split,
    balanced_stage_chunks,
    chunk_sizes,
    split_layers,
)
from layoutsearch.costs import flops, gemm, memory, params, pipeline, power
from layoutsearch.costs.comms import (
    RING_FIELDS,
    Contention,
    RingCoefficients,
    all_to_all_coefficients_of,
    contention_of,
    contention_s,
    expert_factor_table,
    factor_table,
    link_use_of,
    per_distinct_span,
    replica_spans,
    ring_coefficients_of,
    ring_time,
    send_coefficients_of,
    spans_from_factors,
)

SHAPE_KEYS = ("dp", "fsdp", "tp", "pp", "cp", "v", "ep", "etp")
EXTRA_KEYS = ("sched", "lf", "ll", "cpf", "cpa", "spl")  # Shapes fields with a default
ALLGATHER = CP_FLAVOUR_CODES["allgather"]


def _unset() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Shapes:
    """Parallel degrees, virtual stages and the pipeline schedule (SCHEDULE_CODES), as int64
    arrays of equal length; ``sched`` defaults to what v implies (1f1b, or interleaved above 1)."""

    dp: np.ndarray
    fsdp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    v: np.ndarray
    # an empty array (the default) stands for "not given"
    ep: np.ndarray = field(default_factory=_unset)  # expert parallelism (1 for a dense model)
    etp: np.ndarray = field(default_factory=_unset)  # expert tensor parallelism
    sched: np.ndarray = field(default_factory=_unset)
    # layers of the first stage when given (0: the engine's split, core.stages)
    lf: np.ndarray = field(default_factory=_unset)
    ll: np.ndarray = field(default_factory=_unset)  # layers of the last stage when given
    cpf: np.ndarray = field(default_factory=_unset)  # CP flavour code (CP_FLAVOUR_CODES; 0 ring)
    # the cp ranks that trade the sequence split for a head split by all-to-all (core.rules.cp_a2a_degree)
    cpa: np.ndarray = field(default_factory=_unset)
    # the pipeline split: 0 the engine's (core.stages.split_layers), 1 the balanced one (BALANCED_SPLIT)
    spl: np.ndarray = field(default_factory=_unset)

    def __post_init__(self):
        if not self.sched.size:
            implied = np.where(self.v > 1, SCHEDULE_CODES["interleaved"], SCHEDULE_CODES["1f1b"])
            object.__setattr__(self, "sched", implied.astype(np.int64))
        for name in ("lf", "ll", "cpf", "spl"):
            if not getattr(self, name).size:
                object.__setattr__(self, name, np.zeros_like(self.pp))
        for name in ("ep", "etp", "cpa"):
            if not getattr(self, name).size:
                object.__setattr__(self, name, np.ones_like(self.pp))

    @classmethod
    def of(cls, **degrees) -> Shapes:
        arrays = {
            k: np.atleast_1d(np.asarray(degrees.get(k, 1), dtype=np.int64)) for k in SHAPE_KEYS
        }
        extra = {
            k: np.atleast_1d(np.asarray(degrees[k], dtype=np.int64))
            for k in EXTRA_KEYS
            if degrees.get(k) is not None
        }
        return cls(**arrays, **extra)

    def take(self, index) -> Shapes:
        out = Shapes(**{k: getattr(self, k)[index] for k in (*SHAPE_KEYS, *EXTRA_KEYS)})
        for layers, split in self.__dict__.get(
            "_split", {}
        ).items():  # carried, not recomputed, for the rows
            out.__dict__.setdefault("_split", {})[layers] = tuple(a[index] for a in split)
        return out

    def layer_split(self, model: ModelSpec):
        """``core.stages.split_layers`` of these rows for the model (first, middle, last, kind, ok), computed once."""
        cache = self.__dict__.setdefault("_split", {})
        layers, head = key = (model.num_layers, params.output_layer_equivalents(model))
        if key not in cache:
            split = split_layers(layers, self.pp, self.v, self.lf, self.ll, head=head)
            if (self.spl == BALANCED_SPLIT).any():
                split = _with_balanced(split, model, self.pp, self.v, self.spl == BALANCED_SPLIT)
            cache[key] = split
        return cache[key]

    def moe_layer_split(self, model: ModelSpec):
        """(the most MoE layers on a device but the last, the MoE layers of the last) of these rows' splits
        (``moe_layers_per_stage``), from the devices' own (``stage_compositions``)."""
        comp = self.stage_compositions(model)
        middle = np.maximum.reduce([comp[5 + 3 * j] for j in range(MIDDLE_CANDIDATES)])
        return np.maximum(comp[1], middle), comp[3]

    def stage_compositions(self, model: ModelSpec):
        """The layers of these rows' first, last and middle-candidate devices (``stage_compositions``), computed
        once, like ``layer_split`` (and carried by ``take`` with it)."""
        cache = self.__dict__.setdefault("_split", {})
        key = ("devices", model)
        if key not in cache:
            cache[key] = stage_compositions(model, self)
        return cache[key]

    def bubble_stages(self, model: ModelSpec) -> np.ndarray:
        """The v of each row's bubble: v, or a balanced split's ``core.stages.balanced_bubble_stages``."""
        balanced = self.spl == BALANCED_SPLIT
        if not balanced.any():
            return _f(self.v)
        weights = params.layer_weights(model)
        bubble = per_key(
            lambda pp, v: np.array(
                [
                    balanced_bubble_stages(weights, int(a), int(b))
                    for a, b in zip(pp, v, strict=True)
                ]
            ),
            self.pp,
            self.v,
        )
        return np.where(balanced, bubble, _f(self.v))

    @property
    def units(self):
        return self.dp * self.fsdp

    @property
    def shards(self):
        """Devices holding one copy of the weights that ZeRO shards over: fsdp x cp."""
        return self.fsdp * self.cp

    @property
    def expert_shards(self):
        """Devices ZeRO shards one copy of an expert shard over (``placement.expert_degrees`` efsdp)."""
        return expert_degrees(
            {
                "dp": self.dp,
                "fsdp": self.fsdp,
                "tp": self.tp,
                "cp": self.cp,
                "pp": self.pp,
                "ep": self.ep,
                "etp": self.etp,
            }
        )["efsdp"]


@dataclass(frozen=True)
class Coeffs:
    """Ring coefficients per row for each communication group of a placement."""

    tp: RingCoefficients
    cp: RingCoefficients
    cp_a2a: RingCoefficients  # the cp group's AllToAll (Ulysses)
    cp_in: RingCoefficients  # its AllToAll inside the node (a2a+ring)
    shard: RingCoefficients  # fsdp x cp
    dp: RingCoefficients  # replicated copies (dp)
    dp_zero0: RingCoefficients  # dp x fsdp x cp (every copy, when nothing is sharded)
    kv: RingCoefficients  # the TP ranks sharing one KV head
    pp: RingCoefficients  # point-to-point to the next stage
    ep: RingCoefficients  # expert parallelism: AllToAll coefficients (per byte a member sends)
    ep_in: RingCoefficients  # its NVLink / ICI level alone
    ep_out: RingCoefficients  # its scale-out level alone (members: the nodes the group spans)
    etp: RingCoefficients  # expert tensor parallelism
    eshard: RingCoefficients  # the expert ZeRO shard group (efsdp)
    erep: RingCoefficients  # the expert replicas (edpr)
    eall: RingCoefficients  # every copy of an expert shard (efsdp x edpr)
    # where the hidden TP and CP traffic delays the ZeRO-3 shard group / the gradient reductions
    # (``shard_link_traffic``, ``reduction_link_traffic``); None: none costed (a test's groups)
    shard_contention: Contention | None = None
    reduce_contention: Contention | None = None


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _with_balanced(split, model: ModelSpec, pp, v, balanced):
    """``split`` with the ``balanced`` rows' (first, middle, last, kind, ok) the balanced split's
    (``core.stages.balanced_split`` of ``params.layer_weights``)."""
    weights = params.layer_weights(model)
    rows = per_key(
        lambda pp, v: tuple(
            np.array(column, dtype=np.int64)
            for column in zip(
                *(balanced_split(weights, int(a), int(b)) for a, b in zip(pp, v, strict=True)),
                strict=True,
            )
        ),
        pp,
        v,
    )
    first, middle, last, ok = (np.asarray(x, dtype=np.int64) for x in rows)
    kind = np.full_like(first, BALANCED)
    return tuple(
        np.where(balanced, new, old)
        for new, old in zip((first, middle, last, kind, ok.astype(bool)), split, strict=True)
    )


def tokens_per_microbatch(workload: Workload, sh: Shapes, k):
    """m: tokens one device processes per microbatch (its data unit's sequences / cp)."""
    return _f(workload.global_batch_tokens) / (sh.units * k * sh.cp)


def layout_split(model: ModelSpec, layout) -> tuple[int, int, int, int, bool]:
    """(first, middle, last, kind, ok) of one Layout's pipeline (``Shapes.layer_split``): the engine's split,
    the given first/last counts, or the balanced split."""
    sh = Shapes.of(
        pp=layout.pp,
        v=layout.virtual_stages,
        lf=layout.first_stage_layers or 0,
        ll=layout.last_stage_layers or 0,
        spl=int(layout.balanced_split),
    )
    first, middle, last, kind, ok = (x[0] for x in sh.layer_split(model))
    return int(first), int(middle), int(last), int(kind), bool(ok)


def moe_layers_per_stage(model: ModelSpec, sh: Shapes, last=False):
    """MoE layers of the last stage (``last``), else the most any other stage holds (the first stage's terms
    stand for the heaviest of the others, ``layers_per_stage``): counted over the layers each stage's chunks
    hold (``core.stages.chunk_sizes``, or the balanced split's), so DeepSeek-V3's three dense layers lighten
    the first stage and a middle stage holds MoE layers only; 0 for a dense model."""
    if model.moe is None:
        return np.zeros_like(_f(sh.pp))
    others, own_last = sh.moe_layer_split(model)
    return np.where(last, own_last, others)


def layers_per_stage(model: ModelSpec, sh: Shapes, last=False):
    """Layers of the last stage (``last``), else of the first stage standing for the middle ones: the
    heavier of the two (core.stages; uneven splits make the first stage lighter than the middle)."""
    first, middle, final, _, _ = sh.layer_split(model)
    return np.where(last, final, np.maximum(first, middle))


# the middle devices a first stage's memory compares (``stage_compositions``)
MIDDLE_CANDIDATES = 3


def stage_compositions(model: ModelSpec, sh: Shapes):
    """Per row, the layers the devices hold under the row's split (``core.stages.chunk_sizes``, or the balanced
    split's; a device holds chunks i, i + pp, ..., a V-shaped schedule's device i chunks i and 2 pp - 1 - i;
    DualPipe's units are its stages): (the first device's layers, its MoE layers, the last device's layers, its
    MoE layers), then (layers, MoE layers, index) of ``MIDDLE_CANDIDATES`` middle units: the second (the most
    microbatches in flight), the one with the most layers (then the most dense layers) and the one with the
    most MoE layers (then the most layers), the earliest of a tie. The middle units are 1 .. pp - 2 (V-shaped:
    1 .. pp - 1, none holding the output head); a candidate is (0, 0, 1) where there is none, every MoE count 0
    for a dense model, all layers on each device with pp = 1."""
    first, middle, final, kind, ok = sh.layer_split(model)
    v_shaped = np.isin(sh.sched, pipeline.V_SHAPED) & (sh.pp > 1)
    if model.moe is None and not np.any(v_shaped):  # the middle stages differ by a layer at most
        zero, one = np.zeros(np.shape(sh.pp)), np.ones(np.shape(sh.pp))
        mid = np.where(sh.pp > 2, _f(middle), 0.0)
        return (_f(first), zero, _f(final), zero) + (mid, zero, one) * MIDDLE_CANDIDATES
    weights = params.layer_weights(model)

    def of(pp, v, kind, first, final, ok, v_shaped):
        out = np.zeros((4 + 3 * MIDDLE_CANDIDATES, len(pp)))
        for i, row in enumerate(zip(pp, v, kind, first, final, ok, v_shaped, strict=True)):
            out[:, i] = _devices_of_split(model, weights, *(int(x) for x in row))
        return tuple(out)

    first, final = np.where(ok, first, 0), np.where(ok, final, 0)  # an invalid split's counts: any
    return per_key(of, sh.pp, sh.v, kind, first, final, ok, v_shaped)


def _devices_of_split(
    model: ModelSpec, weights, pp, v, kind, first, last, ok, v_shaped=False
) -> tuple:
    """``stage_compositions`` of one split."""
    if pp == 1 or not ok:
        everything = (model.num_layers, model.num_moe_layers)
        return (*everything, *everything) + (0, 0, 1) * MIDDLE_CANDIDATES
    if kind == BALANCED:
        sizes = balanced_stage_chunks(weights, pp, v)
    else:
        sizes = chunk_sizes(model.num_layers, pp, v, kind, first, last)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    layers, moe = [0] * pp, [0] * pp
    for i, size in enumerate(sizes):
        device = min(i, 2 * pp - 1 - i) if v_shaped else i % pp
        layers[device] += size
        moe[device] += params.moe_layers_in(model, int(starts[i]), int(starts[i]) + size)
    middle = range(1, pp if v_shaped else pp - 1)
    if not middle:
        return (layers[0], moe[0], layers[-1], moe[-1]) + (0, 0, 1) * MIDDLE_CANDIDATES
    most_layers = max(middle, key=lambda d: (layers[d], layers[d] - moe[d], -d))
    most_moe = max(middle, key=lambda d: (moe[d], layers[d], -d))
    candidates = (1, most_layers, most_moe)
    return (layers[0], moe[0], layers[-1], moe[-1]) + tuple(
        x for d in candidates for x in (layers[d], moe[d], d)
    )


def first_devices(model: ModelSpec, sh: Shapes):
    """((dense, MoE) layers of the first device, [(dense, MoE) layers and stage index of a middle device, ...])
    that the first stage's memory compares: the first device holds its own stage (DualPipe's: stages 0 and
    p - 1, both ends; a V-shaped schedule's: the first and the last chunk), a middle device a middle stage's
    (DualPipe's: two, i and p - 1 - i, each taken as the candidate stage, an upper bound; V-shaped: chunks i and
    2p - 1 - i); the distinct candidates of ``stage_compositions`` (a middle device of none: (0, 0))."""
    comp = sh.stage_compositions(model)
    first, first_moe, last, last_moe = comp[:4]
    dual = _f(_dualpipe(sh))
    end = (first - first_moe + dual * (last - last_moe), first_moe + dual * last_moe)
    middles: list[tuple] = []
    seen: list[tuple] = []
    for j in range(MIDDLE_CANDIDATES):
        layers, moe, index = comp[4 + 3 * j : 7 + 3 * j]
        if any(np.array_equal(layers, a) and np.array_equal(moe, b) for a, b in seen):
            continue
        seen.append((layers, moe))
        middles.append(((1 + dual) * (layers - moe), (1 + dual) * moe, index))
    return end, middles


def stage_layers(model: ModelSpec, sh: Shapes, last, mtp=0.0):
    """(layers, MoE layers) of the stage a step's compute is costed on: ``layers_per_stage`` and
    ``moe_layers_per_stage`` of the last stage (``last``), else of the first standing for the others; on
    DualPipe's last device the mean of both ends (it runs each for half the microbatches); ``mtp``
    multi-token-prediction modules on it count one layer each, a MoE layer where the model has MoE layers
    (``params.mtp_params_per_layer``). MoE layers 0 for a dense model."""
    both = _dualpipe(sh) & np.asarray(last)
    own = layers_per_stage(model, sh, last)
    layers = np.where(both, (layers_per_stage(model, sh) + own) / 2, own)
    layers = layers + mtp if model.mtp_layers else layers
    if model.moe is None:
        return layers, 0.0
    own_moe = moe_layers_per_stage(model, sh, last)
    moe = np.where(both, (moe_layers_per_stage(model, sh) + own_moe) / 2, own_moe)
    return layers, moe + mtp if model.mtp_layers else moe


def stage_moe_share(model: ModelSpec, layers, moe_layers):
    """The MoE share of a stage's own layers, ``moe_layers`` / ``layers`` (arrays; the MoE layers no more than
    the layers, an invalid split's counts being any): the share its per-layer terms are costed at
    (``at_stage_share``), so that its layers x a term is its dense layers' plus its MoE layers' (DeepSeek-V3's
    three dense layers lighten the stage holding them, a stage of MoE layers only is costed at MoE layers, not
    at the mean layer's 58/61); 0 for a dense model."""
    if model.moe is None:
        return 0.0
    layers = _f(layers)
    return np.clip(_f(moe_layers), 0.0, layers) / np.maximum(layers, 1.0)


def at_stage_share(model: ModelSpec, share, of):
    """``of(s)`` of a per-layer term linear in the layer's MoE share s (``flops.layer_share``) at each row's
    ``share`` (``stage_moe_share``): a dense layer's (s = 0) and a MoE layer's (s = 1), mixed; a tuple or dict
    entry by entry. A dense model's ``of(None)``, the term as it was."""
    if model.moe is None:
        return of(None)
    return _mix(of(0.0), of(1.0), share)


def share_keys(model: ModelSpec, share):
    """(the distinct MoE shares of a stage's rows (``stage_moe_share``), each row's index among them)
    for ``per_key_at_share``; None for a dense model."""
    if model.moe is None:
        return None
    shares, index = np.unique(share, return_inverse=True)
    return shares, index.reshape(np.shape(share))


def per_key_at_share(shares, of, *keys):
    """``at_stage_share(model, share, lambda s: per_key(lambda *k: of(*k, s), *keys))`` of an
    elementwise ``of(*keys, s)``, with ``shares`` the share's ``share_keys``: the same values, each
    costed and mixed once per distinct tuple of the keys and the share, then spread (a term of
    (tp, r) over a stage's few distinct shares is not spread to every entry twice and mixed there)."""
    if shares is None:
        return per_key(lambda *k: of(*k, None), *keys)
    values, index = shares

    def mixed(*k):
        return _mix(of(*k[:-1], 0.0), of(*k[:-1], 1.0), values[k[-1]])

    return per_key(mixed, *keys, index)


def _mix(dense, moe, share):
    if isinstance(dense, tuple):
        return tuple(_mix(d, m, share) for d, m in zip(dense, moe, strict=True))
    if isinstance(dense, dict):
        return {k: _mix(dense[k], moe[k], share) for k in dense}
    return dense + share * (moe - dense)


def backward_split(model: ModelSpec, workload: Workload) -> tuple[float, float, float]:
    """(F, B, W) / (F + B + W): a layer's forward, input-gradient and weight-gradient shares of its
    FLOPs per token, for the zero-bubble schedules' bubble (costs.pipeline). A matmul's backward is
    two of its forward, one for the input gradient and one for the weights (dgrad and wgrad); the
    attention core has no weights, so all its backward (``FLASH_ATTENTION_BACKWARD_OVER_FORWARD``
    with fused kernels) is input gradient. Routed experts count at their mean load; the output head
    (on one stage) and the recompute are left out."""
    mm = float(flops.matmul_flops_per_token_per_layer(model))
    if model.moe is not None:
        mm += 2.0 * float(flops.routed_params_per_token_per_layer(model))
    causal_skip = workload.causal and workload.flash_attention
    attn = float(flops.attention_flops_per_token_per_layer(model, workload.seq_len, causal_skip))
    attn_bwd = (
        flops.FLASH_ATTENTION_BACKWARD_OVER_FORWARD
        if workload.flash_attention
        else flops.BACKWARD_OVER_FORWARD
    )
    wgrad = mm * flops.BACKWARD_OVER_FORWARD / 2
    fwd, dgrad = mm + attn, mm * flops.BACKWARD_OVER_FORWARD / 2 + attn * attn_bwd
    total = fwd + dgrad + wgrad
    return fwd / total, dgrad / total, wgrad / total


def step_multiplier(
    sh: Shapes, k, split: tuple[float, float, float], model: ModelSpec | None = None
):
    """(K + bubble): microbatch-times per step on the slowest stage, the bubble of the rows' schedules
    (``pipeline.bubble_microbatches_array``; Narayanan et al. 2021 for 1F1B, (p - 1)/v interleaved)
    with ``split`` the (F, B, W) shares of ``backward_split``; with the ``model``, a balanced split's
    uneven chunks at ``Shapes.bubble_stages``."""
    v = _f(sh.v) if model is None else sh.bubble_stages(model)
    return k + pipeline.bubble_microbatches_array(_f(sh.pp), v, sh.sched, split)


def paced_share(sh: Shapes, k, mult):
    """K / (K + bubble) (``mult``, ``step_multiplier``): the share of a step a last stage slower than the others
    paces (``costs.step.paced_max``); 1 where one device holds both ends of the pipeline (DualPipe, ZB-V,
    DualPipeV), whose slower device paces the bubble too, and without a pipeline (the bubble is 0)."""
    both_ends = np.isin(sh.sched, (*pipeline.V_SHAPED, SCHEDULE_CODES["dualpipe"]))
    return np.where(both_ends, 1.0, np.asarray(k, dtype=np.float64) / mult)


def materialised_score_seconds(acc: Accelerator) -> tuple[float, float]:
    """Seconds a materialised score element costs in the forward and in the backward (``flops.SCORE_BYTES_FORWARD``
    and ``SCORE_BYTES_BACKWARD``): the element-wise bytes at the part's element-wise rate, the softmax's at its
    row-reduction (norm) rate."""

    def seconds(element: float, reduction: float) -> float:
        return element / acc.elementwise_bytes_per_s + reduction / acc.norm_bytes_per_s

    return seconds(*flops.SCORE_BYTES_FORWARD), seconds(*flops.SCORE_BYTES_BACKWARD)


def compute_per_microbatch(
    model: ModelSpec,
    workload: Workload,
    acc: Accelerator,
    sh: Shapes,
    k,
    r,
    last,
    sequence_parallel: bool = True,
) -> dict:
    """Seconds of compute per microbatch on a stage, and the windows collectives hide behind.

    Keys (S, K, r, stage). ``last`` marks the stage holding the output layer (logits).
    """
    m = tokens_per_microbatch(workload, sh, k)
    size = m / (m + acc.matmul_half_efficiency_tokens)
    clock = power.compute_rate_factor(workload, acc)  # a power cap's sustained clock (1: none)
    rate = (
        acc.peak_flops_per_s * acc.matmul_efficiency * size * clock
    )  # bf16: attention, einsum dispatch
    fp8, fp4 = workload.precision == "fp8", workload.precision == "fp4"
    # the layer GEMMs and the output head from their shapes (costs.gemm): the fitted fraction of the peak,
    # the shape's tile, wave and depth quantization at the microbatch's rows, the HBM floor
    gemm_rate, operand_bytes = acc.peak_flops_per_s * acc.matmul_efficiency * clock, 2.0
    layer_rate = gemm_rate
    if fp8:  # core.problem refuses fp8 on an accelerator without an fp8 peak or the recipe's ratio
        assert acc.peak_fp8_flops_per_s is not None
        fraction = gemm.fp8_matmul_efficiency(acc, fp8_recipe_of(workload, acc.kind))
        layer_rate, operand_bytes = acc.peak_fp8_flops_per_s * fraction * clock, 1
    if fp4:  # the linear layers' GEMMs in fp4 (core.problem refuses a part without an fp4 unit or the recipe)
        assert acc.peak_fp4_flops_per_s is not None
        fraction = gemm.fp4_matmul_efficiency(acc, fp4_recipe_of(workload))
        layer_rate = acc.peak_fp4_flops_per_s * fraction * clock
        operand_bytes = memory.FP4_BYTES[fp4_recipe_of(workload)]
    passes = 1.0 + flops.BACKWARD_OVER_FORWARD
    rows = np.ceil(m).astype(np.int64)  # the GEMMs' m: whole tokens
    read_only(rows)  # a key of several per_key calls
    attn_fraction = (
        attention_efficiency(workload, acc) if workload.flash_attention else acc.matmul_efficiency
    )
    # a fused attention kernel draws as its tensor-core activity against the GEMMs' (costs.power): a cap may
    # slow it less than the matmuls
    attn_clock = power.compute_rate_factor(workload, acc, attn_fraction / acc.matmul_efficiency)
    attn_rate = acc.peak_flops_per_s * attn_fraction * size * attn_clock
    # DeepSeek-style multi-token prediction: each module is one more layer on the stage holding the
    # output, with its own pass through the (shared) output head (technical report section 2.2)
    # DualPipe's end devices run stage 0 for one direction's microbatches and stage p - 1 for the
    # other's: per microbatch, half the output head and the mean of the two ends' layers
    head = np.where(_dualpipe(sh), 0.5 * _f(last), _f(last))
    mtp = head * model.mtp_layers if model.mtp_layers else 0.0
    # the stage's own layers, dense and MoE: each per-layer term at the stage's MoE share (``at_stage_share``)
    layers, moe_layers = stage_layers(model, sh, last, mtp)
    share = stage_moe_share(model, layers, moe_layers)
    shares = share_keys(model, share)  # the per-layer terms of (tp, ...) at each distinct share
    work = memory.recompute_arrays(model)
    mm_rerun, attn_rerun, ew_rerun = work["matmul"][r], work["attention"][r], work["elementwise"][r]
    # a layer's forward-equivalent GEMM seconds: its forward and two backward GEMMs over the passes
    mm = at_stage_share(
        model,
        share,
        lambda s: per_key(
            lambda tp, rows: (
                gemm.training_seconds(
                    rows, flops.layer_gemm_shapes(model, tp, s), acc, layer_rate, operand_bytes
                )
                / passes
            ),
            sh.tp,
            rows,
            memo=gemm.memo(model, acc, layer_rate, operand_bytes, "layer" if s is None else s),
        ),
    )
    column = (  # the column-parallel input projections' forward GEMM seconds (tp_per_microbatch hides behind them)
        column_parallel_windows(model, acc, sh, rows, layer_rate, operand_bytes)
        if tp_backward_async_of(workload, acc.kind)
        else (0.0, 0.0)
    )
    experts = 0.0  # the routed experts' forward GEMM seconds in the stage's mean layer
    moe_layer_experts = 0.0  # ... in a MoE layer
    if model.moe is not None:  # one grouped GEMM over the local experts, each at the busiest's rows
        expert = np.ceil(expert_rows(model, sh, m) * expert_load(model, workload, sh, m))
        moe_layer_experts = per_key(
            lambda etp, local, rows: (
                gemm.training_seconds(
                    rows,
                    flops.expert_gemm_shapes(model, etp),
                    acc,
                    layer_rate * acc.grouped_matmul_efficiency,
                    operand_bytes,
                    local,
                )
                / passes
            ),
            sh.etp,
            model.moe.num_experts // np.asarray(sh.ep),
            expert.astype(np.int64),
            memo=gemm.memo(model, acc, layer_rate, operand_bytes, "experts"),
        )
        experts = share * moe_layer_experts
        mm = mm + experts
    # a capacity-factor MoE dispatched by one-hot einsums (MaxText's dense path): matmuls at the bf16 rate
    dispatch = (
        at_stage_share(
            model,
            share,
            lambda s: per_key(
                lambda tp: flops.einsum_dispatch_flops_per_token_per_layer(
                    model, workload.seq_len, tp, s
                ),
                sh.tp,
            ),
        )
        * m
        / rate
        if profile_of(workload.framework, acc.kind).einsum_capacity_dispatch
        else 0.0
    )
    causal_skip = (
        workload.causal and workload.flash_attention
    )  # unfused kernels compute the masked half too
    attn = (
        per_key(
            lambda tp: flops.attention_flops_per_token_per_layer(
                model, workload.seq_len, causal_skip, tp
            ),
            sh.tp,
        )
        * m
        / attn_rate
        * attention_call_factor(model, workload, acc, cp_kernel_calls(sh))
    )
    ew_bytes = per_key_at_share(
        shares,
        lambda tp, s: flops.elementwise_bytes_per_token_per_layer(
            model,
            tp,
            sequence_parallel,
            workload.activation_bytes,
            s,
        ),
        sh.tp,
    )
    permute_bytes = per_key_at_share(
        shares,
        lambda tp, s: flops.permute_bytes_per_token_per_layer(
            model, tp, workload.activation_bytes, s
        ),
        sh.tp,
    )
    norm_bytes = per_key(
        lambda tp: flops.norm_bytes_per_token_per_layer(
            model, tp, sequence_parallel, workload.activation_bytes
        ),
        sh.tp,
    )
    # without fused attention, the passes over the materialised scores: the forward's again where the policy reruns
    # the element-wise passes
    score_forward, score_backward = materialised_score_seconds(acc)
    scores = per_key(
        lambda tp: flops.materialised_score_elements_per_token_per_layer(
            model, tp, workload.seq_len, workload.flash_attention
        ),
        sh.tp,
    )
    ew = (
        ew_bytes / acc.elementwise_bytes_per_s
        + norm_bytes / acc.norm_bytes_per_s
        + permute_bytes / acc.hbm_bytes_per_s
    ) * (m * (3.0 + ew_rerun)) + scores * m * (score_forward * (1.0 + ew_rerun) + score_backward)
    # a policy that reruns the attention core reruns its passes over materialised scores with it (selective
    # recompute: Korthikanti et al. 2022, Table 4, +1.3 ms of a 22B layer's 11.9 ms backward), where ``ew_rerun``
    # does not already rerun them
    scores_rerun = scores * m * attn_rerun * (1.0 - ew_rerun) * score_forward
    # eager PyTorch: one kernel per element-wise op (Workload.torch_compile)
    eager = workload.torch_compile is False
    if eager:  # the forward's extra bytes again where the policy reruns the element-wise passes
        extra = [
            per_key_at_share(
                shares,
                lambda tp, s, i=i: flops.eager_elementwise_bytes_per_token_per_layer(
                    model, tp, workload.activation_bytes, s
                )[i],
                sh.tp,
            )
            for i in (0, 1)
        ]
        ew = ew + (extra[0] * (1.0 + ew_rerun) + extra[1]) * m / acc.elementwise_bytes_per_s
    # the loss's passes over the logits on the stage holding the output head (and the MTP modules' heads)
    kernel = cross_entropy_of(workload, acc.kind)
    loss_ew = (
        head
        * (1.0 + (model.mtp_layers or 0))
        * per_key(
            lambda tp: flops.loss_bytes_per_token(
                model, tp, kernel, workload.activation_bytes, workload.fp32_logits
            ),
            sh.tp,
        )
        * m
        / acc.elementwise_bytes_per_s
    )
    if (
        fp8 or fp4
    ):  # quantising each linear input (read bf16, write fp8) and, in backward, the output gradients
        widths = per_key_at_share(
            shares,
            lambda tp, s: {
                n: w
                for n, w in memory.saved_tensor_widths(
                    model, tp, sequence_parallel, workload.seq_len, share=s
                ).items()
                if n in memory.FP8_LINEAR_INPUTS
            },
            sh.tp,
        )
        if fp4:  # twice, rowwise and columnwise, each read from bf16 (memory.FP4_QUANTISATIONS)
            recipe = fp4_recipe_of(workload)
            reads = 1 + memory.FP4_AMAX_READS[recipe]  # NVFP4: its per-tensor amax first
            per_value = memory.FP4_QUANTISATIONS * (
                reads * workload.activation_bytes + memory.FP4_BYTES[recipe]
            )
        elif eager:  # torchao's chain of kernels (abs, amax, upcast, scale, clamp, cast)
            per_a, fixed = flops.EAGER_FP8_CAST_BYTES
            per_value = per_a * workload.activation_bytes + fixed
        else:
            per_value = workload.activation_bytes + memory.FP8_BYTES
        cast = per_value * sum(widths[n] for n in memory.FP8_LINEAR_INPUTS)
        ew = ew + cast * m * (2.0 + mm_rerun) / acc.elementwise_bytes_per_s
    attn_passes = 1.0 + (
        flops.FLASH_ATTENTION_BACKWARD_OVER_FORWARD
        if workload.flash_attention
        else flops.BACKWARD_OVER_FORWARD
    )
    logits = (  # the vocab-parallel output head, (V/tp, D), in bf16
        head
        * (1.0 + (model.mtp_layers or 0))
        * per_key(
            lambda tp, rows: gemm.training_seconds(
                rows, ((1.0, model.vocab_size // tp, model.d_model),), acc, gemm_rate, 2
            ),
            sh.tp,
            rows,
            memo=gemm.memo(model, acc, gemm_rate, 2, "head"),
        )
    )
    recompute = (mm + dispatch) * mm_rerun + attn * attn_rerun + scores_rerun
    bwd_window = (
        (mm * flops.BACKWARD_OVER_FORWARD + dispatch * flops.EINSUM_DISPATCH_BACKWARD_OVER_FORWARD)
        + attn * (attn_passes - 1.0)
        + recompute
    )
    # blocking launches (CUDA_LAUNCH_BLOCKING=1): the GPU idles while the host prepares each kernel, per layer and
    # forward-equivalent pass (the forward, the backward's two, the recomputed share), and every collective waits
    # for the kernel before it: nothing hides behind compute (all windows 0)
    blocking = workload.launch_blocking
    launch_wait = (
        layers * (passes + mm_rerun) * (acc.blocking_launch_s_per_layer_pass or 0.0)
        if blocking
        else 0.0
    )
    hides = 0.0 if blocking else 1.0
    # host offloading: each layer's offloaded tensors go to host during its forward and come back for its
    # backward, asynchronously; what the layer's compute does not cover is waited for (all of it under blocking)
    moved = (
        host_offload_bytes_per_token(model, workload, sh, r, shares, sequence_parallel)
        * m
        / (acc.host_bytes_per_s_per_direction or np.inf)
    )
    offload_wait = layers * (
        np.maximum(0.0, moved - hides * (mm + dispatch + attn))
        + np.maximum(0.0, moved - hides * bwd_window)
    )
    # the GPU work a MoE layer's launches run beside (the stage's mean layer with a MoE layer's experts)
    gpu_s = (
        mm - experts + dispatch + attn,  # forward up to the dispatcher's sync
        moe_layer_experts,  # forward after it: the routed experts' GEMMs
        bwd_window + (moe_layer_experts - experts) * flops.BACKWARD_OVER_FORWARD,
    )
    moe_fixed = (
        layers * share * moe_host_overhead_s(workload, acc, model.moe.num_experts / sh.ep, gpu_s)
        if model.moe is not None
        else 0.0
    )
    return {
        "compute/moe_fixed": moe_fixed,
        "compute/launch_wait": launch_wait,
        "compute/matmul": layers
        * (mm * passes + dispatch * (1.0 + flops.EINSUM_DISPATCH_BACKWARD_OVER_FORWARD)),
        "compute/attention": layers * attn * attn_passes,
        "compute/recompute": layers * recompute,
        "compute/elementwise": layers * ew + loss_ew,
        "compute/logits": logits,
        "compute/offload_wait": offload_wait,
        "window/fwd_layer": hides * (mm + dispatch + attn),
        "window/matmul_fwd_layer": hides * (mm + dispatch),
        # tp_async_backward's: the attention block's, a dense layer's MLP block's, the stage's MoE share
        "window/column_attn_layer": hides * column[0],
        "window/column_mlp_layer": hides * column[1],
        "window/moe_layer_share": share + 0.0 * layers,
        "window/bwd_layer": hides * bwd_window,
        "window/attn_fwd_layer": hides * attn,
        "window/logits": hides * logits,
    }


def grad_accumulation(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, last, sharded=False
):
    """Seconds per microbatch (keys S, stage) a stage spends adding its weight gradients into their
    accumulators in a kernel of their own (``Workload.grad_accumulation_fusion`` off; 0 where on): it
    reads each gradient the weight-gradient GEMM wrote (in the activation precision) and reads and writes
    its accumulator (``grad_bytes_per_param``), HBM-bound, for the parameters of the stage's device
    (``stage_params``, ``expert_stage_params``); ``sharded`` (ZeRO-2/3 reduce-scattering each microbatch's
    gradients over a shard group) their shards only. StageTerms.accumulate_s (time_s
    "overhead/grad_accumulation")."""
    if grad_accumulation_fusion_of(workload, acc.kind):
        return 0.0

    def held(first: bool):
        dense = _f(stage_params(model, sh, first)) / np.where(sharded, sh.shards, 1)
        if model.moe is None:
            return dense
        experts = _f(expert_stage_params(model, sh, first))
        return dense + experts / np.where(sharded, sh.expert_shards, 1)

    on_last = np.asarray(last, dtype=bool)
    params = (
        held(False)
        if on_last.all()
        else held(True)
        if not on_last.any()
        else np.where(on_last, held(False), held(True))
    )
    per_param = workload.activation_bytes + 2 * workload.grad_bytes_per_param
    return params * per_param / acc.elementwise_bytes_per_s


def column_parallel_windows(
    model: ModelSpec, acc: Accelerator, sh: Shapes, rows, rate: float, operand_bytes: float
) -> tuple:
    """Forward-equivalent GEMM seconds of the column-parallel input projections (keys S, K) of a layer's
    attention block and of a dense layer's MLP block (``flops.column_parallel_gemm_shapes``) at ``rows``
    tokens and the layer GEMMs' ``rate``: each as long as its weight gradient and its input gradient,
    which the block's asynchronous backward TP collectives run beside (``tp_async_backward``)."""
    passes = 1.0 + flops.BACKWARD_OVER_FORWARD

    def seconds(block: int):
        return per_key(
            lambda tp, r: (
                gemm.training_seconds(
                    r,
                    flops.column_parallel_gemm_shapes(model, tp)[block],
                    acc,
                    rate,
                    operand_bytes,
                )
                / passes
            ),
            sh.tp,
            rows,
            memo=gemm.memo(model, acc, rate, operand_bytes, "column", block),
        )

    return seconds(0), seconds(1)


# Kernel launches the host issues for one MoE transformer layer and microbatch, (forward before the dispatcher's
# sync, forward after it, backward): Megatron-Core's attention block and MoELayer with the all-to-all dispatcher,
# Transformer Engine's GroupedLinear experts; docs/calibration.md#moe-overheads
MOE_ATTENTION_LAUNCHES = (12, 0, 22)  # norm, QKV and output GEMMs, RoPE, attention, residual add
MOE_ROUTER_LAUNCHES = (21, 0, 9)  # router GEMM, score, top-k, routing map, aux loss; token counts
MOE_DISPATCH_LAUNCHES = (
    0,
    10,
    10,
)  # permute, dispatch and combine all-to-alls, unpermute, activation
MOE_EXPERT_LAUNCHES = (
    0,
    2,
    4,
)  # per local expert: fc1 and fc2, one GEMM forward, dgrad and wgrad backward
SCOPED_GRAPH_LAUNCHES = (2, 0, 2)  # the attention's and the router's graphs, replayed


def moe_launches(workload: Workload, local_experts) -> tuple:
    """Kernel launches per MoE layer and microbatch (keys S), (forward before the sync, after it, backward):
    scoped CUDA graphs (Megatron --cuda-graph-scope attn moe_router moe_preprocess) replay the attention's and the
    router's kernels as one graph each; the permutation and the grouped GEMMs (sized by token counts known only at
    run time) stay launched one by one."""
    scoped = workload.cuda_graphs == "scoped"
    return tuple(
        (g if scoped else a + r) + d + e * local_experts
        for a, r, d, e, g in zip(
            MOE_ATTENTION_LAUNCHES,
            MOE_ROUTER_LAUNCHES,
            MOE_DISPATCH_LAUNCHES,
            MOE_EXPERT_LAUNCHES,
            SCOPED_GRAPH_LAUNCHES,
        )
    )


def moe_host_overhead_s(workload: Workload, acc: Accelerator, local_experts, gpu_s: tuple):
    """Seconds a MoE layer's host work adds per microbatch (keys S: ``local_experts`` = num_experts / ep, ``gpu_s``
    = the GPU seconds the launches can run ahead of: the forward before the dispatcher's sync, the forward after
    it (the routed experts' GEMMs), the backward). The host launches each part at ``moe_launch_latency_s`` per
    kernel (``moe_launches``) while the GPU runs it: a part shows max(0, host - GPU) (host-bound on a fast GPU).
    The sync, the dispatcher's copy of the token counts to the host, empties the GPU queue, so the parts do not
    hide behind each other, and adds ``moe_host_sync_s``. A full-iteration graph (one launch per step:
    Megatron-Core MoE docs, "CUDA graphs") removes ``moe_overhead_full_graph_share`` of sync and launches: what
    stays is GPU time the FLOPs and traffic do not count (small kernels' tails, the graph's static buffers)."""
    host_s = [n * acc.moe_launch_latency_s for n in moe_launches(workload, local_experts)]
    if workload.cuda_graphs == "full_iteration":
        return (1.0 - acc.moe_overhead_full_graph_share) * (acc.moe_host_sync_s + sum(host_s))
    return acc.moe_host_sync_s + sum(np.maximum(0.0, h - g) for h, g in zip(host_s, gpu_s))


def host_offload_bytes_per_token(
    model: ModelSpec,
    workload: Workload,
    sh: Shapes,
    r,
    shares,
    sequence_parallel: bool = True,
):
    """Bytes per token and layer a recompute policy keeps in host memory (``memory.OFFLOADED``; keys S, r)
    at the stage's MoE share (``shares``: its ``share_keys``), its dense and MoE layers' mixed
    (``at_stage_share``)."""
    return per_key_at_share(
        shares,
        lambda tp, r, s: (
            saved_widths_by_policy(model, workload, tp, r, sequence_parallel, s)[1]
            * workload.activation_bytes
        ),
        sh.tp,
        r,
    )


def saved_widths_by_policy(
    model: ModelSpec,
    workload: Workload,
    tp,
    r,
    sequence_parallel: bool = True,
    share: float | None = None,
) -> tuple:
    """Elements per token and layer (``memory.saved_tensor_widths``, in activation_bytes units) that
    policy code ``r`` keeps in HBM, keeps on the host, and that a layer saves in all (keys tp, r;
    ``share``: the layer's MoE share, ``flops.layer_share``)."""
    # what of the model and workload the widths read (``memory.saved_tensor_widths``)
    reads = (
        model,
        sequence_parallel,
        workload.seq_len,
        workload.flash_attention,
        workload.activation_bytes,
        fp8_activations_of(workload),
        share,
    )
    if all(np.shape(x) == (1,) and np.asarray(x).dtype == np.int64 for x in (tp, r)):
        return _one_row_widths(reads, int(tp[0]), int(r[0]))  # an estimate's: a fit asks again
    return _widths_by_policy(reads, tp, r)


@lru_cache(maxsize=4096)
def _one_row_widths(reads: tuple, tp: int, r: int) -> tuple:
    """``_widths_by_policy`` of the one-row keys (tp) and (r) (``per_key``'s), read-only."""
    out = _widths_by_policy(reads, np.array([tp]), np.array([r]))
    read_only(out)
    return out


def _widths_by_policy(reads: tuple, tp, r) -> tuple:
    """``saved_widths_by_policy`` of (model, sequence_parallel, seq_len, flash_attention,
    activation_bytes, fp8_activations, share)."""
    model, sequence_parallel, seq_len, flash_attention, activation_bytes, fp8_activations, share = (
        reads
    )
    widths = memory.saved_tensor_widths(
        model,
        tp,
        sequence_parallel,
        seq_len,
        flash_attention,
        activation_bytes,
        fp8_activations,
        share,
    )
    in_hbm = sum(_f(widths[n]) * memory.in_hbm_by_code(n)[r] for n in widths)
    hosted = sum(_f(widths[n]) * memory.on_host_by_code(n)[r] for n in widths)
    # all a layer's backward reads (not the per-op policy's extra cache)
    return in_hbm, hosted, sum(_f(w) for n, w in widths.items() if n in memory.ALL_TENSORS)


@cache
def _expected_max_of_normals(n: int) -> float:
    """E[max] of n independent standard normals, Blom's approximation inv_cdf((n - 0.375) / (n + 0.25))
    (within 0.03 of the exact value for n >= 2: 0.589 against 0.564 for 2, 2.337 against 2.345 for 64); 0 for n <= 1."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) if n > 1 else 0.0


# The slices of a TPU multislice job run in lock step inside (their ICI collectives meet every layer) and meet each
# other over the data-centre network once a step, at the gradient reduction. A slice's step varies by a relative
# standard deviation SLICE_STEP_JITTER (host work, input, the network), and the step waits for the slowest of N:
# SLICE_STEP_JITTER x E[max of N standard normals] of the slices' time. One value for every TPU, fitted once on the
# published N-slice over one-slice throughputs of the same run (MaxText's v5p and v5e tables, 28 pairs of 2 to 32
# slices): scripts/fit_slice_jitter.py -> results/multislice.md, docs/cost_model.md#multislice-tpus
SLICE_STEP_JITTER = 0.0608


def slice_wait_share(num_slices: int, jitter: float = SLICE_STEP_JITTER) -> float:
    """The share of the slices' time a step of ``num_slices`` slices adds waiting for the slowest
    (``jitter`` x E[max of num_slices standard normals]; the fit of ``validation.multislice`` varies
    ``jitter``); 0 for one slice."""
    return jitter * _expected_max_of_normals(int(num_slices))


def expected_max_of_normals(n):
    """``_expected_max_of_normals`` of each entry of an int array (or an int)."""
    n = np.asarray(n, dtype=np.int64)
    if not n.ndim:
        return _expected_max_of_normals(int(n))
    return per_key(
        lambda distinct: np.array([_expected_max_of_normals(int(x)) for x in distinct]), n
    )


def expert_load(model: ModelSpec, workload: Workload, sh: Shapes, m):
    """Tokens the busiest expert device multiplies (and receives) over the balanced share, per MoE layer and
    microbatch (keys S, K).

    With a capacity factor every expert is padded to its capacity (Megatron --moe-pad-expert-input-to-capacity,
    MaxText's capacity_factor: the GEMMs run over the empty slots too): the factor itself. Dropless, each of the ep
    devices gets the rows of its E/ep local experts, lambda = rows x E/ep on average; every layer waits for the
    busiest, so the load is 1 + z(ep) x cv_device, z(n) the expected maximum of n standard normals and
    cv_device^2 = 1 / lambda + cv^2 / (E/ep): the multinomial spread of random routing (what forced balance is:
    Megatron's --moe-router-force-load-balancing draws random router logits, RandomSTE), plus, for a learned
    router, the spread of its experts' loads (relative standard deviation cv = ``Workload.routing_cv`` over the
    experts, averaged over the device's local ones). One expert device (ep = 1) holds every expert:
    nothing to wait for, load 1."""
    moe = model.moe
    assert moe is not None, "called for mixture-of-experts models only"
    if moe.capacity_factor is not None:
        return moe.capacity_factor + 0.0 * m
    local = moe.num_experts / _f(sh.ep)
    tokens = np.maximum(expert_rows(model, sh, m) * local, 1.0)
    cv = workload.routing_cv if workload.routing == "learned" else 0.0
    return 1.0 + expected_max_of_normals(sh.ep) * np.sqrt(1.0 / tokens + cv * cv / local)


def expert_rows(model: ModelSpec, sh: Shapes, m):
    """Tokens each local expert multiplies per microbatch with balanced routing: the ep group's
    tokens (each rank dispatches its 1/tp of m, to k experts) spread over E experts, gathered over
    the etp ranks: m k ep etp / (tp E)."""
    moe = model.moe
    assert moe is not None, "called for mixture-of-experts models only"
    return m * moe.top_k * sh.ep * sh.etp / (sh.tp * moe.num_experts)


def ep_per_microbatch(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, k, co: Coeffs, fwd_layer=0.0
) -> dict:
    """Exposed expert-parallel token traffic per microbatch (keys S, K, o): 'base', plus 'rerun' for
    a forward whose MLP runs again (``memory.recompute_work`` 'moe').

    Each MoE layer dispatches the k copies of each of the rank's m/tp tokens to their experts and
    combines them back: two AllToAlls forward, two backward, over the ep group's links (NVLink,
    scale-out or ICI as it spans them; ``comms.all_to_all_coefficients_of``). With etp the
    dispatched tokens are also all-gathered in the etp group and reduce-scattered after it. Every
    member waits for the busiest expert device, which receives the load (``expert_load``) times the
    balanced share and sends as much back. The mean layer carries its share of them. Exposed unless
    the framework overlaps them with another microbatch's compute (``Workload.ep_comm_overlap``, the
    profile's ``ep_overlap`` unless set) or the schedule does (DualPipe, DualPipeV): then
    ``overlapped_collective``, the forward's behind a forward window and the backward's behind two
    (a forward and a backward chunk paired: the sum is the same whichever hides which)."""
    if model.moe is None:
        zero = 0.0 * tokens_per_microbatch(workload, sh, k)
        return {
            "base": zero,
            "rerun": zero,
            "lost": zero,
            "rerun_lost": zero,
            "a2a": zero,
            "payload": zero,
        }
    m = tokens_per_microbatch(workload, sh, k)
    half = acc.collective_half_efficiency_bytes
    payload = (
        m
        / sh.tp
        * model.moe.top_k
        * expert_load(model, workload, sh, m)
        * model.d_model
        * workload.activation_bytes
    )
    # an fp8 dispatch sends 1 byte and a 4-byte scale per 128 values; the combine is in bf16
    dispatched = (
        payload * FP8_DISPATCH_BYTES / workload.activation_bytes
        if workload.fp8_dispatch
        else payload
    )
    # a deduplicating dispatcher (DeepEP, Megatron's flex dispatcher) sends a token once to each device
    # holding one of its k experts, which hands it to them there, and across nodes once to each node, which
    # fans it out over NVLink: of the k copies, the distinct members hit (``distinct_share``)
    dedup_in, dedup_out = (
        (distinct_share(co.ep.members, model.moe), distinct_share(co.ep_out.members, model.moe))
        if node_dedup(model, workload, acc.kind)
        else (1.0, 1.0)
    )

    def all_to_all(sent):
        per_level = np.maximum(
            (sent * dedup_in + half) * co.ep_in.seconds_per_byte,
            (sent * dedup_out + half) * co.ep_out.seconds_per_byte,
        )
        return np.where(co.ep.members > 1, per_level + co.ep.latency_s, 0.0)

    a2a = all_to_all(payload)
    gathered = ring_time(payload * sh.etp, co.etp, half)
    per_pass = all_to_all(dispatched) + a2a + 2 * gathered  # dispatch and combine
    dualpipe = np.isin(sh.sched, DUALPIPES) & (sh.pp > 1)
    if workload.ep_comm_overlap or np.any(dualpipe):
        latency = 2 * np.where(co.ep.members > 1, co.ep.latency_s, 0.0)
        eta = np.where(dualpipe, DUALPIPE_COMM_SM_SHARE, acc.overlap_interference)
        fwd, lost_fwd = overlapped_collective(per_pass, fwd_layer, latency, eta)
        bwd, lost_bwd = overlapped_collective(per_pass, 2 * fwd_layer, latency, eta)
        # DualPipe runs a forward and a backward chunk as one pair: both directions' AllToAlls
        # hide behind the pair's whole compute (the forward's behind the backward's and back)
        pair, lost_pair = overlapped_collective(2 * per_pass, 3 * fwd_layer, 2 * latency, eta)
        fwd, bwd = np.where(dualpipe, pair / 2, fwd), np.where(dualpipe, pair / 2, bwd)
        lost_fwd = np.where(dualpipe, lost_pair / 2, lost_fwd)
        lost_bwd = np.where(dualpipe, lost_pair / 2, lost_bwd)
        if not workload.ep_comm_overlap:  # only the DualPipe rows overlap
            fwd, bwd = np.where(dualpipe, fwd, per_pass), np.where(dualpipe, bwd, per_pass)
            lost_fwd, lost_bwd = lost_fwd * dualpipe, lost_bwd * dualpipe
    else:
        fwd, bwd, lost_fwd, lost_bwd = per_pass, per_pass, 0.0, 0.0
    # the MoE layers the stage holds, not the mean layer's share of its layers
    moe_layers = np.minimum(moe_layers_per_stage(model, sh), layers_per_stage(model, sh))
    return {
        **_layer_terms(moe_layers, fwd, bwd, lost_fwd, lost_bwd),
        "a2a": a2a,
        "payload": payload,
    }


# DeepSeek-V3 report (arXiv 2412.19437) section 3.2.2: of an H800's 132 SMs, 20 run the dispatch and combine
# kernels while DualPipe overlaps them with the other direction's compute, which runs on the other 112:
# each second of it beside them takes 132/112, 20/112 s more
DUALPIPE_COMM_SM_SHARE = 20 / 112
DUALPIPES = (SCHEDULE_CODES["dualpipe"], SCHEDULE_CODES["dualpipev"])


def overlapped_collective(seconds, window_s, latency_s, eta):
    """A collective run beside another microbatch's compute (Megatron's combined 1F1B, its
    --overlap-moe-expert-parallel-comm; DualPipe's pairs of a forward and a backward chunk of two
    microbatches): (exposed, lost) with exposed = max(latency, seconds - window), what the window
    does not cover, and lost = eta x the hidden part, the compute its kernels slow (the SMs they
    take: ``DUALPIPE_COMM_SM_SHARE``, the compute slowed on the SMs left; NCCL's fitted
    ``overlap_interference``)."""
    exposed = np.maximum(latency_s, seconds - window_s)
    return exposed, eta * (seconds - exposed)


FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # per value: fp8, and an fp32 scale per 1 x 128 tile


def distinct_share(members, moe: MoeSpec):
    """Of a token's k expert copies, the share a deduplicating dispatcher sends: the distinct ones
    of ``members`` devices (or nodes, each holding an equal run of experts) they fall on (DeepSeek-V3
    report section 3.2.2; DeepEP's dispatch layout marks each token once per rank). Uniform
    routing hits n (1 - (1 - 1/n)^k) of n members. Group-limited routing (G groups, a token's
    experts in at most g of them) bounds it: with n <= G members of G / n groups each, the members
    holding one of g groups drawn from G, n (1 - C(G - G/n, g) / C(G, g)) (DeepSeek-V3 on 8 nodes
    of one group each: at most 4 nodes); with n > G, the k experts spread over the g G/n members
    of the chosen groups. The lesser of the two, over k. Costed once per distinct member count."""
    return per_key(lambda n: _distinct_share(n, moe), np.asarray(members))


def _distinct_share(members, moe: MoeSpec):
    k, groups, chosen = moe.top_k, moe.expert_groups, moe.groups_per_token
    n = np.maximum(_f(members), 1.0)
    hit = n * (1.0 - (1.0 - 1.0 / n) ** k)
    if groups > 1 and chosen < groups:
        per_member = groups / n
        missed = np.ones_like(n)
        for i in range(chosen):  # C(G - G/n, g) / C(G, g): no chosen group on a given member
            missed = missed * np.clip((groups - per_member - i) / (groups - i), 0.0, 1.0)
        reach = np.maximum(chosen / per_member, 1.0)
        limited = np.where(
            n <= groups, n * (1.0 - missed), reach * (1.0 - (1.0 - 1.0 / reach) ** k)
        )
        hit = np.minimum(hit, limited)
    return hit / k


def interference(acc: Accelerator, hidden_s):
    """Compute seconds lost to ``hidden_s`` seconds of collectives running beside it
    (``Accelerator.overlap_interference``): NCCL's kernels occupy SMs and both move HBM bytes (the GPUs'
    fitted 0.32); ICI collectives run on the TPU's DMA engines (0)."""
    return acc.overlap_interference * hidden_s


def interference_pct(acc: Accelerator) -> int:
    """``overlap_interference`` in percent: how the step formula's integer path counts it (costs.step.unhidden)."""
    return round(100 * acc.overlap_interference)


def step_interference(acc: Accelerator, steps: dict) -> tuple:
    """The compute the once-per-step collectives of ``step_collectives`` slow, charged on all their time
    (costs.step.EXPOSED takes it off again for what does not hide): (the reductions', the ZeRO-1/2
    gather of updated weights'), ``StepTerms.reduce_interference_s`` and ``gather_interference_s``."""
    reduce = steps["reduce/zero"] + steps["reduce/dp"] + steps["reduce/kv_replica"]
    return interference(acc, reduce), interference(acc, steps["gather/zero"])


def attention_call_factor(model: ModelSpec, workload: Workload, acc: Accelerator, calls):
    """A fused attention kernel's time over its FLOPs at the long-context rate: 1 + h x calls / context.

    Each query costs the kernel a fixed amount of work per call besides its keys (its tile's load, the
    partly masked diagonal tile, the softmax's rescale and the output's write), as much as h =
    ``attention_half_efficiency_keys`` more keys: at a context of h keys per query the kernel runs at half
    its rate. Context: ``flops.layer_attention_context`` (S/2 causal, the sliding window's band), averaged
    over the layers, which is exact as each layer's FLOPs are its context times one constant. Calls:
    ``cp_kernel_calls`` per query. Unfused attention runs as matmuls and pays none of this."""
    h = acc.attention_half_efficiency_keys
    if not h or not workload.flash_attention:
        return 1.0
    context = flops.layer_attention_context(model, workload.seq_len, workload.causal)
    return 1.0 + h * _f(calls) / context


def cp_kernel_calls(sh: Shapes):
    """Attention kernel calls per query (keys S): one per step of the ring, cp / a (``Shapes.cpa``):
    ring cp calls, a2a one over the whole sequence for heads / cp heads, a2a+ring one per step of the
    ring across nodes; allgather one over the gathered keys (Megatron's KV all-gather runs each of its
    two load-balanced query chunks once against its key prefix)."""
    return np.where(sh.cpf == ALLGATHER, 1, sh.cp // sh.cpa)


def attention_kernel_field(workload: Workload, acc: Accelerator) -> str:
    """The Accelerator field of the fused attention kernel the workload runs: MPT's Triton kernel's
    (``triton_attention_efficiency``) where the workload runs it (``Workload.triton_attention``;
    ``Problem.build`` refuses it on a part without the figure), else the vendor's (cuDNN / Transformer
    Engine, ``vendor_attention_efficiency``) where the workload or its framework profile uses it and the
    accelerator has a figure for it (``frameworks.vendor_attention``), else the portable
    FlashAttention-2 class's (``attention_efficiency``)."""
    if workload.triton_attention and acc.triton_attention_efficiency is not None:
        return "triton_attention_efficiency"
    if acc.vendor_attention_efficiency is not None and vendor_attention(workload, acc):
        return "vendor_attention_efficiency"
    return "attention_efficiency"


def attention_efficiency(workload: Workload, acc: Accelerator) -> float:
    """The fused attention kernel's fraction of peak (``attention_kernel_field``)."""
    return getattr(acc, attention_kernel_field(workload, acc))


def _layer_terms(layers, fwd, bwd, lost_fwd, lost_bwd) -> dict:
    """A per-layer collective's exposed seconds (``fwd``, ``bwd``) and the interference its hidden
    part costs (``lost_fwd``, ``lost_bwd``) over a stage's ``layers``: 'base', 'rerun' (the forward
    run again), 'lost', 'rerun_lost' (the interference in those)."""
    return {
        "base": layers * (fwd + bwd + lost_fwd + lost_bwd),
        "rerun": layers * (fwd + lost_fwd),
        "lost": layers * (lost_fwd + lost_bwd),
        "rerun_lost": layers * lost_fwd,
    }


def _pass_terms(acc: Accelerator, layers, fwd, bwd, hidden_fwd, hidden_bwd) -> dict:
    """``_layer_terms`` of a per-layer collective's exposed seconds (``fwd``, ``bwd``) and hidden
    ones, whose interference it costs, with the hidden seconds per layer."""
    lost_fwd, lost_bwd = interference(acc, hidden_fwd), interference(acc, hidden_bwd)
    return {
        **_layer_terms(layers, fwd, bwd, lost_fwd, lost_bwd),
        "hidden_fwd_layer": hidden_fwd,
        "hidden_bwd_layer": hidden_bwd,
    }


def tp_blocks_per_layer(model: ModelSpec) -> int:
    """The TP collective pairs (AllGather + ReduceScatter, or one AllReduce) a layer's pass needs: one
    after the attention and one after the MLP; one for a parallel block (``ModelSpec.parallel_block``),
    whose attention and MLP read the one gathered input and whose summed outputs are reduced once."""
    return 1 if model.parallel_block else 2


def tp_per_microbatch(
    model: ModelSpec,
    workload: Workload,
    acc: Accelerator,
    sh: Shapes,
    k,
    co: Coeffs,
    last,
    windows: dict | None = None,
    sequence_parallel=True,
) -> dict:
    """Exposed TP collectives per microbatch (keys S, K, o, stage): 'base', plus 'rerun' for a forward run
    again by recompute (scaled by the policy's share of the forward's collectives, ``memory.recompute_work``).

    Per layer: ``tp_blocks_per_layer`` (2; 1 for a parallel block) AllGather+ReduceScatter (sequence
    parallel) or AllReduce forward, as many backward, and again when the forward is recomputed; [m, D]
    activations. Plus 3 vocab-parallel loss
    AllReduces of [m] fp32 on the last stage. With ``workload.tp_comm_overlap`` each pass's
    collectives are pipelined with that pass's GEMMs (``windows``' "window/matmul_fwd_layer"; the
    backward has twice the forward's), and at least one ring chunk of tp stays exposed (NeMo
    "Communication Overlap"); the backward's only where the profile pipelines it
    (``Profile.tp_overlap_backward``). Else, where the workload or its profile runs them asynchronously
    (``core.frameworks.tp_backward_async_of``), the backward's collectives run beside the GEMMs of the
    blocks' column-parallel linears (``windows``' "window/column_*"; ``tp_async_backward``), sequence
    parallel or not (``sequence_parallel``)."""
    windows = windows or {}
    m = tokens_per_microbatch(workload, sh, k)
    unit = 2.0 * ring_time(
        m * model.d_model * workload.activation_bytes, co.tp, acc.collective_half_efficiency_bytes
    )
    loss = 3 * 2.0 * ring_time(m * 4.0, co.tp, acc.collective_half_efficiency_bytes) * _f(last)
    layers = layers_per_stage(model, sh, last)
    per_pass = tp_blocks_per_layer(model) * unit
    chunk = per_pass / sh.tp
    matmul_fwd_layer = windows.get("window/matmul_fwd_layer", 0.0)

    def exposed(gemm):
        return np.maximum(chunk, per_pass - gemm)

    # pipelined with the GEMMs only inside the fast domain (userbuffers / async TP need NVLink or ICI)
    overlapped = bool(workload.tp_comm_overlap) & ~np.asarray(co.tp.scale_out, dtype=bool)
    forward = np.where(overlapped, exposed(matmul_fwd_layer), per_pass)
    pipelined = overlapped & profile_of(workload.framework, acc.kind).tp_overlap_backward
    async_exposed, async_hidden = (
        tp_async_backward(model, unit, windows, sequence_parallel)
        if tp_backward_async_of(workload, acc.kind)
        else (per_pass, 0.0)
    )
    backward = np.where(
        pipelined, exposed(flops.BACKWARD_OVER_FORWARD * matmul_fwd_layer), async_exposed
    )
    hidden_bwd = np.where(pipelined, per_pass - backward, async_hidden)
    out = _pass_terms(acc, layers, forward, backward, per_pass - forward, hidden_bwd)
    return {**out, "base": out["base"] + loss, "unit": unit}


def tp_async_backward(model: ModelSpec, unit, windows: dict, sequence_parallel=True) -> tuple:
    """(exposed, hidden) seconds of a layer's backward TP collectives launched asynchronously beside the
    GEMMs of each block's column-parallel linears (Megatron-Core's
    ``LinearWithGradAccumulationAndAsyncCommunication``, Transformer Engine's ``Linear``), ``unit`` the
    seconds of one block's AllReduce (AllGather + ReduceScatter).

    Without sequence parallelism the input gradient's AllReduce runs beside the weight-gradient GEMM: what
    it outlasts is exposed. With it, the output gradient's AllGather (the row-parallel linear's) waits; the
    input gradient's ReduceScatter runs beside the weight gradient, and the re-gather of the input the
    forward kept sharded (half a unit more) beside the input gradient. Each GEMM is as long as the block's
    forward one (``windows``' "window/column_attn_layer" and "window/column_mlp_layer"). A MoE layer's MLP
    block (its dispatcher's collectives) and MLA's attention wait as before, a unit each: the MLP block's
    at the stage's MoE share ("window/moe_layer_share"). A parallel block's one collective runs beside
    both blocks' linears."""
    beside = 0.5 * unit if sequence_parallel else unit  # each asynchronous collective
    waits = 0.5 * unit if sequence_parallel else 0.0  # the output gradient's AllGather
    times = 2 if sequence_parallel else 1  # ReduceScatter and re-gather, or AllReduce

    def block(window):  # (exposed, hidden) of one block
        hidden = np.minimum(beside, window)
        return waits + times * (beside - hidden), times * hidden

    attn = windows.get("window/column_attn_layer", 0.0)
    mlp = windows.get("window/column_mlp_layer", 0.0)
    share = windows.get("window/moe_layer_share", 0.0)
    waiting = (unit, 0.0 * unit)
    if model.parallel_block:
        return _mix(block(attn + mlp), waiting, share)
    a = waiting if model.mla is not None else block(attn)
    b = _mix(block(mlp), waiting, share)
    return a[0] + b[0], a[1] + b[1]


def reduces_in_backward(workload: Workload, acc: Accelerator, sh: Shapes):
    """Whether the once-per-step gradient reductions run during the last microbatch's backward (keys S):
    not where the workload waits for them after the whole schedule (``grad_reduce_overlap_of``: Megatron-LM
    before --overlap-grad-reduce) or the profile reduces after it with a pipeline (DeepSpeed's pipeline
    engine)."""
    profile = profile_of(workload.framework, acc.kind)
    return grad_reduce_overlap_of(workload, acc.kind) & np.where(
        sh.pp > 1, profile.pipelined_grad_reduce_overlap, True
    )


def chunk_shares(workload: Workload, acc: Accelerator, sh: Shapes) -> tuple:
    """The share of the once-per-step gradient reductions, and of the ZeRO-1/2 gathers, that belong
    to a stage's chunks but the one that finishes last (keys S): (v - 1)/v under the interleaved
    schedule where the profile overlaps them, else 0.

    Megatron-Core launches a chunk's gradient reduction once its last microbatch's backward is done
    (the interleaved schedule calls that chunk's ``grad_sync_func``) and gathers a
    chunk's updated weights ahead of its first forward (``--overlap-param-gather``); torchtitan's
    pipeline stages reduce-scatter each stage module after its last backward. The first chunk's
    backward runs last and its forward first, so its share hides behind one chunk's work; the other
    chunks' behind the cooldown (warm-up) that follows (``step_windows``)."""
    profile = profile_of(workload.framework, acc.kind)
    chunks = np.where(sh.sched == SCHEDULE_CODES["interleaved"], sh.v, 1)
    early = (chunks - 1) / chunks
    return (
        early * reduces_in_backward(workload, acc, sh),
        early * float(profile.param_gather_overlap),
    )


def split_by_chunks(total, early) -> tuple:
    """(the last chunk's, the other chunks') part of a once-per-step collective's ``total`` seconds, the
    others' share ``early`` (``chunk_shares``): ``StepTerms.reduce_s`` and ``reduce_early_s``, or
    ``zero_gather_s`` and ``gather_late_s``."""
    return total * (1.0 - early), total * early


def window_shares(
    workload: Workload, acc: Accelerator, sh: Shapes, k, gathers: bool = False
) -> tuple:
    """(the last chunk's, the other chunks') share of one microbatch's stage backward that the once-per-step
    reductions hide behind (``gathers``: of its forward, for the ZeRO-1/2 gathers): 1 - e and min(p, K) e, e
    the other chunks' share of them (``chunk_shares``; keys S, K). The TP and CP traffic beside the
    reductions on their links (``reduction_link_traffic``) scales with the same windows."""
    early = chunk_shares(workload, acc, sh)[1 if gathers else 0]
    return 1.0 - early, np.minimum(sh.pp, k) * early


def step_windows(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, c: dict, k
) -> dict:
    """The compute windows the once-per-step collectives hide behind, as the framework profile
    overlaps them (0 where it does not), keys S, K; docs/cost_model.md "Overlap":

    - ``reduce``: the gradient reductions of the chunk that finishes last hide behind its last
      microbatch's backward (with one chunk, the stage's);
    - ``reduce_early``: the other chunks' (``chunk_shares``) behind the backward that follows theirs:
      in the interleaved order a chunk runs min(pp, K) microbatches before the next, so chunk j's
      last backward has j x min(pp, K) chunk backwards after it; their reductions share the link, so
      together they hide behind (v - 1) x min(pp, K) chunk backwards ((v - 1)/v x min(pp, K) stage
      backwards; exact where all of them queue on one link, and where chunk 0's alone exposes);
    - ``gather``, ``gather_late``: the next step's ZeRO-1/2 gathers of updated weights, alike behind
      the first chunk's first forward and the warm-up forwards before the other chunks' first.

    ``StepTerms.reduce_window_s``, ``reduce_early_window_s``, ``gather_window_s``,
    ``gather_late_window_s``."""
    profile = profile_of(workload.framework, acc.kind)
    layers = layers_per_stage(model, sh)
    backward = layers * c["window/bwd_layer"] * reduces_in_backward(workload, acc, sh)
    forward = layers * c["window/fwd_layer"] * float(profile.param_gather_overlap)
    last, others = window_shares(workload, acc, sh, k)
    first, later = window_shares(workload, acc, sh, k, gathers=True)
    return {
        "reduce": backward * last,
        "reduce_early": backward * others,
        "gather": forward * first,
        "gather_late": forward * later,
    }


def cp_per_microbatch(
    model: ModelSpec,
    workload: Workload,
    acc: Accelerator,
    sh: Shapes,
    k,
    co: Coeffs,
    attn_fwd_layer,
) -> dict:
    """Exposed CP time per microbatch (keys S, K, o): 'base', plus 'rerun' when recompute runs the
    attention core again; per flavour (``Shapes.cpf``; docs/cost_model.md "Context-parallel flavours"):

    - ring (Liu et al. 2023, ring attention): the K/V blocks of the cp ranks pass around the ring
      (an AllGather of cp x m tokens of K and V) forward, K, V and their gradients backward (twice),
      each hidden behind the layer's attention core; each of the cp - 1 steps waits for its block;
    - allgather (Llama 3 section 3.3.2): one AllGather of K/V before the attention forward, gathered
      again and the dK/dV ReduceScatter backward, all exposed (the attention needs the whole keys);
    - a2a (Jacobs et al. 2023, DeepSpeed-Ulysses): four all-to-alls forward (q, k, v in, the output
      back) and four backward, exposed, ``cp_a2a_bytes``;
    - a2a+ring: the all-to-alls over the a = ``Shapes.cpa`` ranks inside a node, then a ring of cp / a
      steps across nodes of blocks a x m tokens long with kv heads / a.
    """
    m = tokens_per_microbatch(workload, sh, k)
    half = acc.collective_half_efficiency_bytes
    a, allgather = sh.cpa, sh.cpf == ALLGATHER
    kv_bytes = (
        sh.cp
        * m
        * np.maximum(params.kv_heads_per_device(model, sh.tp), a)
        / a
        * (model.head_dim + flops.value_head_dim(model))
        * workload.activation_bytes
    )
    t_kv = ring_time(kv_bytes, co.cp, half)
    ring = (sh.cp > a) & ~allgather
    t_ring, t_gather = np.where(ring, t_kv, 0.0), np.where(allgather, t_kv, 0.0)
    # each of the ring's steps waits for its block: the hops' latency is never hidden
    sync = np.where(ring, co.cp.latency_s, 0.0)
    ring_fwd = np.maximum(sync, t_ring - attn_fwd_layer)
    ring_bwd = np.maximum(2 * sync, 2 * t_ring - 2 * attn_fwd_layer)
    whole = a == sh.cp  # Ulysses over the whole group, else inside the node
    per_byte = np.where(whole, co.cp_a2a.seconds_per_byte, co.cp_in.seconds_per_byte)
    latency = np.where(whole, co.cp_a2a.latency_s, co.cp_in.latency_s)
    a2a_bytes = cp_a2a_bytes(model, workload, sh, m)
    t_a2a = np.where(a > 1, (a2a_bytes + 4 * half) * per_byte + 4 * latency, 0.0)
    fwd = ring_fwd + t_gather + t_a2a
    bwd = ring_bwd + 2 * t_gather + t_a2a
    hidden_fwd = np.maximum(0.0, t_ring - ring_fwd)
    hidden_bwd = np.maximum(0.0, 2 * t_ring - ring_bwd)
    layers = layers_per_stage(model, sh)
    return {
        **_pass_terms(acc, layers, fwd, bwd, hidden_fwd, hidden_bwd),
        "t_kv": t_kv,
        "t_a2a": t_a2a,
    }


def cp_a2a_bytes(model: ModelSpec, workload: Workload, sh: Shapes, m):
    """Bytes a device's four all-to-alls of one layer's forward send (keys S, K): the queries and
    outputs of its m tokens (num_heads / tp heads of head_dim and value_head_dim), and their keys and
    values (its kv heads, replicated up to a = ``Shapes.cpa`` when fewer: each of the a ranks needs
    one); 0 where a = 1. What the backward sends is as large (the gradients, the other way)."""
    kv = np.maximum(params.kv_heads_per_device(model, sh.tp), sh.cpa)
    heads = _f(model.num_heads) / sh.tp
    width = model.head_dim + flops.value_head_dim(model)
    return np.where(sh.cpa > 1, m * (heads + kv) * width * workload.activation_bytes, 0.0)


def cp_buffer_bytes(model: ModelSpec, workload: Workload, sh: Shapes, m):
    """Bytes a CP flavour holds for one layer's attention beyond ring's two K/V blocks in flight, which
    the workspace (``memory_by_microbatch``) already covers (keys S, K): allgather the layer's gathered
    K/V (cp x m tokens), a2a and a2a+ring the full-sequence q, k, v and output of the heads a device
    keeps (the all-to-alls' receive buffers, ``cp_a2a_bytes``)."""
    gathered = (
        sh.cp
        * m
        * params.kv_heads_per_device(model, sh.tp)
        * (model.head_dim + flops.value_head_dim(model))
        * workload.activation_bytes
    )
    return np.where(sh.cpf == ALLGATHER, gathered, cp_a2a_bytes(model, workload, sh, m))


def shard_link_traffic(tp: dict, cp: dict, fc: dict, co: Coeffs) -> dict:
    """Seconds per layer the hidden TP and CP traffic delays the ZeRO shard group's gather (forward)
    and gather + reduce-scatter (backward) of the same layer, which run at the same time: read from
    the links each loads (``comms.contention_s``: on the heaviest link the shard group uses, the
    others' load and its own, less its time alone; docs/cost_model.md "Shared links"; NCCL and ICI
    serve concurrent transfers on a link in turn). The routed experts' gathers on their own group
    are left out."""
    dense_gather = fc["gather_layer"] - fc["gather_experts_layer"]
    dense_reduce = fc["reduce_layer"] - fc["reduce_experts_layer"]
    c = co.shard_contention
    if c is None:
        return {"fwd": 0.0, "bwd": 0.0}
    return {
        "fwd": contention_s(c, (tp["hidden_fwd_layer"], cp["hidden_fwd_layer"]), dense_gather),
        "bwd": contention_s(
            c, (tp["hidden_bwd_layer"], cp["hidden_bwd_layer"]), dense_gather + dense_reduce
        ),
    }


def reduction_link_traffic(
    model: ModelSpec,
    workload: Workload,
    acc: Accelerator,
    sh: Shapes,
    tp: dict,
    cp: dict,
    co: Coeffs,
):
    """Seconds the hidden TP and CP traffic of one microbatch's backward delays the once-per-step
    gradient reductions, which run in that same backward over the data-parallel groups' links
    (dp x fsdp x cp; ``comms.contention_s`` without crediting the reductions' spare capacity, whose
    time depends on the ZeRO stage: an upper bound); 0 where the profile reduces after the backward
    (then they do not meet)."""
    if co.reduce_contention is None:
        return 0.0
    layers = layers_per_stage(model, sh) * reduces_in_backward(workload, acc, sh)
    seconds = (tp["hidden_bwd_layer"], cp["hidden_bwd_layer"])
    return layers * contention_s(co.reduce_contention, seconds)


def fsdp_collectives(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, co: Coeffs
) -> dict:
    """ZeRO-3 per-layer gather and gradient reduce-scatter seconds, and the vocabulary's (keys S, o).

    A layer moves in ``workload.fsdp_collectives_per_layer`` equal collectives (each paying
    the ring latency and the small-message penalty once).
    """
    half = acc.collective_half_efficiency_bytes
    p_layer = per_key(lambda tp: params.layer_params(model, tp), sh.tp)
    p_expert = expert_params_per_layer(model, sh)
    vocab = model.vocab_size * model.d_model // sh.tp
    n = workload.fsdp_collectives_per_layer
    gathered = gathered_bytes_per_param(workload, acc)
    # the framework's copies around them: a layer's two gathers (forward, backward) and reduce-scatter, the
    # vocabulary's gather and reduce-scatter; the routed experts' where their ZeRO group shards them
    hbm = acc.hbm_bytes_per_s
    experts_copied = 0.0 if model.moe is None else p_expert * (sh.expert_shards > 1)
    copies_layer = (
        (_f(p_layer) + experts_copied) * zero_copy_bytes_per_param(workload, acc, 2) / hbm
    )
    copies_vocab = _f(vocab) * zero_copy_bytes_per_param(workload, acc, 1) / hbm
    gather = n * ring_time(_f(p_layer) * gathered / n, co.shard, half)
    reduce = n * ring_time(_f(p_layer) * workload.grad_bytes_per_param / n, co.shard, half)
    # the local experts, over the expert ZeRO group
    gather_experts = 0.0 if model.moe is None else ring_time(p_expert * gathered, co.eshard, half)
    reduce_experts = (
        0.0
        if model.moe is None
        else ring_time(p_expert * workload.grad_bytes_per_param, co.eshard, half)
    )
    return {
        "gather_layer": gather + gather_experts,
        "reduce_layer": reduce + reduce_experts,
        "gather_experts_layer": gather_experts,
        "reduce_experts_layer": reduce_experts,
        "vocab": ring_time(_f(vocab) * workload.weight_bytes_per_param, co.shard, half)
        + ring_time(_f(vocab) * workload.grad_bytes_per_param, co.shard, half),
        "copies_layer": copies_layer,
        "copies_vocab": copies_vocab,
    }


def layer_modules(model: ModelSpec, tp) -> list[tuple[str, Any]]:
    """The weight matrices of one layer outside the routed experts on one TP rank, in the order its forward runs
    them, each as (the ``memory.MATMULS`` producer it is, its elements): the attention's (Q, K, V, O; with latent
    attention the query down- and up-projections, the key-value down- and up-projections and O,
    ``params.attention_matrices``), then the MLP's (gate, up and down, or up and down), which share the mean
    layer's MLP and router (``params.layer_params`` less attention and norms) equally."""
    attention = params.attention_matrices(model, tp)
    if model.mla is None:
        names = ["mm_q", "mm_k", "mm_v", "mm_o"]
    else:
        query = ["mm_latent", "mm_q"] if model.mla.q_lora_rank is not None else ["mm_q"]
        names = [*query, "mm_latent", "mm_k", "mm_o"]
    mlp = (
        params.layer_params(model, tp)
        - params.attention_params_per_layer(model, tp)
        - params.norm_params_per_layer(model, tp)
    )
    mlp_names = ["mm_gate", "mm_up", "mm_down"][3 - model.mlp_matrices :]
    return list(zip(names, attention)) + [(n, mlp / model.mlp_matrices) for n in mlp_names]


def zero3_regathered_share(model: ModelSpec, workload: Workload, tp) -> np.ndarray:
    """Per recompute policy (``RECOMPUTE_POLICIES``' order; [policies, *tp's shape] for an array of tp), the share of
    a layer's weights outside the routed experts (``layer_modules``) that ZeRO-3 gathers a third time in each
    microbatch's backward, where the framework gathers a module's weights in its forward hooks and frees them unless
    they are used again within ``Profile.zero3_reuse_distance_params`` parameters (DeepSpeed's
    ``stage3_max_reuse_distance``): a module the policy runs again is gathered for its recomputed forward, and
    between that forward and its backward run the recomputed modules after it and then, in the backward, every
    module after it; where those hold that many parameters or more, its weights are freed and gathered once more.
    All 0 where the framework has no such distance (the backward's gather serves both). The routed experts'
    gathers are not counted again."""
    reuse = profile_of(workload.framework).zero3_reuse_distance_params
    shape = (len(RECOMPUTE_POLICIES), *np.shape(tp))
    if reuse is None:
        return np.zeros(shape)
    modules = layer_modules(model, tp)
    total = sum(elements for _, elements in modules)
    out = np.zeros(shape)
    for code, policy in enumerate(RECOMPUTE_POLICIES):
        again = [name in memory.rerun_producers(model, policy) for name, _ in modules]
        for i, (_, elements) in enumerate(modules):
            later = modules[i + 1 :]
            between = sum(n for _, n in later) + sum(
                n for (_, n), rerun in zip(later, again[i + 1 :]) if rerun
            )
            out[code] = out[code] + np.where(again[i] & (between >= reuse), elements, 0.0) / total
    return out


def zero_copy_bytes_per_param(workload: Workload, acc: Accelerator, gathers: int) -> float:
    """HBM bytes per parameter the framework's own copies around one microbatch's ZeRO collectives move:
    ``gathers`` gathers each copied out of the collective's buffer (``Profile.zero_gather_copy_out``: a
    read and a write of the gathered weights) and the reduce-scatter's copy in (``Profile.zero_grad_copy_in``:
    the gradients read in the weights' precision, written in the reduction's). FSDP2 under ZeRO-3 with fp32
    reduction: 2 x 2 x 2 + (2 + 4) = 14 bytes; Megatron's buffers: none. Memory-bound kernels, costed at
    the HBM bandwidth as the element-wise ones."""
    profile = profile_of(workload.framework)
    out = (
        2.0 * gathers * gathered_bytes_per_param(workload, acc)
        if profile.zero_gather_copy_out
        else 0.0
    )
    into = (
        workload.weight_bytes_per_param + workload.grad_bytes_per_param
        if profile.zero_grad_copy_in
        else 0.0
    )
    return out + into


def zero_step_copies(model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, z):
    """The copies (``zero_copy_bytes_per_param``) around the once-per-step ZeRO-1/2 collectives of stage 0
    (keys S, z): the last microbatch's gradient reduce-scatter and the gather of the updated weights
    (``step_collectives``), over the dense ZeRO shard group and the experts' where they shard."""
    zero12 = (z == 1) | (z == 2)
    dense, experts = _zero_sharded_params(model, sh)
    copied = dense * (zero12 & (sh.shards > 1)) + experts * zero12
    return copied * zero_copy_bytes_per_param(workload, acc, 1) / acc.hbm_bytes_per_s


def zero2_copies(model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes):
    """ZeRO-2's copies (``zero_copy_bytes_per_param``) in each microbatch but one on stage 0 (keys S), beside
    ``zero2_microbatch_traffic``: its gradients' reduce-scatter and, where the profile reshards after each
    backward (``Profile.zero2_regathers``), its weights' gather."""
    gathers = 1 if profile_of(workload.framework).zero2_regathers else 0
    dense, experts = _zero_sharded_params(model, sh)
    return (
        (dense + experts) * zero_copy_bytes_per_param(workload, acc, gathers) / acc.hbm_bytes_per_s
    )


def _zero_sharded_params(model: ModelSpec, sh: Shapes) -> tuple:
    """Stage 0's parameters on one device that ZeRO's once-per-step collectives move (keys S): (the dense
    ones, the routed experts' where their ZeRO group shards them, else 0), as ``grad_reduce_scatter``."""
    dense = _f(stage_params(model, sh, first=True))
    if model.moe is None:
        return dense, 0.0
    experts = _f(moe_layers_per_stage(model, sh)) * expert_params_per_moe_layer(model, sh)
    return dense, experts * (sh.expert_shards > 1)


def expert_params_per_layer(model: ModelSpec, sh: Shapes):
    """Routed-expert parameters of the mean layer on one device: 1/ep of the experts, 1/etp of each."""
    return _f(params.expert_layer_params(model, sh.etp)) / sh.ep


def expert_params_per_moe_layer(model: ModelSpec, sh: Shapes):
    """Routed-expert parameters of one MoE layer on one device: 1/ep of its E experts of width F_e / etp."""
    moe = model.moe
    assert moe is not None, "called for mixture-of-experts models only"
    return _f(moe.num_experts * params.ffn_params(model, moe.expert_d_ff, sh.etp)) / sh.ep


def gathered_bytes_per_param(workload: Workload, acc: Accelerator) -> float:
    """Bytes per parameter a ZeRO weight all-gather moves: fp8 where the framework gathers fp8 weights."""
    if fp8_param_gather_of(workload, acc.kind):
        return memory.FP8_BYTES
    return workload.weight_bytes_per_param


def fsdp_exposed_fixed(
    model: ModelSpec,
    acc: Accelerator,
    sh: Shapes,
    fc: dict,
    fwd_window_layer,
    logits_window,
    holds_vocab,
    link_busy_fwd_layer=0.0,
    last=False,
) -> dict:
    """ZeRO-3 exposed seconds per microbatch that do not depend on recompute (keys S, K, o, stage).

    Forward gathers hide behind the previous layer, sharing its links with the hidden TP and CP
    traffic (``shard_link_traffic``); the first layer's gather is exposed; the vocabulary
    gather + reduce-scatter hides behind the logits on the stages holding it. 'copies': the framework's
    own copies around them (``fsdp_collectives``' copies_layer and copies_vocab), apart.
    """
    layers = layers_per_stage(model, sh, last)
    exposed = np.maximum(0.0, fc["gather_layer"] + link_busy_fwd_layer - fwd_window_layer)
    hidden = np.maximum(0.0, fc["gather_layer"] - exposed)
    lost_forward = layers * interference(acc, hidden)
    vocab_exposed = np.maximum(0.0, fc["vocab"] - logits_window)
    lost_vocab = _f(holds_vocab) * interference(acc, fc["vocab"] - vocab_exposed)
    return {
        "forward": layers * exposed + fc["gather_layer"] + lost_forward,
        "vocab": _f(holds_vocab) * vocab_exposed + lost_vocab,
        "lost": lost_forward + lost_vocab,
        "copies": layers * fc["copies_layer"] + _f(holds_vocab) * fc["copies_vocab"],
    }


def grad_reduce_scatter(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, co: Coeffs
) -> tuple:
    """Seconds of one reduce-scatter of stage 0's gradients over the ZeRO shard groups (keys S, o),
    (the dense ones over the shard group, the routed experts' over the expert shard group), each as
    one bucketed collective: ZeRO-1 runs it once a step, ZeRO-2 in every microbatch's backward."""
    half = acc.collective_half_efficiency_bytes
    grads = _f(stage_params(model, sh, first=True)) * workload.grad_bytes_per_param
    dense = ring_time(grads, co.shard, half)
    if model.moe is None:
        return dense, 0.0
    e_grads = (
        _f(moe_layers_per_stage(model, sh))
        * expert_params_per_moe_layer(model, sh)
        * workload.grad_bytes_per_param
    )
    return dense, ring_time(e_grads, co.eshard, half)


def weight_gather(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, co: Coeffs
) -> tuple:
    """Seconds of one all-gather of stage 0's weights over the ZeRO shard groups (keys S, o), (the dense
    ones, the routed experts'), each as one collective: ZeRO-1/2's gather of the updated weights."""
    half = acc.collective_half_efficiency_bytes
    per_param = gathered_bytes_per_param(workload, acc)
    dense = ring_time(_f(stage_params(model, sh, first=True)) * per_param, co.shard, half)
    if model.moe is None:
        return dense, 0.0
    experts = _f(moe_layers_per_stage(model, sh)) * expert_params_per_moe_layer(model, sh)
    return dense, ring_time(experts * per_param, co.eshard, half)


def step_collectives(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, z, co: Coeffs
) -> dict:
    """Once-per-step collectives of stage 0 (keys S, z, o): hideable reductions and exposed gathers.

    'reduce': the ZeRO-1/2 gradient reduce-scatter + DP all-reduce (over every copy when z = 0)
    + the KV-replica all-reduce; they hide behind the last microbatch's backward. ZeRO-2 keeps
    only its shard of the gradients, so it also reduce-scatters those of every other microbatch in
    that microbatch's backward (``zero2_microbatch_traffic``; DeepSpeed's stage 2 reduces at every
    micro-step, FSDP's SHARD_GRAD_OP at every backward outside ``no_sync``).
    'gather': the ZeRO-1/2 gather of updated weights; it hides behind the next step's first
    forward (Megatron --overlap-param-gather), the rest is exposed.
    """
    half = acc.collective_half_efficiency_bytes
    p_stage = _f(stage_params(model, sh, first=True))
    zero12 = _f(((z == 1) | (z == 2)) & (sh.shards > 1))
    sharded = np.where(z >= 1, sh.shards, 1)
    grads = p_stage * workload.grad_bytes_per_param
    dense_rs, expert_rs = grad_reduce_scatter(model, workload, acc, sh, co)
    rs = zero12 * dense_rs
    dp_local = grads / sharded
    dp = np.where(
        z == 0, 2.0 * ring_time(dp_local, co.dp_zero0, half), 2.0 * ring_time(dp_local, co.dp, half)
    )
    kv_bytes = (
        _f(layers_per_stage(model, sh))
        * 2
        * model.d_model
        * model.head_dim
        * workload.grad_bytes_per_param
    )
    kv = 2.0 * ring_time(kv_bytes, co.kv, half)
    dense_gather, expert_gather = weight_gather(model, workload, acc, sh, co)
    gather = zero12 * dense_gather
    if model.moe is None:
        return {"reduce/zero": rs, "reduce/dp": dp, "reduce/kv_replica": kv, "gather/zero": gather}
    # the routed experts' gradients: the expert ZeRO shard group, then the expert replicas
    e_grads = (
        _f(moe_layers_per_stage(model, sh))
        * expert_params_per_moe_layer(model, sh)
        * workload.grad_bytes_per_param
    )
    e_sharded = (z >= 1) & (sh.expert_shards > 1)
    e_rs = _f(e_sharded & (z <= 2)) * expert_rs
    e_dp = np.where(
        z == 0,
        2.0 * ring_time(e_grads, co.eall, half),
        2.0 * ring_time(e_grads / np.where(e_sharded, sh.expert_shards, 1), co.erep, half),
    )
    e_gather = _f(e_sharded & (z <= 2)) * expert_gather
    return {
        "reduce/zero": rs + e_rs,
        "reduce/dp": dp + e_dp,
        "reduce/kv_replica": kv,
        "gather/zero": gather + e_gather,
    }


def zero2_microbatch_traffic(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, co: Coeffs, link_busy
):
    """ZeRO-2's traffic in each microbatch but one on stage 0 (keys S, o): its gradients' reduce-scatter
    (``grad_reduce_scatter``, as the last microbatch's once-per-step one), with ``link_busy``, the hidden
    TP and CP traffic on the same links (``reduction_link_traffic``); where the profile reshards after each
    backward (``Profile.zero2_regathers``) also the weights' gather (``weight_gather``, as the
    once-per-step one of the updated weights). It hides behind ``zero2_window_layer``."""
    dense, experts = grad_reduce_scatter(model, workload, acc, sh, co)
    traffic = dense + experts + link_busy
    if profile_of(workload.framework).zero2_regathers:
        traffic = traffic + sum(weight_gather(model, workload, acc, sh, co))
    return traffic


def zero2_window_layer(workload: Workload, windows: dict):
    """The compute per layer and microbatch ZeRO-2's traffic in it hides behind (``windows``:
    ``compute_per_microbatch``'s): the backward, and the forward too where the profile gathers the
    weights again (``Profile.zero2_regathers``: FSDP prefetches them behind the forward)."""
    window = windows["window/bwd_layer"]
    if profile_of(workload.framework).zero2_regathers:
        window = window + windows["window/fwd_layer"]
    return window


def pipeline_sends(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, k, co: Coeffs
):
    """Exposed pipeline sends per step (keys S, K, o), each of [m, D]/tp: the fill's and the drain's,
    ``pipeline.fill_hops_array`` each (p - 1 with one chunk a device, p v - 1 interleaved), and the steady
    state's, ``pipeline.steady_sends_array`` for each of the K microbatches (1F1B's 2 (p - 1)/p, or two where the
    framework's sends block, ``Profile.pp_sends_block``; an interleaved schedule's 2 v where its chunks wait
    for them, ``core.frameworks.pp_comm_overlap_of``)."""
    m = tokens_per_microbatch(workload, sh, k)
    a = m * model.d_model * workload.activation_bytes / sh.tp
    send = (a + acc.collective_half_efficiency_bytes) * co.pp.seconds_per_byte + co.pp.latency_s
    fill = 2.0 * pipeline.fill_hops_array(sh.pp, sh.v, sh.sched)
    overlap = pp_comm_overlap_of(workload, acc.kind)
    blocking = profile_of(workload.framework, acc.kind).pp_sends_block
    steady = pipeline.steady_sends_array(sh.pp, sh.v, sh.sched, overlap, blocking)
    return (fill + k * steady) * send


def optimizer_time(
    model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, z, offload=0
):
    """Adam step over the local shard, HBM bound (keys S, z, offload): reads grad, master, moments;
    writes master, moments, weights; with the optimizer state offloaded, ``offload_step_parts``."""
    local = optimizer_params(model, sh, z)
    per_param = (
        workload.grad_bytes_per_param
        + 2 * workload.master_bytes_per_param
        + 2 * workload.optimizer_bytes_per_param
        + workload.weight_bytes_per_param
    )
    device = local * per_param / acc.elementwise_bytes_per_s
    if not np.any(offload):
        return device
    host = sum(offload_step_parts(workload, acc, local, device, offload).values())
    return np.where(np.asarray(offload) > 0, host, device)


def optimizer_params(model: ModelSpec, sh: Shapes, z):
    """Parameters whose optimizer state one device of the first stage holds (keys S, z)."""
    local = _f(stage_params(model, sh, first=True)) / np.where(z >= 1, sh.shards, 1)
    if model.moe is not None:
        local = local + expert_stage_params(model, sh) / np.where(z >= 1, sh.expert_shards, 1)
    return local


def offload_step_parts(workload: Workload, acc: Accelerator, local, device_s, offload) -> dict:
    """Seconds of an offloaded optimizer step per device (keys S, z, offload; ``local``: its
    ``optimizer_params``, ``device_s``: the device update's time), by the framework's
    ``Profile.offload_update``. "cpu" (ZeRO-Offload, Ren et al. 2021 section 4): the gradient shard
    goes down (hidden behind the backward where ``offload_grad_copy_hidden``), the device's share of
    the host's cores runs Adam over its shard (``memory.cpu_adam_seconds``), the updated weights come up
    (not with parameter offload: the next forward fetches them). "device": the offloaded state
    streams up and back down, both directions at once, around the device update."""
    profile = profile_of(workload.framework, acc.kind)
    link = acc.host_bytes_per_s_per_direction or np.inf  # offload is refused without it (rules)
    off = np.asarray(offload)
    weights_on_host = memory.offloaded_by_code("weights")[off]
    if profile.offload_update == "device":
        hosted = workload.master_bytes_per_param + workload.optimizer_bytes_per_param
        hosted = hosted + weights_on_host * workload.weight_bytes_per_param
        return {"offload/state_stream": local * hosted / link, "offload/device_update": device_s}
    down = local * workload.grad_bytes_per_param / link
    # each device's process updates its shard on its share of the host's cores (DeepSpeed
    # --bind_cores_to_rank), so a full host runs every device's shard at once
    cores = (acc.host_cpu_cores_per_node or np.inf) / acc.devices_per_host
    return {
        "offload/grads_down": 0.0 * down if profile.offload_grad_copy_hidden else down,
        "offload/cpu_adam": memory.cpu_adam_seconds(local, cores, profile.cpu_adam),
        "offload/params_up": np.where(
            weights_on_host, 0.0, local * workload.weight_bytes_per_param / link
        ),
    }


def param_fetch_time(model: ModelSpec, workload: Workload, acc: Accelerator, sh: Shapes, k):
    """Seconds per step a device waits for its weight shard from host memory under parameter
    offload (keys S, K; ZeRO-3): each microbatch's forward and backward fetch it once (ZeRO-Infinity,
    Rajbhandari et al. 2021 section 5). Counted exposed: the engine models no prefetch overlap
    with compute, so this is an upper bound."""
    local = optimizer_params(model, sh, 3)
    return (
        k
        * 2
        * local
        * workload.weight_bytes_per_param
        / (acc.host_bytes_per_s_per_direction or np.inf)
    )


def _dualpipe(sh: Shapes):
    """Rows whose devices hold two stages, i and p - 1 - i (DualPipe with a pipeline)."""
    return (sh.sched == SCHEDULE_CODES["dualpipe"]) & (sh.pp > 1)


def expert_stage_params(model: ModelSpec, sh: Shapes, first: bool = True):
    """Routed-expert parameters per device of the first or last pipeline stage: the first stage's of
    ``first_device_params``' device; the last stage's MoE layers' (``moe_layers_per_stage``) and the
    multi-token-prediction modules' MoE layers beside its output head (DualPipe's last device: an end device's)."""
    if first:
        return first_device_params(model, sh)[1]
    own = _f(moe_layers_per_stage(model, sh, True)) + np.where(
        _holds_output(sh, False), model.mtp_layers or 0, 0
    )
    return _last_where(model, sh, own * expert_params_per_moe_layer(model, sh), 1)


def stage_params(model: ModelSpec, sh: Shapes, first: bool):
    """Parameters per device outside the routed experts of the first (``first``: ``first_device_params``'
    device) or the last pipeline stage (its layers and the output head; DualPipe's last device: an end
    device's), after TP (arrays)."""
    if first:
        return first_device_params(model, sh)[0]
    return _last_where(model, sh, _last_stage_params(model, sh), 0)


def _last_where(model: ModelSpec, sh: Shapes, own, part: int):
    """The last stage's ``own`` with ``first_device_params``' ``part`` (0: outside the routed experts, 1: the
    experts, 2: layers) of the first device on the rows where the last device is one (``last_is_first``)."""
    rows = last_is_first(sh)
    if not np.any(rows):
        return own
    return np.where(rows, first_device_params(model, sh, end_only=True)[part], own)


def last_is_first(sh: Shapes):
    """Rows whose last device holds what the first does (``first_devices``' first device): DualPipe's (both end
    stages, the embedding and the head) and a single stage's."""
    return _dualpipe(sh) | (sh.pp == 1)


def device_params(model: ModelSpec, sh: Shapes):
    """[the first device's, each middle candidate's] (parameters outside the routed experts, routed-expert
    parameters, layers) for ``first_devices``' devices. The first device holds the embedding (DualPipe's, a
    V-shaped schedule's and a single stage's also the output head and the multi-token-prediction modules).
    Computed once per shapes and model (carried by ``Shapes.take``, like ``layer_split``)."""
    cache = sh.__dict__.setdefault("_split", {})
    key = ("device params", model)
    if key not in cache:
        n = np.shape(sh.pp)
        cache[key] = tuple(np.broadcast_to(_f(x), n) for x in _device_params(model, sh))
    flat = cache[key]
    return [flat[i : i + 3] for i in range(0, len(flat), 3)]


def _device_params(model: ModelSpec, sh: Shapes) -> tuple:
    (end_dense, end_moe), middles = first_devices(model, sh)
    # the first device holds the output head too: DualPipe's, a V-shaped schedule's, a single stage's
    holds_output = _dualpipe(sh) | np.isin(sh.sched, pipeline.V_SHAPED) | (sh.pp == 1)
    per_moe = expert_params_per_moe_layer(model, sh) if model.moe is not None else 0.0
    end = _layers_params(model, sh, end_dense, end_moe) + _embedding_params(model, sh)
    end = end + np.where(holds_output, _output_params(model, sh), 0.0)
    out = [end, (end_moe + np.where(holds_output, model.mtp_layers or 0, 0)) * per_moe]
    out.append(end_dense + end_moe)
    for dense, moe, _ in middles:
        out += [_layers_params(model, sh, dense, moe), moe * per_moe, dense + moe]
    return tuple(out)


def first_device_params(model: ModelSpec, sh: Shapes, end_only: bool = False):
    """``device_params`` of the device with more parameters in all (``end_only``: the first device): what the
    first stage's collectives move and its checkpoint writes (its memory takes the device with more state
    bytes, ``memory_by_zero``)."""
    devices = device_params(model, sh)
    return devices[0] if end_only else _heaviest(devices, lambda d: d[0] + d[1])


def _heaviest(devices: list, weight) -> Any:
    """Entry by entry, each row's values of the device of ``devices`` (tuples, or dicts, of arrays) whose
    ``weight`` is largest (the first of a tie)."""
    return _heaviest_at(devices, weight)[0]


def _heaviest_at(devices: list, weight) -> tuple[Any, Any]:
    """``_heaviest`` and, per row, the position in ``devices`` of the device it took."""
    best, best_w, at = devices[0], weight(devices[0]), np.zeros(np.shape(weight(devices[0])), int)
    for i, other in enumerate(devices[1:], start=1):
        w = weight(other)
        more = w > best_w
        if isinstance(best, dict):
            best = {k: np.where(more, other[k], v) for k, v in best.items()}
        else:
            best = tuple(np.where(more, a, b) for a, b in zip(other, best, strict=True))
        best_w = np.maximum(best_w, w)
        at = np.where(more, i, at)
    return best, at


def _layers_params(model: ModelSpec, sh: Shapes, dense, moe):
    """Parameters per device outside the routed experts of ``dense`` dense and ``moe`` MoE layers."""
    layers = _f(dense) + _f(moe)
    total = layers * per_key(lambda tp: params.layer_params(model, tp), sh.tp)
    if model.moe is None:
        return total
    excess = _f(moe) - layers * params.moe_layer_share(
        model
    )  # the mean layer's MoE share, corrected
    return total + excess * per_key(lambda tp: params.moe_over_dense_mlp(model, tp), sh.tp)


def _embedding_params(model: ModelSpec, sh: Shapes):
    return model.vocab_size * model.d_model // sh.tp + model.learned_positions * model.d_model


def _output_params(model: ModelSpec, sh: Shapes):
    """The output head's parameters per device (none where a single stage ties it to the embedding), the final
    norm and the multi-token-prediction modules outside their experts."""
    vocab = model.vocab_size * model.d_model // sh.tp
    norm = params.final_norm_params(model) + params.output_bias_params(model, sh.tp)
    output = np.where(model.tied_embeddings & (sh.pp == 1), 0, vocab) + norm
    # the multi-token-prediction modules sit with the output head (DeepSeek-V3 report section 3.2.3: the deepest
    # layers with the output head on one PP rank; Megatron's layout puts "m" on the last stage) and share it and
    # the embedding with the main model (section 2.2): their own parameters only
    if model.mtp_layers:
        output = output + model.mtp_layers * per_key(
            lambda tp: params.mtp_params_outside_experts(model, tp), sh.tp
        )
    return output


def _last_stage_params(model: ModelSpec, sh: Shapes):
    """The last stage's own parameters outside the routed experts: its layers, and the output head where it
    holds it (not a V-shaped schedule's last device)."""
    layers = layers_per_stage(model, sh, True)
    moe = moe_layers_per_stage(model, sh, True) if model.moe is not None else 0
    total = _layers_params(model, sh, layers - moe, moe)
    return total + np.where(_holds_output(sh, False), _output_params(model, sh), 0)


def _holds_output(sh: Shapes, first):
    """Rows where the first (``first``) or last stage holds the output head: the last stage, or a single stage;
    a V-shaped schedule's first device, which holds the last chunk too (zb-v, dualpipev)."""
    single = sh.pp == 1
    v_shaped = np.isin(sh.sched, pipeline.V_SHAPED) & ~single
    return np.where(v_shaped, first, (~np.asarray(first)) | single)


def _holds_both_ends(sh: Shapes, first: bool):
    """Rows of a stage that holds the output head besides its own: every DualPipe device with a head (the
    first and last), a V-shaped schedule's first device."""
    v_shaped = np.isin(sh.sched, pipeline.V_SHAPED) & (sh.pp > 1)
    return _dualpipe(sh) | (v_shaped & first)


# ----------------------------------------------------------------------------- memory
# Live arrays at each moment (each counted once). The loss backward holds the logits (fp32 where
# the loss upcasts them) and their gradient; the layer backward after it holds a layer's gathered
# weights (current and prefetched), its unsharded gradients and its recompute working set, never
# both at once.
MOMENTS = {
    "forward_end": ("state", "activations", "gathered", "workspace", "logits"),
    "loss_backward": ("state", "activations", "gathered", "logits", "logits_grad"),
    "layer_backward": ("state", "activations", "gathered", "workspace", "layer_grads", "recompute"),
    "optimizer_step": ("state",),
}


def memory_by_zero(
    model: ModelSpec, workload: Workload, sh: Shapes, z, first: bool, offload=0
) -> dict:
    """Bytes per device that depend on the ZeRO stage and the offload choice (keys S, z, offload,
    stage): state, gathered weights, layer grads; offloaded state in host memory (``host_state``). The first
    stage's state is that of the device of ``device_params`` with more state bytes at each ZeRO stage."""
    if first:  # the heaviest device's state, in bytes
        out = _heaviest(_device_states(model, workload, sh, z), lambda items: sum(items.values()))
    else:
        layers = _last_where(model, sh, _f(layers_per_stage(model, sh, True)), 2)
        experts = expert_stage_params(model, sh, False) if model.moe is not None else 0.0
        out = _state_items(
            model, workload, sh, z, _f(stage_params(model, sh, False)), experts, layers
        )
    p_layer = _f(per_key(lambda tp: params.layer_params(model, tp), sh.tp))
    # the compute weights of the current and prefetched layers, gathered (or, with one shard, cast from the master),
    # and a layer's unsharded gradients; per tensor where the framework gathers and reduces each weight apart
    transient = transient_zero3_weights(workload)
    gathers, reduces = _f((z == 3) & ((sh.shards > 1) | transient)), _f((z >= 2) & (sh.shards > 1))
    gathered, grads = 2 * gathers * p_layer, reduces * p_layer
    tensor = _f(per_key(lambda tp: params.largest_layer_tensor(model, tp), sh.tp))
    gathered_t, grads_t = (
        2 * gathers * tensor,
        2 * reduces * tensor,
    )  # the tensor in use and the next
    if model.moe is not None:  # the routed experts, sharded over the expert ZeRO group
        p_expert = expert_params_per_layer(model, sh)
        e_gathers = _f((z == 3) & ((sh.expert_shards > 1) | transient))
        e_reduces = _f((z >= 2) & (sh.expert_shards > 1))
        gathered, grads = gathered + 2 * e_gathers * p_expert, grads + e_reduces * p_expert
        e_tensor = _f(params.largest_expert_tensor(model, sh.ep, sh.etp))
        gathered_t = np.maximum(gathered_t, 2 * e_gathers * e_tensor)
        grads_t = np.maximum(grads_t, 2 * e_reduces * e_tensor)
    # per tensor: the profile's unit, or a workload whose ZeRO-3 moves each tensor in a collective of its own
    # (fsdp_collectives_per_layer > 1, DeepSpeed ZeRO-3 of 2021: its module hooks gather a tensor where it is used
    # and free it after, and its gradients leave in reduce buckets as they are made)
    if (
        profile_of(workload.framework).zero3_gather_unit == "tensor"
        or workload.fsdp_collectives_per_layer > 1
    ):
        gathered, grads = np.minimum(gathered, gathered_t), np.minimum(grads, grads_t)
    out["temporary/gathered"] = gathered * workload.weight_bytes_per_param
    out["temporary/layer_grads"] = grads * workload.grad_bytes_per_param
    return host_state(out, offload) if np.any(offload) else out


def _device_states(model: ModelSpec, workload: Workload, sh: Shapes, z) -> list[dict]:
    """``_state_items`` of each device of ``device_params``."""
    return [_state_items(model, workload, sh, z, *d) for d in device_params(model, sh)]


def first_stage_devices(
    model: ModelSpec, workload: Workload, sh: Shapes, z, k, r, sequence_parallel: bool
) -> tuple[Any, Any]:
    """Per row, the pipeline ranks whose state and whose saved activations the first stage's memory takes
    (``memory_by_zero``, ``device_activations``): 0, or the middle device of ``first_devices`` that holds more."""
    ranks = [np.zeros(np.shape(sh.pp))] + [_f(i) for _, _, i in first_devices(model, sh)[1]]
    _, state_at = _heaviest_at(_device_states(model, workload, sh, z), lambda d: sum(d.values()))
    _, saved_at = _device_activations_at(model, workload, sh, k, r, sequence_parallel)
    return tuple(
        np.choose(at, np.broadcast_arrays(*ranks)).astype(int) for at in (state_at, saved_at)
    )


def _state_items(
    model: ModelSpec, workload: Workload, sh: Shapes, z, dense, experts, layers
) -> dict:
    """The state entries of a device holding ``dense`` parameters outside the routed experts (sharded over the
    ZeRO group), ``experts`` routed-expert parameters (over the expert ZeRO group) and ``layers`` layers (their
    cached fp8 weight copies)."""
    shards = np.where(z >= 1, sh.shards, 1)
    out = {f"state/{k}": v for k, v in memory.state_bytes(dense, workload, z, shards).items()}
    if model.moe is not None:
        e_shards = np.where(z >= 1, sh.expert_shards, 1)
        for key, v in memory.state_bytes(experts, workload, z, e_shards).items():
            out[f"state/{key}"] = out[f"state/{key}"] + v
    if workload.precision in (
        "fp8",
        "fp4",
    ):  # cached fp8 (fp4) copies of the layers' weights (sharded like them under ZeRO-3)
        p_layer = _f(per_key(lambda tp: params.layer_params(model, tp), sh.tp))
        p_all = p_layer + expert_params_per_layer(model, sh)
        held = layers * p_all / np.where(z == 3, sh.shards, 1)
        if transient_zero3_weights(
            workload
        ):  # under ZeRO-3 cast from the master shard at each gather, like the bf16 weights: none kept
            held = held * _f(z != 3)
        copies = memory.FP8_WEIGHT_COPIES
        if fp8_param_gather_of(workload, "gpu"):  # the workload names its framework (resolved)
            # fp8 parameters (Megatron --fp8-param-gather, torchao float8 FSDP): the fp8 copy is the layer's
            # weight, no bf16 one beside it; the transposed copy stays
            out["state/weights"] = out["state/weights"] - held * (
                workload.weight_bytes_per_param - memory.FP8_BYTES
            )
            copies -= 1
        low_bytes = (
            memory.FP4_BYTES[fp4_recipe_of(workload)]
            if workload.precision == "fp4"
            else memory.FP8_BYTES
        )
        out["state/fp8_weights"] = copies * low_bytes * held
    return out


def host_state(items: dict, offload) -> dict:
    """``items`` with the state entries each offload choice keeps on the host (memory.OFFLOADED_STATE)
    moved from HBM to "host/offloaded_state": no memory moment counts it (MOMENTS)."""
    out, off = dict(items), np.asarray(offload)
    host: np.ndarray | float = 0.0
    for entry in ("weights", "master", "grads", "optimizer"):
        moved = memory.offloaded_by_code(entry)[off]
        host = host + np.where(moved, out[f"state/{entry}"], 0.0)
        out[f"state/{entry}"] = np.where(moved, 0.0, out[f"state/{entry}"])
    out["host/offloaded_state"] = host
    return out


def memory_by_microbatch(
    model: ModelSpec,
    workload: Workload,
    sh: Shapes,
    k,
    r,
    first: bool,
    last,
    sequence_parallel: bool = True,
) -> dict:
    """Bytes per device that depend on the microbatching and recompute (keys S, K, r, stage)."""
    m = tokens_per_microbatch(workload, sh, k)
    act_b = workload.activation_bytes
    # what each row's policy saves in HBM, and what a layer saves in all: the stage's mean layer, its own
    # dense and MoE layers (``at_stage_share``)
    layers = layers_per_stage(model, sh, not first)
    share = (
        stage_moe_share(model, layers, moe_layers_per_stage(model, sh, not first))
        if model.moe is not None
        else 0.0
    )
    per_token, hosted_width, every = per_key_at_share(
        share_keys(model, share),
        lambda tp, r, s: saved_widths_by_policy(model, workload, tp, r, sequence_parallel, s),
        sh.tp,
        r,
    )
    # the first stage's (and DualPipe's last device's): the devices' own layers at their microbatches in flight
    rows = np.asarray(True) if first else last_is_first(sh)
    if np.any(rows):
        offloads = bool(np.any(hosted_width))
        held = device_activations(model, workload, sh, k, r, first, sequence_parallel, offloads)
    if np.all(rows):
        activations, offloaded = held
    else:  # the last stage's layers at its microbatches in flight
        in_flight = pipeline.microbatches_in_flight_array(sh.pp, sh.pp - 1, k, sh.v, sh.sched)
        activations = layers * per_token * m * act_b * in_flight
        offloaded = (
            layers * hosted_width * act_b * m * in_flight
        )  # host_offload_bytes_per_token's widths
        if np.any(rows):
            activations = np.where(rows, held[0], activations)
            offloaded = np.where(rows, held[1], offloaded)
    # one layer's tensors not held in HBM, rebuilt (or brought back from the host) during its backward
    recomputed = (every - per_token) * m * act_b
    # the loss's logits of one microbatch (fp32 where it upcasts them, else in the compute precision; a
    # compiled loss and Transformer Engine's kernel upcast in registers, flops.LOSS_KERNELS_UPCAST_IN_REGISTERS),
    # on the stage holding the output head (DualPipe: both ends)
    upcast = (
        workload.fp32_logits
        and cross_entropy_of(workload) not in flops.LOSS_KERNELS_UPCAST_IN_REGISTERS
    )
    logits_b = 4.0 if upcast else workload.activation_bytes
    logits = _f(last | _holds_both_ends(sh, first)) * m * model.vocab_size / sh.tp * logits_b
    return {
        "activations/saved": activations,
        # in pinned host memory, not HBM: no memory moment counts it (MOMENTS)
        "host/offloaded": offloaded,
        "temporary/workspace": 2
        * m
        * np.maximum(flops.mlp_width_per_token(model) / sh.tp, model.d_model)
        * act_b
        + (dispatch_buffer_bytes(model, workload, sh, m) if model.moe is not None else 0.0)
        + cp_buffer_bytes(model, workload, sh, m),
        "temporary/logits": logits,
        "temporary/recompute": recomputed,
        "temporary/logits_grad": 0.0 * logits
        if workload.framework and profile_of(workload.framework).inplace_cross_entropy
        else logits,
    }


def device_activations(
    model: ModelSpec,
    workload: Workload,
    sh: Shapes,
    k,
    r,
    first: bool,
    sequence_parallel: bool,
    offloads: bool = True,
):
    """(saved bytes in HBM, bytes on the host) of the activations a device of ``first_devices`` holds at its
    peak, its dense and MoE layers each at its microbatches in flight (``pipeline.microbatches_in_flight_array``,
    in whole-stage units), the heavier device (``first``; else DualPipe's last device, an end device). The first
    device of 1F1B, interleaved, GPipe and ZB-H1 holds its stage's at the first stage's count and a middle device
    a middle stage's at the second's (a middle stage holds more layers, the first more microbatches). DualPipe's
    device i holds min(K, p - i) microbatches of stage i and min(K, i + 1) of stage p - 1 - i: the end device p of
    the first stage's and 1 of the last's, a middle device p + 1 of a middle stage's. ``offloads``: whether a
    policy keeps activations on the host (else those bytes are 0)."""
    saved, _ = _device_activations_at(model, workload, sh, k, r, sequence_parallel, first, offloads)
    return saved


def _device_activations_at(
    model: ModelSpec,
    workload: Workload,
    sh: Shapes,
    k,
    r,
    sequence_parallel: bool,
    first: bool = True,
    offloads: bool = False,
):
    """``device_activations`` and, per row, the position in ``first_devices``' devices (0: the first device)
    of the device it took."""
    m = tokens_per_microbatch(workload, sh, k)
    comp = sh.stage_compositions(model)
    first_l, first_moe, last_l, last_moe = comp[:4]
    dual = _f(_dualpipe(sh))
    p, kf = _f(sh.pp), _f(k)
    alive = pipeline.microbatches_in_flight_array
    if_first = np.where(dual, np.minimum(kf, p), alive(sh.pp, 0, k, sh.v, sh.sched))
    if_last = dual * np.minimum(kf, 1.0)
    end = (
        if_first * (first_l - first_moe) + if_last * (last_l - last_moe),
        if_first * first_moe + if_last * last_moe,
    )
    # a middle candidate's stage at its own count in flight (DualPipe's two stages: p + 1 of the candidate's)
    middles = [
        (dense * in_flight / (1 + dual), moe * in_flight / (1 + dual))
        for dense, moe, index in (first_devices(model, sh)[1] if first else [])
        for in_flight in [
            np.where(dual, np.minimum(kf, p + 1), alive(sh.pp, index, k, sh.v, sh.sched))
        ]
    ]

    # a layer's widths are linear in its MoE share (``at_stage_share``): a dense layer's and a MoE layer's (one
    # pass over the keys); the host's only where a policy offloads
    bytes = m * workload.activation_bytes
    kinds = (None,) if model.moe is None else (0.0, 1.0)
    parts = 2 if offloads else 1
    widths = per_key(
        lambda tp, r: tuple(
            w
            for s in kinds
            for w in saved_widths_by_policy(model, workload, tp, r, sequence_parallel, s)[:parts]
        ),
        sh.tp,
        r,
    )

    def held(dense, moe):
        if model.moe is None:
            return [(dense + moe) * bytes * w for w in widths]
        return [
            (dense * bytes) * d + (moe * bytes) * e
            for d, e in zip(widths[:parts], widths[parts:], strict=True)
        ]

    saved, at = _heaviest_at([tuple(held(*d)) for d in (end, *middles)], lambda h: h[0])
    return (saved[0], (saved[1] if offloads else np.zeros(np.shape(saved[0])))), at


def dispatch_buffer_bytes(model: ModelSpec, workload: Workload, sh: Shapes, m):
    """A MoE layer's token buffers in flight: the k dispatched copies of the rank's m/tp tokens
    received (x the busiest device's load, ``expert_load``) and the combine's output, gathered over etp."""
    if model.moe is None:
        return 0.0 * m
    return (
        2
        * m
        / sh.tp
        * model.moe.top_k
        * expert_load(model, workload, sh, m)
        * sh.etp
        * model.d_model
        * workload.activation_bytes
    )


def moment_bytes(items: dict, moment: str) -> dict:
    """The arrays live at ``moment`` (each counted once), chosen from the items of both key classes."""
    return {k: v for k, v in items.items() if _group(k) in MOMENTS[moment]}


def _group(key: str) -> str:
    """The MOMENTS group of an item: 'state/weights' -> 'state', 'temporary/logits_grad' -> 'logits_grad'."""
    head, tail = key.split("/", 1)
    return head if head in ("state", "activations") else tail


# ----------------------------------------------------------------------------- placement -> coefficients
def coeffs_of(
    cluster,
    table: np.ndarray,
    kv_replicas,
    expert_table: np.ndarray | None = None,
    cp_all_to_all: bool = True,
) -> Coeffs:
    """Ring coefficients of every communication group, for factor tables [rows, axes, degree]
    (``placement.fill_order``), with ``kv_replicas`` the TP ranks sharing one KV head per row and
    ``expert_table`` [rows, axes, EXPERT_NESTING] the expert layers' groups (None: no experts).
    Without ``cp_all_to_all`` (no row runs a CP all-to-all: ``Shapes.cpa`` is 1, where
    ``cp_terms`` leaves them out) the cp all-to-all groups are single devices."""

    def group(*degrees):
        return spans_from_factors(cluster.axes, table, degrees)

    def expert(*degrees):
        return spans_from_factors(cluster.axes, expert_table, degrees, EXPERT_NESTING)

    ring, to_all, send = (
        partial(per_distinct_span, f)
        for f in (ring_coefficients_of, all_to_all_coefficients_of, send_coefficients_of)
    )
    tp, cp = group("tp"), group("cp")
    if expert_table is None:  # a dense model: every expert group is a single device
        none = single_device(table.shape[0])
        experts = dict.fromkeys(EXPERT_GROUPS, none)
    else:
        ep = expert("ep")
        experts = dict(
            ep=to_all(ep),
            ep_in=to_all(ep, 0),
            ep_out=to_all(ep, 1),
            etp=ring(expert("etp")),
            eshard=ring(expert("efsdp")),
            erep=ring(expert("edpr")),
            eall=ring(expert("efsdp", "edpr")),
        )
    # the hidden TP and CP traffic beside the ZeRO-3 collectives and the gradient reductions
    shard, data = group("fsdp", "cp"), group("dp", "fsdp", "cp")
    beside = [link_use_of(tp), link_use_of(cp)]
    return Coeffs(
        tp=ring(tp),
        cp=ring(cp),
        cp_a2a=to_all(cp) if cp_all_to_all else single_device(table.shape[0]),
        cp_in=to_all(cp, 0) if cp_all_to_all else single_device(table.shape[0]),
        shard=ring(shard),
        dp=ring(group("dp")),
        dp_zero0=ring(data),
        kv=ring(replica_spans(tp, np.broadcast_to(kv_replicas, (table.shape[0],)))),
        pp=send(group("pp")),
        **experts,
        shard_contention=contention_of(beside, link_use_of(shard)),
        reduce_contention=contention_of(beside, link_use_of(data), False),
    )


EXPERT_GROUPS = ("ep", "ep_in", "ep_out", "etp", "eshard", "erep", "eall")


def single_device(rows: int | tuple[int, ...]) -> RingCoefficients:
    """The coefficients of a group of one device, for ``rows`` rows (or an array shape; nothing to
    communicate)."""
    return RingCoefficients(
        members=np.ones(rows, dtype=np.int64),
        seconds_per_byte=np.zeros(rows),
        latency_s=np.zeros(rows),
        scale_out=np.zeros(rows, dtype=bool),
    )


def layout_coeffs(model: ModelSpec, cluster, layout) -> Coeffs:
    """Ring coefficients of every group of a placed layout (arrays of one row)."""
    experts = expert_factor_table(cluster, layout)[None] if model.moe is not None else None
    return coeffs_of(
        cluster,
        factor_table(cluster, layout.axes)[None],
        params.kv_replication(model, layout.tp),
        experts,
    )


COEFF_GROUPS = (
    "tp",
    "cp",
    "cp_a2a",
    "cp_in",
    "shard",
    "dp",
    "dp_zero0",
    "kv",
    "pp",
    "ep",
    "ep_in",
    "ep_out",
    "etp",
    "eshard",
    "erep",
    "eall",
)


def interleave_coeffs(per_order: list[Coeffs]) -> Coeffs:
    """One Coeffs over (row, order) pairs, index row x len(per_order) + order."""

    def stack(name):
        items = [getattr(c, name) for c in per_order]
        if name in EXPERT_GROUPS and all(
            np.all(c.members == 1) for c in items
        ):  # dense: no expert groups
            return single_device(sum(len(c.members) for c in items))
        return RingCoefficients(
            **{f: np.stack([getattr(c, f) for c in items], axis=1).reshape(-1) for f in RING_FIELDS}
        )

    return with_contention(
        Coeffs(**{name: stack(name) for name in COEFF_GROUPS}),
        lambda name: Contention.stack([getattr(c, name) for c in per_order]),
    )


def with_contention(co: Coeffs, contention) -> Coeffs:
    """``co`` with its contention fields (``shard_contention``, ``reduce_contention``) set to
    ``contention(field name)``."""
    return replace(
        co,
        shard_contention=contention("shard_contention"),
        reduce_contention=contention("reduce_contention"),
    )
