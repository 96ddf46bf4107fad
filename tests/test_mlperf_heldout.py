"""MLPerf Training's Llama 3.1 runs on NVIDIA GPUs, held out (tests/data/mlperf_dense_heldout.yaml, gathered by
hand from each submission's configuration and result logs): every row maps onto the engine as its config sets it."""

from builders import check_record_layout

from layoutsearch.validation.mapping import record_to_problem
from layoutsearch.validation.runs import load_runs

FILE = "mlperf_dense_heldout.yaml"


def test_each_row_maps_as_its_config_sets_it(data_file):
    """Thirty rows; each layout's degrees multiply to its GPUs and its microbatches to its global batch. NVIDIA's
    v5.0 GB200 405B on 512 GPUs (config_GB200_128x4x112xtp4pp8cp2_cg_dplast.sh: TP 4, PP 8, CP 2, interleaved 8,
    MINIBS 112 so GBS 896 over dp 8) costs 112 microbatches with TP overlap (TP_COMM_OVERLAP=True, stated as
    async_tp), full-iteration CUDA graphs and fp8 delayed scaling per tensor."""
    runs = load_runs(data_file(FILE))
    assert len(runs) == 30
    for r in runs:
        check_record_layout(r)
    run = next(
        r
        for r in runs
        if r["id"] == "mlperf50-nvidia-gb200-llama31-405b-fp8-n512-tp4pp8cp2vp8-mbs1"
    )
    problem, layout = record_to_problem(run)
    assert (layout.tp, layout.pp, layout.cp, layout.virtual_stages) == (4, 8, 2, 8)
    assert (layout.num_microbatches, problem.workload.global_batch_seqs) == (112, 896)
    assert problem.workload.tp_comm_overlap is True
    assert problem.workload.cuda_graphs == "full_iteration"
    assert (problem.workload.precision, problem.workload.fp8_recipe) == ("fp8", "tensorwise")
