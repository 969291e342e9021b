// Which built kernel serves a call: the head dims of the kernels this build compiled (CMake's FLASH4_DTYPES x
// FLASH4_HEAD_DIMS), and the smallest of them wide enough for the call's head dims. A kernel of head dim W
// serves any head_dim, head_dim_v <= W: its TMA maps are encoded with the true head dims, so the loads
// zero-fill the columns past them (zero columns of q and k add nothing to a score, of v give output columns
// that are never stored), and every store stops at the true head dim (docs/design.md, "Head dims").
// Pure host code, unit-tested without a GPU.
#pragma once

#include <span>

#include "flash4/flash4.h"

namespace flash4::host {

struct BuiltKernel {
  flash4_dtype dtype;
  int head_dim;
};

// The forward, backward and decode (flash4_kvcache) kernels of this build; a decode kernel's head dim is
// its width (launch/decode_config.hpp), and it serves head dims up to it by the same rule.
std::span<const BuiltKernel> built_forward_kernels();
std::span<const BuiltKernel> built_backward_kernels();
std::span<const BuiltKernel> built_decode_kernels();

// The smallest head dim of `built` for `dtype` that is >= needed; 0 when there is none.
int serving_head_dim(std::span<const BuiltKernel> built, flash4_dtype dtype, int needed);

// The head dim of v, o, dout and dv: head_dim_v, or head_dim where head_dim_v is 0 (flash4.h).
template <class Params>
int value_head_dim(const Params& params) {
  return params.head_dim_v != 0 ? params.head_dim_v : params.head_dim;
}

// The width a kernel needs for these params: the larger of the two head dims.
template <class Params>
int needed_head_dim(const Params& params) {
  return params.head_dim > value_head_dim(params) ? params.head_dim : value_head_dim(params);
}

}  // namespace flash4::host
