"""The ideal framework: everything that can overlap does, TP included (the bound the others
approach), with fp8 activations stored the most compact published way (the DeepSeek-V3 report's,
costs.memory.fp8_storage). A profile for the cost model only: no export target writes it."""

from layoutsearch.core.specs import FP8_RECIPES, Recompute
from layoutsearch.frameworks.declaration import Profile

EXPORTER = None

PROFILE = Profile(
    name="ideal",
    tp_overlap=("gpu", "tpu"),
    tp_backward_async=True,
    fp8_param_gather=FP8_RECIPES,
    fp8_activations="deepseek_v3",
    recompute_policies=tuple(r.value for r in Recompute),
    vendor_attention=True,
    ep_overlap=True,
    ep_node_dedup=True,
    cp_flavours=("ring", "allgather", "a2a", "a2a+ring"),
)

CAPABILITIES = None
