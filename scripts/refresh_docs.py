"""Rerun every command whose output README.md, examples/*.md and docs/*.md show, and write
the output back; rebuild the README's headline numbers and every inline quote of a results/ file
(`<!-- q FILE | ROW LABEL -->value<!-- /q -->`) or of a catalogue field (`<!-- q hardware/h100.yaml |
calibration.matmul_efficiency -->`; `_quoted`) from the files they quote.

    python scripts/refresh_docs.py            # rewrite the files
    python scripts/refresh_docs.py --check    # exit 1 and name every block that differs

A shown session is a fenced block whose first line starts with `$ `. Each block runs in its own
scratch folder (holding links to the checkout's examples/ and tests/), one command at a time:

- `$ layoutsearch ARGS [> FILE]`: run through the CLI; stdout and stderr as a terminal shows them
  (with `> FILE`, stdout goes to FILE in the scratch folder and only stderr is shown);
- `$ cat PATH`: a file of the checkout must be shown as it is; a file the checkout lacks is
  written from the shown text (so an error example can show the bad file it reads);
- `$ echo $?`: the exit code of the command before.

A shown line that starts with ` ...` stands for any run of lines (an abridged output); every
other shown line must equal the output's line in order, all but the solver's wall time. A
```python block directly followed by a plain ``` block is run, and the second block is its
output. Any other `$` command makes --check fail, so that no shown output goes unchecked.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
import tempfile
from pathlib import Path

import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from layoutsearch.cli import app  # noqa: E402  (the checkout's package)

GENERATED_ELSEWHERE = (
    "docs/cli.md",  # written from the option declarations, not from here
    "examples/time_to_train.md",  # examples/generate_planning.py, checked by tests/test_planning.py
    "examples/what_if.md",
)
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.S | re.M)
PYTHON_THEN_OUTPUT = re.compile(r"^```python\n(.*?)^```\n\n```\n(.*?)^```\n", re.S | re.M)
VOLATILE = (
    re.compile(r"wall [0-9.]+ s"),  # the solver's wall time
    re.compile(r"already done, [0-9.]+ s"),  # a sweep's wall time
    re.compile(r"(?<=OPTIMAL) in [0-9.]+ s"),  # a plan page's solver wall time
)
ELISION = " ..."
HEADLINE = re.compile(r"(<!-- headline: begin -->\n)(.*?)(<!-- headline: end -->)", re.S)
QUOTE = re.compile(r"(<!-- q (?P<key>.*?) -->)(?P<value>.*?)(<!-- /q -->)", re.S)


def doc_files() -> list[Path]:
    """The documents whose shown outputs this script owns."""
    docs = sorted((ROOT / "docs").glob("*.md"))
    examples = sorted((ROOT / "examples").glob("*.md"))
    names = [ROOT / "README.md", *examples, *docs]
    return [p for p in names if p.relative_to(ROOT).as_posix() not in GENERATED_ELSEWHERE]


def _stable(line: str) -> str:
    for pattern in VOLATILE:
        line = pattern.sub("", line)
    return line


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()] if text.strip() else []


class Session:
    """One fenced block's commands, run in a scratch folder."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.exit_code = 0
        for name in ("examples", "tests"):
            (scratch / name).symlink_to(ROOT / name)

    def run(self, command: str, shown: list[str]) -> list[str] | None:
        """The command's output lines now, or None when this script cannot run it."""
        try:
            argv = shlex.split(command, comments=True)
        except ValueError:
            return None
        if argv[:1] == ["cat"] and len(argv) == 2:
            return self._cat(argv[1], shown)
        if argv == ["echo", "$?"]:
            return [str(self.exit_code)]
        if argv[:1] != ["layoutsearch"] or any(a in ("|", "<", "2>", ">>") for a in argv):
            return None
        target = None
        if ">" in argv:
            i = argv.index(">")
            if i != len(argv) - 2:
                return None
            argv, target = argv[:i], argv[i + 1]
        result = CliRunner().invoke(app, argv[1:])
        self.exit_code = result.exit_code
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise RuntimeError(f"`{command}` raised {result.exception!r}") from result.exception
        if target is not None:
            (self.scratch / target).write_text(result.stdout)
            return _lines(result.stderr)
        return _lines(result.output)

    def _cat(self, name: str, shown: list[str]) -> list[str]:
        self.exit_code = 0
        for path in (self.scratch / name, ROOT / name):
            if path.exists():
                return _lines(path.read_text())
        (self.scratch / name).write_text("\n".join(shown) + "\n")  # the block defines the file
        return shown


def _segments(shown: list[str]) -> list[list[str] | None]:
    """Shown lines split at elisions: a list of runs, None where an elision stands."""
    out: list[list[str] | None] = []
    for line in shown:
        if line.startswith(ELISION) or line == ELISION.strip():
            if not out or out[-1] is not None:
                out.append(None)
        elif out and out[-1] is not None:
            out[-1].append(line)
        else:
            out.append([line])
    return out


def _skeleton(line: str) -> str:
    return re.sub(r"[\d.,%+\-\s]+", "#", _stable(line))


def _match(shown: list[str], now: list[str], same) -> list[tuple[int, list[str]]] | None:
    """Where each shown run lies in the output (index, run): in order, each run contiguous, the
    first at the start and the last at the end unless an elision stands there; None if not."""
    segments, at, placed = _segments(shown), 0, []
    for k, run in enumerate(segments):
        if run is None:
            continue
        after_elision = k > 0 and segments[k - 1] is None
        ends = k == len(segments) - 1
        for i in range(at, len(now) - len(run) + 1) if after_elision else [at]:
            end = i + len(run)
            fits = end <= len(now) and (not ends or end == len(now))
            if fits and all(same(a, b) for a, b in zip(run, now[i:end], strict=True)):
                placed.append((i, run))
                at = i + len(run)
                break
        else:
            return None
    if segments and segments[-1] is None:
        return placed
    return placed if at == len(now) else None


def compare(shown: list[str], now: list[str]) -> tuple[bool, list[str] | None]:
    """(shown == now but for wall times and elisions, the refreshed shown lines or None)."""
    if _match(shown, now, lambda a, b: _stable(a) == _stable(b)) is not None:
        return True, shown
    if not any(line.startswith(ELISION) for line in shown):
        before = {_stable(line): line for line in shown}  # keep the shown wall times
        return False, [before.get(_stable(line), line) for line in now]
    placed = _match(shown, now, lambda a, b: _skeleton(a) == _skeleton(b))
    if placed is None:
        return False, None
    fresh, k = list(shown), 0
    for i, run in placed:
        k = fresh.index(run[0], k)
        fresh[k : k + len(run)] = now[i : i + len(run)]
        k += len(run)
    return False, fresh


def refresh_session(body: str, problems: list[str], where: str) -> str:
    """The block's text with every command's output as it is now; problems named."""
    lines, out, i = body.rstrip("\n").split("\n"), [], 0
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        session = Session(Path(scratch))
        while i < len(lines):
            command, j = lines[i], i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            shown = [line.rstrip() for line in lines[i + 1 : j]]
            now = session.run(command[2:], shown)
            out.append(command)
            if now is None:
                problems.append(f"cannot run ({where}): {command}")
                out.extend(shown)
            else:
                same, fresh = compare(shown, now)
                if not same:
                    kind = "stale" if fresh is not None else "stale, edit by hand"
                    problems.append(f"{kind} ({where}): {command}")
                out.extend(fresh if fresh is not None else shown)
            i = j
    return "\n".join(out) + "\n"


def run_python(code: str) -> str:
    """What a ```python block prints, run from the checkout's root."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.chdir(ROOT):
        exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
    return buffer.getvalue()


def _row_cell(text: str, label: str, column: int) -> str | None:
    """Cell ``column`` of the first table row `| label | ... |` of TEXT, or None."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] == label:
            return cells[column]
    return None


def _results_row(name: str, label: str, column: int = 1) -> str:
    """A cell (the value cell by default) of the row `| label | value | ...` in results/NAME (the
    first such row)."""
    cell = _row_cell((ROOT / "results" / name).read_text(), label, column)
    if cell is None:
        raise SystemExit(f"results/{name} has no row '{label}'")
    return cell


def _section(name: str, heading: str | None) -> str:
    """results/NAME's text, from the heading that starts with HEADING on (the whole file without)."""
    text = (ROOT / "results" / name).read_text()
    if heading is None:
        return text
    found = re.search(rf"^#+ {re.escape(heading)}.*$", text, re.M)
    if found is None:
        raise SystemExit(f"results/{name} has no section '{heading}'")
    return text[found.start() :]


def _catalogue_value(name: str, path: str) -> str:
    """The value at the dotted PATH (e.g. ``calibration.matmul_efficiency``) of the catalogue file NAME
    (``hardware/h100.yaml``), as YAML wrote it."""
    node = yaml.safe_load((ROOT / name).read_text())
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise SystemExit(f"{name} has no field '{path}'")
        node = node[part]
    return str(node)


def _quoted(key: str) -> str:
    """The value an inline quote `<!-- q FILE[#SECTION] | LABEL[ | COLUMN] -->` stands for: the cell
    (the second by default; its text before any ' (') of the first row labelled LABEL in results/FILE,
    from SECTION's heading on; with LABEL `/REGEX/`, the first group of REGEX's first match there.
    The parts are separated by ' | ' (a bar between spaces), so a REGEX may hold a bare '|'. A FILE
    under hardware/ or models/ is a catalogue file and LABEL a dotted field path in it."""
    parts = [part.strip() for part in key.split(" | ")]
    where, label = parts[0], parts[1]
    if where.startswith(("hardware/", "models/")):
        return _catalogue_value(where, label)
    name, _, heading = where.partition("#")
    text = _section(name, heading or None)
    if len(label) > 1 and label[0] == label[-1] == "/":
        found = re.search(label[1:-1], text)
        if found is None:
            raise SystemExit(f"results/{name} has nothing that matches {label}")
        return found.group(1)
    cell = _row_cell(text, label, int(parts[2]) if len(parts) > 2 else 1)
    if cell is None:
        raise SystemExit(
            f"results/{name} has no row '{label}'" + (f" under '{heading}'" if heading else "")
        )
    return cell.split(" (")[0]


def _moe_loso(name: str) -> str:
    """'median / p90' of the leave-one-source-out sentence of the MoE results file."""
    text = (ROOT / "results" / name).read_text()
    found = re.search(r"each source predicted: median \|error\| ([0-9.]+%), p90 ([0-9.]+%)", text)
    if found is None:
        raise SystemExit(f"results/{name} has no leave-one-source-out sentence")
    return f"{found.group(1)} / {found.group(2)}"


CLAIM = "median claimed speed-up of the engine's winner over the published layout"  # the summary rows' label


def _mlperf_signed(name: str) -> str:
    """'Hopper / Blackwell' median signed errors of the MLPerf held-out section of results/NAME."""
    text = _section(name, "Held out: MLPerf Training")
    found = re.search(
        r"Hopper rows ([-+0-9.]+%) and Blackwell rows ([-+0-9.]+%) at the median", text
    )
    if found is None:
        raise SystemExit(f"results/{name} has no MLPerf held-out sentence")
    return f"{found.group(1)} / {found.group(2)}"


def headline() -> str:
    """The README's headline numbers, as the results files give them now."""
    dense = "validation.md"
    moe = "validation_moe.md"
    main_job = "main job: solve --model llama70b --cluster v5p-8192"
    speed = _results_row("speed_benchmark.md", main_job)
    ratio = _results_row("speed_benchmark.md", main_job, -1)
    loso = _results_row(dense, "leave-one-source-out median / p90 abs rel error").split(" over")[0]
    moe_loso = _moe_loso(moe)
    rows = [
        "| what | value | from |",
        "|---|---|---|",
        f"| dense runs (150 published; tokens/s per device): median / p90 error | "
        f"{_results_row(dense, 'median abs rel error')} / {_results_row(dense, 'p90 abs rel error')}"
        f" (held out by source: {loso}) | [results/validation.md](results/validation.md) |",
        f"| dense runs: predicted to fit as they ran | "
        f"{_results_row(dense, 'fit accuracy (predicted fits == ran)')} "
        f"| [results/validation.md](results/validation.md) |",
        f"| mixture-of-experts runs (71 published): median / p90 error | "
        f"{_results_row(moe, 'median abs rel error (tokens/s per device)').split(' (')[0]} / "
        f"{_results_row(moe, 'p90 abs rel error').split(' (')[0]} (held out by source: {moe_loso}) "
        f"| [results/validation_moe.md](results/validation_moe.md) |",
        f"| the engine's winner over the published layout, median claimed speed-up (within the framework "
        f"release each run used): dense / MoE runs | "
        f"{_results_row(dense, CLAIM).split(',')[0]} / {_results_row(moe, CLAIM).split(',')[0]} "
        f"| [results/claims.md](results/claims.md) |",
        f"| held out, never fitted: MLPerf Training's Llama 3.1 runs, median signed error (- = predicted too slow) on Hopper / on "
        f"Blackwell | {_mlperf_signed(dense)} | [results/validation.md](results/validation.md) |",
        f"| the main job's wall time (whole process, 2 CPUs, median) | {speed} s, {ratio}x the "
        f"`import ortools.sat.python.cp_model` floor (bound: 1.3x) "
        f"| [results/speed_benchmark.md](results/speed_benchmark.md) |",
    ]
    return "\n".join(rows) + "\n"


def refresh_quotes(text: str, problems: list[str], where: str) -> str:
    """TEXT with every inline quote's value as results/ gives it now; stale ones named."""

    def quote(match: re.Match) -> str:
        now = _quoted(match.group("key"))
        if now != match.group("value"):
            problems.append(f"stale ({where}): the quoted '{match.group('key')}'")
        return match.group(1) + now + match.group(4)

    return QUOTE.sub(quote, text)


def refresh(path: Path, problems: list[str]) -> str:
    """The file's text with every shown output and the headline as they are now."""
    text, where = path.read_text(), path.relative_to(ROOT).as_posix()

    def python_block(match: re.Match) -> str:
        now = run_python(match.group(1))
        if _lines(now) != _lines(match.group(2)):
            problems.append(f"stale ({where}): python block {match.group(1).splitlines()[0]}")
        return match.group(0).replace(match.group(2), now, 1)

    def session(match: re.Match) -> str:
        body = match.group(2)
        if not body.startswith("$ "):
            return match.group(0)
        return f"```{match.group(1)}\n{refresh_session(body, problems, where)}```\n"

    def headline_block(match: re.Match) -> str:
        now = headline()
        if now != match.group(2):
            problems.append(f"stale ({where}): the headline numbers")
        return match.group(1) + now + match.group(3)

    text = PYTHON_THEN_OUTPUT.sub(python_block, text)
    text = FENCE.sub(session, text)
    text = refresh_quotes(text, problems, where)
    return HEADLINE.sub(headline_block, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    problems: list[str] = []
    for path in doc_files():
        new = refresh(path, problems)
        if not check and new != path.read_text():
            path.write_text(new)
    for line in problems:
        print(line if check else line.replace("stale (", "refreshed (", 1))
    unfixable = [p for p in problems if not p.startswith("stale (")]
    return 1 if problems and (check or unfixable) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
