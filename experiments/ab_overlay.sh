#!/usr/bin/env bash
# Makes the overlay experiments/ab/NAME/ that experiments/ab_kernels.sh (and ab_torch_op.sh) builds as variant
# NAME: the files under kernels/, apps/, tests/gpu/ and python/ that differ between REF and the working tree, as they
# are at REF (files the working tree added are left out: the overlay is copied over the tree).
# With --tree, NAME is REF's whole source tree instead (CMakeLists.txt, apps, lib, kernels, tests,
# data, the experiments scripts; marked by a file .ab_tree), built alone rather than over the
# working tree: for a REF whose build differs from the working tree's (other files, globbed sources).
#
#   bash experiments/ab_overlay.sh [--tree] REF [NAME]      e.g. ab_overlay.sh main A
#
# Run it on the development machine (the GPU machine gets the working tree without .git); the
# overlay travels as untracked files. Remove it afterwards (rm -rf experiments/ab).
set -euo pipefail
cd "$(dirname "$0")/.."
tree=0
[ "${1:-}" = --tree ] && { tree=1; shift; }
ref=${1:?usage: ab_overlay.sh REF [NAME]}
name=${2:-A}
git rev-parse --verify -q "$ref^{commit}" >/dev/null || { echo "ab_overlay.sh: no commit '$ref'" >&2; exit 2; }
dir=experiments/ab/$name
rm -rf "$dir"
if [ $tree = 1 ]; then
  mkdir -p "$dir"
  paths=$(git ls-tree --name-only "$ref" CMakeLists.txt cmake apps lib kernels tests data)
  git archive "$ref" $paths $(git ls-tree --name-only "$ref" experiments/ | grep -E '\.(sh|py)$') | tar -x -C "$dir"
  git rev-parse "$ref" > "$dir/.ab_tree"
  echo "ab_overlay.sh: the tree of $ref in $dir ($(du -sh "$dir" | cut -f1))"
  exit 0
fi
n=0
while IFS= read -r f; do
  git cat-file -e "$ref:$f" 2>/dev/null || continue  # added since REF
  mkdir -p "$dir/$(dirname "$f")"
  git show "$ref:$f" > "$dir/$f"
  n=$((n + 1))
done < <(git diff --name-only "$ref" -- kernels apps tests/gpu python)
echo "ab_overlay.sh: $n file(s) of $ref in $dir"
