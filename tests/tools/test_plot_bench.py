"""tools/plot_bench.py on small synthetic benchmark documents: the PNG lands next to the JSON, has one panel per
(mode, D, causal), and a row without a TFLOPS figure or a document without rows is handled."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tools" / "plot_bench.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

matplotlib_image = pytest.importorskip("matplotlib.image", reason="matplotlib is in .ci/requirements.txt")


def rows():
    out = []
    for mode in ("fwd", "bwd"):
        for head_dim in (64, 128):
            for causal in (0, 1):
                for n in (512, 1024, 2048, 4096):
                    for provider, scale in (("flash4", 1.0), ("sdpa_cudnn", 1.1), ("sdpa_flash(FA2)", 0.6)):
                        out.append({"mode": mode, "D": head_dim, "causal": causal, "N": n, "B": 16384 // n,
                                    "H": 2048 // head_dim, "provider": provider, "ms": 1.0,
                                    "tflops": scale * (200 + 50 * n.bit_length())})
    return out


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_writes_a_png_next_to_the_json(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"meta": {"date": "2026-12-04", "commit": "abc1234", "device": "H200"},
                                 "rows": rows()}))
    done = run(bench)
    assert done.returncode == 0, done.stderr
    png = tmp_path / "bench.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    assert png.stat().st_size > 20_000  # eight panels of lines and text, not an empty canvas
    pixels = matplotlib_image.imread(png)
    height, width = pixels.shape[:2]
    assert width > height > 400  # four panels across, two down
    assert pixels[..., :3].std() > 0.05


def test_json_lines_rows_without_tflops_and_an_explicit_path(tmp_path):
    lines = rows()[:12] + [dict(rows()[0], N=8192, tflops=None)]  # a time flash4-bench could not measure
    raw = tmp_path / "rows.jsonl"
    raw.write_text("".join(json.dumps(row) + "\n" for row in lines))
    out = tmp_path / "plots" / "run.png"
    out.parent.mkdir()
    done = run(raw, "--out", out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_a_document_without_rows_is_an_error(tmp_path):
    bench = tmp_path / "empty.json"
    bench.write_text(json.dumps({"meta": {}, "rows": []}))
    done = run(bench)
    assert done.returncode != 0 and "no row with a TFLOPS figure" in done.stderr
    assert not (tmp_path / "empty.png").exists()
