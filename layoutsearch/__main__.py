"""`python -m layoutsearch ...`: the command line."""

import sys

from layoutsearch.cli import main

sys.exit(main())
