#!/usr/bin/env python3
"""Can a token order plus a lane -> word map make the decode's 4-bit key loads bank-conflict-free?

The quantized decode (kernels/src/decode_keys.cuh) reads a 16-token half's key indices with lane
(r, p) taking MMA row r (then row r + 8, a second load) and, in pair-step ps, one 4-byte word of that
row's 16 (4-bit keys, D = 128: 64 index bytes). A load is conflict-free when its 32 words fall in 32
distinct banks. Rows are `kst = heads x slot` bytes apart in shared memory (the vLLM page layout, one
TMA copy per page), so row t's word w is in bank (t * kst / 4 + w) mod 32.

The kernel may choose (a) which 8 of the half's 16 tokens are rows 0-7 (the rest are rows 8-15) and
(b) which word each lane p reads in each pair-step, the same for every row (the query fragments are
built in that dim order). This script searches every (a) with token 0 in rows 0-7 and every partition
of the 16 words into four pair-steps of 4 words, and prints whether one exists for each head count.

    python3 experiments/bank_search.py [--slot 134] [--heads 2 4 8 16]

A map that depends on the row (rows r >= 4 reading another pair-step's words first) needs register
selects to put each word back in its k-step; it is not searched here.
"""
import argparse
import itertools


def conflict_free(words, row_words, tokens):
    banks = set()
    for t in tokens:
        for w in words:
            b = (row_words * t + w) % 32
            if b in banks:
                return False
            banks.add(b)
    return True


def partition(sets, remaining):
    """Four disjoint 4-word sets covering `remaining` (the 16 words), or None."""
    if not remaining:
        return []
    first = min(remaining)
    for s in sets:
        if first in s and set(s) <= remaining:
            rest = partition(sets, remaining - set(s))
            if rest is not None:
                return [s] + rest
    return None


def search(slot, heads):
    kst = heads * slot
    if kst % 4:
        return None, f"row stride {kst} bytes is not a whole number of words"
    row_words = kst // 4
    identity = all(conflict_free([4 * ps + p for p in range(4)], row_words, range(8)) and
                   conflict_free([4 * ps + p for p in range(4)], row_words, range(8, 16)) for ps in range(4))
    if identity:
        return (tuple(range(8)), [tuple(4 * ps + p for p in range(4)) for ps in range(4)]), "identity order"
    for rows in itertools.combinations(range(16), 8):
        if 0 not in rows:
            continue
        other = [t for t in range(16) if t not in rows]
        sets = [c for c in itertools.combinations(range(16), 4)
                if conflict_free(c, row_words, rows) and conflict_free(c, row_words, other)]
        p = partition(sets, set(range(16))) if sets else None
        if p:
            return (rows, p), "found"
    return None, f"none (row stride {row_words} words = {row_words % 32} mod 32)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slot", type=int, default=134, help="slot bytes per token-head (turboquant_4bit_nc: 134)")
    ap.add_argument("--heads", type=int, nargs="+", default=[2, 4, 8, 16], help="kv heads per CTA")
    a = ap.parse_args()
    for h in a.heads:
        found, why = search(a.slot, h)
        print(f"slot {a.slot}, {h:2d} heads: {why}" + (f": rows 0-7 = tokens {found[0]}, pair-step words {found[1]}"
                                                          if found else ""))


if __name__ == "__main__":
    main()
