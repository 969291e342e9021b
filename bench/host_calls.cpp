// flash4-host-calls: the host time of the C ABI's calls alone, at the tiny shape of
// `python -m flash4.bench --host-overhead` (B=1 N=128 H=8 D=128 bf16 causal), without Python in the way.
//   - validation (flash4_*_check, flash4_*_workspace_size): with the params of the call before (remembered by
//     the thread) and with params that differ from them in one pointer (validated afresh); no device needed;
//   - with a GPU: flash4_fwd and flash4_bwd enqueued back to back on real buffers (with their workspace-size
//     call, as the Python package makes it), the stream synchronized between loops and not timed.
// Each figure is the median over 15 loops of the loop's wall time per call.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "flash4/flash4.h"

namespace {

constexpr int kBatch = 1, kSeqlen = 128, kHeads = 8, kHeadDim = 128;
constexpr int kLoops = 15;

template <class Call, class Sync>
double median_us(int calls, Call call, Sync sync) {
  std::vector<double> per_call;
  for (int loop = 0; loop < kLoops; ++loop) {
    sync();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call(i);
    per_call.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
                       calls);
  }
  sync();
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

void print(const char* what, double us) { std::printf("%-58s %8.2f us\n", what, us); }

// q, k, v, o, dout, dq, dk, dv (elements each) and lse, at distinct 256-byte aligned addresses from `base`.
struct Buffers {
  std::uintptr_t tensor[8];
  std::uintptr_t lse;
};

Buffers lay_out(std::uintptr_t base) {
  const std::uintptr_t tensor_bytes = std::uintptr_t{kBatch} * kSeqlen * kHeads * kHeadDim * 2;
  Buffers b{};
  for (int i = 0; i < 8; ++i) b.tensor[i] = base + i * tensor_bytes;
  b.lse = base + 8 * tensor_bytes;
  return b;
}

std::size_t buffer_bytes() { return 8 * std::size_t{kBatch} * kSeqlen * kHeads * kHeadDim * 2 + kBatch * kHeads * kSeqlen * 4; }

const flash4_strides kPacked{std::int64_t{kSeqlen} * kHeads * kHeadDim, kHeads * kHeadDim, kHeadDim};

// The fields both params structs share: the problem and its options.
template <class Params>
Params problem() {
  Params p{};
  p.struct_size = sizeof(p);
  p.dtype = FLASH4_DTYPE_BF16;
  p.batch = kBatch;
  p.seqlen_q = p.seqlen_k = kSeqlen;
  p.heads_q = p.heads_kv = kHeads;
  p.head_dim = kHeadDim;
  p.softmax_scale = 0.08838834764f;
  p.causal = 1;
  p.window_left = -1;
  p.window_right = 0;
  return p;
}

template <class T>
T* at(std::uintptr_t address) {
  return reinterpret_cast<T*>(address);
}

flash4_fwd_params fwd_params(const Buffers& b) {
  auto p = problem<flash4_fwd_params>();
  p.q = at<const void>(b.tensor[0]);
  p.k = at<const void>(b.tensor[1]);
  p.v = at<const void>(b.tensor[2]);
  p.o = at<void>(b.tensor[3]);
  p.lse = at<float>(b.lse);
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = kPacked;
  return p;
}

flash4_bwd_params bwd_params(const Buffers& b) {
  auto p = problem<flash4_bwd_params>();
  p.q = at<const void>(b.tensor[0]);
  p.k = at<const void>(b.tensor[1]);
  p.v = at<const void>(b.tensor[2]);
  p.o = at<const void>(b.tensor[3]);
  p.dout = at<const void>(b.tensor[4]);
  p.lse = at<const float>(b.lse);
  p.dq = at<void>(b.tensor[5]);
  p.dk = at<void>(b.tensor[6]);
  p.dv = at<void>(b.tensor[7]);
  p.q_strides = p.k_strides = p.v_strides = p.o_strides = p.dout_strides = p.dq_strides = p.dk_strides =
      p.dv_strides = kPacked;
  return p;
}

// Validation: the same params as the call before, or params differing from them in q.
template <class Params, class Call>
void time_validation(const char* name, Params p, Call call) {
  Params other = p;
  other.q = static_cast<const char*>(p.q) + (std::uintptr_t{1} << 30);
  const auto none = [] {};
  char line[96];
  std::snprintf(line, sizeof(line), "%s, params of the call before", name);
  print(line, median_us(100000, [&](int) { call(&p); }, none));
  std::snprintf(line, sizeof(line), "%s, params differing from them", name);
  print(line, median_us(100000, [&](int i) { call(i % 2 ? &p : &other); }, none));
}

// flash4_<direction>_workspace_size then flash4_<direction>, `calls` times, on real buffers.
template <class Params, class Size, class Launch>
int time_launches(const char* name, Params p, Size size, Launch launch, cudaStream_t stream) {
  std::size_t bytes = 0;
  if (size(&p, &bytes) != FLASH4_SUCCESS) return std::printf("%s: %s\n", name, flash4_last_error_message()), 1;
  void* workspace = nullptr;
  if (bytes > 0 && cudaMalloc(&workspace, bytes) != cudaSuccess) return std::printf("%s: cudaMalloc\n", name), 1;
  p.workspace = workspace;
  p.workspace_bytes = bytes;
  flash4_status status = FLASH4_SUCCESS;
  const double us = median_us(
      100,
      [&](int) {
        std::size_t needed = 0;
        if (status == FLASH4_SUCCESS) status = size(&p, &needed);
        if (status == FLASH4_SUCCESS) status = launch(&p, stream);
      },
      [&] { cudaStreamSynchronize(stream); });
  cudaFree(workspace);
  if (status != FLASH4_SUCCESS) return std::printf("%s: %s\n", name, flash4_last_error_message()), 1;
  print(name, us);
  return 0;
}

}  // namespace

int main() {
  const Buffers fake = lay_out(std::uintptr_t{1} << 40);  // never dereferenced by validation
  time_validation("flash4_fwd_check", fwd_params(fake), flash4_fwd_check);
  time_validation("flash4_bwd_check", bwd_params(fake), flash4_bwd_check);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: the launches are not timed\n");
    return 0;
  }
  void* memory = nullptr;
  cudaStream_t stream = nullptr;
  if (cudaMalloc(&memory, buffer_bytes()) != cudaSuccess || cudaMemset(memory, 0, buffer_bytes()) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess) {
    std::printf("CUDA setup failed\n");
    return 1;
  }
  const Buffers real = lay_out(reinterpret_cast<std::uintptr_t>(memory));
  int failures = time_launches("flash4_fwd_workspace_size + flash4_fwd", fwd_params(real), flash4_fwd_workspace_size,
                               flash4_fwd, stream);
  failures += time_launches("flash4_bwd_workspace_size + flash4_bwd", bwd_params(real), flash4_bwd_workspace_size,
                            flash4_bwd, stream);
  cudaStreamDestroy(stream);
  cudaFree(memory);
  return failures;
}
