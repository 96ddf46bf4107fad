"""layoutsearch: proven-optimal parallel layouts for transformer training.

``import layoutsearch as ls; ls.solve(model="llama3-8b", cluster="h100-64", seqs=256)`` and
``ls.estimate(...)`` take the CLI's names (see ``layoutsearch.api``); they load on first use, so
importing a submodule does not import the whole engine.
"""

from layoutsearch._version import __version__

__all__ = ["__version__", "solve", "estimate", "problem"]


def __getattr__(name: str):
    if name in ("solve", "estimate", "problem"):
        from layoutsearch import api  # the engine loads on first use of the API (PEP 562)

        return getattr(api, name)
    raise AttributeError(f"module 'layoutsearch' has no attribute '{name}'")
