#!/usr/bin/env bash
# Makes the overlay experiments/ab/NAME/ that experiments/ab_kernels.sh builds as variant NAME: the
# files under kernels/, apps/ and tests/gpu/ that differ between REF and the working tree, as they
# are at REF (files the working tree added are left out: the overlay is copied over the tree).
#
#   bash experiments/ab_overlay.sh REF [NAME]      e.g. ab_overlay.sh main A
#
# Run it on the development machine (the GPU machine gets the working tree without .git); the
# overlay travels as untracked files. Remove it afterwards (rm -rf experiments/ab).
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: ab_overlay.sh REF [NAME]}
name=${2:-A}
git rev-parse --verify -q "$ref^{commit}" >/dev/null || { echo "ab_overlay.sh: no commit '$ref'" >&2; exit 2; }
dir=experiments/ab/$name
rm -rf "$dir"
n=0
while IFS= read -r f; do
  git cat-file -e "$ref:$f" 2>/dev/null || continue  # added since REF
  mkdir -p "$dir/$(dirname "$f")"
  git show "$ref:$f" > "$dir/$f"
  n=$((n + 1))
done < <(git diff --name-only "$ref" -- kernels apps tests/gpu)
echo "ab_overlay.sh: $n file(s) of $ref in $dir"
