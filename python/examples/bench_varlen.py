"""Batches with a query count per sequence (vLLM's query_start_loc): which path is faster?

For each count pattern, on one shape and one cache (vLLM's paged TurboQuant layout, every sequence ctx
tokens long, query j of a sequence with n queries seeing positions [0, ctx - n + j]), times in the same
run, two ways (CUDA events, medians of --reps):

  eager  each an allocating call of decode() with its path forced, the host synchronised before it: what
         decode() costs as it picks a path, since it reads the counts on the host (one synchronisation)
         before it can choose, so the host's launch work after that shows as GPU time
  graph  the same call captured in a CUDA graph and replayed back to back: the GPU's time alone (what a
         caller that forces a path and captures it pays)

for the paths

  fused  the fused multi-query kernel with query_start_loc: one launch, each sequence's cache read once
         per 16 query columns (its count x heads per kv head), the launch's passes side by side
  rows   decode_rows: one single-query decode with every query a row of its own (its
         sequence's block table, its causal length), so a sequence is read once per query
  q1     one single-query decode of the batch (one query per sequence): the unit the ratios use
  decode decode() on its own path (decode_path; dense + the others where a chunk takes_dense), eager;
         host: the same with query_start_loc_cpu and seq_lens_cpu, so it chooses without a synchronisation

and prints one row per pattern with the path tqkit_torch.decode() takes (takes_rows for the sequences
that stay off the dense path), plus one JSON line per row (--json FILE, appended). A pattern is
tq-bench's --q-counts: comma-separated counts, NxM for M sequences of N queries (e.g. 16,1x31).

    PYTHONPATH=python python python/examples/bench_varlen.py --heads 32 --kv-heads 8 --ctx 32768 \
        --patterns "16,1x31 4x8,1x24 16x32"
"""
import argparse
import itertools

import torch

import tqkit_torch as tq
from _bench import add_shape_args, append_json_lines, cell, filled_cache, graph_timed, timed

PATTERNS = ("2,1x31 4,1x31 8,1x31 16,1x31 32,1x31 64,1x31 128,1x31 16x2,1x30 16x4,1x28 16x8,1x24 8x8,1x24 "
            "4x8,1x24 4x16,1x16 2x32 4x32 8x32 16x32")


def main():
    ap = argparse.ArgumentParser()
    add_shape_args(ap, batch=32, ctx=32768)
    ap.add_argument("--patterns", default=PATTERNS, help="space-separated count patterns, each of --batch counts")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    B, H, HKV, D, T = a.batch, a.heads, a.kv_heads, a.head_dim, a.ctx
    scale = D ** -0.5
    cache, table, lens = filled_cache(a.format, B, HKV, D, T)
    q1 = torch.randn(B, H, D, device="cuda", dtype=torch.half)
    decode_q1 = lambda: tq.decode(q1, cache, table, lens, a.format, scale, T)
    t_q1, g_q1 = timed(decode_q1, a.reps), graph_timed(decode_q1, a.reps)
    device = torch.cuda.get_device_name(0)
    print(f"{a.format}, B {B}, {H}/{HKV} heads, d {D}, ctx {T} (ms, medians of {a.reps}; {device}); "
          f"one query per sequence {t_q1:.4f} ms eager, {g_q1:.4f} graph")
    print(f"{'':>18} {'eager':-^31} {'graph':-^31}")
    print(f"{'counts':>12} {'qrows':>5} {'fused':>9} {'rows':>9} {'rows/fused':>11} {'fused':>9} {'rows':>9} "
          f"{'rows/fused':>11} {'decode()':>9} {'host':>9} {'path':>11}")
    out = []
    lens_cpu = lens.cpu()  # decode_host_ms: vLLM's host copy of seq_lens, the same for every pattern
    for spec in a.patterns.split():
        counts = tq.paths.count_pattern(spec)
        if len(counts) != B:
            raise SystemExit(f"--patterns: {spec} has {len(counts)} counts for a batch of {B}")
        starts = [0, *itertools.accumulate(counts)]
        qsl = torch.tensor(starts, dtype=torch.int32, device="cuda")
        q = torch.randn(starts[-1], H, D, device="cuda", dtype=torch.half)
        mq = max(counts)
        r = {"format": a.format, "batch": B, "heads": H, "kv_heads": HKV, "head_dim": D, "ctx": T, "counts": spec,
             "rows": starts[-1], "max_count": mq, "device": device, "reps": a.reps, "q1_ms": t_q1,
             "q1_graph_ms": g_q1, "decode_path": tq.varlen_path(counts, [T] * B, H, HKV)}
        run = lambda path, **host: tq.decode(q, cache, table, lens, a.format, scale, T, query_start_loc=qsl,
                                             max_query_len=mq, path=path, **host)
        for path in (("fused", "rows") if mq <= 128 else ("rows",)):
            r[f"{path}_ms"] = timed(lambda: run(path), a.reps)
            r[f"{path}_graph_ms"] = graph_timed(lambda: run(path), a.reps)
        r["decode_ms"] = timed(lambda: run(None), a.reps)
        host = {"query_start_loc_cpu": torch.tensor(starts, dtype=torch.int32), "seq_lens_cpu": lens_cpu}
        r["decode_host_ms"] = timed(lambda: run(None, **host), a.reps)
        if "fused_ms" in r:
            r["rows_over_fused"] = r["rows_ms"] / r["fused_ms"]
            r["rows_over_fused_graph"] = r["rows_graph_ms"] / r["fused_graph_ms"]
        out.append(r)
        f = lambda k, w=9, p=4: cell(r, k, w, p)
        print(f"{spec:>12} {r['rows']:>5} {f('fused_ms')} {f('rows_ms')} {f('rows_over_fused', 11, 2)} "
              f"{f('fused_graph_ms')} {f('rows_graph_ms')} {f('rows_over_fused_graph', 11, 2)} {f('decode_ms')} "
              f"{f('decode_host_ms')} {r['decode_path']:>11}")
    append_json_lines(a.json, out)


if __name__ == "__main__":
    main()
