"""What the torch op adds over the raw kernel launch: the same decode_out call
eager (Python → dispatcher → argument checks → plan → launch) and replayed from
a CUDA graph (the kernels alone), per call, for decodes where launch overhead
matters (B 1 at 512 and 4K tokens) and the target shape (B 32, 32K). "adds" is the
eager GPU time per call minus the replayed one: what the op costs over its raw
launches when called back to back (0 while the GPU is busier than the host).
Eager and replayed calls are timed in alternating rounds (eager first in odd rounds,
the graph first in even ones) and each is the median of its rounds, so a clock that
drifts during the run does not favour whichever is timed first.

    PYTHONPATH=python python python/examples/bench_op_overhead.py [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch

import tqkit_torch as tq
from _bench import captured


ROUNDS = 5  # alternating eager / graph rounds per shape


def per_call_us(fn, n=200):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="", help="also write one JSON line per shape to this file")
    a = ap.parse_args()
    fmt, H, HKV, D, bs = "turboquant_4bit_nc", 32, 8, 128, 16
    rows = []
    for B, T in [(1, 512), (1, 4096), (32, 32768)]:
        pages = T // bs
        cache = torch.randint(0, 255, (B * pages, bs, HKV, tq.slot_bytes(fmt, D)), dtype=torch.uint8, device="cuda")
        cache.view(B * pages, bs, HKV, -1)[..., 64:66] = 0  # finite fp16 norms (zero)
        table = torch.arange(B * pages, dtype=torch.int32, device="cuda").view(B, pages)
        lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
        q = torch.randn(B, H, D, device="cuda", dtype=torch.half)
        out = torch.empty_like(q)
        splits = 4
        ws = torch.empty(tq.decode_workspace_bytes(fmt, B, 1, H, HKV, D, bs, T, splits), dtype=torch.uint8,
                         device="cuda")
        call = lambda: tq.decode_out(out, q, cache, table, lens, ws, fmt, D ** -0.5, T, splits)
        g = captured(call)
        fns, times = {"eager": call, "graph": g.replay}, {"eager": [], "graph": []}
        for r in range(ROUNDS):
            for k in (("eager", "graph") if r % 2 == 0 else ("graph", "eager")):
                times[k].append(per_call_us(fns[k]))
        eager, graph = statistics.median(times["eager"]), statistics.median(times["graph"])
        # host time to issue one call (Python, dispatcher, argument checks, plan, launches)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            call()
        host = (time.perf_counter() - t0) * 1e6 / 20
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            g.replay()
        host_graph = (time.perf_counter() - t0) * 1e6 / 20
        torch.cuda.synchronize()
        print(f"B {B:2d} ctx {T:5d}: GPU per call eager {eager:7.1f} us, graph {graph:7.1f} us (adds {eager - graph:+.1f}"
              f" us); host per call: op {host:5.1f} us, graph replay {host_graph:5.1f} us")
        rows.append({"format": fmt, "batch": B, "heads": H, "kv_heads": HKV, "head_dim": D, "ctx": T, "splits": splits,
                     "device": torch.cuda.get_device_name(), "torch": torch.__version__, "eager_us": eager,
                     "graph_us": graph, "adds_us": eager - graph, "host_op_us": host, "host_replay_us": host_graph})
    if a.json:
        with open(a.json, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
