"""Tests of tools/roofline.py: the per-tile arithmetic against hand-computed figures, the bound, the CLI's
JSON output and the merge of measured flash4 rows. Run: python3 -m pytest tests/python/test_roofline.py"""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "roofline.py"
_spec = importlib.util.spec_from_file_location("roofline", TOOL)
roofline = importlib.util.module_from_spec(_spec)
sys.modules["roofline"] = roofline
_spec.loader.exec_module(roofline)

H200, B200 = roofline.H200, roofline.B200


def run_cli(*args):
    done = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, check=True)
    return done.stdout


def find(rows, arch, direction, d):
    (row,) = [r for r in rows if r["arch"] == arch and r["direction"] == direction and r["D"] == d]
    return row


# ------------------------------------------------------------------------------------------- arithmetic

def test_h200_fwd_d128_mma():
    assert roofline.tile_flops("fwd", 128) == 4 * 128 * 128 * 128 == 8_388_608
    assert roofline.mma_cycles(H200, "fwd", 128) == 8_388_608 / 4096 == 2048


def test_bwd_flops_are_2_5x_fwd():
    for d in roofline.HEAD_DIMS:
        assert roofline.tile_flops("bwd", d) == 10 * 128 * 128 * d
        assert roofline.tile_flops("bwd2cta", d) == roofline.tile_flops("bwd", d)
    assert roofline.mma_cycles(H200, "bwd", 128) == 10 * 128**3 / 4096 == 5120
    assert roofline.mma_cycles(B200, "bwd", 128) == 2560


def test_h200_d64_exp_equals_mma():
    # DESIGN.md section 3: at D=64 the exponentials (1024 cycles per 128x128 tile) equal the matmul (1024).
    assert roofline.mma_cycles(H200, "fwd", 64) == 4 * 128 * 128 * 64 / 4096 == 1024
    assert roofline.exp_cycles(H200, "fwd") == 128 * 128 / 16 == 1024
    row = roofline.model_tile(H200, "fwd", 64)
    assert row["mma_cycles"] == row["exp_cycles"] == row["bound_cycles"] == 1024
    assert row["limiter"] == "mma=exp"


def test_h200_smem_accounting():
    # fwd: Q once (32 KiB) + K and V read by both 64-row warpgroups (2 x 2 x 32 KiB) = 160 KiB.
    assert roofline.smem_cycles(H200, "fwd", 128) == (32768 + 2 * 32768 + 2 * 32768) / 128 == 1280
    assert roofline.smem_cycles(H200, "fwd", 64) == 640
    # bwd: 8ND + 24MD + 4MN bytes (see smem_components) = 131072 + 393216 + 65536 at D=128.
    assert roofline.smem_cycles(H200, "bwd", 128) == (8 * 128 * 128 + 24 * 128 * 128 + 4 * 128 * 128) / 128 == 4608


def test_b200_matches_fa4_paper_d128():
    # FA4 paper's per-tile figures at M=N=D=128 on B200.
    fwd = roofline.model_tile(B200, "fwd", 128)
    assert (fwd["mma_cycles"], fwd["exp_cycles"], fwd["smem_cycles"]) == (1024, 1024, 768)
    bwd = roofline.model_tile(B200, "bwd", 128)
    assert (bwd["mma_cycles"], bwd["exp_cycles"], bwd["smem_cycles"]) == (2560, 1024, 3328)
    parts = bwd["smem_components"]
    operands = sum(v for k, v in parts.items() if k not in ("dS store", "dQ fp32 store + read"))
    assert operands / 128 == 2048  # 8 of the 10 GEMM operands from smem, 32 KiB each
    assert parts["dS store"] / 128 == 256
    assert parts["dQ fp32 store + read"] / 128 == 1024
    pair = roofline.model_tile(B200, "bwd2cta", 128)
    assert (pair["mma_cycles"], pair["smem_cycles"]) == (2560, 2688)
    parts = pair["smem_components"]
    assert parts["dS exchange (DSMEM)"] / 128 == 384
    assert parts["dQ fp32 store + read (half)"] / 128 == 512


def test_bound_is_the_max():
    for arch in (H200, B200):
        for direction in arch.directions:
            for d in roofline.HEAD_DIMS:
                row = roofline.model_tile(arch, direction, d, soft_share=0.25)
                assert row["bound_cycles"] == max(row["mma_cycles"], row["exp_cycles"], row["smem_cycles"])
                assert row["serial_cycles"] == max(row["mma_cycles"], row["smem_cycles"]) + row["exp_cycles"]
    assert roofline.model_tile(B200, "fwd", 64)["limiter"] == "exp"       # 512 / 1024 / 384
    assert roofline.model_tile(B200, "bwd", 128)["limiter"] == "smem"     # 2560 / 1024 / 3328
    assert roofline.model_tile(B200, "fwd", 256)["limiter"] == "mma"      # 2048 / 1024 / 1536
    assert roofline.model_tile(H200, "bwd", 64)["limiter"] == "mma=smem"  # 2560 / 1024 / 2560
    assert roofline.limiter({"mma": 1.0, "exp": 3.0, "smem": 2.0}) == "exp"


def test_predicted_tflops():
    # At the MMA bound the prediction is the spec peak: 132 x 4096 x 1.830 GHz = 989.4 TFLOPS.
    assert roofline.model_tile(H200, "fwd", 128)["tflops_bound"] == pytest.approx(989.4)
    assert B200.peak_tflops == pytest.approx(2250.0)
    # B200 fwd D=64 is exp-bound at 1024 cycles for 512 cycles of MMA: half the peak.
    assert roofline.model_tile(B200, "fwd", 64)["tflops_bound"] == pytest.approx(1125.0)
    # Hand computation: 4,194,304 FLOP / 1024 cycles x 148 SMs x 1.5 GHz.
    assert roofline.predicted_tflops(B200, 4_194_304, 1024, clock_ghz=1.5) == pytest.approx(4096 * 148 * 1.5e9 / 1e12)
    # H200 is calibrated to its measured dense GEMM (770-800, midpoint 785).
    assert roofline.model_tile(H200, "fwd", 128)["tflops_gemm_calibrated"] == pytest.approx(785.0)
    assert roofline.model_tile(B200, "fwd", 128)["tflops_gemm_calibrated"] is None


def test_soft_exp2_share():
    assert roofline.exp2_rate(H200, 0.0) == 16
    # measured mix (DESIGN.md section 6), rescaled so share 0 is the MUFU's 16
    assert roofline.exp2_rate(H200, 0.375) == pytest.approx(19.6 * 16 / 15.9)
    assert roofline.exp2_rate(H200, 1.0) == pytest.approx(12.5 * 16 / 15.9)
    assert roofline.exp2_rate(H200, 0.3125) == pytest.approx((19.3 + 19.6) / 2 * 16 / 15.9)
    # ideal independent pipes: share 1/4 -> MUFU does 3/4 at 16/clk: 1024 * 0.75 = 768 cycles per tile
    assert roofline.exp_cycles(B200, "fwd", soft_share=0.25, exp_model="ideal") == pytest.approx(768)
    assert roofline.exp_cycles(B200, "fwd", soft_share=1.0, exp_model="ideal") == pytest.approx(16384 / 12.5)
    with pytest.raises(ValueError):
        roofline.exp2_rate(H200, 1.5)
    # the share moves B200 fwd D=64 off its exp bound only partly: still exp-bound, faster than share 0
    assert roofline.model_tile(B200, "fwd", 64, soft_share=0.25)["bound_cycles"] < 1024


# ----------------------------------------------------------------------------------------------- CLI

def test_json_output_parses():
    data = json.loads(run_cli("--json"))
    assert len(data["rows"]) == 2 * 5 + 3 * 5  # h200 fwd/bwd, b200 fwd/bwd/bwd2cta, 5 head dims each
    assert set(data["meta"]["archs"]) == {"h200", "b200"}
    row = find(data["rows"], "h200", "fwd", 128)
    assert row["mma_cycles"] == 2048 and row["measured_flash4_noncausal"] is None
    only = json.loads(run_cli("--json", "--arch", "b200", "--soft-share", "0.25"))
    assert {r["arch"] for r in only["rows"]} == {"b200"}
    assert all(r["soft_share"] == 0.25 for r in only["rows"])


def test_table_prints_every_head_dim():
    text = run_cli("--arch", "h200")
    for d in roofline.HEAD_DIMS:
        assert f" {d} " in text
    assert "not measured" not in text  # no --measured: no measured columns


def _anchor_file(tmp_path, rows):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": {"device": "test"}, "rows": rows}))
    return path


def _row(provider, mode, d, causal, n, tflops):
    return {"mode": mode, "D": d, "causal": causal, "N": n, "B": 1, "H": 2048 // d, "tflops": tflops,
            "provider": provider}


def test_measured_merge(tmp_path):
    path = _anchor_file(tmp_path, [
        _row("flash4", "fwd", 128, False, 16384, 700.0),
        _row("flash4", "fwd", 128, False, 16384, 710.0),  # two runs: the median is reported
        _row("flash4", "fwd", 128, False, 8192, 999.0),   # other seqlen: ignored
        _row("fa3", "fwd", 128, True, 16384, 641.0),      # other provider: ignored
        _row("flash4", "bwd", 64, True, 16384, 555.0),
    ])
    data = json.loads(run_cli("--json", "--measured", str(path), "--anchors", str(path)))
    fwd = find(data["rows"], "h200", "fwd", 128)
    assert fwd["measured_flash4_noncausal"] == pytest.approx(705.0)
    assert fwd["measured_flash4_causal"] is None
    assert fwd["best_other_causal"] == {"tflops": 641.0, "provider": "fa3"}
    assert find(data["rows"], "h200", "bwd", 64)["measured_flash4_causal"] == 555.0
    assert "measured_flash4_noncausal" not in find(data["rows"], "b200", "fwd", 128)  # never on Blackwell
    text = run_cli("--arch", "h200", "--measured", str(path))
    line = [l for l in text.splitlines() if l.startswith("h200  fwd       128")][0]
    assert "705" in line and "not measured" in line
    assert "not measured" in [l for l in text.splitlines() if l.startswith("h200  fwd        64")][0]


def test_measured_json_lines(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [_row("flash4", "fwd", 64, True, 16384, 600.0),
                                                       _row("flash4", "bwd", 256, False, 16384, 420.0)]) + "\n")
    measured = roofline.load_measured([path])
    assert measured == {("fwd", 64, True): 600.0, ("bwd", 256, False): 420.0}


def test_measured_file_absent(tmp_path):
    text = run_cli("--arch", "h200", "--measured", str(tmp_path / "missing.json"))
    rows = [l for l in text.splitlines() if l.startswith("h200 ")]
    assert len(rows) == 10 and all(l.count("not measured") == 2 for l in rows)
