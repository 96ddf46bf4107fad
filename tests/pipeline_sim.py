"""An event simulation of pipeline schedules with sends between stages, independent of the cost model.

It checks ``costs.pipeline.steady_sends_array``: how many sends each microbatch waits for once the
pipeline is full. Every device runs its schedule's work in order. A forward needs the forward before it of
the same microbatch, and a backward the backward after it (the last stage's needs its own forward). The
result of a piece of work on another device reaches it a send's time after that work ends. Sends never
hold up their sender (Megatron's --overlap-p2p-communication, PyTorch pipelining's asynchronous sends).

The orders are Megatron's (megatron/core/pipeline_parallel/schedules.py):

- 1F1B: device i runs p - i - 1 warm-up forwards, then a forward and a backward in turn.
- interleaved: chunk c of device i is stage c p + i. Forwards run in groups of p microbatches per chunk,
  backwards the same with the chunks reversed, after (p - i - 1) 2 + (v - 1) p warm-up forwards.
- GPipe: all forwards, then all backwards.
"""

from __future__ import annotations


def _orders(schedule: str, p: int, k: int, v: int) -> list[list[tuple[str, int, int]]]:
    """Each device's work in order: (pass, microbatch, chunk)."""
    out = []
    for i in range(p):
        if schedule == "gpipe":
            out.append([("F", j, 0) for j in range(k)] + [("B", j, 0) for j in range(k)])
            continue
        n = k * v

        def forward(x: int) -> tuple[str, int, int]:
            return ("F", (x // (p * v)) * p + x % p, (x // p) % v)

        def backward(x: int) -> tuple[str, int, int]:
            return ("B", (x // (p * v)) * p + x % p, v - 1 - (x // p) % v)

        warm = min(n, (p - i - 1) * 2 + (v - 1) * p) if v > 1 else min(k, p - i - 1)
        work = [forward(x) for x in range(warm)]
        for x in range(n):
            if warm + x < n:
                work.append(forward(warm + x))
            work.append(backward(x))
        out.append(work)
    return out


def step_time(
    schedule: str,
    p: int,
    k: int,
    v: int,
    forward_s: float,
    backward_s: float,
    send_s: float,
    last_scale: float = 1.0,
) -> float:
    """The step's seconds: ``forward_s`` and ``backward_s`` are one microbatch's passes over a whole device
    (a chunk takes 1/v of them), ``send_s`` one send between devices; the last device's passes take
    ``last_scale`` times as long (its output head)."""
    orders = _orders(schedule, p, k, v)
    last = p * v - 1
    ready: dict[
        tuple[str, int, int], float
    ] = {}  # (pass, microbatch, stage) -> when its input is there
    clock, pos = [0.0] * p, [0] * p
    moved = True
    while moved:
        moved = False
        for i in range(p):
            while pos[i] < len(orders[i]):
                kind, mb, chunk = orders[i][pos[i]]
                stage = chunk * p + i
                needs = None
                if kind == "F" and stage > 0:
                    needs = ("F", mb, stage)
                if kind == "B" and stage < last:
                    needs = ("B", mb, stage)
                if needs is not None and needs not in ready:
                    break
                start = max(clock[i], ready.get(needs, 0.0) if needs else 0.0)
                scale = (last_scale if i == p - 1 else 1.0) / v
                clock[i] = start + scale * (forward_s if kind == "F" else backward_s)
                sent = send_s if p > 1 else 0.0
                if kind == "F" and stage < last:
                    ready[("F", mb, stage + 1)] = clock[i] + sent
                if kind == "B" and stage > 0:
                    ready[("B", mb, stage - 1)] = clock[i] + sent
                pos[i] += 1
                moved = True
    if any(pos[i] < len(orders[i]) for i in range(p)):
        raise AssertionError(f"{schedule} p={p} k={k} v={v} deadlocks")
    return max(clock)


def sends_waited(schedule: str, p: int, k: int, v: int, send_s: float = 1e-3) -> float:
    """Sends on the step's critical path: the step with sends less the step without, in sends."""
    with_sends = step_time(schedule, p, k, v, 1.0, 2.0, send_s)
    return (with_sends - step_time(schedule, p, k, v, 1.0, 2.0, 0.0)) / send_s
