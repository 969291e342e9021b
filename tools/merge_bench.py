#!/usr/bin/env python3
"""Merges flash4-bench and bench/peers.py JSON lines (measured in one run) into one results document.

Usage: merge_bench.py OUT.json FILE.jsonl [FILE.jsonl ...] --commit SHA --device TEXT --software TEXT
       [--method TEXT] [--note TEXT]
The document has a header (date, commit, device, software, method) and `rows` in the anchors' format,
then prints a short table: TFLOPS per (mode, D, causal, N), one column per provider, flash4 first.
"""
import argparse
import datetime
import json

ROW_KEYS = ("mode", "D", "causal", "N", "B", "H", "provider", "ms", "tflops")


def read_rows(path):
    rows = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if all(key in row for key in ROW_KEYS):
                row["causal"] = bool(row["causal"])
                rows.append(row)
    return rows


def column_name(row):
    """The table column of a row: its provider, marked when the row timed the deterministic backward (it
    shares its (mode, D, causal, N) cell with the default run's row)."""
    return row["provider"] + (" det" if row.get("deterministic") else "")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("--commit", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--software", required=True)
    parser.add_argument("--method", default="flash4: flash4-bench, median of per-launch CUDA event pairs after "
                        "warm-up, launches back to back; peers: bench/peers.py, triton do_bench median (L2 zeroed "
                        "before each launch); same machine, same run")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    rows = [row for path in args.inputs for row in read_rows(path)]
    document = {
        "meta": {
            "date": datetime.date.today().isoformat(),
            "commit": args.commit,
            "device": args.device,
            "software": args.software,
            "method": args.method,
            "note": args.note,
        },
        "rows": rows,
    }
    with open(args.out, "w") as handle:
        json.dump(document, handle, indent=1)
    table = {}
    for row in rows:
        key = (row["mode"], row["D"], row["causal"], row["N"])
        table.setdefault(key, {})[column_name(row)] = row["tflops"]
    providers = sorted({column_name(row) for row in rows}, key=lambda name: (not name.startswith("flash4"), name))
    widths = [max(8, len(name)) for name in providers]
    print("TFLOPS (anchors' FLOP convention: fwd 4*B*H*N*N*D, x0.5 causal; bwd 2.5 x fwd)")
    print(f"{'mode':4} {'D':>4} {'causal':>6} {'N':>6} " + " ".join(f"{n:>{w}}" for n, w in zip(providers, widths)))
    # fwd before bwd, then D, causal, N.
    for key in sorted(table, key=lambda k: (k[0] != "fwd", k[1:])):
        cells = [table[key].get(name) for name in providers]
        text = " ".join(f"{'-' if v is None else f'{v:.1f}':>{w}}" for v, w in zip(cells, widths))
        print(f"{key[0]:4} {key[1]:>4} {str(key[2]):>6} {key[3]:>6} {text}")


if __name__ == "__main__":
    main()
