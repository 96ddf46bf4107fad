"""FLOPs per token, per layer, per device (docs/cost_model.md "Compute").

Source: the design notes section 5 (a dense layer costs 2 m P_W FLOPs forward and twice that
backward: 6 P_W per token for training) and the scaling-book's transformer chapter (attention
score and value products: 4 T n_q h FLOPs per token forward; causal masking halves them when
the kernel skips masked blocks). Recomputation adds a forward (full) or the attention core
(selective).
"""

from __future__ import annotations

from layoutsearch.core.arrays import FloatArray, IntArray
from layoutsearch.core.specs import ModelSpec
from layoutsearch.costs.params import (
    kv_heads_per_device,
    mla_attention_params_per_layer,
    moe_layer_share,
)

BACKWARD_OVER_FORWARD = 2.0
# FlashAttention's backward recomputes the scores: 5 matmul-sized products against 2 in the
# forward (Dao 2023, FlashAttention-2, section 3.1), so 2.5x the forward.
FLASH_ATTENTION_BACKWARD_OVER_FORWARD = 2.5
# Without fused attention (Megatron-LM before FlashAttention, BLOOM's Megatron-DeepSpeed) each head's S x S scores
# pass through HBM, per element in bytes (16-bit values, a one-byte dropout mask), as (element-wise, row reduction):
# - forward: the QK^T product writes the scores (2); the fused scale-mask-softmax reads them and writes the
#   probabilities (2 + 2, a row reduction: each row's max and sum); dropout reads those and writes its output
#   and mask (2 + 2 + 1); the product with V reads its output (2): 13 bytes, 4 of them the softmax's;
# - backward: the dO V^T product writes the dropout output's gradient (2) and the dV product reads the dropout
#   output (2); dropout's backward reads the gradient and the mask and writes (2 + 1 + 2); the softmax's backward
#   reads that and its saved output and writes the scores' gradient (2 + 2 + 2, a row reduction: each row's sum of
#   products); the dQ and dK products read it (2 + 2): 19 bytes, 6 of them the softmax's.
# The tensors saved for the backward are the softmax output, the mask and the dropout output (Korthikanti et al.
# 2022; memory.SAVED_SCORE_BYTES).
SCORE_BYTES_FORWARD = (9, 4)
SCORE_BYTES_BACKWARD = (13, 6)


def layer_share(model: ModelSpec, share: float | None = None) -> float:
    """The MoE share of the layer a per-layer term costs: ``share`` where given (0 a dense layer, 1 a MoE
    layer; a pipeline stage's own share, ``costs.terms.stage_moe_share``), else the model's mean layer's
    (``params.moe_layer_share``); 0 for a dense model. The terms are linear in it."""
    if model.moe is None:
        return 0.0
    return moe_layer_share(model) if share is None else share


def matmul_params_per_layer(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Weights one TP rank multiplies per token in one layer outside the routed experts
    (projections and MLP, no norms): with MLA its latent projections; a mixture-of-experts model's
    mean layer (``params.moe_layer_share``) with the shared experts and the router (which runs on
    the rank's 1/tp of the tokens, so it counts 1/tp here)."""
    if model.mla is not None:
        attention = mla_projection_params(model, tp)
    else:
        q_out = model.num_heads // tp * model.head_dim
        kv_out = kv_heads_per_device(model, tp) * model.head_dim
        attention = model.d_model * (2 * q_out + 2 * kv_out)
    mlp: FloatArray = model.mlp_matrices * model.d_model * (model.d_ff // tp)
    if model.moe is not None:
        f, moe = moe_layer_share(model), model.moe
        shared = (
            moe.num_shared_experts * model.mlp_matrices * model.d_model * (moe.shared_d_ff // tp)
        )
        mlp = (1.0 - f) * mlp + f * (shared + model.d_model * moe.num_experts / tp)
    return attention + mlp


GemmShape = tuple[FloatArray, FloatArray, FloatArray]  # (count, n, k) of one weight's GEMM


def layer_gemm_shapes(
    model: ModelSpec, tp: IntArray = 1, share: float | None = None
) -> tuple[GemmShape, ...]:
    """(count, n, k) of each weight one TP rank multiplies per token in a layer outside the routed
    experts: QKV (n = (n_q/tp + 2 kv) h, k = D), the attention output (D, n_q h/tp), the MLP's input
    (gated: up and gate fused) and output; MLA's projections as one D-deep GEMM; a mixture-of-experts
    model's mean layer weights the dense MLP by 1 - share and the shared experts and the router by the
    share (``share``: a layer of that MoE share, 0 a dense layer, 1 a MoE layer; default the model's,
    ``params.moe_layer_share``). sum(count x n x k) is ``matmul_params_per_layer``."""
    d, inner = model.d_model, model.mlp_matrices - 1
    attention: tuple[GemmShape, ...]
    if model.mla is not None:
        attention = ((1.0, mla_projection_params(model, tp) / d, d),)
    else:
        q_out = model.num_heads // tp * model.head_dim
        kv_out = kv_heads_per_device(model, tp) * model.head_dim
        attention = ((1.0, q_out + 2 * kv_out, d), (1.0, d + 0 * tp, q_out))
    f = layer_share(model, share)
    dense = 1.0 - f
    mlp: tuple[GemmShape, ...] = (
        (dense, inner * (model.d_ff // tp), d),
        (dense, d + 0 * tp, model.d_ff // tp),
    )
    if model.moe is None:
        return attention + mlp
    moe = model.moe
    shared = moe.num_shared_experts * (moe.shared_d_ff // tp)
    extra: tuple[GemmShape, ...] = (
        (f, inner * shared, d),
        (f, d + 0 * tp, shared),
        (f / tp, moe.num_experts + 0 * tp, d),
    )
    return attention + mlp + extra


def column_parallel_gemm_shapes(
    model: ModelSpec, tp: IntArray = 1
) -> tuple[tuple[GemmShape, ...], tuple[GemmShape, ...]]:
    """(the attention block's, a dense layer's MLP block's) column-parallel input projections among
    ``layer_gemm_shapes(model, tp, 0)``, the linears whose input gradient crosses the TP group in
    backward beside their own GEMMs (costs.terms.tp_async_backward): QKV, and the MLP's input. MLA's
    attention (its up-projections read a latent gathered apart) has none: count 0."""
    d, inner = model.d_model, model.mlp_matrices - 1
    if model.mla is not None:
        attention: tuple[GemmShape, ...] = ((0.0, 1 + 0 * tp, d),)
    else:
        q_out = model.num_heads // tp * model.head_dim
        attention = ((1.0, q_out + 2 * kv_heads_per_device(model, tp) * model.head_dim, d),)
    return attention, ((1.0, inner * (model.d_ff // tp), d),)


def expert_gemm_shapes(model: ModelSpec, etp: IntArray = 1) -> tuple[GemmShape, ...]:
    """(count, n, k) of one routed expert's weights on an expert-TP rank: its input (gated: up and gate
    fused, n = (matrices - 1) F_e / etp, k = D) and output (n = D, k = F_e / etp)."""
    moe = model.moe
    assert moe is not None, "called for mixture-of-experts models only"
    width = moe.expert_d_ff // etp
    return (
        (1.0, (model.mlp_matrices - 1) * width, model.d_model),
        (1.0, model.d_model + 0 * etp, width),
    )


def mla_projection_params(model: ModelSpec, tp: IntArray = 1) -> IntArray:
    """MLA's matmul weights per token on one TP rank: ``params.mla_attention_params_per_layer`` less
    its two latent norms (the down-projections are replicated, each rank runs them on its tokens;
    the head-wise up-projections and the output are split over TP)."""
    a = model.mla
    assert a is not None, "called for latent-attention models only"
    return mla_attention_params_per_layer(model, tp) - (a.q_lora_rank or 0) - a.kv_lora_rank


def routed_params_per_token_per_layer(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Routed-expert weights multiplied per token of a device's microbatch in the mean layer: the
    rank dispatches its 1/tp of the tokens (sequence parallel), each to k experts of width F_e
    (expert TP splits the width and gathers the tokens: the same work): share x k x F_e x D x
    matrices / tp. 0 for a dense model."""
    moe = model.moe
    if moe is None:
        return 0.0 * tp
    return (
        moe_layer_share(model)
        * moe.top_k
        * model.mlp_matrices
        * model.d_model
        * moe.expert_d_ff
        / tp
    )


# The einsum dispatch's backward: the dispatch's input gradient and the combine's two (expert outputs and the
# routing weights its mask carries), 3 einsums against the forward's 2
EINSUM_DISPATCH_BACKWARD_OVER_FORWARD = 1.5


def einsum_dispatch_flops_per_token_per_layer(
    model: ModelSpec, seq_len: int, tp: IntArray = 1, share: float | None = None
) -> FloatArray:
    """Forward FLOPs per token of the mean layer that dispatch and combine a capacity-factor MoE's tokens by
    one-hot einsums over each sequence (``Profile.einsum_capacity_dispatch``): each einsum contracts the token's
    D-wide row with its E x C mask slots, E C = S k c, so 2 S k c D per token, two einsums (dispatch, combine),
    / tp (``share``: as ``layer_share``). 0 for a dense or dropless model."""
    moe = model.moe
    if moe is None or moe.capacity_factor is None:
        return 0.0 * tp
    return (
        layer_share(model, share)
        * 2
        * 2.0
        * seq_len
        * moe.top_k
        * moe.capacity_factor
        * model.d_model
        / tp
    )


def value_head_dim(model: ModelSpec) -> int:
    """Width of a value head: MLA's v_head_dim, else head_dim."""
    return model.mla.v_head_dim if model.mla is not None else model.head_dim


def matmul_flops_per_token_per_layer(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Forward matmul FLOPs per token of one layer on one TP rank: 2 x its weights."""
    return 2.0 * matmul_params_per_layer(model, tp)


def attention_context(seq_len: int, causal: bool) -> float:
    """Average number of keys a query attends to: S/2 with causal skipping, else S."""
    return seq_len / 2 if causal else float(seq_len)


def windowed_attention_context(seq_len: int, window: int, causal: bool) -> float:
    """Average keys per query in a sliding-window layer (window w tokens back).

    Causal with skipping: the band of the causal S x S matrix within w of the diagonal,
    S w - w^2/2 scores, so w - w^2/(2S) per query (S/2 at w = S, as ``attention_context``);
    without causal skipping min(S, w).
    """
    if window >= seq_len:
        return attention_context(seq_len, causal)
    return window - window * window / (2.0 * seq_len) if causal else float(window)


def chunked_attention_context(seq_len: int, chunk: int, causal: bool) -> float:
    """Average keys per query in a chunked layer (chunks of c tokens, a query attending only within its own).

    The S tokens fill n = S // c whole chunks and a last one of r = S - n c: causal with skipping, each chunk a
    causal square, (n c^2 + r^2) / (2 S) per query (S/2 at c >= S, as ``attention_context``); without causal
    skipping (n c^2 + r^2) / S.
    """
    if chunk >= seq_len:
        return attention_context(seq_len, causal)
    whole, rest = divmod(seq_len, chunk)
    squares = (whole * chunk * chunk + rest * rest) / seq_len
    return squares / 2 if causal else squares


def layer_attention_context(model: ModelSpec, seq_len: int, causal: bool) -> float:
    """Average keys per query over the model's layers: ``attention_context`` without a window or chunks;
    with them, the windowed layers at ``windowed_attention_context`` (``chunked_attention_context``) and the
    ``full_attention_layers`` at the full context, averaged over the layers (a stage of a
    pipeline is costed at this average: exact when each stage holds whole local/global periods)."""
    full = attention_context(seq_len, causal)
    if model.attention_chunk is not None:
        local = chunked_attention_context(seq_len, model.attention_chunk, causal)
    elif model.sliding_window is not None:
        local = windowed_attention_context(seq_len, model.sliding_window, causal)
    else:
        return full
    windowed = model.num_layers - model.full_attention_layers
    return (windowed * local + model.full_attention_layers * full) / model.num_layers


def attention_flops_per_token_per_layer(
    model: ModelSpec, seq_len: int, causal: bool, tp: IntArray = 1
) -> FloatArray:
    """Forward QK^T and AV FLOPs per token of one layer on one TP rank: 2 x context x (h_qk + h_v) x
    n_q/tp, 4 x context x h x n_q/tp when the value heads are as wide as the query-key heads
    (context: ``layer_attention_context``, the sliding window's where the model has one; MLA: h_qk =
    nope + rope, h_v its value width). Attention sinks (gpt-oss: one learned logit per head in each
    row's softmax) add no matmul and one term to a row's context-long softmax: nothing here, as the
    fused kernels take them in the same pass (Transformer Engine 2.8 on; Megatron-Bridge falls back to
    unfused attention before it)."""
    return (
        2.0
        * layer_attention_context(model, seq_len, causal)
        * (model.head_dim + value_head_dim(model))
        * (model.num_heads // tp)
    )


def logits_flops_per_token(model: ModelSpec, tp: IntArray = 1) -> FloatArray:
    """Forward FLOPs of the output projection per token (vocab-parallel over TP)."""
    return 2.0 * model.d_model * model.vocab_size / tp


def model_flops_per_token(model: ModelSpec, seq_len: int, convention: str = "model") -> float:
    """Model FLOPs per trained token for MFU (no recomputation), under a named convention.

    - ``model``: 6 x matmul weights (layers + output projection) + causal attention (S/2).
    - ``palm``: PaLM appendix B, 6N + 12 L n_q h S (attention without causal halving).
    - ``palm-causal``: as ``palm`` with the attention term halved.
    """
    n = (
        model.num_layers
        * (matmul_params_per_layer(model) + routed_params_per_token_per_layer(model))
        + model.d_model * model.vocab_size
    )
    causal = convention in ("model", "palm-causal")
    if convention not in MFU_CONVENTIONS:
        raise ValueError(
            f"mfu convention '{convention}' is not one of {', '.join(MFU_CONVENTIONS)}"
        )
    attn = 3.0 * model.num_layers * attention_flops_per_token_per_layer(model, seq_len, causal)
    return float(6.0 * n + attn)


MFU_CONVENTIONS = ("model", "palm", "palm-causal")


def mfu(
    model_flops_per_step: float, step_time_s: float, num_devices: int, peak_flops_per_s: float
) -> float:
    """Model FLOPs utilisation: model FLOPs per step / (step time x devices x peak FLOP/s)."""
    return model_flops_per_step / (step_time_s * num_devices * peak_flops_per_s)


def materialised_score_elements_per_token_per_layer(
    model: ModelSpec, tp: IntArray, seq_len: int, flash_attention: bool
) -> FloatArray:
    """Elements of the materialised S x S scores one TP rank holds per token of a layer: n_q/tp x S (Korthikanti et
    al. 2022); 0 with fused attention, whose kernel keeps them on chip. Each moves ``SCORE_BYTES_FORWARD`` in
    the forward and ``SCORE_BYTES_BACKWARD`` in the backward (``costs.terms.materialised_score_seconds``)."""
    if flash_attention:
        return 0.0 * tp
    return (model.num_heads // tp) * float(seq_len)


def elementwise_bytes_per_token_per_layer(
    model: ModelSpec,
    tp: IntArray,
    sequence_parallel: bool,
    activation_bytes: int,
    share: float | None = None,
) -> FloatArray:
    """HBM bytes one forward of a layer's element-wise ops moves per token (memory-bound work, at the part's
    element-wise rate, ``Accelerator.elementwise_bytes_per_s``).

    Two residual adds (read 2D, write D), the MLP activation (gated: read 2F, write F; plain: read F, write F),
    the rotary embedding of q and k (none with learned positions; and their norms, with ``qk_norm``) and with
    hidden dropout each residual dropout's mask (``residual_dropouts``: a byte per element written). Apart:
    the layer's norms, row reductions at their own rate (``norm_bytes_per_token_per_layer``), a MoE layer's
    permutation, a copy (``permute_bytes_per_token_per_layer``), and without fused attention the passes over the
    materialised scores (``materialised_score_elements_per_token_per_layer``). ``share``: as ``layer_share``.
    """
    d = model.d_model / tp if sequence_parallel else float(model.d_model)
    f = mlp_width_per_token(model, share) / tp
    qk = (model.num_heads // tp + kv_heads_per_device(model, tp)) * model.head_dim
    mlp_act = (3 if model.mlp == "gated" else 2) * f
    # the rotary embedding (none with learned positions, nor in NoPE layers) and the q/k norm, each a read and a write
    qk_passes = 2 * rotary_layer_share(model) + (0 if model.qk_norm == "none" else 2)
    # hidden dropout, fused into the residual add (Megatron's bias-dropout-add): its mask written
    masks = residual_dropouts(model) * DROPOUT_MASK_BYTES * d
    return activation_bytes * (2 * 3 * d + mlp_act + qk_passes * qk) + masks


def rotary_layer_share(model: ModelSpec) -> float:
    """The share of the layers that turn q and k by a rotary embedding: none with learned positions, all but the
    ``nope_layers`` otherwise (a stage is costed at this average, as ``layer_attention_context``)."""
    if model.learned_positions:
        return 0.0
    return 1.0 - model.nope_layers / model.num_layers


# A dropout mask: one byte per element (PyTorch's dropout and Megatron's fused bias-dropout-add keep a bool mask)
DROPOUT_MASK_BYTES = 1


def residual_dropouts(model: ModelSpec) -> int:
    """The dropouts on a layer's residual branches (``hidden_dropout`` > 0): one after the attention block and one
    after the MLP, one in all for a parallel block (Korthikanti et al. 2022 section 4.1: each keeps an s b h mask);
    0 without hidden dropout."""
    if model.hidden_dropout <= 0:
        return 0
    return 1 if model.parallel_block else 2


def norm_bytes_per_token_per_layer(
    model: ModelSpec, tp: IntArray, sequence_parallel: bool, activation_bytes: int
) -> FloatArray:
    """HBM bytes one forward of a layer's norms moves per token (``norms_per_layer``, read + write D each; D/tp
    with sequence parallelism): row reductions, at the part's norm rate (``Accelerator.norm_bytes_per_s``)."""
    d = model.d_model / tp if sequence_parallel else model.d_model + 0.0 * tp
    return activation_bytes * model.norms_per_layer * 2 * d


def permute_bytes_per_token_per_layer(
    model: ModelSpec, tp: IntArray, activation_bytes: int, share: float | None = None
) -> FloatArray:
    """HBM bytes one forward of a MoE layer's permutation moves per token: the k copies of each token gathered
    before the experts and scattered back after (read + write D/tp each), a copy at the datasheet rate
    (``Accelerator.hbm_bytes_per_s``); 0 for a dense model. ``share``: as ``layer_share``."""
    if model.moe is None:
        return 0.0 * tp
    return (
        activation_bytes * layer_share(model, share) * model.moe.top_k * 2 * 2 * model.d_model / tp
    )


# Eager PyTorch (no torch.compile): the HBM bytes per element, (forward, backward), that ops written as several kernels
# move beyond one fused kernel (docs/cost_model.md#eager-pytorch). Norms, GELU and the residual adds are one kernel
# either way (PyTorch >= 2.9 runs nn.RMSNorm as aten._fused_rms_norm on CUDA).
# The rotary embedding in torchtitan's complex form, per q or k element: the upcast to fp32 (read a, write 4), the
# complex multiply (read 4, write 4) and the cast back (read 4, write a) move 16 bytes over the fused read and write;
# the backward retraces the three steps.
EAGER_ROPE_EXTRA_BYTES = (16.0, 16.0)
# The gated MLP, per d_ff element, in activation bytes: forward the activation (read 1, write 1) and the product
# (read 2, write 1), 5 against the fused 3; backward the product's two gradients (read 2, write 1 each) and the
# activation's (read 2, write 1), 9 against the fused 5 (read the gradient, gate and up; write two).
EAGER_GATED_MLP_EXTRA_ACTIVATIONS = (2.0, 4.0)
# torchao's Float8Linear in eager mode casts a tensor to fp8 by a chain of kernels, each reading and writing its
# operands whole (float8_scaling_utils: amax = max(abs(x)), then x.to(float32) * scale, clamped, .to(e4m3)): abs
# (read a, write a), max (read a), the upcast (read a, write 4), the scale (read 4, write 4), the clamp (read 4,
# write 4) and the cast (read 4, write 1): 4a + 25 bytes per element cast, where a fused cast moves a + 1. The
# H100's measurement (results/device_calibration.md, "fp8 quantisation") ran that chain without its clamp
# (4a + 17 bytes) at 2.5 TB/s, between its RMSNorm's and SwiGLU's rates; costed at the element-wise rate.
EAGER_FP8_CAST_BYTES = (
    4.0,
    25.0,
)  # (multiples of the activation bytes a, fixed bytes) per element cast


def eager_elementwise_bytes_per_token_per_layer(
    model: ModelSpec, tp: IntArray, activation_bytes: int, share: float | None = None
) -> tuple[FloatArray, FloatArray]:
    """(forward, backward) HBM bytes per token that a layer's element-wise ops move in eager PyTorch
    beyond the fused kernels ``elementwise_bytes_per_token_per_layer`` counts: the rotary embedding of q
    and k (in ``rotary_layer_share`` of the layers) and a gated MLP's activation and product (the EAGER_*
    constants above). ``share``: as ``layer_share``."""
    qk = (
        rotary_layer_share(model)
        * (model.num_heads // tp + kv_heads_per_device(model, tp))
        * model.head_dim
    )
    f = mlp_width_per_token(model, share) / tp if model.mlp == "gated" else 0.0
    fwd, bwd = (
        rope * qk + act * activation_bytes * f
        for rope, act in zip(EAGER_ROPE_EXTRA_BYTES, EAGER_GATED_MLP_EXTRA_ACTIVATIONS)
    )
    return fwd, bwd


# the loss kernels that hold no fp32 copy of the logits: they upcast each block in registers (Transformer Engine's
# writes the gradient over the bf16 logits, inductor's fuses the upcast into its reductions)
LOSS_KERNELS_UPCAST_IN_REGISTERS = ("te", "compiled")


def loss_bytes_per_logit(kernel: str, activation_bytes: int, fp32_logits: bool) -> float:
    """HBM bytes the loss's kernels move per logit, forward and backward (docs/cost_model.md#the-loss), for
    logits written in the activation precision (a bytes) and, where the kernel upcasts them, l = 4 bytes
    (``fp32_logits``; else l = a). Per-row statistics are left out; vocabulary-sized passes only:

    - te: Transformer Engine's Triton kernel (parallel_cross_entropy, TE 2.2 to 2.17) reads the logits for the
      row's max and sum (a), reads them again and writes the gradient over them (2a); the backward scales it
      by the per-token loss gradient in place (2a): 5a.
    - native: Megatron's torch-compiled one (fusions/fused_cross_entropy.py): the upcast with the max (a + l),
      exp in place with the sum (2l), the division (2l); backward the scaled gradient cast back (l + a) and
      the in-place buffer written back (l): 2a + 7l.
    - unfused: Megatron's PyTorch ops (tensor_parallel/cross_entropy.py): upcast (a + l), max (l), subtract,
      exp and divide in place (2l each), sum (l); backward the scaling in place (2l) and the cast back
      (l + a): 2a + 12l.
    - eager: PyTorch's cross entropy on the upcast logits: the upcast (a + l), log-softmax (three reads and a
      write of l); backward the dense NLL gradient (l), log-softmax's (3l) and the cast back (l + a): 2a + 10l,
      8a without an upcast.
    - compiled: the same under torch.compile, inductor's online softmax reading the logits once forward and
      the backward reading them and writing the gradient: 3a.
    - xla: MaxText's cross_entropy_with_logits under XLA: max (l), the shifted exponentials written with
      their sum (2l), the one-hot product (l); backward read and write (2l): 6l.
    """
    a = float(activation_bytes)
    l = 4.0 if fp32_logits else a  # noqa: E741 (the docstring's l)
    upcast = 2.0 * (a + l) if l != a else 0.0
    return {
        "te": 5.0 * a,
        "native": 2.0 * a + 7.0 * l,
        "unfused": 2.0 * a + 12.0 * l,
        "eager": 8.0 * l + upcast,
        "compiled": 3.0 * a,
        "xla": 6.0 * l,
    }[kernel]


def loss_bytes_per_token(
    model: ModelSpec, tp: IntArray, kernel: str, activation_bytes: int, fp32_logits: bool
) -> FloatArray:
    """HBM bytes per token, forward and backward, that the loss moves over the stage's V/tp logits
    (``loss_bytes_per_logit``)."""
    return loss_bytes_per_logit(kernel, activation_bytes, fp32_logits) * model.vocab_size / tp


def mlp_width_per_token(model: ModelSpec, share: float | None = None) -> float:
    """FFN width a token passes through in the mean layer: d_ff for a dense model; with MoE the dense
    layers' d_ff and the MoE layers' k routed experts and s shared experts (share-weighted; ``share``:
    as ``layer_share``)."""
    if model.moe is None:
        return float(model.d_ff)
    f, moe = layer_share(model, share), model.moe
    return (1.0 - f) * model.d_ff + f * (
        moe.top_k * moe.expert_d_ff + moe.num_shared_experts * moe.shared_d_ff
    )


def hardware_flops_per_token(model: ModelSpec, seq_len: int, recompute: str) -> float:
    """Megatron Eq. 3 "hardware" FLOPs per token: palm (non-causal) model FLOPs + the recomputed forward.

    Narayanan et al. 2021 eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) per step with full recompute
    = layer FLOPs x 4/3 + 6 h V logits. Selective recompute adds the attention-core forward only.
    """
    base = model_flops_per_token(model, seq_len, "palm")
    attn = float(model.num_layers * attention_flops_per_token_per_layer(model, seq_len, False))
    if recompute == "full":
        return float(
            base
            + model.num_layers
            * (
                matmul_flops_per_token_per_layer(model)
                + 2.0 * routed_params_per_token_per_layer(model)
            )
            + attn
        )
    return base + (attn if recompute == "selective" else 0.0)
