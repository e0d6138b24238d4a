"""tqkit_torch on a GPU against independent oracles: the CPU encoder's bytes,
bytes and outputs written by vLLM's own kernels (data/vectors), and a float64
attention over the CPU decoder's K/V. Skipped (reported as skipped) without
torch, CUDA or the built extension.

    PYTHONPATH=python python -m pytest -q python/tests
"""
import itertools
import json
import math
import os
import struct

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
tq = pytest.importorskip("tqkit_torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV = "cuda"
PRESETS = ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_k8v4"]
TURBO = ["turbo2", "turbo3", "turbo4", "turbo4-qjl"]


def gen(seed):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def paged_setup(fmt, d, seq_lens, kv_heads, block_size=16, seed=0, spare_blocks=3, dtype=torch.float16):
    """A cache with each sequence's tokens stored through tq.store in shuffled blocks.
    Returns cache, block_table, seq_lens (int32 cuda), the K/V (dtype) per sequence."""
    g = gen(seed)
    blocks_per = [(n + block_size - 1) // block_size for n in seq_lens]
    nb = sum(blocks_per) + spare_blocks
    perm = torch.randperm(nb, generator=g)
    cache = torch.zeros(nb, block_size, kv_heads, tq.slot_bytes(fmt, d), dtype=torch.uint8, device=DEV)
    width = max(blocks_per)
    table = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    kv, pos = [], 0
    for i, n in enumerate(seq_lens):
        table[i, : blocks_per[i]] = perm[pos: pos + blocks_per[i]].to(torch.int32)
        pos += blocks_per[i]
        k = (torch.randn(n, kv_heads, d, generator=g) * 2).to(dtype)
        v = torch.randn(n, kv_heads, d, generator=g).to(dtype)
        t = torch.arange(n)
        slots = table[i, t // block_size].to(torch.int64) * block_size + t % block_size
        tq.store(k.to(DEV), v.to(DEV), cache, slots.to(DEV), fmt, validate=True)
        kv.append((k, v))
    return cache, table.to(DEV), torch.tensor(seq_lens, dtype=torch.int32, device=DEV), kv


def reference_attention(q, k, v, scale):
    """float64: q [Hq, D], k/v [n, H, D] -> [Hq, D], GQA (q head h reads kv head h // (Hq/H))."""
    hq, h = q.shape[0], k.shape[1]
    kk = k.double().repeat_interleave(hq // h, dim=1)  # [n, Hq, D]
    vv = v.double().repeat_interleave(hq // h, dim=1)
    s = torch.einsum("hd,nhd->hn", q.double(), kk) * scale
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hn,nhd->hd", p, vv)


def cpu_kv(cache, table, i, n, fmt, d):
    """The CPU decoder's K/V of sequence i's first n positions (float32 [n, H, D])."""
    bs = cache.shape[1]
    t = torch.arange(n, device=cache.device)
    slots = cache[table[i, t // bs].long(), t % bs]  # [n, H, slot]
    return tq.decode_cpu(slots.cpu().contiguous(), fmt, d)


@pytest.mark.parametrize("fmt", PRESETS + TURBO)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_store_writes_the_cpu_encoders_bytes(fmt, d, dtype):
    if fmt.startswith("turbo") and not fmt.startswith("turboquant") and d == 64:
        pytest.skip("turbo blocks are 128 values: head_dim 64 is refused")
    g = gen(1)
    n, h, bs = 37, 2, 16
    k = (torch.randn(n, h, d, generator=g) * 3).to(dtype)
    v = torch.randn(n, h, d, generator=g).to(dtype)
    nb = 4
    cache = torch.zeros(nb, bs, h, tq.slot_bytes(fmt, d), dtype=torch.uint8, device=DEV)
    slots = torch.randperm(nb * bs, generator=g)[:n].to(torch.int64)
    slots[5] = -1  # skipped
    # a strided key (a view of a wider tensor) as vLLM's fused QKV output is
    kw = torch.zeros(n, h, d + 8, dtype=dtype)
    kw[..., :d] = k
    tq.store(kw[..., :d].to(DEV), v.to(DEV), cache, slots.to(DEV), fmt, validate=True)
    want = tq.encode_cpu(k, v, fmt)  # [n, h, slot] (of float(k), float(v): exact for fp16 and bf16)
    flat = cache.view(nb * bs, h, -1).cpu()
    for t in range(n):
        if t == 5:
            continue
        assert torch.equal(flat[slots[t]], want[t]), f"token {t}"
    written = set(slots.tolist()) - {-1}
    untouched = [s for s in range(nb * bs) if s not in written]
    assert int(flat[untouched].abs().sum()) == 0  # the skipped token and free slots stay zero


def f16_from_bits(bits):
    return torch.tensor(bits, dtype=torch.int16).view(torch.float16)


def codes(slot, offset, bits, d):
    """b-bit LSB-first codes j < d of a byte string starting at offset."""
    out = []
    for j in range(d):
        bit = j * bits
        w = slot[offset + bit // 8] | ((slot[offset + bit // 8 + 1] << 8) if offset + bit // 8 + 1 < len(slot) else 0)
        out.append((w >> (bit % 8)) & ((1 << bits) - 1))
    return out


VALUE_TIES = {("turboquant_k3v4_nc", 128, 0, 1, 126), ("turboquant_k3v4_nc", 128, 4, 0, 72),
              ("turboquant_3bit_nc", 128, 1, 1, 47)}  # data/vectors/README.md: GPU half-way codes


def vllm_cases():
    with open(os.path.join(ROOT, "data", "vectors", "vllm_turboquant_vectors.json")) as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("case", vllm_cases(), ids=lambda c: f"{c['preset']}-d{c['head_dim']}")
def test_store_and_decode_against_vllms_own_kernels(case):
    fmt, d, T, H, Hq = case["preset"], case["head_dim"], case["n_tokens"], case["n_kv_heads"], case["n_q_heads"]
    kb = {"turboquant_4bit_nc": 4, "turboquant_k3v4_nc": 3, "turboquant_3bit_nc": 3}[fmt]
    vb = {"turboquant_4bit_nc": 4, "turboquant_k3v4_nc": 4, "turboquant_3bit_nc": 3}[fmt]
    key = f16_from_bits(case["key_f16_bits"]).view(T, H, d)
    value = f16_from_bits(case["value_f16_bits"]).view(T, H, d)
    cache = torch.zeros(1, 16, H, case["slot_bytes"], dtype=torch.uint8, device=DEV)
    tq.store(key.to(DEV), value.to(DEV), cache, torch.arange(T, device=DEV), fmt)
    ours = cache[0, :T].cpu()
    rot = struct.unpack(f"<{T * H * d}f", struct.pack(f"<{T * H * d}I", *[b & 0xFFFFFFFF for b in
                                                                        case["rotated_unit_key_f32_bits"]]))
    mids = struct.unpack(f"<{len(case['midpoints_f32_bits'])}f",
                         struct.pack(f"<{len(case['midpoints_f32_bits'])}I",
                                     *[b & 0xFFFFFFFF for b in case["midpoints_f32_bits"]]))
    ib, vo = (d * kb + 7) // 8, (d * kb + 7) // 8 + 2
    value_ties = 0
    for t in range(T):
        for h in range(H):
            ref = bytes.fromhex(case["slots_hex"][t][h])
            mine = bytes(ours[t, h].tolist())
            for j, (a, b) in enumerate(zip(codes(mine, 0, kb, d), codes(ref, 0, kb, d))):
                if a != b:  # only where vLLM's own rotated value sits on a midpoint (rotation rounding)
                    y = rot[(t * H + h) * d + j]
                    assert min(abs(y - m) for m in mids) < 1e-6, (t, h, j)
            assert mine[ib:ib + 2] == ref[ib:ib + 2]  # fp16 norm
            for j, (a, b) in enumerate(zip(codes(mine, vo, vb, d), codes(ref, vo, vb, d))):
                if a != b:
                    assert (fmt, d, t, h, j) in VALUE_TIES
                    value_ties += 1
            fields = vo + (d * vb + 7) // 8
            assert mine[fields:fields + 4] == ref[fields:fields + 4]  # fp16 scale, zero
    # Our decode over vLLM's own bytes gives vLLM's decode output.
    for t in range(T):
        for h in range(H):
            cache[0, t, h] = torch.tensor(list(bytes.fromhex(case["slots_hex"][t][h])), dtype=torch.uint8)
    q = f16_from_bits(case["query_f16_bits"]).view(1, Hq, d).to(DEV)
    out = tq.decode(q, cache, torch.zeros(1, 1, dtype=torch.int32, device=DEV),
                    torch.tensor([T], dtype=torch.int32, device=DEV), fmt, case["attn_scale"])
    want = torch.tensor(case["decode_output_f32"]).view(Hq, d)
    # our output is fp16 (vLLM's fp32): compare relative to the output's scale
    assert (out[0].float().cpu() - want).abs().max().item() < 1e-3 * want.abs().max().item()


def row_error(out, ref, dtype):
    """Per query row ||out - ref|| / ||ref|| (out, ref [..., d]); bf16 outputs: beyond each element's own rounding
    (half a bf16 ulp, <= 2^-8 |out| (1 + 2^-8)), which is the output type's, not the kernel's."""
    err = (out.double() - ref).abs()
    if dtype == torch.bfloat16:
        err = (err - out.double().abs() * 2.0 ** -8 * (1 + 2.0 ** -8)).clamp(min=0)
    return (err.norm(dim=-1) / ref.norm(dim=-1)).max().item()


@pytest.mark.parametrize("fmt", PRESETS + ["turbo3", "turbo4"])
@pytest.mark.parametrize("q_len", [1, 4, 16, 130])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_equals_float64_attention_over_the_cpu_decode(fmt, q_len, dtype):
    # q_len 4, 16: the fused multi-query kernel; 130: decode_dense (dequant + SDPA); bf16: K, V, queries and outputs
    check_decode_against_float64(fmt, q_len, dtype, kvh=2, hq=8)


@pytest.mark.parametrize("fmt", PRESETS)
@pytest.mark.parametrize("q_len", [1, 4])
def test_decode_at_phi4s_ten_kv_heads_equals_float64_attention(fmt, q_len):
    # Phi-4 / Phi-3-medium: 40 query and 10 kv heads of 128 dims (k8v4's kernel splits them into CTAs of 5 that
    # read whole token rows; the 16-warp kernels hold all 10)
    check_decode_against_float64(fmt, q_len, torch.float16, kvh=10, hq=40)


def check_decode_against_float64(fmt, q_len, dtype, kvh, hq):
    d = 128
    seq_lens = {1: [301, 17, 64, 129], 4: [301, 17, 64, 4], 16: [301, 17, 64, 16],
                130: [301, 140, 200, 130]}[q_len]  # ragged, pages shuffled
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=3, dtype=dtype)
    g = gen(4)
    q = torch.randn(len(seq_lens), q_len, hq, d, generator=g).to(dtype)
    scale = d ** -0.5
    out = tq.decode(q.to(DEV) if q_len > 1 else q[:, 0].to(DEV), cache, table, lens, fmt, scale, validate=True)
    assert out.dtype == dtype
    out = out.view(len(seq_lens), q_len, hq, d).float().cpu()
    # The GPU suite's criterion (tests/gpu/decode_fixture.h): per query row ||out - ref|| / ||ref|| <= 1e-3.
    # Measured on these inputs (H200, fp16): <= 2.5e-4 single-query, <= 3.5e-4 fused (G > 4 columns carry
    # p*scale as fp16 alone); the largest element error of either is ~1e-3 of outputs of magnitude ~1.
    worst = 0.0
    # decode_dense (q_len 130) attends over the dequantized cache, which is the CPU decode rounded to
    # fp16 (test_dequant_is_the_cpu_decode_rounded): its oracle is the float64 attention over those values
    # (against the unrounded decode it is ~1.1e-3 off, the rounding of K).
    dense = tq.takes_dense(q_len, hq, kvh)
    assert dense == (q_len == 130)  # G 4: 520 columns dense, 64 fused
    for i, n in enumerate(seq_lens):
        k, v = cpu_kv(cache, table, i, n, fmt, d)
        if dense:
            k, v = k.half().float(), v.half().float()
        for j in range(q_len):
            visible = n - q_len + 1 + j  # causal within the chunk
            ref = reference_attention(q[i, j].float(), k[:visible], v[:visible], scale)
            assert torch.isfinite(out[i, j]).all()
            worst = max(worst, row_error(out[i, j], ref, dtype))
    assert worst <= 1e-3, worst


@pytest.mark.parametrize("fmt", ["turboquant_4bit_nc", "turboquant_3bit_nc", "turbo3"])
@pytest.mark.parametrize("counts, seq_lens, auto", [
    ([4, 1, 16, 2], [301, 17, 12, 129], "fused"), ([1, 1, 1, 1], [301, 17, 64, 129], "fused"),
    ([90, 3, 84, 1], [301, 17, 100, 129], "dense+fused"), ([90, 84], [301, 100], "dense"),
    ([200, 1, 3, 90], [900, 50, 300, 91], "dense+fused"), ([90, 2], [30, 100], "fused"),
    ([32] + [1] * 29, [301, 12] + [5 + 11 * i for i in range(28)], "rows"),
    ([90, 32] + [1] * 20, [301, 30] + [3 + 19 * i for i in range(20)], "dense+rows")])
@pytest.mark.parametrize("path", [None, "rows"])
def test_decode_with_query_start_loc_equals_float64_attention(fmt, counts, seq_lens, auto, path):
    # vLLM's varlen layout: query [num_tokens, heads, d], sequence i's queries in rows query_start_loc[i] ...;
    # query j of a sequence with n queries sees positions [0, seq_len - n + j]. path None: each sequence
    # takes decode_dense where goes_dense (takes_dense(its count) and it holds its queries, or a count over
    # 128), the rest one fused launch or, where takes_rows, decode_rows. [4, 1, 16, 2]: fused (max 16),
    # sequence 2's 16 queries on 12 tokens (its first 4 see nothing: zero rows); [1, 1, 1, 1]:
    # max_query_len 1, the single-query path; [90, 84]: all dense (G 4: from 80 queries); [90, 3, 84, 1] and
    # [200, 1, 3, 90]: chunks dense, the rest fused (two calls on their rows; 200 is beyond the fused
    # kernel); [90, 2]: 90 queries on 30 tokens stay fused; [32, 1 x 29]: rows (8 fused passes for one
    # sequence, 61 rows for 30), 32 queries on 301 tokens; [90, 32, 1 x 20]: 90 dense, the rest rows (the 32
    # queries on 30 tokens: two zero rows). path 'rows': every query a single-query row. auto: decode()'s
    # paths for path None (asserted, so a moved rule cannot silently drop a path from this test).
    d, kvh, hq = 128, 2, 8
    assert tq.varlen_path(counts, seq_lens, hq, kvh) == auto
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=13)
    starts = [0]
    for n in counts:
        starts.append(starts[-1] + n)
    q = torch.randn(starts[-1], hq, d, generator=gen(14)).half()
    qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
    scale = d ** -0.5
    out = tq.decode(q.to(DEV), cache, table, lens, fmt, scale, validate=True, query_start_loc=qsl,
                    path=path).float().cpu()
    worst = 0.0
    for i, n in enumerate(seq_lens):
        k, v = cpu_kv(cache, table, i, n, fmt, d)
        dense = path is None and tq.paths.goes_dense(counts[i], n, hq, kvh)
        if dense:  # decode_dense attends over the fp16-rounded dequant (as above)
            k, v = k.half().float(), v.half().float()
        for j in range(counts[i]):
            visible = n - counts[i] + 1 + j
            if visible <= 0:  # no position yet: the fused kernel (and a row of no positions) writes zeros
                assert not dense and torch.equal(out[starts[i] + j], torch.zeros_like(out[starts[i] + j]))
                continue
            ref = reference_attention(q[starts[i] + j].float(), k[:visible], v[:visible], scale)
            worst = max(worst, row_error(out[starts[i] + j], ref, torch.float16))
    assert worst <= 1e-3, worst


def test_decode_with_query_start_loc_runs_each_path_on_the_rows_varlen_path_gives_it(monkeypatch):
    # decode() calls decode_dense, decode_rows and the fused launch on exactly the rows of the sequences
    # tqkit_torch.paths assigns them (spies around the three; the outputs are the float64 test's business)
    fmt, d, kvh, hq = "turboquant_4bit_nc", 128, 2, 8
    calls = []
    for name in ("decode_dense", "decode_rows", "_decode_fused"):
        real = getattr(tq, name)
        monkeypatch.setattr(tq, name, lambda q, *a, _n=name, _f=real, **k: calls.append((_n, q.shape[0])) or
                            _f(q, *a, **k))
    # (decode_rows runs its rows through the fused launch's allocating form, with one query per row)
    for counts, expect in (([32] + [1] * 29, [("decode_rows", 61), ("_decode_fused", 61)]),
                           ([4, 1, 16, 2], [("_decode_fused", 23)]),
                           ([90, 32] + [1] * 20, [("decode_dense", 90), ("decode_rows", 52), ("_decode_fused", 52)])):
        seq_lens = [300] * len(counts)
        cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=23)
        starts = [0, *itertools.accumulate(counts)]
        q = torch.randn(starts[-1], hq, d, generator=gen(24)).half().to(DEV)
        qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
        calls.clear()
        tq.decode(q, cache, table, lens, fmt, d ** -0.5, query_start_loc=qsl)
        assert calls == expect, counts


def test_decode_with_host_copies_of_the_counts_chooses_its_path_without_a_synchronisation():
    # vLLM passes query_start_loc_cpu and seq_lens_cpu beside the device tensors: with them decode() reads
    # nothing back from the GPU where the batch stays on the rows or the fused path (torch's sync debug mode
    # raises on any synchronising call), gives the same output as reading the device tensors, and without
    # them the same calls do synchronise (so the check can fail)
    fmt, d, kvh, hq = "turboquant_4bit_nc", 128, 2, 8
    for counts, path in (([32] + [1] * 29, "rows"), ([40, 1, 1, 1], "fused")):
        seq_lens = [300] * len(counts)
        assert tq.varlen_path(counts, seq_lens, hq, kvh) == path
        cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=25)
        starts = [0, *itertools.accumulate(counts)]
        q = torch.randn(starts[-1], hq, d, generator=gen(26)).half().to(DEV)
        qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
        call = lambda **host: tq.decode(q, cache, table, lens, fmt, d ** -0.5, query_start_loc=qsl, **host)
        want = call()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = call(query_start_loc_cpu=torch.tensor(starts, dtype=torch.int32),
                       seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32))
            with pytest.raises(RuntimeError, match="synchroniz"):
                call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.equal(got, want), counts


def test_decode_dense_reads_its_lengths_from_the_host_copies():
    # a uniform chunk and a varlen chunk of 96 queries go to decode_dense, and decode() splits the varlen
    # batch between decode_dense and the fused launch; with the host copies none of them makes a
    # synchronising call of its own (sync debug mode "error"), and each gives the bytes it gives without them
    fmt, d, kvh, hq = "turboquant_4bit_nc", 128, 2, 8
    seq_lens = [200, 150]
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=27)
    host_lens = torch.tensor(seq_lens, dtype=torch.int32)
    uniform = torch.randn(2, 96, hq, d, generator=gen(28)).half().to(DEV)
    starts = [0, 96, 97]
    flat = torch.randn(starts[-1], hq, d, generator=gen(29)).half().to(DEV)
    qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
    assert tq.varlen_path([96, 1], seq_lens, hq, kvh) == "dense+fused"
    host_starts = torch.tensor(starts, dtype=torch.int32)
    calls = ((lambda **host: tq.decode(uniform, cache, table, lens, fmt, d ** -0.5, path="dense", **host),
              dict(seq_lens_cpu=host_lens)),
             (lambda **host: tq.decode_dense(flat, cache, table, lens, fmt, d ** -0.5, query_start_loc=qsl, **host),
              dict(seq_lens_cpu=host_lens, query_start_loc_cpu=host_starts)),
             (lambda **host: tq.decode(flat, cache, table, lens, fmt, d ** -0.5, query_start_loc=qsl, **host),
              dict(seq_lens_cpu=host_lens, query_start_loc_cpu=host_starts)))
    for call, host in calls:
        want = call()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = call(**host)
            with pytest.raises(RuntimeError, match="synchroniz"):
                call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.equal(got, want)
    k, v = tq.dequant(cache, table, lens, fmt, d, seq_lens_cpu=host_lens)
    k0, v0 = tq.dequant(cache, table, lens, fmt, d)
    assert torch.equal(k, k0) and torch.equal(v, v0) and k.shape[0] == sum(seq_lens)
    with pytest.raises(ValueError, match="seq_lens_cpu: differs"):
        tq.dequant(cache, table, lens, fmt, d, seq_lens_cpu=host_lens + 1, validate=True)


def test_decode_with_query_start_loc_equals_the_padded_calls():
    # the varlen call against one uniform call per sequence (each sequence alone with its own q_len: other
    # launches, some with other kernels, so within the fp16 outputs' error rather than equal)
    fmt, d, kvh, hq = "turboquant_k3v4_nc", 128, 8, 32
    seq_lens, counts = [500, 77, 1000], [4, 2, 3]
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=15)
    starts = [0, *itertools.accumulate(counts)]
    q = torch.randn(9, hq, d, generator=gen(16)).half().to(DEV)
    qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
    out = tq.decode(q, cache, table, lens, fmt, d ** -0.5, query_start_loc=qsl, max_query_len=4, num_splits=2)
    for i in range(3):
        one = tq.decode(q[starts[i]:starts[i + 1]][None], cache, table[i:i + 1], lens[i:i + 1], fmt, d ** -0.5,
                        num_splits=2)
        assert (out[starts[i]:starts[i + 1]].float() - one[0].float()).abs().max().item() < 2e-3


def test_decode_workspace_bytes_covers_query_start_loc_with_automatic_splits():
    # decode_workspace_bytes(q_len = max_query_len) must cover the varlen call, whose launches the planner
    # deals one column chunk at a time: at 32/8, 8 sequences of 8192 tokens, counts 16,1x7 and automatic
    # splits that call needs 3.4x the uniform call's workspace. The 16-query chunk against a call of its own.
    fmt, d, kvh, hq, n = "turboquant_4bit_nc", 128, 8, 32, 8192
    cache, table, lens, _ = paged_setup(fmt, d, [n] * 8, kvh, seed=21)
    counts = [16] + [1] * 7
    starts = [0, *itertools.accumulate(counts)]
    q = torch.randn(starts[-1], hq, d, generator=gen(22)).half().to(DEV)
    qsl = torch.tensor(starts, dtype=torch.int32, device=DEV)
    ws = torch.empty(tq.decode_workspace_bytes(fmt, 8, 16, hq, kvh, d, 16, n), dtype=torch.uint8, device=DEV)
    out = torch.empty_like(q)
    tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, n, query_start_loc=qsl, max_query_len=16)
    one = tq.decode(q[:16][None], cache, table[:1], lens[:1], fmt, d ** -0.5)
    assert (out[:16].float() - one[0].float()).abs().max().item() < 2e-3


def test_decode_with_query_start_loc_under_cuda_graph_replay():
    # a captured varlen decode replayed with new counts of the same rows and new lengths (an engine's graph
    # reads its metadata buffers), each replay equal to an eager call
    fmt, d, kvh, hq = "turboquant_4bit_nc", 128, 2, 8
    cache, table, _, _ = paged_setup(fmt, d, [600, 600, 600], kvh, seed=17)
    max_len, splits, max_q = 600, 4, 5
    ws = torch.empty(tq.decode_workspace_bytes(fmt, 3, max_q, hq, kvh, d, 16, max_len, splits),
                     dtype=torch.uint8, device=DEV)
    q = torch.zeros(9, hq, d, dtype=torch.half, device=DEV)
    qsl = torch.tensor([0, 3, 6, 9], dtype=torch.int32, device=DEV)
    lens = torch.full((3,), 600, dtype=torch.int32, device=DEV)
    out = torch.empty_like(q)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, max_len, splits, qsl, max_q)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, max_len, splits, qsl, max_q)
    for seed, starts, new_lens in [(18, [0, 5, 6, 9], [600, 333, 2]), (19, [0, 1, 4, 9], [17, 600, 450])]:
        q.copy_(torch.randn(9, hq, d, generator=gen(seed)).half())
        qsl.copy_(torch.tensor(starts, dtype=torch.int32))
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        eager = tq.decode(q, cache, table, lens, fmt, d ** -0.5, max_seq_len=max_len, num_splits=splits,
                          query_start_loc=qsl, max_query_len=max_q)
        assert torch.equal(out, eager)


def test_decode_with_query_start_loc_refuses_bad_arguments_by_name():
    fmt, d = "turboquant_4bit_nc", 128
    cache, table, lens, _ = paged_setup(fmt, d, [900, 40], 2, seed=11)
    q = torch.zeros(5, 8, d, dtype=torch.half, device=DEV)
    qsl = torch.tensor([0, 3, 5], dtype=torch.int32, device=DEV)
    ws = torch.empty(1 << 22, dtype=torch.uint8, device=DEV)
    with pytest.raises(RuntimeError, match="query_start_loc must be Int"):
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, ws, fmt, 0.1, 900, 0, qsl.long(), 3)
    with pytest.raises(RuntimeError, match=r"query_start_loc must be a contiguous int32 \[num_seqs \+ 1\]"):
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, ws, fmt, 0.1, 900, 0, qsl[:1], 3)
    with pytest.raises(RuntimeError, match="block_table 2"):  # 3 sequences in query_start_loc, 2 in the table
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, ws, fmt, 0.1, 900, 0,
                      torch.tensor([0, 1, 3, 5], dtype=torch.int32, device=DEV), 3)
    with pytest.raises(RuntimeError, match="max_query_len 0 must be 1"):
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, ws, fmt, 0.1, 900, 0, qsl, 0)
    with pytest.raises(RuntimeError, match="query has 5 rows"):  # 2 sequences of at most 2 queries hold <= 4
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, ws, fmt, 0.1, 900, 0, qsl, 2)
    with pytest.raises(RuntimeError, match=r"with query_start_loc, query must be \[num_tokens"):
        tq.decode_out(torch.empty_like(q)[None], q[None], cache, table, lens, ws, fmt, 0.1, 900, 0, qsl, 3)
    with pytest.raises(ValueError, match=r"query: with query_start_loc it must be \[num_tokens"):
        tq.decode(q[None], cache, table, lens, fmt, 0.1, validate=True, query_start_loc=qsl)
    with pytest.raises(ValueError, match="sequence 1 has 0 queries"):
        tq.decode(q[:3], cache, table, lens, fmt, 0.1, validate=True,
                  query_start_loc=torch.tensor([0, 3, 3], dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="query_start_loc: must run from 0 to the query's 5 rows"):
        tq.decode(q, cache, table, lens, fmt, 0.1, validate=True,
                  query_start_loc=torch.tensor([0, 3, 4], dtype=torch.int32, device=DEV))
    with pytest.raises(ValueError, match="sequence 0 has 3 queries, not 1 ... max_query_len 2"):
        tq.decode(q, cache, table, lens, fmt, 0.1, validate=True, query_start_loc=qsl, max_query_len=2)
    with pytest.raises(ValueError, match="path: 'padded' is not 'fused', 'dense', 'rows' or None"):
        tq.decode(q, cache, table, lens, fmt, 0.1, query_start_loc=qsl, path="padded")
    with pytest.raises(ValueError, match="path: 'rows' needs query_start_loc"):
        tq.decode(q[:2], cache, table, lens, fmt, 0.1, path="rows")
    with pytest.raises(ValueError, match=r"query_start_loc: 2 sequences, but seq_lens has 1 and block_table 2"):
        tq.decode_rows(q, cache, table, lens[:1], fmt, 0.1, qsl)
    with pytest.raises(ValueError, match=r"query: decode_rows needs \[num_tokens"):
        tq.decode_rows(q[None], cache, table, lens, fmt, 0.1, qsl)
    host_qsl = qsl.cpu()
    for host, msg in ((dict(query_start_loc_cpu=qsl), "query_start_loc_cpu: must be a CPU tensor, got cuda"),
                      (dict(query_start_loc_cpu=host_qsl.float()), "query_start_loc_cpu: must be int32 or int64"),
                      (dict(seq_lens_cpu=lens.cpu()[:1]), r"seq_lens_cpu: shape \(1,\) differs"),
                      (dict(query_start_loc_cpu=host_qsl + 1, validate=True), "query_start_loc_cpu: differs")):
        with pytest.raises(ValueError, match=msg):
            tq.decode(q, cache, table, lens, fmt, 0.1, query_start_loc=qsl, **host)
    with pytest.raises(ValueError, match="query_start_loc_cpu: given without query_start_loc"):
        tq.decode(q[:2], cache, table, lens, fmt, 0.1, query_start_loc_cpu=host_qsl)


@pytest.mark.parametrize("seq_lens", [[301, 80, 64, 70], [301, 17, 64, 70]])
def test_decode_at_g8_takes_the_dense_path_only_where_every_sequence_holds_its_chunk(seq_lens):
    # G 8, q_len 64: the dense path's side of takes_dense; a sequence of 17 tokens
    # (shorter than the chunk: its first 47 queries see nothing) keeps the whole batch on the fused kernel
    fmt, d, kvh, hq, q_len = "turboquant_4bit_nc", 128, 2, 16, 64
    assert tq.takes_dense(q_len, hq, kvh)
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=11)
    q = torch.randn(len(seq_lens), q_len, hq, d, generator=gen(12)).half()
    scale = d ** -0.5
    out = tq.decode(q.to(DEV), cache, table, lens, fmt, scale).float().cpu()
    dense = min(seq_lens) >= q_len
    worst = 0.0
    for i, n in enumerate(seq_lens):
        k, v = cpu_kv(cache, table, i, n, fmt, d)
        if dense:  # decode_dense attends over the fp16-rounded dequant (as in the test above)
            k, v = k.half().float(), v.half().float()
        for j in range(q_len):
            visible = n - q_len + 1 + j
            if visible <= 0:  # no position yet: the fused kernel (and a row of no positions) writes zeros
                assert not dense and torch.equal(out[i, j], torch.zeros_like(out[i, j]))
                continue
            ref = reference_attention(q[i, j].float(), k[:visible], v[:visible], scale)
            worst = max(worst, row_error(out[i, j], ref, torch.float16))
    assert worst <= 1e-3, worst


@pytest.mark.parametrize("fmt", ["turboquant_4bit_nc", "turboquant_k8v4", "turbo4"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dequant_is_the_cpu_decode_rounded(fmt, dtype):
    d, kvh = 128, 4
    seq_lens = [40, 200, 1]
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=5)
    k, v = tq.dequant(cache, table, lens, fmt, d, dtype=dtype, validate=True)
    row = 0
    for i, n in enumerate(seq_lens):
        kc, vc = cpu_kv(cache, table, i, n, fmt, d)
        assert torch.equal(k[row:row + n].cpu(), kc.to(dtype))
        assert torch.equal(v[row:row + n].cpu(), vc.to(dtype))
        row += n


@pytest.mark.parametrize("q_len", [4, 16])
def test_fused_multi_query_equals_dense_path_and_single_queries(q_len):
    # three independent routes to the same attention: the fused kernel, dequant + SDPA, and q_len
    # single-query decodes with the lengths cut to what each query sees
    fmt, d, kvh, hq = "turboquant_4bit_nc", 128, 8, 32
    seq_lens = [500, 77, 1000]
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=11)
    q = torch.randn(len(seq_lens), q_len, hq, d, generator=gen(12)).half().to(DEV)
    fused = tq.decode(q, cache, table, lens, fmt, d ** -0.5)
    dense = tq.decode_dense(q, cache, table, lens, fmt, d ** -0.5)
    assert (fused.float() - dense.float()).abs().max().item() < 2e-3
    for j in range(q_len):
        one = tq.decode(q[:, j].contiguous(), cache, table, lens - (q_len - 1 - j), fmt, d ** -0.5)
        assert (fused[:, j].float() - one.float()).abs().max().item() < 2e-3


@pytest.mark.parametrize("q_len, dtype", [(2, torch.float16), (2, torch.bfloat16), (1, torch.bfloat16)])
def test_decode_under_cuda_graph_replay(q_len, dtype):
    # (bf16 queries are converted to fp16 in the workspace first: that copy is captured too)
    fmt, d, kvh, hq = "turboquant_k3v4_nc", 128, 2, 8
    cache, table, _, _ = paged_setup(fmt, d, [600, 600, 600], kvh, seed=7, dtype=dtype)
    max_len, splits = 600, 4
    ws = torch.empty(tq.decode_workspace_bytes(fmt, 3, q_len, hq, kvh, d, 16, max_len, splits, dtype),
                     dtype=torch.uint8, device=DEV)
    q = torch.zeros(3, q_len, hq, d, dtype=dtype, device=DEV)
    lens = torch.full((3,), 600, dtype=torch.int32, device=DEV)
    out = torch.empty_like(q)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the capture
        tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, max_len, splits)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, max_len, splits)
    for seed, new_lens in [(8, [600, 333, 2]), (9, [17, 600, 450])]:
        q.copy_(torch.randn(3, q_len, hq, d, generator=gen(seed)).to(dtype))
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        eager = tq.decode(q, cache, table, lens, fmt, d ** -0.5, max_seq_len=max_len, num_splits=splits)
        assert torch.equal(out, eager)


def test_ops_compile_into_one_graph_with_the_eager_bytes_and_outputs():
    # torch.compile(fullgraph=True) traces store, decode_out and dequant_out through their fake kernels (no graph
    # break); the compiled function writes the cache bytes, the attention and the dequantized K/V that eager
    # calls write (the kernels are deterministic), for q_len 1 and 3
    fmt, d, kvh, hq, block = "turboquant_4bit_nc", 128, 2, 8, 16
    seq_lens = [40, 200, 17]
    cache, table, lens, _ = paged_setup(fmt, d, seq_lens, kvh, seed=21)
    new_k = torch.randn(3, kvh, d, generator=gen(22)).half().to(DEV)
    new_v = torch.randn(3, kvh, d, generator=gen(23)).half().to(DEV)
    # the new tokens go to each sequence's last position, which the decode and the dequant then read
    slots = torch.tensor([int(table[i, (n - 1) // block]) * block + (n - 1) % block for i, n in enumerate(seq_lens)],
                         dtype=torch.int64, device=DEV)
    offsets = (torch.cumsum(lens.long(), 0) - lens.long()).to(torch.int32)
    rows, max_len = int(lens.sum()), table.shape[1] * block

    def step(cache, q, out, ws, k_out, v_out):
        tq.store(new_k, new_v, cache, slots, fmt)
        tq.decode_out(out, q, cache, table, lens, ws, fmt, d ** -0.5, max_len, 2)
        tq.dequant_out(k_out, v_out, cache, table, lens, offsets, fmt, max_len)

    compiled = torch.compile(step, fullgraph=True)
    for q_len in (1, 3):
        q = torch.randn(3, q_len, hq, d, generator=gen(24 + q_len)).half().to(DEV)
        ws_bytes = tq.decode_workspace_bytes(fmt, 3, q_len, hq, kvh, d, block, max_len, 2)
        results = []
        for fn in (step, compiled):
            c = cache.clone()
            out = torch.empty_like(q)
            ws = torch.empty(ws_bytes, dtype=torch.uint8, device=DEV)
            k_out = torch.empty(rows, kvh, d, dtype=torch.half, device=DEV)
            v_out = torch.empty_like(k_out)
            fn(c, q, out, ws, k_out, v_out)
            results.append((c, out, k_out, v_out))
        for eager, comp in zip(*results):
            assert torch.equal(eager, comp)


@pytest.mark.parametrize("bad, match", [
    (dict(key_dtype=torch.float32), "key must be Half"),
    (dict(cache_dtype=torch.int8), "kv_cache must be uint8"),
    (dict(fmt="turboquant_9bit"), "turboquant_9bit"),
    (dict(d=96), "head_dim 96"),
    (dict(slot_dtype=torch.int32), "slot_mapping must be Long"),
    (dict(key_device="cpu"), "key must be a CUDA tensor"),
    (dict(slot_len=3), "slot_mapping must be a contiguous"),
    (dict(heads=3), "kv heads"),
    (dict(value_dtype=torch.bfloat16), "value must be Half"),  # the key's type
    (dict(key_dtype=torch.bfloat16), "value must be BFloat16"),
])
def test_store_refuses_bad_arguments_by_name(bad, match):
    fmt, d, h = bad.get("fmt", "turboquant_4bit_nc"), bad.get("d", 128), 2
    good_slot = tq.slot_bytes("turboquant_4bit_nc", 128)
    cache = torch.zeros(2, 16, h, good_slot, dtype=bad.get("cache_dtype", torch.uint8), device=DEV)
    key = torch.zeros(5, bad.get("heads", h), d, dtype=bad.get("key_dtype", torch.half), device=bad.get("key_device", DEV))
    value = torch.zeros(5, bad.get("heads", h), d, dtype=bad.get("value_dtype", torch.half), device=DEV)
    slots = torch.arange(bad.get("slot_len", 5), dtype=bad.get("slot_dtype", torch.int64), device=DEV)
    with pytest.raises(RuntimeError, match=match):
        tq.store(key, value, cache, slots, fmt)


def test_decode_refuses_bad_arguments_by_name():
    fmt, d = "turboquant_4bit_nc", 128
    cache, table, lens, _ = paged_setup(fmt, d, [900], 2, seed=11)
    q = torch.zeros(1, 8, d, dtype=torch.half, device=DEV)
    with pytest.raises(RuntimeError, match="query must be Half or BFloat16"):
        tq.decode(q.float(), cache, table, lens, fmt, 0.1)
    with pytest.raises(RuntimeError, match="out must be BFloat16"):  # the query's type
        tq.decode_out(torch.empty_like(q), q.bfloat16(), cache, table, lens,
                      torch.empty(1 << 20, dtype=torch.uint8, device=DEV), fmt, 0.1, 900, 0)
    with pytest.raises(ValueError, match="exceed fp16's 65504"):  # bf16 queries become fp16 in the kernels
        tq.decode(torch.full_like(q, 1e5, dtype=torch.bfloat16), cache, table, lens, fmt, 0.1, validate=True)
    # a bf16 call needs the workspace for its fp16 queries too
    assert tq.decode_workspace_bytes(fmt, 1, 1, 8, 2, d, 16, 900, 0, torch.bfloat16) > \
        tq.decode_workspace_bytes(fmt, 1, 1, 8, 2, d, 16, 900, 0)
    with pytest.raises(RuntimeError, match="block_table must be Int"):
        tq.decode(q, cache, table.long(), lens, fmt, 0.1)
    with pytest.raises(RuntimeError, match="seq_lens must be a contiguous"):
        tq.decode(q, cache, table, torch.zeros(2, dtype=torch.int32, device=DEV), fmt, 0.1)
    with pytest.raises(RuntimeError, match="query has 2 sequences"):
        tq.decode(torch.zeros(2, 8, d, dtype=torch.half, device=DEV), cache, table, lens, fmt, 0.1)
    with pytest.raises(RuntimeError, match="last dim is"):
        tq.decode(q, cache, table, lens, "turboquant_k3v4_nc", 0.1)
    with pytest.raises(RuntimeError, match="scale"):
        tq.decode(q, cache, table, lens, fmt, math.nan)
    assert tq.decode_workspace_bytes(fmt, 1, 1, 8, 2, d, 16, 900, 0) > 0  # a long sequence is split
    with pytest.raises(RuntimeError, match="workspace has 0 bytes"):
        tq.decode_out(torch.empty_like(q), q, cache, table, lens, torch.empty(0, dtype=torch.uint8, device=DEV), fmt,
                      0.1, 900, 0)
    with pytest.raises(ValueError, match="block_table"):
        bad = table.clone()
        bad[0, 0] = 10 ** 6
        tq.decode(q, cache, bad, lens, fmt, 0.1, validate=True)
    with pytest.raises(ValueError, match="slot_mapping"):
        tq.store(torch.zeros(1, 2, d, dtype=torch.half, device=DEV), torch.zeros(1, 2, d, dtype=torch.half, device=DEV),
                 cache, torch.tensor([10 ** 6], device=DEV), fmt, validate=True)
