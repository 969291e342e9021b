// The consumer role: each consumer warpgroup owns 64 query rows of the CTA tile and runs the attention
// main loop on them:
//
//   S = Q K_j^T (wgmma, smem x smem)  ->  mask, softmax step  ->  O += P V_j (wgmma, P from registers)
//
// Two overlaps hide the softmax behind the tensor cores:
//  - inside a warpgroup, S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued together and the softmax of
//    S_{j+1} runs while the PV product is in flight (the O rescale, lazy and so rare, waits for it: a
//    rescale between the two issues would put a branch between wgmmas, which makes ptxas serialize
//    every wgmma of the loop);
//  - across warpgroups (the tile table's ping_pong), a ring of named barriers hands the right to issue
//    the steady-state wgmmas from one warpgroup to the next, so one warpgroup's softmax runs under the
//    others' products. A tile's first QK and last PV are issued outside the ring.
#pragma once

#include <type_traits>

#include "kernels/sm90/fwd/epilogue.cuh"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/softmax.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"
#include "launch/fwd_params.hpp"

namespace flash4::sm90 {

// Named barrier 1 + w: "consumer warpgroup w may issue its wgmmas" (0 is __syncthreads).
inline constexpr int kFwdTurnBarrierBase = 1;
inline constexpr int kTurnThreads = 2 * kWarpgroupThreads;  // the waiting warpgroup and the one passing

template <class Element, int kHeadDim>
struct FwdConsumer {
  using Layout = FwdSmemLayout<kHeadDim>;
  static constexpr FwdTileConfig kCfg = Layout::kCfg;
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;
  static constexpr int kWarpgroups = kCfg.consumer_warpgroups;
  static constexpr int kBlockN = kCfg.block_n;
  static constexpr int kSwizzle = kCfg.swizzle_bytes;
  static constexpr SmemSwizzle kSwizzleMode = kSwizzle == 128 ? SmemSwizzle::k128B : SmemSwizzle::k64B;
  static constexpr int kStepsPerBox = kSwizzle / 32;  // k16 steps (32 bytes) per swizzle-wide row
  static constexpr uint32_t kCoreGroupBytes = 8 * kSwizzle;  // 8 rows of one swizzle atom

  using Softmax = RowSoftmax<kBlockN, kCfg.soft_exp2_eighths>;
  using MmaS = WgmmaSS<kBlockN, kIsBf16>;
  using MmaO = WgmmaRS<kHeadDim, kIsBf16>;
  using Epilogue = FwdEpilogue<Element, kHeadDim>;

  int warpgroup;  // 0 .. kWarpgroups - 1 among the consumers
  char* smem;
  FwdBarriers<kCfg.stages>* bars;

  __device__ __forceinline__ void wait_turn() const {
    if constexpr (kCfg.ping_pong) named_barrier_sync(kFwdTurnBarrierBase + warpgroup, kTurnThreads);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (kCfg.ping_pong) {
      named_barrier_arrive(kFwdTurnBarrierBase + (warpgroup + 1) % kWarpgroups, kTurnThreads);
    }
  }
  // One arrival per warp on an `empty` barrier, after the warp's wgmma wait. That wait is .sync.aligned:
  // every lane of the warp has passed it when lane 0 arrives, so no __syncwarp (a NOP per release).
  __device__ __forceinline__ static void release(uint64_t* barrier) {
    if (threadIdx.x % 32 == 0) mbarrier_arrive(barrier);
  }

  // The warpgroup's shared-memory descriptors, built once per kernel: Q's, and K's in stage 0. A stage's K
  // or V descriptor differs from K's in stage 0 only in its low word (start address, leading offset), by a
  // constant: one 32-bit add, then a broadcast from lane 0 (warp_uniform) so that the result lives in the
  // uniform registers wgmma reads. The high word (stride, swizzle) is the same constant for all three.
  struct Descriptors {
    uint64_t q;
    uint64_t k;
  };
  static constexpr uint32_t kStageField = kCfg.kv_stage_bytes() / 16;  // one K or V stage, in descriptor units
  static constexpr uint32_t kVLeadingBytes = kBlockN * kSwizzle;       // V is MN-major: the next column block
  // V's low word minus K's: the distance between the tiles and between the leading offsets.
  static constexpr uint32_t kVMinusK = (Layout::kVOffset - Layout::kKOffset) / 16 + ((kVLeadingBytes - 16) / 16 << 16);
  // add_low's condition, for every tile row: both 14-bit fields stay in range (the shared-memory window
  // holds every address of the layout plus its alignment slack), so no add carries out of a field.
  static_assert(kVLeadingBytes / 16 < (1u << 14), "V's leading byte offset overflows its descriptor field");
  static_assert((Layout::kBarrierOffset + kSmemAlignment) / 16 < (1 << 14),
                "a shared-memory address overflows the descriptor's start address field");

  __device__ __forceinline__ static uint64_t k_major_descriptor(const char* tile) {
    return make_smem_descriptor(tile, 16, kCoreGroupBytes, kSwizzleMode);
  }
  // The start address field (bits 0-13) holds a shared-memory address / 16, below 2^14, and the leading
  // offset field (bits 16-29) stays below 2^14 too: no carry leaves the low word.
  __device__ __forceinline__ static uint64_t add_low(uint64_t descriptor, uint32_t delta) {
    return (descriptor & 0xFFFFFFFF00000000ull) | (uint32_t(descriptor) + delta);
  }
  // The low word made opaque, so that it stays in a register: left visible, the compiler rebuilt it from
  // the shared-memory base inside the main loop, several instructions per descriptor and key block.
  __device__ __forceinline__ static uint64_t hold_low_word(uint64_t descriptor) {
    uint32_t low = uint32_t(descriptor);
    asm volatile("" : "+r"(low));
    return (descriptor & 0xFFFFFFFF00000000ull) | low;
  }
  __device__ __forceinline__ Descriptors descriptors() const {
    const char* q = smem + Layout::kQOffset + warpgroup * kRowsPerConsumerWarpgroup * kSwizzle;
    return {hold_low_word(k_major_descriptor(q)), hold_low_word(k_major_descriptor(smem + Layout::kKOffset))};
  }

  // Issues S = Q K^T for this warpgroup's 64 rows against the K tile in `stage`.
  __device__ __forceinline__ static void issue_qk(float (&s)[kBlockN / 2], const Descriptors& desc, int stage) {
    const uint64_t q_desc = warp_uniform(desc.q);
    const uint64_t k_desc = warp_uniform(add_low(desc.k, stage * kStageField));
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int box = step / kStepsPerBox;
      const uint32_t in_row = (step % kStepsPerBox) * 32;
      MmaS::template run<false>(s, advance_descriptor(q_desc, box * kCfg.block_m() * kSwizzle + in_row),
                                advance_descriptor(k_desc, box * kBlockN * kSwizzle + in_row), step > 0);
    }
  }

  // Issues O += P V for the V tile in `stage`; V is read transposed (its rows are the K dimension).
  __device__ __forceinline__ static void issue_pv(float (&o)[kHeadDim / 2], const uint32_t (&p)[kBlockN / 16][4],
                                                  const Descriptors& desc, int stage) {
    const uint64_t v_desc = warp_uniform(add_low(desc.k, kVMinusK + stage * kStageField));
#pragma unroll
    for (int step = 0; step < kBlockN / 16; ++step) {
      MmaO::template run<true>(o, p[step], advance_descriptor(v_desc, step * 16 * kSwizzle), 1);
    }
  }

  // S accumulator -> the A fragments of the PV wgmma: the k16 step covers column blocks 2 step, 2 step + 1.
  __device__ __forceinline__ static void convert_p(const float (&s)[kBlockN / 2], uint32_t (&p)[kBlockN / 16][4]) {
#pragma unroll
    for (int step = 0; step < kBlockN / 16; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r) p[step][r] = pack_pair<kIsBf16>(s[8 * step + 2 * r], s[8 * step + 2 * r + 1]);
    }
  }

  __device__ __forceinline__ static void scale_rows(float (&o)[kHeadDim / 2], const float (&factor)[2]) {
#pragma unroll
    for (int k = 0; k < kHeadDim / 8; ++k) {
#pragma unroll
      for (int r = 0; r < 4; ++r) o[4 * k + r] *= factor[r / 2];
    }
  }

  // Softcap and mask of key block `block`'s scores (`masked`: work.keys.needs_mask(block)). The mask and
  // this thread's row are rebuilt here rather than kept across the main loop, where registers are scarcest.
  __device__ __forceinline__ void score(float (&s)[kBlockN / 2], const FwdKernelParams& p, const TileWork& work,
                                        int block, bool masked) const {
    if (p.has_softcap) Softmax::apply_softcap(s, p.softcap_prescale);
    if (masked) {
      const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
      Softmax::apply_mask(s, mask, work.m0 + row_in_tile(), block * kBlockN);
    }
  }

  // This thread's first row within the CTA tile (its second is 8 below).
  __device__ __forceinline__ int row_in_tile() const {
    const int warp_in_group = (threadIdx.x / 32) % 4;
    return warpgroup * kRowsPerConsumerWarpgroup + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  }

  // The key blocks of one tile, last to first, into o and softmax.
  __device__ __forceinline__ void attend(const FwdKernelParams& p, const TileWork& work, const Descriptors& desc,
                                         float (&o)[kHeadDim / 2], Softmax& softmax, RingCount<kCfg.stages>& ring, uint32_t& q_full_parity) {
    float s[kBlockN / 2];
    uint32_t pfrag[kBlockN / 16][4];
    float factor[2];

    mbarrier_wait(&bars->q_full, q_full_parity);
    q_full_parity ^= 1;

    // First key block (the last one in key order): S only. O is still zero, so its rescale is moot.
    int block = work.keys.end - 1;
    RingPosition<kCfg.stages> k = ring.position();
    mbarrier_wait(&bars->k_full[k.stage], k.phase);
    wgmma_fence();
    issue_qk(s, desc, k.stage);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(s);
    release(&bars->k_empty[k.stage]);
    score(s, p, work, block, work.keys.needs_mask(block));
    softmax.fold_sum(softmax.step(s, p.scale_log2), factor);
    convert_p(s, pfrag);
    ring.advance();

    // K of this key block, V of the one before it.
    for (--block; block >= work.keys.begin; --block) {
      k = ring.position();
      const RingPosition<kCfg.stages> v = ring.position(1);
      mbarrier_wait(&bars->k_full[k.stage], k.phase);
      mbarrier_wait(&bars->v_full[v.stage], v.phase);
      wait_turn();
      wgmma_fence();
      issue_qk(s, desc, k.stage);
      wgmma_commit();
      issue_pv(o, pfrag, desc, v.stage);
      wgmma_commit();
      pass_turn();
      // Read from the tile slot before the wait for S, so that the load runs under the QK product.
      const bool masked = work.keys.needs_mask(block);
      wgmma_wait<1>();  // S done; the PV product may still run
      pin_registers(s);
      release(&bars->k_empty[k.stage]);
      score(s, p, work, block, masked);
      const bool rescale = softmax.step(s, p.scale_log2);
      // ptxas places the wait for the PV product at the top of its basic block. The exponentials must come
      // first, to run under that product: pinning S keeps the compiler from sinking them to their use in
      // convert_p, and fold_sum's branch ends the block that holds them.
      pin_registers(s);
      softmax.fold_sum(rescale, factor);
      wgmma_wait<0>();
      pin_registers(o);
      pin_registers(pfrag);
      release(&bars->v_empty[v.stage]);
      if (rescale) scale_rows(o, factor);
      convert_p(s, pfrag);
      ring.advance();
    }
    release(&bars->q_empty);  // every QK product of the tile has completed

    // Last PV product.
    const RingPosition<kCfg.stages> v = ring.position(1);
    mbarrier_wait(&bars->v_full[v.stage], v.phase);
    wgmma_fence();
    issue_pv(o, pfrag, desc, v.stage);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(o);
    release(&bars->v_empty[v.stage]);
  }

  __device__ void run(const FwdKernelParams& p) {
    if (warpgroup == kWarpgroups - 1) pass_turn();  // warpgroup 0 issues first

    const Descriptors desc = descriptors();
    RingCount<kCfg.stages> ring;  // K/V stages taken
    uint32_t q_full_parity = 0;
    for (int number = 0;; ++number) {
      const TileWork& work = wait_tile(bars, number);
      if (!work.has_rows) break;
      float o[kHeadDim / 2];
#pragma unroll
      for (int r = 0; r < kHeadDim / 2; ++r) o[r] = 0.0f;
      Softmax softmax;
      softmax.reset();
      if (work.keys.count() > 0) attend(p, work, desc, o, softmax, ring, q_full_parity);
      float inv_sum[2];
      float lse[2];
      softmax.finish(inv_sum, lse, p.sink != nullptr ? p.sink[work.head] * kLog2e : kNegInf);
      Epilogue::store(p, work, warpgroup, smem, work.m0 + row_in_tile(), o, inv_sum, lse);
      free_tile(bars, number);
    }
    Epilogue::drain();
  }
};

}  // namespace flash4::sm90
