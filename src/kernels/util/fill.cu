// Implements launch/fill.hpp: two tiny grid-stride kernels, one writing zero words into the rows of a strided
// 4-D tensor, one writing a value (or per-head values) into a float array. Architecture-independent; used where no attention
// kernel runs (empty problems), so their speed does not matter, only that they write exactly the extents.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "launch/fill.hpp"

namespace flash4 {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

// Rows (batch, seq, head) of one tensor, each row_words words of type Word; strides in bytes.
struct ZeroRows {
  char* base;
  std::int64_t seqs, heads;  // extents of the seq and head axes (batch is implied by `words`)
  std::int64_t stride_batch, stride_seq, stride_head;
  std::int64_t row_words;
  std::int64_t words;  // batch * seqs * heads * row_words
};

template <class Word>
__global__ void zero_rows(ZeroRows t) {
  const std::int64_t step = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < t.words; i += step) {
    const std::int64_t row = i / t.row_words;
    const std::int64_t head = row % t.heads;
    const std::int64_t seq = row / t.heads % t.seqs;
    const std::int64_t batch = row / t.heads / t.seqs;
    char* row_base = t.base + batch * t.stride_batch + seq * t.stride_seq + head * t.stride_head;
    reinterpret_cast<Word*>(row_base)[i % t.row_words] = Word{};
  }
}

__global__ void fill_floats(FloatFill f) {
  const std::int64_t step = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < f.count; i += step) {
    f.data[i] = f.per_head != nullptr ? f.per_head[i / f.run % f.heads] : f.value;
  }
}

unsigned blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <class Kernel, class... Args>
cudaError_t launch(Kernel kernel, std::int64_t items, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks_for(items));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

// The widest store (16, 8, 4, 2 or 1 bytes) that divides the base address, every stride of an axis with more
// than one entry, and the row: rows of bf16 head dims are 128-512 bytes at 16-byte aligned addresses.
std::int64_t word_bytes(const ZeroFill& f) {
  std::uint64_t common = reinterpret_cast<std::uintptr_t>(f.data) | std::uint64_t(f.extent[3] * f.element_bytes);
  for (int axis = 0; axis < 3; ++axis) {
    if (f.extent[axis] > 1) common |= std::uint64_t(f.stride[axis] * f.element_bytes);
  }
  std::int64_t bytes = 16;
  while (bytes > 1 && common % bytes != 0) bytes /= 2;
  return bytes;
}

}  // namespace

cudaError_t launch_zero_fill(const ZeroFill& f, cudaStream_t stream) {
  const std::int64_t word = word_bytes(f);
  ZeroRows t{};
  t.base = static_cast<char*>(f.data);
  t.seqs = f.extent[1];
  t.heads = f.extent[2];
  t.stride_batch = f.stride[0] * f.element_bytes;
  t.stride_seq = f.stride[1] * f.element_bytes;
  t.stride_head = f.stride[2] * f.element_bytes;
  t.row_words = f.extent[3] * f.element_bytes / word;
  t.words = f.extent[0] * f.extent[1] * f.extent[2] * t.row_words;
  switch (word) {
    case 16: return launch(zero_rows<uint4>, t.words, stream, t);
    case 8: return launch(zero_rows<uint2>, t.words, stream, t);
    case 4: return launch(zero_rows<std::uint32_t>, t.words, stream, t);
    case 2: return launch(zero_rows<std::uint16_t>, t.words, stream, t);
    default: return launch(zero_rows<std::uint8_t>, t.words, stream, t);
  }
}

cudaError_t launch_float_fill(const FloatFill& f, cudaStream_t stream) { return launch(fill_floats, f.count, stream, f); }

}  // namespace flash4
