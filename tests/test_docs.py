"""The documents show what the commands print now, quote the results files as they are, and cite
only files and sections the repository holds."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("refresh_docs", ROOT / "scripts" / "refresh_docs.py")
refresh_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refresh_docs)


@pytest.mark.slow
def test_shown_outputs_and_headline_numbers_are_current():
    """Every `$ ...` block of README.md, examples/*.md and docs/*.md is what its commands print
    now (all but wall times), and the README's headline table is what results/ gives; regenerate
    with `python scripts/refresh_docs.py`."""
    problems: list[str] = []
    for path in refresh_docs.doc_files():
        refresh_docs.refresh(path, problems)
    assert not problems, "\n".join(problems)


def test_an_inline_quote_of_a_results_file_is_refreshed_and_a_stale_one_named():
    """`<!-- q FILE | LABEL -->` quotes a table row's value, `#SECTION` and a column pick another
    table's cell, `/REGEX/` a sentence's number; a wrong value is named and replaced."""
    results = (ROOT / "results" / "validation.md").read_text()
    fit = re.search(r"^\| fit accuracy \(predicted fits == ran\) \| ([0-9.]+%) \|", results, re.M)
    band = re.search(
        r"^## Uncertainty bands.*?^\| gpu \| [^|]*\|[^|]*\|[^|]*\|[^|]*\| ([^|]+?) \|",
        results,
        re.M | re.S,
    )
    ran = re.search(r"the largest share of a run that ran is ([0-9.]+)", results)
    assert fit and band and ran
    text = (
        "fits <!-- q validation.md | fit accuracy (predicted fits == ran) -->1%<!-- /q -->, band "
        "<!-- q validation.md#Uncertainty bands | gpu | 5 -->x<!-- /q -->, largest "
        "<!-- q validation.md | /the largest share of a run that ran is ([0-9.]+)/ -->9<!-- /q -->."
    )
    problems: list[str] = []
    fresh = refresh_docs.refresh_quotes(text, problems, "x")
    assert fresh == (
        f"fits <!-- q validation.md | fit accuracy (predicted fits == ran) -->{fit.group(1)}<!-- /q -->, "
        f"band <!-- q validation.md#Uncertainty bands | gpu | 5 -->{band.group(1)}<!-- /q -->, largest "
        f"<!-- q validation.md | /the largest share of a run that ran is ([0-9.]+)/ -->{ran.group(1)}<!-- /q -->."
    )
    assert len(problems) == 3 and problems[0] == (
        "stale (x): the quoted 'validation.md | fit accuracy (predicted fits == ran)'"
    )
    problems.clear()
    assert refresh_docs.refresh_quotes(fresh, problems, "x") == fresh and problems == []
    with pytest.raises(SystemExit, match="results/validation.md has no row 'no such row'"):
        refresh_docs.refresh_quotes("<!-- q validation.md | no such row -->1<!-- /q -->", [], "x")


def test_an_inline_quote_of_a_catalogue_field_is_its_value_in_the_file():
    """`<!-- q hardware/FILE | a.b -->` quotes a catalogue field by its dotted path, so a number the
    documents give for a fitted fraction follows the hardware file; a missing field is named."""
    h100 = (ROOT / "hardware" / "h100.yaml").read_text()
    fitted = re.search(r"^  vendor_attention_efficiency: ([0-9.]+)", h100, re.M)
    assert fitted
    problems: list[str] = []
    quote = "<!-- q hardware/h100.yaml | calibration.vendor_attention_efficiency -->"
    assert refresh_docs.refresh_quotes(f"{quote}0.5<!-- /q -->", problems, "x") == (
        f"{quote}{fitted.group(1)}<!-- /q -->"
    )
    assert problems == [
        "stale (x): the quoted 'hardware/h100.yaml | calibration.vendor_attention_efficiency'"
    ]
    with pytest.raises(SystemExit, match="hardware/h100.yaml has no field 'calibration.nope'"):
        refresh_docs.refresh_quotes(
            "<!-- q hardware/h100.yaml | calibration.nope -->1<!-- /q -->", [], "x"
        )


def test_the_plan_example_is_current_but_for_the_solver_time():
    """examples/plan.md is among the checked documents and shows what `layoutsearch plan` prints
    now; its solver time may differ, its status may not."""
    path = ROOT / "examples" / "plan.md"
    assert path in refresh_docs.doc_files()
    assert ROOT / "examples" / "time_to_train.md" not in refresh_docs.doc_files()
    problems: list[str] = []
    refresh_docs.refresh(path, problems)
    assert not problems, "\n".join(problems)
    line = "Global batch 2,048 x 8,192 tokens; solver OPTIMAL in {}."
    assert refresh_docs.compare([line.format("1.5 s")], [line.format("12.25 s")])[0] is True
    feasible = line.replace("OPTIMAL", "FEASIBLE")
    assert refresh_docs.compare([line.format("1.5 s")], [feasible.format("1.5 s")])[0] is False


def test_a_changed_number_in_a_shown_output_is_caught():
    """One number changed in a block that docs/usage.md shows makes that block stale."""
    usage = (ROOT / "docs" / "usage.md").read_text()
    block = re.search(
        r"^\$ layoutsearch solve --model llama70b --cluster v5p-1100000\n.*?\n", usage, re.M
    )
    assert block is not None, "docs/usage.md shows the device-limit error"
    shown = block.group(0)
    assert "1,100,000 devices" in shown
    problems: list[str] = []
    refresh_docs.refresh_session(shown, problems, "x")
    assert problems == []
    refresh_docs.refresh_session(
        shown.replace("1,100,000 devices", "1,100,001 devices"), problems, "x"
    )
    assert problems == ["stale (x): $ layoutsearch solve --model llama70b --cluster v5p-1100000"]


@pytest.mark.parametrize(
    ("shown", "now", "same"),
    [
        (["a", "b", "c"], ["a", "b", "c"], True),
        (["a", " ... elided", "c"], ["a", "b1", "b2", "c"], True),
        (["a", " ...", "c"], ["a", "b", "d"], False),  # the last shown line must end the output
        (["a", " ...", "x"], ["a", "b", "c"], False),
        (["a", "c"], ["a", "b", "c"], False),  # without an elision, no line may be left out
        (["r | wall 0.49 s"], ["r | wall 5.79 s"], True),  # wall times differ from run to run
        (["r | 0.800 s"], ["r | 0.801 s"], False),
    ],
)
def test_compare_matches_elisions_and_nothing_else(shown, now, same):
    """A ` ...` line stands for any run of lines; every other line must match, but wall times."""
    assert refresh_docs.compare(shown, now)[0] is same


def test_an_abridged_block_is_refreshed_line_for_line():
    """A stale abridged block keeps its shape: each shown line takes the value it has now."""
    same, fresh = refresh_docs.compare(
        ["step 1.1010", " ...", "MFU 43.9%"], ["step 0.8433", "x", "MFU 57.3%"]
    )
    assert not same and fresh == ["step 0.8433", " ...", "MFU 57.3%"]


def test_a_command_the_script_cannot_run_is_reported():
    """A `$` line other than layoutsearch, cat and echo $? is never silently left unchecked."""
    problems: list[str] = []
    refresh_docs.refresh_session("$ diff a b\n1c1\n", problems, "x")
    assert problems == ["cannot run (x): $ diff a b"]


def test_the_readme_opens_with_the_two_set_up_commands_and_stays_short():
    """The README starts with the two venv lines CI runs and reads in five minutes (<= 250 lines)."""
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert lines[2] == "```bash"
    assert lines[3].startswith("python3 -m venv .venv && .venv/bin/pip install -q . && ")
    assert lines[4].startswith("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && ")
    assert (
        len(lines) <= 250
        and max(len(line) for line in lines if "─" not in line and "━" not in line) < 400
    )


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_every_calibration_source_points_to_a_section_that_exists():
    """Each `docs/calibration.md#anchor` in hardware/*.yaml names a heading of docs/calibration.md."""
    anchors = _anchors(ROOT / "docs" / "calibration.md")
    cited = set()
    for path in sorted((ROOT / "hardware").glob("*.yaml")):
        cited |= set(re.findall(r"docs/calibration\.md#([\w\-]+)", path.read_text()))
    assert cited and cited <= anchors, sorted(cited - anchors)


def test_documents_link_only_to_files_and_sections_that_exist():
    """Relative links in README.md and docs/*.md resolve (docs/cli.md is generated elsewhere)."""
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", doc.read_text()):
            name, anchor = target
            if name.startswith("http") or name.endswith("cli.md"):
                continue
            path = (doc.parent / name) if name else doc
            if not path.exists() or (
                anchor and path.suffix == ".md" and anchor not in _anchors(path)
            ):
                broken.append(f"{doc.name}: {name}#{anchor}")
    assert not broken, broken


def test_the_repository_cites_no_file_it_lacks():
    """No tracked text cites the design documents that live outside the repository."""
    missing = re.compile(r"COSTS\.md|SCHEMA\.md|DESIGN\.md|STYLE\.md|\bshared/")
    hits = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).as_posix()
        if not path.is_file() or path.suffix not in {
            ".py",
            ".md",
            ".yaml",
            ".yml",
            ".toml",
            ".txt",
        }:
            continue
        if (
            rel.startswith((".venv", ".git/", "build/"))
            or "/." in f"/{rel}"
            or rel == "tests/test_docs.py"
        ):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if missing.search(line) and '"shared/" not in text' not in line:
                hits.append(f"{rel}:{n}")
    assert not hits, hits
