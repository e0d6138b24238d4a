# tq-eval: text and JSON reports on a short run of the corpus (f16 reference,
# f32, quantized formats and specs); bad input → exit 2, one message.
source "$(dirname "$0")/lib.bash"
T="$BUILD/tq-eval"
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=$CACHE/text/jargon-part1.txt
[ -f "$MODEL" ] || { echo "FAIL: $MODEL is missing: run data/fetch_models.sh" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "FAIL: $TEXT is missing: run data/fetch_text.sh" >&2; exit 1; }

run "$T" --model "$MODEL" --text "$TEXT" --ctx 128 --chunks 2 --format f32 --json
expect_rc 0; expect_json
python3 - "$TMP/out" <<'PY' || fail "tq-eval --json fields"
import json, math, sys
j = json.load(open(sys.argv[1]))
assert isinstance(j, list) and len(j) == 2
base, f32 = j
assert base["arch"] == "llama" and base["n_ctx"] == 128 and base["reference"] == "f16"
for r in j:
    for k in ("format", "ppl", "ppl_err", "kld_mean", "kld_err", "same_top", "dp_rms"):
        assert k in r, k
assert base["is_base"] and not f32["is_base"] and f32["format"] == "f32"
assert base["n_tokens"] == 2 * 63 and base["n_chunks"] == 2
assert 2 < base["ppl"] < 200 and math.isfinite(base["ppl_err"])
assert abs(f32["ppl"] / base["ppl"] - 1) < 0.01
assert 0 <= f32["kld_mean"] < 1e-3 and f32["same_top"] > 0.97
for k in ("max", "99.9%", "99%", "95%", "90%", "median", "10%", "5%", "1%", "0.1%", "min"):
    assert k in f32["kld"] and k in f32["dp"], k
for k in ("delta_ppl", "delta_ppl_err", "dp_rms", "dp_rms_err", "same_top_err", "kld_err"):
    assert k in f32, k
PY
cp "$TMP/out" "$TMP/f32.json"
# int8 weight products: the same evaluation within a fraction of a percent of the float32 forward's.
run "$T" --model "$MODEL" --text "$TEXT" --ctx 128 --chunks 2 --matmul int8 --json
expect_rc 0; expect_json
python3 - "$TMP/f32.json" "$TMP/out" <<'PY' || fail "tq-eval --matmul int8"
import json, sys
f32, i8 = json.load(open(sys.argv[1]))[0], json.load(open(sys.argv[2]))[0]
assert f32["matmul"] == "f32" and i8["matmul"] == "int8"
assert i8["ppl"] != f32["ppl"] and abs(i8["ppl"] / f32["ppl"] - 1) < 0.01, (i8["ppl"], f32["ppl"])
PY
run "$T" --model "$MODEL" --text "$TEXT" --ctx 128 --chunks 2 --format f16 f32 --skip-layers first2,last2
expect_rc 0; expect_out "PPL"; expect_out "f32"; expect_out "(reference)"; expect_out "KLD max"

for args in "--format q9_9" "--ctx 4" "--chunks 0" "--matmul int4" "--skip-layers 40" "--skip-layers x" "--text /nonexistent/t.txt" \
            "--text $SRC/tests/data/small_text.txt"; do
  run "$T" --model "$MODEL" --text "$TEXT" --ctx 128 --chunks 2 $args
  expect_rc 2; expect_empty_out
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "'$args': expected one line on stderr, got: $(cat "$TMP/err")"
done
run "$T" --model "$MODEL" --text "$TEXT" --format q9_9
expect_err "unknown format 'q9_9'"

# Quantized caches: a preset and a research spec (with a comma) both run; more
# bits, less divergence.
run "$T" --model "$MODEL" --text "$TEXT" --ctx 128 --chunks 2 --format q8_0 --format turboquant_3bit_nc --format "k=prod3,v=u4" --json
expect_rc 0; expect_json
python3 - "$TMP/out" <<'PY' || fail "tq-eval quantized formats"
import json, sys
base, q8, tq3, prod = json.load(open(sys.argv[1]))
assert [r["format"] for r in (q8, tq3, prod)] == ["q8_0", "turboquant_3bit_nc", "k=prod3,v=u4"]
assert 0 < q8["kld_mean"] < tq3["kld_mean"], (q8["kld_mean"], tq3["kld_mean"])
assert prod["kld_mean"] > 0 and prod["same_top"] < 1
PY
run "$T" --list-formats --head-dim 64 --json
expect_rc 0; expect_json
python3 - "$TMP/out" <<'PY' || fail "tq-eval --list-formats"
import json, sys
rows = {r["name"]: r for r in json.load(open(sys.argv[1]))}
assert rows["turboquant_4bit_nc"]["slot_bytes"] == 70 and rows["turboquant_k8v4"]["slot_bytes"] == 100
for r in rows.values():
    assert {"key_bytes", "value_bytes", "slot_bytes", "bits_per_value"} <= set(r), r
PY
run "$T" --model "$MODEL" --text "$SRC/tests/data/small_text.txt"
expect_err "needs at least 1024"

# A GGUF of an architecture the forward does not implement: exit 2, the
# architecture and the supported list named, nothing on stdout.
python3 - "$TMP/bert.gguf" <<'PY'
import struct, sys
key, val = b"general.architecture", b"bert"
body = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, len(val)) + val
open(sys.argv[1], "wb").write(body.ljust(64, b"\0"))
PY
run "$T" --model "$TMP/bert.gguf" --text "$TEXT" --format f32
expect_rc 2; expect_empty_out
expect_err "architecture 'bert' is not supported (supported: llama, gemma3, qwen2)"

# Passkey retrieval: the JSON names every trial; the same seed gives the same
# trials and outcomes; f16 comes first.
run "$T" --task passkey --model smollm2 --lengths 256,512 --depths 0,1 --seed 7 --format q8_0 --json
expect_rc 0; expect_json
cp "$TMP/out" "$TMP/pk1.json"
python3 - "$TMP/out" <<'PY' || fail "tq-eval --task passkey --json"
import json, sys
f16, q8 = json.load(open(sys.argv[1]))
assert f16["format"] == "f16" and q8["format"] == "q8_0"
assert f16["total"] == 4 and len(f16["trials"]) == 4
for t in f16["trials"]:
    assert len(t["key"]) == 5 and t["key"].isdigit() and t["length"] in (256, 512) and t["depth"] in (0, 1)
    assert t["answer_logprob"] <= 0 and isinstance(t["retrieved"], bool)
    assert t["retrieved"] == (t["greedy"] == " " + t["key"]) or not t["retrieved"]
assert [t["key"] for t in f16["trials"]] == [t["key"] for t in q8["trials"]]
assert f16["trials"][0]["needle_token"] < f16["trials"][1]["needle_token"]  # depth 0 before depth 1
PY
run "$T" --task passkey --model smollm2 --lengths 256,512 --depths 0,1 --seed 7 --format q8_0 --json
cmp -s "$TMP/out" "$TMP/pk1.json" || fail "passkey: the same seed gave different output"
run "$T" --task passkey --model smollm2 --lengths 256 --depths 0.5 --format q8_0
expect_rc 0; expect_out "mean log p(key)"; expect_out "q8_0"
for args in "--depths 1.5" "--lengths 100" "--trials 0" "--task nope" "--lengths 300000"; do
  run "$T" --task passkey --model smollm2 --format q8_0 $args
  expect_rc 2; expect_empty_out
done
finish
