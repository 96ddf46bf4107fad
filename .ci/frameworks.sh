#!/usr/bin/env bash
# Install the training frameworks that tests/test_frameworks.py loads exported configs with (CPU only).
#
#   PYTHON=.venv/bin/python bash .ci/frameworks.sh     # then: .venv/bin/python -m pytest -m frameworks
#
# Into the current environment (PYTHON, default python3): torch 2.13.0+cpu (the +cpu label only
# exists on this machine's wheel disk, so pip can never substitute a CUDA build), megatron-core,
# deepspeed, torchtitan and triton (torchtitan imports it at package import; it runs nothing on CPU).
# MaxText needs Python >= 3.12: when python3.12 is found it gets its own venv at
# MAXTEXT_VENV (default ~/.cache/layoutsearch/maxtext-venv), which the tests find by itself;
# maxtext 0.2.5 declares its dependencies only as GPU/TPU extras, so the CPU set that its
# pyconfig and device-mesh code import is listed here.
# Measured on the 2-core machine: about 40 s for the first group, 60 s for MaxText (cached wheels).
set -euo pipefail
PYTHON=${PYTHON:-python3}
MAXTEXT_VENV=${MAXTEXT_VENV:-$HOME/.cache/layoutsearch/maxtext-venv}

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0+cpu" >"$constraints"

"$PYTHON" -m pip install -q "torch==2.13.0+cpu"
"$PYTHON" -m pip install -q -c "$constraints" \
    megatron-core==0.16.1 deepspeed==0.19.8 torchtitan==0.2.2 triton==3.9.0
"$PYTHON" -c "import torch; assert torch.version.cuda is None, 'a CUDA torch was installed'; print('torch', torch.__version__, 'cpu')"

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
    grain==0.2.18 drjax==0.2.1 jaxtyping==0.3.11 aqtp==0.9.0 qwix==0.1.8 pillow==13.0.0 pyyaml
"$MAXTEXT_VENV/bin/python" -c "import maxtext.configs.pyconfig" >/dev/null 2>&1 \
    || { echo "MaxText venv at $MAXTEXT_VENV does not import maxtext.configs.pyconfig" >&2; exit 1; }
echo "MaxText interpreter: $MAXTEXT_VENV/bin/python"
