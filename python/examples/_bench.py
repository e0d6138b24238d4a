"""Helpers shared by the example benchmarks: CUDA-event timing and the attention-shape flags."""
import torch


def timed(fn, reps=50):
    """Median milliseconds of `reps` calls of fn (CUDA events around each call, one untimed call first)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def add_shape_args(ap, batch, ctx):
    """--format, --batch, --heads, --kv-heads, --head-dim, --ctx (defaults: 32/8 heads, d 128)."""
    ap.add_argument("--format", default="turboquant_4bit_nc")
    ap.add_argument("--batch", type=int, default=batch)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=ctx)
