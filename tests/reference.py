"""The worked numbers of the design notes (seed cases) and of the book (book cases): for every
case id, how layoutsearch computes it. This table is the only one; the tests
(``tests/test_reference_cases.py``) and ``scripts/reference_cases.py`` read it. It is a helper
module of the tests (not a test module) and does not ship in the wheel.

Each case is one of two kinds:

- ``engine``: computed by what the engine runs, on small fixtures: ``estimate()`` (its
  parameter counts, state bytes, compute items, layout record), ``solve()`` (the
  gather-volume objective and the layout it picks), the search space of ``build_space()``, and
  the collective primitives of ``layoutsearch.costs.comms``. A change to the engine that moves
  one of these numbers fails a test.
- ``closed-form``: the notes' or the book's formula, in ``tests/closed_forms.py``, which
  the engine's cost model does not use. These check the formula (and the catalogue figures
  passed to it), not the engine.

Each function takes no argument and returns the case's quantity in the case's unit, with the
inputs the case's ``quantity`` text states. Expected values and tolerances are in the case
files (``tests/data/seed_cases.yaml`` and ``book_cases.yaml`` in the repository); read one
with ``load_cases()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import closed_forms as cf
import yaml

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.graph_axes import SINGLE_CHIP_AXIS
from layoutsearch.core.problem import Problem, SearchOptions, SearchRequest
from layoutsearch.core.specs import Axis, Layout, ModelSpec, Workload
from layoutsearch.core.units import GB, MIB, TB
from layoutsearch.costs import comms, flops
from layoutsearch.costs.estimate import Estimate, estimate
from layoutsearch.report.output import layout_record
from layoutsearch.search import solve
from layoutsearch.search.space import build_space

ENGINE, CLOSED_FORM = "engine", "closed-form"
KINDS = (ENGINE, CLOSED_FORM)


@dataclass(frozen=True)
class Case:
    """How one reference case is computed: its kind, the function, and what it calls (one line)."""

    kind: str
    compute: Callable[[], Any]
    how: str


# --- engine fixtures ---------------------------------------------------------------------------


def _problem(
    model: ModelSpec | str, cluster: str, seqs: int, seq_len: int = 4096, **workload
) -> Problem:
    return Problem.build(
        model, cluster, Workload(global_batch_seqs=seqs, seq_len=seq_len, **workload)
    )


def _estimate(
    model: ModelSpec | str, cluster: str, layout: Layout, seqs: int, seq_len: int = 4096, **workload
) -> Estimate:
    return estimate(_problem(model, cluster, seqs, seq_len, **workload), layout)


@cache
def _params(model: str) -> dict[str, int]:
    """The parameter counts an estimate reports (the model on one 8-GPU node, tp=8)."""
    return dict(_estimate(model, "h100-8", Layout(tp=8), seqs=8).params)


@cache
def state_bytes_per_param() -> float:
    """Model-state bytes per device / parameters per device, from estimate(): the debug model
    replicated on 8 GPUs (dp=8, ZeRO-0), so every device holds every parameter and its state."""
    est = _estimate("debug", "h100-8", Layout(dp=8, zero_stage=0), seqs=8, seq_len=512)
    state = sum(v for k, v in est.memory_bytes.items() if k.startswith("state/"))
    return state / est.params["total"]


@cache
def min_tp_whole_sequences(seqs: int, cluster: str = "v5p-8192") -> int:
    """Smallest TP degree among the candidates of the search space of llama70b with only FSDP and
    TP (no PP, no CP): the space keeps only shapes that give every data unit whole sequences."""

    space = build_space(_problem("llama70b", cluster, seqs), SearchOptions(only=("fsdp", "tp")))
    return int(min(space.shapes.tp[s] for s in set(space.sk_shape.tolist())))


@cache
def gather_volume(seqs: int, tp: int) -> float:
    """The solver's gather-volume objective (bytes) of llama70b on v5p-8192 with tp fixed."""

    result = solve(
        _problem("llama70b", "v5p-8192", seqs),
        SearchRequest(
            options=SearchOptions(only=("fsdp", "tp"), fix={"tp": tp}),
            objective="gather-volume",
            top_k=1,
        ),
    )
    if result.status != "OPTIMAL" or result.layouts[0].layout.tp != tp:
        raise AssertionError(f"gather-volume solve at {seqs} seqs, tp={tp}: {result.status}")
    assert result.objective_value is not None  # an OPTIMAL result has one
    return result.objective_value


def gather_volume_parts(seqs: int, tp: int) -> tuple[float, float]:
    """(V_W, V_X) in bytes from two solves: V_X grows with the batch and V_W does not, so
    V_X(B) = V(2B) - V(B) and V_W = V(B) - V_X(B)."""
    v_x = gather_volume(2 * seqs, tp) - gather_volume(seqs, tp)
    return gather_volume(seqs, tp) - v_x, v_x


def gather_volume_t_star(seqs: int) -> float:
    """Continuous minimiser of the solver's objective V(t) = V_W(t0) t0 / t + V_X(t0) t / t0,
    with t0 the smallest valid TP degree: t* = t0 sqrt(V_W / V_X)."""
    t0 = min_tp_whole_sequences(seqs)
    v_w, v_x = gather_volume_parts(seqs, t0)
    return t0 * math.sqrt(v_w / v_x)


def choose_tp_gather_volume(
    model: ModelSpec | str, num_devices: int, seqs: int, choices=(8, 16, 32, 64)
) -> int:
    """The design notes' choice, by the solver: `--only fsdp,tp --choices tp=... --objective gather-volume`."""

    result = solve(
        _problem(model, f"v5p-{num_devices}", seqs),
        SearchRequest(
            options=SearchOptions(only=("fsdp", "tp"), choices={"tp": tuple(choices)}),
            objective="gather-volume",
            top_k=1,
        ),
    )
    return result.layouts[0].layout.tp


def kv_replication_in_layout_record(tp: int) -> int:
    """`kv_replication` of the JSON layout record of an estimate of llama70b with this TP degree."""

    return layout_record(_estimate("llama70b", f"v5p-{tp}", Layout(tp=tp), seqs=tp))[
        "kv_replication"
    ]


def _ring_axis() -> Axis:
    """A 16-chip wrapped torus ring at 90 GB/s per direction, without latency."""
    return replace(SINGLE_CHIP_AXIS, size=16, bytes_per_s_per_direction=9e10, wraparound=True)


def alltoall_fraction() -> float:
    """comms.all_to_all_time / comms.all_gather_time of one array over a whole 16-chip wraparound ring."""
    span = (comms.SpanPart(axis=_ring_axis(), factor=16, stride=1),)
    return comms.all_to_all_time(1e9, span) / comms.all_gather_time(1e9, span)


def full_remat_flops_factor() -> float:
    """Training FLOPs per parameter per token with full recompute, from estimate()'s compute items:
    6 x (matmul + the matmul part of the recompute) / matmul, where the matmul part is what full
    recompute adds over selective (which recomputes the attention core only)."""
    full = _estimate("debug", "h100-8", Layout(dp=8, recompute="full"), seqs=8, seq_len=512).time_s
    selective = _estimate(
        "debug", "h100-8", Layout(dp=8, recompute="selective"), seqs=8, seq_len=512
    ).time_s
    recomputed_matmul = full["compute/recompute"] - selective["compute/recompute"]
    return 6.0 * (full["compute/matmul"] + recomputed_matmul) / full["compute/matmul"]


def _book_gated(d_model: int) -> ModelSpec:
    return ModelSpec(
        name="book",
        num_layers=1,
        d_model=d_model,
        d_ff=4 * d_model,
        mlp="gated",
        num_heads=64,
        num_kv_heads=64,
        head_dim=d_model // 64,
        vocab_size=1,
        tied_embeddings=False,
    )


def attention_crossover_seq_len(d_model: int, seq_len: int = 4096) -> float:
    """Sequence length at which the engine's attention FLOPs per token equal its matmul FLOPs, for the
    book's one-layer model (gated MLP, F = 4D, 64 heads, no GQA), attention without causal skipping;
    attention grows linearly with the sequence. FLOPs, not times: since the GEMMs are costed from
    their shapes (costs.gemm) the two no longer run at one rate."""
    model = _book_gated(d_model)
    matmul = flops.matmul_flops_per_token_per_layer(model)
    attention = flops.attention_flops_per_token_per_layer(model, seq_len, False)
    return seq_len * float(matmul) / float(attention)


# --- closed-form inputs --------------------------------------------------------------------------


def _v5p_alpha(axes: int) -> float:
    v5p = load_accelerator("v5p")
    return cf.critical_intensity(
        v5p.peak_flops_per_s, cf.ici_bandwidth(v5p.link_bytes_per_s_per_direction, axes)
    )


def _state_70b() -> float:
    return cf.model_state_bytes(
        70e9, Workload(global_batch_seqs=1, seq_len=1).state_bytes_per_param
    )


def _notes_activations(microbatches: int) -> float:
    return cf.checkpoint_bytes(80, 4e6 / microbatches, 8192, 2, 2)


def _engine(compute, how):
    return Case(ENGINE, compute, how)


def _closed(compute, how):
    return Case(CLOSED_FORM, compute, how)


_PARAMS = "estimate(llama70b on h100-8, tp=8).params"
_VOLUME = "solve(objective=gather-volume, fix tp) at B and 2B: V_X = V(2B) - V(B), V_W = V(B) - V_X"

SEED: dict[str, Case] = {
    "params-mlp": _engine(lambda: _params("llama70b")["mlp"], f"{_PARAMS}['mlp']"),
    "params-attention": _engine(
        lambda: _params("llama70b")["attention"], f"{_PARAMS}['attention']"
    ),
    "params-vocab": _engine(
        lambda: _params("llama70b")["embedding"] + _params("llama70b")["output"],
        f"{_PARAMS}: embedding + output",
    ),
    "params-total-no-norm": _engine(
        lambda: _params("llama70b")["total"] - _params("llama70b")["norms"],
        f"{_PARAMS}: total - norms",
    ),
    "params-total-exact": _engine(lambda: _params("llama70b")["total"], f"{_PARAMS}['total']"),
    "state-bytes-per-param": _engine(
        state_bytes_per_param,
        "estimate(debug on h100-8, dp=8, ZeRO-0): state/* bytes per device / parameters",
    ),
    "training-flops-total": _closed(
        lambda: cf.training_flops_total(70e9, 15e12), "closed_forms.training_flops_total"
    ),
    "calendar-days-1eflops": _closed(
        lambda: cf.calendar_days(cf.training_flops_total(70e9, 15e12), 1e18),
        "closed_forms.calendar_days",
    ),
    "calendar-days-4eflops": _closed(
        lambda: cf.calendar_days(cf.training_flops_total(70e9, 15e12), 4e18),
        "closed_forms.calendar_days",
    ),
    "state-total-70b": _engine(
        lambda: state_bytes_per_param() * 70e9 / TB,
        "state bytes per parameter from estimate() (above) x 70e9",
    ),
    "saved-activations-full-batch": _closed(
        lambda: _notes_activations(1) / TB, "closed_forms.checkpoint_bytes"
    ),
    "state-plus-activations-full-batch": _closed(
        lambda: (_notes_activations(1) + _state_70b()) / TB,
        "closed_forms.checkpoint_bytes + model_state_bytes",
    ),
    "saved-activations-4-microbatches": _closed(
        lambda: _notes_activations(4) / TB, "closed_forms.checkpoint_bytes"
    ),
    "state-plus-activations-4-microbatches": _closed(
        lambda: (_notes_activations(4) + _state_70b()) / TB,
        "closed_forms.checkpoint_bytes + model_state_bytes",
    ),
    "fsdp-weights-all-sharded": _closed(
        lambda: cf.fsdp_weight_bytes(2 * GB, 4, 2, 0) / GB, "closed_forms.fsdp_weight_bytes"
    ),
    "fsdp-weights-one-gathered": _closed(
        lambda: cf.fsdp_weight_bytes(2 * GB, 4, 2, 1) / GB, "closed_forms.fsdp_weight_bytes"
    ),
    "fsdp-weights-prefetch-next": _closed(
        lambda: cf.fsdp_weight_bytes(2 * GB, 4, 2, 2) / GB, "closed_forms.fsdp_weight_bytes"
    ),
    "peak-separate-gather-buffer": _closed(
        lambda: (
            cf.peak_bytes(
                {
                    "backward": {
                        "state": 4.5 * GB,
                        "activations/saved": 6 * GB,
                        "temporary/other": 1 * GB,
                        "temporary/gather_buffer": 0.8 * GB,
                    }
                }
            )[1]
            / GB
        ),
        "closed_forms.peak_bytes",
    ),
    "pipeline-forward-k4": _closed(
        lambda: cf.pipeline_forward_time(4, 3, 8e-3, 0.5e-3) * 1e3,
        "closed_forms.pipeline_forward_time",
    ),
    "pipeline-forward-k16": _closed(
        lambda: cf.pipeline_forward_time(16, 3, 8e-3, 0.5e-3) * 1e3,
        "closed_forms.pipeline_forward_time",
    ),
    "pipeline-busy-fraction": _closed(
        lambda: cf.pipeline_busy_fraction(4, 2), "closed_forms.pipeline_busy_fraction"
    ),
    "min-tp-1024-seqs": _engine(
        lambda: min_tp_whole_sequences(1024),
        "build_space(llama70b, v5p-8192, only fsdp,tp): smallest tp among its shapes",
    ),
    "min-tp-256-seqs": _engine(
        lambda: min_tp_whole_sequences(256),
        "build_space(llama70b, v5p-8192, only fsdp,tp): smallest tp among its shapes",
    ),
    "v5p-critical-intensity": _closed(
        lambda: _v5p_alpha(3),
        "closed_forms.critical_intensity(catalogue v5p peak, 3 axes x 2 x link)",
    ),
    "t-star-1024-seqs": _engine(
        lambda: gather_volume_t_star(1024), f"t0 sqrt(V_W / V_X) at t0 = min tp; {_VOLUME}"
    ),
    "t-star-256-seqs": _engine(
        lambda: gather_volume_t_star(256), f"t0 sqrt(V_W / V_X) at t0 = min tp; {_VOLUME}"
    ),
    "vw-vx-1024-seqs-tp8": _engine(
        lambda: [v / MIB for v in gather_volume_parts(1024, 8)], _VOLUME
    ),
    "chosen-tp-1024-seqs": _engine(
        lambda: choose_tp_gather_volume("llama70b", 8192, 1024),
        "solve(only fsdp,tp, tp in 8..64, objective=gather-volume).layouts[0].tp",
    ),
    "chosen-tp-256-seqs": _engine(
        lambda: choose_tp_gather_volume("llama70b", 8192, 256),
        "solve(only fsdp,tp, tp in 8..64, objective=gather-volume).layouts[0].tp",
    ),
    "kv-replication-tp32": _engine(
        lambda: kv_replication_in_layout_record(32),
        "layout_record(estimate(llama70b on v5p-32, tp=32))['kv_replication']",
    ),
}

_BOOK_ALPHA = 2550  # the book rounds alpha = 4.59e14 / 1.8e11 to 2550

BOOK: dict[str, Case] = {
    "v5p-dp-critical-batch-1-axis": _closed(
        lambda: _v5p_alpha(1), "closed_forms.critical_intensity(catalogue v5p peak, 2 x link)"
    ),
    "v5p-dp-critical-batch-3-axes": _closed(
        lambda: _v5p_alpha(3),
        "closed_forms.critical_intensity(catalogue v5p peak, 3 axes x 2 x link)",
    ),
    "tp-max-degree-f30000": _closed(
        lambda: cf.tp_max_degree(30000, _BOOK_ALPHA, 1), "closed_forms.tp_max_degree"
    ),
    "mixed-threshold-f28672": _closed(
        lambda: cf.mixed_threshold_tokens_per_chip(_BOOK_ALPHA, 2, 28672),
        "closed_forms.mixed_threshold_tokens_per_chip",
    ),
    "mixed-threshold-f13824": _closed(
        lambda: cf.mixed_threshold_tokens_per_chip(_BOOK_ALPHA, 2, 13824),
        "closed_forms.mixed_threshold_tokens_per_chip",
    ),
    "x-opt-small-mesh": _closed(
        lambda: cf.optimal_fsdp_degree(48000, 32768, 64, 2), "closed_forms.optimal_fsdp_degree"
    ),
    "llama2-13b-x-opt": _closed(
        lambda: cf.optimal_fsdp_degree(3e6, 13824, 4096, 2), "closed_forms.optimal_fsdp_degree"
    ),
    "llama2-13b-step-time": _closed(
        lambda: cf.step_time_at_mfu(3e6, 13e9, 4096, 4.6e14, 0.4), "closed_forms.step_time_at_mfu"
    ),
    "all-strategies-comms-bound-batch": _closed(
        lambda: cf.comms_bound_batch_tokens(4096, _BOOK_ALPHA, 32768),
        "closed_forms.comms_bound_batch_tokens",
    ),
    "v5p-dcn-critical-batch": _closed(
        lambda: cf.critical_intensity(
            load_accelerator("v5p").peak_flops_per_s,
            load_accelerator("v5p").scale_out_bytes_per_s_per_direction,
        ),
        "closed_forms.critical_intensity(catalogue v5p peak, DCN per chip)",
    ),
    "llama70b-16m-batch-fsdp-chips": _closed(
        lambda: cf.fsdp_comms_bound_chips(16e6, 850), "closed_forms.fsdp_comms_bound_chips"
    ),
    "llama2-13b-params": _engine(
        lambda: _params("llama2-13b")["total"] - _params("llama2-13b")["norms"],
        "estimate(llama2-13b on h100-8, tp=8).params: total - norms",
    ),
    "alltoall-1d-ring": _engine(
        alltoall_fraction, "comms.all_to_all_time / comms.all_gather_time, 16-chip ring"
    ),
    "h100-tp-max-degree": _closed(
        lambda: cf.tp_max_degree(28000, cf.critical_intensity(990e12, 450e9), 1),
        "closed_forms.tp_max_degree",
    ),
    "block-remat-flops-factor": _engine(
        full_remat_flops_factor,
        "estimate(debug, recompute=full vs selective).time_s: 6 x (matmul + recomputed matmul) / matmul",
    ),
    "attention-crossover-context": _engine(
        lambda: attention_crossover_seq_len(8192),
        "costs.flops (book 1-layer D=8192, no causal skipping): S x matmul FLOPs / attention FLOPs per token",
    ),
}

CASES: dict[str, Case] = {**SEED, **BOOK}


def compute(case_id: str):
    """The value layoutsearch computes for a reference case id (seed or book)."""
    return CASES[case_id].compute()


def kind(case_id: str) -> str:
    """'engine' or 'closed-form' (see the module docstring)."""
    return CASES[case_id].kind


def within(expected, computed, rel_tol: float) -> bool:
    if isinstance(expected, list):
        return len(expected) == len(computed) and all(
            within(e, c, rel_tol) for e, c in zip(expected, computed)
        )
    return abs(computed - expected) <= rel_tol * abs(expected) + (
        0 if rel_tol else 1e-9 * abs(expected)
    )


def _number(value):
    """YAML 1.1 (PyYAML) reads '56.371e9' as a string: turn such strings into floats."""
    if isinstance(value, list):
        return [_number(v) for v in value]
    return float(value) if isinstance(value, str) else value


def load_cases(path) -> list[dict]:
    """Read a reference-case YAML file as it is, with numeric strings coerced to numbers.

    A missing file raises FileNotFoundError naming the path (never an empty list)."""

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"reference case file {path} not found")
    with open(path) as fh:
        cases = yaml.safe_load(fh)
    if not isinstance(cases, list) or not cases:
        raise ValueError(f"{path} holds no reference cases")
    return [
        {**c, "expected": _number(c["expected"]), "rel_tol": float(_number(c["rel_tol"]))}
        for c in cases
    ]
