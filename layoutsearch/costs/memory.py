"""Bytes per device at named moments (docs/cost_model.md "Memory"; design notes sections 1-2).

The peak is the maximum over moments of the live objects, each array counted once:
M_peak = max_u [M_state(u) + M_activation(u) + M_temporary(u)].
"""

from __future__ import annotations

from functools import cache, lru_cache

import numpy as np

from layoutsearch.core.arrays import FloatArray, IntArray, read_only
from layoutsearch.core.frameworks import transient_zero3_weights
from layoutsearch.core.specs import (
    OFFLOAD_POLICIES,
    OFFLOADS,
    RECOMPUTE_POLICIES,
    ModelSpec,
    Workload,
)
from layoutsearch.costs.flops import (
    DROPOUT_MASK_BYTES,
    layer_share,
    mlp_width_per_token,
    residual_dropouts,
    value_head_dim,
)
from layoutsearch.costs.params import kv_heads_per_device

# The tensors a layer's backward needs (``saved_tensor_widths``), the op that produces each, and
# what each checkpoint policy saves: the rest is recomputed from the layer input, its producers
# rerun (``recompute_work``). Korthikanti et al. 2022 table 2 for the tensors (the residual dropouts' masks where
# the model has hidden dropout); FlashAttention keeps O and the row log-sum-exp, not the scores.
PRODUCER = {
    "attn_norm_in": "input",
    "qkv_in": "norm",
    "q": "mm_q",
    "k": "mm_k",
    "v": "mm_v",
    "qk_norm_in": "mm_q",
    "attn_out": "attention",
    "attn_lse": "attention",
    "attn_scores": "attention",
    "mlp_norm_in": "mm_o",
    "post_norm_in": "mm_o",
    "mlp_in": "norm",
    "mlp_gate": "mm_gate",
    "mlp_up": "mm_up",
    "mlp_act": "act",
    "mla_latent": "mm_latent",  # MLA: the query and key-value latents (and the shared RoPE key), up-projections' input
    # the two norms' outputs where they are separate modules in Megatron's Transformer Engine layer spec (elsewhere
    # the norm is fused into the next linear, which saves its output as qkv_in / mlp_in): MLA's input norm, and
    # the pre-MLP norm of a MoE layer (the router and the dispatcher read it)
    "latent_in": "norm",
    "moe_in": "norm",
    # MoE: the tokens dispatched to the experts, the router's fp32 probabilities, the routed experts' activation
    "moe_dispatched": "norm",
    "moe_probs": "norm",
    "moe_act": "act",
    # hidden dropout: the residual dropouts' masks, regenerated from the saved random state where a policy does
    # not keep them (no matmul reruns; the regenerating pass itself is not charged)
    "dropout_masks": "dropout",
    # the down projection's output: no backward reads it, but torchtitan's per-op policy caches every
    # other matmul's output counted from the layer's first, which in a dense layer of 7 matmuls (q, k, v,
    # o, gate, up, down) includes it (measured: results/device_calibration.md)
    "mlp_out": "mm_down",
}
_PROJECTIONS = (
    "q",
    "k",
    "v",
    "qk_norm_in",
    "mla_latent",
)  # the QKV projections' outputs (MaxText "qkv_proj")
_OUT_PROJ = (
    "mlp_norm_in",
    "post_norm_in",
)  # the O projection's output and the residual after it ("out_proj")
_CONTEXT = (
    "attn_out",
    "attn_lse",
    "attn_scores",
)  # the attention core's output ("context"; scores when unfused)
_MLP_WI = ("mlp_gate", "mlp_up")  # the MLP input projections' outputs ("mlpwi")
ALL_TENSORS = frozenset(PRODUCER) - {"mlp_out"}  # what a layer's backward reads
# a layer's matmuls (``recompute_work``'s FLOP shares), in the order of its forward
MATMULS = ("mm_latent", "mm_q", "mm_k", "mm_v", "mm_o", "mm_gate", "mm_up", "mm_down")
POLICY_SAVES: dict[str, frozenset] = {
    "none": ALL_TENSORS,
    # Megatron selective (--recompute-modules core_attn, a plain checkpoint): the attention core runs again,
    # but its output stays saved by the O projection that reads it, so only the kernel's own softmax
    # statistics (or an unfused kernel's scores) are freed; the MLP activation is not in the checkpoint
    # (Megatron-LM attention.py _checkpointed_attention_forward; measured: results/device_calibration.md)
    "selective": ALL_TENSORS - {"attn_lse", "attn_scores"},
    "full": frozenset({"attn_norm_in"}),  # the layer input: the whole layer runs forward again
    # torchtitan op SAC: outputs of every other matmul (wq, wv, w1 / gate, w2) and of the attention kernel
    "op": frozenset(
        {"attn_norm_in", "q", "v", "qk_norm_in", "mla_latent", *_CONTEXT, "mlp_gate", "mlp_out"}
    ),
    # MaxText remat policies (decoder checkpoint names: qkv_proj, context, out_proj, mlpwi, mlpwo)
    "minimal": frozenset(
        {"attn_norm_in", *_PROJECTIONS, *_OUT_PROJ, *_MLP_WI}
    ),  # every dot without batch dims
    "minimal_with_context": frozenset(
        {"attn_norm_in", *_PROJECTIONS, *_CONTEXT, *_OUT_PROJ, *_MLP_WI}
    ),
    "save_dot_with_context_except_mlp": frozenset(
        {"attn_norm_in", *_PROJECTIONS, *_CONTEXT, *_OUT_PROJ}
    ),
    "save_dot_except_mlpwi": frozenset({"attn_norm_in", *_PROJECTIONS, *_OUT_PROJ}),
    "save_dot_except_mlp": frozenset({"attn_norm_in", *_PROJECTIONS, *_OUT_PROJ}),
    "save_qkv_proj": frozenset({"attn_norm_in", *_PROJECTIONS}),
    "save_out_proj": frozenset({"attn_norm_in", *_OUT_PROJ}),
}
# Host offloading (MaxText: jax.checkpoint_policies.save_and_offload_only_these_names, offload_dst
# "pinned_host"): a policy that keeps the tensors of another (its recompute is that policy's) with some
# of them in host memory; they leave HBM during the forward and come back for the backward.
OFFLOADED: dict[str, tuple[str, frozenset]] = {
    "qkv_proj_offloaded": ("save_qkv_proj", frozenset(_PROJECTIONS)),
    "minimal_offloaded": (
        "minimal",
        frozenset({*_PROJECTIONS, *_OUT_PROJ, *_MLP_WI}),
    ),  # every dot but the context
    # remat_policy: custom, decoder_layer_input: offload, and the named projections offloaded too
    "custom_offload_input": ("full", frozenset({"attn_norm_in"})),
    "custom_offload_qkv_proj": ("save_qkv_proj", POLICY_SAVES["save_qkv_proj"]),
    "custom_offload_out_proj": ("save_out_proj", POLICY_SAVES["save_out_proj"]),
    "custom_offload_dots_except_mlp": ("save_dot_except_mlp", POLICY_SAVES["save_dot_except_mlp"]),
}
POLICY_SAVES.update({name: POLICY_SAVES[base] for name, (base, _) in OFFLOADED.items()})
# Megatron --recompute-modules layernorm moe_act (transformer_config.py: output-discarding checkpoints): the
# separate norms' outputs (transformer_layer.py recomputes a norm only where it is no IdentityOp, i.e. not fused into
# the next linear: MLA's input norm, a MoE layer's pre-MLP norm) and the routed experts' activation are recomputed
# in backward; the dispatched tokens the grouped GEMMs read stay. A dense model without MLA recomputes nothing.
SEPARATE_NORM_OUTPUTS = frozenset(
    {"latent_in", "moe_in"}
)  # what --recompute-modules layernorm drops
POLICY_SAVES["norm_act"] = ALL_TENSORS - SEPARATE_NORM_OUTPUTS - {"moe_act"}
# Megatron --recompute-modules layernorm moe (+ mlp where some layers are dense): the norms' outputs and, from
# the MLP input on, everything the MLP or MoE layer saves; the module is checkpointed whole, so its forward
# (router, dispatch, experts, down projection, combine) runs again in backward (recompute_work)
POLICY_SAVES["norm_moe"] = (
    ALL_TENSORS
    - SEPARATE_NORM_OUTPUTS
    - {
        "mlp_in",
        "moe_dispatched",
        "moe_probs",
        "mlp_gate",
        "mlp_up",
        "mlp_act",
        "moe_act",
    }
)
# Megatron --recompute-modules mla_up_proj (latent attention): the up-projected queries, keys and values (and their
# RoPE) are dropped and recomputed from the saved latents (output-discarding checkpoints)
POLICY_SAVES["mla_up_proj"] = ALL_TENSORS - {"q", "k", "v", "qk_norm_in"}
# Megatron --recompute-modules layernorm mla_up_proj: both, the DeepSeek-V3 report's "recompute all RMSNorm
# operations and MLA up-projections during back-propagation" (arXiv 2412.19437 section 3.2.3). The latents' own
# norms are inside the up-projection checkpoint (Megatron fuses them into linear_q_up_proj / linear_kv_up_proj),
# so the latents are kept once, before their norms. Not recomputed: the pre-MLP norm of a dense layer, which
# Megatron fuses into fc1 (Transformer Engine's LayerNormLinear saves its output, mlp_in: DeepSeek-V3's 3 dense
# layers of 61) and the final norm, outside the layers.
POLICY_SAVES["norm_mla_up_proj"] = POLICY_SAVES["mla_up_proj"] - SEPARATE_NORM_OUTPUTS
WHOLE_MLP_RERUN = (
    "norm_moe",
)  # policies that checkpoint the MLP module whole: its down projection reruns too
assert set(OFFLOADED) == set(OFFLOAD_POLICIES) and set(POLICY_SAVES) == set(RECOMPUTE_POLICIES)
# fp8 training: the linear layers' inputs, quantised before each fp8 GEMM (the cast traffic of
# costs.terms.compute_per_microbatch); whether the saved copy is that fp8 one is the framework's (fp8_storage).
FP8_LINEAR_INPUTS = (
    "qkv_in",
    "latent_in",
    "attn_out",
    "mlp_in",
    "moe_in",
    "mlp_act",
    "moe_dispatched",
    "moe_act",
)
FP8_BYTES = 1
# fp4 (e2m1) values with their block scales: an e4m3 byte per 16 values (NVFP4; its fp32 scale per tensor is
# negligible) or an e8m0 byte per 32 (MXFP4)
FP4_BYTES = {"nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
# fp4 training quantises each linear layer's operands twice from bf16, rowwise for the forward and columnwise
# for the weight gradient (with the random Hadamard transform on the latter: Transformer Engine
# NVFP4BlockScaling, whose rowwise and columnwise copies are each quantised from the bf16 source)
FP4_QUANTISATIONS = 2
# NVFP4's second-level scale, an fp32 one per tensor, is set from the whole tensor's amax, so each quantisation
# reads its source once more before it casts (Transformer Engine's GEMM profiling guide names "the extra memory
# pass for per-tensor amax computation"; a per-tensor fp8 cast, compiled, read its input twice on the H100:
# results/device_calibration.md, "fp8 quantisation"); MXFP4's e8m0 block scales come from each block alone
FP4_AMAX_READS = {"nvfp4": 1, "mxfp4": 0}
TILE_SCALE_BYTES = (
    4 / 128
)  # an fp32 scale per 1 x 128 activation tile (DeepSeek-V3 report section 3.3.2)
E5M6_BYTES = (
    12 / 8
)  # DeepSeek-V3's attention output: 5 exponent and 6 mantissa bits (section 3.3.3)
FP8_WEIGHT_COPIES = (
    2  # fp8 weights cached for the microbatches of a step: W and its transpose (Hopper TE)
)
SAVED_SCORE_BYTES = (
    5  # without fused attention: softmax output 2, dropout mask 1, dropout output 2 (Korthikanti)
)


@cache
def fp8_storage(scheme: str, shared_experts: bool) -> dict[str, tuple[int, float]]:
    """How fp8 training stores each saved tensor under a framework's scheme (``Profile.fp8_activations``):
    (copies kept in the activation precision, bytes per element of the low-precision copies beside
    them); a tensor left out keeps one copy in the activation precision. Sources: docs/cost_model.md
    "fp8 activation storage"."""
    fp8, tile = float(FP8_BYTES), FP8_BYTES + TILE_SCALE_BYTES
    if scheme == "transformer_engine":  # per-tensor scales: nothing per element
        return {
            **{n: (0, fp8) for n in ("qkv_in", "mlp_in", "mlp_act", "moe_dispatched", "moe_act")},
            "latent_in": (0, 2 * fp8),  # the q and the kv down projections each save their own copy
            "moe_in": (1, fp8 if shared_experts else 0.0),  # bf16 for the router; the shared fc1's
        }  # attn_out stays: the attention kernel's bf16 output is the projection's saved input
    if scheme == "deepseek_v3":
        return {
            **{n: (0, tile) for n in ("qkv_in", "latent_in", "mlp_in", "moe_dispatched")},
            **{n: (0, tile) for n in ("mlp_gate", "mlp_up")},  # the SwiGLU input, in fp8 ...
            **{n: (0, 0.0) for n in ("mlp_act", "moe_act")},  # ... and its output recomputed
            "attn_out": (0, E5M6_BYTES),  # one copy for the O projection and the attention backward
            "moe_in": (1, tile if shared_experts else 0.0),  # the gating keeps bf16 (section 3.3.1)
        }
    assert scheme == "none", scheme
    return {}


def saved_tensor_widths(
    model: ModelSpec,
    tp: IntArray,
    sequence_parallel: bool,
    seq_len: int = 0,
    flash_attention: bool = True,
    activation_bytes: int = 2,
    fp8_activations: str = "none",
    share: float | None = None,
) -> dict[str, FloatArray]:
    """Elements per token of every tensor a layer saves for backward, on one TP rank, in units of
    ``activation_bytes``; under fp8 as the framework's scheme ``fp8_activations`` stores them
    (``fp8_storage``: a tensor kept in c copies and b low-precision bytes counts c + b / activation_bytes).
    ``share``: the layer's MoE share (``flops.layer_share``: 0 a dense layer, 1 a MoE layer, default the mean)."""
    widths = _saved_widths(
        model, tp, sequence_parallel, seq_len, flash_attention, activation_bytes, share
    )
    shared = model.moe is not None and model.moe.num_shared_experts > 0
    for name, (copies, low_bytes) in fp8_storage(fp8_activations, shared).items():
        widths[name] = widths[name] * (copies + low_bytes / activation_bytes)
    return widths


def _saved_widths(
    model: ModelSpec,
    tp: IntArray,
    sequence_parallel: bool,
    seq_len: int,
    flash_attention: bool,
    activation_bytes: int,
    share: float | None = None,
) -> dict[str, FloatArray]:
    d_sp = model.d_model / tp if sequence_parallel else float(model.d_model)
    q = model.num_heads // tp * model.head_dim
    kv = kv_heads_per_device(model, tp) * model.head_dim
    v = kv_heads_per_device(model, tp) * value_head_dim(model)
    o_in = model.num_heads // tp * value_head_dim(model)
    f = mlp_width_per_token(model, share) / tp
    share = layer_share(model, share)
    routed = share * model.moe.top_k * model.moe.expert_d_ff / tp if model.moe is not None else 0.0
    latent = 0.0
    if (
        model.mla is not None
    ):  # MLA's query and key-value latents (and the shared RoPE key), inputs of the up-projections
        a = model.mla
        latent = (a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim
    # MoE: the k dispatched copies of each token entering the experts, and the router's fp32 probabilities
    dispatched = 0.0 if model.moe is None else share * model.moe.top_k * model.d_model / tp
    probs = 0.0 if model.moe is None else share * model.moe.num_experts / tp * 4 / activation_bytes
    mlp_input = 0.0 if model.parallel_block and model.norms_per_layer == 1 else 1.0
    return {
        "attn_norm_in": d_sp,  # residual stream entering the layer
        "qkv_in": 0.0
        if model.mla is not None
        else d_sp,  # normalised input of the QKV projection (norm fused in)
        "latent_in": d_sp
        if model.mla is not None
        else 0.0,  # MLA: the input norm's output, down-projections' input
        "q": q,
        "k": kv,
        "v": v,  # inputs of the attention core
        "mla_latent": latent,
        "attn_out": o_in,  # attention output, input of the O projection
        "attn_lse": model.num_heads / tp * 2.0
        if flash_attention
        else 0.0,  # fp32 log-sum-exp per head
        "attn_scores": 0.0
        if flash_attention
        else (model.num_heads // tp) * seq_len * SAVED_SCORE_BYTES / activation_bytes,
        # the residual entering the pre-MLP norm: a parallel block's MLP reads the layer's input (attn_norm_in)
        "mlp_norm_in": 0.0 if model.parallel_block else d_sp,
        # the pre-MLP norm's output in dense layers (norm fused into the MLP); a parallel block with one norm
        # feeds its MLP the QKV projection's input (qkv_in)
        "mlp_in": (1.0 - share) * d_sp * mlp_input,
        "moe_in": share
        * d_sp
        * mlp_input,  # ... in MoE layers (the router's, the dispatcher's and the shared experts' input)
        "moe_dispatched": dispatched,
        "moe_probs": probs,
        "mlp_gate": f * (model.mlp_matrices - 2),  # the gate projection's output (gated MLPs)
        "mlp_up": f,  # the up projection's output (the pre-activation of a plain MLP)
        "mlp_act": f - routed,  # input of the down projection (dense layers, shared experts)
        "moe_act": routed,  # the routed experts' (their grouped down projection's input)
        # Gemma 2/3 post-attention and post-MLP norms: their inputs (the O and down projection outputs)
        "post_norm_in": max(model.norms_per_layer - 2, 0) * d_sp,
        "qk_norm_in": 0.0
        if model.qk_norm == "none"
        else 1.0 * (q + kv),  # q and k before their norms
        # the residual dropouts' masks, a byte per element (flops.residual_dropouts, DROPOUT_MASK_BYTES)
        "dropout_masks": residual_dropouts(model) * DROPOUT_MASK_BYTES * d_sp / activation_bytes,
        # the down projection's output before its reduction (d per token on each TP rank), cached by
        # torchtitan's per-op policy in dense layers of 7 matmuls: not with MLA's extra projections (the
        # count's parity moves) nor with post-norms (post_norm_in holds it)
        "mlp_out": (1.0 - share) * model.d_model
        if model.mla is None and model.norms_per_layer <= 2
        else 0.0,
    }


def kept_by_policy(tensor: str, policy: str) -> bool:
    """Whether a checkpoint policy keeps ``tensor`` (a name of saved_tensor_widths) for backward."""
    return tensor in POLICY_SAVES[policy]


def on_host(tensor: str, policy: str) -> bool:
    """Whether a policy keeps ``tensor`` in host memory (``OFFLOADED``) rather than in HBM."""
    return policy in OFFLOADED and tensor in OFFLOADED[policy][1]


@cache
def on_host_by_code(tensor: str) -> np.ndarray:
    """``on_host`` of ``tensor`` under every policy, indexed by recompute code (RECOMPUTE_CODES)."""
    return np.array([on_host(tensor, policy) for policy in RECOMPUTE_POLICIES])


@cache
def in_hbm_by_code(tensor: str) -> np.ndarray:
    """Whether each policy keeps ``tensor`` saved in HBM (``kept_by_policy``, not offloaded), by recompute code."""
    return np.array(
        [
            kept_by_policy(tensor, policy) and not on_host(tensor, policy)
            for policy in RECOMPUTE_POLICIES
        ]
    )


@lru_cache(maxsize=1024)  # a validation run's records hold hundreds of model variants
def recompute_arrays(model: ModelSpec) -> dict[str, np.ndarray]:
    """``recompute_work`` of every policy, as arrays indexed by recompute code (RECOMPUTE_CODES);
    computed once per model (read-only arrays: every cost function of a search asks for them)."""
    work = [recompute_work(model, policy) for policy in RECOMPUTE_POLICIES]
    out = {key: np.array([w[key] for w in work]) for key in work[0]}
    read_only(out)
    return out


@lru_cache(maxsize=256)
def rerun_producers(model: ModelSpec, policy: str) -> frozenset[str]:
    """What a recompute policy runs again in the backward, per layer (``PRODUCER`` names: the matmuls
    ``mm_*``, ``attention``, ``norm``, ``act``): ``full`` the whole layer; other policies the producers of the
    tensors they do not save (and the whole MLP where they keep none of it, ``WHOLE_MLP_RERUN``)."""
    policy = OFFLOADED[policy][0] if policy in OFFLOADED else policy
    if policy == "full":
        return frozenset(MATMULS) | {"attention", "norm", "act"}
    present = _saved_widths(
        model, 1, False, 0, True, 2
    )  # a tensor this model does not have reruns nothing
    rerun = {PRODUCER[t] for t in ALL_TENSORS - POLICY_SAVES[policy] if present[t] > 0}
    return frozenset(rerun | ({"mm_down"} if policy in WHOLE_MLP_RERUN else set()))


def recompute_work(model: ModelSpec, policy: str) -> dict[str, float]:
    """What a policy reruns in backward, per layer: the share of the layer's forward matmul FLOPs
    ('matmul'), whether the attention core runs again ('attention'), the share of the forward's
    element-wise passes ('elementwise') and of its four sequence-parallel TP collectives ('tp':
    the all-gather before the QKV and the MLP input projections, the reduce-scatter after the O
    and the MLP output projections). ``full`` reruns the whole layer; other policies rerun the
    producers of what they do not save."""
    policy = (
        OFFLOADED[policy][0] if policy in OFFLOADED else policy
    )  # offloading moves bytes, reruns nothing more
    d, q, kv, f = (
        model.d_model,
        model.num_heads * model.head_dim,
        model.num_kv_heads * model.head_dim,
        mlp_width_per_token(model),
    )
    flops = {
        "mm_q": d * q,
        "mm_k": d * kv,
        "mm_v": d * kv,
        "mm_o": q * d,
        "mm_gate": d * f * (model.mlp_matrices - 2),
        "mm_up": d * f,
        "mm_down": f * d,
    }
    if (
        model.mla is not None
    ):  # the latent projections, then the up-projections of the queries, keys and values
        a, n = model.mla, model.num_heads
        q_in = a.q_lora_rank or d
        flops.update(
            mm_latent=d * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_head_dim),
            mm_q=q_in * n * model.head_dim,
            mm_k=a.kv_lora_rank * n * a.qk_nope_head_dim,
            mm_v=a.kv_lora_rank * n * a.v_head_dim,
            mm_o=n * a.v_head_dim * d,
        )
    rerun = rerun_producers(model, policy)
    # the all-gather before the attention's input projections: MLA's down-projections, else Q, K and V
    qkv_in = ("mm_latent",) if model.mla is not None else ("mm_q", "mm_k", "mm_v")
    collectives = [
        any(p in rerun for p in qkv_in),
        "mm_o" in rerun,
        any(p in rerun for p in ("mm_gate", "mm_up")),
        "mm_down" in rerun,
    ]
    return {
        "matmul": sum(v for k, v in flops.items() if k in rerun) / sum(flops.values()),
        "attention": float("attention" in rerun),
        "elementwise": 1.0
        if policy == "full"
        else 0.5 * ("norm" in rerun),  # the norms' half of the passes
        "tp": sum(collectives) / 4.0,
        "moe": float(collectives[2]),
    }  # the MLP input runs again: a MoE layer dispatches its tokens again


def state_bytes(
    params: FloatArray, workload: Workload, zero_stage: IntArray, shards: IntArray
) -> dict[str, FloatArray]:
    """Model state of ``params`` parameters on one device, sharded over ``shards`` per ZeRO stage.

    Stage 0 shards nothing; 1 shards optimizer moments and master weights; 2 also gradients;
    3 also the compute weights (ZeRO, Rajbhandari et al. 2020), or, where the framework casts the master shard at
    each gather (``frameworks.transient_zero3_weights``), keeps none of them: they exist only gathered.
    """

    def sharded(bytes_per_param: int, from_stage: int) -> FloatArray:
        return params * bytes_per_param / np.where(np.asarray(zero_stage) >= from_stage, shards, 1)

    kept = (
        np.where(np.asarray(zero_stage) == 3, 0.0, 1.0)
        if transient_zero3_weights(workload)
        else 1.0
    )
    return {
        "weights": kept * sharded(workload.weight_bytes_per_param, 3),
        "master": sharded(workload.master_bytes_per_param, 1),
        "grads": sharded(workload.grad_bytes_per_param, 2),
        "optimizer": sharded(workload.optimizer_bytes_per_param, 1),
    }


# Optimizer and parameter offload (specs.Offload): the ``state_bytes`` entries each choice keeps in
# host memory. "optimizer": the fp32 master and the Adam moments (ZeRO-Offload, Ren et al. 2021
# section 3; Megatron --optimizer-cpu-offload); the gradients stay in HBM, where they accumulate.
# "params": the compute weights and the gradients too (ZeRO-Infinity, Rajbhandari et al. 2021
# section 5; FSDP2's CPUOffloadPolicy keeps parameters, gradients and optimizer state on the host).
OFFLOADED_STATE: dict[str, tuple[str, ...]] = {
    "none": (),
    "optimizer": ("master", "optimizer"),
    "params": ("master", "optimizer", "weights", "grads"),
}
assert tuple(OFFLOADED_STATE) == OFFLOADS
# Adam on the host's CPU, parameters updated per second per physical core. Ren et al. 2021
# (ZeRO-Offload, USENIX ATC) table 3: a 10-billion-parameter Adam step takes 2.57 s with
# DeepSpeed's CPU-Adam and 14.76 s with PyTorch's CPU Adam on a DGX-2 host (2 x 24-core Xeon
# Platinum 8168, 48 cores): 10e9 / 2.57 / 48 and 10e9 / 14.76 / 48. Their ratio, 5.7, agrees with
# DeepSpeed's ZeRO-Offload tutorial (deepspeed.ai/tutorials/zero-offload: DeepSpeedCPUAdam "5X-7X
# faster than the standard PyTorch implementation"); the two absolute times are the paper's table
# as quoted, not re-measured.
CPU_ADAM_PARAMS_PER_S_PER_CORE = {"cpu_adam": 10e9 / 2.57 / 48, "torch": 10e9 / 14.76 / 48}


@cache
def offloaded_by_code(entry: str) -> np.ndarray:
    """Whether each offload choice keeps state entry ``entry`` in host memory, indexed by offload code."""
    return np.array([entry in OFFLOADED_STATE[name] for name in OFFLOADS])


def cpu_adam_seconds(params: FloatArray, cores: float, kernel: str) -> FloatArray:
    """Seconds of one Adam step over ``params`` parameters on ``cores`` CPU cores at
    CPU_ADAM_PARAMS_PER_S_PER_CORE[kernel] each."""
    return params / (CPU_ADAM_PARAMS_PER_S_PER_CORE[kernel] * cores)
