#!/usr/bin/env python3
"""Time torch.nn.functional.scaled_dot_product_attention for decode (q_len 1).

fp16, contiguous K/V [B, Hkv, N, D], q [B, Hq, 1, D], enable_gqa=True where the
installed torch supports it (else K/V are expanded to Hq heads first, outside
the timed region, and the bytes counted are the expanded ones actually read).
CUDA events around each call; the median of --reps calls after --warmup; the
K/V inputs rotate among enough copies to exceed 4x the L2 cache. Prints one
JSON line per shape: ms, GB/s on the K/V bytes, backend hints. --shape B,HQ,HKV,D,N (repeatable)
times several shapes in one process instead of --batch/--q-heads/--kv-heads/--head-dim/--ctx.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--shape", action="append", default=[], metavar="B,HQ,HKV,D,N")
    a = ap.parse_args()
    shapes = [(a.batch, a.q_heads, a.kv_heads, a.head_dim, a.ctx)]
    if a.shape:
        shapes = []
        for s in a.shape:
            v = s.split(",")
            if len(v) != 5 or not all(x.isdigit() and int(x) > 0 for x in v):
                ap.error(f"--shape {s!r}: expected five positive integers B,HQ,HKV,D,N")
            shapes.append(tuple(int(x) for x in v))
    for B, Hq, Hkv, D, N in shapes:
        if Hq % Hkv:
            ap.error(f"q heads {Hq} must be a multiple of kv heads {Hkv}")
        time_shape(a, B, Hq, Hkv, D, N)
        torch.cuda.empty_cache()


def time_shape(a, B, Hq, Hkv, D, N):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    kv_bytes = 2 * B * Hkv * N * D * 2
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    copies = max(2, min(8, -(-4 * l2 // kv_bytes)))
    free, _ = torch.cuda.mem_get_info()
    while copies > 1 and copies * kv_bytes > free // 2:
        copies -= 1
    q = torch.randn(B, Hq, 1, D, device=dev, dtype=torch.float16)
    ks = [torch.randn(B, Hkv, N, D, device=dev, dtype=torch.float16) for _ in range(copies)]
    vs = [torch.randn(B, Hkv, N, D, device=dev, dtype=torch.float16) + 0.3 for _ in range(copies)]
    gqa = True
    try:
        F.scaled_dot_product_attention(q, ks[0], vs[0], enable_gqa=True)
    except TypeError:
        gqa = False
        rep = Hq // Hkv
        ks = [k.repeat_interleave(rep, dim=1).contiguous() for k in ks]
        vs = [v.repeat_interleave(rep, dim=1).contiguous() for v in vs]
        kv_bytes *= rep

    def call(i):
        if gqa:
            return F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)
        return F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies])

    for i in range(a.warmup):
        call(i)
    torch.cuda.synchronize()
    times = []
    for i in range(a.reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call(i)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    ms = statistics.median(times)
    print(json.dumps({
        "kernel": "torch_sdpa_fp16", "torch": torch.__version__, "device": torch.cuda.get_device_name(dev),
        "batch": B, "q_heads": Hq, "kv_heads": Hkv, "head_dim": D, "ctx": N, "enable_gqa": gqa,
        "cache_copies": copies, "median_ms": ms, "min_ms": min(times), "max_ms": max(times), "reps": a.reps,
        "kv_bytes": kv_bytes, "gbps": kv_bytes / (ms * 1e6),
    }))


if __name__ == "__main__":
    main()
