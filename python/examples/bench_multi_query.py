"""Chunks of q_len query tokens over a quantized paged cache: which path is faster?

For each q_len, on one shape and one cache (vLLM's paged TurboQuant layout, every
sequence ctx tokens long, query j seeing positions [0, ctx - q_len + j]), times in
the same run (CUDA events, median of --reps):

  fused     tqkit's multi-query decode (q_len <= 128): one launch, the cache read once per
            16 query columns (q_len x heads per kv head)
  dense     tqkit's dequant of the whole cache to fp16, then torch SDPA with the causal mask
            aligned to the end (tqkit_torch.decode_dense): the large-chunk path
  separate  q_len single-query decodes (what vLLM's TurboQuant backend runs for chunks of
            <= 128 queries), q_len <= 32 only
  sdpa16    torch SDPA over an uncompressed fp16 cache of the same keys/values (no dequant):
            the uncompressed engine's cost, for reference

and prints one row per q_len with the ratios and the path tqkit_torch.decode() takes there
(takes_dense), plus one JSON line per row (--json FILE, appended).

    PYTHONPATH=python python python/examples/bench_multi_query.py --format turboquant_4bit_nc \
        --batch 32 --heads 32 --kv-heads 8 --ctx 32768 --q-lens 1,2,4,8,16,32,64,128,256,512
"""
import argparse

import torch
import torch.nn.functional as F

import tqkit_torch as tq
from _bench import add_shape_args, append_json_lines, cell, filled_cache, timed


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap, batch=32, ctx=32768)
    ap.add_argument("--q-lens", default="1,2,4,8,16,32,64,128,256,512")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    B, H, HKV, D, T, bs = a.batch, a.heads, a.kv_heads, a.head_dim, a.ctx, 16
    scale = D ** -0.5
    cache, table, lens, kd, vd = filled_cache(a.format, B, HKV, D, T, bs, dense=True)  # kd, vd: for sdpa16
    rows = []
    print(f"{a.format}, B {B}, {H}/{HKV} heads, d {D}, ctx {T} (ms, medians of {a.reps}; "
          f"{torch.cuda.get_device_name(0)})")
    print(f"{'q_len':>6} {'fused':>9} {'dense':>9} {'separate':>9} {'sdpa16':>9} {'dense/fused':>12} "
          f"{'separate/fused':>15} {'fused/q1':>9} {'decode()':>9}")
    t_q1 = None
    for q_len in [int(x) for x in a.q_lens.split(",")]:
        q = torch.randn(B, q_len, H, D, device="cuda", dtype=torch.half)
        r = {"format": a.format, "batch": B, "heads": H, "kv_heads": HKV, "head_dim": D, "ctx": T, "q_len": q_len,
             "device": torch.cuda.get_device_name(0), "reps": a.reps,
             "decode_path": "dense" if tq.takes_dense(q_len, H, HKV) else "fused"}
        if q_len <= 128:
            ws = torch.empty(tq.decode_workspace_bytes(a.format, B, q_len, H, HKV, D, bs, T), dtype=torch.uint8,
                             device="cuda")
            out = torch.empty_like(q)
            qq, oo = (q[:, 0], out[:, 0]) if q_len == 1 else (q, out)
            r["fused_ms"] = timed(lambda: tq.decode_out(oo, qq, cache, table, lens, ws, a.format, scale, T), a.reps)
            if q_len == 1:
                t_q1 = r["fused_ms"]
            if t_q1:
                r["fused_over_q1"] = r["fused_ms"] / t_q1
        if q_len >= 2:
            r["dense_ms"] = timed(lambda: tq.decode_dense(q, cache, table, lens, a.format, scale, T), a.reps)
        if 2 <= q_len <= 32:
            ws1 = torch.empty(tq.decode_workspace_bytes(a.format, B, 1, H, HKV, D, bs, T), dtype=torch.uint8,
                              device="cuda")
            q1 = [q[:, j].contiguous() for j in range(q_len)]
            o1 = torch.empty_like(q1[0])

            def separate():
                for j in range(q_len):
                    tq.decode_out(o1, q1[j], cache, table, lens, ws1, a.format, scale, T)
            r["separate_ms"] = timed(separate, a.reps)
        qt = q.transpose(1, 2)
        try:
            from torch.nn.attention.bias import causal_lower_right
            mask = causal_lower_right(q_len, T) if q_len > 1 else None
        except ImportError:
            mask = None
        r["sdpa16_ms"] = timed(lambda: F.scaled_dot_product_attention(qt, kd, vd, attn_mask=mask, scale=scale,
                                                                      enable_gqa=True), a.reps)
        if "fused_ms" in r and "dense_ms" in r:
            r["dense_over_fused"] = r["dense_ms"] / r["fused_ms"]
        if "fused_ms" in r and "separate_ms" in r:
            r["separate_over_fused"] = r["separate_ms"] / r["fused_ms"]
        rows.append(r)
        f = lambda k, w=9, p=4: cell(r, k, w, p)
        print(f"{q_len:>6} {f('fused_ms')} {f('dense_ms')} {f('separate_ms')} {f('sdpa16_ms')} "
              f"{f('dense_over_fused', 12, 2)} {f('separate_over_fused', 15, 2)} {f('fused_over_q1', 9, 2)} "
              f"{r['decode_path']:>9}")
        del q, qt
    append_json_lines(a.json, rows)


if __name__ == "__main__":
    main()
