"""Per-call host time of flash4's Python layers on the CPU, the library stubbed: the eager path against the
torch.library path (what every call took before the eager path existed, and what torch.compile still calls).

    python3 tests/python/host_overhead_stub.py STUB_LIBRARY   # prints one line per mode; --json for the numbers

STUB_LIBRARY: a libflash4.so stand-in whose entry points return success (STUB_SOURCE below, built by
test_host_overhead_cpu.py, or by hand: gcc -shared -fPIC -Iinclude -x c - -o stub.so). No GPU is involved, so
three things are changed here, in this process only: flash4._launch.run calls the stub with CPU tensors (the
workspace kept as for stream 0) instead of finding a stream; the checks' "is this a CUDA tensor" reads "is this
a CPU tensor"; and the ops get a CPU kernel (their CUDA one). Everything else is the package's code. Times are CPU time of this thread
(time.thread_time), the least of `repeats` loops: a busy machine disturbs it far less than wall time, and
only ever upwards. The GPU figures come from
`python -m flash4.bench --host-overhead` on the device.
"""

import argparse
import importlib.util
import inspect
import json
import sys
import textwrap
import time
from pathlib import Path

import torch

if importlib.util.find_spec("flash4") is None:  # run by hand from a checkout without PYTHONPATH=python
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import flash4  # noqa: E402
from flash4 import _checks, _launch, ops  # noqa: E402
from flash4._loader import open_library  # noqa: E402

STUB_SOURCE = r"""
#include "flash4/flash4.h"
static flash4_status ok(size_t size, size_t expected) { return size == expected ? FLASH4_SUCCESS : FLASH4_ERROR_INVALID_STRUCT_SIZE; }
int flash4_version(void) { return 200; }
const char* flash4_version_string(void) { return "stub"; }
const char* flash4_status_string(flash4_status s) { (void)s; return "stub status"; }
const char* flash4_last_error_message(void) { return ""; }
flash4_status flash4_fwd_check(const flash4_fwd_params* p) { return ok(p->struct_size, sizeof *p); }
flash4_status flash4_fwd_workspace_size(const flash4_fwd_params* p, size_t* b) { *b = 0; return ok(p->struct_size, sizeof *p); }
flash4_status flash4_fwd(const flash4_fwd_params* p, flash4_stream_t s) { (void)s; return ok(p->struct_size, sizeof *p); }
flash4_status flash4_bwd_check(const flash4_bwd_params* p) { return ok(p->struct_size, sizeof *p); }
flash4_status flash4_bwd_workspace_size(const flash4_bwd_params* p, size_t* b) { *b = 4096; return ok(p->struct_size, sizeof *p); }
flash4_status flash4_bwd(const flash4_bwd_params* p, flash4_stream_t s) { (void)s; return ok(p->struct_size, sizeof *p); }
"""
MODES = ("fwd", "fwd_grad", "bwd")


def run_on_cpu(stub):
    """The three changes of the module's docstring."""
    allocate = _launch.workspace_allocator(0, 0, torch.device("cpu"), capturing=False)

    def run(direction, params, device):
        error, workspace = _launch.call_library(stub, direction, params, 0, allocate)
        if error is not None:
            raise error

    _launch.run = run
    for name in ("_plainly_valid", "_check_placement"):
        source = textwrap.dedent(inspect.getsource(getattr(_checks, name))).replace(".is_cuda", ".is_cpu")
        exec(source, _checks.__dict__)
    for op in (ops.fwd, ops.bwd):
        op.register_kernel("cpu")(op._init_fn)


def per_call_us(fns, calls, repeats):
    """Per call, the least over `repeats` loops of each of `fns`. The functions take turns within every repeat
    (in alternating order), so that a stretch of load on the machine, which only ever adds time, reaches them
    alike rather than one function's loops alone."""
    for fn in fns:
        for _ in range(calls // 5):
            fn()
    times = [[] for _ in fns]
    for repeat in range(repeats):
        order = range(len(fns)) if repeat % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            start = time.thread_time()
            for _ in range(calls):
                fns[i]()
            times[i].append((time.thread_time() - start) / calls * 1e6)
    return [min(t) for t in times]


def timed(path, mode):
    """The call to time: flash_attn_func (eager path) or torch.ops.flash4.fwd (torch.library path)."""
    # A tiny shape: CPU allocations cost more with size, the CUDA caching allocator's do not.
    q, k, v = (torch.randn(1, 16, 2, 64, dtype=torch.bfloat16).requires_grad_(mode != "fwd") for _ in "qkv")
    if path == "eager":
        forward = lambda: flash4.flash_attn_func(q, k, v, causal=True)  # noqa: E731
    else:
        options = (64**-0.5, True, -1, 0, 0.0, False)
        forward = lambda: torch.ops.flash4.fwd(q, k, v, *options)[0]  # noqa: E731
    if mode != "bwd":
        return forward
    out = forward()
    dout = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stub", type=Path)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    run_on_cpu(open_library(args.stub))
    unit = torch.zeros(4)
    [add_us] = per_call_us([lambda: torch.add(unit, unit)], args.calls, args.repeats)
    results = {"torch.add (tiny CPU tensors, for scale)": add_us}
    paths = ("eager", "torch.library")
    for mode in MODES:
        for path, us in zip(paths, per_call_us([timed(path, mode) for path in paths], args.calls, args.repeats)):
            results[f"{mode} {path}"] = us
    if args.json:
        print(json.dumps(results))
    else:
        for name, us in results.items():
            print(f"{name:42} {us:7.1f} us")


if __name__ == "__main__":
    main()
