#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction source page of one kernel launch.

    ncu --import REPORT.ncu-rep --page source --csv --print-source sass > SRC.csv
    python3 experiments/ncu_summary.py SRC.csv [--units N] [--top K]

Prints the warp-stall samples by reason (share of all samples), the opcodes with the most
samples (with their share of executed instructions and their top three stall reasons), and the
shared-memory wavefronts by opcode. --units N divides executed instructions and wavefronts by N
(e.g. the 32-token sub-tiles of the launch: batch · ctx · kv heads / 32) to give counts per unit.
Used for kernels.md run 38c (experiments/run_kernels.sh profile writes the CSVs).
"""
import argparse
import collections
import csv
import re
import sys


def opcode(src):
    src = re.sub(r"^@!?U?P\w+\s+", "", src.strip())  # drop a predicate guard
    return src.split()[0] if src else "?"


def as_int(v):
    return int(v) if v and v not in ("-", "") else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--units", type=float, default=0, help="divide counts by this (e.g. sub-tiles)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    # line 0 names the kernel, line 1 is the header
    hdr_at = next((i for i, r in enumerate(rows[:5]) if "Source" in r and "Address" in r), None)
    if hdr_at is None:
        sys.exit(f"{args.csv}: no 'Address'/'Source' header in the first lines (not an ncu --page source --csv file?)")
    hdr = rows[hdr_at]
    ix = {h: i for i, h in enumerate(hdr)}
    for need in ("Warp Stall Sampling (All Samples)", "Instructions Executed", "L1 Wavefronts Shared"):
        if need not in ix:
            sys.exit(f"{args.csv}: column '{need}' missing (profile with --section WarpStateStats --section SourceCounters)")
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    data = [r for r in rows[hdr_at + 1:] if len(r) >= len(hdr)]
    if hdr_at > 0 and len(rows[0]) > 1:  # "Kernel Name", <name>
        print("kernel:", rows[0][1][:160])
    samples = 0
    by_reason = collections.Counter()
    by_op = collections.defaultdict(collections.Counter)
    executed = collections.Counter()
    waves = collections.Counter()
    for r in data:
        op = opcode(r[ix["Source"]])
        samples += as_int(r[ix["Warp Stall Sampling (All Samples)"]])
        executed[op] += as_int(r[ix["Instructions Executed"]])
        waves[op] += as_int(r[ix["L1 Wavefronts Shared"]])
        for h in stalls:
            v = as_int(r[ix[h]])
            by_reason[h] += v
            by_op[op][h] += v
    if samples == 0:
        sys.exit(f"{args.csv}: no warp-stall samples")
    total_ex = sum(executed.values())
    total_w = sum(waves.values())
    per = (lambda x: f" ({x / args.units:.1f} per unit)") if args.units > 0 else (lambda x: "")
    print(f"warp-stall samples {samples}; instructions executed {total_ex}{per(total_ex)}; "
          f"shared wavefronts {total_w}{per(total_w)}")
    print("\nstall reasons (share of samples):")
    for h, v in by_reason.most_common():
        if v:
            print(f"  {h[6:]:<20} {100 * v / samples:5.1f}%")
    print(f"\nopcodes by samples (top {args.top}): samples, executed, top stall reasons")
    op_samples = collections.Counter({op: sum(c.values()) for op, c in by_op.items()})
    for op, v in op_samples.most_common(args.top):
        top = ", ".join(f"{h[6:]} {100 * x / samples:.1f}" for h, x in by_op[op].most_common(3) if x)
        print(f"  {op:<22} {100 * v / samples:5.1f}%  {100 * executed[op] / max(total_ex, 1):5.1f}%  | {top}")
    print("\nshared-memory wavefronts by opcode:")
    for op, v in waves.most_common():
        if v:
            print(f"  {op:<16} {v:>12}{per(v)}  {100 * v / total_w:5.1f}%  instructions {executed[op]}")


if __name__ == "__main__":
    main()
