# tq-dump: schema, shapes and values of a SmolLM2 dump (h5dump and, when
# importable, h5py + numpy, including a RoPE check on layer-0 keys), layer
# selection, dtypes; bad input → exit 2, one message, no output file left.
source "$(dirname "$0")/lib.bash"
T="$BUILD/tq-dump"
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
TEXT=$SRC/tests/data/small_text.txt
if [ ! -f "$MODEL" ]; then
  echo "FAIL: $MODEL is missing: run data/fetch_models.sh" >&2
  exit 1
fi

run "$T" --model "$MODEL" --text "$TEXT" --max-tokens 64 --out "$TMP/kv.h5"
expect_rc 0; expect_out "64 tokens, 30 of 30 layers, f16"
[ -f "$TMP/kv.h5" ] || fail "kv.h5 was not written"
ls "$TMP"/kv.h5.tmp.* >/dev/null 2>&1 && fail "temporary file left behind"

h5dump -H "$TMP/kv.h5" >"$TMP/h5" 2>&1 || fail "h5dump cannot read kv.h5"
for name in schema model arch source_file source_sha256 n_layers n_heads n_kv_heads head_dim n_tokens created_by \
            rope_theta sliding_window attn_scale; do
  grep -q "ATTRIBUTE \"$name\"" "$TMP/h5" || fail "h5dump: attribute $name missing"
done
grep -q 'GROUP "layer_029"' "$TMP/h5" || fail "h5dump: layer_029 missing"
grep -q 'DATASPACE  SIMPLE { ( 64, 9, 64 ) / ( 64, 9, 64 ) }' "$TMP/h5" || fail "h5dump: q shape"
grep -q 'DATASPACE  SIMPLE { ( 64, 3, 64 ) / ( 64, 3, 64 ) }' "$TMP/h5" || fail "h5dump: k/v shape"
h5dump -a /schema "$TMP/kv.h5" | grep -q '"tqkit-kvdump/1"' || fail "h5dump: schema value"

# Layer subset and f32.
run "$T" --model "$MODEL" --text "$TEXT" --max-tokens 64 --layers 0,1,28-29 --dtype f32 --out "$TMP/kv32.h5"
expect_rc 0; expect_out "4 of 30 layers, f32"

if python3 -c "import h5py, numpy" 2>/dev/null; then
  python3 - "$TMP/kv.h5" "$TMP/kv32.h5" "$MODEL" <<'PY' || fail "h5py checks"
import hashlib, sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
g = h5py.File(sys.argv[2], "r")
a = f.attrs
assert a["schema"] == "tqkit-kvdump/1", a["schema"]
assert a["arch"] == "llama"
assert (a["n_layers"], a["n_heads"], a["n_kv_heads"], a["head_dim"], a["n_tokens"]) == (30, 9, 3, 64, 64)
assert a["source_file"] == sys.argv[3]
assert a["source_sha256"] == hashlib.sha256(open(sys.argv[3], "rb").read()).hexdigest()
assert "tq-dump" in a["created_by"]
tok = f["tokens"][()]
assert tok.dtype == np.int32 and tok.shape == (64,)
assert sorted(k for k in f.keys() if k.startswith("layer_")) == [f"layer_{i:03d}" for i in range(30)]
for i in range(30):
    L = f[f"layer_{i:03d}"]
    assert L["q"].shape == (64, 9, 64) and L["k"].shape == (64, 3, 64) and L["v"].shape == (64, 3, 64)
    assert L["q"].dtype == np.float16 and L["k"].dtype == np.float16
    assert L.attrs["rope_theta"] == 100000.0 and L.attrs["sliding_window"] == 0
    assert abs(L.attrs["attn_scale"] - 0.125) < 1e-12
    for n in "qkv":
        assert np.isfinite(L[n][()].astype(np.float32)).all(), (i, n)
q0, q1 = f["layer_000/q"][()], f["layer_001/q"][()]
assert np.abs(q0.astype(np.float32) - q1.astype(np.float32)).max() > 0.1, "Q of layers 0 and 1 do not differ"
# Subset dump: only the selected layers, float32, equal to the f16 dump after rounding.
assert sorted(k for k in g.keys() if k.startswith("layer_")) == ["layer_000", "layer_001", "layer_028", "layer_029"]
for l in ("layer_000", "layer_029"):
    for n in "qkv":
        x32 = g[l][n][()]
        assert x32.dtype == np.float32
        assert np.array_equal(x32.astype(np.float16), f[l][n][()]), (l, n)
# Independent RoPE check: at layer 0, K before RoPE depends only on the token,
# so two positions p < r holding the same token must satisfy
# K_r = R((r - p)·θ_i) K_p on adjacent pairs (2i, 2i+1), θ_i = 1e5^(-2i/64),
# and V must be identical.
k = g["layer_000/k"][()].astype(np.float64)
v = g["layer_000/v"][()]
pairs = [(p, r) for p in range(64) for r in range(p + 1, 64) if tok[p] == tok[r]]
assert pairs, "no repeated token in the first 64"
theta = 1e5 ** (-np.arange(32) * 2.0 / 64)
for p, r in pairs:
    assert np.array_equal(v[p], v[r]), (p, r)
    ang = (r - p) * theta
    x, y = k[p][:, 0::2], k[p][:, 1::2]
    xr = x * np.cos(ang) - y * np.sin(ang)
    yr = x * np.sin(ang) + y * np.cos(ang)
    err = max(np.abs(xr - k[r][:, 0::2]).max(), np.abs(yr - k[r][:, 1::2]).max())
    assert err < 1e-3 * (1 + np.abs(k[r]).max()), (p, r, err)
print(f"h5py checks passed ({len(pairs)} repeated-token pairs checked for RoPE)")
PY
else
  echo "note: h5py/numpy not importable; h5py checks skipped (scripts/setup.sh installs them)" >&2
fi

# Gemma 3: NEOX pairs (i, i + 128) with the local base 10000 on layer 0 (sliding).
GEMMA=$CACHE/models/gemma-3-270m-q4_k_m.gguf
if [ -z "${TQ_NO_GEMMA:-}" ]; then
  run "$T" --model "$GEMMA" --text "$TEXT" --max-tokens 64 --layers 0,5 --dtype f32 --out "$TMP/gemma.h5"
  expect_rc 0; expect_out "64 tokens, 2 of 18 layers, f32"
  if python3 -c "import h5py, numpy" 2>/dev/null; then
    python3 - "$TMP/gemma.h5" <<'PY' || fail "gemma h5py checks"
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["arch"] == "gemma3" and f.attrs["head_dim"] == 256 and f.attrs["n_kv_heads"] == 1
tok = f["tokens"][()]
assert tok[0] == 2, "Gemma dumps start with BOS"
L0, L5 = f["layer_000"], f["layer_005"]
assert L0.attrs["sliding_window"] == 512 and L0.attrs["rope_theta"] == 10000.0
assert L5.attrs["sliding_window"] == 0 and L5.attrs["rope_theta"] == 1e6
assert abs(L0.attrs["attn_scale"] - 1 / 16) < 1e-12
k = L0["k"][()].astype(np.float64)
theta = 1e4 ** (-np.arange(128) * 2.0 / 256)
pairs = [(p, r) for p in range(64) for r in range(p + 1, 64) if tok[p] == tok[r]]
assert pairs
for p, r in pairs:
    ang = (r - p) * theta
    x, y = k[p][:, :128], k[p][:, 128:]
    err = max(np.abs(x * np.cos(ang) - y * np.sin(ang) - k[r][:, :128]).max(),
              np.abs(x * np.sin(ang) + y * np.cos(ang) - k[r][:, 128:]).max())
    assert err < 1e-3 * (1 + np.abs(k[r]).max()), (p, r, err)
print(f"gemma h5py checks passed ({len(pairs)} pairs)")
PY
  fi
fi

# Bad input: exit 2, one line on stderr, no output file.
printf 'GGUF\003\000\000\000garbage' >"$TMP/bad.gguf"
: >"$TMP/empty.txt"
check_bad() {
  local what=$1; shift
  rm -f "$TMP/bad.h5"
  run "$T" "$@"
  expect_rc 2
  [ "$(wc -l <"$TMP/err")" -eq 1 ] || fail "$what: expected one line on stderr, got: $(cat "$TMP/err")"
  [ -e "$TMP/bad.h5" ] && fail "$what: output file left behind"
  ls "$TMP"/bad.h5.tmp.* >/dev/null 2>&1 && fail "$what: temporary file left behind"
}
check_bad "missing model" --model "$TMP/none.gguf" --text "$TEXT" --out "$TMP/bad.h5"
expect_err "none.gguf"
check_bad "corrupt gguf" --model "$TMP/bad.gguf" --text "$TEXT" --out "$TMP/bad.h5"
expect_err "bad.gguf: byte"
check_bad "empty text" --model "$MODEL" --text "$TMP/empty.txt" --out "$TMP/bad.h5"
expect_err "empty"
check_bad "missing text" --model "$MODEL" --text "$TMP/none.txt" --out "$TMP/bad.h5"
check_bad "layer out of range" --model "$MODEL" --text "$TEXT" --layers 0,30 --out "$TMP/bad.h5"
expect_err "layer 30 is out of range"
check_bad "reversed range" --model "$MODEL" --text "$TEXT" --layers 5-3 --out "$TMP/bad.h5"
check_bad "bad layer syntax" --model "$MODEL" --text "$TEXT" --layers x --out "$TMP/bad.h5"
check_bad "bad dtype" --model "$MODEL" --text "$TEXT" --dtype bf16 --out "$TMP/bad.h5"
check_bad "bad max-tokens" --model "$MODEL" --text "$TEXT" --max-tokens 0 --out "$TMP/bad.h5"
check_bad "missing --out" --model "$MODEL" --text "$TEXT"
run "$T" --model "$MODEL" --text "$TEXT" --out /nonexistent/dir/out.h5
expect_rc 2; expect_err "/nonexistent/dir"
finish
