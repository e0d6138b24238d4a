# Helpers for CLI tests: run with `bash test.sh BUILD_DIR SOURCE_DIR`.
set -u
BUILD=$1
SRC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
# run CMD...: captures stdout/stderr/rc into $TMP/out, $TMP/err, $RC
run() { "$@" >"$TMP/out" 2>"$TMP/err"; RC=$?; }
expect_rc() { [ "$RC" -eq "$1" ] || fail "expected exit $1, got $RC: $(cat "$TMP/err")"; }
expect_out() { grep -q -- "$1" "$TMP/out" || fail "stdout lacks '$1': $(head -c 400 "$TMP/out")"; }
expect_err() { grep -q -- "$1" "$TMP/err" || fail "stderr lacks '$1': $(cat "$TMP/err")"; }
expect_empty_out() { [ ! -s "$TMP/out" ] || fail "stdout should be empty: $(head -c 200 "$TMP/out")"; }
expect_json() { python3 -c "import json,sys; json.load(open('$TMP/out'))" || fail "stdout is not JSON"; }
finish() { [ "$FAILS" -eq 0 ] && echo "all checks passed" && exit 0; echo "$FAILS check(s) failed" >&2; exit 1; }
