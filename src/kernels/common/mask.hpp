// Mask arithmetic shared by the host planner, the CPU tests and the kernels. Causal is the window
// (-1, 0); every window is bottom-right aligned: query i's diagonal is key i + (seqlen_k - seqlen_q).
#pragma once

#include "kernels/common/host_device.hpp"

namespace flash4 {

struct MaskSpec {
  int seqlen_q;
  int seqlen_k;
  int window_left;   // -1: unbounded
  int window_right;  // -1: unbounded; 0 for causal

  FLASH4_HD int diagonal() const { return seqlen_k - seqlen_q; }
};

FLASH4_HD int floor_div(int a, int b) { return (a >= 0) ? a / b : -((-a + b - 1) / b); }
FLASH4_HD int ceil_div_signed(int a, int b) { return -floor_div(-a, b); }
FLASH4_HD int min_int(int a, int b) { return a < b ? a : b; }
FLASH4_HD int max_int(int a, int b) { return a > b ? a : b; }

FLASH4_HD bool key_visible(const MaskSpec& mask, int row, int col) {
  const int diag = row + mask.diagonal();
  return col < mask.seqlen_k && (mask.window_right < 0 || col <= diag + mask.window_right) &&
         (mask.window_left < 0 || col >= diag - mask.window_left);
}

// The rows among [row0, row0 + count) that see key `key`, as offsets from row0: key_visible(mask, row0 + r,
// key) holds exactly for first <= r <= last (first > last: none; a key past seqlen_k is seen by no row).
// The offsets are clamped to [0, count] and [-1, count - 1], which keeps that equivalence for every r in
// [0, count); the comparisons come before the subtractions, so nothing overflows for any lengths below
// 2^31 - count (0 <= key, 0 <= row0 <= seqlen_q + count). A masked backward step computes this once per
// key, so that its entries cost a few instructions in all instead of the window evaluated per entry
// (which had made a masked step take about twice an unmasked one).
struct RowSpan {
  int first;
  int last;
  FLASH4_HD bool contains(int offset) const { return first <= offset && offset <= last; }
};

FLASH4_HD RowSpan rows_seeing_key(const MaskSpec& mask, int key, int row0, int count) {
  if (key >= mask.seqlen_k) return RowSpan{count, -1};
  // Key j is visible to row i iff i >= j - diagonal - right and i <= j - diagonal + left (key_visible,
  // diagonal = seqlen_k - seqlen_q); as offsets, r >= base - right and r <= base + left. (key - seqlen_k) +
  // seqlen_q lies in [seqlen_q - seqlen_k, seqlen_q), so base needs no wider type.
  const int base = (key - mask.seqlen_k) + mask.seqlen_q - row0;
  int first = 0;
  if (mask.window_right >= 0 && base > mask.window_right) first = min_int(base - mask.window_right, count);
  int last = count - 1;
  if (mask.window_left >= 0 && base < count - 1 - mask.window_left) last = max_int(base + mask.window_left, -1);
  return RowSpan{first, last};
}

// The keys among [col0, col0 + count) that row `row` sees, as offsets from col0: key_visible(mask, row,
// col0 + c) holds exactly for first <= c <= last (first > last: none), for every c in [0, count). The
// forward's masked key blocks compute this once per row instead of the window per entry. Each edge is
// compared before it is formed, so nothing overflows while the row's diagonal row + seqlen_k - seqlen_q
// and col0 + count stay below 2^31, with 0 <= row and 0 <= col0 (the last tile's rows past the sequence
// end included: validation keeps the lengths a tile below the int range).
FLASH4_HD RowSpan keys_seen_by_row(const MaskSpec& mask, int row, int col0, int count) {
  const int diag = row + mask.diagonal();
  int lo = 0;                              // first visible key
  if (mask.window_left >= 0 && diag > mask.window_left) lo = diag - mask.window_left;
  int hi = mask.seqlen_k - 1;  // last visible key; seqlen_k - 1 - diag = seqlen_q - 1 - row does not overflow
  if (mask.window_right >= 0 && mask.window_right < (mask.seqlen_k - 1) - diag) hi = diag + mask.window_right;
  const int first = lo <= col0 ? 0 : min_int(lo - col0, count);
  const int last = hi < col0 ? -1 : min_int(hi - col0, count - 1);
  return RowSpan{first, last};
}

// A thread's accumulator columns in a wgmma fragment lie at offsets 8 k + j (k < columns / 8, j < 2) from
// its first one; numbered 2 k + j in that order, the ones inside a RowSpan are one run of numbers
// [begin, end), found with a few instructions instead of a test per entry.
struct FragmentRun {
  int begin;
  int end;
};
// How many of those offsets lie below `offset` (0 <= offset <= columns): two per full group of 8, and j < 2.
FLASH4_HD int fragment_offsets_below(int offset) { return 2 * (offset / 8) + min_int(offset % 8, 2); }
FLASH4_HD FragmentRun fragment_run(RowSpan span) {
  const int begin = fragment_offsets_below(span.first);
  return FragmentRun{begin, span.last < span.first ? begin : fragment_offsets_below(span.last + 1)};
}

// The key blocks one query block [m0, m0 + block_m) must visit, and the sub-range whose blocks need no
// per-element mask for any of its rows (so the main loop skips the mask arithmetic there).
struct KeyBlockRange {
  int begin;           // first key block with any visible key
  int end;             // one past the last
  int unmasked_begin;  // [unmasked_begin, unmasked_end) is fully visible for every row
  int unmasked_end;

  FLASH4_HD int count() const { return end > begin ? end - begin : 0; }
  // Both comparisons, not a short circuit: the forward's main loop then tests one predicate instead of
  // branching around the second field's load.
  FLASH4_HD bool needs_mask(int block) const { return (block < unmasked_begin) | (block >= unmasked_end); }
};

FLASH4_HD KeyBlockRange key_block_range(const MaskSpec& mask, int m0, int block_m, int block_n) {
  const int first_row = m0;
  const int last_row = min_int(m0 + block_m, mask.seqlen_q) - 1;
  int lo = 0;
  int hi = mask.seqlen_k;  // exclusive
  if (mask.window_left >= 0) lo = max_int(lo, first_row + mask.diagonal() - mask.window_left);
  if (mask.window_right >= 0) hi = min_int(hi, last_row + mask.diagonal() + mask.window_right + 1);
  KeyBlockRange range{0, 0, 0, 0};
  if (last_row < first_row || hi <= lo) return range;
  range.begin = lo / block_n;
  range.end = ceil_div_signed(hi, block_n);
  // Fully visible blocks: inside seqlen_k, right of every row's left edge, left of every row's right edge.
  int full_hi = mask.seqlen_k;
  if (mask.window_right >= 0) full_hi = min_int(full_hi, first_row + mask.diagonal() + mask.window_right + 1);
  int full_lo = 0;
  if (mask.window_left >= 0) full_lo = max_int(0, last_row + mask.diagonal() - mask.window_left);
  range.unmasked_begin = max_int(range.begin, ceil_div_signed(full_lo, block_n));
  range.unmasked_end = min_int(range.end, floor_div(full_hi, block_n));
  if (range.unmasked_end < range.unmasked_begin) range.unmasked_end = range.unmasked_begin;
  return range;
}

// The query blocks one key block [n0, n0 + block_n) must visit (the backward's loop), and the sub-range
// whose blocks need no per-element mask: every (row < seqlen_q, key in the block) pair is visible, and
// no key of the block lies past seqlen_k. Rows past seqlen_q are not the mask's business: the backward
// zeroes them through their padded LSE.
struct QueryBlockRange {
  int begin;
  int end;
  int unmasked_begin;
  int unmasked_end;

  FLASH4_HD int count() const { return end > begin ? end - begin : 0; }
  FLASH4_HD bool needs_mask(int block) const { return block < unmasked_begin || block >= unmasked_end; }
};

FLASH4_HD QueryBlockRange query_block_range(const MaskSpec& mask, int n0, int block_n, int block_m) {
  const int first_key = n0;
  const int last_key = min_int(n0 + block_n, mask.seqlen_k) - 1;
  QueryBlockRange range{0, 0, 0, 0};
  if (last_key < first_key || mask.seqlen_q <= 0) return range;
  // Key j is visible to row i iff j <= i + diag + right and j >= i + diag - left, i.e.
  // i >= j - diag - right and i <= j - diag + left.
  int lo = 0;
  int hi = mask.seqlen_q;  // exclusive
  if (mask.window_right >= 0) lo = max_int(lo, first_key - mask.diagonal() - mask.window_right);
  if (mask.window_left >= 0) hi = min_int(hi, last_key - mask.diagonal() + mask.window_left + 1);
  if (hi <= lo) return range;
  range.begin = lo / block_m;
  range.end = ceil_div_signed(hi, block_m);
  if (n0 + block_n > mask.seqlen_k) {  // keys past the end need the mask on every row
    range.unmasked_begin = range.unmasked_end = range.begin;
    return range;
  }
  // Rows that see every key of the block: i >= last_key - diag - right and i <= first_key - diag + left.
  int full_lo = 0;
  if (mask.window_right >= 0) full_lo = max_int(0, last_key - mask.diagonal() - mask.window_right);
  int full_hi = mask.seqlen_q;  // exclusive; a block reaching past seqlen_q is fine (padded rows)
  if (mask.window_left >= 0) full_hi = min_int(full_hi, first_key - mask.diagonal() + mask.window_left + 1);
  range.unmasked_begin = max_int(range.begin, ceil_div_signed(full_lo, block_m));
  // A block is unmasked when all its rows below seqlen_q are full rows: its first row >= full_lo and its
  // last real row < full_hi.
  int unmasked_end = floor_div(full_hi, block_m);
  if (full_hi == mask.seqlen_q) unmasked_end = range.end;
  range.unmasked_end = min_int(range.end, unmasked_end);
  if (range.unmasked_end < range.unmasked_begin) range.unmasked_end = range.unmasked_begin;
  return range;
}

}  // namespace flash4
