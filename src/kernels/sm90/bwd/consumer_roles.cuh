// The backward consumer split by roles (head dim 192 and 256). A 64 x head_dim accumulator takes
// head_dim / 2 registers per thread, so one warpgroup cannot hold both dK and dV of its keys; instead the
// CTA owns 64 keys and its two warpgroups divide each step's products:
//
//   warpgroup 0 (probabilities)            warpgroup 1 (gradients)
//   S^T = K Q^T                            dP^T = V dO^T                      (SS wgmma)
//   P^T = exp2(S^T scale_log2 - LSE)
//   P (fp32) -> shared memory     ------>  dS^T = P^T (dP^T - D)              [P x (1 - tanh^2) under softcap]
//   dV += P^T dO  (RS)                     dK += dS^T Q  (RS)
//                                 <------  dS^T (bf16) -> shared memory
//   dQ[:, chunks 0, 2, ...] = dS K[:, ...] dQ[:, chunks 1, 3, ...]            (SS wgmma, 64-column chunks)
//
// Each warpgroup runs two of the four big products, so the tensor cores see both warpgroups' work. dQ is
// reduce-added from registers (red.global.add.v2.f32): at D = 256 a fp32 staging buffer would not fit
// beside the two stages of Q and dO. In deterministic mode each step's reductions wait for the CTA's turn.
//
// The single dS^T and P buffers need no double-buffering: warpgroup 0 writes P(t+1) only after kDsReady(t),
// which both warpgroups sync on, warpgroup 1 after it has read P(t); warpgroup 1 writes dS^T(t+1) only
// after kProbsReady(t+1), which warpgroup 0 arrives on after its dQ(t) products have completed. (With
// warpgroup 1 only arriving on kDsReady, racecheck reported warpgroup 0's P stores against warpgroup 1's
// reads of the previous P; syncing both sides cost nothing measurable at D = 256.)
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
struct BwdRolesConsumer : BwdConsumerOps<Element, kHeadDim> {
  using Ops = BwdConsumerOps<Element, kHeadDim>;
  using Ops::cfg;
  using Ops::fragment_row;
  using Ops::kBlockM;
  using Ops::kCfg;
  using Ops::kDqCols;
  using Ops::lane;
  using typename Ops::DqSlice;
  using typename Ops::Fragments;
  using typename Ops::Gradient;
  using typename Ops::Scores;
  static_assert(kCfg.split == BwdSplit::kRoles, "this consumer splits each step's products between the warpgroups");
  static_assert(kCfg.block_n == 64, "one warpgroup's wgmma M covers all of the CTA's keys");
  static_assert(kCfg.dq_chunks() >= 2, "each warpgroup computes at least one dQ chunk (its wait completes the step)");
  static_assert(kCfg.probs_bytes() == (kBlockM / 2) * kBwdConsumerThreads / 2 * int(sizeof(float)),
                "P holds one 64 x 64 accumulator of a warpgroup");
  static constexpr int kProbabilitiesRole = 0;  // warpgroup 0: S^T, P^T, dV
  static constexpr int kGradientsRole = 1;      // warpgroup 1: dP^T, dS^T, dK

  int warpgroup;  // 0 or 1 among the consumers: its role
  char* smem;
  BwdBarriers<kCfg.stages>* bars;
  // Run on over the CTA's tiles, like the producer's.
  RingPosition<kCfg.stages> ring{};

  // P in warpgroup 0's accumulator order: entries 4k .. 4k + 3 of every thread side by side (16 bytes per
  // thread, so a warp's accesses are conflict-free), read back by the thread of warpgroup 1 with the same
  // index, whose dP^T entries are the same (key, query) pairs.
  __device__ __forceinline__ float* probs_slot(int k) const {
    return reinterpret_cast<float*>(smem + kCfg.probs_offset()) + (k * kWarpgroupThreads + threadIdx.x % kWarpgroupThreads) * 4;
  }

  // Softcap: P^T in place in s, and into shared memory P (1 - tanh^2), the factor dS needs.
  template <bool kMasked>
  __device__ __forceinline__ void softcapped_probabilities(Scores& s, const float* lse_log2, const BwdKernelParams& p,
                                                           const MaskSpec& mask, int key0, int query0) const {
    const typename Ops::VisibilityBits visible =
        Ops::visibility_bits(kMasked ? Ops::mask_runs(mask, key0, query0) : Ops::kAllVisible);
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const float2 lse = load_shared_float2(lse_log2 + 8 * k + 2 * (lane() % 4));
      float derivative[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int index = 4 * k + r;
        const float t = tanh_approx(s[index] * p.softcap_prescale);
        float prob = ex2_approx(t * p.scale_log2 - (r % 2 == 0 ? lse.x : lse.y));
        if (!Ops::is_visible(visible, k, r / 2, r % 2)) prob = 0.0f;
        s[index] = prob;
        derivative[r] = prob * (1.0f - t * t);
      }
      store_shared_float4(probs_slot(k), make_float4(derivative[0], derivative[1], derivative[2], derivative[3]));
    }
  }

  __device__ __forceinline__ void publish_probabilities(const Scores& s) const {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      store_shared_float4(probs_slot(k), make_float4(s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]));
    }
  }

  __device__ __forceinline__ void read_probabilities(Scores& prob) const {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const float4 v = load_shared_float4(probs_slot(k));
      prob[4 * k] = v.x;
      prob[4 * k + 1] = v.y;
      prob[4 * k + 2] = v.z;
      prob[4 * k + 3] = v.w;
    }
  }

  // This warpgroup's dQ chunks of the step (chunk c goes to warpgroup c % 2), each reduce-added into the
  // accumulator as soon as its product completes (stored, where it is the first write into a deterministic
  // copy: DqTarget::stores). The last wait also completes the step's dV or dK.
  template <int kRole>
  __device__ __forceinline__ void add_dq(const BwdKernelParams& p, const BwdTileWork& work, const char* ds_tile,
                                         int head, int m_block) const {
    const DqTarget target = dq_target<kHeadDim>(p, work, head, m_block);
    float* accum = dq_accum_rows<kHeadDim>(p, work, target.copy, head, m_block);
    Ops::wait_dq_turn(target, kRole);
#pragma unroll
    for (int chunk = kRole; chunk < kCfg.dq_chunks(); chunk += kCfg.consumer_warpgroups) {
      DqSlice dq;
      wgmma_fence();
      Ops::issue_dq(dq, smem, ds_tile, 0, chunk * kDqCols);
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(dq);
      Ops::add_dq_chunk(accum, dq, chunk, target.stores());
    }
    Ops::release_dq_turn(target);
  }

  // Waits for the step's stage, then acc = (K or V) (Q or dO)^T, complete on return.
  __device__ __forceinline__ void score_stage(Scores& acc, const char* keys_tile, const char* query_tile,
                                              const RingPosition<kCfg.stages>& ring) const {
    mbarrier_wait(&bars->stage_full[ring.stage], ring.phase);
    wgmma_fence();
    Ops::issue_scores(acc, keys_tile, 0, query_tile);
    wgmma_commit();
    wgmma_wait<0>();
    pin_registers(acc);
  }

  // acc += values (as A fragments, kept in frag until the product completes) x tile; issued, not waited for.
  __device__ __forceinline__ static void issue_gradient_of(Gradient& acc, const Scores& values, Fragments& frag,
                                                           const char* tile) {
    Ops::to_fragments(values, frag);
    wgmma_fence();
    Ops::issue_gradient(acc, frag, tile);
    wgmma_commit();
  }

  // The end of a step: this role's dQ chunks (whose waits complete the gradient product), then the stage
  // goes back to the producer.
  template <int kRole>
  __device__ __forceinline__ void finish_step(const BwdKernelParams& p, const BwdTileWork& work, const char* ds_tile,
                                              int head, int m_block, Gradient& acc, Fragments& frag,
                                              const RingPosition<kCfg.stages>& ring) const {
    add_dq<kRole>(p, work, ds_tile, head, m_block);
    pin_registers(acc);
    pin_registers(frag);
    Ops::release(&bars->stage_empty[ring.stage]);
  }

  template <bool kSoftcap>
  __device__ void run_probabilities_role(const BwdKernelParams& p, const BwdTileWork& work, Gradient& dv) {
    const char* k_tile = smem + kCfg.k_offset();
    const char* ds_tile = smem + kCfg.ds_offset(0);
    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      for (int i = work.walk_begin; i < work.walk_end; ++i) {
        const int m_block = bwd_walk_block(i);
        const char* q_tile = smem + cfg().q_offset(ring.stage);
        const char* do_tile = smem + cfg().do_offset(ring.stage);
        Scores s;
        score_stage(s, k_tile, q_tile, ring);

        const float* lse = reinterpret_cast<const float*>(smem + cfg().lse_offset(ring.stage));
        const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
        const int key0 = work.n0 + fragment_row();
        const int query0 = m_block * kBlockM;
        const bool masked = work.queries.needs_mask(m_block);
        if constexpr (kSoftcap) {
          if (masked) softcapped_probabilities<true>(s, lse, p, mask, key0, query0);
          else softcapped_probabilities<false>(s, lse, p, mask, key0, query0);
        } else {
          if (masked) Ops::template probabilities<true>(s, lse, p, Ops::mask_runs(mask, key0, query0));
          else Ops::template probabilities<false>(s, lse, p, Ops::kAllVisible);
          publish_probabilities(s);
        }
        named_barrier_arrive(int(BwdBarrierId::kProbsReady), kBwdConsumerThreads);

        Fragments p_frag;
        issue_gradient_of(dv, s, p_frag, do_tile);
        named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);
        finish_step<kProbabilitiesRole>(p, work, ds_tile, head, m_block, dv, p_frag, ring);
        ring.advance();
      }
    }
  }

  __device__ void run_gradients_role(const BwdKernelParams& p, const BwdTileWork& work, Gradient& dk) {
    const char* v_tile = smem + kCfg.v_offset();
    char* ds_tile = smem + kCfg.ds_offset(0);
    for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
      for (int i = work.walk_begin; i < work.walk_end; ++i) {
        const int m_block = bwd_walk_block(i);
        const char* q_tile = smem + cfg().q_offset(ring.stage);
        const char* do_tile = smem + cfg().do_offset(ring.stage);
        Scores dp;
        score_stage(dp, v_tile, do_tile, ring);

        named_barrier_sync(int(BwdBarrierId::kProbsReady), kBwdConsumerThreads);
        {
          Scores prob;
          read_probabilities(prob);
          Ops::score_gradients(dp, prob, reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage)));
        }
        Fragments ds_frag;
        issue_gradient_of(dk, dp, ds_frag, q_tile);
        Ops::template store_ds<true>(ds_tile, ds_frag, 0);
        fence_async_shared();  // the generic-proxy dS stores must be visible to wgmma
        named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);
        finish_step<kGradientsRole>(p, work, ds_tile, head, m_block, dk, ds_frag, ring);
        ring.advance();
      }
    }
  }

  // One tile.
  template <bool kSoftcap>
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    Gradient acc;  // dV for the probabilities role, dK for the gradients role
#pragma unroll
    for (int r = 0; r < kHeadDim / 2; ++r) acc[r] = 0.0f;
    if (work.num_steps() > 0) {
      mbarrier_wait(&bars->kv_full, work.kv_phase);
      if (warpgroup == kProbabilitiesRole) run_probabilities_role<kSoftcap>(p, work, acc);
      else run_gradients_role(p, work, acc);
      // Every product that reads K or V is complete (each step's dQ waits end it): the producer may load
      // the next tile's while this one's dK or dV is written.
      mbarrier_arrive(&bars->kv_empty);
    }
    if (warpgroup == kProbabilitiesRole) Ops::store_key_rows(p.dv, p.dv_strides, p.cols_v, p, work, 0, acc, 1.0f);
    else Ops::store_key_rows(p.dk, p.dk_strides, p.cols, p, work, 0, acc, p.softmax_scale);
  }
};

}  // namespace flash4::sm90
