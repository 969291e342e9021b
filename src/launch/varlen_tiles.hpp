// The varlen tile prepare kernel's ABI (src/kernels/util/varlen_tiles.cu): it lists the varlen forward's
// tiles with rows into the forward's workspace (kernels/common/varlen_tiles.hpp) on the caller's stream,
// before the forward, so that the host never reads the sequence lengths.
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/varlen_tiles.hpp"

namespace flash4 {

// Enqueue the prepare kernel on `stream`; the launch's status.
cudaError_t launch_varlen_tiles(const VarlenTileSpace& space, cudaStream_t stream);

}  // namespace flash4
