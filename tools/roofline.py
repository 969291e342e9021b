#!/usr/bin/env python3
"""Per-tile roofline of flash4's attention on H200 (sm_90a, runs) and B200 (sm_100a, paper only).

For one 128 x 128 tile (128 query rows x 128 key rows) at head dim D, the model counts the cycles three
SM resources need if each ran alone at its peak rate, and takes the largest as the bound:

  MMA    = tile FLOPs / dense bf16 FLOP per clock per SM      fwd 4*M*N*D, bwd 2.5x that (5 GEMMs)
  exp    = M*N exponentials / exp2 results per clock per SM   MUFU alone, or MUFU + FMA polynomial
  smem   = shared-memory bytes the MMAs (and the dS / dQ staging of the backward) move / 128 B per clock

The shared-memory accounting per architecture is written out in smem_components() and in
docs/blackwell.md; on B200 it reproduces the FA4 paper's D=128 figures (fwd 768, bwd 3328 one-CTA and
2688 two-CTA cycles). The bound assumes perfect overlap of the three resources; the "serial" figure puts
the exponentials after the matmuls (no softmax/MMA overlap), a pessimistic end of the same model.
Nothing here is a measurement except the inputs named as such; nothing here claims a Blackwell result.

Standard library only. Run `python3 tools/roofline.py --help`.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

TILE_M = 128  # query rows of one tile
TILE_N = 128  # key rows of one tile
HEAD_DIMS = (64, 96, 128, 192, 256)
BF16_BYTES = 2
FP32_BYTES = 4
MEASURED_SEQLEN = 16384  # the anchors' and bench's headline shape: total tokens 16K, N = 16384
MEASURED_PROVIDER = "flash4"

# exp2 results per clock per SM on the H200 with a share of them on the FMA polynomial (DESIGN.md section 6,
# measured, 16 independent chains per thread, nothing else on the FMA pipe). Used for both GPUs: B200 keeps
# Hopper's 16 MUFU ex2/clk/SM and 128 FP32 lanes per SM (FA4 paper), but its mix was not measured here.
MEASURED_EXP2_MIX = ((0.0, 15.9), (0.125, 18.0), (0.25, 19.3), (0.375, 19.6), (0.5, 18.2), (0.75, 14.9),
                     (1.0, 12.5))
POLY_EXP2_PER_CLK = 12.5  # the polynomial alone, same table (share 1)


@dataclass(frozen=True)
class Arch:
    key: str
    name: str
    sms: int
    mma_flop_per_clk: int  # dense bf16 FLOP per clock per SM
    mufu_ex2_per_clk: int  # hardware exp2 per clock per SM
    smem_bytes_per_clk: int  # shared-memory bandwidth per SM
    clock_ghz: float
    sources: dict = field(default_factory=dict)
    gemm_measured_tflops: tuple[float, float] | None = None  # dense bf16 GEMM measured on this card
    directions: tuple[str, ...] = ("fwd", "bwd")

    @property
    def peak_tflops(self) -> float:
        return self.sms * self.mma_flop_per_clk * self.clock_ghz * 1e9 / 1e12


# H200 SXM: NVIDIA's dense bf16 figure (989.4 TFLOPS, the same as H100 SXM) is 132 SMs x 4096 FLOP/clk at
# 1.830 GHz; that is the clock used here. Max boost is 1.98 GHz; under a sustained tensor load the card
# measures 770-800 TFLOPS on dense GEMM (shared/anchors meta), i.e. the clock the MMA actually sees is lower.
H200_SPEC_DENSE_BF16_TFLOPS = 989.4
H200_SMS = 132
H200_MMA_FLOP_PER_CLK = 4096
H200_CLOCK_GHZ = H200_SPEC_DENSE_BF16_TFLOPS * 1e12 / (H200_SMS * H200_MMA_FLOP_PER_CLK) / 1e9  # 1.830
H200_MAX_BOOST_GHZ = 1.98
H200_GEMM_MEASURED_TFLOPS = (770.0, 800.0)

# B200: NVIDIA's dense bf16 figure 2.25 PFLOPS (quoted by the FA4 paper) is 148 SMs x 8192 FLOP/clk at
# 1.856 GHz; FA4's 1613 TFLOPS at "71% utilization" implies the same peak.
B200_SPEC_DENSE_BF16_TFLOPS = 2250.0
B200_SMS = 148
B200_MMA_FLOP_PER_CLK = 8192
B200_CLOCK_GHZ = B200_SPEC_DENSE_BF16_TFLOPS * 1e12 / (B200_SMS * B200_MMA_FLOP_PER_CLK) / 1e9  # 1.856

MUFU_EX2_PER_CLK = 16  # both GPUs (FA4 paper; Hopper's rate also measured here: 15.9, DESIGN.md section 6)
SMEM_BYTES_PER_CLK = 128  # both GPUs (FA4 paper)

H200 = Arch(
    key="h200", name="H200 (sm_90a)", sms=H200_SMS, mma_flop_per_clk=H200_MMA_FLOP_PER_CLK,
    mufu_ex2_per_clk=MUFU_EX2_PER_CLK, smem_bytes_per_clk=SMEM_BYTES_PER_CLK, clock_ghz=H200_CLOCK_GHZ,
    sources={
        "sms": "shared/anchors meta: NVIDIA H200 (132 SMs)",
        "mma_flop_per_clk": "FA4 paper (H100: 4096 dense bf16 FLOP/clk/SM); Hopper SM, same on H200",
        "clock_ghz": "989.4 TFLOPS dense bf16 spec / (132 SMs x 4096); max boost 1.98 GHz",
        "gemm_measured_tflops": "shared/anchors meta: dense bf16 GEMM 770-800 TFLOPS on this card",
    },
    gemm_measured_tflops=H200_GEMM_MEASURED_TFLOPS,
    directions=("fwd", "bwd"),
)
B200 = Arch(
    key="b200", name="B200 (sm_100a)", sms=B200_SMS, mma_flop_per_clk=B200_MMA_FLOP_PER_CLK,
    mufu_ex2_per_clk=MUFU_EX2_PER_CLK, smem_bytes_per_clk=SMEM_BYTES_PER_CLK, clock_ghz=B200_CLOCK_GHZ,
    sources={
        "sms": "B200: 148 SMs",
        "mma_flop_per_clk": "FA4 paper: 8192 dense bf16 FLOP/clk/SM",
        "clock_ghz": "2.25 PFLOPS dense bf16 spec (FA4 paper) / (148 SMs x 8192)",
    },
    directions=("fwd", "bwd", "bwd2cta"),
)
ARCHS = {"h200": H200, "b200": B200}


# ----------------------------------------------------------------------------------------------- model

def tile_flops(direction: str, d: int, m: int = TILE_M, n: int = TILE_N) -> int:
    """FLOPs of one m x n tile: fwd QK^T + PV = 4mnd; bwd 5 GEMMs = 10mnd (the 2.5x rule of the anchors)."""
    fwd = 4 * m * n * d
    return fwd if direction == "fwd" else fwd * 5 // 2


def mma_cycles(arch: Arch, direction: str, d: int, m: int = TILE_M, n: int = TILE_N) -> float:
    return tile_flops(direction, d, m, n) / arch.mma_flop_per_clk


def exp2_rate(arch: Arch, soft_share: float, exp_model: str = "measured") -> float:
    """exp2 results per clock per SM with `soft_share` of them on the FMA polynomial.

    share 0 is the hardware MUFU rate (16). 'measured': piecewise-linear in DESIGN.md's H200 table, rescaled
    so that share 0 gives the MUFU rate. 'ideal': MUFU and FMA pipes fully independent,
    rate = 1 / max((1 - f) / 16, f / 12.5) -- an upper bound the H200 measurement does not reach.
    """
    if not 0.0 <= soft_share <= 1.0:
        raise ValueError(f"soft share {soft_share} outside [0, 1]")
    if soft_share == 0.0:
        return float(arch.mufu_ex2_per_clk)
    if exp_model == "ideal":
        return 1.0 / max((1.0 - soft_share) / arch.mufu_ex2_per_clk, soft_share / POLY_EXP2_PER_CLK)
    if exp_model != "measured":
        raise ValueError(f"unknown exp model {exp_model!r}")
    table = MEASURED_EXP2_MIX
    for (f0, r0), (f1, r1) in zip(table, table[1:]):
        if f0 <= soft_share <= f1:
            rate = r0 + (r1 - r0) * (soft_share - f0) / (f1 - f0)
            return rate * arch.mufu_ex2_per_clk / table[0][1]
    raise AssertionError("unreachable")


def exp_count(direction: str, m: int = TILE_M, n: int = TILE_N) -> int:
    """One exp2 per score: fwd P = 2^(S - m); bwd recomputes P = 2^(S - LSE)."""
    del direction
    return m * n


def exp_cycles(arch: Arch, direction: str, m: int = TILE_M, n: int = TILE_N, soft_share: float = 0.0,
               exp_model: str = "measured") -> float:
    return exp_count(direction, m, n) / exp2_rate(arch, soft_share, exp_model)


def smem_components(arch: Arch, direction: str, d: int, m: int = TILE_M, n: int = TILE_N) -> dict[str, int]:
    """Shared-memory bytes per m x n tile, by item. m = query rows, n = key rows, 16-bit operands.

    H200 fwd (flash4: two consumer warpgroups of m/2 rows, wgmma m64): Q is wgmma's A from smem (each
      warpgroup reads its half), K and V are B from smem and every warpgroup reads all of them; P is A from
      registers.
    H200 bwd (planned, FA3-like: two warpgroups split the n key rows, dK/dV in registers): K, V are A from
      smem once; Q and dO are B and read by both warpgroups in S^T, dP^T, dV, dK; P^T and dS^T are A from
      registers; dQ = dS K with the warpgroups splitting query rows (dS once, K twice); dS written to
      smem; the fp32 dQ partial written to smem and read back by the bulk reduce-add.
    B200 fwd (FA4): tcgen05 M=128 per Q tile; Q, K, V from smem, P from TMEM. FA4: 768 cycles at D=128.
    B200 bwd (FA4, one CTA): of the 5 GEMMs' 10 operands, P^T and dS^T come from TMEM, 8 from smem; plus the
      dS store and the fp32 dQ store + read. FA4: 2048 + 256 + 1024 = 3328 cycles at D=128.
    B200 bwd2cta (FA4, cta_group::2 pair, per CTA per tile of work): the four M=256 GEMMs read half their
      B operand per CTA; dQ is M=m/2, K=2n; dS exchanged through DSMEM (1.5x the dS tile, the paper's 384
      cycles at 128x128); fp32 dQ traffic halved. FA4: 1536 + 256 + 384 + 512 = 2688 cycles at D=128.
    Not counted anywhere (as in FA4's accounting): TMA writes of Q/K/V/dO tiles into smem, the epilogue.
    """
    h = BF16_BYTES
    if arch.key == "h200" and direction == "fwd":
        return {"Q (A, smem, once)": h * m * d, "K (B, both warpgroups)": 2 * h * n * d,
                "V (B, both warpgroups)": 2 * h * n * d}
    if arch.key == "h200" and direction == "bwd":
        return {"S^T=KQ^T: K once, Q twice": h * n * d + 2 * h * m * d,
                "dP^T=VdO^T: V once, dO twice": h * n * d + 2 * h * m * d,
                "dV+=P^T dO: dO twice": 2 * h * m * d,
                "dK+=dS^T Q: Q twice": 2 * h * m * d,
                "dQ=dS K: dS once, K twice": h * m * n + 2 * h * n * d,
                "dS store": h * m * n,
                "dQ fp32 store + TMA read": 2 * FP32_BYTES * m * d}
    if arch.key == "b200" and direction == "fwd":
        return {"S=QK^T: Q, K": h * m * d + h * n * d, "O+=PV: V (P in TMEM)": h * n * d}
    if arch.key == "b200" and direction == "bwd":
        return {"S^T=KQ^T: K, Q": h * n * d + h * m * d,
                "dP^T=VdO^T: V, dO": h * n * d + h * m * d,
                "dV+=P^T dO: dO (P^T in TMEM)": h * m * d,
                "dK+=dS^T Q: Q (dS^T in TMEM)": h * m * d,
                "dQ=dS K: dS, K": h * m * n + h * n * d,
                "dS store": h * m * n,
                "dQ fp32 store + read": 2 * FP32_BYTES * m * d}
    if arch.key == "b200" and direction == "bwd2cta":
        return {"S^T=KQ^T: K, half Q": h * n * d + h * (m // 2) * d,
                "dP^T=VdO^T: V, half dO": h * n * d + h * (m // 2) * d,
                "dV+=P^T dO: half dO": h * m * d // 2,
                "dK+=dS^T Q: half Q": h * m * d // 2,
                "dQ=dS K (M=m/2, K=2n): dS, half K": h * (m // 2) * (2 * n) + h * (2 * n) * (d // 2),
                "dS store": h * m * n,
                "dS exchange (DSMEM)": 3 * h * m * n // 2,
                "dQ fp32 store + read (half)": FP32_BYTES * m * d}
    raise ValueError(f"no smem model for {arch.key} {direction}")


def smem_cycles(arch: Arch, direction: str, d: int, m: int = TILE_M, n: int = TILE_N) -> float:
    return sum(smem_components(arch, direction, d, m, n).values()) / arch.smem_bytes_per_clk


def predicted_tflops(arch: Arch, flops: float, cycles: float, clock_ghz: float | None = None) -> float:
    """All SMs busy on such tiles, `cycles` per tile: FLOPs/clk/SM x SMs x clock."""
    clock = arch.clock_ghz if clock_ghz is None else clock_ghz
    return flops / cycles * arch.sms * clock * 1e9 / 1e12


def limiter(resources: dict[str, float], rel_tol: float = 0.005) -> str:
    """Names of the resources within rel_tol of the largest, joined by '='; 'mma=exp' for a tie."""
    top = max(resources.values())
    return "=".join(name for name, value in resources.items() if value >= top * (1.0 - rel_tol))


def model_tile(arch: Arch, direction: str, d: int, soft_share: float = 0.0, exp_model: str = "measured",
               m: int = TILE_M, n: int = TILE_N, clock_ghz: float | None = None) -> dict:
    flops = tile_flops(direction, d, m, n)
    cyc_mma = mma_cycles(arch, direction, d, m, n)
    cyc_exp_mufu = exp_cycles(arch, direction, m, n, 0.0)
    cyc_exp = exp_cycles(arch, direction, m, n, soft_share, exp_model)
    components = smem_components(arch, direction, d, m, n)
    cyc_smem = sum(components.values()) / arch.smem_bytes_per_clk
    resources = {"mma": cyc_mma, "exp": cyc_exp, "smem": cyc_smem}
    bound = max(resources.values())
    serial = max(cyc_mma, cyc_smem) + cyc_exp  # softmax never overlapped with the tensor core
    row = {
        "arch": arch.key, "direction": direction, "mode": "bwd" if direction.startswith("bwd") else "fwd",
        "D": d, "tile_m": m, "tile_n": n, "flops": flops,
        "mma_cycles": cyc_mma, "exp_cycles_mufu": cyc_exp_mufu, "exp_cycles": cyc_exp,
        "soft_share": soft_share, "exp_model": exp_model,
        "smem_cycles": cyc_smem, "smem_bytes": sum(components.values()), "smem_components": components,
        "bound_cycles": bound, "limiter": limiter(resources), "serial_cycles": serial,
        "mma_utilization": cyc_mma / bound,
        "tflops_bound": predicted_tflops(arch, flops, bound, clock_ghz),
        "tflops_serial": predicted_tflops(arch, flops, serial, clock_ghz),
        "tflops_gemm_calibrated": None,
        "tflops_gemm_calibrated_serial": None,
    }
    if arch.gemm_measured_tflops is not None:
        # The tensor core's attainable rate on this card is the measured dense GEMM, not the spec peak:
        # scale the model's MMA utilization by it (midpoint of the measured range).
        gemm = sum(arch.gemm_measured_tflops) / 2
        row["tflops_gemm_calibrated"] = gemm * cyc_mma / bound
        row["tflops_gemm_calibrated_serial"] = gemm * cyc_mma / serial
    return row


# ------------------------------------------------------------------------------------ measured figures

def read_rows(path: Path) -> list[dict]:
    """Rows of a results file: {"rows": [...]}, a JSON list, or JSON lines (one object per line)."""
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(data, dict):
        data = data.get("rows", [data])
    return [row for row in data if isinstance(row, dict)]


def _key(row: dict) -> tuple[str, int, bool] | None:
    try:
        if int(row["N"]) != MEASURED_SEQLEN:
            return None
        return str(row["mode"]), int(row["D"]), bool(row["causal"])
    except (KeyError, TypeError, ValueError):
        return None


def load_measured(paths: Iterable[Path], provider: str = MEASURED_PROVIDER) -> dict[tuple[str, int, bool], float]:
    """(mode, D, causal) -> median TFLOPS of the `provider` rows at N = 16384. Missing files give nothing."""
    found: dict[tuple[str, int, bool], list[float]] = {}
    for path in paths:
        if not path.is_file():
            continue
        for row in read_rows(path):
            key = _key(row)
            if key is None or row.get("provider") != provider or "tflops" not in row:
                continue
            found.setdefault(key, []).append(float(row["tflops"]))
    return {key: statistics.median(values) for key, values in found.items()}


def load_best_other(paths: Iterable[Path]) -> dict[tuple[str, int, bool], tuple[float, str]]:
    """(mode, D, causal) -> (best TFLOPS, provider) over the non-flash4 rows at N = 16384 (the anchors)."""
    best: dict[tuple[str, int, bool], tuple[float, str]] = {}
    for path in paths:
        if not path.is_file():
            continue
        for row in read_rows(path):
            key = _key(row)
            if key is None or row.get("provider") in (None, MEASURED_PROVIDER) or "tflops" not in row:
                continue
            value = float(row["tflops"])
            if key not in best or value > best[key][0]:
                best[key] = (value, str(row["provider"]))
    return best


# ---------------------------------------------------------------------------------------------- output

def build(arch_keys: list[str], soft_share: float, exp_model: str, measured_paths: list[Path],
          anchor_paths: list[Path], clock_ghz: dict[str, float], m: int = TILE_M, n: int = TILE_N) -> dict:
    measured = load_measured(measured_paths)
    anchors = load_best_other(anchor_paths)
    rows = []
    for key in arch_keys:
        arch = ARCHS[key]
        for direction in arch.directions:
            for d in HEAD_DIMS:
                row = model_tile(arch, direction, d, soft_share, exp_model, m, n, clock_ghz.get(key))
                if arch.key == "h200" and direction in ("fwd", "bwd"):
                    for causal in (False, True):
                        tag = "causal" if causal else "noncausal"
                        row[f"measured_flash4_{tag}"] = measured.get((row["mode"], d, causal))
                        other = anchors.get((row["mode"], d, causal))
                        row[f"best_other_{tag}"] = None if other is None else {"tflops": other[0], "provider": other[1]}
                rows.append(row)
    meta = {
        "tile": f"{m} query rows x {n} key rows",
        "soft_share": soft_share, "exp_model": exp_model,
        "measured_files": [str(p) for p in measured_paths], "measured_provider": MEASURED_PROVIDER,
        "measured_seqlen": MEASURED_SEQLEN,
        "archs": {k: {"name": ARCHS[k].name, "sms": ARCHS[k].sms, "mma_flop_per_clk": ARCHS[k].mma_flop_per_clk,
                      "mufu_ex2_per_clk": ARCHS[k].mufu_ex2_per_clk,
                      "smem_bytes_per_clk": ARCHS[k].smem_bytes_per_clk,
                      "clock_ghz": clock_ghz.get(k, ARCHS[k].clock_ghz), "sources": ARCHS[k].sources}
                  for k in arch_keys},
        "measured_exp2_mix": MEASURED_EXP2_MIX,
    }
    return {"meta": meta, "rows": rows}


def _fmt(value: float | None, width: int, digits: int = 0) -> str:
    return ("-" if value is None else f"{value:.{digits}f}").rjust(width)


def _gemm_band(row: dict) -> str:
    if row["tflops_gemm_calibrated"] is None:
        return "-"
    return f"{row['tflops_gemm_calibrated_serial']:.0f}-{row['tflops_gemm_calibrated']:.0f}"


def render_table(result: dict, show_measured: bool, show_anchors: bool) -> str:
    meta = result["meta"]
    lines = [f"flash4 roofline per {meta['tile']} tile; software exp2 share {meta['soft_share']:g} "
             f"({meta['exp_model']} mix); cycles per SM"]
    for key, arch in meta["archs"].items():
        lines.append(f"  {arch['name']}: {arch['sms']} SMs, {arch['mma_flop_per_clk']} FLOP/clk/SM, "
                     f"{arch['mufu_ex2_per_clk']} ex2/clk/SM, {arch['smem_bytes_per_clk']} B/clk/SM smem, "
                     f"{arch['clock_ghz']:.3f} GHz")
    header = (f"{'arch':<5} {'dir':<8} {'D':>4} {'MMA':>6} {'exp':>6} {'exp@f':>6} {'smem':>6} {'bound':>6} "
              f"{'limiter':<10} {'util':>5} {'TFLOPS':>7} {'serial':>7} {'@GEMM':>9}")
    if show_measured:
        header += f" {'flash4 nc':>12} {'flash4 c':>12}"
    if show_anchors:
        header += f" {'best other nc':>20} {'best other c':>20}"
    lines += [header, "-" * len(header)]
    for row in result["rows"]:
        line = (f"{row['arch']:<5} {row['direction']:<8} {row['D']:>4} {_fmt(row['mma_cycles'], 6)} "
                f"{_fmt(row['exp_cycles_mufu'], 6)} {_fmt(row['exp_cycles'], 6)} {_fmt(row['smem_cycles'], 6)} "
                f"{_fmt(row['bound_cycles'], 6)} {row['limiter']:<10} {row['mma_utilization'] * 100:>4.0f}% "
                f"{_fmt(row['tflops_bound'], 7)} {_fmt(row['tflops_serial'], 7)} "
                f"{_gemm_band(row):>9}")
        measurable = "measured_flash4_noncausal" in row
        if show_measured:
            for tag in ("noncausal", "causal"):
                if not measurable:
                    cell = "n/a"  # no Blackwell device: never measured
                else:
                    value = row[f"measured_flash4_{tag}"]
                    cell = "not measured" if value is None else f"{value:.0f}"
                line += f" {cell:>12}"
        if show_anchors:
            for tag in ("noncausal", "causal"):
                other = row.get(f"best_other_{tag}")
                cell = "-" if other is None else f"{other['tflops']:.0f} {other['provider'][:14]}"
                line += f" {cell:>20}"
        lines.append(line)
    lines.append("MMA/exp/smem/bound/serial: cycles per tile; util = MMA / bound; TFLOPS at the bound, serial = "
                 "exp not overlapped with MMA;\n@GEMM = the serial..bound range rescaled to the measured dense GEMM rate (H200 only).")
    if show_measured:
        lines.append(f"flash4 nc / c: measured TFLOPS, provider '{MEASURED_PROVIDER}', N = {MEASURED_SEQLEN}, "
                     "non-causal / causal (median of matching rows); 'not measured' where the file or row is absent.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=("h200", "b200", "both"), default="both")
    parser.add_argument("--json", action="store_true", help="print the model as JSON instead of a table")
    parser.add_argument("--measured", action="append", default=[], type=Path, metavar="FILE",
                        help="bench/results JSON (anchors row format or JSON lines); repeatable")
    parser.add_argument("--anchors", action="append", default=[], type=Path, metavar="FILE",
                        help="anchor JSON files: adds the best non-flash4 TFLOPS at N=16384; repeatable")
    parser.add_argument("--soft-share", type=float, default=0.0,
                        help="share of exponentials on the FMA polynomial (0..1, default 0: MUFU only)")
    parser.add_argument("--exp-model", choices=("measured", "ideal"), default="measured",
                        help="how MUFU and the polynomial share the SM (see exp2_rate)")
    parser.add_argument("--tile-m", type=int, default=TILE_M, help="query rows per tile (default 128)")
    parser.add_argument("--tile-n", type=int, default=TILE_N, help="key rows per tile (default 128)")
    parser.add_argument("--h200-clock-ghz", type=float, default=None)
    parser.add_argument("--b200-clock-ghz", type=float, default=None)
    args = parser.parse_args(argv)
    if not 0.0 <= args.soft_share <= 1.0:
        parser.error("--soft-share must be in [0, 1]")
    if args.tile_m <= 0 or args.tile_n <= 0 or args.tile_m % 2:
        parser.error("--tile-m must be a positive even number and --tile-n positive")
    arch_keys = ["h200", "b200"] if args.arch == "both" else [args.arch]
    clocks = {k: v for k, v in (("h200", args.h200_clock_ghz), ("b200", args.b200_clock_ghz)) if v is not None}
    result = build(arch_keys, args.soft_share, args.exp_model, args.measured, args.anchors, clocks,
                   args.tile_m, args.tile_n)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render_table(result, show_measured=bool(args.measured), show_anchors=bool(args.anchors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
