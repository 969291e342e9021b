#!/usr/bin/env python3
"""Plots a benchmark run: TFLOPS against sequence length, flash4 against each peer measured in the same run.

Usage: plot_bench.py BENCH.json [--out PNG]
BENCH.json is tools/merge_bench.py's document (or JSON lines of rows). One panel per (mode, D, causal), N on a
log2 axis, one line per provider (a deterministic backward, a window or a softcap gets a line of its own). The
PNG goes next to the JSON (same name, .png) unless --out says otherwise. Needs matplotlib.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from merge_bench import column_name  # noqa: E402  (the same column names as the printed table)


def load_rows(path):
    """The rows of a merged document, or of JSON lines; and the document's header (empty for JSON lines)."""
    text = Path(path).read_text()
    try:
        document = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")], {}
    if isinstance(document, list):
        return document, {}
    return document.get("rows", []), document.get("meta", {})


def line_name(row):
    name = column_name(row)
    window = (row.get("window_left", -1), row.get("window_right", -1))
    if window != (-1, -1):
        name += f" window {window[0]},{window[1]}"
    if row.get("softcap"):
        name += f" softcap {row['softcap']:g}"
    return name


def panels(rows):
    """{(mode, D, causal): {line name: [(N, TFLOPS), ...] sorted by N}}; rows without a TFLOPS figure are left
    out (flash4-bench writes null for a time it could not measure)."""
    out = {}
    for row in rows:
        if row.get("tflops") is None:
            continue
        key = (row["mode"], int(row["D"]), bool(row["causal"]))
        out.setdefault(key, {}).setdefault(line_name(row), []).append((int(row["N"]), float(row["tflops"])))
    for lines in out.values():
        for points in lines.values():
            points.sort()
    return out


def plot(rows, meta, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_panel = panels(rows)
    if not by_panel:
        raise SystemExit("plot_bench: no row with a TFLOPS figure")
    keys = sorted(by_panel, key=lambda k: (k[0] != "fwd", k[1], k[2]))  # forward first, then D, then causal
    columns = min(4, len(keys))
    rows_of_panels = (len(keys) + columns - 1) // columns
    figure, axes = plt.subplots(rows_of_panels, columns, figsize=(4.2 * columns, 3.4 * rows_of_panels), squeeze=False)
    for axis in axes.flat[len(keys):]:
        axis.set_visible(False)
    for axis, key in zip(axes.flat, keys):
        mode, head_dim, causal = key
        # flash4 first, so it keeps the first colour in every panel.
        for name in sorted(by_panel[key], key=lambda n: (not n.startswith("flash4"), n)):
            n, tflops = zip(*by_panel[key][name])
            axis.plot(n, tflops, marker="o", linewidth=2 if name.startswith("flash4") else 1.2, label=name)
        axis.set_xscale("log", base=2)
        lengths = sorted({n for points in by_panel[key].values() for n, _ in points})
        axis.set_xticks(lengths, [f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n) for n in lengths])
        axis.minorticks_off()
        axis.set_title(f"{mode} D={head_dim} {'causal' if causal else 'non-causal'}")
        axis.set_xlabel("sequence length N")
        axis.set_ylabel("TFLOPS")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    title = " / ".join(str(meta[k]) for k in ("date", "commit", "device") if meta.get(k))
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--out", type=Path, help="PNG path (default: BENCH.json with .png)")
    args = parser.parse_args(argv)
    rows, meta = load_rows(args.bench_json)
    out = args.out or args.bench_json.with_suffix(".png")
    plot(rows, meta, out)
    print(f"plot_bench: {out}")


if __name__ == "__main__":
    main()
