// The decode kernel: attention of a few query rows per sequence against its KV cache (docs/design.md, "The
// decode kernel"). One CTA of 4 warps per (sequence, KV head, split, row block of up to 64 packed rows).
//   load Q and the first kStages - 1 key blocks (cp.async groups), append the new rows to the cache,
//   then per key block: wait for its stage, issue the load kStages - 1 blocks ahead into the stage freed by
//   the previous block, and let every warp run its share (warp_attention.cuh);
//   finally merge the warps' partials and write O / LSE or the split's partials (epilogue.cuh).
#pragma once

#include <cstdint>

#include "kernels/sm90/decode/epilogue.cuh"
#include "kernels/sm90/decode/loader.cuh"
#include "kernels/sm90/decode/warp_attention.cuh"
#include "kernels/sm90/decode/work.cuh"
#include "kernels/sm90/ptx/cp_async.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "launch/decode_config.hpp"
#include "launch/decode_params.hpp"

namespace flash4::decode {

template <class Element, int kWidth, int kRowTiles>
__global__ void __launch_bounds__(kThreads) decode_kernel(const __grid_constant__ DecodeParams p) {
  using Cfg = Config<kWidth>;
  extern __shared__ __align__(128) char smem_raw[];
  char* smem = sm90::align_shared<128>(smem_raw);
  const uint32_t ring = sm90::smem_address(smem);
  const uint32_t q_tile = ring + Cfg::kRingBytes;
  const auto k_stage = [ring](int block_index) {
    return ring + static_cast<uint32_t>((block_index % Cfg::kStages) * 2 * Cfg::kTileBytes);
  };
  const auto v_stage = [&k_stage](int block_index) { return k_stage(block_index) + Cfg::kTileBytes; };

  const CtaWork w = resolve_work(p, kRowTiles);
  const int blocks = w.block_end - w.block_begin;
  bool bad_page = false;

  // Q rides in the first group of copies, with the first key block.
  load_q<Element, kWidth>(p, w, q_tile, kRowTiles);
#pragma unroll 1
  for (int ahead = 0; ahead < Cfg::kStages - 1; ++ahead) {
    if (ahead < blocks) {
      load_kv_block<Element, kWidth>(p, w, w.block_begin + ahead, k_stage(ahead), v_stage(ahead), bad_page);
    }
    sm90::commit_copies();  // empty groups too: the wait below counts groups
  }
  if (w.appends) append_rows(p, w, bad_page);

  WarpAttention<Element, kWidth, kRowTiles> warp;
  const int warp_id = static_cast<int>(threadIdx.x) / 32;
  warp.init(warp_id, static_cast<int>(threadIdx.x) % 32);
  for (int i = 0; i < blocks; ++i) {
    sm90::wait_copies<Cfg::kStages - 2>();  // block i's group (and Q's) have landed for this thread
    __syncthreads();                          // ... for every thread; and every warp is done with block i - 1
    const int ahead = i + Cfg::kStages - 1;
    if (ahead < blocks) {
      load_kv_block<Element, kWidth>(p, w, w.block_begin + ahead, k_stage(ahead), v_stage(ahead), bad_page);
    }
    sm90::commit_copies();
    if (i == 0) warp.load_q_fragments(q_tile);
    warp.process(p, w, w.block_begin + i, k_stage(i), v_stage(i));
  }
  warp.finish_sums();

  // The merge reuses the ring: every copy must have landed (including Q when there was no block) and every
  // warp left the loop.
  sm90::wait_copies<0>();
  const bool poisoned = __syncthreads_or(!w.valid || bad_page) != 0;
  const MergeBuffers<kWidth> merge(smem);
  stash_warp_result(warp, warp_id, merge);
  __syncthreads();
  write_rows<Element, kWidth, kRowTiles>(p, w, merge, poisoned);
}

}  // namespace flash4::decode
