#!/usr/bin/env bash
# A/B of the PyTorch op's cost in one GPU session: python/examples/bench_op_overhead.py (GPU time per
# decode_out call eager and replayed from a CUDA graph, host time per call) against the extension built
# from each variant, interleaved (host times differ by tens of percent between machines and calls, so a
# change is measured against its baseline in the same run).
#
#   bash experiments/ab_torch_op.sh
#
# Variants as in ab_kernels.sh: each experiments/ab/<NAME>/ (ab_overlay.sh REF NAME: the changed files
# under kernels/, apps/, tests/gpu/ and python/ as they are at REF) over a copy of the working tree, and
# "C", the working tree itself. The extensions are built in place side by side (python/setup.py; build
# logs in $OUT/build_op_<NAME>.txt), then bench_op_overhead.py runs AB_REPS times per variant (default 3),
# the variant order reversed on every other pass; each line, prefixed by variant and pass, is printed and
# appended to $OUT/ab_op.txt.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build-kernels/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
JOBS=$(nproc 2>/dev/null || echo 8)
cd "$ROOT"
. "$ROOT/experiments/ab_variant.sh"
declare -A SRC=([C]="$ROOT")
for d in experiments/ab/*/; do
  [ -d "$d" ] || continue
  v=$(basename "$d")
  [ -f "$d/.ab_tree" ] && { echo "ab_torch_op.sh: $d is a whole tree (ab_overlay.sh --tree), which has no python/" >&2; exit 2; }
  SRC[$v]=/tmp/src_$v
  ab_variant_tree "$ROOT" "$d" "/tmp/src_$v" || exit 1
done
VARS=$(printf '%s\n' "${!SRC[@]}" | sort)
n=$(echo "$VARS" | wc -w)
status=0
for v in $VARS; do
  (cd "${SRC[$v]}/python" && CXX=${TORCH_CXX:-/usr/bin/g++} MAX_JOBS=$(( (JOBS + n - 1) / n )) timeout 500 \
     python3 setup.py build_ext --inplace > "$OUT/build_op_$v.txt" 2>&1) &
done
wait
for v in $VARS; do
  ls "${SRC[$v]}"/python/tqkit_torch/_C*.so > /dev/null 2>&1 || { status=1; echo "$v: build failed"; tail -5 "$OUT/build_op_$v.txt"; }
done
[ $status = 0 ] || exit 1
for r in $(seq 1 "${AB_REPS:-3}"); do
  order=$VARS
  [ $((r % 2)) = 0 ] && order=$(echo "$VARS" | tac)
  for v in $order; do
    (cd "${SRC[$v]}" && PYTHONPATH=python timeout 120 python3 python/examples/bench_op_overhead.py) 2>&1 |
      sed "s/^/$v pass $r: /" | tee -a "$OUT/ab_op.txt" || status=1
  done
done
exit $status
