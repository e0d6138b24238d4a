"""Helpers shared by the example benchmarks: CUDA-event timing, the attention-shape flags, a filled paged cache
and the JSON rows."""
import json

import torch

import tqkit_torch as tq


def timed(fn, reps=50):
    """Median milliseconds of `reps` calls of fn (CUDA events around each call, one untimed call first)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def captured(fn):
    """fn captured in a CUDA graph, after one call on a side stream (allocator, lazy initialisation). fn must be
    capturable: it reads nothing on the host."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def graph_timed(fn, reps=20, replays=5):
    """Median milliseconds per replay of fn captured in a CUDA graph (captured): the GPU's time without the
    host's (each of `reps` samples times `replays` replays back to back)."""
    g = captured(fn)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / replays)
    return sorted(times)[len(times) // 2]


def add_shape_args(ap, batch, ctx):
    """--format, --batch, --heads, --kv-heads, --head-dim, --ctx (defaults: 32/8 heads, d 128)."""
    ap.add_argument("--format", default="turboquant_4bit_nc")
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=ctx)


def filled_cache(fmt, batch, kv_heads, head_dim, ctx, block_size=16, dense=False):
    """vLLM's paged TurboQuant cache of `batch` sequences of ctx tokens (keys N(0, 1), values N(0.3, 1), stored
    through tq.store; pages shuffled; torch.manual_seed(0) first): cache, block_table, seq_lens and, with dense,
    the fp16 keys and values [batch, kv_heads, ctx, head_dim] (an uncompressed cache of the same tokens)."""
    torch.manual_seed(0)
    pages = ctx // block_size
    cache = torch.zeros(batch * pages, block_size, kv_heads, tq.slot_bytes(fmt, head_dim), dtype=torch.uint8,
                        device="cuda")
    table = torch.randperm(batch * pages, device="cuda").to(torch.int32).view(batch, pages)  # shuffled pages
    kd = torch.empty(batch, kv_heads, ctx, head_dim, dtype=torch.half, device="cuda") if dense else None
    vd = torch.empty_like(kd) if dense else None
    for b in range(batch):  # per sequence, to keep the temporaries small
        k = torch.randn(ctx, kv_heads, head_dim, device="cuda", dtype=torch.half)
        v = torch.randn(ctx, kv_heads, head_dim, device="cuda", dtype=torch.half) + 0.3
        slots = (table[b].to(torch.int64)[:, None] * block_size + torch.arange(block_size, device="cuda")).reshape(-1)
        tq.store(k, v, cache, slots, fmt)
        if dense:
            kd[b], vd[b] = k.transpose(0, 1), v.transpose(0, 1)
        del k, v
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    return (cache, table, lens, kd, vd) if dense else (cache, table, lens)


def cell(row, key, width=9, prec=4):
    """row[key] right-aligned in width columns with prec decimals, or '-' where the row lacks it."""
    return f"{row[key]:>{width}.{prec}f}" if key in row else f"{'-':>{width}}"


def append_json_lines(path, rows):
    """Appends one JSON line per row to path (nothing where path is empty)."""
    if path:
        with open(path, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
