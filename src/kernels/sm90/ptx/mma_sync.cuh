// Warp-level tensor-core products (mma.sync m16n8k16 with fp32 accumulators) and the ldmatrix loads that
// feed them, for the decode kernel: its M dimension is the few query rows of one KV head, too small for
// wgmma's 64-row tiles. Fragment layouts are the PTX ISA's for m16n8k16 (g = lane / 4, t = lane % 4):
//   A (16 x 16, 4 registers of two 16-bit values): a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 8 + 2t..),
//     a3 (g + 8, 8 + 2t..);
//   B (16 x 8, 2 registers): b0 (k = 2t..2t+1, n = g), b1 (k = 8 + 2t.., n = g);
//   C/D (16 x 8 fp32, 4 registers): c0, c1 (g, 2t and 2t + 1), c2, c3 (g + 8, 2t and 2t + 1).
#pragma once

#include <cstdint>

namespace flash4::sm90 {

// D = A B + D in fp32 on bf16 (kIsBf16) or fp16 operands.
template <bool kIsBf16>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kIsBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements; lane l gives the shared address of row l % 8 of
// matrix l / 8 (16 bytes), and register i receives, in every lane, row lane / 4, elements 2 (lane % 4) and
// the next, of matrix i.
__device__ __forceinline__ void load_matrix_x4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// The same, transposed: register i receives, in every lane, elements (rows 2 (lane % 4) and the next,
// column lane / 4) of matrix i.
__device__ __forceinline__ void load_matrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

}  // namespace flash4::sm90
