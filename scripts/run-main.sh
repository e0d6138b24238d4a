#!/usr/bin/env bash
# The main job: install what is missing, build, then on the default model and
# text — dump a model's K/V for 2048 tokens of the Jargon File (Debian package
# jargon-text) and run tq-ablate over every registered KV format: prints the
# summary table, writes out/ablation/{metrics.csv,summary.json,report.md,*.png}.
#
# The model is $TQ_MODEL, a data/fetch_models.sh key: smollm2 (default,
# head_dim 64, about 5 minutes on 2 cores), gemma3 (256), qwen0.5b (64) or
# qwen1.5b (128, the head size the formats target; about 25 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${TQ_MODEL:-smollm2}
case "$MODEL" in
  smollm2|gemma3|qwen0.5b|qwen1.5b) ;;
  *) echo "run-main.sh: TQ_MODEL '$MODEL' is not one of smollm2, gemma3, qwen0.5b, qwen1.5b" >&2; exit 2 ;;
esac
TQ_MODELS=${TQ_MODELS:-all} scripts/setup.sh
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
OUT=${TQ_OUT:-out}
mkdir -p "$OUT"
build/tq-dump --model "$MODEL" --text "$CACHE/text/jargon-part1.txt" --max-tokens 2048 --out "$OUT/${MODEL}_kv.h5"
build/tq-ablate --dump "$OUT/${MODEL}_kv.h5" --format all --out "$OUT/ablation"
