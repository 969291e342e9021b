// Where stmatrix.x4.trans puts a wgmma accumulator whose columns are keys (the backward split by key
// columns: S, dP, dK^T, dV^T): into a buffer of key rows, each row one swizzle row of `row_bytes` 16-bit
// elements of the accumulator's rows, 16-byte units XOR-swizzled by row % 8 (the 128-byte swizzle that TMA
// writes and wgmma reads K-major). Host and device code, so that tests/cpu/test_transposed_rows.cpp checks
// it against a model of the instruction and of the layout.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

// The byte offset (from the buffer) that lane `lane` of warp `warp` (0..3 in its warpgroup) gives
// stmatrix.x4.trans for the first pair of 8-key blocks of a warpgroup whose keys start at row `key_row0`
// (a multiple of 8). The instruction's register i holds matrix i: accumulator rows 16 warp + 8 (i % 2)
// + 0..7 of the warp's 16, keys 8 (i / 2) + 0..7 of the pair; lane l's address takes column l % 8 of
// matrix l / 8, i.e. key row key_row0 + 8 (l / 16) + l % 8 and the accumulator rows of unit 2 warp +
// (l / 8) % 2. Pair p of 8-key blocks is this offset plus 16 p rows.
FLASH4_HD constexpr int transposed_store_offset(int key_row0, int warp, int lane, int row_bytes) {
  const int matrix = lane / 8;
  const int row = key_row0 + 8 * (matrix / 2) + lane % 8;
  const int unit = 2 * warp + matrix % 2;
  return row * row_bytes + (unit ^ (row % 8)) * 16;
}

}  // namespace flash4
