# tqkit_torch's path rules (python/tqkit_torch/paths.py, no torch needed) against the rows measured with the
# current kernels, without a GPU:
# - takes_dense against the fused-vs-dense rows of python/examples/bench_multi_query.py
#   (experiments/results/kernels/multi_query_crossover.jsonl): wherever the two paths differ by more than 10%,
#   the rule picks the faster one. The rule of the older kernels (48 queries at G >= 4, 72 below) must fail
#   those rows, so the check can tell a stale rule.
# - takes_rows against python/examples/bench_varlen.py's eager fused_ms and rows_ms (the op's fused launch and
#   decode_rows, each with its path forced; experiments/results/kernels/varlen_paths.jsonl, G 1-16): for each
#   batch decode() runs as one (no chunk on the dense path) whose two times differ by more than 10%, the rule
#   picks the faster one; with the rows path switched off (no group size takes it) the check must fail.
source "$(dirname "$0")/lib.bash"

cat > "$TMP/check.py" <<'PY'
# check.py PATHS_PY dense ROWS_JSONL [LARGE_G_Q_LEN SMALL_G_Q_LEN LARGE_G] | rows VARLEN_JSONL [ROWS_GROUPS]
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("paths", sys.argv[1])
rule = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rule)


def dense(path, overrides):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "fused_ms" in r and "dense_ms" in r]
    if len(rows) < 20:
        sys.exit(f"only {len(rows)} measured rows")
    if overrides:  # the same rule with other thresholds: large-G q_len, small-G q_len, the G between them
        rule.DENSE_MIN_Q_LEN, rule.DENSE_MIN_Q_LEN_SMALL_G, rule.DENSE_LARGE_G = map(int, overrides)
    wrong = [r for r in rows if abs(r["dense_ms"] / r["fused_ms"] - 1) > 0.1 and
             rule.takes_dense(r["q_len"], r["heads"], r["kv_heads"]) != (r["dense_ms"] < r["fused_ms"])]
    for r in wrong:
        print(f"{r['heads']}/{r['kv_heads']} q_len {r['q_len']}: fused {r['fused_ms']:.2f} ms, "
              f"dense {r['dense_ms']:.2f} ms")
    return len(rows), len(wrong)


def rows(path, overrides):
    if overrides:  # the group sizes that take rows (comma-separated; empty: none)
        rule.ROWS_GROUPS = tuple(int(g) for g in overrides[0].split(",") if g)
    measured = wrong = 0
    for r in (json.loads(line) for line in open(path) if line.strip()):
        counts = rule.count_pattern(r["counts"])
        heads, kvh = r["heads"], r["kv_heads"]
        assert len(counts) == r["batch"], r
        if "fused_ms" not in r or "dense" in rule.varlen_path(counts, [r["ctx"]] * len(counts), heads, kvh):
            continue  # decode() does not run this batch as one launch
        measured += 1
        fused_ms, rows_ms = r["fused_ms"], r["rows_ms"]
        if abs(rows_ms / fused_ms - 1) > 0.1 and rule.takes_rows(counts, heads, kvh) != (rows_ms < fused_ms):
            wrong += 1
            print(f"{r['format']} {heads}/{kvh} counts {r['counts']}: fused {fused_ms:.4f} ms, rows {rows_ms:.4f} ms")
    if measured < 20:
        sys.exit(f"only {measured} measured rows")
    return measured, wrong


n, wrong = {"dense": dense, "rows": rows}[sys.argv[2]](sys.argv[3], sys.argv[4:])
print(f"{n} rows, {wrong} on the slower path")
sys.exit(1 if wrong else 0)
PY

RULE="$SRC/python/tqkit_torch/paths.py"
ROWS="$SRC/experiments/results/kernels/multi_query_crossover.jsonl"
VARLEN="$SRC/experiments/results/kernels/varlen_paths.jsonl"
run python3 "$TMP/check.py" "$RULE" dense "$ROWS"; expect_rc 0; expect_out ", 0 on the slower path"
run python3 "$TMP/check.py" "$RULE" dense "$ROWS" 48 72 4; expect_rc 1; expect_out "32/8 q_len 48"
run python3 "$TMP/check.py" "$RULE" rows "$VARLEN"; expect_rc 0; expect_out ", 0 on the slower path"
run python3 "$TMP/check.py" "$RULE" rows "$VARLEN" ""; expect_rc 1; expect_out "128/8 counts 16,1x31"
finish
