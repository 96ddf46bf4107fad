"""Pipeline schedules: bubble, microbatches alive (deferred weight gradients included) and parameter copies
(docs/cost_model.md "Pipeline schedules").

Sources: Narayanan et al. 2021 (1F1B bubble (p - 1)/K of the ideal time, divided by the virtual
stages v when interleaved); Korthikanti et al. 2022 (activations alive on the first stage: p
microbatches for 1F1B, p + (p - 1)/v stage-equivalents when interleaved); Qi et al. 2024, "Zero
Bubble Pipeline Parallelism" (ICLR 2024; ZB-H1's bubble (p - 1)(T_F + T_B - T_W) with T_B the
input-gradient and T_W the weight-gradient work, activations as 1F1B; arXiv 2401.10241 section 6,
ZB-V: two chunks per device in a V, 1F1B's activations, no bubble when T_F = T_B = T_W, as
torch.distributed.pipelining's ScheduleZBVZeroBubble says); DeepSeek-V3 technical report (arXiv 2412.19437) table 2 and the
DualPipe repository's table: DualPipe's bubble (p/2 - 1)(T_F&B + T_B,full - 3 T_W), 2x parameters,
p + 1 microbatches of activations; DualPipeV (DualPipe cut in half, 2 chunks per device) the same
over its 2p chunks, 1x parameters. The design notes' forward-only illustrations are in
``tests/closed_forms.py``, which the engine does not use.
"""

from __future__ import annotations

import numpy as np

from layoutsearch.core.specs import SCHEDULE_CODES

ZERO_BUBBLE = tuple(SCHEDULE_CODES[s] for s in ("zb-h1", "zb-v", "dualpipe", "dualpipev"))
V_SHAPED = tuple(SCHEDULE_CODES[s] for s in ("zb-v", "dualpipev"))  # a device holds both ends


def bubble_microbatches(stages: int, virtual_stages: int = 1) -> float:
    """Idle time in units of one microbatch's stage time: (p - 1) / v (1F1B, interleaved, GPipe)."""
    return (stages - 1) / virtual_stages


def bubble_microbatches_array(stages, virtual_stages, sched, split: tuple[float, float, float]):
    """Idle time per step in units of one microbatch's stage time F + B + W, over numpy arrays, with
    ``split`` = (F, B, W) / (F + B + W) the forward, input-gradient and weight-gradient shares:

        1f1b, gpipe     (p - 1)                  interleaved   (p - 1) / v
        zb-h1           (p - 1)(F + B - W) / v   zb-v          (p - 1) max(0, F + B - 2W) / 2
        dualpipe        (p/2 - 1)(F + 2B - W)    dualpipev     (p - 1)(F + 2B - W) / 2

    DualPipe's F&B (a forward and a backward chunk overlapped) costs F + B + W: the overlap hides
    communication, not compute; its full backward is B + W. The V-shaped ones count in chunks of
    half a device's layers. No pipeline (p = 1): 0."""
    p, v = np.asarray(stages, dtype=np.float64), np.asarray(virtual_stages, dtype=np.float64)
    f, b, w = split
    by_code = {
        SCHEDULE_CODES["zb-h1"]: (p - 1) * (f + b - w) / v,
        SCHEDULE_CODES["zb-v"]: (p - 1) * max(0.0, f + b - 2 * w) / 2,
        SCHEDULE_CODES["dualpipe"]: np.maximum(p / 2 - 1, 0.0) * (f + 2 * b - w),
        SCHEDULE_CODES["dualpipev"]: (p - 1) * (f + 2 * b - w) / 2,
    }
    out = (p - 1) / v
    for code, bubble in by_code.items():
        out = np.where(sched == code, bubble, out)
    return np.where(p > 1, out, 0.0)


def fill_hops_array(stages, virtual_stages, sched):
    """Sends on the critical path of a pipeline's fill (and again of its drain), over numpy arrays:
    every boundary between consecutive chunks that crosses devices, p v - 1 (1F1B, GPipe, DualPipe:
    p - 1; interleaved and ZB-H1 with v chunks: the first microbatch's forward crosses p devices v
    times, and each round of the warm-up waits p sends for it to come back round, which the p
    forwards of that round do not cover); 2 (p - 1) for the V-shaped ones, whose turn at the last
    device stays on it. No pipeline (p = 1): 0."""
    p, v = np.asarray(stages, dtype=np.float64), np.asarray(virtual_stages, dtype=np.float64)
    hops = np.where(np.isin(sched, V_SHAPED), 2 * (p - 1), p * v - 1)
    return np.where(p > 1, hops, 0.0)


def steady_sends_array(stages, virtual_stages, sched, overlap: bool, blocking: bool):
    """Sends between stages on the step's critical path for each microbatch once the pipeline is full, over
    numpy arrays (docs/cost_model.md "Pipeline chunks and sends"), beside the fill's and the drain's (``fill_hops_array``):

        1f1b (v = 1)          2 (p - 1)/p   each microbatch's forward waits for the one before it on the stage
                                            before, its backward for the stage after: the p microbatches in
                                            flight share one round trip of 2 (p - 1) sends (PyTorch
                                            pipelining's asynchronous sends)
                              2 (p = 2: 1)  with ``blocking`` sends, which hold their sender until the receiver
                                            has them (Megatron's send_forward_recv_backward and
                                            send_backward_recv_forward, DeepSpeed's p2p.send): two exchanges a
                                            microbatch
        interleaved (v > 1)   0             with ``overlap``: the warm-up's second microbatch per stage
                                            (Megatron's and PyTorch's interleaved orders) leaves a chunk of slack
                              2 v           without: each chunk's forward and backward end in one exchange with
                                            both neighbours, two sends out of the device (Megatron-LM before
                                            --overlap-p2p-communication)
        gpipe                 0             every forward streams behind the one before it
        zb-h1, zb-v, dualpipe(v)  0         their weight-gradient passes and paired chunks stand where a stage
                                            would wait (taken, not measured)

    tests/pipeline_sim.py simulates the asynchronous orders and finds these (1F1B's 2 (p - 1)/p, the
    interleaved and GPipe 0; its fill and drain 2 sends fewer than ``fill_hops_array``'s). No pipeline: 0."""
    p, v = np.asarray(stages, dtype=np.float64), np.asarray(virtual_stages, dtype=np.float64)
    sched = np.asarray(sched)
    elsewhere = np.isin(sched, (SCHEDULE_CODES["gpipe"], *ZERO_BUBBLE))
    one_f_one_b = np.where(p > 2, 2.0, 1.0) if blocking else 2.0 * (p - 1) / np.maximum(p, 1)
    interleaved = 0.0 * v if overlap else 2.0 * v
    sends = np.where(v > 1, interleaved, one_f_one_b)
    return np.where((p > 1) & ~elsewhere, sends, 0.0)


def microbatches_in_flight_array(stages, stage, num_microbatches, virtual_stages, sched=-1):
    """Microbatches whose activations stage ``stage`` holds at its peak, in whole-stage units, over
    numpy arrays: min(K, p - stage) for 1F1B and ZB-H1, min(K, p - stage + (p - 1)/v) interleaved
    (v > 1), K for GPipe (every forward runs before the first backward), min(K, p) for ZB-V (its V
    balances the devices at 1F1B's first-stage peak), min(K, p + 1) for DualPipe and min(K, p + 1/2)
    for DualPipeV (2p + 1 chunks of half a device's layers); ``sched`` -1: what v implies."""
    p, k, v = (np.asarray(x, dtype=np.float64) for x in (stages, num_microbatches, virtual_stages))
    interleaved = np.minimum(k, p - stage + (p - 1) / v)
    out = np.where(v > 1, interleaved, np.minimum(k, p - stage))
    by_code = {
        SCHEDULE_CODES["gpipe"]: k,
        SCHEDULE_CODES["zb-h1"]: np.where(v > 1, interleaved, np.minimum(k, p - stage)),
        SCHEDULE_CODES["zb-v"]: np.minimum(k, p),
        SCHEDULE_CODES["dualpipe"]: np.minimum(k, p + 1),
        SCHEDULE_CODES["dualpipev"]: np.minimum(k, p + 0.5),
    }
    for code, alive in by_code.items():
        out = np.where(sched == code, alive, out)
    return np.where(p == 1, 1.0, out)


def parameter_copies_array(sched):
    """Copies of a stage's parameters a device holds: 2 for DualPipe (stages i and p - 1 - i), else 1."""
    return np.where(np.asarray(sched) == SCHEDULE_CODES["dualpipe"], 2.0, 1.0)
