"""The loss's own passes over the logits (``Workload.cross_entropy``, docs/cost_model.md#the-loss): the bytes each
kernel moves, counted by hand from its source; what each framework runs and refuses; run-record rule 34; the
exports that write the kernel the prediction costed."""

from __future__ import annotations

import pytest
import yaml
from builders import solve_doc

from layoutsearch.api import problem
from layoutsearch.core.errors import InvalidArgumentError, InvalidLayoutError
from layoutsearch.core.specs import Layout
from layoutsearch.costs import flops
from layoutsearch.costs.estimate import estimate
from layoutsearch.export import context_for, export_document
from layoutsearch.export.megatron import check, parse_args
from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import load_runs

# bf16 logits (2 bytes), upcast to fp32 (4) by the kernels that upcast: bytes per logit, forward + backward
BY_HAND = {
    "te": 2
    + (2 + 2)
    + (2 + 2),  # read for max and sum; read, gradient written over it; scaled in place
    "native": (2 + 4)
    + (4 + 4)
    + (4 + 4)
    + (4 + 2)
    + 4,  # upcast+max, exp, divide; cast back, write-back
    "unfused": (2 + 4) + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 4) + (4 + 2),
    "eager": (2 + 4)
    + (4 + 4 + 4 + 4)
    + 4
    + (8 + 4)
    + (4 + 2),  # upcast, log-softmax; NLL, its grad, cast
    "compiled": 2 + (2 + 2),  # one read forward; read and write backward
    "xla": (4 + 4 + 4 + 4) + (4 + 4),  # max, exp written, its sum, one-hot product; read, write
}


@pytest.mark.parametrize("kernel", sorted(BY_HAND))
def test_bytes_per_logit_by_hand(kernel):
    """10, 32, 52, 44, 6 and 24 bytes a logit: each kernel's reads and writes of the vocabulary-sized tensors."""
    assert flops.loss_bytes_per_logit(kernel, 2, True) == BY_HAND[kernel]


def test_bf16_logits_drop_the_upcast():
    """On bf16 logits (--no-fp32-logits) PyTorch's eager loss makes its eight passes at 2 bytes (no upcast, no
    cast back): 16; XLA's six: 12; the kernels that read bf16 anyway are unchanged."""
    assert flops.loss_bytes_per_logit("eager", 2, False) == 8 * 2
    assert flops.loss_bytes_per_logit("xla", 2, False) == 6 * 2
    assert flops.loss_bytes_per_logit("te", 2, False) == 10
    assert flops.loss_bytes_per_logit("compiled", 2, False) == 6


def _elementwise(cross_entropy, **kw):
    p = problem("llama3-8b", "h100-8", seqs=8, seq_len=4096, cross_entropy=cross_entropy, **kw)
    est = estimate(p, Layout(fsdp=8, num_microbatches=1), strict=False)
    return est.problem.workload.cross_entropy, est.time_s["compute/elementwise"], est


def test_the_step_pays_each_kernels_bytes_at_the_elementwise_rate():
    """Llama 3 8B, one 4,096-token sequence per H100 (the head on every GPU): unfused minus native is 20 bytes a
    logit over 4,096 x 128,256 logits at 3.35 TB/s x 0.885, 3.54 ms; native minus te 22 bytes, 3.90 ms. Megatron's
    default is native."""
    default = _elementwise(None)
    native, te, unfused = (_elementwise(k) for k in ("native", "te", "unfused"))
    assert default[0] == "native" and default[1] == native[1]
    rate = 3.35e12 * 0.885
    assert unfused[1] - native[1] == pytest.approx(20 * 4_096 * 128_256 / rate, rel=1e-9)
    assert native[1] - te[1] == pytest.approx(22 * 4_096 * 128_256 / rate, rel=1e-9)
    assert unfused[1] - native[1] == pytest.approx(0.003543, abs=1e-6)


def test_te_holds_the_logits_in_bf16():
    """Transformer Engine's kernel writes the gradient over the bf16 logits: 4,096 x 128,256 x 2 bytes; Megatron's
    own kernels upcast them to an fp32 buffer: x 4."""
    assert _elementwise("te")[2].memory_bytes["temporary/logits"] == 4_096 * 128_256 * 2
    assert _elementwise("native")[2].memory_bytes["temporary/logits"] == 4_096 * 128_256 * 4


def test_each_framework_runs_its_own_kernels():
    """torchtitan's loss follows --compiled-loss, MaxText's is XLA's, DeepSpeed's the Hugging Face eager one
    unless told Megatron-DeepSpeed's; a kernel a framework does not run is refused, naming it."""
    kw = dict(seqs=8, seq_len=4096)
    assert problem("llama3-8b", "h100-8", framework="torchtitan", **kw).workload.cross_entropy == (
        "compiled"
    )
    assert (
        problem(
            "llama3-8b", "h100-8", framework="torchtitan", compiled_loss=False, **kw
        ).workload.cross_entropy
        == "eager"
    )
    assert problem("llama3-8b", "v5p-8", **kw).workload.cross_entropy == "xla"
    assert problem("llama3-8b", "h100-8", framework="deepspeed", **kw).workload.cross_entropy == (
        "eager"
    )
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--cross-entropy te: torchtitan's loss follows --compiled-loss \(compiled\) or "
        r"--no-compiled-loss",
    ):
        problem("llama3-8b", "h100-8", framework="torchtitan", cross_entropy="te", **kw)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--cross-entropy unfused: maxtext runs xla; use it or leave --cross-entropy out$",
    ):
        problem("llama3-8b", "v5p-8", cross_entropy="unfused", **kw)
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--cross-entropy te: deepspeed runs eager or unfused; use one of them",
    ):
        problem("llama3-8b", "h100-8", framework="deepspeed", cross_entropy="te", **kw)


def test_rule_34_stated_then_release_then_profile(data_file):
    """A record's stated kernels win (Megatron-Bridge's te), a release's come next (the Megatron-LM of 2022:
    unfused), else Megatron's profile (native)."""
    moe = {r["id"]: r for r in load_runs(data_file("runs_moe_dev.yaml"))}
    korthikanti = list(load_runs(data_file("korthikanti_heldout.yaml")))
    bridge = next(r for i, r in moe.items() if i.startswith("mbridge-25.11-gb200-deepseek-v3"))
    blog = moe["mcore-blog-deepseekv3-gb200-mxfp8-n256-tp1pp8vp4ep32"]
    assert record_to_problem(bridge)[0].workload.cross_entropy == "te"
    assert record_to_problem(korthikanti[0])[0].workload.cross_entropy == "unfused"
    assert "cross_entropy" not in blog["workload"] or blog["workload"]["cross_entropy"] is None
    assert record_to_problem(blog)[0].workload.cross_entropy == "native"


def test_megatron_writes_native_or_nothing_and_refuses_te():
    """The megatron target writes --cross-entropy-loss-fusion --cross-entropy-fusion-impl native, nothing for the
    unfused loss, and refuses Transformer Engine's (its training arguments assert against it since core_v0.19.0);
    the checker names a script whose loss differs from the prediction's."""
    doc = solve_doc("llama3-8b", "h100-8", 8, 4096, Layout(fsdp=8), framework="megatron")
    text = export_document(doc, "megatron")
    flags = parse_args(text)
    assert flags["--cross-entropy-loss-fusion"] is True
    assert flags["--cross-entropy-fusion-impl"] == "native"
    ctx = context_for(doc, "megatron")
    assert check(text, ctx) == []
    unfused = text.replace("  --cross-entropy-loss-fusion\n", "").replace(
        "  --cross-entropy-fusion-impl native\n", ""
    )
    assert check(unfused, ctx) == [
        "the loss runs unfused (--cross-entropy-loss-fusion, --cross-entropy-fusion-impl); the prediction "
        "costs native"
    ]
    doc["problem"]["workload"]["cross_entropy"] = "unfused"
    assert "--cross-entropy" not in export_document(doc, "megatron")
    doc["problem"]["workload"]["cross_entropy"] = "te"
    with pytest.raises(
        InvalidLayoutError,
        match=r"Megatron-LM cannot express the te loss kernels \(--cross-entropy\) \(its training arguments "
        r"refuse Transformer Engine's cross entropy .*; nearest: --cross-entropy native or unfused$",
    ):
        export_document(doc, "megatron")


def test_megatron_bridge_writes_transformer_engines_kernel():
    """The megatron-bridge override's model section carries the costed kernels, te among them."""
    doc = solve_doc(
        "llama3-8b", "h100-8", 8, 4096, Layout(fsdp=8), framework="megatron", cross_entropy="te"
    )
    model = yaml.safe_load(export_document(doc, "megatron-bridge"))["model"]
    assert model["cross_entropy_loss_fusion"] is True
    assert model["cross_entropy_fusion_impl"] == "te"
