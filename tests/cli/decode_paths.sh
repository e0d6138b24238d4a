# tqkit_torch.takes_dense (python/tqkit_torch/paths.py, no torch needed) against the fused-vs-dense rows
# that python/examples/bench_multi_query.py measured with the current kernels
# (experiments/results/kernels/multi_query_crossover.jsonl): wherever the two paths differ by more than 10%,
# the rule picks the faster one. The rule of the older kernels (48 queries at G >= 4, 72 below) must fail
# those rows, so the check can tell a stale rule.
source "$(dirname "$0")/lib.bash"

cat > "$TMP/check.py" <<'PY'
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("paths", sys.argv[1])
rule = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rule)
rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
rows = [r for r in rows if "fused_ms" in r and "dense_ms" in r]
if len(rows) < 20:
    sys.exit(f"only {len(rows)} measured rows")
if len(sys.argv) > 3:  # the same rule with other thresholds: large-G q_len, small-G q_len, the G between them
    rule.DENSE_MIN_Q_LEN, rule.DENSE_MIN_Q_LEN_SMALL_G, rule.DENSE_LARGE_G = map(int, sys.argv[3:6])
wrong = [r for r in rows if abs(r["dense_ms"] / r["fused_ms"] - 1) > 0.1 and
         rule.takes_dense(r["q_len"], r["heads"], r["kv_heads"]) != (r["dense_ms"] < r["fused_ms"])]
for r in wrong:
    print(f"{r['heads']}/{r['kv_heads']} q_len {r['q_len']}: fused {r['fused_ms']:.2f} ms, dense {r['dense_ms']:.2f} ms")
print(f"{len(rows)} rows, {len(wrong)} on the slower path")
sys.exit(1 if wrong else 0)
PY
RULE="$SRC/python/tqkit_torch/paths.py"
ROWS="$SRC/experiments/results/kernels/multi_query_crossover.jsonl"
run python3 "$TMP/check.py" "$RULE" "$ROWS"; expect_rc 0; expect_out ", 0 on the slower path"
run python3 "$TMP/check.py" "$RULE" "$ROWS" 48 72 4; expect_rc 1; expect_out "32/8 q_len 48"
finish
