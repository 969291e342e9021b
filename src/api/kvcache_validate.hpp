// Argument validation of flash4_kvcache_params (include/flash4/flash4_kvcache.h): every check the call needs
// before anything is planned or launched, reading only the struct (never device memory), so it runs and is
// tested without a GPU. Device-side values (cache_seqlens, cache_batch_idx, block_table) are the kernels' to
// check; the header says what they do with bad ones.
#pragma once

#include "api/validate.hpp"
#include "flash4/flash4_kvcache.h"

namespace flash4::api {

bool is_known_struct_size(const flash4_kvcache_params& params);
Check validate_kvcache(const flash4_kvcache_params& params);
// Validated params as the host layer sees them: causal = 1 sets window_right = 0, head_dim_v = 0 reads as
// head_dim.
flash4_kvcache_params canonicalize(const flash4_kvcache_params& params);

}  // namespace flash4::api
