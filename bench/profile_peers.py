#!/usr/bin/env python3
"""One call of each peer per cell inside an NVTX range "prof", for Nsight Compute (`ncu --nvtx --nvtx-include
prof/`; tools/gpu-profile-16k.sh runs it). All cells run in this one process, so each configuration compiles
once; a cell's warm-up calls run outside the range.

    bench/profile_peers.py --mode fwd|bwd [--dims 64,...] [--seqlen 16384] [--providers fa4_cute,sdpa_cudnn]

Prints "cell PROVIDER D<d> causal <0|1>" before each profiled call, in the order ncu reports its kernels.
Inputs and callables are python/flash4/bench.py's (the anchors' shapes: bf16, 16K total tokens,
H = 2048 / D). cuDNN runs at D = 64 and 128 only (its rows elsewhere are not the peer to beat).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # the checkout's package
from flash4 import bench  # noqa: E402

CUDNN_DIMS = (64, 128)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("fwd", "bwd"), required=True)
    parser.add_argument("--dims", default="64,96,128,192,256")
    parser.add_argument("--seqlen", type=int, default=16384)
    parser.add_argument("--providers", default="fa4_cute,sdpa_cudnn")
    args = parser.parse_args()
    # The backward on this thread: autograd's device threads would launch its kernels outside the range.
    torch.autograd.set_multithreading_enabled(False)
    for provider in args.providers.split(","):
        for head_dim in (int(d) for d in args.dims.split(",")):
            if provider == "sdpa_cudnn" and head_dim not in CUDNN_DIMS:
                continue
            for causal in (False, True):
                _, q, k, v = bench.case_inputs(args.mode, head_dim, args.seqlen)
                call = bench.timed_fn(provider, args.mode, q, k, v, causal)
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
                print(f"cell {provider} D{head_dim} causal {int(causal)}", flush=True)
                torch.cuda.nvtx.range_push("prof")
                call()
                torch.cuda.nvtx.range_pop()
                torch.cuda.synchronize()


if __name__ == "__main__":
    main()
