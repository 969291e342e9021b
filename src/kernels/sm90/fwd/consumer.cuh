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

#include "kernels/common/fwd_params.hpp"
#include "kernels/sm90/fwd/epilogue.cuh"
#include "kernels/sm90/fwd/pipeline.cuh"
#include "kernels/sm90/fwd/softmax.cuh"
#include "kernels/sm90/fwd/tile_work.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"

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
  using QueryBuffer = RingPosition<kCfg.q_buffers()>;  // the Q buffer of the next tile with keys
  static constexpr bool kOverlapTiles = kCfg.q_buffers() > 1;

  int warpgroup;  // 0 .. kWarpgroups - 1 among the consumers
  char* smem;
  typename Layout::Barriers* bars;

  __device__ __forceinline__ void wait_turn() const {
    if constexpr (kCfg.ping_pong) named_barrier_sync(kFwdTurnBarrierBase + warpgroup, kTurnThreads);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (kCfg.ping_pong) {
      named_barrier_arrive(kFwdTurnBarrierBase + (warpgroup + 1) % kWarpgroups, kTurnThreads);
    }
  }
  // One arrival per warp on an `empty` barrier, after the warp's wgmma wait.
  __device__ __forceinline__ static void release(uint64_t* barrier) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(barrier);
  }

  // Issues S = Q K^T for this warpgroup's 64 rows of Q buffer `q_buffer` against the K tile in `stage`.
  __device__ __forceinline__ void issue_qk(float (&s)[kBlockN / 2], int q_buffer, int stage) const {
    const char* q = smem + Layout::kQOffset + q_buffer * kCfg.q_bytes() + warpgroup * kRowsPerConsumerWarpgroup * kSwizzle;
    const char* k = smem + Layout::kKOffset + stage * kCfg.kv_stage_bytes();
    const uint64_t q_desc = make_smem_descriptor(q, 16, kCoreGroupBytes, kSwizzleMode);
    const uint64_t k_desc = make_smem_descriptor(k, 16, kCoreGroupBytes, kSwizzleMode);
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int box = step / kStepsPerBox;
      const uint32_t in_row = (step % kStepsPerBox) * 32;
      MmaS::template run<false>(s, advance_descriptor(q_desc, box * kCfg.block_m() * kSwizzle + in_row),
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

  // Softcap and mask of key block `block`'s scores. The mask and this thread's row are rebuilt here
  // rather than kept across the main loop, where registers are scarcest.
  __device__ __forceinline__ void score(float (&s)[kBlockN / 2], const FwdKernelParams& p, const TileWork& work,
                                        int block) const {
    if (p.has_softcap) Softmax::apply_softcap(s, p.softcap_prescale);
    if (work.keys.needs_mask(block)) {
      const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
      Softmax::apply_mask(s, mask, work.m0 + row_in_tile(), block * kBlockN);
    }
  }

  // This thread's first row within the CTA tile (its second is 8 below).
  __device__ __forceinline__ int row_in_tile() const {
    const int warp_in_group = (threadIdx.x / 32) % 4;
    return warpgroup * kRowsPerConsumerWarpgroup + warp_in_group * 16 + (threadIdx.x % 32) / 4;
  }

  static __device__ __forceinline__ bool has_keys(const TileWork& work) { return work.has_rows && work.keys.count() > 0; }

  // Waits for the Q and first K of the next tile with keys, then issues its first QK product: S for its
  // last key block, outside the turn ring.
  __device__ __forceinline__ void wait_first_operands(const RingPosition<kCfg.stages>& ring, const QueryBuffer& q) {
    mbarrier_wait(&bars->q_full[q.stage], q.phase);
    mbarrier_wait(&bars->k_full[ring.stage], ring.phase);
  }
  __device__ __forceinline__ void issue_first_qk(float (&s)[kBlockN / 2], const RingPosition<kCfg.stages>& ring,
                                                 const QueryBuffer& q) {
    wgmma_fence();
    issue_qk(s, q.stage, ring.stage);
    wgmma_commit();
  }

  // One tile's key blocks, last to first, into o and softmax, from its first S (its QK product complete)
  // through every QK product: the tile's last PV product is left to the caller, which may issue it next
  // to the next tile's first QK. Returns the stage of that last V.
  __device__ __forceinline__ RingPosition<kCfg.stages> attend(const FwdKernelParams& p, const TileWork& work,
                                                              float (&o)[kHeadDim / 2], float (&s)[kBlockN / 2],
                                                              uint32_t (&pfrag)[kBlockN / 16][4], Softmax& softmax,
                                                              RingPosition<kCfg.stages>& ring, QueryBuffer& q) {
    float factor[2];
    int block = work.keys.end - 1;
    pin_registers(s);
    release(&bars->k_empty[ring.stage]);
    score(s, p, work, block);
    softmax.step(s, p.scale_log2, factor);  // O is still zero: the first step's rescale is moot
    convert_p(s, pfrag);
    RingPosition<kCfg.stages> previous = ring;
    ring.advance();

    for (--block; block >= work.keys.begin; --block) {
      mbarrier_wait(&bars->k_full[ring.stage], ring.phase);
      mbarrier_wait(&bars->v_full[previous.stage], previous.phase);
      wait_turn();
      wgmma_fence();
      issue_qk(s, q.stage, ring.stage);
      wgmma_commit();
      issue_pv(o, pfrag, previous.stage);
      wgmma_commit();
      pass_turn();
      wgmma_wait<1>();  // S done; the PV product may still run
      pin_registers(s);
      release(&bars->k_empty[ring.stage]);
      score(s, p, work, block);
      const bool rescale = softmax.step(s, p.scale_log2, factor);
      wgmma_wait<0>();
      pin_registers(o);
      pin_registers(pfrag);
      release(&bars->v_empty[previous.stage]);
      if (rescale) scale_rows(o, factor);
      convert_p(s, pfrag);
      previous = ring;
      ring.advance();
    }
    release(&bars->q_empty[q.stage]);  // every QK product of the tile has completed
    q.advance();
    return previous;
  }

  // Normalizes and stores the tile's output and hands its slot back to the producer.
  __device__ __forceinline__ void finish_tile(const FwdKernelParams& p, const TileWork& work, int number,
                                              const float (&o)[kHeadDim / 2], const Softmax& softmax) {
    float inv_sum[2];
    float lse[2];
    softmax.finish(inv_sum, lse);
    Epilogue::store(p, work, warpgroup, smem, work.m0 + row_in_tile(), o, inv_sum, lse);
    free_tile(bars, number);
  }

  // The last PV product of a tile whose QK products are done (attend).
  __device__ __forceinline__ void issue_last_pv(float (&o)[kHeadDim / 2], const uint32_t (&pfrag)[kBlockN / 16][4],
                                                const RingPosition<kCfg.stages>& last_v) {
    mbarrier_wait(&bars->v_full[last_v.stage], last_v.phase);
    wgmma_fence();
    issue_pv(o, pfrag, last_v.stage);
    wgmma_commit();
  }

  __device__ void run(const FwdKernelParams& p) {
    if (warpgroup == kWarpgroups - 1) pass_turn();  // warpgroup 0 issues first
    if constexpr (kOverlapTiles) {
      run_overlapped(p);
    } else {
      run_tile_by_tile(p);
    }
    Epilogue::drain();
  }

  // Each tile from its first QK product to its epilogue.
  __device__ __forceinline__ void run_tile_by_tile(const FwdKernelParams& p) {
    RingPosition<kCfg.stages> ring;
    QueryBuffer q;
    for (int number = 0;; ++number) {
      const TileWork& work = wait_tile(bars, number);
      if (!work.has_rows) return;
      float o[kHeadDim / 2];
#pragma unroll
      for (int r = 0; r < kHeadDim / 2; ++r) o[r] = 0.0f;
      Softmax softmax;
      softmax.reset();
      if (has_keys(work)) {
        float s[kBlockN / 2];
        uint32_t pfrag[kBlockN / 16][4];
        wait_first_operands(ring, q);
        issue_first_qk(s, ring, q);
        wgmma_wait<0>();
        const RingPosition<kCfg.stages> last_v = attend(p, work, o, s, pfrag, softmax, ring, q);
        issue_last_pv(o, pfrag, last_v);
        wgmma_wait<0>();
        pin_registers(o);
        release(&bars->v_empty[last_v.stage]);
      }
      finish_tile(p, work, number, o, softmax);
    }
  }

  // With Q double-buffered, the next tile's first QK product is issued right behind this tile's last PV
  // product, and this tile's epilogue runs under it: short tiles otherwise leave the tensor cores idle at
  // every tile boundary. Each of the four cases (this tile with keys or not, the next one too) is written
  // out with its own waits, and every pass of the loop ends with no wgmma in flight: ptxas cannot follow
  // wgmma groups across a branch or a loop back-edge, and would otherwise serialize every wgmma of the
  // kernel. The waits for the next tile's operands come before the last PV issue for the same reason.
  __device__ __forceinline__ void run_overlapped(const FwdKernelParams& p) {
    RingPosition<kCfg.stages> ring;
    QueryBuffer q;
    float s[kBlockN / 2];  // between passes: the next tile's first S, computed
    const TileWork* work = &wait_tile(bars, 0);
    if (has_keys(*work)) {
      wait_first_operands(ring, q);
      issue_first_qk(s, ring, q);
      wgmma_wait<0>();
    }
    for (int number = 0; work->has_rows; ++number) {
      float o[kHeadDim / 2];
#pragma unroll
      for (int r = 0; r < kHeadDim / 2; ++r) o[r] = 0.0f;
      Softmax softmax;
      softmax.reset();
      uint32_t pfrag[kBlockN / 16][4];
      const bool keys = has_keys(*work);
      RingPosition<kCfg.stages> last_v;
      if (keys) last_v = attend(p, *work, o, s, pfrag, softmax, ring, q);
      const TileWork* next = &wait_tile(bars, number + 1);
      if (has_keys(*next)) {
        wait_first_operands(ring, q);
        if (keys) {
          issue_last_pv(o, pfrag, last_v);
          issue_first_qk(s, ring, q);
          wgmma_wait<1>();  // the last PV product; the next tile's first QK runs on
          pin_registers(o);
          release(&bars->v_empty[last_v.stage]);
          finish_tile(p, *work, number, o, softmax);
        } else {
          issue_first_qk(s, ring, q);
          finish_tile(p, *work, number, o, softmax);
        }
        wgmma_wait<0>();
      } else if (keys) {
        issue_last_pv(o, pfrag, last_v);
        wgmma_wait<0>();
        pin_registers(o);
        release(&bars->v_empty[last_v.stage]);
        finish_tile(p, *work, number, o, softmax);
      } else {
        finish_tile(p, *work, number, o, softmax);
      }
      work = next;
    }
  }
};

}  // namespace flash4::sm90
