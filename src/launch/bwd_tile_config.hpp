// The backward kernel's tile shape, shared-memory layout and workspace layout. Host (planner, workspace
// size) and device (kernel) read the same constants.
//
// Three ways to share a CTA's work between its two consumer warpgroups, picked by head dim (BwdSplit):
//  - split by keys (D <= 128): the CTA owns block_n = 128 keys; each warpgroup holds the dK and dV
//    accumulators of its 64 keys (2 x head_dim / 2 registers per thread) and computes S^T, dP^T, dS^T
//    for them;
//  - split by key columns (D = 192): the CTA owns block_n = 96 keys, each warpgroup 48 of them as the N of
//    its products. With the keys as rows (the wgmma M, 64 per warpgroup) dK + dV would take 192 registers
//    beside S^T and dP^T (32 each): 256, over the 240 a consumer thread has. With the keys as columns a
//    warpgroup computes S = Q K_w^T and dP = dO V_w^T (64 queries x 48 keys: 24 registers each) and
//    accumulates dK^T and dV^T (192 x 48: three 64-row tiles, 72 registers each), P^T and dS^T going
//    through shared memory as the B operand (a product's M must be 64 rows of an operand in shared memory
//    or registers; P^T dO has the keys as M, dO^T P the head dim). Per thread: dK^T + dV^T 144, S + dP 48,
//    the step's dQ chunk 32 (after S and dP are dead), LSE / D 4: about 200 with addresses, under 240.
//    dQ = dS K (64 x 192 over 96 keys) is computed in 64-column chunks (the B operand K is read MN-major,
//    and a slice starting inside a 128-byte swizzle atom cannot be, so not as two 96-column halves): three
//    chunks per step, the warpgroups alternating which one takes two; each is reduce-added from
//    registers (no fp32 staging buffer fits beside two stages, see bwd_tile_config);
//  - split by roles (D = 256): 64 x head_dim accumulators take head_dim / 2 registers per thread,
//    so the pair cannot both live in one warpgroup. The CTA owns block_n = 64 keys; warpgroup 0 computes
//    S^T -> P^T and holds dV, warpgroup 1 computes dP^T -> dS^T and holds dK, P crossing through shared
//    memory; dQ is split into 64-column chunks between them.
// Whichever the split, the loop runs over query blocks of block_m rows (and, under GQA, over every query
// head of the group, so dK/dV are summed in registers). block_m is 64, the N of S^T = K Q^T (the M of S = Q
// K^T split by key columns), so that S^T and dP^T take 32 registers each (S and dP 24 split by key columns)
// beside dK and dV, except at D = 64: there dK + dV take only 64 registers and block_m = 128 fits. The
// wider step matters there because each step's fixed latency (the barriers, the dQ hand-off, the wait for
// the first product) is spread over half as many flops as at D = 128, and because shared memory bandwidth,
// not the tensor cores, bounds the SS products: m64n64k16 reads 4 KiB of operands per 32 tensor cycles, 128
// B/cycle, the whole of shared memory's bandwidth, where m64n128k16 reads 96 B/cycle; and dQ is then split
// between the warpgroups by rows at N = 64 instead of by columns at N = 32 (192 B/cycle).
#pragma once

#include "kernels/common/host_device.hpp"
#include "kernels/common/mask.hpp"
#include "launch/fwd_tile_config.hpp"

namespace flash4 {

enum class BwdSplit { kKeys, kKeyColumns, kRoles };

inline constexpr int kDqBoxBytes = 32;  // row width of a dQ staging box: one L2 sector
// The end of the backward's shared memory: its mbarriers and each role's copy of its current tile's work
// (kernels/sm90/bwd/kernel.cuh).
inline constexpr int kBwdSmemControlBytes = 1024;

struct BwdTileConfig {
  int head_dim;
  BwdSplit split = BwdSplit::kKeys;
  int block_m = 64;   // query rows per step: the N of S^T = K Q^T (see above)
  int block_n = 128;  // keys per CTA: 64 per consumer warpgroup (the wgmma M) when split by keys, 48 (the N)
                      // when split by key columns
  int stages = 2;     // Q / dO / LSE / D stages in flight
  int consumer_warpgroups = 2;
  // 128-byte swizzle: a 64-column box of a 16-bit tile is exactly one swizzle row.
  int swizzle_bytes = 128;

  FLASH4_HD constexpr int box_cols() const { return swizzle_bytes / kElementBytes; }
  // Columns of a tile in shared memory: head_dim rounded up to whole 64-column boxes. At D = 96 the
  // second box's last 32 columns lie past the tensor and TMA fills them with zeros; the products over
  // head_dim never read them, dQ's second half multiplies them (zero) and is not staged.
  FLASH4_HD constexpr int tile_cols() const { return (head_dim + box_cols() - 1) / box_cols() * box_cols(); }
  FLASH4_HD constexpr int col_blocks() const { return tile_cols() / box_cols(); }
  FLASH4_HD constexpr int keys_per_warpgroup() const {
    return split == BwdSplit::kRoles ? block_n : block_n / consumer_warpgroups;
  }
  // 64-query boxes of a block: a dS^T row (block_m queries) spans this many swizzle rows.
  FLASH4_HD constexpr int query_boxes() const { return block_m / box_cols(); }
  // Split by keys, dQ = dS K (block_m x tile_cols, over all block_n keys) is cut into one 64-row (the wgmma
  // M) by dq_cols_per_warpgroup() slice per warpgroup: by rows when block_m = 128, else by columns. Split
  // by key columns or roles, the warpgroups take turns over 64-column chunks of the block's 64 rows.
  FLASH4_HD constexpr int dq_row_slices() const { return split == BwdSplit::kKeys ? query_boxes() : 1; }
  FLASH4_HD constexpr int dq_cols_per_warpgroup() const {
    return split == BwdSplit::kKeys ? tile_cols() * dq_row_slices() / consumer_warpgroups : box_cols();
  }
  FLASH4_HD constexpr int dq_chunks() const { return tile_cols() / dq_cols_per_warpgroup(); }
  // Split by keys: the first row and column of warpgroup w's dQ slice.
  FLASH4_HD constexpr int dq_row0(int warpgroup) const { return warpgroup % dq_row_slices() * box_cols(); }
  FLASH4_HD constexpr int dq_col0(int warpgroup) const { return warpgroup / dq_row_slices() * dq_cols_per_warpgroup(); }

  FLASH4_HD constexpr int kv_bytes() const { return block_n * tile_cols() * kElementBytes; }   // K or V
  FLASH4_HD constexpr int q_bytes() const { return block_m * tile_cols() * kElementBytes; }    // Q or dO
  FLASH4_HD constexpr int row_stat_bytes() const { return block_m * int(sizeof(float)); }      // LSE or D
  FLASH4_HD constexpr int stage_bytes() const { return 2 * q_bytes() + 2 * row_stat_bytes(); }  // TMA bytes
  FLASH4_HD constexpr int stage_stride() const { return round_up_to_alignment(stage_bytes()); }
  FLASH4_HD constexpr int ds_bytes() const { return block_n * block_m * kElementBytes; }
  // Split by keys or key columns, two dS^T buffers alternate with the stages: a warpgroup may store step
  // t + 1's dS^T while the other one's dQ product of step t still reads step t's. Split by roles one
  // suffices (the warpgroups' barriers order every write after the previous step's reads).
  FLASH4_HD constexpr int ds_buffers() const { return split == BwdSplit::kRoles ? 1 : 2; }
  // Split by roles: P (fp32, in warpgroup 0's accumulator order) handed to warpgroup 1 for dS. Split by key
  // columns: P^T (16-bit, laid out as dS^T), each warpgroup's rows the B operand of its own dV^T product
  // only, so one buffer (a warpgroup writes its rows again only after its dV^T product has completed).
  FLASH4_HD constexpr int probs_bytes() const {
    return split == BwdSplit::kRoles        ? block_n * block_m * int(sizeof(float))
           : split == BwdSplit::kKeyColumns ? ds_bytes()
                                            : 0;
  }
  // fp32 dQ staging (split by keys only: otherwise dQ is reduce-added from registers): the block_m x
  // head_dim partial as boxes of 8 columns, 32 bytes (one L2 sector) per row, unswizzled. A warp's float2
  // stores (8 consecutive rows x 4 lanes) then cover 256 contiguous bytes, the minimum two wavefronts, and
  // each thread's 16 addresses are one base plus constants (a 128-byte swizzle would XOR a different
  // pattern into every column block, costing registers the D = 128 consumers do not have).
  // The workspace's dQ accumulator keeps every query block in this order too: the block_m x head_dim floats
  // from the block's first row (BwdWorkspaceRows; each block's rows are contiguous) hold element (row,
  // col) of the block at dq_staging_index(row, col). The dQ writer then adds the whole staged partial
  // with one contiguous bulk reduce-add of whole L2 lines, where 8-column TMA boxes would send a 32-byte
  // request per row (slower: docs/experiments.md, "bulk dQ reduce-add"). The postprocess reads the accumulator in
  // this order.
  FLASH4_HD constexpr int dq_box_cols() const { return kDqBoxBytes / int(sizeof(float)); }
  FLASH4_HD constexpr int dq_box_floats() const { return block_m * dq_box_cols(); }
  FLASH4_HD constexpr int dq_buffer_bytes() const {
    return split == BwdSplit::kKeys ? block_m * head_dim * int(sizeof(float)) : 0;
  }
  // The float index of dQ element (row, col) in the staging boxes, and in a query block's accumulator.
  FLASH4_HD constexpr int dq_staging_index(int row, int col) const {
    return (col / dq_box_cols()) * dq_box_floats() + row * dq_box_cols() + col % dq_box_cols();
  }

  // Layout (offsets from the 1 KiB-aligned base): K, V, the Q/dO/LSE/D stages, the dS^T buffers, P or
  // the dQ staging, barriers. Every tile that wgmma or TMA reads with a swizzle starts on a 1 KiB boundary.
  FLASH4_HD constexpr int k_offset() const { return 0; }
  FLASH4_HD constexpr int v_offset() const { return k_offset() + kv_bytes(); }
  FLASH4_HD constexpr int stage_offset(int stage) const { return v_offset() + kv_bytes() + stage * stage_stride(); }
  FLASH4_HD constexpr int q_offset(int stage) const { return stage_offset(stage); }
  FLASH4_HD constexpr int do_offset(int stage) const { return stage_offset(stage) + q_bytes(); }
  FLASH4_HD constexpr int lse_offset(int stage) const { return stage_offset(stage) + 2 * q_bytes(); }
  FLASH4_HD constexpr int dsum_offset(int stage) const { return lse_offset(stage) + row_stat_bytes(); }
  FLASH4_HD constexpr int ds_offset(int buffer) const {
    return round_up_to_alignment(stage_offset(stages)) + buffer * ds_bytes();
  }
  FLASH4_HD constexpr int probs_offset() const { return ds_offset(ds_buffers()); }
  FLASH4_HD constexpr int dq_offset() const { return probs_offset() + probs_bytes(); }
  FLASH4_HD constexpr int barrier_offset() const { return dq_offset() + dq_buffer_bytes(); }
  FLASH4_HD constexpr int smem_bytes() const { return kSmemAlignment + barrier_offset() + kBwdSmemControlBytes; }
  FLASH4_HD constexpr int threads() const { return (1 + consumer_warpgroups) * kWarpgroupThreads; }

  FLASH4_HD static constexpr int round_up_to_alignment(int bytes) {
    return (bytes + kSmemAlignment - 1) / kSmemAlignment * kSmemAlignment;
  }
};

// Deterministic mode: the dQ accumulator is split into copies that the postprocess sums in a fixed
// order; key block n adds into copy n % copies, in turn with the other key blocks of that copy. The turns
// form a chain per (query block, copy), and each link costs the latency of an add landing plus a release /
// acquire whenever the key block next in turn reaches the query block no later than its predecessor. Four
// copies cut the chains by four, for four times the accumulator's memory (and its reads in the
// postprocess).
inline constexpr int kBwdDeterministicDqCopies = 4;

// The copies a backward uses: one unless deterministic, and no more than it has key blocks.
FLASH4_HD constexpr int bwd_dq_copies(bool deterministic, int n_blocks) {
  if (!deterministic || n_blocks < 1) return 1;
  return n_blocks < kBwdDeterministicDqCopies ? n_blocks : kBwdDeterministicDqCopies;
}

// The order of the work, which the dQ turns are built around. Outside deterministic mode the tiles of a
// (sequence, kv head) start from key block 0, the longest under bottom-right causal masking, and each walks
// its query blocks from the last down: the key blocks of a head running at once then share the query block
// they work on (its Q / dO tiles stay in L2) and the longest tiles do not trail at the end.
// In deterministic mode the tiles of a head start from the highest key block (shortest first), each walks
// its query blocks upward from its first, and the adds into a copy of a query block go from the highest key
// block down. Under a causal mask (a bounded right edge) a tile then reaches each query block it shares
// with a lower key block, whose first query block comes earlier, before that block does when both start
// together, so its turn has passed before the successor arrives: those links cost no waits. Key blocks with
// the same first query block (no mask, or an unbounded right edge) still reach each block together, and
// each link waits for one landing. The opposite order, longest first with the downward walk, has every key
// block of a causal head reach a query block at the same step, and under GQA the lower key blocks, which
// have more steps per query head, fall further behind the ones waiting for them with every head.
FLASH4_HD constexpr int bwd_key_block_of(int index_in_head, int n_blocks, bool deterministic) {
  return deterministic ? n_blocks - 1 - index_in_head : index_in_head;
}
// A tile's walk over the query blocks of each query head, as a signed range [walk_begin, walk_end) counted
// up: the query block at index i is |i|, and the walk down runs over negated blocks. Both directions then
// cost a loop the two registers of a plain one (a block, a step count and a stride spilled where registers
// are tightest).
FLASH4_HD constexpr int bwd_walk_begin(const QueryBlockRange& queries, bool deterministic) {
  return deterministic ? queries.begin : 1 - queries.end;
}
FLASH4_HD constexpr int bwd_walk_end(const QueryBlockRange& queries, bool deterministic) {
  return deterministic ? queries.end : 1 - queries.begin;
}
FLASH4_HD constexpr int bwd_walk_block(int index) { return index < 0 ? -index : index; }

// The copy key block n_block adds into, and its turn among that copy's contributors to a query block whose
// contributing key blocks end (exclusive) at contributors_end: the contributors of copy c are the key blocks
// below it with n % copies == c, taking their turns from the highest down; the highest is less than
// `copies` below contributors_end. Every contributor's turns are those of tiles claimed before it (lower
// tile indices): running CTAs claim tiles in increasing order and run their claims in order, so the lowest
// unfinished tile always runs and waits on none, and the turns cannot deadlock whether or not every CTA of
// the grid is resident.
struct BwdDqOrder {
  int copy;
  int turn;
};
FLASH4_HD constexpr BwdDqOrder bwd_dq_order(int n_block, int contributors_end, int copies) {
  return BwdDqOrder{n_block % copies, (contributors_end - 1 - n_block) / copies};
}

// Whether copy `copy` of a query block's accumulator has a contributor among the key blocks [begin, end):
// one with n % copies == copy. In deterministic mode nothing zeroes the copies: the contributor whose turn
// is 0 stores its partial and the later ones add to it, so the postprocess sums only the copies with a
// contributor (none: dQ is 0). Zeroing every copy cost as many bytes as the postprocess reads, at every
// length.
FLASH4_HD constexpr bool bwd_dq_copy_written(int copy, int begin, int end, int copies) {
  if (end <= begin) return false;
  const int first = begin + ((copy - begin % copies) % copies + copies) % copies;  // lowest n >= begin in copy
  return first < end;
}

// Head dims with a backward kernel: every head dim the forward has.
FLASH4_HD constexpr bool bwd_supports_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 192 || head_dim == 256;
}

// Split by keys while the dK + dV accumulators of 64 keys (head_dim registers per thread) leave room for
// S^T, dP^T and the dQ slice: up to 128.
// At 192 split by key columns over 96 keys (the top of this file has the registers). Shared memory: K + V
// 72 KiB, two stages of Q + dO + LSE + D 98 KiB, two dS^T buffers 24 KiB, P^T 12 KiB: 206 KiB of the 227.
// A fp32 dQ staging buffer (48 KiB) does not fit beside them, so dQ is reduce-added from registers; 96 is
// the widest key block whose K + V leave room for two stages (128 would take 96 KiB). Wider key blocks
// halve the Q / dO loads and dQ adds per key against 64.
// At 256 split by roles over 64 keys: K + V (64 KiB), two stages of Q + dO (130 KiB), dS^T (8 KiB) and P
// (16 KiB) take 218 KiB; by key columns, dK^T + dV^T of 48 keys would take 192 registers.
FLASH4_HD constexpr BwdTileConfig bwd_tile_config(int head_dim) {
  BwdTileConfig cfg{};
  cfg.head_dim = head_dim;
  if (head_dim > 128 && head_dim <= 192) {
    cfg.split = BwdSplit::kKeyColumns;
    cfg.block_n = 96;
  } else if (head_dim > 192) {
    cfg.split = BwdSplit::kRoles;
    cfg.block_n = 64;
  }
  if (head_dim <= 64) cfg.block_m = 128;
  return cfg;
}

// Whether a backward kernel runs a persistent grid (kernels/sm90/bwd/kernel.cuh) or one CTA per tile: the
// softcap kernel at block_m = 128 (D = 64) has no registers to spare for the loop over tiles (its
// consumers spilled with it).
FLASH4_HD constexpr bool bwd_persistent_kernel(int head_dim, bool softcap) {
  return !(softcap && bwd_tile_config(head_dim).block_m == 128);
}

#define FLASH4_CHECK_BWD_TILE(D)                                                                            \
  static_assert(bwd_tile_config(D).smem_bytes() <= kSmemBytesPerBlockMax, "backward smem over budget");     \
  static_assert(bwd_tile_config(D).q_bytes() % kSmemAlignment == 0, "dO must start on a swizzle atom");     \
  static_assert(bwd_tile_config(D).head_dim % bwd_tile_config(D).dq_box_cols() == 0, "whole dQ boxes");       \
  static_assert(bwd_tile_config(D).dq_offset() % 16 == 0, "the bulk reduce-add reads dQ 16-byte aligned");   \
  static_assert(bwd_tile_config(D).tile_cols() % bwd_tile_config(D).dq_cols_per_warpgroup() == 0, "dQ chunks"); \
  static_assert(bwd_tile_config(D).block_m % bwd_tile_config(D).box_cols() == 0, "whole 64-query boxes");      \
  static_assert(bwd_tile_config(D).consumer_warpgroups % bwd_tile_config(D).dq_row_slices() == 0, "dQ slices");
FLASH4_CHECK_BWD_TILE(64)
FLASH4_CHECK_BWD_TILE(96)
FLASH4_CHECK_BWD_TILE(128)
FLASH4_CHECK_BWD_TILE(192)
FLASH4_CHECK_BWD_TILE(256)
#undef FLASH4_CHECK_BWD_TILE

// Workspace rows: the per-head fp32 arrays (dQ accumulator, LSE in log2 units, D = rowsum(dO * O)) give
// every sequence block_m padding rows after its last, so that a query block never needs a bounds check,
// and start every sequence on a multiple of 4 rows, so that a block's 64 LSE / D floats are a 16-byte
// aligned bulk copy:
// fixed length: batch b, row i -> b * round_up(seqlen_q, block_m) + i;
// varlen: sequence b, row i -> round_up(cu_seqlens_q[b], 4) + b * (block_m + 4) + i. Sequence b then ends
// (padding included) at most at round_up(cu_seqlens_q[b + 1], 4) + b * (block_m + 4) + block_m + 3, before
// sequence b + 1 starts.
struct BwdWorkspaceRows {
  static constexpr int kRowAlignment = 4;  // 16 bytes of fp32
  int block_m;
  int seqlen_q;      // fixed length only
  bool varlen;

  FLASH4_HD static long long align_rows(long long rows) {
    return (rows + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  }
  FLASH4_HD int padded_seqlen() const { return (seqlen_q + block_m - 1) / block_m * block_m; }
  FLASH4_HD long long first_row(int batch, const int* cu_seqlens_q) const {
    return varlen ? align_rows(cu_seqlens_q[batch]) + (long long)batch * (block_m + kRowAlignment)
                  : (long long)batch * padded_seqlen();
  }
  // Rows per head (a multiple of 4, so every head's rows start 16-byte aligned too).
  FLASH4_HD long long rows_per_head(int batch, int total_q) const {
    return varlen ? align_rows(total_q) + (long long)batch * (block_m + kRowAlignment)
                  : (long long)batch * padded_seqlen();
  }
};

}  // namespace flash4
