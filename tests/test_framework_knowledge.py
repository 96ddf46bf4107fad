"""Framework knowledge lives in layoutsearch/frameworks/, below the search: one declaration per
framework holds its overlap profile, its export target's capabilities and its exporter's name."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from layoutsearch.core.errors import InvalidLayoutError
from layoutsearch.core.frameworks import PROFILES, framework_of_target
from layoutsearch.core.problem import Problem
from layoutsearch.core.rules import framework_rules, violations
from layoutsearch.core.specs import Layout, Workload
from layoutsearch.export import target_rules
from layoutsearch.frameworks import (
    TARGETS,
    capabilities_of,
    declaration_of,
    exporter_of,
    ideal,
    torchtitan,
    torchtitan03,
)

# debug: 8 layers, 8 heads, 2 KV heads, d_ff 768
DEBUG_H16 = Problem.build("debug", "h100-16", Workload(global_batch_seqs=64, seq_len=1024))


@pytest.mark.parametrize("module", ["layoutsearch.search", "layoutsearch.costs.estimate"])
def test_the_search_and_the_costs_do_not_import_the_exporters(module):
    """Importing the search (or the cost model) loads no module of layoutsearch.export."""
    code = (
        f"import {module}, sys; "
        "print(any(m.startswith('layoutsearch.export') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],  # this checkout's package first on the path
    ).stdout
    assert out.strip() == "False"


def test_each_target_is_declared_once_with_its_exporter():
    """Every export target's declaration names its exporter module, which keeps no copy of the
    capabilities: the search and the export both read the declaration's object."""
    assert TARGETS == (
        "maxtext",
        "megatron",
        "megatron-bridge",
        "torchtitan",
        "torchtitan-0.3",
        "deepspeed",
    )
    assert {t: exporter_of(t) for t in TARGETS} == {
        "maxtext": "layoutsearch.export.maxtext",
        "megatron": "layoutsearch.export.megatron",
        "megatron-bridge": "layoutsearch.export.megatron_bridge",
        "torchtitan": "layoutsearch.export.torchtitan",
        "torchtitan-0.3": "layoutsearch.export.torchtitan03",
        "deepspeed": "layoutsearch.export.deepspeed",
    }
    for target in TARGETS:
        exporter = importlib.import_module(exporter_of(target))
        assert callable(exporter.render) and callable(exporter.check)
        assert not hasattr(exporter, "CAPABILITIES")
        assert capabilities_of(target) is declaration_of(target).CAPABILITIES
        assert capabilities_of(target).target == target
    assert [r.code for r in target_rules("deepspeed")][:3] == [
        "deepspeed-zero",
        "deepspeed-replicas",
        "deepspeed-cp",
    ]


def test_the_maxtext_exporter_maps_every_declared_recompute_policy():
    """MaxText's declaration lists 16 policies, none of Megatron's modules or torchtitan's op, and
    its exporter writes each as a remat_policy."""
    from layoutsearch.export.maxtext import REMAT

    declared = capabilities_of("maxtext").recompute_policies
    assert len(declared) == 16 and {"op", "norm_act", "norm_moe", "mla_up_proj"}.isdisjoint(
        declared
    )
    assert tuple(REMAT) == declared
    assert REMAT["none"] == "minimal_with_context" and REMAT["custom_offload_input"] == "custom"


def test_torchtitan_03_shares_torchtitans_profile_and_ideal_exports_nothing():
    """torchtitan-0.3 runs with torchtitan's profile; 'ideal' is a profile with no target."""
    assert torchtitan03.PROFILE is torchtitan.PROFILE is PROFILES["torchtitan"]
    assert framework_of_target("torchtitan-0.3") == "torchtitan"
    assert (ideal.CAPABILITIES, ideal.EXPORTER) == (None, None)
    assert list(PROFILES) == ["megatron", "deepspeed", "torchtitan", "maxtext", "ideal"]


def test_an_unknown_target_is_refused_with_a_hint():
    """A misspelt target names the nearest one and the known ones."""
    with pytest.raises(InvalidLayoutError) as err:
        declaration_of("megatorn")
    assert str(err.value) == (
        "unknown export target 'megatorn' (did you mean 'megatron'?); "
        "known: maxtext, megatron, megatron-bridge, torchtitan, torchtitan-0.3, deepspeed"
    )


REFUSALS = {
    "megatron": (
        Layout(fsdp=8, pp=2, num_microbatches=2, schedule="gpipe"),
        "bf16",
        "megatron-pipeline",
        "Megatron-LM cannot express pp(2) with the gpipe schedule (it runs 1F1B, or interleaved "
        "1F1B with virtual stages, no GPipe, zero-bubble or DualPipe schedule; and Megatron-FSDP "
        "(its ZeRO-2/3) is documented with TP, "
        "CP and EP, not with pipeline parallelism, so a pipeline takes the distributed optimizer "
        "(ZeRO-1)); nearest: schedule 1f1b or interleaved",
    ),
    "deepspeed": (
        Layout(fsdp=4, tp=2, cp=2, cp_flavour="a2a", zero_stage=3, sequence_parallel=False),
        "bf16",
        "deepspeed-cp-alone",
        "DeepSpeed cannot express cp(2) beside tp(2), pp(1), ep(1) (Ulysses for Hugging Face models "
        "(UlyssesSPAttentionHF.register_with_transformers) builds sequence- and data-parallel groups "
        "only); nearest: cp=1, or tp = pp = ep = 1 beside cp, or export to maxtext or megatron or "
        "megatron-bridge or torchtitan or torchtitan-0.3",
    ),
    "torchtitan": (
        Layout(fsdp=16, zero_stage=1),
        "bf16",
        "torchtitan-zero",
        "torchtitan cannot express ZeRO-1 with pp = 1 (FSDP2 has no ZeRO-1 (sharded optimizer, unsharded "
        "gradients) without a pipeline); nearest: zero_stage 2 or 3",
    ),
    "torchtitan-0.3": (
        Layout(fsdp=16),
        "fp8",
        "torchtitan-0.3-precision",
        "torchtitan cannot express fp8 training; nearest: --precision bf16, or export to megatron",
    ),
    "maxtext": (
        Layout(fsdp=4, tp=4, zero_stage=3),
        "bf16",
        "maxtext-kv",
        "MaxText cannot express tp(4) > num_kv_heads(2) (replicated KV heads) (it shards KV heads "
        "over the tensor axis and cannot replicate them); nearest: tp=2 with the rest in fsdp",
    ),
}


@pytest.mark.parametrize("target", sorted(REFUSALS))
def test_each_framework_refuses_with_its_own_message(target):
    """One layout per target that its declared capabilities refuse, with the exact message."""
    layout, precision, code, message = REFUSALS[target]
    problem = Problem.build(
        "debug", "h100-16", Workload(global_batch_seqs=64, seq_len=1024, precision=precision)
    )
    found = violations(problem, layout, framework_rules(capabilities_of(target)))
    assert [(v.code, v.message) for v in found] == [(code, message)]


def test_a_framework_rule_titles_the_funnel_with_the_framework():
    """A capability's rule reads '<framework>: <limit>' in the infeasibility funnel."""
    titles = {r.code: r.title(DEBUG_H16) for r in framework_rules(capabilities_of("maxtext"))}
    assert titles["maxtext-kv"] == "MaxText: tp <= num_kv_heads(2) (no KV-head replication)"
    assert titles["maxtext-pipeline"] == "MaxText: pipelines gpipe"
    assert titles["maxtext-capacity"] == "MaxText: MoE capacity factors (drop and pad)"
