// The backward consumer split by key columns (head dim 192). The CTA owns block_n = 96 keys and each of
// the two consumer warpgroups 48 of them, as the N (columns) of its products, so that dK and dV of its
// keys fit in its registers transposed (bwd_tile_config.hpp has the budget). Per step (a Q block of 64
// rows, its dO, LSE and D), warpgroup w with keys K_w, V_w:
//
//   S    = Q K_w^T          dP = dO V_w^T                (SS wgmma, 64 queries x 48 keys, issued together)
//   P    = exp2(S scale_log2 - LSE)  -> P^T to shared memory (stmatrix.trans: key rows, as dS^T)
//   dV^T += dO^T P                                       (SS wgmma, three 64-row tiles of the head dim;
//                                                          dO read transposed, P^T rows of this warpgroup)
//   dS   = P (dP - D)       -> dS^T to shared memory      [P, dS x (1 - tanh^2) under softcap]
//   after both warpgroups wrote theirs (kDsReady):
//   dQ chunk = dS K[:, chunk]                            (SS wgmma over all 96 keys, 64-column chunks)
//   dK^T += Q^T dS                                       (SS wgmma, behind the first dQ chunk)
//   each dQ chunk reduce-added into the workspace accumulator from registers.
//
// The three dQ chunks alternate between the warpgroups: at step t warpgroup w takes chunk (w + t) % 2 and,
// when that is 0, chunk 2 too, so over two steps each takes three. Each chunk's columns start on a swizzle
// atom of K (bwd_tile_config.hpp says why the halves of dQ cannot). Only dQ reads the other warpgroup's
// dS^T rows, so the warpgroups meet once per step; P^T is read by the warpgroup's own dV^T only (a
// warpgroup barrier of its own). The softmax scale is applied once at the end (dK here, dQ in the
// postprocess).
#pragma once

#include "kernels/common/mask.hpp"
#include "kernels/common/transposed_rows.hpp"
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
struct BwdKeyColumnsConsumer : BwdConsumerOps<Element, kHeadDim> {
  using Ops = BwdConsumerOps<Element, kHeadDim>;
  using Ops::cfg;
  using Ops::fragment_row;
  using Ops::kBlockM;
  using Ops::kCfg;
  using Ops::kCoreGroupBytes;
  using Ops::kDqCols;
  using Ops::kIsBf16;
  using Ops::kStepsPerBox;
  using Ops::kSwizzle;
  using Ops::lane;
  using Ops::warp_in_group;
  using typename Ops::DqSlice;
  static_assert(kCfg.split == BwdSplit::kKeyColumns, "this consumer gives each warpgroup keys as columns");
  static_assert(kBlockM == 64, "S and dP are one 64-row wgmma tile: the block's queries");
  static_assert(kCfg.dq_chunks() == 3, "the dQ chunk schedule (two for one warpgroup, one for the other)");
  static constexpr int kKeys = kCfg.keys_per_warpgroup();       // the N of S, dP, dK^T, dV^T
  static constexpr int kRowTiles = kCfg.tile_cols() / 64;       // 64-row tiles of dK^T and dV^T
  static_assert(kKeys % 16 == 0, "P^T and dS^T rows go out as pairs of 8-key blocks");
  static_assert(kCfg.probs_bytes() == kCfg.ds_bytes(), "P^T is laid out as dS^T");

  using Mma = WgmmaSS<kKeys, kIsBf16>;
  using Scores = float[kKeys / 2];                    // a 64 query x kKeys accumulator (S, dP)
  using GradientT = float[kRowTiles][kKeys / 2];      // dK^T or dV^T: head_dim x kKeys, as 64-row tiles
  using RowPairs = float[2];                          // a row statistic of the thread's two query rows

  int warpgroup;  // 0 or 1 among the consumers: keys [warpgroup * kKeys, + kKeys) of the block
  char* smem;
  BwdBarriers<kCfg.stages>* bars;
  // Run on over the CTA's tiles, like the producer's.
  RingPosition<kCfg.stages> ring{};
  int step = 0;  // steps run so far: whose turn it is to take two dQ chunks

  __device__ __forceinline__ int probs_barrier() const { return int(BwdBarrierId::kProbsStored) + warpgroup; }

  // acc = A B^T over head_dim, A = 64 rows of a block_m-row tile (Q or dO), B = this warpgroup's kKeys
  // rows of a block_n-row tile (K or V), both K-major in 64-column boxes.
  __device__ __forceinline__ void issue_scores(Scores& acc, const char* query_tile, const char* keys_tile) const {
    const uint64_t a_desc = warp_uniform(make_smem_descriptor(query_tile, 16, kCoreGroupBytes, SmemSwizzle::k128B));
    const uint64_t b_desc = warp_uniform(
        make_smem_descriptor(keys_tile + warpgroup * kKeys * kSwizzle, 16, kCoreGroupBytes, SmemSwizzle::k128B));
#pragma unroll
    for (int k = 0; k < kHeadDim / 16; ++k) {
      const int box = k / kStepsPerBox;
      const uint32_t in_row = (k % kStepsPerBox) * 32;
      Mma::template run<false>(acc, advance_descriptor(a_desc, box * kBlockM * kSwizzle + in_row),
                               advance_descriptor(b_desc, box * kCfg.block_n * kSwizzle + in_row), k > 0);
    }
  }

  // acc (head_dim x kKeys) += tile^T (the block_m-row tile read MN-major, 64 of its columns per row tile)
  // x key_rows^T (this warpgroup's rows of a P^T or dS^T buffer, K-major over the block's queries).
  __device__ __forceinline__ void issue_gradient(GradientT& acc, const char* query_tile, const char* key_rows) const {
    const uint64_t b_desc = warp_uniform(
        make_smem_descriptor(key_rows + warpgroup * kKeys * kSwizzle, 16, kCoreGroupBytes, SmemSwizzle::k128B));
    const uint64_t a_desc =
        warp_uniform(make_smem_descriptor(query_tile, kBlockM * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B));
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
      for (int k = 0; k < kBlockM / 16; ++k) {
        Mma::template run<false, true>(acc[t], advance_descriptor(a_desc, t * kBlockM * kSwizzle + k * 16 * kSwizzle),
                                       advance_descriptor(b_desc, k * 32), 1);
      }
    }
  }

  // The shared address from which this lane's stmatrix.trans writes the warpgroup's key rows of `buffer`
  // (transposed_rows.hpp).
  __device__ __forceinline__ uint32_t transposed_address(const char* buffer) const {
    return smem_address(buffer) + transposed_store_offset(warpgroup * kKeys, warp_in_group(), lane(), kSwizzle);
  }

  // A 64 x kKeys accumulator (times `scale`), as 16-bit pairs, into `buffer` transposed (see above).
  template <class Accumulator>
  __device__ __forceinline__ void store_transposed(const char* buffer, const Accumulator& acc, float scale) const {
    const uint32_t address = transposed_address(buffer);
#pragma unroll
    for (int k = 0; k < kKeys / 8; k += 2) {
      const auto packed = [&](int block, int half) {
        return pack_pair<kIsBf16>(acc[4 * block + 2 * half] * scale, acc[4 * block + 2 * half + 1] * scale);
      };
      // Pair k / 2 of 8-key blocks: 16 rows further.
      store_matrix_x4_trans(address + k * 8 * kSwizzle, packed(k, 0), packed(k, 1), packed(k + 1, 0), packed(k + 1, 1));
    }
  }

  // A stage's LSE or D at the thread's two query rows.
  __device__ __forceinline__ static void load_rows(RowPairs& values, const float* row_values) {
#pragma unroll
    for (int i = 0; i < 2; ++i) values[i] = row_values[fragment_row() + 8 * i];
  }

  // The thread's visible entries of a masked step: for each of its rows a run of its key columns
  // (keys_seen_by_row, fragment_run), as one bit per column 8 k + j at bit 2 k + j.
  __device__ __forceinline__ void visible_columns(uint32_t (&visible)[2], const MaskSpec& mask, int query0,
                                                  int key0) const {
    const int first_column = 2 * (lane() % 4);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const RowSpan span = keys_seen_by_row(mask, query0 + fragment_row() + 8 * i, key0 + first_column,
                                            kKeys - first_column);
      const FragmentRun run = fragment_run(span);
      visible[i] = ((1u << run.end) - 1) & ~((1u << run.begin) - 1);
    }
  }

  // f(index, i, k, j) for every entry of a Scores accumulator: index 4 k + 2 i + j is the thread's query
  // row fragment_row() + 8 i and key column 8 k + 2 (lane % 4) + j.
  template <class F>
  __device__ __forceinline__ static void for_each_entry(const F& f) {
#pragma unroll
    for (int k = 0; k < kKeys / 8; ++k) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) f(4 * k + 2 * i + j, i, k, j);
      }
    }
  }
  __device__ __forceinline__ static bool is_visible(const uint32_t (&visible)[2], int i, int k, int j) {
    return visible[i] >> (2 * k + j) & 1;
  }

  // P = exp2(S scale_log2 - LSE) in place (0 outside the mask when kMasked; padding rows have LSE = +inf).
  template <bool kMasked>
  __device__ __forceinline__ static void probabilities(Scores& s, const RowPairs& lse, const BwdKernelParams& p,
                                                       const uint32_t (&visible)[2]) {
    for_each_entry([&](int index, int i, int k, int j) {
      float prob = ex2_approx(s[index] * p.scale_log2 - lse[i]);
      if (kMasked && !is_visible(visible, i, k, j)) prob = 0.0f;
      s[index] = prob;
    });
  }

  // Softcap: P in place in s and dS in place in dp, the score's tanh feeding both.
  template <bool kMasked>
  __device__ __forceinline__ static void softcapped(Scores& s, Scores& dp, const RowPairs& lse, const RowPairs& dsum,
                                                    const BwdKernelParams& p, const uint32_t (&visible)[2]) {
    for_each_entry([&](int index, int i, int k, int j) {
      const float t = tanh_approx(s[index] * p.softcap_prescale);
      float prob = ex2_approx(t * p.scale_log2 - lse[i]);
      if (kMasked && !is_visible(visible, i, k, j)) prob = 0.0f;
      dp[index] = prob * (dp[index] - dsum[i]) * (1.0f - t * t);
      s[index] = prob;
    });
  }

  // dS = P (dP - D), in place in dp.
  __device__ __forceinline__ static void score_gradients(Scores& dp, const Scores& prob, const RowPairs& dsum) {
    for_each_entry([&](int index, int i, int, int) { dp[index] = prob[index] * (dp[index] - dsum[i]); });
  }

  // P^T into the warpgroup's rows of the P^T buffer, then dV^T += dO^T P issued (not waited for).
  __device__ __forceinline__ void issue_dv(GradientT& dv, const Scores& prob, const char* do_tile,
                                           const char* probs_tile) const {
    store_transposed(probs_tile, prob, 1.0f);
    fence_async_shared();  // the generic-proxy stores must be visible to wgmma
    named_barrier_sync(probs_barrier(), kWarpgroupThreads);
    wgmma_fence();
    issue_gradient(dv, do_tile, probs_tile);
    wgmma_commit();
  }

  // One step: query block m_block of query head `head` against this warpgroup's keys.
  template <bool kSoftcap>
  __device__ __forceinline__ void run_step(const BwdKernelParams& p, const BwdTileWork& work, int head, int m_block,
                                           GradientT& dk, GradientT& dv) {
    // Opaque per step: the K and V descriptors of every k16 step are the same at each step of a tile, and
    // hoisted out of the loop they took more registers than there are (they spilled).
    asm volatile("" : "+l"(smem));
    const char* k_tile = smem + kCfg.k_offset();
    const char* v_tile = smem + kCfg.v_offset();
    const char* q_tile = smem + cfg().q_offset(ring.stage);
    const char* do_tile = smem + cfg().do_offset(ring.stage);
    const char* probs_tile = smem + kCfg.probs_offset();
    const char* ds_tile = smem + cfg().ds_offset(ring.stage % kCfg.ds_buffers());
    const bool masked = work.queries.needs_mask(m_block);
    const MaskSpec mask{work.seqlen_q, work.seqlen_k, p.window_left, p.window_right};

    // Deterministic mode: this CTA's turn to add into the block's accumulator copy, waited for before any
    // product is in flight (a wait inside the step would leave them in flight across its loop).
    const DqTarget target = dq_target<kHeadDim>(p, work, head, m_block);
    Ops::wait_dq_turn(target, warpgroup);

    mbarrier_wait(&bars->stage_full[ring.stage], ring.phase);
    // LSE to registers before the products are issued: loads issued behind their operand reads return
    // only as they finish.
    RowPairs lse;
    RowPairs dsum;
    load_rows(lse, reinterpret_cast<const float*>(smem + cfg().lse_offset(ring.stage)));
    Scores s;
    Scores dp;
    wgmma_fence();
    issue_scores(s, q_tile, k_tile);
    wgmma_commit();
    issue_scores(dp, do_tile, v_tile);
    wgmma_commit();

    // A masked step's visible columns, computed while the products run.
    uint32_t visible[2] = {~0u, ~0u};
    if (masked) visible_columns(visible, mask, m_block * kBlockM, work.n0 + warpgroup * kKeys);
    if constexpr (kSoftcap) {
      // tanh feeds both P and dS: wait for both products, one pass.
      load_rows(dsum, reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage)));
      wgmma_wait<0>();
      pin_registers(s);
      pin_registers(dp);
      if (masked) softcapped<true>(s, dp, lse, dsum, p, visible);
      else softcapped<false>(s, dp, lse, dsum, p, visible);
      issue_dv(dv, s, do_tile, probs_tile);
    } else {
      // The exponentials run while dP is in flight, dS while dV^T is.
      wgmma_wait<1>();
      pin_registers(s);
      if (masked) probabilities<true>(s, lse, p, visible);
      else probabilities<false>(s, lse, p, visible);
      issue_dv(dv, s, do_tile, probs_tile);
      load_rows(dsum, reinterpret_cast<const float*>(smem + cfg().dsum_offset(ring.stage)));
      wgmma_wait<1>();
      pin_registers(dp);
      score_gradients(dp, s, dsum);
    }

    store_transposed(ds_tile, dp, 1.0f);
    fence_async_shared();
    named_barrier_sync(int(BwdBarrierId::kDsReady), kBwdConsumerThreads);

    // The first dQ chunk, then dK^T behind it: the chunk's reduce-adds are issued while dK^T runs.
    const int first_chunk = (warpgroup + step) % 2;
    float* accum = dq_accum_rows<kHeadDim>(p, work, target.copy, head, m_block);
    {
      DqSlice dq;
      wgmma_fence();
      Ops::issue_dq(dq, smem, ds_tile, 0, first_chunk * kDqCols);
      wgmma_commit();
      issue_gradient(dk, q_tile, ds_tile);
      wgmma_commit();
      wgmma_wait<1>();  // dV^T and the dQ chunk
      pin_registers(dv);
      pin_registers(dq);
      Ops::add_dq_chunk(accum, dq, first_chunk, target.stores());
      wgmma_wait<0>();  // dK^T
      pin_registers(dk);
    }
    if (first_chunk == 0) {
      DqSlice dq;
      wgmma_fence();
      Ops::issue_dq(dq, smem, ds_tile, 0, 2 * kDqCols);
      wgmma_commit();
      wgmma_wait<0>();
      pin_registers(dq);
      Ops::add_dq_chunk(accum, dq, 2, target.stores());
    }
    Ops::release_dq_turn(target);
    Ops::release(&bars->stage_empty[ring.stage]);
    ring.advance();
    ++step;
  }

  // dK^T or dV^T (times `scale`) into the rows of the warpgroup's keys, transposed back through its P^T
  // rows (free: every product of the tile is complete), one 64-column tile of the head dim at a time. A
  // warp's stmatrix.trans writes units 2 w and 2 w + 1 of every row (its 16 rows of each row tile) and
  // reads back only those, so the warps need no barrier between them; every lane then stores 16
  // consecutive bytes. Keys past the sequence and columns past `cols` are not written.
  __device__ __forceinline__ void store_gradient(void* base, const TensorStrides& strides, int cols,
                                                 const BwdKernelParams& p, const BwdTileWork& work,
                                                 const GradientT& acc, float scale) const {
    const char* staging = smem + kCfg.probs_offset();
    constexpr int kUnits = 2 * kKeys;  // the warp's 16-byte units: two per key row
    static_assert(kUnits % 32 == 0, "whole rounds of the warp");
    const int64_t batch = p.cu_seqlens_q ? 0 : int64_t(work.batch) * strides.batch;
    Element* head = static_cast<Element*>(base) + batch + int64_t(work.head_kv) * strides.head;
    const uint32_t rows = smem_address(staging) + warpgroup * kKeys * kSwizzle;
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
      store_transposed(staging, acc[t], scale);
      __syncwarp();
#pragma unroll
      for (int round = 0; round < kUnits / 32; ++round) {
        const int unit = round * 32 + lane();
        const int row = unit / 2;
        const int column_unit = 2 * warp_in_group() + unit % 2;
        const int key = work.n0 + warpgroup * kKeys + row;
        const int col = t * 64 + column_unit * 8;
        if (key < work.seqlen_k && col < cols) {
          const uint4 value = load_shared_u128(rows + row * kSwizzle + ((column_unit ^ (row % 8)) * 16));
          *reinterpret_cast<uint4*>(head + (int64_t(work.k_row_base) + key) * strides.seq + col) = value;
        }
      }
      __syncwarp();  // the next row tile overwrites these units
    }
  }

  // One tile.
  template <bool kSoftcap>
  __device__ void run(const BwdKernelParams& p, const BwdTileWork& work) {
    constexpr bool kPersistent = bwd_persistent_kernel(kHeadDim, kSoftcap);
    // Opaque once per tile, as in the split-by-keys consumer: the tiles' shared-memory addresses are then
    // rebuilt per tile instead of hoisted out of the tile loop.
    if constexpr (kPersistent) asm volatile("" : "+l"(smem));
    GradientT dk;
    GradientT dv;
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
      for (int r = 0; r < kKeys / 2; ++r) {
        dk[t][r] = 0.0f;
        dv[t][r] = 0.0f;
      }
      // Made here, after setmaxnreg.inc (see the split-by-keys consumer): left as constants, they would be
      // live across it and kept in local memory.
      pin_registers(dk[t]);
      pin_registers(dv[t]);
    }
    if (work.num_steps() > 0) {
      mbarrier_wait(&bars->kv_full, work.kv_phase);
      static_assert(kCfg.ds_buffers() == kCfg.stages, "dS^T buffers follow the stage ring");
      // Every step ends with all its wgmmas complete: ptxas cannot follow wgmma groups left in flight
      // across a loop back-edge and would serialize every wgmma of the loop.
      for (int head = work.first_head_q; head < work.first_head_q + work.group_size; ++head) {
        for (int i = work.walk_begin; i < work.walk_end; ++i) {
          run_step<kSoftcap>(p, work, head, bwd_walk_block(i), dk, dv);
        }
      }
      // Every product that reads K or V is complete: the producer may load the next tile's.
      mbarrier_arrive(&bars->kv_empty);
    }
    store_gradient(p.dk, p.dk_strides, p.cols, p, work, dk, p.softmax_scale);
    store_gradient(p.dv, p.dv_strides, p.cols_v, p, work, dv, 1.0f);
  }
};

}  // namespace flash4::sm90
