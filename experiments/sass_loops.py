#!/usr/bin/env python3
"""Static instruction counts of a kernel's main loop, from cuobjdump's SASS.

    nvcc -arch=sm_90 -O3 --expt-relaxed-constexpr -std=c++17 -DNDEBUG -Ikernels/include -Ikernels/src \\
         -Ilib/include -cubin -o /tmp/u.cubin build/kernels/decode_units/decode_turboquant_4bit_nc.cu
    cuobjdump -sass /tmp/u.cubin > /tmp/u.sass
    python3 experiments/sass_loops.py /tmp/u.sass 'G4=Li128EEELb0ELb1ELi8ELNS0_12QuerySlicingE0ELb1ELb0ELi1E' \\
         'G8=Li128EEELb0ELb0ELi8ELNS0_12QuerySlicingE0ELb1ELb0ELi1E'

Each LABEL=SUBSTRING names the functions whose mangled name contains SUBSTRING (above: the d-128
8-head tensor-map decode kernels, packed (G <= 4) and not; KernelTraits' template arguments in
order: planes, packed, heads, slicing, tensor map, causal, N-tiles). A loop is the span from a
backward branch's target to the branch; the main loop is the one with the most HMMAs (ties: the
shortest). Printed: the loops with HMMAs, and the main loop's instructions by opcode. The counts
are static: every branch of the loop body is counted once, whichever runs (the decode's loop over
sub-tiles holds the unmasked and the masked body, each with both softmax branches).
experiments/sass_diff.py compares two such dumps kernel by kernel (identical, reordered, or which
main-loop opcodes changed).
"""
import collections
import re
import sys


def functions(path):
    text = open(path).read()
    for f in re.split(r"\n\s*Function : ", text)[1:]:
        yield f.split("\n", 1)[0].strip(), f


def main_loop(body):
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
    index = {a: i for i, (a, _) in enumerate(ins)}
    loops = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in index:
            span = ins[index[int(m.group(1), 16)]:i + 1]
            loops.append((sum("HMMA" in x for _, x in span), len(span), span))
    loops.sort(key=lambda x: (-x[0], x[1]))
    return [(h, n) for h, n, _ in loops if h], (loops[0][2] if loops else [])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    for spec in sys.argv[2:]:
        label, _, key = spec.partition("=")
        for name, body in functions(sys.argv[1]):
            if key not in name:
                continue
            with_mma, span = main_loop(body)
            ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in span)
            print(f"{label}: {name[:100]}")
            print(f"  loops with HMMA (HMMAs, instructions): {with_mma[:6]}")
            if span:
                print(f"  main loop {span[0][0]:#x} … {span[-1][0]:#x}: {len(span)} instructions")
                print("  " + ", ".join(f"{k} {v}" for k, v in ops.most_common(25)))


if __name__ == "__main__":
    main()
