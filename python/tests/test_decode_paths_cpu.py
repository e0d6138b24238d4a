"""decode()'s routing on the CPU, without the extension or a GPU: the package is loaded with its kernels replaced
by a float64 attention that follows the fused kernel's contract (query rows, query_start_loc, block table,
lengths, causal within each sequence) and a dequant that copies the cache's halves, while decode_dense runs its
real torch SDPA. Checked against one float64 attention over the whole batch:
- each batch takes the paths tqkit_torch.paths names (fused, rows, dense, or split between them) and every query
  row gets its sequence's output, whichever path and part computed it;
- with vLLM's host copies (query_start_loc_cpu, seq_lens_cpu) nothing reads the device tensors on the host, and
  without them the reads happen (so the guard can fail), once per tensor.
Skipped (reported as skipped) without torch.

    PYTHONPATH=python python -m pytest -q python/tests/test_decode_paths_cpu.py
"""
import importlib.util
import itertools
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")

D, KVH, H, BS = 16, 2, 8, 4  # G 4: rows from 29 queries (8 passes of 4), dense from 80 queries
PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tqkit_torch")


def kv_at(cache, table_row, n):
    t = torch.arange(n)
    x = cache[table_row[t // BS].long(), t % BS]  # [n, KVH, 2D]: key, then value
    return x[..., :D].double(), x[..., D:].double()


def reference(q, cache, table, lens, starts, scale):
    """float64 attention of every query row: query j of a sequence of n queries sees positions
    [0, seq_len - n + j]."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    for i in range(len(starts) - 1):
        n = starts[i + 1] - starts[i]
        for j in range(n):
            k, v = kv_at(cache, table[i], max(0, int(lens[i]) - n + 1 + j))
            if k.shape[0]:
                kk, vv = (x.repeat_interleave(H // KVH, dim=1) for x in (k, v))
                p = torch.softmax(torch.einsum("hd,nhd->hn", q[starts[i] + j].double(), kk) * scale, -1)
                out[starts[i] + j] = torch.einsum("hn,nhd->hd", p, vv)
    return out


def plain(t):
    return t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t


class NoHostRead(torch.Tensor):
    """A 'device' tensor: any read on the host raises."""
    def _refuse(self, *args, **kwargs):
        raise AssertionError("device tensor read on the host")
    cpu = tolist = item = __int__ = __index__ = _refuse


class HostReads(torch.Tensor):
    """A 'device' tensor that logs its host reads."""
    log = []

    def cpu(self, *a, **k):
        HostReads.log.append("cpu")
        return plain(self).cpu()

    def tolist(self):
        HostReads.log.append("tolist")
        return plain(self).tolist()

    def __int__(self):
        HostReads.log.append("int")
        return int(plain(self))


@pytest.fixture(scope="module")
def tq():
    """tqkit_torch loaded under another name with its extension stubbed, its kernels replaced."""
    name = "tqkit_torch_cpu_routing"
    sys.modules[name + "._C"] = types.ModuleType(name + "._C")
    spec = importlib.util.spec_from_file_location(name, os.path.join(PKG, "__init__.py"),
                                                  submodule_search_locations=[PKG])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    saved = getattr(torch.library, "register_fake", None)
    torch.library.register_fake = lambda *args, **kwargs: None  # no tqkit ops to register fakes for
    try:
        spec.loader.exec_module(mod)
    finally:
        if saved is None:
            del torch.library.register_fake
        else:
            torch.library.register_fake = saved
    calls = []

    def fused(query, kv_cache, table, lens, fmt, scale, max_seq_len, num_splits, qsl=None, max_query_len=0):
        query, table, lens, qsl = map(plain, (query, table, lens, qsl))
        # decode_rows calls the fused launch with one single-query row per query: no query_start_loc
        calls.append(("fused" if qsl is not None or query.dim() == 4 else "rows", query.shape[0]))
        q = query.reshape(-1, H, D)
        if qsl is None:  # [num_seqs, (q_len,) heads, d]: q_len rows per sequence
            per = 1 if query.dim() == 3 else query.shape[1]
            qsl = torch.arange(0, q.shape[0] + 1, per)
        return reference(q, plain(kv_cache), table, lens, qsl.tolist(), scale).to(query.dtype).view_as(query)

    def dequant(k_out, v_out, kv_cache, table, lens, offsets, fmt, max_seq_len):
        table, lens, offsets = map(plain, (table, lens, offsets))
        calls.append(("dequant", int(lens.sum())))
        for i in range(table.shape[0]):
            k, v = kv_at(plain(kv_cache), table[i], int(lens[i]))
            o = int(offsets[i])
            k_out[o:o + k.shape[0]] = k.to(k_out.dtype)
            v_out[o:o + v.shape[0]] = v.to(v_out.dtype)

    mod._decode_fused = fused
    mod._ops = types.SimpleNamespace(dequant=dequant)
    mod.calls = calls
    yield mod
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def batch(counts, seq_lens, seed):
    g = torch.Generator().manual_seed(seed)
    pages = max(-(-n // BS) for n in seq_lens)
    nb = len(seq_lens) * pages + 2
    cache = torch.randn(nb, BS, KVH, 2 * D, generator=g).half().float()  # fp16 values: SDPA's dequant is exact
    table = torch.randperm(nb, generator=g)[:len(seq_lens) * pages].view(len(seq_lens), pages).to(torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    starts = [0, *itertools.accumulate(counts)]
    q = torch.randn(starts[-1], H, D, generator=g).half()
    return cache, table, lens, torch.tensor(starts, dtype=torch.int32), q


CASES = [  # (counts, seq_lens, the paths decode() takes)
    ([32] + [1] * 29, [301, 12] + [5 + 11 * i for i in range(28)], "rows"),
    ([16] + [1] * 29, [301, 12] + [5 + 11 * i for i in range(28)], "fused"),
    ([90, 32] + [1] * 20, [301, 30] + [3 + 19 * i for i in range(20)], "dense+rows"),
    ([90, 3, 84, 1], [301, 17, 100, 129], "dense+fused"),
    ([90, 84], [301, 100], "dense"),
    ([4, 1, 16, 2], [301, 17, 12, 129], "fused"),
]


@pytest.mark.parametrize("counts, seq_lens, paths", CASES)
def test_every_query_row_gets_its_sequences_attention_on_the_paths_named(tq, counts, seq_lens, paths):
    cache, table, lens, qsl, q = batch(counts, seq_lens, seed=len(counts))
    assert tq.varlen_path(counts, seq_lens, H, KVH) == paths
    want = reference(q, cache, table, lens, qsl.tolist(), D ** -0.5)
    tq.calls.clear()
    got = tq.decode(q, cache, table, lens, "x", D ** -0.5, query_start_loc=qsl)
    # fused rows are float64 rounded to fp16; dense rows fp16 SDPA over fp16 values
    assert (got.double() - want).abs().max().item() < 2e-3, paths
    dense = [(c, n) for c, n in zip(counts, seq_lens) if tq.goes_dense(c, n, H, KVH)]  # (queries, tokens)
    want_calls = [("dequant", sum(n for _, n in dense))] * ("dense" in paths) + [
        (p, sum(counts) - sum(c for c, _ in dense)) for p in paths.split("+") if p != "dense"]
    assert tq.calls == want_calls


@pytest.mark.parametrize("counts, seq_lens, paths", CASES)
def test_host_copies_spare_every_read_of_the_device_tensors(tq, counts, seq_lens, paths):
    cache, table, lens, qsl, q = batch(counts, seq_lens, seed=len(counts))
    want = tq.decode(q, cache, table, lens, "x", D ** -0.5, query_start_loc=qsl)
    got = tq.decode(q, cache, table, lens.as_subclass(NoHostRead), "x", D ** -0.5,
                    query_start_loc=qsl.as_subclass(NoHostRead), query_start_loc_cpu=qsl.clone(),
                    seq_lens_cpu=lens.clone())
    assert torch.equal(plain(got), want)
    if paths != "fused" or max(counts) > 16:  # batches whose path needs the counts: without copies they read
        with pytest.raises(AssertionError, match="read on the host"):
            tq.decode(q, cache, table, lens.as_subclass(NoHostRead), "x", D ** -0.5,
                      query_start_loc=qsl.as_subclass(NoHostRead), max_query_len=max(counts))


def test_without_host_copies_each_tensor_is_read_once(tq):
    # a uniform dense chunk reads seq_lens once (the shortest length, decode_dense's checks and dequant's
    # row count share the copy); an all-dense varlen batch reads query_start_loc and seq_lens once each
    cache, table, lens, qsl, q = batch([100, 100], [130, 120], seed=3)
    HostReads.log.clear()
    tq.decode(q.view(2, 100, H, D), cache, table, lens.as_subclass(HostReads), "x", D ** -0.5)
    assert HostReads.log == ["cpu"]
    HostReads.log.clear()
    tq.decode(q, cache, table, lens.as_subclass(HostReads), "x", D ** -0.5, query_start_loc=qsl.as_subclass(HostReads))
    assert HostReads.log == ["cpu", "cpu"]
