// The decode CTA's memory traffic into shared memory and into the cache: Q once, K and V one 64-key block
// per pipeline stage (16-byte cp.async chunks, every thread a few rows), and the appended rows written
// into the cache with plain 16-byte loads and stores.
//
// Shared tiles are rows of head_dim 16-bit elements in 16-byte chunks, chunk c of row r stored at chunk
// position c ^ (r % 8): the 8 rows an ldmatrix reads then fall on 8 distinct bank groups.
#pragma once

#include <cstdint>

#include "kernels/sm90/decode/work.cuh"
#include "kernels/sm90/ptx/cp_async.cuh"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

// Byte offset of chunk `chunk` of row `row` in a swizzled tile of kChunksPerRow chunks per row.
template <int kChunksPerRow>
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return static_cast<uint32_t>((row * kChunksPerRow + (chunk ^ (row & 7))) * kChunkBytes);
}

// The address of element `element_offset` of a tensor of Element.
template <class Element>
__device__ __forceinline__ const char* element_address(const void* base, int64_t element_offset) {
  return static_cast<const char*>(base) + element_offset * static_cast<int64_t>(sizeof(Element));
}
template <class Element>
__device__ __forceinline__ char* element_address(void* base, int64_t element_offset) {
  return static_cast<char*>(base) + element_offset * static_cast<int64_t>(sizeof(Element));
}

// The CTA's packed query rows into the Q tile (rows past row_count are zero: their scores are discarded).
template <class Element, int kHeadDim>
__device__ __forceinline__ void load_q(const DecodeParams& p, const CtaWork& w, uint32_t q_tile, int row_tiles) {
  constexpr int kChunksPerRow = Config<kHeadDim>::kChunksPerRow;
  const int chunks = kTileRows * row_tiles * kChunksPerRow;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const bool exists = row < w.row_count;
    const int packed = w.row0 + (exists ? row : 0);
    const int query = packed / p.group;
    const int head = w.kv_head * p.group + packed % p.group;
    const int64_t offset = w.batch * p.q_strides.batch + query * p.q_strides.seq + head * p.q_strides.head +
                           chunk * (kChunkBytes / kElementBytes);
    sm90::copy_async_16(q_tile + swizzled_offset<kChunksPerRow>(row, chunk), element_address<Element>(p.q, offset),
                        exists);
  }
}

// Key block `block` into one K and one V stage. Keys past the sequence's end, and keys on pages the block
// table does not allow, are zero-filled (a zero V row keeps 0 * garbage out of O); the latter set
// `bad_page`, which makes the CTA's output NaN.
template <class Element, int kHeadDim>
__device__ __forceinline__ void load_kv_block(const DecodeParams& p, const CtaWork& w, int block, uint32_t k_stage,
                                              uint32_t v_stage, bool& bad_page) {
  constexpr int kChunksPerRow = Config<kHeadDim>::kChunksPerRow;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && kBlockKeys % kRowsPerPass == 0, "whole rows per pass");
  const int chunk = static_cast<int>(threadIdx.x) % kChunksPerRow;
  const int64_t chunk_elements = chunk * (kChunkBytes / kElementBytes);
#pragma unroll
  for (int pass = 0; pass < kBlockKeys / kRowsPerPass; ++pass) {
    const int row = pass * kRowsPerPass + static_cast<int>(threadIdx.x) / kChunksPerRow;
    const int key = block * kBlockKeys + row;
    KeyRow source{0, 0, false, true};
    const bool in_sequence = key < w.keys;
    if (in_sequence) source = key_row(p, w, key);
    bad_page |= !source.page_ok;
    const bool load = in_sequence && source.page_ok;
    const void* k_base = source.from_new ? p.k_new : p.k_cache;
    const void* v_base = source.from_new ? p.v_new : p.v_cache;
    const uint32_t destination = swizzled_offset<kChunksPerRow>(row, chunk);
    sm90::copy_async_16(k_stage + destination, element_address<Element>(k_base, source.k_offset + chunk_elements), load);
    sm90::copy_async_16(v_stage + destination, element_address<Element>(v_base, source.v_offset + chunk_elements), load);
  }
}

// Rows t < seqlen_new of k_new / v_new into the cache at keys cached + t. Rows whose page entry is out of
// range are skipped and set `bad_page`. Ordinary loads and stores: the attention itself reads these keys
// from k_new / v_new (key_row), so no CTA waits for them.
template <class Element, int kHeadDim>
__device__ __forceinline__ void append_rows(const DecodeParams& p, const CtaWork& w, bool& bad_page) {
  constexpr int kChunksPerRow = Config<kHeadDim>::kChunksPerRow;
  constexpr int kChunkElements = kChunkBytes / kElementBytes;
  const int chunks = p.seqlen_new * kChunksPerRow;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) {
    const int appended = c / kChunksPerRow;
    const int64_t chunk_elements = (c % kChunksPerRow) * kChunkElements;
    const KeyRow target = cache_row(p, w, w.cached + appended);
    if (!target.page_ok) {
      bad_page = true;
      continue;
    }
    const int64_t k_source = w.batch * p.k_new_strides.batch + appended * p.k_new_strides.seq +
                             w.kv_head * p.k_new_strides.head + chunk_elements;
    const int64_t v_source = w.batch * p.v_new_strides.batch + appended * p.v_new_strides.seq +
                             w.kv_head * p.v_new_strides.head + chunk_elements;
    const uint4 k_chunk = *reinterpret_cast<const uint4*>(element_address<Element>(p.k_new, k_source));
    const uint4 v_chunk = *reinterpret_cast<const uint4*>(element_address<Element>(p.v_new, v_source));
    *reinterpret_cast<uint4*>(element_address<Element>(p.k_cache, target.k_offset + chunk_elements)) = k_chunk;
    *reinterpret_cast<uint4*>(element_address<Element>(p.v_cache, target.v_offset + chunk_elements)) = v_chunk;
  }
}

}  // namespace flash4::decode
