// The backward consumer: each of the two consumer warpgroups owns 64 keys of the CTA's key block and
// keeps their dK and dV accumulators in registers over every query block step. Per step (Q block of 64
// rows, its dO, LSE and D):
//
//   S^T  = K_w Q^T        dP^T = V_w dO^T                 (SS wgmma, both issued together)
//   P^T  = exp2(S^T scale_log2 - LSE)    dS^T = P^T (dP^T - D)   [x (1 - tanh^2) under softcap]
//   dV  += P^T dO         dK  += dS^T Q                   (RS wgmma: P^T and dS^T straight from registers)
//   dS^T -> shared memory; after both warpgroups wrote theirs:
//   dQ[:, half w] = dS K[:, half w]                       (SS wgmma over all 128 keys, dS read transposed)
//   dQ -> fp32 staging -> bulk reduce-add into the workspace accumulator (issued by the writer warp,
//   dq_writer.cuh); the consumers never wait for the adds.
//
// The softmax scale is left out of dS and applied once at the end (dK here, dQ in the postprocess).
#pragma once

#include <type_traits>

#include "kernels/common/bwd_params.hpp"
#include "kernels/common/mask.hpp"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
struct BwdConsumer {
  static constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  // For offsets with a run-time argument (a static constexpr object has no device-side storage).
  __device__ __forceinline__ static constexpr BwdTileConfig cfg() { return bwd_tile_config(kHeadDim); }
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;
  static constexpr int kBlockM = kCfg.block_m;
  static constexpr int kKeys = kCfg.keys_per_warpgroup();
  static constexpr int kDqCols = kCfg.dq_cols_per_warpgroup();
  static constexpr int kSwizzle = kCfg.swizzle_bytes;
  static constexpr uint32_t kCoreGroupBytes = 8 * kSwizzle;  // 8 rows of one swizzle atom
  static constexpr int kStepsPerBox = kSwizzle / 32;         // k16 steps (32 bytes) per swizzle row
  static_assert(kCfg.consumer_warpgroups * kWarpgroupThreads == kBwdConsumerThreads, "named barrier counts");
  static_assert(kBlockM * kElementBytes == kSwizzle, "a dS^T row (block_m queries) must be one swizzle row");

  using MmaScores = WgmmaSS<kBlockM, kIsBf16>;   // S^T, dP^T: 64 keys x 64 queries
  using MmaGrad = WgmmaRS<kHeadDim, kIsBf16>;    // dV, dK: 64 keys x head_dim
  using MmaDq = WgmmaSS<kDqCols, kIsBf16>;       // dQ: 64 queries x head_dim / 2

  int warpgroup;  // 0 or 1 among the consumers
  char* smem;
  BwdBarriers<kCfg.stages>* bars;

  __device__ __forceinline__ static int lane() { return threadIdx.x % 32; }
  __device__ __forceinline__ static int warp_in_group() { return (threadIdx.x / 32) % 4; }
  // This thread's first accumulator row within a 64-row wgmma tile (its second is 8 below).
  __device__ __forceinline__ static int fragment_row() { return warp_in_group() * 16 + lane() / 4; }

  __device__ __forceinline__ static void release(uint64_t* barrier) {
    __syncwarp();
    if (lane() == 0) mbarrier_arrive(barrier);
  }

  // acc (64 rows x 64 cols) = A_rows Bᵀ with A, B K-major tiles of head_dim columns stored as 64-column
  // boxes: A = this warpgroup's 64 rows of a block_n-row tile (K or V), B = a block_m-row tile (Q or dO).
  __device__ __forceinline__ void issue_scores(float (&acc)[kBlockM / 2], const char* keys_tile,
                                               const char* query_tile) const {
    const uint64_t a_desc = make_smem_descriptor(keys_tile + warpgroup * kKeys * kSwizzle, 16, kCoreGroupBytes,
                                                 SmemSwizzle::k128B);
    const uint64_t b_desc = make_smem_descriptor(query_tile, 16, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int box = step / kStepsPerBox;
      const uint32_t in_row = (step % kStepsPerBox) * 32;
      MmaScores::template run<false>(acc, advance_descriptor(a_desc, box * kCfg.block_n * kSwizzle + in_row),
                                     advance_descriptor(b_desc, box * kBlockM * kSwizzle + in_row), step > 0);
    }
  }

  // acc (64 keys x head_dim) += frag (64 keys x 64 queries, registers) * tile (64 queries x head_dim, read
  // MN-major: its rows are the K dimension).
  __device__ __forceinline__ static void issue_gradient(float (&acc)[kHeadDim / 2], const uint32_t (&frag)[kBlockM / 16][4],
                                                        const char* query_tile) {
    const uint64_t desc = make_smem_descriptor(query_tile, kBlockM * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
      MmaGrad::template run<true>(acc, frag[step], advance_descriptor(desc, step * 16 * kSwizzle), 1);
    }
  }

  // dq (64 queries x kDqCols) = dS (read MN-major from the dS^T buffer) * K[:, this warpgroup's columns]
  // (read MN-major: its rows are the K dimension, the block_n keys).
  __device__ __forceinline__ void issue_dq(float (&dq)[kDqCols / 2], const char* ds_tile) const {
    const char* k_cols = smem + kCfg.k_offset() + (warpgroup * kDqCols / kCfg.box_cols()) * kCfg.block_n * kSwizzle +
                         (warpgroup * kDqCols % kCfg.box_cols()) * kElementBytes;
    const uint64_t a_desc =
        make_smem_descriptor(ds_tile, kCfg.block_n * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B);
    const uint64_t b_desc = make_smem_descriptor(k_cols, kCfg.block_n * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kCfg.block_n / 16; ++step) {
      const uint32_t rows = step * 16 * kSwizzle;
      MmaDq::template run<true, true>(dq, advance_descriptor(a_desc, rows), advance_descriptor(b_desc, rows), step > 0);
    }
  }

  // Accumulator (64 x 64, fp32) -> A fragments of a k16 step: rows stay, columns 16 step .. 16 step + 15.
  __device__ __forceinline__ static void to_fragments(const float (&acc)[kBlockM / 2], uint32_t (&frag)[kBlockM / 16][4]) {
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r) frag[step][r] = pack_pair<kIsBf16>(acc[8 * step + 2 * r], acc[8 * step + 2 * r + 1]);
    }
  }

  // Writes this warpgroup's 64 rows of dS^T (bf16 pairs of adjacent queries) into the 128 x 64 buffer,
  // 128-byte rows with the 128-byte swizzle (16-byte chunk index XOR row % 8), as wgmma reads it.
  __device__ __forceinline__ void store_ds(char* ds_tile, const uint32_t (&frag)[kBlockM / 16][4]) const {
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = warpgroup * kKeys + fragment_row() + 8 * (r % 2);
        const int chunk = 2 * step + r / 2;  // 8-query column block
        const int offset = key * kSwizzle + ((chunk ^ (key % 8)) << 4) + 4 * (lane() % 4);
        *reinterpret_cast<uint32_t*>(ds_tile + offset) = frag[step][r];
      }
    }
  }

  // P^T = exp2(S^T scale_log2 - LSE), in place in s; masked entries 0. Padding rows have LSE = +inf and
  // so P = 0 there too.
  template <bool kMasked>
  __device__ __forceinline__ static void probabilities(float (&s)[kBlockM / 2], const float* lse_log2,
                                                       const BwdKernelParams& p, const MaskSpec& mask, int key0,
                                                       int query0) {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const int col = 8 * k + 2 * (lane() % 4);
      const float2 lse = load_shared_float2(lse_log2 + col);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int index = 4 * k + 2 * i + j;
          float prob = ex2_approx(s[index] * p.scale_log2 - (j == 0 ? lse.x : lse.y));
          if constexpr (kMasked) {
            if (!key_visible(mask, query0 + col + j, key0 + 8 * i)) prob = 0.0f;
          }
          s[index] = prob;
        }
      }
    }
  }

  // dS^T = P^T (dP^T - D), in place in dp (zero wherever P is).
  __device__ __forceinline__ static void score_gradients(float (&dp)[kBlockM / 2], const float (&prob)[kBlockM / 2],
                                                         const float* dsum) {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const float2 d = load_shared_float2(dsum + 8 * k + 2 * (lane() % 4));
#pragma unroll
      for (int r = 0; r < 4; ++r) dp[4 * k + r] = prob[4 * k + r] * (dp[4 * k + r] - (r % 2 == 0 ? d.x : d.y));
    }
  }

  // Softcap: the A fragments of P^T and dS^T straight from S^T and dP^T, the score's tanh feeding both
  // (dS picks up the derivative 1 - tanh^2). Packing each pair as soon as it is computed lets s and dp
  // die as the pass goes, which the extra tanh temporaries need.
  template <bool kMasked>
  __device__ __forceinline__ static void softcapped_fragments(const float (&s)[kBlockM / 2], const float (&dp)[kBlockM / 2],
                                                              uint32_t (&p_frag)[kBlockM / 16][4],
                                                              uint32_t (&ds_frag)[kBlockM / 16][4], const float* lse_log2,
                                                              const float* dsum, const BwdKernelParams& p,
                                                              const MaskSpec& mask, int key0, int query0) {
    // The mask as one bit per accumulator entry, computed before the pass: the mask's fields and
    // coordinates then need no registers while the tanh temporaries do.
    static_assert(kBlockM / 2 <= 32, "one visibility bit per accumulator entry");
    uint32_t visible = ~0u;
    if constexpr (kMasked) {
#pragma unroll
      for (int index = 0; index < kBlockM / 2; ++index) {
        const int col = 8 * (index / 4) + 2 * (lane() % 4) + index % 2;
        if (!key_visible(mask, query0 + col, key0 + 8 * (index / 2 % 2))) visible &= ~(1u << index);
      }
    }
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

  // dQ accumulator (rows = queries, this warpgroup's columns) -> the fp32 staging rows.
  __device__ __forceinline__ void stage_dq(const float (&dq)[kDqCols / 2]) const {
    float* staging = reinterpret_cast<float*>(smem + kCfg.dq_offset());
#pragma unroll
    for (int k = 0; k < kDqCols / 8; ++k) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int row = fragment_row() + 8 * i;
        const int col = warpgroup * kDqCols + 8 * k + 2 * (lane() % 4);
        *reinterpret_cast<float2*>(staging + row * kCfg.dq_row_floats() + col) =
            make_float2(dq[4 * k + 2 * i], dq[4 * k + 2 * i + 1]);
      }
    }
  }

  // Stages dQ for the writer warp: waits until the writer's previous reduce-adds have read the buffer,
  // writes this warpgroup's columns, and signals the writer without waiting for it.
  __device__ __forceinline__ void hand_off_dq(const float (&dq)[kDqCols / 2]) const {
    named_barrier_sync(int(BwdBarrierId::kDqEmpty), kBwdDqHandoffThreads);
    stage_dq(dq);
    fence_async_shared();  // the bulk reduce-adds read the staging rows through the async proxy
    named_barrier_arrive(int(BwdBarrierId::kDqFull), kBwdDqHandoffThreads);
  }

  __device__ __forceinline__ void store_gradients(const BwdKernelParams& p, const BwdTileWork& work,
                                                  const float (&dk)[kHeadDim / 2], const float (&dv)[kHeadDim / 2]) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = work.n0 + warpgroup * kKeys + fragment_row() + 8 * i;
      if (key >= work.seqlen_k) continue;
      const int64_t seq_row = int64_t(work.k_row_base) + key;
      const int64_t batch_k = p.cu_seqlens_q ? 0 : int64_t(work.batch) * p.dk_strides.batch;
      const int64_t batch_v = p.cu_seqlens_q ? 0 : int64_t(work.batch) * p.dv_strides.batch;
      Element* dk_row = static_cast<Element*>(p.dk) + batch_k + seq_row * p.dk_strides.seq + int64_t(work.head_kv) * p.dk_strides.head;
      Element* dv_row = static_cast<Element*>(p.dv) + batch_v + seq_row * p.dv_strides.seq + int64_t(work.head_kv) * p.dv_strides.head;
#pragma unroll
      for (int k = 0; k < kHeadDim / 8; ++k) {
        const int col = 8 * k + 2 * (lane() % 4);
        *reinterpret_cast<uint32_t*>(dk_row + col) =
            pack_pair<kIsBf16>(dk[4 * k + 2 * i] * p.softmax_scale, dk[4 * k + 2 * i + 1] * p.softmax_scale);
        *reinterpret_cast<uint32_t*>(dv_row + col) = pack_pair<kIsBf16>(dv[4 * k + 2 * i], dv[4 * k + 2 * i + 1]);
      }
    }
  }

  template <bool kSoftcap>
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    float dk[kHeadDim / 2];
    float dv[kHeadDim / 2];
#pragma unroll
    for (int r = 0; r < kHeadDim / 2; ++r) {
      dk[r] = 0.0f;
      dv[r] = 0.0f;
    }
    if (work.num_steps() > 0) {
      const char* k_tile = smem + kCfg.k_offset();
      const char* v_tile = smem + kCfg.v_offset();
      mbarrier_wait(&bars->kv_full, 0);

      // Two dS buffers alternate like the two stages, so the stage index also picks the dS buffer. (With
      // every dQ product waited for within its step one buffer would be safe too; the second keeps the
      // write of step t+1 independent of that ordering.)
      static_assert(kCfg.stages == 2, "dS is double-buffered in step with the stage ring");
      RingPosition<kCfg.stages> ring;
      // Every step ends with all its wgmmas complete: ptxas cannot follow wgmma groups left in flight
      // across a loop back-edge and would serialize every wgmma of the loop (warning C7514 / C7520).
      for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
        for (int m_block = work.queries.begin; m_block < work.queries.end; ++m_block) {
          const char* q_tile = smem + cfg().q_offset(ring.stage);
          const char* do_tile = smem + cfg().do_offset(ring.stage);
          float s[kBlockM / 2];
          float dp[kBlockM / 2];
          mbarrier_wait(&bars->stage_full[ring.stage], ring.phase);
          wgmma_fence();
          issue_scores(s, k_tile, q_tile);
          wgmma_commit();
          issue_scores(dp, v_tile, do_tile);
          wgmma_commit();

          const float* lse = reinterpret_cast<const float*>(smem + cfg().lse_offset(ring.stage));
          const float* dsum = reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage));
          const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};
          const int key0 = work.n0 + warpgroup * kKeys + fragment_row();
          const int query0 = m_block * kBlockM;
          const bool masked = work.queries.needs_mask(m_block);
          uint32_t p_frag[kBlockM / 16][4];
          uint32_t ds_frag[kBlockM / 16][4];
          if constexpr (kSoftcap) {
            // tanh feeds both P and dS: wait for both products, one pass.
            wgmma_wait<0>();
            pin_registers(s);
            pin_registers(dp);
            if (masked) softcapped_fragments<true>(s, dp, p_frag, ds_frag, lse, dsum, p, mask, key0, query0);
            else softcapped_fragments<false>(s, dp, p_frag, ds_frag, lse, dsum, p, mask, key0, query0);
            wgmma_fence();
            issue_gradient(dv, p_frag, do_tile);
            issue_gradient(dk, ds_frag, q_tile);
            wgmma_commit();
          } else {
            // The exponentials run while dP^T is still in flight, dS^T while dV is.
            wgmma_wait<1>();
            pin_registers(s);
            if (masked) probabilities<true>(s, lse, p, mask, key0, query0);
            else probabilities<false>(s, lse, p, mask, key0, query0);
            to_fragments(s, p_frag);
            wgmma_fence();
            issue_gradient(dv, p_frag, do_tile);
            wgmma_commit();
            wgmma_wait<1>();
            pin_registers(dp);
            score_gradients(dp, s, dsum);
            to_fragments(dp, ds_frag);
            wgmma_fence();
            issue_gradient(dk, ds_frag, q_tile);
            wgmma_commit();
          }

          char* ds_tile = smem + cfg().ds_offset(ring.stage);
          store_ds(ds_tile, ds_frag);
          fence_async_shared();  // the generic-proxy dS stores must be visible to wgmma
          named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);

          // dQ is issued behind dV and dK, which may still run: the tensor cores stay busy across the barrier.
          float dq[kDqCols / 2];
          wgmma_fence();
          issue_dq(dq, ds_tile);
          wgmma_commit();
          wgmma_wait<0>();
          pin_registers(dk);
          pin_registers(dv);
          pin_registers(p_frag);
          pin_registers(ds_frag);
          pin_registers(dq);
          release(&bars->stage_empty[ring.stage]);
          hand_off_dq(dq);

          ring.advance();
        }
      }
    }
    store_gradients(p, work, dk, dv);
  }
};

}  // namespace flash4::sm90
