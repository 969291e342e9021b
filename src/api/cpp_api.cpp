// The one out-of-line part of the C++ API (include/flash4/flash4.hpp): the default Workspace allocator, which
// needs the CUDA runtime that the public header keeps out of its users' translation units.
#include <cuda_runtime.h>

#include "flash4/flash4.hpp"

namespace flash4 {
namespace {

void* allocate_async(void* /*context*/, std::size_t bytes, flash4_stream_t stream) {
  void* pointer = nullptr;
  if (cudaMallocAsync(&pointer, bytes, stream) != cudaSuccess) {
    // The failure is reported through the Workspace's Status; clear it so that the caller's next
    // cudaGetLastError() does not report it a second time.
    cudaGetLastError();
    return nullptr;
  }
  return pointer;
}

void deallocate_async(void* /*context*/, void* pointer, std::size_t /*bytes*/, flash4_stream_t stream) {
  // Called from destructors, which cannot report a failure; the error is cleared for the same reason.
  if (cudaFreeAsync(pointer, stream) != cudaSuccess) cudaGetLastError();
}

}  // namespace

Allocator cuda_stream_allocator() { return Allocator{allocate_async, deallocate_async, nullptr}; }

}  // namespace flash4
