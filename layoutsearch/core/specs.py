"""The frozen concepts the engine reasons about (docs/cost_model.md "Concepts").

Units are SI and named in every field: bytes, seconds, FLOPs, bytes per second. Conversion
from the human units of the YAML catalogues happens once, in ``catalogue.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

MlpKind = Literal["gated", "plain"]
QkNorm = Literal["none", "head", "projection", "l2"]
AxisKind = Literal["torus", "switch", "mesh", "scale_out", "dcn"]
DEGREE_NAMES = ("dp", "fsdp", "tp", "pp", "cp")  # their product is the device count
EXPERT_DEGREE_NAMES = ("ep", "etp")  # expert layers regroup the same devices (MoE parallel folding)
ALL_DEGREE_NAMES = (*DEGREE_NAMES, *EXPERT_DEGREE_NAMES)


class Recompute(StrEnum):
    """Activation-checkpoint policy: a named set of saved tensors (costs.memory.POLICY_SAVES), some of them in host memory (costs.memory.OFFLOADED)."""

    none = "none"
    selective = "selective"
    # Megatron: nothing, the attention core (+ MLP activation), the whole layer
    full = "full"
    # torchtitan per-op selective AC: every other matmul output and the attention output saved
    op = "op"
    # MaxText remat policies
    minimal = "minimal"
    minimal_with_context = "minimal_with_context"
    save_dot_with_context_except_mlp = "save_dot_with_context_except_mlp"
    save_dot_except_mlpwi = "save_dot_except_mlpwi"
    save_dot_except_mlp = "save_dot_except_mlp"
    save_qkv_proj = "save_qkv_proj"
    save_out_proj = "save_out_proj"
    # MaxText's host-offloading policies
    qkv_proj_offloaded = "qkv_proj_offloaded"
    minimal_offloaded = "minimal_offloaded"
    # MaxText remat_policy: custom with the layer input (decoder_layer_input) and the named projections
    # offloaded to host memory, the rest rematerialised (the tpu-recipes MoE and Llama configs)
    custom_offload_input = "custom_offload_input"
    custom_offload_qkv_proj = "custom_offload_qkv_proj"
    custom_offload_out_proj = "custom_offload_out_proj"
    custom_offload_dots_except_mlp = "custom_offload_dots_except_mlp"
    # Megatron selective with --recompute-modules layernorm moe_act: the outputs of the norms that are separate
    # modules (MLA's input norm, a MoE layer's pre-MLP norm) and the routed experts' activation are dropped and
    # recomputed (output-discarding checkpoints), nothing else;
    # with layernorm moe (and mlp for dense layers): the norms and every MLP / MoE layer run forward again;
    # with mla_up_proj (latent attention only): the up-projections run again from the saved latents
    norm_act = "norm_act"
    norm_moe = "norm_moe"
    mla_up_proj = "mla_up_proj"
    # with layernorm mla_up_proj: both, the DeepSeek-V3 report's recompute of the RMSNorms and the MLA
    # up-projections (arXiv 2412.19437 section 3.2.3)
    norm_mla_up_proj = "norm_mla_up_proj"


class Offload(StrEnum):
    """Model state kept in host memory (costs.memory.OFFLOADED_STATE): none; the fp32 master
    weights and Adam moments (the optimizer step runs from the host); or those and the compute
    weights, fetched for every microbatch's forward and backward (ZeRO-Infinity)."""

    none, optimizer, params = "none", "optimizer", "params"


class Schedule(StrEnum):
    """Pipeline schedule: 1F1B, interleaved 1F1B (virtual stages), GPipe (all forwards first); the
    zero-bubble ones that split the backward into input- and weight-gradient work (ZB-H1, its V-shaped
    ZB-V) and DeepSeek's bidirectional DualPipe and its V-shaped DualPipeV (costs.pipeline)."""

    one_f_one_b = "1f1b"  # a name cannot start with a digit
    interleaved = "interleaved"
    gpipe = "gpipe"
    zb_h1 = "zb-h1"  # with virtual stages > 1: interleaved zero bubble
    zb_v = "zb-v"  # two chunks per device in a V
    dualpipe = "dualpipe"  # two directions, each device holds two stages' parameters
    dualpipev = "dualpipev"  # DualPipe cut in half: two chunks per device in a V


class CPFlavour(StrEnum):
    """How context-parallel ranks share the sequence's keys and values in attention
    (costs.terms.cp_per_microbatch; docs/cost_model.md "Context-parallel flavours")."""

    ring = "ring"  # K/V blocks passed around the ring (Liu et al. 2023; Megatron p2p)
    allgather = "allgather"  # one AllGather of K/V per layer (Llama 3 section 3.3.2)
    a2a = (
        "a2a"  # Ulysses: all-to-alls trade the sequence split for a head split (Jacobs et al. 2023)
    )
    a2a_ring = "a2a+ring"  # all-to-all inside a node, ring across nodes (Megatron a2a+p2p)


class Objective(StrEnum):
    """What the search minimises."""

    step_time = "step-time"
    gather_volume = "gather-volume"
    time_to_train = "time-to-train"  # step time over goodput (costs.goodput)
    energy = "energy"  # joules per step (costs.power)


class Method(StrEnum):
    """CP-SAT (a proof) or the exhaustive enumerator (the oracle)."""

    cpsat, enumerate = "cpsat", "enumerate"


class MfuConvention(StrEnum):
    """How MFU counts FLOPs (costs.flops)."""

    model, palm, palm_causal = "model", "palm", "palm-causal"


class Framework(StrEnum):
    """The training framework whose overlap behaviour the step time assumes (core.frameworks)."""

    megatron, torchtitan, maxtext = "megatron", "torchtitan", "maxtext"
    deepspeed, ideal = "deepspeed", "ideal"


class Precision(StrEnum):
    """Matmul precision: bf16 (fp16 costs the same), or fp8 or fp4 GEMMs of the linear layers with bf16
    activations between them."""

    bf16, fp16, fp8, fp4 = "bf16", "fp16", "fp8", "fp4"


class Fp8Recipe(StrEnum):
    """How fp8 GEMMs scale their operands: one scale per tensor (Transformer Engine delayed or current
    scaling, torchao tensorwise), per row (torchao rowwise), per 1x128 activation tile and 128x128
    weight block (DeepSeek-V3's blockwise; Transformer Engine Float8BlockScaling), or per 32 values
    in e8m0 (MXFP8, in the tensor cores of Blackwell and CDNA 4)."""

    tensorwise, rowwise, blockwise, mxfp8 = "tensorwise", "rowwise", "blockwise", "mxfp8"


class Fp4Recipe(StrEnum):
    """How fp4 (e2m1) GEMMs scale their operands: an e4m3 scale per 16 values and an fp32 one per tensor
    (NVIDIA's NVFP4: Transformer Engine NVFP4BlockScaling, Megatron --fp4-recipe nvfp4), or an e8m0 scale per
    32 values (OCP MXFP4); both in the tensor cores of Blackwell at the same peak."""

    nvfp4, mxfp4 = "nvfp4", "mxfp4"


class CudaGraphs(StrEnum):
    """CUDA graphs (GPUs): none; per-layer graphs of the attention and the MoE router and preprocessing; or the whole forward-backward as one graph."""

    none, scoped, full_iteration = "none", "scoped", "full_iteration"


class CrossEntropy(StrEnum):
    """The loss's kernels over the output head's logits (costs.flops.loss_bytes_per_logit): Megatron's three
    (Transformer Engine's Triton kernel; its own torch-compiled one, "native"; its plain PyTorch ops), PyTorch's
    cross entropy eager or compiled, and XLA's fused one."""

    te, native, unfused = "te", "native", "unfused"
    eager, compiled, xla = "eager", "compiled", "xla"


class Routing(StrEnum):
    """How a dropless MoE routes tokens: a trained router (the experts' loads vary), or random routing forced for benchmarks (Megatron --moe-router-force-load-balancing)."""

    learned, forced = "learned", "forced"


RECOMPUTE_POLICIES = tuple(p.value for p in Recompute)
OFFLOADS = tuple(o.value for o in Offload)  # offload codes: none 0, optimizer 1, params 2
CUDA_GRAPHS = tuple(g.value for g in CudaGraphs)
FP8_RECIPES = tuple(r.value for r in Fp8Recipe)
FP4_RECIPES = tuple(r.value for r in Fp4Recipe)
ROUTINGS = tuple(r.value for r in Routing)
CROSS_ENTROPIES = tuple(c.value for c in CrossEntropy)
# A learned router's expert loads per MoE layer and microbatch, standard deviation over mean: fitted to the published
# runs that route with a trained router, dropless, ep > 1 (scripts/fit_routing_cv.py -> results/routing_cv.md)
LEARNED_ROUTING_EXPERT_CV = 0.15
OFFLOAD_POLICIES = tuple(
    p for p in RECOMPUTE_POLICIES if "offload" in p
)  # some saved tensors in host memory
RECOMPUTE_CODES = {
    name: code for code, name in enumerate(RECOMPUTE_POLICIES)
}  # none 0, selective 1, full 2
CP_FLAVOURS = tuple(f.value for f in CPFlavour)
CP_FLAVOUR_CODES = {name: code for code, name in enumerate(CP_FLAVOURS)}  # ring 0, ..., a2a+ring 3
SCHEDULE_CODES = {
    s.value: code for code, s in enumerate(Schedule)
}  # 1f1b 0, interleaved 1, gpipe 2, zb-h1 3, zb-v 4, dualpipe 5, dualpipev 6


@dataclass(frozen=True, kw_only=True, slots=True)
class RopeScaling:
    """Llama 3.1 RoPE frequency scaling (Hugging Face ``rope_scaling`` with rope_type "llama3")."""

    rope_type: Literal["llama3"] = "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeSpec:
    """Mixture-of-experts MLP layers (docs/cost_model.md "Mixture of experts").

    Layer i (from 0) is a MoE layer when i >= ``first_dense_layers`` and (i + 1) is a multiple of
    ``layer_freq`` (Qwen2/3-MoE ``decoder_sparse_step``, Llama 4 ``interleave_moe_layer_step``);
    the other layers have the dense MLP of width ``ModelSpec.d_ff``. A MoE layer holds a router
    [D, E] (plus a bias or a score-correction bias of E values with ``router_bias``), E routed
    experts and ``num_shared_experts`` always-on experts, each an MLP of the model's kind (gated
    or plain, with biases when the model has ``linear_bias``).
    """

    num_experts: int  # routed experts per MoE layer (E)
    top_k: int  # routed experts per token (k)
    expert_d_ff: int  # FFN width of one routed expert (F_e)
    num_shared_experts: int = 0  # always-on experts per MoE layer (s)
    shared_d_ff: int = 0  # FFN width of one shared expert (F_s); 0 without shared experts
    first_dense_layers: int = (
        0  # dense layers before the first MoE layer (DeepSeek first_k_dense_replace)
    )
    layer_freq: int = 1  # every layer_freq-th layer (counting from 1) after those is MoE
    capacity_factor: float | None = (
        None  # tokens per expert capped at c x tokens x k / E; None = dropless
    )
    router_bias: bool = (
        False  # E values per MoE layer: the router's bias (gpt-oss) or DeepSeek-V3's
    )
    # e_score_correction_bias (added to the scores only to choose the experts)
    shared_expert_gate: bool = (
        False  # Qwen2-MoE: a [D, 1] sigmoid gate on the shared expert's output
    )
    # Group-limited routing (DeepSeek-V2/V3 n_group, topk_group): the routed experts in
    # ``expert_groups`` equal groups of consecutive experts, a token's k experts from at most
    # ``groups_per_token`` of them (1 and 1: no limit); it bounds the devices and nodes a token
    # is dispatched to (costs.terms.distinct_share), not the parameter count
    expert_groups: int = 1
    groups_per_token: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a rank-``q_lora_rank``
    bottleneck (None: a full [D, n_q (h_nope + h_rope)] projection), keys and values through a
    rank-``kv_lora_rank`` latent plus one shared RoPE key of ``qk_rope_head_dim``; RMSNorms on the
    two latents. With MLA, ``ModelSpec.head_dim`` is the query-key head width h_nope + h_rope and
    ``num_kv_heads`` equals ``num_heads``."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Architecture only. A decoder-only transformer with optional GQA, mixture-of-experts MLP
    layers (``moe``), multi-head latent attention (``mla``) and multi-token-prediction modules."""

    name: str
    num_layers: int
    d_model: int
    d_ff: int
    mlp: MlpKind
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tied_embeddings: bool
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    linear_bias: bool = False
    learned_positions: int = 0  # rows of a learned position embedding (GPT-3: 2048), 0 = RoPE
    qkv_bias: bool = (
        False  # biases on the Q, K and V projections only (Qwen2); linear_bias implies them
    )
    norms_per_layer: int = (
        2  # norm layers per block: 2 (pre-attention, pre-MLP); Gemma 2/3 4 (also post);
    )
    # Falcon-7B 1 (one norm feeds the parallel attention and MLP)
    # attention and MLP side by side on the layer's input, their outputs summed into the residual
    # (GPT-J, GPT-NeoX, Falcon, PaLM; MaxText's 2023 decoder): one TP collective pair per layer and
    # pass (the input gathered once, the sum reduced once), not two
    parallel_block: bool = False
    norm_weights: bool = True  # False: non-parametric norms (OLMo 1 LayerNorm: no weight, no bias)
    qk_norm: QkNorm = (
        "none"  # RMSNorm of queries and keys: "head" one head_dim weight each (Qwen3, Gemma 3),
    )
    # "projection" over the whole Q and K projections (OLMo 2), "l2" a weightless L2 norm of each query and key head
    # (Llama 4's use_qk_norm, Megatron's --qk-l2-norm); every layer's q and k pass through it (Megatron builds it in
    # every layer; the Hugging Face Llama 4 code skips its NoPE layers, a pass over q and k on a quarter of them)
    sliding_window: int | None = (
        None  # tokens a query attends back to in a windowed layer; None = full attention
    )
    # chunked local attention (Llama 4's attention_chunk_size, MaxText's chunk_attn_window_size): a windowed layer's
    # query attends only to the keys at or before it in its own chunk of this many tokens (position // chunk); a
    # model sets a sliding_window or an attention_chunk, not both
    attention_chunk: int | None = None
    # with a window or chunks: the layers that still attend over the whole sequence (Gemma 2: half)
    full_attention_layers: int = 0
    # layers without a rotary embedding (NoPE), every (num_layers / nope_layers)-th, the last of each period (Llama 4:
    # every 4th, its full-attention layers; Megatron's --no-rope-freq)
    nope_layers: int = 0
    # Hyper-parameters that change neither the parameter count nor the cost; the exporters write them.
    rope_theta: float = 10000.0  # RoPE base (Llama 3: 500000); unused with learned positions
    rope_scaling: RopeScaling | None = None  # Llama 3.1 long-context frequency scaling
    norm_eps: float = 1e-5  # epsilon of every RMSNorm / LayerNorm
    activation: str | None = None  # MLP activation; None = silu (gated) or gelu (plain)
    # Dropout changes no parameter count. Hidden dropout costs its masks, saved (memory.saved_tensor_widths
    # "dropout_masks") and written (flops.elementwise_bytes_per_token_per_layer). Attention dropout runs inside a
    # fused attention kernel, its random numbers regenerated in the backward (not charged); without fused
    # attention the scores' passes count dropout's whatever its rate (flops.SCORE_BYTES_FORWARD: the unfused runs
    # are Megatron-LM's, whose default is 0.1).
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    # Sparse and latent architectures (costs/params.py counts them, costs/terms.py costs them; a sink is one more
    # logit a head in the softmax, not charged).
    attention_sinks: bool = False  # one learned logit per query head per layer (gpt-oss)
    moe: MoeSpec | None = None  # mixture-of-experts MLP layers; None = every layer dense
    mla: MlaSpec | None = None  # multi-head latent attention; None = MHA/GQA projections
    mtp_layers: int = (
        0  # DeepSeek-style multi-token-prediction modules (counted beside the model, not in it)
    )
    # Biases that neither linear_bias nor qkv_bias place (Phi-3.5-MoE: Q, K, V and O biases, none on the MLP)
    attention_out_bias: bool = (
        False  # D values on the attention output projection; linear_bias implies it
    )
    output_head_bias: bool = False  # V values on the output head (Hugging Face lm_head_bias)

    @property
    def activation_name(self) -> str:
        """The MLP activation: ``activation`` or the default of the MLP kind (silu gated, gelu plain)."""
        return self.activation or ("silu" if self.mlp == "gated" else "gelu")

    @property
    def dropless_moe(self) -> bool:
        """A MoE model whose experts take every token routed to them (no capacity factor: no drop, no padding)."""
        return self.moe is not None and self.moe.capacity_factor is None

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (from 0) has the MoE MLP (``MoeSpec``'s rule)."""
        moe = self.moe
        return (
            moe is not None
            and layer >= moe.first_dense_layers
            and (layer + 1) % moe.layer_freq == 0
        )

    @property
    def num_moe_layers(self) -> int:
        """Layers with the MoE MLP (0 for a dense model)."""
        return (
            sum(self.is_moe_layer(i) for i in range(self.num_layers)) if self.moe is not None else 0
        )

    @property
    def nope_interval(self) -> int:
        """Every how many layers one has no rotary embedding (the last of each period: Megatron's --no-rope-freq,
        MaxText's nope_layer_interval); 0 without NoPE layers."""
        return self.num_layers // self.nope_layers if self.nope_layers else 0

    @property
    def num_dense_layers(self) -> int:
        """Layers with the dense MLP of width ``d_ff``."""
        return self.num_layers - self.num_moe_layers

    @property
    def mlp_matrices(self) -> int:
        """Number of D x F matrices in one MLP block: 3 gated (SwiGLU), 2 plain (GELU)."""
        return 3 if self.mlp == "gated" else 2

    @property
    def params_per_norm(self) -> int:
        """Parameters of one norm over D: D (RMSNorm weight), 2D (LayerNorm weight and bias), 0 (non-parametric)."""
        if not self.norm_weights:
            return 0
        return self.d_model * (2 if self.norm == "layernorm" else 1)


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """What is trained: batch, sequence, precisions (bytes per element/parameter)."""

    global_batch_seqs: int
    seq_len: int
    weight_bytes_per_param: int = 2  # bf16 compute weights
    master_bytes_per_param: int = 4  # fp32 master copy
    grad_bytes_per_param: int = 4  # fp32 gradient accumulation buffer
    optimizer_bytes_per_param: int = 8  # Adam m and v in fp32
    activation_bytes: int = 2  # bf16 activations
    causal: bool = True  # causal attention: masked score blocks are skipped (FlashAttention)
    flash_attention: bool = (
        True  # fused attention; False = scores materialised (pre-2022 Megatron, BLOOM)
    )
    fp32_logits: bool = (
        True  # the loss upcasts the output head's logits to fp32; False = it runs on them in the
    )
    # compute precision (NeMo Automodel's MaskedCrossEntropy fp32_upcast: false, MaxText's
    # cast_logits_to_fp32: false): the loss's logits and their gradient take half the bytes
    tp_comm_overlap: bool | None = (
        None  # TP collectives pipelined with their GEMMs inside the fast domain
    )
    # (Transformer Engine userbuffers, torchtitan async TP, XLA collective matmul); None = the framework
    # profile's choice (Problem.build resolves it); a TP group crossing scale-out is never overlapped
    tp_backward_async: bool | None = (
        None  # each column-parallel linear's backward TP collective runs beside its GEMMs
    )
    # (Megatron's LinearWithGradAccumulationAndAsyncCommunication and Transformer Engine's Linear: the input
    # gradient's all-reduce, or reduce-scatter with sequence parallelism, beside the weight gradient, and with
    # sequence parallelism the input's re-gather beside the input gradient); None = the framework profile's
    # choice (Problem.build resolves it)
    grad_accumulation_fusion: bool | None = (
        None  # each microbatch's weight gradients added to their accumulators by the GEMM
    )
    # that computes them (Megatron's --gradient-accumulation-fusion); False = by a kernel of their own
    # (costs.terms.grad_accumulation); None = the framework profile's choice (Problem.build resolves it)
    pp_comm_overlap: bool | None = (
        None  # an interleaved schedule's sends between stages run beside the other chunks' compute
    )
    # (Megatron's --overlap-p2p-communication, its default since October 2023; PyTorch pipelining's asynchronous
    # sends); False = each chunk waits for its sends (costs.terms.pipeline_sends); None = the framework profile's
    # choice (Problem.build resolves it)
    grad_reduce_overlap: bool | None = (
        None  # the once-per-step DP / ZeRO-1/2 gradient reductions run in the last microbatch's backward
    )
    # (Megatron's --overlap-grad-reduce, since 2d5220a, August 2023; PyTorch DDP's and FSDP's bucketed hooks);
    # False = after the whole schedule, waited for (Megatron-LM's local DDP and distributed optimizer before it);
    # None = the framework profile's choice (costs.terms.reduces_in_backward)
    ep_comm_overlap: bool | None = (
        None  # MoE token AllToAlls hidden behind another microbatch's compute (Megatron
    )
    # --overlap-moe-expert-parallel-comm); None = the framework profile's choice (Problem.build resolves it)
    deepep: bool | None = (
        None  # MoE dispatch sends a token once per destination GPU (not per expert copy), over
    )
    # scale-out once per destination node, fanned out over NVLink there (DeepEP / HybridEP: Megatron's flex
    # dispatcher, torchtitan's deepep backend), else once per expert (NCCL AllToAll); dropless routing only;
    # None = the framework profile's choice
    fp8_dispatch: bool = (
        False  # MoE tokens dispatched in fp8 with a scale per 128 values (DeepSeek-V3
    )
    # report section 3.3.2, DeepEP's fp8 dispatch); the combine stays in bf16; fp8 training only
    vendor_attention: bool | None = (
        None  # the vendor's fused attention kernel (Transformer Engine / cuDNN) where
    )
    # the accelerator has one, else the FlashAttention-2 class; None = the framework profile's choice
    triton_attention: bool = (
        False  # MPT's 2022 Triton FlashAttention kernel (llm-foundry's attn_impl: triton) at the
    )
    # accelerator's triton_attention_efficiency instead of either of the above
    torch_compile: bool | None = (
        None  # PyTorch-module frameworks (torchtitan): the model under torch.compile, its
    )
    # element-wise ops fused; False = eager, one kernel per op (costs.flops.eager_elementwise_bytes_per_token_per_layer);
    # None = the framework's own fused kernels (Transformer Engine, XLA) where it has no such choice, else the
    # profile's (Problem.build resolves it)
    compiled_loss: bool | None = (
        None  # under torch.compile, the loss compiled with the model: its fp32 upcast fused, the
    )
    # logits and their gradient held in the compute precision (costs.terms.memory_by_microbatch); None = no
    # such choice, or the profile's (Problem.build resolves it)
    cross_entropy: str | None = (
        None  # the loss's kernels (CrossEntropy; costs.flops.loss_bytes_per_logit): Megatron's te, native or
    )
    # unfused (--cross-entropy-fusion-impl), PyTorch's eager or compiled, XLA's; None = the framework profile's
    # (Problem.build resolves it: torchtitan's follows compiled_loss)
    launch_blocking: bool = (
        False  # every kernel launch waits for the GPU (CUDA_LAUNCH_BLOCKING=1, as the BLOOM
    )
    # runs set it against NCCL hangs): the host's time per layer is exposed and no collective overlaps compute
    fsdp_collectives_per_layer: int = (
        1  # ZeRO-3 gathers per layer: 1 with flat parameters (FSDP, XLA);
    )
    # one per parameter tensor with DeepSpeed ZeRO-3 as of 2021
    training_tokens: float | None = None  # total tokens for a calendar estimate
    precision: str = (
        "bf16"  # Precision: "fp8" runs the GEMMs in fp8 (Transformer Engine / MaxText recipes)
    )
    framework: str | None = (
        None  # Framework profile; None = the accelerator's default (Problem.build resolves it)
    )
    fp8_recipe: str | None = (
        None  # FP8_RECIPES: how fp8 GEMMs scale their operands (the fp8 rate of costs.gemm.fp8_matmul_efficiency);
    )
    # None = the framework profile's default under --precision fp8 (Problem.build resolves it), None in bf16
    fp4_recipe: str | None = (
        None  # FP4_RECIPES: how fp4 GEMMs scale their operands (costs.gemm.fp4_matmul_efficiency);
    )
    # None = nvfp4 under --precision fp4 (Problem.build resolves it), None otherwise
    hbm_bytes: float | None = (
        None  # the device's memory when the part differs from the catalogue's (96 GB H100)
    )
    memory_margin_bytes: float = 0.0  # kept free on every device besides the runtime reserve
    cuda_graphs: str = (
        "none"  # CUDA_GRAPHS: what the host launches as captured graphs. "scoped": per-layer graphs
    )
    # of the attention and the MoE router and preprocessing (Megatron --cuda-graph-impl transformer_engine
    # --cuda-graph-scope attn moe_router moe_preprocess); "full_iteration": one graph per step, forward and backward
    # (--cuda-graph-impl local --cuda-graph-scope full_iteration). They remove MoE host overhead (costs.terms)
    routing: str = (
        "learned"  # ROUTINGS: how a dropless MoE routes tokens. "learned": a trained router, whose
    )
    # experts' loads vary by routing_cv; "forced": random routing, as vendor benchmarks force it (Megatron
    # --moe-router-force-load-balancing). The busiest expert device sets the pace either way (costs.terms.expert_load)
    routing_cv: float = (
        LEARNED_ROUTING_EXPERT_CV  # a learned router's expert loads: standard deviation / mean
    )
    power_limit_w: float | None = (
        None  # per-device power cap (nvidia-smi -pl); below the board power it lowers the
    )
    # sustained clock and so every compute rate (costs.power.clock_factor); None = the rating

    @property
    def global_batch_tokens(self) -> int:
        """B_tok = B_seq x S: tokens in one optimizer step, total (not per device)."""
        return self.global_batch_seqs * self.seq_len

    @property
    def state_bytes_per_param(self) -> int:
        """Model-state bytes per parameter (18 for the mixed-precision Adam preset)."""
        return (
            self.weight_bytes_per_param
            + self.master_bytes_per_param
            + self.grad_bytes_per_param
            + self.optimizer_bytes_per_param
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Accelerator:
    """One chip or GPU, with calibrated achievable fractions."""

    id: str
    name: str
    kind: Literal["tpu", "gpu"]
    peak_flops_per_s: float  # dense bf16
    hbm_bytes: float
    hbm_bytes_per_s: float
    link_bytes_per_s_per_direction: float  # TPU: one ICI link; GPU: NVLink per GPU
    link_latency_s: float
    scale_out_bytes_per_s_per_direction: float  # GPU: NIC per GPU; TPU: DCN per chip
    scale_out_latency_s: float
    runtime_reserve_bytes: float  # runtime, compiler workspace and fragmentation
    matmul_efficiency: float  # achievable fraction of the shape-quantized peak (costs.gemm)
    matmul_half_efficiency_tokens: float  # tokens at which the attention and dispatch matmuls halve
    # GEMMs from their shapes (costs.gemm): the units that work through a GEMM's output tiles (GPU: SMs;
    # TPU: MXUs), the tile one unit computes, and the depth k at which a tile's fixed cost halves its rate
    gemm_units: int
    gemm_tile_rows: int
    gemm_tile_cols: int
    gemm_half_efficiency_depth: float
    attention_efficiency: (
        float  # achievable fraction of peak for the attention core (fused kernels), long contexts
    )
    collective_efficiency: float  # achievable fraction of ICI/NVLink bandwidth
    scale_out_efficiency: float  # achievable fraction of NIC/DCN bandwidth
    collective_half_efficiency_bytes: float  # message size at which bandwidth halves
    microbatch_overhead_s: float  # fixed, non-overlapped cost per microbatch per stage
    step_overhead_s: float  # fixed per optimizer step (launch, logging, data loader)
    torus_dims: int = 0  # TPU: 2 or 3; GPU: 0
    # the runtime its frameworks launch kernels through (core.problem.check_runtime)
    runtime: Literal["cuda", "rocm", "synapse", "xla"] = "cuda"
    wraparound_min_axis: int = 0  # TPU: a torus axis wraps only at/above this size
    wraparound_needs_full_cube: bool = False  # v4/v5p: no wraparound below a 4x4x4 cube
    max_slice_shape: tuple[int, ...] = ()  # TPU: largest ICI domain
    devices_per_host: int = 1
    # GPU libraries' other tiles (rows, cols), picked where they fill the units better, at this share of
    # the main tile's rate (costs.gemm.shape_fraction); a TPU's MXU has none
    gemm_smaller_tiles: tuple[tuple[int, int], ...] = ()
    gemm_smaller_tile_efficiency: float = 1.0
    devices_per_node: int = 1  # GPU: NVLink domain size
    # GPU: the node's devices on one switch (NVSwitch), or on a full mesh of direct links (AMD
    # Infinity Fabric: link_bytes_per_s_per_direction spread over devices_per_node - 1 peer links)
    node_fabric: Literal["switch", "mesh"] = "switch"
    peak_fp8_flops_per_s: float | None = (
        None  # dense fp8 matmuls (MXFP8 on Blackwell); None = no fp8 unit
    )
    fp8_recipe_ratio: tuple[
        tuple[str, float], ...
    ] = ()  # (fp8 recipe, its fraction of the fp8 peak / matmul_efficiency): the recipes the part
    # runs (costs.gemm.fp8_matmul_efficiency); empty = no fp8 unit
    peak_fp4_flops_per_s: float | None = (
        None  # dense fp4 matmuls (NVFP4, MXFP4); None = no fp4 unit
    )
    fp4_recipe_ratio: tuple[
        tuple[str, float], ...
    ] = ()  # (fp4 recipe, its fraction of the fp4 peak / matmul_efficiency) (costs.gemm.fp4_matmul_efficiency)
    grouped_matmul_efficiency: float = (
        1.0  # the MoE experts' grouped GEMMs (TE / CUTLASS grouped GEMM,
    )
    # megablox) as a fraction of the dense matmul efficiency at the same rows
    moe_launch_latency_s: float = (
        0.0  # host seconds per kernel launch of a MoE layer (the frameworks' Python and CUDA
    )
    # launch path on the CPU, one value for every GPU): costs.terms.moe_host_overhead_s counts the launches
    moe_host_sync_s: float = (
        0.0  # per MoE layer and microbatch: the dropless dispatcher's device-to-host copy of the
    )
    # token counts, during which the emptied GPU queue waits on the host
    moe_overhead_full_graph_share: float = (
        1.0  # of the MoE host time, the share a full-iteration CUDA graph removes
    )
    # (the host's launches and syncs; what the layer's small kernels and static buffers cost on the GPU stays)
    overlap_interference: float = (
        0.0  # of each second a collective hides behind compute, the share that compute
    )
    # loses to it (the communication kernels' SMs or cores and HBM traffic): hiding is never free
    host_bytes_per_s_per_direction: float | None = (
        None  # host memory link (PCIe, NVLink-C2C) per device:
    )
    # what host-offloaded activations move over; None = not in the catalogue (offloading policies refused)
    blocking_launch_s_per_layer_pass: float | None = (
        None  # host seconds per layer and forward-equivalent pass
    )
    # the GPU waits for when every launch blocks (Workload.launch_blocking); None = not calibrated (refused)
    norm_hbm_fraction: float = (
        1.0  # of ``hbm_bytes_per_s``, the rate norm kernels (row reductions) move
    )
    # bytes at (``norm_bytes_per_s``)
    elementwise_hbm_fraction: float = (
        1.0  # of ``hbm_bytes_per_s``, the rate the other element-wise kernels
    )
    # (activations, residual adds, casts, the loss, gradient accumulation, the optimizer step) move bytes at
    # (``elementwise_bytes_per_s``); copies and GEMMs' operands move at the datasheet rate
    vendor_attention_efficiency: float | None = (
        None  # the vendor's fused attention (cuDNN / Transformer
    )
    # Engine on Hopper) where it beats the portable FlashAttention-2 class of ``attention_efficiency``
    triton_attention_efficiency: float | None = None  # MPT's 2022 Triton FlashAttention kernel
    # (Workload.triton_attention), fitted on llm-foundry's benchmark tables; None = no figure (refused)
    attention_half_efficiency_keys: float = (
        0.0  # keys per query at which a fused attention kernel runs at half
    )
    # its long-context rate: each query's fixed work per kernel call (its tile's load, the masked diagonal tile,
    # the softmax rescale and the output write) costs as many more keys; 0 = no such cost
    # what the matmul and attention fractions were fitted on (catalogue calibration.compute_fractions): "fitted"
    # (runs of this part's die), "fitted-moe" (its mixture-of-experts runs only) or "borrowed" (another part's fit);
    # where they were not fitted on runs of a model's kind, its predictions take the uncalibrated band
    compute_fractions: Literal["fitted", "fitted-moe", "borrowed"] = "borrowed"
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    checkpoint_write_bytes_per_s_per_node: float | None = (
        None  # storage write bandwidth of one host
    )
    # (devices_per_host devices) for checkpoints; None = costs.goodput's default
    board_power_w: float | None = None  # rated board power (TDP) per device; None = not catalogued
    # one host (devices_per_host devices), as checkpoint_write_bytes_per_s_per_node: its memory, which
    # offloaded model state and activations share, and its CPU cores, which run an offloaded optimizer step;
    # None = not catalogued (optimizer and parameter offload refused)
    host_memory_bytes_per_node: float | None = None
    host_cpu_cores_per_node: int | None = None
    idle_power_w: float | None = None  # per device, powered on and waiting; None = not catalogued
    # per device at its lowest clock doing nothing: the floor a power cap's clock law does not scale
    # (costs.power); None = idle_power_w
    static_power_w: float | None = None

    @property
    def elementwise_bytes_per_s(self) -> float:
        """The HBM rate of element-wise kernels: ``hbm_bytes_per_s`` x ``elementwise_hbm_fraction``."""
        return self.hbm_bytes_per_s * self.elementwise_hbm_fraction

    @property
    def norm_bytes_per_s(self) -> float:
        """The HBM rate of norm kernels (row reductions): ``hbm_bytes_per_s`` x ``norm_hbm_fraction``."""
        return self.hbm_bytes_per_s * self.norm_hbm_fraction

    @property
    def calibrated(self) -> bool:
        """Whether the compute fractions were fitted on runs of this part's die (of any kind of model)."""
        return self.compute_fractions != "borrowed"

    def calibrated_for(self, moe: bool) -> bool:
        """Whether the compute fractions were fitted on runs of this kind of model (dense or MoE)."""
        return self.compute_fractions == "fitted" or (
            moe and self.compute_fractions == "fitted-moe"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Axis:
    """One physical axis a collective group can span (derived from the cluster graph)."""

    name: str  # x, y, z for a torus; node / scale_out for GPUs; dcn between slices
    size: int
    kind: AxisKind
    bytes_per_s_per_direction: float  # one link (torus, mesh), per device (switch, scale_out, dcn)
    wraparound: bool
    latency_s: float
    efficiency: float  # achievable fraction of the bandwidth
    # An oversubscribed fat tree (scale_out): positions per pod under one set of leaves, and the
    # ratio of the pod's NIC bandwidth to its uplinks (1: full bisection; pod_size 0: no tier)
    pod_size: int = 0
    oversubscription: float = 1.0
    pod_latency_s: float = 0.0  # added to latency_s per step of a group that leaves its pod (a WAN)


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """Accelerators plus topology; ``axes`` are derived from the networkx graph."""

    name: str
    accelerator: Accelerator
    axes: tuple[Axis, ...]
    num_slices: int = 1

    @property
    def num_devices(self) -> int:
        return math.prod(a.size for a in self.axes)

    @property
    def host_memory_bytes_per_node(self) -> float | None:
        """The memory of one host (``devices_per_host`` devices): the catalogue's value of the accelerator's system."""
        return self.accelerator.host_memory_bytes_per_node

    @property
    def devices_per_node(self) -> int:
        """Devices sharing one host: ``devices_per_host``, or all of them on a smaller cluster."""
        return min(self.accelerator.devices_per_host, self.num_devices)

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)


Placement = tuple[tuple[str, int], ...]  # ((axis name, factor), ...) from inner to outer
Placements = tuple[tuple[str, Placement], ...]  # (degree, placement) for every degree above 1
UNPLACED = (
    None  # Layout.axes before a placement is chosen; () is a placed layout whose degrees are all 1
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """The decision: degrees, microbatching, checkpointing, ZeRO stage, offload, axis placement.

    ``dp`` is the replicated part of data parallelism, ``fsdp`` the sharded part; data units
    (groups that process different sequences) number dp x fsdp. A mixture-of-experts model's
    expert layers regroup the devices of one pipeline stage (dp x fsdp x tp x cp of them) as
    edp x ep x etp (Megatron-Core MoE parallel folding): ``ep`` devices split the experts,
    ``etp`` split each expert's FFN, and the expert data-parallel degree is what remains.
    """

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    zero_stage: int = 3
    virtual_stages: int = 1
    num_microbatches: int = 1
    recompute: str = "none"  # a Recompute value
    sequence_parallel: bool = True  # shard norm/residual activations over tp (Megatron SP)
    schedule: str = "1f1b"  # a Schedule value
    cp_flavour: str = "ring"  # a CPFlavour value; read only where cp > 1
    axes: Placements | None = UNPLACED
    first_stage_layers: int | None = (
        None  # uneven pipeline split (core.stages); None = the engine's split
    )
    last_stage_layers: int | None = None
    balanced_split: bool = (
        False  # the pipeline's balanced split (core.stages) instead of the engine's
    )
    offload: str = "none"  # an Offload value: model state in host memory

    @property
    def placed(self) -> bool:
        return self.axes is not UNPLACED

    @property
    def placements(self) -> Placements:
        """``axes`` of a placed layout (every layout a search returns or an estimate prices is)."""
        if self.axes is None:
            raise ValueError(f"layout {self} is not placed on the cluster's axes")
        return self.axes

    @property
    def degrees(self) -> dict[str, int]:
        """The five degrees whose product is the device count."""
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "pp": self.pp, "cp": self.cp}

    @property
    def all_degrees(self) -> dict[str, int]:
        """``degrees`` and the expert degrees ep, etp (1 for a dense model)."""
        return {**self.degrees, "ep": self.ep, "etp": self.etp}

    @property
    def expert_data_parallel(self) -> int:
        """edp: the devices of one stage that hold the same expert shard (dp x fsdp x tp x cp / (ep x etp))."""
        return self.dp * self.fsdp * self.tp * self.cp // (self.ep * self.etp)

    @property
    def num_devices(self) -> int:
        return self.dp * self.fsdp * self.tp * self.pp * self.cp

    @property
    def data_units(self) -> int:
        return self.dp * self.fsdp

    def placement(self, degree: str) -> Placement:
        for name, placed in self.axes or ():
            if name == degree:
                return placed
        return ()

    def microbatch_seqs(self, workload: Workload) -> float:
        """Sequences per data unit per microbatch (an integer when the layout is valid)."""
        return workload.global_batch_seqs / (self.data_units * self.num_microbatches)
