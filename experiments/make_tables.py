#!/usr/bin/env python3
"""Generates the README's headline table, the GPU tables of experiments/results/README.md and the
current-results, targets and multi-query tables of experiments/results/kernels.md from committed result files, and
writes them between the <!-- BEGIN GENERATED: NAME --> / <!-- END GENERATED: NAME -->
markers of those files (nothing else is touched).

Sources (all under experiments/results/):
  formats_d128.json          tq-eval --list-formats --head-dim 128 --json (bits per value)
  eval/*_ctx512.txt          tq-eval text output, n_ctx 512, every layer quantized
                             (the first line is the command, "$ ...")
  qwen/ppl512-all.txt        the same for Qwen2.5-Coder-1.5B, the whole text (experiments/qwen_eval.sh)
  qwen/ppl512-skip-all.txt   the same with --skip-layers first2,last2
  kernels/bench.jsonl        tq-bench --json rows (experiments/run_kernels.sh bench; "commit": the tree measured)
  kernels/sdpa.jsonl         torch SDPA fp16 on the same shape (run_kernels.sh sdpa)
  kernels/multi_query_tqbench.txt   tq-bench --q-len output (its first line is the command, "$ ..."; H200)
  kernels/multi_query_tqbench_h100.txt   the same on an H100 (its first table: the newest kernels, with the
                             "#   pass N: <row>" lines of their other passes)
  kernels/multi_query_torch.jsonl   python/examples/bench_multi_query.py rows (dequant + SDPA)
  kernels/shapes_h100.txt    run_kernels.sh shapes on an H100: tq-bench per "== Q/K" section, then SDPA JSON lines
                             (a table in results/README.md, one line in the README)
  kernels/op_overhead.jsonl  python/examples/bench_op_overhead.py --json rows (run_kernels.sh torch), where present

  python3 experiments/make_tables.py [--check]   (--check: exit 1 if a file would change)
"""
import functools
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RES = os.path.join(ROOT, "experiments", "results")

# (label, head_dim, file) of the end-to-end quality columns, in order.
MODELS = [
    ("SmolLM2-135M (d 64)", os.path.join(RES, "eval", "smollm2_ctx512.txt")),
    ("Qwen2.5-Coder-1.5B (d 128)", os.path.join(RES, "qwen", "ppl512-all.txt")),
    ("Qwen2.5-Coder-1.5B, layers 0, 1, 26, 27 fp16", os.path.join(RES, "qwen", "ppl512-skip-all.txt")),
]
FORMATS = ["q8_0", "turboquant_k8v4", "turboquant_4bit_nc", "turbo4", "q4_0", "turboquant_k3v4_nc", "turbo3",
           "turboquant_3bit_nc", "turbo2"]
ROW = re.compile(r"^(\S+)\s+([\d.]+) ± ([\d.]+)\s+([+-][\d.]+) ± ([\d.]+)\s+([\d.]+) ± ([\d.]+)\s+([\d.]+)"
                 r"\s+([\d.]+) ± ([\d.]+)\s+([\d.]+) ± ([\d.]+)\s*$")


def scored_text(path):
    """'N chunks, M scored tokens' from tq-eval's 'M scored tokens in N chunk(s)' line."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^(\d+) scored tokens in (\d+) chunk", line)
            if m:
                return f"{m.group(2)} chunks, {m.group(1)} scored tokens"
    raise SystemExit(f"make_tables.py: {path}: no 'scored tokens' line")


def eval_rows(path):
    """format -> dict(ppl, dppl, dppl_err, kld, same_top) from tq-eval's text table."""
    if not os.path.exists(path):
        return {}
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if m:
                out[m.group(1)] = {"ppl": float(m.group(2)), "dppl": float(m.group(4)),
                                   "dppl_err": float(m.group(5)), "kld": float(m.group(6)),
                                   "same_top": float(m.group(10))}
    return out


@functools.lru_cache(maxsize=None)
def kernels_jsonl(name):
    """The objects of experiments/results/kernels/NAME, one JSON object per line (read once; callers do not
    modify them)."""
    with open(os.path.join(RES, "kernels", name), encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def bench_rows(ctx):
    """format -> decode row of tq-bench at ctx (vLLM layout; each row names its device), the SDPA time, and the
    commit the line measured (its "commit" key, or None)."""
    rows, sdpa, commit = {}, None, None
    for j in kernels_jsonl("bench.jsonl"):
        if j["ctx"] != ctx:
            continue
        commit = j.get("commit")
        for r in j["rows"]:
            if r.get("layout") == "vllm" and "decode" in r:
                rows[r["format"]] = r
    for j in kernels_jsonl("sdpa.jsonl"):
        if j["ctx"] == ctx:
            sdpa = j["median_ms"]
    return rows, sdpa, commit


def headline():
    bits = {r["name"]: r["bits_per_value"] for r in json.load(open(os.path.join(RES, "formats_d128.json")))}
    quality = [(label, eval_rows(path)) for label, path in MODELS]
    gpu, sdpa, commit = bench_rows(32768)
    head = "| format | bits/value (d 128) | " + " | ".join(f"{lab}: ΔPPL, KLD" for lab, _ in quality)
    head += " | decode ms | % of copy | × our FP16 | × SDPA |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for fmt in FORMATS:
        cells = [f"`{fmt}`", f"{bits[fmt]:g}"]
        for _, q in quality:
            r = q.get(fmt)
            prec = 0 if r and abs(r["dppl"]) >= 100 else 2
            cells.append(f"{r['dppl']:+.{prec}f} ± {r['dppl_err']:.{prec}f}, {r['kld']:.4f}" if r else "—")
        g = gpu.get(fmt)
        if g:
            d = g["decode"]
            cells += [f"{d['median_ms']:.3f}", f"{d['pct_copy']:.1f}%", f"{d['speedup_vs_f16']:.2f}×",
                      f"{sdpa / d['median_ms']:.2f}×" if sdpa else "—"]
        else:
            cells += ["—"] * 4
        lines.append("| " + " | ".join(cells) + " |")
    any_row = next(iter(gpu.values()))
    at = f" (main at {commit})" if commit else ""
    note = (f"Decode: one {any_row['device']}{at}, batch {any_row['batch']}, {any_row['q_heads']} query / {any_row['kv_heads']} KV "
            f"heads, head_dim {any_row['head_dim']}, 32K tokens each, vLLM page layout; our FP16 paged decode "
            f"{any_row['decode']['f16_median_ms']:.3f} ms, torch SDPA (fp16, cuDNN/flash) {sdpa:.3f} ms, device copy "
            f"{any_row['copy_gbps']:.0f} GB/s. Quality: tq-eval, n_ctx 512, Jargon File Part I ("
            + "; ".join(f"{label}: {scored_text(path)}" for label, path in MODELS)
            + "), reference an fp16 cache, every layer quantized unless the column says otherwise.")
    return "\n".join(lines) + "\n\n" + note + "\n"


# the commit a result file's comments name: "main at 1234abc"
MAIN_AT = re.compile(r"main at ([0-9a-f]{7})")


def mq_tables(name):
    """kernels/NAME's tq-bench multi-query tables in file order, each (its legend line, the "fused: ..." one before
    it, or ""; its rows as {column: cell} with "pass": None for the table's own rows and N for the "#   pass N: <row>"
    comment rows that follow it, the same rows from other passes of its build; its title, the "tq-bench ... on
    DEVICE (...): batch ..." line before it), the first commit the file's comments name ("main at ..."), and the
    commit each "#   pass N (main at ..." comment names."""
    tables, head, legend, title, commit, pass_commits = [], None, "", "", None, {}
    with open(os.path.join(RES, "kernels", name), encoding="utf-8") as f:
        for line in f:
            cells = line.split()
            if commit is None and (m := MAIN_AT.search(line)):
                commit = m.group(1)
            if (m := re.match(r"^#\s+pass (\d+) \(main at ([0-9a-f]{7})", line)):
                pass_commits[int(m.group(1))] = m.group(2)
            if line.startswith("tq-bench "):
                title = line
            elif line.startswith("fused: "):
                legend = line
            elif cells[:2] == ["format", "q_len"]:
                head = cells
                tables.append((legend, [], title))
                legend = ""
            elif head and len(cells) == len(head) and cells[0].startswith("turbo"):
                tables[-1][1].append(dict(zip(head, cells), **{"pass": None}))
            elif head and cells[:2] == ["#", "pass"] and len(cells) == len(head) + 3:
                tables[-1][1].append(dict(zip(head, cells[3:]), **{"pass": int(cells[2].rstrip(":"))}))
    return tables, commit, pass_commits


def mq_rows(name, table=0):
    """4bit_nc's rows of tq-bench --q-len table TABLE in kernels/NAME (0: the first; later tables: older commits), by
    q_len, and the commit the file's comments name first."""
    tables, commit, _ = mq_tables(name)
    rows, others = {}, {}  # others: the other passes' fused/q_len1 per q_len
    for r in tables[table][1] if len(tables) > table else []:
        if r["format"] != "turboquant_4bit_nc":
            continue
        q = int(r["q_len"])
        if r["pass"] is not None:
            others.setdefault(q, []).append(float(r["fused/q_len1"]))
        else:
            rows[q] = {"fused": float(r["fused_ms"]), "over_q1": float(r["fused/q_len1"]),
                       "separate_over": float(r["separate/fused"])}
    for q, ratios in others.items():
        if q in rows:  # the table's own pass and the others ("over_q1_passes")
            rows[q]["over_q1_passes"] = [rows[q]["over_q1"], *ratios]
    return rows, commit


def multi_query():
    """The multi-query lines of the headline: 4bit_nc's fused decode per q_len (tq-bench --q-len) against
    one single-query decode and q_len of them, on the H200 and on the H100 (each file's first table), and the
    time of dequant + SDPA (bench_multi_query.py; a separate harness, so its time is shown rather than a ratio
    to tq-bench's)."""
    machines = [("H200", *mq_rows("multi_query_tqbench.txt")), ("H100", *mq_rows("multi_query_tqbench_h100.txt"))]
    dense = {j["q_len"]: j["dense_ms"] for j in kernels_jsonl("multi_query_torch.jsonl")
             if j["format"] == "turboquant_4bit_nc" and "dense_ms" in j}
    q_lens = sorted(machines[0][1])
    cell = lambda rows, q, f: f(rows[q]) if q in rows else "—"
    lines = ["| `turboquant_4bit_nc`, multi-query | " + " | ".join(f"q_len {q}" for q in q_lens) + " |",
             "|---|" + "---|" * len(q_lens)]
    for gpu, rows, commit in machines:
        lines += [f"| {gpu} (main at {commit}): fused decode ms (× one single-query decode) | "
                  + " | ".join(cell(rows, q, lambda r: f"{r['fused']:.3f} ({r['over_q1']:.2f}×)") for q in q_lens) + " |",
                  f"| {gpu}: q_len single-query decodes ÷ fused | "
                  + " | ".join(cell(rows, q, lambda r: f"{r['separate_over']:.2f}×") for q in q_lens) + " |"]
    lines.append("| H200: dequant + SDPA ms (torch) | " + " | ".join(f"{dense[q]:.2f}" if q in dense else "—" for q in q_lens)
                 + " |")
    note = ("Multi-query: q_len queries per sequence, causal within the chunk, same shape; the H100 rows from "
            "[multi_query_tqbench_h100.txt](experiments/results/kernels/multi_query_tqbench_h100.txt) "
            "([kernels.md](experiments/results/kernels.md#multi-query-decode-q_len--1)).")
    # q_len 4's range over several passes of one build: the rows' own, else (a one-pass table) the build's before it
    passes = lambda rows: rows.get(4, {}).get("over_q1_passes")
    if (r := passes(machines[1][1])):
        took = f"{r[0]:.2f}× in each" if min(r) == max(r) else f"{min(r):.2f}–{max(r):.2f}×"
        own = machines[1][1][4]["over_q1"]
        which = ("one of the passes at the median" if own == sorted(r)[(len(r) - 1) // 2] else
                 f"the pass of main at {machines[1][2]} ({own:.2f}× at q_len 4)")
        note += (f" Over {len(r)} passes of the same kernels on that H100, q_len 4 took {took} a single-query decode; "
                 f"the rows are {which}.")
    elif (r := passes(mq_rows("multi_query_tqbench_h100.txt", 1)[0])):
        note += (f" The H100 rows are one pass; over the {len(r)} passes of the build before it (the file's next "
                 f"table, the same q_len-4 plan) q_len 4 took {min(r):.2f}–{max(r):.2f}× a single-query decode.")
    if (v := varlen_row("16,1x31")):
        note += (f" A mixed batch, one 16-query chunk among 31 decodes (`--q-counts 16,1x31`), takes {v[1]:.3f} ms, "
                 f"{v[1] / v[0]:.2f}× the decode with 16 queries in every sequence"
                 + (f"; a single-query decode with each query as its own row (what a decode-only kernel runs) takes "
                    f"{v[2]:.3f} ms, so this one batch shape runs faster that way" if v[2] and v[2] < v[1] else "")
                 + " (H100, [varlen_h100.txt](experiments/results/kernels/varlen_h100.txt)).")
    return "\n".join(lines) + "\n\n" + note + "\n"


def varlen_row(counts):
    """4bit_nc's (fused_ms, varlen_ms, rows_ms or None) in the last tq-bench --q-counts COUNTS table of
    kernels/varlen_h100.txt (the file's newest run), or None."""
    if not os.path.exists(os.path.join(RES, "kernels", "varlen_h100.txt")):
        return None
    found = None
    for legend, rows, _ in mq_tables("varlen_h100.txt")[0]:
        rows = [r for r in rows if r["format"] == "turboquant_4bit_nc"]
        if f"query counts {counts} " in legend and rows:
            found = (float(rows[0]["fused_ms"]), float(rows[0]["varlen_ms"]),
                     float(rows[0]["rows_ms"]) if "rows_ms" in rows[0] else None)
    return found


SHAPE_PRESETS = ["turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_k8v4"]
# experiments/results/README.md's section with the shapes table and the op's overhead, from the README
GPU_RESULTS_LINK = "experiments/results/README.md#gpu-decode-at-other-query-group-shapes-and-the-pytorch-ops-overhead"


@functools.lru_cache(maxsize=None)
def shape_rows():
    """kernels/shapes_h100.txt: {(shape, format): (% of copy, decode ms)}, the shapes and the formats in file order,
    SDPA ms per shape, the device and the commit the file's comments name; None without the file."""
    path = os.path.join(RES, "kernels", "shapes_h100.txt")
    if not os.path.exists(path):
        return None
    rows, sdpa, order, formats, shape, head, commit, device = {}, {}, [], [], None, None, None, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            cells = line.split()
            if commit is None and (m := MAIN_AT.search(line)):
                commit = m.group(1)
            if line.startswith("== "):  # a section: its rows follow its own header line
                head = None
            if (m := re.match(r"^== (\d+)/(\d+)", line)):
                shape = (int(m.group(1)), int(m.group(2)))
                order.append(shape)
            elif line.startswith("{"):
                j = json.loads(line)
                sdpa[(j["q_heads"], j["kv_heads"])] = j["median_ms"]
                device = j["device"]
            elif cells[:2] == ["format", "slot_B"]:
                head = cells
            elif head and shape and len(cells) == len(head) and cells[0] != "f16":
                r = dict(zip(head, cells))
                rows[(shape, r["format"])] = (float(r["%copy"]), float(r["decode_ms"]))
                if r["format"] not in formats:
                    formats.append(r["format"])
    return rows, order, formats, sdpa, device, commit


def shapes():
    """experiments/results/README.md's table of the issue's other shapes: each format's % of copy and its
    speed-up over torch SDPA measured in the same session, per shape (query heads / kv heads)."""
    parsed = shape_rows()
    if not parsed:
        return ""
    rows, order, formats, sdpa, device, commit = parsed
    lines = [f"| {device} (main at {commit}), B 32, 32K: % of copy (× SDPA) | "
             + " | ".join(f"{q}/{k} (G {q // k})" for q, k in order) + " |", "|---|" + "---|" * len(order)]
    for fmt in formats:
        cells = []
        for s in order:
            pct, ms = rows[(s, fmt)]
            cells.append(f"{pct:.1f}% ({sdpa[s] / ms:.2f}×)" if s in sdpa else f"{pct:.1f}%")
        lines.append(f"| `{fmt}` | " + " | ".join(cells) + " |")
    note = ("Decode against the device copy and torch SDPA on an fp16 cache, same session "
            "([shapes_h100.txt](kernels/shapes_h100.txt)).")
    return "\n".join(lines) + "\n\n" + note + "\n"


def shapes_line():
    """The README's one line for the other shapes: the presets' range of % of copy and × SDPA per shape."""
    parsed = shape_rows()
    if not parsed:
        return ""
    rows, order, _, sdpa, device, commit = parsed
    parts = []
    for s in order:
        pcts = [rows[(s, f)][0] for f in SHAPE_PRESETS]
        xs = [sdpa[s] / rows[(s, f)][1] for f in SHAPE_PRESETS] if s in sdpa else []
        parts.append(f"{s[0]}/{s[1]} {min(pcts):.0f}–{max(pcts):.0f}% of copy"
                     + (f", {min(xs):.2f}–{max(xs):.2f}× SDPA" if xs else ""))
    return (f"\nOther query groups, the four presets ({device}, main at {commit}, B 32, 32K): " + "; ".join(parts)
            + f" ([table]({GPU_RESULTS_LINK})).\n")


def op_rows():
    """kernels/op_overhead.jsonl's rows, or () until the file exists."""
    if not os.path.exists(os.path.join(RES, "kernels", "op_overhead.jsonl")):
        return ()
    return kernels_jsonl("op_overhead.jsonl")


def host_bound_shapes(rows):
    """The shapes (in file order, once each) whose eager call takes the host longer than the replayed decode takes
    the GPU, on some machine."""
    labels = []
    for r in rows:
        if r["host_op_us"] > r["graph_us"] and (label := f"B {r['batch']} at {r['ctx']} tokens") not in labels:
            labels.append(label)
    return labels


def op_overhead():
    """experiments/results/README.md's paragraph on the torch op: what a decode_out call costs over its kernels
    (the same call eager against replayed from a CUDA graph) and its host time, one sentence per machine
    measured; empty until the result file exists."""
    all_rows = op_rows()
    if not all_rows:
        return ""
    by_device = {}  # device -> its rows, in the file's order
    for r in all_rows:
        by_device.setdefault(r["device"], []).append(r)
    sentences = []
    for device, rows in by_device.items():
        shapes = "; ".join(f"B {r['batch']} at {r['ctx']} tokens {r['eager_us']:.1f} µs eager, {r['graph_us']:.1f} µs "
                           f"replayed ({r['adds_us']:+.1f} µs)" for r in rows)
        host = ", ".join(f"{r['host_op_us']:.1f}" for r in rows)
        replay = ", ".join(f"{r['host_replay_us']:.1f}" for r in rows)
        sentences.append(f"{device}, torch {rows[0]['torch']}: GPU time per call {shapes}; host time per eager call "
                         f"{host} µs (per graph replay {replay} µs)")
    host_bound = host_bound_shapes(r for rows in by_device.values() for r in rows)
    bound = (f" For {', '.join(host_bound)} the host takes longer per eager call than the GPU per decode, so eager "
             "calls wait on the host there; replayed from a graph the op adds nothing." if host_bound else "")
    r0 = next(iter(by_device.values()))[0]
    return (f"\nPyTorch op `tqkit_torch.decode_out` (`{r0['format']}`, {r0['heads']}/{r0['kv_heads']} heads, d "
            f"{r0['head_dim']}). " + ". ".join(sentences) + "." + bound +
            " ([op_overhead.jsonl](kernels/op_overhead.jsonl))\n")


def op_line():
    """The README's one line for the torch op: the most an eager call adds over the same call replayed from a
    CUDA graph where the GPU outlasts the host, and the shapes where the host's time per call is the longer."""
    rows = op_rows()
    if not rows:
        return ""
    gpu_bound = [r for r in rows if r["host_op_us"] <= r["graph_us"]]
    host_bound = host_bound_shapes(rows)
    devices = ", ".join(sorted({r["device"].replace("NVIDIA ", "") for r in rows}))
    r0 = rows[0]
    return (f"\nPyTorch op `tqkit_torch.decode_out` (`{r0['format']}`, {devices}): an eager call adds at most "
            f"{max(r['adds_us'] for r in gpu_bound):.1f} µs over its kernels replayed from a CUDA graph"
            + (f"; for {', '.join(host_bound)} the host's time per eager call is the longer" if host_bound else "")
            + f" ([details]({GPU_RESULTS_LINK})).\n")


def mq_passes(name="multi_query_tqbench_h100.txt"):
    """The passes of kernels/NAME's first tq-bench --q-len table (one build timed on several machine starts):
    {(format, q_len): {pass: row}} in the file's row order (the table's own rows are pass 1), each pass's commit,
    the newest pass, every pass number seen and the table's title line; None without a table."""
    tables, first_commit, commits = mq_tables(name)
    if not tables:
        return None
    mq = {}
    for r in tables[0][1]:
        mq.setdefault((r["format"], int(r["q_len"])), {})[r["pass"] or 1] = r
    commits.setdefault(1, first_commit)
    passes_seen = {n for by_pass in mq.values() for n in by_pass}
    return mq, commits, max(passes_seen), passes_seen, tables[0][2]


def value_range(v, vals):
    """v, with the range of vals in brackets where they differ."""
    return f"{v:.2f}" + (f" ({min(vals):.2f}–{max(vals):.2f})" if min(vals) != max(vals) else "")


def mq_current(passed):
    """kernels.md's multi-query table: every format and q_len of the newest pass of the H100 multi-query table, the
    fused time, its ratios to one and to q_len single-query decodes (with the range over the passes that have the
    row) and to our FP16 decode at the same q_len. passed: mq_passes()."""
    if passed is None:
        return ""
    mq, commits, newest, passes_seen, title = passed
    device, batch, heads, kv_heads, dim, ctx = re.search(
        r"on (.+?) \(.*?batch (\d+), q_heads (\d+), kv_heads (\d+), head_dim (\d+), ctx (\d+)", title).groups()
    lines = ["| format | q_len | fused ms | × one single-query decode | q_len single-query decodes ÷ fused | "
             "faster than our FP16 |", "|---|---|---|---|---|---|"]
    for (fmt, q), by_pass in mq.items():
        if newest not in by_pass:
            continue
        r = by_pass[newest]
        ratios = lambda col: value_range(float(r[col]), [float(x[col]) for x in by_pass.values()])
        lines.append(f"| `{fmt}` | {q} | {float(r['fused_ms']):.4f} | {ratios('fused/q_len1')} | "
                     f"{ratios('separate/fused')} | {float(r['x_f16']):.2f}× |")
    note = (f"One {device}, {heads}/{kv_heads}/{dim}, {int(ctx) // 1024}K, B {batch}, vLLM layout: pass {newest} (main at {commits.get(newest, '?')}) of the "
            f"first table of [kernels/multi_query_tqbench_h100.txt](kernels/multi_query_tqbench_h100.txt); in brackets "
            f"the range over the passes of the same kernels that have the row ({len(passes_seen)} in all, each its own "
            f"machine start or call); the last column is our FP16 decode's time at the same q_len ÷ the fused one, "
            f"pass {newest} alone.")
    return "\n".join(lines) + "\n\n" + note + "\n"


def targets(passed):
    """kernels.md's table of the multi-query, shape and op targets: the newest pass of the H100 multi-query table
    (with the range over its passes; passed: mq_passes()) and the shapes file's same-call rows, each target's status
    from them."""
    parsed = shape_rows()
    if not parsed or passed is None:
        return ""
    rows, order, formats, sdpa, device, commit = parsed
    mq, commits, newest, passes_seen, _ = passed  # (format, q_len) -> {pass: row}
    presets = [f for f in SHAPE_PRESETS if f in formats]
    short = lambda f: f.replace("turboquant_", "")

    def status(ok):
        met = [short(f) for f in presets if ok.get(f)]
        return "met" if len(met) == len(presets) else ("not met" if not met else "met for " + ", ".join(met))

    # a multi-query target (col ≤ limit, or ≥ limit where at_least) holds for a format where every pass meets it
    def mq_row(label, q, col, limit, at_least=False):
        cells, ok = [], {}
        for f in presets:
            passes = mq.get((f, q), {})
            if newest not in passes:
                cells.append("—")
                continue
            vals = [float(r[col]) for r in passes.values()]
            ok[f] = min(vals) >= limit if at_least else max(vals) <= limit
            cells.append(value_range(float(passes[newest][col]), vals))
        return f"| {label} | " + " | ".join(cells) + f" | {status(ok)} |"

    lines = ["| target | " + " | ".join(f"`{f}`" for f in presets) + " | status |", "|---|" + "---|" * (len(presets) + 1),
             mq_row("32/8, q_len 4 ≤ 1.3× one single-query decode", 4, "fused/q_len1", 1.3),
             mq_row("32/8, q_len 16 ≤ 2×", 16, "fused/q_len1", 2.0),
             mq_row("32/8, q_len 4: ≥ 3× faster than 4 single-query decodes", 4, "separate/fused", 3.0, at_least=True),
             mq_row("32/8, q_len 16: ≥ 3× faster than 16 single-query decodes", 16, "separate/fused", 3.0,
                    at_least=True)]
    for s in order:
        if s[0] // s[1] > 8:
            continue
        pcts = {f: rows[(s, f)][0] for f in presets}
        lines.append(f"| {s[0]}/{s[1]} (G {s[0] // s[1]}): ≥ 85% of copy | "
                     + " | ".join(f"{pcts[f]:.1f}%" for f in presets) + f" | {status({f: v >= 85 for f, v in pcts.items()})} |")
    if (32, 8) in order and "turboquant_3bit_nc" in presets:
        v = rows[((32, 8), "turboquant_3bit_nc")][0]
        lines.append("| 32/8: `turboquant_3bit_nc` ≥ 80% of copy | "
                     + " | ".join(f"{v:.1f}%" if f == "turboquant_3bit_nc" else "" for f in presets)
                     + f" | {'met' if v >= 80 else 'not met'} |")
    for s in order:
        if s[0] // s[1] == 16 and s in sdpa:
            xs = {f: sdpa[s] / rows[(s, f)][1] for f in formats}
            others = [f for f in formats if f not in presets]
            lines.append(f"| {s[0]}/{s[1]} (G 16): ≥ 2× SDPA | " + " | ".join(f"{xs[f]:.2f}×" for f in presets)
                         + f" | {status({f: xs[f] >= 2 for f in presets})}"
                         + (" (" + ", ".join(f"{short(f)} {xs[f]:.2f}×" for f in others) + ")" if others else "") + " |")
    note = (f"One {device}: the shapes from [kernels/shapes_h100.txt](kernels/shapes_h100.txt) (main at {commit}, B 32, "
            f"32K, d 128, one call), the multi-query rows from pass {newest} of "
            f"[kernels/multi_query_tqbench_h100.txt](kernels/multi_query_tqbench_h100.txt) (main at {commits.get(newest, '?')}; "
            f"in brackets the range over its {len(passes_seen)} passes of the same kernels). A multi-query target counts as met where every pass meets it.")
    return "\n".join(lines) + "\n\n" + note + "\n"


def kernels_current():
    out = []
    for ctx in (4096, 32768):
        gpu, sdpa, _ = bench_rows(ctx)
        if not gpu:
            continue
        out.append(f"**ctx {ctx}** (SDPA {sdpa:.4f} ms)\n")
        out.append("| format | slot bytes | decode ms | GB/s | % of copy | × our FP16 | × SDPA | store % of copy "
                   "| dequant % of copy |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for fmt, r in gpu.items():
            d, s, q = r["decode"], r.get("store", {}), r.get("dequant", {})
            out.append(f"| `{fmt}` | {r['slot_bytes']} | {d['median_ms']:.4f} | {d['gbps']:.0f} | "
                       f"{d['pct_copy']:.1f}% | {d['speedup_vs_f16']:.2f}× | {sdpa / d['median_ms']:.2f}× | "
                       f"{s.get('pct_copy', float('nan')):.1f}% | {q.get('pct_copy', float('nan')):.1f}% |")
        out.append("")
    return "\n".join(out)


def splice(path, name, body, check):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        sys.exit(f"{path}: markers for '{name}' not found")
    new = text[: i + len(begin)] + "\n" + body.rstrip("\n") + "\n" + text[j:]
    if new == text:
        return False
    if check:
        print(f"{path}: '{name}' is out of date")
        return True
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"{path}: '{name}' updated")
    return True


def main():
    check = "--check" in sys.argv[1:]
    changed = splice(os.path.join(ROOT, "README.md"), "headline",
                     headline() + "\n" + multi_query() + shapes_line() + op_line(), check)
    changed |= splice(os.path.join(RES, "README.md"), "results", shapes() + "\n" + op_overhead().lstrip("\n"), check)
    changed |= splice(os.path.join(RES, "kernels.md"), "current", kernels_current(), check)
    passed = mq_passes()  # (both tables read the H100 multi-query file's passes)
    changed |= splice(os.path.join(RES, "kernels.md"), "targets", targets(passed), check)
    changed |= splice(os.path.join(RES, "kernels.md"), "multi_query", mq_current(passed), check)
    if check and changed:
        sys.exit(1)


if __name__ == "__main__":
    main()
