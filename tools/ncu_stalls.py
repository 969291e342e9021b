#!/usr/bin/env python3
"""Summarizes an Nsight Compute SASS source page (`ncu --page source --print-source sass --csv`, as
tools/gpu-profile-bwd.sh writes it): the stall reasons over a range of instructions and the instructions
with the most samples, each with its two largest reasons.

A kernel's idle roles (a producer spinning on an mbarrier, writer warps parked at a named barrier) take
samples too, so the consumers' share is best read over their main loop: --first / --last take the
instructions' addresses (hex, the low 20 bits suffice, as the CSV's addresses differ per run only above
them); --loop-of MNEMONIC picks the range from the first to the last instruction whose text contains it
(for example HGMMA: the consumers' wgmma issues, which bracket their loop).

  tools/ncu_stalls.py stalls-d128.csv [--loop-of HGMMA] [--first b6800 --last ba900] [--top 25]
"""
import argparse
import collections
import csv
import signal
import sys

ADDRESS_BITS = 0xFFFFF  # ncu prints absolute addresses; their low bits locate an instruction in the kernel


def read_rows(path):
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header_index = next(i for i, row in enumerate(rows) if "Address" in row and "Source" in row)
    header = rows[header_index]
    data = [row for row in rows[header_index + 1:] if len(row) >= len(header)]
    return header, data


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--first", help="first instruction address (hex)")
    parser.add_argument("--last", help="last instruction address (hex)")
    parser.add_argument("--loop-of", help="range from the first to the last instruction containing this text")
    parser.add_argument("--top", type=int, default=25, help="instructions to list (default 25)")
    args = parser.parse_args()

    header, data = read_rows(args.csv)
    column = {name: i for i, name in enumerate(header)}
    samples_column = column["Warp Stall Sampling (All Samples)"]
    reasons = [name for name in header if name.startswith("stall_") and "Not Issued" not in name]

    def address(row):
        return int(row[column["Address"]], 16) & ADDRESS_BITS

    def count(row, name):
        value = row[column[name]]
        return int(value) if value else 0

    total_samples = sum(count(row, header[samples_column]) for row in data)
    first, last = 0, ADDRESS_BITS
    if args.loop_of:
        marked = [address(row) for row in data if args.loop_of in row[column["Source"]]]
        if not marked:
            sys.exit(f"no instruction contains {args.loop_of!r}")
        first, last = min(marked), max(marked)
    if args.first:
        first = int(args.first, 16) & ADDRESS_BITS
    if args.last:
        last = int(args.last, 16) & ADDRESS_BITS
    selected = [row for row in data if first <= address(row) <= last]

    range_samples = sum(count(row, header[samples_column]) for row in selected)
    if range_samples == 0:
        sys.exit("no samples in the range")
    print(f"{range_samples} of {total_samples} samples ({100 * range_samples / total_samples:.1f}%) "
          f"in {first:05x}..{last:05x}")
    by_reason = collections.Counter({name: sum(count(row, name) for row in selected) for name in reasons})
    for name, value in by_reason.most_common(10):
        if value:
            print(f"  {name[len('stall_'):]:<20} {100 * value / range_samples:5.1f}%")
    print("instructions with the most samples (share of the range, two largest reasons):")
    ranked = sorted(selected, key=lambda row: -count(row, header[samples_column]))
    for row in ranked[:args.top]:
        top = sorted(((count(row, name), name) for name in reasons), reverse=True)[:2]
        why = " ".join(f"{name[len('stall_'):]}={value}" for value, name in top if value)
        share = 100 * count(row, header[samples_column]) / range_samples
        print(f"  {address(row):05x} {share:5.1f}%  {row[column['Source']].strip()[:64]:<64}  {why}")


if __name__ == "__main__":
    main()
