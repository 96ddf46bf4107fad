"""The package version (one place: pyproject reads it, ``layoutsearch.__version__`` and ``--version`` print it)."""

__version__ = "0.2.0"
