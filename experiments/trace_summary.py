#!/usr/bin/env python3
"""Summarises the stage-1 phase timestamps a TQ_DECODE_TRACE build of tq-bench prints (experiments/run_kernels.sh
trace): per launch, the span from the first CTA's entry to the last CTA's exit, and per CTA the phases

  lut   entry → LUT built (the prologue: dealing, block-table loads, query fragments, key LUT)
  first entry → its first ring stage landed
  loop  first stage → main loop done (the streaming)
  tail  main loop → exit (write-out of the parts, the CTA merge)

as the median and the largest over the CTAs, and how far the CTAs' entries and exits spread. Input: the lines
"TQT item head_group grid sm seq tiles t_entry t_lut t_first t_loop t_exit" (ns, %globaltimer) on stdin or in the
files named; other lines are skipped. A launch is the CTAs whose entries lie within 20 µs of each other.

  python3 experiments/trace_summary.py trace.txt [--label NAME]
"""
import argparse
import statistics
import sys


def launches(lines):
    ctas = []
    for line in lines:
        f = line.split()
        if len(f) == 12 and f[0] == "TQT":
            ctas.append([int(x) for x in f[1:]])
    ctas.sort(key=lambda c: c[6])
    out, cur = [], []
    for c in ctas:
        if cur and c[6] - cur[-1][6] > 20_000:
            out.append(cur)
            cur = []
        cur.append(c)
    if cur:
        out.append(cur)
    return out


def summary(ctas):
    entry0, exit1 = min(c[6] for c in ctas), max(c[10] for c in ctas)
    fed = [c for c in ctas if c[8] > 0] or ctas  # (a CTA with no tiles never waits for a stage: t_first 0)
    ph = {"lut": [c[7] - c[6] for c in ctas], "first": [c[8] - c[6] for c in fed],
          "loop": [c[9] - c[8] for c in fed], "tail": [c[10] - c[9] for c in ctas],
          "entry skew": [c[6] - entry0 for c in ctas], "exit skew": [exit1 - c[10] for c in ctas]}
    return (exit1 - entry0) / 1e3, len(ctas), {k: (statistics.median(v) / 1e3, max(v) / 1e3) for k, v in ph.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    lines = [l for f in a.files for l in open(f)] if a.files else sys.stdin.readlines()
    ls = launches(lines)
    if not ls:
        sys.exit("trace_summary.py: no TQT lines (a TQ_DECODE_TRACE build of tq-bench prints them)")
    # the launches tq-bench times come last; the first ones are its warm-up
    timed = ls[len(ls) // 2:]
    spans = [summary(l) for l in timed]
    med = lambda k, i: statistics.median(s[2][k][i] for s in spans)
    print(f"{a.label}: {len(ls)} launches ({len(timed)} summarised), {spans[0][1]} CTAs each; span first entry → last "
          f"exit {statistics.median(s[0] for s in spans):.1f} µs (median over launches)")
    print("  phase (µs)        median CTA   slowest CTA")
    for k in ("lut", "first", "loop", "tail", "entry skew", "exit skew"):
        print(f"  {k:<16} {med(k, 0):10.1f} {med(k, 1):12.1f}")


if __name__ == "__main__":
    main()
