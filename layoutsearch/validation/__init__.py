"""Validation against measured runs (validate, calibrate, leave-one-source-out, uncertainty bands).

``uncertainty_band(accelerator_kind) -> (low, high)`` is ``layoutsearch.core.uncertainty``'s (the
data file it reads is written by the validation, ``validation.uncertainty.write_uncertainty``);
importing this package imports nothing else.
"""

from layoutsearch.core.uncertainty import uncertainty_band

__all__ = ["uncertainty_band"]
