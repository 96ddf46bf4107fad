"""The console script ``layoutsearch`` and ``python -m layoutsearch``.

The command line is imported with the cyclic garbage collector paused: an import makes classes,
functions, validators and schemas that live as long as the process, and the collector, left on,
walks them over and over as their number grows (about a hundred collections that find nothing,
0.08-0.11 s of the main job, ``scripts/speed_benchmark.py``). They are then frozen out of its
reach (``gc.freeze``) and it resumes for the command, which makes the garbage worth collecting.
"""

from __future__ import annotations

import gc


def run() -> int:
    """Import the command line with the collector paused, then run it (``cli.run``)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        from layoutsearch.cli import run as command_line
    finally:
        gc.freeze()
        if paused:
            gc.enable()
    return command_line()
