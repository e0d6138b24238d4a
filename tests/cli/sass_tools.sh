# experiments/sass_loops.py and sass_diff.py (the static SASS counts and comparisons that kernel commits and
# kernels.md cite) on a hand-written cuobjdump-format pair: a.sass holds kernel_same, kernel_regs,
# kernel_loop and kernel_gone; b.sass (another anonymous-namespace hash, as another build folder gives)
# holds kernel_same unchanged, kernel_regs with two moves' registers swapped, and kernel_loop whose main
# loop loads with one LDS.64 instead of two LDS and gains two FADDs. The expected lines are counted by hand.
source "$(dirname "$0")/lib.bash"
command -v c++filt > /dev/null || { echo "c++filt not found: skipped"; exit 77; }
cat > "$TMP/gen.py" <<'PY'
import sys
def mangle(fn, h):
    anon = f"_GLOBAL__N__{h}_13_decode_f16_cu_37b1c1d3"
    return f"_ZN2tq4cuda{len(anon)}{anon}{len(fn)}{fn}Ev"
def func(fn, h, body):
    out = [f"\t\tFunction : {mangle(fn, h)}", '\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"']
    for i, ins in enumerate(body):
        out.append(f"        /*{i * 16:04x}*/                   {ins} ;                 /* 0x000000000000{i:04x} */")
        out.append("                                                                  /* 0x000fe20000000000 */")
    return "\n".join(out)
loop = ["LDS R4, [R2]", "HMMA.16816.F32 R8, R4, R6, R8", "FADD R9, R9, R10", "@!P0 BRA 0x10"]
def unit(h, b):
    same = ["MOV R1, c[0x0][0x28]"] + loop + ["EXIT"]
    regs = ["MOV R1, c[0x0][0x28]", "MOV R3, RZ", "MOV R5, RZ"] + [x.replace("0x10", "0x30") for x in loop] + ["EXIT"]
    lp = ["MOV R1, c[0x0][0x28]", "LDS R4, [R2]", "LDS R5, [R2+0x4]", "HMMA.16816.F32 R8, R4, R6, R8", "@!P0 BRA 0x10",
          "EXIT"]
    if b:
        regs[1], regs[2] = regs[2], regs[1]
        lp = ["MOV R1, c[0x0][0x28]", "LDS.64 R4, [R2]", "FADD R9, R9, R10", "HMMA.16816.F32 R8, R4, R6, R8",
              "FADD R9, R9, R11", "@!P0 BRA 0x10", "EXIT"]
    fs = [func("kernel_same", h, same), func("kernel_regs", h, regs), func("kernel_loop", h, lp)]
    if not b:
        fs.append(func("kernel_gone", h, same))
    return "\n\tcode for sm_90\n\t.target\tsm_90\n\n" + "\n\n".join(fs) + "\n"
open(sys.argv[1] + "/a.sass", "w").write(unit("1234abcd", False))
open(sys.argv[1] + "/b.sass", "w").write(unit("9876fedc", True))
PY
python3 "$TMP/gen.py" "$TMP" || fail "the fixture was not written"

run python3 "$SRC/experiments/sass_loops.py" "$TMP/a.sass" "L=kernel_loop"; expect_rc 0
expect_out "loops with HMMA (HMMAs, instructions): \[(1, 4)\]"
expect_out "main loop 0x10 … 0x40: 4 instructions"
expect_out "LDS 2, HMMA 1, BRA 1"

run python3 "$SRC/experiments/sass_diff.py" "$TMP/a.sass" "$TMP/b.sass" --show kernel_loop; expect_rc 0
expect_out "4 kernels in a, 3 in b, 3 in both: 1 identical, 2 differ"
expect_out "only in a: kernel_gone()"
expect_out "kernel_regs(): 8 -> 8 instructions, main loop 4 -> 4; same instructions"
expect_out "kernel_loop(): 6 -> 7 instructions, main loop 4 -> 5; loop FADD +2, LDS -2, LDS.64 +1"
expect_out "LDS R5, \[R2+0x4\] | FADD R9, R9, R10"
expect_out "(none) | EXIT"
grep -q "kernel_same" "$TMP/out" && fail "kernel_same is identical in both and should not be listed"
# a dump compared with itself: every kernel identical
run python3 "$SRC/experiments/sass_diff.py" "$TMP/a.sass" "$TMP/a.sass"; expect_rc 0
expect_out "4 kernels in a, 4 in b, 4 in both: 4 identical, 0 differ"
finish
