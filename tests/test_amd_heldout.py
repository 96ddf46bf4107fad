"""AMD Instinct runs, held out (tests/data/amd_heldout.yaml, gathered by hand with each record's source): every
row maps onto the engine as its source states it, and the validation report's section reads its numbers."""

import sys
from pathlib import Path

import pytest
from builders import check_record_layout

from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import load_runs

FILE = "amd_heldout.yaml"
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def runs(data_file):
    return load_runs(data_file(FILE))


def test_each_row_maps_as_its_source_states_it(runs):
    """Ten rows on MI325X and MI355X; each layout's degrees multiply to its GPUs and its microbatches to its
    global batch. MLPerf v5.1's Llama 3.1 8B (AMD's config_MI355X_1x8x1_8b.sh: GBS 32, MBS 2, TP = PP = CP = 1
    on 8 GPUs) is dp 8 with 2 microbatches on the distributed optimizer, fp8 delayed scaling costed per tensor."""
    assert len(runs) == 10
    assert {r["cluster"]["accelerator"] for r in runs} == {"mi325x", "mi355x"}
    for r in runs:
        check_record_layout(r)
    problem, layout = record_to_problem(runs[0])
    assert runs[0]["id"] == "amd-mlperf51-mi355x-llama31-8b-fp8-n8-dp8-mbs2"
    assert (layout.dp * layout.fsdp, layout.num_microbatches, layout.zero_stage) == (8, 2, 1)
    assert (problem.workload.precision, problem.workload.fp8_recipe) == ("fp8", "tensorwise")
    assert problem.cluster.accelerator.runtime == "rocm"


def test_the_report_section_reads_the_errors(runs, monkeypatch):
    """amd_lines on made-up errors: -10% and -4% on MI355X and +2% on MI325X give a median of -4% over all and
    no claim that every row is too slow; with all three negative it says so."""
    monkeypatch.syspath_prepend(str(SCRIPTS))  # scripts/validation.py imports its neighbour _common
    import validation

    rows = [runs[0], runs[1], runs[3]]

    def doc(errors):
        return {
            "records": [
                {
                    "id": r["id"],
                    "rel_error": x,
                    "in_band": True,
                    "measured_tokens_per_s_per_device": 1000.0,
                    "predicted_tokens_per_s_per_device": 1000.0 * (1 + x),
                }
                for r, x in zip(rows, errors)
            ]
        }

    text = "\n".join(validation.amd_lines(doc([-0.10, -0.04, 0.02]), rows))
    assert "| all | 3 of 3 | 4.0% | 8.8% | -4.0% | 3 of 3 |" in text
    assert "Errors from -10.0% to +2.0% (-4.0% at the median)." in text
    text = "\n".join(validation.amd_lines(doc([-0.10, -0.04, -0.02]), rows))
    assert "(-4.0% at the median): every row is predicted too slow" in text
    sys.modules.pop("validation", None)
