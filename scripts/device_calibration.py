"""Measure on one GPU what the cost model assumes, and write the figures as JSON with provenance.

Run where a CUDA GPU is (it needs only PyTorch): ``python scripts/device_calibration.py --out DIR``.
``--smoke`` runs every section at toy sizes on whatever device there is (CPU included), to check the
script before a GPU's time is spent on it. Sections, each written to ``DIR/device_calibration.json``
as soon as it ends (a run stopped part way keeps what it measured):

- ``environment``: the part, its SM count, clocks and power limits (nvidia-smi), the software.
- ``hbm``: device-to-device copy bandwidth (the HBM floor of ``costs.gemm``).
- ``gemm_bf16``: seconds of bf16 GEMMs (C[m, n] = A[m, k] B[k, n]): a depth sweep at m = n = 8192 (the
  depth curve's k_half), a width sweep at m = k = 8192 (tile and wave quantization), small m (the
  roofline), and the forward, input-gradient and weight-gradient GEMMs of Llama 3 8B / 70B / 405B
  layers at tp 1..8 and 4k..16k rows (what ``costs.gemm.training_seconds`` costs).
- ``gemm_fp8``: the same shapes (fewer) through ``torch._scaled_mm`` with per-tensor, row-wise and
  1x128 / 128x128 blockwise scales (the fp8 recipes), where the build supports them.
- ``attention``: fused causal attention (PyTorch SDPA: the FlashAttention-2, cuDNN and memory-efficient
  backends) forward and forward + backward by sequence length at head dim 128 (and MLA's 192 / 128).
- ``llama_step``: a Llama-3-8B-shaped model of 8 layers at 8192 tokens, one training step (forward,
  backward, AdamW) per recompute policy (none; Megatron-style selective: the attention core and the
  MLP activation; torchtitan's per-op selective; full): step seconds, peak memory, and the bytes the
  forward keeps per layer and token.
- ``power``: board power and SM clock idle and under a sustained bf16 GEMM (nvidia-smi samples).
- ``grouped_gemm``, ``launch``, ``elementwise``, ``gemm_repeat``: grouped expert GEMMs, host time per
  kernel launch, element-wise bandwidth, and the GEMM sweeps repeated (the run-to-run spread).
- ``quantise``: fp8 quantisation of a layer input per scaling recipe, a transposing cast and a 16-point
  Hadamard transform, eager and compiled, against the bytes they move.

Timing: CUDA events around n back-to-back calls after warm-up, n chosen so that a measurement lasts
about 50 ms (at least 3 calls); operands are random normal (bf16) as in training.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

RESULTS: dict = {}
OUT_FILE: Path | None = None
SMOKE = False


def save() -> None:
    assert OUT_FILE is not None
    OUT_FILE.write_text(json.dumps(RESULTS, indent=1) + "\n")


def log(*args) -> None:
    print(time.strftime("%H:%M:%S"), *args, flush=True)


def dev() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, target_s: float = 0.05, max_calls: int = 200) -> float:
    """Seconds per call of ``fn``: two warm-up calls, then n calls timed together (events on CUDA)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    first = max(time.perf_counter() - t0, 1e-6)
    n = 1 if SMOKE else max(3, min(max_calls, math.ceil(target_s / first)))
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / n
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def nvidia_smi(query: str) -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return [x.strip() for x in out.stdout.strip().split(",")] if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        return []


SMI_FIELDS = (
    "name,driver_version,power.limit,power.default_limit,power.max_limit,enforced.power.limit,"
    "clocks.max.sm,clocks.max.mem,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.total"
)


def environment() -> dict:
    env: dict = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "smoke": SMOKE,
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env |= {
            "device": p.name,
            "sm_count": p.multi_processor_count,
            "memory_bytes": p.total_memory,
            "capability": f"{p.major}.{p.minor}",
            "l2_bytes": getattr(p, "L2_cache_size", None),
        }
        env["nvidia_smi"] = dict(zip(SMI_FIELDS.split(","), nvidia_smi(SMI_FIELDS)))
    else:
        env["device"] = "cpu"
    return env


def hbm() -> dict:
    n = (1 << 20) if SMOKE else (1 << 31)  # 2 GiB of bf16 (4 GiB) each way
    a = torch.empty(n, dtype=torch.bfloat16, device=dev()).normal_()
    b = torch.empty_like(a)
    s = timed(lambda: b.copy_(a), target_s=0.2)
    moved = 2 * a.numel() * a.element_size()
    return {"copy_bytes_read_and_written": moved, "seconds": s, "bytes_per_s": moved / s}


# Llama 3 layers (Meta's params.json: dim, n_heads, n_kv_heads, ffn hidden), head dim 128
LLAMA = {
    "llama3-8b": (4096, 32, 8, 14336),
    "llama3-70b": (8192, 64, 8, 28672),
    "llama3-405b": (16384, 128, 8, 53248),
}


def layer_weights(d: int, heads: int, kv: int, ffn: int, tp: int) -> dict[str, tuple[int, int]]:
    """The column-parallel / row-parallel shards of one layer's weights as (n, k): y[m, n] = x[m, k] W."""
    return {
        "qkv": ((heads + 2 * kv) * 128 // tp, d),
        "o": (d, heads * 128 // tp),
        "gate_up": (2 * ffn // tp, d),
        "down": (d, ffn // tp),
    }


def gemm_shapes() -> list[dict]:
    shapes: list[dict] = []
    if SMOKE:
        return [
            {"set": "smoke", "m": 64, "n": 128, "k": 256},
            {"set": "smoke", "m": 128, "n": 64, "k": 32},
        ]
    for k in (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192, 16384):
        shapes.append({"set": "depth", "m": 8192, "n": 8192, "k": k})
    for n in range(1024, 8193, 256):
        shapes.append({"set": "width", "m": 8192, "n": n, "k": 8192})
    for m in (16, 64, 256, 1024, 2048):
        shapes.append({"set": "rows", "m": m, "n": 8192, "k": 8192})
    for model, (d, heads, kv, ffn) in LLAMA.items():
        for tp in (1, 2, 4, 8):
            for m in (4096, 8192, 16384):
                for weight, (n, k) in layer_weights(d, heads, kv, ffn, tp).items():
                    base = {"set": "layer", "model": model, "tp": tp, "weight": weight}
                    shapes.append(base | {"pass": "forward", "m": m, "n": n, "k": k})
                    shapes.append(base | {"pass": "dgrad", "m": m, "n": k, "k": n})
                    shapes.append(base | {"pass": "wgrad", "m": k, "n": n, "k": m})
    return shapes


def _gemm_seconds(m: int, n: int, k: int, dtype: torch.dtype) -> float:
    a = torch.randn(m, k, dtype=dtype, device=dev())
    b = torch.randn(k, n, dtype=dtype, device=dev())
    c = torch.empty(m, n, dtype=dtype, device=dev())
    return timed(lambda: torch.mm(a, b, out=c))


def gemm_bf16() -> list[dict]:
    out: list[dict] = RESULTS.setdefault("gemm_bf16", [])  # saved as it grows
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    for i, shape in enumerate(gemm_shapes()):
        if i % 50 == 0:
            save()
            log("gemm_bf16", i)
        m, n, k = shape["m"], shape["n"], shape["k"]
        try:
            s = _gemm_seconds(m, n, k, dtype)
            out.append(shape | {"seconds": s, "tflops": 2 * m * n * k / s / 1e12})
        except Exception as e:  # noqa: BLE001 (record and go on: the next shape may run)
            out.append(shape | {"error": f"{type(e).__name__}: {e}"[:300]})
    return out


def _fp8_operands(m: int, n: int, k: int):
    fp8 = torch.float8_e4m3fn
    a = torch.randn(m, k, device=dev()).to(fp8)
    b = torch.randn(n, k, device=dev()).to(fp8).t()  # (k, n) column-major, as cuBLASLt wants
    return a, b


def _fp8_recipes(a, b, m: int, n: int, k: int) -> dict:
    """One call per recipe: per-tensor scales (with and without fast accumulation), row-wise (per row
    of A, per column of B), DeepSeek-V3's blockwise (1 x 128 tiles of A, outer-dim-major; 128 x 128
    blocks of B) through ``torch._scaled_mm`` and, where the build has it, ``F.scaled_mm``."""
    one, bf16 = torch.ones((), device=dev()), torch.bfloat16
    rows, cols = torch.ones(m, 1, device=dev()), torch.ones(1, n, device=dev())
    tiles = torch.ones(k // 128, m, device=dev()).t()  # (m, k / 128), outer-dim-major
    blocks = torch.ones(n // 128, k // 128, device=dev()).t()  # (k / 128, n / 128)
    calls = {
        "tensorwise": lambda: torch._scaled_mm(a, b, one, one, out_dtype=bf16),
        "tensorwise_fast_accum": lambda: torch._scaled_mm(
            a, b, one, one, out_dtype=bf16, use_fast_accum=True
        ),
        "rowwise": lambda: torch._scaled_mm(a, b, rows, cols, out_dtype=bf16),
        "blockwise": lambda: torch._scaled_mm(a, b, tiles, blocks, out_dtype=bf16),
    }
    if hasattr(F, "scaled_mm"):
        st = F.ScalingType
        calls["blockwise_recipes"] = lambda: F.scaled_mm(
            a, b, tiles, st.BlockWise1x128, blocks, st.BlockWise128x128, output_dtype=bf16
        )
    return calls


def gemm_fp8() -> list[dict]:
    out: list[dict] = []
    if SMOKE:
        shapes = [{"set": "smoke", "m": 256, "n": 256, "k": 256}]
    else:
        shapes = [s for s in gemm_shapes() if s["set"] == "depth" and s["k"] >= 128]
        shapes += [
            s
            for s in gemm_shapes()
            if s["set"] == "layer" and s["tp"] in (1, 8) and s["model"] != "llama3-405b"
        ]
        shapes = [
            s for s in shapes if s["set"] != "layer" or s["m"] == 8192 or s["pass"] == "wgrad"
        ]
    RESULTS["gemm_fp8"] = out  # saved as it grows
    for i, shape in enumerate(shapes):
        if i % 20 == 0:
            save()
            log("gemm_fp8", i)
        out += _fp8_shape(shape)
    return out


def _fp8_shape(shape: dict) -> list[dict]:
    m, n, k = shape["m"], shape["n"], shape["k"]
    try:
        a, b = _fp8_operands(m, n, k)
    except Exception as e:  # noqa: BLE001
        return [shape | {"error": f"{type(e).__name__}: {e}"[:300]}]
    out = []
    for recipe, fn in _fp8_recipes(a, b, m, n, k).items():
        try:
            s = timed(fn)
            out.append(shape | {"recipe": recipe, "seconds": s, "tflops": 2 * m * n * k / s / 1e12})
        except Exception as e:  # noqa: BLE001
            out.append(shape | {"recipe": recipe, "error": f"{type(e).__name__}: {e}"[:300]})
    return out


def _backends():
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }


def _attention_seconds(backend, batch, heads, seq, dqk, dv, causal) -> tuple[float, float]:
    """Seconds of one fused attention call's forward, and of its forward and backward."""
    from torch.nn.attention import sdpa_kernel

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    q, k = (
        torch.randn(batch, heads, seq, dqk, dtype=dtype, device=dev(), requires_grad=True)
        for _ in range(2)
    )
    v = torch.randn(batch, heads, seq, dv, dtype=dtype, device=dev(), requires_grad=True)
    grad = torch.randn(batch, heads, seq, dv, dtype=dtype, device=dev())

    def fwd():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

    with sdpa_kernel([backend]):
        return timed(fwd), timed(fwd_bwd)


def attention() -> list[dict]:
    out: list[dict] = RESULTS.setdefault("attention", [])  # saved as it grows
    tokens = 512 if SMOKE else 32768
    seqs = (128, 256) if SMOKE else (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
    heads = 4 if SMOKE else 32
    cases = [(s, 128, 128, True) for s in seqs]
    cases += [(256 if SMOKE else 8192, 128, 128, False), (256 if SMOKE else 4096, 192, 128, True)]
    for name, backend in _backends().items():
        if name == "math" and not SMOKE:
            continue
        for seq, dqk, dv, causal in cases:
            batch = max(1, tokens // seq)
            rec = {"backend": name, "seq": seq, "batch": batch, "heads": heads, "head_dim_qk": dqk}
            rec |= {"head_dim_v": dv, "causal": causal}
            # FLOPs: QK^T and PV, halved under a causal mask (what FlashAttention's benchmarks count);
            # the backward is 2.5 forwards (FlashAttention-2's convention)
            flops = 2 * batch * heads * seq * seq * (dqk + dv) * (0.5 if causal else 1.0)
            try:
                sf, sfb = _attention_seconds(backend, batch, heads, seq, dqk, dv, causal)
                rec |= {"forward_s": sf, "forward_backward_s": sfb, "forward_flops": flops}
                rec |= {
                    "forward_tflops": flops / sf / 1e12,
                    "forward_backward_tflops": 3.5 * flops / sfb / 1e12,
                }
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
            out.append(rec)
            save()
    return out


# ---------------------------------------------------------------- a small Llama training step


class RMSNorm(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, d: int, heads: int, kv: int, ffn: int, policy: str):
        super().__init__()
        self.heads, self.kv, self.hd, self.policy = heads, kv, d // heads, policy
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.wq = torch.nn.Linear(d, heads * self.hd, bias=False)
        self.wk = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wv = torch.nn.Linear(d, kv * self.hd, bias=False)
        self.wo = torch.nn.Linear(heads * self.hd, d, bias=False)
        self.w1 = torch.nn.Linear(d, ffn, bias=False)
        self.w3 = torch.nn.Linear(d, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, d, bias=False)

    def core(self, q, k, v):
        if (
            REPEAT_KV
        ):  # no fused kernel takes grouped keys in this build: repeat them per query head
            k, v = (t.repeat_interleave(self.heads // self.kv, dim=1) for t in (k, v))
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def act(self, g, u):
        return F.silu(g) * u

    def forward(self, x, cos, sin):
        from torch.utils.checkpoint import checkpoint

        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.wv(h).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if (
            self.policy == "selective"
        ):  # Megatron's selective: the attention core and the activation rerun
            o = checkpoint(self.core, q, k, v, use_reentrant=False)
        else:
            o = self.core(q, k, v)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        h = self.mlp_norm(x)
        g, u = self.w1(h), self.w3(h)
        a = (
            checkpoint(self.act, g, u, use_reentrant=False)
            if self.policy == "selective"
            else self.act(g, u)
        )
        return x + self.w2(a)


def _op_sac_context():
    """torchtitan's per-op selective AC: save the attention kernels' outputs and every other mm."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    kernels = ("flash", "efficient", "cudnn")
    save = {
        getattr(aten, f"_scaled_dot_product_{name}_attention").default
        for name in kernels
        if hasattr(aten, f"_scaled_dot_product_{name}_attention")
    }

    meta: dict[str, int] = {}  # the mm count of this checkpoint's forward and of its recompute

    def policy_fn(ctx, op, *args, **kwargs):
        key = "recompute" if ctx.is_recompute else "forward"
        if op == aten.mm.default:
            meta[key] = meta.get(key, 0) + 1
        to_save = op in save or (op == aten.mm.default and meta.get(key, 0) % 2 == 1)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy_fn)


class Llama(torch.nn.Module):
    def __init__(self, layers: int, d: int, heads: int, kv: int, ffn: int, vocab: int, policy: str):
        super().__init__()
        self.policy = policy
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(Layer(d, heads, kv, ffn, policy) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def trunk(self, tokens, cos, sin):
        from torch.utils.checkpoint import checkpoint

        x = self.embed(tokens)
        for layer in self.layers:
            if self.policy == "full":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            elif self.policy == "op":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False, context_fn=_op_sac_context)
            else:
                x = layer(x, cos, sin)
        return x

    def forward(self, tokens, cos, sin):
        return self.head(self.norm(self.trunk(tokens, cos, sin)))


STEP = {
    "layers": 8,
    "d": 4096,
    "heads": 32,
    "kv": 8,
    "ffn": 14336,
    "vocab": 128256,
    "seq": 8192,
    "batch": 1,
}
STEP_SMOKE = {
    "layers": 2,
    "d": 64,
    "heads": 4,
    "kv": 2,
    "ffn": 128,
    "vocab": 256,
    "seq": 64,
    "batch": 1,
}


REPEAT_KV = False  # set by ``llama_step`` where no fused kernel takes grouped keys


def llama_step() -> list[dict]:
    global REPEAT_KV
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = STEP_SMOKE if SMOKE else STEP
    out = []
    # the fused backends only (flash, cuDNN, memory-efficient), never the math one
    FUSED = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    try:
        q = torch.randn(1, 4, 64, 128, device=dev(), dtype=torch.bfloat16)
        kv = torch.randn(1, 2, 64, 128, device=dev(), dtype=torch.bfloat16)
        with sdpa_kernel(FUSED):
            F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
    except RuntimeError:
        REPEAT_KV = True
    for policy in ("none", "selective", "op", "full"):
        rec: dict = {"policy": policy} | cfg | {"kv_heads_repeated": REPEAT_KV}
        try:
            with sdpa_kernel(FUSED):
                rec |= _step_record(policy, cfg)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        out.append(rec)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        log("llama_step", policy, {k: v for k, v in rec.items() if k not in cfg})
    return out


def _step_record(policy: str, cfg: dict) -> dict:
    """One policy's training step: seconds (mean of 5 after 2), peak memory, what the forward keeps."""
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    rec: dict = {}
    torch.manual_seed(0)
    with dev():  # initialised on the device (minutes on a CPU for 2.8 B parameters)
        model = Llama(
            cfg["layers"], cfg["d"], cfg["heads"], cfg["kv"], cfg["ffn"], cfg["vocab"], policy
        ).to(dtype=dtype)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    s, hd = cfg["seq"], cfg["d"] // cfg["heads"]
    tokens = torch.randint(0, cfg["vocab"], (cfg["batch"], s), device=dev())
    pos = torch.arange(s, device=dev(), dtype=torch.float32)[:, None]
    freq = 500000.0 ** (-torch.arange(0, hd, 2, device=dev(), dtype=torch.float32) / hd)
    ang = (pos * freq)[None, None]
    cos, sin = torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)

    def step():
        logits = model(tokens, cos, sin)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tokens.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    step()
    step()  # optimizer state and gradients allocated
    sync()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
        rec["static_bytes"] = torch.cuda.memory_allocated()  # weights, gradients, AdamW moments
    n = 1 if SMOKE else 5
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync()
    rec["step_s"] = (time.perf_counter() - t0) / n
    rec["params"] = params
    rec["train_flops_per_step"] = 6 * params * s * cfg["batch"]
    if torch.cuda.is_available():
        rec["peak_bytes"] = torch.cuda.max_memory_allocated()
        rec["reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
        # what the trunk's forward keeps for backward: allocated after it, less before (the
        # embedding's output and the last layer's output included), per layer and token
        before = torch.cuda.memory_allocated()
        x = model.trunk(tokens, cos, sin)
        sync()
        kept = torch.cuda.memory_allocated() - before
        rec["trunk_kept_bytes"] = kept
        rec["trunk_kept_bytes_per_layer_token"] = kept / cfg["layers"] / (s * cfg["batch"])
        rec["trunk_output_shape"] = list(x.shape)
    return rec


# ---------------------------------------------------------------- power


class Sampler:
    """nvidia-smi samples of power and clocks every ``period_ms`` in a background thread."""

    def __init__(self, period_ms: int = 100):
        self.period_ms, self.rows, self.proc = period_ms, [], None

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=power.draw,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu",
                    "--format=csv,noheader,nounits",
                    f"-lms={self.period_ms}",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        except OSError:
            self.proc = None
        return self

    def _read(self):
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.rows.append([float(x) for x in line.split(",")])

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def summary(self) -> dict:
        rows = self.rows[len(self.rows) // 4 :] or self.rows  # past the first quarter: settled
        if not rows:
            return {"samples": 0}
        cols = list(zip(*rows))
        names = ("power_w", "sm_clock_mhz", "mem_clock_mhz", "temperature_c", "utilization_pct")
        return {"samples": len(rows)} | {
            f"{name}_median": sorted(col)[len(col) // 2] for name, col in zip(names, cols)
        }


def power() -> dict:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    sync()
    time.sleep(3.0)  # let the board settle after the previous section
    with Sampler() as idle:
        time.sleep(4.0)
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device=dev())
    b = torch.randn(n, n, dtype=torch.bfloat16, device=dev())
    c = torch.empty(n, n, dtype=torch.bfloat16, device=dev())
    done, t_end = 0, time.perf_counter() + 8.0
    with Sampler() as busy:
        t0 = time.perf_counter()
        while time.perf_counter() < t_end:
            for _ in range(20):
                torch.mm(a, b, out=c)
            sync()
            done += 20
        seconds = time.perf_counter() - t0
    return {
        "idle": idle.summary(),
        "bf16_gemm_8192": busy.summary()
        | {"tflops": 2 * n**3 * done / seconds / 1e12, "seconds": seconds},
    }


# DeepSeek-V3's routed expert (config.json: hidden 7168, moe_intermediate_size 2048): gate-up and down
EXPERT = {"gate_up": (2 * 2048, 7168), "down": (7168, 2048)}


def _grouped_seconds(experts: int, rows: int, n: int, k: int) -> tuple[float, float]:
    """Seconds of ``experts`` GEMMs of (rows, n, k): one grouped launch (``torch._grouped_mm``, as
    torchtitan's MoE runs them), and one ``torch.mm`` per expert (a loop over local experts)."""
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    x = torch.randn(experts * rows, k, dtype=dtype, device=dev())
    w = torch.randn(experts, n, k, dtype=dtype, device=dev())
    offs = torch.arange(1, experts + 1, dtype=torch.int32, device=dev()) * rows
    grouped = timed(lambda: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs))
    wt = [w[e].t() for e in range(experts)]
    xs = [x[e * rows : (e + 1) * rows] for e in range(experts)]

    def loop():
        for e in range(experts):
            torch.mm(xs[e], wt[e])

    return grouped, timed(loop)


def grouped_gemm() -> list[dict]:
    out: list[dict] = RESULTS.setdefault("grouped_gemm", [])
    expert_counts = (1, 4) if SMOKE else (1, 2, 4, 8, 16, 32, 64)
    row_counts = (16,) if SMOKE else (128, 256, 512, 1024, 2048, 4096)
    for weight, (n, k) in EXPERT.items():
        if SMOKE:
            n, k = n // 64, k // 64
        for experts in expert_counts:
            for rows in row_counts:
                rec = {
                    "weight": weight,
                    "experts": experts,
                    "rows_per_expert": rows,
                    "n": n,
                    "k": k,
                }
                flops = 2 * experts * rows * n * k
                for name in ("grouped", "loop"):
                    rec[f"{name}_s"] = None
                try:
                    g, lp = _grouped_seconds(experts, rows, n, k)
                    rec |= {"grouped_s": g, "loop_s": lp, "grouped_tflops": flops / g / 1e12}
                    rec["loop_tflops"] = flops / lp / 1e12
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {e}"[:300]
                out.append(rec)
        save()
    return out


def launch() -> dict:
    """Host time per kernel launch: many tiny kernels back to back (the CPU issues them faster than
    the GPU runs them only when they are this small), eager and replayed from a CUDA graph."""
    x = torch.zeros(1, device=dev())
    n = 100 if SMOKE else 20000
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    issue = (time.perf_counter() - t0) / n
    sync()
    eager = (time.perf_counter() - t0) / n
    rec = {"kernels": n, "eager_issue_s_per_launch": issue, "eager_s_per_kernel": eager}
    a = torch.randn(64, 64, device=dev())
    t0 = time.perf_counter()
    for _ in range(n // 4):
        torch.mm(a, a)
    sync()
    rec["small_mm_s_per_launch"] = (time.perf_counter() - t0) / (n // 4)
    if torch.cuda.is_available():
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x.add_(1.0)
        sync()
        with torch.cuda.graph(g):
            for _ in range(1000):
                x.add_(1.0)
        g.replay()
        sync()
        t0 = time.perf_counter()
        for _ in range(10):
            g.replay()
        sync()
        rec["graph_s_per_kernel"] = (time.perf_counter() - t0) / 10000
    return rec


def elementwise() -> list[dict]:
    """Achieved bandwidth of the element-wise passes of a layer at 8192 tokens (bytes read and
    written by the kernel's inputs and outputs, bf16): RMSNorm, SwiGLU's silu(g) * u, residual add."""
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    t, d, f = (64, 64, 128) if SMOKE else (8192, 4096, 14336)
    x = torch.randn(t, d, dtype=dtype, device=dev())
    wn = torch.ones(d, dtype=dtype, device=dev())
    g, u = (torch.randn(t, f, dtype=dtype, device=dev()) for _ in range(2))
    size = x.element_size()
    cases = {
        "rms_norm": (lambda: F.rms_norm(x, (d,), wn, 1e-5), 2 * t * d * size),
        # eager: silu reads g and writes its output, the product reads it and u and writes (5 t f; the runs of
        # 2026-12-04 and -05 counted 4, scripts/device_report.py recounts them)
        "swiglu": (lambda: F.silu(g) * u, 5 * t * f * size),
        "residual_add": (lambda: x + x, 3 * t * d * size),
    }
    out = []
    for name, (fn, moved) in cases.items():
        sec = timed(fn)
        out.append(
            {"op": name, "tokens": t, "seconds": sec, "bytes": moved, "bytes_per_s": moved / sec}
        )
    return out


def gemm_repeat() -> list[dict]:
    """The depth and width sweeps again, minutes after the first: the run-to-run spread."""
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    out = []
    for shape in gemm_shapes():
        if shape["set"] in ("depth", "width", "smoke"):
            s = _gemm_seconds(shape["m"], shape["n"], shape["k"], dtype)
            out.append(
                shape
                | {"seconds": s, "tflops": 2 * shape["m"] * shape["n"] * shape["k"] / s / 1e12}
            )
    return out


COMPILED_SHAPES = ((8192, 8192), (8192, 28672))  # compiling takes seconds a shape: two


def quantise() -> list[dict]:
    """fp8 quantisation of a linear layer's bf16 input (what ``costs.terms`` costs as bytes at HBM
    bandwidth): per tensor (amax, then scale and cast), row-wise, 1 x 128 blockwise, a transposing cast
    (the column-wise copy a weight gradient reads), and a 16-point Hadamard transform of the tensor (NVFP4's
    random Hadamard transform before its column-wise quantisation), eager and, where it compiles,
    fused by ``torch.compile``. Each with the bytes its inputs and outputs move at least."""
    if not hasattr(torch, "float8_e4m3fn"):
        return []
    f8 = torch.float8_e4m3fn
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    h = torch.tensor([[1.0]])
    for _ in range(4):  # Sylvester's 16 x 16 Hadamard matrix, orthonormal
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    h16 = (h / 4.0).to(dtype=dtype, device=dev())

    def tensorwise(x):
        scale = 448.0 / x.abs().amax().float().clamp(min=1e-12)
        return (x.float() * scale).to(f8), scale

    def rowwise(x):
        scale = 448.0 / x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
        return (x.float() * scale).to(f8), scale

    def blockwise(x):
        b = x.view(x.shape[0], -1, 128)
        scale = 448.0 / b.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
        return (b.float() * scale).to(f8).view(x.shape), scale

    def transposed(x):
        return tensorwise(x.t().contiguous())

    def hadamard(x):
        return (x.view(-1, 16) @ h16).view(x.shape)

    cases = {  # name: (function, bytes moved per element at least: read bf16, write fp8 or bf16)
        "tensorwise": (tensorwise, 3.0),
        "rowwise": (rowwise, 3.0),
        "blockwise_1x128": (blockwise, 3.0 + 4 / 128),
        "transposed_tensorwise": (transposed, 3.0),
        "hadamard16": (hadamard, 4.0),
    }
    shapes = [(64, 256)] if SMOKE else [(8192, 4096), *COMPILED_SHAPES, (16384, 8192)]
    out = []
    for t, d in shapes:
        x = torch.randn(t, d, dtype=dtype, device=dev())
        for name, (fn, per_element) in cases.items():
            for mode in ("eager", "compiled") if SMOKE or (t, d) in COMPILED_SHAPES else ("eager",):
                row = {"op": name, "mode": mode, "rows": t, "cols": d}
                try:
                    call = fn if mode == "eager" else torch.compile(fn, dynamic=False)
                    sec = timed(lambda call=call, x=x: call(x))
                except Exception as e:  # noqa: BLE001 (a build without a compiler keeps the eager rows)
                    out.append(row | {"error": f"{type(e).__name__}: {e}"[:200]})
                    continue
                moved = per_element * t * d
                out.append(row | {"seconds": sec, "bytes": moved, "bytes_per_s": moved / sec})
        del x
    return out


SECTIONS = {
    "hbm": hbm,
    "gemm_bf16": gemm_bf16,
    "gemm_fp8": gemm_fp8,
    "attention": attention,
    "llama_step": llama_step,
    "power": power,
    "grouped_gemm": grouped_gemm,
    "launch": launch,
    "elementwise": elementwise,
    "gemm_repeat": gemm_repeat,
    "quantise": quantise,
}


def main() -> None:
    global OUT_FILE, SMOKE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--smoke", action="store_true", help="toy sizes on any device")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--name", default="device_calibration", help="the JSON file's stem")
    args = parser.parse_args()
    SMOKE = args.smoke
    args.out.mkdir(parents=True, exist_ok=True)
    OUT_FILE = args.out / f"{args.name}.json"
    RESULTS["script"] = "scripts/device_calibration.py"
    RESULTS["environment"] = environment()
    save()
    log("environment", RESULTS["environment"])
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            RESULTS[name] = SECTIONS[name]()
        except Exception as e:  # noqa: BLE001 (one section's failure must not lose the others)
            RESULTS[name] = {"error": f"{type(e).__name__}: {e}"[:500]}
        RESULTS.setdefault("section_seconds", {})[name] = time.perf_counter() - t0
        save()
        log(name, f"{time.perf_counter() - t0:.1f} s")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    sys.exit(0)


if __name__ == "__main__":
    main()
