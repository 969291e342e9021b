// The decode CTA's memory traffic into shared memory and into the cache: Q once, K and V one 64-key block
// per pipeline stage (16-byte cp.async chunks, every thread a few rows), and the appended rows written
// into the cache with plain 16-byte loads and stores.
//
// Shared tiles are rows of the kernel's width in 16-bit elements, in 16-byte chunks, chunk c of row r stored
// at chunk position c ^ (r % 8): the 8 rows an ldmatrix reads then fall on 8 distinct bank groups. Chunks
// past the call's true head dim (head_dim for Q and K, head_dim_v for V) are zero-filled, reading nothing:
// a zero column adds nothing to a score, and gives O columns that are never stored. Uninitialized shared
// memory there could hold NaN bit patterns, which a zero partner would not cancel.
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
template <class Element, int kWidth>
__device__ __forceinline__ void load_q(const DecodeParams& p, const CtaWork& w, uint32_t q_tile, int row_tiles) {
  constexpr int kChunksPerRow = Config<kWidth>::kChunksPerRow;
  const int chunks = kTileRows * row_tiles * kChunksPerRow;
  const int q_chunks = p.head_dim / kChunkElements;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c % kChunksPerRow;
    const bool exists = row < w.row_count && chunk < q_chunks;
    // A chunk that is not read still needs a valid source address: the row's first, or row 0's.
    const int packed = w.row0 + (row < w.row_count ? row : 0);
    const int query = packed / p.group;
    const int head = w.kv_head * p.group + packed % p.group;
    const int64_t offset = w.batch * p.q_strides.batch + query * p.q_strides.seq + head * p.q_strides.head +
                           (exists ? chunk * kChunkElements : 0);
    sm90::copy_async_16(q_tile + swizzled_offset<kChunksPerRow>(row, chunk), element_address<Element>(p.q, offset),
                        exists);
  }
}

// Key block `block` into one K and one V stage. Keys past the sequence's end, and keys on pages the block
// table does not allow, are zero-filled (a zero V row keeps 0 * garbage out of O); the latter set
// `bad_page`, which makes the CTA's output NaN. So are the columns past head_dim (K) and head_dim_v (V).
template <class Element, int kWidth>
__device__ __forceinline__ void load_kv_block(const DecodeParams& p, const CtaWork& w, int block, uint32_t k_stage,
                                              uint32_t v_stage, bool& bad_page) {
  constexpr int kChunksPerRow = Config<kWidth>::kChunksPerRow;
  // Pass `pass` copies the stage's chunks pass * kThreads + thread: whole rows per pass where a row's chunks
  // divide the threads (widths 64, 128, 256: a thread keeps its chunk), rows split between passes at 192.
  constexpr int kPasses = kBlockKeys * kChunksPerRow / kThreads;
  static_assert(kBlockKeys * kChunksPerRow % kThreads == 0, "whole passes");
  constexpr bool kWholeRows = kThreads % kChunksPerRow == 0;
  const int thread = static_cast<int>(threadIdx.x);
  const int k_chunks = p.head_dim / kChunkElements;
  const int v_chunks = p.head_dim_v / kChunkElements;
#pragma unroll Config<kWidth>::kLoadPassesUnrolled
  for (int pass = 0; pass < kPasses; ++pass) {
    const int index = pass * kThreads + thread;
    const int row = kWholeRows ? pass * (kThreads / kChunksPerRow) + thread / kChunksPerRow : index / kChunksPerRow;
    const int chunk = kWholeRows ? thread % kChunksPerRow : index % kChunksPerRow;
    const int key = block * kBlockKeys + row;
    KeyRow source{0, 0, false, true};
    const bool in_sequence = key < w.keys;
    if (in_sequence) source = key_row(p, w, key);
    bad_page |= !source.page_ok;
    const bool load = in_sequence && source.page_ok;
    // Chunks past a tensor's head dim read nothing; their source is the row's first chunk.
    const bool k_column = chunk < k_chunks;
    const bool v_column = chunk < v_chunks;
    const void* k_base = source.from_new ? p.k_new : p.k_cache;
    const void* v_base = source.from_new ? p.v_new : p.v_cache;
    const int64_t k_source = source.k_offset + (k_column ? chunk * kChunkElements : 0);
    const int64_t v_source = source.v_offset + (v_column ? chunk * kChunkElements : 0);
    const uint32_t destination = swizzled_offset<kChunksPerRow>(row, chunk);
    sm90::copy_async_16(k_stage + destination, element_address<Element>(k_base, k_source), load && k_column);
    sm90::copy_async_16(v_stage + destination, element_address<Element>(v_base, v_source), load && v_column);
  }
}

// Rows t < seqlen_new of k_new / v_new into the cache at keys cached + t, head_dim columns of K and
// head_dim_v of V (never past them). Rows whose page entry is out of range are skipped and set `bad_page`.
// Ordinary loads and stores: the attention itself reads these keys from k_new / v_new (key_row), so no CTA
// waits for them.
__device__ __forceinline__ void append_row_chunk(const void* source, void* cache, int64_t source_offset,
                                                 int64_t cache_offset) {
  *reinterpret_cast<uint4*>(static_cast<char*>(cache) + cache_offset * kElementBytes) =
      *reinterpret_cast<const uint4*>(static_cast<const char*>(source) + source_offset * kElementBytes);
}

__device__ __forceinline__ void append_rows(const DecodeParams& p, const CtaWork& w, bool& bad_page) {
  const int k_chunks = p.head_dim / kChunkElements;
  const int v_chunks = p.head_dim_v / kChunkElements;
  const int row_chunks = max_int(k_chunks, v_chunks);
  const int chunks = p.seqlen_new * row_chunks;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) {
    const int appended = c / row_chunks;
    const int chunk = c % row_chunks;
    const int64_t chunk_elements = chunk * kChunkElements;
    const KeyRow target = cache_row(p, w, w.cached + appended);
    if (!target.page_ok) {
      bad_page = true;
      continue;
    }
    if (chunk < k_chunks) {
      append_row_chunk(p.k_new, p.k_cache,
                       w.batch * p.k_new_strides.batch + appended * p.k_new_strides.seq +
                           w.kv_head * p.k_new_strides.head + chunk_elements,
                       target.k_offset + chunk_elements);
    }
    if (chunk < v_chunks) {
      append_row_chunk(p.v_new, p.v_cache,
                       w.batch * p.v_new_strides.batch + appended * p.v_new_strides.seq +
                           w.kv_head * p.v_new_strides.head + chunk_elements,
                       target.v_offset + chunk_elements);
    }
  }
}

}  // namespace flash4::decode
