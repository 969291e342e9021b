// The backward consumer split by keys (head dim <= 128): each of the two consumer warpgroups owns 64 keys
// of the CTA's key block and keeps their dK and dV accumulators in registers over every query block step.
// Per step (a Q block of block_m rows, its dO, LSE and D):
//
//   S^T  = K_w Q^T        dP^T = V_w dO^T                 (SS wgmma, both issued together)
//   P^T  = exp2(S^T scale_log2 - LSE)    dS^T = P^T (dP^T - D)   [x (1 - tanh^2) under softcap]
//   dV  += P^T dO                                         (RS wgmma: P^T straight from registers)
//   dS^T -> shared memory; after both warpgroups wrote theirs:
//   dQ slice w = dS K                                     (SS wgmma over all 128 keys, dS read transposed;
//                                                          the slice is half the columns when block_m = 64,
//                                                          at D = 96 with 32 zero columns; half the rows when
//                                                          block_m = 128)
//   dK  += dS^T Q                                         (RS wgmma, behind dQ)
//   dQ -> fp32 staging (while dK runs) -> one bulk reduce-add into the workspace accumulator (issued by
//   the step's writer warp, dq_writer.cuh); the consumers never wait for the adds.
//
// The softmax scale is left out of dS and applied once at the end (dK here, dQ in the postprocess).
#pragma once

#include "kernels/common/mask.hpp"
#include "kernels/sm90/bwd/consumer_ops.cuh"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
struct BwdConsumer : BwdConsumerOps<Element, kHeadDim> {
  using Ops = BwdConsumerOps<Element, kHeadDim>;
  using Ops::cfg;
  using Ops::fragment_row;
  using Ops::kBlockM;
  using Ops::kCfg;
  using Ops::kDqCols;
  using Ops::kIsBf16;
  using Ops::lane;
  using typename Ops::DqSlice;
  using typename Ops::Fragments;
  using typename Ops::Gradient;
  using typename Ops::Scores;
  static constexpr int kKeys = kCfg.keys_per_warpgroup();
  using Handoff = DqHandoff;
  // dV is issued as soon as P^T is ready, before dS^T is computed, when its fragments fit beside S^T (the
  // fp32 P^T that dS^T is computed from), dP^T and the dK / dV accumulators: at block_m = 128 (D = 64)
  // these would take 64 + 32 + 64 + 64 registers.
  static constexpr bool kEarlyDv = kBlockM == 64;
  static_assert(kCfg.split == BwdSplit::kKeys, "this consumer splits the CTA's keys between the warpgroups");
  static_assert(kCfg.consumer_warpgroups * kWarpgroupThreads == kBwdConsumerThreads, "named barrier counts");

  int warpgroup;  // 0 or 1 among the consumers
  char* smem;
  BwdBarriers<kCfg.stages>* bars;
  // Run on over the CTA's tiles, like the producer's and the dQ writers'.
  RingPosition<kCfg.stages> ring{};
  // Whose step it is (Handoff::full). With as many stages as writers the stage index says it too, since
  // the ring advances once per step. Which of the two ptxas fits in 240 registers differs: the stage at
  // block_m = 64 (D = 96, 128), the counter at block_m = 128 (D = 64; its softcap kernel spilled with the
  // stage); -Xptxas -v shows no spill either way chosen here.
  static constexpr bool kStepFromStage = kBlockM == 64 && kCfg.stages == Handoff::kWriters;
  int step = 0;  // unused when kStepFromStage

  // Softcap: P^T and dS^T in place of S^T and dP^T, the score's tanh feeding both (dS picks up the
  // derivative 1 - tanh^2), then their A fragments. The mask comes as runs (Ops::mask_runs),
  // computed before the step's products are issued: the mask's fields and coordinates then need no
  // registers while the tanh temporaries do. (At block_m = 128 this pass is where registers are scarcest;
  // packing each pair as soon as it is computed spilled there.)
  template <bool kMasked>
  __device__ __forceinline__ static void softcapped_fragments(Scores& s, Scores& dp, Fragments& p_frag,
                                                              Fragments& ds_frag, const float* lse_log2,
                                                              const float* dsum, const BwdKernelParams& p,
                                                              typename Ops::MaskRuns runs) {
    const typename Ops::VisibilityBits visible = Ops::visibility_bits(runs);
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const int col = 8 * k + 2 * (lane() % 4);
      const float2 lse = load_shared_float2(lse_log2 + col);
      const float2 d = load_shared_float2(dsum + col);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int index = 4 * k + r;
        const float t = tanh_approx(s[index] * p.softcap_prescale);
        float prob = ex2_approx(t * p.scale_log2 - (r % 2 == 0 ? lse.x : lse.y));
        if constexpr (kMasked) {
          if (!Ops::is_visible(visible, k, r / 2, r % 2)) prob = 0.0f;
        }
        dp[index] = prob * (dp[index] - (r % 2 == 0 ? d.x : d.y)) * (1.0f - t * t);
        s[index] = prob;
      }
    }
    Ops::to_fragments(s, p_frag);
    Ops::to_fragments(dp, ds_frag);
  }

  // dQ accumulator (this warpgroup's slice: 64 query rows from dq_row0, kDqCols columns from dq_col0) ->
  // the fp32 staging boxes (see BwdTileConfig::dq_staging_index). Columns past head_dim (D = 96: the zero
  // padding of the tiles) are not staged. The index is linear in (row, column) for columns that are
  // multiples of a box width, so every store is one base plus a constant.
  __device__ __forceinline__ void stage_dq(const DqSlice& dq) const {
    static_assert(bwd_tile_config(kHeadDim).dq_box_cols() % 8 == 0, "an 8-column fragment block fits a box row");
    static_assert(kDqCols % bwd_tile_config(kHeadDim).dq_box_cols() == 0, "slices start on a box");
    float* staging = reinterpret_cast<float*>(smem + kCfg.dq_offset()) +
                     cfg().dq_staging_index(cfg().dq_row0(warpgroup) + fragment_row(), cfg().dq_col0(warpgroup)) +
                     2 * (lane() % 4);
#pragma unroll
    for (int k = 0; k < kDqCols / 8; ++k) {
      if (kCfg.tile_cols() != kHeadDim && cfg().dq_col0(warpgroup) + 8 * k >= kHeadDim) break;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        store_shared_float2(staging + cfg().dq_staging_index(8 * i, 8 * k), make_float2(dq[4 * k + 2 * i], dq[4 * k + 2 * i + 1]));
      }
    }
  }

  // Stages step `step`'s dQ for its writer warp: waits until the previous step's reduce-adds have read the
  // slice, writes this warpgroup's slice, and signals the writer without waiting for it.
  __device__ __forceinline__ void hand_off_dq(const DqSlice& dq) const {
    named_barrier_sync(Handoff::empty(warpgroup), Handoff::kThreads);
    stage_dq(dq);
    fence_async_shared();  // the bulk reduce-add reads the staging boxes through the async proxy
    named_barrier_arrive(Handoff::full(kStepFromStage ? ring.stage : step, warpgroup), Handoff::kThreads);
  }

  // dK and dV of the warpgroup's keys, staged through its own rows of the dS^T buffer that the next step
  // writes (Ops::store_key_rows_staged): the last step's products read the other buffer; this one was last
  // read by the step before, whose dQ products both warpgroups completed before passing the last step's
  // kDsReady barrier, and the next step's writes into these rows are this warpgroup's own, after these
  // reads.
  __device__ __forceinline__ void store_gradients(const BwdKernelParams& p, const BwdTileWork& work, const Gradient& dk,
                                                  const Gradient& dv) const {
    static_assert(kCfg.ds_buffers() == kCfg.stages, "the dS^T buffer the next step writes is free");
    char* staging = smem + cfg().ds_offset(ring.stage % kCfg.ds_buffers()) + warpgroup * kKeys * kCfg.swizzle_bytes;
    Ops::store_key_rows_staged(p.dk, p.dk_strides, p.cols, p, work, warpgroup * kKeys, dk, p.softmax_scale, staging);
    Ops::store_key_rows_staged(p.dv, p.dv_strides, p.cols_v, p, work, warpgroup * kKeys, dv, 1.0f, staging);
  }

  // After the last tile: the writers hand the staging buffer back after every step, so the consumers take
  // it once more.
  __device__ __forceinline__ void finish() const { named_barrier_sync(Handoff::empty(warpgroup), Handoff::kThreads); }

  // Whether block_m = 128's masked steps run a copy of the step of their own (run_step<kSoftcap, true>): it
  // reads the LSE at its use, which leaves the registers to build the mask runs after the wait for S^T.
  // The shared step could not have both without spilling or slowing the unmasked steps (the LSE read at
  // its use in every step: docs/experiments.md, "mask runs carried across the products"). The unmasked
  // steps keep their code; a copy at block_m = 64 too made ptxas schedule them worse ("masked-step copy
  // at block_m = 64 too").
  template <bool kSoftcap>
  static constexpr bool kSplitMaskedSteps = !kSoftcap && !kEarlyDv;

  // One step: query block m_block against this warpgroup's keys. kMaskedOnly: the copy for masked steps
  // (kSplitMaskedSteps; `masked` is then true).
  template <bool kSoftcap, bool kMaskedOnly>
  __device__ __forceinline__ void run_step(const BwdKernelParams& p, const BwdTileWork& work, int m_block, bool masked,
                                           const char* k_tile, const char* v_tile, Gradient& dk, Gradient& dv) {
    const char* q_tile = smem + cfg().q_offset(ring.stage);
    const char* do_tile = smem + cfg().do_offset(ring.stage);
    Scores s;
    Scores dp;
    const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
    const int key0 = work.n0 + warpgroup * kKeys + fragment_row();
    const int query0 = m_block * kBlockM;
    // Softcap: the mask before the products are issued, while S^T and dP^T take no registers.
    typename Ops::MaskRuns runs = Ops::kAllVisible;
    if (kSoftcap && masked) runs = Ops::mask_runs(mask, key0, query0);
    mbarrier_wait(&bars->stage_full[ring.stage], ring.phase);
    const float* lse = reinterpret_cast<const float*>(smem + cfg().lse_offset(ring.stage));
    const float* dsum = reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage));
    // LSE goes to registers before the products are issued: their operand reads then take all of
    // shared memory's bandwidth, and loads issued behind them return only as the products finish (the
    // exponentials and dS^T waiting on the LSE and D loads were a large share of the consumers' stalls
    // in Nsight Compute profiles). D follows once dV is issued at block_m = 64 (both before
    // the products spilled there) and is read at its use at block_m = 128. The masked-only steps read the
    // LSE at its use too (kSplitMaskedSteps).
    typename Ops::RowStats lse_stats;
    typename Ops::RowStats dsum_stats;
    if constexpr (!kSoftcap && !kMaskedOnly) Ops::load_row_stats(lse_stats, lse);
    wgmma_fence();
    Ops::issue_scores(s, k_tile, warpgroup * kKeys, q_tile);
    wgmma_commit();
    Ops::issue_scores(dp, v_tile, warpgroup * kKeys, do_tile);
    wgmma_commit();

    Fragments p_frag;
    Fragments ds_frag;
    if constexpr (kSoftcap) {
      // tanh feeds both P and dS: wait for both products, one pass.
      wgmma_wait<0>();
      pin_registers(s);
      pin_registers(dp);
      if (masked) softcapped_fragments<true>(s, dp, p_frag, ds_frag, lse, dsum, p, runs);
      else softcapped_fragments<false>(s, dp, p_frag, ds_frag, lse, dsum, p, runs);
      wgmma_fence();
      Ops::issue_gradient(dv, p_frag, do_tile);
      wgmma_commit();
    } else if constexpr (!kEarlyDv) {
      // The exponentials run while dP^T is still in flight. D is read at its use (Ops::row_stat).
      wgmma_wait<1>();
      pin_registers(s);
      // Masked steps run their own copy here (kSplitMaskedSteps), which reads the LSE at its use.
      static_assert(kSplitMaskedSteps<kSoftcap>, "block_m = 128 splits off its masked steps");
      if constexpr (kMaskedOnly) Ops::template probabilities<true>(s, lse, p, Ops::mask_runs(mask, key0, query0));
      else Ops::template probabilities<false>(s, lse_stats, p, runs);
      wgmma_wait<0>();
      pin_registers(dp);
      Ops::score_gradients(dp, s, dsum);
      Ops::to_fragments(s, p_frag);
      Ops::to_fragments(dp, ds_frag);
      wgmma_fence();
      Ops::issue_gradient(dv, p_frag, do_tile);
      wgmma_commit();
    } else {
      // The exponentials run while dP^T is still in flight, dS^T while dV is.
      wgmma_wait<1>();
      pin_registers(s);
      if (masked) Ops::template probabilities<true>(s, lse_stats, p, Ops::mask_runs(mask, key0, query0));
      else Ops::template probabilities<false>(s, lse_stats, p, runs);
      Ops::to_fragments(s, p_frag);
      wgmma_fence();
      Ops::issue_gradient(dv, p_frag, do_tile);
      wgmma_commit();
      Ops::load_row_stats(dsum_stats, dsum);
      wgmma_wait<1>();
      pin_registers(dp);
      Ops::score_gradients(dp, s, dsum_stats);
      Ops::to_fragments(dp, ds_frag);
    }

    // dV runs on the tensor cores while dS^T is stored and the warpgroups meet. Then dQ goes first and
    // dK behind it, so that dQ is staged for its writer while dK still runs (dK first and dQ last, staged
    // after it, measured the same speed; this order's register peak is lower).
    char* ds_tile = smem + cfg().ds_offset(ring.stage % kCfg.ds_buffers());
    Ops::template store_ds<!kSoftcap>(ds_tile, ds_frag, warpgroup * kKeys);
    fence_async_shared();  // the generic-proxy dS stores must be visible to wgmma
    named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);

    DqSlice dq;
    wgmma_fence();
    Ops::issue_dq(dq, smem, ds_tile, cfg().dq_row0(warpgroup), cfg().dq_col0(warpgroup));
    wgmma_commit();
    Ops::issue_gradient(dk, ds_frag, q_tile);
    wgmma_commit();
    wgmma_wait<1>();  // dV and dQ
    pin_registers(dv);
    pin_registers(p_frag);
    pin_registers(dq);
    hand_off_dq(dq);
    wgmma_wait<0>();  // dK
    pin_registers(dk);
    pin_registers(ds_frag);
    Ops::release(&bars->stage_empty[ring.stage]);

    ring.advance();
    if constexpr (!kStepFromStage) ++step;
  }

  // One tile.
  template <bool kSoftcap>
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    constexpr bool kPersistent = bwd_persistent_kernel(kHeadDim, kSoftcap);
    // Opaque once per tile: the tiles' shared-memory addresses (the wgmma descriptors of K and V above
    // all) are then rebuilt per tile instead of hoisted out of the tile loop, where ptxas spilled them.
    if constexpr (kPersistent) asm volatile("" : "+l"(smem));
    Gradient dk;
    Gradient dv;
#pragma unroll
    for (int r = 0; r < kHeadDim / 2; ++r) {
      dk[r] = 0.0f;
      dv[r] = 0.0f;
    }
    // The zeros are made here, after setmaxnreg.inc: left as constants, the compiler materializes them
    // (for the path that skips the loop) before the kernel's branch on the warpgroup, so dK and dV would
    // be live across setmaxnreg.inc, and ptxas then keeps them in local memory for the whole loop (at
    // block_m = 128: LDL / STL around every dV / dK product, wgmma serialized, C7512).
    pin_registers(dk);
    pin_registers(dv);
    if (work.num_steps() > 0) {
      const char* k_tile = smem + kCfg.k_offset();
      const char* v_tile = smem + kCfg.v_offset();
      mbarrier_wait(&bars->kv_full, work.kv_phase);

      // Two dS buffers alternate like the two stages, so the stage index also picks the dS buffer.
      static_assert(kCfg.ds_buffers() == kCfg.stages, "dS buffers follow the stage ring");
      // Every step ends with all its wgmmas complete: ptxas cannot follow wgmma groups left in flight
      // across a loop back-edge and would serialize every wgmma of the loop (warning C7514 / C7520).
      for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
        for (int i = work.walk_begin; i < work.walk_end; ++i) {
          const int m_block = bwd_walk_block(i);
          const bool masked = work.queries.needs_mask(m_block);
          if (kSplitMaskedSteps<kSoftcap> && masked) {
            run_step<kSoftcap, true>(p, work, m_block, true, k_tile, v_tile, dk, dv);
          } else {
            run_step<kSoftcap, false>(p, work, m_block, !kSplitMaskedSteps<kSoftcap> && masked, k_tile, v_tile, dk, dv);
          }
        }
      }
      // Every product that reads K or V is complete (each step ends with wgmma_wait<0>): the producer may
      // load the next tile's while this one's dK and dV are written.
      mbarrier_arrive(&bars->kv_empty);
    }
    store_gradients(p, work, dk, dv);
  }
};

}  // namespace flash4::sm90
