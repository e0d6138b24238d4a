# tq-ablate on a small real dump: outputs and their shapes, studies, plots;
# a dump that does not match the schema or a bad format → exit 2 before work.
source "$(dirname "$0")/lib.bash"
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || { echo "FAIL: $MODEL is missing: run data/fetch_models.sh" >&2; exit 1; }
A="$BUILD/tq-ablate"

run "$BUILD/tq-dump" --model "$MODEL" --text "$SRC/tests/data/small_text.txt" --max-tokens 96 --layers 0,29 --out "$TMP/kv.h5"
expect_rc 0

run "$A" --dump "$TMP/kv.h5" --format turboquant_4bit_nc --format q8_0 --format "k=mse3,v=u4" --study qjl --study codebook \
  --out "$TMP/abl"
expect_rc 0; expect_out "turboquant_4bit_nc"; expect_out "k=prod3"
for f in metrics.csv summary.json report.md; do [ -s "$TMP/abl/$f" ] || fail "$f missing"; done
ls "$TMP/abl"/empirical_* >/dev/null 2>&1 && fail "empirical sample file left behind"
python3 - "$TMP/abl" <<'PY' || fail "tq-ablate outputs"
import csv, json, os, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "metrics.csv"))))
s = json.load(open(os.path.join(d, "summary.json")))
# 3 formats + 6 qjl + 6 codebook, 2 layers, 3 KV heads each.
assert len(s["formats"]) == 15, len(s["formats"])
assert len(rows) == 15 * 2 * 3, len(rows)
assert {r["layer"] for r in rows} == {"0", "29"}
for r in rows:
    for k in ("key_nmse", "value_nmse", "ip_bias", "ip_var", "kl", "top1", "topk", "out_rel_err"):
        v = float(r[k]); assert v == v, (k, r)  # no NaN
    assert 0 <= float(r["top1"]) <= 1 and float(r["kl"]) >= 0
by = {(f["format"], f["study"]): f for f in s["formats"]}
q8, t4 = by[("q8_0", "presets")], by[("turboquant_4bit_nc", "presets")]
assert q8["overall"]["kl"] < t4["overall"]["kl"]
assert t4["slot_bytes"] == 70 and t4["bits_per_value"] == 4.375
# QJL study rows: both estimators present with sane slopes (the unbiasedness
# itself is tested over many seeds in tests/unit/test_qjl.cpp, not on 96 tokens).
for b in (2, 3, 4):
    for est in ("mse", "prod"):
        assert 0.5 < by[(f"k={est}{b}", "qjl")]["overall"]["ip_slope"] < 1.5, (est, b)
assert all(f["eval_from"] == 48 for f in s["formats"] if f["study"] == "codebook")
md = open(os.path.join(d, "report.md")).read()
assert "tq-ablate report" in md and "### qjl" in md and "### codebook" in md
PY
python3 -c "import matplotlib" 2>/dev/null && { [ -f "$TMP/abl/error_vs_bits.png" ] && [ -f "$TMP/abl/qjl_vs_mse.png" ] || fail "plots missing"; }

run "$A" --list-formats --head-dim 256 --json
expect_rc 0; expect_json

# The plot script: $TQ_PLOT_SCRIPT first; a missing one means no plots, one note, exit 0.
TQ_PLOT_SCRIPT=/nonexistent/plot_ablation.py run "$A" --dump "$TMP/kv.h5" --format q8_0 --out "$TMP/abl2"
expect_rc 0; expect_err "plots skipped"; expect_out "(no plots)"

# --verbose: the same message, then where it was raised.
run "$A" --dump "$TMP/kv.h5" --format k=mse9 --out "$TMP/bad_out" --verbose
expect_rc 2; expect_err "^tq-ablate: error: format 'k=mse9'"; expect_err "^tq-ablate: error raised at .*registry.cpp:[0-9]"
[ "$(wc -l <"$TMP/err")" -eq 2 ] || fail "--verbose: expected two lines on stderr, got: $(cat "$TMP/err")"
rm -rf "$TMP/bad_out"

# Bad input: one message, exit 2, nothing written.
python3 - "$TMP/bad.h5" "$TMP/kv.h5" "$TMP/nan.h5" <<'PY' 2>/dev/null && HAVE_H5PY=1 || HAVE_H5PY=0
import shutil, sys, h5py
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["schema"] = "tqkit-kvdump/1"  # everything else missing
shutil.copy(sys.argv[2], sys.argv[3])
with h5py.File(sys.argv[3], "r+") as f:  # a valid schema with one NaN key value (found only when the layer is read)
    k = f["layer_029/k"][...]
    k[3, 1, 5] = float("nan")
    f["layer_029/k"][...] = k
PY
printf 'not an hdf5 file' > "$TMP/junk.h5"
cases=("--dump $TMP/junk.h5" "--dump $TMP/kv.h5 --format q9_9" "--dump $TMP/kv.h5 --format k=mse9"
       "--dump $TMP/kv.h5 --layers 5" "--dump $TMP/kv.h5 --study nope" "--dump /nonexistent.h5")
[ "$HAVE_H5PY" = 1 ] && cases+=("--dump $TMP/bad.h5" "--dump $TMP/nan.h5")
for args in "${cases[@]}"; do
  run "$A" $args --out "$TMP/bad_out"
  expect_rc 2; expect_empty_out
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "'$args': expected one line on stderr, got: $(cat "$TMP/err")"
  [ -e "$TMP/bad_out" ] && fail "'$args': output directory created before the error"
done
finish
