"""A TPU's usable memory is its HBM less what XLA withholds from a program (hardware/*.yaml runtime_reserve_gib,
docs/calibration.md#tpu-memory), the held-out MaxText v5e table that showed the old reserve refusing runs that
ran."""

import pytest

from layoutsearch.core.catalogue import load_accelerator
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.core.units import GIB
from layoutsearch.costs.estimate import capacity_bytes
from layoutsearch.validation.validate import load_runs, validate_runs


@pytest.mark.parametrize(
    ("part", "hbm_gib", "limit_gib"),
    [
        ("v5p", 96, 95.74),  # MaxText's logs guide: 'Using (GB) 44.63 / 95.74'
        ("v4", 32, 30.75),  # EasyDeL issue #166: 'Used 63.80G of 30.75G hbm ... reserved 1.25G'
        ("v5e", 16, 15.75),  # XLA:TPU's out-of-memory message on v5e
        ("v6e", 32, 31.25),  # and on v6e
    ],
)
def test_a_tpu_keeps_what_xla_gives_a_program(part, hbm_gib, limit_gib):
    """HBM in binary units (Google's '16 GB' v5e is 2^34 bytes), less XLA's reservation: the usable memory is
    the limit XLA reports, not HBM less the GPUs' allocator reserve."""
    acc = load_accelerator(part)
    assert acc.hbm_bytes == hbm_gib * GIB
    assert acc.hbm_bytes - acc.runtime_reserve_bytes == pytest.approx(limit_gib * GIB, abs=1)
    problem = Problem.build("llama3-8b", f"{part}-64", build_workload(64, 2048))
    assert capacity_bytes(problem.cluster, problem.workload) == pytest.approx(
        limit_gib * GIB, abs=1
    )


def test_maxtexts_v5e_table_fits_as_it_ran(data_file):
    """tests/data/maxtext_v5e_heldout.yaml (scripts/maxtext_v5e_heldout.py), nothing fitted on it: all 24 runs
    ran; the 32B model on one v5e-256 peaks at 13.30 GiB (0.844 of 15.75 GiB), which the old 12.90 GiB (16
    decimal GB less 2 GiB) refused, as it did the 12 rows of the 32B and 64B models."""
    runs = load_runs(data_file("maxtext_v5e_heldout.yaml"))
    doc = validate_runs(runs, rank=False)
    assert doc["summary"]["count"] == 24
    assert doc["summary"]["fit_accuracy"] == 1.0
    one = next(e for e in doc["records"] if e["id"] == "maxtext-v5e-2023-32b-1xv5e-256")
    assert one["predicted_memory_gib"] == pytest.approx(13.30, abs=0.005)
    assert one["predicted_memory_share"] == pytest.approx(13.30 / 15.75, abs=1e-3)
    assert one["predicted_memory_gib"] > (16e9 / GIB - 2.0)
