#!/usr/bin/env python3
"""Times the peer attention implementations on the anchors' shapes, for the same run as flash4-bench.

Providers (names as in ../shared/anchors): sdpa_cudnn, sdpa_flash(FA2) (PyTorch SDPA backends) and flex
(torch FlexAttention, compiled). Shapes: bf16, total tokens 16K, H = 2048 / D, N in 512..16K. Prints one
JSON row per measurement: mode, D, causal, N, B, H, provider, ms, tflops. Median of triton's do_bench.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

TOTAL_TOKENS = 16384
HIDDEN = 2048
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)


def flops(mode, batch, heads, n, d, causal):
    forward = 4.0 * batch * heads * n * n * d * (0.5 if causal else 1.0)
    return forward * (2.5 if mode == "bwd" else 1.0)


def sdpa(backend):
    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def flex_runner():
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    compiled = torch.compile(flex_attention)
    masks = {}

    def run(q, k, v, causal):
        if not causal:
            return compiled(q, k, v)
        key = q.shape
        if key not in masks:
            masks[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, q.shape[2], k.shape[2])
        return compiled(q, k, v, block_mask=masks[key])
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--modes", default="fwd")
    parser.add_argument("--seqlens", default=",".join(str(n) for n in SEQLENS))
    args = parser.parse_args()
    providers = {"sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "sdpa_flash(FA2)": sdpa(SDPBackend.FLASH_ATTENTION)}
    try:
        providers["flex"] = flex_runner()
    except Exception as error:  # FlexAttention missing from this torch: say so, keep the others
        print(f"peers: flex unavailable: {error}", file=sys.stderr)
    torch.manual_seed(0)
    for mode in args.modes.split(","):
        for d in (int(x) for x in args.dims.split(",")):
            heads = HIDDEN // d
            for causal in (False, True):
                for n in (int(x) for x in args.seqlens.split(",")):
                    batch = TOTAL_TOKENS // n
                    shape = (batch, heads, n, d)
                    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=mode == "bwd")
                               for _ in range(3))
                    for name, run in providers.items():
                        try:
                            if mode == "fwd":
                                fn = lambda: run(q, k, v, causal)
                            else:
                                out = run(q, k, v, causal)
                                grad = torch.randn_like(out)
                                fn = lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
                            ms = do_bench(fn, warmup=50, rep=200, return_mode="median")
                        except Exception as error:
                            print(f"peers: {name} {mode} D={d} N={n} causal={causal} failed: {error}", file=sys.stderr)
                            continue
                        row = dict(mode=mode, D=d, causal=causal, N=n, B=batch, H=heads, provider=name, ms=round(ms, 5),
                                   tflops=round(flops(mode, batch, heads, n, d, causal) / ms / 1e9, 1))
                        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
