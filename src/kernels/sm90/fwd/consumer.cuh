// The consumer role: each of the two consumer warpgroups owns 64 query rows of the CTA tile and runs
// the attention main loop on them:
//
//   S = Q K_j^T (wgmma, smem x smem)  ->  mask, softmax step  ->  O += P V_j (wgmma, P from registers)
//
// Two overlaps hide the softmax behind the tensor cores:
//  - inside a warpgroup, S_{j+1} = Q K_{j+1}^T and O += P_j V_j are issued together and the softmax of
//    S_{j+1} runs while the PV product is in flight (the O rescale waits for it);
//  - across the pair, named barriers hand the right to issue wgmmas back and forth (ping-pong), so one
//    warpgroup's softmax runs under the other's matmuls.
#pragma once

#include <type_traits>

#include "kernels/common/fwd_params.hpp"
#include "kernels/sm90/fwd/epilogue.cuh"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/softmax.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"

namespace flash4::sm90 {

// Named barriers 1 and 2: "consumer warpgroup 0 / 1 may issue its wgmmas".
enum class FwdBarrierId : int { kTurnOfWarpgroup0 = 1, kTurnOfWarpgroup1 = 2 };
inline constexpr int kPingPongThreads = 2 * kWarpgroupThreads;

template <class Element, int kHeadDim>
struct FwdConsumer {
  using Layout = FwdSmemLayout<kHeadDim>;
  static constexpr FwdTileConfig kCfg = Layout::kCfg;
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;
  static constexpr int kBlockN = kCfg.block_n;
  static constexpr int kSwizzle = kCfg.swizzle_bytes;
  static constexpr SmemSwizzle kSwizzleMode = kSwizzle == 128 ? SmemSwizzle::k128B : SmemSwizzle::k64B;
  static constexpr int kStepsPerBox = kSwizzle / 32;  // k16 steps (32 bytes) per swizzle-wide row
  static constexpr int kRowsPerWarpgroup = 64;
  static constexpr uint32_t kCoreGroupBytes = 8 * kSwizzle;  // 8 rows of one swizzle atom

#if defined(FLASH4_SOFT_EXP2_ENABLED) && !FLASH4_SOFT_EXP2_ENABLED
  static constexpr int kSoftExp2Eighths = 0;  // A/B build: every exponential on MUFU
#else
  static constexpr int kSoftExp2Eighths = kCfg.soft_exp2_eighths;
#endif
  using Softmax = RowSoftmax<kBlockN, kSoftExp2Eighths>;
  using MmaS = WgmmaSS<kBlockN, kIsBf16>;
  using MmaO = WgmmaRS<kHeadDim, kIsBf16>;

  int warpgroup;  // 0 or 1 among the consumers
  char* smem;
  FwdBarriers<kCfg.stages>* bars;

  __device__ __forceinline__ void wait_turn() const {
    named_barrier_sync(warpgroup == 0 ? int(FwdBarrierId::kTurnOfWarpgroup0) : int(FwdBarrierId::kTurnOfWarpgroup1),
                       kPingPongThreads);
  }
  __device__ __forceinline__ void pass_turn() const {
    named_barrier_arrive(warpgroup == 0 ? int(FwdBarrierId::kTurnOfWarpgroup1) : int(FwdBarrierId::kTurnOfWarpgroup0),
                         kPingPongThreads);
  }
  // One arrival per warp on an `empty` barrier, after the warp's wgmma wait.
  __device__ __forceinline__ static void release(uint64_t* barrier) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(barrier);
  }

  // Issues S = Q K^T for this warpgroup's 64 rows against the K tile in `stage`.
  __device__ __forceinline__ void issue_qk(float (&s)[kBlockN / 2], int stage) const {
    const char* q = smem + Layout::kQOffset + warpgroup * kRowsPerWarpgroup * kSwizzle;
    const char* k = smem + Layout::kKOffset + stage * kCfg.kv_stage_bytes();
    const uint64_t q_desc = make_smem_descriptor(q, 16, kCoreGroupBytes, kSwizzleMode);
    const uint64_t k_desc = make_smem_descriptor(k, 16, kCoreGroupBytes, kSwizzleMode);
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int box = step / kStepsPerBox;
      const uint32_t in_row = (step % kStepsPerBox) * 32;
      MmaS::template run<false>(s, advance_descriptor(q_desc, box * kCfg.block_m * kSwizzle + in_row),
                                advance_descriptor(k_desc, box * kBlockN * kSwizzle + in_row), step > 0);
    }
  }

  // Issues O += P V for the V tile in `stage`; V is read transposed (its rows are the K dimension).
  __device__ __forceinline__ void issue_pv(float (&o)[kHeadDim / 2], const uint32_t (&p)[kBlockN / 16][4], int stage) const {
    const char* v = smem + Layout::kVOffset + stage * kCfg.kv_stage_bytes();
    const uint64_t v_desc = make_smem_descriptor(v, kBlockN * kSwizzle, kCoreGroupBytes, kSwizzleMode);
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

  // Masks S of key block `block`. The mask and this thread's row are rebuilt here rather than kept
  // across the main loop, where registers are scarcest.
  __device__ __forceinline__ void apply_mask(float (&s)[kBlockN / 2], const FwdKernelParams& p, const TileWork& work,
                                             int block) const {
    const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
    Softmax::apply_mask(s, mask, work.m0 + row_in_tile(), block * kBlockN);
  }

  // This thread's first row within the CTA tile (its second is 8 below).
  __device__ __forceinline__ int row_in_tile() const {
    const int warp_in_group = (threadIdx.x / 32) % 4;
    return warpgroup * kRowsPerWarpgroup + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  }

  __device__ void run(const FwdKernelParams& p) {
    if (warpgroup == 1) pass_turn();  // warpgroup 0 issues first

    RingPosition<kCfg.stages> ring;
    uint32_t q_full_parity = 0;
    const int num_tiles = p.order.num_tiles();
    for (int linear = blockIdx.x; linear < num_tiles; linear += gridDim.x) {
      const TileWork work = resolve_tile(p, linear, kCfg.block_m, kCfg.block_n);
      if (!work.has_rows) continue;

      float o[kHeadDim / 2];
#pragma unroll
      for (int r = 0; r < kHeadDim / 2; ++r) o[r] = 0.0f;
      Softmax softmax;
      softmax.reset();

      if (work.keys.count() > 0) {
        float s[kBlockN / 2];
        uint32_t pfrag[kBlockN / 16][4];
        float factor[2];

        mbarrier_wait(&bars->q_full, q_full_parity);
        q_full_parity ^= 1;

        // First key block (the last one in key order): S only.
        int block = work.keys.end - 1;
        mbarrier_wait(&bars->k_full[ring.stage], ring.phase);
        wait_turn();
        wgmma_fence();
        issue_qk(s, ring.stage);
        wgmma_commit();
        pass_turn();
        wgmma_wait<0>();
        pin_registers(s);
        release(&bars->k_empty[ring.stage]);
        if (p.has_softcap) Softmax::apply_softcap(s, p.softcap_prescale);
        if (work.keys.needs_mask(block)) apply_mask(s, p, work, block);
        softmax.step(s, p.scale_log2, p.rescale_threshold, factor);
        convert_p(s, pfrag);
        RingPosition<kCfg.stages> previous = ring;
        ring.advance();

        for (--block; block >= work.keys.begin; --block) {
          mbarrier_wait(&bars->k_full[ring.stage], ring.phase);
          mbarrier_wait(&bars->v_full[previous.stage], previous.phase);
          wait_turn();
          wgmma_fence();
          issue_qk(s, ring.stage);
          wgmma_commit();
          issue_pv(o, pfrag, previous.stage);
          wgmma_commit();
          pass_turn();
          wgmma_wait<1>();  // S done; the PV product may still run
          pin_registers(s);
          release(&bars->k_empty[ring.stage]);
          if (p.has_softcap) Softmax::apply_softcap(s, p.softcap_prescale);
          if (work.keys.needs_mask(block)) apply_mask(s, p, work, block);
          const bool rescale = softmax.step(s, p.scale_log2, p.rescale_threshold, factor);
          wgmma_wait<0>();
          pin_registers(o);
          pin_registers(pfrag);
          release(&bars->v_empty[previous.stage]);
          if (rescale) scale_rows(o, factor);
          convert_p(s, pfrag);
          previous = ring;
          ring.advance();
        }
        release(&bars->q_empty);

        // Last PV product.
        mbarrier_wait(&bars->v_full[previous.stage], previous.phase);
        wait_turn();
        wgmma_fence();
        issue_pv(o, pfrag, previous.stage);
        wgmma_commit();
        pass_turn();
        wgmma_wait<0>();
        pin_registers(o);
        release(&bars->v_empty[previous.stage]);
      }

      float inv_sum[2];
      float lse[2];
      softmax.finish(inv_sum, lse);
      FwdEpilogue<Element, kHeadDim>::store(p, work, warpgroup, smem, work.m0 + row_in_tile(), o, inv_sum, lse);
    }
    FwdEpilogue<Element, kHeadDim>::drain();
  }
};

}  // namespace flash4::sm90
