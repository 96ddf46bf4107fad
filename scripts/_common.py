"""Paths shared by the generators of the committed results/ files.

Each generator is run from a checkout as ``python scripts/NAME.py``; none of them ships in the
wheel. The checkout's own package comes first on ``sys.path`` (ahead of an installed copy), so
the results describe the code beside them. Input data is read from the repository only
(``tests/data/``), never from outside it.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
DATA = REPO / "tests" / "data"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def data_file(name: str) -> Path:
    """A file of tests/data/, or FileNotFoundError naming the path it looked for."""
    path = DATA / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: the repository's reference data (tests/data/) is incomplete"
        )
    return path


def table_head(*columns: str) -> list[str]:
    """A Markdown table's header and separator lines."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def llama_model(shape: dict) -> dict:
    """A run record's model block for a Llama 3 shape (``shape``: layers, d_model, d_ff, heads): gated MLP, 8 KV
    heads of 128, the 128,256-token vocabulary, untied embeddings."""
    return {
        **shape,
        "mlp": "gated",
        "num_kv_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "tied_embeddings": False,
    }


def measured_throughput(tokens_per_s_per_device: float, memory_gib: float | None = None) -> dict:
    """A run record's measured block holding a throughput (and the printed memory, where there is one)."""
    return {
        "tokens_per_s_per_device": tokens_per_s_per_device,
        "step_time_s": None,
        "mfu": None,
        "mfu_convention": None,
        "peak_tflops_used": None,
        "memory_gib_per_device": memory_gib,
        "oom": False,
    }
