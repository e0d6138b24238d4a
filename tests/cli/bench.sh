#!/usr/bin/env bash
# tq-bench: listing, the CPU reference timing, and a clear refusal (exit 2)
# of GPU benchmarks on a machine without a CUDA device.
source "$(dirname "$0")/lib.bash"
BIN=$BUILD/tq-bench
[ -x "$BIN" ] || { echo "tq-bench not built: skipped"; exit 77; }

run "$BIN" --list-formats --head-dim 128
expect_rc 0
expect_out "turboquant_4bit_nc"
expect_out "134"

run "$BIN" --list-formats --head-dim 64 --json
expect_rc 0
expect_json

run "$BIN" --cpu --format turboquant_4bit_nc --format turbo3 --batch 1 --ctx 256 --json
expect_rc 0
expect_json
expect_out '"encode_mvec_per_s"'
expect_out '"dequant_mvec_per_s"'

run "$BIN" --cpu --format no_such_format --batch 1 --ctx 64
expect_rc 2
expect_err "unknown format"

# option values are checked when parsing, on any machine (before the GPU is looked for)
run "$BIN" --format turboquant_4bit_nc --pages everywhere
expect_rc 2
expect_err "--pages"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --layout rows
expect_rc 2
expect_err "--layout"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --dequant fp32
expect_rc 2
expect_err "--dequant"

# every numeric option is range-checked when parsing (with --cpu too): a value out of range exits 2, names the
# option and prints nothing
for bad in "--batch 0" "--batch -2" "--batch 65536" "--q-heads 0" "--kv-heads 0" "--kv-heads 1025" "--head-dim 0" \
           "--ctx 0" "--ctx -1" "--ctx 1073741825" "--splits -1" "--splits 257" "--block-size 0" "--block-size 24" \
           "--reps 0" "--warmup -1" "--store-tokens -5" "--copy-gb 0"; do
  run "$BIN" --cpu --format turboquant_4bit_nc $bad
  expect_rc 2
  expect_err "${bad%% *}"
  expect_empty_out
done

for q in 1 129 x; do  # --q-len: 2 … 128 query tokens per sequence
  run "$BIN" --format turboquant_4bit_nc --q-len "$q"
  expect_rc 2
  expect_err "--q-len"
  expect_empty_out
done
expect_empty_out

# ragged batches: --seq-lens (a list, LxN repeats, or uniform:MIN:MAX), checked before any GPU is looked for
run "$BIN" --cpu --format turboquant_4bit_nc --seq-lens 256,64x3 --json
expect_rc 0
expect_json
expect_out '"decode_est_ms_full_shape"'

run "$BIN" --cpu --format turboquant_4bit_nc --seq-lens 256,64x3
expect_rc 0
expect_out "seq_lens 256,64x3 (448 tokens, longest 256)"

run "$BIN" --format turboquant_4bit_nc --seq-lens 4096,x3
expect_rc 2
expect_err "'' is not a length in 1"
expect_empty_out

# --q-counts: each sequence's query count (1 … 128, the largest ≥ 2), checked before any GPU is looked for
for spec in "1x31,200" "1x4" "4,0" "4,2x3 --batch 3" "4,2 --q-len 4"; do
  run "$BIN" --format turboquant_4bit_nc --q-counts $spec
  expect_rc 2
  expect_err "--q-counts"
  expect_empty_out
done
expect_err "--q-len excludes --q-counts"

run "$BIN" --format turboquant_4bit_nc --seq-lens 5x3 --batch 4
expect_rc 2
expect_err "lists 3 sequences but --batch is 4"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --seq-lens 5 --ctx 4
expect_rc 2
expect_err "excludes"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --seq-lens uniform:9:3
expect_rc 2
expect_err "MIN 9 > MAX 3"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --seq-lens 7,0
expect_rc 2
expect_err "'0' is not a length in 1"
expect_empty_out

run "$BIN" --format turboquant_4bit_nc --seq-lens 99999999999
expect_rc 2
expect_err "is not a length in 1 … 1073741824"
expect_empty_out

# --model: a known model's shape; one sequence's KV cache over all its layers. Expected sizes
# computed by hand: Llama 3.1 8B, 32 layers x 8 kv heads x 32768 tokens = 8388608 token-heads,
# fp16 512 B each = 4294967296 B, 134-B slots = 1124073472 B; Gemma 3 27B keeps 1024 of 32768
# tokens in 52 of its 62 layers: (10 x 32768 + 52 x 1024) x 16 heads x 512 B = 3120562176 B.
run "$BIN" --list-models
expect_rc 0
expect_out "llama-3.1-70b  *64  *8  *8  *128  *80"
expect_out "gemma-3-27b  *32  *16  *2  *128  *62  *52 x 1024"

run "$BIN" --list-models --json
expect_rc 0
expect_json
expect_out '"name": "phi-4"'

run "$BIN" --cpu --model llama-3.1-8b --format turboquant_4bit_nc --batch 1 --ctx 32768
expect_rc 0
expect_out "model llama-3.1-8b: batch 1, q_heads 32, kv_heads 8, head_dim 128, ctx 32768"
expect_out "over all 32 layers of llama-3.1-8b: f16 4.295 GB"
expect_out "turboquant_4bit_nc  *1.124 GB (3.82x smaller)"

run "$BIN" --cpu --model Gemma-3-27B --format turboquant_4bit_nc --batch 1 --ctx 32768
expect_rc 0
expect_out "(its 52 windowed layers keep 1024 tokens): f16 3.121 GB"

run "$BIN" --cpu --model gemma-3-270m --format turboquant_4bit_nc --batch 1 --ctx 300 --json
expect_rc 0
expect_json
expect_out '"kv_bytes_per_seq": 1414800'    # 18 layers x 300 tokens x 262-B slots (head_dim 256)
expect_out '"f16_kv_bytes_per_seq": 5529600'  # 18 x 300 x 1024 B

run "$BIN" --model no-such-model
expect_rc 2
expect_err "unknown model 'no-such-model' (known: llama-3.1-8b"
expect_empty_out

run "$BIN" --model phi-3-mini-4k --format turboquant_4bit_nc
expect_rc 2
expect_err "head_dim 96"
expect_empty_out

run "$BIN" --model llama-3.1-8b --kv-heads 4
expect_rc 2
expect_err "excludes"
expect_empty_out

# --check-dump: the file, --layers, --positions and --format are checked before any GPU is looked for
DUMP=$SRC/tests/data/kv/smollm2_256.h5
run "$BIN" --check-dump "$TMP/missing.h5"
expect_rc 2
expect_err "missing.h5: cannot open"
expect_empty_out

printf 'not an hdf5 file' > "$TMP/bad.h5"
run "$BIN" --check-dump "$TMP/bad.h5"
expect_rc 2
expect_err "not an HDF5 file"
expect_empty_out

run "$BIN" --check-dump "$DUMP" --layers 5
expect_rc 2
expect_err "layer 5 is not in"
expect_empty_out

run "$BIN" --check-dump "$DUMP" --layers 30
expect_rc 2
expect_err "out of range"
expect_empty_out

run "$BIN" --check-dump "$DUMP" --positions 0
expect_rc 2
expect_err "--positions 0 must be"
expect_empty_out

run "$BIN" --check-dump "$DUMP" --format no_such_format
expect_rc 2
expect_err "unknown format 'no_such_format'"
expect_empty_out

run "$BIN" --layers 0,18
expect_rc 2
expect_err "requires --check-dump"
expect_empty_out

# --simulate-lut: no GPU needed; mse-key and turbo formats get a simulated error, fp8 keys say why not
GEMMA=$SRC/tests/data/kv/gemma3_256.h5
run "$BIN" --check-dump "$GEMMA" --simulate-lut --layers 11 --format turboquant_4bit_nc --format turbo2 \
  --format turbo4 --format turboquant_k8v4 --json
expect_rc 0
expect_json
expect_out '"lut_max_rel_err"'
expect_out '"result": "not simulated"'
python3 - "$TMP/out" <<'PY' || fail "--simulate-lut: simulated errors out of their ranges"
import json, sys
rows = {r["format"]: r for r in json.load(open(sys.argv[1]))}
e = rows["turboquant_4bit_nc"]["lut_max_rel_err"]
# the fp16 rounding of 16 centroids (relative ≤ 7.4e-5, spread 1.5e-4) moves the output: not 0, well below 1e-3
assert 0 < e < 1e-3, e
# turbo2's 4 centroids round to within 6.8e-7 of each other at its α: two orders of magnitude less than 4-bit's
t2, t4 = rows["turbo2"]["lut_max_rel_err"], rows["turbo4"]["lut_max_rel_err"]
assert 0 <= t2 < t4 / 20 and 0 < t4 < 1e-3, (t2, t4)
assert rows["turboquant_k8v4"]["result"] == "not simulated"
assert rows["turboquant_4bit_nc"]["positions"] == 128 and rows["turboquant_4bit_nc"]["tokens"] == 256
PY

run "$BIN" --check-dump "$GEMMA" --simulate-lut --layers 11 --format turboquant_4bit_nc
expect_rc 0
expect_out "a float64 simulation, not a check of the kernels"
expect_out "0 of 1 above 1e-03"

run "$BIN" --simulate-lut --format turboquant_4bit_nc
expect_rc 2
expect_err "requires --check-dump"
expect_empty_out

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  run "$BIN" --format turboquant_4bit_nc --batch 1 --ctx 64
  expect_rc 2
  expect_err "use --cpu"
  expect_empty_out

  run "$BIN" --check-dump "$DUMP" --layers 18
  expect_rc 2
  expect_err "--check-dump runs the GPU kernels"
  expect_empty_out
fi
finish
