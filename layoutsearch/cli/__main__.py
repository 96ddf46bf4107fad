"""`python -m layoutsearch.cli ...`: the command line."""

import sys

from layoutsearch.cli import main

sys.exit(main())
