"""torchtitan 0.3.x (export target ``torchtitan-0.3``: a Python module with one ``config_registry``
entry, since 0.3 reads no TOML).

The same framework and overlap profile as ``torchtitan``, and the same limits under this target's
rule codes, except that the 0.3 export writes llama3 models only (0.3's MoE models are other config
builders) in bf16.
"""

from layoutsearch.frameworks import torchtitan

EXPORTER = "layoutsearch.export.torchtitan03"

PROFILE = torchtitan.PROFILE

CAPABILITIES = torchtitan.capabilities("torchtitan-0.3")
