#!/usr/bin/env bash
# Build, test and benchmark the CUDA kernels on the GPU machine, in one go.
#
#   bash experiments/run_kernels.sh [steps]      steps: comma list of
#        probe,build,test,sanitize,bench,sdpa,text,profile,realkv,models,torch,planner,crossover,bf16,mma,mq64,
#        shapes,mq,varlen,trace,paths
#        (default: the first six)
#   shapes: the issue's shapes (32/8, 64/8, 128/8, 32/4, 16/2 at 32K) and SDPA on each, into shapes.txt (SHAPE_FORMATS);
#   mq: the multi-query table (--q-len 2,4,16 at 32/8) into multi_query.txt; varlen: tq-bench --q-counts
#   (a query count per sequence: 16,1x31, 128,1x31, 4x8,1x24, 16x32 at 32/8) into varlen.txt; trace: stage 1's
#   phases per CTA from a TQ_DECODE_TRACE build (TRACE_FORMATS, TRACE_SHAPES "16/2 32/8", TRACE_CTX) into trace.txt;
#   paths: python/examples/bench_varlen.py (the fused launch against decode_rows for query-count patterns at G 1, 2,
#   4, 8, 16; needs the extension the torch step builds) into varlen_paths.jsonl
#   env: BENCH_CTX ("4096 32768"), BENCH_PAGES ("shuffled"; or "shuffled sequential"),
#        BENCH_FORMATS (tq-bench --format list), BENCH_LAYOUT (tq-bench --layout: vllm, planes
#        or both (default): the plane-layout rows for the formats that have one),
#        TEST_FILTER (test: a Catch2 test spec, e.g. "[multi]"; default the whole suite), TEST_SHARDS (test: processes the
#        test cases are dealt over, 5),
#        PROFILE_FORMATS (profile: formats whose decode Nsight Compute profiles; turboquant_4bit_nc),
#        PROFILE_SHAPE (profile: tq-bench shape flags; default $SHAPE: B 32, 32/8, d 128), PROFILE_KERNEL
#        (profile: kernel-name regex; decode_kernel),
#        REAL_KV (realkv: tq-dump files for tq-bench --check-dump; default out/kv/*.h5, else
#        tests/data/kv/*.h5), REAL_KV_POSITIONS (256),
#        MODELS (models: tq-bench --model names; default every listed model whose head_dim the
#        formats take), MODEL_CTX ("4096 32768"), MODEL_BATCH (32), MODEL_FORMATS
#        ("turboquant_4bit_nc turboquant_k3v4_nc turbo3"), PLANNER_GROUPS (planner: experiments/planner_ab.py
#        --groups; "tiles,mq,deal"), PLANNER_TIMEOUT (planner: seconds; 400)
#
# Logs go to $OUT (or build-kernels/out), ≤ 8 files: build.log (with the ptxas -v
# report), tests.log (GPU tests, the CMake package's tests/cmake_consumer, then compute-sanitizer), bench.jsonl (one line
# per tq-bench run: {ctx, pages, rows}), bench_text.txt, sdpa.jsonl, ncu.log, errors.log
# (stderr of the benchmarks), check_dump.txt (realkv), models.jsonl + models_sdpa.jsonl (models:
# decode of known models' shapes against our FP16 and SDPA), torch.log + op_overhead.jsonl (torch: the
# python/ extension built in place, its pytest suite, the op's overhead over its kernels), planner.jsonl +
# planner.txt (planner: experiments/planner_ab.py's runs and summary), multi_query_crossover.jsonl (crossover:
# python/examples/bench_multi_query.py at G 1, 2, 4, 8, 16), bf16.jsonl (bf16: the store and decode with bf16
# activations against fp16, interleaved), mma_peak.txt (mma: the tensor cores' ceilings, experiments/mma_peak.cu
# and wgmma_peak.cu), mq64_proto.txt (mq64: experiments/mq64_proto.cu's check and timings), varlen.txt (varlen), varlen_paths.jsonl (paths); a summary table is
# printed last.
#
# Builds TQ_CORE_ONLY (no Eigen/PCRE2 needed; HDF5, where found, for the dump reader). Headers the machine lacks
# (Catch2 and nlohmann-json there; fmt and CLI11 as a fallback) come from .deps/ when present:
# Debian packages unpacked on the development machine and sent along (device
# tool: carry [".deps"]; CMAKE_PREFIX_PATH=.deps/usr finds their CMake configs, nlohmann-json's
# under usr/share/cmake/nlohmann_json):
#   echo /.deps/ >> .git/info/exclude; mkdir -p .deps /tmp/debs && cd /tmp/debs &&
#   apt-get download catch2 libcli11-dev libfmt-dev libfmt9 nlohmann-json3-dev &&
#   for f in *.deb; do dpkg -x "$f" "$OLDPWD/.deps"; done
set -u
set -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build-kernels/out}
mkdir -p "$OUT"
STEPS=${1:-probe,build,test,sanitize,bench,sdpa}
BENCH_CTX=${BENCH_CTX:-4096 32768}
BENCH_PAGES=${BENCH_PAGES:-shuffled}
BENCH_LAYOUT=${BENCH_LAYOUT:-both}
has() { [[ ",$STEPS," == *",$1,"* ]]; }
# append_rows TMP FILE "'key': value, …": one JSON line {key: value, …, 'rows': TMP's tq-bench --json list} onto FILE
append_rows() { python3 -c "import json,sys; print(json.dumps({$3, 'rows': json.load(open(sys.argv[1]))}))" "$1" >> "$2"; }
BUILD=$ROOT/build-kernels
DEPS=""; [ -d "$ROOT/.deps/usr" ] && DEPS=$ROOT/.deps/usr  # headers and CMake configs the machine lacks (see above)
JOBS=$(nproc 2>/dev/null || echo 8)
export PATH=/usr/local/cuda/bin:$PATH
SHAPE="--batch 32 --q-heads 32 --kv-heads 8 --head-dim 128 --block-size 16"
BENCH_FORMATS=${BENCH_FORMATS:-turboquant_4bit_nc turboquant_k3v4_nc turboquant_k8v4 turboquant_3bit_nc turbo2 turbo3 turbo4}
FORMATS=$(for f in $BENCH_FORMATS; do printf -- '--format %s ' "$f"; done)
status=0

if has probe; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
    nvcc --version | tail -2
    cmake --version | head -1
    ninja --version
    g++ --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
    for h in fmt/format.h CLI/CLI.hpp catch2/catch.hpp nlohmann/json.hpp eigen3/Eigen/Core H5Cpp.h; do
      [ -e /usr/include/$h ] && echo "system header: $h" || echo "missing header: $h"
    done
    which compute-sanitizer cuobjdump
  } 2>&1
fi

# build_tree DIR CUDA_FLAGS TARGET… [-- CMAKE_ARGS…]: the TQ_CORE_ONLY Release build of TARGETs in DIR
build_tree() {
  local dir=$1 flags=$2 targets=() extra=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do targets+=("$1"); shift; done
  [ "${1:-}" = -- ] && { shift; extra=("$@"); }
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTQ_CORE_ONLY=ON -DTQ_BENCHMARKS=OFF "-DCMAKE_CUDA_FLAGS=$flags" ${DEPS:+"-DCMAKE_PREFIX_PATH=$DEPS"} \
    "${extra[@]}" && cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"
}

if has build; then
  t0=$(date +%s)
  build_tree "$BUILD" -Xptxas=-v tq-bench tq_gpu_tests > "$OUT/build.log" 2>&1 || {
    echo "BUILD FAILED (see build.log)"; tail -40 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi

if has test; then
  # The test cases (TEST_FILTER's, or all) dealt round-robin over TEST_SHARDS processes on the one GPU: most of a
  # case's time is its float64 reference on the CPU, so on a 16-core H100 machine 5 shards ran the whole suite in
  # 209 s, where one process took 361 s and more. The names go to Catch2's -f with , [ ] " \ escaped.
  t0=$(date +%s)
  T=$BUILD/tests/gpu/tq_gpu_tests SH=/tmp/tq_test_shards
  rm -rf "$SH" && mkdir -p "$SH"
  "$T" --list-test-names-only ${TEST_FILTER:+"$TEST_FILTER"} | grep -v -e '^$' -e '^tq_gpu_tests: ' |
    sed 's/\([],["\\]\)/\\\1/g' > "$SH/names"
  split -n "r/${TEST_SHARDS:-5}" "$SH/names" "$SH/shard_"
  pids=()
  for s in "$SH"/shard_*; do
    [ -s "$s" ] || continue
    timeout 450 "$T" -f "$s" --durations yes > "$s.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  : > "$OUT/tests.log"
  for s in "$SH"/shard_*.log; do { echo "==== shard $(basename "$s" .log)"; cat "$s"; } >> "$OUT/tests.log"; done
  [ -s "$SH/names" ] || { rc=1; echo "gpu tests: tq_gpu_tests listed no test cases"; }
  grep -h "No test cases matched" "$SH"/shard_*.log && rc=1  # a name the escaping missed: that case did not run
  echo "gpu tests: exit $rc in $(( $(date +%s) - t0 )) s, $(wc -l < "$SH/names") test cases in ${#pids[@]} shards:"
  grep -hE '^(All tests passed|test cases:)' "$SH"/shard_*.log | sed 's/^/  /'
  [ $rc -eq 0 ] || { status=1; grep -B5 -A25 -m3 "FAILED" "$OUT/tests.log" | head -120; }
  # the CMake package: installed into a scratch prefix, tests/cmake_consumer built against it and run (its GPU part:
  # store_kv + plan_decode + paged_decode against float64 attention)
  PKG=/tmp/tq_pkg
  rm -rf "$PKG" && mkdir -p "$PKG"
  PREFIX_PATH="$PKG/prefix${DEPS:+;$DEPS}"
  if { cmake --install "$BUILD" --prefix "$PKG/prefix" && cmake -S "$ROOT/tests/cmake_consumer" -B "$PKG/build" -G Ninja \
         -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$PREFIX_PATH" && cmake --build "$PKG/build"; } > "$PKG/log" 2>&1; then
    "$PKG/build/consumer" 2>&1 | tee -a "$OUT/tests.log" || { status=1; echo "tests/cmake_consumer failed"; }
  else
    status=1; echo "tests/cmake_consumer did not build:"; tail -20 "$PKG/log"
  fi
fi

if has sanitize; then
  t0=$(date +%s)
  echo "==== compute-sanitizer --tool memcheck tq_gpu_tests [quick] ====" >> "$OUT/tests.log"
  timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    "$BUILD/tests/gpu/tq_gpu_tests" "[quick]" > "$OUT/sanitizer.tmp" 2>&1
  rc=$?
  cat "$OUT/sanitizer.tmp" >> "$OUT/tests.log"
  echo "compute-sanitizer memcheck [quick]: exit $rc in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.tmp" | tail -1); $(grep -E '^(All tests passed|test cases:)' "$OUT/sanitizer.tmp" | tail -1)"
  [ $rc -eq 0 ] || { status=1; grep -m20 -E "Invalid|ERROR|FAILED|Error" "$OUT/sanitizer.tmp"; }
  rm -f "$OUT/sanitizer.tmp"
  for tool in racecheck initcheck; do
    echo "==== compute-sanitizer --tool $tool tq_gpu_tests [quick] ====" >> "$OUT/tests.log"
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/gpu/tq_gpu_tests" "[quick]" \
      > "$OUT/sanitizer.tmp" 2>&1
    rc=$?
    cat "$OUT/sanitizer.tmp" >> "$OUT/tests.log"
    echo "compute-sanitizer $tool [quick]: exit $rc: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer.tmp" | tail -1)"
    [ $rc -eq 0 ] || { status=1; grep -m10 -E "Invalid|ERROR|Error|Race|Uninitialized" "$OUT/sanitizer.tmp"; }
    rm -f "$OUT/sanitizer.tmp"
  done
fi

if has bench; then
  for ctx in $BENCH_CTX; do
    for pages in $BENCH_PAGES; do
      if timeout 120 "$BUILD/tq-bench" $FORMATS $SHAPE --ctx $ctx --pages $pages --layout $BENCH_LAYOUT --json > "$OUT/bench.tmp" 2>> "$OUT/errors.log"; then
        append_rows "$OUT/bench.tmp" "$OUT/bench.jsonl" "'ctx': $ctx, 'pages': '$pages'"
      else
        status=1; echo "tq-bench ctx $ctx $pages failed:"; tail -5 "$OUT/errors.log"
      fi
    done
  done
  rm -f "$OUT/bench.tmp"
fi

if has text; then
  # The human-readable table, and the split-count sensitivity of the 4-bit decode.
  {
    timeout 120 "$BUILD/tq-bench" --format turboquant_4bit_nc --format turboquant_k3v4_nc --format turboquant_k8v4 \
      $SHAPE --ctx 32768 --layout $BENCH_LAYOUT
    for ctx in 4096 32768; do
      for sp in 4 16; do
        timeout 60 "$BUILD/tq-bench" --format turboquant_4bit_nc $SHAPE --ctx $ctx --splits $sp --json |
          python3 -c "import json,sys; j=json.load(sys.stdin)[0]; d=j['decode']; print('splits-sweep ctx', j['ctx'], 'splits', d['num_splits'], 'ms %.4f' % d['median_ms'], '%%copy %.1f' % d['pct_copy'], 'f16_ms %.4f' % d['f16_median_ms'])"
      done
    done
  } > "$OUT/bench_text.txt" 2>> "$OUT/errors.log" || status=1
  cat "$OUT/bench_text.txt"
fi

if has planner; then
  # The planner's choices (column tiles, balanced dealing) against their alternatives, interleaved in one binary.
  t0=$(date +%s)
  timeout "${PLANNER_TIMEOUT:-400}" python3 "$ROOT/experiments/planner_ab.py" "$BUILD/tq-bench" "$OUT/planner.jsonl" \
    --groups "${PLANNER_GROUPS:-tiles,mq,deal}" > "$OUT/planner.txt" 2>> "$OUT/errors.log" || {
    status=1  # (cut short: the summary of the runs that finished)
    python3 "$ROOT/experiments/planner_ab.py" --summary "$OUT/planner.jsonl" > "$OUT/planner.txt"; }
  echo "planner A/B: $(( $(date +%s) - t0 )) s"; cat "$OUT/planner.txt"
fi

if has realkv; then
  # The kernels on real Q/K/V (tq-dump files) against the CPU encoder / decoder and float64 attention.
  files=${REAL_KV:-$(ls "$ROOT"/out/kv/*.h5 2>/dev/null || ls "$ROOT"/tests/data/kv/*.h5)}
  for f in $files; do
    t0=$(date +%s)
    timeout 300 "$BUILD/tq-bench" --check-dump "$f" --positions "${REAL_KV_POSITIONS:-256}" >> "$OUT/check_dump.txt" 2>&1
    rc=$?
    echo "check-dump $(basename "$f"): exit $rc in $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/check_dump.txt")"
    [ $rc -eq 0 ] || status=1
  done
fi

if has profile; then
  # One launch of a decode kernel under Nsight Compute (clocks left alone) for each of PROFILE_FORMATS
  # (default turboquant_4bit_nc), then our FP16 kernel once, with the per-instruction stall samples
  # summarised by experiments/ncu_summary.py per 32-token sub-tile and kv head (PROFILE_SHAPE's batch and
  # kv heads at ctx PCTX). Reports go to /tmp (~20 MB each).
  PCTX=32768
  PSHAPE=${PROFILE_SHAPE:-$SHAPE}
  flag() { local v; v=$(sed -nE "s/.*--$1 ([0-9]+).*/\1/p" <<< "$PSHAPE"); echo "${v:-$2}"; }
  UNITS=$(( $(flag batch 32) * PCTX * $(flag kv-heads 8) / 32 ))  # 32-token sub-tiles × kv heads
  profile_one() {  # format, kernel-name regex
    local rep=/tmp/ncu_$1_$2
    if timeout 200 ncu --clock-control none -k regex:"$2" --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section SourceCounters \
        --import-source no --export "$rep" -f \
        "$BUILD/tq-bench" --format "$1" $PSHAPE --ctx $PCTX --reps 20 --warmup 1 > /tmp/ncu_run.log 2>&1; then
      { echo "==== $1: $2"; ncu --import "$rep.ncu-rep" --page details
        ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" &&
          python3 "$ROOT/experiments/ncu_summary.py" "$rep.csv" --units $UNITS; } >> "$OUT/ncu.log" 2>&1
    else
      status=1; echo "ncu $1 $2 failed"; tail -5 /tmp/ncu_run.log
    fi
  }
  PROFILE_FORMATS=${PROFILE_FORMATS:-turboquant_4bit_nc}
  # PROFILE_KERNEL: the kernel-name regex (decode_kernel_causal for the fused multi-query launches of a
  # PROFILE_SHAPE with --q-len, which tq-bench times after the single-query decodes)
  for f in $PROFILE_FORMATS; do profile_one "$f" "${PROFILE_KERNEL:-decode_kernel}"; done
  profile_one "${PROFILE_FORMATS%% *}" decode_f16_kernel  # tq-bench runs our FP16 decode beside every format
  grep -E "^====|DRAM Throughput|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Registers Per|instructions executed|^  (wait|mio|long_sb) " "$OUT/ncu.log" | head -80
fi

if has sdpa; then
  : > "$OUT/sdpa.jsonl"
  for ctx in 4096 32768; do
    PYTHONUNBUFFERED=1 timeout 90 python3 "$ROOT/experiments/bench_sdpa.py" --batch 32 --q-heads 32 --kv-heads 8 \
      --head-dim 128 --ctx $ctx >> "$OUT/sdpa.jsonl" 2>> "$OUT/errors.log" ||
      { status=1; echo "sdpa ctx $ctx failed:"; tail -5 "$OUT/errors.log"; }
  done
fi

if has shapes; then
  # The issue's shapes at 32K, B 32, d 128 (query heads / kv heads: 32/8, 64/8, 128/8, 32/4, 16/2), the decode of
  # SHAPE_FORMATS against our FP16, then torch SDPA on each shape in the same session (kernels/shapes_*.txt).
  SHAPE_FORMATS=${SHAPE_FORMATS:-turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc turboquant_k8v4 turbo3 turbo4}
  SF=$(for f in $SHAPE_FORMATS; do printf -- '--format %s ' "$f"; done)
  : > "$OUT/shapes.txt"
  shape_list=("32 8" "64 8" "128 8" "32 4" "16 2")  # query heads, kv heads
  for s in "${shape_list[@]}"; do
    echo "== ${s% *}/${s#* }" >> "$OUT/shapes.txt"
    timeout 120 "$BUILD/tq-bench" $SF --batch 32 --q-heads ${s% *} --kv-heads ${s#* } --head-dim 128 --ctx 32768 \
      --layout vllm --dequant none >> "$OUT/shapes.txt" 2>> "$OUT/errors.log" ||
      { status=1; echo "tq-bench ${s% *}/${s#* } failed:"; tail -5 "$OUT/errors.log"; }
  done
  echo "== torch SDPA (fp16 cache, enable_gqa)" >> "$OUT/shapes.txt"
  for s in "${shape_list[@]}"; do
    PYTHONUNBUFFERED=1 timeout 90 python3 "$ROOT/experiments/bench_sdpa.py" --batch 32 --q-heads ${s% *} \
      --kv-heads ${s#* } --head-dim 128 --ctx 32768 >> "$OUT/shapes.txt" 2>> "$OUT/errors.log" ||
      { status=1; echo "sdpa ${s% *}/${s#* } failed:"; tail -5 "$OUT/errors.log"; }
  done
  cat "$OUT/shapes.txt"
fi

if has trace; then
  # Stage-1 phases per CTA: tq-bench built with TQ_DECODE_TRACE into build-trace (the kernels print %globaltimer at
  # entry, LUT built, first stage landed, main loop done, exit; the printf leaves some kernels with small spills, so
  # the trace's times are a diagnostic, not a benchmark), at TRACE_SHAPES ("Q/K ..." at B 32, d 128) and TRACE_CTX,
  # for TRACE_FORMATS, summarised by experiments/trace_summary.py into trace.txt.
  TB=$ROOT/build-trace
  if build_tree "$TB" -DTQ_DECODE_TRACE tq-bench -- -DTQ_TESTS=OFF > "$OUT/trace_build.log" 2>&1; then
    : > "$OUT/trace.txt"
    for f in ${TRACE_FORMATS:-turboquant_4bit_nc}; do
      for shape in ${TRACE_SHAPES:-16/2 32/8}; do
        for ctx in ${TRACE_CTX:-4096 32768}; do
          timeout 120 "$TB/tq-bench" --format "$f" --batch 32 --q-heads "${shape%/*}" --kv-heads "${shape#*/}" \
            --head-dim 128 --block-size 16 --ctx "$ctx" --layout vllm --dequant none --reps 20 --warmup 1 \
            > /tmp/trace_raw.txt 2>> "$OUT/errors.log" &&
            python3 "$ROOT/experiments/trace_summary.py" /tmp/trace_raw.txt --label "$f $shape ctx $ctx" >> "$OUT/trace.txt" ||
            { status=1; echo "trace $f $shape $ctx failed"; }
          grep "^turbo" /tmp/trace_raw.txt | sed 's/^/  tq-bench (trace build): /' >> "$OUT/trace.txt"
        done
      done
    done
    cat "$OUT/trace.txt"
  else
    status=1; echo "trace build failed (trace_build.log)"; tail -20 "$OUT/trace_build.log"
  fi
fi

if has mq; then
  # The multi-query table at 32/8/128, 32K, B 32 (kernels/multi_query_tqbench*.txt): fused decode, one single-query
  # decode and q_len of them, our FP16 decode at the same q_len.
  timeout 200 "$BUILD/tq-bench" --format turboquant_4bit_nc --format turboquant_k3v4_nc --format turboquant_3bit_nc \
    --format turboquant_k8v4 --batch 32 --block-size 16 --layout vllm --dequant none --head-dim 128 --q-heads 32 \
    --kv-heads 8 --ctx 32768 --q-len 2,4,16 > "$OUT/multi_query.txt" 2>> "$OUT/errors.log" ||
    { status=1; echo "tq-bench --q-len failed:"; tail -5 "$OUT/errors.log"; }
  cat "$OUT/multi_query.txt"
fi

if has varlen; then
  # A query count per sequence (tq-bench --q-counts, vLLM's query_start_loc) at 32/8/128, 32K, B 32: one long chunk
  # among single-query decodes, a few drafts each, and one count everywhere; varlen_ms next to the fused decode
  # of the largest count in every sequence and to one single-query decode with every query a row (rows_ms).
  : > "$OUT/varlen.txt"
  for counts in 16,1x31 128,1x31 4x8,1x24 16x32; do
    timeout 120 "$BUILD/tq-bench" --format turboquant_4bit_nc --format turboquant_k3v4_nc --format turboquant_3bit_nc \
      --format turbo3 --batch 32 --block-size 16 --layout vllm --dequant none --head-dim 128 --q-heads 32 \
      --kv-heads 8 --ctx 32768 --q-counts "$counts" >> "$OUT/varlen.txt" 2>> "$OUT/errors.log" ||
      { status=1; echo "tq-bench --q-counts $counts failed:"; tail -5 "$OUT/errors.log"; }
  done
  cat "$OUT/varlen.txt"
fi

if has models; then
  # Known models' attention shapes (tq-bench --model): the quantized decode against our FP16
  # decode and SDPA on the same shape, and one sequence's KV cache over all the model's layers.
  MODEL_CTX=${MODEL_CTX:-4096 32768}
  MODEL_BATCH=${MODEL_BATCH:-32}
  MODEL_FORMATS=${MODEL_FORMATS:-turboquant_4bit_nc turboquant_k3v4_nc turbo3}
  MF=$(for f in $MODEL_FORMATS; do printf -- '--format %s ' "$f"; done)
  "$BUILD/tq-bench" --list-models --json > "$OUT/models_list.json" || { status=1; echo "tq-bench --list-models failed"; }
  names=${MODELS:-$(python3 -c 'import json,sys; print(" ".join(m["name"] for m in json.load(open(sys.argv[1])) if m["head_dim"] in (64, 128, 256)))' "$OUT/models_list.json")}
  : > "$OUT/models.jsonl"
  shapes=()
  for m in $names; do
    for ctx in $MODEL_CTX; do
      if timeout 120 "$BUILD/tq-bench" --model "$m" $MF --batch "$MODEL_BATCH" --ctx "$ctx" --dequant none --json \
          > "$OUT/bench.tmp" 2>> "$OUT/errors.log"; then
        append_rows "$OUT/bench.tmp" "$OUT/models.jsonl" "'model': '$m', 'ctx': $ctx"
        shapes+=(--shape "$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))[0]; print(f\"{j['batch']},{j['q_heads']},{j['kv_heads']},{j['head_dim']},{j['ctx']}\")" "$OUT/bench.tmp")")
      else
        status=1; echo "tq-bench --model $m --ctx $ctx failed:"; tail -3 "$OUT/errors.log"
      fi
    done
  done
  rm -f "$OUT/bench.tmp"
  PYTHONUNBUFFERED=1 timeout 300 python3 "$ROOT/experiments/bench_sdpa.py" "${shapes[@]}" > "$OUT/models_sdpa.jsonl" \
    2>> "$OUT/errors.log" || { status=1; echo "sdpa (models) failed:"; tail -5 "$OUT/errors.log"; }
  python3 "$ROOT/experiments/models_table.py" "$OUT/models.jsonl" "$OUT/models_sdpa.jsonl" || status=1
fi

if has torch; then
  # The PyTorch operators (python/): built in place with the system g++ (see python/setup.py), their pytest
  # suite on this GPU, what an op call adds over its kernels (examples/bench_op_overhead.py), and the drop-in
  # example next to torch SDPA (examples/decode_vs_sdpa.py).
  t0=$(date +%s)
  if (cd "$ROOT/python" && CXX=${TORCH_CXX:-/usr/bin/g++} MAX_JOBS=$JOBS timeout 400 python3 setup.py build_ext --inplace) \
      > "$OUT/torch.log" 2>&1; then
    echo "torch extension: built in $(( $(date +%s) - t0 )) s"
    (cd "$ROOT" && PYTHONPATH=python timeout 300 python3 -m pytest -q python/tests) >> "$OUT/torch.log" 2>&1 ||
      status=1
    echo "pytest python/tests: $(grep -E '[0-9]+ (passed|failed)' "$OUT/torch.log" | tail -1)"
    (cd "$ROOT" && PYTHONPATH=python timeout 120 python3 python/examples/bench_op_overhead.py \
      --json "$OUT/op_overhead.jsonl") 2>&1 | tee -a "$OUT/torch.log" || status=1
    for ex in "" "--q-counts 16,1x7"; do  # the drop-in example, one query each and a mixed batch (query_start_loc)
      (cd "$ROOT" && PYTHONPATH=python timeout 120 python3 python/examples/decode_vs_sdpa.py $ex) 2>&1 |
        tee -a "$OUT/torch.log" || status=1
    done
  else
    status=1; echo "torch extension build failed (see torch.log):"; tail -20 "$OUT/torch.log"
  fi
fi

if has crossover; then
  # Fused multi-query decode against dequant + SDPA around the crossover of tqkit_torch.takes_dense (q_len 64 at
  # G >= 8, 80 below) at G 8, 16, 1, 2 and 4 (needs the extension the torch step builds); rows appended to
  # multi_query_crossover.jsonl.
  for spec in "64 8 8,16,32,48,64,80,96" "128 8 8,16,32,48,64,72" "16 16 32,48,64,80,96" "16 8 32,48,64,80,96" \
      "32 8 32,48,64,80,96"; do
    set -- $spec
    (cd "$ROOT" && PYTHONPATH=python timeout 150 python3 python/examples/bench_multi_query.py --heads $1 \
      --kv-heads $2 --q-lens $3 --json "$OUT/multi_query_crossover.jsonl") 2>> "$OUT/errors.log" ||
      { status=1; echo "bench_multi_query $spec failed:"; tail -5 "$OUT/errors.log"; }
  done
fi

if has paths; then
  # A query count per sequence through tqkit_torch.decode: the fused launch against decode_rows (every query a
  # single-query row) for bench_varlen.py's patterns, 4bit_nc at G 1, 2, 4, 8 and 16 and k3v4_nc at G 4; rows
  # appended to varlen_paths.jsonl (eager and CUDA-graph times; tests/cli/decode_paths.sh checks takes_rows against
  # the eager ones).
  for spec in "turboquant_4bit_nc 16 16" "turboquant_4bit_nc 16 8" "turboquant_4bit_nc 32 8" \
      "turboquant_k3v4_nc 32 8" "turboquant_4bit_nc 64 8" "turboquant_4bit_nc 128 8"; do
    set -- $spec
    (cd "$ROOT" && PYTHONPATH=python timeout 150 python3 python/examples/bench_varlen.py --format $1 --heads $2 \
      --kv-heads $3 --json "$OUT/varlen_paths.jsonl") 2>> "$OUT/errors.log" ||
      { status=1; echo "bench_varlen $spec failed:"; tail -5 "$OUT/errors.log"; }
  done
fi

if has mma; then
  # The tensor cores' ceilings that kernels.md bounds the multi-query decode with: mma.sync m16n8k16 (what the
  # kernels use) and wgmma m64nNk16 with A from registers (sm_90a), each on register / shared operands.
  mkdir -p "$BUILD"
  { nvcc -O3 -arch=sm_90 -o "$BUILD/mma_peak" "$ROOT/experiments/mma_peak.cu" && timeout 60 "$BUILD/mma_peak" &&
    nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o "$BUILD/wgmma_peak" "$ROOT/experiments/wgmma_peak.cu" &&
    timeout 120 "$BUILD/wgmma_peak"; } > "$OUT/mma_peak.txt" 2>&1 || { status=1; echo "mma step failed:"; }
  cat "$OUT/mma_peak.txt"
fi

if has mq64; then
  # The speed prototype of a multi-query decode that decodes each key and value once for 64 query columns
  # (experiments/mq64_proto.cu: mma.sync at 16 and 64 columns, wgmma at 64; checked against float64 first).
  mkdir -p "$BUILD"
  { nvcc -O3 -gencode arch=compute_90a,code=sm_90a -I"$ROOT/kernels/src" -I"$ROOT/kernels/include" -I"$ROOT/lib/include" \
      -Xptxas -v -o "$BUILD/mq64_proto" "$ROOT/experiments/mq64_proto.cu" 2>&1 | grep -E "error|registers|spill" &&
      timeout 200 "$BUILD/mq64_proto"; } > "$OUT/mq64_proto.txt" 2>&1 ||
    { status=1; echo "mq64 step failed:"; }
  cat "$OUT/mq64_proto.txt"
fi

if has bf16; then
  # bf16 activations (tq-bench --dtype) against fp16, interleaved twice: B 32 at 32K (throughput), B 1 at 4K
  # (latency: the bf16 queries' conversion is one more launch), and q_len 4.
  for pass in 1 2; do
    for dt in fp16 bf16; do
      for spec in "--batch 32 --ctx 32768" "--batch 1 --ctx 4096" "--batch 32 --ctx 32768 --q-len 4"; do
        if timeout 120 "$BUILD/tq-bench" --format turboquant_4bit_nc --format turboquant_k3v4_nc \
            --format turboquant_3bit_nc --format turboquant_k8v4 --q-heads 32 --kv-heads 8 --head-dim 128 \
            --layout vllm --dequant none --dtype $dt $spec --json > "$OUT/bf16.tmp" 2>> "$OUT/errors.log"; then
          append_rows "$OUT/bf16.tmp" "$OUT/bf16.jsonl" "'pass': $pass, 'dtype': '$dt', 'spec': '$spec'"
        else
          status=1; echo "tq-bench --dtype $dt $spec failed:"; tail -5 "$OUT/errors.log"
        fi
      done
    done
  done
  rm -f "$OUT/bf16.tmp"
  python3 - "$OUT/bf16.jsonl" <<'PY'
import collections, json, sys
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    run = json.loads(line)
    for r in run["rows"]:
        d, st = r.get("decode"), r.get("store")  # (a string where not run)
        ms = d.get("median_ms") if isinstance(d, dict) else r.get("fused_ms")
        store = st.get("median_ms") if isinstance(st, dict) else None
        t[(run["spec"], r["format"], run["dtype"])].append((ms, store))
for (spec, fmt, dt), v in sorted(t.items()):
    if dt != "fp16":
        continue
    b = t.get((spec, fmt, "bf16"), [])
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    f_ms, b_ms = mean([x[0] for x in v if x[0]]), mean([x[0] for x in b if x[0]])
    f_st, b_st = mean([x[1] for x in v if x[1]]), mean([x[1] for x in b if x[1]])
    print(f"bf16 vs fp16 {spec:34s} {fmt:20s} decode {f_ms:.4f} -> {b_ms:.4f} ms ({b_ms / f_ms - 1:+.1%})"
          + (f", store {f_st:.4f} -> {b_st:.4f} ms ({b_st / f_st - 1:+.1%})" if f_st == f_st else ""))
PY
fi

# ---- summary (last) ----
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
sdpa = {}
if os.path.exists(f"{out}/sdpa.jsonl"):
    for line in open(f"{out}/sdpa.jsonl"):
        if line.strip():
            j = json.loads(line); sdpa[j["ctx"]] = j
rows, copy = [], None
if os.path.exists(f"{out}/bench.jsonl"):
    for line in open(f"{out}/bench.jsonl"):
        run = json.loads(line)
        ctx, pages = run["ctx"], run["pages"]
        for j in run["rows"]:
            copy = j["copy_gbps"]
            d, s = j.get("decode"), j["store"]
            sd = sdpa.get(ctx)
            fmtname = j["format"] + (" [planes]" if j.get("layout") == "planes" else "")
            if isinstance(d, dict):
                rows.append((ctx, pages, fmtname, f"{d['median_ms']:.4f}", f"{d['gbps']:.0f}", f"{d['pct_copy']:.1f}",
                             f"{d['f16_median_ms']:.4f}", f"{d['speedup_vs_f16']:.2f}",
                             f"{sd['median_ms']:.4f}" if sd else "-",
                             f"{sd['median_ms'] / d['median_ms']:.2f}" if sd else "-", str(d["num_splits"]),
                             f"{s['pct_copy']:.1f}"))
            else:
                rows.append((ctx, pages, fmtname, "-", "-", "-", "-", "-", "-", "-", "-", f"{s['pct_copy']:.1f}"))
if rows:
    print(f"\nSUMMARY  B=32 Hq=32 Hkv=8 D=128 bs=16; device copy {copy:.0f} GB/s (read+write)")
    hdr = ("ctx", "pages", "format", "dec_ms", "GB/s", "%copy", "f16_ms", "x_f16", "sdpa_ms", "x_sdpa", "splits",
           "store_%copy")
    w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
    for r in [hdr] + rows:
        print("  ".join(str(c).rjust(w[i]) for i, c in enumerate(r)))
PY
exit $status
