"""A drop-in decode next to the torch SDPA call it replaces.

The same keys and values twice: once as a dense fp16 (or bf16) cache for
torch.nn.functional.scaled_dot_product_attention, once stored by tqkit into
vLLM's paged uint8 TurboQuant cache. Prints both outputs' difference, the
memory of each cache and the time of each decode (CUDA events, median of 50).

With --q-counts (e.g. 16,1x7: one 16-token chunk and 7 single-token decodes, the --batch then being the
number of counts) the queries come as vLLM's mixed batch: [num_tokens, heads, head_dim] with
query_start_loc, query j of a sequence with n queries seeing positions 0 ... ctx - n + j. torch has no
varlen SDPA, so the dense side is one SDPA call per sequence with that causal mask.

    PYTHONPATH=python python python/examples/decode_vs_sdpa.py [--format turboquant_4bit_nc] [--ctx 8192] \
        [--dtype bf16] [--q-counts 16,1x7]
"""
import argparse
import itertools

import torch
import torch.nn.functional as F

import tqkit_torch as tq
from _bench import add_shape_args, timed


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap, batch=8, ctx=8192)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="the model's activation type")
    ap.add_argument("--q-counts", type=query_counts, default=None, metavar="SPEC",
                    help="queries per sequence, e.g. 16,1x7 (NxM: M sequences of N queries; each 1 ... 128)")
    a = ap.parse_args()
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.half
    counts = a.q_counts
    B, H, HKV, D, T, bs = len(counts) if counts else a.batch, a.heads, a.kv_heads, a.head_dim, a.ctx, 16
    torch.manual_seed(0)
    k = torch.randn(B, T, HKV, D, device="cuda", dtype=dt)
    v = torch.randn(B, T, HKV, D, device="cuda", dtype=dt)
    q = torch.randn(sum(counts) if counts else B, H, D, device="cuda", dtype=dt)
    scale = D ** -0.5

    # --- dense: torch SDPA over [B, H, T, D] (GQA) --------------------------------
    kd, vd = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    if counts:  # one call per sequence: its n queries [1, H, n, D], query j seeing positions <= T - n + j
        starts = [0, *itertools.accumulate(counts)]
        masks = [torch.arange(T, device="cuda")[None] <= (T - n + torch.arange(n, device="cuda"))[:, None]
                 for n in counts]
        sdpa = lambda: torch.cat([
            F.scaled_dot_product_attention(q[starts[b]:starts[b + 1]].transpose(0, 1)[None], kd[b:b + 1],
                                           vd[b:b + 1], attn_mask=masks[b], scale=scale,
                                           enable_gqa=True)[0].transpose(0, 1) for b in range(B)])
    else:
        sdpa = lambda: F.scaled_dot_product_attention(q[:, :, None], kd, vd, scale=scale, enable_gqa=True)[:, :, 0]

    # --- tqkit: vLLM's paged TurboQuant cache ------------------------------------
    pages = T // bs
    cache = torch.zeros(B * pages, bs, HKV, tq.slot_bytes(a.format, D), dtype=torch.uint8, device="cuda")
    table = torch.arange(B * pages, dtype=torch.int32, device="cuda").view(B, pages)
    slot_mapping = torch.arange(B * T, device="cuda")  # sequence b's token t -> block b·pages + t/16
    tq.store(k.reshape(B * T, HKV, D), v.reshape(B * T, HKV, D), cache, slot_mapping, a.format)
    seq_lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
    q_len = max(counts) if counts else 1  # (the workspace of a decode whose longest count is q_len)
    ws = torch.empty(tq.decode_workspace_bytes(a.format, B, q_len, H, HKV, D, bs, T, dtype=dt), dtype=torch.uint8,
                     device="cuda")
    out = torch.empty_like(q)  # the query's type
    if counts:  # vLLM's query_start_loc: sequence b's queries are rows starts[b] ... starts[b + 1] - 1
        qsl = torch.tensor(starts, dtype=torch.int32, device="cuda")
        dec = lambda: tq.decode_out(out, q, cache, table, seq_lens, ws, a.format, scale, T, query_start_loc=qsl,
                                    max_query_len=q_len)
    else:
        dec = lambda: tq.decode_out(out, q, cache, table, seq_lens, ws, a.format, scale, T)

    ref = sdpa().float()
    dec()
    print(f"{a.format}: max |tqkit - SDPA| = {(out.float() - ref).abs().max().item():.4f} "
          f"(quantization error of the cache; RMS of the output {ref.pow(2).mean().sqrt().item():.4f})")
    print(f"cache: {a.dtype} {2 * k.numel() * 2 / 2**20:.0f} MiB, {a.format} {cache.numel() / 2**20:.0f} MiB")
    t_sdpa, t_tq = timed(sdpa), timed(dec)
    what = f"query counts {','.join(map(str, counts))}, SDPA one call per sequence" if counts else "one query each"
    print(f"decode B {B} ({what}), {H}/{HKV} heads, d {D}, {T} tokens: SDPA {a.dtype} {t_sdpa:.4f} ms, "
          f"tqkit {t_tq:.4f} ms ({t_sdpa / t_tq:.2f}x)")


def query_counts(spec):
    """--q-counts: "N1,N2,..." with "NxM" for M sequences of N queries, each N in 1 ... 128."""
    counts = []
    for part in spec.split(","):
        n, _, m = part.partition("x")
        try:
            n, m = int(n), int(m) if m else 1
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{part}' is not N or NxM (integers)") from None
        if not 1 <= n <= 128 or m < 1:
            raise argparse.ArgumentTypeError(f"'{part}': a count is 1 ... 128 queries, a repeat at least 1")
        counts += [n] * m
    return counts


if __name__ == "__main__":
    main()
