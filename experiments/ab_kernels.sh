#!/usr/bin/env bash
# A/B timing of kernel variants in one GPU session (the device tool's runs differ by
# ~0.5% from call to call, so a change is measured against its baseline in the same run).
#
#   bash experiments/ab_kernels.sh [steps for the working tree, default build; "time": time the
#                                   variants built by an earlier call on this machine, build nothing]
#
# Each directory experiments/ab/<NAME>/ is an overlay (files at their repository paths,
# e.g. experiments/ab/A/kernels/src/decode_kernel.cuh from `git show HEAD:kernels/src/decode_kernel.cuh`;
# `bash experiments/ab_overlay.sh REF NAME` writes every changed kernel/app/GPU-test file of REF)
# on a copy of the working tree (or a whole tree, ab_overlay.sh --tree), built in /tmp/src_<NAME>; "C" is the working tree itself
# (built with run_kernels.sh <steps>, so "build,test" also runs the GPU tests on it).
# Then every variant's tq-bench runs AB_REPS times (default 2), interleaved, for
# AB_FORMATS (default turboquant_4bit_nc turboquant_k3v4_nc) at AB_CTX (default 32768) and
# AB_SHAPES (query heads,kv heads pairs; default 32,8) and AB_DIMS (head dims, default 128), batch AB_BATCH
# (default 32; named in each line, e.g. "32,8 B1", where it is not 32), block 16 (AB_ARGS: more tq-bench arguments, e.g. "--dequant none";
# AB_TAG: a word each line carries after the shape, e.g. bf16 beside AB_ARGS="--dtype bf16", so that passes with other
# arguments stay apart in ab.txt); one line per (variant, shape, head dim, ctx, format): decode ms, % of copy, also
# appended to $OUT/ab.txt as it comes (a device call cut by its time limit still returns the
# lines measured so far). AB_QLEN (e.g. "4,16"): the multi-query table of tq-bench --q-len instead
# (fused, one single-query decode and q_len of them, per format and q_len), each line prefixed by
# the variant; AB_QCOUNTS (e.g. "16,1x31"): the same table for tq-bench --q-counts (a query count per
# sequence; its varlen_ms column), in place of AB_QLEN. More passes on the same builds (other shapes or AB_BATCH): `ab_kernels.sh time` with the same $OUT,
# whose lines append to ab.txt (the device tool returns at most 8 files, no deeper than 2 folders).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build-kernels/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
cd "$ROOT"
. "$ROOT/experiments/ab_variant.sh"
VARS=""
for d in experiments/ab/*/; do
  [ -d "$d" ] || continue
  v=$(basename "$d")
  VARS="$VARS $v"
  [ "${1:-}" = time ] && continue
  ab_variant_tree "$ROOT" "$d" "/tmp/src_$v"  # (a whole tree, ab_overlay.sh --tree, is built alone)
  # the variant's build log stays on the machine (/tmp/ab_out_<NAME>; its tail reaches build_<NAME>.txt on a
  # failure): the device tool returns at most 8 files from $OUT
  (cd "/tmp/src_$v" && OUT="/tmp/ab_out_$v" bash experiments/run_kernels.sh build > "$OUT/build_$v.txt" 2>&1) &
done
if [ "${1:-}" != time ]; then
  bash experiments/run_kernels.sh "${1:-build}" > "$OUT/build_C.txt" 2>&1
  wait
  for v in $VARS C; do echo "$v: $(tail -2 "$OUT/build_$v.txt" | tr '\n' ' ')"; done
fi
B=${AB_BATCH:-32}
SHAPE="--batch $B --block-size 16 ${AB_ARGS:-}"
BL=""; [ "$B" != 32 ] && BL=" B$B"  # the batch in each line where it is not 32
BL="$BL${AB_TAG:+ $AB_TAG}"           # and AB_TAG, where set (e.g. bf16 for AB_ARGS="--dtype bf16")
FORMATS=$(for f in ${AB_FORMATS:-turboquant_4bit_nc turboquant_k3v4_nc}; do printf -- '--format %s ' "$f"; done)
for rep in $(seq "${AB_REPS:-2}"); do
  for v in $VARS C; do
    bin=$ROOT/build-kernels/tq-bench
    [ "$v" != C ] && bin=/tmp/src_$v/build-kernels/tq-bench
    for shape in ${AB_SHAPES:-32,8}; do
      for dim in ${AB_DIMS:-128}; do
        for ctx in ${AB_CTX:-32768}; do
          if [ -n "${AB_QLEN:-}${AB_QCOUNTS:-}" ]; then
            qarg="--q-len ${AB_QLEN:-}"; [ -n "${AB_QCOUNTS:-}" ] && qarg="--q-counts $AB_QCOUNTS"
            "$bin" $FORMATS $SHAPE --head-dim "$dim" --q-heads "${shape%,*}" --kv-heads "${shape#*,}" --ctx "$ctx" \
              $qarg 2>> "$OUT/errors.log" | grep -E '^(turbo|fp8|q[0-9])' |
              sed "s/^/$v $shape$BL D$dim $ctx /" | tee -a "$OUT/ab.txt"
            continue
          fi
          "$bin" $FORMATS $SHAPE --head-dim "$dim" --q-heads "${shape%,*}" --kv-heads "${shape#*,}" --ctx "$ctx" --json \
            2>> "$OUT/errors.log" | python3 -c "
import json, sys
for j in json.load(sys.stdin):
    d = j['decode']
    print('$v', '$shape$BL', 'D$dim', $ctx, j['format'], '%.4f ms' % d['median_ms'], '%.1f%% of copy' % d['pct_copy'],
          'f16 %.4f ms' % d['f16_median_ms'], 'splits', d['num_splits'], 'items', d.get('items', ''),
          'parts per item', d.get('part_warps', ''), 'smem', d.get('smem_bytes', ''))" |
            tee -a "$OUT/ab.txt"
        done
      done
    done
  done
done
