// Paged K/V in the forward kernel: a key block of block_n rows is loaded as TMA boxes of page_box_rows rows,
// each lying inside one page, so that every box comes from the page the block table names for it.
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

// gcd(page_size, block_n): the largest box that divides both a page and a key block, so no box straddles a
// page boundary and the boxes tile the block exactly. With page_size and block_n multiples of 16 (the
// validator's rule and the tile table's), it is a multiple of 16, which starts every box on a whole swizzle
// atom (8 rows) of the stage.
FLASH4_HD constexpr int page_box_rows(int page_size, int block_n) {
  int a = page_size;
  int b = block_n;
  while (b != 0) {
    const int r = a % b;
    a = b;
    b = r;
  }
  return a;
}

}  // namespace flash4
