// Argument validation for the C ABI: every check a call needs before anything is planned or launched.
// Pure host code (reads only the params struct, never device memory), so it runs and is tested without a GPU.
//
// Conventions decided here (the C ABI shims in c_api.cpp rely on them):
//  - batch >= 1 and heads_q, heads_kv >= 1 always. seqlen_q / seqlen_k (or total_q / total_k for varlen)
//    may be 0: that is an empty problem (see is_empty below). It is validated like any other call, then runs
//    no attention kernel: the shims write what it defines instead (host/empty_problem.hpp: o = 0 and
//    lse = -inf when there are no keys, zero gradients), which launches nothing when there is nothing to write.
//  - causal = 1 accepts any window_right >= -1 and reads it as 0 (canonicalize below), as FlashAttention does.
//  - The workspace is not checked here: only the host planner knows how many bytes a call needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flash4/flash4.h"

namespace flash4::api {

struct Check {
  flash4_status status = FLASH4_SUCCESS;
  std::string message;  // names the argument and its allowed values; empty on success

  bool ok() const { return status == FLASH4_SUCCESS; }
};

// Whether struct_size is the size of a params layout this library was released with. A caller compiled
// against an older header passes a smaller size; the shims copy only that many bytes.
bool is_known_struct_size(const flash4_fwd_params& params);
bool is_known_struct_size(const flash4_bwd_params& params);

Check validate_fwd(const flash4_fwd_params& params);
Check validate_bwd(const flash4_bwd_params& params);

// A validated problem with no query rows or no key rows: nothing to compute (host::is_empty_problem).
bool is_empty(const flash4_fwd_params& params);
bool is_empty(const flash4_bwd_params& params);

// Rule 3's head dims, shared with flash4_kvcache: head_dim a multiple of 8 in [8, 256], head_dim_v 0 or the
// same (UNSUPPORTED_HEAD_DIM, naming the one at fault).
Check check_head_dims(std::int32_t head_dim, std::int32_t head_dim_v);

// The params the host layer sees for validated input: causal = 1 sets window_right = 0.
flash4_fwd_params canonicalize(const flash4_fwd_params& params);
flash4_bwd_params canonicalize(const flash4_bwd_params& params);

}  // namespace flash4::api
