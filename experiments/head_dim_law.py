#!/usr/bin/env python3
"""The head_dim law on real keys: does the logit error of a key quantizer
follow Var(q·k̂ − q·k) = ‖q‖²‖k − k̂‖²/d (isotropic error: the variance of
one coordinate of the error, ‖Δk‖²/d, times ‖q‖²), so that at equal bits and
equal key NMSE a d=128 logit is twice as noisy as a d=256 one (relative to
‖q‖‖k‖)?

Reads tq-ablate metrics.csv files (one row per dump × format × layer × KV
head; columns ip_var = measured Var(q·k̂ − q·k) over causal pairs, ip_var_pred
= mean ‖q‖²‖Δk‖²/d, key_nmse, logit_rmse, kl), pools each (dump, format) over
layers and heads weighted by the number of pairs, and writes a Markdown table
and a plot:

  head_dim_law.py OUT_PREFIX METRICS.csv [METRICS.csv ...]
    -> OUT_PREFIX.md, OUT_PREFIX.png

Only the "presets" study rows are used (the same formats on every dump).
"""
import collections
import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# Formats whose keys are quantized with a rotation + scalar codebook (the
# law's setting) and two baselines without a rotation.
FORMATS = ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turbo4", "turbo3", "turbo2",
           "q4_0", "q8_0"]


def pooled(paths):
    acc = collections.defaultdict(lambda: collections.defaultdict(float))
    dims = {}
    for path in paths:
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["study"] != "presets" or r["format"] not in FORMATS:
                    continue
                w = float(r["n_pairs"])
                a = acc[(r["dump"], r["format"])]
                dims[r["dump"]] = int(r["head_dim"])
                a["w"] += w
                for k in ("ip_var", "ip_var_pred", "key_nmse", "kl"):
                    a[k] += w * float(r[k])
                a["logit_ms"] += w * float(r["logit_rmse"]) ** 2
    rows = []
    for (dump, fmt), a in acc.items():
        w = a["w"]
        rows.append({
            "dump": dump, "head_dim": dims[dump], "format": fmt,
            "ip_var": a["ip_var"] / w, "ip_var_pred": a["ip_var_pred"] / w, "key_nmse": a["key_nmse"] / w,
            "kl": a["kl"] / w, "logit_rmse": math.sqrt(a["logit_ms"] / w),
        })
    rows.sort(key=lambda r: (FORMATS.index(r["format"]), r["head_dim"]))
    return rows


def main(prefix, paths):
    rows = pooled(paths)
    lines = [
        "| format | model (head_dim) | key NMSE | measured Var(Δ q·k) | predicted ‖q‖²‖Δk‖²/d | measured / predicted "
        "| logit RMSE | attention KL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['format']} | {r['dump']} ({r['head_dim']}) | {r['key_nmse']:.3e} | {r['ip_var']:.3e} | "
                     f"{r['ip_var_pred']:.3e} | {r['ip_var'] / r['ip_var_pred']:.3f} | {r['logit_rmse']:.3e} | "
                     f"{r['kl']:.3e} |")
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {64: "tab:blue", 128: "tab:red", 256: "tab:green"}
    seen = set()
    for r in rows:
        d = r["head_dim"]
        lab = f"d = {d}" if d not in seen else None
        seen.add(d)
        a1.loglog(r["ip_var_pred"], r["ip_var"], "o", color=colors.get(d, "k"), label=lab)
    lo = min(min(r["ip_var"], r["ip_var_pred"]) for r in rows)
    hi = max(max(r["ip_var"], r["ip_var_pred"]) for r in rows)
    a1.loglog([lo, hi], [lo, hi], "k--", lw=1, label="measured = predicted")
    a1.set_xlabel("predicted ‖q‖²‖k − k̂‖²/d")
    a1.set_ylabel("measured Var(q·k̂ − q·k)")
    a1.set_title("every format × model, pooled over layers and heads")
    a1.legend()
    fmts = [f for f in FORMATS if any(r["format"] == f for r in rows)]
    dims = sorted({r["head_dim"] for r in rows})
    width = 0.8 / max(1, len(dims))
    for j, d in enumerate(dims):
        ys = [next((r["ip_var"] / r["ip_var_pred"] for r in rows if r["format"] == f and r["head_dim"] == d),
                   float("nan")) for f in fmts]
        a2.bar([i + j * width for i in range(len(fmts))], ys, width, color=colors.get(d, "k"), label=f"d = {d}")
    a2.axhline(1.0, color="k", lw=1, ls="--")
    a2.set_xticks([i + width * (len(dims) - 1) / 2 for i in range(len(fmts))])
    a2.set_xticklabels(fmts, rotation=30, ha="right")
    a2.set_ylabel("measured / predicted")
    a2.set_title("the law holds where the ratio is 1")
    a2.legend()
    fig.tight_layout()
    fig.savefig(prefix + ".png", dpi=120)
    print(prefix + ".md")
    print(prefix + ".png")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
