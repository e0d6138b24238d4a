"""tqkit_torch's fake kernels, without a GPU: torch.compile and torch.export trace the ops with FakeTensors, so
store, decode_out and dequant_out must run on them (doing nothing: they write into tensors the caller passes)
and appear as themselves in the traced graph. Skipped (reported as skipped) without torch or the built
extension; the compiled graph's results against eager calls are in test_ops.py (GPU).

    PYTHONPATH=python python -m pytest -q python/tests/test_fake.py
"""
import pytest

torch = pytest.importorskip("torch")
tq = pytest.importorskip("tqkit_torch")
fake_tensor = pytest.importorskip("torch._subclasses.fake_tensor")
proxy_tensor = pytest.importorskip("torch.fx.experimental.proxy_tensor")

FMT, D, KVH, HQ, BLOCK = "turboquant_4bit_nc", 128, 2, 8, 16


def arguments(device, q_len=3):
    """Every argument of store, decode_out and dequant_out for 3 sequences of at most 64 tokens."""
    sb = tq.slot_bytes(FMT, D)
    cache = torch.zeros(8, BLOCK, KVH, sb, dtype=torch.uint8, device=device)
    key = torch.zeros(3, KVH, D, dtype=torch.half, device=device)
    value = torch.zeros_like(key)
    slots = torch.arange(3, dtype=torch.int64, device=device)
    table = torch.zeros(3, 4, dtype=torch.int32, device=device)
    lens = torch.full((3,), 5, dtype=torch.int32, device=device)
    q = torch.zeros(3, q_len, HQ, D, dtype=torch.half, device=device)
    out = torch.empty_like(q)
    ws = torch.empty(1 << 20, dtype=torch.uint8, device=device)  # (decode_workspace_bytes asks the GPU for its SMs)
    k_out = torch.empty(15, KVH, D, dtype=torch.half, device=device)
    v_out = torch.empty_like(k_out)
    offsets = torch.tensor([0, 5, 10], dtype=torch.int32, device=device)
    return key, value, cache, slots, table, lens, q, out, ws, k_out, v_out, offsets


def step(key, value, cache, slots, table, lens, q, out, ws, k_out, v_out, offsets):
    tq.store(key, value, cache, slots, FMT)
    tq.decode_out(out, q, cache, table, lens, ws, FMT, D ** -0.5, 64, 2)
    tq.dequant_out(k_out, v_out, cache, table, lens, offsets, FMT, 64)


def test_the_ops_run_on_fake_cuda_tensors_and_return_nothing():
    with fake_tensor.FakeTensorMode():
        args = arguments("cuda")
        before = [(a.shape, a.dtype, a.device) for a in args]
        key, value, cache, slots, table, lens, q, out, ws, k_out, v_out, offsets = args
        assert torch.ops.tqkit.store(key, value, cache, slots, FMT) is None
        assert torch.ops.tqkit.decode(out, q, cache, table, lens, ws, FMT, D ** -0.5, 64, 2) is None
        # vLLM's varlen layout: [num_tokens, heads, d] rows with query_start_loc and max_query_len
        qsl = torch.tensor([0, 2, 6, 9], dtype=torch.int32, device="cuda")
        rows = q.reshape(-1, HQ, D)
        assert torch.ops.tqkit.decode(torch.empty_like(rows), rows, cache, table, lens, ws, FMT, D ** -0.5, 64, 2,
                                      qsl, 4) is None
        assert torch.ops.tqkit.dequant(k_out, v_out, cache, table, lens, offsets, FMT, 64) is None
        assert [(a.shape, a.dtype, a.device) for a in args] == before
        assert all(isinstance(a, fake_tensor.FakeTensor) for a in args)


def test_a_fake_trace_records_each_op_once_in_order():
    # make_fx with fake tracing: what torch.compile's AOT stage does; the inputs' device does not matter there
    graph = proxy_tensor.make_fx(step, tracing_mode="fake")(*arguments("cpu"))
    called = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    ops = torch.ops.tqkit
    assert called == [ops.store.default, ops.decode.default, ops.dequant.default]
