#!/usr/bin/env python3
"""Compares two cuobjdump SASS dumps of the same translation unit, function by function.

    cuobjdump -sass a.cubin > a.sass; cuobjdump -sass b.cubin > b.sass   (see sass_loops.py for the nvcc line)
    python3 experiments/sass_diff.py a.sass b.sass [--show SUBSTRING]

For every kernel present in both: identical, or how it differs. A differing kernel gets one line: its
instructions in a and b, its main loop's (sass_loops.main_loop: the loop with the most HMMAs) in a and b,
"same instructions" where the two hold the same instructions in another order or with other register
numbers only, and otherwise the main loop's opcode counts that changed. --show prints the first
differing lines of the first kernel whose mangled name contains SUBSTRING. Names are compared with
their anonymous namespaces (whose mangled names depend on the source path and the build) taken out, and
instructions without their addresses and encodings, so two builds of the same source compare equal.
"""
import argparse
import collections
import itertools
import re
import shutil
import subprocess

from sass_loops import functions, main_loop


def without_anon(mangled):
    """The name with every anonymous namespace (_GLOBAL__N__<hash>_..., length-prefixed) as ANON."""
    while (m := re.search(r"(?<!\d)(\d+)_GLOBAL__N__", mangled)):
        mangled = mangled[:m.start()] + "4ANON" + mangled[m.end(1) + int(m.group(1)):]
    return mangled


def readable(mangled):
    """KERNEL<KernelTraits<FormatCfg<…>, …>> from a mangled name (c++filt where it is installed)."""
    if not shutil.which("c++filt"):
        return mangled
    name = subprocess.run(["c++filt"], input=mangled, capture_output=True, text=True).stdout.strip()
    name = re.sub(r"^void |tq::cuda::|\(anonymous namespace\)::|ANON::", "", name)
    name = re.sub(r"\((KeyKind|ValueKind|QuerySlicing)\)", "", name)
    cut = name.find(">(")
    return name[:cut + 1] if cut >= 0 else name


def kernels(path):
    out = {}
    for name, body in functions(path):
        lines = [re.sub(r"\s+", " ", t).strip() for _, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]
        loop = [re.sub(r"\s+", " ", t).strip() for _, t in main_loop(body)[1]]
        out[without_anon(name)] = ([without_anon(x) for x in lines], loop)
    return out


def opcode(ins):
    return re.sub(r"^@!?U?P\w+ ", "", ins).split()[0]


def registerless(ins):
    return re.sub(r"\bU?R\d+\b", "R", re.sub(r"0x[0-9a-f]+", "ADDR", ins))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--show", default="", help="print the first differing lines of a kernel whose name contains this")
    args = ap.parse_args()
    a, b = kernels(args.a), kernels(args.b)
    common = [n for n in a if n in b]
    same = [n for n in common if a[n][0] == b[n][0]]
    print(f"{len(a)} kernels in a, {len(b)} in b, {len(common)} in both: {len(same)} identical, "
          f"{len(common) - len(same)} differ")
    for n in [n for n in a if n not in b]:
        print(f"  only in a: {readable(n)}")
    for n in [n for n in b if n not in a]:
        print(f"  only in b: {readable(n)}")
    for n in common:
        if n in same:
            continue
        (la, pa), (lb, pb) = a[n], b[n]
        if sorted(map(registerless, la)) == sorted(map(registerless, lb)):
            what = "same instructions"
        else:
            ca, cb = collections.Counter(map(opcode, pa)), collections.Counter(map(opcode, pb))
            delta = sorted(((k, cb[k] - ca[k]) for k in ca.keys() | cb.keys() if ca[k] != cb[k]),
                           key=lambda x: (-abs(x[1]), x[0]))
            what = "loop " + (", ".join(f"{k} {d:+d}" for k, d in delta[:8]) if delta else "same opcodes")
        print(f"  {readable(n)}: {len(la)} -> {len(lb)} instructions, main loop {len(pa)} -> {len(pb)}; {what}")
    if args.show:
        n = next((n for n in common if args.show in n and n not in same), None)
        if n is None:
            print(f"no differing kernel's name contains {args.show!r}")
            return
        print(f"first differing lines of {readable(n)} (a | b):")
        shown = 0
        for x, y in itertools.zip_longest(a[n][0], b[n][0], fillvalue="(none)"):
            if x != y and shown < 20:
                print(f"  {x} | {y}")
                shown += 1


if __name__ == "__main__":
    main()
