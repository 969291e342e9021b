// The forward planner (host/planner.hpp) and the forward's workspace contract: which problems claim their
// tiles dynamically (and so need the workspace's tile counter), the grid and tile order it plans, and the
// C ABI's refusal of a missing, small or misaligned workspace before anything is launched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "flash4/flash4.h"
#include "host/device_info.hpp"
#include "host/planner.hpp"

namespace flash4::host {
namespace {

constexpr int kSms = 132;
constexpr std::size_t kL2Bytes = std::size_t{50} << 20;

flash4_fwd_params problem(int head_dim, int seqlen, bool causal) {
  flash4_fwd_params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_BF16;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = head_dim;
  p.softmax_scale = 1.0f / std::sqrt(float(head_dim));
  p.causal = causal;
  p.window_left = p.window_right = -1;
  // Distinct, 256-byte aligned fake device addresses 4 GiB apart (no overlap): never dereferenced.
  p.q = reinterpret_cast<const void*>(std::uintptr_t{1} << 32);
  p.k = reinterpret_cast<const void*>(std::uintptr_t{2} << 32);
  p.v = reinterpret_cast<const void*>(std::uintptr_t{3} << 32);
  p.o = reinterpret_cast<void*>(std::uintptr_t{4} << 32);
  p.q_strides = p.o_strides = {int64_t(seqlen) * p.heads_q * head_dim, int64_t(p.heads_q) * head_dim, head_dim};
  p.k_strides = p.v_strides = {int64_t(seqlen) * p.heads_kv * head_dim, int64_t(p.heads_kv) * head_dim, head_dim};
  return p;
}

DeviceInfo h200() {
  DeviceInfo device;
  device.sm_count = kSms;
  device.l2_bytes = kL2Bytes;
  device.major = 9;
  return device;
}

TEST(FwdPlanner, TilesOfUnequalCostAreClaimedDynamically) {
  flash4_fwd_params p = problem(128, 1000, false);
  EXPECT_FALSE(forward_schedules_dynamically(p));
  p.causal = 1;
  EXPECT_TRUE(forward_schedules_dynamically(p));
  p.causal = 0;
  p.window_left = 64;
  EXPECT_TRUE(forward_schedules_dynamically(p));
  p.window_left = -1;
  p.window_right = 5;
  EXPECT_TRUE(forward_schedules_dynamically(p));
  p.window_right = -1;
  p.cu_seqlens_q = p.cu_seqlens_k = reinterpret_cast<const int32_t*>(std::uintptr_t{5} << 32);
  EXPECT_TRUE(forward_schedules_dynamically(p));
}

TEST(FwdPlanner, GridTilesAndOrderFollowTheTileTable) {
  for (int head_dim : {64, 96, 128, 192, 256}) {
    for (bool causal : {false, true}) {
      for (int seqlen : {1, 191, 192, 193, 4096}) {
        SCOPED_TRACE("D " + std::to_string(head_dim) + " causal " + std::to_string(causal) + " S " +
                     std::to_string(seqlen));
        const flash4_fwd_params p = problem(head_dim, seqlen, causal);
        const FwdPlan plan = plan_forward(p, h200());
        const int block_m = fwd_tile_config(head_dim).block_m();
        EXPECT_EQ(plan.tile.block_m(), block_m);
        EXPECT_EQ(plan.order.num_m_blocks, (seqlen + block_m - 1) / block_m);
        EXPECT_EQ(plan.order.num_tiles(), p.batch * p.heads_q * plan.order.num_m_blocks);
        EXPECT_EQ(plan.num_ctas, std::min(plan.order.num_tiles(), kSms));
        // The counter only where tiles of unequal cost outnumber the CTAs (the shorter ones: one tile each).
        EXPECT_EQ(plan.dynamic, causal && plan.order.num_tiles() > kSms);
        EXPECT_EQ(plan.order.longest_first, causal);
        EXPECT_EQ(plan.window_right, causal ? 0 : -1);
      }
    }
  }
}

TEST(FwdPlanner, ThreeConsumerWarpgroupsAtHeadDim64) {
  const FwdTileConfig tile = fwd_tile_config(64);
  EXPECT_EQ(tile.consumer_warpgroups, 3);
  EXPECT_EQ(tile.block_m(), 192);
  EXPECT_EQ(tile.threads(), 512);
  // setmaxnreg can only share out the launch allocation.
  for (int head_dim : {64, 96, 128, 192, 256}) {
    const FwdTileConfig t = fwd_tile_config(head_dim);
    EXPECT_LE(kFwdProducerRegisters * kWarpgroupThreads + t.consumer_registers() * t.consumer_warpgroups * kWarpgroupThreads,
              t.registers_at_launch() * t.threads())
        << "D " << head_dim;
    EXPECT_EQ(t.consumer_registers() % 8, 0) << "D " << head_dim;
  }
}

TEST(FwdWorkspace, SizedForTheTileCounterOnlyWhenClaimedDynamically) {
  for (bool causal : {false, true}) {
    const flash4_fwd_params p = problem(128, 1000, causal);
    std::size_t bytes = 1;
    ASSERT_EQ(flash4_fwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << flash4_last_error_message();
    EXPECT_EQ(bytes, causal ? kFwdWorkspaceBytes : 0u);
  }
}

// Varlen adds the tile list to the counter's block, sized from batch, max_seqlen_q and total_q (canonical:
// a max_seqlen_q above total_q sizes as total_q), and a varlen forward given only the counter's block is
// refused before any launch.
TEST(FwdWorkspace, VarlenHoldsTheTileList) {
  flash4_fwd_params p = problem(128, 1000, false);
  p.cu_seqlens_q = reinterpret_cast<const int32_t*>(std::uintptr_t{5} << 32);
  p.cu_seqlens_k = reinterpret_cast<const int32_t*>(std::uintptr_t{6} << 32);
  p.max_seqlen_q = p.max_seqlen_k = 1000;
  p.total_q = p.total_k = 2000;
  std::size_t bytes = 0;
  ASSERT_EQ(flash4_fwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << flash4_last_error_message();
  EXPECT_EQ(bytes, varlen_workspace(p).bytes);
  EXPECT_GT(bytes, kFwdWorkspaceBytes);
  p.max_seqlen_q = 5000;
  std::size_t loose = 0;
  ASSERT_EQ(flash4_fwd_workspace_size(&p, &loose), FLASH4_SUCCESS) << flash4_last_error_message();
  p.max_seqlen_q = p.total_q;
  EXPECT_EQ(loose, varlen_workspace(p).bytes);

  if (flash4_fwd(&p, nullptr) == FLASH4_ERROR_NO_KERNEL) GTEST_SKIP() << "this build has no bf16 D = 128 forward";
  p.workspace = reinterpret_cast<void*>(std::uintptr_t{7} << 32);
  p.workspace_bytes = kFwdWorkspaceBytes;
  EXPECT_EQ(flash4_fwd(&p, nullptr), FLASH4_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(flash4_last_error_message()).find("workspace"), std::string::npos)
      << flash4_last_error_message();
}

// A causal forward without its workspace, with too little of it, or misaligned, is refused with a message
// naming the workspace, before any CUDA call (so on a machine without a GPU too).
TEST(FwdWorkspace, MissingSmallOrMisalignedIsRefusedBeforeAnyLaunch) {
  flash4_fwd_params p = problem(128, 1000, true);
  if (flash4_fwd(&p, nullptr) == FLASH4_ERROR_NO_KERNEL) GTEST_SKIP() << "this build has no bf16 D = 128 forward";
  const auto expect_refused = [&](flash4_status status) {
    EXPECT_EQ(flash4_fwd(&p, nullptr), status);
    EXPECT_NE(std::string(flash4_last_error_message()).find("workspace"), std::string::npos)
        << flash4_last_error_message();
  };
  expect_refused(FLASH4_ERROR_INVALID_ARGUMENT);  // NULL
  p.workspace = reinterpret_cast<void*>(std::uintptr_t{6} << 32);
  p.workspace_bytes = kFwdWorkspaceBytes - 1;
  expect_refused(FLASH4_ERROR_INVALID_ARGUMENT);
  p.workspace = reinterpret_cast<void*>((std::uintptr_t{6} << 32) + 16);
  p.workspace_bytes = kFwdWorkspaceBytes;
  expect_refused(FLASH4_ERROR_MISALIGNED);
}

}  // namespace
}  // namespace flash4::host
