"""decode_rows' row tables (tqkit_torch/rows.py) on the CPU against a plain loop over the sequences: every query
row gets its sequence's block-table row and the positions the causal rule gives it. Needs torch, not the
extension or a GPU (rows.py is loaded from its file, so the package's extension is not imported); skipped
(reported as skipped) without torch.

    PYTHONPATH=python python -m pytest -q python/tests/test_rows_cpu.py
"""
import importlib.util
import itertools
import os

import pytest

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "tqkit_rows", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tqkit_torch", "rows.py"))
rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rows)


def loop_oracle(counts, seq_lens, table):
    """Row r = sequence i's query j of n: table[i], max(0, seq_lens[i] - n + 1 + j), one row at a time."""
    out_table, out_lens = [], []
    for i, n in enumerate(counts):
        for j in range(n):
            out_table.append(table[i].tolist())
            out_lens.append(max(0, seq_lens[i] - n + 1 + j))
    return out_table, out_lens


@pytest.mark.parametrize("counts, seq_lens", [
    ([1, 1, 1], [5, 1, 300]),                 # single-query decodes: each row is its sequence
    ([16, 1, 1, 1], [301, 17, 64, 2]),        # one chunk among decodes
    ([8, 3, 1], [6, 3, 1]),                   # chunks longer than their sequences: the first rows see nothing
    ([4, 2, 7, 1, 5], [40, 2, 90, 9, 5]),
    ([200] + [1] * 29, [900] + list(range(3, 32))),
    ([3, 0, 2, 0], [10, 4, 2, 7]),            # sequences without queries give no rows
])
def test_row_tables_give_each_query_its_sequence_and_causal_length(counts, seq_lens):
    g = torch.Generator().manual_seed(len(counts))
    table = torch.randint(0, 1000, (len(counts), 7), generator=g, dtype=torch.int32)
    qsl = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    got_table, got_lens = rows.row_tables(qsl, lens, table, sum(counts))
    want_table, want_lens = loop_oracle(counts, seq_lens, table)
    assert got_table.dtype == torch.int32 and got_lens.dtype == torch.int32
    assert got_table.tolist() == want_table
    assert got_lens.tolist() == want_lens
