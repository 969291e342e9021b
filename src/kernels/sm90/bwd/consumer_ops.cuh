// The pieces the backward consumers (consumer.cuh: split by keys, consumer_key_columns.cuh: split by key
// columns, consumer_roles.cuh: split by roles) are built from: the wgmma issues of the five products, the
// accumulator <-> fragment conversions, the softmax-gradient element math and the dK / dV stores. Every
// product is 64 rows (the wgmma M) of one warpgroup; tiles are stored as 64-column boxes with the 128-byte
// swizzle (bwd_tile_config.hpp), and so is dS^T: block_n key rows per box of 64 queries.
#pragma once

#include <type_traits>

#include "kernels/common/mask.hpp"
#include "kernels/sm90/bwd/pipeline.cuh"
#include "kernels/sm90/bwd/tile_work.cuh"
#include "kernels/sm90/ptx/bulk.cuh"
#include "kernels/sm90/ptx/math.cuh"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/red.cuh"
#include "kernels/sm90/ptx/shared.cuh"
#include "kernels/sm90/ptx/sync.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"
#include "launch/bwd_params.hpp"

namespace flash4::sm90 {

template <class Element, int kHeadDim>
struct BwdConsumerOps {
  static constexpr BwdTileConfig kCfg = bwd_tile_config(kHeadDim);
  // For offsets with a run-time argument (a static constexpr object has no device-side storage).
  __device__ __forceinline__ static constexpr BwdTileConfig cfg() { return bwd_tile_config(kHeadDim); }
  static constexpr bool kIsBf16 = !std::is_same_v<Element, __half>;
  static constexpr int kBlockM = kCfg.block_m;
  static constexpr int kDqCols = kCfg.dq_cols_per_warpgroup();
  static constexpr int kSwizzle = kCfg.swizzle_bytes;
  static constexpr uint32_t kCoreGroupBytes = 8 * kSwizzle;  // 8 rows of one swizzle atom
  static constexpr int kStepsPerBox = kSwizzle / 32;         // k16 steps (32 bytes) per swizzle row
  static constexpr int kQueryBoxBytes = kCfg.block_n * kSwizzle;  // one 64-query box of dS^T
  static_assert(kBlockM % kCfg.box_cols() == 0, "dS^T rows are whole 64-query boxes");

  using MmaScores = WgmmaSS<kBlockM, kIsBf16>;   // S^T, dP^T: 64 keys x block_m queries
  using MmaGrad = WgmmaRS<kHeadDim, kIsBf16>;    // dV, dK: 64 keys x head_dim
  using MmaDq = WgmmaSS<kDqCols, kIsBf16>;       // dQ: 64 queries x one warpgroup's columns

  using Scores = float[kBlockM / 2];               // a 64 x block_m accumulator
  using Fragments = uint32_t[kBlockM / 16][4];     // the same as bf16/fp16 A fragments, one per k16 step
  using Gradient = float[kHeadDim / 2];            // a 64 x head_dim accumulator (dK or dV)
  using DqSlice = float[kDqCols / 2];              // a 64 x kDqCols accumulator
  // One mask bit per Scores entry.
  using VisibilityBits = std::conditional_t<(kBlockM / 2 > 32), uint64_t, uint32_t>;

  __device__ __forceinline__ static int lane() { return threadIdx.x % 32; }
  __device__ __forceinline__ static int warp_in_group() { return (threadIdx.x / 32) % 4; }
  // This thread's first accumulator row within a 64-row wgmma tile (its second is 8 below).
  __device__ __forceinline__ static int fragment_row() { return warp_in_group() * 16 + lane() / 4; }
  // threadIdx.x made opaque to the compiler: addresses computed from it are then computed at each use
  // rather than before the tile's loop and kept live across it, where registers are scarce.
  __device__ __forceinline__ static uint32_t opaque_thread_index() {
    uint32_t thread = threadIdx.x;
    asm volatile("" : "+r"(thread));
    return thread;
  }

  // The thread is done with a stage (its wgmmas waited for, its LSE / D loads consumed): one arrival per
  // thread (kBwdStageReleaseArrivals, pipeline.cuh).
  __device__ __forceinline__ static void release(uint64_t* barrier) { mbarrier_arrive(barrier); }

  // acc (64 rows x block_m cols) = A_rows B^T with A, B K-major tiles of head_dim columns stored as 64-column
  // boxes: A = the 64 rows from key_row0 of a block_n-row tile (K or V), B = a block_m-row tile (Q or dO).
  __device__ __forceinline__ static void issue_scores(Scores& acc, const char* keys_tile, int key_row0,
                                                      const char* query_tile) {
    const uint64_t a_desc =
        make_smem_descriptor(keys_tile + key_row0 * kSwizzle, 16, kCoreGroupBytes, SmemSwizzle::k128B);
    const uint64_t b_desc = make_smem_descriptor(query_tile, 16, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      const int box = step / kStepsPerBox;
      const uint32_t in_row = (step % kStepsPerBox) * 32;
      MmaScores::template run<false>(acc, advance_descriptor(a_desc, box * kCfg.block_n * kSwizzle + in_row),
                                     advance_descriptor(b_desc, box * kBlockM * kSwizzle + in_row), step > 0);
    }
  }

  // acc (64 keys x head_dim) += frag (64 keys x block_m queries, registers) * tile (block_m queries x
  // head_dim, read MN-major: its rows are the K dimension).
  __device__ __forceinline__ static void issue_gradient(Gradient& acc, const Fragments& frag, const char* query_tile) {
    const uint64_t desc = make_smem_descriptor(query_tile, kBlockM * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
      MmaGrad::template run<true>(acc, frag[step], advance_descriptor(desc, step * 16 * kSwizzle), 1);
    }
  }

  // dq (64 queries from row0 x kDqCols) = dS (read MN-major from the dS^T buffer) * K[:, col0 ...] (read
  // MN-major: its rows are the K dimension, the block_n keys). row0 is a multiple of 64 (a dS^T box), col0
  // of kDqCols, so the slice never straddles a box boundary it does not start on.
  __device__ __forceinline__ static void issue_dq(DqSlice& dq, const char* smem, const char* ds_tile, int row0,
                                                  int col0) {
    const char* k_cols = smem + kCfg.k_offset() + (col0 / kCfg.box_cols()) * kCfg.block_n * kSwizzle +
                         (col0 % kCfg.box_cols()) * kElementBytes;
    const char* ds_rows = ds_tile + (row0 / kCfg.box_cols()) * kQueryBoxBytes;
    const uint64_t a_desc = make_smem_descriptor(ds_rows, kQueryBoxBytes, kCoreGroupBytes, SmemSwizzle::k128B);
    const uint64_t b_desc = make_smem_descriptor(k_cols, kCfg.block_n * kSwizzle, kCoreGroupBytes, SmemSwizzle::k128B);
#pragma unroll
    for (int step = 0; step < kCfg.block_n / 16; ++step) {
      const uint32_t rows = step * 16 * kSwizzle;
      MmaDq::template run<true, true>(dq, advance_descriptor(a_desc, rows), advance_descriptor(b_desc, rows), step > 0);
    }
  }

  // dQ from registers (split by key columns and by roles, which have no fp32 staging buffer): chunk
  // `chunk` (64 rows x kDqCols, complete in registers) reduce-added into a query block of the accumulator,
  // or stored where this is the first write into a deterministic copy (`store`: DqTarget::stores). The
  // accumulator's order (dq_staging_index) is linear in rows and in columns that are multiples of its
  // 8-column boxes: the thread's address plus a constant per pair. The chunk's boxes are whole (kDqCols is a
  // multiple of the box width), so a chunk known only at run time moves one base address, not each pair's.
  __device__ __forceinline__ static void add_dq_chunk(float* accum, const DqSlice& dq, int chunk, bool store) {
    static_assert(kDqCols % cfg().dq_box_cols() == 0, "a dQ chunk is whole boxes");
    float* thread_accum = accum + chunk * (kDqCols / cfg().dq_box_cols()) * cfg().dq_box_floats() +
                          cfg().dq_staging_index(fragment_row(), 2 * (lane() % 4));
    if (store) {
      write_dq_pairs<true>(thread_accum, dq);
    } else {
      write_dq_pairs<false>(thread_accum, dq);
    }
  }
  template <bool kStore>
  __device__ __forceinline__ static void write_dq_pairs(float* thread_accum, const DqSlice& dq) {
#pragma unroll
    for (int k = 0; k < kDqCols / 8; ++k) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float* pair = thread_accum + cfg().dq_staging_index(8 * i, 8 * k);
        if constexpr (kStore) {
          *reinterpret_cast<float2*>(pair) = make_float2(dq[4 * k + 2 * i], dq[4 * k + 2 * i + 1]);
        } else {
          red_add_f32x2(pair, dq[4 * k + 2 * i], dq[4 * k + 2 * i + 1]);
        }
      }
    }
  }
  // Deterministic mode (a target with a semaphore): the warpgroup waits until it is the CTA's turn to add
  // into the block's copy, and after both warpgroups' reductions one thread passes the turn on.
  __device__ __forceinline__ static void wait_dq_turn(const DqTarget& target, int warpgroup) {
    if (target.semaphore == nullptr) return;
    if (threadIdx.x % kWarpgroupThreads == 0) spin_until_acquire_gpu(target.semaphore, target.turn);
    named_barrier_sync(int(BwdBarrierId::kDqTurn) + warpgroup, kWarpgroupThreads);
  }
  __device__ __forceinline__ static void release_dq_turn(const DqTarget& target) {
    if (target.semaphore == nullptr) return;
    __threadfence();  // this thread's reductions before the release below, through the barrier
    named_barrier_sync(int(BwdBarrierId::kDqAdded), kBwdConsumerThreads);
    if (threadIdx.x % kBwdConsumerThreads == 0) store_release_gpu(target.semaphore, target.turn + 1);
  }

  // Accumulator (64 x block_m, fp32) -> A fragments of a k16 step: rows stay, columns 16 step .. 16 step + 15.
  __device__ __forceinline__ static void to_fragments(const Scores& acc, Fragments& frag) {
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
#pragma unroll
      for (int r = 0; r < 4; ++r) frag[step][r] = pack_pair<kIsBf16>(acc[8 * step + 2 * r], acc[8 * step + 2 * r + 1]);
    }
  }

  // Writes 64 rows of dS^T (bf16 pairs of adjacent queries) from key_row0 (a multiple of 16) into the
  // block_n x block_m buffer: per 64-query box, 128-byte rows with the 128-byte swizzle (16-byte chunk
  // index XOR row % 8), as wgmma reads it. A k16 step's four fragment registers are four 8 x 8 matrices
  // (register r: row half r % 2, 8-query chunk r / 2 of the step) in stmatrix's register layout, so one
  // stmatrix.x4 per step stores them: a quarter of the instructions of 32-bit stores, which wait in the
  // same memory-instruction queue as the dQ staging behind the products' operand reads. Lane l gives the
  // address of row l % 8 of matrix l / 8. Its rows' swizzle phase is l % 8, and bits 4..6 of a row's
  // address are zero before the chunk is added (the buffer is 1 KiB aligned, rows are 128 bytes), so each
  // address is (row address + chunk offset) XOR phase. kOpaqueThread: the lane's address comes from
  // opaque_thread_index(), so it is computed at each call rather than kept live across the tile's loop.
  // Which of the two fits differs by kernel (block_m = 128: without softcap the hoisted address
  // spilled, with softcap the recomputed one); -Xptxas -v shows no spill with the callers' choice.
  template <bool kOpaqueThread>
  __device__ __forceinline__ static void store_ds(char* ds_tile, const Fragments& frag, int key_row0) {
    constexpr int kChunksPerBox = kSwizzle / 16;
    static_assert(kChunksPerBox % 2 == 0, "a step's two chunks lie in one box");
    const uint32_t thread = kOpaqueThread ? opaque_thread_index() : threadIdx.x;
    const int lane = int(thread % 32);
    const int matrix = lane / 8;
    const int row = key_row0 + int(thread / 32 % 4) * 16 + 8 * (matrix % 2) + lane % 8;
    // The lane's row, and its chunk of the step's two (8-query column blocks 2 step + matrix / 2).
    const uint32_t lane_address = smem_address(ds_tile) + row * kSwizzle + (matrix / 2) * 16;
    // row % 8 in bits 4..6, taken from the address's bits 7..9 so that only the address stays live.
    const uint32_t phase = (lane_address >> 3) & (7u << 4);
#pragma unroll
    for (int step = 0; step < kBlockM / 16; ++step) {
      const int chunk = 2 * step;
      const uint32_t offset = (chunk / kChunksPerBox) * kQueryBoxBytes + (chunk % kChunksPerBox) * 16;
      store_matrix_x4((lane_address + offset) ^ phase, frag[step][0], frag[step][1], frag[step][2], frag[step][3]);
    }
  }

  // A stage's LSE or D at this thread's accumulator columns of column block k (8 k + 2 (lane % 4), and the
  // next): read from shared memory at its use, or taken from registers loaded earlier (RowStats; the
  // split-by-keys consumer says when, consumer.cuh). A load's latency is long while the tensor cores
  // stream their operands from shared memory.
  using RowStats = float2[kBlockM / 8];
  __device__ __forceinline__ static void load_row_stats(RowStats& stats, const float* row_values) {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) stats[k] = row_stat(row_values, k);
  }
  __device__ __forceinline__ static float2 row_stat(const float* row_values, int k) {
    return load_shared_float2(row_values + 8 * k + 2 * (lane() % 4));
  }
  __device__ __forceinline__ static float2 row_stat(const RowStats& stats, int k) { return stats[k]; }

  // A masked step's mask as this thread's two runs of visible entries (one per key: key0 and key0 + 8,
  // entry 4 k + 2 i + j being query query0 + 8 k + 2 (lane % 4) + j and key key0 + 8 i; see fragment_run),
  // their four bounds (at most kBlockM / 4) packed into one register. The split-by-keys softcap pass
  // (BwdConsumer::softcapped_fragments) takes it from before the step's products are issued, when S^T and
  // dP^T take no registers, and expands it into bits at its use; the other passes build it after the wait
  // for S^T, just before the exponentials (at block_m = 128 in a copy of the step for masked steps,
  // BwdConsumer::kSplitMaskedSteps). The window evaluated per entry instead took several instructions per
  // entry and made a masked step cost about two unmasked ones (docs/experiments.md, "mask runs").
  using MaskRuns = uint32_t;
  static constexpr int kRunBoundBits = 8;
  static_assert(kBlockM / 4 < (1 << kRunBoundBits), "a run bound fits its field");
  __device__ __forceinline__ static MaskRuns mask_runs(const MaskSpec& mask, int key0, int query0) {
    MaskRuns runs = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const FragmentRun run = fragment_run(rows_seeing_key(mask, key0 + 8 * i, query0 + 2 * (lane() % 4), kBlockM));
      runs |= MaskRuns(run.begin) << (2 * i * kRunBoundBits) | MaskRuns(run.end) << ((2 * i + 1) * kRunBoundBits);
    }
    return runs;
  }
  static constexpr MaskRuns kAllVisible =
      MaskRuns(kBlockM / 4) << kRunBoundBits | MaskRuns(kBlockM / 4) << (3 * kRunBoundBits);

  // The mask as one bit per accumulator entry: entry 4 k + 2 i + j is visibility_bit(k, i, j), so that each
  // key's run is one run of bits.
  static constexpr int visibility_bit(int k, int i, int j) { return i * (kBlockM / 4) + 2 * k + j; }
  __device__ __forceinline__ static VisibilityBits visibility_bits(MaskRuns runs) {
    VisibilityBits visible = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int begin = runs >> (2 * i * kRunBoundBits) & ((1u << kRunBoundBits) - 1);
      const int end = runs >> ((2 * i + 1) * kRunBoundBits) & ((1u << kRunBoundBits) - 1);
      visible |= VisibilityBits((1ull << end) - (1ull << begin)) << visibility_bit(0, i, 0);
    }
    return visible;
  }
  __device__ __forceinline__ static bool is_visible(VisibilityBits visible, int k, int i, int j) {
    return visible >> visibility_bit(k, i, j) & 1;
  }

  // P^T = exp2(S^T scale_log2 - LSE), in place in s; masked entries (outside `runs`, read only when
  // kMasked) 0. Padding rows have LSE = +inf and so P = 0 there too.
  template <bool kMasked, class Stats>
  __device__ __forceinline__ static void probabilities(Scores& s, const Stats& lse_log2, const BwdKernelParams& p,
                                                       MaskRuns runs) {
    const VisibilityBits visible = kMasked ? visibility_bits(runs) : ~VisibilityBits(0);
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const float2 lse = row_stat(lse_log2, k);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int index = 4 * k + 2 * i + j;
          float prob = ex2_approx(s[index] * p.scale_log2 - (j == 0 ? lse.x : lse.y));
          if constexpr (kMasked) {
            if (!is_visible(visible, k, i, j)) prob = 0.0f;
          }
          s[index] = prob;
        }
      }
    }
  }

  // dS^T = P^T (dP^T - D), in place in dp (zero wherever P is).
  template <class Stats>
  __device__ __forceinline__ static void score_gradients(Scores& dp, const Scores& prob, const Stats& dsum) {
#pragma unroll
    for (int k = 0; k < kBlockM / 8; ++k) {
      const float2 d = row_stat(dsum, k);
#pragma unroll
      for (int r = 0; r < 4; ++r) dp[4 * k + r] = prob[4 * k + r] * (dp[4 * k + r] - (r % 2 == 0 ? d.x : d.y));
    }
  }

  // The packed pair of accumulator entries (index, index + 1) times `scale`, as the stores write them.
  __device__ __forceinline__ static uint32_t scaled_pair(const Gradient& acc, int index, float scale) {
    return pack_pair<kIsBf16>(acc[index] * scale, acc[index + 1] * scale);
  }

  // store_key_rows (below) through shared memory: `staging` is 64 rows of kSwizzle bytes (one 64-column
  // box) that no other warp reads or writes meanwhile, each warp using the 16 rows of its own fragments.
  // Per 64-column chunk, stmatrix puts the warp's packed pairs there (16-byte units XOR-swizzled by row,
  // so the eight rows of a matrix fall in distinct banks) and every lane reads back 16 consecutive bytes
  // of a row: each global store instruction then writes four whole 128-byte rows of the chunk, where the
  // direct stores write 16 bytes of each of 8 rows and take four times as many instructions (on short
  // sequences, where a tile has few steps, those stores and the loads queued behind them were a large
  // share of the consumers' stalls).
  // Only the tensor's first `cols` columns (its true head dim, a multiple of 8: whole 16-byte units) are
  // written; a wider kernel's columns past them stay in registers.
  __device__ __forceinline__ static void store_key_rows_staged(void* base, const TensorStrides& strides, int cols,
                                                               const BwdKernelParams& p, const BwdTileWork& work,
                                                               int key_row0, const Gradient& acc, float scale,
                                                               char* staging) {
    constexpr int kRowBytes = kSwizzle;
    constexpr int kUnitsPerRow = kRowBytes / 16;            // 16-byte units of a staged row
    constexpr int kWarpRows = 16;                           // a warp's accumulator rows
    constexpr int kBlocksPerChunk = kCfg.box_cols() / 8;    // 8-column fragment blocks of a chunk
    constexpr int kBlocks = kHeadDim / 8;
    constexpr int kChunks = (kBlocks + kBlocksPerChunk - 1) / kBlocksPerChunk;
    constexpr int kReadRounds = kWarpRows * kUnitsPerRow / 32;
    static_assert(kBlocks % 2 == 0, "stmatrix.x4 takes two fragment blocks");
    // Opaque here: otherwise the addresses below stay live across the tile's loop, where the D = 128
    // consumers have no registers left.
    const uint32_t thread = opaque_thread_index();
    const int lane = int(thread % 32);
    const int warp = int(thread / 32 % 4);
    const uint32_t warp_rows = smem_address(staging) + warp * kWarpRows * kRowBytes;
    // stmatrix: lane l addresses row l % 8 of matrix l / 8 = (row half (l / 8) % 2, block pair member l / 16).
    const int store_row = 8 * (lane / 8 % 2) + lane % 8;
    const uint32_t store_address = warp_rows + store_row * kRowBytes + ((lane / 16) ^ (store_row % 8)) * 16;
    const int64_t batch = p.cu_seqlens_q ? 0 : int64_t(work.batch) * strides.batch;
    Element* head = static_cast<Element*>(base) + batch + int64_t(work.head_kv) * strides.head;
    const int first_key = work.n0 + key_row0 + warp * kWarpRows;
#pragma unroll
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      const int first_block = chunk * kBlocksPerChunk;
      const int blocks = kBlocks - first_block < kBlocksPerChunk ? kBlocks - first_block : kBlocksPerChunk;
#pragma unroll
      for (int b = 0; b < blocks; b += 2) {
        const int k = first_block + b;
        const auto packed = [&](int block, int half) { return scaled_pair(acc, 4 * block + 2 * half, scale); };
        // The pair's units are b and b + 1 of the row: XOR-ing the even b into the lane's address moves it.
        store_matrix_x4(store_address ^ uint32_t(b * 16), packed(k, 0), packed(k, 1), packed(k + 1, 0), packed(k + 1, 1));
      }
      __syncwarp();
#pragma unroll
      for (int round = 0; round < kReadRounds; ++round) {
        const int row = round * (32 / kUnitsPerRow) + lane / kUnitsPerRow;
        const int unit = lane % kUnitsPerRow;
        const int key = first_key + row;
        if (unit < blocks && key < work.seqlen_k && (first_block + unit) * 8 < cols) {
          const uint4 value = load_shared_u128(warp_rows + row * kRowBytes + (unit ^ (row % 8)) * 16);
          Element* out = head + (int64_t(work.k_row_base) + key) * strides.seq + (first_block + unit) * 8;
          *reinterpret_cast<uint4*>(out) = value;
        }
      }
      __syncwarp();  // the next chunk overwrites these rows
    }
  }

  // One 64 x head_dim accumulator (dK or dV) times `scale` into the rows of the keys from key_row0 of the
  // CTA's block; rows past the sequence and columns past `cols` (as above) are not written.
  __device__ __forceinline__ static void store_key_rows(void* base, const TensorStrides& strides, int cols,
                                                        const BwdKernelParams& p,
                                                        const BwdTileWork& work, int key_row0, const Gradient& acc,
                                                        float scale) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = work.n0 + key_row0 + fragment_row() + 8 * i;
      if (key >= work.seqlen_k) continue;
      const int64_t seq_row = int64_t(work.k_row_base) + key;
      const int64_t batch = p.cu_seqlens_q ? 0 : int64_t(work.batch) * strides.batch;
      Element* row = static_cast<Element*>(base) + batch + seq_row * strides.seq + int64_t(work.head_kv) * strides.head;
#pragma unroll
      for (int k = 0; k < kHeadDim / 8; ++k) {
        const int col = 8 * k + 2 * (lane() % 4);
        if (col >= cols) break;
        *reinterpret_cast<uint32_t*>(row + col) = scaled_pair(acc, 4 * k + 2 * i, scale);
      }
    }
  }
};

}  // namespace flash4::sm90
