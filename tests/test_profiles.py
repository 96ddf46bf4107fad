"""Framework profiles: which collectives overlap with what (core/frameworks.py), as the cost model applies them."""

import json

import pytest
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.frameworks import PROFILES, framework_of_record, framework_of_target
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.specs import Layout
from layoutsearch.costs.estimate import estimate


def _estimate(layout: Layout, cluster="h100-64", **options):
    problem = Problem.build("llama3-8b", cluster, build_workload(64, 4096, **options))
    return estimate(problem, layout)


def test_megatron_and_ideal_profiles_expose_different_tp_time_for_one_layout():
    """Megatron keeps TP on the critical path unless --tp-comm-overlap; ideal pipelines it with the GEMMs. Their
    compute differs by the loss's kernels alone: Megatron's native one moves 32 bytes a logit, ideal's compiled one
    6, over 128,256 / 8 logits a token for 8 x 4,096 tokens at 3.35 TB/s x 0.885."""
    layout = Layout(fsdp=8, tp=8, zero_stage=3)
    megatron, ideal = _estimate(layout, framework="megatron"), _estimate(layout, framework="ideal")
    assert megatron.workload.tp_comm_overlap is False and ideal.workload.tp_comm_overlap is True
    assert ideal.time_s["exposed_comm/tp"] < 0.5 * megatron.time_s["exposed_comm/tp"]
    loss_gap = (32 - 6) * 128_256 / 8 * 8 * 4096 / (3.35e12 * 0.885)
    assert ideal.time_s["compute"] == pytest.approx(megatron.time_s["compute"] - loss_gap)
    # --tp-comm-overlap overrides the profile in both directions
    assert _estimate(layout, framework="megatron", tp_comm_overlap=True).time_s[
        "exposed_comm/tp"
    ] == pytest.approx(ideal.time_s["exposed_comm/tp"])
    assert _estimate(layout, framework="ideal", tp_comm_overlap=False).time_s[
        "exposed_comm/tp"
    ] == pytest.approx(megatron.time_s["exposed_comm/tp"])


def test_tp_across_scale_out_is_on_the_critical_path_in_every_profile():
    """A TP group of 16 on 8-GPU nodes crosses the NICs: overlap does not pipeline it, even in the ideal profile
    (each profile exposes what it does without --tp-comm-overlap); what runs asynchronously beside the backward's
    GEMMs (megatron's and ideal's column-parallel input gradients) still hides there."""
    layout = Layout(fsdp=4, tp=16, zero_stage=3)

    def exposed(name, overlap):
        return _estimate(layout, framework=name, tp_comm_overlap=overlap).time_s["exposed_comm/tp"]

    pipelined = {name: exposed(name, True) for name in PROFILES}
    assert pipelined == pytest.approx({name: exposed(name, False) for name in PROFILES})
    waiting = exposed("torchtitan", False)
    assert {name: pipelined[name] == pytest.approx(waiting) for name in PROFILES} == {
        "megatron": False,
        "deepspeed": True,
        "torchtitan": True,
        "maxtext": True,
        "ideal": False,
    }
    assert pipelined["megatron"] < waiting


def test_deepspeed_does_not_hide_the_zero1_gather_of_updated_weights():
    """DeepSpeed all-gathers the updated ZeRO-1/2 weights after the optimizer step; Megatron's
    --overlap-param-gather hides it behind the next forward."""
    layout = Layout(dp=8, fsdp=8, zero_stage=1)
    megatron, deepspeed = (
        _estimate(layout, framework="megatron"),
        _estimate(layout, framework="deepspeed"),
    )
    scatter = next(
        c["time_s"] for c in megatron.collectives if c["name"] == "zero-1 grad reduce-scatter"
    )
    # the gather: the same ring over the same 8 GPUs, bf16 weights instead of fp32 gradients, about half the time;
    # Megatron hides both, DeepSpeed the reduce-scatter only (what hiding costs is exposed_comm/interference)
    assert megatron.time_s["exposed_comm/zero"] == pytest.approx(0.0, abs=1e-12)
    assert deepspeed.time_s["exposed_comm/zero"] == pytest.approx(scatter / 2, rel=0.05)
    assert (
        megatron.time_s["exposed_comm/interference"] > 0
        and deepspeed.time_s["exposed_comm/interference"] > 0
    )
    assert deepspeed.step_time_s > megatron.step_time_s


def test_deepspeed_pipeline_engine_reduces_gradients_after_the_whole_schedule():
    """DeepSpeed's pipeline engine ends its TrainSchedule with ReduceGrads: with pp > 1 the ZeRO-1 reduce-scatter
    hides behind nothing (exposed whole, nothing charged as interference); with pp = 1 it hides partly behind the
    last backward, as Megatron's --overlap-grad-reduce does with a pipeline too."""
    piped = Layout(dp=4, fsdp=8, pp=2, zero_stage=1, num_microbatches=2)
    deepspeed, megatron = (
        _estimate(piped, framework="deepspeed"),
        _estimate(piped, framework="megatron"),
    )
    scatter = next(
        c["time_s"] for c in deepspeed.collectives if c["name"] == "zero-1 grad reduce-scatter"
    )
    gather = (
        deepspeed.time_s["exposed_comm/zero"] - scatter
    )  # DeepSpeed hides neither: the gather is the rest
    assert 0.4 * scatter < gather < 0.6 * scatter  # bf16 weights gathered, fp32 gradients reduced
    assert megatron.time_s["exposed_comm/zero"] < 0.5 * scatter
    flat = Layout(dp=8, fsdp=8, zero_stage=1)
    flat_ds = _estimate(flat, framework="deepspeed")
    flat_scatter = next(
        c["time_s"] for c in flat_ds.collectives if c["name"] == "zero-1 grad reduce-scatter"
    )
    assert (
        flat_ds.time_s["exposed_comm/zero"] < flat_scatter + 0.6 * flat_scatter - 1e-6
    )  # part of it hidden


def test_defaults_and_names():
    assert _estimate(Layout(fsdp=64)).workload.framework == "megatron"
    assert (
        Problem.build("llama3-8b", "v5p-64", build_workload(64, 4096)).workload.framework
        == "maxtext"
    )
    assert framework_of_record("megatron-deepspeed", "gpu") == "deepspeed"
    assert framework_of_record("llm-foundry", "gpu") == "torchtitan"
    assert (
        framework_of_record(None, "tpu") == "maxtext"
        and framework_of_record("other", "gpu") == "megatron"
    )
    assert (
        framework_of_target("torchtitan-0.3") == "torchtitan"
        and framework_of_target("megatron") == "megatron"
    )


# An estimate of Llama 3 8B's 64 sequences on 64 H100s; the layout follows
LLAMA3_8B_H100_64_ESTIMATE = (
    *("estimate", "--model", "llama3-8b", "--cluster", "h100-64", "--seqs", "64", "--layout"),
)


def test_cli_records_and_prints_the_profile():
    runner = CliRunner()
    r = runner.invoke(
        app,
        [*LLAMA3_8B_H100_64_ESTIMATE, "fsdp=8,tp=8", "--framework", "ideal", "--format", "json"],
    )
    assert r.exit_code == 0, r.output
    workload = json.loads(r.stdout)["problem"]["workload"]
    assert (workload["framework"], workload["tp_comm_overlap"]) == ("ideal", True)
    r = runner.invoke(app, [*LLAMA3_8B_H100_64_ESTIMATE, "fsdp=8,tp=8"])
    assert "bf16, megatron overlap" in r.stdout.splitlines()[0]
    r = runner.invoke(
        app, ["estimate", "--model", "llama3-8b", "--cluster", "h100-64", "--framework", "nemo"]
    )
    assert r.exit_code == 2 and "nemo" in r.output


def test_cli_takes_the_deepep_dispatch_and_names_it_for_moe_models_only():
    runner = CliRunner()
    base = [
        "estimate",
        "--model",
        "mixtral-8x7b",
        "--cluster",
        "h100-16",
        "--seqs",
        "16",
        "--layout",
        "fsdp=16,ep=8",
        "--zero-stage",
        "3",
        "--recompute",
        "full",
        "--framework",
        "torchtitan",
    ]
    r = runner.invoke(app, base + ["--deepep", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["problem"]["workload"]["deepep"] is True
    assert (
        "bf16, torchtitan overlap + DeepEP dispatch"
        in runner.invoke(app, base + ["--deepep"]).stdout.splitlines()[0]
    )
    assert (
        "DeepEP" not in runner.invoke(app, base).stdout.splitlines()[0]
    )  # torchtitan's default: NCCL all-to-all
    dense = runner.invoke(app, [*LLAMA3_8B_H100_64_ESTIMATE, "fsdp=64", "--deepep"])
    # a dense model has no token dispatch: refused, not silently dropped
    assert dense.exit_code == 2
    assert dense.output.strip().splitlines()[-1] == (
        "error: --deepep: llama3-8b is a dense model (no experts) and DeepEP dispatches the tokens "
        "of expert layers; leave it out, or name a mixture-of-experts --model"
    )


@pytest.mark.parametrize(
    "flags, named, what",
    [
        (
            ["--routing-cv", "0.3"],
            "--routing-cv 0.3",
            "it is the spread of a learned router's expert loads",
        ),
        (["--routing", "forced"], "--routing forced", "it forces the router's token balance"),
        (
            ["--ep-comm-overlap"],
            "--ep-comm-overlap",
            "it hides the expert layers' token all-to-alls",
        ),
        (
            ["--precision", "fp8", "--fp8-dispatch"],
            "--fp8-dispatch",
            "it dispatches the expert layers' tokens in fp8",
        ),
    ],
)
def test_mixture_of_experts_options_on_a_dense_model_are_refused(flags, named, what):
    """An option that only an expert layer reads, turned on for a dense model, exits 2 naming it (a wrong --model
    is likelier than a wasted flag); the same options on a mixture-of-experts model run."""
    runner = CliRunner()
    dense = runner.invoke(app, [*LLAMA3_8B_H100_64_ESTIMATE, "fsdp=64", *flags])
    assert dense.exit_code == 2
    assert dense.output.strip().splitlines()[-1] == (
        f"error: {named}: llama3-8b is a dense model (no experts) and {what}; leave it out, or name a "
        f"mixture-of-experts --model"
    )
    moe = runner.invoke(
        app,
        ["estimate", "--model", "mixtral-8x7b", "--cluster", "h100-64", "--seqs", "64"]
        + ["--layout", "fsdp=8,ep=8,tp=8", *flags],
    )
    assert moe.exit_code == 0, moe.output


def test_megatron_computes_the_loss_gradient_in_place_of_its_softmax():
    """Megatron's vocab-parallel cross entropy writes exp and the gradient into the fp32 logits it saved:
    one fp32 logits buffer at the loss backward; torchtitan's loss, run eagerly (--no-compiled-loss), allocates
    a second one."""
    layout = Layout(fsdp=64, zero_stage=3)
    megatron, torchtitan = (
        _estimate(layout, framework="megatron").memory_moments["loss_backward"],
        _estimate(layout, framework="torchtitan", compiled_loss=False).memory_moments[
            "loss_backward"
        ],
    )
    logits = torchtitan["temporary/logits"]
    assert logits == pytest.approx(
        4096 * 128256 * 4
    )  # one microbatch (one 4096-token sequence) of fp32 logits
    assert torchtitan["temporary/logits_grad"] == pytest.approx(logits)
    assert megatron["temporary/logits_grad"] == 0.0 and megatron[
        "temporary/logits"
    ] == pytest.approx(logits)
    maxtext = _estimate(layout, framework="maxtext").memory_moments[
        "loss_backward"
    ]  # XLA fuses the gradient
    assert maxtext["temporary/logits_grad"] == 0.0 and maxtext["temporary/logits"] == pytest.approx(
        logits
    )


def test_a_loss_on_bf16_logits_holds_them_and_their_gradient_in_half_the_bytes():
    """--no-fp32-logits (NeMo Automodel's MaskedCrossEntropy fp32_upcast: false): the logits of one
    4096-token microbatch and their gradient at the loss backward take 2 bytes an entry, not 4; PyTorch's eager loss
    then skips the upcast and its cast back and makes its eight passes at 2 bytes: 16 bytes a logit against 44,
    28 x 128,256 x 4,096 bytes less at 3.35 TB/s x 0.885 (the step did not move before the loss's passes were
    costed)."""
    layout = Layout(fsdp=64, zero_stage=3)
    fp32, bf16 = (
        _estimate(layout, framework="torchtitan", fp32_logits=f, compiled_loss=False)
        for f in (True, False)
    )
    held = bf16.memory_moments["loss_backward"]
    assert held["temporary/logits"] == pytest.approx(4096 * 128256 * 2)
    assert held["temporary/logits_grad"] == pytest.approx(4096 * 128256 * 2)
    assert fp32.memory_moments["loss_backward"]["temporary/logits"] == pytest.approx(
        4096 * 128256 * 4
    )
    assert fp32.step_time_s - bf16.step_time_s == pytest.approx(
        28 * 128_256 * 4096 / (3.35e12 * 0.885), rel=1e-9
    )


def test_maxtext_gathers_and_reduces_zero3_weights_per_tensor():
    """XLA gathers each matmul's weight where it is used and reduce-scatters each gradient where it is made: the
    unsharded temporaries are the largest tensor and the next (llama3-8b: an MLP matrix, 4096 x 14336), not two
    whole layers and a layer's gradients (218,112,000 parameters: attention, MLP and two norms)."""
    layout = Layout(fsdp=64, zero_stage=3)
    mlp_matrix, layer = 4096 * 14336, 218_103_808 + 2 * 4096
    maxtext, torchtitan = (
        _estimate(layout, framework=f).memory_moments["layer_backward"]
        for f in ("maxtext", "torchtitan")
    )
    assert maxtext["temporary/gathered"] == 2 * mlp_matrix * 2  # two bf16 tensors
    assert maxtext["temporary/layer_grads"] == 2 * mlp_matrix * 4  # two fp32 gradients
    assert (
        torchtitan["temporary/gathered"] == 2 * layer * 2
        and torchtitan["temporary/layer_grads"] == layer * 4
    )


def test_fsdp2_and_maxtext_keep_no_sharded_bf16_weights_under_zero3():
    """FSDP2 (torchtitan) casts the fp32 master shard to bf16 before each all-gather and MaxText casts its float32
    parameters in the layer: under ZeRO-3 no sharded bf16 copy persists, 2 bytes per parameter over 64 shards
    less than DeepSpeed's and Megatron-FSDP's, which keep one beside the master. ZeRO-1 keeps the full bf16 copy
    in every framework."""
    z3, z1 = Layout(fsdp=64, zero_stage=3), Layout(fsdp=64, zero_stage=1)
    problem = Problem.build("llama3-8b", "h100-64", build_workload(64, 4096))
    total = (
        problem.model.num_layers * 218_112_000 + 2 * 128256 * 4096
    )  # llama3-8b: 8,030,261,248 less the final norm
    state = {
        f: _estimate(z3, framework=f).memory_bytes
        for f in ("megatron", "deepspeed", "torchtitan", "maxtext")
    }
    assert state["megatron"]["state/weights"] == pytest.approx(total * 2 / 64, rel=1e-4)
    assert state["deepspeed"]["state/weights"] == state["megatron"]["state/weights"]
    assert state["torchtitan"]["state/weights"] == state["maxtext"]["state/weights"] == 0.0
    assert (
        state["torchtitan"]["state/master"] == state["megatron"]["state/master"]
    )  # the fp32 shard stays
    assert state["megatron"]["state"] - state["torchtitan"]["state"] == pytest.approx(
        total * 2 / 64, rel=1e-4
    )
    for f in ("torchtitan", "maxtext"):
        assert _estimate(z1, framework=f).memory_bytes["state/weights"] == pytest.approx(
            total * 2, rel=1e-4
        )


def test_maxtext_overlaps_tp_on_tpus_only():
    """XLA's continuation fusion (libtpu default) pipelines TP collectives on TPUs; on GPUs MaxText keeps
    them on the critical path unless asked (collective matmul needs XLA_FLAGS)."""
    layout = Layout(fsdp=8, tp=8, zero_stage=3)
    tpu = _estimate(layout, cluster="v5p-64", framework="maxtext")
    gpu = _estimate(layout, cluster="h100-64", framework="maxtext")
    assert tpu.workload.tp_comm_overlap is True and gpu.workload.tp_comm_overlap is False
    assert (
        _estimate(layout, cluster="v5p-64", framework="maxtext", tp_comm_overlap=False).time_s[
            "exposed_comm/tp"
        ]
        > 2 * tpu.time_s["exposed_comm/tp"]
    )


def test_a_hidden_collective_slows_the_compute_it_hides_behind_by_the_interference_share():
    """overlap_interference: of each second a collective hides, that share is charged, itemised as
    exposed_comm/interference; what is exposed stays charged whole in its group's item. The DP all-reduce of 8
    replicas hides partly behind the last backward; TP stays on the critical path (nothing else hides)."""
    from dataclasses import replace

    from layoutsearch.core.topology import resolve_cluster
    from layoutsearch.validation.calibrate import with_calibration

    layout = Layout(dp=8, tp=8, num_microbatches=8, recompute="full", sequence_parallel=True)

    def run(share):
        cluster = with_calibration(resolve_cluster("h100-64"), overlap_interference=share)
        return estimate(
            Problem.build(
                "llama3-8b",
                cluster,
                build_workload(256, 4096, tp_comm_overlap=False, tp_backward_async=False),
            ),
            layout,
        )

    free, charged = run(0.0), run(0.25)
    all_reduce = next(c["time_s"] for c in free.collectives if c["name"] == "dp grad all-reduce")
    exposed = free.time_s["exposed_comm/dp"]
    assert 0 < exposed < all_reduce  # partly hidden
    assert charged.time_s["exposed_comm/dp"] == pytest.approx(exposed, rel=1e-9)
    assert free.time_s["exposed_comm/interference"] == 0.0
    assert charged.time_s["exposed_comm/interference"] == pytest.approx(
        0.25 * (all_reduce - exposed), rel=1e-6
    )
    assert charged.step_time_s - free.step_time_s == pytest.approx(
        0.25 * (all_reduce - exposed), rel=1e-6
    )
    assert charged.time_s["compute"] == pytest.approx(free.time_s["compute"])

    pipelined = Problem.build(
        "llama3-8b",
        with_calibration(resolve_cluster("h100-64"), overlap_interference=0.25),
        build_workload(256, 4096, tp_comm_overlap=True),
    )
    tp_free = estimate(replace(pipelined, cluster=resolve_cluster("h100-64")), layout)
    tp_charged = estimate(
        pipelined, layout
    )  # the pipelined TP traffic is charged too, under interference
    # the TP item keeps what stays exposed (a ring chunk); what its hidden part slows goes to interference
    assert tp_charged.time_s["exposed_comm/tp"] == pytest.approx(
        tp_free.time_s["exposed_comm/tp"], rel=1e-9
    )
    assert (
        tp_charged.time_s["exposed_comm/interference"] > charged.time_s["exposed_comm/interference"]
    )
