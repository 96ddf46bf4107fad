"""Write results/megatron_args_check.md: exported Megatron scripts through Megatron-LM's own checks.

Regenerate (one command, given a clone of NVIDIA/Megatron-LM with its tags and a Python that
imports torch):

    python scripts/megatron_args_check.py --megatron-git CLONE --python MEGATRON_PY

Check trees already on disk instead: ``--megatron PATH`` (repeatable, the label is the path);
``--tag`` picks other tags; ``--case ID`` runs some cases only; ``--no-write`` only prints;
``--also-with "--save-interval 1000"`` adds a column with those words appended to every script.

Megatron-LM is not a pip package, so its checks run in a second interpreter (MEGATRON_PY) with the
tag's tree first on ``sys.path``; it needs torch (the CPU build does), numpy, packaging, six, regex,
pyyaml, pydantic, triton, typing_extensions:

    python3.11 -m venv V && V/bin/pip install torch==2.13.0 numpy packaging six regex pyyaml \
        pydantic triton typing_extensions

For every case this checkout's ``layoutsearch solve ... --export megatron`` writes the launch
script; bash sources it as a user would, which gives ``MEGATRON_ARGS``, ``MEGATRON_PLACEHOLDER_ARGS``
(every ``<set me: ...>`` value replaced by the stand-in of ``STAND_INS``) and the environment the
script sets. The second interpreter imports ``megatron.training.arguments`` once per tag and, in a
forked process per case, sets that environment plus WORLD_SIZE (dp x fsdp x tp x pp x cp of the
layout) and RANK 0, ``sys.argv = ["pretrain_gpt.py", *words]``, and calls Megatron's
``parse_args(ignore_unknown_args=False)`` then ``validate_args(args, defaults)`` with the defaults
``pretrain_gpt.py`` passes. What stands in for the missing GPU: ``torch.cuda.get_device_capability`` and
``get_device_properties`` answer the cluster's compute capability (9.0 for H100). Python 3.11 lacks ``typing.override``,
which Megatron-LM 0.19 imports: ``typing_extensions.override`` stands in. Neither changes a check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import REPO, RESULTS  # first: puts this checkout's package ahead of an installed one

OUT = RESULTS / "megatron_args_check.md"
TAGS = ("core_v0.16.1", "core_v0.19.0")
SET_ME = "<set me"
# What the harness writes for each placeholder flag (values of the kind Megatron's examples use).
STAND_INS = {
    "--data-path": "/data/corpus_text_document",
    "--tokenizer-type": "HuggingFaceTokenizer",
    "--tokenizer-model": "meta-llama/Meta-Llama-3-8B",
    "--lr": "3e-4",
    "--min-lr": "3e-5",
    "--lr-decay-style": "cosine",
    "--lr-warmup-iters": "2000",
    "--lr-decay-iters": "100000",
    "--train-iters": "100000",
    "--save": "/checkpoints/run",
    "--load": "/checkpoints/run",
    "--save-interval": "1000",
    "--eval-interval": "1000",
    "--eval-iters": "10",
    "--split": "99,1,0",
    "--weight-decay": "0.1",
    "--clip-grad": "1.0",
    "--seed": "1234",
}
# pretrain_gpt.py's args_defaults (both tags), handed to validate_args as pretrain_gpt.py does.
PRETRAIN_GPT_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
# Compute capability of each accelerator the cases use (what get_device_capability would answer).
CAPABILITY = {"h100": (9, 0)}
ACCEPTED = "accepted"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Case:
    """One real problem: ``layoutsearch solve`` arguments, and why it is in the set."""

    case_id: str
    solve_args: tuple[str, ...]
    why: str
    accelerator: str = "h100"


CASES = tuple(
    Case(case_id=case_id, solve_args=tuple(solve_args.split()), why=why)
    for case_id, solve_args, why in (
        ("llama3-8b h100-8", "--model llama3-8b --cluster h100-8", "one node"),
        ("llama70b h100-64", "--model llama70b --cluster h100-64", "dense, 8 nodes"),
        (
            "llama3-405b h100-1024",
            "--model llama3-405b --cluster h100-1024",
            "pp > 1, interleaved",
        ),
        (
            "deepseek-v3 h100-2048 seqs 15360",
            "--model deepseek-v3 --cluster h100-2048 --seqs 15360",
            "MoE with ep, MLA, MTP",
        ),
        ("mixtral-8x7b h100-64", "--model mixtral-8x7b --cluster h100-64", "MoE, top-2"),
        (
            "llama3-8b h100-64 seq-len 131072",
            "--model llama3-8b --cluster h100-64 --seq-len 131072 --seqs 64",
            "long context: cp > 1",
        ),
    )
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Exported:
    """A case's exported script as Megatron would receive it."""

    case: Case
    layout: str
    world_size: int
    model_parallel_size: int
    words: list[str]
    env_set: dict[str, str]
    env_unset: list[str]


# ----------------------------------------------------------------------------- parent side
def export_case(case: Case, workdir: Path) -> Exported:
    """Solve and export with this checkout's CLI; read the script back through bash."""
    script = workdir / f"{case.case_id.replace(' ', '_')}.sh"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "layoutsearch", "solve", *case.solve_args]
    cmd += ["--format", "json", "--export", "megatron", "-o", str(script)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd[1:])} exited {run.returncode}: {run.stderr.strip()}")
    best = json.loads(run.stdout)["layouts"][0]
    deg = best["degrees"]
    world = deg["dp"] * deg["fsdp"] * deg["tp"] * deg["pp"] * deg["cp"]
    layout = " ".join(f"{k}={v}" for k, v in deg.items() if v > 1 or k == "pp")
    layout += f" zero{best['zero_stage']} v{best['virtual_stages']} remat {best['recompute']}"
    words, env_set, env_unset = source_script(script)
    return Exported(
        case=case,
        layout=layout,
        world_size=world,
        model_parallel_size=deg["tp"] * deg["pp"] * deg["cp"],
        words=fill_placeholders(words),
        env_set=env_set,
        env_unset=env_unset,
    )


def source_script(script: Path) -> tuple[list[str], dict[str, str], list[str]]:
    """Both arrays' words and the environment changes, as ``source SCRIPT`` in bash leaves them."""
    show = 'printf "%s\\0" "${MEGATRON_ARGS[@]}" "${MEGATRON_PLACEHOLDER_ARGS[@]}"; env -0 >&2'
    before = _bash_env("env -0 >&2")
    out = subprocess.run(
        ["bash", "-c", f'source "$0" >/dev/null && {show}', str(script)],
        capture_output=True,
        check=True,
    )
    words = [w.decode() for w in out.stdout.split(b"\0")[:-1]]
    after = _env_entries(out.stderr)
    changed = {k: v for k, v in after.items() if before.get(k) != v and k != "_"}
    return words, changed, sorted(set(before) - set(after))


def _bash_env(command: str) -> dict[str, str]:
    out = subprocess.run(["bash", "-c", command], capture_output=True, check=True)
    return _env_entries(out.stderr)


def _env_entries(raw: bytes) -> dict[str, str]:
    pairs = (e.decode().split("=", 1) for e in raw.split(b"\0") if b"=" in e)
    return {k: v for k, v in pairs}


def fill_placeholders(words: list[str]) -> list[str]:
    """Every ``<set me: ...>`` value replaced by the flag's stand-in (KeyError for an unknown flag)."""
    filled = list(words)
    for i, word in enumerate(words):
        if word.startswith(SET_ME):
            flag = words[i - 1]
            if flag not in STAND_INS:
                raise KeyError(f"no stand-in for placeholder {flag} {word!r}: add it to STAND_INS")
            filled[i] = STAND_INS[flag]
    return filled


def megatron_tree(git_dir: Path, tag: str, into: Path) -> tuple[Path, str]:
    """The tag's files (``git archive``) under ``into``, and its commit id."""
    commit = subprocess.run(
        ["git", "-C", str(git_dir), "rev-parse", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    tree = into / tag
    tree.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(git_dir), "archive", commit], stdout=subprocess.PIPE
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {tag} failed in {git_dir}")
    return tree, commit


def _head(tree: Path) -> str:
    """The commit a checkout is at, or a note that the tree is not a git checkout."""
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return head.stdout.strip() if head.returncode == 0 else "unknown (not a git checkout)"


def check_tree(python: str, tree: Path, jobs: list[dict], log: Path) -> list[dict]:
    """Run the jobs through the tree's parse_args + validate_args; one record per job
    (``outcome``, ``warnings``)."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs_file, results_file = Path(tmp) / "jobs.json", Path(tmp) / "results.jsonl"
        jobs_file.write_text(json.dumps(jobs))
        with log.open("a") as sink:
            sink.write(f"\n=== {tree}\n")
            sink.flush()
            subprocess.run(
                [python, __file__, "--child", str(tree), str(jobs_file), str(results_file)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                check=False,
            )
        lines = results_file.read_text().splitlines() if results_file.exists() else []
    records = {r["job"]: r for r in map(json.loads, lines)}
    died = {"outcome": f"no outcome: the checker died (see {log})", "warnings": []}
    return [records.get(i, died) for i in range(len(jobs))]


def job(exported: Exported, extra: list[str]) -> dict:
    return {
        "argv": ["pretrain_gpt.py", *exported.words, *extra],
        "env_set": {
            **exported.env_set,
            "WORLD_SIZE": str(exported.world_size),
            "RANK": "0",
        },
        "env_unset": exported.env_unset,
        "capability": CAPABILITY[exported.case.accelerator],
        "accelerator": exported.case.accelerator,
    }


@dataclasses.dataclass(frozen=True, kw_only=True)
class Control:
    """A deliberate fault Megatron must refuse: shows that the checks run and see what is spoiled."""

    what: str
    expect: str  # a piece of the refusal's text
    applies: Callable[[Exported], bool]
    spoil: Callable[[dict], dict]


def _without_connections(spec: dict) -> dict:
    env_set = {k: v for k, v in spec["env_set"].items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    return {
        **spec,
        "env_set": env_set,
        "env_unset": [*spec["env_unset"], "CUDA_DEVICE_MAX_CONNECTIONS"],
    }


CONTROLS = (
    Control(
        what="an unknown flag `--no-such-flag` appended",
        expect="unrecognized arguments: --no-such-flag",
        applies=lambda e: True,
        spoil=lambda spec: {**spec, "argv": [*spec["argv"], "--no-such-flag"]},
    ),
    Control(
        what="WORLD_SIZE one device more than the layout",
        expect="is not divisible by total_model_size",
        applies=lambda e: e.model_parallel_size > 1,
        spoil=lambda spec: {
            **spec,
            "env_set": {
                **spec["env_set"],
                "WORLD_SIZE": str(int(spec["env_set"]["WORLD_SIZE"]) + 1),
            },
        },
    ),
    Control(
        what="the script's `export CUDA_DEVICE_MAX_CONNECTIONS=1` left out",
        expect="CUDA_DEVICE_MAX_CONNECTIONS to 1",
        applies=lambda e: e.env_set.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
        spoil=_without_connections,
    ),
)


def control_jobs(exported: list[Exported]) -> list[tuple[Control, Exported, dict]]:
    """Each control on the first case it applies to, with a ``--save-interval`` stand-in where the
    script lacks one (else that assertion would come first)."""
    chosen = []
    for control in CONTROLS:
        target = next((e for e in exported if control.applies(e)), None)
        if target is not None:
            extra = [] if "--save-interval" in target.words else ["--save-interval", "1000"]
            chosen.append((control, target, control.spoil(job(target, extra))))
    return chosen


# ----------------------------------------------------------------------------- child side
class ParserError(Exception):
    """argparse's refusal, raised where it would print and exit."""


def _parser_error(self, message):
    raise ParserError(f"argparse: {message}")


def child_main(tree: str, jobs_file: str, results_file: str) -> None:
    """Import Megatron once, then check each job in a forked process (no state shared)."""
    import typing

    if not hasattr(typing, "override"):  # Python 3.11; Megatron-LM 0.19 imports it
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, tree)
    argparse.ArgumentParser.error = _parser_error  # keep the message instead of an exit
    from megatron.training import arguments

    for index, spec in enumerate(json.loads(Path(jobs_file).read_text())):
        pid = os.fork()
        if pid == 0:
            record = {"job": index, **_check_job(spec, arguments, tree)}
            with open(results_file, "a") as sink:
                sink.write(json.dumps(record) + "\n")
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)


def _check_job(spec: dict, arguments, tree: str) -> dict:
    """parse_args + validate_args on one job, in this (forked) process: ACCEPTED or the refusal,
    and the warnings Megatron gave on the way."""
    import traceback
    import types
    import warnings

    import torch

    major, minor = spec["capability"]
    gpu = types.SimpleNamespace(major=major, minor=minor, name=spec["accelerator"])
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_properties = lambda device=None: gpu
    for name in spec["env_unset"]:
        os.environ.pop(name, None)
    os.environ.update(spec["env_set"])
    sys.argv = spec["argv"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            parsed = arguments.parse_args(ignore_unknown_args=False)
            arguments.validate_args(parsed, PRETRAIN_GPT_DEFAULTS)
            outcome = ACCEPTED
        except Exception as err:  # every refusal is the result being measured
            traceback.print_exc()  # into the log
            outcome = _describe(err, tree)
    said = [" ".join(str(w.message).split()) for w in caught]
    return {"outcome": outcome, "warnings": list(dict.fromkeys(said))}


def _describe(err: Exception, tree: str) -> str:
    """The refusal in one line: message, and for an assertion the source line and its place."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    inside = [f for f in frames if Path(f.filename).resolve().is_relative_to(Path(tree).resolve())]
    frame = (inside or frames)[-1]
    where = f"{os.path.relpath(frame.filename, tree)}:{frame.lineno}"
    message = " ".join(str(err).split())
    if isinstance(err, ParserError):
        return message
    if isinstance(err, AssertionError) and frame is frames[-1]:
        return f"{where} `{frame.line}`" + (f": {message}" if message else "")
    return f"{type(err).__name__} from {where} `{frame.line}`: {message}"


# ----------------------------------------------------------------------------- report
def _cell(text: str) -> str:
    """Text for a Markdown table cell (a source line's continuation backslash dropped)."""
    return text.replace(" \\`", "`").replace("|", "\\|")


def table(label: str, commit: str, exported: list[Exported], columns: dict[str, list[str]]):
    lines = [f"## {label}", "", f"Megatron-LM commit `{commit}`.", ""]
    lines.append("| case | layout | world | " + " | ".join(columns) + " |")
    lines.append("|---|---|---|" + "---|" * len(columns))
    for i, e in enumerate(exported):
        cells = [_cell(c[i]) for c in columns.values()]
        lines.append(f"| {e.case.case_id} | {e.layout} | {e.world_size} | {' | '.join(cells)} |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron-git", type=Path, help="a Megatron-LM clone with its tags")
    parser.add_argument("--tag", action="append", help=f"tags to check (default {TAGS})")
    parser.add_argument("--megatron", type=Path, action="append", default=[], help="a tree")
    parser.add_argument("--python", default=sys.executable, help="interpreter with torch")
    parser.add_argument("--case", action="append", help="case ids (default: all)")
    parser.add_argument("--also-with", help="words appended to every script, a second column")
    parser.add_argument("--no-write", action="store_true", help="print, leave results/ alone")
    args = parser.parse_args()
    if not args.megatron_git and not args.megatron:
        parser.error("give --megatron-git CLONE or --megatron TREE")
    cases = [c for c in CASES if not args.case or c.case_id in args.case]
    if not cases:
        parser.error(f"--case {args.case}: none of {[c.case_id for c in CASES]}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        workdir, log = Path(tmp), Path(tempfile.gettempdir()) / "megatron_args_check.log"
        log.write_text("")
        exported = [export_case(c, workdir) for c in cases]
        trees = [(str(t), t, _head(t)) for t in args.megatron]
        for tag in args.tag or (TAGS if args.megatron_git else ()):
            tree, commit = megatron_tree(args.megatron_git, tag, workdir / "mlm")
            trees.append((tag, tree, commit))
        extra = shlex.split(args.also_with or "")
        controls = control_jobs(exported)
        lines, missed = _preamble(args, cases), 0
        for label, tree, commit in trees:
            mark = len(lines)
            jobs = [job(e, []) for e in exported] + [job(e, extra) for e in exported if extra]
            records = check_tree(args.python, tree, jobs + [c[2] for c in controls], log)
            outcomes = [r["outcome"] for r in records]
            n = len(exported)
            columns = {"as exported": outcomes[:n]}
            if extra:
                columns[f"with `{args.also_with}` appended"] = outcomes[n : 2 * n]
            lines += table(label, commit, exported, columns)
            lines += warning_rows(exported, records[: len(jobs)])
            rows, wrong = control_rows(controls, outcomes[len(jobs) :])
            lines += rows
            missed += wrong
            print("\n".join(lines[mark:]))
    lines.append(f"Run time {time.perf_counter() - start:.0f} s (exports and checks).")
    if not args.no_write:
        OUT.write_text("\n".join(lines) + "\n")
        print(f"wrote {OUT.relative_to(REPO)}")
    if missed:
        print(
            f"{missed} control(s) not refused as expected: the harness is not checking",
            file=sys.stderr,
        )
    return 1 if missed else 0


def warning_rows(exported: list[Exported], records: list[dict]) -> list[str]:
    """Each distinct warning Megatron gave while checking the cases, with the cases that got it."""
    seen: dict[str, list[str]] = {}
    for i, record in enumerate(records):
        for text in record["warnings"]:
            name = exported[i % len(exported)].case.case_id
            if name not in seen.setdefault(text, []):
                seen[text].append(name)
    lines = ["Warnings Megatron gave while checking them (any column):", ""]
    lines += ["| warning | cases |", "|---|---|"]
    lines += [f"| {_cell(text)} | {', '.join(names)} |" for text, names in seen.items()]
    return lines + [""]


def control_rows(controls: list, outcomes: list[str]) -> tuple[list[str], int]:
    """The controls' table and how many were not refused with the expected text."""
    lines = ["Controls (deliberate faults; each must be refused):", ""]
    lines += ["| fault | case | refused as expected | outcome |", "|---|---|---|---|"]
    missed = 0
    for (control, target, _), outcome in zip(controls, outcomes):
        ok = control.expect in outcome
        missed += not ok
        verdict = "yes" if ok else "NO"
        lines.append(f"| {control.what} | {target.case.case_id} | {verdict} | {_cell(outcome)} |")
    return lines + [""], missed


def _preamble(args, cases: list[Case]) -> list[str]:
    from layoutsearch.core.problem import version

    also = f' --also-with "{args.also_with}"' if args.also_with else ""
    return [
        "# Exported Megatron scripts through Megatron-LM's own parse_args + validate_args",
        "",
        "Regenerate: `python scripts/megatron_args_check.py --megatron-git CLONE "
        f"--python MEGATRON_PY{also}` (the script's docstring says how to make MEGATRON_PY).",
        "",
        f"layoutsearch {version()}. Each case is `layoutsearch solve ARGS --export megatron`; the "
        "script is sourced by bash and its words (placeholders replaced by the harness's "
        "stand-ins) go to `parse_args(ignore_unknown_args=False)` and `validate_args` with "
        "WORLD_SIZE = dp x fsdp x tp x pp x cp. A refusal shows the failing source line "
        "(its path in the Megatron-LM tree) and its message; Megatron's own warnings follow each table.",
        "",
        "| case | solve arguments | why |",
        "|---|---|---|",
        *(f"| {c.case_id} | `{shlex.join(c.solve_args)}` | {c.why} |" for c in cases),
        "",
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child_main(*sys.argv[2:5])
    else:
        sys.exit(main())
