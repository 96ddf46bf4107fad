"""The two halves of a framework's declaration: how it overlaps (``Profile``, read by the cost
model) and what its export target can write (``Capabilities``, turned into rules by
``core.rules.framework_rules``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from layoutsearch.core.specs import SCHEDULE_CODES, ModelSpec

EXPERT_TENSOR = ("1", "tp", "other")  # etp = 1, etp = tp, any other etp

GATED_SILU = ("silu", "swish")  # a gated MLP with these is SwiGLU
PLAIN_GELU = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # GELU approximations


def _moe_has(m: ModelSpec, test: Callable) -> bool:
    return m.moe is not None and bool(test(m.moe))


# The model features (ModelSpec fields) that change the parameter count or the cost, by the name
# refusals print; an export target writes each one it builds or refuses the model
# (Capabilities.refused_features). Attention sinks, sliding windows and attention chunks have their own rules.
MODEL_FEATURES: dict[str, Callable[[ModelSpec], bool]] = {
    "per-head q/k norms": lambda m: m.qk_norm == "head" and m.mla is None,
    "q/k projection norms": lambda m: m.qk_norm == "projection",
    "q/k L2 norms": lambda m: m.qk_norm == "l2",
    "NoPE layers": lambda m: m.nope_layers > 0,
    "post-attention and post-MLP norms": lambda m: m.norms_per_layer == 4,
    "parallel attention and MLP": lambda m: m.parallel_block,
    "non-parametric norms": lambda m: not m.norm_weights,
    "LayerNorm": lambda m: m.norm == "layernorm",
    "gated GELU MLP (GeGLU)": lambda m: m.mlp == "gated" and m.activation_name in PLAIN_GELU,
    "MLP activation other than SwiGLU, GeGLU or GELU": lambda m: (
        m.activation_name not in (GATED_SILU + PLAIN_GELU if m.mlp == "gated" else PLAIN_GELU)
    ),
    "linear biases": lambda m: m.linear_bias,
    "Q/K/V-only biases": lambda m: m.qkv_bias and not m.linear_bias,
    "tied embeddings": lambda m: m.tied_embeddings,
    "learned positions": lambda m: m.learned_positions > 0,
    "llama3 rope scaling": lambda m: m.rope_scaling is not None and not m.learned_positions,
    "latent attention": lambda m: m.mla is not None,
    "shared experts": lambda m: _moe_has(m, lambda e: e.num_shared_experts),
    "shared-expert gate": lambda m: _moe_has(m, lambda e: e.shared_expert_gate),
    "dense layers before the MoE layers": lambda m: _moe_has(m, lambda e: e.first_dense_layers),
    "MoE in every n-th layer": lambda m: _moe_has(m, lambda e: e.layer_freq > 1),
    "router bias": lambda m: _moe_has(m, lambda e: e.router_bias),
    "multi-token prediction": lambda m: m.mtp_layers > 0,
    "attention output-projection bias without MLP biases": lambda m: (
        m.attention_out_bias and not m.linear_bias
    ),
    "output-head bias": lambda m: m.output_head_bias,
}


def model_features(m: ModelSpec) -> tuple[str, ...]:
    """The MODEL_FEATURES names of the features model ``m`` has."""
    return tuple(name for name, has in MODEL_FEATURES.items() if has(m))


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """What overlaps with what under one framework (each flag: hidden behind its compute window).

    The defaults are what every framework here does or lacks; a declaration names what differs."""

    name: str
    tp_overlap: tuple[str, ...] = ()
    """Accelerator kinds on which TP collectives are pipelined with their GEMMs by default (inside
    the fast domain only)."""
    tp_overlap_backward: bool = True
    """Whether TP overlap (``Workload.tp_comm_overlap``) pipelines the backward's collectives too
    (Transformer Engine's userbuffers, XLA), or the forward's only."""
    tp_backward_async: bool = False
    """Without TP overlap: each column-parallel linear's backward TP collective is launched asynchronously
    beside its GEMMs (``Workload.tp_backward_async``; costs.terms.tp_per_microbatch): the input gradient's
    all-reduce (reduce-scatter with sequence parallelism) beside the weight gradient, and with sequence
    parallelism the re-gather of the input beside the input gradient (Megatron-Core's
    ``LinearWithGradAccumulationAndAsyncCommunication``, Transformer Engine's ``Linear``). Elsewhere the
    backward's TP collectives wait for their GEMMs."""
    grad_accumulation_fusion: bool = True
    """Each microbatch's weight gradients reach their accumulators at no cost beyond their GEMMs
    (``Workload.grad_accumulation_fusion``): Megatron's gradient-accumulation fusion, whose weight-gradient
    GEMM adds into the fp32 main_grad. Also taken for torchtitan (FSDP2 reduce-scatters each microbatch's
    gradients and accumulates the shards) and MaxText (XLA fuses the add), where it is not measured. False:
    a kernel of their own per microbatch (``costs.terms.grad_accumulation``): DeepSpeed's fp16 and bf16
    optimizers' accumulation hooks."""
    pp_comm_overlap: bool = True
    """An interleaved schedule's steady-state sends between stages run beside the other chunks' compute
    (``Workload.pp_comm_overlap``; costs.terms.pipeline_sends): Megatron's ``--overlap-p2p-communication``
    (default since 4eeff55, October 2023), PyTorch pipelining's asynchronous sends. False: each chunk's forward
    and backward wait for their sends (Megatron-LM before it). 1F1B has no slack to hide them in either way."""
    pp_sends_block: bool = False
    """Each send between pipeline stages holds its sender until the receiver has it (costs.terms.pipeline_sends):
    Megatron's p2p_communication (send_forward_recv_backward and send_backward_recv_forward wait on their
    requests) and DeepSpeed's pipeline engine (p2p.send, synchronous), whose 1F1B then waits for two sends a
    microbatch; PyTorch pipelining's sends are asynchronous (2 (p - 1)/p a microbatch)."""
    grad_reduce_overlap: bool = True
    """DP / ZeRO-1/2 reductions behind the last microbatch's backward."""
    param_gather_overlap: bool = True
    """ZeRO-1/2 gather of updated weights behind the next forward."""
    pipelined_grad_reduce_overlap: bool = True
    """The same with pp > 1; DeepSpeed's pipeline engine reduces after the whole schedule (its
    TrainSchedule ends with ReduceTiedGrads, ReduceGrads, OptimizerStep)."""
    zero2_regathers: bool = False
    """ZeRO-2 as PyTorch FSDP runs it (FSDP1's SHARD_GRAD_OP, FSDP2's reshard_after_forward=False): the
    weights are resharded after each backward, so every microbatch but the first gathers them again in its
    forward (the first's is the once-per-step gather of the updated weights). DeepSpeed's stage 2 and
    Megatron-FSDP keep them whole."""
    fp8_param_gather: tuple[str, ...] = ()
    """The fp8 recipes under which weights are all-gathered in fp8 (Megatron --fp8-param-gather, torchtitan
    enable_fsdp_float8_all_gather), else in bf16 (core.frameworks.fp8_param_gather_of)."""
    fp8_activations: str = "none"
    """With fp8: how the tensors saved for backward are stored (costs.memory.fp8_storage). "none":
    all in the activation precision (torchao's Float8Linear saves its high-precision input; MaxText
    and DeepSpeed unsourced); "transformer_engine": the linear layers save their fp8 input;
    "deepseek_v3": the DeepSeek-V3 report's storage (fp8 linear inputs and SwiGLU input with
    tile scales, the attention output in E5M6)."""
    fp8_recipe: str = "tensorwise"
    """With fp8 and no --fp8-recipe: the scaling recipe the framework runs by default (core.specs.Fp8Recipe).
    tensorwise (one scale per tensor) is every declared framework's default: Megatron-LM's --fp8-recipe
    default 'delayed', torchtitan's Float8Linear recipe_name None (tensorwise), MaxText's quantization 'fp8'
    (Flax's Fp8DotGeneral, per-tensor delayed scaling); each declaration cites its source."""
    recompute_policies: tuple[str, ...] = ("none", "selective", "full")
    """What the search tries by default."""
    cp_flavours: tuple[str, ...] = ("ring",)
    """The context-parallel flavours the search tries where cp > 1 by default: ring, which every
    priced record ran, in every framework but ``ideal`` and ``deepspeed`` (whose sequence parallelism
    is Ulysses, a2a) (--cp-flavours widens it; an export
    target's Capabilities.cp_flavours bound it)."""
    torch_compile: bool | None = None
    """PyTorch-module frameworks: whether the model runs under torch.compile unless told
    (``Workload.torch_compile``): compiled, the element-wise ops are fused kernels; eager, one kernel
    per op (costs.flops.eager_elementwise_bytes_per_token_per_layer). None: the framework's own fused
    kernels (Transformer Engine and Apex in Megatron, XLA in MaxText), with no such choice."""
    compiled_loss: bool | None = None
    """PyTorch-module frameworks: whether torch.compile compiles the loss with the model unless told
    (``Workload.compiled_loss``): the fp32 upcast of the logits is then fused into the loss's kernels and
    never held (torchtitan's compile components model and loss, ``components/loss.py`` since bbb1b616e,
    April 2025). None: no such choice."""
    cross_entropies: tuple[str, ...] = ("compiled",)
    """The loss kernels it runs (core.specs.CrossEntropy), its default first (``Workload.cross_entropy``,
    --cross-entropy where it has more than one). torchtitan's two follow ``compiled_loss`` instead."""
    vendor_attention: bool = False
    """The vendor's fused attention kernel (Transformer Engine's cuDNN attention) where the
    accelerator has one (``Accelerator.vendor_attention_efficiency``), else FlashAttention-2
    class."""
    inplace_cross_entropy: bool = False
    """No second vocabulary-sized buffer for the loss gradient: Megatron's vocab-parallel cross
    entropy computes exp and the gradient in place of the fp32 logits it saved; XLA fuses the
    elementwise softmax - one-hot into the output layer's backward matmuls (MaxText's Llama 4
    Scout v5p recipe holds 65,536 tokens of 202,048-entry logits per chip: one fp32 copy is 49
    GiB of its 95, two would not fit); else a second fp32 buffer (PyTorch's cross entropy)."""
    ep_overlap: bool = False
    """MoE token AllToAlls hidden behind another microbatch's compute (Megatron
    --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe); off by default in every framework."""
    ep_node_dedup: bool = False
    """A token crosses scale-out once per destination node, NVLink fans it out to its experts there
    (DeepEP / HybridEP: Megatron-Core's flex dispatcher), else once per expert (NCCL AllToAll)."""
    einsum_capacity_dispatch: bool = False
    """With a capacity factor, each sequence's tokens are dispatched to and combined from the
    experts' capacity slots by one-hot einsums (MaxText's dense path, sparse_matmul false:
    "BSM,BSEC -> EBCM" and "EBCM,BSEC -> BSM", C = S k c / E per sequence), matmuls the MXU runs
    in full; else by a permutation that moves the rows without FLOPs (Megatron's padded
    dispatch)."""
    zero3_gather_unit: str = "layer"
    """What a ZeRO-3 gather and gradient reduce-scatter move at once, and so the unsharded weights
    and gradients alive: a whole layer (FSDP units, DeepSpeed's and Megatron-FSDP's modules), or
    one weight tensor (XLA's SPMD partitioner gathers each matmul's operand where it is used and
    reduces each gradient where it is made: MaxText's DeepSeek-V3 v5p recipe, ZeRO-3 over 512
    chips with every expert local, runs with a MoE layer's experts 21 GiB in bf16, where two
    gathered layers and a layer's fp32 gradients would not fit beside the state)."""
    zero3_reuse_distance_params: int | None = None
    """Where a ZeRO-3 gathers a module's weights in that module's forward hooks and frees them after unless the
    modules run before their next use hold fewer than this many parameters (DeepSpeed's
    ``stage3_max_reuse_distance``): a module a recompute policy runs again is gathered for its recomputed forward
    and, farther than this from its backward, freed and gathered once more (costs.terms.zero3_regathered_share).
    None: the backward's gather serves the recomputed forward and the backward alike (an FSDP unit's pre-backward
    gather holds the weights through the checkpointed forward run inside it; XLA gathers once per backward)."""
    transient_zero3_weights: bool = False
    """Under ZeRO-3 the compute-precision weights exist only gathered: the sharded parameter is the
    fp32 master, cast at each gather (PyTorch FSDP2's MixedPrecisionPolicy casts the shard to
    param_dtype before its all-gather; MaxText's weight_dtype float32 parameters are cast to
    dtype in the layer), else a sharded bf16 copy persists beside the master (DeepSpeed ZeRO-3's
    16-bit partitions, Megatron-FSDP's model-weight buffer)."""
    zero_gather_copy_out: bool = False
    """Each ZeRO gather (ZeRO-3's in the microbatches, ZeRO-2's where it gathers again, the once-a-step
    gather of the updated weights) is copied out of the collective's output buffer into the parameters it
    unshards, a read and a write of the gathered weights (FSDP2's foreach_all_gather_copy_out, a
    split_with_sizes_copy); else the parameters are views of that buffer (FSDP1's flat parameter, DeepSpeed's
    and Megatron-FSDP's buffers). Costed at the HBM bandwidth (costs.terms.zero_copy_bytes_per_param; per
    microbatch zero3/zero2 copies, once a step zero_step_copies; time_s item overhead/zero_copies)."""
    zero_grad_copy_in: bool = False
    """Each ZeRO gradient reduce-scatter (in the microbatches or once a step) first copies the unsharded
    gradients into the collective's input buffer, read in the weights' precision and written in the
    reduction's (FSDP2's foreach_reduce_scatter_copy_in, a chunk_cat; DeepSpeed's stage 2 and 3 gradient
    buckets); else the backward writes the gradients into that buffer (Megatron's contiguous gradient buffer)."""
    offload_update: str = "cpu"
    """Where the update of offloaded optimizer state runs (costs.terms.offload_step_time): "cpu",
    the host's cores (DeepSpeed's CPU-Adam, Megatron's HybridDeviceOptimizer, torch's Adam under
    FSDP2's CPUOffloadPolicy), or "device": the state streams to the accelerator and back around a
    device update (MaxText's optimizer_memory_host_offload, XLA host offload)."""
    cpu_adam: str = "cpu_adam"
    """The host's Adam kernel (costs.memory.CPU_ADAM_PARAMS_PER_S_PER_CORE): DeepSpeed's
    vectorised "cpu_adam" or PyTorch's "torch" CPU Adam."""
    offload_grad_copy_hidden: bool = False
    """The gradients' copy to the host hides behind the backward (ZeRO-Offload, Ren et al. 2021
    section 4.1, copies each bucket as it is reduced); else it is exposed after the backward."""


@dataclass(frozen=True, kw_only=True)
class Capabilities:
    """What an export target can express; each framework declares one per target (``CAPABILITIES``).

    ZeRO stages are effective stages (0 when nothing is sharded).
    """

    target: str
    """The export target's name (``solve --export``), the prefix of its rule codes."""
    framework: str
    """The framework's name as messages print it."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    """The effective ZeRO stages it can write."""
    zero_stages_with_replicas: tuple[int, ...] = (1, 2, 3)
    """The sharded stages it can write with dp > 1 replicas of the shard group."""
    zero_stages_with_cp: tuple[int, ...] = (0, 1, 2, 3)
    """The stages it can write with cp > 1."""
    zero_stages_with_pp: tuple[int, ...] = (0, 1, 2, 3)
    """The stages it can write with pp > 1."""
    zero_stages_only_with_pp: tuple[int, ...] = ()
    """Stages outside ``zero_stages`` that it writes with pp > 1 (torchtitan's ZeRO-1: FSDP2 under a pipeline)."""
    pipeline_schedules: tuple[str, ...] = tuple(SCHEDULE_CODES)
    """The pipeline schedules it runs."""
    multi_stage_schedules: tuple[str, ...] = ()
    """Those of them it runs only with two or more stages per device (virtual_stages > 1)."""
    context_parallel: bool = True
    """Whether it has context parallelism (cp > 1)."""
    cp_flavours: tuple[str, ...] = ("ring",)
    """The context-parallel flavours it runs (``specs.CP_FLAVOURS``), where cp > 1."""
    cp_with_model_parallel: bool = True
    """Whether cp > 1 can go with tp, pp or ep > 1 (else only beside the data-parallel degrees)."""
    tpu_ring_cp_seq_squared: bool = False
    """Ring attention on TPUs only where cp^2 divides the sequence (MaxText's Tokamax ring)."""
    kv_replication: bool = True
    """Whether it can replicate KV heads (tp > num_kv_heads)."""
    model_blocks: tuple[str, ...] = ()
    """The model families it builds (``rules.MODEL_BLOCKS`` names); empty: any model."""
    pipeline_splits: tuple[str, ...] = ("even",)
    """The layer splits over a pipeline it can write (``core.stages.SPLIT_NAMES``)."""
    recompute_policies: tuple[str, ...] = ("none", "selective", "full")
    """The recompute policies it can write."""
    precisions: tuple[str, ...] = ("bf16", "fp16")
    """The workload precisions it can write."""
    fp8_recipes: tuple[str, ...] = ()
    """The fp8 scaling recipes (core.specs.Fp8Recipe) it can write, with fp8 in ``precisions``."""
    fp4_recipes: tuple[str, ...] = ()
    """The fp4 scaling recipes (core.specs.Fp4Recipe) it can write, with fp4 in ``precisions``."""
    offload: tuple[str, ...] = ("none",)
    """The optimizer and parameter offload choices (``specs.Offload``) it can write."""
    offload_zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    """The effective ZeRO stages it can write beside an offload."""
    expert_tensor: tuple[str, ...] = EXPERT_TENSOR
    """The expert TP it can write with ep > 1 (``EXPERT_TENSOR`` names); MoE models only."""
    expert_tensor_without_ep: tuple[str, ...] = EXPERT_TENSOR
    """The expert TP it can write with ep = 1."""
    expert_groups: tuple[str, ...] = ("dp", "fsdp", "tp", "cp")
    """The degrees whose devices one ep x etp group may regroup ("fsdp" counts when it shards
    gradients or weights, ZeRO-2/3, else only beside "dp")."""
    expert_parallel_with_tp_and_pp: bool = True
    """Whether ep > 1 can go with tp > 1 and pp > 1 together."""
    deepep: bool = False
    """A token dispatch that crosses scale-out once per node (Workload.deepep)."""
    fp8_dispatch: bool = False
    """MoE tokens dispatched in fp8 (Workload.fp8_dispatch): no target here has an option for it."""
    ep_comm_overlap: bool = False
    """MoE token AllToAlls behind another microbatch's compute (Workload.ep_comm_overlap)."""
    drop_and_pad: bool = False
    """A MoE capacity factor: tokens over it dropped, every expert padded to it."""
    cuda_graphs: tuple[str, ...] = ("none",)
    """The Workload.cuda_graphs the target can write."""
    recompute_with_scoped_graphs: tuple[str, ...] | None = None
    """The recompute policies it allows beside scoped graphs (None: all)."""
    full_graph_dropless_moe: bool = True
    """Whether a full-iteration graph can hold a dropless MoE's layers."""
    tp_comm_overlap: bool = True
    """TP collectives pipelined with their GEMMs (Workload.tp_comm_overlap)."""
    tp_backward_async: bool = False
    """The backward's TP collectives beside their GEMMs (Workload.tp_backward_async on)."""
    tp_backward_waits: bool = True
    """The backward's TP collectives waited for (Workload.tp_backward_async off)."""
    grad_accumulation_fusion: bool = True
    """Each microbatch's gradients accumulated at no cost beyond their GEMMs (Workload.grad_accumulation_fusion
    on: Megatron's fusion; what the torchtitan and MaxText profiles take)."""
    grad_accumulation_apart: bool = False
    """Each microbatch's gradients added by a kernel of their own (Workload.grad_accumulation_fusion off)."""
    pp_comm_waits: bool = False
    """An interleaved schedule whose chunks wait for their sends between stages (Workload.pp_comm_overlap off)."""
    grad_reduce_waits: bool = False
    """The gradient reductions waited for after the whole schedule (Workload.grad_reduce_overlap off)."""
    sequence_parallel: bool = True
    """The norms' and residuals' activations sharded over tp (Layout.sequence_parallel): the search then
    costs its layouts without it (search.space.build_space), and a given layout with it is refused."""
    tp_without_sp: bool = True
    """tp > 1 with those activations whole (Layout.sequence_parallel off); else a layout without sequence
    parallelism and tp > 1 is refused, the search's included."""
    bf16_grads: bool = False
    """Gradients kept and reduced in bf16 (Workload.grad_bytes_per_param 2)."""
    bf16_moments_zero: tuple[int, ...] = ()
    """The ZeRO stages it can write bf16 Adam moments with (moment bytes 2)."""
    vendor_attention: bool = False
    """The vendor's fused attention kernel (core.frameworks.vendor_attention)."""
    triton_attention: bool = False
    """MPT's 2022 Triton attention kernel (Workload.triton_attention): llm-foundry's, which no
    export target runs."""
    unfused_attention: bool = False
    """An attention that materialises the S x S scores (Workload.flash_attention off)."""
    cross_entropies: tuple[str, ...] = ()
    """The loss kernels it writes (Workload.cross_entropy, core.specs.CrossEntropy)."""
    bf16_logits: bool = False
    """A loss on the output head's logits in the compute precision, not upcast to fp32
    (Workload.fp32_logits off)."""
    attention_sinks: bool = False
    """A learned sink logit per head in the softmax (gpt-oss's attention)."""
    sliding_window: bool = False
    """Layers attending over a window of the sequence (ModelSpec.sliding_window)."""
    chunked_attention: bool = False
    """Layers attending within chunks of the sequence (ModelSpec.attention_chunk), where the chunk is shorter than
    the sequence."""
    chunked_attention_with_cp: bool = True
    """Chunked attention (where it has it) beside context parallelism (cp > 1)."""
    gpt_oss_with_pp: bool = True
    """A gpt-oss model (core.rules.gpt_oss_block) with pipeline parallelism (pp > 1)."""
    gpt_oss_with_cp: bool = True
    """A gpt-oss model with context parallelism (cp > 1)."""
    gpt_oss_compiled: bool = True
    """A gpt-oss model with torch.compile's fused element-wise kernels (Workload.torch_compile)."""
    gpt_oss_fp8: bool = True
    """A gpt-oss model's GEMMs in fp8 (Workload.precision fp8)."""
    refused_features: dict[str, str] = field(default_factory=dict)
    """The MODEL_FEATURES it cannot write, each with the framework's reason (refused, never dropped)."""
    why: dict[str, str] = field(default_factory=dict)
    """The framework's own reason for a limit, by rule code, quoted in the refusal message."""

    def __post_init__(self) -> None:
        unknown = set(self.refused_features) - set(MODEL_FEATURES)
        assert not unknown, f"{self.target}: unknown model features {sorted(unknown)}"
