"""`python -m layoutsearch ...`: the command line."""

import sys

from layoutsearch.cli import run

sys.exit(run())
