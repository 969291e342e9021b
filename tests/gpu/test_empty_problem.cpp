// Empty problems on the GPU (host/empty_problem.hpp): flash4_fwd without keys writes O = 0 and LSE = -inf,
// flash4_bwd writes dq = 0 without keys and dk = dv = 0 without queries, and nothing else is touched: every
// tensor is poisoned, strided with padding between rows, heads and batches, and surrounded by guard regions.
// No attention kernel runs, so these cases do not depend on which kernels this build compiled.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flash4/flash4.h"
#include "gpu/gpu_available.hpp"

namespace flash4::test {
namespace {

constexpr std::uint16_t kPoison16 = 0xFFFF;  // a NaN in bf16 and fp16
constexpr std::uint32_t kPoison32 = 0xFFFFFFFF;  // a NaN in fp32
constexpr std::int64_t kGuard = 64;  // elements before and after every tensor (a 16-byte multiple)
constexpr std::int64_t kPad = 8;     // elements between rows, heads and batches (16 bytes)

// A device buffer of `count` elements of T, poisoned, of which [kGuard, kGuard + inner) is the tensor.
template <class T>
class Guarded {
 public:
  explicit Guarded(std::int64_t inner) : count_(inner + 2 * kGuard) {
    if (cudaMalloc(&base_, count_ * sizeof(T)) != cudaSuccess) base_ = nullptr;
    // cudaMemset may return before the memory is set, and the calls under test run on a non-blocking
    // stream that does not wait for it: without the synchronize the poison can land after the fill
    // (seen under ctest -j16 on the H200).
    if (base_ != nullptr && cudaMemset(base_, 0xFF, count_ * sizeof(T)) == cudaSuccess) cudaDeviceSynchronize();
  }
  ~Guarded() { cudaFree(base_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

  bool ok() const { return base_ != nullptr; }
  T* data() const { return base_ + kGuard; }
  std::vector<T> read() const {
    std::vector<T> host(count_);
    cudaMemcpy(host.data(), base_, count_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  std::int64_t count() const { return count_; }

 private:
  T* base_ = nullptr;
  std::int64_t count_;
};

// A (batch, seq, head, dim) tensor of 16-bit elements with padding on every axis.
struct Tensor4 {
  std::int64_t batch, seq, heads, dim;
  flash4_strides strides;

  // head_pad: the padding after each head's row (a multiple of kPad), so that tensors can differ in layout.
  Tensor4(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, std::int64_t head_pad = kPad)
      : batch(b), seq(s), heads(h), dim(d) {
    strides.head = dim + head_pad;
    strides.seq = heads * strides.head + kPad;
    strides.batch = std::max<std::int64_t>(seq, 1) * strides.seq + kPad;
  }
  std::int64_t span() const { return std::max<std::int64_t>(batch, 1) * strides.batch; }
};

// Every element of `host` (the whole guarded buffer) is `inside` within the tensor's extents and still the
// poison everywhere else (padding and guards).
::testing::AssertionResult check_tensor(const std::vector<std::uint16_t>& host, const Tensor4& t,
                                        std::uint16_t inside, const char* name) {
  std::vector<bool> in_tensor(host.size(), false);
  for (std::int64_t b = 0; b < t.batch; ++b)
    for (std::int64_t s = 0; s < t.seq; ++s)
      for (std::int64_t h = 0; h < t.heads; ++h)
        for (std::int64_t d = 0; d < t.dim; ++d)
          in_tensor[kGuard + b * t.strides.batch + s * t.strides.seq + h * t.strides.head + d] = true;
  for (std::size_t i = 0; i < host.size(); ++i) {
    const std::uint16_t want = in_tensor[i] ? inside : kPoison16;
    if (host[i] != want) {
      return ::testing::AssertionFailure() << name << ": element " << std::int64_t(i) - kGuard << " (relative to the base) is 0x"
                                           << std::hex << host[i] << ", expected 0x" << want
                                           << (in_tensor[i] ? " (inside the tensor)" : " (padding or guard)");
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult untouched(const std::vector<std::uint16_t>& host, const char* name) {
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (host[i] != kPoison16) return ::testing::AssertionFailure() << name << ": element " << i << " was written";
  }
  return ::testing::AssertionSuccess();
}

// The first `count` floats after the guard are -inf, the rest still the poison.
::testing::AssertionResult check_lse(const std::vector<float>& host, std::int64_t count) {
  for (std::int64_t i = 0; i < std::int64_t(host.size()); ++i) {
    const bool inside = i >= kGuard && i < kGuard + count;
    std::uint32_t bits = 0;
    std::memcpy(&bits, &host[i], sizeof(bits));
    if (inside ? !(std::isinf(host[i]) && host[i] < 0) : bits != kPoison32) {
      return ::testing::AssertionFailure() << "lse: entry " << i - kGuard << " is " << host[i] << " (bits 0x"
                                           << std::hex << bits << ")" << (inside ? ", expected -inf" : " in a guard");
    }
  }
  return ::testing::AssertionSuccess();
}

// The stream the calls go on: the fills must be asynchronous on it, so results are read after syncing it.
class EmptyProblemGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    FLASH4_REQUIRE_GPU();
    FLASH4_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  flash4_stream_t stream() const { return reinterpret_cast<flash4_stream_t>(stream_); }

  cudaStream_t stream_ = nullptr;
};

constexpr int kHeadDim = 64;
constexpr int kHeadsQ = 4;
constexpr int kHeadsKv = 2;

struct Forward {
  Tensor4 q, k, o;
  Guarded<std::uint16_t> q_buf, k_buf, v_buf, o_buf;
  Guarded<float> lse_buf;
  std::int64_t lse_count;

  Forward(int batch, int rows_q, int rows_k)
      : q(batch, rows_q, kHeadsQ, kHeadDim),
        k(batch, rows_k, kHeadsKv, kHeadDim),
        o(batch, rows_q, kHeadsQ, kHeadDim),
        q_buf(q.span()),
        k_buf(k.span()),
        v_buf(k.span()),
        o_buf(o.span()),
        lse_buf(std::int64_t{batch} * rows_q * kHeadsQ),
        lse_count(std::int64_t{batch} * rows_q * kHeadsQ) {}

  bool ok() const { return q_buf.ok() && k_buf.ok() && v_buf.ok() && o_buf.ok() && lse_buf.ok(); }

  flash4_fwd_params params(flash4_dtype dtype) const {
    flash4_fwd_params p{};
    p.struct_size = sizeof(p);
    p.dtype = dtype;
    p.q = q_buf.data();
    p.k = k_buf.data();
    p.v = v_buf.data();
    p.o = o_buf.data();
    p.lse = lse_buf.data();
    p.q_strides = q.strides;
    p.k_strides = p.v_strides = k.strides;
    p.o_strides = o.strides;
    p.batch = int(q.batch);
    p.seqlen_q = int(q.seq);
    p.seqlen_k = int(k.seq);
    p.heads_q = kHeadsQ;
    p.heads_kv = kHeadsKv;
    p.head_dim = kHeadDim;
    p.softmax_scale = 0.125f;
    p.window_left = p.window_right = -1;
    return p;
  }
};

TEST_F(EmptyProblemGpu, ForwardWithoutKeysWritesZeroOAndMinusInfinityLse) {
  for (flash4_dtype dtype : {FLASH4_DTYPE_BF16, FLASH4_DTYPE_FP16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(dtype == FLASH4_DTYPE_BF16 ? "bf16" : "fp16") + (causal ? " causal" : ""));
      Forward f(3, 37, 0);
      ASSERT_TRUE(f.ok());
      flash4_fwd_params p = f.params(dtype);
      p.causal = causal;
      std::size_t bytes = 1;
      ASSERT_EQ(flash4_fwd_workspace_size(&p, &bytes), FLASH4_SUCCESS) << flash4_last_error_message();
      EXPECT_EQ(bytes, 0u);
      ASSERT_EQ(flash4_fwd(&p, stream()), FLASH4_SUCCESS) << flash4_last_error_message();
      FLASH4_CUDA_OK(cudaStreamSynchronize(stream_));
      EXPECT_TRUE(check_tensor(f.o_buf.read(), f.o, 0, "o"));
      EXPECT_TRUE(check_lse(f.lse_buf.read(), f.lse_count));
      EXPECT_TRUE(untouched(f.q_buf.read(), "q"));
      EXPECT_TRUE(untouched(f.k_buf.read(), "k"));
      EXPECT_TRUE(untouched(f.v_buf.read(), "v"));
    }
  }
}

TEST_F(EmptyProblemGpu, ForwardWithoutKeysAndWithoutLseWritesO) {
  Forward f(1, 5, 0);
  ASSERT_TRUE(f.ok());
  flash4_fwd_params p = f.params(FLASH4_DTYPE_BF16);
  p.lse = nullptr;
  ASSERT_EQ(flash4_fwd(&p, stream()), FLASH4_SUCCESS) << flash4_last_error_message();
  FLASH4_CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(check_tensor(f.o_buf.read(), f.o, 0, "o"));
  EXPECT_TRUE(check_lse(f.lse_buf.read(), 0)) << "lse was NULL, its buffer must stay poisoned";
}

TEST_F(EmptyProblemGpu, VarlenForwardWithoutKeysFillsEveryPackedRow) {
  // Sequences of 3, 0 and 5 queries, none with keys: (total_q = 8, Hq, D) packed o, lse (Hq, total_q).
  Forward f(1, 8, 0);
  ASSERT_TRUE(f.ok());
  const std::vector<std::int32_t> cu_q = {0, 3, 3, 8};
  const std::vector<std::int32_t> cu_k = {0, 0, 0, 0};
  std::int32_t* cu = nullptr;
  FLASH4_CUDA_OK(cudaMalloc(&cu, 2 * cu_q.size() * sizeof(std::int32_t)));
  FLASH4_CUDA_OK(cudaMemcpy(cu, cu_q.data(), cu_q.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  FLASH4_CUDA_OK(cudaMemcpy(cu + cu_q.size(), cu_k.data(), cu_k.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  flash4_fwd_params p = f.params(FLASH4_DTYPE_BF16);
  p.batch = 3;
  p.cu_seqlens_q = cu;
  p.cu_seqlens_k = cu + cu_q.size();
  p.max_seqlen_q = 5;
  p.max_seqlen_k = 1;
  p.total_q = 8;
  p.total_k = 0;
  const flash4_status status = flash4_fwd(&p, stream());
  cudaStreamSynchronize(stream_);
  cudaFree(cu);
  ASSERT_EQ(status, FLASH4_SUCCESS) << flash4_last_error_message();
  EXPECT_TRUE(check_tensor(f.o_buf.read(), f.o, 0, "o"));
  EXPECT_TRUE(check_lse(f.lse_buf.read(), f.lse_count));
}

TEST_F(EmptyProblemGpu, ForwardWithoutQueriesWritesNothing) {
  Forward f(2, 0, 9);
  ASSERT_TRUE(f.ok());
  const flash4_fwd_params p = f.params(FLASH4_DTYPE_BF16);
  ASSERT_EQ(flash4_fwd(&p, stream()), FLASH4_SUCCESS) << flash4_last_error_message();
  FLASH4_CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(untouched(f.o_buf.read(), "o"));
  EXPECT_TRUE(check_lse(f.lse_buf.read(), 0));
}

struct Backward {
  Tensor4 q, k, dq, dk, dv;
  Guarded<std::uint16_t> q_buf, k_buf, v_buf, o_buf, dout_buf, dq_buf, dk_buf, dv_buf;
  Guarded<float> lse_buf;

  Backward(int batch, int rows_q, int rows_k)
      : q(batch, rows_q, kHeadsQ, kHeadDim),
        k(batch, rows_k, kHeadsKv, kHeadDim),
        dq(batch, rows_q, kHeadsQ, kHeadDim),
        dk(batch, rows_k, kHeadsKv, kHeadDim),
        dv(batch, rows_k, kHeadsKv, kHeadDim, 3 * kPad),  // its own layout: dk's and dv's strides must not mix
        q_buf(q.span()),
        k_buf(k.span()),
        v_buf(k.span()),
        o_buf(q.span()),
        dout_buf(q.span()),
        dq_buf(dq.span()),
        dk_buf(dk.span()),
        dv_buf(dv.span()),
        lse_buf(std::int64_t{batch} * rows_q * kHeadsQ) {}

  bool ok() const {
    return q_buf.ok() && k_buf.ok() && v_buf.ok() && o_buf.ok() && dout_buf.ok() && dq_buf.ok() && dk_buf.ok() &&
           dv_buf.ok() && lse_buf.ok();
  }

  flash4_bwd_params params() const {
    flash4_bwd_params p{};
    p.struct_size = sizeof(p);
    p.dtype = FLASH4_DTYPE_BF16;
    p.q = q_buf.data();
    p.k = k_buf.data();
    p.v = v_buf.data();
    p.o = o_buf.data();
    p.dout = dout_buf.data();
    p.lse = lse_buf.data();
    p.dq = dq_buf.data();
    p.dk = dk_buf.data();
    p.dv = dv_buf.data();
    p.q_strides = p.o_strides = p.dout_strides = q.strides;
    p.k_strides = p.v_strides = k.strides;
    p.dq_strides = dq.strides;
    p.dk_strides = dk.strides;
    p.dv_strides = dv.strides;
    p.batch = int(q.batch);
    p.seqlen_q = int(q.seq);
    p.seqlen_k = int(k.seq);
    p.heads_q = kHeadsQ;
    p.heads_kv = kHeadsKv;
    p.head_dim = kHeadDim;
    p.softmax_scale = 0.125f;
    p.window_left = p.window_right = -1;
    return p;
  }
};

// Runs flash4_bwd with the workspace it asks for (none is expected for an empty problem).
flash4_status run_backward(flash4_bwd_params p, cudaStream_t stream) {
  std::size_t bytes = 1;
  if (flash4_status s = flash4_bwd_workspace_size(&p, &bytes); s != FLASH4_SUCCESS) return s;
  EXPECT_EQ(bytes, 0u) << "an empty problem needs no workspace";
  void* workspace = nullptr;
  if (bytes > 0 && cudaMalloc(&workspace, bytes) != cudaSuccess) return FLASH4_ERROR_CUDA;
  p.workspace = workspace;
  p.workspace_bytes = bytes;
  const flash4_status status = flash4_bwd(&p, reinterpret_cast<flash4_stream_t>(stream));
  cudaStreamSynchronize(stream);
  cudaFree(workspace);
  return status;
}

TEST_F(EmptyProblemGpu, BackwardWithoutKeysZeroesDq) {
  Backward b(2, 19, 0);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(run_backward(b.params(), stream_), FLASH4_SUCCESS) << flash4_last_error_message();
  EXPECT_TRUE(check_tensor(b.dq_buf.read(), b.dq, 0, "dq"));
  EXPECT_TRUE(untouched(b.dk_buf.read(), "dk"));
  EXPECT_TRUE(untouched(b.dv_buf.read(), "dv"));
  EXPECT_TRUE(untouched(b.q_buf.read(), "q"));
  EXPECT_TRUE(untouched(b.dout_buf.read(), "dout"));
  EXPECT_TRUE(check_lse(b.lse_buf.read(), 0)) << "the backward reads lse, never writes it";
}

TEST_F(EmptyProblemGpu, BackwardWithoutQueriesZeroesDkAndDv) {
  Backward b(2, 0, 23);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(run_backward(b.params(), stream_), FLASH4_SUCCESS) << flash4_last_error_message();
  EXPECT_TRUE(check_tensor(b.dk_buf.read(), b.dk, 0, "dk"));
  EXPECT_TRUE(check_tensor(b.dv_buf.read(), b.dv, 0, "dv"));
  EXPECT_TRUE(untouched(b.dq_buf.read(), "dq"));
  EXPECT_TRUE(untouched(b.k_buf.read(), "k"));
  EXPECT_TRUE(untouched(b.v_buf.read(), "v"));
}

TEST_F(EmptyProblemGpu, BackwardWithoutAnyRowsWritesNothing) {
  Backward b(2, 0, 0);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(run_backward(b.params(), stream_), FLASH4_SUCCESS) << flash4_last_error_message();
  EXPECT_TRUE(untouched(b.dq_buf.read(), "dq"));
  EXPECT_TRUE(untouched(b.dk_buf.read(), "dk"));
  EXPECT_TRUE(untouched(b.dv_buf.read(), "dv"));
}

}  // namespace
}  // namespace flash4::test
