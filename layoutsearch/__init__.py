"""layoutsearch: proven-optimal parallel layouts for transformer training.

``import layoutsearch as ls; ls.solve(model="llama3-8b", cluster="h100-64", seqs=256)``,
``ls.explain(...)``, ``ls.estimate(...)`` and ``ls.problem(...)`` take the commands' options by
name (see ``layoutsearch.api``); they load on first use, so importing a submodule does not
import the whole engine.
"""

from layoutsearch._version import __version__

API = ("solve", "explain", "estimate", "problem")
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name in API:
        from layoutsearch import api  # the engine loads on first use of the API (PEP 562)

        return getattr(api, name)
    raise AttributeError(f"module 'layoutsearch' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
