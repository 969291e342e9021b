#!/usr/bin/env python3
"""Times the peer attention implementations on the anchors' shapes, for the same run as flash4-bench.

    bench/peers.py [--dims 64,128] [--modes fwd,bwd] [--seqlens 512,...,16384] [--providers sdpa_cudnn,...]

Providers (names as in ../shared/anchors): sdpa_cudnn, sdpa_flash(FA2) (PyTorch SDPA backends) and
flex_attention (compiled). Shapes: bf16, total tokens 16K, H = 2048 / D, N in 512..16K. Prints one JSON row
per measurement: mode, D, causal, N, B, H, provider, ms, tflops. The runners, inputs and timing (triton's
do_bench median; the backward alone, through a retained graph) are python/flash4/bench.py's, so these rows
and `python -m flash4.bench` measure the peers the same way. Importing the flash4 package does not open
the library, so this script runs without it.
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the checkout's package, not installed

from flash4 import bench  # noqa: E402  (after the path set-up)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--modes", default="fwd")
    parser.add_argument("--seqlens", default=",".join(str(n) for n in bench.SEQLENS))
    parser.add_argument("--providers", default=",".join(bench.PEERS), help="comma-separated subset of the peers")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        for d in (int(x) for x in args.dims.split(",")):
            for causal in (False, True):
                for n in (int(x) for x in args.seqlens.split(",")):
                    case, q, k, v = bench.case_inputs(mode, d, n)
                    for provider in args.providers.split(","):
                        try:
                            ms, _ = bench.measure(provider, mode, q, k, v, causal)
                        except Exception as error:  # one failure (an unsupported case) must not end the run
                            print(f"peers: {provider} {mode} D={d} N={n} causal={causal} failed: {error}",
                                  file=sys.stderr)
                            continue
                        row = dict(mode=mode, D=d, causal=causal, N=n, B=case["B"], H=case["H"], provider=provider,
                                   ms=round(ms, 5), tflops=round(bench.case_flops(case, causal) / ms / 1e9, 1))
                        print(json.dumps(row), flush=True)
                    del q, k, v


if __name__ == "__main__":
    main()
