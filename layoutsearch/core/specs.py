"""The frozen concepts the engine reasons about (DESIGN.md "Concepts").

Units are SI and named in every field: bytes, seconds, FLOPs, bytes per second. Conversion
from the human units of the YAML catalogues happens once, in ``catalogue.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

MlpKind = Literal["gated", "plain"]
QkNorm = Literal["none", "head", "projection"]
AxisKind = Literal["torus", "switch", "scale_out", "dcn"]
DEGREE_NAMES = ("dp", "fsdp", "tp", "pp", "cp")


def choices(name: str, values: tuple[str, ...], doc: str) -> type[StrEnum]:
    """A closed choice (a StrEnum whose members are its values; typer shows them as choices)."""
    enum = StrEnum(name, [(v.replace("-", "_"), v) for v in values])
    enum.__doc__ = doc
    return enum


Recompute = choices("Recompute", ("none", "selective", "full"), "Activation-checkpoint policy (COSTS.md).")
Schedule = choices("Schedule", ("1f1b", "interleaved", "gpipe"),
                    "Pipeline schedule: 1F1B, interleaved 1F1B (virtual stages), GPipe (all forwards first).")
Objective = choices("Objective", ("step-time", "gather-volume"), "What the search minimises.")
Method = choices("Method", ("cpsat", "enumerate"), "CP-SAT (a proof) or the exhaustive enumerator (the oracle).")
MfuConvention = choices("MfuConvention", ("model", "palm", "palm-causal"), "How MFU counts FLOPs (costs.flops).")
Framework = choices("Framework", ("megatron", "torchtitan", "maxtext", "deepspeed", "ideal"),
                    "The training framework whose overlap behaviour the step time assumes (core.frameworks).")
Precision = choices("Precision", ("bf16", "fp16", "fp8"),
                    "Matmul precision: bf16 (fp16 costs the same), or fp8 GEMMs with bf16 activations between them.")


RECOMPUTE_POLICIES = tuple(p.value for p in Recompute)
RECOMPUTE_CODES = {name: code for code, name in enumerate(RECOMPUTE_POLICIES)}  # none 0, selective 1, full 2
SCHEDULE_CODES = {s.value: code for code, s in enumerate(Schedule)}  # 1f1b 0, interleaved 1, gpipe 2


@dataclass(frozen=True, kw_only=True, slots=True)
class RopeScaling:
    """Llama 3.1 RoPE frequency scaling (Hugging Face ``rope_scaling`` with rope_type "llama3")."""

    rope_type: Literal["llama3"] = "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Architecture only. A decoder-only transformer with optional GQA."""

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
    qkv_bias: bool = False  # biases on the Q, K and V projections only (Qwen2); linear_bias implies them
    norms_per_layer: int = 2  # norm layers per block: 2 (pre-attention, pre-MLP); Gemma 2/3 4 (also post);
    # Falcon-7B 1 (one norm feeds the parallel attention and MLP)
    norm_weights: bool = True  # False: non-parametric norms (OLMo 1 LayerNorm: no weight, no bias)
    qk_norm: QkNorm = "none"  # RMSNorm of queries and keys: "head" one head_dim weight each (Qwen3, Gemma 3),
    # "projection" over the whole Q and K projections (OLMo 2)
    sliding_window: int | None = None  # tokens a query attends back to in a windowed layer; None = full attention
    full_attention_layers: int = 0  # with a window: layers that still attend over the whole sequence (Gemma 2: half)
    # Hyper-parameters that change neither the parameter count nor the cost; the exporters write them.
    rope_theta: float = 10000.0  # RoPE base (Llama 3: 500000); unused with learned positions
    rope_scaling: RopeScaling | None = None  # Llama 3.1 long-context frequency scaling
    norm_eps: float = 1e-5  # epsilon of every RMSNorm / LayerNorm
    activation: str | None = None  # MLP activation; None = silu (gated) or gelu (plain)
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0

    @property
    def activation_name(self) -> str:
        """The MLP activation: ``activation`` or the default of the MLP kind (silu gated, gelu plain)."""
        return self.activation or ("silu" if self.mlp == "gated" else "gelu")

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
    flash_attention: bool = True  # fused attention; False = scores materialised (pre-2022 Megatron, BLOOM)
    tp_comm_overlap: bool = False  # TP collectives pipelined with their GEMMs (Transformer Engine userbuffers,
    # NeMo/Megatron-Core tp_comm_overlap; XLA collective matmul); off = on the critical path
    fsdp_collectives_per_layer: int = 1  # ZeRO-3 gathers per layer: 1 with flat parameters (FSDP, XLA);
    # one per parameter tensor with DeepSpeed ZeRO-3 as of 2021
    training_tokens: float | None = None  # total tokens for a calendar estimate
    precision: str = "bf16"  # Precision: "fp8" runs the GEMMs in fp8 (Transformer Engine / MaxText recipes)
    framework: str | None = None  # Framework profile; None = the accelerator's default (Problem.build resolves it)

    @property
    def global_batch_tokens(self) -> int:
        """B_tok = B_seq x S: tokens in one optimizer step, total (not per device)."""
        return self.global_batch_seqs * self.seq_len

    @property
    def state_bytes_per_param(self) -> int:
        """Model-state bytes per parameter (18 for the mixed-precision Adam preset)."""
        return (self.weight_bytes_per_param + self.master_bytes_per_param
                + self.grad_bytes_per_param + self.optimizer_bytes_per_param)


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
    matmul_efficiency: float  # achievable fraction of peak for large matmuls
    matmul_half_efficiency_tokens: float  # tokens per matmul at which efficiency halves
    attention_efficiency: float  # achievable fraction of peak for the attention core (fused kernels)
    collective_efficiency: float  # achievable fraction of ICI/NVLink bandwidth
    scale_out_efficiency: float  # achievable fraction of NIC/DCN bandwidth
    collective_half_efficiency_bytes: float  # message size at which bandwidth halves
    microbatch_overhead_s: float  # fixed, non-overlapped cost per microbatch per stage
    step_overhead_s: float  # fixed per optimizer step (launch, logging, data loader)
    torus_dims: int = 0  # TPU: 2 or 3; GPU: 0
    wraparound_min_axis: int = 0  # TPU: a torus axis wraps only at/above this size
    wraparound_needs_full_cube: bool = False  # v4/v5p: no wraparound below a 4x4x4 cube
    max_slice_shape: tuple[int, ...] = ()  # TPU: largest ICI domain
    devices_per_host: int = 1
    devices_per_node: int = 1  # GPU: NVLink domain size
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, kw_only=True, slots=True)
class Axis:
    """One physical axis a collective group can span (derived from the cluster graph)."""

    name: str  # x, y, z for a torus; node / scale_out for GPUs; dcn between slices
    size: int
    kind: AxisKind
    bytes_per_s_per_direction: float  # one link (torus), per device (switch, scale_out, dcn)
    wraparound: bool
    latency_s: float
    efficiency: float  # achievable fraction of the bandwidth


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

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)


Placement = tuple[tuple[str, int], ...]  # ((axis name, factor), ...) from inner to outer
Placements = tuple[tuple[str, Placement], ...]  # (degree, placement) for every degree above 1
UNPLACED = None  # Layout.axes before a placement is chosen; () is a placed layout whose degrees are all 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """The decision: degrees, microbatching, checkpointing, ZeRO stage, axis placement.

    ``dp`` is the replicated part of data parallelism, ``fsdp`` the sharded part; data units
    (groups that process different sequences) number dp x fsdp.
    """

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    zero_stage: int = 3
    virtual_stages: int = 1
    num_microbatches: int = 1
    recompute: str = "none"  # a Recompute value
    sequence_parallel: bool = True  # shard norm/residual activations over tp (Megatron SP)
    schedule: str = "1f1b"  # a Schedule value
    axes: Placements | None = UNPLACED

    @property
    def placed(self) -> bool:
        return self.axes is not UNPLACED

    @property
    def degrees(self) -> dict[str, int]:
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "pp": self.pp, "cp": self.cp}

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
