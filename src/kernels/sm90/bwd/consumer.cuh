// The backward consumer split by keys (head dim <= 128): each of the two consumer warpgroups owns 64 keys
// of the CTA's key block and keeps their dK and dV accumulators in registers over every query block step. Per step (Q block of 64
// rows, its dO, LSE and D):
//
//   S^T  = K_w Q^T        dP^T = V_w dO^T                 (SS wgmma, both issued together)
//   P^T  = exp2(S^T scale_log2 - LSE)    dS^T = P^T (dP^T - D)   [x (1 - tanh^2) under softcap]
//   dV  += P^T dO         dK  += dS^T Q                   (RS wgmma: P^T and dS^T straight from registers)
//   dS^T -> shared memory; after both warpgroups wrote theirs:
//   dQ[:, half w] = dS K[:, half w]                       (SS wgmma over all 128 keys, dS read transposed;
//                                                          at D = 96 the second half has 32 zero columns)
//   dQ -> fp32 staging -> TMA reduce-add into the workspace accumulator (issued by the writer warp,
//   dq_writer.cuh); the consumers never wait for the adds.
//
// The softmax scale is left out of dS and applied once at the end (dK here, dQ in the postprocess).
#pragma once

#include "kernels/common/bwd_params.hpp"
#include "kernels/common/mask.hpp"
#include "kernels/sm90/bwd/consumer_ops.cuh"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"

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
  static_assert(kCfg.split == BwdSplit::kKeys, "this consumer splits the CTA's keys between the warpgroups");
  static_assert(kCfg.consumer_warpgroups * kWarpgroupThreads == kBwdConsumerThreads, "named barrier counts");

  int warpgroup;  // 0 or 1 among the consumers
  char* smem;
  BwdBarriers<kCfg.stages>* bars;

  // Softcap: the A fragments of P^T and dS^T straight from S^T and dP^T, the score's tanh feeding both
  // (dS picks up the derivative 1 - tanh^2). Packing each pair as soon as it is computed lets s and dp
  // die as the pass goes, which the extra tanh temporaries need.
  template <bool kMasked>
  __device__ __forceinline__ static void softcapped_fragments(const Scores& s, const Scores& dp, Fragments& p_frag,
                                                              Fragments& ds_frag, const float* lse_log2,
                                                              const float* dsum, const BwdKernelParams& p,
                                                              const MaskSpec& mask, int key0, int query0) {
    // The mask as bits, computed before the pass: the mask's fields and coordinates then need no
    // registers while the tanh temporaries do.
    const uint32_t visible = kMasked ? Ops::visibility_bits(mask, key0, query0) : ~0u;
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const int col = 8 * k + 2 * (lane() % 4);
      const float2 lse = load_shared_float2(lse_log2 + col);
      const float2 d = load_shared_float2(dsum + col);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float prob[2];
        float ds[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int index = 4 * k + 2 * i + j;
          const float t = tanh_approx(s[index] * p.softcap_prescale);
          prob[j] = ex2_approx(t * p.scale_log2 - (j == 0 ? lse.x : lse.y));
          if constexpr (kMasked) {
            if (!(visible >> index & 1u)) prob[j] = 0.0f;
          }
          ds[j] = prob[j] * (dp[index] - (j == 0 ? d.x : d.y)) * (1.0f - t * t);
        }
        // Accumulator pair (k, i) is fragment register r = 2 (k % 2) + i of k16 step k / 2 (see to_fragments).
        p_frag[k / 2][2 * (k % 2) + i] = pack_pair<kIsBf16>(prob[0], prob[1]);
        ds_frag[k / 2][2 * (k % 2) + i] = pack_pair<kIsBf16>(ds[0], ds[1]);
      }
    }
  }

  // dQ accumulator (rows = queries, this warpgroup's columns) -> the fp32 staging boxes (see
  // BwdTileConfig::dq_staging_index). Columns past head_dim (D = 96: the zero padding of the tiles) are
  // not staged.
  __device__ __forceinline__ void stage_dq(const DqSlice& dq) const {
    static_assert(bwd_tile_config(kHeadDim).dq_box_cols() % 8 == 0, "an 8-column fragment block fits a box row");
    float* staging = reinterpret_cast<float*>(smem + kCfg.dq_offset());
#pragma unroll
    for (int k = 0; k < kDqCols / 8; ++k) {
      if (kCfg.tile_cols() != kHeadDim && warpgroup * kDqCols + 8 * k >= kHeadDim) break;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        // The thread's column pair lies in the box row of its 8-column block, which is contiguous: indexing
        // the block's first column keeps the offset of every (k, i) a constant from one base.
        const int row = fragment_row() + 8 * i;
        const int block_col = warpgroup * kDqCols + 8 * k;
        store_shared_float2(staging + cfg().dq_staging_index(row, block_col) + 2 * (lane() % 4),
                            make_float2(dq[4 * k + 2 * i], dq[4 * k + 2 * i + 1]));
      }
    }
  }

  // Stages dQ for the writer warp: waits until the writer's previous reduce-adds have read the buffer,
  // writes this warpgroup's columns, and signals the writer without waiting for it.
  __device__ __forceinline__ void hand_off_dq(const DqSlice& dq) const {
    named_barrier_sync(int(BwdBarrierId::kDqEmpty), kBwdDqHandoffThreads);
    stage_dq(dq);
    fence_async_shared();  // the TMA reduce-adds read the staging boxes through the async proxy
    named_barrier_arrive(int(BwdBarrierId::kDqFull), kBwdDqHandoffThreads);
  }

  __device__ __forceinline__ void store_gradients(const BwdKernelParams& p, const BwdTileWork& work, const Gradient& dk,
                                                  const Gradient& dv) const {
    Ops::store_key_rows(p.dk, p.dk_strides, p, work, warpgroup * kKeys, dk, p.softmax_scale);
    Ops::store_key_rows(p.dv, p.dv_strides, p, work, warpgroup * kKeys, dv, 1.0f);
  }

  template <bool kSoftcap>
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    Gradient dk;
    Gradient dv;
#pragma unroll
    for (int r = 0; r < kHeadDim / 2; ++r) {
      dk[r] = 0.0f;
      dv[r] = 0.0f;
    }
    if (work.num_steps() > 0) {
      const char* k_tile = smem + kCfg.k_offset();
      const char* v_tile = smem + kCfg.v_offset();
      mbarrier_wait(&bars->kv_full, 0);

      // Two dS buffers alternate like the two stages, so the stage index also picks the dS buffer. Paired
      // there is one (BwdTileConfig::ds_buffers): both warpgroups then pass step t's kDqEmpty barrier,
      // after their dQ products have read dS, before either writes step t + 1's.
      static_assert(kCfg.ds_buffers() == 1 || kCfg.ds_buffers() == kCfg.stages, "dS buffers follow the stage ring");
      RingPosition<kCfg.stages> ring;
      // Every step ends with all its wgmmas complete: ptxas cannot follow wgmma groups left in flight
      // across a loop back-edge and would serialize every wgmma of the loop (warning C7514 / C7520).
      for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
        for (int m_block = work.queries.end - 1; m_block >= work.queries.begin; --m_block) {
          const char* q_tile = smem + cfg().q_offset(ring.stage);
          const char* do_tile = smem + cfg().do_offset(ring.stage);
          Scores s;
          Scores dp;
          mbarrier_wait(&bars->stage_full[ring.stage], ring.phase);
          wgmma_fence();
          Ops::issue_scores(s, k_tile, warpgroup * kKeys, q_tile);
          wgmma_commit();
          Ops::issue_scores(dp, v_tile, warpgroup * kKeys, do_tile);
          wgmma_commit();

          const float* lse = reinterpret_cast<const float*>(smem + cfg().lse_offset(ring.stage));
          const float* dsum = reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage));
          const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
          const int key0 = work.n0 + warpgroup * kKeys + fragment_row();
          const int query0 = m_block * kBlockM;
          const bool masked = work.queries.needs_mask(m_block);
          Fragments p_frag;
          Fragments ds_frag;
          if constexpr (kSoftcap) {
            // tanh feeds both P and dS: wait for both products, one pass.
            wgmma_wait<0>();
            pin_registers(s);
            pin_registers(dp);
            if (masked) softcapped_fragments<true>(s, dp, p_frag, ds_frag, lse, dsum, p, mask, key0, query0);
            else softcapped_fragments<false>(s, dp, p_frag, ds_frag, lse, dsum, p, mask, key0, query0);
            wgmma_fence();
            Ops::issue_gradient(dv, p_frag, do_tile);
            Ops::issue_gradient(dk, ds_frag, q_tile);
            wgmma_commit();
          } else {
            // The exponentials run while dP^T is still in flight, dS^T while dV is.
            wgmma_wait<1>();
            pin_registers(s);
            if (masked) Ops::template probabilities<true>(s, lse, p, mask, key0, query0);
            else Ops::template probabilities<false>(s, lse, p, mask, key0, query0);
            Ops::to_fragments(s, p_frag);
            wgmma_fence();
            Ops::issue_gradient(dv, p_frag, do_tile);
            wgmma_commit();
            wgmma_wait<1>();
            pin_registers(dp);
            Ops::score_gradients(dp, s, dsum);
            Ops::to_fragments(dp, ds_frag);
            wgmma_fence();
            Ops::issue_gradient(dk, ds_frag, q_tile);
            wgmma_commit();
          }

          char* ds_tile = smem + cfg().ds_offset(ring.stage % kCfg.ds_buffers());
          Ops::store_ds(ds_tile, ds_frag, warpgroup * kKeys);
          fence_async_shared();  // the generic-proxy dS stores must be visible to wgmma
          named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);

          // dQ is issued behind dV and dK, which may still run: the tensor cores stay busy across the barrier.
          DqSlice dq;
          wgmma_fence();
          Ops::issue_dq(dq, smem, ds_tile, warpgroup * kDqCols);
          wgmma_commit();
          wgmma_wait<0>();
          pin_registers(dk);
          pin_registers(dv);
          pin_registers(p_frag);
          pin_registers(ds_frag);
          pin_registers(dq);
          Ops::release(&bars->stage_empty[ring.stage]);
          hand_off_dq(dq);

          ring.advance();
        }
      }
    }
    store_gradients(p, work, dk, dv);
  }
};

}  // namespace flash4::sm90
