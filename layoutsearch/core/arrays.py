"""Number-or-array types for the cost functions.

One formula serves one layout (Python numbers) and a table of candidate rows at once (numpy arrays,
one value per row, evaluated elementwise), so its arguments and result are either.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

IntArray: TypeAlias = int | np.ndarray  # an integer, or one per candidate row
FloatArray: TypeAlias = float | np.ndarray  # a real number (an int too), or one per candidate row
BoolArray: TypeAlias = bool | np.ndarray  # a flag, or one per candidate row
