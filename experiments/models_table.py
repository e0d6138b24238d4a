#!/usr/bin/env python3
"""Markdown table of run_kernels.sh's `models` step.

    python3 experiments/models_table.py models.jsonl models_sdpa.jsonl

models.jsonl: one line per tq-bench --model run, {model, ctx, rows: tq-bench --json};
models_sdpa.jsonl: bench_sdpa.py lines (matched on batch, heads, head_dim, ctx).
One row per model, context and format: the decode of one layer (the kernel time, median of
CUDA-event-timed launches) against our FP16 decode and torch SDPA on the same shape, and one
sequence's KV cache over all the model's layers (windowed layers keep their window).
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: models_table.py models.jsonl models_sdpa.jsonl")
    runs = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
    sdpa = {}
    for x in open(sys.argv[2]):
        if x.strip():
            j = json.loads(x)
            sdpa[(j["batch"], j["q_heads"], j["kv_heads"], j["head_dim"], j["ctx"])] = j
    if not runs:
        sys.exit("models_table.py: no tq-bench runs in " + sys.argv[1])
    first = runs[0]["rows"][0]
    print(f"\n{first['device']}, batch {first['batch']}, block size {first['block_size']}, {first['pages']} pages; "
          f"device copy {first['copy_gbps']:.0f} GB/s (read+write)\n")
    hdr = ["model", "G", "D", "ctx", "format", "dec_ms", "%copy", "f16_ms", "x_f16", "sdpa_ms", "x_sdpa",
           "GB/seq f16", "GB/seq fmt", "x_mem"]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    untimed = []
    for run in runs:
        for j in run["rows"]:
            key = (j["batch"], j["q_heads"], j["kv_heads"], j["head_dim"], j["ctx"])
            s = sdpa.get(key)
            d, m = j["decode"], j.get("model", {})
            cells = [run["model"], str(j["q_heads"] // j["kv_heads"]), str(j["head_dim"]), str(j["ctx"]), j["format"]]
            if isinstance(d, dict):
                cells += [f"{d['median_ms']:.4f}", f"{d['pct_copy']:.1f}", f"{d['f16_median_ms']:.4f}",
                          f"{d['speedup_vs_f16']:.2f}", f"{s['median_ms']:.4f}" if s else "-",
                          f"{s['median_ms'] / d['median_ms']:.2f}" if s else "-"]
            else:
                cells += ["-", "-", "-", "-", f"{s['median_ms']:.4f}" if s else "-", "-"]
            if "kv_bytes_per_seq" in m:
                cells += [f"{m['f16_kv_bytes_per_seq'] / 1e9:.3f}", f"{m['kv_bytes_per_seq'] / 1e9:.3f}",
                          f"{m['f16_kv_bytes_per_seq'] / m['kv_bytes_per_seq']:.2f}"]
            else:
                cells += ["-", "-", "-"]
            print("| " + " | ".join(cells) + " |")
            if not isinstance(d, dict):
                untimed.append(f"- {run['model']} ctx {j['ctx']} {j['format']}: decode not timed: {d}")
    if untimed:
        print()
        print("\n".join(untimed))


if __name__ == "__main__":
    main()
