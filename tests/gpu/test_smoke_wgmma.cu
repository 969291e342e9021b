// Smoke test of the PTX layer on one tile: TMA loads a 64 x 64 bf16 A and B (128-byte swizzle) into
// shared memory, one warpgroup computes C = A B^T with four m64n64k16 wgmmas, and the result is checked
// against the CPU. It isolates the descriptor/swizzle/fragment conventions the forward kernel relies on.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu/gpu_available.hpp"
#include "host/tma_descriptor.hpp"
#include "kernels/sm90/ptx/mbarrier.cuh"
#include "kernels/sm90/ptx/tma.cuh"
#include "kernels/sm90/ptx/wgmma.cuh"
#include "reference/precision.hpp"
#include "reference/reference.hpp"

namespace {

constexpr int kTile = 64;
constexpr int kSwizzleBytes = 128;  // one 64-element bf16 row per swizzle width
constexpr int kTileBytes = kTile * kTile * 2;

struct SmokeMaps {
  CUtensorMap a;
  CUtensorMap b;
};

__global__ void smoke_kernel(const __grid_constant__ SmokeMaps maps, float* c) {
  using namespace flash4::sm90;
  extern __shared__ char smem_raw[];
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  auto* barrier = reinterpret_cast<uint64_t*>(smem + 2 * kTileBytes);
  if (threadIdx.x == 0) {
    mbarrier_init(barrier, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_bytes(barrier, 2 * kTileBytes);
    tma_load_4d(smem, &maps.a, barrier, 0, 0, 0, 0);
    tma_load_4d(smem + kTileBytes, &maps.b, barrier, 0, 0, 0, 0);
  }
  mbarrier_wait(barrier, 0);

  float acc[kTile / 2];
  const uint64_t a_desc = make_smem_descriptor(smem, 16, 8 * kSwizzleBytes, SmemSwizzle::k128B);
  const uint64_t b_desc = make_smem_descriptor(smem + kTileBytes, 16, 8 * kSwizzleBytes, SmemSwizzle::k128B);
  wgmma_fence();
#pragma unroll
  for (int step = 0; step < kTile / 16; ++step) {
    WgmmaSS<kTile, true>::run<false>(acc, advance_descriptor(a_desc, step * 32), advance_descriptor(b_desc, step * 32),
                                     step > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  pin_registers(acc);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  for (int k = 0; k < kTile / 8; ++k) {
    for (int r = 0; r < 4; ++r) {
      const int row = warp * 16 + lane / 4 + 8 * (r / 2);
      const int col = 8 * k + 2 * (lane % 4) + (r % 2);
      c[row * kTile + col] = acc[4 * k + r];
    }
  }
}

}  // namespace

TEST(GpuSmoke, TmaLoadAndWgmmaOfOneTile) {
  FLASH4_REQUIRE_GPU();
  using flash4::ref::Precision;
  const auto a = flash4::ref::random_tensor(kTile * kTile, Precision::bf16);
  const auto b = flash4::ref::random_tensor(kTile * kTile, Precision::bf16);
  std::vector<uint16_t> a_bits(a.size()), b_bits(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a_bits[i] = flash4::ref::to_bits(Precision::bf16, a[i]);
    b_bits[i] = flash4::ref::to_bits(Precision::bf16, b[i]);
  }
  void *a_dev = nullptr, *b_dev = nullptr;
  float* c_dev = nullptr;
  FLASH4_CUDA_OK(cudaMalloc(&a_dev, kTileBytes));
  FLASH4_CUDA_OK(cudaMalloc(&b_dev, kTileBytes));
  FLASH4_CUDA_OK(cudaMalloc(&c_dev, kTile * kTile * sizeof(float)));
  FLASH4_CUDA_OK(cudaMemcpy(a_dev, a_bits.data(), kTileBytes, cudaMemcpyHostToDevice));
  FLASH4_CUDA_OK(cudaMemcpy(b_dev, b_bits.data(), kTileBytes, cudaMemcpyHostToDevice));
  FLASH4_CUDA_OK(cudaMemset(c_dev, 0xFF, kTile * kTile * sizeof(float)));  // NaN poison

  SmokeMaps maps{};
  for (auto [map, base] : {std::pair{&maps.a, a_dev}, std::pair{&maps.b, b_dev}}) {
    flash4::host::TmaView view{base, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, {kTile, kTile, 1, 1},
                               {kTile * 2, kTileBytes, kTileBytes}, kTile, kTile, kSwizzleBytes};
    std::string error;
    ASSERT_TRUE(flash4::host::encode_tma_view(view, map, error)) << error;
  }
  const int smem = 2 * kTileBytes + 1024 + 64;
  FLASH4_CUDA_OK(cudaFuncSetAttribute(smoke_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  smoke_kernel<<<1, 128, smem>>>(maps, c_dev);
  FLASH4_CUDA_OK(cudaGetLastError());
  FLASH4_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> c(kTile * kTile);
  FLASH4_CUDA_OK(cudaMemcpy(c.data(), c_dev, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double max_error = 0;
  for (int i = 0; i < kTile; ++i) {
    for (int j = 0; j < kTile; ++j) {
      double expected = 0;
      for (int k = 0; k < kTile; ++k) expected += double(a[i * kTile + k]) * double(b[j * kTile + k]);
      max_error = std::max(max_error, std::fabs(expected - c[i * kTile + j]));
    }
  }
  // fp32 accumulation of 64 products of unit-normal bf16 values: errors ~1e-6; 1e-3 catches any layout bug.
  EXPECT_LT(max_error, 1e-3);
  std::printf("[smoke] TMA + wgmma m64n64k16 64x64x64 bf16: max |C - C_cpu| = %.3g\n", max_error);
  cudaFree(a_dev);
  cudaFree(b_dev);
  cudaFree(c_dev);
}
