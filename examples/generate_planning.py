"""Regenerate examples/time_to_train.md and examples/what_if.md: each command is run through the
CLI and its output written below it; the numbers in the prose come from the same commands' JSON.

    python examples/generate_planning.py

tests/test_planning.py runs every command of these files again and compares the output, line by
line (all but the solver's wall-clock time), so an example never goes stale silently.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from typer.testing import CliRunner

EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES.parent))

from layoutsearch.cli import app  # noqa: E402  (the checkout's package, ahead of an installed copy)

INTRO_TIME_TO_TRAIN = """# Time to train and cost

Every block is the command's output (regenerate: `python examples/generate_planning.py`;
tests/test_planning.py runs each command again and compares all but the solver's wall time).

`--tokens N` (training tokens, in (0, 1e18]) and `--price-per-device-hour P` (any currency, in
[0, 1e6]) on `solve`, `explain`, `estimate` and `sweep` turn each layout's throughput into

    train_days   = tokens / tokens_per_s / goodput / 86400
    device_hours = train_days x 24 x devices
    cost         = device_hours x price_per_device_hour

The goodput is the share of wall time that trains, under failures, checkpoints and restarts
(docs/planning.md#goodput: Llama 3's failure rate unless `--failure-rate-per-device-hour` says
otherwise). `--format json` adds `goodput`, `train_days`, `device_hours`, `cost` and
`price_per_device_hour` to every layout record (the last four null when not given; `cost` is
null without a price), and the problem's `workload.training_tokens` holds the tokens. A sweep's
table gets the columns `training_tokens`, `price_per_device_hour`, `goodput`, `train_days`,
`device_hours` and `cost`.
"""

INTRO_WHAT_IF = """# What if the hardware were different?

Every block is the command's output (regenerate: `python examples/generate_planning.py`;
tests/test_planning.py runs each command again and compares all but the solver's wall time).

`--what-if KEY=FACTOR[,KEY=FACTOR]` on `solve` solves the problem twice: as given and on a
cluster whose numbers are scaled (`report.planning.scaled_cluster`, a pure function). On
`estimate` it re-costs the given layout on the scaled cluster instead. Keys:

| key | scales |
|---|---|
| `scale_out_bandwidth` | the accelerator's scale-out bytes/s and every `scale_out` / `dcn` axis (GPU NICs, TPU DCN) |
| `link_bandwidth` | the accelerator's link bytes/s and every `torus` / `switch` axis (ICI, NVLink) |
| `hbm` | HBM capacity |
| `hbm_bandwidth` | HBM bytes/s |
| `peak_flops` | peak dense FLOP/s |

Factors are finite, in [0.001, 1000]; an unknown key exits 2 with a did-you-mean. `--format
json` adds a `what_if` object: `factors`, `method` (re-solved / re-estimated), `status`, the
what-if winner's `layout` record, `same_layout`, `base_step_time_s`, `step_time_s`,
`step_time_rel_change` ((what-if - base) / base), and `base_layout_step_time_s` /
`base_layout_fits` (the base winner kept on the scaled hardware).
"""

V5P = "solve --model llama70b --cluster v5p-8192 --tokens 15e12 --price-per-device-hour 2.0"
NOTES = "estimate --model llama70b --cluster v5p-8192 --layout fsdp=1024,tp=8 --tokens 15e12 --price-per-device-hour 2.0"
H100 = (
    "solve --model llama70b --cluster h100-1024 --top 1 --tokens 15e12 --price-per-device-hour 3.0"
)
HALF_NIC = "solve --model llama3-8b --cluster h100-64 --top 1 --what-if scale_out_bandwidth=0.5"
TWENTIETH_NIC = (
    "solve --model llama3-8b --cluster h100-64 --top 1 --what-if scale_out_bandwidth=0.05"
)
HALF_ICI = "solve --model llama70b --cluster v5p-8192 --top 1 --what-if link_bandwidth=0.5"
SENS_H100 = "explain --model llama3-8b --cluster h100-64 --sensitivity"
SENS_V5P = "explain --model llama70b --cluster v5p-8192 --sensitivity"


def layout_text(record: dict) -> str:
    """`fsdp=64, ZeRO-2, K=8, recompute none`: what the prose names of a layout record."""
    degrees = ", ".join(f"{k}={v}" for k, v in record["degrees"].items() if v > 1) or "one device"
    return (
        f"{degrees}, ZeRO-{record['zero_stage']}, K={record['num_microbatches']}, "
        f"recompute {record['recompute']}"
    )


def pct(x: float) -> str:
    return f"{x:+.1%}"


def time_to_train(j) -> list:
    """The prose and commands of time_to_train.md, the prose's numbers from the commands' JSON."""
    v5p, h100 = j(V5P)["layouts"][0], j(H100)["layouts"][0]
    notes = j(NOTES)["layout"]
    slower = notes["time_s"]["step"] / v5p["time_s"]["step"] - 1
    per_chip = v5p["tokens_per_s"] / 8192
    per_gpu = h100["tokens_per_s"] / 1024
    return [
        INTRO_TIME_TO_TRAIN
        + "\n"
        + f"""## Llama 3 70B on 8192 TPU v5p chips, 15T tokens at 2.0 per chip-hour

Layout 1 streams {v5p["tokens_per_s"]:,.0f} tokens/s at a goodput of {v5p["goodput"]:.4f} (a failure
every {v5p["job_mtbf_h"]:.1f} h, a {v5p["checkpoint_time_s"]:.1f} s checkpoint every {v5p["checkpoint_interval_s"]:.0f} s):
15e12 / {v5p["tokens_per_s"]:,.0f} / {v5p["goodput"]:.4f} / 86400 = {v5p["train_days"]:.1f} days; x 24 x 8192 = {v5p["device_hours"]:,.0f} chip-hours; x 2.0 = {v5p["cost"]:,.0f}.
""",
        V5P,
        f"""## The design notes' layout (fsdp=1024, tp=8) for the same run

`estimate` prints the days, device-hours and cost under the step-time breakdown: this layout
is {slower:.1%} slower than the solver's ({notes["time_s"]["step"]:.4f} s against
{v5p["time_s"]["step"]:.4f} s per step), so it takes {notes["train_days"]:.1f} days and costs
{notes["cost"] / 1e6:.1f} M instead of {v5p["cost"] / 1e6:.1f} M.
""",
        NOTES,
        f"""## The same run on 1024 H100s at 3.0 per GPU-hour

Each H100 streams {per_gpu:,.0f} tokens/s here against {per_chip:,.0f} per v5p chip, but there are
8x fewer of them: {h100["train_days"]:.1f} days instead of {v5p["train_days"]:.1f}, for
{h100["device_hours"] / 1e6:.1f} M GPU-hours ({h100["cost"] / 1e6:.1f} M at 3.0) against
{v5p["device_hours"] / 1e6:.1f} M chip-hours ({v5p["cost"] / 1e6:.1f} M at 2.0).
""",
        H100,
    ]


def what_if_text(what_if: dict, base: dict) -> str:
    """One sentence on a what-if: same winner or which, its change, and the old winner's."""
    change = pct(what_if["step_time_rel_change"])
    if what_if["same_layout"]:
        return f"The winner stays ({layout_text(base)}); its step time changes by {change}."
    kept = what_if["base_layout_step_time_s"] / what_if["base_step_time_s"] - 1
    return (
        f"The old winner ({layout_text(base)}) would take {what_if['base_layout_step_time_s']:.2f} s "
        f"per step ({pct(kept)}); the re-solve picks {layout_text(what_if['layout'])}: {change}."
    )


def what_if(j) -> list:
    """The prose and commands of what_if.md, the prose's numbers from the commands' JSON."""
    half, twentieth, ici = j(HALF_NIC), j(TWENTIETH_NIC), j(HALF_ICI)
    sens_h100, sens_v5p = j(SENS_H100), j(SENS_V5P)
    v5p_best = sens_v5p["layouts"][0]["time_s"]
    return [
        INTRO_WHAT_IF
        + "\n"
        + f"""## Llama 3 8B on 64 H100s: half the scale-out bandwidth

{what_if_text(half["what_if"], half["layouts"][0])}
""",
        HALF_NIC,
        f"""## A twentieth of the scale-out bandwidth

{what_if_text(twentieth["what_if"], twentieth["layouts"][0])}
""",
        TWENTIETH_NIC,
        f"""## Llama 3 70B on v5p-8192: half the ICI bandwidth

Every collective of this single slice runs on ICI. {what_if_text(ici["what_if"], ici["layouts"][0])}
""",
        HALF_ICI,
        f"""## Sensitivity of the winner (explain --sensitivity)

`explain --sensitivity` re-costs layout 1 (held fixed, not re-solved) with each hardware
number alone x1.1 and prints the relative change of its step time; `--format json` adds
`sensitivity` (key -> relative change per +10%) and `sensitivity_factor` (1.1). On Llama 3 8B on
64 H100s, +10% FLOP/s gives {pct(sens_h100["sensitivity"]["peak_flops"])}, against the
{1 / 1.1 - 1:+.1%} (1/1.1 - 1) of pure compute.
""",
        SENS_H100,
        f"""Llama 3 70B on v5p-8192 has {v5p_best["exposed_comm"]:.3f} s of exposed communication per
{v5p_best["step"]:.3f} s step: +10% FLOP/s gives {pct(sens_v5p["sensitivity"]["peak_flops"])} and
+10% ICI bandwidth {pct(sens_v5p["sensitivity"]["link_bandwidth"])}.
""",
        SENS_V5P,
    ]


def run(command: str) -> str:
    """The command's stdout (it must exit 0)."""
    result = CliRunner().invoke(app, shlex.split(command))
    if result.exit_code != 0:
        raise SystemExit(f"layoutsearch {command}: exit {result.exit_code}: {result.stderr}")
    return "\n".join(line.rstrip() for line in result.stdout.rstrip("\n").splitlines())


def render(parts: list[str]) -> str:
    """Prose as is; each command as a console block with its output."""
    out = []
    for i, part in enumerate(parts):
        out.append(
            part.rstrip("\n") + "\n"
            if i % 2 == 0
            else f"```console\n$ layoutsearch {part}\n{run(part)}\n```\n"
        )
    return "\n".join(out)


def run_json(command: str) -> dict:
    """The command's JSON document."""
    return json.loads(run(f"{command} --format json"))


WALL = re.compile(r"wall [0-9.]+ s")


def keep_wall_times(new: str, old: str) -> str:
    """The new text, but a line that the old text holds but for the solver's wall time keeps the
    old line (wall times differ from run to run; everything else is deterministic)."""
    before = {WALL.sub("", line): line for line in old.split("\n")}
    return "\n".join(before.get(WALL.sub("", line), line) for line in new.split("\n"))


def main() -> None:
    for name, parts in (("time_to_train.md", time_to_train), ("what_if.md", what_if)):
        path = EXAMPLES / name
        old = path.read_text() if path.exists() else ""
        path.write_text(keep_wall_times(render(parts(run_json)), old))
        print(f"wrote examples/{name}")


if __name__ == "__main__":
    main()
