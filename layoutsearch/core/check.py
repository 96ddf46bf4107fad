"""Solver-agnostic layout rules: every violation with a code and the numbers (STYLE.md 6).

Run on every layout any search returns, and on every layout a user asks to estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from layoutsearch.core.specs import Cluster, Layout, ModelSpec, Workload


@dataclass(frozen=True, slots=True)
class Violation:
    code: str
    message: str

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


def structural_violations(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout) -> list[Violation]:
    """Every hard rule except memory (which needs the estimate)."""
    out: list[Violation] = []
    n = cluster.num_devices
    deg = layout.degrees
    for name, value in deg.items():
        if value < 1:
            out.append(Violation("degree", f"{name}({value}) must be a positive integer"))
    if out:
        return out
    if layout.num_devices != n:
        factors = " x ".join(f"{k}({v})" for k, v in deg.items())
        out.append(Violation("product", f"{factors} = {layout.num_devices}, but cluster {cluster.name} has {n} devices"))
    if model.num_heads % layout.tp:
        out.append(Violation("tp-heads", f"tp({layout.tp}) does not divide num_heads({model.num_heads})"))
    if model.num_kv_heads % layout.tp and layout.tp % model.num_kv_heads:
        out.append(Violation("tp-kv-heads", f"tp({layout.tp}) does not divide num_kv_heads({model.num_kv_heads}) "
                                            f"and {model.num_kv_heads} does not divide {layout.tp}"))
    if model.d_ff % layout.tp:
        out.append(Violation("tp-ffn", f"tp({layout.tp}) does not divide d_ff({model.d_ff})"))
    units = layout.data_units * layout.num_microbatches
    if workload.global_batch_seqs % units:
        out.append(Violation("whole-sequences",
                             f"global batch {workload.global_batch_seqs} sequences is not divisible into "
                             f"dp({layout.dp}) x fsdp({layout.fsdp}) data units x {layout.num_microbatches} microbatches "
                             f"= {units}: every data unit needs whole sequences in every microbatch"))
    if model.num_layers % (layout.pp * layout.virtual_stages):
        out.append(Violation("pp-layers", f"num_layers({model.num_layers}) is not divisible by pp({layout.pp}) x "
                                          f"virtual_stages({layout.virtual_stages})"))
    if layout.cp > 1 and workload.seq_len % (2 * layout.cp):
        out.append(Violation("cp-seq", f"seq_len({workload.seq_len}) is not divisible by 2 x cp({layout.cp})"))
    if layout.pp > 1 and layout.num_microbatches < layout.pp:
        out.append(Violation("pp-microbatches", f"num_microbatches({layout.num_microbatches}) < pp({layout.pp})"))
    if layout.virtual_stages > 1 and (layout.pp == 1 or layout.num_microbatches % layout.pp):
        out.append(Violation("interleave", f"virtual_stages({layout.virtual_stages}) needs pp > 1 and "
                                           f"num_microbatches({layout.num_microbatches}) divisible by pp({layout.pp})"))
    if layout.zero_stage not in (0, 1, 2, 3):
        out.append(Violation("zero-stage", f"zero_stage({layout.zero_stage}) must be 0, 1, 2 or 3"))
    out.extend(placement_violations(cluster, layout))
    return out


def placement_violations(cluster: Cluster, layout: Layout) -> list[Violation]:
    """Each degree's factors multiply to the degree; each axis is filled exactly."""
    if not layout.axes:
        return []
    out = []
    names = {a.name: a.size for a in cluster.axes}
    used = {a: 1 for a in names}
    for degree, placed in layout.axes:
        product = math.prod(f for _, f in placed)
        if product != layout.degrees.get(degree, 0):
            out.append(Violation("axes", f"axes of {degree} {list(placed)} multiply to {product}, not {degree}({layout.degrees.get(degree)})"))
        for axis, factor in placed:
            if axis not in names:
                out.append(Violation("axes", f"{degree} is placed on axis '{axis}', which cluster {cluster.name} "
                                             f"does not have (axes: {', '.join(names)})"))
                continue
            used[axis] *= factor
    for axis, size in names.items():
        if used[axis] != size and not out:
            out.append(Violation("axes", f"degrees placed on axis '{axis}' multiply to {used[axis]}, not its size {size}"))
    return out


def check_layout(model: ModelSpec, workload: Workload, cluster: Cluster, layout: Layout) -> list[Violation]:
    """Every violation of a layout: the structural rules, then memory recomputed through estimate()."""
    from layoutsearch.costs.estimate import estimate

    problems = structural_violations(model, workload, cluster, layout)
    if problems:
        return problems
    return [v for v in estimate(model, workload, cluster, layout, strict=False).violations if v.code == "memory"]
