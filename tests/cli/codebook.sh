# tq-codebook: outputs, JSON fields, exported header compiles, bad input → exit 2.
source "$(dirname "$0")/lib.bash"
T="$BUILD/tq-codebook"

run "$T" solve --dist gauss --d 128 --bits 4 --json; expect_rc 0; expect_json
python3 - "$TMP/out" <<'PY' || fail "solve --json fields/values"
import json, sys, math
j = json.load(open(sys.argv[1]))
for k in ("centroids", "midpoints", "distortion", "entropy_bits", "iterations"):
    assert k in j, k
assert len(j["centroids"]) == 16 and len(j["midpoints"]) == 15
assert abs(j["distortion"] - 0.009500) < 1e-4
assert all(a < b for a, b in zip(j["centroids"], j["centroids"][1:]))
PY
run "$T" solve --dist sphere --d 16 --bits 3; expect_rc 0; expect_out "codebook sphere d=16 bits=3"
run "$T" solve --dist uniform --d 64 --bits 2; expect_rc 0
run "$T" solve --dist vllm --d 128 --bits 4; expect_rc 0; expect_out "200 iterations"
run "$T" compare --d 128 --bits 2 --table 0.04,0.133 --json; expect_rc 0; expect_json
python3 - "$TMP/out" <<'PY' || fail "compare --json fields"
import json, sys
j = json.load(open(sys.argv[1]))
assert {"optimal_distortion", "ratio", "distortion"} <= set(j)
assert 1.0 <= j["ratio"] < 1.001
PY
run "$T" table --d 128; expect_rc 0; expect_out "0.009501"; expect_out "0.010628"
run "$T" export --d 128 --bits 3 --format csv; expect_rc 0; expect_out "index,centroid,lower,upper"
run "$T" export --d 128 --bits 3 --format cpp; expect_rc 0
cp "$TMP/out" "$TMP/cb.h"
printf '#include "cb.h"\nstatic_assert(sizeof(tq::codebooks::gauss_d128_b3_centroids) == 8 * sizeof(float));\nint main() { return tq::codebooks::gauss_d128_b3_midpoints[3] == 0.0f ? 0 : 1; }\n' > "$TMP/use.cpp"
g++ -std=c++17 -I"$TMP" "$TMP/use.cpp" -o "$TMP/use" && "$TMP/use" || fail "exported header does not compile or is wrong"

# Bad input: one message on stderr, exit 2, nothing on stdout.
for args in "solve --bits 0" "solve --bits 9" "solve --d 1" "solve --dist laplace" \
            "compare --bits 2 --table 0.2,0.1" "compare --bits 2 --table 0.1,nan" \
            "compare --bits 2 --table 0.1,0.2,0.3" "compare --bits 2 --table 0.1,x" \
            "compare --bits 2 --table 0.1,0.2 --dist cauchy" "export --format xml" "solve --bogus"; do
  run "$T" $args
  expect_rc 2; expect_empty_out
  [ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "'$args': expected one line on stderr, got: $(cat "$TMP/err")"
done
run "$T" solve --dist empirical:/nonexistent/file; expect_rc 2; expect_err "/nonexistent/file"
finish
