#!/usr/bin/env bash
# The head_dim-128 evaluations on Qwen2.5-Coder-1.5B-Instruct (and tq-eval on
# its 0.5B sibling): each step runs one tool and writes its raw output
# (text and JSON) under experiments/results/qwen/, named after the step.
# experiments/results/qwen.md reads these files; the commands below are the
# exact ones that produced them.
#
#   experiments/qwen_eval.sh STEP...     (default: every step, in this order)
#
#   ppl512-f16    tq-eval, 1.5B, n_ctx 512, f16 cache, the whole Jargon File
#                 Part I (34 chunks: the number to compare with llama.cpp)
#   ppl512-f16-int8  the same with int8 weight products (--matmul int8, llama.cpp's
#                 kind of arithmetic)
#   ppl512        tq-eval, 1.5B, n_ctx 512, the first $CHUNKS chunks of Part I,
#                 every vLLM preset, turbo format, q8_0 and q4_0
#   ppl512-skip   the same with the first and last two layers kept at fp16
#   ppl512-all, ppl512-skip-all
#                 ppl512 and ppl512-skip over the whole of Part I (34 chunks;
#                 each is 34 x 11 forwards, about 75 minutes on an idle box)
#   ppl512-0.5b   both of the above on the 0.5B model
#   ppl512-kivi   tq-eval, 1.5B, n_ctx 512: kivi4, kivi2 (per-channel keys)
#   ppl512-ck     tq-eval, 1.5B, n_ctx 512: the formats with
#                 --center-keys (each head's keys minus their chunk mean; a
#                 non-causal diagnostic of Qwen2's K-bias channels)
#   dump          tq-dump, 1.5B, 2048 tokens of Part I (out/qwen15_2048.h5)
#   ablate        tq-ablate on that dump, every format and study
#   long          perplexity/KLD at n_ctx 512, 2048, 8192 on the same first
#                 8192 tokens of the Jargon Lexicon (about 4080 scored at each
#                 n_ctx) for f16, q8_0, turbo4, turbo3, 4bit_nc, k3v4_nc, with
#                 the first and last two layers at fp16 (without them every
#                 rotated format is already broken at n_ctx 512, see ppl512)
#   long16k       the same formats at n_ctx 16384: one chunk of the Lexicon's first
#                 16384 tokens (8192 scored: positions 8192 …, not the tokens above),
#                 with int8 weight products (--matmul int8): two 8192 x 151936 logit
#                 matrices (10 GB) beside the weights need about 14 GB so, 18 GB with
#                 float32 weights (that run was killed for memory on the 24 GB box)
#   long8k-int8   long16k's controls, with --matmul int8: n_ctx 8192 as in long for
#                 q8_0 and 4bit_nc (the int8 products), and 4bit_nc over two 8192-token
#                 chunks (the second scores positions 12288-16382: the later text)
#   passkey       passkey retrieval at 1K and 4K tokens, depths 0, 0.5, 1, for
#                 f16, q8_0, turbo4, 4bit_nc, k3v4_nc (same fp16 layers)
#   passkey-grid  passkey retrieval at 2K and 8K tokens, depths 0, 0.25, 0.5,
#                 0.75, 1, for f16, q8_0, turbo4, turbo3, k3v4_nc (same fp16
#                 layers; about 95 minutes: 25 forwards of 8K tokens)
#
# Needs: scripts/setup.sh (build/ and the models: TQ_MODELS=all data/fetch_models.sh).
# CPU time on the project's 2-core box is in experiments/results/qwen.md.
set -euo pipefail
cd "$(dirname "$0")/.."
C=${TQ_CACHE:-$HOME/.cache/tqkit}
M15=$C/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
M05=$C/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
TEXT=$C/text/jargon-part1.txt
LONG=$C/text/jargon-lexicon.txt
R=experiments/results/qwen
OUT=${TQ_OUT:-out}
# Format sweeps score the first CHUNKS chunks of 512 tokens: one 1.5B forward
# of 512 tokens takes about 12 s on 2 cores, and every format is its own
# forward (all 34 chunks x 11 caches would be 75 minutes per sweep).
CHUNKS=${TQ_CHUNKS:-8}
mkdir -p "$R" "$OUT"

FORMATS512="q8_0 q4_0 turboquant_k8v4 turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc turbo2 turbo3 turbo4 turbo4-qjl"
FORMATS_LONG="q8_0 turbo4 turbo3 turboquant_4bit_nc turboquant_k3v4_nc"

# run NAME CMD...: runs CMD, its stdout to $R/NAME.txt (with the command and
# the wall time), stderr to $R/NAME.log.
run() {
  local name=$1; shift
  echo "[qwen_eval] $name: $*" >&2
  local t0=$SECONDS
  {
    echo "\$ $*"
    "$@"
    echo "# wall time: $((SECONDS - t0)) s on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
  } >"$R/$name.txt.part" 2>"$R/$name.log"
  mv "$R/$name.txt.part" "$R/$name.txt"
}

step_ppl512_f16() {
  run ppl512-f16 build/tq-eval --model "$M15" --text "$TEXT" --ctx 512
}
step_ppl512_f16_int8() {
  run ppl512-f16-int8 build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --matmul int8
}
step_ppl512() {
  # shellcheck disable=SC2086
  run ppl512 build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --format $FORMATS512
}
step_ppl512_skip() {
  # shellcheck disable=SC2086
  run ppl512-skip build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --skip-layers first2,last2 --format $FORMATS512
}
step_ppl512_all() {
  # shellcheck disable=SC2086
  run ppl512-all build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks 34 --format $FORMATS512
}
step_ppl512_skip_all() {
  # shellcheck disable=SC2086
  run ppl512-skip-all build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks 34 --skip-layers first2,last2 --format $FORMATS512
}
step_ppl512_05() {
  # shellcheck disable=SC2086
  run ppl512-0.5b build/tq-eval --model "$M05" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --format $FORMATS512
  # shellcheck disable=SC2086
  run ppl512-0.5b-skip build/tq-eval --model "$M05" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --skip-layers first2,last2 --format $FORMATS512
}
step_ppl512_kivi() {
  run ppl512-kivi build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --format kivi4 kivi2
}
step_ppl512_ck() {
  run ppl512-ck build/tq-eval --model "$M15" --text "$TEXT" --ctx 512 --chunks "$CHUNKS" --center-keys --format q8_0 q4_0 \
    turboquant_4bit_nc turboquant_k3v4_nc turboquant_3bit_nc turbo4 turbo3
}
step_dump() {
  run dump build/tq-dump --model "$M15" --text "$TEXT" --max-tokens 2048 --out "$OUT/qwen15_2048.h5"
}
step_ablate() {
  run ablate build/tq-ablate --dump "$OUT/qwen15_2048.h5" --format all --study all --out "$R/ablation"
}
step_long() {
  # 8192 tokens at every n_ctx: 16 / 4 / 1 chunks (one 8192-token forward of
  # the 1.5B model is about 3 minutes on 2 cores; 18 of them per step).
  local ctx chunks
  for ctx in 512 2048 8192; do
    chunks=$((8192 / ctx))
    # shellcheck disable=SC2086
    run "long-$ctx" build/tq-eval --model "$M15" --text "$LONG" --ctx "$ctx" --chunks "$chunks" \
      --skip-layers first2,last2 --format $FORMATS_LONG
  done
}
step_long16k() {
  # shellcheck disable=SC2086
  run long-16384 build/tq-eval --model "$M15" --text "$LONG" --ctx 16384 --chunks 1 \
    --skip-layers first2,last2 --matmul int8 --format $FORMATS_LONG
}
step_long8k_int8() {
  run long-8192-int8 build/tq-eval --model "$M15" --text "$LONG" --ctx 8192 --chunks 1 \
    --skip-layers first2,last2 --matmul int8 --format q8_0 turboquant_4bit_nc
  run long-8192x2-int8 build/tq-eval --model "$M15" --text "$LONG" --ctx 8192 --chunks 2 \
    --skip-layers first2,last2 --matmul int8 --format turboquant_4bit_nc
}
step_passkey() {
  # shellcheck disable=SC2086
  run passkey build/tq-eval --task passkey --model "$M15" --text "$LONG" --lengths 1024,4096 \
    --depths 0,0.5,1 --trials 1 --seed 1 --skip-layers first2,last2 \
    --format q8_0 turbo4 turboquant_4bit_nc turboquant_k3v4_nc
}

step_passkey_grid() {
  run passkey-grid build/tq-eval --task passkey --model "$M15" --text "$LONG" --lengths 2048,8192 \
    --depths 0,0.25,0.5,0.75,1 --trials 1 --seed 1 --skip-layers first2,last2 \
    --format q8_0 turbo4 turbo3 turboquant_k3v4_nc
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(ppl512-f16 ppl512-f16-int8 ppl512 ppl512-skip ppl512-all ppl512-skip-all ppl512-0.5b dump ablate passkey passkey-grid long long16k long8k-int8 ppl512-kivi ppl512-ck)
for s in "${steps[@]}"; do
  case "$s" in
    ppl512-f16) step_ppl512_f16 ;;
    ppl512-f16-int8) step_ppl512_f16_int8 ;;
    ppl512) step_ppl512 ;;
    ppl512-skip) step_ppl512_skip ;;
    ppl512-all) step_ppl512_all ;;
    ppl512-skip-all) step_ppl512_skip_all ;;
    ppl512-0.5b) step_ppl512_05 ;;
    ppl512-kivi) step_ppl512_kivi ;;
    ppl512-ck) step_ppl512_ck ;;
    dump) step_dump ;;
    ablate) step_ablate ;;
    long) step_long ;;
    long16k) step_long16k ;;
    long8k-int8) step_long8k_int8 ;;
    passkey) step_passkey ;;
    passkey-grid) step_passkey_grid ;;
    *) echo "qwen_eval.sh: unknown step '$s'" >&2; exit 2 ;;
  esac
done
