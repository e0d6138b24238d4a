# The README's headline and kernels.md's current-results tables are what experiments/make_tables.py
# writes from the committed result files (a hand edit, or a result file changed without
# regenerating them, fails); and the generator refuses a file without its markers.
source "$(dirname "$0")/lib.bash"

run python3 "$SRC/experiments/make_tables.py" --check; expect_rc 0
# a stale table is detected: a copy of the tree whose README headline differs from the results
mkdir -p "$TMP/t/experiments"
cp -r "$SRC/experiments/make_tables.py" "$SRC/experiments/results" "$TMP/t/experiments/"
sed 's/| `turboquant_4bit_nc` | 4.1875 |/| `turboquant_4bit_nc` | 4.5 |/' "$SRC/README.md" > "$TMP/t/README.md"
grep -q '| `turboquant_4bit_nc` | 4.5 |' "$TMP/t/README.md" || fail "the test's edit did not apply"
run python3 "$TMP/t/experiments/make_tables.py" --check; expect_rc 1; expect_out "'headline' is out of date"
grep -v "BEGIN GENERATED: headline" "$SRC/README.md" > "$TMP/t/README.md"
run python3 "$TMP/t/experiments/make_tables.py" --check; expect_rc 1; expect_err "markers for 'headline' not found"
finish
