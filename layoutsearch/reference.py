"""The worked numbers of the design notes (seed cases) and the book (book cases), computed
through the public API. Each function takes no argument and returns the case's quantity in
the case's unit; the inputs are the ones the case's `quantity` text states. Tests and
`scripts/reference_cases.py` compare them with the expected values in shared/reference/.
"""

from __future__ import annotations

from layoutsearch.core.catalogue import load_accelerator, load_model
from layoutsearch.costs import comms, flops, memory, params, pipeline, roofline
from layoutsearch.core.specs import Axis, ModelSpec, Workload

TB, GB, MIB = 1e12, 1e9, 2**20
N_8192 = 8192


def _llama() -> ModelSpec:
    return load_model("llama70b")


def _v5p_alpha(axes: int) -> float:
    v5p = load_accelerator("v5p")
    return roofline.critical_intensity(v5p.peak_flops_per_s, comms.ici_bandwidth_bytes_per_s(v5p.link_bytes_per_s_per_direction, axes))


def _tokens(seqs: int, seq_len: int = 4096) -> int:
    return Workload(global_batch_seqs=seqs, seq_len=seq_len).global_batch_tokens


def min_tp_whole_sequences(num_devices: int, seqs: int) -> int:
    """Smallest TP degree (dividing the devices) that leaves every data unit a whole sequence."""
    return next(t for t in range(1, num_devices + 1) if num_devices % t == 0 and num_devices // t <= seqs)


def choose_tp_gather_volume(model: ModelSpec, num_devices: int, seqs: int, choices=(8, 16, 32, 64)) -> int:
    """The design notes' choice, by the solver: `--only fsdp,tp --choices tp=... --objective gather-volume`."""
    from layoutsearch.search import SearchOptions, solve
    from layoutsearch.core.topology import resolve_cluster

    result = solve(model, Workload(global_batch_seqs=seqs, seq_len=4096), resolve_cluster(f"v5p-{num_devices}"),
                   SearchOptions(only=("fsdp", "tp"), choices={"tp": tuple(choices)}), objective="gather-volume", top_k=1)
    return result.layouts[0].layout.tp


def _ring_axis() -> Axis:
    return Axis(name="x", size=16, kind="torus", bytes_per_s_per_direction=9e10, wraparound=True, latency_s=0.0, efficiency=1.0)


def _alltoall_fraction() -> float:
    span = (comms.SpanPart(axis=_ring_axis(), factor=16, stride=1),)
    return comms.all_to_all_time(1e9, span) / comms.all_gather_time(1e9, span)


SEED = {
    "params-mlp": lambda: params.param_counts(_llama())["mlp"],
    "params-attention": lambda: params.param_counts(_llama())["attention"],
    "params-vocab": lambda: params.param_counts(_llama())["embedding"] + params.param_counts(_llama())["output"],
    "params-total-no-norm": lambda: params.param_counts(_llama())["total"] - params.param_counts(_llama())["norms"],
    "params-total-exact": lambda: params.param_counts(_llama())["total"],
    "state-bytes-per-param": lambda: Workload(global_batch_seqs=1, seq_len=1).state_bytes_per_param,
    "training-flops-total": lambda: flops.training_flops_total(70e9, 15e12),
    "calendar-days-1eflops": lambda: flops.calendar_days(flops.training_flops_total(70e9, 15e12), 1e18),
    "calendar-days-4eflops": lambda: flops.calendar_days(flops.training_flops_total(70e9, 15e12), 4e18),
    "state-total-70b": lambda: sum(memory.state_bytes(70e9, Workload(global_batch_seqs=1, seq_len=1), 0, 1).values()) / TB,
    "saved-activations-full-batch": lambda: memory.checkpoint_bytes(80, 4e6, 8192, 2, 2) / TB,
    "state-plus-activations-full-batch": lambda: (memory.checkpoint_bytes(80, 4e6, 8192, 2, 2)
                                                  + sum(memory.state_bytes(70e9, Workload(global_batch_seqs=1, seq_len=1), 0, 1).values())) / TB,
    "saved-activations-4-microbatches": lambda: memory.checkpoint_bytes(80, 4e6 / 4, 8192, 2, 2) / TB,
    "state-plus-activations-4-microbatches": lambda: (memory.checkpoint_bytes(80, 4e6 / 4, 8192, 2, 2)
                                                      + sum(memory.state_bytes(70e9, Workload(global_batch_seqs=1, seq_len=1), 0, 1).values())) / TB,
    "fsdp-weights-all-sharded": lambda: memory.fsdp_weight_bytes(2 * GB, 4, 2, 0, separate_buffers=False) / GB,
    "fsdp-weights-one-gathered": lambda: memory.fsdp_weight_bytes(2 * GB, 4, 2, 1, separate_buffers=False) / GB,
    "fsdp-weights-prefetch-next": lambda: memory.fsdp_weight_bytes(2 * GB, 4, 2, 2, separate_buffers=False) / GB,
    "peak-separate-gather-buffer": lambda: memory.peak({"backward": {
        "state": 4.5 * GB, "activations/saved": 6 * GB, "temporary/other": 1 * GB, "temporary/gather_buffer": 0.8 * GB}})[1] / GB,
    "pipeline-forward-k4": lambda: pipeline.forward_time(4, 3, 8e-3, 0.5e-3) * 1e3,
    "pipeline-forward-k16": lambda: pipeline.forward_time(16, 3, 8e-3, 0.5e-3) * 1e3,
    "pipeline-busy-fraction": lambda: pipeline.busy_fraction(4, 2),
    "min-tp-1024-seqs": lambda: min_tp_whole_sequences(N_8192, 1024),
    "min-tp-256-seqs": lambda: min_tp_whole_sequences(N_8192, 256),
    "v5p-critical-intensity": lambda: _v5p_alpha(3),
    "t-star-1024-seqs": lambda: roofline.tp_fsdp_continuous_optimum(_llama().d_ff, N_8192, _tokens(1024)),
    "t-star-256-seqs": lambda: roofline.tp_fsdp_continuous_optimum(_llama().d_ff, N_8192, _tokens(256)),
    "vw-vx-1024-seqs-tp8": lambda: [v / MIB for v in roofline.gather_volumes_bytes(8192, 28672, _tokens(1024), N_8192, 8)],
    "chosen-tp-1024-seqs": lambda: choose_tp_gather_volume(_llama(), N_8192, 1024),
    "chosen-tp-256-seqs": lambda: choose_tp_gather_volume(_llama(), N_8192, 256),
    "kv-replication-tp32": lambda: params.kv_replication(_llama(), 32),
}

_BOOK_ALPHA = 4.59e14 / 1.8e11  # the book rounds alpha to 2550


def _book_gated(d_model: int) -> ModelSpec:
    return ModelSpec(name="book", num_layers=1, d_model=d_model, d_ff=4 * d_model, mlp="gated", num_heads=64,
                     num_kv_heads=64, head_dim=d_model // 64, vocab_size=1, tied_embeddings=False)


BOOK = {
    "v5p-dp-critical-batch-1-axis": lambda: _v5p_alpha(1),
    "v5p-dp-critical-batch-3-axes": lambda: _v5p_alpha(3),
    "tp-max-degree-f30000": lambda: roofline.tp_max_degree(30000, 2550, 1),
    "mixed-threshold-f28672": lambda: roofline.mixed_threshold_tokens_per_chip(2550, 2, 28672),
    "mixed-threshold-f13824": lambda: roofline.mixed_threshold_tokens_per_chip(2550, 2, 13824),
    "x-opt-small-mesh": lambda: roofline.optimal_fsdp_degree(48000, 32768, 64, 2),
    "llama2-13b-x-opt": lambda: roofline.optimal_fsdp_degree(3e6, 13824, 4096, 2),
    "llama2-13b-step-time": lambda: roofline.step_time_at_mfu(3e6, 13e9, 4096, 4.6e14, 0.4),
    "all-strategies-comms-bound-batch": lambda: roofline.comms_bound_batch_tokens(4096, 2550, 32768),
    "v5p-dcn-critical-batch": lambda: roofline.critical_intensity(
        load_accelerator("v5p").peak_flops_per_s, load_accelerator("v5p").scale_out_bytes_per_s_per_direction),
    "llama70b-16m-batch-fsdp-chips": lambda: roofline.fsdp_comms_bound_chips(16e6, 850),
    "llama2-13b-params": lambda: params.param_counts(load_model("llama2-13b"))["total"]
    - params.param_counts(load_model("llama2-13b"))["norms"],
    "alltoall-1d-ring": _alltoall_fraction,
    "h100-tp-max-degree": lambda: roofline.tp_max_degree(28000, roofline.critical_intensity(990e12, 450e9), 1),
    "block-remat-flops-factor": lambda: flops.training_flops_per_param_per_token("full"),
    "attention-crossover-context": lambda: flops.attention_crossover_seq_len(_book_gated(8192)),
}


def compute(case_id: str):
    """The engine's value for a reference case id (seed or book)."""
    table = SEED if case_id in SEED else BOOK
    return table[case_id]()


def within(expected, computed, rel_tol: float) -> bool:
    if isinstance(expected, list):
        return len(expected) == len(computed) and all(within(e, c, rel_tol) for e, c in zip(expected, computed))
    return abs(computed - expected) <= rel_tol * abs(expected) + (0 if rel_tol else 1e-9 * abs(expected))


def _number(value):
    """YAML 1.1 (PyYAML) reads '56.371e9' as a string: turn such strings into floats."""
    if isinstance(value, list):
        return [_number(v) for v in value]
    return float(value) if isinstance(value, str) else value


def load_cases(path) -> list[dict]:
    """Read a reference-case YAML file as it is, with numeric strings coerced to numbers."""
    import yaml

    with open(path) as fh:
        cases = yaml.safe_load(fh)
    return [{**c, "expected": _number(c["expected"]), "rel_tol": float(_number(c["rel_tol"]))} for c in cases]
