// What one decode CTA works on: its (sequence, KV head, split, row block), the sequence's key count and
// whether its device-side values are usable, the key blocks of its split, and where each key's row lives
// (the cache, paged or not, or the rows being appended).
#pragma once

#include <cstdint>

#include "kernels/common/decode_work.hpp"
#include "kernels/common/mask.hpp"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

struct CtaWork {
  int batch;
  int kv_head;
  int split;
  int row_block;
  int row0;       // first packed row (row r = query row r / group of query head kv_head * group + r % group)
  int row_count;  // packed rows of this CTA that exist
  int cached;     // keys already in the cache (cache_seqlens[batch])
  int keys;       // keys attended: cached + seqlen_new
  int cache_seq;  // not paged: the cache sequence (cache_batch_idx[batch])
  bool valid;     // cached and cache_seq in range, the appended rows inside the capacity
  bool appends;   // this CTA writes the appended rows into the cache (one CTA per sequence and KV head)
  MaskSpec mask;
  KeyBlockRange range;  // every key block the CTA's rows see, and which of them need no mask
  int block_begin;      // this split's share of `range`
  int block_end;
};

// The grid is one-dimensional: row block fastest (the row blocks of one KV head read the same keys, so they
// run together and share them in L2), then split, then KV head, then sequence.
__device__ __forceinline__ CtaWork resolve_work(const DecodeParams& p, int row_tiles) {
  CtaWork w;
  int index = static_cast<int>(blockIdx.x);
  w.row_block = index % p.row_blocks;
  index /= p.row_blocks;
  w.split = index % p.splits;
  index /= p.splits;
  w.kv_head = index % p.heads_kv;
  w.batch = index / p.heads_kv;
  const int rows_per_cta = kTileRows * row_tiles;
  w.row0 = w.row_block * rows_per_cta;
  w.row_count = min_int(rows_per_cta, p.rows - w.row0);

  w.cached = p.cache_seqlens != nullptr ? p.cache_seqlens[w.batch] : p.capacity;
  w.cache_seq = p.cache_batch_idx != nullptr ? p.cache_batch_idx[w.batch] : w.batch;
  w.valid = sequence_is_valid(w.cached, p.seqlen_new, p.capacity, p.block_table != nullptr, w.cache_seq, p.cache_batch);
  w.keys = w.valid ? w.cached + p.seqlen_new : 0;
  w.appends = w.valid && p.seqlen_new > 0 && w.split == 0 && w.row_block == 0;

  w.mask = MaskSpec{p.seqlen_q, w.keys, p.window_left, p.window_right};
  const int first_query = w.row0 / p.group;
  const int last_query = (w.row0 + w.row_count - 1) / p.group;
  w.range = key_block_range(w.mask, first_query, last_query - first_query + 1, kBlockKeys);
  // Each split takes an equal share of this sequence's blocks (sequences of different lengths split alike).
  const BlockShare share = split_share(w.range.begin, w.range.end, p.splits, w.split);
  w.block_begin = share.begin;
  w.block_end = share.end;
  return w;
}

// Where key `key` (< keys) of the CTA's sequence lives, as element offsets from the K and V tensors
// `*from_new` names: the appended rows (k_new / v_new) or the cache. `page_ok` turns false, and the
// offsets are 0, for a key whose block_table entry lies outside [0, num_pages).
struct KeyRow {
  int64_t k_offset;
  int64_t v_offset;
  bool from_new;
  bool page_ok;
};

// The cache row of key `key` (< capacity): a page lookup when paged. Also used by the appends.
__device__ __forceinline__ KeyRow cache_row(const DecodeParams& p, const CtaWork& w, int key) {
  KeyRow row{0, 0, false, true};
  int64_t slot_k = 0;
  int64_t slot_v = 0;
  int in_page = key;
  if (p.block_table != nullptr) {
    uint32_t page_index = 0;
    uint32_t offset = 0;
    p.page.divmod(static_cast<uint32_t>(key), page_index, offset);
    const int page = p.block_table[static_cast<int64_t>(w.batch) * p.block_table_stride + page_index];
    row.page_ok = page >= 0 && page < p.num_pages;
    if (!row.page_ok) return row;
    slot_k = page * p.k_cache_strides.batch;
    slot_v = page * p.v_cache_strides.batch;
    in_page = static_cast<int>(offset);
  } else {
    slot_k = w.cache_seq * p.k_cache_strides.batch;
    slot_v = w.cache_seq * p.v_cache_strides.batch;
  }
  row.k_offset = slot_k + in_page * p.k_cache_strides.seq + w.kv_head * p.k_cache_strides.head;
  row.v_offset = slot_v + in_page * p.v_cache_strides.seq + w.kv_head * p.v_cache_strides.head;
  return row;
}

__device__ __forceinline__ KeyRow key_row(const DecodeParams& p, const CtaWork& w, int key) {
  if (key < w.cached) return cache_row(p, w, key);
  const int appended = key - w.cached;
  return KeyRow{w.batch * p.k_new_strides.batch + appended * p.k_new_strides.seq + w.kv_head * p.k_new_strides.head,
                w.batch * p.v_new_strides.batch + appended * p.v_new_strides.seq + w.kv_head * p.v_new_strides.head,
                true, true};
}

}  // namespace flash4::decode
