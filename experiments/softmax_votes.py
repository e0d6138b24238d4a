#!/usr/bin/env python3
"""How often the quantized decode's softmax vote takes its slow path, by headroom.

The decode's warps vote once per 32-token sub-tile whether any logit of their query columns exceeds
that column's running maximum m; only then do they take the cross-lane max and rescale (the slow
path). A new maximum sets m to the maximum plus a headroom (Softmax32::kHeadroom, log2 units), so
that logits up to that far above it later keep the fast path. This replays the vote in float64 over
one work item (the whole sequence, one warp's columns) and prints the share of sub-tiles that take
the slow path at headrooms 0, 1, 2 and 4.

    python3 experiments/softmax_votes.py DUMP.h5 [--q-len 4] [--cols 16]   # a tq-dump file: every layer, kv head
    python3 experiments/softmax_votes.py --gaussian [--tokens 8192] [--cols 16]  # tq-bench's inputs

With a dump, the columns are the first --cols of the last q_len queries' G·q_len rows of each kv head
(causal within the chunk, as the multi-query decode masks them). --gaussian: iid N(0, 1) logits in
natural units (tq-bench's unit-variance queries and keys at d 128), 20 items of --tokens tokens.
"""
import argparse

import numpy as np

HEADROOMS = (0, 1, 2, 4)


def slow_share(x, headroom):
    """x: [columns, tokens] log2-domain logits (-inf masked); the slow path's sub-tiles and all sub-tiles."""
    m = np.full(x.shape[0], -np.inf)
    slow = total = 0
    for s in range(0, x.shape[1], 32):
        mx = x[:, s:s + 32].max(1)
        total += 1
        if np.any(mx > m):
            slow += 1
            m = np.maximum(m, mx + headroom)
    return slow, total


def dump_items(path, q_len, cols):
    import h5py
    f = h5py.File(path, "r")
    d, hq, hkv = (int(f.attrs[k]) for k in ("head_dim", "n_heads", "n_kv_heads"))
    g = hq // hkv
    scale = np.log2(np.e) / np.sqrt(d)
    for layer in sorted(k for k in f.keys() if k.startswith("layer_")):
        q = f[layer]["q"][:].astype(np.float64)
        k = f[layer]["k"][:].astype(np.float64)
        end = q.shape[0] - q_len  # the chunk's first query sees positions 0 … end
        for h in range(hkv):
            rows = [q[end + j, h * g + i] for j in range(q_len) for i in range(g)][:cols]
            x = np.stack(rows) @ k[:end + q_len, h].T * scale
            for c in range(len(rows)):
                x[c, end + 1 + c // g:] = -np.inf
            yield x


def gaussian_items(tokens, cols, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        yield rng.standard_normal((cols, tokens)) * np.log2(np.e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump", nargs="?", help="a tq-dump HDF5 file")
    ap.add_argument("--gaussian", action="store_true", help="iid Gaussian logits instead of a dump")
    ap.add_argument("--q-len", type=int, default=4)
    ap.add_argument("--cols", type=int, default=16, help="query columns per warp (16: the two-tile kernels)")
    ap.add_argument("--tokens", type=int, default=8192, help="--gaussian: tokens per item")
    a = ap.parse_args()
    if bool(a.dump) == a.gaussian:
        ap.error("give a dump file or --gaussian")
    items = list(gaussian_items(a.tokens, a.cols) if a.gaussian else dump_items(a.dump, a.q_len, a.cols))
    what = f"Gaussian, {a.tokens}-token items" if a.gaussian else f"{a.dump}, q_len {a.q_len}"
    shares = []
    for hr in HEADROOMS:
        slow, total = map(sum, zip(*(slow_share(x, hr) for x in items)))
        shares.append(f"headroom {hr}: {100 * slow / total:.1f}%")
    print(f"{what}, {a.cols} columns per warp, {len(items)} items: sub-tiles on the slow path: " + ", ".join(shares))


if __name__ == "__main__":
    main()
