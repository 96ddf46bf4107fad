#!/usr/bin/env bash
# Install the training frameworks that tests/test_frameworks.py loads exported configs with (CPU only).
#
#   PYTHON=.venv/bin/python bash .ci/frameworks.sh     # then: .venv/bin/python -m pytest -m frameworks
#
# Into the current environment (PYTHON, default python3): torch 2.13.0+cpu (the +cpu label only
# exists on this machine's wheel disk, so pip can never substitute a CUDA build), megatron-core,
# deepspeed, torchtitan 0.2.2 and triton (torchtitan imports it at package import; it runs nothing on CPU).
# DeepSpeed's CPU accelerator compiles its shared-memory comm op on first use (about 3 minutes on
# 2 cores); it is built here, into the torch extensions cache, so the one-step training test does not.
#
# torchtitan 0.3.0 (config_registry modules instead of TOML; the torchtitan-0.3 export target) cannot
# share an environment with 0.2.2: it gets its own venv at TORCHTITAN03_VENV (default
# ~/.cache/layoutsearch/torchtitan03-venv, no system site packages) made from PYTHON's interpreter
# (3.11: the local torch wheel is cp311), with the same torch 2.13.0+cpu, torchtitan 0.3.0 and its
# dependencies, and triton (its llama3 config_registry imports it).
#
# Megatron-Bridge 0.3.1 declares Transformer Engine (CUDA builds only), mamba-ssm and causal-conv1d, and its
# package __init__ imports Transformer Engine, so it is installed with --no-deps into its own venv at
# BRIDGE_VENV (default ~/.cache/layoutsearch/bridge-venv) beside torch 2.13.0+cpu, megatron-core 0.16.1,
# hydra-core and omegaconf: what the two Bridge modules the test loads from their files import
# (training/utils/omegaconf_utils.py, models/transformer_config.py; docs/exports.md says why).
#
# MaxText needs Python >= 3.12: when python3.12 is found it gets its own venv at
# MAXTEXT_VENV (default ~/.cache/layoutsearch/maxtext-venv), which the tests find by itself;
# maxtext 0.2.5 declares its dependencies only as GPU/TPU extras, so the CPU set that its
# pyconfig, device-mesh, model (create_model) and train entry point (one synthetic-data step) import
# is listed here.
# Measured on the 2-core machine (cached wheels): about 40 s for the first group, 50 s for the
# torchtitan 0.3 venv, about 3 minutes for the Bridge venv (torch unpacking, on the 2 cores shared with other
# jobs), 60 s for MaxText before its model/train packages were added (tokamax and the
# rest: about 30 s more), 3 minutes for the DeepSpeed op; a rerun with everything present, 45 s (and 30 s for the Bridge venv).
set -euo pipefail
PYTHON=${PYTHON:-python3}
MAXTEXT_VENV=${MAXTEXT_VENV:-$HOME/.cache/layoutsearch/maxtext-venv}
TORCHTITAN03_VENV=${TORCHTITAN03_VENV:-$HOME/.cache/layoutsearch/torchtitan03-venv}
BRIDGE_VENV=${BRIDGE_VENV:-$HOME/.cache/layoutsearch/bridge-venv}

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0+cpu" >"$constraints"

"$PYTHON" -m pip install -q "torch==2.13.0+cpu"
"$PYTHON" -m pip install -q -c "$constraints" \
    megatron-core==0.16.1 deepspeed==0.19.8 torchtitan==0.2.2 triton==3.9.0
"$PYTHON" -c "import torch; assert torch.version.cuda is None, 'a CUDA torch was installed'; print('torch', torch.__version__, 'cpu')"
DS_ACCELERATOR=cpu "$PYTHON" -c "from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder('ShareMemCommBuilder').load()" >/dev/null

if [ ! -x "$TORCHTITAN03_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$TORCHTITAN03_VENV"
fi
"$TORCHTITAN03_VENV/bin/python" -m pip install -q -c "$constraints" "torch==2.13.0+cpu" torchtitan==0.3.0 triton==3.9.0
"$TORCHTITAN03_VENV/bin/python" -c "import torch, torchtitan.models.llama3.config_registry
assert torch.version.cuda is None, 'a CUDA torch was installed'" >/dev/null 2>&1 \
    || { echo "torchtitan 0.3 venv at $TORCHTITAN03_VENV does not import torchtitan.models.llama3.config_registry" >&2; exit 1; }
echo "torchtitan 0.3 interpreter: $TORCHTITAN03_VENV/bin/python"

if [ ! -x "$BRIDGE_VENV/bin/python" ]; then
    "$PYTHON" -m venv "$BRIDGE_VENV"
fi
"$BRIDGE_VENV/bin/python" -m pip install -q -c "$constraints" "torch==2.13.0+cpu" megatron-core==0.16.1 \
    hydra-core==1.3.2 omegaconf==2.3.1
"$BRIDGE_VENV/bin/python" -m pip install -q --no-deps megatron-bridge==0.3.1
"$BRIDGE_VENV/bin/python" -c "import importlib.util, torch, hydra, omegaconf, megatron.core
assert torch.version.cuda is None, 'a CUDA torch was installed'
assert importlib.util.find_spec('megatron.bridge') is not None" >/dev/null 2>&1 \
    || { echo "Megatron-Bridge venv at $BRIDGE_VENV lacks torch (CPU), hydra, omegaconf, megatron.core or megatron.bridge" >&2; exit 1; }
echo "Megatron-Bridge interpreter: $BRIDGE_VENV/bin/python"

PY312=""
for candidate in python3.12 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[23]*/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
        PY312=$candidate
        break
    fi
done
if [ -z "$PY312" ]; then
    echo "python3.12 not found: MaxText tests will be skipped" >&2
    exit 0
fi
if [ ! -x "$MAXTEXT_VENV/bin/python" ]; then
    "$PY312" -m venv "$MAXTEXT_VENV"
fi
"$MAXTEXT_VENV/bin/python" -m pip install -q \
    maxtext==0.2.5 jax==0.12.0.1 jaxlib==0.12.0.1 flax==0.12.12 omegaconf==2.4.0 pydantic==2.14.4 \
    absl-py==2.5.1 packaging pathwaysutils==0.1.13 jinja2 huggingface_hub==2.4.0 transformers==5.24.0 \
    grain==0.2.18 drjax==0.2.1 jaxtyping==0.3.11 aqtp==0.9.0 qwix==0.1.8 pillow==13.0.0 pyyaml \
    tokamax==0.0.17 tiktoken==0.14.0 sentencepiece==0.2.3 sympy==1.14.0 ml-collections==1.1.0
"$MAXTEXT_VENV/bin/python" -c "import maxtext.configs.pyconfig, maxtext.utils.model_creation_utils, maxtext.trainers.pre_train.train" >/dev/null 2>&1 \
    || { echo "MaxText venv at $MAXTEXT_VENV does not import maxtext's pyconfig, model and train modules" >&2; exit 1; }
echo "MaxText interpreter: $MAXTEXT_VENV/bin/python"
