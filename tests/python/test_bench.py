"""flash4.bench without a GPU: its arguments, FLOP counts, the JSON it writes (checked with the anchors'
checker, shared/tools/check-bench-json.py), the plot, the progress fallback, and bench/peers.py reusing it.
"""

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from flash4 import bench

CHECKER = REPO_ROOT.parent / "shared" / "tools" / "check-bench-json.py"


def test_importing_the_bench_needs_neither_tqdm_nor_matplotlib_nor_triton():
    code = ("import sys; sys.modules.update(tqdm=None, matplotlib=None, triton=None); import flash4.bench as b; "
            "p = b.progress_bar(3); p.set_postfix_str('x'); p.update(); print(type(p).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO_ROOT / "python")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "LineProgress" and "[1/3] x" in done.stderr


def test_provider_names_are_the_anchors():
    anchors = json.loads((REPO_ROOT.parent / "shared" / "anchors" / "h200-2026-12-02.json").read_text()) \
        if (REPO_ROOT.parent / "shared" / "anchors").is_dir() else None
    assert bench.PROVIDERS == ("flash4", "sdpa_cudnn", "sdpa_flash(FA2)", "fa4_cute", "flex_attention")
    if anchors is not None:  # fa4_cute (FlashAttention-4's CuTe kernels) joined the peers after the anchors
        assert set(bench.PEERS) - {"fa4_cute"} <= {row["provider"] for row in anchors["rows"]}


def test_default_arguments_are_the_anchors_shapes():
    args = bench.parse_args([])
    assert args.modes == ["fwd", "bwd"] and args.head_dims == [64, 128] and args.causals == [False, True]
    assert args.seqlens == [512, 1024, 2048, 4096, 8192, 16384]
    assert (args.total_tokens, args.model_dim, args.time_budget_s) == (16384, 2048, None)
    assert bench.parse_args(["--causal", "yes", "--time-budget-s", "60"]).causals == [True]


def test_flops():
    # 16K tokens at N=4096: B=4, H=16 at D=128.
    assert bench.fwd_flops(4, 16, 4096, 128, causal=False) == 4 * 4 * 16 * 4096 * 4096 * 128
    assert bench.fwd_flops(4, 16, 4096, 128, causal=True) == 2 * 4 * 16 * 4096 * 4096 * 128
    case = {"mode": "bwd", "B": 4, "H": 16, "N": 4096, "D": 128}
    assert bench.case_flops(case, causal=False) == 2.5 * bench.fwd_flops(4, 16, 4096, 128, False)


def test_unknown_provider_is_refused():
    with pytest.raises(ValueError, match="unknown provider 'fa3'"):
        bench.forward_fn("fa3", None, None, None, False)


ROWS = [
    {"mode": mode, "D": 64, "causal": causal, "N": n, "B": 16384 // n, "H": 32, "provider": provider, "ms": 1.0,
     "tflops": tflops}
    for mode in ("fwd", "bwd") for causal in (False, True) for n in (512, 1024)
    for provider, tflops in (("flash4", 300.0), ("sdpa_cudnn", 350.0), ("flex_attention", 250.0))
]


def test_written_json_passes_the_anchors_checker(tmp_path, monkeypatch):
    if not CHECKER.is_file():
        pytest.skip(f"{CHECKER} is not in this checkout")
    args = bench.parse_args(["--head-dims", "64", "--seqlens", "512", "1024"])
    monkeypatch.setattr(bench, "device_text", lambda: "NVIDIA H200 (132 SMs), driver test")
    monkeypatch.setattr(bench, "software_text", lambda: "torch test")
    meta = bench.header(args)
    assert {"date", "commit", "device", "software"} <= set(meta)
    (tmp_path / "run.json").write_text(json.dumps({"meta": {**meta, "skipped": []}, "rows": ROWS}))
    done = subprocess.run([sys.executable, str(CHECKER), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert "24 rows, 8 flash4, peers ['flex_attention', 'sdpa_cudnn']" in done.stdout


def test_plot_writes_a_png(tmp_path):
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("matplotlib is not installed")
    args = bench.parse_args(["--head-dims", "64", "--seqlens", "512", "1024"])
    path = tmp_path / "bench.png"
    assert bench.plot(ROWS, args, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_peers_script_reuses_the_package_runners():
    text = (REPO_ROOT / "bench" / "peers.py").read_text()
    assert "from flash4 import bench" in text and "bench.measure(" in text and "bench.PEERS" in text
    done = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "peers.py"), "--help"], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "--dims" in done.stdout and "--seqlens" in done.stdout


def test_merge_bench_keeps_deterministic_rows_in_their_own_column(tmp_path):
    """tools/merge_bench.py: a deterministic backward row and the default row of the same shape both reach
    the document, and the printed table shows them in separate columns instead of one overwriting the
    other."""
    common = {"mode": "bwd", "D": 64, "causal": 0, "N": 16384, "B": 1, "H": 32, "ms": 1.0}
    lines = [dict(common, provider="flash4", tflops=435.6, deterministic=0),
             dict(common, provider="flash4", tflops=408.8, deterministic=1),
             dict(common, provider="sdpa_cudnn", tflops=447.8)]
    raw = tmp_path / "rows.jsonl"
    raw.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "merged.json"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "merge_bench.py"), str(out), str(raw),
                           "--commit", "abc", "--device", "H200", "--software", "test"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(out.read_text())["rows"]) == 3
    header, row = done.stdout.splitlines()[1:3]
    assert header.split()[4:] == ["flash4", "flash4", "det", "sdpa_cudnn"]  # "flash4 det" is one column
    assert row.split()[4:] == ["435.6", "408.8", "447.8"]


def test_host_overhead_mode_arguments_and_table():
    from flash4 import bench_host

    args = bench.parse_args(["--host-overhead", "--host-shape", "2", "64", "4", "64", "--host-calls", "50"])
    assert args.host_overhead and args.host_shape == [2, 64, 4, 64] and args.host_calls == 50
    assert not bench.parse_args([]).host_overhead
    rows = [{"mode": "fwd", "provider": "flash4", "host_us": 20.0, "gpu_us": 8.0},
            {"mode": "fwd", "provider": "sdpa", "host_us": 40.0, "gpu_us": 9.5},
            {"mode": "fwd", "provider": "flash4_c", "host_us": 12.5, "gpu_us": 8.0},
            {"mode": "bwd", "provider": "flash4", "host_us": 70.0, "gpu_us": 30.0}]
    header, fwd, bwd, note, fwd_parts, bwd_parts = bench_host.table(rows).splitlines()
    assert header.split()[:3] == ["mode", "flash4", "flash4_op"] and header.endswith("flash4 / sdpa")
    assert fwd.startswith("fwd") and "20.0 (  8.0)" in fwd and "40.0 (  9.5)" in fwd and fwd.endswith("0.50")
    assert bwd.startswith("bwd") and "70.0" in bwd and not bwd.endswith("0.50")  # no SDPA row: no ratio
    assert fwd_parts == "fwd: flash4 20.0 us = C calls 12.5 + Python wrapper 7.5; sdpa 40.0 us"
    assert bwd_parts == "bwd: flash4 70.0 us"
    # The C calls alone: no autograd graph to record.
    assert bench_host.timed_call("flash4_c", "fwd_grad", (1, 8, 1, 64)) is None
