"""A drop-in decode next to the torch SDPA call it replaces.

The same keys and values twice: once as a dense fp16 (or bf16) cache for
torch.nn.functional.scaled_dot_product_attention, once stored by tqkit into
vLLM's paged uint8 TurboQuant cache. Prints both outputs' difference, the
memory of each cache and the time of each decode (CUDA events, median of 50).

    PYTHONPATH=python python python/examples/decode_vs_sdpa.py [--format turboquant_4bit_nc] [--ctx 8192] \
        [--dtype bf16]
"""
import argparse

import torch
import torch.nn.functional as F

import tqkit_torch as tq
from _bench import add_shape_args, timed


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap, batch=8, ctx=8192)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="the model's activation type")
    a = ap.parse_args()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.half
    B, H, HKV, D, T, bs = a.batch, a.heads, a.kv_heads, a.head_dim, a.ctx, 16
    torch.manual_seed(0)
    k = torch.randn(B, T, HKV, D, device="cuda", dtype=dt)
    v = torch.randn(B, T, HKV, D, device="cuda", dtype=dt)
    q = torch.randn(B, H, D, device="cuda", dtype=dt)
    scale = D ** -0.5

    # --- dense: torch SDPA over [B, H, T, D] (GQA) --------------------------------
    kd, vd = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    sdpa = lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, scale=scale, enable_gqa=True)[:, :, 0]

    # --- tqkit: vLLM's paged TurboQuant cache ------------------------------------
    pages = T // bs
    cache = torch.zeros(B * pages, bs, HKV, tq.slot_bytes(a.format, D), dtype=torch.uint8, device="cuda")
    table = torch.arange(B * pages, dtype=torch.int32, device="cuda").view(B, pages)
    slot_mapping = torch.arange(B * T, device="cuda")  # sequence b's token t -> block b·pages + t/16
    tq.store(k.reshape(B * T, HKV, D), v.reshape(B * T, HKV, D), cache, slot_mapping, a.format)
    seq_lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
    ws = torch.empty(tq.decode_workspace_bytes(a.format, B, 1, H, HKV, D, bs, T, dtype=dt), dtype=torch.uint8,
                     device="cuda")
    out = torch.empty_like(q)  # the query's type
    dec = lambda: tq.decode_out(out, q, cache, table, seq_lens, ws, a.format, scale, T)

    ref = sdpa().float()
    dec()
    print(f"{a.format}: max |tqkit - SDPA| = {(out.float() - ref).abs().max().item():.4f} "
          f"(quantization error of the cache; RMS of the output {ref.pow(2).mean().sqrt().item():.4f})")
    print(f"cache: {a.dtype} {2 * k.numel() * 2 / 2**20:.0f} MiB, {a.format} {cache.numel() / 2**20:.0f} MiB")
    t_sdpa, t_tq = timed(sdpa), timed(dec)
    print(f"decode B {B}, {H}/{HKV} heads, d {D}, {T} tokens: SDPA {a.dtype} {t_sdpa:.4f} ms, tqkit {t_tq:.4f} ms "
          f"({t_sdpa / t_tq:.2f}x)")


if __name__ == "__main__":
    main()
