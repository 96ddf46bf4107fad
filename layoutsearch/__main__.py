"""`python -m layoutsearch ...`: the command line."""

import sys

from layoutsearch._console import run

sys.exit(run())
