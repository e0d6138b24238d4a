#!/usr/bin/env bash
# The main job: install what is missing, build, then on the default model and
# text — dump SmolLM2-135M's K/V for 2048 tokens of the Jargon File (Debian
# package jargon-text) and run tq-ablate over every registered KV format:
# prints the summary table, writes out/ablation/{metrics.csv,summary.json,report.md,*.png}.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
OUT=${TQ_OUT:-out}
mkdir -p "$OUT"
build/tq-dump --model "$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf" --text "$CACHE/text/jargon-part1.txt" \
  --max-tokens 2048 --out "$OUT/smollm2_kv.h5"
build/tq-ablate --dump "$OUT/smollm2_kv.h5" --format all --out "$OUT/ablation"
