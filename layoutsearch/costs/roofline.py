"""The design notes' gather-volume objective (section 6): V(t) = V_W + V_X, the bf16 FSDP
weight gather 2DF/t plus the TP input gather 2 B_tok D t / N. The search tabulates it for
``--objective gather-volume`` (``search/tables.py``).

The book's roofline thresholds (critical intensity, TP and FSDP limits) are in
``tests/closed_forms.py``, for the reference cases only; the engine does not use them.
"""

from __future__ import annotations

from layoutsearch.core.arrays import FloatArray, IntArray


def gather_volumes_bytes(
    d_model: int,
    d_ff: int,
    batch_tokens: float,
    num_chips: int,
    tp: IntArray,
    bytes_per_element: int = 2,
) -> tuple[FloatArray, FloatArray]:
    """(V_W, V_X): FSDP weight-gather target 2DF/t and TP input-gather target 2 B_tok D t / N."""
    v_w = bytes_per_element * d_model * d_ff / tp
    v_x = bytes_per_element * batch_tokens * d_model * tp / num_chips
    return v_w, v_x
