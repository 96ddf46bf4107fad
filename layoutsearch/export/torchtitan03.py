"""torchtitan 0.3.x: a Python module holding one ``config_registry`` entry (torchtitan reads no TOML any more).

torchtitan 0.3.0 (config/manager.py) loads a job with ``--module M --config F``: M is one of its
models or any importable module (``M.config_registry`` is tried first, then ``M`` itself), F a
function there returning a ``Trainer.Config``; further ``--section.key value`` arguments override
its fields (tyro). So the export is a module whose function ``layoutsearch_job`` builds the whole
job, launched with ``PYTHONPATH=<its folder> MODULE=<its name> CONFIG=layoutsearch_job ./run_train.sh``.

Mapping (checked against torchtitan 0.3.0: config/manager.py, config/configs.py, trainer.py,
models/llama3/__init__.py and config_registry.py, models/common, distributed/activation_checkpoint.py):

- Degrees, batch, pipeline and recompute: the same mapping as the 0.2 TOML target, taken from
  ``torchtitan.sections`` (one source): ``ParallelismConfig`` keeps the 0.2 field names, and the
  job is checked by the same ``torchtitan.check_config``. With pp > 1, ``training.disable_cuda_graphs``
  is set (0.3's ``Trainer.Config`` refuses CUDA graphs with pipeline parallelism).
- Recompute: ``activation_checkpoint`` is a config object in 0.3: none -> ``None``, full ->
  ``FullAC.Config()``, selective -> ``SelectiveAC.Config()`` (per-op SAC, as the 0.2 "op" option).
- ``COMPILE``, ``COMPILE_COMPONENTS``: ``CompileConfig(enable=..., components=...)``, as the 0.2 target's
  ``[compile]``.
- Model: 0.3 flavors are Python builders (``llama3_configs``), not argument tuples, so the module always
  builds the model from its own numbers (``MODEL``: dim, layers, heads, kv heads, the FFN width,
  vocab, rope theta, norm eps; ``ROPE``: the llama3 frequency scaling) with torchtitan's own llama3
  layer builder, and keeps torchtitan's llama3 callables (parallelize, pipeline, state-dict adapter)
  from ``model_registry``. The flavor label is torchtitan's flavor when the sizes match one.
- Not expressible here: mixture-of-experts models. torchtitan 0.3's deepseek_v3 and qwen3 are other
  config builders (MoE layer and expert-parallel configs) that this module does not write; the
  capability refuses them and names the torchtitan (0.2 TOML) target, which writes them with their
  expert degrees.
- Not decided: the ``PLACEHOLDERS`` constants at the top of the module (dump folder, tokenizer assets,
  dataset, checkpoint folder, steps, learning rate, warmup); ``layoutsearch_job`` refuses to build while
  any is still ``<set me: ...>``, so nothing falls back to torchtitan's test dataset or tokenizer.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from layoutsearch.export import torchtitan
from layoutsearch.export.context import (
    ExportContext,
    comment_block,
    header_lines,
    placeholder_note,
    set_me,
)
from layoutsearch.export.rank_order import TORCHTITAN_ORDERS, gpu_rank_lines

FUNCTION = "layoutsearch_job"
AC_CONFIGS = {"none": "None", "full": "FullAC.Config()", "selective": "SelectiveAC.Config()"}
ROPE_MAX_SEQ_LEN = 131072  # torchtitan 0.3 llama3 flavors' RoPE table length

# name -> (what, Python type the value must have once set)
PLACEHOLDERS = {
    "DUMP_FOLDER": ("output folder for logs and checkpoints", "str"),
    "HF_ASSETS_PATH": ("folder with the tokenizer (HF assets)", "str"),
    "DATASET": ("dataset name registered in torchtitan", "str"),
    "DATASET_PATH": ("dataset location", "str"),
    "CHECKPOINT_FOLDER": ("checkpoint folder under the dump folder", "str"),
    "STEPS": ("training steps", "int"),
    "LR": ("peak learning rate", "float"),
    "WARMUP_STEPS": ("warmup steps", "int"),
}


def model_values(ctx: ExportContext) -> dict:
    """MODEL: the numbers the module builds the llama3 model from."""
    m = ctx.model
    return {
        "dim": m.d_model,
        "n_layers": m.num_layers,
        "n_heads": m.num_heads,
        "n_kv_heads": m.num_kv_heads,
        "hidden_dim": m.d_ff,
        "vocab_size": m.vocab_size,
        "rope_theta": float(m.rope_theta),
        "norm_eps": float(m.norm_eps),
    }


def rope_values(ctx: ExportContext) -> dict:
    """ROPE: ComplexRoPE.Config scaling fields (llama3 scaling or none)."""
    r = ctx.model.rope_scaling
    if r is None:
        return {"scaling": "none"}
    return {
        "scaling": "llama",
        "scaling_factor": float(r.factor),
        "low_freq_factor": float(r.low_freq_factor),
        "high_freq_factor": float(r.high_freq_factor),
        "original_max_position_embeddings": int(r.original_max_position_embeddings),
    }


def job_values(ctx: ExportContext) -> dict[str, object]:
    """The module-level constants the engine decides (the checker reads them back)."""
    secs = torchtitan.sections(ctx)
    training = {
        k: secs["training"][k] for k in ("local_batch_size", "global_batch_size", "seq_len")
    }
    if ctx.layout.pp > 1:
        training["disable_cuda_graphs"] = True
    parallelism = dict(secs["parallelism"])
    if (
        ctx.layout.tp > 1 and not ctx.layout.sequence_parallel
    ):  # as costed: the norms' activations whole
        parallelism["enable_sequence_parallel"] = False
    return {
        "FLAVOR": torchtitan.flavor_for(ctx) or ctx.model_id,
        "MODEL": model_values(ctx),
        "ROPE": rope_values(ctx),
        "TRAINING": training,
        "PARALLELISM": parallelism,
        "ACTIVATION_CHECKPOINT": secs["activation_checkpoint"]["mode"],
        "COMPILE": secs["compile"]["enable"],
        "COMPILE_COMPONENTS": secs["compile"]["components"],
    }


def _literal(value) -> str:
    if isinstance(value, dict):
        return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in value.items()) + "}"
    return repr(value)


BODY = f'''

def _unset() -> list[str]:
    return [name for name in {tuple(PLACEHOLDERS)!r} if str(globals()[name]).startswith("<set me")]


def _model():
    """Llama3Model.Config from MODEL and ROPE, built by torchtitan's own llama3 flavor builders."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import (Llama3Model, _EMBEDDING_INIT, _NORM_INIT, _build_llama3_layers,
                                          _output_linear_init)

    m = MODEL
    rope = ComplexRoPE.Config(dim=m["dim"] // m["n_heads"], max_seq_len=max({ROPE_MAX_SEQ_LEN}, TRAINING["seq_len"]),
                              theta=m["rope_theta"], **ROPE)
    layers = _build_llama3_layers(n_layers=m["n_layers"], dim=m["dim"], n_heads=m["n_heads"],
                                  n_kv_heads=m["n_kv_heads"], hidden_dim=m["hidden_dim"], rope=rope,
                                  fuse_qkv=True, attn_backend=ATTENTION_BACKEND)
    for layer in layers:  # the builder leaves RMSNorm at its default eps
        layer.attention_norm.eps = layer.ffn_norm.eps = m["norm_eps"]
    return Llama3Model.Config(
        dim=m["dim"], vocab_size=m["vocab_size"], layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=m["vocab_size"], embedding_dim=m["dim"],
                                        param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape=m["dim"], eps=m["norm_eps"], param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features=m["dim"], out_features=m["vocab_size"],
                              param_init=_output_linear_init(m["dim"])))


def {FUNCTION}():
    """The layoutsearch layout as a torchtitan 0.3 Trainer.Config (--module THIS_MODULE --config {FUNCTION})."""
    import dataclasses

    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.llama3 import model_registry
    from torchtitan.trainer import Trainer

    if _unset():
        raise ValueError(f"set {{', '.join(_unset())}} at the top of {{__file__}} before launch "
                         f"(layoutsearch does not decide them)")
    spec = dataclasses.replace(model_registry("debugmodel", attn_backend=ATTENTION_BACKEND),
                               flavor=FLAVOR, model=_model())
    return Trainer.Config(
        model_spec=spec,
        hf_assets_path=HF_ASSETS_PATH,
        dump_folder=DUMP_FOLDER,
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=MODEL["vocab_size"])),
        optimizer=default_adamw(lr=LR),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=WARMUP_STEPS),
        training=TrainingConfig(steps=STEPS, **TRAINING),
        dataloader=HuggingFaceTextDataLoader.Config(dataset=DATASET, dataset_path=DATASET_PATH),
        parallelism=ParallelismConfig(**PARALLELISM),
        checkpoint=CheckpointManager.Config(folder=CHECKPOINT_FOLDER),
        activation_checkpoint={{"none": None, "full": FullAC.Config(),
                                "selective": SelectiveAC.Config()}}[ACTIVATION_CHECKPOINT],
        compile=CompileConfig(enable=COMPILE, components=COMPILE_COMPONENTS),
    )
'''


def _nodes(ctx: ExportContext) -> int:
    return math.prod(a.size for a in ctx.cluster.axes if a.kind in ("dcn", "scale_out")) or 1


def launch_lines(ctx: ExportContext) -> list[str]:
    nodes = _nodes(ctx)
    per_node = ctx.num_devices // nodes
    run = (
        f"PYTHONPATH=<folder of this file> MODULE=<this file's name without .py> CONFIG={FUNCTION}"
    )
    lines = [
        "Launch (torchtitan 0.3.x, from its repository: run_train.sh passes --module/--config to torchtitan.train; "
        "save this file under an importable name, e.g. layout.py):"
    ]
    if nodes == 1:
        lines.append(f"  {run} NGPU={per_node} ./run_train.sh")
    else:
        lines.append(
            f"  on each of the {nodes} nodes: PYTHONPATH=<folder of this file> torchrun --nnodes {nodes} "
            f"--nproc_per_node {per_node} --rdzv_backend c10d --rdzv_endpoint <host:port> -m torchtitan.train "
            f"--module <this file's name without .py> --config {FUNCTION}"
        )
    lines.append(
        "  any field can be overridden after it as --section.key value (e.g. --training.steps 100 "
        "--metrics.log_freq 10); check the parsed job with python -m torchtitan.config.manager --module "
        f"<name> --config {FUNCTION}"
    )
    return lines


def render(ctx: ExportContext) -> str:
    notes = header_lines(ctx)
    if torchtitan.flavor_for(ctx) is None:
        notes.append(
            f"'{ctx.model_id}' is not a torchtitan llama3 flavor: the module builds it from MODEL below."
        )
    notes += torchtitan.policy_notes(ctx, "SelectiveAC (per-op SAC)")
    m = ctx.model
    if m.attention_dropout or m.hidden_dropout:
        notes.append(
            f"dropout attention {m.attention_dropout:g} / hidden {m.hidden_dropout:g}: torchtitan's llama3 "
            f"has no dropout."
        )
    notes += launch_lines(ctx)
    notes += gpu_rank_lines(ctx, TORCHTITAN_ORDERS, "torchtitan")[1]
    notes.append(placeholder_note())
    text = comment_block(notes)
    docstring = (
        f"layoutsearch layout rank {ctx.record.get('rank', 1)} for {ctx.model_id} on {ctx.cluster.name}: "
        "a torchtitan 0.3 config_registry entry."
    )
    text += f"{docstring!r}\n\n"  # a Python literal: the names cannot close it
    text += "# PLACEHOLDER: layoutsearch does not decide these; replace each '<set me: ...>' (type in brackets).\n"
    for name, (what, kind) in PLACEHOLDERS.items():
        text += f"{name} = {set_me(what)!r}  # [{kind}]\n"
    text += "\n# Decided by layoutsearch (the mapping is in layoutsearch/export/torchtitan.py and torchtitan03.py).\n"
    text += "ATTENTION_BACKEND = 'flex'  # torchtitan 0.3's default for llama3\n"
    for name, value in job_values(ctx).items():
        text += f"{name} = {_literal(value)}\n"
    return text + BODY


# ----------------------------------------------------------------------------- checker
def read_constants(text: str) -> dict[str, Any]:
    """The module's top-level NAME = literal assignments (raises SyntaxError / ValueError)."""
    out = {}
    for node in ast.parse(text).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def check(text: str, ctx: ExportContext) -> list[str]:
    """The 0.2 target's rules (``torchtitan.check_config``) on the module's constants, and the model's numbers."""
    try:
        values = read_constants(text)
        functions = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    except SyntaxError as exc:
        return [f"not valid Python: {exc}"]
    missing = [
        n
        for n in (
            "FLAVOR",
            "MODEL",
            "ROPE",
            "TRAINING",
            "PARALLELISM",
            "ACTIVATION_CHECKPOINT",
            "COMPILE",
        )
        if n not in values
    ]
    if missing or FUNCTION not in functions:
        return [
            f"missing {', '.join(missing + ([] if FUNCTION in functions else [FUNCTION + '()']))}"
        ]
    mode = values["ACTIVATION_CHECKPOINT"]
    out = (
        []
        if mode in AC_CONFIGS
        else [f"ACTIVATION_CHECKPOINT '{mode}' is not one of {', '.join(AC_CONFIGS)}"]
    )
    out += torchtitan.check_config(
        {
            "parallelism": values["PARALLELISM"],
            "training": values["TRAINING"],
            "activation_checkpoint": {"mode": mode},
            "model": {"flavor": values["FLAVOR"]},
            "compile": {"enable": values["COMPILE"], "components": values["COMPILE_COMPONENTS"]},
        },
        ctx,
    )
    model, want = values["MODEL"], model_values(ctx)
    out += [
        f"MODEL {k} is {model.get(k)}, the model has {v}"
        for k, v in want.items()
        if model.get(k) != v
    ]
    lay = ctx.layout
    if lay.tp > 1 and values["PARALLELISM"].get("enable_sequence_parallel", True) != (
        lay.sequence_parallel
    ):
        out.append(
            f"PARALLELISM enable_sequence_parallel is not the layout's sequence_parallel ({lay.sequence_parallel})"
        )
    if values["ROPE"] != rope_values(ctx):
        out.append(f"ROPE {values['ROPE']} is not the model's rope scaling {rope_values(ctx)}")
    if values["PARALLELISM"].get("pipeline_parallel_degree", 1) > 1 and not values["TRAINING"].get(
        "disable_cuda_graphs"
    ):
        out.append(
            "pipeline parallelism needs training.disable_cuda_graphs (Trainer.Config refuses CUDA graphs with PP)"
        )
    return out
