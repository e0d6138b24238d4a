#!/usr/bin/env python3
"""Shared-memory wavefronts of the decode's 4-bit value loads: u16 words against aligned 4-byte words.

The quantized decode (kernels/src/decode_value_codecs.cuh) reads the value codes of 4 tokens per warp load
(lane (r, p): token of k-slot 2p, then 2p + 1, 2p + 8, 2p + 9; row r of the 8 lane rows). Two ways:

  u16   lane row r reads the u16 at byte 2r + 16w (w < D/32) of the token's codes: 4·D/32 loads per token;
  words lane row r reads the aligned word r + 8k + v_s (k < D/64) — v_s = 1 where the codes start 2 bytes
        past a word — and then row 7 alone the word 32 bytes before its first (unit 0): D/64 (+1) loads
        (kVWords, kernels.md run 40).

Rows (tokens) are ring_row_bytes(heads) apart; the kernel's token orders (KernelTraits::kEvenOddRows, kSpreadRows) are
modelled. A warp load costs as many wavefronts as the most distinct words one bank must serve; a
load whose lanes are all predicated off is counted as none. Prints, per format, head dim and heads
per CTA, the wavefronts per 32-token sub-tile (two halves) for each warp averaged over the CTA's heads.

    python3 experiments/value_banks.py
"""

# key bytes, value bytes (codes + fp16 scale and zero) per format at head dim D
FORMATS = {
    "turboquant_k8v4": lambda d: (d, d // 2 + 4),
    "turboquant_4bit_nc": lambda d: (d // 2 + 2, d // 2 + 4),
    "turboquant_k3v4_nc": lambda d: (3 * d // 8 + 2, d // 2 + 4),
}


def wavefronts(addrs):
    banks = {}
    for a in addrs:
        banks.setdefault((a // 4) % 32, set()).add(a // 4)
    return max((len(v) for v in banks.values()), default=0)


def main():
    for name, parts in FORMATS.items():
        for d in (64, 128, 256):
            key_bytes, value_bytes = parts(d)
            slot = (key_bytes + value_bytes + 1) & ~1
            units = d // 32  # u16 words per lane row and token
            for heads in (2, 4, 8, 16):
                if heads > 8 and "k8v4" in name:
                    continue  # fp8 keys: 8-warp kernels, at most 8 heads per CTA
                row = heads * slot
                cst = row + (16 if row % 64 == 0 else 0)  # ring_row_bytes: a pad where rows are 64·k apart
                even_odd = row % 16 == 8
                spread = row % 64 == 32 and "k3v4" not in name
                d8, dv1 = (1, 2) if even_odd else (8, 4 if spread else 1)
                old = new = 0
                for hl in range(heads):
                    code = hl * slot + key_bytes
                    v_s = (code >> 1) & 1
                    for half in range(2):
                        def token(u, p):
                            tv = 4 * p if even_odd else p if spread else 2 * p
                            return half * 16 * cst + code + (tv + (dv1 if u & 1 else 0) + (d8 if u & 2 else 0)) * cst
                        for u in range(4):
                            for w in range(units):
                                old += wavefronts([token(u, p) + 2 * r + 16 * w for r in range(8) for p in range(4)])
                            for k in range(units // 2):
                                new += wavefronts([token(u, p) + 4 * r + 32 * k + 2 * v_s for r in range(8) for p in range(4)])
                            if v_s:
                                new += wavefronts([token(u, p) - 2 for p in range(4)])
                print(f"{name:20s} d {d:3d} {heads:2d} heads (rows {cst} B): u16 {old / heads:5.1f}  words {new / heads:5.1f} "
                      f"wavefronts per sub-tile ({8 * units} / {8 * units // 2 + 8} loads)")


if __name__ == "__main__":
    main()
