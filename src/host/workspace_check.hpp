// The one check every entry point makes of the caller's device workspace before launching: present, large
// enough, and aligned as the C ABI promises (cudaMalloc's 256 bytes). Host-only.
#pragma once

#include <cstddef>
#include <string>

#include "launch/launch_result.hpp"

namespace flash4::host {

inline constexpr std::size_t kWorkspaceAlignment = 256;

// FLASH4_ERROR_INVALID_ARGUMENT for a missing or smaller workspace, FLASH4_ERROR_MISALIGNED for a
// misaligned one, else success. A call needing no workspace always passes. `need` says what the bytes are
// for (it completes "workspace: <need> <bytes> of device memory"); `size_function` is the entry point that
// sizes it.
LaunchResult check_workspace(const void* workspace, std::size_t given, std::size_t needed, const std::string& need,
                             const char* size_function);

}  // namespace flash4::host
