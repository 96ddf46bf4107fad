"""gpt-oss for torchtitan 0.2 (its gpt_oss model, models/gpt_oss): the flavor or the registration the export's
header gives, and what that model cannot run (a pipeline, context parallelism, torch.compile, fp8), each refused by
its rule with torchtitan's reason. tests/test_frameworks.py builds the written model in torchtitan."""

from __future__ import annotations

import pytest
from builders import exported, solve_doc

from layoutsearch import cli
from layoutsearch.core.rules import violations
from layoutsearch.core.specs import Layout
from layoutsearch.export import context_for, target_rules

LAYOUT = Layout(fsdp=64, ep=8, zero_stage=3)
EAGER = {"framework": "torchtitan", "torch_compile": False}


def gpt_oss(layout: Layout = LAYOUT, model_changes: dict | None = None, **workload) -> dict:
    return solve_doc(
        "gpt-oss-120b",
        "h100-64",
        512,
        4096,
        layout,
        model_changes=model_changes,
        **EAGER,
        **workload,
    )


def refusals(doc: dict) -> dict[str, str]:
    ctx = context_for(doc, "torchtitan")
    return {
        v.code: v.message for v in violations(ctx.problem, ctx.layout, target_rules("torchtitan"))
    }


def test_gpt_oss_120b_is_written_as_torchtitans_flavor_and_runs_eager():
    """Its sizes are torchtitan's 120b flavor (36 layers, 128 experts, top 4, 128-token windows): name gpt_oss,
    flavor 120b, eager (compile off, as parallelize_gptoss runs it), the experts over ep 8; the router's bias is
    the gate's bias, a parameter in both."""
    text = exported(gpt_oss(), "torchtitan")
    assert 'name = "gpt_oss"' in text and 'flavor = "120b"' in text
    assert "[compile]\nenable = false\n" in text
    assert "expert_parallel_degree = 8\n" in text and "pipeline_parallel_degree = 1\n" in text
    assert "register it in" not in text
    assert (
        "router bias: the gate's bias (MoEArgs.gate_bias), a parameter as in layoutsearch" in text
    )


def test_other_sizes_are_written_as_a_gpt_oss_registration():
    """A 256-token window is no flavor's: the header gives the GptOssModelArgs to register, with the model's
    sizes, its window and the router of torchtitan's gpt_oss flavors (softmax over the top 4, renormalised, a
    biased gate)."""
    text = exported(gpt_oss(model_changes={"sliding_window": 256}), "torchtitan")
    assert 'flavor = "gpt-oss-120b"' in text
    assert (
        "register it in torchtitan/models/gpt_oss/__init__.py gptoss_configs as GptOssModelArgs(vocab_size=201088, "
        "dim=2880, moe_inter_dim=2880, n_layers=36, n_heads=64, n_kv_heads=8, head_dim=64, sliding_window_size=256, "
        "norm_eps=1e-05, rope_theta=150000.0, moe_args=MoEArgs(num_experts=128, num_shared_experts=0, top_k=4, "
        "score_func='softmax', route_norm=True, gate_bias=True, score_before_experts=False, "
        "load_balance_coeff=0.001))"
    ) in text


@pytest.mark.parametrize(
    "layout, workload, code, message",
    [
        (
            Layout(fsdp=32, pp=2, ep=8, zero_stage=1, num_microbatches=4),
            {},
            "torchtitan-gpt-oss-pp",
            "torchtitan cannot express gpt-oss with pp(2) (its gpt_oss model has no pipeline split (TrainSpec "
            "pipelining_fn None)); nearest: pp 1 (--fix pp=1), or export to deepspeed",
        ),
        (
            Layout(fsdp=32, cp=2, ep=8, zero_stage=3),
            {},
            "torchtitan-gpt-oss-cp",
            "torchtitan cannot express gpt-oss with cp(2) (its gpt_oss model args raise NotImplementedError for "
            "context_parallel_degree > 1); nearest: cp 1 (--fix cp=1), or export to deepspeed",
        ),
        (
            LAYOUT,
            {"torch_compile": True},
            "torchtitan-gpt-oss-compile",
            "torchtitan cannot express a compiled gpt-oss-120b (torch.compile's fused element-wise kernels) "
            "(parallelize_gptoss never compiles the model (only compile.components loss would be), so it runs "
            "eager PyTorch); nearest: eager kernels (--no-torch-compile), or export to deepspeed",
        ),
        (
            LAYOUT,
            {"precision": "fp8"},
            "torchtitan-gpt-oss-fp8",
            "torchtitan cannot express the fp8 GEMMs of gpt-oss-120b (its Float8Linear converter would turn the "
            "attention projections to fp8 and leave the grouped experts in bf16, which is not the fp8 step "
            "costed); nearest: --precision bf16, or export to deepspeed",
        ),
    ],
    ids=["pp", "cp", "compile", "fp8"],
)
def test_what_torchtitans_gpt_oss_model_cannot_run_is_refused_by_rule(
    layout, workload, code, message
):
    """torchtitan 0.2.2's gpt_oss: no pipelining function, NotImplementedError for cp > 1, never compiled, fp8 only
    on its attention's nn.Linear layers: each refused by its rule, with the reason and the nearest fix."""
    doc = solve_doc("gpt-oss-120b", "h100-64", 512, 4096, layout, **{**EAGER, **workload})
    found = refusals(doc)
    assert found[code] == message
    assert not {c for c in found if c.startswith("torchtitan-gpt-oss")} - {code}
    assert "torchtitan-sinks" not in found and "torchtitan-window" not in found


def test_a_dense_model_is_not_touched_by_the_gpt_oss_rules():
    """The rules bind on the gpt-oss block only: Llama 3 8B with pp 2 and cp 2, compiled, passes them."""
    doc = solve_doc(
        "llama3-8b",
        "h100-64",
        512,
        4096,
        Layout(fsdp=16, pp=2, cp=2, zero_stage=1, num_microbatches=4),
        framework="torchtitan",
    )
    assert not {c for c in refusals(doc) if c.startswith("torchtitan-gpt-oss")}


def test_solve_for_torchtitan_finds_an_eager_layout_without_pipeline_or_context_parallelism(
    tmp_path, capsys
):
    """`solve --export torchtitan --no-torch-compile` on 64 H100s: a feasible layout (exit 0) with pp 1 and cp 1,
    written as the 120b flavor, eager."""
    out = tmp_path / "job.toml"
    args = ["solve", "--model", "gpt-oss-120b", "--cluster", "h100-64", "--seqs", "512"]
    assert cli.main([*args, "--export", "torchtitan", "--no-torch-compile", "-o", str(out)]) == 0
    text = out.read_text()
    assert "pipeline_parallel_degree = 1\n" in text and "context_parallel_degree = 1\n" in text
    assert 'flavor = "120b"' in text and "[compile]\nenable = false\n" in text
    capsys.readouterr()


def test_a_refused_precision_is_named_before_the_degrees(capsys):
    """On 72 GB200s with 1,024 sequences only pipelined layouts divide the devices, but fp8 is what no layout can
    help: the funnel names the fp8 rule (exit 1), not the pipeline's."""
    args = ["solve", "--model", "gpt-oss-120b", "--cluster", "gb200-72", "--export", "torchtitan"]
    assert cli.main([*args, "--no-torch-compile", "--precision", "fp8"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        "no feasible layout: torchtitan cannot express the fp8 GEMMs of gpt-oss-120b"
    )
    assert last.endswith("(torchtitan-gpt-oss-fp8)")
