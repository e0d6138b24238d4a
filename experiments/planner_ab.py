#!/usr/bin/env python3
"""The decode planner's choices against their alternatives, timed interleaved in one tq-bench binary.

    python3 experiments/planner_ab.py BUILD/tq-bench OUT.jsonl [--passes 2] [--groups tiles,mq,deal]
    python3 experiments/planner_ab.py --summary OUT.jsonl        (the table again, from the file)

Groups (each cell runs every variant, pass after pass, the variant order reversed on even passes):
  tiles  column tiles at G 12 and 16 (8 kv heads) over batch x ctx: auto (--tiles 0) against one
         (--tiles 1) and two (--tiles 2) 8-column N-tiles per warp;
  mq     the same for multi-query launches (--q-len 4) at 32/8, batch 1 and 32, 4K;
  deal   the balanced dealing (auto) against equal chunks (--even-dealing) at B 32, G 4 ... 16 and 2 kv heads.
One JSON line per tq-bench run: {group, cell, variant, pass, args, rows}. The summary gives, per cell and
format, each variant's mean time over the passes (with the spread between passes) and auto's time over
the fastest alternative's: the planner's choice should never be slower than that beyond noise (~1%).
"""
import argparse
import json
import subprocess
import sys

FORMATS = ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_k8v4", "turboquant_3bit_nc"]
TILES = {"auto": ["--tiles", "0"], "one": ["--tiles", "1"], "two": ["--tiles", "2"]}
DEAL = {"auto": [], "even": ["--even-dealing"]}


def shape(q, kv, batch, ctx):
    return ["--q-heads", str(q), "--kv-heads", str(kv), "--batch", str(batch), "--ctx", str(ctx)]


def cells(groups):
    out = []  # (group, cell label, common args, {variant: args})
    if "tiles" in groups:
        for q, kv, batch, ctx in [(128, 8, 1, 4096), (128, 8, 1, 8192), (128, 8, 1, 16384), (128, 8, 1, 32768),
                                  (128, 8, 4, 8192), (128, 8, 8, 4096), (128, 8, 32, 4096), (128, 8, 32, 32768),
                                  (96, 8, 1, 4096), (96, 8, 1, 16384), (96, 8, 32, 4096)]:
            out.append(("tiles", f"{q}/{kv} B{batch} {ctx}", shape(q, kv, batch, ctx) + ["--dequant", "none"], TILES))
    if "mq" in groups:
        for batch in (1, 32):
            out.append(("mq", f"32/8 B{batch} 4096 q_len 4", shape(32, 8, batch, 4096) + ["--q-len", "4"], TILES))
    if "deal" in groups:
        for q, kv, ctx in [(32, 8, 32768), (64, 8, 32768), (96, 8, 32768), (128, 8, 32768), (8, 2, 32768),
                           (16, 2, 32768), (32, 8, 4096), (64, 8, 4096)]:
            out.append(("deal", f"{q}/{kv} B32 {ctx}", shape(q, kv, 32, ctx) + ["--dequant", "none"], DEAL))
    return out


def row_ms(r):
    """(ms, plan note) of one tq-bench JSON row: the decode, or the fused multi-query decode."""
    if r.get("mode") == "gpu-multi-query":
        return r["fused_ms"], f"tiles {r['column_tiles']} passes {r['query_passes']}"
    d = r.get("decode")
    if not isinstance(d, dict):
        return None, str(d)
    return d["median_ms"], (f"tiles {d['column_tiles']} slices {d['query_slices']} items {d['items']} "
                            f"balance {d['balance_slots']}")


def run(bench, out_path, passes, groups):
    fmt_args = [a for f in FORMATS for a in ("--format", f)]
    failed = 0
    with open(out_path, "a") as out:
        for p in range(passes):
            for group, label, common, variants in cells(groups):
                names = list(variants) if p % 2 == 0 else list(reversed(list(variants)))
                for v in names:
                    args = [bench] + fmt_args + common + variants[v] + ["--json"]
                    res = subprocess.run(args, capture_output=True, text=True, timeout=180)
                    if res.returncode != 0:
                        failed += 1
                        print(f"FAILED ({res.returncode}): {' '.join(args[1:])}\n{res.stderr[-600:]}", file=sys.stderr)
                        continue
                    out.write(json.dumps({"group": group, "cell": label, "variant": v, "pass": p,
                                          "args": args[1:], "rows": json.loads(res.stdout)}) + "\n")
                    out.flush()
    return failed


def summary(path):
    runs = [json.loads(line) for line in open(path) if line.strip()]
    table = {}  # (group, cell, format) -> {variant: [(ms, note)]}
    order = []
    for run_ in runs:
        for r in run_["rows"]:
            ms, note = row_ms(r)
            if ms is None:
                continue
            key = (run_["group"], run_["cell"], r["format"])
            if key not in table:
                table[key] = {}
                order.append(key)
            table[key].setdefault(run_["variant"], []).append((ms, note))
    worst = 0.0
    print(f"{'group':5} {'cell':26} {'format':20} {'variant: mean ms (spread) plan':70} auto/best_other")
    for key in order:
        vs = table[key]
        mean = {v: sum(m for m, _ in xs) / len(xs) for v, xs in vs.items()}
        cols = []
        for v, xs in vs.items():
            spread = (max(m for m, _ in xs) - min(m for m, _ in xs)) / mean[v] * 100
            cols.append(f"{v} {mean[v]:.4f} ({spread:.1f}%) [{xs[0][1]}]")
        others = [m for v, m in mean.items() if v != "auto"]
        ratio = mean["auto"] / min(others) if "auto" in mean and others else float("nan")
        worst = max(worst, ratio) if ratio == ratio else worst
        print(f"{key[0]:5} {key[1]:26} {key[2]:20} {'; '.join(cols):70} {ratio:.3f}")
    print(f"worst auto/best_other: {worst:.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", nargs="?", help="tq-bench binary")
    ap.add_argument("out", help="JSON lines file (appended to)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--groups", default="tiles,mq,deal")
    ap.add_argument("--summary", action="store_true", help="only print the summary of OUT")
    a = ap.parse_args()
    failed = 0
    if not a.summary:
        if not a.bench:
            ap.error("the tq-bench binary is required unless --summary")
        failed = run(a.bench, a.out, a.passes, set(a.groups.split(",")))
    summary(a.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
