// Params for the validation tests (test_validation*.cpp): a valid forward and backward call on fake device
// pointers, and assertions that every entry point accepts or rejects them the same way, naming the argument.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <cuda_runtime_api.h>

#include "flash4/flash4.h"

namespace flash4::validation_test {

inline constexpr int kBatch = 2;
inline constexpr int kSeqlenQ = 128;
inline constexpr int kSeqlenK = 256;
inline constexpr int kHeadsQ = 8;
inline constexpr int kHeadsKv = 2;
inline constexpr int kHeadDim = 128;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kInf = std::numeric_limits<float>::infinity();

// Validation never dereferences pointers, so distinct 16-byte aligned addresses stand in for device memory.
template <class T = void>
T* fake_device_pointer(int index) {
  return reinterpret_cast<T*>(std::uintptr_t{0x1000000} * (index + 1));
}

template <class T>
T* offset_bytes(T* pointer, int bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(pointer) + bytes);
}

inline flash4_strides contiguous(int seqlen, int heads, int head_dim = kHeadDim) {
  return {int64_t{seqlen} * heads * head_dim, int64_t{heads} * head_dim, head_dim};
}

// The sizes, scale and (unbounded) window both directions' valid params share.
template <class Params>
void set_valid_sizes(Params& p) {
  p.batch = kBatch;
  p.seqlen_q = kSeqlenQ;
  p.seqlen_k = kSeqlenK;
  p.heads_q = kHeadsQ;
  p.heads_kv = kHeadsKv;
  p.head_dim = kHeadDim;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  p.window_left = -1;
  p.window_right = -1;
}

inline flash4_fwd_params valid_fwd() {
  flash4_fwd_params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_BF16;
  p.q = fake_device_pointer(0);
  p.k = fake_device_pointer(1);
  p.v = fake_device_pointer(2);
  p.o = fake_device_pointer(3);
  p.lse = fake_device_pointer<float>(4);
  p.q_strides = p.o_strides = contiguous(kSeqlenQ, kHeadsQ);
  p.k_strides = p.v_strides = contiguous(kSeqlenK, kHeadsKv);
  set_valid_sizes(p);
  return p;
}

inline flash4_bwd_params valid_bwd() {
  flash4_bwd_params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_FP16;
  p.q = fake_device_pointer(0);
  p.k = fake_device_pointer(1);
  p.v = fake_device_pointer(2);
  p.o = fake_device_pointer(3);
  p.dout = fake_device_pointer(4);
  p.lse = fake_device_pointer<const float>(5);
  p.dq = fake_device_pointer(6);
  p.dk = fake_device_pointer(7);
  p.dv = fake_device_pointer(8);
  p.q_strides = p.o_strides = p.dout_strides = p.dq_strides = contiguous(kSeqlenQ, kHeadsQ);
  p.k_strides = p.v_strides = p.dk_strides = p.dv_strides = contiguous(kSeqlenK, kHeadsKv);
  set_valid_sizes(p);
  return p;
}

// Packed varlen tensors: (total, heads, head_dim).
inline void make_varlen(flash4_fwd_params& p) {
  p.cu_seqlens_q = fake_device_pointer<const int32_t>(10);
  p.cu_seqlens_k = fake_device_pointer<const int32_t>(11);
  p.max_seqlen_q = kSeqlenQ;
  p.max_seqlen_k = kSeqlenK;
  p.total_q = kBatch * kSeqlenQ;
  p.total_k = kBatch * kSeqlenK;
}

inline std::string last_error() { return flash4_last_error_message(); }

// Whether a CUDA device is visible: calls that would write device memory are only made without one (they must
// then fail with FLASH4_ERROR_NO_DEVICE), never on fake pointers.
inline bool cuda_device_present() {
  int count = 0;
  const bool present = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return present;
}

// The call's status is `status` and its message names `argument`.
inline void expect_status(flash4_status got, flash4_status status, const std::string& argument, const char* call) {
  const std::string message = last_error();
  EXPECT_EQ(got, status) << call << " returned " << flash4_status_string(got) << " (" << message << "), expected "
                         << flash4_status_string(status);
  EXPECT_NE(message.find(argument), std::string::npos)
      << call << ": the message \"" << message << "\" does not name " << argument;
}

// Every fwd entry point rejects p the same way, before launching (a launch would need a GPU).
inline void expect_fwd_rejected(const flash4_fwd_params& p, flash4_status status, const std::string& argument) {
  expect_status(flash4_fwd_check(&p), status, argument, "flash4_fwd_check");
  std::size_t bytes = 1;
  expect_status(flash4_fwd_workspace_size(&p, &bytes), status, argument, "flash4_fwd_workspace_size");
  EXPECT_EQ(bytes, 0u) << "a rejected call reports 0 workspace bytes";
  expect_status(flash4_fwd(&p, nullptr), status, argument, "flash4_fwd");
}

inline void expect_bwd_rejected(const flash4_bwd_params& p, flash4_status status, const std::string& argument) {
  expect_status(flash4_bwd_check(&p), status, argument, "flash4_bwd_check");
  std::size_t bytes = 1;
  expect_status(flash4_bwd_workspace_size(&p, &bytes), status, argument, "flash4_bwd_workspace_size");
  EXPECT_EQ(bytes, 0u);
  expect_status(flash4_bwd(&p, nullptr), status, argument, "flash4_bwd");
}

inline void expect_fwd_valid(const flash4_fwd_params& p) {
  EXPECT_EQ(flash4_fwd_check(&p), FLASH4_SUCCESS) << last_error();
  EXPECT_EQ(last_error(), "");
}

}  // namespace flash4::validation_test
