"""decode()'s choice for a chunk of q_len queries: the fused multi-query kernel, or dequant + SDPA
(decode_dense). No torch here, so tests/cli/dense_rule.sh checks the rule against the measured rows
without a GPU or torch.
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


def takes_dense(q_len: int, num_heads: int, num_kv_heads: int) -> bool:
    """Whether decode() runs a chunk of q_len queries as decode_dense (else the fused kernel)."""
    if q_len > 128:
        return True
    group = num_heads // max(1, num_kv_heads)
    return q_len > 1 and q_len >= (DENSE_MIN_Q_LEN if group >= DENSE_LARGE_G else DENSE_MIN_Q_LEN_SMALL_G)
