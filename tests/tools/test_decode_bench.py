"""bench/decode_bench.py's summary on synthetic rows: eager and CUDA-graph ratios per case, and the graph columns
left out where flash4 or a peer has no graph figure. (The timing itself needs the GPU: tools/gpu-run.sh.)"""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is in .ci/requirements.txt")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "decode_bench.py"


def load_decode_bench():
    spec = importlib.util.spec_from_file_location("decode_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode_row(provider, ms, graph_ms=None):
    row = dict(mode="decode", D=128, causal=False, N=8192, B=8, H=32, Hkv=8, Sq=1, page_size=64, provider=provider,
               ms=ms, tflops=1.0, bandwidth_tbs=round(0.268 / ms, 3))
    if graph_ms is not None:
        row |= dict(graph_ms=graph_ms, graph_bandwidth_tbs=round(0.268 / graph_ms, 3))
    return row


def test_summary_gives_eager_and_graph_ratios_against_the_fastest_peer():
    bench = load_decode_bench()
    rows = [decode_row("sdpa_flash", 0.2, 0.15), decode_row("sdpa_cudnn", 0.3, 0.12), decode_row("flash4", 0.25, 0.1),
            decode_row("fa4_cute", 0.2, 0.11)]
    (line,) = bench.summary(rows)
    assert line["sdpa_fastest"] == "sdpa_flash" and line["flash4_vs_sdpa"] == pytest.approx(0.8)
    assert line["flash4_vs_fa4"] == pytest.approx(0.8)
    # Under the graph the fastest SDPA backend is another one: each timing picks its own.
    assert line["sdpa_graph_fastest"] == "sdpa_cudnn" and line["flash4_vs_sdpa_graph"] == pytest.approx(1.2)
    assert line["flash4_vs_fa4_graph"] == pytest.approx(1.1)
    assert line["flash4_graph_tbs"] == pytest.approx(2.68)


def test_summary_leaves_out_graph_columns_that_have_no_figure():
    bench = load_decode_bench()
    (line,) = bench.summary([decode_row("sdpa_flash", 0.2, 0.15), decode_row("flash4", 0.25),
                             decode_row("fa4_cute", 0.2, 0.11)])
    assert "flash4_vs_sdpa" in line and not any(key.endswith("_graph") or "graph_" in key for key in line)
    (line,) = bench.summary([decode_row("sdpa_flash", 0.2), decode_row("flash4", 0.25, 0.1),
                             decode_row("fa4_cute", 0.2)])
    assert line["flash4_graph_tbs"] == pytest.approx(2.68)
    assert "flash4_vs_sdpa_graph" not in line and "flash4_vs_fa4_graph" not in line


def test_no_graph_flag():
    bench = load_decode_bench()
    assert bench.parse_args(["--out", "x.json", "--no-graph"]).no_graph
    assert not bench.parse_args(["--out", "x.json"]).no_graph


def test_summary_table_has_a_row_per_case_and_dashes_for_missing_figures():
    bench = load_decode_bench()
    lines = bench.summary([decode_row("sdpa_flash", 0.2, 0.15), decode_row("flash4", 0.25)])
    header, row = bench.summary_table(lines).splitlines()
    assert header.split()[:4] == ["B", "N", "Sq", "page"]
    assert row.split()[:6] == ["8", "8192", "1", "64", "1.072", "0.8"] and row.split()[-3:] == ["-", "-", "-"]
