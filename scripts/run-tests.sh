#!/usr/bin/env bash
# Installs what is missing, builds (normal and ASan+UBSan), runs every test.
# The sanitizer pass runs the unit tests; the normal pass runs everything and
# its ctest summary closes the output.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --asan
echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L unit -j "$(nproc)" --output-on-failure --timeout 900 | tail -n 4
echo "== all tests (normal build) =="
ctest --test-dir build -j "$(nproc)" --output-on-failure --timeout 1800
