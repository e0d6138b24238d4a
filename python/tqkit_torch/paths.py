"""decode()'s choice of path, from the shapes and (with query_start_loc) the counts alone. No torch here,
so tests/cli/decode_paths.sh checks the rules against the measured rows without a GPU or torch.

  fused  the fused multi-query kernel (at most 128 queries per sequence), one launch
  dense  dequant + torch SDPA (decode_dense), for long chunks
  rows   every query a single-query row of its own (decode_rows), for a few multi-pass chunks among
         single-query decodes
"""

# decode() runs a chunk of q_len queries as dequant + SDPA (decode_dense) from DENSE_MIN_Q_LEN queries
# (DENSE_MIN_Q_LEN_SMALL_G where a kv head has fewer than 8 query heads), else in the fused kernel (at most
# 128 queries). The crossover is a chunk length rather than a column count: the fused kernel reads the
# cache once per 16 query columns of a kv head (q_len x G), and torch SDPA's grouped-query attention reads
# the dense cache once per query head (G per kv head), so both grow with G. Measured on one H100 with the
# kernels of main at 938b07d (B 32, 32K, d 128, turboquant_4bit_nc, ms fused vs dense;
# python/examples/bench_multi_query.py, experiments/results/kernels/multi_query_crossover.jsonl):
# 16/16 64: 5.8 vs 7.4, 96: 8.9 vs 7.7; 16/8 64: 4.0 vs 6.0, 96: 5.8 vs 5.4; 32/8 64: 7.3 vs 8.7,
# 96: 10.7 vs 9.3; 64/8 48: 10.8 vs 16.0, 64: 14.3-14.6 vs 14.8-15.9 (level), 96: 26.3 vs 15.1;
# 128/8 48: 25.7 vs 28.5, 64: 30.2 vs 28.9.
DENSE_MIN_Q_LEN = 64
DENSE_MIN_Q_LEN_SMALL_G = 80
DENSE_LARGE_G = 8  # query heads per kv head from which DENSE_MIN_Q_LEN applies (DENSE_MIN_Q_LEN_SMALL_G below)

# A query_start_loc batch runs as decode_rows (every query a single-query row) where its group size is in ROWS_GROUPS,
# its longest chunk needs at least ROWS_MIN_PASSES passes of the fused launch, and (where a pass holds more than one
# query) its query rows are at most ROWS_MAX_MEAN per sequence. The fused launch reads a sequence once per pass (16/G
# queries), but runs a long chunk's passes over that one sequence while the single-query sequences beside it leave
# most of their 16-column CTAs idle; the rows read a sequence once per query and are dealt over the GPU like
# single-query decodes. So the rows win where one chunk needs many passes, and lose where every sequence brings
# several queries (more bytes; from G 9 a pass holds one query, so the rows read no more than the fused launch and the
# mean does not matter). Measured through decode() with its path forced (eager calls, the time decode() itself pays:
# it reads the counts on the host first), B 32, 32K, d 128, on one H100 (python/examples/bench_varlen.py,
# experiments/results/kernels/varlen_paths.jsonl), rows/fused:
#   G 4 (32/8; 4bit_nc, k3v4_nc)  32,1x31 0.88, 0.81; 64,1x31 0.91, 0.81; 16,1x31 (4 passes) 1.01, 0.93;
#                                 16x4,1x28 1.33, 1.19; 16x32 2.40, 2.22
#   G 8 (64/8)                    32,1x31 0.77; 16x2,1x30 0.83; 16,1x31 (8 passes) 1.00; 8,1x31 (4) 1.18;
#                                 16x8,1x24 (4.75 rows per sequence) 1.05; 16x32 1.27
#   G 16 (128/8)                  8,1x31 0.84; 16,1x31 0.71; 32,1x31 0.56; 16x8,1x24 0.83; 16x32 0.82;
#                                 4,1x31 0.92; 2,1x31 1.18
#   G 1, 2 (16/16, 16/8)          1.10-5.76 and 1.11-4.68 over every pattern: never
# Replayed from CUDA graphs (the GPU's time alone) the rows gain 5-15% more (G 4 16,1x31 0.90, 0.80), so a
# caller that forces path="rows" and captures it can take them more widely.
ROWS_GROUPS = (4, 8, 16)
ROWS_MIN_PASSES = 8
ROWS_MAX_MEAN = 3.0
PASS_COLUMNS = 16  # query columns (queries x query heads per kv head) one pass of the fused kernel computes


def count_pattern(spec: str):
    """tq-bench's --q-counts notation: '16,1x31' -> [16, 1, 1, ...] (comma-separated query counts, NxM for M
    sequences of N queries)."""
    counts = []
    for part in spec.split(","):
        n, _, m = part.partition("x")
        counts += [int(n)] * (int(m) if m else 1)
    return counts


def group_size(num_heads: int, num_kv_heads: int) -> int:
    """Query heads per kv head."""
    return num_heads // max(1, num_kv_heads)


def takes_dense(q_len: int, num_heads: int, num_kv_heads: int) -> bool:
    """Whether decode() runs a chunk of q_len queries as decode_dense (else the fused kernel)."""
    if q_len > 128:
        return True
    return q_len > 1 and q_len >= (DENSE_MIN_Q_LEN if group_size(num_heads, num_kv_heads) >= DENSE_LARGE_G
                                   else DENSE_MIN_Q_LEN_SMALL_G)


def goes_dense(count: int, seq_len: int, num_heads: int, num_kv_heads: int) -> bool:
    """decode()'s path for one sequence of `count` queries over seq_len tokens: decode_dense where takes_dense
    and the sequence holds its queries (a shorter one stays on the fused kernel, which masks its first
    queries), or where count > 128, beyond the fused kernel."""
    return count > 128 or (takes_dense(count, num_heads, num_kv_heads) and seq_len >= count)


def queries_per_pass(num_heads: int, num_kv_heads: int) -> int:
    """Queries of a sequence that one pass of the fused kernel computes."""
    return max(1, PASS_COLUMNS // max(1, group_size(num_heads, num_kv_heads)))


def passes(count: int, num_heads: int, num_kv_heads: int) -> int:
    """Passes of the fused kernel over a sequence of `count` queries."""
    per_pass = queries_per_pass(num_heads, num_kv_heads)
    return (count + per_pass - 1) // per_pass


def _rows_possible(max_count: int, num_heads: int, num_kv_heads: int) -> bool:
    """Whether a batch whose largest count is max_count may take decode_rows: a group size in ROWS_GROUPS and
    at least ROWS_MIN_PASSES fused passes for that count."""
    return (group_size(num_heads, num_kv_heads) in ROWS_GROUPS and
            passes(max_count, num_heads, num_kv_heads) >= ROWS_MIN_PASSES)


def takes_rows(counts, num_heads: int, num_kv_heads: int) -> bool:
    """Whether decode() runs the sequences with these query counts (those not on the dense path) as
    decode_rows (else one fused launch)."""
    return (bool(counts) and _rows_possible(max(counts), num_heads, num_kv_heads) and
            (queries_per_pass(num_heads, num_kv_heads) == 1 or sum(counts) <= ROWS_MAX_MEAN * len(counts)))


def reads_counts(max_query_len: int, num_heads: int, num_kv_heads: int) -> bool:
    """Whether decode() with query_start_loc needs the counts on the host: only where a sequence may leave
    the fused launch (a dense chunk, or rows)."""
    return takes_dense(max_query_len, num_heads, num_kv_heads) or _rows_possible(max_query_len, num_heads,
                                                                                 num_kv_heads)


def varlen_split(counts, seq_lens, num_heads: int, num_kv_heads: int):
    """decode()'s split of a query_start_loc batch: the sequences (indices) on the dense path, the rest, and the
    rest's path ('rows' where takes_rows, else 'fused')."""
    on_dense = [goes_dense(c, n, num_heads, num_kv_heads) for c, n in zip(counts, seq_lens)]
    dense = [i for i, d in enumerate(on_dense) if d]
    rest = [i for i, d in enumerate(on_dense) if not d]
    return dense, rest, "rows" if takes_rows([counts[i] for i in rest], num_heads, num_kv_heads) else "fused"


def varlen_path(counts, seq_lens, num_heads: int, num_kv_heads: int) -> str:
    """decode()'s paths for a query_start_loc batch: 'dense', 'fused', 'rows', 'dense+fused' or 'dense+rows'."""
    dense, rest, rest_path = varlen_split(counts, seq_lens, num_heads, num_kv_heads)
    return "+".join((["dense"] if dense else []) + ([rest_path] if rest else []))
