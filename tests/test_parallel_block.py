"""A parallel block (ModelSpec.parallel_block: GPT-J, GPT-NeoX, Falcon, PaLM, MaxText's 2023 decoder):
attention and MLP read the layer's input side by side and their outputs are summed, so a layer's pass
needs one TP collective pair, not two, and saves neither the residual entering the MLP's norm nor, with
one norm, the MLP's own input."""

import dataclasses

import pytest

from layoutsearch.core.catalogue import load_model, model_from_dict
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.problem import Problem
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.core.topology import resolve_cluster
from layoutsearch.costs import memory
from layoutsearch.costs.estimate import estimate


def _estimate(model):
    cluster = resolve_cluster("h100-64")
    workload = Workload(global_batch_seqs=64, seq_len=4096, framework="torchtitan")
    problem = Problem(
        model_id=model.name, model=model, cluster_name="h100-64", cluster=cluster, workload=workload
    )
    return estimate(problem, Layout(fsdp=8, tp=8), strict=False)


def test_one_tp_pair_per_layer_and_pass_and_one_residual_fewer():
    """Llama 3 8B on 64 H100s, fsdp 8 x tp 8, one microbatch of 8 sequences (32,768 tokens), no recompute,
    torchtitan (TP not pipelined with the GEMMs). Serial: 2 pairs forward and 2 backward per layer;
    parallel: 1 and 1. So the exposed TP time falls by 32 layers x 2 passes x one pair's time, and the
    saved activations by the residual entering the MLP's norm: 32 layers x 32,768 tokens x 4096/8
    (sequence parallel) x 2 bytes = 1,073,741,824 bytes (two norms kept: the MLP's input stays)."""
    serial = load_model("llama3-8b")
    parallel = dataclasses.replace(serial, parallel_block=True)
    a, b = _estimate(serial), _estimate(parallel)
    (pair_a,) = [c for c in a.collectives if c["name"].startswith("tp ")]
    (pair_b,) = [c for c in b.collectives if c["name"].startswith("tp ")]
    assert pair_a["time_s"] == pair_b["time_s"] == pytest.approx(0.0013737, rel=1e-4)
    assert (pair_a["frequency"], pair_b["frequency"]) == (
        "per layer per microbatch x4-6",
        "per layer per microbatch x2-3",
    )
    assert a.time_s["exposed_comm/tp"] - b.time_s["exposed_comm/tp"] == pytest.approx(
        32 * 2 * pair_a["time_s"], rel=1e-9
    )
    saved = a.memory_bytes["activations/saved"] - b.memory_bytes["activations/saved"]
    assert saved == 32 * 32_768 * 4096 // 8 * 2 == 1_073_741_824
    assert a.time_s["compute"] == b.time_s["compute"]


def test_one_norm_feeds_the_mlp_the_qkv_input():
    """Per token and layer on one TP rank (tp 8, sequence parallel): a parallel block with one norm saves
    neither the residual entering the MLP's norm nor the MLP's input (the QKV projection's): 2 x 4096 / 8
    elements fewer than the serial block; with two norms only the first."""
    serial = load_model("llama3-8b")
    one = dataclasses.replace(serial, parallel_block=True, norms_per_layer=1)
    two = dataclasses.replace(serial, parallel_block=True)

    def total(m):
        return sum(float(w) for w in memory.saved_tensor_widths(m, 8, True, 4096).values())

    assert total(serial) - total(one) == 2 * 4096 / 8
    assert total(serial) - total(two) == 4096 / 8


def test_one_norm_without_a_parallel_block_is_refused():
    """One norm per layer cannot feed attention, then the MLP: a catalogue entry saying so is one line."""
    spec = {
        "name": "x",
        "num_layers": 2,
        "d_model": 64,
        "d_ff": 256,
        "mlp": "plain",
        "num_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 16,
        "vocab_size": 100,
        "tied_embeddings": True,
        "norms_per_layer": 1,
    }
    with pytest.raises(CatalogueError) as err:
        model_from_dict(spec, "x", "model 'x'")
    assert str(err.value) == (
        "model 'x': norms_per_layer(1) with parallel_block false: one norm per layer feeds attention "
        "and MLP side by side (parallel_block: true)"
    )
    assert model_from_dict({**spec, "parallel_block": True}, "x", "model 'x'").parallel_block
