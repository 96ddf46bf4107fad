"""The MoE layers' host time (costs.terms.moe_host_overhead_s): kernel launches counted per layer and local
expert at one per-launch latency for every GPU, shown only as far as they exceed the GPU work they are launched
beside, plus the dispatcher's host sync; CUDA graphs remove launches (docs/calibration.md#moe-overheads)."""

from dataclasses import replace

import numpy as np
import pytest

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.costs.estimate import estimate
from layoutsearch.costs.terms import moe_host_overhead_s, moe_launches

LATENCY_S, SYNC_S = 50e-6, 600e-6


def _acc(**fields):
    return replace(
        load_accelerator("h100"), moe_launch_latency_s=LATENCY_S, moe_host_sync_s=SYNC_S, **fields
    )


def _work(graphs="none"):
    return Workload(global_batch_seqs=8, seq_len=4096, framework="megatron", cuda_graphs=graphs)


def test_launch_counts_per_part_of_the_layer():
    """4 local experts, no graphs: before the sync 12 attention + 21 router launches = 33; after it 10 dispatch +
    2 x 4 expert GEMMs = 18; backward 22 + 9 + 10 + 4 x 4 = 57. Scoped graphs replay the attention's and the
    router's kernels as 2 graphs each way: (2, 18, 28)."""
    assert moe_launches(_work(), 4) == (33, 18, 57)
    assert moe_launches(_work("scoped"), 4) == (2, 18, 28)


def test_gpu_bound_layer_shows_only_the_sync():
    """4 local experts at 50 us per launch: host 1.65, 0.90, 2.85 ms per part; GPU work 2, 1, 3 ms covers each,
    so the layer adds only the 0.6 ms sync per microbatch."""
    exposed = moe_host_overhead_s(_work(), _acc(), 4, (2e-3, 1e-3, 3e-3))
    assert exposed == pytest.approx(600e-6, rel=1e-12)


def test_host_bound_layer_shows_host_minus_gpu():
    """The same launches beside GPU work of 1, 0.5, 2 ms: exposed 0.6 (sync) + 0.65 + 0.40 + 0.85 = 2.5 ms."""
    exposed = moe_host_overhead_s(_work(), _acc(), 4, (1e-3, 0.5e-3, 2e-3))
    assert exposed == pytest.approx(2.5e-3, rel=1e-12)


def test_scoped_graphs_remove_the_captured_launches():
    """Scoped graphs: before the sync 2 launches (0.1 ms) instead of 33 (1.65 ms); beside 1, 0.5, 2 ms of GPU
    work: 0.6 + 0 + 0.40 + (28 x 50 us = 1.4 ms, hidden) = 1.0 ms against 2.5 ms without graphs."""
    exposed = moe_host_overhead_s(_work("scoped"), _acc(), 4, (1e-3, 0.5e-3, 2e-3))
    assert exposed == pytest.approx(1.0e-3, rel=1e-12)


def test_a_full_iteration_graph_removes_its_share_of_all_host_time():
    """One graph per step: of sync + every launch (0.6 + (33 + 18 + 57) x 50 us = 6.0 ms), the share the graph
    removes (0.9) leaves 0.6 ms, whatever the GPU work beside it."""
    exposed = moe_host_overhead_s(
        _work("full_iteration"), _acc(moe_overhead_full_graph_share=0.9), 4, (1.0, 1.0, 1.0)
    )
    assert exposed == pytest.approx(0.1 * 6.0e-3, rel=1e-12)


def test_arrays_of_keys_give_each_key_its_value():
    """One row per key (the search's tables): 1 and 16 local experts beside the same GPU work (1, 0.5, 2 ms):
    1 expert: host (33, 12, 45) x 50 us = 1.65, 0.6, 2.25 ms: 0.6 + 0.65 + 0.1 + 0.25 = 1.6 ms;
    16 experts: (33, 42, 105) launches = 1.65, 2.1, 5.25 ms: 0.6 + 0.65 + 1.6 + 3.25 = 6.1 ms."""
    exposed = moe_host_overhead_s(
        _work(),
        _acc(),
        np.array([1.0, 16.0]),
        (np.full(2, 1e-3), np.full(2, 0.5e-3), np.full(2, 2e-3)),
    )
    assert exposed == pytest.approx([1.6e-3, 6.1e-3], rel=1e-12)


def test_one_latency_and_sync_for_every_gpu():
    """The per-launch latency and the sync are the frameworks' host code, one fitted value for the GPUs: 53.06 us
    and 510.1 us on H100, H200, H800, B200 and GB200 (and the AMD parts that borrow them); 53.64 us and 552.5 us before
    the loss's passes were costed, 53.56 us and 624 us before the element-wise kernels ran at their measured HBM rates
    (each refit moved them)."""
    for name in ("h100", "h200", "h800", "b200", "gb200", "mi300x", "mi355x"):
        acc = load_accelerator(name)
        assert (acc.moe_launch_latency_s, acc.moe_host_sync_s) == (
            pytest.approx(53.06e-6),
            pytest.approx(510.1e-6),
        ), name


def test_a_faster_gpu_shows_more_of_the_same_host_time():
    """Mixtral 8x7B, fsdp=16, ep=8 (1 local expert), 4 microbatches of 4096 tokens: the same launches beside
    Blackwell's shorter kernels show more host time than on H100, and at least the sync on each (32 layers x 4
    microbatches x 510.1 us = 65.3 ms; 552.5 us = 70.7 ms before the loss's passes were costed, 624 us = 79.9 ms
    before the element-wise kernels ran at their measured HBM rates)."""
    lay = Layout(fsdp=16, ep=8, zero_stage=1, num_microbatches=4)
    fixed = {}
    for gpu in ("h100", "b200"):
        problem = Problem.build(
            "mixtral-8x7b",
            f"{gpu}-16",
            Workload(global_batch_seqs=64, seq_len=4096, framework="megatron"),
        )
        fixed[gpu] = estimate(problem, lay).time_s["compute/moe_fixed"]
    assert fixed["h100"] >= 32 * 4 * 510.1e-6 * (1 - 1e-9)
    assert fixed["b200"] > fixed["h100"]
