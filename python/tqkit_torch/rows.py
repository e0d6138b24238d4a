"""decode_rows' tables: a query_start_loc batch as single-query rows. Needs torch but not the extension, so
tests/test_rows_cpu.py checks it on the CPU."""
import torch


def row_tables(query_start_loc, seq_lens, block_table, num_tokens: int):
    """For every query row r (sequence i's j-th of n queries): block_table[i] and max(0, seq_lens[i] - n + 1 + j),
    the positions it sees (causal within the chunk). Built on query_start_loc's device without reading
    anything on the host (num_tokens, the query's rows, sizes the result), in seven small launches: decode()
    runs this after reading the counts on the host, so each launch's host time shows as GPU idle time."""
    ends = query_start_loc[1:]
    r1 = torch.arange(1, num_tokens + 1, device=ends.device, dtype=ends.dtype)  # row r's r + 1
    # row r lies in sequence i = #{ends <= r} = #{ends < r + 1}; its length seq_lens[i] - n + 1 + j, with
    # j = r - starts[i] and n = ends[i] - starts[i], is seq_lens[i] - ends[i] + r + 1
    seq = torch.searchsorted(ends, r1)
    lens = (seq_lens - ends).index_select(0, seq).add_(r1).clamp_(min=0).to(torch.int32)
    return block_table.index_select(0, seq), lens
