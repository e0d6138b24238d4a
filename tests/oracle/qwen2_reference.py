#!/usr/bin/env python3
"""Float64 reference ("oracle") for the Qwen2.5-Coder-0.5B-Instruct GGUF.

This script is a test-fixture generator. It is written independently of the
C++ model code in lib/src/model/ and uses only numpy, the `gguf` package (to
read and dequantize the file) and Hugging Face `tokenizers` (as an independent
tokenizer). It writes tests/data/qwen2_0.5b_reference.json, which the C++
model tests compare against.

Model facts (architecture `qwen2`; every value is read from the GGUF metadata,
printed, and checked against this list):
  * 24 layers, n_embd 896, 14 query heads, 2 KV heads (GQA: query head h uses
    KV head h // 7), head_dim = n_embd / n_head = 64 (the file has no
    key_length key), n_ff 4864, vocab 151936.
  * RoPE theta 1e6 (qwen2.rope.freq_base), NEOX / rotate-half layout: within a
    head the pair (x[i], x[i + d/2]), i < d/2, is rotated by pos * theta^(-2i/d).
  * RMS norm eps 1e-6 (qwen2.attention.layer_norm_rms_epsilon, stored as the
    float32 9.999999974752427e-07, which is what is used here).
  * Q, K and V have biases, added before RoPE. SwiGLU feed-forward.
  * output.weight is present, so the output projection is NOT tied to the
    token embedding.
  * A GGUF matrix with ne = [in, out] is `out` rows of `in` values; y = W @ x.

Per layer:
    a = rmsnorm(h) * attn_norm
    q, k, v = Wq a + bq, Wk a + bk, Wv a + bv ; q, k = rope(q), rope(k)
    h += Wo concat_heads(softmax_causal(q k^T / sqrt(head_dim)) v)
    f = rmsnorm(h) * ffn_norm
    h += Wdown (silu(Wgate f) * (Wup f))
logits = Wout (rmsnorm(h) * output_norm), with rmsnorm(x) = x / sqrt(mean(x^2) + eps).

All arithmetic after dequantization is float64 (the "float32" sensitivity run
excepted). The JSON holds: tokenizer ids for a few strings, top-5 / probe
logits at selected positions of two sequences, captured K/V vectors, and a
sensitivity table showing how far the logits move under deliberate mistakes.

Regenerate (from the repository root):
    python3 tests/oracle/qwen2_reference.py \
        --model PATH/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
        --out tests/data/qwen2_0.5b_reference.json
Requires: numpy, gguf, tokenizers (pip install gguf tokenizers).
"""

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import shlex
import sys
import time
import unicodedata

import numpy as np
import gguf
import gguf.quants
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

ARCH = "qwen2"

# The values the metadata must give for this model (checked, not assumed).
EXPECTED_CONFIG = {
    "n_layer": 24,
    "n_embd": 896,
    "n_head": 14,
    "n_head_kv": 2,
    "head_dim": 64,
    "n_ff": 4864,
    "n_vocab": 151936,
    "rope_theta": 1e6,
}
EXPECTED_RMS_EPS = 1e-6

# Qwen2's pre-tokenizer split pattern, as in its tokenizer.json.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

ONCE_TEXT = "Once upon a time"
ONCE_IDS = [12522, 5193, 264, 882]  # known-good ids, checks the tokenizer setup
FOX_TEXT = "The quick brown fox jumps over the lazy dog."
CODE_TEXT = "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n"
TOKENIZER_TEXTS = [
    ONCE_TEXT,
    "Hello world! 123",
    CODE_TEXT,
    FOX_TEXT,
    # "Ünïcödé — 東京 2024年\n\n\tTabs  and   spaces" (precomposed / NFC form)
    "\u00dcn\u00efc\u00f6d\u00e9 \u2014 \u6771\u4eac 2024\u5e74\n\n\tTabs  and   spaces",
    "I'm sure they'll say it's fine, DON'T you think?",
]

LONG_SEQUENCE_LEN = 64
PROBE_IDS = [0, 100, 12522, 151643]
TOP_K = 5
CAPTURE_KV_HEAD = 0


# --------------------------------------------------------------------------
# GGUF metadata


def field_scalar(reader, key):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def field_strings(reader, key):
    # Faster than field.contents() for the 150k-entry token and merge arrays.
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def read_config(reader):
    arch = field_scalar(reader, "general.architecture")
    if arch != ARCH:
        sys.exit(f"expected architecture {ARCH!r}, the file says {arch!r}")

    def key(name):
        value = field_scalar(reader, f"{ARCH}.{name}")
        if value is None:
            sys.exit(f"metadata key {ARCH}.{name} is missing")
        return value

    n_embd = int(key("embedding_length"))
    n_head = int(key("attention.head_count"))
    key_length = field_scalar(reader, f"{ARCH}.attention.key_length")
    token_embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    cfg = {
        "n_layer": int(key("block_count")),
        "n_embd": n_embd,
        "n_head": n_head,
        "n_head_kv": int(key("attention.head_count_kv")),
        "head_dim": int(key_length) if key_length is not None else n_embd // n_head,
        "head_dim_source": "attention.key_length" if key_length is not None else "n_embd / n_head",
        "n_ff": int(key("feed_forward_length")),
        "n_vocab": int(token_embd.shape[1]),
        "rope_theta": float(key("rope.freq_base")),
        "rms_eps": float(key("attention.layer_norm_rms_epsilon")),
        "tied_output": not any(t.name == "output.weight" for t in reader.tensors),
    }
    for name, value in cfg.items():
        print(f"  {name:16s} {value}")
    for name, want in EXPECTED_CONFIG.items():
        if cfg[name] != want:
            sys.exit(f"config mismatch: {name} = {cfg[name]}, expected {want}")
    if abs(cfg["rms_eps"] - EXPECTED_RMS_EPS) > 1e-12:
        sys.exit(f"config mismatch: rms_eps = {cfg['rms_eps']}")
    return cfg


# --------------------------------------------------------------------------
# Tokenizer


def build_tokenizer(reader):
    """Byte-level BPE from the GGUF vocabulary and merges (Qwen2 setup)."""
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in field_strings(reader, "tokenizer.ggml.merges")]
    token_types = field_scalar(reader, "tokenizer.ggml.token_type")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    assert len(vocab) == len(tokens), "duplicate token strings"
    assert all(len(m) == 2 for m in merges), "malformed merge"

    tk = Tokenizer(models.BPE(vocab, merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel()
    # Control (3) and user-defined (4) tokens such as <|endoftext|> are matched
    # whole, as in Qwen2's tokenizer.json. None occur in the test strings.
    tk.add_special_tokens([tokens[i] for i, t in enumerate(token_types) if t in (3, 4)])
    return tk


def encode(tk, text):
    ids = tk.encode(text, add_special_tokens=False).ids  # no BOS for Qwen2
    assert tk.decode(ids) == text, f"round trip failed for {text!r}"
    return ids


# --------------------------------------------------------------------------
# Weights


class Weights:
    """Each tensor dequantized once, kept as float32 (the exact dequantized
    values) and cast to the run's dtype when used."""

    def __init__(self, reader, cfg):
        self.tensors = {t.name: t for t in reader.tensors}
        self.cache = {}
        for name in self.tensors:
            if name != "token_embd.weight":
                self.get(name)
        self.output_name = "token_embd.weight" if cfg["tied_output"] else "output.weight"

    def get(self, name):
        if name not in self.cache:
            t = self.tensors[name]
            values = gguf.quants.dequantize(t.data, t.tensor_type)
            # ne = [in, out] (or [n] for vectors) -> numpy (out, in).
            shape = [int(n) for n in reversed(t.shape)]
            self.cache[name] = np.ascontiguousarray(values, dtype=np.float32).reshape(shape)
        return self.cache[name]

    def embedding_rows(self, ids):
        """Rows of token_embd for `ids`, dequantizing only those rows."""
        t = self.tensors["token_embd.weight"]
        if "token_embd.weight" in self.cache:
            return self.cache["token_embd.weight"][ids]
        rows = gguf.quants.dequantize(t.data[np.asarray(ids)], t.tensor_type)
        return rows.reshape(len(ids), int(t.shape[0])).astype(np.float32)


# --------------------------------------------------------------------------
# Forward pass


@dataclasses.dataclass(frozen=True)
class Options:
    rope_layout: str = "neox"  # "neox" (correct for qwen2) or "norm"
    qkv_bias: bool = True
    rms_eps: float = None      # None: the file's value
    rope_theta: float = None   # None: the file's value
    dtype: type = np.float64


def rms_norm(x, weight, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + x.dtype.type(eps)) * weight


def silu(x):
    return x / (x.dtype.type(1) + np.exp(-x))


def rope(x, positions, theta, layout, dtype):
    """x: (T, n_heads, d). Rotates pairs (i, i + d/2) for NEOX, (2i, 2i+1) for NORM."""
    d = x.shape[-1]
    half = d // 2
    i = np.arange(half, dtype=dtype)
    freq = np.power(dtype(theta), -dtype(2) * i / dtype(d))
    angle = positions.astype(dtype)[:, None] * freq[None, :]  # (T, d/2)
    cos = np.cos(angle)[:, None, :]
    sin = np.sin(angle)[:, None, :]
    if layout == "neox":
        x0, x1 = x[..., :half], x[..., half:]
    elif layout == "norm":
        x0, x1 = x[..., 0::2], x[..., 1::2]
    else:
        raise ValueError(layout)
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    out = np.empty_like(x)
    if layout == "neox":
        out[..., :half], out[..., half:] = r0, r1
    else:
        out[..., 0::2], out[..., 1::2] = r0, r1
    return out


def forward(weights, cfg, ids, logit_positions, opts=Options()):
    """Runs all positions of `ids`. Returns full-vocabulary logits at
    `logit_positions` and K (after bias + RoPE) / V of every layer at the
    last position, KV head CAPTURE_KV_HEAD."""
    dt = opts.dtype
    eps = cfg["rms_eps"] if opts.rms_eps is None else opts.rms_eps
    theta = cfg["rope_theta"] if opts.rope_theta is None else opts.rope_theta
    n_head, n_kv, hd = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"]
    group = n_head // n_kv
    T = len(ids)
    positions = np.arange(T)

    def W(name):
        return weights.get(name).astype(dt, copy=False)

    h = weights.embedding_rows(ids).astype(dt)
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # True above the diagonal
    scale = dt(1.0 / np.sqrt(hd))
    captured = {}

    for layer in range(cfg["n_layer"]):
        p = f"blk.{layer}."
        a = rms_norm(h, W(p + "attn_norm.weight"), eps)
        q = a @ W(p + "attn_q.weight").T
        k = a @ W(p + "attn_k.weight").T
        v = a @ W(p + "attn_v.weight").T
        if opts.qkv_bias:
            q = q + W(p + "attn_q.bias")
            k = k + W(p + "attn_k.bias")
            v = v + W(p + "attn_v.bias")
        q = rope(q.reshape(T, n_head, hd), positions, theta, opts.rope_layout, dt)
        k = rope(k.reshape(T, n_kv, hd), positions, theta, opts.rope_layout, dt)
        v = v.reshape(T, n_kv, hd)
        captured[layer] = (k[T - 1, CAPTURE_KV_HEAD].astype(np.float64),
                           v[T - 1, CAPTURE_KV_HEAD].astype(np.float64))

        attn = np.empty((T, n_head, hd), dtype=dt)
        for head in range(n_head):
            kv = head // group
            scores = (q[:, head, :] @ k[:, kv, :].T) * scale  # (T, T)
            scores[causal] = -np.inf
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn[:, head, :] = probs @ v[:, kv, :]
        h = h + attn.reshape(T, n_head * hd) @ W(p + "attn_output.weight").T

        f = rms_norm(h, W(p + "ffn_norm.weight"), eps)
        gate = f @ W(p + "ffn_gate.weight").T
        up = f @ W(p + "ffn_up.weight").T
        h = h + (silu(gate) * up) @ W(p + "ffn_down.weight").T

    x = rms_norm(h[logit_positions], W("output_norm.weight"), eps)
    # Full-vocabulary projection only at the requested positions, in chunks so
    # the float64 copy of the output matrix is never built whole.
    out_w = weights.get(weights.output_name)
    logits = np.empty((len(logit_positions), out_w.shape[0]), dtype=dt)
    chunk = 16384
    for start in range(0, out_w.shape[0], chunk):
        block = out_w[start:start + chunk].astype(dt, copy=False)
        logits[:, start:start + chunk] = x @ block.T
    return logits.astype(np.float64), captured


# --------------------------------------------------------------------------
# Recording


def record_positions(n):
    return sorted(set([0, 1, n // 2, n - 2, n - 1]))


def top_k(row, k):
    order = np.argsort(-row, kind="stable")[:k]
    return [int(i) for i in order]


def describe_run(name, ids, positions, logits, captured, cfg, tk):
    recorded = []
    for row, pos in zip(logits, positions):
        best = top_k(row, TOP_K)
        recorded.append({
            "position": pos,
            "input_id": int(ids[pos]),
            "top_ids": best,
            "top_logits": [float(row[i]) for i in best],
            "top1_text": tk.decode([best[0]]),
            "probe_logits": [float(row[i]) for i in PROBE_IDS],
        })
    captures = []
    for layer in (0, cfg["n_layer"] - 1):
        k, v = captured[layer]
        captures.append({
            "layer": layer,
            "kv_head": CAPTURE_KV_HEAD,
            "position": len(ids) - 1,
            "k_after_bias_rope": [float(x) for x in k],
            "v": [float(x) for x in v],
        })
    return {
        "name": name,
        "ids": [int(i) for i in ids],
        "length": len(ids),
        "positions": recorded,
        "kv_capture": captures,
    }


def long_sequence(fox_ids, once_ids, n):
    """fox + once + fox + once ... truncated to n tokens."""
    out = []
    while len(out) < n:
        out += fox_ids + once_ids
    return out[:n]


SENSITIVITY_RUNS = [
    ("i_norm_rope_layout", "RoPE pairs (2i, 2i+1) (NORM) instead of NEOX (i, i+d/2)",
     Options(rope_layout="norm")),
    ("ii_no_qkv_bias", "Q/K/V biases left out", Options(qkv_bias=False)),
    ("iii_rms_eps_1e-5", "RMS norm eps 1e-5 instead of 1e-6", Options(rms_eps=1e-5)),
    ("iv_rope_theta_1e4", "RoPE theta 10000 instead of 1e6", Options(rope_theta=10000.0)),
    ("v_float32", "float32 for everything instead of float64 (a correct float32 "
     "implementation; shows the size of precision differences)", Options(dtype=np.float32)),
]


def sensitivity(weights, cfg, ids, positions, ref_logits, ref_captured):
    top_ids = [top_k(row, TOP_K) for row in ref_logits]
    results = []
    for key, what, opts in SENSITIVITY_RUNS:
        t0 = time.time()
        logits, captured = forward(weights, cfg, ids, positions, opts)
        d_top = max(float(np.max(np.abs(logits[r, ids_] - ref_logits[r, ids_])))
                    for r, ids_ in enumerate(top_ids))
        d_all = float(np.max(np.abs(logits - ref_logits)))
        top1_same = all(int(np.argmax(logits[r])) == top_ids[r][0] for r in range(len(positions)))
        d_kv = {}
        for layer in (0, cfg["n_layer"] - 1):
            d_kv[f"layer{layer}_max_abs_dk"] = float(np.max(np.abs(captured[layer][0] - ref_captured[layer][0])))
            d_kv[f"layer{layer}_max_abs_dv"] = float(np.max(np.abs(captured[layer][1] - ref_captured[layer][1])))
        print(f"  {key:22s} max|dlogit| top-5 {d_top:.6g}  all-vocab {d_all:.6g}  "
              f"top-1 unchanged {top1_same}  ({time.time() - t0:.1f} s)")
        results.append({
            "mistake": key,
            "description": what,
            "max_abs_dlogit_top5": d_top,
            "max_abs_dlogit_all_vocab": d_all,
            "top1_unchanged_at_all_positions": top1_same,
            **d_kv,
        })
    return results


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--out", required=True, help="output JSON path")
    ap.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity reruns")
    args = ap.parse_args()
    t_start = time.time()

    print(f"reading {args.model}")
    reader = gguf.GGUFReader(args.model)
    print("config from GGUF metadata:")
    cfg = read_config(reader)

    print("tokenizer:")
    tk = build_tokenizer(reader)
    tokenized = []
    for text in TOKENIZER_TEXTS:
        assert unicodedata.is_normalized("NFC", text)
        ids = encode(tk, text)
        print(f"  {text!r} -> {ids}")
        tokenized.append({"text": text, "ids": ids})
    if tokenized[0]["ids"] != ONCE_IDS:
        sys.exit(f"tokenizer setup is wrong: {ONCE_TEXT!r} gave {tokenized[0]['ids']}, want {ONCE_IDS}")

    print("dequantizing weights ...")
    t0 = time.time()
    weights = Weights(reader, cfg)
    print(f"  done in {time.time() - t0:.1f} s")

    code_ids = encode(tk, CODE_TEXT)
    long_ids = long_sequence(encode(tk, FOX_TEXT), ONCE_IDS, LONG_SEQUENCE_LEN)
    sequences = [
        ("code", "ids of the code string", code_ids),
        ("long64", "ids of the fox sentence then the ids of 'Once upon a time', "
                   "repeated, truncated to 64 tokens", long_ids),
    ]

    runs, reference = [], {}
    for name, how, ids in sequences:
        t0 = time.time()
        positions = record_positions(len(ids))
        logits, captured = forward(weights, cfg, ids, positions)
        run = describe_run(name, ids, positions, logits, captured, cfg, tk)
        run["how"] = how
        runs.append(run)
        reference[name] = (ids, positions, logits, captured)
        print(f"forward {name} ({len(ids)} tokens, {time.time() - t0:.1f} s):")
        for r in run["positions"]:
            print(f"  pos {r['position']:2d}: top-1 {r['top_ids'][0]} {r['top1_text']!r} "
                  f"logit {r['top_logits'][0]:.6f}")

    sens = None
    if not args.no_sensitivity:
        print("sensitivity (sequence long64):")
        ids, positions, logits, captured = reference["long64"]
        sens = {
            "sequence": "long64",
            "metric": "max over the recorded positions of |logit(mistake) - logit(correct)| "
                      "for the correct run's top-5 ids; all-vocab is the max over every id",
            "runs": sensitivity(weights, cfg, ids, positions, logits, captured),
        }

    model_path = os.path.abspath(args.model)
    result = {
        "meta": {
            "description": "float64 numpy reference for Qwen2.5-Coder-0.5B-Instruct "
                           "(tests/oracle/qwen2_reference.py)",
            "model_file": os.path.basename(model_path),
            "model_sha256": sha256_of(model_path),
            "numpy_version": np.__version__,
            "gguf_version": _gguf_version(),
            "tokenizers_version": tokenizers.__version__,
            "python_version": sys.version.split()[0],
            "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "config": cfg,
            "precision": "dequantized with gguf.quants.dequantize (float32), all math in float64",
        },
        "tokenizer": {
            "kind": "tokenizers byte-level BPE from tokenizer.ggml.tokens/merges; "
                    "pre-tokenizer Split(Regex(pattern), isolated) + ByteLevel(add_prefix_space=False, "
                    "use_regex=False); no normalizer (all strings are already NFC); no BOS",
            "pattern": QWEN2_PATTERN,
            "tokenizers_version": tokenizers.__version__,
            "strings": tokenized,
        },
        "forward": {
            "probe_ids": PROBE_IDS,
            "top_k": TOP_K,
            "sequences": runs,
        },
        "sensitivity": sens,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes) in {time.time() - t_start:.1f} s")


def _gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "unknown"


if __name__ == "__main__":
    main()
