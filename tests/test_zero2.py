"""ZeRO-2 keeps only its shard of the gradients, so it reduce-scatters them in every microbatch's
backward (DeepSpeed's stage 2 at every micro-step, FSDP's SHARD_GRAD_OP at every backward); ZeRO-1
accumulates whole gradients and reduce-scatters them once per step."""

import pytest

from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.specs import Layout
from layoutsearch.costs.estimate import estimate

# Llama 3 8B (32 layers) on one node of 8 H100s, 64 sequences of 4096 tokens: 8 a device
PROBLEM = Problem.build("llama3-8b", "h100-8", build_workload(64, 4096, framework="megatron"))


def _estimate(zero_stage: int, microbatches: int):
    return estimate(PROBLEM, Layout(fsdp=8, zero_stage=zero_stage, num_microbatches=microbatches))


def _collective(est, name: str) -> dict:
    return next(c for c in est.collectives if c["name"] == name)


def test_zero2_reduce_scatters_its_gradients_in_every_microbatch():
    """With tp = cp = 1 nothing shares the links. One microbatch: ZeRO-1 and ZeRO-2 reduce-scatter the
    same gradients (78.1 ms, hidden behind the backward, eta = 0.32 of it charged as the compute it
    slows) and take the same 2.908 s. Four: ZeRO-1 still reduces once (2.933 s, the smaller
    microbatches' compute), ZeRO-2 four times, 3 x 0.32 x 78.1 ms = 75.0 ms more (3.008 s), and holds
    an eighth of ZeRO-1's gradients. (2.889, 2.913 and 2.988 s before the loss's passes were costed and the h100
    class refitted beside them; 2.849, 2.874 and 2.949 s before the element-wise kernels and the optimizer
    step ran at their measured HBM rates: 39 ms more of each step, the collectives unchanged.)"""
    eta = PROBLEM.cluster.accelerator.overlap_interference
    assert eta == 0.32
    z1_one, z2_one = _estimate(1, 1), _estimate(2, 1)
    z1_four, z2_four = _estimate(1, 4), _estimate(2, 4)
    once = _collective(z1_four, "zero-1 grad reduce-scatter")
    each = _collective(z2_four, "zero-2 grad reduce-scatter")
    assert (once["frequency"], each["frequency"]) == ("per step", "per microbatch")
    assert once["time_s"] == each["time_s"] == pytest.approx(0.078106, abs=1e-6)
    assert "zero-1 grad reduce-scatter" not in {c["name"] for c in z2_four.collectives}
    assert z2_one.time_s == pytest.approx(z1_one.time_s, rel=1e-12)
    assert z2_one.time_s["step"] == pytest.approx(2.9082, abs=1e-4)  # 2.8885, 2.8493 before
    assert z1_four.time_s["exposed_comm/interference"] == pytest.approx(
        z1_one.time_s["exposed_comm/interference"], rel=1e-12
    )
    added = (
        z2_four.time_s["exposed_comm/interference"] - z1_four.time_s["exposed_comm/interference"]
    )
    assert added == pytest.approx(eta * 3 * each["time_s"], rel=1e-9)
    assert added == pytest.approx(0.0750, abs=1e-4)
    assert (z1_four.time_s["step"], z2_four.time_s["step"]) == pytest.approx(
        (2.933, 3.008), abs=1e-3
    )  # (2.913, 2.988), (2.874, 2.949) before
    assert z1_four.memory_bytes["state/grads"] == pytest.approx(
        8 * z2_four.memory_bytes["state/grads"], rel=1e-12
    )


def test_fsdp_zero2_also_gathers_the_weights_in_every_microbatch():
    """FSDP (torchtitan's profile: FSDP2 with reshard_after_forward=False) reshards after every backward, so
    each microbatch but the first gathers the weights again in its forward (bf16: half the fp32
    reduce-scatter plus its per-collective cost, 39.1 ms), hidden behind forward and backward: 4 microbatches against 1 add
    3 x 0.32 x (78.1 + 39.1) ms = 112.5 ms, where Megatron-FSDP and DeepSpeed's stage 2 add 75.0 ms."""
    fsdp = Problem.build("llama3-8b", "h100-8", build_workload(64, 4096, framework="torchtitan"))
    one, four = (estimate(fsdp, Layout(fsdp=8, zero_stage=2, num_microbatches=k)) for k in (1, 4))
    added = four.time_s["exposed_comm/interference"] - one.time_s["exposed_comm/interference"]
    assert added == pytest.approx(0.32 * 3 * (0.078106 + 0.039071), abs=1e-5)
    assert added == pytest.approx(0.1125, abs=1e-4)
    assert (
        four.time_s["exposed_comm/fsdp"] == 0.0
    )  # hidden: it fits behind the four forwards and backwards


def test_the_gather_of_the_updated_weights_is_listed_and_fsdp_zero2_gathers_in_every_microbatch():
    """The collectives list names the ZeRO-1/2 gather of the updated weights (39.1 ms, about half the fp32
    reduce-scatter's bytes in bf16): once a step under Megatron, in every microbatch under FSDP's ZeRO-2
    (Profile.zero2_regathers: it reshards after every backward)."""
    torchtitan = Problem.build(
        "llama3-8b", "h100-8", build_workload(64, 4096, framework="torchtitan")
    )
    rows = {
        (framework, stage): _collective(
            estimate(problem, Layout(fsdp=8, zero_stage=stage, num_microbatches=4)),
            f"zero-{stage} weight gather",
        )
        for framework, problem in (("megatron", PROBLEM), ("torchtitan", torchtitan))
        for stage in (1, 2)
    }
    assert {k: r["frequency"] for k, r in rows.items()} == {
        ("megatron", 1): "per step",
        ("megatron", 2): "per step",
        ("torchtitan", 1): "per step",
        ("torchtitan", 2): "per microbatch",
    }
    assert [r["time_s"] for r in rows.values()] == pytest.approx([0.03907] * 4, abs=1e-5)
