"""solve compares a cluster whose device count has an odd factor the global batch cannot take with the
largest sub-cluster whose factor it can (engine.fewer_devices, docs/OUTPUT.md `fewer_devices`)."""

import warnings
from pathlib import Path

import pytest

import layoutsearch as ls
from layoutsearch.core.errors import LayoutsearchWarning
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.engine import fewer_devices

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    ("cluster", "seqs", "expected"),
    [
        ("gb200-576", 1024, "gb200-512"),  # 576 = 2^6 x 9, 1024 = 2^10: the 9 cannot go to dp
        ("h100-768", 1024, "h100-512"),  # 768 = 2^8 x 3
        ("h100-768", 1536, None),  # 1536 = 2^9 x 3: dp takes the 3
        ("h100-1200", 1536, "h100-768"),  # 1200 = 2^4 x 75; the batch takes the 3 of 75: 3 x 2^8
        ("h100-1024", 1000, None),  # no odd factor
        ("v5p-384", 1000, None),  # a TPU slice's size is not free
        (str(EXAMPLES / "custom-4gpu-nodes.cluster.yaml"), 1000, None),  # nor a cluster file's
    ],
)
def test_the_compared_cluster_takes_the_largest_count_the_batch_can_spread(cluster, seqs, expected):
    """2^a x g devices, g the part of the count's odd factor the batch divides, the largest under the
    count; none where the batch divides the whole odd factor or the cluster is a TPU slice."""
    problem = Problem.build("llama70b", cluster, build_workload(seqs, 4096))
    assert fewer_devices(problem) == expected


def test_576_gb200s_at_1024_sequences_run_faster_on_512():
    """Llama 3 70B on 576 GB200s at 1,024 sequences of 4,096 tokens: the batch cannot spread the 9 of
    576 = 64 x 9, so the winner runs a 9-stage pipeline (fsdp 32, tp 2, pp 9, 32 microbatches: its
    bubble is 8 / 32 of the first stage's work, 0.732 s of a 3.861 s step, its sends 4.0 ms over NVLink). 512 of
    the devices run fsdp 128 x tp 2 x pp 2 (ZeRO-1, 8 microbatches, v5) in 3.543 s, 8.2% less (1 - 3.543 /
    3.861), though inside the model's uncertainty. (3.842 s, 0.735 s of bubble and 3.551 s before the loss's passes
    over the logits were costed and Blackwell's fraction refitted beside them, 0.488 -> 0.4908; 3.986 s, 0.764 s of bubble and 3.685 s before the
    element-wise kernels ran at their measured fractions of the HBM bandwidth and the b200 class's
    matmul_efficiency was refitted beside them, 0.4646 -> 0.488; 3.993 s, 0.771 s of bubble and 3.687 s before a slower last
    stage paced only the microbatches, 2026-12-06; 3.990 s and 7.6% before 1F1B's steady-state sends were costed,
    2026-12-06; fsdp 256 x tp 2 with ZeRO-2 over 4
    microbatches, 3.589 s and 10.3% less, until ZeRO-2 reduce-scattered its gradients in every microbatch;
    4.000 s against 3.699 s until Megatron's asynchronous backward TP collectives hid behind their GEMMs,
    2026-12-06.)"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LayoutsearchWarning)
        run = ls.solve("llama70b", "gb200-576", top=1)
    winner = run.layouts[0]
    assert (winner.layout.fsdp, winner.layout.tp, winner.layout.pp) == (32, 2, 9)
    assert winner.step_time_s == pytest.approx(3.8611, abs=5e-4)
    assert winner.time_s["bubble"] == pytest.approx(0.7317, abs=5e-4)
    fewer = run.document["fewer_devices"]
    assert (fewer["cluster"], fewer["num_devices"], fewer["status"]) == (
        "gb200-512",
        512,
        "OPTIMAL",
    )
    assert fewer["layout"]["degrees"] == {
        "dp": 1,
        "fsdp": 128,
        "tp": 2,
        "pp": 2,
        "cp": 1,
        "ep": 1,
        "etp": 1,
    }
    assert fewer["layout"]["time_s"]["step"] == pytest.approx(3.5428, abs=5e-4)
    assert fewer["step_time_saving"] == pytest.approx(1 - 3.5428 / 3.8611, abs=2e-4)
    assert fewer["distinguishable"] is False
    messages = [str(w.message) for w in caught if issubclass(w.category, LayoutsearchWarning)]
    assert (
        "512 of the 576 devices run a step 8.2% faster (3.543 s against 3.861 s, fsdp=128, tp=2, pp=2; "
        "inside the model's uncertainty): the global batch of 1,024 sequences does not divide by the "
        "odd factor of 576, so the winner here puts it in pp=9 (a batch it divides would let data "
        "parallelism take it); `layoutsearch solve --cluster gb200-512` shows that layout"
    ) in messages


def test_no_comparison_where_the_batch_spreads_the_whole_count():
    """768 H100s at 1,536 sequences (3 x 512): dp takes the 3, nothing is compared; at 1,024 the
    512-device winner is slower than the 768-device one, so nothing is added either."""
    assert "fewer_devices" not in ls.solve("llama70b", "h100-768", seqs=1536, top=1).document
    run = ls.solve("llama70b", "h100-768", seqs=1024, top=1)
    assert fewer_devices(run.problem) == "h100-512"
    assert "fewer_devices" not in run.document
