#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job on the default input.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/tq-codebook table --d 128
echo
build/tq-codebook solve --dist gauss --d 128 --bits 4
