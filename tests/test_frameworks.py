"""Exported configs loaded by the training frameworks' own code (CPU only; install with .ci/frameworks.sh).

Each test skips cleanly when its framework is not installed. MaxText needs Python >= 3.12 and
JAX, so it runs in its own interpreter: LAYOUTSEARCH_MAXTEXT_PYTHON, or the venv that
.ci/frameworks.sh builds under ~/.cache/layoutsearch/maxtext-venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from layoutsearch.export import export_document
from layoutsearch.export.megatron import parse_args
from layoutsearch.core.specs import Layout

from test_export import CP, FSDP_TP, HSDP, solve_doc

pytestmark = pytest.mark.frameworks

INTERLEAVED = solve_doc("llama3-8b", "h100-64", 256, 4096,
                        Layout(fsdp=2, tp=8, pp=4, virtual_stages=2, num_microbatches=8, schedule="interleaved"))
KV_REPLICATED = solve_doc("llama70b", "h100-64", 256, 4096, Layout(fsdp=4, tp=16, recompute="full"))
ZERO1 = solve_doc("debug", "h100-16", 64, 1024, Layout(fsdp=16, zero_stage=1, num_microbatches=2))
PIPE_1F1B = solve_doc("llama3-8b", "h100-64", 256, 4096, Layout(fsdp=1, dp=2, tp=8, pp=4, num_microbatches=8,
                                                                 zero_stage=1))


# ----------------------------------------------------------------------------- Megatron (megatron-core)
def megatron_config(doc: dict):
    """TransformerConfig (which validates heads, groups, recompute, pipeline) from the exported flags."""
    torch = pytest.importorskip("torch")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    a = parse_args(export_document(doc, "megatron"))
    layers, pp = int(a["--num-layers"]), int(a["--pipeline-model-parallel-size"])
    lpvs = int(a.get("--num-layers-per-virtual-pipeline-stage", 0))
    return tc.TransformerConfig(
        num_layers=layers, hidden_size=int(a["--hidden-size"]), num_attention_heads=int(a["--num-attention-heads"]),
        num_query_groups=int(a.get("--num-query-groups", a["--num-attention-heads"])),
        ffn_hidden_size=int(a["--ffn-hidden-size"]), kv_channels=int(a["--kv-channels"]),
        tensor_model_parallel_size=int(a["--tensor-model-parallel-size"]), pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=layers // pp // lpvs if lpvs else None,
        context_parallel_size=int(a["--context-parallel-size"]), sequence_parallel="--sequence-parallel" in a,
        recompute_granularity=a.get("--recompute-granularity"), recompute_method=a.get("--recompute-method"),
        recompute_num_layers=int(a["--recompute-num-layers"]) if "--recompute-num-layers" in a else None,
        gated_linear_unit="--swiglu" in a, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16 if pp > 1 else None), a


@pytest.mark.parametrize("doc", [FSDP_TP, CP, HSDP, INTERLEAVED, KV_REPLICATED, ZERO1], ids=[
    "fsdp_tp", "cp", "hsdp", "interleaved", "kv_replicated", "zero1"])
def test_megatron_core_accepts_exported_sizes(doc):
    """megatron-core's TransformerConfig and microbatch calculator accept the sizes and give the layout's K."""
    calc = pytest.importorskip("megatron.core.num_microbatches_calculator")
    cfg, a = megatron_config(doc)
    lay = doc["layouts"][0]
    world = doc["problem"]["num_devices"]
    dp = world // (cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size * cfg.context_parallel_size)
    counter = calc.ConstantNumMicroBatchesCalculator(int(a["--global-batch-size"]), int(a["--micro-batch-size"]),
                                                     dp, False, 0)
    assert counter.get() == lay["num_microbatches"]
    assert cfg.num_query_groups == int(a.get("--num-query-groups", a["--num-attention-heads"]))


def test_megatron_core_rejects_a_bad_tp():
    """The same path refuses a TP that does not divide the heads (the check is real)."""
    pytest.importorskip("megatron.core")
    text = export_document(FSDP_TP, "megatron").replace("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 3")
    tc = pytest.importorskip("megatron.core.transformer.transformer_config")
    a = parse_args(text)
    with pytest.raises(ValueError, match="must be a multiple of"):
        tc.TransformerConfig(num_layers=32, hidden_size=4096, num_attention_heads=int(a["--num-attention-heads"]),
                             tensor_model_parallel_size=int(a["--tensor-model-parallel-size"]))


# ----------------------------------------------------------------------------- DeepSpeed
def deepspeed_config(cfg: dict, dp_world: int):
    """DeepSpeedConfig with a given data-parallel world (no process group needed)."""
    dsc = pytest.importorskip("deepspeed.runtime.config")

    class Mpu:
        def get_data_parallel_world_size(self) -> int:
            return dp_world

    original = dsc.dist.get_rank
    dsc.dist.get_rank = lambda *args, **kwargs: 0
    try:
        return dsc.DeepSpeedConfig(cfg, mpu=Mpu())
    finally:
        dsc.dist.get_rank = original


@pytest.mark.parametrize("doc", [FSDP_TP, ZERO1, PIPE_1F1B], ids=["fsdp_tp", "zero1", "pipeline_1f1b"])
def test_deepspeed_config_batch_assertion(doc):
    """DeepSpeedConfig accepts the JSON (with its _layoutsearch key) for DP world = dp x fsdp."""
    cfg = json.loads(export_document(doc, "deepspeed"))
    lay = doc["layouts"][0]
    dp_world = lay["degrees"]["dp"] * lay["degrees"]["fsdp"]
    ds = deepspeed_config(cfg, dp_world)
    assert (ds.train_batch_size, ds.gradient_accumulation_steps) == (doc["problem"]["global_batch_seqs"],
                                                                      lay["num_microbatches"])
    assert ds.zero_optimization_stage == cfg["zero_optimization"]["stage"]
    with pytest.raises(AssertionError, match="Check batch related parameters"):
        deepspeed_config(cfg, dp_world * 2)


# ----------------------------------------------------------------------------- torchtitan
@pytest.mark.parametrize("doc", [FSDP_TP, CP, HSDP, INTERLEAVED], ids=["fsdp_tp", "cp", "hsdp", "interleaved"])
def test_torchtitan_config_manager_and_parallel_dims(doc, tmp_path):
    """torchtitan's ConfigManager loads the TOML and ParallelDims validates the degrees against the world."""
    manager = pytest.importorskip("torchtitan.config.manager")
    pdims = pytest.importorskip("torchtitan.distributed.parallel_dims")
    path = tmp_path / "job.toml"
    path.write_text(export_document(doc, "torchtitan"))
    job = manager.ConfigManager().parse_args([f"--job.config_file={path}"])
    p = job.parallelism
    world = doc["problem"]["num_devices"]
    dims = pdims.ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                              cp=p.context_parallel_degree, tp=p.tensor_parallel_degree,
                              pp=p.pipeline_parallel_degree, ep=1, etp=1, world_size=world)
    assert job.training.seq_len % dims.seq_len_divisor == 0
    batch_degree = dims.dp_replicate * dims.dp_shard
    assert job.training.global_batch_size % (job.training.local_batch_size * batch_degree) == 0
    with pytest.raises(AssertionError, match="Invalid parallel dims"):
        pdims.ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                           cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                           ep=1, etp=1, world_size=world * 2)


def test_torchtitan_pipeline_split_is_even():
    """With first/last_stage_less_layers = 0, torchtitan's split gives each virtual stage L/(pp v) layers."""
    pipe = pytest.importorskip("torchtitan.distributed.pipeline_parallel")
    import tomllib

    par = tomllib.loads(export_document(INTERLEAVED, "torchtitan"))["parallelism"]
    stages = 32 // par["pipeline_parallel_layers_per_stage"]
    parts = pipe.generate_llm_fqn_per_model_part(stages, 32, par["pipeline_parallel_first_stage_less_layers"],
                                                 par["pipeline_parallel_last_stage_less_layers"])
    assert [sum(name.startswith("layers.") for name in part) for part in parts] == [4] * 8
    assert pipe.get_schedule_class(par["pipeline_parallel_schedule"]).__name__ == "ScheduleInterleaved1F1B"


def test_torchtitan_flavors_match_the_table_and_custom_flavors_build():
    """layoutsearch's copy of the llama3 flavors matches torchtitan; a custom flavor builds the model's widths."""
    torch = pytest.importorskip("torch")
    llama3 = pytest.importorskip("torchtitan.models.llama3")
    from layoutsearch.export import context_for, torchtitan

    for name, (dim, layers, heads, kv, vocab, mult, multiple_of) in torchtitan.LLAMA3_FLAVORS.items():
        args = llama3.llama3_args[name]
        assert (args.dim, args.n_layers, args.n_heads, args.n_kv_heads or args.n_heads, args.vocab_size,
                args.ffn_dim_multiplier, args.multiple_of) == (dim, layers, heads, kv, vocab, mult, multiple_of)
    ctx = context_for(HSDP, "torchtitan")
    args = eval(torchtitan.custom_flavor_args(ctx), {"TransformerModelArgs": llama3.TransformerModelArgs})  # noqa: S307
    with torch.device("meta"):
        model = llama3.Transformer(args)
    block = model.layers["0"]
    assert tuple(block.feed_forward.w1.weight.shape) == (ctx.model.d_ff, ctx.model.d_model)
    assert tuple(block.attention.wk.weight.shape) == (ctx.model.num_kv_heads * ctx.model.head_dim, ctx.model.d_model)


# ----------------------------------------------------------------------------- MaxText (separate interpreter)
MAXTEXT_LOADER = textwrap.dedent("""
    import json, os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    from maxtext.configs import pyconfig
    from maxtext.utils import maxtext_utils
    out = []
    for path in sys.argv[1:]:
        try:
            cfg = pyconfig.initialize(["", path, "hardware=cpu", "skip_jax_distributed_system=true",
                                       "run_name=layoutsearch-test", "enable_checkpointing=false"])
            mesh = maxtext_utils.create_device_mesh(cfg)
            out.append({"mesh": dict(zip(cfg.mesh_axes, mesh.shape)), "global": cfg.global_batch_size_to_train_on,
                        "accumulation": cfg.gradient_accumulation_steps, "remat": cfg.remat_policy})
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    print("RESULT " + json.dumps(out))
""")


def maxtext_python() -> str:
    path = os.environ.get("LAYOUTSEARCH_MAXTEXT_PYTHON") or str(
        Path.home() / ".cache" / "layoutsearch" / "maxtext-venv" / "bin" / "python")
    if not Path(path).is_file():
        pytest.skip(f"no MaxText interpreter at {path} (run .ci/frameworks.sh on a machine with python3.12)")
    return path


def test_maxtext_pyconfig_and_mesh(tmp_path):
    """MaxText's pyconfig loads each override and builds its device mesh on 8 CPU devices."""
    python = maxtext_python()
    cases = {
        "fsdp_tp": (Layout(fsdp=4, tp=2, num_microbatches=2, recompute="selective"), 32, 1024),
        "gpipe": (Layout(fsdp=4, pp=2, num_microbatches=4, schedule="gpipe", recompute="full"), 32, 1024),
        "cp": (Layout(fsdp=4, cp=2), 16, 1024),
        "zero1": (Layout(fsdp=8, zero_stage=1, num_microbatches=2), 32, 512),
    }
    paths, docs = [], []
    for name, (layout, batch, seq) in cases.items():
        doc = solve_doc("debug", "v5p-8", batch, seq, layout)
        path = tmp_path / f"{name}.yml"
        path.write_text(export_document(doc, "maxtext"))
        paths.append(str(path))
        docs.append(doc)
    run = subprocess.run([python, "-c", MAXTEXT_LOADER, *paths], capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, run.stderr[-2000:]
    for doc, result, (name, (layout, batch, _)) in zip(docs, json.loads(lines[0][7:]), cases.items()):
        assert "error" not in result, f"{name}: {result}"
        mesh = result["mesh"]
        assert (mesh["fsdp"] * mesh["data"], mesh["tensor"], mesh["stage"], mesh["context"]) == (
            layout.fsdp, layout.tp, layout.pp, layout.cp), name
        assert result["global"] == batch, name


# ----------------------------------------------------------------------------- the main job, end to end
def _main_job_export(target: str, tmp_path) -> tuple[dict, str]:
    """`layoutsearch solve --model llama70b --cluster v5p-8192 --export TARGET -o FILE`: (document, file text)."""
    from typer.testing import CliRunner

    from layoutsearch.cli import app

    out = tmp_path / f"main-job.{target}"
    r = CliRunner().invoke(app, ["solve", "--model", "llama70b", "--cluster", "v5p-8192", "--top", "1",
                                 "--export", target, "-o", str(out), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout), out.read_text()


def test_main_job_export_accepted_by_megatron_core(tmp_path):
    calc = pytest.importorskip("megatron.core.num_microbatches_calculator")
    doc, text = _main_job_export("megatron", tmp_path)
    assert text == export_document(doc, "megatron")
    cfg, a = megatron_config(doc)
    dp = 8192 // (cfg.tensor_model_parallel_size * cfg.pipeline_model_parallel_size * cfg.context_parallel_size)
    counter = calc.ConstantNumMicroBatchesCalculator(int(a["--global-batch-size"]), int(a["--micro-batch-size"]),
                                                     dp, False, 0)
    assert counter.get() == doc["layouts"][0]["num_microbatches"]


def test_main_job_export_accepted_by_torchtitan(tmp_path):
    manager = pytest.importorskip("torchtitan.config.manager")
    pdims = pytest.importorskip("torchtitan.distributed.parallel_dims")
    doc, text = _main_job_export("torchtitan", tmp_path)
    path = tmp_path / "main.toml"
    path.write_text(text)
    p = manager.ConfigManager().parse_args([f"--job.config_file={path}"]).parallelism
    pdims.ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                       cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                       ep=1, etp=1, world_size=8192)


def test_main_job_export_accepted_by_deepspeed(tmp_path):
    doc, text = _main_job_export("deepspeed", tmp_path)
    lay = doc["layouts"][0]
    ds = deepspeed_config(json.loads(text), lay["degrees"]["dp"] * lay["degrees"]["fsdp"])
    assert ds.train_batch_size == 1024
