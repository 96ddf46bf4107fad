"""Units: SI inside the engine (bytes, seconds, FLOPs); these constants convert at the boundaries.

Decimal prefixes for bytes unless the name says binary (``GIB``, ``MIB``, ``KIB``), as in
docs/cost_model.md "Units and names". Catalogue keys carry the human unit (``hbm_gib: 95``); ``catalogue.py``
multiplies once when it reads them.
"""

from __future__ import annotations

MB = 1e6
GB = 1e9
TB = 1e12
KIB = 1024
MIB = 2**20
GIB = 2**30
TERA = 1e12  # TFLOP/s -> FLOP/s
MICRO = 1e-6  # us -> s
MILLI = 1e-3  # ms -> s
SECONDS_PER_DAY = 86400.0

# Upper bounds checked before anything large is built (issue: "every input handled").
MAX_DEVICES = 1_048_576  # 2^20 devices in one cluster, all slices together
MAX_SEQ_LEN = 2**21
MAX_GLOBAL_BATCH_SEQS = 2**24
MAX_MODEL_DIM = 2**24  # layers, widths, heads, vocabulary: each at most this
MAX_MODEL_PARAMS = 2**53  # parameter counts (and their byte counts in float64) stay exact
MAX_TRAINING_TOKENS = 1e18
MAX_HBM_BYTES = 2.0**42  # 4 TiB per device
MAX_TIME_LIMIT_S = 86_400.0
MAX_MICROBATCHES = MAX_GLOBAL_BATCH_SEQS
MAX_VIRTUAL_STAGES_RECORD = 1024
