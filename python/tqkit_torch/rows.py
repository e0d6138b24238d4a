"""decode_rows' tables: a query_start_loc batch as single-query rows. Needs torch but not the extension, so
tests/test_rows_cpu.py checks it on the CPU."""
import torch


def row_tables(query_start_loc, seq_lens, block_table, num_tokens: int):
    """For every query row r (sequence i's j-th of n queries): block_table[i] and max(0, seq_lens[i] - n + 1 + j),
    the positions it sees (causal within the chunk). Built on query_start_loc's device without reading
    anything on the host (num_tokens, the query's rows, sizes the result)."""
    b = query_start_loc.shape[0] - 1
    starts = query_start_loc.to(torch.int64)
    counts = starts[1:] - starts[:-1]
    seq = torch.repeat_interleave(torch.arange(b, device=starts.device), counts, output_size=num_tokens)
    j = torch.arange(num_tokens, device=starts.device) - starts[seq]  # the row's place in its sequence's chunk
    lens = (seq_lens.to(torch.int64)[seq] - counts[seq] + 1 + j).clamp_(min=0).to(torch.int32)
    return block_table.index_select(0, seq), lens
