"""layoutsearch: proven-optimal parallel layouts for transformer training."""

__version__ = "0.2.0"
