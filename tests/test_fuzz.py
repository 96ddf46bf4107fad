"""Fuzzing the command line: a seeded corpus of command lines over every command, mixing valid
and hostile values (huge, negative, zero, fractional, empty, unicode and NaN numbers; unknown
names; malformed degree lists; files that are not UTF-8, null, nested 10,000 deep, of the wrong
types, with a repeated key or an infinite number, directories, FIFOs; outputs that cannot be
written or are FIFOs), each run in this process through ``cli.main(argv)`` under a 120 s hang
guard (a case that does not return fails its own test as a hang naming the case; the guard never
aborts the run).

Every case must: print no traceback; exit 0, 1 or 2; on exit 2 print exactly one stderr line,
'error: ...', naming an option, a field, a path or the value given; with --format json (exit 0 or 1) print a
JSON document whose numbers are finite, below 1e30 and, except differences and errors, not
negative. The corpus is deterministic (SEED); small models and clusters keep it under a minute.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
from pathlib import Path

import pytest
import yaml
from builders import (
    DEBUG_H100_1_ESTIMATE,
    DEBUG_H100_8,
    DEBUG_H100_8_SOLVE,
    TINY_HF_CONFIG,
    sweep_argv,
)

from layoutsearch import cli
from layoutsearch.cli import calibrate as calibrate_command
from layoutsearch.cli.common import one_line
from layoutsearch.core.catalogue import catalogue_dir
from layoutsearch.sweep import expand_points, read_table, run_sweep

SEED = 20261130
CASES = 500
ALARM_S = 120.0  # a hang guard, not a speed test: generous on a loaded machine
REPO = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------- values
HUGE = ["99999999999999999999", str(2**63), str(2**70), "1e400", "9" * 40]
BAD_NUMBERS = [
    "0",
    "-1",
    "-0",
    "1.5",
    "1e3",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "",
    " ",
    "٣",
    "１２",
    "0x10",
    "1_000",
    "abc",
    "+8",
    "8 ",
    *HUGE,
]
SEQS = ["8", "16", "32", "64", "128"]
SEQ_LENS = ["512", "1024", "2048", "4096", "131072"]
MODELS = ["debug", "llama3-8b"]
BAD_MODELS = ["llama71b", "", "a" * 300, "../../etc/passwd", ".", "models/debug", "x\0y", "ü" * 130]
SMALL_CLUSTERS = [
    "h100-8",
    "v5p-8",
    "h100-1",
    "v5p-1",
    "h100-16",
    "v5p-16",
    "v5p:2x2x2",
    "v5p-8x2",
    "gb200-1",
    "gaudi3-8",
]
BAD_CLUSTERS = [
    "h100-12",
    "v5p-1000",
    "h100-0",
    "h100-99999999999999999999",
    "v5p:0x2x2",
    "foo-8",
    "",
    "v5p:2x2",
    "h100--8",
    "v5p-8x0",
    "v5p-4x100000",
    "h100-8\0",
    "a" * 300 + "-8",
    "h100-1e3",
]
BIG_CLUSTERS = [
    "v5p-8192",
    "h100-1024",
    "v5p-8960x4",
]  # estimate only: one layout is costed, nothing is searched
DEGREES = [
    "dp=8",
    "fsdp=4,tp=2",
    "tp=8",
    "pp=2,dp=4",
    "cp=2,fsdp=4",
    "dp=1",
    "fsdp=8",
    "dp=2,fsdp=2,tp=2",
    "fsdp=1024,tp=8",
    "pp=4,tp=2",
]
BAD_DEGREES = [
    "tp=8,tp=4",
    "tq=8",
    "tp",
    "tp=",
    "=8",
    "tp=-1",
    "tp=0",
    "tp=1e3",
    "tp=99999999999999999999",
    ",,,",
    "tp=８",
    "dp=3",
    "dp=16",
    ";",
    "dp=8;tp=1",
    "fsdp=262144,tp=262144,pp=262144,cp=262144,dp=262144",
    "dp=" + "9" * 5000,
]
AXES = ["dp=node:8", "tp=x:2;fsdp=y:2,z:2", "fsdp=node:8", "tp=node:8"]
BAD_AXES = [
    "dp=node:8;dp=node:8",
    "dp=:8",
    "dp=node",
    "tp=q:8",
    "dp=node:0",
    ";;",
    "dp=node:2,node:4",
    "xx",
    "dp=node:99999999999999999999",
    "dp=scale_out:8",
]
RECOMPUTE = [
    "none",
    "none,full",
    "selective",
    "full,full",
    "minimal,op",
    "save_dot_except_mlpwi",
    "qkv_proj_offloaded",
    "custom_offload_input,full",
    "norm_act,norm_moe,mla_up_proj",
]
BAD_RECOMPUTE = [",", "", "most", "none;full"]
ONLY = ["fsdp,tp", "dp", "fsdp,tp,pp,cp,dp"]
BAD_ONLY = ["tq", ",", ""]
CHOICES = ["tp=1,2;pp=1,2", "tp=2,4", "fsdp=1,2,4,8", "cp=1"]
BAD_CHOICES = ["8", ";", "tp=1,2;tp=4", "tp=99999999999999999999", "tp=0", "tq=1", "tp=a"]
FIX = ["tp=2", "pp=1", "tp=1,pp=1", "dp=8"]
BAD_FIX = ["tp=3", "tp=8,tp=4", "tp=0", "tp=16", "tp", "tp=99999999999999999999"]
TOKENS = ["15e12", "1e9", "1e18"]
BAD_TOKENS = ["-1e12", "nan", "inf", "0", "1e400", "abc", "1e19", "-inf"]
FAILURE_RATES = ["0", "1.9733e-5", "1e-3"]
BAD_FAILURE_RATES = ["-1e-5", "nan", "0.5", "inf", "abc", "1e400"]
RESTART_TIMES = ["0", "600", "3600"]
BAD_RESTART_TIMES = ["-1", "nan", "1e7", "x"]
CHECKPOINT_MODES = ["blocking", "async"]
BAD_CHECKPOINT_MODES = ["sync", "", "BLOCKING"]
WRITE_BANDWIDTHS = ["0.977", "50", "1e-3"]
BAD_WRITE_BANDWIDTHS = ["0", "-1", "nan", "1e5", "inf"]
PRICES = ["0", "0.12", "2.0"]
BAD_PRICES = ["-0.1", "nan", "1e400", "abc"]
POWER_LIMITS = ["500", "300"]  # an H100's 700 W rating and the others': caps below and above
BAD_POWER_LIMITS = ["0", "-5", "nan", "1e9", "x"]
SITE_POWERS = ["0.005", "10"]  # 8 H100 at 700 W draw 0.0056 MW
BAD_SITE_POWERS = ["0", "-1", "inf", "x"]
FALLBACK_NODES = ["0", "1"]  # the small clusters have one or two nodes
BAD_FALLBACK_NODES = ["-1", "2", "65", "1.5", "99999999999999999999", "x"]
VERSUS = ["dp=8", "fsdp=8", "tp=2,fsdp=4", "dp=16", "fsdp=4,tp=4", "tp=8,pp=2"]
PLAN_FORMATS = ["table", "json", "yaml", "markdown"]
BAD_PLAN_FORMATS = ["pdf", "md", ""]
PLAN_OUTPUTS = ["@out/plan.md", "@out/plan.markdown", "@out/plan.json"]
TIME_LIMITS = ["5", "1", "0.5"]
BAD_TIME_LIMITS = ["nan", "inf", "-1", "0", "1e9", "0.05", "abc"]
TARGETS = ["megatron", "maxtext", "torchtitan", "torchtitan-0.3", "deepspeed"]
BAD_TARGETS = ["foo", "", "megatronn", "MEGATRON"]
RANKS = ["1", "2"]
BAD_RANKS = ["0", "-1", "3", "99999999999999999999", "x", "1.0"]
FITS = ["matmul_efficiency", "matmul_efficiency,attention_efficiency", "step_overhead_s"]
BAD_FITS = [",", "matmul_eficiency", ""]
ACCELERATORS = ["h100", "a100-40gb", "h100,a100-40gb"]
BAD_ACCELERATORS = [",", "foo", "", "h100,foo"]

MODEL_FILES = ["@model_ok.yaml", "@hf_ok.json", "@chunked_ok.yaml"]
BAD_MODEL_FILES = [
    "@nonutf8.yaml",
    "@nonutf8.json",
    "@null.json",
    "@deep.json",
    "@heads0.json",
    "@headsnull.json",
    "@headsstr.json",
    "@list.json",
    "@wrongtype.yaml",
    "@big.yaml",
    "@string.yaml",
    "@empty.yaml",
    "@deep.yaml",
    "@dir.yaml",
    "@dir.json",
    "@missing.yaml",
    "@missing.json",
    "@hfbig.json",
    "@hugeparams.yaml",
    "@unknownkey.yaml",
    "@badyaml.yaml",
    "@fifo.yaml",
    "@dupkey.yaml",
    "@window_and_chunk.yaml",
    "@nope_odd.yaml",
]
RESULTS = ["@solve.json", "@estimate.json", "@doc_null_predictions.json"]
BAD_RESULTS = [
    "@nonutf8.json",
    "@null.json",
    "@deep.json",
    "@dir.json",
    "@missing.json",
    "@list.json",
    "@doc_microbatches_null.json",
    "@doc_virtual0.json",
    "@doc_seqs1e30.json",
    "@doc_degree_str.json",
    "@doc_layouts5.json",
    "@doc_problem_list.json",
    "@doc_axes_bad.json",
    "@doc_rank_str.json",
    "@doc_cluster_bad.json",
    "@doc_model_spec_big.json",
    "@doc_mfu_str.json",
    "@doc_nan.json",
    "@doc_degrees_huge.json",
    "@doc_empty_layouts.json",
    "@fifo.json",
]
RUNS = ["@runs.yaml"]
BAD_RUNS = [
    "@nonutf8.yaml",
    "@runs_wrongtype.yaml",
    "@runs_huge.yaml",
    "@empty.yaml",
    "@list_ints.yaml",
    "@deep.yaml",
    "@dir.yaml",
    "@missing.yaml",
    "@runs_dup.yaml",
    "@null.json",
    "@badyaml.yaml",
    "@fifo.yaml",
    "@runs_inf.yaml",
]
SWEEP_FILES = ["@sweep.csv"]
BAD_SWEEP_FILES = [
    "@garbage.csv",
    "@nonutf8.csv",
    "@empty.csv",
    "@garbage.parquet",
    "@header.csv",
    "@dir.csv",
    "@missing.csv",
    "@sweep.json",
    "@nan.csv",
    "@negative.csv",
    "@fifo.csv",
]
OUTPUTS = ["@out/a.sh", "@out/b.yml", "@out/c.toml", "@out/d.json"]
BAD_OUTPUTS = ["/nonexistent/x.sh", "/proc/x.sh", "@dir", "@out/a\0b.sh", "@out", "@fifo.sh"]
SWEEP_OUTPUTS = ["@sw/a.csv", "@sw/b.csv", "@sw/c.parquet"]
BAD_SWEEP_OUTPUTS = [
    "x.json",
    "/nonexistent/s.csv",
    "/proc/s.csv",
    "@dir.csv",
    "@garbage_out.csv",
    "@sw",
    "@fifo.csv",
]
PNG_OUTPUTS = ["@out/p.png"]
BAD_PNG_OUTPUTS = ["/nonexistent/p.png", "@dir", "/proc/p.png"]


# ----------------------------------------------------------------------------- the corpus
DEVICES = {
    "h100-8": 8,
    "v5p-8": 8,
    "h100-1": 1,
    "v5p-1": 1,
    "h100-16": 16,
    "v5p-16": 16,
    "v5p:2x2x2": 8,
    "v5p-8x2": 16,
    "gb200-1": 1,
    "gaudi3-8": 8,
    "v5p-8192": 8192,
    "h100-1024": 1024,
    "v5p-8960x4": 35840,
}


class Gen:
    """Draws command lines. A case is valid (about 40 %) or carries one to three hostile values: each
    option is present with its probability. A positional argument's value is drawn from the hostile
    list (with probability 1 - p_ok) while the case's budget of hostile values lasts; what is left of
    the budget goes to options drawn at random among those the case has, so a late option is made
    hostile as often as an early one. Switches (options without a value) are drawn from a stream of
    their own, so adding one leaves the valued draws as they were."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.switch_rng = random.Random(rng.random())
        self.bad_left = 0
        self.force_bad = False  # the option value being drawn is one the budget made hostile
        self.in_options = False  # option values: hostile only where the budget chose them

    def case(self, command: str) -> list[str]:
        self.bad_left = self.rng.choice([0, 0, 1, 1, 1, 2, 3])
        return getattr(self, command)()

    def pick(self, good: list[str], bad: list[str], p_ok: float = 0.7) -> str:
        if bad and self.force_bad:
            return self.rng.choice(bad)
        if bad and self.bad_left and not self.in_options and self.rng.random() >= p_ok:
            self.bad_left -= 1
            return self.rng.choice(bad)
        return self.rng.choice(good)

    def number(self, good: list[str], p_ok: float = 0.8) -> str:
        return self.pick(good, BAD_NUMBERS, p_ok)

    def degrees(self, devices: int | None) -> str:
        """Degrees whose product is ``devices`` (its prime factors dealt out at random), else a listed layout."""
        if devices is None or self.rng.random() < 0.2 or self.force_bad:
            return self.pick(DEGREES, BAD_DEGREES, 0.6)
        if self.bad_left and not self.in_options and self.rng.random() < 0.4:
            return self.pick([], BAD_DEGREES, 0.0)
        degrees, n, p = {}, devices, 2
        while n > 1:
            while n % p == 0:
                name = self.rng.choice(["dp", "fsdp", "fsdp", "tp", "pp", "cp"])
                degrees[name] = degrees.get(name, 1) * p
                n //= p
            p += 1
        return ",".join(f"{k}={v}" for k, v in degrees.items()) or "dp=1"

    def options(self, argv: list[str], specs: list[tuple[str, callable, float]]) -> list[str]:
        drawn = [
            (flag, value)
            for flag, value, probability in specs
            if (self.switch_rng if value is None else self.rng).random() < probability
        ]
        valued = [i for i, (_, value) in enumerate(drawn) if value is not None]
        hostile = set(self.rng.sample(valued, min(self.bad_left, len(valued))))
        self.bad_left -= len(hostile)
        self.in_options = True
        for i, (flag, value) in enumerate(drawn):
            self.force_bad = i in hostile
            argv += [flag] if value is None else [flag, value()]
        self.in_options = self.force_bad = False
        return argv

    def noise(self, argv: list[str]) -> list[str]:
        """Now and then: an unknown option, a stray argument, a repeated option, a dropped token."""
        r = self.rng.random()
        if r < 0.03:
            argv.insert(self.rng.randrange(1, len(argv) + 1), "--bogus")
        elif r < 0.05:
            argv.append("stray")
        elif r < 0.07 and len(argv) > 2:
            del argv[self.rng.randrange(1, len(argv))]
        elif r < 0.09 and len(argv) > 2 and argv[-2].startswith("-"):
            argv += argv[-2:]
        return argv

    # one method per command ------------------------------------------------------------
    def models(self) -> list[str]:
        return self.options(
            ["models"], [("--format", lambda: self.pick(["table", "json"], ["xml", ""]), 0.6)]
        )

    def clusters(self) -> list[str]:
        return self.options(
            ["clusters"], [("--format", lambda: self.pick(["table", "json"], ["yaml"]), 0.6)]
        )

    def model(self) -> str:
        return self.pick(MODELS * 4 + MODEL_FILES, BAD_MODEL_FILES * 2 + BAD_MODELS, 0.6)

    def estimate(self) -> list[str]:
        cluster = self.pick(SMALL_CLUSTERS + BIG_CLUSTERS, BAD_CLUSTERS, 0.85)
        argv = self.estimate_options(cluster)
        pp = re.search(r"\bpp=(\d+)", " ".join(argv))
        if pp and "--microbatches" not in argv and self.rng.random() < 0.8:  # a pipeline that fills
            argv += ["--microbatches", str(int(pp[1]) * self.rng.choice([1, 2]))]
        return argv

    def estimate_options(self, cluster: str) -> list[str]:
        return self.options(
            ["estimate", "--cluster", cluster],
            [
                ("--model", self.model, 0.9),
                ("--layout", lambda: self.degrees(DEVICES.get(cluster)), 0.95),
                ("--seqs", lambda: self.number(SEQS + ["1024"]), 0.7),
                ("--seq-len", lambda: self.number(SEQ_LENS), 0.4),
                ("--microbatches", lambda: self.number(["1", "2", "4"]), 0.3),
                (
                    "--recompute",
                    lambda: self.pick(["none", "selective", "full"], ["most", ""]),
                    0.3,
                ),
                ("--zero-stage", lambda: self.number(["0", "1", "2", "3"], 0.6), 0.3),
                ("--virtual-stages", lambda: self.number(["1", "2"]), 0.2),
                (
                    "--schedule",
                    lambda: self.pick(["1f1b", "interleaved", "gpipe"], ["zigzag"]),
                    0.2,
                ),
                ("--no-sequence-parallel", None, 0.1),
                ("--axes", lambda: self.pick(AXES, BAD_AXES, 0.5), 0.2),
                (
                    "--mfu-convention",
                    lambda: self.pick(["model", "palm", "palm-causal"], ["hardware"]),
                    0.2,
                ),
                ("--tokens", lambda: self.pick(TOKENS, BAD_TOKENS, 0.6), 0.25),
                ("--tp-comm-overlap", None, 0.15),
                *self.workload_options(),
                *self.goodput_options()[1:],
                ("--first-stage-layers", lambda: self.number(["1", "2", "3"]), 0.1),
                ("--format", lambda: self.pick(["table", "json"], ["yaml"], 0.9), 0.6),
            ],
        )

    def workload_options(self) -> list:
        """The workload options estimate, solve, explain and sweep share (core.options.WorkloadOptions)."""
        return [
            (
                "--framework",
                lambda: self.pick(
                    ["megatron", "ideal", "maxtext", "deepspeed", "torchtitan"], ["nemo", ""]
                ),
                0.15,
            ),
            ("--precision", lambda: self.pick(["bf16", "fp8", "fp4"], ["fp2", "int8"], 0.85), 0.15),
            ("--fp4-recipe", lambda: self.pick(["nvfp4", "mxfp4"], ["nv", ""], 0.8), 0.05),
            ("--power-limit-w", lambda: self.pick(POWER_LIMITS, BAD_POWER_LIMITS, 0.7), 0.1),
            (
                "--hbm-gib",
                lambda: self.pick(["96", "16", "141"], ["0", "-3", "nan", "1e9"], 0.7),
                0.1,
            ),
            ("--memory-margin-gib", lambda: self.pick(["0", "4"], ["-1", "inf"], 0.7), 0.1),
            ("--grad-bytes", lambda: self.pick(["2", "4"], ["3x", "8"], 0.7), 0.1),
            ("--deepep", None, 0.05),
            ("--no-deepep", None, 0.05),
            ("--launch-blocking", None, 0.05),
            ("--vendor-attention", None, 0.05),
            ("--no-vendor-attention", None, 0.05),
            ("--triton-attention", None, 0.05),
            ("--torch-compile", None, 0.05),
            ("--no-torch-compile", None, 0.05),
            (
                "--cuda-graphs",
                lambda: self.pick(["none", "scoped", "full_iteration"], ["full", ""], 0.8),
                0.1,
            ),
            ("--routing", lambda: self.pick(["learned", "forced"], ["balanced", ""], 0.8), 0.1),
            (
                "--routing-cv",
                lambda: self.pick(["0", "0.15", "0.6"], ["-0.1", "nan", "11", "x"], 0.7),
                0.1,
            ),
        ]

    def goodput_options(self) -> list:
        """The plan options estimate, solve, explain and plan share (core.options.GOODPUT_OPTIONS),
        with --tokens that makes them count."""
        return [
            ("--tokens", lambda: self.pick(TOKENS, BAD_TOKENS, 0.8), 0.4),
            (
                "--failure-rate-per-device-hour",
                lambda: self.pick(FAILURE_RATES, BAD_FAILURE_RATES, 0.7),
                0.2,
            ),
            ("--restart-time-s", lambda: self.pick(RESTART_TIMES, BAD_RESTART_TIMES, 0.7), 0.15),
            (
                "--checkpoint-mode",
                lambda: self.pick(CHECKPOINT_MODES, BAD_CHECKPOINT_MODES, 0.8),
                0.15,
            ),
            (
                "--checkpoint-write-gbytes-per-s-per-node",
                lambda: self.pick(WRITE_BANDWIDTHS, BAD_WRITE_BANDWIDTHS, 0.7),
                0.15,
            ),
            ("--price-per-device-hour", lambda: self.pick(PRICES, BAD_PRICES, 0.8), 0.1),
            ("--price-per-kwh", lambda: self.pick(PRICES, BAD_PRICES, 0.7), 0.15),
        ]

    def search(self, command: str) -> list[str]:
        specs = [
            ("--model", self.model, 0.9),
            (
                "--cluster",
                lambda: self.pick(SMALL_CLUSTERS, BAD_CLUSTERS, 0.85),
                1.0,
            ),  # never the default v5p-8192
            ("--seqs", lambda: self.number(SEQS), 1.0),
            ("--seq-len", lambda: self.number(SEQ_LENS), 0.4),
            ("--top", lambda: self.number(["1", "2", "3"]), 0.4),
            ("--fix", lambda: self.pick(FIX, BAD_FIX, 0.6), 0.2),
            ("--choices", lambda: self.pick(CHOICES, BAD_CHOICES, 0.6), 0.2),
            ("--only", lambda: self.pick(ONLY, BAD_ONLY, 0.6), 0.2),
            (
                "--objective",
                lambda: self.pick(
                    ["step-time", "gather-volume", "time-to-train", "energy"], ["speed"]
                ),
                0.2,
            ),
            ("--time-limit", lambda: self.pick(TIME_LIMITS, BAD_TIME_LIMITS, 0.7), 0.5),
            ("--method", lambda: self.pick(["cpsat", "enumerate"], ["magic"]), 0.2),
            ("--recompute", lambda: self.pick(RECOMPUTE, BAD_RECOMPUTE, 0.6), 0.25),
            ("--tp-comm-overlap", None, 0.1),
            *self.workload_options(),
        ]
        specs += self.goodput_options()
        fallback = ("--fallback-nodes", lambda: self.pick(FALLBACK_NODES, BAD_FALLBACK_NODES), 0.3)
        if command == "solve":
            specs += [
                ("--format", lambda: self.pick(["table", "json", "yaml"], ["xml"], 0.9), 0.6),
                ("--export", lambda: self.pick(TARGETS, BAD_TARGETS, 0.7), 0.3),
                ("-o", lambda: self.pick(OUTPUTS, BAD_OUTPUTS, 0.6), 0.3),
                fallback,
            ]
        elif command == "plan":
            specs += [
                ("--format", lambda: self.pick(PLAN_FORMATS, BAD_PLAN_FORMATS, 0.85), 0.6),
                ("-o", lambda: self.pick(PLAN_OUTPUTS, BAD_OUTPUTS, 0.6), 0.3),
                fallback,
            ]
        else:
            specs += [
                ("--format", lambda: self.pick(["table", "json"], ["yaml"], 0.9), 0.6),
                ("--versus", lambda: self.pick(VERSUS, BAD_DEGREES, 0.6), 0.25),
            ]
        return self.options([command], specs)

    def solve(self) -> list[str]:
        return self.search("solve")

    def explain(self) -> list[str]:
        return self.search("explain")

    def plan(self) -> list[str]:
        return self.search("plan")

    def export(self) -> list[str]:
        return self.options(
            ["export", self.pick(RESULTS, BAD_RESULTS, 0.45)],
            [
                ("--to", lambda: self.pick(TARGETS, BAD_TARGETS, 0.85), 0.95),
                ("--rank", lambda: self.pick(RANKS, BAD_RANKS, 0.6), 0.4),
                ("-o", lambda: self.pick(OUTPUTS, BAD_OUTPUTS, 0.6), 0.4),
            ],
        )

    def validate(self) -> list[str]:
        return self.options(
            ["validate", self.pick(RUNS, BAD_RUNS, 0.5)],
            [
                (
                    "--max-median-error",
                    lambda: self.pick(["0.1", "1.0", "0"], ["nan", "inf", "-0.5", "abc"], 0.7),
                    0.4,
                ),
                ("--no-rank", None, 0.6),
                ("--format", lambda: self.pick(["table", "json"], ["yaml"], 0.9), 0.6),
            ],
        )

    def calibrate(self) -> list[str]:
        return self.options(
            ["calibrate", self.pick(RUNS, BAD_RUNS, 0.5)],
            [
                ("--accelerator", lambda: self.pick(ACCELERATORS, BAD_ACCELERATORS, 0.7), 0.5),
                ("--fit", lambda: self.pick(FITS, BAD_FITS, 0.7), 0.4),
                ("--write", None, 0.3),  # into a copy of hardware/ (see the fixture)
            ],
        )

    def sweep(self) -> list[str]:
        argv = ["sweep"]
        argv += [
            "-m",
            self.pick(
                ["debug", "llama3-8b", "debug,llama3-8b"],
                ["llama71b", "", "a|b", "debug,", "@model_ok.yaml", "@nonutf8.yaml"],
                0.75,
            ),
        ]
        for _ in range(self.rng.choice([1, 1, 2])):
            argv += [
                "-c",
                self.pick(
                    ["h100-8", "v5p-8", "h100-{8..16:x2}", "v5p-{8..16:+8}", "h100-1"],
                    [
                        "h100-{8..64:*2}",
                        "h100-{1..10000}{1..10000}",
                        "h100-12",
                        "h100-{16..8}",
                        "h100-{8..8:x1}",
                        "h100-}",
                        "v5p-{1..99999999999999999999999999999999}",
                        "",
                        "h100-{0..8:x2}",
                    ],
                    0.7,
                ),
            ]
        argv += ["-o", self.pick(SWEEP_OUTPUTS, BAD_SWEEP_OUTPUTS, 0.7)]
        return self.options(
            argv,
            [
                (
                    "--seqs",
                    lambda: self.pick(
                        ["64", "32,64", "{32..64:x2}"],
                        ["0", "abc", "100000000", "64,,", "{1..0}", "9" * 40, "٣"],
                        0.75,
                    ),
                    0.8,
                ),
                (
                    "--seq-len",
                    lambda: self.pick(["4096", "2048,4096"], ["0", "4194304", "x"], 0.8),
                    0.3,
                ),
                (
                    "--jobs",
                    lambda: self.pick(["1"], ["0", "-1", "99999999999999999999"], 0.85),
                    0.9,
                ),
                ("--executor", lambda: self.pick(["local"], ["dask", ""], 0.8), 0.2),
                ("--time-limit", lambda: self.pick(TIME_LIMITS, BAD_TIME_LIMITS, 0.7), 0.4),
                (
                    "--max-site-power-mw",
                    lambda: self.pick(SITE_POWERS, BAD_SITE_POWERS, 0.7),
                    0.2,
                ),
                ("--fresh", None, 0.15),
                ("--retry-failed", None, 0.15),
                ("--no-progress", None, 0.8),
            ],
        )

    def plot(self) -> list[str]:
        return self.options(
            ["plot", self.pick(SWEEP_FILES, BAD_SWEEP_FILES, 0.3)],
            [
                ("-o", lambda: self.pick(PNG_OUTPUTS, BAD_PNG_OUTPUTS, 0.6), 0.9),
            ],
        )


WEIGHTS = {
    "models": 3,
    "clusters": 3,
    "estimate": 22,
    "solve": 14,
    "plan": 8,
    "explain": 9,
    "export": 14,
    "validate": 7,
    "calibrate": 6,
    "sweep": 11,
    "plot": 6,
}


# Root causes found by this fuzzer, kept whatever the draw (one per cause).
PINNED = [
    list(DEBUG_H100_1_ESTIMATE),
    ["solve", "--model", "debug", "--cluster", "v5p-1", "--seqs", "8", "--format", "json"],
    ["estimate", "--model", "@nonutf8.yaml", "--cluster", "h100-8"],
    ["estimate", "--model", "@deep.json", "--cluster", "h100-8"],
    ["estimate", "--model", "@deep.yaml", "--cluster", "h100-8"],
    ["estimate", "--model", "@heads0.json", "--cluster", "h100-8"],
    ["estimate", "--model", "@hugeparams.yaml", "--cluster", "h100-8"],
    ["estimate", "--model", "@window_and_chunk.yaml", "--cluster", "h100-8"],
    [
        "solve",
        "--model",
        "@chunked_ok.yaml",
        "--cluster",
        "h100-8",
        "--seq-len",
        "131072",
        "--format",
        "json",
    ],
    ["estimate", "--model", "a" * 300, "--cluster", "h100-8"],
    ["estimate", "--model", "x\0.yaml", "--cluster", "h100-8"],
    ["estimate", "--layout", "tp=99999999999999999999", "--cluster", "h100-8"],
    ["estimate", "--zero-stage", "99999999999999999999", "--cluster", "h100-8"],
    ["estimate", "--tokens", "nan", "--cluster", "h100-8", "--layout", "dp=8"],
    ["solve", "--seqs", "100000000", "--cluster", "h100-8"],
    ["solve", "--recompute", ",", "--cluster", "h100-8"],
    ["solve", "--fix", "tp=8,tp=4", "--cluster", "h100-8"],
    [*DEBUG_H100_8_SOLVE, "--export", "megatron", "-o", "/proc/x.sh"],
    [*DEBUG_H100_8_SOLVE, "--export", "megatron", "--format", "json"],
    ["export", "@nonutf8.json", "--to", "megatron"],
    ["export", "@null.json", "--to", "megatron"],
    ["export", "@doc_null_predictions.json", "--to", "megatron"],
    ["export", "@doc_rank_str.json", "--to", "megatron"],
    ["export", "@solve.json", "--to", "megatron", "-o", "@dir"],
    ["validate", "@deep.yaml"],
    ["calibrate", "@runs_huge.yaml", "--write"],
    ["sweep", "-m", "debug", "-c", "h100-{1..10000}{1..10000}", "-o", "@sw/a.csv"],
    sweep_argv("@garbage_out.csv"),
    ["plot", "@negative.csv", "-o", "@out/p.png"],
    ["models", "json"],
]


SMALL = ["--model", "debug", "--cluster", "h100-16", "--seqs", "64"]  # two nodes of 8 GPUs
GOODPUT_RUN = ["estimate", *SMALL, "--layout", "dp=16", "--tokens", "1e9"]
# Issue 33's options, each with a bad value and the flag its one-line error must name; kept in
# the corpus whatever the draw.
BAD_PLAN_OPTIONS = [
    ([*GOODPUT_RUN, "--failure-rate-per-device-hour", "-1e-5"], "--failure-rate-per-device-hour"),
    ([*GOODPUT_RUN, "--failure-rate-per-device-hour", "nan"], "--failure-rate-per-device-hour"),
    ([*GOODPUT_RUN, "--restart-time-s", "-1"], "--restart-time-s"),
    ([*GOODPUT_RUN, "--checkpoint-mode", "sync"], "--checkpoint-mode"),
    (
        [*GOODPUT_RUN, "--checkpoint-write-gbytes-per-s-per-node", "0"],
        "--checkpoint-write-gbytes-per-s-per-node",
    ),
    ([*GOODPUT_RUN, "--price-per-kwh", "-0.1"], "--price-per-kwh"),
    (["solve", *SMALL, "--fallback-nodes", "2"], "--fallback-nodes"),  # one node at most
    (["solve", *SMALL, "--fallback-nodes", "-1"], "--fallback-nodes"),
    (["explain", *SMALL, "--versus", "tq=2"], "--versus"),
    (["explain", *SMALL, "--versus", "tp=3"], "--versus"),
    (["plan", *SMALL, "--format", "pdf"], "--format"),
    (["plan", *SMALL, "--fallback-nodes", "65"], "--fallback-nodes"),
    (["plan", *SMALL, "--restart-time-s", "inf"], "--restart-time-s"),
    (["plan", *SMALL, "--price-per-kwh", "abc"], "--price-per-kwh"),
]


def corpus(seed: int = SEED, n: int = CASES) -> list[list[str]]:
    """PINNED and BAD_PLAN_OPTIONS, then one drawn case per command, then drawn cases (by WEIGHTS)
    up to ``n``."""
    rng = random.Random(seed)
    gen = Gen(rng)
    names, weights = zip(*WEIGHTS.items())
    cases = (
        [list(argv) for argv in PINNED]
        + [list(argv) for argv, _ in BAD_PLAN_OPTIONS]
        + [gen.case(name) for name in names]
    )  # every command at least once
    while len(cases) < n:
        cases.append(gen.noise(gen.case(rng.choices(names, weights)[0])))
    return cases


CORPUS = corpus()


# ----------------------------------------------------------------------------- the files
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The files the corpus names with '@': valid, hostile and unwritable."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "out").mkdir()
    (root / "cwd").mkdir()
    (root / "sw").mkdir()
    for name in ("dir", "dir.yaml", "dir.json", "dir.csv"):
        (root / name).mkdir()
    for name in ("nonutf8.yaml", "nonutf8.json", "nonutf8.csv"):
        (root / name).write_bytes(b"\xff\xfe")
    (root / "null.json").write_text("null")
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "deep.json").write_text("[" * 10_000 + "]" * 10_000)
    (root / "deep.yaml").write_text("a: " + "[" * 10_000 + "]" * 10_000)
    hf = {**TINY_HF_CONFIG, "model_type": "llama"}
    (root / "hf_ok.json").write_text(json.dumps(hf))
    (root / "heads0.json").write_text(json.dumps({**hf, "num_attention_heads": 0}))
    (root / "headsnull.json").write_text(json.dumps({**hf, "num_attention_heads": None}))
    (root / "headsstr.json").write_text(json.dumps({**hf, "hidden_size": "256"}))
    (root / "hfbig.json").write_text(json.dumps({**hf, "vocab_size": 2**70}))
    debug = (REPO / "models" / "debug.yaml").read_text()
    (root / "model_ok.yaml").write_text(debug)
    (root / "wrongtype.yaml").write_text(debug.replace("d_model: 256", "d_model: [1]"))
    (root / "big.yaml").write_text(debug.replace("d_model: 256", f"d_model: {2**70}"))
    (root / "hugeparams.yaml").write_text(
        debug.replace("d_model: 256", "d_model: 16777216")
        .replace("vocab_size: 2048", "vocab_size: 16777216")
        .replace("num_layers: 8", "num_layers: 16777216")
    )
    (root / "unknownkey.yaml").write_text(debug + "experts: 8\n")
    # Llama 4's attention on the debug model: 256-token chunks, every 4th layer NoPE and full, q/k L2 norms
    chunked = "attention_chunk: 256\nfull_attention_layers: 2\nnope_layers: 2\nqk_norm: l2\n"
    (root / "chunked_ok.yaml").write_text(debug + chunked)
    (root / "window_and_chunk.yaml").write_text(debug + "sliding_window: 128\n" + chunked)
    (root / "nope_odd.yaml").write_text(debug + "nope_layers: 3\n")
    (root / "badyaml.yaml").write_text("a: [1\n")
    (root / "string.yaml").write_text("hello")
    (root / "empty.yaml").write_text("")
    (root / "list_ints.yaml").write_text("- 1\n- 2\n")
    (root / "dupkey.yaml").write_text(debug + "d_model: 512\n")
    for name in ("fifo.yaml", "fifo.json", "fifo.csv", "fifo.sh"):  # no writer: reading one blocks
        os.mkfifo(root / name)

    solve_doc = _document([*DEBUG_H100_8_SOLVE, "--top", "2", "--format", "json"])
    (root / "solve.json").write_text(json.dumps(solve_doc))
    argv = [
        "estimate",
        *DEBUG_H100_8,
        "--layout",
        "fsdp=4,tp=2",
        "--seqs",
        "64",
        "--format",
        "json",
    ]
    (root / "estimate.json").write_text(json.dumps(_document(argv)))
    for name, path, value in (
        ("doc_microbatches_null", ("layouts", 0, "num_microbatches"), None),
        ("doc_virtual0", ("layouts", 0, "virtual_stages"), 0),
        ("doc_seqs1e30", ("problem", "global_batch_seqs"), 1e30),
        ("doc_degree_str", ("layouts", 0, "degrees", "cp"), "8"),
        (
            "doc_degrees_huge",
            ("layouts", 0, "degrees"),
            {k: 262144 for k in ("dp", "fsdp", "tp", "pp", "cp")},
        ),
        ("doc_layouts5", ("layouts",), 5),
        ("doc_empty_layouts", ("layouts",), []),
        ("doc_problem_list", ("problem",), []),
        ("doc_axes_bad", ("layouts", 0, "axes"), {"cp": [["node", "eight"]]}),
        ("doc_rank_str", ("layouts", 0, "rank"), "1"),
        ("doc_cluster_bad", ("problem", "cluster"), "h100-99999999999999999999"),
        ("doc_model_spec_big", ("problem", "model_spec", "num_layers"), 2**70),
        ("doc_mfu_str", ("layouts", 0, "mfu"), "high"),
    ):
        doc = json.loads(json.dumps(solve_doc))
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        (root / f"{name}.json").write_text(json.dumps(doc))
    bare = json.loads(json.dumps(solve_doc))
    for record in bare["layouts"]:
        record.update(memory_bytes=None, time_s=None, mfu=None, fits=None)
        del record["rank"]
    (root / "doc_null_predictions.json").write_text(json.dumps(bare))
    (root / "doc_nan.json").write_text(
        json.dumps(solve_doc).replace('"mfu": 0.', '"mfu": NaN, "x": 0.', 1)
    )

    records = {
        r["id"]: r for r in yaml.safe_load((REPO / "tests" / "data" / "runs_dev.yaml").read_text())
    }
    runs = [
        records[i]
        for i in (
            "llmfoundry-mpt-h100-7b-seq2048-8gpu-mbs6-ga1",
            "llmfoundry-mpt-a100-40g-13b-seq4096-8gpu-mbs2-ga16",
        )
    ]
    (root / "runs.yaml").write_text(yaml.safe_dump(runs, sort_keys=False))
    wrong = json.loads(json.dumps(runs))
    wrong[0]["cluster"]["num_devices"] = "eight"
    (root / "runs_wrongtype.yaml").write_text(yaml.safe_dump(wrong, sort_keys=False))
    huge = json.loads(json.dumps(runs))
    huge[0]["cluster"]["num_devices"] = 2**70
    huge[1]["workload"]["global_batch_seqs"] = 2**70
    (root / "runs_huge.yaml").write_text(yaml.safe_dump(huge, sort_keys=False))
    (root / "runs_dup.yaml").write_text(yaml.safe_dump([runs[0], runs[0]], sort_keys=False))
    infinite = json.loads(json.dumps(runs))
    infinite[0]["measured"]["tokens_per_s_per_device"] = float("inf")
    (root / "runs_inf.yaml").write_text(yaml.safe_dump(infinite, sort_keys=False))

    run_sweep(
        expand_points("debug", "h100-{8..16:x2},h100-12", "32,64"),
        root / "sweep.csv",
        jobs=1,
        progress=False,
    )
    good = (root / "sweep.csv").read_text().splitlines()
    (root / "garbage.csv").write_text("a,b\n1,2\n")
    (root / "garbage_out.csv").write_text("point_id,model\nx,y\n")
    (root / "header.csv").write_text(good[0] + "\n")
    (root / "empty.csv").write_text("")
    (root / "garbage.parquet").write_bytes(b"PAR1 not really")
    (root / "sweep.json").write_text("{}")
    header = good[0].split(",")
    row = good[1].split(",")
    nan_row, negative_row = list(row), list(row)
    nan_row[header.index("mfu")] = "nan"
    negative_row[header.index("num_devices")] = "-8"
    (root / "nan.csv").write_text("\n".join([good[0], ",".join(nan_row)]) + "\n")
    (root / "negative.csv").write_text("\n".join([good[0], ",".join(negative_row)]) + "\n")

    shutil.copytree(catalogue_dir("hardware"), root / "hardware")
    return root


def _document(argv: list[str]) -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(argv) == 0
    return json.loads(out.getvalue())


def resolve(argv: list[str], root: Path) -> list[str]:
    """'@name' -> a path under the fixture's folder; '@out' and '@dir' are folders there."""
    return [str(root / a[1:]) if a.startswith("@") else a for a in argv]


# ----------------------------------------------------------------------------- the invariants
NAMED = re.compile(
    r"--[a-z][a-z-]*|'[^']*'|/|\b\w+\(-?\d+\)|\b(RESULT|RUNS|SWEEP_FILE|field|problem|layouts|record)\b"
)
SIGNED_KEYS = re.compile(r"difference|signed|error|delta|log_|residual|rel_|change|speedup", re.I)


def check_numbers(value, path: str = "") -> None:
    """Every number finite and below 1e30; not negative unless the key is a difference or an error."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_numbers(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_numbers(v, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        assert math.isfinite(value), f"{path} = {value}"
        assert abs(value) <= 1e30, f"{path} = {value}"
        assert value >= 0 or SIGNED_KEYS.search(path), f"{path} = {value} is negative"


class Hang(BaseException):
    """A case that did not return within ALARM_S seconds (a BaseException, so that no
    ``except Exception`` of the code under test swallows it)."""


def _alarm(signum, frame):
    raise Hang()


def run_guarded(argv: list[str], limit_s: float = ALARM_S) -> tuple[int | None, str | None]:
    """(exit code, None), or (None, why) when the case hangs. The timer is one-shot and disarmed
    in a finally, and the handler restored, whatever happens inside."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, limit_s)
            return cli.main(argv), None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang:
        return None, f"no answer within {limit_s:g} s"
    finally:
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("case", range(len(CORPUS)), ids=lambda i: f"{i:03d}-{CORPUS[i][0]}")
def test_fuzz_command_line(case, files, capsys, monkeypatch):
    """The case's invariants (module docstring); a hang fails this test alone, naming the case."""
    argv = resolve(CORPUS[case], files)
    monkeypatch.chdir(
        files / "cwd"
    )  # default outputs (plot's sweep.png) land there, not in the repository
    monkeypatch.setattr(
        calibrate_command, "catalogue_dir", lambda kind: files / kind
    )  # --write into a copy
    code, hang = run_guarded(argv)
    if hang is not None:
        pytest.fail(f"hang: case {case:03d} {argv!r}: {hang}", pytrace=False)
    out, err = capsys.readouterr()
    shown = f"argv={argv!r}\nexit={code}\nstderr={err[-2000:]!r}"
    assert "Traceback" not in out + err, shown
    assert code in (0, 1, 2), shown
    if code == 2:
        assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, shown
        message = err[len("error: ") :]
        given = [
            one_line(a)[:40] for a in argv[1:] if len(a.strip()) > 1
        ]  # as messages show them (escaped)
        named = NAMED.search(message) or any(g in message for g in given)
        assert named, f"the message names no option, field, path or value: {shown}"
    fmt = (
        argv[argv.index("--format") + 1]
        if "--format" in argv and argv.index("--format") + 1 < len(argv)
        else None
    )
    if code in (0, 1) and fmt == "json" and out.strip():
        check_numbers(json.loads(out))
    if argv[0] == "sweep" and code in (
        0,
        1,
    ):  # a point that failed by a bug would hide in its row's reason
        rows = read_table(argv[argv.index("-o") + 1], "-o")
        bugs = [
            r["reason"]
            for r in rows
            if re.match(r"[A-Z]\w*(Error|Exception)\b", r.get("reason") or "")
        ]
        assert not bugs, f"{bugs[0]}: {shown}"
    assert not [p.name for p in files.rglob("*.tmp")], f"a temporary file was left: {shown}"


@pytest.mark.parametrize(("argv", "flag"), BAD_PLAN_OPTIONS, ids=lambda v: " ".join(v[-2:]))
def test_a_bad_value_of_an_issue_33_option_is_exit_2_naming_its_flag(argv, flag, capsys):
    """Goodput, energy price, fallback, versus and plan options: a bad value exits 2 with one
    line, no traceback, that names the flag."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert flag in err, err


def test_the_corpus_draws_each_issue_33_option_good_and_bad():
    """Every drawn plan, each new option both with a valid value and with a hostile one (the power cap and the
    site budget among them), and the time-to-train and energy objectives."""
    drawn = CORPUS[len(PINNED) + len(BAD_PLAN_OPTIONS) :]
    assert sum(argv[0] == "plan" for argv in drawn) > 20
    pairs = {(a, b) for argv in drawn for a, b in zip(argv, argv[1:], strict=False)}
    for flag, good, bad in [
        ("--failure-rate-per-device-hour", FAILURE_RATES, BAD_FAILURE_RATES),
        ("--restart-time-s", RESTART_TIMES, BAD_RESTART_TIMES),
        ("--checkpoint-mode", CHECKPOINT_MODES, BAD_CHECKPOINT_MODES),
        ("--checkpoint-write-gbytes-per-s-per-node", WRITE_BANDWIDTHS, BAD_WRITE_BANDWIDTHS),
        ("--price-per-kwh", PRICES, BAD_PRICES),
        ("--fallback-nodes", FALLBACK_NODES, BAD_FALLBACK_NODES),
        ("--versus", VERSUS, BAD_DEGREES),
        ("--power-limit-w", POWER_LIMITS, BAD_POWER_LIMITS),
        ("--max-site-power-mw", SITE_POWERS, BAD_SITE_POWERS),
    ]:
        assert any((flag, v) in pairs for v in good), f"{flag}: no valid value drawn"
        assert any((flag, v) in pairs for v in bad), f"{flag}: no hostile value drawn"
    assert ("--format", "markdown") in pairs
    assert {("--objective", "time-to-train"), ("--objective", "energy")} <= pairs


def test_the_corpus_covers_every_command_and_mixes_valid_and_hostile_values():
    commands = {argv[0] for argv in CORPUS}
    assert commands == set(WEIGHTS) and len(CORPUS) == CASES
    hostile = sum(
        any(
            v in BAD_NUMBERS + BAD_DEGREES + BAD_CLUSTERS + BAD_MODELS
            or v.startswith("@")
            and v in BAD_MODEL_FILES + BAD_RESULTS + BAD_RUNS + BAD_SWEEP_FILES
            for v in argv
        )
        for argv in CORPUS
    )
    assert CASES // 4 < hostile < CASES * 3 // 4
