"""How far a measured step time may be from the predicted one: a band per class of prediction.

``uncertainty_band(kind, moe)`` returns (low, high) such that the measured step time lay within
[predicted x (1 + low), predicted x (1 + high)] for 80% of the validation's records of that
accelerator kind, dense or mixture-of-experts. It reads two files beside this module, which the
validation writes (each file's header names the command and the input): ``uncertainty.yaml``
(dense models: ``python scripts/validation.py``, from tests/data/runs_dev.yaml) and
``uncertainty_moe.yaml`` (MoE models: ``python scripts/validation.py --moe``, from
tests/data/runs_moe_dev.yaml; a MoE prediction without a band there takes the dense one). Each:

- ``bands``: kind (``gpu``, ``tpu``) -> [low, high]; ``default``: [low, high] over all records
  (used for a kind without a band);
- ``uncalibrated`` (dense file only): the same keys over the errors of parts whose compute fractions are
  borrowed (catalogue ``calibration.compute_fractions: borrowed``), measured by leaving one accelerator
  family out (``validation.uncalibrated``);
- ``quantiles``: per kind and ``all``, p10, p50, p90 and the count of the signed error
  ``predicted step time / measured step time - 1`` (+ = the engine predicts a slower step) over
  the evaluated records, each predicted out of sample (its source left out of the calibration).
  [low, high] = [1 / (1 + p90) - 1, 1 / (1 + p10) - 1] (``band_of``). The same error is measured
  tokens/s / predicted tokens/s - 1, so [p10, p90] is the band of the throughput.

The dense file's ``memory`` block holds the memory model's measured error: ``upper`` (u) is the
upper quantile of measured / predicted peak memory - 1 over the development records that report a
measured peak (``validation.stats.upper_memory_error``), with the rule, the count, the range and
the records; ``memory_error_upper()`` returns it (the ranking's headroom risk:
``search.ranking.headroom_kib``).

Imports yaml and pathlib only: every layer (search, report, validation) may use it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

PATH = Path(__file__).with_name("uncertainty.yaml")
MOE_PATH = Path(__file__).with_name("uncertainty_moe.yaml")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML has it
# No file, an unreadable one, or no usable band in it: a wide symmetric band (about the p90
# |error| of the development set's validation).
FALLBACK_BAND = (-0.25, 0.25)
# No usable memory block: about the largest underestimate of a measured peak in the development
# set (+15.8%, a BLOOM run on A100).
FALLBACK_MEMORY_ERROR = 0.16


def band_of(p10: float, p90: float) -> tuple[float, float]:
    """(low, high) relative to the predicted step time from the 10th and 90th percentiles of the
    error (predicted / measured - 1): the measured step is predicted / (1 + error)."""
    return 1.0 / (1.0 + p90) - 1.0, 1.0 / (1.0 + p10) - 1.0


@lru_cache(maxsize=4)
def _read(path: Path = PATH) -> dict:
    """The file's mapping, or {} when it is missing or malformed."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def band_data(moe: bool = False) -> dict:
    """The dense (or, with ``moe``, the MoE) band file's mapping; {} when missing or malformed."""
    return _read(MOE_PATH if moe else PATH)


def _band(value: object) -> tuple[float, float] | None:
    """A [low, high] pair of numbers with -1 < low <= high; else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        return None
    low, high = float(value[0]), float(value[1])
    return (low, high) if -1.0 < low <= high else None


def uncertainty_band(
    accelerator_kind: str, moe: bool = False, calibrated: bool = True
) -> tuple[float, float]:
    """(low, high), relative to the predicted step time: the measured step time lay within
    predicted x (1 + low) .. predicted x (1 + high) for 80% of the validation records of this
    accelerator kind ("gpu" or "tpu"; another kind, or one without a band, uses the file's
    ``default``), dense or, with ``moe``, mixture-of-experts (``MOE_PATH``; without a usable MoE
    band, the dense one). No usable file: ``FALLBACK_BAND``. A biased engine has a one-sided band.
    An uncalibrated part (``calibrated`` False) gets ``select_band``'s widening."""
    return select_band(_read(PATH), _read(MOE_PATH) if moe else None, accelerator_kind, calibrated)


def select_band(
    dense: dict, moe: dict | None, accelerator_kind: str, calibrated: bool = True
) -> tuple[float, float]:
    """``uncertainty_band`` from the files' mappings (``moe`` None for a dense model). Uncalibrated:
    the union (lowest low, highest high) of that band and the dense file's ``uncalibrated`` band of
    the kind (else its ``uncalibrated`` default, else ``FALLBACK_BAND``), so never narrower than a
    calibrated part's, and for MoE the wider of the MoE and the uncalibrated band."""
    found = _kind_band(moe, accelerator_kind) if moe is not None else None
    band = found or _kind_band(dense, accelerator_kind) or FALLBACK_BAND
    if calibrated:
        return band
    section = dense.get("uncalibrated")
    wide = _kind_band(section if isinstance(section, dict) else {}, accelerator_kind)
    wide = wide or FALLBACK_BAND
    return min(band[0], wide[0]), max(band[1], wide[1])


def _kind_band(data: dict, accelerator_kind: str) -> tuple[float, float] | None:
    """The file's band of the kind, else its ``default``, else None."""
    bands = data.get("bands")
    if not isinstance(bands, dict):
        bands = {}
    return _band(bands.get(accelerator_kind)) or _band(data.get("default"))


def memory_error_upper() -> float:
    """u: a layout whose predicted peak memory x (1 + u) exceeds the usable memory is within the
    memory model's measured error of it (the dense file's ``memory.upper``, see ``memory_upper``)."""
    return memory_upper(_read(PATH))


def memory_error_lower() -> float:
    """The most the memory model over-predicts a measured peak, measured / predicted - 1 at its least
    (the dense file's ``memory.min``, below 0; ``-FALLBACK_MEMORY_ERROR`` where the file has none): a layout
    whose predicted peak x (1 + this) fits the usable memory may run although predicted not to."""
    block = _read(PATH).get("memory")
    value = block.get("min") if isinstance(block, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and -1.0 < value <= 0.0:
        return float(value)
    return -FALLBACK_MEMORY_ERROR


def largest_peak_that_may_run(usable_bytes: float) -> float:
    """The largest predicted peak that may still run in ``usable_bytes``: one the memory model over-predicts
    by as much as it has over-predicted a measured peak (``memory_error_lower``: usable / (1 - 0.137), 1.16x)."""
    return usable_bytes / (1.0 + memory_error_lower())


def memory_upper(data: dict) -> float:
    """The mapping's ``memory.upper`` when it is a number in [0, 1), else ``FALLBACK_MEMORY_ERROR``."""
    block = data.get("memory")
    value = block.get("upper") if isinstance(block, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0:
        return float(value)
    return FALLBACK_MEMORY_ERROR
