// Asynchronous 16-byte global-to-shared copies (cp.async, sm_80+), the decode kernel's loads: its K and V
// rows sit wherever a page table puts them, one row at a time, which TMA boxes do not describe.
#pragma once

#include <cstdint>

namespace flash4::sm90 {

// Copies 16 bytes from `source` to the shared address `destination`, or writes 16 zero bytes there
// (reading nothing) when `valid` is false; `source` must still be a valid generic address. .cg caches in
// L2 only: K and V are read once.
__device__ __forceinline__ void copy_async_16(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source), "r"(source_bytes)
               : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flash4::sm90
