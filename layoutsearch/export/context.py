"""What every exporter needs from a solve/estimate document (OUTPUT.md), resolved once.

``ExportContext`` holds the model, the cluster, the chosen layout (with its axis placement)
and the batch, checked against the package's own structural rules; the exporters only map it
onto a framework's names. Units: sequences for batches, tokens for ``seq_len``, bytes and
seconds as in the layout record.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass, replace

from layoutsearch.core.check import check_layout
from layoutsearch.core.errors import InvalidArgumentError, InvalidLayoutError
from layoutsearch.core.placement import default_axes
from layoutsearch.core.problem import HasProblem, Problem, layout_from_record, version
from layoutsearch.core.specs import Layout
from layoutsearch.core.units import GB

OUTER_AXIS_KINDS = ("dcn", "scale_out")  # between slices (TPU) or between nodes (GPU)


@dataclass(frozen=True, kw_only=True)
class ExportContext(HasProblem):
    """One layout of one document, ready to be written in a framework's terms."""

    target: str
    problem: Problem
    layout: Layout  # axes filled in
    record: dict  # the layout record as written in the document

    @property
    def model_id(self) -> str:
        return self.problem.model_id

    @property
    def global_batch_seqs(self) -> int:
        """B: sequences per optimizer step, whole cluster."""
        return self.problem.workload.global_batch_seqs

    @property
    def seq_len(self) -> int:
        """S: tokens per sequence."""
        return self.problem.workload.seq_len

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    @property
    def microbatch_seqs(self) -> int:
        """Sequences per data unit (dp x fsdp group member) per microbatch."""
        lay = self.layout
        return self.global_batch_seqs // (lay.data_units * lay.num_microbatches)

    @property
    def shard_group(self) -> int:
        """Devices the ZeRO/FSDP state is sharded over: fsdp x cp (as in the cost model)."""
        return self.layout.fsdp * self.layout.cp

    @property
    def effective_zero_stage(self) -> int:
        """The ZeRO stage, or 0 when the shard group has one member (nothing is sharded)."""
        return self.layout.zero_stage if self.shard_group > 1 else 0

    def split(self, degree: str) -> tuple[int, int]:
        """(inner, outer) factors of a degree: inside a slice/node and across slices/nodes."""
        kinds = {a.name: a.kind for a in self.cluster.axes}
        inner = outer = 1
        for axis, factor in self.layout.placement(degree):
            if kinds.get(axis) in OUTER_AXIS_KINDS:
                outer *= factor
            else:
                inner *= factor
        return inner, outer

    def degree_pairs(self, **written: int) -> dict[str, tuple[int, int]]:
        """``mismatches`` pairs of the degrees a file writes (``tp=4``) and the layout's."""
        return {name: (value, getattr(self.layout, name)) for name, value in written.items()}

    def fail(self, message: str) -> InvalidLayoutError:
        """A one-line InvalidLayoutError naming the target and the layout rank."""
        return InvalidLayoutError(
            f"{self.target} export of layout rank {self.record.get('rank', '?')}: {message}"
        )


def pick_record(document: dict, rank: int) -> dict:
    """The layout record with ``rank`` from a solve document (``layouts``) or an estimate one (``layout``)."""
    if "layouts" in document:
        records = document["layouts"] or []
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise InvalidLayoutError(
                "document 'layouts': expected a list of layout records (OUTPUT.md)"
            )
        for rec in records:
            if rec.get("rank") == rank:
                return rec
        if 1 <= rank <= len(records) and "rank" not in records[rank - 1]:
            return records[rank - 1]
        ranks = ", ".join(repr(r.get("rank")) for r in records) or "none"
        raise InvalidLayoutError(
            f"--rank {rank}: no layout with rank {rank} in the document (ranks: {ranks})"
        )
    if "layout" in document:
        if rank != 1:
            raise InvalidLayoutError(
                f"--rank {rank}: an estimate document holds one layout (rank 1)"
            )
        return document["layout"]
    raise InvalidLayoutError(
        "document has neither 'layouts' (solve) nor 'layout' (estimate); see OUTPUT.md"
    )


def not_a_result(document: object) -> str | None:
    """Why ``document`` is not a solve or estimate result (their --format json writes a JSON object with a
    'problem' object; OUTPUT.md), or None: the one check the export command and the API share."""
    if not isinstance(document, dict):
        return f"a {type(document).__name__}, not a JSON object"
    if "problem" not in document:
        return "no 'problem' object"
    return None


def build_context(document: dict, target: str, rank: int = 1) -> ExportContext:
    """Resolve the problem and layout of ``document`` (validated field by field) and check the
    layout against the registry's rules."""
    why = not_a_result(document)
    if why is not None:
        raise InvalidArgumentError(
            f"document: not a result document (solve or estimate --format json; OUTPUT.md): {why}"
        )
    problem = Problem.from_record(document["problem"])
    record = pick_record(document, rank)
    layout = layout_from_record(record, f"layouts[rank {rank}]")
    violations = check_layout(problem, layout)
    if violations:
        raise InvalidLayoutError(
            f"layout rank {rank} breaks the package rules: "
            + "; ".join(v.message for v in violations)
        )
    if not layout.placed:
        layout = replace(layout, axes=default_axes(problem.cluster, layout))
    return ExportContext(target=target, problem=problem, layout=layout, record=record)


def header_lines(ctx: ExportContext) -> list[str]:
    """The provenance lines every file starts with: model, cluster, layout, predictions, version;
    names from user files (a Hugging Face ``_name_or_path``, an inline model) escaped by ``printable``."""
    lay, rec, model = ctx.layout, ctx.record, ctx.model
    nan = float("nan")  # a prediction the record leaves out (or null) is printed as nan
    mem = rec.get("memory_bytes") or {}
    step = (rec.get("time_s") or {}).get("step", nan)
    mfu = nan if rec.get("mfu") is None else rec["mfu"]
    degrees = " ".join(f"{k}={v}" for k, v in lay.all_degrees.items())
    pipeline = f", pp schedule {lay.schedule} x{lay.virtual_stages} virtual" if lay.pp > 1 else ""
    pipeline += f", offload {lay.offload} to host memory" if lay.offload != "none" else ""
    lines = (
        [
            f"Written by layoutsearch {version()} for {ctx.target}: layout rank {rec.get('rank', 1)}.",
            f"model: {ctx.model_id}{'' if model.name == ctx.model_id else f' ({model.name})'}: {model.num_layers} layers, "
            f"d_model {model.d_model}, d_ff {model.d_ff}, "
            f"{model.num_heads} heads / {model.num_kv_heads} kv, vocab {model.vocab_size}",
            f"cluster: {ctx.cluster.name} ({ctx.num_devices} {ctx.cluster.accelerator.id} devices); "
            f"batch {ctx.global_batch_seqs} sequences x {ctx.seq_len} tokens",
            f"layout: {degrees}, zero {lay.zero_stage}, {lay.num_microbatches} microbatches x "
            f"{ctx.microbatch_seqs} sequences per data unit, recompute {lay.recompute}{pipeline}",
            f"predicted: step {step:.4g} s, MFU {100 * mfu:.1f} %, peak memory "
            f"{mem.get('peak', float('nan')) / GB:.1f} GB of {mem.get('capacity', float('nan')) / GB:.1f} GB per device",
            f"placement: {placement_text(ctx)}",
        ]
        + (
            ["WARNING: layoutsearch predicts this layout does NOT fit in device memory."]
            if rec.get("fits") is False
            else []
        )
        + (
            [
                "Launch with CUDA_LAUNCH_BLOCKING=1: the prediction costed blocking kernel launches (--launch-blocking)."
            ]
            if ctx.problem.workload.launch_blocking
            else []
        )
        + (
            [
                f"WARNING: planned for {ctx.cluster.accelerator.id} TPUs; {ctx.target} runs on GPUs: the degrees, batch and "
                f"recompute carry over, the predicted time and memory do not (re-run solve on a GPU cluster)."
            ]
            if ctx.cluster.accelerator.kind == "tpu" and ctx.target != "maxtext"
            else []
        )
    )
    return [printable(line) for line in lines]  # names come from user files: one line each


# What the engine does not decide: every exported file names these and leaves them for the user.
PLACEHOLDER = "PLACEHOLDER"
PLACEHOLDER_ITEMS = (
    "data path",
    "tokenizer",
    "learning rate and schedule",
    "training steps",
    "checkpoint paths",
)


def placeholder_note() -> str:
    """The one line every file carries about what it leaves unset."""
    return (
        f"{PLACEHOLDER}: layoutsearch does not decide the {', '.join(PLACEHOLDER_ITEMS)}; every value marked "
        f"'<set me: ...>' must be replaced before launch."
    )


def mtp_notes(ctx: ExportContext, key: str) -> list[str]:
    """The note on the model's multi-token-prediction modules (the target's ``key`` for their count);
    none without them."""
    layers = ctx.model.mtp_layers
    if not layers:
        return []
    return [
        f"{key} {layers}: the MTP modules are counted in the parameters and the predicted time (a "
        f"layer and an output-head pass each, on the last stage), not in the memory."
    ]


def set_me(what: str) -> str:
    """A placeholder value: ``<set me: what>``."""
    return f"<set me: {what}>"


def mismatches(pairs: dict[str, tuple[object, object]], has: str = "layout has") -> list[str]:
    """A file read back against what was meant: ``name -> (in the file, expected)``, one line
    ``<name> is <in the file>, <has> <expected>`` for each pair that differs."""
    return [f"{k} is {got}, {has} {want}" for k, (got, want) in pairs.items() if got != want]


def placement_text(ctx: ExportContext) -> str:
    """`tp on z(8); fsdp on z(4) y(16) x(16)`: the physical axes each degree spans."""
    parts = []
    for name, placed in ctx.layout.placements:
        parts.append(f"{name} on " + " ".join(f"{axis}({factor})" for axis, factor in placed))
    return "; ".join(parts) or "single device"


# Control, format (bidirectional overrides) and line/paragraph separators: YAML reads U+0085, U+2028
# and U+2029 as line breaks, TOML refuses control characters in comments, Python null bytes.
UNPRINTABLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs", "Cn")


def printable(text: object) -> str:
    """``text`` on one line with every unprintable character written as its Python escape
    (``\\n``, ``\\x1b``, ``\\u2028``): what a name may carry into a comment or a string."""
    return "".join(
        ch.encode("unicode_escape").decode("ascii")
        if unicodedata.category(ch) in UNPRINTABLE_CATEGORIES
        else ch
        for ch in str(text)
    )


def comment_block(lines: list[str], prefix: str = "# ") -> str:
    """``lines`` as comment lines; a line break or control character inside one is escaped, so no
    text can end the comment and become code, keys or arguments."""
    return "\n".join(f"{prefix}{printable(line)}".rstrip() for line in lines) + "\n"


def product(values) -> int:
    return math.prod(values)


# What a YAML double-quoted scalar must escape: outside YAML's printable set, or a line break (U+0085,
# U+2028, U+2029), or a format character; with the quote and the backslash
_YAML_ESCAPE = re.compile(
    '[^\t\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|["\\\\\u2028\u2029]|[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]'
)


def yaml_value(value) -> str:
    """A scalar or list in YAML flow syntax (PyYAML and omegaconf read it back to ``value``)."""
    if isinstance(value, float):
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        # YAML 1.1 (PyYAML, omegaconf) reads 1e-05 as a string: the mantissa needs a dot
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text
    if isinstance(value, str):
        return '"' + _YAML_ESCAPE.sub(_yaml_escape, value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    return json.dumps(value)  # int, bool, None: JSON's spelling is YAML's


def _yaml_escape(match: re.Match) -> str:
    ch = match.group()
    if ch in '"\\':
        return "\\" + ch
    code = ord(ch)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )
