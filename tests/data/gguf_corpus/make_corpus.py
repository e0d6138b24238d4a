#!/usr/bin/env python3
"""Writes the crafted GGUF seed files of this directory (regression corpus for
test_gguf.cpp and fuzz seeds for tests/fuzz/fuzz_gguf.cpp).
ok_*.gguf must parse; bad_*.gguf must be refused with tq::Error.
Run from anywhere: python3 make_corpus.py (deterministic output)."""
import os, random, struct

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(1234)

def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b

def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload

def blocks(nbytes_per_block, n, half_at=()):
    out = bytearray()
    for _ in range(n):
        b = bytearray(rng.getrandbits(8) for _ in range(nbytes_per_block))
        for o in half_at:  # finite fp16 scale
            b[o:o + 2] = struct.pack("<e", rng.uniform(-0.1, 0.1))
        out += b
    return bytes(out)

def gguf(kvs, tensors, version=3, align=32, tail_cut=0):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data = b"", b""
    for name, ne, t, payload in tensors:
        off = (len(data) + align - 1) // align * align
        data = data.ljust(off, b"\0") + payload
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", t, off)
    body = head + infos
    body = body.ljust((len(body) + align - 1) // align * align, b"\0") + data
    return body[: len(body) - tail_cut] if tail_cut else body

meta = [
    kv("general.architecture", 8, s("llama")),
    kv("llama.block_count", 4, struct.pack("<I", 2)),
    kv("llama.rope.freq_base", 6, struct.pack("<f", 1e4)),
    kv("tokenizer.ggml.add_bos_token", 7, b"\x01"),
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("\u2581c")),
    kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, -1, -2)),
    kv("k.u64", 10, struct.pack("<Q", 1 << 40)),
    kv("k.i64", 11, struct.pack("<q", -5)),
    kv("k.f64", 12, struct.pack("<d", 0.5)),
    kv("k.i8", 1, struct.pack("<b", -3)),
    kv("k.u16", 2, struct.pack("<H", 9)),
    kv("k.i16", 3, struct.pack("<h", -9)),
    kv("k.u8", 0, b"\x07"),
    kv("k.i32", 5, struct.pack("<i", -7)),
]
tensors = [
    ("f32", [4, 2], 0, struct.pack("<8f", *range(8))),
    ("f16", [8], 1, struct.pack("<8e", *[0.5 * i for i in range(8)])),
    ("bf16", [8], 30, bytes(16)),
    ("q4_0", [32, 2], 2, blocks(18, 2, (0,))),
    ("q4_1", [32], 3, blocks(20, 1, (0, 2))),
    ("q5_0", [32], 6, blocks(22, 1, (0,))),
    ("q5_1", [32], 7, blocks(24, 1, (0, 2))),
    ("q8_0", [64], 8, blocks(34, 2, (0,))),
    ("q4_k", [256], 12, blocks(144, 1, (0, 2))),
    ("q5_k", [256], 13, blocks(176, 1, (0, 2))),
    ("q6_k", [256], 14, blocks(210, 1, (208,))),
]
files = {
    "ok_empty_v3.gguf": gguf([], []),
    "ok_metadata_v2.gguf": gguf(meta, [], version=2),
    "ok_all_types.gguf": gguf(meta, tensors),
    "ok_align64.gguf": gguf([kv("general.alignment", 4, struct.pack("<I", 64))], tensors[:4], align=64),
    "bad_magic.gguf": b"GGUX" + gguf([], [])[4:],
    "bad_truncated.gguf": gguf(meta, tensors, tail_cut=7),
    "bad_type99.gguf": gguf([], [("blk.3.attn_q.weight", [32], 99, bytes(20))]),
    "bad_huge_array.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 4, 1 << 61),
    "bad_nested_array.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s("k") + struct.pack("<IIQ", 9, 9, 1),
    "bad_ndims5.gguf": b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + s("t") + struct.pack("<I5QIQ", 5, 32, 1, 1, 1, 1, 3, 0),
}
# Qwen2-shaped: qwen2.* hyperparameters without key_length, the gpt2/qwen2
# tokenizer keys, F32 Q/K/V biases beside quantized matrices of the types the
# Qwen2.5 GGUFs use (Q4_K, Q6_K, Q5_0, Q8_0), and an untied output.weight.
qwen_meta = [
    kv("general.architecture", 8, s("qwen2")),
    kv("qwen2.block_count", 4, struct.pack("<I", 1)),
    kv("qwen2.embedding_length", 4, struct.pack("<I", 256)),
    kv("qwen2.feed_forward_length", 4, struct.pack("<I", 512)),
    kv("qwen2.attention.head_count", 4, struct.pack("<I", 4)),
    kv("qwen2.attention.head_count_kv", 4, struct.pack("<I", 2)),
    kv("qwen2.rope.freq_base", 6, struct.pack("<f", 1e6)),
    kv("qwen2.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6)),
    kv("tokenizer.ggml.model", 8, s("gpt2")),
    kv("tokenizer.ggml.pre", 8, s("qwen2")),
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 3) + s("a") + s("b") + s("ab")),
    kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 1) + s("a b")),
    kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 0)),
]
qwen_tensors = [
    ("token_embd.weight", [256, 3], 12, blocks(144, 3, (0, 2))),
    ("blk.0.attn_q.weight", [256, 256], 12, blocks(144, 256, (0, 2))),
    ("blk.0.attn_q.bias", [256], 0, struct.pack("<256f", *[rng.uniform(-300, 300) for _ in range(256)])),
    ("blk.0.attn_k.weight", [256, 128], 6, blocks(22, 1024, (0,))),
    ("blk.0.attn_k.bias", [128], 0, struct.pack("<128f", *[rng.uniform(-300, 300) for _ in range(128)])),
    ("blk.0.attn_v.weight", [256, 128], 14, blocks(210, 128, (208,))),
    ("blk.0.attn_v.bias", [128], 0, struct.pack("<128f", *[rng.uniform(-1, 1) for _ in range(128)])),
    ("output.weight", [256, 3], 8, blocks(34, 24, (0,))),
]
files["ok_qwen2_shaped.gguf"] = gguf(qwen_meta, qwen_tensors)
files["bad_qwen2_bias_truncated.gguf"] = gguf(qwen_meta, qwen_tensors, tail_cut=200)
# A bias whose tensor info claims more values than the file holds.
files["bad_qwen2_bias_past_end.gguf"] = gguf(qwen_meta, qwen_tensors[:2] + [("blk.0.attn_q.bias", [1 << 20], 0, bytes(64))])

# Overlap: two tensors whose data ranges coincide (both at relative offset 0).
head = b"GGUF" + struct.pack("<IQQ", 3, 2, 0)
infos = s("a") + struct.pack("<IQIQ", 1, 32, 3, 0) + s("b") + struct.pack("<IQIQ", 1, 32, 3, 0)
body = head + infos
files["bad_overlap.gguf"] = body.ljust((len(body) + 31) // 32 * 32, b"\0") + bytes(40)
for name, data in files.items():
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
print(f"wrote {len(files)} files to {HERE}")
