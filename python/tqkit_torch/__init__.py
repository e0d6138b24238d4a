"""PyTorch operators over tqkit's CUDA kernels for TurboQuant KV caches, on
vLLM's cache tensor and argument conventions.

    import tqkit_torch as tq
    cache = torch.zeros(num_blocks, 16, num_kv_heads, tq.slot_bytes("turboquant_4bit_nc", 128),
                        dtype=torch.uint8, device="cuda")
    tq.store(key, value, cache, slot_mapping, "turboquant_4bit_nc")          # new tokens -> slots
    out = tq.decode(query, cache, block_table, seq_lens, "turboquant_4bit_nc", scale=128 ** -0.5)
    k, v = tq.dequant(cache, block_table, seq_lens, "turboquant_4bit_nc", head_dim=128)

Layouts (as vLLM's TurboQuant backend):
  kv_cache      uint8 [num_blocks, block_size, num_kv_heads, slot_bytes]
  key, value    fp16 or bf16 [num_tokens, num_kv_heads, head_dim]; slot_mapping int64 [num_tokens]
  query, out    fp16 or bf16 (out: the query's type) [num_seqs, num_heads, head_dim] or
                [num_seqs, q_len, num_heads, head_dim]
                or, with query_start_loc int32 [num_seqs + 1] (vLLM's: sequence i's queries are rows
                query_start_loc[i] ... query_start_loc[i + 1] - 1), [num_tokens, num_heads, head_dim]
  block_table   int32 [num_seqs, max_blocks]; seq_lens int32 [num_seqs], the new tokens included
Query j of q_len attends to positions [0, seq_len - q_len + j] (query_start_loc: q_len is the
sequence's own count, 1 ... max_query_len). bf16 queries are converted to fp16
for the kernels (exact for every magnitude 2^-17 ... 65280; validate=True refuses larger ones), and
the output is rounded to bf16 once.

q_len 1 ... 128 runs the fused multi-query decode: one launch whose kernel reads each
cache page once per 16 query columns (q_len x heads per kv head), causal within the
chunk. decode_dense is the large-chunk path (dequant to fp16, then torch SDPA);
decode() takes it where takes_dense(q_len, num_heads, num_kv_heads): q_len >=
DENSE_MIN_Q_LEN (DENSE_MIN_Q_LEN_SMALL_G below 8 query heads per kv head; measured
crossover: see python/examples/bench_multi_query.py and experiments/results/kernels.md).
With query_start_loc it decides per sequence: a chunk that takes_dense goes dense, the
decodes beside it stay fused (two calls, each on its sequences' rows), or, where one
chunk needs many fused passes among single-query decodes (takes_rows), run as
decode_rows: every query a single-query row. tqkit_torch.paths holds the rules.

Formats: turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc, turboquant_k8v4,
turbo2, turbo3, turbo4, turbo4-qjl (and mse/fp8 + u3/u4 specs); head_dim 64, 128, 256.

CUDA graphs: decode_out / dequant_out and store allocate nothing; size the
workspace once with decode_workspace_bytes and a fixed num_splits (> 0), then
capture. The wrappers decode / dequant allocate their outputs (not for capture).

torch.compile / torch.export: store, decode and dequant have fake kernels (they write into the
tensors passed and return nothing), so store, decode_out and dequant_out trace without a graph
break. The allocating forms read lengths on the host (dequant always, decode where takes_dense
holds or, with query_start_loc, where reads_counts does), which breaks a compiled graph there;
given vLLM's host copies (seq_lens_cpu, query_start_loc_cpu) they read those instead.
"""

import itertools

import torch

from . import _C  # noqa: F401  (registers torch.ops.tqkit)
from .rows import row_tables
from .paths import (DENSE_MIN_Q_LEN, DENSE_MIN_Q_LEN_SMALL_G, goes_dense, reads_counts, takes_dense, takes_rows,
                    varlen_path, varlen_split)

_ops = torch.ops.tqkit


def _register_fake_kernels():
    """Fake kernels for torch.compile / torch.export, which trace the ops with FakeTensors: store, decode and
    dequant write into tensors the caller passes (their schemas mark them mutated) and return nothing, so a
    trace needs no shapes from them. The argument checks stay in the CUDA kernels' wrappers and run when the
    compiled graph runs."""
    register = getattr(torch.library, "register_fake", None)  # torch >= 2.4
    if register is None:
        return
    for name in ("store", "decode", "dequant"):
        register(f"tqkit::{name}", lambda *args, **kwargs: None)


_register_fake_kernels()

__all__ = ["slot_bytes", "store", "decode", "decode_out", "decode_dense", "decode_rows", "decode_workspace_bytes",
           "dequant", "dequant_out", "encode_cpu", "decode_cpu", "validate_indices", "validate_query_start",
           "takes_dense", "takes_rows", "varlen_path", "DENSE_MIN_Q_LEN", "DENSE_MIN_Q_LEN_SMALL_G"]


def slot_bytes(format: str, head_dim: int) -> int:
    """Bytes of one token-head slot of `format` at `head_dim` (the cache's last dim)."""
    return _ops.slot_bytes(format, head_dim)


def validate_indices(kv_cache, slot_mapping=None, block_table=None, seq_lens=None, max_seq_len=None):
    """Checks the contents the kernels trust (one device synchronisation):
    slot_mapping < num_blocks * block_size, block_table entries the sequences
    use in [0, num_blocks), 0 <= seq_lens <= max_seq_len. Raises ValueError naming the argument."""
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    if slot_mapping is not None and slot_mapping.numel() and int(slot_mapping.max()) >= nb * bs:
        raise ValueError(f"slot_mapping: slot {int(slot_mapping.max())} is beyond the cache's {nb * bs} slots")
    if seq_lens is not None:
        lo, hi = int(seq_lens.min()), int(seq_lens.max())
        if lo < 0 or (max_seq_len is not None and hi > max_seq_len):
            raise ValueError(f"seq_lens: values in [{lo}, {hi}] are outside [0, max_seq_len={max_seq_len}]")
        if block_table is not None:
            need = (seq_lens.to(torch.int64) + bs - 1) // bs  # blocks each sequence reads
            cols = torch.arange(block_table.shape[1], device=block_table.device)
            used = cols[None, :] < need[:, None]
            bad = used & ((block_table < 0) | (block_table >= nb))
            if bool(bad.any()):
                i, p = (int(x) for x in bad.nonzero()[0])
                raise ValueError(f"block_table[{i}, {p}] = {int(block_table[i, p])} is not a block of the cache "
                                 f"(num_blocks {nb})")


def validate_query_start(query_start_loc, num_tokens: int, max_query_len: int):
    """Checks query_start_loc's contents (one device synchronisation): 0 first, num_tokens last, and every
    sequence's count (the differences) in 1 ... max_query_len. Raises ValueError naming the argument."""
    q = query_start_loc.to(torch.int64)
    if int(q[0]) != 0 or int(q[-1]) != num_tokens:
        raise ValueError(f"query_start_loc: must run from 0 to the query's {num_tokens} rows "
                         f"(got {int(q[0])} ... {int(q[-1])})")
    counts = q[1:] - q[:-1]
    bad = (counts < 1) | (counts > max_query_len)
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"query_start_loc: sequence {i} has {int(counts[i])} queries, not 1 ... max_query_len "
                         f"{max_query_len}")


def store(key, value, kv_cache, slot_mapping, format: str, validate: bool = False):
    """Quantizes key/value (fp16 or bf16 [num_tokens, num_kv_heads, head_dim]) into their slots (in place)."""
    if validate:
        validate_indices(kv_cache, slot_mapping=slot_mapping)
    _ops.store(key, value, kv_cache, slot_mapping, format)


def decode_workspace_bytes(format, num_seqs, q_len, num_heads, num_kv_heads, head_dim, block_size, max_seq_len,
                           num_splits=0, dtype=torch.float16) -> int:
    """Device bytes decode_out needs for these shapes (0 num_splits: automatic) and query dtype: for q_len
    queries per sequence, or with query_start_loc for max_query_len = q_len."""
    return _ops.decode_workspace_bytes(format, num_seqs, q_len, num_heads, num_kv_heads, head_dim, block_size,
                                       max_seq_len, num_splits, dtype == torch.bfloat16)


def _validate_query(query):
    """bf16 queries become fp16 in the kernels: their magnitudes must fit (one device synchronisation)."""
    if query.dtype != torch.bfloat16 or not query.numel():
        return
    top = float(query.abs().max())
    if top > 65504:
        raise ValueError(f"query: bf16 values up to {top} exceed fp16's 65504, the kernels' query type")


def _qshape(query):
    if query.dim() == 3:
        return query.shape[0], 1, query.shape[1], query.shape[2]
    return tuple(query.shape)


def decode_out(out, query, kv_cache, block_table, seq_lens, workspace, format: str, scale: float, max_seq_len: int,
               num_splits: int = 0, query_start_loc=None, max_query_len: int = 0):
    """Attention of query over the quantized cache into out (query's type and shape). No allocation.
    query_start_loc (int32 [num_seqs + 1] on the device) with max_query_len (1 ... 128; the workspace is
    decode_workspace_bytes' for q_len = max_query_len): query [num_tokens, num_heads, head_dim] holds
    sequence i's queries in rows query_start_loc[i] ... query_start_loc[i + 1] - 1."""
    _ops.decode(out, query, kv_cache, block_table, seq_lens, workspace, format, float(scale), int(max_seq_len),
                int(num_splits), query_start_loc, int(max_query_len))


def decode(query, kv_cache, block_table, seq_lens, format: str, scale: float, max_seq_len: int = None,
           num_splits: int = 0, validate: bool = False, query_start_loc=None, max_query_len: int = None,
           path: str = None, query_start_loc_cpu=None, seq_lens_cpu=None):
    """Allocating form of decode_out, on the path tqkit_torch.paths picks: decode_dense where takes_dense(q_len,
    num_heads, num_kv_heads); with query_start_loc per sequence (goes_dense), and the rest as one fused launch
    or, where takes_rows, as decode_rows. path ('fused', 'dense', 'rows'; rows needs query_start_loc) forces
    one path for the whole batch.
    max_seq_len defaults to block_table's capacity; with query_start_loc, max_query_len to the largest
    count (read on the host).
    query_start_loc_cpu, seq_lens_cpu: host copies of query_start_loc and seq_lens (vLLM's attention metadata
    has both). Where given, decode() and decode_dense read the counts and lengths from there instead of
    from the device, which costs a synchronisation (a median 0.03 ms per call, up to 0.13, over the 27 batches
    of G 1-16 that read them at B 32, 32K on one H100: bench_varlen's decode_ms against decode_host_ms)."""
    if path not in (None, "fused", "dense", "rows"):
        raise ValueError(f"path: {path!r} is not 'fused', 'dense', 'rows' or None")
    if max_seq_len is None:
        max_seq_len = block_table.shape[1] * kv_cache.shape[1]
    _check_host_copies(query_start_loc, query_start_loc_cpu, seq_lens, seq_lens_cpu, validate)
    if query_start_loc is not None:
        if query.dim() != 3:
            raise ValueError(f"query: with query_start_loc it must be [num_tokens, num_heads, head_dim], got "
                             f"{tuple(query.shape)}")
        if max_query_len is None:
            query_start_loc_cpu = _host_copy(query_start_loc_cpu, query_start_loc)  # kept for the path's choice
            max_query_len = int((query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]).max())
    elif path == "rows":
        raise ValueError("path: 'rows' needs query_start_loc")
    if validate:
        validate_indices(kv_cache, block_table=block_table, seq_lens=seq_lens, max_seq_len=max_seq_len)
        _validate_query(query)
        if query_start_loc is not None:
            validate_query_start(query_start_loc, query.shape[0], max_query_len)
    if query_start_loc is not None:
        return _decode_varlen(query, kv_cache, block_table, seq_lens, format, scale, max_seq_len, num_splits,
                              query_start_loc, max_query_len, path, query_start_loc_cpu, seq_lens_cpu)
    _, q_len, heads, _ = _qshape(query)
    kvh = kv_cache.shape[2]
    dense = path == "dense"
    if path is None and takes_dense(q_len, heads, kvh):
        # (every sequence must hold its chunk: the shortest decides; the one host copy serves decode_dense too)
        seq_lens_cpu = _host_copy(seq_lens_cpu, seq_lens)
        dense = goes_dense(q_len, int(seq_lens_cpu.min()) if len(seq_lens_cpu) else 0, heads, kvh)
    if dense:
        return decode_dense(query, kv_cache, block_table, seq_lens, format, scale, max_seq_len,
                            seq_lens_cpu=seq_lens_cpu)
    return _decode_fused(query, kv_cache, block_table, seq_lens, format, scale, max_seq_len, num_splits)


def _check_host_copies(query_start_loc, query_start_loc_cpu, seq_lens, seq_lens_cpu, validate):
    """decode()'s and decode_dense's host copies: query_start_loc_cpu only beside query_start_loc, each one
    as _check_host_copy checks it."""
    if query_start_loc_cpu is not None and query_start_loc is None:
        raise ValueError("query_start_loc_cpu: given without query_start_loc")
    _check_host_copy("query_start_loc_cpu", query_start_loc_cpu, query_start_loc, validate)
    _check_host_copy("seq_lens_cpu", seq_lens_cpu, seq_lens, validate)


def _check_host_copy(name, host, dev, validate):
    """A host copy of a device argument (query_start_loc_cpu, seq_lens_cpu): None, or an integer CPU tensor of
    the device tensor's shape; with validate, equal to it (one synchronisation)."""
    if host is None:
        return
    if not isinstance(host, torch.Tensor) or host.device.type != "cpu":
        raise ValueError(f"{name}: must be a CPU tensor, got {getattr(host, 'device', type(host).__name__)}")
    if host.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name}: must be int32 or int64, got {host.dtype}")
    if host.shape != dev.shape:
        raise ValueError(f"{name}: shape {tuple(host.shape)} differs from the device tensor's {tuple(dev.shape)}")
    if validate and not torch.equal(host.to(torch.int64), dev.cpu().to(torch.int64)):
        raise ValueError(f"{name}: differs from the device tensor it copies")


def _host_copy(host, dev):
    """A host copy of dev: host where given, else dev copied to the host (one synchronisation)."""
    return dev.cpu() if host is None else host


def _to_device(host, device):
    """A CPU tensor copied to device without a synchronisation: staged in pinned memory and copied
    asynchronously (torch's pinned-memory allocator keeps the block until the copy has run); a pageable
    copy would wait for the stream to drain."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _decode_varlen(query, kv_cache, block_table, seq_lens, format, scale, max_seq_len, num_splits, query_start_loc,
                   max_query_len, path, query_start_loc_cpu=None, seq_lens_cpu=None):
    """decode() with query_start_loc (path None: per sequence, tqkit_torch.paths.varlen_path). A batch split
    between paths (a long chunk next to decodes, as vLLM schedules a chunked prefill) runs one call per path
    on its sequences' rows."""
    b, heads, kvh = query_start_loc.shape[0] - 1, query.shape[1], kv_cache.shape[2]

    def run(part, q, qsl, idx, mq, qsl_cpu=None, lens_cpu=None):  # (the host copies: for decode_dense)
        t, lens = (block_table, seq_lens) if idx is None else (block_table[idx], seq_lens[idx])
        if part == "dense":
            return decode_dense(q, kv_cache, t, lens, format, scale, max_seq_len, query_start_loc=qsl,
                                query_start_loc_cpu=qsl_cpu, seq_lens_cpu=lens_cpu)
        if part == "rows":
            return decode_rows(q, kv_cache, t, lens, format, scale, qsl, max_seq_len, num_splits)
        return _decode_fused(q, kv_cache, t, lens, format, scale, max_seq_len, num_splits, qsl, mq)

    if path is not None:
        return run(path, query, query_start_loc, None, max_query_len, query_start_loc_cpu, seq_lens_cpu)
    if not reads_counts(max_query_len, heads, kvh):  # one fused pass: no counts needed on the host
        return run("fused", query, query_start_loc, None, max_query_len)
    query_start_loc_cpu = _host_copy(query_start_loc_cpu, query_start_loc)
    seq_lens_cpu = _host_copy(seq_lens_cpu, seq_lens)
    starts, lens = query_start_loc_cpu.tolist(), seq_lens_cpu.tolist()
    counts = [starts[i + 1] - starts[i] for i in range(b)]
    dense, rest, rest_path = varlen_split(counts, lens, heads, kvh)
    if not rest or not dense:
        return run("dense" if not rest else rest_path, query, query_start_loc, None, max_query_len,
                   query_start_loc_cpu, seq_lens_cpu)
    out = torch.empty_like(query)
    for seqs, part in ((dense, "dense"), (rest, rest_path)):
        part_counts = [counts[i] for i in seqs]
        starts_part = [0, *itertools.accumulate(part_counts)]
        token_rows = [r for i in seqs for r in range(starts[i], starts[i + 1])]
        # the part's sequences, query rows and starts in one copy to the device (not one arange per sequence)
        idx, rows, qsl = _to_device(torch.tensor(seqs + token_rows + starts_part, dtype=torch.int64),
                                    query.device).split([len(seqs), len(token_rows), len(starts_part)])
        # the dense part's host copies of its starts and lengths (the fused and rows launches read neither)
        host = (torch.tensor(starts_part, dtype=torch.int32), seq_lens_cpu[seqs]) if part == "dense" else ()
        out[rows] = run(part, query[rows], qsl.to(torch.int32), idx, max(part_counts), *host)
    return out


def _decode_fused(query, kv_cache, block_table, seq_lens, format, scale, max_seq_len, num_splits, query_start_loc=None,
                  max_query_len=0):
    """decode_out (the fused kernel, q_len or max_query_len ≤ 128) with its workspace and output allocated."""
    if query_start_loc is None:
        b, q_len, heads, d = _qshape(query)
    else:
        b, q_len, heads, d = query_start_loc.shape[0] - 1, max_query_len, query.shape[1], query.shape[2]
    ws = torch.empty(decode_workspace_bytes(format, b, q_len, heads, kv_cache.shape[2], d, kv_cache.shape[1],
                                            max_seq_len, num_splits, query.dtype), dtype=torch.uint8,
                     device=query.device)
    out = torch.empty_like(query)
    decode_out(out, query, kv_cache, block_table, seq_lens, ws, format, scale, max_seq_len, num_splits,
               query_start_loc, max_query_len)
    return out


def dequant_out(k_out, v_out, kv_cache, block_table, seq_lens, out_offsets, format: str, max_seq_len: int):
    """Dequantizes sequence i's positions [0, seq_lens[i]) into rows out_offsets[i] + pos of k_out, v_out
    (fp16 or bf16 [rows, num_kv_heads, head_dim]); K in the original basis. No allocation."""
    _ops.dequant(k_out, v_out, kv_cache, block_table, seq_lens, out_offsets, format, int(max_seq_len))


def dequant(kv_cache, block_table, seq_lens, format: str, head_dim: int, dtype=torch.float16, max_seq_len=None,
            validate: bool = False, seq_lens_cpu=None):
    """Allocating form of dequant_out: returns k, v [sum(seq_lens), num_kv_heads, head_dim], sequences in order.
    The row count is read on the host: from seq_lens_cpu where given (no synchronisation), else from seq_lens."""
    if max_seq_len is None:
        max_seq_len = block_table.shape[1] * kv_cache.shape[1]
    _check_host_copy("seq_lens_cpu", seq_lens_cpu, seq_lens, validate)
    if validate:
        validate_indices(kv_cache, block_table=block_table, seq_lens=seq_lens, max_seq_len=max_seq_len)
    lens = seq_lens.to(torch.int64)
    offsets = (torch.cumsum(lens, 0) - lens).to(torch.int32)
    rows = int(_host_copy(seq_lens_cpu, seq_lens).sum())
    k = torch.empty(rows, kv_cache.shape[2], head_dim, dtype=dtype, device=kv_cache.device)
    v = torch.empty_like(k)
    dequant_out(k, v, kv_cache, block_table, seq_lens, offsets, format, max_seq_len)
    return k, v


def _causal_sdpa(q, k, v, scale):
    """q [n, heads, q_len, d], k/v [n, kv_heads, L, d]: query j sees keys [0, L - q_len + j]."""
    q_len, L = q.shape[2], k.shape[2]
    try:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q_len, L)
    except ImportError:
        j = torch.arange(q_len, device=q.device)[:, None]
        mask = torch.arange(L, device=q.device)[None, :] <= L - q_len + j
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if q.shape[1] == k.shape[1]:
        return sdpa(q, k, v, attn_mask=mask, scale=scale)
    try:
        return sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    except TypeError:  # a torch without enable_gqa: repeat the kv heads
        group = q.shape[1] // k.shape[1]
        return sdpa(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=mask, scale=scale)


def decode_dense(query, kv_cache, block_table, seq_lens, format: str, scale: float, max_seq_len: int = None,
                 query_start_loc=None, query_start_loc_cpu=None, seq_lens_cpu=None):
    """The large-chunk path: every sequence's cache dequantized to fp16 (dequant), then torch SDPA with the
    causal mask aligned to the end (query j sees positions [0, seq_len - q_len + j]). query [num_seqs, q_len,
    num_heads, head_dim] fp16 or bf16 (bf16: converted to fp16 as the fused kernels do, the output rounded
    back), or [num_tokens, num_heads, head_dim] with query_start_loc; needs seq_len >= q_len. Reads seq_lens
    (and query_start_loc) on the host, from their host copies (decode()'s seq_lens_cpu, query_start_loc_cpu)
    where given, else with a synchronisation; not for CUDA graphs."""
    _check_host_copies(query_start_loc, query_start_loc_cpu, seq_lens, seq_lens_cpu, False)
    seq_lens_cpu = _host_copy(seq_lens_cpu, seq_lens)  # one read, for the checks here and dequant's row count
    lens = seq_lens_cpu.tolist()
    if query_start_loc is not None:
        if query.dim() != 3:
            raise ValueError(f"query: with query_start_loc decode_dense needs [num_tokens, num_heads, head_dim], "
                             f"got {tuple(query.shape)}")
        starts = _host_copy(query_start_loc_cpu, query_start_loc).tolist()
        short = [i for i, n in enumerate(lens) if n < starts[i + 1] - starts[i]]
        if short:
            i = short[0]
            raise ValueError(f"seq_lens: decode_dense needs every sequence to hold its queries (sequence {i}: "
                             f"{lens[i]} tokens, {starts[i + 1] - starts[i]} queries)")
        k, v = dequant(kv_cache, block_table, seq_lens, format, query.shape[2], max_seq_len=max_seq_len,
                       seq_lens_cpu=seq_lens_cpu)
        out = torch.empty_like(query)
        q16 = query.to(torch.float16)
        rows = [slice(starts[i], starts[i + 1]) for i in range(len(lens))]
        for r, o in zip(rows, _sdpa_per_sequence((q16[r] for r in rows), k, v, lens, scale)):
            out[r] = o
        return out
    if query.dim() != 4:
        raise ValueError(f"query: decode_dense needs [num_seqs, q_len, num_heads, head_dim], got {tuple(query.shape)}")
    b, q_len, heads, d = query.shape
    if min(lens) < q_len:
        raise ValueError(f"seq_lens: decode_dense needs every sequence to hold its {q_len} queries (shortest {min(lens)})")
    k, v = dequant(kv_cache, block_table, seq_lens, format, d, max_seq_len=max_seq_len, seq_lens_cpu=seq_lens_cpu)
    out = torch.empty_like(query)
    query = query.to(torch.float16)
    if all(n == lens[0] for n in lens):  # one batched SDPA
        n = lens[0]
        kk = k.view(b, n, -1, d).transpose(1, 2)
        vv = v.view(b, n, -1, d).transpose(1, 2)
        out.copy_(_causal_sdpa(query.transpose(1, 2), kk, vv, scale).transpose(1, 2))
        return out
    for i, o in enumerate(_sdpa_per_sequence(query, k, v, lens, scale)):
        out[i] = o
    return out


def decode_rows(query, kv_cache, block_table, seq_lens, format: str, scale: float, query_start_loc,
                max_seq_len: int = None, num_splits: int = 0):
    """A batch with query_start_loc as one single-query decode with every query a row of its own: query j of
    a sequence with n queries becomes a row with that sequence's block-table row and seq_len - n + 1 + j
    positions (no position: a zero row, as the fused kernel writes). What a decode-only kernel runs; each
    row reads its positions, so a sequence's cache is read once per query, but the rows are dealt over the
    GPU as evenly as single-query decodes. query [num_tokens, num_heads, head_dim]; nothing is read on the
    host (the rows' block tables and lengths are built on the device)."""
    if query.dim() != 3:
        raise ValueError(f"query: decode_rows needs [num_tokens, num_heads, head_dim], got {tuple(query.shape)}")
    if max_seq_len is None:
        max_seq_len = block_table.shape[1] * kv_cache.shape[1]
    num_tokens, b = query.shape[0], query_start_loc.shape[0] - 1
    if b != seq_lens.shape[0] or b != block_table.shape[0]:
        raise ValueError(f"query_start_loc: {b} sequences, but seq_lens has {seq_lens.shape[0]} and block_table "
                         f"{block_table.shape[0]} rows")
    row_table, row_lens = row_tables(query_start_loc, seq_lens, block_table, num_tokens)
    return _decode_fused(query, kv_cache, row_table, row_lens, format, scale, max_seq_len, num_splits)


def _sdpa_per_sequence(queries, k, v, lens, scale):
    """For each sequence i: the causal SDPA (end-aligned) of its queries (fp16 [n_i, heads, d], the i-th of
    `queries`) over its dequantized rows of k, v (rows sum(lens[:i]) ... of [sum(lens), kv_heads, d])."""
    row = 0
    for qi, n in zip(queries, lens):
        kk, vv = k[row:row + n].transpose(0, 1)[None], v[row:row + n].transpose(0, 1)[None]
        yield _causal_sdpa(qi.transpose(0, 1)[None], kk, vv, scale)[0].transpose(0, 1)
        row += n


def encode_cpu(key, value, format: str):
    """The CPU encoder's slot bytes for float(key), float(value) [N, H, D] (CPU tensors): the oracle."""
    return _ops.encode_cpu(key, value, format)


def decode_cpu(slots, format: str, head_dim: int):
    """The CPU decoder: float32 k, v [..., head_dim] from slot bytes [..., slot_bytes]."""
    return _ops.decode_cpu(slots, format, head_dim)
