#!/usr/bin/env python3
"""Plots for a tq-ablate output directory (data from the C++ tool only).

Usage: plot_ablation.py DIR   (reads DIR/summary.json, writes DIR/*.png and
prints the names of the PNGs it wrote, one per line)
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    written = []

    def save(fig, name, title=None):
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, name), dpi=120)
        plt.close(fig)
        written.append(name)
    dumps = [d["name"] for d in s["dumps"]]

    # 1. Error vs bits per value (every registered preset with nonzero error, each dump).
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    for dump, marker in zip(dumps, "os^vD"):
        rows = [f for f in s["formats"] if f["dump"] == dump and f["study"] in ("presets", "user")
                and f["overall"]["out_rel_err"] > 0]
        for metric, ax in zip(("out_rel_err", "kl"), axes):
            xs = [f["bits_per_value"] for f in rows]
            ys = [f["overall"][metric] for f in rows]
            ax.scatter(xs, ys, marker=marker, label=dump)
            if dump == dumps[0]:
                for f, x, y in zip(rows, xs, ys):
                    ax.annotate(f["format"], (x, y), fontsize=6, alpha=0.8, xytext=(3, 2), textcoords="offset points")
    for metric, ax in zip(("attention-output relative error", "KL(p || p_hat) [nats]"), axes):
        ax.set_xlabel("bits per value (K and V, slot bytes x 8 / 2d)")
        ax.set_ylabel(metric)
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
    save(fig, "error_vs_bits.png", "Quality vs memory: registered formats (labels: first dump)")

    # 2. Per-layer curves of the output error (presets study).
    for dump in dumps:
        rows = [f for f in s["formats"] if f["dump"] == dump and f["study"] in ("presets", "user")]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(10, 5))
        keep = ("turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turbo3",
                "turbo4", "q8_0", "q4_0", "kivi4", "kivi2")
        shown = [f for f in rows if f["format"] in keep] or [f for f in rows if f["overall"]["out_rel_err"] > 0]
        for i, f in enumerate(shown):
            layers = [l["layer"] for l in f["per_layer"]]
            ax.plot(layers, [l["out_rel_err"] for l in f["per_layer"]], label=f["format"], lw=1.2,
                    ls=("-", "--", ":", "-.")[i % 4], marker=".")
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("attention-output relative error")
        ax.set_title(f"{dump}: per-layer error")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=3)
        save(fig, f"per_layer_{dump}.png")

    # 3. QJL vs MSE at equal bits: bias, variance, and what survives the softmax.
    qjl = [f for f in s["formats"] if f["study"] == "qjl"]
    if qjl:
        metrics = [("ip_slope", "inner-product slope (1 = unbiased)"), ("ip_var", "inner-product variance"),
                   ("kl", "KL(p || p_hat)"), ("out_rel_err", "output rel. error")]
        fig, axes = plt.subplots(1, len(metrics), figsize=(16, 4.5))
        for ax, (metric, title) in zip(axes, metrics):
            labels, vals, colors = [], [], []
            for f in qjl:
                labels.append(f"{f['dump']}\n{f['format'].replace('k=', '').split(',')[0]}")
                vals.append(f["overall"][metric])
                colors.append("tab:red" if "prod" in f["format"] else "tab:blue")
            ax.bar(range(len(vals)), vals, color=colors)
            ax.set_xticks(range(len(vals)))
            ax.set_xticklabels(labels, rotation=90, fontsize=6)
            ax.set_title(title)
            if metric == "ip_slope":
                ax.axhline(1.0, color="k", lw=0.8)
                ax.set_ylim(min(vals) - 0.02, max(vals) + 0.02)
            else:
                ax.set_yscale("log")
            ax.grid(alpha=0.3, axis="y")
        save(fig, "qjl_vs_mse.png", "QJL (prod<b>, red) vs MSE (mse<b>, blue) on keys at equal bits")

    for w in written:
        print(w)


if __name__ == "__main__":
    main(sys.argv[1])
