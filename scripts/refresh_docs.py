"""Rerun the commands shown in README.md and examples/README.md and write their output back.

    python scripts/refresh_docs.py            # rewrite the files
    python scripts/refresh_docs.py --check    # exit 1 and name the stale blocks

A block is refreshed when it is a fenced block holding exactly one `$ layoutsearch ...` line
followed by that command's complete output (no ` ... ` elisions, no shell redirection, every
path it names present in the checkout). Abridged blocks are left to the hand (the script lists
them), so that no shown output silently goes stale.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layoutsearch.cli import app  # noqa: E402  (the checkout's package)

FILES = ("README.md", "examples/README.md")
FENCE = re.compile(r"```[a-z]*\n(\$ layoutsearch [^\n]*)\n(.*?)```", re.S)
VOLATILE = re.compile(r"wall [0-9.]+ s")  # the solver's wall time differs from run to run


def output_of(command: str) -> str | None:
    """The command's output as a terminal shows it (stdout, then stderr), or None when it cannot be rerun."""
    argv = shlex.split(command.split("#")[0])[1:]
    if any(a in (">", "|") or a.startswith("[") for a in argv):
        return None
    if any(a.endswith((".yaml", ".json", ".csv")) and not (ROOT / a).exists() for a in argv):
        return None
    result = CliRunner().invoke(app, argv)
    text = result.stdout + (result.stderr if result.exit_code else "")
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines()) + "\n"


def refresh(text: str, stale: list[str], abridged: list[str]) -> str:
    def one(match: re.Match) -> str:
        command, shown = match.group(1), match.group(2)
        if " ..." in shown or "\n$ " in shown:
            abridged.append(command)
            return match.group(0)
        now = output_of(command[2:])
        if now is None:
            return match.group(0)
        if VOLATILE.sub("", now) != VOLATILE.sub("", shown):
            stale.append(command)
        return match.group(0).replace(shown, now, 1)

    return FENCE.sub(one, text)


def main() -> int:
    check = "--check" in sys.argv
    stale: list[str] = []
    abridged: list[str] = []
    import os

    os.chdir(ROOT)
    for name in FILES:
        path = ROOT / name
        new = refresh(path.read_text(), stale, abridged)
        if not check:
            path.write_text(new)
    for command in abridged:
        print(f"abridged (check by hand): {command}")
    for command in stale:
        print(f"{'stale' if check else 'refreshed'}: {command}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
