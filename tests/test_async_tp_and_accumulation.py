"""Megatron's asynchronous backward TP collectives (costs.terms.tp_async_backward) and the gradient accumulation
kernel of the frameworks that add each microbatch's gradients apart (costs.terms.grad_accumulation), with the
framework release that did neither (rule 32)."""

import json

import pytest
from builders import data_path

from layoutsearch.api import problem
from layoutsearch.core.catalogue import load_model
from layoutsearch.core.errors import CatalogueError
from layoutsearch.core.frameworks import grad_accumulation_fusion_of, tp_backward_async_of
from layoutsearch.core.specs import Layout
from layoutsearch.costs import terms
from layoutsearch.costs.estimate import estimate
from layoutsearch.validation import mapping
from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import load_runs

LLAMA8B = load_model("llama3-8b")
WINDOWS = {"window/column_attn_layer": 0.3, "window/column_mlp_layer": 2.0}


def test_the_asynchronous_collectives_hide_behind_the_column_parallel_gemms_by_hand():
    """One unit (a block's AllReduce) of 1 s, the attention block's QKV GEMM 0.3 s, the MLP's input GEMM 2 s.
    Without SP: the attention's AllReduce outlasts its weight gradient by 0.7 s, the MLP's hides: 0.7 s
    exposed, 1.3 s hidden. With SP: each block's output-gradient AllGather (0.5 s) waits; its ReduceScatter
    and the input's re-gather (0.5 s each) run beside the 0.3 s (attention: 0.2 s out each) and 2 s (MLP)
    GEMMs: 0.5 + 0.4 + 0.5 = 1.4 s exposed, 0.6 + 1.0 = 1.6 s hidden."""
    assert terms.tp_async_backward(LLAMA8B, 1.0, WINDOWS, False) == pytest.approx((0.7, 1.3))
    assert terms.tp_async_backward(LLAMA8B, 1.0, WINDOWS, True) == pytest.approx((1.4, 1.6))


def test_a_moe_layers_mlp_block_and_mla_attention_wait():
    """A MoE layer's MLP block (its dispatcher's collectives) waits a whole unit: at a stage's MoE share of
    0.5 the MLP block is half a dense layer's (0 exposed, 1 hidden without SP) and half a unit; MLA's
    attention waits its unit whatever its window."""
    moe = {**WINDOWS, "window/moe_layer_share": 0.5}
    assert terms.tp_async_backward(load_model("mixtral-8x7b"), 1.0, moe, False) == pytest.approx(
        (0.7 + 0.5, 0.3 + 0.5)
    )
    assert terms.tp_async_backward(load_model("deepseek-v3"), 1.0, moe, False) == pytest.approx(
        (1.0 + 0.5, 0.0 + 0.5)
    )


def _tp(asynchronous: bool) -> tuple[float, float, float]:
    """(exposed TP, interference, the TP activations' unit) of Llama 3 8B at fsdp 8 x tp 8 with SP, one
    microbatch of 4,096 tokens on 64 H100s under Megatron."""
    p = problem(
        "llama3-8b",
        "h100-64",
        seqs=64,
        seq_len=4096,
        framework="megatron",
        tp_backward_async=asynchronous,
    )
    e = estimate(p, Layout(fsdp=8, tp=8, num_microbatches=1))
    unit = next(c["time_s"] for c in e.collectives if c["name"].startswith("tp activations"))
    return e.time_s["exposed_comm/tp"], e.time_s["exposed_comm/interference"], unit


def test_megatron_hides_what_the_gemms_cover_and_pays_the_interference_of_it():
    """Waiting, the 32 layers expose four AllGather + ReduceScatter pairs each (and three small loss
    AllReduces). Asynchronously, the forward's two pairs and the backward's output-gradient AllGathers stay
    exposed (three units a layer at least); the backward's ReduceScatters and the re-gathers (two units a layer
    in all) are exposed where they outlast their GEMMs and hidden beside them, and each hidden second costs
    the H100's 0.32 of compute: exposed + interference / 0.32 is five units a layer."""
    waiting, waiting_lost, unit = _tp(False)
    loss = waiting - 32 * 4 * unit
    assert 0 < loss < 2e-3 * waiting
    exposed, lost, same_unit = _tp(True)
    assert same_unit == unit
    assert 32 * 3 * unit < exposed - loss < 32 * 4 * unit
    hidden = (lost - waiting_lost) / 0.32
    assert exposed - loss + hidden == pytest.approx(32 * 5 * unit, rel=1e-9)
    assert exposed + (lost - waiting_lost) < waiting  # cheaper than waiting, interference included


def _accumulation(zero_stage: int, grad_accumulation_fusion: bool | None = False) -> float:
    """overhead/grad_accumulation of Llama 3 8B at fsdp 64, 4 microbatches, under DeepSpeed."""
    p = problem(
        "llama3-8b",
        "h100-64",
        seqs=256,
        seq_len=4096,
        framework="deepspeed",
        grad_accumulation_fusion=grad_accumulation_fusion,
    )
    e = estimate(p, Layout(fsdp=64, zero_stage=zero_stage, num_microbatches=4))
    return e.time_s["overhead/grad_accumulation"]


def test_the_accumulation_kernel_reads_the_gradient_and_reads_and_writes_its_accumulator():
    """Each of 4 microbatches adds 8,030,261,248 bf16 gradients into fp32 accumulators: 2 + 4 + 4 bytes a
    parameter at the H100's element-wise rate (3.35 TB/s x 0.885 = 2.965 TB/s), 108.3 ms a step with ZeRO-1's
    whole gradients (95.9 ms at the datasheet 3.35 TB/s, before the element-wise kernels ran at their measured HBM
    rates); ZeRO-3 reduce-scatters them each microbatch and adds its 1/64 shard; Megatron's fusion (the
    weight-gradient GEMM adds) costs nothing here."""
    whole = 4 * 8_030_261_248 * 10 / (3.35e12 * 0.885)
    assert whole == pytest.approx(0.1083432, abs=1e-7)  # 0.0958838 at 3.35e12 before
    assert _accumulation(1) == pytest.approx(whole, rel=1e-9)
    assert _accumulation(3) == pytest.approx(whole / 64, rel=1e-2)  # the vocabulary shards alike
    assert _accumulation(1, grad_accumulation_fusion=True) == 0.0
    assert _accumulation(1, grad_accumulation_fusion=None) == pytest.approx(
        whole
    )  # DeepSpeed's own


def test_the_release_of_2021_waited_for_its_tp_collectives_and_added_its_gradients_apart():
    """Narayanan et al.'s rows ran the Megatron-LM of 2021 (framework_releases.yaml): no asynchronous backward
    TP collectives, no gradient-accumulation fusion. A record naming no release runs today's Megatron: both."""
    runs = {r["id"]: r for r in load_runs(data_path("runs_dev.yaml"))}
    old = record_to_problem(runs["megatron2021-table1-1008-0b"])[0].workload
    new = record_to_problem(runs["megatron-core-h100-2024-70b"])[0].workload
    assert (old.tp_backward_async, old.grad_accumulation_fusion) == (False, False)
    assert (new.tp_backward_async, new.grad_accumulation_fusion) == (None, None)  # the profile's:
    assert (tp_backward_async_of(new, "gpu"), grad_accumulation_fusion_of(new, "gpu")) == (
        True,
        True,
    )


def test_a_release_whose_costing_field_is_not_a_boolean_is_a_catalogue_error(tmp_path, monkeypatch):
    """The table's costing fields are checked when it loads, as its limits are."""
    bad = tmp_path / "framework_releases.yaml"
    bad.write_text(
        "releases:\n  x:\n    framework: megatron\n    what: a test\n    source: here\n"
        "    grad_accumulation_fusion: 3\n"
    )
    monkeypatch.setattr(mapping, "RELEASES_PATH", bad)
    mapping.framework_releases.cache_clear()
    try:
        with pytest.raises(
            CatalogueError,
            match=r"^framework_releases.yaml: x: grad_accumulation_fusion 3: expected true or false$",
        ):
            mapping.framework_releases()
    finally:
        monkeypatch.undo()
        mapping.framework_releases.cache_clear()


def test_the_command_line_turns_either_off(cli_main):
    """estimate --no-tp-backward-async exposes the backward's TP collectives again; --no-grad-accumulation-fusion
    adds the accumulation kernel to a Megatron step."""
    args = ["estimate", "--model", "llama3-8b", "--cluster", "h100-64", "--seqs", "64"]
    args += ["--layout", "fsdp=8,tp=8", "--format", "json"]

    def time_s(*extra):
        code, out, _ = cli_main(*args, *extra)
        assert code == 0
        return json.loads(out)["layout"]["time_s"]

    default, waiting, apart = (
        time_s(),
        time_s("--no-tp-backward-async"),
        time_s("--no-grad-accumulation-fusion"),
    )
    assert waiting["exposed_comm/tp"] > default["exposed_comm/tp"]
    assert default["overhead/grad_accumulation"] == 0.0 < apart["overhead/grad_accumulation"]


def test_an_export_writes_the_accumulation_it_was_costed_with_or_refuses_it(cli_main, tmp_path):
    """An estimate with --no-grad-accumulation-fusion exports to Megatron with --no-gradient-accumulation-fusion
    and is refused by torchtitan; one with --no-tp-backward-async at tp 8 is refused by Megatron, whose
    backward TP collectives run asynchronously with no flag to wait for them."""
    base = ["estimate", "--model", "llama3-8b", "--cluster", "h100-16", "--seqs", "64"]

    def saved(name: str, *extra: str):
        path = tmp_path / f"{name}.json"
        code, out, _ = cli_main(*base, *extra, "--format", "json")
        assert code == 0
        path.write_text(out)
        return path

    def refused(saved_path, target: str) -> str:
        code, _, err = cli_main("export", saved_path, "--to", target, "-o", tmp_path / target)
        assert code == 2
        return err

    apart = saved(
        "apart", "--layout", "fsdp=16", "--recompute", "full", "--no-grad-accumulation-fusion"
    )
    code, _, _ = cli_main("export", apart, "--to", "megatron", "-o", tmp_path / "run.sh")
    assert code == 0 and "--no-gradient-accumulation-fusion" in (tmp_path / "run.sh").read_text()
    assert (
        "torchtitan cannot express each microbatch's gradients added by a kernel of their own "
        "(--no-grad-accumulation-fusion); nearest: --grad-accumulation-fusion, or export to megatron or "
        "deepspeed"
    ) in refused(apart, "torchtitan")
    waiting = saved(
        "waiting", "--layout", "fsdp=2,tp=8", "--recompute", "full", "--no-tp-backward-async"
    )
    assert (
        "Megatron-LM cannot express the backward's TP collectives waited for (--no-tp-backward-async) "
        "with tp(8); nearest: --tp-backward-async"
    ) in refused(waiting, "megatron")
